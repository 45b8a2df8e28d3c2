//! Integration tests that drive the real `tinydelta` binary (`CARGO_BIN_EXE_tinydelta`) as a
//! separate process, without mounting anything: every command and message, the log's format,
//! integrity against damaged tables, racing and crashing writers (failpoints), export, and
//! interoperability with Delta readers (Python deltalake, DuckDB).
//!
//! Run them all with `cargo test --release --test cli`, one area with its module path as the
//! filter, e.g. `cargo test --release --test cli concurrency::` (the filter matches anywhere in
//! a test's path; `--list` shows what it selects).
//!
//! Needs Python with deltalake, pyarrow, duckdb and polars for `delta_compat`, `export` and
//! `export_types` (`scripts/test.sh` makes `.venv`).

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod concurrency;
mod crash;
mod delta_compat;
mod export;
mod export_types;
mod integrity;
mod rows;
mod serve;
mod table;
mod types;
