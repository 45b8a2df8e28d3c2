//! The mount's inner file system: every operation of SPEC section 4, with no `fuser` types, so
//! it can be tested without a kernel. The `fuser` wrapper in [`super::fs`] only converts
//! arguments and replies.
//!
//! Concurrency: the view is shared by the daemon's worker threads. Short critical sections take
//! one lock for `incoming/` metadata and one for the handle table; file I/O runs outside them,
//! except that writes to, truncates of and commits of one staged file are serialised by that
//! file's own I/O lock (a commit of one file never blocks reads, other files or other commits).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use log::{debug, info, warn};

use crate::{Table, WriteOptions};

use super::errno::{FsError, FsResult};
use super::inode::{self, MAX_VERSION, Node, VersionFile};
use super::staging::{self, ERROR_SUFFIX, STAGING_ID_PARAM, Staging};
use super::versions::{Concat, ConcatReader, Versions};

/// Settings of the view.
#[derive(Debug, Clone)]
pub struct ViewConfig {
    /// Owner shown for every node (the mounting user).
    pub uid: u32,
    /// Group shown for every node.
    pub gid: u32,
    /// How long the kernel may cache entries and attributes of immutable version nodes.
    pub version_ttl: Duration,
}

impl Default for ViewConfig {
    fn default() -> Self {
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        ViewConfig {
            uid,
            gid,
            version_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

/// The kind of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
}

/// A node's attributes, with how long the kernel may cache them (and the entry naming it).
#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// File type.
    pub kind: Kind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub perm: u16,
    /// Link count.
    pub nlink: u32,
    /// Modification time (a version's commit time).
    pub mtime: SystemTime,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Cache lifetime for this attribute and the entry.
    pub ttl: Duration,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq)]
pub struct DirEntry {
    /// Inode number.
    pub ino: u64,
    /// File type.
    pub kind: Kind,
    /// Name.
    pub name: String,
    /// The offset to pass back to continue after this entry.
    pub next_offset: u64,
}

/// An open file handle and how the kernel should treat its page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// The handle.
    pub fh: u64,
    /// Keep cached pages from earlier opens (immutable files).
    pub keep_cache: bool,
    /// The kernel need not send `flush` on close (read-only handles).
    pub no_flush: bool,
}

/// Who is calling, as far as commit-on-close cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caller {
    /// Thread-group id (process id) of the caller, if known.
    pub tgid: Option<u32>,
    /// The caller is exiting because a signal killed it (its close must not commit).
    pub killed: bool,
    /// After this close the caller still has another descriptor of the same file (a shell
    /// restoring a redirected fd with dup2): not its last close, so not a commit point.
    pub still_open: bool,
}

/// Attribute changes of `setattr`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttrs {
    /// New size (truncate).
    pub size: Option<u64>,
    /// New modification time.
    pub mtime: Option<SystemTime>,
    /// Any other change (mode, owner, atime...): accepted and ignored in `incoming/`, refused
    /// elsewhere.
    pub other: bool,
}

/// File-system statistics (of the file system holding the table).
#[derive(Debug, Clone, Copy, Default)]
pub struct StatFs {
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Block size.
    pub bsize: u32,
    /// Maximum name length.
    pub namelen: u32,
    /// Fragment size.
    pub frsize: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Bytes on disk under `id`; listed under the name when `linked`.
    Live,
    /// Committed; the handle may still be open. A later write starts a new staged segment.
    Committed,
    /// Removed by `rm` (or replaced by a rename); open handles keep working on the bytes.
    Unlinked,
}

#[derive(Debug)]
struct Staged {
    name: String,
    state: State,
    linked: bool,
    id: String,
    file: Arc<File>,
    /// Logical offset of the data file's first byte (bytes before it were committed by fsync).
    base: u64,
    /// Bytes in the data file.
    len: u64,
    error: Option<String>,
    handles: u32,
    writers: u32,
    mtime: SystemTime,
    io: Arc<Mutex<()>>,
}

#[derive(Debug, Default)]
struct Incoming {
    names: BTreeMap<String, u64>,
    entries: HashMap<u64, Staged>,
    next_seq: u64,
    mtime: Option<SystemTime>,
}

impl Incoming {
    fn get(&mut self, seq: u64) -> FsResult<&mut Staged> {
        self.entries.get_mut(&seq).ok_or(FsError::NotFound)
    }

    fn unlink_name(&mut self, seq: u64) {
        if let Some(e) = self.entries.get_mut(&seq) {
            if e.linked && self.names.get(&e.name) == Some(&seq) {
                self.names.remove(&e.name);
            }
            e.linked = false;
        }
        self.mtime = Some(SystemTime::now());
    }

    /// Forget an entry nobody can reach any more.
    fn maybe_drop(&mut self, seq: u64) {
        if let Some(e) = self.entries.get(&seq)
            && e.state != State::Live
            && e.handles == 0
        {
            self.entries.remove(&seq);
        }
    }
}

#[derive(Debug)]
enum Handle {
    Concat(ConcatReader),
    Bytes(Arc<[u8]>),
    Staged {
        seq: u64,
        writable: bool,
        opener: Option<u32>,
    },
    Dir(Arc<[DirEntry]>),
}

