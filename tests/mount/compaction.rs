//! Auto compaction, mounted for real (docs/MOUNT.md "Auto compaction", docs/FORMAT.md "Auto
//! compaction"): a table fed by one-row commits through `incoming/` settles into few files in
//! the background, rows in the same order, with `OPTIMIZE` commits (`auto` true, no change
//! rows); the table property turns it off and on again while mounted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::mount::*;

fn parts(f: &Fixture) -> usize {
    std::fs::read_dir(f.m("latest/parts")).expect("latest/parts").count()
}

/// `cp` one file of one row per commit into `incoming/`, ids `from..to`.
fn commit_rows(f: &Fixture, from: u64, to: u64) {
    let src = f.dir.path().join("rows");
    std::fs::create_dir_all(&src).unwrap();
    for i in from..to {
        let p = src.join(format!("r{i}.jsonl"));
        std::fs::write(&p, format!("{{\"id\":{i}}}\n")).unwrap();
        ok("cp", &[p.as_os_str(), f.m("incoming/").as_os_str()]);
    }
}

/// Operations of `history --json`, oldest first, with their `auto` parameter for OPTIMIZE.
fn operations(f: &Fixture) -> Vec<String> {
    let out = ok(TD_BIN, &["history", &f.t(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out).expect("history --json");
    let mut ops: Vec<(u64, String)> = v
        .as_array()
        .expect("an array")
        .iter()
        .map(|e| {
            let op = e["operation"].as_str().unwrap_or("?").to_string();
            (e["version"].as_u64().unwrap(), op)
        })
        .collect();
    ops.sort();
    ops.into_iter().map(|(_, op)| op).collect()
}

#[test]
fn one_row_commits_settle_into_few_files_in_order() {
    let f = Fixture::empty(&["id:int!"]);
    let _m = f.mount_with(&["--auto-compact", "on"]);
    commit_rows(&f, 0, 60);
    assert!(parts(&f) > 2, "compacted before the re-save window passed");
    let deadline = Instant::now() + Duration::from_secs(60);
    while parts(&f) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(parts(&f), 1, "60 one-row commits were not compacted into one file");
    let want: String = (0..60).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    assert_eq!(
        String::from_utf8(std::fs::read(f.m("latest/data.jsonl")).unwrap()).unwrap(),
        want
    );
    let ops = operations(&f);
    assert_eq!(ops.iter().filter(|o| o.as_str() == "APPEND").count(), 60, "{ops:?}");
    assert!(ops.iter().any(|o| o == "OPTIMIZE"), "{ops:?}");
    // OPTIMIZE changes no data: the change feed holds the 60 inserts only.
    let feed = std::fs::read(f.m("changes.jsonl")).unwrap();
    assert_eq!(feed.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count(), 60);
    let latest = operations(&f).len() - 1;
    let commit = std::fs::read_to_string(f.m(&format!("v/{latest}/commit.json"))).unwrap();
    assert!(commit.contains("\"auto\":\"true\""), "{commit}");
    ok(TD_BIN, &["check", &f.t(), "--deep"]);
}

#[test]
fn the_table_property_turns_it_off_and_on_while_mounted() {
    let f = Fixture::empty(&["id:int!"]);
    ok(
        TD_BIN,
        &["alter", &f.t(), "set-property", "delta.autoOptimize.autoCompact=false"],
    );
    let _m = f.mount_with(&["--auto-compact", "on"]);
    commit_rows(&f, 0, 5);
    // Past the re-save window and the pause that packs the files left.
    std::thread::sleep(Duration::from_secs(9));
    assert_eq!(parts(&f), 5);
    assert!(!operations(&f).iter().any(|o| o == "OPTIMIZE"));
    ok(
        TD_BIN,
        &["alter", &f.t(), "set-property", "delta.autoOptimize.autoCompact=true"],
    );
    commit_rows(&f, 5, 6);
    let deadline = Instant::now() + Duration::from_secs(30);
    while parts(&f) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(parts(&f), 1);
    let want: String = (0..6).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    assert_eq!(
        String::from_utf8(std::fs::read(f.m("latest/data.jsonl")).unwrap()).unwrap(),
        want
    );
}

/// 200 files of one to three rows copied into `incoming/` one by one for about 15 s, with
/// `--auto-compact-min-files 20`: compactions run while the copies go on (an `OPTIMIZE` before
/// the last append, rebased over the appends that came meanwhile); every read of
/// `latest/data.jsonl` meanwhile is the inputs' bytes up to the end of some file (a compaction
/// moves `latest` to a version with other data files and the same bytes); once the copies stop,
/// `latest` is one data file holding exactly the inputs' bytes in order, and the change feed
/// holds the inserts alone.
#[test]
fn many_small_files_copied_into_incoming_settle_into_one_with_the_same_bytes() {
    const FILES: usize = 200;
    let f = Fixture::empty(&["id:int!", "note:str"]);
    let _m = f.mount_with(&["--auto-compact", "on", "--auto-compact-min-files", "20"]);
    let src = f.dir.path().join("in");
    std::fs::create_dir_all(&src).unwrap();
    let (mut want, mut ends, mut inputs) = (Vec::new(), vec![0usize], Vec::new());
    for i in 0..FILES {
        let body: String = (0..i % 3 + 1)
            .map(|j| format!("{{\"id\":{},\"note\":\"file {i} row {j}\"}}\n", i * 10 + j))
            .collect();
        let p = src.join(format!("f{i}.jsonl"));
        std::fs::write(&p, &body).unwrap();
        want.extend_from_slice(body.as_bytes());
        ends.push(want.len());
        inputs.push(p);
    }
    let rows = want.iter().filter(|b| **b == b'\n').count();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (path, want, ends, stop) = (f.m("latest/data.jsonl"), want.clone(), ends.clone(), stop.clone());
        std::thread::spawn(move || -> Result<usize, String> {
            let mut reads = 0;
            while !stop.load(Ordering::SeqCst) {
                let got = std::fs::read(&path).map_err(|e| format!("read latest/data.jsonl: {e}"))?;
                if !ends.contains(&got.len()) || got[..] != want[..got.len()] {
                    return Err(format!(
                        "latest/data.jsonl read {} bytes that are not the inputs up to a file's end",
                        got.len()
                    ));
                }
                reads += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(reads)
        })
    };
    for p in &inputs {
        ok("cp", &[p.as_os_str(), f.m("incoming/").as_os_str()]);
        std::thread::sleep(Duration::from_millis(75));
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    while parts(&f) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
    }
    stop.store(true, Ordering::SeqCst);
    let reads = reader
        .join()
        .expect("the reader thread")
        .expect("every read consistent");
    assert!(reads > 10, "the reader read {reads} times");
    assert_eq!(parts(&f), 1, "{FILES} small files were not compacted into one");
    let d: serde_json::Value = serde_json::from_slice(&ok(TD_BIN, &["describe", &f.t(), "--json"])).unwrap();
    assert_eq!(d["numFiles"], 1, "{d}");
    assert!(
        std::fs::read(f.m("latest/data.jsonl")).unwrap() == want,
        "latest/data.jsonl is not the inputs in order"
    );
    assert!(
        ok(TD_BIN, &["read", &f.t()]) == want,
        "tinydelta read is not the inputs in order"
    );
    let ops = operations(&f);
    assert_eq!(ops.iter().filter(|o| o.as_str() == "APPEND").count(), FILES, "{ops:?}");
    let last_append = ops.iter().rposition(|o| o == "APPEND").unwrap();
    let first_optimize = ops.iter().position(|o| o == "OPTIMIZE").expect("an OPTIMIZE");
    assert!(
        first_optimize < last_append,
        "no compaction ran while the copies went on: {ops:?}"
    );
    // Each OPTIMIZE version reads exactly like the version before it.
    for (v, op) in ops.iter().enumerate() {
        if op == "OPTIMIZE" {
            let now = std::fs::read(f.m(&format!("v/{v}/data.jsonl"))).unwrap();
            let before = std::fs::read(f.m(&format!("v/{}/data.jsonl", v - 1))).unwrap();
            assert!(now == before, "OPTIMIZE version {v} reads unlike version {}", v - 1);
        }
    }
    let feed = std::fs::read(f.m("changes.jsonl")).unwrap();
    assert_eq!(feed.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count(), rows);
    ok(TD_BIN, &["check", &f.t(), "--deep"]);
}
