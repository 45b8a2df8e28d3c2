//! The resource limits of `incoming/` on real mounts (docs/MOUNT.md "Limits"): staged files'
//! descriptors are opened on demand and kept in a bounded pool; one request validates at most a
//! bounded number of bytes, and a refused file is validated once until it changes.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use crate::support::mount::*;

/// The daemon's open descriptors, from /proc.
fn fd_count(pid: u32) -> usize {
    let p = procfs::process::Process::new(pid as i32).expect("the daemon's /proc entry");
    p.fd_count().expect("the daemon's fd count")
}

/// Bytes the daemon has read through read(2)/pread(2) so far (`rchar` of /proc/PID/io).
fn bytes_read(pid: u32) -> u64 {
    let p = procfs::process::Process::new(pid as i32).expect("the daemon's /proc entry");
    p.io().expect("the daemon's /proc/PID/io").rchar
}

/// The daemon's resident memory, bytes.
fn rss(pid: u32) -> u64 {
    let p = procfs::process::Process::new(pid as i32).expect("the daemon's /proc entry");
    p.status().expect("status").vmrss.expect("VmRSS") * 1024
}

/// `n` valid flights rows (the March fixture's, repeated).
fn rows(n: usize) -> Vec<u8> {
    let mar = fixture_bytes("flights-mar.jsonl");
    let src = lines(&mar);
    let mut out = Vec::new();
    for i in 0..n {
        out.extend_from_slice(src[i % src.len()]);
        out.push(b'\n');
    }
    out
}

/// The errno of an `io::Error`.
fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// 2,500 staged scratch files cost the daemon at most `--max-open-staged` descriptors; every one
/// still reads back, and the ones whose descriptors were closed long ago still commit; a write
/// handle kept open across the flood keeps writing and commits at its close.
#[test]
fn staged_descriptors_stay_bounded() {
    const FILES: usize = 2500;
    const POOL: usize = 100;
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount_with(&["--max-open-staged", &POOL.to_string()]);
    let fds0 = fd_count(m.pid);
    let all = rows(FILES);
    let row = lines(&all);
    let mut held = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(f.m("incoming/held.jsonl"))
        .unwrap();
    held.write_all(&rows(10)).unwrap();
    for (i, r) in row.iter().enumerate() {
        fs::write(f.m(&format!("incoming/.s{i:05}")), [*r, b"\n"].concat()).unwrap();
        if i % 500 == 0 {
            held.write_all(&rows(1)).unwrap();
        }
    }
    let fds = fd_count(m.pid);
    assert!(
        fds <= fds0 + POOL + 8,
        "{FILES} staged files: the daemon went from {fds0} to {fds} descriptors (pool {POOL})"
    );
    assert_eq!(fs::read_dir(f.m("incoming")).unwrap().count(), FILES + 1);
    // Every staged file reads back, the oldest (closed long ago) included.
    for i in [0, 1, 57, 1234, FILES - 1] {
        let got = fs::read(f.m(&format!("incoming/.s{i:05}"))).unwrap();
        assert_eq!(got, [row[i], b"\n"].concat(), "file {i}");
    }
    // The held handle still writes, and its close commits all of it.
    held.write_all(&rows(3)).unwrap();
    drop(held);
    assert_eq!(f.latest(), 2);
    assert_eq!(lines(&f.read_v(2)).len(), 1800 + 10 + 5 + 3);
    // Old scratch files renamed to plain names commit their bytes.
    for (n, i) in [3usize, 4, 5].into_iter().enumerate() {
        fs::rename(f.m(&format!("incoming/.s{i:05}")), f.m(&format!("incoming/r{i}.jsonl"))).unwrap();
        assert_eq!(f.latest(), 3 + n as u64);
        assert!(f.read_v(3 + n as u64).ends_with(&[row[i], b"\n"].concat()));
    }
    let fds = fd_count(m.pid);
    assert!(fds <= fds0 + POOL + 8, "after the commits: {fds0} -> {fds} descriptors");
    drop(m);
}

