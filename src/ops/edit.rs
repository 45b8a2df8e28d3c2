//! An edit of a version's `data.jsonl` (docs/MOUNT.md "Editing latest/data.jsonl"): the rows
//! of the version read and the rows a tool wrote back are compared as canonical JSON, line by
//! line (a hash per row, then a diff of the two lists of hashes), and the difference is
//! committed through [`crate::ops::dml::edit_rows`] (copy-on-write, only the files holding
//! changed rows rewritten), or as a blind append when rows were only added after the last one.
//!
//! Cost: one pass over the version's rows and one over the edited file, each validated and
//! canonicalised; memory 8 bytes per row of the version and 16 per row of the edited file, plus
//! the diff's index of the rows between the first and the last changed one (about 40 bytes
//! each).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::io::{self, Read};

use crate::error::{Error, Result};
use crate::format::rows::LineCheck;
use crate::ops::dml::{self, ChangeOptions, Hunk, RowsEdit};
use crate::table::Table;

/// The bytes of an edited file, read at any offset.
pub trait EditSource: Sync {
    /// `pread`: up to `buf.len()` bytes at `at` (0 at the end).
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize>;
}

/// Reads an [`EditSource`] from `at` on, in order.
struct SourceReader<'a> {
    src: &'a dyn EditSource,
    at: u64,
}

impl Read for SourceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.src.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// What an edit committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EditReport {
    /// The version committed; `None` when the edit changed no row.
    pub version: Option<u64>,
    /// `WRITE` (rows only added after the last one), `DELETE` or `UPDATE`; empty when nothing
    /// was committed.
    pub operation: &'static str,
    /// Rows deleted, replaced and inserted.
    pub deleted: u64,
    /// Rows replaced.
    pub updated: u64,
    /// Rows inserted.
    pub inserted: u64,
}

/// The hash of one canonical row (its bytes without the `\n`).
fn row_hash(row: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    row.hash(&mut h);
    h.finish()
}

/// Whether line `l` (without its `\n`) holds no row: the canonicaliser skips a blank line
/// (after a UTF-8 BOM).
fn blank(l: &[u8]) -> bool {
    l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l).iter().all(u8::is_ascii_whitespace)
}

/// Validate and canonicalise the JSONL `input` against `check`, calling `each(offset, hash)`
/// for each row (the offset of its line in the input, the hash of its canonical form). Errors:
/// [`Error::BadInput`] naming `source`, line and column.
fn hash_rows(
    check: &mut LineCheck,
    source: &str,
    input: &mut dyn Read,
    mut each: impl FnMut(u64, u64),
) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut canon = Vec::with_capacity(1 << 20);
    let mut offsets: std::collections::VecDeque<u64> = Default::default();
    let mut at = 0u64;
    let mut line_start = 0u64;
    let mut partial: Vec<u8> = Vec::new();
    let mut emit = |canon: &mut Vec<u8>, offsets: &mut std::collections::VecDeque<u64>| -> Result<()> {
        for row in canon.split(|b| *b == b'\n').filter(|r| !r.is_empty()) {
            let off = offsets
                .pop_front()
                .ok_or_else(|| Error::Internal(format!("{source}: more canonical rows than lines")))?;
            each(off, row_hash(row));
        }
        canon.clear();
        Ok(())
    };
    loop {
        let n = input.read(&mut buf).map_err(|e| Error::io("read", source, e))?;
        if n == 0 {
            break;
        }
        let data = &buf[..n];
        // The offsets of the rows these bytes complete, found as the canonicaliser finds rows.
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', data) {
            let row_blank = if partial.is_empty() {
                blank(&data[start..nl])
            } else {
                partial.extend_from_slice(&data[start..nl]);
                let b = blank(&partial);
                partial.clear();
                b
            };
            if !row_blank {
                offsets.push_back(line_start);
            }
            start = nl + 1;
            line_start = at + start as u64;
        }
        // An unfinished line: its first bytes (a BOM may start it), and a mark for any other
        // byte that is not whitespace.
        let rest = &data[start..];
        let take = if partial.len() < 64 { rest.len().min(64) } else { 0 };
        partial.extend_from_slice(&rest[..take]);
        if rest[take..].iter().any(|c| !c.is_ascii_whitespace()) {
            partial.push(b'x');
        }
        at += n as u64;
        check.feed(source, data, &mut canon)?;
        emit(&mut canon, &mut offsets)?;
    }
    if line_start < at && !blank(&partial) {
        offsets.push_back(line_start);
    }
    check.finish(source, &mut canon)?;
    emit(&mut canon, &mut offsets)
}

