//! One data file of canonical JSONL rows -> one snappy-compressed Parquet file, streamed in
//! batches of [`BATCH_ROWS`] rows, with the Delta per-file statistics of what was written
//! (Delta PROTOCOL "Per-file Statistics", computed by the rows layer's statistics code). The type
//! mapping is the table of docs/EXPORT.md "Table": the flat types are filled by a serde visitor
//! of the line; decimals, binary, json, arrays, maps and structs are checked and counted by
//! `rows::check_value` and appended from their raw JSON text (decimals parsed as decimal text,
//! never through a float).
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
    BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, ListArray, MapArray, RecordBatch, StructArray};
use arrow_buffer::{NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, SchemaRef, TimeUnit};
use chrono::Datelike;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::{Error, IoContext, Result};
use crate::format::rows::{ColumnStats, StatValue, update_stat, update_str_stat};
use crate::format::schema::{Column, ColumnType, Element, MapType, Schema};
use crate::util::quote::quoted;

/// Rows per Arrow record batch handed to the Parquet writer (memory: one batch of builders).
pub const BATCH_ROWS: usize = 8192;

/// The Parquet writer flushes its row group once its buffered, encoded size passes this many
/// bytes (or at 1,048,576 rows, the writer's default), so memory stays bounded per file.
const ROW_GROUP_BYTES: usize = 64 << 20;

/// Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

/// Whether export writes columns of type `ty` (docs/EXPORT.md "Table"): every type but a map
/// whose keys are not strings (another writer's `map<int,str>`, whose keys tinydelta reads as
/// text).
pub fn writes_type(ty: &ColumnType) -> bool {
    match ty {
        ColumnType::Array(e) => writes_type(&e.ty),
        ColumnType::Map(m) => m.key == ColumnType::Str && writes_type(&m.value.ty),
        ColumnType::Struct(cols) => cols.iter().all(|c| writes_type(&c.ty)),
        _ => true,
    }
}

/// The schema DEST's log records for a source `schema`: a `json` column (Delta `variant` in
/// tinydelta's log) is a `string` holding its canonical JSON, at any depth (docs/EXPORT.md
/// "Table").
pub fn dest_schema(schema: &Schema) -> Schema {
    let mut s = schema.clone();
    for c in &mut s.columns {
        c.ty = dest_type(&c.ty);
    }
    s
}

fn dest_type(ty: &ColumnType) -> ColumnType {
    match ty {
        ColumnType::Json => ColumnType::Str,
        ColumnType::Array(e) => ColumnType::Array(Box::new(Element {
            ty: dest_type(&e.ty),
            nullable: e.nullable,
        })),
        ColumnType::Map(m) => ColumnType::Map(Box::new(MapType {
            key: m.key.clone(),
            value: Element {
                ty: dest_type(&m.value.ty),
                nullable: m.value.nullable,
            },
        })),
        ColumnType::Struct(cols) => ColumnType::Struct(
            cols.iter()
                .map(|c| Column {
                    ty: dest_type(&c.ty),
                    ..c.clone()
                })
                .collect(),
        ),
        t => t.clone(),
    }
}

/// The Arrow type of a column or nested field of type `ty` (docs/EXPORT.md "Table"): Parquet's
/// list (`element`) and map (`key_value`, `key`, `value`) names, as Delta writers use them.
fn arrow_type(ty: &ColumnType) -> DataType {
    match ty {
        ColumnType::Int => DataType::Int64,
        ColumnType::Float => DataType::Float64,
        ColumnType::Str | ColumnType::Json => DataType::Utf8,
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Date => DataType::Date32,
        ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ColumnType::TimestampNtz => DataType::Timestamp(TimeUnit::Microsecond, None),
        // Scale <= precision <= 38 (schema.rs): fits an i8.
        ColumnType::Decimal { precision, scale } => DataType::Decimal128(*precision, *scale as i8),
        ColumnType::Binary => DataType::Binary,
        ColumnType::Array(e) => DataType::List(list_field(e)),
        ColumnType::Map(m) => DataType::Map(map_entries(m), false),
        ColumnType::Struct(cols) => DataType::Struct(struct_fields(cols)),
    }
}

