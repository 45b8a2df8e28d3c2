//! Input validation and canonical rows (README "Input rules", docs/FORMAT.md).
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
    /// The stat as JSON, or `None` when it cannot be written validly: a non-finite float, or a
    /// timestamp outside years 0000-9999 (RFC 3339 has four-digit years): the column's stat
    /// is then left out, as Delta allows (docs/FORMAT.md, "Statistics").
    fn to_json(&self) -> Option<serde_json::Value> {
        use chrono::Datelike;
        match self {
            StatValue::Int(i) => Some((*i).into()),
            StatValue::Float(f) => serde_json::Number::from_f64(*f).map(serde_json::Value::Number),
            StatValue::Str(s) => Some(s.clone().into()),
            StatValue::Instant(us) => chrono::DateTime::from_timestamp_micros(*us)
                .filter(|t| (0..=9999).contains(&t.year()))
                .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string().into()),
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
            if let Some(v) = st.min.as_ref().and_then(StatValue::to_json) {
                min.insert(col.name.clone(), v);
            }
            if let (Some(v), false) = (st.max.as_ref().and_then(StatValue::to_json), st.max_unknown) {
                max.insert(col.name.clone(), v);
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
    /// Per timestamp column: the last raw value seen and its instant (µs), to skip re-parsing
    /// repeated values.
    ts_cache: Vec<Option<(String, i64)>>,
    /// Per column, what [`Canonicalizer::canonical`] expects: its key with the delimiter before
    /// it, its type.
    fast: Vec<FastCol>,
    /// Per column, the min/max [`Canonicalizer::canonical`] saw, not yet in `stats`.
    acc: Vec<FastAcc>,
    /// Per timestamp or date column, the last value [`Canonicalizer::canonical`] accepted.
    last: Vec<LastValue>,
    /// The null columns of the row [`Canonicalizer::canonical`] is checking.
    row_nulls: Vec<usize>,
    stats: FileStats,
    /// Line ends (`\n`) the last [`Canonicalizer::chunk_into`] went through.
    lines: u64,
}

/// One column as [`Canonicalizer::canonical`] checks it.
#[derive(Debug, Clone)]
struct FastCol {
    /// `{"name":` for the first column, `,"name":` for the others (the name JSON-escaped).
    lit: Vec<u8>,
    ty: ColumnType,
    nullable: bool,
}

/// Statistics of one column's canonical rows, kept in plain numbers while rows are checked
/// ([`Canonicalizer::fold_fast`] moves them into [`ColumnStats`]). Strings and dates of more
/// than 8 bytes go to [`update_str_stat`] directly.
#[derive(Debug, Clone, Copy)]
struct FastAcc {
    nulls: u64,
    /// A value was seen (for strings: a value of at most 8 bytes).
    any: bool,
    /// Ints; timestamps as µs since the epoch.
    lo: i64,
    hi: i64,
    flo: f64,
    fhi: f64,
    /// Strings and dates of at most 8 bytes as (big-endian word of their bytes padded with
    /// zeros, length): ordered as their bytes are ([`short_cmp`]).
    slo: (u64, u8),
    shi: (u64, u8),
}

impl Default for FastAcc {
    fn default() -> Self {
        FastAcc {
            nulls: 0,
            any: false,
            lo: i64::MAX,
            hi: i64::MIN,
            flo: 0.0,
            fhi: 0.0,
            slo: (0, 0),
            shi: (0, 0),
        }
    }
}

/// The last timestamp or date value of a column [`Canonicalizer::canonical`] accepted, so a
/// repeated value is compared, not parsed again.
#[derive(Debug, Clone, Default)]
struct LastValue {
    raw: Vec<u8>,
    /// The timestamp's instant (µs since the epoch).
    us: i64,
    ok: bool,
}

enum Rejection {
    /// A column-specific problem.
    Column(String, String),
    /// A position-specific problem (1-based byte column).
    At(usize, String),
}

impl<'s> Canonicalizer<'s> {
    fn new(schema: &'s Schema) -> Self {
        let key_prefix: Vec<Vec<u8>> = schema
            .columns
            .iter()
            .map(|c| {
                let mut k = serde_json::to_vec(&c.name).unwrap_or_default();
                k.push(b':');
                k
            })
            .collect();
        let fast = schema
            .columns
            .iter()
            .zip(&key_prefix)
            .enumerate()
            .map(|(ci, (c, k))| FastCol {
                lit: [if ci == 0 { &b"{"[..] } else { b"," }, k].concat(),
                ty: c.ty,
                nullable: c.nullable,
            })
            .collect();
        let n = schema.columns.len();
        Canonicalizer {
            schema,
            key_prefix,
            slots: vec![None; n],
            ts_cache: vec![None; n],
            fast,
            acc: vec![FastAcc::default(); n],
            last: vec![LastValue::default(); n],
            row_nulls: Vec::with_capacity(n),
            stats: FileStats {
                columns: vec![ColumnStats::default(); n],
                ..FileStats::default()
            },
            lines: 0,
        }
    }

    /// Canonicalise one non-blank line into `out` (appending), or say why not.
    ///
    /// Flat objects without escapes take a hand-written scanner; anything else (escapes, nested
    /// values, malformed JSON) goes through serde_json, which also words the syntax errors.
    fn line(&mut self, text: &str, out: &mut Vec<u8>) -> std::result::Result<(), Rejection> {
        if self.canonical(text.as_bytes()) {
            out.extend_from_slice(text.as_bytes());
            out.push(b'\n');
            return Ok(());
        }
        let mut flat: Vec<(&str, &str)> = Vec::with_capacity(self.schema.columns.len());
        if scan_flat(text, &mut flat) {
            return self.emit(&flat, out);
        }
        let fields: Fields = serde_json::from_str(text).map_err(|e| {
            if let Some((at, reason)) = lone_surrogate(text) {
                return Rejection::At(at + 1, reason);
            }
            let msg = serde_message(&e);
            let reason = if e.is_data() {
                format!("not a JSON object ({msg})")
            } else {
                format!("invalid JSON: {msg}")
            };
            Rejection::At(e.column().max(1), reason)
        })?;
        let fields: Vec<(&str, &str)> = fields.0.iter().map(|(k, v)| (k.0.as_ref(), v.get())).collect();
        self.emit(&fields, out)
    }

    /// Whether `text` is a canonical row already (every column's key in schema order, no
    /// whitespace, each value valid for its column and written as [`Canonicalizer::emit`]
    /// writes it), counting its statistics if it is. Checks every value in full, as `emit`
    /// does; anything else, valid or not, is `false` and its row is not counted: the caller
    /// takes the general path, which canonicalises it or words the error. This is the common
    /// case of rows written by tinydelta or by a tool that prints the schema's columns in order,
    /// and it costs one pass over the line with no copy but the row's own.
    ///
    /// It takes bytes not yet known to be UTF-8: every byte outside a string value must match
    /// an ASCII key, delimiter, literal or digit, and each string value is checked as UTF-8, so
    /// a line it accepts is valid UTF-8 (the line is not checked a second time).
    ///
    /// Statistics: a row's null count and `numRecords` are counted when the whole row is
    /// accepted; each value's min/max goes into [`Canonicalizer::fast`] as soon as the value
    /// is checked, also when a later value of the row is not canonical. That is exact, because
    /// such a row either gets the same values from the general path (min/max are idempotent)
    /// or is refused, and a refusal discards the whole [`Canonicalizer`] (no caller merges the
    /// statistics of a chunk that failed). [`Canonicalizer::fold_fast`] moves them into
    /// `stats`.
    fn canonical(&mut self, b: &[u8]) -> bool {
        self.canonical_row(b, false).is_some()
    }

    /// [`Canonicalizer::canonical`] for the row at the start of `b`: without `newline`, `b` is
    /// the row (the result is `b.len()`); with it, the row must be followed by `\n` in `b` (the
    /// result is the index of that `\n`, and `b` may go on with the next lines: no line end is
    /// looked for first, since a canonical row holds no control character).
    #[inline]
    fn canonical_row(&mut self, b: &[u8], newline: bool) -> Option<usize> {
        if self.fast.is_empty() {
            return None;
        }
        self.row_nulls.clear();
        let end = self.canonical_values(b)?;
        let ends = match newline {
            true => b.get(end) == Some(&b'\n'),
            false => end == b.len(),
        };
        if !ends {
            return None;
        }
        for &ci in &self.row_nulls {
            self.acc[ci].nulls += 1;
        }
        self.stats.num_records += 1;
        Some(end)
    }

    /// [`Canonicalizer::canonical`]'s scan: one pass, the columns in schema order, each
    /// checked against its key (with the delimiter before it) and its type. The index after
    /// the row's closing `}`.
    #[inline]
    fn canonical_values(&mut self, b: &[u8]) -> Option<usize> {
        let mut i = 0;
        for (ci, col) in self.fast.iter().enumerate() {
            if !literal_at(b, i, &col.lit) {
                return None;
            }
            i += col.lit.len();
            let &c = b.get(i)?;
            let acc = &mut self.acc[ci];
            if c == b'n' {
                if !col.nullable || !literal_at(b, i, b"null") {
                    return None;
                }
                i += 4;
                self.row_nulls.push(ci);
                continue;
            }
            match col.ty {
                ColumnType::Int => {
                    let (v, end) = canonical_int(b, i)?;
                    i = end;
                    acc.lo = acc.lo.min(v);
                    acc.hi = acc.hi.max(v);
                    acc.any = true;
                }
                ColumnType::Str | ColumnType::Date | ColumnType::Timestamp => {
                    if c != b'"' {
                        return None;
                    }
                    let s = i + 1;
                    let e = string_end(b, s)?;
                    i = e + 1;
                    let sb = &b[s..e];
                    match col.ty {
                        ColumnType::Timestamp => {
                            let last = &mut self.last[ci];
                            let us = if last.ok && sb.len() == last.raw.len() && starts_with(sb, &last.raw) {
                                last.us
                            } else {
                                // (string_end proved the bytes UTF-8.)
                                let us = simple_timestamp_us(sb)
                                    .or_else(|| std::str::from_utf8(sb).ok().and_then(|s| timestamp_us(s).ok()))?;
                                last.raw.clear();
                                last.raw.extend_from_slice(sb);
                                last.us = us;
                                last.ok = true;
                                us
                            };
                            acc.lo = acc.lo.min(us);
                            acc.hi = acc.hi.max(us);
                            acc.any = true;
                        }
                        ColumnType::Date => {
                            let last = &mut self.last[ci];
                            if !(last.ok && sb.len() == last.raw.len() && starts_with(sb, &last.raw)) {
                                if !std::str::from_utf8(sb).is_ok_and(valid_date) {
                                    return None;
                                }
                                last.raw.clear();
                                last.raw.extend_from_slice(sb);
                                last.ok = true;
                            }
                            string_stat(acc, &mut self.stats.columns[ci], b, s, e);
                        }
                        _ => string_stat(acc, &mut self.stats.columns[ci], b, s, e),
                    }
                }
                ColumnType::Float => {
                    if !matches!(c, b'-' | b'0'..=b'9') {
                        return None;
                    }
                    let end = b[i..]
                        .iter()
                        .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                        .map_or(b.len(), |p| i + p);
                    // Only the ASCII bytes of a number: UTF-8.
                    let Ok(raw) = std::str::from_utf8(&b[i..end]) else {
                        return None;
                    };
                    let Ok(f) = raw.parse::<f64>() else { return None };
                    // Canonical only when written as emit writes it (which also proves it a
                    // JSON number: "1.", "+1", "01" never come out of the formatter).
                    if !f.is_finite() || !float_written_as(f, raw.as_bytes()) {
                        return None;
                    }
                    i = end;
                    let f = if f == 0.0 { 0.0 } else { f };
                    if !acc.any || f < acc.flo {
                        acc.flo = f;
                    }
                    if !acc.any || f > acc.fhi {
                        acc.fhi = f;
                    }
                    acc.any = true;
                }
                ColumnType::Bool => {
                    if literal_at(b, i, b"true") {
                        i += 4;
                    } else if literal_at(b, i, b"false") {
                        i += 5;
                    } else {
                        return None;
                    }
                }
            }
        }
        (b.get(i) == Some(&b'}')).then_some(i + 1)
    }

    /// Move the min/max gathered by [`Canonicalizer::canonical`] into `stats` (before they are
    /// read).
    fn fold_fast(&mut self) {
        for ((acc, st), col) in self.acc.iter_mut().zip(&mut self.stats.columns).zip(&self.fast) {
            st.null_count += acc.nulls;
            if acc.any {
                match col.ty {
                    ColumnType::Int => {
                        update_stat(st, StatValue::Int(acc.lo));
                        update_stat(st, StatValue::Int(acc.hi));
                    }
                    ColumnType::Timestamp => {
                        update_stat(st, StatValue::Instant(acc.lo));
                        update_stat(st, StatValue::Instant(acc.hi));
                    }
                    ColumnType::Float => {
                        update_stat(st, StatValue::Float(acc.flo));
                        update_stat(st, StatValue::Float(acc.fhi));
                    }
                    ColumnType::Str | ColumnType::Date => {
                        update_str_stat(st, &short_bytes(acc.slo));
                        update_str_stat(st, &short_bytes(acc.shi));
                    }
                    ColumnType::Bool => {}
                }
            }
            *acc = FastAcc::default();
        }
    }

    /// Write one row from its `(key, raw JSON value)` fields, in input order.
    fn emit(&mut self, fields: &[(&str, &str)], out: &mut Vec<u8>) -> std::result::Result<(), Rejection> {
        self.slots.iter_mut().for_each(|s| *s = None);
        for (i, (k, _)) in fields.iter().enumerate() {
            // Rows usually come in schema order: try the same position first.
            let same = self.schema.columns.get(i).is_some_and(|c| c.name == *k);
            let found = if same {
                Some(i)
            } else {
                self.schema.columns.iter().position(|c| c.name == *k)
            };
            let Some(ci) = found else {
                return Err(Rejection::Column(
                    k.to_string(),
                    "unknown column (not in the table's schema)".into(),
                ));
            };
            if self.slots[ci].is_some() {
                return Err(Rejection::Column(k.to_string(), "duplicate key".into()));
            }
            self.slots[ci] = Some(i);
        }
        let start = out.len();
        let res = self.emit_values(fields, out);
        if res.is_err() {
            out.truncate(start);
        }
        res
    }

    fn emit_values(&mut self, fields: &[(&str, &str)], out: &mut Vec<u8>) -> std::result::Result<(), Rejection> {
        out.push(b'{');
        for ci in 0..self.schema.columns.len() {
            if ci > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.key_prefix[ci]);
            let col = &self.schema.columns[ci];
            let raw = self.slots[ci].map(|i| fields[i].1).unwrap_or("null");
            let st = &mut self.stats.columns[ci];
            let reject = |reason: String| Rejection::Column(col.name.clone(), reason);
            if raw == "null" {
                if !col.nullable {
                    let why = if self.slots[ci].is_some() { "null" } else { "missing" };
                    return Err(reject(format!("{why} value for a NOT NULL column")));
                }
                st.null_count += 1;
                out.extend_from_slice(b"null");
                continue;
            }
            let kind = json_kind(raw);
            let mismatch = || reject(format!("expected {}, found {kind}", col.ty.cli_name()));
            match col.ty {
                ColumnType::Int => {
                    if kind != "number" {
                        return Err(mismatch());
                    }
                    if raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                        return Err(reject(format!(
                            "{raw} has a fraction or exponent, but the column is int"
                        )));
                    }
                    let n: i64 = raw
                        .parse()
                        .map_err(|_| reject(format!("{raw} is outside the 64-bit integer range")))?;
                    // A JSON integer literal is canonical already, except for "-0".
                    if raw == "-0" {
                        out.push(b'0');
                    } else {
                        out.extend_from_slice(raw.as_bytes());
                    }
                    update_stat(st, StatValue::Int(n));
                }
                ColumnType::Float => {
                    if kind != "number" {
                        return Err(mismatch());
                    }
                    let f: f64 = raw.parse().map_err(|_| reject(format!("{raw} is not a number")))?;
                    if !f.is_finite() {
                        return Err(reject(format!("{raw} is outside the 64-bit float range")));
                    }
                    // serde_json prints floats with a fraction or exponent ("18.0", "1e300").
                    let _ = serde_json::to_writer(&mut *out, &f);
                    update_stat(st, StatValue::Float(if f == 0.0 { 0.0 } else { f }));
                }
                ColumnType::Bool => {
                    if kind != "boolean" {
                        return Err(mismatch());
                    }
                    // Delta keeps no min/max for booleans.
                    out.extend_from_slice(raw.as_bytes());
                }
                ColumnType::Str | ColumnType::Date | ColumnType::Timestamp => {
                    if kind != "string" {
                        return Err(mismatch());
                    }
                    let s: Cow<str> = if raw.contains('\\') {
                        Cow::Owned(serde_json::from_str::<String>(raw).map_err(|e| {
                            reject(
                                lone_surrogate(raw)
                                    .map_or_else(|| format!("invalid JSON string: {}", serde_message(&e)), |(_, r)| r),
                            )
                        })?)
                    } else {
                        Cow::Borrowed(&raw[1..raw.len() - 1])
                    };
                    match col.ty {
                        ColumnType::Date => {
                            if !valid_date(&s) {
                                return Err(reject(format!(
                                    "{raw} is not a date (YYYY-MM-DD, years 0001-9999, Delta's date range)"
                                )));
                            }
                            update_str_stat(st, s.as_bytes());
                        }
                        ColumnType::Timestamp => {
                            let us = match &self.ts_cache[ci] {
                                Some((last, us)) if last == s.as_ref() => *us,
                                _ => {
                                    let us = timestamp_us(&s).map_err(|why| reject(format!("{raw} {why}")))?;
                                    self.ts_cache[ci] = Some((s.to_string(), us));
                                    us
                                }
                            };
                            update_stat(st, StatValue::Instant(us));
                        }
                        _ => update_str_stat(st, s.as_bytes()),
                    }
                    if matches!(s, Cow::Borrowed(_)) {
                        out.extend_from_slice(raw.as_bytes());
                    } else {
                        let _ = serde_json::to_writer(&mut *out, s.as_ref());
                    }
                }
            }
        }
        out.extend_from_slice(b"}\n");
        self.stats.num_records += 1;
        Ok(())
    }

    /// Canonicalise every line of `chunk` (whole lines; the last may lack its `\n` only at the
    /// end of input) into `out`; `first_line` is the 1-based number of its first line. With
    /// `defer`, a chunk that is its own canonical form (every
    /// line canonical and ending in `\n`, no blank line, BOM or CR) is validated and counted but
    /// not copied: the result is `true` and `out` is untouched, so the caller writes `chunk`
    /// itself (issue 10: the data is written once, never copied through a second buffer).
    fn chunk_into(
        &mut self,
        chunk: &[u8],
        first_line: u64,
        out: &mut Vec<u8>,
        defer: bool,
    ) -> std::result::Result<bool, LineError> {
        let mut line_no = first_line;
        let mut rest = chunk;
        let mut deferred = defer;
        let max = max_line_bytes();
        while !rest.is_empty() {
            // The common case: a canonical row and its `\n`, found in one pass.
            if let Some(end) = self.canonical_row(rest, true)
                && end <= max
            {
                if !deferred {
                    out.extend_from_slice(&rest[..=end]);
                }
                rest = &rest[end + 1..];
                line_no += 1;
                continue;
            }
            let start = chunk.len() - rest.len();
            let (mut bytes, next, ended) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], &rest[i + 1..], true),
                None => (rest, &rest[rest.len()..], false),
            };
            rest = next;
            let whole = bytes.len();
            if bytes.len() > max {
                return Err((
                    line_no,
                    "1".into(),
                    format!(
                        "the line is {} bytes, longer than the maximum of {max} bytes",
                        bytes.len()
                    ),
                ));
            }
            // A UTF-8 BOM is skipped at the start of any line (files concatenated with `cat`).
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            let blank = bytes.iter().all(u8::is_ascii_whitespace);
            if deferred {
                // `canonical` counts the row's statistics when it says yes (and proves the
                // line UTF-8, so the common case checks it once).
                let canonical = !blank && self.canonical(bytes);
                if canonical && ended && bytes.len() == whole {
                    line_no += 1;
                    continue;
                }
                out.extend_from_slice(&chunk[..start]);
                deferred = false;
                if canonical {
                    out.extend_from_slice(bytes);
                    out.push(b'\n');
                    line_no += 1;
                    continue;
                }
            }
            let text = match std::str::from_utf8(bytes) {
                Ok(t) => t,
                Err(e) => {
                    let col = String::from_utf8_lossy(&bytes[..e.valid_up_to()]).chars().count() + 1;
                    return Err((line_no, col.to_string(), "invalid UTF-8".into()));
                }
            };
            if !blank {
                match self.line(text, out) {
                    Ok(()) => {}
                    // A schema column is quoted ("year"); a bare number is a character position.
                    Err(Rejection::Column(col, reason)) => {
                        let quoted = serde_json::to_string(&col).unwrap_or(col);
                        return Err((line_no, quoted, excerpt(&reason)));
                    }
                    Err(Rejection::At(pos, reason)) => {
                        // serde_json reports a 1-based byte column; report characters.
                        let mut end = (pos - 1).min(text.len());
                        while !text.is_char_boundary(end) {
                            end -= 1;
                        }
                        let col = text[..end].chars().count() + 1;
                        return Err((line_no, col.to_string(), excerpt(&reason)));
                    }
                }
            }
            line_no += 1;
        }
        self.fold_fast();
        // (A last line without `\n` was counted as a line above.)
        self.lines = line_no - first_line - u64::from(!chunk.is_empty() && !chunk.ends_with(b"\n"));
        Ok(deferred)
    }
}

