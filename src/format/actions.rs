//! Delta log actions (Delta PROTOCOL, "Actions"): the JSON objects, one per line, of a commit
//! file. Unknown action types and unknown fields are ignored on read (forward compatibility).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `commitInfo.operation` of the commit that starts a retention vacuum (Delta's name).
pub const VACUUM_START: &str = "VACUUM START";
/// `commitInfo.operation` of the commit that ends it.
pub const VACUUM_END: &str = "VACUUM END";

/// `protocol`: the reader and writer versions a client needs (PROTOCOL "Protocol Evolution").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    /// minReaderVersion; tinydelta reads 1.
    pub min_reader_version: i64,
    /// minWriterVersion; tinydelta writes 2.
    pub min_writer_version: i64,
    /// `readerFeatures` (reader version 3, PROTOCOL "Table Features"); tinydelta writes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader_features: Option<Vec<String>>,
    /// `writerFeatures` (writer version 7); tinydelta writes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_features: Option<Vec<String>>,
}

/// `metaData.format`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Format {
    /// Always `json` for tinydelta tables.
    pub provider: String,
    /// Always `{}`.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

/// `metaData`: table id, format, schema (PROTOCOL "Change Metadata").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// Table id (a UUID).
    pub id: String,
    /// Data file format.
    pub format: Format,
    /// Spark StructType JSON; empty when the action has none (Databricks DLT writes a first
    /// `metaData` without it: that version has no schema, docs/FORMAT.md "Tables of other Delta
    /// writers").
    #[serde(default)]
    pub schema_string: String,
    /// Always `[]`.
    #[serde(default)]
    pub partition_columns: Vec<String>,
    /// Always `{}`.
    #[serde(default)]
    pub configuration: BTreeMap<String, String>,
    /// Creation time, ms since epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_time: Option<i64>,
}

/// `add`: a data file joins the table (PROTOCOL "Add File and Remove File").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Add {
    /// Path relative to the table root.
    pub path: String,
    /// Always `{}` (no partitions).
    #[serde(default)]
    pub partition_values: BTreeMap<String, Option<String>>,
    /// Bytes.
    pub size: u64,
    /// ms since epoch.
    #[serde(default)]
    pub modification_time: i64,
    /// `true` for appends/overwrites; restore re-adds with `true` as well.
    #[serde(default = "yes")]
    pub data_change: bool,
    /// JSON string with numRecords, minValues, maxValues, nullCount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<String>,
    /// `numRecords` parsed from `stats`, once (log replay and the completeness checks both ask).
    #[serde(skip)]
    pub parsed_rows: std::sync::OnceLock<Option<u64>>,
    /// The rows of the data file this file's version leaves out (PROTOCOL "Deletion Vectors");
    /// other writers' only: tinydelta writes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_vector: Option<Box<crate::format::dv::DeletionVector>>,
}

fn yes() -> bool {
    true
}

impl Add {
    /// `numRecords` from the stats, if present and parseable.
    pub fn num_records(&self) -> Option<u64> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct S {
            num_records: Option<u64>,
        }
        *self.parsed_rows.get_or_init(|| {
            let s = self.stats.as_deref()?;
            serde_json::from_str::<S>(s).ok()?.num_records
        })
    }
}

/// `remove`: a data file leaves the table (its bytes stay for older versions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remove {
    /// Path relative to the table root.
    pub path: String,
    /// ms since epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<i64>,
    /// `true`.
    #[serde(default = "yes")]
    pub data_change: bool,
    /// `true`: partitionValues and size are present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_file_metadata: Option<bool>,
    /// Always `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_values: Option<BTreeMap<String, Option<String>>>,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The deletion vector of the logical file it removes (PROTOCOL "Deletion Vectors": a file
    /// is the pair of its path and its DV's `uniqueId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_vector: Option<Box<crate::format::dv::DeletionVector>>,
}

