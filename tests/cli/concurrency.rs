//! docs/FORMAT.md, concurrency, with racing writers as separate `tinydelta` processes.
//!
//! Races are made deterministic with the `before-link` freeze failpoint: every writer is stopped
//! with its commit fully written but not linked, then all are released at once, so they really
//! contend for the same version.

use std::collections::BTreeSet;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::support::*;

/// Resume every stopped writer (again and again, since a rebasing append freezes once per
/// attempt) until all have exited. Returns (status, stdout, stderr) in spawn order.
fn release_all(mut writers: Vec<Writer>) -> Vec<(ExitStatus, String, String)> {
    let start = Instant::now();
    let mut done: Vec<Option<ExitStatus>> = vec![None; writers.len()];
    while done.iter().any(Option::is_none) {
        for (w, d) in writers.iter_mut().zip(done.iter_mut()) {
            if d.is_some() {
                continue;
            }
            if let Some(st) = w.child.try_wait().expect("try_wait") {
                *d = Some(st);
            } else if matches!(proc_state(w.pid()), Some('T') | Some('t')) {
                w.resume();
            }
        }
        assert!(start.elapsed() < HANG_GUARD, "writers never finished");
        std::thread::sleep(Duration::from_millis(2));
    }
    writers.into_iter().map(Writer::finish).collect()
}

/// Start writers with `before-link=freeze` and wait until every one is frozen.
fn frozen_writers(jobs: Vec<(Vec<String>, Vec<u8>)>) -> Vec<Writer> {
    let mut ws: Vec<Writer> = jobs
        .into_iter()
        .map(|(args, input)| Writer::spawn(&args, "before-link=freeze", &input))
        .collect();
    for w in &mut ws {
        w.wait_frozen("before-link");
    }
    ws
}

fn freezes(stderr: &str) -> usize {
    stderr.matches("failpoint before-link: frozen pid").count()
}

/// The log has versions 0..=n and nothing else, no commit temporaries; timestamps strictly
/// increase and each commit's readVersion is the version before it.
fn assert_clean_log(t: &TempTable, n: u64) {
    assert_eq!(t.log_versions(), (0..=n).collect::<Vec<_>>(), "gaps or extra versions");
    assert!(t.tmp_files().is_empty(), "commit temporaries left: {:?}", t.tmp_files());
    let mut prev = i64::MIN;
    for v in 0..=n {
        let ci = t.commit(v)[0]["commitInfo"].clone();
        let ts = ci["timestamp"].as_i64().expect("timestamp");
        assert!(ts > prev, "version {v}: timestamp {ts} not after {prev}");
        prev = ts;
        if v > 0 && ci["isBlindAppend"] == true {
            assert_eq!(ci["readVersion"].as_i64(), Some(v as i64 - 1), "version {v}");
        } else if v > 0 {
            // WriteSerializable operations record the version they read (Delta's readVersion):
            // it is older when they were serialized after blind appends.
            let r = ci["readVersion"].as_i64().expect("readVersion");
            assert!((0..v as i64).contains(&r), "version {v}: readVersion {r}");
        }
    }
    assert_eq!(t.latest(), n);
}