/// The inner file system of one mounted table.
#[derive(Debug)]
pub struct TableView {
    versions: Versions,
    staging: Staging,
    cfg: ViewConfig,
    started: SystemTime,
    incoming: Mutex<Incoming>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    /// The newest listing of `incoming/`, shared by the handles that opened it.
    last_listing: Mutex<Option<Arc<[DirEntry]>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn ms_to_time(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH
    }
}

/// `Read` over a file by positional reads, so a commit reads a staged file through the
/// descriptor the writer used (no reopen; works after the file was unlinked).
struct PreadReader {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for PreadReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.end || buf.is_empty() {
            return Ok(0);
        }
        let n = buf.len().min((self.end - self.pos) as usize);
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

/// The version a `v/` entry names: canonical decimal only (`7`, not `07` or `+7`).
fn parse_version(name: &str) -> Option<u64> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) || (name.len() > 1 && name.starts_with('0')) {
        return None;
    }
    name.parse().ok().filter(|v| *v <= MAX_VERSION)
}

impl TableView {
    /// Open the table at `root` for mounting: take the staging lock and bring back the files
    /// staged by an earlier mount, minus those the log shows were already committed.
    pub fn load(root: &Path, cfg: ViewConfig) -> FsResult<TableView> {
        let table = Table::open(root)?;
        let staging = Staging::open(root)?;
        let found = staging.scan()?;
        let mut incoming = Incoming::default();
        if !found.is_empty() {
            let committed = committed_staging_ids(&table)?;
            for f in found {
                if committed.contains(&f.id) {
                    info!(
                        "staged file {} ({}) was committed before a crash; removing it",
                        f.name, f.id
                    );
                    staging.remove(&f.id)?;
                    continue;
                }
                let file = staging.open_data(&f.id)?;
                let meta = file.metadata()?;
                let mut name = f.name.clone();
                if incoming.names.contains_key(&name) {
                    name = format!("{}.{}", f.name, &f.id[..8]);
                    staging.set_name(&f.id, &name)?;
                }
                info!("staged file {name} is back in incoming/ ({} bytes)", meta.len());
                let seq = incoming.next_seq;
                incoming.next_seq += 1;
                incoming.names.insert(name.clone(), seq);
                incoming.entries.insert(
                    seq,
                    Staged {
                        name,
                        state: State::Live,
                        linked: true,
                        id: f.id,
                        file: Arc::new(file),
                        base: 0,
                        len: meta.len(),
                        error: f.error,
                        handles: 0,
                        writers: 0,
                        mtime: meta.modified().unwrap_or_else(|_| SystemTime::now()),
                        io: Arc::new(Mutex::new(())),
                    },
                );
            }
        }
        Ok(TableView {
            versions: Versions::new(table)?,
            staging,
            cfg,
            started: SystemTime::now(),
            incoming: Mutex::new(incoming),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            last_listing: Mutex::new(None),
        })
    }

    /// The table.
    pub fn table(&self) -> &Table {
        self.versions.table()
    }

    /// Names currently listed in `incoming/` (staged files only, without `.error` notes).
    pub fn incoming_names(&self) -> Vec<String> {
        lock(&self.incoming).names.keys().cloned().collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn attr(&self, ino: u64, kind: Kind, size: u64, perm: u16, nlink: u32, mtime: SystemTime, ttl: Duration) -> Attr {
        Attr {
            ino,
            kind,
            size,
            perm,
            nlink,
            mtime,
            uid: self.cfg.uid,
            gid: self.cfg.gid,
            ttl,
        }
    }

    fn latest_time(&self, latest: u64) -> FsResult<SystemTime> {
        Ok(ms_to_time(self.versions.head(latest)?.timestamp_ms))
    }

    /// Attributes of an inode.
    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        self.node_attr(node)
    }

