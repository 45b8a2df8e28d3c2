//! Snapshot checkpoints: tinydelta's own, private, replay shortcut.
//!
//! Delta checkpoints are Parquet files (PROTOCOL "Checkpoints"); tinydelta does not write
//! Parquet, so it keeps its own in `_tinydelta/checkpoints/<version:020>.jsonl`, outside
//! `_delta_log/` where Delta readers never look. A checkpoint is the snapshot of one version:
//! a header line (protocol, metaData, the version's commitInfo, totals) then one line per live
//! file in order (path, size, rows, modificationTime, the version that added it). Versions never
//! change, so a checkpoint stays valid forever; it is written with the same no-clobber
//! tmp + link publish as commits, and an unreadable one is ignored (log replay is the truth).
//!
//! Any process that replays at least [`CHECKPOINT_INTERVAL`] commits, or at least
//! [`CHECKPOINT_ACTIONS`] `add`/`remove` actions, past the newest checkpoint writes one for the
//! version it built (best effort: a read-only table just stays slower). Checkpoints are written
//! and read streamed, one line in memory at a time besides the snapshot itself.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::format::actions::{CommitInfo, Metadata, Protocol, is_safe_relative_path};
use crate::sys::beneath::Dir;
use crate::error::{Error, IoContext, Result};
use crate::format::schema::Schema;
use crate::log::snapshot::{FileEntry, Snapshot};

/// Folder of checkpoints, relative to the table root.
pub const CHECKPOINT_DIR: &str = "_tinydelta/checkpoints";

/// Replaying this many commits past the newest checkpoint writes a new one.
pub const CHECKPOINT_INTERVAL: u64 = 1000;

/// Replaying this many `add` and `remove` actions past the newest checkpoint (in one replay)
/// writes a new one too, however few commits held them: a table of a few huge commits is not
/// replayed whole by every process.
pub const CHECKPOINT_ACTIONS: u64 = 100_000;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    version: u64,
    num_files: u64,
    #[serde(default)]
    num_records: u64,
    #[serde(default)]
    size_bytes: u64,
    #[serde(default)]
    files_without_stats: u64,
    protocol: Protocol,
    meta_data: Metadata,
    commit_info: CommitInfo,
    /// The snapshot's `txn` versions; absent in checkpoints written before tinydelta tracked
    /// them, which [`read`] then ignores (replay is the truth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    txns: Option<std::collections::BTreeMap<String, i64>>,
    /// The snapshot's count of `VACUUM START` commits; required on read (checkpoints written
    /// before it was recorded are ignored, replay is the truth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vacuums: Option<u64>,
    /// FNV-1a 64 of the body (every byte after the header line), 16 lowercase hex digits.
    /// Required on read: a checkpoint without it, or whose body does not match, is damaged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_fnv1a64: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    path: String,
    size: u64,
    rows: u64,
    mtime: i64,
    added_in: u64,
    #[serde(default = "yes")]
    stats: bool,
    /// `add.partitionValues` (files of other Delta writers; absent when empty).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pv: std::collections::BTreeMap<String, Option<String>>,
}

fn yes() -> bool {
    true
}

/// `_tinydelta/checkpoints/` beneath the table folder `root`, if it exists. Errors:
/// [`Error::Corrupt`] when it (or `_tinydelta`) is a symlink or not a folder.
pub fn dir(root: &Dir) -> Result<Option<Dir>> {
    root.try_dir(CHECKPOINT_DIR)
}

/// `{version:020}.jsonl`.
pub fn file_name(version: u64) -> String {
    format!("{version:020}.jsonl")
}

/// The versions that have a checkpoint, ascending. Errors: as [`dir`]; [`Error::Io`].
pub fn versions(root: &Dir) -> Result<BTreeSet<u64>> {
    let Some(d) = dir(root)? else {
        return Ok(BTreeSet::new());
    };
    Ok(d.entries()?
        .into_iter()
        .filter(|e| e.kind == crate::sys::beneath::Kind::File)
        .filter_map(|e| {
            let stem = e.name.to_str()?.strip_suffix(".jsonl")?.to_owned();
            (stem.len() == 20).then(|| stem.parse::<u64>().ok()).flatten()
        })
        .collect())
}

