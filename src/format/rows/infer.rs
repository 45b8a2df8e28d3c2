//! Schema inference from a sample of JSONL rows (`create --infer`, docs/CLI.md "Inferring a
//! schema"). Each column's type is the least type that holds every value seen:
//!
//! - objects are structs (fields in the order they first appear), arrays are arrays of the
//!   unified element type;
//! - integer literals are `int`, any number with a fraction or exponent `float` (an `int` column
//!   that meets a float widens to `float` only while every integer seen is within ±2^53, where
//!   a double holds it exactly);
//! - strings are `timestamp` when every one is an RFC 3339 timestamp with an offset, `date` when
//!   every one is `YYYY-MM-DD`, else `str`;
//! - anything else that meets (a string and a number, an object and an array, ...) is `json`,
//!   and so is a column of only nulls or only empty arrays or objects: [`Inferred::notes`] says
//!   which columns fell back and why, with the line where the conflict appeared.
//!
//! Every inferred column is nullable: a sample cannot prove that a value is never missing.

#[allow(unused_imports)]
use super::*;

use std::io::Read;

use crate::format::schema::{Column, Element};

/// What [`infer_schema`] found.
#[derive(Debug, Clone)]
pub struct Inferred {
    /// The schema, columns in the order their keys first appear.
    pub schema: Schema,
    /// One sentence per column (or nested field) that fell back to `json`, naming it and why.
    pub notes: Vec<String>,
    /// Rows read (non-blank lines).
    pub rows: u64,
}

/// The type lattice of inference.
#[derive(Debug, Clone)]
enum Shape {
    /// Only nulls so far.
    Null,
    Bool,
    /// Integers; the largest magnitude seen.
    Int(u64),
    Float,
    /// Strings; whether every one so far is a date, a timestamp.
    Str { date: bool, ts: bool },
    /// Arrays; their elements' shape (`Null` while only empty arrays were seen).
    Array(Box<Shape>),
    /// Objects; fields in order of first appearance.
    Object(Vec<(String, Shape)>),
    /// No narrower type holds the values; why, with the line.
    Json(String),
}

/// Integers up to 2^53 are exact as doubles.
const EXACT_IN_DOUBLE: u64 = 1 << 53;

fn describe(s: &Shape) -> &'static str {
    match s {
        Shape::Null => "null",
        Shape::Bool => "boolean",
        Shape::Int(_) => "integer",
        Shape::Float => "number",
        Shape::Str { .. } => "string",
        Shape::Array(_) => "array",
        Shape::Object(_) => "object",
        Shape::Json(_) => "json",
    }
}

/// The least shape holding both `a` and `b`; `line` names where `b` was seen.
fn unify(a: Shape, b: Shape, line: u64) -> Shape {
    match (a, b) {
        (Shape::Json(w), _) | (_, Shape::Json(w)) => Shape::Json(w),
        (Shape::Null, x) | (x, Shape::Null) => x,
        (Shape::Bool, Shape::Bool) => Shape::Bool,
        (Shape::Int(x), Shape::Int(y)) => Shape::Int(x.max(y)),
        (Shape::Float, Shape::Float) => Shape::Float,
        (Shape::Int(m), Shape::Float) | (Shape::Float, Shape::Int(m)) => {
            if m <= EXACT_IN_DOUBLE {
                Shape::Float
            } else {
                Shape::Json(format!(
                    "holds integers beyond 2^53 and numbers with a fraction (line {line}); a float would change the integers"
                ))
            }
        }
        (Shape::Str { date: d1, ts: t1 }, Shape::Str { date: d2, ts: t2 }) => Shape::Str {
            date: d1 && d2,
            ts: t1 && t2,
        },
        (Shape::Array(x), Shape::Array(y)) => Shape::Array(Box::new(unify(*x, *y, line))),
        (Shape::Object(mut fx), Shape::Object(fy)) => {
            for (k, v) in fy {
                match fx.iter().position(|(n, _)| *n == k) {
                    Some(i) => {
                        let old = std::mem::replace(&mut fx[i].1, Shape::Null);
                        fx[i].1 = unify(old, v, line);
                    }
                    None => fx.push((k, v)),
                }
            }
            Shape::Object(fx)
        }
        (a, b) => Shape::Json(format!(
            "holds both {} and {} values (line {line})",
            describe(&a),
            describe(&b)
        )),
    }
}

