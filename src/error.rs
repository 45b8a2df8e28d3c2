//! The crate's one error type and its `Result` alias.
//!
//! Every variant renders as one readable sentence that names the table, version, file, line or
//! path involved, and belongs to one [`ErrorKind`], which the binaries turn into their exit
//! statuses (docs/CLI.md "Usage"). A bug in tinydelta itself is [`Error::Internal`], never
//! bad input.

use std::io;
use std::path::PathBuf;

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tinydelta. New variants may be added: match with a `_` arm,
/// or on [`Error::kind`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on a named path.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done ("open", "read", "fsync", ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },

    /// The path holds no table (no `_delta_log/00000000000000000000.json`).
    #[error("table not found: {} has no _delta_log/00000000000000000000.json", .0.display())]
    TableNotFound(PathBuf),

    /// `create` on a folder that already holds a table.
    #[error("table already exists: {}", .0.display())]
    TableExists(PathBuf),

    /// A version that the log does not have: past the newest commit, or before the oldest one
    /// kept (another engine's log cleanup removed older commits; PROTOCOL "Checkpoints").
    #[error("table {}: version {version} not found ({})", table.display(), versions_held(*version, *first, *latest))]
    VersionNotFound {
        /// Table root.
        table: PathBuf,
        /// The requested version.
        version: u64,
        /// The oldest version the log can still build (0 unless older commits were cleaned up).
        first: u64,
        /// The newest version that exists.
        latest: u64,
    },

    /// `--as-of` names a time before the first version the log holds was committed (version 0,
    /// or a later one when log cleanup removed the commits before a checkpoint).
    #[error("table {}: no version was committed at or before {time} (version {first_version} was committed at {first}{})", table.display(), if *first_version > 0 { format!("; the commits of versions 0 to {} were cleaned up from the log", first_version - 1) } else { String::new() })]
    NoVersionAsOf {
        /// Table root.
        table: PathBuf,
        /// The requested time, as given.
        time: String,
        /// The first version the log holds (0 unless log cleanup removed older commits).
        first_version: u64,
        /// That version's commit time, RFC 3339.
        first: String,
    },

    /// Input rows that break the rules of docs/CLI.md "Input rules".
    #[error("{file}: line {line}, column {column}: {reason}")]
    BadInput {
        /// The input's name (a path, `<stdin>`, or an `incoming/` name).
        file: String,
        /// 1-based line number.
        line: u64,
        /// The schema column name, quoted (`"year"`), or a 1-based character position for
        /// syntax errors (`13`).
        column: String,
        /// What is wrong.
        reason: String,
    },

    /// A commit lost a race it cannot rebase over (docs/FORMAT.md "Concurrency").
    #[error("table {}: concurrent write: version {version} was committed after this write read version {read_version}; nothing was committed", table.display())]
    ConcurrentWrite {
        /// Table root.
        table: PathBuf,
        /// The version this write read (or was told to expect).
        read_version: u64,
        /// The version somebody else committed first.
        version: u64,
    },

    /// A re-save (docs/MOUNT.md "Re-saves") whose earlier data file is no longer live: a commit
    /// after it was written removed it, so its rows cannot be replaced.
    #[error(
        "table {}: this re-save replaces {path}, which {}; nothing was committed (save the file under a new name to add its rows)",
        table.display(),
        match removed {
            Some((v, op)) => format!("was removed at version {v} by {op}"),
            None => format!("is no longer in version {latest} (the latest)"),
        }
    )]
    ReplacedFileRemoved {
        /// Table root.
        table: PathBuf,
        /// The data file the re-save replaces (relative to the root).
        path: String,
        /// The newest version when the re-save gave up.
        latest: u64,
        /// The version whose commit removed `path` and its operation (`commitInfo.operation`),
        /// when found in the log.
        removed: Option<(u64, String)>,
    },

    /// The log or a data file is not what the protocol allows.
    #[error("corrupt table: {}: {reason}", path.display())]
    Corrupt {
        /// The offending file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A data file that a version names is not on disk. Rendered as damage ("corrupt table"); a
    /// retention vacuum's deletion is told apart by [`Error::Vacuumed`].
    #[error("corrupt table: {}: data file is missing, but a version names it", path.display())]
    MissingDataFile {
        /// The data file, under the table root.
        path: PathBuf,
    },

    /// A data file holds Parquet bytes (the `PAR1` magic) under a name that does not end in
    /// `.parquet`: tinydelta reads it neither as JSONL nor as Parquet.
    #[error("corrupt table: {}: data file holds Parquet bytes (PAR1 magic) under a name that does not end in .parquet; tinydelta reads it as neither", path.display())]
    MisnamedParquet {
        /// The data file, under the table root.
        path: PathBuf,
    },

    /// The table's `protocol` action asks for reader or writer features tinydelta lacks.
    #[error("table {} needs Delta reader version {reader} / writer version {writer}, unsupported: tinydelta reads up to reader version 3 and writes writer version 2", table.display())]
    UnsupportedProtocol {
        /// Table root.
        table: PathBuf,
        /// minReaderVersion.
        reader: i64,
        /// minWriterVersion.
        writer: i64,
    },

    /// The table needs a Delta reader feature tinydelta does not implement (PROTOCOL "Table
    /// Features": deletion vectors, column mapping, ...), named in `feature`.
    #[error("table {} uses the Delta reader feature {}, unsupported: tinydelta does not implement it; read it with a Delta engine (delta-rs, Spark)", table.display(), crate::util::quote::quoted(feature))]
    UnsupportedFeature {
        /// Table root.
        table: PathBuf,
        /// The feature's name (`deletionVectors`, `columnMapping`, ...).
        feature: String,
    },

    /// A file of the table uses something tinydelta does not implement (a Delta type, a Parquet
    /// encoding of a column, a form of a feature): named in `what`. Not damage (docs/FORMAT.md
    /// "Tables of other Delta writers").
    #[error("{}: unsupported: {what}; read it with a Delta engine (delta-rs, Spark)", path.display())]
    Unsupported {
        /// The file (a commit, a data file, a deletion vector file).
        path: PathBuf,
        /// What tinydelta does not implement, as a phrase naming it.
        what: String,
    },

    /// A version whose `metaData` has no `schemaString` (Databricks DLT writes one at version 0
    /// and the schema later): it has no rows to read; later versions with a schema are read.
    #[error("table {}: version {version} is not readable: no schema (its metaData action has no schemaString)", table.display())]
    NoSchema {
        /// Table root.
        table: PathBuf,
        /// The version.
        version: u64,
    },

    /// A write to a table whose data files are not tinydelta's JSONL (`metaData.format.provider`
    /// is not `json`, e.g. `parquet` for tables made by delta-rs or Spark): read-only for tinydelta.
    #[error("table {} keeps its data in {} files (metaData.format.provider is {}): tinydelta reads it but writes no JSONL into it, so {operation} is refused; write with a Delta engine (delta-rs, Spark)", table.display(), crate::util::quote::shortened(provider), crate::util::quote::quoted(provider))]
    ReadOnlyTable {
        /// Table root.
        table: PathBuf,
        /// The table's `metaData.format.provider`.
        provider: String,
        /// The refused operation (`append`, `overwrite`, ...).
        operation: String,
    },

    /// A change of rows in a table whose `delta.appendOnly` property is `true`: Delta PROTOCOL
    /// "Append-only Tables" lets new commits add rows and rearrange files (`dataChange: false`),
    /// never remove or change rows. Nothing was committed.
    #[error("table {} is append-only (its property delta.appendOnly is true): {operation} would remove or change rows, so it is refused and nothing was committed; `alter set-property delta.appendOnly=false` lifts it", table.display())]
    AppendOnly {
        /// Table root.
        table: PathBuf,
        /// The refused operation (`DELETE`, `UPDATE`, a `WRITE` that overwrites, ...).
        operation: String,
    },

    /// The file system cannot make hard links, so no commit can be published safely.
    #[error("cannot publish {}: the file system does not support hard links ({source}); nothing was committed", path.display())]
    LinkUnsupported {
        /// The version file that could not be linked.
        path: PathBuf,
        /// The OS error from link(2).
        source: io::Error,
    },

    /// The commit was published (its version exists and readers see it) but the fsync that
    /// makes it durable failed: a crash now may lose it. Sending the same rows again would
    /// duplicate them if it survives.
    #[error("table {}: version {version} was published but may not be durable ({reason}); do not send it again, check the table after a crash", table.display())]
    NotDurable {
        /// Table root.
        table: PathBuf,
        /// The version that was published.
        version: u64,
        /// The failure, as a sentence.
        reason: String,
    },

    /// `tinydelta export` stopped on `source` after this run published DEST versions
    /// `first..=last` (docs/EXPORT.md "Continuing and refusing"): DEST stays readable at version
    /// `last`.
    #[error("{}; this run published versions {first}-{last} of {}, which now holds version {source_version} of {} (as its version {last}); nothing after was exported",
        source.to_string().trim_end_matches("; nothing was committed").trim_end_matches("; nothing was exported"),
        dest.display(), table.display())]
    ExportStopped {
        /// DEST.
        dest: PathBuf,
        /// The source table.
        table: PathBuf,
        /// The first DEST version this run published.
        first: u64,
        /// The last DEST version this run published.
        last: u64,
        /// The source version DEST's version `last` holds.
        source_version: u64,
        /// What stopped it.
        source: Box<Error>,
    },

    /// `tinydelta export` refuses its destination (docs/EXPORT.md "Continuing and refusing"): it
    /// holds something other than an earlier export of the same table, or another writer committed
    /// to it since.
    #[error("cannot export into {}: {reason}; nothing was exported", dest.display())]
    ExportRefused {
        /// The destination folder.
        dest: PathBuf,
        /// Why, as a sentence.
        reason: String,
    },

    /// An argument of an operation is not valid (an unknown type, a malformed duration, a
    /// retention below the table's without `force`...); nothing was read or written.
    #[error("{0}")]
    InvalidArgument(String),

    /// A bug in tinydelta: an internal rule did not hold. Not caused by the input; please report.
    #[error("internal error (a bug in tinydelta; please report it): {0}")]
    Internal(String),

    /// A version whose data files a retention vacuum deleted (docs/FORMAT.md "Vacuum"): its commit
    /// and schema stay, its rows are gone.
    #[error("table {}: version {version}'s data was removed by the vacuum of {time} (version {vacuum_version}); {} is gone", table.display(), path.display())]
    Vacuumed {
        /// Table root.
        table: PathBuf,
        /// The version that was asked for.
        version: u64,
        /// The `VACUUM START` commit of the vacuum that deleted the file.
        vacuum_version: u64,
        /// That commit's time, RFC 3339.
        time: String,
        /// A data file of `version` that the vacuum deleted.
        path: PathBuf,
    },

    /// The change feed of a version whose data files a retention vacuum deleted (docs/MOUNT.md
    /// "Following a table: `changes.jsonl`"): its rows are gone; later versions' changes may still
    /// be read.
    #[error("table {}: version {version}'s changes need data file {}, which the vacuum of {time} (version {vacuum_version}) removed (it is no longer in the table); changes can be read from version {readable_from} on ({})", table.display(), path.display(), crate::util::spelling::with("from_version", readable_from))]
    ChangesVacuumed {
        /// Table root.
        table: PathBuf,
        /// The oldest version whose changes need a deleted file.
        version: u64,
        /// The `VACUUM START` commit of the vacuum that deleted the file.
        vacuum_version: u64,
        /// That commit's time, RFC 3339.
        time: String,
        /// The deleted data file.
        path: PathBuf,
        /// The first version from which every change the feed shows (up to the newest checked) can be read.
        readable_from: u64,
    },

    /// The change feed (a follower, the mount's `changes.jsonl`) reached a version whose commit
    /// another engine's log retention removed before it was read (PROTOCOL "Checkpoints"): its
    /// changes are unknown, so the feed stops there rather than skip them (as Delta's streaming
    /// source does by default; docs/MOUNT.md "Versions another engine cleaned up").
    #[error("table {}: the change feed cannot go on past version {}: the commits of versions {version} to {} were removed from the log (log cleanup) before they were read, so their changes are unknown; changes can be read anew from version {first} on ({}, or mount the table again)", table.display(), version.saturating_sub(1), first.saturating_sub(1), crate::util::spelling::with("from_version", first))]
    ChangesCleanedUp {
        /// Table root.
        table: PathBuf,
        /// The first version the feed needed and could not read.
        version: u64,
        /// The oldest version the log holds now.
        first: u64,
    },
}

