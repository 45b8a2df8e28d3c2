//! Pages of rows without reading a version whole (docs/SERVE.md "Rows by page"): the data file
//! holding row `offset` is found from the per-file row counts the log records (`add.stats`
//! `numRecords`), and inside a file from row marks, one about every 64 KiB, found by reading
//! that file once and kept in a bounded cache. A page therefore reads at most one stretch of 64
//! KiB it does not return, plus its own rows.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::format::schema::Schema;
use crate::log::snapshot::FileEntry;
use crate::table::Table;
use crate::util::lru::Lru;

/// A byte offset between two marks of a file's row index.
const MARK_EVERY: u64 = 64 << 10;

/// The bytes of rows one page holds: a page stops after the row that reaches it (so a page
/// always holds at least one row), and its `rows` are then fewer than `limit`.
pub const MAX_PAGE_BYTES: u64 = 16 << 20;

/// The longest row a page shows; a longer one is an error naming it.
const MAX_ROW_BYTES: u64 = 64 << 20;

/// Files whose row marks are kept (each holds one mark per 64 KiB: 16 bytes per 64 KiB).
const INDEXED_FILES: usize = 4096;

/// One file's rows: `(byte offset of a row's start, that row's index)` marks, and its row count.
#[derive(Debug)]
struct RowMarks {
    marks: Vec<(u64, u64)>,
    rows: u64,
}

/// A run of rows: one data file's rows `[first, first + count)` (the file opened as its rows:
/// JSONL as stored, or a Parquet file's or deletion vector's converted rows).
pub struct Run {
    /// The file's index in the list the run was cut from.
    pub index: usize,
    /// The first row of the run, within the file.
    pub first: u64,
    /// Rows wanted (fewer when the file ends first).
    pub count: u64,
}

/// The row index cache shared by every request of one server.
#[derive(Debug)]
pub struct RowPager {
    marks: Mutex<Lru<(String, u64), RowMarks>>,
}

impl Default for RowPager {
    fn default() -> Self {
        RowPager {
            marks: Mutex::new(Lru::new(INDEXED_FILES)),
        }
    }
}

impl RowPager {
    /// The rows of `f` (counted once when its `add` records no count).
    pub fn rows_of(&self, table: &Table, f: &FileEntry, schema: &Schema) -> Result<u64> {
        if f.has_stats {
            return Ok(f.num_records);
        }
        Ok(self.marks_of(table, f, schema)?.rows)
    }

    fn marks_of(&self, table: &Table, f: &FileEntry, schema: &Schema) -> Result<Arc<RowMarks>> {
        let key = (f.path.to_string(), f.size);
        if let Some(m) = crate::util::sync::lock(&self.marks).get(&key) {
            return Ok(m);
        }
        let (file, _) = table.open_rows(f, schema)?;
        let path = table.root().join(&f.path);
        let mut r = BufReader::with_capacity(256 << 10, file);
        let (mut off, mut rows, mut last) = (0u64, 0u64, 0u64);
        let mut marks = vec![(0, 0)];
        loop {
            let buf = r.fill_buf().map_err(|e| Error::io("read", &path, e))?;
            if buf.is_empty() {
                break;
            }
            let k = buf.len();
            for i in memchr::memchr_iter(b'\n', buf) {
                rows += 1;
                let next = off + i as u64 + 1;
                if next - last >= MARK_EVERY {
                    marks.push((next, rows));
                    last = next;
                }
            }
            off += k as u64;
            r.consume(k);
        }
        let m = Arc::new(RowMarks { marks, rows });
        crate::util::sync::lock(&self.marks).put(key, m.clone());
        Ok(m)
    }

    /// Append the rows of `run` to `out`, one JSON value per row (each line checked to be JSON),
    /// taking their bytes from `budget`; stops early once `budget` is spent (after at least one
    /// row in `out`). Returns whether the run was read whole.
    pub fn read_run(
        &self,
        table: &Table,
        f: &FileEntry,
        schema: &Schema,
        run: &Run,
        out: &mut Vec<Box<serde_json::value::RawValue>>,
        budget: &mut u64,
    ) -> Result<bool> {
        let path: PathBuf = table.root().join(&f.path);
        let (mut file, _) = table.open_rows(f, schema)?;
        let (mut at_row, start) = if run.first == 0 {
            (0, 0)
        } else {
            let m = self.marks_of(table, f, schema)?;
            let i = m.marks.partition_point(|(_, r)| *r <= run.first) - 1;
            let (o, r) = m.marks[i];
            (r, o)
        };
        file.seek(SeekFrom::Start(start)).map_err(|e| Error::io("seek", &path, e))?;
        let mut r = BufReader::with_capacity(64 << 10, (&mut file as &mut File).take(u64::MAX));
        let mut line = Vec::new();
        let end = run.first.saturating_add(run.count);
        while at_row < end {
            if at_row >= run.first && *budget == 0 && !out.is_empty() {
                return Ok(false);
            }
            line.clear();
            let n = (&mut r)
                .take(MAX_ROW_BYTES + 1)
                .read_until(b'\n', &mut line)
                .map_err(|e| Error::io("read", &path, e))?;
            if n == 0 {
                break;
            }
            if n as u64 > MAX_ROW_BYTES {
                return Err(bad(&path, at_row, &format!("is longer than {MAX_ROW_BYTES} bytes, the longest row a page shows")));
            }
            if at_row >= run.first {
                *budget = budget.saturating_sub(n as u64);
                let text = std::str::from_utf8(&line).map_err(|_| bad(&path, at_row, "is not UTF-8"))?;
                let v = serde_json::value::RawValue::from_string(text.trim_end().to_string())
                    .map_err(|e| bad(&path, at_row, &format!("is not JSON ({e})")))?;
                out.push(v);
            }
            at_row += 1;
        }
        Ok(true)
    }
}

fn bad(path: &std::path::Path, row: u64, what: &str) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        reason: format!("line {} {what}", row + 1),
    }
}

/// The runs that make rows `[offset, offset + limit)` of a list of files in order, given each
/// file's row count: found by walking the counts (no file is opened).
pub fn runs(counts: &[u64], offset: u64, limit: u64) -> Vec<Run> {
    let mut out = Vec::new();
    let (mut base, mut want, mut at) = (0u64, limit, offset);
    for (index, &n) in counts.iter().enumerate() {
        if want == 0 {
            break;
        }
        if at < base + n {
            let first = at - base;
            let count = want.min(n - first);
            out.push(Run { index, first, count });
            want -= count;
            at += count;
        }
        base += n;
    }
    out
}