#[test]
fn racing_appends_each_get_a_version_and_no_row_is_lost_or_duplicated() {
    const N: i64 = 8;
    let t = TempTable::new(SMALL);
    let jobs = (0..N)
        .map(|i| (t.args("append", &[]), small_rows(i * 1000, 50)))
        .collect();
    // All eight have read version 0 and are frozen holding a complete commit for version 1.
    let ws = frozen_writers(jobs);
    assert_eq!(t.log_versions(), vec![0]);
    assert_eq!(t.tmp_files().len(), N as usize);
    let results = release_all(ws);

    let mut versions = BTreeSet::new();
    for (i, (st, out, err)) in results.iter().enumerate() {
        assert!(st.success(), "writer {i}: {st:?} {err}");
        let v = version_in(out);
        assert!(versions.insert(v), "version {v} reported twice");
        // A writer that ended at version v tried version 1, then after each lost race the
        // version after the newest on disk: at most v attempts (one freeze per attempt), fewer
        // when others linked several versions while it was frozen (the jump itself is checked
        // by a_lagging_append_retries_at_the_newest_version_not_one_version_per_attempt).
        let attempts = freezes(err) as u64;
        assert!((1..=v).contains(&attempts), "writer {i} (version {v}) attempts: {err}");
        // Its rows are exactly its version's add.
        let adds: Vec<_> = t.commit(v).into_iter().filter(|a| a.get("add").is_some()).collect();
        assert_eq!(adds.len(), 1);
        let rows = t.read_v(v);
        let before = t.read_v(v - 1);
        assert_eq!(
            &rows[..before.len()],
            &before[..],
            "version {v} does not extend {}",
            v - 1
        );
        assert_eq!(
            ids(&rows[before.len()..]),
            (i as i64 * 1000..i as i64 * 1000 + 50).collect::<Vec<_>>()
        );
    }
    assert_eq!(versions, (1..=N as u64).collect());
    assert_clean_log(&t, N as u64);
    let mut got = ids(&t.read());
    got.sort_unstable();
    let mut want: Vec<i64> = (0..N).flat_map(|i| i * 1000..i * 1000 + 50).collect();
    want.sort_unstable();
    assert_eq!(got, want, "every row exactly once");
    assert_eq!(t.part_files().len(), N as usize);
}

#[test]
fn free_running_appends_have_no_gaps_and_no_duplicates() {
    const N: i64 = 8;
    let t = TempTable::new(SMALL);
    let ws: Vec<Writer> = (0..N)
        .map(|i| Writer::spawn(&t.args("append", &[]), "", &small_rows(i * 1000, 200)))
        .collect();
    let results: Vec<_> = ws.into_iter().map(Writer::finish).collect();
    let mut versions = BTreeSet::new();
    for (st, out, err) in &results {
        assert!(st.success(), "{err}");
        versions.insert(version_in(out));
    }
    assert_eq!(versions, (1..=N as u64).collect());
    assert_clean_log(&t, N as u64);
    let mut got = ids(&t.read());
    got.sort_unstable();
    assert_eq!(got, (0..N).flat_map(|i| i * 1000..i * 1000 + 200).collect::<Vec<_>>());
}

/// Race `jobs` (all reading the same version `read`) for version `read + 1`: exactly one wins,
/// every loser exits 3 naming the version and commits nothing. Returns the winner's index.
fn exactly_one_wins(t: &TempTable, jobs: Vec<(Vec<String>, Vec<u8>)>, read: u64) -> usize {
    let parts_before = t.part_files();
    let n = jobs.len();
    let ws = frozen_writers(jobs);
    let results = release_all(ws);
    let target = read + 1;
    let mut winners = vec![];
    for (i, (st, out, err)) in results.iter().enumerate() {
        match st.code() {
            Some(0) => {
                assert_eq!(version_in(out), target, "{out}");
                winners.push(i);
            }
            Some(3) => {
                assert!(err.contains("concurrent write"), "loser {i}: {err}");
                assert!(
                    err.contains(&format!("version {target} was committed")),
                    "loser {i}: {err}"
                );
                assert!(err.contains("nothing was committed"), "loser {i}: {err}");
                assert_eq!(
                    freezes(err),
                    1,
                    "a loser of a read-dependent write must not retry: {err}"
                );
                assert!(out.is_empty(), "{out}");
            }
            other => panic!("writer {i} exited {other:?}: {err}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one of {n} must win: {results:?}");
    assert_clean_log(t, target);
    // No half state: losers left no data file; at most the winner added one.
    let parts_after = t.part_files();
    assert!(parts_after.is_superset(&parts_before));
    assert!(parts_after.len() <= parts_before.len() + 1, "losers left data files");
    let referenced = t.referenced();
    assert!(
        parts_after.iter().all(|p| referenced.contains(p)),
        "an unreferenced data file is left"
    );
    winners[0]
}

#[test]
fn racing_overwrites_exactly_one_wins() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 10));
    let v1 = t.read();
    let inputs: Vec<Vec<u8>> = (1..=4).map(|i| small_rows(i * 100, i)).collect();
    let jobs = inputs
        .iter()
        .map(|inp| (t.args("overwrite", &[]), inp.clone()))
        .collect();
    let w = exactly_one_wins(&t, jobs, 1);
    assert_eq!(t.read(), inputs[w], "the winner's rows are the table");
    assert_eq!(t.read_v(1), v1);
}

