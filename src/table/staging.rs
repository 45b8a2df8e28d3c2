//! `_staging/`: the on-disk home of bytes written into the mount's `incoming/` and not yet
//! committed (docs/MOUNT.md "`incoming/`"). The format lives in the core so that `vacuum` and the
//! mount agree on it.
//!
//! Layout, one staged file per random id:
//!
//! ```text
//! _staging/               a real directory (never a symlink), mode 0700, owned by the mounting user
//! _staging/.lock          flock(2)ed by the one daemon that mounts the table
//! _staging/<id>.data      the bytes, written in place at the offsets the writer used; its
//!                         extended attribute `user.tinydelta.name` holds the file's name in
//!                         incoming/ (UTF-8) from its creation on
//! _staging/<id>.name      the file's name in incoming/ once it changed (a rename) or was made
//!                         durable (an fsync), or where the file system has no user
//!                         attributes; replaced atomically by rename; takes precedence
//! _staging/<id>.error     why the last commit attempt (or a write) failed, if one did
//! _staging/<id>.sync      "<boot id> <durable length>": the bytes up to that length were fsynced
//!                         in that boot (written when the writer fsyncs)
//! _staging/<id>.canon     the canonical rows, once a row written in order is not its own
//!                         canonical form (until then the `.data` file is its own rows)
//! ```
//!
//! A commit hard-links the `.data` file (or the `.canon` file) into the table as the version's
//! data file, then removes the staged names; the mount never writes that inode again.
//!
//! Every file here is opened through [`Dir`] handles (`openat2` beneath the table, no symlinks,
//! regular files only) and created 0600.
//!
//! A file is created data-first and named at once (before the create is answered, so before any
//! byte is written), and removed data-first, so a crash leaves either a named data file or an
//! empty unnamed `.data` or a lone `.name` that [`Staging::scan`] deletes. A file committed at
//! its first close (the common case) creates one file here, `.data`, and no other. A commit records the id as
//! `commitInfo.operationParameters.stagingId`; on startup, staged files whose id the log already
//! has are deleted instead of reappearing (the crash came between publish and clean-up). Ids are
//! random and the folder is 0700, so nobody else can learn a pending file's id to name it in a
//! forged commit.
//!
//! Durability: the common path gains no fsync. Staged bytes live in the page cache until the
//! writer fsyncs or the file is committed; then the data, its name and a `.sync` record become
//! durable together. After a power loss (another boot id), a file whose bytes may be torn
//! (no `.sync` record, or bytes past its durable length) comes back marked as such and is never
//! committed by a bare close or touch ([`Found::torn`]).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::sys::beneath::{self, Dir};
use crate::error::{Error, Result};
use crate::util::lru::Lru;

/// The staging folder's name inside the table.
pub const STAGING_DIR: &str = "_staging";

/// The `commitInfo.operationParameters` key that records which staged file a commit came from.
pub const STAGING_ID_PARAM: &str = "stagingId";

/// The `commitInfo.operationParameters` key with the `incoming/` name a commit came from (the
/// final name after a rename).
pub const SOURCE_PARAM: &str = "source";

/// Mode of every file tinydelta creates in `_staging/`.
pub const FILE_MODE: u32 = 0o600;

/// Mode bits of a staged file once it is linked into the table as a data file: those of the
/// data files `tinydelta append` creates, 0644 less the daemon's umask (`Umask:` in
/// /proc/self/status, read once; 022 when it cannot be read).
pub fn data_file_mode() -> u32 {
    static MODE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| {
        let umask = procfs::process::Process::myself()
            .ok()
            .and_then(|p| p.status().ok())
            .and_then(|s| s.umask)
            .unwrap_or(0o022);
        0o644 & !umask
    })
}

/// How many staged files' descriptors (`<id>.data`, `<id>.canon`) a [`Staging`] keeps open by
/// default (docs/MOUNT.md "Limits"); `tinydelta-mount --max-open-staged N` passes another value
/// to [`Staging::open_with`].
pub const DEFAULT_MAX_OPEN_STAGED: usize = 256;

/// How many bytes one request (a close, fsync or rename in `incoming/`) may validate by
/// default: 1 GiB (docs/MOUNT.md "Limits"). Bytes written sequentially are validated as they
/// arrive and do not count; a commit that would have to read and validate more is refused with
/// `EFBIG`. `tinydelta-mount --max-validate-bytes N` sets another value in the mount's view.
pub const DEFAULT_MAX_VALIDATE_BYTES: u64 = 1 << 30;

/// Which file on disk a staged file is: device, inode and birth time (`statx`; a file system
/// may reuse a freed inode number at once, the birth time tells the new file from the old),
/// recorded when tinydelta creates (or first opens) it and checked whenever its descriptor is
/// opened again, so a name swapped behind the mount's back is refused instead of read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    /// Birth time (seconds, nanoseconds) where the file system records one.
    born: Option<(i64, u32)>,
}

