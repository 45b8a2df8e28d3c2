//! The commit loop (docs/FORMAT.md "Concurrency"): publish the next version with
//! [`crate::log::publish`]; when another writer won it, rebase over the winner unless it conflicts
//! with what this commit read.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::Path;
use std::sync::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::format::actions::Action;
use crate::log::publish::{
    Isolation, Linked, encode, link_after, link_prepared, next_timestamp, prepare_tmp, sync_new_files, sync_published,
};
use crate::util::sync::lock;
use crate::table::Table;

/// How many versions a blind append may be rebased over before giving up.
pub const MAX_REBASES: u32 = 10_000;

/// Commit as `read_version + 1` under Delta's default isolation level, WriteSerializable
/// (docs/FORMAT.md "Concurrency"): a commit that landed after `read_version` is a conflict only
/// when it removed (or re-added) one of `read_files` (the files this operation read, paths decoded)
/// or changed the metadata or protocol; otherwise (blind appends, vacuum commits) this commit is
/// serialized after it and `build` is called again for the next version. With `expect_version` set,
/// any commit after it is a conflict.
///
/// Errors: as [`commit_loop`].
pub fn commit_loop_serializable(
    table: &Table,
    read_version: u64,
    read_files: &std::collections::HashSet<String>,
    expect_version: Option<u64>,
    build: impl FnMut(u64, i64) -> Vec<Action>,
) -> Result<u64> {
    commit_loop_with(table, read_version, expect_version, &[], build, |version| {
        Ok(table.read_commit(version)?.actions.iter().any(|a| {
            a.metadata.is_some()
                || a.protocol.is_some()
                || a.remove.as_ref().is_some_and(|r| read_files.contains(&r.path))
                || a.add.as_ref().is_some_and(|r| read_files.contains(&r.path))
        }))
    })
    .map(|(v, _)| v)
}

/// WriteSerializable's rule for an operation that read the files `read_files` (paths decoded)
/// and keeps the order of rows (OPTIMIZE, DELETE, UPDATE, MERGE; docs/FORMAT.md "Concurrency"):
/// whether `commit`, which won the version this operation wanted, conflicts with it (it removed
/// or re-added a file read, or changed the metadata or protocol). The files it added that are
/// still live are collected in `appended` (`dataChange: false`), for the operation to re-add
/// after its own when it is rebased.
pub fn conflicts_reading(
    commit: &crate::log::files::Commit,
    read_files: &std::collections::HashSet<String>,
    appended: &mut Vec<crate::format::actions::Add>,
) -> bool {
    let mut conflict = false;
    for a in &commit.actions {
        conflict |= a.metadata.is_some() || a.protocol.is_some();
        if let Some(r) = &a.remove {
            conflict |= read_files.contains(&r.path);
            appended.retain(|x| x.path != r.path);
        }
        if let Some(add) = &a.add {
            conflict |= read_files.contains(&add.path);
            appended.retain(|x| x.path != add.path);
            let mut add = add.clone();
            add.data_change = false;
            appended.push(add);
        }
    }
    conflict
}

/// Commit as `read_version + 1`, rebasing blind appends as docs/FORMAT.md "Concurrency" says.
///
/// `build(version, previous_timestamp)` returns the actions to commit at `version` (called again
/// on each rebase, so `commitInfo.timestamp` and `readVersion` stay right). With `expect_version`
/// set, any existing `expect_version + 1` is a conflict. Returns the version published.
///
/// Errors: [`Error::ConcurrentWrite`] naming the version that got in the way; errors of
/// [`crate::log::publish::publish_after`]; [`Error::Corrupt`] if a rebase crosses a damaged commit.
pub fn commit_loop(
    table: &Table,
    read_version: u64,
    isolation: Isolation,
    expect_version: Option<u64>,
    build: impl FnMut(u64, i64) -> Vec<Action>,
) -> Result<u64> {
    commit_loop_after(table, read_version, isolation, expect_version, &[], build)
}

