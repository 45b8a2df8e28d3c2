//! `tinydelta-mount TABLE MOUNTPOINT`: every version of a table as a directory (docs/MOUNT.md).

#[path = "shared/mount_cli.rs"]
mod mount_cli;

use clap::Parser;
use mount_cli::MountCli;
use tinydelta::daemon::{self, MountArgs};

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
    let cli = MountCli::parse();
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
        max_convert_ratio: cli.max_convert_ratio,
        max_convert_bytes: cli.max_convert_bytes,
        version_cache_bytes: cli.version_cache_bytes,
        auto_compact: cli.auto_compact.as_deref().map(|v| v == "on"),
        auto_compact_min_files: cli
            .auto_compact_min_files
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
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
