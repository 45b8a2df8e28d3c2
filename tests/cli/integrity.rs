//! Trust nothing on disk (docs/FORMAT.md): damaged commits, holes, stray commits, damaged data
//! files and foreign-looking commits, through the real `tinydelta` binary. The corruption matrix
//! damages each non-newest commit of a table built by append, overwrite and restore in each way
//! (empty, cut at a line boundary, cut mid-line, garbage, deleted) and adds a stray future commit;
//! every command must answer correctly for versions before the damage or fail naming the damaged
//! version, none may exit 0 with a wrong answer, vacuum must delete nothing, and `check` must
//! report it.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::*;

/// Every file under `dir` (relative paths), to prove that nothing was deleted or added.
fn tree(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("list") {
            let e = e.expect("entry");
            let p = e.path();
            if e.file_type().expect("type").is_dir() {
                stack.push(p.clone());
            }
            out.insert(p.strip_prefix(dir).expect("prefix").display().to_string());
        }
    }
    out
}

fn copy_table(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .args(["-a", from.to_str().unwrap(), to.to_str().unwrap()])
        .status()
        .expect("cp");
    assert!(st.success());
}

/// The table of the matrix: v0 create, v1 append, v2 append, v3 overwrite, v4 restore 2,
/// v5 append.
fn matrix_table() -> TempTable {
    let t = TempTable::new(SMALL);
    assert_eq!(t.append(&small_rows(1, 3)), 1);
    assert_eq!(t.append(&small_rows(10, 2)), 2);
    assert_eq!(t.overwrite(&small_rows(20, 4)), 3);
    t.td("restore", &["--version", "2"]).ok();
    assert_eq!(t.append(&small_rows(30, 1)), 5);
    t
}

const DAMAGES: &[&str] = &["empty", "cut at a line boundary", "cut mid-line", "garbage", "deleted"];

fn damage(log: &Path, v: u64, how: &str) {
    let path = log.join(format!("{v:020}.json"));
    let bytes = fs::read(&path).expect("read commit");
    match how {
        "empty" => fs::write(&path, b"").unwrap(),
        "cut at a line boundary" => {
            // Drop the last line, keep the newline before it.
            let body = &bytes[..bytes.len() - 1];
            let cut = body.iter().rposition(|b| *b == b'\n').expect("two lines") + 1;
            fs::write(&path, &bytes[..cut]).unwrap();
        }
        "cut mid-line" => {
            let body = &bytes[..bytes.len() - 1];
            let start = body.iter().rposition(|b| *b == b'\n').expect("two lines") + 1;
            fs::write(&path, &bytes[..start + (bytes.len() - start) / 2]).unwrap();
        }
        "garbage" => fs::write(&path, b"\x00\x01 this is not JSON\n").unwrap(),
        "deleted" => fs::remove_file(&path).unwrap(),
        other => panic!("unknown damage {other}"),
    }
}

/// Expected answers of the clean table, per version.
struct Truth {
    reads: Vec<Vec<u8>>,
    rows: Vec<u64>,
}

fn truth(t: &TempTable) -> Truth {
    let latest = t.latest();
    let reads = (0..=latest).map(|v| t.read_v(v)).collect();
    let rows = (0..=latest)
        .map(|v| {
            t.td("describe", &["--version", &v.to_string(), "--json"]).ok().json()["numRecords"]
                .as_u64()
                .unwrap()
        })
        .collect();
    Truth { reads, rows }
}

