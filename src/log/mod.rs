//! The `_delta_log/` folder: file names, the log segment (the only code that lists the log),
//! the log watch, the link() publish protocol, log replay into snapshots, checkpoints and
//! version checksums (docs/FORMAT.md, docs/ARCHITECTURE.md).

pub mod checkpoint;
pub mod delta_checkpoint;
pub mod crc;
pub mod files;
pub mod publish;
pub mod segment;
pub mod snapshot;
pub mod watch;
