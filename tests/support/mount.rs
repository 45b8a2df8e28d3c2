//! Helpers for tests that mount tables for real: a table built with the `tinydelta` CLI, the
//! `tinydelta-mount` daemon started in the background, and a guard that unmounts even when the
//! test fails. Missing FUSE or a missing tool is a test failure with a clear message, never a
//! skip.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The daemon under test.
pub const MOUNT_BIN: &str = env!("CARGO_BIN_EXE_tinydelta-mount");
/// The CLI.
pub const TD_BIN: &str = env!("CARGO_BIN_EXE_tinydelta");

#[allow(unused_imports)]
pub use super::FLIGHTS;

/// A fixture file of `tests/data/mount/`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mount")
        .join(name)
}

/// Its bytes.
pub fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// Lines of `b` (without the newline).
pub fn lines(b: &[u8]) -> Vec<&[u8]> {
    b.split(|c| *c == b'\n').filter(|l| !l.is_empty()).collect()
}

/// Fail (not skip) unless FUSE can be used here.
pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "these tests mount a real FUSE file system and need /dev/fuse (modprobe fuse, or run the container \
         with --device /dev/fuse --cap-add SYS_ADMIN)"
    );
    require_tool("fusermount3");
}

/// The path of `tool` on PATH; fails the test with an install hint when it is missing.
pub fn require_tool(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(tool);
        if p.is_file() {
            return p;
        }
    }
    panic!("this test needs the `{tool}` command, which is not on PATH (apt-get install fuse3 rsync jq)");
}

/// The Python interpreter for tests that use Python packages: `$TINYDELTA_PYTHON` (set by
/// scripts/test.sh), else the repo's `.venv/bin/python` if present, else `python3`. Fails clearly
/// if `modules` are missing.
pub fn python(modules: &[&str]) -> String {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let py = std::env::var("TINYDELTA_PYTHON").unwrap_or_else(|_| {
        if venv.exists() {
            venv.display().to_string()
        } else {
            "python3".into()
        }
    });
    let import = format!(
        "import {}",
        if modules.is_empty() {
            "sys".into()
        } else {
            modules.join(", ")
        }
    );
    let ok = Command::new(&py)
        .args(["-c", &import])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "this test needs Python with {modules:?}: set TINYDELTA_PYTHON to an interpreter that has them \
         (run scripts/test.sh, which makes .venv with deltalake and duckdb), tried {py:?}"
    );
    py
}

/// Run a command, return its output (never fails by itself).
pub fn run<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

/// Run a command that must succeed; its stdout.
pub fn ok<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Vec<u8> {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {:?} failed ({}): {}",
        args.iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `sh -c script` with `$M` = the mount point and `$T` = the table, in `dir`.
pub fn sh(dir: &Path, script: &str, mnt: &Path, table: &Path) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("M", mnt)
        .env("T", table)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("sh: {e}"))
}

/// A table in a temporary folder, with a mount point next to it.
pub struct Fixture {
    /// Keeps the folder alive.
    pub dir: tempfile::TempDir,
    /// The table.
    pub table: PathBuf,
    /// The (empty) mount point.
    pub mnt: PathBuf,
}

impl Fixture {
    /// A flights table with one append commit per fixture file (versions 1..=n).
    pub fn flights(files: &[&str]) -> Fixture {
        require_fuse();
        let dir = tempfile::tempdir().expect("tempdir");
        let table = dir.path().join("flights");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        let mut args = vec!["create".to_string(), table.display().to_string()];
        args.extend(FLIGHTS.iter().map(|s| s.to_string()));
        ok(TD_BIN, &args);
        let f = Fixture { dir, table, mnt };
        for file in files {
            f.td(&["append", &f.t(), "--file", &fixture(file).display().to_string()]);
        }
        f
    }

    /// An empty table (version 0) with `columns` (`tinydelta create` syntax), and a mount point.
    pub fn empty(columns: &[&str]) -> Fixture {
        require_fuse();
        let dir = tempfile::tempdir().expect("tempdir");
        let table = dir.path().join("t");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        let mut args = vec!["create".to_string(), table.display().to_string()];
        args.extend(columns.iter().map(|s| s.to_string()));
        ok(TD_BIN, &args);
        Fixture { dir, table, mnt }
    }