/// The shape of one raw JSON value (already parsed once as part of its line).
fn shape_of(raw: &str, depth: usize, line: u64) -> Shape {
    if depth > crate::format::schema::MAX_TYPE_DEPTH {
        return Shape::Json(format!(
            "nests deeper than {} levels",
            crate::format::schema::MAX_TYPE_DEPTH
        ));
    }
    match json_kind(raw) {
        "null" => Shape::Null,
        "boolean" => Shape::Bool,
        "number" => {
            if raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                Shape::Float
            } else {
                match raw.parse::<i64>() {
                    Ok(v) => Shape::Int(v.unsigned_abs()),
                    Err(_) => Shape::Json(format!(
                        "holds the integer {}, beyond 64 bits",
                        crate::util::quote::shortened(raw)
                    )),
                }
            }
        }
        "string" => match decode_str(raw) {
            Ok(s) => Shape::Str {
                date: valid_date(&s),
                ts: timestamp_us(&s).is_ok(),
            },
            Err(_) => Shape::Str { date: false, ts: false },
        },
        "array" => {
            let items: Vec<&RawValue> = serde_json::from_str(raw).unwrap_or_default();
            let mut s = Shape::Null;
            for item in items {
                s = unify(s, shape_of(item.get(), depth + 1, line), line);
            }
            Shape::Array(Box::new(s))
        }
        _ => match serde_json::from_str::<Fields>(raw) {
            Ok(fields) => {
                let mut out: Vec<(String, Shape)> = Vec::with_capacity(fields.0.len());
                for (k, v) in &fields.0 {
                    let s = shape_of(v.get(), depth + 1, line);
                    match out.iter().position(|(n, _)| n == k.0.as_ref()) {
                        Some(i) => {
                            let old = std::mem::replace(&mut out[i].1, Shape::Null);
                            out[i].1 = unify(old, s, line);
                        }
                        None => out.push((k.0.to_string(), s)),
                    }
                }
                Shape::Object(out)
            }
            Err(_) => Shape::Json("is not valid JSON".into()),
        },
    }
}

/// The column type of `shape`; a fallback to `json` adds a note naming `path`.
fn to_type(shape: Shape, path: &str, notes: &mut Vec<String>) -> ColumnType {
    let mut fall_back = |why: &str| {
        notes.push(format!("{} is json: it {why}", crate::util::quote::quoted(path)));
        ColumnType::Json
    };
    match shape {
        Shape::Null => fall_back("holds only nulls in the sample"),
        Shape::Bool => ColumnType::Bool,
        Shape::Int(_) => ColumnType::Int,
        Shape::Float => ColumnType::Float,
        Shape::Str { ts: true, .. } => ColumnType::Timestamp,
        Shape::Str { date: true, .. } => ColumnType::Date,
        Shape::Str { .. } => ColumnType::Str,
        Shape::Array(e) => match *e {
            Shape::Null => fall_back("holds only empty arrays or arrays of nulls in the sample"),
            e => ColumnType::Array(Box::new(Element {
                ty: to_type(e, &format!("{path}[]"), notes),
                nullable: true,
            })),
        },
        Shape::Object(fields) if fields.is_empty() => fall_back("holds only empty objects in the sample"),
        Shape::Object(fields) => {
            let mut seen = std::collections::HashSet::new();
            if let Some((k, _)) = fields.iter().find(|(k, _)| !seen.insert(k.to_lowercase())) {
                return fall_back(&format!(
                    "has fields that differ only in case ({}); Delta names are case-insensitive",
                    crate::util::quote::quoted(k)
                ));
            }
            ColumnType::Struct(
                fields
                    .into_iter()
                    .map(|(k, v)| Column {
                        ty: to_type(v, &format!("{path}.{k}"), notes),
                        name: k,
                        nullable: true,
                        physical: None,
                        field_id: None,
                        float32: false,
                    })
                    .collect(),
            )
        }
        Shape::Json(why) => fall_back(&why),
    }
}

/// Infer a schema from the first `max_rows` non-blank lines of `input` (`file` names it in
/// errors). Memory: the longest line plus the shapes of the columns.
///
/// Errors: [`Error::BadInput`] naming the line and column of a line that is not a JSON object;
/// [`Error::InvalidArgument`] when the sample holds no row; [`Error::Io`].
pub fn infer_schema(input: impl BufRead, file: &str, max_rows: u64) -> Result<Inferred> {
    infer_with(input, file, max_rows, false)?.ok_or_else(|| {
        Error::InvalidArgument(format!("{file}: no rows to infer a schema from (the sample is empty)"))
    })
}

/// The columns of every row of `input` that is a JSON object, for `append --merge-schema`
/// ([`crate::table::WriteOptions::merge_schema`]): as [`infer_schema`] over the whole input, but
/// a line that is not a JSON object, or longer than the maximum, is passed over (the write that
/// follows refuses it, naming its line). `None` when no line is a row.
///
/// Errors: [`Error::Io`].
pub fn infer_columns(input: impl BufRead, file: &str) -> Result<Option<Inferred>> {
    infer_with(input, file, u64::MAX, true)
}