impl FileId {
    /// The identity of the open file `f` (`statx`, or `fstat` where `statx` is missing).
    pub fn of(f: &File) -> io::Result<FileId> {
        use rustix::fs::{AtFlags, StatxFlags};
        match rustix::fs::statx(f, "", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS | StatxFlags::BTIME) {
            Ok(st) => Ok(FileId {
                dev: (u64::from(st.stx_dev_major) << 32) | u64::from(st.stx_dev_minor),
                ino: st.stx_ino,
                born: (st.stx_mask & StatxFlags::BTIME.bits() != 0)
                    .then_some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec)),
            }),
            Err(rustix::io::Errno::NOSYS) => {
                let m = f.metadata()?;
                Ok(FileId {
                    dev: m.dev(),
                    ino: m.ino(),
                    born: None,
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// A staged file found on disk at startup.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its id.
    pub id: String,
    /// Its name in `incoming/`.
    pub name: String,
    /// The last commit error, if any.
    pub error: Option<String>,
    /// Why its bytes may be torn by a power loss, if they may (never commit it on a bare close).
    pub torn: Option<String>,
}

/// Which boot this is, to tell a daemon crash (page cache intact) from a power loss.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    /// `/proc/sys/kernel/random/boot_id`.
    pub id: String,
    /// The boot time (`btime` of /proc/stat), seconds since the epoch.
    pub time_s: u64,
}

impl Boot {
    /// This boot, from /proc. Unreadable: an id no record matches and boot time 0 (so every
    /// unrecorded file counts as written in this boot).
    pub fn current() -> Boot {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let time_s = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("btime "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0);
        Boot { id, time_s }
    }
}

/// The `_staging/` folder of one table, locked for the life of this value.
#[derive(Debug)]
pub struct Staging {
    root: Dir,
    dir: Dir,
    boot: Boot,
    _lock: File,
    /// Open descriptors of staged files by file name (`<id>.data`, `<id>.canon`): at most
    /// [`DEFAULT_MAX_OPEN_STAGED`] (or the limit given to [`Staging::open_with`]), the least
    /// recently used closed first and opened again on demand ([`Staging::data`]).
    open: Mutex<Lru<String, File>>,
    /// Which side files (`.name`, `.error`, `.sync`, `.canon`: [`Side`] bits) may exist for each
    /// id this daemon created, so that [`Staging::remove`] unlinks only those (a commit's
    /// clean-up is one unlink of `.data` and no failing ones). An id missing here (found by
    /// [`Staging::scan`], left by an earlier daemon) may have any of them: every name is unlinked.
    sides: Mutex<HashMap<String, u8>>,
}

/// Bits of [`Staging`]'s `sides`: the side files of a staged file that may exist.
struct Side;

impl Side {
    const NAME: u8 = 1;
    const ERROR: u8 = 2;
    const SYNC: u8 = 4;
    const CANON: u8 = 8;

    fn of(ext: &str) -> u8 {
        match ext {
            "name" => Side::NAME,
            "error" => Side::ERROR,
            "sync" => Side::SYNC,
            "canon" => Side::CANON,
            _ => 0,
        }
    }
}

/// The extended attribute of `<id>.data` that holds the staged file's `incoming/` name from its
/// creation on (docs/MOUNT.md "One pass over the bytes, written once"): no `.name` file is written
/// for a file committed by its first close. A `<id>.name` file, once written (a rename, an fsync),
/// takes precedence.
pub const NAME_XATTR: &str = "user.tinydelta.name";

/// The `incoming/` name recorded in the [`NAME_XATTR`] attribute of the open data file `f`, if
/// it has one. Errors: none; a file system without user attributes, a missing or unreadable
/// attribute all answer `None` (the caller then treats the file as unnamed).
pub fn xattr_name(f: &File) -> Option<String> {
    let mut buf = [0u8; 256];
    let n = rustix::fs::fgetxattr(f, NAME_XATTR, &mut buf).ok()?;
    String::from_utf8(buf.get(..n)?.to_vec()).ok()
}

/// How long [`Staging::open`] waits for the lock of a table no visible mount serves: the
/// holder is a daemon exiting after its unmount, or one in another mount namespace.
const RELOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn flock_nb(f: &File) -> io::Result<bool> {
    match rustix::fs::flock(f.as_fd(), rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(io::Error::from_raw_os_error(e.raw_os_error())),
    }
}

/// Open (creating 0700 if missing) the real directory `_staging` beneath `root`; refuses a
/// symlink or a non-directory, and one owned by someone else.
fn staging_dir(root: &Dir, create: bool) -> Result<Option<Dir>> {
    let dir = if create {
        root.create_dir(STAGING_DIR, 0o700)?
    } else {
        match root.try_dir(STAGING_DIR)? {
            Some(d) => d,
            None => return Ok(None),
        }
    };
    let st = rustix::fs::fstat(dir.fd()).map_err(|e| Error::io("stat", dir.path(), io::Error::from(e)))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(Error::Corrupt {
            path: dir.path().to_path_buf(),
            reason: format!(
                "is owned by uid {}, not by uid {me} who uses it; staged files are private to the mounting user",
                st.st_uid
            ),
        });
    }
    if create && st.st_mode & 0o077 != 0 {
        rustix::fs::fchmod(dir.fd(), rustix::fs::Mode::from_raw_mode(0o700))
            .map_err(|e| Error::io("chmod", dir.path(), io::Error::from(e)))?;
    }
    Ok(Some(dir))
}

impl Staging {
    /// Create `_staging/` if needed and take its lock. Errors: [`Error::Io`] with kind
    /// `WouldBlock` and a clear message when another mount holds it; [`Error::Corrupt`] when
    /// `_staging` or a file in it is a symlink or not what it should be.
    #[cfg(any(test, feature = "internal-api"))]
    pub fn open(table_root: &Path) -> Result<Staging> {
        Self::open_with(table_root, DEFAULT_MAX_OPEN_STAGED)
    }

    /// [`Staging::open`] keeping at most `max_open` staged files' descriptors open (at least
    /// one); the others are opened again when needed.
    pub fn open_with(table_root: &Path, max_open: usize) -> Result<Staging> {
        Self::open_in_boot(table_root, Boot::current(), max_open)
    }

