//! Helpers shared by the three integration-test binaries (`tests/lib`, `tests/cli`,
//! `tests/mount`), each of which includes this tree once as `mod support;`.
//!
//! This file: temporary tables, running the real `tinydelta` binary as a separate process,
//! reading the log and the table folder, and failpoint control. [`mount`]: tables mounted for
//! real with `tinydelta-mount`. [`user`]: a second, unprivileged user.
//!
//! No binary uses every helper: dead code is allowed in this tree only.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tinydelta");

mod flights_schema;
#[allow(unused_imports)]
pub use flights_schema::FLIGHTS;

pub mod mount;
pub mod user;

/// The cars schema (vega_datasets): ints in float columns, dates.
pub const CARS: &[&str] = &[
    "Name:str",
    "Miles_per_Gallon:float",
    "Cylinders:int",
    "Displacement:float",
    "Horsepower:int",
    "Weight_in_lbs:int",
    "Acceleration:float",
    "Year:date",
    "Origin:str",
];

/// The penguins schema (palmerpenguins): nulls in many columns.
pub const PENGUINS: &[&str] = &[
    "species:str",
    "island:str",
    "bill_length_mm:float",
    "bill_depth_mm:float",
    "flipper_length_mm:int",
    "body_mass_g:int",
    "sex:str",
    "year:int",
];

/// A small schema with every type, one NOT NULL column.
pub const SMALL: &[&str] = &["id:int!", "x:float", "s:str", "b:bool", "d:date", "t:timestamp"];

/// A fixture in `tests/data/`.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// The bytes of a fixture.
pub fn data_bytes(name: &str) -> Vec<u8> {
    std::fs::read(data(name)).unwrap_or_else(|e| panic!("read fixture {name}: {e}"))
}

/// What a finished `tinydelta` process left behind.
#[derive(Debug)]
pub struct Out {
    /// Exit code (-1 if killed by a signal).
    pub code: i32,
    /// Raw stdout.
    pub stdout: Vec<u8>,
    /// stderr, lossily decoded.
    pub stderr: String,
}

impl Out {
    /// stdout, lossily decoded.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Assert exit 0 and return self.
    #[track_caller]
    pub fn ok(self) -> Self {
        assert_eq!(
            self.code,
            0,
            "expected success; stderr: {}; stdout: {}",
            self.stderr,
            self.text()
        );
        self
    }

    /// Assert an exit code and return self.
    #[track_caller]
    pub fn code(self, code: i32) -> Self {
        assert_eq!(
            self.code,
            code,
            "expected exit {code}; stderr: {}; stdout: {}",
            self.stderr,
            self.text()
        );
        self
    }

    /// Assert stderr contains every fragment.
    #[track_caller]
    pub fn stderr_has(self, fragments: &[&str]) -> Self {
        for f in fragments {
            assert!(self.stderr.contains(f), "stderr lacks {f:?}: {}", self.stderr);
        }
        self
    }

    /// Parse stdout as one JSON document.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.text()))
    }
}

/// A `tinydelta` command, not yet started.
pub fn cmd<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).env_remove("TINYDELTA_FAILPOINT").env("RUST_LOG", "warn");
    c
}

/// Run `tinydelta ARGS` with empty stdin.
pub fn td<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Out {
    run(cmd(args), b"")
}

/// Run `tinydelta ARGS` feeding `input` on stdin.
pub fn td_in<S: AsRef<std::ffi::OsStr>>(args: &[S], input: &[u8]) -> Out {
    run(cmd(args), input)
}