/// A refused file is validated once: a later fsync or close of the unchanged bytes answers the
/// same error without reading them again; a change is validated again and commits.
#[test]
fn a_refused_file_is_validated_once() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount();
    let good = rows(60_000);
    let mut bytes = good.clone();
    bytes.extend_from_slice(b"{\"year\":\"x\"}\n");
    let size = bytes.len() as u64;
    assert!(size > 16 << 20, "{size}");
    // Written under a scratch name (not validated while written), then renamed: the rename
    // validates it all and refuses it.
    fs::write(f.m("incoming/.big.tmp"), &bytes).unwrap();
    let before = bytes_read(m.pid);
    let e = fs::rename(f.m("incoming/.big.tmp"), f.m("incoming/big.jsonl")).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL, "{e}");
    let first = bytes_read(m.pid) - before;
    assert!(first >= good.len() as u64, "the first validation read {first} bytes");
    let note = fs::read_to_string(f.m("incoming/big.jsonl.error")).unwrap();
    assert!(note.contains("line 60001") && note.contains("\"year\""), "{note}");
    // fsync through a write descriptor, then its close: both commit points, neither reads.
    let before = bytes_read(m.pid);
    let w = fs::OpenOptions::new()
        .write(true)
        .open(f.m("incoming/big.jsonl"))
        .unwrap();
    let e = w.sync_all().unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL, "{e}");
    drop(w);
    let again = bytes_read(m.pid) - before;
    assert!(
        again < 1 << 20,
        "an unchanged refused file was read again: {again} bytes"
    );
    assert_eq!(fs::read_to_string(f.m("incoming/big.jsonl.error")).unwrap(), note);
    assert_eq!(f.latest(), 1);
    // Cut the bad line off: the bytes changed, so they are validated again and committed.
    let w = fs::OpenOptions::new()
        .write(true)
        .open(f.m("incoming/big.jsonl"))
        .unwrap();
    w.set_len(good.len() as u64).unwrap();
    w.sync_all().unwrap();
    drop(w);
    assert_eq!(f.latest(), 2);
    assert_eq!(lines(&f.read_v(2)).len(), 1800 + 60_000);
    drop(m);
}

/// A commit that would validate more than `--max-validate-bytes` in one request fails with
/// EFBIG and a note saying why, without reading the file; a sparse multi-GB file costs nothing;
/// the same bytes written sequentially (validated as they arrive) commit.
#[test]
fn one_request_validates_at_most_the_limit() {
    const CAP: u64 = 1 << 20;
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount_with(&["--max-validate-bytes", &CAP.to_string()]);
    // A sparse 3 GiB file (truncate's close is its commit point).
    let out = sh(
        f.dir.path(),
        "truncate -s 3G \"$M/incoming/sparse.jsonl\"",
        &f.mnt,
        &f.table,
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("too large"), "{out:?}");
    let note = fs::read_to_string(f.m("incoming/sparse.jsonl.error")).unwrap();
    assert!(
        note.contains(&format!("{} bytes", 3u64 << 30))
            && note.contains(&format!("limit of {CAP}"))
            && note.contains("--max-validate-bytes"),
        "{note}"
    );
    let before = bytes_read(m.pid);
    for _ in 0..3 {
        let w = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_APPEND)
            .open(f.m("incoming/sparse.jsonl"))
            .unwrap();
        assert_eq!(errno(&w.sync_all().unwrap_err()), libc::EFBIG);
        drop(w);
    }
    assert!(bytes_read(m.pid) - before < CAP, "the refused sparse file was read");
    assert!(rss(m.pid) < 64 << 20, "RSS {} MiB", rss(m.pid) >> 20);
    fs::remove_file(f.m("incoming/sparse.jsonl")).unwrap();
    // 2 MB of valid rows: written under a scratch name and renamed, over the limit.
    let bytes = rows(8000);
    assert!(bytes.len() as u64 > CAP);
    fs::write(f.m("incoming/.x.tmp"), &bytes).unwrap();
    let e = fs::rename(f.m("incoming/.x.tmp"), f.m("incoming/x.jsonl")).unwrap_err();
    assert_eq!(errno(&e), libc::EFBIG, "{e}");
    assert!(f.m("incoming/x.jsonl.error").exists());
    assert_eq!(f.latest(), 1);
    // The same bytes copied sequentially: validated as written, committed at close.
    fs::write(f.m("incoming/y.jsonl"), &bytes).unwrap();
    assert_eq!(f.latest(), 2);
    assert_eq!(lines(&f.read_v(2)).len(), 1800 + 8000);
    drop(m);
}

