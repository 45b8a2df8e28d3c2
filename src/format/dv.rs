//! Deletion vectors (PROTOCOL "Deletion Vectors" and "Deletion Vector Format"): the
//! `deletionVector` descriptor of an `add`/`remove`, its Z85 text, the RoaringBitmapArray bytes
//! (magic number, then a 64-bit RoaringBitmap in the portable format) and the framing of a DV
//! file (version byte, big-endian size, data, big-endian CRC-32). Reading the bytes from disk is
//! the table layer's (`src/table/datafile.rs`), beneath the table folder.

use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};

/// The magic number before the bitmap (little endian), PROTOCOL "Deletion Vector Format".
pub const MAGIC: u32 = 1_681_511_377;

/// The largest serialized deletion vector read (`sizeInBytes`): 256 MiB, as a commit
/// (`log::files::MAX_COMMIT_BYTES`); a larger one is refused before anything is read.
pub const MAX_DV_BYTES: u64 = 256 << 20;

/// `deletionVector` of an `add` or `remove` (PROTOCOL "Deletion Vector Descriptor Schema").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionVector {
    /// `u` (relative path from a UUID), `i` (inline), `p` (absolute path).
    pub storage_type: String,
    /// `<random prefix><z85 UUID>`, the z85 bytes, or the path, by `storage_type`.
    pub path_or_inline_dv: String,
    /// Start of the DV in its file (absent: 0; always absent inline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    /// Bytes of the serialized DV (before z85 when inline).
    pub size_in_bytes: i64,
    /// Rows it deletes.
    pub cardinality: i64,
}

impl DeletionVector {
    /// `uniqueId` (PROTOCOL "Derived Fields"): `<storageType><pathOrInlineDv>[@<offset>]`.
    pub fn unique_id(&self) -> String {
        match self.offset {
            Some(o) => format!("{}{}@{o}", self.storage_type, self.path_or_inline_dv),
            None => format!("{}{}", self.storage_type, self.path_or_inline_dv),
        }
    }

    /// Where a `u` DV is stored, relative to the table: `<prefix>/deletion_vector_<uuid>.bin`
    /// (no folder without a prefix). `None` when the text is not a prefix and 20 z85 characters.
    pub fn relative_path(&self) -> Option<String> {
        let s = &self.path_or_inline_dv;
        let split = s.len().checked_sub(20)?;
        let (prefix, code) = (s.get(..split)?, s.get(split..)?);
        let bytes = z85_decode(code)?;
        let uuid = uuid::Uuid::from_slice(&bytes).ok()?;
        let name = format!("deletion_vector_{}.bin", uuid.hyphenated());
        Some(if prefix.is_empty() { name } else { format!("{prefix}/{name}") })
    }
}

/// Z85 (ZeroMQ RFC 32) decoding: 5 characters per 4 bytes. `None` for a length that is not a
/// multiple of 5, a character outside the alphabet, or a group past 2^32.
pub fn z85_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 85] =
        b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    let b = s.as_bytes();
    if !b.len().is_multiple_of(5) {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() / 5 * 4);
    for chunk in b.chunks(5) {
        let mut v: u64 = 0;
        for c in chunk {
            let d = ALPHABET.iter().position(|a| a == c)? as u64;
            v = v * 85 + d;
        }
        let v = u32::try_from(v).ok()?;
        out.extend_from_slice(&v.to_be_bytes());
    }
    Some(out)
}