/// The hunks that turn `a` (the version's row hashes) into `b` (the edited file's), in order:
/// the common start and end are skipped, then rows found once in each side anchor the diff
/// (patience diff: the longest increasing run of such anchors), and each stretch between two
/// anchors is diffed the same way; a stretch with no anchor is one hunk. Linear in the rows plus
/// the sort of the anchors; a small edit of a long table costs one pass.
pub fn diff(a: &[u64], b: &[u64]) -> Vec<Hunk> {
    let mut out = Vec::new();
    let mut work = vec![(0usize, a.len(), 0usize, b.len())];
    while let Some((mut a0, mut a1, mut b0, mut b1)) = work.pop() {
        while a0 < a1 && b0 < b1 && a[a0] == b[b0] {
            a0 += 1;
            b0 += 1;
        }
        while a0 < a1 && b0 < b1 && a[a1 - 1] == b[b1 - 1] {
            a1 -= 1;
            b1 -= 1;
        }
        if a0 == a1 && b0 == b1 {
            continue;
        }
        if a0 == a1 || b0 == b1 {
            out.push(Hunk {
                base: a0 as u64..a1 as u64,
                new: b0 as u64..b1 as u64,
            });
            continue;
        }
        // Rows found exactly once on each side of this stretch.
        let mut count: HashMap<u64, (u32, u32, usize)> = HashMap::with_capacity(a1 - a0);
        for (i, h) in a.iter().enumerate().take(a1).skip(a0) {
            let e = count.entry(*h).or_insert((0, 0, i));
            e.0 += 1;
            e.2 = i;
        }
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        for h in &b[b0..b1] {
            if let Some(e) = count.get_mut(h) {
                e.1 += 1;
            }
        }
        for (j, h) in b.iter().enumerate().take(b1).skip(b0) {
            if let Some(&(1, 1, i)) = count.get(h) {
                pairs.push((i, j));
            }
        }
        drop(count);
        let anchors = longest_increasing(&pairs);
        if anchors.is_empty() {
            out.push(Hunk {
                base: a0 as u64..a1 as u64,
                new: b0 as u64..b1 as u64,
            });
            continue;
        }
        // The stretches between anchors, pushed last first so they come out in order.
        let mut prev = (a0, b0);
        let mut parts = Vec::with_capacity(anchors.len() + 1);
        for (i, j) in anchors {
            parts.push((prev.0, i, prev.1, j));
            prev = (i + 1, j + 1);
        }
        parts.push((prev.0, a1, prev.1, b1));
        work.extend(parts.into_iter().rev());
    }
    // Stretches were pushed in order, but each is done before the next: sort to be sure, then
    // merge hunks that touch.
    out.sort_by_key(|h| (h.base.start, h.new.start));
    let mut merged: Vec<Hunk> = Vec::with_capacity(out.len());
    for h in out {
        match merged.last_mut() {
            Some(m) if m.base.end == h.base.start && m.new.end == h.new.start => {
                m.base.end = h.base.end;
                m.new.end = h.new.end;
            }
            _ => merged.push(h),
        }
    }
    merged
}

