//! Parallel validation: a large write cut into pieces checked on helper threads, and the
//! chunked pipeline of [`canonicalize`].

#[allow(unused_imports)]
use super::*;

/// Bytes of whole lines [`LineCheck`] checks on one thread; a larger write is cut into pieces
/// of about this size (at most one per core) checked at the same time.
pub(super) const LINE_CHECK_PIECE: usize = 256 << 10;

/// What [`LineCheck::feed_kept_beside`] runs on the feeding thread while helper threads check
/// the pieces of a large write (at most once per feed).
pub type Beside<'a> = Option<&'a mut dyn FnMut()>;

/// One piece's statistics, whether it is its own canonical rows and its number of lines, or
/// its first bad line (numbered from 1 in the piece).
pub(super) type PieceResult = std::result::Result<(FileStats, bool, u64), LineError>;

/// The pieces of one large write, shared by the feeding thread and the helpers: each takes the
/// next unchecked piece until none is left, so a helper that is late (the machine is busy)
/// leaves its share to the others instead of holding the write up.
pub(super) struct Pieces {
    pub(super) schema: Schema,
    /// The longest line accepted ([`LineCheck::with_max_line_bytes`]).
    pub(super) max_line: usize,
    /// A copy of the write's complete lines (the helpers cannot borrow the caller's buffer),
    /// given back to [`INPUTS`] when the last holder drops it.
    pub(super) input: Vec<u8>,
    /// Each piece's bytes in `input`.
    pub(super) ranges: Vec<std::ops::Range<usize>>,
    pub(super) defer: bool,
    pub(super) next: std::sync::atomic::AtomicUsize,
    /// Row buffers for the helpers (non-canonical rows only).
    pub(super) spare: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl Pieces {
    pub(super) fn take(&self) -> Option<usize> {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (i < self.ranges.len()).then_some(i)
    }
}

/// Buffers for the copies of large writes [`check_pieces`] hands to the helpers, reused (a
/// fresh 1 MiB buffer costs a page fault per 4 KiB per 4 KiB). A copy comes back when the last
/// thread holding its [`Pieces`] drops them, whichever thread that is.
pub(super) static INPUTS: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

impl Drop for Pieces {
    fn drop(&mut self) {
        let input = std::mem::take(&mut self.input);
        if input.capacity() <= MAX_PIECES_INPUT {
            let mut pool = INPUTS.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < 2 {
                pool.push(input);
            }
        }
    }
}

/// Check the whole lines `piece` (numbered from 1) into `rows` (cleared first).
pub(super) fn check_piece(
    schema: &Schema,
    max_line: usize,
    piece: &[u8],
    defer: bool,
    rows: &mut Vec<u8>,
) -> PieceResult {
    let mut c = Canonicalizer::with_max_line(schema, max_line);
    rows.clear();
    c.chunk_into(piece, 1, rows, defer).map(|same| {
        c.stats.bytes = if same { piece.len() } else { rows.len() } as u64;
        (std::mem::take(&mut c.stats), same, c.lines)
    })
}

/// A piece checked by a helper: its index, rows buffer and result.
pub(super) type Checked = (usize, Vec<u8>, PieceResult);

/// The helper threads that check pieces of large writes: `cores - 1` of them (at most 3),
/// started once per process (a thread start per write of the mount cost ~6% of its time per
/// `cp`), at the lowest priority. They wait on a queue (no spinning: the machine's
/// other work keeps its CPU).
pub(super) struct Helpers {
    pub(super) jobs: std::sync::Mutex<std::sync::mpsc::Sender<(std::sync::Arc<Pieces>, std::sync::mpsc::Sender<Checked>)>>,
    pub(super) count: usize,
}

pub(super) fn helpers() -> Option<&'static Helpers> {
    use std::sync::{Arc, Mutex, mpsc};
    static HELPERS: std::sync::OnceLock<Option<Helpers>> = std::sync::OnceLock::new();
    HELPERS
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<(Arc<Pieces>, mpsc::Sender<Checked>)>();
            let rx = Arc::new(Mutex::new(rx));
            let mut count = 0;
            for k in 1..cores().min(MAX_PIECES) {
                let rx = Arc::clone(&rx);
                let started = std::thread::Builder::new()
                    .name(format!("tinydelta-check-{k}"))
                    .spawn(move || {
                        // The lowest priority (nice 19; on Linux the nice value is the calling
                        // thread's, setpriority(2)): a helper uses a core nothing else wants.
                        // Woken at normal priority on a busy machine, it took the core of the
                        // thread that woke it, which then waited for it (seen in a profile);
                        // that thread checks whatever the helper does not get to. If the call
                        // fails the helper runs at normal priority, which is only slower.
                        let _ = rustix::process::setpriority_process(None, 19);
                        loop {
                            let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                            let Ok((work, done)) = job else { return };
                            while let Some(i) = work.take() {
                                let _ = crate::sys::failpoint::hit("check-helper");
                                let mut rows = work
                                    .spare
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .pop()
                                    .unwrap_or_default();
                                let r = check_piece(
                                    &work.schema,
                                    work.max_line,
                                    &work.input[work.ranges[i].clone()],
                                    work.defer,
                                    &mut rows,
                                );
                                // The feeding thread stopped waiting (it checked the rest
                                // itself): nothing more to do for this write.
                                if done.send((i, rows, r)).is_err() {
                                    break;
                                }
                            }
                        }
                    });
                match started {
                    Ok(_) => count += 1,
                    Err(e) => log::warn!("cannot start a row-checking thread ({e}): checking with fewer"),
                }
            }
            (count > 0).then(|| Helpers {
                jobs: Mutex::new(tx),
                count,
            })
        })
        .as_ref()
}

