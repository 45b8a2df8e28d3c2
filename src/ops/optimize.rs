//! `OPTIMIZE` (Delta bin-packing compaction; docs/FORMAT.md "Optimize"): rewrite the latest
//! version's small data files into files near a target size, in one commit of `remove`s and `add`s
//! with `dataChange: false`.
//!
//! Order is kept: files before the first small one stay; from it on, runs of small files are
//! packed in order into bins of at most the target size (each bin one new file: the inputs'
//! bytes concatenated, so `read` gives the same bytes in the same order), and a file at or over
//! the target between them is re-added as is (same path, never also removed: one path in both an
//! `add` and a `remove` of one commit is not allowed) so that replay keeps it in place. The
//! commit is WriteSerializable: it rebases over blind appends, re-adding the files they added
//! after the optimized ones (`dataChange: false`), so the rows keep their order, and conflicts
//! with a commit that removed or re-added one of its inputs (an overwrite or a restore), or
//! changed the metadata.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufReader, Write};

use crate::format::actions::{Action, Add, Remove};
use crate::error::{Error, IoContext, Result};
use crate::format::rows;
use crate::log::snapshot::FileEntry;
use crate::table::{Table, WriteOptions};

/// Delta's default target file size for OPTIMIZE: 128 MiB.
pub const DEFAULT_TARGET_SIZE: u64 = 128 << 20;

/// What an optimize did.
#[derive(Debug, Default, Clone)]
pub struct OptimizeReport {
    /// The OPTIMIZE version, `None` when there was nothing to compact (nothing committed).
    pub version: Option<u64>,
    /// Data files removed (compacted).
    pub removed_files: usize,
    /// Their bytes.
    pub removed_bytes: u64,
    /// New data files written.
    pub added_files: usize,
    /// Live files after the commit.
    pub files_after: usize,
}

enum Step<'a> {
    /// Re-add a file as it is (to keep its place in the order).
    Keep(&'a FileEntry),
    /// Concatenate these files (two or more) into one new file.
    Pack(Vec<&'a FileEntry>),
}

/// Plan the bins of `files` (snapshot order) for `target` bytes: the index of the first file
/// that moves, and the steps from it on. `None` when no bin would hold two files. Files from
/// index `movable` on never move (they are re-added in place after the packed ones).
fn plan(files: &[std::sync::Arc<FileEntry>], target: u64, movable: usize) -> Option<(usize, Vec<Step<'_>>)> {
    let start = files[..movable.min(files.len())].iter().position(|f| f.size < target)?;
    let mut steps = Vec::new();
    let mut bin: Vec<&FileEntry> = Vec::new();
    let mut bin_size = 0u64;
    fn push_bin<'a>(bin: &mut Vec<&'a FileEntry>, steps: &mut Vec<Step<'a>>) {
        match bin.len() {
            0 => {}
            1 => steps.push(Step::Keep(bin[0])),
            _ => steps.push(Step::Pack(std::mem::take(bin))),
        }
        bin.clear();
    }
    for (i, f) in files.iter().enumerate().skip(start) {
        if f.size >= target || i >= movable {
            push_bin(&mut bin, &mut steps);
            bin_size = 0;
            steps.push(Step::Keep(f));
            continue;
        }
        if !bin.is_empty() && bin_size.saturating_add(f.size) > target {
            push_bin(&mut bin, &mut steps);
            bin_size = 0;
        }
        bin.push(f);
        bin_size = bin_size.saturating_add(f.size);
    }
    push_bin(&mut bin, &mut steps);
    // Leading kept files need not move.
    let lead = steps.iter().take_while(|s| matches!(s, Step::Keep(_))).count();
    if !steps.iter().any(|s| matches!(s, Step::Pack(_))) {
        return None;
    }
    let steps: Vec<Step<'_>> = steps.into_iter().skip(lead).collect();
    Some((start + lead, steps))
}

/// Bytes under which auto compaction packs a run of small files whatever the files' sizes (its
/// plan, [`plan_tiered`]; docs/FORMAT.md "Auto compaction"): 1 MiB, so a stream of small
/// commits rewrites at most 1 MiB per compaction below it (a table of a thousand one-row commits
/// still becomes one file).
pub const AUTO_COMPACT_FREE_BYTES: u64 = 1 << 20;

