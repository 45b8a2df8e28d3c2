//! Every bad line at once, with hints (docs/CLI.md "Errors that teach").
//!
//! The fast path ([`crate::format::rows::canonicalize`]) stops at the first bad line. When it fails, the
//! CLI and the mount's `incoming/` run [`scan`] over the same input again, line by line with
//! the single-line check of [`crate::format::rows::LineCheck`], continuing after each bad line: it
//! collects the first N bad lines (line, column, reason), the total, and hints for the common
//! wrong inputs (a CSV/TSV header, a JSON array, NaN/Infinity, Windows-1252 or UTF-16 bytes).
//! The same pass serves `--rejects FILE`: it writes each bad line byte for byte to FILE and one
//! JSON object per bad line to `FILE.errors`, and [`SkipLines`] then feeds only the good lines
//! to the normal write path. A successful write never runs this pass.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::rows::LineCheck;
use crate::format::schema::Schema;

/// How many bad lines are listed by default (`--max-errors`).
pub const DEFAULT_MAX_ERRORS: usize = 10;

/// Lines are checked in chunks of about this many bytes (whole lines).
const CHUNK_BYTES: usize = 1 << 20;

/// One bad line: 1-based line number, the column (a quoted schema column name such as
/// `"year"`, or a 1-based character position for syntax errors) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based line number.
    pub line: u64,
    /// `"name"` (quoted) or a character position (`13`), as in [`Error::BadInput`].
    pub column: String,
    /// What is wrong.
    pub reason: String,
}

impl BadLine {
    /// The line as one JSON object `{"line":N,"column":C,"error":R}` (the `FILE.errors`
    /// format: `column` is the column name as a string, or the character position as a number).
    pub fn to_json(&self) -> serde_json::Value {
        let column = match serde_json::from_str::<String>(&self.column) {
            Ok(name) => serde_json::Value::String(name),
            Err(_) => self
                .column
                .parse::<u64>()
                .map_or_else(|_| self.column.clone().into(), Into::into),
        };
        serde_json::json!({"line": self.line, "column": column, "error": self.reason})
    }
}

/// What [`scan`] found.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    /// The input's name in messages.
    pub source: String,
    /// The first bad lines, at most the `max` given to [`scan`].
    pub listed: Vec<BadLine>,
    /// Bad lines in all.
    pub total: u64,
    /// Good rows (non-blank lines that pass).
    pub good: u64,
    /// Hints, each one sentence, in the order found (no duplicates).
    pub hints: Vec<String>,
    /// Bad line numbers as inclusive ranges, ascending (for [`SkipLines`]).
    pub bad_ranges: Vec<(u64, u64)>,
}

/// Where `--rejects FILE` puts the bad lines.
pub struct Rejects {
    /// FILE: the bad lines, byte for byte.
    pub lines: File,
    /// `FILE.errors`: one JSON object per bad line.
    pub errors: File,
    /// FILE's path (for messages).
    pub path: PathBuf,
    /// `FILE.errors`' path.
    pub errors_path: PathBuf,
}

impl Rejects {
    /// Create FILE and `FILE.errors`, both new: an existing file is never overwritten
    /// ([`Error::InvalidArgument`], exit 2; FILE is removed again if only `FILE.errors` existed).
    pub fn create(path: &Path) -> Result<Rejects> {
        let errors_path = errors_path(path);
        let new =
            |p: &Path| {
                File::options().write(true).create_new(true).open(p).map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => Error::InvalidArgument(format!(
                    "--rejects: {} already exists; tinydelta never overwrites it (remove it or name another file)",
                    p.display()
                )),
                _ => Error::io("create", p, e),
            })
            };
        let lines = new(path)?;
        let errors = match new(&errors_path) {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        };
        Ok(Rejects {
            lines,
            errors,
            path: path.to_path_buf(),
            errors_path,
        })
    }

    /// Remove both files (the write they served failed before committing).
    pub fn discard(self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.errors_path);
    }

    /// Flush and fsync both files.
    pub fn finish(&mut self) -> Result<()> {
        self.lines.sync_all().ctx("fsync", &self.path)?;
        self.errors.sync_all().ctx("fsync", &self.errors_path)
    }
}

/// `FILE.errors` for `FILE`.
pub fn errors_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".errors");
    PathBuf::from(s)
}