/// The longest run of `pairs` (in order of their second number, which increases) whose first
/// numbers increase too (patience sorting, O(n log n)).
fn longest_increasing(pairs: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut tops: Vec<usize> = Vec::new();
    let mut back: Vec<Option<usize>> = vec![None; pairs.len()];
    for (k, p) in pairs.iter().enumerate() {
        let pos = tops.partition_point(|&t| pairs[t].0 < p.0);
        back[k] = pos.checked_sub(1).map(|q| tops[q]);
        if pos == tops.len() {
            tops.push(k);
        } else {
            tops[pos] = k;
        }
    }
    let mut out = Vec::with_capacity(tops.len());
    let mut cur = tops.last().copied();
    while let Some(k) = cur {
        out.push(pairs[k]);
        cur = back[k];
    }
    out.reverse();
    out
}

/// Options of [`commit_edit`].
#[derive(Debug, Clone, Default)]
pub struct EditOptions {
    /// The longest line, bytes (`tinydelta-mount --max-line-bytes`).
    pub max_line_bytes: Option<usize>,
    /// More `commitInfo.operationParameters`.
    pub extra_params: Vec<(String, String)>,
}

/// Commit the edited file `src` as the difference from version `base`'s rows (docs/MOUNT.md
/// "Editing latest/data.jsonl"). `source` names the file in errors and in the commit
/// (`operationParameters.source`). Nothing is committed when no row changed.
///
/// Errors: [`Error::BadInput`] naming `source`'s line and column (nothing committed);
/// [`Error::ConcurrentWrite`] when a commit after `base` removed a file of it or changed the
/// schema; errors of reading and of the commit.
pub fn commit_edit(table: &Table, base: u64, source: &str, src: &dyn EditSource, opts: &EditOptions) -> Result<EditReport> {
    let snap = table.snapshot(base)?;
    table.check_writable_as(&snap, "update")?;
    let max_line = opts.max_line_bytes.unwrap_or(crate::format::rows::DEFAULT_MAX_LINE_BYTES);
    // The version's rows, file by file.
    let mut a: Vec<u64> = Vec::new();
    let mut file_rows = Vec::with_capacity(snap.files.len());
    for f in &snap.files {
        let (file, _) = table.open_rows(f, &snap.schema)?;
        let mut check = LineCheck::new(snap.schema.clone()).with_max_line_bytes(usize::MAX >> 1);
        let before = a.len();
        let name = table.root().join(&f.path).display().to_string();
        hash_rows(&mut check, &name, &mut io::BufReader::new(file), |_, h| a.push(h))?;
        file_rows.push((a.len() - before) as u64);
    }
    // The edited file's rows.
    let mut b: Vec<u64> = Vec::new();
    let mut offsets: Vec<u64> = Vec::new();
    let mut check = LineCheck::new(snap.schema.clone()).with_max_line_bytes(max_line);
    hash_rows(&mut check, source, &mut SourceReader { src, at: 0 }, |off, h| {
        offsets.push(off);
        b.push(h);
    })?;
    let hunks = diff(&a, &b);
    drop(b);
    let mut report = EditReport::default();
    if hunks.is_empty() {
        return Ok(report);
    }
    let total = a.len() as u64;
    drop(a);
    let mut params = BTreeMap::from([("source".to_string(), source.to_string())]);
    params.extend(opts.extra_params.iter().cloned());
    // Rows only added after the last one are still no blind append: the tool read the whole
    // version, so a commit since that removed one of its files conflicts (docs/MOUNT.md
    // "Editing latest/data.jsonl"); `edit_rows` commits them as a WRITE (Append).
    let tail = hunks.last().filter(|h| h.base.is_empty() && h.base.start == total).cloned();
    let mut line = |n: u64| -> Result<String> { read_line(src, source, offsets[n as usize], max_line) };
    let mut appended_reader;
    let appended: Option<&mut dyn Read> = match &tail {
        Some(t) => {
            appended_reader = SourceReader {
                src,
                at: offsets[t.new.start as usize],
            };
            Some(&mut appended_reader)
        }
        None => None,
    };
    let edit = RowsEdit {
        hunks: &hunks,
        file_rows: &file_rows,
        line: &mut line,
        appended,
        appended_rows: tail.as_ref().map_or(0, |t| t.new.end - t.new.start),
        source,
        params,
    };
    let r = dml::edit_rows(table, base, edit, &ChangeOptions::default())?;
    report.version = r.version;
    report.operation = r.operation;
    report.deleted = r.metrics.get("numDeletedRows").copied().unwrap_or(0);
    report.updated = r.metrics.get("numUpdatedRows").copied().unwrap_or(0);
    report.inserted = r.metrics.get("numInsertedRows").copied().unwrap_or(0);
    Ok(report)
}

