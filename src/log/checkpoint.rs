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
//! Any process that replays at least [`CHECKPOINT_INTERVAL`] commits past the newest checkpoint
//! writes one for the version it built (best effort: a read-only table just stays slower).

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

/// FNV-1a 64 of `bytes`, as 16 lowercase hex digits (the checkpoint's body checksum).
fn body_hash(bytes: &[u8]) -> String {
    use std::hash::Hasher;
    let mut h = fnv::FnvHasher::default();
    h.write(bytes);
    format!("{:016x}", h.finish())
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

/// The totals of the checkpoint of `version`, after [`read`] has verified it whole (body
/// checksum, header totals against the body). Errors: as [`read`].
pub fn read_totals(root: &Dir, version: u64) -> Result<Totals> {
    let snap = read(root, version)?;
    Ok(Totals {
        version,
        num_files: snap.files.len() as u64,
        num_records: snap.num_records(),
        size_bytes: snap.size_bytes(),
        files_without_stats: snap.files.iter().filter(|f| !f.has_stats).count() as u64,
        commit_info: snap.commit_info,
        metadata: snap.metadata,
    })
}

/// Read the checkpoint of `version`. Errors: [`Error::Io`]; [`Error::Corrupt`] when it is
/// malformed, names an unsafe path, or disagrees with its own header.
pub fn read(root: &Dir, version: u64) -> Result<Snapshot> {
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
    let mut bytes = Vec::with_capacity(len as usize);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, crate::log::files::MAX_COMMIT_BYTES + 1),
        &mut bytes,
    )
    .ctx("read", &path)?;
    let Some(nl) = memchr::memchr(b'\n', &bytes) else {
        return Err(corrupt("empty checkpoint or no complete header line".into()));
    };
    let header: Header = serde_json::from_slice(&bytes[..nl]).map_err(|e| corrupt(format!("header: {e}")))?;
    if header.version != version {
        return Err(corrupt(format!("header says version {}", header.version)));
    }
    let body = &bytes[nl + 1..];
    match &header.body_fnv1a64 {
        Some(h) if *h == body_hash(body) => {}
        Some(h) => {
            return Err(corrupt(format!(
                "its body does not match the checksum in its header ({h})"
            )));
        }
        None => return Err(corrupt("its header has no body checksum (bodyFnv1a64)".into())),
    }
    let lines = BufReader::new(body).lines();
    let Some(txns) = header.txns else {
        return Err(corrupt("written before txn versions were recorded".into()));
    };
    let Some(vacuums) = header.vacuums else {
        return Err(corrupt("written before vacuum counts were recorded".into()));
    };
    let schema = Schema::of_metadata(&header.meta_data).map_err(corrupt)?;
    // The header is outside the body's checksum: its count is checked against the body's lines
    // before anything is sized by it (docs/FORMAT.md "Private checkpoints").
    let body_lines = memchr::memchr_iter(b'\n', body).count() as u64 + u64::from(!body.is_empty() && !body.ends_with(b"\n"));
    if body_lines != header.num_files {
        return Err(corrupt(format!(
            "its header says {} files, its body holds {body_lines} lines",
            header.num_files
        )));
    }
    let mut files = Vec::with_capacity(body_lines as usize);
    for (i, line) in lines.enumerate() {
        let e: Entry =
            serde_json::from_str(&line.ctx("read", &path)?).map_err(|e| corrupt(format!("line {}: {e}", i + 2)))?;
        if !is_safe_relative_path(&e.path) || e.added_in > version {
            return Err(corrupt(format!("line {}: bad entry for {:?}", i + 2, e.path)));
        }
        files.push(std::sync::Arc::new(FileEntry {
            path: e.path,
            size: e.size,
            num_records: e.rows,
            has_stats: e.stats,
            modification_time: e.mtime,
            partition_values: e.pv,
            added_in: e.added_in,
            deletion_vector: None,
        }));
    }
    if files.len() as u64 != header.num_files {
        return Err(corrupt(format!(
            "{} files, header says {}",
            files.len(),
            header.num_files
        )));
    }
    let sum = |f: fn(&FileEntry) -> u64| files.iter().try_fold(0u64, |a, e| a.checked_add(f(e)));
    let rows = sum(|e| e.num_records);
    let bytes_total = sum(|e| e.size);
    let no_stats = files.iter().filter(|f| !f.has_stats).count() as u64;
    if rows != Some(header.num_records)
        || bytes_total != Some(header.size_bytes)
        || no_stats != header.files_without_stats
    {
        return Err(corrupt(format!(
            "its header totals (rows {}, bytes {}, files without stats {}) disagree with its files",
            header.num_records, header.size_bytes, header.files_without_stats
        )));
    }
    Ok(Snapshot {
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
    })
}

/// Write the checkpoint of `snap` unless one exists, beneath the table folder `root` (never
/// through a symlinked `_tinydelta` or `checkpoints`). Errors: [`Error::Io`], [`Error::Corrupt`].
pub fn write(root: &Dir, snap: &Snapshot) -> Result<()> {
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
        let mut body = Vec::new();
        for f in &snap.files {
            let e = Entry {
                path: f.path.clone(),
                size: f.size,
                rows: f.num_records,
                mtime: f.modification_time,
                added_in: f.added_in,
                stats: f.has_stats,
                pv: f.partition_values.clone(),
            };
            write_line(&mut body, &e, &tmp_path)?;
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
            body_fnv1a64: Some(body_hash(&body)),
        };
        write_line(&mut w, &header, &tmp_path)?;
        w.write_all(&body).ctx("write", &tmp_path)?;
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
