//! The exit statuses of `tinydelta` (docs/CLI.md "Usage"): 0 ok, 1 error, 2 usage, 3 conflict
//! (`ConcurrentWriteError` or `--expect-version`), 4 table or version not found, 5 bad input.

use tinydelta::{Error, ErrorKind};

/// The exit status for `e`, by its [`ErrorKind`].
pub fn code(e: &Error) -> u8 {
    match e.kind() {
        ErrorKind::InvalidArgument => 2,
        ErrorKind::Conflict => 3,
        ErrorKind::NotFound => 4,
        ErrorKind::BadInput => 5,
        _ => 1,
    }
}
