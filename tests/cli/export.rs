//! `tinydelta export` (docs/EXPORT.md "Export") read back by real Delta readers: the `deltalake`
//! Python package (delta-rs) and DuckDB's `read_parquet` must see, at every version, the rows
//! `tinydelta read --version N` prints (row counts and per-column checksums over typed values,
//! `scripts/export_check.py`); `load_as_version(datetime)` must pick the same versions as the
//! source's commit times; re-running continues, and refuses a DEST another writer changed.
//!
//! DuckDB reads the Parquet files deltalake lists for each version with `read_parquet`, and
//! DEST's newest version with `delta_scan` (its delta extension as packaged for pip,
//! `duckdb-extension-delta`, which scripts/test.sh installs into `.venv-delta`: it pins the
//! duckdb version it was built for, so it lives apart from `.venv`).
//!
//! Needs a Python with deltalake, pyarrow and duckdb: `$TINYDELTA_PYTHON`, or `.venv/bin/python`
//! in the repository (`scripts/test.sh` creates it). Without one the tests fail; they never skip.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::*;

const TYPES: &[&str] = &[
    "id:int!",
    "name:str",
    "score:float",
    "ok:bool",
    "day:date",
    "at:timestamp",
    "note:str",
];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The interpreter that has `deltalake`: `$TINYDELTA_PYTHON` or the repository's `.venv`.
pub(crate) fn python() -> PathBuf {
    let py = match std::env::var_os("TINYDELTA_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => manifest_dir().join(".venv/bin/python"),
    };
    assert!(
        py.exists(),
        "no Python for the export test at {} (TINYDELTA_PYTHON is {:?}). Run scripts/test.sh: it creates \
         .venv with deltalake, pyarrow and duckdb and sets TINYDELTA_PYTHON.",
        py.display(),
        std::env::var_os("TINYDELTA_PYTHON"),
    );
    py
}

/// The interpreter with DuckDB's delta extension (`duckdb-extension-delta`, which pins its own
/// duckdb version, so it has a venv of its own): `$TINYDELTA_DELTA_PYTHON` or `.venv-delta`.
pub(crate) fn delta_python() -> PathBuf {
    let py = match std::env::var_os("TINYDELTA_DELTA_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => manifest_dir().join(".venv-delta/bin/python"),
    };
    assert!(
        py.exists(),
        "no Python with DuckDB's delta extension at {} (TINYDELTA_DELTA_PYTHON is {:?}). Run scripts/test.sh: \
         it creates .venv-delta with duckdb-extension-delta and sets TINYDELTA_DELTA_PYTHON.",
        py.display(),
        std::env::var_os("TINYDELTA_DELTA_PYTHON"),
    );
    py
}

/// Run a Python snippet (or script with args) feeding `input`; panics unless it exits 0.
fn py(args: &[&str], input: &[u8]) -> Vec<u8> {
    py_with(&python(), args, input)
}

pub(crate) fn py_with(interpreter: &Path, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut c = Command::new(interpreter);
    c.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("feed python");
    let out = child.wait_with_output().expect("wait for python");
    assert!(
        out.status.success(),
        "python {args:?} failed with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub(crate) fn export(src: &TempTable, dest: &Path, flags: &[&str]) -> Out {
    let mut a = vec!["export".to_string(), src.p(), dest.display().to_string()];
    a.extend(flags.iter().map(|f| f.to_string()));
    td(&a)
}

/// `(name, Delta type in DEST)` of the source's columns at its latest version.
fn columns(src: &TempTable) -> Vec<(String, String)> {
    src.describe()["schema"]
        .as_array()
        .expect("describe --json has schema")
        .iter()
        .map(|c| {
            // The Delta type of the exported column (a source's `integer` is exported as `long`).
            let ty = match c["type"].as_str().unwrap() {
                "int" => "long",
                "float" => "double",
                "str" => "string",
                "bool" => "boolean",
                other => other,
            };
            (c["name"].as_str().unwrap().to_string(), ty.to_string())
        })
        .collect()
}

/// Commit times of the source (`history --json`), by version.
fn source_times(src: &TempTable) -> BTreeMap<u64, i64> {
    let h = src.td("history", &["--json"]).ok().json();
    h.as_array()
        .expect("history --json is an array")
        .iter()
        .map(|e| (e["version"].as_u64().unwrap(), e["timestamp"].as_i64().unwrap()))
        .collect()
}

/// The lines of DEST's commit `v`, parsed.
pub(crate) fn dest_commit(dest: &Path, v: u64) -> Vec<Value> {
    let p = dest.join(format!("_delta_log/{v:020}.json"));
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a commit line is JSON"))
        .collect()
}

/// DEST's `metaData` at version 0 and the Delta types of its schema's fields.
fn dest_metadata(dest: &Path) -> (Value, Vec<String>) {
    let meta = dest_commit(dest, 0)
        .into_iter()
        .find_map(|l| l.get("metaData").cloned())
        .expect("metaData in version 0");
    let schema: Value = serde_json::from_str(meta["schemaString"].as_str().unwrap()).unwrap();
    let types = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["type"].as_str().unwrap().to_string())
        .collect();
    (meta, types)
}

