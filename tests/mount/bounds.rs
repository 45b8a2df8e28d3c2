//! Bounded work for what a table writer or a reader can cause (docs/MOUNT.md "Limits",
//! docs/FORMAT.md "Parquet data files"): a Parquet file that decodes to far more rows than its
//! size, versions of thousands of data files, many versions, and the cache folders and log file
//! others could prepare. Each test asserts the bound itself: bytes written (`/proc/PID/io`),
//! descriptors (`/proc/PID/fd`), resident memory (`/proc/PID/status`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::mount::*;
use crate::support::user;

/// Commit `adds` (data file name, size) as version `v` of `table`, written as another Delta
/// writer would (no tinydelta `commitInfo`): for data made outside tinydelta.
fn hand_commit(table: &Path, v: u64, adds: &[(String, u64)]) {
    let mut text = String::new();
    for (name, size) in adds {
        text.push_str(
            &serde_json::json!({"add": {"path": name, "partitionValues": {}, "size": size,
                "modificationTime": 1_700_000_000_000i64, "dataChange": true}})
            .to_string(),
        );
        text.push('\n');
    }
    text.push_str(&format!(
        "{{\"commitInfo\":{{\"timestamp\":{},\"operation\":\"WRITE\"}}}}\n",
        1_700_000_000_000i64 + v as i64
    ));
    fs::write(table.join(format!("_delta_log/{v:020}.json")), text).unwrap();
}

/// Write a Parquet file at `path` holding `rows` rows of one dictionary-encoded string column
/// `s` whose one value is `mib` MiB of `x` (zstd): a few hundred bytes that decode to
/// `rows * mib` MiB of rows.
fn parquet_bomb(path: &Path, rows: usize, mib: usize) -> u64 {
    let py = python(&["pyarrow"]);
    let script = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
rows, mib = int(sys.argv[2]), int(sys.argv[3])
arr = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["x" * (mib << 20)]))
pq.write_table(pa.table({"s": arr}), sys.argv[1], compression="zstd", use_dictionary=True)
"#;
    let out = Command::new(&py)
        .arg("-c")
        .arg(script)
        .arg(path)
        .arg(rows.to_string())
        .arg(mib.to_string())
        .output()
        .expect("run python");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    fs::metadata(path).unwrap().len()
}

/// A table `s:str` whose version 1 adds `bomb.parquet` (2,000 rows of an 8 MiB string).
fn bomb_table() -> (Fixture, u64) {
    let f = Fixture::empty(&["s:str"]);
    let size = parquet_bomb(&f.table.join("bomb.parquet"), 2000, 8);
    hand_commit(&f.table, 1, &[("bomb.parquet".into(), size)]);
    (f, size)
}

/// `wchar` of `/proc/PID/io`: bytes the process (and the children it waited for) wrote.
fn wchar(pid: u32) -> u64 {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).expect("/proc/PID/io");
    io.lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("wchar")
}