impl Diagnosis {
    /// The report, one line per string (no trailing newlines): the listed bad lines as
    /// `SOURCE: line L, column C: REASON`, then, when more than one line is bad, the count
    /// (`SOURCE: N bad lines ...; nothing was committed`), then the hints (`hint: ...`).
    /// `more` is appended to the count when not every bad line is listed (e.g. how to list more).
    pub fn report(&self, more: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .listed
            .iter()
            .map(|b| format!("{}: line {}, column {}: {}", self.source, b.line, b.column, b.reason))
            .collect();
        let listed = self.listed.len() as u64;
        if self.total > 1 || listed < self.total {
            let which = match (listed, more) {
                (l, _) if l >= self.total => String::new(),
                (0, "") => String::new(),
                (0, more) => format!(" ({more})"),
                (l, "") => format!(" (the first {l} listed)"),
                (l, more) => format!(" (the first {l} listed; {more})"),
            };
            out.push(format!(
                "{}: {}{which}; nothing was committed",
                self.source,
                count(self.total, "bad line", "bad lines")
            ));
        }
        out.extend(self.hints.iter().map(|h| format!("hint: {h}")));
        out
    }

    /// The report as one text (the `incoming/NAME.error` note).
    pub fn note(&self) -> String {
        self.report("").join("\n")
    }
}

/// `1 row`, `2 rows`: a count with its noun in the right number.
pub fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The note for a write of `input` to a table that failed with `first` (the mount's
/// `incoming/NAME.error`): every bad line (at most [`DEFAULT_MAX_ERRORS`] listed), the total and
/// the hints, as [`Diagnosis::note`]; `first`'s own sentence when `first` is not
/// [`Error::BadInput`], or when the second pass cannot read the input or finds no bad line.
/// `check` is called only then, for a check of the table's current schema with the limits of
/// the write that failed.
pub fn note_for(check: impl FnOnce() -> Result<LineCheck>, source: &str, input: impl BufRead, first: &Error) -> String {
    if !matches!(first, Error::BadInput { .. }) {
        return first.to_string();
    }
    check()
        .and_then(|c| scan_with(c, source, input, 1, DEFAULT_MAX_ERRORS, None))
        .ok()
        .filter(|d| d.total > 0)
        .map_or_else(|| first.to_string(), |d| d.note())
}

/// What [`scan`] remembers about the input for its hints.
#[derive(Default)]
struct HintState {
    /// The first non-blank line's number, once seen.
    first_nonblank: Option<u64>,
    csv: bool,
    array: bool,
    nan: bool,
    encoding: bool,
}

/// Check every line of `input` against `schema`, continuing after bad lines (see the module
/// doc). `first_line` is the number of `input`'s first line (1 unless the caller knows the
/// lines before it are good: then the CSV and JSON-array hints, which look at the input's first
/// line, are not given). Lists at most `max` bad lines; with `rejects`, writes every bad line
/// byte for byte to `rejects.lines` (the last line without `\n` if the input ends without one)
/// and its error to `rejects.errors`. Memory: one chunk of about 1 MiB of whole lines (more
/// only for a longer line). Errors: [`Error::Io`] reading the input or writing the rejects
/// (never [`Error::BadInput`]).
pub fn scan(
    schema: &Schema,
    source: &str,
    input: impl BufRead,
    first_line: u64,
    max: usize,
    rejects: Option<&mut Rejects>,
) -> Result<Diagnosis> {
    scan_with(LineCheck::new(schema.clone()), source, input, first_line, max, rejects)
}

/// [`scan`] with `check`, a fresh [`LineCheck`] of the schema and its limits (e.g. the mount's
/// `--max-line-bytes`).
pub fn scan_with(
    mut check: LineCheck,
    source: &str,
    mut input: impl BufRead,
    first_line: u64,
    max: usize,
    mut rejects: Option<&mut Rejects>,
) -> Result<Diagnosis> {
    let mut d = Diagnosis {
        source: source.to_string(),
        ..Diagnosis::default()
    };
    // LineCheck's own line counter: it advances only over lines fed without error.
    let mut check_line = 1u64;
    let mut hints = HintState {
        // Line 0: no line of this input is the first of the whole input.
        first_nonblank: (first_line > 1).then_some(0),
        ..HintState::default()
    };
    let mut chunk = Vec::with_capacity(CHUNK_BYTES + (64 << 10));
    let mut out = Vec::new();
    let mut first_line = first_line;
    loop {
        chunk.clear();
        let mut eof = false;
        while chunk.len() < CHUNK_BYTES {
            if input.read_until(b'\n', &mut chunk).ctx("read", source)? == 0 {
                eof = true;
                break;
            }
        }
        if chunk.is_empty() {
            break;
        }
        let unterminated = chunk.last() != Some(&b'\n');
        if unterminated {
            chunk.push(b'\n');
        }
        if hints.first_nonblank.is_none() {
            hints.first_nonblank = (first_line..)
                .zip(chunk.split(|b| *b == b'\n'))
                .find(|(_, l)| !is_blank(l))
                .map(|(n, _)| n);
        }
        let lines_in_chunk = memchr::memchr_iter(b'\n', &chunk).count() as u64;
        let mut rest: &[u8] = &chunk;
        let mut line = first_line;
        while !rest.is_empty() {
            out.clear();
            let err = match check.feed(source, rest, &mut out) {
                Ok(()) => {
                    check_line += lines(rest);
                    break;
                }
                Err(Error::BadInput {
                    line, column, reason, ..
                }) => (line, column, reason),
                Err(e) => return Err(e),
            };
            let (at, column, reason) = err;
            let r = at.saturating_sub(check_line);
            let start = nth_line_start(rest, r);
            let end = memchr::memchr(b'\n', &rest[start..]).map_or(rest.len(), |i| start + i + 1);
            // The good lines before the bad one: fed again so LineCheck counts their rows.
            if start > 0 {
                out.clear();
                check.feed(source, &rest[..start], &mut out)?;
                check_line += r;
            }
            let bytes = &rest[start..end];
            let last_of_input = eof && end == rest.len();
            let original = if unterminated && last_of_input {
                &bytes[..bytes.len() - 1]
            } else {
                bytes
            };
            let bad = hint(&mut hints, &mut d.hints, source, line + r, original, column, reason);
            record(&mut d, bad, original, max, rejects.as_deref_mut())?;
            rest = &rest[end..];
            line += r + 1;
        }
        first_line += lines_in_chunk;
        if eof {
            break;
        }
    }
    d.good = check.finish(source, &mut out)?.num_records;
    Ok(d)
}

fn record(d: &mut Diagnosis, bad: BadLine, bytes: &[u8], max: usize, rejects: Option<&mut Rejects>) -> Result<()> {
    if let Some(r) = rejects {
        r.lines.write_all(bytes).ctx("write", &r.path)?;
        let mut j = bad.to_json().to_string();
        j.push('\n');
        r.errors.write_all(j.as_bytes()).ctx("write", &r.errors_path)?;
    }
    match d.bad_ranges.last_mut() {
        Some((_, end)) if *end + 1 == bad.line => *end = bad.line,
        _ => d.bad_ranges.push((bad.line, bad.line)),
    }
    d.total += 1;
    if d.listed.len() < max {
        d.listed.push(bad);
    }
    Ok(())
}

fn lines(b: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', b).count() as u64
}

/// Byte offset of the start of the 0-based line `n` of `b`.
fn nth_line_start(b: &[u8], n: u64) -> usize {
    if n == 0 {
        return 0;
    }
    memchr::memchr_iter(b'\n', b)
        .nth((n - 1) as usize)
        .map_or(b.len(), |i| i + 1)
}

fn is_blank(l: &[u8]) -> bool {
    let l = l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l);
    l.iter().all(|b| b.is_ascii_whitespace())
}

