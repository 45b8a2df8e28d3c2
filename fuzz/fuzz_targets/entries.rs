//! The fuzz targets' entry points, one function per target, shared by the targets
//! (fuzz_targets/NAME.rs) and by the regression tests of the normal test suite
//! (tests/lib/fuzz_regressions.rs), which run every committed reproducer through the same
//! function (docs/FUZZING.md). Scratch tables live in a private temporary folder (on /dev/shm
//! when there is one).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tinydelta::format::schema::Schema;
use tinydelta::table::Table;

/// A fresh private folder for this process.
pub fn scratch(name: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("tinydelta-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// A table at `dir/t` with every column type (nullable and NOT NULL) and `appends` appends of
/// two rows each.
pub fn table(dir: &Path, appends: usize) -> Table {
    let root = dir.join("t");
    let t = Table::create(&root, &all_types()).expect("create");
    for i in 0..appends {
        let rows = format!(
            "{{\"i\":{i},\"f\":1.5,\"s\":\"a\\nb\",\"b\":true,\"d\":\"2020-02-29\",\"t\":\"2020-01-01T00:00:00Z\"}}\n{{\"i\":-{i}}}\n"
        );
        t.append("rows", rows.as_bytes(), &tinydelta::table::WriteOptions::default())
            .expect("append");
    }
    t
}

/// A schema with each column type once, the first NOT NULL.
pub fn all_types() -> Schema {
    Schema::parse_cli(&[
        "i:int!".into(),
        "f:float".into(),
        "s:str".into(),
        "b:bool".into(),
        "d:date".into(),
        "t:timestamp".into(),
    ])
    .expect("schema")
}

/// A schema chosen by the bytes of `spec` (one column per byte: type and nullability), at
/// least one column.
pub fn schema_of(spec: &[u8]) -> Schema {
    const TYPES: [&str; 6] = ["int", "float", "str", "bool", "date", "timestamp"];
    let mut cols: Vec<String> = spec
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let ty = TYPES[usize::from(b % 6)];
            let bang = if b & 0x80 != 0 { "!" } else { "" };
            format!("c{i}:{ty}{bang}")
        })
        .collect();
    if cols.is_empty() {
        cols.push("c0:str".into());
    }
    Schema::parse_cli(&cols).expect("schema")
}

pub mod time_spec {
    #![allow(unused_imports)]
    use super::*;
    use tinydelta::format::schema::Schema;

    /// The time parser (`--as-of`, `at/` names) and the schema-spec parsers: `create`'s NAME:TYPE
    /// specs and `metaData.schemaString`.
    pub fn run(data: &[u8]) {
        let Ok(s) = std::str::from_utf8(data) else { return };
        if let Ok(ms) = tinydelta::util::time::parse(s, 1_700_000_000_000) {
            // Every time it accepts is shown again.
            let _ = tinydelta::util::time::shown_ms(ms);
        }
        let specs: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        if let Ok(schema) = Schema::parse_cli(&specs) {
            let again =
                Schema::from_schema_string(&schema.to_schema_string()).expect("its own schemaString reads back");
            assert_eq!(again, schema);
            let _ = schema.check_unique_names();
        }
        if let Ok(schema) = Schema::from_schema_string(s) {
            let again =
                Schema::from_schema_string(&schema.to_schema_string()).expect("its own schemaString reads back");
            assert_eq!(again, schema);
            let _ = schema.to_cli_string();
        }
    }
}

pub mod commit {
    #![allow(unused_imports)]
    use super::*;
    use std::path::Path;
    use tinydelta::log::files::parse_commit;
    use tinydelta::log::snapshot::Replay;

    /// The commit parser (one `_delta_log/NNN.json` as actions) and log replay of the commit.
    pub fn run(data: &[u8]) {
        let root = Path::new("/fuzz/t");
        let path = root.join("_delta_log/00000000000000000000.json");
        let Ok(commit) = parse_commit(0, &path, data, 0) else {
            return;
        };
        let mut replay = Replay::default();
        if replay.apply(root, &commit).is_ok() {
            let info = commit.info.clone().unwrap_or_default();
            if let Ok(snap) = replay.snapshot(root, 0, info) {
                let _ = (snap.num_records(), snap.size_bytes());
            }
        }
    }
}

pub mod segment {
    #![allow(unused_imports)]
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::OnceLock;
    use tinydelta::log::files::LogFile;
    use tinydelta::log::segment::{Listing, LogSegment};
    use tinydelta::sys::beneath::Dir;

