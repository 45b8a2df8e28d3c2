//! Row-level changes from the CLI (docs/CLI.md "Row-level changes", docs/FORMAT.md "Row-level
//! changes"): `read --where` with data skipping, `delete`, `update` and `merge` on the flights
//! sample, checked against the rows computed here from the rows before, against the real
//! `deltalake` (the log at every version, and the rows of every version through `export`), and
//! racing processes under WriteSerializable.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};

use crate::delta_compat::{assert_agrees, fixture, python};
use crate::support::{FLIGHTS, TempTable, cmd, lines};

fn rows(b: &[u8]) -> Vec<Value> {
    lines(b)
        .iter()
        .map(|l| serde_json::from_str(l).expect("a row"))
        .collect()
}

/// The flights table of three appends (January, February, March: one month per data file).
fn flights() -> TempTable {
    let t = TempTable::new(FLIGHTS);
    for m in ["jan", "feb", "mar"] {
        let f = fixture(&format!("flights-{m}.jsonl"));
        t.td("append", &["--file", f.to_str().unwrap()]).ok();
    }
    t
}

/// `(year, month, day, carrier, flight, dep_delay, arr_delay, tailnum)` of each row, sorted:
/// what is compared with deltalake.
fn key_rows(rows: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!([
                r["year"],
                r["month"],
                r["day"],
                r["carrier"],
                r["flight"],
                r["dep_delay"],
                r["arr_delay"],
                r["tailnum"]
            ])
        })
        .collect();
    out.sort_by_key(|v| v.to_string());
    out
}

/// The same columns of every version of the Delta table `dest`, as the real deltalake reads
/// its Parquet files.
fn deltalake_rows(dest: &std::path::Path, versions: u64) -> Vec<Vec<Value>> {
    let script = "import sys, json, deltalake\n\
        out = []\n\
        for v in range(int(sys.argv[2])):\n\
        \x20   t = deltalake.DeltaTable(sys.argv[1], version=v).to_pyarrow_table().to_pylist()\n\
        \x20   rows = [[r['year'], r['month'], r['day'], r['carrier'], r['flight'], r['dep_delay'], r['arr_delay'], r['tailnum']] for r in t]\n\
        \x20   out.append(sorted(rows, key=lambda r: json.dumps(r, separators=(',', ':'))))\n\
        print(json.dumps(out))\n\
        sys.stdout.flush()\n\
        import os; os._exit(0)\n";
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(dest)
        .arg(versions.to_string())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "deltalake: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("deltalake rows as JSON")
}

/// Sorted as the Python above sorts (compact JSON text of each row).
fn sorted_like_python(mut v: Vec<Value>) -> Vec<Value> {
    v.sort_by_key(|r| r.to_string());
    v
}