/// (line, column, reason) of a rejected line.
type LineError = (u64, String, String);

/// The default maximum line length: 16 MiB. Memory per validation is bounded by it, not by the
/// input (README, "Limits").
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 << 20;

static MAX_LINE_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_LINE_BYTES);

/// The longest line (bytes, without its `\n`) any validation accepts; a longer one is
/// [`Error::BadInput`] naming the line.
pub fn max_line_bytes() -> usize {
    MAX_LINE_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Set the maximum line length for this process (the mount's `--max-line-bytes`).
pub fn set_max_line_bytes(n: usize) {
    MAX_LINE_BYTES.store(n.max(1), std::sync::atomic::Ordering::Relaxed);
}

/// Longest reason kept in an error: a rejected value is quoted only up to about 200 bytes, so a
/// 50 MB integer makes a short note, not a 50 MB one.
const MAX_REASON_BYTES: usize = 240;

fn excerpt(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_string();
    }
    let mut end = 200;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes in all)", &reason[..end], reason.len())
}

/// Streaming validation and canonicalisation of rows written sequentially (the mount's
/// `incoming/`): feed the bytes in order; each complete line is validated as it arrives (so a bad
/// line fails the write that completes it) and its canonical form appended to the caller's
/// output, and [`LineCheck::finish`] handles a last line without `\n`. Memory: the unfinished
/// last line, at most [`max_line_bytes`].
///
/// [`LineCheck::feed_kept`] and [`LineCheck::finish_kept`] write no rows while every row is its
/// own canonical form (the input is then its own data file, issue 10), only from the first row
/// that is not.
#[derive(Debug)]
pub struct LineCheck {
    schema: Schema,
    pending: Vec<u8>,
    line: u64,
    offset: u64,
    stats: FileStats,
    /// Every complete line so far is its own canonical row, byte for byte (then `stats.bytes`
    /// is the length of the input up to the end of its last complete line).
    same: bool,
}