/// [`commit_loop`] for a commit whose new data files `data` are written but not yet fsynced:
/// each publish attempt fsyncs them together with the commit ([`publish_after`]).
pub fn commit_loop_after(
    table: &Table,
    read_version: u64,
    isolation: Isolation,
    expect_version: Option<u64>,
    data: &[(&File, &Path)],
    build: impl FnMut(u64, i64) -> Vec<Action>,
) -> Result<u64> {
    commit_loop_published(table, read_version, isolation, expect_version, data, build).map(|(v, _)| v)
}

/// [`commit_loop_after`], also returning the bytes of the commit file it published (exactly
/// what was linked as the version), so that the caller can advance its snapshot without
/// reading the commit back. Errors: as [`commit_loop`].
pub fn commit_loop_published(
    table: &Table,
    read_version: u64,
    isolation: Isolation,
    expect_version: Option<u64>,
    data: &[(&File, &Path)],
    build: impl FnMut(u64, i64) -> Vec<Action>,
) -> Result<(u64, Vec<u8>)> {
    if isolation == Isolation::ReadDependent {
        return commit_loop_with(table, read_version, expect_version, data, build, |_| Ok(true));
    }
    if expect_version.is_none() {
        return commit_sequenced(table, read_version, data, build);
    }
    commit_loop_with(table, read_version, expect_version, data, build, |version| {
        Ok(table
            .read_commit(version)?
            .actions
            .iter()
            .any(|a| a.metadata.is_some() || a.protocol.is_some()))
    })
}

/// The commit loop: publish `build`'s actions at the next version (fsyncing the unsynced data
/// files `data` with it, see [`publish_after`]); on a lost race, rebase unless
/// `conflicts(winner's version)` (or `expect_version` is set). Errors: as [`commit_loop`].
pub fn commit_loop_checked(
    table: &Table,
    read_version: u64,
    expect_version: Option<u64>,
    data: &[(&File, &Path)],
    build: impl FnMut(u64, i64) -> Vec<Action>,
    conflicts: impl Fn(u64) -> Result<bool>,
) -> Result<u64> {
    commit_loop_with(table, read_version, expect_version, data, build, conflicts).map(|(v, _)| v)
}

fn commit_loop_with(
    table: &Table,
    read_version: u64,
    expect_version: Option<u64>,
    data: &[(&File, &Path)],
    mut build: impl FnMut(u64, i64) -> Vec<Action>,
    conflicts: impl Fn(u64) -> Result<bool>,
) -> Result<(u64, Vec<u8>)> {
    let root = table.root();
    if let Some(exp) = expect_version
        && exp != read_version
    {
        return Err(Error::ConcurrentWrite {
            table: root.to_path_buf(),
            read_version: exp,
            version: read_version.max(exp + 1),
        });
    }
    let mut version = read_version + 1;
    let mut prev_ts = table.commit_timestamp(read_version)?;
    let append_only = table.append_only_at(read_version)?;
    // The data files and the table folder are fsynced by the first attempt only: a retry after
    // a lost race fsyncs just its new tmp.
    let mut data = Some(data);
    for _ in 0..MAX_REBASES {
        // From the check of `version` to its link under this process's publish lock: a version
        // another commit of this process took meanwhile is a lost race found by one `stat`,
        // before this commit writes or fsyncs anything for it; `_delta_log/` is fsynced after
        // the lock, one fsync shared with the commits linked meanwhile
        // (crate::sys::beneath::Dir::sync).
        let mut bytes = Vec::new();
        let linked = {
            let _publishing = match table.try_publish_lock() {
                Some(g) => g,
                None => {
                    // Another commit of this process is publishing: fsync the data files and
                    // the table folder while waiting for it, so that under the lock only the
                    // tmp is fsynced.
                    if let Some(d) = data.take() {
                        sync_new_files(table.dir(), d)?;
                    }
                    table.publish_lock()
                }
            };
            let log = table.log_dir_handle();
            if log.stat(&crate::log::files::commit_file_name(version))?.is_some() {
                Linked::Lost
            } else {
                let ts = next_timestamp(Some(prev_ts));
                let actions = build(version, ts);
                if append_only {
                    refuse_data_removal(table, &actions)?;
                }
                bytes = encode(&actions);
                table.check_log_in_place()?;
                link_after(table.dir(), log, version, &bytes, data.take())?
            }
        };
        match linked {
            Linked::Won { tmp } => {
                sync_published(table.dir(), table.log_dir_handle(), version, &tmp)?;
                return Ok((version, bytes));
            }
            Linked::Lost => {
                let conflict = Error::ConcurrentWrite {
                    table: root.to_path_buf(),
                    read_version,
                    version,
                };
                if expect_version.is_some() {
                    return Err(conflict);
                }
                // Retry at the newest version, found by one listing of the log (the segment),
                // not one lost race per version: every version skipped gets Delta's conflict
                // check (PROTOCOL "Optimistic Concurrency Control").
                let newest = table.segment()?.end.max(version);
                for v in version..=newest {
                    if conflicts(v)? {
                        return Err(Error::ConcurrentWrite {
                            table: root.to_path_buf(),
                            read_version,
                            version: v,
                        });
                    }
                }
                prev_ts = table.commit_info(newest)?.timestamp;
                version = newest + 1;
            }
        }
    }
    Err(Error::ConcurrentWrite {
        table: root.to_path_buf(),
        read_version,
        version,
    })
}

