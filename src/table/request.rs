//! One request of the mount (one FUSE request), as the library sees it: a scope on the thread
//! that serves it, in which a table's log segment is listed at most once while `_delta_log/` is
//! unchanged, and advisory work (a version checksum) waits until the reply has been sent.
//!
//! Outside a request (the CLI) nothing is reused and nothing waits: every listing is taken as
//! [`crate::table::Table::segment`] decides, and deferred work runs at once.

use std::cell::RefCell;

use crate::log::segment::{FolderStamp, LogSegment};

/// Work that may wait until the reply is sent.
type Deferred = Box<dyn FnOnce() + Send>;

/// The state of the request running on this thread.
#[derive(Default)]
struct Request {
    /// Per table (its segment cache's address): the folder stamp and the segment listed at it.
    listings: Vec<(usize, FolderStamp, LogSegment)>,
    /// Run after the reply ([`after_reply`]), in order.
    deferred: Vec<Deferred>,
    /// The process the request is for ([`set_requester`]), and its pidfd once asked
    /// ([`requester_gone`]).
    requester: Option<(u32, Option<std::os::fd::OwnedFd>)>,
}

thread_local! {
    static REQUEST: RefCell<Option<Request>> = const { RefCell::new(None) };
}

/// Run `f` as one request: within it, a table's log segment is listed at most once while
/// `_delta_log/`'s stamp stays the same, even when the folder changed so recently that the
/// table's own cache does not trust its stamp (docs/FORMAT.md, "The log segment"). Every answer
/// of the request is then as of that one listing, as if the request ran at the moment of the
/// listing; a change the request makes itself (its commit) changes the stamp, and the next call
/// lists again. Nested calls run inside the outer request.
///
/// Returns `f`'s result and the work [`after_reply`] deferred: run it (with [`run`]) once the
/// reply is sent.
pub fn one_request<R>(f: impl FnOnce() -> R) -> (R, Vec<Deferred>) {
    let outer = REQUEST.with_borrow_mut(|r| {
        let outer = r.is_some();
        if !outer {
            *r = Some(Request::default());
        }
        outer
    });
    if outer {
        return (f(), Vec::new());
    }
    struct End;
    impl Drop for End {
        fn drop(&mut self) {
            REQUEST.with_borrow_mut(|r| *r = None);
        }
    }
    let end = End;
    let out = f();
    let deferred = REQUEST.with_borrow_mut(|r| r.as_mut().map(|r| std::mem::take(&mut r.deferred)).unwrap_or_default());
    drop(end);
    (out, deferred)
}

/// Run work deferred by a request (after its reply).
pub fn run(deferred: Vec<Deferred>) {
    for job in deferred {
        job();
    }
}

/// Run `job` after the reply of this thread's request, or now when no request runs. For
/// advisory work only: nothing a reader needs and nothing the reply reports.
pub fn after_reply(job: impl FnOnce() + Send + 'static) {
    let job: Deferred = Box::new(job);
    let left = REQUEST.with_borrow_mut(|r| match r.as_mut() {
        Some(r) => {
            r.deferred.push(job);
            None
        }
        None => Some(job),
    });
    if let Some(job) = left {
        job();
    }
}

/// The segment this thread's request listed for table `key` at `stamp`, if any.
pub(crate) fn listing(key: usize, stamp: &FolderStamp) -> Option<LogSegment> {
    REQUEST.with_borrow(|r| {
        r.as_ref()?
            .listings
            .iter()
            .find(|(k, s, _)| *k == key && s == stamp)
            .map(|(_, _, seg)| seg.clone())
    })
}

/// Remember, for the rest of this thread's request (if one runs), that table `key` listed
/// `seg` at `stamp`.
pub(crate) fn remember_listing(key: usize, stamp: FolderStamp, seg: &LogSegment) {
    REQUEST.with_borrow_mut(|r| {
        if let Some(r) = r.as_mut() {
            r.listings.retain(|(k, _, _)| *k != key);
            r.listings.push((key, stamp, seg.clone()));
        }
    });
}

/// Name the process this thread's request is for (the FUSE request's pid; 0, the kernel's own
/// requests, names none). Outside a request it does nothing.
pub fn set_requester(pid: u32) {
    REQUEST.with_borrow_mut(|r| {
        if let Some(r) = r.as_mut() {
            r.requester = (pid != 0).then_some((pid, None));
        }
    });
}

/// Mark this thread's request as done for nobody (the mount's warm-up before its first
/// request): long work it starts stops at its first check ([`requester_gone`] is `true`).
pub fn set_no_requester() {
    REQUEST.with_borrow_mut(|r| {
        if let Some(r) = r.as_mut() {
            r.requester = Some((0, None));
        }
    });
}

/// Whether the process this thread's request is for has exited ([`set_requester`]): long work
/// done for one reader (a Parquet data file's conversion, docs/FORMAT.md "Parquet data files")
/// stops when nobody waits for it. fuser does not pass on FUSE_INTERRUPT, so an interrupted
/// request is seen this way once its process is gone. The process is watched through a pidfd
/// (opened at the first call, so a reused pid is never mistaken for it); `false` outside a
/// request, for the kernel's own requests, and when no pidfd can be opened for a live process.
pub fn requester_gone() -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    REQUEST.with_borrow_mut(|r| {
        let Some((pid, fd)) = r.as_mut().and_then(|r| r.requester.as_mut()) else {
            return false;
        };
        if fd.is_none() {
            let Some(p) = Pid::from_raw(*pid as i32) else {
                // Pid 0: done for nobody.
                return true;
            };
            match pidfd_open(p, PidfdFlags::empty()) {
                Ok(f) => *fd = Some(f),
                Err(rustix::io::Errno::SRCH) => return true,
                Err(_) => return false,
            }
        }
        let Some(f) = fd.as_ref() else { return false };
        let mut fds = [PollFd::new(f, PollFlags::IN)];
        // A pidfd is readable once its process has exited (a zombie included).
        let now = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        matches!(poll(&mut fds, Some(&now)), Ok(n) if n > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deferred_work_waits_for_the_end_of_the_request_only_inside_one() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = tx.clone();
        after_reply(move || t.send(1).expect("send"));
        assert_eq!(rx.try_recv().ok(), Some(1), "outside a request: at once");
        let t = tx.clone();
        let ((), later) = one_request(|| {
            after_reply(move || t.send(2).expect("send"));
            let ((), inner) = one_request(|| ());
            assert!(inner.is_empty(), "a nested request defers to the outer one");
        });
        assert!(rx.try_recv().is_err(), "inside: not yet");
        run(later);
        assert_eq!(rx.try_recv().ok(), Some(2));
        assert!(REQUEST.with_borrow(|r| r.is_none()), "the scope ended");
    }
}
