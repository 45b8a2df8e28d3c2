//! `tinydelta check`: prove a table whole, in the spirit of `git fsck` (docs/FORMAT.md,
//! "Checking a table"). Every commit complete and contiguous; every data file that a readable
//! version names present with its recorded size (a file only older versions name and that is
//! deleted by a recorded `VACUUM START` is a warning, any other missing file damage); checkpoints and version checksums consistent with log replay
//! (warnings: readers never need them); with `deep`, every live file re-read and its rows
//! counted against its stats. `repair` moves a damaged *newest* commit into
//! `_delta_log/_corrupt/` (never deletes it), so the table is whole at the version before.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::log::files::{CORRUPT_DIR, commit_file_name};
use crate::log::segment::Listing;
use crate::log::snapshot::Snapshot;
use crate::table::Table;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The table is not whole: some version cannot be read.
    Damage,
    /// Something optional is missing or stale; every version still reads.
    Warning,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// Damage or warning.
    pub severity: Severity,
    /// The version involved, if one is.
    pub version: Option<u64>,
    /// What is wrong (names the file).
    pub message: String,
    /// What the user can do.
    pub hint: String,
}

/// What `check` found.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Newest readable version, if any.
    pub readable_through: Option<u64>,
    /// Findings, in log order.
    pub problems: Vec<Problem>,
    /// What `repair` did.
    pub repaired: Vec<String>,
    /// Versions without a version checksum (summed up in one warning).
    #[serde(skip)]
    pub missing_crcs: Vec<u64>,
    /// What is neither damage nor a warning: old versions a retention vacuum made unreadable on
    /// purpose (docs/FORMAT.md "Checking a table"), said once.
    pub notes: Vec<String>,
    /// Data files a retention vacuum deleted: (count, newest version naming one, the vacuum's
    /// version and time).
    #[serde(skip)]
    vacuumed: Option<(u64, u64, u64, i64)>,
}

impl Report {
    /// The report for a table that cannot even be opened (its log is damaged at the start).
    pub fn unopenable(e: Error) -> Report {
        let mut r = Report::default();
        r.damage(Some(0), e.to_string(), RESTORE_HINT);
        r
    }

    /// Whether the table is whole (warnings allowed).
    pub fn is_whole(&self) -> bool {
        !self.problems.iter().any(|p| p.severity == Severity::Damage)
    }
    fn damage(&mut self, version: Option<u64>, message: String, hint: &str) {
        self.problems.push(Problem {
            severity: Severity::Damage,
            version,
            message,
            hint: hint.into(),
        });
    }
    fn warn(&mut self, version: Option<u64>, message: String, hint: &str) {
        self.problems.push(Problem {
            severity: Severity::Warning,
            version,
            message,
            hint: hint.into(),
        });
    }
}

const RESTORE_HINT: &str =
    "restore the file from a backup; versions before it stay readable (`tinydelta read --version N`)";

const HOLE_HINT: &str = "if the newer commit files are strays (copied into _delta_log/ by mistake), move them out of \
     _delta_log/; otherwise restore the missing commit from a backup; versions before it stay readable";

const NEWEST_HINT: &str = "`tinydelta check --repair` moves the damaged newest commit into _delta_log/_corrupt/ (the \
     table is then whole at the version before; its data files are kept), or restore the file from a backup";

/// What the user can do about damage at `version` (`message` says what is wrong).
fn hint(version: u64, newest: u64, message: &str) -> &'static str {
    if message.contains("a hole in the log") {
        HOLE_HINT
    } else if version == newest {
        NEWEST_HINT
    } else {
        RESTORE_HINT
    }
}

/// What [`check`] does beyond reading the log.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Re-read every live data file and count its rows against its stats (`--deep`).
    pub deep: bool,
    /// Move a damaged newest commit into `_delta_log/_corrupt/` (`--repair`).
    pub repair: bool,
}