/// The most data files one auto compaction packs (docs/FORMAT.md "Auto compaction"): its
/// OPTIMIZE commit holds a `remove` per file packed, so this bounds the commit, the memory that
/// builds it and the files read, whatever the table holds (a table of a million small files is
/// compacted 10,000 files at a time, newest first, one compaction per write).
pub const AUTO_COMPACT_MAX_FILES: usize = 10_000;

/// Auto compaction's plan of `files` (snapshot order) for `target` bytes, in the shape of
/// [`plan`]: walked from the newest movable file back, a file joins the run of newer files
/// packed after it while the run stays within `target` and either stays within `free` bytes
/// or the file is no larger than the run. So a file of more than `free` bytes is rewritten only
/// when the bytes packed with it are at least its own, and its file at least doubles: past
/// `free`, a byte is rewritten at most log2(`target` / `free`) times, and a stream of small
/// commits costs a compaction at most `free` bytes plus what arrived (Delta's bin-packing,
/// [`plan`], rewrites the whole run below `target` each time). At most `max_files` files are
/// packed: the walk stops before the file that would pass it, and older files stay as they are.
/// `None` when no run holds two files.
fn plan_tiered(
    files: &[std::sync::Arc<FileEntry>],
    target: u64,
    free: u64,
    movable: usize,
    max_files: usize,
) -> Option<(usize, Vec<Step<'_>>)> {
    let end = movable.min(files.len());
    let start = files[..end].iter().position(|f| f.size < target)?;
    // Steps newest first; files from `end` on stay, in place after the packed ones.
    let mut rev: Vec<Step<'_>> = files[end..].iter().rev().map(|f| Step::Keep(f)).collect();
    let mut run: Vec<&FileEntry> = Vec::new();
    let mut run_size = 0u64;
    // Files packed by the runs closed so far.
    let mut packed = 0usize;
    fn close<'a>(run: &mut Vec<&'a FileEntry>, rev: &mut Vec<Step<'a>>, packed: &mut usize) {
        match run.len() {
            0 => {}
            1 => rev.push(Step::Keep(run[0])),
            n => {
                *packed += n;
                let mut bin = std::mem::take(run);
                bin.reverse();
                rev.push(Step::Pack(bin));
            }
        }
        run.clear();
    }
    // The oldest file the plan covers (files before it stay, untouched).
    let mut first = start;
    for (i, f) in files[start..end].iter().enumerate().rev() {
        if packed + run.len() >= max_files.max(2) {
            first = start + i + 1;
            break;
        }
        if f.size >= target {
            close(&mut run, &mut rev, &mut packed);
            run_size = 0;
            rev.push(Step::Keep(f));
            continue;
        }
        let joined = run_size.saturating_add(f.size);
        if !run.is_empty() && (joined > target || (joined > free && f.size > run_size)) {
            close(&mut run, &mut rev, &mut packed);
            run_size = 0;
        }
        run.push(f);
        run_size = run_size.saturating_add(f.size);
    }
    close(&mut run, &mut rev, &mut packed);
    if !rev.iter().any(|s| matches!(s, Step::Pack(_))) {
        return None;
    }
    rev.reverse();
    let lead = rev.iter().take_while(|s| matches!(s, Step::Keep(_))).count();
    let steps: Vec<Step<'_>> = rev.into_iter().skip(lead).collect();
    Some((first + lead, steps))
}

