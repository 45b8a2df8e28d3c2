//! What the mount knows about versions: cached, immutable facts, and reads of a version's
//! `data.jsonl` as a concatenation of its data files.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::util::sync::lock;
use crate::table::Table;
use crate::sys::beneath::Dir;
use crate::error::Error;
use crate::util::lru::Lru;
use crate::log::snapshot::Snapshot;
use crate::table::CommitStamp;

use super::errno::{FsError, FsResult};

/// The cheap facts of a version: when it was committed and its commit file.
#[derive(Debug)]
pub struct VersionHead {
    /// `commitInfo.timestamp`, ms since the epoch.
    pub timestamp_ms: i64,
    /// Its size in bytes.
    pub commit_size: u64,
    /// The commit file's stamp when this head was read: a cached head is used only while the
    /// commit file still has it.
    stamp: CommitStamp,
}

/// The facts of a version that need a log replay: its data files and its schema.
#[derive(Debug)]
pub struct VersionBody {
    /// The data files in snapshot order, with their offsets in `data.jsonl`.
    pub data: Arc<Concat>,
    /// `schema.json`.
    pub schema_json: Arc<[u8]>,
    /// The snapshot of the version: its files as the log names them (decoded paths), in
    /// snapshot order, are the parts of `data` (or their converted rows, for Parquet data
    /// files). Shared with the table's and `data`'s: no list of its own per file.
    pub snapshot: Arc<Snapshot>,
    /// The Parquet data files among them with their `add.size` in bytes: checked beneath the
    /// table at every open and getattr ([`Versions::check_parquet`]) before their converted
    /// rows are served.
    pub parquet: Arc<[(String, u64)]>,
    /// The stamp of the version's commit file when the body was replayed (as for heads).
    stamp: CommitStamp,
}

impl VersionBody {
    /// About how many bytes of memory it holds (its strings and records): what the cache of
    /// bodies counts against `--version-cache-bytes` (docs/MOUNT.md "Limits").
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<VersionBody>()
            + self.data.bytes()
            + self.schema_json.len()
            // The entries may be shared with the table's snapshots: counted as if they were not.
            + self
                .snapshot
                .files
                .iter()
                .map(|f| {
                    std::mem::size_of::<Arc<crate::log::snapshot::FileEntry>>()
                        + std::mem::size_of::<crate::log::snapshot::FileEntry>()
                        + f.path.len()
                })
                .sum::<usize>()
            + self.parquet.iter().map(|(p, _)| p.len() + 32).sum::<usize>()
    }
}

/// The path of a [`Part`] relative to its folder: a data file's is its snapshot entry's
/// (shared, no copy of the path per version body), any other (a commit file, converted rows) its
/// own.
#[derive(Debug, Clone)]
pub enum PartName {
    /// A data file of the snapshot, named by its entry's path.
    Entry(Arc<crate::log::snapshot::FileEntry>),
    /// Any other file.
    Owned(Arc<str>),
}

impl PartName {
    /// Bytes of the path it holds itself (0 for a shared entry's).
    fn owned_len(&self) -> usize {
        match self {
            PartName::Entry(_) => 0,
            PartName::Owned(s) => s.len(),
        }
    }
}

impl std::ops::Deref for PartName {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            PartName::Entry(f) => &f.path,
            PartName::Owned(s) => s,
        }
    }
}

impl From<String> for PartName {
    fn from(s: String) -> PartName {
        PartName::Owned(s.into())
    }
}

/// One file of a concatenation, as [`Concat::part`] hands it out (made when asked: a
/// concatenation keeps per part only its offset, see [`Concat`]).
#[derive(Debug, Clone)]
pub struct Part {
    /// Path relative to the table folder (`part-....jsonl`, `_delta_log/....json`), or to `dir`.
    pub rel: PartName,
    /// The table folder, shared by every part (the absolute path, for messages, is
    /// [`Part::path`], made when asked: a part costs no second copy of its path).
    root: Arc<Path>,
    /// Offset of its first byte in the concatenation.
    pub start: u64,
    /// Its length in bytes, as the log records it (for a Parquet data file: the length of its
    /// converted rows).
    pub len: u64,
    /// The folder `rel` is beneath when it is not the table folder: the converted-rows cache
    /// folder of a Parquet data file ([`crate::table::parquet_cache`]).
    pub dir: Option<Arc<Dir>>,
}

impl Part {
    /// Absolute path, for messages.
    pub fn path(&self) -> PathBuf {
        self.dir
            .as_ref()
            .map_or_else(|| self.root.join(&*self.rel), |d| d.join(&*self.rel))
    }
}

/// The names of a concatenation's parts.
#[derive(Debug)]
enum Names {
    /// Each part named on its own (a commit file, one part of `parts/`, tests).
    Listed(Vec<(PartName, Option<Arc<Dir>>)>),
    /// A version's data files: part `i` is the snapshot's file `i`, or file `index[i]` when
    /// some files are empty (and left out); a file served as converted rows is named in
    /// `converted` by its index in the snapshot.
    Entries {
        snapshot: Arc<Snapshot>,
        index: Option<Vec<usize>>,
        converted: std::collections::HashMap<usize, (Arc<str>, Arc<Dir>)>,
    },
}

/// Files read as one: `data.jsonl` (the data files) or `commit.json` (one commit file).
///
/// Per part it holds 8 bytes, its offset: a version's data files are named by the snapshot's
/// shared entries ([`Concat::of_snapshot`]), and a part's length is where the next one starts
/// (docs/BENCHMARKS.md "A million live files").
#[derive(Debug)]
pub struct Concat {
    /// The table folder.
    root: Arc<Path>,
    /// Where each part starts, strictly increasing (empty files are left out).
    starts: Vec<u64>,
    names: Names,
    /// Total length.
    pub len: u64,
}

impl Concat {
    /// Concatenate `files` (path relative to `root`, length in bytes) in order; empty files are
    /// left out.
    pub fn new(root: &Path, files: impl IntoIterator<Item = (String, u64)>) -> Concat {
        Concat::new_in(root, files.into_iter().map(|(rel, len)| (PartName::from(rel), len, None)))
    }

    /// [`Concat::new`] for files each beneath its own folder (`None`: the table folder `root`).
    pub fn new_in(root: &Path, files: impl IntoIterator<Item = (PartName, u64, Option<Arc<Dir>>)>) -> Concat {
        let mut start = 0u64;
        let mut starts = Vec::new();
        let mut names = Vec::new();
        for (rel, len, dir) in files {
            if len == 0 {
                continue;
            }
            starts.push(start);
            names.push((rel, dir));
            start = start.saturating_add(len);
        }
        Concat {
            root: Arc::from(root),
            starts,
            names: Names::Listed(names),
            len: start,
        }
    }

