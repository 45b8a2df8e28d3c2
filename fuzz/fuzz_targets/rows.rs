//! Row validation against a schema of every type: the first byte counts the schema bytes
//! after it (one column per byte), the next one where the input is cut between writes, the rest
//! are the rows. The streaming check (the mount's `incoming/`, `append`) must agree with the
//! one-shot `canonicalize`, its output must be canonical (the same again, and the fast path
//! `check_canonical_file` must say so with the same statistics).
#![no_main]

#[path = "entries.rs"]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::rows::run(data));