/// Check `table`. Errors: only when the log folder cannot be listed at all.
pub fn check(table: &Table, opts: &CheckOptions) -> Result<Report> {
    let CheckOptions { deep, repair } = *opts;
    let mut report = Report::default();
    let listing = Listing::read(table.log_dir_handle())?;
    for (name, v) in &listing.not_regular {
        if v.is_none() {
            report.damage(
                None,
                format!("{}: not a regular file", table.log_dir_handle().join(name).display()),
                "remove it: tinydelta never follows symlinks or opens special files in _delta_log/",
            );
        }
    }
    let seg = match table.segment() {
        Ok(s) => s,
        Err(e) => {
            report.damage(Some(0), e.to_string(), RESTORE_HINT);
            return Ok(report);
        }
    };
    // Every commit present, each on its own: all damage is listed, not only the first.
    let mut first_bad = seg.damage.as_ref().map(|d| d.version);
    if let Some(d) = &seg.damage {
        let message = d.error().to_string();
        let h = hint(d.version, seg.newest_present, &message);
        report.damage(Some(d.version), message, h);
    }
    // Only the versions whose commit the listing shows: a stray name far in the future (version
    // 10^19) is one hole, not 10^19 missing commits to ask for.
    let mut present: Vec<u64> = listing
        .commits
        .iter()
        .copied()
        .chain(listing.not_regular.iter().filter_map(|(_, v)| *v))
        .filter(|v| (seg.first..=seg.newest_present).contains(v))
        .collect();
    present.sort_unstable();
    present.dedup();
    for v in present {
        if seg.damage.as_ref().is_some_and(|d| d.version == v) {
            continue;
        }
        match table.read_commit(v) {
            Ok(_) => {}
            Err(Error::VersionNotFound { .. }) => {}
            Err(e) if seg.damage.as_ref().is_some_and(|d| v > d.version) && e.to_string().contains("hole") => {}
            Err(e) => {
                first_bad = Some(first_bad.map_or(v, |b| b.min(v)));
                let message = e.to_string();
                let h = hint(v, seg.newest_present, &message);
                report.damage(Some(v), message, h);
            }
        }
    }
    let end = match first_bad {
        Some(0) => None,
        Some(b) => Some(b - 1),
        None => Some(seg.end),
    };
    report.readable_through = end;
    if let Some(end) = end {
        check_versions(table, seg.first, end, deep, &mut report)?;
    }
    if let (Some(first), Some(last)) = (
        report.missing_crcs.first().copied(),
        report.missing_crcs.last().copied(),
    ) {
        let n = report.missing_crcs.len();
        report.warn(
            Some(last),
            if n == 1 {
                format!("1 version ({first}) has no version checksum (.crc)")
            } else {
                format!("{n} versions (from {first} to {last}) have no version checksum (.crc)")
            },
            "nothing to do: readers do not need them; tinydelta writes one after each commit",
        );
    }
    if repair {
        repair_newest(table, &seg, first_bad, &mut report)?;
    }
    Ok(report)
}

/// Replay `first..=end`, checking data files, checkpoints and version checksums.
fn check_versions(table: &Table, first: u64, end: u64, deep: bool, report: &mut Report) -> Result<()> {
    let base = match table.snapshot(first) {
        Ok(s) => s,
        Err(e) => {
            report.damage(Some(first), e.to_string(), RESTORE_HINT);
            return Ok(());
        }
    };
    // Data files: every file some readable version names: path -> (size, last version naming it).
    let mut named: BTreeMap<String, (u64, u64, bool)> = BTreeMap::new();
    let mut snap = base;
    loop {
        check_side_files(table, &snap, report);
        for f in &snap.files {
            named.insert(f.path.to_string(), (f.size, snap.version, false));
        }
        let v = snap.version + 1;
        if v > end {
            break;
        }
        snap = match table.snapshot_after(&snap, v) {
            Ok(s) => s,
            Err(e) => {
                report.damage(Some(v), e.to_string(), RESTORE_HINT);
                return Ok(());
            }
        };
    }
    let latest = snap;
    for f in &latest.files {
        if let Some(e) = named.get_mut(f.path.as_str()) {
            e.2 = true;
        }
    }
    // The latest version's entries by path: one lookup per named file, not a scan of them all.
    let latest_by_path: HashMap<&str, &crate::log::snapshot::FileEntry> = if deep {
        latest.files.iter().map(|f| (f.path.as_str(), &**f)).collect()
    } else {
        HashMap::new()
    };
    for (path, (size, last, live)) in &named {
        match table.open_data_file(path, *size) {
            Ok(file) => {
                if deep
                    && *live
                    && let Some(&entry) = latest_by_path.get(path.as_str())
                {
                    let full = table.root().join(path);
                    if entry.converted() {
                        // Converting a Parquet file reads every row and checks the count: from
                        // the Parquet file itself, never from the converted-rows cache.
                        if let Err(e) = crate::table::parquet_cache::convert_fresh(table.dir(), entry, &latest.schema, false) {
                            report.damage(Some(entry.added_in), e.to_string(), RESTORE_HINT);
                        }
                        continue;
                    }
                    let rows = match crate::format::rows::canonical_file_rows(file, &full, &latest.schema)? {
                        Ok(rows) => rows,
                        Err(why) => {
                            report.damage(Some(entry.added_in), format!("{}: {why}", full.display()), RESTORE_HINT);
                            continue;
                        }
                    };
                    if entry.has_stats && rows != entry.num_records {
                        report.damage(
                            Some(entry.added_in),
                            format!(
                                "{}: {}, but its add action's stats say {}",
                                table.root().join(path).display(),
                                crate::format::diagnose::count(rows, "row", "rows"),
                                entry.num_records
                            ),
                            RESTORE_HINT,
                        );
                    }
                }
            }
            Err(e) if !live && crate::table::is_missing_data_file(&e) => {
                match crate::table::history::vacuum_that_deleted(table, *last, path)? {
                    // Deleted on purpose: summed up in one note below, never a warning.
                    Some((v, ts)) => {
                        let (n, through, by, at) = report.vacuumed.unwrap_or((0, 0, v, ts));
                        let (by, at) = if v >= by { (v, ts) } else { (by, at) };
                        report.vacuumed = Some((n + 1, through.max(*last), by, at));
                    }
                    None => report.damage(
                        Some(*last),
                        format!(
                            "{} (named by versions up to {last}) is missing, and no vacuum deleted it",
                            table.root().join(path).display()
                        ),
                        RESTORE_HINT,
                    ),
                }
            }
            Err(e) if crate::table::is_unsupported_format(&e) => report.warn(
                Some(*last),
                e.to_string(),
                "read the versions naming it with a Parquet-capable Delta reader; the others read with tinydelta",
            ),
            Err(e) => report.damage(Some(*last), e.to_string(), RESTORE_HINT),
        }
    }
    if let Some((n, through, v, ts)) = report.vacuumed {
        let readable = crate::table::history::readable_versions(table)?;
        report.notes.push(format!(
            "{} named by versions up to {through} {} deleted on purpose by a retention vacuum (the newest: {}, \
             version {v}), so those versions are no longer readable; readable versions: {}",
            crate::format::diagnose::count(n, "data file", "data files"),
            if n == 1 { "was" } else { "were" },
            crate::util::time::shown_ms(ts),
            crate::ops::vacuum::format_ranges(&readable),
        ));
    }
    Ok(())
}

