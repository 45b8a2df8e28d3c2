//! docs/CLI.md "Usage" and docs/FORMAT.md through the real `tinydelta` binary: every command, the
//! log's shape, canonical rows, every rejected input, path safety, exit codes and streaming memory.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::*;

// ---------------------------------------------------------------------------------------------
// create

#[test]
fn create_writes_version_zero_and_refuses_an_existing_table() {
    let t = TempTable::uncreated();
    let out = td(&[&["create", &t.p()], FLIGHTS].concat()).ok();
    assert!(out.text().contains("version 0"), "{}", out.text());
    assert_eq!(t.log_versions(), vec![0]);
    assert_eq!(t.part_files().len(), 0);

    let before = t.commit_bytes(0);
    td(&["create", &t.p(), "id:int"])
        .code(1)
        .stderr_has(&["already exists", &t.p()]);
    td(&[&["create", &t.p()], FLIGHTS].concat()).code(1);
    assert_eq!(t.commit_bytes(0), before, "a refused create must not touch version 0");
    assert_eq!(t.log_versions(), vec![0]);

    let d = t.describe();
    assert_eq!(d["version"], 0);
    assert_eq!(d["numFiles"], 0);
    assert_eq!(d["numRecords"], 0);
    assert_eq!(d["sizeBytes"], 0);
    assert_eq!(t.read(), b"");
}

#[test]
fn create_usage_errors_exit_2_and_create_nothing() {
    let t = TempTable::uncreated();
    for cols in [vec!["id:integer"], vec!["id"], vec!["a:int", "a:str"], vec![":int"]] {
        let out = td(&[&["create", &t.p()], cols.as_slice()].concat()).code(2);
        assert!(!out.stderr.trim().is_empty(), "usage error without a message");
        assert!(
            !t.log_dir().join(format!("{:020}.json", 0)).exists(),
            "{cols:?} created a table"
        );
    }
    td(&["create", &t.p()]).code(2);
}

// ---------------------------------------------------------------------------------------------
// append, overwrite, read

#[test]
fn append_from_file_and_stdin_reads_back_canonical_rows() {
    let t = TempTable::new(FLIGHTS);
    let a = data_bytes("flights-a.jsonl");
    let b = data_bytes("flights-b.jsonl");
    let c = data_bytes("flights-c.jsonl");
    // The flights fixtures are already canonical, so `read` must give back the very bytes.
    assert_eq!(t.append_file("flights-a.jsonl"), 1);
    assert_eq!(t.append(&b), 2);
    let cpath = data("flights-c.jsonl");
    let out = td_in(&["append", &t.p(), "--file", cpath.to_str().unwrap()], b"ignored stdin").ok();
    assert_eq!(version_in(&out.text()), 3);
    assert!(
        out.text().contains(&format!("appended {} rows", lines(&c).len())),
        "{}",
        out.text()
    );

    assert_eq!(t.read_v(0), b"");
    assert_eq!(t.read_v(1), a);
    assert_eq!(t.read_v(2), [a.clone(), b.clone()].concat());
    assert_eq!(t.read(), [a.clone(), b.clone(), c.clone()].concat());
    assert_eq!(t.read_v(3), t.read());
    let d = t.describe();
    assert_eq!(
        d["numRecords"].as_u64(),
        Some((lines(&a).len() + lines(&b).len() + lines(&c).len()) as u64)
    );
    assert_eq!(d["numFiles"], 3);
    assert_eq!(t.part_files().len(), 3);
}

#[test]
fn append_of_no_rows_commits_nothing() {
    let t = TempTable::new(SMALL);
    for input in [&b""[..], b"\n\n", b"\r\n  \n\t\n", b"\xEF\xBB\xBF\n"] {
        let out = t.td_in("append", &[], input).ok();
        assert!(out.text().contains("nothing committed"), "{}", out.text());
    }
    assert_eq!(t.log_versions(), vec![0]);
    assert!(t.part_files().is_empty(), "an empty append left a data file");
}

#[test]
fn overwrite_replaces_every_live_file_and_keeps_old_versions() {
    let t = TempTable::new(FLIGHTS);
    let a = data_bytes("flights-a.jsonl");
    let b = data_bytes("flights-b.jsonl");
    let c = data_bytes("flights-c.jsonl");
    t.append(&a);
    t.append(&b);
    let v1 = t.read_v(1);
    let v2 = t.read_v(2);
    let cpath = data("flights-c.jsonl");
    let out = t.td("overwrite", &["--file", cpath.to_str().unwrap()]).ok();
    assert_eq!(version_in(&out.text()), 3);
    assert_eq!(t.read(), c);
    assert_eq!(t.read_v(1), v1);
    assert_eq!(t.read_v(2), v2);
    let d = t.describe();
    assert_eq!(d["numFiles"], 1);
    assert_eq!(d["numRecords"].as_u64(), Some(lines(&c).len() as u64));
    // The commit removes both live files and adds one.
    let actions = t.commit(3);
    assert_eq!(actions.iter().filter(|a| a.get("remove").is_some()).count(), 2);
    assert_eq!(actions.iter().filter(|a| a.get("add").is_some()).count(), 1);
    // Overwrite via stdin, then with nothing: an empty table version.
    assert_eq!(t.overwrite(&a), 4);
    assert_eq!(t.read(), a);
    assert_eq!(t.overwrite(b""), 5);
    assert_eq!(t.read(), b"");
    assert_eq!(t.describe()["numFiles"], 0);
    assert_eq!(t.read_v(3), c);
}

#[test]
fn read_version_and_missing_versions() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 3));
    t.append(&small_rows(3, 2));
    assert_eq!(ids(&t.read_v(1)), vec![0, 1, 2]);
    assert_eq!(ids(&t.read_v(2)), vec![0, 1, 2, 3, 4]);
    t.td("read", &["--version", "3"])
        .code(4)
        .stderr_has(&["version 3 not found", &t.p()]);
    t.td("describe", &["--version", "99"])
        .code(4)
        .stderr_has(&["version 99"]);
    t.td("restore", &["--version", "7"]).code(4).stderr_has(&["version 7"]);
    t.td("read", &["--version", "x"]).code(2);
    t.td("read", &["--version", "1", "--as-of", "2020-01-01T00:00:00Z"])
        .code(2);
}

/// `read` into a pipe (spliced), into a file (copy_file_range) and into /dev/null (sendfile)
/// writes the same bytes, and a reader that goes away early ends it with exit 0 (docs/CLI.md
/// "Usage": a closed pipe is not an error).
#[test]
fn read_into_a_pipe_a_file_and_a_reader_that_stops() {
    let t = TempTable::new(SMALL);
    let mut all = Vec::new();
    for k in 0..4 {
        let rows = small_rows(k * 5000, 5000);
        t.append(&rows);
        all.extend_from_slice(&rows);
    }
    let piped = t.read();
    assert_eq!(piped.len(), all.len());
    let file = t.dir.path().join("out.jsonl");
    let status = cmd(&t.args("read", &[]))
        .stdout(std::fs::File::create(&file).unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(fs::read(&file).unwrap(), piped);
    let status = cmd(&t.args("read", &[]))
        .stdout(std::fs::File::create("/dev/null").unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    // The reader takes one line and closes the pipe: EPIPE, exit 0, nothing on stderr.
    let mut child = cmd(&t.args("read", &[]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    drop(out);
    let done = child.wait_with_output().unwrap();
    assert_eq!(line.as_bytes(), &piped[..line.len()]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(done.stderr.is_empty(), "{}", String::from_utf8_lossy(&done.stderr));
    // A non-blocking pipe whose reader is slow: every byte, after waits for room.
    let (mut r, w) = std::io::pipe().unwrap();
    rustix::fs::fcntl_setfl(&w, rustix::fs::OFlags::NONBLOCK).unwrap();
    let child = cmd(&t.args("read", &[]))
        .stdout(w)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut r, &mut got).unwrap();
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(got == piped, "{} bytes of {}", got.len(), piped.len());
}

/// A table whose `delta.appendOnly` is true (Delta PROTOCOL "Append-only Tables") takes appends
/// and rearrangements (`optimize`), and refuses every commit that would remove rows, committing
/// nothing (docs/FORMAT.md "Table properties").
#[test]
fn an_append_only_table_refuses_changes_that_remove_rows() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 3));
    t.append(&small_rows(3, 3));
    t.td("alter", &["set-property", "delta.appendOnly=true"]).ok();
    let before = t.latest();
    for (cmd, rest) in [
        ("delete", vec!["--where", "id = 1"]),
        ("update", vec!["--where", "id = 1", "--set", "x = 2.5"]),
        ("restore", vec!["--version", "1"]),
    ] {
        t.td(cmd, &rest)
            .code(1)
            .stderr_has(&["append-only", "delta.appendOnly", "nothing was committed"]);
        assert_eq!(t.latest(), before, "{cmd} committed nothing");
    }
    t.td_in("overwrite", &[], &small_rows(9, 1))
        .code(1)
        .stderr_has(&["append-only"]);
    assert_eq!(t.latest(), before);
    assert_eq!(ids(&t.read()), (0..6).collect::<Vec<i64>>());
    // Appends and optimize (dataChange false) go on.
    t.append(&small_rows(6, 1));
    t.td("optimize", &[]).ok();
    assert_eq!(ids(&t.read()), (0..7).collect::<Vec<i64>>());
    t.td("alter", &["set-property", "delta.appendOnly=false"]).ok();
    t.td("delete", &["--where", "id = 1"]).ok();
    assert_eq!(ids(&t.read()), vec![0, 2, 3, 4, 5, 6]);
}

#[test]
fn read_as_of_uses_commit_timestamps() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 1));
    t.append(&small_rows(1, 1));
    t.append(&small_rows(2, 1));
    let ts: Vec<i64> = (0..=3)
        .map(|v| t.commit(v)[0]["commitInfo"]["timestamp"].as_i64().expect("timestamp"))
        .collect();
    // Make the data files' mtimes lie: as-of must use commitInfo, never mtimes.
    for p in t.part_files() {
        let f = fs::File::options().write(true).open(t.path.join(p)).unwrap();
        f.set_modified(std::time::UNIX_EPOCH).unwrap();
    }
    for v in 0..=3u64 {
        let at = rfc3339(ts[v as usize]);
        let out = t.td("read", &["--as-of", &at]).ok();
        assert_eq!(out.stdout, t.read_v(v), "--as-of {at} (exactly version {v}'s time)");
        if v < 3 {
            // Just before the next commit is still this version.
            let before_next = rfc3339(ts[v as usize + 1] - 1);
            assert_eq!(t.td("read", &["--as-of", &before_next]).ok().stdout, t.read_v(v));
        }
    }
    // Another offset spelling of the same instant.
    let at = chrono::DateTime::from_timestamp_millis(ts[2])
        .unwrap()
        .with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).unwrap())
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
    assert!(at.ends_with("+02:00"), "{at}");
    assert_eq!(t.td("read", &["--as-of", &at]).ok().stdout, t.read_v(2));
    // Far future: latest. Before version 0: not found.
    assert_eq!(t.td("read", &["--as-of", "2999-01-01T00:00:00Z"]).ok().stdout, t.read());
    let before = rfc3339(ts[0] - 1);
    t.td("read", &["--as-of", &before])
        .code(4)
        .stderr_has(&[&t.p(), &before]);
    t.td("read", &["--as-of", "1970-01-01T00:00:00Z"]).code(4);
    t.td("read", &["--as-of", "yesterday"])
        .code(2)
        .stderr_has(&["yesterday"]);
}

