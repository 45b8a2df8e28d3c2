//! Delta log actions (Delta PROTOCOL, "Actions"): the JSON objects, one per line, of a commit
//! file. Unknown action types and unknown fields are ignored on read (forward compatibility).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `protocol`: the reader and writer versions a client needs (PROTOCOL "Protocol Evolution").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    /// minReaderVersion; tinydelta reads 1.
    pub min_reader_version: i64,
    /// minWriterVersion; tinydelta writes 2.
    pub min_writer_version: i64,
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
    /// Spark StructType JSON.
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
        let s = self.stats.as_deref()?;
        serde_json::from_str::<S>(s).ok()?.num_records
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
}

/// `commitInfo`: provenance of a commit (PROTOCOL "Commit Provenance Information"). tinydelta
/// writes one, first, in every commit.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitInfo {
    /// ms since epoch; strictly increasing across versions (max(now, previous + 1)).
    #[serde(default)]
    pub timestamp: i64,
    /// `CREATE TABLE`, `WRITE`, `RESTORE`.
    #[serde(default)]
    pub operation: String,
    /// String values, e.g. `mode` = `Append` | `Overwrite`, `version` for RESTORE.
    #[serde(default)]
    pub operation_parameters: BTreeMap<String, String>,
    /// The version this commit read, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_version: Option<i64>,
    /// `Serializable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_level: Option<String>,
    /// `true` for appends.
    #[serde(default)]
    pub is_blind_append: bool,
    /// String values: numFiles, numOutputRows, numOutputBytes, ...
    #[serde(default)]
    pub operation_metrics: BTreeMap<String, String>,
    /// `tinydelta/<crate version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_info: Option<String>,
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
    /// A line holding `remove`.
    pub fn remove(r: Remove) -> Self {
        Action {
            remove: Some(r),
            ..Default::default()
        }
    }
}

/// Whether a log path is safe: relative, no `..`, no root, no URI scheme, no empty component
/// (SPEC section 1; symlinks are checked when the file is opened).
pub fn is_safe_relative_path(p: &str) -> bool {
    if p.is_empty() || p.starts_with('/') || p.contains('\\') || p.contains(':') || p.contains('\0') {
        return false;
    }
    p.split('/').all(|c| !c.is_empty() && c != ".." && c != ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_actions_and_fields_are_ignored() {
        let a: Action = serde_json::from_str(r#"{"txn":{"appId":"x","version":1}}"#).unwrap();
        assert!(a.add.is_none() && a.commit_info.is_none());
        let a: Action = serde_json::from_str(
            r#"{"add":{"path":"p.jsonl","partitionValues":{},"size":3,"modificationTime":1,"dataChange":true,"tags":{"a":"b"},"future":1}}"#,
        )
        .unwrap();
        assert_eq!(a.add.unwrap().size, 3);
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
