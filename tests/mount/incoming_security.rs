//! Attacks on `incoming/` and `_staging/` reproduced on real mounts, with a second, unprivileged
//! user reading through `-o allow_other` (docs/MOUNT.md "`incoming/`" and docs/SECURITY.md "What
//! holds").

use std::fs;

use crate::support::mount::*;
use crate::support::user::{open_to_others, test_user};

fn shared_fixture() -> Fixture {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    open_to_others(f.dir.path());
    fs::copy(fixture("flights-mar.jsonl"), f.dir.path().join("mar.jsonl")).unwrap();
    f
}

/// Item 5: by default others can neither list `incoming/` nor read a staged file or its note.
#[test]
fn incoming_is_private_by_default() {
    let f = shared_fixture();
    let _m = f.mount_with(&["-o", "allow_other"]);
    let out = sh(
        f.dir.path(),
        "cp mar.jsonl \"$M/incoming/.scratch\" && printf '[1]\\n' | cat > \"$M/incoming/bad.jsonl\"",
        &f.mnt,
        &f.table,
    );
    assert!(!out.status.success(), "the bad file is refused");
    let u = test_user();
    let env = [("M", f.mnt.as_os_str())];
    for script in [
        "ls \"$M/incoming\"",
        "cat \"$M/incoming/.scratch\"",
        "cat \"$M/incoming/bad.jsonl.error\"",
    ] {
        let out = u.sh(script, &env);
        assert!(!out.status.success(), "`{script}` worked for another user");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{out:?}"
        );
    }
    // The versions stay readable.
    assert!(u.sh("head -c 10 \"$M/v/1/data.jsonl\"", &env).status.success());
}