// ---------------------------------------------------------------------------------------------
// describe and history

#[test]
fn describe_text_and_json() {
    let t = TempTable::new(FLIGHTS);
    t.append_file("flights-a.jsonl");
    t.append_file("flights-b.jsonl");
    let rows = lines(&data_bytes("flights-a.jsonl")).len() + lines(&data_bytes("flights-b.jsonl")).len();
    let bytes: u64 = t
        .part_files()
        .iter()
        .map(|p| fs::metadata(t.path.join(p)).unwrap().len())
        .sum();

    let d = t.describe();
    assert_eq!(d["version"], 2);
    assert_eq!(d["numFiles"], 2);
    assert_eq!(d["numRecords"].as_u64(), Some(rows as u64));
    assert_eq!(d["sizeBytes"].as_u64(), Some(bytes));
    let cols = d["schema"].as_array().expect("schema array");
    assert_eq!(cols.len(), FLIGHTS.len());
    assert_eq!(cols[0]["name"], "year");
    assert_eq!(cols[0]["type"], "int");
    assert_eq!(cols[0]["nullable"], false);
    assert_eq!(cols[18]["name"], "time_hour");
    assert_eq!(cols[18]["type"], "timestamp");
    assert_eq!(cols[18]["nullable"], true);
    let files = d["files"].as_array().expect("files");
    assert_eq!(
        files.iter().map(|f| f["numRecords"].as_u64().unwrap()).sum::<u64>(),
        rows as u64
    );

    let d1 = t.td("describe", &["--json", "--version", "1"]).ok().json();
    assert_eq!(d1["version"], 1);
    assert_eq!(d1["numFiles"], 1);
    assert_eq!(
        d1["numRecords"].as_u64(),
        Some(lines(&data_bytes("flights-a.jsonl")).len() as u64)
    );

    let text = t.td("describe", &[]).ok().text();
    assert!(text.contains("version: 2"), "{text}");
    assert!(text.contains(&format!("rows:    {rows}")), "{text}");
    assert!(text.contains(&format!("bytes:   {bytes}")), "{text}");
    assert!(text.contains("files:   2"), "{text}");
    assert!(text.contains(&FLIGHTS.join(" ")), "{text}");
}

/// Another writer's commit without metrics whose `add` has no stats: `history` counts the
/// rows in the file (ROWS and TABLE_ROWS, as `describe` does), never a guessed 0; once the file
/// is gone the numbers are unknown: `?` in the table, `null` in JSON.
#[test]
fn history_counts_rows_of_adds_without_stats_and_never_guesses() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 2)); // 1
    t.append(&small_rows(2, 3)); // 2: becomes another writer's commit
    let mut actions = t.commit(2);
    for a in actions.iter_mut() {
        if let Some(ci) = a.get_mut("commitInfo").and_then(Value::as_object_mut) {
            ci.remove("operationMetrics");
            ci.insert("engineInfo".into(), json!("Apache-Spark/3.5.1 Delta-Lake/3.2.0"));
        }
        if let Some(add) = a.get_mut("add").and_then(Value::as_object_mut) {
            add.remove("stats");
        }
    }
    t.write_commit(2, &actions);
    t.append(&small_rows(5, 1)); // 3
    assert_eq!(t.describe()["numRecords"], 6);
    let rows = |h: &Value, k: &str| -> Vec<Option<u64>> {
        h.as_array().expect("array").iter().map(|e| e[k].as_u64()).collect()
    };
    let h = t.td("history", &["--json"]).ok().json();
    assert_eq!(rows(&h, "rows"), [Some(0), Some(2), Some(3), Some(1)]);
    assert_eq!(rows(&h, "tableRows"), [Some(0), Some(2), Some(5), Some(6)]);

    // The file of version 2 goes missing: its numbers are unknown, the others stay.
    let path = actions
        .iter()
        .find_map(|a| a["add"]["path"].as_str())
        .unwrap()
        .to_string();
    fs::remove_file(t.path.join(&path)).unwrap();
    let h = t.td("history", &["--json"]).ok().json();
    assert_eq!(rows(&h, "rows"), [Some(0), Some(2), None, Some(1)]);
    assert_eq!(rows(&h, "tableRows"), [Some(0), Some(2), None, None]);
    let text = t.td("history", &[]).ok().text();
    let line = text.lines().find(|l| l.starts_with("2 ")).expect("version 2 listed");
    assert!(line.split_whitespace().filter(|w| *w == "?").count() == 2, "{text}");
}

#[test]
fn history_shows_short_names_while_the_log_keeps_delta_names() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 3));
    t.overwrite(&small_rows(10, 2));
    t.td("restore", &["--version", "1"]).ok();
    let h = t.td("history", &["--json"]).ok().json();
    let h = h.as_array().expect("array");
    let ops: Vec<&str> = h.iter().map(|e| e["operation"].as_str().unwrap()).collect();
    assert_eq!(ops, ["CREATE", "APPEND", "OVERWRITE", "RESTORE"]);
    let versions: Vec<u64> = h.iter().map(|e| e["version"].as_u64().unwrap()).collect();
    assert_eq!(versions, [0, 1, 2, 3]);
    let rows: Vec<u64> = h.iter().map(|e| e["rows"].as_u64().unwrap()).collect();
    assert_eq!(rows, [0, 3, 2, 3]);
    let table_rows: Vec<u64> = h.iter().map(|e| e["tableRows"].as_u64().unwrap()).collect();
    assert_eq!(table_rows, [0, 3, 2, 3]);
    let delta: Vec<&str> = h.iter().map(|e| e["deltaOperation"].as_str().unwrap()).collect();
    assert_eq!(delta, ["CREATE TABLE", "WRITE", "WRITE", "RESTORE"]);
    for (v, e) in h.iter().enumerate() {
        assert_eq!(
            e["timestamp"].as_i64(),
            t.commit(v as u64)[0]["commitInfo"]["timestamp"].as_i64()
        );
    }

    assert!(h.iter().all(|e| e["source"].is_null()), "no SOURCE: {h:?}");

    let text = t.td("history", &[]).ok().text();
    let body: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(body.len(), 4, "{text}");
    assert!(body.iter().all(|l| !l.ends_with(' ')), "no trailing blanks: {text:?}");
    for (line, (v, op)) in body
        .iter()
        .zip([(0, "CREATE"), (1, "APPEND"), (2, "OVERWRITE"), (3, "RESTORE")])
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[0], v.to_string(), "{line}");
        assert_eq!(f[2], op, "{line}");
    }
    // The log itself has Delta's names.
    assert_eq!(t.commit(0)[0]["commitInfo"]["operation"], "CREATE TABLE");
    assert_eq!(t.commit(1)[0]["commitInfo"]["operation"], "WRITE");
    assert_eq!(t.commit(1)[0]["commitInfo"]["operationParameters"]["mode"], "Append");
    assert_eq!(t.commit(2)[0]["commitInfo"]["operationParameters"]["mode"], "Overwrite");
    assert_eq!(t.commit(3)[0]["commitInfo"]["operation"], "RESTORE");
    assert_eq!(t.commit(3)[0]["commitInfo"]["operationParameters"]["version"], "1");
}

// ---------------------------------------------------------------------------------------------
// the log's shape (docs/FORMAT.md)

fn stats_of(rows: &[Value], col: &str) -> (Option<Value>, Option<Value>, u64) {
    let mut nulls = 0;
    let mut vals: Vec<&Value> = Vec::new();
    for r in rows {
        match &r[col] {
            Value::Null => nulls += 1,
            v => vals.push(v),
        }
    }
    let key = |v: &&&Value| -> (i64, String) {
        match v {
            Value::Number(n) => (n.as_i64().unwrap_or((n.as_f64().unwrap() * 1e6) as i64), String::new()),
            Value::String(s) => (0, s.clone()),
            _ => (0, String::new()),
        }
    };
    let min = vals.iter().min_by_key(key).map(|v| (*v).clone());
    let max = vals.iter().max_by_key(key).map(|v| (*v).clone());
    (min, max, nulls)
}

