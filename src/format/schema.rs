//! Table schemas: the CLI's `name:type[!]` column specs and Delta's Spark `StructType` JSON
//! (Delta PROTOCOL, "Schema Serialization Format"), nested types included (docs/FORMAT.md
//! "Column types").

use std::fmt;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::util::quote::quoted;

/// A column's type (docs/FORMAT.md "Column types" lists each with its Delta type, canonical
/// JSON and statistics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnType {
    /// 64-bit signed integer; Delta `long`.
    Int,
    /// 64-bit float; Delta `double`.
    Float,
    /// UTF-8 string; Delta `string`.
    Str,
    /// Delta `boolean`.
    Bool,
    /// `YYYY-MM-DD`; Delta `date`.
    Date,
    /// RFC 3339 with an offset; Delta `timestamp`.
    Timestamp,
    /// `YYYY-MM-DDTHH:MM:SS` with 0-9 fraction digits, no offset; Delta `timestamp_ntz` (the `timestampNtz`
    /// table feature, PROTOCOL "Timestamp without timezone").
    TimestampNtz,
    /// An exact decimal of `precision` digits, `scale` of them after the point; Delta
    /// `decimal(p,s)`, 1 <= p <= 38, 0 <= s <= p.
    Decimal {
        /// Total digits, 1..=38.
        precision: u8,
        /// Digits after the point, 0..=precision.
        scale: u8,
    },
    /// Bytes, base64 (standard alphabet, padded) in JSON; Delta `binary`.
    Binary,
    /// Any JSON value, kept as canonical JSON; Delta `variant` (the `variantType` table
    /// feature).
    Json,
    /// A JSON array; Delta `array` with `elementType` and `containsNull`.
    Array(Box<Element>),
    /// A JSON object with keys of `key` and values of `value`; Delta `map` with `keyType`,
    /// `valueType` and `valueContainsNull`.
    Map(Box<MapType>),
    /// A JSON object with these fields, in this order; Delta `struct`.
    Struct(Vec<Column>),
}

/// The element type of an array or the value type of a map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// Its type.
    pub ty: ColumnType,
    /// Whether an element may be null (`containsNull`, `valueContainsNull`); `false` for `T!`.
    pub nullable: bool,
}

/// A map's key and value types. JSON object keys are strings: a key of another type is its
/// canonical JSON text (docs/FORMAT.md "Column types").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapType {
    /// The key type: `str` for maps tinydelta creates; any primitive in other writers' tables.
    pub key: ColumnType,
    /// The value type and its nullability.
    pub value: Element,
}

/// Table features tinydelta writes when a schema needs them (PROTOCOL "Table Features"), as
/// `(feature, needed by)`: both reader and writer features.
pub const TYPE_FEATURES: [&str; 2] = ["timestampNtz", "variantType"];

/// Largest nesting depth of types (a struct in an array is depth 2). Bounds the work of a
/// hostile `schemaString` and of rows checked against it, and keeps every schema's
/// `schemaString` within serde_json's 128 levels (a struct level takes three).
pub const MAX_TYPE_DEPTH: usize = 32;

impl ColumnType {
    /// The CLI spelling (`int`, `decimal(10,2)`, `array<str!>`, `struct<a:int,b:str>`, ...).
    pub fn cli_name(&self) -> String {
        self.to_string()
    }

    /// Whether values of this type are JSON objects or arrays (struct, array, map, and json,
    /// whose values may be either).
    pub fn is_nested(&self) -> bool {
        matches!(self, ColumnType::Array(_) | ColumnType::Map(_) | ColumnType::Struct(_) | ColumnType::Json)
    }

    /// The Delta type: a primitive name as a JSON string, or the JSON object of a nested type.
    pub fn delta_type(&self) -> Value {
        match self {
            ColumnType::Int => json!("long"),
            ColumnType::Float => json!("double"),
            ColumnType::Str => json!("string"),
            ColumnType::Bool => json!("boolean"),
            ColumnType::Date => json!("date"),
            ColumnType::Timestamp => json!("timestamp"),
            ColumnType::TimestampNtz => json!("timestamp_ntz"),
            ColumnType::Decimal { precision, scale } => json!(format!("decimal({precision},{scale})")),
            ColumnType::Binary => json!("binary"),
            ColumnType::Json => json!("variant"),
            ColumnType::Array(e) => {
                json!({"type": "array", "elementType": e.ty.delta_type(), "containsNull": e.nullable})
            }
            ColumnType::Map(m) => json!({
                "type": "map",
                "keyType": m.key.delta_type(),
                "valueType": m.value.ty.delta_type(),
                "valueContainsNull": m.value.nullable,
            }),
            ColumnType::Struct(fields) => struct_json(fields),
        }
    }

    /// [`ColumnType::delta_type`] as text, keys in Spark's order (`type` first).
    fn write_delta_type(&self, out: &mut String) {
        let flag = |b: bool| if b { "true" } else { "false" };
        match self {
            ColumnType::Array(e) => {
                out.push_str("{\"type\":\"array\",\"elementType\":");
                e.ty.write_delta_type(out);
                out.push_str(",\"containsNull\":");
                out.push_str(flag(e.nullable));
                out.push('}');
            }
            ColumnType::Map(m) => {
                out.push_str("{\"type\":\"map\",\"keyType\":");
                m.key.write_delta_type(out);
                out.push_str(",\"valueType\":");
                m.value.ty.write_delta_type(out);
                out.push_str(",\"valueContainsNull\":");
                out.push_str(flag(m.value.nullable));
                out.push('}');
            }
            ColumnType::Struct(fields) => write_struct(fields, out),
            leaf => out.push_str(&leaf.delta_type().to_string()),
        }
    }