/// The mtime of DEST's commit `v`, ms since the epoch.
fn mtime_ms(dest: &Path, v: u64) -> i64 {
    std::fs::metadata(dest.join(format!("_delta_log/{v:020}.json")))
        .unwrap()
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn dest_versions(dest: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(dest.join("_delta_log"))
        .expect("list DEST's log")
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            (n.len() == 25 && n.ends_with(".json")).then(|| n[..20].parse().unwrap())
        })
        .collect();
    v.sort_unstable();
    v
}

/// One DEST version to check: it must hold the rows of `source` version, and deltalake's
/// time travel to `timestamp` (ms) must load it (and 1 ms before, the version before).
struct Expect {
    dest: u64,
    source: u64,
    timestamp: i64,
}

/// deltalake and DuckDB against `tinydelta read` for every `Expect`; commit file mtimes against
/// `commitInfo.timestamp`; every add with stats. Returns the number of versions compared.
fn assert_readers_agree(src: &TempTable, dest: &Path, expect: &[Expect], time_travel: bool) -> usize {
    let tmp = tempfile::tempdir().unwrap();
    let cols = columns(src);
    let mut versions = Vec::new();
    for e in expect {
        let jsonl = tmp.path().join(format!("v{}.jsonl", e.source));
        std::fs::write(&jsonl, src.read_v(e.source)).unwrap();
        // tinydelta reads the Parquet files back too (docs/FORMAT.md, "Parquet data files").
        let dest_jsonl = tmp.path().join(format!("dest{}.jsonl", e.dest));
        let back = td(&["read", dest.to_str().unwrap(), "--version", &e.dest.to_string()]).ok();
        std::fs::write(&dest_jsonl, back.stdout).unwrap();
        versions.push(json!({"version": e.dest, "jsonl": jsonl, "dest_jsonl": dest_jsonl, "timestamp": e.timestamp}));
        // The commit's time, in the log and as the file's mtime.
        let commit = dest_commit(dest, e.dest);
        let info = &commit[0]["commitInfo"];
        assert_eq!(info["timestamp"], e.timestamp, "DEST version {}: {info}", e.dest);
        assert_eq!(
            mtime_ms(dest, e.dest),
            e.timestamp,
            "DEST version {}: commit file mtime",
            e.dest
        );
        for a in commit.iter().filter_map(|l| l.get("add")) {
            let stats: Value = serde_json::from_str(a["stats"].as_str().expect("add.stats")).unwrap();
            for k in ["numRecords", "minValues", "maxValues", "nullCount"] {
                assert!(
                    stats.get(k).is_some(),
                    "DEST version {}: stats without {k}: {stats}",
                    e.dest
                );
            }
            assert!(a["path"].as_str().unwrap().ends_with(".parquet"), "{a}");
        }
    }
    let req = json!({"dest": dest, "columns": cols, "versions": versions});
    let script = manifest_dir().join("scripts/export_check.py");
    let out = py(&[script.to_str().unwrap()], req.to_string().as_bytes());
    let out: Value = serde_json::from_slice(&out).expect("export_check.py prints JSON");
    for (e, v) in expect.iter().zip(out["versions"].as_array().unwrap()) {
        let ctx = format!("DEST version {} (source version {})", e.dest, e.source);
        assert_eq!(v["version"], e.dest);
        assert_eq!(
            v["deltalake"], v["expected"],
            "{ctx}: deltalake {} vs tinydelta read",
            out["deltalake"]
        );
        assert_eq!(
            v["duckdb"], v["expected"],
            "{ctx}: DuckDB read_parquet vs tinydelta read"
        );
        assert_eq!(
            v["dest_jsonl"], v["expected"],
            "{ctx}: tinydelta read of DEST vs of the source"
        );
        let rows = src.describe_v(e.source)["numRecords"].as_u64().unwrap();
        assert_eq!(v["expected"]["rows"], rows, "{ctx}: rows");
    }
    // DuckDB's delta_scan reads DEST's newest version.
    let last = expect.last().expect("at least one version to check");
    assert_eq!(
        dest_versions(dest).last(),
        Some(&last.dest),
        "the last version checked is DEST's newest"
    );
    let newest = &out["versions"].as_array().unwrap().last().unwrap()["expected"];
    let scan = py_with(
        &delta_python(),
        &[script.to_str().unwrap(), "--delta-scan"],
        req.to_string().as_bytes(),
    );
    let scan: Value = serde_json::from_slice(&scan).expect("export_check.py --delta-scan prints JSON");
    assert_eq!(
        &scan["delta_scan"], newest,
        "DuckDB {} delta_scan of DEST version {}",
        scan["duckdb"], last.dest
    );
    if time_travel {
        for (e, t) in expect.iter().zip(out["time_travel"].as_array().unwrap()) {
            assert_eq!(t["at"], e.dest, "deltalake load_as_version(time of version {})", e.dest);
            if e.dest > 0 {
                assert_eq!(
                    t["before"],
                    e.dest - 1,
                    "load_as_version(1 ms before version {})",
                    e.dest
                );
            }
        }
    }
    expect.len()
}

