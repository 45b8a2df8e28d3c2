//! Row-level changes (docs/FORMAT.md "Row-level changes"): `read --where` with data skipping,
//! and DELETE, UPDATE and MERGE as copy-on-write commits. Each change reads the latest version,
//! skips the data files whose statistics prove no row is affected, rewrites each file holding an
//! affected row once (the rows in their order, validated again like appended ones), and commits
//! the `remove`s and `add`s in one WriteSerializable version (docs/FORMAT.md "Concurrency").
//!
//! The order of the table's rows is kept: the new file takes the place of the one it replaces,
//! so every file after the first rewritten one is re-added in place (`add` with `dataChange:
//! false`, as OPTIMIZE re-adds), and a blind append this change is rebased over is re-added
//! after them.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::format::expr::{Assignment, Predicate, Row};

use crate::error::{Error, IoContext, Result};
use crate::format::actions::{Action, Add, Txn, encode_path};
use crate::format::rows::{self, LineCheck};
use crate::format::schema::Schema;
use crate::log::snapshot::{FileEntry, Snapshot};
use crate::table::cdc::{self, ChangeData};
use crate::table::{Table, WriteOptions};

/// Default of [`MergeOptions::max_source_bytes`]: 1 GiB.
pub const DEFAULT_MAX_SOURCE_BYTES: u64 = 1 << 30;

/// Which files of a version data skipping keeps (docs/FORMAT.md "Row-level changes").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipping {
    /// Live files of the version.
    pub files_total: usize,
    /// Files whose statistics prove no row can match: not opened.
    pub files_skipped: usize,
    /// Files opened and read.
    pub files_read: usize,
}

/// What `read --where` reads and prints.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Only rows for which this is true.
    pub predicate: Option<Predicate>,
    /// Only these top-level columns, in this order (`--columns`).
    pub columns: Option<Vec<String>>,
    /// At most this many rows (`--limit`).
    pub limit: Option<u64>,
}

/// What [`read`] did.
#[derive(Debug, Clone, Default)]
pub struct ReadReport {
    /// The files skipped and read.
    pub skipping: Skipping,
    /// Rows read from the files read.
    pub rows_read: u64,
    /// Rows printed.
    pub rows_out: u64,
}

/// The `add` actions of `snap`'s live files, in snapshot order, and for each whether `pred` may
/// match one of its rows. Errors: as [`Table::add_actions`].
fn plan(table: &Table, snap: &Snapshot, pred: Option<&Predicate>) -> Result<(Vec<Add>, Vec<bool>, Skipping)> {
    let files: Vec<&FileEntry> = snap.files.iter().map(|f| &**f).collect();
    let adds = table.add_actions(&files)?;
    let may: Vec<bool> = adds
        .iter()
        .map(|a| pred.is_none_or(|p| p.may_match(a.stats.as_deref())))
        .collect();
    let read = may.iter().filter(|m| **m).count();
    Ok((
        adds,
        may.clone(),
        Skipping {
            files_total: files.len(),
            files_skipped: files.len() - read,
            files_read: read,
        },
    ))
}

/// Call `each(line number, line without its newline)` for each line of `reader` (the rows of the
/// data file `path`) until it returns `false`. Errors: [`Error::Corrupt`] naming the file and
/// line for a line longer than `max` bytes or a last line without newline; errors of `each`.
fn each_line(
    mut reader: impl BufRead,
    path: &Path,
    max: usize,
    mut each: impl FnMut(u64, &[u8]) -> Result<bool>,
) -> Result<()> {
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        buf.clear();
        let got = (&mut reader)
            .take(max as u64 + 1)
            .read_until(b'\n', &mut buf)
            .ctx("read", path)?;
        if got == 0 {
            return Ok(());
        }
        n += 1;
        if buf.last() != Some(&b'\n') {
            let reason = match buf.len() > max {
                true => format!("line {n} is longer than {max} bytes"),
                false => format!("line {n}, the last, has no newline"),
            };
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                reason,
            });
        }
        buf.pop();
        if !each(n, &buf)? {
            return Ok(());
        }
    }
}

/// `line` (line `n` of the data file `path`) as a row. Errors: [`Error::Corrupt`] naming them.
fn row<'a>(line: &'a [u8], path: &Path, n: u64) -> Result<Row<'a>> {
    let corrupt = |why: String| Error::Corrupt {
        path: path.to_path_buf(),
        reason: format!("line {n}: {why}"),
    };
    let text = std::str::from_utf8(line).map_err(|e| corrupt(e.to_string()))?;
    Row::parse(text).map_err(corrupt)
}

/// An error evaluating an expression on line `n` of the data file `path`.
fn eval_error(path: &Path, n: u64, why: String) -> Error {
    Error::InvalidArgument(format!("{}, line {n}: {why}", path.display()))
}

/// Print the rows of version `snap` that `opts` selects to `out`, canonical JSONL (or the
/// chosen columns), skipping the files whose statistics prove no row matches. Every file that
/// is read is opened (and its size checked) before the first byte is printed.
///
/// Errors: [`Error::InvalidArgument`] for an unknown column in `columns`; as
/// [`Table::open_rows`]; [`Error::Corrupt`] for a row that is not a JSON object.
pub fn read(table: &Table, snap: &Snapshot, opts: &ReadOptions, out: &mut dyn Write) -> Result<ReadReport> {
    if let Some(d) = opts.columns.as_deref().and_then(first_repeated) {
        return Err(Error::InvalidArgument(format!(
            "{} names {} twice (a row holds each key once)",
            crate::util::spelling::opt("columns"),
            crate::util::quote::quoted(d)
        )));
    }
    let columns: Option<Vec<String>> = match &opts.columns {
        None => None,
        Some(cols) => Some(
            cols.iter()
                .map(|c| {
                    snap.schema
                        .columns
                        .iter()
                        .find(|s| s.name == *c)
                        .map(|s| s.name.clone())
                        .ok_or_else(|| {
                            let names: Vec<&str> = snap.schema.columns.iter().map(|c| c.name.as_str()).collect();
                            Error::InvalidArgument(format!(
                                "{} no column {} in the table (its columns: {})",
                                crate::util::spelling::opt("columns"),
                                crate::util::quote::quoted(c),
                                names.join(", ")
                            ))
                        })
                })
                .collect::<Result<_>>()?,
        ),
    };
    let (_, may, skipping) = plan(table, snap, opts.predicate.as_ref())?;
    let mut report = ReadReport {
        skipping,
        ..Default::default()
    };
    let chosen: Vec<Arc<FileEntry>> = snap
        .files
        .iter()
        .zip(&may)
        .filter(|(_, m)| **m)
        .map(|(f, _)| f.clone())
        .collect();
    // All opened and checked first, a bounded number kept open ([`Table::open_data_files`]).
    let mut opened = crate::table::DataFiles::open(table, chosen, &snap.schema, None)?;
    let quoted_keys: Vec<String> = columns
        .iter()
        .flatten()
        .map(|c| serde_json::to_string(c).unwrap_or_default())
        .collect();
    let mut line_out = Vec::new();
    let limit = opts.limit.unwrap_or(u64::MAX);
    while report.rows_out < limit {
        let Some((f, file)) = opened.next_file()? else {
            break;
        };
        let path = table.root().join(&f.path);
        let file = crate::table::CheckedLen::new(file, &f);
        each_line(BufReader::with_capacity(256 << 10, file), &path, usize::MAX >> 1, |n, line| {
            report.rows_read += 1;
            let needs_row = opts.predicate.is_some() || columns.is_some();
            if needs_row {
                let r = row(line, &path, n)?;
                if let Some(p) = &opts.predicate
                    && !p.matches(&r).map_err(|why| eval_error(&path, n, why))?
                {
                    return Ok(true);
                }
                if let Some(cols) = &columns {
                    line_out.clear();
                    line_out.push(b'{');
                    for (i, (c, k)) in cols.iter().zip(&quoted_keys).enumerate() {
                        if i > 0 {
                            line_out.push(b',');
                        }
                        line_out.extend_from_slice(k.as_bytes());
                        line_out.push(b':');
                        line_out.extend_from_slice(r.get(c).map_or("null", |v| v.get()).as_bytes());
                    }
                    line_out.extend_from_slice(b"}\n");
                    out.write_all(&line_out).map_err(|e| Error::io("write", "<output>", e))?;
                    report.rows_out += 1;
                    return Ok(report.rows_out < limit);
                }
            }
            out.write_all(line).map_err(|e| Error::io("write", "<output>", e))?;
            out.write_all(b"\n").map_err(|e| Error::io("write", "<output>", e))?;
            report.rows_out += 1;
            Ok(report.rows_out < limit)
        })?;
    }
    Ok(report)
}