/// Run a prepared command feeding `input` on stdin, capturing everything.
pub fn run(mut c: Command, input: &[u8]) -> Out {
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn tinydelta");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        // The child may exit early (bad input): a broken pipe is fine.
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for tinydelta");
    let _ = feeder.join();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A table folder inside a temporary directory that is removed on drop.
pub struct TempTable {
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
    /// `<dir>/t`, the table folder.
    pub path: PathBuf,
}

impl TempTable {
    /// A path for a table that does not exist yet.
    pub fn uncreated() -> TempTable {
        let dir = tempfile::Builder::new()
            .prefix("tinydelta-test")
            .tempdir()
            .expect("tempdir");
        let path = dir.path().join("t");
        TempTable { dir, path }
    }

    /// A table created with `columns` (version 0).
    pub fn new(columns: &[&str]) -> TempTable {
        let t = Self::uncreated();
        let mut args = vec!["create".to_string(), t.p()];
        args.extend(columns.iter().map(|c| c.to_string()));
        td(&args).ok();
        t
    }

    /// The table path as a string argument.
    pub fn p(&self) -> String {
        self.path.to_str().expect("utf-8 temp path").to_string()
    }

    /// `_delta_log/`.
    pub fn log_dir(&self) -> PathBuf {
        self.path.join("_delta_log")
    }

    /// Run `tinydelta CMD TABLE REST...`.
    pub fn td(&self, command: &str, rest: &[&str]) -> Out {
        td(&self.args(command, rest))
    }

    /// Run `tinydelta CMD TABLE REST...` with `input` on stdin.
    pub fn td_in(&self, command: &str, rest: &[&str], input: &[u8]) -> Out {
        td_in(&self.args(command, rest), input)
    }

    /// `[command, table, rest...]`.
    pub fn args(&self, command: &str, rest: &[&str]) -> Vec<String> {
        let mut a = vec![command.to_string(), self.p()];
        a.extend(rest.iter().map(|s| s.to_string()));
        a
    }

    /// Append `input` via stdin and return the new version (panics on failure).
    #[track_caller]
    pub fn append(&self, input: &[u8]) -> u64 {
        let out = self.td_in("append", &[], input).ok();
        version_in(&out.text())
    }

    /// Append a fixture via `--file` and return the new version.
    #[track_caller]
    pub fn append_file(&self, fixture: &str) -> u64 {
        let f = data(fixture);
        let out = self.td("append", &["--file", f.to_str().expect("utf-8 path")]).ok();
        version_in(&out.text())
    }

    /// Overwrite with `input` via stdin and return the new version.
    #[track_caller]
    pub fn overwrite(&self, input: &[u8]) -> u64 {
        let out = self.td_in("overwrite", &[], input).ok();
        version_in(&out.text())
    }

    /// `read` of the latest version.
    #[track_caller]
    pub fn read(&self) -> Vec<u8> {
        self.td("read", &[]).ok().stdout
    }

    /// `read --version V`.
    #[track_caller]
    pub fn read_v(&self, v: u64) -> Vec<u8> {
        self.td("read", &["--version", &v.to_string()]).ok().stdout
    }

    /// `describe --json` of the latest version.
    #[track_caller]
    pub fn describe(&self) -> Value {
        self.td("describe", &["--json"]).ok().json()
    }

    /// The newest version per `describe --json`.
    #[track_caller]
    pub fn latest(&self) -> u64 {
        self.describe()["version"].as_u64().expect("describe.version")
    }

    /// Versions present in `_delta_log/` (from the file names alone), ascending.
    pub fn log_versions(&self) -> Vec<u64> {
        let mut v: Vec<u64> = std::fs::read_dir(self.log_dir())
            .expect("list _delta_log")
            .filter_map(|e| {
                let name = e.expect("dir entry").file_name().into_string().ok()?;
                let stem = name.strip_suffix(".json")?;
                (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit())).then(|| stem.parse().ok())?
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// Names of `_delta_log/` entries that are commit temporaries (`.<v>.<uuid>.tmp`).
    pub fn tmp_files(&self) -> Vec<String> {
        names_in(&self.log_dir())
            .into_iter()
            .filter(|n| n.starts_with('.') && n.ends_with(".tmp"))
            .collect()
    }

    /// `part-*.jsonl` names in the table folder.
    pub fn part_files(&self) -> BTreeSet<String> {
        names_in(&self.path)
            .into_iter()
            .filter(|n| n.starts_with("part-") && n.ends_with(".jsonl"))
            .collect()
    }

    /// Every path any `add` of any version names.
    pub fn referenced(&self) -> BTreeSet<String> {
        let mut s = BTreeSet::new();
        for v in self.log_versions() {
            for a in self.commit(v) {
                if let Some(p) = a["add"]["path"].as_str() {
                    s.insert(p.to_string());
                }
            }
        }
        s
    }

    /// The raw bytes of commit `v`.
    pub fn commit_bytes(&self, v: u64) -> Vec<u8> {
        std::fs::read(self.log_dir().join(format!("{v:020}.json"))).unwrap_or_else(|e| panic!("read commit {v}: {e}"))
    }

    /// The actions of commit `v`, one JSON value per line.
    pub fn commit(&self, v: u64) -> Vec<Value> {
        let bytes = self.commit_bytes(v);
        let text = String::from_utf8(bytes).expect("commit is UTF-8");
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("commit {v} line {l:?}: {e}")))
            .collect()
    }

    /// Write a crafted commit file as version `v` (test setup only).
    pub fn write_commit(&self, v: u64, lines: &[Value]) {
        let mut s = String::new();
        for l in lines {
            s.push_str(&l.to_string());
            s.push('\n');
        }
        std::fs::write(self.log_dir().join(format!("{v:020}.json")), s).expect("write crafted commit");
    }

    /// Snapshot of what a reader can observe: every version's `read` output.
    #[track_caller]
    pub fn all_reads(&self) -> Vec<Vec<u8>> {
        (0..=self.latest()).map(|v| self.read_v(v)).collect()
    }
}

/// Names in a folder.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The version number in "... as version N" (the CLI's write confirmations).
#[track_caller]
pub fn version_in(stdout: &str) -> u64 {
    let (_, rest) = stdout
        .rsplit_once("as version ")
        .unwrap_or_else(|| panic!("no 'as version N' in {stdout:?}"));
    rest.trim()
        .parse()
        .unwrap_or_else(|e| panic!("bad version in {stdout:?}: {e}"))
}

/// `n` canonical rows of the SMALL schema with ids `start..start+n`.
pub fn small_rows(start: i64, n: i64) -> Vec<u8> {
    let mut s = String::new();
    for id in start..start + n {
        s.push_str(&small_row(id));
    }
    s.into_bytes()
}

/// One canonical SMALL row (with its newline).
pub fn small_row(id: i64) -> String {
    format!(
        "{{\"id\":{id},\"x\":{}.5,\"s\":\"row {id}\",\"b\":{},\"d\":\"2024-01-{:02}\",\"t\":\"2024-01-01T00:00:{:02}Z\"}}\n",
        id,
        id % 2 == 0,
        id % 28 + 1,
        id % 60
    )
}

/// Lines of a byte buffer.
pub fn lines(b: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(b).lines().map(str::to_string).collect()
}

/// The `id` of every row of `read` output.
pub fn ids(b: &[u8]) -> Vec<i64> {
    lines(b)
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("row {l:?}: {e}"));
            v["id"].as_i64().unwrap_or_else(|| panic!("row without id: {l}"))
        })
        .collect()
}

