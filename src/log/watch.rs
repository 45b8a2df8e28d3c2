//! A listing of `_delta_log/` kept current by inotify, so a long-running process (the mount)
//! knows which versions exist without listing the folder again for every request and commit
//! (docs/FORMAT.md, "Listings the mount keeps").
//!
//! The proof: the kernel queues an inotify event for every name created, linked, renamed or
//! removed in a watched folder, in the same locked section of the folder that changes the name,
//! so once such a change has returned to whoever made it, its event is in the queue, in order
//! (inotify(7)). A listing taken after the watch was added, plus every event queued since the
//! drain that preceded it, applied in order, is therefore what a listing would say now. Every
//! event this module cannot apply exactly (a commit removed or renamed, one created below the
//! newest, a name that is not a regular file, a checkpoint, a queue overflow) drops the listing,
//! and the next caller lists again; the end of the watch (the folder removed or moved, the file
//! system unmounted) ends its use for good.
//!
//! Only file systems whose every change passes through this kernel are watched (ext2/3/4, xfs,
//! btrfs, f2fs, tmpfs): on a network or FUSE file system another machine's changes queue no
//! event, and [`crate::table::Table::segment`] keeps its stamp-checked listing there.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

use crate::sys::beneath::Dir;
use crate::error::Result;
use crate::log::files::LogFile;
use crate::log::segment::{Listing, LogSegment};

/// `statfs(2)` `f_type` of the file systems watched ([`LogWatch::start`]): ext2/3/4, xfs,
/// btrfs, f2fs, tmpfs (linux/magic.h). Not overlayfs: a change made in its upper layer directly
/// queues no event on the overlay's folder.
const LOCAL_FILE_SYSTEMS: [u64; 5] = [0xEF53, 0x5846_5342, 0x9123_683E, 0xF2F5_2010, 0x0102_1994];

/// An inotify watch on one `_delta_log/` folder and the listing it keeps current.
#[derive(Debug)]
pub struct LogWatch {
    /// The inotify instance (non-blocking): one watch, on the folder.
    fd: OwnedFd,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The folder's listing as of the last drain (`None`: list again).
    listing: Option<Listing>,
    /// The segment built from `listing` (`None`: build again).
    segment: Option<LogSegment>,
    /// Counts the events that changed or dropped the listing: a listing taken while another
    /// caller consumed such an event is not kept (it may predate the change).
    generation: u64,
    /// The watch has ended (folder removed or moved, file system unmounted, read error).
    ended: bool,
    /// Listings taken (for tests and the daemon's log).
    listings: u64,
}

/// What [`LogWatch::start`] decided.
#[derive(Debug)]
pub enum Started {
    /// Watching.
    Watching(Box<LogWatch>),
    /// Not watched, and why (for the daemon's log).
    Unwatched(String),
}

/// The events of `_delta_log/` a watch asks for (inotify(7)): names created, removed or moved
/// in or out (a commit's link, a checkpoint, a cleanup), and the folder itself removed or moved.
const LOG_EVENTS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

impl LogWatch {
    /// Watch `log` (the `_delta_log/` folder, through its open handle: `/proc/self/fd/N`, so the
    /// folder watched is the one held, whatever its path names now). Never an error: a folder
    /// that cannot be watched (another file system, no inotify instance or watch left, no
    /// `/proc`) is [`Started::Unwatched`] with the reason.
    pub fn start(log: &Dir) -> Started {
        match watch_fd(log, CreateFlags::NONBLOCK | CreateFlags::CLOEXEC, LOG_EVENTS) {
            Ok(fd) => Started::Watching(Box::new(LogWatch {
                fd,
                state: Mutex::new(State::default()),
            })),
            Err(why) => Started::Unwatched(why),
        }
    }