/// What becomes of one row in a rewrite.
enum Fate {
    Keep,
    Drop,
    Replace(String),
    /// An edit's rows in place of this one (docs/MOUNT.md "Editing latest/data.jsonl"): rows
    /// inserted before or after it, and the row itself kept, replaced, or (when no piece is
    /// `Kept` or `Replacement`) deleted.
    Splice(Vec<(String, Piece)>),
}

/// What one row of a [`Fate::Splice`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    Inserted,
    Kept,
    Replacement,
}

/// How a change treats rows: `affected` is a pure test (used to find the files to rewrite),
/// `fate` decides each row of a file that is rewritten.
trait RowChange {
    fn affected(&self, r: &Row<'_>) -> std::result::Result<bool, String>;
    fn fate(&mut self, r: &Row<'_>, line: &[u8], n: u64, path: &Path) -> Result<Fate>;
}

/// Options of DELETE, UPDATE and MERGE.
#[derive(Debug, Clone, Default)]
pub struct ChangeOptions {
    /// `expect_version`, extra parameters and the longest line of a rewritten file.
    pub write: WriteOptions,
    /// Commit only if the table records a lower version for this application id (Delta `txn`;
    /// docs/FORMAT.md "Idempotent appends").
    pub txn: Option<(String, i64)>,
}

/// What a DELETE, UPDATE or MERGE did.
#[derive(Debug, Clone, Default)]
pub struct ChangeReport {
    /// The version committed; `None` when nothing was (see `reason`).
    pub version: Option<u64>,
    /// Why nothing was committed: `noMatch` or `txnAlreadyApplied`.
    pub reason: Option<&'static str>,
    /// The version the txn's application id records, with `txnAlreadyApplied`.
    pub txn_recorded: Option<i64>,
    /// Delta's operation (`DELETE`, `UPDATE`, `MERGE`).
    pub operation: &'static str,
    /// `commitInfo.operationMetrics`, Delta's names.
    pub metrics: BTreeMap<String, u64>,
    /// The files skipped and read.
    pub skipping: Skipping,
}

/// One rewritten data file: the new file (held, not yet fsynced) and its `add`, or `None` when
/// no row is left.
struct Rewritten {
    new: Option<(Add, File)>,
    kept: u64,
    changed: u64,
    dropped: u64,
}

/// Rewrite the rows of `f` through `change` into a new `part-<uuid>.jsonl`, validated and
/// canonicalised against `schema` ([`LineCheck`]), with its statistics; each deleted row, and
/// each updated row as it was and as it is, goes to `cdc` too. Errors: [`Error::BadInput`]
/// naming the new file's line and column for a value that does not fit; errors of reading `f`,
/// of `change` and of writing `cdc`.
fn rewrite_file(
    table: &Table,
    schema: &Schema,
    f: &FileEntry,
    change: &mut dyn RowChange,
    cdc: &mut ChangeData<'_>,
    max_line: usize,
) -> Result<Rewritten> {
    let (src, _) = table.open_rows_fresh(f, schema)?;
    let path = table.root().join(&f.path);
    let name = format!("part-{}.jsonl", uuid::Uuid::new_v4());
    let new_path = table.root().join(&name);
    let source = f.path.clone();
    let created = table.dir().create_new(&name, 0o644)?;
    let result = (|| {
        crate::table::hold_data_file(table.dir(), &name, &created)?;
        let mut check = LineCheck::new(schema.clone()).with_max_line_bytes(max_line);
        let mut pending = Vec::with_capacity(1 << 20);
        let mut canon = Vec::with_capacity(1 << 20);
        let mut out = std::io::BufWriter::with_capacity(256 << 10, &created);
        let (mut kept, mut changed, mut dropped) = (0u64, 0u64, 0u64);
        // Validate the pending lines and write their canonical rows; returns the rows written.
        let flush = |check: &mut LineCheck,
                     pending: &mut Vec<u8>,
                     canon: &mut Vec<u8>,
                     out: &mut std::io::BufWriter<&File>|
         -> Result<()> {
            check.feed(&source, pending, canon)?;
            out.write_all(canon).ctx("write", &new_path)?;
            pending.clear();
            canon.clear();
            Ok(())
        };
        each_line(BufReader::with_capacity(256 << 10, src), &path, usize::MAX >> 1, |n, line| {
            let r = row(line, &path, n)?;
            match change.fate(&r, line, n, &path)? {
                Fate::Keep => {
                    kept += 1;
                    pending.extend_from_slice(line);
                    pending.push(b'\n');
                }
                Fate::Drop => {
                    dropped += 1;
                    cdc.push(line, cdc::DELETE)?;
                    return Ok(true);
                }
                Fate::Splice(pieces) => {
                    if !pending.is_empty() {
                        flush(&mut check, &mut pending, &mut canon, &mut out)?;
                    }
                    let mut me = false;
                    for (text, piece) in pieces {
                        pending.extend_from_slice(text.as_bytes());
                        pending.push(b'\n');
                        check.feed(&source, &pending, &mut canon)?;
                        match piece {
                            Piece::Inserted => cdc.push(&canon, cdc::INSERT)?,
                            Piece::Kept => {
                                me = true;
                                kept += 1;
                            }
                            Piece::Replacement => {
                                me = true;
                                changed += 1;
                                cdc.push(line, cdc::PREIMAGE)?;
                                cdc.push(&canon, cdc::POSTIMAGE)?;
                            }
                        }
                        out.write_all(&canon).ctx("write", &new_path)?;
                        pending.clear();
                        canon.clear();
                    }
                    if !me {
                        dropped += 1;
                        cdc.push(line, cdc::DELETE)?;
                    }
                    return Ok(true);
                }
                Fate::Replace(new) => {
                    changed += 1;
                    // The rows before it first, then the new row alone, so its canonical form
                    // is what the change data file records as the post-image.
                    if !pending.is_empty() {
                        flush(&mut check, &mut pending, &mut canon, &mut out)?;
                    }
                    pending.extend_from_slice(new.as_bytes());
                    pending.push(b'\n');
                    check.feed(&source, &pending, &mut canon)?;
                    cdc.push(line, cdc::PREIMAGE)?;
                    cdc.push(&canon, cdc::POSTIMAGE)?;
                    out.write_all(&canon).ctx("write", &new_path)?;
                    pending.clear();
                    canon.clear();
                    return Ok(true);
                }
            }
            if pending.len() >= 1 << 20 {
                flush(&mut check, &mut pending, &mut canon, &mut out)?;
            }
            Ok(true)
        })?;
        flush(&mut check, &mut pending, &mut canon, &mut out)?;
        let stats = check.finish(&source, &mut canon)?;
        out.write_all(&canon).ctx("write", &new_path)?;
        out.flush().ctx("write", &new_path)?;
        drop(out);
        Ok((stats, kept, changed, dropped))
    })();
    match result {
        Ok((stats, kept, changed, dropped)) if stats.num_records > 0 => Ok(Rewritten {
            new: Some((Table::new_add(name, schema, &stats), created)),
            kept,
            changed,
            dropped,
        }),
        Ok((_, kept, changed, dropped)) => {
            let _ = table.dir().try_unlink(&name);
            Ok(Rewritten {
                new: None,
                kept,
                changed,
                dropped,
            })
        }
        Err(e) => {
            let _ = table.dir().try_unlink(&name);
            Err(e)
        }
    }
}

/// Whether some row of `f` is affected by `change` (reads until the first one).
fn file_affected(table: &Table, schema: &Schema, f: &FileEntry, change: &dyn RowChange) -> Result<bool> {
    let (src, _) = table.open_rows(f, schema)?;
    let path = table.root().join(&f.path);
    let mut hit = false;
    each_line(BufReader::with_capacity(256 << 10, src), &path, usize::MAX >> 1, |n, line| {
        let r = row(line, &path, n)?;
        hit = change.affected(&r).map_err(|why| eval_error(&path, n, why))?;
        Ok(!hit)
    })?;
    Ok(hit)
}

/// What [`run_change`] commits besides the rewritten files.
struct Plan<'a> {
    operation: &'static str,
    params: BTreeMap<String, String>,
    /// Extra new files added at the end (MERGE's inserted rows), held, not yet fsynced.
    extra: Vec<(Add, File)>,
    /// Fill in the metrics from the totals (kept, changed, dropped rows; removed, added files).
    metrics: &'a dyn Fn(&Totals) -> BTreeMap<String, u64>,
    /// The change read every live file, not only those `may` keeps (an edit of the mount's
    /// `data.jsonl`): a concurrent commit that removed any of them conflicts.
    read_all: bool,
}

/// The totals of a change's rewrite.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    copied: u64,
    changed: u64,
    dropped: u64,
    removed_files: u64,
    added_files: u64,
    /// Change data files written (0 or 1).
    change_files: u64,
}

