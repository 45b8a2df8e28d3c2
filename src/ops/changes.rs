//! The change feed: Delta's Change Data Feed (PROTOCOL "Add CDC File", reader requirements)
//! computed from the log, as one byte stream that only grows: `mnt/changes.jsonl` and
//! `tinydelta changes`. See docs/FORMAT.md "The change feed" and docs/MOUNT.md "Following a table:
//! `changes.jsonl`".
//!
//! For every version in order, first the rows of the files it removed (`"_change_type":
//! "delete"`), then the rows of the files it added (`"insert"`). A file removed and added in one
//! version, an add of a path that is already live, a remove of a path that is not live, and any
//! action with `dataChange: false` give no rows. Each row is the stored line with its closing
//! `}` replaced by
//!
//! ```text
//! ,"_change_type":"insert","_commit_version":12,"_commit_timestamp":"2026-11-30T19:52:27.123Z"}
//! ```
//!
//! ("insert" and "delete" have the same length). A version with change data files (`cdc`
//! actions: tinydelta's DELETE, UPDATE and MERGE) is read from them alone: their rows already
//! carry `_change_type` (`update_preimage`, `update_postimage` too), so only the version and
//! time are added. Either way a file of `rows` rows and `size` bytes is
//! `size + rows * (suffix length - 1)` bytes of feed: the feed's size is known from the log
//! alone (plus one count of a file whose `add.stats` records no `numRecords`), and the bytes at
//! an offset never change. The log is read only through [`Table::read_commit`] (the log segment
//! of `src/log/segment.rs` decides which versions exist); data files only through
//! [`Table::open_data_file`], which checks the recorded size.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::util::time::rfc3339_ms;
use crate::error::{Error, Result};
use crate::table::Table;

/// `_change_type` of a part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// Rows of a file that left the table.
    Delete,
    /// Rows of a file that joined the table.
    Insert,
    /// Rows of a change data file (PROTOCOL "Add CDC File"), each carrying its own
    /// `_change_type` (`delete`, `insert`, `update_preimage`, `update_postimage`).
    Recorded,
}

impl ChangeType {
    /// The column value: `delete` or `insert` (both 6 bytes); `None` for a change data file's
    /// rows, which carry their own.
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            ChangeType::Delete => Some("delete"),
            ChangeType::Insert => Some("insert"),
            ChangeType::Recorded => None,
        }
    }
}

/// One data file's rows in the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangePart {
    /// The version whose commit added or removed the file.
    pub version: u64,
    /// Delete or insert.
    pub change: ChangeType,
    /// The data file, relative to the table folder (decoded).
    pub path: String,
    /// The data file's size in bytes, as its `add.size` records.
    pub size: u64,
    /// Its rows (`numRecords`, or counted once when not recorded).
    pub rows: u64,
    /// The commit's time, ms since the epoch (docs/FORMAT.md, "Commit times").
    pub timestamp_ms: i64,
    /// Offset of the part's first byte in the feed.
    pub start: u64,
    /// For a Parquet data file: the file as the log names it and the schema its rows are
    /// written under; `size` is then the length of its converted rows (docs/FORMAT.md, "Parquet
    /// data files"), read from the cache ([`Table::converted`]).
    pub parquet: Option<Arc<(crate::log::snapshot::FileEntry, crate::format::schema::Schema)>>,
}

impl ChangePart {
    /// The bytes that replace each row's closing `}`.
    pub fn suffix(&self) -> String {
        let change = match self.change.as_str() {
            Some(c) => format!(",\"_change_type\":\"{c}\""),
            None => String::new(),
        };
        format!(
            "{change},\"_commit_version\":{},\"_commit_timestamp\":\"{}\"}}",
            self.version,
            rfc3339_ms(self.timestamp_ms).unwrap_or_default()
        )
    }

    /// Bytes each row grows by.
    fn extra(&self) -> u64 {
        self.suffix().len() as u64 - 1
    }

    /// The part's length in the feed, bytes (`None` on overflow).
    #[allow(clippy::len_without_is_empty)] // nothing asks whether it is empty
    pub fn len(&self) -> Option<u64> {
        self.rows.checked_mul(self.extra())?.checked_add(self.size)
    }
}

/// What the feed knows of a live file: size and rows (`None`: not recorded, not yet counted).
#[derive(Debug, Clone)]
struct Live {
    size: u64,
    rows: Option<u64>,
    /// A Parquet data file as the log names it (its rows are converted to be shown).
    parquet: Option<Arc<crate::log::snapshot::FileEntry>>,
}

impl Live {
    fn of(f: &crate::log::snapshot::FileEntry) -> Live {
        Live {
            size: f.size,
            rows: f.has_stats.then_some(f.num_records),
            parquet: f.converted().then(|| Arc::new(f.clone())),
        }
    }
}

