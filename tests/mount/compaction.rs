//! Auto compaction, mounted for real (docs/MOUNT.md "Auto compaction", docs/FORMAT.md "Auto
//! compaction"): a table fed by one-row commits through `incoming/` settles into few files in
//! the background, rows in the same order, with `OPTIMIZE` commits (`auto` true, no change
//! rows); the table property turns it off and on again while mounted.

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