    /// The segment of the watched folder `log`: the kept one when no event changed it, else
    /// built by `build` from the kept listing with the events applied, else from a new listing.
    /// `None` when the watch has ended (the caller lists as it would without a watch).
    ///
    /// Errors: [`crate::error::Error::Io`] of the listing; `build`'s errors.
    pub fn segment(&self, log: &Dir, build: impl Fn(&Listing) -> Result<LogSegment>) -> Option<Result<LogSegment>> {
        let generation = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            self.drain(&mut st, log);
            if st.ended {
                return None;
            }
            if let Some(seg) = &st.segment {
                return Some(Ok(seg.clone()));
            }
            if let Some(l) = &st.listing {
                let seg = build(l);
                if let Ok(seg) = &seg {
                    st.segment = Some(seg.clone());
                }
                return Some(seg);
            }
            st.generation
        };
        // List without holding the lock (readers of other versions go on). The drain above
        // came before this listing, so every change the listing misses is still queued.
        let (listing, seg) = match crate::log::segment::list_segment(log, &build) {
            Ok(l) => l,
            Err(e) => return Some(Err(e)),
        };
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.listings += 1;
        if st.generation == generation && st.listing.is_none() && !st.ended {
            st.segment = seg.as_ref().ok().cloned();
            st.listing = Some(listing);
        }
        Some(seg)
    }

    /// Apply every queued event to the kept listing, in order.
    fn drain(&self, st: &mut State, log: &Dir) {
        let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
        let mut events = inotify::Reader::new(&self.fd, &mut buf);
        loop {
            let (flags, name) = match events.next() {
                Ok(ev) => (ev.events(), ev.file_name().map(|n| n.to_bytes().to_vec())),
                Err(Errno::AGAIN) => return,
                Err(Errno::INTR) => continue,
                Err(e) => {
                    ::log::warn!(
                        "the watch of {} failed ({e}); listing it again on every change",
                        log.path().display()
                    );
                    st.ended = true;
                    drop_listing(st);
                    return;
                }
            };
            if flags.intersects(ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF | ReadFlags::UNMOUNT)
            {
                ::log::info!(
                    "the watch of {} ended ({flags:?}); listing it again on every change",
                    log.path().display()
                );
                st.ended = true;
                drop_listing(st);
                continue;
            }
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                drop_listing(st);
                continue;
            }
            let Some(name) = name else {
                drop_listing(st);
                continue;
            };
            apply(st, log, &name, flags);
        }
    }
}

/// A blocking inotify watch of one `_delta_log/` folder that only says *that* it changed, for a
/// thread that acts on every change at once (the mount's invalidation of the attributes it let
/// the kernel cache: docs/MOUNT.md "Reading"). Its own inotify instance, so no other reader of
/// the folder's events (a [`LogWatch`] drained by requests) can take an event from it: once a
/// change to a name in the folder has returned to whoever made it, [`LogWaiter::wait`] returns
/// (inotify(7)).
#[derive(Debug)]
pub struct LogWaiter {
    /// The inotify instance (blocking): one watch, on the folder.
    fd: OwnedFd,
}

impl LogWaiter {
    /// Watch `log` for names created, linked, renamed and removed. (A commit another engine
    /// writes in place wakes the waiter at its creation, possibly still incomplete: the caller
    /// then cannot read the newest version and must treat every version as possibly not the
    /// newest.) Only on the file systems [`LogWatch::start`] watches.
    ///
    /// Errors: why the folder cannot be watched (for the daemon's log).
    pub fn start(log: &Dir) -> std::result::Result<LogWaiter, String> {
        watch_fd(log, CreateFlags::CLOEXEC, LOG_EVENTS).map(|fd| LogWaiter { fd })
    }

    /// Block until the folder changed (every event queued by then is consumed). `false` once
    /// the watch has ended (the folder removed or moved, the file system unmounted, a read
    /// error): no later change will be reported. A queue overflow counts as a change.
    pub fn wait(&self) -> bool {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut events = inotify::Reader::new(&self.fd, &mut buf);
        let mut ended = false;
        loop {
            match events.next() {
                Ok(ev) => {
                    ended |= ev
                        .events()
                        .intersects(ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF | ReadFlags::UNMOUNT);
                }
                Err(Errno::INTR) => continue,
                Err(_) => return false,
            }
            // Every event of the batch read is looked at (the end of the watch may follow a
            // change in it); the next read would block.
            if events.is_buffer_empty() {
                return !ended;
            }
        }
    }
}

