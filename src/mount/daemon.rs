//! The `tinydelta-mount` process: checks with clear errors, background start that returns only
//! once the mount is ready, signal handling, clean unmount.
//!
//! Background start re-executes the binary with `--foreground --notify-ready` in a new session
//! (`setsid`), stdin and stdout detached, and waits on a pipe (the child's stdout) for one line:
//! `READY` once the kernel has completed the FUSE handshake, or `ERROR <exit code> <message>`.
//! The daemon's log goes to `--log-file` (or nowhere).
//!
//! Shutdown: SIGINT, SIGTERM and SIGHUP are blocked in every thread and taken by one thread
//! with `sigwait`, which unmounts (lazily if files are still open); `fusermount3 -u` and `umount`
//! end the session from outside. Either way the kernel closes the FUSE connection, the worker
//! threads return and the process exits 0.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fuser::{Config, MountOption, Session, SessionACL};
use log::{error, info, warn};

use super::errno::FsError;
use crate::sys::mountinfo;
use super::fs::TableFs;
use super::view::{TableView, ViewConfig};

/// What `tinydelta-mount` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct MountArgs {
    /// The table folder.
    pub table: PathBuf,
    /// Where to mount it.
    pub mountpoint: PathBuf,
    /// Stay attached (do not start in the background).
    pub foreground: bool,
    /// `-o allow_other`: other users may read (the kernel then checks permissions).
    pub allow_other: bool,
    /// `-o allow_root`: root may access too.
    pub allow_root: bool,
    /// Worker threads (default [`default_threads`]: one per CPU, 2 to 16).
    pub threads: Option<usize>,
    /// Where the background daemon writes its log.
    pub log_file: Option<PathBuf>,
    /// Internal: report readiness on stdout (set for the background child).
    pub notify_ready: bool,
    /// Show `incoming/` read-only to others (0755, files 0644) instead of private (0700/0600).
    pub share_incoming: bool,
    /// The longest line `incoming/` accepts, bytes (default 16 MiB).
    pub max_line_bytes: Option<usize>,
    /// How many staged files' descriptors to keep open (`--max-open-staged`).
    pub max_open_staged: Option<usize>,
    /// How many bytes one request may validate in `incoming/` (`--max-validate-bytes`).
    pub max_validate_bytes: Option<u64>,
    /// The most JSONL bytes per byte of a Parquet data file (`--max-convert-ratio`).
    pub max_convert_ratio: Option<u64>,
    /// The most JSONL bytes of one Parquet data file (`--max-convert-bytes`).
    pub max_convert_bytes: Option<u64>,
    /// The most bytes the cache of version facts may hold (`--version-cache-bytes`).
    pub version_cache_bytes: Option<u64>,
    /// `--auto-compact on|off`: auto compaction when the table's property does not say
    /// (docs/MOUNT.md "Auto compaction"); `None`: on.
    pub auto_compact: Option<bool>,
    /// `--auto-compact-min-files N`: the small files that start an auto compaction when the
    /// table's property does not say (docs/MOUNT.md "Auto compaction"); `None`: 50.
    pub auto_compact_min_files: Option<usize>,
    /// Never use FUSE passthrough: every read goes through the daemon (docs/MOUNT.md
    /// "Passthrough").
    pub no_passthrough: bool,
}

/// A failure before the mount was ready: a message for the user and the exit code.
#[derive(Debug)]
pub struct StartError {
    /// 1 error, 2 usage, 4 table not found.
    pub code: i32,
    /// One readable sentence.
    pub message: String,
}

impl StartError {
    fn new(code: i32, message: impl Into<String>) -> StartError {
        StartError {
            code,
            message: message.into(),
        }
    }
}