/// Refuse `actions` that remove rows from an append-only table: a `remove` with `dataChange:
/// true` (Delta PROTOCOL "Append-only Tables": new commits must not change or remove data;
/// rearranging files, `dataChange: false`, is allowed). Errors: [`Error::AppendOnly`] naming the
/// commit's operation.
fn refuse_data_removal(table: &Table, actions: &[Action]) -> Result<()> {
    if !actions.iter().any(|a| a.remove.as_ref().is_some_and(|r| r.data_change)) {
        return Ok(());
    }
    let operation = actions
        .iter()
        .find_map(|a| a.commit_info.as_ref().map(|c| c.operation.clone()))
        .unwrap_or_else(|| "this commit".into());
    Err(Error::AppendOnly {
        table: table.root().to_path_buf(),
        operation,
    })
}

/// Version tickets for the blind appends of one process (shared by a table's clones; the
/// mount's concurrent commits): each append gets the next version and the next commit time from
/// the sequencer, writes and fsyncs its commit tmp (and data files) at the same time as the
/// others, and links it once the version before it is linked, so concurrent commits pay for
/// their fsyncs side by side instead of one after another, and the version order is the order of
/// the tickets (docs/FORMAT.md "Concurrency").
///
/// A ticket whose version cannot be linked (another process linked it first, an error, a
/// conflict) voids every later ticket: the sequencer starts a new epoch from the log as it is on
/// disk, and the holders of void tickets take new ones (their tmps are removed, their data files
/// were fsynced already).
#[derive(Debug, Default)]
pub struct Sequencer {
    state: Mutex<SeqState>,
    linked: Condvar,
}

#[derive(Debug, Default)]
struct SeqState {
    /// Bumped when a ticket is voided: tickets of an older epoch are void.
    epoch: u64,
    /// The next version to hand out in this epoch (`None`: look at the log first).
    next: Option<u64>,
    /// The first version handed out in this epoch.
    first: u64,
    /// Every version before `first` was on disk when the epoch began, and every version from
    /// `first` up to this one was linked by a ticket of this epoch, in order.
    linked: u64,
    /// The commit time given to the last ticket.
    last_ts: i64,
    /// The versions of this epoch whose commit changes the metadata or protocol (a blind
    /// append's only conflicts).
    changes: BTreeSet<u64>,
}

/// One ticket: its epoch, version and commit time.
struct Ticket<'a> {
    seq: &'a Sequencer,
    epoch: u64,
    version: u64,
    ts: i64,
    /// Linked (or voided already): nothing to do on drop.
    done: bool,
}

impl Ticket<'_> {
    /// Void this ticket and every later one (a new epoch starts from the log on disk).
    fn void(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        let mut st = lock(&self.seq.state);
        if st.epoch == self.epoch {
            st.epoch += 1;
            st.next = None;
            st.changes.clear();
            self.seq.linked.notify_all();
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.void();
    }
}

