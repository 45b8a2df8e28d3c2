//! Integration tests that use the `tinydelta` library directly, in this process, without running
//! the `tinydelta` or `tinydelta-mount` binaries and without FUSE: the reference model of
//! `incoming/` against the mount's inner layer.
//!
//! Run them all with `cargo test --release --test lib`, one area with its module path as the
//! filter, e.g. `cargo test --release --test lib incoming_model::`.
//!
//! These tests share one process: a test that changes process-wide library settings (e.g.
//! `tinydelta::table::staging::set_max_open_staged`) changes them for its neighbours too.

#[path = "../support/mod.rs"]
mod support;

mod incoming_model;
