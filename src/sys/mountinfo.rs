//! The one reader of `/proc/self/mountinfo` (proc_pid_mountinfo(5)): which mounts exist, which
//! of them serve a given table, and the mount's source name.
//!
//! Lines look like `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`: field 1
//! is the mount id, field 3 the device (`major:minor`), field 5 the mount point (octal-escaped:
//! `\040` is a space), then optional fields up to `-`, the file system type and the source.
//! A line that does not have this shape is skipped.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One mount of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Field 1: the mount id (unique while the mount exists).
    pub id: u64,
    /// Field 3: the device, `major:minor`.
    pub dev: String,
    /// Field 5, unescaped.
    pub mount_point: PathBuf,
    /// The first field after `-`: e.g. `fuse` or `fuse.tinydelta`.
    pub fs_type: String,
    /// The second field after `-`: e.g. `tinydelta:/path/to/table`.
    pub source: String,
}

/// Every mount visible to this process, in mountinfo order (a later entry on the same mount
/// point is mounted over the earlier one). Empty when mountinfo cannot be read.
pub fn entries() -> Vec<MountEntry> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines().filter_map(parse_line).collect()
}

fn parse_line(l: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = l.split(' ').collect();
    let sep = fields.iter().position(|f| *f == "-")?;
    Some(MountEntry {
        id: fields.first()?.parse().ok()?,
        dev: fields.get(2)?.to_string(),
        mount_point: PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(fields.get(4)?))),
        fs_type: fields.get(sep + 1)?.to_string(),
        source: fields.get(sep + 2)?.to_string(),
    })
}

/// The topmost (last) mount on `path` (canonical), if `path` is a mount point.
pub fn entry(path: &Path) -> Option<MountEntry> {
    entries().into_iter().rev().find(|e| e.mount_point == path)
}

/// The mount's source name, `tinydelta:<table path>`, as `mount` and /proc/self/mountinfo show
/// it. fusermount3 gets it inside its comma-separated `-o` list, so a comma in the table path
/// would add mount options of the path's choosing (`x,allow_other`): commas, backslashes,
/// whitespace and control characters are replaced by `?` (the name is only a label; the table
/// path itself never reaches the mount options).
pub fn fs_name(table_root: &Path) -> String {
    let shown: String = table_root
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c == ',' || c == '\\' || c == '=' || c.is_whitespace() || c.is_control() {
                '?'
            } else {
                c
            }
        })
        .collect();
    format!("tinydelta:{shown}")
}

/// The mount points where `table_root` is mounted by a tinydelta-mount: FUSE entries (type
/// `fuse`, or `fuse.tinydelta` where the subtype is recorded) whose source
/// (`tinydelta:<table path>`) names the same folder (compared by device and inode, or by the
/// source name when that path cannot be resolved). Empty when none is visible here (another
/// mount namespace) or mountinfo cannot be read.
pub fn mounted_at(table_root: &Path) -> Vec<PathBuf> {
    let want = fs_name(table_root);
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let ours = id(table_root);
    entries()
        .into_iter()
        .filter(|m| m.fs_type == "fuse" || m.fs_type == "fuse.tinydelta")
        .filter(|m| {
            m.source == want
                || m.source
                    .strip_prefix("tinydelta:")
                    .is_some_and(|p| ours.is_some() && id(Path::new(p)) == ours)
        })
        .map(|m| m.mount_point)
        .collect()
}

/// Undo mountinfo's octal escapes (`\040` space, `\011` tab, `\012` newline, `\134` backslash).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(unescape(r"/mnt/a\040b"), b"/mnt/a b");
        assert_eq!(unescape(r"/x\\"), br"/x\\");
        assert_eq!(unescape("/"), b"/");
    }

    #[test]
    fn a_line_parses_and_a_short_one_is_skipped() {
        let e = parse_line(r"36 35 98:0 /mnt1 /mnt/a\040b rw,noatime master:1 - fuse tinydelta:/t rw").unwrap();
        assert_eq!(e.id, 36);
        assert_eq!(e.dev, "98:0");
        assert_eq!(e.mount_point, Path::new("/mnt/a b"));
        assert_eq!(e.fs_type, "fuse");
        assert_eq!(e.source, "tinydelta:/t");
        assert_eq!(parse_line("36 35 98:0"), None);
    }

    #[test]
    fn fs_name_cannot_add_mount_options() {
        assert_eq!(fs_name(Path::new("/data/t")), "tinydelta:/data/t");
        let n = fs_name(Path::new("/tmp/x,allow_other,dev\\,suid=1\nfoo bar"));
        assert!(
            !n.contains(',') && !n.contains('\\') && !n.contains('\n') && !n.contains(' '),
            "{n}"
        );
        assert_eq!(n.matches('=').count(), 0, "{n}");
    }
}