/// Write the concatenation of `inputs` as a new `part-<uuid>.jsonl` (bytes copied as they are,
/// fsynced), and its `add` action (`dataChange: false`) with stats computed from its rows under
/// `table`'s latest schema. Errors: as [`Table::open_data_file`]; [`Error::Corrupt`] when the
/// rows do not match the inputs' stats.
fn write_bin(table: &Table, schema: &crate::format::schema::Schema, inputs: &[&FileEntry]) -> Result<Add> {
    let name = format!("part-{}.jsonl", uuid::Uuid::new_v4());
    let path = table.root().join(&name);
    let result = (|| {
        let mut out = table.dir().create_new(&name, 0o644)?;
        let mut bytes = 0u64;
        for f in inputs {
            let (mut src, _) = table.open_rows_fresh(f, schema)?;
            bytes += std::io::copy(&mut src, &mut out).map_err(|e| Error::io("copy", table.root().join(&f.path), e))?;
        }
        out.flush().ctx("write", &path)?;
        out.sync_all().ctx("fsync", &path)?;
        drop(out);
        let file = table.dir().open_file(&name)?;
        let stats = rows::canonicalize(
            schema,
            &path.display().to_string(),
            BufReader::with_capacity(1 << 20, file),
            &mut std::io::sink(),
            &path,
        )?;
        let expected: u64 = inputs.iter().map(|f| f.num_records).sum();
        if inputs.iter().all(|f| f.has_stats) && stats.num_records != expected {
            return Err(Error::Corrupt {
                path: path.clone(),
                reason: format!(
                    "the compacted files hold {} rows, but their add actions say {expected}",
                    stats.num_records
                ),
            });
        }
        Ok(Add {
            path: name.clone(),
            partition_values: BTreeMap::new(),
            size: bytes,
            modification_time: crate::util::time::now_ms(),
            data_change: false,
            stats: Some(stats.to_stats_json(schema)),
            parsed_rows: Default::default(),
            deletion_vector: None,
        })
    })();
    if result.is_err() {
        let _ = table.dir().try_unlink(&name);
    }
    result
}

/// What [`optimize`] compacts, and how it commits.
#[derive(Debug, Clone)]
pub struct OptimizeOptions {
    /// Files smaller than this many bytes are compacted into files of about this size
    /// (`--target-size`; [`DEFAULT_TARGET_SIZE`] by default).
    pub target_size: u64,
    /// `expect_version` and extra commit parameters.
    pub write: WriteOptions,
    /// Only files whose `add.modificationTime` is before this (ms since epoch) are packed; the
    /// first younger file and every file after it stay (the mount's re-save window,
    /// docs/MOUNT.md "Auto compaction"). `None`: every file.
    pub settled_before_ms: Option<i64>,
    /// Plan as auto compaction does (docs/FORMAT.md "Auto compaction"): a file larger than
    /// [`AUTO_COMPACT_FREE_BYTES`] is packed only with at least its own size of newer bytes, so
    /// repeated compactions of a growing table rewrite each byte a bounded number of times.
    /// `false`: Delta's bin-packing (`OPTIMIZE`), every small file.
    pub tiered: bool,
}

impl Default for OptimizeOptions {
    fn default() -> Self {
        OptimizeOptions {
            target_size: DEFAULT_TARGET_SIZE,
            write: WriteOptions::default(),
            settled_before_ms: None,
            tiered: false,
        }
    }
}

/// How many of `files` (from the first) [`OptimizeOptions::settled_before_ms`] lets move.
fn movable(files: &[std::sync::Arc<FileEntry>], settled_before_ms: Option<i64>) -> usize {
    match settled_before_ms {
        None => files.len(),
        Some(t) => files.iter().position(|f| f.modification_time >= t).unwrap_or(files.len()),
    }
}