    /// The data files of `snapshot` in its order, beneath the table folder `root`; a file for
    /// which `converted` gives `Some((rel, len, dir))` is served as that file instead (its
    /// converted rows). Empty files are left out. Errors: those of `converted`.
    pub fn of_snapshot<E>(
        root: &Path,
        snapshot: Arc<Snapshot>,
        mut converted: impl FnMut(&crate::log::snapshot::FileEntry) -> Result<Option<(String, u64, Dir)>, E>,
    ) -> Result<Concat, E> {
        let mut start = 0u64;
        let mut starts = Vec::with_capacity(snapshot.files.len());
        let mut index: Option<Vec<usize>> = None;
        let mut conv = std::collections::HashMap::new();
        for (k, f) in snapshot.files.iter().enumerate() {
            let len = match converted(f)? {
                Some((rel, len, dir)) => {
                    conv.insert(k, (Arc::from(rel), Arc::new(dir)));
                    len
                }
                None => f.size,
            };
            if len == 0 {
                // From here on a part's file is not at its own index.
                index.get_or_insert_with(|| (0..starts.len()).collect());
                continue;
            }
            if let Some(ix) = &mut index {
                ix.push(k);
            }
            starts.push(start);
            start = start.saturating_add(len);
        }
        starts.shrink_to_fit();
        if let Some(ix) = &mut index {
            ix.shrink_to_fit();
        }
        Ok(Concat {
            root: Arc::from(root),
            starts,
            names: Names::Entries {
                snapshot,
                index,
                converted: conv,
            },
            len: start,
        })
    }

    /// How many parts it has (empty files left out).
    pub fn count(&self) -> usize {
        self.starts.len()
    }

    /// Part `i`, in order.
    pub fn part(&self, i: usize) -> Option<Part> {
        let start = *self.starts.get(i)?;
        let end = self.starts.get(i + 1).copied().unwrap_or(self.len);
        let (rel, dir) = match &self.names {
            Names::Listed(names) => names.get(i)?.clone(),
            Names::Entries {
                snapshot,
                index,
                converted,
            } => {
                let k = match index {
                    Some(ix) => *ix.get(i)?,
                    None => i,
                };
                match converted.get(&k) {
                    Some((rel, dir)) => (PartName::Owned(rel.clone()), Some(dir.clone())),
                    None => (PartName::Entry(snapshot.files.get(k)?.clone()), None),
                }
            }
        };
        Some(Part {
            rel,
            root: self.root.clone(),
            start,
            len: end - start,
            dir,
        })
    }

    /// The index of the part holding byte `offset` (the last part when `offset` is past the end;
    /// 0 when there are none).
    pub fn part_at(&self, offset: u64) -> usize {
        self.starts.partition_point(|&s| s <= offset).saturating_sub(1)
    }

    /// The index of the first part starting at or after `offset` (the count when none does).
    fn first_from(&self, offset: u64) -> usize {
        self.starts.partition_point(|&s| s < offset)
    }

    /// The one file this concatenation is, if it has exactly one part (a candidate for FUSE
    /// passthrough, see docs/MOUNT.md "Passthrough").
    pub fn single(&self) -> Option<Part> {
        if self.count() == 1 { self.part(0) } else { None }
    }

    /// About how many bytes it holds itself (not counting shared snapshot entries).
    pub fn bytes(&self) -> usize {
        let names = match &self.names {
            Names::Listed(names) => names
                .iter()
                .map(|(rel, dir)| {
                    std::mem::size_of::<(PartName, Option<Arc<Dir>>)>()
                        + rel.owned_len()
                        + dir.as_ref().map_or(0, |d| d.path().as_os_str().len() + 64)
                })
                .sum(),
            Names::Entries { index, converted, .. } => {
                index.as_ref().map_or(0, |ix| ix.len() * std::mem::size_of::<usize>())
                    + converted
                        .values()
                        .map(|(rel, dir)| 64 + rel.len() + dir.path().as_os_str().len() + 64)
                        .sum::<usize>()
            }
        };
        std::mem::size_of::<Concat>() + self.starts.len() * std::mem::size_of::<u64>() + names
    }
}

/// How many data and commit files the daemon has open at most ([`FilePool`]): those kept for
/// later reads and those a reply in flight still holds, together (docs/MOUNT.md "Limits").
/// A lower descriptor limit lowers it ([`open_files_bound`]).
pub const MAX_OPEN_FILES: usize = 512;

/// The bound of a [`FilePool`] in this process: [`MAX_OPEN_FILES`], or a quarter of the soft
/// `RLIMIT_NOFILE` (getrlimit(2)) when that is less, at least 1, so that the rest of the limit
/// stays for the daemon's other descriptors (staged files, pipes, the log), as the CLI's
/// [`crate::table::held_files_budget`] does (docs/MOUNT.md "Limits").
pub fn open_files_bound() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    usize::try_from(soft / 4).unwrap_or(usize::MAX).clamp(1, MAX_OPEN_FILES)
}

/// How the daemon spends its soft `RLIMIT_NOFILE` (getrlimit(2)) as a whole (docs/MOUNT.md
/// "Limits", "Descriptors"): the data files' pool, the staged files' pool and the commit threads
/// are sized so that they, the daemon's own descriptors and what each thread holds while it
/// works fit under the limit together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorBudget {
    /// The bound of the data and commit files' [`FilePool`] ([`open_files_bound`]).
    pub data_files: usize,
    /// The default bound of the staged files' descriptors (`--max-open-staged`).
    pub staged_files: usize,
    /// How many commits run at once (the mount's commit threads).
    pub commit_threads: usize,
}

/// Descriptors the daemon holds of its own, whatever it serves: standard streams, the FUSE
/// device and its duplicate, the log, the table's lock and folders, the change watch, the
/// readiness pipe (14 measured idle), and a margin.
pub const OWN_DESCRIPTORS: usize = 16;

/// Descriptors each worker thread may hold: its splice pipe (2) and, while it works, a commit
/// file being replayed or a Parquet conversion's file (docs/MOUNT.md "Limits").
pub const DESCRIPTORS_PER_WORKER: usize = 4;

/// Descriptors one commit in flight may hold at once besides the pools: the staged file it
/// reads, the commit's temporary, the previous commit read for the version checksum and the
/// checksum file, or the folder it fsyncs.
pub const DESCRIPTORS_PER_COMMIT: usize = 4;

/// The most commits that run at once (the mount's commit threads, docs/MOUNT.md "Reading").
pub const MAX_COMMIT_THREADS: usize = 8;