#[test]
fn racing_restores_exactly_one_wins() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 3)); // 1
    t.append(&small_rows(3, 3)); // 2
    t.overwrite(&small_rows(50, 2)); // 3
    let reads = t.all_reads();
    let targets = [1u64, 2, 0, 1];
    let jobs = targets
        .iter()
        .map(|k| (t.args("restore", &["--version", &k.to_string()]), vec![]))
        .collect();
    let w = exactly_one_wins(&t, jobs, 3);
    assert_eq!(t.read(), reads[targets[w] as usize]);
    assert_eq!(t.all_reads()[..4], reads[..]);
}

#[test]
fn an_overwrite_and_a_restore_racing_exactly_one_wins() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 3)); // 1
    t.append(&small_rows(3, 3)); // 2
    let reads = t.all_reads();
    let new = small_rows(70, 4);
    let jobs = vec![
        (t.args("restore", &["--version", "1"]), vec![]),
        (t.args("overwrite", &[]), new.clone()),
    ];
    let w = exactly_one_wins(&t, jobs, 2);
    assert_eq!(t.read(), if w == 0 { reads[1].clone() } else { new });
}

#[test]
fn two_expect_version_appends_race_for_the_same_version() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 1));
    let jobs = vec![
        (t.args("append", &["--expect-version", "1"]), small_rows(10, 2)),
        (t.args("append", &["--expect-version", "1"]), small_rows(20, 2)),
    ];
    let w = exactly_one_wins(&t, jobs, 1);
    assert_eq!(
        ids(&t.read()),
        [vec![0], vec![10 + 10 * w as i64, 11 + 10 * w as i64]].concat()
    );
}

#[test]
fn an_overwrite_keeps_an_append_that_lands_after_its_read() {
    // WriteSerializable (docs/FORMAT.md "Concurrency"): the blind append is serialized before the
    // overwrite, which rebases and removes only the files it read.
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 5)); // 1
    for fp in ["data-written", "before-link"] {
        let latest = t.latest();
        let mut ow = Writer::spawn(&t.args("overwrite", &[]), &format!("{fp}=freeze"), &small_rows(900, 3));
        ow.wait_frozen(fp);
        // The append lands while the overwrite is frozen (it read `latest`).
        let appended = 100 + latest as i64 * 10;
        let v = t.append(&small_rows(appended, 2));
        assert_eq!(v, latest + 1);
        // release_all resumes it again when it freezes once more on its rebased publish.
        let results = release_all(vec![ow]);
        let (st, out, err) = &results[0];
        assert!(st.success(), "{fp}: {out} {err}");
        assert_eq!(version_in(out), v + 1, "{fp}: {out}");
        assert_clean_log(&t, v + 1);
        let ci = t.commit(v + 1)[0]["commitInfo"].clone();
        assert_eq!(ci["readVersion"].as_u64(), Some(latest), "{fp}");
        assert_eq!(ci["isolationLevel"], "WriteSerializable");
        assert_eq!(
            ids(&t.read()),
            vec![appended, appended + 1, 900, 901, 902],
            "{fp}: the appended rows were lost"
        );
        let referenced = t.referenced();
        assert!(
            t.part_files().iter().all(|p| referenced.contains(p)),
            "{fp}: a file left"
        );
    }
}

