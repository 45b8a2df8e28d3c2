//! Interop with a real Delta implementation (docs/FORMAT.md "Tables of other Delta writers"): the
//! `deltalake` Python package (delta-rs) opens tables built by the real `tinydelta` binary and must
//! agree with `tinydelta describe --json` and `tinydelta history --json` at every version on
//! version, protocol, metadata, schema, live files (paths and sizes), per-file row counts and the
//! parsed per-file statistics. DuckDB reads the data files delta-rs lists, as an independent row
//! count.
//!
//! delta-rs cannot read JSON data files into Arrow (`metaData.format.provider` is `json`), so only
//! the log is compared; `scripts/delta_check.py` prints what delta-rs sees.
//!
//! Needs a Python with deltalake, pyarrow and duckdb: `$TINYDELTA_PYTHON`, or `.venv/bin/python`
//! in the repository (`scripts/test.sh` creates it). Without one the tests fail; they never skip.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const FLIGHTS_SCHEMA: &str = "year:int! month:int! day:int! dep_time:int sched_dep_time:int dep_delay:int \
     arr_time:int sched_arr_time:int arr_delay:int carrier:str flight:int tailnum:str origin:str \
     dest:str air_time:int distance:int hour:int minute:int time_hour:timestamp";

const TYPES_SCHEMA: &str = "id:int! name:str score:float ok:bool day:date at:timestamp note:str";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn fixture(name: &str) -> PathBuf {
    manifest_dir().join("tests/data/delta_compat").join(name)
}

/// The interpreter that has `deltalake`: `$TINYDELTA_PYTHON` or the repository's `.venv`.
pub(crate) fn python() -> PathBuf {
    let py = match std::env::var_os("TINYDELTA_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => manifest_dir().join(".venv/bin/python"),
    };
    assert!(
        py.exists(),
        "no Python for the Delta interop test at {} (TINYDELTA_PYTHON is {:?}). \
         Run scripts/test.sh: it creates .venv with deltalake, pyarrow and duckdb and sets TINYDELTA_PYTHON.",
        py.display(),
        std::env::var_os("TINYDELTA_PYTHON"),
    );
    py
}

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed with {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    out
}

/// Runs the real `tinydelta` binary; panics unless it exits 0.
fn td(args: &[&str]) -> Vec<u8> {
    run(Command::new(env!("CARGO_BIN_EXE_tinydelta")).args(args)).stdout
}

fn td_json(args: &[&str]) -> Value {
    let out = td(args);
    serde_json::from_slice(&out).unwrap_or_else(|e| {
        panic!(
            "tinydelta {args:?} printed invalid JSON ({e}): {}",
            String::from_utf8_lossy(&out)
        )
    })
}

/// What delta-rs sees at every version (see scripts/delta_check.py).
fn deltalake_view(table: &Path) -> Value {
    let py = python();
    let script = manifest_dir().join("scripts/delta_check.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(table)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} {}: {e}", py.display(), script.display()));
    assert!(
        out.status.success(),
        "{} {} {} failed with {}: {}\n(run scripts/test.sh to create .venv with deltalake, pyarrow and duckdb)",
        py.display(),
        script.display(),
        table.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "delta_check.py printed invalid JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    if let Some(err) = v.get("error") {
        panic!(
            "deltalake {} refused to open {}: {err}",
            v["deltalake"],
            table.display()
        );
    }
    v
}

