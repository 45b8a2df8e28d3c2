//! Whole inputs: [`canonicalize`] of a reader into a writer, and the check of a file already
//! written (or being written) as canonical rows.

#[allow(unused_imports)]
use super::*;

/// Input is cut into chunks of about this many bytes (whole lines) for the worker threads: small
/// enough that the few chunks in flight reuse the same buffers (1 MiB chunks cost a page fault
/// per 4 KiB of each fresh buffer), large enough that handing them over costs nothing.
pub(super) const CHUNK_BYTES: usize = 256 << 10;

/// Read whole lines from `input` until at least [`CHUNK_BYTES`] are in `chunk` (more only when
/// one line is longer) or the input ends. Returns false at end of input with nothing read.
/// A chunk ends at the first line end past [`CHUNK_BYTES`], however much `input` has buffered.
pub(super) fn read_chunk<R: BufRead>(input: &mut R, chunk: &mut Vec<u8>, source: &str) -> Result<bool> {
    chunk.clear();
    loop {
        let buf = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("read", source, e)),
        };
        if buf.is_empty() {
            return Ok(!chunk.is_empty());
        }
        let from = CHUNK_BYTES.saturating_sub(chunk.len() + 1);
        if chunk.len() + buf.len() >= CHUNK_BYTES
            && let Some(nl) = memchr::memchr(b'\n', &buf[from..]).map(|p| from + p)
        {
            chunk.extend_from_slice(&buf[..=nl]);
            input.consume(nl + 1);
            return Ok(true);
        }
        let n = buf.len();
        chunk.extend_from_slice(buf);
        input.consume(n);
    }
}

/// Stream JSONL from `input` to `output` as canonical rows (docs/CLI.md "Input rules"), returning the
/// statistics of what was written.
///
/// `source` names the input in errors (a path, `<stdin>`, an `incoming/` name). Accepts CRLF, a
/// missing final newline, blank lines, a UTF-8 BOM at the start of any line, any whitespace and key order, ints in
/// float columns, and omitted nullable keys. Input is read in chunks of whole lines (about 1 MiB,
/// or one line if longer) canonicalised by one thread per core; memory is a few chunks, bounded
/// by the longest line, never the file. Errors: [`Error::BadInput`] with the 1-based line, the
/// column name (or character position) and the reason, at the first bad line; [`Error::Io`] for
/// read or write failures (`out_path` names the output).
pub fn canonicalize<R: BufRead, W: Write>(
    schema: &Schema,
    source: &str,
    input: R,
    output: &mut W,
    out_path: &std::path::Path,
) -> Result<FileStats> {
    canonicalize_with(schema, DEFAULT_MAX_LINE_BYTES, source, input, output, out_path)
}

/// [`canonicalize`] accepting lines of at most `max_line` bytes (without the `\n`; at least 1).
pub fn canonicalize_with<R: BufRead, W: Write>(
    schema: &Schema,
    max_line: usize,
    source: &str,
    mut input: R,
    output: &mut W,
    out_path: &std::path::Path,
) -> Result<FileStats> {
    let max_line = max_line.max(1);
    let bad = |(line, column, reason): LineError| Error::BadInput {
        file: source.to_string(),
        line,
        column,
        reason,
    };
    let mut first = Vec::with_capacity(CHUNK_BYTES + (64 << 10));
    let mut c = Canonicalizer::with_max_line(schema, max_line);
    if !read_chunk(&mut input, &mut first, source)? {
        return Ok(c.stats);
    }
    let mut next = Vec::with_capacity(CHUNK_BYTES + (64 << 10));
    let more = read_chunk(&mut input, &mut next, source)?;
    let workers = cores().min(8);
    if !more || workers == 1 {
        // Small input (or one core): no threads.
        let mut out = Vec::with_capacity(first.len() + first.len() / 4);
        let mut line = 1;
        let mut chunk = first;
        let mut have = true;
        let mut pending = more.then_some(next);
        while have {
            out.clear();
            let same = c.chunk_into(&chunk, line, &mut out, true).map_err(bad)?;
            line += c.lines;
            let rows: &[u8] = if same { &chunk } else { &out };
            output.write_all(rows).ctx("write", out_path)?;
            c.stats.bytes += rows.len() as u64;
            match pending.take() {
                Some(p) => chunk = p,
                None => have = read_chunk(&mut input, &mut chunk, source)?,
            }
        }
        return Ok(c.stats);
    }
    parallel(schema, max_line, source, input, output, out_path, first, next, workers).map_err(|e| match e {
        Either::Line(l) => bad(l),
        Either::Other(e) => e,
    })
}

/// [`check_canonical_file`]'s threads take the file in segments of this many bytes, the next
/// one whenever they are done with one (a busy core takes fewer); a segment is the lines that
/// start in its byte range.
pub(super) const SEGMENT_BYTES: u64 = 1 << 20;