    /// [`Staging::open_with`] as if in `boot` (tests simulate a power loss with another boot id).
    pub fn open_in_boot(table_root: &Path, boot: Boot, max_open: usize) -> Result<Staging> {
        let root = Dir::open(table_root)?;
        let dir = staging_dir(&root, true)?
            .ok_or_else(|| Error::io("open", table_root.join(STAGING_DIR), io::ErrorKind::NotFound.into()))?;
        let mut lock = match dir.open_rw(".lock") {
            Ok(f) => f,
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                drop(dir.create_new(".lock", FILE_MODE));
                dir.open_rw(".lock")?
            }
            Err(e) => return Err(e),
        };
        let lock_path = dir.join(".lock");
        // A daemon whose mount was just unmounted still holds the lock while it exits (it
        // finishes its commits and releases first): while no mount of this table is visible,
        // wait for it, up to RELOCK_WAIT, so `fusermount3 -u M; tinydelta-mount T M` works.
        let deadline = std::time::Instant::now() + RELOCK_WAIT;
        let mut locked = flock_nb(&lock).map_err(|e| Error::io("lock", &lock_path, e))?;
        while !locked && std::time::Instant::now() < deadline && crate::sys::mountinfo::mounted_at(table_root).is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            locked = flock_nb(&lock).map_err(|e| Error::io("lock", &lock_path, e))?;
        }
        if !locked {
            let mut holder = String::new();
            let _ = lock.read_to_string(&mut holder);
            return Err(Error::io(
                "lock",
                &lock_path,
                io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "locked by another tinydelta-mount ({}); a table can be mounted once",
                        holder.trim()
                    ),
                ),
            ));
        }
        lock.set_len(0).map_err(|e| Error::io("truncate", &lock_path, e))?;
        write!(lock, "pid {}", std::process::id()).map_err(|e| Error::io("write", &lock_path, e))?;
        Ok(Staging {
            root,
            dir,
            boot,
            _lock: lock,
            open: Mutex::new(Lru::new(max_open.max(1))),
            sides: Mutex::new(HashMap::new()),
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn rel(id: &str, ext: &str) -> String {
        format!("{id}.{ext}")
    }

    /// The data file of `id` (for messages).
    pub fn data_path(&self, id: &str) -> PathBuf {
        self.dir.join(Self::rel(id, "data"))
    }

    fn read_small(&self, id: &str, ext: &str) -> Result<Option<Vec<u8>>> {
        let Some(mut f) = self.dir.try_open_file(&Self::rel(id, ext))? else {
            return Ok(None);
        };
        let mut buf = Vec::new();
        // Names and notes are small; never read more than 64 KiB of one.
        (&mut f)
            .take(64 << 10)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io("read", self.dir.join(Self::rel(id, ext)), e))?;
        Ok(Some(buf))
    }

    /// Every complete staged file, after deleting leftovers of interrupted creates, removes and
    /// renames. Unreadable or non-UTF-8 names are replaced by `recovered-<id>.jsonl`.
    pub fn scan(&self) -> Result<Vec<Found>> {
        let mut by_id: HashMap<String, HashSet<String>> = HashMap::new();
        for entry in self.dir.entries()? {
            let Some(fname) = entry.name.to_str() else { continue };
            if fname == ".lock" {
                continue;
            }
            if fname.ends_with(".tmp") {
                self.dir.try_unlink(fname)?;
                continue;
            }
            let Some((id, ext)) = fname.rsplit_once('.') else {
                continue;
            };
            if is_id(id) && entry.kind == beneath::Kind::File {
                by_id.entry(id.to_string()).or_default().insert(ext.to_string());
            }
        }
        let mut found = Vec::new();
        for (id, exts) in by_id {
            // The name: the `.name` file when one was written, else the data file's attribute.
            let from_file = if exts.contains("name") {
                Some(self.read_small(&id, "name")?.unwrap_or_default())
            } else {
                None
            };
            let from_xattr = || {
                Ok::<_, Error>(match self.dir.try_open_file(&Self::rel(&id, "data"))? {
                    Some(f) => xattr_name(&f).map(String::into_bytes),
                    None => None,
                })
            };
            let had_name_file = from_file.is_some();
            let named = match from_file {
                Some(bytes) => Some(bytes),
                None if exts.contains("data") => from_xattr()?,
                None => None,
            };
            let Some(named) = named.filter(|_| exts.contains("data")) else {
                // Data without a name (an interrupted create: the name is recorded right after
                // the data file is made) or a name without data (an interrupted remove).
                // Finish either.
                self.remove(&id)?;
                continue;
            };
            let usable = |bytes: Vec<u8>| String::from_utf8(bytes).ok().filter(|n| valid_name(n));
            let name = usable(named);
            if name.is_none() && self.dir.stat(&Self::rel(&id, "data"))?.is_some_and(|m| m.st_size == 0) {
                // Nameless (a `.name` file cut by a power loss: its rename reached the disk, its
                // bytes did not) and empty: nothing the user wrote survives in it, and bringing it
                // back as `recovered-<id>.jsonl` would show a file nobody wrote (docs/MOUNT.md
                // "Errors as early as known").
                self.remove(&id)?;
                continue;
            }
            let name = match name {
                Some(n) => n,
                // A cut `.name` file: the name the bytes were created under is still in the data
                // file's attribute.
                None if had_name_file => from_xattr()?
                    .and_then(usable)
                    .unwrap_or_else(|| format!("recovered-{id}.jsonl")),
                None => format!("recovered-{id}.jsonl"),
            };
            let error = self
                .read_small(&id, "error")?
                .map(|t| String::from_utf8_lossy(&t).trim_end().to_string());
            let torn = self.torn(&id)?;
            found.push(Found { id, name, error, torn });
        }
        found.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        Ok(found)
    }

    /// Whether the bytes of `id` may be torn: written in an earlier boot and not (all) durable.
    fn torn(&self, id: &str) -> Result<Option<String>> {
        let data = self.dir.stat(&Self::rel(id, "data"))?;
        let Some(data) = data else { return Ok(None) };
        let len = u64::try_from(data.st_size).unwrap_or(0);
        let record = self.read_small(id, "sync")?;
        let sync_mtime = self.dir.stat(&Self::rel(id, "sync"))?.map(|s| s.st_mtime);
        match record.as_deref().map(String::from_utf8_lossy) {
            Some(text) => {
                let mut it = text.split_whitespace();
                let boot = it.next().unwrap_or("");
                let durable: Option<u64> = it.next().and_then(|v| v.parse().ok());
                if boot == self.boot.id {
                    return Ok(None);
                }
                match durable {
                    Some(d) if d == len && sync_mtime.is_some_and(|m| data.st_mtime <= m) => Ok(None),
                    Some(d) => Ok(Some(format!(
                        "written before a restart of the machine: only its first {d} bytes were durable, it has {len}; \
                         its bytes may be torn, so it is not committed until rewritten from offset 0 (or rm it)"
                    ))),
                    None => Ok(Some("its durability record is unreadable".into())),
                }
            }
            None if len == 0 => Ok(None),
            None if u64::try_from(data.st_mtime).unwrap_or(0) >= self.boot.time_s => Ok(None),
            None => Ok(Some(format!(
                "written before a restart of the machine and never fsynced ({len} bytes); its bytes may be torn, \
                 so it is not committed until rewritten from offset 0 (or rm it)"
            ))),
        }
    }

    /// A new staged file named `name`: returns its id and its data file, open for reading and
    /// writing (mode 0600).
    ///
    /// The name goes into the data file's [`NAME_XATTR`] attribute (no second file to create,
    /// rename and delete per commit); where the file system has no user attributes, into a
    /// `<id>.name` file. A crash between the create and the name leaves an empty unnamed data
    /// file, which [`Staging::scan`] deletes.
    pub fn create(&self, name: &str) -> Result<(String, File)> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let data = Self::rel(&id, "data");
        let f = self.dir.create_new_rw(&data, FILE_MODE)?;
        self.sides().insert(id.clone(), 0);
        let named = match rustix::fs::fsetxattr(&f, NAME_XATTR, name.as_bytes(), rustix::fs::XattrFlags::empty()) {
            Ok(()) => Ok(()),
            Err(_) => self.set_name(&id, name, false),
        };
        match named {
            Ok(()) => Ok((id, f)),
            Err(e) => {
                drop(f);
                let _ = self.remove(&id);
                Err(e)
            }
        }
    }

    fn sides(&self) -> std::sync::MutexGuard<'_, HashMap<String, u8>> {
        self.sides.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Note that `<id>.<ext>` may exist from now on (before creating it).
    fn mark(&self, id: &str, ext: &str) {
        if let Some(bits) = self.sides().get_mut(id) {
            *bits |= Side::of(ext);
        }
    }

    /// Whether `<id>.<ext>` may exist (always for an id this daemon did not create).
    fn may_exist(&self, id: &str, ext: &str) -> bool {
        self.sides().get(id).is_none_or(|bits| bits & Side::of(ext) != 0)
    }

    /// Unlink `<id>.<ext>` if it may exist.
    fn unlink_side(&self, id: &str, ext: &str) -> Result<()> {
        if self.may_exist(id, ext) {
            self.dir.try_unlink(&Self::rel(id, ext))?;
        }
        Ok(())
    }

    /// Open the data file of an existing staged file for reading and writing.
    pub fn open_data(&self, id: &str) -> Result<File> {
        self.dir.open_rw(&Self::rel(id, "data"))
    }

    /// Keep `file`, the data file of `id` just created or opened, among the open descriptors;
    /// returns its identity for [`Staging::data`].
    pub fn keep_data(&self, id: &str, file: File) -> Result<FileId> {
        self.keep(id, "data", file)
    }

    fn keep(&self, id: &str, ext: &str, file: File) -> Result<FileId> {
        let rel = Self::rel(id, ext);
        let ident = FileId::of(&file).map_err(|e| Error::io("stat", self.dir.join(&rel), e))?;
        self.fds().put(rel, Arc::new(file));
        Ok(ident)
    }

    fn fds(&self) -> std::sync::MutexGuard<'_, Lru<String, File>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep `file`, the data file of `id` whose bytes were just committed (its names in here
    /// are gone), among the open descriptors, so that the lingering `incoming/` name reads them
    /// (docs/MOUNT.md "After the commit the name lingers"). It counts against the limit like any
    /// staged file's descriptor and, once closed to stay within it, cannot be opened again.
    pub fn keep_committed(&self, id: &str, file: Arc<File>) {
        self.fds().put(Self::rel(id, "committed"), file);
    }

    /// The descriptor [`Staging::keep_committed`] kept for `id`, if it still is.
    pub fn committed(&self, id: &str) -> Option<Arc<File>> {
        self.fds().get(&Self::rel(id, "committed"))
    }

    /// Close the descriptor [`Staging::keep_committed`] kept for `id`.
    pub fn forget_committed(&self, id: &str) {
        self.fds().remove(&Self::rel(id, "committed"));
    }

    /// The data file of `id`, open for reading and writing: the kept descriptor, or opened again
    /// beneath the table (no symlinks, a regular file) when it was closed to stay within the
    /// limit. Errors: [`Error::Corrupt`] when the file now at that name is not `ident` (replaced
    /// behind the mount's back); [`Error::Io`] naming the path (ENOENT when it was deleted).
    pub fn data(&self, id: &str, ident: FileId) -> Result<Arc<File>> {
        self.reopen(id, "data", ident)
    }

    fn reopen(&self, id: &str, ext: &str, ident: FileId) -> Result<Arc<File>> {
        let rel = Self::rel(id, ext);
        if let Some(f) = self.fds().get(&rel) {
            return Ok(f);
        }
        let file = self.dir.open_rw(&rel)?;
        let now = FileId::of(&file).map_err(|e| Error::io("stat", self.dir.join(&rel), e))?;
        if now != ident {
            return Err(Error::Corrupt {
                path: self.dir.join(&rel),
                reason: "was replaced behind the mount's back (another file now has its name); refusing to use it"
                    .into(),
            });
        }
        let file = Arc::new(file);
        self.fds().put(rel, file.clone());
        Ok(file)
    }

    /// How many staged files' descriptors are open (for tests and logs).
    #[cfg(test)]
    pub fn open_descriptors(&self) -> usize {
        self.fds().len()
    }

    /// Record `name` as the staged file's name (atomically replacing the old one); `durable`
    /// fsyncs it before the rename.
    pub fn set_name(&self, id: &str, name: &str, durable: bool) -> Result<()> {
        self.write_atomic(id, "name", name.as_bytes(), durable)
    }

    /// Record why the last commit failed.
    pub fn set_error(&self, id: &str, message: &str) -> Result<()> {
        self.write_atomic(id, "error", format!("{message}\n").as_bytes(), false)
    }

    /// Forget the last commit error.
    pub fn clear_error(&self, id: &str) -> Result<()> {
        self.unlink_side(id, "error")
    }

    /// Make the staged file durable: its first `len` bytes (`file` is its data file), its name
    /// and a `.sync` record of this boot and `len`, then the folder.
    pub fn sync(&self, id: &str, name: &str, file: &File, len: u64) -> Result<()> {
        file.sync_data()
            .map_err(|e| Error::io("fsync", self.data_path(id), e))?;
        self.set_name(id, name, true)?;
        self.write_atomic(id, "sync", format!("{} {len}\n", self.boot.id).as_bytes(), true)?;
        self.dir.sync()
    }

    /// Create `<id>.canon` (0600, write-only): the canonical rows of the staged file, written
    /// while it is written sequentially, so that its commit only links them into the table.
    /// Kept among the open descriptors like the data file; returns its identity for
    /// [`Staging::canon`].
    pub fn create_canon(&self, id: &str) -> Result<FileId> {
        self.mark(id, "canon");
        let f = self.dir.create_new(&Self::rel(id, "canon"), FILE_MODE)?;
        self.keep(id, "canon", f)
    }

    /// `<id>.canon`, open for writing (see [`Staging::data`]; it is opened read-write when
    /// opened again).
    pub fn canon(&self, id: &str, ident: FileId) -> Result<Arc<File>> {
        self.reopen(id, "canon", ident)
    }

    /// Remove `<id>.canon` (the file stopped being written sequentially, or was rewritten).
    pub fn remove_canon(&self, id: &str) -> Result<()> {
        self.fds().remove(&Self::rel(id, "canon"));
        self.unlink_side(id, "canon")
    }

    /// Start `<id>.canon` with the first `len` bytes of the data file `data` (rows that were
    /// canonical as written, when a later row is not: [`crate::format::rows::Kept::Rows`]), copied in
    /// the kernel (`copy_file_range`). Kept among the open descriptors; returns its identity.
    pub fn create_canon_from(&self, id: &str, data: &File, len: u64) -> Result<FileId> {
        let ident = self.create_canon(id)?;
        let canon = self.canon(id, ident)?;
        copy_range(data, &canon, len).map_err(|e| Error::io("copy", self.dir.join(Self::rel(id, "canon")), e))?;
        Ok(ident)
    }

    /// Hard-link `<id>.canon` (fsynced by the caller) to `path`, a new file name directly in the
    /// table folder, and check that the name now holds the file the mount wrote: `ident` (the
    /// same device and inode as at [`Staging::create_canon`]) and exactly `len` bytes (the size
    /// the commit's `add` records). Errors: [`Error::Corrupt`] naming `<id>.canon` when it was
    /// replaced, truncated or extended behind the mount's back (the new name is removed again);
    /// [`Error::Io`] (`EEXIST`, `EXDEV`, `EPERM` on file systems without hard links).
    /// Returns the new name's descriptor, opened beneath the table folder for the check (the
    /// commit holds the data file with it: [`crate::table::write::hold_data_file`]).
    pub fn link_canon(&self, id: &str, path: &Path, ident: FileId, len: u64) -> Result<File> {
        self.link_into(id, "canon", path, ident, len)
    }

    /// [`Staging::link_canon`] for the data file itself, when every row of it is its own
    /// canonical form (docs/MOUNT.md "One pass over the bytes, written once": the staged file
    /// becomes the table's data file, and the mount never writes it again: a later write starts a
    /// new staged file).
    pub fn link_data(&self, id: &str, path: &Path, ident: FileId, len: u64) -> Result<File> {
        self.link_into(id, "data", path, ident, len)
    }

    fn link_into(&self, id: &str, ext: &str, path: &Path, ident: FileId, len: u64) -> Result<File> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::io("link", path, io::ErrorKind::InvalidInput.into()))?;
        let rel = Self::rel(id, ext);
        self.dir
            .link(&rel, &self.root, name)
            .map_err(|e| Error::io("link", path, e))?;
        let refuse = |reason: String| {
            let _ = self.root.try_unlink(name);
            Err(Error::Corrupt {
                path: self.dir.join(&rel),
                reason,
            })
        };
        let (file, st) = match self.root.open_file_stat(name) {
            Ok(x) => x,
            Err(e) => {
                let _ = self.root.try_unlink(name);
                return Err(e);
            }
        };
        match FileId::of(&file) {
            Ok(now) if now == ident => {}
            Ok(_) => {
                return refuse(
                    "was replaced behind the mount's back (another file now has its name); nothing committed".into(),
                );
            }
            Err(e) => {
                let _ = self.root.try_unlink(name);
                return Err(Error::io("stat", path, e));
            }
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if size != len {
            return refuse(format!(
                "holds {size} bytes, but the mount wrote {len} bytes of canonical rows to it: it was changed behind the mount's back; nothing committed"
            ));
        }
        // Staged files are private to the mounting user (FILE_MODE); in the table it is a data
        // file like those `tinydelta append` writes (`data_file_mode`), so every reader of the table can
        // read it. A failure leaves it private: readable through the mount, which serves it,
        // and by its owner, so it is a warning.
        if let Err(e) = rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(data_file_mode())) {
            ::log::warn!("{} stays mode 0600: chmod: {e}", path.display());
        }
        Ok(file)
    }

    /// Delete a staged file: data first, so a crash in between leaves a lone name (deleted at
    /// the next scan), never bytes under a name.
    /// Its kept descriptors are closed (holders of one keep theirs).
    pub fn remove(&self, id: &str) -> Result<()> {
        {
            let mut fds = self.fds();
            fds.remove(&Self::rel(id, "data"));
            fds.remove(&Self::rel(id, "canon"));
        }
        self.dir.try_unlink(&Self::rel(id, "data"))?;
        for ext in ["canon", "error", "sync", "name"] {
            self.unlink_side(id, ext)?;
        }
        self.sides().remove(id);
        Ok(())
    }

    fn write_atomic(&self, id: &str, ext: &str, bytes: &[u8], durable: bool) -> Result<()> {
        self.mark(id, ext);
        let tmp = format!("{id}.{ext}.{}.tmp", uuid::Uuid::new_v4().simple());
        let result = (|| {
            let mut f = self.dir.create_new(&tmp, FILE_MODE)?;
            f.write_all(bytes)
                .map_err(|e| Error::io("write", self.dir.join(&tmp), e))?;
            if durable {
                f.sync_data().map_err(|e| Error::io("fsync", self.dir.join(&tmp), e))?;
            }
            self.dir
                .rename(&tmp, &self.dir, &Self::rel(id, ext))
                .map_err(|e| Error::io("rename", self.dir.join(&tmp), e))
        })();
        if result.is_err() {
            let _ = self.dir.try_unlink(&tmp);
        }
        result
    }
}

