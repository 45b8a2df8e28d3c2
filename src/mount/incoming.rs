//! `incoming/`: the drop box's state machine (docs/MOUNT.md "`incoming/`").
//!
//! One [`Staged`] per file written into `incoming/`, in exactly one [`State`]:
//!
//! ```text
//!            create / open(O_TRUNC) of a reachable name
//!                 |
//!                 v
//!   +---------> Listed ---- commit point, commit ok ---> Committed (name reachable, not listed,
//!   |      (bytes staged,        (close, fsync,             for GHOST_TTL or until re-created)
//!   |       note if refused)      rename to a plain name)        |
//!   |           |   \                                            | open for writing /
//!   |           |    \-- name re-created by another writer       | a write after fsync
//!   |           |        --> Detached (commits at its own close) |
//!   |           +-- rm, replaced by a rename --> Removed         |
//!   +------------------------------------------------------------+
//! ```
//!
//! A batch opened on a committed name starts after the committed bytes; if it gets no byte
//! (`touch`, `: >>`), its close (or release) makes it Committed again, as right after the commit.
//!
//! Commit points: the last close by the process that opened the file for writing (not a forked
//! child, not a process killed by a signal, not while it still holds another descriptor of it),
//! an fsync through a descriptor opened for writing, and a rename onto a plain name while nobody
//! has the file open for writing. Never for a scratch name, never for an in-place edit before
//! its rename (a file created by a process that holds a read descriptor of another `incoming/`
//! file), never for a blocked file (a write failed, or its bytes may be torn by a power loss)
//! until it is rewritten from offset 0.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use log::debug;

use crate::format::rows::{Kept, LineCheck};
use crate::table::staging::{self, FileId};

use super::errno::{FsError, FsResult};

/// How long a committed name stays reachable (lookup, stat, chmod, utime, a rename onto its final
/// name) after its commit, unless created again sooner.
pub const GHOST_TTL: Duration = Duration::from_secs(5);

/// How long a commit point waits for the release of writer handles that no process holds any
/// more ([`crate::mount::view::TableView::await_released`]); a release in flight is normally served within
/// milliseconds, this bounds the wait for a writable mapping kept without a descriptor.
pub const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// The bytes of a staged file that has not been committed.
#[derive(Debug)]
pub(super) struct Bytes {
    /// Its id in `_staging/`.
    pub id: String,
    /// Its data file's identity; the descriptor is opened on demand and kept in a bounded pool
    /// ([`staging::Staging::data`], docs/MOUNT.md "Limits").
    pub ident: FileId,
    /// Bytes in the data file.
    pub len: u64,
    /// Why the last commit failed (shown as `NAME.error`).
    pub note: Option<String>,
    /// Why it must not be committed until rewritten from offset 0 (a failed write, a torn file).
    pub blocked: Option<String>,
    /// Streaming validation of sequential writes; `None` once writes are not sequential.
    pub check: Option<Stream>,
    /// The last refusal of these bytes by validation, kept until they change: a close, fsync
    /// or rename of an unchanged refused file answers it again without reading the file.
    pub verdict: Option<Verdict>,
    /// The processes that wrote these bytes (each once). The re-save rule (docs/MOUNT.md
    /// "Re-saves") holds only for bytes the committing process wrote alone: a batch that two
    /// processes wrote (an appender joining a writer that truncated the name) is a plain append, so
    /// that no process's later save replaces rows another process's close reported saved.
    pub wrote: Vec<Option<u32>>,
    /// Some of these bytes came through an `O_APPEND` handle: an appender adds rows, it never
    /// saves the whole file, so its commit is never a re-save and never makes one possible.
    pub appended: bool,
}