    /// The table path as a string.
    pub fn t(&self) -> String {
        self.table.display().to_string()
    }

    /// A path under the mount point.
    pub fn m(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Run the CLI; must succeed; stdout.
    pub fn td(&self, args: &[&str]) -> Vec<u8> {
        ok(TD_BIN, args)
    }

    /// `tinydelta read --version v`.
    pub fn read_v(&self, v: u64) -> Vec<u8> {
        self.td(&["read", &self.t(), "--version", &v.to_string()])
    }

    /// The newest version according to the CLI.
    pub fn latest(&self) -> u64 {
        let out = self.td(&["describe", &self.t(), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("describe --json");
        v["version"].as_u64().expect("version in describe --json")
    }

    /// Where `latest` points, read through the mount.
    pub fn latest_link(&self) -> String {
        std::fs::read_link(self.m("latest"))
            .expect("readlink latest")
            .display()
            .to_string()
    }

    /// Mount in the background (the command returns once the mount is ready).
    pub fn mount(&self) -> Mount {
        self.mount_with(&[])
    }

    /// Mount with extra arguments.
    pub fn mount_with(&self, extra: &[&str]) -> Mount {
        self.mount_with_env(extra, &[])
    }

    /// Mount with extra arguments and extra environment variables for the daemon (e.g.
    /// `TINYDELTA_FAILPOINT`, src/sys/failpoint.rs).
    pub fn mount_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Mount {
        let log = self.dir.path().join("mount.log");
        let mut args = vec![
            self.t(),
            self.mnt.display().to_string(),
            "--log-file".into(),
            log.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        // Auto compaction commits in the background when commits pause: tests of other
        // features count versions and files exactly, so it is off unless a test asks for it
        // (tests/mount/compaction.rs).
        if !extra.contains(&"--auto-compact") {
            args.extend(["--auto-compact".to_string(), "off".to_string()]);
        }
        let out = Command::new(MOUNT_BIN)
            .args(&args)
            .env("RUST_LOG", "debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("run tinydelta-mount");
        assert!(
            out.status.success(),
            "tinydelta-mount failed ({}): {}\nlog:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            is_mounted(&self.mnt),
            "tinydelta-mount returned but {} is not mounted",
            self.mnt.display()
        );
        let pid = daemon_pid(&self.table).expect("the daemon's pid in _staging/.lock");
        Mount {
            mnt: self.mnt.clone(),
            pid,
            log,
        }
    }
}

/// The daemon's pid, from the staging lock file it holds.
pub fn daemon_pid(table: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(table.join("_staging/.lock")).ok()?;
    text.trim().strip_prefix("pid ")?.parse().ok()
}

/// Whether `path` is a mount point (per /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = canon.display().to_string().replace(' ', "\\040");
    info.lines().any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// Whether process `pid` is alive (and not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

/// Poll `cond` for up to `secs`.
pub fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// A running mount. Dropping it unmounts (also when the test panicked) and waits for the daemon
/// to exit; on a failed test it prints the daemon's log.
pub struct Mount {
    /// Mount point.
    pub mnt: PathBuf,
    /// Daemon pid.
    pub pid: u32,
    /// Daemon log.
    pub log: PathBuf,
}

impl Mount {
    /// Unmount with `fusermount3 -u` and wait until the daemon has exited.
    pub fn unmount(&self) {
        let mut how = String::from("not mounted");
        if is_mounted(&self.mnt) {
            let out = run("fusermount3", &[OsStr::new("-u"), self.mnt.as_os_str()]);
            how = format!(
                "fusermount3 -u: {} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            if !out.status.success() {
                let _ = run("umount", &[OsStr::new("-l"), self.mnt.as_os_str()]);
                how.push_str("; then umount -l");
            }
        }
        if !wait_for(20, || !alive(self.pid)) {
            let pid = self.pid;
            let proc = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
            let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map(|d| {
                    d.filter_map(|t| t.ok())
                        .map(|t| {
                            let tp = t.path();
                            format!(
                                "{} {} wchan={} stack={}",
                                t.file_name().to_string_lossy(),
                                std::fs::read_to_string(tp.join("comm")).unwrap_or_default().trim(),
                                std::fs::read_to_string(tp.join("wchan")).unwrap_or_default(),
                                std::fs::read_to_string(tp.join("stack"))
                                    .unwrap_or_default()
                                    .replace('\n', " | ")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            panic!(
                "daemon {pid} still running 20 s after unmount ({how}); mounted: {}; stat: {}\nthreads:\n{}",
                is_mounted(&self.mnt),
                proc("stat"),
                threads.join("\n")
            );
        }
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = writeln!(
                std::io::stderr(),
                "--- daemon log ({}):\n{}",
                self.log.display(),
                self.log_text()
            );
        }
        if is_mounted(&self.mnt) {
            let out = run("fusermount3", &[OsStr::new("-u"), self.mnt.as_os_str()]);
            if !out.status.success() {
                let _ = run("umount", &[OsStr::new("-l"), self.mnt.as_os_str()]);
            }
        }
        if alive(self.pid) && !wait_for(10, || !alive(self.pid)) {
            // SAFETY: kill(2) of the daemon this test started.
            unsafe {
                libc::kill(self.pid as i32, libc::SIGKILL);
            }
            let _ = run("umount", &[OsStr::new("-l"), self.mnt.as_os_str()]);
        }
    }
}

/// A fixture around an empty folder `t` (the table is made by the test).
pub fn empty_fixture() -> Fixture {
    require_fuse();
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("t");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    Fixture { dir, table, mnt }
}

/// Run `script` with the deltalake Python (`sys.argv[1]` = `table`); its stdout. The script
/// ends with `os._exit(0)` once its output is flushed: deltalake's runtime threads can abort the
/// interpreter's teardown ("terminate called without an active exception") on a loaded machine,
/// after all the work is done.
pub fn py(script: &str, table: &Path) -> Vec<u8> {
    let py = python(&["deltalake", "pyarrow"]);
    let script = format!("{script}\nimport os as _os, sys as _sys\n_sys.stdout.flush()\n_os._exit(0)\n");
    let out = std::process::Command::new(&py)
        .arg("-c")
        .arg(&script)
        .arg(table)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `tinydelta ARGS`: (exit code, stdout, stderr).
pub fn td_any(args: &[&str]) -> (i32, Vec<u8>, String) {
    let out = run(TD_BIN, args);
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The Python of `.venv-delta` (DuckDB with its delta extension, from the pip package
/// `duckdb-extension-delta`): `$TINYDELTA_DELTA_PYTHON`, else the repo's `.venv-delta/bin/python`.
pub fn delta_python() -> String {
    std::env::var("TINYDELTA_DELTA_PYTHON").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(".venv-delta/bin/python")
            .display()
            .to_string()
    })
}

/// Run `query` in DuckDB over view `t` = `delta_scan(table)` (the newest version): each row's
/// values joined by tabs, one line per row.
pub fn delta_scan(table: &Path, query: &str) -> String {
    let script = r#"
import duckdb, os, sys, duckdb_extension_delta
base = os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions")
ext = [os.path.join(base, v, "delta.duckdb_extension") for v in sorted(os.listdir(base))][-1]
con = duckdb.connect()
con.execute("SET TimeZone = 'UTC'")
con.execute("LOAD '" + ext.replace("'", "''") + "'")
con.execute("CREATE VIEW t AS SELECT * FROM delta_scan('" + sys.argv[1].replace("'", "''") + "')")
for row in con.execute(sys.argv[2]).fetchall():
    print("\t".join("NULL" if v is None else str(v) for v in row))
"#;
    let out = Command::new(delta_python())
        .arg("-c")
        .arg(script)
        .arg(table)
        .arg(query)
        .output()
        .expect("run the DuckDB python (TINYDELTA_DELTA_PYTHON)");
    assert!(
        out.status.success(),
        "DuckDB delta_scan failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
