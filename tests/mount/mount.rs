//! Scenario tests of `tinydelta-mount` on real FUSE mounts (docs/MOUNT.md "Starting and stopping",
//! docs/MOUNT.md "Reading").

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::UNIX_EPOCH;

use crate::support::mount::*;

#[test]
fn background_start_serves_every_version_as_the_cli_reads_it() {
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl", "flights-mar.jsonl"]);
    let m = f.mount();
    // The command returned only once mounted: everything is there at once.
    assert_eq!(f.latest_link(), "v/3");
    let mut names: Vec<_> = fs::read_dir(&f.mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["at", "changes.jsonl", "incoming", "latest", "v"]);
    let mut versions: Vec<u64> = fs::read_dir(f.m("v"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    versions.sort();
    assert_eq!(versions, [0, 1, 2, 3]);
    for v in 0..=3u64 {
        let data = fs::read(f.m(&format!("v/{v}/data.jsonl"))).unwrap();
        assert_eq!(
            data,
            f.read_v(v),
            "v/{v}/data.jsonl differs from tinydelta read --version {v}"
        );
        let meta = fs::metadata(f.m(&format!("v/{v}/data.jsonl"))).unwrap();
        assert_eq!(meta.len(), data.len() as u64, "stat size of v/{v}");
        // The newest version's data.jsonl takes edits (docs/MOUNT.md "Editing latest/data.jsonl").
        assert_eq!(meta.mode() & 0o777, if v == 3 { 0o644 } else { 0o444 }, "mode of v/{v}");
        let commit = fs::read(f.m(&format!("v/{v}/commit.json"))).unwrap();
        let on_disk = fs::read(f.table.join(format!("_delta_log/{v:020}.json"))).unwrap();
        assert_eq!(commit, on_disk);
        // mtime is the commit time.
        let first: serde_json::Value = serde_json::from_slice(lines(&on_disk)[0]).unwrap();
        let ts = first["commitInfo"]["timestamp"].as_i64().unwrap();
        let mtime = meta.modified().unwrap().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        assert_eq!(mtime, ts, "mtime of v/{v}/data.jsonl");
        let schema: serde_json::Value =
            serde_json::from_slice(&fs::read(f.m(&format!("v/{v}/schema.json"))).unwrap()).unwrap();
        assert_eq!(schema["columns"].as_array().unwrap().len(), FLIGHTS.len());
    }
    let jan_to_mar = lines(&fixture_bytes("flights-jan.jsonl")).len()
        + lines(&fixture_bytes("flights-feb.jsonl")).len()
        + lines(&fixture_bytes("flights-mar.jsonl")).len();
    assert_eq!(lines(&fs::read(f.m("v/3/data.jsonl")).unwrap()).len(), jan_to_mar);
    m.unmount();
    assert!(!is_mounted(&f.mnt));
}

#[test]
fn cp_commits_on_close_and_latest_has_moved_when_cp_returns() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount();
    let src = fixture("flights-feb.jsonl");
    let out = run("cp", &[src.as_os_str(), f.m("incoming/feb.jsonl").as_os_str()]);
    assert!(out.status.success(), "cp: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(f.latest_link(), "v/2");
    assert_eq!(f.latest(), 2);
    assert!(
        fs::read_dir(f.m("incoming")).unwrap().next().is_none(),
        "the name left incoming/"
    );
    let latest = fs::read(f.m("latest/data.jsonl")).unwrap();
    assert_eq!(latest, f.read_v(2));
    assert_eq!(lines(&latest).len(), 1800 + 1000);
    let history = String::from_utf8(f.td(&["history", &f.t()])).unwrap();
    assert!(history.contains("APPEND"), "{history}");
    // The commit names the file it came from and its staging id.
    let commit = fs::read_to_string(f.table.join(format!("_delta_log/{:020}.json", 2))).unwrap();
    assert!(commit.contains("stagingId"), "{commit}");
    assert!(
        fs::read_dir(f.table.join("_staging"))
            .unwrap()
            .all(|e| e.unwrap().file_name() == ".lock")
    );
}

#[test]
fn bad_file_fails_close_keeps_bytes_explains_and_can_be_fixed() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount();
    let bad = f.dir.path().join("bad.jsonl");
    fs::write(
        &bad,
        "{\"year\":2013,\"month\":1,\"day\":1}\n{\"year\":2013,\"month\":\"x\",\"day\":1}\n",
    )
    .unwrap();
    let dst = f.m("incoming/bad.jsonl");
    let out = run("cp", &[bad.as_os_str(), dst.as_os_str()]);
    assert!(!out.status.success(), "cp of a bad file must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Invalid argument"), "{err}");
    assert_eq!(f.latest_link(), "v/1");
    assert_eq!(f.latest(), 1);
    assert_eq!(
        fs::read(&dst).unwrap(),
        fs::read(&bad).unwrap(),
        "bytes kept under the name"
    );
    let note = fs::read_to_string(f.m("incoming/bad.jsonl.error")).unwrap();
    assert!(note.contains("line 2") && note.contains("month"), "{note}");
    // Fix it and close again: commits, and both names leave.
    fs::write(&dst, "{\"year\":2013,\"month\":1,\"day\":2}\n").unwrap();
    assert_eq!(f.latest_link(), "v/2");
    assert!(fs::read_dir(f.m("incoming")).unwrap().next().is_none());
    // rm discards a bad file.
    let out = run("cp", &[bad.as_os_str(), dst.as_os_str()]);
    assert!(!out.status.success());
    fs::remove_file(&dst).unwrap();
    assert!(fs::read_dir(f.m("incoming")).unwrap().next().is_none());
    assert_eq!(f.latest(), 2);
}

