//! `tinydelta serve` (docs/SERVE.md): every endpoint over real HTTP against the real binary
//! (spawned on a free port, its printed address parsed), the safety rules (read-only without
//! `--writable`, the token, Host and Origin), and the page in headless Chromium
//! (`tests/browser/serve_page.py`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{BIN, TempTable, data, td};

/// A running `tinydelta serve`, killed on drop.
struct Serve {
    child: Child,
    port: u16,
    token: Option<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer: status, headers (lower-case names), body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    #[track_caller]
    fn json(&self) -> Value {
        assert_eq!(self.header("content-type"), Some("application/json"), "{self:?}");
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    #[track_caller]
    fn error(&self, status: u16) -> String {
        assert_eq!(self.status, status, "{}", String::from_utf8_lossy(&self.body));
        self.json()["error"].as_str().expect("an error sentence").to_string()
    }
}

impl Serve {
    #[track_caller]
    fn start(t: &TempTable, extra: &[&str]) -> Serve {
        let mut child = Command::new(BIN)
            .args(["serve", &t.p(), "--port", "0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tinydelta serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the address line");
        // "serving TABLE at http://127.0.0.1:PORT/[?token=T]"
        let url = line.trim().rsplit(' ').next().expect("an address").to_string();
        let rest = url
            .strip_prefix("http://127.0.0.1:")
            .unwrap_or_else(|| panic!("printed {line:?}"));
        let (port, tail) = rest.split_once('/').expect("a path");
        let token = tail.strip_prefix("?token=").map(str::to_string);
        Serve {
            child,
            port: port.parse().expect("a port"),
            token,
        }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// One request with `Host` set to this server unless `headers` sets it.
    fn req(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            head.push_str(&format!("Host: {}\r\n", self.host()));
        }
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).expect("send");
        // A refused upload may be answered before the body is read: the rest may not go out.
        let _ = s.write_all(body);
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        parse(&raw)
    }

    fn get(&self, path: &str) -> Answer {
        self.req("GET", path, &[], b"")
    }

    fn post(&self, path: &str, body: &[u8]) -> Answer {
        let token = self.token.clone().unwrap_or_default();
        self.req("POST", path, &[("X-Tinydelta-Token", &token)], body)
    }
}

fn parse(raw: &[u8]) -> Answer {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .expect("status line")
        .split(' ')
        .nth(1)
        .expect("status")
        .parse()
        .expect("status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let i = rest.windows(2).position(|w| w == b"\r\n").expect("chunk size");
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..i]).expect("hex").trim(), 16).expect("hex");
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[i + 2..i + 2 + n]);
            rest = &rest[i + 2 + n + 2..];
        }
        body = out;
    }
    Answer { status, headers, body }
}

/// The orders table: version 1 appends 8 rows, version 2 overwrites with 3.
fn orders() -> TempTable {
    let t = TempTable::new(&["id:int!", "region:str", "year:int"]);
    let ex = |f: &str| format!("{}/examples/{f}", env!("CARGO_MANIFEST_DIR"));
    t.td("append", &["--file", &ex("orders.jsonl")]).ok();
    t.td("overwrite", &["--file", &ex("orders-2025.jsonl")]).ok();
    t
}

fn lines_json(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("JSONL"))
        .collect()
}

/// The CLI's sentence for a failure: its stderr without `tinydelta: `.
fn cli_error(args: &[&str]) -> String {
    let out = td(args);
    assert_ne!(out.code, 0);
    out.stderr
        .trim_end()
        .strip_prefix("tinydelta: ")
        .expect("prefixed")
        .to_string()
}