/// `path -> parsed add.stats` for every `add` the log ever wrote (a path's stats never change:
/// restore re-adds a file with the stats it was first committed with).
fn raw_stats(table: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut commits: Vec<_> = std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    commits.sort();
    for c in commits {
        for line in std::fs::read_to_string(&c).unwrap().lines() {
            let action: Value = serde_json::from_str(line).unwrap();
            if let Some(add) = action.get("add") {
                let stats = add["stats"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{}: add without stats: {line}", c.display()));
                let stats: Value = serde_json::from_str(stats).unwrap();
                out.insert(add["path"].as_str().unwrap().to_string(), stats);
            }
        }
    }
    out
}

/// The same value for a stat: numbers compare as f64 (delta-rs widens per the schema), the rest
/// exactly (delta_check.py spells timestamps the way tinydelta writes them).
fn same_stat(ours: &Value, theirs: &Value) -> bool {
    match (ours.as_f64(), theirs.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => ours == theirs,
    }
}

/// One table, every version: delta-rs against `describe --json` and `history --json`.
/// Returns the number of versions compared.
pub(crate) fn assert_agrees(table: &Path, expected_ops: &[(&str, Option<&str>)]) -> usize {
    let t = table.to_str().unwrap();
    let dl = deltalake_view(table);
    let history = td_json(&["history", t, "--json"]);
    let history = history.as_array().expect("history --json is an array");
    let latest = history.len() as u64 - 1;
    assert_eq!(history.len(), expected_ops.len(), "tinydelta history: {history:?}");
    assert_eq!(
        dl["latest"], latest,
        "deltalake's latest version differs from tinydelta's"
    );
    let stats = raw_stats(table);
    let root = std::fs::canonicalize(table).unwrap();

    // History: same versions, operations, parameters and timestamps.
    let mut dl_history: Vec<&Value> = dl["history"].as_array().expect("deltalake history").iter().collect();
    dl_history.sort_by_key(|h| h["version"].as_u64());
    assert_eq!(
        dl_history.len(),
        history.len(),
        "deltalake history() has {} entries, tinydelta history {}",
        dl_history.len(),
        history.len()
    );
    for (i, ((ours, theirs), (op, mode))) in history.iter().zip(&dl_history).zip(expected_ops).enumerate() {
        assert_eq!(ours["version"], i as u64);
        assert_eq!(theirs["version"], i as u64, "deltalake history entry {i}: {theirs}");
        assert_eq!(ours["deltaOperation"], *op, "tinydelta history, version {i}: {ours}");
        assert_eq!(theirs["operation"], *op, "deltalake history, version {i}: {theirs}");
        assert_eq!(
            theirs["operationParameters"].get("mode").and_then(Value::as_str),
            *mode,
            "version {i}"
        );
        assert_eq!(
            theirs["operationParameters"], ours["operationParameters"],
            "operationParameters, version {i}"
        );
        assert_eq!(theirs["timestamp"], ours["timestamp"], "commit timestamp, version {i}");
        assert_eq!(
            theirs["engineInfo"],
            format!("tinydelta/{}", env!("CARGO_PKG_VERSION")),
            "version {i}"
        );
    }

    let versions = dl["versions"].as_array().expect("deltalake versions");
    assert_eq!(versions.len() as u64, latest + 1);
    for (n, theirs) in versions.iter().enumerate() {
        let ctx = format!("{} version {n}", table.display());
        if let Some(err) = theirs.get("error") {
            panic!("deltalake {} cannot open {ctx}: {err}", dl["deltalake"]);
        }
        let ours = td_json(&["describe", t, "--version", &n.to_string(), "--json"]);
        // A version a retention vacuum made unreadable: the log still agrees, its files are gone.
        let readable = ours["readableVersions"]
            .as_array()
            .expect("describe readableVersions")
            .iter()
            .any(|r| r[0].as_u64() <= Some(n as u64) && Some(n as u64) <= r[1].as_u64());

        // Version.
        assert_eq!(theirs["version"], n as u64, "{ctx}: deltalake version()");
        assert_eq!(ours["version"], n as u64, "{ctx}: describe version");

        // Protocol and metadata as delta-rs parsed them.
        assert_eq!(
            theirs["protocol"]["minReaderVersion"], 1,
            "{ctx}: {}",
            theirs["protocol"]
        );
        assert_eq!(
            theirs["protocol"]["minWriterVersion"], 7,
            "{ctx}: {}",
            theirs["protocol"]
        );
        assert!(
            theirs["protocol"]["readerFeatures"].is_null(),
            "{ctx}: {}",
            theirs["protocol"]
        );
        assert_eq!(
            theirs["protocol"]["writerFeatures"],
            serde_json::json!(["tinydeltaJsonlData"]),
            "{ctx}: {}",
            theirs["protocol"]
        );
        assert_eq!(theirs["metadata"]["id"], ours["tableId"], "{ctx}: table id");
        assert_eq!(theirs["metadata"]["partitionColumns"], serde_json::json!([]), "{ctx}");
        assert_eq!(theirs["metadata"]["configuration"], serde_json::json!({}), "{ctx}");
        assert!(
            theirs["metadata"]["createdTime"].is_i64(),
            "{ctx}: createdTime {}",
            theirs["metadata"]
        );

        // Schema: names, Delta types, nullability, in order.
        let our_schema: Vec<Value> = ours["schema"]
            .as_array()
            .expect("describe schema")
            .iter()
            .map(|c| serde_json::json!({"name": c["name"], "type": c["deltaType"], "nullable": c["nullable"]}))
            .collect();
        assert_eq!(theirs["schema"], Value::Array(our_schema), "{ctx}: schema");

        // Live files: the same set of (path, size), the same row count per file.
        let our_files: BTreeMap<String, (u64, u64)> = ours["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let p = f["path"].as_str().unwrap().to_string();
                (p, (f["size"].as_u64().unwrap(), f["numRecords"].as_u64().unwrap()))
            })
            .collect();
        let their_files: BTreeMap<String, (u64, u64)> = theirs["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let p = f["path"].as_str().unwrap().to_string();
                let size = f["size"].as_u64().unwrap_or_else(|| panic!("{ctx}: size of {f}"));
                let rows = f["numRecords"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{ctx}: deltalake did not parse numRecords of {p}: {f}"));
                (p, (size, rows))
            })
            .collect();
        assert_eq!(
            our_files.len(),
            ours["files"].as_array().unwrap().len(),
            "{ctx}: duplicate paths"
        );
        assert_eq!(their_files, our_files, "{ctx}: live files (path -> (size, numRecords))");
        assert_eq!(ours["numFiles"], our_files.len() as u64, "{ctx}");
        assert_eq!(
            ours["numRecords"],
            our_files.values().map(|f| f.1).sum::<u64>(),
            "{ctx}"
        );
        assert_eq!(ours["sizeBytes"], our_files.values().map(|f| f.0).sum::<u64>(), "{ctx}");

        // delta-rs resolves each path to a file inside the table, and the file is really there
        // with that size; DuckDB reads exactly numRecords rows from it.
        let uris: BTreeSet<PathBuf> = theirs["fileUris"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| {
                let u = u.as_str().unwrap();
                PathBuf::from(u.strip_prefix("file://").unwrap_or(u))
            })
            .collect();
        let expected_uris: BTreeSet<PathBuf> = our_files.keys().map(|p| root.join(p)).collect();
        assert_eq!(uris, expected_uris, "{ctx}: deltalake file_uris()");
        let duck = theirs["duckdbRows"]
            .as_object()
            .unwrap_or_else(|| panic!("{ctx}: no DuckDB row counts"));
        assert_eq!(duck.len(), our_files.len(), "{ctx}: DuckDB row counts {duck:?}");
        let mut gone = 0;
        for (p, (size, rows)) in &our_files {
            match std::fs::metadata(root.join(p)) {
                Ok(m) => {
                    assert_eq!(m.len(), *size, "{ctx}: size of {p} on disk");
                    assert_eq!(duck[p], *rows, "{ctx}: rows DuckDB reads from {p}");
                }
                Err(e) => {
                    assert!(
                        !readable,
                        "{ctx}: {p} is gone ({e}) but describe lists the version readable"
                    );
                    assert!(duck[p].is_null(), "{ctx}: DuckDB read a gone file {p}");
                    gone += 1;
                }
            }
        }
        if readable {
            let read = td(&["read", t, "--version", &n.to_string()]);
            let lines = read.iter().filter(|&&b| b == b'\n').count() as u64;
            assert_eq!(lines, ours["numRecords"].as_u64().unwrap(), "{ctx}: lines of `read`");
        } else {
            assert!(gone > 0, "{ctx}: not readable, yet every file is there");
            let (code, _, err) = td_any(&["read", t, "--version", &n.to_string()]);
            assert_eq!(code, 4, "{ctx}: read of a vacuumed version: {err}");
            assert!(err.contains("was removed by the vacuum of"), "{ctx}: {err}");
        }

        // Stats: delta-rs parses every nullCount/minValues/maxValues tinydelta wrote, to the same
        // value, and has none that the log does not have.
        for f in theirs["files"].as_array().unwrap() {
            let p = f["path"].as_str().unwrap();
            let raw = &stats[p];
            assert_eq!(raw["numRecords"], f["numRecords"], "{ctx}: numRecords of {p}");
            for key in ["nullCount", "minValues", "maxValues"] {
                let parsed = f[key].as_object().unwrap();
                let written = raw[key].as_object().unwrap();
                for (col, v) in written {
                    let got = parsed.get(col).unwrap_or(&Value::Null);
                    assert!(
                        same_stat(v, got),
                        "{ctx}: {p} {key}.{col}: log has {v}, deltalake parsed {got}"
                    );
                }
                for (col, got) in parsed {
                    if !written.contains_key(col) {
                        assert!(
                            got.is_null(),
                            "{ctx}: {p} {key}.{col}: not in the log, deltalake has {got}"
                        );
                    }
                }
            }
            // Every column has a null count (a data skipping reader needs it): every column of
            // the schema the file was written under (a column added later has none in older files).
            let counted = raw["nullCount"].as_object().unwrap();
            let names: BTreeSet<&str> = ours["schema"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| c["name"].as_str())
                .collect();
            assert!(
                counted.keys().all(|k| names.contains(k.as_str())),
                "{ctx}: {p}: {counted:?}"
            );
            assert!(counted.len() <= our_schema_len(&ours), "{ctx}: {p}");
            assert!(
                counted.len() == our_schema_len(&ours) || counted.len() == FLIGHTS_SCHEMA.split_whitespace().count(),
                "{ctx}: {p}: {} null counts",
                counted.len()
            );
        }
    }
    versions.len()
}