    /// The table features values of this type need (a subset of [`TYPE_FEATURES`]), added to
    /// `out`.
    fn features(&self, out: &mut Vec<&'static str>) {
        let mut add = |f: &'static str| {
            if !out.contains(&f) {
                out.push(f);
            }
        };
        match self {
            ColumnType::TimestampNtz => add("timestampNtz"),
            ColumnType::Json => add("variantType"),
            ColumnType::Array(e) => e.ty.features(out),
            ColumnType::Map(m) => {
                m.key.features(out);
                m.value.ty.features(out);
            }
            ColumnType::Struct(fields) => fields.iter().for_each(|f| f.ty.features(out)),
            _ => {}
        }
    }

    /// The tinydelta type of a Delta type (docs/FORMAT.md "Column types"): every integer type
    /// is `int`, `float` and `double` are `float`. Errors: a sentence naming the type when
    /// tinydelta has no mapping for it, or it is malformed or nested deeper than
    /// [`MAX_TYPE_DEPTH`].
    fn from_delta(v: &Value, depth: usize) -> std::result::Result<ColumnType, String> {
        if depth > MAX_TYPE_DEPTH {
            return Err(format!("types are nested deeper than {MAX_TYPE_DEPTH} levels"));
        }
        if let Some(s) = v.as_str() {
            return Ok(match s {
                "long" | "integer" | "short" | "byte" => ColumnType::Int,
                "double" | "float" => ColumnType::Float,
                "string" => ColumnType::Str,
                "boolean" => ColumnType::Bool,
                "date" => ColumnType::Date,
                "timestamp" => ColumnType::Timestamp,
                "timestamp_ntz" => ColumnType::TimestampNtz,
                "binary" => ColumnType::Binary,
                "variant" => ColumnType::Json,
                _ => match parse_decimal_args(s.strip_prefix("decimal")) {
                    Some(Ok(t)) => t,
                    Some(Err(why)) => return Err(format!("Delta type {s:?}: {why}")),
                    None => return Err(format!("Delta type {s:?} {NOT_READ}")),
                },
            });
        }
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        let flag = |k: &str| {
            v.get(k)
                .map(|b| b.as_bool().ok_or_else(|| format!("{kind} type: {k:?} is not true or false")))
                .unwrap_or(Ok(true))
        };
        let sub = |k: &str| {
            v.get(k)
                .ok_or_else(|| format!("{kind} type without {k:?}"))
                .and_then(|t| ColumnType::from_delta(t, depth + 1))
        };
        match kind {
            "array" => Ok(ColumnType::Array(Box::new(Element {
                ty: sub("elementType")?,
                nullable: flag("containsNull")?,
            }))),
            "map" => {
                let key = sub("keyType")?;
                if key.is_nested() || matches!(key, ColumnType::Binary) {
                    return Err(format!("map keys of type {key}: a type {NOT_READ} as a key (JSON object keys are strings)"));
                }
                Ok(ColumnType::Map(Box::new(MapType {
                    key,
                    value: Element {
                        ty: sub("valueType")?,
                        nullable: flag("valueContainsNull")?,
                    },
                })))
            }
            "struct" => Ok(ColumnType::Struct(fields_from_delta(v, depth + 1)?)),
            _ => Err(format!("Delta type {v} {NOT_READ}")),
        }
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bang = |n: bool| if n { "" } else { "!" };
        match self {
            ColumnType::Int => f.write_str("int"),
            ColumnType::Float => f.write_str("float"),
            ColumnType::Str => f.write_str("str"),
            ColumnType::Bool => f.write_str("bool"),
            ColumnType::Date => f.write_str("date"),
            ColumnType::Timestamp => f.write_str("timestamp"),
            ColumnType::TimestampNtz => f.write_str("timestamp_ntz"),
            ColumnType::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
            ColumnType::Binary => f.write_str("binary"),
            ColumnType::Json => f.write_str("json"),
            ColumnType::Array(e) => write!(f, "array<{}{}>", e.ty, bang(e.nullable)),
            ColumnType::Map(m) => write!(f, "map<{},{}{}>", m.key, m.value.ty, bang(m.value.nullable)),
            ColumnType::Struct(fields) => {
                f.write_str("struct<")?;
                for (i, c) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{}:{}{}", cli_name(&c.name), c.ty, bang(c.nullable))?;
                }
                f.write_str(">")
            }
        }
    }
}

/// `decimal(p,s)`'s `(p,s)` (the text after `decimal`): `None` when `rest` is `None`, else the
/// type or why not.
fn parse_decimal_args(rest: Option<&str>) -> Option<std::result::Result<ColumnType, String>> {
    let inner = rest?.trim().strip_prefix('(')?.strip_suffix(')')?;
    let (p, s) = inner.split_once(',')?;
    let (Ok(p), Ok(s)) = (p.trim().parse::<u8>(), s.trim().parse::<u8>()) else {
        return Some(Err("precision and scale must be small whole numbers".into()));
    };
    if !(1..=38).contains(&p) {
        return Some(Err(format!("precision {p} is outside 1..=38")));
    }
    if s > p {
        return Some(Err(format!("scale {s} is larger than the precision {p}")));
    }
    Some(Ok(ColumnType::Decimal { precision: p, scale: s }))
}

fn struct_json(fields: &[Column]) -> Value {
    let fields: Vec<Value> = fields
        .iter()
        .map(|c| json!({"name": c.name, "type": c.ty.delta_type(), "nullable": c.nullable, "metadata": {}}))
        .collect();
    json!({"type": "struct", "fields": fields})
}

/// [`struct_json`] as text with the keys in the order Spark and delta-rs write them (`type`
/// first; a field's `name`, `type`, `nullable`, `metadata`), which `serde_json::Value` does not
/// keep (it sorts keys).
fn write_struct(fields: &[Column], out: &mut String) {
    out.push_str("{\"type\":\"struct\",\"fields\":[");
    for (i, c) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        out.push_str(&Value::from(c.name.as_str()).to_string());
        out.push_str(",\"type\":");
        c.ty.write_delta_type(out);
        out.push_str(if c.nullable { ",\"nullable\":true" } else { ",\"nullable\":false" });
        out.push_str(",\"metadata\":{}}");
    }
    out.push_str("]}");
}

