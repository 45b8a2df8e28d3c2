//! A table's `.crc` and `_last_checkpoint` files: the input up to its first NUL byte is the
//! `.crc` of version 1, the rest `_last_checkpoint`, in a real table of two versions that is
//! then opened, read and checked (`tinydelta check`).
#![no_main]

#[path = "entries.rs"]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::crc::run(data));
