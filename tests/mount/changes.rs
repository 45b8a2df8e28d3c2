//! The change feed and time travel by time, mounted for real (docs/MOUNT.md "Following a table:
//! `changes.jsonl`", docs/MOUNT.md "Time travel by time: `at/`"): `tail -f mnt/changes.jsonl`
//! follows commits made by the CLI and by `cp` into `incoming/`; an overwrite and a restore show
//! their delete and insert rows; `tinydelta changes --follow` ends quietly with its reader or on
//! SIGINT; `mnt/at/<TIME>` is the version current at TIME; DuckDB reads the feed with typed CDF
//! columns.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::mount::*;

/// A table `id:int! src:str` with a mount point, nothing committed past version 0.
fn fixture() -> Fixture {
    Fixture::empty(&["id:int!", "src:str"])
}

fn append(f: &Fixture, rows: &str) {
    let mut c = Command::new(TD_BIN)
        .args(["append", &f.t()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn append");
    std::io::Write::write_all(c.stdin.as_mut().expect("stdin"), rows.as_bytes()).expect("write rows");
    drop(c.stdin.take());
    assert!(c.wait().expect("wait append").success(), "append {rows}");
}

fn json(line: &[u8]) -> serde_json::Value {
    serde_json::from_slice(line).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line)))
}

/// `tinydelta changes TABLE` must equal the mount's `changes.jsonl`, and its size must equal
/// `stat`'s.
fn assert_feed_agrees(f: &Fixture) -> Vec<u8> {
    let via_mount = std::fs::read(f.m("changes.jsonl")).expect("read changes.jsonl");
    let size = std::fs::metadata(f.m("changes.jsonl"))
        .expect("stat changes.jsonl")
        .len();
    assert_eq!(size, via_mount.len() as u64, "stat size = bytes read");
    let cli = f.td(&["changes", &f.t()]);
    assert_eq!(
        String::from_utf8_lossy(&via_mount),
        String::from_utf8_lossy(&cli),
        "mount and CLI feeds"
    );
    via_mount
}

