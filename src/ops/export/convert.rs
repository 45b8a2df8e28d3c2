//! One data file of canonical JSONL rows -> one snappy-compressed Parquet file, streamed in
//! batches of [`BATCH_ROWS`] rows, with the Delta per-file statistics of what was written
//! (Delta PROTOCOL "Per-file Statistics"). The type mapping is docs/EXPORT.md "One version": int ->
//! Int64 (Delta `long`), float -> Float64 (`double`), str -> Utf8 (`string`), bool -> Boolean
//! (`boolean`), date -> Date32 (`date`), timestamp -> Timestamp(µs, "UTC") (`timestamp`, Parquet
//! INT64 TIMESTAMP(MICROS, isAdjustedToUTC = true)).
//!
//! Every row is checked against the schema as it is read (the source is read from disk, so
//! nothing is assumed): a line that is not an object of the schema's columns with values of
//! their types is an error naming the file and the line.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Float64Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef, TimeUnit};
use chrono::Datelike;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};

use crate::error::{Error, IoContext, Result};
use crate::format::schema::{ColumnType, Schema};
use crate::util::quote::quoted;

/// Rows per Arrow record batch handed to the Parquet writer (memory: one batch of builders).
pub const BATCH_ROWS: usize = 8192;

/// The Parquet writer flushes its row group once its buffered, encoded size passes this many
/// bytes (or at 1,048,576 rows, the writer's default), so memory stays bounded per file.
const ROW_GROUP_BYTES: usize = 64 << 20;

/// Longest string prefix kept in `minValues` (as tinydelta's own statistics; docs/FORMAT.md
/// "Decisions where the spec is silent").
const STRING_STAT_PREFIX: usize = 32;

/// Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

/// The Arrow schema of an exported file: one field per column, in schema order, NOT NULL
/// columns non-nullable.
/// Whether export writes columns of type `ty` (docs/EXPORT.md "Table").
pub fn writes_type(ty: &ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::Int
            | ColumnType::Float
            | ColumnType::Str
            | ColumnType::Bool
            | ColumnType::Date
            | ColumnType::Timestamp
            | ColumnType::TimestampNtz
    )
}

/// The schema DEST's log records for a source `schema`: a `timestamp_ntz` column is exported as
/// a `timestamp`, its wall-clock time taken as UTC (docs/EXPORT.md "Table").
pub fn dest_schema(schema: &Schema) -> Schema {
    let mut s = schema.clone();
    for c in &mut s.columns {
        if c.ty == ColumnType::TimestampNtz {
            c.ty = ColumnType::Timestamp;
        }
    }
    s
}

/// The Arrow schema of an exported file. Only for schemas whose every type [`writes_type`].
pub fn arrow_schema(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .columns
        .iter()
        .map(|c| {
            let ty = match &c.ty {
                ColumnType::Int => DataType::Int64,
                ColumnType::Float => DataType::Float64,
                ColumnType::Str => DataType::Utf8,
                ColumnType::Bool => DataType::Boolean,
                ColumnType::Date => DataType::Date32,
                ColumnType::Timestamp | ColumnType::TimestampNtz => {
                    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
                }
                // Refused before (write_parquet, export): Null holds no value, so nothing is
                // ever written as it.
                _ => DataType::Null,
            };
            Field::new(&c.name, ty, c.nullable)
        })
        .collect();
    Arc::new(arrow_schema::Schema::new(fields))
}

/// What [`write_parquet`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// Rows.
    pub rows: u64,
    /// Bytes of the Parquet file.
    pub size: u64,
    /// JSONL bytes read.
    pub bytes_in: u64,
    /// The `add.stats` JSON string: `numRecords`, `minValues`, `maxValues`, `nullCount`.
    pub stats: String,
}

enum Builder {
    Int(Int64Builder),
    Float(Float64Builder),
    Str(StringBuilder),
    Bool(BooleanBuilder),
    Date(Date32Builder),
    Ts(TimestampMicrosecondBuilder),
}