/// The line at `at` of `src` without its `\n` (at most `max` bytes; it was validated).
fn read_line(src: &dyn EditSource, source: &str, at: u64, max: usize) -> Result<String> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut pos = at;
    loop {
        let n = src.read_at(&mut buf, pos).map_err(|e| Error::io("read", source, e))?;
        if n == 0 {
            break;
        }
        match memchr::memchr(b'\n', &buf[..n]) {
            Some(i) => {
                out.extend_from_slice(&buf[..i]);
                break;
            }
            None => out.extend_from_slice(&buf[..n]),
        }
        pos += n as u64;
        if out.len() > max.saturating_add(4) {
            return Err(Error::Internal(format!("{source}: a validated line at offset {at} grew past the limit")));
        }
    }
    String::from_utf8(out).map_err(|e| Error::Internal(format!("{source}: a validated line is not UTF-8: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(a: &[u64], b: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        let mut i = 0usize;
        for h in diff(a, b) {
            out.extend_from_slice(&a[i..h.base.start as usize]);
            out.extend_from_slice(&b[h.new.start as usize..h.new.end as usize]);
            i = h.base.end as usize;
        }
        out.extend_from_slice(&a[i..]);
        out
    }

    #[test]
    fn diff_rebuilds_the_new_rows() {
        let cases: Vec<(Vec<u64>, Vec<u64>)> = vec![
            (vec![1, 2, 3, 4], vec![1, 2, 4]),
            (vec![1, 2, 3], vec![1, 2, 3, 9]),
            (vec![1, 2, 3], vec![]),
            (vec![], vec![5]),
            (vec![1, 1, 1, 2], vec![1, 2, 1, 1]),
            (vec![1, 2, 3, 4, 5, 6], vec![6, 5, 4, 3, 2, 1]),
            (vec![1, 2, 3, 4, 5, 6], vec![1, 9, 3, 4, 8, 6, 7]),
        ];
        for (a, b) in cases {
            assert_eq!(apply(&a, &b), b, "{a:?} -> {b:?}");
        }
    }

    #[test]
    fn one_deleted_row_is_one_hunk() {
        let a: Vec<u64> = (0..1000).collect();
        let mut b = a.clone();
        b.remove(500);
        assert_eq!(diff(&a, &b), vec![Hunk { base: 500..501, new: 500..500 }]);
    }

    #[test]
    fn hash_rows_skips_blank_lines_and_finds_offsets() {
        let schema = crate::format::schema::Schema::parse_cli(&["id:int".to_string()]).unwrap();
        let mut check = LineCheck::new(schema);
        let mut seen = Vec::new();
        let input = b"{\"id\":1}\n\n  \n{ \"id\" : 2 }\n{\"id\":3}";
        hash_rows(&mut check, "t", &mut &input[..], |o, h| seen.push((o, h))).unwrap();
        let offs: Vec<u64> = seen.iter().map(|s| s.0).collect();
        assert_eq!(offs, vec![0, 13, 26]);
        assert_eq!(seen[1].1, row_hash(b"{\"id\":2}"));
    }
}