/// How long helpers wait for a child to reach a state before giving up (a hang guard, not a
/// timing assertion).
pub const HANG_GUARD: Duration = Duration::from_secs(120);

/// The state letter of `/proc/PID/stat` (R, S, D, T, Z...), or `None` once the process is gone.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": comm may contain spaces or parentheses, so split at the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// Block until `pid` is stopped (state T), panicking with `what` if it exits or hangs first.
pub fn wait_stopped(pid: u32, what: &str) {
    let start = Instant::now();
    loop {
        match proc_state(pid) {
            Some('T') | Some('t') => return,
            Some('Z') | None => panic!("{what}: pid {pid} exited instead of freezing"),
            _ => {}
        }
        assert!(start.elapsed() < HANG_GUARD, "{what}: pid {pid} never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Send a signal to a child we started.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a pid of a child this test spawned.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
}

/// A `tinydelta` child running with a failpoint, its stdin already fed and closed.
pub struct Writer {
    /// The process.
    pub child: Child,
    /// Reads its stderr line by line.
    pub stderr: BufReader<std::process::ChildStderr>,
    /// stderr seen so far.
    pub seen: String,
}

impl Writer {
    /// Start `tinydelta ARGS` with `TINYDELTA_FAILPOINT=failpoint` (empty for none) and `input`
    /// on stdin.
    pub fn spawn(args: &[String], failpoint: &str, input: &[u8]) -> Writer {
        let mut c = cmd(args);
        if !failpoint.is_empty() {
            c.env("TINYDELTA_FAILPOINT", failpoint);
        }
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn tinydelta");
        {
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(input).expect("feed stdin");
        }
        let stderr = BufReader::new(child.stderr.take().expect("stderr"));
        Writer {
            child,
            stderr,
            seen: String::new(),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for the `failpoint NAME: frozen pid PID` line, then for the process to be stopped.
    pub fn wait_frozen(&mut self, name: &str) {
        let want = format!("failpoint {name}: frozen pid {}", self.pid());
        loop {
            let mut line = String::new();
            let n = self.stderr.read_line(&mut line).expect("read child stderr");
            assert!(n > 0, "writer exited before freezing at {name}; stderr: {}", self.seen);
            self.seen.push_str(&line);
            if line.trim_end() == want {
                break;
            }
        }
        wait_stopped(self.pid(), name);
    }

    /// SIGCONT a frozen writer.
    pub fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// Wait for exit; returns (status, stdout, all stderr).
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let mut rest = String::new();
        self.stderr.read_to_string(&mut rest).expect("read child stderr");
        self.seen.push_str(&rest);
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            o.read_to_string(&mut out).expect("read child stdout");
        }
        let status = self.child.wait().expect("wait writer");
        (status, out, self.seen)
    }
}

/// Milliseconds since the epoch as RFC 3339 with milliseconds, UTC.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("valid ms")
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// Write version 1 of the table at `table` (created with one `i:int` column) as one tinydelta
/// append commit of `n` small `add` actions, each naming an 8-byte data file (hard links to one
/// file: no data blocks per file). For the memory bounds of log replay (docs/FORMAT.md "Log
/// replay and checkpoints").
pub fn write_many_adds_commit(table: &Path, n: u64) {
    // A new file every 50,000 links (ext4 allows 65,000 links to one inode).
    let mut one = table.join("one.jsonl");
    let ci = serde_json::json!({"commitInfo": {
        "timestamp": 4102444800000u64, "operation": "WRITE", "operationParameters": {"mode": "Append"},
        "readVersion": 0, "isolationLevel": "WriteSerializable", "isBlindAppend": true,
        "operationMetrics": {"numFiles": n.to_string(), "numOutputBytes": (8 * n).to_string(), "numOutputRows": n.to_string()},
        "engineInfo": "tinydelta/0.1.0"}});
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(table.join("_delta_log").join(format!("{:020}.json", 1))).expect("create commit"),
    );
    writeln!(w, "{ci}").expect("write commit");
    for i in 0..n {
        let name = format!("part-{i:07}.jsonl");
        if i % 50_000 == 0 {
            one = table.join(format!("one-{i}.jsonl"));
            std::fs::write(&one, b"{\"i\":1}\n").expect("write data file");
        }
        std::fs::hard_link(&one, table.join(&name)).expect("link data file");
        writeln!(
            w,
            r#"{{"add":{{"path":"{name}","size":8,"modificationTime":1,"dataChange":true,"stats":"{{\"numRecords\":1}}"}}}}"#
        )
        .expect("write commit");
    }
    w.flush().expect("write commit");
}

/// `VmHWM` (peak resident memory) of process `pid`, bytes.
pub fn vm_hwm(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .expect("VmHWM in /proc/PID/status")
        * 1024
}

/// Run `tinydelta ARGS` (output discarded) and return its exit code and peak resident memory in
/// bytes, as GNU `time -f %M` reports it. Not `wait4` of a child of this process: the child is
/// spawned with the test binary's memory (vfork), and Linux carries that memory's high-water mark
/// across `exec` into the child's `ru_maxrss`, so tests running alongside inflated the figure.
/// `time` is a small process, and its own child starts from that.
pub fn td_peak_rss<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (i32, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("rss");
    let status = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&report)
        .arg(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run /usr/bin/time (Debian's time package, which scripts/test.sh installs)");
    let text = std::fs::read_to_string(&report).expect("time's report");
    let kib: u64 = text
        .lines()
        .rev()
        .find_map(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("time printed no peak: {text:?}"));
    (status.code().unwrap_or(-1), kib * 1024)
}

/// Give version 0 of the tinydelta table at `table` the protocol tinydelta wrote before the
/// guard against other writers (reader 1, writer 2; docs/FORMAT.md "A guard against other
/// writers"), so that a real `deltalake` writer appends to it, as such tables let it.
pub fn legacy_protocol(table: &std::path::Path) {
    let f = table.join("_delta_log/00000000000000000000.json");
    let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
    let out: String = text
        .lines()
        .map(|l| {
            if l.starts_with("{\"protocol\"") {
                "{\"protocol\":{\"minReaderVersion\":1,\"minWriterVersion\":2}}\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert_ne!(out, text, "version 0 of {} has a protocol line", table.display());
    std::fs::write(&f, out).unwrap_or_else(|e| panic!("write {}: {e}", f.display()));
}