/// The common part of DELETE, UPDATE and MERGE: find the affected files among those `may`
/// keeps, rewrite each once, and commit (docs/FORMAT.md "Row-level changes").
#[allow(clippy::too_many_arguments)]
fn run_change(
    table: &Table,
    read_version: u64,
    snap: &Snapshot,
    adds: Vec<Add>,
    may: &[bool],
    skipping: Skipping,
    change: &mut dyn RowChange,
    plan: Plan<'_>,
    opts: &ChangeOptions,
) -> Result<ChangeReport> {
    let schema = &snap.schema;
    let max_line = opts.write.max_line_bytes.unwrap_or(rows::DEFAULT_MAX_LINE_BYTES);
    let mut rewritten: Vec<(usize, Rewritten)> = Vec::new();
    let mut cdc = ChangeData::new(table);
    let cleanup = |rewritten: &[(usize, Rewritten)], extra: &[(Add, File)]| {
        for (_, r) in rewritten {
            if let Some((a, _)) = &r.new {
                let _ = table.dir().try_unlink(&a.path);
            }
        }
        for (a, _) in extra {
            let _ = table.dir().try_unlink(&a.path);
        }
    };
    for (i, f) in snap.files.iter().enumerate() {
        if !may[i] {
            continue;
        }
        let step = file_affected(table, schema, f, &*change)
            .and_then(|hit| hit.then(|| rewrite_file(table, schema, f, change, &mut cdc, max_line)).transpose());
        match step {
            Ok(Some(r)) => rewritten.push((i, r)),
            Ok(None) => {}
            Err(e) => {
                cleanup(&rewritten, &plan.extra);
                return Err(e);
            }
        }
    }
    let mut totals = Totals::default();
    for (_, r) in &rewritten {
        totals.copied += r.kept;
        totals.changed += r.changed;
        totals.dropped += r.dropped;
        totals.removed_files += 1;
        totals.added_files += u64::from(r.new.is_some());
    }
    totals.added_files += plan.extra.len() as u64;
    // The change data file (docs/FORMAT.md "The change feed"): a version with one is read from
    // it alone, so MERGE's inserted rows go in it too.
    let change_data = match (|| {
        if cdc.rows() > 0 {
            for (a, _) in &plan.extra {
                let path = table.root().join(&a.path);
                let f = table.dir().open_file(&a.path)?;
                each_line(BufReader::with_capacity(256 << 10, f), &path, usize::MAX >> 1, |_, line| {
                    cdc.push(line, cdc::INSERT)?;
                    Ok(true)
                })?;
            }
        }
        std::mem::replace(&mut cdc, ChangeData::new(table)).finish()
    })() {
        Ok(w) => w,
        Err(e) => {
            cleanup(&rewritten, &plan.extra);
            return Err(e);
        }
    };
    totals.change_files = u64::from(change_data.is_some());
    let metrics = (plan.metrics)(&totals);
    let mut report = ChangeReport {
        operation: plan.operation,
        metrics: metrics.clone(),
        skipping,
        ..Default::default()
    };
    // With a txn, a change that matches nothing still records the txn (as an append of no rows
    // does: docs/FORMAT.md "Idempotent appends").
    if rewritten.is_empty() && plan.extra.is_empty() && opts.txn.is_none() {
        if let Some(w) = &change_data {
            w.discard();
        }
        report.reason = Some("noMatch");
        return Ok(report);
    }
    // The actions: removes of the rewritten files; from the first of them on, every live file
    // in snapshot order (the new file in place of the old, the others re-added in place).
    let first = rewritten.first().map_or(snap.files.len(), |(i, _)| *i);
    let by_index: HashMap<usize, &Rewritten> = rewritten.iter().map(|(i, r)| (*i, r)).collect();
    let mut new_adds: Vec<Add> = Vec::new();
    let mut read_files: HashSet<String> = snap
        .files
        .iter()
        .zip(may)
        .filter(|(_, m)| **m || plan.read_all)
        .map(|(f, _)| f.path.to_string())
        .collect();
    for (i, (f, add)) in snap.files.iter().zip(adds).enumerate().skip(first) {
        match by_index.get(&i) {
            Some(r) => {
                if let Some((a, _)) = &r.new {
                    new_adds.push(a.clone());
                }
            }
            None => {
                read_files.insert(f.path.to_string());
                let mut a = add;
                a.data_change = false;
                a.path = encode_path(&a.path);
                new_adds.push(a);
            }
        }
    }
    new_adds.extend(plan.extra.iter().map(|(a, _)| a.clone()));
    let removed: Vec<&FileEntry> = rewritten.iter().map(|(i, _)| &*snap.files[*i]).collect();
    let paths: Vec<PathBuf> = rewritten
        .iter()
        .filter_map(|(_, r)| r.new.as_ref())
        .chain(plan.extra.iter())
        .map(|(a, _)| table.root().join(&a.path))
        .collect();
    let mut data: Vec<(&File, &Path)> = rewritten
        .iter()
        .filter_map(|(_, r)| r.new.as_ref())
        .chain(plan.extra.iter())
        .zip(&paths)
        .map(|((_, f), p)| (f, p.as_path()))
        .collect();
    if let Some(w) = &change_data {
        data.push((&w.file, w.path.as_path()));
    }
    let mut params = plan.params.clone();
    params.extend(opts.write.extra_params.iter().cloned());
    let text_metrics: BTreeMap<String, String> = metrics.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
    let appended: RefCell<Vec<Add>> = RefCell::new(Vec::new());
    let applied = std::cell::Cell::new(None);
    let build = |_: u64, ts: i64| {
        let mut actions = vec![crate::table::serializable_info(
            plan.operation,
            &params,
            &text_metrics,
            read_version,
            ts,
        )];
        if let Some((app, v)) = &opts.txn {
            actions.push(Action::txn(Txn {
                app_id: app.clone(),
                version: *v,
                last_updated: Some(ts),
            }));
        }
        actions.extend(Table::removes(&removed, ts));
        actions.extend(new_adds.iter().cloned().map(Action::add));
        actions.extend(appended.borrow().iter().cloned().map(|mut a| {
            a.path = encode_path(&a.path);
            Action::add(a)
        }));
        if let Some(w) = &change_data {
            let mut c = w.action.clone();
            c.path = encode_path(&c.path);
            actions.push(Action::cdc(c));
        }
        actions
    };
    // WriteSerializable (docs/FORMAT.md "Concurrency"): a commit that removed or re-added a
    // file this change read, or changed the metadata or protocol, conflicts; a blind append is
    // rebased over, its files re-added after this change's so the rows keep their order.
    let conflicts = |version: u64| {
        let commit = table.read_commit(version)?;
        let mut conflict =
            crate::table::commit::conflicts_reading(&commit, &read_files, &mut appended.borrow_mut());
        for t in commit.actions.iter().filter_map(|a| a.txn.as_ref()) {
            if let Some((app, v)) = &opts.txn
                && t.app_id == *app
                && t.version >= *v
            {
                applied.set(Some(t.version));
                conflict = true;
            }
        }
        Ok(conflict)
    };
    let res = crate::table::commit::commit_loop_checked(table, read_version, opts.write.expect_version, &data, build, conflicts);
    let files: Vec<&str> = paths
        .iter()
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()))
        .collect();
    if let Some(w) = &change_data
        && matches!(&res, Err(e) if !matches!(e, Error::NotDurable { .. }))
    {
        w.discard();
    }
    match (table.finish(res, &files, snap), applied.get()) {
        (Err(Error::ConcurrentWrite { .. }), Some(recorded)) => {
            report.reason = Some("txnAlreadyApplied");
            report.txn_recorded = Some(recorded);
            Ok(report)
        }
        (r, _) => {
            report.version = Some(r?);
            Ok(report)
        }
    }
}