/// Every command against a table damaged at version `d` (newest commit `newest`).
fn assert_damaged_at(t: &TempTable, d: u64, newest: u64, truth: &Truth, what: &str) {
    let names_d = |out: &Out, cmd: &str| {
        let all = format!("{}{}", out.stderr, out.text());
        assert!(
            all.contains(&format!("{d:020}.json")),
            "{what}: {cmd} does not name version {d}'s commit: {all}"
        );
    };
    // Versions before the damage answer correctly.
    for v in 0..d {
        let out = t.td("read", &["--version", &v.to_string()]);
        assert_eq!(out.code, 0, "{what}: read --version {v}: {}", out.stderr);
        assert_eq!(out.stdout, truth.reads[v as usize], "{what}: read --version {v}");
        let out = t.td("describe", &["--version", &v.to_string(), "--json"]).ok();
        assert_eq!(out.json()["numRecords"], truth.rows[v as usize], "{what}: describe {v}");
    }
    // Versions from the damage on fail naming it, never a wrong answer with exit 0.
    for v in d..=newest {
        let out = t.td("read", &["--version", &v.to_string()]).code(1);
        assert!(out.stdout.is_empty(), "{what}: read --version {v} printed rows");
        names_d(&out, &format!("read --version {v}"));
        names_d(
            &t.td("describe", &["--version", &v.to_string()]).code(1),
            &format!("describe --version {v}"),
        );
    }
    for (cmd, rest) in [
        ("read", &[][..]),
        ("describe", &[][..]),
        ("describe", &["--json"][..]),
        ("history", &[][..]),
        ("history", &["--json"][..]),
    ] {
        let out = t.td(cmd, rest);
        assert_ne!(out.code, 0, "{what}: {cmd} {rest:?} exited 0: {}", out.text());
        names_d(&out, cmd);
    }
    // Writes are refused, naming the version, and commit nothing.
    let before = tree(&t.path);
    for (cmd, rest) in [
        ("append", &[][..]),
        ("overwrite", &[][..]),
        ("restore", &["--version", "0"][..]),
    ] {
        let out = t.td_in(cmd, rest, &small_rows(99, 1)).code(1);
        names_d(&out, cmd);
    }
    assert_eq!(tree(&t.path), before, "{what}: a refused write left files behind");
    // Vacuum deletes nothing.
    let out = t.td("vacuum", &["--older-than", "0s"]);
    assert_ne!(out.code, 0, "{what}: vacuum exited 0: {}", out.text());
    names_d(&out, "vacuum");
    assert_eq!(tree(&t.path), before, "{what}: vacuum deleted files");
    // check reports it.
    let out = t.td("check", &[]).code(1);
    names_d(&out, "check");
    let j = t.td("check", &["--json"]).code(1).json();
    assert_eq!(j["whole"], false, "{what}: {j}");
    assert!(
        j["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["severity"] == "damage" && p["version"] == json!(d)),
        "{what}: check --json does not report version {d}: {j}"
    );
}

#[test]
fn corruption_matrix() {
    let base = matrix_table();
    let truth = truth(&base);
    let newest = 5;
    assert_eq!(truth.reads.len(), 6);
    base.td("check", &[]).ok();
    let mut cases = 0;
    for d in 0..newest {
        for how in DAMAGES {
            let what = format!("version {d} {how}");
            let t = TempTable::uncreated();
            copy_table(&base.path, &t.path);
            damage(&t.log_dir(), d, how);
            assert_damaged_at(&t, d, newest, &truth, &what);
            cases += 1;
        }
    }
    // A stray far-future commit: a hole after the newest version.
    let t = TempTable::uncreated();
    copy_table(&base.path, &t.path);
    fs::copy(
        t.log_dir().join(format!("{:020}.json", 5)),
        t.log_dir().join(format!("{:020}.json", 9000)),
    )
    .unwrap();
    // Versions 0-5 are all readable, but the table is damaged at 6: latest, writes, vacuum fail.
    for v in 0..=newest {
        assert_eq!(t.read_v(v), truth.reads[v as usize], "stray commit: read --version {v}");
    }
    let before = tree(&t.path);
    for (cmd, rest) in [("read", &[][..]), ("describe", &[][..]), ("history", &[][..])] {
        t.td(cmd, rest)
            .code(1)
            .stderr_has(&[&format!("{:020}.json", 6), "version 9000 exists"]);
    }
    t.td_in("append", &[], &small_rows(99, 1))
        .code(1)
        .stderr_has(&["version 6"]);
    t.td("vacuum", &["--older-than", "0s"]).code(1);
    assert_eq!(tree(&t.path), before, "stray commit: something was written or deleted");
    let out = t.td("check", &[]).code(1);
    assert!(
        out.text().contains("strays"),
        "check names the stray case: {}",
        out.text()
    );
    cases += 1;
    assert_eq!(cases, 26);
}

#[test]
fn a_damaged_newest_commit_is_repaired_by_moving_it_aside() {
    let t = matrix_table();
    let expected = t.read_v(4);
    damage(&t.log_dir(), 5, "cut at a line boundary");
    t.td("read", &[]).code(1).stderr_has(&["version 5 is damaged"]);
    t.td("read", &["--version", "4"]).ok();
    t.td_in("append", &[], &small_rows(99, 1))
        .code(1)
        .stderr_has(&["version 5"]);
    let out = t.td("check", &[]).code(1);
    assert!(
        out.text().contains("check --repair"),
        "check points at --repair: {}",
        out.text()
    );
    let out = t.td("check", &["--repair"]).ok();
    assert!(out.text().contains("_corrupt"), "{}", out.text());
    assert!(t.log_dir().join("_corrupt").join(format!("{:020}.json", 5)).is_file());
    assert_eq!(t.read(), expected);
    t.td("check", &[]).ok();
    // Appends continue at version 5, and check stays happy (the stale .crc went aside too).
    assert_eq!(t.append(&small_rows(40, 1)), 5);
    t.td("check", &["--deep"]).ok();
    // A damaged commit in the middle is not repaired automatically.
    damage(&t.log_dir(), 2, "garbage");
    let out = t.td("check", &["--repair"]).code(1);
    assert!(out.text().contains("nothing moved"), "{}", out.text());
    assert!(t.log_dir().join(format!("{:020}.json", 2)).is_file());
}

#[test]
fn data_files_are_checked_against_their_recorded_size() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 2));
    t.append(&small_rows(10, 2));
    let v2: Vec<String> = t.describe()["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    let (p1, p2) = (t.path.join(&v2[0]), t.path.join(&v2[1]));
    let good = fs::read(&p2).unwrap();
    // Cut by a few bytes: no torn row, nothing printed at all.
    fs::write(&p2, &good[..good.len() - 3]).unwrap();
    let out = t.td("read", &[]).code(1).stderr_has(&[&v2[1], "bytes"]);
    assert!(
        out.stdout.is_empty(),
        "read printed bytes before failing: {}",
        out.text()
    );
    t.td("check", &[]).code(1);
    // A row appended to the file: not served either.
    fs::write(&p2, [&good[..], small_row(77).as_bytes(), b"\n"].concat()).unwrap();
    assert!(t.td("read", &[]).code(1).stdout.is_empty());
    // Missing: nothing printed, version 1 still fine.
    fs::remove_file(&p2).unwrap();
    let out = t.td("read", &[]).code(1).stderr_has(&["missing"]);
    assert!(out.stdout.is_empty());
    assert_eq!(ids(&t.read_v(1)), vec![1, 2]);
    fs::write(&p2, &good).unwrap();
    t.td("check", &["--deep"]).ok();
    // A row count that disagrees with the stats (same size, one row fewer): --deep finds it.
    let one = fs::read(&p1).unwrap();
    let line = one.split(|b| *b == b'\n').next().unwrap().to_vec();
    let mut same = line.clone();
    same.push(b'\n');
    same.resize(one.len() - 1, b' ');
    same.push(b'\n');
    fs::write(&p1, &same).unwrap();
    t.td("check", &[]).ok();
    let out = t.td("check", &["--deep"]).code(1);
    assert!(out.text().contains("line 2 is not canonical"), "{}", out.text());
}

#[test]
fn percent_encoded_paths_are_decoded_and_vacuum_keeps_them() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 1));
    let rows = small_rows(5, 2);
    fs::write(t.path.join("part-f a.jsonl"), &rows).unwrap();
    let add = json!({"add": {"path": "part-f%20a.jsonl", "partitionValues": {}, "size": rows.len(),
        "modificationTime": 1, "dataChange": true, "stats": "{\"numRecords\":2}"}});
    t.write_commit(
        2,
        &[
            json!({"commitInfo": {"timestamp": 4_000_000_000_000i64, "operation": "WRITE"}}),
            add,
        ],
    );
    assert_eq!(ids(&t.read()), vec![1, 5, 6]);
    let out = t.td("vacuum", &["--older-than", "0s"]).ok();
    assert!(!out.text().contains("part-f a.jsonl"), "{}", out.text());
    assert!(t.path.join("part-f a.jsonl").is_file());
    // Restore re-adds it encoded, and no path is both added and removed in one commit.
    t.overwrite(&small_rows(9, 1));
    t.td("restore", &["--version", "2"]).ok();
    let v4 = t.commit(4);
    assert!(v4.iter().any(|a| a["add"]["path"] == "part-f%20a.jsonl"), "{v4:?}");
    assert_eq!(ids(&t.read()), vec![1, 5, 6]);
    t.td("check", &[]).ok();
}

#[test]
fn restore_writes_delta_metric_names_and_never_adds_and_removes_one_path() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 1));
    t.append(&small_rows(2, 1));
    t.td("restore", &["--version", "1"]).ok();
    t.append(&small_rows(3, 1));
    // Restoring 2 from 4: the file of version 1 is live but out of place; it is re-added only.
    t.td("restore", &["--version", "2"]).ok();
    for v in [3, 5] {
        let actions = t.commit(v);
        let ci = &actions[0]["commitInfo"]["operationMetrics"];
        assert!(
            ci.get("numRestoredFiles").is_some() && ci.get("numRemovedFiles").is_some(),
            "{ci}"
        );
        assert!(ci.get("numRestoredFile").is_none(), "{ci}");
        let adds: BTreeSet<&str> = actions.iter().filter_map(|a| a["add"]["path"].as_str()).collect();
        let removes: BTreeSet<&str> = actions.iter().filter_map(|a| a["remove"]["path"].as_str()).collect();
        assert!(adds.is_disjoint(&removes), "version {v}: {adds:?} {removes:?}");
    }
    assert_eq!(t.read(), t.read_v(2));
}

