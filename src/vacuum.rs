//! Vacuum (SPEC section 3): delete what no version names, never what one does.
//!
//! Candidates: `part-*.jsonl` in the table folder that no `add` of any version ever named,
//! stale `_delta_log/.<version>.<uuid>.tmp` commits-in-progress and checkpoint temporaries,
//! and `_staging/` leftovers.
//! Each is deleted only when its mtime is older than the retention, so an in-flight writer's
//! files survive.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::{Error, IoContext, Result};
use crate::log::{LOG_DIR, LogFile};
use crate::table::Table;

/// The default retention: one hour.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(3600);

/// The staging folder of the mount's `incoming/`.
pub const STAGING_DIR: &str = crate::staging::STAGING_DIR;

/// What a vacuum found (and deleted, unless it was a dry run).
#[derive(Debug, Default)]
pub struct VacuumReport {
    /// Paths deleted (or that would be).
    pub deleted: Vec<PathBuf>,
    /// Their total size, bytes.
    pub bytes: u64,
}

fn older_than(path: &Path, cutoff: SystemTime) -> Result<Option<u64>> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        // Gone since the listing (a writer finished): nothing to delete.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("stat", path, e)),
    };
    let mtime = meta.modified().ctx("stat", path)?;
    Ok((mtime <= cutoff).then_some(meta.len()))
}

/// Vacuum `table`, deleting candidates whose mtime is at least `retention` old; with `dry_run`
/// only report them. Errors: [`crate::Error::Io`] naming the path; [`crate::Error::Corrupt`] if the
/// log cannot be replayed (then nothing is deleted).
pub fn vacuum(table: &Table, retention: Duration, dry_run: bool) -> Result<VacuumReport> {
    let (referenced, staged_ids) = table.inventory_with_param(crate::staging::STAGING_ID_PARAM)?;
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
    let checkpoints = root.join(crate::checkpoint::CHECKPOINT_DIR);
    if checkpoints.is_dir() {
        for entry in fs::read_dir(&checkpoints).ctx("list", &checkpoints)? {
            let entry = entry.ctx("list", &checkpoints)?;
            if entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with('.') && n.ends_with(".tmp"))
            {
                consider(entry.path(), &mut report)?;
            }
        }
    }
    // In `_staging/`, only what the mount's staging module calls leftovers (temporaries, orphan
    // halves, files whose staging id the log already committed); never a file a user may still
    // want, and nothing while a mount holds the table.
    let leftovers = crate::staging::leftovers(root, &staged_ids).ctx("list", root.join(STAGING_DIR))?;
    for path in leftovers.unwrap_or_default() {
        consider(path, &mut report)?;
    }
    report.deleted.sort();
    Ok(report)
}
