//! Editing the newest version's `data.jsonl` through the mount with real tools
//! (docs/MOUNT.md "Editing latest/data.jsonl"): `sed -i`, `perl -pi`, vim, `jq` + `mv`,
//! Python's `os.replace` and `open('w')`, `>>`, `truncate`; bad rows refused with their line;
//! older versions read-only; a conflicting concurrent change fails the close; and a model-based
//! test of random edits, appends, truncations and CLI changes.

use std::fs;
use std::io::Write;
use std::process::Output;

use proptest::prelude::*;
use serde_json::Value;

use crate::support::mount::*;

/// A table `id:int! s:str` with one file per append: ids 1-2, 3-4, 5-6 (versions 1-3).
struct Env {
    f: Fixture,
    m: Mount,
}

fn row(id: i64, s: &str) -> String {
    format!("{{\"id\":{id},\"s\":\"{s}\"}}")
}

fn setup() -> Env {
    setup_with(&[])
}

/// [`setup`], mounted with the `tinydelta-mount` flags `extra`.
fn setup_with(extra: &[&str]) -> Env {
    let f = Fixture::empty(&["id:int!", "s:str"]);
    for (a, b) in [(1, 2), (3, 4), (5, 6)] {
        let file = f.dir.path().join(format!("in{a}.jsonl"));
        fs::write(&file, format!("{}\n{}\n", row(a, "a"), row(b, "b"))).expect("write input");
        f.td(&["append", &f.t(), "--file", &file.display().to_string()]);
    }
    let m = f.mount_with(extra);
    Env { f, m }
}

impl Env {
    fn sh(&self, script: &str) -> Output {
        sh(self.f.dir.path(), script, &self.f.mnt, &self.f.table)
    }

    fn ok(&self, script: &str) {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "`{script}` failed ({}): {}\nlog:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            fs::read_to_string(&self.m.log).unwrap_or_default()
        );
    }

    /// The rows `tinydelta read` gives.
    fn rows(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.f.td(&["read", &self.f.t()]))
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The commit of version `v`: (operation, removed paths, added paths with dataChange).
    fn commit(&self, v: u64) -> (String, Vec<String>, Vec<(String, bool)>) {
        let text = fs::read_to_string(self.f.table.join(format!("_delta_log/{v:020}.json"))).expect("commit");
        let mut op = String::new();
        let (mut removes, mut adds) = (Vec::new(), Vec::new());
        for l in text.lines() {
            let a: Value = serde_json::from_str(l).expect("action");
            if let Some(ci) = a.get("commitInfo") {
                op = ci["operation"].as_str().unwrap_or_default().to_string();
            }
            if let Some(r) = a.get("remove") {
                removes.push(r["path"].as_str().unwrap_or_default().to_string());
            }
            if let Some(x) = a.get("add") {
                adds.push((
                    x["path"].as_str().unwrap_or_default().to_string(),
                    x["dataChange"].as_bool().unwrap_or(true),
                ));
            }
        }
        (op, removes, adds)
    }

    /// The paths added by version `v`.
    fn added(&self, v: u64) -> Vec<String> {
        self.commit(v).2.into_iter().map(|(p, _)| p).collect()
    }
}