/// What [`LineCheck::feed_kept`] and [`LineCheck::finish_kept`] did with the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Every row so far is its own canonical form: the canonical rows are the input's first
    /// `stats.bytes` bytes, and nothing was appended to the output.
    Same,
    /// The output got canonical rows. `prefix` > 0 the first time only (when a row is not its own
    /// canonical form for the first time): the input's first `prefix` bytes, rows canonical as
    /// they are, come before what was appended (the caller copies them; they were not).
    Rows {
        /// Bytes of the input to put before the appended rows.
        prefix: u64,
    },
}

/// How many cores validation uses (`available_parallelism`, read once: it reads cgroup files
/// each time it is asked, a dozen system calls per write of the mount).
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl LineCheck {
    /// A check against `schema`, expecting bytes from offset 0.
    pub fn new(schema: Schema) -> LineCheck {
        let stats = FileStats {
            columns: vec![ColumnStats::default(); schema.columns.len()],
            ..FileStats::default()
        };
        LineCheck {
            schema,
            pending: Vec::new(),
            line: 1,
            offset: 0,
            stats,
            same: true,
        }
    }

    /// The schema it checks against.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The offset (bytes) the next [`LineCheck::feed`] must start at.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of canonical rows of the complete lines fed so far (while [`Kept::Same`], the
    /// length of the input up to the end of its last complete line).
    pub fn stats_bytes(&self) -> u64 {
        self.stats.bytes
    }

    fn bad(source: &str, (line, column, reason): LineError) -> Error {
        Error::BadInput {
            file: source.to_string(),
            line,
            column,
            reason,
        }
    }

    /// Check the whole lines `complete`. With `defer` and every line its own canonical row:
    /// `Ok(true)` and `out` untouched; otherwise `Ok(false)` and every row appended to `out`.
    /// `beside` (when still there) is taken and run on this thread while helper threads check
    /// pieces of a large `complete`.
    fn run(
        &mut self,
        source: &str,
        complete: &[u8],
        out: &mut Vec<u8>,
        defer: bool,
        beside: &mut Beside,
    ) -> Result<bool> {
        let pieces = split_lines(complete, LINE_CHECK_PIECE);
        if pieces.len() == 1 {
            let mut c = Canonicalizer::new(&self.schema);
            let before = out.len();
            let same = c
                .chunk_into(complete, self.line, out, defer)
                .map_err(|e| Self::bad(source, e))?;
            c.stats.bytes = if same { complete.len() } else { out.len() - before } as u64;
            self.stats.merge(&c.stats);
            self.line += c.lines;
            return Ok(same);
        }
        // A large write (the mount takes up to 1 MiB per request): its pieces are checked by
        // this thread and the helper threads at the same time, so a request costs about the
        // time of its share of the pieces. Each piece counts its lines from 1: their numbers in
        // the input are known once the pieces before it are counted (no pass over the write
        // to count them first).
        let results = check_pieces(&self.schema, complete, &pieces, defer, beside);
        // The first bad line in input order wins, as in one pass.
        // A failed write counts none of its rows (as in one pass): the caller may feed the
        // good lines before the bad one again (crate::format::diagnose does).
        let mut line = self.line;
        let mut failed = None;
        for (_, r) in &results {
            match r {
                Ok((_, _, lines)) => line += lines,
                Err((at, column, reason)) => {
                    failed = Some((line + at - 1, column.clone(), reason.clone()));
                    break;
                }
            }
        }
        let mut all_same = true;
        if failed.is_none() {
            for (st, same, _) in results.iter().filter_map(|(_, r)| r.as_ref().ok()) {
                self.stats.merge(st);
                all_same &= *same;
            }
        }
        let mut keep = Vec::with_capacity(results.len());
        for (i, (rows, r)) in results.into_iter().enumerate() {
            if failed.is_none() && !all_same {
                match r {
                    Ok((_, true, _)) => out.extend_from_slice(pieces[i]),
                    _ => out.extend_from_slice(&rows),
                }
            }
            if rows.capacity() <= 2 * LINE_CHECK_PIECE * 4 {
                keep.push(rows);
            }
        }
        PIECE_ROWS.with(|b| {
            let mut b = b.borrow_mut();
            b.extend(keep);
            b.truncate(MAX_PIECES);
        });
        if let Some(e) = failed {
            return Err(Self::bad(source, e));
        }
        self.line = line;
        Ok(all_same)
    }

    /// Validate the complete lines `data` finishes, appending their canonical rows to `out`.
    /// Errors: [`Error::BadInput`] naming `source`, the 1-based line, the column and the reason
    /// (also for a line longer than the maximum).
    pub fn feed(&mut self, source: &str, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.same = false;
        self.feed_kept(source, data, out).map(|_| ())
    }

    /// [`LineCheck::feed`], appending no rows while every row so far is its own canonical form
    /// ([`Kept`]).
    pub fn feed_kept(&mut self, source: &str, data: &[u8], out: &mut Vec<u8>) -> Result<Kept> {
        self.feed_kept_beside(source, data, out, &mut || {})
    }

    /// [`LineCheck::feed_kept`], running `beside` once on this thread (also when the check
    /// fails), while helper threads check the pieces of a large write if there are any (the
    /// mount writes the same bytes into the page cache meanwhile, issue 10).
    pub fn feed_kept_beside(
        &mut self,
        source: &str,
        data: &[u8],
        out: &mut Vec<u8>,
        beside: &mut dyn FnMut(),
    ) -> Result<Kept> {
        let mut beside = Some(beside);
        let r = self.feed_inner(source, data, out, &mut beside);
        if let Some(f) = beside {
            f();
        }
        r
    }

    fn feed_inner(&mut self, source: &str, data: &[u8], out: &mut Vec<u8>, beside: &mut Beside) -> Result<Kept> {
        self.offset += data.len() as u64;
        let at = out.len();
        let (was_same, prefix) = (self.same, self.stats.bytes);
        let Some(nl) = memchr::memrchr(b'\n', data) else {
            self.pending.extend_from_slice(data);
            let max = max_line_bytes();
            if self.pending.len() > max {
                return Err(Self::bad(
                    source,
                    (
                        self.line,
                        "1".into(),
                        format!("the line is longer than the maximum of {max} bytes"),
                    ),
                ));
            }
            return Ok(self.kept(was_same, prefix));
        };
        let mut start = 0;
        if !self.pending.is_empty() {
            // Finish the pending line on its own, then check the rest where it lies (no copy).
            let first = memchr::memchr(b'\n', data).unwrap_or(nl);
            let mut line = std::mem::take(&mut self.pending);
            line.extend_from_slice(&data[..=first]);
            self.same = self.run(source, &line, out, self.same, &mut None)?;
            start = first + 1;
            if start <= nl {
                let same_before = self.same;
                self.same = self.run(source, &data[start..=nl], out, self.same, beside)?;
                if same_before && !self.same {
                    // The pending line was its own row: it goes before the rows just written.
                    out.splice(at..at, line.iter().copied());
                }
            }
            line.clear();
            self.pending = line;
        } else {
            self.same = self.run(source, &data[start..=nl], out, self.same, beside)?;
        }
        self.pending.extend_from_slice(&data[nl + 1..]);
        Ok(self.kept(was_same, prefix))
    }

    fn kept(&self, was_same: bool, prefix: u64) -> Kept {
        match (was_same, self.same) {
            (_, true) => Kept::Same,
            (true, false) => Kept::Rows { prefix },
            (false, false) => Kept::Rows { prefix: 0 },
        }
    }

    /// The end of the input: validate a last line without `\n` (appending its row to `out`) and
    /// return the statistics of every row fed. Errors: as [`LineCheck::feed`].
    pub fn finish(&mut self, source: &str, out: &mut Vec<u8>) -> Result<FileStats> {
        self.same = false;
        self.finish_kept(source, out).map(|(st, _)| st)
    }

    /// [`LineCheck::finish`] after [`LineCheck::feed_kept`]: a last line without `\n` is never
    /// its own row (its row ends in `\n`).
    pub fn finish_kept(&mut self, source: &str, out: &mut Vec<u8>) -> Result<(FileStats, Kept)> {
        let (was_same, prefix) = (self.same, self.stats.bytes);
        if !self.pending.is_empty() {
            let tail = std::mem::take(&mut self.pending);
            self.same = self.run(source, &tail, out, self.same, &mut None)?;
        }
        Ok((self.stats.clone(), self.kept(was_same, prefix)))
    }
}