/// The feed's index: its parts, in feed order, from the log. Built incrementally: [`ChangeFeed::
/// extend`] reads only the commits past the last one indexed.
#[derive(Debug, Clone)]
pub struct ChangeFeed {
    parts: Vec<ChangePart>,
    /// The first version the feed covers.
    first: u64,
    /// Commit times of versions `first..first + times.len()`, ms since the epoch, as time
    /// travel uses them ([`Table::commit_times`]).
    times: Vec<i64>,
    /// The time of the version before `first` when the feed starts after the segment's first
    /// version (`--from-version`): the times go on from it.
    before: Option<i64>,
    live: HashMap<String, Live>,
    len: u64,
    /// The schema in force at the last version indexed (Parquet rows are converted under it).
    schema: Option<crate::format::schema::Schema>,
}

impl ChangeFeed {
    /// An empty feed that starts at `from` (default: the log segment's first version). When
    /// `from` is later, the files live before it are taken from the snapshot of `from - 1`
    /// (so their removal gives delete rows). Errors: as [`Table::snapshot`].
    pub fn new(table: &Table, from: Option<u64>) -> Result<ChangeFeed> {
        let seg_first = table.segment()?.first;
        let from = from.unwrap_or(seg_first).max(seg_first);
        let mut live = HashMap::new();
        let mut times = Vec::new();
        let mut first = from;
        let mut before = None;
        if from > 0 {
            // The state before `from`: a checkpoint start (old commits cleaned up) or --from-version.
            let base = if from == seg_first { from } else { from - 1 };
            let snap = table.snapshot(base)?;
            for f in &snap.files {
                live.insert(f.path.to_string(), Live::of(f));
            }
            if from == seg_first {
                // The checkpoint's own version has no commit to read: the feed starts after it.
                times.push(snap.timestamp);
                first = from;
            } else {
                before = table.commit_times(from - 1)?.1.last().copied();
            }
        }
        Ok(ChangeFeed {
            parts: Vec::new(),
            first,
            times,
            before,
            live,
            len: 0,
            schema: None,
        })
    }

    /// The feed's length in bytes.
    #[allow(clippy::len_without_is_empty)] // nothing asks whether it is empty
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The parts, in feed order.
    pub fn parts(&self) -> &[ChangePart] {
        &self.parts
    }

    /// The first version indexed.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The next version to index (one past the newest indexed).
    pub fn next_version(&self) -> u64 {
        self.first + self.times.len() as u64
    }

    /// Commit times, ms since the epoch, of versions `first()..next_version()`.
    pub fn times(&self) -> &[i64] {
        &self.times
    }

    /// The index of the part holding feed offset `offset`, if any.
    pub fn part_at(&self, offset: u64) -> Option<usize> {
        if offset >= self.len {
            return None;
        }
        let i = self.parts.partition_point(|p| p.start <= offset);
        i.checked_sub(1)
    }

    /// Index versions up to `through` (inclusive), reading each commit once. On an error
    /// nothing of the failing version is indexed (the feed stays whole up to the version before).
    /// Errors: as [`Table::read_commit`]; [`Error::ChangesCleanedUp`] when the commit of the next
    /// version was cleaned up; [`Error::Corrupt`] for a commit time outside the
    /// years 0000-9999 or a file whose rows cannot be counted.
    pub fn extend(&mut self, table: &Table, through: u64) -> Result<()> {
        while self.next_version() <= through {
            let v = self.next_version();
            self.index_version(table, v).map_err(|e| match e {
                Error::VersionNotFound { version, first, .. } if version < first => Error::ChangesCleanedUp {
                    table: table.root().to_path_buf(),
                    version,
                    first,
                },
                e => e,
            })?;
        }
        Ok(())
    }

