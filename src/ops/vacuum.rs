//! Vacuum (docs/FORMAT.md "Vacuum"; the command: docs/CLI.md "Usage"): delete orphans, and data
//! files whose last `remove` is older than the retention (Delta `VACUUM ... RETAIN n HOURS`).
//!
//! Retention vacuum: a data file not live in the latest version whose newest `remove` has a
//! `deletionTimestamp` older than the retention (`--retain`, else the table property
//! `delta.deletedFileRetentionDuration`, default 7 days) is deleted; the run is recorded as a
//! `VACUUM START` and a `VACUUM END` commit (commitInfo only, Delta's parameters and metrics).
//! Versions naming a deleted file are no longer readable ([`Error::Vacuumed`]).
//!
//! Vacuum first replays the whole log, from version 0 to the newest commit present
//! ([`Table::inventory_with_param`]); any damage (a hole, an empty or cut commit, a commit that
//! is not a regular file) is an error and nothing is deleted. Candidates then are:
//! `part-*.jsonl` in the table folder that no `add` of any version ever named (paths compared
//! decoded), stale `_delta_log/.<version>.<uuid>.tmp` commits-in-progress and checkpoint
//! temporaries, and `_staging/` leftovers (temporaries and orphan halves; never a staged file
//! because a commit names its staging id: any commit can name any id, so only the mount that
//! staged a file decides it is done). Each is deleted only when its mtime is older than the
//! retention, so an in-flight writer's files survive. Everything is listed, stat'ed and deleted
//! through directory handles ([`crate::sys::beneath::Dir`]): a symlinked `_staging`,
//! `_tinydelta` or `checkpoints` is an error, never followed. `_staging/` is cleaned only under
//! the mount's lock (`_staging/.lock`, `flock`), held until the last deletion, so a mount
//! starting meanwhile cannot race it; while a mount holds it `_staging/` is left alone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::format::actions::{VACUUM_END, VACUUM_START};
use crate::format::actions::{Action, CommitInfo, Metadata};
use crate::sys::beneath::{Dir, Kind};
use crate::log::publish::Isolation;
use crate::error::{Error, Result};
use crate::log::files::LogFile;
use crate::log::snapshot::Replay;
use crate::table::{ENGINE_INFO, Table};

/// The default minimum age of orphans and leftovers (`--older-than`): one hour.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(3600);

/// The table property that sets how long removed data files are kept (Delta's name).
pub const RETENTION_PROPERTY: &str = "delta.deletedFileRetentionDuration";

/// Delta's default for [`RETENTION_PROPERTY`]: 7 days.
pub const DEFAULT_DELETED_FILE_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a vacuum deletes, and how old things must be.
#[derive(Debug, Clone)]
pub struct VacuumOptions {
    /// The retention of removed data files (`--retain`); `None`: the table's
    /// [`RETENTION_PROPERTY`].
    pub retain: Option<Duration>,
    /// Allow a `retain` below the table's retention (Delta's retention-duration check).
    pub force: bool,
    /// Minimum age (mtime) of orphans and leftovers (`--older-than`).
    pub older_than: Duration,
    /// Only report.
    pub dry_run: bool,
}

impl Default for VacuumOptions {
    fn default() -> Self {
        VacuumOptions {
            retain: None,
            force: false,
            older_than: DEFAULT_RETENTION,
            dry_run: false,
        }
    }
}

/// Parse a Delta interval (`interval 7 days`, `interval 1 week`, `168 hours`) or a plain
/// duration (`7d`, `1h`). `None` when it is neither.
pub fn parse_interval(s: &str) -> Option<Duration> {
    let t = s.trim().to_ascii_lowercase();
    let body = t.strip_prefix("interval").map(str::trim).unwrap_or(&t);
    let words: Vec<&str> = body.split_whitespace().collect();
    if words.len() >= 2 && words.len().is_multiple_of(2) {
        let mut total = Duration::ZERO;
        for pair in words.chunks(2) {
            let n: u64 = pair[0].parse().ok()?;
            let unit = pair[1].trim_end_matches('s');
            let secs = match unit {
                "millisecond" => {
                    total = total.checked_add(Duration::from_millis(n))?;
                    continue;
                }
                "second" => 1,
                "minute" => 60,
                "hour" => 3600,
                "day" => 86_400,
                "week" => 604_800,
                _ => return None,
            };
            total = total.checked_add(Duration::from_secs(n.checked_mul(secs)?))?;
        }
        return Some(total);
    }
    humantime::parse_duration(body).ok()
}

