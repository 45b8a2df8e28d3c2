//! Integration tests that mount tables for real with the `tinydelta-mount` daemon (FUSE, never
//! mocks): serving versions, `incoming/` writers and their limits, passthrough reads, the change
//! feed, Parquet tables, security against a second user, and everyday tools run on the mount.
//! They need `/dev/fuse`, `fusermount3` and root (for the second user), and fail, never skip,
//! without them.
//!
//! Run them all with `cargo test --release --test mount`, one area with its module path as the
//! filter, e.g. `cargo test --release --test mount incoming_writers::`. The filter matches
//! anywhere in a test's path: `mount::` also selects `integrity_mount::` and `cli_mount::`, and
//! `security::` also selects `incoming_security::` (`--list` shows what a filter selects).

#[path = "../support/mod.rs"]
mod support;

mod any_table;
mod bounds;
mod changes;
mod cli_mount;
mod commit_threads;
mod compaction;
mod edit;
mod incoming_limits;
mod incoming_security;
mod incoming_writers;
mod integrity_mount;
mod mount;
mod newest_attrs;
mod parquet_read;
mod passthrough;
mod security;
mod tools;
mod types;