/// [`DescriptorBudget`] for a daemon of `workers` worker threads under a soft limit of `soft`
/// descriptors: the data files' pool a quarter of the limit (at most [`MAX_OPEN_FILES`]), the
/// staged files as many (at most [`crate::table::staging::DEFAULT_MAX_OPEN_STAGED`]), [`MAX_COMMIT_THREADS`] commit threads.
/// When these and the daemon's own ([`OWN_DESCRIPTORS`], [`DESCRIPTORS_PER_WORKER`] per worker,
/// [`DESCRIPTORS_PER_COMMIT`] per commit thread) do not fit, the staged files get an eighth of
/// the limit and the commit threads what is left (at least 1: commits then wait for each other
/// rather than fail with `EMFILE`). Under `ulimit -n 64` with 2 workers: 16 data files, 8 staged
/// files, 4 commit threads.
pub fn descriptor_budget_for(soft: u64, workers: usize) -> DescriptorBudget {
    let soft = usize::try_from(soft).unwrap_or(usize::MAX);
    let data = (soft / 4).clamp(1, MAX_OPEN_FILES);
    let own = OWN_DESCRIPTORS.saturating_add(workers.saturating_mul(DESCRIPTORS_PER_WORKER));
    let full = DescriptorBudget {
        data_files: data,
        staged_files: data.min(crate::table::staging::DEFAULT_MAX_OPEN_STAGED),
        commit_threads: MAX_COMMIT_THREADS,
    };
    let need = own
        .saturating_add(MAX_COMMIT_THREADS * DESCRIPTORS_PER_COMMIT)
        .saturating_add(full.data_files)
        .saturating_add(full.staged_files);
    if need <= soft {
        return full;
    }
    let staged = (soft / 8).clamp(1, crate::table::staging::DEFAULT_MAX_OPEN_STAGED);
    let left = soft.saturating_sub(own).saturating_sub(data).saturating_sub(staged);
    DescriptorBudget {
        data_files: data,
        staged_files: staged,
        commit_threads: (left / DESCRIPTORS_PER_COMMIT).clamp(1, MAX_COMMIT_THREADS),
    }
}

/// [`descriptor_budget_for`] this process's soft `RLIMIT_NOFILE` now.
pub fn descriptor_budget(workers: usize) -> DescriptorBudget {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    descriptor_budget_for(soft, workers)
}

/// The most data files one spliced reply holds open ([`ConcatReader::pieces`]); a read across
/// more is copied with `pread`, one file open at a time. A pool bound below 4 times this lowers
/// it to a quarter of the bound ([`FilePool::splice_files`]), so that two replies in flight
/// never hold every descriptor.
pub const MAX_SPLICE_FILES: usize = 16;

/// The bytes of the cache of version facts by default (`--version-cache-bytes`): 4 MiB.
pub const DEFAULT_VERSION_CACHE_BYTES: u64 = 4 << 20;

/// An open data or commit file of the [`FilePool`]: counts against [`MAX_OPEN_FILES`] until its
/// last holder drops it, whether or not the pool still keeps it.
#[derive(Debug)]
pub struct PooledFile {
    // Fields drop in order: the file is closed before its slot is given back.
    file: File,
    _slot: Slot,
}

/// One of a pool's [`MAX_OPEN_FILES`] slots, given back on drop.
#[derive(Debug)]
struct Slot(Arc<Live>);