/// `cdc`: a change data file holding the row-level changes of its commit (PROTOCOL "Add CDC
/// File"): the changed rows, each with its `_change_type` (`delete`, `update_preimage`,
/// `update_postimage`, `insert`). A change data reader takes a version's changes from its `cdc`
/// files alone when it has any. tinydelta writes them for DELETE, UPDATE and MERGE in
/// `_change_data/cdc-<uuid>.jsonl` (docs/FORMAT.md "The change feed").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddCdcFile {
    /// Path relative to the table root (under `_change_data/`).
    pub path: String,
    /// Always `{}` (no partitions).
    #[serde(default)]
    pub partition_values: BTreeMap<String, Option<String>>,
    /// Bytes.
    pub size: u64,
    /// Always `false`: the file changes no version's rows.
    #[serde(default)]
    pub data_change: bool,
    /// tinydelta records the file's row count here as `numRecords` (the change feed's offsets
    /// follow from it without reading the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

impl AddCdcFile {
    /// The row count in `tags.numRecords`, if recorded and a number.
    pub fn num_records(&self) -> Option<u64> {
        self.tags.as_ref()?.get("numRecords")?.parse().ok()
    }
}

/// `txn`: the newest version of an application's idempotent writes (Delta PROTOCOL "Transaction
/// Identifiers"). tinydelta writes one with `append --txn APP_ID:VERSION`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Txn {
    /// The application's id.
    pub app_id: String,
    /// The application's version of this write.
    pub version: i64,
    /// ms since epoch, when written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<i64>,
}

/// `commitInfo`: provenance of a commit (PROTOCOL "Commit Provenance Information"). tinydelta
/// writes one, first, in every commit. Other writers' commitInfo is optional and free-form: on
/// read every field may be missing or of any JSON type (delta-rs writes integer metrics), so
/// parameters and metrics are kept as text (a JSON string as is, anything else as its JSON).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitInfo {
    /// ms since epoch; strictly increasing across versions (max(now, previous + 1)). When the
    /// commit records none, the reader fills in its file's mtime raised to one ms after the
    /// previous version's time (docs/FORMAT.md, "Commit times").
    pub timestamp: i64,
    /// Whether `timestamp` was recorded in the commit (false: filled in by the reader).
    #[serde(skip)]
    pub timestamp_recorded: bool,
    /// `CREATE TABLE`, `WRITE`, `RESTORE`.
    pub operation: String,
    /// e.g. `mode` = `Append` | `Overwrite`, `version` for RESTORE.
    pub operation_parameters: BTreeMap<String, String>,
    /// The version this commit read, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_version: Option<i64>,
    /// `Serializable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation_level: Option<String>,
    /// `true` for appends.
    pub is_blind_append: bool,
    /// Delta metric names per operation (docs/FORMAT.md): numFiles, numOutputRows, ...
    pub operation_metrics: BTreeMap<String, String>,
    /// `tinydelta/<crate version>` for tinydelta's commits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_info: Option<String>,
}

/// A JSON integer (or an integral float, or a string of digits).
fn as_i64(v: &serde_json::Value) -> Option<i64> {
    match v {
        serde_json::Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                .map(|f| f as i64)
        }),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Any JSON value as text (see [`Text`]); `null` as none.
fn lenient_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Some(Text::deserialize(d)?.0).filter(|t| t != "null"))
}

