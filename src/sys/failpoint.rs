//! Failpoints for crash and isolation tests, compiled into every build and inert unless the
//! environment variable `TINYDELTA_FAILPOINT` is set.
//!
//! Syntax: `NAME=ACTION[,NAME=ACTION...]`, where NAME is one of the steps of a commit
//! (docs/FORMAT.md "How a write becomes visible"):
//!
//! | name | where |
//! |---|---|
//! | `data-written` | the data file is written (fsynced later, with the commit), no commit bytes yet |
//! | `commit-half-written` | half of the commit bytes are in `_delta_log/.<version>.<uuid>.tmp` |
//! | `before-link` | the temporary commit file is complete and fsynced, not linked |
//! | `after-link` | the version is published, `_delta_log/` not yet fsynced, tmp not unlinked |
//! | `rejects-scanned` | `append --rejects`: the first pass is done, the second not started |
//! | `staged-release` | the mount got the `release` of an `incoming/` file, not yet counted (a serving thread preempted right after reading the request) |
//! | `convert-mib` | a Parquet data file's conversion to JSONL wrote another MiB (docs/FORMAT.md "Parquet data files") |
//! | `optimize-written` | an `OPTIMIZE` (also an auto compaction) wrote its new files, nothing committed yet |
//! | `check-helper` | a helper thread took a piece of a large write to check, not yet checked (a helper the scheduler put aside) |
//!
//! and ACTION is `kill` (SIGKILL itself, like `kill -9`), `freeze` (SIGSTOP itself until a
//! SIGCONT, after printing `failpoint NAME: frozen pid PID` to stderr), `error` (fail the
//! operation with an I/O error) or `sleep:MS`.

use std::sync::OnceLock;

use crate::error::{Error, Result};

fn config() -> &'static Vec<(String, String)> {
    static CFG: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CFG.get_or_init(|| {
        std::env::var("TINYDELTA_FAILPOINT")
            .unwrap_or_default()
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    })
}

/// Run the failpoint `name`, if configured. Errors: [`Error::Io`] for the `error` action.
pub fn hit(name: &str) -> Result<()> {
    let Some((_, action)) = config().iter().find(|(k, _)| k == name) else {
        return Ok(());
    };
    match action.as_str() {
        "kill" => {
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
        "freeze" => {
            eprintln!("failpoint {name}: frozen pid {}", std::process::id());
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::STOP);
        }
        "error" => {
            return Err(Error::io("failpoint", name, std::io::Error::other("injected failure")));
        }
        other => {
            if let Some(ms) = other.strip_prefix("sleep:").and_then(|m| m.parse().ok()) {
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
        }
    }
    Ok(())
}