    fn index_version(&mut self, table: &Table, v: u64) -> Result<()> {
        let c = table.read_commit(v)?;
        let info = c.info.clone().unwrap_or_default();
        // docs/FORMAT.md, "Commit times": a time not after the previous one (or a commit
        // without one: its file's mtime) is raised past it, as time travel takes it.
        let previous = self.times.last().copied().or(self.before);
        let ts = match (info.timestamp_recorded, previous) {
            (true, p) => crate::table::monotonic_time(info.timestamp, p),
            (false, Some(p)) => crate::table::monotonic_time(c.mtime_ms, Some(p)),
            (false, None) => table.commit_info(v)?.timestamp,
        };
        if rfc3339_ms(ts).is_none() {
            return Err(Error::Corrupt {
                path: table.commit_path(v),
                reason: format!("version {v}'s commit time ({ts} ms) is outside the years 0000-9999"),
            });
        }
        let adds: HashSet<&str> = c
            .actions
            .iter()
            .filter_map(|a| a.add.as_ref())
            .map(|a| a.path.as_str())
            .collect();
        let removes: HashSet<&str> = c
            .actions
            .iter()
            .filter_map(|a| a.remove.as_ref())
            .map(|r| r.path.as_str())
            .collect();
        // Changes to the live set are collected and applied only once the version is indexed
        // whole, so a failure leaves the feed as it was (no copy of the live set per version).
        let mut gone: HashSet<&str> = HashSet::new();
        let mut came: HashMap<&str, Live> = HashMap::new();
        let mut deletes = Vec::new();
        let mut inserts = Vec::new();
        for r in c.actions.iter().filter_map(|a| a.remove.as_ref()) {
            let p = r.path.as_str();
            let Some(was) = came
                .remove(p)
                .or_else(|| self.live.get(p).cloned().filter(|_| !gone.contains(p)))
            else {
                continue;
            };
            gone.insert(p);
            if r.data_change && !adds.contains(p) {
                deletes.push((r.path.clone(), was));
            }
        }
        for a in c.actions.iter().filter_map(|a| a.add.as_ref()) {
            let p = a.path.as_str();
            // A file removed and added again with another deletion vector (Spark's DELETE,
            // UPDATE, MERGE): the rows the new DV deletes are delete rows, which this feed,
            // made of whole files, does not compute. Refused, never an empty answer
            // (docs/FORMAT.md "The change feed").
            let dv_of = |l: Option<&Live>| l.and_then(|l| l.parquet.as_ref()).and_then(|f| f.dv_id());
            let new_dv = a.deletion_vector.as_ref().map(|d| d.unique_id());
            if a.data_change && removes.contains(p) && new_dv != dv_of(self.live.get(p)) {
                return Err(Error::Unsupported {
                    path: table.commit_path(v),
                    what: format!(
                        "version {v} deletes rows of {} through a deletion vector; the change feed of rows \
                         deleted that way is not computed",
                        crate::util::quote::quoted(p)
                    ),
                });
            }
            let now = Live::of(&crate::log::snapshot::FileEntry::from_add(a, v));
            let was_live = came.insert(p, now.clone()).is_some() || (self.live.contains_key(p) && !gone.contains(p));
            if a.data_change && !was_live && !removes.contains(p) {
                inserts.push((a.path.clone(), now));
            }
        }
        // PROTOCOL "Add CDC File": a version with change data files is read from them alone.
        // tinydelta reads its own (JSONL rows); another writer's Parquet ones are not read, and
        // that version's changes come from its adds and removes as for any other.
        let cdc: Vec<(String, Live)> = c
            .actions
            .iter()
            .filter_map(|a| a.cdc.as_ref())
            .map(|f| {
                let live = Live {
                    size: f.size,
                    rows: f.num_records(),
                    parquet: None,
                };
                (f.path.clone(), live)
            })
            .collect();
        let lists = if !cdc.is_empty() && cdc.iter().all(|(p, _)| p.ends_with(".jsonl")) {
            vec![(ChangeType::Recorded, cdc)]
        } else {
            vec![(ChangeType::Delete, deletes), (ChangeType::Insert, inserts)]
        };
        let mut counted: HashMap<String, u64> = HashMap::new();
        let mut parts = Vec::new();
        let mut len = self.len;
        for (change, list) in lists {
            for (path, f) in list {
                // A Parquet file's part is its converted rows, under the schema in force now.
                let (size, parquet) = match &f.parquet {
                    Some(src) => {
                        let schema = self.schema_at(table, v, &c)?;
                        let conv = table.converted(src, &schema)?;
                        (conv.len, Some(Arc::new((src.as_ref().clone(), schema))))
                    }
                    None => (f.size, None),
                };
                let rows = match f.rows {
                    Some(n) => n,
                    None => {
                        let n = match &parquet {
                            Some(p) => {
                                let (file, _) = table.open_rows(&p.0, &p.1)?;
                                crate::format::rows::count_rows(file, &table.root().join(&path))?
                            }
                            None => count_rows(table, &path, f.size)?,
                        };
                        counted.insert(path.clone(), n);
                        n
                    }
                };
                if rows == 0 && size == 0 {
                    continue;
                }
                let part = ChangePart {
                    version: v,
                    change,
                    path,
                    size,
                    rows,
                    timestamp_ms: ts,
                    start: len,
                    parquet,
                };
                let overflow = || Error::Corrupt {
                    path: table.root().join(&part.path),
                    reason: format!("version {v}: the change feed would exceed 2^64 bytes"),
                };
                len = part.len().and_then(|l| len.checked_add(l)).ok_or_else(overflow)?;
                parts.push(part);
            }
        }
        for p in gone {
            self.live.remove(p);
        }
        if let Some(m) = c.actions.iter().rev().find_map(|a| a.metadata.as_ref()) {
            self.schema = Some(parse_schema(table, v, m)?);
        }
        for (p, mut l) in came {
            if l.rows.is_none() {
                l.rows = counted.get(p).copied();
            }
            self.live.insert(p.to_string(), l);
        }
        self.parts.extend(parts);
        self.len = len;
        self.times.push(ts);
        Ok(())
    }
}

impl ChangeFeed {
    /// The schema in force at version `v` (whose commit is `c`): its own `metaData`, else the
    /// one last indexed, else the snapshot's.
    fn schema_at(&mut self, table: &Table, v: u64, c: &crate::log::files::Commit) -> Result<crate::format::schema::Schema> {
        if let Some(m) = c.actions.iter().rev().find_map(|a| a.metadata.as_ref()) {
            return parse_schema(table, v, m);
        }
        if let Some(s) = &self.schema {
            return Ok(s.clone());
        }
        let s = table.snapshot(v)?.schema;
        self.schema = Some(s.clone());
        Ok(s)
    }
}

