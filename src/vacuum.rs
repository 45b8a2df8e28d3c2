//! Vacuum (SPEC section 3): delete what no version names, never what one does.
//!
//! Candidates: `part-*.jsonl` in the table folder that no `add` of any version ever named,
//! stale `_delta_log/.<version>.<uuid>.tmp` commits-in-progress, and `_staging/` leftovers.
//! Each is deleted only when its mtime is older than the retention, so an in-flight writer's
//! files survive.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::{IoContext, Result};
use crate::log::{LOG_DIR, LogFile};
use crate::table::Table;

/// The default retention: one hour.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(3600);

/// The staging folder of the mount's `incoming/`.
pub const STAGING_DIR: &str = "_staging";

/// What a vacuum found (and deleted, unless it was a dry run).
#[derive(Debug, Default)]
pub struct VacuumReport {
    /// Paths deleted (or that would be).
    pub deleted: Vec<PathBuf>,
    /// Their total size, bytes.
    pub bytes: u64,
}

fn older_than(path: &Path, cutoff: SystemTime) -> Result<Option<u64>> {
    let meta = fs::symlink_metadata(path).ctx("stat", path)?;
    let mtime = meta.modified().ctx("stat", path)?;
    Ok((mtime <= cutoff).then_some(meta.len()))
}

/// Vacuum `table`, deleting candidates whose mtime is at least `retention` old; with `dry_run`
/// only report them. Errors: [`crate::Error::Io`] naming the path; [`crate::Error::Corrupt`] if the
/// log cannot be replayed (then nothing is deleted).
pub fn vacuum(table: &Table, retention: Duration, dry_run: bool) -> Result<VacuumReport> {
    let referenced = table.all_added_paths()?;
    let cutoff = SystemTime::now()
        .checked_sub(retention)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut report = VacuumReport::default();
    let consider = |path: PathBuf, report: &mut VacuumReport| -> Result<()> {
        if let Some(len) = older_than(&path, cutoff)? {
            if !dry_run {
                if path.is_dir() {
                    fs::remove_dir_all(&path).ctx("delete", &path)?;
                } else {
                    fs::remove_file(&path).ctx("delete", &path)?;
                }
            }
            report.bytes += len;
            report.deleted.push(path);
        }
        Ok(())
    };
    let root = table.root();
    for entry in fs::read_dir(root).ctx("list", root)? {
        let entry = entry.ctx("list", root)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("part-") && name.ends_with(".jsonl") && !referenced.contains(name) {
            consider(entry.path(), &mut report)?;
        }
    }
    let log_dir = root.join(LOG_DIR);
    for entry in fs::read_dir(&log_dir).ctx("list", &log_dir)? {
        let entry = entry.ctx("list", &log_dir)?;
        if let Some(name) = entry.file_name().to_str()
            && matches!(LogFile::parse(name), LogFile::Temp(_))
        {
            consider(entry.path(), &mut report)?;
        }
    }
    let staging = root.join(STAGING_DIR);
    if staging.is_dir() {
        for entry in fs::read_dir(&staging).ctx("list", &staging)? {
            let entry = entry.ctx("list", &staging)?;
            consider(entry.path(), &mut report)?;
        }
    }
    report.deleted.sort();
    Ok(report)
}