#[test]
fn eight_parallel_cp_make_eight_commits_without_losing_rows() {
    let f = Fixture::flights(&[]);
    let _m = f.mount();
    let src = fixture_bytes("flights-jan.jsonl");
    let all = lines(&src);
    // Eight distinct slices of the fixture, so a lost or duplicated file shows.
    let mut expected = Vec::new();
    let mut children = Vec::new();
    for i in 0..8 {
        let part: Vec<&[u8]> = all.iter().skip(i).step_by(8).copied().collect();
        let path = f.dir.path().join(format!("part{i}.jsonl"));
        let mut body = part.join(&b'\n');
        body.push(b'\n');
        fs::write(&path, &body).unwrap();
        expected.extend(part.iter().map(|l| l.to_vec()));
        children.push(
            Command::new("cp")
                .arg(&path)
                .arg(f.m(&format!("incoming/part{i}.jsonl")))
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "cp: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(f.latest(), 8);
    assert_eq!(f.latest_link(), "v/8");
    let got = fs::read(f.m("latest/data.jsonl")).unwrap();
    let mut got: Vec<Vec<u8>> = lines(&got).into_iter().map(|l| l.to_vec()).collect();
    got.sort();
    expected.sort();
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected, "every row once");
    let ops: Vec<_> = (1..=8)
        .map(|v| fs::read_to_string(f.table.join(format!("_delta_log/{v:020}.json"))).unwrap())
        .collect();
    assert!(ops.iter().all(|c| c.contains("\"Append\"")));
}

#[test]
fn cli_append_while_mounted_is_seen_by_the_next_cat() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount();
    let before = ok("cat", &[f.m("latest/data.jsonl")]);
    assert_eq!(before, f.read_v(1));
    f.td(&[
        "append",
        &f.t(),
        "--file",
        &fixture("flights-mar.jsonl").display().to_string(),
    ]);
    let after = ok("cat", &[f.m("latest/data.jsonl")]);
    assert_eq!(after, f.read_v(2));
    assert_eq!(lines(&after).len(), 1800 + 600);
    assert_eq!(f.latest_link(), "v/2");
}