/// Scan `text` as one flat JSON object whose keys and string values contain no escapes or
/// control characters and whose values are strings, numbers, `true`, `false` or `null`,
/// pushing `(key, raw value)` pairs. Returns `false` for anything else, valid JSON or not;
/// the caller then parses with serde_json. Accepts exactly what RFC 8259 accepts within that
/// subset.
fn scan_flat<'a>(text: &'a str, fields: &mut Vec<(&'a str, &'a str)>) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    let ws = |i: &mut usize| {
        while *i < b.len() && matches!(b[*i], b' ' | b'\t' | b'\n' | b'\r') {
            *i += 1;
        }
    };
    // A string starting at b[i] == '"'; returns the index after the closing quote.
    let string = |i: usize| -> Option<usize> {
        let mut j = i + 1;
        while j < b.len() {
            match b[j] {
                b'"' => return Some(j + 1),
                b'\\' | 0..=0x1f => return None,
                _ => j += 1,
            }
        }
        None
    };
    let digits = |i: &mut usize| -> bool {
        let s = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > s
    };
    ws(&mut i);
    if b.get(i) != Some(&b'{') {
        return false;
    }
    i += 1;
    ws(&mut i);
    if b.get(i) == Some(&b'}') {
        i += 1;
        ws(&mut i);
        return i == b.len();
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return false;
        }
        let Some(kend) = string(i) else { return false };
        let key = &text[i + 1..kend - 1];
        i = kend;
        ws(&mut i);
        if b.get(i) != Some(&b':') {
            return false;
        }
        i += 1;
        ws(&mut i);
        let vstart = i;
        match b.get(i) {
            Some(b'"') => match string(i) {
                Some(e) => i = e,
                None => return false,
            },
            Some(b'-' | b'0'..=b'9') => {
                if b[i] == b'-' {
                    i += 1;
                }
                match b.get(i) {
                    Some(b'0') => i += 1,
                    Some(b'1'..=b'9') => {
                        digits(&mut i);
                    }
                    _ => return false,
                }
                if b.get(i) == Some(&b'.') {
                    i += 1;
                    if !digits(&mut i) {
                        return false;
                    }
                }
                if matches!(b.get(i), Some(b'e' | b'E')) {
                    i += 1;
                    if matches!(b.get(i), Some(b'+' | b'-')) {
                        i += 1;
                    }
                    if !digits(&mut i) {
                        return false;
                    }
                }
            }
            _ => {
                let lit = [&b"true"[..], b"false", b"null"]
                    .into_iter()
                    .find(|l| b[i..].starts_with(l));
                match lit {
                    Some(l) => i += l.len(),
                    None => return false,
                }
            }
        }
        fields.push((key, &text[vstart..i]));
        ws(&mut i);
        match b.get(i) {
            Some(b',') => {
                i += 1;
                ws(&mut i);
            }
            Some(b'}') => {
                i += 1;
                ws(&mut i);
                return i == b.len();
            }
            _ => return false,
        }
    }
}

#[inline]
fn update_stat(st: &mut ColumnStats, v: StatValue) {
    match (&mut st.min, &mut st.max, &v) {
        (Some(StatValue::Int(lo)), Some(StatValue::Int(hi)), StatValue::Int(n)) => {
            *lo = (*lo).min(*n);
            *hi = (*hi).max(*n);
        }
        (Some(StatValue::Instant(lo)), Some(StatValue::Instant(hi)), StatValue::Instant(n)) => {
            *lo = (*lo).min(*n);
            *hi = (*hi).max(*n);
        }
        _ => {
            if st.min.as_ref().is_none_or(|m| v < *m) {
                st.min = Some(v.clone());
            }
            if st.max.as_ref().is_none_or(|m| v > *m) {
                st.max = Some(v);
            }
        }
    }
}

/// Min/max for strings and dates without allocating unless a bound moves. Strings longer than
/// the stat prefix keep a truncated `min` and make `max` unknown (a prefix is a lower bound,
/// never an upper one).
///
/// `s` is a string value's UTF-8 bytes (checked by the caller; compared as bytes, which orders
/// UTF-8 as its characters), converted to a `String` only when a bound moves.
fn update_str_stat(st: &mut ColumnStats, s: &[u8]) {
    // At most STRING_STAT_PREFIX bytes is at most that many characters: no need to count them.
    let cut = match s.len() <= STRING_STAT_PREFIX {
        true => None,
        // The start of character number STRING_STAT_PREFIX: the bytes that are not UTF-8
        // continuation bytes (0b10xx_xxxx) start characters.
        false => s
            .iter()
            .enumerate()
            .filter(|(_, c)| (**c as i8) >= -0x40)
            .nth(STRING_STAT_PREFIX)
            .map(|(i, _)| i),
    };
    let (s, long) = match cut {
        Some(cut) => (&s[..cut], true),
        None => (s, false),
    };
    st.max_unknown |= long;
    if !matches!(&st.min, Some(StatValue::Str(m)) if short_cmp(m.as_bytes(), s).is_le()) {
        st.min = Some(StatValue::Str(String::from_utf8_lossy(s).into_owned()));
    }
    if !long && !matches!(&st.max, Some(StatValue::Str(m)) if short_cmp(m.as_bytes(), s).is_ge()) {
        st.max = Some(StatValue::Str(String::from_utf8_lossy(s).into_owned()));
    }
}

/// `a.cmp(b)`, without a `memcmp` call for strings of at most 8 bytes (codes, ids: most string
/// columns): both zero-padded into a big-endian u64, then the shorter first on a tie (a string
/// is less than any longer one it is a prefix of, and padding only adds zeros).
#[inline]
fn short_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if a.len() > 8 || b.len() > 8 {
        return a.cmp(b);
    }
    // Byte by byte: a copy into an array costs a memcpy call and a stalled load.
    let word = |s: &[u8]| {
        let w = s.iter().fold(0u64, |w, &c| (w << 8) | u64::from(c));
        w.checked_shl(8 * (8 - s.len() as u32)).unwrap_or(0)
    };
    word(a).cmp(&word(b)).then(a.len().cmp(&b.len()))
}

impl ColumnStats {
    fn merge(&mut self, o: &ColumnStats) {
        self.null_count += o.null_count;
        self.max_unknown |= o.max_unknown;
        if let Some(m) = &o.min
            && self.min.as_ref().is_none_or(|s| m < s)
        {
            self.min = Some(m.clone());
        }
        if let Some(m) = &o.max
            && self.max.as_ref().is_none_or(|s| m > s)
        {
            self.max = Some(m.clone());
        }
    }
}

impl FileStats {
    fn merge(&mut self, o: &FileStats) {
        self.num_records += o.num_records;
        self.bytes += o.bytes;
        for (a, b) in self.columns.iter_mut().zip(&o.columns) {
            a.merge(b);
        }
    }
}

