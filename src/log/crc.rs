//! Version checksums: `_delta_log/{version:020}.crc` (Delta PROTOCOL "Version Checksum File").
//!
//! After each commit tinydelta writes one JSON object with the table's state at that version:
//! `tableSizeBytes`, `numFiles`, `numMetadata`, `numProtocol`, `metadata`, `protocol`. Readers
//! never need it; `tinydelta check` compares it with log replay, and a missing, empty or
//! unreadable `.crc` is only a warning (docs/FORMAT.md, "Version checksums").

use serde::{Deserialize, Serialize};

use crate::format::actions::{Metadata, Protocol};
use crate::sys::beneath::Dir;
use crate::error::{Error, IoContext, Result};
use crate::log::files::crc_file_name;
use crate::log::snapshot::Snapshot;

/// The fields tinydelta writes and checks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Crc {
    /// Bytes of the live data files.
    pub table_size_bytes: u64,
    /// Live data files.
    pub num_files: u64,
    /// Always 1.
    pub num_metadata: u64,
    /// Always 1.
    pub num_protocol: u64,
    /// The metaData in force.
    pub metadata: Metadata,
    /// The protocol in force.
    pub protocol: Protocol,
}

impl Crc {
    /// The checksum of `snap`.
    pub fn of(snap: &Snapshot) -> Crc {
        Crc {
            table_size_bytes: snap.size_bytes(),
            num_files: snap.files.len() as u64,
            num_metadata: 1,
            num_protocol: 1,
            metadata: snap.metadata.clone(),
            protocol: snap.protocol.clone(),
        }
    }

    /// How `self` (read from disk) disagrees with `snap` (log replay), if it does.
    pub fn mismatch(&self, snap: &Snapshot) -> Option<String> {
        let want = Crc::of(snap);
        let mut diffs = Vec::new();
        if self.table_size_bytes != want.table_size_bytes {
            diffs.push(format!(
                "tableSizeBytes {} (replay: {})",
                self.table_size_bytes, want.table_size_bytes
            ));
        }
        if self.num_files != want.num_files {
            diffs.push(format!("numFiles {} (replay: {})", self.num_files, want.num_files));
        }
        if self.metadata != want.metadata {
            diffs.push("metadata differs".into());
        }
        if self.protocol != want.protocol {
            diffs.push("protocol differs".into());
        }
        (!diffs.is_empty()).then(|| diffs.join(", "))
    }
}

/// Write the `.crc` of `snap` beneath the log folder `log`. See [`write_crc`].
/// Errors: [`Error::Io`].
pub fn write(log: &Dir, snap: &Snapshot) -> Result<()> {
    write_crc(log, snap.version, &Crc::of(snap))
}

/// Write `crc` as the `.crc` of `version` beneath the log folder `log`.
///
/// Created in place with `O_CREAT | O_EXCL` and one `write`, not through a temporary and a
/// rename: the checksum is advisory (readers never need it, docs/FORMAT.md "Version
/// checksums"), and a reader never trusts a partial one, since no proper prefix of one JSON
/// object parses as an object ([`read`] fails on it, and `check` warns). Not fsynced. When the
/// name exists (a stale one, left by a commit that `check --repair` moved aside, or a racing
/// writer of the same version's checksum) it is replaced with a temporary + rename.
/// Errors: [`Error::Io`].
pub fn write_crc(log: &Dir, version: u64, crc: &Crc) -> Result<()> {
    use std::io::Write;
    let target = crc_file_name(version);
    let path = log.join(&target);
    let mut bytes = serde_json::to_vec(crc).map_err(|e| Error::io("write", &path, std::io::Error::other(e)))?;
    bytes.push(b'\n');
    match log.create_new(&target, 0o644) {
        Ok(mut f) => return f.write_all(&bytes).ctx("write", &path),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let tmp = format!(".{target}.{}.tmp", uuid::Uuid::new_v4().simple());
    let tmp_path = log.join(&tmp);
    let res = (|| {
        let mut f = log.create_new(&tmp, 0o644)?;
        f.write_all(&bytes).ctx("write", &tmp_path)?;
        log.rename(&tmp, log, &target)
            .map_err(|e| Error::io("rename", log.join(&target), e))
    })();
    if res.is_err() {
        let _ = log.try_unlink(&tmp);
    }
    res
}

/// Read the `.crc` of `version`: `Ok(None)` when there is none. Errors: [`Error::Corrupt`] when
/// it is not a regular file or not a valid checksum; [`Error::Io`].
pub fn read(log: &Dir, version: u64) -> Result<Option<Crc>> {
    let name = crc_file_name(version);
    let Some(f) = log.try_open_file(&name)? else {
        return Ok(None);
    };
    let len = f.metadata().map_err(|e| Error::io("stat", log.join(&name), e))?.len();
    if len == 0 {
        // What a power loss leaves of a checksum written without an fsync (tinydelta writes it
        // after the commit is durable and never fsyncs it).
        return Err(Error::Corrupt {
            path: log.join(&name),
            reason: "the version checksum is empty (its write never reached the disk, as after a power loss)".into(),
        });
    }
    if len > crate::log::files::MAX_COMMIT_BYTES {
        return Err(Error::Corrupt {
            path: log.join(&name),
            reason: format!(
                "the version checksum is {len} bytes, more than the {} bytes tinydelta reads",
                crate::log::files::MAX_COMMIT_BYTES
            ),
        });
    }
    serde_json::from_reader(std::io::BufReader::new(std::io::Read::take(
        f,
        crate::log::files::MAX_COMMIT_BYTES,
    )))
    .map(Some)
    .map_err(|e| Error::Corrupt {
        path: log.join(&name),
        reason: format!("not a valid version checksum: {e}"),
    })
}
