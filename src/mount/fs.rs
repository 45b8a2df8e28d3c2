//! The thin `fuser::Filesystem` wrapper: convert arguments, call [`TableView`], reply.
//!
//! Nothing here decides anything about the table or about who is calling (that is
//! [`TableView::caller`], over [`super::process`]).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::SystemTime;

use fuser::{
    AccessFlags, BackingId, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, IoctlFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use log::{debug, info, warn};

use crate::util::sync::lock;
use super::errno::FsError;
use super::process::ProcFs;
use super::view::{Attr, Caller, Kind, Opened, SetAttrs, TableView};

/// Largest read and write request the daemon asks the kernel for (the kernel caps requests at
/// `/proc/sys/fs/fuse/max_pages_limit` pages, 1 MiB by default).
pub const MAX_IO: u32 = 1 << 20;

/// Threads that run the requests of `incoming/` files that may commit (docs/MOUNT.md "Reading"):
/// as many commits run at once, their fsyncs side by side (docs/FORMAT.md "Concurrency"); fewer
/// under a low descriptor limit ([`super::versions::descriptor_budget`]).
pub const COMMIT_THREADS: usize = super::versions::MAX_COMMIT_THREADS;

/// The mounted file system: a [`TableView`] behind `fuser`'s trait.
#[derive(Debug)]
pub struct TableFs {
    view: Arc<TableView>,
    passthrough: Passthrough,
    direct: Direct,
    commits: Committer,
    /// Read replies spliced from the data files, once the session's device is known.
    splice: Arc<super::splice::Replies>,
    /// Invalidations of cached attributes, sent off the request threads once the session exists.
    invalidate: Arc<super::notify::Invalidator>,
}

/// A request's work, with its reply, handed to a [`Committer`] thread.
type Job = Box<dyn FnOnce() + Send>;

/// The threads that run `flush`, `fsync` and `rename` of `incoming/` files (each may
/// be a commit: validation, fsyncs, a link), so that a long commit never holds one of the
/// session's threads, which stay free for lookups and reads. Jobs wait in one queue; with
/// [`COMMIT_THREADS`] threads, up to that many commits run at once (their versions in the
/// order of their tickets: [`crate::table::commit::Sequencer`]).
#[derive(Debug)]
struct Committer {
    /// `None` when no thread could be started: jobs then run on the calling thread.
    tx: Option<Mutex<mpsc::Sender<Job>>>,
}

impl Committer {
    fn new(threads: usize) -> Committer {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let started = (0..threads)
            .filter(|i| {
                let rx = rx.clone();
                let spawned = std::thread::Builder::new().name(format!("commit-{i}")).spawn(move || {
                    loop {
                        // The lock is held only while waiting for the next job, not while it runs.
                        let job = lock(&rx).recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => break,
                        }
                    }
                });
                if let Err(e) = &spawned {
                    warn!("cannot start commit thread {i}: {e}");
                }
                spawned.is_ok()
            })
            .count();
        if started == 0 {
            warn!("no commit threads: commits run on the threads that serve reads");
        }
        Committer {
            tx: (started > 0).then(|| Mutex::new(tx)),
        }
    }

    /// Run `job` on a commit thread (here if there is none).
    fn run(&self, job: impl FnOnce() + Send + 'static) {
        match &self.tx {
            Some(tx) => {
                if let Err(mpsc::SendError(job)) = lock(tx).send(Box::new(job)) {
                    job();
                }
            }
            None => job(),
        }
    }
}

/// Whether `ino` is a file in `incoming/` (whose flush, fsync or rename may commit).
fn staged(ino: u64) -> bool {
    matches!(super::inode::Node::from_ino(ino), Some(super::inode::Node::Staged(_)))
}