#[test]
fn sed_i_deletes_one_row_rewriting_only_its_file() {
    let e = setup();
    let before = fs::read(e.f.m("v/3/data.jsonl")).expect("read v/3");
    e.ok(r#"sed -i '/"id":3,/d' "$M/latest/data.jsonl""#);
    assert_eq!(e.f.latest(), 4, "exactly one commit");
    let (op, removes, adds) = e.commit(4);
    assert_eq!(op, "DELETE");
    assert_eq!(removes, e.added(2), "only the file holding id 3 is removed");
    assert_eq!(adds.len(), 2, "its new copy and the later file re-added: {adds:?}");
    assert!(adds[0].1, "the rewritten file is a data change");
    assert_eq!(
        adds[1],
        (e.added(3)[0].clone(), false),
        "the later file is re-added in place"
    );
    assert_eq!(
        e.rows(),
        vec![row(1, "a"), row(2, "b"), row(4, "b"), row(5, "a"), row(6, "b")]
    );
    // What v/3 serves never changes.
    assert_eq!(fs::read(e.f.m("v/3/data.jsonl")).expect("read v/3"), before);
    assert_eq!(e.f.latest_link(), "v/4");
    // The change feed of the edit is the deleted row alone (its change data file), not the
    // rewritten file's other rows (docs/FORMAT.md "The change feed").
    let feed = e.f.td(&["changes", &e.f.t(), "--from-version", "4"]);
    let feed: Vec<serde_json::Value> = feed
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("a feed row"))
        .collect();
    assert_eq!(feed.len(), 1, "{feed:?}");
    assert_eq!(
        (feed[0]["_change_type"].as_str(), feed[0]["id"].as_i64()),
        (Some("delete"), Some(3))
    );
}

#[test]
fn echo_append_is_one_append() {
    let e = setup();
    let before = fs::read(e.f.m("v/3/data.jsonl")).expect("read v/3");
    e.ok(&format!("echo '{}' >> \"$M/latest/data.jsonl\"", row(7, "c")));
    assert_eq!(e.f.latest(), 4);
    let (op, removes, adds) = e.commit(4);
    assert_eq!((op.as_str(), removes.len(), adds.len()), ("WRITE", 0, 1));
    assert_eq!(e.rows().last(), Some(&row(7, "c")));
    assert_eq!(e.rows().len(), 7);
    assert_eq!(fs::read(e.f.m("v/3/data.jsonl")).expect("read v/3"), before);
    assert_eq!(
        fs::metadata(e.f.m("v/3/data.jsonl")).expect("stat").len(),
        before.len() as u64
    );
}

