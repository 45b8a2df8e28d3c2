//! `_staging/`: the on-disk home of bytes written into `incoming/` and not yet committed.
//!
//! Layout, one staged file per random id:
//!
//! ```text
//! _staging/.lock          flock(2)ed by the one daemon that mounts the table
//! _staging/<id>.name      the file's name in incoming/ (UTF-8), replaced atomically by rename
//! _staging/<id>.data      the bytes, written in place at the offsets the writer used
//! _staging/<id>.error     why the last commit attempt failed, if it did
//! ```
//!
//! A file is created name-first and removed data-first, so a crash leaves either a complete pair
//! or a lone `.name`/`.data` that [`Staging::scan`] deletes. A commit records the id as
//! `commitInfo.operationParameters.stagingId`; on startup, staged files whose id the log already
//! has are deleted instead of reappearing (the crash came between publish and clean-up).
//! Staged bytes live in the page cache until committed: they survive a crash of the daemon, not
//! of the machine (the commit itself is durable).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The staging folder's name inside the table.
pub const STAGING_DIR: &str = "_staging";

/// The `commitInfo.operationParameters` key that records which staged file a commit came from.
pub const STAGING_ID_PARAM: &str = "stagingId";

/// A staged file found on disk at startup.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its id.
    pub id: String,
    /// Its name in `incoming/`.
    pub name: String,
    /// The last commit error, if any.
    pub error: Option<String>,
}

/// The `_staging/` folder of one table, locked for the life of this value.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    _lock: File,
}

impl Staging {
    /// Create `_staging/` if needed and take its lock. Fails with `WouldBlock` (mapped to a
    /// clear message by the daemon) when another mount holds it.
    pub fn open(table_root: &Path) -> io::Result<Staging> {
        let dir = table_root.join(STAGING_DIR);
        fs::create_dir_all(&dir)?;
        let lock_path = dir.join(".lock");
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&lock_path)?;
        // SAFETY: flock on a descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                let holder = fs::read_to_string(&lock_path).unwrap_or_default();
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{} is locked by another tinydelta-mount ({}); a table can be mounted once",
                        lock_path.display(),
                        holder.trim()
                    ),
                ));
            }
            return Err(err);
        }
        lock.set_len(0)?;
        write!(lock, "pid {}", std::process::id())?;
        Ok(Staging { dir, _lock: lock })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{id}.{ext}"))
    }

    /// The data file of `id`.
    pub fn data_path(&self, id: &str) -> PathBuf {
        self.path(id, "data")
    }

    /// Every complete staged file, after deleting leftovers of interrupted creates, removes and
    /// renames. Unreadable or non-UTF-8 names are replaced by `recovered-<id>.jsonl`.
    pub fn scan(&self) -> io::Result<Vec<Found>> {
        let mut names: HashMap<String, Option<String>> = HashMap::new();
        let mut datas = Vec::new();
        let mut errors: HashMap<String, String> = HashMap::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let fname = entry.file_name();
            let Some(fname) = fname.to_str() else { continue };
            if fname == ".lock" {
                continue;
            }
            if fname.ends_with(".tmp") {
                let _ = fs::remove_file(entry.path());
                continue;
            }
            let Some((id, ext)) = fname.rsplit_once('.') else {
                continue;
            };
            if !is_id(id) {
                continue;
            }
            match ext {
                "name" => {
                    let name = fs::read(entry.path()).ok().and_then(|b| String::from_utf8(b).ok());
                    names.insert(id.to_string(), name.filter(|n| valid_name(n)));
                }
                "data" => datas.push(id.to_string()),
                "error" => {
                    let text = fs::read(entry.path()).unwrap_or_default();
                    errors.insert(id.to_string(), String::from_utf8_lossy(&text).trim_end().to_string());
                }
                _ => {}
            }
        }
        let mut found = Vec::new();
        for id in datas {
            match names.remove(&id) {
                Some(name) => {
                    let name = name.unwrap_or_else(|| format!("recovered-{id}.jsonl"));
                    let error = errors.remove(&id);
                    found.push(Found { id, name, error });
                }
                None => {
                    // Data without a name: a remove that was interrupted. Finish it.
                    let _ = fs::remove_file(self.path(&id, "data"));
                    let _ = fs::remove_file(self.path(&id, "error"));
                }
            }
        }
        // A name without data: a create that was interrupted.
        for id in names.keys() {
            let _ = fs::remove_file(self.path(id, "name"));
            let _ = fs::remove_file(self.path(id, "error"));
        }
        for id in errors.keys() {
            if !found.iter().any(|f| &f.id == id) {
                let _ = fs::remove_file(self.path(id, "error"));
            }
        }
        found.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        Ok(found)
    }

    /// A new staged file named `name`: returns its id and its data file, open for reading and
    /// writing.
    pub fn create(&self, name: &str) -> io::Result<(String, File)> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        self.set_name(&id, name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(self.path(&id, "data"));
        match file {
            Ok(f) => Ok((id, f)),
            Err(e) => {
                let _ = fs::remove_file(self.path(&id, "name"));
                Err(e)
            }
        }
    }

    /// Open the data file of an existing staged file for reading and writing.
    pub fn open_data(&self, id: &str) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).open(self.path(id, "data"))
    }

    /// Record `name` as the staged file's name (atomically replacing the old one).
    pub fn set_name(&self, id: &str, name: &str) -> io::Result<()> {
        self.write_atomic(id, "name", name.as_bytes())
    }

    /// Record why the last commit failed.
    pub fn set_error(&self, id: &str, message: &str) -> io::Result<()> {
        self.write_atomic(id, "error", format!("{message}\n").as_bytes())
    }

    /// Forget the last commit error.
    pub fn clear_error(&self, id: &str) -> io::Result<()> {
        remove_if_exists(&self.path(id, "error"))
    }

    /// Delete a staged file: data first, so a crash in between leaves a lone name (deleted at
    /// the next scan), never bytes under a name.
    pub fn remove(&self, id: &str) -> io::Result<()> {
        remove_if_exists(&self.path(id, "data"))?;
        remove_if_exists(&self.path(id, "error"))?;
        remove_if_exists(&self.path(id, "name"))
    }

    fn write_atomic(&self, id: &str, ext: &str, bytes: &[u8]) -> io::Result<()> {
        let tmp = self
            .dir
            .join(format!("{id}.{ext}.{}.tmp", uuid::Uuid::new_v4().simple()));
        let result = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, self.path(id, ext)));
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}

