//! docs/FORMAT.md "Column types" and docs/CLI.md "Column types" through the real `tinydelta`
//! binary: nested types, decimals, binary, `timestamp_ntz` and `json` columns, their canonical
//! JSON, statistics and messages, schema inference (`create --infer`), the protocol features
//! they need, and other writers' Parquet files of these types (written by `deltalake`).

use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;

/// Every new type once, nested as users nest them.
const NESTED: &[&str] = &[
    "id:int!",
    "user:struct<id:int!,name:str,tags:array<str!>>",
    "price:decimal(10,2)",
    "raw:json",
    "b:binary",
    "n:timestamp_ntz",
    "m:map<str,decimal(5,1)>",
];

#[test]
fn nested_values_are_written_canonically_with_nested_statistics() {
    let t = TempTable::new(NESTED);
    let v = t.append(
        concat!(
            "{\"id\":1,\"user\":{\"name\":\"a\",\"id\":7,\"tags\":[\"x\",\"y\"]},\"price\":1.5,\"raw\":{ \"z\" : [1, 2.50, {\"q\":null}], \"s\":\"\\u0041\"},",
            "\"b\":\"aGVsbG8=\",\"n\":\"2024-01-01T10:00:00.5\",\"m\":{\"k\":1e1,\"l\":null}}\n",
            "{\"id\":2,\"user\":null,\"price\":-0,\"raw\":\"s\",\"m\":{}}\n",
            "{\"id\":3,\"user\":{\"id\":9},\"price\":12345678.9,\"raw\":null,\"b\":\"\",\"n\":\"1999-12-31T23:59:59\"}\n",
        )
        .as_bytes(),
    );
    assert_eq!(
        String::from_utf8(t.read()).unwrap(),
        concat!(
            "{\"id\":1,\"user\":{\"id\":7,\"name\":\"a\",\"tags\":[\"x\",\"y\"]},\"price\":1.50,\"raw\":{\"z\":[1,2.50,{\"q\":null}],\"s\":\"A\"},",
            "\"b\":\"aGVsbG8=\",\"n\":\"2024-01-01T10:00:00.5\",\"m\":{\"k\":10.0,\"l\":null}}\n",
            "{\"id\":2,\"user\":null,\"price\":0.00,\"raw\":\"s\",\"b\":null,\"n\":null,\"m\":{}}\n",
            "{\"id\":3,\"user\":{\"id\":9,\"name\":null,\"tags\":null},\"price\":12345678.90,\"raw\":null,\"b\":\"\",\"n\":\"1999-12-31T23:59:59\",\"m\":null}\n",
        )
    );
    // Canonical rows read back as themselves: a second append of the output is byte-identical.
    let again = TempTable::new(NESTED);
    again.append(&t.read());
    assert_eq!(again.read(), t.read());

    let add = t
        .commit(v)
        .into_iter()
        .find_map(|a| a.get("add").cloned())
        .expect("an add action");
    let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
    assert_eq!(stats["numRecords"], 3);
    assert_eq!(stats["minValues"]["user"], json!({"id": 7, "name": "a"}));
    assert_eq!(stats["maxValues"]["user"], json!({"id": 9, "name": "a"}));
    assert_eq!(
        stats["nullCount"],
        json!({"id": 0, "user": {"id": 1, "name": 2, "tags": 2}, "price": 0, "raw": 1, "b": 1, "n": 1, "m": 1})
    );
    // Decimals are exact numbers in the statistics' text.
    let text = add["stats"].as_str().unwrap();
    assert!(
        text.contains("\"price\":0.00") && text.contains("\"price\":12345678.90"),
        "{text}"
    );
    assert_eq!(stats["minValues"]["n"], "1999-12-31T23:59:59.000000");
    assert_eq!(stats["maxValues"]["n"], "2024-01-01T10:00:00.500000");
    // No min/max for binary, json, arrays or maps.
    for k in ["b", "raw", "m"] {
        assert!(
            stats["minValues"].get(k).is_none() && stats["maxValues"].get(k).is_none(),
            "{k}: {stats}"
        );
    }
    let d = t.describe();
    assert_eq!(d["numRecords"], 3);
    assert!(
        t.td("describe", &[])
            .ok()
            .text()
            .contains("user:struct<id:int!,name:str,tags:array<str!>>"),
        "describe prints nested types in the CLI syntax"
    );
}

