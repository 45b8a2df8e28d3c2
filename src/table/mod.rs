//! A table on disk and its operations: create, append, overwrite, restore, snapshots, history.
//!
//! Every read of the log goes through [`Table::segment`] (which versions exist, proven from one
//! listing) and [`Table::read_commit`] (one commit, checked complete); every data file through
//! [`Table::open_data_file`]. See docs/FORMAT.md.

pub mod cdc;
pub mod commit;
mod datafile;
pub mod dv;
pub mod history;
pub mod parquet_cache;
pub mod request;
pub mod staging;
mod write;

pub use self::datafile::*;
pub use self::write::*;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::format::actions::{Action, Add, CommitInfo, Format, Metadata, Remove};
use crate::sys::beneath::Dir;
use crate::log::checkpoint;
use crate::log::publish::{self, Isolation, Publish};
use crate::error::{Error, IoContext, Result};
use crate::sys::failpoint;
use crate::log::files::{self, Commit, LOG_DIR};
use crate::format::rows;
use crate::format::schema::Schema;
use crate::log::segment::LogSegment;
use crate::log::snapshot::{Replay, Snapshot, WRITER_VERSION};

/// `commitInfo.engineInfo`.
pub const ENGINE_INFO: &str = concat!("tinydelta/", env!("CARGO_PKG_VERSION"));

/// Options shared by every write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Commit only if the latest version is still this one (`--expect-version`).
    pub expect_version: Option<u64>,
    /// Extra `commitInfo.operationParameters` (e.g. the mount's `stagingId`).
    pub extra_params: Vec<(String, String)>,
    /// The longest input line accepted, bytes without its `\n`; `None`:
    /// [`crate::format::rows::DEFAULT_MAX_LINE_BYTES`] (the CLI's `append`/`overwrite
    /// --max-line-bytes` and the mount's `--max-line-bytes` for the commits of `incoming/` set
    /// it; docs/CLI.md "Input rules").
    pub max_line_bytes: Option<usize>,
    /// Delta `mergeSchema` for [`Table::append`] and [`Table::append_file`]: the columns (and
    /// struct fields) of this schema that the table lacks are added, nullable, by a `metaData`
    /// in the same commit as the rows ([`Schema::merged_with`]; docs/CLI.md "Adding columns
    /// while appending"). `None`: a key the schema lacks is refused.
    pub merge_schema: Option<Schema>,
}

/// What identifies one state of `_delta_log/`'s entries: inode, mtime and ctime of the folder
/// (any create, link, rename or unlink in it changes ctime).
type Stamp = crate::log::segment::FolderStamp;

/// A listing-proven segment and the folder stamp it was proven at.
#[derive(Debug, Clone)]
struct CachedSegment {
    stamp: Stamp,
    segment: LogSegment,
}

/// A table folder: data files plus `_delta_log/`.
#[derive(Debug, Clone)]
pub struct Table {
    root: PathBuf,
    log_dir: PathBuf,
    /// The table folder, opened once: every file below it is opened beneath it (never by path).
    dir: Dir,
    /// `_delta_log/`, opened beneath `dir`.
    log: Dir,
    /// The last segment proven by a listing, reused while the folder's stamp is unchanged
    /// (shared by clones). See docs/FORMAT.md, "The log segment".
    segment: Arc<Mutex<Option<CachedSegment>>>,
    /// The newest version whose commit was checked complete by [`Table::latest_version`]
    /// (`u64::MAX`: none yet).
    newest_ok: Arc<AtomicU64>,
    /// Every version up to this one was checked complete ([`Table::verify_through`]).
    verified: Arc<AtomicU64>,
    /// The newest private checkpoint this table (or a clone) read whole or wrote (`u64::MAX`:
    /// none): not verified again by [`Table::readable_through`].
    checkpoint_ok: Arc<AtomicU64>,
    /// The newest snapshot this table (or a clone) built, to replay later versions from, with
    /// the stamp of its version's commit file when it was built ([`CommitStamp`]): a tip whose
    /// commit file changed since (moved aside by `check --repair` and written again by another
    /// commit, or cut in place) is never used.
    tip: Arc<Mutex<Option<StampedSnapshot>>>,
    /// The inotify watch keeping a listing of `_delta_log/` current ([`Table::watch_log`]; the
    /// mount's), shared by clones.
    watch: Option<Arc<crate::log::watch::LogWatch>>,
    /// Held by a commit of this process from the write of its commit tmp to its link, shared by
    /// clones ([`crate::table::commit`]): concurrent commits of one process (the mount's) take
    /// versions one after another instead of racing for the same one, which the losers would
    /// pay for with a second tmp, fsync and read of the winner.
    publishing: Arc<Mutex<()>>,
    /// Version tickets for this process's blind appends, shared by clones
    /// ([`crate::table::commit::Sequencer`]).
    sequencer: Arc<crate::table::commit::Sequencer>,
}

/// A snapshot and the stamp of its version's commit file taken before it was read.
type StampedSnapshot = (Arc<Snapshot>, CommitStamp);

/// Which commit file a version's `_delta_log/{version:020}.json` is on disk: inode, size, and
/// modification and change times (`fstatat`), or `None` when there is none (a version reached
/// through a checkpoint whose commits were deleted). A commit is never written again in place,
/// so a different stamp means the version's commit was replaced or damaged after a snapshot
/// was built from it: caches keyed by version number check it before use (docs/FORMAT.md "Listings the mount keeps").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitStamp(Option<(u64, i64, i64, i64, i64, i64)>);

impl CommitStamp {
    /// A stamp no commit file has (for a value built when the stamp could not be taken, which
    /// is then never cached).
    pub const UNKNOWN: CommitStamp = CommitStamp(Some((u64::MAX, -1, -1, -1, -1, -1)));
}

/// What an append did ([`Table::append_txn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Committed as this version.
    Committed(u64),
    /// The table already records this version or a later one for the app id: nothing committed.
    AlreadyApplied {
        /// The version the table records for the app id.
        recorded: i64,
    },
    /// No rows and no txn: nothing committed.
    NoRows,
}

/// One line of `history`.
#[derive(Debug, Clone)]
pub struct HistoryEntry {
    /// The version.
    pub version: u64,
    /// The commit's commitInfo, its `timestamp` the time time travel uses: resolved
    /// ([`Table::commit_info`]) and raised to one ms after the previous version's when it is
    /// not after it ([`Table::commit_times`]; docs/FORMAT.md "Commit times").
    pub commit_info: CommitInfo,
    /// The time as the commit records it (resolved, not raised).
    pub recorded_timestamp: i64,
    /// Rows the commit wrote as a data change: its `numOutputRows` (Delta) or `num_added_rows`
    /// (delta-rs) metric, or for a commit that records neither, the rows of the files it added
    /// with `dataChange` true (stats, else counted in the files; a compaction's files, which
    /// only rearrange rows, count none: Delta PROTOCOL "Add File and Remove File"); `None` when
    /// a file to count could not be read.
    pub rows: Option<u64>,
    /// Rows live after the commit: the live files' stats, plus the rows counted in the live
    /// files whose `add` has no row count (each such file read once per `history`). `None`
    /// when such a file could not be read (removed by a vacuum, missing, damaged): the number
    /// is unknown, never a guess.
    pub table_rows: Option<u64>,
    /// Live files after the commit.
    pub table_files: usize,
}

impl HistoryEntry {
    /// Where the commit came from, as `history` shows it: the mount's `incoming/<name>` (the
    /// name escaped: it may hold anything) or `v/<n>/data.jsonl` for an edit (docs/MOUNT.md
    /// "Editing latest/data.jsonl"), `auto compaction` for an OPTIMIZE no one ran by hand;
    /// `None` for any other commit.
    pub fn source(&self) -> Option<String> {
        let params = &self.commit_info.operation_parameters;
        match params.get(staging::SOURCE_PARAM) {
            Some(s) if s.starts_with("v/") => Some(s.escape_debug().to_string()),
            Some(s) => Some(format!("incoming/{}", s.escape_debug())),
            None if self.commit_info.operation == "OPTIMIZE" && params.get("auto").is_some_and(|a| a == "true") => {
                Some("auto compaction".to_string())
            }
            None => None,
        }
    }
}

fn not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// A commit's time when it records none: its file's mtime raised to one ms after the previous
/// version's time (docs/FORMAT.md, "Commit times").
fn resolve_time(mut info: CommitInfo, mtime_ms: i64, previous: Option<i64>) -> CommitInfo {
    if !info.timestamp_recorded {
        info.timestamp = match previous {
            Some(p) => mtime_ms.max(p.saturating_add(1)),
            None => mtime_ms,
        };
    }
    info
}