/// Handles that write staged files are direct (`FOPEN_DIRECT_IO`: the kernel keeps no second copy
/// of the bytes in the mount's page cache). What the page cache gave writers must still hold: a
/// shared writable mapping of an `incoming/` file commits the rows written through it; a descriptor
/// opened for reading and writing reads back what it just wrote; a large file written in 1 MiB
/// requests from a buffer that is not page-aligned (split by the kernel at page boundaries) commits
/// every byte once.
#[test]
fn direct_staged_writes_keep_mappings_and_read_back() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount();
    let before = f.read_v(1);
    let batch = rows(300);
    let src = f.dir.path().join("batch.jsonl");
    fs::write(&src, &batch).unwrap();
    let py = python(&["mmap"]);
    ok(
        &py,
        &[
            "-c",
            "import mmap,os,sys; d=open(sys.argv[2],'rb').read(); fd=os.open(sys.argv[1], os.O_RDWR|os.O_CREAT, 0o644); \
             os.ftruncate(fd, len(d)); m=mmap.mmap(fd, len(d), mmap.MAP_SHARED, mmap.PROT_READ|mmap.PROT_WRITE); \
             m[:]=d; m.flush(); m.close(); os.close(fd)",
            &f.m("incoming/mapped.jsonl").display().to_string(),
            &src.display().to_string(),
        ],
    );
    assert_eq!(f.latest(), 2, "the mapped file committed once");
    assert_eq!(f.read_v(2), [&before[..], &batch].concat());

    // Read back through the writing descriptor, before its close commits.
    let mut rw = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(f.m("incoming/rw.jsonl"))
        .unwrap();
    rw.write_all(&batch).unwrap();
    let mut back = vec![0; batch.len()];
    std::os::unix::fs::FileExt::read_exact_at(&rw, &mut back, 0).unwrap();
    assert_eq!(back, batch, "read back through the writing descriptor");
    drop(rw);
    assert_eq!(f.latest(), 3);

    // 3 MiB and more, in 1 MiB writes from an odd offset of a buffer.
    let big = rows(12_000);
    assert!(big.len() > 3 << 20);
    let buf = [&b"x"[..], &big].concat();
    let mut w = fs::File::create(f.m("incoming/big.jsonl")).unwrap();
    for part in buf[1..].chunks(1 << 20) {
        w.write_all(part).unwrap();
    }
    drop(w);
    assert_eq!(f.latest(), 4);
    assert_eq!(f.read_v(4), [&before[..], &batch, &batch, &big].concat());
}

/// The daemon's row-checking helper threads, by their names in /proc.
fn check_threads(pid: u32) -> usize {
    let p = procfs::process::Process::new(pid as i32).expect("the daemon's /proc entry");
    p.tasks()
        .expect("the daemon's threads")
        .filter_map(|t| t.ok()?.stat().ok())
        .filter(|st| st.comm.starts_with("tinydelta-check"))
        .count()
}

