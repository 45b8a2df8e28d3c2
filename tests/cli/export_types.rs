//! `tinydelta export` of every column type (docs/EXPORT.md "Table"): a table with structs in
//! arrays, arrays and maps in structs, maps of structs, decimals at their limits, binary,
//! `timestamp_ntz` and `json` values of every shape, with nulls at each level, read back by
//! real Delta readers (deltalake, polars, DuckDB's `delta_scan`) with the same values and types
//! for every row, DEST's statistics checked against the rows, and `tinydelta read DEST` giving
//! the source's rows byte for byte.
//!
//! The readers' values are printed in tinydelta's canonical JSON by
//! `scripts/export_types_check.py` (decimals as exact text, binary as base64, timestamps in
//! UTC with microseconds), so every comparison is of bytes.

use serde_json::Value;

use crate::export::{delta_python, dest_commit, export, py_with, python};
use crate::support::*;

/// Every type, nested: a struct in an array, an array, a map and a struct in a struct, a map of
/// structs holding arrays, arrays of arrays, json at the top and inside a struct.
const SCHEMA: &[&str] = &[
    "id:int!",
    "d0:decimal(38,0)",
    "d38:decimal(38,38)",
    "d:decimal(10,2)!",
    "b:binary",
    "n:timestamp_ntz",
    "t:timestamp",
    "f:float",
    "ok:bool",
    "day:date",
    "arr:array<struct<x:int,y:str!>>",
    "s:struct<tags:array<str>,m:map<str,decimal(5,1)>,ts:timestamp,inner:struct<k:date,v:decimal(38,38),n:timestamp_ntz>>",
    "m:map<str,struct<a:int!,b:array<int!>>!>",
    "bins:array<array<binary>>",
    "j:json",
    "sj:struct<j:json,label:str>",
];

/// The rows, in canonical form already (timestamps with six fraction digits, decimals with
/// their scale), so `tinydelta read` prints them as written. `{J}` stands for the json values.
fn rows() -> Vec<String> {
    let max38 = "9".repeat(38);
    let tiny = format!("0.{}1", "0".repeat(37));
    let top = format!("0.{max38}");
    let zero38 = format!("0.{}", "0".repeat(38));
    vec![
        // Everything present, at the positive limits.
        format!(
            r#"{{"id":1,"d0":{max38},"d38":{top},"d":99999999.99,"b":"AAH/","n":"2024-01-02T03:04:05.123456","t":"2024-01-02T03:04:05.123456Z","f":2.5,"ok":true,"day":"2024-02-29","arr":[{{"x":1,"y":"a"}},null,{{"x":null,"y":"é"}}],"s":{{"tags":["p",null,"q"],"m":{{"k":1.5,"z":null,"neg":-9999.9}},"ts":"1970-01-01T00:00:00.000000Z","inner":{{"k":"0001-01-01","v":{tiny},"n":"9999-12-31T23:59:59.999999"}}}},"m":{{"q":{{"a":1,"b":[1,2]}},"r":{{"a":-5,"b":null}}}},"bins":[["AA==",null],[],null],"j":{{"a":[1,2.50,"x",{{"deep":[null,true]}}],"b":null,"n":-0.0e5}},"sj":{{"j":[1,"two",{{"3":4}}],"label":"x"}}}}"#
        ),
        // The negative limits, empty containers.
        format!(
            r#"{{"id":2,"d0":-{max38},"d38":-{tiny},"d":-99999999.99,"b":"","n":"1970-01-01T00:00:00.000000","t":"1969-12-31T23:59:59.999999Z","f":-0.5,"ok":false,"day":"1970-01-01","arr":[],"s":{{"tags":[],"m":{{}},"ts":null,"inner":null}},"m":{{}},"bins":[],"j":"a string","sj":{{"j":null,"label":null}}}}"#
        ),
        // Zeros; nulls one level down.
        format!(
            r#"{{"id":3,"d0":0,"d38":{zero38},"d":0.00,"b":null,"n":null,"t":null,"f":0.0,"ok":null,"day":null,"arr":[null],"s":{{"tags":null,"m":null,"ts":null,"inner":{{"k":null,"v":null,"n":null}}}},"m":{{"only":{{"a":0,"b":[]}}}},"bins":[[null]],"j":12345678901234567890123.5e-3,"sj":null}}"#
        ),
        // Every nullable column null.
        r#"{"id":4,"d0":null,"d38":null,"d":1.00,"b":null,"n":null,"t":null,"f":null,"ok":null,"day":null,"arr":null,"s":null,"m":null,"bins":null,"j":null,"sj":null}"#.to_string(),
        // json literals and an empty object and array.
        r#"{"id":5,"d0":1,"d38":null,"d":-0.01,"b":"/w==","n":null,"t":null,"f":null,"ok":null,"day":null,"arr":null,"s":null,"m":null,"bins":null,"j":[{},[],true,false,null],"sj":{"j":{},"label":"\u0001\"q\""}}"#.to_string(),
    ]
}