/// `hay` starts with `needle`, compared eight bytes at a time: keys and timestamps are short, and
/// a `memcmp` call per key cost more than the comparison (issue 10's profile).
#[inline]
fn starts_with(hay: &[u8], needle: &[u8]) -> bool {
    if hay.len() < needle.len() {
        return false;
    }
    let (mut h, mut n) = (&hay[..needle.len()], needle);
    while let (Some((hw, hr)), Some((nw, nr))) = (h.split_first_chunk::<8>(), n.split_first_chunk::<8>()) {
        if hw != nw {
            return false;
        }
        (h, n) = (hr, nr);
    }
    h.iter().zip(n).all(|(a, b)| a == b)
}

/// Whether `raw` is `f` as [`Canonicalizer::emit`] writes a float column's value (serde_json's
/// formatting), formatted into a buffer on the stack.
fn float_written_as(f: f64, raw: &[u8]) -> bool {
    let mut buf = [0u8; 40];
    let mut w: &mut [u8] = &mut buf;
    if serde_json::to_writer(&mut w, &f).is_err() {
        return false;
    }
    let n = 40 - w.len();
    &buf[..n] == raw
}

/// `b[i..]` starts with `lit`.
#[inline]
fn literal_at(b: &[u8], i: usize, lit: &[u8]) -> bool {
    b.get(i..).is_some_and(|h| starts_with(h, lit))
}

/// The canonical JSON integer at `b[i..]` (no leading zero, no `-0`, no fraction or exponent:
/// the caller checks the byte after it), its value and the index after it.
#[inline]
fn canonical_int(b: &[u8], mut i: usize) -> Option<(i64, usize)> {
    let neg = b.get(i) == Some(&b'-');
    if neg {
        i += 1;
    }
    // One pass: at most 19 digits fit a u64 (< 1.9e19), checked against the i64 range below.
    let first = i;
    let mut m: u64 = 0;
    while let Some(&c) = b.get(i) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        if i - first == 19 {
            return None;
        }
        m = m * 10 + u64::from(d);
        i += 1;
    }
    let digits = i - first;
    if digits == 0 || (b[first] == b'0' && (digits > 1 || neg)) {
        return None;
    }
    let v = match (neg, i64::try_from(m)) {
        (false, Ok(v)) => v,
        (true, Ok(v)) => -v,
        (true, Err(_)) if m == 1 << 63 => i64::MIN,
        _ => return None,
    };
    Some((v, i))
}

/// The index of the `"` that ends the string value whose bytes start at `b[s]` (just after its
/// opening quote), when the value has no escape or control character and is valid UTF-8;
/// `None` otherwise (the general path decides). ASCII is scanned eight bytes at a time: a word
/// without a quote, backslash, control or non-ASCII byte is skipped whole; a value with a
/// non-ASCII byte is checked as UTF-8 in full.
#[inline]
fn string_end(b: &[u8], s: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let special = |c: u8| c == b'"' || c == b'\\' || c < 0x20;
    let mut j = s;
    while let Some(w) = b.get(j..j + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        let w = u64::from_le_bytes(word);
        let q = w ^ (ONES * u64::from(b'"'));
        let bs = w ^ (ONES * u64::from(b'\\'));
        // The high bit of each byte that is a quote, a backslash, below 0x20 or non-ASCII (the
        // borrows of the subtractions can also mark a byte after a marked one: only the first
        // mark counts, and it is exact).
        let marks =
            ((q.wrapping_sub(ONES) & !q) | (bs.wrapping_sub(ONES) & !bs) | (w.wrapping_sub(ONES * 0x20) & !w) | w)
                & HIGH;
        if marks != 0 {
            j += (marks.trailing_zeros() / 8) as usize;
            break;
        }
        j += 8;
    }
    while let Some(&c) = b.get(j) {
        if special(c) || c >= 0x80 {
            break;
        }
        j += 1;
    }
    match *b.get(j)? {
        b'"' => Some(j),
        c if c >= 0x80 => {
            let end = j + b[j..].iter().position(|&c| special(c))?;
            (b[end] == b'"' && std::str::from_utf8(&b[s..end]).is_ok()).then_some(end)
        }
        _ => None,
    }
}

/// Count the string (or date) value `b[s..e]` (UTF-8, checked) in a column's statistics: at
/// most 8 bytes in `acc` as a word, longer ones in `st` ([`update_str_stat`]).
#[inline]
fn string_stat(acc: &mut FastAcc, st: &mut ColumnStats, b: &[u8], s: usize, e: usize) {
    let len = e - s;
    if len > 8 {
        update_str_stat(st, &b[s..e]);
        return;
    }
    // The first byte most significant, zeros after the last: as short_cmp orders them.
    let word = match b.get(s..s + 8) {
        Some(w) => {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            u64::from_be_bytes(word) & !u64::MAX.checked_shr(8 * len as u32).unwrap_or(0)
        }
        None => b[s..e]
            .iter()
            .fold(0u64, |w, &c| (w << 8) | u64::from(c))
            .checked_shl(8 * (8 - len as u32))
            .unwrap_or(0),
    };
    let key = (word, len as u8);
    if !acc.any || key < acc.slo {
        acc.slo = key;
    }
    if !acc.any || key > acc.shi {
        acc.shi = key;
    }
    acc.any = true;
}

/// The bytes of a string kept by [`string_stat`] as (word, length).
fn short_bytes((word, len): (u64, u8)) -> Vec<u8> {
    word.to_be_bytes()[..usize::from(len).min(8)].to_vec()
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

/// serde_json's message without its " at line L column C" (positions within one value or line,
/// not the file's: the caller names the file's line and column).
fn serde_message(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    msg.rsplit_once(" at line ").map(|(m, _)| m.to_string()).unwrap_or(msg)
}

/// The first `\uXXXX` escape in `text` that is a UTF-16 surrogate without its pair (JSON text
/// must encode a Unicode scalar value, RFC 8259 section 7 and RFC 3629): its byte offset and the
/// sentence `invalid JSON string escape: a lone surrogate \ud800`.
fn lone_surrogate(text: &str) -> Option<(usize, String)> {
    let b = text.as_bytes();
    let unit = |i: usize| -> Option<u16> {
        (b.get(i) == Some(&b'\\') && b.get(i + 1) == Some(&b'u'))
            .then(|| text.get(i + 2..i + 6).and_then(|h| u16::from_str_radix(h, 16).ok()))
            .flatten()
    };
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit(i) {
            Some(0xD800..=0xDBFF) if !unit(i + 6).is_some_and(|l| (0xDC00..=0xDFFF).contains(&l)) => {
                return Some((
                    i,
                    format!("invalid JSON string escape: a lone surrogate {}", &text[i..i + 6]),
                ));
            }
            Some(0xD800..=0xDBFF) => i += 12,
            Some(0xDC00..=0xDFFF) => {
                return Some((
                    i,
                    format!("invalid JSON string escape: a lone surrogate {}", &text[i..i + 6]),
                ));
            }
            Some(_) => i += 6,
            None => i += 2,
        }
    }
    None
}

/// `YYYY-MM-DD`, exactly ten characters, a real calendar day in the years 0001-9999 (Delta's
/// date range, PROTOCOL "Primitive Types"; Parquet readers refuse year 0).
fn valid_date(s: &str) -> bool {
    // Digits where `YYYY-MM-DD` has them: chrono's parser also takes a sign or padding spaces
    // ("+020-01-01", "2020- 1-01"), which are not this form (review finding).
    s.len() == 10
        && s.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
        && !s.starts_with("0000")
        && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
}

/// An RFC 3339 timestamp's instant, µs since the epoch, when it is in the years 0001-9999 in
/// UTC (Delta's timestamp range, PROTOCOL "Primitive Types"). A leap second (`:60`) is taken
/// as chrono reads it (README, "Input rules"). Errors: the reason, to follow the raw value.
fn timestamp_us(s: &str) -> std::result::Result<i64, &'static str> {
    use chrono::Datelike;
    let t = chrono::DateTime::parse_from_rfc3339(s).map_err(|_| "is not an RFC 3339 timestamp")?;
    if !(1..=9999).contains(&t.naive_utc().year()) {
        return Err("is outside the years 0001-9999 in UTC (Delta's timestamp range)");
    }
    Ok(t.timestamp_micros())
}

/// [`timestamp_us`] of the common form `YYYY-MM-DDTHH:MM:SSZ` (seconds 00-59), computed from
/// its digits; `None` for any other form or an impossible date or time (the caller then asks
/// [`timestamp_us`], which decides).
fn simple_timestamp_us(s: &[u8]) -> Option<i64> {
    if s.len() != 20 || s[4] != b'-' || s[7] != b'-' || s[10] != b'T' || s[13] != b':' || s[16] != b':' || s[19] != b'Z'
    {
        return None;
    }
    let num = |a: usize, n: usize| {
        s[a..a + n].iter().try_fold(0u32, |v, &c| {
            let d = c.wrapping_sub(b'0');
            (d <= 9).then_some(v * 10 + u32::from(d))
        })
    };
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if y == 0 || sec > 59 {
        return None;
    }
    let t = chrono::NaiveDate::from_ymd_opt(i32::try_from(y).ok()?, mo, d)?.and_hms_opt(h, mi, sec)?;
    Some(t.and_utc().timestamp_micros())
}

/// Input is cut into chunks of about this many bytes (whole lines) for the worker threads: small
/// enough that the few chunks in flight reuse the same buffers (1 MiB chunks cost a page fault
/// per 4 KiB of each fresh buffer, issue 10), large enough that handing them over costs nothing.
const CHUNK_BYTES: usize = 256 << 10;