fn parse_schema(table: &Table, v: u64, m: &crate::format::actions::Metadata) -> Result<crate::format::schema::Schema> {
    if m.schema_string.is_empty() {
        return Err(Error::NoSchema {
            table: table.root().to_path_buf(),
            version: v,
        });
    }
    crate::format::schema::Schema::of_metadata(m)
        .map_err(|reason| crate::format::schema::Schema::refused(table.commit_path(v), reason))
}

/// Count the rows (newlines) of a data file whose `add.stats` records none.
fn count_rows(table: &Table, path: &str, size: u64) -> Result<u64> {
    let f = table.open_data_file(path, size)?;
    let full = table.root().join(path);
    let mut r = BufReader::with_capacity(256 << 10, f);
    let mut n = 0u64;
    loop {
        let buf = r.fill_buf().map_err(|e| Error::io("read", &full, e))?;
        if buf.is_empty() {
            break;
        }
        n += memchr::memchr_iter(b'\n', buf).count() as u64;
        let k = buf.len();
        r.consume(k);
    }
    Ok(n)
}

/// `Read` by positional reads from `pos`.
struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// A data file of a part, opened and checked ([`Table::open_data_file`]), with row marks for
/// reads at any feed offset: `(file offset of a row's start, that row's index)`, one about
/// every 64 KiB, found by reading the file once (which also checks its rows).
#[derive(Debug)]
pub struct PartReader {
    part: ChangePart,
    file: File,
    path: PathBuf,
    suffix: Vec<u8>,
    marks: Vec<(u64, u64)>,
}

const MARK_EVERY: u64 = 64 << 10;

impl PartReader {
    /// Open `part`'s data file and index its rows. Errors: as [`Table::open_data_file`];
    /// [`Error::Corrupt`] naming the file when its rows are not what the log records (another
    /// count than `numRecords`, a last line without newline, a line that is not `{...}`).
    pub fn open(table: &Table, part: &ChangePart) -> Result<PartReader> {
        let file = match &part.parquet {
            Some(p) => table.open_rows(&p.0, &p.1)?.0,
            None => table.open_data_file(&part.path, part.size)?,
        };
        let mut r = PartReader {
            path: table.root().join(&part.path),
            suffix: part.suffix().into_bytes(),
            part: part.clone(),
            file,
            marks: vec![(0, 0)],
        };
        r.index()?;
        Ok(r)
    }

