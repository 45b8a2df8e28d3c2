//! The time parser (`--as-of`, `at/` names) and the schema-spec parsers: `create`'s NAME:TYPE
//! specs and `metaData.schemaString`.
#![no_main]

#[path = "entries.rs"]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::time_spec::run(data));
