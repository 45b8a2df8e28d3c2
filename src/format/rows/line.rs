//! The line check: the longest line allowed, and [`LineCheck`], which checks the rows of one
//! write as they arrive (the mount's `incoming/` and `append`).

#[allow(unused_imports)]
use super::*;

/// (line, column, reason) of a rejected line.
pub(super) type LineError = (u64, String, String);

/// The default maximum line length, bytes without the `\n`: 16 MiB. A longer line is
/// [`Error::BadInput`] naming it; memory per validation is bounded by the limit, not by the
/// input (docs/MOUNT.md "Limits"). The mount's `--max-line-bytes` sets another value for
/// `incoming/` ([`LineCheck::with_max_line_bytes`]).
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 << 20;

/// Longest reason kept in an error: a rejected value is quoted only up to about 200 bytes, so a
/// 50 MB integer makes a short note, not a 50 MB one.
pub(super) const MAX_REASON_BYTES: usize = 240;

pub(super) fn excerpt(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_string();
    }
    let mut end = 200;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes in all)", &reason[..end], reason.len())
}

/// Streaming validation and canonicalisation of rows written sequentially (the mount's
/// `incoming/`): feed the bytes in order; each complete line is validated as it arrives (so a bad
/// line fails the write that completes it) and its canonical form appended to the caller's
/// output, and [`LineCheck::finish`] handles a last line without `\n`. Memory: the unfinished
/// last line, at most its maximum line length ([`LineCheck::with_max_line_bytes`]).
///
/// [`LineCheck::feed_kept`] and [`LineCheck::finish_kept`] write no rows while every row is its
/// own canonical form (the input is then its own data file, docs/MOUNT.md "One pass over the bytes, written once"), only from the first row
/// that is not.
#[derive(Debug)]
pub struct LineCheck {
    pub(super) schema: Schema,
    pub(super) pending: Vec<u8>,
    pub(super) line: u64,
    pub(super) offset: u64,
    pub(super) stats: FileStats,
    /// Every complete line so far is its own canonical row, byte for byte (then `stats.bytes`
    /// is the length of the input up to the end of its last complete line).
    pub(super) same: bool,
    /// The longest line accepted, bytes without its `\n`.
    pub(super) max_line: usize,
}

/// What [`LineCheck::feed_kept`] and [`LineCheck::finish_kept`] did with the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Every row so far is its own canonical form: the canonical rows are the input's first
    /// `stats.bytes` bytes, and nothing was appended to the output.
    Same,
    /// The output got canonical rows. `prefix` > 0 the first time only (when a row is not its own
    /// canonical form for the first time): the input's first `prefix` bytes, rows canonical as
    /// they are, come before what was appended (the caller copies them; they were not).
    Rows {
        /// Bytes of the input to put before the appended rows.
        prefix: u64,
    },
}

/// The environment variable that caps the threads validating rows (docs/CLI.md "Environment"):
/// a whole number >= 1; unset, empty or anything else means every core.
pub const THREADS_ENV: &str = "TINYDELTA_THREADS";

/// How many threads validation uses: the cores (`available_parallelism`), at most
/// [`THREADS_ENV`] when that is set to a whole number >= 1. Read once: `available_parallelism`
/// reads cgroup files each time it is asked, a dozen system calls per write of the mount. A
/// value that is not such a number is ignored with a warning in the log.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        let all = std::thread::available_parallelism().map_or(1, |n| n.get());
        threads_cap(all, std::env::var(THREADS_ENV).ok().as_deref())
    })
}

/// `all` capped by the value `var` of [`THREADS_ENV`] (see [`cores`]).
pub(super) fn threads_cap(all: usize, var: Option<&str>) -> usize {
    match var.map(str::trim) {
        None | Some("") => all,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n >= 1 => all.min(n),
            _ => {
                log::warn!("{THREADS_ENV}={v:?} is not a whole number >= 1: validating with every core ({all})");
                all
            }
        },
    }
}

impl LineCheck {
    /// A check against `schema`, expecting bytes from offset 0.
    pub fn new(schema: Schema) -> LineCheck {
        let stats = FileStats {
            columns: ColumnStats::for_schema(&schema),
            ..FileStats::default()
        };
        LineCheck {
            schema,
            pending: Vec::new(),
            line: 1,
            offset: 0,
            stats,
            same: true,
            max_line: DEFAULT_MAX_LINE_BYTES,
        }
    }