#[test]
fn column_names_must_differ_regardless_of_case() {
    let t = TempTable::uncreated();
    t.td("create", &["id:int", "Id:str"]).code(2).stderr_has(&["case"]);
    assert!(!t.log_dir().join(format!("{:020}.json", 0)).exists());
}

#[test]
fn non_regular_commit_names_are_damage_not_a_hang() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 1));
    let fifo = t.log_dir().join(format!("{:020}.json", 2));
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    t.td("read", &[])
        .code(1)
        .stderr_has(&["version 2", "not a regular file"]);
    assert_eq!(ids(&t.read_v(1)), vec![1]);
    t.td("check", &[]).code(1);
    fs::remove_file(&fifo).unwrap();
    std::os::unix::fs::symlink(format!("{:020}.json", 1), &fifo).unwrap();
    t.td("read", &[])
        .code(1)
        .stderr_has(&["version 2", "not a regular file"]);
    t.td("vacuum", &["--older-than", "0s"]).code(1);
}

#[test]
fn commits_without_timestamp_or_commit_info_get_increasing_times() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 1));
    let rows = small_rows(2, 1);
    fs::write(t.path.join("part-foreign.jsonl"), &rows).unwrap();
    // No commitInfo at all, no stats, no final newline, an unknown action: a foreign commit.
    let bytes = format!(
        "{}\n{}",
        json!({"txn": {"appId": "x", "version": 1}}),
        json!({"add": {"path": "part-foreign.jsonl", "partitionValues": {}, "size": rows.len(),
            "modificationTime": 1, "dataChange": true}})
    );
    fs::write(t.log_dir().join(format!("{:020}.json", 2)), bytes).unwrap();
    // Its mtime is long before version 1: the time is raised to one ms after it.
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    fs::File::options()
        .write(true)
        .open(t.log_dir().join(format!("{:020}.json", 2)))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let h = t.td("history", &["--json"]).ok().json();
    let ts: Vec<i64> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["timestamp"].as_i64().unwrap())
        .collect();
    assert_eq!(ts[2], ts[1] + 1, "{h}");
    assert_eq!(ids(&t.read()), vec![1, 2]);
    let d = t.td("describe", &[]).ok().text();
    assert!(d.contains("rows:    2") && d.contains("counted"), "{d}");
}

#[test]
fn parquet_data_files_are_a_clear_error_never_their_bytes() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 1));
    let pq = b"PAR1\x15\x04binarystuffPAR1".to_vec();
    fs::write(t.path.join("part-00000-x-c000.snappy.parquet"), &pq).unwrap();
    t.write_commit(
        2,
        &[
            json!({"commitInfo": {"timestamp": 4_000_000_000_000i64, "operation": "WRITE",
            "operationParameters": {"mode": "Append"}, "operationMetrics": {"numFiles": 1, "numOutputRows": 1},
            "clientVersion": "delta-rs.0.25"}}),
            json!({"add": {"path": "part-00000-x-c000.snappy.parquet", "partitionValues": {}, "size": pq.len(),
            "modificationTime": 1, "dataChange": true, "stats": "{\"numRecords\":1}"}}),
        ],
    );
    let out = t
        .td("read", &[])
        .code(1)
        .stderr_has(&["Parquet", "part-00000-x-c000.snappy.parquet"]);
    assert!(out.stdout.is_empty() && !out.stderr.contains("binarystuff"));
    assert_eq!(ids(&t.read_v(1)), vec![1]);
    // describe reports no version read refuses (review finding 6): it names the file too.
    t.td("describe", &["--json"])
        .code(1)
        .stderr_has(&["Parquet", "part-00000-x-c000.snappy.parquet"]);
}

/// Checks the `Value` import is used even if tests above change.
#[allow(dead_code)]
fn _v(_: Value) {}

#[test]
fn timestamp_stats_are_valid_rfc3339_and_out_of_range_instants_are_refused() {
    let t = TempTable::new(&["id:int!", "at:timestamp"]);
    // In UTC these are in year 10000 and year 0: outside Delta's years 0001-9999, refused
    // naming the line and column, nothing committed.
    for (line, row) in [
        (1, "{\"id\":1,\"at\":\"9999-12-31T23:59:59-05:00\"}\n"),
        (
            2,
            "{\"id\":3,\"at\":\"2020-01-01T00:00:00Z\"}\n{\"id\":2,\"at\":\"0001-01-01T00:00:00+05:00\"}\n",
        ),
    ] {
        t.td_in("append", &[], row.as_bytes())
            .code(5)
            .stderr_has(&[&format!("line {line}, column \"at\""), "outside the years 0001-9999"]);
    }
    // The edges of the range are taken, and their statistics are valid RFC 3339.
    t.append(b"{\"id\":1,\"at\":\"9999-12-31T23:59:59Z\"}\n{\"id\":2,\"at\":\"0001-01-01T00:00:00Z\"}\n{\"id\":3,\"at\":\"2020-01-01T00:00:00Z\"}\n");
    let add = t.commit(1).into_iter().find(|a| a.get("add").is_some()).unwrap();
    let stats: Value = serde_json::from_str(add["add"]["stats"].as_str().unwrap()).unwrap();
    for side in ["minValues", "maxValues"] {
        let s = stats[side]["at"]
            .as_str()
            .unwrap_or_else(|| panic!("{side}.at is not a string: {stats}"));
        chrono::DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{side}.at {s:?}: {e}"));
    }
    assert_eq!(stats["maxValues"]["id"], 3);
}

