//! The CLI's messages next to a mount's (docs/CLI.md "Usage" and docs/CLI.md "Errors that teach"):
//! the `incoming/` note lists the same bad lines as `tinydelta append`, a second mount of a table
//! names the first one's mount point, and a mount right after an unmount waits for the exiting
//! daemon. The CLI-only half of these tests is `tests/cli/cli.rs`.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::mount::{self, Fixture, TD_BIN};

/// `incoming/NAME.error` lists the same lines (and hints) as `tinydelta append` does.
#[test]
fn incoming_note_lists_the_same_bad_lines() {
    let f = Fixture::flights(&[]);
    let _m = f.mount();
    let good = "{\"year\":2013,\"month\":1,\"day\":1}\n";
    let input = format!(
        "{good}{{\"year\":\"2013\",\"month\":1,\"day\":1}}\n{good}{{\"year\":2013,\"month\":1,\"day\":1,\"distance\":NaN}}\n{{\"year\":2013}}\n{good}"
    );
    // The CLI, on a file named as the mount names it.
    let work = f.dir.path().join("work");
    fs::create_dir_all(work.join("incoming")).unwrap();
    fs::write(work.join("incoming/x.jsonl"), &input).unwrap();
    let out = Command::new(TD_BIN)
        .args(["append", &f.t(), "--file", "incoming/x.jsonl"])
        .current_dir(&work)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let cli: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| l.strip_prefix("tinydelta: ").unwrap().to_string())
        .collect();
    assert_eq!(cli.len(), 5, "{cli:?}");
    // The mount.
    let cp = Command::new("cp")
        .arg(work.join("incoming/x.jsonl"))
        .arg(f.m("incoming/x.jsonl"))
        .output()
        .unwrap();
    assert!(!cp.status.success(), "cp of a bad file must fail");
    let note = fs::read_to_string(f.m("incoming/x.jsonl.error")).unwrap();
    let note: Vec<&str> = note.lines().collect();
    assert_eq!(note, cli);
    assert_eq!(
        note[0],
        "incoming/x.jsonl: line 2, column \"year\": expected int, found string"
    );
    assert_eq!(note[3], "incoming/x.jsonl: 3 bad lines; nothing was committed");
    assert_eq!(f.latest(), 0);
    assert!(Path::new(&f.m("incoming/x.jsonl")).exists());
}

/// A second mount of a table names the first one's mount point, once, also with `-f`.
#[test]
fn already_mounted_names_the_other_mount_point_once() {
    let f = Fixture::flights(&[]);
    let _m = f.mount();
    let other = f.dir.path().join("mnt2");
    fs::create_dir(&other).unwrap();
    let table = fs::canonicalize(&f.table).unwrap();
    let first = fs::canonicalize(&f.mnt).unwrap();
    let want = format!(
        "tinydelta-mount: table {} is already mounted at {} by another tinydelta-mount (pid ",
        table.display(),
        first.display()
    );
    for extra in [&[][..], &["-f"]] {
        let out = Command::new(mount::MOUNT_BIN)
            .arg(&table)
            .arg(&other)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{extra:?}: printed once: {err}");
        assert!(lines[0].starts_with(&want), "{extra:?}: {err}");
        assert!(
            lines[0].ends_with(&format!(
                "a table can be mounted once (unmount it first: fusermount3 -u {})",
                first.display()
            )),
            "{err}"
        );
    }
}

/// A mount right after an unmount of the same table, while the old daemon is still exiting
/// (here held alive by a descriptor open across a lazy unmount), waits for it instead of
/// failing with "already mounted" (src/table/staging.rs, `RELOCK_WAIT`).
#[test]
fn a_mount_right_after_an_unmount_waits_for_the_exiting_daemon() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount();
    let held = fs::File::open(f.m("v/1/commit.json")).unwrap();
    let out = mount::run("fusermount3", &["-u", "-z", f.mnt.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "lazy unmount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(mount::alive(m.pid), "the old daemon serves the held descriptor");
    let table = fs::canonicalize(&f.table).unwrap();
    let second = Command::new(mount::MOUNT_BIN)
        .arg(&table)
        .arg(&f.mnt)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    drop(held);
    let out = second.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "second mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(mount::is_mounted(&f.mnt));
    assert!(fs::read_link(f.m("latest")).unwrap().ends_with("1"));
    let pid = mount::daemon_pid(&table).unwrap();
    assert_ne!(pid, m.pid, "the lock is the second daemon's");
    let out = mount::run("fusermount3", &["-u", f.mnt.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "unmount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(mount::wait_for(20, || !mount::alive(pid)));
}

/// `scripts/demo.sh` with its output redirected (a file, a pipe, CI's log) writes no terminal
/// escapes; it runs whole (with a `cargo` that does nothing: the binaries are built).
#[test]
fn demo_script_writes_no_escapes_into_redirected_output() {
    mount::require_fuse();
    let stub = tempfile::tempdir().unwrap();
    let cargo = stub.path().join("cargo");
    fs::write(&cargo, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let bin = Path::new(TD_BIN).parent().unwrap();
    let path = format!(
        "{}:{}:{}",
        stub.path().display(),
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo.sh"))
        .env("PATH", path)
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "demo.sh failed: {stdout}\n{stderr}");
    assert!(
        stdout.contains("demo.sh: OK") && stdout.contains("\n$ tinydelta history"),
        "{stdout}"
    );
    assert!(
        !out.stdout.contains(&0x1b) && !out.stderr.contains(&0x1b),
        "escapes in: {stdout:?}"
    );
}