#[test]
fn delete_update_merge_on_flights_agree_with_deltalake_at_every_version() {
    let t = flights(); // versions 0-3
    let p = t.p();
    let v3 = rows(&t.read());
    assert_eq!(v3.len(), 2500);

    // DELETE: the February flights to LAX; only February's file is rewritten, in order.
    let out = t
        .td("delete", &["--where", "month = 2 AND dest = 'LAX'", "--json"])
        .ok()
        .json();
    let want: Vec<Value> = v3
        .iter()
        .filter(|r| !(r["month"] == 2 && r["dest"] == "LAX"))
        .cloned()
        .collect();
    let deleted = (v3.len() - want.len()) as u64;
    assert!(deleted > 0);
    assert_eq!(out["version"], 4);
    assert_eq!(out["operation"], "DELETE");
    assert_eq!(out["operationMetrics"]["numDeletedRows"], deleted);
    assert_eq!(out["operationMetrics"]["numRemovedFiles"], 1);
    assert_eq!(out["operationMetrics"]["numAddedFiles"], 1);
    assert_eq!(out["operationMetrics"]["numCopiedRows"], 1000 - deleted);
    assert_eq!(
        (out["filesTotal"].clone(), out["filesSkipped"].clone()),
        (json!(3), json!(2))
    );
    let v4 = rows(&t.read());
    assert_eq!(v4, want, "the rows left, in their order");

    // UPDATE: a computed value and a string concatenation on the March JFK flights.
    let out = t
        .td(
            "update",
            &[
                "--set",
                "arr_delay = arr_delay + 10",
                "--set",
                "tailnum = tailnum || '-X'",
                "--where",
                "origin = 'JFK' AND month = 3 AND arr_delay IS NOT NULL",
                "--json",
            ],
        )
        .ok()
        .json();
    let mut want = v4.clone();
    let mut updated = 0;
    for r in &mut want {
        if r["origin"] == "JFK" && r["month"] == 3 && !r["arr_delay"].is_null() {
            r["arr_delay"] = json!(r["arr_delay"].as_i64().unwrap() + 10);
            r["tailnum"] = match r["tailnum"].as_str() {
                Some(s) => json!(format!("{s}-X")),
                None => Value::Null,
            };
            updated += 1;
        }
    }
    assert!(updated > 0);
    assert_eq!(out["operationMetrics"]["numUpdatedRows"], updated);
    assert_eq!(out["operationMetrics"]["numRemovedFiles"], 1);
    let v5 = rows(&t.read());
    assert_eq!(v5, want, "the updated rows in place, the others as they were");

    // MERGE by (year, month, day, carrier, flight): five January rows replaced, one deleted by
    // the marker, two new rows inserted.
    let jan: Vec<Value> = v5.iter().filter(|r| r["month"] == 1).cloned().collect();
    let mut source = String::new();
    let mut replaced = Vec::new();
    for r in jan.iter().step_by(150).take(5) {
        let mut s = r.clone();
        s["dep_delay"] = json!(999);
        source.push_str(&s.to_string());
        source.push('\n');
        replaced.push(s);
    }
    let gone = jan[7].clone();
    let mut marker = gone.clone();
    marker["remove"] = json!(true);
    source.push_str(&marker.to_string());
    source.push('\n');
    let mut new1 = jan[0].clone();
    new1["flight"] = json!(99998);
    let mut new2 = jan[0].clone();
    new2["flight"] = json!(99999);
    source.push_str(&format!("{new1}\n{new2}\n"));
    let key = |r: &Value| json!([r["year"], r["month"], r["day"], r["carrier"], r["flight"]]);
    let by_key: BTreeMap<String, &Value> = replaced.iter().map(|r| (key(r).to_string(), r)).collect();
    // Every target row with a replaced key takes the source row (a key may hold several target
    // rows: each is replaced).
    let mut want: Vec<Value> = Vec::new();
    let mut n_updated = 0;
    for r in &v5 {
        if key(r) == key(&gone) {
            continue;
        }
        match by_key.get(&key(r).to_string()) {
            Some(s) => {
                want.push((*s).clone());
                n_updated += 1;
            }
            None => want.push(r.clone()),
        }
    }
    want.push(new1.clone());
    want.push(new2.clone());
    let out = t
        .td_in(
            "merge",
            &[
                "--on",
                "year,month,day,carrier,flight",
                "--delete-when",
                "remove",
                "--json",
            ],
            source.as_bytes(),
        )
        .ok()
        .json();
    assert_eq!(out["operation"], "MERGE");
    let m = &out["operationMetrics"];
    assert_eq!(m["numSourceRows"], 8);
    assert_eq!(m["numTargetRowsUpdated"], n_updated);
    assert_eq!(m["numTargetRowsDeleted"], 1);
    assert_eq!(m["numTargetRowsInserted"], 2);
    assert_eq!(m["numTargetFilesRemoved"], 1);
    assert_eq!(m["numTargetFilesAdded"], 2);
    assert_eq!(out["filesSkipped"], 2, "February and March hold none of the keys");
    let v6 = rows(&t.read());
    assert_eq!(v6, want, "merged rows in place, inserted ones at the end");

    // deltalake: the log at every version (files, sizes, row counts, statistics, operations and
    // parameters), and the rows of every version through an exported copy.
    let append = ("WRITE", Some("Append"));
    let ops = [
        ("CREATE TABLE", Some("ErrorIfExists")),
        append,
        append,
        append,
        ("DELETE", None),
        ("UPDATE", None),
        ("MERGE", None),
    ];
    assert_eq!(assert_agrees(&t.path, &ops), 7);
    let dest = t.dir.path().join("exported");
    t.td("export", &[dest.to_str().unwrap(), "--all-versions"]).ok();
    let theirs = deltalake_rows(&dest, 7);
    for v in 0..7u64 {
        let ours = rows(&t.read_v(v));
        assert_eq!(
            theirs[v as usize],
            sorted_like_python(key_rows(&ours)),
            "deltalake reads version {v} of the exported table with other rows"
        );
    }
    let h = t.td("history", &["--json"]).ok().json();
    assert_eq!(h[4]["operationParameters"]["predicate"], "month = 2 AND dest = 'LAX'");
    t.td("check", &[]).ok();
    let _ = p;
}

