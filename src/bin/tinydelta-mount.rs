//! `tinydelta-mount TABLE MOUNTPOINT`: every version of a table as a directory (README, "The mount").

use std::path::PathBuf;

use clap::Parser;
use tinydelta::fuse::daemon::{self, MountArgs};

/// Mount a tinydelta table: `v/<n>/data.jsonl` for every version, a live `latest` symlink, and
/// an `incoming/` drop box where a file written and closed becomes one append commit.
#[derive(Parser, Debug)]
#[command(name = "tinydelta-mount", version, about)]
struct Cli {
    /// The table folder.
    table: PathBuf,
    /// The directory to mount it on (what it holds is hidden while mounted).
    mountpoint: PathBuf,
    /// Stay in the foreground (log to stderr) instead of returning once the mount is ready.
    #[arg(short, long)]
    foreground: bool,
    /// Mount options, comma-separated: allow_other (others may read; the kernel checks
    /// permissions), allow_root, default_permissions.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Worker threads serving requests (default: one per CPU, 2 to 16; commits run on 2 threads of their own).
    #[arg(long)]
    threads: Option<usize>,
    /// Where the background daemon writes its log (default: nowhere). Verbosity: RUST_LOG.
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
    /// Show incoming/ read-only to other users (with -o allow_other): 0755, files 0644, notes
    /// 0444. Default: private to the mounting user (0700, 0600, 0400).
    #[arg(long)]
    share_incoming: bool,
    /// The longest line incoming/ accepts, in bytes (default 16 MiB = 16777216); a longer line
    /// is refused with an error naming it.
    #[arg(long, value_name = "BYTES")]
    max_line_bytes: Option<usize>,
    /// How many staged files in incoming/ keep an open descriptor in the daemon (default 256);
    /// others are reopened on demand.
    #[arg(long, value_name = "N")]
    max_open_staged: Option<usize>,
    /// The most bytes one close, fsync or rename in incoming/ may validate (default 1 GiB =
    /// 1073741824; bytes written sequentially are validated as they arrive and do not count); a
    /// commit needing more fails with EFBIG and NAME.error says why.
    #[arg(long, value_name = "BYTES")]
    max_validate_bytes: Option<u64>,
    /// Never use FUSE passthrough (single-file versions and commit files are otherwise read by
    /// the kernel directly where it allows: Linux >= 6.9, CAP_SYS_ADMIN); for comparisons.
    #[arg(long)]
    no_passthrough: bool,
    /// Internal: print READY or ERROR on stdout once mounted (used by the background start).
    #[arg(long, hide = true)]
    notify_ready: bool,
}

/// Keep the daemon's memory flat across commits (mallopt(3)): each commit canonicalises in
/// 1 MiB chunks on short-lived threads, and glibc's default of up to 8 arenas per CPU keeps
/// those buffers in one arena per thread, growing RSS with every commit until about 120 MiB.
/// Two arenas bound it, and a fixed mmap threshold just above the largest read reply (1 MiB)
/// returns the commit buffers to the kernel while read replies stay reused heap memory (an mmap
/// and munmap per 1 MiB read would halve the first-read throughput).
const MMAP_THRESHOLD: libc::c_int = (1 << 20) + (4 << 10);

fn bound_malloc() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

fn main() {
    bound_malloc();
    let cli = Cli::parse();
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,tinydelta=info,fuser::session=error"),
    )
    .format_timestamp_millis()
    .init();
    let mut args = MountArgs {
        table: cli.table,
        mountpoint: cli.mountpoint,
        foreground: cli.foreground,
        threads: cli.threads,
        log_file: cli.log_file,
        notify_ready: cli.notify_ready,
        share_incoming: cli.share_incoming,
        max_line_bytes: cli.max_line_bytes,
        max_open_staged: cli.max_open_staged,
        max_validate_bytes: cli.max_validate_bytes,
        no_passthrough: cli.no_passthrough,
        ..MountArgs::default()
    };
    for o in &cli.options {
        if let Err(e) = daemon::apply_options(&mut args, o) {
            eprintln!("tinydelta-mount: {}", e.message);
            std::process::exit(e.code);
        }
    }
    std::process::exit(daemon::run(args));
}
