//! The `_delta_log/` folder: typed file names and parsing commit files, with the completeness
//! checks of docs/FORMAT.md ("Commit completeness").
//!
//! Names follow Delta PROTOCOL "Delta Log Entries": `{version:020}.json` is a commit;
//! `{version:020}.crc` a version checksum; `{version:020}.checkpoint[.*].parquet` a Delta
//! checkpoint; `_last_checkpoint` its pointer; `.{version:020}.{uuid}.tmp` is tinydelta's
//! commit-in-progress; every other name is ignored. Listing and contiguity are
//! [`crate::log::segment`]'s job: no other code walks the log.

use std::path::Path;

use crate::format::actions::{Action, CommitInfo, decode_path, is_safe_relative_path};
use crate::error::{Error, Result};

/// The log folder's name inside a table.
pub const LOG_DIR: &str = "_delta_log";

/// Where `check --repair` moves a damaged newest commit, inside `_delta_log/`.
pub const CORRUPT_DIR: &str = "_corrupt";

/// The largest commit file tinydelta reads, bytes (256 MiB): a larger one is damage naming its
/// version, decided on the open descriptor's size before any byte is read (docs/FORMAT.md,
/// "Commit completeness"), so a sparse multi-GB file cannot exhaust memory. The same bound
/// applies to version checksums, private checkpoints and files in `_corrupt/`.
pub const MAX_COMMIT_BYTES: u64 = 256 << 20;

/// A file name in `_delta_log/`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogFile {
    /// `{version:020}.json`.
    Commit(u64),
    /// `.{version:020}.{uuid}.tmp`, a commit being written (never a version).
    Temp(u64),
    /// `{version:020}.crc`, a version checksum (PROTOCOL "Version Checksum File").
    Crc(u64),
    /// `{version:020}.checkpoint.parquet`, a multi-part `{version:020}.checkpoint.*.parquet` or a
    /// UUID-named `{version:020}.checkpoint.<uuid>.json|parquet`.
    DeltaCheckpoint(u64),
    /// `_last_checkpoint`.
    LastCheckpoint,
    /// Anything else (editors' leftovers, `_corrupt/`, ...).
    Other,
}

fn version_prefix(name: &str) -> Option<(u64, &str)> {
    let (stem, rest) = (name.get(..20)?, name.get(20..)?);
    if !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, rest))
}

impl LogFile {
    /// Parse a bare file name.
    pub fn parse(name: &str) -> LogFile {
        if name == "_last_checkpoint" {
            return LogFile::LastCheckpoint;
        }
        if let Some((v, rest)) = version_prefix(name) {
            return match rest {
                ".json" => LogFile::Commit(v),
                ".crc" => LogFile::Crc(v),
                r if r.starts_with(".checkpoint.") && (r.ends_with(".parquet") || r.ends_with(".json")) => {
                    LogFile::DeltaCheckpoint(v)
                }
                _ => LogFile::Other,
            };
        }
        if let Some(rest) = name.strip_prefix('.')
            && name.ends_with(".tmp")
            && rest.len() > 21
            && rest.as_bytes()[20] == b'.'
            && let Some((v, _)) = version_prefix(rest)
        {
            return LogFile::Temp(v);
        }
        LogFile::Other
    }
}

/// `{version:020}.json`.
pub fn commit_file_name(version: u64) -> String {
    format!("{version:020}.json")
}

/// `{version:020}.crc`.
pub fn crc_file_name(version: u64) -> String {
    format!("{version:020}.crc")
}

/// One commit file, parsed and checked complete.
#[derive(Debug, Clone)]
pub struct Commit {
    /// The version.
    pub version: u64,
    /// Its actions in file order; `add`/`remove` paths percent-decoded and checked safe. The
    /// first `commitInfo` is moved out into `info` (its action stays, empty).
    pub actions: Vec<Action>,
    /// Its (first) commitInfo, if any.
    pub info: Option<CommitInfo>,
    /// The file's modification time, ms since epoch (for commits that record no timestamp).
    pub mtime_ms: i64,
    /// The file's size, bytes.
    pub len: u64,
}