/// The source table of [`SCHEMA`] holding [`rows`].
fn source() -> TempTable {
    let src = TempTable::new(SCHEMA);
    let text: String = rows().iter().map(|r| format!("{r}\n")).collect();
    src.append(text.as_bytes());
    src
}

/// The source's `schemaString` (Delta types: `variant` for json) in a file, for the script.
fn schema_file(src: &TempTable, dir: &std::path::Path) -> String {
    let meta = src
        .commit(0)
        .into_iter()
        .find_map(|a| a.get("metaData").cloned())
        .expect("metaData in version 0");
    let path = dir.join("schema.json");
    std::fs::write(&path, meta["schemaString"].as_str().unwrap()).unwrap();
    path.display().to_string()
}

fn check(interpreter: &std::path::Path, reader: &str, dest: &std::path::Path, schema: &str) -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/export_types_check.py");
    let out = py_with(
        interpreter,
        &[script.to_str().unwrap(), reader, dest.to_str().unwrap(), schema],
        b"",
    );
    serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{reader}: the script prints JSON: {e}"))
}

#[test]
fn every_type_reads_back_in_deltalake_polars_and_duckdb_with_its_statistics() {
    let src = source();
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    export(&src, &dest, &[]).ok();
    let want: Vec<String> = lines(&src.read());
    assert_eq!(want.len(), 5);
    let schema = schema_file(&src, tmp.path());

    // DEST's protocol and schema: timestamp_ntz kept (reader 3 / writer 7, timestampNtz), json a
    // string.
    let v0 = dest_commit(&dest, 0);
    let protocol = v0.iter().find_map(|a| a.get("protocol")).expect("protocol");
    assert_eq!(protocol["minReaderVersion"], 3);
    assert_eq!(protocol["readerFeatures"], serde_json::json!(["timestampNtz"]));
    let meta = v0.iter().find_map(|a| a.get("metaData")).expect("metaData");
    let src_schema = std::fs::read_to_string(&schema).unwrap();
    assert_eq!(
        meta["schemaString"].as_str().unwrap(),
        src_schema.replace("\"variant\"", "\"string\""),
        "DEST's schema is the source's with json as string"
    );

    let dl = check(&python(), "deltalake", &dest, &schema);
    let pl = check(&python(), "polars", &dest, &schema);
    let dk = check(&delta_python(), "duckdb", &dest, &schema);
    for (name, got) in [("deltalake", &dl), ("polars", &pl), ("DuckDB delta_scan", &dk)] {
        let rows: Vec<String> = serde_json::from_value(got["rows"].clone()).unwrap();
        assert_eq!(rows.len(), want.len(), "{name}: rows");
        for (w, g) in want.iter().zip(&rows) {
            assert_eq!(
                g, w,
                "{name} reads a row of DEST differently from tinydelta read of the source"
            );
        }
    }
    // The readers' types.
    let t = |v: &Value, c: &str| v["types"][c].as_str().unwrap().to_string();
    assert_eq!(t(&dl, "d38"), "decimal128(38, 38)");
    assert_eq!(t(&dl, "b"), "binary");
    assert_eq!(t(&dl, "n"), "timestamp[us]");
    assert_eq!(t(&dl, "t"), "timestamp[us, tz=UTC]");
    assert_eq!(t(&dl, "j"), "string");
    assert_eq!(t(&dl, "arr"), "list<element: struct<x: int64, y: string not null>>");
    assert!(t(&dl, "m").starts_with("map<string, struct<a: int64 not null, b: list<element: int64 not null>>"));
    assert_eq!(t(&pl, "d0"), "Decimal(precision=38, scale=0)");
    assert_eq!(t(&pl, "n"), "Datetime(time_unit='us', time_zone=None)");
    assert_eq!(t(&dk, "d38"), "DECIMAL(38,38)");
    assert_eq!(t(&dk, "n"), "TIMESTAMP");
    assert_eq!(t(&dk, "b"), "BLOB");
    assert_eq!(
        t(&dk, "s"),
        "STRUCT(tags VARCHAR[], m MAP(VARCHAR, DECIMAL(5,1)), ts TIMESTAMP WITH TIME ZONE, \"inner\" STRUCT(k DATE, v DECIMAL(38,38), n TIMESTAMP))"
    );

    // Statistics: as the rows deltalake reads say, decimals exact.
    assert_eq!(
        dl["stats_equal"], true,
        "DEST's add.stats {}\ndiffer from the rows' {}",
        dl["logged"], dl["expected"]
    );
    let add = v0.iter().find_map(|a| a.get("add")).expect("add");
    let stats = add["stats"].as_str().unwrap();
    let max38 = "9".repeat(38);
    for exact in [
        format!("\"d0\":-{max38}"),
        format!("\"d38\":-0.{}1", "0".repeat(37)),
        format!("\"d38\":0.{max38}"),
        "\"inner\":{\"k\":\"0001-01-01\"".to_string(),
        "\"nullCount\":{\"id\":0,".to_string(),
        "\"s\":{\"tags\":3,\"m\":3,\"ts\":4,\"inner\":{\"k\":4,\"v\":4,\"n\":4}}".to_string(),
    ] {
        assert!(stats.contains(&exact), "{exact} not in {stats}");
    }
}