    fn bad(&self, what: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            reason: format!(
                "{what} (version {} records {} rows of {} bytes; the change feed cannot show it)",
                self.part.version, self.part.rows, self.part.size
            ),
        }
    }

    fn index(&mut self) -> Result<()> {
        let mut r = BufReader::with_capacity(
            256 << 10,
            ReadAt {
                file: &self.file,
                pos: 0,
            },
        );
        let (mut off, mut row, mut last_mark) = (0u64, 0u64, 0u64);
        let mut marks = Vec::new();
        loop {
            let buf = r.fill_buf().map_err(|e| Error::io("read", &self.path, e))?;
            if buf.is_empty() {
                break;
            }
            let k = buf.len();
            for i in memchr::memchr_iter(b'\n', buf) {
                row += 1;
                let next = off + i as u64 + 1;
                if next - last_mark >= MARK_EVERY {
                    marks.push((next, row));
                    last_mark = next;
                }
            }
            if off + k as u64 == self.part.size && buf[k - 1] != b'\n' {
                return Err(self.bad("the last line has no newline".into()));
            }
            off += k as u64;
            r.consume(k);
        }
        if row != self.part.rows {
            return Err(self.bad(format!("the file holds {row} rows")));
        }
        self.marks.extend(marks);
        Ok(())
    }

    /// The part.
    #[cfg(test)]
    pub fn part(&self) -> &ChangePart {
        &self.part
    }

    /// Write one transformed row (`line` without its newline) into `out`.
    fn row(&self, line: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let Some((b'}', body)) = line.split_last() else {
            return Err(self.bad("a row does not end with '}'".into()));
        };
        if line.first() != Some(&b'{') {
            return Err(self.bad("a row does not start with '{'".into()));
        }
        // A change data file's row ends with its own `_change_type`, one of Delta's four, and
        // is one JSON object (docs/FORMAT.md "The change feed").
        if self.part.change == ChangeType::Recorded {
            let kinds = [
                crate::table::cdc::DELETE,
                crate::table::cdc::INSERT,
                crate::table::cdc::PREIMAGE,
                crate::table::cdc::POSTIMAGE,
            ];
            let ends_with_kind = kinds
                .iter()
                .any(|k| body.ends_with(format!("\"_change_type\":\"{k}\"").as_bytes()));
            if !ends_with_kind {
                return Err(self.bad("a change data row does not end with a _change_type of delete, insert, update_preimage or update_postimage".into()));
            }
            if serde_json::from_slice::<serde::de::IgnoredAny>(line).is_err() {
                return Err(self.bad("a change data row is not one JSON object".into()));
            }
        }
        out.extend_from_slice(body);
        if body[1..].iter().all(u8::is_ascii_whitespace) {
            // `{}`: no column before ours, so a space takes the comma's place (same length).
            out.push(b' ');
            out.extend_from_slice(&self.suffix[1..]);
        } else {
            out.extend_from_slice(&self.suffix);
        }
        out.push(b'\n');
        Ok(())
    }

    /// Append the part's bytes at `[offset, offset + len)` (offsets within the part) to `out`.
    pub fn read_range(&self, offset: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        let extra = self.suffix.len() as u64 - 1;
        let end = offset.saturating_add(len as u64).min(self.part.len().unwrap_or(0));
        if offset >= end {
            return Ok(());
        }
        // The last mark at or before `offset` (in feed terms).
        let i = self.marks.partition_point(|(o, r)| o + r * extra <= offset) - 1;
        let (file_off, row) = self.marks[i];
        let mut at = file_off + row * extra;
        let mut r = BufReader::with_capacity(
            (len + 4096).min(1 << 20),
            ReadAt {
                file: &self.file,
                pos: file_off,
            },
        );
        let mut line = Vec::new();
        let mut row_out = Vec::new();
        while at < end {
            line.clear();
            let n = r
                .read_until(b'\n', &mut line)
                .map_err(|e| Error::io("read", &self.path, e))?;
            if n == 0 || line.last() != Some(&b'\n') {
                return Err(self.bad("the file is shorter than its rows".into()));
            }
            line.pop();
            row_out.clear();
            self.row(&line, &mut row_out)?;
            let row_end = at + row_out.len() as u64;
            if row_end > offset {
                let from = offset.saturating_sub(at) as usize;
                let to = (end.min(row_end) - at) as usize;
                out.extend_from_slice(&row_out[from..to]);
            }
            at = row_end;
        }
        Ok(())
    }

    /// Write the whole part to `out`.
    pub fn write_all(&self, out: &mut (impl Write + ?Sized)) -> Result<()> {
        let mut r = BufReader::with_capacity(
            256 << 10,
            ReadAt {
                file: &self.file,
                pos: 0,
            },
        );
        let mut line = Vec::new();
        let mut buf = Vec::with_capacity(256 << 10);
        loop {
            line.clear();
            let n = r
                .read_until(b'\n', &mut line)
                .map_err(|e| Error::io("read", &self.path, e))?;
            if n == 0 {
                break;
            }
            line.pop();
            self.row(&line, &mut buf)?;
            if buf.len() >= 200 << 10 {
                out.write_all(&buf).map_err(|e| Error::io("write", "<stdout>", e))?;
                buf.clear();
            }
        }
        out.write_all(&buf).map_err(|e| Error::io("write", "<stdout>", e))
    }
}

/// Readers of parts, shared: [`PartReader`]s by part index, at most `cap` kept (the oldest
/// opened is dropped first).
#[derive(Debug)]
pub struct PartReaders {
    cap: usize,
    map: HashMap<usize, (u64, Arc<PartReader>)>,
    tick: u64,
}

impl PartReaders {
    /// A cache of at most `cap` readers.
    pub fn new(cap: usize) -> PartReaders {
        PartReaders {
            cap: cap.max(1),
            map: HashMap::new(),
            tick: 0,
        }
    }

    /// The reader of part `index`, if cached.
    pub fn get(&mut self, index: usize) -> Option<Arc<PartReader>> {
        self.tick += 1;
        let t = self.tick;
        self.map.get_mut(&index).map(|(used, r)| {
            *used = t;
            r.clone()
        })
    }

    /// Keep `r` as part `index`'s reader.
    pub fn put(&mut self, index: usize, r: Arc<PartReader>) {
        if self.map.len() >= self.cap
            && let Some(oldest) = self.map.iter().min_by_key(|(_, (t, _))| *t).map(|(k, _)| *k)
        {
            self.map.remove(&oldest);
        }
        self.tick += 1;
        self.map.insert(index, (self.tick, r));
    }
}

/// Read the feed's bytes at `[offset, offset + len)` into `out` (cleared first), opening part
/// readers through `reader` (which may cache them). Reads stop at the feed's end.
pub fn read_at(
    feed_parts: &dyn Fn(u64) -> Result<Option<(usize, ChangePart)>>,
    reader: &dyn Fn(usize, &ChangePart) -> Result<Arc<PartReader>>,
    offset: u64,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.clear();
    let mut at = offset;
    while out.len() < len {
        let Some((i, part)) = feed_parts(at)? else { break };
        let r = reader(i, &part)?;
        let before = out.len();
        r.read_range(at - part.start, len - out.len(), out)?;
        if out.len() == before {
            break;
        }
        at += (out.len() - before) as u64;
    }
    Ok(())
}

