//! Who is calling: the facts about the requesting process that commit points depend on
//! (docs/MOUNT.md "Commit points"). FUSE reports the calling *thread*; commit-on-close needs its
//! thread group (the process), whether it is exiting because a signal killed it, and whether it
//! still holds another descriptor of the file.
//!
//! [`Processes`] is the seam: [`ProcFs`] reads `/proc` (through the `procfs` crate where it has
//! the field); the model test simulates processes.

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
    /// Whether process `tgid` holds a descriptor of inode `ino` of this mount opened for
    /// writing. Asked only when a commit point still counts a writer handle of `tgid` whose
    /// opener's last close was not seen (it may be closed already, its `release` on its way;
    /// docs/MOUNT.md "What counts as open"). The default, `true`, never waits for a release.
    fn writes_open(&self, _tgid: u32, _ino: u64) -> bool {
        true
    }
}

/// [`Processes`] from `/proc`.
#[derive(Debug, Default)]
pub struct ProcFs {
    /// The mount's id in /proc/self/mountinfo once known (0: any mount).
    pub mnt_id: Arc<AtomicU64>,
    /// The helper thread that reads `/proc/PID/stat`.
    pub stat_reader: StatReader,
}

/// A question for the [`StatReader`] thread: the pid, and where to send the answer.
type StatJob = (u32, std::sync::mpsc::Sender<bool>);

/// The helper threads of [`ProcFs::killed_by_signal`], kept between closes (starting a thread
/// per close cost about as much as the rest of the check). Each question takes an idle helper
/// (or starts one), so concurrent closes never wait on each other; a helper that did not answer
/// within [`STAT_TIMEOUT`] may be waiting for an exec: it is dropped (its queue closes, so it
/// exits after that read) and never reused.
#[derive(Debug, Default)]
pub struct StatReader {
    idle: std::sync::Mutex<Vec<std::sync::mpsc::Sender<StatJob>>>,
}

/// How long a close waits for `/proc/PID/stat` before counting the process as not killed.
pub const STAT_TIMEOUT: Duration = Duration::from_millis(200);

impl StatReader {
    /// Whether the process of thread `pid` is exiting because a signal killed it (see
    /// [`ProcFs::killed_by_signal`]); `false` when the read did not answer in [`STAT_TIMEOUT`]
    /// or no thread could be started.
    fn killed(&self, pid: u32) -> bool {
        let (answer, rx) = std::sync::mpsc::channel();
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let helper = match idle.filter(|tx| tx.send((pid, answer.clone())).is_ok()) {
            Some(tx) => tx,
            None => {
                let (tx, jobs) = std::sync::mpsc::channel::<StatJob>();
                let spawned = std::thread::Builder::new().name("proc-stat".into()).spawn(move || {
                    for (pid, answer) in jobs {
                        let _ = answer.send(read_killed(pid));
                    }
                });
                if spawned.is_err() || tx.send((pid, answer)).is_err() {
                    return false;
                }
                tx
            }
        };
        match rx.recv_timeout(STAT_TIMEOUT) {
            Ok(killed) => {
                self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(helper);
                killed
            }
            // Stuck behind an exec (or gone): left to finish alone.
            Err(_) => false,
        }
    }
}