/// For `vacuum`: the files in `table_root/_staging/` that are leftovers — temporaries, halves of
/// interrupted creates and removes, and staged files whose id the log already has (committed
/// just before a crash). Staged files a user may still want (a refused file waiting for a fix, a
/// scratch file, bytes from before a crash) are never leftovers; `.lock` never is. Returns
/// `None` while a mount holds the table (the daemon cleans up after itself then).
pub fn leftovers(
    table_root: &Path,
    committed_ids: &std::collections::HashSet<String>,
) -> io::Result<Option<Vec<PathBuf>>> {
    let dir = table_root.join(STAGING_DIR);
    let lock = match File::open(dir.join(".lock")) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(lock) = &lock {
        // SAFETY: flock on a descriptor we own; released when `lock` is dropped.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(err);
        }
    }
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Some(Vec::new())),
        Err(e) => return Err(e),
    };
    let mut files: Vec<(String, String, PathBuf)> = Vec::new();
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(fname) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if fname.ends_with(".tmp") {
            out.push(entry.path());
        } else if let Some((id, ext)) = fname.rsplit_once('.')
            && is_id(id)
        {
            files.push((id.to_string(), ext.to_string(), entry.path()));
        }
    }
    let has = |id: &str, ext: &str| files.iter().any(|(i, e, _)| i == id && e == ext);
    for (id, ext, path) in &files {
        let orphan = match ext.as_str() {
            "data" => !has(id, "name"),
            "name" | "error" => !has(id, "data"),
            _ => false,
        };
        if orphan || committed_ids.contains(id) {
            out.push(path.clone());
        }
    }
    out.sort();
    Ok(Some(out))
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn is_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `name` can be a file in `incoming/`: non-empty, no `/` or NUL, not `.`/`..`, at most
/// 255 bytes, and not ending in `.error` (reserved for the notes of failed commits).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0')
        && !name.ends_with(ERROR_SUFFIX)
}

