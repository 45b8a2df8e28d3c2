//! The log segment: which versions a table has, proven from one listing of `_delta_log/`
//! (in the spirit of delta-kernel-rs's `LogSegment`). The only code that lists the log.
//!
//! From a listing (through [`crate::sys::beneath::Dir`], so nothing is followed or blocked on) the
//! segment takes the first version whose state it can build (version 0, or the newest
//! checkpoint when older commits were cleaned up), then walks the commits upwards: the first
//! missing version below a commit that exists is a hole, and a hole is damage, never the end.
//! A commit name that is not a regular file (a symlink, FIFO, directory) is damage at its
//! version. See docs/FORMAT.md, "The log segment".

use std::collections::BTreeSet;
use std::path::Path;

use crate::sys::beneath::{Dir, Kind};
use crate::error::{Error, Result};
use crate::log::files::{LogFile, commit_file_name};

/// What a listing is trusted by: `_delta_log/`'s inode, mtime (s, ns) and ctime (s, ns).
pub type FolderStamp = (u64, i64, i64, i64, i64);

/// Everything a listing of `_delta_log/` found, by kind.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Versions with a commit file, ascending (a regular file, or of a type the folder listing
    /// does not report: opening it then refuses anything but a regular file, without blocking).
    pub commits: Vec<u64>,
    /// Names of the right form that are not regular files: (name, version if a commit).
    pub not_regular: Vec<(String, Option<u64>)>,
    /// Versions with a `.crc` file.
    pub crcs: BTreeSet<u64>,
    /// Versions with a Delta (Parquet) checkpoint.
    pub delta_checkpoints: BTreeSet<u64>,
    /// Commit temporaries (names).
    pub temps: Vec<String>,
    /// Whether `_last_checkpoint` exists.
    pub last_checkpoint: bool,
}