/// Bytes a thread of [`check_canonical_file`] reads at once: small enough to stay in the core's
/// cache between the `pread` and the check (a buffer that large costs ~0.2 ns/byte to fill),
/// larger only for a longer line.
pub(super) const CHECK_READ_BYTES: usize = 256 << 10;

/// Whether the first `len` bytes of `file` are already canonical rows, every line its own
/// canonical form ending in `\n` (what [`canonicalize`] would write back byte for byte): then the
/// statistics [`canonicalize`] would return for them (`bytes` = `len`); `None` from the first
/// line that is not (blank, BOM, CR, no `\n` after the last row, another spelling of a valid
/// row, an invalid or over-long line): the caller then runs [`canonicalize`], which
/// canonicalises the rows or words the error with its line and column.
///
/// Every row is checked in full, by the same check as [`canonicalize`]'s (docs/CLI.md
/// "Input rules"). The file is read with `pread` by one thread per core, each taking the next
/// [`SEGMENT_BYTES`] of it; memory is a [`CHECK_READ_BYTES`] buffer per thread (more for a longer
/// line, at most the longest line allowed, [`max_line_bytes`]). Meant for a file nobody else
/// writes (`tinydelta append --file` checks its own copy of the input, docs/BENCHMARKS.md "What each figure measures").
///
/// Errors: [`Error::Io`] naming `path` when a read fails or the file is shorter than `len`.
#[cfg(test)]
pub fn check_canonical_file(
    schema: &Schema,
    file: &std::fs::File,
    len: u64,
    path: &std::path::Path,
) -> Result<Option<FileStats>> {
    let written = Written::default();
    written.finish(len);
    check_canonical_while(schema, file, path, &written, || {})
}

/// How much of a file being written (by another thread) is there to read: [`Written::advance`]
/// as bytes are written from offset 0 on, [`Written::finish`] at its end, or [`Written::stop`].
#[derive(Debug, Default)]
pub struct Written {
    /// Bytes written, whether that is the whole file, whether the writer gave up.
    pub(super) state: std::sync::Mutex<(u64, bool, bool)>,
    pub(super) more: std::sync::Condvar,
}

/// What a reader of a [`Written`] file may read.
pub(super) enum Readable {
    /// This many bytes from offset 0, and whether that is the whole file.
    Upto(u64, bool),
    /// The writer gave up: stop reading.
    Stopped,
}

impl Written {
    /// The first `n` bytes are written.
    pub fn advance(&self, n: u64) {
        self.set(|st| st.0 = st.0.max(n));
    }

    /// The file is complete: `len` bytes.
    pub fn finish(&self, len: u64) {
        self.set(|st| *st = (len, true, st.2));
    }

    /// The writer gave up: readers stop (their result is discarded).
    pub fn stop(&self) {
        self.set(|st| st.2 = true);
    }

    /// [`Written::stop`] unless the file is complete (a writer that returned, or panicked,
    /// without saying how it ended).
    pub(super) fn stop_unless_finished(&self) {
        self.set(|st| st.2 |= !st.1);
    }

    pub(super) fn set(&self, f: impl FnOnce(&mut (u64, bool, bool))) {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut st);
        self.more.notify_all();
    }

    /// Wait until at least `n` bytes are written, or the file is complete, or the writer gave up.
    pub(super) fn wait(&self, n: u64) -> Readable {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            match *st {
                (_, _, true) => return Readable::Stopped,
                (w, done, false) if w >= n || done => return Readable::Upto(w, done),
                _ => {
                    st = self.more.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
        }
    }
}