/// An inotify instance (`flags`) with one watch (`mask`) on `log`, added through its open handle
/// (`/proc/self/fd/N`, so the folder watched is the one held, whatever its path names now), on
/// the file systems whose every change passes through this kernel ([`LOCAL_FILE_SYSTEMS`]).
fn watch_fd(log: &Dir, flags: CreateFlags, mask: WatchFlags) -> std::result::Result<OwnedFd, String> {
    use std::os::fd::AsRawFd;
    match rustix::fs::fstatfs(log.fd()) {
        // (`f_type` is signed on some targets: the magic numbers are 32 bits.)
        Ok(sfs) if LOCAL_FILE_SYSTEMS.contains(&(sfs.f_type as u64 & 0xFFFF_FFFF)) => {}
        Ok(sfs) => {
            return Err(format!(
                "{} is on a file system (type {:#x}) whose changes may not all pass through this kernel",
                log.path().display(),
                sfs.f_type as u64 & 0xFFFF_FFFF
            ));
        }
        Err(e) => return Err(format!("statfs {}: {e}", log.path().display())),
    }
    let fd = inotify::init(flags).map_err(|e| format!("inotify_init: {e}"))?;
    let proc_path = format!("/proc/self/fd/{}", log.fd().as_raw_fd());
    inotify::add_watch(&fd, proc_path.as_str(), mask)
        .map_err(|e| format!("inotify_add_watch {}: {e}", log.path().display()))?;
    Ok(fd)
}

/// Forget the kept listing and segment (the next caller lists).
fn drop_listing(st: &mut State) {
    st.listing = None;
    st.segment = None;
    st.generation += 1;
}

