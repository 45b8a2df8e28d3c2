//! Integration tests that use the `tinydelta` library directly, in this process, without running
//! the `tinydelta` or `tinydelta-mount` binaries and without FUSE: the reference model of
//! `incoming/` against the mount's inner layer; and the check that every section of the docs a
//! comment cites, and every link between the docs, exists.
//!
//! Run them all with `cargo test --release --test lib`, one area with its module path as the
//! filter, e.g. `cargo test --release --test lib incoming_model::`.
//!
//! These tests share one process. Limits are passed to the library as values (e.g.
//! `tinydelta::table::staging::Staging::open_with`), not set process-wide, so a test's limits do
//! not reach its neighbours.

#[path = "../support/mod.rs"]
mod support;

mod concurrent_appends;
mod doc_citations;
mod facade;
mod fuzz_regressions;
mod incoming_model;