#[test]
fn a_restore_keeps_an_append_and_conflicts_with_an_overwrite_that_lands_after_its_read() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 2)); // 1
    t.overwrite(&small_rows(50, 2)); // 2: the mistake
    let mut rs = Writer::spawn(&t.args("restore", &["--version", "1"]), "before-link=freeze", &[]);
    rs.wait_frozen("before-link");
    assert_eq!(t.append(&small_rows(70, 1)), 3);
    let results = release_all(vec![rs]);
    let (st, out, err) = &results[0];
    assert!(st.success(), "{out} {err}");
    assert_eq!(version_in(out), 4);
    assert_eq!(ids(&t.read()), vec![70, 0, 1], "the restore lost the append");

    let mut rs = Writer::spawn(&t.args("restore", &["--version", "2"]), "before-link=freeze", &[]);
    rs.wait_frozen("before-link");
    assert_eq!(t.overwrite(&small_rows(80, 1)), 5);
    let results = release_all(vec![rs]);
    let (st, _, err) = &results[0];
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("version 5 was committed"), "{err}");
    assert_eq!(ids(&t.read()), vec![80]);
    // --expect-version stays strict: any commit after N is a conflict.
    t.append(&small_rows(90, 1)); // 6
    t.td("restore", &["--version", "1", "--expect-version", "5"]).code(3);
    t.td("overwrite", &["--expect-version", "5"]).code(3);
    assert_eq!(t.latest(), 6);
}

#[test]
fn an_append_rebases_over_an_overwrite_that_lands_first() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 5)); // 1
    let mut ap = Writer::spawn(&t.args("append", &[]), "before-link=freeze", &small_rows(500, 2));
    ap.wait_frozen("before-link");
    assert_eq!(t.overwrite(&small_rows(300, 3)), 2);
    let results = release_all(vec![ap]);
    let (st, out, err) = &results[0];
    assert!(st.success(), "{err}");
    assert_eq!(version_in(out), 3, "the append rebased onto version 3");
    assert_eq!(freezes(err), 2);
    assert_clean_log(&t, 3);
    assert_eq!(ids(&t.read()), vec![300, 301, 302, 500, 501]);
    assert_eq!(ids(&t.read_v(2)), vec![300, 301, 302]);
}

#[test]
fn an_append_does_not_rebase_over_a_schema_change() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 1)); // 1
    let parts = t.part_files();
    let mut ap = Writer::spawn(&t.args("append", &[]), "before-link=freeze", &small_rows(10, 1));
    ap.wait_frozen("before-link");
    // Another writer changes the table's metadata at version 2 (crafted: the CLI has no ALTER).
    let md = t.commit(0).into_iter().find(|a| a.get("metaData").is_some()).unwrap();
    let mut ci = t.commit(1)[0].clone();
    ci["commitInfo"]["timestamp"] = serde_json::json!(ci["commitInfo"]["timestamp"].as_i64().unwrap() + 1);
    ci["commitInfo"]["operation"] = serde_json::json!("SET TBLPROPERTIES");
    t.write_commit(2, &[ci, md]);
    ap.resume();
    let (st, _, err) = ap.finish();
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("version 2 was committed"), "{err}");
    assert_eq!(t.log_versions(), vec![0, 1, 2]);
    assert_eq!(t.part_files(), parts, "the refused append left its data file");
    assert!(t.tmp_files().is_empty());
}

#[test]
fn free_running_appends_and_overwrites() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 10)); // 1
    let mut ws = vec![];
    let mut inputs = vec![];
    for i in 0..8i64 {
        let (cmd, rows) = if i % 4 == 3 {
            ("overwrite", small_rows(10_000 * (i + 1), 5))
        } else {
            ("append", small_rows(1000 * (i + 1), 20))
        };
        ws.push(Writer::spawn(&t.args(cmd, &[]), "", &rows));
        inputs.push((cmd, rows));
    }
    let results: Vec<_> = ws.into_iter().map(Writer::finish).collect();
    let mut committed: Vec<(u64, &str, &Vec<u8>)> = vec![];
    for ((st, out, err), (cmd, rows)) in results.iter().zip(&inputs) {
        match (st.code(), *cmd) {
            (Some(0), _) => committed.push((version_in(out), cmd, rows)),
            (Some(3), "overwrite") => assert!(err.contains("concurrent write"), "{err}"),
            other => panic!("{other:?}: {err}"),
        }
    }
    // Appends never lose (blind appends rebase over overwrites).
    assert_eq!(committed.iter().filter(|c| c.1 == "append").count(), 6);
    committed.sort();
    let n = 1 + committed.len() as u64;
    assert_clean_log(&t, n);
    // Replay what the winners did, in version order: the table must agree. An overwrite that
    // read version R keeps the appends committed after R (WriteSerializable), before its rows.
    let mut expected = small_rows(0, 10);
    for (v, cmd, rows) in &committed {
        if *cmd == "overwrite" {
            let r = t.commit(*v)[0]["commitInfo"]["readVersion"].as_u64().unwrap();
            expected = committed
                .iter()
                .filter(|(w, c, _)| *c == "append" && *w > r && w < v)
                .flat_map(|(_, _, rows)| rows.iter().copied())
                .collect();
            expected.extend_from_slice(rows);
        } else {
            expected.extend_from_slice(rows);
        }
        assert_eq!(t.read_v(*v), expected, "version {v} ({cmd})");
    }
    let referenced = t.referenced();
    assert!(
        t.part_files().iter().all(|p| referenced.contains(p)),
        "losers left data files"
    );
}

