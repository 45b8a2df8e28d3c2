//! The mount's inner file system: every operation of docs/MOUNT.md "The mount: `tinydelta-mount
//! TABLE MOUNTPOINT`", with no `fuser` types, so it can be tested without a kernel. The `fuser`
//! wrapper in [`super::fs`] only converts arguments and replies.
//!
//! Concurrency: the view is shared by the daemon's worker threads. Short critical sections take
//! one lock for `incoming/` metadata and one for the handle table; file I/O runs outside them,
//! except that writes to, truncates of and commits of one staged file are serialised by that
//! file's own I/O lock (a commit of one file never blocks reads, other files or other commits).

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::util::sync::lock;
use crate::table::Table;

use super::changes::ChangesNode;
use super::errno::{FsError, FsResult};
use super::incoming::Incoming;
use super::inode::{self, MAX_PARTS, MAX_PARTS_VERSION, MAX_VERSION, Node, VersionFile};
use super::process::{ProcFs, Processes};
use super::versions::{Concat, ConcatReader, Mapped, Versions};
use crate::table::staging::{STAGING_ID_PARAM, Staging};

/// Settings of the view.
#[derive(Debug, Clone)]
pub struct ViewConfig {
    /// Owner shown for every node (the mounting user).
    pub uid: u32,
    /// Group shown for every node.
    pub gid: u32,
    /// How long the kernel may cache entries and attributes of immutable version nodes.
    pub version_ttl: Duration,
    /// Share `incoming/` read-only with others (0755 and 0644) instead of keeping it private
    /// to the mounting user (0700 and 0600).
    pub share_incoming: bool,
    /// The longest line `incoming/` accepts, bytes without the `\n` (`--max-line-bytes`).
    pub max_line_bytes: usize,
    /// How many staged files keep an open descriptor (`--max-open-staged`).
    pub max_open_staged: usize,
    /// The most bytes one close, fsync or rename in `incoming/` may validate
    /// (`--max-validate-bytes`).
    pub max_validate_bytes: u64,
    /// The most bytes the cache of version facts keeps (`--version-cache-bytes`,
    /// docs/MOUNT.md "Limits").
    pub version_cache_bytes: u64,
    /// Auto compaction after the commits of `incoming/` (`--auto-compact`; docs/MOUNT.md "Auto
    /// compaction"): on by default in the mount.
    pub auto_compact: crate::ops::optimize::AutoCompact,
}

impl Default for ViewConfig {
    fn default() -> Self {
        let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        ViewConfig {
            uid,
            gid,
            version_ttl: Duration::from_secs(24 * 3600),
            share_incoming: false,
            max_line_bytes: crate::format::rows::DEFAULT_MAX_LINE_BYTES,
            max_open_staged: crate::table::staging::DEFAULT_MAX_OPEN_STAGED,
            max_validate_bytes: crate::table::staging::DEFAULT_MAX_VALIDATE_BYTES,
            version_cache_bytes: super::versions::DEFAULT_VERSION_CACHE_BYTES,
            auto_compact: crate::ops::optimize::AutoCompact {
                default_on: true,
                min_age: super::incoming::GHOST_TTL + Duration::from_secs(1),
                ..Default::default()
            },
        }
    }
}

/// How long the kernel may cache the attributes of the newest version's folder and
/// `data.jsonl` while the daemon watches `_delta_log/` and invalidates them as soon as it sees a
/// newer version ([`TableView::stale_newest`]; docs/MOUNT.md "Reading"). It bounds how long
/// `ls -l` can show them writable after a newer version exists when an invalidation loses a
/// race with the reply that cached them. Their sizes never change (a version's bytes are
/// immutable; while an edit is open they have TTL 0).
pub const NEWEST_TTL: Duration = Duration::from_secs(1);

/// What the kernel may cache of the newest version's attributes, and which versions it was told
/// it may.
#[derive(Debug, Default)]
struct NewestCache {
    /// A watcher invalidates the newest version's attributes when a newer version lands
    /// ([`TableView::cache_newest`]): they are answered with [`NEWEST_TTL`], else with TTL 0.
    on: AtomicBool,
    /// Versions whose attributes were answered as the newest's with [`NEWEST_TTL`] and not
    /// invalidated since.
    shown: Mutex<BTreeSet<u64>>,
    /// Open edits of a `data.jsonl`: while any is open, every `data.jsonl`'s attributes have TTL
    /// 0 (the kernel keeps one size per inode, which the editor's writes and truncates change).
    edits: Arc<AtomicUsize>,
}

/// Counts one open edit in [`NewestCache::edits`] until dropped (with the edit's handle).
#[derive(Debug)]
pub(crate) struct EditOpen(Arc<AtomicUsize>);

impl Drop for EditOpen {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
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
    /// Cache lifetime for these attributes (and, unless [`Attr::entry_ttl`] says more, for the
    /// entry).
    pub ttl: Duration,
    /// Cache lifetime of the entry (the name's binding to this inode) when it differs from
    /// [`Attr::ttl`]: longer for a name that always names the same inode though its attributes
    /// change (`v`, `v/<newest>`, its `data.jsonl`), so a path walk through it needs no lookup
    /// while a `stat` still asks; 0 for `latest`, whose inode changes with the newest version
    /// while each inode's attributes do not (docs/MOUNT.md "Reading").
    pub entry_ttl: Option<Duration>,
    /// Reads of this file are served by the daemon in requests as large as the mount allows
    /// (a `data.jsonl` of several data files): `st_blksize` advertises 1 MiB, so tools that size
    /// their buffers by it (`cat`, `cp`, `dd`) read 1 MiB per call (docs/MOUNT.md "Direct first
    /// reads of `data.jsonl`").
    pub large_io: bool,
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
    /// The inode a closing request names (`None`: not a close).
    pub ino: Option<u64>,
    /// The thread that made the request (FUSE's `pid`), if known: a change in a version folder
    /// that is no longer the newest is taken when this thread's last lookup of `latest` named
    /// it (docs/MOUNT.md "Editing latest/data.jsonl").
    pub tid: Option<u32>,
}

/// Attribute changes of `setattr`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttrs {
    /// New size (truncate).
    pub size: Option<u64>,
    /// New modification time.
    pub mtime: Option<SystemTime>,
    /// New mode (permission bits are kept for `incoming/` files).
    pub mode: Option<u32>,
    /// Any other change (owner, atime...): accepted and ignored in `incoming/`, refused
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

/// An open file or directory handle.
#[derive(Debug)]
pub(super) enum Handle {
    Concat(ConcatReader),
    Bytes(Arc<[u8]>),
    Staged {
        seq: u64,
        writable: bool,
        opener: Option<u32>,
        /// Opened with `O_APPEND`: every write goes to the end of the batch the handle writes,
        /// whatever offset the kernel computed from the size it last saw of the inode, which
        /// other processes' batches of the same name share (docs/MOUNT.md "Concurrent writers on
        /// one name").
        append: bool,
    },
    Dir(Arc<[DirEntry]>),
    /// `changes.jsonl` (read at any offset from the feed's index).
    Changes,
    /// The newest version's `data.jsonl` opened for writing (docs/MOUNT.md "Editing
    /// latest/data.jsonl").
    Edit(Arc<edit::Edit>),
}