/// Min and max of a column so far (Delta keeps none for booleans).
#[derive(Default)]
enum Bounds {
    #[default]
    None,
    Int(i64, i64),
    Float(f64, f64),
    /// `min` is a prefix of at most [`STRING_STAT_PREFIX`] characters; `max` is unknown once a
    /// longer string was seen (a prefix is a lower bound, never an upper one).
    Str {
        min: String,
        max: Option<String>,
    },
    Date(i32, i32),
    Ts(i64, i64),
}

struct Col {
    name: String,
    nullable: bool,
    b: Builder,
    nulls: u64,
    bounds: Bounds,
    /// Any string longer than the stat prefix seen (no `maxValues` then).
    long_string: bool,
    /// The last timestamp text parsed and its µs: rows often repeat one.
    ts_cache: Option<(String, i64)>,
}

impl Col {
    fn new(name: &str, ty: &ColumnType, nullable: bool) -> Col {
        let b = match ty {
            ColumnType::Int => Builder::Int(Int64Builder::with_capacity(BATCH_ROWS)),
            ColumnType::Float => Builder::Float(Float64Builder::with_capacity(BATCH_ROWS)),
            ColumnType::Str => Builder::Str(StringBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 16)),
            ColumnType::Bool => Builder::Bool(BooleanBuilder::with_capacity(BATCH_ROWS)),
            ColumnType::Date => Builder::Date(Date32Builder::with_capacity(BATCH_ROWS)),
            ColumnType::Timestamp | ColumnType::TimestampNtz => {
                Builder::Ts(TimestampMicrosecondBuilder::with_capacity(BATCH_ROWS).with_timezone("UTC"))
            }
            // Refused before Col::new (write_parquet): never reached.
            _ => Builder::Str(StringBuilder::new()),
        };
        Col {
            name: name.to_string(),
            nullable,
            b,
            nulls: 0,
            bounds: Bounds::None,
            long_string: false,
            ts_cache: None,
        }
    }

    fn len(&self) -> usize {
        use arrow_array::builder::ArrayBuilder;
        match &self.b {
            Builder::Int(b) => b.len(),
            Builder::Float(b) => b.len(),
            Builder::Str(b) => b.len(),
            Builder::Bool(b) => b.len(),
            Builder::Date(b) => b.len(),
            Builder::Ts(b) => b.len(),
        }
    }

    fn kind(&self) -> &'static str {
        match self.b {
            Builder::Int(_) => "int",
            Builder::Float(_) => "float",
            Builder::Str(_) => "str",
            Builder::Bool(_) => "bool",
            Builder::Date(_) => "date",
            Builder::Ts(_) => "timestamp",
        }
    }

    fn null(&mut self) -> std::result::Result<(), String> {
        if !self.nullable {
            return Err(format!(
                "column {}: null or missing value for a NOT NULL column",
                quoted(&self.name)
            ));
        }
        self.nulls += 1;
        match &mut self.b {
            Builder::Int(b) => b.append_null(),
            Builder::Float(b) => b.append_null(),
            Builder::Str(b) => b.append_null(),
            Builder::Bool(b) => b.append_null(),
            Builder::Date(b) => b.append_null(),
            Builder::Ts(b) => b.append_null(),
        }
        Ok(())
    }

    fn mismatch(&self, found: &str) -> String {
        format!("column {}: expected {}, found {found}", quoted(&self.name), self.kind())
    }

    fn int(&mut self, v: i64) -> std::result::Result<(), String> {
        match &mut self.b {
            Builder::Int(b) => {
                b.append_value(v);
                self.bounds = match self.bounds {
                    Bounds::Int(lo, hi) => Bounds::Int(lo.min(v), hi.max(v)),
                    _ => Bounds::Int(v, v),
                };
                Ok(())
            }
            Builder::Float(_) => self.float(v as f64),
            _ => Err(self.mismatch("number")),
        }
    }

    fn float(&mut self, v: f64) -> std::result::Result<(), String> {
        let Builder::Float(b) = &mut self.b else {
            return Err(match self.b {
                Builder::Int(_) => format!("column {}: {v} is not an integer, but the column is int", quoted(&self.name)),
                _ => self.mismatch("number"),
            });
        };
        if !v.is_finite() {
            return Err(format!("column {}: {v} is not a finite number", quoted(&self.name)));
        }
        b.append_value(v);
        let v = if v == 0.0 { 0.0 } else { v };
        self.bounds = match self.bounds {
            Bounds::Float(lo, hi) => Bounds::Float(lo.min(v), hi.max(v)),
            _ => Bounds::Float(v, v),
        };
        Ok(())
    }

    fn boolean(&mut self, v: bool) -> std::result::Result<(), String> {
        match &mut self.b {
            Builder::Bool(b) => {
                b.append_value(v);
                Ok(())
            }
            _ => Err(self.mismatch("boolean")),
        }
    }

    fn string(&mut self, s: &str) -> std::result::Result<(), String> {
        match &mut self.b {
            Builder::Str(b) => {
                b.append_value(s);
                let (prefix, long) = match s.char_indices().nth(STRING_STAT_PREFIX) {
                    Some((cut, _)) => (&s[..cut], true),
                    None => (s, false),
                };
                self.long_string |= long;
                match &mut self.bounds {
                    Bounds::Str { min, max } => {
                        if prefix < min.as_str() {
                            *min = prefix.to_string();
                        }
                        if !long && max.as_deref().is_none_or(|m| s > m) {
                            *max = Some(s.to_string());
                        }
                    }
                    other => {
                        *other = Bounds::Str {
                            min: prefix.to_string(),
                            max: (!long).then(|| s.to_string()),
                        }
                    }
                }
                Ok(())
            }
            Builder::Date(b) => {
                let days =
                    parse_date(s).ok_or_else(|| format!("column {}: {} is not a date (YYYY-MM-DD)", quoted(&self.name), quoted(s)))?;
                b.append_value(days);
                self.bounds = match self.bounds {
                    Bounds::Date(lo, hi) => Bounds::Date(lo.min(days), hi.max(days)),
                    _ => Bounds::Date(days, days),
                };
                Ok(())
            }
            Builder::Ts(b) => {
                let us = match &self.ts_cache {
                    Some((last, us)) if last == s => *us,
                    _ => {
                        // A `timestamp_ntz` value has no offset: its wall-clock time is taken as UTC.
                        let us = match chrono::DateTime::parse_from_rfc3339(s) {
                            Ok(t) => t.timestamp_micros(),
                            Err(_) => crate::format::rows::timestamp_ntz_us(s).ok_or_else(|| {
                                format!("column {}: {} is not an RFC 3339 timestamp", quoted(&self.name), quoted(s))
                            })?,
                        };
                        self.ts_cache = Some((s.to_string(), us));
                        us
                    }
                };
                b.append_value(us);
                self.bounds = match self.bounds {
                    Bounds::Ts(lo, hi) => Bounds::Ts(lo.min(us), hi.max(us)),
                    _ => Bounds::Ts(us, us),
                };
                Ok(())
            }
            _ => Err(self.mismatch("string")),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match &mut self.b {
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Float(b) => Arc::new(b.finish()),
            Builder::Str(b) => Arc::new(b.finish()),
            Builder::Bool(b) => Arc::new(b.finish()),
            Builder::Date(b) => Arc::new(b.finish()),
            Builder::Ts(b) => Arc::new(b.finish()),
        }
    }

    /// (min, max) as Delta statistics JSON, each when it can be stated.
    fn stat_values(&self) -> (Option<serde_json::Value>, Option<serde_json::Value>) {
        use serde_json::Value;
        let date = |d: i32| {
            chrono::NaiveDate::from_num_days_from_ce_opt(d.checked_add(UNIX_EPOCH_DAYS_FROM_CE)?)
                .filter(|t| (0..=9999).contains(&t.year()))
                .map(|t| Value::from(t.format("%Y-%m-%d").to_string()))
        };
        let ts = |us: i64| {
            chrono::DateTime::from_timestamp_micros(us)
                .filter(|t| (0..=9999).contains(&t.year()))
                .map(|t| Value::from(t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()))
        };
        let float = |f: f64| serde_json::Number::from_f64(f).map(Value::Number);
        match &self.bounds {
            Bounds::None => (None, None),
            Bounds::Int(lo, hi) => (Some((*lo).into()), Some((*hi).into())),
            Bounds::Float(lo, hi) => (float(*lo), float(*hi)),
            Bounds::Str { min, max } => (
                Some(min.clone().into()),
                max.clone().filter(|_| !self.long_string).map(Value::from),
            ),
            Bounds::Date(lo, hi) => (date(*lo), date(*hi)),
            Bounds::Ts(lo, hi) => (ts(*lo), ts(*hi)),
        }
    }
}