#[test]
fn read_where_skips_files_by_statistics_and_never_opens_them() {
    let t = flights();
    let all = rows(&t.read());
    let out = t
        .td("read", &["--where", "month = 2 AND dep_delay > 60", "--explain"])
        .ok();
    let want: Vec<Value> = all
        .iter()
        .filter(|r| r["month"] == 2 && r["dep_delay"].as_i64().is_some_and(|d| d > 60))
        .cloned()
        .collect();
    assert!(!want.is_empty());
    assert_eq!(rows(&out.stdout), want);
    assert!(
        out.stderr.contains("3 files total, 2 skipped by statistics, 1 read"),
        "{}",
        out.stderr
    );
    // IN, BETWEEN, OR and NOT are judged against the statistics too.
    let e = t
        .td("read", &["--where", "month IN (1, 3) AND NOT month = 1", "--explain"])
        .ok();
    assert!(e.stderr.contains("2 skipped by statistics, 1 read"), "{}", e.stderr);
    let e = t
        .td(
            "read",
            &["--where", "month BETWEEN 4 AND 12 OR year < 2013", "--explain"],
        )
        .ok();
    assert!(e.stderr.contains("3 skipped by statistics, 0 read"), "{}", e.stderr);
    assert!(e.stdout.is_empty());
    // A timestamp compared as an instant.
    let e = t
        .td(
            "read",
            &["--where", "time_hour >= '2013-03-01T00:00:00-05:00'", "--explain"],
        )
        .ok();
    assert!(e.stderr.contains("2 skipped by statistics, 1 read"), "{}", e.stderr);
    assert_eq!(rows(&e.stdout).len(), 500);

    // --columns and --limit.
    let c = t
        .td(
            "read",
            &["--where", "month = 3", "--columns", "flight,carrier", "--limit", "2"],
        )
        .ok();
    let march: Vec<&Value> = all.iter().filter(|r| r["month"] == 3).collect();
    assert_eq!(
        rows(&c.stdout),
        vec![
            json!({"flight": march[0]["flight"], "carrier": march[0]["carrier"]}),
            json!({"flight": march[1]["flight"], "carrier": march[1]["carrier"]}),
        ]
    );
    assert_eq!(
        c.text().lines().next().unwrap(),
        format!(
            "{{\"flight\":{},\"carrier\":{}}}",
            march[0]["flight"], march[0]["carrier"]
        )
    );

    // A skipped file is not opened: with January's data file gone, a read of February still
    // works, while a plain read (and a --where that needs January) fails naming the file.
    let jan_file = t.describe()["files"][0]["path"].as_str().unwrap().to_string();
    std::fs::remove_file(t.path.join(&jan_file)).unwrap();
    let again = t.td("read", &["--where", "month = 2 AND dep_delay > 60"]).ok();
    assert_eq!(rows(&again.stdout), want);
    t.td("read", &[]).code(1).stderr_has(&[&jan_file]);
    t.td("read", &["--where", "month = 1"]).code(1).stderr_has(&[&jan_file]);
    t.td("delete", &["--where", "month = 2"]).ok();
}

