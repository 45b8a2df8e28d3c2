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
    // The change feed: versions 0 and 1 insert whole files; version 2 deletes rows through
    // deletion vectors, which the feed (whole files) does not compute: refused naming it, in
    // the CLI and in the mount's changes.jsonl, never an answer without those delete rows.
    let upto1 = f.td(&["changes", &t, "--to-version", "1"]);
    assert_eq!(ids(&upto1), (0..20).collect::<Vec<_>>());
    let (code, out, err) = td_any(&["changes", &t]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("unsupported") && err.contains("deletion vector") && err.contains("version 2"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&out).contains("\"_commit_version\":2"));
    // Vacuum never deletes a DV file, live or retained, nor a data file a DV names.
    let before: Vec<_> = fs::read_dir(&f.table)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let (code, _, err) = td_any(&["vacuum", &t, "--retain", "0s", "--force", "--older-than", "0s"]);
    assert!(code == 0 || err.contains("unsupported"), "{code} {err}");
    assert!(f.table.join(dv_name).is_file());
    for name in before.iter().filter(|n| n.to_string_lossy().ends_with(".parquet")) {
        assert!(f.table.join(name).is_file(), "{name:?}");
    }
    assert_eq!(ids(&f.td(&["read", &t])), want);
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

/// A table with column mapping (PROTOCOL "Column Mapping") written the way Spark writes one:
/// Parquet columns named by physical names (and carrying field ids), partition values and
/// statistics keyed by physical names, a column renamed in version 1 and one dropped (another
/// added) in version 2. `mode` is `name` or `id`; in `id` the second file's columns have other
/// names, so only their field ids say which is which.
fn column_mapped_table(table: &Path, mode: &str) {
    let script = r#"
import sys, json, os, pyarrow as pa, pyarrow.parquet as pq
t, mode = sys.argv[1], sys.argv[2]
os.makedirs(t + "/_delta_log")
def md(i, p): return {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": p}
def f(name, typ, i, p): return {"name": name, "type": typ, "nullable": True, "metadata": md(i, p)}
s_type = {"type": "struct", "fields": [f("x", "long", 4, "col-d")]}
def schema(cols): return json.dumps({"type": "struct", "fields": cols})
v0 = [f("part", "string", 5, "col-p"), f("id", "long", 1, "col-a"), f("name", "string", 2, "col-b"), f("s", s_type, 3, "col-c")]
v1 = [f("part", "string", 5, "col-p"), f("id", "long", 1, "col-a"), f("title", "string", 2, "col-b"), f("s", s_type, 3, "col-c")]
v2 = [f("part", "string", 5, "col-p"), f("id", "long", 1, "col-a"), f("title", "string", 2, "col-b"), f("extra", "long", 6, "col-e")]
def fid(i): return {b"PARQUET:field_id": str(i).encode()}
def write(path, names, ids, sub, rows):
    d = pa.struct([pa.field(sub, pa.int64(), metadata=fid(4))])
    sch = pa.schema([pa.field(names[0], pa.int64(), metadata=fid(ids[0])), pa.field(names[1], pa.string(), metadata=fid(ids[1])), pa.field(names[2], d, metadata=fid(ids[2]))])
    tab = pa.table([pa.array([r[0] for r in rows], pa.int64()), pa.array([r[1] for r in rows]), pa.array([{sub: r[2]} for r in rows], d)], schema=sch)
    os.makedirs(os.path.dirname(t + "/" + path), exist_ok=True)
    pq.write_table(tab, t + "/" + path)
    return os.path.getsize(t + "/" + path)
def add(path, size, part, rows):
    ids = [r[0] for r in rows]
    st = {"numRecords": len(rows), "minValues": {"col-a": min(ids)}, "maxValues": {"col-a": max(ids)}, "nullCount": {"col-a": 0}}
    return {"add": {"path": path, "partitionValues": {"col-p": part}, "size": size, "modificationTime": 1700000000000, "dataChange": True, "stats": json.dumps(st)}}
def meta(cols): return {"metaData": {"id": "cm", "format": {"provider": "parquet", "options": {}}, "schemaString": schema(cols), "partitionColumns": ["part"], "configuration": {"delta.columnMapping.mode": mode, "delta.columnMapping.maxColumnId": "6"}, "createdTime": 1700000000000}}
def commit(v, actions):
    with open(f"{t}/_delta_log/{v:020}.json", "w") as fh:
        fh.write(json.dumps({"commitInfo": {"timestamp": 1700000000000 + v * 1000, "operation": "WRITE"}}) + "\n")
        for a in actions: fh.write(json.dumps(a) + "\n")
r0 = [(1, "a", 10), (2, "b", 20), (3, None, 30)]
# In mode id the second file's columns have other names: only their field ids say which is which.
names1 = ["col-a", "col-b", "col-c"] if mode == "name" else ["other-a", "other-b", "other-c"]
r1 = [(40, "d", 40), (50, "e", None)]
p0 = "Ab/part-0.parquet"; p1 = "Cd/part-1.parquet"
commit(0, [{"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}, meta(v0), add(p0, write(p0, ["col-a", "col-b", "col-c"], [1, 2, 3], "col-d", r0), "A", r0)])
commit(1, [meta(v1), add(p1, write(p1, names1, [1, 2, 3], "col-d" if mode == "name" else "other-d", r1), "B", r1)])
commit(2, [meta(v2)])
"#;
    let py = python(&["pyarrow"]);
    let out = std::process::Command::new(&py)
        .arg("-c")
        .arg(script)
        .arg(table)
        .arg(mode)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Rows of `out` sorted, each a line.
fn sorted_lines(out: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = lines(out)
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    v.sort();
    v
}

/// Column mapping modes `name` and `id`: data files, partition values and statistics by
/// physical name (or field id), logical names in every output (`read`, `describe`, the mount's
/// `data.jsonl` and `schema.json`, `export`); a renamed column keeps its values, a dropped
/// one is gone; DuckDB's delta_scan reads the same rows; `read --where` skips by the physical
/// names' statistics; a physical name the file lacks in a NOT NULL column fails naming the file.
#[test]
fn column_mapping_reads_physical_names_and_shows_logical_ones() {
    let f = empty_fixture();
    column_mapped_table(&f.table, "name");
    let t = f.t();
    let v0 = [
        r#"{"part":"A","id":1,"name":"a","s":{"x":10}}"#,
        r#"{"part":"A","id":2,"name":"b","s":{"x":20}}"#,
        r#"{"part":"A","id":3,"name":null,"s":{"x":30}}"#,
    ];
    assert_eq!(sorted_lines(&f.td(&["read", &t, "--version", "0"])), v0);
    let v1 = [
        r#"{"part":"A","id":1,"title":"a","s":{"x":10}}"#,
        r#"{"part":"A","id":2,"title":"b","s":{"x":20}}"#,
        r#"{"part":"A","id":3,"title":null,"s":{"x":30}}"#,
        r#"{"part":"B","id":40,"title":"d","s":{"x":40}}"#,
        r#"{"part":"B","id":50,"title":"e","s":{"x":null}}"#,
    ];
    assert_eq!(sorted_lines(&f.td(&["read", &t, "--version", "1"])), v1);
    let v2 = [
        r#"{"part":"A","id":1,"title":"a","extra":null}"#,
        r#"{"part":"A","id":2,"title":"b","extra":null}"#,
        r#"{"part":"A","id":3,"title":null,"extra":null}"#,
        r#"{"part":"B","id":40,"title":"d","extra":null}"#,
        r#"{"part":"B","id":50,"title":"e","extra":null}"#,
    ];
    assert_eq!(sorted_lines(&f.td(&["read", &t])), v2);
    // DuckDB's delta extension reads the newest version alike.
    assert_eq!(
        delta_scan(&f.table, "SELECT part, id, title, extra FROM t ORDER BY id"),
        "A\t1\ta\tNULL\nA\t2\tb\tNULL\nA\t3\tNULL\tNULL\nB\t40\td\tNULL\nB\t50\te\tNULL\n"
    );
    let described = String::from_utf8(f.td(&["describe", &t])).unwrap();
    assert!(
        described.contains("title") && !described.contains("col-b"),
        "{described}"
    );
    // Data skipping reads the statistics by physical name: one file of two is read.
    let (code, out, err) = td_any(&["read", &t, "--where", "id > 45", "--explain"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sorted_lines(&out), [r#"{"part":"B","id":50,"title":"e","extra":null}"#]);
    assert!(err.contains("1 skipped by statistics"), "{err}");
    // The mount serves every version under its logical names.
    let m = f.mount();
    assert_eq!(sorted_lines(&fs::read(f.m("v/1/data.jsonl")).unwrap()), v1);
    assert_eq!(sorted_lines(&fs::read(f.m("latest/data.jsonl")).unwrap()), v2);
    let schema = fs::read_to_string(f.m("latest/schema.json")).unwrap();
    assert!(schema.contains("\"title\"") && !schema.contains("col-"), "{schema}");
    drop(m);
    // Export writes the logical names and no column mapping: DuckDB reads DEST alike.
    let dest = f.dir.path().join("dest");
    f.td(&["export", &t, dest.to_str().unwrap()]);
    assert_eq!(sorted_lines(&f.td(&["read", dest.to_str().unwrap()])), v2);
    assert_eq!(
        delta_scan(&dest, "SELECT part, id, title FROM t ORDER BY id"),
        "A\t1\ta\nA\t2\tb\nA\t3\tNULL\nB\t40\td\nB\t50\te\n"
    );
    // Writes are refused.
    let (code, _, err) = td_any(&["restore", &t, "--version", "0"]);
    assert_eq!(code, 1, "{err}");

    // Mode id: columns are found by field id, whatever their names in the file (DuckDB reads
    // them by name and gives nulls for the second file, so it is compared on version 0 only).
    let g = empty_fixture();
    column_mapped_table(&g.table, "id");
    let t = g.t();
    assert_eq!(sorted_lines(&g.td(&["read", &t, "--version", "0"])), v0);
    assert_eq!(sorted_lines(&g.td(&["read", &t, "--version", "1"])), v1);
    assert_eq!(sorted_lines(&g.td(&["read", &t])), v2);
    let m = g.mount();
    assert_eq!(sorted_lines(&fs::read(g.m("v/1/data.jsonl")).unwrap()), v1);
    drop(m);

    // A NOT NULL column whose physical name the file lacks: named, with the file.
    let h = empty_fixture();
    column_mapped_table(&h.table, "name");
    let log = h.table.join("_delta_log/00000000000000000002.json");
    let text = fs::read_to_string(&log).unwrap().replace(
        r#"\"name\": \"extra\", \"type\": \"long\", \"nullable\": true"#,
        r#"\"name\": \"extra\", \"type\": \"long\", \"nullable\": false"#,
    );
    assert!(text.contains(r#"\"nullable\": false"#), "{text}");
    fs::write(&log, text).unwrap();
    let (code, out, err) = td_any(&["read", &h.t()]);
    assert_eq!((code, out.len()), (1, 0), "{err}");
    assert!(
        err.contains("part-0.parquet") && err.contains("extra") && err.contains("version 0 added"),
        "{err}"
    );
    // A mode tinydelta does not know is refused as unsupported, naming it.
    let text = fs::read_to_string(&log).unwrap().replace(
        r#""delta.columnMapping.mode": "name""#,
        r#""delta.columnMapping.mode": "other""#,
    );
    fs::write(&log, text).unwrap();
    let (code, _, err) = td_any(&["read", &h.t()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("unsupported") && err.contains("\"other\""), "{err}");
}

/// Copies `tests/data/delta-tables/<name>` into the fixture's table folder.
fn copy_table(f: &Fixture, name: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/delta-tables")
        .join(name);
    copy_dir(&src, &f.table);
}

/// Run the pyarrow `script` with `sys.argv[1]` = `table`.
fn pyarrow(script: &str, table: &Path) {
    let out = std::process::Command::new(python(&["pyarrow"]))
        .arg("-c")
        .arg(script)
        .arg(table)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Type widening (PROTOCOL "Type Widening"): a file written before the widening is read in the
/// type the schema declares now (byte -> long, float -> double, date -> timestamp_ntz, decimal
/// precision and scale up, integer -> double), in the CLI and the mount, as DuckDB reads it.
#[test]
fn type_widening_reads_old_files_in_the_new_types() {
    let f = empty_fixture();
    pyarrow(
        r#"
import sys, json, os, datetime, decimal, pyarrow as pa, pyarrow.parquet as pq
t = sys.argv[1]
os.makedirs(t + "/_delta_log")
def f(name, typ): return {"name": name, "type": typ, "nullable": True, "metadata": {}}
def meta(cols): return {"metaData": {"id": "tw", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps({"type": "struct", "fields": cols}), "partitionColumns": [], "configuration": {"delta.enableTypeWidening": "true"}, "createdTime": 1700000000000}}
def write(name, tab):
    pq.write_table(tab, f"{t}/{name}")
    return {"add": {"path": name, "partitionValues": {}, "size": os.path.getsize(f"{t}/{name}"), "modificationTime": 1700000000000, "dataChange": True, "stats": json.dumps({"numRecords": tab.num_rows})}}
def commit(v, actions):
    with open(f"{t}/_delta_log/{v:020}.json", "w") as fh:
        fh.write(json.dumps({"commitInfo": {"timestamp": 1700000000000 + v * 1000, "operation": "WRITE"}}) + "\n")
        for a in actions: fh.write(json.dumps(a) + "\n")
t0 = pa.table({"a": pa.array([1, -2], pa.int8()), "f": pa.array([1.1, 2.5], pa.float32()), "d": pa.array([datetime.date(2024, 1, 2), None], pa.date32()),
               "n": pa.array([decimal.Decimal("1.23"), decimal.Decimal("-4.50")], pa.decimal128(5, 2)), "e": pa.array([7, 8], pa.int32())})
commit(0, [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening", "timestampNtz"], "writerFeatures": ["typeWidening", "timestampNtz"]}},
           meta([f("a", "byte"), f("f", "float"), f("d", "date"), f("n", "decimal(5,2)"), f("e", "integer")]), write("part-0.parquet", t0)])
t1 = pa.table({"a": pa.array([3000000000], pa.int64()), "f": pa.array([0.1], pa.float64()), "d": pa.array([datetime.datetime(2024, 5, 6, 7, 8, 9)], pa.timestamp("us")),
               "n": pa.array([decimal.Decimal("12345.6789")], pa.decimal128(10, 4)), "e": pa.array([0.5], pa.float64())})
commit(1, [meta([f("a", "long"), f("f", "double"), f("d", "timestamp_ntz"), f("n", "decimal(10,4)"), f("e", "double")]), write("part-1.parquet", t1)])
"#,
        &f.table,
    );
    let t = f.t();
    assert_eq!(
        sorted_lines(&f.td(&["read", &t, "--version", "0"])),
        [
            r#"{"a":-2,"f":2.5,"d":null,"n":-4.50,"e":8}"#,
            r#"{"a":1,"f":1.1,"d":"2024-01-02","n":1.23,"e":7}"#,
        ]
    );
    let v1 = [
        r#"{"a":-2,"f":2.5,"d":null,"n":-4.5000,"e":8.0}"#,
        r#"{"a":1,"f":1.100000023841858,"d":"2024-01-02T00:00:00.000000","n":1.2300,"e":7.0}"#,
        r#"{"a":3000000000,"f":0.1,"d":"2024-05-06T07:08:09.000000","n":12345.6789,"e":0.5}"#,
    ];
    assert_eq!(sorted_lines(&f.td(&["read", &t])), v1);
    assert_eq!(
        delta_scan(&f.table, "SELECT a, f, d, n, e FROM t ORDER BY a"),
        "-2\t2.5\tNULL\t-4.5000\t8.0\n1\t1.100000023841858\t2024-01-02 00:00:00\t1.2300\t7.0\n\
         3000000000\t0.1\t2024-05-06 07:08:09\t12345.6789\t0.5\n"
    );
    let m = f.mount();
    assert_eq!(sorted_lines(&fs::read(f.m("latest/data.jsonl")).unwrap()), v1);
    drop(m);
}

/// V2 checkpoints (PROTOCOL "V2 Checkpoint Table Feature"): a Databricks table whose
/// checkpoints are UUID-named JSON manifests with Parquet sidecars in `_delta_log/_sidecars/`
/// reads from its checkpoint once the commits before it are cleaned up, with the rows DuckDB
/// reads; a sidecar of the wrong size or named outside `_sidecars/` fails naming it.
#[test]
fn v2_checkpoints_with_sidecars_are_read() {
    let f = empty_fixture();
    copy_table(&f, "checkpoint-v2-table");
    let t = f.t();
    let whole = sorted_lines(&f.td(&["read", &t]));
    assert_eq!(whole.len(), 44);
    let ids: i64 = whole
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .sum();
    assert_eq!(
        delta_scan(&f.table, "SELECT count(*), sum(id) FROM t"),
        format!("44\t{ids}\n")
    );
    // Commits 0-7 cleaned up: versions 8 and 9 read from the checkpoint of version 8.
    for v in 0..8 {
        fs::remove_file(f.table.join(format!("_delta_log/{v:020}.json"))).unwrap();
    }
    let _ = fs::remove_dir_all(f.table.join("_tinydelta"));
    assert_eq!(sorted_lines(&f.td(&["read", &t])), whole);
    let described = String::from_utf8(f.td(&["describe", &t])).unwrap();
    assert!(described.contains("readable versions: 8-9"), "{described}");
    let m = f.mount();
    assert_eq!(sorted_lines(&fs::read(f.m("v/9/data.jsonl")).unwrap()), whole);
    drop(m);
    // Damage: the sidecar's size, and a sidecar path outside _delta_log/_sidecars/.
    let log = f.table.join("_delta_log");
    let manifest = fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.to_string_lossy().contains("00000000000000000008.checkpoint.") && p.to_string_lossy().ends_with(".json")
        })
        .unwrap();
    let text = fs::read_to_string(&manifest).unwrap();
    let sidecar: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|a| a.get("sidecar").is_some())
        .unwrap();
    let (name, size) = (
        sidecar["sidecar"]["path"].as_str().unwrap(),
        sidecar["sidecar"]["sizeInBytes"].as_i64().unwrap(),
    );
    fs::write(
        &manifest,
        text.replace(
            &format!("\"sizeInBytes\":{size}"),
            &format!("\"sizeInBytes\":{}", size + 1),
        ),
    )
    .unwrap();
    let (code, out, err) = td_any(&["read", &t]);
    assert_eq!((code, out.len()), (1, 0), "{err}");
    assert!(
        err.contains(name) && err.contains("version 8") && err.contains("bytes"),
        "{err}"
    );
    fs::write(
        &manifest,
        text.replace(&format!("\"path\":\"{name}\""), "\"path\":\"../../part-x.parquet\""),
    )
    .unwrap();
    let (code, out, err) = td_any(&["read", &t]);
    assert_eq!((code, out.len()), (1, 0), "{err}");
    assert!(
        err.contains("part-x.parquet") && err.contains("_sidecars") && err.contains("version 8"),
        "{err}"
    );
}

/// Variant (PROTOCOL "Variant Data Type"): Spark's Parquet variants (top level, in arrays,
/// structs and maps) are decoded to JSON, as DuckDB reads them; a cut variant value fails
/// naming the file, never a panic or a guess.
#[test]
fn parquet_variants_read_as_json() {
    let f = empty_fixture();
    copy_table(&f, "spark-variant-checkpoint");
    let t = f.t();
    let rows: Vec<serde_json::Value> = lines(&f.td(&["read", &t]))
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let sum: i64 = rows.iter().map(|r| r["id"].as_i64().unwrap()).sum();
    for r in &rows {
        assert_eq!(r["v"]["key"], r["id"], "{r}");
        assert_eq!(r["struct_of_variants"]["v"]["key"], r["id"], "{r}");
        assert_eq!(r["array_of_variants"][0]["key"], r["id"], "{r}");
    }
    assert_eq!(
        delta_scan(&f.table, "SELECT count(*), sum(id) FROM t"),
        format!("{}\t{sum}\n", rows.len())
    );
    let m = f.mount();
    assert_eq!(lines(&fs::read(f.m("latest/data.jsonl")).unwrap()).len(), rows.len());
    drop(m);

    // Hand-written variants: an int8, a short string, an object; then a cut one.
    let g = empty_fixture();
    let script = r#"
import sys, json, os, pyarrow as pa, pyarrow.parquet as pq
t = sys.argv[1]; cut = sys.argv[2] == "cut"; shredded = sys.argv[2] == "shredded"
os.makedirs(t + "/_delta_log")
empty = bytes([1, 0, 0])
keyed = bytes([1, 1, 0, 1]) + b"k"
vals = [(empty, bytes([12, 42])), (empty, bytes([9]) + b"hi"), (keyed, bytes([2, 1, 0, 0, 2, 12, 7]))]
if cut: vals.append((empty, bytes([12])))
st = pa.struct([pa.field("metadata", pa.binary(), nullable=False), pa.field("value", pa.binary(), nullable=False)])
rows = [{"metadata": m, "value": v} for m, v in vals]
if shredded:
    st = pa.struct([pa.field("metadata", pa.binary(), nullable=False), pa.field("value", pa.binary()), pa.field("typed_value", pa.int64())])
    rows = [dict(r, typed_value=None) for r in rows]
tab = pa.table({"id": pa.array(range(len(vals)), pa.int64()), "v": pa.array(rows, st)})
pq.write_table(tab, t + "/part-0.parquet")
schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}, {"name": "v", "type": "variant", "nullable": True, "metadata": {}}]}
with open(t + "/_delta_log/00000000000000000000.json", "w") as fh:
    for a in [{"commitInfo": {"timestamp": 1700000000000, "operation": "WRITE"}},
              {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["variantType"], "writerFeatures": ["variantType"]}},
              {"metaData": {"id": "v", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {}}},
              {"add": {"path": "part-0.parquet", "partitionValues": {}, "size": os.path.getsize(t + "/part-0.parquet"), "modificationTime": 1700000000000, "dataChange": True}}]:
        fh.write(json.dumps(a) + "\n")
"#;
    let run = |table: &Path, how: &str| {
        let out = std::process::Command::new(python(&["pyarrow"]))
            .args(["-c", script])
            .arg(table)
            .arg(how)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run(&g.table, "whole");
    assert_eq!(
        sorted_lines(&g.td(&["read", &g.t()])),
        [r#"{"id":0,"v":42}"#, r#"{"id":1,"v":"hi"}"#, r#"{"id":2,"v":{"k":7}}"#]
    );
    let h = empty_fixture();
    run(&h.table, "cut");
    let (code, out, err) = td_any(&["read", &h.t()]);
    assert_eq!((code, out.len()), (1, 0), "{err}");
    assert!(
        err.contains("part-0.parquet")
            && err.contains("variant")
            && err.contains("row 4")
            && err.contains("version 0 added"),
        "{err}"
    );
    // Shredded variants (a typed_value field) are refused naming the column.
    let k = empty_fixture();
    run(&k.table, "shredded");
    let (code, out, err) = td_any(&["read", &k.t()]);
    assert_eq!((code, out.len()), (1, 0), "{err}");
    assert!(
        err.contains("unsupported") && err.contains("shredded") && err.contains("\"v\""),
        "{err}"
    );
    // A table with the variantShredding-preview feature whose files hold no shredded values
    // reads.
    let p = empty_fixture();
    copy_table(&p, "spark-shredded-variant-preview-delta");
    let rows: Vec<serde_json::Value> = lines(&p.td(&["read", &p.t()]))
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert!(!rows.is_empty());
    for r in &rows {
        assert_eq!(r["v"]["key"], r["id"], "{r}");
    }
}

/// tinydelta writes no physical names: `alter` refuses to turn column mapping on, and a table
/// whose `delta.columnMapping.mode` was set without physical names (column mapping not in
/// force at reader version 1) still reads by its column names.
#[test]
fn column_mapping_is_not_written_and_a_mode_without_physical_names_reads_by_name() {
    let f = empty_fixture();
    let t = f.t();
    f.td(&["create", &t, "id:int", "s:str"]);
    let (code, _, err) = td_any(&["alter", &t, "set-property", "delta.columnMapping.mode=name"]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("unsupported: writing a table with column mapping"),
        "{err}"
    );
    let _ = std::process::Command::new(TD_BIN)
        .args(["append", &t])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"{\"id\":1,\"s\":\"a\"}\n")?;
            c.wait()
        })
        .unwrap();
    // Another writer's commit sets the property (reader version 1: not in force).
    let text = fs::read_to_string(f.table.join("_delta_log/00000000000000000000.json")).unwrap();
    let mut meta: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|a| a.get("metaData").is_some())
        .unwrap();
    meta["metaData"]["configuration"]["delta.columnMapping.mode"] = "name".into();
    let info = serde_json::json!({"commitInfo": {"timestamp": 4000000000000i64, "operation": "SET TBLPROPERTIES"}});
    fs::write(
        f.table.join("_delta_log/00000000000000000002.json"),
        format!("{info}\n{meta}\n"),
    )
    .unwrap();
    assert_eq!(sorted_lines(&f.td(&["read", &t])), [r#"{"id":1,"s":"a"}"#]);
}

/// Sorted version names listed in `dir` (`v/`).
fn listed_versions(dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = fs::read_dir(dir)
        .expect("list v/")
        .map(|e| {
            e.expect("entry")
                .file_name()
                .to_string_lossy()
                .parse()
                .expect("a version name")
        })
        .collect();
    v.sort();
    v
}

/// Another engine's log cleanup (deltalake and Spark remove commits older than
/// `delta.logRetentionDuration` once a checkpoint covers them) while the mount runs, past the
/// version the mount last saw: `v/` lists from the checkpoint on and older versions are ENOENT,
/// `latest` and `incoming/` go on, and `changes.jsonl` fails with EIO rather than skip the lost
/// versions' changes (docs/MOUNT.md "Versions another engine cleaned up"). The CLI names the
/// versions the log holds.
#[test]
fn a_log_cleaned_up_past_what_the_mount_saw_keeps_latest_and_stops_the_feed() {
    let f = Fixture::empty(&["id:int!"]);
    f.td(&["alter", &f.t(), "set-property", "delta.checkpointInterval=5"]); // version 1
    let append = |id: u64| {
        crate::support::td_in(&["append", &f.t()], format!("{{\"id\":{id}}}\n").as_bytes()).ok();
    };
    for id in 1..=3 {
        append(id); // versions 2..=4
    }
    let _m = f.mount_with(&["--auto-compact-min-files", "1000000"]);
    assert_eq!(listed_versions(&f.m("v")), vec![0, 1, 2, 3, 4]);
    let feed = fs::read(f.m("changes.jsonl")).expect("read changes.jsonl");
    assert_eq!(feed.iter().filter(|b| **b == b'\n').count(), 3, "three inserts");
    for id in 4..=9 {
        append(id); // versions 5..=10; Delta checkpoints at 5 and 10
    }
    let log = f.table.join("_delta_log");
    let checkpoint = log.join(format!("{:020}.checkpoint.parquet", 10));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !checkpoint.exists() {
        assert!(std::time::Instant::now() < deadline, "no checkpoint at version 10");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The cleanup: every commit (and checksum) before the checkpoint's version.
    for v in 0..10u64 {
        for ext in ["json", "crc"] {
            let _ = fs::remove_file(log.join(format!("{v:020}.{ext}")));
        }
    }
    assert_eq!(listed_versions(&f.m("v")), vec![10]);
    let e = fs::metadata(f.m("v/3")).expect_err("version 3 was cleaned up");
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    let mut ids: Vec<i64> = crate::support::ids(&fs::read(f.m("latest/data.jsonl")).expect("read latest"));
    ids.sort();
    assert_eq!(ids, (1..=9).collect::<Vec<i64>>());
    fs::write(f.m("incoming/more.jsonl"), b"{\"id\":10}\n").expect("commit through incoming/");
    assert_eq!(listed_versions(&f.m("v")), vec![10, 11]);
    assert_eq!(
        crate::support::ids(&fs::read(f.m("v/11/data.jsonl")).expect("read v/11")).len(),
        10
    );
    // The feed had indexed through version 4; versions 5 to 9 are gone, so it cannot go on.
    let e = fs::read(f.m("changes.jsonl")).expect_err("the feed stops at the cleaned-up versions");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let cli = crate::support::td(&["read", &f.t(), "--version", "3"]).code(4);
    cli.stderr_has(&["version 3 not found", "the log holds versions 10 to 11", "cleaned up"]);
    // History lists the log's first version too: its commit is still there beside the checkpoint.
    let h = crate::support::td(&["history", &f.t(), "--json"]).ok().json();
    let versions: Vec<u64> = h
        .as_array()
        .expect("array")
        .iter()
        .map(|e| e["version"].as_u64().expect("version"))
        .collect();
    assert_eq!(&versions[..2], &[10, 11], "{h}");
    assert_eq!(h[0]["rows"], 1, "{h}");
    assert_eq!(h[0]["tableRows"], 9, "{h}");
    crate::support::td(&["changes", &f.t(), "--from-version", "3"])
        .code(4)
        .stderr_has(&["the log holds versions 10 to"]);
    let cli = crate::support::td(&["changes", &f.t()]).ok();
    assert!(
        cli.text().contains("\"id\":10"),
        "the CLI's feed starts at the log's start: {}",
        cli.text()
    );
}