/// `complete` cut into `pieces` (contiguous, from its start) checked by this thread and the
/// helpers; `beside` runs on this thread first. The results in piece order, each with its rows
/// buffer (from this thread's spare buffers).
///
/// This thread never waits long for a helper: once it has checked every piece nobody took, it
/// waits for each piece a helper still has for about as long as this thread took per piece,
/// then checks that piece itself (a helper the scheduler has put aside on a busy machine must
/// not hold the write up; the first result of a piece is used, and both are the same).
pub(super) fn check_pieces(
    schema: &Schema,
    max_line: usize,
    complete: &[u8],
    pieces: &[&[u8]],
    defer: bool,
    beside: &mut Beside,
) -> Vec<(Vec<u8>, PieceResult)> {
    use std::sync::mpsc::{self, RecvTimeoutError};
    use std::sync::{Arc, Mutex};
    let n = pieces.len();
    let mut spare = PIECE_ROWS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let (done_tx, done_rx) = mpsc::channel::<Checked>();
    // The first piece is this thread's (after `beside`): the helpers get a copy of the others.
    let skip = pieces.first().map_or(0, |p| p.len());
    let mut ranges = Vec::with_capacity(n);
    let mut at: usize = 0;
    for p in pieces {
        ranges.push(at.saturating_sub(skip)..(at + p.len()).saturating_sub(skip));
        at += p.len();
    }
    let work = helpers().map(|h| {
        let mut input = INPUTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        input.clear();
        input.extend_from_slice(&complete[skip.min(complete.len())..]);
        let work = Arc::new(Pieces {
            schema: schema.clone(),
            max_line,
            input,
            ranges,
            defer,
            next: std::sync::atomic::AtomicUsize::new(1),
            spare: Mutex::new(spare.split_off(spare.len().min(n) / 2)),
        });
        let jobs = h.jobs.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..h.count {
            // A helper that is gone leaves its pieces to this thread.
            let _ = jobs.send((Arc::clone(&work), done_tx.clone()));
        }
        work
    });
    drop(done_tx);
    if let Some(f) = beside.take() {
        f();
    }
    let mut results: Vec<Option<(Vec<u8>, PieceResult)>> = (0..n).map(|_| None).collect();
    let started = std::time::Instant::now();
    let mut mine: u32 = 0;
    let mut local_next = 0;
    let check_here = |i: usize, spare: &mut Vec<Vec<u8>>| {
        let mut rows = spare.pop().unwrap_or_default();
        let r = check_piece(schema, max_line, pieces[i], defer, &mut rows);
        (rows, r)
    };
    loop {
        let i = match &work {
            Some(_) if mine == 0 => Some(0),
            Some(w) => w.take(),
            None => {
                local_next += 1;
                (local_next <= n).then_some(local_next - 1)
            }
        };
        let Some(i) = i else { break };
        results[i] = Some(check_here(i, &mut spare));
        mine += 1;
    }
    // The pieces the helpers took (a helper that stopped drops its sender: this thread checks
    // its pieces).
    let patience = started.elapsed() / mine.max(1) + std::time::Duration::from_micros(50);
    for i in 0..n {
        while results[i].is_none() {
            match done_rx.recv_timeout(patience) {
                Ok((j, rows, r)) => {
                    if results[j].is_none() {
                        results[j] = Some((rows, r));
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    results[i] = Some(check_here(i, &mut spare));
                }
            }
        }
    }
    if let Some(w) = &work {
        // A helper that comes to this write late finds nothing left to take.
        w.next.store(n, std::sync::atomic::Ordering::Relaxed);
        spare.extend(w.spare.lock().unwrap_or_else(|p| p.into_inner()).drain(..));
    }
    PIECE_ROWS.with(|b| *b.borrow_mut() = spare);
    results.into_iter().flatten().collect()
}

/// The largest copy of a write [`check_pieces`] keeps between writes (a write of the mount is at
/// most 1 MiB).
pub(super) const MAX_PIECES_INPUT: usize = 4 << 20;

/// The most pieces one [`LineCheck`] write is cut into (and the most threads checking them).
pub(super) const MAX_PIECES: usize = 4;

/// `complete` (whole lines) cut at line ends into at most [`MAX_PIECES`] pieces, each of at
/// least `min` bytes; one piece when it is small or there is one core. More pieces than cores
/// let the threads balance them with the work the feeding thread does beside (the mount
/// writes the same bytes into the page cache while they are checked).
pub(super) fn split_lines(complete: &[u8], min: usize) -> Vec<&[u8]> {
    let most = if cores() == 1 { 1 } else { MAX_PIECES };
    let n = most.min(complete.len() / min.max(1)).max(1);
    let mut pieces = Vec::with_capacity(n);
    let mut start = 0;
    for k in 1..n {
        let target = (complete.len() * k / n).max(start);
        match memchr::memchr(b'\n', &complete[target..]) {
            Some(p) if target + p + 1 < complete.len() => {
                pieces.push(&complete[start..target + p + 1]);
                start = target + p + 1;
            }
            _ => break,
        }
    }
    pieces.push(&complete[start..]);
    pieces
}

pub(super) fn count_lines(chunk: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', chunk).count() as u64
}

/// A chunk's index and (its rows, the chunk, their statistics, whether the chunk is its own rows).
pub(super) type ChunkResult = (u64, std::result::Result<(Vec<u8>, Vec<u8>, FileStats, bool), LineError>);

#[allow(clippy::too_many_arguments)]
pub(super) fn parallel<R: BufRead, W: Write>(
    schema: &Schema,
    max_line: usize,
    source: &str,
    mut input: R,
    output: &mut W,
    out_path: &std::path::Path,
    first: Vec<u8>,
    second: Vec<u8>,
    workers: usize,
) -> std::result::Result<FileStats, Either> {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex, mpsc};

    let max_in_flight = workers * 2;
    std::thread::scope(|scope| {
        let (job_tx, job_rx) = mpsc::sync_channel::<(u64, u64, Vec<u8>, Vec<u8>)>(max_in_flight);
        let job_rx = Arc::new(Mutex::new(job_rx));
        let (res_tx, res_rx) = mpsc::channel::<ChunkResult>();
        for _ in 0..workers {
            let job_rx = Arc::clone(&job_rx);
            let res_tx = res_tx.clone();
            scope.spawn(move || {
                let mut c = Canonicalizer::with_max_line(schema, max_line);
                loop {
                    let job = match job_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    let Ok((idx, line, chunk, mut out)) = job else { return };
                    c.stats = FileStats {
                        columns: ColumnStats::for_schema(schema),
                        ..FileStats::default()
                    };
                    out.clear();
                    let r = c
                        .chunk_into(&chunk, line, &mut out, true)
                        .map(|same| (out, chunk, std::mem::take(&mut c.stats), same));
                    if res_tx.send((idx, r)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(res_tx);
        let mut total = FileStats {
            columns: ColumnStats::for_schema(schema),
            ..FileStats::default()
        };
        let mut spare: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut pending: BTreeMap<u64, (Vec<u8>, Vec<u8>, FileStats, bool)> = BTreeMap::new();
        let (mut sent, mut written, mut line) = (0u64, 0u64, 1u64);
        let send = |chunk: Vec<u8>, out: Vec<u8>, sent: &mut u64, line: &mut u64| -> bool {
            let n = count_lines(&chunk);
            let ok = job_tx.send((*sent, *line, chunk, out)).is_ok();
            *sent += 1;
            *line += n;
            ok
        };
        send(first, Vec::new(), &mut sent, &mut line);
        send(second, Vec::new(), &mut sent, &mut line);
        let mut eof = false;
        // The first failure in input order: (chunk index, error). I/O errors use index 0.
        let mut err: Option<(u64, Either)> = None;
        loop {
            while err.is_none() && !eof && sent - written < max_in_flight as u64 {
                let (mut chunk, out) = spare.pop().unwrap_or_default();
                match read_chunk(&mut input, &mut chunk, source) {
                    Ok(true) => {
                        send(chunk, out, &mut sent, &mut line);
                    }
                    Ok(false) => eof = true,
                    Err(e) => err = Some((0, e.into())),
                }
            }
            // Until the failure, every earlier chunk must be written (or fail earlier).
            let target = err.as_ref().map_or(sent, |(i, _)| *i);
            if written >= target {
                break;
            }
            let Ok((idx, r)) = res_rx.recv() else { break };
            match r {
                Ok(done) => {
                    pending.insert(idx, done);
                }
                Err(l) => {
                    if err.as_ref().is_none_or(|(i, _)| idx < *i) {
                        err = Some((idx, Either::Line(l)));
                    }
                }
            }
            while let Some((out, chunk, st, same)) = pending.remove(&written) {
                let rows: &[u8] = if same { &chunk } else { &out };
                if let Err(e) = output.write_all(rows).ctx("write", out_path) {
                    err = Some((0, e.into()));
                    break;
                }
                total.merge(&st);
                total.bytes += rows.len() as u64;
                spare.push((chunk, out));
                written += 1;
            }
        }
        drop(job_tx);
        match err {
            Some((_, e)) => Err(e),
            None => Ok(total),
        }
    })
}