/// [`infer_schema`] (`lenient`: [`infer_columns`]).
fn infer_with(mut input: impl BufRead, file: &str, max_rows: u64, lenient: bool) -> Result<Option<Inferred>> {
    let mut columns: Vec<(String, Shape)> = Vec::new();
    // Name -> index into `columns`: one lookup per key, however wide the rows.
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut line = Vec::new();
    let (mut line_no, mut rows) = (0u64, 0u64);
    while rows < max_rows {
        line.clear();
        // At most the longest line rows may have (and its `\r\n`): a file without line ends
        // (`/dev/zero`) is refused, not read into memory.
        let limit = DEFAULT_MAX_LINE_BYTES as u64 + 2;
        let n = (&mut input).take(limit).read_until(b'\n', &mut line).ctx("read", file)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if n as u64 == limit && !line.ends_with(b"\n") {
            if lenient {
                skip_line(&mut input, file)?;
                continue;
            }
            return Err(Error::BadInput {
                file: file.to_string(),
                line: line_no,
                column: "1".into(),
                reason: format!("the line is longer than the maximum of {DEFAULT_MAX_LINE_BYTES} bytes"),
            });
        }
        let line = match std::str::from_utf8(&line) {
            Ok(l) => l,
            Err(_) if lenient => continue,
            Err(e) => {
                return Err(Error::BadInput {
                    file: file.to_string(),
                    line: line_no,
                    column: (String::from_utf8_lossy(&line[..e.valid_up_to()]).chars().count() + 1).to_string(),
                    reason: "not UTF-8".into(),
                });
            }
        };
        let text = line.trim_start_matches('\u{feff}').trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        let fields: Fields = match serde_json::from_str(text) {
            Ok(f) => f,
            Err(_) if lenient => continue,
            Err(e) => {
                return Err(Error::BadInput {
                    file: file.to_string(),
                    line: line_no,
                    column: e.column().max(1).to_string(),
                    reason: excerpt(&format!("not a JSON object ({})", serde_message(&e))),
                });
            }
        };
        rows += 1;
        for (k, v) in &fields.0 {
            let s = shape_of(v.get(), 1, line_no);
            match index.get(k.0.as_ref()) {
                Some(&i) => {
                    let old = std::mem::replace(&mut columns[i].1, Shape::Null);
                    columns[i].1 = unify(old, s, line_no);
                }
                None => {
                    index.insert(k.0.to_string(), columns.len());
                    columns.push((k.0.to_string(), s));
                }
            }
        }
    }
    if rows == 0 {
        return Ok(None);
    }
    let mut notes = Vec::new();
    let columns = columns
        .into_iter()
        .map(|(name, shape)| Column {
            ty: to_type(shape, &name, &mut notes),
            name,
            nullable: true,
            physical: None,
            field_id: None,
            float32: false,
        })
        .collect();
    let schema = Schema { columns };
    if !lenient {
        schema.check_unique_names()?;
    }
    Ok(Some(Inferred { schema, notes, rows }))
}

/// Read and drop the rest of the current line of `input` (bounded buffers, any length).
fn skip_line(input: &mut impl BufRead, file: &str) -> Result<()> {
    loop {
        let buf = input.fill_buf().ctx("read", file)?;
        if buf.is_empty() {
            return Ok(());
        }
        match memchr::memchr(b'\n', buf) {
            Some(i) => {
                input.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infer(text: &str) -> Inferred {
        infer_schema(text.as_bytes(), "sample.jsonl", 1000).unwrap()
    }

    #[test]
    fn nested_and_mixed_samples() {
        let i = infer(concat!(
            "{\"id\":1,\"user\":{\"id\":7,\"name\":\"a\"},\"tags\":[\"x\"],\"t\":\"2024-01-01T00:00:00Z\",\"d\":\"2024-01-01\",\"x\":1}\n",
            "\n",
            "{\"id\":2,\"user\":{\"name\":\"b\",\"age\":3},\"tags\":[],\"t\":null,\"d\":\"2024-01-02\",\"x\":2.5,\"geo\":[1,[2,3]],\"z\":null}\n",
            "{\"id\":3,\"mixed\":\"s\"}\n",
            "{\"id\":4,\"mixed\":[1]}\n",
        ));
        assert_eq!(
            i.schema.to_cli_string(),
            "id:int user:struct<id:int,name:str,age:int> tags:array<str> t:timestamp d:date x:float geo:array<json> z:json mixed:json"
        );
        assert_eq!(i.rows, 4);
        assert_eq!(
            i.notes,
            vec![
                "\"geo[]\" is json: it holds both integer and array values (line 3)".to_string(),
                "\"z\" is json: it holds only nulls in the sample".to_string(),
                "\"mixed\" is json: it holds both string and array values (line 5)".to_string(),
            ]
        );
    }

    #[test]
    fn big_integers_do_not_become_floats() {
        let i = infer("{\"n\":9007199254740993}\n{\"n\":1.5}\n");
        assert_eq!(i.schema.to_cli_string(), "n:json");
        assert!(i.notes[0].contains("beyond 2^53"), "{:?}", i.notes);
        let bad = infer_schema(&b"{\"a\":1}\n[1]\n"[..], "s.jsonl", 10).unwrap_err().to_string();
        assert!(bad.starts_with("s.jsonl: line 2, column 1: not a JSON object"), "{bad}");
    }
}