#[test]
fn optimize_rebases_over_an_append_and_conflicts_with_an_overwrite_that_removed_its_inputs() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 2)); // 1
    t.append(&small_rows(10, 2)); // 2
    // Two appends land while optimize is frozen before its publish: optimize rebases, re-adding
    // the appended files after the compacted one, so the OPTIMIZE version (dataChange false)
    // reads exactly like the version before it (docs/FORMAT.md "Optimize").
    let mut op = Writer::spawn(&t.args("optimize", &[]), "before-link=freeze", &[]);
    op.wait_frozen("before-link");
    assert_eq!(t.append(&small_rows(500, 1)), 3);
    assert_eq!(t.append(&small_rows(900, 1)), 4);
    let results = release_all(vec![op]);
    let (st, out, err) = &results[0];
    assert!(st.success(), "{out} {err}");
    assert!(out.contains("as version 5") && out.contains("3 files live"), "{out}");
    assert_eq!(ids(&t.read()), vec![0, 1, 10, 11, 500, 900]);
    assert_eq!(
        t.read_v(5),
        t.read_v(4),
        "the OPTIMIZE version reads like the one before it"
    );
    assert_eq!(t.describe()["numFiles"], 3);
    assert_clean_log(&t, 5);
    // Its adds: the compacted file, then the two appended files again, all dataChange false.
    let commit: Vec<serde_json::Value> = String::from_utf8(t.commit_bytes(5))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let adds: Vec<&serde_json::Value> = commit.iter().filter_map(|a| a.get("add")).collect();
    assert_eq!(adds.len(), 3, "{commit:?}");
    assert!(adds.iter().all(|a| a["dataChange"] == false), "{commit:?}");

    // An overwrite lands while optimize is frozen: its inputs were removed, exit 3, no file left.
    t.append(&small_rows(600, 1)); // 6
    let parts = t.part_files();
    let mut op = Writer::spawn(&t.args("optimize", &[]), "before-link=freeze", &[]);
    op.wait_frozen("before-link");
    assert_eq!(t.overwrite(&small_rows(700, 1)), 7);
    let results = release_all(vec![op]);
    let (st, _, err) = &results[0];
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("version 7 was committed"), "{err}");
    assert_eq!(ids(&t.read()), vec![700]);
    let added: BTreeSet<String> = t.part_files().difference(&parts).cloned().collect();
    assert_eq!(added.len(), 1, "the losing optimize left its file: {added:?}");
    assert_clean_log(&t, 7);
}

#[test]
fn racing_appends_with_one_txn_commit_exactly_once() {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 1)); // 1
    let parts = t.part_files();
    let jobs = (0..4)
        .map(|i| (t.args("append", &["--txn", "etl:7"]), small_rows(100 + i, 1)))
        .collect();
    let results = release_all(frozen_writers(jobs));
    let mut committed = 0;
    for (st, out, err) in &results {
        assert!(st.success(), "{out} {err}");
        if out.contains("as version") {
            committed += 1;
        } else {
            assert!(out.contains("already applied"), "{out}");
        }
    }
    assert_eq!(committed, 1, "{results:?}");
    assert_clean_log(&t, 2);
    assert_eq!(t.read().iter().filter(|b| **b == b'\n').count(), 2);
    assert_eq!(
        t.part_files().len(),
        parts.len() + 1,
        "a skipped writer left its data file"
    );
}

