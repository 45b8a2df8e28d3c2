//! What a local attacker would try, reproduced on real mounts (docs/SECURITY.md "What holds"): a
//! second, unprivileged user who may read the mount (`-o allow_other`) or write the table folder.
//! Each test asserts the safe outcome.

use std::fs;

use crate::support::mount::*;
use crate::support::user::{self, open_to_others, test_user};

/// A flights table readable by others, mounted with `-o allow_other`.
fn shared_fixture(files: &[&str]) -> Fixture {
    let f = Fixture::flights(files);
    open_to_others(f.dir.path());
    f
}

#[test]
fn other_users_read_versions_but_cannot_write_anything() {
    let f = shared_fixture(&["flights-jan.jsonl"]);
    let m = f.mount_with(&["-o", "allow_other"]);
    let u = test_user();
    let data = f.m("v/1/data.jsonl");
    let out = u.run("cat", &[&data]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, fs::read(&data).unwrap());
    let out = u.sh("echo x > \"$M/v/1/data.jsonl\"", &[("M", f.mnt.as_os_str())]);
    assert!(!out.status.success(), "a reader wrote a version file");
    drop(m);
}

/// The table's data files (`part-*.jsonl` at its root), sorted.
fn data_files(table: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = fs::read_dir(table)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    v
}

