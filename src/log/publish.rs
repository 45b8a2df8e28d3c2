//! The publish protocol (docs/FORMAT.md "How a write becomes visible"); the commit loop that
//! retries it over other writers' commits is [`crate::table::commit`].
//!
//! A commit is written to `_delta_log/.<version>.<uuid>.tmp`, fsynced (and the table folder
//! fsynced, for the data files' entries, and the new data files themselves), then published with
//! `link(2)` as `_delta_log/<version>.json`. `link` fails with EEXIST if the version exists, so of
//! racing writers exactly one wins a version, and a version name only ever points at complete,
//! durable bytes. tinydelta never falls back to `rename`, which would replace a winner.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::format::actions::Action;
use crate::sys::beneath::Dir;
use crate::error::{Error, IoContext, Result};
use crate::sys::failpoint;
use crate::log::files;

/// fsync a directory, so that entries created in it are durable (fsync(2), "NOTES").
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).ctx("open", dir)?.sync_all().ctx("fsync", dir)
}

/// What a losing commit does (docs/FORMAT.md "Concurrency").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// A blind append: rebase onto the next version unless the commit in between changed the
    /// schema or protocol.
    BlindAppend,
    /// Overwrite and restore: any commit after the read version is a conflict.
    ReadDependent,
}

/// Outcome of one publish attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// This process now owns the version.
    Won,
    /// Somebody else published the version first; nothing was published.
    Lost,
}

/// Write `bytes` as version `version` of the table whose folder is `root` and log folder
/// `log` (both directory handles: nothing is followed), following the steps of docs/FORMAT.md "How
/// a write becomes visible", with the failpoints `commit-half-written`, `before-link` and
/// `after-link`. The data files the commit adds must already be durable; see [`publish_after`] for
/// files that are not yet.
///
/// Errors: [`Error::Io`] for write or fsync failures before the link (the tmp file is removed,
/// nothing is published); [`Error::LinkUnsupported`] when the file system has no hard links;
/// [`Error::NotDurable`] when the link succeeded (the version is published) but the fsync of
/// `_delta_log/` after it failed.
pub fn publish(root: &Dir, log: &Dir, version: u64, bytes: &[u8]) -> Result<Publish> {
    publish_after(root, log, version, bytes, &[])
}

/// [`publish`], making `data` (the new data files the commit adds, written but not yet fsynced,
/// each with its path for errors) durable before the link.
///
/// The fsyncs of one commit, and why each is needed (fsync(2) "NOTES"; docs/FORMAT.md "How a write
/// becomes visible"):
/// 1. each new data file: its bytes must be on disk before any durable version names it;
/// 2. the table folder: the data files' names (created or hard-linked there) must be durable
///    before the version naming them is;
/// 3. the commit tmp: a version name must only ever point at complete, durable bytes;
/// 4. `_delta_log/` after the link: the version is durable before the writer is told so (and
///    `tinydelta append` exits 0, or the mount answers `close`).
///
/// So four fsyncs per commit (three when the data files are durable already), in two rounds:
/// 1-3 do not depend on each other, only the link on all of them: they run at once (this thread
/// and helper threads kept between commits), so a journaling file system (ext4, xfs) commits
/// them in one journal transaction rather than one per fsync (measured on ext4: four fsyncs in a
/// row cost 2.1x the two of the durable floor; with 1-3 at once, 1.0x), and on a file system
/// without a journal the device serves them side by side. 4 must follow the link. Nothing else
/// is fsynced: the version checksum (`.crc`) written after the commit is optional to readers and
/// a missing or torn one is a warning in `tinydelta check` (docs/FORMAT.md, "Version
/// checksums"), and the tmp's removal needs no durability (a leftover tmp is never read as a
/// version). The commit itself lists nothing: the link of `version` is the no-clobber arbiter.
///
/// Errors: as [`publish`]; a failed fsync of a data file is an [`Error::Io`] naming it (nothing
/// published).
pub fn publish_after(root: &Dir, log: &Dir, version: u64, bytes: &[u8], data: &[(&File, &Path)]) -> Result<Publish> {
    match link_after(root, log, version, bytes, Some(data))? {
        Linked::Won { tmp } => sync_published(root, log, version, &tmp).map(|()| Publish::Won),
        Linked::Lost => Ok(Publish::Lost),
    }
}

/// Outcome of [`link_after`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linked {
    /// The version is linked (visible, not yet durable); `tmp` is the commit's temporary name in
    /// `_delta_log/`, for [`sync_published`] to remove.
    Won {
        /// The commit's temporary name in `_delta_log/`.
        tmp: String,
    },
    /// Somebody else published the version first; nothing was published (the tmp is removed).
    Lost,
}