impl TableFs {
    /// Wrap a view. `mnt_id` is the mount's id in /proc/self/mountinfo once known (0 before).
    /// `passthrough`: ask the kernel for FUSE passthrough at `init` (docs/MOUNT.md "Passthrough").
    /// `commit_threads`: how many commits run at once (at least 1, at most [`COMMIT_THREADS`];
    /// [`super::versions::DescriptorBudget::commit_threads`]).
    pub fn new(mut view: TableView, mnt_id: Arc<AtomicU64>, passthrough: bool, commit_threads: usize) -> TableFs {
        view.set_processes(Box::new(ProcFs {
            mnt_id,
            ..ProcFs::default()
        }));
        let view = Arc::new(view);
        TableFs {
            invalidate: Arc::new(super::notify::Invalidator::new(view.clone())),
            view,
            passthrough: Passthrough {
                wanted: passthrough,
                ..Passthrough::default()
            },
            direct: Direct::default(),
            commits: Committer::new(commit_threads.clamp(1, COMMIT_THREADS)),
            splice: Arc::default(),
        }
    }

    /// The spliced-reply writer, to hand the session's device descriptor once the session
    /// exists ([`super::splice::Replies::set_device`]); until then replies are written from
    /// mappings.
    pub fn splice_replies(&self) -> Arc<super::splice::Replies> {
        self.splice.clone()
    }

    /// The invalidator, to start with the session's notifier once the session exists
    /// ([`super::notify::Invalidator::start`]); until then the newest version's attributes have
    /// TTL 0.
    pub fn invalidator(&self) -> Arc<super::notify::Invalidator> {
        self.invalidate.clone()
    }
}

/// FUSE passthrough (Linux >= 6.9, `CONFIG_FUSE_PASSTHROUGH`, CAP_SYS_ADMIN): an open of a node
/// that is one file on disk ([`TableView::backing_file`]) is answered with a backing file, and the
/// kernel then reads that file itself, with no request to the daemon.
///
/// Kernel rules (fs/fuse/passthrough.c, iomode.c): every open of one inode must use the same
/// backing id while any is open, so ids are shared per inode and kept alive until the last
/// handle using it is released; an inode must not mix passthrough and cached opens, so a node
/// that qualifies is always opened the same way (after the first failure of `open_backing`
/// passthrough is off for the rest of the mount, but inodes still holding a backing id keep it);
/// passthrough opens carry neither `FOPEN_KEEP_CACHE` (the open would fail with EIO) nor
/// `FOPEN_DIRECT_IO` (reads would silently go to the daemon).
///
/// The ids of the last [`LINGER_IDS`] inodes whose last handle was released are kept too, so
/// that reopening a file (a `cat` of `latest/data.jsonl` in a loop) reuses its id instead of
/// registering the file again; a kept id is reused only while the pool still holds the very
/// descriptor it was registered from (so the same file), and registered again otherwise.
#[derive(Debug, Default)]
struct Passthrough {
    /// Asked for (`--no-passthrough` turns it off).
    wanted: bool,
    /// The kernel accepted the capability and no `open_backing` has failed.
    enabled: AtomicBool,
    /// Said once in the log that passthrough is in use.
    announced: AtomicBool,
    /// The backing id of each inode with passthrough opens (or a kept id), and the pooled
    /// file it was registered from.
    by_ino: Mutex<HashMap<u64, Registered>>,
    /// The backing id each open passthrough handle keeps alive until its release.
    by_fh: Mutex<HashMap<u64, Arc<BackingId>>>,
    /// Ids kept after their inode's last release, oldest first (at most [`LINGER_IDS`]).
    kept: Mutex<std::collections::VecDeque<(u64, Arc<BackingId>)>>,
}

/// A registered backing id (alive while a handle or the kept list holds it) and the pooled file
/// it was registered from.
type Registered = (Weak<BackingId>, Weak<super::versions::PooledFile>);

/// How many backing ids [`Passthrough`] keeps after their last handle was released. Each holds
/// a reference to an open data file in the kernel (not a descriptor of the daemon).
const LINGER_IDS: usize = 16;