/// A name quoted for a shell command line when it needs it.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%,=".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The hints this bad line earns (each at most once per input), and the line as a [`BadLine`]
/// (a NaN/Infinity syntax error is reworded to name them).
fn hint(
    st: &mut HintState,
    hints: &mut Vec<String>,
    source: &str,
    line: u64,
    bytes: &[u8],
    column: String,
    mut reason: String,
) -> BadLine {
    // The input's name for a command line (none for stdin).
    let file = (!source.starts_with('<')).then(|| source.to_string());
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    let text = String::from_utf8_lossy(body);
    let syntax = reason.starts_with("invalid JSON") || reason.starts_with("not a JSON object");
    if st.first_nonblank == Some(line) && syntax {
        let t = text.trim_start();
        if t.starts_with('[') && !st.array {
            st.array = true;
            let cmd = match &file {
                Some(f) => {
                    let out = match f.strip_suffix(".json") {
                        Some(stem) => format!("{stem}.jsonl"),
                        None => format!("{f}.jsonl"),
                    };
                    format!("jq -c '.[]' {} > {}", shell_word(f), shell_word(&out))
                }
                None => "jq -c '.[]'".into(),
            };
            hints.push(format!(
                "the input looks like one JSON array of objects, but tinydelta reads JSON Lines (one object per line): convert it with `{cmd}`."
            ));
        } else if let Some(sep) = header_separator(t)
            && !st.csv
        {
            st.csv = true;
            let (kind, name) = match sep {
                '\t' => ("TSV", "tabs".to_string()),
                ',' => ("CSV", "commas".to_string()),
                c => ("CSV", format!("{c:?}")),
            };
            // DuckDB's CSV sniffer reads its input twice, so a pipe (`read_csv('/dev/stdin')`)
            // fails: stdin gets a FILE.csv to fill in, as does a name with control characters.
            let csv = file.as_deref().filter(|f| !f.chars().any(char::is_control)).unwrap_or("FILE.csv");
            let sql = format!("COPY (FROM read_csv('{}')) TO '/dev/stdout' (FORMAT json)", csv.replace('\'', "''"));
            // Double quotes read best; a name with a character the shell expands inside them
            // gets the whole statement in single quotes instead, so pasting it runs nothing else.
            let cmd = if sql.chars().any(|c| "$`\\\"!".contains(c)) {
                format!("duckdb -c {}", shell_word(&sql))
            } else {
                format!("duckdb -c \"{sql}\"")
            };
            hints.push(format!(
                "line {line} looks like a {kind} header (column names separated by {name}), but tinydelta reads JSON Lines (one object per line): convert it first, e.g. `{cmd} | tinydelta append TABLE` (the `duckdb` command from `pip install duckdb-cli`, which then runs offline)."
            ));
        }
    }
    if reason.starts_with("invalid JSON")
        && let Ok(pos) = column.parse::<usize>()
    {
        let at: String = text.chars().skip(pos.saturating_sub(1)).take(12).collect();
        let before: String = text.chars().take(pos.saturating_sub(1)).collect();
        let neg = before.ends_with('-') || at.starts_with('-');
        let word = at.trim_start_matches(['-', '+']);
        let found = ["NaN", "Infinity"].into_iter().find(|w| word.starts_with(w));
        if let Some(w) = found {
            let w = if neg && w == "Infinity" { "-Infinity" } else { w };
            reason = format!("invalid JSON: {w} is not a JSON number");
            if !st.nan {
                st.nan = true;
                hints.push(
                    "JSON has no NaN or Infinity (Python's json.dumps writes them unless allow_nan=False): write null for a missing number instead.".into(),
                );
            }
        }
    }
    if reason == "invalid UTF-8" && !st.encoding {
        st.encoding = true;
        let to = |enc: &str| match &file {
            Some(f) => format!(
                "iconv -f {enc} -t UTF-8 {} > {}",
                shell_word(f),
                shell_word(&format!("{f}.utf8"))
            ),
            None => format!("iconv -f {enc} -t UTF-8"),
        };
        let utf16 = bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") || bytes.contains(&0);
        if utf16 {
            hints.push(format!(
                "the input looks like UTF-16, not UTF-8: convert it with `{}`.",
                to("UTF-16")
            ));
        } else {
            let bad = std::str::from_utf8(body).err().map_or(0, |e| body[e.valid_up_to()]);
            let ch = windows_1252(bad);
            hints.push(format!(
                "byte 0x{bad:02X} on line {line} is not UTF-8 (in Windows-1252 or Latin-1 it is {ch:?}): convert the input with `{}`.",
                to("WINDOWS-1252")
            ));
        }
    }
    BadLine { line, column, reason }
}

