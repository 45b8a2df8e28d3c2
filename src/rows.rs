//! Input validation and canonical rows (SPEC section 1, "Canonical rows").
//!
//! [`canonicalize`] streams JSONL from a reader to a writer one line at a time, so memory is
//! bounded by the longest line, never by the file. Each accepted line is rewritten as one compact
//! JSON object with every schema column present, in schema order, ending in `\n`. It also gathers
//! the per-file statistics Delta keeps in `add.stats` (PROTOCOL "Per-file Statistics").

use std::borrow::Cow;
use std::fmt;
use std::io::{BufRead, Write};

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::{Error, IoContext, Result};
use crate::schema::{ColumnType, Schema};

/// Longest string prefix kept in `minValues` (Delta writers truncate string stats to 32 chars).
const STRING_STAT_PREFIX: usize = 32;

/// What [`canonicalize`] learned about the rows it wrote.
#[derive(Debug, Clone, Default)]
pub struct FileStats {
    /// Rows written.
    pub num_records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Per-column statistics, in schema order.
    columns: Vec<ColumnStats>,
}

#[derive(Debug, Clone, Default)]
struct ColumnStats {
    null_count: u64,
    min: Option<StatValue>,
    max: Option<StatValue>,
    /// A string longer than the stat prefix was seen, so `max` cannot be stated.
    max_unknown: bool,
}

#[derive(Debug, Clone, PartialEq, PartialOrd)]
enum StatValue {
    Int(i64),
    Float(f64),
    /// Strings and dates compare as strings.
    Str(String),
    /// Timestamps compare as instants (µs since epoch), reported in UTC.
    Instant(i64),
}

impl StatValue {
    fn to_json(&self) -> serde_json::Value {
        match self {
            StatValue::Int(i) => (*i).into(),
            StatValue::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            StatValue::Str(s) => s.clone().into(),
            StatValue::Instant(us) => chrono::DateTime::from_timestamp_micros(*us)
                .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string().into())
                .unwrap_or(serde_json::Value::Null),
        }
    }
}

impl FileStats {
    /// The `add.stats` JSON string: `numRecords`, `minValues`, `maxValues`, `nullCount`.
    pub fn to_stats_json(&self, schema: &Schema) -> String {
        let mut min = serde_json::Map::new();
        let mut max = serde_json::Map::new();
        let mut nulls = serde_json::Map::new();
        for (col, st) in schema.columns.iter().zip(&self.columns) {
            nulls.insert(col.name.clone(), st.null_count.into());
            if let Some(v) = &st.min {
                min.insert(col.name.clone(), v.to_json());
            }
            if let (Some(v), false) = (&st.max, st.max_unknown) {
                max.insert(col.name.clone(), v.to_json());
            }
        }
        serde_json::json!({
            "numRecords": self.num_records,
            "minValues": min,
            "maxValues": max,
            "nullCount": nulls,
        })
        .to_string()
    }
}

/// A JSON object key, borrowed from the line when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct KV;
        impl<'de> Visitor<'de> for KV {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KV)
    }
}

/// One row's fields in input order, values as raw JSON text. Duplicates are kept so the caller
/// can name them.
struct Fields<'a>(Vec<(Key<'a>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct FV;
        impl<'de> Visitor<'de> for FV {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<Fields<'de>, A::Error> {
                let mut v = Vec::with_capacity(m.size_hint().unwrap_or(16));
                while let Some(k) = m.next_key::<Key<'de>>()? {
                    let val: &'de RawValue = m.next_value()?;
                    v.push((k, val));
                }
                Ok(Fields(v))
            }
        }
        d.deserialize_map(FV)
    }
}

/// Validates and canonicalises rows against one schema; reusable across lines.
struct Canonicalizer<'s> {
    schema: &'s Schema,
    /// `"name":` per column, already JSON-escaped.
    key_prefix: Vec<Vec<u8>>,
    /// For each column, the field index in the current line (reset per line).
    slots: Vec<Option<usize>>,
    stats: FileStats,
}

enum Rejection {
    /// A column-specific problem.
    Column(String, String),
    /// A position-specific problem (1-based character column).
    At(usize, String),
}

impl<'s> Canonicalizer<'s> {
    fn new(schema: &'s Schema) -> Self {
        let key_prefix = schema
            .columns
            .iter()
            .map(|c| {
                let mut k = serde_json::to_vec(&c.name).unwrap_or_default();
                k.push(b':');
                k
            })
            .collect();
        Canonicalizer {
            schema,
            key_prefix,
            slots: vec![None; schema.columns.len()],
            stats: FileStats {
                columns: vec![ColumnStats::default(); schema.columns.len()],
                ..FileStats::default()
            },
        }
    }