fn our_schema_len(describe: &Value) -> usize {
    describe["schema"].as_array().unwrap().len()
}

fn tmp_table(dir: &tempfile::TempDir, name: &str) -> (PathBuf, String) {
    let p = dir.path().join(name);
    let s = p.to_str().unwrap().to_string();
    (p, s)
}

#[test]
fn deltalake_agrees_on_flights_at_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let (table, t) = tmp_table(&dir, "flights");
    let jan = fixture("flights-jan.jsonl");
    let feb = fixture("flights-feb.jsonl");
    let mar = fixture("flights-mar.jsonl");
    let (jan, feb, mar) = (jan.to_str().unwrap(), feb.to_str().unwrap(), mar.to_str().unwrap());

    let mut create = vec!["create", &t];
    create.extend(FLIGHTS_SCHEMA.split_whitespace());
    td(&create); // 0
    td(&["append", &t, "--file", jan]); // 1
    td(&["append", &t, "--file", feb]); // 2
    td(&["append", &t, "--file", mar]); // 3
    td(&["overwrite", &t, "--file", feb]); // 4
    td(&["append", &t, "--file", mar]); // 5
    td(&["restore", &t, "--version", "3"]); // 6: the three appended files again
    td(&["append", &t, "--file", jan]); // 7: a fourth file on top of the restore
    td(&["restore", &t, "--version", "0"]); // 8: empty again

    let append = ("WRITE", Some("Append"));
    let ops = [
        ("CREATE TABLE", Some("ErrorIfExists")),
        append,
        append,
        append,
        ("WRITE", Some("Overwrite")),
        append,
        ("RESTORE", None),
        append,
        ("RESTORE", None),
    ];
    assert_eq!(assert_agrees(&table, &ops), 9);

    // Spot checks that the comparison compared something.
    let v3 = td_json(&["describe", &t, "--version", "3", "--json"]);
    assert_eq!(v3["numRecords"], 2500);
    assert_eq!(v3["numFiles"], 3);
    let v6 = td_json(&["describe", &t, "--version", "6", "--json"]);
    assert_eq!(
        v6["files"], v3["files"],
        "restore --version 3 brings back version 3's files"
    );
    let v8 = td_json(&["describe", &t, "--version", "8", "--json"]);
    assert_eq!(v8["numFiles"], 0);

    // Vacuum with the default retention deletes nothing any version names: delta-rs still
    // agrees everywhere.
    td(&["vacuum", &t, "--older-than", "0s"]);
    assert_eq!(assert_agrees(&table, &ops), 9);

    // A retention vacuum: version 8 restored the empty version 0, so every data file is
    // removed and goes; VACUUM START / END commits; delta-rs agrees at every version, including
    // the ones whose files are gone.
    td(&["vacuum", &t, "--retain", "0s", "--force"]); // 9, 10
    let mut ops = ops.to_vec();
    ops.push(("VACUUM START", None));
    ops.push(("VACUUM END", None));
    assert_eq!(assert_agrees(&table, &ops), 11);
    let d = td_json(&["describe", &t, "--json"]);
    assert_eq!(d["readableVersions"], serde_json::json!([[0, 0], [8, 10]]));
}