/// The separator of a line that looks like a CSV/TSV header: at least two names (letters,
/// digits, `_`, `-`, `.`, spaces; optionally double-quoted; not starting with a digit)
/// separated by tabs, commas, semicolons or `|`.
fn header_separator(line: &str) -> Option<char> {
    ['\t', ',', ';', '|'].into_iter().find(|&sep| {
        let fields: Vec<&str> = line.split(sep).collect();
        fields.len() >= 2
            && fields.iter().all(|f| {
                let f = f.trim();
                let f = f.strip_prefix('"').and_then(|f| f.strip_suffix('"')).unwrap_or(f);
                !f.is_empty()
                    && !f.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.')
                    && f.chars()
                        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ' '))
            })
    })
}

/// The character a byte stands for in Windows-1252 (Latin-1 for 0xA0-0xFF).
fn windows_1252(b: u8) -> char {
    const HIGH: [char; 32] = [
        '€', '\u{81}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{8d}', 'Ž', '\u{8f}', '\u{90}', '‘',
        '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{9d}', 'ž', 'Ÿ',
    ];
    match b {
        0x80..=0x9F => HIGH[(b - 0x80) as usize],
        _ => char::from(b),
    }
}

/// A reader over the input without the bad lines (`bad`: ascending inclusive line ranges,
/// 1-based), for the second pass of `--rejects`.
pub struct SkipLines<R> {
    inner: R,
    bad: Vec<(u64, u64)>,
    next_range: usize,
    line: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl<R: BufRead> SkipLines<R> {
    /// Skip the lines in `bad` of `inner`.
    pub fn new(inner: R, bad: Vec<(u64, u64)>) -> Self {
        SkipLines {
            inner,
            bad,
            next_range: 0,
            line: 0,
            buf: Vec::new(),
            pos: 0,
        }
    }
}

impl<R: BufRead> Read for SkipLines<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            // Whole lines up to about 256 KiB at a time.
            while self.buf.len() < 256 << 10 {
                let start = self.buf.len();
                if self.inner.read_until(b'\n', &mut self.buf)? == 0 {
                    break;
                }
                self.line += 1;
                while self.bad.get(self.next_range).is_some_and(|r| r.1 < self.line) {
                    self.next_range += 1;
                }
                if self.bad.get(self.next_range).is_some_and(|r| r.0 <= self.line) {
                    self.buf.truncate(start);
                }
            }
            if self.buf.is_empty() {
                return Ok(0);
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The rows to write: a file (`--file`) or stdin, readable again for a second pass. A file (or
/// stdin redirected from a regular file) is read again from its start. Stdin from a pipe is
/// either copied whole, as it is read, into an unnamed temporary file (`O_TMPFILE` in
/// `$TMPDIR`; `keep_all`, for `--rejects`, whose second pass needs every line), or only its
/// last few MiB are kept in memory ([`RING_BYTES`] per worker thread), enough to read again from
/// the first bad line the fast path found, whose lines are still in flight when it stops.
pub struct Input {
    name: String,
    src: Src,
    /// A file input's identity, size and times when its first pass opened it: every later
    /// pass, and the end of each pass, must find them unchanged.
    first: Option<Fingerprint>,
}

/// Device, inode, size (bytes), mtime and ctime (s, ns) of a file input.
type Fingerprint = (u64, u64, u64, i64, i64, i64, i64);

fn fingerprint(f: &File) -> io::Result<Fingerprint> {
    use std::os::unix::fs::MetadataExt;
    let m = f.metadata()?;
    Ok((
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ))
}

/// The first pass's fingerprint of the file input `f` (recorded in `slot` on the first pass);
/// a later pass finding `f` different is an error saying the input changed.
fn first_pass(slot: &mut Option<Fingerprint>, name: &str, f: &File) -> Result<Fingerprint> {
    let now = fingerprint(f).ctx("stat", name)?;
    let first = *slot.get_or_insert(now);
    if now != first {
        return Err(Error::io("read again", name, changed(name)));
    }
    Ok(first)
}

fn changed(name: &str) -> io::Error {
    io::Error::other(format!(
        "{name} changed between the passes over it (its size, times or inode differ from the first pass); nothing was committed: run the command again on a file nobody is writing"
    ))
}

/// A pass over a file input that, at its end, checks the file against the first pass's
/// [`Fingerprint`] (an edit during or between passes fails the pass instead of mixing two
/// versions of the input).
struct Unchanged<R> {
    inner: R,
    file: File,
    first: Fingerprint,
    name: String,
}

impl<R: BufRead> Unchanged<R> {
    fn check(&self) -> io::Result<()> {
        if fingerprint(&self.file)? != self.first {
            return Err(changed(&self.name));
        }
        Ok(())
    }
}

impl<R: BufRead> Read for Unchanged<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.check()?;
        }
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Unchanged<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.inner.fill_buf()?.is_empty() {
            self.check()?;
        }
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.inner.consume(amt)
    }
}

