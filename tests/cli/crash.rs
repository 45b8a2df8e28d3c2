//! docs/FORMAT.md "How a write becomes visible": a reader never sees a commit half-written, and a
//! kill -9 at any step of a commit leaves a readable table with no partial version, whose leftovers
//! vacuum then removes. Writers are separate `tinydelta` processes stopped or killed by the
//! `TINYDELTA_FAILPOINT` failpoints.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;

use crate::support::*;

const STEPS: [&str; 4] = ["data-written", "commit-half-written", "before-link", "after-link"];

/// A table with versions 0 (create), 1 and 2 (appends).
fn table() -> TempTable {
    let t = TempTable::new(SMALL);
    t.append(&small_rows(0, 4));
    t.append(&small_rows(4, 3));
    t
}

/// A write that a test runs: CLI args after the table, stdin, and the rows version 3 must have
/// if it commits on top of `table()`.
struct Op {
    name: &'static str,
    rest: Vec<&'static str>,
    input: Vec<u8>,
    expected: Vec<u8>,
    /// Does it write a data file (and so hit `data-written`)?
    writes_data: bool,
}

fn ops(t: &TempTable) -> Vec<Op> {
    let v2 = t.read_v(2);
    let v1 = t.read_v(1);
    let new = small_rows(500, 6);
    // `append --file` of canonical rows copies the file and checks the copy (docs/BENCHMARKS.md
    // "What each figure measures", figure 6): its own way to the same steps.
    let file = t.dir.path().join("rows.jsonl");
    std::fs::write(&file, &new).unwrap();
    let file: &'static str = Box::leak(file.to_str().unwrap().to_string().into_boxed_str());
    vec![
        Op {
            name: "append",
            rest: vec![],
            input: new.clone(),
            expected: [v2.clone(), new.clone()].concat(),
            writes_data: true,
        },
        Op {
            name: "append",
            rest: vec!["--file", file],
            input: vec![],
            expected: [v2, new.clone()].concat(),
            writes_data: true,
        },
        Op {
            name: "overwrite",
            rest: vec![],
            input: new.clone(),
            expected: new,
            writes_data: true,
        },
        Op {
            name: "restore",
            rest: vec!["--version", "1"],
            input: vec![],
            expected: v1,
            writes_data: false,
        },
    ]
}

/// What a reader observes of the latest version, through every read-only command.
fn observe(t: &TempTable) -> (Vec<u8>, String, String, String) {
    (
        t.read(),
        t.td("describe", &["--json"]).ok().text(),
        t.td("describe", &[]).ok().text(),
        t.td("history", &["--json"]).ok().text(),
    )
}

#[test]
fn readers_never_see_a_commit_in_progress() {
    let probe = table();
    for op in ops(&probe) {
        for step in ["data-written", "commit-half-written", "before-link"] {
            if step == "data-written" && !op.writes_data {
                continue;
            }
            let what = format!("{} {:?} frozen at {step}", op.name, op.rest);
            let t = table();
            let before = observe(&t);
            let reads = t.all_reads();
            let parts = t.part_files();

            let mut w = Writer::spawn(&t.args(op.name, &op.rest), &format!("{step}=freeze"), &op.input);
            w.wait_frozen(step);

            // While the writer is stopped, every reader sees version 2 and its bytes.
            assert_eq!(observe(&t), before, "{what}: a reader saw the commit in progress");
            assert_eq!(t.all_reads(), reads, "{what}");
            assert_eq!(t.log_versions(), vec![0, 1, 2], "{what}");
            t.td("read", &["--version", "3"]).code(4);
            t.td("describe", &["--version", "3"]).code(4);
            // The in-flight bytes exist on disk but are not a version.
            let new_parts: BTreeSet<String> = t.part_files().difference(&parts).cloned().collect();
            assert_eq!(new_parts.len(), usize::from(op.writes_data), "{what}: {new_parts:?}");
            let tmps = t.tmp_files();
            let tmp_bytes = match step {
                "data-written" => {
                    assert!(tmps.is_empty(), "{what}: {tmps:?}");
                    None
                }
                _ => {
                    assert_eq!(tmps.len(), 1, "{what}: {tmps:?}");
                    assert!(tmps[0].starts_with(&format!(".{:020}.", 3)), "{what}: {tmps:?}");
                    Some(std::fs::read(t.log_dir().join(&tmps[0])).unwrap())
                }
            };
            // A vacuum with the default retention leaves an in-flight writer's files alone.
            let out = t.td("vacuum", &[]).ok();
            assert!(out.text().contains("deleted 0 files"), "{what}: {}", out.text());

            w.resume();
            let (st, out, err) = w.finish();
            assert!(st.success(), "{what}: {err}");
            assert_eq!(version_in(&out), 3, "{what}");
            assert_eq!(t.read(), op.expected, "{what}: the commit did not complete");
            assert_eq!(t.all_reads()[..3], reads[..], "{what}: an old version changed");
            let published = t.commit_bytes(3);
            match (step, tmp_bytes) {
                ("commit-half-written", Some(half)) => {
                    assert!(!half.is_empty() && half.len() < published.len(), "{what}: not half");
                    assert!(published.starts_with(&half), "{what}");
                }
                ("before-link", Some(full)) => assert_eq!(full, published, "{what}: the link changed bytes"),
                _ => {}
            }
            assert!(t.tmp_files().is_empty(), "{what}: tmp left after success");
            let referenced = t.referenced();
            assert!(t.part_files().iter().all(|p| referenced.contains(p)), "{what}");
        }
    }
}