/// Item 4: a reader's fsync through a read-only descriptor never commits the owner's pending
/// file; the owner's own close does, once.
#[test]
fn a_readers_fsync_commits_nothing() {
    let f = shared_fixture();
    let _m = f.mount_with(&["-o", "allow_other", "--share-incoming"]);
    // The owner writes and keeps the file open for a while.
    let mut writer = std::process::Command::new("sh")
        .arg("-c")
        .arg("(cat mar.jsonl; sleep 3) > \"$M/incoming/p.jsonl\"")
        .current_dir(f.dir.path())
        .env("M", &f.mnt)
        .spawn()
        .unwrap();
    assert!(wait_for(5, || f
        .m("incoming/p.jsonl")
        .metadata()
        .is_ok_and(|m| m.len() > 0)));
    let u = test_user();
    // GNU `sync FILE` opens the file read-only and fsyncs it.
    let out = u.run("sync", &[f.m("incoming/p.jsonl")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(f.latest(), 1, "the reader's fsync committed");
    // Writing is still the owner's alone.
    let out = u.sh("echo '{}' > \"$M/incoming/u.jsonl\"", &[("M", f.mnt.as_os_str())]);
    assert!(!out.status.success());
    assert!(writer.wait().unwrap().success());
    assert_eq!(f.latest(), 2);
    assert_eq!(lines(&f.read_v(2)).len(), 1800 + 600);
}

/// Item 2: `_staging/` entries planted as symlinks are never followed: no secret shows in
/// `incoming/`, the lock's target is untouched.
#[test]
fn planted_staging_symlinks_are_refused() {
    let f = shared_fixture();
    let secret = f.dir.path().join("secret.txt");
    fs::write(&secret, "root:SECRET").unwrap();
    let staging = f.table.join("_staging");
    fs::create_dir_all(&staging).unwrap();
    let id = "0123456789abcdef0123456789abcdef";
    std::os::unix::fs::symlink(&secret, staging.join(format!("{id}.data"))).unwrap();
    fs::write(staging.join(format!("{id}.name")), "leak.jsonl").unwrap();
    let _m = f.mount_with(&["-o", "allow_other", "--share-incoming"]);
    let names: Vec<_> = fs::read_dir(f.m("incoming"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(names.is_empty(), "{names:?}");
    assert_eq!(fs::read_to_string(&secret).unwrap(), "root:SECRET");
    drop(_m);
    // A symlinked lock: the mount refuses to start and the target keeps its bytes.
    let lock = staging.join(".lock");
    fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink(&secret, &lock).unwrap();
    let out = std::process::Command::new(MOUNT_BIN)
        .arg(&f.table)
        .arg(&f.mnt)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("symbolic link"),
        "{out:?}"
    );
    assert_eq!(fs::read_to_string(&secret).unwrap(), "root:SECRET");
}

/// The staged file of `incoming/NAME` in `_staging/`, with extension `ext`: found by its
/// `.name` record or, without one, by its data file's name attribute.
fn staged(f: &Fixture, name: &str, ext: &str) -> std::path::PathBuf {
    for e in fs::read_dir(f.table.join("_staging")).unwrap() {
        let p = e.unwrap().path();
        let named = match p.extension().and_then(|x| x.to_str()) {
            Some("name") => fs::read_to_string(&p).unwrap().trim_end() == name,
            Some("data") if !p.with_extension("name").exists() => {
                tinydelta::table::staging::xattr_name(&fs::File::open(&p).unwrap()).as_deref() == Some(name)
            }
            _ => false,
        };
        if named {
            return p.with_extension(ext);
        }
    }
    panic!("no name record for {name}");
}

/// Truncate `victim` (a file in `_staging/` of `incoming/NAME`, open as `w`) behind the mount's
/// back, then fsync `w`: the commit fails with EIO, nothing is committed, and the note names
/// the file and says why.
fn truncate_then_fsync(f: &Fixture, w: &fs::File, victim: &std::path::Path, name: &str, before: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(victim)
        .unwrap()
        .set_len(10)
        .unwrap();
    // The owner's fsync commits, as its close would (docs/MOUNT.md "Commit points").
    let err = w.sync_all().expect_err("the commit must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(f.latest(), before, "nothing committed");
    let note = fs::read_to_string(f.m(&format!("incoming/{name}.error"))).unwrap();
    let file = victim.file_name().unwrap().to_str().unwrap();
    assert!(
        note.contains(file) && note.contains("behind the mount's back"),
        "{note}"
    );
}

/// `_staging/<id>.canon` (the canonical rows kept while a file whose rows are not canonical as
/// written is written) truncated behind the mount's back before the close: the close fails with
/// EIO, nothing is committed, the note says why and the table stays healthy (docs/SECURITY.md "What
/// holds").
#[test]
fn a_truncated_canonical_file_is_refused() {
    use std::io::Write;
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount();
    let before = f.latest();
    let mar = fixture_bytes("flights-mar.jsonl");
    let canonical: Vec<&[u8]> = lines(&mar)[..3].to_vec();
    // A space after each `{`: valid rows, but not their canonical form.
    let rows: Vec<u8> = canonical
        .iter()
        .flat_map(|l| [b'{', b' '].into_iter().chain(l[1..].iter().copied()).chain([b'\n']))
        .collect();
    let mut w = fs::File::create(f.m("incoming/ct.jsonl")).unwrap();
    w.write_all(&rows).unwrap();
    let canon = staged(&f, "ct.jsonl", "canon");
    assert_eq!(
        fs::metadata(&canon).unwrap().len(),
        rows.len() as u64 - 3,
        "rows kept while written"
    );
    truncate_then_fsync(&f, &w, &canon, "ct.jsonl", before);
    // The close commits again from the staged bytes themselves (checked anew), never from the
    // truncated rows.
    drop(w);
    assert!(wait_for(5, || f.latest() == before + 1));
    assert_eq!(lines(&f.read_v(before + 1)).len(), lines(&f.read_v(before)).len() + 3);
    f.td(&["check", &f.t(), "--deep"]);
    drop(m);
}

/// A file whose rows are canonical as written is linked into the table itself (docs/MOUNT.md "One
/// pass over the bytes, written once"), with no `.canon` copy. Truncated behind the mount's back
/// before its commit: the commit fails with EIO, nothing is committed, the note says why, the close
/// commits nothing either (the staged file is shorter than what was written to it) and the table
/// stays healthy.
#[test]
fn a_truncated_staged_file_is_refused() {
    use std::io::Write;
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount();
    let before = f.latest();
    let rows: Vec<u8> = lines(&fixture_bytes("flights-mar.jsonl"))[..3]
        .iter()
        .flat_map(|l| l.iter().copied().chain([b'\n']))
        .collect();
    let mut w = fs::File::create(f.m("incoming/dt.jsonl")).unwrap();
    w.write_all(&rows).unwrap();
    let data = staged(&f, "dt.jsonl", "data");
    assert!(!data.with_extension("canon").exists(), "canonical rows are not copied");
    truncate_then_fsync(&f, &w, &data, "dt.jsonl", before);
    drop(w);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(f.latest(), before, "nothing committed by the close");
    assert!(
        !fs::read_dir(&f.table)
            .unwrap()
            .any(|e| fs::metadata(e.unwrap().path()).unwrap().len() == 10),
        "no part file left linked to the staged file"
    );
    f.td(&["check", &f.t(), "--deep"]);
    drop(m);
}

/// A re-save (docs/MOUNT.md "Re-saves") whose first save's data file an `overwrite` removed since:
/// EBUSY, nothing committed, and the note names the version and operation that removed the file,
/// not a commit that never happened.
#[test]
fn a_re_save_of_an_overwritten_file_names_the_overwrite() {
    use std::io::Write;
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount();
    let mar = fixture_bytes("flights-mar.jsonl");
    let l = lines(&mar);
    let save = |row: &[u8]| {
        let mut w = fs::File::create(f.m("incoming/ru.jsonl")).unwrap();
        w.write_all(&[row, b"\n"].concat()).unwrap();
        w.sync_all()
    };
    save(l[0]).expect("the first save commits");
    let first = f.latest();
    let out = std::process::Command::new(TD_BIN)
        .args(["overwrite", &f.t()])
        .stdin(fs::File::open(fixture("flights-mar.jsonl")).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let latest = f.latest();
    assert_eq!(latest, first + 1);
    let err = save(l[1]).expect_err("the re-save must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EBUSY), "{err}");
    assert_eq!(f.latest(), latest, "nothing committed");
    let note = fs::read_to_string(f.m("incoming/ru.jsonl.error")).unwrap();
    assert!(
        note.contains(&format!("removed at version {latest} by WRITE (mode Overwrite)"))
            && !note.contains(&format!("version {}", latest + 1)),
        "{note}"
    );
    drop(m);
}