#[test]
fn the_log_is_a_valid_delta_log() {
    let t = TempTable::new(FLIGHTS);
    t.append_file("flights-a.jsonl");
    t.append_file("flights-b.jsonl");
    t.overwrite(&data_bytes("flights-c.jsonl"));
    t.td("restore", &["--version", "2"]).ok();
    let latest = t.latest();
    assert_eq!(latest, 4);

    // 20-digit names, nothing else in _delta_log/ after clean commits than commits and their
    // version checksums (PROTOCOL "Version Checksum File"), one per version.
    let mut crcs = 0;
    for name in names_in(&t.log_dir()) {
        let stem = match name.strip_suffix(".crc") {
            Some(stem) => {
                crcs += 1;
                let crc: Value = serde_json::from_slice(&fs::read(t.log_dir().join(&name)).unwrap()).unwrap();
                for k in [
                    "tableSizeBytes",
                    "numFiles",
                    "numMetadata",
                    "numProtocol",
                    "metadata",
                    "protocol",
                ] {
                    assert!(crc.get(k).is_some(), "{name} has no {k}: {crc}");
                }
                stem
            }
            None => name.strip_suffix(".json").unwrap_or_else(|| panic!("stray {name}")),
        };
        assert!(stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()), "{name}");
    }
    assert_eq!(crcs, latest + 1, "one .crc per version");
    assert_eq!(t.log_versions(), (0..=latest).collect::<Vec<_>>());

    let mut prev_ts = i64::MIN;
    let engine = format!("tinydelta/{}", env!("CARGO_PKG_VERSION"));
    let mut sizes: BTreeMap<String, u64> = BTreeMap::new();
    for v in 0..=latest {
        let actions = t.commit(v);
        let ci = &actions[0]["commitInfo"];
        assert!(ci.is_object(), "version {v}: commitInfo is not first: {}", actions[0]);
        assert_eq!(
            actions.iter().filter(|a| a.get("commitInfo").is_some()).count(),
            1,
            "version {v}: one commitInfo"
        );
        let ts = ci["timestamp"].as_i64().expect("timestamp");
        assert!(ts > prev_ts, "version {v}: timestamp {ts} not after {prev_ts}");
        prev_ts = ts;
        assert_eq!(ci["engineInfo"], engine.as_str());
        for key in ["operationParameters", "operationMetrics"] {
            let m = ci[key]
                .as_object()
                .unwrap_or_else(|| panic!("version {v}: {key} missing"));
            for (k, val) in m {
                assert!(val.is_string(), "version {v}: {key}.{k} = {val} is not a string");
            }
        }
        assert!(ci["operation"].is_string());
        if v > 0 {
            assert_eq!(ci["readVersion"].as_i64(), Some(v as i64 - 1), "version {v}");
            assert_eq!(ci["isolationLevel"], "WriteSerializable", "version {v}");
            assert!(ci["isBlindAppend"].is_boolean());
            assert!(
                ci["operationMetrics"]["numOutputRows"].is_string(),
                "version {v}: numOutputRows"
            );
            assert!(
                actions
                    .iter()
                    .all(|a| a.get("protocol").is_none() && a.get("metaData").is_none())
            );
        }
        for a in &actions {
            if let Some(add) = a.get("add") {
                let path = add["path"].as_str().expect("add.path");
                assert!(path.starts_with("part-") && path.ends_with(".jsonl") && !path.contains('/'));
                assert_eq!(add["partitionValues"], json!({}));
                assert!(add["modificationTime"].as_i64().unwrap() > 0);
                assert_eq!(add["dataChange"], true);
                let size = add["size"].as_u64().expect("add.size");
                let file = fs::read(t.path.join(path)).expect("added file exists");
                assert_eq!(size, file.len() as u64, "add.size of {path}");
                if let Some(old) = sizes.insert(path.to_string(), size) {
                    assert_eq!(old, size, "re-added {path} with another size");
                }
                let stats: Value =
                    serde_json::from_str(add["stats"].as_str().expect("stats is a JSON string")).expect("stats parse");
                let rows: Vec<Value> = lines(&file).iter().map(|l| serde_json::from_str(l).unwrap()).collect();
                assert_eq!(stats["numRecords"].as_u64(), Some(rows.len() as u64));
                for col in ["dep_delay", "dep_time", "carrier", "year", "tailnum"] {
                    let (min, max, nulls) = stats_of(&rows, col);
                    assert_eq!(
                        stats["nullCount"][col].as_u64(),
                        Some(nulls),
                        "nullCount.{col} of {path}"
                    );
                    assert_eq!(stats["minValues"].get(col).cloned(), min, "minValues.{col} of {path}");
                    assert_eq!(stats["maxValues"].get(col).cloned(), max, "maxValues.{col} of {path}");
                }
                assert!(stats["minValues"]["time_hour"].is_string());
            }
            if let Some(rm) = a.get("remove") {
                let path = rm["path"].as_str().expect("remove.path");
                assert!(rm["deletionTimestamp"].as_i64().unwrap() > 0);
                assert_eq!(rm["dataChange"], true);
                assert_eq!(rm["extendedFileMetadata"], true);
                assert_eq!(rm["partitionValues"], json!({}));
                assert_eq!(rm["size"].as_u64(), sizes.get(path).copied(), "remove.size of {path}");
            }
        }
    }

    // Version 0: protocol and metaData.
    let v0 = t.commit(0);
    assert_eq!(v0[0]["commitInfo"]["operation"], "CREATE TABLE");
    let protocol = v0
        .iter()
        .find_map(|a| a.get("protocol"))
        .expect("protocol in version 0");
    assert_eq!(
        protocol,
        &json!({"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["tinydeltaJsonlData"]})
    );
    let md = v0
        .iter()
        .find_map(|a| a.get("metaData"))
        .expect("metaData in version 0");
    let id = md["id"].as_str().expect("metaData.id");
    assert_eq!(id.len(), 36, "uuid {id}");
    assert_eq!(id.matches('-').count(), 4, "uuid {id}");
    assert_eq!(md["format"], json!({"provider": "json", "options": {}}));
    assert_eq!(md["partitionColumns"], json!([]));
    assert_eq!(md["configuration"], json!({}));
    assert!(md["createdTime"].as_i64().unwrap() > 0);
    let schema: Value = serde_json::from_str(md["schemaString"].as_str().unwrap()).unwrap();
    assert_eq!(schema["type"], "struct");
    let fields = schema["fields"].as_array().unwrap();
    assert_eq!(fields.len(), FLIGHTS.len());
    for (f, spec) in fields.iter().zip(FLIGHTS) {
        let (name, ty) = spec.split_once(':').unwrap();
        let delta = match ty.trim_end_matches('!') {
            "int" => "long",
            "str" => "string",
            "timestamp" => "timestamp",
            other => panic!("unexpected {other}"),
        };
        assert_eq!(f["name"], name);
        assert_eq!(f["type"], delta);
        assert_eq!(f["nullable"], !ty.ends_with('!'));
        assert_eq!(f["metadata"], json!({}));
    }

    // Operations and metrics.
    let ci = |v: u64| t.commit(v)[0]["commitInfo"].clone();
    assert_eq!(ci(1)["operation"], "WRITE");
    assert_eq!(ci(1)["operationParameters"]["mode"], "Append");
    assert_eq!(ci(1)["isBlindAppend"], true);
    assert_eq!(ci(1)["operationMetrics"]["numFiles"], "1");
    assert_eq!(
        ci(1)["operationMetrics"]["numOutputRows"],
        lines(&data_bytes("flights-a.jsonl")).len().to_string()
    );
    assert_eq!(ci(3)["operationParameters"]["mode"], "Overwrite");
    assert_eq!(ci(3)["isBlindAppend"], false);
    assert_eq!(ci(4)["operation"], "RESTORE");
    assert_eq!(ci(4)["operationParameters"]["version"], "2");
}

#[test]
fn unknown_actions_and_fields_are_ignored_on_read() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 2));
    let mut actions = t.commit(1);
    actions[0]["commitInfo"]["someFutureField"] = json!({"x": 1});
    actions[1]["add"]["tags"] = json!({"k": "v"});
    actions[1]["add"]["deletionVector"] = Value::Null;
    actions.push(json!({"txn": {"appId": "x", "version": 3}}));
    actions.push(json!({"domainMetadata": {"domain": "d", "configuration": "{}", "removed": false}}));
    let expected = t.read();
    t.write_commit(1, &actions);
    assert_eq!(t.read(), expected);
    assert_eq!(t.describe()["numRecords"], 2);
    assert_eq!(t.append(&small_rows(2, 1)), 2);
}

// ---------------------------------------------------------------------------------------------
// restore