trait DescribeV {
    fn describe_v(&self, v: u64) -> Value;
}

impl DescribeV for TempTable {
    fn describe_v(&self, v: u64) -> Value {
        self.td("describe", &["--version", &v.to_string(), "--json"])
            .ok()
            .json()
    }
}

/// `--all-versions`: DEST version k holds source version k, for every k in `versions`.
fn all_versions(src: &TempTable, versions: impl IntoIterator<Item = u64>) -> Vec<Expect> {
    let times = source_times(src);
    versions
        .into_iter()
        .map(|k| Expect {
            dest: k,
            source: k,
            timestamp: times[&k],
        })
        .collect()
}

fn types_table() -> TempTable {
    let t = TempTable::new(TYPES);
    t.append_file("delta_compat/types-a.jsonl");
    t.append_file("delta_compat/types-b.jsonl");
    let c = data("delta_compat/types-c.jsonl");
    t.td("overwrite", &["--file", c.to_str().unwrap()]).ok();
    t.td("restore", &["--version", "2"]).ok();
    t
}

/// Every column chunk of every Parquet file in DEST is snappy-compressed.
fn assert_snappy(dest: &Path) -> usize {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let mut n = 0;
    for e in std::fs::read_dir(dest).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "parquet") {
            let r = SerializedFileReader::new(std::fs::File::open(&p).unwrap()).unwrap();
            for rg in r.metadata().row_groups() {
                for c in rg.columns() {
                    assert_eq!(c.compression(), parquet::basic::Compression::SNAPPY, "{}", p.display());
                }
            }
            n += 1;
        }
    }
    n
}

#[test]
fn all_versions_read_the_same_in_deltalake_and_duckdb_with_time_travel() {
    let src = types_table();
    // A schema change: rows written before lack the new column (null in DEST).
    src.td("alter", &["add-column", "extra:str"]).ok();
    src.append(b"{\"id\":9,\"name\":\"x\",\"extra\":\"new\",\"at\":\"2024-06-01T00:00:00.5Z\"}\n");
    let latest = src.latest();
    assert_eq!(latest, 6);
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    let out = export(&src, &dest, &["--all-versions"]).ok();
    assert!(out.text().contains("as versions 0-6"), "{}", out.text());
    assert_eq!(dest_versions(&dest), (0..=6).collect::<Vec<_>>());

    // Version 0: protocol 1/2, provider parquet, the schema with Delta's types.
    let c0 = dest_commit(&dest, 0);
    let proto = c0
        .iter()
        .find_map(|l| l.get("protocol"))
        .expect("protocol in version 0");
    assert_eq!(proto, &json!({"minReaderVersion": 1, "minWriterVersion": 2}));
    let (meta, types) = dest_metadata(&dest);
    assert_eq!(meta["format"]["provider"], "parquet");
    assert_eq!(
        types,
        ["long", "string", "double", "boolean", "date", "timestamp", "string"]
    );
    // The restore (version 4) removes and adds as the source did, one to one.
    let src_commit = src.commit(4);
    let dest4 = dest_commit(&dest, 4);
    for action in ["add", "remove"] {
        let n = |c: &[Value]| c.iter().filter(|l| l.get(action).is_some()).count();
        assert_eq!(n(&dest4), n(&src_commit), "{action}s of version 4");
    }
    assert_eq!(dest4[0]["commitInfo"]["operation"], "RESTORE");
    assert_eq!(
        dest4[0]["commitInfo"]["operationParameters"]["tinydeltaExportSourceVersion"],
        "4"
    );

    let n = assert_readers_agree(&src, &dest, &all_versions(&src, 0..=latest), true);
    assert_eq!(n, 7);
    // Every exported commit passes tinydelta's own completeness checks (docs/FORMAT.md).
    let check = td(&["check", dest.to_str().unwrap()]).ok();
    assert!(check.text().contains("whole, versions up to 6"), "{}", check.text());
    assert!(assert_snappy(&dest) >= 4);
}

