//! `tinydelta serve` (docs/SERVE.md): a local web page over one table, and the JSON endpoints
//! behind it. A layer beside the mount (docs/ARCHITECTURE.md "The layers"): it stands on `ops`
//! and `table` and knows nothing of the mount.
//!
//! Threads: a fixed set of request workers (`threads`), one event thread that watches the log
//! and writes to the event streams, and the HTTP crate's connection readers (one per open
//! connection; docs/SERVE.md "Limits").

mod api;
mod rows;
mod timeline;

use std::io::{Cursor, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tiny_http::{Header, Method, Request, Response, StatusCode};

use crate::error::{Error, ErrorKind, Result};
use crate::table::Table;

/// The most bytes a file dropped on the page may have (`--max-upload-bytes`; docs/SERVE.md
/// "Limits"): 256 MiB.
pub const DEFAULT_MAX_UPLOAD_BYTES: u64 = 256 << 20;
/// Request workers (`--threads`).
pub const DEFAULT_THREADS: usize = 4;
/// Event streams (`GET /api/events`) open at once (`--max-event-streams`).
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 16;
/// The most rows one page (`GET /api/rows`, `GET /api/changes`) holds.
pub const MAX_PAGE_ROWS: u64 = 1000;

/// How `tinydelta serve` runs (docs/SERVE.md).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The address to listen on (default 127.0.0.1).
    pub bind: IpAddr,
    /// The port (0: any free port).
    pub port: u16,
    /// Accept appends and restores (with the per-run token).
    pub writable: bool,
    /// The most bytes of one upload.
    pub max_upload_bytes: u64,
    /// Request workers.
    pub threads: usize,
    /// Event streams open at once.
    pub max_event_streams: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            bind: IpAddr::from([127, 0, 0, 1]),
            port: 0,
            writable: false,
            max_upload_bytes: DEFAULT_MAX_UPLOAD_BYTES,
            threads: DEFAULT_THREADS,
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
        }
    }
}

/// What every request handler shares.
struct State {
    table: Table,
    /// The table as named on the command line (messages say it as the CLI does).
    shown: String,
    opts: ServeOptions,
    port: u16,
    token: String,
    timeline: Mutex<timeline::Timeline>,
    pager: rows::RowPager,
    streams: Mutex<Vec<Box<dyn Write + Send>>>,
}

/// A server listening, not yet serving ([`Server::run`]).
pub struct Server {
    http: Arc<tiny_http::Server>,
    state: Arc<State>,
}

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