fn list_field(e: &Element) -> FieldRef {
    Arc::new(Field::new("element", arrow_type(&e.ty), e.nullable))
}

fn map_entries(m: &MapType) -> FieldRef {
    let kv = Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", arrow_type(&m.value.ty), m.value.nullable),
    ]);
    Arc::new(Field::new("key_value", DataType::Struct(kv), false))
}

fn struct_fields(cols: &[Column]) -> Fields {
    cols.iter()
        .map(|c| Field::new(&c.name, arrow_type(&c.ty), c.nullable))
        .collect()
}

/// The Arrow schema of an exported file: one field per column, in schema order, NOT NULL
/// columns non-nullable. Only for schemas whose every type [`writes_type`].
pub fn arrow_schema(schema: &Schema) -> SchemaRef {
    Arc::new(arrow_schema::Schema::new(struct_fields(&schema.columns)))
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

/// The Arrow builder of a column or nested field. The flat types are filled by the row's
/// serde visitor ([`Value`]); the others from their raw JSON text ([`Builder::append_raw`]),
/// after [`crate::format::rows::check_value`] checked it.
enum Builder {
    Int(Int64Builder),
    Float(Float64Builder),
    Str(StringBuilder),
    Bool(BooleanBuilder),
    Date(Date32Builder),
    /// `timestamp`: µs since the epoch, adjusted to UTC.
    Ts(TimestampMicrosecondBuilder),
    /// `timestamp_ntz`: µs of the wall-clock time, no time zone.
    Ntz(TimestampMicrosecondBuilder),
    Decimal(Decimal128Builder, u8, u8),
    Binary(BinaryBuilder),
    /// `json`: its canonical text.
    Json(StringBuilder),
    List(Box<ListBuilder>),
    Struct(Box<StructBuilder>),
    Map(Box<MapBuilder>),
}

struct ListBuilder {
    field: FieldRef,
    offsets: Vec<i32>,
    nulls: NullBufferBuilder,
    element: Element,
    items: Builder,
}

struct StructBuilder {
    fields: Fields,
    cols: Vec<Column>,
    nulls: NullBufferBuilder,
    children: Vec<Builder>,
}

struct MapBuilder {
    entries: FieldRef,
    offsets: Vec<i32>,
    nulls: NullBufferBuilder,
    value: Element,
    keys: StringBuilder,
    values: Builder,
}

/// `n` as an Arrow offset: a batch holds fewer than 2^31 elements of one list or map column.
fn offset(n: usize) -> std::result::Result<i32, String> {
    i32::try_from(n).map_err(|_| format!("more than {} elements in one batch of {BATCH_ROWS} rows", i32::MAX))
}

impl Builder {
    fn new(ty: &ColumnType, cap: usize) -> Builder {
        match ty {
            ColumnType::Int => Builder::Int(Int64Builder::with_capacity(cap)),
            ColumnType::Float => Builder::Float(Float64Builder::with_capacity(cap)),
            ColumnType::Str => Builder::Str(StringBuilder::with_capacity(cap, cap * 16)),
            ColumnType::Bool => Builder::Bool(BooleanBuilder::with_capacity(cap)),
            ColumnType::Date => Builder::Date(Date32Builder::with_capacity(cap)),
            ColumnType::Timestamp => {
                Builder::Ts(TimestampMicrosecondBuilder::with_capacity(cap).with_timezone("UTC"))
            }
            ColumnType::TimestampNtz => Builder::Ntz(TimestampMicrosecondBuilder::with_capacity(cap)),
            ColumnType::Decimal { precision, scale } => {
                let b = Decimal128Builder::with_capacity(cap);
                // Valid for 1 <= precision <= 38, scale <= precision (schema.rs checks both).
                let b = b.with_precision_and_scale(*precision, *scale as i8).unwrap_or_else(|_| Decimal128Builder::new());
                Builder::Decimal(b, *precision, *scale)
            }
            ColumnType::Binary => Builder::Binary(BinaryBuilder::with_capacity(cap, cap * 16)),
            ColumnType::Json => Builder::Json(StringBuilder::with_capacity(cap, cap * 16)),
            ColumnType::Array(e) => Builder::List(Box::new(ListBuilder {
                field: list_field(e),
                offsets: vec![0],
                nulls: NullBufferBuilder::new(cap),
                element: (**e).clone(),
                items: Builder::new(&e.ty, 0),
            })),
            ColumnType::Struct(cols) => Builder::Struct(Box::new(StructBuilder {
                fields: struct_fields(cols),
                cols: cols.clone(),
                nulls: NullBufferBuilder::new(cap),
                children: cols.iter().map(|c| Builder::new(&c.ty, cap)).collect(),
            })),
            ColumnType::Map(m) => Builder::Map(Box::new(MapBuilder {
                entries: map_entries(m),
                offsets: vec![0],
                nulls: NullBufferBuilder::new(cap),
                value: m.value.clone(),
                keys: StringBuilder::new(),
                values: Builder::new(&m.value.ty, 0),
            })),
        }
    }

    fn len(&self) -> usize {
        use arrow_array::builder::ArrayBuilder;
        match self {
            Builder::Int(b) => b.len(),
            Builder::Float(b) => b.len(),
            Builder::Str(b) | Builder::Json(b) => b.len(),
            Builder::Bool(b) => b.len(),
            Builder::Date(b) => b.len(),
            Builder::Ts(b) | Builder::Ntz(b) => b.len(),
            Builder::Decimal(b, ..) => b.len(),
            Builder::Binary(b) => b.len(),
            Builder::List(l) => l.nulls.len(),
            Builder::Struct(s) => s.nulls.len(),
            Builder::Map(m) => m.nulls.len(),
        }
    }

    /// Whether the row's serde visitor fills this builder (else [`Builder::append_raw`]).
    fn is_flat(&self) -> bool {
        matches!(
            self,
            Builder::Int(_) | Builder::Float(_) | Builder::Str(_) | Builder::Bool(_) | Builder::Date(_) | Builder::Ts(_) | Builder::Ntz(_)
        )
    }

    fn kind(&self) -> &'static str {
        match self {
            Builder::Int(_) => "int",
            Builder::Float(_) => "float",
            Builder::Str(_) => "str",
            Builder::Bool(_) => "bool",
            Builder::Date(_) => "date",
            Builder::Ts(_) => "timestamp",
            Builder::Ntz(_) => "timestamp_ntz",
            Builder::Decimal(..) => "decimal",
            Builder::Binary(_) => "binary",
            Builder::Json(_) => "json",
            Builder::List(_) => "array",
            Builder::Struct(_) => "struct",
            Builder::Map(_) => "map",
        }
    }

    /// A null; a null struct has a null in every field below it (Arrow masks them).
    fn append_null(&mut self) {
        match self {
            Builder::Int(b) => b.append_null(),
            Builder::Float(b) => b.append_null(),
            Builder::Str(b) | Builder::Json(b) => b.append_null(),
            Builder::Bool(b) => b.append_null(),
            Builder::Date(b) => b.append_null(),
            Builder::Ts(b) | Builder::Ntz(b) => b.append_null(),
            Builder::Decimal(b, ..) => b.append_null(),
            Builder::Binary(b) => b.append_null(),
            Builder::List(l) => {
                let last = l.offsets.last().copied().unwrap_or(0);
                l.offsets.push(last);
                l.nulls.append_null();
            }
            Builder::Struct(s) => {
                s.children.iter_mut().for_each(Builder::append_null);
                s.nulls.append_null();
            }
            Builder::Map(m) => {
                let last = m.offsets.last().copied().unwrap_or(0);
                m.offsets.push(last);
                m.nulls.append_null();
            }
        }
    }

    /// Append the value `raw` (raw JSON text, checked against the type by
    /// [`crate::format::rows::check_value`] before). Errors: the reason, should the text
    /// still not be a value of the builder's type.
    fn append_raw(&mut self, raw: &str) -> std::result::Result<(), String> {
        if raw == "null" {
            self.append_null();
            return Ok(());
        }
        let bad = |what: &str| format!("{} is not {what}", crate::util::quote::json_quoted(raw));
        let text = || crate::format::rows::decode_str(raw);
        match self {
            Builder::Int(b) => b.append_value(raw.parse().map_err(|_| bad("an int"))?),
            Builder::Float(b) => b.append_value(raw.parse().map_err(|_| bad("a float"))?),
            Builder::Bool(b) => b.append_value(match raw {
                "true" => true,
                "false" => false,
                _ => return Err(bad("a boolean")),
            }),
            Builder::Str(b) => b.append_value(text()?),
            Builder::Date(b) => b.append_value(parse_date(&text()?).ok_or_else(|| bad("a date"))?),
            Builder::Ts(b) => b.append_value(timestamp_us(&text()?).ok_or_else(|| bad("an RFC 3339 timestamp"))?),
            Builder::Ntz(b) => b.append_value(
                crate::format::rows::timestamp_ntz_us(&text()?).ok_or_else(|| bad("a timestamp without offset"))?,
            ),
            Builder::Decimal(b, p, s) => b.append_value(crate::format::rows::decimal(raw, *p, *s)?.0),
            Builder::Binary(b) => {
                use base64::Engine;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text()?.as_bytes())
                    .map_err(|_| bad("base64"))?;
                b.append_value(bytes);
            }
            Builder::Json(b) => {
                let mut canonical = Vec::with_capacity(raw.len());
                crate::format::rows::check_value("", &ColumnType::Json, true, raw, &mut canonical, None)?;
                b.append_value(String::from_utf8_lossy(&canonical));
            }
            Builder::List(l) => {
                let items: Vec<&RawValue> = serde_json::from_str(raw).map_err(|_| bad("an array"))?;
                for item in items {
                    if item.get() == "null" && !l.element.nullable {
                        return Err("a null element where the type says NOT NULL (!)".into());
                    }
                    l.items.append_raw(item.get())?;
                }
                l.offsets.push(offset(l.items.len())?);
                l.nulls.append_non_null();
            }
            Builder::Struct(s) => {
                let fields: crate::format::rows::Fields = serde_json::from_str(raw).map_err(|_| bad("an object"))?;
                for (c, child) in s.cols.iter().zip(&mut s.children) {
                    let v = fields.0.iter().find(|(k, _)| k.0 == c.name).map_or("null", |(_, v)| v.get());
                    if v == "null" && !c.nullable {
                        return Err(format!("field {}: null where the type says NOT NULL", quoted(&c.name)));
                    }
                    child.append_raw(v)?;
                }
                s.nulls.append_non_null();
            }
            Builder::Map(m) => {
                let fields: crate::format::rows::Fields = serde_json::from_str(raw).map_err(|_| bad("an object"))?;
                for (k, v) in &fields.0 {
                    if v.get() == "null" && !m.value.nullable {
                        return Err("a null value where the type says NOT NULL (!)".into());
                    }
                    m.keys.append_value(&k.0);
                    m.values.append_raw(v.get())?;
                }
                m.offsets.push(offset(arrow_array::builder::ArrayBuilder::len(&m.keys))?);
                m.nulls.append_non_null();
            }
        }
        Ok(())
    }

    /// The array of the values appended since the last call; the builder starts empty again.
    fn finish(&mut self) -> std::result::Result<ArrayRef, ArrowError> {
        Ok(match self {
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Float(b) => Arc::new(b.finish()),
            Builder::Str(b) | Builder::Json(b) => Arc::new(b.finish()),
            Builder::Bool(b) => Arc::new(b.finish()),
            Builder::Date(b) => Arc::new(b.finish()),
            Builder::Ts(b) | Builder::Ntz(b) => Arc::new(b.finish()),
            Builder::Decimal(b, ..) => Arc::new(b.finish()),
            Builder::Binary(b) => Arc::new(b.finish()),
            Builder::List(l) => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::replace(&mut l.offsets, vec![0])));
                Arc::new(ListArray::try_new(l.field.clone(), offsets, l.items.finish()?, l.nulls.finish())?)
            }
            Builder::Struct(s) => {
                let len = s.nulls.len();
                let children = s.children.iter_mut().map(Builder::finish).collect::<std::result::Result<Vec<_>, _>>()?;
                Arc::new(StructArray::try_new_with_length(s.fields.clone(), children, s.nulls.finish(), len)?)
            }
            Builder::Map(m) => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::replace(&mut m.offsets, vec![0])));
                let DataType::Struct(kv) = m.entries.data_type() else {
                    return Err(ArrowError::SchemaError("map entries are not a struct".into()));
                };
                let entries = StructArray::try_new(kv.clone(), vec![Arc::new(m.keys.finish()), m.values.finish()?], None)?;
                Arc::new(MapArray::try_new(m.entries.clone(), offsets, entries, m.nulls.finish(), false)?)
            }
        })
    }
}