impl Passthrough {
    /// The backing id for inode `ino` (shared with its other open handles, or registered now
    /// from `file`); `None` when passthrough is off or registering failed (logged once; then off).
    fn backing(
        &self,
        ino: u64,
        file: &Arc<super::versions::PooledFile>,
        reply: &ReplyOpen,
    ) -> Option<Arc<BackingId>> {
        let mut by_ino = lock(&self.by_ino);
        if let Some((id, from)) = by_ino.get(&ino)
            && let Some(id) = id.upgrade()
        {
            let mut kept = lock(&self.kept);
            let k = kept.iter().position(|(i, _)| *i == ino);
            // Handles still open share it whatever; a kept one only for the same descriptor.
            let open_handles = Arc::strong_count(&id) - 1 - usize::from(k.is_some());
            if open_handles > 0 || Weak::ptr_eq(from, &Arc::downgrade(file)) {
                return Some(id);
            }
            if let Some(k) = k {
                kept.remove(k);
            }
        }
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        match reply.open_backing(&***file) {
            Ok(id) => {
                let id = Arc::new(id);
                by_ino.insert(ino, (Arc::downgrade(&id), Arc::downgrade(file)));
                if !self.announced.swap(true, Ordering::Relaxed) {
                    info!("passthrough in use: single-file versions and commit files are read by the kernel directly");
                }
                Some(id)
            }
            Err(e) => {
                if self.enabled.swap(false, Ordering::Relaxed) {
                    warn!(
                        "passthrough unavailable (registering a backing file failed: {e}); reading through the daemon"
                    );
                }
                None
            }
        }
    }

    /// Whether an open of `ino` may be a passthrough open: passthrough is on, or the inode still
    /// has passthrough handles (which the new one must join).
    fn active(&self, ino: u64) -> bool {
        self.wanted && (self.enabled.load(Ordering::Relaxed) || lock(&self.by_ino).contains_key(&ino))
    }

    /// Handle `fh` of inode `ino` was released: drop its backing id, keeping it among the
    /// [`LINGER_IDS`] last released ones; the entry of an inode whose id nothing holds any more
    /// goes (the id is closed in the kernel when the last reference goes).
    fn release(&self, ino: u64, fh: u64) {
        let Some(id) = lock(&self.by_fh).remove(&fh) else {
            return;
        };
        let mut by_ino = lock(&self.by_ino);
        let mut kept = lock(&self.kept);
        if let Some(k) = kept.iter().position(|(i, _)| *i == ino) {
            kept.remove(k);
        }
        kept.push_back((ino, id));
        let evicted = (kept.len() > LINGER_IDS).then(|| kept.pop_front()).flatten();
        drop(kept);
        if let Some((old, id)) = evicted {
            drop(id);
            if by_ino.get(&old).is_some_and(|(w, _)| w.strong_count() == 0) {
                by_ino.remove(&old);
            }
        }
    }
}

/// Direct reads (`FOPEN_DIRECT_IO`) of a `data.jsonl` that the daemon serves (one of several
/// data files, or any when passthrough is off), until a reader has read it to its end; opens
/// after that use the page cache (docs/MOUNT.md "Direct first reads of `data.jsonl`").
///
/// A direct read is one round trip whose reply the kernel copies straight into the reader's
/// buffer: no page of the mount's page cache is allocated, filled and then copied again. That
/// is the fastest first read, but every later read would come to the daemon again, while a
/// read from the page cache costs one copy and no round trip; so once a file has been read
/// through, its next opens fill the page cache and the ones after that are served from it.
///
/// Kernel rules (fs/fuse/iomode.c, file.c): direct opens take no part in an inode's io mode,
/// so they may be open together with cached opens of the same inode (its data never changes);
/// never on an inode with passthrough opens (those nodes return before this is asked). A
/// shared `mmap` of a direct open needs `FUSE_DIRECT_IO_ALLOW_MMAP` (Linux >= 6.6; it then
/// uses the page cache): without it, no direct opens at all.
#[derive(Debug, Default)]
struct Direct {
    /// The kernel took `FUSE_DIRECT_IO_ALLOW_MMAP`.
    enabled: AtomicBool,
    /// The `data.jsonl` inodes some reader has read to their end.
    read_through: Mutex<HashSet<u64>>,
}