/// Copy the first `len` bytes of `from` to the start of `to` in the kernel (`copy_file_range`,
/// falling back to reads and writes where the file system or kernel has no such copy).
pub fn copy_range(from: &File, to: &File, len: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let (mut off_in, mut off_out) = (0u64, 0u64);
    while off_in < len {
        let want = usize::try_from(len - off_in).unwrap_or(usize::MAX).min(1 << 30);
        match rustix::fs::copy_file_range(from, Some(&mut off_in), to, Some(&mut off_out), want) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(
                rustix::io::Errno::XDEV
                | rustix::io::Errno::NOSYS
                | rustix::io::Errno::OPNOTSUPP
                | rustix::io::Errno::INVAL,
            ) => {
                let mut buf = vec![0u8; 1 << 20];
                while off_in < len {
                    let n = usize::try_from(len - off_in).unwrap_or(usize::MAX).min(buf.len());
                    from.read_exact_at(&mut buf[..n], off_in)?;
                    to.write_all_at(&buf[..n], off_out)?;
                    off_in += n as u64;
                    off_out += n as u64;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Copy `from`, from byte `start` to its end, to the start of `to` in the kernel
/// (`copy_file_range`, as `cp` does; reads and writes where the file system or kernel has no such
/// copy), until a read finds the end, at most `step` bytes at a time (> 0): `copied(n)` after
/// each step, `n` the bytes copied so far. Returns the bytes copied (if `from` grows meanwhile,
/// what it had when the copy reached its end: the caller checks the copy, not `from`).
pub fn copy_to_end(from: &File, start: u64, to: &File, step: usize, copied: &mut dyn FnMut(u64)) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let (mut off_in, mut off_out) = (start, 0u64);
    let step = step.max(1);
    loop {
        match rustix::fs::copy_file_range(from, Some(&mut off_in), to, Some(&mut off_out), step) {
            Ok(0) => return Ok(off_out),
            Ok(_) => copied(off_out),
            Err(rustix::io::Errno::INTR) => {}
            Err(
                rustix::io::Errno::XDEV
                | rustix::io::Errno::NOSYS
                | rustix::io::Errno::OPNOTSUPP
                | rustix::io::Errno::INVAL,
            ) => {
                let mut buf = vec![0u8; step.min(1 << 20)];
                loop {
                    let n = match from.read_at(&mut buf, off_in) {
                        Ok(0) => return Ok(off_out),
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    };
                    to.write_all_at(&buf[..n], off_out)?;
                    off_in += n as u64;
                    off_out += n as u64;
                    copied(off_out);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Start writing bytes `offset..offset + len` of `file` back to the disk without waiting for
/// it (`sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE`), so that the fsync of its commit only
/// waits for what was written last (docs/MOUNT.md "One pass over the bytes, written once"). A hint:
/// it makes nothing durable and its errors are ignored (the fsync that follows reports them).
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain system call on a descriptor `file` keeps open; no memory is passed.
    // (Neither rustix nor nix wraps sync_file_range.)
    let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE) };
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

/// Suffixes of scratch names: temporaries (`.tmp`, `.temp`), editors' swap files (`.kate-swp`,
/// Chrome's `.crswap`; vim's `.swp`, `.swo`, ... are matched as `.sw` + a letter) and a
/// download's partial file (`.part`, `.partial`, `.crdownload`, `.download`), which a downloader
/// may close and resume.
const SCRATCH_SUFFIXES: [&str; 8] = [
    ".tmp",
    ".temp",
    ".kate-swp",
    ".crswap",
    ".part",
    ".partial",
    ".crdownload",
    ".download",
];

/// Whether `name` is a scratch name (editor swap files, `mktemp`, `mkstemp` and Python
/// `tempfile` temporaries, downloads in progress): staged, but never committed until renamed onto
/// a plain name (docs/MOUNT.md "Scratch names, in-place edits and blocked files", which lists
/// the patterns).
pub fn is_scratch(name: &str) -> bool {
    let b = name.as_bytes();
    let random = |s: &[u8]| s.iter().all(u8::is_ascii_alphanumeric);
    // Random letters as mkstemp(3) draws them (upper and lower case and digits): at least one
    // upper-case letter and one lower-case letter or digit, so that a plain word or number is not
    // taken for one.
    let mixed = |s: &[u8]| {
        random(s)
            && s.iter().any(u8::is_ascii_uppercase)
            && s.iter().any(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    };
    // Python's tempfile: "tmp" + 8 of [a-z0-9_], then the caller's suffix if any.
    let python = b.len() >= 11
        && b.starts_with(b"tmp")
        && b[3..11].iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
        && (b.len() == 11 || b[11] == b'.');
    // mktemp(1): "tmp." + at least 6 random letters.
    let mktemp = b.len() >= 10 && b.starts_with(b"tmp.") && random(&b[4..]);
    // mkstemp(3) after a name: "NAME.XXXXXX"; GNU sed -i: "sedXXXXXX".
    let mkstemp = match name.rsplit_once('.') {
        Some((stem, ext)) => !stem.is_empty() && ext.len() == 6 && mixed(ext.as_bytes()),
        None => false,
    };
    let sed = b.len() == 9 && b.starts_with(b"sed") && mixed(&b[3..]);
    // vim's swap files: ".swp", then ".swo", ".swn", ... down to ".swa".
    let vim = b.len() > 4 && b[b.len() - 4..b.len() - 1] == *b".sw" && b[b.len() - 1].is_ascii_lowercase();
    name.starts_with('.')
        || name.ends_with('~')
        || (b.len() >= 3 && name.starts_with('#') && name.ends_with('#'))
        || SCRATCH_SUFFIXES.iter().any(|s| name.ends_with(s))
        || python
        || mktemp
        || mkstemp
        || sed
        || vim
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::time::SystemTime;

    #[test]
    fn create_scan_remove() {
        let dir = tempfile::tempdir().unwrap();
        let s = Staging::open(dir.path()).unwrap();
        let (a, mut fa) = s.create("a.jsonl").unwrap();
        fa.write_all(b"{}\n").unwrap();
        let (b, _) = s.create("b.jsonl").unwrap();
        s.set_error(&b, "line 1: bad").unwrap();
        s.set_name(&b, "c.jsonl", false).unwrap();
        // Leftovers of interrupted operations.
        fs::write(s.dir().join(format!("{}.name", "0".repeat(32))), "ghost").unwrap();
        fs::write(s.dir().join(format!("{}.data", "1".repeat(32))), "orphan").unwrap();
        fs::write(s.dir().join("x.name.123.tmp"), "t").unwrap();
        let found = s.scan().unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].id.as_str(), found[0].name.as_str()), (a.as_str(), "a.jsonl"));
        assert_eq!(found[1].name, "c.jsonl");
        assert_eq!(found[1].error.as_deref(), Some("line 1: bad"));
        assert!(found.iter().all(|f| f.torn.is_none()));
        let left: Vec<_> = fs::read_dir(s.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
        // The lock, a's data (named by its attribute, no `.name` file), b's data, note and name.
        assert_eq!(left.len(), 1 + 1 + 3, "{left:?}");
        assert!(!s.dir().join(format!("{a}.name")).exists());
        s.remove(&a).unwrap();
        s.remove(&b).unwrap();
        assert!(s.scan().unwrap().is_empty());
    }

    #[test]
    fn a_file_named_only_by_its_attribute_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let s = Staging::open(dir.path()).unwrap();
        let (a, mut f) = s.create("kept.jsonl").unwrap();
        f.write_all(b"{}\n").unwrap();
        drop((f, s));
        let s = Staging::open(dir.path()).unwrap();
        let found = s.scan().unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].id.as_str(), found[0].name.as_str()),
            (a.as_str(), "kept.jsonl")
        );
        // Removed by an id this daemon did not create: every side file is tried.
        fs::write(s.dir().join(format!("{a}.error")), "old note").unwrap();
        s.remove(&a).unwrap();
        let left: Vec<_> = fs::read_dir(s.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }

    #[test]
    fn an_empty_nameless_file_goes_and_a_cut_name_file_falls_back_to_the_attribute() {
        // What a power loss leaves when a staged file's name was not durable: a `.name` file
        // that is empty (its rename reached the disk, its bytes did not).
        let dir = tempfile::tempdir().unwrap();
        let s = Staging::open(dir.path()).unwrap();
        let (renamed, mut f) = s.create("first.jsonl").unwrap();
        f.write_all(b"{}\n").unwrap();
        drop(f);
        let (empty, _) = s.create("e.jsonl").unwrap();
        let st = s.dir().to_path_buf();
        drop(s);
        fs::write(st.join(format!("{renamed}.name")), b"").unwrap();
        fs::write(st.join(format!("{empty}.name")), b"").unwrap();
        // Files without the attribute (written behind tinydelta's back): one empty, one not.
        let bare_empty = "a".repeat(32);
        let bare_full = "b".repeat(32);
        fs::write(st.join(format!("{bare_empty}.data")), b"").unwrap();
        fs::write(st.join(format!("{bare_empty}.name")), b"").unwrap();
        fs::write(st.join(format!("{bare_full}.data")), b"{}\n").unwrap();
        fs::write(st.join(format!("{bare_full}.name")), b"\xff").unwrap();
        let s = Staging::open(dir.path()).unwrap();
        let found: Vec<(String, String)> = s.scan().unwrap().into_iter().map(|f| (f.id, f.name)).collect();
        assert_eq!(
            found,
            [
                (renamed.clone(), "first.jsonl".to_string()),
                (bare_full.clone(), format!("recovered-{bare_full}.jsonl")),
            ]
        );
        // The empty nameless ones are gone from disk, side files included.
        let mut left: Vec<String> = fs::read_dir(&st)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(&empty) || n.starts_with(&bare_empty))
            .collect();
        left.sort();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn files_are_private_and_symlinks_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let s = Staging::open(dir.path()).unwrap();
        let (a, _) = s.create("a.jsonl").unwrap();
        s.set_error(&a, "bad").unwrap();
        let f = fs::File::open(s.dir().join(format!("{a}.data"))).unwrap();
        assert_eq!(xattr_name(&f).as_deref(), Some("a.jsonl"));
        s.set_name(&a, "b.jsonl", false).unwrap();
        for ext in ["data", "name", "error"] {
            let m = fs::metadata(s.dir().join(format!("{a}.{ext}")))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(m & 0o777, 0o600, "{ext}");
        }
        assert_eq!(fs::metadata(s.dir()).unwrap().permissions().mode() & 0o777, 0o700);
        drop(s);
        // A planted symlink as data: refused, never followed.
        let victim = dir.path().join("victim.txt");
        fs::write(&victim, "secret").unwrap();
        let st = dir.path().join(STAGING_DIR);
        fs::remove_file(st.join(format!("{a}.data"))).unwrap();
        std::os::unix::fs::symlink(&victim, st.join(format!("{a}.data"))).unwrap();
        let s = Staging::open(dir.path()).unwrap();
        assert!(
            s.scan().unwrap().is_empty(),
            "a symlinked data file is not a staged file"
        );
        assert!(s.open_data(&a).is_err());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "secret");
        drop(s);
        // A symlinked lock, and a symlinked _staging: refused.
        fs::remove_file(st.join(".lock")).unwrap();
        std::os::unix::fs::symlink(&victim, st.join(".lock")).unwrap();
        let e = Staging::open(dir.path()).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "secret");
        let other = tempfile::tempdir().unwrap();
        fs::remove_dir_all(&st).unwrap();
        std::os::unix::fs::symlink(other.path(), &st).unwrap();
        assert!(Staging::open(dir.path()).is_err());
    }

    #[test]
    fn torn_after_a_power_loss() {
        let dir = tempfile::tempdir().unwrap();
        let boot = Boot {
            id: "boot-1".into(),
            time_s: 0,
        };
        let (synced, unsynced, grown) = {
            let s = Staging::open_in_boot(dir.path(), boot.clone(), DEFAULT_MAX_OPEN_STAGED).unwrap();
            let (a, mut fa) = s.create("a.jsonl").unwrap();
            fa.write_all(b"{}\n").unwrap();
            s.sync(&a, "a.jsonl", &fa, 3).unwrap();
            let (b, mut fb) = s.create("b.jsonl").unwrap();
            fb.write_all(b"{}\n").unwrap();
            let (c, mut fc) = s.create("c.jsonl").unwrap();
            fc.write_all(b"{}\n").unwrap();
            s.sync(&c, "c.jsonl", &fc, 3).unwrap();
            fc.write_all(b"{}\n").unwrap();
            // Same boot: nothing is torn (a daemon crash keeps the page cache).
            assert!(s.scan().unwrap().iter().all(|f| f.torn.is_none()));
            (a, b, c)
        };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let next = Boot {
            id: "boot-2".into(),
            time_s: now + 10,
        };
        let s = Staging::open_in_boot(dir.path(), next, DEFAULT_MAX_OPEN_STAGED).unwrap();
        let found = s.scan().unwrap();
        let torn = |id: &str| found.iter().find(|f| f.id == id).unwrap().torn.clone();
        assert_eq!(torn(&synced), None);
        assert!(torn(&unsynced).unwrap().contains("never fsynced"));
        assert!(torn(&grown).unwrap().contains("first 3 bytes"));
    }

    #[test]
    fn descriptors_are_pooled_and_reopened_only_as_the_same_file() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let s = Staging::open(dir.path()).unwrap();
        let mut ids = Vec::new();
        for i in 0..DEFAULT_MAX_OPEN_STAGED + 40 {
            let (id, f) = s.create(&format!("f{i}")).unwrap();
            f.write_all_at(format!("{i}\n").as_bytes(), 0).unwrap();
            let ident = s.keep_data(&id, f).unwrap();
            ids.push((id, ident));
        }
        assert_eq!(s.open_descriptors(), DEFAULT_MAX_OPEN_STAGED);
        // The first ones were closed; they open again, as the same files.
        let (id0, ident0) = ids[0].clone();
        let mut buf = [0u8; 2];
        s.data(&id0, ident0).unwrap().read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"0\n");
        assert_eq!(s.open_descriptors(), DEFAULT_MAX_OPEN_STAGED);
        // A file swapped in under a closed one's name is refused, never read or written.
        let (id1, ident1) = ids[1].clone();
        // (The old file is kept elsewhere, so its inode number cannot be reused at once.)
        fs::rename(s.data_path(&id1), dir.path().join("old")).unwrap();
        fs::write(s.data_path(&id1), "planted").unwrap();
        let e = s.data(&id1, ident1).unwrap_err();
        assert!(e.to_string().contains("replaced behind the mount's back"), "{e}");
        // Removing a staged file closes its kept descriptor.
        let (last, _) = ids.last().unwrap().clone();
        s.remove(&last).unwrap();
        assert_eq!(s.open_descriptors(), DEFAULT_MAX_OPEN_STAGED - 1);
    }

    #[test]
    fn second_lock_fails() {
        let dir = tempfile::tempdir().unwrap();
        let _s = Staging::open(dir.path()).unwrap();
        let e = Staging::open(dir.path()).unwrap_err();
        assert!(e.to_string().contains("mounted once"), "{e}");
        assert!(matches!(&e, Error::Io { source, .. } if source.kind() == io::ErrorKind::WouldBlock));
    }

    #[test]
    fn names() {
        for s in [
            ".x.jsonl.abc123",
            "x.jsonl~",
            "x.swp",
            "x.tmp",
            ".x",
            "x.jsonl.part",
            "x.crdownload",
            "x.swo",
            "x.temp",
            "tmpmc2whf69",
            "tmp_a1b2c3d.jsonl",
            "tmp.Xy3kPq9aBc",
            "x.jsonl.aB3dEf",
            "sedX1b2Cd",
            "#x.jsonl#",
            ".#x.jsonl",
            "x.kate-swp",
            "x.crswap",
        ] {
            assert!(is_scratch(s), "{s}");
        }
        for s in [
            "x.jsonl",
            "data",
            "x.tmp.jsonl",
            "x.part.jsonl",
            "tmp.jsonl",
            "tmpdata.jsonl",
            "tmp12345678x.jsonl",
            "orders.202611",
            "x.jsonld",
            "sedation1",
            "#x.jsonl",
            "x.swift",
            "x.sw",
        ] {
            assert!(!is_scratch(s), "{s}");
        }
        assert!(!valid_name("x.error"));
        assert!(!valid_name(""));
        assert!(!valid_name("a/b"));
        assert!(valid_name("a.jsonl"));
    }
}