/// An RFC 3339 timestamp (an offset required) as µs since the epoch.
fn timestamp_us(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_micros())
}

struct Col {
    name: String,
    ty: ColumnType,
    nullable: bool,
    b: Builder,
    st: ColumnStats,
    /// The last timestamp text parsed and its µs: rows often repeat one.
    ts_cache: Option<(String, i64)>,
    /// The canonical text of the value being checked (non-flat columns).
    scratch: Vec<u8>,
}

impl Col {
    fn new(name: &str, ty: &ColumnType, nullable: bool) -> Col {
        Col {
            name: name.to_string(),
            ty: ty.clone(),
            nullable,
            b: Builder::new(ty, BATCH_ROWS),
            st: ColumnStats::for_type(ty),
            ts_cache: None,
            scratch: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.b.len()
    }

    fn kind(&self) -> &'static str {
        self.b.kind()
    }

    fn null(&mut self) -> std::result::Result<(), String> {
        if !self.nullable {
            return Err(format!(
                "column {}: null or missing value for a NOT NULL column",
                quoted(&self.name)
            ));
        }
        self.st.count_nulls(1);
        self.b.append_null();
        Ok(())
    }

    /// A value of a column the visitor does not fill: checked, counted in the statistics and
    /// appended from its raw text.
    fn raw(&mut self, raw: &str) -> std::result::Result<(), String> {
        self.scratch.clear();
        crate::format::rows::check_value(&self.name, &self.ty, self.nullable, raw, &mut self.scratch, Some(&mut self.st))?;
        self.b
            .append_raw(raw)
            .map_err(|why| format!("column {}: {why}", quoted(&self.name)))
    }