impl Direct {
    /// Whether a read-only open of `ino` (not a passthrough open) is direct.
    fn wanted(&self, ino: u64) -> bool {
        self.applies(ino) && !lock(&self.read_through).contains(&ino)
    }

    /// Whether direct opens are on and `ino` is a `data.jsonl`.
    fn applies(&self, ino: u64) -> bool {
        self.enabled.load(Ordering::Relaxed)
            && matches!(
                super::inode::Node::from_ino(ino),
                Some(super::inode::Node::VersionFile(_, super::inode::VersionFile::Data))
            )
    }

    /// `FOPEN_DIRECT_IO` for a handle that writes a staged file of `incoming/` (when direct
    /// opens are on): each write reaches the daemon straight from the writer's buffer, so the
    /// kernel neither allocates nor fills pages of the mount's page cache for bytes the daemon
    /// writes to the staged file anyway (`cp` into `incoming/`: one copy of each byte less;
    /// docs/MOUNT.md "One pass over the bytes, written once"). Reads and shared mappings of the
    /// file still work (the kernel keeps them coherent, `FUSE_DIRECT_IO_ALLOW_MMAP`).
    fn staged_write(&self, ino: u64, write: bool) -> FopenFlags {
        match write
            && self.enabled.load(Ordering::Relaxed)
            && matches!(super::inode::Node::from_ino(ino), Some(super::inode::Node::Staged(_)))
        {
            true => FopenFlags::FOPEN_DIRECT_IO,
            false => FopenFlags::empty(),
        }
    }

    /// A read of `ino` came back short: the reader reached the end.
    fn reached_end(&self, ino: u64) {
        if self.applies(ino) {
            lock(&self.read_through).insert(ino);
        }
    }
}

/// Run `f` as one request ([`crate::table::request::one_request`]), and the work it deferred at once.
/// Requests that may commit use [`crate::table::request::one_request`] directly and run the deferred
/// work (the version checksum) after their reply.
fn request<R>(f: impl FnOnce() -> R) -> R {
    let (out, later) = crate::table::request::one_request(f);
    crate::table::request::run(later);
    out
}

/// [`request`] for the process that sent `req`: long work it starts (a Parquet data file's
/// conversion) stops once that process has exited (docs/FORMAT.md "Parquet data files").
fn request_for<R>(req: &Request, f: impl FnOnce() -> R) -> R {
    let pid = req.pid();
    request(|| {
        crate::table::request::set_requester(pid);
        f()
    })
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn log_err(op: &str, e: &FsError) -> Errno {
    debug!("{op}: {}", super::printable(&e.to_string()));
    errno(e)
}

impl TableFs {
    /// The attributes fuser sends for `a`.
    fn file_attr(&self, a: &Attr) -> FileAttr {
        file_attr(a, self.splice.ready())
    }
}

/// The attributes fuser sends for `a`; `spliced`: read replies are spliced
/// ([`super::splice::Replies::ready`]).
fn file_attr(a: &Attr, spliced: bool) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: a.mtime,
        kind: match a.kind {
            Kind::Dir => FileType::Directory,
            Kind::File => FileType::RegularFile,
            Kind::Symlink => FileType::Symlink,
        },
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        // Staged files in incoming/ advertise the largest write the mount takes, so tools that
        // size their buffers by st_blksize (cp, cat, dd) write 1 MiB per request instead of
        // 128 KiB: 8 requests per 8 MB instead of 64 (measured with `cp` into incoming/). A
        // data.jsonl of several data files does the same for reads: 1 MiB per request, or 512 KiB
        // when replies are spliced, the most a pipe holds without privileges (a spliced 512 KiB
        // costs the daemon less than a 1 MiB written from a mapping: src/mount/splice.rs).
        blksize: match super::inode::Node::from_ino(a.ino) {
            Some(super::inode::Node::Staged(_)) => MAX_IO,
            _ if a.large_io && spliced => super::splice::REPLY_BYTES,
            _ if a.large_io => MAX_IO,
            _ => 4096,
        },
        flags: 0,
    }
}