#[test]
fn the_page_and_its_assets_are_served_with_their_types() {
    let t = orders();
    let s = Serve::start(&t, &[]);
    for (path, ty) in [
        ("/", "text/html; charset=utf-8"),
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/app.css", "text/css; charset=utf-8"),
    ] {
        let a = s.get(path);
        assert_eq!(a.status, 200, "{path}");
        assert_eq!(a.header("content-type"), Some(ty), "{path}");
        assert!(!a.body.is_empty());
    }
    // No framework, no CDN: every script and style is the server's own.
    let html = String::from_utf8(s.get("/").body).expect("utf-8");
    assert!(!html.contains("http://") && !html.contains("https://"), "{html}");
    assert!(
        s.get("/")
            .header("content-security-policy")
            .is_some_and(|c| c.contains("default-src 'self'"))
    );
    assert_eq!(s.get("/nothing").error(404), "no page \"/nothing\"");
    assert!(s.get("/api/nothing").error(404).contains("no endpoint"));
}

#[test]
fn versions_describe_and_schema_say_what_history_and_describe_say() {
    let t = orders();
    let s = Serve::start(&t, &[]);
    let v = s.get("/api/versions").json();
    assert_eq!(v["latest"], 2);
    assert_eq!(v["error"], Value::Null);
    assert_eq!(v["writable"], false);
    let vs = v["versions"].as_array().expect("versions");
    let ops: Vec<&str> = vs.iter().map(|e| e["operation"].as_str().expect("op")).collect();
    assert_eq!(ops, ["CREATE", "APPEND", "OVERWRITE"]);
    assert_eq!(
        (vs[1]["rowsAdded"].clone(), vs[1]["rowsRemoved"].clone()),
        (8.into(), 0.into())
    );
    assert_eq!(
        (vs[2]["rowsAdded"].clone(), vs[2]["rowsRemoved"].clone()),
        (3.into(), 8.into())
    );
    let history = t.td("history", &["--json"]).ok().json();
    for (e, h) in vs.iter().zip(history.as_array().expect("history")) {
        assert_eq!(e["time"], h["time"]);
        assert_eq!(e["rows"], h["tableRows"]);
        assert_eq!(e["files"], h["tableFiles"]);
    }
    for version in ["0", "1", "2"] {
        let d = s.get(&format!("/api/describe?version={version}")).json();
        let cli = t.td("describe", &["--version", version, "--json"]).ok().json();
        for k in [
            "version",
            "time",
            "rows",
            "bytes",
            "numFiles",
            "schema",
            "readableVersions",
            "tableId",
        ] {
            assert_eq!(d[k], cli[k], "{k} of version {version}");
        }
        let sc = s.get(&format!("/api/schema?version={version}")).json();
        assert_eq!(sc["columns"], cli["schema"]);
    }
    // The chart's numbers: bytes per version as describe says them.
    assert_eq!(vs[2]["bytes"], s.get("/api/describe?version=2").json()["bytes"]);
    // Errors carry the CLI's sentence.
    assert_eq!(
        s.get("/api/describe?version=9").error(404),
        cli_error(&["describe", &t.p(), "--version", "9"])
    );
    assert_eq!(s.get("/api/rows?version=x").error(400), "version=\"x\" is not a number");
}

#[test]
fn rows_come_a_page_at_a_time_across_files() {
    let t = TempTable::new(crate::support::CARS);
    for _ in 0..3 {
        t.append_file("cars.jsonl");
    }
    let s = Serve::start(&t, &[]);
    let all = lines_json(&t.td("read", &[]).ok().stdout);
    let per_file = all.len() / 3;
    // Pages that start inside one file and end in the next, and one past the end.
    for (offset, limit) in [
        (0, 5),
        (per_file as u64 - 2, 4),
        (2 * per_file as u64 + 7, 1000),
        (all.len() as u64, 10),
    ] {
        let p = s.get(&format!("/api/rows?offset={offset}&limit={limit}")).json();
        assert_eq!(p["total"], all.len() as u64);
        let want: Vec<Value> = all.iter().skip(offset as usize).take(limit as usize).cloned().collect();
        assert_eq!(
            p["rows"].as_array().expect("rows"),
            &want,
            "offset {offset} limit {limit}"
        );
    }
    let v1 = lines_json(&t.td("read", &["--version", "1"]).ok().stdout);
    let p = s.get("/api/rows?version=1&offset=100&limit=3").json();
    assert_eq!(p["rows"].as_array().expect("rows"), &v1[100..103].to_vec());
    assert_eq!(
        s.get("/api/rows?limit=1001").error(400),
        "limit=1001 is over the most rows one page holds (1000)"
    );
}

