//! Read replies spliced from the data files to `/dev/fuse` (docs/MOUNT.md "Replies spliced from the
//! data files").
//!
//! A `READ` of a `data.jsonl` that the daemon serves (several data files one after another) is
//! answered by moving page references, not bytes: the reply's header is written into a pipe,
//! the data files' pages are `splice(2)`d behind it, and the pipe is spliced into the FUSE
//! device. The kernel then copies each byte once, from the data file's page cache straight into
//! the reader's buffer (fs/fuse/dev.c, `fuse_dev_splice_write`). The reply written from a
//! mapping of the file ([`super::versions::Mapped`]) needs the same copy but also has the
//! kernel look up and pin every page of the daemon's mapping, and the mapping set up and torn
//! down per request: a third of the daemon's time on a first read of a 12-file version.
//!
//! fuser 0.18 writes replies with `writev` only, so this module writes the reply itself, on
//! the same device descriptor the request was read from (a duplicate of the session's one
//! descriptor: the daemon runs its worker threads on one descriptor, `clone_fd` off, because a
//! reply must arrive on the descriptor its request came from). The request's own reply object
//! is then never sent (see [`Replies::reply`]).
//!
//! Limits: a pipe that holds a whole 1 MiB request needs 2 MiB of pipe buffer (`F_SETPIPE_SZ`;
//! more than `/proc/sys/fs/pipe-max-size` needs CAP_SYS_RESOURCE). When the pipe cannot be
//! made, splicing is off for the life of the daemon, which logs why, and reads go the mapped
//! way.

use std::cell::RefCell;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use log::{debug, info};
use rustix::io::Errno;
use rustix::pipe::{PipeFlags, SpliceFlags};

use super::errno::FsError;
use crate::error::Error;

/// Bytes of pipe buffer per worker thread: a reply of [`super::fs::MAX_IO`] bytes at any file
/// offset spans 257 pages plus the header's page; pipe sizes are powers of two pages.
const PIPE_BYTES: usize = 1 << 20;

/// The largest read reply that always fits a pipe of [`PIPE_BYTES`] (half of it: any file
/// offset, pieces of several files), in bytes; what `st_blksize` advertises for a `data.jsonl`
/// whose replies are spliced, so that `cat`, `cp` and `dd` ask for replies of this size.
pub const REPLY_BYTES: u32 = 512 << 10;

/// The size of `struct fuse_out_header` (`len: u32, error: i32, unique: u64`,
/// include/uapi/linux/fuse.h), which starts every reply.
const OUT_HEADER: usize = 16;

/// One stretch of a reply: `len` bytes of `file` at `offset` (a data file named `path` in errors).
#[derive(Debug, Clone)]
pub struct Piece {
    /// The open data file.
    pub file: Arc<super::versions::PooledFile>,
    /// Where the stretch starts in the file, in bytes.
    pub offset: u64,
    /// How many bytes.
    pub len: usize,
    /// The data file's path, for errors.
    pub path: PathBuf,
}

/// What [`Replies::reply`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// The reply went to the kernel: the request's reply object must not be sent (forget it).
    Yes,
    /// Nothing was sent (splicing is off, or the pipe could not be filled): reply as before.
    No,
}

/// The spliced-reply writer of one mount: the device descriptor, once the session exists.
#[derive(Debug, Default)]
pub struct Replies {
    dev: OnceLock<OwnedFd>,
    /// Splicing failed in a way that will not change (no pipe of [`PIPE_BYTES`]).
    off: AtomicBool,
}

thread_local! {
    /// This worker thread's pipe (read end, write end), empty between replies.
    static PIPE: RefCell<Option<(OwnedFd, OwnedFd)>> = const { RefCell::new(None) };
}

impl Replies {
    /// Hand over a duplicate of the session's device descriptor; replies are spliced from now
    /// on. A second call is ignored.
    pub fn set_device(&self, dev: OwnedFd) {
        if self.dev.set(dev).is_ok() {
            info!("read replies of multi-file versions are spliced from the data files");
        }
    }

    /// Whether replies may be spliced.
    pub fn ready(&self) -> bool {
        self.dev.get().is_some() && !self.off.load(Ordering::Relaxed)
    }

