//! Vacuum (README, "Usage"; docs/FORMAT.md, "Vacuum"): delete what no version names, never what one does.
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
//! through directory handles ([`crate::beneath::Dir`]): a symlinked `_staging`,
//! `_tinydelta` or `checkpoints` is an error, never followed. `_staging/` is cleaned only under
//! the mount's lock (`_staging/.lock`, `flock`), held until the last deletion, so a mount
//! starting meanwhile cannot race it; while a mount holds it `_staging/` is left alone.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::beneath::{Dir, Kind};
use crate::error::{Error, Result};
use crate::log::LogFile;
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
        self.report.deleted.push(dir.join(name));
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
    let Some(corrupt) = (match log.try_dir(crate::log::CORRUPT_DIR) {
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
                out.insert(crate::actions::decode_path(&p).unwrap_or(p));
            }
        }
    }
    Ok(Ok(out))
}

/// Read a file of `_delta_log/_corrupt/` whole, up to [`crate::log::MAX_COMMIT_BYTES`].
fn read_bounded(f: std::fs::File, path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let limit = crate::log::MAX_COMMIT_BYTES;
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
        Ok(None) | Err(Error::Corrupt { .. }) => return Ok(None),
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

/// Vacuum `table`, deleting candidates whose mtime is at least `retention` old; with `dry_run`
/// only report them. Errors: [`crate::Error::Corrupt`] if the log cannot be replayed whole (then
/// nothing is deleted) or a folder vacuum works in is a symlink; [`crate::Error::Io`] naming the
/// path.
pub fn vacuum(table: &Table, retention: Duration, dry_run: bool) -> Result<VacuumReport> {
    let seen = table.latest_version()?;
    let (referenced, _staged_ids) = table.inventory_with_param(crate::staging::STAGING_ID_PARAM)?;
    let cutoff = SystemTime::now().checked_sub(retention).unwrap_or(UNIX_EPOCH);
    let cutoff_s = cutoff.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let mut sweep = Sweep {
        cutoff_s,
        dry_run,
        report: VacuumReport::default(),
    };
    let root = table.dir();
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
        if name.starts_with("part-")
            && name.ends_with(".jsonl")
            && !referenced.contains(&name)
            && !aside.contains(&name)
            && let Some(lock) = lock_orphan(root, &name, cutoff_s)?
        {
            held.push((name, lock));
        }
    }
    // A writer that published after the replay above released its lock: re-derive what the
    // newest version names before deleting anything.
    if !held.is_empty() && table.latest_version()? != seen {
        let (now, _) = table.inventory_with_param(crate::staging::STAGING_ID_PARAM)?;
        held.retain(|(name, _)| !now.contains(name));
    }
    for (name, _lock) in &held {
        sweep.consider(root, name)?;
    }
    drop(held);
    let log = table.log_dir_handle();
    for name in names(log)? {
        if matches!(LogFile::parse(&name), LogFile::Temp(_))
            || (name.starts_with('.') && name.ends_with(".tmp") && name.contains(".crc."))
        {
            sweep.consider(log, &name)?;
        }
    }
    if let Some(cps) = crate::checkpoint::dir(root)? {
        for name in names(&cps)? {
            if name.starts_with('.') && name.ends_with(".tmp") {
                sweep.consider(&cps, &name)?;
            }
        }
    }
    sweep_staging(root, &mut sweep)?;
    sweep.report.deleted.sort();
    Ok(sweep.report)
}

/// `_staging/` leftovers under the mount's lock: `*.tmp` files and orphan halves (a `.data`
/// without its `.name`, a `.name`, `.error`, `.sync` or `.canon` without its `.data`; see
/// [`crate::staging`]).
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
                "data" => !has(id, "name"),
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