/// The newest checkpoint version at or before `version`, if any (an unreadable checkpoint
/// folder is a warning: log replay is the truth).
pub fn newest_at_or_before(root: &Dir, version: u64) -> Option<u64> {
    match versions(root) {
        Ok(v) => v.range(..=version).next_back().copied(),
        Err(e) => {
            ::log::warn!("ignoring checkpoints: {e}");
            None
        }
    }
}

fn open(root: &Dir, version: u64) -> Result<(std::fs::File, std::path::PathBuf)> {
    let rel = format!("{CHECKPOINT_DIR}/{}", file_name(version));
    Ok((root.open_file(&rel)?, root.join(&rel)))
}

/// Totals of a version, as `describe` prints them.
#[derive(Debug, Clone)]
pub struct Totals {
    /// The version.
    pub version: u64,
    /// Its commitInfo.
    pub commit_info: CommitInfo,
    /// The metaData in force.
    pub metadata: Metadata,
    /// Live files.
    pub num_files: u64,
    /// Rows.
    pub num_records: u64,
    /// Bytes of the live files.
    pub size_bytes: u64,
    /// Live files whose add action has no `numRecords` (their rows are not in `num_records`).
    pub files_without_stats: u64,
}

/// The totals of the checkpoint of `version`, after it was verified whole as [`read`] does
/// (body checksum, header totals against the body), streamed without keeping its files.
/// Errors: as [`read`].
pub fn read_totals(root: &Dir, version: u64) -> Result<Totals> {
    let (snap, t) = scan(root, version, false)?;
    Ok(Totals {
        version,
        num_files: t.0,
        num_records: t.1,
        size_bytes: t.2,
        files_without_stats: t.3,
        commit_info: snap.commit_info,
        metadata: snap.metadata,
    })
}

/// The longest line of a checkpoint tinydelta reads (its header, with the schema and the
/// commitInfo, or one file's line): a longer one is damage, never buffered whole.
pub const MAX_CHECKPOINT_LINE_BYTES: usize = 64 << 20;

/// The fewest bytes one file's line takes (`{"path":"x","size":0,"rows":0,"mtime":0,"added_in":0}`
/// and its newline): what bounds the file list sized before the body is read.
const MIN_ENTRY_LINE_BYTES: u64 = 60;

/// Read the next line of `r` into `buf` (without its `\n`; cleared first), feeding every byte
/// read (the `\n` too) to `hash` when given. Returns `None` at the end of input, else whether
/// the line ended with `\n` (a last line without one is still a line). Errors: [`Error::Io`] naming `path`;
/// [`Error::Corrupt`] for a line longer than [`MAX_CHECKPOINT_LINE_BYTES`].
fn read_line(
    r: &mut impl BufRead,
    buf: &mut Vec<u8>,
    mut hash: Option<&mut fnv::FnvHasher>,
    path: &Path,
) -> Result<Option<bool>> {
    use std::hash::Hasher;
    buf.clear();
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("read", path, e)),
        };
        if chunk.is_empty() {
            return Ok((!buf.is_empty()).then_some(false));
        }
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if let Some(h) = hash.as_deref_mut() {
            h.write(&chunk[..take]);
        }
        buf.extend_from_slice(&chunk[..take - usize::from(done)]);
        r.consume(take);
        if buf.len() > MAX_CHECKPOINT_LINE_BYTES {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                reason: format!("a line longer than {MAX_CHECKPOINT_LINE_BYTES} bytes"),
            });
        }
        if done {
            return Ok(Some(true));
        }
    }
}

/// Read the checkpoint of `version`, streamed: one line in memory at a time besides the
/// snapshot it builds (docs/FORMAT.md "Private checkpoints"). Errors: [`Error::Io`];
/// [`Error::Corrupt`] when it is malformed, names an unsafe path, or disagrees with its own
/// header.
pub fn read(root: &Dir, version: u64) -> Result<Snapshot> {
    scan(root, version, true).map(|(snap, _)| snap)
}

