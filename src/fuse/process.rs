//! Who is calling: the facts about the requesting process that commit points depend on (README,
//! "incoming/"). FUSE reports the calling *thread*; commit-on-close needs its thread group (the
//! process), whether it is exiting because a signal killed it, and whether it still holds
//! another descriptor of the file.
//!
//! [`Processes`] is the seam: [`ProcFs`] reads `/proc`; the model test simulates processes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The process facts the inner view asks for.
pub trait Processes: std::fmt::Debug + Send + Sync {
    /// Thread-group id of thread `pid` (0: the kernel did not say; `None`).
    fn tgid(&self, pid: u32) -> Option<u32>;
    /// Whether the process of thread `pid` is exiting because a signal killed it.
    fn killed_by_signal(&self, pid: u32) -> bool;
    /// Whether process `tgid` holds a descriptor of inode `ino` of this mount.
    fn holds_open(&self, tgid: u32, ino: u64) -> bool;
}

/// [`Processes`] from `/proc`.
#[derive(Debug, Default)]
pub struct ProcFs {
    /// The mount's id in /proc/self/mountinfo once known (0: any mount).
    pub mnt_id: Arc<AtomicU64>,
}

impl Processes for ProcFs {
    /// `/proc/PID/status` takes no lock an exec'ing process holds, so it is safe to read while
    /// that process waits for our reply.
    fn tgid(&self, pid: u32) -> Option<u32> {
        if pid == 0 {
            return None;
        }
        let tgid = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Tgid:"))
                    .and_then(|v| v.trim().parse::<u32>().ok())
            });
        tgid.or(Some(pid))
    }

    /// `/proc/PID/stat`: flags (field 9) has PF_EXITING while the process exits; exit_code
    /// (field 52) is set before its files are closed, and its low 7 bits are the killing signal.
    ///
    /// Reading /proc/PID/stat takes the process's `exec_update_lock`, which an exec'ing process
    /// holds while it closes its close-on-exec descriptors, i.e. while it waits for our `flush`
    /// reply: so the read runs on a helper thread and counts as "not killed" after 200 ms (the
    /// helper finishes once the exec does). Only asked for the opener's own close.
    fn killed_by_signal(&self, pid: u32) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("proc-stat".into()).spawn(move || {
            let _ = tx.send(read_killed(pid));
        });
        if spawned.is_err() {
            return false;
        }
        rx.recv_timeout(Duration::from_millis(200)).unwrap_or(false)
    }

    /// Per /proc/TGID/fdinfo (which never touches the file itself, so it cannot call back into
    /// this file system). Unreadable: `false`.
    fn holds_open(&self, tgid: u32, ino: u64) -> bool {
        let mnt_id = self.mnt_id.load(Ordering::Relaxed);
        let Ok(dir) = std::fs::read_dir(format!("/proc/{tgid}/fdinfo")) else {
            return false;
        };
        dir.filter_map(|e| e.ok()).any(|e| {
            let Ok(info) = std::fs::read_to_string(e.path()) else {
                return false;
            };
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            field("ino:") == Some(ino) && (mnt_id == 0 || field("mnt_id:") == Some(mnt_id))
        })
    }
}

fn read_killed(pid: u32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let exiting = field(9).is_some_and(|f| f & PF_EXITING != 0);
    let code = field(52).unwrap_or(0);
    exiting && code & 0x7f != 0
}