/// Any JSON value as text, without building a `serde_json::Value` for scalars (the common
/// case: tinydelta writes strings, delta-rs numbers).
struct Text(String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Text;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text, E> {
                Ok(Text(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text(serde_json::Value::from(v).to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Text, E> {
                Ok(Text("null".into()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Text, A::Error> {
                let v = serde_json::Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                Ok(Text(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Text, A::Error> {
                let v = serde_json::Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// An object of any values, as text; anything else (an array, a string, null) as empty.
fn lenient_map<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((k, Text(v))) = map.next_entry::<String, Text>()? {
                out.insert(k, v);
            }
            Ok(out)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(BTreeMap::new())
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
    }
    d.deserialize_any(V)
}

fn lenient_i64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(as_i64(&serde_json::Value::deserialize(d)?))
}

fn lenient_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(serde_json::Value::deserialize(d)?.as_bool().unwrap_or(false))
}

/// The wire form of `commitInfo`: every field optional and of any type.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCommitInfo {
    #[serde(default, deserialize_with = "lenient_i64")]
    timestamp: Option<i64>,
    #[serde(default, deserialize_with = "lenient_text")]
    operation: Option<String>,
    #[serde(default, deserialize_with = "lenient_map")]
    operation_parameters: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "lenient_i64")]
    read_version: Option<i64>,
    #[serde(default, deserialize_with = "lenient_text")]
    isolation_level: Option<String>,
    #[serde(default, deserialize_with = "lenient_bool")]
    is_blind_append: bool,
    #[serde(default, deserialize_with = "lenient_map")]
    operation_metrics: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "lenient_text")]
    engine_info: Option<String>,
}

impl<'de> Deserialize<'de> for CommitInfo {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = RawCommitInfo::deserialize(d)?;
        Ok(CommitInfo {
            timestamp: r.timestamp.unwrap_or(0),
            timestamp_recorded: r.timestamp.is_some(),
            operation: r.operation.unwrap_or_default(),
            operation_parameters: r.operation_parameters,
            read_version: r.read_version,
            isolation_level: r.isolation_level,
            is_blind_append: r.is_blind_append,
            operation_metrics: r.operation_metrics,
            engine_info: r.engine_info,
        })
    }
}

impl CommitInfo {
    /// The operation as `history` shows it: CREATE, APPEND, OVERWRITE, RESTORE (or the Delta
    /// name for operations tinydelta does not write).
    pub fn short_operation(&self) -> String {
        match (
            self.operation.as_str(),
            self.operation_parameters.get("mode").map(String::as_str),
        ) {
            ("CREATE TABLE", _) => "CREATE".into(),
            ("WRITE", Some("Append")) => "APPEND".into(),
            ("WRITE", Some("Overwrite")) => "OVERWRITE".into(),
            ("RESTORE", _) => "RESTORE".into(),
            (op, _) => op.to_string(),
        }
    }

    /// Whether tinydelta wrote this commit (`engineInfo` starts with `tinydelta/`): such commits
    /// get the full completeness checks of docs/FORMAT.md.
    pub fn is_tinydelta(&self) -> bool {
        self.engine_info.as_deref().is_some_and(|e| e.starts_with("tinydelta/"))
    }

    /// The metric `name` as a count, if recorded and a non-negative integer.
    pub fn metric(&self, name: &str) -> Option<u64> {
        self.operation_metrics.get(name).and_then(|v| v.trim().parse().ok())
    }
}

/// `sidecar` of a V2 checkpoint (PROTOCOL "Sidecar File Information"): a Parquet file in
/// `_delta_log/_sidecars/` holding `add` and `remove` actions of the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    /// The file: its name in `_delta_log/_sidecars/`, or a URI of it.
    pub path: String,
    /// Its size in bytes.
    pub size_in_bytes: i64,
}

/// One line of a commit file. Exactly one field is set for a well-formed action; lines with
/// only unknown keys leave all of them `None`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    /// `commitInfo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_info: Option<CommitInfo>,
    /// `protocol`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// `metaData`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "metaData")]
    pub metadata: Option<Metadata>,
    /// `add`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add: Option<Add>,
    /// `remove`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove: Option<Remove>,
    /// `txn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn: Option<Txn>,
    /// `cdc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdc: Option<AddCdcFile>,
}

impl Action {
    /// A line holding `commitInfo`.
    pub fn commit_info(c: CommitInfo) -> Self {
        Action {
            commit_info: Some(c),
            ..Default::default()
        }
    }
    /// A line holding `protocol`.
    pub fn protocol(p: Protocol) -> Self {
        Action {
            protocol: Some(p),
            ..Default::default()
        }
    }
    /// A line holding `metaData`.
    pub fn metadata(m: Metadata) -> Self {
        Action {
            metadata: Some(m),
            ..Default::default()
        }
    }
    /// A line holding `add`.
    pub fn add(a: Add) -> Self {
        Action {
            add: Some(a),
            ..Default::default()
        }
    }
    /// A line holding `txn`.
    pub fn txn(t: Txn) -> Self {
        Action {
            txn: Some(t),
            ..Default::default()
        }
    }
    /// A line holding `remove`.
    pub fn remove(r: Remove) -> Self {
        Action {
            remove: Some(r),
            ..Default::default()
        }
    }
    /// A line holding `cdc`.
    pub fn cdc(c: AddCdcFile) -> Self {
        Action {
            cdc: Some(c),
            ..Default::default()
        }
    }
}