/// Write `parts` (those of versions at or after `from`) to `out`, checking before the first
/// row: every data file present, regular and of its recorded size (one `stat` each), and each
/// version's parts opened (and checked) before its first row, so a damaged file of a later
/// version never follows rows already printed (docs/MOUNT.md "Following a table: `changes.jsonl`").
fn write_parts(table: &Table, parts: &[ChangePart], from: Option<u64>, out: &mut dyn Write) -> Result<()> {
    let parts: Vec<&ChangePart> = parts.iter().filter(|p| from.is_none_or(|n| p.version >= n)).collect();
    check_parts(table, &parts)?;
    for version in parts.chunk_by(|a, b| a.version == b.version) {
        let readers = version
            .iter()
            .map(|p| PartReader::open(table, p))
            .collect::<Result<Vec<_>>>()?;
        for r in readers {
            r.write_all(&mut *out)?;
        }
    }
    Ok(())
}

/// Prove every data file of `parts` present, regular and of its recorded size (one `stat`
/// each). A file that a retention vacuum deleted (a `VACUUM START` after the part's version at
/// which it was no longer live) is not damage: the error is [`Error::ChangesVacuumed`], naming
/// the oldest such version and the first version after every such one (its changes can be
/// read). Any other missing or wrong file is returned as it is ([`Error::Corrupt`]), first.
pub fn check_parts(table: &Table, parts: &[&ChangePart]) -> Result<()> {
    // VACUUM START versions and their live paths, found lazily (only when a file is missing).
    let mut vacuums: Option<Vec<(u64, HashSet<String>)>> = None;
    let mut first: Option<(u64, String, u64)> = None;
    let mut last = 0u64;
    for p in parts {
        let (path, size) = match &p.parquet {
            Some(src) => (src.0.path.as_str(), src.0.size),
            None => (p.path.as_str(), p.size),
        };
        let Err(e) = table.stat_data_file(path, size) else {
            continue;
        };
        if !crate::table::is_missing_data_file(&e) {
            return Err(e);
        }
        if vacuums.is_none() {
            let mut list = Vec::new();
            let seg_first = table.segment()?.first;
            for v in seg_first.saturating_add(1)..=table.latest_version()? {
                let c = table.read_commit(v)?;
                if c.info
                    .as_ref()
                    .is_some_and(|i| i.operation == crate::format::actions::VACUUM_START)
                {
                    let live = table.snapshot(v)?.files.iter().map(|f| f.path.to_string()).collect();
                    list.push((v, live));
                }
            }
            vacuums = Some(list);
        }
        let by = vacuums
            .iter()
            .flatten()
            .find(|(v, live)| *v > p.version && !live.contains(path));
        let Some((vacuum, _)) = by else { return Err(e) };
        if first.is_none() {
            first = Some((p.version, path.to_string(), *vacuum));
        }
        last = last.max(p.version);
    }
    match first {
        None => Ok(()),
        Some((version, path, vacuum_version)) => Err(Error::ChangesVacuumed {
            table: table.root().to_path_buf(),
            version,
            vacuum_version,
            time: crate::util::time::shown_ms(table.commit_info(vacuum_version)?.timestamp),
            path: table.root().join(path),
            readable_from: last.saturating_add(1),
        }),
    }
}