/// The first half of [`publish_after`]: write the commit tmp, fsync it (and, with `data`, the
/// table folder and those data files, at the same time) and link it as `version`. Returns
/// [`Linked::Won`] once `version` is linked, before `_delta_log/` is fsynced: the caller must
/// then call [`sync_published`] before it tells anyone the version is durable. `data: None` is a
/// retry after a lost race whose data files and table folder an earlier attempt fsynced: only
/// the tmp is fsynced.
///
/// Errors: as [`publish`] before the link (the tmp is removed, nothing is published).
pub fn link_after(root: &Dir, log: &Dir, version: u64, bytes: &[u8], data: Option<&[(&File, &Path)]>) -> Result<Linked> {
    let tmp = prepare_tmp(root, log, version, bytes, data)?;
    link_prepared(log, tmp, version)
}

/// The commit tmp of `version` written and fsynced (with `data`, also the table folder and
/// those data files, at the same time), up to the failpoint `before-link`: what [`link_after`]
/// does before its link. Returns the tmp's name in `_delta_log/`, for [`link_prepared`].
///
/// Errors: as [`publish`] before the link (the tmp is removed).
pub fn prepare_tmp(root: &Dir, log: &Dir, version: u64, bytes: &[u8], data: Option<&[(&File, &Path)]>) -> Result<String> {
    let tmp = format!(".{version:020}.{}.tmp", uuid::Uuid::new_v4().simple());
    let res = write_tmp(log, &tmp, bytes)
        .and_then(|f| {
            let tmp_path = log.join(&tmp);
            let mut syncs: Vec<Sync<'_>> = vec![Sync::File(&f, &tmp_path)];
            if let Some(data) = data {
                syncs.push(Sync::Dir(root));
                syncs.extend(data.iter().map(|(f, p)| Sync::File(f, p)));
            }
            sync_at_once(&syncs)
        })
        .and_then(|()| failpoint::hit("before-link"));
    match res {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = log.try_unlink(&tmp);
            Err(e)
        }
    }
}

/// Link the tmp [`prepare_tmp`] made as `version` (never replacing an existing one). On
/// [`Linked::Lost`] or an error the tmp is removed.
///
/// Errors: as [`link_tmp`].
pub fn link_prepared(log: &Dir, tmp: String, version: u64) -> Result<Linked> {
    match link_tmp(log, &tmp, &files::commit_file_name(version)) {
        Ok(Publish::Won) => Ok(Linked::Won { tmp }),
        Ok(Publish::Lost) => {
            let _ = log.try_unlink(&tmp);
            Ok(Linked::Lost)
        }
        Err(e) => {
            let _ = log.try_unlink(&tmp);
            Err(e)
        }
    }
}

/// fsync the new data files `data` (each with its path for errors) and the table folder `root`
/// (for their names) at the same time, as the first attempt of [`link_after`] does with its tmp:
/// for a commit that waits for another one's publish, so that it fsyncs only its tmp after.
///
/// Errors: [`Error::Io`] naming the file or folder.
pub fn sync_new_files(root: &Dir, data: &[(&File, &Path)]) -> Result<()> {
    let mut syncs: Vec<Sync<'_>> = vec![Sync::Dir(root)];
    syncs.extend(data.iter().map(|(f, p)| Sync::File(f, p)));
    sync_at_once(&syncs)
}

/// The second half of [`publish_after`]: fsync `_delta_log/` after `version` was linked (one
/// fsync shared with the other commits publishing at the same time: [`Dir::sync`]), with the
/// failpoint `after-link`, then remove the commit's temporary name `tmp` (no durability needed:
/// a leftover tmp is never read as a version).
///
/// Errors: [`Error::NotDurable`] (the version is published, its durability unknown).
pub fn sync_published(root: &Dir, log: &Dir, version: u64, tmp: &str) -> Result<()> {
    // The link is the publish point: the version is visible now, whatever fails next. An
    // error here is not "nothing committed" (the caller must keep the data files the
    // version names), and not success either.
    let result = failpoint::hit("after-link")
        .and_then(|()| log.sync())
        .map_err(|e| Error::NotDurable {
            table: root.path().to_path_buf(),
            version,
            reason: e.to_string(),
        });
    let _ = log.try_unlink(tmp);
    result
}

/// One fsync of [`sync_at_once`].
enum Sync<'a> {
    /// A file, with its path for errors.
    File(&'a File, &'a Path),
    /// A folder.
    Dir(&'a Dir),
}