/// Why validation refused a staged file's bytes, and what exactly it validated.
#[derive(Debug, Clone)]
pub(super) struct Verdict {
    /// The bytes validated: `from..len` of the data file.
    pub(super) from: u64,
    pub(super) len: u64,
    /// The schema they were validated against (a schema change may make them valid).
    pub(super) schema: crate::format::schema::Schema,
    /// The refusal ([`crate::error::Error::BadInput`]'s fields but the file's name, which a rename
    /// changes).
    pub(super) line: u64,
    pub(super) column: String,
    pub(super) reason: String,
}

impl Verdict {
    pub(super) fn error(&self, source: &str) -> crate::error::Error {
        crate::error::Error::BadInput {
            file: source.to_string(),
            line: self.line,
            column: self.column.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// A staged file written sequentially so far: each complete line validated as it arrives, so
/// the commit only finishes the tail and links the rows into the table (no second pass over
/// the bytes). While every row is its own canonical form, the data file itself is the table's
/// data file and no rows are written anywhere else; from the first row that is not, the
/// canonical rows are kept in `_staging/<id>.canon` (which starts with a kernel copy of the rows
/// before it).
#[derive(Debug)]
pub(super) struct Stream {
    pub(super) check: LineCheck,
    /// `_staging/<id>.canon`'s identity, from the first row that is not its own canonical form
    /// on (its descriptor lives in the staging pool like the data file's).
    pub(super) canon: Option<FileId>,
    /// Bytes written to `<id>.canon`.
    pub(super) canon_len: u64,
    /// Writing the canonical rows failed: the commit canonicalises the staged bytes instead.
    pub(super) canon_failed: bool,
    /// Bytes of the file the commit will link (the data file, or `<id>.canon` once there is
    /// one) whose writeback was started ([`staging::start_writeback`]).
    pub(super) written_back: u64,
    /// Hash of the bytes fed (for re-save detection).
    pub(super) hash: StreamHash,
}

/// Start the writeback of a streamed file's rows every this many bytes, so that the fsync of
/// its commit only waits for the last ones (docs/MOUNT.md "One pass over the bytes, written once").
pub(super) const WRITEBACK_STEP: u64 = 1 << 20;

impl Stream {
    pub(super) fn new(schema: crate::format::schema::Schema, max_line_bytes: usize) -> Stream {
        Stream {
            check: LineCheck::new(schema).with_max_line_bytes(max_line_bytes),
            canon: None,
            canon_len: 0,
            canon_failed: false,
            written_back: 0,
            hash: Default::default(),
        }
    }

    /// Keep the canonical rows of what was just fed (`kept`, `rows`): nothing while the data
    /// file `data` is its own canonical rows, else append them to `<id>.canon` (created with the
    /// rows before them the first time). On failure fall back to canonicalising at commit.
    pub(super) fn keep(&mut self, staging: &staging::Staging, id: &str, data: &File, kept: Kept, rows: &[u8]) {
        if self.canon_failed {
            return;
        }
        let prefix = match kept {
            Kept::Same => {
                let len = self.check.stats_bytes();
                if len >= self.written_back + WRITEBACK_STEP {
                    staging::start_writeback(data, self.written_back, len - self.written_back);
                    self.written_back = len;
                }
                return;
            }
            Kept::Rows { prefix } => prefix,
        };
        if rows.is_empty() && (prefix == 0 || self.canon.is_some()) {
            return;
        }
        let written = (|| -> crate::error::Result<Arc<File>> {
            let ident = match self.canon {
                Some(i) => i,
                None => {
                    self.written_back = 0;
                    self.canon_len = prefix;
                    *self.canon.insert(staging.create_canon_from(id, data, prefix)?)
                }
            };
            let canon = staging.canon(id, ident)?;
            canon
                .write_all_at(rows, self.canon_len)
                .map_err(|e| crate::error::Error::io("write", staging.dir().join(format!("{id}.canon")), e))?;
            self.canon_len += rows.len() as u64;
            Ok(canon)
        })();
        match written {
            Ok(canon) => {
                if self.canon_len >= self.written_back + WRITEBACK_STEP {
                    staging::start_writeback(&canon, self.written_back, self.canon_len - self.written_back);
                    self.written_back = self.canon_len;
                }
            }
            Err(e) => {
                debug!("_staging/{id}.canon: {e}; the commit canonicalises the staged bytes instead");
                self.canon_failed = true;
                self.canon = None;
                let _ = staging.remove_canon(id);
            }
        }
    }
}

impl Bytes {
    /// The data file's descriptor, from the staging pool (opened again beneath the table and
    /// checked to be the same file when the pool had closed it).
    pub(super) fn data(&self, staging: &staging::Staging) -> FsResult<Arc<File>> {
        Ok(staging.data(&self.id, self.ident)?)
    }
}

/// Where a staged file is in its life.
#[derive(Debug)]
pub(super) enum State {
    /// Listed under its name in `incoming/`.
    Listed(Bytes),
    /// Its name was created again by another writer while this one still had it open: not
    /// listed, committed at this writer's close like a listed file.
    Detached(Bytes),
    /// Committed: the name stays reachable (not listed) until `until`, or until created again.
    Committed {
        /// Until when lookups of the name find it.
        until: Instant,
        /// The commit was published but its durability is unknown ([`crate::error::Error::NotDurable`]):
        /// shown as `NAME.error` (and the name stays reachable) until `rm NAME.error` or the
        /// name is created again.
        note: Option<String>,
    },
    /// Removed by `rm` or replaced by a rename; open descriptors keep their bytes (never
    /// committed).
    Removed(Option<Arc<File>>),
}

/// A handle with write access to a batch, from its open until its `release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Writer {
    /// The handle.
    pub fh: u64,
    /// The process that opened it.
    pub tgid: Option<u32>,
    /// Its opener's last close (`flush`, not killed, no other descriptor of the file left) was
    /// seen: it writes no more, and only its `release` is still on its way. A commit point
    /// counts it as gone at once instead of waiting for that release (docs/MOUNT.md "What counts as
    /// open"): two writers of one batch closing at the same time each waited for the other's
    /// release, which the kernel sends only after that other close is answered, so both gave up
    /// after [`RELEASE_WAIT`], committed nothing and answered 0.
    pub closed: bool,
}

/// The bytes of the last batch a close or rename committed, kept readable while the name
/// lingers (docs/MOUNT.md "After the commit the name lingers"): `stat` shows them, so reads give
/// them. Their descriptor is in the staging pool ([`staging::Staging::keep_committed`]).
#[derive(Debug, Clone)]
pub(super) struct KeptBatch {
    /// The staging id the batch had.
    pub id: String,
    /// Its logical offset in the file (the committed bytes before it).
    pub start: u64,
    /// Its length.
    pub len: u64,
}

/// How many committed batches of one name stay readable while it lingers (docs/MOUNT.md "After
/// the commit the name lingers"): a name appended to (`>>`) more often keeps its latest ones.
pub(super) const MAX_KEPT_BATCHES: usize = 64;

/// One file of `incoming/`.
#[derive(Debug)]
pub(super) struct Staged {
    /// Its name.
    pub name: String,
    /// Its state.
    pub state: State,
    /// Logical offset of the data file's first byte (bytes before it were committed).
    pub base: u64,
    /// Open handles.
    pub handles: u32,
    /// Open handles with write access (one entry per handle, until its `release`).
    pub writers: Vec<Writer>,
    /// Modification time shown in stat.
    pub mtime: SystemTime,
    /// Permission bits shown in stat (`chmod` by the owner is honoured).
    pub perm: u16,
    /// An in-place edit: written by a process that held a read descriptor of another
    /// `incoming/` file; its commit point is its rename.
    pub in_place: bool,
    /// Serialises writes, truncates and commits of this file.
    pub io: Arc<Mutex<()>>,
    /// The batches committed by a close or rename since the last `fsync` commit (at most
    /// [`MAX_KEPT_BATCHES`], oldest first), readable below `base`.
    pub kept: Vec<KeptBatch>,
    /// A scratch file of the version folders: the version whose folder it was created in (it
    /// is seen in that folder and every later one, docs/MOUNT.md "Editing latest/data.jsonl").
    pub since: Option<u64>,
    /// A scratch file of the version folders: the version of `data.jsonl` its last writer had
    /// opened for reading when it closed it (the base of its rename onto `data.jsonl`).
    pub read_base: Option<u64>,
}

impl Staged {
    pub(super) fn bytes(&self) -> Option<&Bytes> {
        match &self.state {
            State::Listed(b) | State::Detached(b) => Some(b),
            State::Committed { .. } | State::Removed(_) => None,
        }
    }

    pub(super) fn bytes_mut(&mut self) -> Option<&mut Bytes> {
        match &mut self.state {
            State::Listed(b) | State::Detached(b) => Some(b),
            State::Committed { .. } | State::Removed(_) => None,
        }
    }

    /// The note shown as `NAME.error`: why a commit failed, or that a commit's durability is
    /// unknown.
    pub(super) fn note(&self) -> Option<&String> {
        match &self.state {
            State::Listed(b) | State::Detached(b) => b.note.as_ref(),
            State::Committed { note, .. } => note.as_ref(),
            State::Removed(_) => None,
        }
    }

    pub(super) fn size(&self) -> u64 {
        self.base + self.bytes().map_or(0, |b| b.len)
    }

    /// Writer handles whose opener has not closed them yet (see [`Writer::closed`]).
    pub(super) fn live_writers(&self) -> impl Iterator<Item = &Writer> {
        self.writers.iter().filter(|w| !w.closed)
    }

    /// Its data file's descriptor (opened again if the pool closed it; a removed file keeps the
    /// descriptor its open handles read).
    pub(super) fn file(&self, staging: &staging::Staging) -> FsResult<Option<Arc<File>>> {
        match &self.state {
            State::Listed(b) | State::Detached(b) => Ok(Some(b.data(staging)?)),
            State::Removed(f) => Ok(f.clone()),
            State::Committed { .. } => Ok(None),
        }
    }
}

/// What an entry of [`Incoming::due`] is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Due {
    /// A committed name (by the file's sequence number), reachable until its `until`.
    Name(u64),
    /// The re-save record ([`Recent`]) of a name.
    Recent(String),
}

/// The last whole-file commit of a name, to recognise a re-save by the same process.
#[derive(Debug, Clone)]
pub(super) struct Recent {
    pub(super) tgid: u32,
    pub(super) len: u64,
    pub(super) hash: u64,
    pub(super) version: u64,
    pub(super) until: Instant,
}

/// All of `incoming/`.
#[derive(Debug, Default)]
pub(super) struct Incoming {
    /// Listed and reachable-committed names.
    pub names: BTreeMap<String, u64>,
    /// Every file, by sequence number (its inode is derived from it).
    pub files: HashMap<u64, Staged>,
    pub(super) recent: HashMap<String, Recent>,
    /// When a committed name or a re-save record may be due to expire, soonest first. An entry
    /// is a hint, checked against the state when due (the name may have been written again,
    /// renamed or given a later time since), so that [`Incoming::sweep`] costs the entries due,
    /// not a pass over every name: a table taking hundreds of commits a second keeps thousands
    /// of committed names reachable, and every lookup, create and commit sweeps.
    pub(super) due: BinaryHeap<Reverse<(Instant, Due)>>,
    pub next_seq: u64,
    /// The directory's modification time.
    pub mtime: Option<SystemTime>,
}

impl Incoming {
    pub(super) fn get(&mut self, seq: u64) -> FsResult<&mut Staged> {
        self.files.get_mut(&seq).ok_or(FsError::NotFound)
    }