/// `append --file F --rejects R` with F rewritten between its two passes (frozen at the
/// `rejects-scanned` failpoint): the write fails saying the input changed, commits nothing and
/// leaves no rejects file, instead of skipping the first pass's bad byte ranges in other bytes.
#[test]
fn an_input_changed_between_the_rejects_passes_commits_nothing() {
    let t = TempTable::new(&["id:int!"]);
    let input = t.dir.path().join("in.jsonl");
    let rejects = t.dir.path().join("bad.jsonl");
    std::fs::write(&input, "{\"id\":1}\n{\"id\":\"x\"}\n{\"id\":3}\n").unwrap();
    let args: Vec<String> = vec![
        "append".into(),
        t.p(),
        "--file".into(),
        input.display().to_string(),
        "--rejects".into(),
        rejects.display().to_string(),
    ];
    let mut w = Writer::spawn(&args, "rejects-scanned=freeze", b"");
    w.wait_frozen("rejects-scanned");
    std::fs::write(&input, "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n{\"id\":4}\n").unwrap();
    w.resume();
    let (status, _, err) = w.finish();
    assert!(!status.success(), "{err}");
    assert!(err.contains("changed between the passes"), "{err}");
    assert_eq!(t.latest(), 0, "nothing committed");
    assert!(!rejects.try_exists().unwrap(), "rejects of a write that did not happen");
    // Unchanged input: the same command rejects one line and commits the rest.
    std::fs::write(&input, "{\"id\":1}\n{\"id\":\"x\"}\n{\"id\":3}\n").unwrap();
    t.td("append", &args[2..].iter().map(String::as_str).collect::<Vec<_>>())
        .ok();
    assert_eq!(t.latest(), 1);
    assert_eq!(t.read(), b"{\"id\":1}\n{\"id\":3}\n");
}

/// The properties that turn auto compaction on for `t`, with a threshold of `min` small files
/// (docs/FORMAT.md "Auto compaction").
fn auto_compact_on(t: &TempTable, min: usize) {
    let min = format!("tinydelta.autoCompact.minNumFiles={min}");
    t.td("alter", &["set-property", "delta.autoOptimize.autoCompact=true", &min])
        .ok();
}

/// An append's auto compaction that loses its race (frozen by the `optimize-written` failpoint,
/// its packed file written, while an overwrite removes its inputs): the append succeeds and
/// reports its own version, the compaction commits nothing, warns of nothing and leaves no
/// file, and a later append compacts.
#[test]
fn an_auto_compaction_that_loses_a_race_commits_nothing_and_the_append_succeeds() {
    let t = TempTable::new(SMALL);
    auto_compact_on(&t, 3); // 1
    t.append(&small_rows(0, 1)); // 2
    t.append(&small_rows(10, 1)); // 3
    assert_eq!(t.part_files().len(), 2, "compacted below the threshold");
    let parts = t.part_files();
    let mut w = Writer::spawn(&t.args("append", &[]), "optimize-written=freeze", &small_rows(20, 1));
    w.wait_frozen("optimize-written");
    // The append is committed before its compaction starts; the packed file is written.
    assert_eq!(t.latest(), 4);
    assert_eq!(
        t.part_files().len(),
        parts.len() + 2,
        "the append's file and the packed one"
    );
    assert_eq!(t.overwrite(&small_rows(700, 1)), 5);
    w.resume();
    let (st, out, err) = w.finish();
    assert!(st.success(), "{st:?} {out} {err}");
    assert_eq!(version_in(&out), 4, "{out}");
    assert!(!err.contains("warning") && !err.contains("auto compaction"), "{err}");
    assert_clean_log(&t, 5);
    assert_eq!(ids(&t.read_v(4)), vec![0, 10, 20]);
    assert_eq!(ids(&t.read()), vec![700]);
    assert_eq!(
        t.part_files().len(),
        parts.len() + 2,
        "the losing compaction left its file"
    );
    // The next write that leaves three small files compacts them.
    t.append(&small_rows(30, 1)); // 6
    let out = t.td_in("append", &[], &small_rows(40, 1)).ok(); // 7, then OPTIMIZE 8
    assert_eq!(version_in(&out.text()), 7);
    assert!(
        out.stderr
            .contains("auto compaction packed 3 files into 1 file as version 8"),
        "{}",
        out.stderr
    );
    assert_clean_log(&t, 8);
    assert_eq!(t.read_v(8), t.read_v(7));
    assert_eq!(ids(&t.read()), vec![700, 30, 40]);
    assert_eq!(t.describe()["numFiles"], 1);
    t.td("check", &["--deep"]).ok();
}