/// Apply one event on `name` to the kept listing, or drop the listing when it cannot be applied
/// exactly (see the module documentation).
fn apply(st: &mut State, log: &Dir, name: &[u8], flags: ReadFlags) {
    // A listing reads names that are not UTF-8 as nothing of the log's (segment::Listing::read).
    let Ok(name) = std::str::from_utf8(name) else { return };
    let file = LogFile::parse(name);
    if matches!(file, LogFile::Other | LogFile::Temp(_)) {
        return;
    }
    let Some(l) = st.listing.as_mut() else {
        st.generation += 1;
        return;
    };
    let created = flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO);
    let regular = || {
        !flags.contains(ReadFlags::ISDIR)
            && matches!(log.stat(name), Ok(Some(s)) if rustix::fs::FileType::from_raw_mode(s.st_mode) == rustix::fs::FileType::RegularFile)
    };
    let applied = match (file, created) {
        (LogFile::Commit(v), true) => match l.commits.last() {
            None if regular() => {
                l.commits.push(v);
                true
            }
            Some(&last) if last < v && regular() => {
                l.commits.push(v);
                true
            }
            // Seen by the listing already (a later removal would have queued its own event).
            // (A rename over it queues no removal: the name must still be a regular file.)
            Some(_) => l.commits.binary_search(&v).is_ok() && regular(),
            None => false,
        },
        (LogFile::Crc(v), true) if regular() => {
            l.crcs.insert(v);
            true
        }
        (LogFile::Crc(v), false) if !l.not_regular.iter().any(|(n, _)| n == name) => {
            l.crcs.remove(&v);
            true
        }
        _ => false,
    };
    if applied {
        st.segment = None;
    } else {
        drop_listing(st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;

    /// What a caller can see of a segment (or its error).
    fn view(seg: &Result<LogSegment>) -> String {
        match seg {
            Ok(s) => format!(
                "first {} start {:?} cps {:?} end {} newest {} damage {:?}",
                s.first,
                s.start_checkpoint,
                s.delta_checkpoints,
                s.end,
                s.newest_present,
                s.damage.as_ref().map(|d| (d.version, d.reason.clone()))
            ),
            Err(e) => format!("error {e}"),
        }
    }

    fn build(l: &Listing) -> Result<LogSegment> {
        LogSegment::new(Path::new("/t"), l, || Ok(Default::default()))
    }

    /// One change a process makes to `_delta_log/`.
    #[derive(Debug, Clone)]
    enum Op {
        Commit(u64),
        LinkCommit(u64),
        RemoveCommit(u64),
        RenameCommit(u64, u64),
        SymlinkCommit(u64),
        DirCommit(u64),
        Crc(u64),
        RemoveCrc(u64),
        SymlinkCrc(u64),
        /// A symlink with another name renamed over a commit name.
        SymlinkOver(u64),
        Temp,
        RemoveTemps,
        Checkpoint(u64),
        LastCheckpoint,
        Other,
        /// Ask the watch (and compare with a fresh listing).
        Ask,
    }

    fn op() -> impl Strategy<Value = Op> {
        let v = 0u64..5;
        prop_oneof![
            6 => v.clone().prop_map(Op::Commit),
            2 => v.clone().prop_map(Op::LinkCommit),
            1 => v.clone().prop_map(Op::RemoveCommit),
            1 => (v.clone(), v.clone()).prop_map(|(a, b)| Op::RenameCommit(a, b)),
            1 => v.clone().prop_map(Op::SymlinkCommit),
            1 => v.clone().prop_map(Op::DirCommit),
            3 => v.clone().prop_map(Op::Crc),
            1 => v.clone().prop_map(Op::RemoveCrc),
            1 => v.clone().prop_map(Op::SymlinkCrc),
            1 => v.clone().prop_map(Op::SymlinkOver),
            2 => Just(Op::Temp),
            1 => Just(Op::RemoveTemps),
            1 => v.clone().prop_map(Op::Checkpoint),
            1 => Just(Op::LastCheckpoint),
            1 => Just(Op::Other),
            6 => Just(Op::Ask),
        ]
    }

    fn name(v: u64, ext: &str) -> String {
        format!("{v:020}.{ext}")
    }

    /// Apply `op` in `dir`; failures (a name that exists, or does not) are part of the game.
    fn run(dir: &Path, op: &Op, temps: &mut u32) {
        use std::os::unix::fs::symlink;
        let p = |n: String| dir.join(n);
        let _ = match op {
            Op::Commit(v) => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p(name(*v, "json")))
                .map(|_| ()),
            Op::LinkCommit(v) => {
                *temps += 1;
                let tmp = p(format!(".{v:020}.{temps}.tmp"));
                std::fs::write(&tmp, b"{}\n").and_then(|()| std::fs::hard_link(&tmp, p(name(*v, "json"))))
            }
            Op::RemoveCommit(v) => std::fs::remove_file(p(name(*v, "json"))),
            Op::RenameCommit(a, b) => std::fs::rename(p(name(*a, "json")), p(name(*b, "json"))),
            Op::SymlinkCommit(v) => symlink("elsewhere", p(name(*v, "json"))),
            Op::DirCommit(v) => std::fs::create_dir(p(name(*v, "json"))),
            Op::Crc(v) => std::fs::write(p(name(*v, "crc")), b"{}"),
            Op::RemoveCrc(v) => {
                std::fs::remove_file(p(name(*v, "crc"))).or_else(|_| std::fs::remove_dir(p(name(*v, "crc"))))
            }
            Op::SymlinkCrc(v) => symlink("elsewhere", p(name(*v, "crc"))),
            Op::SymlinkOver(v) => symlink("elsewhere", p("link".into()))
                .and_then(|()| std::fs::rename(p("link".into()), p(name(*v, "json")))),
            Op::Temp => {
                *temps += 1;
                std::fs::write(p(format!(".{:020}.{temps}.tmp", 3)), b"x")
            }
            Op::RemoveTemps => {
                for e in std::fs::read_dir(dir).expect("list").flatten() {
                    if e.file_name().to_string_lossy().ends_with(".tmp") {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
                Ok(())
            }
            Op::Checkpoint(v) => std::fs::write(p(name(*v, "checkpoint.parquet")), b"x"),
            Op::LastCheckpoint => std::fs::write(p("_last_checkpoint".into()), b"{}"),
            Op::Other => std::fs::write(p("notes.txt".into()), b"x"),
            Op::Ask => Ok(()),
        };
    }

    /// A new `_delta_log/` folder in `root`, its handle and its watch.
    fn watched(root: &tempfile::TempDir) -> (std::path::PathBuf, Dir, Box<LogWatch>) {
        let dir = root.path().join("_delta_log");
        std::fs::create_dir(&dir).expect("mkdir");
        let log = Dir::open(&dir).expect("open");
        let Started::Watching(w) = LogWatch::start(&log) else {
            panic!("not watched")
        };
        (dir, log, w)
    }

    /// Folders to watch in: the build's own file system and tmpfs, whichever can be watched.
    fn watchable_roots() -> Vec<tempfile::TempDir> {
        let mut out = Vec::new();
        for base in [concat!(env!("CARGO_MANIFEST_DIR"), "/target"), "/dev/shm"] {
            let Ok(t) = tempfile::tempdir_in(base) else { continue };
            if matches!(
                LogWatch::start(&Dir::open(t.path()).expect("open")),
                Started::Watching(_)
            ) {
                out.push(t);
            }
        }
        assert!(
            !out.is_empty(),
            "neither {} nor /dev/shm can be watched with inotify",
            concat!(env!("CARGO_MANIFEST_DIR"), "/target")
        );
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever is done to the folder, the watch's segment is the one a fresh listing gives.
        #[test]
        fn the_kept_listing_is_what_a_listing_says(ops in proptest::collection::vec(op(), 1..60)) {
            for root in watchable_roots() {
                let (dir, log, w) = watched(&root);
                let mut temps = 0;
                for op in ops.iter().chain([Op::Ask].iter()) {
                    run(&dir, op, &mut temps);
                    if matches!(op, Op::Ask) {
                        let kept = w.segment(&log, build).expect("the watch ended");
                        let fresh = Listing::read(&log).and_then(|l| build(&l));
                        prop_assert_eq!(view(&kept), view(&fresh), "after {:?}", ops);
                    }
                }
            }
        }
    }

    /// One appender's commits are applied from events: no listing after the first.
    #[test]
    fn an_appender_is_followed_without_listing() {
        for root in watchable_roots() {
            let (dir, log, w) = watched(&root);
            std::fs::write(dir.join(name(0, "json")), b"{}").expect("write");
            assert_eq!(w.segment(&log, build).expect("watching").expect("segment").end, 0);
            for v in 1..50u64 {
                let mut temps = 0;
                run(&dir, &Op::LinkCommit(v), &mut temps);
                run(&dir, &Op::RemoveTemps, &mut temps);
                run(&dir, &Op::Crc(v), &mut temps);
                let seg = w.segment(&log, build).expect("watching").expect("segment");
                assert_eq!(seg.end, v);
                let st = w.state.lock().expect("lock");
                assert!(
                    st.listing
                        .as_ref()
                        .is_some_and(|l| l.commits.len() as u64 == v + 1 && l.crcs.len() as u64 == v)
                );
                assert_eq!(st.listings, 1, "listed again at version {v}");
            }
            // A commit removed (check --repair moves one aside) drops the kept listing.
            std::fs::remove_file(dir.join(name(49, "json"))).expect("rm");
            assert_eq!(w.segment(&log, build).expect("watching").expect("segment").end, 48);
        }
    }

    /// Names replaced by a rename queue no removal: a symlink renamed over a listed commit, or a
    /// commit renamed over another, is still seen as what it is.
    #[test]
    fn a_rename_over_a_commit_is_seen() {
        let cases: [&[Op]; 3] = [
            &[Op::Commit(0), Op::Commit(1), Op::Ask, Op::SymlinkOver(1), Op::Ask],
            &[
                Op::Commit(0),
                Op::Commit(1),
                Op::Commit(2),
                Op::Ask,
                Op::RenameCommit(2, 1),
                Op::Ask,
            ],
            &[
                Op::Commit(0),
                Op::Crc(1),
                Op::SymlinkCrc(2),
                Op::Ask,
                Op::RemoveCrc(2),
                Op::Ask,
            ],
        ];
        for ops in cases {
            for root in watchable_roots() {
                let (dir, log, w) = watched(&root);
                let mut temps = 0;
                for op in ops {
                    run(&dir, op, &mut temps);
                    if matches!(op, Op::Ask) {
                        let kept = w.segment(&log, build).expect("the watch ended");
                        let fresh = Listing::read(&log).and_then(|l| build(&l));
                        assert_eq!(view(&kept), view(&fresh), "after {ops:?}");
                    }
                }
            }
        }
    }

    /// Callers racing a writer (commits linked, crcs written, now and then the newest commit
    /// removed and written again) never keep a stale listing: once the writer stops, every
    /// caller gets what a listing says.
    #[test]
    fn racing_callers_converge_on_the_listing() {
        for root in watchable_roots() {
            let (dir, log, w) = watched(&root);
            let done = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        while !done.load(std::sync::atomic::Ordering::Acquire) {
                            let _ = w.segment(&log, build);
                        }
                    });
                }
                let mut temps = 0;
                for v in 0..300u64 {
                    run(&dir, &Op::LinkCommit(v), &mut temps);
                    run(&dir, &Op::Crc(v), &mut temps);
                    if v % 37 == 5 {
                        run(&dir, &Op::RemoveCommit(v), &mut temps);
                        run(&dir, &Op::Commit(v), &mut temps);
                    }
                    if v % 50 == 0 {
                        run(&dir, &Op::RemoveTemps, &mut temps);
                    }
                }
                done.store(true, std::sync::atomic::Ordering::Release);
            });
            let kept = w.segment(&log, build).expect("the watch ended");
            let fresh = Listing::read(&log).and_then(|l| build(&l));
            assert_eq!(view(&kept), view(&fresh));
            assert_eq!(kept.expect("segment").end, 299);
        }
    }

    /// A waiter returns at each commit written into the folder and says the watch ended once
    /// the folder moved.
    #[test]
    fn a_waiter_wakes_at_each_change_and_ends_with_the_folder() {
        for root in watchable_roots() {
            let (dir, log, _w) = watched(&root);
            let waiter = LogWaiter::start(&log).expect("waiter");
            std::thread::scope(|s| {
                let woke = s.spawn(|| waiter.wait());
                std::fs::write(dir.join(name(0, "json")), b"{}").expect("write");
                assert!(woke.join().expect("join"), "the watch ended at a commit");
            });
            while waiter_ready(&waiter) {
                assert!(waiter.wait());
            }
            let mut temps = 0;
            run(&dir, &Op::LinkCommit(1), &mut temps);
            assert!(waiter.wait());
            while waiter_ready(&waiter) {
                assert!(waiter.wait());
            }
            std::fs::rename(&dir, root.path().join("moved")).expect("mv");
            assert!(!waiter.wait(), "the watch did not end when its folder moved");
        }
    }

    /// Whether `w` has an event queued (it would not block).
    fn waiter_ready(w: &LogWaiter) -> bool {
        use rustix::event::{PollFd, PollFlags, poll};
        let mut fds = [PollFd::new(&w.fd, PollFlags::IN)];
        matches!(poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })), Ok(n) if n > 0)
    }

    /// The folder moved away ends the watch: callers list as without one.
    #[test]
    fn a_moved_folder_ends_the_watch() {
        for root in watchable_roots() {
            let (dir, log, w) = watched(&root);
            std::fs::write(dir.join(name(0, "json")), b"{}").expect("write");
            assert!(w.segment(&log, build).is_some());
            std::fs::rename(&dir, root.path().join("moved")).expect("mv");
            assert!(w.segment(&log, build).is_none());
        }
    }
}