/// The table's retention of removed data files: [`RETENTION_PROPERTY`] from `metaData.configuration`,
/// else 7 days. Errors: [`Error::InvalidArgument`] when the property is set but not an interval.
pub fn table_retention(metadata: &Metadata) -> Result<Duration> {
    match metadata.configuration.get(RETENTION_PROPERTY) {
        None => Ok(DEFAULT_DELETED_FILE_RETENTION),
        Some(v) => parse_interval(v).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "table property {RETENTION_PROPERTY} = {} is not an interval like \"interval 7 days\"",
                crate::util::quote::quoted(v)
            ))
        }),
    }
}

/// The staging folder of the mount's `incoming/`.
pub const STAGING_DIR: &str = crate::table::staging::STAGING_DIR;

/// What a vacuum found (and deleted, unless it was a dry run).
#[derive(Debug, Default)]
pub struct VacuumReport {
    /// Paths deleted (or that would be), each with its size in bytes: orphans, leftovers and
    /// expired data files.
    pub deleted: Vec<(PathBuf, u64)>,
    /// Their total size, bytes.
    pub bytes: u64,
    /// How many of `deleted` were data files some version's `add` named (retention vacuum): the
    /// files `check` counts as "deleted on purpose by a retention vacuum".
    pub expired: usize,
    /// How many of `deleted` were change data files (`_change_data/`) some version's `cdc`
    /// named, expired with their commit's time (Delta PROTOCOL "Change Data Files"; they are
    /// never part of a version's data, so `check` does not count them).
    pub expired_change_data: usize,
    /// The retention used for removed data files.
    pub retention: Duration,
    /// The `VACUUM START` and `VACUUM END` versions, when data files some version named were
    /// deleted.
    pub commits: Option<(u64, u64)>,
    /// Whether `_staging/` was skipped because a mount holds the table.
    pub staging_skipped: bool,
    /// Why no data file was deleted at all, when that was decided (a file in
    /// `_delta_log/_corrupt/` could not be read, so the rows it names are unknown).
    pub data_kept: Option<String>,
}

struct Sweep {
    cutoff_s: i64,
    dry_run: bool,
    report: VacuumReport,
}

impl Sweep {
    /// Delete `dir/name` if it is a regular file older than the cutoff.
    fn consider(&mut self, dir: &Dir, name: &str) -> Result<()> {
        let Some(st) = dir.stat(name)? else {
            // Gone since the listing (a writer finished): nothing to delete.
            return Ok(());
        };
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Ok(());
        }
        if st.st_mtime > self.cutoff_s {
            return Ok(());
        }
        if !self.dry_run && !dir.try_unlink(name)? {
            return Ok(());
        }
        self.report.bytes = self.report.bytes.saturating_add(st.st_size as u64);
        self.report.deleted.push((dir.join(name), st.st_size as u64));
        Ok(())
    }
}