/// Sets an old mtime so that `vacuum --older-than 1s` considers the file.
fn age(path: &Path) {
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

#[test]
fn vacuum_never_deletes_a_pending_staged_file_a_commit_names_nor_follows_symlinks() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 1));
    let staging = t.path.join("_staging");
    fs::create_dir(&staging).unwrap();
    let id = "0123456789abcdef0123456789abcdef";
    fs::write(staging.join(format!("{id}.data")), small_row(5) + "\n").unwrap();
    fs::write(staging.join(format!("{id}.name")), "pending.jsonl").unwrap();
    // An orphan half and a temporary are leftovers.
    let orphan = "fedcba9876543210fedcba9876543210";
    fs::write(staging.join(format!("{orphan}.data")), "x").unwrap();
    fs::write(staging.join("x.tmp"), "x").unwrap();
    for f in [
        format!("{id}.data"),
        format!("{id}.name"),
        format!("{orphan}.data"),
        "x.tmp".into(),
    ] {
        age(&staging.join(f));
    }
    // Someone commits a version naming the pending file's staging id.
    let rows = small_rows(7, 1);
    fs::write(t.path.join("part-x.jsonl"), &rows).unwrap();
    t.write_commit(
        2,
        &[
            json!({"commitInfo": {"timestamp": 4_000_000_000_000i64, "operation": "WRITE",
                "operationParameters": {"mode": "Append", "stagingId": id}}}),
            json!({"add": {"path": "part-x.jsonl", "partitionValues": {}, "size": rows.len(),
                "modificationTime": 1, "dataChange": true, "stats": "{\"numRecords\":1}"}}),
        ],
    );
    let out = t.td("vacuum", &["--older-than", "1s"]).ok();
    assert!(
        staging.join(format!("{id}.data")).is_file(),
        "vacuum deleted a pending staged file: {}",
        out.text()
    );
    assert!(staging.join(format!("{id}.name")).is_file());
    assert!(!staging.join(format!("{orphan}.data")).exists(), "{}", out.text());
    assert!(!staging.join("x.tmp").exists(), "{}", out.text());

    // A symlinked _staging or _tinydelta/checkpoints is refused, never followed.
    let elsewhere = t.dir.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let victim = elsewhere.join("x.tmp");
    fs::write(&victim, "precious").unwrap();
    age(&victim);
    fs::remove_dir_all(&staging).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &staging).unwrap();
    t.td("vacuum", &["--older-than", "1s"])
        .code(1)
        .stderr_has(&["_staging", "symbolic link"]);
    assert!(victim.is_file(), "vacuum followed a symlinked _staging");
    fs::remove_file(&staging).unwrap();
    fs::create_dir_all(t.path.join("_tinydelta")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, t.path.join("_tinydelta/checkpoints")).unwrap();
    fs::write(elsewhere.join(".00000000000000000001.x.tmp"), "precious").unwrap();
    age(&elsewhere.join(".00000000000000000001.x.tmp"));
    t.td("vacuum", &["--older-than", "1s"])
        .code(1)
        .stderr_has(&["checkpoints", "symbolic link"]);
    assert!(elsewhere.join(".00000000000000000001.x.tmp").is_file());
    // Reads ignore the symlinked checkpoint folder (log replay is the truth) and write nothing there.
    assert_eq!(ids(&t.read()), vec![1, 7]);
    // A checkpoint write (what a replay of 1,000+ commits does) refuses it too.
    let table = tinydelta::Table::open(&t.path).unwrap();
    let snap = table.snapshot(2).unwrap();
    let err = tinydelta::log::checkpoint::write(table.dir(), &snap)
        .unwrap_err()
        .to_string();
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 2);
}

#[test]
fn a_missing_version_zero_with_a_checkpoint_is_not_available_not_damage() {
    let t = TempTable::new(SMALL);
    for i in 0..3 {
        t.append(&small_rows(i * 10, 1));
    }
    let cp_dir = t.path.join("_tinydelta/checkpoints");
    // Build a checkpoint of version 2 the way the library does, by a long replay: use 1,000 commits
    // is too slow here, so write it through the public API.
    let table = tinydelta::Table::open(&t.path).unwrap();
    let snap = table.snapshot(2).unwrap();
    tinydelta::log::checkpoint::write(table.dir(), &snap).unwrap();
    assert!(cp_dir.join(format!("{:020}.jsonl", 2)).is_file());
    // Delta log retention removed commits 0 and 1.
    for v in [0, 1] {
        fs::remove_file(t.log_dir().join(format!("{v:020}.json"))).unwrap();
    }
    assert_eq!(ids(&t.read()), vec![0, 10, 20]);
    t.td("read", &["--version", "1"]).code(4);
    assert_eq!(t.append(&small_rows(30, 1)), 4);
    assert_eq!(ids(&t.read()), vec![0, 10, 20, 30]);
    // Vacuum needs the whole log: it refuses, deleting nothing.
    t.td("vacuum", &["--older-than", "0s"])
        .code(1)
        .stderr_has(&["not available"]);
}

#[test]
fn a_bad_version_checksum_is_a_warning_not_damage() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 2));
    t.append(&small_rows(5, 1));
    let crc = t.log_dir().join(format!("{:020}.crc", 1));
    let mut c: Value = serde_json::from_slice(&fs::read(&crc).unwrap()).unwrap();
    assert_eq!(c["numFiles"], 1);
    c["numFiles"] = json!(7);
    fs::write(&crc, c.to_string()).unwrap();
    fs::write(t.log_dir().join(format!("{:020}.crc", 2)), b"").unwrap();
    fs::remove_file(t.log_dir().join(format!("{:020}.crc", 0))).unwrap();
    let out = t.td("check", &[]).ok();
    let text = out.text();
    assert!(text.contains("warning") && text.contains("numFiles 7"), "{text}");
    assert!(text.contains("no version checksum"), "{text}");
    assert!(text.contains(&format!("{:020}.crc", 2)), "{text}");
    // An empty checksum (what a power loss leaves of an unfsynced one) is a warning and is worded
    // as one: the table is not corrupt.
    let empty = text.lines().find(|l| l.contains(&format!("{:020}.crc", 2))).unwrap();
    assert!(empty.starts_with("warning:") && empty.contains("is empty"), "{text}");
    assert!(!text.contains("corrupt"), "{text}");
    // Readers never need them.
    assert_eq!(ids(&t.read()), vec![1, 2, 5]);
}

#[test]
fn a_hole_after_a_checkpoint_is_damage_not_the_end_and_is_never_filled() {
    let t = TempTable::new(SMALL);
    for i in 0..4 {
        t.append(&small_rows(i * 10, 1));
    }
    let table = tinydelta::Table::open(&t.path).unwrap();
    tinydelta::log::checkpoint::write(table.dir(), &table.snapshot(2).unwrap()).unwrap();
    let expected = t.read_v(2);
    fs::remove_file(t.log_dir().join(format!("{:020}.json", 3))).unwrap();
    t.td("describe", &[])
        .code(1)
        .stderr_has(&["version 3 is damaged", "hole", "version 4 exists"]);
    t.td_in("append", &[], &small_rows(99, 1))
        .code(1)
        .stderr_has(&["version 3"]);
    assert!(
        !t.log_dir().join(format!("{:020}.json", 3)).exists(),
        "append filled the hole"
    );
    assert_eq!(t.read_v(2), expected);
    t.td("read", &["--version", "4"])
        .code(1)
        .stderr_has(&["version 3 is damaged"]);
}