    /// Take `seq`'s name away from it (it keeps its state otherwise).
    pub(super) fn unname(&mut self, seq: u64) {
        if let Some(e) = self.files.get(&seq)
            && self.names.get(&e.name) == Some(&seq)
        {
            self.names.remove(&e.name);
        }
        self.mtime = Some(SystemTime::now());
    }

    /// Whether a process other than `tgid` has `seq` open for writing. A handle its opener
    /// closed counts until its release: its close may not have committed yet (an open that
    /// truncated the batch in place meanwhile would empty the bytes that close then reports
    /// saved).
    pub(super) fn written_by_other(&self, seq: u64, tgid: Option<u32>) -> bool {
        self.files
            .get(&seq)
            .is_some_and(|e| e.writers.iter().any(|w| w.tgid.is_none() || w.tgid != tgid))
    }

    /// Give `seq`'s name to a newer file: a listed file becomes detached (its writer still
    /// commits it at its close).
    pub(super) fn detach(&mut self, seq: u64) {
        self.unname(seq);
        if let Some(e) = self.files.get_mut(&seq) {
            e.state = match std::mem::replace(&mut e.state, State::Removed(None)) {
                State::Listed(b) => State::Detached(b),
                other => other,
            };
        }
    }

    /// Forget a file nobody can reach any more.
    pub(super) fn maybe_drop(&mut self, seq: u64) {
        let Some(e) = self.files.get(&seq) else { return };
        let named = self.names.get(&e.name) == Some(&seq);
        let gone = match e.state {
            State::Listed(_) | State::Detached(_) => false,
            State::Committed { .. } => !named,
            State::Removed(_) => true,
        };
        if gone && e.handles == 0 {
            self.files.remove(&seq);
        }
    }