#[test]
fn an_open_reader_keeps_its_version_across_commits() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount();
    let expected = f.read_v(1);
    let mut file = fs::File::open(f.m("latest/data.jsonl")).unwrap();
    let mut head = vec![0u8; 1000];
    file.read_exact(&mut head).unwrap();
    for name in ["flights-feb.jsonl", "flights-mar.jsonl"] {
        let out = run(
            "cp",
            &[fixture(name).as_os_str(), f.m(&format!("incoming/{name}")).as_os_str()],
        );
        assert!(out.status.success());
    }
    f.td(&[
        "overwrite",
        &f.t(),
        "--file",
        &fixture("flights-mar.jsonl").display().to_string(),
    ]);
    assert_eq!(f.latest(), 4);
    let mut rest = Vec::new();
    file.read_to_end(&mut rest).unwrap();
    head.extend(rest);
    assert_eq!(head, expected, "the open file kept reading version 1");
    file.seek(SeekFrom::Start(10)).unwrap();
    let mut again = vec![0u8; 20];
    file.read_exact(&mut again).unwrap();
    assert_eq!(again, expected[10..30]);
    assert_eq!(fs::read(f.m("latest/data.jsonl")).unwrap(), f.read_v(4));
}

#[test]
fn a_forked_child_closing_its_copy_commits_nothing() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount();
    let row = lines(&fixture_bytes("flights-feb.jsonl"))[0].to_vec();
    let row = String::from_utf8(row).unwrap();
    // The shell opens fd 3 (it is the opener), writes a row, then runs /bin/true, a forked child
    // that inherits fd 3 and closes it on exit: that close must not commit half a file.
    let script = format!(
        "exec 3>\"$M/incoming/forked.jsonl\"\n\
         printf '%s\\n' '{row}' >&3\n\
         /bin/true\n\
         readlink \"$M/latest\" > \"$T.after-child\"\n\
         printf '%s\\n' '{row}' >&3\n\
         exec 3>&-\n\
         readlink \"$M/latest\""
    );
    let out = sh(f.dir.path(), &script, &f.mnt, &f.table);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let after_child = fs::read_to_string(f.dir.path().join("flights.after-child")).unwrap();
    assert_eq!(after_child.trim(), "v/1", "the child's close committed");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "v/2");
    let v2 = f.read_v(2);
    assert_eq!(
        lines(&v2).len(),
        1800 + 2,
        "both rows, committed once by the opener's close"
    );
}