#[test]
fn restore_is_byte_identical_and_keeps_history() {
    let t = TempTable::new(FLIGHTS);
    t.append_file("flights-a.jsonl"); // 1
    t.append_file("flights-b.jsonl"); // 2
    t.overwrite(&data_bytes("flights-c.jsonl")); // 3
    t.append_file("flights-a.jsonl"); // 4
    let before = t.all_reads();

    let out = t.td("restore", &["--version", "2"]).ok();
    assert_eq!(version_in(&out.text()), 5);
    assert_eq!(t.read(), before[2], "restore of version 2 is byte-identical");
    assert_eq!(t.all_reads()[..5], before[..], "restore changed an older version");
    let d2 = t.td("describe", &["--json", "--version", "2"]).ok().json();
    let d5 = t.describe();
    for k in ["numFiles", "numRecords", "sizeBytes", "schema", "schemaString"] {
        assert_eq!(d2[k], d5[k], "{k}");
    }
    let paths = |d: &Value| -> Vec<String> {
        d["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        paths(&d2),
        paths(&d5),
        "restore must bring back the same files in the same order"
    );

    // Restore to a version that shares a prefix with the current one, to 0 and to the latest.
    assert_eq!(version_in(&t.td("restore", &["--version", "1"]).ok().text()), 6);
    assert_eq!(t.read(), before[1]);
    assert_eq!(version_in(&t.td("restore", &["--version", "4"]).ok().text()), 7);
    assert_eq!(t.read(), before[4]);
    assert_eq!(version_in(&t.td("restore", &["--version", "0"]).ok().text()), 8);
    assert_eq!(t.read(), b"");
    assert_eq!(t.describe()["numFiles"], 0);
    assert_eq!(version_in(&t.td("restore", &["--version", "8"]).ok().text()), 9);
    assert_eq!(t.read(), b"");
    assert_eq!(version_in(&t.td("restore", &["--version", "5"]).ok().text()), 10);
    assert_eq!(t.read(), before[2]);
    assert_eq!(t.all_reads()[..5], before[..]);
    t.td("restore", &["--version", "11"]).code(4);
    assert_eq!(t.latest(), 10);
    t.td("restore", &[]).code(2);
}

// ---------------------------------------------------------------------------------------------
// idempotent appends (txn)

#[test]
fn append_with_a_txn_commits_once_and_restore_keeps_the_txn() {
    let t = TempTable::new(SMALL);
    let out = t.td_in("append", &["--txn", "etl:5"], &small_rows(0, 2)).ok().text();
    assert!(out.contains("as version 1 (txn etl:5)"), "{out}");
    let parts = t.part_files();
    // A retry after a crash: exit 0, nothing committed, no file left.
    let out = t.td_in("append", &["--txn", "etl:5"], &small_rows(0, 2)).ok().text();
    assert!(
        out.contains("already applied") && out.contains("records version 5"),
        "{out}"
    );
    t.td_in("append", &["--txn", "etl:3"], &small_rows(0, 2)).ok();
    assert_eq!(t.latest(), 1);
    assert_eq!(t.part_files(), parts, "a skipped append left a data file");
    assert_eq!(ids(&t.read()), vec![0, 1]);
    let txn = &t.commit(1)[1]["txn"];
    assert_eq!(txn["appId"], "etl");
    assert_eq!(txn["version"], 5);
    assert!(txn["lastUpdated"].is_i64());
    // Zero rows still commit the txn; another app id is independent.
    let out = t.td_in("append", &["--txn", "etl:6"], b"").ok().text();
    assert!(out.contains("as version 2"), "{out}");
    assert_eq!(t.commit(2).len(), 2, "commitInfo and txn only");
    t.td_in("append", &["--txn", "other:1"], &small_rows(5, 1)).ok(); // 3
    assert_eq!(t.describe()["txns"], json!({"etl": 6, "other": 1}));
    // Restore does not roll the txn back (as Delta).
    t.td("restore", &["--version", "0"]).ok(); // 4
    assert_eq!(t.describe()["txns"], json!({"etl": 6, "other": 1}));
    assert!(
        t.td_in("append", &["--txn", "etl:6"], &small_rows(9, 1))
            .ok()
            .text()
            .contains("already applied")
    );
    assert_eq!(t.latest(), 4);
    // Older versions show the txns as they were.
    let d1 = t.td("describe", &["--version", "1", "--json"]).ok().json();
    assert_eq!(d1["txns"], json!({"etl": 5}));
    for bad in ["etl", ":5", "etl:x", "etl:-1"] {
        t.td_in("append", &["--txn", bad], &small_rows(0, 1))
            .code(2)
            .stderr_has(&["APP_ID:VERSION"]);
    }
    assert_eq!(t.latest(), 4);
    t.td("check", &[]).ok();
}

// ---------------------------------------------------------------------------------------------
// schema evolution (alter add-column)

#[test]
fn alter_adds_a_nullable_column_old_rows_keep_their_bytes_and_restore_brings_back_the_schema() {
    let t = TempTable::new(&["id:int!", "s:str"]);
    t.append(b"{\"id\":1,\"s\":\"a\"}\n"); // 1
    let v1 = t.read();
    let out = t.td("alter", &["add-column", "note:str"]).ok().text();
    assert!(
        out.contains("as version 2") && out.contains("id:int! s:str note:str"),
        "{out}"
    );
    let c = t.commit(2);
    assert_eq!(c[0]["commitInfo"]["operation"], "ADD COLUMNS");
    let md = &c[1]["metaData"];
    assert!(
        md["schemaString"]
            .as_str()
            .unwrap()
            .contains("\"name\":\"note\",\"type\":\"string\",\"nullable\":true")
    );
    assert_eq!(md["id"], t.commit(0)[2]["metaData"]["id"], "same table id");
    // Old rows keep their bytes; new rows carry the new column.
    assert_eq!(t.read(), v1);
    t.td_in("append", &[], b"{\"id\":2,\"note\":\"hi\"}\n").ok(); // 3
    assert_eq!(
        String::from_utf8(t.read()).unwrap(),
        "{\"id\":1,\"s\":\"a\"}\n{\"id\":2,\"s\":null,\"note\":\"hi\"}\n"
    );
    assert_eq!(t.read_v(1), v1);
    // Refused: NOT NULL, an existing name regardless of case, a type change, reserved names,
    // drops. Nothing committed.
    t.td("alter", &["add-column", "x:int!"])
        .code(2)
        .stderr_has(&["nullable"]);
    t.td("alter", &["add-column", "NOTE:str"])
        .code(2)
        .stderr_has(&["already exists"]);
    t.td("alter", &["add-column", "note:int"]).code(2).stderr_has(&["type"]);
    for r in ["_change_type", "_Commit_Version", "_commit_timestamp"] {
        t.td("alter", &["add-column", &format!("{r}:str")])
            .code(2)
            .stderr_has(&["reserved"]);
        td(&[
            "create",
            &t.path.with_extension("r").display().to_string(),
            &format!("{r}:int"),
        ])
        .code(2)
        .stderr_has(&["reserved"]);
    }
    t.td("alter", &["drop-column", "s"])
        .code(2)
        .stderr_has(&["cannot drop"]);
    assert_eq!(t.latest(), 3);
    // Restore to before the change restores that version's metaData.
    t.td("restore", &["--version", "1"]).ok(); // 4
    assert!(t.commit(4).iter().any(|a| a.get("metaData").is_some()));
    let d = t.describe();
    assert_eq!(d["schema"].as_array().unwrap().len(), 2);
    assert_eq!(t.read(), v1);
    t.td_in("append", &[], b"{\"id\":3,\"note\":\"x\"}\n").code(5);
    t.td("check", &["--deep"]).ok();
}

// ---------------------------------------------------------------------------------------------
// optimize

#[test]
fn optimize_compacts_in_order_with_data_change_false_and_every_version_reads_as_before() {
    let t = TempTable::new(SMALL);
    for i in 0..6 {
        t.append(&small_rows(i * 10, 3)); // 1..=6
    }
    let before = t.all_reads();
    let live: BTreeSet<String> = t.referenced();
    // 200-byte bins: several new files, each under the target unless one row is larger.
    let out = t.td("optimize", &["--target-size", "1MiB"]).ok().text();
    assert!(out.contains("6 files") && out.contains("into 1 as version 7"), "{out}");
    assert_eq!(t.read(), before[6], "read after optimize differs");
    assert_eq!(t.all_reads()[..7], before[..], "an older version changed");
    assert_eq!(t.describe()["numFiles"], 1);
    let c = t.commit(7);
    let ci = &c[0]["commitInfo"];
    assert_eq!(ci["operation"], "OPTIMIZE");
    assert_eq!(ci["isolationLevel"], "WriteSerializable");
    assert_eq!(ci["operationMetrics"]["numRemovedFiles"], "6");
    assert_eq!(ci["operationMetrics"]["numAddedFiles"], "1");
    let mut added = BTreeSet::new();
    let mut removed = BTreeSet::new();
    for a in &c[1..] {
        if let Some(r) = a.get("remove") {
            assert_eq!(r["dataChange"], false, "{a}");
            removed.insert(r["path"].as_str().unwrap().to_string());
        } else {
            let add = &a["add"];
            assert_eq!(add["dataChange"], false, "{a}");
            let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
            assert_eq!(stats["numRecords"], 18);
            assert_eq!(stats["minValues"]["id"], 0);
            assert_eq!(stats["maxValues"]["id"], 52);
            added.insert(add["path"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(removed, live);
    assert!(added.is_disjoint(&removed), "one path in both add and remove");
    let h = t.td("history", &[]).ok().text();
    assert!(h.lines().last().unwrap().contains("OPTIMIZE"), "{h}");
    // Nothing left to do: nothing committed.
    let out = t.td("optimize", &[]).ok().text();
    assert!(out.contains("nothing to optimize"), "{out}");
    assert_eq!(t.latest(), 7);
    t.td("check", &["--deep"]).ok();
    t.td("optimize", &["--target-size", "huge"])
        .code(2)
        .stderr_has(&["huge"]);
    t.td("optimize", &["--expect-version", "3"]).code(3);

    // A small target: bins in order, large files re-added in place (never removed).
    for i in 0..4 {
        t.append(&small_rows(100 + i * 10, 2)); // 8..=11
    }
    let want = t.read();
    let size = |p: &str| fs::metadata(t.path.join(p)).unwrap().len();
    let small: u64 = t.commit(8)[1]["add"]["size"].as_u64().unwrap();
    assert!(size(added.iter().next().unwrap()) > 2 * small + 1);
    t.td("optimize", &["--target-size", &(2 * small + 1).to_string()]).ok();
    assert_eq!(t.read(), want, "order changed");
    let c = t.commit(12);
    let removes = c.iter().filter(|a| a.get("remove").is_some()).count();
    let adds: Vec<&Value> = c.iter().filter_map(|a| a.get("add")).collect();
    assert_eq!(removes, 4);
    assert_eq!(adds.len(), 2, "{c:?}");
    assert_eq!(t.describe()["numFiles"], 3);
}

#[test]
fn optimize_of_a_vacuumed_file_fails_and_restore_to_before_optimize_reads_the_same() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 2)); // 1
    t.append(&small_rows(10, 2)); // 2
    let v2 = t.read();
    t.td("optimize", &[]).ok(); // 3
    t.td("restore", &["--version", "2"]).ok(); // 4
    assert_eq!(t.read(), v2);
    // Vacuum the optimized file (removed by the restore): versions 3 is gone, the rest reads.
    t.td("vacuum", &["--retain", "0s", "--force"]).ok(); // 5, 6
    t.td("read", &["--version", "3"]).code(4);
    assert_eq!(t.read_v(2), v2);
    assert_eq!(t.read(), v2);
}

// ---------------------------------------------------------------------------------------------
// vacuum

#[test]
fn retention_vacuum_deletes_removed_files_records_the_run_and_old_versions_fail_clearly() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 3)); // 1
    t.append(&small_rows(3, 3)); // 2
    t.overwrite(&small_rows(100, 2)); // 3: a mistake
    assert_eq!(version_in(&t.td("restore", &["--version", "2"]).ok().text()), 4);
    let reads = t.all_reads();
    let mistake: Vec<String> = t
        .commit(3)
        .iter()
        .filter_map(|a| a["add"]["path"].as_str().map(str::to_string))
        .collect();
    assert_eq!(mistake.len(), 1);
    let mistake_file = t.path.join(&mistake[0]);
    let size = fs::metadata(&mistake_file).unwrap().len();

    // The default retention (7 days) keeps everything; below it needs --force.
    let out = t.td("vacuum", &[]).ok();
    assert!(out.text().contains("deleted 0 files"), "{}", out.text());
    t.td("vacuum", &["--retain", "0s"]).code(2).stderr_has(&[
        "--force",
        "7 days",
        "delta.deletedFileRetentionDuration",
    ]);
    t.td("vacuum", &["--retain", "soon", "--force"])
        .code(2)
        .stderr_has(&["soon"]);
    assert_eq!(t.latest(), 4, "a refused vacuum committed");

    // Dry run: the one file no longer live, with its bytes; nothing deleted, nothing committed.
    let out = t.td("vacuum", &["--retain", "0s", "--force", "--dry-run"]).ok().text();
    assert!(
        out.contains(&format!("would delete {} ({size} bytes)", mistake_file.display())),
        "{out}"
    );
    assert!(out.contains(&format!("would delete 1 file ({size} bytes)")), "{out}");
    assert!(mistake_file.exists());
    assert_eq!(t.latest(), 4);

    let out = t.td("vacuum", &["--retain", "0s", "--force"]).ok().text();
    assert!(
        out.contains("deleted 1 file (") && out.contains("VACUUM START version 5"),
        "{out}"
    );
    assert!(!mistake_file.exists());
    assert_eq!(t.latest(), 6);
    for (v, op, params, metrics) in [
        (
            5,
            "VACUUM START",
            json!({"retentionCheckEnabled": "true", "specifiedRetentionMillis": "0", "defaultRetentionMillis": "604800000"}),
            json!({"numFilesToDelete": "1", "sizeOfDataToDelete": size.to_string()}),
        ),
        (
            6,
            "VACUUM END",
            json!({"status": "COMPLETED"}),
            json!({"numDeletedFiles": "1", "numVacuumedDirectories": "1"}),
        ),
    ] {
        let c = t.commit(v);
        assert_eq!(c.len(), 1, "version {v} holds only commitInfo: {c:?}");
        let ci = &c[0]["commitInfo"];
        assert_eq!(ci["operation"], op);
        assert_eq!(ci["operationParameters"], params, "version {v}");
        assert_eq!(ci["operationMetrics"], metrics, "version {v}");
    }

    // Every version but 3 reads as before; 3 fails naming the vacuum, exit 4.
    for v in [0u64, 1, 2, 4, 5, 6] {
        let want = &reads[v.min(4) as usize];
        assert_eq!(&t.read_v(v), want, "version {v}");
    }
    t.td("read", &["--version", "3"]).code(4).stderr_has(&[
        "version 3's data was removed by the vacuum of",
        "(version 5)",
        &mistake[0],
    ]);
    t.td("restore", &["--version", "3"])
        .code(4)
        .stderr_has(&["version 3's data was removed by the vacuum of"]);
    assert_eq!(t.latest(), 6, "a refused restore committed");
    // describe lists the readable versions (not a suffix); history shows the run.
    let d = t.describe();
    assert_eq!(d["readableVersions"], json!([[0, 2], [4, 6]]));
    let text = t.td("describe", &[]).ok().text();
    assert!(text.contains("readable versions: 0-2, 4-6"), "{text}");
    let h = t.td("history", &["--json"]).ok().json();
    assert_eq!(h[5]["operation"], "VACUUM START");
    assert_eq!(h[6]["operation"], "VACUUM END");
    // check: a file a retention vacuum deleted on purpose is one note (no warning, ever), the
    // table is whole.
    let out = t.td("check", &[]).ok().text();
    assert!(
        out.contains("note: 1 data file named by versions up to 3 was deleted on purpose by a retention vacuum")
            && out.contains("(the newest: ")
            && out.contains("version 5)")
            && out.contains("readable versions: 0-2, 4-6")
            && out.contains("whole"),
        "{out}"
    );
    assert!(!out.contains("warning"), "{out}");
    let j = t.td("check", &["--json"]).ok().json();
    assert_eq!(j["problems"], json!([]));
    assert_eq!(j["notes"].as_array().map(Vec::len), Some(1));
    // changes: without --from-version, from the first version whose changes can be read
    // (version 3 added the deleted file, version 4 removed it), saying so on stderr; exit 0.
    let all = t
        .td("changes", &[])
        .ok()
        .stderr_has(&["the changes of versions before 5 are not printed", "(version 5)"]);
    assert_eq!(all.stdout, t.td("changes", &["--from-version", "5"]).ok().stdout);
    t.td("changes", &["--from-version", "3"])
        .code(4)
        .stderr_has(&["--from-version 5"]);
    // export --all-versions into a new DEST: from version 4 (versions 4-6 are readable), with
    // a checkpoint there; DEST reads as the source at each of them.
    let dest = t.path.with_extension("dest");
    let out = td(&["export", &t.p(), dest.to_str().unwrap(), "--all-versions"])
        .ok()
        .stderr_has(&["versions before 4 are not exported", "starts at version 4"]);
    assert!(out.text().contains("as versions 4-6"), "{}", out.text());
    assert!(dest.join("_delta_log/00000000000000000004.checkpoint.parquet").exists());
    assert!(!dest.join("_delta_log/00000000000000000000.json").exists());
    // (The same rows; read from the checkpoint, the files come in path order.)
    let sorted = |b: &[u8]| {
        let mut v = ids(b);
        v.sort_unstable();
        v
    };
    for v in 4..=6u64 {
        let back = td(&["read", dest.to_str().unwrap(), "--version", &v.to_string()]).ok();
        assert_eq!(sorted(&back.stdout), sorted(&t.read_v(v)), "DEST version {v}");
    }
    // Vacuum again: nothing left to delete, no new commits.
    let out = t.td("vacuum", &["--retain", "0s", "--force"]).ok().text();
    assert!(out.contains("deleted 0 files"), "{out}");
    assert_eq!(t.latest(), 6);
    // Appends and restores of readable versions go on, and the export continues.
    t.append(&small_rows(50, 1));
    t.td("restore", &["--version", "1"]).ok();
    assert_eq!(t.read(), reads[1]);
    let out = td(&["export", &t.p(), dest.to_str().unwrap(), "--all-versions"]).ok();
    assert!(out.text().contains("as versions 7-8"), "{}", out.text());
    let back = td(&["read", dest.to_str().unwrap()]).ok();
    assert_eq!(sorted(&back.stdout), sorted(&reads[1]));
    let _ = fs::remove_dir_all(&dest);
}