    /// Committed names whose time is up stop being reachable (those without a note: a
    /// committed name with a note stays until `rm NAME.error`), and re-save records whose time
    /// is up are forgotten. Returns the staging ids of the [`KeptBatch`] batches of the names that
    /// stopped being reachable (their descriptors can go).
    pub(super) fn sweep(&mut self, now: Instant) -> Vec<String> {
        let mut unkept = Vec::new();
        while self.due.peek().is_some_and(|Reverse((at, _))| *at <= now) {
            let Some(Reverse((_, what))) = self.due.pop() else {
                break;
            };
            match what {
                Due::Name(seq) => {
                    let expired = self.files.get(&seq).is_some_and(|e| {
                        self.names.get(&e.name) == Some(&seq)
                            && matches!(&e.state, State::Committed { until, note: None } if *until <= now)
                    });
                    if expired {
                        if let Some(e) = self.files.get_mut(&seq) {
                            unkept.extend(e.kept.drain(..).map(|k| k.id));
                        }
                        self.unname(seq);
                        self.maybe_drop(seq);
                    }
                }
                Due::Recent(name) => {
                    if self.recent.get(&name).is_some_and(|r| r.until <= now) {
                        self.recent.remove(&name);
                    }
                }
            }
        }
        unkept
    }

    /// Note that `what` may expire at `at` (see [`Incoming::due`]); every change of a
    /// committed name's or a re-save record's time calls this.
    pub(super) fn due_at(&mut self, at: Instant, what: Due) {
        self.due.push(Reverse((at, what)));
    }