#[test]
fn kill_9_of_the_daemon_during_a_large_cp_leaves_the_table_readable_and_the_bytes_staged() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount();
    let before = f.read_v(1);
    // cp reads from a FIFO, so the test controls how far the copy has got when the daemon dies.
    let fifo = f.dir.path().join("fifo");
    ok("mkfifo", &[&fifo]);
    let cp = Command::new("cp")
        .arg(&fifo)
        .arg(f.m("incoming/big.jsonl"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let chunk = fixture_bytes("flights-jan.jsonl");
    let mut sent = Vec::new();
    for _ in 0..6 {
        w.write_all(&chunk).unwrap();
        sent.extend_from_slice(&chunk);
    }
    w.flush().unwrap();
    let staged = || {
        fs::read_dir(f.table.join("_staging"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".data"))
            .map(|e| e.metadata().unwrap().len())
            .sum::<u64>()
    };
    assert!(
        wait_for(20, || staged() == sent.len() as u64),
        "the daemon staged {} of {} bytes",
        staged(),
        sent.len()
    );
    // SAFETY: kill(2) of the daemon this test started.
    unsafe {
        libc::kill(m.pid as i32, libc::SIGKILL);
    }
    assert!(wait_for(10, || !alive(m.pid)));
    // More bytes, then EOF: cp now fails against the dead mount.
    let _ = w.write_all(&chunk);
    drop(w);
    let out = cp.wait_with_output().unwrap();
    assert!(!out.status.success(), "cp into a dead mount must fail");
    // The mount point is stale, and says so.
    let again = run(MOUNT_BIN, &[f.table.as_os_str(), f.mnt.as_os_str()]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("stale"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    ok("fusermount3", &[std::ffi::OsStr::new("-u"), f.mnt.as_os_str()]);
    // The table is unchanged and readable.
    assert_eq!(f.latest(), 1);
    assert_eq!(f.read_v(1), before);
    // After remount the staged bytes are back under their name; closing them commits.
    let m2 = f.mount();
    let back = fs::read(f.m("incoming/big.jsonl")).unwrap();
    assert_eq!(back, sent);
    let out = sh(f.dir.path(), "touch \"$M/incoming/big.jsonl\"", &f.mnt, &f.table);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(f.latest_link(), "v/2");
    assert_eq!(lines(&f.read_v(2)).len(), 1800 * 7);
    drop(m2);
}

#[test]
fn committed_bytes_do_not_reappear_after_a_crash_between_publish_and_cleanup() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    {
        let m = f.mount();
        // A scratch name is staged but not committed.
        fs::write(f.m("incoming/.draft.jsonl"), fixture_bytes("flights-mar.jsonl")).unwrap();
        m.unmount();
    }
    // Simulate the crash: a staged file whose id the log already has.
    let staging = f.table.join("_staging");
    let id = "0123456789abcdef0123456789abcdef";
    fs::write(staging.join(format!("{id}.name")), "done.jsonl").unwrap();
    fs::write(staging.join(format!("{id}.data")), fixture_bytes("flights-feb.jsonl")).unwrap();
    let commit_path = f.table.join("_delta_log/00000000000000000002.json");
    f.td(&[
        "append",
        &f.t(),
        "--file",
        &fixture("flights-feb.jsonl").display().to_string(),
    ]);
    let text = fs::read_to_string(&commit_path).unwrap();
    let patched = text.replacen(
        "\"mode\":\"Append\"",
        &format!("\"mode\":\"Append\",\"stagingId\":\"{id}\""),
        1,
    );
    assert_ne!(text, patched);
    fs::write(&commit_path, patched).unwrap();
    let _m = f.mount();
    let mut names: Vec<_> = fs::read_dir(f.m("incoming"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [".draft.jsonl"],
        "done.jsonl was committed before the crash and must not reappear"
    );
    assert!(!staging.join(format!("{id}.data")).exists());
    // Renaming the scratch file to a plain name commits it.
    fs::rename(f.m("incoming/.draft.jsonl"), f.m("incoming/draft.jsonl")).unwrap();
    assert_eq!(f.latest_link(), "v/3");
}

#[test]
fn everything_outside_incoming_is_read_only() {
    // Version 1 is not the newest: only the newest version's folder takes edits (docs/MOUNT.md
    // "Editing latest/data.jsonl").
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let _m = f.mount();
    let erofs = Some(libc::EROFS);
    let e = fs::OpenOptions::new()
        .write(true)
        .open(f.m("v/1/data.jsonl"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), erofs);
    assert_eq!(fs::write(f.m("new.jsonl"), "x").unwrap_err().raw_os_error(), erofs);
    assert_eq!(fs::write(f.m("v/1/new.jsonl"), "x").unwrap_err().raw_os_error(), erofs);
    assert_eq!(
        fs::remove_file(f.m("v/1/data.jsonl")).unwrap_err().raw_os_error(),
        erofs
    );
    assert_eq!(fs::create_dir(f.m("v/9")).unwrap_err().raw_os_error(), erofs);
    assert_eq!(fs::remove_dir(f.m("v/1")).unwrap_err().raw_os_error(), erofs);
    assert_eq!(fs::rename(f.m("v/1"), f.m("v/7")).unwrap_err().raw_os_error(), erofs);
    let out = run("touch", &[f.m("v/1/data.jsonl")]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
    let out = run(
        "chmod",
        &[std::ffi::OsStr::new("644"), f.m("v/1/data.jsonl").as_os_str()],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
    assert_eq!(f.latest(), 2);
}

#[test]
fn clear_errors_for_missing_table_busy_and_stale_mount_points() {
    let f = Fixture::flights(&[]);
    let missing = f.dir.path().join("nope");
    let out = run(MOUNT_BIN, &[missing.as_os_str(), f.mnt.as_os_str()]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("table not found"));
    let out = run(
        MOUNT_BIN,
        &[f.table.as_os_str(), f.dir.path().join("nodir").as_os_str()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let _m = f.mount();
    let out = run(MOUNT_BIN, &[f.table.as_os_str(), f.mnt.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("busy"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let other = f.dir.path().join("mnt2");
    fs::create_dir(&other).unwrap();
    let out = run(MOUNT_BIN, &[f.table.as_os_str(), other.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mounted once"));
    let out = run(MOUNT_BIN, &["--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(
        MOUNT_BIN,
        &[
            f.table.as_os_str(),
            other.as_os_str(),
            "-o".as_ref(),
            "nosuchopt".as_ref(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn fusermount_umount_sigint_and_sigterm_all_unmount_cleanly() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    for how in ["fusermount3", "umount", "SIGINT", "SIGTERM"] {
        let m = f.mount();
        match how {
            "fusermount3" => drop(ok("fusermount3", &["-u", m.mnt.to_str().unwrap()])),
            "umount" => drop(ok("umount", &[m.mnt.to_str().unwrap()])),
            sig => {
                let s = if sig == "SIGINT" { libc::SIGINT } else { libc::SIGTERM };
                // SAFETY: kill(2) of the daemon this test started.
                unsafe {
                    libc::kill(m.pid as i32, s);
                }
            }
        }
        assert!(wait_for(10, || !alive(m.pid)), "{how}: the daemon did not exit");
        assert!(!is_mounted(&f.mnt), "{how}: still mounted");
        assert!(!m.log_text().contains(" ERROR "), "{how}: {}", m.log_text());
    }
    // SIGTERM while a file is open: a lazy unmount; the daemon exits after the last close.
    let m = f.mount();
    let file = fs::File::open(f.m("v/1/data.jsonl")).unwrap();
    // SAFETY: as above.
    unsafe {
        libc::kill(m.pid as i32, libc::SIGTERM);
    }
    assert!(wait_for(10, || !is_mounted(&f.mnt)), "detached");
    let mut buf = vec![0u8; 100];
    (&file).read_exact(&mut buf).unwrap();
    drop(file);
    assert!(wait_for(10, || !alive(m.pid)), "the daemon exits after the last close");
}

#[test]
fn foreground_stays_attached_until_sigint() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let mut child = Command::new(MOUNT_BIN)
        .arg(&f.table)
        .arg(&f.mnt)
        .arg("--foreground")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(10, || is_mounted(&f.mnt)), "foreground mount did not come up");
    let guard = Mount {
        mnt: f.mnt.clone(),
        pid: child.id(),
        log: f.dir.path().join("none.log"),
    };
    assert_eq!(f.latest_link(), "v/1");
    assert!(child.try_wait().unwrap().is_none(), "--foreground must stay attached");
    // SAFETY: kill(2) of the child this test started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit after SIGINT: {}", out.status);
    assert!(!is_mounted(&f.mnt));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("mounted") && log.contains("unmounted"), "{log}");
    drop(guard);
}

#[test]
fn staged_files_survive_a_clean_remount() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount();
    fs::write(f.m("incoming/notes.swp"), "scratch").unwrap();
    m.unmount();
    let _m = f.mount();
    assert_eq!(fs::read(f.m("incoming/notes.swp")).unwrap(), b"scratch");
    assert_eq!(f.latest(), 1);
}

#[test]
fn allow_other_lets_other_users_read_but_only_the_owner_write() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    require_tool("setpriv");
    // Let user nobody reach the mount point.
    let mut p = f.dir.path().to_path_buf();
    loop {
        let mode = fs::metadata(&p).unwrap().mode();
        ok(
            "chmod",
            &[format!("{:o}", (mode & 0o7777) | 0o711), p.display().to_string()],
        );
        if !p.pop() || p.as_os_str().is_empty() || p == std::path::Path::new("/") {
            break;
        }
    }
    let as_nobody = |script: &str| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script])
            .env("M", &f.mnt)
            .output()
            .unwrap()
    };
    {
        let _m = f.mount();
        let out = as_nobody("cat \"$M/v/1/data.jsonl\"");
        assert!(!out.status.success(), "without allow_other other users are kept out");
    }
    let _m = f.mount_with(&["-o", "allow_other"]);
    let out = as_nobody("cat \"$M/v/1/data.jsonl\"");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, f.read_v(1));
    let out = as_nobody("echo '{}' > \"$M/incoming/x.jsonl\"");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    assert_eq!(f.latest(), 1);
}

#[test]
fn duckdb_reads_latest_data_jsonl_and_counts_the_rows() {
    let py = python(&["duckdb"]);
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let _m = f.mount();
    let script = "import duckdb, sys\n\
        con = duckdb.connect()\n\
        path = sys.argv[1]\n\
        n = con.execute(\"select count(*) from read_json(?, format='newline_delimited')\", [path]).fetchone()[0]\n\
        m = con.execute(\"select count(*) from read_json(?, format='newline_delimited') where month = 2\", [path]).fetchone()[0]\n\
        print(n, m)\n";
    let out = ok(&py, &["-c", script, f.m("latest/data.jsonl").to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&out).trim(), "2800 1000");
}

#[test]
fn deltalake_opens_a_table_written_through_the_mount() {
    let py = python(&["deltalake"]);
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount();
    for name in ["flights-feb.jsonl", "flights-mar.jsonl"] {
        let out = run(
            "cp",
            &[fixture(name).as_os_str(), f.m(&format!("incoming/{name}")).as_os_str()],
        );
        assert!(out.status.success());
    }
    let script = "import deltalake, sys\n\
        t = deltalake.DeltaTable(sys.argv[1])\n\
        print(t.version(), len(t.file_uris()))\n\
        print(len(t.history()))\n";
    let out = ok(&py, &["-c", script, f.table.to_str().unwrap()]);
    assert_eq!(
        String::from_utf8_lossy(&out).split_whitespace().collect::<Vec<_>>(),
        ["3", "3", "4"]
    );
}

#[test]
fn closes_during_exec_neither_hang_nor_commit_early() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount();
    let rows = fixture_bytes("flights-mar.jsonl");
    // The test process opens the file; children it spawns inherit the (close-on-exec)
    // descriptor for a moment and close it inside execve, while the kernel holds locks that
    // /proc/PID/stat needs: the daemon must answer those flushes without reading it.
    let mut file = fs::File::create(f.m("incoming/exec.jsonl")).unwrap();
    file.write_all(&rows).unwrap();
    let start = std::time::Instant::now();
    for _ in 0..20 {
        assert!(Command::new("true").status().unwrap().success());
    }
    assert!(
        start.elapsed().as_secs() < 10,
        "spawning children took {:?}",
        start.elapsed()
    );
    assert_eq!(f.latest_link(), "v/1", "a child's close committed");
    drop(file);
    assert_eq!(f.latest_link(), "v/2");
    // The opener itself closing at exec: a commit point (its last close), and no hang.
    let py = python(&[]);
    let script = "import os, sys\n\
        f = open(sys.argv[1], 'wb')\n\
        f.write(open(sys.argv[2], 'rb').read())\n\
        f.flush()\n\
        os.execv('/bin/true', ['true'])\n";
    let start = std::time::Instant::now();
    ok(
        &py,
        &[
            "-c",
            script,
            f.m("incoming/opener.jsonl").to_str().unwrap(),
            fixture("flights-mar.jsonl").to_str().unwrap(),
        ],
    );
    assert!(start.elapsed().as_secs() < 10, "exec took {:?}", start.elapsed());
    assert_eq!(f.latest_link(), "v/3");
    assert_eq!(lines(&f.read_v(3)).len(), 1800 + 600 + 600);
}

/// Commits in a row through the mount advance the log segment without listing `_delta_log/`
/// again (docs/FORMAT.md, "The log segment"), yet any change made to the log by someone else
/// between two of them is seen: a stray commit three versions ahead, copied in right after a
/// commit, stops the next one (nothing is published into the hole, the close fails), and a
/// CLI append in between is built on, never overwritten.
#[test]
fn commits_in_a_row_see_a_stray_commit_or_a_cli_append_made_between_them() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let _m = f.mount();
    let row = lines(&fixture_bytes("flights-feb.jsonl"))[0].to_vec();
    fs::write(f.dir.path().join("row.jsonl"), [&row[..], b"\n"].concat()).unwrap();
    let log = f.table.join("_delta_log");
    let name = |v: u64| log.join(format!("{v:020}.json"));
    let script = r#"r=$(cat row.jsonl)
        for i in 1 2 3 4 5; do echo "$r" > "$M/incoming/a$i.jsonl" || exit 1; done
        cp "$T/_delta_log/00000000000000000006.json" "$T/_delta_log/00000000000000000009.json"
        echo "$r" > "$M/incoming/b.jsonl" && echo "b committed""#;
    let out = sh(f.dir.path(), script, &f.mnt, &f.table);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("b committed"), "a commit into the hole: {stdout}");
    assert!(
        name(6).exists(),
        "the five commits: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !name(7).exists(),
        "nothing published into the hole below the stray commit 9"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("b.jsonl"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::remove_file(name(9)).unwrap();
    // (Refused at its open or at its close: either way nothing was committed.)
    if f.m("incoming/b.jsonl").exists() {
        fs::remove_file(f.m("incoming/b.jsonl")).unwrap();
    }
    let mut script =
        String::from(r#"r=$(cat row.jsonl); for i in 1 2 3; do echo "$r" > "$M/incoming/c$i.jsonl" || exit 1; done"#);
    script.push_str(&format!(
        "\n{TD_BIN} append \"$T\" --file row.jsonl > /dev/null || exit 1\necho \"$r\" > \"$M/incoming/d.jsonl\" || exit 1"
    ));
    let out = sh(f.dir.path(), &script, &f.mnt, &f.table);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        f.latest(),
        11,
        "versions 7-9 from the mount, 10 from the CLI, 11 from the mount"
    );
    let v10 = fs::read_to_string(name(10)).unwrap();
    let v11 = fs::read_to_string(name(11)).unwrap();
    assert!(!v10.contains("stagingId") && v11.contains("d.jsonl"), "{v10}\n{v11}");
    assert_eq!(lines(&f.read_v(11)).len(), 1800 + 5 + 3 + 1 + 1);
}

/// A remount on the same mount point right after `fusermount3 -u` stays mounted: the daemon of
/// the old mount, as it exits, must not unmount the path, which by then holds the new mount
/// (fuser's mount handle unmounts by path when dropped; 3 of 40 such remounts were undone before
/// the daemon forgot it). Three tables take turns on one mount point; nobody waits for the old
/// daemon to exit.
#[test]
fn a_remount_right_after_an_unmount_is_not_undone_by_the_old_daemon() {
    let tables: Vec<Fixture> = (0..3).map(|_| Fixture::empty(&["id:int"])).collect();
    let mnt = tables[0].mnt.clone();
    let mut pids = Vec::new();
    for round in 0..40 {
        let table = &tables[round % 3].table;
        if is_mounted(&mnt) {
            let out = run("fusermount3", &[std::ffi::OsStr::new("-u"), mnt.as_os_str()]);
            assert!(out.status.success(), "fusermount3 -u: {out:?}");
        }
        ok(MOUNT_BIN, &[table.as_os_str(), mnt.as_os_str()]);
        pids.push(daemon_pid(table).expect("the daemon's pid"));
        // The old daemon exits within this time (it gets ENODEV at once).
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert!(
            is_mounted(&mnt),
            "round {round}: the mount of {} was undone after tinydelta-mount returned",
            table.display()
        );
        let names = fs::read_dir(&mnt).expect("list the mount").count();
        assert_eq!(names, 5, "round {round}: the mount point lists the mount's 5 names");
    }
    let _ = run("fusermount3", &[std::ffi::OsStr::new("-u"), mnt.as_os_str()]);
    for pid in pids {
        assert!(
            wait_for(20, || !alive(pid)),
            "daemon {pid} still running after its unmount"
        );
    }
}

/// A signal to a daemon whose mount is no longer on its path (detached by `umount -l` while a
/// reader holds a file of it, and another table mounted there since) leaves the path's mount
/// alone; the old daemon exits once its last file is closed (docs/MOUNT.md "Starting and stopping";
/// the signal once unmounted the newer mount).
#[test]
fn a_signal_to_a_detached_daemon_leaves_the_newer_mount_alone() {
    let a = Fixture::empty(&["id:int"]);
    let b = Fixture::empty(&["id:int"]);
    let mnt = a.mnt.clone();
    ok(MOUNT_BIN, &[a.table.as_os_str(), mnt.as_os_str()]);
    let pid_a = daemon_pid(&a.table).expect("daemon a's pid");
    let reader = fs::File::open(mnt.join("v/0/commit.json")).expect("open a file of mount a");
    ok("umount", &[std::ffi::OsStr::new("-l"), mnt.as_os_str()]);
    ok(MOUNT_BIN, &[b.table.as_os_str(), mnt.as_os_str()]);
    let pid_b = daemon_pid(&b.table).expect("daemon b's pid");
    // SAFETY: kill(2) of a pid this test started.
    unsafe {
        libc::kill(pid_a as i32, libc::SIGTERM);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(is_mounted(&mnt), "the mount of table b was undone by daemon a's signal");
    assert!(alive(pid_b), "daemon b exited");
    assert_eq!(fs::read_dir(&mnt).expect("list mount b").count(), 5);
    drop(reader);
    assert!(
        wait_for(20, || !alive(pid_a)),
        "daemon a still running after its last file closed"
    );
    assert!(is_mounted(&mnt), "mount b is still there after daemon a exited");
    let _ = run("fusermount3", &[std::ffi::OsStr::new("-u"), mnt.as_os_str()]);
    assert!(
        wait_for(20, || !alive(pid_b)),
        "daemon b still running after its unmount"
    );
}

#[test]
fn lseek_seek_data_and_seek_hole_are_answered_by_the_daemon() {
    // DuckDB and pandas probe files with SEEK_DATA / SEEK_HOLE (docs/MOUNT.md "Reading"): the
    // daemon answers them (files have no holes) instead of logging "Not Implemented".
    let py = python(&[]);
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let m = f.mount();
    let script = r#"
import os, sys, errno
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT if "/incoming/" in path else os.O_RDONLY)
    if "/incoming/" in path:
        os.write(fd, b'{"x":1}\n')
    size = os.fstat(fd).st_size
    assert size > 0, path
    out = [size, os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 5, os.SEEK_DATA), os.lseek(fd, 0, os.SEEK_HOLE),
           os.lseek(fd, size - 1, os.SEEK_HOLE)]
    for whence in (os.SEEK_DATA, os.SEEK_HOLE):
        try:
            os.lseek(fd, size, whence)
            out.append("no error")
        except OSError as e:
            out.append(errno.errorcode[e.errno])
    print(" ".join(map(str, out)))
    os.close(fd)
"#;
    let paths = [
        "v/1/data.jsonl",
        "v/2/data.jsonl",
        "v/2/commit.json",
        "changes.jsonl",
        "incoming/.s.tmp",
    ];
    let mut args = vec!["-c".to_string(), script.to_string()];
    args.extend(paths.iter().map(|p| f.m(p).display().to_string()));
    let out = String::from_utf8(ok(&py, &args)).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), paths.len(), "{out}");
    for (path, line) in paths.iter().zip(&lines) {
        let size = fs::metadata(f.m(path)).unwrap().len();
        assert_eq!(
            *line,
            format!("{size} 0 5 {size} {size} ENXIO ENXIO"),
            "lseek on {path}"
        );
    }
    fs::remove_file(f.m("incoming/.s.tmp")).unwrap();
    m.unmount();
    let log = m.log_text();
    assert!(log.contains("lseek"), "the daemon saw no lseek request:\n{log}");
    assert!(!log.contains("Not Implemented"), "{log}");
}