#[test]
fn a_missing_file_no_vacuum_deleted_is_damage() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 2)); // 1
    t.overwrite(&small_rows(10, 2)); // 2
    let gone = t.commit(1)[1]["add"]["path"].as_str().unwrap().to_string();
    fs::remove_file(t.path.join(&gone)).unwrap();
    let out = t.td("check", &[]).code(1);
    assert!(out.text().contains("no vacuum deleted it"), "{}", out.text());
    t.td("read", &["--version", "1"])
        .code(1)
        .stderr_has(&["missing", &gone]);
}

#[test]
fn vacuum_deletes_only_unreferenced_files_older_than_the_retention() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 3)); // 1
    t.append(&small_rows(3, 3)); // 2
    t.overwrite(&small_rows(100, 2)); // 3: files of 1 and 2 are removed but still named
    let referenced = t.part_files();
    assert_eq!(referenced.len(), 3);
    let reads = t.all_reads();

    // Leftovers: an orphan data file, a stale commit temporary, a staging temporary.
    let orphan = t.path.join("part-00000000-0000-0000-0000-000000000000.jsonl");
    fs::write(&orphan, small_rows(999, 1)).unwrap();
    let tmp = t
        .log_dir()
        .join(format!(".{:020}.{}.tmp", 4, "0123456789abcdef0123456789abcdef"));
    fs::write(&tmp, b"{\"commitInfo\":{").unwrap();
    let staging = t.path.join("_staging");
    fs::create_dir_all(&staging).unwrap();
    fs::write(staging.join("interrupted.tmp"), b"x").unwrap();
    // A staged file of a mount that died before naming it in a `.name` file (its name is in
    // the data file's attribute): the next mount brings it back, so it is never a leftover.
    let pending = {
        let s = tinydelta::table::staging::Staging::open(&t.path).unwrap();
        let (id, mut f) = s.create("pending.jsonl").unwrap();
        f.write_all(&small_rows(7, 1)).unwrap();
        staging.join(format!("{id}.data"))
    };
    // Not ours: never touched.
    let other = t.path.join("notes.txt");
    fs::write(&other, b"keep").unwrap();

    // Default retention (1 hour): everything is fresh, nothing goes.
    let out = t.td("vacuum", &[]).ok();
    assert!(out.text().contains("deleted 0 files"), "{}", out.text());
    assert!(orphan.exists() && tmp.exists() && staging.join("interrupted.tmp").exists());

    // Dry run lists exactly the leftovers and deletes nothing.
    let out = t.td("vacuum", &["--older-than", "0s", "--dry-run"]).ok();
    let text = out.text();
    assert!(text.contains("would delete 3 files"), "{text}");
    for p in [&orphan, &tmp, &staging.join("interrupted.tmp")] {
        assert!(text.contains(p.file_name().unwrap().to_str().unwrap()), "{text}");
        assert!(p.exists(), "dry run deleted {}", p.display());
    }
    for r in &referenced {
        assert!(
            !text.contains(r.as_str()),
            "dry run would delete referenced {r}: {text}"
        );
    }

    // An old mtime lets a 1-hour retention delete the orphan only.
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    fs::File::options()
        .write(true)
        .open(&orphan)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    // ...and an old referenced file must still survive.
    for r in &referenced {
        fs::File::options()
            .write(true)
            .open(t.path.join(r))
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap();
    }
    let out = t.td("vacuum", &["--older-than", "1h"]).ok();
    assert!(out.text().contains("deleted 1 file ("), "{}", out.text());
    assert!(!orphan.exists());
    assert!(tmp.exists());

    let out = t.td("vacuum", &["--older-than", "0s"]).ok();
    assert!(out.text().contains("deleted 2 files"), "{}", out.text());
    assert!(!tmp.exists() && !staging.join("interrupted.tmp").exists());
    assert!(pending.exists(), "vacuum deleted a staged file named by its attribute");
    assert_eq!(t.part_files(), referenced, "vacuum touched a referenced file");
    assert!(other.exists());
    assert_eq!(t.all_reads(), reads, "a version changed after vacuum");
    assert!(t.tmp_files().is_empty());

    // Idempotent, and bad durations are usage errors.
    assert!(
        t.td("vacuum", &["--older-than", "0s"])
            .ok()
            .text()
            .contains("deleted 0 files")
    );
    t.td("vacuum", &["--older-than", "soon"]).code(2).stderr_has(&["soon"]);
    assert_eq!(t.all_reads(), reads);
}

// ---------------------------------------------------------------------------------------------
// --expect-version and exit codes

#[test]
fn expect_version_turns_a_write_into_compare_and_swap() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 1)); // 1
    t.append(&small_rows(1, 1)); // 2
    let parts = t.part_files();
    for (cmd, extra) in [
        ("append", vec![]),
        ("overwrite", vec![]),
        ("restore", vec!["--version", "1"]),
    ] {
        let mut args = extra.clone();
        args.extend(["--expect-version", "1"]);
        let out = t.td_in(cmd, &args, &small_rows(50, 2)).code(3);
        assert!(
            out.stderr.contains("version 2") && out.stderr.contains("concurrent write"),
            "{cmd}: {}",
            out.stderr
        );
        assert!(out.stderr.contains("nothing was committed"), "{}", out.stderr);
        assert_eq!(t.log_versions(), vec![0, 1, 2], "{cmd} committed");
        assert_eq!(t.part_files(), parts, "{cmd} left a data file");
    }
    // Expecting a version that does not exist yet is a conflict too.
    t.td_in("append", &["--expect-version", "5"], &small_rows(50, 1))
        .code(3);
    assert_eq!(t.part_files(), parts);
    // The right expectation commits.
    let out = t.td_in("append", &["--expect-version", "2"], &small_rows(2, 1)).ok();
    assert_eq!(version_in(&out.text()), 3);
    let out = t.td_in("overwrite", &["--expect-version", "3"], &small_rows(7, 1)).ok();
    assert_eq!(version_in(&out.text()), 4);
    let out = t.td("restore", &["--version", "3", "--expect-version", "4"]).ok();
    assert_eq!(version_in(&out.text()), 5);
    assert_eq!(ids(&t.read()), vec![0, 1, 2]);
}

#[test]
fn missing_tables_exit_4() {
    let t = TempTable::uncreated();
    for (cmd, rest) in [
        ("read", vec![]),
        ("describe", vec![]),
        ("history", vec![]),
        ("append", vec![]),
        ("overwrite", vec![]),
        ("restore", vec!["--version", "0"]),
        ("vacuum", vec![]),
    ] {
        t.td_in(cmd, &rest, &small_rows(0, 1))
            .code(4)
            .stderr_has(&["table not found", &t.p()]);
        assert!(!t.path.exists(), "{cmd} created the table folder");
    }
    // A folder that is not a table (no version 0) is not found either.
    fs::create_dir_all(t.log_dir()).unwrap();
    t.td("read", &[]).code(4);
    fs::write(t.path.join("part-x.jsonl"), b"{}\n").unwrap();
    t.td("describe", &[]).code(4);
}

#[test]
fn exit_codes() {
    let t = TempTable::new(SMALL);
    // 0
    t.td_in("append", &[], &small_rows(0, 1)).code(0);
    // 1: an error (create over a table; a corrupt log)
    td(&["create", &t.p(), "a:int"]).code(1);
    // 2: usage
    td(&["frobnicate"]).code(2);
    td::<&str>(&[]).code(2);
    t.td("read", &["--bogus"]).code(2);
    t.td("append", &["--file", "/nonexistent/input.jsonl"])
        .code(2)
        .stderr_has(&["/nonexistent/input.jsonl"]);
    // 3: conflict
    t.td_in("append", &["--expect-version", "0"], &small_rows(1, 1)).code(3);
    // 4: not found
    t.td("read", &["--version", "9"]).code(4);
    // 5: bad input
    t.td_in("append", &[], b"{\"id\":\"one\"}\n").code(5);
    assert_eq!(t.log_versions(), vec![0, 1]);
    // 1 again: corrupt log (a commit that is not JSON)
    fs::write(t.log_dir().join(format!("{:020}.json", 2)), b"not json\n").unwrap();
    t.td("read", &[])
        .code(1)
        .stderr_has(&["corrupt", &format!("{:020}.json", 2)]);
    // The error goes to stderr, one line, and stdout stays clean.
    let out = t.td("describe", &[]).code(1);
    assert!(out.stdout.is_empty());
    assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
}

// ---------------------------------------------------------------------------------------------
// canonical rows: accepted and normalised

fn accepted(input: &[u8]) -> Vec<u8> {
    let t = TempTable::new(SMALL);
    let v = t.append(input);
    assert_eq!(v, 1);
    let out = t.read();
    // Canonical output: valid UTF-8, no BOM, no CR, every line ends in \n.
    assert!(out.is_empty() || out.ends_with(b"\n"));
    assert!(!out.contains(&b'\r'));
    assert!(!out.starts_with(b"\xEF\xBB\xBF"));
    assert_eq!(
        t.describe()["numRecords"].as_u64(),
        Some(out.iter().filter(|b| **b == b'\n').count() as u64),
        "wc -l must equal the row count"
    );
    out
}

const ROW1: &str = r#"{"id":1,"x":1.5,"s":"a","b":true,"d":"2024-02-29","t":"2024-01-01T00:00:00Z"}"#;
const ROW2: &str = r#"{"id":2,"x":null,"s":"b","b":false,"d":null,"t":"2024-01-01T01:00:00+02:00"}"#;

fn canon() -> Vec<u8> {
    format!("{ROW1}\n{ROW2}\n").into_bytes()
}

#[test]
fn accepts_canonical_input_unchanged() {
    assert_eq!(accepted(&canon()), canon());
}