impl Processes for ProcFs {
    /// A thread-group leader is its own thread group: `pidfd_open(pid, 0)` succeeds only for one
    /// (pidfd_open(2): EINVAL for another thread unless `PIDFD_THREAD`), at the cost of two
    /// syscalls. Any other thread: `/proc/PID/status` (`Tgid:`), which takes no lock an
    /// exec'ing process holds, so it is safe to read while that process waits for our reply.
    fn tgid(&self, pid: u32) -> Option<u32> {
        if pid == 0 {
            return None;
        }
        let leader = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .is_some_and(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).is_ok());
        if leader {
            return Some(pid);
        }
        let tgid = i32::try_from(pid)
            .ok()
            .and_then(|p| procfs::process::Process::new(p).ok())
            .and_then(|p| p.status().ok())
            .and_then(|s| u32::try_from(s.tgid).ok());
        tgid.or(Some(pid))
    }

    /// `/proc/PID/stat`: flags (field 9) has PF_EXITING while the process exits; exit_code
    /// (field 52) is set before its files are closed, and its low 7 bits are the killing signal.
    ///
    /// Reading /proc/PID/stat takes the process's `exec_update_lock`, which an exec'ing process
    /// holds while it closes its close-on-exec descriptors, i.e. while it waits for our `flush`
    /// reply: so the read runs on a helper thread and counts as "not killed" after 200 ms (the
    /// helper finishes once the exec does). Only asked for the opener's own last close. The
    /// helper thread is kept for the next close ([`StatReader`]).
    ///
    /// Most closes are by a live process, and those never need the helper: `/proc/PID/statm`
    /// (which takes no lock an exec holds: `get_task_mm`, fs/proc/array.c `proc_pid_statm`)
    /// gives the size of the thread's address space while it has one, and zeros once it has
    /// none; an exiting thread drops its address space (`exit_mm`) before it closes its files
    /// (`exit_files`; kernel/exit.c, `do_exit`). So a close by a thread with a nonzero size is no
    /// close of a killed process, and only the other closes (an exit, killed or not) read `stat`
    /// on the helper, and a one-row commit through the mount no longer waits for two thread
    /// hand-offs. `statm` (7 numbers) rather than `status` (the same fact as its `VmSize:` line,
    /// but the crate parses all ~55 lines): 0.1 ms less CPU per one-row commit.
    ///
    /// `statm` is read with one `open`, one `read` and one `close` (the `procfs` crate's
    /// `Process::new(pid).statm()` cost eight system calls: an `O_PATH` open of the process
    /// folder, the file's open, `statx`, `lseek`, two reads and two closes).
    fn killed_by_signal(&self, pid: u32) -> bool {
        !statm_size_nonzero(pid) && self.stat_reader.killed(pid)
    }

    /// Per /proc/TGID/fdinfo (which never touches the file itself, so it cannot call back into
    /// this file system), each entry with one `openat` and one `read` (a `read_to_string` cost
    /// a `statx` and a second `read` more per descriptor). Unreadable: `false`. Hand-parsed: the `procfs` crate (0.17) reads the
    /// descriptors' link targets, not `fdinfo`'s `ino:`/`mnt_id:`, and a `stat` of each target
    /// would call back into this mount.
    fn holds_open(&self, tgid: u32, ino: u64) -> bool {
        let mnt_id = self.mnt_id.load(Ordering::Relaxed);
        any_fdinfo(tgid, |info| {
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            field("ino:") == Some(ino) && (mnt_id == 0 || field("mnt_id:") == Some(mnt_id))
        })
    }

    /// [`ProcFs::holds_open`] for descriptors opened for writing only (`flags:` of fdinfo).
    /// Asked of the processes of the batch's own writer handles, not of every process: another
    /// process writing the same name may write another batch behind the same inode (docs/MOUNT.md
    /// "Concurrent writers on one name").
    fn writes_open(&self, tgid: u32, ino: u64) -> bool {
        let mnt_id = self.mnt_id.load(Ordering::Relaxed);
        any_fdinfo(tgid, |info| fdinfo_writes(info, ino, mnt_id))
    }
}

/// Whether `found` holds for the text of one of `/proc/TGID/fdinfo/*` (which never touches the
/// files themselves, so it cannot call back into this file system). Each entry costs one `openat`
/// and one `read` (a `read_to_string` cost a `statx` and a second `read` more per descriptor).
/// Unreadable: `false`.
fn any_fdinfo(tgid: u32, mut found: impl FnMut(&str) -> bool) -> bool {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    let Ok(dir_fd) = rustix::fs::open(format!("/proc/{tgid}/fdinfo"), flags | OFlags::DIRECTORY, Mode::empty()) else {
        return false;
    };
    let Ok(dir) = rustix::fs::Dir::read_from(&dir_fd) else {
        return false;
    };
    // One openat, one read and one close per descriptor (a `fdinfo` file is one short page:
    // `pos`, `flags`, `mnt_id`, `ino` come first), no stat for a size hint.
    let mut buf = [0u8; 4096];
    dir.filter_map(|e| e.ok()).any(|e| {
        if e.file_name().to_bytes().starts_with(b".") {
            return false;
        }
        let Ok(fd) = rustix::fs::openat(&dir_fd, e.file_name(), flags, Mode::empty()) else {
            return false;
        };
        let Ok(n) = rustix::io::read(&fd, &mut buf) else {
            return false;
        };
        found(&String::from_utf8_lossy(buf.get(..n).unwrap_or_default()))
    })
}