#[test]
fn the_flights_sample_exported_with_all_versions() {
    let src = TempTable::new(FLIGHTS);
    src.append_file("flights-a.jsonl");
    src.append_file("flights-b.jsonl");
    let c = data("flights-c.jsonl");
    src.td("overwrite", &["--file", c.to_str().unwrap()]).ok();
    src.append_file("flights-a.jsonl");
    src.td("restore", &["--version", "2"]).ok();
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("flights");
    let out = export(&src, &dest, &["--all-versions"]).ok();
    assert!(out.text().contains("as versions 0-5"), "{}", out.text());
    // A small table's sizes in the unit that shows them (kB for the Parquet here), never "0.0 MB".
    assert!(
        out.text().contains(" kB of Parquet") && !out.text().contains("0.0 MB"),
        "{}",
        out.text()
    );
    assert_eq!(assert_readers_agree(&src, &dest, &all_versions(&src, 0..=5), true), 6);
    // Columnar and compressed: the Parquet files are far smaller than the JSONL they hold.
    let size = |dir: &Path, ext: &str| -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum()
    };
    let (jsonl, parquet) = (size(&src.path, "jsonl"), size(&dest, "parquet"));
    assert!(parquet * 4 < jsonl, "Parquet {parquet} bytes vs JSONL {jsonl} bytes");
}