#[test]
fn accepts_crlf_line_ends() {
    assert_eq!(accepted(format!("{ROW1}\r\n{ROW2}\r\n").as_bytes()), canon());
}

#[test]
fn accepts_a_missing_final_newline() {
    assert_eq!(accepted(format!("{ROW1}\n{ROW2}").as_bytes()), canon());
    assert_eq!(accepted(format!("{ROW1}\r\n{ROW2}").as_bytes()), canon());
}

#[test]
fn skips_blank_lines() {
    assert_eq!(
        accepted(format!("\n\n{ROW1}\n \t\n\r\n{ROW2}\n\n  \n").as_bytes()),
        canon()
    );
}

#[test]
fn strips_a_utf8_bom() {
    assert_eq!(accepted(format!("\u{feff}{ROW1}\n{ROW2}\n").as_bytes()), canon());
}

#[test]
fn normalises_key_order_and_whitespace() {
    let input = concat!(
        "  { \"t\" : \"2024-01-01T00:00:00Z\" ,\t\"d\":\"2024-02-29\", \"b\": true, \"s\" :\"a\",\"x\": 1.5, \"id\" : 1 }  \n",
        "{\"s\":\"b\",\"b\":false,\"id\":2,\"t\":\"2024-01-01T01:00:00+02:00\",\"x\":null,\"d\":null}\n",
    );
    assert_eq!(accepted(input.as_bytes()), canon());
}

#[test]
fn writes_an_int_in_a_float_column_as_a_float() {
    let out = accepted(b"{\"id\":1,\"x\":18}\n{\"id\":2,\"x\":-3}\n{\"id\":3,\"x\":0}\n{\"id\":4,\"x\":2.50}\n");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        concat!(
            "{\"id\":1,\"x\":18.0,\"s\":null,\"b\":null,\"d\":null,\"t\":null}\n",
            "{\"id\":2,\"x\":-3.0,\"s\":null,\"b\":null,\"d\":null,\"t\":null}\n",
            "{\"id\":3,\"x\":0.0,\"s\":null,\"b\":null,\"d\":null,\"t\":null}\n",
            "{\"id\":4,\"x\":2.5,\"s\":null,\"b\":null,\"d\":null,\"t\":null}\n",
        )
    );
}

#[test]
fn spells_out_omitted_nullable_keys_as_null() {
    let out = accepted(b"{\"id\":7}\n{\"s\":\"only s\",\"id\":8}\n");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        concat!(
            "{\"id\":7,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null}\n",
            "{\"id\":8,\"x\":null,\"s\":\"only s\",\"b\":null,\"d\":null,\"t\":null}\n",
        )
    );
}

#[test]
fn keeps_strings_dates_and_timestamps_as_written() {
    let input = concat!(
        "{\"id\":-9223372036854775808,\"s\":\"caf\u{e9} \\\"q\\\" \u{1F600}\",\"t\":\"2024-01-01T00:00:00.123456789-05:30\"}\n",
        "{\"id\":9223372036854775807,\"d\":\"0001-01-01\",\"t\":\"2024-12-31T23:59:59z\"}\n"
    );
    let out = String::from_utf8(accepted(input.as_bytes())).unwrap();
    let rows = lines(out.as_bytes());
    let r0: Value = serde_json::from_str(&rows[0]).unwrap();
    assert_eq!(r0["id"], i64::MIN);
    assert_eq!(r0["s"], "caf\u{e9} \"q\" \u{1F600}");
    assert_eq!(r0["t"], "2024-01-01T00:00:00.123456789-05:30");
    let r1: Value = serde_json::from_str(&rows[1]).unwrap();
    assert_eq!(r1["id"], i64::MAX);
    assert_eq!(r1["d"], "0001-01-01");
}

#[test]
fn real_data_cars_and_penguins() {
    let t = TempTable::new(CARS);
    let raw = data_bytes("cars.jsonl");
    t.append(&raw);
    let out = t.read();
    let rows = lines(&out);
    assert_eq!(rows.len(), 406);
    assert_eq!(
        rows[0],
        r#"{"Name":"chevrolet chevelle malibu","Miles_per_Gallon":18.0,"Cylinders":8,"Displacement":307.0,"Horsepower":130,"Weight_in_lbs":3504,"Acceleration":12.0,"Year":"1970-01-01","Origin":"USA"}"#
    );
    // Values survive: compare each row with its input, as numbers.
    for (inp, got) in lines(&raw).iter().zip(&rows) {
        let a: Value = serde_json::from_str(inp).unwrap();
        let b: Value = serde_json::from_str(got).unwrap();
        for (k, v) in a.as_object().unwrap() {
            match (v, &b[k]) {
                (Value::Number(x), Value::Number(y)) => assert_eq!(x.as_f64(), y.as_f64(), "{k}"),
                (x, y) => assert_eq!(x, y, "{k}"),
            }
        }
    }
    assert_eq!(t.describe()["numRecords"], 406);
    let stats: Value = serde_json::from_str(t.commit(1)[1]["add"]["stats"].as_str().unwrap()).unwrap();
    let null_mpg = lines(&raw)
        .iter()
        .filter(|l| l.contains("\"Miles_per_Gallon\": null"))
        .count();
    assert_eq!(stats["nullCount"]["Miles_per_Gallon"].as_u64(), Some(null_mpg as u64));
    assert!(stats["minValues"]["Year"].is_string());

    let p = TempTable::new(PENGUINS);
    let raw = data_bytes("penguins.jsonl");
    p.append(&raw);
    let rows = lines(&p.read());
    assert_eq!(rows.len(), 344);
    assert!(rows.iter().all(|r| r.matches(':').count() == PENGUINS.len()));
    assert!(rows.iter().any(|r| r.contains("\"sex\":null")));
}

// ---------------------------------------------------------------------------------------------
// canonical rows: every rejected case

/// Append `bad` as line 3 (after two good lines) through stdin, through `--file`, and through
/// overwrite; each must exit 5 naming line 3 and `column`, with nothing committed and no data
/// file left behind.
fn rejected(bad: &[u8], column: &str, reason: &str) {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 2));
    let parts = t.part_files();
    let good = small_rows(10, 2);
    let input = [good.as_slice(), bad, b"\n", small_rows(20, 1).as_slice()].concat();
    let file = t.dir.path().join("input.jsonl");
    fs::write(&file, &input).unwrap();
    let f = file.to_str().unwrap();
    for (how, out) in [
        ("append stdin", t.td_in("append", &[], &input)),
        ("append --file", t.td("append", &["--file", f])),
        ("overwrite", t.td_in("overwrite", &[], &input)),
    ] {
        assert_eq!(out.code, 5, "{how}: {bad:?}: stderr {}", out.stderr);
        let msg = out.stderr.trim_end();
        assert!(msg.contains("line 3,"), "{how}: no line number: {msg}");
        assert!(names_column(msg, column), "{how}: no column {column}: {msg}");
        assert!(msg.contains(reason), "{how}: no reason {reason:?}: {msg}");
        if how == "append --file" {
            assert!(msg.contains(f), "{how}: file not named: {msg}");
        }
        // One bad line: one line, plus at most one hint (docs/CLI.md "Errors that teach").
        let hints = msg.lines().filter(|l| l.starts_with("tinydelta: hint: ")).count();
        assert_eq!(msg.lines().count() - hints, 1, "{msg}");
        assert!(hints <= 1, "{msg}");
        assert_eq!(t.log_versions(), vec![0, 1], "{how}: something was committed");
        assert_eq!(t.part_files(), parts, "{how}: a data file was left behind");
        assert!(t.tmp_files().is_empty());
        assert!(out.stdout.is_empty());
    }
    assert_eq!(ids(&t.read()), vec![0, 1]);
}

/// Whether `msg` names `column`: a schema column by name, or, for syntax errors (`column` is a
/// number), the 1-based character position where the parser stopped: within the offending token
/// (from one character before its start to four past it; serde_json reports where it stopped).
fn names_column(msg: &str, column: &str) -> bool {
    let Ok(want) = column.parse::<usize>() else {
        return msg.contains(&format!("column \"{column}\":"));
    };
    let Some((_, rest)) = msg.split_once(", column ") else {
        return false;
    };
    let got: usize = rest.split(':').next().unwrap_or("").parse().unwrap_or(0);
    got + 1 >= want && got <= want + 4
}

/// 1-based character position of `needle` in `line`.
fn pos(line: &str, needle: &str) -> String {
    (line[..line.find(needle).expect("needle")].chars().count() + 1).to_string()
}

#[test]
fn rejects_invalid_json() {
    rejected(b"{\"id\":1,}", "9", "invalid JSON");
    rejected(b"{\"id\":1", "8", "invalid JSON");
    rejected(b"{\"id\":1}}", "9", "invalid JSON");
    rejected(b"{id:1}", "2", "invalid JSON");
    rejected(b"{\"id\":1,\"s\":'x'}", "13", "invalid JSON");
}

#[test]
fn rejects_invalid_utf8() {
    rejected(b"{\"id\":1,\"s\":\"caf\xe9\"}", "17", "invalid UTF-8");
    rejected(b"\xff", "1", "invalid UTF-8");
}

#[test]
fn rejects_a_non_object_line() {
    rejected(b"[1,2]", "1", "not a JSON object");
    rejected(b"42", "1", "not a JSON object");
    rejected(b"\"row\"", "1", "not a JSON object");
    rejected(b"null", "1", "not a JSON object");
}

#[test]
fn rejects_an_unknown_column() {
    rejected(b"{\"id\":1,\"zz\":2}", "zz", "unknown column");
    rejected(b"{\"ID\":1}", "ID", "unknown column");
}

#[test]
fn rejects_a_duplicate_key() {
    rejected(b"{\"id\":1,\"s\":\"a\",\"s\":\"b\"}", "s", "duplicate key");
    rejected(b"{\"id\":1,\"id\":1}", "id", "duplicate key");
}

#[test]
fn rejects_a_type_mismatch() {
    rejected(b"{\"id\":\"1\"}", "id", "expected int, found string");
    rejected(b"{\"id\":1,\"x\":\"1.5\"}", "x", "expected float, found string");
    rejected(b"{\"id\":1,\"s\":5}", "s", "expected str, found number");
    rejected(b"{\"id\":1,\"b\":1}", "b", "expected bool, found number");
    rejected(b"{\"id\":1,\"b\":\"true\"}", "b", "expected bool, found string");
    rejected(b"{\"id\":1,\"d\":20240101}", "d", "expected date, found number");
    rejected(b"{\"id\":1,\"t\":[1]}", "t", "expected timestamp, found array");
    rejected(b"{\"id\":{}}", "id", "expected int, found object");
    rejected(b"{\"id\":true}", "id", "expected int, found boolean");
}

#[test]
fn rejects_a_fraction_or_exponent_for_an_int() {
    rejected(b"{\"id\":1.5}", "id", "fraction or exponent");
    rejected(b"{\"id\":1.0}", "id", "fraction or exponent");
    rejected(b"{\"id\":1e3}", "id", "fraction or exponent");
    rejected(b"{\"id\":2E0}", "id", "fraction or exponent");
}

#[test]
fn rejects_an_integer_outside_i64() {
    rejected(
        b"{\"id\":9223372036854775808}",
        "id",
        "outside the 64-bit integer range",
    );
    rejected(
        b"{\"id\":-9223372036854775809}",
        "id",
        "outside the 64-bit integer range",
    );
    rejected(
        b"{\"id\":123456789012345678901234567890}",
        "id",
        "outside the 64-bit integer range",
    );
}