/// Whether `/proc/PID/statm`'s first number (the size of the address space, in pages) is
/// nonzero: the thread still has its address space (see [`ProcFs::killed_by_signal`]).
/// Unreadable or unparsable: `false`.
fn statm_size_nonzero(pid: u32) -> bool {
    use rustix::fs::{Mode, OFlags};
    let Ok(fd) = rustix::fs::open(format!("/proc/{pid}/statm"), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) else {
        return false;
    };
    // Seven numbers of at most 20 digits each.
    let mut buf = [0u8; 256];
    let Ok(n) = rustix::io::read(&fd, &mut buf) else {
        return false;
    };
    statm_size(buf.get(..n).unwrap_or_default()).is_some_and(|size| size > 0)
}

/// The first number of a `/proc/PID/statm` text (proc(5): `size`, in pages).
fn statm_size(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text).ok()?.split_ascii_whitespace().next()?.parse().ok()
}

/// Whether the text of one `/proc/PID/fdinfo/FD` names inode `ino` of mount `mnt_id` (0: any)
/// opened for writing (`flags:`, octal, access mode not `O_RDONLY`).
fn fdinfo_writes(info: &str, ino: u64, mnt_id: u64) -> bool {
    let field = |name: &str| info.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let num = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
    let writes = field("flags:")
        .and_then(|f| u32::from_str_radix(f, 8).ok())
        .is_some_and(|f| f & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32);
    writes && num("ino:") == Some(ino) && (mnt_id == 0 || num("mnt_id:") == Some(mnt_id))
}

/// Per `/proc/PID/stat` (the `procfs` crate): PF_EXITING in flags, a killing signal in the low 7
/// bits of exit_code. Unreadable: `false`.
fn read_killed(pid: u32) -> bool {
    const PF_EXITING: u32 = 0x4;
    let Some(stat) = i32::try_from(pid)
        .ok()
        .and_then(|p| procfs::process::Process::new(p).ok())
        .and_then(|p| p.stat().ok())
    else {
        return false;
    };
    let exiting = stat.flags & PF_EXITING != 0;
    let code = stat.exit_code.unwrap_or(0);
    exiting && code & 0x7f != 0
}

#[cfg(test)]
mod tests {
    use super::{fdinfo_writes, statm_size};

    #[test]
    fn statm_size_is_the_first_number() {
        assert_eq!(statm_size(b"4141 3380 1660 1 0 2019 0\n"), Some(4141));
        assert_eq!(statm_size(b"0 0 0 0 0 0 0\n"), Some(0));
        assert_eq!(statm_size(b""), None);
        assert_eq!(statm_size(b"x 1"), None);
        assert!(super::statm_size_nonzero(std::process::id()), "this process has an address space");
    }

    /// `flags:` is octal: only a descriptor opened for writing, of the inode and mount asked
    /// for, counts.
    #[test]
    fn fdinfo_names_a_writer_of_the_inode_on_the_mount() {
        let info = |flags: &str, mnt: u64, ino: u64| format!("pos:\t0\nflags:\t{flags}\nmnt_id:\t{mnt}\nino:\t{ino}\n");
        assert!(
            fdinfo_writes(&info("0102001", 24, 7), 7, 24),
            "O_WRONLY|O_APPEND|O_LARGEFILE"
        );
        assert!(fdinfo_writes(&info("02", 24, 7), 7, 24), "O_RDWR");
        assert!(fdinfo_writes(&info("02", 24, 7), 7, 0), "any mount");
        assert!(!fdinfo_writes(&info("0100000", 24, 7), 7, 24), "read-only");
        assert!(!fdinfo_writes(&info("01", 24, 8), 7, 24), "another inode");
        assert!(!fdinfo_writes(&info("01", 25, 7), 7, 24), "another mount");
        assert!(!fdinfo_writes("pos:\t0\n", 7, 24), "no fields");
    }
}
