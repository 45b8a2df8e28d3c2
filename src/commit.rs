//! The publish protocol of SPEC section 2 and the commit loop of "Concurrency".
//!
//! A commit is written to `_delta_log/.<version>.<uuid>.tmp`, fsynced (and the table folder
//! fsynced, for the data files' entries), then published with
//! `link(2)` as `_delta_log/<version>.json`. `link` fails with EEXIST if the version exists, so of
//! racing writers exactly one wins a version, and a version name only ever points at complete,
//! durable bytes. tinydelta never falls back to `rename`, which would replace a winner.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::actions::Action;
use crate::error::{Error, IoContext, Result};
use crate::failpoint;
use crate::log::{self, LOG_DIR};

/// How many versions a blind append may be rebased over before giving up.
pub const MAX_REBASES: u32 = 10_000;

/// fsync a directory, so that entries created in it are durable (fsync(2), "NOTES").
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).ctx("open", dir)?.sync_all().ctx("fsync", dir)
}

/// What a losing commit does (SPEC section 2, "Concurrency").
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

/// Write `bytes` as version `version` of the table at `root`, following the steps of SPEC
/// section 2 with the failpoints `commit-half-written`, `before-link` and `after-link`.
///
/// Errors: [`Error::Io`] for write or fsync failures (the tmp file is removed, nothing is
/// published); [`Error::LinkUnsupported`] when the file system has no hard links.
pub fn publish(root: &Path, version: u64, bytes: &[u8]) -> Result<Publish> {
    let dir = root.join(LOG_DIR);
    let tmp = dir.join(format!(".{version:020}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let target = dir.join(log::commit_file_name(version));
    // The table folder is fsynced after the commit bytes: the data files the commit names must be
    // durable before it is published, and by now the tmp's fsync has usually flushed the file
    // system's journal, so this fsync finds nothing left to write (one journal commit, not two).
    let res = write_tmp(&tmp, bytes)
        .and_then(|()| fsync_dir(root))
        .and_then(|()| link_tmp(&tmp, &target));
    let outcome = match res {
        Ok(o) => o,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if outcome == Publish::Won {
        // The link is the publish point: the version is visible now, whatever fails next. An
        // error here must not make the caller report "nothing committed" and delete the data
        // files the version names, so it is a warning, not an error.
        if let Err(e) = failpoint::hit("after-link").and_then(|()| fsync_dir(&dir)) {
            ::log::warn!("version {version} is published, but its durability is not confirmed: {e}");
        }
    }
    let _ = fs::remove_file(&tmp);
    Ok(outcome)
}

/// Create `path` for writing, failing if it exists (O_CREAT|O_EXCL, mode 0644): data files,
/// commit and checkpoint temporaries never overwrite anything. Errors: [`Error::Io`].
pub fn create_new(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .ctx("create", path)
}

fn write_tmp(tmp: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = create_new(tmp)?;
    let half = bytes.len() / 2;
    f.write_all(&bytes[..half]).ctx("write", tmp)?;
    if failpoint_active() {
        f.sync_data().ctx("fsync", tmp)?;
        failpoint::hit("commit-half-written")?;
    }
    f.write_all(&bytes[half..]).ctx("write", tmp)?;
    f.sync_all().ctx("fsync", tmp)?;
    failpoint::hit("before-link")
}

fn failpoint_active() -> bool {
    std::env::var_os("TINYDELTA_FAILPOINT").is_some()
}

/// Publish `tmp` as `target` with link(2), never replacing an existing `target`.
/// Errors: [`Error::LinkUnsupported`] without hard links; [`Error::Io`].
pub fn link_tmp(tmp: &Path, target: &Path) -> Result<Publish> {
    match fs::hard_link(tmp, target) {
        Ok(()) => Ok(Publish::Won),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Publish::Lost),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS | libc::EXDEV | libc::EMLINK)
            ) =>
        {
            Err(Error::LinkUnsupported {
                path: target.to_path_buf(),
                source: e,
            })
        }
        Err(e) => Err(Error::io("link", target, e)),
    }
}

/// The commit timestamp rule of SPEC section 1: max(now, previous + 1), ms since epoch.
pub fn next_timestamp(previous: Option<i64>) -> i64 {
    let now = now_ms();
    match previous {
        Some(p) => now.max(p + 1),
        None => now,
    }
}

/// Wall-clock ms since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
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

/// Commit as `read_version + 1`, rebasing blind appends as SPEC section 2 allows.
///
/// `build(version, previous_timestamp)` returns the actions to commit at `version` (called again
/// on each rebase, so `commitInfo.timestamp` and `readVersion` stay right). With `expect_version`
/// set, any existing `expect_version + 1` is a conflict. Returns the version published.
///
/// Errors: [`Error::ConcurrentWrite`] naming the version that got in the way; errors of
/// [`publish`]; [`Error::Corrupt`] if a rebase crosses an unreadable commit.
pub fn commit_loop(
    root: &Path,
    read_version: u64,
    isolation: Isolation,
    expect_version: Option<u64>,
    mut build: impl FnMut(u64, i64) -> Vec<Action>,
) -> Result<u64> {
    if let Some(exp) = expect_version
        && exp != read_version
    {
        return Err(Error::ConcurrentWrite {
            table: root.to_path_buf(),
            read_version: exp,
            version: read_version.max(exp + 1),
        });
    }
    let log_dir: PathBuf = root.join(LOG_DIR);
    let mut version = read_version + 1;
    let mut prev_ts = log::read_commit_info(&log_dir.join(log::commit_file_name(read_version)))?.timestamp;
    for _ in 0..MAX_REBASES {
        let ts = next_timestamp(Some(prev_ts));
        let bytes = encode(&build(version, ts));
        match publish(root, version, &bytes)? {
            Publish::Won => return Ok(version),
            Publish::Lost => {
                let conflict = Error::ConcurrentWrite {
                    table: root.to_path_buf(),
                    read_version,
                    version,
                };
                if isolation == Isolation::ReadDependent || expect_version.is_some() {
                    return Err(conflict);
                }
                let path = log_dir.join(log::commit_file_name(version));
                let actions = log::read_commit(&path)?;
                if actions.iter().any(|a| a.metadata.is_some() || a.protocol.is_some()) {
                    return Err(conflict);
                }
                prev_ts = actions
                    .iter()
                    .find_map(|a| a.commit_info.as_ref().map(|c| c.timestamp))
                    .unwrap_or(prev_ts);
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