/// [`read`], keeping the files in the snapshot only when `keep`; also returns the verified
/// totals (files, rows, bytes, files without stats).
fn scan(root: &Dir, version: u64, keep: bool) -> Result<(Snapshot, (u64, u64, u64, u64))> {
    use std::hash::Hasher;
    let (file, path) = open(root, version)?;
    let corrupt = |reason: String| Error::Corrupt {
        path: path.clone(),
        reason,
    };
    let len = file.metadata().ctx("stat", &path)?.len();
    if len > crate::log::files::MAX_COMMIT_BYTES {
        return Err(corrupt(format!(
            "the checkpoint is {len} bytes, more than the {} bytes tinydelta reads",
            crate::log::files::MAX_COMMIT_BYTES
        )));
    }
    let mut r = BufReader::with_capacity(
        256 << 10,
        std::io::Read::take(file, crate::log::files::MAX_COMMIT_BYTES + 1),
    );
    let mut line = Vec::new();
    if read_line(&mut r, &mut line, None, &path)? != Some(true) {
        return Err(corrupt("empty checkpoint or no complete header line".into()));
    }
    let header: Header = serde_json::from_slice(&line).map_err(|e| corrupt(format!("header: {e}")))?;
    if header.version != version {
        return Err(corrupt(format!("header says version {}", header.version)));
    }
    let Some(want_hash) = header.body_fnv1a64.clone() else {
        return Err(corrupt("its header has no body checksum (bodyFnv1a64)".into()));
    };
    let Some(txns) = header.txns else {
        return Err(corrupt("written before txn versions were recorded".into()));
    };
    let Some(vacuums) = header.vacuums else {
        return Err(corrupt("written before vacuum counts were recorded".into()));
    };
    let schema = Schema::of_metadata(&header.meta_data).map_err(corrupt)?;
    // The header is outside the body's checksum: the list is sized by the file's length, never
    // by the header's count (docs/FORMAT.md "Private checkpoints"); the count is checked at the end.
    let mut files = Vec::with_capacity(if keep {
        header.num_files.min(len / MIN_ENTRY_LINE_BYTES) as usize
    } else {
        0
    });
    let mut hash = fnv::FnvHasher::default();
    let (mut rows, mut bytes_total, mut no_stats) = (Some(0u64), Some(0u64), 0u64);
    // Parse errors are kept until the checksum is known: a body that fails it is named as such.
    let mut bad: Option<String> = None;
    let mut body_lines = 0u64;
    while read_line(&mut r, &mut line, Some(&mut hash), &path)?.is_some() {
        body_lines += 1;
        if bad.is_some() {
            continue;
        }
        let e: Entry = match serde_json::from_slice(&line) {
            Ok(e) => e,
            Err(e) => {
                bad = Some(format!("line {}: {e}", body_lines + 1));
                continue;
            }
        };
        if !is_safe_relative_path(&e.path) || e.added_in > version {
            bad = Some(format!("line {}: bad entry for {:?}", body_lines + 1, e.path));
            continue;
        }
        rows = rows.and_then(|n| n.checked_add(e.rows));
        bytes_total = bytes_total.and_then(|n| n.checked_add(e.size));
        no_stats += u64::from(!e.stats);
        if !keep {
            continue;
        }
        files.push(std::sync::Arc::new(FileEntry {
            path: e.path.into(),
            size: e.size,
            num_records: e.rows,
            has_stats: e.stats,
            modification_time: e.mtime,
            partition_values: crate::log::snapshot::boxed_partition_values(&e.pv),
            added_in: e.added_in,
            deletion_vector: None,
        }));
    }
    let got_hash = format!("{:016x}", hash.finish());
    if want_hash != got_hash {
        return Err(corrupt(format!(
            "its body does not match the checksum in its header ({want_hash})"
        )));
    }
    if body_lines != header.num_files {
        return Err(corrupt(format!(
            "its header says {} files, its body holds {body_lines} lines",
            header.num_files
        )));
    }
    if let Some(reason) = bad {
        return Err(corrupt(reason));
    }
    if rows != Some(header.num_records)
        || bytes_total != Some(header.size_bytes)
        || no_stats != header.files_without_stats
    {
        return Err(corrupt(format!(
            "its header totals (rows {}, bytes {}, files without stats {}) disagree with its files",
            header.num_records, header.size_bytes, header.files_without_stats
        )));
    }
    files.shrink_to_fit();
    let totals = (body_lines, header.num_records, header.size_bytes, header.files_without_stats);
    let snap = Snapshot {
        root: root.path().to_path_buf(),
        version,
        timestamp: header.commit_info.timestamp,
        commit_info: header.commit_info,
        schema,
        metadata: header.meta_data,
        protocol: header.protocol,
        files,
        txns,
        vacuums,
    };
    Ok((snap, totals))
}

