//! Delta tables of other writers with the features tinydelta reads or refuses (docs/FORMAT.md
//! "Tables of other Delta writers"): refusals that name the feature ("unsupported"), in the CLI
//! and in the daemon's log; a log of a checkpoint alone; a version without schema; Spark INT96
//! timestamps; deletion vectors; column mapping. Tables are built by the tests (deltalake,
//! pyarrow, hand-written commits) or copied from `tests/data/delta-tables/` (small public tables
//! of delta-rs's test data, tests/data/README.md) into a temporary folder.

use std::fs;
use std::path::Path;

use crate::support::mount::*;

/// A fixture whose table is a copy of `tests/data/delta-tables/<name>`.
fn copied(name: &str) -> Fixture {
    let f = empty_fixture();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/delta-tables")
        .join(name);
    copy_dir(&src, &f.table);
    f
}

fn copy_dir(src: &Path, dest: &Path) {
    fs::create_dir_all(dest).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dest.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// The mount's default log filter (src/bin/tinydelta-mount.rs), so the test sees what a user's
/// `--log-file` holds without RUST_LOG.
const DEFAULT_LOG: (&str, &str) = ("RUST_LOG", "warn,tinydelta=info,fuser::session=error");

/// A reader feature tinydelta does not implement is refused with "unsupported" and its name,
/// never "corrupt"; the mount lists the refused version's folder, answers EIO for its files,
/// and logs the CLI's sentence once for that version at the default level.
#[test]
fn a_refused_version_is_listed_and_logged_once_with_the_cli_sentence() {
    let f = empty_fixture();
    py(
        r#"
import sys, pyarrow as pa
from deltalake import write_deltalake
write_deltalake(sys.argv[1], pa.table({"x": pa.array([1, 2], pa.int64())}))
"#,
        &f.table,
    );
    fs::write(
        f.table.join("_delta_log/00000000000000000001.json"),
        "{\"commitInfo\":{\"timestamp\":4000000000000,\"operation\":\"SET TBLPROPERTIES\"}}\n\
         {\"protocol\":{\"minReaderVersion\":3,\"minWriterVersion\":7,\"readerFeatures\":[\"catalogManaged\"],\"writerFeatures\":[\"catalogManaged\"]}}\n",
    )
    .unwrap();
    let t = f.t();
    let (code, out, err) = td_any(&["read", &t]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    let sentence = err
        .lines()
        .next()
        .unwrap()
        .strip_prefix("tinydelta: ")
        .unwrap()
        .to_string();
    assert!(
        sentence.contains("unsupported") && sentence.contains("\"catalogManaged\"") && !sentence.contains("corrupt"),
        "{sentence}"
    );
    let m = f.mount_with_env(&[], &[DEFAULT_LOG]);
    let mut names: Vec<String> = fs::read_dir(f.m("v/1"))
        .expect("ls v/1 of a refused version")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["commit.json", "data.jsonl", "parts", "schema.json"]);
    for _ in 0..3 {
        assert_eq!(
            fs::read(f.m("v/1/data.jsonl")).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
    }
    assert_eq!(fs::read(f.m("v/0/data.jsonl")).unwrap(), b"{\"x\":1}\n{\"x\":2}\n");
    let log = m.log_text();
    let want = format!("v/1: {sentence}");
    assert_eq!(log.matches(&want).count(), 1, "once, at warn level:\n{log}");
    assert!(log.lines().any(|l| l.contains("WARN") && l.contains(&want)), "{log}");
}

/// A Databricks DLT table whose version 0 `metaData` has no `schemaString` (copied from
/// delta-rs's test data): version 0 is "not readable: no schema", version 1 reads, and the mount
/// serves version 1.
#[test]
fn a_version_without_schema_is_not_readable_and_later_ones_are() {
    let f = copied("delta-live-table");
    let t = f.t();
    let (code, _, err) = td_any(&["read", &t, "--version", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("version 0 is not readable: no schema") && !err.contains("corrupt"),
        "{err}"
    );
    let (code, out, err) = td_any(&["read", &t, "--version", "1"]);
    assert_eq!((code, out.len()), (0, 0), "{err}");
    let _m = f.mount();
    assert_eq!(fs::read(f.m("latest/data.jsonl")).unwrap(), b"");
    assert!(
        fs::read_to_string(f.m("v/1/schema.json"))
            .unwrap()
            .contains("sherpa_user_id")
    );
    assert_eq!(
        fs::read(f.m("v/0/data.jsonl")).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
}

/// A log that holds a checkpoint alone (every commit cleaned up: PROTOCOL "Checkpoints") is a
/// table at the checkpoint's version, in the CLI and the mount, never "table not found".
#[test]
fn a_log_of_a_checkpoint_alone_reads_at_its_version() {
    let f = empty_fixture();
    py(
        r#"
import sys, pyarrow as pa
from deltalake import write_deltalake, DeltaTable
for i in range(3):
    write_deltalake(sys.argv[1], pa.table({"x": pa.array([i], pa.int64())}), mode="append")
DeltaTable(sys.argv[1]).create_checkpoint()
"#,
        &f.table,
    );
    let log = f.table.join("_delta_log");
    for v in 0..3 {
        fs::remove_file(log.join(format!("{v:020}.json"))).unwrap();
    }
    let _ = fs::remove_file(log.join("_last_checkpoint"));
    let t = f.t();
    let (code, out, err) = td_any(&["read", &t]);
    assert_eq!(code, 0, "{err}");
    let mut rows: Vec<&[u8]> = lines(&out);
    rows.sort();
    assert_eq!(rows, [&b"{\"x\":0}"[..], b"{\"x\":1}", b"{\"x\":2}"]);
    let (code, out, err) = td_any(&["describe", &t]);
    assert_eq!(code, 0, "{err}");
    assert!(
        String::from_utf8_lossy(&out).contains("version: 2"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let _m = f.mount();
    assert_eq!(fs::read_link(f.m("latest")).unwrap().to_string_lossy(), "v/2");
    assert_eq!(lines(&fs::read(f.m("latest/data.jsonl")).unwrap()).len(), 3);
}

/// A Parquet data file and a one-commit log around it, written by pyarrow (for encodings
/// deltalake does not write): `sys.argv[1]` is the table, the script defines `table` (a pyarrow
/// table), `schema` (the Delta schemaString's fields) and optionally `kw` (write options).
const PARQUET_TABLE: &str = r#"
import json, os, sys, pyarrow.parquet as pq
def finish(table, fields, kw={}, config={}, protocol=None):
    root = sys.argv[1]
    os.makedirs(os.path.join(root, "_delta_log"), exist_ok=True)
    name = "part-0.parquet"
    pq.write_table(table, os.path.join(root, name), **kw)
    size = os.path.getsize(os.path.join(root, name))
    proto = protocol or {"minReaderVersion": 1, "minWriterVersion": 2}
    meta = {"id": "t", "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps({"type": "struct", "fields": fields}),
            "partitionColumns": [], "configuration": config, "createdTime": 1}
    add = {"path": name, "partitionValues": {}, "size": size, "modificationTime": 1, "dataChange": True,
           "stats": json.dumps({"numRecords": table.num_rows})}
    with open(os.path.join(root, "_delta_log", "00000000000000000000.json"), "w") as f:
        for a in [{"commitInfo": {"timestamp": 1, "operation": "WRITE"}}, {"protocol": proto},
                  {"metaData": meta}, {"add": add}]:
            f.write(json.dumps(a) + "\n")
"#;

/// Spark's INT96 timestamps are decoded to microseconds without wrapping: 9999-12-31 reads as
/// 9999-12-31 (it read as 1816-03-29 with exit 0), in the CLI and the mount, as DuckDB's
/// delta_scan reads it; a value past year 9999 is refused naming the file and the column, never
/// changed.
#[test]
fn int96_timestamps_read_as_written_and_out_of_range_ones_are_refused() {
    let f = copied("table_with_edge_timestamps");
    let t = f.t();
    let out = f.td(&["read", &t]);
    let mut rows = lines(&out);
    rows.sort();
    let want = [
        &br#"{"BIG_DATE":"9999-12-30T00:00:00.000000Z","NORMAL_DATE":"2022-02-01T00:00:00.000000Z","SOME_VALUE":2}"#[..],
        br#"{"BIG_DATE":"9999-12-31T00:00:00.000000Z","NORMAL_DATE":"2022-01-01T00:00:00.000000Z","SOME_VALUE":1}"#,
    ];
    assert_eq!(rows, want);
    // DuckDB's delta extension reads the same instants.
    let duck = delta_scan(
        &f.table,
        "SELECT strftime(BIG_DATE AT TIME ZONE 'UTC', '%Y-%m-%d') FROM t ORDER BY 1",
    );
    assert_eq!(duck, "9999-12-30\n9999-12-31\n");
    let _m = f.mount();
    let mut mounted = fs::read(f.m("latest/data.jsonl")).unwrap();
    mounted.sort();
    let mut cli = out.clone();
    cli.sort();
    assert_eq!(mounted, cli);
    drop(_m);

    let g = empty_fixture();
    py(
        &format!(
            "{PARQUET_TABLE}\nimport pyarrow as pa\nfinish(pa.table({{\"ts\": pa.array([0, 300000000000000000], pa.timestamp(\"us\"))}}), \
             [{{\"name\": \"ts\", \"type\": \"timestamp\", \"nullable\": True, \"metadata\": {{}}}}], \
             {{\"use_deprecated_int96_timestamps\": True}})"
        ),
        &g.table,
    );
    let (code, out, err) = td_any(&["read", &g.t()]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("part-0.parquet") && err.contains("row 2, column \"ts\"") && err.contains("outside the years"),
        "{err}"
    );
}

/// Z85 (ZeroMQ RFC 32) of `bytes` (a multiple of 4 long), as Delta writes inline DVs and UUIDs.
fn z85(bytes: &[u8]) -> String {
    const A: &[u8; 85] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    let mut out = String::new();
    for c in bytes.chunks(4) {
        let mut v = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        let mut five = [0u8; 5];
        for d in five.iter_mut().rev() {
            *d = A[(v % 85) as usize];
            v /= 85;
        }
        out.push_str(std::str::from_utf8(&five).unwrap());
    }
    out
}

/// A serialized deletion vector of `rows` (PROTOCOL "Deletion Vector Format": the magic number,
/// then the portable 64-bit RoaringBitmap).
fn dv_bytes(rows: &[u64]) -> Vec<u8> {
    let map: roaring::RoaringTreemap = rows.iter().copied().collect();
    let mut b = 1_681_511_377u32.to_le_bytes().to_vec();
    map.serialize_into(&mut b).unwrap();
    b
}

/// The `add` of `path` in commit `v`'s JSON, as a JSON value.
fn add_of(table: &Path, v: u64, path_part: &str) -> serde_json::Value {
    let text = fs::read_to_string(table.join(format!("_delta_log/{v:020}.json"))).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find_map(|a| {
            a.get("add")
                .filter(|x| x["path"].as_str().unwrap().contains(path_part))
                .cloned()
        })
        .unwrap_or_else(|| panic!("no add in version {v}"))
}

/// Deletion vectors written the way Spark writes them (a `u` file at an offset, framed with
/// size and CRC-32; an inline `i` one): their rows are left out by `read`, `describe`, `check
/// --deep`, the mount's `data.jsonl` and `parts/`, as DuckDB's delta_scan reads the table; a
/// damaged DV file is named, never read past; writes are refused.
#[test]
fn deletion_vectors_leave_their_rows_out_everywhere() {
    let f = empty_fixture();
    py(
        r#"
import sys, pyarrow as pa
from deltalake import write_deltalake
write_deltalake(sys.argv[1], pa.table({"id": pa.array(list(range(10)), pa.int64())}))
write_deltalake(sys.argv[1], pa.table({"id": pa.array(list(range(10, 20)), pa.int64())}), mode="append")
"#,
        &f.table,
    );
    let (a0, a1) = (add_of(&f.table, 0, "parquet"), add_of(&f.table, 1, "parquet"));
    // A DV file holding one DV at offset 1 (after the version byte), as Spark writes it.
    let data = dv_bytes(&[0, 9]);
    let uuid = [0x11u8; 16];
    let mut file = vec![1u8];
    file.extend_from_slice(&(data.len() as u32).to_be_bytes());
    file.extend_from_slice(&data);
    file.extend_from_slice(&crc32fast::hash(&data).to_be_bytes());
    let dv_name = "deletion_vector_11111111-1111-1111-1111-111111111111.bin";
    fs::write(f.table.join(dv_name), &file).unwrap();
    let inline = dv_bytes(&[3, 4]);
    let with_dv = |add: &serde_json::Value, dv: serde_json::Value| {
        let mut a = add.clone();
        a["deletionVector"] = dv;
        a
    };
    let remove = |add: &serde_json::Value| {
        serde_json::json!({"remove": {"path": add["path"], "deletionTimestamp": 3, "dataChange": true,
            "extendedFileMetadata": true, "partitionValues": {}, "size": add["size"]}})
    };
    let commit = [
        serde_json::json!({"commitInfo": {"timestamp": 4000000000000i64, "operation": "DELETE"}}),
        serde_json::json!({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}}),
        remove(&a0),
        serde_json::json!({"add": with_dv(&a0, serde_json::json!({"storageType": "u", "pathOrInlineDv": z85(&uuid),
            "offset": 1, "sizeInBytes": data.len(), "cardinality": 2}))}),
        remove(&a1),
        serde_json::json!({"add": with_dv(&a1, serde_json::json!({"storageType": "i", "pathOrInlineDv": z85(&inline),
            "sizeInBytes": inline.len(), "cardinality": 2}))}),
    ];
    let text: String = commit.iter().map(|a| format!("{a}\n")).collect();
    fs::write(f.table.join("_delta_log/00000000000000000002.json"), text).unwrap();

    let t = f.t();
    let ids = |out: &[u8]| {
        let mut v: Vec<i64> = lines(out)
            .iter()
            .map(|l| {
                serde_json::from_slice::<serde_json::Value>(l).unwrap()["id"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        v.sort();
        v
    };
    let want: Vec<i64> = (1..9).chain(10..13).chain(15..20).collect();
    assert_eq!(ids(&f.td(&["read", &t])), want);
    assert_eq!(ids(&f.td(&["read", &t, "--version", "1"])), (0..20).collect::<Vec<_>>());
    let described = String::from_utf8(f.td(&["describe", &t])).unwrap();
    assert!(described.contains("rows:    16"), "{described}");
    f.td(&["check", "--deep", &t]);
    // DuckDB's delta extension reads the same rows.
    assert_eq!(
        delta_scan(&f.table, "SELECT count(*), sum(id) FROM t"),
        format!("16\t{}\n", want.iter().sum::<i64>())
    );
    let m = f.mount();
    assert_eq!(ids(&fs::read(f.m("latest/data.jsonl")).unwrap()), want);
    let mut parts = Vec::new();
    for e in fs::read_dir(f.m("latest/parts")).unwrap() {
        parts.extend(fs::read(e.unwrap().path()).unwrap());
    }
    assert_eq!(ids(&parts), want);
    drop(m);
    // Writes are refused (tinydelta writes no deletion vectors).
    let (code, _, err) = td_any(&["restore", &t, "--version", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("unsupported"), "{err}");

    // A damaged DV file: named, with what is wrong, exit 1, nothing printed.
    let _ = fs::remove_dir_all(f.table.join("_tinydelta"));
    let mut bad = file.clone();
    bad[8] ^= 0x40;
    fs::write(f.table.join(dv_name), &bad).unwrap();
    let (code, out, err) = td_any(&["read", &t]);
    assert_eq!((code, out.len()), (1, 0), "{err}");
    assert!(err.contains(dv_name) && err.contains("CRC-32"), "{err}");
    fs::write(f.table.join(dv_name), &file[..file.len() - 2]).unwrap();
    let (code, _, err) = td_any(&["read", &t]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(dv_name) && err.contains("past the end of the file"),
        "{err}"
    );
}