/// Read whole lines from `input` until at least [`CHUNK_BYTES`] are in `chunk` (more only when
/// one line is longer) or the input ends. Returns false at end of input with nothing read.
/// A chunk ends at the first line end past [`CHUNK_BYTES`], however much `input` has buffered.
fn read_chunk<R: BufRead>(input: &mut R, chunk: &mut Vec<u8>, source: &str) -> Result<bool> {
    chunk.clear();
    loop {
        let buf = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("read", source, e)),
        };
        if buf.is_empty() {
            return Ok(!chunk.is_empty());
        }
        let from = CHUNK_BYTES.saturating_sub(chunk.len() + 1);
        if chunk.len() + buf.len() >= CHUNK_BYTES
            && let Some(nl) = memchr::memchr(b'\n', &buf[from..]).map(|p| from + p)
        {
            chunk.extend_from_slice(&buf[..=nl]);
            input.consume(nl + 1);
            return Ok(true);
        }
        let n = buf.len();
        chunk.extend_from_slice(buf);
        input.consume(n);
    }
}

/// Stream JSONL from `input` to `output` as canonical rows (README "Input rules"), returning the
/// statistics of what was written.
///
/// `source` names the input in errors (a path, `<stdin>`, an `incoming/` name). Accepts CRLF, a
/// missing final newline, blank lines, a UTF-8 BOM at the start of any line, any whitespace and key order, ints in
/// float columns, and omitted nullable keys. Input is read in chunks of whole lines (about 1 MiB,
/// or one line if longer) canonicalised by one thread per core; memory is a few chunks, bounded
/// by the longest line, never the file. Errors: [`Error::BadInput`] with the 1-based line, the
/// column name (or character position) and the reason, at the first bad line; [`Error::Io`] for
/// read or write failures (`out_path` names the output).
pub fn canonicalize<R: BufRead, W: Write>(
    schema: &Schema,
    source: &str,
    mut input: R,
    output: &mut W,
    out_path: &std::path::Path,
) -> Result<FileStats> {
    let bad = |(line, column, reason): LineError| Error::BadInput {
        file: source.to_string(),
        line,
        column,
        reason,
    };
    let mut first = Vec::with_capacity(CHUNK_BYTES + (64 << 10));
    let mut c = Canonicalizer::new(schema);
    if !read_chunk(&mut input, &mut first, source)? {
        return Ok(c.stats);
    }
    let mut next = Vec::with_capacity(CHUNK_BYTES + (64 << 10));
    let more = read_chunk(&mut input, &mut next, source)?;
    let workers = cores().min(8);
    if !more || workers == 1 {
        // Small input (or one core): no threads.
        let mut out = Vec::with_capacity(first.len() + first.len() / 4);
        let mut line = 1;
        let mut chunk = first;
        let mut have = true;
        let mut pending = more.then_some(next);
        while have {
            out.clear();
            let same = c.chunk_into(&chunk, line, &mut out, true).map_err(bad)?;
            line += c.lines;
            let rows: &[u8] = if same { &chunk } else { &out };
            output.write_all(rows).ctx("write", out_path)?;
            c.stats.bytes += rows.len() as u64;
            match pending.take() {
                Some(p) => chunk = p,
                None => have = read_chunk(&mut input, &mut chunk, source)?,
            }
        }
        return Ok(c.stats);
    }
    parallel(schema, source, input, output, out_path, first, next, workers).map_err(|e| match e {
        Either::Line(l) => bad(l),
        Either::Other(e) => e,
    })
}

/// [`check_canonical_file`]'s threads take the file in segments of this many bytes, the next
/// one whenever they are done with one (a busy core takes fewer); a segment is the lines that
/// start in its byte range.
const SEGMENT_BYTES: u64 = 1 << 20;

/// Bytes a thread of [`check_canonical_file`] reads at once: small enough to stay in the core's
/// cache between the `pread` and the check (a buffer that large costs ~0.2 ns/byte to fill,
/// issue 10), larger only for a longer line.
const CHECK_READ_BYTES: usize = 256 << 10;

/// Whether the first `len` bytes of `file` are already canonical rows, every line its own
/// canonical form ending in `\n` (what [`canonicalize`] would write back byte for byte): then the
/// statistics [`canonicalize`] would return for them (`bytes` = `len`); `None` from the first
/// line that is not (blank, BOM, CR, no `\n` after the last row, another spelling of a valid
/// row, an invalid or over-long line): the caller then runs [`canonicalize`], which
/// canonicalises the rows or words the error with its line and column.
///
/// Every row is checked in full, by the same check as [`canonicalize`]'s (README "Input
/// rules"). The file is read with `pread` by one thread per core, each taking the next
/// [`SEGMENT_BYTES`] of it; memory is a [`CHECK_READ_BYTES`] buffer per thread (more for a longer
/// line, at most the longest line allowed, [`max_line_bytes`]). Meant for a file nobody else
/// writes (`tinydelta append --file` checks its own copy of the input, README "Benchmarks").
///
/// Errors: [`Error::Io`] naming `path` when a read fails or the file is shorter than `len`.
#[cfg(test)]
pub fn check_canonical_file(
    schema: &Schema,
    file: &std::fs::File,
    len: u64,
    path: &std::path::Path,
) -> Result<Option<FileStats>> {
    let written = Written::default();
    written.finish(len);
    check_canonical_while(schema, file, path, &written, || {})
}

/// How much of a file being written (by another thread) is there to read: [`Written::advance`]
/// as bytes are written from offset 0 on, [`Written::finish`] at its end, or [`Written::stop`].
#[derive(Debug, Default)]
pub struct Written {
    /// Bytes written, whether that is the whole file, whether the writer gave up.
    state: std::sync::Mutex<(u64, bool, bool)>,
    more: std::sync::Condvar,
}

/// What a reader of a [`Written`] file may read.
enum Readable {
    /// This many bytes from offset 0, and whether that is the whole file.
    Upto(u64, bool),
    /// The writer gave up: stop reading.
    Stopped,
}

impl Written {
    /// The first `n` bytes are written.
    pub fn advance(&self, n: u64) {
        self.set(|st| st.0 = st.0.max(n));
    }

    /// The file is complete: `len` bytes.
    pub fn finish(&self, len: u64) {
        self.set(|st| *st = (len, true, st.2));
    }

    /// The writer gave up: readers stop (their result is discarded).
    pub fn stop(&self) {
        self.set(|st| st.2 = true);
    }

    /// [`Written::stop`] unless the file is complete (a writer that returned, or panicked,
    /// without saying how it ended).
    fn stop_unless_finished(&self) {
        self.set(|st| st.2 |= !st.1);
    }

    fn set(&self, f: impl FnOnce(&mut (u64, bool, bool))) {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut st);
        self.more.notify_all();
    }

    /// Wait until at least `n` bytes are written, or the file is complete, or the writer gave up.
    fn wait(&self, n: u64) -> Readable {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            match *st {
                (_, _, true) => return Readable::Stopped,
                (w, done, false) if w >= n || done => return Readable::Upto(w, done),
                _ => {
                    st = self.more.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
        }
    }
}

/// [`check_canonical_file`] of a file another thread is still writing, so the check keeps up
/// with the writing (`tinydelta append --file` checks its copy while the kernel makes it, issue
/// 10): `write` runs on this thread once the other checking threads are started (it writes
/// `file` and reports through `written`; it must end with [`Written::finish`] or
/// [`Written::stop`]), then this thread checks too. Threads only read what `written` says is
/// there. After [`Written::stop`] the result is meaningless (`None` or an error).
///
/// Errors: as [`check_canonical_file`].
pub fn check_canonical_while(
    schema: &Schema,
    file: &std::fs::File,
    path: &std::path::Path,
    written: &Written,
    write: impl FnOnce(),
) -> Result<Option<FileStats>> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let work = || -> Result<Option<FileStats>> {
        let mut c = Canonicalizer::new(schema);
        let mut buf = Vec::new();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let a = next.fetch_add(1, Ordering::Relaxed).saturating_mul(SEGMENT_BYTES);
            let b = match written.wait(a.saturating_add(SEGMENT_BYTES)) {
                Readable::Stopped => return Ok(None),
                Readable::Upto(len, true) if a >= len => break,
                Readable::Upto(len, _) => len.min(a + SEGMENT_BYTES),
            };
            let r = check_segment(&mut c, file, written, a..b, &mut buf);
            if !matches!(r, Ok(true)) {
                stop.store(true, Ordering::Relaxed);
            }
            match r {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(e) => return Err(Error::io("read", path, e)),
            }
        }
        c.fold_fast();
        Ok(Some(c.stats))
    };
    let results: Vec<Result<Option<FileStats>>> = std::thread::scope(|s| {
        let helpers: Vec<_> = (1..cores().min(8))
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(s, work).ok())
            .collect();
        /// Readers never wait for a writer that is gone.
        struct Ended<'a>(&'a Written);
        impl Drop for Ended<'_> {
            fn drop(&mut self) {
                self.0.stop_unless_finished();
            }
        }
        let ended = Ended(written);
        write();
        drop(ended);
        let mut all = vec![work()];
        // A helper that panicked checked nothing for sure: the caller takes the general path.
        all.extend(helpers.into_iter().map(|h| h.join().unwrap_or(Ok(None))));
        all
    });
    let mut total = FileStats {
        columns: vec![ColumnStats::default(); schema.columns.len()],
        ..FileStats::default()
    };
    let mut canonical = true;
    for r in results {
        match r? {
            Some(st) => total.merge(&st),
            None => canonical = false,
        }
    }
    total.bytes = match written.wait(u64::MAX) {
        Readable::Upto(len, true) => len,
        _ => return Ok(None),
    };
    Ok(canonical.then_some(total))
}