/// Bytes of a piped stdin kept in memory per worker thread of the fast path (which has up to
/// two 1 MiB chunks in flight per worker), plus [`RING_SLACK`].
pub const RING_BYTES: usize = 2 << 20;
const RING_SLACK: usize = 4 << 20;

enum Src {
    Path(PathBuf),
    /// Stdin on a regular file: a duplicate descriptor and the offset it started at.
    StdinFile(File, u64),
    /// A stream (stdin on a pipe, or a `--file` naming a FIFO or a device: it is opened once,
    /// as a second open of a FIFO waits for a writer that never comes), copied whole: the
    /// stream, the spool (or why there is none), and whether the first pass started.
    StdinSpool(File, std::result::Result<File, String>, bool),
    /// A stream, as above: the stream and the last bytes read.
    StdinRing(File, Ring),
}

/// The last bytes read from a pipe, in the blocks they were read in.
#[derive(Default)]
pub struct Ring {
    blocks: std::collections::VecDeque<Vec<u8>>,
    bytes: usize,
    cap: usize,
    /// Line ends in the bytes dropped so far.
    dropped_lines: u64,
    /// Whether the kept bytes start a line (nothing dropped, or the last dropped byte was `\n`).
    at_line_start: bool,
    spare: Vec<Vec<u8>>,
    /// Whether the first pass started.
    started: bool,
}

impl Ring {
    fn new() -> Ring {
        let workers = crate::format::rows::cores().min(8);
        Ring {
            cap: workers * RING_BYTES + RING_SLACK,
            at_line_start: true,
            ..Ring::default()
        }
    }