    pub(super) fn insert(&mut self, name: &str, state: State, perm: u16) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.names.insert(name.to_string(), seq);
        self.mtime = Some(SystemTime::now());
        self.files.insert(
            seq,
            Staged {
                name: name.to_string(),
                state,
                base: 0,
                handles: 0,
                writers: Vec::new(),
                mtime: SystemTime::now(),
                perm,
                in_place: false,
                io: Arc::new(Mutex::new(())),
                kept: Vec::new(),
                since: None,
                read_base: None,
            },
        );
        seq
    }
}

thread_local! {
    /// Each worker thread's buffer for the canonical rows of one write.
    pub(super) static ROWS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The largest rows buffer a worker thread keeps between writes (a write is at most 1 MiB).
pub(super) const MAX_KEPT_ROWS: usize = 4 << 20;

/// A 64-bit hash of a byte stream that does not depend on how the stream was cut into writes or
/// reads: it recognises a re-save that only extends the previous one ([`Recent`]). Four
/// independent multiply-rotate lanes over 32-byte blocks, so hashing keeps up with memory
/// (SipHash took 5% of the daemon's time per `cp`); not a defence against a chosen collision, which
/// would only let a writer turn its own re-save into an append of its own rows.
#[derive(Debug, Clone)]
pub(super) struct StreamHash {
    pub(super) lanes: [u64; 4],
    pub(super) tail: [u8; 32],
    pub(super) tail_len: usize,
    pub(super) len: u64,
}

pub(super) const HASH_K: [u64; 4] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0x27D4_EB2F_1656_67C5,
];