/// Bytes in the files of `dir` (0 when it does not exist).
fn bytes_in(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// `tinydelta ARGS` in a shell that then prints its own `/proc/self/io` `wchar`, which counts
/// the bytes tinydelta wrote once it was waited for: (exit code of tinydelta, its stderr,
/// bytes it wrote).
fn td_counting(f: &Fixture, args: &[&str]) -> (i32, String, u64) {
    let cache = f.dir.path().join("cache");
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#""$@" >/dev/null 2>"$ERR"; rc=$?; echo "$rc $(grep '^wchar' /proc/$$/io)""#)
        .arg("sh")
        .arg(TD_BIN)
        .args(args)
        .env("ERR", f.dir.path().join("err"))
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut w = text.split_whitespace();
    let code: i32 = w.next().and_then(|c| c.parse().ok()).expect("exit code");
    let written: u64 = w.nth(1).and_then(|c| c.parse().ok()).expect("wchar");
    (code, fs::read_to_string(f.dir.path().join("err")).unwrap(), written)
}

/// A 742-byte Parquet file whose rows are 16 GB of JSONL: `read` refuses it naming the file,
/// having written nothing into the cache (default cap: 1000 times its size); with a cap that
/// lets one row through, the bytes written stay under the cap and the partial cache file is
/// deleted; the mount answers EIO the same way (docs/FORMAT.md "Parquet data files").
#[test]
fn a_parquet_bomb_writes_no_more_than_the_cap() {
    let (f, size) = bomb_table();
    let t = f.t();
    let jsonl = f.table.join("_tinydelta/jsonl");
    let (code, err, written) = td_counting(&f, &["read", &t]);
    assert_eq!(code, 1, "{err}");
    let cap = size * 1000;
    assert!(
        err.contains("bomb.parquet") && err.contains(&format!("more than {cap} bytes")),
        "{err}"
    );
    assert!(written < 64 << 10, "read wrote {written} bytes for a refused file");
    assert_eq!(bytes_in(&jsonl), 0);

    // A cap of one row and a bit: the first 8 MiB row is written, the second stops it.
    let cap = size * 20_000;
    let (code, err, written) = td_counting(&f, &["--max-convert-ratio", "20000", "read", &t]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("more than {cap} bytes")), "{err}");
    assert!(written > 8 << 20 && written <= cap, "wrote {written} bytes, cap {cap}");
    assert_eq!(bytes_in(&jsonl), 0, "the partial cache file was left behind");

    let m = f.mount_with(&["--max-convert-ratio", "20000"]);
    let before = wchar(m.pid);
    let e = fs::metadata(f.m("v/1/data.jsonl")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    let daemon_wrote = wchar(m.pid) - before;
    assert!(
        daemon_wrote <= cap + (64 << 10),
        "daemon wrote {daemon_wrote} bytes, cap {cap}"
    );
    assert_eq!(bytes_in(&jsonl), 0, "the partial cache file was left behind");
    assert!(m.log_text().contains("bomb.parquet"), "{}", m.log_text());
}

/// A reader of the mount killed while its `stat` converts a Parquet file stops the conversion:
/// the daemon deletes the partial cache file and says why (docs/FORMAT.md "Parquet data
/// files"). The conversion is slowed by the `convert-mib` failpoint (20 ms per MiB) so the
/// kill lands while it runs; a cap of 4 GiB keeps the test's disk bounded either way.
#[test]
fn a_conversion_stops_when_its_reader_is_killed() {
    let (f, _) = bomb_table();
    let jsonl = f.table.join("_tinydelta/jsonl");
    let m = f.mount_with_env(
        &["--max-convert-ratio", "100000000", "--max-convert-bytes", "4294967296"],
        &[("TINYDELTA_FAILPOINT", "convert-mib=sleep:20")],
    );
    let before = wchar(m.pid);
    let mut reader = Command::new("stat").arg(f.m("v/1/data.jsonl")).spawn().unwrap();
    assert!(
        wait_for(30, || bytes_in(&jsonl) >= 1 << 20),
        "the conversion never started"
    );
    reader.kill().unwrap();
    reader.wait().unwrap();
    assert!(
        wait_for(30, || fs::read_dir(&jsonl).map(|d| d.count()).unwrap_or(0) == 0),
        "the conversion went on after its reader was killed: {} bytes",
        bytes_in(&jsonl)
    );
    let wrote = wchar(m.pid) - before;
    assert!(wrote < 4 << 30, "daemon wrote {wrote} bytes");
    assert!(
        wait_for(10, || m.log_text().contains("the reader went away")),
        "{}",
        m.log_text()
    );
}

/// A `_tinydelta/jsonl` that is a symlink is ignored with a warning and the rows are cached in
/// the user's own folder (nothing is written through the link); a user whose HOME does not
/// exist caches in `$TMPDIR/tinydelta-<uid>` (made 0700), and a `tinydelta-<uid>` someone else
/// made there as a symlink is refused, naming it (docs/FORMAT.md "Parquet data files").
#[test]
fn an_untrusted_cache_folder_is_ignored_and_a_missing_home_falls_back_to_tmp() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let f = Fixture::empty(&["s:str"]);
    let py = python(&["pyarrow"]);
    let out = Command::new(&py)
        .arg("-c")
        .arg("import sys, pyarrow as pa, pyarrow.parquet as pq; pq.write_table(pa.table({'s': ['a', None]}), sys.argv[1])")
        .arg(f.table.join("p.parquet"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let size = fs::metadata(f.table.join("p.parquet")).unwrap().len();
    hand_commit(&f.table, 1, &[("p.parquet".into(), size)]);
    let rows = "{\"s\":\"a\"}\n{\"s\":null}\n";
    let outside = f.dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::create_dir(f.table.join("_tinydelta")).unwrap();
    std::os::unix::fs::symlink(&outside, f.table.join("_tinydelta/jsonl")).unwrap();
    let cache = f.dir.path().join("cache");
    let out = Command::new(TD_BIN)
        .args(["read", &f.t()])
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), rows);
    assert!(err.contains("_tinydelta/jsonl") && err.contains("ignored"), "{err}");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "wrote through the symlink");
    let own = fs::read_dir(cache.join("tinydelta"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(bytes_in(&own), rows.len() as u64);
    {
        let _m = f.mount_with_env(&[], &[("XDG_CACHE_HOME", cache.to_str().unwrap())]);
        assert_eq!(fs::read_to_string(f.m("latest/data.jsonl")).unwrap(), rows);
    }

    // Another user, without a home, reading a table it cannot write.
    let u = user::test_user();
    user::open_to_others(f.dir.path());
    let tmp = f.dir.path().join("tmp");
    fs::create_dir(&tmp).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).unwrap();
    let read_as_user = |tmpdir: &Path| {
        u.command(TD_BIN)
            .args(["read", &f.t()])
            .env_remove("XDG_CACHE_HOME")
            .env("HOME", "/nonexistent-home")
            .env("TMPDIR", tmpdir)
            .output()
            .unwrap()
    };
    let out = read_as_user(&tmp);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), rows);
    let own = fs::symlink_metadata(tmp.join(format!("tinydelta-{}", u.uid))).unwrap();
    assert!(own.is_dir());
    assert_eq!((own.uid(), own.mode() & 0o777), (u.uid, 0o700));

    // A `tinydelta-<uid>` planted as a symlink: refused, never followed.
    let trap: PathBuf = f.dir.path().join("tmp2");
    fs::create_dir(&trap).unwrap();
    fs::set_permissions(&trap, fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::symlink(&outside, trap.join(format!("tinydelta-{}", u.uid))).unwrap();
    let out = read_as_user(&trap);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("tinydelta-{}", u.uid)), "{err}");
    assert_eq!(
        fs::read_dir(&outside).unwrap().count(),
        0,
        "wrote through the planted symlink"
    );
}