/// The inner file system of one mounted table.
#[derive(Debug)]
pub struct TableView {
    pub(super) versions: Versions,
    pub(super) staging: Staging,
    pub(super) cfg: ViewConfig,
    started: SystemTime,
    pub(super) incoming: Mutex<Incoming>,
    pub(super) handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    pub(super) procs: Box<dyn Processes>,
    /// Signalled when a handle of a staged file is released (its counts dropped).
    pub(super) released: std::sync::Condvar,
    /// The newest listing of `incoming/`, shared by the handles that opened it.
    last_listing: Mutex<Option<Arc<[DirEntry]>>>,
    /// `changes.jsonl` and `at/`.
    changes: ChangesNode,
    /// The background auto compaction: running, and asked to look again when it ends.
    compacting: Arc<(std::sync::atomic::AtomicBool, std::sync::atomic::AtomicBool)>,
    /// Why the last edit of a version's `data.jsonl` failed, by version (`v/<n>/data.jsonl.error`).
    pub(super) edit_notes: Mutex<HashMap<u64, String>>,
    /// The version of the `data.jsonl` each process (thread-group id) last opened for reading,
    /// and whether it was the newest version then: the base of its next edit (docs/MOUNT.md
    /// "Editing latest/data.jsonl"), since `latest` may move between the tool's read and its
    /// write.
    pub(super) read_bases: Mutex<HashMap<u32, (u64, bool)>>,
    /// The version each thread's last lookup of `latest` named (by FUSE's `pid`, a thread id):
    /// a tool that resolved `latest` to a version may still change that version's folder after
    /// a newer one landed (docs/MOUNT.md "Editing latest/data.jsonl").
    pub(super) latest_seen: Mutex<HashMap<u32, u64>>,
    /// The newest version's attributes the kernel may cache.
    newest: NewestCache,
}

/// Up to `limit` entries of a listing of `total` entries computed from their index (`entry(i)`:
/// inode, kind, name), starting after `offset`: nothing is built per handle or per call beyond
/// the entries returned.
fn computed(offset: u64, limit: usize, total: u64, entry: impl Fn(u64) -> (u64, Kind, String)) -> Vec<DirEntry> {
    computed_except(offset, limit, total, 0..0, entry)
}

/// [`computed`] without the entries whose index is in `except` (each kept entry's offset is still
/// its index).
fn computed_except(
    offset: u64,
    limit: usize,
    total: u64,
    except: std::ops::Range<u64>,
    entry: impl Fn(u64) -> (u64, Kind, String),
) -> Vec<DirEntry> {
    let from = if except.contains(&offset) { except.end } else { offset };
    (from..total)
        .filter(|i| !except.contains(i))
        .take(limit)
        .map(|i| {
            let (ino, kind, name) = entry(i);
            DirEntry {
                ino,
                kind,
                name,
                next_offset: i + 1,
            }
        })
        .collect()
}