impl Default for StreamHash {
    fn default() -> Self {
        StreamHash {
            lanes: HASH_K,
            tail: [0; 32],
            tail_len: 0,
            len: 0,
        }
    }
}

impl StreamHash {
    pub(super) fn block(&mut self, b: &[u8; 32]) {
        for (i, (lane, w)) in self.lanes.iter_mut().zip(b.chunks_exact(8)).enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            *lane = (*lane ^ u64::from_le_bytes(word))
                .wrapping_mul(HASH_K[i])
                .rotate_left(31);
        }
    }

    pub(super) fn write(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.tail_len > 0 {
            let n = (32 - self.tail_len).min(data.len());
            self.tail[self.tail_len..self.tail_len + n].copy_from_slice(&data[..n]);
            self.tail_len += n;
            data = &data[n..];
            if self.tail_len < 32 {
                return;
            }
            let t = self.tail;
            self.block(&t);
            self.tail_len = 0;
        }
        let mut blocks = data.chunks_exact(32);
        for b in &mut blocks {
            let mut block = [0u8; 32];
            block.copy_from_slice(b);
            self.block(&block);
        }
        let rest = blocks.remainder();
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_len = rest.len();
    }

    pub(super) fn finish(&self) -> u64 {
        let mut h = self.clone();
        let mut last = [0u8; 32];
        last[..h.tail_len].copy_from_slice(&h.tail[..h.tail_len]);
        h.block(&last);
        // splitmix64's finaliser over the lanes and the length.
        let mut x = h.lanes.iter().fold(h.len, |acc, l| acc.rotate_left(17) ^ l);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }
}

/// `Read` over a file by positional reads, so a commit reads a staged file through the
/// descriptor the writer used (no reopen; works after the file was unlinked). Hashes what it
/// reads.
pub(super) struct PreadReader {
    pub(super) file: Arc<File>,
    pub(super) pos: u64,
    pub(super) end: u64,
    pub(super) hash: StreamHash,
}

impl PreadReader {
    pub(super) fn new(file: Arc<File>, pos: u64, end: u64) -> PreadReader {
        PreadReader {
            file,
            pos,
            end,
            hash: Default::default(),
        }
    }
}

impl Read for PreadReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.end || buf.is_empty() {
            return Ok(0);
        }
        let n = buf
            .len()
            .min(usize::try_from(self.end - self.pos).unwrap_or(usize::MAX));
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the staged file is shorter than what was written to it",
            ));
        }
        self.hash.write(&buf[..got]);
        self.pos += got as u64;
        Ok(got)
    }
}

/// Hash of the first `len` bytes of `file`, as [`PreadReader`] hashes them.
pub(super) fn hash_prefix(file: &Arc<File>, len: u64) -> io::Result<u64> {
    let mut r = PreadReader::new(file.clone(), 0, len);
    io::copy(&mut r, &mut io::sink())?;
    Ok(r.hash.finish())
}

