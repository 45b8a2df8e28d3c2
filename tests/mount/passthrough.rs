//! FUSE passthrough (docs/MOUNT.md "Passthrough") on real mounts: single-file versions and commit
//! files are read by the kernel from the data file itself; everything else, and every file with
//! `--no-passthrough`, through the daemon. Same bytes either way.

use std::fs;
use std::io::Read;

use crate::support::mount::*;

fn part_of_version_1(f: &Fixture) -> std::path::PathBuf {
    let c = fs::read_to_string(f.table.join("_delta_log/00000000000000000001.json")).unwrap();
    fs::read_dir(&f.table)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl") && c.contains(p.file_name().unwrap().to_str().unwrap()))
        .expect("version 1's data file")
}

/// The bytes of `path` read through a shared read-only mmap (Python's `mmap`).
fn mmap_read(path: &std::path::Path) -> Vec<u8> {
    let py = python(&["mmap"]);
    ok(
        &py,
        &[
            "-c",
            "import mmap,sys; f=open(sys.argv[1],'rb'); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); sys.stdout.buffer.write(m[:])",
            &path.display().to_string(),
        ],
    )
}

fn check_bytes(f: &Fixture) {
    for v in 0..=2u64 {
        assert_eq!(
            fs::read(f.m(&format!("v/{v}/data.jsonl"))).unwrap(),
            f.read_v(v),
            "v/{v}"
        );
        assert_eq!(
            fs::read(f.m(&format!("v/{v}/commit.json"))).unwrap(),
            fs::read(f.table.join(format!("_delta_log/{v:020}.json"))).unwrap(),
            "v/{v}/commit.json"
        );
    }
}

#[test]
fn single_file_versions_are_read_through_passthrough() {
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let m = f.mount();
    check_bytes(&f);
    // Many handles of one inode at once share its backing file; random offsets read right.
    let want = f.read_v(1);
    let mut handles: Vec<fs::File> = (0..64)
        .map(|_| fs::File::open(f.m("v/1/data.jsonl")).unwrap())
        .collect();
    for (i, h) in handles.iter_mut().enumerate() {
        use std::os::unix::fs::FileExt;
        let off = (i * 7919) % want.len();
        let mut buf = vec![0u8; 4096.min(want.len() - off)];
        h.read_exact_at(&mut buf, off as u64).unwrap();
        assert_eq!(buf, want[off..off + buf.len()]);
    }
    drop(handles);
    // mmap of a passthrough file.
    assert_eq!(mmap_read(&f.m("v/1/data.jsonl")), want);
    let log = m.log_text();
    assert!(
        log.contains("passthrough in use"),
        "the daemon did not log passthrough use:\n{log}"
    );
    // With passthrough the daemon saw no READ of version 1's data file (inode 0x105).
    assert!(
        !log.lines().any(|l| l.contains("ino 0x0000000000000105 READ")),
        "reads of v/1/data.jsonl reached the daemon:\n{log}"
    );
    drop(m);
}

#[test]
fn fallback_reads_the_same_bytes_and_says_so() {
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let m = f.mount_with(&["--no-passthrough"]);
    check_bytes(&f);
    let log = m.log_text();
    assert!(log.contains("passthrough off"), "{log}");
    assert!(!log.contains("passthrough in use"), "{log}");
    assert!(
        log.lines().any(|l| l.contains("ino 0x0000000000000105 READ")),
        "without passthrough, reads go through the daemon:\n{log}"
    );
    drop(m);
}

/// Passthrough reads the backing file up to its own end, so the size is checked at open: a
/// data file longer or shorter than its `add.size` is EIO, never extra or missing bytes.
#[test]
fn a_data_file_of_the_wrong_size_is_eio_at_open() {
    for grow in [true, false] {
        let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
        let part = part_of_version_1(&f);
        let len = fs::metadata(&part).unwrap().len();
        let file = fs::OpenOptions::new().write(true).open(&part).unwrap();
        file.set_len(if grow { len + 100 } else { len - 100 }).unwrap();
        let m = f.mount();
        let err = fs::File::open(f.m("v/1/data.jsonl"))
            .and_then(|mut h| {
                let mut v = Vec::new();
                h.read_to_end(&mut v).map(|_| v)
            })
            .expect_err("a data file of the wrong size was served");
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "grow {grow}: {err}");
        // The other version and the commit files still read.
        assert_eq!(
            fs::read(f.m("v/1/commit.json")).unwrap(),
            fs::read(f.table.join("_delta_log/00000000000000000001.json")).unwrap()
        );
        drop(m);
    }
}