/// Parse a `-o` option list (`allow_other,default_permissions`) into `args`.
pub fn apply_options(args: &mut MountArgs, opts: &str) -> Result<(), StartError> {
    for o in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        match o {
            "allow_other" => args.allow_other = true,
            "allow_root" => args.allow_root = true,
            // Always on with allow_other; accepted for compatibility.
            "default_permissions" | "rw" => {}
            _ => {
                return Err(StartError::new(
                    2,
                    format!(
                        "unknown mount option {} (known: allow_other, allow_root, default_permissions)",
                        crate::util::quote::quoted(o)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Run `tinydelta-mount`; returns the process exit code.
pub fn run(args: MountArgs) -> i32 {
    raise_fd_limit();
    if args.foreground {
        foreground(args)
    } else {
        background(args)
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn background(args: MountArgs) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tinydelta-mount: cannot find its own executable: {e}");
            return 1;
        }
    };
    let mut cmd = Command::new(exe);
    cmd.arg(absolute(&args.table))
        .arg(absolute(&args.mountpoint))
        .arg("--foreground")
        .arg("--notify-ready");
    let mut opts = Vec::new();
    if args.allow_other {
        opts.push("allow_other");
    }
    if args.allow_root {
        opts.push("allow_root");
    }
    if !opts.is_empty() {
        cmd.arg("-o").arg(opts.join(","));
    }
    if let Some(t) = args.threads {
        cmd.arg("--threads").arg(t.to_string());
    }
    if args.share_incoming {
        cmd.arg("--share-incoming");
    }
    if let Some(n) = args.max_line_bytes {
        cmd.arg("--max-line-bytes").arg(n.to_string());
    }
    if let Some(n) = args.max_open_staged {
        cmd.arg("--max-open-staged").arg(n.to_string());
    }
    if let Some(n) = args.max_validate_bytes {
        cmd.arg("--max-validate-bytes").arg(n.to_string());
    }
    if let Some(n) = args.max_convert_ratio {
        cmd.arg("--max-convert-ratio").arg(n.to_string());
    }
    if let Some(n) = args.max_convert_bytes {
        cmd.arg("--max-convert-bytes").arg(n.to_string());
    }
    if let Some(n) = args.version_cache_bytes {
        cmd.arg("--version-cache-bytes").arg(n.to_string());
    }
    if let Some(on) = args.auto_compact {
        cmd.arg("--auto-compact").arg(if on { "on" } else { "off" });
    }
    if let Some(n) = args.auto_compact_min_files {
        cmd.arg("--auto-compact-min-files").arg(n.to_string());
    }
    if args.no_passthrough {
        cmd.arg("--no-passthrough");
    }
    let stderr = match &args.log_file {
        Some(path) => match open_log_file(path) {
            Ok(f) => Stdio::from(f),
            Err(e) => {
                eprintln!("tinydelta-mount: {e}");
                return 1;
            }
        },
        None => Stdio::null(),
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .current_dir("/");
    // SAFETY: setsid is async-signal-safe; it detaches the daemon from the terminal's session
    // so a Ctrl-C meant for the shell does not reach it.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tinydelta-mount: cannot start the daemon: {e}");
            return 1;
        }
    };
    let Some(out) = child.stdout.take() else {
        eprintln!("tinydelta-mount: cannot talk to the daemon");
        return 1;
    };
    let mut line = String::new();
    let _ = BufReader::new(out).read_line(&mut line);
    let line = line.trim_end();
    if line == "READY" {
        return 0;
    }
    if let Some(rest) = line.strip_prefix("ERROR ") {
        let (code, msg) = rest.split_once(' ').unwrap_or(("1", rest));
        eprintln!("tinydelta-mount: {msg}");
        let _ = child.wait();
        return code.parse().unwrap_or(1);
    }
    let status = child.wait();
    eprintln!(
        "tinydelta-mount: the daemon exited before the mount was ready ({}); run with --foreground to see why",
        match status {
            Ok(s) => s.to_string(),
            Err(e) => e.to_string(),
        }
    );
    1
}

/// Open (create, append to) the daemon's log file. The last component is never followed if it
/// is a symlink (`O_NOFOLLOW`): a daemon started by root must not append to whatever file
/// someone else's link points at; the open never blocks (`O_NONBLOCK`: a FIFO with no reader
/// is refused at once); and the file must be a regular file owned by the effective uid and not
/// writable by group or others, so another user's pre-created file never receives the log
/// (docs/SECURITY.md "What holds"). Created files are 0600.
fn open_log_file(path: &Path) -> Result<File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => format!(
                "log file {} is a symbolic link; tinydelta-mount does not follow it (name the file itself)",
                path.display()
            ),
            Some(libc::ENXIO) => format!(
                "log file {} is not a regular file (a FIFO with no reader); name a regular file",
                path.display()
            ),
            _ => format!("cannot open log file {}: {e}", path.display()),
        })?;
    let st = rustix::fs::fstat(&f).map_err(|e| format!("cannot stat log file {}: {e}", path.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(format!("log file {} is not a regular file; name a regular file", path.display()));
    }
    if st.st_uid != me || st.st_mode & 0o022 != 0 {
        return Err(format!(
            "log file {} belongs to uid {} with mode {:o}; tinydelta-mount writes only to a file of its own \
             (uid {me}) that group and others cannot write",
            path.display(),
            st.st_uid,
            st.st_mode & 0o7777
        ));
    }
    // Writes to a regular file never block; the flag only kept the open from waiting.
    rustix::fs::fcntl_setfl(&f, rustix::fs::OFlags::APPEND)
        .map_err(|e| format!("cannot use log file {}: {e}", path.display()))?;
    Ok(f)
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise the set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

fn foreground(args: MountArgs) -> i32 {
    // Block the shutdown signals before any thread exists, so every thread inherits the mask
    // and only the sigwait thread below receives them.
    let set = signal_set();
    // SAFETY: changes this thread's signal mask only.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let notify = args.notify_ready;
    let report = |e: StartError| -> i32 {
        if notify {
            let msg = e.message.replace('\n', " ");
            let mut out = io::stdout();
            let _ = writeln!(out, "ERROR {} {msg}", e.code);
            let _ = out.flush();
        }
        // Once: to the log of a background daemon, or on stderr in the foreground (whose log
        // is stderr too).
        if notify {
            error!("{}", super::printable(&e.message));
        } else {
            eprintln!("tinydelta-mount: {}", e.message);
        }
        e.code
    };
    let (session, mountpoint) = match start(&args) {
        Ok(s) => s,
        Err(e) => return report(e),
    };
    info!("mounted {:?} at {:?}", args.table, mountpoint);
    // This mount's device (`major:minor` in /proc/self/mountinfo): no other mount has it while
    // this daemon's super block lives, so it tells this mount from one mounted over it later.
    let own = mountinfo::entry(&mountpoint);
    // The session's worker threads start before the mount reports ready, so the first request does
    // not wait for them (docs/MOUNT.md "Starting and stopping").
    let workers = session_threads(&args);
    let tasks_before = thread_count();
    // `spawn` moves the mount handle out of the session into `bg`, which is never dropped (see
    // below).
    let mut bg = match session.spawn() {
        Ok(bg) => bg,
        Err(e) => return report(StartError::new(1, format!("cannot start the session thread: {e}"))),
    };
    wait_for_threads(tasks_before.map(|n| n + 1 + workers));
    if notify {
        let mut out = io::stdout();
        let _ = writeln!(out, "READY");
        let _ = out.flush();
        detach_stdout();
    }
    let (mp, mine) = (mountpoint.clone(), own.clone());
    // Set when a signal found another mount on the path and left it alone: the final log line
    // then does not say "unmounted".
    let left_alone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let left = left_alone.clone();
    let spawned = std::thread::Builder::new().name("signals".into()).spawn(move || {
        loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: waits for one of the blocked signals in `set`.
            let rc = unsafe { libc::sigwait(&set, &mut sig) };
            if rc != 0 {
                continue;
            }
            // Only this daemon's own mount is unmounted: after a lazy unmount (`umount -l`) or
            // with another mount over it, the path holds another mount, left alone (this daemon
            // then exits when the kernel closes its connection, once its last open file is
            // closed). (A mount made between this check and the unmount would be unmounted.)
            let there = mountinfo::entry(&mp);
            if mine.is_some() && there.as_ref().map(|e| &e.dev) != mine.as_ref().map(|e| &e.dev) {
                warn!(
                    "signal {sig}: {mp:?} no longer holds this daemon's mount (it was detached, or another mount is over it): left alone; the daemon exits once its last open file is closed"
                );
                left.store(true, Ordering::Relaxed);
                continue;
            }
            info!("signal {sig}: unmounting {mp:?}");
            // If files are open, a lazy unmount.
            match unmount(&mp) {
                Ok(()) => break,
                Err(e) => warn!("unmount of {mp:?} failed: {e}"),
            }
        }
    });
    if let Err(e) = spawned {
        warn!("no signal thread ({e}); use fusermount3 -u to unmount");
    }
    // The session ends when the kernel closes the connection: an unmount, this daemon's or
    // anyone's. Its mount handle would then unmount the mount point by path when dropped, and
    // by then the path may hold a newer mount of the same table by another daemon (a remount
    // right after `fusermount3 -u`: 3-4 of 40 such remounts were undone before this): so the
    // handle is forgotten, never dropped, and the session thread is joined through a handle
    // swapped out of it.
    let ended = match std::thread::Builder::new().spawn(|| Ok(())) {
        Ok(placeholder) => std::mem::replace(&mut bg.guard, placeholder)
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the session thread panicked"))),
        Err(e) => {
            warn!("cannot start a thread ({e}); waiting for the session in place");
            while !bg.guard.is_finished() {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(())
        }
    };
    std::mem::forget(bg);
    // The connection ended while this mount is still on its path, its file system dead
    // (ENOTCONN): the connection was aborted (/sys/fs/fuse/connections/N/abort). The stale
    // mount is removed, as fuser's handle would have, and the exit status says it.
    let stale = own.is_some()
        && mountinfo::entry(&mountpoint) == own
        && std::fs::metadata(&mountpoint).is_err_and(|e| e.raw_os_error() == Some(libc::ENOTCONN));
    if stale {
        error!(
            "the FUSE connection of {mountpoint:?} ended while it was mounted (aborted?): unmounting the stale mount"
        );
        if let Err(e) = unmount(&mountpoint) {
            error!("cannot unmount the stale mount {mountpoint:?}: {e}");
        }
        return 1;
    }
    match ended {
        Ok(()) if left_alone.load(Ordering::Relaxed) && mountinfo::entry(&mountpoint) != own => {
            info!("this daemon's mount of {mountpoint:?} is gone; the mount now there was left alone");
            0
        }
        Ok(()) => {
            info!("unmounted {mountpoint:?}");
            0
        }
        Err(e) => {
            error!("session ended with an error: {}", super::printable(&e.to_string()));
            1
        }
    }
}

/// After the ready line, stdout is the parent's pipe, which it closes: point fd 1 at /dev/null.
fn detach_stdout() {
    if let Ok(null) = File::options().write(true).open("/dev/null") {
        // SAFETY: dup2 onto fd 1; both descriptors are valid.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
}

/// How many worker threads the session runs (`--threads`, else [`default_threads`]).
fn session_threads(args: &MountArgs) -> usize {
    args.threads.unwrap_or_else(default_threads).max(1)
}

/// This process's thread count (`/proc/self/task`), `None` when unreadable.
fn thread_count() -> Option<usize> {
    procfs::process::Process::myself()
        .and_then(|p| p.tasks())
        .map(|t| t.count())
        .ok()
}

/// Wait (at most 100 ms, polling every 50 us) until this process has `want` threads: the
/// session thread and its workers have started. `None`: no waiting.
fn wait_for_threads(want: Option<usize>) {
    let Some(want) = want else { return };
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
    while thread_count().is_some_and(|n| n < want) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// Checks with clear errors, then the mount (returns after the FUSE handshake).
fn start(args: &MountArgs) -> Result<(Session<TableFs>, PathBuf), StartError> {
    check_dev_fuse()?;
    let mountpoint = check_mountpoint(&args.mountpoint)?;
    let table_root = absolute(&args.table);
    check_apart(&table_root, &mountpoint)?;
    let d = ViewConfig::default();
    let budget = super::versions::descriptor_budget(session_threads(args));
    let cfg = ViewConfig {
        share_incoming: args.share_incoming,
        max_line_bytes: args.max_line_bytes.map_or(d.max_line_bytes, |n| n.max(1)),
        // By default what the descriptor budget leaves (docs/MOUNT.md "Limits").
        max_open_staged: args
            .max_open_staged
            .map_or(d.max_open_staged.min(budget.staged_files), |n| n.max(1)),
        max_validate_bytes: args.max_validate_bytes.unwrap_or(d.max_validate_bytes),
        version_cache_bytes: args.version_cache_bytes.unwrap_or(d.version_cache_bytes),
        auto_compact: crate::ops::optimize::AutoCompact {
            default_on: args.auto_compact.unwrap_or(d.auto_compact.default_on),
            min_files: args.auto_compact_min_files.map_or(d.auto_compact.min_files, |n| n.max(2)),
            ..d.auto_compact
        },
        ..d
    };
    let limits = crate::table::parquet_cache::ConvertLimits::default();
    crate::table::parquet_cache::set_limits(crate::table::parquet_cache::ConvertLimits {
        ratio: args.max_convert_ratio.unwrap_or(limits.ratio),
        max_bytes: args.max_convert_bytes.unwrap_or(limits.max_bytes),
    });
    let view = TableView::load(&table_root, cfg).map_err(|e| match e {
        // Another daemon holds `_staging/.lock`; its message names the holder: "locked by
        // another tinydelta-mount (pid N); ...".
        FsError::Table(crate::error::Error::Io { source: io, .. }) | FsError::Io(io)
            if io.kind() == io::ErrorKind::WouldBlock =>
        {
            let msg = io.to_string();
            let holder = msg
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .map_or("", |(h, _)| h);
            StartError::new(1, already_mounted(&table_root, holder))
        }
        FsError::Table(t) => StartError::new(exit_status(&t), t.to_string()),
        other => StartError::new(1, format!("cannot open {}/_staging: {other}", table_root.display())),
    })?;
    view.warm();
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(mountinfo::fs_name(&table_root)),
        MountOption::Subtype("tinydelta".into()),
        MountOption::NoSuid,
        MountOption::NoDev,
        MountOption::NoAtime,
    ];
    if args.allow_other {
        config.mount_options.push(MountOption::DefaultPermissions);
        config.acl = SessionACL::All;
    } else if args.allow_root {
        config.mount_options.push(MountOption::DefaultPermissions);
        config.acl = SessionACL::RootAndOwner;
    }
    config.n_threads = Some(session_threads(args));
    // One device descriptor for every worker thread: a reply must be written to the
    // descriptor its request was read from, and spliced read replies (src/mount/splice.rs) are
    // written to a duplicate of the session's descriptor.
    config.clone_fd = false;
    let mnt_id = Arc::new(AtomicU64::new(0));
    let fs = TableFs::new(view, mnt_id.clone(), !args.no_passthrough, budget.commit_threads);
    let splice = fs.splice_replies();
    let invalidator = fs.invalidator();
    let session = Session::new(fs, &mountpoint, &config).map_err(|e| {
        let hint = match e.kind() {
            io::ErrorKind::PermissionDenied if args.allow_other => {
                " (allow_other needs root or user_allow_other in /etc/fuse.conf)"
            }
            io::ErrorKind::PermissionDenied => " (is fusermount3 installed and setuid root?)",
            _ => "",
        };
        StartError::new(1, format!("cannot mount at {}: {e}{hint}", mountpoint.display()))
    })?;
    match mount_id(&mountpoint) {
        Some(id) => mnt_id.store(id, Ordering::Relaxed),
        None => warn!("cannot find {mountpoint:?} in /proc/self/mountinfo"),
    }
    invalidator.start(session.notifier());
    match session.as_fd().try_clone_to_owned() {
        Ok(dev) => splice.set_device(dev),
        Err(e) => info!("read replies are not spliced: cannot duplicate the FUSE device descriptor: {e}"),
    }
    raise_readahead(&mountpoint);
    // Once mounted: an error that refuses the mount is the one line the user sees.
    info!(
        "descriptor budget: {} data files, {} staged files, {} commit threads",
        budget.data_files, budget.staged_files, budget.commit_threads
    );
    Ok((session, mountpoint))
}

/// Refuse a mount point that is the table folder, lies inside it, or contains it: the mount
/// would hide the table from the daemon itself (its reads would call back into the mount and
/// hang), or put the mount's own files inside the table (docs/MOUNT.md "Starting and stopping").
fn check_apart(table_root: &Path, mountpoint: &Path) -> Result<(), StartError> {
    // A table that does not exist is reported by the load that follows, with its own message.
    let Ok(table) = std::fs::canonicalize(table_root) else {
        return Ok(());
    };
    let (t, m) = (table.display(), mountpoint.display());
    if table == mountpoint {
        return Err(StartError::new(
            2,
            format!("mount point {m} is the table folder itself; mount the table on another, empty directory"),
        ));
    }
    if mountpoint.starts_with(&table) {
        return Err(StartError::new(
            2,
            format!("mount point {m} is inside the table folder {t}; mount the table on a directory outside it"),
        ));
    }
    if table.starts_with(mountpoint) {
        return Err(StartError::new(
            2,
            format!(
                "mount point {m} contains the table folder {t}: the mount would hide the table it serves; \
                 mount it on a directory outside the table's path"
            ),
        ));
    }
    Ok(())
}

/// Worker threads serving FUSE requests by default: one per CPU, at least 2, at most 16.
/// Commits do not run on them (`flush`, `fsync`, `release` and `rename` of `incoming/` files go
/// to [`super::fs::COMMIT_THREADS`] threads of their own), so a long commit never takes a
/// reader's thread. More threads than CPUs only contend: on 2 cores, 2 threads instead of 8-16
/// halved the time of cold random reads (docs/MOUNT.md "Reading").
pub fn default_threads() -> usize {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    cpus.clamp(2, 16)
}

fn check_dev_fuse() -> Result<(), StartError> {
    match std::fs::metadata("/dev/fuse") {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StartError::new(
            1,
            "no /dev/fuse: the FUSE kernel module is not loaded (try `modprobe fuse`), or this container was \
             started without --device /dev/fuse",
        )),
        Err(e) => Err(StartError::new(1, format!("cannot use /dev/fuse: {e}"))),
    }
}

/// The mount point, absolute, after checking it is an existing, non-busy, non-stale directory.
fn check_mountpoint(mp: &Path) -> Result<PathBuf, StartError> {
    let shown = mp.display();
    match std::fs::metadata(mp) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(StartError::new(
                1,
                format!(
                    "stale mount point {shown}: the daemon that served it is gone (transport endpoint is not \
                     connected); run `fusermount3 -u {shown}` first"
                ),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(StartError::new(1, format!("mount point {shown} does not exist")));
        }
        Err(e) => return Err(StartError::new(1, format!("mount point {shown}: {e}"))),
        Ok(m) if !m.is_dir() => return Err(StartError::new(1, format!("mount point {shown} is not a directory"))),
        Ok(_) => {}
    }
    let abs = std::fs::canonicalize(mp).map_err(|e| StartError::new(1, format!("mount point {shown}: {e}")))?;
    if is_mount_point(&abs) {
        return Err(StartError::new(
            1,
            format!(
                "mount point {shown} is busy: something is already mounted there (unmount it first: \
                 `fusermount3 -u {shown}`)"
            ),
        ));
    }
    Ok(abs)
}

/// Whether `path` (canonical) is listed as a mount point in /proc/self/mountinfo.
pub fn is_mount_point(path: &Path) -> bool {
    mount_id(path).is_some()
}

/// The id of the last mount on `path` (canonical) in /proc/self/mountinfo.
pub fn mount_id(path: &Path) -> Option<u64> {
    mountinfo::entry(path).map(|e| e.id)
}

/// The sentence for a table whose `_staging/.lock` another daemon holds: names the other mount
/// point(s) when visible (control characters, quotes and backslashes escaped, so a mount point
/// cannot break the sentence into lines), and the holder the lock file records (`holder`, e.g.
/// `pid 1234`).
pub fn already_mounted(table_root: &Path, holder: &str) -> String {
    let by = if holder.is_empty() {
        "another tinydelta-mount".to_string()
    } else {
        format!("another tinydelta-mount ({holder})")
    };
    match crate::sys::mountinfo::mounted_at(table_root).as_slice() {
        [] => format!(
            "table {} is already mounted by {by}, at a mount point not visible here; a table can be mounted once",
            table_root.display()
        ),
        points => {
            let shown: Vec<String> = points.iter().map(|p| super::printable(&p.display().to_string())).collect();
            format!(
                "table {} is already mounted at {} by {by}; a table can be mounted once (unmount it first: fusermount3 -u {})",
                table_root.display(),
                shown.join(" and "),
                shown[0]
            )
        }
    }
}

/// The exit status of a daemon that could not start because of `e`: the `tinydelta` CLI's
/// statuses (docs/CLI.md "Usage"), so scripts treat both programs alike.
fn exit_status(e: &crate::error::Error) -> i32 {
    use crate::error::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidArgument => 2,
        ErrorKind::Conflict => 3,
        ErrorKind::NotFound => 4,
        ErrorKind::BadInput => 5,
        _ => 1,
    }
}

/// Unmount `mp`: a plain unmount, or a lazy one when files are still open (the daemon then
/// exits when the last one is closed). Non-root users go through `fusermount3 -u`.
pub fn unmount(mp: &Path) -> io::Result<()> {
    use rustix::mount::{UnmountFlags, unmount as umount2};
    let err = match umount2(mp, UnmountFlags::empty()) {
        Ok(()) => return Ok(()),
        Err(e) => io::Error::from(e),
    };
    match err.raw_os_error() {
        Some(libc::EBUSY) => {
            warn!("{mp:?} is busy; detaching it lazily");
            umount2(mp, UnmountFlags::DETACH).map_err(io::Error::from)
        }
        Some(libc::EPERM) => {
            let status = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg("--")
                .arg(mp)
                .status()?;
            if status.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!("fusermount3 -u -z failed: {status}")))
            }
        }
        _ => Err(err),
    }
}