/// A root-only file outside the table, as /etc/shadow would be.
fn root_secret(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("secret.txt");
    fs::write(&p, "root:SECRET-CONTENT").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// A data file replaced by a symlink to a root-only file is refused (EIO) to every reader of an
/// allow_other mount, both when the swap happened before the mount and after it (before the first
/// read); the secret never shows.
#[test]
fn data_file_symlinked_to_a_secret_is_never_served() {
    let f = shared_fixture(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let secret = root_secret(f.dir.path());
    let parts = data_files(&f.table);
    assert_eq!(parts.len(), 2);
    // Version 1's only part, swapped before the mount.
    let swap = |p: &std::path::Path| {
        fs::remove_file(p).unwrap();
        std::os::unix::fs::symlink(&secret, p).unwrap();
    };
    let v1_part = parts
        .iter()
        .find(|p| {
            let c = fs::read_to_string(f.table.join("_delta_log/00000000000000000001.json")).unwrap();
            c.contains(p.file_name().unwrap().to_str().unwrap())
        })
        .unwrap()
        .clone();
    swap(&v1_part);
    let m = f.mount_with(&["-o", "allow_other"]);
    // The other part, swapped after the mount.
    let other = parts.iter().find(|p| **p != v1_part).unwrap().clone();
    swap(&other);
    let u = test_user();
    for v in [1, 2] {
        let out = u.run(
            "head",
            &["-c", "5", &f.m(&format!("v/{v}/data.jsonl")).display().to_string()],
        );
        assert!(!out.status.success(), "v/{v}: head succeeded");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("root:"),
            "v/{v} served the secret"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Input/output error"),
            "v/{v}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Root, too, gets the error, never the secret.
        let got = fs::read(f.m(&format!("v/{v}/data.jsonl")));
        assert!(got.is_err(), "v/{v}: root read {:?}", got.map(|b| b.len()));
    }
    drop(m);
}

/// A table path with commas does not smuggle options into the mount: the source name the mount
/// shows has no comma, and the mount has no `allow_other`, `suid` or `dev`. (Root mounts with
/// mount(2), where the name is the source; fusermount3, used by other users, gets it in its `-o`
/// list, which is why it is sanitised: see `fs_name`'s unit test. The test user cannot mount here
/// because /dev/fuse is 0600.)
#[test]
fn comma_in_the_table_path_adds_no_mount_option() {
    require_fuse();
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("x,allow_other,suid,dev");
    fs::create_dir(&base).unwrap();
    let table = base.join("t,allow_other");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut args = vec!["create".to_string(), table.display().to_string()];
    args.extend(FLIGHTS.iter().map(|s| s.to_string()));
    ok(TD_BIN, &args);
    ok(MOUNT_BIN, &[table.display().to_string(), mnt.display().to_string()]);
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let canon = fs::canonicalize(&mnt).unwrap().display().to_string();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(canon.as_str()))
        .unwrap_or_else(|| panic!("{canon} not in mountinfo"))
        .to_string();
    let _ = run("fusermount3", &["-u", &canon]);
    let (_, after) = line.split_once(" - ").unwrap();
    let fields: Vec<&str> = after.split(' ').collect();
    // fstype, source, super options
    assert!(fields[0].starts_with("fuse"), "{line}");
    assert!(
        fields[1].starts_with("tinydelta:") && !fields[1].contains(','),
        "{line}"
    );
    let opts: Vec<&str> = line
        .split(' ')
        .nth(5)
        .unwrap()
        .split(',')
        .chain(fields[2].split(','))
        .collect();
    for bad in ["allow_other", "suid", "dev"] {
        assert!(!opts.contains(&bad), "{bad} in {line}");
    }
    assert!(opts.contains(&"nosuid") && opts.contains(&"nodev"), "{line}");
}

/// `--log-file` naming a symlink is refused; the file it points at is untouched.
#[test]
fn log_file_symlink_is_refused() {
    let f = Fixture::flights(&[]);
    let victim = root_secret(f.dir.path());
    let link = f.dir.path().join("mount.log");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = run(
        MOUNT_BIN,
        &[
            f.t(),
            f.mnt.display().to_string(),
            "--log-file".into(),
            link.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"));
    assert!(!is_mounted(&f.mnt));
    assert_eq!(fs::read_to_string(&victim).unwrap(), "root:SECRET-CONTENT");
}

/// `--log-file` naming a FIFO is refused at once, never waited on (the open does not block), and
/// a log file made in advance by another user (mode 0666), or writable by others, is refused
/// and stays empty: the daemon's log, which names staged files, never goes there
/// (docs/SECURITY.md "What holds").
#[test]
fn log_file_fifo_and_files_others_can_write_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::flights(&[]);
    let mount = |log: &std::path::Path| {
        // `timeout` only keeps a regression from hanging the suite.
        std::process::Command::new("timeout")
            .arg("60")
            .arg(MOUNT_BIN)
            .arg(f.t())
            .arg(&f.mnt)
            .arg("--log-file")
            .arg(log)
            .output()
            .unwrap()
    };
    let fifo = f.dir.path().join("fifo.log");
    let st = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let out = mount(&fifo);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    assert!(!is_mounted(&f.mnt));

    let u = test_user();
    let theirs = f.dir.path().join("theirs.log");
    fs::write(&theirs, "").unwrap();
    std::os::unix::fs::chown(&theirs, Some(u.uid), Some(u.gid)).unwrap();
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o666)).unwrap();
    let out = mount(&theirs);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("belongs to uid {}", u.uid)), "{err}");
    assert!(!is_mounted(&f.mnt));
    assert_eq!(
        fs::read_to_string(&theirs).unwrap(),
        "",
        "the log went into another user's file"
    );

    let open = f.dir.path().join("open.log");
    fs::write(&open, "").unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o666)).unwrap();
    let out = mount(&open);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read_to_string(&open).unwrap(), "");

    // The mounting user's own private file is used.
    fs::set_permissions(&open, fs::Permissions::from_mode(0o600)).unwrap();
    drop(f.mount_with(&[]));
}

/// A mount point that is the table, inside it, or holding it is refused (docs/MOUNT.md "Starting
/// and stopping").
#[test]
fn mount_point_overlapping_the_table_is_refused() {
    let f = Fixture::flights(&[]);
    fs::create_dir(f.table.join("inside")).unwrap();
    for (mp, words) in [
        (f.table.clone(), "is the table folder itself"),
        (f.table.join("inside"), "inside the table folder"),
        (f.dir.path().to_path_buf(), "contains the table folder"),
    ] {
        let out = run(MOUNT_BIN, &[f.t(), mp.display().to_string()]);
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(words),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!is_mounted(&mp));
    }
}

