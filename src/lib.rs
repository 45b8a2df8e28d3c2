//! tinydelta: a single-node table format with a Delta-Lake-compatible transaction log and JSONL
//! data files (docs/FORMAT.md), and a FUSE mount of it (docs/MOUNT.md).
//!
//! The library is what both binaries stand on: open a [`Table`], get a [`Snapshot`] of any
//! version by log replay, stream its rows, and commit appends, overwrites and restores with the
//! link-publish protocol. The operations on a whole table ([`check`], [`vacuum`], [`optimize`],
//! [`alter::add_column`], [`changes`], [`export`]) each take an options value and return a
//! report.
//!
//! Layers (docs/ARCHITECTURE.md), imports pointing one way, lowest first:
//! `util`, `error` -> `sys` -> `format` -> `log` -> `table` -> `ops` -> `mount` | `serve`. The modules are
//! crate-private; the `internal-api` feature opens them for model tests and benchmarks.

#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]
// Without the mount, the helpers only it uses (process, splice, staging limits) are unused.
#![cfg_attr(not(feature = "mount"), allow(dead_code))]

/// Declares a layer: public with the `internal-api` feature, crate-private without it.
macro_rules! layer {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[cfg(feature = "internal-api")]
        pub mod $name;
        $(#[$m])*
        #[cfg(not(feature = "internal-api"))]
        pub(crate) mod $name;
    };
}

pub mod error;
layer!(util);
layer!(sys);
layer!(format);
layer!(log);
layer!(table);
layer!(ops);
layer!(
    #[cfg(feature = "mount")]
    mount
);
layer!(
    #[cfg(feature = "serve")]
    serve
);

pub use crate::error::{Error, ErrorKind, IoContext, Result};
pub use crate::format::actions::CommitInfo;
pub use crate::format::rows::count_rows;
pub use crate::format::schema::{Column, ColumnType, Element, MapType, Schema};

/// Schema inference from a sample of rows (docs/CLI.md "Inferring a schema").
pub mod infer {
    pub use crate::format::rows::{Inferred, infer_columns, infer_schema};
}
pub use crate::log::snapshot::{FileEntry, Snapshot};
pub use crate::table::history::readable_versions;
pub use crate::table::staging::SOURCE_PARAM;
pub use crate::table::{FileAppend, HistoryEntry, Table, TxnOutcome, WriteOptions};

/// Errors that teach: every bad line of an input with its line, column and hints
/// (docs/CLI.md "Errors that teach").
pub mod diagnose {
    pub use crate::format::diagnose::{DEFAULT_MAX_ERRORS, Diagnosis, Input, Rejects, SkipLines, count, scan};
}

/// Quoting input in messages, cut to a short excerpt (docs/CLI.md "Input rules").
pub mod quote {
    pub use crate::util::quote::{QUOTED_BYTES, quoted, shortened};
}

/// How messages spell an option: the command line's `--force` or the Python package's
/// `force=True` (one setting per process).
pub mod spelling {
    pub use crate::util::spelling::{Spelling, current, set};
}

/// Time expressions (`--as-of`, `at/`), the RFC 3339 form commit times are shown in, the clock.
pub mod time {
    pub use crate::util::time::{ACCEPTED, now_ms, parse, rfc3339_ms, shown_ms};
}

/// `check`: is the table whole? (docs/CLI.md "Usage").
pub mod check {
    pub use crate::ops::check::{CheckOptions, Problem, Report, Severity, check};
}

/// `vacuum`: delete data files no version within the retention needs (docs/FORMAT.md "Vacuum").
pub mod vacuum {
    pub use crate::ops::vacuum::{
        DEFAULT_RETENTION, VacuumOptions, VacuumReport, format_duration, format_ranges, vacuum,
    };
}

/// `optimize`: compact small data files into one OPTIMIZE commit (docs/FORMAT.md "Optimize").
pub mod optimize {
    pub use crate::ops::optimize::{
        AUTO_COMPACT_MIN_FILES_PROPERTY, AUTO_COMPACT_PROPERTY, AutoCompact, DEFAULT_AUTO_COMPACT_MIN_FILES,
        DEFAULT_TARGET_SIZE, OptimizeOptions, OptimizeReport, auto_compact, optimize, parse_size,
    };
}

/// `alter add-column` (docs/FORMAT.md "Schema evolution").
pub mod alter {
    pub use crate::ops::alter::{add_column, set_properties};
    pub use crate::ops::properties::check_property;
}

/// Row-level changes: `read --where`, DELETE, UPDATE, MERGE (docs/FORMAT.md "Row-level changes").
pub mod dml {
    pub use crate::ops::dml::{
        Assignment, ChangeOptions, ChangeReport, DEFAULT_MAX_SOURCE_BYTES, MergeOptions, Predicate, ReadOptions,
        ReadReport, Skipping, delete, merge, parse_sets, read, update,
    };
}

/// The change data feed (docs/MOUNT.md "Following a table: `changes.jsonl`").
pub mod changes {
    pub use crate::ops::changes::print;
}

/// `export`: the table as a Delta table of Parquet files (docs/EXPORT.md).
pub mod export {
    pub use crate::ops::export::{Mode, Progress, Report, export};
}

/// Arrow record batches in and out: a version's rows streamed as batches, and batches given as
/// input written as JSONL rows (docs/PYTHON.md "Inputs" and "Outputs").
pub mod arrow {
    pub use crate::format::parquet::batch_jsonl;
    pub use crate::ops::arrow::{VersionBatches, batches};
    pub use crate::ops::export::convert::{JsonlBatches, arrow_schema};
}

/// Parquet data files read as JSONL: the bounds of their conversion (docs/FORMAT.md "Parquet
/// data files").
pub mod parquet {
    pub use crate::table::parquet_cache::{
        ConvertLimits, DEFAULT_MAX_CONVERT_BYTES, DEFAULT_MAX_CONVERT_RATIO, set_limits,
    };
}

/// Failpoints for crash tests (docs/ARCHITECTURE.md): `TINYDELTA_FAILPOINT=name=action,...`.
pub mod failpoint {
    pub use crate::sys::failpoint::hit;
}

/// The FUSE daemon behind `tinydelta-mount` (docs/MOUNT.md).
#[cfg(feature = "mount")]
pub mod daemon {
    pub use crate::mount::daemon::{MountArgs, StartError, apply_options, run};
}

/// `tinydelta serve`: a local web page over a table and its JSON endpoints (docs/SERVE.md).
#[cfg(feature = "serve")]
pub mod server {
    pub use crate::serve::{
        DEFAULT_MAX_EVENT_STREAMS, DEFAULT_MAX_UPLOAD_BYTES, DEFAULT_THREADS, MAX_PAGE_ROWS, ServeOptions, Server,
    };
}

#[cfg(test)]
mod layering;
