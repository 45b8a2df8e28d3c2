//! A long commit never takes the threads that serve reads (docs/MOUNT.md "Reading"): with every
//! commit of the daemon held up by a failpoint for seconds, and more writers closing files than the
//! daemon has session threads, lookups, listings, opens and reads of the mount still answer at
//! once.

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::mount::*;

#[test]
fn reads_answer_while_commits_hang_in_their_fsyncs() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let log = f.dir.path().join("mount.log");
    // The failpoint only in the daemon's environment (not this process's: the CLI runs below
    // must not sleep).
    let out = Command::new(MOUNT_BIN)
        .args([&f.t(), &f.mnt.display().to_string(), "--threads", "2", "--log-file"])
        .arg(&log)
        .env("TINYDELTA_FAILPOINT", "before-link=sleep:2500")
        .stdin(Stdio::null())
        .output()
        .expect("run tinydelta-mount");
    assert!(
        out.status.success(),
        "tinydelta-mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _m = Mount {
        mnt: f.mnt.clone(),
        pid: daemon_pid(&f.table).expect("daemon pid"),
        log,
    };
    let expected = f.read_v(1);
    // Two writers: as many as the daemon's session threads; each close is a commit that now
    // sleeps 2.5 s between its fsyncs and its link.
    let src = fixture_bytes("flights-feb.jsonl");
    let writers: Vec<_> = (0..2)
        .map(|i| {
            let path = f.dir.path().join(format!("w{i}.jsonl"));
            fs::write(&path, &src).unwrap();
            Command::new("cp")
                .arg(&path)
                .arg(f.m(&format!("incoming/w{i}.jsonl")))
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Let both closes reach their commits.
    std::thread::sleep(Duration::from_millis(700));
    let start = Instant::now();
    let mut versions: Vec<String> = fs::read_dir(f.m("v"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    versions.sort();
    let got = fs::read(f.m("v/1/data.jsonl")).unwrap();
    let commit = fs::read(f.m("v/0/commit.json")).unwrap();
    let took = start.elapsed();
    assert_eq!(got, expected, "v/1/data.jsonl read through the mount");
    assert!(!commit.is_empty());
    assert!(
        versions.starts_with(&["0".to_string(), "1".to_string()]),
        "{versions:?}"
    );
    // Both commits are still sleeping (2.5 s each, started >= 0.7 s ago): the reads did not
    // wait for them.
    assert!(
        took < Duration::from_millis(1200),
        "reads took {took:?} while two commits were in progress"
    );
    for w in writers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success(), "cp: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(f.latest(), 3, "both files committed");
}