/// [`check_canonical_while`] for the lines of `file` that start in `range` (which `written`
/// says is there), counted in `c`: `false` at the first that is not canonical, longer than
/// [`max_line_bytes`] or not ended by `\n`. `buf` is the thread's read buffer.
fn check_segment(
    c: &mut Canonicalizer,
    file: &std::fs::File,
    written: &Written,
    range: std::ops::Range<u64>,
    buf: &mut Vec<u8>,
) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let max = max_line_bytes();
    if buf.len() < CHECK_READ_BYTES {
        buf.resize(CHECK_READ_BYTES, 0);
    }
    let mut pos = range.start;
    if pos > 0 {
        // The first line starting in the range follows the first `\n` at or after its start - 1.
        pos -= 1;
        loop {
            if pos >= range.end {
                return Ok(true);
            }
            let n = usize::try_from(range.end - pos).unwrap_or(usize::MAX).min(buf.len());
            file.read_exact_at(&mut buf[..n], pos)?;
            if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
                pos += i as u64 + 1;
                break;
            }
            pos += n as u64;
        }
    }
    let mut need = pos + 1;
    while pos < range.end {
        let (there, complete) = match written.wait(need) {
            Readable::Upto(n, complete) => (n, complete),
            Readable::Stopped => return Ok(false),
        };
        let n = usize::try_from(there.saturating_sub(pos))
            .unwrap_or(usize::MAX)
            .min(buf.len());
        file.read_exact_at(&mut buf[..n], pos)?;
        let Some(last) = memchr::memrchr(b'\n', &buf[..n]) else {
            if n < buf.len() && !complete {
                // The line goes on in bytes not written yet.
                need = pos + n as u64 + 1;
                continue;
            }
            // No line end: the last line has no `\n`, or the line is longer than the buffer.
            if n < buf.len() || buf.len() > max {
                return Ok(false);
            }
            let grown = buf.len().saturating_mul(2).min(max.saturating_add(1));
            buf.resize(grown, 0);
            continue;
        };
        let mut rest = &buf[..=last];
        while !rest.is_empty() && pos < range.end {
            match c.canonical_row(rest, true) {
                Some(end) if end <= max => {
                    rest = &rest[end + 1..];
                    pos += end as u64 + 1;
                }
                _ => return Ok(false),
            }
        }
        need = pos + 1;
    }
    Ok(true)
}

enum Either {
    Line(LineError),
    Other(Error),
}

impl From<Error> for Either {
    fn from(e: Error) -> Self {
        Either::Other(e)
    }
}

thread_local! {
    /// Spare row buffers of [`LineCheck`]'s pieces, kept by the thread that feeds it.
    static PIECE_ROWS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Bytes of whole lines [`LineCheck`] checks on one thread; a larger write is cut into pieces
/// of about this size (at most one per core) checked at the same time.
const LINE_CHECK_PIECE: usize = 256 << 10;

/// What [`LineCheck::feed_kept_beside`] runs on the feeding thread while helper threads check
/// the pieces of a large write (at most once per feed).
pub type Beside<'a> = Option<&'a mut dyn FnMut()>;

/// One piece's statistics, whether it is its own canonical rows and its number of lines, or
/// its first bad line (numbered from 1 in the piece).
type PieceResult = std::result::Result<(FileStats, bool, u64), LineError>;

/// The pieces of one large write, shared by the feeding thread and the helpers: each takes the
/// next unchecked piece until none is left, so a helper that is late (the machine is busy)
/// leaves its share to the others instead of holding the write up.
struct Pieces {
    schema: Schema,
    /// A copy of the write's complete lines (the helpers cannot borrow the caller's buffer),
    /// given back to [`INPUTS`] when the last holder drops it.
    input: Vec<u8>,
    /// Each piece's bytes in `input`.
    ranges: Vec<std::ops::Range<usize>>,
    defer: bool,
    next: std::sync::atomic::AtomicUsize,
    /// Row buffers for the helpers (non-canonical rows only).
    spare: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl Pieces {
    fn take(&self) -> Option<usize> {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (i < self.ranges.len()).then_some(i)
    }
}

/// Buffers for the copies of large writes [`check_pieces`] hands to the helpers, reused (a
/// fresh 1 MiB buffer costs a page fault per 4 KiB, issue 10). A copy comes back when the last
/// thread holding its [`Pieces`] drops them, whichever thread that is.
static INPUTS: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

impl Drop for Pieces {
    fn drop(&mut self) {
        let input = std::mem::take(&mut self.input);
        if input.capacity() <= MAX_PIECES_INPUT {
            let mut pool = INPUTS.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < 2 {
                pool.push(input);
            }
        }
    }
}

/// Check the whole lines `piece` (numbered from 1) into `rows` (cleared first).
fn check_piece(schema: &Schema, piece: &[u8], defer: bool, rows: &mut Vec<u8>) -> PieceResult {
    let mut c = Canonicalizer::new(schema);
    rows.clear();
    c.chunk_into(piece, 1, rows, defer).map(|same| {
        c.stats.bytes = if same { piece.len() } else { rows.len() } as u64;
        (std::mem::take(&mut c.stats), same, c.lines)
    })
}

/// A piece checked by a helper: its index, rows buffer and result.
type Checked = (usize, Vec<u8>, PieceResult);

/// The helper threads that check pieces of large writes: `cores - 1` of them (at most 3),
/// started once per process (a thread start per write of the mount cost ~6% of its time per
/// `cp`, issue 10), at the lowest priority. They wait on a queue (no spinning: the machine's
/// other work keeps its CPU).
struct Helpers {
    jobs: std::sync::Mutex<std::sync::mpsc::Sender<(std::sync::Arc<Pieces>, std::sync::mpsc::Sender<Checked>)>>,
    count: usize,
}

fn helpers() -> Option<&'static Helpers> {
    use std::sync::{Arc, Mutex, mpsc};
    static HELPERS: std::sync::OnceLock<Option<Helpers>> = std::sync::OnceLock::new();
    HELPERS
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<(Arc<Pieces>, mpsc::Sender<Checked>)>();
            let rx = Arc::new(Mutex::new(rx));
            let mut count = 0;
            for k in 1..cores().min(MAX_PIECES) {
                let rx = Arc::clone(&rx);
                let started = std::thread::Builder::new()
                    .name(format!("tinydelta-check-{k}"))
                    .spawn(move || {
                        // The lowest priority (nice 19; on Linux the nice value is the calling
                        // thread's, setpriority(2)): a helper uses a core nothing else wants.
                        // Woken at normal priority on a busy machine, it took the core of the
                        // thread that woke it, which then waited for it (issue 10's profile);
                        // that thread checks whatever the helper does not get to. If the call
                        // fails the helper runs at normal priority, which is only slower.
                        let _ = rustix::process::setpriority_process(None, 19);
                        loop {
                            let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                            let Ok((work, done)) = job else { return };
                            while let Some(i) = work.take() {
                                let _ = crate::sys::failpoint::hit("check-helper");
                                let mut rows = work
                                    .spare
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .pop()
                                    .unwrap_or_default();
                                let r = check_piece(
                                    &work.schema,
                                    &work.input[work.ranges[i].clone()],
                                    work.defer,
                                    &mut rows,
                                );
                                // The feeding thread stopped waiting (it checked the rest
                                // itself): nothing more to do for this write.
                                if done.send((i, rows, r)).is_err() {
                                    break;
                                }
                            }
                        }
                    });
                match started {
                    Ok(_) => count += 1,
                    Err(e) => log::warn!("cannot start a row-checking thread ({e}): checking with fewer"),
                }
            }
            (count > 0).then(|| Helpers {
                jobs: Mutex::new(tx),
                count,
            })
        })
        .as_ref()
}