#[test]
fn a_rerun_continues_and_refuses_a_dest_another_writer_changed() {
    let src = TempTable::new(TYPES);
    src.append_file("delta_compat/types-a.jsonl");
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    assert!(
        export(&src, &dest, &["--all-versions"])
            .ok()
            .text()
            .contains("as versions 0-1")
    );
    src.append_file("delta_compat/types-b.jsonl");
    let c = data("delta_compat/types-c.jsonl");
    src.td("overwrite", &["--file", c.to_str().unwrap()]).ok();
    let out = export(&src, &dest, &["--all-versions"]).ok();
    assert!(out.text().contains("as versions 2-3"), "{}", out.text());
    assert_readers_agree(&src, &dest, &all_versions(&src, 0..=3), true);
    // Nothing new: nothing committed.
    let out = export(&src, &dest, &["--all-versions"]).ok();
    assert!(
        out.text().contains("up to date: it holds version 3 of"),
        "{}",
        out.text()
    );
    assert_eq!(dest_versions(&dest), vec![0, 1, 2, 3]);

    // While another export holds DEST (its flock on the folder): refused.
    let held = std::fs::File::open(&dest).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    export(&src, &dest, &["--all-versions"])
        .code(1)
        .stderr_has(&["another export into it is running"]);
    drop(held);
    // The wrong mode, or another table into the same DEST: refused, nothing written.
    export(&src, &dest, &[])
        .code(1)
        .stderr_has(&["cannot export into", "all-versions mode", "nothing was exported"]);
    let other = TempTable::new(TYPES);
    export(&other, &dest, &["--all-versions"])
        .code(1)
        .stderr_has(&["is an export of the table with id"]);
    // A folder holding something else is not written into.
    let stray = tmp.path().join("stray");
    std::fs::create_dir(&stray).unwrap();
    std::fs::write(stray.join("notes.txt"), "mine").unwrap();
    export(&src, &stray, &["--all-versions"])
        .code(1)
        .stderr_has(&["\"notes.txt\"", "no Delta table"]);
    assert!(!stray.join("_delta_log").join(format!("{:020}.json", 0)).exists());

    // Another writer appends to DEST (deltalake), then the source moves on: refused.
    py(
        &[
            "-c",
            "import sys, deltalake\n\
             dt = deltalake.DeltaTable(sys.argv[1])\n\
             deltalake.write_deltalake(sys.argv[1], dt.to_pyarrow_table().slice(0, 1), mode='append')\n",
            dest.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(dest_versions(&dest), vec![0, 1, 2, 3, 4]);
    src.append_file("delta_compat/types-a.jsonl");
    export(&src, &dest, &["--all-versions"]).code(1).stderr_has(&[
        "newest version 4 was not written by tinydelta export",
        "another writer committed after the export's version 3",
    ]);
    assert_eq!(dest_versions(&dest), vec![0, 1, 2, 3, 4]);
}

#[test]
fn an_interrupted_export_leaves_dest_readable_and_a_rerun_finishes_it() {
    let src = TempTable::new(TYPES);
    src.append_file("delta_compat/types-a.jsonl");
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    export(&src, &dest, &["--all-versions"]).ok();
    src.append_file("delta_compat/types-b.jsonl");
    src.append_file("delta_compat/types-c.jsonl");
    // Killed after writing version 2's Parquet file, before its commit is linked.
    let mut c = cmd(&["export", &src.p(), dest.to_str().unwrap(), "--all-versions"]);
    c.env("TINYDELTA_FAILPOINT", "before-link=kill");
    let out = run(c, b"");
    assert_eq!(out.code, -1, "killed by the failpoint: {}", out.stderr);
    assert_eq!(dest_versions(&dest), vec![0, 1]);
    assert_readers_agree(&src, &dest, &all_versions(&src, 0..=1), true);
    let out = export(&src, &dest, &["--all-versions"]).ok();
    assert!(out.text().contains("as versions 2-3"), "{}", out.text());
    assert_readers_agree(&src, &dest, &all_versions(&src, 0..=3), true);

    // Killed right after version 4 is linked, before its file's mtime is set: the version is
    // there; the next run sets its time (checked by assert_readers_agree) and goes on.
    src.append_file("delta_compat/types-a.jsonl");
    src.append_file("delta_compat/types-b.jsonl");
    let mut c = cmd(&["export", &src.p(), dest.to_str().unwrap(), "--all-versions"]);
    c.env("TINYDELTA_FAILPOINT", "after-link=kill");
    assert_eq!(run(c, b"").code, -1);
    assert_eq!(dest_versions(&dest), vec![0, 1, 2, 3, 4]);
    let stamped = dest_commit(&dest, 4)[0]["commitInfo"]["timestamp"].as_i64().unwrap();
    assert_ne!(
        mtime_ms(&dest, 4),
        stamped,
        "the kill came before the commit's time was set"
    );
    let out = export(&src, &dest, &["--all-versions"]).ok();
    assert!(out.text().contains("as version 5 "), "{}", out.text());
    assert_readers_agree(&src, &dest, &all_versions(&src, 0..=5), true);
}

#[test]
fn one_version_then_the_difference_to_a_later_one() {
    let src = types_table();
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("latest");
    assert!(
        export(&src, &dest, &[])
            .ok()
            .text()
            .contains("as version 0 (holding version 4 ")
    );
    let older = tmp.path().join("v1");
    export(&src, &older, &["--version", "1"]).ok();
    src.append_file("delta_compat/types-c.jsonl");
    let out = export(&src, &dest, &[]).ok();
    assert!(
        out.text().contains("as version 1 (holding version 5 "),
        "{}",
        out.text()
    );
    let c1 = dest_commit(&dest, 1);
    assert_eq!(c1[0]["commitInfo"]["operationParameters"]["mode"], "Append");
    let time = |v: u64| dest_commit(&dest, v)[0]["commitInfo"]["timestamp"].as_i64().unwrap();
    let expect = [
        Expect {
            dest: 0,
            source: 4,
            timestamp: time(0),
        },
        Expect {
            dest: 1,
            source: 5,
            timestamp: time(1),
        },
    ];
    assert_readers_agree(&src, &dest, &expect, true);
    let t = dest_commit(&older, 0)[0]["commitInfo"]["timestamp"].as_i64().unwrap();
    assert_readers_agree(
        &src,
        &older,
        &[Expect {
            dest: 0,
            source: 1,
            timestamp: t,
        }],
        true,
    );
    // Going back to version 3 (one row) removes the other files.
    export(&src, &older, &["--version", "3"]).ok();
    let c1 = dest_commit(&older, 1);
    assert_eq!(c1[0]["commitInfo"]["operationParameters"]["mode"], "Overwrite");
    let t1 = c1[0]["commitInfo"]["timestamp"].as_i64().unwrap();
    assert_readers_agree(
        &src,
        &older,
        &[Expect {
            dest: 1,
            source: 3,
            timestamp: t1,
        }],
        true,
    );
}

#[test]
fn a_delta_checkpoint_every_100_versions_that_deltalake_reads() {
    let src = TempTable::new(TYPES);
    for i in 0..104 {
        src.append(
            format!(
                "{{\"id\":{i},\"name\":\"n{i}\",\"at\":\"2024-01-01T00:00:{:02}Z\"}}\n",
                i % 60
            )
            .as_bytes(),
        );
    }
    let c = data("delta_compat/types-c.jsonl");
    src.td("overwrite", &["--file", c.to_str().unwrap()]).ok();
    assert_eq!(src.latest(), 105);
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    let out = export(&src, &dest, &["--all-versions"]).ok();
    assert!(out.text().contains("checkpoints at [100]"), "{}", out.text());
    let log = dest.join("_delta_log");
    assert!(log.join(format!("{:020}.checkpoint.parquet", 100)).is_file());
    let last: Value = serde_json::from_slice(&std::fs::read(log.join("_last_checkpoint")).unwrap()).unwrap();
    assert_eq!(last["version"], 100);
    // Protocol, metaData and the 100 live files of version 100 (no removes before version 105).
    assert_eq!(last["size"], 102);
    assert_readers_agree(&src, &dest, &all_versions(&src, [0, 1, 99, 100, 101, 105]), true);

    // Without the commits before the checkpoint, a reader must build version 100 from it.
    let cleaned = tmp.path().join("cleaned");
    std::fs::create_dir(&cleaned).unwrap();
    for e in std::fs::read_dir(&dest).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, cleaned.join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::create_dir(cleaned.join("_delta_log")).unwrap();
    for e in std::fs::read_dir(&log).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let old_commit = name.ends_with(".json") && name[..20].parse::<u64>().is_ok_and(|v| v < 100);
        if !old_commit {
            std::fs::copy(&p, cleaned.join("_delta_log").join(&name)).unwrap();
            let t = std::fs::metadata(&p).unwrap().modified().unwrap();
            std::fs::File::options()
                .write(true)
                .open(cleaned.join("_delta_log").join(&name))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
    }
    assert_readers_agree(&src, &cleaned, &all_versions(&src, [100, 101, 105]), false);
}

#[test]
fn bad_rows_in_a_source_data_file_fail_naming_the_file_and_line() {
    let src = TempTable::new(TYPES);
    src.append_file("delta_compat/types-a.jsonl");
    src.append_file("delta_compat/types-b.jsonl");
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    // Version 2's file: the same size, a string where an int belongs on its second line.
    let part = src
        .commit(2)
        .iter()
        .find_map(|l| l.get("add").map(|a| a["path"].as_str().unwrap().to_string()))
        .unwrap();
    let p = src.path.join(&part);
    let bytes = std::fs::read_to_string(&p).unwrap();
    let second = bytes.lines().nth(1).unwrap();
    let broken = second.replacen("\"id\":5", "\"id\":\"", 1);
    assert_eq!(broken.len(), second.len());
    std::fs::write(&p, bytes.replacen(second, &broken, 1)).unwrap();
    let out = export(&src, &dest, &["--all-versions"]);
    let out = out.code(1);
    // The message says what this run did publish (review finding 5).
    let out = out.stderr_has(&[
        &part,
        "line 2",
        "this run published versions 0-1 of",
        "nothing after was exported",
    ]);
    assert!(!out.stderr.contains("nothing was"), "{}", out.stderr);
    // Versions before the bad file were exported and read normally.
    assert_eq!(dest_versions(&dest), vec![0, 1]);
    // A refused run that published nothing leaves no folder of its own behind.
    let fresh = tmp.path().join("fresh");
    export(&src, &fresh, &["--version", "99"]).code(4);
    assert!(!fresh.exists(), "a refused export left {} behind", fresh.display());
    assert_readers_agree(&src, &dest, &all_versions(&src, 0..=1), true);
}

/// A deltalake append of two rows (a Parquet data file) into the TYPES table `sys.argv[1]`.
const DELTALAKE_APPEND: &str = r#"
import sys, datetime, pyarrow as pa
from deltalake import write_deltalake
utc = datetime.timezone.utc
write_deltalake(sys.argv[1], pa.table({
    "id": pa.array([7, 8], pa.int64()),
    "name": pa.array(['x"y', None], pa.string()),
    "score": pa.array([2.25, None], pa.float64()),
    "ok": pa.array([True, None], pa.bool_()),
    "day": pa.array([datetime.date(2024, 2, 3), None], pa.date32()),
    "at": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=utc), None], pa.timestamp("us", tz="UTC")),
    "note": pa.array([None, "n"], pa.string()),
}), mode="append")
"#;

