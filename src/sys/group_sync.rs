//! Group fsync: concurrent callers that need the same descriptor fsynced share one fsync that
//! started after each of them asked (docs/BENCHMARKS.md "The one-row commit, syscall by syscall").
//!
//! fsync(2) makes durable everything written to the file (for a directory: every name created,
//! linked or removed in it) before the call. So a caller that asks while an fsync is already
//! running cannot count on that one (it may have started before the caller's change), but it can
//! count on the next one: [`SyncGroup::sync`] waits for the running fsync to end, then one of the
//! waiters runs a single fsync for all of them. Every caller returns only after an fsync that
//! started after its call ended, with that fsync's result: an error reaches every caller it
//! covered.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

use crate::util::sync::lock;

/// How many failed rounds are remembered for callers that have not woken up yet; a caller whose
/// round was forgotten gets an error (never a success it cannot prove).
const KEPT_FAILURES: usize = 64;

/// The fsyncs of one descriptor, shared by concurrent callers (see the module comment).
#[derive(Debug, Default)]
pub struct SyncGroup {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Callers so far (each caller's ticket is its number).
    asked: u64,
    /// Every ticket up to this one was covered by a finished fsync.
    covered: u64,
    /// An fsync is running.
    running: bool,
    /// Callers waiting for the running fsync to end (no wake-up call without one).
    waiting: u32,
    /// Failed rounds: (first ticket, last ticket, errno), oldest first, at most
    /// [`KEPT_FAILURES`].
    failures: VecDeque<(u64, u64, i32)>,
}

impl SyncGroup {
    /// Return once an fsync that started after this call (by `run`, on this thread or another
    /// caller's) has finished, with its result as an errno. `run` is the fsync of the
    /// descriptor this group stands for; callers must pass the same one.
    pub fn sync(&self, run: impl FnOnce() -> std::result::Result<(), i32>) -> std::result::Result<(), i32> {
        let mut st = lock(&self.state);
        st.asked += 1;
        let ticket = st.asked;
        loop {
            if st.covered >= ticket {
                return match st.failures.iter().find(|(lo, hi, _)| (*lo..=*hi).contains(&ticket)) {
                    Some((_, _, errno)) => Err(*errno),
                    // Forgotten (more failures since than are kept): not provably durable.
                    None if st.failures.len() >= KEPT_FAILURES
                        && st.failures.front().is_some_and(|(lo, _, _)| ticket < *lo) =>
                    {
                        Err(libc::EIO)
                    }
                    None => Ok(()),
                };
            }
            if !st.running {
                st.running = true;
                let (from, upto) = (st.covered + 1, st.asked);
                drop(st);
                let result = run();
                st = lock(&self.state);
                st.running = false;
                st.covered = upto;
                if let Err(errno) = result {
                    st.failures.push_back((from, upto, errno));
                    if st.failures.len() > KEPT_FAILURES {
                        st.failures.pop_front();
                    }
                }
                if st.waiting > 0 {
                    self.done.notify_all();
                }
                return result;
            }
            st.waiting += 1;
            st = self.done.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
            st.waiting -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SyncGroup;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Callers that arrive while an fsync runs share the next one; each caller's fsync started
    /// after it asked; a failure reaches exactly the callers its round covered.
    #[test]
    fn callers_share_the_next_fsync_and_its_result() {
        let g = Arc::new(SyncGroup::default());
        assert_eq!(g.sync(|| Ok(())), Ok(()));
        assert_eq!(g.sync(|| Err(5)), Err(5));
        assert_eq!(g.sync(|| Ok(())), Ok(()), "a later round is not charged an old failure");

        // A caller that asks while a round runs is not covered by that round: it returns only
        // after a round that started after it asked.
        let rounds = Arc::new(AtomicU64::new(0));
        let (inside_tx, inside_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let first = {
            let (g, rounds) = (g.clone(), rounds.clone());
            std::thread::spawn(move || {
                g.sync(|| {
                    rounds.fetch_add(1, Ordering::SeqCst);
                    inside_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    Ok(())
                })
            })
        };
        inside_rx.recv().unwrap();
        let later: Vec<_> = (0..4)
            .map(|_| {
                let (g, rounds) = (g.clone(), rounds.clone());
                std::thread::spawn(move || {
                    g.sync(|| {
                        rounds.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap();
                    rounds.load(Ordering::SeqCst)
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(rounds.load(Ordering::SeqCst), 1, "nobody runs a second round while one runs");
        go_tx.send(()).unwrap();
        assert_eq!(first.join().unwrap(), Ok(()));
        for t in later {
            assert!(t.join().unwrap() >= 2, "returned before a round that started after it asked");
        }
        let n = rounds.load(Ordering::SeqCst);
        assert!((2..=5).contains(&n), "{n} rounds");
    }
}