/// The table property naming the column mapping mode (PROTOCOL "Column Mapping").
pub const COLUMN_MAPPING_MODE: &str = "delta.columnMapping.mode";

/// How a type tinydelta has no mapping for is named in a schema error ([`Schema::refused`]).
const NOT_READ: &str = "is not one tinydelta reads";

/// The fields of a Delta `struct` type object. Errors as [`ColumnType::from_delta`]; also a
/// field without a name or named twice (regardless of case).
fn fields_from_delta(v: &Value, depth: usize) -> std::result::Result<Vec<Column>, String> {
    let fields = v
        .get("fields")
        .and_then(Value::as_array)
        .ok_or("struct type without a \"fields\" list")?;
    let mut out: Vec<Column> = Vec::with_capacity(fields.len());
    for f in fields {
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or("struct field without a \"name\" string")?;
        let ty = f
            .get("type")
            .ok_or_else(|| format!("field {} has no type", quoted(name)))
            .and_then(|t| ColumnType::from_delta(t, depth))
            .map_err(|why| format!("column {}: {why}", quoted(name)))?;
        let nullable = match f.get("nullable") {
            None => true,
            Some(b) => b
                .as_bool()
                .ok_or_else(|| format!("column {}: \"nullable\" is not true or false", quoted(name)))?,
        };
        let meta = f.get("metadata");
        let physical = meta
            .and_then(|m| m.get("delta.columnMapping.physicalName"))
            .map(|p| {
                p.as_str()
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| format!("column {}: delta.columnMapping.physicalName is not a name", quoted(name)))
            })
            .transpose()?;
        let field_id = meta
            .and_then(|m| m.get("delta.columnMapping.id"))
            .map(|i| {
                i.as_i64()
                    .ok_or_else(|| format!("column {}: delta.columnMapping.id is not an integer", quoted(name)))
            })
            .transpose()?;
        out.push(Column {
            name: name.to_string(),
            ty,
            nullable,
            physical,
            field_id,
            float32: f.get("type").and_then(Value::as_str) == Some("float"),
        });
    }
    // As `create` refuses it (docs/FORMAT.md "Schema evolution"): a row cannot hold both.
    if let Some((d, c)) = first_duplicate(&out) {
        return Err(format!(
            "columns {} and {} have the same name regardless of case (Delta column names are case-insensitive)",
            quoted(d),
            quoted(c)
        ));
    }
    Ok(out)
}

/// One column: name, type, nullability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Column name (a JSON object key in every row).
    pub name: String,
    /// Its type.
    pub ty: ColumnType,
    /// `false` for `name:type!` (NOT NULL).
    pub nullable: bool,
    /// Its physical name in data files, partition values and statistics, when the table uses
    /// column mapping (PROTOCOL "Column Mapping": `delta.columnMapping.physicalName`; kept by
    /// [`Schema::with_mapping`] only in modes `name` and `id`).
    pub physical: Option<String>,
    /// Its Parquet field id (`delta.columnMapping.id`), kept only in mode `id`.
    pub field_id: Option<i64>,
    /// Whether its Delta type is `float` (32 bits): tinydelta's `float` is Delta's `double`,
    /// and a Parquet FLOAT value in a `double` column (type widening, PROTOCOL "Type
    /// Widening") is written as the double it widens to.
    pub float32: bool,
}

impl Column {
    /// The key of this column in data files, `partitionValues` and statistics: its physical
    /// name under column mapping, else its name.
    pub fn physical_name(&self) -> &str {
        self.physical.as_deref().unwrap_or(&self.name)
    }
}

/// Column names reserved for the change data feed (Delta CDF's metadata columns), refused at
/// `create` and `alter`, regardless of case.
pub const RESERVED_NAMES: [&str; 3] = ["_change_type", "_commit_version", "_commit_timestamp"];

/// An ordered list of columns; the order is the key order of canonical rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// Columns in schema order.
    pub columns: Vec<Column>,
}

/// The type names of the CLI syntax, for messages.
const TYPE_NAMES: &str = "int, float, str, bool, date, timestamp, timestamp_ntz, decimal(P,S), binary, json, array<T>, map<str,T>, struct<NAME:T,...>";

/// A recursive-descent parser of one CLI type (docs/CLI.md "Column types"); positions are
/// 1-based character columns of the whole spec, for messages.
struct TypeParser<'a> {
    s: &'a str,
    /// Byte offset of the next unread character.
    at: usize,
    /// Byte offset of the type within the spec (the part after `NAME:`).
    base: usize,
    spec: &'a str,
}

impl<'a> TypeParser<'a> {
    fn err(&self, at: usize, why: impl fmt::Display) -> Error {
        let col = self.spec[..(self.base + at).min(self.spec.len())].chars().count() + 1;
        Error::InvalidArgument(format!("column spec {}, character {col}: {why}", quoted(self.spec)))
    }

