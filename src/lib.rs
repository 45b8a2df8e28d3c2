//! tinydelta: a single-node table format with a Delta-Lake-compatible transaction log and JSONL
//! data files. See the README and docs/FORMAT.md.
//!
//! The library is what both binaries stand on: open a [`table::Table`], get a
//! [`snapshot::Snapshot`] of any version by log replay, stream its rows, and commit appends,
//! overwrites and restores with the link-publish protocol of [`commit`].

pub mod actions;
pub mod alter;
pub mod beneath;
pub mod changes;
pub mod check;
pub mod checkpoint;
pub mod commit;
pub mod crc;
pub mod diagnose;
pub mod error;
pub mod export;
pub mod failpoint;
pub mod fuse;
pub mod log;
pub mod logwatch;
pub mod lru;
pub mod mount_cli;
pub mod optimize;
pub mod parquet;
pub mod parquet_cache;
pub mod progress;
pub mod request;
pub mod rows;
pub mod schema;
pub mod segment;
pub mod snapshot;
pub mod staging;
pub mod table;
pub mod timespec;
pub mod vacuum;

pub use error::{Error, Result};
pub use schema::Schema;
pub use snapshot::{FileEntry, Snapshot};
pub use table::{Table, WriteOptions};
