//! Parquet data files, converted to canonical JSONL under a schema of every type, as `read` and
//! the mount do, through the same guard (`contained`); and the same bytes read as a Delta
//! Parquet checkpoint. With TINYDELTA_FUZZ_RAW set, without the guard, so that every panic of
//! the decoder shows.
#![no_main]

#[path = "entries.rs"]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::parquet::run(data));