    /// Send the reply to request `unique`: the bytes of `pieces`, in order (at most
    /// [`super::fs::MAX_IO`] in all).
    ///
    /// Returns [`Sent::Yes`] once the kernel took the reply, or when the request had ended
    /// (interrupted: `ENOENT`), so that no second reply goes out. [`Sent::No`] when nothing
    /// was sent: splicing is off, or the final splice into the device failed in another way
    /// (the caller replies the ordinary way). Errors, with nothing sent: a data file gave fewer
    /// bytes than its piece says ([`Error::Corrupt`], naming it) or could not be read.
    pub fn reply(&self, unique: u64, pieces: &[Piece]) -> Result<Sent, FsError> {
        let Some(dev) = self.dev.get() else { return Ok(Sent::No) };
        if self.off.load(Ordering::Relaxed) {
            return Ok(Sent::No);
        }
        let total: usize = pieces.iter().map(|p| p.len).sum();
        // Each pipe slot holds at most one page: the header takes one, each piece the pages it
        // spans. A reply that would not fit goes the ordinary way.
        let page = rustix::param::page_size() as u64;
        let slots: u64 = 1 + pieces
            .iter()
            .map(|p| (p.offset % page + p.len as u64).div_ceil(page))
            .sum::<u64>();
        if slots > (PIPE_BYTES as u64) / page {
            return Ok(Sent::No);
        }
        PIPE.with_borrow_mut(|slot| {
            let (r, w) = match slot.take() {
                Some(p) => p,
                None => match new_pipe() {
                    Ok(p) => p,
                    Err(e) => {
                        info!("read replies are not spliced: no pipe of {PIPE_BYTES} bytes ({e})");
                        self.off.store(true, Ordering::Relaxed);
                        return Ok(Sent::No);
                    }
                },
            };
            // On any error below the pipe may hold part of a reply: it is dropped (closed) and
            // the next reply makes a new one.
            let mut header = [0u8; OUT_HEADER];
            header[..4].copy_from_slice(&((OUT_HEADER + total) as u32).to_ne_bytes());
            header[8..].copy_from_slice(&unique.to_ne_bytes());
            match rustix::io::write(&w, &header) {
                Ok(OUT_HEADER) => {}
                Ok(_) => return Ok(Sent::No),
                Err(e) => {
                    debug!("cannot write a reply header into the pipe: {e}");
                    return Ok(Sent::No);
                }
            }
            for p in pieces {
                fill(&w, p)?;
            }
            match rustix::pipe::splice(&r, None, dev.as_fd(), None, OUT_HEADER + total, SpliceFlags::MOVE) {
                Ok(n) if n == OUT_HEADER + total => {
                    *slot = Some((r, w));
                    Ok(Sent::Yes)
                }
                // The request ended before its reply (interrupted): nothing more to send.
                Err(Errno::NOENT) => Ok(Sent::Yes),
                Ok(n) => {
                    debug!("splice of a read reply moved {n} of {} bytes", OUT_HEADER + total);
                    Ok(Sent::Yes)
                }
                Err(e) => {
                    debug!("splice of a read reply into the device failed: {e}");
                    Ok(Sent::No)
                }
            }
        })
    }
}

/// A pipe of [`PIPE_BYTES`].
fn new_pipe() -> rustix::io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
    rustix::pipe::fcntl_setpipe_size(&w, PIPE_BYTES)?;
    Ok((r, w))
}

/// Splice all of piece `p` into the pipe `w`.
fn fill(w: &OwnedFd, p: &Piece) -> Result<(), FsError> {
    let mut off = p.offset;
    let mut left = p.len;
    while left > 0 {
        match rustix::pipe::splice(&**p.file, Some(&mut off), w, None, left, SpliceFlags::MOVE) {
            Ok(0) => {
                return Err(FsError::Table(Error::Corrupt {
                    path: p.path.clone(),
                    reason: "data file is shorter than its add action says".into(),
                }));
            }
            Ok(n) => left -= n.min(left),
            Err(Errno::INTR) => {}
            Err(e) => {
                return Err(Error::io("read", &p.path, std::io::Error::from_raw_os_error(e.raw_os_error())).into());
            }
        }
    }
    Ok(())
}