/// Every data file path (percent-decoded) that a file in `_delta_log/_corrupt/` names, parsed
/// leniently: any line that yields an `add.path` (a JSON object, or failing that the text after
/// `"path":"` on a line mentioning `"add"`). Those commits were moved aside by `check --repair`
/// and may be the only record of their rows, so vacuum keeps their files (docs/FORMAT.md,
/// "Vacuum"). `Ok(Err(why))` when some file there cannot be read at all: then vacuum deletes no
/// data file. Errors: [`Error::Io`] listing the folder.
fn named_aside(log: &Dir) -> Result<std::result::Result<HashSet<String>, String>> {
    let mut out = HashSet::new();
    let Some(corrupt) = (match log.try_dir(crate::log::files::CORRUPT_DIR) {
        Ok(d) => d,
        Err(e) => return Ok(Err(format!("{e}; no data file was deleted"))),
    }) else {
        return Ok(Ok(out));
    };
    for e in corrupt.entries()? {
        let name = e.name.to_string_lossy().into_owned();
        let bytes = match corrupt
            .open_file(&name)
            .and_then(|f| read_bounded(f, &corrupt.join(&name)))
        {
            Ok(b) => b,
            Err(err) => {
                return Ok(Err(format!(
                    "{err}; a commit moved aside by `check --repair` could not be read, so no data file was deleted (move `_delta_log/_corrupt/` away once its rows are recovered)"
                )));
            }
        };
        for line in String::from_utf8_lossy(&bytes).lines() {
            if let Some(p) = aside_path(line) {
                out.insert(crate::format::actions::decode_path(&p).unwrap_or(p));
            }
        }
    }
    Ok(Ok(out))
}

/// Read a file of `_delta_log/_corrupt/` whole, up to [`crate::log::files::MAX_COMMIT_BYTES`].
fn read_bounded(f: std::fs::File, path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let limit = crate::log::files::MAX_COMMIT_BYTES;
    f.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    if bytes.len() as u64 > limit {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            reason: format!("the file is larger than {limit} bytes"),
        });
    }
    Ok(bytes)
}

/// The `add.path` of one line of a damaged commit, if it yields one.
fn aside_path(line: &str) -> Option<String> {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
        return v.get("add")?.get("path")?.as_str().map(str::to_string);
    }
    if !line.contains("\"add\"") {
        return None;
    }
    let rest = &line[line.find("\"path\":\"")? + 8..];
    Some(rest[..rest.find('"')?].to_string())
}

/// Open the orphan candidate `name` beneath `dir` and take `LOCK_EX | LOCK_NB` on it
/// (docs/FORMAT.md, "Vacuum and writers in flight"): `None` when it is gone, not a regular
/// file, newer than `cutoff_s`, or held by a writer (whose `LOCK_SH` lasts until its commit is
/// linked); otherwise the locked descriptor, after proving the name still refers to it.
fn lock_orphan(dir: &Dir, name: &str, cutoff_s: i64) -> Result<Option<std::fs::File>> {
    let file = match dir.try_open_file(name) {
        Ok(Some(f)) => f,
        Ok(None) | Err(Error::Corrupt { .. } | Error::MissingDataFile { .. } | Error::MisnamedParquet { .. }) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let errno = |e: rustix::io::Errno| {
        Error::io(
            "lock",
            dir.join(name),
            std::io::Error::from_raw_os_error(e.raw_os_error()),
        )
    };
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
        Err(e) => return Err(errno(e)),
    }
    let mine = rustix::fs::fstat(&file).map_err(errno)?;
    match dir.stat(name)? {
        Some(st) if st.st_ino == mine.st_ino && st.st_dev == mine.st_dev && mine.st_mtime <= cutoff_s => Ok(Some(file)),
        _ => Ok(None),
    }
}

fn names(dir: &Dir) -> Result<Vec<String>> {
    Ok(dir
        .entries()?
        .into_iter()
        .filter(|e| e.kind == Kind::File)
        .filter_map(|e| e.name.into_string().ok())
        .collect())
}

/// What one replay of the whole log says about data files.
struct Inventory {
    /// Every path any `add` named (decoded).
    ever_added: HashSet<String>,
    /// Paths not live in the latest version, with their newest `remove`'s time (ms since epoch:
    /// `deletionTimestamp`, else the commit's time).
    removed: HashMap<String, i64>,
    /// The latest version.
    latest: u64,
    /// Its `metaData`.
    metadata: Metadata,
}

