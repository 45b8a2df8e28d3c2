//! How the front end in this process spells an option in a message: the command line's
//! `--force` and `--where 'EXPR'`, or the Python package's `force=True` and `where=`
//! (docs/PYTHON.md "Exceptions").
//!
//! The library's messages name the option a user can change. Which spelling they use is a
//! property of the process (one process runs one front end: the `tinydelta` binary, the mount,
//! or Python), and an error's message is rendered after the call that made it has returned, so
//! the spelling is one process-wide setting, [`set`], rather than a parameter of every call.

use std::sync::atomic::{AtomicU8, Ordering};

/// A front end's way of naming options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Spelling {
    /// The command line: `--all-versions`, `--where`, `--set` (docs/CLI.md "Usage"). The default.
    #[default]
    Cli,
    /// The Python package's keyword arguments: `all_versions=True`, `where=`, `set=`
    /// (docs/PYTHON.md).
    Python,
}

static CURRENT: AtomicU8 = AtomicU8::new(0);

/// Make every message from now on spell options the way `s` does. The Python module calls this
/// once when it is imported; the binaries keep the default, [`Spelling::Cli`].
pub fn set(s: Spelling) {
    CURRENT.store(s as u8, Ordering::Relaxed);
}

/// The spelling messages use now.
pub fn current() -> Spelling {
    match CURRENT.load(Ordering::Relaxed) {
        1 => Spelling::Python,
        _ => Spelling::Cli,
    }
}

/// The command line's name of the Python keyword `name`: `_` becomes `-`.
fn cli_name(name: &str) -> String {
    name.replace('_', "-")
}

/// An option that takes a value, named by its Python keyword (`where`, `retain`, `set`), as
/// the current front end writes it before the value: `--where` or `where=`.
pub fn opt(name: &str) -> String {
    match current() {
        Spelling::Cli => format!("--{}", cli_name(name)),
        Spelling::Python => format!("{name}="),
    }
}

/// A switch (an option with no value), named by its Python keyword (`force`, `all_versions`),
/// as the current front end turns it on: `--force` or `force=True`.
pub fn switch(name: &str) -> String {
    match current() {
        Spelling::Cli => format!("--{}", cli_name(name)),
        Spelling::Python => format!("{name}=True"),
    }
}

/// An option given `value`, as the current front end writes it: `--from-version 3` or
/// `from_version=3`.
pub fn with(name: &str, value: impl std::fmt::Display) -> String {
    match current() {
        Spelling::Cli => format!("--{} {value}", cli_name(name)),
        Spelling::Python => format!("{name}={value}"),
    }
}

/// An option given the text `value`, as the current front end writes it: `--retain 7 days` or
/// `retain="7 days"` (a Python string).
pub fn with_text(name: &str, value: &str) -> String {
    match current() {
        Spelling::Cli => format!("--{} {value}", cli_name(name)),
        Spelling::Python => format!("{name}={value:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_spelling_is_the_default_and_names_flags() {
        // The process-wide setting is never changed by the library's tests.
        assert_eq!(current(), Spelling::Cli);
        assert_eq!(opt("where"), "--where");
        assert_eq!(opt("set"), "--set");
        assert_eq!(switch("all_versions"), "--all-versions");
        assert_eq!(with("from_version", 3), "--from-version 3");
    }
}
