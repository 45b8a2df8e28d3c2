//! The timeline of `tinydelta serve` (docs/SERVE.md "GET /api/versions"): one entry per
//! version with its time, operation, rows added and removed, and the table's rows, bytes and
//! files after it. Built by reading each commit once, in order, and extended from the last
//! version indexed when the log grows, so a new commit costs one commit read.

use std::collections::HashMap;

use serde::Serialize;

use crate::error::Result;
use crate::table::Table;

/// One version of the timeline.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The version.
    pub version: u64,
    /// Its time as time travel uses it, ms since the epoch (docs/FORMAT.md "Commit times").
    pub timestamp: i64,
    /// The same, RFC 3339.
    pub time: String,
    /// The operation as `history` shows it (APPEND, OVERWRITE, RESTORE, ...).
    pub operation: String,
    /// The `incoming/` name the commit came from (the mount's drop box), if any.
    pub source: Option<String>,
    /// The commit's `txn` actions: application id and version (idempotent appends).
    pub txns: Vec<(String, i64)>,
    /// Rows of the files it added with `dataChange` (`None`: a file without a row count).
    pub rows_added: Option<u64>,
    /// Rows of the live files it removed with `dataChange`.
    pub rows_removed: Option<u64>,
    /// Rows live after the commit (`None`: a live file without a row count).
    pub rows: Option<u64>,
    /// Bytes of the live data files after the commit.
    pub bytes: u64,
    /// Live data files after the commit.
    pub files: usize,
}

/// What the timeline knows of a live file: `(rows, size)`.
type Live = HashMap<String, (Option<u64>, u64)>;

/// The timeline, extended as the log grows.
#[derive(Debug, Default)]
pub struct Timeline {
    entries: Vec<Entry>,
    live: Live,
    started: bool,
}

impl Timeline {
    /// The entries indexed.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Index every version up to `latest` not yet indexed. On an error, the versions before the
    /// failing one stay indexed and the next call starts again at it.
    pub fn extend(&mut self, table: &Table, latest: u64) -> Result<()> {
        if !self.started {
            let first = table.segment()?.first;
            if first > 0 {
                // A checkpoint start: the files live at it, and the version itself as one entry.
                let snap = table.snapshot(first)?;
                for f in &snap.files {
                    self.live
                        .insert(f.path.to_string(), (f.has_stats.then_some(f.num_records), f.size));
                }
                let info = table.commit_info(first)?;
                let (rows, bytes, files) = self.totals();
                self.entries.push(Entry {
                    version: first,
                    timestamp: snap.timestamp,
                    time: crate::util::time::shown_ms(snap.timestamp),
                    operation: info.short_operation(),
                    source: None,
                    txns: Vec::new(),
                    rows_added: None,
                    rows_removed: None,
                    rows,
                    bytes,
                    files,
                });
            }
            self.started = true;
        }
        let mut next = self.entries.last().map_or(0, |e| e.version + 1);
        while next <= latest {
            self.index(table, next)?;
            next += 1;
        }
        Ok(())
    }

    fn totals(&self) -> (Option<u64>, u64, usize) {
        let rows = self.live.values().try_fold(0u64, |n, (r, _)| r.map(|r| n.saturating_add(r)));
        let bytes = self.live.values().map(|(_, s)| *s).sum();
        (rows, bytes, self.live.len())
    }

    fn index(&mut self, table: &Table, v: u64) -> Result<()> {
        let c = table.read_commit(v)?;
        let info = match &c.info {
            Some(i) if i.timestamp_recorded => i.clone(),
            _ => table.commit_info(v)?,
        };
        let previous = self.entries.last().map(|e| e.timestamp);
        let timestamp = crate::table::monotonic_time(info.timestamp, previous);
        let mut live = self.live.clone();
        let (mut added, mut removed) = (Some(0u64), Some(0u64));
        let mut txns = Vec::new();
        for a in &c.actions {
            if let Some(r) = &a.remove
                && let Some((rows, _)) = live.remove(&r.path)
                && r.data_change
            {
                removed = removed.zip(rows).map(|(a, b)| a.saturating_add(b));
            }
            if let Some(add) = &a.add {
                let deleted = add
                    .deletion_vector
                    .as_ref()
                    .map_or(0, |d| u64::try_from(d.cardinality).unwrap_or(0));
                let rows = add.num_records().map(|n| n.saturating_sub(deleted));
                if add.data_change {
                    added = added.zip(rows).map(|(a, b)| a.saturating_add(b));
                }
                live.insert(add.path.clone(), (rows, add.size));
            }
            if let Some(t) = &a.txn {
                txns.push((t.app_id.clone(), t.version));
            }
        }
        self.live = live;
        let (rows, bytes, files) = self.totals();
        self.entries.push(Entry {
            version: v,
            timestamp,
            time: crate::util::time::shown_ms(timestamp),
            operation: info.short_operation(),
            source: info
                .operation_parameters
                .get(crate::table::staging::SOURCE_PARAM)
                .cloned(),
            txns,
            rows_added: added,
            rows_removed: removed,
            rows,
            bytes,
            files,
        });
        Ok(())
    }
}