/// Replay the whole log, version 0 to the latest. Errors: [`Error::Corrupt`] unless the whole
/// log replays cleanly (vacuum deletes nothing on a log it could not read whole).
fn inventory(table: &Table) -> Result<Inventory> {
    let latest = table.latest_version()?;
    let seg = table.segment()?;
    if seg.first > 0 {
        return Err(Error::Corrupt {
            path: table.commit_path(0),
            reason: format!(
                "versions before {} are not available, so the files they named are unknown; vacuum needs the whole log",
                seg.first
            ),
        });
    }
    let mut replay = Replay::default();
    let mut inv = Inventory {
        ever_added: HashSet::new(),
        removed: HashMap::new(),
        latest,
        metadata: table.snapshot(0)?.metadata,
    };
    for v in 0..=latest {
        let c = table.read_commit(v)?;
        replay.apply(table.root(), &c)?;
        for a in &c.actions {
            if let Some(m) = &a.metadata {
                inv.metadata = m.clone();
            }
            if let Some(add) = &a.add {
                inv.ever_added.insert(add.path.clone());
            }
            if let Some(r) = &a.remove {
                let ts = match r.deletion_timestamp {
                    Some(t) => t,
                    None => table.commit_info(v)?.timestamp,
                };
                inv.removed.insert(r.path.clone(), ts);
            }
            // A change data file is never live: it expires with its commit's time (Delta's
            // VACUUM deletes them after the retention like removed data files).
            if let Some(cdc) = &a.cdc {
                inv.ever_added.insert(cdc.path.clone());
                inv.removed.insert(cdc.path.clone(), table.commit_info(v)?.timestamp);
            }
        }
    }
    inv.removed.retain(|p, _| !replay.is_live(p));
    Ok(inv)
}

