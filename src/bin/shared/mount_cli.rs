//! The command line of `tinydelta-mount` (docs/MOUNT.md), shared by both binaries so that
//! `tinydelta man` and `tinydelta completions --bin tinydelta-mount` can render it too.

use std::path::PathBuf;

use clap::Parser;

/// Mount a tinydelta table: `v/<n>/data.jsonl` for every version, a live `latest` symlink, and
/// an `incoming/` drop box where a file written and closed becomes one append commit.
#[derive(Parser, Debug)]
#[command(name = "tinydelta-mount", version, about)]
pub struct MountCli {
    /// The table folder.
    pub table: PathBuf,
    /// The directory to mount it on (what it holds is hidden while mounted).
    pub mountpoint: PathBuf,
    /// Stay in the foreground (log to stderr) instead of returning once the mount is ready.
    #[arg(short, long)]
    pub foreground: bool,
    /// Mount options, comma-separated: allow_other (others may read; the kernel checks
    /// permissions), allow_root, default_permissions.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Worker threads serving requests (default: one per CPU, 2 to 16; commits run on 8 threads of their own).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Where the background daemon writes its log (default: nowhere). Verbosity: RUST_LOG.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Show incoming/ read-only to other users (with -o allow_other): 0755, files 0644, notes
    /// 0444. Default: private to the mounting user (0700, 0600, 0400).
    #[arg(long)]
    pub share_incoming: bool,
    /// The longest line incoming/ accepts, in bytes (default 16 MiB = 16777216); a longer line
    /// is refused with an error naming it.
    #[arg(long, value_name = "BYTES")]
    pub max_line_bytes: Option<usize>,
    /// How many staged files in incoming/ keep an open descriptor in the daemon (default 256);
    /// others are reopened on demand.
    #[arg(long, value_name = "N")]
    pub max_open_staged: Option<usize>,
    /// The most bytes one close, fsync or rename in incoming/ may validate (default 1 GiB =
    /// 1073741824; bytes written sequentially are validated as they arrive and do not count); a
    /// commit needing more fails with EFBIG and NAME.error says why.
    #[arg(long, value_name = "BYTES")]
    pub max_validate_bytes: Option<u64>,
    /// The most bytes a Parquet data file's rows may take as JSONL, per byte of the file
    /// (default 1000); a version naming a file whose rows would take more is EIO.
    #[arg(long, value_name = "N")]
    pub max_convert_ratio: Option<u64>,
    /// The most bytes one Parquet data file's rows may take as JSONL (default 16 GiB =
    /// 17179869184), whatever the file's size.
    #[arg(long, value_name = "BYTES")]
    pub max_convert_bytes: Option<u64>,
    /// The most bytes the daemon keeps of versions' facts (their data file lists) in memory
    /// (default 4 MiB = 4194304; the most recently used version is always kept).
    #[arg(long, value_name = "BYTES")]
    pub version_cache_bytes: Option<u64>,
    /// Auto compaction after commits when the table's delta.autoOptimize.autoCompact property
    /// does not say (default on): small files are packed in the background as OPTIMIZE
    /// commits, rows in the same order, once 50 of them are older than 6 s, and any two or more
    /// once commits pause for 6 s.
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub auto_compact: Option<String>,
    /// Small files (under 128 MiB) older than 6 s that start an auto compaction when the
    /// table's tinydelta.autoCompact.minNumFiles property does not say (default 50, from 2).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(2..))]
    pub auto_compact_min_files: Option<u64>,
    /// Never use FUSE passthrough (single-file versions and commit files are otherwise read by
    /// the kernel directly where it allows: Linux >= 6.9, CAP_SYS_ADMIN); for comparisons.
    #[arg(long)]
    pub no_passthrough: bool,
    /// Internal: print READY or ERROR on stdout once mounted (used by the background start).
    #[arg(long, hide = true)]
    pub notify_ready: bool,
}

/// The clap definition of `tinydelta-mount` (for man pages and completions).
#[allow(dead_code)] // used by `tinydelta` only; this file is shared with `tinydelta-mount`
pub fn command() -> clap::Command {
    <MountCli as clap::CommandFactory>::command()
}