/// The latest version, its snapshot, writability, `expect_version` and a recorded txn.
/// `Ok(Err(report))` when the txn was applied before.
fn begin(
    table: &Table,
    operation: &'static str,
    opts: &ChangeOptions,
) -> Result<std::result::Result<(u64, Snapshot), ChangeReport>> {
    let read_version = table.latest_version()?;
    let snap = table.snapshot(read_version)?;
    table.check_writable_as(&snap, &operation.to_ascii_lowercase())?;
    if let Some(e) = opts.write.expect_version.filter(|e| *e != read_version) {
        return Err(Error::ConcurrentWrite {
            table: table.root().to_path_buf(),
            read_version: e,
            version: read_version.max(e + 1),
        });
    }
    if let Some((app, v)) = &opts.txn
        && let Some(&recorded) = snap.txns.get(app)
        && recorded >= *v
    {
        return Ok(Err(ChangeReport {
            operation,
            reason: Some("txnAlreadyApplied"),
            txn_recorded: Some(recorded),
            ..Default::default()
        }));
    }
    Ok(Ok((read_version, snap)))
}

/// The metrics of a DELETE or UPDATE (Delta's names): `rows` (`numDeletedRows`,
/// `numUpdatedRows`) = `n`, and the copied rows and the files.
fn rewrite_metrics(rows: &str, n: u64, t: &Totals) -> BTreeMap<String, u64> {
    BTreeMap::from([
        (rows.to_string(), n),
        ("numCopiedRows".into(), t.copied),
        ("numOutputRows".into(), t.copied + t.changed),
        ("numRemovedFiles".into(), t.removed_files),
        ("numAddedFiles".into(), t.added_files),
        ("numAddedChangeFiles".into(), t.change_files),
    ])
}

/// The [`Plan`] of a DELETE or UPDATE with `pred` (parameter `predicate`, as delta-rs records).
fn predicate_plan<'a>(operation: &'static str, pred: &Predicate, metrics: &'a dyn Fn(&Totals) -> BTreeMap<String, u64>) -> Plan<'a> {
    Plan {
        operation,
        params: BTreeMap::from([("predicate".to_string(), pred.text().to_string())]),
        extra: Vec::new(),
        metrics,
        read_all: false,
    }
}

struct Delete<'a>(&'a Predicate);

impl RowChange for Delete<'_> {
    fn affected(&self, r: &Row<'_>) -> std::result::Result<bool, String> {
        self.0.matches(r)
    }
    fn fate(&mut self, r: &Row<'_>, _: &[u8], n: u64, path: &Path) -> Result<Fate> {
        Ok(match self.0.matches(r).map_err(|why| eval_error(path, n, why))? {
            true => Fate::Drop,
            false => Fate::Keep,
        })
    }
}

/// `DELETE FROM table WHERE predicate` (docs/CLI.md "Row-level changes"). The predicate is
/// parsed and type-checked by the caller against the latest schema ([`Predicate::parse`]; it is
/// checked again here against the version read). Nothing is committed when no row matches.
///
/// Errors: [`Error::InvalidArgument`] (the predicate no longer fits the schema, or an
/// evaluation error naming the file and line); [`Error::ConcurrentWrite`] (exit 3) when a commit
/// after the version read removed or re-added a file this change read, changed the metadata,
/// or `expect_version` no longer holds; errors of reading the data files and of the commit.
pub fn delete(table: &Table, predicate: &str, opts: &ChangeOptions) -> Result<ChangeReport> {
    let (read_version, snap) = match begin(table, "DELETE", opts)? {
        Ok(x) => x,
        Err(report) => return Ok(report),
    };
    let pred = Predicate::parse(&snap.schema, predicate)?;
    let (adds, may, skipping) = plan(table, &snap, Some(&pred))?;
    let metrics = |t: &Totals| rewrite_metrics("numDeletedRows", t.dropped, t);
    let plan = predicate_plan("DELETE", &pred, &metrics);
    run_change(table, read_version, &snap, adds, &may, skipping, &mut Delete(&pred), plan, opts)
}

struct Update<'a> {
    pred: &'a Predicate,
    sets: &'a [Assignment],
}

impl RowChange for Update<'_> {
    fn affected(&self, r: &Row<'_>) -> std::result::Result<bool, String> {
        self.pred.matches(r)
    }
    fn fate(&mut self, r: &Row<'_>, _: &[u8], n: u64, path: &Path) -> Result<Fate> {
        if !self.pred.matches(r).map_err(|why| eval_error(path, n, why))? {
            return Ok(Fate::Keep);
        }
        let mut values = Vec::with_capacity(self.sets.len());
        for s in self.sets {
            // A value that does not fit its column is bad data, as in an appended row: exit 5
            // naming the column (docs/CLI.md "Row-level changes").
            values.push(s.value_json(r).map_err(|(why, evaluating)| {
                if evaluating {
                    return eval_error(path, n, why);
                }
                Error::BadInput {
                    file: path.display().to_string(),
                    line: n,
                    column: crate::util::quote::quoted(&s.column),
                    reason: why,
                }
            })?);
        }
        let mut out = String::from("{");
        let mut first = true;
        let mut push = |out: &mut String, k: &str, v: &str| {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(&serde_json::to_string(k).unwrap_or_default());
            out.push(':');
            out.push_str(v);
        };
        let mut done = vec![false; self.sets.len()];
        for (k, v) in r.fields() {
            match self.sets.iter().position(|s| s.column == k) {
                Some(i) => {
                    push(&mut out, k, &values[i]);
                    done[i] = true;
                }
                None => push(&mut out, k, v.get()),
            }
        }
        for (i, s) in self.sets.iter().enumerate() {
            if !done[i] {
                push(&mut out, &s.column, &values[i]);
            }
        }
        out.push('}');
        Ok(Fate::Replace(out))
    }
}