/// The change data files named by the commits after `seen` (the vacuum's replay).
fn named_since(table: &Table, seen: u64) -> Result<HashSet<String>> {
    let mut out = HashSet::new();
    for v in seen + 1..=table.latest_version()? {
        for a in table.read_commit(v)?.actions {
            if let Some(c) = a.cdc {
                out.insert(c.path);
            }
        }
    }
    Ok(out)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Vacuum `table` (docs/FORMAT.md "Vacuum"): orphans and leftovers older than `opts.older_than`,
/// and data files whose newest `remove` is older than the retention. With `dry_run` only report.
///
/// Errors: [`Error::InvalidArgument`] when `opts.retain` is below the table's retention without
/// `opts.force`; [`Error::Corrupt`] if the log cannot be replayed whole (then nothing is
/// deleted) or a folder vacuum works in is a symlink; [`Error::ConcurrentWrite`] when a
/// concurrent commit changed the metadata before `VACUUM START` (nothing deleted);
/// [`Error::Io`] naming the path.
pub fn vacuum(table: &Table, opts: &VacuumOptions) -> Result<VacuumReport> {
    let inv = inventory(table)?;
    let default_retention = table_retention(&inv.metadata)?;
    let retention = opts.retain.unwrap_or(default_retention);
    if retention < default_retention && !opts.force {
        return Err(Error::InvalidArgument(format!(
            "{} is below the table's retention of removed files ({}, {RETENTION_PROPERTY}): \
             versions older than it could no longer be read and a reader still reading one would fail; \
             pass {} if that is what you want",
            crate::util::spelling::with_text("retain", &format_duration(retention)),
            format_duration(default_retention),
            crate::util::spelling::switch("force")
        )));
    }
    let now = crate::util::time::now_ms();
    let cutoff_ms = now.saturating_sub(ms(retention));
    let root = table.dir();
    // Expired: removed before the cutoff, not live now, still on disk as a regular file.
    let mut expired: Vec<(String, u64)> = Vec::new();
    for (path, ts) in &inv.removed {
        if *ts > cutoff_ms {
            continue;
        }
        if let Some(st) = root.stat(path)?
            && rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
        {
            expired.push((path.clone(), st.st_size as u64));
        }
    }
    expired.sort();

    let cutoff = SystemTime::now().checked_sub(opts.older_than).unwrap_or(UNIX_EPOCH);
    let seen = inv.latest;
    let cutoff_s = cutoff.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let mut sweep = Sweep {
        cutoff_s,
        dry_run: opts.dry_run,
        report: VacuumReport {
            retention,
            ..Default::default()
        },
    };
    let mut held = Vec::new();
    let aside = match named_aside(table.log_dir_handle())? {
        Ok(names) => names,
        Err(why) => {
            sweep.report.data_kept = Some(why);
            HashSet::new()
        }
    };
    let data_names = if sweep.report.data_kept.is_some() {
        Vec::new()
    } else {
        names(root)?
    };
    for name in data_names {
        // Data files are known by the paths the log names: a `part-*` file (tinydelta's JSONL,
        // or Parquet a Delta writer left behind) that no `add` named is an orphan.
        if name.starts_with("part-")
            && (name.ends_with(".jsonl") || name.ends_with(".parquet"))
            && !inv.ever_added.contains(&name)
            && !aside.contains(&name)
            && let Some(lock) = lock_orphan(root, &name, cutoff_s)?
        {
            held.push((name, lock));
        }
    }
    // Change data files no commit names (a row-level change that failed before its commit).
    let change_data = match sweep.report.data_kept {
        Some(_) => None,
        None => root.try_dir(crate::table::cdc::CHANGE_DATA_DIR)?,
    };
    let mut held_cdc = Vec::new();
    if let Some(dir) = &change_data {
        for name in names(dir)? {
            let path = format!("{}/{name}", crate::table::cdc::CHANGE_DATA_DIR);
            if name.starts_with("cdc-")
                && name.ends_with(".jsonl")
                && !inv.ever_added.contains(&path)
                && let Some(lock) = lock_orphan(dir, &name, cutoff_s)?
            {
                held_cdc.push((name, lock));
            }
        }
    }
    // A writer that published after the replay above released its lock: re-derive what the
    // newest version names before deleting anything.
    if (!held.is_empty() || !held_cdc.is_empty()) && table.latest_version()? != seen {
        let named = named_since(table, seen)?;
        let (now, _) = table.inventory_with_param(crate::table::staging::STAGING_ID_PARAM)?;
        held.retain(|(name, _)| !now.contains(name));
        held_cdc.retain(|(name, _)| !named.contains(&format!("{}/{name}", crate::table::cdc::CHANGE_DATA_DIR)));
    }
    for (name, _lock) in &held {
        sweep.consider(root, name)?;
    }
    drop(held);
    if let Some(dir) = &change_data {
        for (name, _lock) in &held_cdc {
            sweep.consider(dir, name)?;
        }
    }
    drop(held_cdc);
    // Files of commits moved aside by `check --repair` are never expired either; when one of
    // those commits cannot be read, no data file is deleted at all.
    expired.retain(|(p, _)| !aside.contains(p));
    if sweep.report.data_kept.is_some() {
        expired.clear();
    }
    let log = table.log_dir_handle();
    for name in names(log)? {
        if matches!(LogFile::parse(&name), LogFile::Temp(_))
            || (name.starts_with('.') && name.ends_with(".tmp") && name.contains(".crc."))
        {
            sweep.consider(log, &name)?;
        }
    }
    if let Some(cps) = crate::log::checkpoint::dir(root)? {
        for name in names(&cps)? {
            if name.starts_with('.') && name.ends_with(".tmp") {
                sweep.consider(&cps, &name)?;
            }
        }
    }
    sweep_staging(root, &mut sweep)?;
    let mut report = sweep.report;
    if !expired.is_empty() {
        let deleted = if opts.dry_run {
            expired
        } else {
            delete_expired(table, &inv, expired, retention, default_retention, &mut report)?
        };
        let cdc_prefix = format!("{}/", crate::table::cdc::CHANGE_DATA_DIR);
        report.expired_change_data = deleted.iter().filter(|(p, _)| p.starts_with(&cdc_prefix)).count();
        report.expired = deleted.len() - report.expired_change_data;
        for (p, size) in deleted {
            report.bytes = report.bytes.saturating_add(size);
            report.deleted.push((table.root().join(p), size));
        }
    }
    sweep_converted(table, &inv, &mut report, cutoff_s, opts.dry_run)?;
    report.deleted.sort();
    Ok(report)
}

/// The converted rows of Parquet data files (`_tinydelta/jsonl/`, docs/FORMAT.md "Parquet data
/// files") go with their data files: an entry is deleted when no path the log names is still
/// on disk with its hash (the file was vacuumed now or before, or never named), and stale
/// temporaries older than the cutoff. Cached rows are derived data: a later read converts again.
fn sweep_converted(
    table: &Table,
    inv: &Inventory,
    report: &mut VacuumReport,
    cutoff_s: i64,
    dry_run: bool,
) -> Result<()> {
    let root = table.dir();
    if root.try_dir(crate::table::parquet_cache::CACHE_DIR)?.is_none() {
        return Ok(());
    }
    let deleted: HashSet<PathBuf> = report.deleted.iter().map(|(p, _)| p.clone()).collect();
    let mut keep = HashSet::new();
    for p in inv.ever_added.iter().filter(|p| crate::format::parquet::is_parquet_name(p)) {
        if !deleted.contains(&root.join(p)) && root.stat(p)?.is_some() {
            keep.insert(crate::table::parquet_cache::path_hash(p));
        }
    }
    for (path, size) in crate::table::parquet_cache::sweep(root, &keep, cutoff_s, dry_run)? {
        report.bytes = report.bytes.saturating_add(size);
        report.deleted.push((path, size));
    }
    Ok(())
}

fn vacuum_info(
    ts: i64,
    read: u64,
    op: &str,
    params: &BTreeMap<String, String>,
    metrics: BTreeMap<String, String>,
) -> Action {
    Action::commit_info(CommitInfo {
        timestamp: ts,
        timestamp_recorded: true,
        operation: op.into(),
        operation_parameters: params.clone(),
        read_version: Some(read as i64),
        isolation_level: Some("SnapshotIsolation".into()),
        is_blind_append: true,
        operation_metrics: metrics,
        engine_info: Some(ENGINE_INFO.into()),
    })
}

/// Commit `VACUUM START`, delete the expired files (those no commit since the inventory
/// re-added), commit `VACUUM END`. Returns what was deleted.
fn delete_expired(
    table: &Table,
    inv: &Inventory,
    mut expired: Vec<(String, u64)>,
    retention: Duration,
    default_retention: Duration,
    report: &mut VacuumReport,
) -> Result<Vec<(String, u64)>> {
    let params = BTreeMap::from([
        ("retentionCheckEnabled".to_string(), "true".to_string()),
        ("specifiedRetentionMillis".to_string(), ms(retention).to_string()),
        ("defaultRetentionMillis".to_string(), ms(default_retention).to_string()),
    ]);
    let metrics = BTreeMap::from([
        ("numFilesToDelete".to_string(), expired.len().to_string()),
        (
            "sizeOfDataToDelete".to_string(),
            expired.iter().map(|e| e.1).sum::<u64>().to_string(),
        ),
    ]);
    let start = crate::table::commit::commit_loop(table, inv.latest, Isolation::BlindAppend, None, |v, ts| {
        vec![vacuum_info(ts, v - 1, VACUUM_START, &params, metrics.clone())]
    })?;
    table.write_crc_after(start, None);
    // A commit that landed between the inventory and VACUUM START may have made a file live
    // again (a restore): keep those.
    let mut readded = HashSet::new();
    for v in inv.latest + 1..start {
        for a in table.read_commit(v)?.actions {
            if let Some(add) = a.add {
                readded.insert(add.path);
            }
        }
    }
    expired.retain(|(p, _)| !readded.contains(p));
    let mut deleted = Vec::new();
    for (path, size) in expired {
        if table.dir().try_unlink(&path)? {
            deleted.push((path, size));
        }
    }
    let end_params = BTreeMap::from([("status".to_string(), "COMPLETED".to_string())]);
    let end_metrics = BTreeMap::from([
        ("numDeletedFiles".to_string(), deleted.len().to_string()),
        ("numVacuumedDirectories".to_string(), "1".to_string()),
    ]);
    let end = crate::table::commit::commit_loop(table, start, Isolation::BlindAppend, None, |v, ts| {
        vec![vacuum_info(ts, v - 1, VACUUM_END, &end_params, end_metrics.clone())]
    })?;
    table.write_crc_after(end, None);
    report.commits = Some((start, end));
    Ok(deleted)
}

/// A duration as words for messages: `7 days`, `1 day 12 hours`, `90 seconds` is `1 minute 30
/// seconds`, `0 seconds`; milliseconds only when not whole seconds (`1 second 500 ms`).
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let parts = [
        (secs / 86_400, "day", "days"),
        (secs / 3600 % 24, "hour", "hours"),
        (secs / 60 % 60, "minute", "minutes"),
        (secs % 60, "second", "seconds"),
    ];
    let mut words: Vec<String> = parts
        .iter()
        .filter(|(n, _, _)| *n > 0)
        .map(|(n, one, many)| format!("{n} {}", if *n == 1 { one } else { many }))
        .collect();
    let ms = d.subsec_millis();
    if ms > 0 {
        words.push(format!("{ms} ms"));
    }
    if words.is_empty() {
        return "0 seconds".into();
    }
    words.join(" ")
}