/// Compact the latest version's data files smaller than `opts.target_size` bytes (see the module
/// doc). Returns what was done; nothing is committed when no bin would hold two files.
///
/// Errors: [`Error::ConcurrentWrite`] (exit 3) when a commit after the version it read removed
/// or re-added one of its inputs or changed the metadata, or `expect_version` no longer holds
/// (then its new files are deleted); [`Error::InvalidArgument`] for a zero target; errors of reading the
/// data files (a vacuumed or damaged file) and of the commit.
pub fn optimize(table: &Table, opts: &OptimizeOptions) -> Result<OptimizeReport> {
    let OptimizeOptions {
        target_size,
        write,
        settled_before_ms,
        tiered,
    } = opts;
    let (target_size, opts) = (*target_size, write);
    if target_size == 0 {
        return Err(Error::InvalidArgument(format!(
            "{} must be more than 0 bytes",
            crate::util::spelling::opt("target_size")
        )));
    }
    let read_version = table.latest_version()?;
    let snap = table.snapshot(read_version)?;
    table.check_writable_as(&snap, "optimize")?;
    if let Some(e) = opts.expect_version.filter(|e| *e != read_version) {
        return Err(Error::ConcurrentWrite {
            table: table.root().to_path_buf(),
            read_version: e,
            version: read_version.max(e + 1),
        });
    }
    let movable = movable(&snap.files, *settled_before_ms);
    let planned = if *tiered {
        plan_tiered(&snap.files, target_size, AUTO_COMPACT_FREE_BYTES, movable, AUTO_COMPACT_MAX_FILES)
    } else {
        plan(&snap.files, target_size, movable)
    };
    let Some((start, steps)) = planned else {
        return Ok(OptimizeReport {
            files_after: snap.files.len(),
            ..Default::default()
        });
    };
    let kept: Vec<&FileEntry> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Keep(f) => Some(*f),
            Step::Pack(_) => None,
        })
        .collect();
    let mut kept_adds = table.add_actions(&kept)?.into_iter();
    let mut adds: Vec<Add> = Vec::new();
    let mut removed: Vec<&FileEntry> = Vec::new();
    let mut written: Vec<String> = Vec::new();
    for step in &steps {
        match step {
            Step::Keep(_) => {
                let mut a = kept_adds.next().ok_or_else(|| Error::Corrupt {
                    path: table.commit_path(read_version),
                    reason: "an add action went missing while planning OPTIMIZE".into(),
                })?;
                a.data_change = false;
                a.path = crate::format::actions::encode_path(&a.path);
                adds.push(a);
            }
            Step::Pack(inputs) => match write_bin(table, &snap.schema, inputs) {
                Ok(a) => {
                    written.push(a.path.clone());
                    removed.extend(inputs.iter().copied());
                    adds.push(a);
                }
                Err(e) => {
                    for w in &written {
                        let _ = table.dir().try_unlink(w);
                    }
                    return Err(e);
                }
            },
        }
    }
    // Failpoint (src/sys/failpoint.rs): the new files are written, nothing committed.
    if let Err(e) = crate::sys::failpoint::hit("optimize-written") {
        for w in &written {
            let _ = table.dir().try_unlink(w);
        }
        return Err(e);
    }
    let read_files: HashSet<String> = snap.files[start..].iter().map(|f| f.path.to_string()).collect();
    let new_files = written.len();
    let mut params = BTreeMap::from([
        ("predicate".to_string(), "[]".to_string()),
        ("zOrderBy".to_string(), "[]".to_string()),
        ("auto".to_string(), "false".to_string()),
        ("targetSize".to_string(), target_size.to_string()),
    ]);
    params.extend(opts.extra_params.iter().cloned());
    let removed_bytes: u64 = removed.iter().map(|f| f.size).sum();
    // Files that blind appends added after `read_version` (paths decoded, oldest first), re-added
    // after the compacted files on a rebase so that the OPTIMIZE version reads like the version
    // before it (docs/FORMAT.md "Optimize").
    let appended: std::cell::RefCell<Vec<Add>> = std::cell::RefCell::new(Vec::new());
    let build = |_: u64, ts: i64| {
        let appended = appended.borrow();
        let metrics = BTreeMap::from([
            ("numAddedFiles".to_string(), (adds.len() + appended.len()).to_string()),
            ("numRemovedFiles".to_string(), removed.len().to_string()),
            (
                "numAddedBytes".to_string(),
                adds.iter().chain(appended.iter()).map(|a| a.size).sum::<u64>().to_string(),
            ),
            ("numRemovedBytes".to_string(), removed_bytes.to_string()),
        ]);
        let mut actions = vec![crate::table::serializable_info(
            "OPTIMIZE",
            &params,
            &metrics,
            read_version,
            ts,
        )];
        actions.extend(removed.iter().map(|f| {
            Action::remove(Remove {
                path: crate::format::actions::encode_path(&f.path),
                deletion_timestamp: Some(ts),
                data_change: false,
                extended_file_metadata: Some(true),
                partition_values: Some(BTreeMap::new()),
                size: Some(f.size),
                deletion_vector: f.deletion_vector.as_deref().cloned().map(Box::new),
            })
        }));
        actions.extend(adds.iter().cloned().map(Action::add));
        actions.extend(appended.iter().cloned().map(|mut a| {
            a.path = crate::format::actions::encode_path(&a.path);
            Action::add(a)
        }));
        actions
    };
    // WriteSerializable (docs/FORMAT.md "Concurrency"): a commit that removed or re-added one of
    // the files read, or changed the metadata or protocol, conflicts; any other is rebased over,
    // and the files it added (still live) join `appended`.
    let conflicts = |version: u64| {
        let commit = table.read_commit(version)?;
        Ok(crate::table::commit::conflicts_reading(&commit, &read_files, &mut appended.borrow_mut()))
    };
    let res = crate::table::commit::commit_loop_checked(table, read_version, opts.expect_version, &[], build, conflicts);
    let files: Vec<&str> = written.iter().map(String::as_str).collect();
    let v = table.finish(res, &files, &snap)?;
    Ok(OptimizeReport {
        version: Some(v),
        removed_files: removed.len(),
        removed_bytes,
        added_files: new_files,
        // The files appends added meanwhile are live too.
        files_after: snap.files.len() - removed.len() + new_files + appended.borrow().len(),
    })
}