#[test]
fn deltalake_agrees_after_optimize_a_txn_restore_and_a_retention_vacuum() {
    let dir = tempfile::tempdir().unwrap();
    let (table, t) = tmp_table(&dir, "flights");
    let jan = fixture("flights-jan.jsonl");
    let feb = fixture("flights-feb.jsonl");
    let mar = fixture("flights-mar.jsonl");
    let (jan, feb, mar) = (jan.to_str().unwrap(), feb.to_str().unwrap(), mar.to_str().unwrap());
    let mut create = vec!["create", &t];
    create.extend(FLIGHTS_SCHEMA.split_whitespace());
    td(&create); // 0
    td(&["append", &t, "--file", jan]); // 1
    td(&["append", &t, "--file", feb]); // 2
    td(&["append", &t, "--file", mar]); // 3
    let v3 = td(&["read", &t]);
    td(&["optimize", &t]); // 4: one file, dataChange false
    assert_eq!(td(&["read", &t]), v3, "optimize changed the rows");
    td(&["append", &t, "--file", jan, "--txn", "etl:1"]); // 5, with a txn action
    td(&["restore", &t, "--version", "3"]); // 6: the three files again
    td(&["vacuum", &t, "--retain", "0s", "--force"]); // 7, 8: the optimized file and 5's go
    let append = ("WRITE", Some("Append"));
    let ops = [
        ("CREATE TABLE", Some("ErrorIfExists")),
        append,
        append,
        append,
        ("OPTIMIZE", None),
        append,
        ("RESTORE", None),
        ("VACUUM START", None),
        ("VACUUM END", None),
    ];
    assert_eq!(assert_agrees(&table, &ops), 9);
    let d = td_json(&["describe", &t, "--json"]);
    assert_eq!(d["readableVersions"], serde_json::json!([[0, 3], [6, 8]]));
    let v4 = td_json(&["describe", &t, "--version", "4", "--json"]);
    assert_eq!(v4["numFiles"], 1);
    assert_eq!(v4["numRecords"], 2500);
    assert_eq!(d["txns"], serde_json::json!({"etl": 1}));

    // Schema evolution: delta-rs reads the new metaData at 9 and the old one before.
    td(&["alter", &t, "add-column", "note:str"]); // 9
    td(&["append", &t, "--file", mar]); // 10: rows without the new column
    let mut ops = ops.to_vec();
    ops.push(("ADD COLUMNS", None));
    ops.push(append);
    assert_eq!(assert_agrees(&table, &ops), 11);
    let v10 = td_json(&["describe", &t, "--json"]);
    assert_eq!(our_schema_len(&v10), 20);
}

