//! Parquet data files and tables made by delta-rs (docs/FORMAT.md "Parquet data files" and
//! docs/FORMAT.md "Tables of other Delta writers"): the real `deltalake` package writes Parquet
//! into a tinydelta table and makes tables of its own; the CLI and the mount serve every version as
//! canonical JSONL, compared with what deltalake itself reads.
//!
//! Needs Python with deltalake and pyarrow (`scripts/test.sh` makes `.venv`); fails, never skips,
//! without it.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::support::mount::*;
use crate::support::user;

/// Every line of `jsonl` parsed and printed again with sorted keys, sorted: a multiset of typed
/// rows (ints stay ints, floats floats, strings strings).
fn multiset(jsonl: &[u8]) -> Vec<String> {
    let mut rows: Vec<String> = lines(jsonl)
        .into_iter()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let v: Value =
                serde_json::from_slice(l).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(l)));
            assert!(v.is_object(), "{v}");
            v.to_string()
        })
        .collect();
    rows.sort();
    rows
}

const APPEND: &str = r#"
import sys, datetime, pyarrow as pa
from deltalake import write_deltalake
utc = datetime.timezone.utc
write_deltalake(sys.argv[1], pa.table({
    "id": pa.array([7, 8], pa.int64()),
    "name": pa.array(["x\"y", None], pa.string()),
    "score": pa.array([2.25, None], pa.float64()),
    "day": pa.array([datetime.date(2024, 2, 3), None], pa.date32()),
    "at": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=utc), None], pa.timestamp("us", tz="UTC")),
    "ok": pa.array([True, None], pa.bool_()),
}), mode="append")
"#;

/// The rows of [`APPEND`] as tinydelta serves them (docs/FORMAT.md, "Parquet data files").
const APPENDED: &str = concat!(
    r#"{"id":7,"name":"x\"y","score":2.25,"day":"2024-02-03","at":"2024-01-02T03:04:05.123456Z","ok":true}"#,
    "\n",
    r#"{"id":8,"name":null,"score":null,"day":null,"at":null,"ok":null}"#,
    "\n"
);

/// A tinydelta table with the columns of [`APPEND`]; its path as a string.
fn typed_table() -> (Fixture, String) {
    let f = empty_fixture();
    let t = f.t();
    let schema = [
        "id:int!",
        "name:str",
        "score:float",
        "day:date",
        "at:timestamp",
        "ok:bool",
    ];
    f.td(&[&["create", t.as_str()][..], &schema[..]].concat());
    crate::support::legacy_protocol(&f.table);
    (f, t)
}