    /// This check accepting lines of at most `n` bytes without the `\n` (at least 1) instead of
    /// [`DEFAULT_MAX_LINE_BYTES`].
    pub fn with_max_line_bytes(mut self, n: usize) -> LineCheck {
        self.max_line = n.max(1);
        self
    }

    /// The schema it checks against.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The offset (bytes) the next [`LineCheck::feed`] must start at.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of canonical rows of the complete lines fed so far (while [`Kept::Same`], the
    /// length of the input up to the end of its last complete line).
    pub fn stats_bytes(&self) -> u64 {
        self.stats.bytes
    }

    pub(super) fn bad(source: &str, (line, column, reason): LineError) -> Error {
        Error::BadInput {
            file: source.to_string(),
            line,
            column,
            reason,
        }
    }

    /// Check the whole lines `complete`. With `defer` and every line its own canonical row:
    /// `Ok(true)` and `out` untouched; otherwise `Ok(false)` and every row appended to `out`.
    /// `beside` (when still there) is taken and run on this thread while helper threads check
    /// pieces of a large `complete`.
    pub(super) fn run(
        &mut self,
        source: &str,
        complete: &[u8],
        out: &mut Vec<u8>,
        defer: bool,
        beside: &mut Beside,
    ) -> Result<bool> {
        let pieces = split_lines(complete, LINE_CHECK_PIECE);
        if pieces.len() == 1 {
            let mut c = Canonicalizer::with_max_line(&self.schema, self.max_line);
            let before = out.len();
            let same = c
                .chunk_into(complete, self.line, out, defer)
                .map_err(|e| Self::bad(source, e))?;
            c.stats.bytes = if same { complete.len() } else { out.len() - before } as u64;
            self.stats.merge(&c.stats);
            self.line += c.lines;
            return Ok(same);
        }
        // A large write (the mount takes up to 1 MiB per request): its pieces are checked by
        // this thread and the helper threads at the same time, so a request costs about the
        // time of its share of the pieces. Each piece counts its lines from 1: their numbers in
        // the input are known once the pieces before it are counted (no pass over the write
        // to count them first).
        let results = check_pieces(&self.schema, self.max_line, complete, &pieces, defer, beside);
        // The first bad line in input order wins, as in one pass.
        // A failed write counts none of its rows (as in one pass): the caller may feed the
        // good lines before the bad one again (crate::format::diagnose does).
        let mut line = self.line;
        let mut failed = None;
        for (_, r) in &results {
            match r {
                Ok((_, _, lines)) => line += lines,
                Err((at, column, reason)) => {
                    failed = Some((line + at - 1, column.clone(), reason.clone()));
                    break;
                }
            }
        }
        let mut all_same = true;
        if failed.is_none() {
            for (st, same, _) in results.iter().filter_map(|(_, r)| r.as_ref().ok()) {
                self.stats.merge(st);
                all_same &= *same;
            }
        }
        let mut keep = Vec::with_capacity(results.len());
        for (i, (rows, r)) in results.into_iter().enumerate() {
            if failed.is_none() && !all_same {
                match r {
                    Ok((_, true, _)) => out.extend_from_slice(pieces[i]),
                    _ => out.extend_from_slice(&rows),
                }
            }
            if rows.capacity() <= 2 * LINE_CHECK_PIECE * 4 {
                keep.push(rows);
            }
        }
        PIECE_ROWS.with(|b| {
            let mut b = b.borrow_mut();
            b.extend(keep);
            b.truncate(MAX_PIECES);
        });
        if let Some(e) = failed {
            return Err(Self::bad(source, e));
        }
        self.line = line;
        Ok(all_same)
    }

    /// Validate the complete lines `data` finishes, appending their canonical rows to `out`.
    /// Errors: [`Error::BadInput`] naming `source`, the 1-based line, the column and the reason
    /// (also for a line longer than the maximum).
    pub fn feed(&mut self, source: &str, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.same = false;
        self.feed_kept(source, data, out).map(|_| ())
    }

    /// [`LineCheck::feed`], appending no rows while every row so far is its own canonical form
    /// ([`Kept`]).
    pub fn feed_kept(&mut self, source: &str, data: &[u8], out: &mut Vec<u8>) -> Result<Kept> {
        self.feed_kept_beside(source, data, out, &mut || {})
    }