impl std::ops::Deref for PooledFile {
    type Target = File;
    fn deref(&self) -> &File {
        &self.file
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut n = lock(&self.0.count);
        *n = n.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

/// The count of a pool's open descriptors, and a wakeup when one closes.
#[derive(Debug, Default)]
struct Live {
    count: Mutex<usize>,
    /// Highest count so far.
    #[cfg(test)]
    peak: AtomicU64,
    freed: std::sync::Condvar,
}

/// The open data and commit files of a mounted table, shared by every handle that reads them:
/// one descriptor per file however many handles are open (docs/MOUNT.md "Limits"), at most
/// [`MAX_OPEN_FILES`] open at once, counting the files a reply in flight holds after the pool
/// let go of them; the least recently used are closed first, and an open waits for a reply to
/// let go of one when all are held (only a reader holding no other pooled file waits; a
/// spliced reply that cannot get one more file is copied instead).
///
/// Every file is opened beneath the table folder with [`Dir::open_file`] (no symlink at any
/// component, a regular file, no blocking on a FIFO), and its size is checked on the open
/// descriptor against the size the log records: never checked by path and then opened
/// (docs/SECURITY.md "What holds").
#[derive(Debug)]
pub struct FilePool {
    root: Dir,
    open: Mutex<Lru<(String, u64), PooledFile>>,
    live: Arc<Live>,
    max: usize,
}

impl FilePool {
    /// A pool for the table folder `root`, bounded by [`open_files_bound`].
    pub fn new(root: Dir) -> FilePool {
        FilePool::with_max(root, open_files_bound())
    }

    /// The most data files one spliced reply of this pool may hold: [`MAX_SPLICE_FILES`], or a
    /// quarter of the pool's bound when that is less (at least 1).
    pub fn splice_files(&self) -> usize {
        (self.max / 4).clamp(1, MAX_SPLICE_FILES)
    }

    /// A pool for `root` with at most `max` files open.
    pub fn with_max(root: Dir, max: usize) -> FilePool {
        let max = max.max(1);
        FilePool {
            root,
            open: Mutex::new(Lru::new(max)),
            live: Arc::new(Live::default()),
            max,
        }
    }

    /// The open file of `part`, waiting for a free descriptor when all [`MAX_OPEN_FILES`] are
    /// held by replies in flight. Errors ([`Error::Corrupt`], EIO at the mount): it is a symlink
    /// or passes through one, is not a regular file, or its size differs from the log's;
    /// [`Error::Io`] naming the path otherwise (ENOENT for a missing file).
    pub fn get(&self, part: &Part) -> FsResult<Arc<PooledFile>> {
        self.get_or(part, true).map(|f| f.ok_or(FsError::Table(Error::Internal("no file".into()))))?
    }

    /// [`FilePool::get`] for a caller that already holds pooled files (a spliced reply): `None`
    /// instead of waiting when every descriptor is held.
    pub fn try_get(&self, part: &Part) -> FsResult<Option<Arc<PooledFile>>> {
        self.get_or(part, false)
    }

    fn get_or(&self, part: &Part, wait: bool) -> FsResult<Option<Arc<PooledFile>>> {
        let key = (part.path().to_string_lossy().into_owned(), part.len);
        if let Some(f) = lock(&self.open).get(&key) {
            return Ok(Some(f));
        }
        // Reserve a descriptor: close kept files (least recently used first) until the count
        // of open ones is under the bound; if replies hold them all, wait or give up.
        loop {
            {
                let mut n = lock(&self.live.count);
                if *n < self.max {
                    *n += 1;
                    #[cfg(test)]
                    self.live.peak.fetch_max(*n as u64, Ordering::Relaxed);
                    break;
                }
            }
            let evicted = lock(&self.open).pop_oldest();
            match evicted {
                // Dropping it closes it unless a reply holds it too.
                Some(f) => drop(f),
                None => {
                    if !wait {
                        return Ok(None);
                    }
                    let n = lock(&self.live.count);
                    if *n >= self.max {
                        let _ = self
                            .live
                            .freed
                            .wait_timeout(n, std::time::Duration::from_millis(50))
                            .map_err(|_| FsError::Table(Error::Internal("file pool lock poisoned".into())))?;
                    }
                }
            }
        }
        // The one opener of data files, shared with the CLI (docs/FORMAT.md, "Data files").
        let dir = part.dir.as_deref().unwrap_or(&self.root);
        let slot = Slot(self.live.clone());
        let file = Arc::new(PooledFile {
            file: crate::table::open_data_file(dir, &part.rel, part.len)?,
            _slot: slot,
        });
        lock(&self.open).put(key, file.clone());
        Ok(Some(file))
    }

    /// [`FilePool::get`], with the size checked again on the descriptor even when it was already
    /// open: for opens whose reads the kernel serves from the file directly (passthrough), which
    /// read up to the file's own end, not the size the log records.
    pub fn get_checked(&self, part: &Part) -> FsResult<Arc<PooledFile>> {
        let file = self.get(part)?;
        let size = file.metadata().map_err(|e| Error::io("stat", part.path(), e))?.len();
        if size != part.len {
            return Err(FsError::Table(Error::Corrupt {
                path: part.path(),
                reason: format!("the file is {size} bytes but the log records {} bytes", part.len),
            }));
        }
        Ok(file)
    }

    /// Files open now.
    #[cfg(test)]
    pub fn open_count(&self) -> usize {
        lock(&self.open).len()
    }

    /// The most files open at once so far, kept or held.
    #[cfg(test)]
    pub fn peak(&self) -> u64 {
        self.live.peak.load(Ordering::Relaxed)
    }
}

/// An open `data.jsonl` (or `commit.json`): positional reads mapped onto the parts. The parts'
/// descriptors come from the table's [`FilePool`], so a handle holds no descriptor of its own;
/// an open reader keeps reading the version it opened, whatever is committed later.
#[derive(Debug)]
pub struct ConcatReader {
    concat: Arc<Concat>,
    pool: Arc<FilePool>,
}

impl ConcatReader {
    /// Total length.
    #[cfg(test)]
    #[allow(clippy::len_without_is_empty)] // nothing asks whether it is empty
    pub fn len(&self) -> u64 {
        self.concat.len
    }

    /// A reader of `concat`, opening its files through `pool`.
    pub fn new(concat: Arc<Concat>, pool: Arc<FilePool>) -> ConcatReader {
        ConcatReader { concat, pool }
    }

    /// Up to `size` bytes at `offset` (fewer only at the end).
    pub fn read(&self, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        let mut buf = Vec::new();
        self.read_into(offset, size, &mut buf)?;
        Ok(buf)
    }

    /// Up to `size` bytes at `offset` into `buf` (cleared first; its capacity is reused, so a
    /// caller that keeps one buffer per thread allocates and zero-fills nothing per read).
    pub fn read_into(&self, offset: u64, size: usize, buf: &mut Vec<u8>) -> FsResult<()> {
        buf.clear();
        if offset >= self.concat.len || size == 0 {
            return Ok(());
        }
        let end = self.concat.len.min(offset.saturating_add(size as u64));
        let want = (end - offset) as usize;
        buf.reserve(want);
        // The last part starting at or before offset.
        let mut idx = self.concat.part_at(offset);
        let mut pos = offset;
        while pos < end
            && let Some(part) = self.concat.part(idx)
        {
            let in_part = pos - part.start;
            let n = (part.len - in_part).min(end - pos) as usize;
            let file = self.pool.get(&part)?;
            read_exact_at(&file, buf, n, in_part, &part)?;
            pos += n as u64;
            idx += 1;
        }
        Ok(())
    }
}

/// The smallest read answered from a mapping ([`ConcatReader::map`]); smaller reads are copied
/// with `pread`, which costs less than setting up and tearing down a mapping.
pub const MAP_MIN: usize = 128 << 10;

/// Bytes of one data file mapped read-only (`mmap(2)` `MAP_SHARED`) for the length of one
/// reply, unmapped on drop.
///
/// Why: a read reply is written to `/dev/fuse` with `writev`, and the kernel copies it from the
/// daemon's memory into the reader's buffer (or the mount's page cache). Handing it the mapped
/// file instead of a buffer filled by `pread` saves one copy of every byte (docs/MOUNT.md "Replies
/// mapped from the data file").
///
/// Why it cannot crash the daemon: no code of the daemon reads the mapped bytes; only the
/// kernel does, inside `writev`. The range is checked against the file's size, which was
/// checked against the log when the file was opened ([`FilePool`]); if the file is truncated
/// afterwards (damage, or another program), the kernel's copy faults in kernel mode, `writev`
/// fails with EFAULT and the kernel ends the request with EIO (fs/fuse/dev.c,
/// `fuse_dev_do_write`): the reader gets EIO, never a SIGBUS in the daemon, never wrong bytes.
/// The mapping is per reply, so the daemon's resident set grows by at most one request
/// (1 MiB) per worker thread.
#[derive(Debug)]
pub struct Mapped {
    base: std::ptr::NonNull<std::ffi::c_void>,
    map_len: usize,
    skip: usize,
    len: usize,
}

impl Mapped {
    /// How many bytes are mapped for the reply.
    #[allow(clippy::len_without_is_empty)] // nothing asks whether it is empty
    pub fn len(&self) -> usize {
        self.len
    }

    /// The mapped bytes.
    ///
    /// # Safety
    /// Only for handing to a system call that copies them (the reply's `writev`): the file can
    /// be truncated by another program at any time, and a read of the bytes by the daemon's own
    /// code would then raise SIGBUS. The slice must not outlive `self`.
    pub unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: `base` maps `map_len` bytes and `skip + len == map_len`; the caller's
        // contract covers truncation (see the type's documentation).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<u8>().add(self.skip), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly what mmap returned, and no slice of it outlives
        // `self` (see `bytes`).
        if let Err(e) = unsafe { rustix::mm::munmap(self.base.as_ptr(), self.map_len) } {
            log::warn!("munmap of a read reply failed: {e}");
        }
    }
}

impl ConcatReader {
    /// Map the `size` bytes at `offset` (fewer at the end) when they lie in one data file and
    /// are at least [`MAP_MIN`] bytes; `None` otherwise (then read with
    /// [`ConcatReader::read_into`]). Errors name the file (opening it, or `mmap`).
    pub fn map(&self, offset: u64, size: usize) -> FsResult<Option<Mapped>> {
        if offset >= self.concat.len {
            return Ok(None);
        }
        let end = self.concat.len.min(offset.saturating_add(size as u64));
        let len = (end - offset) as usize;
        let Some(part) = self.concat.part(self.concat.part_at(offset)) else {
            return Ok(None);
        };
        if len < MAP_MIN || end > part.start.saturating_add(part.len) {
            return Ok(None);
        }
        let in_part = offset - part.start;
        let page = rustix::param::page_size() as u64;
        let map_off = in_part - in_part % page;
        let skip = (in_part - map_off) as usize;
        let map_len = skip + len;
        let file = self.pool.get(&part)?;
        // A file cut short since it was opened is damage, named here as `pread` would (a cut
        // racing with the reply still only makes the kernel answer EIO, see `Mapped`).
        let size = file.metadata().map_err(|e| Error::io("stat", part.path(), e))?.len();
        if size < part.len {
            return Err(FsError::Table(Error::Corrupt {
                path: part.path(),
                reason: "data file is shorter than its add action says".into(),
            }));
        }
        // SAFETY: a fresh read-only shared mapping at an address the kernel picks; it aliases
        // no Rust object. Its bytes are only ever read by the kernel (see `Mapped`).
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                map_len,
                rustix::mm::ProtFlags::READ,
                rustix::mm::MapFlags::SHARED,
                &**file,
                map_off,
            )
        }
        .map_err(|e| Error::io("mmap", part.path(), std::io::Error::from_raw_os_error(e.raw_os_error())))?;
        let Some(base) = std::ptr::NonNull::new(base) else {
            return Ok(None);
        };
        Ok(Some(Mapped {
            base,
            map_len,
            skip,
            len,
        }))
    }

    /// The stretches of data files that make up the `size` bytes at `offset` (fewer at the end;
    /// empty past it), for a reply spliced from them ([`super::splice::Replies`]). Each file is
    /// opened and its size checked against the log first: a file cut short is
    /// [`Error::Corrupt`] naming it, as [`ConcatReader::read_into`] says.
    pub fn pieces(&self, offset: u64, size: usize) -> FsResult<Option<Vec<super::splice::Piece>>> {
        let mut out = Vec::new();
        if offset >= self.concat.len || size == 0 {
            return Ok(Some(out));
        }
        let end = self.concat.len.min(offset.saturating_add(size as u64));
        let mut idx = self.concat.part_at(offset);
        // A reply across more files than a spliced reply may hold open is copied instead,
        // one file at a time (docs/MOUNT.md "Limits").
        let last = self.concat.first_from(end);
        if last.saturating_sub(idx) > self.pool.splice_files() {
            return Ok(None);
        }
        let mut pos = offset;
        while pos < end
            && let Some(part) = self.concat.part(idx)
        {
            let in_part = pos - part.start;
            let n = (part.len - in_part).min(end - pos) as usize;
            let Some(file) = self.pool.try_get(&part)? else {
                return Ok(None);
            };
            let size = file.metadata().map_err(|e| Error::io("stat", part.path(), e))?.len();
            if size < part.len {
                return Err(FsError::Table(Error::Corrupt {
                    path: part.path(),
                    reason: "data file is shorter than its add action says".into(),
                }));
            }
            if n > 0 {
                out.push(super::splice::Piece {
                    file,
                    offset: in_part,
                    len: n,
                    path: part.path(),
                });
            }
            pos += n as u64;
            idx += 1;
        }
        Ok(Some(out))
    }
}

