//! tinydelta's private checkpoints (`_tinydelta/checkpoints/`): the input is the checkpoint
//! file. When its first byte is odd, the header's body checksum is set to the body's (so the
//! fuzzer gets past it and reaches the header totals and the entries).
#![no_main]

#[path = "entries.rs"]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::checkpoint::run(data));