    fn mismatch(&self, found: &str) -> String {
        format!("column {}: expected {}, found {found}", quoted(&self.name), self.kind())
    }

    fn int(&mut self, v: i64) -> std::result::Result<(), String> {
        match &mut self.b {
            Builder::Int(b) => {
                b.append_value(v);
                update_stat(&mut self.st, StatValue::Int(v));
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
        update_stat(&mut self.st, StatValue::Float(if v == 0.0 { 0.0 } else { v }));
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
                update_str_stat(&mut self.st, s.as_bytes());
                Ok(())
            }
            Builder::Date(b) => {
                let days =
                    parse_date(s).ok_or_else(|| format!("column {}: {} is not a date (YYYY-MM-DD)", quoted(&self.name), quoted(s)))?;
                b.append_value(days);
                // Dates compare as their text (four-digit years).
                update_str_stat(&mut self.st, s.as_bytes());
                Ok(())
            }
            Builder::Ts(_) | Builder::Ntz(_) => {
                let ntz = matches!(self.b, Builder::Ntz(_));
                let us = match &self.ts_cache {
                    Some((last, us)) if last == s => *us,
                    _ => {
                        let us = if ntz {
                            crate::format::rows::timestamp_ntz_us(s)
                        } else {
                            timestamp_us(s)
                        };
                        let us = us.ok_or_else(|| {
                            format!(
                                "column {}: {} is not {}",
                                quoted(&self.name),
                                quoted(s),
                                if ntz { "a timestamp without offset (YYYY-MM-DDTHH:MM:SS[.f])" } else { "an RFC 3339 timestamp" }
                            )
                        })?;
                        self.ts_cache = Some((s.to_string(), us));
                        us
                    }
                };
                if let Builder::Ts(b) | Builder::Ntz(b) = &mut self.b {
                    b.append_value(us);
                }
                update_stat(&mut self.st, if ntz { StatValue::LocalInstant(us) } else { StatValue::Instant(us) });
                Ok(())
            }
            _ => Err(self.mismatch("string")),
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
            if col.b.is_flat() {
                map.next_value_seed(Value(col))?;
            } else {
                let raw: &RawValue = map.next_value()?;
                col.raw(raw.get()).map_err(de::Error::custom)?;
            }
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

/// JSONL rows read as Arrow record batches of up to [`BATCH_ROWS`] rows under a schema (the
/// type mapping of docs/EXPORT.md "Table"), every row checked as it is read: the reader behind
/// [`write_parquet`] and the Python package's `to_arrow` (docs/PYTHON.md "Outputs"). Memory:
/// one batch of builders.
pub struct JsonlBatches<R> {
    input: R,
    src: std::path::PathBuf,
    arrow: SchemaRef,
    cols: Vec<Col>,
    line: Vec<u8>,
    rows: u64,
    bytes_in: u64,
    lineno: u64,
}

impl<R: BufRead> JsonlBatches<R> {
    /// Batches of the rows of `input` (the data file `src`, for errors) under `schema`.
    ///
    /// Errors: [`Error::InvalidArgument`] when a column's type has no Arrow form here (see
    /// [`writes_type`]).
    pub fn new(input: R, src: &Path, schema: &Schema) -> Result<Self> {
        if let Some(c) = schema.columns.iter().find(|c| !writes_type(&c.ty)) {
            return Err(Error::InvalidArgument(format!(
                "column {} of type {} has no Arrow form (a map whose keys are not strings)",
                quoted(&c.name),
                c.ty
            )));
        }
        Ok(JsonlBatches {
            input,
            src: src.to_path_buf(),
            arrow: arrow_schema(schema),
            cols: schema
                .columns
                .iter()
                .map(|c| Col::new(&c.name, &c.ty, c.nullable))
                .collect(),
            line: Vec::with_capacity(4096),
            rows: 0,
            bytes_in: 0,
            lineno: 0,
        })
    }

    /// The Arrow schema of the batches ([`arrow_schema`]).
    pub fn schema(&self) -> SchemaRef {
        self.arrow.clone()
    }

    /// The next batch, `None` at the end of the input.
    ///
    /// Errors: [`Error::Corrupt`] naming the file and the 1-based line when a line is not an
    /// object of the schema's columns with values of their types, or the last line has no
    /// newline; [`Error::Io`] for read failures.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let corrupt = |lineno: u64, reason: String| Error::Corrupt {
            path: self.src.clone(),
            reason: format!("line {lineno}: {reason}"),
        };
        let mut n_rows = 0;
        while n_rows < BATCH_ROWS {
            self.line.clear();
            let n = self.input.read_until(b'\n', &mut self.line).ctx("read", &self.src)?;
            if n == 0 {
                break;
            }
            self.lineno += 1;
            self.bytes_in += n as u64;
            let lineno = self.lineno;
            if self.line.last() != Some(&b'\n') {
                return Err(corrupt(
                    lineno,
                    "the last line has no newline (the file was cut short)".into(),
                ));
            }
            let text = &self.line[..self.line.len() - 1];
            if text.first() != Some(&b'{') {
                return Err(corrupt(lineno, "not a JSON object".into()));
            }
            let mut de = serde_json::Deserializer::from_slice(text);
            Row { cols: &mut self.cols }
                .deserialize(&mut de)
                .and_then(|()| de.end())
                .map_err(|e| {
                    let msg = e.to_string();
                    let msg = msg.rsplit_once(" at line ").map(|(m, _)| m.to_string()).unwrap_or(msg);
                    corrupt(lineno, msg)
                })?;
            // Columns the row did not name are null (rows written before an ADD COLUMNS lack them).
            for c in self.cols.iter_mut().filter(|c| c.len() == n_rows) {
                c.null().map_err(|r| corrupt(lineno, r))?;
            }
            n_rows += 1;
            self.rows += 1;
        }
        if n_rows == 0 {
            return Ok(None);
        }
        let arrays = self
            .cols
            .iter_mut()
            .map(|c| c.b.finish())
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()
            .map_err(|e| Error::Internal(format!("arrow batch of {}: {e}", self.src.display())))?;
        RecordBatch::try_new(self.arrow.clone(), arrays)
            .map(Some)
            .map_err(|e| Error::Internal(format!("arrow batch of {}: {e}", self.src.display())))
    }
}

/// Stream the JSONL rows of `input` (the data file `src`, for errors) under `schema` into the
/// Parquet file `out` (its path `out_path`, for errors), snappy-compressed, in batches of
/// [`BATCH_ROWS`] rows ([`JsonlBatches`]). `out` is flushed but not fsynced. Returns what was
/// written.
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
    let mut batches = JsonlBatches::new(input, src, schema)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_created_by(concat!("tinydelta version ", env!("CARGO_PKG_VERSION")).to_string())
        .build();
    let sink = BufWriter::with_capacity(1 << 20, out);
    let mut writer =
        ArrowWriter::try_new(sink, batches.schema(), Some(props)).map_err(|e| parquet_err(out_path, e))?;
    while let Some(batch) = batches.next_batch()? {
        write_batch(&mut writer, &batch, out_path)?;
    }
    let sink = writer.into_inner().map_err(|e| parquet_err(out_path, e))?;
    let file = sink
        .into_inner()
        .map_err(|e| Error::io("write", out_path, e.into_error()))?;
    let size = file.metadata().ctx("stat", out_path)?.len();
    Ok(Written {
        rows: batches.rows,
        size,
        bytes_in: batches.bytes_in,
        stats: stats_json(schema, batches.rows, &mut batches.cols),
    })
}