const CHECKPOINT_HINT: &str = "delete it from _tinydelta/checkpoints/ (readers replay the commits instead while they exist); it is rewritten when needed";

/// Version checksum and checkpoint of one version (warnings only).
fn check_side_files(table: &Table, s: &Snapshot, report: &mut Report) {
    match crate::log::crc::read(table.log_dir_handle(), s.version) {
        Ok(Some(crc)) => {
            if let Some(m) = crc.mismatch(s) {
                report.warn(
                    Some(s.version),
                    format!("version checksum {}: {m}", crate::log::files::crc_file_name(s.version)),
                    "delete the .crc file; readers do not need it",
                );
            }
        }
        Ok(None) => report.missing_crcs.push(s.version),
        // A checksum is never part of the table: word it as what it is, not as a corrupt table.
        Err(Error::Corrupt { path, reason }) => report.warn(
            Some(s.version),
            format!("{}: {reason}", path.display()),
            "delete the .crc file; readers do not need it",
        ),
        Err(e) => report.warn(
            Some(s.version),
            e.to_string(),
            "delete the .crc file; readers do not need it",
        ),
    }
    if crate::log::checkpoint::newest_at_or_before(table.dir(), s.version) == Some(s.version) {
        match crate::log::checkpoint::read(table.dir(), s.version) {
            Ok(cp) if cp.files.len() == s.files.len() && cp.files.iter().zip(&s.files).all(|(c, r)| c.agrees_with_replay(r)) => {}
            Ok(_) => report.damage(
                Some(s.version),
                format!(
                    "{}: the checkpoint of version {} disagrees with the replay of the commits it covers",
                    table
                        .root()
                        .join(crate::log::checkpoint::CHECKPOINT_DIR)
                        .join(crate::log::checkpoint::file_name(s.version))
                        .display(),
                    s.version
                ),
                CHECKPOINT_HINT,
            ),
            Err(e) => report.damage(Some(s.version), e.to_string(), CHECKPOINT_HINT),
        }
    }
}

/// Move a damaged newest commit aside into `_delta_log/_corrupt/`.
fn repair_newest(
    table: &Table,
    seg: &crate::log::segment::LogSegment,
    first_bad: Option<u64>,
    report: &mut Report,
) -> Result<()> {
    let Some(bad) = first_bad else { return Ok(()) };
    if bad != seg.newest_present || bad == 0 || seg.damage.as_ref().is_some_and(|d| d.version != bad) {
        report.repaired.push(format!(
            "nothing moved: only a damaged newest commit is repaired automatically (the damage is at version {bad}, the newest commit is {})",
            seg.newest_present
        ));
        return Ok(());
    }
    let log = table.log_dir_handle();
    let corrupt = log.create_dir(CORRUPT_DIR, 0o755)?;
    let name = commit_file_name(bad);
    let mut to = name.clone();
    let mut n = 0;
    while corrupt.stat(&to)?.is_some() {
        n += 1;
        to = format!("{name}.{n}");
    }
    log.rename(&name, &corrupt, &to)
        .map_err(|e| Error::io("rename", log.join(&name), e))?;
    let crc = crate::log::files::crc_file_name(bad);
    if log.stat(&crc)?.is_some() {
        log.rename(&crc, &corrupt, &format!("{to}.crc"))
            .map_err(|e| Error::io("rename", log.join(&crc), e))?;
    }
    log.sync()?;
    corrupt.sync()?;
    report.repaired.push(format!(
        "moved {} to {}; the table is whole at version {} (the moved commit's data files are kept by vacuum; recover its rows with `tinydelta append` from those files if you need them, then delete the file from `_delta_log/_corrupt/`)",
        log.join(&name).display(),
        corrupt.join(&to).display(),
        bad - 1
    ));
    report.problems.retain(|p| p.version != Some(bad));
    report.readable_through = Some(bad - 1);
    Ok(())
}