    fn push(&mut self, data: &[u8]) {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(data);
        self.bytes += b.len();
        self.blocks.push_back(b);
        while self.blocks.len() > 1 && self.bytes - self.blocks[0].len() >= self.cap {
            let Some(f) = self.blocks.pop_front() else { break };
            self.bytes -= f.len();
            self.dropped_lines += lines(&f);
            self.at_line_start = f.last() == Some(&b'\n');
            self.spare.push(f);
        }
    }

    /// The kept bytes from the start of 1-based line `line`, if it is still kept whole.
    fn tail_from_line(&self, line: u64) -> Option<Vec<u8>> {
        let first = self.dropped_lines + 1;
        let kept: Vec<u8> = self.blocks.iter().flatten().copied().collect();
        let start = match line.checked_sub(first)? {
            0 if self.at_line_start => 0,
            0 => return None,
            n => memchr::memchr_iter(b'\n', &kept).nth((n - 1) as usize)? + 1,
        };
        Some(kept[start..].to_vec())
    }
}

impl Input {
    /// `file`, or stdin (a pipe is copied whole when `keep_all`). Errors: [`Error::InvalidArgument`] for a
    /// missing file (exit 2), [`Error::Io`].
    pub fn open(file: Option<&Path>, keep_all: bool) -> Result<Input> {
        let src = match file {
            Some(p) => {
                let f = File::open(p).map_err(|e| match e.kind() {
                    io::ErrorKind::NotFound => Error::InvalidArgument(format!("input file {} not found", p.display())),
                    _ => Error::io("open", p, e),
                })?;
                let m = f.metadata().ctx("stat", p)?;
                if m.is_file() || m.is_dir() {
                    Src::Path(p.to_path_buf())
                } else if keep_all {
                    Src::StdinSpool(f, spool(), false)
                } else {
                    Src::StdinRing(f, Ring::new())
                }
            }
            None => {
                let fd = rustix::io::dup(rustix::stdio::stdin()).map_err(|e| Error::io("dup", "<stdin>", e.into()))?;
                let mut f = File::from(fd);
                let regular = f.metadata().is_ok_and(|m| m.file_type().is_file());
                match (regular, f.stream_position()) {
                    (true, Ok(at)) => Src::StdinFile(f, at),
                    _ if keep_all => Src::StdinSpool(f, spool(), false),
                    _ => Src::StdinRing(f, Ring::new()),
                }
            }
        };
        let name = match file {
            Some(p) => p.display().to_string(),
            None => "<stdin>".into(),
        };
        Ok(Input { name, src, first: None })
    }

    /// The name used in messages (the path as given, or `<stdin>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The input's size in bytes, when known (a file).
    pub fn size_bytes(&self) -> Option<u64> {
        match &self.src {
            Src::Path(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            Src::StdinFile(f, at) => f.metadata().ok().map(|m| m.len().saturating_sub(*at)),
            Src::StdinSpool(..) | Src::StdinRing(..) => None,
        }
    }

    /// The input as an open regular file and the offset its rows start at, for a copy by the
    /// kernel ([`crate::table::Table::append_file`]): a `--file` naming a non-empty regular file, or
    /// stdin redirected from one; `None` for anything else (a pipe, an empty or special file:
    /// read it with [`Input::reader`]). Records the file's fingerprint as the first pass does, so
    /// [`Input::unchanged`] and every later pass compare the file with it.
    /// Errors: [`Error::Io`] (also when the file changed since an earlier pass).
    pub fn regular_file(&mut self) -> Result<Option<(File, u64)>> {
        let (f, at) = match &self.src {
            Src::Path(p) => (File::open(p).ctx("open", p)?, 0),
            Src::StdinFile(f, at) => (f.try_clone().ctx("dup", "<stdin>")?, *at),
            Src::StdinSpool(..) | Src::StdinRing(..) => return Ok(None),
        };
        let m = f.metadata().ctx("stat", &self.name)?;
        if !m.file_type().is_file() || m.len() <= at {
            return Ok(None);
        }
        first_pass(&mut self.first, &self.name, &f)?;
        Ok(Some((f, at)))
    }

    /// Whether `f`, the file [`Input::regular_file`] returned, is still as that first pass found
    /// it (identity, size and times). Errors: [`Error::Io`] saying the input changed.
    pub fn unchanged(&self, f: &File) -> Result<()> {
        let now = fingerprint(f).ctx("stat", &self.name)?;
        if self.first.is_some_and(|first| first != now) {
            return Err(Error::io("read", &self.name, changed(&self.name)));
        }
        Ok(())
    }

    /// A reader over the whole input from its start: the first pass. On a pipe this reads
    /// stdin (keeping what [`Input::again_from`] needs).
    pub fn reader(&mut self) -> Result<Box<dyn BufRead + '_>> {
        self.again_from(1).map(|(_, r)| r)
    }