#[test]
fn deltalake_agrees_on_every_column_type() {
    let dir = tempfile::tempdir().unwrap();
    let (table, t) = tmp_table(&dir, "types");
    let a = fixture("types-a.jsonl"); // ints in a float column, a non-ASCII string over 32 chars, nulls
    let b = fixture("types-b.jsonl"); // CRLF, a blank line, key order, omitted key, no final newline
    let c = fixture("types-c.jsonl");
    let (a, b, c) = (a.to_str().unwrap(), b.to_str().unwrap(), c.to_str().unwrap());

    let mut create = vec!["create", &t];
    create.extend(TYPES_SCHEMA.split_whitespace());
    td(&create); // 0
    td(&["append", &t, "--file", a]); // 1
    td(&["append", &t, "--file", b]); // 2
    td(&["overwrite", &t, "--file", c]); // 3
    td(&["restore", &t, "--version", "2"]); // 4

    let ops = [
        ("CREATE TABLE", Some("ErrorIfExists")),
        ("WRITE", Some("Append")),
        ("WRITE", Some("Append")),
        ("WRITE", Some("Overwrite")),
        ("RESTORE", None),
    ];
    assert_eq!(assert_agrees(&table, &ops), 5);

    let v4 = td_json(&["describe", &t, "--json"]);
    assert_eq!(v4["version"], 4);
    assert_eq!(v4["numRecords"], 5);
    let types: Vec<&str> = v4["schema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["deltaType"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["long", "string", "double", "boolean", "date", "timestamp", "string"]
    );
}