/// What kind of failure an [`Error`] is: what a caller can do about it. The CLI's exit statuses
/// (docs/CLI.md "Usage") are these kinds: 1 [`Failed`](ErrorKind::Failed), 2
/// [`InvalidArgument`](ErrorKind::InvalidArgument), 3 [`Conflict`](ErrorKind::Conflict), 4
/// [`NotFound`](ErrorKind::NotFound), 5 [`BadInput`](ErrorKind::BadInput).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// I/O, damage, an unsupported table or feature, an internal bug.
    Failed,
    /// An argument was not valid; nothing happened.
    InvalidArgument,
    /// Another writer's commit got in the way; retrying may succeed.
    Conflict,
    /// The table, version or time asked for does not exist (or its data was vacuumed).
    NotFound,
    /// The input rows were refused; nothing was committed.
    BadInput,
}

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { .. }
            | Error::TableExists(_)
            | Error::Corrupt { .. }
            | Error::MissingDataFile { .. }
            | Error::MisnamedParquet { .. }
            | Error::UnsupportedProtocol { .. }
            | Error::UnsupportedFeature { .. }
            | Error::Unsupported { .. }
            | Error::NoSchema { .. }
            | Error::ReadOnlyTable { .. }
            | Error::AppendOnly { .. }
            | Error::LinkUnsupported { .. }
            | Error::NotDurable { .. }
            | Error::ExportRefused { .. }
            | Error::Internal(_) => ErrorKind::Failed,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::ConcurrentWrite { .. } | Error::ReplacedFileRemoved { .. } => ErrorKind::Conflict,
            Error::TableNotFound(_)
            | Error::VersionNotFound { .. }
            | Error::NoVersionAsOf { .. }
            | Error::Vacuumed { .. }
            | Error::ChangesVacuumed { .. }
            | Error::ChangesCleanedUp { .. } => ErrorKind::NotFound,
            Error::BadInput { .. } => ErrorKind::BadInput,
            Error::ExportStopped { source, .. } => source.kind(),
        }
    }

    /// Whether this error says the table is damaged ("corrupt table": a log or data file that
    /// is not what the protocol allows, a missing or misnamed data file).
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            Error::Corrupt { .. } | Error::MissingDataFile { .. } | Error::MisnamedParquet { .. }
        )
    }

    /// Whether this error says tinydelta does not implement what the table uses (a reader
    /// version, a feature, a type): a refusal, not damage.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            Error::UnsupportedProtocol { .. } | Error::UnsupportedFeature { .. } | Error::Unsupported { .. }
        )
    }

    /// An [`Error::Io`] for `op` on `path`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Attach an operation and a path to an `io::Result`.
pub trait IoContext<T> {
    /// Map the error into [`Error::Io`] naming `op` and `path`.
    fn ctx(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| Error::io(op, path, e))
    }
}

/// The words of [`Error::VersionNotFound`] for which versions the log holds.
fn versions_held(version: u64, first: u64, latest: u64) -> String {
    if version < first {
        format!(
            "the log holds versions {first} to {latest}: the commits before {first} were cleaned up, \
             so older versions can no longer be read"
        )
    } else {
        format!("latest is {latest}")
    }
}