#[cfg(test)]
mod tests {
    use super::{Due, Incoming, Recent, State, StreamHash};
    use std::time::{Duration, Instant};

    /// A committed name stays reachable until its time is up and no longer, whatever order the
    /// times were noted in; a time made later since it was noted (a rename) or a name written
    /// again wins over the stale entry; a committed name with a note is never swept; re-save
    /// records expire by their own time.
    #[test]
    fn sweep_expires_what_is_due_and_nothing_else() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut inc = Incoming::default();
        let committed = |until, note: Option<&str>| State::Committed {
            until,
            note: note.map(String::from),
        };
        let a = inc.insert("a", committed(at(100), None), 0o644);
        inc.due_at(at(100), Due::Name(a));
        // Noted out of order: due before `a`.
        let b = inc.insert("b", committed(at(50), None), 0o644);
        inc.due_at(at(50), Due::Name(b));
        // Given a later time after it was noted (as a rename does).
        let c = inc.insert("c", committed(at(200), None), 0o644);
        inc.due_at(at(60), Due::Name(c));
        inc.due_at(at(200), Due::Name(c));
        // With a note: stays.
        let d = inc.insert("d", committed(at(10), Some("durability unknown")), 0o644);
        inc.due_at(at(10), Due::Name(d));
        // No longer committed since it was noted (written again, or removed): stays named.
        let e = inc.insert("e", State::Removed(None), 0o644);
        inc.due_at(at(20), Due::Name(e));
        inc.recent.insert(
            "a".into(),
            Recent {
                tgid: 1,
                len: 1,
                hash: 0,
                version: 1,
                until: at(70),
            },
        );
        inc.due_at(at(70), Due::Recent("a".into()));
        let names = |inc: &Incoming| inc.names.keys().cloned().collect::<Vec<_>>();

        inc.sweep(at(0));
        assert_eq!(names(&inc), ["a", "b", "c", "d", "e"]);
        inc.sweep(at(55));
        assert_eq!(names(&inc), ["a", "c", "d", "e"]);
        assert!(
            !inc.files.contains_key(&b),
            "an unreachable committed file is forgotten"
        );
        inc.sweep(at(65));
        assert_eq!(names(&inc), ["a", "c", "d", "e"], "c's stale entry must not expire it");
        assert!(inc.recent.contains_key("a"));
        inc.sweep(at(100));
        assert_eq!(names(&inc), ["c", "d", "e"]);
        assert!(!inc.recent.contains_key("a"));
        inc.sweep(at(199));
        assert_eq!(names(&inc), ["c", "d", "e"]);
        inc.sweep(at(200));
        assert_eq!(names(&inc), ["d", "e"]);
        assert!(inc.due.is_empty());
    }

    /// The hash of a stream does not depend on how it was cut into writes or reads, and tells
    /// streams apart by content, order and length.
    #[test]
    fn stream_hash_is_independent_of_the_cuts() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let whole = {
            let mut h = StreamHash::default();
            h.write(&data);
            h.finish()
        };
        for cuts in [&[1usize, 31, 32, 33][..], &[7, 64, 100, 5000], &[32; 50]] {
            let mut h = StreamHash::default();
            let mut rest = &data[..];
            for &c in cuts.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let n = c.min(rest.len());
                h.write(&rest[..n]);
                rest = &rest[n..];
            }
            assert_eq!(h.finish(), whole, "{cuts:?}");
        }
        let hash = |d: &[u8]| {
            let mut h = StreamHash::default();
            h.write(d);
            h.finish()
        };
        let mut swapped = data.clone();
        swapped.swap(100, 5000);
        assert_ne!(hash(&swapped), whole);
        assert_ne!(hash(&data[..9_999]), whole);
        assert_ne!(hash(&[0; 64]), hash(&[0; 65]));
        assert_ne!(hash(b""), hash(&[0]));
    }
}
