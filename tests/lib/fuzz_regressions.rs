//! Every input the fuzz targets keep as a regression (`fuzz/regressions/TARGET/*`: crash
//! reproducers, and inputs that reproduce bugs found otherwise) and every committed seed
//! (`fuzz/corpus/TARGET/*`) runs through the target's own entry point
//! (`fuzz/fuzz_targets/entries.rs`, shared with the fuzz targets), in the normal test suite,
//! without libFuzzer (docs/FUZZING.md "Regressions").

#[path = "../../fuzz/fuzz_targets/entries.rs"]
#[allow(clippy::all)]
mod entries;

use std::path::Path;

/// Run every file of `fuzz/regressions/TARGET/` and `fuzz/corpus/TARGET/` through `run`; the
/// number of files run.
fn replay(target: &str, run: fn(&[u8])) -> usize {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut n = 0;
    for kind in ["regressions", "corpus"] {
        let Ok(dir) = std::fs::read_dir(base.join(kind).join(target)) else {
            continue;
        };
        let mut files: Vec<_> = dir.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).unwrap();
            let caught = std::panic::catch_unwind(|| run(&data));
            assert!(caught.is_ok(), "{} fails its fuzz target's checks", f.display());
            n += 1;
        }
    }
    n
}

#[test]
fn commit() {
    assert!(replay("commit", entries::commit::run) > 0);
}

#[test]
fn segment() {
    assert!(replay("segment", entries::segment::run) > 0);
}

#[test]
fn rows() {
    assert!(replay("rows", entries::rows::run) > 0);
}

#[test]
fn time_and_schema_specs() {
    assert!(replay("time", entries::time_spec::run) > 0);
}

#[test]
fn parquet() {
    assert!(replay("parquet", entries::parquet::run) > 0);
}

#[test]
fn checkpoint() {
    assert!(replay("checkpoint", entries::checkpoint::run) > 0);
}

#[test]
fn crc_and_last_checkpoint() {
    assert!(replay("crc", entries::crc::run) > 0);
}