/// `check` asks only for the commits the listing shows: a stray name at the last version a u64
/// holds is one hole, reported at once (it used to ask for every version up to it, forever).
#[test]
fn check_of_a_stray_commit_at_the_last_version_finishes_and_names_the_hole() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 1));
    fs::copy(
        t.log_dir().join(format!("{:020}.json", 1)),
        t.log_dir().join(format!("{}.json", u64::MAX)),
    )
    .unwrap();
    let out = t.td("check", &[]).code(1);
    assert!(
        out.text().contains("version 2 is damaged") && out.text().contains(&format!("version {} exists", u64::MAX)),
        "check names the hole: {}",
        out.text()
    );
}

/// The paths of the live data files of the newest version, in order.
fn live_paths(t: &TempTable) -> Vec<String> {
    t.describe()["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_jsonl_data_file_holding_other_bytes_is_damage_not_rows() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 2));
    let p = t.path.join(&live_paths(&t)[0]);
    let good = fs::read(&p).unwrap();
    // Parquet bytes of the same size under the .jsonl name.
    let mut pq = b"PAR1".to_vec();
    pq.resize(good.len() - 4, b'x');
    pq.extend_from_slice(b"PAR1");
    fs::write(&p, &pq).unwrap();
    let out = t.td("read", &[]).code(1).stderr_has(&["Parquet", "part-"]);
    assert!(out.stdout.is_empty(), "{}", out.text());
    t.td("check", &[]).code(1);
    // Any other bytes that do not start with `{` or do not end with a newline.
    let mut junk = good.clone();
    junk[0] = b'[';
    fs::write(&p, &junk).unwrap();
    assert!(t.td("read", &[]).code(1).stderr_has(&["canonical"]).stdout.is_empty());
    let mut cut = good.clone();
    *cut.last_mut().unwrap() = b' ';
    fs::write(&p, &cut).unwrap();
    assert!(t.td("read", &[]).code(1).stderr_has(&["newline"]).stdout.is_empty());
    // Right ends, wrong middle: --deep re-canonicalises every line.
    let mut mid = good.clone();
    let nl = mid.iter().position(|b| *b == b'\n').unwrap();
    mid[nl] = b' ';
    mid[nl + 1] = b'\n';
    fs::write(&p, &mid).unwrap();
    t.td("check", &[]).ok();
    let out = t.td("check", &["--deep"]).code(1);
    assert!(out.text().contains("line 1"), "{}", out.text());
    fs::write(&p, &good).unwrap();
    t.td("check", &["--deep"]).ok();
}

/// Vacuum after `check --repair` keeps the data files that the commit moved into
/// `_delta_log/_corrupt/` names (perhaps the only copy of those rows), even when the damage cut
/// its `add` line; when a file there cannot be read, vacuum deletes no data file and says why.
#[test]
fn vacuum_keeps_the_data_files_of_commits_moved_aside() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 2));
    let before = t.part_files();
    t.append(&small_rows(10, 2));
    let named: Vec<String> = t.part_files().difference(&before).cloned().collect();
    let p = t.log_dir().join(format!("{:020}.json", 2));
    let bytes = fs::read(&p).unwrap();
    fs::write(&p, &bytes[..bytes.len() - 10]).unwrap();
    t.td("check", &["--repair"]).ok();
    let out = t.td("vacuum", &["--older-than", "0s"]).ok();
    assert!(
        t.path.join(&named[0]).exists(),
        "vacuum deleted a file _corrupt/ names: {}",
        out.text()
    );
    // An unreadable file in _corrupt/: no data file is deleted, and vacuum says why.
    fs::write(t.path.join("part-stray.jsonl"), small_row(5) + "\n").unwrap();
    let st = std::process::Command::new("mkfifo")
        .arg(t.log_dir().join("_corrupt").join("fifo"))
        .status()
        .unwrap();
    assert!(st.success());
    let out = t.td("vacuum", &["--older-than", "0s"]).ok();
    assert!(out.text().contains("kept every data file"), "{}", out.text());
    assert!(t.path.join("part-stray.jsonl").exists() && t.path.join(&named[0]).exists());
    fs::remove_file(t.log_dir().join("_corrupt").join("fifo")).unwrap();
    t.td("vacuum", &["--older-than", "0s"]).ok();
    assert!(!t.path.join("part-stray.jsonl").exists() && t.path.join(&named[0]).exists());
}

/// A table of 3 one-row appends with a private checkpoint of version 3: (table, checkpoint file
/// name, its path, its text).
fn table_with_checkpoint_of_3() -> (TempTable, String, std::path::PathBuf, String) {
    let t = TempTable::new(SMALL);
    for i in 0..3 {
        t.append(&small_rows(i * 10, 1));
    }
    let table = tinydelta::Table::open(&t.path).unwrap();
    tinydelta::log::checkpoint::write(table.dir(), &table.snapshot(3).unwrap()).unwrap();
    let name = format!("{:020}.jsonl", 3);
    let cp = t.path.join("_tinydelta/checkpoints").join(&name);
    let text = fs::read_to_string(&cp).unwrap();
    (t, name, cp, text)
}

/// A private checkpoint with a file line deleted and its header totals fixed to match: readers
/// skip it (its body checksum fails) and replay the commits, appends build on the truth, and
/// `check` names it. Forged with a matching checksum too, `check` still finds it against replay.
#[test]
fn a_damaged_checkpoint_is_skipped_by_readers_and_named_by_check() {
    use std::hash::Hasher;
    let (t, name, cp, text) = table_with_checkpoint_of_3();
    let mut lines: Vec<&str> = text.lines().collect();
    let gone: Value = serde_json::from_str(lines.remove(1)).unwrap();
    let mut header: Value = serde_json::from_str(lines[0]).unwrap();
    header["numFiles"] = json!(2);
    header["numRecords"] = json!(2);
    header["sizeBytes"] = json!(header["sizeBytes"].as_u64().unwrap() - gone["size"].as_u64().unwrap());
    let body: String = lines[1..].iter().map(|l| format!("{l}\n")).collect();
    fs::write(&cp, format!("{header}\n{body}")).unwrap();
    assert_eq!(ids(&t.read()), vec![0, 10, 20]);
    assert_eq!(t.describe()["numRecords"], 3);
    let out = t.td("check", &[]).code(1);
    assert!(
        out.text().contains(&name) && out.text().contains("checksum"),
        "{}",
        out.text()
    );
    // Forged with a matching checksum: readers cannot tell, but check compares with replay.
    let mut h = fnv::FnvHasher::default();
    h.write(body.as_bytes());
    header["bodyFnv1a64"] = json!(format!("{:016x}", h.finish()));
    fs::write(&cp, format!("{header}\n{body}")).unwrap();
    let out = t.td("check", &["--deep"]).code(1);
    assert!(
        out.text().contains(&name) && out.text().contains("replay"),
        "{}",
        out.text()
    );
    fs::remove_file(&cp).unwrap();
    // The next append builds on the truth.
    assert_eq!(t.append(&small_rows(30, 1)), 4);
    assert_eq!(ids(&t.read()), vec![0, 10, 20, 30]);
    t.td("check", &[]).ok();
}