/// Item 1: a tinydelta table with 3 appends, a deltalake append (Parquet) and a tinydelta
/// overwrite reads correctly at every version, in the CLI and the mount, and the Parquet file is
/// converted once into `_tinydelta/jsonl/`.
#[test]
fn a_deltalake_append_into_a_tinydelta_table_reads_at_every_version() {
    let (f, t) = typed_table();
    let batches = [
        "{\"id\":1,\"name\":\"a\",\"score\":1.5,\"day\":\"2024-01-01\",\"at\":\"2024-01-01T00:00:00Z\",\"ok\":false}\n",
        "{\"id\":2,\"name\":\"b\",\"score\":null,\"day\":null,\"at\":null,\"ok\":true}\n",
        "{\"id\":3,\"name\":\"c\",\"score\":3.0,\"day\":\"2024-01-03\",\"at\":\"2024-01-03T00:00:00Z\",\"ok\":true}\n",
    ];
    let mut expected: Vec<Vec<u8>> = vec![Vec::new()];
    for b in batches {
        let p = f.dir.path().join("batch.jsonl");
        fs::write(&p, b).unwrap();
        f.td(&["append", &t, "--file", p.to_str().unwrap()]);
        let mut next = expected.last().unwrap().clone();
        next.extend_from_slice(b.as_bytes());
        expected.push(next);
    }
    py(APPEND, &f.table); // version 4
    let mut v4 = expected[3].clone();
    v4.extend_from_slice(APPENDED.as_bytes());
    expected.push(v4);
    let over =
        "{\"id\":9,\"name\":\"z\",\"score\":0.5,\"day\":\"2025-01-01\",\"at\":\"2025-01-01T00:00:00Z\",\"ok\":false}\n";
    let p = f.dir.path().join("over.jsonl");
    fs::write(&p, over).unwrap();
    f.td(&["overwrite", &t, "--file", p.to_str().unwrap()]); // version 5
    expected.push(over.as_bytes().to_vec());
    let log4 = fs::read_to_string(f.table.join("_delta_log/00000000000000000004.json")).unwrap();
    assert!(log4.contains(".parquet"), "deltalake wrote no Parquet file: {log4}");

    // The mount first: nothing is converted at mount time.
    {
        let _m = f.mount();
        assert!(
            !f.table.join("_tinydelta/jsonl").exists()
                || fs::read_dir(f.table.join("_tinydelta/jsonl")).unwrap().count() == 0,
            "converted at mount time"
        );
        for (v, want) in expected.iter().enumerate() {
            let path = f.m(&format!("v/{v}/data.jsonl"));
            let meta = fs::metadata(&path).unwrap_or_else(|e| panic!("stat v/{v}: {e}"));
            assert_eq!(meta.len(), want.len() as u64, "stat size of v/{v}/data.jsonl");
            let got = fs::read(&path).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(want),
                "mount v/{v}/data.jsonl"
            );
        }
        assert_eq!(fs::read(f.m("latest/data.jsonl")).unwrap(), expected[5]);
    }
    let cache: Vec<_> = fs::read_dir(f.table.join("_tinydelta/jsonl"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(cache.len(), 1, "one cache entry for one Parquet file: {cache:?}");
    // The CLI: read, describe, changes of every version.
    for (v, want) in expected.iter().enumerate() {
        assert_eq!(
            String::from_utf8_lossy(&f.read_v(v as u64)),
            String::from_utf8_lossy(want),
            "read --version {v}"
        );
        let d: Value = serde_json::from_slice(&f.td(&["describe", &t, "--version", &v.to_string(), "--json"])).unwrap();
        assert_eq!(
            d["numRecords"].as_u64(),
            Some(lines(want).len() as u64),
            "describe --version {v}: {d}"
        );
    }
    // changes: the Parquet rows as inserts of version 4 and deletes of version 5.
    let feed = f.td(&["changes", &t]);
    let rows: Vec<Value> = lines(&feed)
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let parquet_rows: Vec<_> = rows.iter().filter(|r| r["id"] == 7 || r["id"] == 8).collect();
    assert_eq!(parquet_rows.len(), 4, "{}", String::from_utf8_lossy(&feed));
    assert_eq!(
        (
            parquet_rows[0]["_change_type"].as_str(),
            parquet_rows[0]["_commit_version"].as_u64()
        ),
        (Some("insert"), Some(4))
    );
    assert_eq!(parquet_rows[0]["at"], "2024-01-02T03:04:05.123456Z");
    assert_eq!(
        (
            parquet_rows[3]["_change_type"].as_str(),
            parquet_rows[3]["_commit_version"].as_u64()
        ),
        (Some("delete"), Some(5))
    );
    {
        let _m = f.mount();
        assert_eq!(fs::read(f.m("changes.jsonl")).unwrap(), feed, "mount changes.jsonl");
    }
    // check --deep converts and counts the Parquet file: whole.
    let (code, out, err) = td_any(&["check", &t, "--deep"]);
    assert_eq!(code, 0, "{}{err}", String::from_utf8_lossy(&out));
    // A cut cache entry is never served: it is converted again.
    let entry = f.table.join("_tinydelta/jsonl").join(&cache[0]);
    let bytes = fs::read(&entry).unwrap();
    fs::write(&entry, &bytes[..bytes.len() / 2]).unwrap();
    assert_eq!(f.read_v(4), expected[4]);
    assert_eq!(
        fs::read(&entry).unwrap(),
        bytes,
        "the cut cache entry was not converted again"
    );
    // Vacuum deletes the cache entry with its data file (removed by the overwrite).
    let parquet = f.table.join(
        fs::read_dir(&f.table)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .find(|n| n.to_string_lossy().ends_with(".parquet"))
            .unwrap(),
    );
    let dry = String::from_utf8_lossy(&f.td(&["vacuum", &t, "--retain", "0s", "--force", "--dry-run"])).into_owned();
    assert!(dry.contains(&cache[0]), "{dry}");
    assert!(entry.exists() && parquet.exists());
    f.td(&["vacuum", &t, "--retain", "0s", "--force"]);
    assert!(!parquet.exists(), "the removed Parquet file was not vacuumed");
    assert!(!entry.exists(), "its cache entry outlived it");
    assert_eq!(f.read_v(5), expected[5]);
}

/// Item 1: a damaged Parquet file is an error naming it (CLI exit 1, EIO in the mount), and the
/// versions that do not name it still read.
#[test]
fn damaged_parquet_is_an_error_naming_the_file() {
    let (f, t) = typed_table();
    let p = f.dir.path().join("b.jsonl");
    fs::write(&p, "{\"id\":1}\n").unwrap();
    f.td(&["append", &t, "--file", p.to_str().unwrap()]);
    py(APPEND, &f.table);
    let add: Value = fs::read_to_string(f.table.join("_delta_log/00000000000000000002.json"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|a| a.get("add").is_some())
        .unwrap();
    let name = add["add"]["path"].as_str().unwrap().to_string();
    let file = f.table.join(&name);
    let good = fs::read(&file).unwrap();
    for (how, bytes) in [
        ("garbage", vec![b'x'; good.len()]),
        ("cut", {
            let mut b = good[..good.len() / 2].to_vec();
            b.resize(good.len(), 0);
            b
        }),
        ("no footer", {
            let mut b = good.clone();
            let n = b.len();
            b[n - 4..].copy_from_slice(b"XXXX");
            b
        }),
    ] {
        fs::write(&file, &bytes).unwrap();
        let (code, out, err) = td_any(&["read", &t]);
        assert_eq!(code, 1, "{how}: {err}");
        assert!(out.is_empty(), "{how}: printed rows of a damaged file");
        assert!(err.contains(&name) && err.contains("Parquet"), "{how}: {err}");
        // describe reports no version read refuses (review finding 6).
        let (code, out, err) = td_any(&["describe", &t]);
        assert_eq!(code, 1, "{how}: describe said {}", String::from_utf8_lossy(&out));
        assert!(err.contains(&name), "{how}: {err}");
        assert_eq!(
            f.read_v(1),
            b"{\"id\":1,\"name\":null,\"score\":null,\"day\":null,\"at\":null,\"ok\":null}\n"
        );
        let _m = f.mount();
        let e = fs::read(f.m("v/2/data.jsonl")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{how}: mount v/2");
        assert!(fs::read(f.m("v/1/data.jsonl")).is_ok());
    }
    // Another size than the log records: named too.
    fs::write(&file, &good[..good.len() - 1]).unwrap();
    let (code, _, err) = td_any(&["read", &t]);
    assert!(code == 1 && err.contains(&name) && err.contains("bytes"), "{err}");
    fs::write(&file, &good).unwrap();
    assert_eq!(lines(&f.td(&["read", &t])).len(), 3);
    // A symlinked cache folder is ignored with a warning, never written through (the rows are
    // cached in the user's own folder: tests/mount/bounds.rs).
    let outside = f.dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::remove_dir_all(f.table.join("_tinydelta/jsonl")).unwrap();
    std::os::unix::fs::symlink(&outside, f.table.join("_tinydelta/jsonl")).unwrap();
    let out = std::process::Command::new(TD_BIN)
        .args(["read", &t])
        .env("XDG_CACHE_HOME", f.dir.path().join("cache"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(lines(&out.stdout).len(), 3);
    assert!(err.contains("_tinydelta/jsonl") && err.contains("ignored"), "{err}");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "wrote through the symlink");
}

/// The deltalake script of the table made only by deltalake: 50 appends (one overwrite among
/// them), a partition column, every type tinydelta maps, nulls, checkpoints every 10 versions;
/// prints, per version, deltalake's own reading of the rows as JSON objects in tinydelta's value
/// forms.
const DELTALAKE_TABLE: &str = r#"
import sys, json, datetime, pyarrow as pa
from deltalake import write_deltalake, DeltaTable
path = sys.argv[1]
utc = datetime.timezone.utc
def batch(k):
    n = 3
    return pa.table({
        "i8": pa.array([k % 100, -1, None], pa.int8()),
        "i16": pa.array([k * 10, None, 7], pa.int16()),
        "i32": pa.array([k * 1000, 2, None], pa.int32()),
        "i64": pa.array([k * 10**12, None, -5], pa.int64()),
        "f32": pa.array([k + 0.5, None, 0.25], pa.float32()),
        "f64": pa.array([k / 4, 1e300, None], pa.float64()),
        "s": pa.array([f"row {k}", None, "\u00e9\"\\"], pa.string()),
        "b": pa.array([k % 2 == 0, None, True], pa.bool_()),
        "d": pa.array([datetime.date(2024, 1, 1) + datetime.timedelta(days=k), None, datetime.date(1969, 12, 31)], pa.date32()),
        "ts": pa.array([datetime.datetime(2024, 1, 1, 0, 0, 0, k, tzinfo=utc), None, datetime.datetime(1960, 5, 6, 7, 8, 9, tzinfo=utc)], pa.timestamp("us", tz="UTC")),
        "part": pa.array(["even" if k % 2 == 0 else "odd", "even", "odd"], pa.string()),
    })
write_deltalake(path, batch(0), partition_by=["part"], configuration={"delta.checkpointInterval": "10"})
for k in range(1, 51):
    write_deltalake(path, batch(k), mode="overwrite" if k == 30 else "append")
def form(v):
    if isinstance(v, datetime.datetime):
        return v.astimezone(utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(v, datetime.date):
        return v.isoformat()
    return v
out = []
for v in range(0, 51):
    rows = DeltaTable(path, version=v).to_pyarrow_table().to_pylist()
    out.append([{k: form(x) for k, x in r.items()} for r in rows])
print(json.dumps(out))
"#;

/// Item 2: a table made only by deltalake (50 appends, checkpoints) mounts, and every version's
/// `data.jsonl` holds the same multiset of typed values as deltalake's reading of that version;
/// after the commits before a checkpoint are removed (Delta log cleanup), replay starts from the
/// Parquet checkpoint and the versions from it on still read the same.
#[test]
fn a_table_made_by_deltalake_mounts_and_every_version_matches_deltalake() {
    let f = empty_fixture();
    let expected: Vec<Vec<Value>> = serde_json::from_slice(&py(DELTALAKE_TABLE, &f.table)).unwrap();
    assert_eq!(expected.len(), 51);
    let checkpoints: Vec<_> = fs::read_dir(f.table.join("_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".checkpoint"))
        .collect();
    assert!(!checkpoints.is_empty(), "deltalake wrote no checkpoint");
    assert!(f.table.join("_delta_log/_last_checkpoint").exists());
    let want = |v: usize| -> Vec<String> {
        let mut r: Vec<String> = expected[v].iter().map(|x| x.to_string()).collect();
        r.sort();
        r
    };
    {
        let _m = f.mount();
        let schema: Value = serde_json::from_slice(&fs::read(f.m("v/50/schema.json")).unwrap()).unwrap();
        let types: Vec<_> = schema["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].clone())
            .collect();
        assert_eq!(
            serde_json::to_string(&types).unwrap(),
            r#"["int","int","int","int","float","float","str","bool","date","timestamp","str"]"#
        );
        for v in 0..=50usize {
            let got = fs::read(f.m(&format!("v/{v}/data.jsonl"))).unwrap_or_else(|e| panic!("v/{v}: {e}"));
            assert_eq!(multiset(&got), want(v), "version {v}: mount vs deltalake");
        }
        // incoming/ of a Parquet table is read-only: no JSONL lands in it.
        let e = fs::write(f.m("incoming/x.jsonl"), b"{}\n").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    }
    let t = f.t();
    assert_eq!(multiset(&f.td(&["read", &t, "--version", "35"])), want(35));
    // Writes are refused with exit 1, naming the provider; nothing is committed.
    let rows = f.dir.path().join("r.jsonl");
    fs::write(&rows, "{\"i8\":1}\n").unwrap();
    for cmd in ["append", "overwrite"] {
        let (code, _, err) = td_any(&[cmd, &t, "--file", rows.to_str().unwrap()]);
        assert_eq!(code, 1, "{cmd}: {err}");
        assert!(err.contains("parquet") && err.contains(cmd), "{cmd}: {err}");
    }
    let (code, _, err) = td_any(&["optimize", &t]);
    assert_eq!(code, 1, "optimize: {err}");
    assert!(!f.table.join("_delta_log/00000000000000000051.json").exists());
    // Log cleanup: the commits before the newest checkpoint are removed; replay starts from it.
    let newest = checkpoints
        .iter()
        .filter_map(|n| n.get(..20)?.parse::<u64>().ok())
        .max()
        .unwrap();
    for v in 0..newest {
        fs::remove_file(f.table.join(format!("_delta_log/{v:020}.json"))).unwrap();
    }
    let _ = fs::remove_dir_all(f.table.join("_tinydelta/checkpoints"));
    for v in newest as usize..=50 {
        assert_eq!(
            multiset(&f.td(&["read", &t, "--version", &v.to_string()])),
            want(v),
            "version {v} from the checkpoint"
        );
    }
    let _m = f.mount();
    let got = fs::read(f.m("latest/data.jsonl")).unwrap();
    assert_eq!(multiset(&got), want(50), "mount of the cleaned-up log");
}

/// Item 2: a reader feature tinydelta does not implement is refused naming the feature; one it
/// reads (timestampNtz, as deltalake writes it) is read.
#[test]
fn unsupported_reader_features_are_refused_by_name() {
    let f = empty_fixture();
    py(
        r#"
import sys, datetime, pyarrow as pa
from deltalake import write_deltalake
write_deltalake(sys.argv[1], pa.table({"n": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5)], pa.timestamp("us")), "x": pa.array([1], pa.int32())}))
"#,
        &f.table,
    );
    let t = f.t();
    let log0 = fs::read_to_string(f.table.join("_delta_log/00000000000000000000.json")).unwrap();
    assert!(log0.contains("timestampNtz"), "{log0}");
    assert_eq!(
        f.td(&["read", &t]),
        // A timestamp_ntz has no zone: no `Z` (docs/FORMAT.md "Column types").
        b"{\"n\":\"2024-01-02T03:04:05.000000\",\"x\":1}\n"
    );
    let commit = |features: &str| {
        format!(
            "{{\"commitInfo\":{{\"timestamp\":4000000000000,\"operation\":\"SET TBLPROPERTIES\"}}}}\n\
             {{\"protocol\":{{\"minReaderVersion\":3,\"minWriterVersion\":7,\"readerFeatures\":{features},\"writerFeatures\":{features}}}}}\n"
        )
    };
    fs::write(
        f.table.join("_delta_log/00000000000000000001.json"),
        commit("[\"timestampNtz\",\"catalogManaged\"]"),
    )
    .unwrap();
    let (code, out, err) = td_any(&["read", &t]);
    assert_eq!(code, 1, "{err}");
    assert!(
        out.is_empty() && err.contains("\"catalogManaged\", unsupported"),
        "{err}"
    );
    assert_eq!(lines(&f.td(&["read", &t, "--version", "0"])).len(), 1);
    let _m = f.mount();
    assert_eq!(
        fs::read(f.m("v/1/data.jsonl")).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
}

/// Item 1: when the table folder is not writable (another user's table), the converted rows go
/// to the reader's own cache folder (`$XDG_CACHE_HOME/tinydelta/<hash>/`), and nothing is
/// written into the table.
#[test]
fn a_reader_who_cannot_write_the_table_caches_in_their_own_folder() {
    let f = empty_fixture();
    py(
        r#"
import sys, pyarrow as pa
from deltalake import write_deltalake
write_deltalake(sys.argv[1], pa.table({"id": pa.array([1, 2], pa.int64()), "s": ["a", None]}))
"#,
        &f.table,
    );
    let u = user::test_user();
    user::open_to_others(f.dir.path());
    let cache = f.dir.path().join("cache");
    fs::create_dir(&cache).unwrap();
    std::os::unix::fs::chown(&cache, Some(u.uid), Some(u.gid)).unwrap();
    let out = u
        .command(TD_BIN)
        .args(["read", &f.t()])
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"id\":1,\"s\":\"a\"}\n{\"id\":2,\"s\":null}\n"
    );
    assert!(
        !f.table.join("_tinydelta").exists(),
        "wrote into a table it cannot write"
    );
    let tables: Vec<_> = fs::read_dir(cache.join("tinydelta")).unwrap().collect();
    assert_eq!(tables.len(), 1);
    let entries = fs::read_dir(tables[0].as_ref().unwrap().path()).unwrap().count();
    assert_eq!(entries, 1, "one converted file in the reader's cache");
}

/// Item 2: a multi-part Parquet checkpoint (PROTOCOL "Checkpoints": `<v>.checkpoint.<i>.<n>
/// .parquet`, all parts) starts replay like a classic one; one with a part missing is not used.
#[test]
fn a_multi_part_checkpoint_starts_replay() {
    let f = empty_fixture();
    py(
        r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
from deltalake import write_deltalake, DeltaTable
path = sys.argv[1]
for k in range(12):
    t = pa.table({"k": pa.array([k, k + 100], pa.int64()), "p": ["a" if k % 2 else "b", "c"]})
    write_deltalake(path, t, mode="append", partition_by=["p"])
DeltaTable(path).create_checkpoint()
"#,
        &f.table,
    );
    let t = f.t();
    let log = f.table.join("_delta_log");
    let before = multiset(&f.td(&["read", &t]));
    assert_eq!(before.len(), 24);
    let classic = log.join("00000000000000000011.checkpoint.parquet");
    assert!(classic.exists(), "deltalake wrote no checkpoint at version 11");
    // Split it into two parts, drop the classic file and every commit before version 11.
    py(
        r#"
import sys, os, pyarrow.parquet as pq
log = os.path.join(sys.argv[1], "_delta_log")
t = pq.read_table(os.path.join(log, "00000000000000000011.checkpoint.parquet"))
half = t.num_rows // 2
for i, part in enumerate([t.slice(0, half), t.slice(half)], start=1):
    pq.write_table(part, os.path.join(log, "00000000000000000011.checkpoint.%010d.%010d.parquet" % (i, 2)))
"#,
        &f.table,
    );
    fs::remove_file(&classic).unwrap();
    for v in 0..11 {
        fs::remove_file(log.join(format!("{v:020}.json"))).unwrap();
    }
    let _ = fs::remove_dir_all(f.table.join("_tinydelta/checkpoints"));
    assert_eq!(
        multiset(&f.td(&["read", &t])),
        before,
        "replay from the two-part checkpoint"
    );
    // Without its second part the checkpoint is incomplete: not used, and versions before the
    // oldest commit are not available.
    fs::remove_file(log.join("00000000000000000011.checkpoint.0000000002.0000000002.parquet")).unwrap();
    let (code, out, err) = td_any(&["read", &t]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty() && err.contains("not available"), "{err}");
    // The warning names the missing part, not a classic checkpoint that never existed.
    assert!(
        err.contains("00000000000000000011.checkpoint.0000000002.0000000002.parquet")
            && !err.contains("00000000000000000011.checkpoint.parquet"),
        "{err}"
    );
}

/// Review finding 1: a converted-rows cache entry planted by another user in a world-writable
/// table folder (sticky, 1777) is never trusted (docs/FORMAT.md, "Parquet data files"): `read`,
/// `check --deep`, `optimize` and `export` serve the Parquet file's own rows.
#[test]
fn a_cache_entry_planted_by_another_user_is_ignored() {
    let f = empty_fixture();
    let t = f.t();
    f.td(&["create", &t, "id:int", "s:str"]);
    crate::support::legacy_protocol(&f.table);
    let one = f.dir.path().join("one.jsonl");
    fs::write(&one, "{\"id\":0,\"s\":\"z\"}\n").unwrap();
    f.td(&["append", &t, "--file", one.to_str().unwrap()]);
    py(
        r#"
import sys, pyarrow as pa
from deltalake import write_deltalake
write_deltalake(sys.argv[1], pa.table({"id": pa.array([1, 2], pa.int64()), "s": ["a", None]}), mode="append")
"#,
        &f.table,
    );
    let real = "{\"id\":0,\"s\":\"z\"}\n{\"id\":1,\"s\":\"a\"}\n{\"id\":2,\"s\":null}\n";
    let planted = "{\"id\":6,\"s\":\"x\"}\n{\"id\":6,\"s\":null}\n";
    assert_eq!(real.len() - 17, planted.len());
    let private = f.dir.path().join("rootcache");
    let td = |args: &[&str]| {
        let out = std::process::Command::new(TD_BIN)
            .args(args)
            .env("XDG_CACHE_HOME", &private)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The entry's name, from a first read; then the cache is removed.
    assert_eq!(td(&["read", &t]).1, real);
    let jsonl = f.table.join("_tinydelta/jsonl");
    let names: Vec<String> = fs::read_dir(&jsonl)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    fs::remove_dir_all(f.table.join("_tinydelta")).unwrap();
    user::open_to_others(f.dir.path());
    fs::set_permissions(&f.table, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let u = user::test_user();
    let out = u.sh(
        &format!(
            "mkdir -p '{j}' && chmod 755 '{j}' && printf '%s' '{planted}' > '{j}/{n}' && chmod 644 '{j}/{n}'",
            j = jsonl.display(),
            n = names[0]
        ),
        &[],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read_to_string(jsonl.join(&names[0])).unwrap(), planted);

    let (code, out, err) = td(&["read", &t]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), real),
        "read served another user's cache entry: {err}"
    );
    let (code, _, err) = td(&["check", "--deep", &t]);
    assert_eq!(code, Some(0), "{err}");
    let dest = f.dir.path().join("exported");
    let (code, _, err) = td(&["export", &t, dest.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = td(&["optimize", &t]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(td(&["read", &t]).1, real, "optimize wrote another user's rows");
    let exported = td(&["read", dest.to_str().unwrap()]).1;
    assert_eq!(
        multiset(exported.as_bytes()),
        multiset(real.as_bytes()),
        "export copied another user's rows"
    );
    // The planted entry is still what the other user wrote: ignored, not trusted.
    assert_eq!(fs::read_to_string(jsonl.join(&names[0])).unwrap(), planted);
}

/// Review finding 2: the mount checks a Parquet data file at every open (and getattr) as it checks
/// a JSONL one, so once the file is resized or deleted, `data.jsonl` and `parts/` are EIO, never
/// the converted rows of what the file was.
#[test]
fn a_resized_or_deleted_parquet_file_is_eio_in_the_mount() {
    let f = empty_fixture();
    py(
        r#"
import sys, pyarrow as pa
from deltalake import write_deltalake
write_deltalake(sys.argv[1], pa.table({"id": pa.array([1, 2], pa.int64())}))
"#,
        &f.table,
    );
    let part = fs::read_dir(&f.table)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "parquet"))
        .expect("a parquet data file");
    let real = "{\"id\":1}\n{\"id\":2}\n";
    let _m = f.mount();
    for rel in ["v/0/data.jsonl", "v/0/parts/0000000.jsonl"] {
        assert_eq!(fs::read_to_string(f.m(rel)).unwrap(), real, "{rel}");
    }
    let saved = fs::read(&part).unwrap();
    let mut grown = saved.clone();
    grown.extend_from_slice(b"x\n");
    for (how, damage) in [("resized", Some(grown)), ("deleted", None)] {
        match &damage {
            Some(bytes) => fs::write(&part, bytes).unwrap(),
            None => fs::remove_file(&part).unwrap(),
        }
        for rel in ["v/0/data.jsonl", "v/0/parts/0000000.jsonl"] {
            let e = fs::read(f.m(rel)).expect_err(&format!("{how}: {rel} served old rows"));
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{how}: {rel}: {e}");
        }
        fs::write(&part, &saved).unwrap();
        assert_eq!(
            fs::read_to_string(f.m("v/0/data.jsonl")).unwrap(),
            real,
            "{how}: restored"
        );
    }
}

/// Review finding 4: a null in a NOT NULL column of a Parquet data file is refused when it is
/// converted, naming the file, the row and the column, as in JSONL data; `check --deep` says so.
#[test]
fn a_null_in_a_not_null_column_of_a_parquet_file_is_refused() {
    let f = empty_fixture();
    let t = f.t();
    py(
        r#"
import sys, json, os, pyarrow as pa
from deltalake import write_deltalake
write_deltalake(sys.argv[1], pa.table({"id": pa.array([None, 2], pa.int64())}))
# The log now says `id` is NOT NULL (as `tinydelta create T id:int!` would).
p = os.path.join(sys.argv[1], "_delta_log", "00000000000000000000.json")
out = []
for line in open(p):
    a = json.loads(line)
    if "metaData" in a:
        s = json.loads(a["metaData"]["schemaString"])
        s["fields"][0]["nullable"] = False
        a["metaData"]["schemaString"] = json.dumps(s)
    out.append(json.dumps(a))
open(p, "w").write("\n".join(out) + "\n")
"#,
        &f.table,
    );
    let (code, out, err) = td_any(&["read", &t]);
    assert_eq!(code, 1, "read gave {}", String::from_utf8_lossy(&out));
    assert!(
        err.contains(".parquet") && err.contains("row 1") && err.contains("\"id\"") && err.contains("NOT NULL"),
        "{err}"
    );
    let (code, out, err) = td_any(&["check", "--deep", &t]);
    let said = format!("{}{err}", String::from_utf8_lossy(&out));
    assert_ne!(code, 0, "check --deep called it whole: {said}");
    assert!(said.contains("NOT NULL") && said.contains("row 1"), "{said}");
}

/// The start of the first column chunk of `bytes` (a Parquet file) as its footer says, if the
/// footer parses.
fn first_chunk_start(bytes: &[u8], scratch: &Path) -> Option<i64> {
    fs::write(scratch, bytes).unwrap();
    let file = fs::File::open(scratch).unwrap();
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&file)
        .ok()?;
    let c = meta.row_groups().first()?.columns().first()?;
    Some(c.dictionary_page_offset().unwrap_or(c.data_page_offset()))
}

/// `good` with one footer byte changed so that the footer still parses but its first column
/// chunk starts at a negative offset (the sign of a zigzag varint flipped).
fn negative_chunk_start(good: &[u8], scratch: &Path) -> Vec<u8> {
    let n = good.len();
    let footer = u32::from_le_bytes(good[n - 8..n - 4].try_into().unwrap()) as usize;
    for i in n - 8 - footer..n - 8 {
        let mut bad = good.to_vec();
        bad[i] ^= 1;
        if first_chunk_start(&bad, scratch).is_some_and(|s| s < 0) {
            return bad;
        }
    }
    panic!("no footer byte makes the first column chunk start negative");
}

/// A Parquet data file whose footer puts a column chunk at a negative offset is an error naming
/// the file (exit 1; the parquet crate used to panic, exit 101), and EIO in the mount, whose
/// daemon lives on (docs/FORMAT.md "Parquet data files").
#[test]
fn a_negative_column_chunk_offset_is_an_error_not_a_panic() {
    let f = empty_fixture();
    f.td(&["create", &f.t(), "id:int!", "s:str"]);
    let rows = f.dir.path().join("rows.jsonl");
    fs::write(&rows, "{\"id\":1,\"s\":\"a\"}\n{\"id\":2,\"s\":\"b\"}\n").unwrap();
    f.td(&["append", &f.t(), "--file", rows.to_str().unwrap()]);
    // An exported table: a Delta table with Parquet data files, which tinydelta reads and mounts.
    let dest = f.dir.path().join("exported");
    f.td(&["export", &f.t(), dest.to_str().unwrap()]);
    let data = fs::read_dir(&dest)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a Parquet data file in the export");
    let name = data.file_name().unwrap().to_string_lossy().into_owned();
    let good = fs::read(&data).unwrap();
    let bad = negative_chunk_start(&good, &f.dir.path().join("scratch.parquet"));
    fs::write(&data, &bad).unwrap();
    let d = dest.to_str().unwrap();
    let (code, out, err) = td_any(&["read", d]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "printed rows of a damaged file");
    assert!(err.contains(&name) && err.contains("outside the file"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let g = Fixture {
        dir: tempfile::tempdir().unwrap(),
        table: dest.clone(),
        mnt: f.mnt.clone(),
    };
    let m = g.mount();
    let e = fs::read(g.m("latest/data.jsonl")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    assert!(alive(m.pid), "the daemon died of a damaged Parquet file");
    assert!(fs::read_dir(g.m("v")).is_ok());
    fs::write(&data, &good).unwrap();
    assert_eq!(lines(&f.td(&["read", d])).len(), 2);
}
