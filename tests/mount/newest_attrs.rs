//! The newest version's attributes are cached by the kernel and invalidated by the daemon
//! (docs/MOUNT.md "Reading"): a commit by another process (the CLI) or through the mount shows
//! the former newest `data.jsonl` and folder read-only once the daemon has sent the invalidation,
//! without waiting for their TTL; an edit in place of `latest/data.jsonl` leaves every version
//! reading its own bytes with its own size. The daemon runs with `RUST_LOG=debug`, so its log
//! holds fuser's line per request and the invalidator's line per notification.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::support::mount::*;

fn row(id: i64, s: &str) -> String {
    format!("{{\"id\":{id},\"s\":\"{s}\"}}\n")
}

/// A table `id:int! s:str` with versions 1-3, one data file each (ids 1-2, 3-4, 5-6), mounted.
fn setup() -> (Fixture, Mount) {
    let f = Fixture::empty(&["id:int!", "s:str"]);
    for (a, b) in [(1, 2), (3, 4), (5, 6)] {
        let file = f.dir.path().join(format!("in{a}.jsonl"));
        fs::write(&file, format!("{}{}", row(a, "a"), row(b, "b"))).expect("write input");
        f.td(&["append", &f.t(), "--file", &file.display().to_string()]);
    }
    let m = f.mount();
    (f, m)
}