/// A private checkpoint whose header (outside the body's checksum) says 2^40 or 2^60 files: it
/// is sized by nothing before it is checked, so readers skip it with a warning and replay, and
/// `check` names it (before, `read` aborted on a failed allocation or panicked).
#[test]
fn a_checkpoint_header_with_a_huge_file_count_is_skipped_not_allocated() {
    let (t, name, cp, text) = table_with_checkpoint_of_3();
    let (head, body) = text.split_once('\n').unwrap();
    for n in [1u64 << 40, 1u64 << 60] {
        let mut header: Value = serde_json::from_str(head).unwrap();
        header["numFiles"] = json!(n);
        fs::write(&cp, format!("{header}\n{body}")).unwrap();
        let out = t.td("read", &[]).ok();
        assert_eq!(ids(&out.stdout), vec![0, 10, 20], "numFiles {n}");
        assert!(
            out.stderr.contains("ignoring checkpoint") && out.stderr.contains(&n.to_string()),
            "{}",
            out.stderr
        );
        assert_eq!(t.describe()["numRecords"], 3);
        let out = t.td("check", &[]).code(1);
        assert!(
            out.text().contains(&name) && out.text().contains(&n.to_string()),
            "{}",
            out.text()
        );
    }
}

/// Rewrite line `line` (0-based) of commit `v` with `f` (raw text: the damage is one character).
fn edit_line(t: &TempTable, v: u64, line: usize, f: impl Fn(&str) -> String) {
    let path = t.log_dir().join(format!("{v:020}.json"));
    let text = fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[line] = f(&lines[line]);
    fs::write(&path, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
}

/// The index of the first line of commit `v` holding action `key`.
fn line_of(t: &TempTable, v: u64, key: &str) -> usize {
    t.commit(v).iter().position(|a| a.get(key).is_some()).unwrap()
}

/// A `remove` in tinydelta's own OVERWRITE commit whose path lost one character names no live
/// file: that is damage in a commit tinydelta wrote (before, the removed rows came back with exit
/// 0 and `check` said whole). Versions before it still read.
#[test]
fn a_remove_naming_no_live_file_in_a_tinydelta_commit_is_damage() {
    let t = matrix_table();
    let v2 = t.read_v(2);
    let at = line_of(&t, 3, "remove");
    edit_line(&t, 3, at, |l| l.replacen("part-", "parT-", 1));
    t.td("read", &[]).code(1).stderr_has(&["version 3 is damaged", "parT-"]);
    assert_version_damaged(&t, 3, &v2);
}

/// Version `v` reads as damage (exit 1) and `check` names it, while version `v - 1` still reads
/// as `before`.
#[track_caller]
fn assert_version_damaged(t: &TempTable, v: u64, before: &[u8]) {
    let what = format!("version {v} is damaged");
    t.td("read", &["--version", &v.to_string()])
        .code(1)
        .stderr_has(&[&what]);
    assert_eq!(t.read_v(v - 1), before);
    let out = t.td("check", &[]).code(1);
    assert!(out.text().contains(&what), "{}", out.text());
}

/// The `"commitInfo"` key of an append damaged (one bit, or an inserted U+2028) and its `add`
/// line lost: the commit must not pass as a foreign commit of no actions (before, its rows
/// vanished with exit 0).
#[test]
fn a_damaged_commit_info_key_does_not_make_a_tinydelta_commit_foreign() {
    for damage in ["commitInfm", "commit\u{2028}Info"] {
        let t = matrix_table();
        let v4 = t.read_v(4);
        let add = line_of(&t, 5, "add");
        let path = t.log_dir().join(format!("{:020}.json", 5));
        let text = fs::read_to_string(&path).unwrap();
        let kept: String = text
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != add)
            .map(|(_, l)| format!("{}\n", l.replacen("\"commitInfo\"", &format!("\"{damage}\""), 1)))
            .collect();
        assert!(kept.contains(damage));
        fs::write(&path, kept).unwrap();
        t.td("read", &[])
            .code(1)
            .stderr_has(&["version 5 is damaged", "commitInfo"]);
        assert_version_damaged(&t, 5, &v4);
    }
}

/// `numRecords` of an `add` in tinydelta's RESTORE commit is checked against the rows its
/// commitInfo records (before, `describe` reported 9223372036854775809 rows for a 3-row table).
#[test]
fn a_damaged_row_count_in_a_restore_is_damage() {
    let t = matrix_table();
    let v3 = t.read_v(3);
    let at = line_of(&t, 4, "add");
    edit_line(&t, 4, at, |l| {
        let mut a: Value = serde_json::from_str(l).unwrap();
        let mut stats: Value = serde_json::from_str(a["add"]["stats"].as_str().unwrap()).unwrap();
        stats["numRecords"] = json!(9223372036854775806u64);
        a["add"]["stats"] = json!(stats.to_string());
        a.to_string()
    });
    t.td("describe", &[])
        .code(1)
        .stderr_has(&["version 4 is damaged", "numOutputRows"]);
    assert_version_damaged(&t, 4, &v3);
}

/// A `schemaString` naming a column twice is refused on read as `create` refuses it, and
/// `append` writes nothing (before, it wrote `{"id":5,"id":null}`).
#[test]
fn a_schema_string_naming_a_column_twice_is_refused_on_read() {
    let t = TempTable::new(&["id:int", "s:str"]);
    t.append(b"{\"id\":1,\"s\":\"a\"}\n");
    let mut meta = t.commit(0).into_iter().find(|a| a.get("metaData").is_some()).unwrap();
    let mut schema: Value = serde_json::from_str(meta["metaData"]["schemaString"].as_str().unwrap()).unwrap();
    let mut twice = schema["fields"][0].clone();
    twice["name"] = json!("ID");
    schema["fields"].as_array_mut().unwrap().push(twice);
    meta["metaData"]["schemaString"] = json!(schema.to_string());
    t.write_commit(
        2,
        &[
            json!({"commitInfo": {"timestamp": 4102444800000u64, "operation": "ADD COLUMNS"}}),
            meta,
        ],
    );
    t.td("read", &[])
        .code(1)
        .stderr_has(&["\"id\"", "\"ID\"", "regardless of case"]);
    assert_eq!(ids(&t.read_v(1)), vec![1]);
    let before = t.part_files();
    t.td_in("append", &[], b"{\"id\":5}\n").code(1);
    assert_eq!(t.part_files(), before, "append wrote a data file");
    assert_eq!(t.log_versions(), vec![0, 1, 2]);
}