#[test]
fn mistakes_are_named_and_commit_nothing() {
    let t = flights();
    let before = t.latest();
    t.td("read", &["--where", "carier = 'UA'"])
        .code(2)
        .stderr_has(&["no column \"carier\"", "carrier"]);
    t.td("delete", &["--where", "carrier = 3"])
        .code(2)
        .stderr_has(&["carrier", "str"]);
    t.td("delete", &["--where", "dep_delay +"])
        .code(2)
        .stderr_has(&["--where"]);
    t.td("delete", &["--where", "upper(carrier) = 'UA'"])
        .code(2)
        .stderr_has(&["unsupported"]);
    t.td("update", &["--set", "dest = 7", "--where", "true"])
        .code(2)
        .stderr_has(&["\"dest\""]);
    t.td("update", &["--set", "nope = 1", "--where", "true"])
        .code(2)
        .stderr_has(&["\"nope\""]);
    t.td("read", &["--columns", "year,nope"])
        .code(2)
        .stderr_has(&["\"nope\""]);
    // A value that breaks NOT NULL is refused like an appended one, naming the column.
    t.td("update", &["--set", "year = NULL", "--where", "month = 3"])
        .code(5)
        .stderr_has(&["\"year\"", "line 1"]);
    // A division by zero names the file and line.
    t.td(
        "update",
        &[
            "--set",
            "dep_delay = dep_delay / 0",
            "--where",
            "month = 3 AND dep_delay IS NOT NULL",
        ],
    )
    .code(2)
    .stderr_has(&["division by zero", "line"]);
    assert_eq!(t.latest(), before, "nothing committed");
    let leftovers = t.part_files().len();
    assert_eq!(leftovers, 3, "no new data file left behind");

    // No match: exit 0, a clear line, committed false.
    let o = t.td("delete", &["--where", "month = 12"]).ok();
    assert!(o.text().contains("no row matches; nothing committed"), "{}", o.text());
    let j = t
        .td("update", &["--set", "flight = 1", "--where", "month = 12", "--json"])
        .ok()
        .json();
    assert_eq!(
        (j["committed"].clone(), j["reason"].clone()),
        (json!(false), json!("noMatch"))
    );
    assert_eq!(j["filesSkipped"], 3);
    assert_eq!(t.latest(), before);

    // --expect-version and --txn as append has them.
    t.td("delete", &["--where", "month = 3", "--expect-version", "1"])
        .code(3);
    let first = t
        .td(
            "delete",
            &["--where", "month = 3 AND dep_delay > 100", "--txn", "job:1", "--json"],
        )
        .ok()
        .json();
    assert!(
        first["operationMetrics"]["numDeletedRows"].as_u64().unwrap() > 0,
        "{first}"
    );
    let again = t
        .td(
            "delete",
            &["--where", "month = 3 AND dep_delay < 0", "--txn", "job:1", "--json"],
        )
        .ok()
        .json();
    assert_eq!(again["reason"], "txnAlreadyApplied");
    assert_eq!(t.latest(), before + 1);
    // With a txn, no match still records the txn (as an append of no rows does).
    let none = t
        .td("delete", &["--where", "month = 12", "--txn", "job:2", "--json"])
        .ok()
        .json();
    assert_eq!(
        (none["committed"].clone(), none["version"].clone()),
        (json!(true), json!(before + 2))
    );
    assert_eq!(t.describe()["txns"], json!({"job": 2}));
    let before = before + 1;

    // Two source rows with one key that match a target row: refused, as Delta does.
    let all = rows(&t.read());
    let r = all[0].to_string();
    t.td_in(
        "merge",
        &["--on", "year,month,day,carrier,flight"],
        format!("{r}\n{r}\n").as_bytes(),
    )
    .code(5)
    .stderr_has(&["lines 1 and 2", "only once"]);
    assert_eq!(t.latest(), before + 1);
}