    /// [`LineCheck::feed_kept`], running `beside` once on this thread (also when the check
    /// fails), while helper threads check the pieces of a large write if there are any (the
    /// mount writes the same bytes into the page cache meanwhile).
    pub fn feed_kept_beside(
        &mut self,
        source: &str,
        data: &[u8],
        out: &mut Vec<u8>,
        beside: &mut dyn FnMut(),
    ) -> Result<Kept> {
        let mut beside = Some(beside);
        let r = self.feed_inner(source, data, out, &mut beside);
        if let Some(f) = beside {
            f();
        }
        r
    }

    pub(super) fn feed_inner(&mut self, source: &str, data: &[u8], out: &mut Vec<u8>, beside: &mut Beside) -> Result<Kept> {
        self.offset += data.len() as u64;
        let at = out.len();
        let (was_same, prefix) = (self.same, self.stats.bytes);
        let Some(nl) = memchr::memrchr(b'\n', data) else {
            self.pending.extend_from_slice(data);
            let max = self.max_line;
            if self.pending.len() > max {
                return Err(Self::bad(
                    source,
                    (
                        self.line,
                        "1".into(),
                        format!("the line is longer than the maximum of {max} bytes"),
                    ),
                ));
            }
            return Ok(self.kept(was_same, prefix));
        };
        let mut start = 0;
        if !self.pending.is_empty() {
            // Finish the pending line on its own, then check the rest where it lies (no copy).
            let first = memchr::memchr(b'\n', data).unwrap_or(nl);
            let mut line = std::mem::take(&mut self.pending);
            line.extend_from_slice(&data[..=first]);
            self.same = self.run(source, &line, out, self.same, &mut None)?;
            start = first + 1;
            if start <= nl {
                let same_before = self.same;
                self.same = self.run(source, &data[start..=nl], out, self.same, beside)?;
                if same_before && !self.same {
                    // The pending line was its own row: it goes before the rows just written.
                    out.splice(at..at, line.iter().copied());
                }
            }
            line.clear();
            self.pending = line;
        } else {
            self.same = self.run(source, &data[start..=nl], out, self.same, beside)?;
        }
        self.pending.extend_from_slice(&data[nl + 1..]);
        Ok(self.kept(was_same, prefix))
    }

    pub(super) fn kept(&self, was_same: bool, prefix: u64) -> Kept {
        match (was_same, self.same) {
            (_, true) => Kept::Same,
            (true, false) => Kept::Rows { prefix },
            (false, false) => Kept::Rows { prefix: 0 },
        }
    }

    /// The end of the input: validate a last line without `\n` (appending its row to `out`) and
    /// return the statistics of every row fed. Errors: as [`LineCheck::feed`].
    pub fn finish(&mut self, source: &str, out: &mut Vec<u8>) -> Result<FileStats> {
        self.same = false;
        self.finish_kept(source, out).map(|(st, _)| st)
    }

    /// [`LineCheck::finish`] after [`LineCheck::feed_kept`]: a last line without `\n` is never
    /// its own row (its row ends in `\n`).
    pub fn finish_kept(&mut self, source: &str, out: &mut Vec<u8>) -> Result<(FileStats, Kept)> {
        let (was_same, prefix) = (self.same, self.stats.bytes);
        if !self.pending.is_empty() {
            let tail = std::mem::take(&mut self.pending);
            self.same = self.run(source, &tail, out, self.same, &mut None)?;
        }
        Ok((self.stats.clone(), self.kept(was_same, prefix)))
    }
}

#[cfg(test)]
mod tests {
    use super::threads_cap;

    /// `TINYDELTA_THREADS` only lowers the thread count; a value that is not a whole number >= 1
    /// leaves every core.
    #[test]
    fn threads_env_caps_the_cores() {
        assert_eq!(threads_cap(8, None), 8);
        assert_eq!(threads_cap(8, Some("")), 8);
        assert_eq!(threads_cap(8, Some("1")), 1);
        assert_eq!(threads_cap(8, Some(" 3 ")), 3);
        assert_eq!(threads_cap(2, Some("16")), 2);
        for bad in ["0", "-1", "two", "1.5"] {
            assert_eq!(threads_cap(4, Some(bad)), 4, "{bad}");
        }
    }
}