/// Whether a log path is safe: relative, no `..`, no root, no URI scheme, no empty component
/// (docs/FORMAT.md, "Commit completeness"; symlinks are refused when the file is opened).
pub fn is_safe_relative_path(p: &str) -> bool {
    if p.is_empty() || p.starts_with('/') || p.contains('\\') || p.contains(':') || p.contains('\0') {
        return false;
    }
    p.split('/').all(|c| !c.is_empty() && c != ".." && c != ".")
}

/// Percent-decode a log path (Delta PROTOCOL "Add File and Remove File": `path` is an RFC 2396
/// URI). `None` when an escape is malformed or the bytes are not UTF-8.
pub fn decode_path(p: &str) -> Option<String> {
    if !p.contains('%') {
        return Some(p.to_string());
    }
    let b = p.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let s = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(s, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encode a path for the log (the inverse of [`decode_path`]): every byte outside
/// RFC 2396's unreserved characters and `/` becomes `%XX`. tinydelta's own `part-<uuid>.jsonl`
/// names are unchanged.
pub fn encode_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_actions_and_fields_are_ignored() {
        let a: Action = serde_json::from_str(r#"{"domainMetadata":{"domain":"x"}}"#).unwrap();
        assert!(a.add.is_none() && a.commit_info.is_none() && a.txn.is_none() && a.cdc.is_none());
        let a: Action = serde_json::from_str(r#"{"cdc":{"path":"x","size":1}}"#).unwrap();
        assert_eq!(a.cdc.map(|c| (c.path, c.size, c.data_change)), Some(("x".into(), 1, false)));
        let a: Action = serde_json::from_str(r#"{"txn":{"appId":"x","version":1,"future":2}}"#).unwrap();
        assert_eq!(a.txn.map(|t| (t.app_id, t.version)), Some(("x".into(), 1)));
        let a: Action = serde_json::from_str(
            r#"{"add":{"path":"p.jsonl","partitionValues":{},"size":3,"modificationTime":1,"dataChange":true,"tags":{"a":"b"},"future":1}}"#,
        )
        .unwrap();
        assert_eq!(a.add.unwrap().size, 3);
    }

    #[test]
    fn foreign_commit_info_of_any_types() {
        let a: Action = serde_json::from_str(
            r#"{"commitInfo":{"timestamp":5,"operation":"WRITE","operationParameters":{"mode":"Append","partitionBy":[]},"operationMetrics":{"numFiles":1,"numOutputRows":3,"execTimeMs":1.5},"clientVersion":"delta-rs.0.1"}}"#,
        )
        .unwrap();
        let c = a.commit_info.unwrap();
        assert_eq!((c.timestamp, c.timestamp_recorded), (5, true));
        assert_eq!(c.metric("numOutputRows"), Some(3));
        assert_eq!(c.operation_parameters["partitionBy"], "[]");
        let a: Action = serde_json::from_str(r#"{"commitInfo":{}}"#).unwrap();
        assert!(!a.commit_info.unwrap().timestamp_recorded);
        assert_eq!(decode_path("part-f%20a.jsonl").as_deref(), Some("part-f a.jsonl"));
        assert_eq!(decode_path("a%2"), None);
        for p in ["part-f a.jsonl", "x/100%.jsonl", "part-1.jsonl"] {
            assert_eq!(decode_path(&encode_path(p)).as_deref(), Some(p));
        }
        assert_eq!(encode_path("part-1.jsonl"), "part-1.jsonl");
    }

    #[test]
    fn path_safety() {
        for ok in ["part-1.jsonl", "a/b.jsonl"] {
            assert!(is_safe_relative_path(ok), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "file:///etc/passwd",
            "s3://b/k",
            "a//b",
            "./a",
        ] {
            assert!(!is_safe_relative_path(bad), "{bad}");
        }
    }
}