    /// Canonicalise one non-blank line into `out` (appending), or say why not.
    fn line(&mut self, text: &str, out: &mut Vec<u8>) -> std::result::Result<(), Rejection> {
        let fields: Fields = serde_json::from_str(text).map_err(|e| {
            let msg = e.to_string();
            let msg = msg.rsplit_once(" at line ").map(|(m, _)| m.to_string()).unwrap_or(msg);
            let reason = if e.is_data() {
                format!("not a JSON object ({msg})")
            } else {
                format!("invalid JSON: {msg}")
            };
            Rejection::At(e.column().max(1), reason)
        })?;
        self.slots.iter_mut().for_each(|s| *s = None);
        for (i, (k, _)) in fields.0.iter().enumerate() {
            let Some(ci) = self.schema.columns.iter().position(|c| c.name == k.0) else {
                return Err(Rejection::Column(
                    k.0.to_string(),
                    "unknown column (not in the table's schema)".into(),
                ));
            };
            if self.slots[ci].is_some() {
                return Err(Rejection::Column(k.0.to_string(), "duplicate key".into()));
            }
            self.slots[ci] = Some(i);
        }
        out.push(b'{');
        for ci in 0..self.schema.columns.len() {
            if ci > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.key_prefix[ci]);
            let col = &self.schema.columns[ci];
            let raw = self.slots[ci].map(|i| fields.0[i].1.get()).unwrap_or("null");
            let st = &mut self.stats.columns[ci];
            if raw == "null" {
                if !col.nullable {
                    let why = if self.slots[ci].is_some() { "null" } else { "missing" };
                    return Err(Rejection::Column(
                        col.name.clone(),
                        format!("{why} value for a NOT NULL column"),
                    ));
                }
                st.null_count += 1;
                out.extend_from_slice(b"null");
                continue;
            }
            let bad = |found: &str| {
                Rejection::Column(
                    col.name.clone(),
                    format!("expected {}, found {found}", col.ty.cli_name()),
                )
            };
            let kind = json_kind(raw);
            let value = match col.ty {
                ColumnType::Int => {
                    if kind != "number" {
                        return Err(bad(kind));
                    }
                    if raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                        return Err(Rejection::Column(
                            col.name.clone(),
                            format!("{raw} has a fraction or exponent, but the column is int"),
                        ));
                    }
                    let n: i64 = raw.parse().map_err(|_| {
                        Rejection::Column(col.name.clone(), format!("{raw} is outside the 64-bit integer range"))
                    })?;
                    let mut b = itoa_buf(n);
                    out.append(&mut b);
                    StatValue::Int(n)
                }
                ColumnType::Float => {
                    if kind != "number" {
                        return Err(bad(kind));
                    }
                    let f: f64 = raw
                        .parse()
                        .map_err(|_| Rejection::Column(col.name.clone(), format!("{raw} is not a number")))?;
                    if !f.is_finite() {
                        return Err(Rejection::Column(
                            col.name.clone(),
                            format!("{raw} is outside the 64-bit float range"),
                        ));
                    }
                    // serde_json prints floats with a fraction or exponent ("18.0", "1e300").
                    let _ = serde_json::to_writer(&mut *out, &f);
                    StatValue::Float(if f == 0.0 { 0.0 } else { f })
                }
                ColumnType::Bool => {
                    if kind != "boolean" {
                        return Err(bad(kind));
                    }
                    out.extend_from_slice(raw.as_bytes());
                    continue; // Delta keeps no min/max for booleans.
                }
                ColumnType::Str | ColumnType::Date | ColumnType::Timestamp => {
                    if kind != "string" {
                        return Err(bad(kind));
                    }
                    let s: Cow<str> = if raw.contains('\\') {
                        Cow::Owned(
                            serde_json::from_str::<String>(raw)
                                .map_err(|e| Rejection::Column(col.name.clone(), e.to_string()))?,
                        )
                    } else {
                        Cow::Borrowed(&raw[1..raw.len() - 1])
                    };
                    match col.ty {
                        ColumnType::Date => {
                            if !valid_date(&s) {
                                return Err(Rejection::Column(
                                    col.name.clone(),
                                    format!("{raw} is not a date (YYYY-MM-DD)"),
                                ));
                            }
                        }
                        ColumnType::Timestamp => {
                            let Ok(t) = chrono::DateTime::parse_from_rfc3339(&s) else {
                                return Err(Rejection::Column(
                                    col.name.clone(),
                                    format!("{raw} is not an RFC 3339 timestamp"),
                                ));
                            };
                            let us = t.timestamp_micros();
                            update_stat(st, StatValue::Instant(us));
                            if matches!(s, Cow::Borrowed(_)) {
                                out.extend_from_slice(raw.as_bytes());
                            } else {
                                let _ = serde_json::to_writer(&mut *out, s.as_ref());
                            }
                            continue;
                        }
                        _ => {}
                    }
                    if matches!(s, Cow::Borrowed(_)) {
                        out.extend_from_slice(raw.as_bytes());
                    } else {
                        let _ = serde_json::to_writer(&mut *out, s.as_ref());
                    }
                    if s.chars().count() > STRING_STAT_PREFIX {
                        st.max_unknown = true;
                        let prefix: String = s.chars().take(STRING_STAT_PREFIX).collect();
                        if st.min.as_ref().is_none_or(|m| StatValue::Str(prefix.clone()) < *m) {
                            st.min = Some(StatValue::Str(prefix));
                        }
                        continue;
                    }
                    StatValue::Str(s.into_owned())
                }
            };
            update_stat(st, value);
        }
        out.extend_from_slice(b"}\n");
        self.stats.num_records += 1;
        Ok(())
    }
}