/// `tinydelta changes TABLE [--from-version N] [--to-version M] [--follow]` (docs/CLI.md "Usage"):
/// write the feed's rows of versions `from..=to` to `out`, flushing after each version. With
/// `follow`, keep writing new versions as they are published, waking on inotify events on
/// `_delta_log/` (the `notify` crate; without it, by polling the log every 200 ms, one fstat while
/// nothing changed) until `stop` is set (SIGINT) or `closed()` says the reader of `out` has gone:
/// both end with `Ok`.
///
/// Without `from`, the feed starts at the first version whose changes can be read: when a
/// retention vacuum deleted data files older versions' changes need, `note` is told which
/// versions are left out and why, and the feed starts after them (docs/CLI.md "Usage"). A
/// `from` given is kept: its unreadable changes are [`Error::ChangesVacuumed`].
///
/// Errors: [`Error::InvalidArgument`] when `from > to`; [`Error::VersionNotFound`] when `to` (or `from`
/// without `follow`) is past the latest; the log's and data files' errors, naming them; a
/// broken pipe as [`Error::Io`] of kind `BrokenPipe` (the CLI exits 0 quietly).
#[allow(clippy::too_many_arguments)] // the command's flags, its output and its two ways to stop
pub fn print(
    table: &Table,
    from: Option<u64>,
    to: Option<u64>,
    follow: bool,
    note: &mut dyn FnMut(&str),
    out: &mut impl Write,
    stop: &std::sync::atomic::AtomicBool,
    closed: &dyn Fn() -> bool,
) -> Result<()> {
    use std::sync::atomic::Ordering;
    let latest = table.latest_version()?;
    let first = table.segment()?.first;
    let not_found = |version| Error::VersionNotFound {
        table: table.root().to_path_buf(),
        version,
        first,
        latest,
    };
    if let Some(m) = to
        && m > latest
    {
        return Err(not_found(m));
    }
    if let (Some(n), Some(m)) = (from, to)
        && n > m
    {
        return Err(Error::InvalidArgument(format!(
            "{} is after {}",
            crate::util::spelling::with("from_version", n),
            crate::util::spelling::with("to_version", m)
        )));
    }
    if let Some(n) = from
        && n > latest
        && !follow
    {
        return Err(not_found(n));
    }
    // A --from-version before the log's start (older commits cleaned up) cannot be printed
    // from: refused, never a feed that silently starts later.
    if let Some(n) = from
        && n < first
    {
        return Err(not_found(n));
    }
    let mut feed = ChangeFeed::new(table, from.map(|n| n.min(latest + 1)))?;
    // A --from-version past the latest (with --follow) starts at the next commit.
    let mut printed = 0usize;
    let mut start = from;
    let mut emit = |feed: &mut ChangeFeed, through: u64, start: Option<u64>, out: &mut dyn Write| -> Result<()> {
        feed.extend(table, through)?;
        write_parts(table, &feed.parts()[printed..], start, out)?;
        printed = feed.parts().len();
        out.flush().map_err(|e| Error::io("write", "<stdout>", e))
    };
    if from.is_none_or(|n| n <= latest) {
        match emit(&mut feed, to.unwrap_or(latest), start, out) {
            // No --from-version: from the first version whose changes can be read.
            Err(Error::ChangesVacuumed {
                readable_from,
                vacuum_version,
                time,
                ..
            }) if from.is_none() => {
                note(&format!(
                    "{}: the changes of versions before {readable_from} are not printed: the vacuum of {time} \
                     (version {vacuum_version}) deleted data files they need; printing from version {readable_from}",
                    table.root().display()
                ));
                start = Some(readable_from);
                emit(&mut feed, to.unwrap_or(latest), start, out)?;
            }
            r => r?,
        }
    }
    if !follow {
        return Ok(());
    }
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let log_dir = table.root().join(crate::log::files::LOG_DIR);
    let watcher = {
        use notify::Watcher;
        notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
            let _ = tx.send(());
        })
        .and_then(|mut w| w.watch(&log_dir, notify::RecursiveMode::NonRecursive).map(|()| w))
    };
    let poll_every = match &watcher {
        Ok(_) => std::time::Duration::from_secs(1),
        Err(e) => {
            ::log::warn!("cannot watch {} ({e}); polling it", log_dir.display());
            std::time::Duration::from_millis(200)
        }
    };
    let mut last_check = std::time::Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) || closed() {
            return Ok(());
        }
        let woke = match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(()) => {
                while rx.try_recv().is_ok() {}
                true
            }
            Err(_) => false,
        };
        if !woke && last_check.elapsed() < poll_every {
            continue;
        }
        last_check = std::time::Instant::now();
        let latest = table.latest_version()?;
        if latest >= feed.next_version() {
            emit(&mut feed, latest, start, out)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (tempfile::TempDir, Table) {
        let d = tempfile::tempdir().unwrap();
        let schema = crate::format::schema::Schema::parse_cli(&["id:int!".to_string(), "s:str".to_string()]).unwrap();
        let t = Table::create(d.path().join("t"), &schema).unwrap();
        (d, t)
    }

    fn append(t: &Table, rows: &str) -> u64 {
        t.append("x", rows.as_bytes(), &Default::default()).unwrap().unwrap()
    }

    fn whole(t: &Table, feed: &ChangeFeed) -> Vec<u8> {
        let mut out = Vec::new();
        for p in feed.parts() {
            PartReader::open(t, p).unwrap().write_all(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn feed_rows_sizes_and_offsets() {
        let (_d, t) = table();
        append(&t, "{\"id\":1,\"s\":\"a\"}\n{\"id\":2,\"s\":null}\n");
        append(&t, "{\"id\":3,\"s\":\"c\"}\n");
        t.overwrite("x", "{\"id\":9,\"s\":\"z\"}\n".as_bytes(), &Default::default())
            .unwrap();
        t.restore(2, &Default::default()).unwrap();
        let mut feed = ChangeFeed::new(&t, None).unwrap();
        feed.extend(&t, t.latest_version().unwrap()).unwrap();
        let bytes = whole(&t, &feed);
        assert_eq!(bytes.len() as u64, feed.len(), "size known from the log");
        let text = String::from_utf8(bytes.clone()).unwrap();
        let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let got: Vec<(i64, &str, u64)> = rows
            .iter()
            .map(|r| {
                (
                    r["id"].as_i64().unwrap(),
                    r["_change_type"].as_str().unwrap(),
                    r["_commit_version"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "insert", 1),
                (2, "insert", 1),
                (3, "insert", 2),
                (1, "delete", 3),
                (2, "delete", 3),
                (3, "delete", 3),
                (9, "insert", 3),
                (9, "delete", 4),
                (1, "insert", 4),
                (2, "insert", 4),
                (3, "insert", 4),
            ]
        );
        let ts = t.commit_info(3).unwrap().timestamp;
        assert_eq!(rows[3]["_commit_timestamp"].as_str(), rfc3339_ms(ts).as_deref());
        // Any offset, any length: the same bytes as the whole.
        let parts = feed.parts().to_vec();
        let readers: Vec<Arc<PartReader>> = parts
            .iter()
            .map(|p| Arc::new(PartReader::open(&t, p).unwrap()))
            .collect();
        let f = |o: u64| Ok(feed.part_at(o).map(|i| (i, parts[i].clone())));
        let r = |i: usize, _: &ChangePart| Ok(readers[i].clone());
        for (off, len) in [(0usize, 1usize), (5, 100), (90, 7), (0, 5000), (bytes.len() - 3, 10)] {
            let mut out = Vec::new();
            read_at(&f, &r, off as u64, len, &mut out).unwrap();
            assert_eq!(out, bytes[off..(off + len).min(bytes.len())], "{off} {len}");
        }
        // Incremental: a new commit only adds bytes at the end.
        let old = feed.len();
        append(&t, "{\"id\":4,\"s\":\"d\"}\n");
        feed.extend(&t, t.latest_version().unwrap()).unwrap();
        assert!(feed.len() > old);
        assert_eq!(whole(&t, &feed)[..old as usize], bytes[..]);
        // From a later version: the live files before it come from its snapshot.
        let mut from4 = ChangeFeed::new(&t, Some(4)).unwrap();
        from4.extend(&t, 4).unwrap();
        assert_eq!(from4.parts().len(), 3);
        assert_eq!(from4.parts()[0].change, ChangeType::Delete);
    }

    #[test]
    fn rows_that_disagree_with_the_log_are_errors() {
        let (_d, t) = table();
        let v = append(&t, "{\"id\":1,\"s\":\"a\"}\n{\"id\":2,\"s\":\"b\"}\n");
        let mut feed = ChangeFeed::new(&t, None).unwrap();
        feed.extend(&t, v).unwrap();
        let p = feed.parts()[0].clone();
        // Same size, one row fewer: caught when the file is read.
        std::fs::write(
            t.root().join(&p.path),
            "{\"id\":1,\"s\":\"a\"}\n{\"id\":2,\"s\":\"bb\"}",
        )
        .unwrap();
        let e = PartReader::open(&t, &p).unwrap_err().to_string();
        assert!(e.contains(&p.path) && e.contains("no newline"), "{e}");
        std::fs::remove_file(t.root().join(&p.path)).unwrap();
        assert!(PartReader::open(&t, &p).unwrap_err().to_string().contains("missing"));
    }

    #[test]
    fn empty_object_rows_keep_their_length() {
        let p = ChangePart {
            version: 7,
            change: ChangeType::Insert,
            path: "x".into(),
            size: 3,
            rows: 1,
            timestamp_ms: 0,
            start: 0,
            parquet: None,
        };
        assert_eq!(rfc3339_ms(0).unwrap(), "1970-01-01T00:00:00.000Z");
        assert!(rfc3339_ms(300_000_000_000_000).is_none());
        assert_eq!(p.len(), Some(3 + p.suffix().len() as u64 - 1));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Model: the feed read at any offset and length is that slice of the feed written whole,
        /// for files of rows of any length (many rows per part, so the row marks are used).
        #[test]
        fn any_range_is_a_slice_of_the_whole(
            lens in proptest::collection::vec(0usize..3000, 1..60),
            reads in proptest::collection::vec((0u64..1_000_000, 1usize..200_000), 1..20),
        ) {
            let (_d, t) = table();
            let mut rows = String::new();
            for (i, n) in lens.iter().enumerate() {
                rows.push_str(&format!("{{\"id\":{i},\"s\":\"{}\"}}\n", "x".repeat(*n)));
            }
            append(&t, &rows);
            append(&t, &rows[..rows.len() / 2 + rows[rows.len() / 2..].find('\n').unwrap() + 1]);
            t.overwrite("x", "{\"id\":0,\"s\":null}\n".as_bytes(), &Default::default()).unwrap();
            let mut feed = ChangeFeed::new(&t, None).unwrap();
            feed.extend(&t, t.latest_version().unwrap()).unwrap();
            let bytes = whole(&t, &feed);
            proptest::prop_assert_eq!(bytes.len() as u64, feed.len());
            let parts = feed.parts().to_vec();
            let f = |o: u64| Ok(feed.part_at(o).map(|i| (i, parts[i].clone())));
            let r = |_: usize, p: &ChangePart| PartReader::open(&t, p).map(Arc::new);
            for (off, len) in reads {
                let off = off % (bytes.len() as u64 + 1);
                let mut out = Vec::new();
                read_at(&f, &r, off, len, &mut out).unwrap();
                let end = (off as usize + len).min(bytes.len());
                proptest::prop_assert_eq!(&out[..], &bytes[off as usize..end]);
            }
        }
    }
}