/// Append exactly `n` bytes of `file` at `offset` to `buf` (into its spare capacity, no
/// zero-fill); a file shorter than that is damage, never zeros.
fn read_exact_at(file: &File, buf: &mut Vec<u8>, n: usize, mut offset: u64, part: &Part) -> FsResult<()> {
    let target = buf.len() + n;
    buf.reserve(n);
    while buf.len() < target {
        let left = target - buf.len();
        let spare = &mut buf.spare_capacity_mut()[..left];
        match rustix::io::pread(file, spare, offset) {
            Ok(([], _)) => {
                return Err(FsError::Table(Error::Corrupt {
                    path: part.path(),
                    reason: "data file is shorter than its add action says".into(),
                }));
            }
            Ok((done, _)) => {
                let k = done.len();
                // SAFETY: pread initialised the first k bytes of the spare capacity.
                unsafe { buf.set_len(buf.len() + k) };
                offset += k as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(Error::io("read", part.path(), std::io::Error::from_raw_os_error(e.raw_os_error())).into());
            }
        }
    }
    Ok(())
}

/// Versions of one table, as the mount sees them. Facts about a version never change, so they
/// are cached (bounded); only the newest version number is asked of the log each time.
#[derive(Debug)]
pub struct Versions {
    table: Table,
    /// The newest version seen so far: versions up to it exist without asking the log.
    seen_latest: AtomicU64,
    heads: Mutex<Lru<u64, VersionHead>>,
    bodies: Mutex<Lru<u64, VersionBody>>,
    /// The open data and commit files, shared by every reader.
    files: Arc<FilePool>,
    /// The newest snapshot built so far: a newer version is replayed from it, one commit per
    /// version, instead of from version 0 (readers of `latest` after each commit).
    tip: Mutex<Option<(Arc<Snapshot>, CommitStamp)>>,
    /// Versions whose commit file was found replaced after they were served (a cached head or
    /// body with another stamp): their files are opened without keep-cache from then on, so the
    /// kernel drops pages it cached from the old commit's rows (same size, same inode number).
    replaced: Mutex<std::collections::HashSet<u64>>,
    /// Versions whose refusal (a feature or type tinydelta does not implement, or damage) was
    /// logged: each is logged once, at warn level (docs/MOUNT.md "Errno table").
    refused: Mutex<std::collections::HashSet<u64>>,
}

impl Versions {
    /// The versions of `table`. Errors: the table folder cannot be opened ([`Error::Io`]).
    #[cfg(test)]
    pub fn new(table: Table) -> FsResult<Versions> {
        Versions::with_cache_bytes(table, DEFAULT_VERSION_CACHE_BYTES)
    }

    /// [`Versions::new`] whose cache of version bodies holds at most `bytes` bytes
    /// ([`VersionBody::bytes`]; the most recently used body is kept whatever its size).
    pub fn with_cache_bytes(table: Table, bytes: u64) -> FsResult<Versions> {
        let root = Dir::open(table.root())?;
        Ok(Versions {
            files: Arc::new(FilePool::new(root)),
            table,
            seen_latest: AtomicU64::new(0),
            heads: Mutex::new(Lru::new(1024)),
            bodies: Mutex::new(Lru::with_budget(4096, usize::try_from(bytes).unwrap_or(usize::MAX))),
            tip: Mutex::new(None),
            replaced: Mutex::new(Default::default()),
            refused: Mutex::new(Default::default()),
        })
    }

    /// The shared open files of the table.
    pub fn files(&self) -> &Arc<FilePool> {
        &self.files
    }

    /// The table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The newest version, from the table's log segment now (a listing, or one fstat while
    /// `_delta_log/` is unchanged), with every commit up to it checked complete: a hole, a
    /// non-regular commit name or a damaged commit anywhere is the same error (EIO) that the
    /// damaged versions give, as in the CLI.
    pub fn latest(&self) -> FsResult<u64> {
        let v = self.table.latest_version()?;
        self.table.verify_through(v)?;
        self.seen_latest.fetch_max(v, Ordering::Relaxed);
        Ok(v)
    }

    /// The oldest version the log can build (0 unless another engine cleaned up older commits),
    /// from the log segment now (one fstat while `_delta_log/` is unchanged).
    pub fn first(&self) -> FsResult<u64> {
        Ok(self.table.segment()?.first)
    }

    /// The newest readable version, for listing `v/` and its attributes: versions before damage
    /// stay listed (and readable), none past it are. Errors: EIO when no version is readable.
    pub fn listed_latest(&self) -> FsResult<u64> {
        match self.table.readable_through()? {
            Some(v) => Ok(v),
            None => Err(self
                .table
                .latest_version()
                .err()
                .map_or(FsError::NotFound, FsError::Table)),
        }
    }