    fn skip_ws(&mut self) {
        while self.s[self.at..].starts_with(' ') {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.s[self.at..].starts_with(c) {
            self.at += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<()> {
        if self.eat(c) {
            return Ok(());
        }
        let found = self.s[self.at..].chars().next().map_or("the end".to_string(), |c| format!("{c:?}"));
        Err(self.err(self.at, format!("expected {c:?}, found {found}")))
    }

    /// A word of letters, digits and `_` (a type name).
    fn word(&mut self) -> &'a str {
        self.skip_ws();
        let start = self.at;
        let len = self.s[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(self.s.len() - start);
        self.at += len;
        &self.s[start..start + len]
    }

    /// `T` followed by an optional `!`: the type and whether it is nullable.
    fn element(&mut self, depth: usize) -> Result<Element> {
        let ty = self.ty(depth)?;
        let nullable = !self.eat('!');
        Ok(Element { ty, nullable })
    }

    fn ty(&mut self, depth: usize) -> Result<ColumnType> {
        self.skip_ws();
        let start = self.at;
        if depth > MAX_TYPE_DEPTH {
            return Err(self.err(start, format!("types are nested deeper than {MAX_TYPE_DEPTH} levels")));
        }
        let word = self.word();
        Ok(match word {
            "int" => ColumnType::Int,
            "float" => ColumnType::Float,
            "str" => ColumnType::Str,
            "bool" => ColumnType::Bool,
            "date" => ColumnType::Date,
            "timestamp" => ColumnType::Timestamp,
            "timestamp_ntz" => ColumnType::TimestampNtz,
            "binary" => ColumnType::Binary,
            "json" => ColumnType::Json,
            "decimal" => {
                self.skip_ws();
                let open = self.at;
                let close = self.s[open..].find(')').map(|i| open + i + 1);
                let args = close.map(|c| &self.s[open..c]);
                match parse_decimal_args(args) {
                    Some(Ok(t)) => {
                        self.at = close.unwrap_or(self.s.len());
                        t
                    }
                    Some(Err(why)) => return Err(self.err(open, why)),
                    None => return Err(self.err(open, "expected (PRECISION,SCALE) after decimal, e.g. decimal(10,2)")),
                }
            }
            "array" => {
                self.expect('<')?;
                let e = self.element(depth + 1)?;
                self.expect('>')?;
                ColumnType::Array(Box::new(e))
            }
            "map" => {
                self.expect('<')?;
                self.skip_ws();
                let key_at = self.at;
                let key = self.ty(depth + 1)?;
                if key != ColumnType::Str {
                    return Err(self.err(key_at, format!("map keys must be str (JSON object keys are strings), not {key}")));
                }
                self.expect(',')?;
                let value = self.element(depth + 1)?;
                self.expect('>')?;
                ColumnType::Map(Box::new(MapType { key, value }))
            }
            "struct" => {
                self.expect('<')?;
                let mut fields: Vec<Column> = Vec::new();
                loop {
                    self.skip_ws();
                    let name_at = self.at;
                    let name: std::borrow::Cow<'a, str> = match quoted_name(&self.s[name_at..]) {
                        Some(Ok((name, _))) if name.is_empty() => {
                            return Err(self.err(name_at, "a field name cannot be empty"));
                        }
                        Some(Ok((name, len))) => {
                            self.at += len;
                            name.into()
                        }
                        Some(Err(why)) => return Err(self.err(name_at, why)),
                        None => {
                            let len = self.s[name_at..].find([':', ',', '<', '>']).unwrap_or(self.s.len() - name_at);
                            self.at += len;
                            let name = self.s[name_at..name_at + len].trim_end();
                            if name.is_empty() {
                                return Err(self.err(name_at, "expected a field name"));
                            }
                            name.into()
                        }
                    };
                    let name = name.as_ref();
                    if fields.iter().any(|f| f.name.eq_ignore_ascii_case(name)) {
                        return Err(self.err(name_at, format!("field {} is named twice (names are case-insensitive)", quoted(name))));
                    }
                    self.expect(':')?;
                    let e = self.element(depth + 1)?;
                    fields.push(Column {
                        name: name.to_string(),
                        ty: e.ty,
                        nullable: e.nullable,
                        physical: None,
                        field_id: None,
                        float32: false,
                    });
                    if !self.eat(',') {
                        break;
                    }
                }
                self.expect('>')?;
                ColumnType::Struct(fields)
            }
            "" => return Err(self.err(start, format!("expected a type ({TYPE_NAMES})"))),
            other => return Err(self.err(start, format!("unknown type {} (types: {TYPE_NAMES})", quoted(other)))),
        })
    }
}

/// A name as the CLI syntax spells it: as it is, or as a JSON string when it is empty, holds a
/// character the syntax uses (`:` `,` `<` `>` `!` `"` or a space), or is not printable
/// (docs/CLI.md "Column types").
pub fn cli_name(name: &str) -> std::borrow::Cow<'_, str> {
    let plain = !name.is_empty()
        && !name
            .chars()
            .any(|c| matches!(c, ':' | ',' | '<' | '>' | '!' | '"' | ' ') || c.is_control() || c.is_whitespace());
    if plain {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(serde_json::Value::from(name).to_string())
    }
}

/// A name spelled as a JSON string at the start of `s` ([`cli_name`]): `None` when `s` does not
/// start with `"`, else the name and the bytes it takes, or why it is malformed.
fn quoted_name(s: &str) -> Option<std::result::Result<(String, usize), String>> {
    if !s.starts_with('"') {
        return None;
    }
    let b = s.as_bytes();
    let mut k = 1;
    while k < b.len() {
        match b[k] {
            b'\\' => k += 2,
            b'"' => {
                return Some(
                    serde_json::from_str::<String>(&s[..=k])
                        .map(|name| (name, k + 1))
                        .map_err(|e| format!("the quoted name is not a JSON string ({e})")),
                );
            }
            _ => k += 1,
        }
    }
    Some(Err("the quoted name has no closing \"".into()))
}

/// The first column whose name equals an earlier one's regardless of case, as (earlier, later)
/// names: one hash lookup per column, so a schema of many thousands of columns is checked in
/// linear time (docs/FORMAT.md "Schema evolution").
fn first_duplicate(columns: &[Column]) -> Option<(&str, &str)> {
    let mut seen: std::collections::HashMap<std::borrow::Cow<'_, str>, &str> =
        std::collections::HashMap::with_capacity(columns.len());
    for c in columns {
        let key = if c.name.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase()) {
            std::borrow::Cow::Borrowed(c.name.as_str())
        } else {
            std::borrow::Cow::Owned(c.name.to_lowercase())
        };
        if let Some(d) = seen.insert(key, &c.name) {
            return Some((d, &c.name));
        }
    }
    None
}