    /// The log segment over arbitrary file names: one name a line (its first byte chooses a
    /// regular file, folder, symlink or FIFO), created in a real `_delta_log/`, listed and built.
    pub fn run(data: &[u8]) {
        static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
        let dir = DIR.get_or_init(|| super::scratch("segment"));
        let root = dir.join("t");
        let log = root.join("_delta_log");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&log).unwrap();
        for line in data.split(|b| *b == b'\n').take(64) {
            let Some((&kind, name)) = line.split_first() else {
                continue;
            };
            let Ok(name) = std::str::from_utf8(name) else { continue };
            let _ = LogFile::parse(name);
            if name.is_empty() || name.len() > 255 || name.contains(['/', '\0']) || name == "." || name == ".." {
                continue;
            }
            let p = log.join(name);
            let _ = match kind % 4 {
                // Never opens a name already there (a FIFO would block the open).
                0 => std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&p)
                    .map(drop),
                1 => std::fs::create_dir(&p),
                2 => std::os::unix::fs::symlink("elsewhere", &p),
                _ => rustix::fs::mknodat(
                    rustix::fs::CWD,
                    &p,
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o600),
                    0,
                )
                .map_err(std::io::Error::from),
            };
        }
        let log_dir = Dir::open(&log).unwrap();
        let listing = Listing::read(&log_dir).expect("a listing of a readable folder");
        if let Ok(seg) = LogSegment::new(&root, &listing, || Ok(BTreeSet::new())) {
            assert!(seg.first <= seg.end.max(seg.first));
            for v in [
                0,
                seg.first,
                seg.end,
                seg.end.saturating_add(1),
                seg.newest_present,
                u64::MAX,
            ] {
                let _ = seg.check(v);
            }
        }
    }
}

pub mod rows {
    #![allow(unused_imports)]
    use super::*;
    use std::path::Path;
    use tinydelta::format::rows::{LineCheck, Written, canonicalize, check_canonical_while};