#[test]
fn rejects_nan_and_infinity() {
    for lit in ["NaN", "Infinity", "-Infinity", "nan", "inf"] {
        let line = format!("{{\"id\":1,\"x\":{lit}}}");
        rejected(line.as_bytes(), &pos(&line, lit), "invalid JSON");
    }
    // A float literal too large for f64 is infinite, too.
    rejected(b"{\"id\":1,\"x\":1e999}", "x", "");
    rejected(b"{\"id\":1,\"x\":-1e400}", "x", "");
}

#[test]
fn rejects_null_or_missing_for_a_not_null_column() {
    rejected(b"{\"id\":null}", "id", "null value for a NOT NULL column");
    rejected(b"{\"s\":\"no id\"}", "id", "missing value for a NOT NULL column");
    rejected(b"{}", "id", "missing value for a NOT NULL column");
}

#[test]
fn rejects_a_malformed_date() {
    for d in [
        "2021-02-29",
        "2021-13-01",
        "2021-2-1",
        "20210201",
        "2021-02-01T00:00:00Z",
        "2021/02/01",
        "",
        " 2021-02-01",
    ] {
        let line = format!("{{\"id\":1,\"d\":\"{d}\"}}");
        rejected(line.as_bytes(), "d", "not a date");
    }
}

#[test]
fn rejects_a_malformed_timestamp() {
    for ts in [
        "yesterday",
        "2013-01-01T10:00:00",
        "2013-01-01",
        "2013-01-01T25:00:00Z",
        "2013-02-30T10:00:00Z",
        "1357034400",
        "",
    ] {
        let line = format!("{{\"id\":1,\"t\":\"{ts}\"}}");
        rejected(line.as_bytes(), "t", "not an RFC 3339 timestamp");
    }
}

#[test]
fn a_bad_line_at_20000_of_a_large_input() {
    let t = TempTable::new(FLIGHTS);
    t.append_file("flights-a.jsonl");
    let parts = t.part_files();
    let src: Vec<String> = ["flights-a.jsonl", "flights-b.jsonl", "flights-c.jsonl"]
        .iter()
        .flat_map(|f| lines(&data_bytes(f)))
        .collect();
    let mut input = String::new();
    let mut n = 0;
    while n < 27_000 {
        let mut line = src[n % src.len()].clone();
        n += 1;
        if n == 20_000 {
            let mut v: Value = serde_json::from_str(&line).unwrap();
            v["dep_delay"] = json!("late");
            line = v.to_string();
        }
        input.push_str(&line);
        input.push('\n');
    }
    let file = t.dir.path().join("2013-bad.jsonl");
    fs::write(&file, &input).unwrap();
    let out = t.td("append", &["--file", file.to_str().unwrap()]).code(5);
    out.stderr_has(&[
        "line 20000",
        "dep_delay",
        "2013-bad.jsonl",
        "expected int, found string",
    ]);
    assert_eq!(t.log_versions(), vec![0, 1]);
    assert_eq!(t.part_files(), parts);
    let out = t.td_in("append", &[], input.as_bytes()).code(5);
    out.stderr_has(&["line 20000", "column \"dep_delay\""]);
    assert_eq!(t.log_versions(), vec![0, 1]);
    assert_eq!(t.part_files(), parts);
}

// ---------------------------------------------------------------------------------------------
// path safety and protocol

fn crafted_add(path: &str) -> Value {
    json!({"add": {
        "path": path, "partitionValues": {}, "size": 10, "modificationTime": 1,
        "dataChange": true, "stats": "{\"numRecords\":1}"
    }})
}

fn commit_info(ts: i64) -> Value {
    json!({"commitInfo": {"timestamp": ts, "operation": "WRITE",
        "operationParameters": {"mode": "Append"}, "operationMetrics": {}}})
}

/// A table whose version 1 is an `add` of `path`; `read` and `describe` must refuse it as corrupt.
fn refuses_path(t: &TempTable, path: &str, check_describe: bool) {
    t.write_commit(1, &[commit_info(4_000_000_000_000), crafted_add(path)]);
    // The message names the offending commit or the offending data file.
    let out = t.td("read", &[]).code(1).stderr_has(&["corrupt"]);
    assert!(
        out.stderr.contains(&format!("{:020}.json", 1)) || out.stderr.contains(path),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "read leaked bytes of {path}: {}", out.text());
    assert!(!out.text().contains("SECRET"));
    if check_describe {
        t.td("describe", &[]).code(1).stderr_has(&["corrupt", path]);
        t.td("history", &[]).code(1).stderr_has(&["corrupt"]);
    }
    // Version 0 is still fine.
    assert_eq!(t.read_v(0), b"");
}

#[test]
fn refuses_add_paths_outside_the_table() {
    let t = TempTable::new(SMALL);
    let secret = t.dir.path().join("x");
    fs::write(&secret, "{\"id\":1,\"s\":\"SECRET\"}\n").unwrap();
    for p in [
        "../x",
        "/etc/passwd",
        secret.to_str().unwrap(),
        "sub/../../x",
        "file:///etc/passwd",
        "./../x",
    ] {
        refuses_path(&t, p, true);
    }
}

#[test]
fn refuses_a_remove_path_outside_the_table() {
    let t = TempTable::new(SMALL);
    let secret = t.dir.path().join("x");
    fs::write(&secret, "keep").unwrap();
    t.write_commit(
        1,
        &[
            commit_info(4_000_000_000_000),
            json!({"remove": {"path": "../x", "deletionTimestamp": 1, "dataChange": true}}),
        ],
    );
    t.td("read", &[]).code(1).stderr_has(&["corrupt", "../x"]);
    // Vacuum must refuse too, and never delete outside the table.
    t.td("vacuum", &["--older-than", "0s"]).code(1).stderr_has(&["corrupt"]);
    assert_eq!(fs::read(&secret).unwrap(), b"keep");
}

#[test]
fn refuses_symlinks_leading_out_of_the_table() {
    let t = TempTable::new(SMALL);
    let outside = t.dir.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    let secret = outside.join("part-secret.jsonl");
    fs::write(
        &secret,
        "{\"id\":1,\"x\":null,\"s\":\"SECRET\",\"b\":null,\"d\":null,\"t\":null}\n",
    )
    .unwrap();
    // A data file that is a symlink out of the table.
    std::os::unix::fs::symlink(&secret, t.path.join("part-evil.jsonl")).unwrap();
    refuses_path(&t, "part-evil.jsonl", false);
    // A folder inside the table that is a symlink out of it.
    std::os::unix::fs::symlink(&outside, t.path.join("sub")).unwrap();
    refuses_path(&t, "sub/part-secret.jsonl", false);
    // A symlink that stays inside the table is refused too: data files are opened beneath the
    // table folder with no symlink followed at all (openat2 RESOLVE_NO_SYMLINKS).
    let inside = t.path.join("part-real.jsonl");
    fs::write(
        &inside,
        "{\"id\":5,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null}\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("part-real.jsonl", t.path.join("part-alias.jsonl")).unwrap();
    refuses_path(&t, "part-alias.jsonl", false);
}

#[test]
fn refuses_a_protocol_it_does_not_support() {
    let t = TempTable::new(SMALL);
    let mut v0 = t.commit(0);
    for a in &mut v0 {
        if a.get("protocol").is_some() {
            *a = json!({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}});
        }
    }
    t.write_commit(0, &v0);
    // Deletion vectors are read (docs/FORMAT.md "Deletion vectors"), never written.
    t.td("read", &[]).code(0);
    t.td_in("append", &[], &small_rows(0, 1))
        .code(1)
        .stderr_has(&["writer version 7, unsupported"]);
    assert_eq!(t.log_versions(), vec![0]);
    assert!(t.part_files().is_empty());
    for a in &mut v0 {
        if a.get("protocol").is_some() {
            *a = json!({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["catalogManaged"], "writerFeatures": ["catalogManaged"]}});
        }
    }
    t.write_commit(0, &v0);
    for (cmd, rest) in [("read", vec![]), ("describe", vec![]), ("history", vec![])] {
        // Reader version 3 is read; a reader feature tinydelta does not implement is named.
        let out = t
            .td(cmd, &rest)
            .code(1)
            .stderr_has(&["\"catalogManaged\", unsupported", &t.p()]);
        assert!(out.stdout.is_empty());
    }

    // A later commit that raises the protocol is refused from that version on.
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 1));
    t.write_commit(
        2,
        &[
            commit_info(4_000_000_000_000),
            json!({"protocol": {"minReaderVersion": 4, "minWriterVersion": 7}}),
        ],
    );
    t.td("read", &[]).code(1).stderr_has(&["reader version 4"]);
    assert_eq!(ids(&t.read_v(1)), vec![0]);
}

// ---------------------------------------------------------------------------------------------
// streaming: memory bounded by the line, not the file

#[test]
fn append_streams_a_large_input_in_bounded_memory() {
    const TARGET: usize = 200 << 20;
    let t = TempTable::new(&["id:int!", "s:str"]);
    // The peak RSS comes from GNU time (`%M`, from its wait4(2) of a child it fork(2)ed): a child
    // spawned by this process itself starts in this process's address space (posix_spawn uses
    // CLONE_VM), and the kernel counts that address space's peak in the child's ru_maxrss, so the
    // figure would include whatever the other tests in this process held.
    let rss_file = t.dir.path().join("peak-rss");
    let mut child = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&rss_file)
        .arg(BIN)
        .args(t.args("append", &[]))
        .env_remove("TINYDELTA_FAILPOINT")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn /usr/bin/time tinydelta append (GNU time: scripts/test.sh installs it)");
    let mut stdin = child.stdin.take().unwrap();
    let filler = "x".repeat(4000);
    let feeder = std::thread::spawn(move || {
        let mut written = 0usize;
        let mut id = 0u64;
        let mut buf = Vec::with_capacity(1 << 20);
        while written < TARGET {
            buf.clear();
            while buf.len() < (1 << 20) {
                writeln!(buf, "{{\"s\":\"{filler}\",\"id\":{id}}}").unwrap();
                id += 1;
            }
            stdin.write_all(&buf).expect("feed the child");
            written += buf.len();
        }
        (id, written)
    });
    let out = child.wait_with_output().expect("wait for tinydelta append");
    let (rows, written) = feeder.join().expect("feeder");
    assert!(
        out.status.success(),
        "append failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peak_kb: u64 = std::fs::read_to_string(&rss_file)
        .expect("GNU time's output")
        .trim()
        .parse()
        .expect("GNU time's %M is a number of kB");
    eprintln!("peak RSS of append for {} MB: {peak_kb} kB", written >> 20);
    assert!(peak_kb > 0, "GNU time reported no peak RSS");
    // 200 MB went through; the process must stay far below that.
    assert!(
        peak_kb < 48 * 1024,
        "peak RSS {peak_kb} kB for a {} MB input: memory is not bounded by the line",
        written >> 20
    );
    let d = t.describe();
    assert_eq!(d["numRecords"].as_u64(), Some(rows));
    assert!(d["sizeBytes"].as_u64().unwrap() >= written as u64);

    // One huge line (8 MB) is fine too: no line length limit.
    let big = format!("{{\"id\":1,\"s\":\"{}\"}}\n", "y".repeat(8 << 20));
    assert_eq!(t.append(big.as_bytes()), 2);
    assert_eq!(t.describe()["numRecords"].as_u64(), Some(rows + 1));
}