/// The error for a damaged commit: the same sentence wherever it is met (CLI, mount, check).
pub fn damaged(path: &Path, version: u64, what: impl std::fmt::Display) -> Error {
    let before = match version {
        0 => "no version is readable".to_string(),
        1 => "version 0 is still readable".to_string(),
        v => format!("versions 0 to {} are still readable", v - 1),
    };
    Error::Corrupt {
        path: path.to_path_buf(),
        reason: format!("version {version} is damaged: {what} ({before}; run `tinydelta check`)"),
    }
}

/// A commit of `len` bytes larger than [`MAX_COMMIT_BYTES`] is damage naming `version`
/// (checked on the open descriptor's size before any byte is read).
pub fn check_commit_size(path: &Path, version: u64, len: u64) -> Result<()> {
    if len > MAX_COMMIT_BYTES {
        return Err(damaged(
            path,
            version,
            format!("the commit file is {len} bytes, more than the {MAX_COMMIT_BYTES} bytes tinydelta reads"),
        ));
    }
    Ok(())
}

/// Parse the bytes of commit `version` and check them complete (docs/FORMAT.md, "Commit
/// completeness"): not empty, every non-blank line a JSON object with well-formed known actions,
/// safe paths; for tinydelta's own commits also a final newline and actions that agree with
/// the counts their commitInfo records. `path` names the file in errors.
///
/// Errors: [`Error::Corrupt`] from [`damaged`], naming the version. Holds every action of the
/// commit: for tests and the fuzz targets (the `internal-api` feature); readers stream with
/// [`scan_commit`].
#[cfg(any(test, feature = "internal-api"))]
pub fn parse_commit(version: u64, path: &Path, bytes: &[u8], mtime_ms: i64) -> Result<Commit> {
    let mut actions = Vec::new();
    let mut c = scan_commit(version, path, bytes, mtime_ms, |a| {
        actions.push(a);
        Ok(())
    })?;
    c.actions = actions;
    Ok(c)
}

/// [`parse_commit`], streamed (docs/FORMAT.md "Log replay and checkpoints"): each action is
/// handed to `each` as its line is parsed, and only one line is held at a time, so the memory
/// of reading a commit does not grow with its actions. The checks that need the whole commit
/// (its counts, its final newline) come after the last action: a caller must drop what `each`
/// built when this returns an error. The returned [`Commit`] has no actions.
///
/// Errors: [`Error::Corrupt`] from [`damaged`], naming the version; [`Error::Io`]; any error of
/// `each`.
pub fn scan_commit(
    version: u64,
    path: &Path,
    mut input: impl std::io::BufRead,
    mtime_ms: i64,
    mut each: impl FnMut(Action) -> Result<()>,
) -> Result<Commit> {
    let bad = |what: String| damaged(path, version, what);
    let mut info: Option<CommitInfo> = None;
    let mut counts = Counts::default();
    let mut line = Vec::new();
    let mut len = 0u64;
    let mut ends_with_newline = false;
    let mut any = false;
    // Whether the first non-blank line carries tinydelta's engineInfo (see below).
    let mut first_marked = None;
    let mut i = 0usize;
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| Error::io("read", path, e))?;
        if n == 0 {
            break;
        }
        len += n as u64;
        check_commit_size(path, version, len)?;
        i += 1;
        ends_with_newline = line.last() == Some(&b'\n');
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if text.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        any = true;
        let mut a: Action =
            serde_json::from_slice(text).map_err(|e| bad(format!("line {i}: not a valid Delta action: {e}")))?;
        for p in [
            a.add.as_mut().map(|a| &mut a.path),
            a.remove.as_mut().map(|r| &mut r.path),
            a.cdc.as_mut().map(|c| &mut c.path),
        ]
        .into_iter()
        .flatten()
        {
            match decode_path(p) {
                Some(d) if is_safe_relative_path(&d) => *p = d,
                _ => {
                    return Err(bad(format!(
                        "line {i}: path {p:?} is not a relative path inside the table"
                    )));
                }
            }
        }
        if first_marked.is_none() {
            let plain = a.add.is_none()
                && a.remove.is_none()
                && a.metadata.is_none()
                && a.protocol.is_none()
                && a.txn.is_none()
                && a.cdc.is_none();
            first_marked = Some((i, plain && memchr::memmem::find(text, b":\"tinydelta/").is_some()));
        }
        counts.count(&a);
        if info.is_none() && a.commit_info.is_some() {
            // Moved, not cloned: replay reads the commitInfo from `Commit::info`.
            info = a.commit_info.take();
        }
        each(a)?;
    }
    if !any {
        return Err(bad("the commit file is empty".into()));
    }
    let tinydelta = info.as_ref().is_some_and(|c| c.is_tinydelta());
    // tinydelta writes its commitInfo first, with engineInfo `tinydelta/<version>`: a first line
    // that carries that text but is no tinydelta commitInfo is a damaged key, never a foreign
    // commit (whose completeness checks would be skipped). docs/FORMAT.md "Commit completeness".
    if let Some((n, true)) = first_marked
        && !tinydelta
    {
        return Err(bad(format!(
            "line {n} carries tinydelta's engineInfo but is not a well-formed commitInfo (a damaged key)"
        )));
    }
    if let Some(ci) = info.as_ref().filter(|c| c.is_tinydelta()) {
        if !ends_with_newline {
            return Err(bad("the last line has no newline (the file was cut short)".into()));
        }
        check_counts(ci, &counts).map_err(bad)?;
    }
    Ok(Commit {
        version,
        actions: Vec::new(),
        info,
        mtime_ms,
        len,
    })
}