pub use crate::ops::properties::{
    AUTO_COMPACT_MIN_FILES_PROPERTY, AUTO_COMPACT_PROPERTY, DEFAULT_AUTO_COMPACT_MIN_FILES, parse_auto_compact,
};

/// When auto compaction runs: the writer's default (the mount: on; the CLI: off) and its
/// threshold, each overridden by the table's properties.
#[derive(Debug, Clone, Copy)]
pub struct AutoCompact {
    /// On when the table does not say ([`AUTO_COMPACT_PROPERTY`] absent).
    pub default_on: bool,
    /// Small files that start a compaction when the table does not say
    /// ([`AUTO_COMPACT_MIN_FILES_PROPERTY`] absent).
    pub min_files: usize,
    /// Files smaller than this are small, and packed into files of about this size.
    pub target_size: u64,
    /// Files younger than this (by `add.modificationTime`) stay as they are, with every file
    /// after them (the mount's re-save window; zero for the CLI).
    pub min_age: std::time::Duration,
}

impl Default for AutoCompact {
    fn default() -> Self {
        AutoCompact {
            default_on: false,
            min_files: DEFAULT_AUTO_COMPACT_MIN_FILES,
            target_size: DEFAULT_TARGET_SIZE,
            min_age: std::time::Duration::ZERO,
        }
    }
}

