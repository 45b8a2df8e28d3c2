//! `tinydelta-mount`: a table as a directory tree (docs/MOUNT.md "The mount: `tinydelta-mount TABLE
//! MOUNTPOINT`").
//!
//! ```text
//! MOUNTPOINT/
//!   latest -> v/<n>        symlink to the newest version, re-read at every lookup
//!   v/<n>/data.jsonl       version n's rows: its data files concatenated; read-only; immutable
//!   v/<n>/commit.json      version n's commit file, as stored
//!   v/<n>/schema.json      the schema at version n
//!   incoming/              drop box: a file written here and closed becomes one APPEND commit
//! ```
//!
//! Layers, like mountpoint-s3: [`view::TableView`] is the whole file system with no `fuser`
//! types (unit-tested without a kernel); [`fs::TableFs`] is the thin `fuser::Filesystem` wrapper
//! (match, call, reply); [`errno`] holds the one error-to-errno mapping; [`crate::table::staging`] keeps the
//! bytes of `incoming/` on disk across crashes; [`versions`] caches immutable version facts and
//! reads `data.jsonl` across data files; [`daemon`] is process plumbing (background start,
//! signals, unmount).

pub mod changes;
pub mod daemon;
pub mod errno;
pub mod fs;
pub mod incoming;
pub mod inode;
pub mod notify;
pub mod process;
pub mod splice;
pub mod versions;
pub mod view;


/// `s` safe for one log line: control characters (newlines, terminal escapes), quotes and
/// backslashes escaped as Rust string escapes (`\n`, `\u{1b}`), so a file name chosen by whoever
/// writes the table folder cannot forge log lines or drive the terminal that reads the log
/// (docs/SECURITY.md "What holds").
pub fn printable(s: &str) -> String {
    s.escape_debug().to_string()
}

/// A sentence of tinydelta's (an error's message, which quotes what it names) for one log line:
/// as the CLI prints it, with only control characters escaped (`\n`, `\u{1b}`), so it cannot
/// forge log lines either (docs/SECURITY.md "What holds").
pub fn printable_sentence(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { c.escape_debug().to_string() } else { c.to_string() })
        .collect()
}