impl Listing {
    /// List `log` (the `_delta_log` directory). Errors: [`Error::Io`] naming the folder (a
    /// listing error is never a shorter listing).
    pub fn read(log: &Dir) -> Result<Listing> {
        use rustix::fs::{FileType, Mode, OFlags};
        let io = |e: rustix::io::Errno| {
            Error::io(
                "list",
                log.path().to_path_buf(),
                std::io::Error::from_raw_os_error(e.raw_os_error()),
            )
        };
        // A fresh descriptor of the same folder (never a path), so the listing starts at its start.
        let fd = rustix::fs::openat(
            log.fd(),
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        let mut dir = rustix::fs::Dir::new(fd).map_err(io)?;
        let mut l = Listing::default();
        let mut crcs = Vec::new();
        // Commit and checksum names are the hot path (two per version, 100,000 versions in a
        // long log): parsed from the bytes with no allocation; every other name goes through
        // LogFile::parse.
        for ent in &mut dir {
            let ent = ent.map_err(io)?;
            let name = ent.file_name().to_bytes();
            let kind = match ent.file_type() {
                FileType::RegularFile | FileType::Unknown => Kind::File,
                FileType::Directory => Kind::Dir,
                FileType::Symlink => Kind::Symlink,
                _ => Kind::Other,
            };
            if name.len() == 24
                && name.ends_with(b".crc")
                && kind == Kind::File
                && let Some(v) = version_digits(name)
            {
                crcs.push(v);
                continue;
            }
            if name.len() == 25 && name.ends_with(b".json") && name[..20].iter().all(u8::is_ascii_digit) {
                // 20 digits can exceed u64: such a name is not a version.
                let Some(v) = version_digits(name) else { continue };
                if kind == Kind::File {
                    l.commits.push(v);
                } else {
                    l.not_regular
                        .push((String::from_utf8_lossy(name).into_owned(), Some(v)));
                }
                continue;
            }
            let Ok(name) = std::str::from_utf8(name) else { continue };
            if name == "." || name == ".." {
                continue;
            }
            let regular = kind == Kind::File;
            match LogFile::parse(name) {
                LogFile::Commit(v) => l.not_regular.push((name.to_string(), Some(v))),
                LogFile::Other => {}
                _ if !regular => l.not_regular.push((name.to_string(), None)),
                LogFile::Crc(v) => {
                    l.crcs.insert(v);
                }
                LogFile::DeltaCheckpoint(v) => {
                    l.delta_checkpoints.insert(v);
                }
                LogFile::Temp(_) => l.temps.push(name.to_string()),
                LogFile::LastCheckpoint => l.last_checkpoint = true,
            }
        }
        l.commits.sort_unstable();
        // One bulk build (sorted) rather than an insert per name.
        let mut all: BTreeSet<u64> = crcs.into_iter().collect();
        all.append(&mut l.crcs);
        l.crcs = all;
        Ok(l)
    }
}

/// How many times [`list_segment`] lists again when a hole it saw is a commit that exists.
const RELISTS: u32 = 4;

/// List `log` (the `_delta_log/` folder of the table at `root`) and build its segment with
/// `build`, listing again while the first hole the segment shows names a commit that exists when
/// asked by name: readdir(3) may miss a name created while it runs and still return one created
/// after it (ext4 returns names in hash order), so a listing that raced a writer can show a hole
/// that never was. A hole still there after [`RELISTS`] more listings is reported as it is.
///
/// Errors: [`Error::Io`] of the listing or the `stat`; `build`'s errors.
pub fn list_segment(
    log: &Dir,
    build: impl Fn(&Listing) -> Result<LogSegment>,
) -> Result<(Listing, Result<LogSegment>)> {
    let mut tries = 0;
    loop {
        let listing = Listing::read(log)?;
        let seg = build(&listing);
        let raced = match &seg {
            Ok(LogSegment { damage: Some(d), .. })
                if tries < RELISTS && !listing.not_regular.iter().any(|(_, v)| *v == Some(d.version)) =>
            {
                log.stat(&commit_file_name(d.version))?.is_some()
            }
            _ => false,
        };
        if !raced {
            return Ok((listing, seg));
        }
        tries += 1;
    }
}

/// The version named by the first 20 bytes of `name` when they are digits of a `u64`.
fn version_digits(name: &[u8]) -> Option<u64> {
    let digits = name.get(..20)?;
    if !digits.iter().all(u8::is_ascii_digit) || digits > &b"18446744073709551615"[..] {
        return None;
    }
    Some(digits.iter().fold(0u64, |v, d| v * 10 + u64::from(d - b'0')))
}

/// Damage that ends the readable part of the log: versions from `version` on fail with `error`.
#[derive(Debug, Clone)]
pub struct Damage {
    /// The first version that cannot be read.
    pub version: u64,
    /// The error every read at or past `version` gives (an [`Error::Corrupt`]).
    pub path: std::path::PathBuf,
    /// Why.
    pub reason: String,
}

impl Damage {
    /// The error to return.
    pub fn error(&self) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// The versions a table has, proven from one listing.
#[derive(Debug, Clone)]
pub struct LogSegment {
    /// The oldest version that can be built: 0, or a checkpoint when older commits are gone
    /// (versions before it are "not available", not damage).
    pub first: u64,
    /// The checkpoint (tinydelta's or Delta's) replay starts from, when `first > 0`.
    pub start_checkpoint: Option<u64>,
    /// Versions from `first` on with a Delta (Parquet) checkpoint file, ascending: where
    /// replay may start (PROTOCOL "Checkpoints"; the reader proves one complete and readable,
    /// else uses an older one, `Table::snapshot`).
    pub delta_checkpoints: Vec<u64>,
    /// The newest version whose commit exists and that no hole or bad entry precedes.
    pub end: u64,
    /// The newest commit present at all (`end`, or past a hole).
    pub newest_present: u64,
    /// The first hole or non-regular commit name, if any.
    pub damage: Option<Damage>,
}

impl LogSegment {
    /// Build the segment from `listing` of the table at `root`; `checkpoints` are the versions of
    /// tinydelta's own checkpoints (`_tinydelta/checkpoints/`). Errors: [`Error::TableNotFound`]
    /// when there are no commits; [`Error::Corrupt`] when the oldest commits are gone and no
    /// checkpoint tinydelta can read covers them.
    pub fn new(
        root: &Path,
        listing: &Listing,
        checkpoints: impl FnOnce() -> Result<BTreeSet<u64>>,
    ) -> Result<LogSegment> {
        let log = root.join(crate::log::files::LOG_DIR);
        // A log of a checkpoint alone (every commit cleaned up) is a log segment too (PROTOCOL
        // "Checkpoints"): its version is the newest checkpoint's, replayed from it with no
        // commit after it.
        let lowest = match (listing.commits.first(), listing.delta_checkpoints.last()) {
            (Some(&lowest), _) => lowest,
            (None, _) if listing.not_regular.iter().any(|(_, v)| *v == Some(0)) => {
                let name = listing.not_regular.iter().find(|(_, v)| *v == Some(0)).map(|(n, _)| n.as_str());
                return Err(Error::Corrupt {
                    path: log.join(name.unwrap_or_default()),
                    reason: "version 0 is not a regular file".into(),
                });
            }
            (None, Some(&c)) if c < u64::MAX => c + 1,
            (None, _) => return Err(Error::TableNotFound(root.to_path_buf())),
        };
        // Where replay can start: version 0, or the newest checkpoint at or after the oldest
        // commit minus one (commits before it may have been cleaned up, Delta log retention).
        let (first, start_checkpoint) = if lowest == 0 {
            (0, None)
        } else {
            // tinydelta's checkpoints and Delta's Parquet ones alike.
            let mut all = checkpoints()?;
            all.extend(listing.delta_checkpoints.iter().copied());
            match all.range(lowest - 1..).next().copied() {
                Some(c) if c + 1 >= lowest => (c, Some(c)),
                _ => {
                    let why = "and no checkpoint covers them";
                    return Err(Error::Corrupt {
                        path: log.join(commit_file_name(0)),
                        reason: format!(
                            "versions before {lowest} are not available (their commits were removed) {why}"
                        ),
                    });
                }
            }
        };
        let newest_present = listing
            .commits
            .last()
            .copied()
            .unwrap_or(0)
            .max(listing.not_regular.iter().filter_map(|(_, v)| *v).max().unwrap_or(0))
            .max(first);
        let mut end = first;
        let mut damage = None;
        // Walk the sorted commits from the start: the first version that is not the next one
        // expected is the first hole (or the first name that is not a regular file).
        let start = first.max(lowest);
        let from = listing.commits.partition_point(|c| *c < start);
        let mut present = listing.commits[from..].iter().copied().peekable();
        for v in start..=newest_present {
            if present.peek() == Some(&v) {
                present.next();
                end = v;
                continue;
            }
            let path = log.join(commit_file_name(v));
            let what = if listing.not_regular.iter().any(|(_, n)| *n == Some(v)) {
                "the commit is not a regular file (a symlink, FIFO or folder)".to_string()
            } else {
                format!("the commit is missing, but version {newest_present} exists (a hole in the log)")
            };
            let Error::Corrupt { path, reason } = crate::log::files::damaged(&path, v, what) else {
                unreachable!("damaged() builds Error::Corrupt")
            };
            damage = Some(Damage {
                version: v,
                path,
                reason,
            });
            break;
        }
        if let Some(d) = &damage
            && d.version > 0
        {
            end = d.version - 1;
        }
        Ok(LogSegment {
            first,
            start_checkpoint,
            delta_checkpoints: listing.delta_checkpoints.range(first..).copied().collect(),
            end,
            newest_present,
            damage,
        })
    }