/// Two updates that increment a counter race 200 times: each exits 0 or 3 (a conflict naming
/// the version), and the counter ends at the number of exits 0, so no update was lost. A blind
/// append racing an update never conflicts.
#[test]
fn racing_updates_lose_no_update() {
    let t = TempTable::new(&["id:int!", "n:int!"]);
    t.append(b"{\"id\":1,\"n\":0}\n{\"id\":2,\"n\":0}\n");
    t.append(b"{\"id\":3,\"n\":0}\n");
    let update = || {
        let mut c = cmd(&t.args("update", &["--set", "n = n + 1", "--where", "id = 1"]));
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c.spawn().expect("spawn update")
    };
    let mut ok = 0u64;
    let mut conflicts = 0u64;
    for _ in 0..200 {
        let (a, b) = (update(), update());
        for c in [a, b] {
            let out = c.wait_with_output().unwrap();
            match out.status.code() {
                Some(0) => ok += 1,
                Some(3) => {
                    let e = String::from_utf8_lossy(&out.stderr);
                    assert!(e.contains("version"), "{e}");
                    conflicts += 1;
                }
                other => panic!("update exited {other:?}: {}", String::from_utf8_lossy(&out.stderr)),
            }
        }
    }
    let n = rows(&t.read())
        .iter()
        .find(|r| r["id"] == 1)
        .map(|r| r["n"].as_u64().unwrap())
        .unwrap();
    assert_eq!(
        n, ok,
        "{ok} updates committed, {conflicts} conflicted, the counter is {n}"
    );
    assert!(ok >= 200, "at least one of each pair commits");

    for i in 0..30 {
        let u = update();
        let row = format!("{{\"id\":{},\"n\":0}}\n", 100 + i);
        let a = t.td_in("append", &[], row.as_bytes());
        assert_eq!(a.code, 0, "{}", a.stderr);
        let out = u.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let all = rows(&t.read());
    assert_eq!(all.len(), 33, "every append kept");
    assert_eq!(all.iter().find(|r| r["id"] == 1).unwrap()["n"], ok + 30);
    t.td("check", &[]).ok();
}

#[test]
fn long_expressions_are_refused_and_values_that_do_not_fit_are_bad_data() {
    let t = TempTable::new(&["id:int!", "n:int", "k:float"]);
    t.append(b"{\"id\":1,\"n\":1,\"k\":0.0}\n");
    // A chain of operators deep enough to overflow a recursive walk is a usage error.
    let long = format!("id = 1{}", " OR id = 1".repeat(2500));
    t.td("read", &["--where", &long])
        .code(2)
        .stderr_has(&["operators; at most 1000"]);
    let sum = format!("n = 1{}", " + 1".repeat(3000));
    t.td("update", &["--set", &sum, "--where", "true"]).code(2);
    // A new value the column cannot hold: exit 5 naming the column, nothing committed.
    t.td("update", &["--set", "n = n / 2", "--where", "true"])
        .code(5)
        .stderr_has(&["column \"n\"", "0.5 is not an integer"]);
    assert_eq!(t.log_versions(), vec![0, 1]);
    // -0.0 and 0.0 are one key, as they are equal in --where.
    let src = t.dir.path().join("src.jsonl");
    std::fs::write(&src, "{\"id\":1,\"n\":2,\"k\":-0.0}\n").unwrap();
    let out = t
        .td("merge", &["--file", src.to_str().unwrap(), "--on", "k", "--json"])
        .ok()
        .json();
    assert_eq!(out["operationMetrics"]["numTargetRowsUpdated"], 1, "{out}");
    // A name given twice is a usage error.
    t.td("read", &["--columns", "id,id"]).code(2).stderr_has(&["twice"]);
    t.td("merge", &["--file", src.to_str().unwrap(), "--on", "k,k"])
        .code(2)
        .stderr_has(&["twice"]);
}

/// The change feed of DELETE, UPDATE and MERGE (docs/FORMAT.md "The change feed"): each commit
/// carries one change data file (`cdc`), so `changes` shows only the rows that changed, as
/// `delete`, `update_preimage` / `update_postimage` and `insert`, never the other rows of the
/// rewritten files; a retention vacuum deletes the change data files with the removed data files
/// and `changes` then names the vacuum (exit 4).
#[test]
fn the_change_feed_shows_update_images_and_deleted_rows_only() {
    let t = TempTable::new(&["id:int!", "v:str"]);
    let rows_in = (1..=6)
        .map(|i| format!("{{\"id\":{i},\"v\":\"r{i}\"}}\n"))
        .collect::<String>();
    t.td_in("append", &[], rows_in.as_bytes()).ok(); // v1
    t.td("update", &["--set", "v = v || '!'", "--where", "id IN (2, 5)"])
        .ok(); // v2
    t.td("delete", &["--where", "id = 3"]).ok(); // v3
    let src = t.dir.path().join("src.jsonl");
    std::fs::write(&src, "{\"id\":1,\"v\":\"m\"}\n{\"id\":9,\"v\":\"new\"}\n").unwrap();
    let out = t
        .td("merge", &["--file", src.to_str().unwrap(), "--on", "id", "--json"])
        .ok()
        .json(); // v4
    assert_eq!(out["operationMetrics"]["numAddedChangeFiles"], 1);
    let feed: Vec<(u64, String, Value, Value)> = rows(&t.td("changes", &["--from-version", "2"]).ok().stdout)
        .into_iter()
        .map(|r| {
            (
                r["_commit_version"].as_u64().unwrap(),
                r["_change_type"].as_str().unwrap().to_string(),
                r["id"].clone(),
                r["v"].clone(),
            )
        })
        .collect();
    let want = vec![
        (2, "update_preimage", json!(2), json!("r2")),
        (2, "update_postimage", json!(2), json!("r2!")),
        (2, "update_preimage", json!(5), json!("r5")),
        (2, "update_postimage", json!(5), json!("r5!")),
        (3, "delete", json!(3), json!("r3")),
        (4, "update_preimage", json!(1), json!("r1")),
        (4, "update_postimage", json!(1), json!("m")),
        (4, "insert", json!(9), json!("new")),
    ];
    let want: Vec<(u64, String, Value, Value)> =
        want.into_iter().map(|(v, c, i, s)| (v, c.to_string(), i, s)).collect();
    assert_eq!(feed, want);
    // Each of those commits names one change data file of the recorded size and row count.
    for v in 2..=4 {
        let log = std::fs::read_to_string(t.log_dir().join(format!("{v:020}.json"))).unwrap();
        let cdc: Vec<Value> = log
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter_map(|a| a.get("cdc").cloned())
            .collect();
        assert_eq!(cdc.len(), 1, "version {v}: {log}");
        let path = t.path.join(cdc[0]["path"].as_str().unwrap());
        assert!(cdc[0]["path"].as_str().unwrap().starts_with("_change_data/cdc-"));
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            cdc[0]["size"].as_u64().unwrap()
        );
        assert_eq!(cdc[0]["dataChange"], false);
    }
    // A vacuum with no retention deletes them; the feed of those versions names the vacuum.
    // Its counts say what they count, and the data files it counts are the ones `check` counts.
    let out = t.td("vacuum", &["--retain", "0s", "--force", "--json"]).ok().json();
    assert_eq!(out["numExpiredChangeDataFiles"], 3, "{out}");
    let data = out["numExpiredDataFiles"].as_u64().unwrap();
    assert_eq!(out["numFiles"].as_u64().unwrap(), data + 3, "{out}");
    let left = std::fs::read_dir(t.path.join("_change_data")).unwrap().count();
    assert_eq!(left, 0, "change data files left after the vacuum");
    let check = t.td("check", &[]).ok().text();
    assert!(
        check.contains(&format!("{data} data files named by versions up to")),
        "{check}"
    );
    t.td("changes", &["--from-version", "2"]).code(4).stderr_has(&[
        "version 2's changes need",
        "_change_data/cdc-",
        "vacuum",
    ]);
}
