//! The `_delta_log/` folder: typed file names and reading commit files.
//!
//! Names follow Delta PROTOCOL "Delta Log Entries": `{version:020}.json` is a commit;
//! `.{version:020}.{uuid}.tmp` is tinydelta's commit-in-progress; every other name is ignored.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::actions::{Action, CommitInfo};
use crate::error::{Error, IoContext, Result};

/// The log folder's name inside a table.
pub const LOG_DIR: &str = "_delta_log";

/// A file name in `_delta_log/`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogFile {
    /// `{version:020}.json`.
    Commit(u64),
    /// `.{version:020}.{uuid}.tmp`, a commit being written (never a version).
    Temp(u64),
    /// Anything else (checkpoints, `_last_checkpoint`, CRC files, editors' leftovers).
    Other,
}

impl LogFile {
    /// Parse a bare file name.
    pub fn parse(name: &str) -> LogFile {
        if let Some(stem) = name.strip_suffix(".json")
            && stem.len() == 20
            && stem.bytes().all(|b| b.is_ascii_digit())
        {
            return stem.parse().map(LogFile::Commit).unwrap_or(LogFile::Other);
        }
        if let Some(rest) = name.strip_prefix('.')
            && name.ends_with(".tmp")
            && rest.len() > 21
            && rest.as_bytes()[20] == b'.'
            && rest[..20].bytes().all(|b| b.is_ascii_digit())
        {
            return rest[..20].parse().map(LogFile::Temp).unwrap_or(LogFile::Other);
        }
        LogFile::Other
    }
}

/// `{version:020}.json`.
pub fn commit_file_name(version: u64) -> String {
    format!("{version:020}.json")
}

/// Every commit version present in `log_dir`, ascending. Errors: [`Error::Io`] naming the folder.
pub fn list_versions(log_dir: &Path) -> Result<Vec<u64>> {
    let mut v = Vec::new();
    for entry in fs::read_dir(log_dir).ctx("list", log_dir)? {
        let entry = entry.ctx("list", log_dir)?;
        if let Some(name) = entry.file_name().to_str()
            && let LogFile::Commit(n) = LogFile::parse(name)
        {
            v.push(n);
        }
    }
    v.sort_unstable();
    Ok(v)
}

/// Parse one commit file into its actions, in order.
///
/// Errors: [`Error::Io`] when it cannot be read; [`Error::Corrupt`] naming the file and line when
/// a line is not a JSON object or a known action is malformed.
pub fn read_commit(path: &Path) -> Result<Vec<Action>> {
    let bytes = fs::read(path).ctx("read", path)?;
    parse_commit(path, &bytes)
}

/// Parse commit bytes (see [`read_commit`]); `path` only names the file in errors.
pub fn parse_commit(path: &Path, bytes: &[u8]) -> Result<Vec<Action>> {
    let mut actions = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let a: Action = serde_json::from_slice(line).map_err(|e| Error::Corrupt {
            path: path.to_path_buf(),
            reason: format!("line {}: not a valid Delta action: {e}", i + 1),
        })?;
        actions.push(a);
    }
    Ok(actions)
}

/// The `commitInfo` of one commit file, reading only up to it (tinydelta writes it first).
///
/// Errors: [`Error::Io`]; [`Error::Corrupt`] when the file has no commitInfo.
pub fn read_commit_info(path: &Path) -> Result<CommitInfo> {
    let f = fs::File::open(path).ctx("open", path)?;
    let mut r = BufReader::new(f);
    let mut line = Vec::new();
    let mut n = 0;
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).ctx("read", path)? == 0 {
            break;
        }
        n += 1;
        if let Ok(a) = serde_json::from_slice::<Action>(&line)
            && let Some(ci) = a.commit_info
        {
            return Ok(ci);
        }
    }
    Err(Error::Corrupt {
        path: path.to_path_buf(),
        reason: format!("no commitInfo action in {n} lines"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(LogFile::parse("00000000000000000012.json"), LogFile::Commit(12));
        assert_eq!(LogFile::parse(".00000000000000000012.0b2c.tmp"), LogFile::Temp(12));
        for other in [
            "12.json",
            "00000000000000000012.checkpoint.parquet",
            "_last_checkpoint",
            "0000000000000000001a.json",
            ".00000000000000000012.tmp.swp",
        ] {
            assert_eq!(LogFile::parse(other), LogFile::Other, "{other}");
        }
        assert_eq!(commit_file_name(7), "00000000000000000007.json");
    }
}
