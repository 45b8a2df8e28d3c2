//! The mount's `changes.jsonl` (the table's change feed, [`crate::ops::changes`]) and `at/<TIME>`
//! (symlinks to the version current at a time, [`crate::util::time`]). docs/MOUNT.md "Following a
//! table: `changes.jsonl`" and docs/MOUNT.md "Time travel by time: `at/`".
//!
//! The feed's index is kept for the life of the mount and extended by the commits published
//! since the last look (each commit read once); its size is asked of the log at every
//! `getattr` (TTL 0), so `tail -f` sees a commit at its next poll, whoever made it.

use std::sync::{Arc, Mutex, MutexGuard};

use log::{debug, warn};

use crate::util::sync::lock;
use crate::table::Table;
use crate::ops::changes::{ChangeFeed, ChangePart, PartReader, PartReaders};

use super::errno::{FsError, FsResult};

/// How many part readers (an open data file and its row marks) are kept.
const READERS: usize = 64;

/// State of `changes.jsonl` and `at/`.
#[derive(Debug)]
pub struct ChangesNode {
    feed: Mutex<Option<ChangeFeed>>,
    readers: Mutex<PartReaders>,
    /// Whether the log line for a feed stopped by log cleanup was written (once per mount).
    cleaned_up_said: std::sync::atomic::AtomicBool,
}

impl Default for ChangesNode {
    fn default() -> Self {
        ChangesNode {
            feed: Mutex::new(None),
            readers: Mutex::new(PartReaders::new(READERS)),
            cleaned_up_said: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl ChangesNode {
    /// The feed extended to the newest readable version (versions before any damage). Returns
    /// the guard so callers read a consistent index.
    fn current<'a>(&'a self, table: &Table) -> crate::error::Result<MutexGuard<'a, Option<ChangeFeed>>> {
        let mut g = lock(&self.feed);
        if g.is_none() {
            *g = Some(ChangeFeed::new(table, None)?);
        }
        if let Some(through) = table.readable_through()?
            && let Some(feed) = g.as_mut()
        {
            match feed.extend(table, through) {
                Err(e @ crate::error::Error::ChangesCleanedUp { .. }) => {
                    if !self.cleaned_up_said.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        warn!("changes.jsonl: {e}");
                    }
                    return Err(e);
                }
                r => r?,
            }
        }
        Ok(g)
    }

    /// `changes.jsonl`'s size in bytes and the newest indexed commit's time (ms since epoch).
    pub fn size(&self, table: &Table) -> FsResult<(u64, Option<i64>)> {
        let g = self.current(table)?;
        Ok(g.as_ref().map_or((0, None), |f| (f.len(), f.times().last().copied())))
    }

    /// Up to `size` bytes of `changes.jsonl` at `offset` into `buf`.
    pub fn read(&self, table: &Table, offset: u64, size: u32, buf: &mut Vec<u8>) -> FsResult<()> {
        // Parts never change once indexed: only the one needed is copied, and the file is read
        // without the index's lock. The index is extended only for an offset past its end.
        let parts = |o: u64| -> crate::error::Result<Option<(usize, ChangePart)>> {
            let mut g = lock(&self.feed);
            if g.as_ref().is_none_or(|f| o >= f.len()) {
                drop(g);
                g = self.current(table)?;
            }
            Ok(g.as_ref().and_then(|f| f.part_at(o).map(|i| (i, f.parts()[i].clone()))))
        };
        let reader = |i: usize, p: &ChangePart| -> crate::error::Result<Arc<PartReader>> {
            if let Some(r) = lock(&self.readers).get(i) {
                return Ok(r);
            }
            let r = match PartReader::open(table, p) {
                Ok(r) => Arc::new(r),
                Err(e) if crate::table::is_missing_data_file(&e) => {
                    // A file a vacuum deleted: EIO, with a log line naming the first version
                    // whose changes can be read (docs/MOUNT.md "Following a table:
                    // `changes.jsonl`").
                    let all = lock(&self.feed)
                        .as_ref()
                        .map(|f| f.parts().to_vec())
                        .unwrap_or_default();
                    let all: Vec<&ChangePart> = all.iter().collect();
                    let e = match crate::ops::changes::check_parts(table, &all) {
                        Err(v @ crate::error::Error::ChangesVacuumed { .. }) => v,
                        _ => e,
                    };
                    warn!("changes.jsonl: {e}");
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            lock(&self.readers).put(i, r.clone());
            Ok(r)
        };
        crate::ops::changes::read_at(&parts, &reader, offset, size as usize, buf)?;
        Ok(())
    }

    /// The versions listed in `at/`, with their commit times: `(first version, times)`.
    pub fn times(&self, table: &Table) -> FsResult<(u64, Vec<i64>)> {
        let g = self.current(table)?;
        Ok(g.as_ref().map_or((0, Vec::new()), |f| (f.first(), f.times().to_vec())))
    }

    /// The commit time of version `v` (ms since epoch) from the index, `NotFound` when the
    /// index does not hold it.
    pub fn time_of(&self, table: &Table, v: u64) -> FsResult<i64> {
        let g = self.current(table)?;
        g.as_ref()
            .and_then(|f| {
                v.checked_sub(f.first())
                    .and_then(|i| f.times().get(i as usize).copied())
            })
            .ok_or(FsError::NotFound)
    }

    /// The name of version `v`'s entry in `at/`: its commit time, RFC 3339 UTC with ms.
    pub fn at_name(time_ms: i64) -> String {
        crate::util::time::shown_ms(time_ms)
    }

    /// The version `at/<name>` points at: the newest whose commit time is at or before the
    /// time `name` says (any form of [`crate::util::time`]; the `--as-of` rule), found in the
    /// commit times the feed's index holds (strictly increasing, so a binary search).
    /// `NotFound` for a name that is not a time or a time before the first commit.
    pub fn lookup(&self, table: &Table, name: &str) -> FsResult<u64> {
        let ms = crate::util::time::parse(name, crate::util::time::now_ms()).map_err(|e| {
            debug!("at/{}: {e}", super::printable(name));
            FsError::NotFound
        })?;
        let g = self.current(table)?;
        let Some(feed) = g.as_ref() else {
            return Err(FsError::NotFound);
        };
        let n = feed.times().partition_point(|t| *t <= ms);
        match n.checked_sub(1) {
            Some(i) => Ok(feed.first() + i as u64),
            None => Err(FsError::NotFound),
        }
    }
}