/// `UPDATE table SET col = expr, ... WHERE predicate` (docs/CLI.md "Row-level changes"): each
/// matching row gets the new values (computed from the row before the change), validated as
/// appended rows are. Nothing is committed when no row matches.
///
/// Errors: as [`delete`]; [`Error::InvalidArgument`] for an assignment that does not fit the
/// schema (two of one column too); [`Error::BadInput`] naming the column when a new value is
/// not valid for it (NOT NULL, a decimal's precision).
pub fn update(table: &Table, predicate: &str, sets: &[String], opts: &ChangeOptions) -> Result<ChangeReport> {
    let (read_version, snap) = match begin(table, "UPDATE", opts)? {
        Ok(x) => x,
        Err(report) => return Ok(report),
    };
    let pred = Predicate::parse(&snap.schema, predicate)?;
    let sets = parse_sets(&snap.schema, sets)?;
    let (adds, may, skipping) = plan(table, &snap, Some(&pred))?;
    let metrics = |t: &Totals| rewrite_metrics("numUpdatedRows", t.changed, t);
    let plan = predicate_plan("UPDATE", &pred, &metrics);
    let mut change = Update { pred: &pred, sets: &sets };
    run_change(table, read_version, &snap, adds, &may, skipping, &mut change, plan, opts)
}

/// Parse `--set` assignments; a column set twice is refused. Errors: [`Error::InvalidArgument`].
pub fn parse_sets(schema: &Schema, sets: &[String]) -> Result<Vec<Assignment>> {
    if sets.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "update needs at least one {} 'COLUMN = EXPRESSION'",
            crate::util::spelling::opt("set")
        )));
    }
    let mut out: Vec<Assignment> = Vec::new();
    for s in sets {
        let a = Assignment::parse(schema, s)?;
        if out.iter().any(|o| o.column == a.column) {
            return Err(Error::InvalidArgument(format!(
                "{} column {} is set twice",
                crate::util::spelling::opt("set"),
                crate::util::quote::quoted(&a.column)
            )));
        }
        out.push(a);
    }
    Ok(out)
}

/// What MERGE does with its source (docs/CLI.md "Row-level changes").
#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    /// The key columns (`--on`).
    pub on: Vec<String>,
    /// A boolean column of the source (not of the table): a matched target row whose source row
    /// has it true is deleted; the column is never stored (`--delete-when`).
    pub delete_when: Option<String>,
    /// Source rows that match no target row are not inserted (`--ignore-unmatched`).
    pub ignore_unmatched: bool,
    /// The most bytes of canonical source rows kept in memory (`--max-source-bytes`;
    /// [`DEFAULT_MAX_SOURCE_BYTES`] when 0).
    pub max_source_bytes: u64,
    /// Commit options.
    pub change: ChangeOptions,
}

/// One source row of a MERGE.
struct SourceRow {
    line: u64,
    canonical: String,
    delete: bool,
    matched: bool,
}

struct Merge<'a> {
    on: &'a [String],
    source: HashMap<String, Vec<usize>>,
    rows: Vec<SourceRow>,
    file: &'a str,
}

/// The first name of `names` that an earlier one repeats.
fn first_repeated(names: &[String]) -> Option<&str> {
    let mut seen = std::collections::HashSet::new();
    names.iter().find(|n| !seen.insert(n.as_str())).map(String::as_str)
}

/// The key of a row: the raw JSON of each key column, `None` when one is NULL (a NULL key
/// matches nothing, as `=` in SQL).
fn key_of(r: &Row<'_>, on: &[String]) -> Option<String> {
    let mut k = String::new();
    for c in on {
        let v = r.get(c).map_or("null", |v| v.get());
        if v == "null" {
            return None;
        }
        // Canonical JSON has one form per value but one: a float's -0.0, which equals 0.0.
        k.push_str(if v == "-0.0" { "0.0" } else { v });
        k.push('\u{0}');
    }
    Some(k)
}

impl RowChange for Merge<'_> {
    fn affected(&self, r: &Row<'_>) -> std::result::Result<bool, String> {
        Ok(key_of(r, self.on).is_some_and(|k| self.source.contains_key(&k)))
    }
    fn fate(&mut self, r: &Row<'_>, _: &[u8], n: u64, path: &Path) -> Result<Fate> {
        let Some(ids) = key_of(r, self.on).and_then(|k| self.source.get(&k)) else {
            return Ok(Fate::Keep);
        };
        if ids.len() > 1 {
            let (a, b) = (&self.rows[ids[0]], &self.rows[ids[1]]);
            return Err(Error::BadInput {
                file: self.file.to_string(),
                line: b.line,
                column: self.on.join(","),
                reason: format!(
                    "lines {} and {} have the same key and both match the target row at {}, line {n}: \
                     a MERGE may change a target row only once (as Delta refuses)",
                    a.line,
                    b.line,
                    path.display()
                ),
            });
        }
        let s = &mut self.rows[ids[0]];
        s.matched = true;
        Ok(if s.delete { Fate::Drop } else { Fate::Replace(s.canonical.clone()) })
    }
}

/// Read MERGE's source rows from `input`: each a JSON object of the table's columns (plus the
/// marker column), validated and canonicalised like appended rows. Errors: [`Error::BadInput`]
/// naming the line; [`Error::InvalidArgument`] past `max` bytes.
fn read_source(
    schema: &Schema,
    name: &str,
    input: impl BufRead,
    opts: &MergeOptions,
    max: u64,
) -> Result<Vec<SourceRow>> {
    let mut out = Vec::new();
    let mut bytes = 0u64;
    let max_line = opts.change.write.max_line_bytes.unwrap_or(rows::DEFAULT_MAX_LINE_BYTES);
    let mut canon = Vec::new();
    let mut n = 0u64;
    let mut input = input;
    let mut line = Vec::new();
    loop {
        line.clear();
        let got = (&mut input)
            .take(max_line as u64 + 2)
            .read_until(b'\n', &mut line)
            .ctx("read", name)?;
        if got == 0 {
            break;
        }
        n += 1;
        if line.len() > max_line + 1 || (line.len() > max_line && line.last() != Some(&b'\n')) {
            return Err(Error::BadInput {
                file: name.to_string(),
                line: n,
                column: "1".into(),
                reason: format!("the line is longer than the maximum of {max_line} bytes"),
            });
        }
        let text = String::from_utf8_lossy(&line);
        let trimmed = text.trim();
        if trimmed.is_empty() {
            continue;
        }
        let bad = |column: &str, reason: String| Error::BadInput {
            file: name.to_string(),
            line: n,
            column: column.to_string(),
            reason,
        };
        let (body, delete) = match &opts.delete_when {
            None => (trimmed.to_string(), false),
            Some(col) => {
                let mut obj: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(trimmed).map_err(|e| bad("1", format!("not a JSON object: {e}")))?;
                let flag = match obj.remove(col) {
                    None | Some(serde_json::Value::Null) => false,
                    Some(serde_json::Value::Bool(b)) => b,
                    Some(other) => {
                        return Err(bad(
                            &format!("\"{col}\""),
                            format!(
                                "the {} column must be true, false or null, not {other}",
                                crate::util::spelling::opt("delete_when")
                            ),
                        ));
                    }
                };
                (serde_json::to_string(&obj).unwrap_or_default(), flag)
            }
        };
        canon.clear();
        // Line numbers in errors are the source's: feed one line per check.
        let mut check = LineCheck::new(schema.clone()).with_max_line_bytes(max_line);
        let fed = check
            .feed(name, body.as_bytes(), &mut canon)
            .and_then(|()| check.finish(name, &mut canon));
        if let Err(Error::BadInput { column, reason, .. }) = fed {
            return Err(bad(&column, reason));
        }
        fed?;
        bytes += canon.len() as u64;
        if bytes > max {
            return Err(Error::InvalidArgument(format!(
                "{name}: the source's rows take more than {max} bytes in memory ({})",
                crate::util::spelling::opt("max_source_bytes")
            )));
        }
        let canonical = String::from_utf8_lossy(canon.strip_suffix(b"\n").unwrap_or(&canon)).into_owned();
        out.push(SourceRow {
            line: n,
            canonical,
            delete,
            matched: false,
        });
    }
    Ok(out)
}