/// The suffix of the note that explains a failed commit.
pub const ERROR_SUFFIX: &str = ".error";

/// Whether `name` is a scratch name (editor swap files, rsync and `mktemp` temporaries): staged,
/// but never committed on close. Leading `.`, trailing `~`, `.swp`, `.swx` or `.tmp`.
pub fn is_scratch(name: &str) -> bool {
    name.starts_with('.')
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name.ends_with(".tmp")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_scan_remove() {
        let dir = tempfile::tempdir().unwrap();
        let s = Staging::open(dir.path()).unwrap();
        let (a, mut fa) = s.create("a.jsonl").unwrap();
        fa.write_all(b"{}\n").unwrap();
        let (b, _) = s.create("b.jsonl").unwrap();
        s.set_error(&b, "line 1: bad").unwrap();
        s.set_name(&b, "c.jsonl").unwrap();
        // Leftovers of interrupted operations.
        fs::write(s.dir().join(format!("{}.name", "0".repeat(32))), "ghost").unwrap();
        fs::write(s.dir().join(format!("{}.data", "1".repeat(32))), "orphan").unwrap();
        fs::write(s.dir().join("x.name.123.tmp"), "t").unwrap();
        let found = s.scan().unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].id.as_str(), found[0].name.as_str()), (a.as_str(), "a.jsonl"));
        assert_eq!(found[1].name, "c.jsonl");
        assert_eq!(found[1].error.as_deref(), Some("line 1: bad"));
        let left: Vec<_> = fs::read_dir(s.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 1 + 2 + 2 + 1, "{left:?}");
        s.remove(&a).unwrap();
        s.remove(&b).unwrap();
        assert!(s.scan().unwrap().is_empty());
    }

    #[test]
    fn vacuum_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let (keep, done) = {
            let s = Staging::open(dir.path()).unwrap();
            let (keep, _) = s.create("keep.jsonl").unwrap();
            let (done, _) = s.create("done.jsonl").unwrap();
            fs::write(s.dir().join(format!("{}.data", "1".repeat(32))), "orphan").unwrap();
            fs::write(s.dir().join("x.name.1.tmp"), "t").unwrap();
            let committed = std::collections::HashSet::from([done.clone()]);
            // Mounted: hands off.
            assert!(leftovers(dir.path(), &committed).unwrap().is_none());
            (keep, done)
        };
        let committed = std::collections::HashSet::from([done.clone()]);
        let got = leftovers(dir.path(), &committed).unwrap().unwrap();
        let names: Vec<String> = got
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&format!("{}.data", "1".repeat(32))), "{names:?}");
        assert!(names.contains(&"x.name.1.tmp".to_string()));
        assert!(names.contains(&format!("{done}.data")) && names.contains(&format!("{done}.name")));
        assert!(!names.iter().any(|n| n.starts_with(&keep) || n == ".lock"), "{names:?}");
        assert!(
            leftovers(&dir.path().join("none"), &committed)
                .unwrap()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn second_lock_fails() {
        let dir = tempfile::tempdir().unwrap();
        let _s = Staging::open(dir.path()).unwrap();
        let e = Staging::open(dir.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(e.to_string().contains("mounted once"), "{e}");
    }

    #[test]
    fn names() {
        for s in [".x.jsonl.abc123", "x.jsonl~", "x.swp", "x.tmp", ".x"] {
            assert!(is_scratch(s), "{s}");
        }
        for s in ["x.jsonl", "data", "x.tmp.jsonl"] {
            assert!(!is_scratch(s), "{s}");
        }
        assert!(!valid_name("x.error"));
        assert!(!valid_name(""));
        assert!(!valid_name("a/b"));
        assert!(valid_name("a.jsonl"));
    }
}
