//! The commit loop (docs/FORMAT.md "Concurrency"): publish the next version with
//! [`crate::log::publish`]; when another writer won it, rebase over the winner unless it conflicts
//! with what this commit read.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::actions::Action;
use crate::log::publish::{Isolation, Publish, encode, next_timestamp, publish_after};
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
    if isolation == Isolation::ReadDependent {
        return commit_loop_with(table, read_version, expect_version, data, build, |_| Ok(true));
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
    commit_loop_with(table, read_version, expect_version, data, build, conflicts)
}

fn commit_loop_with(
    table: &Table,
    read_version: u64,
    expect_version: Option<u64>,
    data: &[(&File, &Path)],
    mut build: impl FnMut(u64, i64) -> Vec<Action>,
    conflicts: impl Fn(u64) -> Result<bool>,
) -> Result<u64> {
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
    for _ in 0..MAX_REBASES {
        let ts = next_timestamp(Some(prev_ts));
        let bytes = encode(&build(version, ts));
        table.check_log_in_place()?;
        match publish_after(table.dir(), table.log_dir_handle(), version, &bytes, data)? {
            Publish::Won => return Ok(version),
            Publish::Lost => {
                let conflict = Error::ConcurrentWrite {
                    table: root.to_path_buf(),
                    read_version,
                    version,
                };
                if expect_version.is_some() {
                    return Err(conflict);
                }
                if conflicts(version)? {
                    return Err(conflict);
                }
                prev_ts = table.commit_info(version)?.timestamp;
                version += 1;
            }
        }
    }
    Err(Error::ConcurrentWrite {
        table: root.to_path_buf(),
        read_version,
        version,
    })
}