/// `MERGE INTO table USING source ON key = key WHEN MATCHED THEN UPDATE SET * (or DELETE when
/// the marker is true) WHEN NOT MATCHED THEN INSERT *` (docs/CLI.md "Row-level changes"): a
/// source row whose key matches a target row replaces it (or deletes it), the others are
/// inserted as one new file after the table's rows (unless `ignore_unmatched`). Nothing is
/// committed when nothing changes.
///
/// Errors: [`Error::InvalidArgument`] for an unknown key column; [`Error::BadInput`] for a bad
/// source row, or two source rows with one key matching a target row; as [`delete`].
pub fn merge(table: &Table, source: &str, input: impl BufRead, opts: &MergeOptions) -> Result<ChangeReport> {
    let (read_version, snap) = match begin(table, "MERGE", &opts.change)? {
        Ok(x) => x,
        Err(report) => return Ok(report),
    };
    if opts.on.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "merge needs {} KEY[,KEY...]",
            crate::util::spelling::opt("on")
        )));
    }
    if let Some(d) = first_repeated(&opts.on) {
        return Err(Error::InvalidArgument(format!(
            "{} names {} twice",
            crate::util::spelling::opt("on"),
            crate::util::quote::quoted(d)
        )));
    }
    for k in &opts.on {
        if !snap.schema.columns.iter().any(|c| c.name == *k) {
            return Err(Error::InvalidArgument(format!(
                "{} no column {} in the table",
                crate::util::spelling::opt("on"),
                crate::util::quote::quoted(k)
            )));
        }
    }
    if let Some(d) = &opts.delete_when
        && snap.schema.columns.iter().any(|c| c.name == *d)
    {
        return Err(Error::InvalidArgument(format!(
            "{} {}: a column of the table; the marker must be a column of the source only",
            crate::util::spelling::opt("delete_when"),
            crate::util::quote::quoted(d)
        )));
    }
    let max = match opts.max_source_bytes {
        0 => DEFAULT_MAX_SOURCE_BYTES,
        n => n,
    };
    let rows = read_source(&snap.schema, source, input, opts, max)?;
    let mut index: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        let row = Row::parse(&r.canonical).map_err(|e| Error::Internal(format!("a canonical row does not parse: {e}")))?;
        if let Some(k) = key_of(&row, &opts.on) {
            index.entry(k).or_default().push(i);
        }
    }
    // Data skipping: a file whose key range holds no source key is not read.
    let pred = key_range(&snap.schema, &opts.on, &rows);
    let (adds, may, skipping) = plan(table, &snap, pred.as_ref())?;
    let mut change = Merge {
        on: &opts.on,
        source: index,
        rows,
        file: source,
    };
    let num_source = change.rows.len() as u64;
    // The rewrite runs before the inserted rows are known: they are written by `run_change`'s
    // caller below through a second pass over the matches, so rewrite first.
    let schema = snap.schema.clone();
    let ignore = opts.ignore_unmatched;
    let inserted = std::cell::Cell::new(0u64);
    let merge_metrics = |t: &Totals| {
        BTreeMap::from([
            ("numSourceRows".into(), num_source),
            ("numTargetRowsInserted".into(), inserted.get()),
            ("numTargetRowsUpdated".into(), t.changed),
            ("numTargetRowsDeleted".into(), t.dropped),
            ("numTargetRowsCopied".into(), t.copied),
            ("numOutputRows".into(), t.copied + t.changed + inserted.get()),
            ("numTargetFilesAdded".into(), t.added_files),
            ("numTargetFilesRemoved".into(), t.removed_files),
            ("numAddedFiles".into(), t.added_files),
            ("numRemovedFiles".into(), t.removed_files),
            ("numAddedChangeFiles".into(), t.change_files),
        ])
    };
    let params = BTreeMap::from([
        (
            "predicate".to_string(),
            opts.on.iter().map(|k| format!("source.{k} = target.{k}")).collect::<Vec<_>>().join(" AND "),
        ),
        (
            "matchedPredicates".to_string(),
            match &opts.delete_when {
                Some(d) => format!(r#"[{{"predicate":"source.{d}","actionType":"delete"}},{{"actionType":"update"}}]"#),
                None => r#"[{"actionType":"update"}]"#.to_string(),
            },
        ),
        (
            "notMatchedPredicates".to_string(),
            if ignore { "[]".to_string() } else { r#"[{"actionType":"insert"}]"#.to_string() },
        ),
    ]);
    let plan = Plan {
        operation: "MERGE",
        params,
        extra: Vec::new(),
        metrics: &merge_metrics,
        read_all: false,
    };
    let mut inserts = InsertLater {
        merge: &mut change,
        table,
        schema: &schema,
        ignore,
        inserted: &inserted,
        max_line: opts.change.write.max_line_bytes.unwrap_or(rows::DEFAULT_MAX_LINE_BYTES),
    };
    run_change_then(table, read_version, &snap, adds, &may, skipping, &mut inserts, plan, &opts.change)
}

/// A `k1 IN (...) AND k2 IN (...)` predicate over the source's distinct values of the key
/// columns `on`, for data skipping; a column of another type, or with more than 1,000 distinct
/// values, is left out (`None` when none is left).
fn key_range(schema: &Schema, on: &[String], rows: &[SourceRow]) -> Option<Predicate> {
    use crate::format::schema::ColumnType as T;
    let parsed: Vec<Row<'_>> = rows.iter().filter_map(|r| Row::parse(&r.canonical).ok()).collect();
    let mut parts = Vec::new();
    for col in on {
        let Some(ty) = schema.columns.iter().find(|c| c.name == *col).map(|c| &c.ty) else {
            continue;
        };
        if !matches!(ty, T::Int | T::Str | T::Date | T::Timestamp | T::TimestampNtz | T::Decimal { .. }) {
            continue;
        }
        let mut lits = std::collections::BTreeSet::new();
        for row in &parsed {
            let raw = row.get(col).map_or("null", |v| v.get());
            if raw == "null" {
                continue;
            }
            let lit = match ty {
                T::Int | T::Decimal { .. } => Some(raw.to_string()),
                _ => serde_json::from_str::<String>(raw)
                    .ok()
                    .map(|s| format!("'{}'", s.replace('\'', "''"))),
            };
            match lit {
                Some(l) => lits.insert(l),
                None => break,
            };
        }
        if lits.is_empty() || lits.len() > 1000 {
            continue;
        }
        let name = format!("\"{}\"", col.replace('"', "\"\""));
        parts.push(format!("{name} IN ({})", lits.into_iter().collect::<Vec<_>>().join(", ")));
    }
    if parts.is_empty() {
        return None;
    }
    Predicate::parse(schema, &parts.join(" AND ")).ok()
}

/// MERGE's rows: the target rewrite, then the unmatched source rows as one new file.
struct InsertLater<'a, 'm> {
    merge: &'a mut Merge<'m>,
    table: &'a Table,
    schema: &'a Schema,
    ignore: bool,
    inserted: &'a std::cell::Cell<u64>,
    max_line: usize,
}

impl RowChange for InsertLater<'_, '_> {
    fn affected(&self, r: &Row<'_>) -> std::result::Result<bool, String> {
        self.merge.affected(r)
    }
    fn fate(&mut self, r: &Row<'_>, line: &[u8], n: u64, path: &Path) -> Result<Fate> {
        self.merge.fate(r, line, n, path)
    }
}

impl InsertLater<'_, '_> {
    /// The new file of the source rows no target row matched (and not marked for deletion).
    fn write_inserts(&mut self) -> Result<Option<(Add, File)>> {
        if self.ignore {
            return Ok(None);
        }
        let mut data = Vec::new();
        let mut count = 0u64;
        for r in self.merge.rows.iter().filter(|r| !r.matched && !r.delete) {
            data.extend_from_slice(r.canonical.as_bytes());
            data.push(b'\n');
            count += 1;
        }
        self.inserted.set(count);
        if count == 0 {
            return Ok(None);
        }
        new_rows_file(self.table, self.schema, self.merge.file, &mut &data[..], self.max_line).map(Some)
    }
}

/// A new `part-<uuid>.jsonl` of the rows read from `rows` (JSONL, validated and canonicalised
/// against `schema`, named `source` in errors), held, not yet fsynced, with its `add`.
/// Errors: [`Error::BadInput`]; errors of reading `rows` and of writing the file.
fn new_rows_file(table: &Table, schema: &Schema, source: &str, rows: &mut dyn Read, max_line: usize) -> Result<(Add, File)> {
    let name = format!("part-{}.jsonl", uuid::Uuid::new_v4());
    let path = table.root().join(&name);
    let created = table.dir().create_new(&name, 0o644)?;
    let result = (|| {
        crate::table::hold_data_file(table.dir(), &name, &created)?;
        let mut check = LineCheck::new(schema.clone()).with_max_line_bytes(max_line);
        let mut buf = vec![0u8; 1 << 20];
        let mut canon = Vec::with_capacity(1 << 20);
        let mut out = std::io::BufWriter::with_capacity(256 << 10, &created);
        loop {
            let n = rows.read(&mut buf).ctx("read", source)?;
            if n == 0 {
                break;
            }
            check.feed(source, &buf[..n], &mut canon)?;
            out.write_all(&canon).ctx("write", &path)?;
            canon.clear();
        }
        let stats = check.finish(source, &mut canon)?;
        out.write_all(&canon).ctx("write", &path)?;
        out.flush().ctx("write", &path)?;
        drop(out);
        Ok(stats)
    })();
    match result {
        Ok(stats) => Ok((Table::new_add(name, schema, &stats), created)),
        Err(e) => {
            let _ = table.dir().try_unlink(&name);
            Err(e)
        }
    }
}

/// [`run_change`] for MERGE: the inserted rows are known only after the rewrite saw every
/// match, so the rewrite runs first, then the inserts' file is written, then the commit.
#[allow(clippy::too_many_arguments)]
fn run_change_then(
    table: &Table,
    read_version: u64,
    snap: &Snapshot,
    adds: Vec<Add>,
    may: &[bool],
    skipping: Skipping,
    change: &mut InsertLater<'_, '_>,
    mut plan: Plan<'_>,
    opts: &ChangeOptions,
) -> Result<ChangeReport> {
    // Mark the matches of files the rewrite will not touch? A file without an affected row has
    // no match, so every match is seen by the rewrite. Find them first with the pure test.
    let schema = &snap.schema;
    let mut hits = Vec::new();
    for (i, f) in snap.files.iter().enumerate() {
        if may[i] && file_affected(table, schema, f, &*change)? {
            hits.push(i);
        }
    }
    // Mark matched source rows (pure: a second match is an error found by the rewrite).
    for &i in &hits {
        let f = &snap.files[i];
        let (src, _) = table.open_rows(f, schema)?;
        let path = table.root().join(&f.path);
        each_line(BufReader::with_capacity(256 << 10, src), &path, usize::MAX >> 1, |n, line| {
            let r = row(line, &path, n)?;
            if let Some(ids) = key_of(&r, change.merge.on).and_then(|k| change.merge.source.get(&k)) {
                for &id in ids {
                    change.merge.rows[id].matched = true;
                }
            }
            Ok(true)
        })?;
    }
    if let Some(extra) = change.write_inserts()? {
        plan.extra.push(extra);
    }
    run_change(table, read_version, snap, adds, may, skipping, change, plan, opts)
}

/// A run of rows an edit changed (docs/MOUNT.md "Editing latest/data.jsonl"): the rows `base` of
/// the version read (numbered from 0 in `data.jsonl` order) become the rows `new` of the edited
/// file (numbered from 0 too). An empty `base` inserts before base row `base.start` (after the
/// last row when it is the number of rows); an empty `new` deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// Rows of the version read.
    pub base: std::ops::Range<u64>,
    /// Rows of the edited file.
    pub new: std::ops::Range<u64>,
}