/// One commit of 200,000 small `add` actions: `describe` (log replay, totals, a stat of every
/// data file) and `history` stay within the documented budget of log replay, 256 bytes per live
/// file over a 32 MiB base (docs/FORMAT.md "Log replay and checkpoints"). Before, replay held
/// every action of the commit (about 1.2 KiB per file).
#[test]
fn a_commit_of_many_adds_is_replayed_in_bounded_memory() {
    const FILES: u64 = 200_000;
    let t = TempTable::new(&["i:int"]);
    write_many_adds_commit(&t.path, FILES);
    let budget = (32 << 20) + 256 * FILES;
    for command in ["describe", "history"] {
        let (code, peak) = td_peak_rss(&t.args(command, &[]));
        assert_eq!(code, 0, "{command}");
        eprintln!("{command}: peak {peak} bytes, {} per file", peak / FILES);
        assert!(peak < budget, "{command} peaked at {peak} bytes, over {budget}");
    }
    assert_eq!(t.describe()["numRecords"], FILES);
}

/// A table of one huge commit gets a private checkpoint too: replaying 100,000 `add` actions
/// past the newest checkpoint writes one (docs/FORMAT.md "Log replay and checkpoints"), however
/// few commits held them, and the next reader starts from it with the same numbers.
#[test]
fn a_commit_of_100000_adds_is_checkpointed() {
    const FILES: u64 = 100_000;
    let t = TempTable::new(&["i:int"]);
    write_many_adds_commit(&t.path, FILES);
    let cp = t.path.join("_tinydelta/checkpoints").join(format!("{:020}.jsonl", 1));
    assert!(!cp.exists());
    let before = t.describe();
    assert!(cp.is_file(), "no checkpoint of version 1 after replaying {FILES} adds");
    let text = fs::read_to_string(&cp).unwrap();
    assert_eq!(text.lines().count() as u64, FILES + 1);
    // Read from the checkpoint: the same numbers and rows.
    let after = t.describe();
    assert_eq!(before["numFiles"], after["numFiles"]);
    assert_eq!(after["numRecords"], FILES);
    assert_eq!(t.read().len() as u64, 8 * FILES);
    // A small commit on top does not write another one (neither count is reached).
    t.append(b"{\"i\":2}\n");
    assert_eq!(t.describe()["numRecords"], FILES + 1);
    assert!(
        !t.path
            .join("_tinydelta/checkpoints")
            .join(format!("{:020}.jsonl", 2))
            .exists()
    );
}

/// Version 1 of `t`: one WRITE commit adding `files` data files `part-NNNN.jsonl`, file `i`
/// holding the one row `row(i)`.
fn one_row_files_commit(t: &TempTable, files: usize, row: impl Fn(usize) -> String) {
    let mut lines = vec![json!({"commitInfo": {
        "timestamp": 4102444800000u64, "operation": "WRITE", "operationParameters": {"mode": "Append"},
        "readVersion": 0, "isolationLevel": "WriteSerializable", "isBlindAppend": true,
        "operationMetrics": {"numFiles": files.to_string(), "numOutputRows": files.to_string()},
        "engineInfo": "tinydelta/0.1.0"}})];
    for i in 0..files {
        let name = format!("part-{i:04}.jsonl");
        let row = row(i);
        fs::write(t.path.join(&name), &row).unwrap();
        lines.push(json!({"add": {"path": name, "size": row.len(), "modificationTime": 1,
            "dataChange": true, "stats": "{\"numRecords\":1}"}}));
    }
    t.write_commit(1, &lines);
}

/// A version of more data files than the process may hold open (`ulimit -n 64`, 300 files of
/// one distinct row each) reads whole and in order: `read`, `read --where`, `read --columns`,
/// `describe --json`, `export` and `optimize` keep a bounded number of files open (before,
/// `read` opened every file first and failed with "Too many open files").
#[test]
fn a_version_of_more_files_than_the_descriptor_limit_reads_whole() {
    const FILES: usize = 300;
    let t = TempTable::new(&["id:int"]);
    one_row_files_commit(&t, FILES, |i| format!("{{\"id\":{i}}}\n"));
    let limited = |args: &[&str]| -> Out {
        let mut c = std::process::Command::new("sh");
        c.arg("-c")
            .arg("ulimit -n 64 && exec \"$@\"")
            .arg("sh")
            .arg(BIN)
            .args(args);
        run(c, b"")
    };
    let all: Vec<i64> = (0..FILES as i64).collect();
    // The limit is in force for the command (fewer descriptors than the version has files).
    let mut c = std::process::Command::new("sh");
    c.arg("-c").arg("ulimit -n 64 && ulimit -n");
    assert_eq!(run(c, b"").ok().text().trim(), "64");
    assert_eq!(ids(&limited(&["read", &t.p()]).ok().stdout), all);
    assert_eq!(ids(&limited(&["read", &t.p(), "--where", "id >= 0"]).ok().stdout), all);
    let cols = limited(&["read", &t.p(), "--columns", "id", "--limit", "250"]).ok();
    assert_eq!(ids(&cols.stdout), all[..250].to_vec());
    assert_eq!(limited(&["describe", &t.p(), "--json"]).ok().json()["numFiles"], FILES);
    let dest = tempfile::tempdir().unwrap();
    let dest = dest.path().join("dest");
    limited(&["export", &t.p(), dest.to_str().unwrap()]).ok();
    limited(&["optimize", &t.p()]).ok();
    assert_eq!(t.describe()["numFiles"], 1);
    assert_eq!(ids(&limited(&["read", &t.p()]).ok().stdout), all);
    assert_eq!(ids(&limited(&["read", &t.p(), "--version", "1"]).ok().stdout), all);
}

/// `describe` prints the log's numbers only when the files back them: a live data file missing,
/// cut, grown or a symlink fails it like `read` (exit 1, naming the file); older versions that do
/// not name the file still describe.
#[test]
fn describe_fails_like_read_when_a_live_data_file_is_not_as_recorded() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 2));
    let (name, p, good) = append_one(&t, &small_rows(10, 2));
    let other = t.path.join("elsewhere.jsonl");
    fs::write(&other, &good).unwrap();
    for how in ["missing", "cut", "grown", "symlink"] {
        match how {
            "missing" => fs::remove_file(&p).unwrap(),
            "cut" => fs::write(&p, &good[..good.len() - 2]).unwrap(),
            "grown" => fs::write(&p, [&good[..], b"{}\n"].concat()).unwrap(),
            _ => {
                fs::remove_file(&p).unwrap();
                std::os::unix::fs::symlink(&other, &p).unwrap();
            }
        }
        t.td("read", &[]).code(1).stderr_has(&[&name]);
        t.td("describe", &[]).code(1).stderr_has(&[&name]);
        t.td("describe", &["--json"]).code(1).stderr_has(&[&name]);
        t.td("describe", &["--version", "1"]).ok();
        let _ = fs::remove_file(&p);
        fs::write(&p, &good).unwrap();
        t.td("describe", &[]).ok();
    }
}

