//! What the mount knows about versions: cached, immutable facts, and reads of a version's
//! `data.jsonl` as a concatenation of its data files.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::Table;
use crate::error::Error;
use crate::snapshot::Snapshot;

use super::errno::{FsError, FsResult};

/// The cheap facts of a version: when it was committed and its commit file.
#[derive(Debug)]
pub struct VersionHead {
    /// `commitInfo.timestamp`, ms since the epoch.
    pub timestamp_ms: i64,
    /// `_delta_log/<version>.json`.
    pub commit_path: PathBuf,
    /// Its size in bytes.
    pub commit_size: u64,
}

/// The facts of a version that need a log replay: its data files and its schema.
#[derive(Debug)]
pub struct VersionBody {
    /// The data files in snapshot order, with their offsets in `data.jsonl`.
    pub data: Arc<Concat>,
    /// `schema.json`.
    pub schema_json: Arc<[u8]>,
}

/// One file of a concatenation.
#[derive(Debug, Clone)]
pub struct Part {
    /// Absolute path.
    pub path: PathBuf,
    /// Offset of its first byte in the concatenation.
    pub start: u64,
    /// Its length.
    pub len: u64,
}

/// Files read as one: `data.jsonl` (the data files) or `commit.json` (one commit file).
#[derive(Debug)]
pub struct Concat {
    /// The parts, in order, with increasing `start`.
    pub parts: Vec<Part>,
    /// Total length.
    pub len: u64,
}

impl Concat {
    /// Concatenate `files` (path, length) in order.
    pub fn new(files: impl IntoIterator<Item = (PathBuf, u64)>) -> Concat {
        let mut start = 0;
        let parts = files
            .into_iter()
            .filter(|(_, len)| *len > 0)
            .map(|(path, len)| {
                let p = Part { path, start, len };
                start += len;
                p
            })
            .collect();
        Concat { parts, len: start }
    }
}

/// How many open files one reader keeps (the ones it read last).
const OPEN_FILES_PER_READER: usize = 4;

/// An open `data.jsonl` (or `commit.json`): positional reads mapped onto the parts. Each part is
/// opened on first use and kept open (a few per reader), so reads never reopen a file; an open
/// reader keeps reading the version it opened, whatever is committed later.
#[derive(Debug)]
pub struct ConcatReader {
    concat: Arc<Concat>,
    open: Mutex<Vec<(usize, Arc<File>)>>,
}

impl ConcatReader {
    /// A reader of `concat`.
    pub fn new(concat: Arc<Concat>) -> ConcatReader {
        ConcatReader {
            concat,
            open: Mutex::new(Vec::new()),
        }
    }

    /// Total length.
    pub fn len(&self) -> u64 {
        self.concat.len
    }

    /// Whether the concatenation is empty.
    pub fn is_empty(&self) -> bool {
        self.concat.len == 0
    }

    fn file(&self, idx: usize) -> FsResult<Arc<File>> {
        {
            let open = lock(&self.open);
            if let Some((_, f)) = open.iter().find(|(i, _)| *i == idx) {
                return Ok(f.clone());
            }
        }
        let part = &self.concat.parts[idx];
        let file = Arc::new(File::open(&part.path).map_err(|e| Error::io("open", &part.path, e))?);
        let mut open = lock(&self.open);
        if open.len() >= OPEN_FILES_PER_READER {
            open.remove(0);
        }
        open.push((idx, file.clone()));
        Ok(file)
    }

    /// Up to `size` bytes at `offset` (fewer only at the end).
    pub fn read(&self, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        if offset >= self.concat.len || size == 0 {
            return Ok(Vec::new());
        }
        let end = self.concat.len.min(offset.saturating_add(size as u64));
        let mut buf = vec![0u8; (end - offset) as usize];
        let parts = &self.concat.parts;
        // The last part starting at or before offset.
        let mut idx = parts.partition_point(|p| p.start <= offset).saturating_sub(1);
        let mut pos = offset;
        while pos < end && idx < parts.len() {
            let part = &parts[idx];
            let in_part = pos - part.start;
            let n = (part.len - in_part).min(end - pos) as usize;
            let at = (pos - offset) as usize;
            let file = self.file(idx)?;
            read_exact_at(&file, &mut buf[at..at + n], in_part, &part.path)?;
            pos += n as u64;
            idx += 1;
        }
        Ok(buf)
    }
}

fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64, path: &Path) -> FsResult<()> {
    while !buf.is_empty() {
        match file.read_at(buf, offset) {
            Ok(0) => {
                return Err(FsError::Table(Error::Corrupt {
                    path: path.to_path_buf(),
                    reason: "data file is shorter than its add action says".into(),
                }));
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read", path, e).into()),
        }
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A small map that forgets its least recently used entries.
#[derive(Debug)]
struct Lru<V> {
    cap: usize,
    tick: u64,
    map: HashMap<u64, (u64, Arc<V>)>,
}

impl<V> Lru<V> {
    fn new(cap: usize) -> Self {
        Lru {
            cap,
            tick: 0,
            map: HashMap::new(),
        }
    }

    fn get(&mut self, k: u64) -> Option<Arc<V>> {
        self.tick += 1;
        let t = self.tick;
        self.map.get_mut(&k).map(|e| {
            e.0 = t;
            e.1.clone()
        })
    }

    fn put(&mut self, k: u64, v: Arc<V>) {
        if self.map.len() >= self.cap
            && !self.map.contains_key(&k)
            && let Some(oldest) = self.map.iter().min_by_key(|(_, (t, _))| *t).map(|(k, _)| *k)
        {
            self.map.remove(&oldest);
        }
        self.tick += 1;
        self.map.insert(k, (self.tick, v));
    }
}

/// Versions of one table, as the mount sees them. Facts about a version never change, so they
/// are cached (bounded); only the newest version number is asked of the log each time.
#[derive(Debug)]
pub struct Versions {
    table: Table,
    /// The newest version seen so far: versions up to it exist without asking the log.
    seen_latest: AtomicU64,
    heads: Mutex<Lru<VersionHead>>,
    bodies: Mutex<Lru<VersionBody>>,
    /// The newest snapshot built so far: a newer version is replayed from it, one commit per
    /// version, instead of from version 0 (readers of `latest` after each commit).
    tip: Mutex<Option<Arc<Snapshot>>>,
}

impl Versions {
    /// The versions of `table`.
    pub fn new(table: Table) -> Versions {
        Versions {
            table,
            seen_latest: AtomicU64::new(0),
            heads: Mutex::new(Lru::new(1024)),
            bodies: Mutex::new(Lru::new(32)),
            tip: Mutex::new(None),
        }
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
    pub fn exists(&self, version: u64) -> FsResult<bool> {
        if version <= self.seen_latest.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let seg = self.table.segment()?;
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

    /// The head of `version` (which must exist).
    pub fn head(&self, version: u64) -> FsResult<Arc<VersionHead>> {
        if let Some(h) = lock(&self.heads).get(version) {
            return Ok(h);
        }
        let commit = self.table.read_commit(version)?;
        let info = self.table.commit_info(version)?;
        let commit_path = self.table.commit_path(version);
        let commit_size = commit.len;
        let head = Arc::new(VersionHead {
            timestamp_ms: info.timestamp,
            commit_path,
            commit_size,
        });
        lock(&self.heads).put(version, head.clone());
        Ok(head)
    }

    /// The body of `version` (log replay on a cache miss).
    pub fn body(&self, version: u64) -> FsResult<Arc<VersionBody>> {
        if let Some(b) = lock(&self.bodies).get(version) {
            return Ok(b);
        }
        let snap = self.snapshot(version)?;
        let root = self.table.root();
        let data = Concat::new(snap.files.iter().map(|f| (root.join(&f.path), f.size)));
        let body = Arc::new(VersionBody {
            data: Arc::new(data),
            schema_json: Arc::from(snap.schema.to_pretty_json().into_bytes()),
        });
        lock(&self.bodies).put(version, body.clone());
        Ok(body)
    }
}

impl Versions {
    /// The snapshot of `version`: from the cached tip when it is older, else a full replay.
    fn snapshot(&self, version: u64) -> FsResult<Snapshot> {
        let tip = lock(&self.tip).clone();
        let snap = match tip {
            Some(t) if t.version < version => self.table.snapshot_after(&t, version)?,
            _ => self.table.snapshot(version)?,
        };
        let mut tip = lock(&self.tip);
        if tip.as_ref().is_none_or(|t| t.version < snap.version) {
            *tip = Some(Arc::new(snap.clone()));
        }
        Ok(snap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_reads_across_parts() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        let mut all = Vec::new();
        for (i, text) in ["abc", "", "defgh", "i", "jklmnopqrstuvwxyz"].iter().enumerate() {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, text).unwrap();
            files.push((p, text.len() as u64));
            all.extend_from_slice(text.as_bytes());
        }
        let r = ConcatReader::new(Arc::new(Concat::new(files)));
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

    #[test]
    fn short_file_is_an_error_not_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "ab").unwrap();
        let r = ConcatReader::new(Arc::new(Concat::new([(p, 5)])));
        assert_eq!(r.read(0, 5).unwrap_err().errno(), libc::EIO);
    }

    #[test]
    fn incremental_snapshots_match_full_replay() {
        use crate::WriteOptions;
        use crate::schema::Schema;
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::parse_cli(&["id:int!".to_string()]).unwrap();
        let t = Table::create(dir.path(), &schema).unwrap();
        let w = WriteOptions::default();
        let vs = Versions::new(t.clone());
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
            let got: Vec<_> = vs
                .body(v)
                .unwrap()
                .data
                .parts
                .iter()
                .map(|p| (p.path.clone(), p.len))
                .collect();
            assert_eq!(got, full, "version {v}");
        }
    }

    #[test]
    fn lru_evicts_least_recent() {
        let mut l = Lru::new(2);
        l.put(1, Arc::new(1));
        l.put(2, Arc::new(2));
        assert!(l.get(1).is_some());
        l.put(3, Arc::new(3));
        assert!(l.get(2).is_none());
        assert!(l.get(1).is_some() && l.get(3).is_some());
    }
}