    fn node_attr(&self, node: Node) -> FsResult<Attr> {
        let ino = node.ino();
        let vttl = self.cfg.version_ttl;
        match node {
            Node::Root => Ok(self.attr(ino, Kind::Dir, 0, 0o555, 4, self.started, Duration::ZERO)),
            Node::VDir => {
                let latest = self.versions.listed_latest()?;
                let nlink = 2u32.saturating_add(u32::try_from(latest + 1).unwrap_or(u32::MAX));
                let t = self.latest_time(latest)?;
                Ok(self.attr(ino, Kind::Dir, 0, 0o555, nlink, t, Duration::ZERO))
            }
            Node::Latest => {
                let latest = self.versions.latest()?;
                let t = self.latest_time(latest)?;
                let size = format!("v/{latest}").len() as u64;
                Ok(self.attr(ino, Kind::Symlink, size, 0o777, 1, t, Duration::ZERO))
            }
            Node::Incoming => {
                let t = lock(&self.incoming).mtime.unwrap_or(self.started);
                Ok(self.attr(ino, Kind::Dir, 0, 0o755, 2, t, Duration::ZERO))
            }
            Node::VersionDir(v) => {
                self.check_version(v)?;
                let t = ms_to_time(self.versions.head(v)?.timestamp_ms);
                Ok(self.attr(ino, Kind::Dir, 0, 0o555, 2, t, vttl))
            }
            Node::VersionFile(v, f) => {
                self.check_version(v)?;
                let head = self.versions.head(v)?;
                if f == VersionFile::Data && self.versions.data_gone(v)? {
                    return Err(FsError::NotFound);
                }
                let size = match f {
                    VersionFile::Data => self.versions.body(v)?.data.len,
                    VersionFile::Commit => head.commit_size,
                    VersionFile::Schema => self.versions.body(v)?.schema_json.len() as u64,
                };
                Ok(self.attr(ino, Kind::File, size, 0o444, 1, ms_to_time(head.timestamp_ms), vttl))
            }
            Node::Staged(seq) => {
                let mut inc = lock(&self.incoming);
                let e = inc.get(seq)?;
                Ok(self.attr(ino, Kind::File, e.base + e.len, 0o644, 1, e.mtime, Duration::ZERO))
            }
            Node::ErrorNote(seq) => {
                let mut inc = lock(&self.incoming);
                let e = inc.get(seq)?;
                let size = e.error.as_ref().ok_or(FsError::NotFound)?.len() as u64 + 1;
                Ok(self.attr(ino, Kind::File, size, 0o444, 1, e.mtime, Duration::ZERO))
            }
        }
    }

    fn check_version(&self, v: u64) -> FsResult<()> {
        if self.versions.exists(v)? {
            Ok(())
        } else {
            Err(FsError::NotFound)
        }
    }