/// A table made by deltalake at `sys.argv[1]`: partitioned, 32-bit types, versions 0-5.
const DELTALAKE_TABLE: &str = r#"
import sys, pyarrow as pa
from deltalake import write_deltalake
def batch(k):
    return pa.table({
        "i32": pa.array([k, None, -k], pa.int32()),
        "f32": pa.array([k + 0.5, 0.25, None], pa.float32()),
        "s": pa.array(["a%d" % k, None, "c"], pa.string()),
        "part": pa.array(["even" if k % 2 == 0 else "odd", "even", "odd"], pa.string()),
    })
write_deltalake(sys.argv[1], batch(0), partition_by=["part"])
for k in range(1, 6):
    write_deltalake(sys.argv[1], batch(k), mode="overwrite" if k == 3 else "append")
"#;

#[test]
fn a_table_with_another_writers_parquet_file_is_exported() {
    let src = TempTable::new(TYPES);
    crate::support::legacy_protocol(&src.path);
    src.append_file("delta_compat/types-a.jsonl");
    // deltalake appends a Parquet file into the tinydelta table.
    py(&["-c", DELTALAKE_APPEND, &src.p()], b"");
    let c = data("delta_compat/types-c.jsonl");
    src.td("overwrite", &["--file", c.to_str().unwrap()]).ok();
    src.td("restore", &["--version", "2"]).ok();
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    let out = export(&src, &dest, &["--all-versions"]).ok();
    assert!(out.text().contains("as versions 0-4"), "{}", out.text());
    assert_readers_agree(&src, &dest, &all_versions(&src, 0..=4), true);
}