    /// A reader for the next pass, starting at line `line` or before it, and the number of its
    /// first line (1 for a file or a copied pipe, `line` for a kept tail). The first call on a
    /// pipe reads stdin itself. Later calls on a pipe read the rest of stdin after what was
    /// kept. Errors: [`Error::Io`]; for a pipe whose lines from `line` were not kept (its copy
    /// failed, or longer lines than the ring holds), an [`Error::Io`] saying so.
    pub fn again_from(&mut self, line: u64) -> Result<(u64, Box<dyn BufRead + '_>)> {
        const BUF: usize = 1 << 20;
        let not_kept = |why: String| {
            Error::io(
                "read again",
                "<stdin>",
                io::Error::other(format!(
                    "stdin is a pipe and its lines from line {line} were not kept ({why})"
                )),
            )
        };
        Ok(match &mut self.src {
            Src::Path(p) => {
                let f = File::open(&*p).ctx("open", &*p)?;
                let first = first_pass(&mut self.first, &self.name, &f)?;
                let file = f.try_clone().ctx("dup", &*p)?;
                let inner = BufReader::with_capacity(BUF, f);
                let name = self.name.clone();
                (
                    1,
                    Box::new(Unchanged {
                        inner,
                        file,
                        first,
                        name,
                    }),
                )
            }
            Src::StdinFile(f, at) => {
                f.seek(SeekFrom::Start(*at)).ctx("seek", "<stdin>")?;
                let file = f.try_clone().ctx("dup", "<stdin>")?;
                let first = first_pass(&mut self.first, &self.name, &file)?;
                let inner = BufReader::with_capacity(BUF, &*f);
                let name = self.name.clone();
                (
                    1,
                    Box::new(Unchanged {
                        inner,
                        file,
                        first,
                        name,
                    }),
                )
            }
            Src::StdinSpool(stream, spool, started) => {
                if !*started {
                    *started = true;
                    let tee = Tee {
                        inner: &*stream,
                        keep: Keep::Spool(spool),
                    };
                    return Ok((1, Box::new(BufReader::with_capacity(BUF, tee))));
                }
                let f = spool.as_mut().map_err(|why| not_kept(why.clone()))?;
                io::copy(&mut &*stream, f).ctx("copy to a temporary file", &self.name)?;
                f.seek(SeekFrom::Start(0)).ctx("seek", &self.name)?;
                (1, Box::new(BufReader::with_capacity(BUF, &*f)))
            }
            Src::StdinRing(stream, ring) => {
                if !ring.started {
                    ring.started = true;
                    let tee = Tee {
                        inner: &*stream,
                        keep: Keep::Ring(ring),
                    };
                    return Ok((1, Box::new(BufReader::with_capacity(BUF, tee))));
                }
                let kept = ring.tail_from_line(line).ok_or_else(|| {
                    not_kept(format!(
                        "only its last {} MiB are kept; give the input with --file to list every bad line",
                        ring.cap >> 20
                    ))
                })?;
                let rest = io::Cursor::new(kept).chain(&*stream);
                (line, Box::new(BufReader::with_capacity(BUF, rest)))
            }
        })
    }
}

/// An unnamed temporary file for stdin.
fn spool() -> std::result::Result<File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir();
    File::options()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(&dir)
        .map_err(|e| format!("cannot create a temporary file in {}: {e}", dir.display()))
}

/// Where a [`Tee`] keeps what it reads.
enum Keep<'a> {
    /// Everything, in a file (on a failed write the spool is dropped, saying why).
    Spool(&'a mut std::result::Result<File, String>),
    /// The last bytes.
    Ring(&'a mut Ring),
}

/// Reads a stream (stdin on a pipe, a FIFO), keeping a copy.
struct Tee<'a> {
    inner: &'a File,
    keep: Keep<'a>,
}