/// `TINYDELTA_THREADS=1` (docs/CLI.md "Environment") reaches the daemon: a large file written
/// into `incoming/` is checked on the thread that answers each write (no helper thread is
/// started), commits byte for byte without a second pass over its bytes, and a bad line in it still fails the write that completes it
/// with `EINVAL`, named by its line and column. Without it, a machine with several cores starts
/// helpers.
#[test]
fn one_validation_thread_checks_large_writes_alone() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let before = f.read_v(1);
    let big = rows(12_000);
    assert!(big.len() > 3 << 20);
    {
        let m = f.mount_with_env(&[], &[("TINYDELTA_THREADS", "1")]);
        let read_before = bytes_read(m.pid);
        let mut w = fs::File::create(f.m("incoming/a.jsonl")).unwrap();
        for part in big.chunks(1 << 20) {
            w.write_all(part).unwrap();
        }
        drop(w);
        assert_eq!(f.latest(), 2);
        // One pass: the daemon read the bytes once, from the FUSE device (a second pass over
        // the staged file at the commit would read them again).
        let read = bytes_read(m.pid) - read_before;
        assert!(
            read < big.len() as u64 + big.len() as u64 / 2,
            "the daemon read {read} bytes for a {} byte file",
            big.len()
        );
        assert_eq!(f.read_v(2), [&before[..], &big].concat());
        assert_eq!(check_threads(m.pid), 0, "TINYDELTA_THREADS=1 starts no helper");
        // A bad line where a piece would start on several threads (the second quarter of the
        // second 1 MiB write).
        second_write_fails_at_a_bad_line(&f, &big, (1 << 20) + (256 << 10));
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        let m = f.mount_with_env(&[], &[]);
        let mut w = fs::File::create(f.m("incoming/c.jsonl")).unwrap();
        for part in big.chunks(1 << 20) {
            w.write_all(part).unwrap();
        }
        drop(w);
        assert_eq!(f.latest(), 3);
        assert!(check_threads(m.pid) > 0, "every core: helpers check pieces");
    }
}

/// A helper thread that checks pieces of large writes and is late (here it sleeps 3 s before
/// each piece it takes: the `check-helper` failpoint, as when the scheduler puts it aside on a
/// busy machine) does not hold writes up: the thread answering a write checks the helper's
/// pieces itself. The rows commit as usual, and a bad line in such a piece still fails the write
/// that holds it, named by its line number.
#[test]
fn a_late_checking_thread_does_not_hold_writes_up() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount_with_env(&[], &[("TINYDELTA_FAILPOINT", "check-helper=sleep:3000")]);
    let before = f.read_v(1);
    let big = rows(12_000);
    assert!(big.len() > 3 << 20);
    let started = std::time::Instant::now();
    let mut w = fs::File::create(f.m("incoming/a.jsonl")).unwrap();
    for part in big.chunks(1 << 20) {
        w.write_all(part).unwrap();
    }
    drop(w);
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_millis(2500),
        "4 writes of 1 MiB took {took:?}: they waited for the sleeping helper"
    );
    assert_eq!(f.latest(), 2);
    assert_eq!(f.read_v(2), [&before[..], &big].concat());

    // A bad line in the last quarter of the second 1 MiB write (a piece a helper would check).
    second_write_fails_at_a_bad_line(&f, &big, (1 << 20) + 900_000);
}

/// Copy `big` into `incoming/b.jsonl` in 1 MiB writes with the line around byte `at` (in the
/// second write) made bad, padded to its length: the second write fails with `EINVAL`, the note
/// names that line, and nothing is committed (the table stays at version 2).
fn second_write_fails_at_a_bad_line(f: &Fixture, big: &[u8], at: usize) {
    let start = big[..at].iter().rposition(|&c| c == b'\n').unwrap() + 1;
    let end = start + big[start..].iter().position(|&c| c == b'\n').unwrap();
    let line = big[..start].iter().filter(|&&c| c == b'\n').count() + 1;
    let mut bad = big[..start].to_vec();
    bad.extend_from_slice(b"{\"year\":1.5}");
    bad.extend(std::iter::repeat_n(b' ', end - start - 12));
    bad.extend_from_slice(&big[end..]);
    assert_eq!(bad.len(), big.len());
    let mut w = fs::File::create(f.m("incoming/b.jsonl")).unwrap();
    let mut chunks = bad.chunks(1 << 20);
    w.write_all(chunks.next().unwrap()).unwrap();
    let e = w.write_all(chunks.next().unwrap()).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL, "{e}");
    drop(w);
    let note = fs::read_to_string(f.m("incoming/b.jsonl.error")).unwrap();
    assert!(
        note.contains(&format!("line {line}")) && note.contains("\"year\""),
        "{note}"
    );
    assert_eq!(f.latest(), 2);
}