    /// Look `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> FsResult<Attr> {
        let parent = Node::from_ino(parent).ok_or(FsError::NotFound)?;
        let name = name.to_str().ok_or(FsError::NotFound)?;
        let node = match parent {
            Node::Root => match name {
                "v" => Node::VDir,
                "latest" => Node::Latest,
                "incoming" => Node::Incoming,
                _ => return Err(FsError::NotFound),
            },
            Node::VDir => Node::VersionDir(parse_version(name).ok_or(FsError::NotFound)?),
            Node::VersionDir(v) => Node::VersionFile(v, VersionFile::from_name(name).ok_or(FsError::NotFound)?),
            Node::Incoming => self.incoming_node(name)?,
            Node::Latest | Node::VersionFile(..) | Node::Staged(_) | Node::ErrorNote(_) => {
                return Err(FsError::NotDir);
            }
        };
        self.node_attr(node)
    }

    fn incoming_node(&self, name: &str) -> FsResult<Node> {
        let inc = lock(&self.incoming);
        if let Some(seq) = inc.names.get(name) {
            return Ok(Node::Staged(*seq));
        }
        if let Some(stem) = name.strip_suffix(ERROR_SUFFIX)
            && let Some(seq) = inc.names.get(stem)
            && inc.entries.get(seq).is_some_and(|e| e.error.is_some())
        {
            return Ok(Node::ErrorNote(*seq));
        }
        Err(FsError::NotFound)
    }

    /// The target of the `latest` symlink, read from the log now.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        match Node::from_ino(ino) {
            Some(Node::Latest) => Ok(format!("v/{}", self.versions.latest()?).into_bytes()),
            Some(_) => Err(FsError::Invalid),
            None => Err(FsError::NotFound),
        }
    }

    /// Open directory `ino`. `incoming/` is listed from a snapshot taken here, so a listing
    /// read in several calls is consistent.
    pub fn opendir(&self, ino: u64) -> FsResult<u64> {
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        match node {
            Node::Incoming => {
                let inc = lock(&self.incoming);
                let mut list = vec![
                    (inode::INCOMING, Kind::Dir, ".".to_string()),
                    (inode::ROOT, Kind::Dir, "..".to_string()),
                ];
                for (name, seq) in &inc.names {
                    list.push((Node::Staged(*seq).ino(), Kind::File, name.clone()));
                    if inc.entries.get(seq).is_some_and(|e| e.error.is_some()) {
                        list.push((Node::ErrorNote(*seq).ino(), Kind::File, format!("{name}{ERROR_SUFFIX}")));
                    }
                }
                drop(inc);
                let entries: Vec<DirEntry> = list
                    .into_iter()
                    .enumerate()
                    .map(|(i, (ino, kind, name))| DirEntry {
                        ino,
                        kind,
                        name,
                        next_offset: i as u64 + 1,
                    })
                    .collect();
                Ok(self.new_handle(Handle::Dir(self.shared_listing(entries))))
            }
            Node::Root | Node::VDir => Ok(0),
            Node::VersionDir(v) => {
                self.check_version(v)?;
                Ok(0)
            }
            Node::Latest | Node::VersionFile(..) | Node::Staged(_) | Node::ErrorNote(_) => Err(FsError::NotDir),
        }
    }

    /// Up to `limit` entries of directory `ino` after `offset` (0 for the start).
    pub fn readdir(&self, ino: u64, fh: u64, offset: u64, limit: usize) -> FsResult<Vec<DirEntry>> {
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        let fixed = |list: Vec<(u64, Kind, String)>| -> Vec<DirEntry> {
            list.into_iter()
                .enumerate()
                .skip(offset as usize)
                .take(limit)
                .map(|(i, (ino, kind, name))| DirEntry {
                    ino,
                    kind,
                    name,
                    next_offset: i as u64 + 1,
                })
                .collect()
        };
        match node {
            Node::Root => Ok(fixed(vec![
                (inode::ROOT, Kind::Dir, ".".into()),
                (inode::ROOT, Kind::Dir, "..".into()),
                (inode::LATEST, Kind::Symlink, "latest".into()),
                (inode::V_DIR, Kind::Dir, "v".into()),
                (inode::INCOMING, Kind::Dir, "incoming".into()),
            ])),
            Node::VersionDir(v) => {
                let mut list = vec![
                    (Node::VersionDir(v).ino(), Kind::Dir, ".".to_string()),
                    (inode::V_DIR, Kind::Dir, "..".to_string()),
                ];
                let gone = self.versions.data_gone(v)?;
                for f in VersionFile::ALL
                    .into_iter()
                    .filter(|f| !(gone && *f == VersionFile::Data))
                {
                    list.push((Node::VersionFile(v, f).ino(), Kind::File, f.name().to_string()));
                }
                Ok(fixed(list))
            }
            Node::VDir => {
                // Entry i: ".", "..", then version i - 2; computed from the offset, so a long
                // listing costs nothing per call beyond its own entries.
                let latest = self.versions.listed_latest()?;
                let total = latest.saturating_add(3);
                let mut out = Vec::new();
                let mut i = offset;
                while i < total && out.len() < limit {
                    let (ino, name) = match i {
                        0 => (inode::V_DIR, ".".to_string()),
                        1 => (inode::ROOT, "..".to_string()),
                        n => (Node::VersionDir(n - 2).ino(), (n - 2).to_string()),
                    };
                    out.push(DirEntry {
                        ino,
                        kind: Kind::Dir,
                        name,
                        next_offset: i + 1,
                    });
                    i += 1;
                }
                Ok(out)
            }
            Node::Incoming => match self.handle(fh)?.as_ref() {
                Handle::Dir(entries) => Ok(entries.iter().skip(offset as usize).take(limit).cloned().collect()),
                _ => Err(FsError::BadHandle),
            },
            Node::Latest | Node::VersionFile(..) | Node::Staged(_) | Node::ErrorNote(_) => Err(FsError::NotDir),
        }
    }

    /// The listing `entries` as one shared copy: every open handle of `incoming/` whose
    /// listing is the same holds the same allocation, so 5,000 open handles on a large
    /// directory cost one copy, not 5,000 (README "Limits"). The built list is dropped at once.
    fn shared_listing(&self, entries: Vec<DirEntry>) -> Arc<[DirEntry]> {
        let mut last = lock(&self.last_listing);
        if let Some(l) = last.as_ref()
            && **l == *entries
        {
            return l.clone();
        }
        let l: Arc<[DirEntry]> = Arc::from(entries);
        *last = Some(l.clone());
        l
    }

    /// Close a directory handle.
    pub fn releasedir(&self, fh: u64) {
        if fh != 0 {
            lock(&self.handles).remove(&fh);
        }
    }

    fn new_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, Arc::new(h));
        fh
    }

    fn handle(&self, fh: u64) -> FsResult<Arc<Handle>> {
        lock(&self.handles).get(&fh).cloned().ok_or(FsError::BadHandle)
    }

    /// Open file `ino` for reading, or for writing when `write` (only in `incoming/`).
    pub fn open(&self, ino: u64, write: bool, caller: Caller) -> FsResult<Opened> {
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        match node {
            Node::VersionFile(v, f) => {
                if write {
                    return Err(FsError::ReadOnly);
                }
                self.check_version(v)?;
                if f == VersionFile::Data && self.versions.data_gone(v)? {
                    return Err(FsError::NotFound);
                }
                let handle = match f {
                    VersionFile::Data => Handle::Concat(ConcatReader::new(
                        self.versions.body(v)?.data.clone(),
                        self.versions.files().clone(),
                    )),
                    VersionFile::Commit => Handle::Concat(ConcatReader::new(
                        Arc::new(self.commit_concat(v)?),
                        self.versions.files().clone(),
                    )),
                    VersionFile::Schema => Handle::Bytes(self.versions.body(v)?.schema_json.clone()),
                };
                Ok(Opened {
                    fh: self.new_handle(handle),
                    keep_cache: true,
                    no_flush: true,
                })
            }
            Node::Staged(seq) => {
                {
                    let mut inc = lock(&self.incoming);
                    let e = inc.get(seq)?;
                    e.handles += 1;
                    if write {
                        e.writers += 1;
                    }
                }
                Ok(Opened {
                    fh: self.new_handle(Handle::Staged {
                        seq,
                        writable: write,
                        opener: caller.tgid,
                    }),
                    keep_cache: false,
                    no_flush: !write,
                })
            }
            Node::ErrorNote(seq) => {
                if write {
                    return Err(FsError::Denied);
                }
                let text = {
                    let mut inc = lock(&self.incoming);
                    let e = inc.get(seq)?;
                    format!("{}\n", e.error.as_ref().ok_or(FsError::NotFound)?)
                };
                Ok(Opened {
                    fh: self.new_handle(Handle::Bytes(Arc::from(text.into_bytes()))),
                    keep_cache: false,
                    no_flush: true,
                })
            }
            Node::Root | Node::VDir | Node::Incoming | Node::VersionDir(_) => Err(FsError::IsDir),
            Node::Latest => Err(FsError::Invalid),
        }
    }

    /// The one file on disk that read-only node `ino` is, when it is one: `data.jsonl` of a
    /// version with a single data file, and every `commit.json`. Opened beneath the table with
    /// its size checked against the log now (EIO otherwise), for FUSE passthrough (README
    /// "Reading"). `None` for every other node.
    pub fn backing_file(&self, ino: u64) -> FsResult<Option<Arc<File>>> {
        let Some(Node::VersionFile(v, f)) = Node::from_ino(ino) else {
            return Ok(None);
        };
        let files = self.versions.files();
        match f {
            VersionFile::Data => {
                let body = self.versions.body(v)?;
                match body.data.single() {
                    Some(part) => Ok(Some(files.get_checked(part)?)),
                    None => Ok(None),
                }
            }
            VersionFile::Commit => {
                let concat = self.commit_concat(v)?;
                match concat.single() {
                    Some(part) => Ok(Some(files.get_checked(part)?)),
                    None => Ok(None),
                }
            }
            VersionFile::Schema => Ok(None),
        }
    }

    fn commit_concat(&self, v: u64) -> FsResult<Concat> {
        let head = self.versions.head(v)?;
        let rel = format!("{}/{}", crate::log::LOG_DIR, crate::log::commit_file_name(v));
        Ok(Concat::new(self.table().root(), [(rel, head.commit_size)]))
    }

    /// Create `name` in `parent` (only `incoming/`) and open it.
    pub fn create(&self, parent: u64, name: &OsStr, write: bool, caller: Caller) -> FsResult<(Attr, Opened)> {
        let seq = self.new_staged(parent, name)?;
        {
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            e.handles += 1;
            if write {
                e.writers += 1;
            }
        }
        let fh = self.new_handle(Handle::Staged {
            seq,
            writable: write,
            opener: caller.tgid,
        });
        let attr = self.node_attr(Node::Staged(seq))?;
        Ok((
            attr,
            Opened {
                fh,
                keep_cache: false,
                no_flush: !write,
            },
        ))
    }

    /// Create `name` in `parent` (only `incoming/`) without opening it (`mknod`).
    pub fn mknod(&self, parent: u64, name: &OsStr) -> FsResult<Attr> {
        let seq = self.new_staged(parent, name)?;
        self.node_attr(Node::Staged(seq))
    }

    /// Check that `parent` is `incoming/` for a change to the directory's entries.
    fn writable_dir(&self, parent: u64) -> FsResult<()> {
        match Node::from_ino(parent).ok_or(FsError::NotFound)? {
            Node::Incoming => Ok(()),
            Node::Root | Node::VDir | Node::VersionDir(_) => Err(FsError::ReadOnly),
            Node::Latest | Node::VersionFile(..) | Node::Staged(_) | Node::ErrorNote(_) => Err(FsError::NotDir),
        }
    }

    fn check_name(name: &OsStr) -> FsResult<&str> {
        let name = name
            .to_str()
            .ok_or_else(|| FsError::BadName("names in incoming/ must be UTF-8".into()))?;
        if !staging::valid_name(name) {
            return Err(FsError::BadName(format!(
                "{name:?} (names ending in {ERROR_SUFFIX} are reserved)"
            )));
        }
        Ok(name)
    }

    fn new_staged(&self, parent: u64, name: &OsStr) -> FsResult<u64> {
        self.writable_dir(parent)?;
        let name = Self::check_name(name)?;
        let mut inc = lock(&self.incoming);
        if inc.names.contains_key(name) {
            return Err(FsError::Exists);
        }
        let (id, file) = self.staging.create(name)?;
        let seq = inc.next_seq;
        inc.next_seq += 1;
        inc.names.insert(name.to_string(), seq);
        inc.mtime = Some(SystemTime::now());
        inc.entries.insert(
            seq,
            Staged {
                name: name.to_string(),
                state: State::Live,
                linked: true,
                id,
                file: Arc::new(file),
                base: 0,
                len: 0,
                error: None,
                handles: 0,
                writers: 0,
                mtime: SystemTime::now(),
                io: Arc::new(Mutex::new(())),
            },
        );
        debug!("incoming/{name}: created");
        Ok(seq)
    }

    /// [`TableView::read`] into `buf` (cleared first). Version files are read straight into its
    /// spare capacity, so a caller that keeps one buffer per thread allocates and zero-fills
    /// nothing per request.
    pub fn read_into(&self, fh: u64, offset: u64, size: u32, buf: &mut Vec<u8>) -> FsResult<()> {
        match self.handle(fh)?.as_ref() {
            Handle::Concat(r) => r.read_into(offset, size as usize, buf),
            _ => {
                *buf = self.read(fh, offset, size)?;
                Ok(())
            }
        }
    }

    /// Read up to `size` bytes at `offset`.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        match self.handle(fh)?.as_ref() {
            Handle::Concat(r) => r.read(offset, size as usize),
            Handle::Bytes(b) => {
                let start = (offset.min(b.len() as u64)) as usize;
                let end = start.saturating_add(size as usize).min(b.len());
                Ok(b[start..end].to_vec())
            }
            Handle::Staged { seq, .. } => {
                let (file, base, len) = {
                    let mut inc = lock(&self.incoming);
                    let e = inc.get(*seq)?;
                    (e.file.clone(), e.base, e.len)
                };
                if offset < base {
                    return Err(FsError::AlreadyCommitted);
                }
                let at = offset - base;
                if at >= len {
                    return Ok(Vec::new());
                }
                let n = (len - at).min(size as u64) as usize;
                let mut buf = vec![0u8; n];
                let mut done = 0;
                while done < n {
                    match file.read_at(&mut buf[done..], at + done as u64) {
                        Ok(0) => break,
                        Ok(k) => done += k,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                buf.truncate(done);
                Ok(buf)
            }
            Handle::Dir(_) => Err(FsError::IsDir),
        }
    }

    /// Make sure the staged file `seq` has a live segment to write into (a write after an
    /// fsync commit starts a new one at the committed length). Returns the data file and its
    /// base offset. Call with the file's I/O lock held.
    fn writable_segment(&self, seq: u64) -> FsResult<(Arc<File>, u64)> {
        let mut inc = lock(&self.incoming);
        let e = inc.get(seq)?;
        if e.state == State::Committed {
            let (id, file) = self.staging.create(&e.name)?;
            e.id = id;
            e.file = Arc::new(file);
            e.base += e.len;
            e.len = 0;
            e.state = State::Live;
            let name = e.name.clone();
            if let std::collections::btree_map::Entry::Vacant(slot) = inc.names.entry(name) {
                slot.insert(seq);
                inc.get(seq)?.linked = true;
            }
            let e = inc.get(seq)?;
            return Ok((e.file.clone(), e.base));
        }
        Ok((e.file.clone(), e.base))
    }

    fn staged_handle(&self, fh: u64) -> FsResult<(u64, bool, Option<u32>)> {
        match self.handle(fh)?.as_ref() {
            Handle::Staged { seq, writable, opener } => Ok((*seq, *writable, *opener)),
            Handle::Concat(_) | Handle::Bytes(_) => Err(FsError::ReadOnly),
            Handle::Dir(_) => Err(FsError::IsDir),
        }
    }

    fn io_lock(&self, seq: u64) -> FsResult<Arc<Mutex<()>>> {
        Ok(lock(&self.incoming).get(seq)?.io.clone())
    }

    /// Write `data` at `offset` (only staged files). Returns the bytes written.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<usize> {
        let (seq, writable, _) = self.staged_handle(fh)?;
        if !writable {
            return Err(FsError::BadHandle);
        }
        let io = self.io_lock(seq)?;
        let _g = lock(&io);
        let (file, base) = self.writable_segment(seq)?;
        if offset < base {
            return Err(FsError::AlreadyCommitted);
        }
        let at = offset - base;
        file.write_all_at(data, at)?;
        let mut inc = lock(&self.incoming);
        let e = inc.get(seq)?;
        e.len = e.len.max(at + data.len() as u64);
        e.mtime = SystemTime::now();
        Ok(data.len())
    }

    /// Change attributes. Outside `incoming/` every change is refused with EROFS.
    pub fn setattr(&self, ino: u64, set: SetAttrs) -> FsResult<Attr> {
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        let changes = set.size.is_some() || set.mtime.is_some() || set.other;
        match node {
            Node::Staged(seq) => {
                if let Some(size) = set.size {
                    let io = self.io_lock(seq)?;
                    let _g = lock(&io);
                    let base = lock(&self.incoming).get(seq)?.base;
                    if size < base {
                        return Err(FsError::AlreadyCommitted);
                    }
                    let (file, base) = self.writable_segment(seq)?;
                    file.set_len(size - base)?;
                    let mut inc = lock(&self.incoming);
                    let e = inc.get(seq)?;
                    e.len = size - base;
                    e.mtime = SystemTime::now();
                }
                if let Some(t) = set.mtime {
                    lock(&self.incoming).get(seq)?.mtime = t;
                }
                self.node_attr(node)
            }
            // rsync -a and cp -p set the times and mode of the directory they copy into.
            Node::Incoming if set.size.is_none() => self.node_attr(node),
            Node::ErrorNote(_) if changes => Err(FsError::Denied),
            _ if changes => Err(FsError::ReadOnly),
            _ => self.node_attr(node),
        }
    }

    /// Whether `fh` is a staged file opened for writing by process `tgid` (whose close may be a
    /// commit point).
    pub fn opened_by(&self, fh: u64, tgid: u32) -> bool {
        matches!(self.handle(fh).as_deref(), Ok(Handle::Staged { writable: true, opener: Some(o), .. }) if *o == tgid)
    }

    /// `close()` of a descriptor: commit point for the process that opened it for writing.
    pub fn flush(&self, fh: u64, caller: Caller) -> FsResult<()> {
        let (seq, writable, opener) = match self.handle(fh)?.as_ref() {
            Handle::Staged { seq, writable, opener } => (*seq, *writable, *opener),
            Handle::Concat(_) | Handle::Bytes(_) | Handle::Dir(_) => return Ok(()),
        };
        if !writable {
            return Ok(());
        }
        if caller.killed {
            info!("not committing staged file #{seq}: the writing process was killed by a signal");
            return Ok(());
        }
        if opener != caller.tgid {
            debug!(
                "flush of staged file #{seq} by {:?}, opened by {opener:?}: not a commit point",
                caller.tgid
            );
            return Ok(());
        }
        if caller.still_open {
            debug!("flush of staged file #{seq}: the process still has it open on another descriptor");
            return Ok(());
        }
        if lock(&self.incoming).get(seq)?.writers > 1 {
            debug!("flush of staged file #{seq}: other writers still have it open");
            return Ok(());
        }
        self.commit(seq)
    }

    /// `fsync()`: a commit point (unless the name is a scratch name or another writer has the
    /// file open, in which case the staged bytes are synced to disk).
    pub fn fsync(&self, fh: u64) -> FsResult<()> {
        let (seq, writable, _) = match self.handle(fh)?.as_ref() {
            Handle::Staged { seq, writable, opener } => (*seq, *writable, *opener),
            Handle::Concat(_) | Handle::Bytes(_) | Handle::Dir(_) => return Ok(()),
        };
        let (others, scratch, file) = {
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            (
                e.writers > u32::from(writable),
                staging::is_scratch(&e.name),
                e.file.clone(),
            )
        };
        if others || scratch {
            file.sync_data()?;
            return Ok(());
        }
        self.commit(seq)
    }

    /// The last descriptor of an open was closed.
    pub fn release(&self, fh: u64) {
        let Some(h) = lock(&self.handles).remove(&fh) else {
            return;
        };
        if let Handle::Staged { seq, writable, .. } = h.as_ref() {
            let mut inc = lock(&self.incoming);
            if let Some(e) = inc.entries.get_mut(seq) {
                e.handles = e.handles.saturating_sub(1);
                if *writable {
                    e.writers = e.writers.saturating_sub(1);
                }
            }
            self.drop_if_empty(&mut inc, *seq);
            inc.maybe_drop(*seq);
        }
    }

    /// An empty, plain-named staged file that nobody has open leaves `incoming/` (`touch`,
    /// a `cp` of an empty file): there is nothing to commit and nothing to keep.
    fn drop_if_empty(&self, inc: &mut Incoming, seq: u64) {
        let Some(e) = inc.entries.get_mut(&seq) else { return };
        if e.state != State::Live || !e.linked || e.handles > 0 || e.len > 0 || staging::is_scratch(&e.name) {
            return;
        }
        if let Err(err) = self.staging.remove(&e.id) {
            warn!("incoming/{}: cannot remove the empty staged file: {err}", e.name);
            return;
        }
        debug!("incoming/{}: empty, nothing committed", e.name);
        e.state = State::Unlinked;
        inc.unlink_name(seq);
    }

    /// Validate the staged file `seq` and commit it as one append; on success its name leaves
    /// `incoming/`. An empty file commits nothing (it leaves at its last close). On failure the bytes stay and
    /// `NAME.error` explains.
    fn commit(&self, seq: u64) -> FsResult<()> {
        let io = self.io_lock(seq)?;
        let _g = lock(&io);
        let (id, name, file, len) = {
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            if e.state != State::Live || !e.linked || staging::is_scratch(&e.name) {
                return Ok(());
            }
            (e.id.clone(), e.name.clone(), e.file.clone(), e.len)
        };
        if len == 0 {
            // Nothing to commit. (A shell redirection closes a duplicate of the new, still empty
            // file before anything is written.) An empty file leaves incoming/ at its last close.
            return Ok(());
        }
        let result = {
            let reader = BufReader::with_capacity(
                1 << 20,
                PreadReader {
                    file: file.clone(),
                    pos: 0,
                    end: len,
                },
            );
            let opts = WriteOptions {
                expect_version: None,
                extra_params: vec![(STAGING_ID_PARAM.to_string(), id.clone())],
            };
            self.table().append(&format!("incoming/{name}"), reader, &opts)
        };
        match result {
            Ok(version) => {
                match version {
                    Some(v) => info!("incoming/{name}: committed {len} bytes as version {v}"),
                    None => info!("incoming/{name}: no rows, nothing committed"),
                }
                if let Err(e) = self.staging.remove(&id) {
                    warn!("incoming/{name}: committed, but removing its staged bytes failed: {e}");
                }
                let mut inc = lock(&self.incoming);
                inc.unlink_name(seq);
                let e = inc.get(seq)?;
                e.state = State::Committed;
                e.error = None;
                inc.maybe_drop(seq);
                Ok(())
            }
            Err(err) => {
                let msg = err.to_string();
                warn!("incoming/{name}: not committed: {msg}");
                if let Err(e) = self.staging.set_error(&id, &msg) {
                    warn!("incoming/{name}: cannot record the error: {e}");
                }
                let mut inc = lock(&self.incoming);
                let e = inc.get(seq)?;
                e.error = Some(msg);
                e.mtime = SystemTime::now();
                inc.mtime = Some(SystemTime::now());
                Err(FsError::Table(err))
            }
        }
    }

    /// Remove `name` from `parent` (only `incoming/`): discards a staged file, or clears the
    /// note of a failed commit (`rm NAME.error`).
    pub fn unlink(&self, parent: u64, name: &OsStr) -> FsResult<()> {
        self.writable_dir(parent)?;
        let name = name.to_str().ok_or(FsError::NotFound)?;
        let mut inc = lock(&self.incoming);
        if let Some(&seq) = inc.names.get(name) {
            let id = inc.get(seq)?.id.clone();
            let e = inc.get(seq)?;
            if e.state == State::Live {
                e.state = State::Unlinked;
                self.staging.remove(&id)?;
            }
            inc.unlink_name(seq);
            inc.maybe_drop(seq);
            debug!("incoming/{name}: removed");
            return Ok(());
        }
        if let Some(stem) = name.strip_suffix(ERROR_SUFFIX)
            && let Some(&seq) = inc.names.get(stem)
        {
            let e = inc.get(seq)?;
            if e.error.is_some() {
                self.staging.clear_error(&e.id)?;
                e.error = None;
                inc.mtime = Some(SystemTime::now());
                return Ok(());
            }
        }
        Err(FsError::NotFound)
    }

    /// Rename within `incoming/`. Renaming to a plain (non-scratch) name commits the file when
    /// nobody has it open for writing (rsync, editors); if that commit fails, the file keeps the
    /// new name, `NAME.error` explains, and the rename reports the error.
    pub fn rename(&self, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, noreplace: bool) -> FsResult<()> {
        self.writable_dir(parent)?;
        self.writable_dir(newparent)?;
        let old = name.to_str().ok_or(FsError::NotFound)?;
        let new = Self::check_name(newname)?;
        let seq = {
            let mut inc = lock(&self.incoming);
            let Some(&seq) = inc.names.get(old) else {
                if old.ends_with(ERROR_SUFFIX) && self.incoming_node_locked(&inc, old).is_some() {
                    return Err(FsError::NotSupported);
                }
                return Err(FsError::NotFound);
            };
            if old == new {
                return Ok(());
            }
            if let Some(&dst) = inc.names.get(new) {
                if noreplace {
                    return Err(FsError::Exists);
                }
                let e = inc.get(dst)?;
                if e.state == State::Live {
                    e.state = State::Unlinked;
                    let id = e.id.clone();
                    self.staging.remove(&id)?;
                }
                inc.unlink_name(dst);
                inc.maybe_drop(dst);
            }
            let id = inc.get(seq)?.id.clone();
            self.staging.set_name(&id, new)?;
            inc.names.remove(old);
            inc.names.insert(new.to_string(), seq);
            inc.mtime = Some(SystemTime::now());
            let e = inc.get(seq)?;
            e.name = new.to_string();
            debug!("incoming/{old} renamed to {new}");
            if e.writers > 0 || staging::is_scratch(new) {
                return Ok(());
            }
            seq
        };
        self.commit(seq)?;
        let mut inc = lock(&self.incoming);
        self.drop_if_empty(&mut inc, seq);
        inc.maybe_drop(seq);
        Ok(())
    }

    fn incoming_node_locked(&self, inc: &Incoming, name: &str) -> Option<u64> {
        let stem = name.strip_suffix(ERROR_SUFFIX)?;
        let seq = inc.names.get(stem)?;
        inc.entries.get(seq)?.error.as_ref().map(|_| *seq)
    }

    /// `access(2)`: write access only in `incoming/`.
    pub fn access(&self, ino: u64, write: bool) -> FsResult<()> {
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        self.node_attr(node)?;
        match node {
            _ if !write => Ok(()),
            Node::Incoming | Node::Staged(_) => Ok(()),
            Node::ErrorNote(_) => Err(FsError::Denied),
            Node::Root | Node::VDir | Node::Latest | Node::VersionDir(_) | Node::VersionFile(..) => {
                Err(FsError::ReadOnly)
            }
        }
    }

    /// Statistics of the file system that holds the table.
    pub fn statfs(&self) -> FsResult<StatFs> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(self.table().root().as_os_str().as_bytes()).map_err(|_| FsError::Invalid)?;
        // SAFETY: statvfs writes into the zeroed struct we pass; the path is NUL-terminated.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
        if rc != 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(StatFs {
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            bsize: st.f_bsize as u32,
            namelen: 255,
            frsize: st.f_frsize as u32,
        })
    }
}

/// Staging ids recorded in the log (`commitInfo.operationParameters.stagingId`).
fn committed_staging_ids(table: &Table) -> FsResult<std::collections::HashSet<String>> {
    let latest = table.latest_version()?;
    let mut ids = std::collections::HashSet::new();
    for v in 0..=latest {
        if let Some(id) = table.commit_info(v)?.operation_parameters.get(STAGING_ID_PARAM) {
            ids.insert(id.clone());
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests;