impl Server {
    /// Open `table` and listen. Errors: as [`Table::open`]; [`Error::Io`] when the address cannot be
    /// bound.
    pub fn start(table: &Path, opts: ServeOptions) -> Result<Server> {
        let (t, _unwatched) = Table::open(table)?.watch_log();
        let addr = SocketAddr::new(opts.bind, opts.port);
        let http = tiny_http::Server::http(addr).map_err(|e| Error::Io {
            op: "listen on",
            path: PathBuf::from(addr.to_string()),
            source: std::io::Error::other(e.to_string()),
        })?;
        let port = http.server_addr().to_ip().map_or(opts.port, |a| a.port());
        let token = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        Ok(Server {
            http: Arc::new(http),
            state: Arc::new(State {
                table: t,
                shown: table.display().to_string(),
                opts,
                port,
                token,
                timeline: Mutex::new(timeline::Timeline::default()),
                pager: rows::RowPager::default(),
                streams: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The page's address; with `--writable` it carries the token (`?token=...`).
    pub fn url(&self) -> String {
        let st = &self.state;
        let host = match st.opts.bind {
            IpAddr::V6(a) if a.is_unspecified() => "[::1]".to_string(),
            IpAddr::V4(a) if a.is_unspecified() => "127.0.0.1".to_string(),
            IpAddr::V6(a) => format!("[{a}]"),
            IpAddr::V4(a) => a.to_string(),
        };
        if st.opts.writable {
            format!("http://{host}:{}/?token={}", st.port, st.token)
        } else {
            format!("http://{host}:{}/", st.port)
        }
    }

    /// Serve until the process ends: the request workers and the event thread.
    pub fn run(self) -> Result<()> {
        let st = self.state.clone();
        std::thread::Builder::new()
            .name("serve-events".into())
            .spawn(move || events_loop(&st))
            .map_err(|e| Error::io("start a thread for", self.state.table.root(), e))?;
        let mut workers = Vec::new();
        for i in 0..self.state.opts.threads.max(1) {
            let (http, st) = (self.http.clone(), self.state.clone());
            let w = std::thread::Builder::new()
                .name(format!("serve-{i}"))
                .spawn(move || {
                    while let Ok(req) = http.recv() {
                        handle(&st, req);
                    }
                })
                .map_err(|e| Error::io("start a thread for", self.state.table.root(), e))?;
            workers.push(w);
        }
        for w in workers {
            let _ = w.join();
        }
        Ok(())
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).unwrap_or_else(|()| {
        Header::from_bytes(&b"X-Invalid"[..], &b"1"[..]).expect("a constant header is valid")
    })
}

type Reply = Response<Cursor<Vec<u8>>>;

fn respond_bytes(status: u16, content_type: &str, body: Vec<u8>) -> Reply {
    Response::from_data(body)
        .with_status_code(StatusCode(status))
        .with_header(header("Content-Type", content_type))
        .with_header(header("Cache-Control", "no-store"))
        .with_header(header("X-Content-Type-Options", "nosniff"))
        .with_header(header("Referrer-Policy", "no-referrer"))
}

fn json_response(status: u16, v: &serde_json::Value) -> Reply {
    respond_bytes(status, "application/json", v.to_string().into_bytes())
}

fn error_response(status: u16, message: &str) -> Reply {
    json_response(status, &serde_json::json!({ "error": message }))
}

/// The HTTP status of a library error (docs/SERVE.md "Errors").
fn status_of(e: &Error) -> u16 {
    match e.kind() {
        ErrorKind::InvalidArgument => 400,
        ErrorKind::NotFound => 404,
        ErrorKind::Conflict => 409,
        ErrorKind::BadInput => 422,
        _ => 500,
    }
}

/// A request refused before it reaches an endpoint: 4xx with its sentence.
struct Refused(u16, String);

impl From<Error> for Refused {
    fn from(e: Error) -> Self {
        Refused(status_of(&e), e.to_string())
    }
}

/// The value of the request header `name`, if any.
fn req_header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

impl State {
    /// Whether `host` (a Host header) names this server: the bound address or `localhost`,
    /// with its port; for a server bound to all addresses, any IP address literal (a DNS name
    /// other than localhost is what a rebinding attack sends; docs/SERVE.md "Safety").
    fn host_ok(&self, host: &str) -> bool {
        let port = format!(":{}", self.port);
        let Some(name) = host.strip_suffix(&port) else {
            return false;
        };
        if name.eq_ignore_ascii_case("localhost") {
            return true;
        }
        let ip = name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>();
        match ip {
            Ok(ip) if self.opts.bind.is_unspecified() => ip.is_ipv4() == self.opts.bind.is_ipv4() || ip.is_loopback(),
            Ok(ip) => ip == self.opts.bind,
            Err(_) => false,
        }
    }

    /// The checks every request passes: Host names this server, and Origin, when sent, is this
    /// server's page.
    fn check_origin(&self, req: &Request) -> std::result::Result<(), Refused> {
        let host = req_header(req, "Host").unwrap_or("");
        if !self.host_ok(host) {
            return Err(Refused(
                403,
                format!(
                    "the Host header {} does not name this server (localhost:{} or its address)",
                    crate::util::quote::quoted(host),
                    self.port
                ),
            ));
        }
        if let Some(origin) = req_header(req, "Origin")
            && origin != format!("http://{host}")
        {
            return Err(Refused(
                403,
                format!(
                    "the Origin {} is not this server's page (http://{host})",
                    crate::util::quote::quoted(origin)
                ),
            ));
        }
        Ok(())
    }

    /// A write's checks: `--writable`, and the token (header `X-Tinydelta-Token` or `?token=`).
    fn check_write(&self, req: &Request, q: &Query) -> std::result::Result<(), Refused> {
        if !self.opts.writable {
            return Err(Refused(
                403,
                "this server is read-only: appends and restores need `tinydelta serve --writable`".into(),
            ));
        }
        let given = req_header(req, "X-Tinydelta-Token").or(q.get("token")).unwrap_or("");
        // Compared in full whatever the first difference (no early exit on a prefix).
        let same = given.len() == self.token.len()
            && given.bytes().zip(self.token.bytes()).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0;
        if !same {
            return Err(Refused(
                403,
                "a write needs the token in the address `tinydelta serve --writable` printed (header X-Tinydelta-Token or ?token=)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// A request's query parameters, percent-decoded.
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: &str) -> Query {
        Query(
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    /// The parameter `k` as a number, `None` when absent. Errors: [`Error::InvalidArgument`]
    /// for another value.
    pub(crate) fn num(&self, k: &str) -> Result<Option<u64>> {
        match self.get(k) {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                Error::InvalidArgument(format!("{k}={} is not a number", crate::util::quote::quoted(v)))
            }),
        }
    }
}

/// `%XX` and `+` decoded; a malformed escape is kept as it is.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn handle(st: &State, mut req: Request) {
    if let Err(Refused(code, msg)) = st.check_origin(&req) {
        let _ = req.respond(error_response(code, &msg));
        return;
    }
    let url = req.url().to_string();
    let (path, q) = url.split_once('?').unwrap_or((&url, ""));
    let q = Query::parse(q);
    let method = req.method().clone();
    let write = matches!(path, "/api/append" | "/api/restore");
    let reply = match (&method, path) {
        (Method::Get | Method::Head, "/") => respond_bytes(200, "text/html; charset=utf-8", INDEX_HTML.into())
            .with_header(header(
                "Content-Security-Policy",
                "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
            ))
            .with_header(header("X-Frame-Options", "DENY")),
        (Method::Get | Method::Head, "/app.js") => {
            respond_bytes(200, "text/javascript; charset=utf-8", APP_JS.into())
        }
        (Method::Get | Method::Head, "/app.css") => respond_bytes(200, "text/css; charset=utf-8", APP_CSS.into()),
        (Method::Get, "/api/events") => {
            open_stream(st, req);
            return;
        }
        (Method::Post, _) if write => match st.check_write(&req, &q) {
            Err(Refused(code, msg)) => error_response(code, &msg),
            Ok(()) if path == "/api/append" => api::append(st, &mut req, &q),
            Ok(()) => api::restore(st, &q),
        },
        (_, _) if write => error_response(
            405,
            &format!("{path} takes POST (docs/SERVE.md), not {method}"),
        )
        .with_header(header("Allow", "POST")),
        (Method::Get | Method::Head, p) if p.starts_with("/api/") => api::get(st, p, &q),
        (Method::Get | Method::Head, p) => error_response(404, &format!("no page {}", crate::util::quote::quoted(p))),
        (m, p) => error_response(405, &format!("{p} takes GET, not {m}")).with_header(header("Allow", "GET")),
    };
    let _ = req.respond(reply);
}

/// `GET /api/events`: an event stream (`text/event-stream`) that says the latest version now
/// and at every commit (docs/SERVE.md "GET /api/events").
fn open_stream(st: &State, req: Request) {
    let mut streams = crate::util::sync::lock(&st.streams);
    if streams.len() >= st.opts.max_event_streams {
        drop(streams);
        let msg = format!(
            "too many event streams open (at most {}; --max-event-streams)",
            st.opts.max_event_streams
        );
        let _ = req.respond(error_response(503, &msg));
        return;
    }
    let mut w = req.into_writer();
    let first = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\nretry: 500\n\n{}",
        event_text(&st.table)
    );
    if w.write_all(first.as_bytes()).and_then(|()| w.flush()).is_ok() {
        streams.push(w);
    }
}

/// The event that says where the table is: `version` with the latest version, or `damaged` with
/// the error a read of it gives.
fn event_text(t: &Table) -> String {
    match t.latest_version() {
        Ok(v) => format!("event: version\ndata: {}\n\n", serde_json::json!({ "latest": v })),
        Err(e) => format!("event: damaged\ndata: {}\n\n", serde_json::json!({ "error": e.to_string() })),
    }
}

/// The event thread: wakes on every change of `_delta_log/` (inotify through `notify`) and at
/// least once a second, and sends the event when it changed; a comment every 10 s finds streams
/// whose reader has gone.
fn events_loop(st: &State) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let log_dir = st.table.root().join(crate::log::files::LOG_DIR);
    let _watcher = {
        use notify::Watcher;
        notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
            let _ = tx.send(());
        })
        .and_then(|mut w| w.watch(&log_dir, notify::RecursiveMode::NonRecursive).map(|()| w))
    };
    let mut last = event_text(&st.table);
    let mut quiet = 0u32;
    loop {
        let _ = rx.recv_timeout(Duration::from_secs(1));
        while rx.try_recv().is_ok() {}
        let now = event_text(&st.table);
        quiet += 1;
        let text = if now != last {
            last = now.clone();
            quiet = 0;
            now
        } else if quiet >= 10 {
            quiet = 0;
            ": keep-alive\n\n".to_string()
        } else {
            continue;
        };
        let mut streams = crate::util::sync::lock(&st.streams);
        streams.retain_mut(|w| w.write_all(text.as_bytes()).and_then(|()| w.flush()).is_ok());
    }
}

/// The body of a request, at most `max` bytes. Errors: 413 past it.
fn read_body(req: &mut Request, max: u64) -> std::result::Result<Vec<u8>, Refused> {
    let too_big = |n: String| {
        Refused(
            413,
            format!("the file is {n} bytes, over the most one upload may have ({max} bytes; --max-upload-bytes)"),
        )
    };
    if let Some(n) = req.body_length()
        && n as u64 > max
    {
        return Err(too_big(n.to_string()));
    }
    let mut body = Vec::new();
    req.as_reader()
        .take(max.saturating_add(1))
        .read_to_end(&mut body)
        .map_err(|e| Refused(400, format!("reading the upload: {e}")))?;
    if body.len() as u64 > max {
        return Err(too_big(format!("more than {max}")));
    }
    Ok(body)
}