/// Check that `file`, which another thread is still writing, holds canonical rows: every row in
/// full, by the same check as [`canonicalize`]'s, keeping up with the writing (`tinydelta append
/// --file` checks its copy while the kernel makes it): `write` runs on this thread once the other checking threads are started (it writes
/// `file` and reports through `written`; it must end with [`Written::finish`] or
/// [`Written::stop`]), then this thread checks too. Threads only read what `written` says is
/// there. After [`Written::stop`] the result is meaningless (`None` or an error).
///
/// Errors: [`Error::Io`] naming `path` when a read fails or the file is shorter than it must be.
pub fn check_canonical_while(
    schema: &Schema,
    file: &std::fs::File,
    path: &std::path::Path,
    written: &Written,
    write: impl FnOnce(),
) -> Result<Option<FileStats>> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let work = || -> Result<Option<FileStats>> {
        let mut c = Canonicalizer::new(schema);
        let mut buf = Vec::new();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let a = next.fetch_add(1, Ordering::Relaxed).saturating_mul(SEGMENT_BYTES);
            let b = match written.wait(a.saturating_add(SEGMENT_BYTES)) {
                Readable::Stopped => return Ok(None),
                Readable::Upto(len, true) if a >= len => break,
                Readable::Upto(len, _) => len.min(a + SEGMENT_BYTES),
            };
            let r = check_segment(&mut c, file, written, a..b, &mut buf);
            if !matches!(r, Ok(true)) {
                stop.store(true, Ordering::Relaxed);
            }
            match r {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(e) => return Err(Error::io("read", path, e)),
            }
        }
        c.fold_fast();
        Ok(Some(c.stats))
    };
    let results: Vec<Result<Option<FileStats>>> = std::thread::scope(|s| {
        let helpers: Vec<_> = (1..cores().min(8))
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(s, work).ok())
            .collect();
        /// Readers never wait for a writer that is gone.
        struct Ended<'a>(&'a Written);
        impl Drop for Ended<'_> {
            fn drop(&mut self) {
                self.0.stop_unless_finished();
            }
        }
        let ended = Ended(written);
        write();
        drop(ended);
        let mut all = vec![work()];
        // A helper that panicked checked nothing for sure: the caller takes the general path.
        all.extend(helpers.into_iter().map(|h| h.join().unwrap_or(Ok(None))));
        all
    });
    let mut total = FileStats {
        columns: ColumnStats::for_schema(schema),
        ..FileStats::default()
    };
    let mut canonical = true;
    for r in results {
        match r? {
            Some(st) => total.merge(&st),
            None => canonical = false,
        }
    }
    total.bytes = match written.wait(u64::MAX) {
        Readable::Upto(len, true) => len,
        _ => return Ok(None),
    };
    Ok(canonical.then_some(total))
}

/// [`check_canonical_while`] for the lines of `file` that start in `range` (which `written`
/// says is there), counted in `c`: `false` at the first that is not canonical, longer than
/// [`max_line_bytes`] or not ended by `\n`. `buf` is the thread's read buffer.
pub(super) fn check_segment(
    c: &mut Canonicalizer,
    file: &std::fs::File,
    written: &Written,
    range: std::ops::Range<u64>,
    buf: &mut Vec<u8>,
) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let max = DEFAULT_MAX_LINE_BYTES;
    if buf.len() < CHECK_READ_BYTES {
        buf.resize(CHECK_READ_BYTES, 0);
    }
    let mut pos = range.start;
    if pos > 0 {
        // The first line starting in the range follows the first `\n` at or after its start - 1.
        pos -= 1;
        loop {
            if pos >= range.end {
                return Ok(true);
            }
            let n = usize::try_from(range.end - pos).unwrap_or(usize::MAX).min(buf.len());
            file.read_exact_at(&mut buf[..n], pos)?;
            if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
                pos += i as u64 + 1;
                break;
            }
            pos += n as u64;
        }
    }
    let mut need = pos + 1;
    while pos < range.end {
        let (there, complete) = match written.wait(need) {
            Readable::Upto(n, complete) => (n, complete),
            Readable::Stopped => return Ok(false),
        };
        let n = usize::try_from(there.saturating_sub(pos))
            .unwrap_or(usize::MAX)
            .min(buf.len());
        file.read_exact_at(&mut buf[..n], pos)?;
        let Some(last) = memchr::memrchr(b'\n', &buf[..n]) else {
            if n < buf.len() && !complete {
                // The line goes on in bytes not written yet.
                need = pos + n as u64 + 1;
                continue;
            }
            // No line end: the last line has no `\n`, or the line is longer than the buffer.
            if n < buf.len() || buf.len() > max {
                return Ok(false);
            }
            let grown = buf.len().saturating_mul(2).min(max.saturating_add(1));
            buf.resize(grown, 0);
            continue;
        };
        let mut rest = &buf[..=last];
        while !rest.is_empty() && pos < range.end {
            match c.canonical_row(rest, true) {
                Some(end) if end <= max => {
                    rest = &rest[end + 1..];
                    pos += end as u64 + 1;
                }
                _ => return Ok(false),
            }
        }
        need = pos + 1;
    }
    Ok(true)
}

pub(super) enum Either {
    Line(LineError),
    Other(Error),
}

impl From<Error> for Either {
    fn from(e: Error) -> Self {
        Either::Other(e)
    }
}

thread_local! {
    /// Spare row buffers of [`LineCheck`]'s pieces, kept by the thread that feeds it.
    pub(super) static PIECE_ROWS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}


/// Rows of a JSONL data file: its lines that are not blank.
/// Errors: [`Error::Io`] naming `path`.
pub fn count_rows(file: std::fs::File, path: &std::path::Path) -> Result<u64> {
    let mut n = 0u64;
    for line in BufReader::with_capacity(1 << 20, file).split(b'\n') {
        let line = line.map_err(|e| Error::io("read", path, e))?;
        if !line.iter().all(|b| b.is_ascii_whitespace()) {
            n += 1;
        }
    }
    Ok(n)
}