/// Ranges as text: `0-12, 14, 16-20`.
pub fn format_ranges(ranges: &[(u64, u64)]) -> String {
    ranges
        .iter()
        .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `_staging/` leftovers under the mount's lock: `*.tmp` files and orphan halves (a `.data`
/// without a name, neither a `.name` file nor the [`crate::table::staging::NAME_XATTR`] attribute; a `.name`, `.error`, `.sync` or `.canon` without its `.data`; see
/// [`crate::table::staging`]).
fn sweep_staging(root: &Dir, sweep: &mut Sweep) -> Result<()> {
    let Some(staging) = root.try_dir(STAGING_DIR)? else {
        return Ok(());
    };
    // Held until this function returns: no mount can start and clean `_staging/` meanwhile.
    let _lock = match staging.try_open_file(".lock")? {
        Some(f) => match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Some(f),
            Err(rustix::io::Errno::WOULDBLOCK) => {
                sweep.report.staging_skipped = true;
                return Ok(());
            }
            Err(e) => {
                return Err(Error::io(
                    "lock",
                    staging.join(".lock"),
                    std::io::Error::from_raw_os_error(e.raw_os_error()),
                ));
            }
        },
        None => None,
    };
    let files = names(&staging)?;
    let has = |id: &str, ext: &str| {
        files
            .iter()
            .any(|f| f.strip_suffix(ext).and_then(|s| s.strip_suffix('.')) == Some(id))
    };
    for name in &files {
        let leftover = if name.ends_with(".tmp") {
            true
        } else if let Some((id, ext)) = name.rsplit_once('.')
            && !id.is_empty()
            && !id.starts_with('.')
        {
            match ext {
                // A staged file's name is its `.name` file or the data file's attribute.
                "data" => {
                    !has(id, "name")
                        && staging
                            .try_open_file(name)?
                            .and_then(|f| crate::table::staging::xattr_name(&f))
                            .is_none()
                }
                "name" | "error" | "sync" | "canon" => !has(id, "data"),
                _ => false,
            }
        } else {
            false
        };
        if leftover {
            sweep.consider(&staging, name)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_intervals() {
        let d = |s: &str| parse_interval(s);
        assert_eq!(d("interval 7 days"), Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(format_duration(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(
            format_duration(Duration::from_secs(86_400 + 3600 + 61)),
            "1 day 1 hour 1 minute 1 second"
        );
        assert_eq!(format_duration(Duration::from_millis(1500)), "1 second 500 ms");
        assert_eq!(format_duration(Duration::ZERO), "0 seconds");
        assert_eq!(d("interval 1 week"), Some(Duration::from_secs(604_800)));
        assert_eq!(d("INTERVAL 2 hours 30 minutes"), Some(Duration::from_secs(9000)));
        assert_eq!(d("168 hours"), Some(Duration::from_secs(604_800)));
        assert_eq!(d("12h"), Some(Duration::from_secs(43_200)));
        assert_eq!(d("interval 500 milliseconds"), Some(Duration::from_millis(500)));
        for bad in ["", "interval", "interval seven days", "interval 7 fortnights", "soon"] {
            assert_eq!(d(bad), None, "{bad}");
        }
        assert_eq!(format_ranges(&[(0, 2), (4, 4), (6, 9)]), "0-2, 4, 6-9");
    }
}