#[test]
fn a_partitioned_table_made_by_deltalake_is_exported_unpartitioned() {
    let src = TempTable::uncreated();
    py(&["-c", DELTALAKE_TABLE, &src.p()], b"");
    assert_eq!(src.latest(), 5);
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    export(&src, &dest, &["--all-versions"]).ok();
    let (meta, types) = dest_metadata(&dest);
    assert_eq!(meta["partitionColumns"], json!([]));
    assert_eq!(types, ["long", "double", "string", "string"]);
    assert_readers_agree(&src, &dest, &all_versions(&src, 0..=5), true);
}

/// Reads DEST with deltalake: for each row (by `id`), the bits of `x` as a hex u64; then the
/// bits of every `add`'s `minValues.x` and `maxValues.x` (parsed by Python's exact `json`).
const FLOAT_BITS: &str = r#"
import sys, glob, json, struct
from deltalake import DeltaTable
bits = lambda f: struct.unpack('<Q', struct.pack('<d', f))[0]
t = DeltaTable(sys.argv[1]).to_pyarrow_table().sort_by('id')
print(json.dumps([format(bits(v), 'x') for v in t.column('x').to_pylist()]))
stats = [json.loads(json.loads(l)['add']['stats']) for f in glob.glob(sys.argv[1] + '/_delta_log/*.json')
         for l in open(f) if '"add"' in l]
print(json.dumps([[format(bits(s['minValues']['x']), 'x'), format(bits(s['maxValues']['x']), 'x')] for s in stats]))
"#;

#[test]
fn every_double_survives_export_bit_for_bit_values_and_statistics() {
    // Random bit patterns (xorshift64*): every exponent, subnormals, both signs; plus the
    // values seen changed by one ulp.
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut vals = vec![-2.5e-308, 123456789.12345679, 5e-324, -0.0, f64::MAX, f64::MIN_POSITIVE];
    while vals.len() < 20_000 {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        let f = f64::from_bits(s.wrapping_mul(0x2545_F491_4F6C_DD1D));
        if f.is_finite() {
            vals.push(f);
        }
    }
    let mut rows = String::new();
    for (i, v) in vals.iter().enumerate() {
        // Rust's `{:?}` is the shortest text that reads back as the same double.
        rows.push_str(&format!("{{\"id\":{i},\"x\":{v:?}}}\n"));
    }
    let src = TempTable::new(&["id:int!", "x:float"]);
    src.append(rows.as_bytes());
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    export(&src, &dest, &[]).ok();
    let out = String::from_utf8(py(&["-c", FLOAT_BITS, dest.to_str().unwrap()], b"")).unwrap();
    let mut lines = out.lines();
    let got: Vec<String> = serde_json::from_str(lines.next().unwrap()).unwrap();
    let want: Vec<String> = vals.iter().map(|v| format!("{:x}", v.to_bits())).collect();
    let changed: Vec<(usize, &String, &String)> = want
        .iter()
        .zip(&got)
        .enumerate()
        .filter(|(_, (w, g))| w != g)
        .map(|(i, (w, g))| (i, w, g))
        .collect();
    assert_eq!(got.len(), vals.len());
    assert!(
        changed.is_empty(),
        "{} of {} doubles changed, e.g. {:?}",
        changed.len(),
        vals.len(),
        &changed[..changed.len().min(5)]
    );
    // Statistics: the exact min and max (a -0.0 minimum is written as 0.0, as Delta writers do).
    let stats: Vec<(String, String)> = serde_json::from_str(lines.next().unwrap()).unwrap();
    let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(
        stats,
        vec![(format!("{:x}", min.to_bits()), format!("{:x}", max.to_bits()))]
    );
    // tinydelta reads DEST back with the same text as the source.
    let back = td(&["read", dest.to_str().unwrap()]).ok();
    assert!(
        back.stdout == src.read(),
        "tinydelta read of DEST differs from the source"
    );
}