    /// Whether `version` exists: `Ok(true)` for a readable version, `Ok(false)` past the newest
    /// commit, the damage error (EIO) for a version at or past damage in the log.
    /// A version before the log's start (its commit cleaned up by another engine's log
    /// retention, PROTOCOL "Checkpoints") no longer exists: `Ok(false)`, even when this mount
    /// listed it before (docs/MOUNT.md "Versions another engine cleaned up").
    pub fn exists(&self, version: u64) -> FsResult<bool> {
        let seg = self.table.segment()?;
        if version < seg.first {
            return Ok(false);
        }
        if version <= self.seen_latest.load(Ordering::Relaxed) {
            return Ok(true);
        }
        match seg.check(version) {
            Some(Ok(())) => {
                self.table.verify_through(version)?;
                self.seen_latest.fetch_max(version, Ordering::Relaxed);
                Ok(true)
            }
            Some(Err(e)) => Err(e.into()),
            None => Ok(false),
        }
    }

    /// Whether `version`'s commit file was found replaced after the mount served it (then its
    /// files are opened without keep-cache).
    pub fn replaced(&self, version: u64) -> bool {
        lock(&self.replaced).contains(&version)
    }

    /// The head of `version` (which must exist).
    pub fn head(&self, version: u64) -> FsResult<Arc<VersionHead>> {
        // A version's commit is never rewritten; one that was (moved aside by `check --repair`
        // and committed again, or damaged in place) is read again, never answered from cache.
        let stamp = self.table.commit_stamp(version);
        if let Some(h) = lock(&self.heads).get(&version) {
            if Some(h.stamp) == stamp {
                return Ok(h);
            }
            lock(&self.replaced).insert(version);
        }
        // Checked and measured, its actions not kept (a commit of a million adds costs no memory).
        let commit = self.table.check_commit(version)?;
        let info = self.table.commit_info(version)?;
        let commit_size = commit.len;
        let head = Arc::new(VersionHead {
            timestamp_ms: info.timestamp,
            commit_size,
            stamp: stamp.unwrap_or(CommitStamp::UNKNOWN),
        });
        if stamp.is_some() {
            lock(&self.heads).put(version, head.clone());
        }
        Ok(head)
    }

    /// Whether a retention vacuum deleted data files of `version` (docs/FORMAT.md "Vacuum"): then
    /// its `data.jsonl` is ENOENT while `commit.json` and `schema.json` stay. One stat per data
    /// file, beneath the table folder, asked now (never cached: a vacuum may run at any time). A
    /// missing file no recorded `VACUUM START` explains is damage: `false` here, and reading the
    /// file is EIO naming it, as before.
    /// While the log up to the newest version holds no `VACUUM START` (counted in its snapshot),
    /// no file can be gone by a vacuum: `false` with no stat at all (a version of a million
    /// files is not a million stats per `getattr`).
    pub fn data_gone(&self, version: u64) -> FsResult<bool> {
        let body = self.body(version)?;
        if let Ok(latest) = self.latest()
            && latest >= version
            && let Ok(snap) = self.snapshot(latest)
            && snap.vacuums == 0
        {
            return Ok(false);
        }
        for f in body.snapshot.files.iter() {
            if self.table.dir().stat(&f.path)?.is_none() {
                return Ok(crate::table::history::vacuum_that_deleted(&self.table, version, &f.path)?.is_some());
            }
        }
        Ok(false)
    }

    /// Check that every Parquet data file of `version` is still what the log says: present
    /// beneath the table, a regular file (no symlink) of its `add.size`, on the open descriptor
    /// ([`crate::table::open_data_file`]), as a JSONL data file is checked when opened. Asked at
    /// every open and getattr of `data.jsonl` and `parts/`, so a resized or deleted Parquet file
    /// is EIO naming it, never answered from its converted rows. Errors: [`Error::Corrupt`].
    pub fn check_parquet(&self, version: u64) -> FsResult<()> {
        let body = self.body(version)?;
        for (path, size) in body.parquet.iter() {
            crate::table::open_data_file(self.table.dir(), path, *size)?;
        }
        Ok(())
    }

    /// The body of `version` (log replay on a cache miss). A refusal (a feature or type
    /// tinydelta does not implement, a version without schema) or damage is logged once per
    /// version at warn level, with the sentence the CLI prints.
    pub fn body(&self, version: u64) -> FsResult<Arc<VersionBody>> {
        let body = self.build_body(version);
        if let Err(FsError::Table(e)) = &body
            && (e.is_unsupported() || e.is_damage() || matches!(e, Error::NoSchema { .. }))
            && lock(&self.refused).insert(version)
        {
            log::warn!("v/{version}: {}", super::printable_sentence(&e.to_string()));
        }
        body
    }

    fn build_body(&self, version: u64) -> FsResult<Arc<VersionBody>> {
        let stamp = self.table.commit_stamp(version);
        if let Some(b) = lock(&self.bodies).get(&version) {
            if Some(b.stamp) == stamp {
                return Ok(b);
            }
            lock(&self.replaced).insert(version);
        }
        let snap = self.snapshot(version)?;
        let root = self.table.root();
        // A Parquet data file is served as its converted rows, converted now (the first stat or
        // read of a version naming it), never at mount time.
        let data = Concat::of_snapshot(root, snap.clone(), |f| {
            if !f.converted() {
                return Ok(None);
            }
            let c = self
                .table
                .converted(f, &snap.schema)
                .map_err(|e| crate::table::history::explain_missing(&self.table, version, &f.path, e))?;
            Ok::<_, Error>(Some((c.rel, c.len, c.dir)))
        })?;
        let body = Arc::new(VersionBody {
            data: Arc::new(data),
            schema_json: Arc::from(snap.schema.to_pretty_json().into_bytes()),
            snapshot: snap.clone(),
            parquet: snap
                .files
                .iter()
                .filter(|f| f.converted())
                .map(|f| (f.path.to_string(), f.size))
                .collect(),
            stamp: stamp.unwrap_or(CommitStamp::UNKNOWN),
        });
        if stamp.is_some() {
            let size = body.bytes();
            lock(&self.bodies).put_sized(version, body.clone(), size);
        }
        Ok(body)
    }
}