fn write_batch(writer: &mut ArrowWriter<impl Write + Send>, batch: &RecordBatch, path: &Path) -> Result<()> {
    writer.write(batch).map_err(|e| parquet_err(path, e))?;
    if writer.in_progress_size() > ROW_GROUP_BYTES {
        writer.flush().map_err(|e| parquet_err(path, e))?;
    }
    Ok(())
}

fn stats_json(schema: &Schema, rows: u64, cols: &mut [Col]) -> String {
    let columns = cols.iter_mut().map(|c| std::mem::take(&mut c.st)).collect();
    crate::format::rows::FileStats::stats_json(schema, rows, columns)
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

    #[test]
    fn nested_rows_are_checked_and_counted() {
        let s = [
            "id:int!",
            "d:decimal(38,38)",
            "s:struct<a:int,t:array<str!>>",
            "m:map<str,decimal(3,1)!>",
            "j:json",
            "n:timestamp_ntz",
        ];
        let w = convert(
            &s,
            "{\"id\":1,\"d\":-0.00000000000000000000000000000000000001,\"s\":{\"a\":5,\"t\":[\"x\"]},\"m\":{\"k\":1.5},\"j\":[1,{\"a\":null}],\"n\":\"2024-01-01T00:00:00.5\"}\n\
             {\"id\":2,\"d\":null,\"s\":null,\"m\":null,\"j\":null,\"n\":null}\n",
        )
        .unwrap();
        let st: serde_json::Value = serde_json::from_str(&w.stats).unwrap();
        assert_eq!(st["nullCount"]["s"], serde_json::json!({"a": 1, "t": 1}));
        assert_eq!(st["minValues"]["s"], serde_json::json!({"a": 5}));
        assert_eq!(st["minValues"]["n"], "2024-01-01T00:00:00.500000");
        assert!(w.stats.contains("\"d\":-0.00000000000000000000000000000000000001"), "{}", w.stats);
        assert!(st["minValues"].get("j").is_none() && st["minValues"].get("m").is_none());
        for (rows, what) in [
            ("{\"id\":1,\"s\":{\"t\":[null]}}\n", "line 1: column \"s.t[0]\": null value where the type says NOT NULL"),
            ("{\"id\":1,\"s\":{\"zz\":1}}\n", "line 1: column \"s.zz\": unknown field"),
            ("{\"id\":1,\"m\":{\"k\":1.25}}\n", "line 1: column \"m.k\": 1.25 has more than 1 digits after the point"),
            ("{\"id\":1,\"d\":1}\n", "more than 0 digits before the point"),
            ("{\"id\":1,\"n\":\"2024-01-01T00:00:00Z\"}\n", "line 1: column \"n\""),
            ("{\"id\":1,\"s\":[1]}\n", "line 1: column \"s\": expected struct"),
        ] {
            let e = convert(&s, rows).expect_err(what).to_string();
            assert!(e.contains("src.jsonl") && e.contains(what), "{what}: {e}");
        }
    }
}