/// A DEST that is a symbolic link is refused and nothing is written through it; a DEST folder
/// owned by another user inside a folder others can write (a trap in `/tmp`) is refused too
/// (docs/EXPORT.md "Continuing and refusing"); the same folder in a private parent is used.
#[test]
fn export_refuses_a_symlinked_dest_and_another_users_dest_in_a_shared_folder() {
    use std::os::unix::fs::PermissionsExt;
    let src = TempTable::new(&["id:int"]);
    td_in(&["append", &src.p()], b"{\"id\":1}\n").ok();
    let target = src.dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let link = src.dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = export(&src, &link, &[]).code(1);
    assert!(out.stderr.contains("symbolic link"), "{}", out.stderr);
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "export wrote through the symlink"
    );

    let u = crate::support::user::test_user();
    let shared = src.dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let trap = shared.join("dest");
    std::fs::create_dir(&trap).unwrap();
    std::os::unix::fs::chown(&trap, Some(u.uid), Some(u.gid)).unwrap();
    let out = export(&src, &trap, &[]).code(1);
    assert!(
        out.stderr.contains(&format!("belongs to uid {}", u.uid)) && out.stderr.contains("others can write"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_dir(&trap).unwrap().count(),
        0,
        "export wrote into the trap"
    );

    // The same folder in a parent only root can write: the operator chose it.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    export(&src, &trap, &[]).ok();
    assert_eq!(td(&["read", trap.to_str().unwrap()]).ok().text(), "{\"id\":1}\n");
}

/// docs/EXPORT.md "Reading an export with DuckDB, offline": its lines after the pip line, run
/// as written (with `python3` the venv that has `duckdb-extension-delta` and the doc's DEST
/// this test's) with no network (`unshare -n`), print the row count of the export.
#[test]
fn the_docs_duckdb_lines_read_an_export_offline() {
    let doc = std::fs::read_to_string(manifest_dir().join("docs/EXPORT.md")).expect("docs/EXPORT.md");
    let section = doc
        .split("\n## Reading an export with DuckDB, offline\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the section in docs/EXPORT.md");
    let lines: Vec<&str> = section.lines().filter_map(|l| l.strip_prefix("    ")).collect();
    assert!(lines[0].contains("pip install duckdb-extension-delta"), "{lines:?}");
    let src = TempTable::new(&["id:int!", "name:str"]);
    src.append(b"{\"id\":1,\"name\":\"a\"}\n{\"id\":2,\"name\":null}\n");
    src.append(b"{\"id\":3,\"name\":\"c\"}\n");
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("orders-delta");
    export(&src, &dest, &[]).ok();
    let script = lines[1..].join("\n").replace(
        "python3 - /tmp/orders-delta",
        &format!("{} - {}", delta_python().display(), dest.display()),
    );
    assert!(script.contains(&dest.display().to_string()), "{script}");
    let out = std::process::Command::new("unshare")
        .args(["-n", "bash", "-c", &script])
        .env("HOME", tmp.path())
        .output()
        .expect("run unshare");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "3\n");
}

/// The summary's counts are the truth: rows this run wrote, and rows DEST now holds. Going back
/// from the latest version to an older one writes no rows (it removes files) and holds the
/// older version's rows, never "0 rows".
#[test]
fn an_export_of_an_older_version_says_the_rows_dest_holds() {
    let src = TempTable::new(&["id:int"]);
    td_in(&["append", &src.p()], b"{\"id\":1}\n{\"id\":2}\n").ok();
    td_in(&["append", &src.p()], b"{\"id\":3}\n").ok();
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    let out = export(&src, &dest, &[]).ok().text();
    assert!(
        out.contains("(holding version 2 of the table, 3 rows)") && out.contains("3 rows written"),
        "{out}"
    );
    let out = export(&src, &dest, &["--version", "1"]).ok().text();
    assert!(
        out.contains("as version 1 (holding version 1 of the table, 2 rows)") && out.contains("0 rows written"),
        "{out}"
    );
    let out = export(&src, &dest, &["--version", "1"]).ok().text();
    assert!(
        out.contains("it holds version 1 of") && out.contains("(2 rows); nothing exported"),
        "{out}"
    );
}

/// A DEST that is a Delta table no export wrote (here a tinydelta JSONL table) is refused saying
/// so, not as if another writer had changed an export.
#[test]
fn export_into_a_table_no_export_wrote_says_what_it_is() {
    let src = TempTable::new(&["id:int"]);
    td_in(&["append", &src.p()], b"{\"id\":1}\n").ok();
    let other = TempTable::new(&["id:int"]);
    td_in(&["append", &other.p()], b"{\"id\":2}\n").ok();
    let dest = PathBuf::from(other.p());
    let out = export(&src, &dest, &[]).code(1).stderr_has(&[
        "is a Delta table that tinydelta export did not write (none of its versions 0-1 is an export; the newest: \
         operation \"WRITE\"",
        "export into a new folder; nothing was exported",
    ]);
    assert!(!out.stderr.contains("another writer"), "{}", out.stderr);
    assert_eq!(other.latest(), 1);
}