#[test]
fn tools_edit_latest() {
    let e = setup();
    // perl -pi: an update of one row in place.
    e.ok(r#"perl -pi -e 's/"id":4,"s":"b"/"id":4,"s":"B"/' "$M/latest/data.jsonl""#);
    assert_eq!(e.commit(4).0, "UPDATE");
    let feed = String::from_utf8(e.f.td(&["changes", &e.f.t(), "--from-version", "4"])).expect("utf-8");
    let kinds: Vec<&str> = feed
        .lines()
        .map(|l| {
            if l.contains("update_preimage") {
                "pre"
            } else if l.contains("update_postimage") {
                "post"
            } else {
                "other"
            }
        })
        .collect();
    assert_eq!(kinds, ["pre", "post"], "{feed}");
    assert_eq!(e.commit(4).1, e.added(2));
    assert_eq!(e.rows()[3], row(4, "B"));
    // vim, scripted: it writes data.jsonl in place (open without O_TRUNC, ftruncate, write,
    // fsync, close), with its swap file beside it.
    e.ok(r#"vim -u NONE -N -es -c 'g/"id":1,/d' -c wq "$M/latest/data.jsonl""#);
    assert_eq!(e.commit(5).0, "DELETE");
    assert_eq!(e.rows().len(), 5);
    // jq to a temporary in the folder, then mv onto data.jsonl.
    e.ok(r#"jq -c 'select(.id != 6)' "$M/latest/data.jsonl" > "$M/latest/tmp.jsonl" && mv "$M/latest/tmp.jsonl" "$M/latest/data.jsonl""#);
    assert_eq!(e.commit(6).0, "DELETE");
    assert_eq!(e.rows(), vec![row(2, "b"), row(3, "a"), row(4, "B"), row(5, "a")]);
    // Python: a temporary written and os.replace()d onto data.jsonl; a row inserted.
    e.ok(r#"python3 -c '
import os, sys, tempfile
p = os.path.realpath(os.environ["M"] + "/latest/data.jsonl")
rows = open(p).read().splitlines()
rows.insert(1, "{\"id\": 10, \"s\": \"new\"}")
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p))
with os.fdopen(fd, "w") as f:
    f.write("\n".join(rows) + "\n")
os.replace(tmp, p)'"#);
    assert_eq!(e.commit(7).0, "UPDATE");
    assert_eq!(e.rows()[1], row(10, "new"), "the row is stored canonical");
    // Python open('w'): a rewrite from offset 0 committed at its close.
    e.ok(&format!(
        r#"python3 -c 'open(__import__("os").environ["M"] + "/latest/data.jsonl", "w").write({:?})'"#,
        format!("{}\n{}\n", row(2, "b"), row(3, "a"))
    ));
    assert_eq!(e.rows(), vec![row(2, "b"), row(3, "a")]);
    // No scratch file is left behind.
    let left: Vec<String> = fs::read_dir(e.f.m("latest"))
        .expect("ls")
        .map(|d| d.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !left
            .iter()
            .any(|n| n.starts_with('.') || n.starts_with("sed") || n.starts_with("tmp")),
        "{left:?}"
    );
    // truncate -s 0: a DELETE of every row.
    e.ok(r#"truncate -s 0 "$M/latest/data.jsonl""#);
    let v = e.f.latest();
    assert_eq!(e.commit(v).0, "DELETE");
    assert!(e.rows().is_empty());
    // An open for writing that writes nothing commits nothing.
    e.ok(r#"python3 -c 'open(__import__("os").environ["M"] + "/latest/data.jsonl", "a").close()'"#);
    assert_eq!(e.f.latest(), v);
    let check = e.f.td(&["check", &e.f.t()]);
    assert!(
        String::from_utf8_lossy(&check).contains("whole"),
        "{}",
        String::from_utf8_lossy(&check)
    );
}

#[test]
fn a_bad_row_is_refused_with_its_line() {
    let e = setup();
    let out = e.sh(r#"sed -i 's/"id":5,/"id":"five",/' "$M/latest/data.jsonl""#);
    assert!(!out.status.success(), "sed must fail");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Invalid argument"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(e.f.latest(), 3, "nothing committed");
    let note = fs::read_to_string(e.f.m("v/3/data.jsonl.error")).expect("the note");
    assert!(note.contains("line 5") && note.contains("\"id\""), "{note}");
    // `>>` of a bad row: the write that completes it fails (the shell's close status is lost).
    let out = e.sh(r#"echo '{"id":"x"}' >> "$M/latest/data.jsonl""#);
    assert!(!out.status.success(), "the append must fail");
    assert_eq!(e.f.latest(), 3);
    // The note goes with rm.
    e.ok(r#"rm "$M/v/3/data.jsonl.error""#);
    assert!(!e.f.m("v/3/data.jsonl.error").exists());
}

#[test]
fn older_versions_are_read_only() {
    let e = setup();
    for script in [
        r#"echo '{"id":9}' >> "$M/v/2/data.jsonl""#,
        r#"touch "$M/v/2/x.jsonl""#,
        r#"sed -i '/"id":1,/d' "$M/v/2/data.jsonl""#,
        r#"truncate -s 0 "$M/v/1/data.jsonl""#,
    ] {
        let out = e.sh(script);
        assert!(!out.status.success(), "{script} must fail");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(e.f.latest(), 3);
    let meta = fs::metadata(e.f.m("v/2/data.jsonl")).expect("stat");
    assert!(meta.permissions().readonly());
}

/// Open latest/data.jsonl for writing in this process, let `between` run, then write `rows` and
/// close (the close is the commit point). Returns the close's result.
fn edit_around(e: &Env, rows: &str, between: impl FnOnce()) -> std::io::Result<()> {
    let path = e.f.m("latest/data.jsonl");
    let mut f = fs::OpenOptions::new().write(true).truncate(true).open(&path)?;
    between();
    f.write_all(rows.as_bytes())?;
    // close(2) through libc, to see its status (std ignores it).
    use std::os::fd::IntoRawFd;
    let fd = f.into_raw_fd();
    // SAFETY: fd is ours, closed once.
    match unsafe { libc::close(fd) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[test]
fn a_conflicting_cli_delete_fails_the_close() {
    let e = setup();
    let r = edit_around(&e, &format!("{}\n", row(1, "only")), || {
        e.f.td(&["delete", &e.f.t(), "--where", "id = 3"]);
    });
    let err = r.expect_err("the close must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EBUSY), "{err}");
    assert_eq!(e.f.latest(), 4, "only the CLI's delete");
    assert_eq!(
        e.rows(),
        vec![row(1, "a"), row(2, "b"), row(4, "b"), row(5, "a"), row(6, "b")]
    );
    let note = fs::read_to_string(e.f.m("v/3/data.jsonl.error")).expect("note");
    assert!(note.contains("version 3"), "{note}");
    // A concurrent blind append does not conflict: its rows stay after the edit's.
    let r = edit_around(&e, &format!("{}\n", row(1, "only")), || {
        let file = e.f.dir.path().join("more.jsonl");
        fs::write(&file, format!("{}\n", row(8, "appended"))).expect("write");
        e.f.td(&["append", &e.f.t(), "--file", &file.display().to_string()]);
    });
    r.expect("an append does not conflict");
    assert_eq!(e.rows(), vec![row(1, "only"), row(8, "appended")]);
    // An edit that only adds rows after the last one is an append (WRITE). On top of a
    // concurrent append it re-adds that append's file after its own rows (`dataChange: false`),
    // and the commit it wrote reads back: the CLI reads it and `check` finds it whole.
    let r = edit_around(
        &e,
        &format!("{}\n{}\n{}\n", row(1, "only"), row(8, "appended"), row(9, "added")),
        || {
            let file = e.f.dir.path().join("more2.jsonl");
            fs::write(&file, format!("{}\n", row(10, "appended"))).expect("write");
            e.f.td(&["append", &e.f.t(), "--file", &file.display().to_string()]);
        },
    );
    r.expect("an append does not conflict with an edit that only adds rows");
    let want = vec![row(1, "only"), row(8, "appended"), row(9, "added"), row(10, "appended")];
    assert_eq!(e.rows(), want);
    let read = String::from_utf8(e.f.td(&["read", &e.f.t()])).expect("utf-8");
    assert_eq!(read.lines().collect::<Vec<_>>(), want);
    e.f.td(&["check", &e.f.t()]);
}

/// One step of the model test.
#[derive(Debug, Clone)]
enum Step {
    /// Delete row i (mod len) through a rename onto data.jsonl.
    Delete(usize),
    /// Replace row i with a new row.
    Replace(usize, i64),
    /// Insert a new row before row i.
    Insert(usize, i64),
    /// `>>` of a new row.
    Append(i64),
    /// Open with O_TRUNC and write nothing: a DELETE of every row.
    Truncate,
    /// `tinydelta delete --where 'id = <row i's id>'` beside the mount.
    CliDelete(usize),
    /// `tinydelta append` beside the mount.
    CliAppend(i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0usize..20).prop_map(Step::Delete),
        3 => (0usize..20, 100i64..200).prop_map(|(i, n)| Step::Replace(i, n)),
        2 => (0usize..20, 200i64..300).prop_map(|(i, n)| Step::Insert(i, n)),
        2 => (300i64..400).prop_map(Step::Append),
        1 => Just(Step::Truncate),
        1 => (0usize..20).prop_map(Step::CliDelete),
        1 => (400i64..500).prop_map(Step::CliAppend),
    ]
}

/// Write `rows` to a temporary in the newest version's folder and rename it onto data.jsonl.
fn replace_with(e: &Env, rows: &[String]) {
    let dir = fs::canonicalize(e.f.m("latest")).expect("latest");
    let tmp = dir.join(".edit.tmp");
    let mut text = rows.join("\n");
    if !rows.is_empty() {
        text.push('\n');
    }
    fs::write(&tmp, text).expect("write the temporary");
    fs::rename(&tmp, dir.join("data.jsonl")).expect("rename onto data.jsonl");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, max_shrink_iters: 0, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn edits_match_a_model(steps in proptest::collection::vec(step(), 1..7)) {
        let e = setup();
        let mut model: Vec<String> = [(1, "a"), (2, "b"), (3, "a"), (4, "b"), (5, "a"), (6, "b")].iter().map(|(i, s)| row(*i, s)).collect();
        let mut version = 3u64;
        for s in steps {
            // (expected operation, or None when nothing is committed)
            let op: Option<&str> = match &s {
                Step::Delete(i) if !model.is_empty() => {
                    let mut rows = model.clone();
                    rows.remove(i % model.len());
                    replace_with(&e, &rows);
                    model = rows;
                    Some("DELETE")
                }
                Step::Replace(i, n) if !model.is_empty() => {
                    let mut rows = model.clone();
                    let k = i % model.len();
                    rows[k] = row(*n, "r");
                    replace_with(&e, &rows);
                    let same = rows == model;
                    model = rows;
                    (!same).then_some("UPDATE")
                }
                Step::Insert(i, n) => {
                    let mut rows = model.clone();
                    let k = i % (model.len() + 1);
                    rows.insert(k, row(*n, "i"));
                    replace_with(&e, &rows);
                    let tail = k == model.len();
                    model = rows;
                    Some(if tail { "WRITE" } else { "UPDATE" })
                }
                Step::Append(n) => {
                    let mut f = fs::OpenOptions::new().append(true).open(e.f.m("latest/data.jsonl")).expect("open >>");
                    f.write_all(format!("{}\n", row(*n, "ap")).as_bytes()).expect("append");
                    drop(f);
                    model.push(row(*n, "ap"));
                    Some("WRITE")
                }
                Step::Truncate => {
                    fs::OpenOptions::new().write(true).truncate(true).open(e.f.m("latest/data.jsonl")).expect("open O_TRUNC");
                    let had = !model.is_empty();
                    model.clear();
                    had.then_some("DELETE")
                }
                Step::CliDelete(i) if !model.is_empty() => {
                    let id: Value = serde_json::from_str(&model[i % model.len()]).expect("row");
                    let id = id["id"].as_i64().expect("id");
                    e.f.td(&["delete", &e.f.t(), "--where", &format!("id = {id}")]);
                    let before = model.len();
                    model.retain(|r| serde_json::from_str::<Value>(r).map(|v| v["id"].as_i64() != Some(id)).unwrap_or(true));
                    (model.len() != before).then_some("DELETE")
                }
                Step::CliAppend(n) => {
                    let file = e.f.dir.path().join("cli.jsonl");
                    fs::write(&file, format!("{}\n", row(*n, "cli"))).expect("write");
                    e.f.td(&["append", &e.f.t(), "--file", &file.display().to_string()]);
                    model.push(row(*n, "cli"));
                    Some("WRITE")
                }
                _ => None,
            };
            if let Some(op) = op {
                version += 1;
                prop_assert_eq!(e.commit(version).0, op, "step {:?}", s);
            }
            prop_assert_eq!(e.f.latest(), version, "step {:?}", s);
            prop_assert_eq!(e.rows(), model.clone(), "step {:?}", s);
            // Every version the mount serves is the CLI's.
            let served = fs::read(e.f.m("latest/data.jsonl")).expect("read latest");
            prop_assert_eq!(String::from_utf8_lossy(&served).lines().map(str::to_string).collect::<Vec<_>>(), model.clone());
        }
    }
}

/// Two separate opens of `data.jsonl` for writing in one process are two edits: the close of
/// the first, while the second is open, commits nothing and must not answer 0 (docs/MOUNT.md
/// "Limits"); the second's close commits its own edit.
#[test]
fn a_second_separate_open_makes_the_first_close_fail_not_lie() {
    let e = setup();
    e.ok(&format!(
        r#"python3 -c '
import os, errno
p = os.environ["M"] + "/latest/data.jsonl"
a = os.open(p, os.O_WRONLY | os.O_APPEND)
b = os.open(p, os.O_WRONLY | os.O_APPEND)
os.write(a, {:?}.encode() + b"\n")
try:
    os.close(a)
    raise SystemExit("the first close answered 0 but its edit is not committed")
except OSError as err:
    assert err.errno == errno.EINVAL, err
os.write(b, {:?}.encode() + b"\n")
os.close(b)
'"#,
        row(8, "x"),
        row(9, "y")
    ));
    assert_eq!(e.f.latest(), 4, "one commit: the second open's");
    let rows = e.rows();
    assert_eq!(rows.last(), Some(&row(9, "y")));
    assert!(!rows.contains(&row(8, "x")), "{rows:?}");
}

/// The base of an edit is the version the tool read, even when `latest` moved before it made
/// its temporary (docs/MOUNT.md "Editing latest/data.jsonl"): a blind append committed in
/// between stays, and a delete committed in between makes the rename fail with EBUSY instead
/// of bringing the deleted row back. A rewrite that only adds rows is checked the same way.
#[test]
fn an_edit_is_checked_against_the_version_its_tool_read() {
    let e = setup();
    let edit = |between: &str, tool: &str| {
        e.sh(&format!(
            r#"python3 -c '
import os, subprocess, sys
m = os.environ["M"]
d = open(m + "/latest/data.jsonl").read()
subprocess.run(["sh", "-c", sys.argv[1]], check=True)
d = d.replace("\"s\":\"a\"", "\"s\":\"E\"", 1) if sys.argv[2] == "rename" else d + "{}\n"
if sys.argv[2] == "rename":
    open(m + "/latest/tmp.jsonl", "w").write(d)
    os.rename(m + "/latest/tmp.jsonl", m + "/latest/data.jsonl")
else:
    with open(m + "/latest/data.jsonl", "w") as f:
        f.write(d)
' '{between}' '{tool}'"#,
            row(50, "z").replace('"', "\\\"")
        ))
    };
    let td = e.f.t();
    // A blind append in between: no conflict, its row stays, the edit applies.
    let out = edit(
        &format!("echo \"{}\" | {TD_BIN} append {td}", row(99, "c").replace('"', "\\\"")),
        "rename",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = e.rows();
    assert!(rows.contains(&row(99, "c")), "the appended row was lost: {rows:?}");
    assert_eq!(rows[0], row(1, "E"));
    // A delete in between: the rename fails, the deleted row does not come back.
    let out = edit(&format!("{TD_BIN} delete {td} --where \"id = 2\""), "rename");
    assert!(!out.status.success(), "the rename answered 0");
    assert!(!e.rows().contains(&row(2, "b")), "{:?}", e.rows());
    // A rewrite that only adds a row, racing a delete: refused too.
    let out = edit(&format!("{TD_BIN} delete {td} --where \"id = 4\""), "rewrite");
    assert!(
        !out.status.success(),
        "the close answered 0; log: {}",
        fs::read_to_string(&e.m.log).unwrap_or_default()
    );
    let rows = e.rows();
    assert!(
        !rows.contains(&row(4, "b")) && !rows.contains(&row(50, "z")),
        "{rows:?}"
    );
}

/// The names in every version folder that are not a version's own (scratch files, notes).
fn scratch_names(e: &Env) -> Vec<String> {
    let mut left = Vec::new();
    for v in 0..=e.f.latest() {
        let dir = e.f.m(&format!("v/{v}"));
        for d in fs::read_dir(&dir).expect("ls v/N") {
            let name = d.expect("entry").file_name().to_string_lossy().into_owned();
            if !["data.jsonl", "commit.json", "schema.json", "parts"].contains(&name.as_str()) {
                left.push(format!("v/{v}/{name}"));
            }
        }
    }
    left
}

/// A tool's temporary made in `latest/` is found through `latest/` after `latest` moved (a
/// commit landed between its create and its rename or unlink): the rename commits the edit on
/// top of the append that moved it, a rename that conflicts fails with EBUSY and the tool's
/// unlink of its temporary still works; nothing is left in any version folder (docs/MOUNT.md
/// "Editing latest/data.jsonl", "When latest moves during an edit").
#[test]
fn a_temporary_is_found_through_latest_after_latest_moved() {
    let e = setup();
    let edit = |between: &str, then: &str| {
        e.sh(&format!(
            r#"python3 -c '
import os, subprocess, sys
m = os.environ["M"]
d = open(m + "/latest/data.jsonl").read()
with open(m + "/latest/tmp.jsonl", "w") as f:
    f.write(d.replace("\"s\":\"a\"", "\"s\":\"E\"", 1))
subprocess.run(["sh", "-c", sys.argv[1]], check=True)
try:
    if sys.argv[2] == "rename":
        os.rename(m + "/latest/tmp.jsonl", m + "/latest/data.jsonl")
    else:
        os.unlink(m + "/latest/tmp.jsonl")
except OSError as err:
    os.unlink(m + "/latest/tmp.jsonl")
    sys.exit("failed: %s" % err)
' '{between}' '{then}'"#
        ))
    };
    let td = e.f.t();
    let append = |id: i64| format!("echo \"{}\" | {TD_BIN} append {td}", row(id, "c").replace('"', "\\\""));
    // The rename after an append: committed on top of it.
    let out = edit(&append(90), "rename");
    assert!(
        out.status.success(),
        "{}\nlog:\n{}",
        String::from_utf8_lossy(&out.stderr),
        e.m.log_text()
    );
    assert_eq!(e.f.latest(), 5, "the append, then the edit");
    assert_eq!(
        e.rows(),
        vec![
            row(1, "E"),
            row(2, "b"),
            row(3, "a"),
            row(4, "b"),
            row(5, "a"),
            row(6, "b"),
            row(90, "c")
        ]
    );
    assert_eq!(scratch_names(&e), Vec::<String>::new());
    // The unlink after an append: the temporary is gone.
    let out = edit(&append(91), "unlink");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(scratch_names(&e), Vec::<String>::new());
    // A delete in between conflicts: the rename fails with EBUSY, the deleted row stays
    // deleted, and the tool's cleanup through latest/ removes its temporary.
    let out = edit(&format!("{TD_BIN} delete {td} --where \"id = 2\""), "rename");
    assert!(!out.status.success(), "the rename answered 0");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Device or resource busy"), "{err}");
    assert!(!e.rows().contains(&row(2, "b")), "{:?}", e.rows());
    let left = scratch_names(&e);
    assert!(left.iter().all(|n| n.ends_with("/data.jsonl.error")), "{left:?}");
}

/// vim's swap file, made in `latest/` before vim's write commits, is removed by vim through
/// `latest/` after that commit moved `latest` (it was left in the older version's folder).
#[test]
fn vim_leaves_no_swap_file_behind() {
    let e = setup();
    e.ok(r#"vim -u NONE -N -es -c 'g/"id":3,/d' -c wq "$M/latest/data.jsonl""#);
    assert_eq!(e.f.latest(), 4);
    assert_eq!(e.commit(4).0, "DELETE");
    assert_eq!(scratch_names(&e), Vec::<String>::new());
    // And again: a second vim finds no stale swap file to stop at.
    e.ok(r#"vim -u NONE -N -es -c 'g/"id":4,/d' -c wq "$M/latest/data.jsonl""#);
    assert_eq!(e.f.latest(), 5);
    assert_eq!(scratch_names(&e), Vec::<String>::new());
    assert_eq!(e.rows(), vec![row(1, "a"), row(2, "b"), row(5, "a"), row(6, "b")]);
}

/// A process that read `latest/data.jsonl` while version n was the newest may still write
/// back through the folder it resolved (`v/<n>/`, as vim does) after a newer version landed:
/// an append is one more append, a rewrite is an edit of n under the conflict rules. A version
/// that was already older when the process read it stays read-only.
#[test]
fn a_process_writes_back_the_version_it_read_after_latest_moved() {
    let e = setup();
    let td = e.f.t();
    let between = format!("echo \"{}\" | {TD_BIN} append {td}", row(80, "c").replace('"', "\\\""));
    let out = e.sh(&format!(
        r#"python3 -c '
import os, subprocess, sys
m = os.environ["M"]
d = open(m + "/v/3/data.jsonl").read()
subprocess.run(["sh", "-c", sys.argv[1]], check=True)
with open(m + "/v/3/data.jsonl", "w") as f:
    f.write(d.replace("\"s\":\"b\"", "\"s\":\"W\"", 1))
with open(m + "/v/3/data.jsonl", "a") as f:
    f.write("{{\"id\":81,\"s\":\"p\"}}\n")
try:
    open(m + "/v/1/data.jsonl", "a")
    sys.exit("an older version opened for writing")
except OSError as err:
    assert err.errno == 30, err
' '{between}'"#
    ));
    assert!(
        out.status.success(),
        "{}\nlog:\n{}",
        String::from_utf8_lossy(&out.stderr),
        e.m.log_text()
    );
    assert_eq!(e.f.latest(), 6, "the CLI's append, the rewrite, the append");
    assert_eq!(
        e.rows(),
        vec![
            row(1, "a"),
            row(2, "W"),
            row(3, "a"),
            row(4, "b"),
            row(5, "a"),
            row(6, "b"),
            row(80, "c"),
            row(81, "p")
        ]
    );
    // A version older when read: read-only, as before.
    let out = e.sh(r#"sed -i 's/"s":"a"/"s":"Z"/' "$M/v/4/data.jsonl""#);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
    assert_eq!(e.f.latest(), 6);
}

/// `sed -i`, `perl -pi` and Python's `open(..., 'a')` on `latest/data.jsonl` while another
/// thread drops one-row files into `incoming/`: every tool run succeeds, every appended row
/// is in the table once, and no temporary is left in any version folder. (`latest` moves at
/// each append; the tools resolve it again between their open and their rename.)
#[test]
fn tools_edit_latest_while_appends_land() {
    // An auto compaction landing during an edit rewrites the files it read: a conflict (EBUSY),
    // not what this test is about.
    let e = setup_with(&["--auto-compact", "off"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let stop = stop.clone();
        let inc = e.f.m("incoming");
        std::thread::spawn(move || {
            let mut n = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 50 {
                n += 1;
                fs::write(inc.join(format!("a{n}.jsonl")), format!("{}\n", row(1000 + n, "i"))).expect("append");
            }
            n
        })
    };
    let mut failed = Vec::new();
    for k in 0..12 {
        let (from, to) = if k % 2 == 0 { ("a", "A") } else { ("A", "a") };
        for script in [
            format!(r#"sed -i 's/"id":1,"s":"{from}"/"id":1,"s":"{to}"/' "$M/latest/data.jsonl""#),
            format!(r#"perl -pi -e 's/"id":3,"s":"{from}"/"id":3,"s":"{to}"/' "$M/latest/data.jsonl""#),
            format!(
                r#"python3 -c 'open(__import__("os").environ["M"] + "/latest/data.jsonl", "a").write({:?})'"#,
                format!("{}\n", row(2000 + k, "p"))
            ),
        ] {
            let out = e.sh(&script);
            if !out.status.success() {
                failed.push(format!("{script}: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let appended = appender.join().expect("appender");
    assert!(failed.is_empty(), "{} tool runs failed: {failed:#?}", failed.len());
    assert_eq!(scratch_names(&e), Vec::<String>::new());
    let rows = e.rows();
    let ids: Vec<i64> = rows
        .iter()
        .map(|r| {
            serde_json::from_str::<Value>(r).expect("row")["id"]
                .as_i64()
                .expect("id")
        })
        .collect();
    let mut want: Vec<i64> = (1..=6)
        .chain((1..=appended).map(|n| 1000 + n))
        .chain(2000..2012)
        .collect();
    want.sort_unstable();
    let mut got = ids.clone();
    got.sort_unstable();
    assert_eq!(got, want, "every row once");
    assert!(rows.contains(&row(1, "a")) && rows.contains(&row(3, "a")), "{rows:?}");
}