/// `YYYY-MM-DD` (exactly ten characters, a real day) as days since 1970-01-01.
fn parse_date(s: &str) -> Option<i32> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r].iter()
            .try_fold(0u32, |n, d| d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0')))
    };
    let d = chrono::NaiveDate::from_ymd_opt(num(0..4)? as i32, num(5..7)?, num(8..10)?)?;
    Some(d.num_days_from_ce() - UNIX_EPOCH_DAYS_FROM_CE)
}

/// The columns of one batch being filled, and the row being parsed.
struct Row<'a> {
    cols: &'a mut [Col],
}

impl<'de> DeserializeSeed<'de> for Row<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Row<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let row = self.cols.first().map_or(0, Col::len);
        let mut hint = 0;
        while let Some(ci) = map.next_key_seed(Key { cols: self.cols, hint })? {
            let col = &mut self.cols[ci];
            if col.len() > row {
                return Err(de::Error::custom(format!("column {}: duplicate key", quoted(&col.name))));
            }
            map.next_value_seed(Value(col))?;
            hint = ci + 1;
        }
        Ok(())
    }
}

/// A key: the index of its column (tried at `hint` first: canonical rows are in schema order).
struct Key<'a> {
    cols: &'a [Col],
    hint: usize,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = usize;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<usize, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a column name")
    }
    fn visit_str<E: de::Error>(self, k: &str) -> std::result::Result<usize, E> {
        if self.cols.get(self.hint).is_some_and(|c| c.name == k) {
            return Ok(self.hint);
        }
        self.cols
            .iter()
            .position(|c| c.name == k)
            .ok_or_else(|| E::custom(format!("unknown column {} (not in the table's schema)", quoted(k))))
    }
}