impl Schema {
    /// Parse CLI column specs such as `["id:int!", "region:str", "tags:array<str>"]`
    /// (docs/CLI.md "Column types").
    ///
    /// Errors: [`Error::InvalidArgument`] naming the bad spec and the character where a type is
    /// malformed, an unknown type, or a duplicate column.
    pub fn parse_cli(specs: &[String]) -> Result<Schema> {
        if specs.is_empty() {
            return Err(Error::InvalidArgument(
                "a table needs at least one column, given as NAME:TYPE (types: int, float, str, bool, date, timestamp, ...; a trailing ! means NOT NULL)".into(),
            ));
        }
        let mut columns: Vec<Column> = Vec::with_capacity(specs.len());
        // Lower-cased name -> index: one lookup per column, not a scan of those before it.
        let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::with_capacity(specs.len());
        for spec in specs {
            let not_spec = || Error::InvalidArgument(format!("column spec {} is not NAME:TYPE", quoted(spec)));
            let (name, ty, base): (std::borrow::Cow<'_, str>, &str, usize) = match quoted_name(spec) {
                Some(Ok((name, len))) => {
                    let ty = spec[len..].strip_prefix(':').ok_or_else(not_spec)?;
                    (name.into(), ty, len + 1)
                }
                Some(Err(why)) => return Err(Error::InvalidArgument(format!("column spec {}: {why}", quoted(spec)))),
                None => {
                    let (name, ty) = spec.split_once(':').ok_or_else(not_spec)?;
                    (name.into(), ty, name.len() + 1)
                }
            };
            let name = name.as_ref();
            if name.is_empty() {
                return Err(Error::InvalidArgument(format!("column spec {} has an empty name", quoted(spec))));
            }
            let mut p = TypeParser {
                s: ty,
                at: 0,
                base,
                spec,
            };
            let e = p.element(1)?;
            p.skip_ws();
            if p.at < ty.len() {
                return Err(p.err(p.at, format!("unexpected {} after the type", quoted(&ty[p.at..]))));
            }
            if let Some(c) = seen.get(&name.to_lowercase()).map(|&i| &columns[i]) {
                return Err(Error::InvalidArgument(if c.name == name {
                    format!("column {} is named twice", quoted(name))
                } else {
                    format!(
                        "columns {} and {} differ only in case; Delta column names are case-insensitive",
                        quoted(&c.name),
                        quoted(name)
                    )
                }));
            }
            seen.insert(name.to_lowercase(), columns.len());
            columns.push(Column {
                name: name.to_string(),
                ty: e.ty,
                nullable: e.nullable,
                physical: None,
                field_id: None,
                float32: false,
            });
        }
        Ok(Schema { columns })
    }

    /// Refuse column names equal regardless of case (Delta column names are case-insensitive,
    /// PROTOCOL "Schema Serialization Format"). Errors: [`Error::InvalidArgument`] naming both.
    /// Also refuses the change feed's reserved names ([`RESERVED_NAMES`]).
    pub fn check_unique_names(&self) -> Result<()> {
        for c in &self.columns {
            if let Some(r) = RESERVED_NAMES.iter().find(|r| r.eq_ignore_ascii_case(&c.name)) {
                return Err(Error::InvalidArgument(format!(
                    "column name {} is reserved for the change feed ({r}); choose another name",
                    quoted(&c.name)
                )));
            }
        }
        if let Some((d, c)) = first_duplicate(&self.columns) {
            return Err(Error::InvalidArgument(format!(
                "columns {} and {} have the same name regardless of case; Delta column names are case-insensitive",
                quoted(d),
                quoted(c)
            )));
        }
        Ok(())
    }

    /// The table features (PROTOCOL "Table Features") this schema's types need, in
    /// [`TYPE_FEATURES`] order: `timestampNtz` for `timestamp_ntz`, `variantType` for `json`.
    pub fn features(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for c in &self.columns {
            c.ty.features(&mut out);
        }
        TYPE_FEATURES.iter().copied().filter(|f| out.contains(f)).collect()
    }

    /// The Spark `StructType` JSON Delta keeps in `metaData.schemaString`; every field has
    /// `"metadata":{}`.
    pub fn to_schema_string(&self) -> String {
        let mut out = String::new();
        write_struct(&self.columns, &mut out);
        out
    }

    /// The error of a `schemaString` that [`Schema::from_schema_string`] refused with `reason`,
    /// in the commit or checkpoint at `path`: [`Error::Unsupported`] when it names a type
    /// tinydelta does not read (not damage: docs/FORMAT.md "Tables of other Delta writers"),
    /// else [`Error::Corrupt`].
    pub fn refused(path: std::path::PathBuf, reason: String) -> Error {
        if reason.contains(NOT_READ) {
            Error::Unsupported { path, what: reason }
        } else {
            Error::Corrupt { path, reason }
        }
    }

    /// Parse `metaData.schemaString`. Errors: a message for [`Error::Corrupt`] when it is not a
    /// struct of types tinydelta knows, names a column twice, or nests deeper than
    /// [`MAX_TYPE_DEPTH`].
    pub fn from_schema_string(s: &str) -> std::result::Result<Schema, String> {
        let v: Value = serde_json::from_str(s).map_err(|e| format!("schemaString is not a StructType: {e}"))?;
        match v.get("type").and_then(Value::as_str) {
            Some("struct") => {}
            other => return Err(format!("schemaString has type {other:?}, not struct")),
        }
        let columns = fields_from_delta(&v, 1)?;
        if columns.is_empty() {
            return Err("schemaString has no columns".into());
        }
        Ok(Schema { columns })
    }

    /// The schema of `metaData` (its `schemaString`), with the physical names and field ids
    /// its column mapping mode uses (PROTOCOL "Column Mapping"; [`Schema::with_mapping`]).
    /// Errors: as [`Schema::from_schema_string`]; an unknown mode, or a mode whose columns lack
    /// their physical names or ids, is named (a message for [`Schema::refused`]).
    pub fn of_metadata(m: &crate::format::actions::Metadata) -> std::result::Result<Schema, String> {
        let s = Schema::from_schema_string(&m.schema_string)?;
        s.with_mapping(m.configuration.get(COLUMN_MAPPING_MODE).map(String::as_str))
    }