/// The comparison is not vacuous: a log entry that lies about a file's row count is caught.
#[test]
fn a_disagreement_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (table, t) = tmp_table(&dir, "liar");
    let mut create = vec!["create", &t];
    create.extend(TYPES_SCHEMA.split_whitespace());
    td(&create);
    td(&["append", &t, "--file", fixture("types-a.jsonl").to_str().unwrap()]);
    // Tamper with version 1: claim 4 records in the add's stats (and in commitInfo's
    // numOutputRows, so the lie is consistent and passes tinydelta's completeness check).
    // tinydelta and delta-rs both believe the log, but DuckDB counts the real lines, and
    // assert_agrees must notice.
    let commit = table.join("_delta_log/00000000000000000001.json");
    let text = std::fs::read_to_string(&commit).unwrap();
    let lied = text
        .replace(r#"\"numRecords\":3"#, r#"\"numRecords\":4"#)
        .replace(r#""numOutputRows":"3""#, r#""numOutputRows":"4""#);
    assert_ne!(text, lied, "the commit should contain numRecords 3: {text}");
    std::fs::write(&commit, lied).unwrap();
    let ops = [("CREATE TABLE", Some("ErrorIfExists")), ("WRITE", Some("Append"))];
    let caught = std::panic::catch_unwind(|| assert_agrees(&table, &ops));
    let msg = match caught {
        Ok(_) => panic!("a table whose log says 4 rows for a 3-line file passed the comparison"),
        Err(e) => e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    };
    assert!(
        msg.contains("rows DuckDB reads") || msg.contains("lines of `read`"),
        "unexpected failure: {msg}"
    );
}

/// Runs the real `tinydelta` binary and returns (exit code, stdout, stderr), whatever the code.
/// The guard (docs/FORMAT.md "A guard against other writers"): a table tinydelta creates lists
/// the writer feature `tinydeltaJsonlData` at writer version 7, so the real deltalake refuses
/// `write_deltalake(..., mode="append")` with its own error and commits nothing, while it still
/// reads the log; tinydelta keeps reading and writing the table.
#[test]
fn deltalake_refuses_to_append_to_a_tinydelta_table() {
    let dir = tempfile::tempdir().unwrap();
    let (table, t) = tmp_table(&dir, "t");
    td(&["create", &t, "id:int!", "name:str"]);
    let rows = dir.path().join("rows.jsonl");
    std::fs::write(&rows, "{\"id\":1,\"name\":\"a\"}\n").unwrap();
    td(&["append", &t, "--file", rows.to_str().unwrap()]);
    let out = Command::new(python())
        .arg("-c")
        .arg(format!(
            "import pyarrow as pa, deltalake\n\
             t = deltalake.DeltaTable({t:?})\n\
             print(t.version(), t.protocol().min_writer_version, t.protocol().writer_features)\n\
             deltalake.write_deltalake({t:?}, pa.table({{'id': pa.array([7], pa.int32()), 'name': ['x']}}), mode='append')\n"
        ))
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "deltalake appended: {stdout} {stderr}");
    assert!(stdout.starts_with("1 7 ['tinydeltaJsonlData']"), "{stdout} {stderr}");
    assert!(
        stderr.contains("Unsupported table features") && stderr.contains("tinydeltaJsonlData"),
        "{stderr}"
    );
    assert!(!table.join("_delta_log/00000000000000000002.json").exists());
    assert!(
        !std::fs::read_dir(&table)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".parquet")),
        "deltalake left a Parquet file"
    );
    td(&["append", &t, "--file", rows.to_str().unwrap()]);
    assert_eq!(
        td(&["read", &t]),
        b"{\"id\":1,\"name\":\"a\"}\n{\"id\":1,\"name\":\"a\"}\n"
    );
}