/// tinydelta reads its exported Parquet back: without json columns (DEST holds those as
/// strings), `tinydelta read DEST` prints the source's canonical rows byte for byte.
#[test]
fn every_type_but_json_round_trips_byte_for_byte_through_export() {
    let schema: Vec<&str> = SCHEMA
        .iter()
        .copied()
        .filter(|c| !c.starts_with("j:") && !c.starts_with("sj:"))
        .collect();
    let src = TempTable::new(&schema);
    let text: String = rows()
        .iter()
        .map(|r| {
            let cut = r.find(",\"j\":").expect("j comes last but one");
            format!("{}}}\n", &r[..cut])
        })
        .collect();
    src.append(text.as_bytes());
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    export(&src, &dest, &[]).ok();
    let back = td(&["read", dest.to_str().unwrap()]).ok();
    assert_eq!(
        back.stdout,
        src.read(),
        "tinydelta read of DEST differs from the source"
    );
    assert_eq!(back.stdout, text.as_bytes(), "the rows were written in canonical form");
    // The json table: DEST holds each value's canonical text as a string.
    let j = source();
    let jdest = tmp.path().join("jdest");
    export(&j, &jdest, &[]).ok();
    let back = td(&["read", jdest.to_str().unwrap()]).ok();
    for (src_line, dest_line) in lines(&j.read()).iter().zip(lines(&back.stdout)) {
        let s: Value = serde_json::from_str(src_line).unwrap();
        let d: Value = serde_json::from_str(&dest_line).unwrap();
        let canonical = |v: &str| {
            let cut = v.find(",\"j\":").unwrap();
            let end = v.find(",\"sj\":").unwrap();
            v[cut + 5..end].to_string()
        };
        assert_eq!(
            d["j"].as_str().unwrap_or("null"),
            canonical(src_line),
            "json column of {}",
            s["id"]
        );
    }
}

/// `--all-versions` of a table that gains a `timestamp_ntz` column by `alter add-column`: DEST's
/// protocol is upgraded in the same version (reader 3 / writer 7 with `timestampNtz`, keeping
/// `appendOnly` and `invariants`, which writer 2 implied) and not written again after; deltalake
/// reads every version with the source's rows.
#[test]
fn an_added_timestamp_ntz_column_upgrades_dests_protocol_in_that_version() {
    let src = TempTable::new(&["id:int!"]);
    src.append(b"{\"id\":1}\n");
    src.td("alter", &["add-column", "n:timestamp_ntz"]).ok();
    src.append(b"{\"id\":2,\"n\":\"2024-05-06T07:08:09.000001\"}\n");
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    export(&src, &dest, &["--all-versions"]).ok();
    let protocol = |v: u64| {
        dest_commit(&dest, v)
            .into_iter()
            .find_map(|a| a.get("protocol").cloned())
    };
    let p0 = protocol(0).expect("version 0 has a protocol");
    assert_eq!(
        (p0["minReaderVersion"].as_i64(), p0["minWriterVersion"].as_i64()),
        (Some(1), Some(2))
    );
    assert_eq!(protocol(1), None);
    let p2 = protocol(2).expect("the alter's version upgrades the protocol");
    assert_eq!(p2["readerFeatures"], serde_json::json!(["timestampNtz"]));
    assert_eq!(
        p2["writerFeatures"],
        serde_json::json!(["appendOnly", "invariants", "timestampNtz"])
    );
    assert_eq!(protocol(3), None);
    let script = r#"
import sys, json
from deltalake import DeltaTable
for v in range(4):
    t = DeltaTable(sys.argv[1], version=v).to_pyarrow_table().sort_by('id')
    rows = [{k: (x.isoformat(timespec='microseconds') if hasattr(x, 'isoformat') else x) for k, x in r.items()} for r in t.to_pylist()]
    print(json.dumps([str(t.schema.field('n').type) if 'n' in t.schema.names else None, rows]))
sys.stdout.flush()
import os
os._exit(0)
"#;
    let out = String::from_utf8(py_with(&python(), &["-c", script, dest.to_str().unwrap()], b"")).unwrap();
    let got: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(got[3][0], "timestamp[us]");
    assert_eq!(
        got[3][1],
        serde_json::json!([{"id": 1, "n": null}, {"id": 2, "n": "2024-05-06T07:08:09.000001"}])
    );
    assert_eq!(got[1][1], serde_json::json!([{"id": 1}]));
}