/// `vacuum --older-than 0s` while an append has written its data file but not committed
/// (docs/FORMAT.md, "Vacuum and writers in flight"): vacuum skips the file the writer holds, and
/// the append commits it. A data file deleted behind the writer's back (by hand, ignoring the
/// lock) fails the append with nothing published.
#[test]
fn vacuum_never_deletes_the_data_file_of_an_append_in_flight() {
    for overwrite in [false, true] {
        let t = TempTable::new(SMALL);
        t.append(&small_rows(1, 2));
        let cmd = if overwrite { "overwrite" } else { "append" };
        let mut w = Writer::spawn(&t.args(cmd, &[]), "data-written=freeze", &small_rows(10, 3));
        w.wait_frozen("data-written");
        let fresh: Vec<String> = t.part_files().difference(&t.referenced()).cloned().collect();
        assert_eq!(fresh.len(), 1, "{cmd}: {fresh:?}");
        t.td("vacuum", &["--older-than", "0s"]).ok();
        assert!(
            t.path.join(&fresh[0]).exists(),
            "{cmd}: vacuum deleted the in-flight data file"
        );
        w.resume();
        let (st, _, err) = w.finish();
        assert!(st.success(), "{cmd}: {err}");
        let want: Vec<i64> = if overwrite {
            vec![10, 11, 12]
        } else {
            vec![1, 2, 10, 11, 12]
        };
        assert_eq!(ids(&t.read()), want, "{cmd}");
        t.td("check", &[]).ok();
    }
    // Deleted by hand while the writer is frozen: exit 1, no new version.
    let t = TempTable::new(SMALL);
    t.append(&small_rows(1, 2));
    let mut w = Writer::spawn(&t.args("append", &[]), "data-written=freeze", &small_rows(10, 3));
    w.wait_frozen("data-written");
    for f in t.part_files().difference(&t.referenced()) {
        fs::remove_file(t.path.join(f)).unwrap();
    }
    w.resume();
    let (st, _, err) = w.finish();
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("deleted"), "{err}");
    assert_eq!(t.latest(), 1);
    t.td("check", &[]).ok();
}

/// A log whose commit times another writer recorded out of order: version 2's is before
/// version 1's and version 3's equals version 2's. `(table, adjusted times)`: each time raised
/// to one ms after the previous version's when it is not after it (docs/FORMAT.md "Commit
/// times"). Version 4 is an hour after version 0, so a local time repeated by the end of
/// daylight saving time in Europe/Berlin (2026-10-25 02:30 = 00:30Z and 01:30Z) falls between.
pub(crate) fn table_with_times_going_backwards() -> (TempTable, Vec<i64>) {
    let t = TempTable::new(SMALL);
    for i in 0..4 {
        t.append(&small_rows(i, 1));
    }
    // 2026-10-25T00:00:00Z.
    let t0 = 1_792_886_400_000i64;
    let recorded = [t0, t0 + 1000, t0 + 500, t0 + 500, t0 + 3_600_000];
    for (v, ts) in recorded.iter().enumerate() {
        let mut lines = t.commit(v as u64);
        for l in &mut lines {
            if let Some(ci) = l.get_mut("commitInfo") {
                ci["timestamp"] = (*ts).into();
            }
        }
        t.write_commit(v as u64, &lines);
    }
    (t, vec![t0, t0 + 1000, t0 + 1001, t0 + 1002, t0 + 3_600_000])
}

#[test]
fn as_of_raises_commit_times_that_go_backwards_and_takes_the_first_of_a_repeated_local_time() {
    let (t, adjusted) = table_with_times_going_backwards();
    // Every version is reached at its own (adjusted) time, and not 1 ms before it.
    for (v, ts) in adjusted.iter().enumerate() {
        let at = rfc3339(*ts);
        assert_eq!(
            t.td("read", &["--as-of", &at]).ok().stdout,
            t.read_v(v as u64),
            "--as-of {at}"
        );
        if v > 0 {
            let before = rfc3339(ts - 1);
            assert_eq!(
                t.td("read", &["--as-of", &before]).ok().stdout,
                t.read_v(v as u64 - 1),
                "--as-of {before}"
            );
        }
    }
    // Version 2's recorded time (before version 1's) is version 0's era.
    assert_eq!(
        t.td("read", &["--as-of", &rfc3339(adjusted[0] + 500)]).ok().stdout,
        t.read_v(0)
    );
    // history shows the adjusted times, and the recorded ones in --json.
    let h: Value = serde_json::from_str(&t.td("history", &["--json"]).ok().text()).unwrap();
    let field = |k: &str| -> Vec<i64> { h.as_array().unwrap().iter().map(|e| e[k].as_i64().unwrap()).collect() };
    assert_eq!(field("timestamp"), adjusted);
    assert_eq!(field("recordedTimestamp")[2], adjusted[0] + 500);
    let text = t.td("history", &[]).ok().text();
    assert!(text.contains(&rfc3339(adjusted[2])), "{text}");
    // The change feed's _commit_timestamp is the same time.
    let feed = t.td("changes", &[]).ok().text();
    for l in feed.lines() {
        let row: Value = serde_json::from_str(l).unwrap();
        let v = row["_commit_version"].as_u64().unwrap() as usize;
        assert_eq!(
            row["_commit_timestamp"].as_str(),
            Some(rfc3339(adjusted[v]).as_str()),
            "{l}"
        );
    }
    let from2 = t.td("changes", &["--from-version", "2"]).ok().text();
    assert!(from2.contains(&rfc3339(adjusted[2])), "{from2}");
    // A local time that the end of daylight saving time repeats means its first occurrence
    // (00:30Z, version 3), not its second (01:30Z, version 4).
    let mut c = cmd(&t.args("read", &["--as-of", "2026-10-25 02:30"]));
    c.env("TZ", "Europe/Berlin");
    assert_eq!(run(c, b"").ok().stdout, t.read_v(3));
    let mut c = cmd(&t.args("read", &["--as-of", "2026-10-25 03:30"]));
    c.env("TZ", "Europe/Berlin");
    assert_eq!(run(c, b"").ok().stdout, t.read_v(4));
}

/// Auto compaction runs after the CLI's other writes too (docs/FORMAT.md "Auto compaction"): a
/// MERGE that inserts adds a file, and the third small file is packed right after its commit,
/// rows in the same order.
#[test]
fn auto_compaction_runs_after_a_merge() {
    let t = TempTable::new(&["id:int!"]);
    t.td(
        "alter",
        &[
            "set-property",
            "delta.autoOptimize.autoCompact=true",
            "tinydelta.autoCompact.minNumFiles=3",
        ],
    )
    .ok(); // 1
    t.append(b"{\"id\":1}\n"); // 2
    t.append(b"{\"id\":2}\n"); // 3
    assert_eq!(t.describe()["numFiles"], 2);
    let src = t.dir.path().join("src.jsonl");
    std::fs::write(&src, "{\"id\":3}\n").unwrap();
    let out = t.td("merge", &["--file", src.to_str().unwrap(), "--on", "id"]).ok();
    assert!(
        out.stderr
            .contains("auto compaction packed 3 files into 1 file as version 5"),
        "{}",
        out.stderr
    );
    assert_eq!(t.commit(4)[0]["commitInfo"]["operation"], "MERGE");
    assert_eq!(t.commit(5)[0]["commitInfo"]["operation"], "OPTIMIZE");
    assert_eq!(t.read_v(5), t.read_v(4));
    assert_eq!(t.read(), b"{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n");
    assert_eq!(t.describe()["numFiles"], 1);
}

#[test]
fn auto_compaction_follows_the_table_property_after_appends() {
    let t = TempTable::new(&["id:int!"]);
    // Off unless the table says so: ten appends, ten files.
    for i in 0..10 {
        t.append(format!("{{\"id\":{i}}}\n").as_bytes());
    }
    assert_eq!(t.part_files().len(), 10);
    t.td(
        "alter",
        &[
            "set-property",
            "delta.autoOptimize.autoCompact=true",
            "tinydelta.autoCompact.minNumFiles=12",
        ],
    )
    .ok();
    t.append(b"{\"id\":10}\n");
    assert_eq!(
        t.describe()["files"].as_array().unwrap().len(),
        11,
        "compacted below the threshold"
    );
    let out = t.td_in("append", &[], b"{\"id\":11}\n").ok();
    assert!(
        out.stderr
            .contains("auto compaction packed 12 files into 1 file as version"),
        "{}",
        out.stderr
    );
    // The append's own line names the append's version; the OPTIMIZE is the next one.
    let v = version_in(&out.text());
    let optimize = t.commit(v + 1);
    assert_eq!(optimize[0]["commitInfo"]["operation"], "OPTIMIZE");
    assert_eq!(optimize[0]["commitInfo"]["operationParameters"]["auto"], "true");
    let history = t.td("history", &[]).ok().text();
    assert!(
        history
            .lines()
            .any(|l| l.contains("OPTIMIZE") && l.ends_with("auto compaction")),
        "{history}"
    );
    assert_eq!(t.describe()["files"].as_array().unwrap().len(), 1);
    let want: String = (0..12).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    assert_eq!(String::from_utf8(t.read()).unwrap(), want);
    // Values the properties do not take are refused before anything is committed.
    let before = t.latest();
    t.td("alter", &["set-property", "delta.autoOptimize.autoCompact=sometimes"])
        .code(2)
        .stderr_has(&["is not true, false, auto or legacy"]);
    t.td("alter", &["set-property", "tinydelta.autoCompact.minNumFiles=1"])
        .code(2);
    t.td("alter", &["set-property", "noequals"])
        .code(2)
        .stderr_has(&["is not KEY=VALUE"]);
    assert_eq!(t.latest(), before);
    // Unset: back to off.
    t.td("alter", &["unset-property", "delta.autoOptimize.autoCompact"])
        .ok();
    let actions = t.commit(t.latest());
    assert_eq!(actions[0]["commitInfo"]["operation"], "UNSET TBLPROPERTIES");
}

/// A commit's ROWS are the rows it added as a data change: an OPTIMIZE that re-adds a file it
/// keeps (`dataChange` false, to keep the row order) adds none, in `history` and in `describe`'s
/// newest commit alike.
#[test]
fn an_optimize_that_re_adds_a_file_it_keeps_adds_no_rows() {
    let t = TempTable::new(&["id:int!"]);
    t.append(b"{\"id\":1}\n");
    t.append(b"{\"id\":2}\n");
    let big: String = (3..40).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    t.append(big.as_bytes()); // 3: larger than the target below, so kept
    t.td("optimize", &["--target-size", "100"]).ok();
    let v = t.latest();
    let commit = t.commit(v);
    let kept = commit
        .iter()
        .filter_map(|a| a.get("add"))
        .filter(|a| a["dataChange"] == false)
        .count();
    assert_eq!(kept, 2, "the packed file and the kept one, re-added: {commit:?}");
    let history = t.td("history", &["--json"]).ok().json();
    let entry = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["version"] == v)
        .unwrap()
        .clone();
    assert_eq!(entry["operation"], "OPTIMIZE", "{entry}");
    assert_eq!(entry["rows"], 0, "{entry}");
    assert_eq!(entry["tableRows"], 39, "{entry}");
}