/// What an edit does to one data file it rewrites, row by row (numbers as in [`Hunk`]): the
/// change data of Delta's change data feed (`delete`, `insert`, `update_preimage` /
/// `update_postimage`). Rows of a hunk are paired in order: the first rows of `base` are
/// replaced by the first rows of `new`; the rest are deleted or inserted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileChanges {
    /// The file's index among the version's live files (snapshot order).
    pub file: usize,
    /// Base rows deleted.
    pub deleted: Vec<u64>,
    /// New rows inserted (not replacing a base row).
    pub inserted: Vec<u64>,
    /// (base row, new row) pairs: the base row replaced by the new one.
    pub replaced: Vec<(u64, u64)>,
}

/// What becomes of one base row of a rewritten file, and the new rows written around it.
#[derive(Debug, Clone)]
struct RowFate {
    before: Vec<u64>,
    /// `None`: deleted; `Some(None)`: kept; `Some(Some(n))`: replaced by new row `n`.
    me: Option<Option<u64>>,
    after: Vec<u64>,
}

/// The file holding base row `b`, given each file's number of rows (a file without rows holds
/// none).
fn file_of(starts: &[u64], file_rows: &[u64], b: u64) -> usize {
    let i = starts.partition_point(|s| *s <= b).saturating_sub(1);
    // Skip files without rows that start at the same number.
    (i..file_rows.len())
        .find(|j| starts[*j] <= b && b < starts[*j] + file_rows[*j])
        .unwrap_or(i)
}

/// Each row of the files `hunks` touch, as [`FileChanges`] per file (in file order) and the fate
/// of every changed base row; rows inserted after the last base row are left out (they go to a
/// new file).
fn fates(hunks: &[Hunk], file_rows: &[u64]) -> (Vec<FileChanges>, BTreeMap<u64, RowFate>) {
    let mut starts = Vec::with_capacity(file_rows.len());
    let mut total = 0u64;
    for r in file_rows {
        starts.push(total);
        total += r;
    }
    let mut by_file: BTreeMap<usize, FileChanges> = BTreeMap::new();
    let mut rows: BTreeMap<u64, RowFate> = BTreeMap::new();
    fn fate(rows: &mut BTreeMap<u64, RowFate>, b: u64) -> &mut RowFate {
        rows.entry(b).or_insert(RowFate {
            before: Vec::new(),
            me: Some(None),
            after: Vec::new(),
        })
    }
    for h in hunks {
        if h.base.is_empty() {
            if h.base.start >= total {
                continue;
            }
            let f = file_of(&starts, file_rows, h.base.start);
            let c = by_file.entry(f).or_insert_with(|| FileChanges { file: f, ..Default::default() });
            c.inserted.extend(h.new.clone());
            fate(&mut rows, h.base.start).before.extend(h.new.clone());
            continue;
        }
        let paired = (h.base.end - h.base.start).min(h.new.end - h.new.start);
        for k in 0..(h.base.end - h.base.start) {
            let b = h.base.start + k;
            let f = file_of(&starts, file_rows, b);
            let c = by_file.entry(f).or_insert_with(|| FileChanges { file: f, ..Default::default() });
            if k < paired {
                c.replaced.push((b, h.new.start + k));
                fate(&mut rows, b).me = Some(Some(h.new.start + k));
            } else {
                c.deleted.push(b);
                fate(&mut rows, b).me = None;
            }
        }
        let last = h.base.end - 1;
        let extra = h.new.start + paired..h.new.end;
        if !extra.is_empty() {
            let f = file_of(&starts, file_rows, last);
            let c = by_file.entry(f).or_insert_with(|| FileChanges { file: f, ..Default::default() });
            c.inserted.extend(extra.clone());
            fate(&mut rows, last).after.extend(extra);
        }
    }
    (by_file.into_values().collect(), rows)
}