fn td_any(args: &[&str]) -> (i32, Vec<u8>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tinydelta"))
        .args(args)
        .output()
        .expect("run tinydelta");
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Commits by a real `deltalake` writer are read, not rejected (integer operationMetrics,
/// snake_case metric names, unknown fields such as `tags: null`, `clientVersion`): old versions
/// read fully, the version naming a Parquet file reads its rows as canonical JSONL
/// (docs/FORMAT.md, "Parquet data files"; tests/mount/parquet_read.rs has the rest), describe and
/// history answer, tinydelta appends continue and vacuum keeps the Parquet file.
#[test]
fn deltalake_appends_leave_a_tinydelta_table_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (table, t) = tmp_table(&dir, "t");
    td(&["create", &t, "id:int!", "name:str"]);
    // A table created before the guard (docs/FORMAT.md "A guard against other writers"): writer
    // version 2, which deltalake writes to.
    crate::support::legacy_protocol(&table);
    let rows = dir.path().join("rows.jsonl");
    std::fs::write(&rows, "{\"id\":1,\"name\":\"a\"}\n{\"id\":2,\"name\":\"b\"}\n").unwrap();
    td(&["append", &t, "--file", rows.to_str().unwrap()]);
    let v1 = td(&["read", &t, "--version", "1"]);
    run(Command::new(python()).arg("-c").arg(format!(
        "import pyarrow as pa\nfrom deltalake import write_deltalake\n\
         write_deltalake({t:?}, pa.table({{'id': pa.array([7, 8, 9], pa.int64()), 'name': ['x', 'y', 'z']}}), mode='append')\n"
    )));
    let ci: Value = serde_json::from_slice(
        std::fs::read(table.join("_delta_log/00000000000000000002.json"))
            .unwrap()
            .split(|b| *b == b'\n')
            .next()
            .unwrap(),
    )
    .unwrap();
    assert!(
        ci["commitInfo"]["operationMetrics"]
            .as_object()
            .unwrap()
            .values()
            .any(|v| v.is_number()),
        "deltalake no longer writes integer metrics; this test lost its point: {ci}"
    );
    // Every command still answers.
    assert_eq!(td(&["read", &t, "--version", "1"]), v1);
    let mut v2 = v1.clone();
    v2.extend_from_slice(b"{\"id\":7,\"name\":\"x\"}\n{\"id\":8,\"name\":\"y\"}\n{\"id\":9,\"name\":\"z\"}\n");
    assert_eq!(
        String::from_utf8_lossy(&td(&["read", &t])),
        String::from_utf8_lossy(&v2),
        "read of the version naming a Parquet file"
    );
    let d = td_json(&["describe", &t, "--json"]);
    assert_eq!(
        (d["version"].as_u64(), d["numRecords"].as_u64()),
        (Some(2), Some(5)),
        "{d}"
    );
    let h = td_json(&["history", &t, "--json"]);
    assert_eq!(h.as_array().unwrap().len(), 3, "{h}");
    assert_eq!(h[2]["rows"], 3, "{h}");
    // check: whole (the Parquet file is read like any data file).
    let (code, out, _) = td_any(&["check", &t, "--deep"]);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out));
    // tinydelta keeps writing; vacuum keeps the file a version names.
    td(&["append", &t, "--file", rows.to_str().unwrap()]);
    td(&["vacuum", &t, "--older-than", "0s"]);
    let parquet: Vec<_> = std::fs::read_dir(&table)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
        .collect();
    assert_eq!(parquet.len(), 1);
    // Restore to version 1 makes the table JSONL-only again, and deltalake agrees on the files.
    td(&["restore", &t, "--version", "1"]);
    assert_eq!(td(&["read", &t]), v1);
    let theirs = deltalake_view(&table);
    assert!(theirs.to_string().contains("part-"), "{theirs}");
}

/// Delta checkpoints (docs/FORMAT.md "Delta checkpoints"): every `delta.checkpointInterval`
/// commits tinydelta writes `<v>.checkpoint.parquet` and `_last_checkpoint`, which the real
/// deltalake opens (the protocol with its feature lists, the live files with their stats) and
/// agrees with at the checkpoint's version and after; tinydelta reads every version as before.
#[test]
fn deltalake_opens_the_delta_checkpoints_tinydelta_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (table, t) = tmp_table(&dir, "t");
    td(&["create", &t, "id:int!", "at:timestamp_ntz"]);
    td(&["alter", &t, "set-property", "delta.checkpointInterval=5"]); // version 1
    let rows = dir.path().join("rows.jsonl");
    for i in 0..11 {
        std::fs::write(
            &rows,
            format!("{{\"id\":{i},\"at\":\"2024-01-01T00:00:0{}\"}}\n", i % 10),
        )
        .unwrap();
        td(&["append", &t, "--file", rows.to_str().unwrap()]); // versions 2..=12
    }
    td(&["delete", &t, "--where", "id = 4"]); // version 13
    let log = table.join("_delta_log");
    for v in [5u64, 10] {
        assert!(
            log.join(format!("{v:020}.checkpoint.parquet")).is_file(),
            "checkpoint {v}"
        );
    }
    let last: Value = serde_json::from_slice(&std::fs::read(log.join("_last_checkpoint")).unwrap()).unwrap();
    assert_eq!(last["version"], 10, "{last}");
    let script = "import sys, json, deltalake\n\
        out = []\n\
        for v in (10, 13):\n\
        \x20   t = deltalake.DeltaTable(sys.argv[1], version=v)\n\
        \x20   p = t.protocol()\n\
        \x20   out.append({'version': t.version(), 'files': sorted(u.rsplit('/', 1)[1] for u in t.file_uris()),\n\
        \x20               'writer': p.writer_features, 'reader': p.reader_features,\n\
        \x20               'rows': sum(t.get_add_actions(flatten=False).column('num_records').to_pylist())})\n\
        print(json.dumps(out))\n";
    let out = run(Command::new(python()).arg("-c").arg(script).arg(&table));
    let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (i, v) in [10u64, 13].iter().enumerate() {
        let ours = td_json(&["describe", &t, "--version", &v.to_string(), "--json"]);
        assert_eq!(theirs[i]["version"], *v);
        assert_eq!(theirs[i]["rows"], ours["numRecords"], "version {v}: {theirs}");
        assert_eq!(
            theirs[i]["files"].as_array().unwrap().len() as u64,
            ours["numFiles"].as_u64().unwrap(),
            "version {v}"
        );
        assert_eq!(
            theirs[i]["writer"],
            serde_json::json!(["tinydeltaJsonlData", "timestampNtz"]),
            "{theirs}"
        );
        assert_eq!(theirs[i]["reader"], serde_json::json!(["timestampNtz"]), "{theirs}");
    }
    assert_eq!(theirs[1]["rows"], 10);
    // tinydelta itself: every version still reads as the commits say, rows in commit order
    // (a checkpoint keeps the order of the live files).
    for v in 2..=13u64 {
        let ids: Vec<i64> = td(&["read", &t, "--version", &v.to_string()])
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice::<Value>(l).unwrap()["id"].as_i64().unwrap())
            .collect();
        let want: Vec<i64> = (0..(v.min(12) as i64 - 1)).filter(|i| v < 13 || *i != 4).collect();
        assert_eq!(ids, want, "version {v}");
    }
}