fn fopen(o: &Opened) -> FopenFlags {
    let mut f = FopenFlags::empty();
    if o.keep_cache {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if o.no_flush {
        f |= FopenFlags::FOPEN_NOFLUSH;
    }
    f
}

fn is_write(flags: i32) -> bool {
    matches!(OpenFlags(flags).acc_mode(), OpenAccMode::O_WRONLY | OpenAccMode::O_RDWR) || flags & libc::O_TRUNC != 0
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for TableFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        if let Err(max) = config.set_max_readahead(MAX_IO) {
            let _ = config.set_max_readahead(max);
        }
        if let Err(max) = config.set_max_write(MAX_IO) {
            let _ = config.set_max_write(max);
        }
        let _ = config.set_max_background(64);
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        // Symlink targets in the page cache: every symlink inode of the mount names one target
        // for its life (`latest` is one inode per version it names, docs/MOUNT.md "Reading"), so
        // a path through `latest` costs its lookup and no readlink.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_CACHE_SYMLINKS);
        // Direct reads of data.jsonl only where a shared mmap of a direct open still works.
        if config
            .add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
            .is_ok()
        {
            self.direct.enabled.store(true, Ordering::Relaxed);
        } else {
            info!(
                "the kernel has no FUSE_DIRECT_IO_ALLOW_MMAP (Linux < 6.6): data.jsonl is always read through the page cache"
            );
        }
        // O_TRUNC arrives with open (not as a later setattr), so incoming/ sees who truncates.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC);
        // Passthrough needs a stack depth of at least 1 (with 0 every open_backing fails with
        // EPERM); 1 allows backing files on a non-stacked file system (ext4, xfs, btrfs).
        // No FUSE_WRITEBACK_CACHE: it would turn passthrough off silently.
        if !self.passthrough.wanted {
            info!("passthrough off (--no-passthrough): every read goes through the daemon");
        } else if config.add_capabilities(fuser::InitFlags::FUSE_PASSTHROUGH).is_ok() {
            let _ = config.set_max_stack_depth(1);
            self.passthrough.enabled.store(true, Ordering::Relaxed);
            info!(
                "passthrough offered by the kernel: single-file versions and commit files will be read by it directly"
            );
        } else {
            info!(
                "passthrough not offered by the kernel (needs Linux >= 6.9 with CONFIG_FUSE_PASSTHROUGH): every read goes through the daemon"
            );
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match request_for(req, || self.view.lookup_by(parent.0, name, Some(req.pid()))) {
            Ok(a) => reply.entry_with_ttls(&a.ttl, &a.entry_ttl.unwrap_or(a.ttl), &self.file_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match request_for(req, || self.view.getattr_fh(ino.0, fh.map(|f| f.0))) {
            Ok(a) => reply.attr(&a.ttl, &self.file_attr(&a)),
            Err(e) => reply.error(log_err("getattr", &e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttrs {
            size,
            mtime: mtime.map(time),
            mode,
            other: uid.is_some() || gid.is_some() || atime.is_some(),
        };
        match request(|| self.view.setattr(ino.0, fh.map(|f| f.0), set)) {
            Ok(a) => reply.attr(&a.ttl, &self.file_attr(&a)),
            Err(e) => reply.error(log_err("setattr", &e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match request(|| self.view.readlink(ino.0)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(log_err("readlink", &e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            let e = if parent.0 == super::inode::INCOMING {
                FsError::NotSupported
            } else {
                FsError::ReadOnly
            };
            return reply.error(errno(&e));
        }
        match request(|| self.view.mknod(parent.0, name, Some(req.pid()))) {
            Ok(a) => reply.entry(&a.ttl, &self.file_attr(&a), Generation(0)),
            Err(e) => reply.error(log_err("mknod", &e)),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        reply.error(errno(&self.no_new_kind(parent.0)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match request(|| self.view.unlink(parent.0, name)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(log_err("unlink", &e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let e = match self.view.lookup(parent.0, name) {
            Err(e) => e,
            Ok(a) if a.kind != Kind::Dir => FsError::NotDir,
            Ok(_) => FsError::ReadOnly,
        };
        reply.error(errno(&e));
    }

    fn symlink(&self, _req: &Request, parent: INodeNo, _link_name: &OsStr, _target: &Path, reply: ReplyEntry) {
        reply.error(errno(&self.no_new_kind(parent.0)));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return reply.error(errno(&FsError::Invalid));
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let (view, pid) = (self.view.clone(), req.pid());
        let onto_data = newname == "data.jsonl";
        let (name, newname) = (name.to_owned(), newname.to_owned());
        let job = move || {
            let who = view.caller(pid, None);
            let (res, later) =
                crate::table::request::one_request(|| view.rename(parent.0, &name, newparent.0, &newname, noreplace, who));
            match res {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(log_err("rename", &e)),
            }
            crate::table::request::run(later);
        };
        // A rename onto a version's data.jsonl commits an edit (docs/MOUNT.md "Editing
        // latest/data.jsonl").
        if parent.0 == super::inode::INCOMING || newparent.0 == super::inode::INCOMING || onto_data {
            self.commits.run(job)
        } else {
            job()
        }
    }

    fn link(&self, _req: &Request, _ino: INodeNo, newparent: INodeNo, _newname: &OsStr, reply: ReplyEntry) {
        reply.error(errno(&self.no_new_kind(newparent.0)));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = is_write(flags.0);
        let edit = write
            && matches!(
                super::inode::Node::from_ino(ino.0),
                Some(super::inode::Node::VersionFile(_, super::inode::VersionFile::Data))
            );
        let who = if edit || super::inode::Node::from_ino(ino.0).is_some_and(|n| matches!(n, super::inode::Node::Staged(_))) {
            self.view.caller(req.pid(), None)
        } else if matches!(
            super::inode::Node::from_ino(ino.0),
            Some(super::inode::Node::VersionFile(_, super::inode::VersionFile::Data))
        ) {
            // A read of data.jsonl is the base of the reader's next edit (its thread group).
            self.view.closing_caller(req.pid(), None)
        } else {
            Caller::default()
        };
        let o = match request_for(req, || self.view.open_flags(ino.0, write, flags.0, who)) {
            Ok(o) => o,
            Err(e) => return reply.error(log_err("open", &e)),
        };
        if !write && self.passthrough.active(ino.0) {
            match self.view.backing_file(ino.0) {
                Ok(None) => {}
                Ok(Some(file)) => {
                    if let Some(id) = self.passthrough.backing(ino.0, &file, &reply) {
                        lock(&self.passthrough.by_fh).insert(o.fh, id.clone());
                        return reply.opened_passthrough(FileHandle(o.fh), FopenFlags::FOPEN_NOFLUSH, &id);
                    }
                }
                // A data file that is missing, a symlink, or not the size the log records: the
                // open fails (EIO), as a read through the daemon would.
                Err(e) => {
                    self.view.release(o.fh);
                    return reply.error(log_err("open", &e));
                }
            }
        }
        if !write && self.direct.wanted(ino.0) {
            return reply.opened(
                FileHandle(o.fh),
                FopenFlags::FOPEN_DIRECT_IO | (fopen(&o) & FopenFlags::FOPEN_NOFLUSH),
            );
        }
        // An edit of data.jsonl is direct: the writer's bytes never enter the page cache of the
        // version's inode, which other readers share (docs/MOUNT.md "Editing latest/data.jsonl").
        if edit {
            return reply.opened(FileHandle(o.fh), FopenFlags::FOPEN_DIRECT_IO);
        }
        reply.opened(FileHandle(o.fh), fopen(&o) | self.direct.staged_write(ino.0, write))
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // Large reads: the reply is spliced from the data files' pages, one copy by the kernel
        // into the reader's buffer (src/mount/splice.rs).
        if size as usize >= super::versions::MAP_MIN && self.splice.ready() {
            match self.view.pieces(fh.0, offset, size) {
                Ok(Some(pieces)) => {
                    let len: usize = pieces.iter().map(|p| p.len).sum();
                    match self.splice.reply(req.unique().0, &pieces) {
                        Ok(super::splice::Sent::Yes) => {
                            // The kernel has the reply: fuser's reply object must not send a
                            // second one (its drop would answer EIO), so it is forgotten. It
                            // holds no allocation of its own, only a reference to the device.
                            std::mem::forget(reply);
                            if len < size as usize {
                                self.direct.reached_end(ino.0);
                            }
                            return;
                        }
                        Ok(super::splice::Sent::No) => {}
                        Err(e) => return reply.error(log_err("read", &e)),
                    }
                }
                Ok(None) => {}
                Err(e) => return reply.error(log_err("read", &e)),
            }
        }
        // Large reads of one data file: the kernel copies the reply from the file's pages.
        if size as usize >= super::versions::MAP_MIN {
            match self.view.map(fh.0, offset, size) {
                Ok(Some(m)) => {
                    let short = m.len() < size as usize;
                    // SAFETY: the bytes go to the reply's writev and nowhere else.
                    reply.data(unsafe { m.bytes() });
                    drop(m);
                    if short {
                        self.direct.reached_end(ino.0);
                    }
                    return;
                }
                Ok(None) => {}
                Err(e) => return reply.error(log_err("read", &e)),
            }
        }
        // One reply buffer per worker thread, reused: no allocation or zero-fill per read.
        thread_local! {
            static REPLY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        REPLY.with_borrow_mut(|buf| match self.view.read_into(fh.0, offset, size, buf) {
            Ok(()) => {
                let short = buf.len() < size as usize;
                reply.data(buf);
                if short {
                    self.direct.reached_end(ino.0);
                }
                // A staged file's read hands back a fresh Vec: keep at most one request's worth.
                if buf.capacity() > MAX_IO as usize {
                    *buf = Vec::new();
                }
            }
            Err(e) => reply.error(log_err("read", &e)),
        })
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let cached = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        match request(|| self.view.write_from(fh.0, offset, data, cached)) {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(log_err("write", &e)),
        }
    }

    fn flush(&self, req: &Request, ino: INodeNo, fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        if !staged(ino.0) && !self.view.is_edit(fh.0) {
            return reply.ok();
        }
        // A close that cannot commit (a reader's, a child's, one while the process still holds
        // another descriptor: the first close of a shell's redirection) is answered here; only
        // a possible commit goes to a commit thread.
        let (view, pid) = (self.view.clone(), req.pid());
        let closing = Some((fh.0, ino.0));
        let mut who = view.closing_caller(pid, closing);
        if !view.may_commit(fh.0, &who) {
            return match request(|| view.flush(fh.0, who)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(log_err("flush", &e)),
            };
        }
        self.commits.run(move || {
            view.check_killed(pid, &mut who, closing);
            let (res, later) = crate::table::request::one_request(|| view.flush(fh.0, who));
            match res {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(log_err("flush", &e)),
            }
            crate::table::request::run(later);
        })
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.passthrough.release(ino.0, fh.0);
        if staged(ino.0) {
            // `sleep:MS` stands for this thread being preempted after reading the request: the
            // kernel sent it before the closing process's close() returned, so later requests
            // of that process (its rename, another process's open) may overtake it.
            let _ = crate::sys::failpoint::hit("staged-release");
        }
        // Answered here, also for `incoming/` files: a release is never a commit point (the
        // kernel sends it after the last close's flush was answered), and it only updates the
        // file's counts (or removes an empty staged file): a hand-off to a commit thread cost
        // two context switches per commit.
        let edit = self.view.is_edit(fh.0);
        self.view.release(fh.0);
        reply.ok();
        // The editor's writes and truncates changed the size the kernel holds for the
        // version's inode: the next stat asks again (sent by another thread: never from a
        // request handler, src/mount/notify.rs).
        if edit {
            self.invalidate.inode(ino.0);
        }
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        if !staged(ino.0) && !self.view.is_edit(fh.0) {
            return reply.ok();
        }
        let view = self.view.clone();
        self.commits.run(move || {
            let (res, later) = crate::table::request::one_request(|| view.fsync(fh.0));
            match res {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(log_err("fsync", &e)),
            }
            crate::table::request::run(later);
        })
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        match request(|| self.view.seek(ino.0, offset, whence)) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(log_err("lseek", &e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match request(|| self.view.opendir(ino.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(log_err("opendir", &e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        match request(|| self.view.readdir(ino.0, fh.0, offset, 1024)) {
            Ok(entries) => {
                for e in entries {
                    let kind = match e.kind {
                        Kind::Dir => FileType::Directory,
                        Kind::File => FileType::RegularFile,
                        Kind::Symlink => FileType::Symlink,
                    };
                    if reply.add(INodeNo(e.ino), e.next_offset, kind, &e.name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(log_err("readdir", &e)),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.view.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    /// No ioctls: ENOTTY, as a regular file answers (ioctl(2); Python's isatty() probe on every
    /// open asks TCGETS). fuser's default would log a warning per call.
    #[allow(clippy::too_many_arguments)]
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::from_i32(libc::ENOTTY));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.view.statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(log_err("statfs", &e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match self.view.set_xattr(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        // No file of the mount has extended attributes. ENOSYS makes the kernel stop asking
        // (fs/fuse/xattr.c: `no_getxattr`, every later getxattr(2) fails with EOPNOTSUPP at
        // once), which spares every write into incoming/ a round trip: the kernel asks for
        // `security.capability` before each write to a file (file_remove_privs).
        reply.error(Errno::from_i32(libc::ENOSYS));
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 { reply.size(0) } else { reply.data(&[]) }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        match self.view.set_xattr(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.view.access(ino.0, mask.contains(AccessFlags::W_OK)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        if mode & libc::S_IFMT != 0 && mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(errno(&self.no_new_kind(parent.0)));
        }
        let write = is_write(flags);
        let who = self.view.caller(req.pid(), None);
        match request(|| self.view.create(parent.0, name, write, flags, who)) {
            Ok((a, o)) => {
                let flags = fopen(&o) | self.direct.staged_write(a.ino, write);
                reply.created(&a.ttl, &self.file_attr(&a), Generation(0), FileHandle(o.fh), flags)
            }
            Err(e) => reply.error(log_err("create", &e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(errno(&self.no_xattr_change(ino.0)));
    }
}

impl TableFs {
    /// The error for creating a directory, link or special file in `parent`.
    fn no_new_kind(&self, parent: u64) -> FsError {
        if parent == super::inode::INCOMING {
            FsError::NotSupported
        } else {
            FsError::ReadOnly
        }
    }

    /// The errno for changes that only regular files in `incoming/` could take but do not.
    fn no_xattr_change(&self, ino: u64) -> FsError {
        match super::inode::Node::from_ino(ino) {
            Some(super::inode::Node::Staged(_)) => FsError::OpNotSupported,
            _ => FsError::ReadOnly,
        }
    }
}