/// The kernel proposes 128 KiB of readahead at FUSE_INIT and lets the daemon only lower it;
/// root may raise it through sysfs. Four maximal requests keep sequential readers (cat, cp,
/// DuckDB) fed with 1 MiB reads. Best effort: without permission the default stays.
fn raise_readahead(mp: &Path) {
    let dev = mountinfo::entry(mp).map(|e| e.dev);
    if let Some(dev) = dev {
        let path = format!("/sys/class/bdi/{dev}/read_ahead_kb");
        let kb = 4 * super::fs::MAX_IO / 1024;
        match std::fs::write(&path, kb.to_string()) {
            Ok(()) => log::debug!("{path}: {kb}"),
            Err(e) => log::debug!("cannot raise readahead ({path}): {e}"),
        }
    }
}

/// Raise the soft limit of open descriptors to the hard limit (getrlimit(2)); best effort.
fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current < lim.maximum {
        lim.current = lim.maximum;
        let _ = setrlimit(Resource::Nofile, lim);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let mut a = MountArgs::default();
        apply_options(&mut a, "allow_other,default_permissions").unwrap();
        assert!(a.allow_other);
        assert_eq!(apply_options(&mut a, "bogus").unwrap_err().code, 2);
    }

    #[test]
    fn mountpoint_and_table_must_not_overlap() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("t");
        std::fs::create_dir_all(t.join("sub")).unwrap();
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap();
        let e = check_apart(&t, &canon(&t)).unwrap_err();
        assert!(e.message.contains("is the table folder itself"), "{}", e.message);
        let e = check_apart(&t, &canon(&t.join("sub"))).unwrap_err();
        assert!(e.message.contains("inside the table folder"), "{}", e.message);
        let e = check_apart(&t, &canon(d.path())).unwrap_err();
        assert!(e.message.contains("contains the table folder"), "{}", e.message);
        std::fs::create_dir(d.path().join("m")).unwrap();
        std::fs::create_dir(d.path().join("t2")).unwrap();
        check_apart(&t, &canon(&d.path().join("m"))).unwrap();
        // A sibling whose name starts with the table's is not inside it.
        check_apart(&t, &canon(&d.path().join("t2"))).unwrap();
    }

    #[test]
    fn log_file_symlink_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        let link = d.path().join("log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open_log_file(&link).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        open_log_file(&d.path().join("real.log")).unwrap();
    }

    #[test]
    fn mountpoint_errors() {
        let e = check_mountpoint(Path::new("/nonexistent/dir")).unwrap_err();
        assert!(e.message.contains("does not exist"), "{}", e.message);
        let e = check_mountpoint(Path::new("/")).unwrap_err();
        assert!(e.message.contains("busy"), "{}", e.message);
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = check_mountpoint(f.path()).unwrap_err();
        assert!(e.message.contains("not a directory"), "{}", e.message);
    }
}