    /// This schema under column mapping mode `mode` (`delta.columnMapping.mode`; absent is
    /// `none`): in `none` physical names and ids are dropped (data files use the names); in
    /// `name` every column, nested fields too, must have its physical name (ids dropped); in
    /// `id` its physical name and its id. Errors: a sentence naming the mode or the column.
    pub fn with_mapping(mut self, mode: Option<&str>) -> std::result::Result<Schema, String> {
        fn walk(cols: &mut [Column], keep_id: bool, keep: bool, at: &str) -> std::result::Result<(), String> {
            for c in cols {
                let name = if at.is_empty() { c.name.clone() } else { format!("{at}.{}", c.name) };
                if !keep {
                    c.physical = None;
                    c.field_id = None;
                } else {
                    if c.physical.is_none() {
                        return Err(format!(
                            "column {} has no delta.columnMapping.physicalName, which column mapping needs",
                            quoted(&name)
                        ));
                    }
                    if !keep_id {
                        c.field_id = None;
                    } else if c.field_id.is_none() {
                        return Err(format!(
                            "column {} has no delta.columnMapping.id, which column mapping mode id needs",
                            quoted(&name)
                        ));
                    }
                }
                let mut ty = &mut c.ty;
                loop {
                    match ty {
                        ColumnType::Struct(f) => {
                            walk(f, keep_id, keep, &name)?;
                            break;
                        }
                        ColumnType::Array(e) => ty = &mut e.ty,
                        ColumnType::Map(m) => {
                            if let ColumnType::Struct(f) = &mut m.key {
                                walk(f, keep_id, keep, &name)?;
                            }
                            ty = &mut m.value.ty;
                        }
                        _ => break,
                    }
                }
            }
            Ok(())
        }
        let (mut keep, keep_id) = match mode {
            None | Some("none") => (false, false),
            Some("name") => (true, false),
            Some("id") => (true, true),
            Some(other) => {
                return Err(format!(
                    "column mapping mode {} {NOT_READ} (only none, name and id are)",
                    quoted(other)
                ));
            }
        };
        // A mode set on a table whose fields have no physical names at all (the property set
        // on a reader version 1 table, where column mapping is not in force) reads by names.
        if !self.columns.iter().any(|c| c.physical.is_some()) {
            keep = false;
        }
        walk(&mut self.columns, keep_id, keep, "")?;
        Ok(self)
    }

    /// What this schema says about data files beyond its `schemaString` as tinydelta writes it:
    /// each column's physical name, field id and 32-bit float type where set (nested fields
    /// too), as text; empty when none is. Converted rows depend on it (docs/FORMAT.md "Parquet
    /// data files").
    pub fn file_signature(&self) -> String {
        fn walk(cols: &[Column], out: &mut String) {
            for c in cols {
                if c.physical.is_some() || c.field_id.is_some() || c.float32 {
                    out.push_str(&format!("{:?}:{:?}:{:?}:{};", c.name, c.physical, c.field_id, c.float32));
                }
                let mut ty = &c.ty;
                loop {
                    match ty {
                        ColumnType::Struct(f) => {
                            out.push('{');
                            walk(f, out);
                            out.push('}');
                            break;
                        }
                        ColumnType::Array(e) => ty = &e.ty,
                        ColumnType::Map(m) => ty = &m.value.ty,
                        _ => break,
                    }
                }
            }
        }
        let mut out = String::new();
        walk(&self.columns, &mut out);
        if out.chars().all(|c| c == '{' || c == '}') {
            out.clear();
        }
        out
    }