/// The row indexes of serialized DV `bytes` (magic number, then the portable 64-bit
/// RoaringBitmap, nothing after it), checked against the descriptor's `cardinality`.
/// Errors: a sentence naming what is wrong (for [`crate::error::Error::Corrupt`]).
pub fn parse(bytes: &[u8], cardinality: i64) -> Result<RoaringTreemap, String> {
    let magic = bytes
        .get(..4)
        .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]))
        .ok_or("the deletion vector is shorter than its magic number")?;
    if magic != MAGIC {
        return Err(format!("the deletion vector's magic number is {magic}, not {MAGIC}"));
    }
    let mut cur = std::io::Cursor::new(&bytes[4..]);
    let map = RoaringTreemap::deserialize_from(&mut cur)
        .map_err(|e| format!("the deletion vector is not a valid RoaringBitmap: {e}"))?;
    if cur.position() != (bytes.len() - 4) as u64 {
        return Err(format!(
            "the deletion vector holds {} bytes after its bitmap",
            (bytes.len() - 4) as u64 - cur.position()
        ));
    }
    // Every key's most significant bit is 0 (PROTOCOL "Deletion Vector Format").
    if map.max().is_some_and(|m| m >> 63 != 0) {
        return Err("the deletion vector holds a row index of 2^63 or more".into());
    }
    if i64::try_from(map.len()).ok() != Some(cardinality) {
        return Err(format!(
            "the deletion vector holds {} row indexes, but its descriptor's cardinality is {cardinality}",
            map.len()
        ));
    }
    Ok(map)
}

/// The DV at `offset` of a DV file whose bytes from `offset` are `framed` (PROTOCOL "Deletion
/// Vector File Storage Format": big-endian `dataSize`, the data, big-endian CRC-32 of the data),
/// `size` its descriptor's `sizeInBytes`. Returns the data. Errors: a sentence.
pub fn unframe(framed: &[u8], size: u64) -> Result<&[u8], String> {
    let declared = framed
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or("the file ends before the deletion vector's size")?;
    if u64::from(declared) != size {
        return Err(format!(
            "the deletion vector's size in the file is {declared} bytes, but its descriptor says {size}"
        ));
    }
    let n = declared as usize;
    let data = framed.get(4..4 + n).ok_or("the file ends inside the deletion vector")?;
    let crc = framed
        .get(4 + n..8 + n)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or("the file ends before the deletion vector's checksum")?;
    let actual = crc32fast::hash(data);
    if crc != actual {
        return Err(format!(
            "the deletion vector's CRC-32 is {actual:08x}, but the file records {crc:08x}"
        ));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_examples() {
        // PROTOCOL "JSON Example 1": prefix "ab", the UUID of the example's path.
        let dv = DeletionVector {
            storage_type: "u".into(),
            path_or_inline_dv: "ab^-aqEH.-t@S}K{vb[*k^".into(),
            offset: Some(4),
            size_in_bytes: 40,
            cardinality: 6,
        };
        assert_eq!(
            dv.relative_path().unwrap(),
            "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
        );
        assert_eq!(dv.unique_id(), "uab^-aqEH.-t@S}K{vb[*k^@4");
        // PROTOCOL "JSON Example 3" is Delta's older native layout (magic 1681511376, big
        // endian), not the portable format the "Deletion Vector Format" appendix specifies and
        // Delta engines write: refused by its magic number, never misread.
        let bytes = z85_decode("wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L").unwrap();
        assert_eq!(bytes.len(), 40);
        assert!(parse(&bytes, 6).unwrap_err().contains("magic number"));
        // The portable format of rows 3, 4, 7, 11, 18, 29.
        let map: RoaringTreemap = [3u64, 4, 7, 11, 18, 29].into_iter().collect();
        let mut bytes = MAGIC.to_le_bytes().to_vec();
        map.serialize_into(&mut bytes).unwrap();
        let rows: Vec<u64> = parse(&bytes, 6).unwrap().iter().collect();
        assert_eq!(rows, [3, 4, 7, 11, 18, 29]);
        assert!(parse(&bytes, 5).unwrap_err().contains("cardinality"));
        assert!(parse(&bytes[..bytes.len() - 1], 6).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(parse(&longer, 6).unwrap_err().contains("after its bitmap"));
        assert!(z85_decode("abc").is_none());
    }

    #[test]
    fn framing_checks_size_and_crc() {
        let data = b"0123456789";
        let mut framed = (data.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(data);
        framed.extend_from_slice(&crc32fast::hash(data).to_be_bytes());
        assert_eq!(unframe(&framed, 10).unwrap(), data);
        assert!(unframe(&framed, 11).unwrap_err().contains("size"));
        let mut bad = framed.clone();
        bad[5] ^= 1;
        assert!(unframe(&bad, 10).unwrap_err().contains("CRC-32"));
        assert!(unframe(&framed[..12], 10).is_err());
    }
}