impl Versions {
    /// The snapshot of `version`: the cached tip when it is of `version`, replayed from it when
    /// it is older, else the table's ([`Table::snapshot_arc`]).
    fn snapshot(&self, version: u64) -> FsResult<Arc<Snapshot>> {
        // Stamped before the replay reads it (see `Table::commit_stamp`).
        let stamp = self.table.commit_stamp(version);
        let tip = lock(&self.tip)
            .clone()
            .filter(|(t, st)| t.version <= version && self.table.commit_stamp(t.version) == Some(*st));
        let snap = match tip {
            // The tip itself: no replay, no copy.
            Some((t, _)) if t.version == version => return Ok(t),
            Some((t, _)) => Arc::new(self.table.snapshot_after(&t, version)?),
            None => self.table.snapshot_arc(version)?,
        };
        if let Some(stamp) = stamp {
            let mut tip = lock(&self.tip);
            let stale = tip
                .as_ref()
                .is_some_and(|(t, st)| self.table.commit_stamp(t.version) != Some(*st));
            if stale || tip.as_ref().is_none_or(|(t, _)| t.version <= snap.version) {
                *tip = Some((snap.clone(), stamp));
            }
        }
        Ok(snap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_budget_fits_the_limit() {
        // A large limit: the bounds of the pools, 8 commit threads.
        let big = descriptor_budget_for(1 << 20, 2);
        assert_eq!((big.data_files, big.staged_files, big.commit_threads), (MAX_OPEN_FILES, 256, 8));
        assert_eq!(descriptor_budget_for(u64::MAX, 16).commit_threads, MAX_COMMIT_THREADS);
        // ulimit -n 64, 2 workers: 16 data files, 8 staged files, 4 commit threads, 64 in all.
        let low = descriptor_budget_for(64, 2);
        assert_eq!((low.data_files, low.staged_files, low.commit_threads), (16, 8, 4));
        for soft in [32u64, 64, 100, 128, 256, 1024, 4096] {
            for workers in [1usize, 2, 4, 16] {
                let b = descriptor_budget_for(soft, workers);
                assert!(b.data_files >= 1 && b.staged_files >= 1 && b.commit_threads >= 1, "{b:?}");
                let own = OWN_DESCRIPTORS + workers * DESCRIPTORS_PER_WORKER;
                let used = own + b.data_files + b.staged_files + b.commit_threads * DESCRIPTORS_PER_COMMIT;
                // Fits whenever the daemon's own and one commit leave room for the pools.
                if own + DESCRIPTORS_PER_COMMIT + (soft as usize) / 4 + (soft as usize) / 8 <= soft as usize {
                    assert!(used <= soft as usize, "{soft} {workers}: {b:?} uses {used}");
                }
            }
        }
    }

    #[test]
    fn concat_reads_across_parts() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        let mut all = Vec::new();
        for (i, text) in ["{a}\n", "", "{efg\n", "{\n", "{klmnopqrstuvwxy\n"].iter().enumerate() {
            let rel = format!("f{i}");
            std::fs::write(dir.path().join(&rel), text).unwrap();
            files.push((rel, text.len() as u64));
            all.extend_from_slice(text.as_bytes());
        }
        let pool = Arc::new(FilePool::new(Dir::open(dir.path()).unwrap()));
        let r = ConcatReader::new(Arc::new(Concat::new(dir.path(), files)), pool);
        assert_eq!(r.len(), all.len() as u64);
        for off in 0..=all.len() + 2 {
            for size in [0, 1, 2, 3, 7, 100] {
                let got = r.read(off as u64, size).unwrap();
                let lo = off.min(all.len());
                let hi = (off + size).min(all.len());
                assert_eq!(got, &all[lo..hi], "off {off} size {size}");
            }
        }
    }

    /// A version's parts named by its snapshot's entries: empty files left out (the part
    /// numbers of `parts/` count only the others), a converted file served from its own folder,
    /// the bytes those of the files in order.
    #[test]
    fn snapshot_parts_skip_empty_files_and_name_converted_ones() {
        use crate::format::schema::Schema;
        use crate::table::WriteOptions;
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::parse_cli(&["id:int!".to_string()]).unwrap();
        let t = Table::create(dir.path(), &schema).unwrap();
        t.append("x", &b"{\"id\":1}\n"[..], &WriteOptions::default()).unwrap();
        let conv = tempfile::tempdir().unwrap();
        std::fs::write(conv.path().join("b.rows"), "{B}\n").unwrap();
        let mut snap = (*t.snapshot_arc(1).unwrap()).clone();
        let template = (*snap.files[0]).clone();
        let mut want = Vec::new();
        snap.files.clear();
        for (i, text) in ["", "{a}\n", "", "{bbbbbbbb}\n", "{c}\n", ""].iter().enumerate() {
            let name = format!("f{i}.jsonl");
            std::fs::write(dir.path().join(&name), text).unwrap();
            let mut e = template.clone();
            e.path = name.as_str().into();
            e.size = text.len() as u64;
            snap.files.push(Arc::new(e));
            if i == 3 {
                want.extend_from_slice(b"{B}\n");
            } else {
                want.extend_from_slice(text.as_bytes());
            }
        }
        let concat = Concat::of_snapshot(dir.path(), Arc::new(snap), |f| {
            Ok::<_, Error>((&*f.path == "f3.jsonl").then(|| ("b.rows".to_string(), 4, Dir::open(conv.path()).unwrap())))
        })
        .unwrap();
        let got: Vec<_> = (0..concat.count())
            .map(|i| concat.part(i).unwrap())
            .map(|p| (p.path(), p.start, p.len))
            .collect();
        assert_eq!(
            got,
            [
                (dir.path().join("f1.jsonl"), 0, 4),
                (conv.path().join("b.rows"), 4, 4),
                (dir.path().join("f4.jsonl"), 8, 4),
            ]
        );
        assert!(concat.part(3).is_none() && concat.single().is_none());
        assert_eq!((concat.len, concat.part_at(5), concat.part_at(100)), (12, 1, 2));
        let pool = Arc::new(FilePool::new(Dir::open(dir.path()).unwrap()));
        let r = ConcatReader::new(Arc::new(concat), pool);
        for off in 0..=want.len() {
            for size in [1, 3, 5, 100] {
                let hi = (off + size).min(want.len());
                assert_eq!(r.read(off as u64, size).unwrap(), &want[off..hi], "off {off} size {size}");
            }
        }
    }

    #[test]
    fn short_file_is_an_error_not_zeros() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "{\n").unwrap();
        let pool = Arc::new(FilePool::new(Dir::open(dir.path()).unwrap()));
        // The size is checked when the file is opened...
        let r = ConcatReader::new(Arc::new(Concat::new(dir.path(), [("f".into(), 5)])), pool.clone());
        assert_eq!(r.read(0, 5).unwrap_err().errno(), libc::EIO);
        // ...and a file that shrinks after that reads short: an error, never zeros.
        let r = ConcatReader::new(Arc::new(Concat::new(dir.path(), [("f".into(), 2)])), pool);
        assert_eq!(r.read(0, 2).unwrap(), b"{\n");
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("f"))
            .unwrap()
            .set_len(1)
            .unwrap();
        assert_eq!(r.read(0, 2).unwrap_err().errno(), libc::EIO);
    }

    #[test]
    fn data_files_are_opened_beneath_the_table_without_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(dir.path().join("secret"), "root:x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("part-1.jsonl")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("sub")).unwrap();
        std::fs::write(root.join("ok.jsonl"), "{}\n").unwrap();
        let pool = Arc::new(FilePool::new(Dir::open(&root).unwrap()));
        for rel in ["part-1.jsonl", "sub/secret", "../secret"] {
            let r = ConcatReader::new(Arc::new(Concat::new(&root, [(rel.to_string(), 6)])), pool.clone());
            let e = r.read(0, 6).unwrap_err();
            assert_eq!(e.errno(), libc::EIO, "{rel}: {e}");
        }
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let r = ConcatReader::new(Arc::new(Concat::new(&root, [("fifo".to_string(), 6)])), pool.clone());
        assert_eq!(r.read(0, 6).unwrap_err().errno(), libc::EIO);
        let r = ConcatReader::new(Arc::new(Concat::new(&root, [("ok.jsonl".to_string(), 3)])), pool);
        assert_eq!(r.read(0, 3).unwrap(), b"{}\n");
    }

    /// A file/symlink swap racing with opens (a check before the open printed the secret in 186 of
    /// 7,687 reads): the open itself refuses the symlink, so the secret never shows.
    #[test]
    fn symlink_swaps_racing_with_opens_never_show_the_target() {
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(dir.path().join("secret"), "SECRET").unwrap();
        std::fs::write(root.join("good"), "public").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("evil")).unwrap();
        std::fs::copy(root.join("good"), root.join("part")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (root, stop) = (root.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // rename(2) replaces the name atomically: always a file or a symlink.
                    if i.is_multiple_of(2) {
                        std::os::unix::fs::symlink(root.parent().unwrap().join("secret"), root.join("tmp")).unwrap();
                    } else {
                        std::fs::copy(root.join("good"), root.join("tmp")).unwrap();
                    }
                    std::fs::rename(root.join("tmp"), root.join("part")).unwrap();
                    i += 1;
                }
            })
        };
        let (mut served, mut refused) = (0, 0);
        for _ in 0..3000 {
            // A new pool each time: every read opens the file again.
            let pool = Arc::new(FilePool::new(Dir::open(&root).unwrap()));
            let r = ConcatReader::new(Arc::new(Concat::new(&root, [("part".to_string(), 6)])), pool);
            match r.read(0, 6) {
                Ok(b) => {
                    assert_eq!(b, b"public");
                    served += 1;
                }
                Err(e) => {
                    assert_eq!(e.errno(), libc::EIO, "{e}");
                    refused += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(served + refused == 3000);
    }

    #[test]
    fn one_descriptor_per_file_however_many_readers() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for i in 0..3 {
            std::fs::write(dir.path().join(format!("p{i}")), "{bc\n").unwrap();
            files.push((format!("p{i}"), 4));
        }
        let pool = Arc::new(FilePool::new(Dir::open(dir.path()).unwrap()));
        let concat = Arc::new(Concat::new(dir.path(), files));
        let readers: Vec<_> = (0..1000)
            .map(|_| ConcatReader::new(concat.clone(), pool.clone()))
            .collect();
        for r in &readers {
            assert_eq!(r.read(0, 12).unwrap(), b"{bc\n{bc\n{bc\n");
        }
        assert_eq!(pool.open_count(), 3);
    }

    #[test]
    fn files_held_by_replies_count_against_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for i in 0..40 {
            std::fs::write(dir.path().join(format!("p{i}")), "{bc\n").unwrap();
            files.push((format!("p{i}"), 4));
        }
        let pool = Arc::new(FilePool::with_max(Dir::open(dir.path()).unwrap(), 8));
        let concat = Arc::new(Concat::new(dir.path(), files));
        let r = ConcatReader::new(concat.clone(), pool.clone());
        // Held as a spliced reply holds them: the ninth cannot be had without waiting.
        let held: Vec<_> = (0..8)
            .map(|i| pool.try_get(&concat.part(i).unwrap()).unwrap().unwrap())
            .collect();
        assert!(pool.try_get(&concat.part(8).unwrap()).unwrap().is_none());
        drop(held);
        // A read across every file opens them one at a time, and a reply across more files than
        // a spliced reply may hold (a quarter of the pool's 8) is left to the copying path.
        assert_eq!(pool.splice_files(), 2);
        assert_eq!(r.read(0, 160).unwrap().len(), 160);
        assert!(r.pieces(0, 160).unwrap().is_none());
        assert!(r.pieces(0, 12).unwrap().is_none());
        assert_eq!(r.pieces(0, 8).unwrap().unwrap().len(), 2);
        assert!(pool.peak() <= 8, "{} open at once", pool.peak());
    }

    #[test]
    fn the_body_cache_holds_no_more_than_its_bytes() {
        use crate::table::WriteOptions;
        use crate::format::schema::Schema;
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::parse_cli(&["id:int!".to_string()]).unwrap();
        let t = Table::create(dir.path(), &schema).unwrap();
        let w = WriteOptions::default();
        for i in 0..60 {
            t.append("x", format!("{{\"id\":{i}}}\n").as_bytes(), &w).unwrap();
        }
        let budget = 40_000;
        let vs = Versions::with_cache_bytes(t.clone(), budget).unwrap();
        let mut sizes = 0;
        for v in 1..=60 {
            sizes += vs.body(v).unwrap().bytes();
            assert!(lock(&vs.bodies).bytes() <= budget as usize, "version {v}");
        }
        assert!(sizes > 2 * budget as usize, "the test asks for too little: {sizes} bytes");
    }

    #[test]
    fn incremental_snapshots_match_full_replay() {
        use crate::table::WriteOptions;
        use crate::format::schema::Schema;
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::parse_cli(&["id:int!".to_string()]).unwrap();
        let t = Table::create(dir.path(), &schema).unwrap();
        let w = WriteOptions::default();
        let vs = Versions::new(t.clone()).unwrap();
        for i in 0..4 {
            t.append("x", format!("{{\"id\":{i}}}\n").as_bytes(), &w).unwrap();
            // A reader of latest after every commit: the tip moves one commit at a time.
            vs.body(t.latest_version().unwrap()).unwrap();
        }
        t.overwrite("x", &b"{\"id\":9}\n"[..], &w).unwrap();
        t.restore(2, &w).unwrap();
        t.append("x", &b"{\"id\":10}\n"[..], &w).unwrap();
        let latest = t.latest_version().unwrap();
        for v in (0..=latest).rev().chain(0..=latest) {
            let full: Vec<_> = t
                .snapshot(v)
                .unwrap()
                .files
                .iter()
                .map(|f| (dir.path().join(&f.path), f.size))
                .collect();
            let data = vs.body(v).unwrap().data.clone();
            let got: Vec<_> = (0..data.count())
                .map(|i| data.part(i).unwrap())
                .map(|p| (p.path(), p.len))
                .collect();
            assert_eq!(got, full, "version {v}");
        }
    }

    #[test]
    fn lru_evicts_least_recent() {
        let mut l = Lru::new(2);
        l.put(1, Arc::new(1));
        l.put(2, Arc::new(2));
        assert!(l.get(&1).is_some());
        l.put(3, Arc::new(3));
        assert!(l.get(&2).is_none());
        assert!(l.get(&1).is_some() && l.get(&3).is_some());
    }
}
