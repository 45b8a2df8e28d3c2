//! History questions about a table: which versions can still be read, and which retention
//! vacuum deleted a data file that an old version names (docs/FORMAT.md "Vacuum").

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::format::actions::VACUUM_START;
use crate::table::Table;

/// The `VACUUM START` commit after `version` that deleted `path` (a data file of `version`
/// that is gone): the first one at which `path` was not live. `(vacuum version, its time)`.
/// Errors: as [`Table::read_commit`] and [`Table::snapshot`].
pub fn vacuum_that_deleted(table: &Table, version: u64, path: &str) -> Result<Option<(u64, i64)>> {
    let latest = table.latest_version()?;
    for v in version.saturating_add(1)..=latest {
        let c = table.read_commit(v)?;
        if c.info.as_ref().is_some_and(|i| i.operation == VACUUM_START)
            && !table.snapshot(v)?.files.iter().any(|f| f.path == path)
        {
            return Ok(Some((v, table.commit_info(v)?.timestamp)));
        }
    }
    Ok(None)
}

/// `e` as [`Error::Vacuumed`] when it says a data file of `version` is missing and a retention
/// vacuum deleted it; else `e` unchanged.
pub fn explain_missing(table: &Table, version: u64, path: &str, e: Error) -> Error {
    if !crate::table::is_missing_data_file(&e) {
        return e;
    }
    match vacuum_that_deleted(table, version, path) {
        Ok(Some((vacuum_version, ts))) => Error::Vacuumed {
            table: table.root().to_path_buf(),
            version,
            vacuum_version,
            time: crate::util::time::shown_ms(ts),
            path: table.root().join(path),
        },
        _ => e,
    }
}

/// Which versions can be read, as inclusive ranges `(from, to)`, oldest first: a version is
/// readable when the log up to it is whole and every data file it names is on disk. One replay of the log (from the
/// segment's start) and one stat per distinct path. Errors: as [`Table::snapshot`].
pub fn readable_versions(table: &Table) -> Result<Vec<(u64, u64)>> {
    // Up to the newest version before any damage in the log (damaged versions are not readable).
    let Some(latest) = table.readable_through()? else {
        return Ok(Vec::new());
    };
    let seg = table.segment()?;
    if table.snapshot_arc(latest)?.vacuums == 0 {
        // No retention vacuum ever ran (counted in the snapshot and its checkpoint, so this costs
        // no walk of the history): every version the whole log reaches is readable. A file
        // missing without a vacuum is damage, which `read` names and `check` reports.
        return Ok(vec![(seg.first, latest)]);
    }
    let base = table.snapshot(seg.first)?;
    let mut exists: HashMap<String, bool> = HashMap::new();
    let mut present = |p: &str| -> Result<bool> {
        if let Some(b) = exists.get(p) {
            return Ok(*b);
        }
        let b = table.dir().stat(p)?.is_some();
        exists.insert(p.to_string(), b);
        Ok(b)
    };
    let mut missing_live: HashSet<String> = HashSet::new();
    for f in &base.files {
        if !present(&f.path)? {
            missing_live.insert(f.path.to_string());
        }
    }
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mark = |v: u64, ok: bool, ranges: &mut Vec<(u64, u64)>| {
        if !ok {
            return;
        }
        match ranges.last_mut() {
            Some(r) if r.1 + 1 == v => r.1 = v,
            _ => ranges.push((v, v)),
        }
    };
    mark(seg.first, missing_live.is_empty(), &mut ranges);
    for v in seg.first + 1..=latest {
        for a in table.read_commit(v)?.actions {
            if let Some(r) = a.remove {
                missing_live.remove(&r.path);
            }
            if let Some(add) = a.add {
                if present(&add.path)? {
                    missing_live.remove(&add.path);
                } else {
                    missing_live.insert(add.path);
                }
            }
        }
        mark(v, missing_live.is_empty(), &mut ranges);
    }
    Ok(ranges)
}

impl Table {
    /// The version that time travel by `time` reads (`read --as-of`, the Python package's
    /// `read(as_of=...)`): the newest version committed at or before it ([`Table::version_as_of`];
    /// `time` in any form of [`crate::util::time::parse`], docs/CLI.md "Usage").
    ///
    /// Errors: [`Error::InvalidArgument`] when `time` does not parse; [`Error::NoVersionAsOf`]
    /// when it is before the commit of the first version the log holds; as [`Table::commit_times`].
    pub fn version_at_time(&self, time: &str) -> Result<u64> {
        use crate::util::time::{now_ms, parse, shown_ms};
        let ms = parse(time, now_ms()).map_err(|e| Error::InvalidArgument(format!("{} {e}", crate::util::spelling::opt("as_of"))))?;
        if let Some(v) = self.version_as_of(ms)? {
            return Ok(v);
        }
        let shown = match shown_ms(ms) {
            r if r == time => time.to_string(),
            r => format!("{time} ({r})"),
        };
        let first_version = self.segment()?.first;
        Err(Error::NoVersionAsOf {
            table: self.root().to_path_buf(),
            time: shown,
            first_version,
            first: shown_ms(self.commit_times(first_version)?.1.first().copied().unwrap_or_default()),
        })
    }
}