/// A table whose version 1 has `n` one-row JSONL data files (one commit).
fn many_files(n: usize) -> Fixture {
    let f = Fixture::empty(&["id:int"]);
    let adds: Vec<(String, u64)> = (0..n)
        .map(|i| {
            let name = format!("part-{i:05}.jsonl");
            let row = format!("{{\"id\":{i}}}\n");
            fs::write(f.table.join(&name), &row).unwrap();
            (name, row.len() as u64)
        })
        .collect();
    hand_commit(&f.table, 1, &adds);
    f
}

/// The daemon's descriptors now: (all, those naming a file of `table`).
fn fds(pid: u32, table: &Path) -> (usize, usize) {
    let Ok(d) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let mut all = 0;
    let mut data = 0;
    for e in d.flatten() {
        all += 1;
        if fs::read_link(e.path()).is_ok_and(|t| {
            t.parent() == Some(table) && t.file_name().is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        }) {
            data += 1;
        }
    }
    (all, data)
}

/// Four concurrent `cat`s of a version with 3,000 data files keep the daemon under its cap of
/// 512 data file descriptors (sampled from /proc/PID/fd throughout), and a daemon whose
/// open-file limit is 1024 (`prlimit --nofile=1024:1024`) serves every row
/// (docs/MOUNT.md "Limits").
#[test]
fn reads_of_3000_data_files_stay_under_the_descriptor_cap() {
    let n = 3000;
    let f = many_files(n);
    let table = fs::canonicalize(&f.table).unwrap();
    {
        let m = f.mount();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (stop, table, pid) = (stop.clone(), table.clone(), m.pid);
            std::thread::spawn(move || {
                let mut peak = (0, 0);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (a, d) = fds(pid, &table);
                    peak = (peak.0.max(a), peak.1.max(d));
                }
                peak
            })
        };
        let readers: Vec<_> = (0..4)
            .map(|_| {
                Command::new("cat")
                    .arg(f.m("latest/data.jsonl"))
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for r in readers {
            let out = r.wait_with_output().unwrap();
            assert!(out.status.success());
            assert_eq!(lines(&out.stdout).len(), n);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (all, data) = sampler.join().unwrap();
        eprintln!("daemon descriptors at most: {all} in all, {data} of data files");
        assert!(data <= 512, "{data} data file descriptors open at once");
        assert!(data > 0, "the sampler saw no data file open");
    }
    // The same table under a hard limit of 1024 open files.
    let m = mount_with_nofile(&f, 1024);
    let out = Command::new("cat").arg(f.m("latest/data.jsonl")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(lines(&out.stdout).len(), n);
    drop(m);
}

/// Mount `f`'s table with the daemon under a hard and soft limit of `nofile` open files
/// (`prlimit --nofile=N:N`), its log in the fixture's folder.
fn mount_with_nofile(f: &Fixture, nofile: u32) -> Mount {
    let log = f.dir.path().join("prlimit.log");
    let out = Command::new("prlimit")
        .arg(format!("--nofile={nofile}:{nofile}"))
        .arg(MOUNT_BIN)
        .arg(f.t())
        .arg(&f.mnt)
        .arg("--log-file")
        .arg(&log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Mount {
        mnt: f.mnt.clone(),
        pid: daemon_pid(&f.table).expect("daemon pid"),
        log,
    }
}

/// A daemon started under `ulimit -n 64` (`prlimit --nofile=64:64`) keeps its data files
/// within a quarter of that limit: four concurrent `cat`s of a 300-file `data.jsonl`, a `cat` of
/// its 300 `parts/`, and commits through `incoming/` all succeed with every row, where a pool
/// of 512 answered `EMFILE` (docs/MOUNT.md "Limits").
#[test]
fn a_daemon_under_a_low_descriptor_limit_reads_300_files() {
    let n = 300;
    let f = many_files(n);
    let table = fs::canonicalize(&f.table).unwrap();
    let m = mount_with_nofile(&f, 64);
    let limits = fs::read_to_string(format!("/proc/{}/limits", m.pid)).unwrap();
    let nofile = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    assert!(nofile.split_whitespace().any(|w| w == "64"), "{nofile}");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (stop, table, pid) = (stop.clone(), table.clone(), m.pid);
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(fds(pid, &table).1);
            }
            peak
        })
    };
    for round in 0..2 {
        let readers: Vec<_> = (0..4)
            .map(|_| {
                Command::new("cat")
                    .arg(f.m("latest/data.jsonl"))
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for r in readers {
            let out = r.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(lines(&out.stdout).len(), n);
        }
        let mut parts: Vec<_> = fs::read_dir(f.m("v/1/parts"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        parts.sort();
        assert_eq!(parts.len(), n);
        let out = Command::new("cat").args(&parts).output().unwrap();
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, fs::read(f.m("latest/data.jsonl")).unwrap());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let data = sampler.join().unwrap();
    eprintln!("data file descriptors at most: {data}");
    assert!(
        data <= 16,
        "{data} data file descriptors open at once under a limit of 64"
    );
    for i in 0..3 {
        fs::write(
            f.m(&format!("incoming/low-{i}.jsonl")),
            format!("{{\"id\":{}}}\n", n + i),
        )
        .unwrap();
    }
    let out = Command::new("cat").arg(f.m("latest/data.jsonl")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(lines(&out.stdout).len(), n + 3);
    drop(m);
}

/// Concurrent writers into `incoming/` under `ulimit -n 64` (`prlimit --nofile=64:64`), while
/// `cat`s read a 40-file version and its `parts/`: rounds of 8, then of 16 threads each open a
/// file, write one row and close it at the same time; every close answers 0 and commits its row.
/// The daemon splits its 64 descriptors between its own, the pools and the commit threads
/// (16 data files, 8 staged files, 4 commits at once), where pools of 16 and 8 commit threads
/// answered `EMFILE` at the close (docs/MOUNT.md "Limits").
#[test]
fn concurrent_writers_commit_under_a_low_descriptor_limit() {
    let n = 40;
    let f = many_files(n);
    let m = mount_with_nofile(&f, 64);
    let mut rows = n;
    for (round, writers) in [8usize, 8, 8, 16, 16, 16].into_iter().enumerate() {
        let readers: Vec<_> = [f.m("latest/data.jsonl"), f.m("v/1/data.jsonl")]
            .iter()
            .map(|p| {
                Command::new("cat")
                    .arg(p)
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(writers));
        let threads: Vec<_> = (0..writers)
            .map(|i| {
                let (barrier, path) = (barrier.clone(), f.m(&format!("incoming/r{round}-{i}.jsonl")));
                let id = 10_000 + round * 100 + i;
                std::thread::spawn(move || -> Result<(), String> {
                    use std::io::Write;
                    use std::os::fd::IntoRawFd;
                    let file = fs::File::create(&path).map_err(|e| format!("open: {e}"));
                    barrier.wait();
                    let mut file = file?;
                    file.write_all(format!("{{\"id\":{id}}}\n").as_bytes())
                        .map_err(|e| format!("write: {e}"))?;
                    barrier.wait();
                    let fd = file.into_raw_fd();
                    // SAFETY: fd is ours, closed once; close(2)'s status is what is tested.
                    match unsafe { libc::close(fd) } {
                        0 => Ok(()),
                        _ => Err(format!("close: {}", std::io::Error::last_os_error())),
                    }
                })
            })
            .collect();
        let failed: Vec<String> = threads
            .into_iter()
            .filter_map(|t| t.join().expect("writer thread").err())
            .collect();
        for mut r in readers {
            assert!(r.wait().unwrap().success(), "round {round}: a reader failed");
        }
        assert!(
            failed.is_empty(),
            "round {round}: {} of {writers} writers failed: {failed:?}\nlog:\n{}",
            failed.len(),
            m.log_text()
        );
        rows += writers;
        let out = Command::new("cat").arg(f.m("latest/data.jsonl")).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(lines(&out.stdout).len(), rows, "round {round}");
    }
    assert!(!m.log_text().contains("Too many open files"), "{}", m.log_text());
    assert!(
        m.log_text()
            .contains("descriptor budget: 16 data files, 8 staged files, 4 commit threads"),
        "{}",
        m.log_text()
    );
    drop(m);
}

/// `VmRSS` of `pid`, bytes.
fn rss(pid: u32) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// `stat` of 200 versions of 1,000-1,200 data files each grows the daemon by no more than
/// its version cache's byte bound (1 MiB here) and a few MiB of its own, where a cache of 32
/// versions of any size grew it by about 12 MB (docs/MOUNT.md "Limits").
#[test]
fn the_version_cache_is_bounded_in_bytes() {
    let f = Fixture::empty(&["id:int"]);
    let versions = 1200u64;
    for v in 1..=versions {
        let name = format!("part-{v:05}-with-a-name-as-long-as-delta-rs-writes-them.jsonl");
        let row = format!("{{\"id\":{v}}}\n");
        fs::write(f.table.join(&name), &row).unwrap();
        hand_commit(&f.table, v, &[(name, row.len() as u64)]);
    }
    let m = f.mount_with(&["--version-cache-bytes", "1048576"]);
    fs::metadata(f.m("latest/data.jsonl")).unwrap();
    let base = rss(m.pid);
    for v in (versions - 200)..=versions {
        fs::metadata(f.m(&format!("v/{v}/data.jsonl"))).unwrap();
    }
    let grown = rss(m.pid).saturating_sub(base);
    eprintln!("daemon resident: {base} bytes, then {grown} more after 200 versions");
    assert!(grown < 6 << 20, "the daemon grew by {grown} bytes");
}
