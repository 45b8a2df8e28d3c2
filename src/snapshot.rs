//! Snapshots: the state of a table at one version, rebuilt by log replay of add/remove actions
//! from version 0 (Delta PROTOCOL "Action Reconciliation").

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::actions::{Add, CommitInfo, Metadata, Protocol, is_safe_relative_path};
use crate::error::{Error, Result};
use crate::log::{self, LOG_DIR};
use crate::schema::Schema;

/// Highest Delta reader version tinydelta understands.
pub const READER_VERSION: i64 = 1;
/// Highest Delta writer version tinydelta writes.
pub const WRITER_VERSION: i64 = 2;

/// One live data file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Path relative to the table root (checked safe during replay).
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// Rows, from `add.stats.numRecords` (0 if the stats are missing).
    pub num_records: u64,
    /// The `add` action that made the file live.
    pub add: Add,
}

/// A table frozen at one version: schema, live files in the order they were added, and the
/// commit's provenance. Immutable once built.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Table root.
    pub root: PathBuf,
    /// The version.
    pub version: u64,
    /// `commitInfo.timestamp` of the version, ms since epoch.
    pub timestamp: i64,
    /// The commit's commitInfo.
    pub commit_info: CommitInfo,
    /// Schema in force at the version.
    pub schema: Schema,
    /// The `metaData` action in force.
    pub metadata: Metadata,
    /// The `protocol` action in force.
    pub protocol: Protocol,
    /// Live files; their concatenation is the version's rows.
    pub files: Vec<FileEntry>,
}

impl Snapshot {
    /// Total rows.
    pub fn num_records(&self) -> u64 {
        self.files.iter().map(|f| f.num_records).sum()
    }
    /// Total bytes of the live files.
    pub fn size_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Incremental log replay, one commit at a time.
#[derive(Debug, Default)]
pub struct Replay {
    seq: u64,
    live: HashMap<String, (u64, Add, u64)>,
    rows: u64,
    metadata: Option<Metadata>,
    protocol: Option<Protocol>,
    /// Every path any `add` named so far.
    pub ever_added: Option<std::collections::HashSet<String>>,
}

impl Replay {
    /// Apply the actions of `version` (read from `path`). Errors: [`Error::Corrupt`] for unsafe
    /// paths or a missing commitInfo; [`Error::UnsupportedProtocol`].
    pub fn apply(&mut self, root: &Path, path: &Path, actions: Vec<crate::actions::Action>) -> Result<CommitInfo> {
        let mut info = None;
        for a in actions {
            if let Some(c) = a.commit_info {
                info.get_or_insert(c);
            }
            if let Some(p) = a.protocol {
                if p.min_reader_version > READER_VERSION {
                    return Err(Error::UnsupportedProtocol {
                        table: root.to_path_buf(),
                        reader: p.min_reader_version,
                        writer: p.min_writer_version,
                    });
                }
                self.protocol = Some(p);
            }
            if let Some(m) = a.metadata {
                self.metadata = Some(m);
            }
            if let Some(add) = a.add {
                check_path(path, &add.path)?;
                if let Some(set) = &mut self.ever_added {
                    set.insert(add.path.clone());
                }
                self.seq += 1;
                let rows = add.num_records().unwrap_or(0);
                self.rows += rows;
                if let Some((_, _, old)) = self.live.insert(add.path.clone(), (self.seq, add, rows)) {
                    self.rows -= old;
                }
            }
            if let Some(r) = a.remove {
                check_path(path, &r.path)?;
                if let Some((_, _, old)) = self.live.remove(&r.path) {
                    self.rows -= old;
                }
            }
        }
        Ok(info.unwrap_or_default())
    }

    /// The replay state that yields `snap` (files keep their order).
    pub fn from_snapshot(snap: &Snapshot) -> Self {
        let live: HashMap<String, (u64, Add, u64)> = snap
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.path.clone(), (i as u64, f.add.clone(), f.num_records)))
            .collect();
        Replay {
            seq: snap.files.len() as u64,
            live,
            rows: snap.num_records(),
            metadata: Some(snap.metadata.clone()),
            protocol: Some(snap.protocol.clone()),
            ever_added: None,
        }
    }

    /// A replay that also records every path any `add` names (for vacuum).
    pub fn recording_added() -> Self {
        Replay {
            ever_added: Some(Default::default()),
            ..Default::default()
        }
    }

    /// (rows, files) live so far.
    pub fn live_rows(&self) -> (u64, usize) {
        (self.rows, self.live.len())
    }

    /// Freeze the replay so far as the snapshot of `version`.
    pub fn snapshot(&self, root: &Path, version: u64, commit_info: CommitInfo) -> Result<Snapshot> {
        let log_path = || root.join(LOG_DIR).join(log::commit_file_name(version));
        let metadata = self.metadata.clone().ok_or_else(|| Error::Corrupt {
            path: log_path(),
            reason: "no metaData action at or before this version".into(),
        })?;
        let protocol = self.protocol.clone().ok_or_else(|| Error::Corrupt {
            path: log_path(),
            reason: "no protocol action at or before this version".into(),
        })?;
        let schema = Schema::from_schema_string(&metadata.schema_string).map_err(|reason| Error::Corrupt {
            path: log_path(),
            reason,
        })?;
        let mut files: Vec<(u64, FileEntry)> = self
            .live
            .values()
            .map(|(seq, add, rows)| {
                (
                    *seq,
                    FileEntry {
                        path: add.path.clone(),
                        size: add.size,
                        num_records: *rows,
                        add: add.clone(),
                    },
                )
            })
            .collect();
        files.sort_unstable_by_key(|(s, _)| *s);
        Ok(Snapshot {
            root: root.to_path_buf(),
            version,
            timestamp: commit_info.timestamp,
            commit_info,
            schema,
            metadata,
            protocol,
            files: files.into_iter().map(|(_, f)| f).collect(),
        })
    }
}

fn check_path(commit: &Path, p: &str) -> Result<()> {
    if is_safe_relative_path(p) {
        Ok(())
    } else {
        Err(Error::Corrupt {
            path: commit.to_path_buf(),
            reason: format!("action path {p:?} is not a relative path inside the table"),
        })
    }
}
