//! Deletion vector files and inline deletion vectors of a table's `add`s, read beneath the
//! table folder (PROTOCOL "Deletion Vectors"; docs/FORMAT.md "Deletion vectors").

use std::path::Path;

use crate::error::{Error, IoContext, Result};
use crate::format::parquet::is_parquet_name;
use crate::sys::beneath::Dir;

/// The row indexes the deletion vector of `file` deletes (PROTOCOL "Deletion Vectors"), `None`
/// without one. A `u` or `p` DV file is trusted no more than a data file (docs/FORMAT.md
/// "Deletion vectors"): opened beneath the table folder (an absolute `p` path must name a file
/// inside it), a regular file, its version byte 1, the DV's size and CRC-32 checked, at most
/// [`crate::format::dv::MAX_DV_BYTES`] read; an inline `i` DV is Z85 in the log.
///
/// Errors: [`Error::Corrupt`] naming the DV file (or the data file, for an inline DV) and what
/// is wrong; [`Error::MissingDataFile`] for a missing DV file; [`Error::Unsupported`] for a
/// storage type other than `u`, `i`, `p`, a `p` path outside the table, or a DV on a JSONL data
/// file.
pub fn deleted_rows(root: &Dir, file: &crate::log::snapshot::FileEntry) -> Result<Option<roaring::RoaringTreemap>> {
    use crate::format::dv;
    let Some(d) = file.deletion_vector.as_deref() else {
        return Ok(None);
    };
    let data_path = root.join(&file.path);
    if !is_parquet_name(&file.path) {
        return Err(Error::Unsupported {
            path: data_path,
            what: "a deletion vector on a JSONL data file (Delta engines write them on Parquet files)".into(),
        });
    }
    let size = u64::try_from(d.size_in_bytes).unwrap_or(u64::MAX);
    let cardinality = d.cardinality;
    let rel = match d.storage_type.as_str() {
        "i" => {
            let bytes = dv::z85_decode(&d.path_or_inline_dv).ok_or_else(|| Error::Corrupt {
                path: data_path.clone(),
                reason: "its inline deletion vector is not Z85 text".into(),
            })?;
            if bytes.len() as u64 != size {
                return Err(Error::Corrupt {
                    path: data_path,
                    reason: format!(
                        "its inline deletion vector holds {} bytes, but its descriptor says {size}",
                        bytes.len()
                    ),
                });
            }
            return dv::parse(&bytes, cardinality)
                .map(Some)
                .map_err(|reason| Error::Corrupt { path: data_path, reason });
        }
        "u" => d.relative_path().ok_or_else(|| Error::Corrupt {
            path: data_path.clone(),
            reason: format!(
                "its deletion vector's path {} is not a prefix and a Z85 UUID",
                crate::util::quote::quoted(&d.path_or_inline_dv)
            ),
        })?,
        "p" => beneath_table(root, &d.path_or_inline_dv).ok_or_else(|| Error::Unsupported {
            path: data_path.clone(),
            what: format!(
                "a deletion vector outside the table ({}); tinydelta reads files beneath the table folder only",
                crate::util::quote::quoted(&d.path_or_inline_dv)
            ),
        })?,
        other => {
            return Err(Error::Unsupported {
                path: data_path,
                what: format!("deletion vector storage type {}", crate::util::quote::quoted(other)),
            });
        }
    };
    let path = root.join(&rel);
    let damaged = |reason: String| Error::Corrupt {
        path: path.clone(),
        reason: format!("deletion vector of {}: {reason}", file.path),
    };
    let offset = u64::try_from(d.offset.unwrap_or(0)).map_err(|_| damaged("negative offset".into()))?;
    if size > dv::MAX_DV_BYTES {
        return Err(damaged(format!(
            "its descriptor says {size} bytes, more than the {} tinydelta reads",
            dv::MAX_DV_BYTES
        )));
    }
    let f = match root.open_file(&rel) {
        Ok(f) => f,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::MissingDataFile { path });
        }
        Err(e) => return Err(e),
    };
    let len = f.metadata().ctx("stat", &path)?.len();
    use std::os::unix::fs::FileExt;
    let mut version = [0u8; 1];
    if len == 0 || f.read_exact_at(&mut version, 0).is_err() || version[0] != 1 {
        return Err(damaged(format!("the file's format version is not 1 ({len} bytes)")));
    }
    // The size, the data and the checksum: 8 + size bytes from the offset, within the file.
    let want = size + 8;
    if offset.checked_add(want).is_none_or(|end| end > len) {
        return Err(damaged(format!(
            "{want} bytes at offset {offset} are past the end of the file of {len} bytes"
        )));
    }
    let mut framed = vec![0u8; want as usize];
    f.read_exact_at(&mut framed, offset).ctx("read", &path)?;
    let data = dv::unframe(&framed, size).map_err(damaged)?;
    dv::parse(data, cardinality).map(Some).map_err(damaged)
}

/// The path relative to the table of an absolute `p` deletion vector path (`file:` URI or
/// plain path, percent-encoded like `add.path`) naming a file inside the table folder `root`.
fn beneath_table(root: &Dir, abs: &str) -> Option<String> {
    let decoded = crate::format::actions::decode_path(abs)?;
    let p = decoded
        .strip_prefix("file://")
        .or_else(|| decoded.strip_prefix("file:"))
        .unwrap_or(&decoded);
    let table = std::fs::canonicalize(root.path()).ok()?;
    let rel = Path::new(p).strip_prefix(&table).ok()?.to_str()?.to_string();
    crate::format::actions::is_safe_relative_path(&rel).then_some(rel)
}