    /// Row validation against a schema of every type: the first byte counts the schema bytes
    /// after it (one column per byte), the next one where the input is cut between writes, the rest
    /// are the rows. The streaming check (the mount's `incoming/`, `append`) must agree with the
    /// one-shot `canonicalize`, its output must be canonical (the same again, and the fast path
    /// `check_canonical_while` must say so with the same statistics).
    pub fn run(data: &[u8]) {
        let Some((&n, rest)) = data.split_first() else { return };
        let n = usize::from(n % 8).min(rest.len());
        let (spec, rest) = rest.split_at(n);
        let Some((&cut, input)) = rest.split_first() else {
            return;
        };
        let schema = super::schema_of(spec);
        let out_path = Path::new("out");
        let mut once = Vec::new();
        let one = canonicalize(&schema, "in", input, &mut once, out_path);
        let mut check = LineCheck::new(schema.clone());
        let mut streamed = Vec::new();
        let cut = usize::from(cut).min(input.len());
        let two = check
            .feed("in", &input[..cut], &mut streamed)
            .and_then(|()| check.feed("in", &input[cut..], &mut streamed))
            .and_then(|()| check.finish("in", &mut streamed));
        match (&one, &two) {
            (Ok(a), Ok(b)) => {
                assert_eq!(once, streamed, "streamed rows differ");
                assert_eq!(a.to_stats_json(&schema), b.to_stats_json(&schema));
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            _ => panic!("one-shot {one:?}, streamed {two:?}"),
        }
        let Ok(st) = one else { return };
        let mut again = Vec::new();
        let st2 = canonicalize(&schema, "out", &once[..], &mut again, out_path).expect("canonical rows are valid");
        assert_eq!(again, once, "canonical rows are their own canonical form");
        assert_eq!(st.to_stats_json(&schema), st2.to_stats_json(&schema));
        let mut f = tempfile_in_memory();
        std::io::Write::write_all(&mut f, &once).unwrap();
        // As `append --file` checks its copy of the input (the fast path).
        let written = Written::default();
        written.finish(once.len() as u64);
        let fast = check_canonical_while(&schema, &f, out_path, &written, || {}).expect("read");
        let fast = fast.expect("canonical rows take the fast path");
        assert_eq!(fast.to_stats_json(&schema), st.to_stats_json(&schema));
        assert_eq!((fast.num_records, fast.bytes), (st.num_records, st.bytes));
    }
    /// An anonymous file in memory.
    fn tempfile_in_memory() -> std::fs::File {
        let fd = rustix::fs::memfd_create("rows", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
        std::fs::File::from(fd)
    }
}

pub mod parquet {
    #![allow(unused_imports)]
    use super::*;
    use std::collections::BTreeMap;
    use std::io::Write;
    use std::sync::OnceLock;
    use tinydelta::format::parquet::{contained, read_checkpoint, write_jsonl};

    /// Parquet data files, converted to canonical JSONL under a schema of every type, as `read` and
    /// the mount do, through the same guard (`contained`); and the same bytes read as a Delta
    /// Parquet checkpoint. With TINYDELTA_FUZZ_RAW set, without the guard, so that every panic of
    /// the decoder shows.
    pub fn run(data: &[u8]) {
        static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
        let dir = DIR.get_or_init(|| super::scratch("parquet"));
        let raw = std::env::var_os("TINYDELTA_FUZZ_RAW").is_some();
        let path = dir.join("part-0.parquet");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(data).unwrap();
        drop(f);
        let schema = super::all_types();
        let partition = BTreeMap::new();
        let mut out = std::io::sink();
        let file = std::fs::File::open(&path).unwrap();
        let convert = || write_jsonl(file, &path, &schema, &partition, None, &mut out);
        let _ = if raw { convert() } else { contained(&path, convert) };
        let file = std::fs::File::open(&path).unwrap();
        let actions = || read_checkpoint(file, &path);
        let _ = if raw { actions() } else { contained(&path, actions) };
    }
}

pub mod checkpoint {
    #![allow(unused_imports)]
    use super::*;
    use std::sync::OnceLock;
    use tinydelta::log::checkpoint;
    use tinydelta::sys::beneath::Dir;
    fn fnv1a64(bytes: &[u8]) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    /// `data` with its header's `bodyFnv1a64` made right, when the header is a JSON object.
    fn with_checksum(data: &[u8]) -> Option<Vec<u8>> {
        let nl = data.iter().position(|b| *b == b'\n')?;
        let mut header: serde_json::Value = serde_json::from_slice(&data[..nl]).ok()?;
        let body = &data[nl + 1..];
        header
            .as_object_mut()?
            .insert("bodyFnv1a64".into(), fnv1a64(body).into());
        let mut out = serde_json::to_vec(&header).ok()?;
        out.push(b'\n');
        out.extend_from_slice(body);
        Some(out)
    }
    /// tinydelta's private checkpoints (`_tinydelta/checkpoints/`): the input is the checkpoint
    /// file. When its first byte is odd, the header's body checksum is set to the body's (so the
    /// fuzzer gets past it and reaches the header totals and the entries).
    pub fn run(data: &[u8]) {
        static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
        let dir = DIR.get_or_init(|| {
            let d = super::scratch("checkpoint");
            std::fs::create_dir_all(d.join("t/_tinydelta/checkpoints")).unwrap();
            d
        });
        let Some((&mode, rest)) = data.split_first() else {
            return;
        };
        let bytes = match mode & 1 {
            1 => with_checksum(rest).unwrap_or_else(|| rest.to_vec()),
            _ => rest.to_vec(),
        };
        let root = dir.join("t");
        std::fs::write(
            root.join("_tinydelta/checkpoints").join(checkpoint::file_name(7)),
            &bytes,
        )
        .unwrap();
        let root = Dir::open(&root).unwrap();
        if let Ok(snap) = checkpoint::read(&root, 7) {
            let _ = (snap.num_records(), snap.size_bytes());
        }
        let _ = checkpoint::read_totals(&root, 7);
    }
}

pub mod crc {
    #![allow(unused_imports)]
    use super::*;
    use std::sync::OnceLock;
    use tinydelta::ops::check::{CheckOptions, check};
    use tinydelta::table::Table;

    /// A table's `.crc` and `_last_checkpoint` files: the input up to its first NUL byte is the
    /// `.crc` of version 1, the rest `_last_checkpoint`, in a real table of two versions that is
    /// then opened, read and checked (`tinydelta check`).
    pub fn run(data: &[u8]) {
        static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
        let dir = DIR.get_or_init(|| {
            let d = super::scratch("crc");
            super::table(&d, 1);
            d
        });
        let log = dir.join("t/_delta_log");
        let (crc, last) = match data.iter().position(|b| *b == 0) {
            Some(i) => (&data[..i], &data[i + 1..]),
            None => (data, &b""[..]),
        };
        std::fs::write(log.join("00000000000000000001.crc"), crc).unwrap();
        std::fs::write(log.join("_last_checkpoint"), last).unwrap();
        let log_dir = tinydelta::sys::beneath::Dir::open(&log).unwrap();
        let _ = tinydelta::log::crc::read(&log_dir, 1);
        let t = Table::open(dir.join("t")).expect("the table opens");
        let snap = t.latest_snapshot().expect("a .crc never stops a read");
        assert_eq!(snap.num_records(), 2);
        let _ = check(&t, &CheckOptions::default());
    }
}