/// Appends racing with each other's auto compactions (each process appends, then compacts):
/// every append succeeds with its rows once, each OPTIMIZE version reads exactly like the
/// version before it, the compactions that lost leave no file, and nobody warns.
#[test]
fn racing_appends_with_auto_compaction_keep_every_row_once_and_in_order() {
    const N: i64 = 6;
    let t = TempTable::new(SMALL);
    auto_compact_on(&t, 2); // 1
    let jobs = (0..N)
        .map(|i| (t.args("append", &[]), small_rows(i * 100, 3)))
        .collect();
    let results = release_all(frozen_writers(jobs));
    for (i, (st, out, err)) in results.iter().enumerate() {
        assert!(st.success(), "writer {i}: {st:?} {out} {err}");
        assert!(!err.contains("warning"), "writer {i}: {err}");
        let v = version_in(out);
        assert_eq!(t.commit(v)[0]["commitInfo"]["operation"], "WRITE", "writer {i}");
    }
    let latest = t.latest();
    assert_clean_log(&t, latest);
    let mut optimizes = 0;
    for v in 2..=latest {
        if t.commit(v)[0]["commitInfo"]["operation"] == "OPTIMIZE" {
            optimizes += 1;
            assert_eq!(t.read_v(v), t.read_v(v - 1), "OPTIMIZE version {v} changed the rows");
        }
    }
    assert!(optimizes >= 1, "no compaction committed");
    assert_eq!(latest, 1 + N as u64 + optimizes);
    let mut got = ids(&t.read());
    got.sort_unstable();
    let mut want: Vec<i64> = (0..N).flat_map(|i| i * 100..i * 100 + 3).collect();
    want.sort_unstable();
    assert_eq!(got, want, "every row exactly once");
    let referenced = t.referenced();
    assert!(
        t.part_files().iter().all(|p| referenced.contains(p)),
        "a losing compaction left a data file"
    );
    t.td("check", &["--deep"]).ok();
}

/// An append whose snapshot is many versions behind (frozen after reading it while 20 others
/// commit) retries at the newest version after its first lost race: it tries to link a commit
/// twice (`linkat`, counted by strace), not once per version it is behind, and lands after the
/// others with every row once.
#[test]
fn a_lagging_append_retries_at_the_newest_version_not_one_version_per_attempt() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 1)); // 1
    let trace = t.dir.path().join("strace.out");
    let mut c = Command::new("strace");
    c.args(["-f", "-qq", "-e", "trace=linkat,link", "-o"])
        .arg(&trace)
        .arg(BIN)
        .args(t.args("append", &[]))
        .env("TINYDELTA_FAILPOINT", "data-written=freeze")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn strace (the test needs strace)");
    child.stdin.take().unwrap().write_all(&small_rows(100, 1)).unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let pid: i32 = loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "the append exited before freezing"
        );
        if let Some(p) = line.trim_end().strip_prefix("failpoint data-written: frozen pid ") {
            break p.parse().unwrap();
        }
    };
    wait_stopped(pid as u32, "data-written");
    for i in 0..20 {
        t.append(&small_rows(1 + i, 1)); // 2..=21
    }
    signal(pid as u32, libc::SIGCONT);
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(status.success(), "{rest}");
    assert_eq!(t.latest(), 22, "{rest}");
    let links = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("link(") || l.contains("linkat("))
        .filter(|l| l.contains("_delta_log") || l.contains(".json"))
        .count();
    assert!(
        (1..=2).contains(&links),
        "{links} link attempts for an append 20 versions behind:\n{}",
        std::fs::read_to_string(&trace).unwrap()
    );
    let mut ids: Vec<i64> = lines(&t.read())
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, (0..=20).chain([100]).collect::<Vec<_>>());
    assert_clean_log(&t, 22);
}