/// Permission bits of `p` (`stat`, following links).
fn mode(p: &Path) -> u32 {
    fs::metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

/// How many `GETATTR` requests for inode `ino` the daemon's log holds.
fn getattrs(m: &Mount, ino: u64) -> usize {
    let want = format!("ino {ino:#018x} GETATTR");
    m.log_text().lines().filter(|l| l.contains(&want)).count()
}

/// How many notifications invalidating inode `ino` the daemon's log holds.
fn invalidations(m: &Mount, ino: u64) -> usize {
    let want = format!("invalidated the attributes of inode {ino:#x} in the kernel");
    m.log_text().lines().filter(|l| l.contains(&want)).count()
}

/// Wait (up to 30 s, polling) until the daemon has sent a new invalidation of `ino` (more than
/// `before` in its log).
fn await_invalidation(m: &Mount, ino: u64, before: usize) {
    assert!(
        wait_for(30, || invalidations(m, ino) > before),
        "no invalidation of inode {ino:#x} in the daemon's log:\n{}",
        m.log_text()
    );
}

#[test]
fn the_newest_attributes_are_cached_and_invalidated_at_each_commit() {
    let (f, m) = setup();
    let data3 = f.m("v/3/data.jsonl");
    let ino3 = fs::metadata(&data3).expect("stat").ino();
    let dir3 = fs::metadata(f.m("v/3")).expect("stat").ino();
    assert_eq!((mode(&data3), mode(&f.m("v/3"))), (0o644, 0o755));
    // Cached: twenty stats in a row ask the daemon at most a few times (each answer holds for
    // the TTL; the first may have been asked before).
    let before = getattrs(&m, ino3);
    for _ in 0..20 {
        assert_eq!(mode(&data3), 0o644);
    }
    let asked = getattrs(&m, ino3) - before;
    assert!(
        asked <= 5,
        "20 stats of the newest data.jsonl asked the daemon {asked} times: not cached"
    );

    // A commit by another process: `latest` names it at the very next lookup, and the former
    // newest shows read-only once the daemon sent the invalidation (however recently the kernel
    // cached its attributes: the stat just above).
    let (inv_data, inv_dir) = (invalidations(&m, ino3), invalidations(&m, dir3));
    assert_eq!(mode(&data3), 0o644);
    let file = f.dir.path().join("in7.jsonl");
    fs::write(&file, row(7, "c")).expect("write input");
    f.td(&["append", &f.t(), "--file", &file.display().to_string()]);
    assert_eq!(f.latest_link(), "v/4");
    assert_eq!(
        fs::read_to_string(f.m("latest/data.jsonl")).expect("read latest"),
        String::from_utf8_lossy(&f.read_v(4))
    );
    await_invalidation(&m, ino3, inv_data);
    await_invalidation(&m, dir3, inv_dir);
    assert_eq!(
        mode(&data3),
        0o444,
        "v/3/data.jsonl still writable after the invalidation"
    );
    assert_eq!(mode(&f.m("v/3")), 0o555, "v/3 still writable after the invalidation");
    assert_eq!(mode(&f.m("v/4/data.jsonl")), 0o644);
    assert_eq!(fs::read(&data3).expect("read v/3"), f.read_v(3), "v/3's bytes changed");
    assert_eq!(fs::metadata(&data3).expect("stat").len(), f.read_v(3).len() as u64);

    // A commit through the mount's own incoming/ invalidates the same way.
    let data4 = f.m("v/4/data.jsonl");
    let ino4 = fs::metadata(&data4).expect("stat").ino();
    let inv4 = invalidations(&m, ino4);
    assert_eq!(mode(&data4), 0o644);
    fs::write(f.m("incoming/r8.jsonl"), row(8, "d")).expect("write into incoming/");
    assert_eq!(f.latest_link(), "v/5");
    await_invalidation(&m, ino4, inv4);
    assert_eq!(
        mode(&data4),
        0o444,
        "v/4/data.jsonl still writable after the invalidation"
    );
    assert_eq!(fs::read(&data4).expect("read v/4"), f.read_v(4));
}

#[test]
fn an_edit_in_place_leaves_each_version_its_bytes_and_size() {
    let (f, m) = setup();
    let v3 = f.read_v(3);
    let data3 = f.m("v/3/data.jsonl");
    // Cached before the edit.
    assert_eq!(fs::read(f.m("latest/data.jsonl")).expect("read"), v3);
    assert_eq!(fs::metadata(&data3).expect("stat").len(), v3.len() as u64);

    // sed -i: a scratch file renamed onto data.jsonl commits version 4.
    let out = sh(
        f.dir.path(),
        "sed -i 's/\"s\":\"b\"/\"s\":\"bb\"/' \"$M/latest/data.jsonl\"",
        &f.mnt,
        &f.table,
    );
    assert!(
        out.status.success(),
        "sed -i failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(f.latest_link(), "v/4");
    let v4 = f.read_v(4);
    assert_eq!(String::from_utf8_lossy(&v4).matches("\"bb\"").count(), 3);
    let latest = f.m("latest/data.jsonl");
    assert_eq!(fs::read(&latest).expect("read latest"), v4);
    assert_eq!(fs::metadata(&latest).expect("stat latest").len(), v4.len() as u64);
    assert_eq!(fs::read(&data3).expect("read v/3"), v3);
    assert_eq!(fs::metadata(&data3).expect("stat v/3").len(), v3.len() as u64);

    // Truncate + write through one open file (version 4's inode: the kernel's size of it follows
    // the writer's truncate and write), read by another process while the edit is open, then
    // closed: version 5.
    let data4 = f.m("v/4/data.jsonl");
    let ino4 = fs::metadata(&data4).expect("stat").ino();
    let inv4 = invalidations(&m, ino4);
    let new = row(9, "only");
    let script = format!(
        "import os, sys\n\
         p = sys.argv[1]\n\
         before = open(p, 'rb').read()\n\
         fd = os.open(p, os.O_RDWR)\n\
         os.ftruncate(fd, 0)\n\
         os.write(fd, {new:?}.encode())\n\
         # (The writer's own size: lseek asks with its handle; fstat does not, FUSE sends no handle.)\n\
         assert os.lseek(fd, 0, os.SEEK_END) == {n}, ('size seen by the writer', os.lseek(fd, 0, os.SEEK_END))\n\
         # Another reader of the same version, while the edit is open: the version's size and bytes.\n\
         assert os.stat(p).st_size == len(before), ('size seen by a reader during the edit', os.stat(p).st_size)\n\
         assert open(p, 'rb').read() == before, 'bytes seen by a reader during the edit'\n\
         os.close(fd)\n",
        n = new.len()
    );
    let py = std::process::Command::new("python3")
        .arg("-c")
        .arg(&script)
        .arg(&data4)
        .output()
        .expect("run python3");
    assert!(
        py.status.success(),
        "the edit failed: {}\nlog:\n{}",
        String::from_utf8_lossy(&py.stderr),
        m.log_text()
    );
    assert_eq!(f.latest_link(), "v/5");
    assert_eq!(f.read_v(5), new.as_bytes());
    // Version 4 reads its own bytes with its own size at once, whatever size the kernel held
    // for its inode during the edit.
    assert_eq!(fs::metadata(&data4).expect("stat v/4").len(), v4.len() as u64);
    assert_eq!(fs::read(&data4).expect("read v/4"), v4);
    assert_eq!(fs::metadata(&latest).expect("stat latest").len(), new.len() as u64);
    assert_eq!(fs::read(&latest).expect("read latest"), new.as_bytes());
    await_invalidation(&m, ino4, inv4);
    assert_eq!(mode(&data4), 0o444);
    assert_eq!(fs::metadata(&data4).expect("stat v/4").len(), v4.len() as u64);
}
