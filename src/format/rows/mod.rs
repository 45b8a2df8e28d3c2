//! Input validation and canonical rows (docs/CLI.md "Input rules", docs/FORMAT.md "Data files").
//!
//! [`canonicalize`] streams JSONL from a reader to a writer one line at a time, so memory is
//! bounded by the longest line, never by the file. Each accepted line is rewritten as one compact
//! JSON object with every schema column present, in schema order, ending in `\n`. It also gathers
//! the per-file statistics Delta keeps in `add.stats` (PROTOCOL "Per-file Statistics").

use std::borrow::Cow;
use std::fmt;
use std::io::{BufRead, BufReader, Write};

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::{Error, IoContext, Result};
use crate::format::schema::{ColumnType, Schema};

mod stats;
mod canonical;
mod line;
mod scan;
mod scalar;
mod stream;
mod parallel;
mod typed;
mod infer;

pub use self::stats::*;
use self::canonical::*;
pub use self::line::*;
use self::scan::*;
use self::scalar::*;
use self::typed::*;
pub(crate) use self::typed::{check_value, decimal, decimal_text, decode_str, timestamp_ntz_us};
pub(crate) use self::scalar::timestamp_us;
pub(crate) use self::canonical::Fields;
pub use self::infer::{Inferred, infer_columns, infer_schema};
pub use self::stream::*;
pub use self::parallel::*;

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::parse_cli(&[
            "id:int!".into(),
            "x:float".into(),
            "s:str".into(),
            "b:bool".into(),
            "d:date".into(),
            "t:timestamp".into(),
        ])
        .unwrap()
    }

    fn run(input: &[u8]) -> Result<(String, FileStats)> {
        let mut out = Vec::new();
        let st = canonicalize(&schema(), "in.jsonl", input, &mut out, std::path::Path::new("out"))?;
        Ok((String::from_utf8(out).unwrap(), st))
    }

    fn err(input: &str) -> (u64, String, String) {
        match run(input.as_bytes()) {
            Err(Error::BadInput {
                line, column, reason, ..
            }) => (line, column, reason),
            other => panic!("expected BadInput for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn normalises() {
        let (out, st) = run(b"\xEF\xBB\xBF{ \"s\" : \"a\\u0062\", \"id\": 1, \"x\": 18 }\r\n\n  \n{\"id\":2,\"x\":1.50,\"t\":\"2013-01-01T10:00:00+01:00\",\"d\":\"2020-02-29\",\"b\":true}").unwrap();
        assert_eq!(
            out,
            "{\"id\":1,\"x\":18.0,\"s\":\"ab\",\"b\":null,\"d\":null,\"t\":null}\n{\"id\":2,\"x\":1.5,\"s\":null,\"b\":true,\"d\":\"2020-02-29\",\"t\":\"2013-01-01T10:00:00+01:00\"}\n"
        );
        assert_eq!(st.num_records, 2);
        assert_eq!(st.bytes, out.len() as u64);
        let stats: serde_json::Value = serde_json::from_str(&st.to_stats_json(&schema())).unwrap();
        assert_eq!(stats["numRecords"], 2);
        assert_eq!(stats["minValues"]["id"], 1);
        assert_eq!(stats["maxValues"]["x"], 18.0);
        assert_eq!(stats["nullCount"]["s"], 1);
        assert_eq!(stats["minValues"]["t"], "2013-01-01T09:00:00.000000Z");
    }

    /// Canonical rows take the one-pass check; its bytes and statistics must be exactly those
    /// of the general path, and anything it does not take must still be canonicalised or
    /// refused by the general path, with the same errors.
    #[test]
    fn canonical_rows_match_the_general_path() {
        let input = "{\"id\":1,\"x\":18,\"s\":\"a\\u0062\"}\n{ \"id\": -0 }\n\
            {\"t\":\"2013-01-01T10:00:00+01:00\",\"id\":3,\"x\":-0.0,\"d\":\"2020-02-29\",\"b\":false}\n\
            {\"id\":-9223372036854775808,\"x\":1e300,\"s\":\"ü€ \\\"q\\\" long string over thirty-two characters\"}\n\
            {\"id\":9223372036854775807,\"x\":0.1,\"s\":\"\",\"b\":true,\"t\":\"2013-01-01T10:00:00Z\"}\n";
        let (once, st1) = run(input.as_bytes()).unwrap();
        let (twice, st2) = run(once.as_bytes()).unwrap();
        assert_eq!(once, twice);
        assert_eq!(st1.to_stats_json(&schema()), st2.to_stats_json(&schema()));
        assert_eq!((st1.num_records, st1.bytes), (st2.num_records, st2.bytes));
        // Every canonical line of the second run took the one-pass check, escapes and all.
        let s = schema();
        let mut c = Canonicalizer::new(&s);
        let plain: Vec<&str> = once.lines().collect();
        assert_eq!(plain.len(), 5);
        for l in &plain {
            assert!(c.canonical(l.as_bytes()), "{l}");
        }
        // Near misses fall through (and are then canonicalised or refused as before).
        for l in [
            "{\"id\":-0,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":1.50,\"s\":null,\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":18,\"s\":null,\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":01,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1.0,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":9223372036854775808,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":null,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":\"a\\u000ab\",\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":\"a\\/b\",\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":\"\\u0041\",\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":\"\\u001F\",\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":\"\\u0008\",\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":\"\\ud83d\\ude00\",\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":\"a\\\",\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":\"a\tb\",\"b\":null,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":null,\"b\":null,\"d\":\"2020\\u002d02-29\",\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":null,\"b\":null,\"d\":\"2021-02-29\",\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":\"noon\"}",
            "{\"id\":1,\"x\":null,\"s\":null,\"b\":null,\"d\":\"0000-01-01\",\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":\"0000-06-01T00:00:00Z\"}",
            "{\"id\":1,\"x\":null,\"s\":null,\"b\":1,\"d\":null,\"t\":null}",
            "{\"id\":1,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null} ",
            "{\"id\":1,\"x\":null,\"s\":null,\"b\":null,\"d\":null}",
            "{\"id\":1,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null,\"z\":1}",
        ] {
            assert!(!c.canonical(l.as_bytes()), "{l}");
        }
        assert_eq!(c.stats.num_records, plain.len() as u64);
    }

    /// Rows holding string escapes, each as serde_json writes it, are canonical for
    /// `check_canonical_file` (the fast path), with the general path's statistics; any other
    /// spelling of the same values is not, and is canonicalised to the first.
    #[test]
    fn check_canonical_file_takes_string_escapes() {
        let s = Schema::parse_cli(&["id:int!".into(), "s:str".into()]).unwrap();
        let check = |bytes: &[u8]| {
            let mut f = tempfile::tempfile().unwrap();
            std::io::Write::write_all(&mut f, bytes).unwrap();
            check_canonical_file(&s, &f, bytes.len() as u64, std::path::Path::new("f")).unwrap()
        };
        let general = |bytes: &[u8]| {
            let mut out = Vec::new();
            let st = canonicalize(&s, "in", bytes, &mut out, std::path::Path::new("out")).unwrap();
            (out, st)
        };
        let canonical = "{\"id\":1,\"s\":\"\\u0000\"}\n{\"id\":2,\"s\":\"a\\nb\"}\n{\"id\":3,\"s\":\"\\\"q\\\" \\\\ \\b\\f\\r\\t\\u001f\u{7f}é/\"}\n\
            {\"id\":4,\"s\":\"\\u0000 a long value past the thirty-two bytes kept as statistics\"}\n";
        let (out, want) = general(canonical.as_bytes());
        assert_eq!(out, canonical.as_bytes(), "the rows are their own canonical form");
        let got = check(canonical.as_bytes()).expect("canonical rows with escapes take the fast path");
        assert_eq!(got.to_stats_json(&s), want.to_stats_json(&s));
        assert_eq!((got.num_records, got.bytes), (want.num_records, want.bytes));
        let stats: serde_json::Value = serde_json::from_str(&got.to_stats_json(&s)).unwrap();
        assert_eq!(stats["minValues"]["s"], "\u{0}");
        // Other spellings of the same values are not canonical: the general path rewrites them.
        for other in [
            "{\"id\":1,\"s\":\"\\u0041\"}\n",
            "{\"id\":1,\"s\":\"\\u000a\"}\n",
            "{\"id\":1,\"s\":\"\\u001F\"}\n",
            "{\"id\":1,\"s\":\"\\/\"}\n",
            "{\"id\":1,\"s\":\"\\u00e9\"}\n",
        ] {
            assert!(check(other.as_bytes()).is_none(), "{other}");
            let (out, _) = general(other.as_bytes());
            assert!(check(&out).is_some(), "{other} canonicalised is canonical");
        }
    }

    /// A large write is checked in pieces on several threads: the rows, statistics and the
    /// first bad line's number are those of one pass.
    #[test]
    fn line_check_of_large_writes_matches_one_pass() {
        let mut input = String::new();
        for i in 0..40_000 {
            input.push_str(&format!("{{\"id\":{i},\"s\":\"row {}\",\"x\":{i}.5}}\n", i % 97));
        }
        assert!(input.len() > 4 * LINE_CHECK_PIECE);
        assert!(split_lines(input.as_bytes(), LINE_CHECK_PIECE).len() > 1 || num_cpus_is_one());
        let (want, want_st) = run(input.as_bytes()).unwrap();
        let feed = |data: &str| {
            let mut c = LineCheck::new(schema());
            let mut out = Vec::new();
            // Two writes, the first ending inside a line.
            let cut = data.len() / 3 + 7;
            c.feed("in.jsonl", &data.as_bytes()[..cut], &mut out)?;
            c.feed("in.jsonl", &data.as_bytes()[cut..], &mut out)?;
            let st = c.finish("in.jsonl", &mut out)?;
            Ok::<_, Error>((out, st))
        };
        let (got, st) = feed(&input).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want);
        assert_eq!(st.to_stats_json(&schema()), want_st.to_stats_json(&schema()));
        assert_eq!((st.num_records, st.bytes), (want_st.num_records, want_st.bytes));
        // Bad lines late in the input: the first one is named.
        let mut bad: Vec<&str> = input.lines().collect();
        bad[31_000] = "{\"id\":\"x\"}";
        bad[35_000] = "{\"id\":1.5}";
        let bad = bad.join("\n");
        match feed(&bad) {
            Err(Error::BadInput { line, column, .. }) => assert_eq!((line, column.as_str()), (31_001, "\"id\"")),
            other => panic!("{other:?}"),
        }
    }

    /// A bad line that is the last line of one piece of a large write or the first of the next
    /// is named by its line in the input, whichever thread checks its piece.
    #[test]
    fn a_bad_line_at_a_piece_boundary_is_named() {
        let input: String = (0..30_000)
            .map(|i| format!("{{\"id\":{i},\"s\":\"row {}\",\"x\":{i}.5}}\n", i % 97))
            .collect();
        // One write of the mount (1 MiB), its complete lines cut into pieces as LineCheck cuts them.
        let data = &input.as_bytes()[..1 << 20];
        let nl = memchr::memrchr(b'\n', data).unwrap();
        let pieces = split_lines(&data[..=nl], LINE_CHECK_PIECE);
        assert!(pieces.len() > 1 || num_cpus_is_one());
        let mut starts = Vec::new();
        let mut at = 0;
        for p in &pieces {
            starts.push(at);
            at += p.len();
        }
        let lines: Vec<&str> = input.lines().collect();
        for &s in starts.iter().skip(1) {
            let first = count_lines(&data[..s]) as usize;
            for k in [first - 1, first] {
                // The same length (`"id":1234` -> `"id":"12"`), so the pieces stay where they are.
                let id = format!("{k}");
                let mut bad = lines.clone();
                let line = bad[k].replacen(&format!("\"id\":{id},"), &format!("\"id\":\"{}\",", &id[..id.len() - 2]), 1);
                assert_eq!(line.len(), bad[k].len());
                bad[k] = &line;
                let bad = bad.join("\n");
                let b = &bad.as_bytes()[..1 << 20];
                assert_eq!(split_lines(&b[..=nl], LINE_CHECK_PIECE).len(), pieces.len());
                let mut c = LineCheck::new(schema());
                match c.feed("in.jsonl", b, &mut Vec::new()) {
                    Err(Error::BadInput { line, column, reason, .. }) => {
                        assert_eq!((line, column.as_str()), (k as u64 + 1, "\"id\""), "{reason}")
                    }
                    other => panic!("line {}: {other:?}", k + 1),
                }
            }
        }
    }

    /// [`LineCheck::feed_kept`]: while every row is its own canonical form nothing is written;
    /// from the first row that is not, the input's prefix plus the rows written are exactly
    /// what one pass makes, wherever the writes are cut (large writes checked in pieces too).
    #[test]
    fn kept_rows_are_the_rows_of_one_pass() {
        let row = |i: u32| format!("{{\"id\":{i},\"x\":1.5,\"s\":\"a\",\"b\":true,\"d\":null,\"t\":null}}\n");
        let canonical: String = (0..20_000).map(row).collect();
        assert!(canonical.len() > 2 * LINE_CHECK_PIECE);
        let mut inputs = vec![canonical.clone(), canonical.trim_end().to_string()];
        for at in [0, 7, canonical.len() / 2, canonical.len() - 5] {
            let at = canonical[at..].find('{').map_or(canonical.len(), |p| at + p);
            for damage in ["{\"id\":-0}\n", "\n", "{ \"id\": 3 }\r\n"] {
                let mut s = canonical.clone();
                s.insert_str(at, damage);
                inputs.push(s);
            }
        }
        for input in &inputs {
            let (want, want_st) = run(input.as_bytes()).unwrap();
            for cuts in [
                vec![],
                vec![1],
                vec![333, 300_000],
                vec![input.len() / 2 - 1, input.len() / 2 + 600_000],
            ] {
                let mut c = LineCheck::new(schema());
                let mut got = Vec::new();
                let mut same = true;
                let mut from = 0;
                let apply = |kept: Kept, rows: &[u8], got: &mut Vec<u8>, same: &mut bool| match kept {
                    Kept::Same => assert!(*same && rows.is_empty(), "rows written while same"),
                    Kept::Rows { prefix } => {
                        assert!(prefix == 0 || *same, "a prefix only the first time");
                        if *same {
                            got.extend_from_slice(&input.as_bytes()[..prefix as usize]);
                        }
                        *same = false;
                        got.extend_from_slice(rows);
                    }
                };
                for &cut in cuts.iter().chain([&input.len()]) {
                    let cut = cut.min(input.len());
                    let mut rows = Vec::new();
                    let kept = c
                        .feed_kept("in.jsonl", &input.as_bytes()[from..cut], &mut rows)
                        .unwrap();
                    apply(kept, &rows, &mut got, &mut same);
                    from = cut;
                }
                let mut rows = Vec::new();
                let (st, kept) = c.finish_kept("in.jsonl", &mut rows).unwrap();
                apply(kept, &rows, &mut got, &mut same);
                if same {
                    got = input.as_bytes()[..st.bytes as usize].to_vec();
                    assert_eq!(st.bytes as usize, input.len(), "same means the whole input");
                }
                assert_eq!(String::from_utf8(got).unwrap(), want, "cuts {cuts:?}");
                assert_eq!((st.num_records, st.bytes), (want_st.num_records, want_st.bytes));
                assert_eq!(st.to_stats_json(&schema()), want_st.to_stats_json(&schema()));
            }
        }
    }

    /// A row in canonical form but for invalid UTF-8 inside a string value is refused as
    /// invalid UTF-8 (the one-pass check proves UTF-8 only value by value), and a non-ASCII
    /// value that is valid takes the one-pass check with its statistics.
    #[test]
    fn canonical_rows_are_checked_as_utf8() {
        let line = |s: &[u8]| {
            [
                &b"{\"id\":1,\"x\":null,\"s\":\""[..],
                s,
                b"\",\"b\":null,\"d\":null,\"t\":null}\n",
            ]
            .concat()
        };
        // The value starts at column 23.
        for (bad, col) in [(&b"\xff"[..], "23"), (b"a\xC3", "24"), (b"\xED\xA0\x80", "23")] {
            match run(&line(bad)) {
                Err(Error::BadInput {
                    line, column, reason, ..
                }) => {
                    assert_eq!(
                        (line, column.as_str(), reason.as_str()),
                        (1, col, "invalid UTF-8"),
                        "{bad:?}"
                    )
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let good = line("ü€".as_bytes());
        let s = schema();
        let mut c = Canonicalizer::new(&s);
        assert!(c.canonical(&good[..good.len() - 1]));
        let (out, st) = run(&good).unwrap();
        assert_eq!(out.as_bytes(), &good[..]);
        let stats: serde_json::Value = serde_json::from_str(&st.to_stats_json(&s)).unwrap();
        assert_eq!(stats["minValues"]["s"], "ü€");
    }

    #[test]
    fn short_cmp_is_byte_order() {
        let words: [&[u8]; 12] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgi",
            b"b",
            b"\xC3\xBC",
            b"\x7F",
            b"zzzzzzzzz",
        ];
        for a in words {
            for b in words {
                assert_eq!(short_cmp(a, b), a.cmp(b), "{a:?} {b:?}");
            }
        }
    }

    fn num_cpus_is_one() -> bool {
        std::thread::available_parallelism().map_or(1, |n| n.get()) == 1
    }

    /// A chunk that is its own canonical form is written as it is; one canonical line short of
    /// that (a CR, a blank line, no final newline, a BOM) makes the chunk's rows as before.
    #[test]
    fn canonical_chunks_are_written_as_they_are() {
        let row = |i: u32| format!("{{\"id\":{i},\"x\":1.5,\"s\":\"a\",\"b\":true,\"d\":null,\"t\":null}}\n");
        let canonical: String = (0..40_000).map(row).collect();
        assert!(canonical.len() > 2 * CHUNK_BYTES, "several chunks, on worker threads");
        let (out, st) = run(canonical.as_bytes()).unwrap();
        assert_eq!(out, canonical);
        assert_eq!((st.num_records, st.bytes), (40_000, canonical.len() as u64));
        for (i, damage) in [
            canonical.replacen("}\n", "}\r\n", 1),
            canonical.replacen("}\n", "}\n\n", 3),
            canonical.trim_end().to_string(),
            format!("\u{feff}{canonical}"),
        ]
        .iter()
        .enumerate()
        {
            let (out, st) = run(damage.as_bytes()).unwrap();
            assert_eq!(out, canonical, "case {i}");
            assert_eq!((st.num_records, st.bytes), (40_000, canonical.len() as u64), "case {i}");
        }
    }

    #[test]
    fn rejections_name_line_and_column() {
        let ok = "{\"id\":1}\n";
        let cases: &[(&str, &str, &str)] = &[
            ("{\"id\":1,}", "9", "invalid JSON"),
            ("[1]", "1", "not a JSON object"),
            ("{\"id\":1,\"zz\":1}", "zz", "unknown column"),
            ("{\"id\":1,\"id\":2}", "id", "duplicate key"),
            ("{\"id\":\"1\"}", "id", "expected int, found string"),
            ("{\"id\":1.5}", "id", "fraction or exponent"),
            ("{\"id\":1e3}", "id", "fraction or exponent"),
            ("{\"id\":9223372036854775808}", "id", "outside the 64-bit integer range"),
            ("{\"id\":1,\"x\":NaN}", "13", "invalid JSON"),
            ("{\"id\":null}", "id", "null value for a NOT NULL column"),
            ("{\"x\":1.0}", "id", "missing value for a NOT NULL column"),
            ("{\"id\":1,\"d\":\"2021-02-29\"}", "d", "not a date"),
            ("{\"id\":1,\"d\":\"2021-2-1\"}", "d", "not a date"),
            ("{\"id\":1,\"d\":\"+020-01-01\"}", "d", "not a date"),
            ("{\"id\":1,\"d\":\"2020-01- 1\"}", "d", "not a date"),
            ("{\"id\":1,\"d\":\"2020- 1-01\"}", "d", "not a date"),
            ("{\"id\":1,\"t\":\"yesterday\"}", "t", "not an RFC 3339 timestamp"),
            (
                "{\"id\":1,\"s\":\"\\ud800\"}",
                "s",
                "invalid JSON string escape: a lone surrogate \\ud800",
            ),
            (
                "{\"id\":1,\"s\":\"x\\\\ud800\\ud800\\udc00\\ud800x\"}",
                "s",
                "a lone surrogate \\ud800",
            ),
            (
                "{\"id\":1,\"s\\udc01\":1}",
                "11",
                "invalid JSON string escape: a lone surrogate \\udc01",
            ),
            (
                "{\"id\":1,\"d\":\"0000-01-01\"}",
                "d",
                "not a date (YYYY-MM-DD, years 0001-9999",
            ),
            (
                "{\"id\":1,\"t\":\"0000-12-31T00:00:00Z\"}",
                "t",
                "outside the years 0001-9999",
            ),
            (
                "{\"id\":1,\"t\":\"0001-01-01T00:30:00+01:00\"}",
                "t",
                "outside the years 0001-9999",
            ),
            (
                "{\"id\":1,\"t\":\"9999-12-31T23:30:00-01:00\"}",
                "t",
                "outside the years 0001-9999",
            ),
            ("{\"id\":1,\"b\":1}", "b", "expected bool, found number"),
            ("{\"id\":1,\"x\":1e999}", "x", ""),
        ];
        for (line, col, why) in cases {
            let (l, c, r) = err(&format!("{ok}{ok}{line}\n{ok}"));
            assert_eq!(l, 3, "{line}");
            if col.chars().all(|c| c.is_ascii_digit()) {
                assert_eq!(c, *col, "{line}: {r}");
            } else {
                assert_eq!(c, format!("\"{col}\""), "{line}: {r}");
            }
            assert!(r.contains(why), "{line}: {r}");
        }
        let Err(Error::BadInput {
            line: l,
            column: c,
            reason: r,
            ..
        }) = run(b"{\"id\":1}\n{\"id\":1,\"s\":\"\xff\"}")
        else {
            panic!("invalid UTF-8 accepted")
        };
        assert_eq!((l, c.as_str(), r.as_str()), (2, "14", "invalid UTF-8"));
    }

    #[test]
    fn empty_input_writes_nothing() {
        let (out, st) = run(b"\n\r\n").unwrap();
        assert_eq!(out, "");
        assert_eq!(st.num_records, 0);
    }

    /// [`check_canonical_file`] of `input` against [`canonicalize`] of the same bytes: when the
    /// check says the rows are canonical, canonicalize must write them back unchanged with the
    /// same statistics; when canonicalize writes them back unchanged, the check must say so.
    /// Returns whether the check took the rows.
    fn check_agrees(input: &[u8]) -> bool {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(input).unwrap();
        let s = schema();
        let checked = check_canonical_file(&s, &f, input.len() as u64, std::path::Path::new("copy")).unwrap();
        let general = run(input);
        match (&checked, &general) {
            (Some(st), Ok((out, st2))) => {
                assert!(
                    out.as_bytes() == input,
                    "checked as canonical, but canonicalize rewrites it"
                );
                assert_eq!(st.to_stats_json(&s), st2.to_stats_json(&s));
                assert_eq!((st.num_records, st.bytes), (st2.num_records, st2.bytes));
            }
            (Some(_), Err(e)) => panic!("checked as canonical, but canonicalize refuses it: {e}"),
            (None, Ok((out, _))) => {
                assert!(out.as_bytes() != input, "canonical rows the check did not take")
            }
            (None, Err(_)) => {}
        }
        checked.is_some()
    }

    /// [`check_canonical_while`] checks a file while another thread writes it, in steps that
    /// cut lines and segments anywhere: the same result as the check of the finished file, and
    /// a writer that stops (or never says how it ended) never leaves a reader waiting.
    #[test]
    fn the_copy_check_keeps_up_with_the_writer() {
        use std::os::unix::fs::FileExt;
        let s = schema();
        let base = canonical_rows(30_000);
        for (input, canonical) in [
            (base.clone(), true),
            (base[..base.len() - 1].to_vec(), false),
            (
                [&base[..base.len() / 2], b"\n", &base[base.len() / 2..]].concat(),
                false,
            ),
        ] {
            for step in [4099usize, 65_537, 1 << 20, 3 << 20] {
                let f = tempfile::tempfile().unwrap();
                let written = Written::default();
                let got = check_canonical_while(&s, &f, std::path::Path::new("copy"), &written, || {
                    for (i, piece) in input.chunks(step).enumerate() {
                        f.write_all_at(piece, (i * step) as u64).unwrap();
                        written.advance(((i * step) + piece.len()) as u64);
                        // A slow writer: the checking thread catches up and waits in the
                        // middle of a line.
                        std::thread::sleep(std::time::Duration::from_micros(300));
                    }
                    written.finish(input.len() as u64);
                })
                .unwrap();
                let whole = check_canonical_file(&s, &f, input.len() as u64, std::path::Path::new("copy")).unwrap();
                assert_eq!(got.is_some(), canonical, "step {step}");
                assert_eq!(
                    got.map(|st| (st.to_stats_json(&s), st.num_records, st.bytes)),
                    whole.map(|st| (st.to_stats_json(&s), st.num_records, st.bytes)),
                    "step {step}"
                );
            }
        }
        // A reader that reaches the written end in the middle of the line that crosses its
        // segment's end waits for the rest of the line (the writer finishes while it waits).
        let f = tempfile::tempfile().unwrap();
        f.write_all_at(&base, 0).unwrap();
        let mut at = SEGMENT_BYTES as usize + 5;
        while base[at - 1] == b'\n' || base[at] == b'\n' {
            at += 1;
        }
        let starts = 1 + memchr::memchr_iter(b'\n', &base[..SEGMENT_BYTES as usize - 1]).count() as u64;
        let written = Written::default();
        written.advance(at as u64);
        std::thread::scope(|sc| {
            let reader = sc.spawn(|| {
                let mut c = Canonicalizer::new(&s);
                let ok = check_segment(&mut c, &f, &written, 0..SEGMENT_BYTES, &mut Vec::new()).unwrap();
                (ok, c.stats.num_records)
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            written.finish(base.len() as u64);
            assert_eq!(reader.join().unwrap(), (true, starts));
        });
        // A writer that stops half-way, or returns without a word.
        let f = tempfile::tempfile().unwrap();
        f.write_all_at(&base[..base.len() / 2], 0).unwrap();
        let written = Written::default();
        let got = check_canonical_while(&s, &f, std::path::Path::new("copy"), &written, || {
            written.advance(base.len() as u64 / 2);
            written.stop();
        });
        assert!(matches!(got, Ok(None)));
        let written = Written::default();
        let got = check_canonical_while(&s, &f, std::path::Path::new("copy"), &written, || {
            written.advance(base.len() as u64 / 2)
        });
        assert!(matches!(got, Ok(None)));
    }

    /// Canonical rows of the test schema, `n` of them, each different (ints, floats, strings
    /// long and short and non-ASCII, nulls, dates, timestamps).
    fn canonical_rows(n: usize) -> Vec<u8> {
        let mut input = Vec::new();
        for i in 0..n {
            let x = if i % 7 == 0 {
                "null".to_string()
            } else {
                format!("{}.5", i % 1000)
            };
            let s = match i % 4 {
                0 => "null".to_string(),
                1 => format!("\"s{i}\""),
                2 => format!("\"a longer string value é€ number {i}, past thirty-two bytes\""),
                _ => "\"\"".to_string(),
            };
            let d = format!("\"20{:02}-{:02}-{:02}\"", i % 30, 1 + i % 12, 1 + i % 28);
            let t = format!("\"2013-01-{:02}T10:{:02}:00Z\"", 1 + i % 28, i % 60);
            let b = ["true", "false", "null"][i % 3];
            writeln!(
                input,
                "{{\"id\":{},\"x\":{x},\"s\":{s},\"b\":{b},\"d\":{d},\"t\":{t}}}",
                i as i64 - 500
            )
            .unwrap();
        }
        input
    }

    /// The copy check of `tinydelta append --file` (docs/BENCHMARKS.md "What each figure measures", figure 6) takes exactly the files
    /// canonicalize writes back unchanged, with the same statistics, over several segments and
    /// threads: every other input (blank line, CR, BOM, no last newline, another spelling, an
    /// invalid row) anywhere in the file is left to canonicalize.
    #[test]
    fn the_copy_check_takes_exactly_the_canonical_files() {
        let base = canonical_rows(40_000);
        assert!(base.len() as u64 > 3 * SEGMENT_BYTES, "several segments");
        assert!(check_agrees(&base));
        assert!(check_agrees(base.split_inclusive(|&c| c == b'\n').next().unwrap()));
        assert!(check_agrees(
            b"{\"id\":1,\"x\":null,\"s\":null,\"b\":null,\"d\":null,\"t\":null}\n"
        ));
        // One line changed at several places: the first line, segment ends, the last line.
        let line_starts: Vec<usize> = std::iter::once(0)
            .chain(memchr::memchr_iter(b'\n', &base).map(|i| i + 1))
            .filter(|&i| i < base.len())
            .collect();
        let near = |at: usize| line_starts[line_starts.partition_point(|&s| s < at).min(line_starts.len() - 1)];
        let places = [
            0,
            near(SEGMENT_BYTES as usize),
            near(2 * SEGMENT_BYTES as usize),
            near(base.len() / 2),
            *line_starts.last().unwrap(),
        ];
        type Edit<'a> = (&'a str, &'a dyn Fn(&[u8]) -> Vec<u8>);
        let edits: [Edit; 8] = [
            ("blank line before", &|l| [b"\n", l].concat()),
            ("CRLF", &|l| [&l[..l.len() - 1], b"\r\n"].concat()),
            ("BOM", &|l| [b"\xEF\xBB\xBF", l].concat()),
            ("space after a key", &|l| {
                let s = String::from_utf8(l.to_vec()).unwrap();
                s.replacen("\"id\":", "\"id\": ", 1).into_bytes()
            }),
            ("float written 1.50", &|l| {
                let s = String::from_utf8(l.to_vec()).unwrap();
                match s.contains(".5,") {
                    true => s.replacen(".5,", ".50,", 1),
                    false => s.replacen("\"x\":null", "\"x\":1.50", 1),
                }
                .into_bytes()
            }),
            ("null in a NOT NULL column", &|l| {
                let s = String::from_utf8(l.to_vec()).unwrap();
                let end = s.find(",\"x\"").unwrap();
                format!("{{\"id\":null{}", &s[end..]).into_bytes()
            }),
            ("invalid UTF-8 in a string", &|l| {
                let mut v = l.to_vec();
                let at = v.windows(5).position(|w| w == b"\"t\":\"").unwrap() + 5;
                v[at] = 0xFF;
                v
            }),
            ("escape in a string", &|l| {
                let s = String::from_utf8(l.to_vec()).unwrap();
                s.replacen("T10:", "T1\\u0030:", 1).into_bytes()
            }),
        ];
        for &at in &places {
            let end = at + memchr::memchr(b'\n', &base[at..]).unwrap() + 1;
            for (what, edit) in &edits {
                let edited = edit(&base[at..end]);
                assert_ne!(&edited[..], &base[at..end], "{what}");
                let input = [&base[..at], &edited[..], &base[end..]].concat();
                assert!(!check_agrees(&input), "{what} at byte {at} was taken as canonical");
            }
        }
        // No newline after the last row.
        assert!(!check_agrees(&base[..base.len() - 1]));
        // A line end just before, at and after each segment boundary, and a line longer than a
        // read of the check (its buffer grows).
        for shift in [-2i64, -1, 0, 1, 2] {
            let first = canonical_rows(1);
            let long = |pad: usize| {
                format!(
                    "{{\"id\":7,\"x\":null,\"s\":\"{}\",\"b\":null,\"d\":null,\"t\":null}}\n",
                    "y".repeat(pad)
                )
            };
            // The long line's `\n` at SEGMENT_BYTES + shift - 1: the next line starts at
            // SEGMENT_BYTES + shift.
            let pad = (SEGMENT_BYTES as i64 + shift) as usize - first.len() - long(0).len();
            let long = long(pad);
            assert_eq!((first.len() + long.len()) as i64, SEGMENT_BYTES as i64 + shift);
            let input = [
                first,
                long.clone().into_bytes(),
                canonical_rows(3000),
                long.into_bytes(),
            ]
            .concat();
            assert!(check_agrees(&input), "shift {shift}");
        }
    }
}

#[cfg(test)]
mod scanner_props {
    use super::*;
    use proptest::prelude::*;

    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("{".to_string()),
            Just("}".to_string()),
            Just(",".to_string()),
            Just(":".to_string()),
            Just(" ".to_string()),
            Just("\t".to_string()),
            Just("[1]".to_string()),
            Just("\"k\"".to_string()),
            Just("\"é\"".to_string()),
            Just("\"a\\\"b\"".to_string()),
            Just("true".to_string()),
            Just("fals".to_string()),
            Just("null".to_string()),
            "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{0,2})?([eE][+-]?[0-9]{0,2})?",
            "[0-9.eE+-]{1,4}",
            "\"[a-z ]{0,3}\"",
        ]
    }

    proptest! {
        /// Whatever the fast scanner accepts, serde_json parses to the same (key, raw) pairs.
        #[test]
        fn fast_path_agrees_with_serde(tokens in proptest::collection::vec(token(), 0..14)) {
            let text: String = tokens.concat();
            let mut flat = Vec::new();
            if scan_flat(&text, &mut flat) {
                let parsed: Fields = serde_json::from_str(&text).expect("scanner accepted invalid JSON");
                let pairs: Vec<(&str, &str)> = parsed.0.iter().map(|(k, v)| (k.0.as_ref(), v.get())).collect();
                prop_assert_eq!(flat, pairs);
            }
        }

        /// Every flat object without escapes takes the fast path.
        #[test]
        fn flat_objects_take_fast_path(
            pairs in proptest::collection::vec(("[a-z]{1,5}", prop_oneof![
                "-?(0|[1-9][0-9]{0,5})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
                "\"[ -!#-\\[\\]-~é]{0,8}\"",
                Just("true".to_string()), Just("false".to_string()), Just("null".to_string()),
            ]), 0..8),
            ws in "[ \t]{0,2}",
        ) {
            let body: Vec<String> = pairs.iter().map(|(k, v)| format!("{ws}\"{k}\"{ws}:{ws}{v}{ws}")).collect();
            let text = format!("{ws}{{{}}}{ws}", body.join(","));
            let mut flat = Vec::new();
            prop_assert!(scan_flat(&text, &mut flat), "{}", text);
            prop_assert_eq!(flat.len(), pairs.len());
        }
    }
}

/// The one-pass check of canonical rows against the version it replaced (the faster
/// check must accept and refuse exactly what the old one did, with the same statistics) and
/// against the general path (a row it accepts is its own canonical form).
#[cfg(test)]
mod canonical_props {
    use super::*;
    use proptest::prelude::*;

    /// A value [`Canonicalizer::canonical`] accepted, before its statistics are counted.
    #[derive(Debug, Clone, Copy)]
    enum Parsed {
        Null,
        Int(i64),
        Float(f64),
        Bool,
        /// A string or date: its bytes' range in the line, without the quotes.
        Str(usize, usize),
        /// A timestamp's instant (µs since the epoch).
        Instant(i64),
        /// A string with escapes: its value's index in the row's decoded strings.
        Decoded(usize),
    }

    /// The one-pass check before its rewrite for speed, kept as it was (its values counted after
    /// the whole row is accepted), but for strings with escapes: canonical when serde_json writes
    /// their value back byte for byte (docs/CLI.md "Input rules").
    fn reference(this: &mut Canonicalizer, parsed: &mut Vec<Parsed>, b: &[u8]) -> bool {
        let n = this.schema.columns.len();
        if n == 0 || b.first() != Some(&b'{') {
            return false;
        }
        parsed.clear();
        let mut decoded: Vec<String> = Vec::new();
        let mut i = 1;
        for ci in 0..n {
            let key = &this.key_prefix[ci];
            if !starts_with(&b[i..], key) {
                return false;
            }
            i += key.len();
            let col = &this.schema.columns[ci];
            let start = i;
            let value = match b.get(i) {
                Some(b'n') if b[i..].starts_with(b"null") && col.nullable => {
                    i += 4;
                    Parsed::Null
                }
                Some(b't') if b[i..].starts_with(b"true") && col.ty == ColumnType::Bool => {
                    i += 4;
                    Parsed::Bool
                }
                Some(b'f') if b[i..].starts_with(b"false") && col.ty == ColumnType::Bool => {
                    i += 5;
                    Parsed::Bool
                }
                Some(b'"') => {
                    let Some(len) = b[i + 1..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20) else {
                        return false;
                    };
                    let end = i + 1 + len;
                    if b[end] == b'\\' && col.ty == ColumnType::Str {
                        let mut values = serde_json::Deserializer::from_slice(&b[i..]).into_iter::<String>();
                        let Some(Ok(v)) = values.next() else { return false };
                        let raw = &b[i..i + values.byte_offset()];
                        if serde_json::to_string(&v).ok().as_deref().map(str::as_bytes) != Some(raw) {
                            return false;
                        }
                        i += raw.len();
                        decoded.push(v);
                        parsed.push(Parsed::Decoded(decoded.len() - 1));
                        let delim = if ci + 1 == n { b'}' } else { b',' };
                        if b.get(i) != Some(&delim) {
                            return false;
                        }
                        i += 1;
                        continue;
                    }
                    if b[end] != b'"' {
                        return false;
                    }
                    let sb = &b[i + 1..end];
                    // UTF-8: an ASCII check inline (most values), the full check otherwise.
                    let utf8 = || std::str::from_utf8(sb).ok();
                    if !sb.is_ascii() && utf8().is_none() {
                        return false;
                    }
                    i = end + 1;
                    match col.ty {
                        ColumnType::Str => Parsed::Str(start + 1, end),
                        ColumnType::Date if utf8().is_some_and(valid_date) => Parsed::Str(start + 1, end),
                        ColumnType::Timestamp => {
                            let us = match &this.ts_cache[ci] {
                                Some((last, us)) if last.len() == sb.len() && starts_with(sb, last.as_bytes()) => *us,
                                _ => {
                                    let Some(s) = utf8() else { return false };
                                    let Ok(us) = timestamp_us(s) else { return false };
                                    match &mut this.ts_cache[ci] {
                                        Some((last, last_us)) => {
                                            last.clear();
                                            last.push_str(s);
                                            *last_us = us;
                                        }
                                        none => *none = Some((s.to_string(), us)),
                                    }
                                    us
                                }
                            };
                            Parsed::Instant(us)
                        }
                        _ => return false,
                    }
                }
                Some(b'-' | b'0'..=b'9') if col.ty == ColumnType::Int => {
                    let neg = b[i] == b'-';
                    if neg {
                        i += 1;
                    }
                    // One pass: at most 19 digits fit a u64 (< 1.9e19), checked against the
                    // i64 range below.
                    let first = i;
                    let mut m: u64 = 0;
                    while let Some(&c) = b.get(i) {
                        let d = c.wrapping_sub(b'0');
                        if d > 9 {
                            break;
                        }
                        if i - first == 19 {
                            return false;
                        }
                        m = m * 10 + u64::from(d);
                        i += 1;
                    }
                    let digits = i - first;
                    // No leading zero, no "-0" (emitted as "0"); a fraction or exponent is
                    // refused below (the next byte is not , or }).
                    if digits == 0 || (b[first] == b'0' && (digits > 1 || neg)) {
                        return false;
                    }
                    let v = match (neg, i64::try_from(m)) {
                        (false, Ok(v)) => v,
                        (true, Ok(v)) => -v,
                        (true, Err(_)) if m == 1 << 63 => i64::MIN,
                        _ => return false,
                    };
                    Parsed::Int(v)
                }
                Some(b'-' | b'0'..=b'9') if col.ty == ColumnType::Float => {
                    let end = b[i..]
                        .iter()
                        .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                        .map_or(b.len(), |p| i + p);
                    // Only the ASCII bytes of a number: UTF-8.
                    let Ok(raw) = std::str::from_utf8(&b[i..end]) else {
                        return false;
                    };
                    let Ok(f) = raw.parse::<f64>() else { return false };
                    // Canonical only when written as emit writes it (which also proves it a
                    // JSON number: "1.", "+1", "01" never come out of the formatter).
                    if !f.is_finite() || !float_written_as(f, raw.as_bytes()) {
                        return false;
                    }
                    i = end;
                    Parsed::Float(if f == 0.0 { 0.0 } else { f })
                }
                _ => return false,
            };
            parsed.push(value);
            let delim = if ci + 1 == n { b'}' } else { b',' };
            if b.get(i) != Some(&delim) {
                return false;
            }
            i += 1;
        }
        if i != b.len() {
            return false;
        }
        for (ci, v) in parsed.iter().enumerate() {
            let st = &mut this.stats.columns[ci];
            match *v {
                Parsed::Null => st.null_count += 1,
                Parsed::Int(n) => update_stat(st, StatValue::Int(n)),
                Parsed::Float(f) => update_stat(st, StatValue::Float(f)),
                Parsed::Bool => {}
                // Checked as UTF-8 above, so the conversion is lossless (and borrows).
                Parsed::Str(s, e) => update_str_stat(st, &b[s..e]),
                Parsed::Instant(us) => update_stat(st, StatValue::Instant(us)),
                Parsed::Decoded(k) => update_str_stat(st, decoded[k].as_bytes()),
            }
        }
        this.stats.num_records += 1;
        true
    }

    fn schema() -> Schema {
        Schema::parse_cli(&[
            "id:int!".into(),
            "x:float".into(),
            "s:str".into(),
            "b:bool!".into(),
            "d:date".into(),
            "t:timestamp".into(),
            "n:int".into(),
        ])
        .unwrap()
    }

    /// The general path alone (serde_json or the flat scanner, then emit) on one line.
    fn general(c: &mut Canonicalizer, line: &[u8], out: &mut Vec<u8>) -> bool {
        let Ok(text) = std::str::from_utf8(line) else {
            return false;
        };
        let mut flat = Vec::new();
        if scan_flat(text, &mut flat) {
            return c.emit(&flat, out).is_ok();
        }
        let Ok(fields) = serde_json::from_str::<Fields>(text) else {
            return false;
        };
        let fields: Vec<(&str, &str)> = fields.0.iter().map(|(k, v)| (k.0.as_ref(), v.get())).collect();
        c.emit(&fields, out).is_ok()
    }

    fn int() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|v| v.to_string()),
            (-1000i64..1000).prop_map(|v| v.to_string()),
            Just("-0".to_string()),
            Just("01".to_string()),
            Just("-".to_string()),
            Just("9223372036854775808".to_string()),
            Just("-9223372036854775809".to_string()),
            Just("12345678901234567890".to_string()),
            Just("1.0".to_string()),
            Just("1e3".to_string()),
            Just("00".to_string()),
        ]
    }

    fn float() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| serde_json::to_string(&f).unwrap()),
            (-100i32..100).prop_map(|v| format!("{}.{}", v / 10, v.rem_euclid(10))),
            (-100i64..100).prop_map(|v| v.to_string()),
            Just("1.50".to_string()),
            Just("-0.0".to_string()),
            Just("0.0".to_string()),
            Just("1e300".to_string()),
            Just("1e+300".to_string()),
            Just("1E300".to_string()),
            Just("1e999".to_string()),
            Just("1.".to_string()),
            Just("+1.0".to_string()),
            Just("--1.0".to_string()),
        ]
    }

    fn string_body() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            8 => proptest::char::range('a', 'e').prop_map(|c| vec![c as u8]),
            2 => Just(b"\"".to_vec()),
            2 => Just(b"\\".to_vec()),
            1 => Just(b"\\n".to_vec()),
            1 => Just(b"\n".to_vec()),
            1 => Just(b"\t".to_vec()),
            1 => Just(b"\x7f".to_vec()),
            2 => Just("ü".as_bytes().to_vec()),
            2 => Just("€".as_bytes().to_vec()),
            1 => Just(b"\xff".to_vec()),
            1 => Just(b"\xc3".to_vec()),
            1 => Just(b"\xed\xa0\x80".to_vec()),
            1 => Just(b" ".to_vec()),
            1 => Just(b"}".to_vec()),
        ];
        prop_oneof![
            proptest::collection::vec(byte.clone(), 0..12).prop_map(|v| v.concat()),
            proptest::collection::vec(byte, 30..40).prop_map(|v| v.concat()),
            "[a-z]{0,40}".prop_map(String::into_bytes),
        ]
    }

    fn date() -> impl Strategy<Value = String> {
        prop_oneof![
            (1u32..=9999, 1u32..=12, 1u32..=31).prop_map(|(y, m, d)| format!("{y:04}-{m:02}-{d:02}")),
            (0u32..=3, 0u32..=13, 0u32..=32).prop_map(|(y, m, d)| format!("{y:04}-{m:02}-{d:02}")),
            Just("2020-02-29".to_string()),
            Just("2021-02-29".to_string()),
            Just("2021-2-1".to_string()),
        ]
    }

    fn timestamp() -> impl Strategy<Value = String> {
        let digits = |n: usize| {
            proptest::collection::vec(0u8..10, n).prop_map(|v| v.iter().map(|d| (b'0' + d) as char).collect::<String>())
        };
        prop_oneof![
            (0u32..=9999, 0u32..=13, 0u32..=32, 0u32..=24, 0u32..=60, 0u32..=61)
                .prop_map(|(y, mo, d, h, mi, s)| format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")),
            (1u32..=9999, 1u32..=12, 1u32..=28, 0u32..=23)
                .prop_map(|(y, mo, d, h)| format!("{y:04}-{mo:02}-{d:02}T{h:02}:00:00Z")),
            (digits(4), digits(2), digits(2), digits(2), digits(2), digits(2))
                .prop_map(|(y, mo, d, h, mi, s)| format!("{y}-{mo}-{d}T{h}:{mi}:{s}Z")),
            Just("2013-01-01T10:00:00+01:00".to_string()),
            Just("2013-01-01t10:00:00z".to_string()),
            Just("2013-01-01 10:00:00Z".to_string()),
            Just("2013-01-01T10:00:00.5Z".to_string()),
            Just("2016-12-31T23:59:60Z".to_string()),
            Just("0001-01-01T00:30:00+01:00".to_string()),
            Just("9999-12-31T23:59:59Z".to_string()),
            Just("noon".to_string()),
        ]
    }

    fn quoted(v: Vec<u8>) -> Vec<u8> {
        [&b"\""[..], &v, b"\""].concat()
    }

    /// A value for column `ci` of [`schema`]: mostly of its type, sometimes of another.
    fn value(ci: usize) -> BoxedStrategy<Vec<u8>> {
        let own: BoxedStrategy<Vec<u8>> = match ci {
            0 | 6 => int().prop_map(String::into_bytes).boxed(),
            1 => float().prop_map(String::into_bytes).boxed(),
            2 => string_body().prop_map(quoted).boxed(),
            3 => prop_oneof![Just(b"true".to_vec()), Just(b"false".to_vec()), Just(b"tru".to_vec())].boxed(),
            4 => date().prop_map(|d| quoted(d.into_bytes())).boxed(),
            _ => timestamp().prop_map(|t| quoted(t.into_bytes())).boxed(),
        };
        prop_oneof![
            12 => own,
            2 => Just(b"null".to_vec()),
            1 => Just(b"nul".to_vec()),
            1 => Just(b"1".to_vec()),
            1 => Just(b"\"x\"".to_vec()),
            1 => Just(b"[1]".to_vec()),
        ]
        .boxed()
    }

    /// A canonical value for column `ci` of [`schema`].
    fn good(ci: usize) -> BoxedStrategy<Vec<u8>> {
        let own: BoxedStrategy<Vec<u8>> = match ci {
            0 | 6 => prop_oneof![
                any::<i64>().prop_map(|v| v.to_string()),
                (-1000i64..1000).prop_map(|v| v.to_string())
            ]
            .prop_map(String::into_bytes)
            .boxed(),
            1 => prop_oneof![
                any::<f64>().prop_filter("finite", |f| f.is_finite()),
                (-1000i32..1000).prop_map(|v| f64::from(v) / 8.0),
            ]
            .prop_map(|f| serde_json::to_vec(&(if f == 0.0 { 0.0 } else { f })).unwrap())
            .boxed(),
            2 => prop_oneof![
                "[a-z]{0,12}".prop_map(String::into_bytes),
                "[ -!#-\\[\\]-~éü€]{0,40}".prop_map(String::into_bytes),
            ]
            .prop_map(quoted)
            .boxed(),
            3 => prop_oneof![Just(b"true".to_vec()), Just(b"false".to_vec())].boxed(),
            4 => (1u32..=9999, 1u32..=12, 1u32..=28)
                .prop_map(|(y, m, d)| quoted(format!("{y:04}-{m:02}-{d:02}").into_bytes()))
                .boxed(),
            _ => (1u32..=9999, 1u32..=12, 1u32..=28, 0u32..=23, 0u32..=59)
                .prop_map(|(y, mo, d, h, mi)| quoted(format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:07Z").into_bytes()))
                .boxed(),
        };
        match ci {
            0 | 3 => own,
            _ => prop_oneof![4 => own, 1 => Just(b"null".to_vec())].boxed(),
        }
    }

    /// A line near a canonical row of [`schema`]: a canonical row, or one change of it (a value
    /// of any kind, a key left out, swapped, repeated or unknown, a space, a byte more or less).
    fn line() -> impl Strategy<Value = Vec<u8>> {
        let names = ["id", "x", "s", "b", "d", "t", "n"];
        let goods: Vec<BoxedStrategy<Vec<u8>>> = (0..names.len()).map(good).collect();
        let anys: Vec<BoxedStrategy<Vec<u8>>> = (0..names.len()).map(value).collect();
        (goods, anys, 0u8..16, 0usize..7, 0usize..7).prop_map(move |(goods, anys, change, p, q)| {
            let mut fields: Vec<(Vec<u8>, Vec<u8>)> = names.iter().map(|n| n.as_bytes().to_vec()).zip(goods).collect();
            match change {
                0 => {
                    fields.remove(p);
                }
                1 => fields.swap(p, q),
                2 => {
                    let f = fields[p].clone();
                    fields.insert(q, f);
                }
                3 => fields.insert(q, (b"zz".to_vec(), b"1".to_vec())),
                4..=7 => fields[p].1 = anys[p].clone(),
                _ => {}
            }
            let mut row = b"{".to_vec();
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    row.push(b',');
                }
                row.extend_from_slice(&quoted(k.clone()));
                row.push(b':');
                if change == 8 && i == p {
                    row.push(b' ');
                }
                row.extend_from_slice(v);
            }
            row.push(b'}');
            match change {
                9 => row.push(b' '),
                10 => {
                    row.pop();
                }
                11 => row.insert(0, b' '),
                _ => {}
            }
            row
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The one-pass check accepts and refuses exactly the rows the old one did, with the same
        /// statistics; a row it accepts is what the general path makes of it; and a run of rows
        /// checked by `chunk_into` (statistics counted as rows are checked) gets the statistics
        /// and bytes the general path alone gets.
        #[test]
        fn one_pass_check_is_the_old_one(lines in proptest::collection::vec(line(), 1..12)) {
            let s = schema();
            let mut parsed = Vec::new();
            for l in &lines {
                // Each line on its own (a refused row may leave min/max behind, which only a
                // run of rows the general path takes may keep: the chunk below).
                let (mut new, mut old, mut plain) = (Canonicalizer::new(&s), Canonicalizer::new(&s), Canonicalizer::new(&s));
                let a = new.canonical(l);
                prop_assert_eq!(a, reference(&mut old, &mut parsed, l), "{}", String::from_utf8_lossy(l));
                if a {
                    let mut out = Vec::new();
                    prop_assert!(general(&mut plain, l, &mut out), "accepted but refused by the general path: {}", String::from_utf8_lossy(l));
                    prop_assert_eq!(&out[..out.len() - 1], &l[..]);
                    new.fold_fast();
                    prop_assert_eq!(new.stats.to_stats_json(&s), old.stats.to_stats_json(&s));
                    prop_assert_eq!(new.stats.to_stats_json(&s), plain.stats.to_stats_json(&s));
                    prop_assert_eq!(new.stats.num_records, 1);
                }
                // With what follows the row: the same answer when a `\n` follows.
                let mut c = Canonicalizer::new(&s);
                let more = [&l[..], b"\n{\"id\":1}"].concat();
                prop_assert_eq!(c.canonical_row(&more, true), a.then_some(l.len()));
                prop_assert_eq!(c.canonical_row(&[&l[..], b" \n"].concat(), true), None);
            }

            // A chunk of every line the general path takes: chunk_into counts what the general
            // path alone counts, and writes the same rows.
            let mut plain = Canonicalizer::new(&s);
            let mut want = Vec::new();
            let mut chunk = Vec::new();
            for l in &lines {
                // (A refused row may leave statistics behind in the general path too.)
                if general(&mut Canonicalizer::new(&s), l, &mut Vec::new()) && general(&mut plain, l, &mut want) {
                    chunk.extend_from_slice(l);
                    chunk.push(b'\n');
                }
            }
            for defer in [false, true] {
                let mut c = Canonicalizer::new(&s);
                let mut out = Vec::new();
                let same = c.chunk_into(&chunk, 1, &mut out, defer).unwrap();
                prop_assert_eq!(if same { &chunk } else { &out }, &want);
                prop_assert_eq!(c.stats.to_stats_json(&s), plain.stats.to_stats_json(&s));
                prop_assert_eq!(c.stats.num_records, plain.stats.num_records);
            }
        }

        /// The timestamps the one-pass check computes from their digits are chrono's.
        #[test]
        fn simple_timestamps_are_chronos(t in timestamp()) {
            if let Some(us) = simple_timestamp_us(t.as_bytes()) {
                prop_assert_eq!(Ok(us), timestamp_us(&t));
            }
        }

        /// The word-at-a-time string scan ends where a byte-by-byte scan does.
        #[test]
        fn string_end_is_bytewise(body in string_body(), pad in 0usize..9) {
            let b = [&b"\""[..], &body, b"\"", &b",1234567"[..pad.min(8)]].concat();
            let bytewise = b[1..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|p| p + 1)
                .filter(|&e| b[e] == b'"' && std::str::from_utf8(&b[1..e]).is_ok());
            prop_assert_eq!(string_end(&b, 1), bytewise);
        }
    }
}
