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

use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::actions::{CommitInfo, Metadata, Protocol, is_safe_relative_path};
use crate::error::{Error, IoContext, Result};
use crate::schema::Schema;
use crate::snapshot::{FileEntry, Snapshot};

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
    protocol: Protocol,
    meta_data: Metadata,
    commit_info: CommitInfo,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    path: String,
    size: u64,
    rows: u64,
    mtime: i64,
    added_in: u64,
}

fn dir(root: &Path) -> PathBuf {
    root.join(CHECKPOINT_DIR)
}

/// The newest checkpoint version at or before `version`, if any.
pub fn newest_at_or_before(root: &Path, version: u64) -> Option<u64> {
    fs::read_dir(dir(root))
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let stem = name.to_str()?.strip_suffix(".jsonl")?.to_owned();
            (stem.len() == 20).then(|| stem.parse::<u64>().ok()).flatten()
        })
        .filter(|v| *v <= version)
        .max()
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
}

/// The totals in the header of the checkpoint of `version` (reads one line).
/// Errors: as [`read`].
pub fn read_totals(root: &Path, version: u64) -> Result<Totals> {
    let path = dir(root).join(format!("{version:020}.jsonl"));
    let mut first = String::new();
    BufReader::new(fs::File::open(&path).ctx("open", &path)?)
        .read_line(&mut first)
        .ctx("read", &path)?;
    let h: Header = serde_json::from_str(&first).map_err(|e| Error::Corrupt {
        path: path.clone(),
        reason: format!("header: {e}"),
    })?;
    if h.version != version {
        return Err(Error::Corrupt {
            path,
            reason: format!("header says version {}", h.version),
        });
    }
    Ok(Totals {
        version,
        commit_info: h.commit_info,
        metadata: h.meta_data,
        num_files: h.num_files,
        num_records: h.num_records,
        size_bytes: h.size_bytes,
    })
}

/// Read the checkpoint of `version`. Errors: [`Error::Io`]; [`Error::Corrupt`] when it is
/// malformed, names an unsafe path, or disagrees with its own header.
pub fn read(root: &Path, version: u64) -> Result<Snapshot> {
    let path = dir(root).join(format!("{version:020}.jsonl"));
    let corrupt = |reason: String| Error::Corrupt {
        path: path.clone(),
        reason,
    };
    let mut lines = BufReader::new(fs::File::open(&path).ctx("open", &path)?).lines();
    let header: Header = match lines.next() {
        Some(l) => serde_json::from_str(&l.ctx("read", &path)?).map_err(|e| corrupt(format!("header: {e}")))?,
        None => return Err(corrupt("empty checkpoint".into())),
    };
    if header.version != version {
        return Err(corrupt(format!("header says version {}", header.version)));
    }
    let schema = Schema::from_schema_string(&header.meta_data.schema_string).map_err(corrupt)?;
    let mut files = Vec::with_capacity(header.num_files as usize);
    for (i, line) in lines.enumerate() {
        let e: Entry =
            serde_json::from_str(&line.ctx("read", &path)?).map_err(|e| corrupt(format!("line {}: {e}", i + 2)))?;
        if !is_safe_relative_path(&e.path) || e.added_in > version {
            return Err(corrupt(format!("line {}: bad entry for {:?}", i + 2, e.path)));
        }
        files.push(FileEntry {
            path: e.path,
            size: e.size,
            num_records: e.rows,
            modification_time: e.mtime,
            added_in: e.added_in,
        });
    }
    if files.len() as u64 != header.num_files {
        return Err(corrupt(format!(
            "{} files, header says {}",
            files.len(),
            header.num_files
        )));
    }
    Ok(Snapshot {
        root: root.to_path_buf(),
        version,
        timestamp: header.commit_info.timestamp,
        commit_info: header.commit_info,
        schema,
        metadata: header.meta_data,
        protocol: header.protocol,
        files,
    })
}

/// Write the checkpoint of `snap` unless one exists. Errors: [`Error::Io`].
pub fn write(snap: &Snapshot) -> Result<()> {
    let dir = dir(&snap.root);
    fs::create_dir_all(&dir).ctx("create", &dir)?;
    let target = dir.join(format!("{:020}.jsonl", snap.version));
    if target.exists() {
        return Ok(());
    }
    let tmp = dir.join(format!(".{:020}.{}.tmp", snap.version, uuid::Uuid::new_v4().simple()));
    let res = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, crate::commit::create_new(&tmp)?);
        let header = Header {
            version: snap.version,
            num_files: snap.files.len() as u64,
            num_records: snap.num_records(),
            size_bytes: snap.size_bytes(),
            protocol: snap.protocol.clone(),
            meta_data: snap.metadata.clone(),
            commit_info: snap.commit_info.clone(),
        };
        write_line(&mut w, &header, &tmp)?;
        for f in &snap.files {
            let e = Entry {
                path: f.path.clone(),
                size: f.size,
                rows: f.num_records,
                mtime: f.modification_time,
                added_in: f.added_in,
            };
            write_line(&mut w, &e, &tmp)?;
        }
        let f = w.into_inner().map_err(|e| Error::io("write", &tmp, e.into_error()))?;
        f.sync_all().ctx("fsync", &tmp)?;
        // Lost means another process published the same (identical) checkpoint first.
        crate::commit::link_tmp(&tmp, &target).map(|_| ())
    })();
    let _ = fs::remove_file(&tmp);
    res
}

/// One compact JSON line.
fn write_line<T: Serialize>(w: &mut impl Write, v: &T, path: &Path) -> Result<()> {
    serde_json::to_writer(&mut *w, v).map_err(|e| Error::io("write", path, std::io::Error::other(e)))?;
    w.write_all(b"\n").ctx("write", path)
}