/// `complete` cut into `pieces` (contiguous, from its start) checked by this thread and the
/// helpers; `beside` runs on this thread first. The results in piece order, each with its rows
/// buffer (from this thread's spare buffers).
///
/// This thread never waits long for a helper: once it has checked every piece nobody took, it
/// waits for each piece a helper still has for about as long as this thread took per piece,
/// then checks that piece itself (a helper the scheduler has put aside on a busy machine must
/// not hold the write up; the first result of a piece is used, and both are the same).
fn check_pieces(
    schema: &Schema,
    complete: &[u8],
    pieces: &[&[u8]],
    defer: bool,
    beside: &mut Beside,
) -> Vec<(Vec<u8>, PieceResult)> {
    use std::sync::mpsc::{self, RecvTimeoutError};
    use std::sync::{Arc, Mutex};
    let n = pieces.len();
    let mut spare = PIECE_ROWS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let (done_tx, done_rx) = mpsc::channel::<Checked>();
    // The first piece is this thread's (after `beside`): the helpers get a copy of the others.
    let skip = pieces.first().map_or(0, |p| p.len());
    let mut ranges = Vec::with_capacity(n);
    let mut at: usize = 0;
    for p in pieces {
        ranges.push(at.saturating_sub(skip)..(at + p.len()).saturating_sub(skip));
        at += p.len();
    }
    let work = helpers().map(|h| {
        let mut input = INPUTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        input.clear();
        input.extend_from_slice(&complete[skip.min(complete.len())..]);
        let work = Arc::new(Pieces {
            schema: schema.clone(),
            input,
            ranges,
            defer,
            next: std::sync::atomic::AtomicUsize::new(1),
            spare: Mutex::new(spare.split_off(spare.len().min(n) / 2)),
        });
        let jobs = h.jobs.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..h.count {
            // A helper that is gone leaves its pieces to this thread.
            let _ = jobs.send((Arc::clone(&work), done_tx.clone()));
        }
        work
    });
    drop(done_tx);
    if let Some(f) = beside.take() {
        f();
    }
    let mut results: Vec<Option<(Vec<u8>, PieceResult)>> = (0..n).map(|_| None).collect();
    let started = std::time::Instant::now();
    let mut mine: u32 = 0;
    let mut local_next = 0;
    let check_here = |i: usize, spare: &mut Vec<Vec<u8>>| {
        let mut rows = spare.pop().unwrap_or_default();
        let r = check_piece(schema, pieces[i], defer, &mut rows);
        (rows, r)
    };
    loop {
        let i = match &work {
            Some(_) if mine == 0 => Some(0),
            Some(w) => w.take(),
            None => {
                local_next += 1;
                (local_next <= n).then_some(local_next - 1)
            }
        };
        let Some(i) = i else { break };
        results[i] = Some(check_here(i, &mut spare));
        mine += 1;
    }
    // The pieces the helpers took (a helper that stopped drops its sender: this thread checks
    // its pieces).
    let patience = started.elapsed() / mine.max(1) + std::time::Duration::from_micros(50);
    for i in 0..n {
        while results[i].is_none() {
            match done_rx.recv_timeout(patience) {
                Ok((j, rows, r)) => {
                    if results[j].is_none() {
                        results[j] = Some((rows, r));
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    results[i] = Some(check_here(i, &mut spare));
                }
            }
        }
    }
    if let Some(w) = &work {
        // A helper that comes to this write late finds nothing left to take.
        w.next.store(n, std::sync::atomic::Ordering::Relaxed);
        spare.extend(w.spare.lock().unwrap_or_else(|p| p.into_inner()).drain(..));
    }
    PIECE_ROWS.with(|b| *b.borrow_mut() = spare);
    results.into_iter().flatten().collect()
}

/// The largest copy of a write [`check_pieces`] keeps between writes (a write of the mount is at
/// most 1 MiB).
const MAX_PIECES_INPUT: usize = 4 << 20;

/// The most pieces one [`LineCheck`] write is cut into (and the most threads checking them).
const MAX_PIECES: usize = 4;

/// `complete` (whole lines) cut at line ends into at most [`MAX_PIECES`] pieces, each of at
/// least `min` bytes; one piece when it is small or there is one core. More pieces than cores
/// let the threads balance them with the work the feeding thread does beside (the mount
/// writes the same bytes into the page cache while they are checked).
fn split_lines(complete: &[u8], min: usize) -> Vec<&[u8]> {
    let most = if cores() == 1 { 1 } else { MAX_PIECES };
    let n = most.min(complete.len() / min.max(1)).max(1);
    let mut pieces = Vec::with_capacity(n);
    let mut start = 0;
    for k in 1..n {
        let target = (complete.len() * k / n).max(start);
        match memchr::memchr(b'\n', &complete[target..]) {
            Some(p) if target + p + 1 < complete.len() => {
                pieces.push(&complete[start..target + p + 1]);
                start = target + p + 1;
            }
            _ => break,
        }
    }
    pieces.push(&complete[start..]);
    pieces
}

fn count_lines(chunk: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', chunk).count() as u64
}

/// A chunk's index and (its rows, the chunk, their statistics, whether the chunk is its own rows).
type ChunkResult = (u64, std::result::Result<(Vec<u8>, Vec<u8>, FileStats, bool), LineError>);

#[allow(clippy::too_many_arguments)]
fn parallel<R: BufRead, W: Write>(
    schema: &Schema,
    source: &str,
    mut input: R,
    output: &mut W,
    out_path: &std::path::Path,
    first: Vec<u8>,
    second: Vec<u8>,
    workers: usize,
) -> std::result::Result<FileStats, Either> {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex, mpsc};

    let max_in_flight = workers * 2;
    std::thread::scope(|scope| {
        let (job_tx, job_rx) = mpsc::sync_channel::<(u64, u64, Vec<u8>, Vec<u8>)>(max_in_flight);
        let job_rx = Arc::new(Mutex::new(job_rx));
        let (res_tx, res_rx) = mpsc::channel::<ChunkResult>();
        for _ in 0..workers {
            let job_rx = Arc::clone(&job_rx);
            let res_tx = res_tx.clone();
            scope.spawn(move || {
                let mut c = Canonicalizer::new(schema);
                loop {
                    let job = match job_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    let Ok((idx, line, chunk, mut out)) = job else { return };
                    c.stats = FileStats {
                        columns: vec![ColumnStats::default(); schema.columns.len()],
                        ..FileStats::default()
                    };
                    out.clear();
                    let r = c
                        .chunk_into(&chunk, line, &mut out, true)
                        .map(|same| (out, chunk, std::mem::take(&mut c.stats), same));
                    if res_tx.send((idx, r)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(res_tx);
        let mut total = FileStats {
            columns: vec![ColumnStats::default(); schema.columns.len()],
            ..FileStats::default()
        };
        let mut spare: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut pending: BTreeMap<u64, (Vec<u8>, Vec<u8>, FileStats, bool)> = BTreeMap::new();
        let (mut sent, mut written, mut line) = (0u64, 0u64, 1u64);
        let send = |chunk: Vec<u8>, out: Vec<u8>, sent: &mut u64, line: &mut u64| -> bool {
            let n = count_lines(&chunk);
            let ok = job_tx.send((*sent, *line, chunk, out)).is_ok();
            *sent += 1;
            *line += n;
            ok
        };
        send(first, Vec::new(), &mut sent, &mut line);
        send(second, Vec::new(), &mut sent, &mut line);
        let mut eof = false;
        // The first failure in input order: (chunk index, error). I/O errors use index 0.
        let mut err: Option<(u64, Either)> = None;
        loop {
            while err.is_none() && !eof && sent - written < max_in_flight as u64 {
                let (mut chunk, out) = spare.pop().unwrap_or_default();
                match read_chunk(&mut input, &mut chunk, source) {
                    Ok(true) => {
                        send(chunk, out, &mut sent, &mut line);
                    }
                    Ok(false) => eof = true,
                    Err(e) => err = Some((0, e.into())),
                }
            }
            // Until the failure, every earlier chunk must be written (or fail earlier).
            let target = err.as_ref().map_or(sent, |(i, _)| *i);
            if written >= target {
                break;
            }
            let Ok((idx, r)) = res_rx.recv() else { break };
            match r {
                Ok(done) => {
                    pending.insert(idx, done);
                }
                Err(l) => {
                    if err.as_ref().is_none_or(|(i, _)| idx < *i) {
                        err = Some((idx, Either::Line(l)));
                    }
                }
            }
            while let Some((out, chunk, st, same)) = pending.remove(&written) {
                let rows: &[u8] = if same { &chunk } else { &out };
                if let Err(e) = output.write_all(rows).ctx("write", out_path) {
                    err = Some((0, e.into()));
                    break;
                }
                total.merge(&st);
                total.bytes += rows.len() as u64;
                spare.push((chunk, out));
                written += 1;
            }
        }
        drop(job_tx);
        match err {
            Some((_, e)) => Err(e),
            None => Ok(total),
        }
    })
}

/// Rows of a JSONL data file: its lines that are not blank.
/// Errors: [`Error::Io`] naming `path`.
pub fn count_rows(file: std::fs::File, path: &std::path::Path) -> Result<u64> {
    let mut n = 0u64;
    for line in BufReader::with_capacity(1 << 20, file).split(b'\n') {
        let line = line.map_err(|e| Error::io("read", path, e))?;
        if !line.iter().all(|b| b.is_ascii_whitespace()) {
            n += 1;
        }
    }
    Ok(n)
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
        // Every canonical line of the second run without an escape took the one-pass check.
        let s = schema();
        let mut c = Canonicalizer::new(&s);
        let plain: Vec<&str> = once.lines().filter(|l| !l.contains('\\')).collect();
        assert_eq!(plain.len(), 4);
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
            "{\"id\":1,\"x\":null,\"s\":\"a\\nb\",\"b\":null,\"d\":null,\"t\":null}",
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

    /// The copy check of `tinydelta append --file` (README "Benchmarks") takes exactly the files
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

#[cfg(test)]
mod speed {
    use super::*;

    /// ns per byte of the one-pass check on one thread, over the file in `ROWS_BENCH_FILE`
    /// (e.g. a month of flights): `ROWS_BENCH_FILE=... cargo test --release --lib rows::speed
    /// -- --ignored --nocapture`. Its schema is the flights schema of `scripts/bench`.
    #[test]
    #[ignore]
    fn one_pass_check_speed() {
        let Ok(path) = std::env::var("ROWS_BENCH_FILE") else {
            panic!("set ROWS_BENCH_FILE")
        };
        let data = std::fs::read(path).unwrap();
        let spec = "year:int! month:int! day:int! dep_time:int sched_dep_time:int dep_delay:int arr_time:int sched_arr_time:int arr_delay:int carrier:str flight:int tailnum:str origin:str dest:str air_time:int distance:int hour:int minute:int time_hour:timestamp";
        let cols: Vec<String> = spec.split(' ').map(String::from).collect();
        let schema = Schema::parse_cli(&cols).unwrap();
        let mut best = f64::MAX;
        for _ in 0..15 {
            let t = std::time::Instant::now();
            let mut c = Canonicalizer::new(&schema);
            let mut out = Vec::new();
            let same = c.chunk_into(&data, 1, &mut out, true).unwrap();
            assert!(same);
            let el = t.elapsed().as_secs_f64();
            best = best.min(el);
            std::hint::black_box(&c.stats);
        }
        eprintln!(
            "one-pass check: {:.3} ns/byte ({} bytes, best of 15)",
            best * 1e9 / data.len() as f64,
            data.len()
        );
    }
}

/// The one-pass check of canonical rows against the version it replaced (issue 10: the faster
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
    }

    /// The one-pass check before issue 10's rewrite, kept as it was (its values counted after
    /// the whole row is accepted).
    fn reference(this: &mut Canonicalizer, parsed: &mut Vec<Parsed>, b: &[u8]) -> bool {
        let n = this.schema.columns.len();
        if n == 0 || b.first() != Some(&b'{') {
            return false;
        }
        parsed.clear();
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