#[test]
fn tail_f_follows_commits_by_the_cli_and_by_cp_into_incoming() {
    require_tool("tail");
    let f = fixture();
    let _m = f.mount();
    let mut tail = Command::new("tail")
        .args(["-f", "-n", "+1"])
        .arg(f.m("changes.jsonl"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tail -f");
    let out = tail.stdout.take().expect("tail stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    // GNU tail reads a FUSE file by polling it once a second: give it time to start.
    std::thread::sleep(Duration::from_millis(1500));
    let staged = f.dir.path().join("batch");
    std::fs::create_dir(&staged).unwrap();
    let mut committed = Vec::new();
    for i in 0..50 {
        let row = format!("{{\"id\":{i},\"src\":\"{}\"}}\n", if i % 2 == 0 { "cli" } else { "cp" });
        if i % 2 == 0 {
            append(&f, &row);
        } else {
            let p = staged.join(format!("b{i}.jsonl"));
            std::fs::write(&p, &row).unwrap();
            ok("cp", &[p.as_os_str(), f.m("incoming/").as_os_str()]);
        }
        committed.push(Instant::now());
        std::thread::sleep(Duration::from_millis(40));
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 50 && Instant::now() < deadline {
        if let Ok(x) = rx.recv_timeout(Duration::from_millis(200)) {
            got.push(x);
        }
    }
    let _ = tail.kill();
    let _ = tail.wait();
    assert_eq!(got.len(), 50, "tail -f printed {} of 50 rows", got.len());
    let mut lat = Vec::new();
    for (i, (at, line)) in got.iter().enumerate() {
        let r = json(line.as_bytes());
        assert_eq!(r["id"].as_i64(), Some(i as i64), "row {i} in order: {line}");
        assert_eq!(r["_change_type"], "insert", "{line}");
        assert_eq!(r["_commit_version"].as_u64(), Some(i as u64 + 1), "{line}");
        assert_eq!(r["src"], if i % 2 == 0 { "cli" } else { "cp" });
        // The commit returned at `committed[i]`; it was published just before.
        let l = at.saturating_duration_since(committed[i]);
        assert!(
            l < Duration::from_secs(2),
            "row {i} reached tail -f {l:?} after its commit"
        );
        lat.push(l);
    }
    lat.sort();
    eprintln!(
        "publish -> tail -f latency over 50 commits: median {:?}, max {:?}",
        lat[25], lat[49]
    );
    let feed = assert_feed_agrees(&f);
    assert_eq!(lines(&feed).len(), 50, "wc -l = change rows");
}

#[test]
fn overwrite_then_restore_shows_deletes_and_inserts() {
    let f = fixture();
    append(&f, "{\"id\":1,\"src\":\"a\"}\n{\"id\":2,\"src\":\"a\"}\n");
    append(&f, "{\"id\":3,\"src\":\"b\"}\n");
    let _m = f.mount();
    let before = std::fs::metadata(f.m("changes.jsonl")).unwrap().len();
    let mut c = Command::new(TD_BIN)
        .args(["overwrite", &f.t()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(c.stdin.as_mut().unwrap(), b"{\"id\":9,\"src\":\"z\"}\n").unwrap();
    drop(c.stdin.take());
    assert!(c.wait().unwrap().success());
    f.td(&["restore", &f.t(), "--version", "2"]);
    // The size grew at once (TTL 0), and the old bytes did not change.
    let feed = assert_feed_agrees(&f);
    assert!(feed.len() as u64 > before);
    let rows: Vec<(i64, String, u64)> = lines(&feed)
        .iter()
        .map(|l| {
            let r = json(l);
            (
                r["id"].as_i64().unwrap(),
                r["_change_type"].as_str().unwrap().to_string(),
                r["_commit_version"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(i64, String, u64)> = [
        (1, "insert", 1),
        (2, "insert", 1),
        (3, "insert", 2),
        (1, "delete", 3),
        (2, "delete", 3),
        (3, "delete", 3),
        (9, "insert", 3),
        (9, "delete", 4),
        (1, "insert", 4),
        (2, "insert", 4),
        (3, "insert", 4),
    ]
    .into_iter()
    .map(|(i, c, v)| (i, c.to_string(), v))
    .collect();
    assert_eq!(rows, want);
    // Each row carries its commit's time as --as-of uses it.
    for l in lines(&feed) {
        let r = json(l);
        let v = r["_commit_version"].as_u64().unwrap();
        let ts = r["_commit_timestamp"].as_str().unwrap();
        let back = f.td(&["read", &f.t(), "--as-of", ts]);
        assert_eq!(back, f.read_v(v), "--as-of {ts} reads version {v}");
    }
    // --from-version / --to-version select versions.
    let only3 = f.td(&["changes", &f.t(), "--from-version", "3", "--to-version", "3"]);
    assert_eq!(lines(&only3).len(), 4);
    let out = run(TD_BIN, &["changes", &f.t(), "--to-version", "9"]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn changes_follow_ends_with_its_reader_and_on_sigint() {
    let f = fixture();
    append(
        &f,
        "{\"id\":1,\"src\":\"a\"}\n{\"id\":2,\"src\":\"a\"}\n{\"id\":3,\"src\":\"a\"}\n",
    );
    // `| head -n 5`: 3 rows now, 2 more from a later commit; then head exits and so must we.
    let script = r#""$TD" changes "$T" --follow 2>"$ERR" | head -n 5 >"$OUT"; echo "${PIPESTATUS[0]}" >"$RC""#;
    let err = f.dir.path().join("err");
    let out = f.dir.path().join("out");
    let rc = f.dir.path().join("rc");
    let mut pipeline = Command::new("bash")
        .args(["-c", script])
        .env("TD", TD_BIN)
        .env("T", &f.table)
        .env("ERR", &err)
        .env("OUT", &out)
        .env("RC", &rc)
        .spawn()
        .expect("bash");
    std::thread::sleep(Duration::from_millis(800));
    append(&f, "{\"id\":4,\"src\":\"b\"}\n{\"id\":5,\"src\":\"b\"}\n");
    let done_at = Instant::now();
    let ok_exit = wait_for(10, || matches!(pipeline.try_wait(), Ok(Some(_))));
    if !ok_exit {
        let _ = pipeline.kill();
    }
    assert!(ok_exit, "the pipeline did not end after head exited");
    let took = done_at.elapsed();
    assert!(took < Duration::from_secs(3), "took {took:?} after the commit");
    assert_eq!(
        std::fs::read_to_string(&rc).unwrap().trim(),
        "0",
        "tinydelta's exit status"
    );
    assert_eq!(std::fs::read_to_string(&err).unwrap(), "", "no error message");
    assert_eq!(lines(&std::fs::read(&out).unwrap()).len(), 5);

    // SIGINT: exit 0, nothing on stderr.
    let child = Command::new(TD_BIN)
        .args(["changes", &f.t(), "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    ok("bash", &["-c", &format!("kill -INT {}", child.id())]);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    assert_eq!(lines(&o.stdout).len(), 5);
}

fn commit_time(f: &Fixture, v: u64) -> i64 {
    let out = f.td(&["history", &f.t(), "--json"]);
    let h: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let e = h
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["version"].as_u64() == Some(v))
        .expect("version in history");
    e["timestampMs"]
        .as_i64()
        .or_else(|| e["timestamp"].as_i64())
        .or_else(|| {
            e["timestamp"]
                .as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                .map(|d| d.timestamp_millis())
        })
        .unwrap_or_else(|| panic!("no time in {e}"))
}

fn rfc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

#[test]
fn at_time_is_the_version_current_then() {
    let f = fixture();
    for i in 1..=5 {
        append(&f, &format!("{{\"id\":{i},\"src\":\"x\"}}\n"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _m = f.mount();
    let (t3, t4) = (commit_time(&f, 3), commit_time(&f, 4));
    assert!(t4 - t3 >= 2, "commit times {t3} {t4}");
    let between = rfc(t3 + (t4 - t3) / 2);
    let at = f.m("at").join(&between);
    assert_eq!(std::fs::read_link(&at).unwrap(), Path::new("../v/3"));
    let data = std::fs::read(at.join("data.jsonl")).unwrap();
    assert_eq!(data, std::fs::read(f.m("v/3/data.jsonl")).unwrap());
    assert_eq!(data, f.read_v(3));
    assert_eq!(f.td(&["read", &f.t(), "--as-of", &between]), data, "the CLI agrees");
    // ls at/: one entry per version, named by its commit time.
    let mut names: Vec<String> = std::fs::read_dir(f.m("at"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let want: Vec<String> = (0..=5).map(|v| rfc(commit_time(&f, v))).collect();
    assert_eq!(names, want);
    for (v, n) in want.iter().enumerate() {
        assert_eq!(
            std::fs::read_link(f.m("at").join(n)).unwrap(),
            Path::new(&format!("../v/{v}"))
        );
    }
    // Relative times move (TTL 0): "now" is the latest.
    assert_eq!(std::fs::read_link(f.m("at/now")).unwrap(), Path::new("../v/5"));
    append(&f, "{\"id\":6,\"src\":\"x\"}\n");
    assert_eq!(std::fs::read_link(f.m("at/0s ago")).unwrap(), Path::new("../v/6"));
    // Before the first commit: ENOENT in the mount, exit 4 naming the first commit in the CLI.
    let before = rfc(commit_time(&f, 0) - 60_000);
    let e = std::fs::read_link(f.m("at").join(&before)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    let out = run(TD_BIN, &["read", &f.t(), "--as-of", &before]);
    assert_eq!(out.status.code(), Some(4));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains(&rfc(commit_time(&f, 0))), "{msg}");
    // A time without a zone is local (TZ of the process); an unreadable one lists the forms.
    let out = run(TD_BIN, &["read", &f.t(), "--as-of", "2026-11-30 19:52:27"]);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("premature"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(TD_BIN, &["read", &f.t(), "--as-of", "yesterday-ish"]);
    assert_eq!(out.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("accepted: RFC 3339") && msg.contains("30m ago"), "{msg}");
    assert!(std::fs::read_link(f.m("at/yesterday-ish")).is_err());
}

#[test]
fn duckdb_reads_the_feed_with_typed_cdf_columns() {
    let py = python(&["duckdb"]);
    let f = fixture();
    append(&f, "{\"id\":1,\"src\":\"a\"}\n{\"id\":2,\"src\":null}\n");
    append(&f, "{\"id\":3,\"src\":\"b\"}\n");
    let _m = f.mount();
    let script = r#"
import duckdb, sys
q = "select typeof(_change_type), typeof(_commit_version), typeof(_commit_timestamp), count(*), " \
    "sum(_commit_version), min(_change_type), max(epoch_ms(_commit_timestamp)) from read_json_auto(?) group by all"
for row in duckdb.execute(q, [sys.argv[1]]).fetchall():
    print("|".join(str(x) for x in row))
"#;
    let out = ok(&py, &["-c", script, &f.m("changes.jsonl").display().to_string()]);
    // The `Z` makes DuckDB type it as an instant (TIMESTAMP WITH TIME ZONE), the right type for
    // a UTC commit time; its value is the commit's time to the ms.
    let want = format!(
        "VARCHAR|BIGINT|TIMESTAMP WITH TIME ZONE|3|4|insert|{}",
        commit_time(&f, 2)
    );
    assert_eq!(String::from_utf8_lossy(&out).trim(), want);
}

#[test]
fn a_missing_data_file_is_eio_and_the_size_stays() {
    let f = fixture();
    append(&f, "{\"id\":1,\"src\":\"a\"}\n");
    append(&f, "{\"id\":2,\"src\":\"b\"}\n");
    let before = f.td(&["changes", &f.t()]);
    // Remove version 2's data file behind the table's back (as another tool's vacuum might).
    let commit = std::fs::read_to_string(f.table.join("_delta_log/00000000000000000002.json")).unwrap();
    let add = commit
        .lines()
        .find_map(|l| json(l.as_bytes())["add"]["path"].as_str().map(str::to_string))
        .unwrap();
    std::fs::remove_file(f.table.join(&add)).unwrap();
    let _m = f.mount();
    let size = std::fs::metadata(f.m("changes.jsonl")).unwrap().len();
    assert_eq!(size, before.len() as u64, "the size comes from the log");
    let e = std::fs::read(f.m("changes.jsonl")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    // Versions before it are still followed by the CLI.
    let v1 = f.td(&["changes", &f.t(), "--to-version", "1"]);
    assert_eq!(v1, before[..lines(&before)[0].len() + 1]);
    // The CLI names the file.
    let out = run(TD_BIN, &["changes", &f.t()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&add));
}

/// After an ordinary vacuum the feed's early versions are gone, not damage: `changes` starts at
/// the first version whose changes can be read (saying so), `--from-version` before it exits 4
/// naming the version, the file and that first version, and `--from-version N` then works; the mount's `changes.jsonl` is `EIO` with a log line saying
/// the same (docs/MOUNT.md "Following a table: `changes.jsonl`").
#[test]
fn a_vacuumed_version_names_the_first_readable_one() {
    let f = fixture();
    append(&f, "{\"id\":1,\"src\":\"a\"}\n");
    append(&f, "{\"id\":2,\"src\":\"b\"}\n");
    let mut c = Command::new(TD_BIN)
        .args(["overwrite", &f.t()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn overwrite");
    std::io::Write::write_all(c.stdin.as_mut().expect("stdin"), b"{\"id\":3,\"src\":\"c\"}\n").expect("write");
    drop(c.stdin.take());
    assert!(c.wait().expect("wait").success());
    ok(TD_BIN, &["vacuum", &f.t(), "--retain", "0s", "--force"]);
    ok(TD_BIN, &["check", &f.t()]);
    append(&f, "{\"id\":4,\"src\":\"d\"}\n");
    // An explicit --from-version whose changes are gone: exit 4 naming the first readable one.
    let out = run(TD_BIN, &["changes", f.table.to_str().unwrap(), "--from-version", "3"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains("version 3's changes need data file ")
            && err.contains("which the vacuum of ")
            && err.contains("(version 4) removed (it is no longer in the table); changes can be read from version 4 on (--from-version 4)"),
        "{err}"
    );
    let from4 = f.td(&["changes", &f.t(), "--from-version", "4"]);
    assert_eq!(lines(&from4).len(), 1);
    assert_eq!(json(lines(&from4)[0])["_commit_version"], 6);
    // Without --from-version: from the first readable version (nothing else is meaningful),
    // saying on stderr what is left out and why; exit 0.
    let out = run(TD_BIN, &["changes", f.table.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(out.stdout, from4);
    assert!(
        err.contains("the changes of versions before 4 are not printed: the vacuum of ")
            && err.contains("(version 4) deleted data files they need; printing from version 4"),
        "{err}"
    );
    let m = f.mount();
    let e = std::fs::read(f.m("changes.jsonl")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    assert!(
        wait_for(5, || m.log_text().contains("changes can be read from version 4 on")),
        "{}",
        m.log_text()
    );
}

#[test]
fn at_raises_commit_times_that_go_backwards_and_takes_the_first_of_a_repeated_local_time() {
    let f = fixture();
    for i in 1..=4 {
        append(&f, &format!("{{\"id\":{i},\"src\":\"x\"}}\n"));
    }
    // Another writer's times, out of order (2026-10-25T00:00:00Z on): version 2's before
    // version 1's, version 3's equal to version 2's; version 4 an hour after version 0.
    let t0 = 1_792_886_400_000i64;
    let recorded = [t0, t0 + 1000, t0 + 500, t0 + 500, t0 + 3_600_000];
    let adjusted = [t0, t0 + 1000, t0 + 1001, t0 + 1002, t0 + 3_600_000];
    for (v, ts) in recorded.iter().enumerate() {
        let p = f.table.join(format!("_delta_log/{v:020}.json"));
        let mut out = String::new();
        for l in std::fs::read_to_string(&p).unwrap().lines() {
            let mut a = json(l.as_bytes());
            if let Some(ci) = a.get_mut("commitInfo") {
                ci["timestamp"] = (*ts).into();
            }
            out.push_str(&a.to_string());
            out.push('\n');
        }
        std::fs::write(&p, out).unwrap();
    }
    let _m = f.mount_with_env(&[], &[("TZ", "Europe/Berlin")]);
    // ls at/: one entry per version, named by its adjusted time.
    let mut names: Vec<String> = std::fs::read_dir(f.m("at"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let want: Vec<String> = adjusted.iter().map(|t| rfc(*t)).collect();
    assert_eq!(names, want);
    for (v, ts) in adjusted.iter().enumerate() {
        let link = |ms: i64| std::fs::read_link(f.m("at").join(rfc(ms))).unwrap();
        assert_eq!(link(*ts), Path::new(&format!("../v/{v}")), "at/{}", rfc(*ts));
        if v > 0 {
            assert_eq!(
                link(ts - 1),
                Path::new(&format!("../v/{}", v - 1)),
                "at/{}",
                rfc(ts - 1)
            );
        }
    }
    // The daemon's zone: 02:30 is repeated on 2026-10-25; its first occurrence is 00:30Z.
    assert_eq!(
        std::fs::read_link(f.m("at/2026-10-25 02:30")).unwrap(),
        Path::new("../v/3")
    );
    assert_eq!(
        std::fs::read_link(f.m("at/2026-10-25 03:30")).unwrap(),
        Path::new("../v/4")
    );
}

/// A row-level change seen through `changes.jsonl` (docs/FORMAT.md "The change feed"): the
/// update's pre- and post-images and the deleted row only, the same bytes as `tinydelta changes`,
/// and a size `stat` gives before anything is read.
#[test]
fn row_level_changes_show_their_images_in_changes_jsonl() {
    let f = fixture();
    append(
        &f,
        "{\"id\":1,\"src\":\"a\"}\n{\"id\":2,\"src\":\"b\"}\n{\"id\":3,\"src\":\"c\"}\n",
    );
    f.td(&["update", &f.t(), "--set", "src = 'B'", "--where", "id = 2"]);
    let _m = f.mount();
    f.td(&["delete", &f.t(), "--where", "id = 3"]);
    let feed = assert_feed_agrees(&f);
    let got: Vec<(String, i64, String)> = feed
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(json)
        .filter(|r| r["_commit_version"].as_u64() > Some(1))
        .map(|r| {
            (
                r["_change_type"].as_str().unwrap().to_string(),
                r["id"].as_i64().unwrap(),
                r["src"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("update_preimage", 2, "b"),
        ("update_postimage", 2, "B"),
        ("delete", 3, "c"),
    ];
    let want: Vec<(String, i64, String)> = want
        .iter()
        .map(|(c, i, s)| (c.to_string(), *i, s.to_string()))
        .collect();
    assert_eq!(got, want);
}
