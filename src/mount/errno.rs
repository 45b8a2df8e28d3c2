//! The mount's error type and its one errno mapping.
//!
//! Every operation of the inner view returns [`FsResult`]; the `fuser` wrapper turns an error into
//! an errno with [`FsError::errno`] and nothing else. The match there is exhaustive over both this
//! enum and the core's [`crate::error::Error`], so a new error variant cannot silently become `EIO`.

use std::io;

/// What can go wrong in a file-system operation.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// No such file or directory.
    #[error("no such file or directory")]
    NotFound,
    /// A write outside `incoming/` (every version is immutable).
    #[error("read-only: only incoming/ accepts writes")]
    ReadOnly,
    /// A file operation on a directory.
    #[error("is a directory")]
    IsDir,
    /// A directory operation on a file.
    #[error("not a directory")]
    NotDir,
    /// The name exists already (`O_EXCL`, `RENAME_NOREPLACE`).
    #[error("file exists")]
    Exists,
    /// A name the mount reserves (`NAME.error`) or will not store (not UTF-8, contains `/`).
    #[error("name not allowed in incoming/: {0}")]
    BadName(String),
    /// An operation `incoming/` does not support (sub-directories, links, `RENAME_EXCHANGE`).
    #[error("operation not supported in incoming/")]
    NotSupported,
    /// A write to a read-only file inside `incoming/` (a `NAME.error` note).
    #[error("permission denied")]
    Denied,
    /// A write or truncate below the bytes an earlier `fsync` already committed.
    #[error("those bytes were already committed by an earlier fsync")]
    AlreadyCommitted,
    /// An unknown file handle.
    #[error("bad file handle")]
    BadHandle,
    /// An operation the staged files do not implement (fallocate, extended attributes).
    #[error("operation not supported")]
    OpNotSupported,
    /// The file changed under the caller (a racing `O_TRUNC` got a fresh file): the kernel looks
    /// the name up again and retries once.
    #[error("stale file handle: the name was created again; retry")]
    Stale,
    /// The staged file is not committed until rewritten from offset 0 (a write to it failed, or
    /// its bytes may be torn by a power loss); the reason.
    #[error("{0}")]
    Blocked(String),
    /// Committing the staged file would need more validation in one request than the mount
    /// allows (docs/MOUNT.md "Limits"); the reason.
    #[error("{0}")]
    TooBig(String),
    /// `lseek` with `SEEK_DATA` or `SEEK_HOLE` at or past the end of the file.
    #[error("no data or hole at or past the end of the file")]
    PastEnd,
    /// A rename between `incoming/` and a version folder (`mv` then copies).
    #[error("a rename between incoming/ and a version folder")]
    CrossDevice,
    /// A symlink was asked for something other than its target.
    #[error("invalid argument")]
    Invalid,
    /// The table refused or failed an operation (a commit, a snapshot, a log read).
    #[error("{0}")]
    Table(#[from] crate::error::Error),
    /// An I/O error of the mount's own files (`_staging/`).
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// `Result` of the inner view.
pub type FsResult<T> = Result<T, FsError>;

impl FsError {
    /// The errno the kernel passes on to the calling process. The one place errors become errnos.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::ReadOnly => libc::EROFS,
            FsError::IsDir => libc::EISDIR,
            FsError::NotDir => libc::ENOTDIR,
            FsError::Exists => libc::EEXIST,
            FsError::BadName(_) => libc::EINVAL,
            FsError::NotSupported => libc::EPERM,
            FsError::Denied => libc::EACCES,
            FsError::AlreadyCommitted => libc::EPERM,
            FsError::BadHandle => libc::EBADF,
            FsError::Invalid => libc::EINVAL,
            FsError::CrossDevice => libc::EXDEV,
            FsError::PastEnd => libc::ENXIO,
            FsError::Stale => libc::ESTALE,
            FsError::Blocked(_) => libc::EIO,
            FsError::TooBig(_) => libc::EFBIG,
            FsError::OpNotSupported => libc::EOPNOTSUPP,
            FsError::Io(e) => io_errno(e),
            FsError::Table(e) => table_errno(e),
        }
    }
}

fn io_errno(e: &io::Error) -> i32 {
    match e.raw_os_error() {
        Some(n) if n > 0 => n,
        _ => libc::EIO,
    }
}

/// The errno for a core error (docs/MOUNT.md "Errno table").
fn table_errno(e: &crate::error::Error) -> i32 {
    use crate::error::Error;
    match e {
        // The bytes in incoming/ are not valid rows for the schema: close/fsync/rename fail.
        Error::BadInput { .. } => libc::EINVAL,
        // Only an append across a schema change can conflict: retry later.
        Error::ConcurrentWrite { .. } | Error::ReplacedFileRemoved { .. } => libc::EBUSY,
        Error::Io { source, .. } => io_errno(source),
        // A version whose data a retention vacuum deleted: its data.jsonl is gone.
        Error::TableNotFound(_)
        | Error::VersionNotFound { .. }
        | Error::NoVersionAsOf { .. }
        | Error::Vacuumed { .. } => libc::ENOENT,
        Error::TableExists(_) => libc::EEXIST,
        Error::Corrupt { .. }
        | Error::MissingDataFile { .. }
        | Error::MisnamedParquet { .. }
        | Error::UnsupportedProtocol { .. }
        | Error::UnsupportedFeature { .. }
        | Error::Unsupported { .. }
        | Error::NoSchema { .. }
        | Error::NotDurable { .. }
        | Error::ExportRefused { .. }
        // changes.jsonl exists; the range of a vacuumed version cannot be read.
        | Error::ChangesVacuumed { .. }
        // changes.jsonl exists; versions it needs were cleaned up before it read them.
        | Error::ChangesCleanedUp { .. }
        // A bug: the request fails, the daemon keeps serving.
        | Error::Internal(_) => libc::EIO,
        // A table of Parquet data files (delta-rs, Spark): incoming/ takes no JSONL.
        Error::ReadOnlyTable { .. } => libc::EROFS,
        Error::AppendOnly { .. } => libc::EPERM,
        Error::LinkUnsupported { .. } => libc::EOPNOTSUPP,
        Error::InvalidArgument(_) => libc::EINVAL,
        Error::ExportStopped { source, .. } => table_errno(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos() {
        assert_eq!(FsError::ReadOnly.errno(), libc::EROFS);
        assert_eq!(FsError::NotFound.errno(), libc::ENOENT);
        let bad = FsError::Table(crate::error::Error::BadInput {
            file: "x".into(),
            line: 1,
            column: "a".into(),
            reason: "r".into(),
        });
        assert_eq!(bad.errno(), libc::EINVAL);
        assert_eq!(
            FsError::Io(io::Error::from_raw_os_error(libc::ENOSPC)).errno(),
            libc::ENOSPC
        );
        assert_eq!(FsError::Io(io::Error::other("x")).errno(), libc::EIO);
    }
}