impl Read for Tee<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        match &mut self.keep {
            Keep::Spool(spool) => {
                if let Ok(f) = spool
                    && let Err(e) = f.write_all(&buf[..n])
                {
                    **spool = Err(format!("writing the temporary copy failed: {e}"));
                }
            }
            Keep::Ring(ring) => ring.push(&buf[..n]),
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::parse_cli(&["id:int!".into(), "s:str".into(), "x:float".into()]).unwrap()
    }

    fn diag(input: &[u8], max: usize) -> Diagnosis {
        scan(&schema(), "in.jsonl", input, 1, max, None).unwrap()
    }

    #[test]
    fn every_bad_line_with_its_number() {
        let d = diag(
            b"{\"id\":1}\n{\"id\":\"a\"}\n\n{\"id\":3}\n{\"id\":1,}\n{\"id\":4}\n{\"id\":null}",
            10,
        );
        let got: Vec<(u64, &str)> = d.listed.iter().map(|b| (b.line, b.column.as_str())).collect();
        assert_eq!(got, [(2, "\"id\""), (5, "9"), (7, "\"id\"")]);
        assert_eq!((d.total, d.good), (3, 3));
        assert_eq!(d.bad_ranges, [(2, 2), (5, 5), (7, 7)]);
        let r = d.report("--max-errors N lists more");
        assert_eq!(r[0], "in.jsonl: line 2, column \"id\": expected int, found string");
        assert_eq!(r[3], "in.jsonl: 3 bad lines; nothing was committed");
        let d = diag(b"x\ny\nz\n{\"id\":1}\n", 2);
        assert_eq!((d.total, d.listed.len(), d.good), (3, 2, 1));
        assert_eq!(d.bad_ranges, [(1, 3)]);
        assert_eq!(
            d.report("--max-errors N lists more")[2],
            "in.jsonl: 3 bad lines (the first 2 listed; --max-errors N lists more); nothing was committed"
        );
    }

    #[test]
    fn lines_across_chunks() {
        let mut input = Vec::new();
        for i in 0..60_000u64 {
            if i % 7_001 == 0 {
                input.extend_from_slice(b"{\"id\":\"bad\"}\n");
            } else {
                input.extend_from_slice(format!("{{\"id\":{i},\"s\":\"some text to fill the chunk\"}}\n").as_bytes());
            }
        }
        let d = diag(&input, 100);
        let want: Vec<u64> = (0..60_000u64).filter(|i| i % 7_001 == 0).map(|i| i + 1).collect();
        let got: Vec<u64> = d.listed.iter().map(|b| b.line).collect();
        assert_eq!(got, want);
        assert_eq!(d.good, 60_000 - want.len() as u64);
    }

    #[test]
    fn skip_lines_keeps_the_good_ones() {
        let input = b"a\nb\nc\nd\ne";
        let mut out = String::new();
        SkipLines::new(&input[..], vec![(2, 3), (5, 5)])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "a\nd\n");
    }

    #[test]
    fn the_ring_reads_again_from_a_kept_line() {
        let mut r = Ring {
            cap: 10,
            at_line_start: true,
            ..Ring::default()
        };
        r.push(b"a1\nb2\n");
        assert_eq!(r.tail_from_line(1).unwrap(), b"a1\nb2\n");
        assert_eq!(r.tail_from_line(2).unwrap(), b"b2\n");
        r.push(b"c3\nd4");
        r.push(b"\ne5\n");
        // At least `cap` bytes stay: nothing dropped yet.
        assert_eq!(r.tail_from_line(1).unwrap(), b"a1\nb2\nc3\nd4\ne5\n");
        r.push(b"f");
        // Lines 1-2 dropped.
        assert_eq!(r.tail_from_line(2), None);
        assert_eq!(r.tail_from_line(3).unwrap(), b"c3\nd4\ne5\nf");
        assert_eq!(r.tail_from_line(5).unwrap(), b"e5\nf");
        r.push(b"ghijklmnop");
        // Only the tail of line 6 is kept: it cannot be read again whole.
        assert_eq!(r.tail_from_line(6), None);
        assert_eq!(r.tail_from_line(5), None);
    }

    #[test]
    fn hints() {
        let h = |input: &[u8]| diag(input, 10).hints;
        assert!(h(b"id,s,x\n1,a,2.0\n")[0].starts_with("line 1 looks like a CSV header"));
        assert!(h(b"\"id\"\t\"s\"\n")[0].starts_with("line 1 looks like a TSV header"));
        assert!(h(b"[{\"id\":1},\n{\"id\":2}]\n")[0].starts_with("the input looks like one JSON array"));
        let d = diag(b"{\"id\":1,\"x\":NaN}\n{\"id\":1,\"x\":-Infinity}\n", 10);
        assert_eq!(d.listed[0].reason, "invalid JSON: NaN is not a JSON number");
        assert_eq!(d.listed[1].reason, "invalid JSON: -Infinity is not a JSON number");
        assert_eq!(d.hints.len(), 1);
        assert!(d.hints[0].starts_with("JSON has no NaN or Infinity"));
        assert!(h(b"{\"id\":1,\"s\":\"caf\xe9\"}\n")[0].starts_with("byte 0xE9 on line 1 is not UTF-8"));
        assert!(h(b"\xff\xfe{\x00")[0].starts_with("the input looks like UTF-16"));
        // A header-like line that is not the first is no CSV header.
        assert!(h(b"{\"id\":1}\nid,s\n").is_empty());
    }
}