/// A sparse 2 GiB commit is damage naming its version, decided on its size before any byte is
/// read (docs/FORMAT.md, "Commit completeness"): no 2 GiB of memory, earlier versions read.
#[test]
fn an_oversized_commit_is_damage_decided_before_reading_it() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 2));
    t.append(&small_rows(10, 1));
    let p = t.log_dir().join(format!("{:020}.json", 3));
    fs::File::create(&p).unwrap().set_len(2 << 30).unwrap();
    let start = std::time::Instant::now();
    t.td("read", &[]).code(1).stderr_has(&["version 3 is damaged", "bytes"]);
    assert!(start.elapsed().as_secs() < 5, "{:?}", start.elapsed());
    assert_eq!(ids(&t.read_v(2)), vec![1, 2, 10]);
    t.td("check", &[]).code(1);
    // The same bound for a version checksum (a warning: readers never need it).
    fs::remove_file(&p).unwrap();
    let crc = t.log_dir().join(format!("{:020}.crc", 2));
    fs::File::create(&crc).unwrap().set_len(2 << 30).unwrap();
    let out = t.td("check", &[]).ok();
    assert!(out.text().contains("bytes, more than"), "{}", out.text());
}

/// `changes` checks every data file it will print before its first row: a missing or cut file
/// of a later version prints nothing and exits 1 naming it.
#[test]
fn changes_prints_nothing_when_a_later_versions_file_is_damaged() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 2));
    t.append(&small_rows(10, 1));
    let (name, p, good) = append_one(&t, &small_rows(20, 1));
    assert_eq!(lines(&t.td("changes", &[]).ok().stdout).len(), 4);
    fs::write(&p, &good[..good.len() - 1]).unwrap();
    let out = t.td("changes", &[]).code(1).stderr_has(&[&name]);
    assert!(out.stdout.is_empty(), "{}", out.text());
    fs::remove_file(&p).unwrap();
    let out = t.td("changes", &[]).code(1).stderr_has(&[&name, "missing"]);
    assert!(out.stdout.is_empty(), "{}", out.text());
    let out = t.td("changes", &["--to-version", "2"]).ok();
    assert_eq!(lines(&out.stdout).len(), 3);
}

/// Append `rows` and return the new data file: (name, path, bytes).
fn append_one(t: &TempTable, rows: &[u8]) -> (String, std::path::PathBuf, Vec<u8>) {
    let before = t.part_files();
    t.append(rows);
    let name = t.part_files().difference(&before).next().unwrap().clone();
    let p = t.path.join(&name);
    let good = fs::read(&p).unwrap();
    (name, p, good)
}

/// `check --deep` on a table whose schema grew (docs/FORMAT.md, "Schema evolution"): rows
/// written before `alter add-column` lack the new key and are canonical as they are, also after
/// `optimize` concatenates files of both schemas and after `restore`; a line that is not canonical
/// under any schema the table had is still damage.
#[test]
fn deep_check_accepts_rows_written_before_add_column() {
    let t = TempTable::new(&["id:int!"]);
    assert_eq!(t.append(b"{\"id\":1}\n"), 1);
    t.td("alter", &["add-column", "a:int"]).ok();
    t.td("check", &["--deep"]).ok();
    assert_eq!(t.append(b"{\"id\":2,\"a\":5}\n{\"id\":3}\n"), 3);
    t.td("check", &["--deep"]).ok();
    t.td("optimize", &[]).ok();
    t.td("check", &["--deep"]).ok();
    t.td("restore", &["--version", "1"]).ok();
    t.td("check", &["--deep"]).ok();
    t.td("restore", &["--version", "4"]).ok();
    t.td("check", &["--deep"]).ok();
    let rows = String::from_utf8(t.read()).unwrap();
    assert!(
        rows.contains("{\"id\":1}\n") && rows.contains("{\"id\":2,\"a\":5}\n"),
        "{rows}"
    );
    // The optimized file: same size, keys out of order on one line.
    let files = t.part_files();
    let mut damaged = false;
    for name in files {
        let p = t.path.join(name);
        let text = fs::read_to_string(&p).unwrap();
        if text.contains("{\"id\":2,\"a\":5}") {
            fs::write(&p, text.replace("{\"id\":2,\"a\":5}", "{\"a\":5,\"id\":2}")).unwrap();
            damaged = true;
        }
    }
    assert!(damaged);
    let out = t.td("check", &["--deep"]).code(1);
    assert!(out.text().contains("not canonical"), "{}", out.text());
}

/// A data file cut, or replaced by a file of the same size, after `read` checked it and before
/// it was copied out fails the read naming the file (docs/FORMAT.md "Data files"), never exit 0
/// with a shorter or different version: the output is stalled in a full pipe while the file
/// changes, held open since its check, or under `ulimit -n 64` so the last files are opened
/// again when their turn comes.
#[test]
fn a_data_file_changed_during_a_read_fails_it() {
    const FILES: usize = 200;
    for (how, limit) in [("cut", 1024), ("cut", 64), ("replaced", 64)] {
        let t = TempTable::new(&["id:int", "pad:str"]);
        let pad = "x".repeat(2000);
        one_row_files_commit(&t, FILES, |i| format!("{{\"id\":{i},\"pad\":\"{pad}\"}}\n"));
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$@\""))
            .arg("sh")
            .arg(BIN)
            .args(["read", &t.p()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Every file is checked before the first byte goes out; then the pipe fills and the
        // copy waits (state S) with most files still to go.
        std::thread::sleep(std::time::Duration::from_millis(500));
        for _ in 0..100 {
            if proc_state(child.id()) == Some('S') {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let last = t.path.join(format!("part-{:04}.jsonl", FILES - 1));
        let row = fs::read(&last).unwrap();
        match how {
            "cut" => fs::write(&last, &row[..row.len() / 2]).unwrap(),
            _ => {
                let tmp = t.path.join("replacement.tmp");
                fs::write(
                    &tmp,
                    row.iter()
                        .map(|b| if *b == b'x' { b'y' } else { *b })
                        .collect::<Vec<u8>>(),
                )
                .unwrap();
                fs::rename(&tmp, &last).unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{how} {limit}: {err}");
        let why = if (how, limit) == ("cut", 64) {
            "but its add action says"
        } else {
            "changed while"
        };
        assert!(
            err.contains(&format!("part-{:04}.jsonl", FILES - 1)) && err.contains(why),
            "{how} {limit}: {err}"
        );
        assert!(!out.stdout.contains(&b'y'), "{how}: the replaced bytes went out");
        assert!(
            out.stdout.len() < FILES * row.len(),
            "{how} {limit}: the whole version went out"
        );
    }
}