/// A version's time as time travel uses it: `time` raised to one ms after the previous
/// version's (adjusted) time when it is not after it, as Delta's history manager (Spark's
/// `DeltaHistoryManager`, delta-kernel-rs) does before searching (docs/FORMAT.md "Commit times").
pub(crate) fn monotonic_time(time: i64, previous: Option<i64>) -> i64 {
    previous.map_or(time, |p| time.max(p.saturating_add(1)))
}

impl Table {
    /// Open an existing table. Errors: [`Error::TableNotFound`] when `root` has no log;
    /// [`Error::Corrupt`] when `_delta_log` is a symlink or not a folder.
    pub fn open(root: impl AsRef<Path>) -> Result<Table> {
        let root = root.as_ref().to_path_buf();
        let dir = match Dir::open(&root) {
            Ok(d) => d,
            Err(e) if not_found(&e) => return Err(Error::TableNotFound(root)),
            Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(Error::TableNotFound(root));
            }
            Err(e) => return Err(e),
        };
        let log = match dir.try_dir(LOG_DIR)? {
            Some(l) => l,
            None => return Err(Error::TableNotFound(root)),
        };
        let t = Table::new(root, dir, log);
        if t.log.stat(&files::commit_file_name(0))?.is_none() {
            // No version 0: a table whose old commits were cleaned up, or none at all.
            t.segment()?;
        }
        Ok(t)
    }

    fn new(root: PathBuf, dir: Dir, log: Dir) -> Table {
        Table {
            log_dir: root.join(LOG_DIR),
            root,
            dir,
            log,
            segment: Arc::new(Mutex::new(None)),
            newest_ok: Arc::new(AtomicU64::new(u64::MAX)),
            verified: Arc::new(AtomicU64::new(u64::MAX)),
            checkpoint_ok: Arc::new(AtomicU64::new(u64::MAX)),
            tip: Arc::new(Mutex::new(None)),
            watch: None,
            publishing: Arc::new(Mutex::new(())),
            sequencer: Arc::default(),
        }
    }

    /// Keep the listing of `_delta_log/` current with an inotify watch from now on
    /// ([`crate::log::watch`]), for a long-running process that asks for the segment on every
    /// request and commit (the mount): [`Table::segment`] then lists the folder only when an
    /// event cannot be applied to the listing it keeps. Clones made after this share the watch.
    /// Returns the table and, when the folder cannot be watched, why (the table then lists as
    /// without a watch).
    pub fn watch_log(mut self) -> (Table, Option<String>) {
        match crate::log::watch::LogWatch::start(&self.log) {
            crate::log::watch::Started::Watching(w) => {
                self.watch = Some(Arc::from(w));
                (self, None)
            }
            crate::log::watch::Started::Unwatched(why) => (self, Some(why)),
        }
    }

    /// Create a table with `schema` as version 0 (`CREATE TABLE`: commitInfo, protocol,
    /// metaData). The folder may exist (empty or not) but must hold no table.
    ///
    /// Errors: [`Error::TableExists`]; [`Error::InvalidArgument`] for column names equal regardless of
    /// case (Delta column names are case-insensitive); [`Error::Io`].
    pub fn create(root: impl AsRef<Path>, schema: &Schema) -> Result<Table> {
        let root = root.as_ref().to_path_buf();
        schema.check_unique_names()?;
        std::fs::create_dir_all(&root).ctx("create", &root)?;
        let dir = Dir::open(&root)?;
        let log = dir.create_dir(LOG_DIR, 0o755)?;
        // A table is there when its log holds any commit or checkpoint: version 0, or, after
        // another engine's log cleanup, only later commits and a checkpoint.
        let listing = crate::log::segment::Listing::read(&log)?;
        if !listing.commits.is_empty()
            || !listing.not_regular.is_empty()
            || !listing.delta_checkpoints.is_empty()
            || listing.last_checkpoint
        {
            return Err(Error::TableExists(root));
        }
        if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
            let _ = publish::fsync_dir(parent);
        }
        dir.sync()?;
        let ts = crate::util::time::now_ms();
        let schema_string = schema.to_schema_string();
        let actions = vec![
            Action::commit_info(CommitInfo {
                timestamp: ts,
                timestamp_recorded: true,
                operation: "CREATE TABLE".into(),
                operation_parameters: BTreeMap::from([
                    ("mode".into(), "ErrorIfExists".into()),
                    ("partitionBy".into(), "[]".into()),
                    ("description".into(), String::new()),
                    ("properties".into(), "{}".into()),
                ]),
                read_version: None,
                isolation_level: Some("Serializable".into()),
                is_blind_append: true,
                operation_metrics: BTreeMap::new(),
                engine_info: Some(ENGINE_INFO.into()),
            }),
            Action::protocol(crate::log::snapshot::jsonl_protocol(&schema.features(), None)),
            Action::metadata(Metadata {
                id: uuid::Uuid::new_v4().to_string(),
                format: Format {
                    provider: "json".into(),
                    options: BTreeMap::new(),
                },
                schema_string,
                partition_columns: vec![],
                configuration: BTreeMap::new(),
                created_time: Some(ts),
            }),
        ];
        let t = Table::new(root.clone(), dir, log);
        match publish::publish(&t.dir, &t.log, 0, &publish::encode(&actions))? {
            Publish::Won => {
                t.write_crc_after(0, None);
                Ok(t)
            }
            Publish::Lost => Err(Error::TableExists(root)),
        }
    }

    /// The table folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The table folder's directory handle.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Whether `_delta_log/` is watched with inotify ([`Table::watch_log`] succeeded): its
    /// changes all pass through this kernel, so a [`crate::log::watch::LogWaiter`] on it sees
    /// every commit.
    pub fn log_watched(&self) -> bool {
        self.watch.is_some()
    }

    /// `_delta_log/`'s directory handle.
    pub fn log_dir_handle(&self) -> &Dir {
        &self.log
    }

    /// The lock a commit of this process holds from its tmp's write to its link (see
    /// [`Table::publishing`]'s field).
    pub(crate) fn publish_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        crate::util::sync::lock(&self.publishing)
    }

    /// The version tickets of this process's blind appends.
    pub(crate) fn sequencer(&self) -> &crate::table::commit::Sequencer {
        &self.sequencer
    }

    /// [`Table::publish_lock`] if no other commit of this process holds it now.
    pub(crate) fn try_publish_lock(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        match self.publishing.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Check that `_delta_log` in the table folder is still the folder this table opened (same
    /// device and inode), so a commit is never published into a log that was moved aside or
    /// replaced after a long-running process (the mount) opened the table: the writer would be
    /// told it committed while the table at its path shows nothing. Called before each publish
    /// attempt ([`crate::table::commit::commit_loop`]); a move between this check and the link is not seen.
    ///
    /// Errors: [`Error::Corrupt`] naming `_delta_log` when it is gone, moved or replaced;
    /// [`Error::Io`].
    pub fn check_log_in_place(&self) -> Result<()> {
        let held = rustix::fs::fstat(self.log.fd()).map_err(|e| {
            Error::io(
                "stat",
                self.log_dir.clone(),
                std::io::Error::from_raw_os_error(e.raw_os_error()),
            )
        })?;
        match self.dir.stat(LOG_DIR)? {
            Some(st) if st.st_ino == held.st_ino && st.st_dev == held.st_dev => Ok(()),
            _ => Err(Error::Corrupt {
                path: self.log_dir.clone(),
                reason: "the folder was moved, removed or replaced after this process opened the table; nothing was committed (remount, or run the command again)".into(),
            }),
        }
    }

    /// `_delta_log/{version:020}.json` (for messages).
    pub fn commit_path(&self, version: u64) -> PathBuf {
        self.log_dir.join(files::commit_file_name(version))
    }

    fn stamp(&self) -> Result<Stamp> {
        let st = rustix::fs::fstat(self.log.fd()).map_err(|e| {
            Error::io(
                "stat",
                &self.log_dir,
                std::io::Error::from_raw_os_error(e.raw_os_error()),
            )
        })?;
        Ok((
            st.st_ino as u64,
            st.st_mtime as i64,
            st.st_mtime_nsec as i64,
            st.st_ctime as i64,
            st.st_ctime_nsec as i64,
        ))
    }

    /// The log segment: which versions exist and where the first damage is, proven from one
    /// listing of `_delta_log/`. A listing is reused while the folder's inode, mtime and ctime
    /// are unchanged and its ctime was older than the listing by more than the file system's
    /// timestamp granularity (50 ms when ctime has nanoseconds, else 2 s, for file systems with
    /// 1 s timestamps), so a change in the same clock tick cannot hide. With a watch
    /// ([`Table::watch_log`], the mount's), the listing is kept current by inotify instead and
    /// the folder is listed only when an event cannot be applied. Errors: [`Error::Io`] naming the folder;
    /// [`Error::TableNotFound`]; [`Error::Corrupt`] (see [`LogSegment::new`]).
    pub fn segment(&self) -> Result<LogSegment> {
        if let Some(w) = &self.watch
            && let Some(seg) = w.segment(&self.log, |l| {
                LogSegment::new(&self.root, l, || checkpoint::versions(&self.dir))
            })
        {
            return seg;
        }
        let stamp = self.stamp()?;
        if let Ok(c) = self.segment.lock()
            && let Some(c) = c.as_ref()
            && c.stamp == stamp
        {
            return Ok(c.segment.clone());
        }
        // Within one request of the mount, one listing per unchanged folder
        // (request::one_request).
        let key = Arc::as_ptr(&self.segment) as usize;
        if let Some(seg) = crate::table::request::listing(key, &stamp) {
            return Ok(seg);
        }
        let now = crate::util::time::now_ms();
        let (_, seg) = crate::log::segment::list_segment(&self.log, |l| {
            LogSegment::new(&self.root, l, || checkpoint::versions(&self.dir))
        })?;
        let seg = seg?;
        crate::table::request::remember_listing(key, stamp, &seg);
        let ctime_ms = stamp.3.saturating_mul(1000).saturating_add(stamp.4 / 1_000_000);
        // A ctime with nanoseconds comes from a file system with fine timestamps (a clock tick,
        // at most 10 ms); without, it may have whole seconds (ext3 with small inodes).
        let margin = if stamp.4 == 0 { 2000 } else { 50 };
        if ctime_ms.saturating_add(margin) < now
            && let Ok(mut c) = self.segment.lock()
        {
            *c = Some(CachedSegment {
                stamp,
                segment: seg.clone(),
            });
        }
        Ok(seg)
    }

    /// The newest version: the end of the [`Table::segment`], whose commit is checked complete.
    ///
    /// Errors: [`Error::Corrupt`] naming the damaged version when the log has a hole, a commit
    /// name that is not a regular file, or a damaged newest commit (the same error every read of
    /// a version at or past it gives); [`Error::Io`].
    pub fn latest_version(&self) -> Result<u64> {
        let seg = self.segment()?;
        if let Some(d) = &seg.damage {
            return Err(d.error());
        }
        if self.newest_ok.load(Ordering::Acquire) != seg.end {
            self.check_commit(seg.end)?;
            self.newest_ok.store(seg.end, Ordering::Release);
        }
        Ok(seg.end)
    }

    /// Check that every commit from the segment's start up to `version` is complete, reading
    /// each once per table (later calls read only the commits past the last one checked). The
    /// mount calls this before answering `latest`, so damage anywhere below answers EIO.
    /// Errors: as [`Table::read_commit`].
    pub fn verify_through(&self, version: u64) -> Result<()> {
        let seg = self.segment()?;
        if let Some(Err(e)) = seg.check(version) {
            return Err(e);
        }
        let Some(from) = self.verify_from(&seg, version) else {
            return Ok(());
        };
        for v in from..=version {
            self.check_commit(v)?;
            self.verified.store(v, Ordering::Release);
        }
        Ok(())
    }

    /// The newest version that can be read: the segment's end, or the version before the first
    /// damaged commit at or below it (each commit checked complete once per table, as in
    /// [`Table::verify_through`]). `None` when not even the first version can be read. Listings
    /// of versions use this, so damage never shows phantom versions nor hides readable ones.
    /// Errors: [`Error::Io`] and the segment's errors.
    pub fn readable_through(&self) -> Result<Option<u64>> {
        let seg = self.segment()?;
        if seg.damage.as_ref().is_some_and(|d| d.version <= seg.first) {
            return Ok(None);
        }
        let Some(from) = self.verify_from(&seg, seg.end) else {
            return Ok(Some(seg.end));
        };
        for v in from..=seg.end {
            match self.check_commit(v) {
                Ok(_) => self.verified.store(v, Ordering::Release),
                Err(Error::Corrupt { .. }) => return Ok(v.checked_sub(1).filter(|p| *p >= seg.first)),
                Err(e) => return Err(e),
            }
        }
        Ok(Some(seg.end))
    }

    /// The first commit to check so that every commit of `seg` up to `version` is checked:
    /// `None` when all are; after the last one checked; or, the first time and when the log's
    /// start moved past the last one checked (another engine cleaned up older commits, PROTOCOL
    /// "Checkpoints"), where [`Table::verify_start`] says.
    fn verify_from(&self, seg: &LogSegment, version: u64) -> Option<u64> {
        match self.verified.load(Ordering::Acquire) {
            v if v != u64::MAX && v.saturating_add(1) < seg.first => {
                let from = self.verify_start(seg, version);
                self.verified.store(from.saturating_sub(1), Ordering::Release);
                Some(from)
            }
            u64::MAX => Some(self.verify_start(seg, version)),
            v if v >= version => None,
            v => Some(v + 1),
        }
    }

    /// Where checking commits starts: after the newest readable checkpoint at or before
    /// `version` (it was written from a clean replay, and reads of later versions start from it,
    /// so older commits are not read again, as in [`Table::snapshot`]), else the segment's start.
    fn verify_start(&self, seg: &LogSegment, version: u64) -> u64 {
        match checkpoint::newest_at_or_before(&self.dir, version) {
            Some(c)
                if c >= seg.first
                    && (self.checkpoint_ok.load(Ordering::Acquire) == c
                        || checkpoint::read_totals(&self.dir, c).is_ok()) =>
            {
                self.verified.fetch_min(c, Ordering::AcqRel);
                c + 1
            }
            // A segment starting at a checkpoint whose own commit was cleaned up (Delta log
            // retention keeps the checkpoint, not always the commit): checking starts after it.
            _ if seg.start_checkpoint == Some(seg.first)
                && version > seg.first
                && matches!(self.log.stat(&files::commit_file_name(seg.first)), Ok(None)) =>
            {
                seg.first + 1
            }
            _ => seg.first,
        }
    }

    /// Read and check one commit (docs/FORMAT.md, "Commit completeness"), beneath the log folder.
    ///
    /// Errors: [`Error::Corrupt`] naming the version when it is damaged or not a regular file,
    /// or when it is missing below a newer commit (a hole); [`Error::VersionNotFound`] when it
    /// is missing past the newest; [`Error::Io`].
    pub fn read_commit(&self, version: u64) -> Result<Commit> {
        let mut actions = Vec::new();
        let mut c = self.scan_commit(version, |a| {
            actions.push(a);
            Ok(())
        })?;
        c.actions = actions;
        Ok(c)
    }

    /// [`Table::read_commit`], streamed ([`files::scan_commit`]): each action goes to `each` as
    /// its line is parsed, one line held at a time; the returned commit has no actions. What
    /// `each` built must be dropped when this returns an error (the whole-commit checks come
    /// last). Errors: as [`Table::read_commit`]; any error of `each`.
    pub fn scan_commit(&self, version: u64, each: impl FnMut(Action) -> Result<()>) -> Result<Commit> {
        let name = files::commit_file_name(version);
        let path = self.log_dir.join(&name);
        let (mut f, st) = match self.log.open_file_stat(&name) {
            Ok(f) => f,
            Err(e) if not_found(&e) => {
                return match self.cleaned_up_start(version)? {
                    Some(c) => Ok(c),
                    None => Err(self.missing(version)),
                };
            }
            Err(Error::Corrupt { .. }) => {
                return Err(files::damaged(
                    &path,
                    version,
                    "the commit is not a regular file (a symlink, FIFO or folder)",
                ));
            }
            Err(e) => return Err(e),
        };
        let mtime_ms = st
            .st_mtime
            .saturating_mul(1000)
            .saturating_add(st.st_mtime_nsec as i64 / 1_000_000);
        files::check_commit_size(&path, version, st.st_size as u64)?;
        // Through `take`: never past the bound if the file grows (scan_commit checks it too).
        let input = std::io::BufReader::with_capacity(256 << 10, (&mut f).take(files::MAX_COMMIT_BYTES + 1));
        files::scan_commit(version, &path, input, mtime_ms, each)
    }

    /// Read and check one commit, keeping nothing but its commitInfo (verification and
    /// commit times: memory does not grow with the commit's actions). Errors: as
    /// [`Table::read_commit`].
    pub fn check_commit(&self, version: u64) -> Result<Commit> {
        self.scan_commit(version, |_| Ok(()))
    }

    /// The commit of `version` when the segment starts at its Delta checkpoint and the commit
    /// itself was cleaned up (a log of a checkpoint alone, or whose commit of the checkpoint's
    /// version is gone: PROTOCOL "Checkpoints"): no actions (the checkpoint holds the state), no
    /// commitInfo, the checkpoint file's mtime as its time (docs/FORMAT.md "The log segment").
    /// `None` for any other missing commit.
    fn cleaned_up_start(&self, version: u64) -> Result<Option<Commit>> {
        let seg = self.segment()?;
        if seg.first != version || seg.start_checkpoint != Some(version) || !seg.delta_checkpoints.contains(&version) {
            return Ok(None);
        }
        let Ok(names) = self.delta_checkpoint_files(version) else {
            return Ok(None);
        };
        let (_, st) = self.log.open_file_stat(&names[0])?;
        Ok(Some(Commit {
            version,
            actions: Vec::new(),
            info: None,
            mtime_ms: st.st_mtime.saturating_mul(1000),
            len: 0,
        }))
    }

    /// The error for a version whose commit is not there: a hole (damage) or not found.
    fn missing(&self, version: u64) -> Error {
        match self.segment() {
            Ok(seg) => match seg.check(version) {
                Some(Err(e)) => e,
                Some(Ok(())) => files::damaged(
                    &self.commit_path(version),
                    version,
                    "the commit disappeared while it was being read",
                ),
                None => Error::VersionNotFound {
                    table: self.root.clone(),
                    version,
                    first: seg.first,
                    latest: seg.end,
                },
            },
            Err(e) => e,
        }
    }

    /// Check that `version` exists and nothing before it is damaged (per the segment).
    fn check_version(&self, version: u64) -> Result<LogSegment> {
        let seg = self.segment()?;
        match seg.check(version) {
            Some(Ok(())) => Ok(seg),
            Some(Err(e)) => Err(e),
            None => Err(Error::VersionNotFound {
                table: self.root.clone(),
                version,
                first: seg.first,
                latest: seg.end,
            }),
        }
    }

    /// The commitInfo of one version, its timestamp resolved: a commit without
    /// `commitInfo.timestamp` (other writers may omit it) gets its file's mtime raised to one
    /// ms after the previous version's time (docs/FORMAT.md, "Commit times").
    ///
    /// Errors: [`Error::VersionNotFound`], [`Error::Corrupt`].
    pub fn commit_info(&self, version: u64) -> Result<CommitInfo> {
        let c = self.check_commit(version)?;
        let info = c.info.clone().unwrap_or_default();
        if info.timestamp_recorded {
            return Ok(info);
        }
        // Walk back to the newest version that records its time (or the first), then forward:
        // iterative, so a long run of commits without timestamps cannot exhaust the stack.
        let first = self.segment()?.first;
        let mut chain = vec![(info, c.mtime_ms)];
        let mut previous = None;
        let mut v = version;
        while v > first {
            v -= 1;
            let c = self.check_commit(v)?;
            let info = c.info.unwrap_or_default();
            if info.timestamp_recorded {
                previous = Some(info.timestamp);
                break;
            }
            chain.push((info, c.mtime_ms));
        }
        let mut resolved = None;
        while let Some((info, mtime)) = chain.pop() {
            let r = resolve_time(info, mtime, previous);
            previous = Some(r.timestamp);
            resolved = Some(r);
        }
        Ok(resolved.unwrap_or_default())
    }

    /// Replay versions `from..=version` onto `replay` (whose state is that of `from - 1`, and
    /// whose last commit time was `previous`), calling `each` after every commit with the
    /// resolved commitInfo. Errors: as [`Table::read_commit`].
    fn replay_range(
        &self,
        from: u64,
        version: u64,
        replay: &mut Replay,
        mut previous: Option<i64>,
        mut each: impl FnMut(u64, &Replay, CommitInfo) -> Result<()>,
    ) -> Result<()> {
        for v in from..=version {
            // Streamed: each action is applied as its line is parsed (docs/FORMAT.md "Log
            // replay and checkpoints"); an error leaves `replay` to be dropped by the caller.
            replay.begin(v);
            let c = self.scan_commit(v, |a| replay.action(&self.root, v, &a))?;
            replay.end(&self.root, &c)?;
            let info = resolve_time(c.info.unwrap_or_default(), c.mtime_ms, previous);
            previous = Some(info.timestamp);
            each(v, replay, info)?;
        }
        Ok(())
    }

    /// The snapshot of `version` by log replay, from the newest of: this table's last snapshot
    /// (kept in memory and shared by clones), the newest checkpoint at or before `version`, or
    /// the segment's start. Writes a checkpoint when `version` is
    /// [`checkpoint::CHECKPOINT_INTERVAL`] or more past the newest one.
    ///
    /// Errors: [`Error::VersionNotFound`], [`Error::Corrupt`] (naming the first damaged version
    /// when `version` is at or past it), [`Error::UnsupportedProtocol`].
    pub fn snapshot(&self, version: u64) -> Result<Snapshot> {
        Ok(Arc::unwrap_or_clone(self.snapshot_arc(version)?))
    }

    /// [`Table::snapshot`], shared: the newest snapshot this table built is returned as is when
    /// it is of `version` (and its commit file unchanged), without copying its file list (the
    /// mount asks for the latest one on every create in `incoming/`).
    ///
    /// Errors: as [`Table::snapshot`].
    pub fn snapshot_arc(&self, version: u64) -> Result<Arc<Snapshot>> {
        let seg = self.check_version(version)?;
        // The newest snapshot, when it is this version: no checkpoint listing, no copy.
        if let Some(b) = self.tip_if(|v| v == version) {
            return Ok(b);
        }
        let cp = checkpoint::newest_at_or_before(&self.dir, version);
        // Stamped before the replay reads the commit, so a commit replaced meanwhile leaves a
        // tip that no later call uses.
        let stamp = self.commit_stamp(version);
        let mut base = self.tip_if(|v| v <= version);
        if let Some(c) = cp
            && base.as_ref().is_none_or(|b| b.version < c)
        {
            match checkpoint::read(&self.dir, c) {
                Ok(snap) => {
                    self.checkpoint_ok.store(c, Ordering::Release);
                    base = Some(Arc::new(snap));
                }
                Err(e) => ::log::warn!("ignoring checkpoint: {e}"),
            }
        }
        // Delta's Parquet checkpoints (PROTOCOL "Checkpoints"): replay starts from the newest
        // one that is complete and readable when it is newer than every other start.
        for &d in seg.delta_checkpoints.iter().rev() {
            if d > version || base.as_ref().is_some_and(|b| b.version >= d) {
                continue;
            }
            match self.delta_checkpoint(d) {
                Ok(snap) => {
                    base = Some(Arc::new(snap));
                    break;
                }
                Err(e) if e.is_unsupported() || matches!(e, Error::NoSchema { .. }) => return Err(e),
                Err(e) => ::log::warn!("ignoring Delta checkpoint of version {d}: {e}"),
            }
        }
        // `add`/`remove` actions replayed on top of the start (none from a checkpoint of it).
        let mut replayed = 0u64;
        let snap = match &base {
            Some(b) if b.version == version => b.clone(),
            Some(b) => {
                let (s, n) = self.replay_after_counting(b, version)?;
                replayed = n;
                Arc::new(s)
            }
            None if seg.first > 0 => {
                return Err(Error::Corrupt {
                    path: self.commit_path(0),
                    reason: format!(
                        "versions before {} are not available and the checkpoint of version {} cannot be read",
                        seg.first, seg.first
                    ),
                });
            }
            None => {
                let mut replay = Replay::default();
                let mut last = None;
                self.replay_range(0, version, &mut replay, None, |v, _, info| {
                    if v == version {
                        last = Some(info);
                    }
                    Ok(())
                })?;
                replayed = replay.file_actions();
                Arc::new(replay.snapshot(&self.root, version, last.unwrap_or_default())?)
            }
        };
        if (version - cp.unwrap_or(0) >= checkpoint::CHECKPOINT_INTERVAL
            || replayed >= checkpoint::CHECKPOINT_ACTIONS)
            && cp != Some(version)
        {
            match checkpoint::write(&self.dir, &snap) {
                Ok(()) => self.checkpoint_ok.store(version, Ordering::Release),
                Err(e) => ::log::debug!("no checkpoint written for version {version}: {e}"),
            }
        }

        if let Some(stamp) = stamp {
            self.set_tip(snap.clone(), stamp);
        }
        Ok(snap)
    }

    /// The file names of the complete Delta (Parquet) checkpoint of `version` in `_delta_log/`
    /// ([`crate::format::parquet::checkpoint_files`]). Errors: [`Error::Corrupt`] when there is none.
    fn delta_checkpoint_files(&self, version: u64) -> Result<Vec<String>> {
        let entries = self.log.entries()?;
        let names = entries.iter().filter_map(|e| e.name.to_str());
        if let Some(files) = crate::format::parquet::checkpoint_files(names, version) {
            return Ok(files);
        }
        // Name the first missing part of a multi-part checkpoint (`<v>.checkpoint.<i>.<n>.parquet`).
        let prefix = format!("{version:020}.checkpoint.");
        let present: std::collections::BTreeSet<(u64, u64)> = entries
            .iter()
            .filter_map(|e| e.name.to_str())
            .filter_map(|n| n.strip_prefix(&prefix)?.strip_suffix(".parquet"))
            .filter_map(|r| {
                let (i, n) = r.split_once('.')?;
                Some((i.parse().ok()?, n.parse().ok()?))
            })
            .map(|(i, n): (u64, u64)| (n, i))
            .collect();
        let missing = present.iter().map(|&(n, _)| n).find_map(|n| {
            (1..=n.min(100_000))
                .find(|i| !present.contains(&(n, *i)))
                .map(|i| format!("{prefix}{i:010}.{n:010}.parquet"))
        });
        Err(match missing {
            Some(name) => Error::Corrupt {
                path: self.log_dir.join(name),
                reason: "this part of the multi-part Delta checkpoint is missing".into(),
            },
            None => Error::Corrupt {
                path: self.log_dir.join(format!("{version:020}.checkpoint.parquet")),
                reason: "the Delta checkpoint is incomplete or of a kind tinydelta does not read".into(),
            },
        })
    }

    /// The actions of the Delta checkpoint of `version`, every part read beneath `_delta_log/`
    /// (a V2 checkpoint's manifest, JSON or Parquet, then its sidecars, PROTOCOL "V2 Checkpoint
    /// Table Feature"), paths decoded and checked as in a commit. Errors: [`Error::Corrupt`]
    /// naming the part or sidecar that is missing, not a regular file, of another size than its
    /// `sidecar` action says, named outside `_delta_log/_sidecars/`, or not a readable checkpoint.
    pub fn delta_checkpoint_actions(&self, version: u64) -> Result<Vec<Action>> {
        use crate::format::parquet::{contained, read_checkpoint, read_json_checkpoint};
        let mut actions = Vec::new();
        for name in self.delta_checkpoint_files(version)? {
            let path = self.log_dir.join(&name);
            let part = if name.ends_with(".json") {
                let (file, st) = self.log.open_file_stat(&name)?;
                let len = u64::try_from(st.st_size).unwrap_or(0);
                if len > crate::log::files::MAX_COMMIT_BYTES {
                    return Err(Error::Corrupt {
                        path,
                        reason: format!(
                            "version {version}: the checkpoint is {len} bytes, more than the {} bytes tinydelta reads",
                            crate::log::files::MAX_COMMIT_BYTES
                        ),
                    });
                }
                let mut bytes = Vec::with_capacity(len as usize);
                std::io::Read::read_to_end(&mut std::io::Read::take(file, len + 1), &mut bytes).ctx("read", &path)?;
                read_json_checkpoint(&bytes, &path)?
            } else {
                let file = self.log.open_file(&name)?;
                contained(&path, || read_checkpoint(file, &path))?
            };
            if let Some(v) = part.version
                && u64::try_from(v).ok() != Some(version)
            {
                return Err(Error::Corrupt {
                    path,
                    reason: format!("version {version}: its checkpointMetadata says version {v}"),
                });
            }
            let mut read = part.actions;
            for sc in &part.sidecars {
                let rel = sidecar_file(&self.root, sc).ok_or_else(|| Error::Corrupt {
                    path: path.clone(),
                    reason: format!(
                        "version {version}: sidecar {} is not a file in _delta_log/_sidecars/",
                        crate::util::quote::quoted(&sc.path)
                    ),
                })?;
                let sc_path = self.log_dir.join(&rel);
                let (file, st) = self.log.open_file_stat(&rel)?;
                if st.st_size != sc.size_in_bytes {
                    return Err(Error::Corrupt {
                        path: sc_path,
                        reason: format!(
                            "version {version}: the sidecar is {} bytes, its sidecar action says {}",
                            st.st_size, sc.size_in_bytes
                        ),
                    });
                }
                let inner = contained(&sc_path, || read_checkpoint(file, &sc_path))?;
                if !inner.sidecars.is_empty() || inner.actions.iter().any(|a| a.add.is_none() && a.remove.is_none()) {
                    return Err(Error::Corrupt {
                        path: sc_path,
                        reason: format!("version {version}: a sidecar holds actions other than add and remove"),
                    });
                }
                read.extend(inner.actions);
            }
            for mut a in read {
                for p in [
                    a.add.as_mut().map(|a| &mut a.path),
                    a.remove.as_mut().map(|r| &mut r.path),
                ]
                .into_iter()
                .flatten()
                {
                    match crate::format::actions::decode_path(p) {
                        Some(d) if crate::format::actions::is_safe_relative_path(&d) => *p = d,
                        _ => {
                            return Err(Error::Corrupt {
                                path,
                                reason: format!("path {} is not a relative path inside the table", crate::util::quote::quoted(p)),
                            });
                        }
                    }
                }
                actions.push(a);
            }
        }
        Ok(actions)
    }

    /// The snapshot of `version` from its Delta (Parquet) checkpoint alone: its `protocol`,
    /// `metaData`, `txn`s and live `add`s (in the checkpoint's order). The commit time is the
    /// version's commit's, or the checkpoint file's mtime when that commit is gone.
    /// Errors: as [`Table::delta_checkpoint_actions`]; [`Error::UnsupportedFeature`].
    pub fn delta_checkpoint(&self, version: u64) -> Result<Snapshot> {
        let actions = self.delta_checkpoint_actions(version)?;
        let info = match self.commit_info(version) {
            Ok(i) => i,
            Err(_) => {
                let name = &self.delta_checkpoint_files(version)?[0];
                let (_, st) = self.log.open_file_stat(name)?;
                CommitInfo {
                    timestamp: st.st_mtime.saturating_mul(1000),
                    ..Default::default()
                }
            }
        };
        let commit = Commit {
            version,
            actions,
            info: None,
            mtime_ms: info.timestamp,
            len: 0,
        };
        let mut replay = Replay::default();
        replay.apply(&self.root, &commit)?;
        replay.snapshot(&self.root, version, info)
    }

    /// The totals `describe` prints (file count, rows, bytes, schema, commit time) for `version`.
    /// From a checkpoint followed only by blind appends this reads the checkpoint's header and
    /// the commits after it, so it costs O(commits since the checkpoint), not O(live files);
    /// otherwise it builds the snapshot. Errors: as [`Table::snapshot`].
    pub fn totals(&self, version: u64) -> Result<checkpoint::Totals> {
        let from_snapshot = |s: &Snapshot| checkpoint::Totals {
            version: s.version,
            num_files: s.files.len() as u64,
            num_records: s.num_records(),
            size_bytes: s.size_bytes(),
            files_without_stats: s.files.iter().filter(|f| !f.has_stats).count() as u64,
            commit_info: s.commit_info.clone(),
            metadata: s.metadata.clone(),
        };
        self.check_version(version)?;
        // The snapshot this table built of the version, when there is one: no second read.
        if let Some(s) = self.tip_if(|v| v == version) {
            return Ok(from_snapshot(&s));
        }
        let Some(cp) = checkpoint::newest_at_or_before(&self.dir, version) else {
            return self.snapshot_arc(version).map(|s| from_snapshot(&s));
        };
        let Ok(mut t) = checkpoint::read_totals(&self.dir, cp) else {
            return self.snapshot_arc(version).map(|s| from_snapshot(&s));
        };
        if version - cp >= checkpoint::CHECKPOINT_INTERVAL {
            return self.snapshot_arc(version).map(|s| from_snapshot(&s));
        }
        let mut previous = Some(t.commit_info.timestamp);
        for v in cp + 1..=version {
            let c = self.read_commit(v)?;
            let blind = c.actions.iter().all(|a| a.remove.is_none() && a.protocol.is_none())
                && c.info.as_ref().is_some_and(|i| i.is_blind_append)
                && c.actions
                    .iter()
                    .filter_map(|a| a.add.as_ref())
                    .all(|a| a.num_records().is_some());
            if !blind {
                return self.snapshot_arc(version).map(|s| from_snapshot(&s));
            }
            let info = resolve_time(c.info.clone().unwrap_or_default(), c.mtime_ms, previous);
            previous = Some(info.timestamp);
            t.commit_info = info;
            for a in c.actions {
                if let Some(m) = a.metadata {
                    t.metadata = m;
                }
                if let Some(add) = a.add {
                    t.num_files += 1;
                    t.num_records = t.num_records.saturating_add(add.num_records().unwrap_or(0));
                    t.size_bytes = t.size_bytes.saturating_add(add.size);
                }
            }
        }
        t.version = version;
        Ok(t)
    }

    /// The snapshot of `version`, replaying only the commits after `base` when `base` is older
    /// (cost: `base`'s live files plus the new commits), else a full replay.
    ///
    /// Errors: as [`Table::snapshot`].
    pub fn snapshot_after(&self, base: &Snapshot, version: u64) -> Result<Snapshot> {
        if version < base.version {
            return self.snapshot(version);
        }
        if version == base.version {
            return Ok(base.clone());
        }
        self.check_version(version)?;
        self.replay_after(base, version)
    }

    /// The snapshot of `version` (> `base.version`) by replaying the commits after `base`, each
    /// read and checked as [`Table::read_commit`] does, without listing the log first.
    fn replay_after(&self, base: &Snapshot, version: u64) -> Result<Snapshot> {
        self.replay_after_counting(base, version).map(|(s, _)| s)
    }

    /// [`Table::replay_after`], also returning how many `add` and `remove` actions it replayed.
    fn replay_after_counting(&self, base: &Snapshot, version: u64) -> Result<(Snapshot, u64)> {
        let mut replay = Replay::from_snapshot(base);
        let mut last = None;
        self.replay_range(
            base.version + 1,
            version,
            &mut replay,
            Some(base.timestamp),
            |v, _, info| {
                if v == version {
                    last = Some(info);
                }
                Ok(())
            },
        )?;
        let n = replay.file_actions();
        Ok((replay.snapshot(&self.root, version, last.unwrap_or_default())?, n))
    }

    /// The stamp of `version`'s commit file ([`CommitStamp`]); `None` when it cannot be
    /// taken (then nothing is cached on it).
    pub fn commit_stamp(&self, version: u64) -> Option<CommitStamp> {
        match self.log.stat(&crate::log::files::commit_file_name(version)) {
            Ok(Some(st)) => Some(CommitStamp(Some((
                st.st_ino,
                st.st_size,
                st.st_mtime,
                st.st_mtime_nsec as i64,
                st.st_ctime,
                st.st_ctime_nsec as i64,
            )))),
            Ok(None) => Some(CommitStamp(None)),
            Err(e) => {
                ::log::debug!("no stamp of version {version}'s commit: {e}");
                None
            }
        }
    }

    /// The (resolved) `commitInfo.timestamp` of `version`, ms since epoch: from the cached
    /// newest snapshot when it is that version and its commit is unchanged (one `fstatat`),
    /// else read as [`Table::commit_info`] does. Errors: as [`Table::commit_info`].
    pub(crate) fn commit_timestamp(&self, version: u64) -> Result<i64> {
        match self.tip_if(|v| v == version) {
            Some(s) => Ok(s.timestamp),
            None => Ok(self.commit_info(version)?.timestamp),
        }
    }

    /// Whether the table property `delta.appendOnly` is `true` at `version` (Delta PROTOCOL
    /// "Append-only Tables"; the value compared without case, as Delta's boolean properties).
    /// Errors: as [`Table::snapshot`].
    pub(crate) fn append_only_at(&self, version: u64) -> Result<bool> {
        let snap = match self.tip_if(|v| v == version) {
            Some(s) => s,
            None => self.snapshot_arc(version)?,
        };
        Ok(snap
            .metadata
            .configuration
            .get("delta.appendOnly")
            .is_some_and(|v| v.eq_ignore_ascii_case("true")))
    }

    /// The cached newest snapshot when `keep(its version)` and its commit file is still the
    /// one it was built from ([`CommitStamp`]).
    fn tip_if(&self, keep: impl Fn(u64) -> bool) -> Option<Arc<Snapshot>> {
        let (snap, stamp) = self.tip.lock().ok().and_then(|t| t.clone())?;
        if !keep(snap.version) {
            return None;
        }
        if self.commit_stamp(snap.version) != Some(stamp) {
            ::log::debug!(
                "version {}'s commit changed since it was replayed: replaying again",
                snap.version
            );
            if let Ok(mut tip) = self.tip.lock() {
                *tip = None;
            }
            return None;
        }
        Some(snap)
    }

    /// Keep `snap` (stamped `stamp` before it was read) as the newest snapshot unless a newer
    /// one is kept.
    fn set_tip(&self, snap: Arc<Snapshot>, stamp: CommitStamp) {
        if let Ok(mut tip) = self.tip.lock()
            && tip.as_ref().is_none_or(|(t, _)| t.version <= snap.version)
        {
            *tip = Some((snap, stamp));
        }
    }

    /// The snapshot of the newest version.
    pub fn latest_snapshot(&self) -> Result<Snapshot> {
        self.snapshot(self.latest_version()?)
    }

    /// [`Table::latest_snapshot`], shared ([`Table::snapshot_arc`]). Errors: as
    /// [`Table::snapshot`].
    pub fn latest_snapshot_arc(&self) -> Result<Arc<Snapshot>> {
        self.snapshot_arc(self.latest_version()?)
    }

    /// One entry per version, oldest first, with the table's rows and files after each commit.
    /// Versions before the segment's start (cleaned up) are not listed; the start itself is,
    /// when its commit is still there beside the checkpoint replay starts from.
    pub fn history(&self) -> Result<Vec<HistoryEntry>> {
        let latest = self.latest_version()?;
        let seg = self.segment()?;
        let mut out = Vec::new();
        // Rows counted in data files without a row count in their stats, by path (`None`: the
        // file could not be read).
        let mut counted: HashMap<String, Option<u64>> = HashMap::new();
        // One entry: `added` are the files the commit added (live after it), `r` the state after it.
        let mut entry = |v: u64, r: &Replay, info: CommitInfo, recorded_timestamp: i64, added: Vec<crate::log::snapshot::FileEntry>| {
            let mut count = |f: &crate::log::snapshot::FileEntry| match counted.get(f.path.as_str()) {
                Some(n) => *n,
                None => {
                    let n = self.count_file_rows(f, r.metadata());
                    counted.insert(f.path.to_string(), n);
                    n
                }
            };
            let (stated, files) = r.live_rows();
            let mut table_rows = Some(stated);
            for f in r.live_without_stats() {
                table_rows = table_rows.zip(count(&f)).map(|(a, b)| a.saturating_add(b));
            }
            let rows = match info.metric("numOutputRows").or_else(|| info.metric("num_added_rows")) {
                Some(n) => Some(n),
                None => added.iter().try_fold(0u64, |n, f| {
                    let c = if f.has_stats { Some(f.num_records) } else { count(f) };
                    c.map(|c| n.saturating_add(c))
                }),
            };
            HistoryEntry {
                version: v,
                commit_info: info,
                recorded_timestamp,
                rows,
                table_rows,
                table_files: files,
            }
        };
        let (mut replay, from, previous) = if seg.first == 0 {
            (Replay::default(), 0, None)
        } else {
            // The checkpoint the segment starts at, tinydelta's or Delta's.
            let base = self.snapshot(seg.first)?;
            let replay = Replay::from_snapshot(&base);
            // Its own commit, when log cleanup kept it: the entry of the first readable version.
            if self.log.stat(&files::commit_file_name(seg.first))?.is_some() {
                let commit = self.read_commit(seg.first)?;
                let mut info = self.commit_info(seg.first)?;
                let recorded_timestamp = info.timestamp;
                info.timestamp = base.timestamp;
                let added: Vec<_> = commit
                    .actions
                    .iter()
                    .filter_map(|a| a.add.as_ref())
                    .filter(|a| a.data_change && replay.is_live(&a.path))
                    .map(|a| crate::log::snapshot::FileEntry::from_add(a, seg.first))
                    .collect();
                out.push(entry(seg.first, &replay, info, recorded_timestamp, added));
            }
            (replay, seg.first + 1, Some(base.timestamp))
        };
        // The times time travel uses (docs/FORMAT.md "Commit times"), as `commit_times` gives.
        let mut adjusted = previous;
        self.replay_range(from, latest, &mut replay, previous, |v, r, mut info| {
            let recorded_timestamp = info.timestamp;
            info.timestamp = monotonic_time(info.timestamp, adjusted);
            adjusted = Some(info.timestamp);
            out.push(entry(v, r, info, recorded_timestamp, r.last_added()));
            Ok(())
        })?;
        Ok(out)
    }

    /// The rows of data file `f` (whose `add` has no row count), read from the file under the
    /// schema of `metadata`; `None` when it cannot be read (vacuumed, missing, damaged).
    fn count_file_rows(&self, f: &crate::log::snapshot::FileEntry, metadata: Option<&crate::format::actions::Metadata>) -> Option<u64> {
        let schema = Schema::of_metadata(metadata?).ok()?;
        let (file, _) = self.open_rows(f, &schema).ok()?;
        crate::format::rows::count_rows(file, &self.root.join(&f.path)).ok()
    }

    /// Every data file path any `add` of any version named (for vacuum).
    pub fn all_added_paths(&self) -> Result<HashSet<String>> {
        Ok(self.inventory(None)?.0)
    }

    /// One replay of the whole log: every data file path any `add` named (decoded), and every
    /// value of `commitInfo.operationParameters[param]` (the mount's `stagingId`s, for vacuum).
    ///
    /// Errors: [`Error::Corrupt`] unless the whole log, from version 0 to the newest commit
    /// present, replays cleanly: vacuum deletes nothing on a log it could not read whole.
    pub fn inventory_with_param(&self, param: &str) -> Result<(HashSet<String>, HashSet<String>)> {
        self.inventory(Some(param))
    }

    fn inventory(&self, param: Option<&str>) -> Result<(HashSet<String>, HashSet<String>)> {
        let latest = self.latest_version()?;
        let seg = self.segment()?;
        if seg.first > 0 {
            return Err(Error::Corrupt {
                path: self.commit_path(0),
                reason: format!(
                    "versions before {} are not available, so the files they named are unknown; vacuum needs the whole log",
                    seg.first
                ),
            });
        }
        let mut replay = Replay::recording_added();
        let mut values = HashSet::new();
        self.replay_range(0, latest, &mut replay, None, |_, _, info| {
            if let Some(v) = param.and_then(|p| info.operation_parameters.get(p)) {
                values.insert(v.clone());
            }
            Ok(())
        })?;
        Ok((replay.ever_added.unwrap_or_default(), values))
    }

    /// The newest version whose time ([`Table::commit_times`]) is at or before `time_ms`.
    /// `None` when `time_ms` is before the first version. One read of each commit of the log
    /// segment (the times another writer recorded may go backwards, so no binary search).
    /// Errors: as [`Table::commit_times`].
    pub fn version_as_of(&self, time_ms: i64) -> Result<Option<u64>> {
        let (first, times) = self.commit_times(self.latest_version()?)?;
        let n = times.partition_point(|t| *t <= time_ms);
        Ok(n.checked_sub(1).map(|i| first + i as u64))
    }

    /// The times of versions `first..=through` that time travel by time searches, with `first`
    /// the log segment's first version: each version's resolved time ([`Table::commit_info`];
    /// a checkpoint's version, whose commit may be gone, its snapshot's), raised to one ms after
    /// the previous version's when it is not after it, so they strictly increase
    /// (docs/FORMAT.md "Commit times"). One read of each commit; 8 bytes per version.
    /// Errors: as [`Table::read_commit`] and [`Table::snapshot`].
    pub fn commit_times(&self, through: u64) -> Result<(u64, Vec<i64>)> {
        let first = self.segment()?.first;
        let start = if first > 0 {
            self.snapshot(first)?.timestamp
        } else {
            self.commit_info(first)?.timestamp
        };
        let mut times = Vec::with_capacity(usize::try_from(through.saturating_sub(first)).unwrap_or(0).min(1 << 20) + 1);
        times.push(start);
        let (mut recorded, mut adjusted) = (start, start);
        for v in first.saturating_add(1)..=through {
            let c = self.read_commit(v)?;
            recorded = resolve_time(c.info.unwrap_or_default(), c.mtime_ms, Some(recorded)).timestamp;
            adjusted = monotonic_time(recorded, Some(adjusted));
            times.push(adjusted);
        }
        Ok((first, times))
    }

}


/// The file of sidecar action `sc` relative to `_delta_log/` (PROTOCOL "Sidecar File
/// Information": sidecars reside in `_delta_log/_sidecars/`): `_sidecars/<name>` for a bare file
/// name, or for a URI or absolute path naming a file of that folder of the table at `root`;
/// `None` for anything else (another folder, `..`, another table).
fn sidecar_file(root: &Path, sc: &crate::format::actions::Sidecar) -> Option<String> {
    let decoded = crate::format::actions::decode_path(&sc.path)?;
    let name = if decoded.contains('/') {
        let abs = decoded.strip_prefix("file://").or_else(|| decoded.strip_prefix("file:")).unwrap_or(&decoded);
        let dir = root.join(crate::log::files::LOG_DIR).join("_sidecars");
        Path::new(abs).strip_prefix(&dir).ok()?.to_str()?.to_string()
    } else {
        decoded
    };
    let ok = !name.is_empty() && !name.contains('/') && name != "." && name != ".." && !name.starts_with('.');
    ok.then(|| format!("_sidecars/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (tempfile::TempDir, Table) {
        let dir = tempfile::tempdir().expect("tempdir");
        let schema = Schema::parse_cli(&["id:int!".into(), "s:str".into()]).expect("schema");
        let t = Table::create(dir.path().join("t"), &schema).expect("create");
        (dir, t)
    }

    fn append(t: &Table, rows: &str) -> u64 {
        t.append("test", rows.as_bytes(), &WriteOptions::default())
            .expect("append")
            .expect("rows")
    }

    #[test]
    fn incremental_snapshot_equals_full_replay() {
        let (_d, t) = table();
        let base = t.snapshot(0).expect("snapshot 0");
        append(&t, "{\"id\":1}\n");
        append(&t, "{\"id\":2}\n{\"id\":3}\n");
        let mid = t.snapshot(2).expect("snapshot 2");
        t.overwrite("test", "{\"id\":4}\n".as_bytes(), &WriteOptions::default())
            .expect("overwrite");
        t.restore(2, &WriteOptions::default()).expect("restore");
        append(&t, "{\"id\":5}\n");
        for v in 0..=5 {
            let full = t.snapshot(v).expect("full");
            for b in [&base, &mid] {
                let inc = t.snapshot_after(b, v).expect("incremental");
                assert_eq!(inc.files, full.files, "version {v} from base {}", b.version);
                assert_eq!(inc.num_records(), full.num_records());
                assert_eq!(inc.timestamp, full.timestamp);
                assert_eq!(inc.schema, full.schema);
            }
        }
        assert!(matches!(
            t.snapshot_after(&mid, 9),
            Err(Error::VersionNotFound { version: 9, .. })
        ));
    }

    /// An append advances this handle's newest snapshot from the commit bytes it linked, never
    /// reading the file back: that snapshot and the `.crc` written from it are the ones a
    /// replay of the log from disk gives (a new handle, no cache), for plain appends and for an
    /// append that merges the schema (a `metaData` in the commit).
    #[test]
    fn a_published_append_advances_as_the_file_replays() {
        let (_d, t) = table();
        append(&t, "{\"id\":1}\n");
        append(&t, "{\"id\":2}\n{\"id\":3,\"s\":\"x\"}\n");
        let merge = WriteOptions {
            merge_schema: Some(Schema::parse_cli(&["id:int!".into(), "s:str".into(), "n:int".into()]).expect("schema")),
            ..WriteOptions::default()
        };
        t.append("test", "{\"id\":4,\"n\":7}\n".as_bytes(), &merge)
            .expect("merging append")
            .expect("rows");
        append(&t, "{\"id\":5,\"n\":8}\n");
        for v in 1..=4 {
            // The checksum the append wrote, then the version advanced from its bytes by another
            // handle (as the writing handle did), then from disk by a fresh handle.
            let on_disk = crate::log::crc::read(t.log_dir_handle(), v)
                .expect("crc")
                .expect("a .crc was written");
            let kept = {
                let w = Table::open(t.root()).expect("open");
                let base = w.snapshot(v - 1).expect("base");
                let bytes = std::fs::read(t.log_dir.join(crate::log::files::commit_file_name(v))).expect("commit");
                w.write_crc_published(v, &base, Some(&bytes));
                let kept = w.tip.lock().expect("tip").clone().expect("a newest snapshot is kept");
                assert_eq!(kept.1, w.commit_stamp(v).expect("stamp"), "version {v}");
                kept.0
            };
            let full = Table::open(t.root()).expect("open").snapshot(v).expect("replay");
            assert_eq!(kept.files, full.files, "version {v}");
            assert_eq!(
                (
                    kept.version,
                    kept.timestamp,
                    &kept.commit_info,
                    &kept.schema,
                    &kept.metadata,
                    &kept.protocol,
                    &kept.txns,
                    kept.vacuums
                ),
                (
                    full.version,
                    full.timestamp,
                    &full.commit_info,
                    &full.schema,
                    &full.metadata,
                    &full.protocol,
                    &full.txns,
                    full.vacuums
                ),
                "version {v}"
            );
            let json = |c: &crate::log::crc::Crc| serde_json::to_value(c).expect("json");
            assert_eq!(json(&on_disk), json(&crate::log::crc::Crc::of(&full)), "version {v}");
        }
        // The handle that wrote them keeps the newest as its tip, equal to the replay.
        let tip = t.tip.lock().expect("tip").clone().expect("tip").0;
        let full = Table::open(t.root()).expect("open").snapshot(4).expect("replay");
        assert_eq!((tip.version, &tip.files, &tip.metadata), (4, &full.files, &full.metadata));
        assert!(full.metadata.schema_string.contains("\"n\""), "the merged column");
    }

    #[test]
    fn advance_equals_replay_or_declines() {
        let (_d, t) = table();
        append(&t, "{\"id\":1}\n");
        append(&t, "{\"id\":2}\n{\"id\":3}\n");
        crate::ops::alter::add_column(&t, "note:str", &WriteOptions::default()).expect("alter");
        t.overwrite("test", "{\"id\":4}\n".as_bytes(), &WriteOptions::default())
            .expect("overwrite");
        append(&t, "{\"id\":5}\n");
        let latest = t.latest_version().expect("latest");
        let mut advanced = 0;
        for v in 1..=latest {
            let base = t.snapshot(v - 1).expect("base");
            let full = t.snapshot(v).expect("full");
            let commit = t.read_commit(v).expect("commit");
            match crate::log::snapshot::advance(&base, &commit) {
                Some(s) => {
                    advanced += 1;
                    assert_eq!(s.files, full.files, "version {v}");
                    assert_eq!(
                        (
                            s.version,
                            s.timestamp,
                            &s.schema,
                            &s.metadata,
                            &s.protocol,
                            &s.txns,
                            s.vacuums
                        ),
                        (
                            full.version,
                            full.timestamp,
                            &full.schema,
                            &full.metadata,
                            &full.protocol,
                            &full.txns,
                            full.vacuums
                        ),
                        "version {v}"
                    );
                    let (a, b) = (crate::log::crc::Crc::of(&s), crate::log::crc::Crc::of(&full));
                    assert_eq!((a.table_size_bytes, a.num_files), (b.table_size_bytes, b.num_files));
                }
                // Only the overwrite (it removes files) is replayed instead.
                None => assert!(commit.actions.iter().any(|a| a.remove.is_some()), "version {v}"),
            }
            // Never from a base that is not the version before.
            assert!(crate::log::snapshot::advance(&t.snapshot(0).expect("v0"), &commit).is_none() || v == 1);
        }
        assert_eq!(advanced, latest - 1);
    }

    #[test]
    fn txns_survive_restore_and_private_checkpoints() {
        let (_d, t) = table();
        let o = WriteOptions::default();
        let r = t.append_txn("t", "{\"id\":1}\n".as_bytes(), &o, "a", 3).expect("txn");
        assert_eq!(r, TxnOutcome::Committed(1));
        t.restore(0, &o).expect("restore"); // 2
        let s2 = t.snapshot(2).expect("snapshot");
        assert_eq!(s2.txns.get("a"), Some(&3));
        checkpoint::write(t.dir(), &s2).expect("checkpoint");
        assert_eq!(checkpoint::read(t.dir(), 2).expect("read").txns, s2.txns);
        let fresh = Table::open(t.root()).expect("open");
        append(&fresh, "{\"id\":2}\n"); // 3
        assert_eq!(fresh.snapshot(3).expect("snapshot").txns.get("a"), Some(&3));
        let r = fresh
            .append_txn("t", "{\"id\":1}\n".as_bytes(), &o, "a", 3)
            .expect("txn");
        assert_eq!(r, TxnOutcome::AlreadyApplied { recorded: 3 });
        // A checkpoint from before txns were recorded is ignored (replay is the truth).
        let cp = t.root().join(checkpoint::CHECKPOINT_DIR).join(checkpoint::file_name(2));
        let text = std::fs::read_to_string(&cp).expect("cp");
        let (head, rest) = text.split_once('\n').expect("header");
        let mut h: serde_json::Value = serde_json::from_str(head).expect("json");
        h.as_object_mut().expect("object").remove("txns");
        std::fs::write(&cp, format!("{h}\n{rest}")).expect("write");
        assert!(checkpoint::read(t.dir(), 2).is_err());
        let fresh = Table::open(t.root()).expect("open");
        assert_eq!(fresh.snapshot(3).expect("snapshot").txns.get("a"), Some(&3));
    }

    #[test]
    fn a_cached_segment_never_hides_a_later_stray_commit() {
        let (_d, t) = table();
        append(&t, "{\"id\":1}\n");
        // Old enough for the listing to be cached on any file system.
        std::thread::sleep(std::time::Duration::from_millis(2100));
        assert_eq!(t.latest_version().expect("latest"), 1);
        assert_eq!(t.latest_version().expect("latest (cached)"), 1);
        let stray = t.commit_path(5);
        std::fs::copy(t.commit_path(1), &stray).expect("stray");
        let e = t.latest_version().expect_err("a hole at 2").to_string();
        assert!(e.contains("version 2 is damaged") && e.contains("hole"), "{e}");
        assert_eq!(t.snapshot(1).expect("version 1 still reads").files.len(), 1);
        std::fs::remove_file(&stray).expect("rm");
        assert_eq!(t.latest_version().expect("whole again"), 1);
    }

    #[test]
    fn latest_version_sees_commits_by_other_handles() {
        let (_d, t) = table();
        let other = Table::open(t.root()).expect("open");
        assert_eq!(t.latest_version().expect("latest"), 0);
        append(&other, "{\"id\":1}\n");
        append(&other, "{\"id\":2}\n");
        assert_eq!(t.latest_version().expect("latest"), 2);
        assert_eq!(t.clone().latest_version().expect("latest"), 2);
    }

    #[test]
    fn checkpoints_agree_with_replay_and_bad_ones_are_ignored() {
        let (_d, t) = table();
        append(&t, "{\"id\":1}\n");
        append(&t, "{\"id\":2}\n{\"id\":3}\n");
        t.overwrite("test", "{\"id\":4}\n".as_bytes(), &WriteOptions::default())
            .expect("overwrite");
        append(&t, "{\"id\":5,\"s\":\"x\"}\n");
        append(&t, "{\"id\":6}\n");
        let full: Vec<Snapshot> = (0..=5).map(|v| t.snapshot(v).expect("snapshot")).collect();
        checkpoint::write(t.dir(), &full[3]).expect("write checkpoint");
        let fresh = Table::open(t.root()).expect("open");
        assert_eq!(fresh.latest_version().expect("latest"), 5);
        for (v, f) in full.iter().enumerate() {
            let v = v as u64;
            let s = fresh.snapshot(v).expect("snapshot");
            assert_eq!(s.files, f.files, "version {v}");
            assert_eq!(s.timestamp, f.timestamp);
            let tot = fresh.totals(v).expect("totals");
            assert_eq!(
                (tot.num_files, tot.num_records, tot.size_bytes),
                (f.files.len() as u64, f.num_records(), f.size_bytes()),
                "totals of version {v}"
            );
            assert_eq!(tot.commit_info.timestamp, f.timestamp);
        }
        // A damaged checkpoint is ignored: replay is the truth.
        let cp = t
            .root()
            .join(checkpoint::CHECKPOINT_DIR)
            .join(format!("{:020}.jsonl", 3));
        std::fs::write(&cp, "{\"version\":3,\"numFiles\":9}\n").expect("damage");
        assert_eq!(fresh.snapshot(5).expect("snapshot").files, full[5].files);
        assert_eq!(fresh.totals(4).expect("totals").num_records, full[4].num_records());
    }
}