/// The rows of an edit of a version's `data.jsonl`, for [`edit_rows`].
pub struct RowsEdit<'a> {
    /// The changed runs, in order, not overlapping ([`Hunk`]).
    pub hunks: &'a [Hunk],
    /// The number of rows of each live file of the version, in snapshot order.
    pub file_rows: &'a [u64],
    /// New row `n` of the edited file (one line, without its `\n`), asked in increasing order.
    pub line: &'a mut dyn FnMut(u64) -> Result<String>,
    /// The new rows after the last base row, as JSONL (read once), if any.
    pub appended: Option<&'a mut dyn Read>,
    /// How many rows `appended` holds.
    pub appended_rows: u64,
    /// The name errors give the edited file (`v/<n>/data.jsonl`).
    pub source: &'a str,
    /// `commitInfo.operationParameters`.
    pub params: BTreeMap<String, String>,
}

/// [`RowChange`] of an edit: the fate of each row of the rewritten files, found by its number.
struct EditChange<'a, 'b> {
    starts: HashMap<PathBuf, u64>,
    rows: BTreeMap<u64, RowFate>,
    line: &'a mut (dyn FnMut(u64) -> Result<String> + 'b),
}

impl RowChange for EditChange<'_, '_> {
    fn affected(&self, _: &Row<'_>) -> std::result::Result<bool, String> {
        Ok(true)
    }
    fn fate(&mut self, _: &Row<'_>, line: &[u8], n: u64, path: &Path) -> Result<Fate> {
        let Some(start) = self.starts.get(path) else {
            return Ok(Fate::Keep);
        };
        let b = start + n - 1;
        let Some(f) = self.rows.get(&b).cloned() else {
            return Ok(Fate::Keep);
        };
        if f.before.is_empty() && f.after.is_empty() && f.me == Some(None) {
            return Ok(Fate::Keep);
        }
        let mut out: Vec<(String, Piece)> = Vec::new();
        for r in &f.before {
            out.push(((self.line)(*r)?, Piece::Inserted));
        }
        match f.me {
            None => {}
            Some(None) => out.push((String::from_utf8_lossy(line).into_owned(), Piece::Kept)),
            Some(Some(r)) => out.push(((self.line)(r)?, Piece::Replacement)),
        }
        for r in &f.after {
            out.push(((self.line)(*r)?, Piece::Inserted));
        }
        Ok(if out.is_empty() { Fate::Drop } else { Fate::Splice(out) })
    }
}

/// Commit an edit of version `read_version`'s `data.jsonl` (docs/MOUNT.md "Editing
/// latest/data.jsonl"): each data file holding a changed row is rewritten once, copy-on-write as
/// DELETE and UPDATE do (the files after it re-added in place), and the rows after the last
/// base row become one new file. `DELETE` when the edit only deletes rows, else `UPDATE`. The
/// change read every file of the version: a concurrent commit that removed one conflicts; a
/// blind append is rebased over (docs/FORMAT.md "Isolation of row-level changes").
///
/// Errors: [`Error::BadInput`] naming `source`'s line for a row that does not fit the schema;
/// [`Error::ConcurrentWrite`]; errors of reading and writing the files and of the commit.
pub fn edit_rows(table: &Table, read_version: u64, edit: RowsEdit<'_>, opts: &ChangeOptions) -> Result<ChangeReport> {
    let snap = table.snapshot(read_version)?;
    table.check_writable_as(&snap, "update")?;
    let (adds, _, skipping) = plan(table, &snap, None)?;
    if edit.file_rows.len() != snap.files.len() {
        return Err(Error::Internal(format!(
            "an edit of version {read_version} counts {} files, the version has {}",
            edit.file_rows.len(),
            snap.files.len()
        )));
    }
    let (changes, rows) = fates(edit.hunks, edit.file_rows);
    let mut may = vec![false; snap.files.len()];
    let mut starts = HashMap::new();
    let mut at = 0u64;
    for (i, (f, n)) in snap.files.iter().zip(edit.file_rows).enumerate() {
        starts.insert(table.root().join(&f.path), at);
        at += n;
        may[i] = changes.iter().any(|c| c.file == i);
    }
    let deleted: u64 = changes.iter().map(|c| c.deleted.len() as u64).sum();
    let updated: u64 = changes.iter().map(|c| c.replaced.len() as u64).sum();
    let inserted: u64 = changes.iter().map(|c| c.inserted.len() as u64).sum::<u64>() + edit.appended_rows;
    let copied: u64 = changes
        .iter()
        .map(|c| edit.file_rows[c.file] - c.deleted.len() as u64 - c.replaced.len() as u64)
        .sum();
    let operation = match (deleted, updated, inserted == edit.appended_rows) {
        (0, 0, true) if inserted > 0 => "WRITE",
        _ if updated == 0 && inserted == 0 => "DELETE",
        _ => "UPDATE",
    };
    let metrics = move |t: &Totals| {
        let mut m = BTreeMap::from([
            ("numCopiedRows".to_string(), copied),
            ("numOutputRows".into(), copied + updated + inserted),
            ("numRemovedFiles".into(), t.removed_files),
            ("numAddedFiles".into(), t.added_files),
            ("numAddedChangeFiles".into(), t.change_files),
            ("numDeletedRows".into(), deleted),
        ]);
        if operation == "UPDATE" {
            m.insert("numUpdatedRows".into(), updated);
            m.insert("numInsertedRows".into(), inserted);
        }
        if operation == "WRITE" {
            m.insert("numOutputRows".into(), inserted);
            m.insert("numFiles".into(), t.added_files);
        }
        m
    };
    let mut params = edit.params;
    if operation == "WRITE" {
        params.insert("mode".into(), "Append".into());
    }
    let max_line = opts.write.max_line_bytes.unwrap_or(rows::DEFAULT_MAX_LINE_BYTES);
    let mut extra = Vec::new();
    if let Some(r) = edit.appended {
        extra.push(new_rows_file(table, &snap.schema, edit.source, r, max_line)?);
    }
    let plan = Plan {
        operation,
        params,
        extra,
        metrics: &metrics,
        read_all: true,
    };
    let mut change = EditChange {
        starts,
        rows,
        line: edit.line,
    };
    run_change(table, read_version, &snap, adds, &may, skipping, &mut change, plan, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_names_a_cut_line() {
        let p = Path::new("f");
        let mut seen = Vec::new();
        each_line(&b"{\"a\":1}\n{\"a\":2}\n"[..], p, 100, |n, l| {
            seen.push((n, l.to_vec()));
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen.len(), 2);
        let e = each_line(&b"{\"a\":1}\n{\"a\""[..], p, 100, |_, _| Ok(true)).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = each_line(&b"{\"a\":1234567}\n"[..], p, 4, |_, _| Ok(true)).unwrap_err();
        assert!(e.to_string().contains("longer than 4"), "{e}");
    }
}