#[test]
fn kill_9_at_every_step_leaves_no_partial_version_and_vacuum_cleans_up() {
    let probe = table();
    for op in ops(&probe) {
        for step in STEPS {
            if step == "data-written" && !op.writes_data {
                continue;
            }
            let what = format!("{} {:?} killed at {step}", op.name, op.rest);
            let t = table();
            let reads = t.all_reads();
            let parts = t.part_files();

            let w = Writer::spawn(&t.args(op.name, &op.rest), &format!("{step}=kill"), &op.input);
            let (st, out, err) = w.finish();
            assert_eq!(st.signal(), Some(libc::SIGKILL), "{what}: {st:?} {out} {err}");

            // The table is readable, and has either nothing or everything of the commit.
            let published = step == "after-link";
            let latest = if published { 3 } else { 2 };
            assert_eq!(t.log_versions(), (0..=latest).collect::<Vec<_>>(), "{what}");
            assert_eq!(t.latest(), latest, "{what}");
            assert_eq!(t.all_reads()[..3], reads[..], "{what}: an old version changed");
            if published {
                assert_eq!(t.read(), op.expected, "{what}: the published version is incomplete");
            }
            t.td("history", &[]).ok();

            // Leftovers: the data file unless published, the commit temporary after data-written.
            let new_parts: BTreeSet<String> = t.part_files().difference(&parts).cloned().collect();
            let referenced = t.referenced();
            let orphans: Vec<&String> = new_parts.iter().filter(|p| !referenced.contains(*p)).collect();
            let want_orphans = usize::from(op.writes_data && !published);
            assert_eq!(orphans.len(), want_orphans, "{what}: orphans {orphans:?}");
            let tmps = t.tmp_files();
            let want_tmps = usize::from(step != "data-written");
            assert_eq!(tmps.len(), want_tmps, "{what}: {tmps:?}");

            // Vacuum removes every leftover and nothing else; every version stays readable.
            let all = t.all_reads();
            let out = t.td("vacuum", &["--older-than", "0s"]).ok().text();
            assert!(
                out.contains(&match want_orphans + want_tmps {
                    1 => "deleted 1 file (".to_string(),
                    n => format!("deleted {n} files"),
                }),
                "{what}: {out}"
            );
            assert!(t.tmp_files().is_empty(), "{what}");
            let referenced = t.referenced();
            assert_eq!(
                t.part_files(),
                referenced,
                "{what}: vacuum left an orphan or took a live file"
            );
            assert_eq!(t.all_reads(), all, "{what}: vacuum changed a version");

            // And the table takes the next write.
            let next = t.append(&small_rows(900, 1));
            assert_eq!(next, latest + 1, "{what}");
            assert_eq!(t.read(), [all[latest as usize].clone(), small_rows(900, 1)].concat());
        }
    }
}

#[test]
fn an_io_error_at_any_step_commits_nothing_or_everything_and_leaves_no_garbage() {
    let probe = table();
    for op in ops(&probe) {
        for step in STEPS {
            if step == "data-written" && !op.writes_data {
                continue;
            }
            let what = format!("{} {:?} failing at {step}", op.name, op.rest);
            let t = table();
            let reads = t.all_reads();
            let parts = t.part_files();
            let w = Writer::spawn(&t.args(op.name, &op.rest), &format!("{step}=error"), &op.input);
            let (st, out, err) = w.finish();
            let latest = t.latest();
            assert!(latest == 2 || latest == 3, "{what}");
            assert_eq!(t.all_reads()[..3], reads[..], "{what}");
            if latest == 2 {
                // Nothing was committed: the CLI must say so with exit 1, and clean up.
                assert_eq!(st.code(), Some(1), "{what}: {out} {err}");
                assert!(err.contains("injected failure"), "{what}: {err}");
                assert_eq!(t.part_files(), parts, "{what}: a data file was left behind");
                assert!(t.tmp_files().is_empty(), "{what}: {:?}", t.tmp_files());
            } else {
                // The version was published but its fsync failed: not success. The CLI exits 1
                // saying version 3 was published but may not be durable, and keeps its data.
                assert_eq!(step, "after-link", "{what}: published despite failing before the link");
                assert_eq!(
                    st.code(),
                    Some(1),
                    "{what}: published, durability unknown, yet: {out} {err}"
                );
                assert!(
                    err.contains("version 3 was published but may not be durable") && err.contains("injected failure"),
                    "{what}: {err}"
                );
                assert_eq!(t.read(), op.expected, "{what}: the published version lost its data");
                assert!(t.tmp_files().is_empty(), "{what}: {:?}", t.tmp_files());
                let referenced = t.referenced();
                assert!(t.part_files().iter().all(|p| referenced.contains(p)), "{what}");
            }
        }
    }
}