#[test]
fn the_types_that_need_table_features_list_them_in_the_protocol() {
    let t = TempTable::new(&["id:int", "n:timestamp_ntz", "j:json"]);
    let p = t
        .commit(0)
        .into_iter()
        .find_map(|a| a.get("protocol").cloned())
        .unwrap();
    assert_eq!(
        p,
        json!({"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["timestampNtz", "variantType"], "writerFeatures": ["tinydeltaJsonlData", "timestampNtz", "variantType"]})
    );
    t.append(b"{\"id\":1,\"n\":\"2020-01-01T00:00:00\",\"j\":[1]}\n");
    let plain = TempTable::new(&["id:int"]);
    let p0 = plain
        .commit(0)
        .into_iter()
        .find_map(|a| a.get("protocol").cloned())
        .unwrap();
    assert_eq!(
        p0,
        json!({"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["tinydeltaJsonlData"]})
    );
    // Adding a json column upgrades the protocol in the same commit, keeping the features
    // writer version 2 implied in a table created before the guard (writer version 2).
    let mut c0 = plain.commit(0);
    for a in c0.iter_mut() {
        if let Some(p) = a.get_mut("protocol") {
            *p = json!({"minReaderVersion": 1, "minWriterVersion": 2});
        }
    }
    plain.write_commit(0, &c0);
    plain.td("alter", &["add-column", "extra:json"]).ok();
    let c1 = plain.commit(1);
    let p1 = c1
        .iter()
        .find_map(|a| a.get("protocol").cloned())
        .expect("a protocol action");
    assert_eq!(
        p1,
        json!({"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["variantType"], "writerFeatures": ["tinydeltaJsonlData", "appendOnly", "invariants", "variantType"]})
    );
    plain.append(b"{\"id\":1,\"extra\":{\"a\":[true]}}\n");
    assert_eq!(plain.read(), b"{\"id\":1,\"extra\":{\"a\":[true]}}\n");
    // A table at writer version 7 with a feature tinydelta does not know is not written.
    let mut c0 = t.commit(0);
    for a in c0.iter_mut() {
        if let Some(p) = a.get_mut("protocol") {
            p["writerFeatures"] = json!(["timestampNtz", "variantType", "rowTracking"]);
        }
    }
    t.write_commit(0, &c0);
    t.td_in("append", &[], b"{\"id\":2}\n")
        .code(1)
        .stderr_has(&["writer version 7"]);
}

#[test]
fn malformed_types_name_the_spec_and_the_character() {
    let t = TempTable::uncreated();
    for (spec, msg) in [
        ("t:array<int", "character 12: expected '>', found the end"),
        ("t:struct<a:int,a:str>", "character 16: field \"a\" is named twice"),
        ("d:decimal(39,1)", "precision 39 is outside 1..=38"),
        ("d:decimal(3,4)", "scale 4 is larger than the precision 3"),
        ("m:map<int,str>", "map keys must be str"),
        ("x:list<int>", "unknown type \"list\""),
        ("x:array<int>>", "unexpected \">\" after the type"),
    ] {
        td(&["create", &t.p(), "id:int", spec]).code(2).stderr_has(&[spec, msg]);
        assert!(
            !t.log_dir().exists() || t.log_versions().is_empty(),
            "{spec} created a table"
        );
    }
}

#[test]
fn bad_nested_values_are_refused_by_path_and_nothing_is_committed() {
    let t = TempTable::new(NESTED);
    let cases: &[(&str, &str, &str)] = &[
        (
            "{\"id\":1,\"user\":{\"id\":1,\"name\":5}}",
            "\"user.name\"",
            "expected str, found number",
        ),
        (
            "{\"id\":1,\"user\":{\"id\":1,\"tags\":[\"a\",null]}}",
            "\"user.tags[1]\"",
            "NOT NULL",
        ),
        (
            "{\"id\":1,\"user\":{\"name\":\"a\"}}",
            "\"user.id\"",
            "missing value for a NOT NULL field",
        ),
        (
            "{\"id\":1,\"user\":{\"id\":1,\"nick\":\"a\"}}",
            "\"user.nick\"",
            "unknown field",
        ),
        ("{\"id\":1,\"user\":[1]}", "\"user\"", "expected struct<"),
        (
            "{\"id\":1,\"price\":1.234}",
            "\"price\"",
            "more than 2 digits after the point",
        ),
        (
            "{\"id\":1,\"price\":123456789}",
            "\"price\"",
            "more than 8 digits before the point",
        ),
        (
            "{\"id\":1,\"price\":\"1.5\"}",
            "\"price\"",
            "expected decimal(10,2), found string",
        ),
        ("{\"id\":1,\"b\":\"aGVsbG8\"}", "\"b\"", "is not base64"),
        (
            "{\"id\":1,\"n\":\"2024-01-01T10:00:00Z\"}",
            "\"n\"",
            "not a timestamp without offset",
        ),
        (
            "{\"id\":1,\"m\":{\"a\":1.25}}",
            "\"m.a\"",
            "more than 1 digits after the point",
        ),
        ("{\"id\":1,\"m\":{\"a\":1,\"a\":2}}", "\"m.a\"", "duplicate key"),
        ("{\"id\":1,\"raw\":{\"a\":1,\"a\":2}}", "\"raw.a\"", "duplicate key"),
    ];
    for (row, column, msg) in cases {
        let input = format!("{{\"id\":0}}\n{row}\n");
        t.td_in("append", &[], input.as_bytes())
            .code(5)
            .stderr_has(&["line 2, column ", column, msg]);
    }
    assert_eq!(t.log_versions(), vec![0], "a refused append committed");
    assert_eq!(t.part_files().len(), 0);
}

#[test]
fn decimals_at_the_limits_of_precision_and_scale() {
    let t = TempTable::new(&[
        "a:decimal(38,0)",
        "b:decimal(38,38)",
        "c:decimal(1,0)",
        "d:decimal(5,2)",
    ]);
    let nines = "9".repeat(38);
    let input = format!(
        "{{\"a\":{nines},\"b\":0.{nines},\"c\":-9,\"d\":1e2}}\n{{\"a\":-{nines},\"b\":-0.{nines},\"c\":0,\"d\":-1.5E-1}}\n{{\"a\":0,\"b\":0,\"c\":-0,\"d\":0.10e1}}\n"
    );
    t.append(input.as_bytes());
    let zeros = "0".repeat(38);
    assert_eq!(
        String::from_utf8(t.read()).unwrap(),
        format!(
            "{{\"a\":{nines},\"b\":0.{nines},\"c\":-9,\"d\":100.00}}\n{{\"a\":-{nines},\"b\":-0.{nines},\"c\":0,\"d\":-0.15}}\n{{\"a\":0,\"b\":0.{zeros},\"c\":0,\"d\":1.00}}\n"
        )
    );
    for (row, msg) in [
        (format!("{{\"a\":1{nines}}}"), "more than 38 digits before the point"),
        (format!("{{\"b\":1.{nines}}}"), "more than 0 digits before the point"),
        ("{\"c\":10}".to_string(), "more than 1 digits before the point"),
        ("{\"d\":1e-3}".to_string(), "more than 2 digits after the point"),
    ] {
        t.td_in("append", &[], row.as_bytes()).code(5).stderr_has(&[msg]);
    }
}

/// Structural equality of two JSON values, numbers compared as numbers (an input `652230`
/// reads back as `652230.0` in a float column), and a key missing from `input` equal to null.
fn same_value(input: &Value, read: &Value) -> bool {
    match (input, read) {
        (Value::Object(a), Value::Object(b)) => {
            a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same_value(v, w)))
                && b.iter().all(|(k, w)| a.contains_key(k) || w.is_null())
        }
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(v, w)| same_value(v, w)),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

#[test]
fn countries_go_in_by_inference_and_read_back_equal() {
    let t = TempTable::uncreated();
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/countries.jsonl");
    let f = file.to_str().unwrap();
    let dry = td(&["create", &t.p(), "--infer", f, "--dry-run"]).ok();
    assert!(!t.log_dir().exists(), "--dry-run created a table");
    let schema = dry.text().trim().to_string();
    assert!(
        schema.contains("ISO:struct<alpha2:str,alpha3:str,numeric:str>") && schema.contains("capital:json"),
        "{schema}"
    );
    assert!(
        dry.stderr
            .contains("note: \"capital\" is json: it holds both string and array values"),
        "{}",
        dry.stderr
    );
    let created = td(&["create", &t.p(), "--infer", f]).ok();
    assert!(created.text().contains(&schema), "{}", created.text());
    // The printed schema is the CLI syntax: it creates the same table.
    let again = TempTable::uncreated();
    let specs: Vec<&str> = schema.split(' ').collect();
    td(&[&["create", &again.p()], specs.as_slice()].concat()).ok();
    assert_eq!(again.describe()["schema"], t.describe()["schema"]);

    t.td("append", &["--file", f]).ok();
    let input: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let read: Vec<Value> = lines(&t.read())
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(input.len(), 254);
    assert_eq!(read.len(), input.len());
    for (i, (a, b)) in input.iter().zip(&read).enumerate() {
        assert!(same_value(a, b), "row {}: {a}\nread back as {b}", i + 1);
    }
    // A sample of the first rows only: the later variety is not seen, so the append refuses it.
    let small = TempTable::uncreated();
    td(&["create", &small.p(), "--infer", f, "--sample-rows", "2"]).ok();
    small
        .td("append", &["--file", f])
        .code(5)
        .stderr_has(&["countries.jsonl: line "]);
}

/// Export writes every type tinydelta creates (tests/cli/export_types.rs); a map whose keys are
/// not strings (another writer's `map<int,str>`, read with its keys as text) is refused before
/// DEST is touched, naming the column and its type (docs/EXPORT.md "Table").
#[test]
fn export_refuses_a_map_with_int_keys_and_creates_nothing() {
    let t = TempTable::new(&["id:int", "m:map<str,str>"]);
    let mut v0 = t.commit(0);
    for a in &mut v0 {
        if let Some(m) = a.get_mut("metaData") {
            let s = m["schemaString"]
                .as_str()
                .unwrap()
                .replace("\"keyType\":\"string\"", "\"keyType\":\"integer\"");
            m["schemaString"] = s.into();
        }
    }
    t.write_commit(0, &v0);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out");
    td(&["export", &t.p(), dest.to_str().unwrap()])
        .code(1)
        .stderr_has(&["column \"m\" has type map<int,str>, which export does not write (a map's keys must be str"]);
    assert!(!dest.exists(), "a refused export left {}", dest.display());
}

/// deltalake writes a Parquet table with nested types, decimals, binary and timestamps without a
/// zone in two versions; tinydelta reads each version with the canonical JSON Python computes
/// from pyarrow's own reading.
#[test]
fn deltalake_tables_of_these_types_read_as_deltalake_reads_them() {
    let py = crate::support::mount::python(&["deltalake", "pyarrow"]);
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("dl");
    let script = r#"
import base64, datetime, decimal, json, sys
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
path = sys.argv[1]
schema = pa.schema([
    ("id", pa.int64()),
    ("user", pa.struct([("name", pa.string()), ("age", pa.int32())])),
    ("tags", pa.list_(pa.string())),
    ("m", pa.map_(pa.string(), pa.int64())),
    ("price", pa.decimal128(9, 3)),
    ("blob", pa.binary()),
    ("at", pa.timestamp("us")),
    ("nested", pa.list_(pa.struct([("x", pa.float64()), ("ys", pa.list_(pa.int64()))]))),
])
rows = [
    {"id": 1, "user": {"name": "a", "age": 30}, "tags": ["x", "y"], "m": [("k", 1)], "price": decimal.Decimal("1.500"),
     "blob": b"\x00\xffhi", "at": datetime.datetime(2024, 1, 2, 3, 4, 5, 6), "nested": [{"x": 1.5, "ys": [1, 2]}, None]},
    {"id": 2, "user": None, "tags": [], "m": None, "price": decimal.Decimal("-0.001"), "blob": None, "at": None, "nested": None},
]
write_deltalake(path, pa.Table.from_pylist(rows[:1], schema=schema))
write_deltalake(path, pa.Table.from_pylist(rows[1:], schema=schema), mode="append")

def enc(v, t):
    if v is None:
        return "null"
    if pa.types.is_struct(t):
        return "{" + ",".join(json.dumps(f.name) + ":" + enc(v.get(f.name), f.type) for f in t) + "}"
    if pa.types.is_map(t):
        return "{" + ",".join(json.dumps(k) + ":" + enc(x, t.item_type) for k, x in v) + "}"
    if pa.types.is_list(t):
        return "[" + ",".join(enc(x, t.value_type) for x in v) + "]"
    if pa.types.is_decimal(t):
        return format(v.quantize(decimal.Decimal(1).scaleb(-t.scale)), "f")
    if pa.types.is_binary(t):
        return json.dumps(base64.b64encode(v).decode())
    if pa.types.is_timestamp(t):
        return json.dumps(v.strftime("%Y-%m-%dT%H:%M:%S.%f"))
    return json.dumps(v, ensure_ascii=False)

for version in (0, 1):
    tbl = DeltaTable(path, version=version).to_pyarrow_table()
    with open(f"{path}.v{version}.jsonl", "w") as out:
        for r in tbl.to_pylist():
            out.write("{" + ",".join(json.dumps(f.name) + ":" + enc(r[f.name], f.type) for f in tbl.schema) + "}\n")
# deltalake's runtime can abort while the interpreter shuts down ("terminate called without an
# active exception"): the files are written and closed, so leave without the teardown.
import os
sys.stdout.flush()
os._exit(0)
"#;
    let out = Command::new(&py).arg("-c").arg(script).arg(&table).output().unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    let t = table.to_str().unwrap();
    let described = td(&["describe", t]).ok().text();
    assert!(
        described.contains("user:struct<name:str,age:int> tags:array<str> m:map<str,int> price:decimal(9,3) blob:binary at:timestamp_ntz nested:array<struct<x:float,ys:array<int>>>"),
        "{described}"
    );
    for v in [0u64, 1] {
        let expected = std::fs::read_to_string(dir.path().join(format!("dl.v{v}.jsonl"))).unwrap();
        let ours = td(&["read", t, "--version", &v.to_string()]).ok();
        let mut a: Vec<&str> = expected.lines().collect();
        let ours_text = ours.text();
        let mut b: Vec<&str> = ours_text.lines().collect();
        a.sort();
        b.sort();
        assert_eq!(b, a, "version {v}");
    }
}

/// Break-it review findings: a `json` value nested deeper than 128 levels is refused (it was
/// written recursively: 10,000 levels overflowed the stack, and killed the daemon); a decimal
/// whose exponent offsets a million-digit mantissa is refused, not clamped into another value;
/// a struct nested deeper than 32 levels is refused at `create` (its schemaString would pass
/// serde_json's 128 levels); a leap second at the end of 9999 is outside Delta's range.
#[test]
fn hostile_values_and_types_are_refused_not_misread() {
    let t = TempTable::new(&["j:json", "d:decimal(5,2)", "t:timestamp", "n:timestamp_ntz"]);
    let deep = |n: usize| format!("{{\"j\":{}{}}}\n", "[".repeat(n), "]".repeat(n));
    t.append(deep(128).as_bytes());
    for n in [129, 10_000] {
        t.td_in("append", &[], deep(n).as_bytes())
            .code(5)
            .stderr_has(&["nests objects and arrays deeper than 128 levels"]);
    }
    let zeros = "0".repeat(1_000_000);
    for (row, msg) in [
        (
            format!("{{\"d\":0.{zeros}1e2000000}}"),
            "more than 3 digits before the point",
        ),
        (
            format!("{{\"d\":1{zeros}e-2000000}}"),
            "more than 2 digits after the point",
        ),
    ] {
        let out = t.td_in("append", &[], row.as_bytes()).code(5);
        assert!(
            out.stderr.contains(msg) && out.stderr.len() < 2000,
            "{}",
            &out.stderr[..out.stderr.len().min(600)]
        );
    }
    // 10^0 written with a million zeros either side is exactly 1.
    t.append(format!("{{\"d\":1{zeros}e-1000000}}\n").as_bytes());
    for row in ["{\"t\":\"9999-12-31T23:59:60Z\"}", "{\"n\":\"9999-12-31T23:59:60\"}"] {
        t.td_in("append", &[], row.as_bytes()).code(5);
    }
    assert_eq!(t.latest(), 2);
    let last = lines(&t.read()).pop().unwrap();
    assert!(last.contains("\"d\":1.00"), "{last}");

    let mut spec = "int".to_string();
    for _ in 0..33 {
        spec = format!("struct<a:{spec}>");
    }
    let u = TempTable::uncreated();
    td(&["create", &u.p(), &format!("c:{spec}")])
        .code(2)
        .stderr_has(&["nested deeper than 32 levels"]);
    let mut ok = "int".to_string();
    for _ in 0..31 {
        ok = format!("struct<a:{ok}>");
    }
    td(&["create", &u.p(), &format!("c:{ok}")]).ok();
    assert_eq!(u.describe()["version"], 0, "a created table reads");
}

#[test]
fn infer_refuses_a_sample_without_line_ends_and_export_of_an_earlier_version_works() {
    let t = TempTable::uncreated();
    td(&["create", &t.p(), "--infer", "/dev/zero", "--dry-run"])
        .code(5)
        .stderr_has(&["/dev/zero: line 1", "longer than the maximum"]);
    // export --version N exports the columns of version N, not of later ones.
    let s = TempTable::new(&["a:int"]);
    s.append(b"{\"a\":1}\n");
    s.td("alter", &["add-column", "s:struct<x:int>"]).ok();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out");
    td(&["export", &s.p(), dest.to_str().unwrap(), "--version", "1"]).ok();
    assert_eq!(td(&["read", dest.to_str().unwrap()]).ok().text(), "{\"a\":1}\n");
    let out2 = dir.path().join("out2");
    td(&["export", &s.p(), out2.to_str().unwrap()]).ok();
    assert_eq!(
        td(&["read", out2.to_str().unwrap()]).ok().text(),
        "{\"a\":1,\"s\":null}\n"
    );
}

/// Break-it finding: a Parquet timestamp adjusted to UTC (an instant) added to a
/// `timestamp_ntz` column, at the top or inside a struct, was read as the UTC wall-clock time;
/// it is refused, naming the file, row and column. The reverse, a timestamp without UTC
/// adjustment in a `timestamp` column, is read as UTC, as Delta readers read older writers'
/// files (docs/FORMAT.md "Parquet data files").
#[test]
fn a_parquet_instant_in_a_timestamp_ntz_column_is_refused_not_reinterpreted() {
    let py = crate::support::mount::python(&["deltalake", "pyarrow"]);
    let script = r#"
import sys, json, os, datetime, pyarrow as pa, pyarrow.parquet as pq
from deltalake import write_deltalake
path, kind, field = sys.argv[1:4]
ntz = kind == "ntz"
t_table = pa.timestamp("us") if ntz else pa.timestamp("us", tz="UTC")
t_file = pa.timestamp("us", tz="UTC") if ntz else pa.timestamp("us")
schema = pa.schema([("id", pa.int64()), ("at", t_table), ("s", pa.struct([("at", t_table)]))])
first = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=None if ntz else datetime.timezone.utc)
write_deltalake(path, pa.Table.from_pylist([{"id": 1, "at": first, "s": {"at": None}}], schema=schema))
fs = pa.schema([("id", pa.int64()), ("at", t_file if field == "at" else t_table),
                ("s", pa.struct([("at", t_file if field == "s" else t_table)]))])
v = datetime.datetime(2024, 6, 7, 8, 9, 10, 11)
val = lambda t: v.replace(tzinfo=datetime.timezone.utc) if t.tz else v
row = {"id": 2, "at": val(fs.field("at").type), "s": {"at": val(fs.field("s").type.field("at").type)}}
pq.write_table(pa.Table.from_pylist([row], schema=fs), path + "/other.parquet")
add = {"add": {"path": "other.parquet", "partitionValues": {}, "size": os.path.getsize(path + "/other.parquet"),
               "modificationTime": 1, "dataChange": True}}
open(path + "/_delta_log/00000000000000000001.json", "w").write(json.dumps(add) + "\n")
sys.stdout.flush()
os._exit(0)
"#;
    let dir = tempfile::tempdir().unwrap();
    let make = |name: &str, kind: &str, field: &str| {
        let table = dir.path().join(name);
        let out = Command::new(&py)
            .args(["-c", script, table.to_str().unwrap(), kind, field])
            .output()
            .unwrap();
        assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
        table.display().to_string()
    };
    let top = make("top", "ntz", "at");
    td(&["read", &top]).code(1).stderr_has(&[
        "top/other.parquet: row 1, column \"at\": Parquet type Timestamp(µs, \"UTC\") holds instants",
        "the column is timestamp_ntz",
    ]);
    let nested = make("nested", "ntz", "s");
    td(&["read", &nested])
        .code(1)
        .stderr_has(&["nested/other.parquet: row 1, column \"s\": .at: Parquet type Timestamp(µs, \"UTC\")"]);
    let utc = make("utc", "utc", "at");
    assert_eq!(
        td(&["read", &utc]).ok().text(),
        "{\"id\":1,\"at\":\"2024-01-02T03:04:05.000000Z\",\"s\":{\"at\":null}}\n\
         {\"id\":2,\"at\":\"2024-06-07T08:09:10.000011Z\",\"s\":{\"at\":\"2024-06-07T08:09:10.000011Z\"}}\n"
    );
}

/// The latest schema in the CLI syntax, from `describe --json`.
fn cli_schema(t: &TempTable) -> String {
    t.describe()["schema"]
        .as_array()
        .expect("describe.schema")
        .iter()
        .map(|c| {
            format!(
                "{}:{}{}",
                c["name"].as_str().unwrap(),
                c["type"].as_str().unwrap(),
                if c["nullable"] == true { "" } else { "!" }
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn merge_schema_adds_columns_and_nested_fields_in_the_commit_of_the_rows() {
    let t = TempTable::new(&[
        "id:int!",
        "user:struct<id:int,name:str>",
        "events:array<struct<at:int>>",
    ]);
    t.append(b"{\"id\":1,\"user\":{\"id\":7,\"name\":\"a\"},\"events\":[{\"at\":1}]}\n");
    let input = concat!(
        "{\"id\":2,\"user\":{\"id\":8,\"name\":\"b\",\"email\":\"b@x\"},\"events\":[{\"at\":2,\"kind\":\"k\"}],\"amount\":1.5}\n",
        "{\"id\":3,\"tags\":[\"x\"],\"amount\":2}\n",
    );
    // Without the flag an unknown key is refused and the message names the flag.
    t.td_in("append", &[], input.as_bytes())
        .code(5)
        .stderr_has(&["unknown", "--merge-schema"]);
    assert_eq!(t.log_versions(), vec![0, 1]);

    // From a pipe: the input is read twice (columns, then rows).
    let out = t.td_in("append", &["--merge-schema"], input.as_bytes()).ok();
    assert!(
        out.text()
            .starts_with("added columns user.email, events[].kind, amount, tags to the schema\n"),
        "{}",
        out.text()
    );
    let v = version_in(&out.text());
    assert_eq!(v, 2);
    let actions = t.commit(v);
    let kinds: Vec<&str> = actions
        .iter()
        .map(|a| a.as_object().unwrap().keys().next().unwrap().as_str())
        .collect();
    assert_eq!(
        kinds,
        ["commitInfo", "metaData", "add"],
        "one commit: the schema with its rows"
    );
    assert_eq!(actions[0]["commitInfo"]["operationParameters"]["mergeSchema"], "true");
    assert_eq!(
        cli_schema(&t),
        "id:int! user:struct<id:int,name:str,email:str> events:array<struct<at:int,kind:str>> amount:float tags:array<str>"
    );
    assert_eq!(
        String::from_utf8(t.read()).unwrap(),
        concat!(
            "{\"id\":1,\"user\":{\"id\":7,\"name\":\"a\"},\"events\":[{\"at\":1}]}\n",
            "{\"id\":2,\"user\":{\"id\":8,\"name\":\"b\",\"email\":\"b@x\"},\"events\":[{\"at\":2,\"kind\":\"k\"}],\"amount\":1.5,\"tags\":null}\n",
            "{\"id\":3,\"user\":null,\"events\":null,\"amount\":2.0,\"tags\":[\"x\"]}\n",
        )
    );
    // Rows written before the fields were added lack them, and are still whole.
    t.td("check", &["--deep"]).ok();

    // Nothing new: a plain append, no metaData.
    let v = version_in(&t.td_in("append", &["--merge-schema"], b"{\"id\":4}\n").ok().text());
    assert!(t.commit(v).iter().all(|a| a.get("metaData").is_none()));
    // A key that exists keeps its type: a value of another type is refused as before.
    t.td_in("append", &["--merge-schema"], b"{\"id\":5,\"amount\":\"x\"}\n")
        .code(5)
        .stderr_has(&["column \"amount\""]);
    // With --rejects, from a file: the bad line is rejected, the good rows and their new column
    // are committed.
    let f = t.dir.path().join("in.jsonl");
    std::fs::write(&f, "{\"id\":6,\"note\":\"n\"}\nnot json\n").unwrap();
    let rejects = t.dir.path().join("rej.jsonl");
    t.td(
        "append",
        &[
            "--merge-schema",
            "--file",
            f.to_str().unwrap(),
            "--rejects",
            rejects.to_str().unwrap(),
        ],
    )
    .ok();
    assert!(cli_schema(&t).ends_with(" note:str"));
    assert_eq!(std::fs::read_to_string(&rejects).unwrap(), "not json\n");
    t.td("check", &["--deep"]).ok();
}

#[test]
fn alter_adds_a_field_inside_a_struct() {
    let t = TempTable::new(&[
        "id:int!",
        "user:struct<id:int>",
        "events:array<struct<at:int>>",
        "n:int",
    ]);
    t.append(b"{\"id\":1,\"user\":{\"id\":7},\"events\":[{\"at\":1}]}\n");
    t.td("alter", &["add-column", "user.email:str"]).ok();
    t.td("alter", &["add-column", "events.kind:str"]).ok();
    let v = t.latest();
    let added = t.commit(v);
    assert_eq!(added[0]["commitInfo"]["operation"], "ADD COLUMNS");
    assert_eq!(
        cli_schema(&t),
        "id:int! user:struct<id:int,email:str> events:array<struct<at:int,kind:str>> n:int"
    );
    t.append(b"{\"id\":2,\"user\":{\"id\":8,\"email\":\"e\"},\"events\":[{\"at\":2,\"kind\":\"k\"}]}\n");
    assert_eq!(
        String::from_utf8(t.read()).unwrap(),
        concat!(
            "{\"id\":1,\"user\":{\"id\":7},\"events\":[{\"at\":1}],\"n\":null}\n",
            "{\"id\":2,\"user\":{\"id\":8,\"email\":\"e\"},\"events\":[{\"at\":2,\"kind\":\"k\"}],\"n\":null}\n",
        )
    );
    t.td("check", &["--deep"]).ok();
    for (spec, msg) in [
        ("n.x:int", "\"n\" is int, not a struct"),
        ("nope.x:int", "\"nope\" names no column or field"),
        ("user.ID:str", "column \"user.id\" already exists as int"),
        ("user.x:int!", "must be nullable"),
        ("user..x:int", "empty name segment"),
    ] {
        t.td("alter", &["add-column", spec]).code(2).stderr_has(&[msg]);
    }
    assert_eq!(t.latest(), v + 1);
}

#[test]
fn merge_schema_refuses_what_create_refuses_and_adds_only_committed_keys() {
    // Deeper than 32 levels: refused before anything is committed (the table stays readable).
    let t = TempTable::new(&["id:int"]);
    let deep = format!("{{\"id\":1,\"n\":{}1{}}}\n", "{\"a\":".repeat(32), "}".repeat(32));
    t.td_in("append", &["--merge-schema"], deep.as_bytes())
        .code(2)
        .stderr_has(&["nested deeper than 32"]);
    // Names create refuses.
    t.td_in("append", &["--merge-schema"], b"{\"id\":1,\"_change_type\":\"x\"}\n")
        .code(2)
        .stderr_has(&["reserved for the change feed"]);
    t.td_in("append", &["--merge-schema"], b"{\"id\":1,\"s\":{\"\":2}}\n")
        .code(2)
        .stderr_has(&["empty column or field name"]);
    assert_eq!(t.log_versions(), vec![0]);
    t.td("read", &[]).ok();
    // A rejected line adds no column.
    let rejects = t.dir.path().join("rej.jsonl");
    t.td_in(
        "append",
        &["--merge-schema", "--rejects", rejects.to_str().unwrap()],
        b"{\"id\":1,\"ok\":true}\n{\"id\":\"bad\",\"z\":[1,\"a\"]}\n",
    )
    .ok();
    assert_eq!(cli_schema(&t), "id:int ok:bool");
    // A struct in a map column gets its new fields too.
    let m = TempTable::new(&["id:int", "m:map<str,struct<a:int>>"]);
    let out = m
        .td_in(
            "append",
            &["--merge-schema"],
            b"{\"id\":1,\"m\":{\"x\":{\"a\":1,\"b\":true}}}\n",
        )
        .ok();
    assert!(
        out.text().starts_with("added column m{}.b to the schema"),
        "{}",
        out.text()
    );
    assert_eq!(cli_schema(&m), "id:int m:map<str,struct<a:int,b:bool>>");
    // alter refuses a field nested too deep, and commits nothing.
    let spec = format!("n:{}int{}", "struct<a:".repeat(31), ">".repeat(31));
    let u = TempTable::new(&["id:int", &spec]);
    let path = format!("n{}.b:struct<c:struct<d:int>>", ".a".repeat(30));
    u.td("alter", &["add-column", &path])
        .code(2)
        .stderr_has(&["deeper than 32"]);
    assert_eq!(u.log_versions(), vec![0]);
}