/// A [`Sync`] that a helper thread can own: the file's descriptor duplicated, the folder's
/// handle shared.
enum OwnedSync {
    File(File, PathBuf),
    Dir(Dir),
}

impl Sync<'_> {
    fn run(&self) -> Result<()> {
        match self {
            Sync::File(f, p) => f.sync_all().ctx("fsync", p),
            Sync::Dir(d) => d.sync(),
        }
    }

    fn path(&self) -> PathBuf {
        match self {
            Sync::File(_, p) => p.to_path_buf(),
            Sync::Dir(d) => d.path().to_path_buf(),
        }
    }

    fn owned(&self) -> Option<OwnedSync> {
        match self {
            Sync::File(f, p) => f.try_clone().ok().map(|f| OwnedSync::File(f, p.to_path_buf())),
            Sync::Dir(d) => Some(OwnedSync::Dir((*d).clone())),
        }
    }
}

impl OwnedSync {
    fn run(&self) -> Result<()> {
        match self {
            OwnedSync::File(f, p) => f.sync_all().ctx("fsync", p),
            OwnedSync::Dir(d) => d.sync(),
        }
    }
}

/// Run `syncs` at the same time (the first on this thread, the others on [`crate::util::pool`] threads;
/// one that cannot get a thread runs here after the first) and wait for all. Returns the first
/// error in `syncs`' order.
fn sync_at_once(syncs: &[Sync<'_>]) -> Result<()> {
    let Some((first, rest)) = syncs.split_first() else {
        return Ok(());
    };
    let pending: Vec<_> = rest
        .iter()
        .map(|job| {
            let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
            let started = job.owned().is_some_and(|owned| {
                crate::util::pool::run(Box::new(move || {
                    let _ = tx.send(owned.run());
                }))
                .is_ok()
            });
            (job, started.then_some(rx))
        })
        .collect();
    let mut results = vec![first.run()];
    for (job, rx) in pending {
        results.push(match rx {
            Some(rx) => rx.recv().unwrap_or_else(|_| {
                Err(Error::io(
                    "fsync",
                    job.path(),
                    io::Error::other("the fsync thread panicked"),
                ))
            }),
            None => job.run(),
        });
    }
    results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
}

/// Write the commit tmp (not yet fsynced: [`publish_after`] syncs it with the other files).
fn write_tmp(log: &Dir, tmp: &str, bytes: &[u8]) -> Result<File> {
    let path = log.join(tmp);
    let mut f = log.create_new(tmp, 0o644)?;
    if !failpoint_active() {
        f.write_all(bytes).ctx("write", &path)?;
        return Ok(f);
    }
    let half = bytes.len() / 2;
    f.write_all(&bytes[..half]).ctx("write", &path)?;
    f.sync_data().ctx("fsync", &path)?;
    failpoint::hit("commit-half-written")?;
    f.write_all(&bytes[half..]).ctx("write", &path)?;
    Ok(f)
}

fn failpoint_active() -> bool {
    std::env::var_os("TINYDELTA_FAILPOINT").is_some()
}

/// Publish `log/tmp` as `log/target` with linkat(2), never replacing an existing `target`.
/// Errors: [`Error::LinkUnsupported`] without hard links; [`Error::Io`].
pub fn link_tmp(log: &Dir, tmp: &str, target: &str) -> Result<Publish> {
    match log.link(tmp, log, target) {
        Ok(()) => Ok(Publish::Won),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Publish::Lost),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS | libc::EXDEV | libc::EMLINK)
            ) =>
        {
            Err(Error::LinkUnsupported {
                path: log.join(target),
                source: e,
            })
        }
        Err(e) => Err(Error::io("link", log.join(target), e)),
    }
}

/// The commit timestamp rule (docs/FORMAT.md, "Commit times"): max(now, previous + 1), ms since epoch.
/// A previous time of `i64::MAX` (a foreign writer's) is kept, not wrapped to a time before it:
/// times never go backwards.
pub fn next_timestamp(previous: Option<i64>) -> i64 {
    let now = crate::util::time::now_ms();
    match previous {
        Some(p) => now.max(p.saturating_add(1)),
        None => now,
    }
}

/// Serialise actions as a commit file: one compact JSON object per line.
pub fn encode(actions: &[Action]) -> Vec<u8> {
    let mut out = Vec::with_capacity(512 * actions.len());
    for a in actions {
        // Plain data structs with string keys always serialise.
        let _ = serde_json::to_writer(&mut out, a);
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn next_timestamp_never_goes_backwards_past_the_largest_time() {
        assert_eq!(super::next_timestamp(Some(i64::MAX)), i64::MAX);
        assert!(super::next_timestamp(Some(5)) > 5);
    }
}