    /// `schema.json` of the mount and `describe --json`:
    /// `{"columns":[{"name","type","nullable","deltaType"}]}` (`deltaType` a string, or the
    /// Delta JSON object of a nested type), pretty-printed with a final newline.
    pub fn to_pretty_json(&self) -> String {
        let cols: Vec<_> = self
            .columns
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": c.ty.cli_name(), "nullable": c.nullable, "deltaType": c.ty.delta_type()})
            })
            .collect();
        let mut s = serde_json::to_string_pretty(&json!({ "columns": cols })).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Refuse a schema that schema evolution (`alter add-column`, `append --merge-schema`)
    /// would make but a table may not have (docs/FORMAT.md "Schema evolution"): as `create`
    /// refuses them, a reserved or empty name, names equal regardless of case, or types nested
    /// deeper than [`MAX_TYPE_DEPTH`] (its `schemaString` must read back as itself).
    ///
    /// Errors: [`Error::InvalidArgument`] saying which.
    pub fn check_evolved(&self) -> Result<()> {
        self.check_unique_names()?;
        fn empty(cols: &[Column], at: &str) -> Option<String> {
            for c in cols {
                let path = if at.is_empty() { c.name.clone() } else { format!("{at}.{}", c.name) };
                if c.name.is_empty() {
                    return Some(path);
                }
                let mut ty = &c.ty;
                loop {
                    ty = match ty {
                        ColumnType::Array(e) => &e.ty,
                        ColumnType::Map(m) => &m.value.ty,
                        _ => break,
                    };
                }
                if let ColumnType::Struct(f) = ty
                    && let Some(p) = empty(f, &path)
                {
                    return Some(p);
                }
            }
            None
        }
        if let Some(p) = empty(&self.columns, "") {
            return Err(Error::InvalidArgument(format!(
                "the schema would have an empty column or field name (at {}); rename the key",
                quoted(&p)
            )));
        }
        match Schema::from_schema_string(&self.to_schema_string()) {
            Ok(back) if back == *self => Ok(()),
            Ok(_) => Err(Error::Internal("a schema does not read back as itself from its schemaString".into())),
            Err(why) => Err(Error::InvalidArgument(format!("the schema would not be one a table may have: {why}"))),
        }
    }

    /// This schema with the columns and struct fields of `incoming` that it lacks added at the
    /// end of their struct, all nullable (Delta `mergeSchema`: docs/CLI.md "Adding columns while
    /// appending"). A name that exists (regardless of case) keeps its type: structs are merged
    /// field by field, also inside array elements and map values; any other type difference is
    /// left for row validation to report. Returns the merged schema and the paths added
    /// (`user.email`, `events[].kind`, `attrs{}.note`), in order.
    pub fn merged_with(&self, incoming: &Schema) -> (Schema, Vec<String>) {
        let mut columns = self.columns.clone();
        let mut added = Vec::new();
        merge_fields(&mut columns, &incoming.columns, "", &mut added);
        (Schema { columns }, added)
    }

    /// The schema with `column` added at `path` (field names from the top, the new column's
    /// name last): at the end of the top level for a one-element path, else at the end of the
    /// struct `path[..n-1]` names (regardless of case; a segment naming an array or map of
    /// structs steps into its elements or values).
    ///
    /// Errors: [`Error::InvalidArgument`] when a segment names no struct field or the field
    /// exists already (regardless of case).
    pub fn with_field(&self, path: &[&str], column: Column) -> Result<Schema> {
        let mut columns = self.columns.clone();
        let mut fields = &mut columns;
        let mut at = String::new();
        for seg in &path[..path.len().saturating_sub(1)] {
            if !at.is_empty() {
                at.push('.');
            }
            at.push_str(seg);
            let Some(c) = fields.iter_mut().find(|c| c.name.eq_ignore_ascii_case(seg)) else {
                return Err(Error::InvalidArgument(format!("{} names no column or field", quoted(&at))));
            };
            let shown = c.ty.to_string();
            match struct_fields(&mut c.ty) {
                Some(f) => fields = f,
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "{} is {shown}, not a struct: fields are added only to structs",
                        quoted(&at)
                    )));
                }
            }
        }
        if let Some(old) = fields.iter().find(|c| c.name.eq_ignore_ascii_case(&column.name)) {
            let full = if at.is_empty() { old.name.clone() } else { format!("{at}.{}", old.name) };
            return Err(Error::InvalidArgument(if old.ty == column.ty {
                format!("column {} already exists (column names are case-insensitive)", quoted(&full))
            } else {
                format!(
                    "column {} already exists as {}: changing a column's type is not supported (Delta allows only adding nullable columns here)",
                    quoted(&full),
                    old.ty
                )
            }));
        }
        fields.push(column);
        let schema = Schema { columns };
        schema.check_evolved()?;
        Ok(schema)
    }

    /// `id:int! region:str` — the CLI spelling, as `describe` prints it.
    pub fn to_cli_string(&self) -> String {
        self.columns
            .iter()
            .map(|c| format!("{}:{}{}", cli_name(&c.name), c.ty, if c.nullable { "" } else { "!" }))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Add to `fields` the fields of `incoming` it lacks (nullable), merging structs found on both
/// sides; `at` is the path of `fields`' struct, `added` collects the new paths.
fn merge_fields(fields: &mut Vec<Column>, incoming: &[Column], at: &str, added: &mut Vec<String>) {
    for inc in incoming {
        let path = if at.is_empty() { inc.name.clone() } else { format!("{at}.{}", inc.name) };
        match fields.iter_mut().find(|c| c.name.eq_ignore_ascii_case(&inc.name)) {
            Some(c) => merge_types(&mut c.ty, &inc.ty, &path, added),
            None => {
                added.push(path);
                fields.push(Column {
                    name: inc.name.clone(),
                    ty: inc.ty.clone(),
                    nullable: true,
                    physical: None,
                    field_id: None,
                    float32: false,
                });
            }
        }
    }
}

/// The fields of the struct `ty` is, or holds as its (nested) array element or map value.
fn struct_fields(ty: &mut ColumnType) -> Option<&mut Vec<Column>> {
    match ty {
        ColumnType::Struct(f) => Some(f),
        ColumnType::Array(e) => struct_fields(&mut e.ty),
        ColumnType::Map(m) => struct_fields(&mut m.value.ty),
        _ => None,
    }
}

/// [`merge_fields`] inside `ty` and `inc` when both are structs, arrays of them or maps of them.
fn merge_types(ty: &mut ColumnType, inc: &ColumnType, path: &str, added: &mut Vec<String>) {
    match (ty, inc) {
        (ColumnType::Struct(f), ColumnType::Struct(g)) => merge_fields(f, g, path, added),
        (ColumnType::Array(e), ColumnType::Array(g)) => merge_types(&mut e.ty, &g.ty, &format!("{path}[]"), added),
        (ColumnType::Map(m), ColumnType::Map(g)) => merge_types(&mut m.value.ty, &g.value.ty, &format!("{path}{{}}"), added),
        // A JSON object in a map column infers as a struct of its keys: each key's value is a
        // value of the map.
        (ColumnType::Map(m), ColumnType::Struct(g)) => {
            for f in g {
                merge_types(&mut m.value.ty, &f.ty, &format!("{path}{{}}"), added);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(specs: &[&str]) -> Result<Schema> {
        Schema::parse_cli(&specs.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn cli_round_trip() {
        let s = parse(&["id:int!", "name:str", "t:timestamp"]).unwrap();
        assert_eq!(s.to_cli_string(), "id:int! name:str t:timestamp");
        let back = Schema::from_schema_string(&s.to_schema_string()).unwrap();
        assert_eq!(back, s);
        assert!(s.to_schema_string().contains(r#""metadata":{}"#));
        assert!(s.features().is_empty());
    }

    #[test]
    fn nested_types_round_trip() {
        let s = parse(&[
            "user:struct<id:int!, name:str, tags:array<str!>>!",
            "m:map<str,decimal(10,2)!>",
            "d:decimal(38,0)",
            "b:binary",
            "n:timestamp_ntz",
            "j:json",
            "deep:array<array<struct<x:json>>>",
        ])
        .unwrap();
        assert_eq!(
            s.to_cli_string(),
            "user:struct<id:int!,name:str,tags:array<str!>>! m:map<str,decimal(10,2)!> d:decimal(38,0) b:binary n:timestamp_ntz j:json deep:array<array<struct<x:json>>>"
        );
        let again = Schema::parse_cli(&s.to_cli_string().split(' ').map(String::from).collect::<Vec<_>>()).unwrap();
        assert_eq!(again, s);
        let back = Schema::from_schema_string(&s.to_schema_string()).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.features(), vec!["timestampNtz", "variantType"]);
        let v: Value = serde_json::from_str(&s.to_schema_string()).unwrap();
        assert_eq!(v["fields"][1]["type"]["valueType"], "decimal(10,2)");
        assert_eq!(v["fields"][1]["type"]["valueContainsNull"], false);
        assert_eq!(v["fields"][0]["type"]["fields"][2]["type"]["containsNull"], false);
    }

    #[test]
    fn bad_specs() {
        assert!(parse(&["id"]).is_err());
        assert!(parse(&["id:integer"]).is_err());
        assert!(parse(&["a:int", "a:str"]).is_err());
        assert!(parse(&[]).is_err());
        let msg = |specs: &[&str]| parse(specs).unwrap_err().to_string();
        assert!(msg(&["t:array<int"]).contains("character 12: expected '>', found the end"), "{}", msg(&["t:array<int"]));
        assert!(msg(&["t:struct<a:int,a:str>"]).contains("character 16: field \"a\" is named twice"));
        assert!(msg(&["d:decimal(39,1)"]).contains("precision 39 is outside 1..=38"));
        assert!(msg(&["d:decimal(3,4)"]).contains("scale 4 is larger than the precision 3"));
        assert!(msg(&["d:decimal"]).contains("expected (PRECISION,SCALE)"));
        assert!(msg(&["m:map<int,str>"]).contains("map keys must be str"));
        assert!(msg(&["x:int>"]).contains("unexpected \">\" after the type"));
        assert!(msg(&["x:struct<>"]).contains("expected a field name"));
        let deep = format!("x:{}int{}", "array<".repeat(70), ">".repeat(70));
        assert!(msg(&[&deep]).contains("nested deeper than 32"));
    }

    #[test]
    fn names_the_syntax_uses_are_quoted() {
        let s = Schema {
            columns: vec![
                Column { name: "a:b".into(), ty: ColumnType::Struct(vec![Column { name: "x,y>".into(), ty: ColumnType::Int, nullable: true, physical: None, field_id: None, float32: false }, Column { name: "e f".into(), ty: ColumnType::Str, nullable: false, physical: None, field_id: None, float32: false }]), nullable: true, physical: None, field_id: None, float32: false },
                Column { name: "plain".into(), ty: ColumnType::Int, nullable: false, physical: None, field_id: None, float32: false },
                Column { name: "say \"hi\" !".into(), ty: ColumnType::Int, nullable: true, physical: None, field_id: None, float32: false },
            ],
        };
        let cli = s.to_cli_string();
        assert_eq!(cli, r#""a:b":struct<"x,y>":int,"e f":str!> plain:int! "say \"hi\" !":int"#);
        let specs = [r#""a:b":struct<"x,y>":int,"e f":str!>"#, "plain:int!", r#""say \"hi\" !":int"#];
        assert_eq!(parse(&specs).unwrap(), s);
        assert!(parse(&[r#""a:int"#]).unwrap_err().to_string().contains("no closing"));
        assert!(parse(&[r#""a"int"#]).unwrap_err().to_string().contains("is not NAME:TYPE"));
        assert!(Schema::from_schema_string(r#"{"type":"struct","fields":[]}"#).unwrap_err().contains("no columns"));
        assert!(parse(&[r#"s:struct<"":int>"#]).unwrap_err().to_string().contains("cannot be empty"));
        // Evolution refuses what create refuses, and types nested too deep.
        let mut deep = ColumnType::Int;
        for _ in 0..MAX_TYPE_DEPTH {
            deep = ColumnType::Struct(vec![Column { name: "a".into(), ty: deep, nullable: true, physical: None, field_id: None, float32: false }]);
        }
        let too_deep = Schema { columns: vec![Column { name: "n".into(), ty: deep, nullable: true, physical: None, field_id: None, float32: false }] };
        assert!(too_deep.check_evolved().unwrap_err().to_string().contains("deeper"));
        let reserved = Schema { columns: vec![Column { name: "_change_type".into(), ty: ColumnType::Int, nullable: true, physical: None, field_id: None, float32: false }] };
        assert!(reserved.check_evolved().is_err());
        let empty = Schema { columns: vec![Column { name: "s".into(), ty: ColumnType::Struct(vec![Column { name: String::new(), ty: ColumnType::Int, nullable: true, physical: None, field_id: None, float32: false }]), nullable: true, physical: None, field_id: None, float32: false }] };
        assert!(empty.check_evolved().unwrap_err().to_string().contains("empty"));
    }

    #[test]
    fn schema_strings_of_other_writers() {
        let s = Schema::from_schema_string(
            r#"{"type":"struct","fields":[{"name":"m","type":{"type":"map","keyType":"integer","valueType":"string","valueContainsNull":true},"nullable":true,"metadata":{}},{"name":"x","type":"decimal(8,5)","nullable":true,"metadata":{}}]}"#,
        )
        .unwrap();
        assert_eq!(s.to_cli_string(), "m:map<int,str> x:decimal(8,5)");
        let dup = r#"{"type":"struct","fields":[{"name":"i","type":"long","nullable":true,"metadata":{}},{"name":"I","type":"long","nullable":true,"metadata":{}}]}"#;
        assert!(Schema::from_schema_string(dup).unwrap_err().contains("\"i\" and \"I\" have the same name regardless of case"));
        let deep = format!("{}\"long\"{}", r#"{"type":"array","containsNull":true,"elementType":"#.repeat(80), "}".repeat(80));
        let deep = format!(r#"{{"type":"struct","fields":[{{"name":"d","type":{deep},"nullable":true}}]}}"#);
        assert!(Schema::from_schema_string(&deep).unwrap_err().contains("nested deeper"));
        assert!(Schema::from_schema_string(r#"{"type":"struct","fields":[{"name":"u","type":"interval","nullable":true}]}"#).is_err());
    }
}