/// `v/<n>/parts/` (docs/MOUNT.md "`v/<n>/parts/`"): version n's data files, one file each, named in
/// the order of `data.jsonl`, so `cat parts/*` gives its bytes; each part is one file on disk, so
/// it is read with passthrough (no READ reaches the daemon), and through the daemon without.
#[test]
fn parts_are_the_data_files_of_a_version_in_order() {
    for passthrough in [true, false] {
        let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
        let m = if passthrough {
            f.mount()
        } else {
            f.mount_with(&["--no-passthrough"])
        };
        let names = |v: u64| -> Vec<String> {
            let mut n: Vec<String> = fs::read_dir(f.m(&format!("v/{v}/parts")))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            n.sort();
            n
        };
        assert_eq!(names(0), Vec::<String>::new());
        assert_eq!(names(1), ["0000000.jsonl"]);
        assert_eq!(names(2), ["0000000.jsonl", "0000001.jsonl"]);
        let mut cat = Vec::new();
        for n in names(2) {
            let bytes = fs::read(f.m(&format!("v/2/parts/{n}"))).unwrap();
            assert_eq!(
                fs::metadata(f.m(&format!("v/2/parts/{n}"))).unwrap().len(),
                bytes.len() as u64
            );
            cat.extend(bytes);
        }
        assert_eq!(cat, f.read_v(2), "cat parts/* is data.jsonl");
        assert_eq!(fs::read(f.m("v/2/parts/0000000.jsonl")).unwrap(), f.read_v(1));
        for bad in [
            "v/2/parts/0000002.jsonl",
            "v/2/parts/000000.jsonl",
            "v/2/parts/x",
            "v/9/parts",
        ] {
            let e = fs::metadata(f.m(bad)).expect_err(bad);
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{bad}: {e}");
        }
        let e = fs::OpenOptions::new()
            .write(true)
            .open(f.m("v/2/parts/0000000.jsonl"))
            .expect_err("parts are read-only");
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        let log = m.log_text();
        // Part inodes of version 2: 0xa000000000800001 and ...02.
        let part_reads = log
            .lines()
            .filter(|l| l.contains("ino 0xa000000000800001 READ ") || l.contains("ino 0xa000000000800002 READ "))
            .count();
        if passthrough {
            assert!(log.contains("passthrough in use"), "{log}");
            assert_eq!(part_reads, 0, "reads of parts reached the daemon:\n{log}");
        } else {
            assert!(
                part_reads > 0,
                "without passthrough, parts are read by the daemon:\n{log}"
            );
        }
        drop(m);
    }
}

/// A part whose data file is not the size the log records is EIO at open, like data.jsonl.
#[test]
fn a_part_of_the_wrong_size_is_eio() {
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let part = part_of_version_1(&f);
    let len = fs::metadata(&part).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&part)
        .unwrap()
        .set_len(len + 1)
        .unwrap();
    let m = f.mount();
    let err = fs::read(f.m("v/2/parts/0000000.jsonl")).expect_err("a grown part was served");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(!fs::read(f.m("v/2/parts/0000001.jsonl")).unwrap().is_empty());
    drop(m);
}

/// The READ requests of `path`'s inode in the daemon's log so far.
fn reads_of(m: &Mount, path: &std::path::Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let tag = format!("ino {:#018x} READ ", fs::metadata(path).unwrap().ino());
    m.log_text().lines().filter(|l| l.contains(&tag)).count()
}