fn ms_to_time(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH
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
        let (table, unwatched) = Table::open(root)?.watch_log();
        let staging = Staging::open_with(root, cfg.max_open_staged)?;
        // (Said once the staging lock is held: a second mount of the table says only that.)
        match unwatched {
            None => log::info!("_delta_log/ is watched with inotify: its listing is kept current"),
            Some(why) => log::info!("_delta_log/ is listed again after each change: {why}"),
        }
        let found = staging.scan()?;
        let committed = if found.is_empty() {
            Default::default()
        } else {
            committed_staging_ids(&table)
        };
        let view = TableView {
            versions: Versions::with_cache_bytes(table, cfg.version_cache_bytes)?,
            staging,
            cfg,
            started: SystemTime::now(),
            incoming: Mutex::new(Incoming::default()),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            procs: Box::new(ProcFs::default()),
            released: std::sync::Condvar::new(),
            last_listing: Mutex::new(None),
            changes: ChangesNode::default(),
            compacting: Arc::default(),
            edit_notes: Mutex::default(),
            read_bases: Mutex::default(),
            latest_seen: Mutex::default(),
            newest: NewestCache::default(),
        };
        view.restore_staged(found, &committed)?;
        Ok(view)
    }

    /// Load what the first request of a fresh mount most likely needs, before the mount reports
    /// ready: the listing of versions and the newest version's snapshot and data file sizes (the
    /// answers for `v/`, `latest` and `latest/data.jsonl`). Best effort: a table this cannot
    /// read still mounts, and each request reports its own error as before. Measured on the
    /// one-file bench table: the first `cat v/1/data.jsonl` after a fresh mount waited 0.5 ms for
    /// the lookup of `v` alone, which replayed the log.
    pub fn warm(&self) {
        // Done for nobody: a Parquet data file is converted when a reader asks, not here (its
        // conversion stops at the first MiB; docs/FORMAT.md "Parquet data files").
        let (newest, later) = crate::table::request::one_request(|| {
            crate::table::request::set_no_requester();
            self.node_attr(Node::VDir)
                .and_then(|_| self.node_attr(Node::Latest))
                .and_then(|_| self.versions.listed_latest())
                .and_then(|v| self.node_attr(Node::VersionFile(v, VersionFile::Data)))
        });
        crate::table::request::run(later);
        if let Err(e) = newest {
            log::debug!("nothing loaded before the first request: {e}");
        }
    }

    /// Use `procs` to find out who is calling (the daemon passes one that knows the mount id;
    /// tests pass a simulation).
    pub fn set_processes(&mut self, procs: Box<dyn Processes>) {
        self.procs = procs;
    }

    /// The table.
    pub fn table(&self) -> &Table {
        self.versions.table()
    }

    /// After a commit of `incoming/`: auto compaction in a background thread, one at a time
    /// (docs/MOUNT.md "Auto compaction"). A commit while one runs asks it to look once more
    /// when it ends. The user's commit is done and answered before; the compaction loses a
    /// conflict quietly, and an error is a warning in the log.
    pub(super) fn after_commit(&self) {
        let (running, again) = (&self.compacting.0, &self.compacting.1);
        again.store(true, Ordering::SeqCst);
        if running.swap(true, Ordering::SeqCst) {
            return;
        }
        let table = self.table().clone();
        let settings = self.cfg.auto_compact;
        let state = self.compacting.clone();
        let spawned = std::thread::Builder::new().name("auto-compact".into()).spawn(move || {
            let (running, again) = (&state.0, &state.1);
            let compact = |settings: &crate::ops::optimize::AutoCompact| match crate::ops::optimize::auto_compact(&table, settings) {
                Ok(Some(r)) => log::info!(
                    "auto compaction: packed {} files into {} as version {}",
                    r.removed_files,
                    r.added_files,
                    r.version.unwrap_or_default()
                ),
                Ok(None) => {}
                Err(e) => log::warn!("auto compaction skipped: {e}"),
            };
            loop {
                while again.swap(false, Ordering::SeqCst) {
                    compact(&settings);
                    // Once commits pause for the re-save window, the small files left (young
                    // ones, or fewer than the threshold) are packed too: a table fed by
                    // one-row commits settles into few files (docs/MOUNT.md "Auto compaction").
                    std::thread::sleep(settings.min_age);
                    if !again.load(Ordering::SeqCst) {
                        compact(&crate::ops::optimize::AutoCompact { min_files: 2, ..settings });
                    }
                }
                running.store(false, Ordering::SeqCst);
                // A commit that came after the last look but saw `running` set: look again.
                if !again.load(Ordering::SeqCst) || running.swap(true, Ordering::SeqCst) {
                    break;
                }
            }
        });
        if let Err(e) = spawned {
            log::warn!("auto compaction not started: {e}");
            running.store(false, Ordering::SeqCst);
        }
    }

    /// Names currently listed in `incoming/` (staged files only, without `.error` notes).
    #[cfg(any(test, feature = "internal-api"))]
    pub fn incoming_names(&self) -> Vec<String> {
        self.incoming_list()
            .into_iter()
            .filter(|(ino, _, _)| matches!(Node::from_ino(*ino), Some(Node::Staged(_))))
            .map(|(_, _, name)| name)
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn attr(
        &self,
        ino: u64,
        kind: Kind,
        size: u64,
        perm: u16,
        nlink: u32,
        mtime: SystemTime,
        ttl: Duration,
    ) -> Attr {
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
            entry_ttl: None,
            large_io: false,
        }
    }

    /// `a` for a name that always names its inode: the entry cached for the version TTL,
    /// whatever the attributes' TTL ([`Attr::entry_ttl`]).
    fn fixed_name(&self, mut a: Attr) -> Attr {
        a.entry_ttl = Some(self.cfg.version_ttl);
        a
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
                // One link per listed version: from the log's first (0 unless cleaned up) on.
                let listed = (latest + 1).saturating_sub(self.versions.first()?);
                let nlink = 2u32.saturating_add(u32::try_from(listed).unwrap_or(u32::MAX));
                let t = self.latest_time(latest)?;
                Ok(self.fixed_name(self.attr(ino, Kind::Dir, 0, 0o555, nlink, t, Duration::ZERO)))
            }
            Node::Latest => {
                let latest = self.versions.latest()?;
                let t = self.latest_time(latest)?;
                let size = format!("v/{latest}").len() as u64;
                Ok(self.attr(ino, Kind::Symlink, size, 0o777, 1, t, Duration::ZERO))
            }
            // The link to one version never changes: attributes for the version TTL; the entry
            // of `latest` is looked up again at every use (TTL 0, `TableView::lookup`).
            Node::LatestAt(v) => {
                self.check_version(v)?;
                let t = self.latest_time(v)?;
                let size = format!("v/{v}").len() as u64;
                Ok(self.attr(ino, Kind::Symlink, size, 0o777, 1, t, vttl))
            }
            Node::Incoming => {
                let t = lock(&self.incoming).mtime.unwrap_or(self.started);
                let perm = if self.cfg.share_incoming { 0o755 } else { 0o700 };
                Ok(self.fixed_name(self.attr(ino, Kind::Dir, 0, perm, 2, t, Duration::ZERO)))
            }
            Node::VersionDir(v) => {
                self.check_version(v)?;
                let t = ms_to_time(self.versions.head(v)?.timestamp_ms);
                // 2 + the `parts/` sub-folder.
                let nlink = if v <= MAX_PARTS_VERSION { 3 } else { 2 };
                // The newest version's folder takes edits (docs/MOUNT.md "Editing
                // latest/data.jsonl"): writable, and TTL 0 so that it shows read-only once a
                // newer version exists.
                if self.is_newest(v) {
                    let ttl = self.newest_ttl(v, false);
                    return Ok(self.fixed_name(self.attr(ino, Kind::Dir, 0, 0o755, nlink, t, ttl)));
                }
                Ok(self.attr(ino, Kind::Dir, 0, 0o555, nlink, t, vttl))
            }
            Node::VersionFile(v, f) => {
                self.check_version(v)?;
                let head = self.versions.head(v)?;
                if f == VersionFile::Data {
                    if self.versions.data_gone(v)? {
                        return Err(FsError::NotFound);
                    }
                    self.versions.check_parquet(v)?;
                }
                let (size, large_io) = match f {
                    VersionFile::Data => {
                        let data = &self.versions.body(v)?.data;
                        (data.len, data.count() > 1)
                    }
                    VersionFile::Commit => (head.commit_size, false),
                    VersionFile::Schema => (self.versions.body(v)?.schema_json.len() as u64, false),
                };
                let mut a = self.attr(ino, Kind::File, size, 0o444, 1, ms_to_time(head.timestamp_ms), vttl);
                a.large_io = large_io;
                if f == VersionFile::Data && self.is_newest(v) {
                    a.perm = 0o644;
                    a.ttl = self.newest_ttl(v, true);
                    a = self.fixed_name(a);
                } else if f == VersionFile::Data && self.edit_open() {
                    // An edit that outlived its version's newest days still changes the
                    // inode's size in the kernel.
                    a.ttl = Duration::ZERO;
                }
                Ok(a)
            }
            Node::Staged(_) | Node::ErrorNote(_) => self.staged_attr(node),
            Node::EditNote(v) => self.edit_note_attr(v),
            // TTL 0: the size grows the moment a commit is published (docs/MOUNT.md "Following a
            // table: `changes.jsonl`").
            Node::Changes => {
                let (size, t) = self.changes.size(self.table())?;
                let t = t.map_or(self.started, ms_to_time);
                Ok(self.fixed_name(self.attr(ino, Kind::File, size, 0o444, 1, t, Duration::ZERO)))
            }
            Node::AtDir => Ok(self.fixed_name(self.attr(ino, Kind::Dir, 0, 0o555, 2, self.started, Duration::ZERO))),
            Node::AtLink(v) => {
                let t = ms_to_time(self.changes.time_of(self.table(), v)?);
                let size = format!("../v/{v}").len() as u64;
                Ok(self.attr(ino, Kind::Symlink, size, 0o777, 1, t, Duration::ZERO))
            }
            Node::PartsDir(v) => {
                self.parts_of(v)?;
                let t = ms_to_time(self.versions.head(v)?.timestamp_ms);
                Ok(self.attr(ino, Kind::Dir, 0, 0o555, 2, t, vttl))
            }
            Node::Part(v, i) => {
                let part = self.part(v, i)?;
                self.versions.check_parquet(v)?;
                let t = ms_to_time(self.versions.head(v)?.timestamp_ms);
                Ok(self.attr(ino, Kind::File, part.len, 0o444, 1, t, vttl))
            }
        }
    }

    /// The TTL of the attributes of the newest version `v`'s folder (`data`: its `data.jsonl`):
    /// [`NEWEST_TTL`] when a watcher invalidates them ([`TableView::cache_newest`]) and, for
    /// `data.jsonl`, no edit is open; else 0. A version answered with a TTL is remembered until
    /// [`TableView::stale_newest`] hands it out for invalidation (before the reply is sent, so a
    /// newer version seen after it invalidates it).
    fn newest_ttl(&self, v: u64, data: bool) -> Duration {
        if !self.newest.on.load(Ordering::SeqCst) || (data && self.edit_open()) {
            return Duration::ZERO;
        }
        lock(&self.newest.shown).insert(v);
        NEWEST_TTL
    }

    /// Whether an edit of a `data.jsonl` is open.
    fn edit_open(&self) -> bool {
        self.newest.edits.load(Ordering::SeqCst) > 0
    }

    /// Count one more open edit until the returned guard is dropped.
    pub(super) fn edit_opened(&self) -> EditOpen {
        self.newest.edits.fetch_add(1, Ordering::SeqCst);
        EditOpen(self.newest.edits.clone())
    }

    /// From now on (`on`) the newest version's folder and `data.jsonl` are answered with
    /// [`NEWEST_TTL`]: the caller watches `_delta_log/` and, at every change, invalidates in the
    /// kernel the inodes [`TableView::stale_newest`] returns. `false` (the watch ended): TTL 0
    /// again; the caller then invalidates [`TableView::stale_newest`]'s inodes one last time.
    pub fn cache_newest(&self, on: bool) {
        self.newest.on.store(on, Ordering::SeqCst);
    }

    /// The inodes whose attributes the kernel may hold as the newest version's though that
    /// version is no longer the newest (or the newest cannot be read now): the folders and
    /// `data.jsonl` of those versions, forgotten here once returned. The caller invalidates
    /// them (off the request threads: docs/MOUNT.md "Reading").
    pub fn stale_newest(&self) -> Vec<u64> {
        // Nothing handed out (a stream of commits that nobody stats): no need to read the log.
        if lock(&self.newest.shown).is_empty() {
            return Vec::new();
        }
        let (latest, later) = crate::table::request::one_request(|| {
            crate::table::request::set_no_requester();
            self.versions.latest().ok()
        });
        crate::table::request::run(later);
        let mut shown = lock(&self.newest.shown);
        let stale: Vec<u64> = shown.iter().copied().filter(|v| Some(*v) != latest).collect();
        for v in &stale {
            shown.remove(v);
        }
        drop(shown);
        stale
            .into_iter()
            .flat_map(|v| [Node::VersionFile(v, VersionFile::Data).ino(), Node::VersionDir(v).ino()])
            .collect()
    }

    /// The parts of `v/<v>/data.jsonl` (docs/MOUNT.md "`v/<n>/parts/`"). `ENOENT` when the version
    /// does not exist, its data files were vacuumed, or it is past [`MAX_PARTS_VERSION`].
    fn parts_of(&self, v: u64) -> FsResult<Arc<Concat>> {
        if v > MAX_PARTS_VERSION {
            return Err(FsError::NotFound);
        }
        self.check_version(v)?;
        if self.versions.data_gone(v)? {
            return Err(FsError::NotFound);
        }
        Ok(self.versions.body(v)?.data.clone())
    }

    /// Part `i` of version `v`'s `data.jsonl`, as [`TableView::parts_of`] finds it.
    fn part(&self, v: u64, i: u64) -> FsResult<super::versions::Part> {
        let data = self.parts_of(v)?;
        usize::try_from(i)
            .ok()
            .and_then(|i| data.part(i))
            .ok_or(FsError::NotFound)
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
        self.lookup_by(parent, name, None)
    }

    /// [`TableView::lookup`] for thread `tid` (FUSE's `pid`): a lookup of `latest` is remembered
    /// as the version this thread resolved it to ([`TableView::latest_seen`]).
    pub fn lookup_by(&self, parent: u64, name: &OsStr, tid: Option<u32>) -> FsResult<Attr> {
        let parent = Node::from_ino(parent).ok_or(FsError::NotFound)?;
        let name = name.to_str().ok_or(FsError::NotFound)?;
        let node = match parent {
            Node::Root => match name {
                "v" => Node::VDir,
                // The link as it names the newest version now; its entry has TTL 0 (the
                // attributes of `Node::LatestAt` are cached, the entry never).
                "latest" => {
                    let latest = self.versions.latest()?;
                    if let Some(t) = tid {
                        self.note_latest_seen(t, latest);
                    }
                    let mut a = self.node_attr(Node::LatestAt(latest))?;
                    a.entry_ttl = Some(Duration::ZERO);
                    return Ok(a);
                }
                "incoming" => Node::Incoming,
                "changes.jsonl" => Node::Changes,
                "at" => Node::AtDir,
                _ => return Err(FsError::NotFound),
            },
            Node::AtDir => Node::AtLink(self.changes.lookup(self.table(), name)?),
            Node::VDir => Node::VersionDir(parse_version(name).ok_or(FsError::NotFound)?),
            Node::VersionDir(v) if name == "parts" => Node::PartsDir(v),
            Node::VersionDir(v) => match VersionFile::from_name(name) {
                Some(f) => Node::VersionFile(v, f),
                None => self.version_dir_node(v, name)?,
            },
            Node::PartsDir(v) => Node::Part(v, inode::parse_part_name(name).ok_or(FsError::NotFound)?),
            Node::Incoming => self.incoming_node(name)?,
            Node::Latest
            | Node::LatestAt(_)
            | Node::VersionFile(..)
            | Node::Staged(_)
            | Node::ErrorNote(_)
            | Node::Changes
            | Node::AtLink(_)
            | Node::EditNote(_)
            | Node::Part(..) => {
                return Err(FsError::NotDir);
            }
        };
        self.node_attr(node)
    }

    /// The target of the `latest` symlink, read from the log now.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        match Node::from_ino(ino) {
            Some(Node::Latest) => Ok(format!("v/{}", self.versions.latest()?).into_bytes()),
            Some(Node::LatestAt(v)) => Ok(format!("v/{v}").into_bytes()),
            Some(Node::AtLink(v)) => Ok(format!("../v/{v}").into_bytes()),
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
                let mut list = vec![
                    (inode::INCOMING, Kind::Dir, ".".to_string()),
                    (inode::ROOT, Kind::Dir, "..".to_string()),
                ];
                list.extend(self.incoming_list());
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
            Node::Root | Node::VDir | Node::AtDir => Ok(0),
            Node::VersionDir(v) => {
                self.check_version(v)?;
                Ok(0)
            }
            Node::PartsDir(v) => {
                self.parts_of(v)?;
                Ok(0)
            }
            Node::Latest
            | Node::LatestAt(_)
            | Node::VersionFile(..)
            | Node::Staged(_)
            | Node::ErrorNote(_)
            | Node::Changes
            | Node::AtLink(_)
            | Node::EditNote(_)
            | Node::Part(..) => Err(FsError::NotDir),
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
                (inode::CHANGES, Kind::File, "changes.jsonl".into()),
                (inode::AT_DIR, Kind::Dir, "at".into()),
            ])),
            Node::AtDir => {
                // Entry i: ".", "..", then the version i - 2 past the first, named by its time.
                let (first, times) = self.changes.times(self.table())?;
                let total = (times.len() as u64).saturating_add(2);
                Ok(computed(offset, limit, total, |i| match i {
                    0 => (inode::AT_DIR, Kind::Dir, ".".to_string()),
                    1 => (inode::ROOT, Kind::Dir, "..".to_string()),
                    n => (
                        Node::AtLink(first + n - 2).ino(),
                        Kind::Symlink,
                        ChangesNode::at_name(times[(n - 2) as usize]),
                    ),
                }))
            }
            Node::VersionDir(v) => {
                let mut list = vec![
                    (Node::VersionDir(v).ino(), Kind::Dir, ".".to_string()),
                    (inode::V_DIR, Kind::Dir, "..".to_string()),
                ];
                // A version tinydelta refuses (a feature it does not implement, no schema) is
                // still listed: only reading its files fails (EIO), and the log says why.
                let gone = match self.versions.data_gone(v) {
                    Err(FsError::Table(e)) if e.is_unsupported() || matches!(e, crate::error::Error::NoSchema { .. }) => false,
                    other => other?,
                };
                for f in VersionFile::ALL
                    .into_iter()
                    .filter(|f| !(gone && *f == VersionFile::Data))
                {
                    list.push((Node::VersionFile(v, f).ino(), Kind::File, f.name().to_string()));
                }
                if !gone && v <= MAX_PARTS_VERSION {
                    list.push((Node::PartsDir(v).ino(), Kind::Dir, "parts".to_string()));
                }
                list.extend(self.version_dir_list(v));
                Ok(fixed(list))
            }
            Node::PartsDir(v) => {
                // Entry i: ".", "..", then part i - 2.
                let data = self.parts_of(v)?;
                let total = (data.count() as u64).min(MAX_PARTS).saturating_add(2);
                Ok(computed(offset, limit, total, |i| match i {
                    0 => (node.ino(), Kind::Dir, ".".to_string()),
                    1 => (Node::VersionDir(v).ino(), Kind::Dir, "..".to_string()),
                    n => (Node::Part(v, n - 2).ino(), Kind::File, inode::part_name(n - 2)),
                }))
            }
            Node::VDir => {
                // Entry i: ".", "..", then version i - 2; computed from the offset, so a long
                // listing costs nothing per call beyond its own entries. Versions before the
                // log's first are skipped (cleaned up); an entry's offset stays its version's, so
                // a listing continued after the start moved forward skips nothing it should list.
                let latest = self.versions.listed_latest()?;
                let first = self.versions.first()?;
                let gone = 2..first.saturating_add(2);
                Ok(computed_except(offset, limit, latest.saturating_add(3), gone, |i| match i {
                    0 => (inode::V_DIR, Kind::Dir, ".".to_string()),
                    1 => (inode::ROOT, Kind::Dir, "..".to_string()),
                    n => (Node::VersionDir(n - 2).ino(), Kind::Dir, (n - 2).to_string()),
                }))
            }
            Node::Incoming => match self.handle(fh)?.as_ref() {
                Handle::Dir(entries) => Ok(entries.iter().skip(offset as usize).take(limit).cloned().collect()),
                _ => Err(FsError::BadHandle),
            },
            Node::Latest
            | Node::LatestAt(_)
            | Node::VersionFile(..)
            | Node::Staged(_)
            | Node::ErrorNote(_)
            | Node::Changes
            | Node::AtLink(_)
            | Node::EditNote(_)
            | Node::Part(..) => Err(FsError::NotDir),
        }
    }

    /// The listing `entries` as one shared copy: every open handle of `incoming/` whose
    /// listing is the same holds the same allocation, so 5,000 open handles on a large
    /// directory cost one copy, not 5,000 (docs/MOUNT.md "Limits"). The built list is dropped at
    /// once.
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

    pub(super) fn new_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, Arc::new(h));
        fh
    }

    pub(super) fn handle(&self, fh: u64) -> FsResult<Arc<Handle>> {
        lock(&self.handles).get(&fh).cloned().ok_or(FsError::BadHandle)
    }

    /// Open file `ino` for reading, or for writing when `write` (only in `incoming/`); `trunc`:
    /// `O_TRUNC` (the mount asks for atomic `O_TRUNC`).
    #[cfg(any(test, feature = "internal-api"))]
    pub fn open(&self, ino: u64, write: bool, trunc: bool, caller: Caller) -> FsResult<Opened> {
        self.open_flags(ino, write, if trunc { libc::O_TRUNC } else { 0 }, caller)
    }

    /// [`TableView::open`] with the open flags: `O_TRUNC` and `O_APPEND` matter (an `O_APPEND`
    /// writer of a staged file writes at the end of its own batch, docs/MOUNT.md "Concurrent
    /// writers on one name").
    pub fn open_flags(&self, ino: u64, write: bool, flags: i32, caller: Caller) -> FsResult<Opened> {
        let trunc = flags & libc::O_TRUNC != 0;
        let append = write && flags & libc::O_APPEND != 0;
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        match node {
            Node::VersionFile(v, f) => {
                if write && f == VersionFile::Data {
                    self.check_version(v)?;
                    return self.open_edit(v, flags, caller);
                }
                if f == VersionFile::Data {
                    self.note_read_base(v, caller);
                }
                if write {
                    return Err(FsError::ReadOnly);
                }
                self.check_version(v)?;
                if f == VersionFile::Data {
                    if self.versions.data_gone(v)? {
                        return Err(FsError::NotFound);
                    }
                    self.versions.check_parquet(v)?;
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
                    // Immutable, unless its commit was replaced (damage repaired and committed
                    // again): then the kernel's pages of the old rows must go.
                    keep_cache: !self.versions.replaced(v),
                    no_flush: true,
                })
            }
            Node::Staged(seq) => self.open_staged(seq, write, trunc, append, caller),
            Node::ErrorNote(_) | Node::EditNote(_) => {
                if write {
                    return Err(FsError::Denied);
                }
                let text = match node {
                    Node::ErrorNote(seq) => self.note_text(seq)?,
                    Node::EditNote(v) => self.edit_note_text(v)?,
                    _ => return Err(FsError::NotFound),
                };
                Ok(Opened {
                    fh: self.new_handle(Handle::Bytes(Arc::from(text.into_bytes()))),
                    keep_cache: false,
                    no_flush: true,
                })
            }
            Node::Changes => {
                if write {
                    return Err(FsError::ReadOnly);
                }
                // No FOPEN_KEEP_CACHE: the kernel drops cached pages when the size grows.
                Ok(Opened {
                    fh: self.new_handle(Handle::Changes),
                    keep_cache: false,
                    no_flush: true,
                })
            }
            Node::Part(v, i) => {
                if write {
                    return Err(FsError::ReadOnly);
                }
                let part = self.part(v, i)?;
                self.versions.check_parquet(v)?;
                let one = Concat::new_in(self.table().root(), [(part.rel, part.len, part.dir)]);
                Ok(Opened {
                    fh: self.new_handle(Handle::Concat(ConcatReader::new(
                        Arc::new(one),
                        self.versions.files().clone(),
                    ))),
                    keep_cache: !self.versions.replaced(v),
                    no_flush: true,
                })
            }
            Node::Root | Node::VDir | Node::Incoming | Node::VersionDir(_) | Node::AtDir | Node::PartsDir(_) => {
                Err(FsError::IsDir)
            }
            Node::Latest | Node::LatestAt(_) | Node::AtLink(_) => Err(FsError::Invalid),
        }
    }

    /// The one file on disk that read-only node `ino` is, when it is one: `data.jsonl` of a
    /// version with a single data file, and every `commit.json`. Opened beneath the table with
    /// its size checked against the log now (EIO otherwise), for FUSE passthrough (docs/MOUNT.md
    /// "Passthrough"). `None` for every other node.
    pub fn backing_file(&self, ino: u64) -> FsResult<Option<Arc<super::versions::PooledFile>>> {
        if let Some(Node::Part(v, i)) = Node::from_ino(ino) {
            self.versions.check_parquet(v)?;
            return Ok(Some(self.versions.files().get_checked(&self.part(v, i)?)?));
        }
        let Some(Node::VersionFile(v, f)) = Node::from_ino(ino) else {
            return Ok(None);
        };
        let files = self.versions.files();
        match f {
            VersionFile::Data => {
                let body = self.versions.body(v)?;
                self.versions.check_parquet(v)?;
                match body.data.single() {
                    Some(part) => Ok(Some(files.get_checked(&part)?)),
                    None => Ok(None),
                }
            }
            VersionFile::Commit => {
                let concat = self.commit_concat(v)?;
                match concat.single() {
                    Some(part) => Ok(Some(files.get_checked(&part)?)),
                    None => Ok(None),
                }
            }
            VersionFile::Schema => Ok(None),
        }
    }

    fn commit_concat(&self, v: u64) -> FsResult<Concat> {
        let head = self.versions.head(v)?;
        let rel = format!("{}/{}", crate::log::files::LOG_DIR, crate::log::files::commit_file_name(v));
        Ok(Concat::new(self.table().root(), [(rel, head.commit_size)]))
    }

    /// Create `name` in `parent` (only `incoming/`) and open it. `flags`: the open flags
    /// (`O_EXCL`, `O_TRUNC` matter).
    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        write: bool,
        flags: i32,
        caller: Caller,
    ) -> FsResult<(Attr, Opened)> {
        let since = match Node::from_ino(parent) {
            Some(Node::VersionDir(v)) => Some(v),
            _ => None,
        };
        let name = match since {
            Some(v) => edit::key(self.version_dir_name(v, name, caller)?),
            None => {
                self.writable_dir(parent)?;
                Self::check_name(name)?.to_string()
            }
        };
        let name = name.as_str();
        let excl = flags & libc::O_EXCL != 0;
        let trunc = flags & libc::O_TRUNC != 0;
        let append = write && flags & libc::O_APPEND != 0;
        let (seq, opened) = self.create_staged(name, write, trunc, append, excl, caller)?;
        if let Some(v) = since {
            self.scratch_created(seq, v);
        }
        let attr = self.node_attr(Node::Staged(seq))?;
        Ok((attr, opened))
    }

    /// Create `name` in `parent` (only `incoming/`) without opening it (`mknod`); `tid`: the
    /// calling thread, as [`Caller::tid`].
    pub fn mknod(&self, parent: u64, name: &OsStr, tid: Option<u32>) -> FsResult<Attr> {
        let since = match Node::from_ino(parent) {
            Some(Node::VersionDir(v)) => Some(v),
            _ => None,
        };
        let name = match since {
            Some(v) => edit::key(self.version_dir_name(v, name, Caller { tid, ..Caller::default() })?),
            None => {
                self.writable_dir(parent)?;
                Self::check_name(name)?.to_string()
            }
        };
        let name = name.as_str();
        let seq = self.new_staged(name)?;
        if let Some(v) = since {
            self.scratch_created(seq, v);
        }
        self.node_attr(Node::Staged(seq))
    }

    /// Check that `parent` is `incoming/` for a change to the directory's entries.
    fn writable_dir(&self, parent: u64) -> FsResult<()> {
        match Node::from_ino(parent).ok_or(FsError::NotFound)? {
            // A table of Parquet data files takes no JSONL: EROFS (docs/MOUNT.md "Errno table").
            Node::Incoming => Ok(self.table().check_accepts_writes("a write into incoming/")?),
            Node::Root | Node::VDir | Node::VersionDir(_) | Node::AtDir | Node::PartsDir(_) => Err(FsError::ReadOnly),
            Node::Latest
            | Node::LatestAt(_)
            | Node::VersionFile(..)
            | Node::Staged(_)
            | Node::ErrorNote(_)
            | Node::Changes
            | Node::AtLink(_)
            | Node::EditNote(_)
            | Node::Part(..) => Err(FsError::NotDir),
        }
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

    /// The `size` bytes at `offset` of handle `fh` mapped from the one data file they lie in,
    /// for a reply the kernel copies straight from that file's page cache ([`Mapped`]). `None`
    /// when the handle is not a version file, the range crosses two data files, or is past
    /// the end: read with [`TableView::read_into`] then.
    pub fn map(&self, fh: u64, offset: u64, size: u32) -> FsResult<Option<Mapped>> {
        match self.handle(fh)?.as_ref() {
            Handle::Concat(r) => r.map(offset, size as usize),
            _ => Ok(None),
        }
    }

    /// The stretches of data files that make up the `size` bytes at `offset` of handle `fh`,
    /// for a spliced reply ([`super::splice::Replies`]). `None` when the handle is not a
    /// version file: read with [`TableView::read_into`] then.
    pub fn pieces(&self, fh: u64, offset: u64, size: u32) -> FsResult<Option<Vec<super::splice::Piece>>> {
        match self.handle(fh)?.as_ref() {
            Handle::Concat(r) => r.pieces(offset, size as usize),
            _ => Ok(None),
        }
    }

    /// `lseek` with `SEEK_DATA` or `SEEK_HOLE` (the kernel answers the other `whence` values
    /// itself): files here have no holes, so data starts at any offset before the end and the one
    /// hole is the end (docs/MOUNT.md "Reading"). An offset at or past the end is `ENXIO`.
    pub fn seek(&self, ino: u64, offset: i64, whence: i32) -> FsResult<i64> {
        let size = i64::try_from(self.getattr(ino)?.size).unwrap_or(i64::MAX);
        if offset < 0 {
            return Err(FsError::Invalid);
        }
        if offset >= size {
            return Err(FsError::PastEnd);
        }
        match whence {
            libc::SEEK_DATA => Ok(offset),
            libc::SEEK_HOLE => Ok(size),
            _ => Err(FsError::Invalid),
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
            Handle::Staged { seq, .. } => self.read_staged(*seq, offset, size),
            Handle::Edit(e) => self.edit_read(e, offset, size),
            Handle::Dir(_) => Err(FsError::IsDir),
            Handle::Changes => {
                let mut buf = Vec::new();
                self.changes.read(self.table(), offset, size, &mut buf)?;
                Ok(buf)
            }
        }
    }

    pub(super) fn staged_handle(&self, fh: u64) -> FsResult<(u64, bool, Option<u32>)> {
        match self.handle(fh)?.as_ref() {
            Handle::Staged {
                seq, writable, opener, ..
            } => Ok((*seq, *writable, *opener)),
            Handle::Concat(_) | Handle::Bytes(_) | Handle::Changes | Handle::Edit(_) => Err(FsError::ReadOnly),
            Handle::Dir(_) => Err(FsError::IsDir),
        }
    }

    /// Write `data` at `offset` (only staged files). Returns the bytes written.
    #[cfg(any(test, feature = "internal-api"))]
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<usize> {
        self.write_from(fh, offset, data, false)
    }

    /// [`TableView::write`]; `cached`: the kernel writes back pages of its page cache (a
    /// shared writable mapping, `FUSE_WRITE_CACHE`) through `fh`, which may be any writable
    /// handle of the inode: the offset is then the page's, even through an `O_APPEND` handle
    /// (whose own writes go to the end of its batch).
    pub fn write_from(&self, fh: u64, offset: u64, data: &[u8], cached: bool) -> FsResult<usize> {
        if let Handle::Edit(e) = self.handle(fh)?.as_ref() {
            return self.edit_write(e, offset, data);
        }
        let (_, writable, _) = self.staged_handle(fh)?;
        if !writable {
            return Err(FsError::BadHandle);
        }
        self.write_staged(fh, offset, data, cached)
    }

    /// Change attributes. Outside `incoming/` every change is refused with EROFS.
    pub fn setattr(&self, ino: u64, fh: Option<u64>, set: SetAttrs) -> FsResult<Attr> {
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        let changes = set.size.is_some() || set.mtime.is_some() || set.mode.is_some() || set.other;
        match node {
            Node::Staged(seq) => {
                // ftruncate/fchmod act on the batch the descriptor writes (it may have moved
                // away from the inode when another process took the name).
                let staged_fh = fh.filter(|f| matches!(self.handle(*f).as_deref(), Ok(Handle::Staged { .. })));
                self.setattr_staged(seq, staged_fh, set)?;
                let shown = match staged_fh {
                    Some(f) => match self.handle(f)?.as_ref() {
                        Handle::Staged { seq, .. } => Node::Staged(*seq),
                        _ => node,
                    },
                    None => node,
                };
                let mut a = self.node_attr(shown)?;
                a.ino = ino;
                Ok(a)
            }
            // An edit's truncate (`truncate -s`, vim's ftruncate); other changes through it are
            // accepted and dropped, as in incoming/.
            Node::VersionFile(_, VersionFile::Data) if fh.is_some_and(|f| matches!(self.handle(f).as_deref(), Ok(Handle::Edit(_)))) => {
                let h = self.handle(fh.unwrap_or_default())?;
                let Handle::Edit(e) = h.as_ref() else {
                    return Err(FsError::BadHandle);
                };
                if let Some(size) = set.size {
                    self.edit_truncate(e, size)?;
                }
                let mut a = self.node_attr(node)?;
                a.size = self.edit_size(e);
                a.ttl = Duration::ZERO;
                Ok(a)
            }
            Node::EditNote(_) if changes => Err(FsError::Denied),
            // rsync -a and cp -p set the times and mode of the directory they copy into.
            Node::Incoming if set.size.is_none() => self.node_attr(node),
            Node::ErrorNote(_) if changes => Err(FsError::Denied),
            _ if changes => Err(FsError::ReadOnly),
            _ => self.node_attr(node),
        }
    }

    /// `setxattr`/`removexattr`: accepted and dropped on `incoming/` files (shutil.copy2, cp -a
    /// and rsync -X copy extended attributes after the data; the table keeps none), EROFS
    /// elsewhere.
    pub fn set_xattr(&self, ino: u64) -> FsResult<()> {
        match Node::from_ino(ino).ok_or(FsError::NotFound)? {
            Node::Staged(seq) => lock(&self.incoming).get(seq).map(|_| ()),
            Node::ErrorNote(_) | Node::Incoming => Err(FsError::OpNotSupported),
            _ => Err(FsError::ReadOnly),
        }
    }

    /// Whether `fh` is a staged file opened for writing by process `tgid` (whose close may be a
    /// commit point).
    pub fn opened_by(&self, fh: u64, tgid: u32) -> bool {
        match self.handle(fh).as_deref() {
            Ok(Handle::Staged {
                writable: true,
                opener: Some(o),
                ..
            }) => *o == tgid,
            Ok(Handle::Edit(e)) => e.opener == Some(tgid),
            _ => false,
        }
    }

    /// Whether `fh` is an open of the newest version's `data.jsonl` for writing, whose close
    /// may commit (docs/MOUNT.md "Editing latest/data.jsonl").
    pub fn is_edit(&self, fh: u64) -> bool {
        matches!(self.handle(fh).as_deref(), Ok(Handle::Edit(_)))
    }

    /// [`TableView::getattr`] through handle `fh`: an edit shows its writer its own size.
    pub fn getattr_fh(&self, ino: u64, fh: Option<u64>) -> FsResult<Attr> {
        let mut a = self.getattr(ino)?;
        if let Some(fh) = fh
            && let Ok(h) = self.handle(fh)
            && let Handle::Edit(e) = h.as_ref()
        {
            a.size = self.edit_size(e);
            a.ttl = Duration::ZERO;
        }
        Ok(a)
    }

    /// The process behind request `pid` (a thread id), as commit points care: its thread-group
    /// id (for every staged-file request) and, for a close by the opener, whether it was killed
    /// by a signal and whether it still holds another descriptor of inode `ino`.
    pub fn caller(&self, pid: u32, closing: Option<(u64, u64)>) -> Caller {
        let mut who = self.closing_caller(pid, closing);
        self.check_killed(pid, &mut who, closing);
        who
    }

    /// The cheap half of [`TableView::caller`] (no `/proc/PID/stat` read, which may have to
    /// wait for an exec): the thread group and, for a close by the opener, whether it still
    /// holds another descriptor. Either fact can make the close no commit point; then
    /// [`TableView::flush`] answers at once and `killed` is never needed.
    pub fn closing_caller(&self, pid: u32, closing: Option<(u64, u64)>) -> Caller {
        let mut who = Caller {
            tgid: self.procs.tgid(pid),
            killed: false,
            still_open: false,
            ino: closing.map(|(_, ino)| ino),
            tid: Some(pid),
        };
        if let (Some(tgid), Some((fh, ino))) = (who.tgid, closing)
            && self.opened_by(fh, tgid)
        {
            who.still_open = self.procs.holds_open(tgid, ino);
        }
        who
    }

    /// Whether a close with `who` ([`TableView::closing_caller`]) of handle `fh` may be a commit
    /// point: the opener's close with no other descriptor of the file left.
    pub fn may_commit(&self, fh: u64, who: &Caller) -> bool {
        who.tgid.is_some_and(|t| self.opened_by(fh, t)) && !who.still_open
    }

    /// The other half of [`TableView::caller`]: for a close that [`TableView::may_commit`],
    /// whether the process was killed by a signal.
    pub fn check_killed(&self, pid: u32, who: &mut Caller, closing: Option<(u64, u64)>) {
        if let Some((fh, _)) = closing
            && self.may_commit(fh, who)
        {
            who.killed = self.procs.killed_by_signal(pid);
        }
    }

    /// `close()` of a descriptor: commit point for the process that opened it for writing.
    pub fn flush(&self, fh: u64, caller: Caller) -> FsResult<()> {
        match self.handle(fh)?.as_ref() {
            Handle::Staged {
                writable, opener, seq, ..
            } => {
                if *writable {
                    self.note_scratch_read_base(*seq, caller);
                }
                self.flush_staged(fh, *writable, *opener, caller)
            }
            Handle::Edit(e) => self.edit_flush(e, caller),
            Handle::Concat(_) | Handle::Bytes(_) | Handle::Dir(_) | Handle::Changes => Ok(()),
        }
    }

    /// `fsync()`: a commit point through a descriptor opened for writing (docs/MOUNT.md "Commit
    /// points").
    pub fn fsync(&self, fh: u64) -> FsResult<()> {
        match self.handle(fh)?.as_ref() {
            Handle::Staged { writable, opener, .. } => self.fsync_staged(fh, *writable, *opener),
            Handle::Edit(e) => self.edit_fsync(e),
            Handle::Concat(_) | Handle::Bytes(_) | Handle::Dir(_) | Handle::Changes => Ok(()),
        }
    }

    /// The last descriptor of an open was closed.
    pub fn release(&self, fh: u64) {
        if matches!(self.handle(fh).as_deref(), Ok(Handle::Staged { .. })) {
            self.release_staged(fh);
        } else if let Some(h) = lock(&self.handles).remove(&fh)
            && let Handle::Edit(e) = h.as_ref()
        {
            self.edit_release(e);
        }
    }

    /// Remove `name` from `parent` (only `incoming/`): discards a staged file, forgets a
    /// committed name, or clears the note of a failed commit (`rm NAME.error`).
    pub fn unlink(&self, parent: u64, name: &OsStr) -> FsResult<()> {
        if let Some(Node::VersionDir(v)) = Node::from_ino(parent) {
            return self.version_dir_unlink(v, name);
        }
        self.writable_dir(parent)?;
        let name = name.to_str().ok_or(FsError::NotFound)?;
        self.unlink_staged(name)
    }

    /// Rename within `incoming/` (see [`TableView::rename_staged`]). `RENAME_EXCHANGE` is EINVAL.
    #[allow(clippy::too_many_arguments)]
    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        noreplace: bool,
        caller: Caller,
    ) -> FsResult<()> {
        match (Node::from_ino(parent), Node::from_ino(newparent)) {
            (Some(Node::VersionDir(v)), Some(Node::VersionDir(w))) => {
                return self.version_dir_rename(v, name, w, newname, noreplace, caller);
            }
            (Some(Node::VersionDir(_)), Some(Node::Incoming)) | (Some(Node::Incoming), Some(Node::VersionDir(_))) => {
                return Err(FsError::CrossDevice);
            }
            _ => {}
        }
        self.writable_dir(parent)?;
        self.writable_dir(newparent)?;
        let old = name.to_str().ok_or(FsError::NotFound)?;
        self.rename_staged(old, newname, noreplace, caller)
    }

    /// `access(2)`: write access only in `incoming/`.
    pub fn access(&self, ino: u64, write: bool) -> FsResult<()> {
        let node = Node::from_ino(ino).ok_or(FsError::NotFound)?;
        self.node_attr(node)?;
        match node {
            _ if !write => Ok(()),
            Node::Incoming | Node::Staged(_) => Ok(()),
            Node::VersionDir(v) | Node::VersionFile(v, VersionFile::Data) if self.is_newest(v) => Ok(()),
            Node::ErrorNote(_) | Node::EditNote(_) => Err(FsError::Denied),
            Node::Root
            | Node::VDir
            | Node::Latest
            | Node::LatestAt(_)
            | Node::VersionDir(_)
            | Node::VersionFile(..)
            | Node::Changes
            | Node::AtDir
            | Node::AtLink(_)
            | Node::PartsDir(_)
            | Node::Part(..) => Err(FsError::ReadOnly),
        }
    }

    /// Statistics of the file system that holds the table.
    pub fn statfs(&self) -> FsResult<StatFs> {
        let st = rustix::fs::statvfs(self.table().root()).map_err(io::Error::from)?;
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

/// Staging ids recorded in the log (`commitInfo.operationParameters.stagingId`), best effort
/// (docs/MOUNT.md "Starting and stopping"): a commit that cannot be read (a damaged newest
/// commit) or a log that cannot be listed is logged and skipped, and the staged files stay in
/// `incoming/`, where the user can read and save them, rather than the mount failing.
fn committed_staging_ids(table: &Table) -> std::collections::HashSet<String> {
    let mut ids = std::collections::HashSet::new();
    let seg = match table.segment() {
        Ok(seg) => seg,
        Err(e) => {
            log::warn!(
                "cannot tell which staged files the log already has ({}); all of them stay in incoming/",
                super::printable(&e.to_string())
            );
            return ids;
        }
    };
    let mut unreadable: Option<(u64, u64, String)> = None;
    for v in seg.first..=seg.end {
        match table.read_commit(v) {
            Ok(c) => {
                if let Some(id) = c.info.as_ref().and_then(|i| i.operation_parameters.get(STAGING_ID_PARAM)) {
                    ids.insert(id.clone());
                }
            }
            Err(e) => match &mut unreadable {
                Some((_, last, _)) => *last = v,
                None => unreadable = Some((v, v, e.to_string())),
            },
        }
    }
    if let Some((first, last, why)) = unreadable {
        let which = if first == last {
            format!("version {first}")
        } else {
            format!("versions {first} to {last}")
        };
        log::warn!(
            "cannot read the commit of {which} ({}): a staged file it committed would be back in incoming/; \
             it is not committed again unless closed, touched or renamed",
            super::printable(&why)
        );
    }
    ids
}

mod edit;
mod incoming;
#[cfg(test)]
mod tests;