/// Nested columns are streamed as flat ones are (docs/EXPORT.md "Cost"): batches of 8,192 rows,
/// row groups flushed at 64 MiB, so exporting a 60 MB file of structs, arrays, maps, decimals,
/// json and binary peaks well below the file's size.
#[test]
fn a_nested_export_is_streamed_in_bounded_memory() {
    let src = TempTable::new(&[
        "id:int!",
        "d:decimal(20,4)",
        "s:struct<a:int,tags:array<str>,inner:struct<x:float,t:timestamp_ntz>>",
        "m:map<str,array<int>>",
        "j:json",
        "b:binary",
    ]);
    let mut rows = String::with_capacity(64 << 20);
    let mut i = 0;
    while rows.len() < 60 << 20 {
        rows.push_str(&format!(
            "{{\"id\":{i},\"d\":{i}.{:04},\"s\":{{\"a\":{i},\"tags\":[\"tag{}\",\"x\",null],\"inner\":{{\"x\":{i}.5,\"t\":\"2024-01-01T00:00:{:02}.123456\"}}}},\"m\":{{\"k{}\":[1,2,3],\"z\":null}},\"j\":{{\"k\":[{i},\"v\",{{\"q\":null}}]}},\"b\":\"AAECAwQFBgc=\"}}\n",
            i % 10000,
            i % 100,
            i % 60,
            i % 7
        ));
        i += 1;
    }
    src.append(rows.as_bytes());
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    let (code, peak) = td_peak_rss(&["export", &src.p(), dest.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        peak < 50 << 20,
        "export of {} bytes of nested rows peaked at {peak} bytes",
        rows.len()
    );
    let described = td(&["describe", dest.to_str().unwrap(), "--json"]).ok().json();
    assert_eq!(described["numRecords"].as_u64(), Some(i));
}

/// A DEST exported by an earlier tinydelta, which wrote a `timestamp_ntz` column as `timestamp`
/// (UTC instants), is not continued under the new schema: the rerun is refused and DEST is left
/// as it was (docs/EXPORT.md "Continuing and refusing").
#[test]
fn a_dest_with_timestamp_ntz_written_as_timestamp_is_not_continued() {
    let src = TempTable::new(&["id:int!", "n:timestamp_ntz"]);
    src.append(b"{\"id\":1,\"n\":\"2024-01-01T00:00:00.000000\"}\n");
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    export(&src, &dest, &[]).ok();
    // DEST as the earlier export wrote it.
    let log = dest.join("_delta_log/00000000000000000000.json");
    let text = std::fs::read_to_string(&log).unwrap();
    let old = text
        .replace("\\\"timestamp_ntz\\\"", "\\\"timestamp\\\"")
        .replace(
            "{\"minReaderVersion\":3,\"minWriterVersion\":7,\"readerFeatures\":[\"timestampNtz\"],\"writerFeatures\":[\"timestampNtz\"]}",
            "{\"minReaderVersion\":1,\"minWriterVersion\":2}",
        );
    assert_ne!(old, text);
    std::fs::write(&log, &old).unwrap();
    src.append(b"{\"id\":2,\"n\":null}\n");
    export(&src, &dest, &[]).code(1).stderr_has(&[
        "its schema differs from an export of version 1",
        "export into a new DEST",
    ]);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), old);
    assert!(!dest.join("_delta_log/00000000000000000001.json").exists());
}