/// `data.jsonl` of several data files (docs/MOUNT.md "Direct first reads of `data.jsonl`"):
/// `st_blksize` is 512 KiB (replies are spliced from the data files, and a pipe holds 512 KiB at
/// any offset); it is read direct (every read a request, nothing kept in the page cache) until a
/// reader has read it to its end, then through the page cache: the read after the one that filled
/// it sends no READ. A shared mmap of a direct open works. Same bytes every time, with and without
/// passthrough.
#[test]
fn several_data_files_are_read_direct_then_from_the_page_cache() {
    use std::os::unix::fs::MetadataExt;
    for passthrough in [true, false] {
        let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl", "flights-mar.jsonl"]);
        let m = if passthrough {
            f.mount()
        } else {
            f.mount_with(&["--no-passthrough"])
        };
        let v2 = f.m("v/2/data.jsonl");
        assert_eq!(fs::metadata(&v2).unwrap().blksize(), 512 << 10, "v/2 st_blksize");
        assert_eq!(
            fs::metadata(f.m("v/1/data.jsonl")).unwrap().blksize(),
            4096,
            "v/1 st_blksize"
        );
        let want = f.read_v(2);
        // A read that stops early keeps the file direct.
        let mut head = vec![0u8; 1000];
        fs::File::open(&v2).unwrap().read_exact(&mut head).unwrap();
        assert_eq!(head, want[..1000]);
        let mut seen = reads_of(&m, &v2);
        assert!(seen > 0, "passthrough {passthrough}: the head read sent no READ");
        for (round, filled) in [
            ("first, direct", false),
            ("second, fills the page cache", false),
            ("third", true),
        ] {
            assert_eq!(fs::read(&v2).unwrap(), want, "passthrough {passthrough}: {round} read");
            let now = reads_of(&m, &v2);
            if filled {
                assert_eq!(
                    now, seen,
                    "passthrough {passthrough}: the {round} read reached the daemon"
                );
            } else {
                assert!(now > seen, "passthrough {passthrough}: the {round} read sent no READ");
            }
            seen = now;
        }
        // mmap of a direct open (version 3 has not been read through).
        assert_eq!(
            mmap_read(&f.m("v/3/data.jsonl")),
            f.read_v(3),
            "passthrough {passthrough}: mmap of v/3"
        );
        assert_eq!(fs::read(f.m("v/3/data.jsonl")).unwrap(), f.read_v(3));
        drop(m);
    }
}

/// Large reads of a `data.jsonl` of several data files are spliced from the data files
/// (src/mount/splice.rs): reads at any offset and of any size, across the files' boundaries and up
/// to the end, return the version's bytes, on a direct open and through the page cache.
#[test]
fn spliced_reads_return_the_bytes_at_any_offset() {
    use std::os::unix::fs::FileExt;
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl", "flights-mar.jsonl"]);
    let m = f.mount();
    let want = f.read_v(3);
    let len = want.len() as u64;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let h = fs::File::open(f.m("v/3/data.jsonl")).unwrap();
    let mut sizes = vec![128 << 10, 512 << 10, 1 << 20, (512 << 10) + 1, 200_003];
    sizes.extend((0..40).map(|_| (128 << 10) + next(900 << 10) as usize));
    for (i, size) in sizes.into_iter().enumerate() {
        let offset = match i % 3 {
            0 => next(len),
            1 => next(len / 4096) * 4096,
            _ => len.saturating_sub(next(size as u64 * 2)),
        };
        let mut buf = vec![0u8; size];
        let n = h.read_at(&mut buf, offset).unwrap();
        let end = len.min(offset + size as u64) as usize;
        assert_eq!(n, end - offset as usize, "read of {size} at {offset}: length");
        assert!(
            buf[..n] == want[offset as usize..end],
            "read of {size} at {offset}: bytes differ"
        );
    }
    assert!(m.log_text().contains("spliced from the data files"), "{}", m.log_text());
    drop(h);
    // Read through, then again from the page cache (readahead requests of up to 1 MiB).
    for _ in 0..3 {
        assert!(fs::read(f.m("v/3/data.jsonl")).unwrap() == want);
    }
    drop(m);
}

/// A data file cut short after the daemon opened it (and checked its size) is EIO for the reads
/// that reach the cut, whether the reply would be mapped from the file (large reads) or copied
/// (small ones); never zeros or a crash of the daemon. The reads before the cut still work.
#[test]
fn a_data_file_cut_short_while_open_is_eio() {
    use std::os::unix::fs::FileExt;
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let m = f.mount();
    let part = part_of_version_1(&f);
    let len = fs::metadata(&part).unwrap().len();
    let want = f.read_v(2);
    let h = fs::File::open(f.m("v/2/data.jsonl")).unwrap();
    let mut buf = vec![0u8; 256 << 10];
    h.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, want[..buf.len()]);
    fs::OpenOptions::new()
        .write(true)
        .open(&part)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    for size in [256 << 10, 4096] {
        let mut buf = vec![0u8; size];
        let err = h
            .read_exact_at(&mut buf, len / 2 + 1000)
            .expect_err("a read past the cut was served");
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{size} bytes: {err}");
    }
    assert!(
        m.log_text().contains("shorter than its add action says"),
        "{}",
        m.log_text()
    );
    drop(h);
    drop(m);
}