/// Rows of a data file that must be canonical JSONL (docs/FORMAT.md, "Data files"): every line
/// is re-canonicalised against `schema` and must come out byte for byte the same, and the last
/// line must end with `\n`. A line written before `alter add-column` or `append --merge-schema`
/// (docs/FORMAT.md, "Schema evolution") lacks the nullable columns and struct fields added
/// since, which come last in their object: it is canonical when it is its canonical form less
/// some trailing `null` members of its objects ([`same_but_trailing_nulls`]). Returns
/// `Ok(Ok(rows))`, or `Ok(Err(reason))` naming the first line that is not canonical. Errors:
/// [`Error::Io`] naming `path`.
pub fn canonical_file_rows(
    file: std::fs::File,
    path: &std::path::Path,
    schema: &crate::format::schema::Schema,
) -> Result<std::result::Result<u64, String>> {
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let mut out = Vec::new();
    let mut n = 0u64;
    let mut c = crate::format::rows::LineCheck::new(schema.clone());
    loop {
        line.clear();
        let k = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| Error::io("read", path, e))?;
        if k == 0 {
            return Ok(Ok(n));
        }
        n += 1;
        if line.last() != Some(&b'\n') {
            return Ok(Err(format!("line {n} has no final newline")));
        }
        out.clear();
        if let Err(e) = c.feed("data file", &line, &mut out) {
            return Ok(Err(format!("line {n} is not a valid row: {e}")));
        }
        if out != line && !same_but_trailing_nulls(&line, &out) {
            return Ok(Err(format!("line {n} is not canonical JSONL (as tinydelta writes it)")));
        }
    }
}

/// Whether `line` is `canonical` (a canonical row) less some trailing members of its objects
/// whose value is `null`: `{"a":1,"s":{"x":1}}` for `{"a":1,"s":{"x":1,"y":null},"b":null}`.
/// Walks both in step, byte for byte; where `line` closes an object and `canonical` goes on with
/// `,"key":null` members up to that object's end, those are passed over. A `"` inside a JSON
/// string is escaped, so a `,"` inside a string never reads as a member.
pub(crate) fn same_but_trailing_nulls(line: &[u8], canonical: &[u8]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < line.len() && j < canonical.len() {
        if line[i] == canonical[j] {
            i += 1;
            j += 1;
            continue;
        }
        if line[i] != b'}' {
            return false;
        }
        // `canonical` has more members here: each must be `,"key":null`, up to the `}`.
        while canonical.get(j) == Some(&b',') {
            j += 1;
            let Some(after) = skip_json_string(canonical, j) else {
                return false;
            };
            if !canonical[after..].starts_with(b":null") {
                return false;
            }
            j = after + 5;
        }
        if canonical.get(j) != Some(&b'}') {
            return false;
        }
    }
    i == line.len() && j == canonical.len()
}

/// The index after the JSON string that starts at `at` (its opening `"`), or `None`.
fn skip_json_string(s: &[u8], at: usize) -> Option<usize> {
    if s.get(at) != Some(&b'"') {
        return None;
    }
    let mut k = at + 1;
    while k < s.len() {
        match s[k] {
            b'\\' => k += 2,
            b'"' => return Some(k + 1),
            _ => k += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::same_but_trailing_nulls as same;

    #[test]
    fn rows_written_before_columns_were_added() {
        let full = br#"{"a":1,"s":{"x":1,"y":null},"b":null}"#;
        assert!(same(br#"{"a":1,"s":{"x":1},"b":null}"#, full));
        assert!(same(br#"{"a":1,"s":{"x":1}}"#, full));
        assert!(same(br#"{"a":1,"s":{"x":1,"y":null}}"#, full));
        assert!(same(full, full));
        // Only trailing members, only nulls, nothing else differs.
        assert!(!same(br#"{"a":1}"#, br#"{"a":1,"s":{"x":1},"b":null}"#));
        assert!(!same(br#"{"a":2,"s":{"x":1}}"#, full));
        assert!(!same(br#"{"a":1,"b":null}"#, full));
        assert!(!same(br#"{"a":1,"s":{"x":1},"b":null} "#, full));
        // A `,"k":null` inside a string is escaped, never a member.
        assert!(!same(br#"{"a":"}"}"#, br#"{"a":",\"k\":null}"}"#));
        // In arrays of structs too.
        assert!(same(br#"{"t":[{"x":1},{"x":2}]}"#, br#"{"t":[{"x":1,"y":null},{"x":2,"y":null}]}"#));
    }
}