/// One value, appended to its column's builder.
struct Value<'a>(&'a mut Col);

impl<'de> DeserializeSeed<'de> for Value<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Value<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a {} value", self.0.kind())
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<(), E> {
        self.0.null().map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<(), E> {
        self.0.int(v).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<(), E> {
        match i64::try_from(v) {
            Ok(v) => self.0.int(v),
            Err(_) if matches!(self.0.b, Builder::Float(_)) => self.0.float(v as f64),
            Err(_) => Err(format!(
                "column {}: {v} is outside the 64-bit integer range",
                quoted(&self.0.name)
            )),
        }
        .map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<(), E> {
        self.0.float(v).map_err(E::custom)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<(), E> {
        self.0.boolean(v).map_err(E::custom)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<(), E> {
        self.0.string(v).map_err(E::custom)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> std::result::Result<(), A::Error> {
        Err(de::Error::custom(self.0.mismatch("array")))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> std::result::Result<(), A::Error> {
        Err(de::Error::custom(self.0.mismatch("object")))
    }
}

fn parquet_err(path: &Path, e: impl fmt::Display) -> Error {
    Error::io("write", path, std::io::Error::other(e.to_string()))
}

/// Stream the JSONL rows of `input` (the data file `src`, for errors) under `schema` into the
/// Parquet file `out` (its path `out_path`, for errors), snappy-compressed, in batches of
/// [`BATCH_ROWS`] rows. `out` is flushed but not fsynced. Returns what was written.
///
/// Errors: [`Error::Corrupt`] naming `src` and the 1-based line when a line is not an object of
/// the schema's columns with values of their types, or the last line has no newline;
/// [`Error::Io`] for read and write failures.
pub fn write_parquet(input: impl BufRead, src: &Path, schema: &Schema, out: &File, out_path: &Path) -> Result<Written> {
    if let Some(c) = schema.columns.iter().find(|c| !writes_type(&c.ty)) {
        return Err(Error::Internal(format!(
            "export reached column {:?} of type {}, which it does not write",
            c.name, c.ty
        )));
    }
    let arrow = arrow_schema(schema);
    let mut cols: Vec<Col> = schema
        .columns
        .iter()
        .map(|c| Col::new(&c.name, &c.ty, c.nullable))
        .collect();
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_created_by(concat!("tinydelta version ", env!("CARGO_PKG_VERSION")).to_string())
        .build();
    let sink = BufWriter::with_capacity(1 << 20, out);
    let mut writer = ArrowWriter::try_new(sink, arrow.clone(), Some(props)).map_err(|e| parquet_err(out_path, e))?;
    let mut input = input;
    let mut line = Vec::with_capacity(4096);
    let (mut rows, mut bytes_in, mut lineno) = (0u64, 0u64, 0u64);
    let corrupt = |lineno: u64, reason: String| Error::Corrupt {
        path: src.to_path_buf(),
        reason: format!("line {lineno}: {reason}"),
    };
    loop {
        line.clear();
        let n = input.read_until(b'\n', &mut line).ctx("read", src)?;
        if n == 0 {
            break;
        }
        lineno += 1;
        bytes_in += n as u64;
        if line.last() != Some(&b'\n') {
            return Err(corrupt(
                lineno,
                "the last line has no newline (the file was cut short)".into(),
            ));
        }
        let text = &line[..line.len() - 1];
        if text.first() != Some(&b'{') {
            return Err(corrupt(lineno, "not a JSON object".into()));
        }
        let mut de = serde_json::Deserializer::from_slice(text);
        Row { cols: &mut cols }
            .deserialize(&mut de)
            .and_then(|()| de.end())
            .map_err(|e| {
                let msg = e.to_string();
                let msg = msg.rsplit_once(" at line ").map(|(m, _)| m.to_string()).unwrap_or(msg);
                corrupt(lineno, msg)
            })?;
        // Columns the row did not name are null (rows written before an ADD COLUMNS lack them).
        let row = rows as usize % BATCH_ROWS;
        for c in cols.iter_mut().filter(|c| c.len() == row) {
            c.null().map_err(|r| corrupt(lineno, r))?;
        }
        rows += 1;
        if (rows as usize).is_multiple_of(BATCH_ROWS) {
            write_batch(&mut writer, &arrow, &mut cols, out_path)?;
        }
    }
    if !(rows as usize).is_multiple_of(BATCH_ROWS) {
        write_batch(&mut writer, &arrow, &mut cols, out_path)?;
    }
    let sink = writer.into_inner().map_err(|e| parquet_err(out_path, e))?;
    let file = sink
        .into_inner()
        .map_err(|e| Error::io("write", out_path, e.into_error()))?;
    let size = file.metadata().ctx("stat", out_path)?.len();
    Ok(Written {
        rows,
        size,
        bytes_in,
        stats: stats_json(rows, &cols),
    })
}

fn write_batch(
    writer: &mut ArrowWriter<impl Write + Send>,
    arrow: &SchemaRef,
    cols: &mut [Col],
    path: &Path,
) -> Result<()> {
    let arrays: Vec<ArrayRef> = cols.iter_mut().map(Col::finish).collect();
    let batch = RecordBatch::try_new(arrow.clone(), arrays).map_err(|e| parquet_err(path, e))?;
    writer.write(&batch).map_err(|e| parquet_err(path, e))?;
    if writer.in_progress_size() > ROW_GROUP_BYTES {
        writer.flush().map_err(|e| parquet_err(path, e))?;
    }
    Ok(())
}

fn stats_json(rows: u64, cols: &[Col]) -> String {
    let mut min = serde_json::Map::new();
    let mut max = serde_json::Map::new();
    let mut nulls = serde_json::Map::new();
    for c in cols {
        nulls.insert(c.name.clone(), c.nulls.into());
        let (lo, hi) = c.stat_values();
        if let Some(v) = lo {
            min.insert(c.name.clone(), v);
        }
        if let Some(v) = hi {
            max.insert(c.name.clone(), v);
        }
    }
    serde_json::json!({
        "numRecords": rows,
        "minValues": min,
        "maxValues": max,
        "nullCount": nulls,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(parse_date("1970-01-01"), Some(0));
        assert_eq!(parse_date("1970-01-02"), Some(1));
        assert_eq!(parse_date("1969-12-31"), Some(-1));
        assert_eq!(parse_date("2024-02-29"), Some(19782));
        for bad in ["2023-02-29", "2024-2-29", "2024-02-29T", "abcd-ef-gh", "+024-02-29"] {
            assert_eq!(parse_date(bad), None, "{bad}");
        }
    }

    fn convert(schema: &[&str], rows: &str) -> Result<Written> {
        let specs: Vec<String> = schema.iter().map(|s| s.to_string()).collect();
        let schema = Schema::parse_cli(&specs).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        let f = File::create(&path).unwrap();
        write_parquet(rows.as_bytes(), Path::new("src.jsonl"), &schema, &f, &path)
    }

    #[test]
    fn rows_are_checked_and_counted() {
        let s = ["id:int!", "x:float", "s:str", "b:bool", "d:date", "t:timestamp"];
        let w = convert(
            &s,
            "{\"id\":1,\"x\":2,\"s\":\"a\",\"b\":true,\"d\":\"2024-01-02\",\"t\":\"2024-01-02T03:04:05.123456+01:00\"}\n\
             {\"id\":-3,\"x\":null,\"s\":\"\\u00e9\",\"b\":null,\"d\":null,\"t\":null}\n\
             {\"id\":7}\n",
        )
        .unwrap();
        assert_eq!(w.rows, 3);
        let st: serde_json::Value = serde_json::from_str(&w.stats).unwrap();
        assert_eq!(st["numRecords"], 3);
        assert_eq!(st["minValues"]["id"], -3);
        assert_eq!(st["maxValues"]["id"], 7);
        assert_eq!(st["minValues"]["s"], "a");
        assert_eq!(st["maxValues"]["s"], "é");
        assert_eq!(st["minValues"]["t"], "2024-01-02T02:04:05.123456Z");
        assert_eq!(st["minValues"]["d"], "2024-01-02");
        assert_eq!(st["nullCount"]["x"], 2);
        assert_eq!(st["nullCount"]["id"], 0);
        assert!(st["minValues"].get("b").is_none());
        for (rows, what) in [
            ("{\"id\":1.5}\n", "line 1: column \"id\": 1.5 is not an integer"),
            ("{\"id\":1}\n{\"id\":null}\n", "line 2: column \"id\": null or missing"),
            ("{\"x\":1}\n", "line 1: column \"id\": null or missing"),
            ("{\"id\":1,\"zz\":1}\n", "line 1: unknown column \"zz\""),
            ("{\"id\":1,\"id\":2}\n", "duplicate key"),
            ("{\"id\":1,\"d\":\"2024-13-01\"}\n", "is not a date"),
            ("{\"id\":1,\"t\":\"yesterday\"}\n", "not an RFC 3339 timestamp"),
            ("{\"id\":1,\"s\":5}\n", "column \"s\": expected str, found number"),
            ("{\"id\":1}", "no newline"),
            ("[1]\n", "not a JSON object"),
            ("{\"id\":1,}\n", "line 1"),
        ] {
            let e = convert(&s, rows).expect_err(what).to_string();
            assert!(e.contains("src.jsonl") && e.contains(what), "{what}: {e}");
        }
    }
}