fn update_stat(st: &mut ColumnStats, v: StatValue) {
    if st.min.as_ref().is_none_or(|m| v < *m) {
        st.min = Some(v.clone());
    }
    if st.max.as_ref().is_none_or(|m| v > *m) {
        st.max = Some(v);
    }
}

fn itoa_buf(n: i64) -> Vec<u8> {
    n.to_string().into_bytes()
}

fn json_kind(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'"') => "string",
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

/// `YYYY-MM-DD`, exactly ten characters, a real calendar day.
fn valid_date(s: &str) -> bool {
    s.len() == 10
        && s.as_bytes()[4] == b'-'
        && s.as_bytes()[7] == b'-'
        && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
}

/// Stream JSONL from `input` to `output` as canonical rows (SPEC section 1), returning the
/// statistics of what was written.
///
/// `source` names the input in errors (a path, `<stdin>`, an `incoming/` name). Accepts CRLF, a
/// missing final newline, blank lines, a leading UTF-8 BOM, any whitespace and key order, ints in
/// float columns, and omitted nullable keys. Errors: [`Error::BadInput`] with the 1-based line, the
/// column name (or character position) and the reason, at the first bad line; [`Error::Io`] for
/// read or write failures (`out_path` names the output).
pub fn canonicalize<R: BufRead, W: Write>(
    schema: &Schema,
    source: &str,
    mut input: R,
    output: &mut W,
    out_path: &std::path::Path,
) -> Result<FileStats> {
    let mut c = Canonicalizer::new(schema);
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut line_no: u64 = 0;
    let bad = |line: u64, column: String, reason: String| Error::BadInput {
        file: source.to_string(),
        line,
        column,
        reason,
    };
    loop {
        buf.clear();
        let n = input
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io("read", source, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let mut bytes: &[u8] = &buf;
        if line_no == 1 {
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                let col = String::from_utf8_lossy(&bytes[..e.valid_up_to()]).chars().count() + 1;
                return Err(bad(line_no, col.to_string(), "invalid UTF-8".into()));
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        match c.line(text, &mut out) {
            Ok(()) => {}
            Err(Rejection::Column(col, reason)) => return Err(bad(line_no, col, reason)),
            Err(Rejection::At(pos, reason)) => {
                // serde_json reports a 1-based byte column; report characters.
                let mut end = (pos - 1).min(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                let col = text[..end].chars().count() + 1;
                return Err(bad(line_no, col.to_string(), reason));
            }
        }
        if out.len() >= 256 * 1024 {
            output.write_all(&out).ctx("write", out_path)?;
            c.stats.bytes += out.len() as u64;
            out.clear();
        }
    }
    output.write_all(&out).ctx("write", out_path)?;
    c.stats.bytes += out.len() as u64;
    Ok(c.stats)
}

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
            ("{\"id\":1,\"t\":\"yesterday\"}", "t", "not an RFC 3339 timestamp"),
            ("{\"id\":1,\"b\":1}", "b", "expected bool, found number"),
            ("{\"id\":1,\"x\":1e999}", "x", ""),
        ];
        for (line, col, why) in cases {
            let (l, c, r) = err(&format!("{ok}{ok}{line}\n{ok}"));
            assert_eq!(l, 3, "{line}");
            if !col.chars().all(|c| c.is_ascii_digit()) || *col == "9" || *col == "1" || *col == "13" {
                assert_eq!(c, *col, "{line}: {r}");
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
}