/// A data file name with a newline and a terminal escape, read from the log, is escaped in the
/// daemon's log line about it: no forged line, no raw escape byte.
#[test]
fn names_in_log_lines_are_escaped() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let c1 = f.table.join("_delta_log/00000000000000000001.json");
    let text = fs::read_to_string(&c1).unwrap();
    let part = data_files(&f.table)[0]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let evil = "evil\\n2099-01-01T000000Z INFO FORGED LINE\\u001b[31m.jsonl";
    fs::write(&c1, text.replace(&part, evil)).unwrap();
    let m = f.mount();
    assert!(fs::read(f.m("v/1/data.jsonl")).is_err());
    let log = m.log_text();
    assert!(!log.contains('\u{1b}'), "raw escape in the log:\n{log}");
    assert!(
        !log.lines().any(|l| l.starts_with("2099-01-01T000000Z INFO FORGED")),
        "{log}"
    );
    assert!(
        log.contains("FORGED LINE"),
        "the error about the file was not logged:\n{log}"
    );
    drop(m);
}

/// The daemon's open descriptors and resident memory (bytes), from /proc.
fn daemon_usage(pid: u32) -> (usize, u64) {
    let p = procfs::process::Process::new(pid as i32).expect("the daemon's /proc entry");
    let fds = p.fd_count().expect("the daemon's fd count");
    let rss = p.status().expect("the daemon's status").vmrss.expect("VmRSS") * 1024;
    (fds, rss)
}

/// Open `n` handles of `path` in a child process (as `user`, or as root), read a byte at the
/// start, middle and end of each through O_DIRECT (so every read reaches the daemon), then call
/// `measure` while they are all open.
fn hold_open<T>(
    user: Option<&user::User>,
    path: &std::path::Path,
    n: usize,
    dir: bool,
    measure: impl FnOnce() -> T,
) -> T {
    use std::io::{BufRead, BufReader, Write};
    const SCRIPT: &str = r#"
import os, sys, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
path, n, is_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "dir"
fds = []
for i in range(n):
    if is_dir:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    else:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        size = os.fstat(fd).st_size
        for off in (0, size // 2, size - 1):
            assert len(os.pread(fd, 1, off)) == 1
    fds.append(fd)
print("ready", len(fds), flush=True)
sys.stdin.read()
"#;
    // The system interpreter: a per-user shim (pyenv) may not be reachable by the test user.
    let py = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut cmd = match user {
        Some(u) => u.command(py),
        None => std::process::Command::new(py),
    };
    let mut child = cmd
        .args(["-c", SCRIPT])
        .arg(path)
        .arg(n.to_string())
        .arg(if dir { "dir" } else { "file" })
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (apt-get install python3)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), format!("ready {n}"), "the opener failed");
    let got = measure();
    child.stdin.take().unwrap().write_all(b"").unwrap();
    assert!(child.wait().unwrap().success());
    got
}

/// 2,000 open handles of a 3-part version (each read in all three parts) cost the daemon a few
/// descriptors, not one per handle and part; 2,000 open handles on a large `incoming/` cost one
/// listing, not 2,000 copies.
#[test]
fn open_handles_do_not_exhaust_descriptors_or_memory() {
    let f = shared_fixture(&["flights-jan.jsonl", "flights-feb.jsonl", "flights-mar.jsonl"]);
    let m = f.mount_with(&["-o", "allow_other"]);
    let (fds0, _) = daemon_usage(m.pid);
    let u = test_user();
    let (fds, _) = hold_open(Some(&u), &f.m("v/3/data.jsonl"), 2000, false, || daemon_usage(m.pid));
    assert!(
        fds < fds0 + 16,
        "2,000 handles of a 3-part version: {fds0} -> {fds} descriptors"
    );
    // A large listing: 300 staged scratch files with long names.
    for i in 0..300 {
        fs::write(f.m(&format!("incoming/.{i:03}-{}", "n".repeat(200))), b"").unwrap();
    }
    let (_, rss0) = daemon_usage(m.pid);
    let (_, rss) = hold_open(None, &f.m("incoming"), 2000, true, || daemon_usage(m.pid));
    assert!(
        rss < rss0 + (32 << 20),
        "2,000 handles on incoming/: RSS {} -> {} MiB",
        rss0 >> 20,
        rss >> 20
    );
    drop(m);
}