    /// Whether `version` can be read: Ok for `first..=end`; the damage error at or past a
    /// damaged version; `None` (not found) past the newest commit or before `first`.
    pub fn check(&self, version: u64) -> Option<Result<()>> {
        if let Some(d) = &self.damage
            && version >= d.version
            && version <= self.newest_present
        {
            return Some(Err(d.error()));
        }
        (version >= self.first && version <= self.end).then_some(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(commits: &[u64], cps: &[u64]) -> Result<LogSegment> {
        let l = Listing {
            commits: commits.to_vec(),
            ..Default::default()
        };
        LogSegment::new(Path::new("/t"), &l, || Ok(cps.iter().copied().collect()))
    }

    /// A listing that missed a commit created while it ran (simulated: the first listing the
    /// builder sees lacks version 1) is taken again; a real hole stays damage.
    #[test]
    fn a_hole_that_exists_by_name_is_listed_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        for v in [0u64, 1, 2] {
            std::fs::write(dir.path().join(commit_file_name(v)), b"{}").expect("write");
        }
        let log = Dir::open(dir.path()).expect("open");
        let calls = std::cell::Cell::new(0);
        let build = |l: &Listing| {
            calls.set(calls.get() + 1);
            let mut l = l.clone();
            if calls.get() == 1 {
                l.commits.retain(|v| *v != 1);
            }
            LogSegment::new(Path::new("/t"), &l, || Ok(BTreeSet::new()))
        };
        let (_, seg) = list_segment(&log, build).expect("list");
        let seg = seg.expect("segment");
        assert_eq!((seg.end, seg.damage.is_none(), calls.get()), (2, true, 2));

        std::fs::remove_file(dir.path().join(commit_file_name(1))).expect("rm");
        calls.set(10);
        let (_, seg) = list_segment(&log, build).expect("list");
        let seg = seg.expect("segment");
        assert_eq!((seg.end, seg.damage.map(|d| d.version), calls.get()), (0, Some(1), 11));
    }

    #[test]
    fn a_listing_sorts_commits_and_checksums_by_kind() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in [
            "00000000000000000002.json",
            "00000000000000000000.json",
            "00000000000000000001.json",
            "00000000000000000001.crc",
            "00000000000000000000.crc",
            "99999999999999999999.json",
            "99999999999999999999.crc",
            ".00000000000000000003.abc.tmp",
            "_last_checkpoint",
            "notes.txt",
        ] {
            std::fs::write(dir.path().join(n), b"x").expect("write");
        }
        std::fs::create_dir(dir.path().join("00000000000000000003.crc")).expect("mkdir");
        let l = Listing::read(&Dir::open(dir.path()).expect("open")).expect("list");
        assert_eq!(l.commits, [0, 1, 2]);
        assert_eq!(l.crcs.iter().copied().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(l.temps.len(), 1);
        assert!(l.last_checkpoint);
        assert_eq!(l.not_regular, [("00000000000000000003.crc".to_string(), None)]);
        assert_eq!(version_digits(b"18446744073709551615.json"), Some(u64::MAX));
        assert_eq!(version_digits(b"18446744073709551616.json"), None);
    }

    #[test]
    fn holes_are_damage_not_the_end() {
        let s = seg(&[0, 1, 2, 3], &[]).unwrap();
        assert_eq!((s.first, s.end, s.damage.is_none()), (0, 3, true));
        let s = seg(&[0, 1, 3, 4], &[]).unwrap();
        assert_eq!(s.end, 1);
        let d = s.damage.as_ref().unwrap();
        assert_eq!(d.version, 2);
        assert!(
            d.reason.contains("hole") && d.reason.contains("version 4 exists"),
            "{}",
            d.reason
        );
        assert!(s.check(1).unwrap().is_ok());
        assert!(s.check(3).unwrap().is_err());
        assert!(s.check(5).is_none());
        // A stray far-future commit is a hole too.
        assert_eq!(seg(&[0, 1, 9000], &[]).unwrap().damage.unwrap().version, 2);
        // Cleaned-up commits before a checkpoint: versions before it are not available.
        let s = seg(&[5, 6, 7], &[4]).unwrap();
        assert_eq!((s.first, s.end), (4, 7));
        assert!(seg(&[5, 6, 7], &[]).is_err());
        // A Delta (Parquet) checkpoint covers them too.
        let l = Listing {
            commits: vec![5, 6, 7],
            delta_checkpoints: [2, 4].into_iter().collect(),
            ..Default::default()
        };
        let s = LogSegment::new(Path::new("/t"), &l, || Ok(Default::default())).unwrap();
        assert_eq!(
            (s.first, s.start_checkpoint, s.delta_checkpoints),
            (4, Some(4), vec![4])
        );
        assert!(matches!(seg(&[], &[]), Err(Error::TableNotFound(_))));
        // A log of a Delta checkpoint alone (every commit cleaned up): its version is the
        // checkpoint's, replayed from it.
        let l = Listing {
            delta_checkpoints: [108].into_iter().collect(),
            ..Default::default()
        };
        let s = LogSegment::new(Path::new("/t"), &l, || Ok(Default::default())).unwrap();
        assert_eq!(
            (s.first, s.end, s.start_checkpoint, s.damage.is_none()),
            (108, 108, Some(108), true)
        );
    }
}