/// Auto compaction after a write (Delta's auto compaction; docs/FORMAT.md "Auto compaction"):
/// when it is on for the table and the latest version holds at least the threshold of files
/// smaller than the target size, an [`optimize`] commit (`operationParameters.auto` `"true"`,
/// `dataChange` false, row order kept). A conflict with a concurrent commit is not an error: it
/// returns `Ok(None)`, nothing committed, and the next write tries again. Returns what was
/// done, or `None`.
///
/// Errors: as [`optimize`] but [`Error::ConcurrentWrite`]; an unreadable property value is
/// [`Error::InvalidArgument`] naming it.
pub fn auto_compact(table: &Table, settings: &AutoCompact) -> Result<Option<OptimizeReport>> {
    let snap = table.latest_snapshot()?;
    let conf = &snap.metadata.configuration;
    let on = match conf.get(AUTO_COMPACT_PROPERTY) {
        None => settings.default_on,
        Some(v) => {
            crate::ops::properties::check_property(AUTO_COMPACT_PROPERTY, v)?;
            parse_auto_compact(v).unwrap_or(false)
        }
    };
    let min_files = match conf.get(AUTO_COMPACT_MIN_FILES_PROPERTY) {
        None => settings.min_files,
        Some(v) => {
            crate::ops::properties::check_property(AUTO_COMPACT_MIN_FILES_PROPERTY, v)?;
            v.trim().parse().unwrap_or(settings.min_files)
        }
    };
    if !on || table.check_writable_as(&snap, "optimize").is_err() {
        return Ok(None);
    }
    let settled_before_ms = (!settings.min_age.is_zero())
        .then(|| crate::util::time::now_ms().saturating_sub(settings.min_age.as_millis() as i64));
    let k = movable(&snap.files, settled_before_ms);
    let small = snap.files[..k].iter().filter(|f| f.size < settings.target_size).count();
    if small < min_files.max(2) {
        return Ok(None);
    }
    let opts = OptimizeOptions {
        target_size: settings.target_size,
        write: WriteOptions {
            extra_params: vec![("auto".into(), "true".into())],
            ..Default::default()
        },
        settled_before_ms,
        tiered: true,
    };
    match optimize(table, &opts) {
        Ok(r) if r.version.is_some() => Ok(Some(r)),
        Ok(_) => Ok(None),
        Err(e @ Error::ConcurrentWrite { .. }) => {
            log::debug!("auto compaction lost a race, nothing committed (the next write tries again): {e}");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Parse a size: bytes, or a number with a unit (`128MiB`, `1GiB`, `64KiB`, `10MB`, `1k`).
/// `None` when it is not one.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str, size: u64) -> std::sync::Arc<FileEntry> {
        std::sync::Arc::new(FileEntry {
            path: path.into(),
            size,
            num_records: 1,
            has_stats: true,
            modification_time: 0,
            partition_values: Default::default(),
            added_in: 1,
            deletion_vector: None,
        })
    }

    #[test]
    fn bins_keep_order() {
        let files = [
            f("a", 200),
            f("b", 10),
            f("c", 10),
            f("d", 500),
            f("e", 30),
            f("f", 90),
            f("g", 5),
        ];
        let shape = |movable: usize| {
            let (start, steps) = plan(&files, 100, movable).expect("a plan");
            assert_eq!(start, 1);
            steps
                .iter()
                .map(|s| match s {
                    Step::Keep(f) => vec![f.path.as_str()],
                    Step::Pack(v) => v.iter().map(|f| f.path.as_str()).collect(),
                })
                .collect::<Vec<Vec<&str>>>()
        };
        assert_eq!(shape(files.len()), vec![vec!["b", "c"], vec!["d"], vec!["e"], vec!["f", "g"]]);
        assert!(plan(&[f("a", 10)], 100, 1).is_none());
        assert!(plan(&[f("a", 200), f("b", 300)], 100, 2).is_none());
        assert!(plan(&[f("a", 60), f("b", 60)], 100, 2).is_none());
        // Files from `movable` on stay, in place after the packed ones.
        assert_eq!(shape(5), vec![vec!["b", "c"], vec!["d"], vec!["e"], vec!["f"], vec!["g"]]);
        assert!(plan(&files, 100, 1).is_none());
        assert_eq!(parse_size("128MiB"), Some(128 << 20));
    }

    /// The steps of [`plan_tiered`] as lists of paths (a kept file alone), with its start.
    fn tiered(files: &[std::sync::Arc<FileEntry>], target: u64, free: u64) -> Option<(usize, Vec<Vec<String>>)> {
        let (start, steps) = plan_tiered(files, target, free, files.len(), AUTO_COMPACT_MAX_FILES)?;
        let shape = steps
            .iter()
            .map(|s| match s {
                Step::Keep(f) => vec![f.path.to_string()],
                Step::Pack(v) => v.iter().map(|f| f.path.to_string()).collect(),
            })
            .collect();
        Some((start, shape))
    }

    #[test]
    fn tiered_plans_keep_order_and_rewrite_a_large_file_only_with_as_many_new_bytes() {
        let v = |names: &[&str]| names.iter().map(|n| vec![n.to_string()]).collect::<Vec<_>>();
        // Tiny files under the free size: one run, whatever their number.
        let tiny: Vec<_> = (0..1000).map(|i| f(&format!("t{i}"), 300)).collect();
        let (start, steps) = tiered(&tiny, 1 << 20, 8 << 20).expect("a plan");
        assert_eq!((start, steps.len(), steps[0].len()), (0, 1, 1000));
        assert_eq!(steps[0][999], "t999");
        // A file past the free size stays while the newer run is smaller than it...
        let files = [f("big", 500), f("mid", 60), f("a", 5), f("b", 5), f("c", 5)];
        assert_eq!(tiered(&files, 1000, 20), Some((2, vec![vec!["a".into(), "b".into(), "c".into()]])));
        // ...and joins it once the run is at least its size; a file at the target stays in place.
        let files = [f("big", 50), f("x", 30), f("y", 30), f("full", 1000), f("p", 3), f("q", 3)];
        let mut want = vec![vec!["big".to_string(), "x".into(), "y".into()]];
        want.extend(v(&["full"]));
        want.push(vec!["p".into(), "q".into()]);
        assert_eq!(tiered(&files, 1000, 20), Some((0, want)));
        // Bins stay within the target; nothing to pack is no plan.
        assert_eq!(
            tiered(&[f("a", 600), f("b", 600), f("c", 600)], 1000, 20),
            None,
            "no two fit one file"
        );
        assert_eq!(tiered(&[f("a", 30), f("b", 10)], 1000, 20), None, "the older one is larger");
        // Files from `movable` on stay, after the packed ones.
        let files = [f("a", 5), f("b", 5), f("young", 5)];
        let (start, steps) = plan_tiered(&files, 1000, 20, 2, AUTO_COMPACT_MAX_FILES).expect("a plan");
        assert_eq!(start, 0);
        assert!(matches!(&steps[..], [Step::Pack(p), Step::Keep(y)] if p.len() == 2 && y.path == "young"));
    }

    /// A compaction packs at most `max_files` files, the newest; the older ones stay in place
    /// before the packed file, so each compaction of a huge table is bounded and the next one
    /// goes on (row order kept throughout).
    #[test]
    fn tiered_plans_pack_at_most_max_files_newest_first() {
        let tiny: Vec<_> = (0..25).map(|i| f(&format!("t{i:02}"), 10)).collect();
        let (start, steps) = plan_tiered(&tiny, 1 << 20, 1 << 10, tiny.len(), 10).expect("a plan");
        assert_eq!(start, 15, "the 15 oldest files stay");
        assert_eq!(steps.len(), 1);
        let Step::Pack(p) = &steps[0] else { panic!("a pack") };
        let names: Vec<&str> = p.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, (15..25).map(|i| format!("t{i:02}")).collect::<Vec<_>>());
        // Runs closed by size count too: two runs of 4 and one cut at the cap, a big file kept.
        let mut files: Vec<_> = (0..6).map(|i| f(&format!("a{i}"), 10)).collect();
        files.push(f("big", 1000));
        files.extend((0..4).map(|i| f(&format!("b{i}"), 10)));
        let (start, steps) = plan_tiered(&files, 1000, 1 << 10, files.len(), 7).expect("a plan");
        assert_eq!(start, 3, "a0-a2 stay");
        assert!(matches!(&steps[..], [Step::Pack(a), Step::Keep(big), Step::Pack(b)]
            if a.len() == 3 && big.path.as_str() == "big" && b.len() == 4));
    }

    /// A long stream of small commits, compacted after every 50 (the default threshold) with
    /// the sizes auto compaction uses: every byte is written a bounded number of times in all,
    /// and few small files are left after each compaction (docs/FORMAT.md "Auto compaction").
    #[test]
    fn tiered_compaction_of_a_stream_bounds_rewrites_and_files() {
        for (row, rounds, max_amp, max_small) in [(300u64, 2000, 40.0, 8), (4096, 2000, 8.0, 12), (65536, 300, 5.0, 16)] {
            let mut files: Vec<std::sync::Arc<FileEntry>> = Vec::new();
            let (mut total, mut rewritten, mut n) = (0u64, 0u64, 0usize);
            for _ in 0..rounds {
                for _ in 0..50 {
                    files.push(f(&format!("f{n}"), row));
                    n += 1;
                }
                total += 50 * row;
                if let Some((start, steps)) = plan_tiered(
                    &files,
                    DEFAULT_TARGET_SIZE,
                    AUTO_COMPACT_FREE_BYTES,
                    files.len(),
                    AUTO_COMPACT_MAX_FILES,
                ) {
                    let mut next: Vec<std::sync::Arc<FileEntry>> = files[..start].to_vec();
                    for s in &steps {
                        match s {
                            Step::Keep(k) => next.push(f(&k.path, k.size)),
                            Step::Pack(p) => {
                                let size: u64 = p.iter().map(|x| x.size).sum();
                                rewritten += size;
                                next.push(f(&format!("f{n}"), size));
                                n += 1;
                            }
                        }
                    }
                    files = next;
                }
                assert_eq!(files.iter().map(|x| x.size).sum::<u64>(), total, "bytes lost or made");
                let small = files.iter().filter(|x| x.size < DEFAULT_TARGET_SIZE).count();
                assert!(small <= max_small, "{row}-byte rows: {small} small files left after a compaction");
            }
            let amp = rewritten as f64 / total as f64;
            assert!(amp <= max_amp, "{row}-byte rows: each byte rewritten {amp:.1} times");
        }
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size("10 MB"), Some(10_000_000));
        assert_eq!(parse_size("lots"), None);
    }
}