/// A blind append through the table's [`Sequencer`] (see there): WriteSerializable's rule for
/// blind appends, a commit in between conflicts only when it changes the metadata or protocol.
/// Errors: as [`commit_loop`].
fn commit_sequenced(
    table: &Table,
    read_version: u64,
    data: &[(&File, &Path)],
    mut build: impl FnMut(u64, i64) -> Vec<Action>,
) -> Result<(u64, Vec<u8>)> {
    let root = table.root();
    let log = table.log_dir_handle();
    let seq = table.sequencer();
    let conflict = |version| Error::ConcurrentWrite {
        table: root.to_path_buf(),
        read_version,
        version,
    };
    // Versions after `read_version` up to this one were checked for conflicts.
    let mut checked = read_version;
    // The last version this append lost to another process (0: none).
    let mut lost = 0;
    let mut data = Some(data);
    for _ in 0..MAX_REBASES {
        table.check_log_in_place()?;
        let (mut ticket, first) = {
            let mut st = lock(&seq.state);
            let version = match st.next {
                Some(v) if v > read_version && v > lost => v,
                stale => {
                    // A new epoch: the version after the one this append read, or after the
                    // newest on disk once it lost a race (one listing of the log, the segment;
                    // the versions skipped are checked for conflicts below, before anything is
                    // written). A ticket of the epoch before, if any is out, is void: its
                    // version is on disk already (docs/FORMAT.md "Concurrency").
                    if stale.is_some() {
                        st.epoch += 1;
                        st.next = None;
                        seq.linked.notify_all();
                    }
                    let newest = if lost > 0 { table.segment()?.end } else { 0 };
                    let v = read_version.max(lost).max(newest) + 1;
                    st.last_ts = table.commit_timestamp(v - 1)?;
                    st.first = v;
                    st.linked = v - 1;
                    st.changes.clear();
                    v
                }
            };
            st.next = Some(version + 1);
            let ts = next_timestamp(Some(st.last_ts));
            st.last_ts = ts;
            let ticket = Ticket {
                seq,
                epoch: st.epoch,
                version,
                ts,
                done: false,
            };
            (ticket, st.first)
        };
        let version = ticket.version;
        // The versions in between that were on disk when this epoch began: checked now, before
        // anything is written for this version (a lost race against a schema change ends here).
        for v in checked + 1..version.min(first) {
            let c = table.read_commit(v)?;
            if c.actions.iter().any(|a| a.metadata.is_some() || a.protocol.is_some()) {
                return Err(conflict(v));
            }
            checked = v;
        }
        let actions = build(version, ticket.ts);
        if actions.iter().any(|a| a.metadata.is_some() || a.protocol.is_some()) {
            let mut st = lock(&seq.state);
            if st.epoch == ticket.epoch {
                st.changes.insert(version);
            }
        }
        let bytes = encode(&actions);
        let tmp = prepare_tmp(table.dir(), log, version, &bytes, data.take())?;
        // Wait for the version before this one; a void ticket takes a new one.
        let changes = {
            let mut st = lock(&seq.state);
            while st.epoch == ticket.epoch && st.linked + 1 < version {
                st = seq.linked.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if st.epoch != ticket.epoch {
                ticket.done = true;
                drop(st);
                let _ = log.try_unlink(&tmp);
                continue;
            }
            st.changes.range(checked + 1..version).next().copied()
        };
        // Never a gap: a version before this one that this append did not read itself must be
        // on disk (one moved aside by `check --repair` since it was linked voids the tickets
        // after it).
        if version - 1 > read_version && log.stat(&crate::log::files::commit_file_name(version - 1))?.is_none() {
            let _ = log.try_unlink(&tmp);
            ticket.void();
            continue;
        }
        // The versions in between of this epoch: from what their tickets built.
        if let Some(v) = changes {
            let _ = log.try_unlink(&tmp);
            return Err(conflict(v));
        }
        checked = version - 1;
        match link_prepared(log, tmp, version)? {
            Linked::Won { tmp } => {
                {
                    let mut st = lock(&seq.state);
                    st.linked = version;
                    ticket.done = true;
                    seq.linked.notify_all();
                }
                sync_published(table.dir(), log, version, &tmp)?;
                return Ok((version, bytes));
            }
            // Another process linked it: a new epoch from the log (the next ticket's checks
            // read that version).
            Linked::Lost => {
                lost = version;
                ticket.void();
            }
        }
    }
    Err(conflict(read_version + 1))
}