/// One file's line, borrowed from the snapshot (the same bytes as [`Entry`]).
#[derive(Serialize)]
struct EntryOut<'a> {
    path: &'a str,
    size: u64,
    rows: u64,
    mtime: i64,
    added_in: u64,
    stats: bool,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pv: &'a std::collections::BTreeMap<String, Option<String>>,
}

impl<'a> EntryOut<'a> {
    fn of(f: &'a FileEntry) -> EntryOut<'a> {
        EntryOut {
            path: &f.path,
            size: f.size,
            rows: f.num_records,
            mtime: f.modification_time,
            added_in: f.added_in,
            stats: f.has_stats,
            pv: f.partition_values(),
        }
    }
}

/// Write the checkpoint of `snap` unless one exists, beneath the table folder `root` (never
/// through a symlinked `_tinydelta` or `checkpoints`), streamed: the body is serialized twice,
/// once into its checksum (the header's, which comes first) and once into the file, one line
/// in memory at a time. Errors: [`Error::Io`], [`Error::Corrupt`].
pub fn write(root: &Dir, snap: &Snapshot) -> Result<()> {
    use std::hash::Hasher;
    // Its lines do not carry deletion vectors: a version with one is not checkpointed here
    // (replay, or the table's own Delta checkpoints, build it).
    if snap.files.iter().any(|f| f.deletion_vector.is_some()) {
        return Ok(());
    }
    let dir = root.create_dir("_tinydelta", 0o755)?.create_dir("checkpoints", 0o755)?;
    let target = file_name(snap.version);
    if dir.stat(&target)?.is_some() {
        return Ok(());
    }
    let tmp = format!(".{:020}.{}.tmp", snap.version, uuid::Uuid::new_v4().simple());
    let tmp_path = dir.join(&tmp);
    let res = (|| {
        let mut hash = fnv::FnvHasher::default();
        let mut line = Vec::new();
        for f in &snap.files {
            line.clear();
            write_line(&mut line, &EntryOut::of(f), &tmp_path)?;
            hash.write(&line);
        }
        let mut w = BufWriter::with_capacity(1 << 20, dir.create_new(&tmp, 0o644)?);
        let header = Header {
            version: snap.version,
            num_files: snap.files.len() as u64,
            num_records: snap.num_records(),
            size_bytes: snap.size_bytes(),
            files_without_stats: snap.files.iter().filter(|f| !f.has_stats).count() as u64,
            protocol: snap.protocol.clone(),
            meta_data: snap.metadata.clone(),
            commit_info: snap.commit_info.clone(),
            txns: Some(snap.txns.clone()),
            vacuums: Some(snap.vacuums),
            body_fnv1a64: Some(format!("{:016x}", hash.finish())),
        };
        write_line(&mut w, &header, &tmp_path)?;
        for f in &snap.files {
            write_line(&mut w, &EntryOut::of(f), &tmp_path)?;
        }
        let f = w
            .into_inner()
            .map_err(|e| Error::io("write", &tmp_path, e.into_error()))?;
        f.sync_all().ctx("fsync", &tmp_path)?;
        // EEXIST means another process published the same (identical) checkpoint first.
        match dir.link(&tmp, &dir, &target) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(Error::io("link", dir.join(&target), e)),
        }
    })();
    let _ = dir.try_unlink(&tmp);
    res
}

/// One compact JSON line.
fn write_line<T: Serialize>(w: &mut impl Write, v: &T, path: &Path) -> Result<()> {
    serde_json::to_writer(&mut *w, v).map_err(|e| Error::io("write", path, std::io::Error::other(e)))?;
    w.write_all(b"\n").ctx("write", path)
}