/// Another engine's log cleanup leaves later commits and a checkpoint but no version 0: that
/// is still a table, so `create` refuses it (TableExists, exit 2) instead of writing a version
/// 0 that would make the log a hole.
#[test]
fn create_refuses_a_table_whose_early_commits_were_cleaned_up() {
    let t = cleaned_up_before_5();
    let out = crate::support::td(&["create", &t.p(), "id:int"]);
    assert_ne!(out.code, 0, "create over a cleaned-up log: {}", out.text());
    out.stderr_has(&["exists"]);
    assert!(
        !t.log_dir().join(format!("{:020}.json", 0)).exists(),
        "no version 0 written"
    );
    crate::support::td(&["check", &t.p()]).ok();
}

/// `read --as-of` a time before the log's start (after log cleanup) names the first version
/// the log holds and its time, never "version 0".
#[test]
fn as_of_before_a_cleaned_up_logs_start_names_its_first_version() {
    let t = cleaned_up_before_5();
    t.td("read", &["--as-of", "1970-01-01T00:00:00Z"]).code(4).stderr_has(&[
        "(version 5 was committed at ",
        "the commits of versions 0 to 4 were cleaned up from the log",
    ]);
}

/// A table of versions 0-5 with a checkpoint at 5 whose commits 0-4 were removed, as another
/// engine's log cleanup leaves it.
fn cleaned_up_before_5() -> crate::support::TempTable {
    let t = crate::support::TempTable::new(&["id:int"]);
    crate::support::td(&["alter", &t.p(), "set-property", "delta.checkpointInterval=5"]).ok(); // version 1
    for i in 0..4 {
        t.append(format!("{{\"id\":{i}}}\n").as_bytes()); // versions 2..=5
    }
    let cp = t.log_dir().join(format!("{:020}.checkpoint.parquet", 5));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !cp.exists() {
        assert!(std::time::Instant::now() < deadline, "no checkpoint at version 5");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for v in 0..5u64 {
        std::fs::remove_file(t.log_dir().join(format!("{v:020}.json"))).expect("remove a commit");
    }
    t
}

/// A table past 1,000 versions whose private checkpoint was built from a Delta checkpoint
/// (its files' `added_in` is the Delta checkpoint's version, docs/FORMAT.md "Delta
/// checkpoints") is whole for `check`, and with the Delta checkpoint gone, `delete` and
/// `export` still find every file's `add` in the older commits.
#[test]
fn a_private_checkpoint_built_from_a_delta_checkpoint_agrees_with_the_replay() {
    let t = crate::support::TempTable::new(&["id:int"]);
    for i in 0..1001 {
        t.append(format!("{{\"id\":{}}}\n", i % 7).as_bytes());
    }
    t.describe(); // writes the private checkpoint of version 1000
    assert!(
        t.path
            .join("_tinydelta/checkpoints")
            .read_dir()
            .map(|d| d.count())
            .unwrap_or(0)
            > 0,
        "a private checkpoint"
    );
    crate::support::td(&["check", &t.p()]).ok();
    for e in std::fs::read_dir(t.log_dir()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".checkpoint.parquet") || name == "_last_checkpoint" {
            std::fs::remove_file(&p).unwrap();
        }
    }
    crate::support::td(&["delete", &t.p(), "--where", "id = 5"]).ok();
    let rows = t.read();
    assert_eq!(
        rows.iter().filter(|b| **b == b'\n').count(),
        1001 - 143,
        "rows left after the delete"
    );
    crate::support::td(&["check", &t.p()]).ok();
}
