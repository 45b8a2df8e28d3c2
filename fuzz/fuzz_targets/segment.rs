//! The log segment over arbitrary file names: one name a line (its first byte chooses a
//! regular file, folder, symlink or FIFO), created in a real `_delta_log/`, listed and built.
#![no_main]

#[path = "entries.rs"]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::segment::run(data));