#[test]
fn changes_between_two_versions_are_the_change_feed_paged() {
    let t = orders();
    let s = Serve::start(&t, &[]);
    let c = s.get("/api/changes?from=1&to=2&offset=0&limit=1000").json();
    assert_eq!(
        (c["deleted"].clone(), c["inserted"].clone(), c["total"].clone()),
        (8.into(), 3.into(), 11.into())
    );
    let feed = lines_json(
        &t.td("changes", &["--from-version", "2", "--to-version", "2"])
            .ok()
            .stdout,
    );
    let rows = c["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), feed.len());
    for (r, f) in rows.iter().zip(&feed) {
        assert_eq!(r["_change_type"], f["_change_type"]);
        assert_eq!(r["_commit_version"], f["_commit_version"]);
        for (k, v) in r["row"].as_object().expect("row") {
            assert_eq!(&f[k], v);
        }
    }
    let p = s.get("/api/changes?from=1&to=2&offset=7&limit=2").json();
    let types: Vec<&str> = p["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["_change_type"].as_str().expect("type"))
        .collect();
    assert_eq!(types, ["delete", "insert"]);
    // From 0 to 2: version 1's inserts, then version 2's deletes and inserts.
    let all = s.get("/api/changes?from=0&to=2").json();
    assert_eq!((all["deleted"].clone(), all["inserted"].clone()), (8.into(), 11.into()));
    assert_eq!(s.get("/api/changes?from=2&to=1").error(400), "from=2 is after to=1");
    assert!(s.get("/api/changes?from=0&to=7").error(404).contains("version 7"));
}

#[test]
fn without_writable_every_write_is_refused_and_nothing_commits() {
    let t = orders();
    let s = Serve::start(&t, &[]);
    assert!(s.token.is_none(), "a read-only server prints no token");
    let rows = std::fs::read(data("cars.jsonl")).expect("fixture");
    let refused = s.post("/api/append?name=x.jsonl", &rows).error(403);
    assert!(
        refused.contains("read-only") && refused.contains("--writable"),
        "{refused}"
    );
    s.post("/api/restore?version=1", b"").error(403);
    let a = s.get("/api/append");
    a.error(405);
    assert_eq!(a.header("allow"), Some("POST"));
    s.req("PUT", "/api/rows", &[], b"").error(405);
    s.req("DELETE", "/", &[], b"").error(405);
    assert_eq!(s.get("/api/versions").json()["latest"], 2);
    t.td("describe", &["--json"]).ok();
    assert_eq!(t.td("describe", &["--json"]).ok().json()["version"], 2);
}

#[test]
fn host_and_origin_must_name_this_server() {
    let t = orders();
    let s = Serve::start(&t, &["--writable"]);
    let port = s.port;
    // DNS rebinding: a name that resolves to 127.0.0.1 is still not this server's name.
    let e = s
        .req(
            "GET",
            "/api/versions",
            &[("Host", &format!("evil.example:{port}"))],
            b"",
        )
        .error(403);
    assert!(e.contains("Host header \"evil.example:"), "{e}");
    s.req("GET", "/", &[("Host", "127.0.0.1:1")], b"").error(403);
    s.req("GET", "/", &[("Host", "")], b"").error(403);
    assert_eq!(
        s.req("GET", "/api/versions", &[("Host", &format!("localhost:{port}"))], b"")
            .status,
        200
    );
    // A cross-site post, even with the token.
    let token = s.token.clone().expect("a token");
    let e = s
        .req(
            "POST",
            "/api/restore?version=1",
            &[("Origin", "http://evil.example"), ("X-Tinydelta-Token", &token)],
            b"",
        )
        .error(403);
    assert!(e.contains("Origin \"http://evil.example\""), "{e}");
    let own = format!("http://127.0.0.1:{port}");
    assert_eq!(s.req("GET", "/api/versions", &[("Origin", &own)], b"").status, 200);
    assert_eq!(
        t.td("describe", &["--json"]).ok().json()["version"],
        2,
        "nothing committed"
    );
}

#[test]
fn writes_need_the_token_and_a_bad_file_shows_appends_messages() {
    let t = orders();
    let s = Serve::start(&t, &["--writable", "--max-upload-bytes", "4096"]);
    let token = s.token.clone().expect("a token in the printed address");
    assert_eq!(token.len(), 64);
    let good = std::fs::read(format!("{}/examples/orders.jsonl", env!("CARGO_MANIFEST_DIR"))).expect("fixture");
    // No token, a wrong one.
    let e = s.req("POST", "/api/append?name=a.jsonl", &[], &good).error(403);
    assert!(e.contains("token"), "{e}");
    s.req("POST", "/api/append?name=a.jsonl", &[("X-Tinydelta-Token", "0")], &good)
        .error(403);
    s.req(
        "POST",
        "/api/append?name=a.jsonl",
        &[("X-Tinydelta-Token", &token[..63])],
        &good,
    )
    .error(403);
    // A bad file: the lines `append` prints, nothing committed.
    let bad_path = format!("{}/examples/orders-bad.jsonl", env!("CARGO_MANIFEST_DIR"));
    let bad = std::fs::read(&bad_path).expect("fixture");
    let a = s.post("/api/append?name=orders-bad.jsonl", &bad);
    a.error(422);
    let got: Vec<String> = a.json()["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m.as_str().expect("text").to_string())
        .collect();
    let cli = t.td_in("append", &[], &bad).code(5);
    let want: Vec<String> = cli
        .stderr
        .lines()
        .map(|l| {
            l.strip_prefix("tinydelta: ")
                .expect("prefixed")
                .replace("<stdin>", "orders-bad.jsonl")
        })
        .collect();
    assert_eq!(got, want);
    assert!(got[0].contains("line 2, column \"year\""), "{got:?}");
    assert_eq!(
        t.td("describe", &["--json"]).ok().json()["version"],
        2,
        "nothing committed"
    );
    // Over --max-upload-bytes: 413, nothing committed.
    let big = good.repeat(4096 / good.len() + 1);
    let e = s.post("/api/append?name=big.jsonl", &big).error(413);
    assert!(e.contains("--max-upload-bytes"), "{e}");
    // The token in the query works too; the good file commits.
    let ok = s.req(
        "POST",
        &format!("/api/append?name=orders.jsonl&token={token}"),
        &[],
        &good,
    );
    assert_eq!(ok.status, 200, "{}", String::from_utf8_lossy(&ok.body));
    let j = ok.json();
    assert_eq!(
        (j["committed"].clone(), j["version"].clone(), j["rows"].clone()),
        (true.into(), 3.into(), 8.into())
    );
    assert_eq!(j["message"], format!("appended 8 rows to {} as version 3", t.p()));
    // No rows: nothing committed, said as `append` says it.
    let none = s.post("/api/append?name=empty.jsonl", b"").json();
    assert_eq!(
        none["message"],
        format!("no rows in empty.jsonl; nothing committed to {}", t.p())
    );
    // --expect-version as `expect`: a conflict, with the CLI's sentence.
    s.post("/api/append?name=orders.jsonl&expect=1", &good).error(409);
    // Restore to version 1.
    let r = s.post("/api/restore?version=1", b"").json();
    assert_eq!(r["version"], 4);
    assert_eq!(
        t.td("read", &[]).ok().stdout,
        t.td("read", &["--version", "1"]).ok().stdout
    );
    assert_eq!(
        s.post("/api/restore?version=99", b"").error(404),
        cli_error(&["restore", &t.p(), "--version", "99"])
    );
}

#[test]
fn events_say_each_commit_of_any_writer() {
    let t = orders();
    let s = Serve::start(&t, &[]);
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    write!(c, "GET /api/events HTTP/1.1\r\nHost: {}\r\n\r\n", s.host()).expect("send");
    let mut r = BufReader::new(c);
    let mut next_event = || -> (String, String) {
        let (mut event, mut data) = (String::new(), String::new());
        loop {
            let mut l = String::new();
            assert!(r.read_line(&mut l).expect("read an event") > 0, "the stream ended");
            let l = l.trim_end();
            if let Some(e) = l.strip_prefix("event: ") {
                event = e.to_string();
            } else if let Some(d) = l.strip_prefix("data: ") {
                data = d.to_string();
            } else if l.is_empty() && !event.is_empty() {
                return (event, data);
            }
        }
    };
    assert_eq!(next_event(), ("version".into(), r#"{"latest":2}"#.into()));
    let more = format!("{}/examples/orders-2025.jsonl", env!("CARGO_MANIFEST_DIR"));
    t.td("append", &["--file", &more]).ok();
    assert_eq!(next_event(), ("version".into(), r#"{"latest":3}"#.into()));
}

#[test]
fn a_damaged_table_shows_its_error_never_a_blank_page() {
    let t = orders();
    let s = Serve::start(&t, &[]);
    // Version 2's commit damaged in place.
    std::fs::write(t.log_dir().join("00000000000000000002.json"), b"{not json\n").expect("damage");
    assert_eq!(s.get("/").status, 200);
    let a = s.get("/api/versions");
    let body = String::from_utf8_lossy(&a.body).into_owned();
    assert!(a.status == 200 || a.status == 500, "{body}");
    let err = a.json()["error"].as_str().map(str::to_string).expect("the damage said");
    assert!(err.contains("00000000000000000002.json"), "{err}");
    let e = s.get("/api/rows?version=2").error(500);
    assert!(e.contains("00000000000000000002.json"), "{e}");
}

/// The page in headless Chromium driven through WebDriver (`tests/browser/serve_page.py`):
/// load, drag the timeline, compare, a CLI commit appearing live, a bad and a good drop; the
/// screenshots land in `target/serve-screenshots/`.
#[test]
fn the_page_works_in_headless_chromium() {
    let py = std::env::var_os("TINYDELTA_PYTHON")
        .unwrap_or_else(|| format!("{}/.venv/bin/python", env!("CARGO_MANIFEST_DIR")).into());
    let out_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/serve-screenshots");
    let work = tempfile::tempdir().expect("tempdir");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/serve_page.py");
    let out = Command::new(&py)
        .arg(&script)
        .args([BIN.as_ref(), work.path().as_os_str(), out_dir.as_os_str()])
        .arg(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "run {} (TINYDELTA_PYTHON; scripts/test.sh installs selenium and chromium): {e}",
                py.to_string_lossy()
            )
        });
    let text = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "the browser test failed:\n{text}");
    assert!(out_dir.join("01-loaded.png").exists(), "{text}");
}

/// Bytes the process has read so far (`rchar` of /proc/PID/io: every read(2), cached or not).
fn rchar(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("read /proc/PID/io");
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .expect("rchar")
        .parse()
        .expect("a number")
}

#[test]
fn a_deep_page_reads_its_rows_not_the_version() {
    let t = TempTable::new(&["id:int!", "s:str"]);
    let pad = "x".repeat(60);
    for f in 0..2 {
        let rows: String = (0..20_000)
            .map(|i| format!("{{\"id\":{},\"s\":\"{pad}\"}}\n", f * 20_000 + i))
            .collect();
        t.td_in("append", &[], rows.as_bytes()).ok();
    }
    let file_bytes = t.td("describe", &["--json"]).ok().json()["bytes"]
        .as_u64()
        .expect("bytes")
        / 2;
    assert!(file_bytes > 1_500_000, "{file_bytes}");
    let s = Serve::start(&t, &[]);
    let pid = s.child.id();
    // The first page inside the second file reads it once for its row marks.
    let p = s.get("/api/rows?offset=31000&limit=100").json();
    assert_eq!(p["rows"][0]["id"], 31000);
    // Any later page of that file reads at most one stretch between marks (64 KiB) and its rows.
    let before = rchar(pid);
    let p = s.get("/api/rows?offset=35000&limit=100").json();
    assert_eq!(p["rows"][99]["id"], 35099);
    let read = rchar(pid) - before;
    assert!(
        read < 256 << 10,
        "a page of 100 rows read {read} bytes of a {file_bytes}-byte file"
    );
    // The first page of a version reads no marks at all.
    let before = rchar(pid);
    assert_eq!(s.get("/api/rows?version=1&limit=100").json()["rows"][0]["id"], 0);
    let read = rchar(pid) - before;
    assert!(read < 256 << 10, "the first page read {read} bytes");
}

#[test]
fn event_streams_are_bounded() {
    let t = orders();
    let s = Serve::start(&t, &["--max-event-streams", "1"]);
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    write!(c, "GET /api/events HTTP/1.1\r\nHost: {}\r\n\r\n", s.host()).expect("send");
    let mut first = String::new();
    BufReader::new(c.try_clone().expect("clone"))
        .read_line(&mut first)
        .expect("status line");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let e = s.get("/api/events").error(503);
    assert_eq!(e, "too many event streams open (at most 1; --max-event-streams)");
}

#[test]
fn a_page_holds_at_most_its_bytes_of_rows() {
    let t = TempTable::new(&["id:int!", "s:str"]);
    let pad = "y".repeat(40_000);
    let rows: String = (0..600).map(|i| format!("{{\"id\":{i},\"s\":\"{pad}\"}}\n")).collect();
    t.td_in("append", &[], rows.as_bytes()).ok();
    let s = Serve::start(&t, &[]);
    let a = s.get("/api/rows?offset=0&limit=1000");
    let p = a.json();
    let n = p["rows"].as_array().expect("rows").len() as u64;
    // 16 MiB of rows of ~40 KB: the page stops at the row that reaches the budget.
    assert!(n < 600 && n * 40_000 <= (16 << 20) + 40_100, "{n} rows");
    assert!(a.body.len() < (16 << 20) + 100_000, "{} bytes", a.body.len());
    let next = s.get(&format!("/api/rows?offset={n}&limit=1000")).json();
    assert_eq!(next["rows"][0]["id"], n);
    assert_eq!(n + next["rows"].as_array().expect("rows").len() as u64, 600);
    let c = s.get("/api/changes?from=0&to=1&limit=1000").json();
    assert_eq!(c["rows"].as_array().expect("rows").len() as u64, n);
    assert_eq!(c["inserted"], 600);
}

#[test]
fn an_append_from_the_page_compacts_as_the_cli_does() {
    let t = orders();
    t.td(
        "alter",
        &[
            "set-property",
            "delta.autoOptimize.autoCompact=true",
            "tinydelta.autoCompact.minNumFiles=2",
        ],
    )
    .ok();
    let s = Serve::start(&t, &["--writable"]);
    let a = s.post("/api/append?name=one.jsonl", b"{\"id\":10}\n").json();
    assert_eq!(a["version"], 4);
    let ops: Vec<String> = t
        .td("history", &["--json"])
        .ok()
        .json()
        .as_array()
        .expect("history")
        .iter()
        .map(|e| e["operation"].as_str().expect("op").to_string())
        .collect();
    assert_eq!(ops.last().map(String::as_str), Some("OPTIMIZE"), "{ops:?}");
    assert_eq!(
        t.td("read", &[])
            .ok()
            .stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count(),
        4
    );
}
