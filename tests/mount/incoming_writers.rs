//! Two processes writing one `incoming/` name in tight loops at the same time, on a real mount
//! (docs/MOUNT.md "Concurrent writers on one name" and docs/MOUNT.md "Re-saves"). Each writer is a
//! real Python process that opens the name, writes one to three rows, closes it, forty times, and
//! logs every row whose write and close returned 0. The table must then hold each such row exactly
//! once (an `O_TRUNC` writer's earlier saves may be replaced by its own later ones, docs/MOUNT.md
//! "Re-saves", so only its last save's rows must be there, and none of its rows twice), and nothing
//! may be left staged.
//!
//! Before this test, an appender racing a truncating writer lost rows its close had reported
//! saved (left in `_staging/`, or replaced as if they were the other process's re-save), and
//! two appenders slowed to one commit per 10 s.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::mount::*;

/// One writer: `writer.py PATH MODE TAG N LOG` opens PATH `N` times with `O_APPEND` (MODE
/// `append`) or `O_TRUNC` (MODE `trunc`), writes `1 + i % 3` rows tagged `TAG-i-j`, closes,
/// and logs `OK i ROW` for every row whose write and close returned 0 (`FAIL i ...` otherwise).
const WRITER: &str = r#"
import os, sys
path, mode, tag, n, log = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), open(sys.argv[5], "w")
flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "append" else os.O_TRUNC)
for i in range(n):
    rows = ['{"id":%d,"s":"%s-%d-%d"}\n' % (i * 10 + j, tag, i, j) for j in range(1 + i % 3)]
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        log.write("FAIL %d open %s\n" % (i, e))
        continue
    try:
        os.write(fd, "".join(rows).encode())
        wrote = True
    except OSError as e:
        wrote = False
        log.write("FAIL %d write %s\n" % (i, e))
    try:
        os.close(fd)
    except OSError as e:
        log.write("FAIL %d close %s\n" % (i, e))
        continue
    if wrote:
        for r in rows:
            log.write("OK %d %s" % (i, r))
"#;

/// Iterations per writer.
const N: u32 = 40;

/// A table `id:int!, s:str` with a mount point, mounted.
fn small_table() -> (Fixture, Mount) {
    let f = Fixture::empty(&["id:int!", "s:str"]);
    let m = f.mount();
    (f, m)
}

/// What one writer's log says: the rows whose write and close returned 0, by iteration, and
/// the failures.
struct Log {
    ok: BTreeMap<u32, Vec<String>>,
    failed: Vec<String>,
}

fn read_log(path: &Path) -> Log {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut log = Log {
        ok: BTreeMap::new(),
        failed: Vec::new(),
    };
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("OK"), Some(i), Some(row)) => {
                let v: serde_json::Value = serde_json::from_str(row).expect("a logged row");
                let s = v["s"].as_str().expect("s").to_string();
                log.ok.entry(i.parse().expect("iteration")).or_default().push(s);
            }
            _ => log.failed.push(line.to_string()),
        }
    }
    log
}

/// Run writers P (`O_APPEND`) and Q (`q_mode`: `append` or `trunc`) on `incoming/NAME` at the
/// same time; then check the table against what their logs say succeeded. How long the loops
/// took is printed, not checked (speed lives in scripts/bench).
fn race(f: &Fixture, m: &Mount, name: &str, q_mode: &str) {
    let py = python(&[]);
    let path = f.m(&format!("incoming/{name}"));
    let before: BTreeSet<String> = table_rows(f).into_keys().collect();
    let spawn = |mode: &str, tag: &str| {
        let log = f.dir.path().join(format!("{name}-{tag}.log"));
        let child = Command::new(&py)
            .args(["-c", WRITER])
            .arg(&path)
            .args([mode, &format!("{name}-{tag}"), &N.to_string()])
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {py}: {e}"));
        (child, log)
    };
    let start = std::time::Instant::now();
    let (mut p, p_log) = spawn("append", "P");
    let (mut q, q_log) = spawn(q_mode, "Q");
    let p_status = p.wait().expect("wait for P");
    let q_status = q.wait().expect("wait for Q");
    let took = start.elapsed();
    assert!(
        p_status.success() && q_status.success(),
        "writers: P {p_status}, Q {q_status}"
    );
    let (p_log, q_log) = (read_log(&p_log), read_log(&q_log));
    let context = format!("P O_APPEND and Q {q_mode} on incoming/{name}, {N} iterations each, {took:?}");
    assert!(
        p_log.failed.is_empty() && q_log.failed.is_empty(),
        "{context}: a writer saw an error: P {:?}, Q {:?}\n{}",
        p_log.failed,
        q_log.failed,
        m.log_text()
    );
    let rows = table_rows(f);
    // Nothing twice, and nothing but what the writers wrote.
    let twice: Vec<_> = rows.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{context}: rows committed more than once: {twice:?}");
    let written: BTreeSet<&String> = p_log.ok.values().chain(q_log.ok.values()).flatten().collect();
    let strange: Vec<_> = rows
        .keys()
        .filter(|r| !before.contains(*r) && !written.contains(r))
        .collect();
    assert!(
        strange.is_empty(),
        "{context}: rows nobody reported written: {strange:?}"
    );
    // Every row of every successful close of P; of Q, every row of its last save (and of all
    // of them when Q appends too).
    let must: Vec<&String> = match q_mode {
        "append" => written.iter().copied().collect(),
        _ => p_log
            .ok
            .values()
            .flatten()
            .chain(q_log.ok.values().next_back().into_iter().flatten())
            .collect(),
    };
    let missing: Vec<_> = must.into_iter().filter(|r| !rows.contains_key(*r)).collect();
    assert!(
        missing.is_empty(),
        "{context}: {} rows whose close returned 0 are not in the table: {missing:?}",
        missing.len()
    );
    // Nothing left staged or listed.
    let staged = || -> Vec<String> {
        std::fs::read_dir(f.table.join("_staging"))
            .expect("_staging/")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".data"))
            .collect()
    };
    assert!(staged().is_empty(), "{context}: left in _staging/: {:?}", staged());
    let listed: Vec<_> = std::fs::read_dir(f.m("incoming"))
        .expect("ls incoming/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(listed.is_empty(), "{context}: left in incoming/: {listed:?}");
    eprintln!("{context}: {} rows in the table", rows.len());
}

/// The table's rows (`s` of each, via `tinydelta read`), with how often each occurs.
fn table_rows(f: &Fixture) -> BTreeMap<String, usize> {
    let out = ok(TD_BIN, &["read", &f.t()]);
    let mut rows = BTreeMap::new();
    for l in lines(&out) {
        let v: serde_json::Value = serde_json::from_slice(l).expect("a table row");
        *rows.entry(v["s"].as_str().expect("s").to_string()).or_insert(0) += 1;
    }
    rows
}

/// An appender and a truncating writer on one name: each of the appender's rows whose close
/// returned 0 is in the table once, and so is the truncating writer's last save.
#[test]
fn an_appender_and_a_truncating_writer_on_one_name() {
    let (f, m) = small_table();
    for round in 0..2 {
        race(&f, &m, &format!("at{round}.jsonl"), "trunc");
    }
}

/// Two appenders on one name: every row of each is in the table exactly once.
#[test]
fn two_appenders_on_one_name() {
    let (f, m) = small_table();
    for round in 0..2 {
        race(&f, &m, &format!("aa{round}.jsonl"), "append");
    }
}
