//! Progress on a terminal for long work (docs/CLI.md "Progress"), drawn with `indicatif`.
//!
//! A [`Progress`] draws nothing for its first second, so quick commands stay silent, and
//! nothing at all when stderr is not a terminal or `--quiet` was given. Byte progress
//! ([`Progress::bytes`]) shows bytes and rows done, the rate and, when the size is known, a bar
//! and the time left; [`Progress::spinner`] shows a message and the elapsed time for work
//! whose size is unknown (vacuum, check, optimize, export: which version it is at). Dropping it clears the line.

use std::io::{self, BufRead, IsTerminal, Read};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before its progress is drawn.
pub const SHOW_AFTER: Duration = Duration::from_secs(1);

/// A progress line that appears after [`SHOW_AFTER`] on a terminal, and never elsewhere.
pub struct Progress {
    bar: ProgressBar,
    stop: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    rows: u64,
    last: Instant,
}

impl Progress {
    /// Whether progress may be drawn: stderr is a terminal and not `quiet`.
    pub fn wanted(quiet: bool) -> bool {
        !quiet && io::stderr().is_terminal()
    }

    fn start(bar: ProgressBar, quiet: bool) -> Progress {
        let stop = Self::wanted(quiet).then(|| {
            let (tx, rx) = mpsc::channel::<()>();
            let b = bar.clone();
            let h = std::thread::spawn(move || {
                if rx.recv_timeout(SHOW_AFTER) != Err(mpsc::RecvTimeoutError::Timeout) {
                    return;
                }
                b.set_draw_target(ProgressDrawTarget::stderr());
                b.enable_steady_tick(Duration::from_millis(100));
                let _ = rx.recv();
                b.finish_and_clear();
            });
            (tx, h)
        });
        Progress {
            bar,
            stop,
            rows: 0,
            last: Instant::now(),
        }
    }

    /// Bytes and rows read, for `label` (e.g. `append`); `total`: the input's size in bytes
    /// when known.
    pub fn bytes(label: &str, total: Option<u64>, quiet: bool) -> Progress {
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        let template = match total {
            Some(_) => {
                "{prefix} [{bar:30}] {binary_bytes}/{binary_total_bytes} {msg} {binary_bytes_per_sec}, {eta} left"
            }
            None => "{spinner} {prefix} {binary_bytes} {msg} {binary_bytes_per_sec}",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_string());
        bar.set_message("0 rows");
        Self::start(bar, quiet)
    }

    /// A spinner with `message` and the time elapsed, for work of unknown size.
    pub fn spinner(message: &str, quiet: bool) -> Progress {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.set_message(message.to_string());
        Self::start(bar, quiet)
    }

    /// Replace the message a spinner shows (e.g. how far a multi-step job is).
    pub fn set_message(&self, message: String) {
        self.bar.set_message(message);
    }

    /// Count `bytes` read, holding `newlines` line ends.
    fn advance(&mut self, bytes: u64, newlines: u64) {
        if self.stop.is_none() {
            return;
        }
        self.bar.inc(bytes);
        self.rows += newlines;
        if self.last.elapsed() >= Duration::from_millis(100) {
            self.last = Instant::now();
            self.bar
                .set_message(tinydelta::diagnose::count(self.rows, "row", "rows"));
        }
    }

    /// `inner`, counting what is read through it.
    pub fn wrap<R: BufRead>(&mut self, inner: R) -> Counted<'_, R> {
        Counted { inner, progress: self }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some((tx, h)) = self.stop.take() {
            let _ = tx.send(());
            let _ = h.join();
        }
    }
}

/// A reader that tells its [`Progress`] what was read (bytes, and line ends as rows).
pub struct Counted<'a, R> {
    inner: R,
    progress: &'a mut Progress,
}

impl<R: BufRead> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let nl = memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
        self.progress.advance(n as u64, nl);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<'_, R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        if self.progress.stop.is_some()
            && let Ok(b) = self.inner.fill_buf()
        {
            let amt = amt.min(b.len());
            let nl = memchr::memchr_iter(b'\n', &b[..amt]).count() as u64;
            self.progress.advance(amt as u64, nl);
        }
        self.inner.consume(amt);
    }
}
