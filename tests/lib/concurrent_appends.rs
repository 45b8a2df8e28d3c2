//! Blind appends of one process at once, and of two processes (two handles: two sequencers of
//! version tickets) racing them: every append lands exactly once, in a version of its own, with
//! no gap in the log and commit times that only go up (docs/FORMAT.md "Concurrency", "Commit
//! times").

use std::collections::BTreeSet;

use tinydelta::check::{CheckOptions, check};
use tinydelta::{Schema, Table, WriteOptions};

#[test]
fn concurrent_appends_of_two_handles_each_land_once_in_a_version_of_their_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t");
    let schema = Schema::parse_cli(&["id:int!".to_string()]).expect("schema");
    let a = Table::create(&root, &schema).expect("create");
    // A second handle stands for another process: its own tickets, so its links race the first
    // handle's (EEXIST) and void them.
    let b = Table::open(&root).expect("open");
    const THREADS: u64 = 8;
    const EACH: u64 = 15;
    let versions: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let table = if t < 6 { a.clone() } else { b.clone() };
                s.spawn(move || {
                    (0..EACH)
                        .map(|i| {
                            let row = format!("{{\"id\":{}}}\n", t * 1000 + i);
                            table
                                .append("test", row.as_bytes(), &WriteOptions::default())
                                .expect("append")
                                .expect("a version")
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("thread")).collect()
    });
    let total = THREADS * EACH;
    let distinct: BTreeSet<u64> = versions.iter().copied().collect();
    assert_eq!(distinct.len() as u64, total, "two appends reported the same version");
    assert_eq!(distinct, (1..=total).collect(), "versions are 1..={total} with no gap");

    let fresh = Table::open(&root).expect("open");
    assert_eq!(fresh.latest_version().expect("latest"), total);
    let snap = fresh.snapshot(total).expect("snapshot");
    let mut out = Vec::new();
    fresh.write_rows(&snap, &mut out).expect("rows");
    let mut got: Vec<String> = String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(String::from)
        .collect();
    got.sort();
    let mut want: Vec<String> = (0..THREADS)
        .flat_map(|t| (0..EACH).map(move |i| format!("{{\"id\":{}}}", t * 1000 + i)))
        .collect();
    want.sort();
    assert_eq!(got, want, "every appended row exactly once");

    // Each version adds one file; recorded commit times only go up.
    let history = fresh.history().expect("history");
    let recorded: Vec<i64> = history
        .iter()
        .filter(|h| h.version > 0)
        .map(|h| h.recorded_timestamp)
        .collect();
    assert_eq!(recorded.len() as u64, total);
    assert!(
        recorded.windows(2).all(|w| w[0] < w[1]),
        "commit times go back: {recorded:?}"
    );
    let report = check(
        &fresh,
        &CheckOptions {
            deep: true,
            repair: false,
        },
    )
    .expect("check");
    assert!(report.is_whole(), "{:?}", report.problems);
}
