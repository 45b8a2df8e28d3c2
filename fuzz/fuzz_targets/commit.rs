//! The commit parser (one `_delta_log/NNN.json` as actions) and log replay of the commit.
#![no_main]

#[path = "entries.rs"]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::commit::run(data));