/// What the completeness checks count in a commit.
#[derive(Default, Clone, Copy)]
struct Counts {
    adds: u64,
    /// `add`s with `dataChange: true` (new files, not files re-added in place).
    changed_adds: u64,
    removes: u64,
    meta: u64,
    proto: u64,
    rows: u64,
    /// Rows of the `add`s with `dataChange: true`.
    changed_rows: u64,
}

impl Counts {
    fn count(&mut self, a: &Action) {
        self.adds += u64::from(a.add.is_some());
        self.changed_adds += u64::from(a.add.as_ref().is_some_and(|a| a.data_change));
        self.removes += u64::from(a.remove.is_some());
        self.meta += u64::from(a.metadata.is_some());
        self.proto += u64::from(a.protocol.is_some());
        if let Some(add) = &a.add {
            self.rows = self.rows.saturating_add(add.num_records().unwrap_or(0));
            if add.data_change {
                self.changed_rows = self.changed_rows.saturating_add(add.num_records().unwrap_or(0));
            }
        }
    }
}

/// The metric checks of a tinydelta commit (docs/FORMAT.md, "Commit completeness").
fn check_counts(ci: &CommitInfo, c: &Counts) -> std::result::Result<(), String> {
    let Counts {
        adds,
        changed_adds,
        removes,
        meta,
        proto,
        rows,
        changed_rows,
    } = *c;
    let expect = |name: &str, alt: &str, got: u64| -> std::result::Result<(), String> {
        match ci.metric(name).or_else(|| ci.metric(alt)) {
            Some(n) if n == got => Ok(()),
            Some(n) => Err(format!("commitInfo records {name} = {n}, but the commit holds {got}")),
            None => Err(format!("commitInfo of a {} records no {name}", ci.operation)),
        }
    };
    match ci.operation.as_str() {
        "CREATE TABLE" if meta != 1 || proto != 1 || adds != 0 || removes != 0 => {
            return Err(format!(
                "a CREATE TABLE commit must hold one protocol and one metaData action and no files; it holds \
                 {proto} protocol, {meta} metaData, {adds} add, {removes} remove"
            ));
        }
        "WRITE" => {
            // An edit of `data.jsonl` that only adds rows is an append; committed on top of a
            // concurrent append, it re-adds that append's files after its own (`dataChange:
            // false`, to keep the order of rows), which it did not write (docs/FORMAT.md
            // "Row-level changes"). Every other append's adds all change data.
            let (files, out) = if changed_adds < adds { (changed_adds, changed_rows) } else { (adds, rows) };
            expect("numFiles", "numFiles", files)?;
            expect("numOutputRows", "numOutputRows", out)?;
            if ci.operation_parameters.get("mode").map(String::as_str) == Some("Overwrite") {
                expect("numRemovedFiles", "numRemovedFiles", removes)?;
            } else if removes != 0 {
                return Err(format!("an append holds {removes} remove actions"));
            }
        }
        "UPDATE" | "DELETE" | "MERGE" => {
            // Files re-added in place to keep the order of rows (`dataChange: false`) are not
            // files the change wrote (docs/FORMAT.md "Row-level changes").
            expect("numAddedFiles", "numAddedFiles", changed_adds)?;
            expect("numRemovedFiles", "numRemovedFiles", removes)?;
        }
        "OPTIMIZE" => {
            expect("numAddedFiles", "numAddedFiles", adds)?;
            expect("numRemovedFiles", "numRemovedFiles", removes)?;
        }
        "VACUUM START" | "VACUUM END" if adds + removes + meta + proto != 0 => {
            return Err(format!(
                "a {} commit must hold only commitInfo; it holds {adds} add, {removes} remove, {meta} metaData, {proto} protocol",
                ci.operation
            ));
        }
        "RESTORE" => {
            // tinydelta before 0.2 wrote numRestoredFile / numRemovedFile.
            expect("numRestoredFiles", "numRestoredFile", adds)?;
            expect("numRemovedFiles", "numRemovedFile", removes)?;
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(LogFile::parse("00000000000000000012.json"), LogFile::Commit(12));
        assert_eq!(LogFile::parse(".00000000000000000012.0b2c.tmp"), LogFile::Temp(12));
        assert_eq!(LogFile::parse("00000000000000000012.crc"), LogFile::Crc(12));
        assert_eq!(
            LogFile::parse("00000000000000000012.checkpoint.parquet"),
            LogFile::DeltaCheckpoint(12)
        );
        assert_eq!(LogFile::parse("_last_checkpoint"), LogFile::LastCheckpoint);
        for other in [
            "12.json",
            "0000000000000000001a.json",
            ".00000000000000000012.tmp.swp",
            "00000000000000000012.json.swp",
        ] {
            assert_eq!(LogFile::parse(other), LogFile::Other, "{other}");
        }
        assert_eq!(commit_file_name(7), "00000000000000000007.json");
    }

    fn parse(bytes: &str) -> Result<Commit> {
        parse_commit(3, Path::new("x"), bytes.as_bytes(), 0)
    }

    #[test]
    fn completeness() {
        let ci = r#"{"commitInfo":{"timestamp":1,"operation":"WRITE","operationParameters":{"mode":"Append"},"operationMetrics":{"numFiles":"1","numOutputRows":"2"},"engineInfo":"tinydelta/0.1.0"}}"#;
        let add = r#"{"add":{"path":"p%20q.jsonl","size":3,"stats":"{\"numRecords\":2}"}}"#;
        let whole = format!("{ci}\n{add}\n");
        let c = parse(&whole).expect("whole");
        assert_eq!(c.actions[1].add.as_ref().unwrap().path, "p q.jsonl");
        for (bytes, what) in [
            (String::new(), "empty"),
            ("\n\n".into(), "empty"),
            (format!("{ci}\n"), "numFiles = 1"),
            (format!("{ci}\n{add}"), "no newline"),
            (format!("{ci}\n{}\n", &add[..20]), "line 2"),
            ("garbage\n".into(), "line 1"),
        ] {
            let e = parse(&bytes).expect_err(what).to_string();
            assert!(e.contains("version 3 is damaged") && e.contains(what), "{e}");
        }
        // An append that re-adds a file in place (`dataChange: false`) counts only its own.
        let readd = r#"{"add":{"path":"old.jsonl","size":3,"dataChange":false,"stats":"{\"numRecords\":5}"}}"#;
        parse(&format!("{ci}\n{add}\n{readd}\n")).expect("an append with a file re-added in place");
        let e = parse(&format!("{ci}\n{readd}\n")).expect_err("no file of its own").to_string();
        assert!(e.contains("numFiles = 1, but the commit holds 0"), "{e}");
        // Foreign commits: no commitInfo, no final newline, unknown actions: fine.
        parse(r#"{"txn":{"appId":"a","version":1}}"#).expect("foreign");
    }
}
