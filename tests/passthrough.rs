//! FUSE passthrough (README "Reading") on real mounts: single-file versions and commit files are
//! read by the kernel from the data file itself; everything else, and every file with
//! `--no-passthrough`, through the daemon. Same bytes either way.

#[path = "common/mount.rs"]
mod mount;

use std::fs;
use std::io::Read;

use mount::*;

fn part_of_version_1(f: &Fixture) -> std::path::PathBuf {
    let c = fs::read_to_string(f.table.join("_delta_log/00000000000000000001.json")).unwrap();
    fs::read_dir(&f.table)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl") && c.contains(p.file_name().unwrap().to_str().unwrap()))
        .expect("version 1's data file")
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
    let py = python(&["mmap"]);
    let out = ok(
        &py,
        &[
            "-c",
            "import mmap,sys; f=open(sys.argv[1],'rb'); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); sys.stdout.buffer.write(m[:])",
            &f.m("v/1/data.jsonl").display().to_string(),
        ],
    );
    assert_eq!(out, want);
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
