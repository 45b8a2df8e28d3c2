//! Issue 9 reproductions on real mounts, as a local attacker would try them (README,
//! "Security"): a second, unprivileged user who may read the mount (`-o allow_other`) or write
//! the table folder. Each test asserts the safe outcome.

#[path = "common/mount.rs"]
mod mount;
#[path = "common/user.rs"]
mod user;

use std::fs;

use mount::*;
use user::{open_to_others, test_user};

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
