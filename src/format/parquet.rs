//! Parquet data files and Delta checkpoints, read with the Apache Arrow crates (`parquet` with
//! its `arrow` feature): the rows of a Parquet data file as canonical JSONL (docs/FORMAT.md,
//! "Parquet data files"), and the actions of a Delta Parquet checkpoint (PROTOCOL
//! "Checkpoints").
//!
//! Nothing read here is trusted: a file that is cut, is not Parquet, or holds a value tinydelta
//! cannot write as JSON is an [`Error::Corrupt`] naming the file (and the column and row where
//! one is to blame), never a partial answer.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Decimal32Type, Decimal64Type, Decimal128Type, Decimal256Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt8Type,
    UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::format::actions::Action;
use crate::error::{Error, Result};
use crate::format::rows::decimal;
use crate::format::schema::{ColumnType, Schema};
use crate::util::quote::quoted;

/// Rows per Arrow batch while converting.
const BATCH_ROWS: usize = 8192;

/// Whether a data file is Parquet by its name (delta-rs and Spark write `*.parquet`); files of
/// any other name are read as JSONL, and one holding Parquet's `PAR1` magic is named as such.
pub fn is_parquet_name(rel: &str) -> bool {
    rel.ends_with(".parquet")
}

fn corrupt(path: &Path, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// A copy of `e` (its errno when it has one).
fn same_io(e: &std::io::Error) -> std::io::Error {
    e.raw_os_error()
        .map(std::io::Error::from_raw_os_error)
        .unwrap_or_else(|| std::io::Error::new(e.kind(), e.to_string()))
}

/// A failure to read Parquet `path`: an I/O error inside it (EMFILE on the reader's `dup`, EIO)
/// is [`Error::Io`], never damage; anything else is [`Error::Corrupt`] saying `what` ("data
/// file", "checkpoint") is not readable Parquet.
fn unreadable(path: &Path, what: &str, e: &(dyn std::error::Error + 'static)) -> Error {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return Error::io("read", path, same_io(io));
        }
        if let Some(parquet::errors::ParquetError::External(inner)) = c.downcast_ref::<parquet::errors::ParquetError>()
            && let Some(io) = inner.downcast_ref::<std::io::Error>()
        {
            return Error::io("read", path, same_io(io));
        }
        cause = c.source();
    }
    corrupt(path, format!("{what} is not readable Parquet: {e}"))
}

fn open_reader(file: File, path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let len = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
    let again = file.try_clone().map_err(|e| Error::io("open", path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| unreadable(path, "data file", &e))?;
    check_footer(builder.metadata(), len).map_err(|why| corrupt(path, format!("damaged Parquet footer: {why}")))?;
    // INT96 timestamps (Spark) are decoded to microseconds, not the parquet crate's default
    // nanoseconds, which wrap after 2262 (docs/FORMAT.md "Parquet data files").
    let Some(hinted) = int96_as_micros(builder.schema(), builder.parquet_schema()) else {
        return Ok(builder);
    };
    let options = parquet::arrow::arrow_reader::ArrowReaderOptions::new().with_schema(std::sync::Arc::new(hinted));
    let meta = parquet::arrow::arrow_reader::ArrowReaderMetadata::try_new(builder.metadata().clone(), options)
        .map_err(|e| unreadable(path, "data file", &e))?;
    Ok(ParquetRecordBatchReaderBuilder::new_with_metadata(again, meta))
}

/// The Arrow schema of a file with every INT96 column (a leaf whose Parquet physical type is
/// INT96: Spark's timestamps) as `Timestamp(Microsecond)` instead of nanoseconds; `None` when
/// the file has no INT96 column (or its leaves do not line up with the Arrow fields).
fn int96_as_micros(
    arrow: &arrow_schema::Schema,
    parquet: &parquet::schema::types::SchemaDescriptor,
) -> Option<arrow_schema::Schema> {
    use arrow_schema::{Field, Fields};
    use std::sync::Arc;
    let int96: Vec<bool> = parquet
        .columns()
        .iter()
        .map(|c| c.physical_type() == parquet::basic::Type::INT96)
        .collect();
    if !int96.contains(&true) {
        return None;
    }
    fn field(f: &Field, leaves: &mut std::slice::Iter<'_, bool>) -> Option<Field> {
        let ty = match f.data_type() {
            DataType::Struct(children) => DataType::Struct(fields(children, leaves)?),
            DataType::List(c) => DataType::List(Arc::new(field(c, leaves)?)),
            DataType::LargeList(c) => DataType::LargeList(Arc::new(field(c, leaves)?)),
            DataType::FixedSizeList(c, n) => DataType::FixedSizeList(Arc::new(field(c, leaves)?), *n),
            DataType::Map(c, sorted) => DataType::Map(Arc::new(field(c, leaves)?), *sorted),
            other => {
                let is_int96 = *leaves.next()?;
                match other {
                    DataType::Timestamp(TimeUnit::Nanosecond, tz) if is_int96 => {
                        DataType::Timestamp(TimeUnit::Microsecond, tz.clone())
                    }
                    t => t.clone(),
                }
            }
        };
        Some(f.clone().with_data_type(ty))
    }
    fn fields(fs: &Fields, leaves: &mut std::slice::Iter<'_, bool>) -> Option<Fields> {
        fs.iter().map(|f| field(f, leaves)).collect::<Option<Vec<Field>>>().map(Fields::from)
    }
    let mut leaves = int96.iter();
    let out = fields(arrow.fields(), &mut leaves)?;
    leaves.next().is_none().then(|| arrow_schema::Schema::new_with_metadata(out, arrow.metadata().clone()))
}

/// The footer's numbers that the decoder trusts, checked against the file before any decoding
/// (docs/FORMAT.md "Parquet data files"): row counts not negative, and every column chunk's
/// start (its dictionary page, else its first data page) and compressed length not negative and
/// within the file's `len` bytes (the parquet crate panics on a negative one).
fn check_footer(meta: &parquet::file::metadata::ParquetMetaData, len: u64) -> std::result::Result<(), String> {
    if meta.file_metadata().num_rows() < 0 {
        return Err(format!("{} rows", meta.file_metadata().num_rows()));
    }
    for (g, group) in meta.row_groups().iter().enumerate() {
        if group.num_rows() < 0 {
            return Err(format!("row group {g} has {} rows", group.num_rows()));
        }
        for (c, chunk) in group.columns().iter().enumerate() {
            let start = chunk.dictionary_page_offset().unwrap_or(chunk.data_page_offset());
            let size = chunk.compressed_size();
            let within = u64::try_from(start)
                .ok()
                .zip(u64::try_from(size).ok())
                .and_then(|(a, n)| a.checked_add(n))
                .is_some_and(|end| end <= len);
            if !within || chunk.data_page_offset() < 0 {
                return Err(format!(
                    "row group {g}, column chunk {c}: {size} bytes at offset {start}, outside the file of {len} bytes"
                ));
            }
        }
    }
    Ok(())
}

thread_local! {
    /// Whether this thread is in [`contained`]: its panics are returned, not printed.
    static CONTAINED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `decode` (the decoding of the one Parquet file at `path`) so that a panic in the decoder
/// (the parquet and arrow crates assert on some damaged files) becomes [`Error::Corrupt`] naming
/// the file, never the end of the process (docs/FORMAT.md "Parquet data files"). The panic is not
/// printed: the error says it.
pub fn contained<T>(path: &Path, decode: impl FnOnce() -> Result<T>) -> Result<T> {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    let was = CONTAINED.with(|c| c.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode));
    CONTAINED.with(|c| c.set(was));
    r.unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Err(corrupt(
            path,
            format!(
                "the Parquet decoder failed on it ({}); the file is damaged",
                crate::util::quote::shortened(&why)
            ),
        ))
    })
}

/// Write the rows of the Parquet data file `file` (at `path`, for messages) to `out` as
/// canonical JSONL under `schema`: one compact object per row, keys in schema order, every
/// column present (a column the file lacks is `null`, as Delta readers read a column missing
/// from an older file), partition columns filled from `partition` (the `add`'s
/// `partitionValues`, typed by the schema). Values as docs/FORMAT.md, "Parquet data files".
/// The rows at the indexes of `deleted` (from 0, the file's deletion vector: PROTOCOL "Deletion
/// Vectors") are left out; each index must be a row of the file. Returns the number of rows
/// written.
///
/// Errors: [`Error::Corrupt`] naming `path` when the file is not readable Parquet (cut,
/// garbage), a column's Parquet type does not fit its Delta type, a value has no JSON form
/// (NaN, an out-of-range date), or a partition value does not parse; [`Error::Io`] on `out`.
pub fn write_jsonl(
    file: File,
    path: &Path,
    schema: &Schema,
    partition: &BTreeMap<String, Option<String>>,
    deleted: Option<&roaring::RoaringTreemap>,
    out: &mut impl Write,
) -> Result<u64> {
    let builder = open_reader(file, path)?.with_batch_size(BATCH_ROWS);
    refuse_shredded_variants(builder.schema(), schema, path)?;
    let declared = builder.metadata().file_metadata().num_rows();
    let reader = builder
        .build()
        .map_err(|e| unreadable(path, "data file", &e))?;
    // Key prefixes (`"name":`) and partition values (already JSON), once.
    let prefixes = key_prefixes(schema);
    let mut fixed: Vec<Option<Vec<u8>>> = Vec::with_capacity(schema.columns.len());
    for c in &schema.columns {
        // Keyed by physical name under column mapping (PROTOCOL "Column Mapping").
        let key = c.physical_name();
        let pv = partition
            .iter()
            .find(|(k, _)| *k == key)
            .or_else(|| partition.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)));
        fixed.push(match pv {
            None => None,
            Some((_, None)) => Some(b"null".to_vec()),
            Some((_, Some(s))) => Some(
                partition_json(&c.ty, s)
                    .map_err(|why| corrupt(path, format!("partition value of column {}: {why}", quoted(&c.name))))?,
            ),
        });
    }
    let mut rows = 0u64;
    let mut line = Vec::with_capacity(1 << 10);
    let layout = RowLayout {
        schema,
        prefixes: &prefixes,
        fixed: &fixed,
        src: Source::Parquet,
    };
    for batch in reader {
        let batch = batch.map_err(|e| unreadable(path, "data file", &e))?;
        let mut cols = batch_columns(&batch, schema, &fixed);
        // Type widening (PROTOCOL "Type Widening"): a Parquet FLOAT column of a Delta `double`
        // column is read as the doubles it widens to (`1.100000023841858`, not `1.1`).
        let widened: Vec<Option<arrow_array::Float64Array>> = cols
            .iter()
            .zip(&schema.columns)
            .map(|(a, c)| {
                let p = a.filter(|_| !c.float32)?.as_primitive_opt::<Float32Type>()?;
                Some(p.iter().map(|v| v.map(f64::from)).collect())
            })
            .collect();
        for (c, w) in cols.iter_mut().zip(&widened) {
            if let Some(w) = w {
                *c = Some(w as &dyn Array);
            }
        }
        // The keys of dictionary-encoded columns, once per batch (asked per value, they cost a
        // pass over the batch each: quadratic in the batch size).
        let keys: Vec<Option<Vec<usize>>> = cols
            .iter()
            .map(|c| c.and_then(|a| a.as_any_dictionary_opt()).map(|d| d.normalized_keys()))
            .collect();
        for r in 0..batch.num_rows() {
            if deleted.is_some_and(|d| d.contains(rows + r as u64)) {
                continue;
            }
            line.clear();
            row_json(&layout, &cols, &keys, r, &mut line).map_err(|(ci, why)| {
                corrupt(
                    path,
                    format!("row {}, column {}: {why}", rows + r as u64 + 1, quoted(&schema.columns[ci].name)),
                )
            })?;
            out.write_all(&line)
                .map_err(|e| Error::io("write", "<converted rows>", e))?;
        }
        rows += batch.num_rows() as u64;
    }
    if i64::try_from(rows).ok() != Some(declared) {
        return Err(corrupt(
            path,
            format!("data file's footer records {declared} rows, but {rows} were read"),
        ));
    }
    let Some(d) = deleted else { return Ok(rows) };
    if let Some(max) = d.max()
        && max >= rows
    {
        return Err(corrupt(
            path,
            format!("its deletion vector deletes row index {max}, but the file holds {rows} rows"),
        ));
    }
    Ok(rows - d.len())
}

/// The key prefixes (`{"name":`, `,"name":`) of the schema's columns, once per file.
fn key_prefixes(schema: &Schema) -> Vec<Vec<u8>> {
    schema
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut p = if i == 0 { b"{".to_vec() } else { b",".to_vec() };
            let _ = serde_json::to_writer(&mut p, &c.name);
            p.push(b':');
            p
        })
        .collect()
}

/// What stays the same for every row of a batch turned into JSONL: the table's schema, each
/// column's `"name":` prefix ([`key_prefixes`]), the fixed partition values, and where the
/// batch comes from.
struct RowLayout<'a> {
    schema: &'a Schema,
    prefixes: &'a [Vec<u8>],
    fixed: &'a [Option<Vec<u8>>],
    src: Source,
}

/// Row `r` of a batch (its columns `cols` as [`batch_columns`] found them, dictionary keys
/// `keys`) as one canonical JSONL line with its `\n`, appended to `line`. Errors: the index of
/// the column to blame and why.
fn row_json(
    layout: &RowLayout<'_>,
    cols: &[Option<&dyn Array>],
    keys: &[Option<Vec<usize>>],
    r: usize,
    line: &mut Vec<u8>,
) -> std::result::Result<(), (usize, String)> {
    let RowLayout {
        schema,
        prefixes,
        fixed,
        src,
    } = *layout;
    for (ci, c) in schema.columns.iter().enumerate() {
        line.extend_from_slice(&prefixes[ci]);
        let at = line.len();
        match (&fixed[ci], cols[ci]) {
            (Some(v), _) => line.extend_from_slice(v),
            (None, None) => line.extend_from_slice(b"null"),
            (None, Some(a)) => match (&keys[ci], a.as_any_dictionary_opt()) {
                (Some(k), Some(d)) if !a.is_null(r) && r < k.len() => {
                    value_json_from(d.values().as_ref(), k[r], &c.ty, src, line)
                }
                _ => value_json_from(a, r, &c.ty, src, line),
            }
            .map_err(|why| (ci, why))?,
        }
        // A NOT NULL column holds no null, whatever the file format (as JSONL data).
        if !c.nullable && &line[at..] == b"null" {
            return Err((ci, "null value for a NOT NULL column".into()));
        }
    }
    if schema.columns.is_empty() {
        line.push(b'{');
    }
    line.extend_from_slice(b"}\n");
    Ok(())
}

/// The rows of an Arrow record batch given as input (the Python package's `append` of a
/// pyarrow, pandas or polars table: docs/PYTHON.md "Inputs") as canonical JSONL lines of
/// `schema`, appended to `out`, for the same write path as a JSONL input. Columns are matched
/// by name (exact, else regardless of case); a column the batch lacks is null. `name` and
/// `first_row` (1-based number of the batch's first row in the whole input) name a bad value.
///
/// Errors: [`Error::BadInput`] naming `name`, the row as its line and the column, when the batch
/// has a column the schema lacks or a value does not fit its column's type.
pub fn batch_jsonl(batch: &RecordBatch, schema: &Schema, name: &str, first_row: u64, out: &mut Vec<u8>) -> Result<()> {
    let bad = |line: u64, column: &str, reason: String| Error::BadInput {
        file: name.to_string(),
        line,
        column: quoted(column),
        reason,
    };
    if let Some(f) = batch.schema_ref().fields().iter().find(|f| {
        !schema.columns.iter().any(|c| c.name == *f.name() || c.name.eq_ignore_ascii_case(f.name()))
    }) {
        return Err(bad(
            first_row,
            f.name(),
            "unknown column (not in the table's schema; `alter add-column` adds it)".into(),
        ));
    }
    let fixed = vec![None; schema.columns.len()];
    let cols = batch_columns(batch, schema, &fixed);
    let keys: Vec<Option<Vec<usize>>> = cols
        .iter()
        .map(|c| c.and_then(|a| a.as_any_dictionary_opt()).map(|d| d.normalized_keys()))
        .collect();
    let prefixes = key_prefixes(schema);
    let layout = RowLayout {
        schema,
        prefixes: &prefixes,
        fixed: &fixed,
        src: Source::Arrow,
    };
    for r in 0..batch.num_rows() {
        row_json(&layout, &cols, &keys, r, out)
            .map_err(|(ci, why)| {
                bad(
                    first_row + r as u64,
                    &schema.columns[ci].name,
                    why.replacen("Parquet type", "Arrow type", 1),
                )
            })?;
    }
    Ok(())
}

/// Refuse a file that holds shredded Delta `variant` values (PROTOCOL "Variant Shredding": a
/// `typed_value` field beside `metadata` and `value`) in a column of `schema`: tinydelta decodes
/// unshredded variants only (docs/FORMAT.md "Variant"). Errors: [`Error::Unsupported`] naming
/// the file and the column.
fn refuse_shredded_variants(file: &arrow_schema::Schema, schema: &Schema, path: &Path) -> Result<()> {
    fn shredded(f: &arrow_schema::Field, ty: &ColumnType) -> bool {
        match (f.data_type(), ty) {
            (DataType::Struct(fields), ColumnType::Json) => fields.iter().any(|x| x.name() == "typed_value"),
            (DataType::Struct(fields), ColumnType::Struct(cols)) => {
                cols.iter().any(|c| field_of(fields, c).is_some_and(|i| shredded(&fields[i], &c.ty)))
            }
            (DataType::List(e) | DataType::LargeList(e) | DataType::FixedSizeList(e, _), ColumnType::Array(t)) => {
                shredded(e, &t.ty)
            }
            (DataType::Map(entries, _), ColumnType::Map(m)) => match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => shredded(&kv[1], &m.value.ty),
                _ => false,
            },
            _ => false,
        }
    }
    for c in &schema.columns {
        if let Some(i) = field_of(file.fields(), c)
            && shredded(&file.fields()[i], &c.ty)
        {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                what: format!(
                    "column {} holds shredded Parquet variant values (PROTOCOL \"Variant Shredding\"), which tinydelta does not decode",
                    quoted(&c.name)
                ),
            });
        }
    }
    Ok(())
}

/// Row `r` of the Parquet variant struct `st` (`metadata` and `value` binaries, PROTOCOL
/// "Variant data in Parquet") as JSON, with the `parquet-variant-json` crate after a full
/// validation of both binaries (a cut or damaged one is an error, never a panic or a guess):
/// objects with their keys in the variant's order, decimals exact, dates and timestamps as
/// strings, binary as base64. A value with no JSON form (a NaN double) is an error.
fn variant_json(st: &arrow_array::StructArray, r: usize, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    use parquet_variant_json::VariantToJson;
    fn binary(a: &dyn Array, r: usize) -> Option<&[u8]> {
        match a.data_type() {
            DataType::Binary => Some(a.as_binary::<i32>().value(r)),
            DataType::LargeBinary => Some(a.as_binary::<i64>().value(r)),
            DataType::BinaryView => Some(a.as_binary_view().value(r)),
            _ => None,
        }
    }
    let field = |name: &str| {
        st.column_by_name(name)
            .ok_or_else(|| format!("a variant without its {name:?} field"))
    };
    let (m, v) = (field("metadata")?, field("value")?);
    if v.is_null(r) {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    if m.is_null(r) {
        return Err("a variant value without metadata".into());
    }
    let (Some(meta), Some(value)) = (binary(m.as_ref(), r), binary(v.as_ref(), r)) else {
        return Err(format!(
            "a variant's metadata and value are {} and {}, not binary",
            m.data_type(),
            v.data_type()
        ));
    };
    let variant = parquet_variant::Variant::try_new(meta, value)
        .and_then(|v| v.with_full_validation())
        .map_err(|e| format!("the variant value is damaged ({e})"))?;
    let at = out.len();
    variant
        .to_json(out)
        .map_err(|e| format!("the variant value has no JSON form ({e})"))?;
    // NaN and infinite doubles come out as words JSON does not have.
    if serde_json::from_slice::<serde::de::IgnoredAny>(&out[at..]).is_err() {
        out.truncate(at);
        return Err("the variant value has no JSON form (a NaN or infinite number)".into());
    }
    Ok(())
}

/// The Arrow column of each schema column in `batch` (exact name, else the same name
/// regardless of case: Delta column names are case-insensitive); `None` for partition columns
/// and for columns the file lacks.
fn batch_columns<'a>(batch: &'a RecordBatch, schema: &Schema, fixed: &[Option<Vec<u8>>]) -> Vec<Option<&'a dyn Array>> {
    let fields = batch.schema_ref().fields().clone();
    schema
        .columns
        .iter()
        .zip(fixed)
        .map(|(c, f)| {
            if f.is_some() {
                return None;
            }
            let i = field_of(&fields, c)?;
            Some(batch.column(i).as_ref())
        })
        .collect()
}

/// The index among the file's `fields` (one struct level) of column `c` (PROTOCOL "Column
/// Mapping", docs/FORMAT.md "Column mapping"): with a field id (mode `id`), the field carrying
/// that Parquet field id, or, when no field of this level carries any id (a file written
/// before ids), the one of its physical name; with a physical name (mode `name`), the field of
/// that name; else the field of its name, exact, else regardless of case (Delta column names
/// are case-insensitive). `None`: the file lacks the column (its values are null).
fn field_of(fields: &arrow_schema::Fields, c: &crate::format::schema::Column) -> Option<usize> {
    const ID: &str = parquet::arrow::PARQUET_FIELD_ID_META_KEY;
    if let Some(id) = c.field_id {
        let want = id.to_string();
        if let Some(i) = fields.iter().position(|f| f.metadata().get(ID) == Some(&want)) {
            return Some(i);
        }
        if fields.iter().any(|f| f.metadata().contains_key(ID)) {
            return None;
        }
    }
    if let Some(p) = &c.physical {
        return fields.iter().position(|f| f.name() == p);
    }
    fields
        .iter()
        .position(|x| x.name() == &c.name)
        .or_else(|| fields.iter().position(|x| x.name().eq_ignore_ascii_case(&c.name)))
}

/// A partition value (Delta PROTOCOL "Partition Value Serialization") as canonical JSON of `ty`.
fn partition_json(ty: &ColumnType, s: &str) -> std::result::Result<Vec<u8>, String> {
    let bad = || format!("{} is not a {ty}", quoted(s));
    let mut out = Vec::new();
    match ty {
        // An empty value is null for every type, strings included (PROTOCOL "Partition Value
        // Serialization": "an empty string for any type translates to a null partition value").
        _ if s.is_empty() => out.extend_from_slice(b"null"),
        ColumnType::Str => {
            let _ = serde_json::to_writer(&mut out, s);
        }
        ColumnType::Int => out.extend_from_slice(s.parse::<i64>().map_err(|_| bad())?.to_string().as_bytes()),
        ColumnType::Float => {
            let f: f64 = s.parse().map_err(|_| bad())?;
            float_json(f, &mut out)?;
        }
        ColumnType::Bool => match s {
            "true" => out.extend_from_slice(b"true"),
            "false" => out.extend_from_slice(b"false"),
            _ => return Err(bad()),
        },
        ColumnType::Date => {
            let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| bad())?;
            date_json(d, &mut out)?;
        }
        ColumnType::Timestamp => {
            let us = parse_partition_timestamp(s).ok_or_else(bad)?;
            micros_json(us, &mut out)?;
        }
        ColumnType::TimestampNtz => {
            let t = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").map_err(|_| bad())?;
            local_micros_json(t.and_utc().timestamp_micros(), &mut out)?;
        }
        ColumnType::Decimal { precision, scale } => {
            out.extend_from_slice(decimal(s, *precision, *scale)?.1.as_bytes());
        }
        ColumnType::Binary | ColumnType::Json | ColumnType::Array(_) | ColumnType::Map(_) | ColumnType::Struct(_) => {
            return Err(format!("partition columns of type {ty} are not read"));
        }
    }
    Ok(out)
}

/// Microseconds since 1970-01-01T00:00:00 (no zone) as `"YYYY-MM-DDTHH:MM:SS.ffffff"`: a
/// `timestamp_ntz` value.
fn local_micros_json(us: i64, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    use chrono::Datelike;
    let t = chrono::DateTime::from_timestamp_micros(us).ok_or_else(|| format!("timestamp {us} us is out of range"))?;
    if !(1..=9999).contains(&t.year()) {
        return Err(format!("timestamp {us} us is outside the years 0001-9999"));
    }
    write!(out, "\"{}\"", t.naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f")).map_err(|e| e.to_string())
}

/// The decimal with unscaled digits `unscaled` (an integer's text, maybe negative) and
/// `arrow_scale`, as the canonical text of `ty` (exact; an error when it does not fit).
fn decimal_json(unscaled: &str, arrow_scale: i8, ty: &ColumnType, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    let ColumnType::Decimal { precision, scale } = ty else {
        return Err(format!("a decimal does not hold a {ty} column"));
    };
    let text = format!("{unscaled}e{}", -i64::from(arrow_scale));
    out.extend_from_slice(decimal(&text, *precision, *scale)?.1.as_bytes());
    Ok(())
}

/// `{year}-{month}-{day} {hour}:{minute}:{second}[.micros]` (UTC), or RFC 3339.
fn parse_partition_timestamp(s: &str) -> Option<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_micros());
    }
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc().timestamp_micros())
}

/// A finite float in serde_json's form (`18.0`, `1e300`); NaN and infinities have no JSON form.
fn float_json(f: f64, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    if !f.is_finite() {
        return Err(format!("{f} has no JSON form (tinydelta's floats are finite)"));
    }
    let _ = serde_json::to_writer(&mut *out, &f);
    Ok(())
}

fn date_json(d: chrono::NaiveDate, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    use chrono::Datelike;
    if !(0..=9999).contains(&d.year()) {
        return Err(format!("date {d} is outside the years 0000-9999"));
    }
    write!(out, "\"{}\"", d.format("%Y-%m-%d")).map_err(|e| e.to_string())
}

/// Microseconds since the epoch as `"YYYY-MM-DDTHH:MM:SS.ffffffZ"`.
fn micros_json(us: i64, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    use chrono::Datelike;
    let t = chrono::DateTime::from_timestamp_micros(us).ok_or_else(|| format!("timestamp {us} us is out of range"))?;
    if !(0..=9999).contains(&t.year()) {
        return Err(format!("timestamp {us} us is outside the years 0000-9999"));
    }
    write!(out, "\"{}\"", t.format("%Y-%m-%dT%H:%M:%S%.6fZ")).map_err(|e| e.to_string())
}

/// Where the Arrow arrays being turned into rows come from: a Parquet data file or checkpoint
/// (a `json` column must be a variant struct, PROTOCOL "Variant Data Type"), or Arrow data
/// handed to the Python package (docs/PYTHON.md "Inputs"), where a `json` column may also be the
/// JSON text `to_arrow` gives it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Parquet,
    Arrow,
}

/// Row `r` of `a` as canonical JSON of a column of type `ty`, as read from a Parquet file.
fn value_json(a: &dyn Array, r: usize, ty: &ColumnType, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    value_json_from(a, r, ty, Source::Parquet, out)
}

/// Row `r` of `a` as canonical JSON of a column of type `ty`, with `src` saying which Arrow
/// types a `json` column may have.
fn value_json_from(
    a: &dyn Array,
    r: usize,
    ty: &ColumnType,
    src: Source,
    out: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    if a.is_null(r) {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    if let Some(d) = a.as_any_dictionary_opt() {
        let k = d.normalized_keys()[r];
        return value_json_from(d.values().as_ref(), k, ty, src, out);
    }
    let mismatch = || {
        let kind = if src == Source::Arrow { "Arrow" } else { "Parquet" };
        let t = ty.to_string();
        let article = if t.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
        format!("{kind} type {} does not hold {article} {t} column", a.data_type())
    };
    macro_rules! int {
        ($t:ty) => {
            if let Some(p) = a.as_primitive_opt::<$t>() {
                let v = p.value(r);
                return match ty {
                    ColumnType::Int => {
                        let v = i64::try_from(v).map_err(|_| format!("{v} is outside the 64-bit integer range"))?;
                        out.extend_from_slice(v.to_string().as_bytes());
                        Ok(())
                    }
                    ColumnType::Float => float_json(v as f64, out),
                    // Type widening (PROTOCOL "Type Widening"): an integer in a decimal column.
                    ColumnType::Decimal { .. } => decimal_json(&v.to_string(), 0, ty, out),
                    _ => Err(mismatch()),
                };
            }
        };
    }
    int!(Int8Type);
    int!(Int16Type);
    int!(Int32Type);
    int!(Int64Type);
    int!(UInt8Type);
    int!(UInt16Type);
    int!(UInt32Type);
    int!(UInt64Type);
    match (a.data_type(), ty) {
        (DataType::Float32, ColumnType::Float) => {
            let v = a.as_primitive::<Float32Type>().value(r);
            if !v.is_finite() {
                return Err(format!("{v} has no JSON form (tinydelta's floats are finite)"));
            }
            // The shortest form that reads back as the same f32 (`1.1`, not `1.100000023841858`).
            let _ = serde_json::to_writer(&mut *out, &v);
            Ok(())
        }
        (DataType::Float64, ColumnType::Float) => float_json(a.as_primitive::<Float64Type>().value(r), out),
        // pandas holds an integer column with a missing value as float64 with NaN (docs/PYTHON.md
        // "Inputs"): from Arrow input, a whole float is the integer and NaN is null.
        (DataType::Float32 | DataType::Float64, ColumnType::Int) if src == Source::Arrow => {
            let v = match a.data_type() {
                DataType::Float32 => f64::from(a.as_primitive::<Float32Type>().value(r)),
                _ => a.as_primitive::<Float64Type>().value(r),
            };
            if v.is_nan() {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            // 2^63 is exact as a float; every whole float in [-2^63, 2^63) fits an i64.
            if v.fract() != 0.0 || !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&v) {
                return Err(format!("{v} is not a whole number in the 64-bit range, as an int column needs"));
            }
            out.extend_from_slice((v as i64).to_string().as_bytes());
            Ok(())
        }
        (DataType::Boolean, ColumnType::Bool) => {
            out.extend_from_slice(if a.as_boolean().value(r) { b"true" } else { b"false" });
            Ok(())
        }
        (DataType::Utf8, ColumnType::Str) => {
            let _ = serde_json::to_writer(&mut *out, a.as_string::<i32>().value(r));
            Ok(())
        }
        (DataType::LargeUtf8, ColumnType::Str) => {
            let _ = serde_json::to_writer(&mut *out, a.as_string::<i64>().value(r));
            Ok(())
        }
        (DataType::Utf8View, ColumnType::Str) => {
            let _ = serde_json::to_writer(&mut *out, a.as_string_view().value(r));
            Ok(())
        }
        (DataType::Date32, ColumnType::Date) => {
            let days = a.as_primitive::<Date32Type>().value(r);
            let d = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
                .and_then(|e| e.checked_add_signed(chrono::TimeDelta::days(i64::from(days))))
                .ok_or_else(|| format!("date {days} days from 1970-01-01 is out of range"))?;
            date_json(d, out)
        }
        // Type widening: a date in a timestamp_ntz column is its midnight.
        (DataType::Date32, ColumnType::TimestampNtz) => {
            let days = a.as_primitive::<Date32Type>().value(r);
            local_micros_json(i64::from(days) * 86_400_000_000, out)
        }
        (DataType::Date64, ColumnType::Date) => {
            let ms = a.as_primitive::<Date64Type>().value(r);
            let d = chrono::DateTime::from_timestamp_millis(ms)
                .ok_or_else(|| format!("date {ms} ms is out of range"))?
                .date_naive();
            date_json(d, out)
        }
        // An instant has no wall-clock time until a zone is chosen, and none is recorded: refused
        // rather than read as UTC's (docs/FORMAT.md "Parquet data files"). The reverse, a
        // wall-clock time in a `timestamp` column, is read as UTC, as Delta readers read older
        // writers' files (delta-rs before UTC annotations, Spark's INT96).
        (DataType::Timestamp(_, Some(tz)), ColumnType::TimestampNtz) => Err(format!(
            "Parquet type {} holds instants (adjusted to UTC, zone {tz:?}), but the column is timestamp_ntz (a \
             wall-clock time without zone); refused rather than reinterpreted",
            a.data_type()
        )),
        (DataType::Timestamp(unit, _), ColumnType::Timestamp | ColumnType::TimestampNtz) => {
            let us = match unit {
                TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value(r).checked_mul(1_000_000),
                TimeUnit::Millisecond => a.as_primitive::<TimestampMillisecondType>().value(r).checked_mul(1000),
                TimeUnit::Microsecond => Some(a.as_primitive::<TimestampMicrosecondType>().value(r)),
                // Nanoseconds are truncated towards the past to microseconds (Spark's INT96
                // columns are decoded to microseconds already: `int96_as_micros`).
                TimeUnit::Nanosecond => Some(a.as_primitive::<TimestampNanosecondType>().value(r).div_euclid(1000)),
            }
            .ok_or_else(|| "timestamp out of range".to_string())?;
            match ty {
                ColumnType::TimestampNtz => local_micros_json(us, out),
                _ => micros_json(us, out),
            }
        }
        (DataType::Decimal32(_, s), ColumnType::Decimal { .. }) => {
            decimal_json(&a.as_primitive::<Decimal32Type>().value(r).to_string(), *s, ty, out)
        }
        (DataType::Decimal64(_, s), ColumnType::Decimal { .. }) => {
            decimal_json(&a.as_primitive::<Decimal64Type>().value(r).to_string(), *s, ty, out)
        }
        (DataType::Decimal128(_, s), ColumnType::Decimal { .. }) => {
            decimal_json(&a.as_primitive::<Decimal128Type>().value(r).to_string(), *s, ty, out)
        }
        (DataType::Decimal256(_, s), ColumnType::Decimal { .. }) => {
            decimal_json(&a.as_primitive::<Decimal256Type>().value(r).to_string(), *s, ty, out)
        }
        (DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_), ColumnType::Binary) => {
            use base64::Engine;
            let bytes: &[u8] = match a.data_type() {
                DataType::Binary => a.as_binary::<i32>().value(r),
                DataType::LargeBinary => a.as_binary::<i64>().value(r),
                DataType::BinaryView => a.as_binary_view().value(r),
                _ => a.as_fixed_size_binary().value(r),
            };
            let _ = serde_json::to_writer(&mut *out, &base64::engine::general_purpose::STANDARD.encode(bytes));
            Ok(())
        }
        (DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..), ColumnType::Array(e)) => {
            let items = match a.data_type() {
                DataType::List(_) => a.as_list::<i32>().value(r),
                DataType::LargeList(_) => a.as_list::<i64>().value(r),
                _ => a.as_fixed_size_list().value(r),
            };
            out.push(b'[');
            for i in 0..items.len() {
                if i > 0 {
                    out.push(b',');
                }
                child_json(items.as_ref(), i, &e.ty, e.nullable, src, out).map_err(|why| format!("[{i}]: {why}"))?;
            }
            out.push(b']');
            Ok(())
        }
        (DataType::Struct(fields), ColumnType::Struct(cols)) => {
            let st = a.as_struct();
            out.push(b'{');
            for (ci, c) in cols.iter().enumerate() {
                if ci > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, c.name.as_str());
                out.push(b':');
                match field_of(fields, c) {
                    Some(i) => child_json(st.column(i).as_ref(), r, &c.ty, c.nullable, src, out),
                    None if c.nullable => {
                        out.extend_from_slice(b"null");
                        Ok(())
                    }
                    None => Err("missing from the file, but NOT NULL".into()),
                }
                .map_err(|why| format!(".{}: {why}", c.name))?;
            }
            out.push(b'}');
            Ok(())
        }
        (DataType::Map(..), ColumnType::Map(m)) => {
            let map = a.as_map();
            let (start, end) = (map.value_offsets()[r] as usize, map.value_offsets()[r + 1] as usize);
            let (keys, values) = (map.keys(), map.values());
            out.push(b'{');
            let mut key = Vec::new();
            for i in start..end {
                if i > start {
                    out.push(b',');
                }
                key.clear();
                child_json(keys.as_ref(), i, &m.key, false, src, &mut key).map_err(|why| format!("a key: {why}"))?;
                // JSON object keys are strings: a string key as it is, another key as its JSON text.
                match m.key {
                    ColumnType::Str => out.extend_from_slice(&key),
                    _ => {
                        let text = String::from_utf8_lossy(&key);
                        let _ = serde_json::to_writer(&mut *out, text.trim_matches('"'));
                    }
                }
                out.push(b':');
                child_json(values.as_ref(), i, &m.value.ty, m.value.nullable, src, out)
                    .map_err(|why| format!("the value of key {}: {why}", String::from_utf8_lossy(&key)))?;
            }
            out.push(b'}');
            Ok(())
        }
        (DataType::Struct(_), ColumnType::Json) => variant_json(a.as_struct(), r, out),
        (DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View, ColumnType::Json) if src == Source::Arrow => {
            let text = match a.data_type() {
                DataType::Utf8 => a.as_string::<i32>().value(r),
                DataType::LargeUtf8 => a.as_string::<i64>().value(r),
                _ => a.as_string_view().value(r),
            };
            // The text is checked here and made canonical by the write path, as a JSONL value.
            serde_json::from_str::<&serde_json::value::RawValue>(text)
                .map_err(|e| format!("the text of a json column is not JSON ({e})"))?;
            out.extend_from_slice(text.trim().as_bytes());
            Ok(())
        }
        (_, ColumnType::Json) => Err(format!(
            "Parquet type {} does not hold variant values (a struct of metadata and value binaries)",
            a.data_type()
        )),
        _ => Err(mismatch()),
    }
}

/// [`value_json`] of an element or field, refusing a null where its type says NOT NULL.
fn child_json(
    a: &dyn Array,
    r: usize,
    ty: &ColumnType,
    nullable: bool,
    src: Source,
    out: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    if !nullable && a.is_null(r) {
        return Err("null value where the type says NOT NULL".into());
    }
    value_json_from(a, r, ty, src, out)
}

/// What one file of a Delta checkpoint holds: its actions in order, and, for a V2 checkpoint
/// (PROTOCOL "V2 Checkpoint Table Feature"), its `sidecar` actions and the version its
/// `checkpointMetadata` names.
#[derive(Debug, Default)]
pub struct CheckpointPart {
    /// The `add`, `remove`, `metaData`, `protocol` and `txn` actions, in order.
    pub actions: Vec<Action>,
    /// The `sidecar` actions: files of `_delta_log/_sidecars/` holding more `add`s and `remove`s.
    pub sidecars: Vec<crate::format::actions::Sidecar>,
    /// `checkpointMetadata.version`, when present.
    pub version: Option<i64>,
}

impl CheckpointPart {
    /// Take one row (or line) of a checkpoint: an object of action columns.
    fn take(&mut self, mut obj: serde_json::Map<String, serde_json::Value>, at: &str, path: &Path) -> Result<()> {
        if let Some(sc) = obj.remove("sidecar").filter(|v| !v.is_null()) {
            let sc = serde_json::from_value(sc)
                .map_err(|e| corrupt(path, format!("{at}: not a valid sidecar action: {e}")))?;
            self.sidecars.push(sc);
        }
        if let Some(m) = obj.remove("checkpointMetadata").filter(|v| !v.is_null()) {
            let v = m
                .get("version")
                .and_then(serde_json::Value::as_i64)
                .ok_or_else(|| corrupt(path, format!("{at}: checkpointMetadata has no version")))?;
            self.version = Some(v);
        }
        obj.retain(|k, v| matches!(k.as_str(), "add" | "remove" | "metaData" | "protocol" | "txn") && !v.is_null());
        if obj.is_empty() {
            return Ok(());
        }
        let a: Action = serde_json::from_value(serde_json::Value::Object(obj))
            .map_err(|e| corrupt(path, format!("{at}: not a valid Delta action: {e}")))?;
        self.actions.push(a);
        Ok(())
    }
}

/// The actions of a Delta Parquet checkpoint (one part of it, a V2 checkpoint's manifest or one
/// of its sidecars), in row order: each row's non-null top-level action column (`add`,
/// `remove`, `metaData`, `protocol`, `txn`, `sidecar`, `checkpointMetadata`) as the JSON object
/// a commit line would hold.
///
/// Errors: [`Error::Corrupt`] naming `path` when it is not readable Parquet or a row is not a
/// valid action.
pub fn read_checkpoint(file: File, path: &Path) -> Result<CheckpointPart> {
    let reader = open_reader(file, path)?
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| unreadable(path, "checkpoint", &e))?;
    let mut part = CheckpointPart::default();
    let mut row = 0usize;
    for batch in reader {
        let batch = batch.map_err(|e| unreadable(path, "checkpoint", &e))?;
        let schema = batch.schema();
        for r in 0..batch.num_rows() {
            row += 1;
            let mut obj = serde_json::Map::new();
            for (i, f) in schema.fields().iter().enumerate() {
                if !matches!(
                    f.name().as_str(),
                    "add" | "remove" | "metaData" | "protocol" | "txn" | "sidecar" | "checkpointMetadata"
                ) {
                    continue;
                }
                let col = batch.column(i);
                if col.is_null(r) {
                    continue;
                }
                let v = to_json(col.as_ref(), r).map_err(|why| corrupt(path, format!("row {row}: {why}")))?;
                obj.insert(f.name().clone(), v);
            }
            part.take(obj, &format!("row {row}"), path)?;
        }
    }
    Ok(part)
}

/// The actions of a V2 checkpoint manifest in JSON (`<v>.checkpoint.<uuid>.json`, PROTOCOL
/// "V2 Spec"): one action per line, as a commit. Errors: [`Error::Corrupt`] naming `path` and
/// the line.
pub fn read_json_checkpoint(bytes: &[u8], path: &Path) -> Result<CheckpointPart> {
    let mut part = CheckpointPart::default();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(line)
            .map_err(|e| corrupt(path, format!("line {}: not JSON: {e}", i + 1)))?;
        let serde_json::Value::Object(obj) = v else {
            return Err(corrupt(path, format!("line {}: not a JSON object", i + 1)));
        };
        part.take(obj, &format!("line {}", i + 1), path)?;
    }
    Ok(part)
}

/// Row `r` of `a` as a JSON value, for the action structs of a checkpoint (structs, maps,
/// lists, strings, integers, booleans); null struct fields are left out, as a commit leaves
/// them out, and so are `stats_parsed` and `partitionValues_parsed` (PROTOCOL "Checkpoint
/// Schema": typed copies of `stats` and `partitionValues`, which tinydelta reads instead; their
/// values have the table's column types, decimals and nested types included).
fn to_json(a: &dyn Array, r: usize) -> std::result::Result<serde_json::Value, String> {
    use serde_json::Value;
    if a.is_null(r) {
        return Ok(Value::Null);
    }
    if let Some(s) = a.as_struct_opt() {
        let mut m = serde_json::Map::new();
        for (f, c) in s.fields().iter().zip(s.columns()) {
            if c.is_null(r) || matches!(f.name().as_str(), "stats_parsed" | "partitionValues_parsed") {
                continue;
            }
            m.insert(f.name().clone(), to_json(c.as_ref(), r)?);
        }
        return Ok(Value::Object(m));
    }
    if let Some(m) = a.as_map_opt() {
        let (start, end) = (m.value_offsets()[r] as usize, m.value_offsets()[r + 1] as usize);
        let mut out = serde_json::Map::new();
        for i in start..end {
            let k = match to_json(m.keys().as_ref(), i)? {
                Value::String(s) => s,
                other => other.to_string(),
            };
            out.insert(k, to_json(m.values().as_ref(), i)?);
        }
        return Ok(Value::Object(out));
    }
    if let Some(l) = a.as_list_opt::<i32>() {
        let v = l.value(r);
        return (0..v.len())
            .map(|i| to_json(v.as_ref(), i))
            .collect::<std::result::Result<_, _>>()
            .map(Value::Array);
    }
    if let Some(d) = a.as_any_dictionary_opt() {
        return to_json(d.values().as_ref(), d.normalized_keys()[r]);
    }
    macro_rules! num {
        ($t:ty) => {
            if let Some(p) = a.as_primitive_opt::<$t>() {
                return Ok(Value::from(p.value(r)));
            }
        };
    }
    num!(Int8Type);
    num!(Int16Type);
    num!(Int32Type);
    num!(Int64Type);
    num!(UInt8Type);
    num!(UInt16Type);
    num!(UInt32Type);
    num!(UInt64Type);
    num!(Float32Type);
    num!(Float64Type);
    match a.data_type() {
        DataType::Utf8 => Ok(Value::from(a.as_string::<i32>().value(r))),
        DataType::LargeUtf8 => Ok(Value::from(a.as_string::<i64>().value(r))),
        DataType::Utf8View => Ok(Value::from(a.as_string_view().value(r))),
        DataType::Boolean => Ok(Value::from(a.as_boolean().value(r))),
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {
            let mut out = Vec::new();
            let ty = if matches!(a.data_type(), DataType::Timestamp(..)) {
                ColumnType::Timestamp
            } else {
                ColumnType::Date
            };
            value_json(a, r, &ty, &mut out)?;
            serde_json::from_slice(&out).map_err(|e| e.to_string())
        }
        other => Err(format!("a checkpoint field of type {other} is not read")),
    }
}

/// The file names of the complete Delta checkpoint of `version` among `names` (the entries of
/// `_delta_log/`): the classic single file `<v:020>.checkpoint.parquet`, else every part of a
/// multi-part checkpoint `<v:020>.checkpoint.<i:010>.<n:010>.parquet` for i in 1..=n, else a
/// UUID-named V2 checkpoint `<v:020>.checkpoint.<uuid>.json|parquet` (PROTOCOL "Checkpoint
/// Naming Scheme"; the first in name order when there are several). `None` when there is none.
pub fn checkpoint_files<'a>(names: impl IntoIterator<Item = &'a str>, version: u64) -> Option<Vec<String>> {
    let prefix = format!("{version:020}.checkpoint.");
    let mut parts: BTreeMap<u64, std::collections::BTreeSet<u64>> = BTreeMap::new();
    let mut uuid_named: Option<&str> = None;
    for name in names {
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        if let Some(id) = rest.strip_suffix(".json").or_else(|| rest.strip_suffix(".parquet"))
            && uuid::Uuid::try_parse(id).is_ok()
        {
            uuid_named = Some(uuid_named.map_or(name, |u| u.min(name)));
            continue;
        }
        let Some(rest) = rest.strip_suffix("parquet") else {
            continue;
        };
        if rest.is_empty() {
            return Some(vec![name.to_string()]);
        }
        let mut it = rest.trim_end_matches('.').split('.');
        if let (Some(i), Some(n), None) = (it.next(), it.next(), it.next())
            && i.len() == 10
            && n.len() == 10
            && let (Ok(i), Ok(n)) = (i.parse::<u64>(), n.parse::<u64>())
            && (1..=n).contains(&i)
        {
            parts.entry(n).or_default().insert(i);
        }
    }
    parts
        .into_iter()
        .find(|(n, have)| have.len() as u64 == *n)
        .map(|(n, _)| (1..=n).map(|i| format!("{prefix}{i:010}.{n:010}.parquet")).collect())
        .or_else(|| uuid_named.map(|u| vec![u.to_string()]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An I/O error inside the parquet crate (EMFILE on its `dup`) is an I/O error naming the
    /// file with its errno, never "not readable Parquet" (damage); a format error is damage.
    #[test]
    fn an_io_error_reading_parquet_is_not_damage() {
        let p = Path::new("/t/x.parquet");
        let e = parquet::errors::ParquetError::External(Box::new(std::io::Error::from_raw_os_error(libc::EMFILE)));
        match unreadable(p, "checkpoint", &e) {
            Error::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(libc::EMFILE)),
            other => panic!("{other:?}"),
        }
        let e = parquet::errors::ParquetError::General("bad magic".into());
        assert!(matches!(unreadable(p, "checkpoint", &e), Error::Corrupt { .. }));
    }

    #[test]
    fn checkpoint_names() {
        let v = 10u64;
        let single = format!("{v:020}.checkpoint.parquet");
        assert_eq!(checkpoint_files([single.as_str()], v), Some(vec![single.clone()]));
        let p1 = format!("{v:020}.checkpoint.{:010}.{:010}.parquet", 1, 2);
        let p2 = format!("{v:020}.checkpoint.{:010}.{:010}.parquet", 2, 2);
        assert_eq!(checkpoint_files([p1.as_str()], v), None);
        assert_eq!(
            checkpoint_files([p2.as_str(), p1.as_str()], v),
            Some(vec![p1.clone(), p2.clone()])
        );
        assert_eq!(checkpoint_files([single.as_str()], 11), None);
        let uuid = format!("{v:020}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.parquet");
        assert_eq!(checkpoint_files([uuid.as_str()], v), Some(vec![uuid.clone()]));
        let json = format!("{v:020}.checkpoint.00a083e8-7026-4e79-81be-64bd76c43a11.json");
        assert_eq!(checkpoint_files([uuid.as_str(), json.as_str()], v), Some(vec![json.clone()]));
        assert_eq!(checkpoint_files([single.as_str(), json.as_str()], v), Some(vec![single.clone()]));
        assert_eq!(checkpoint_files([format!("{v:020}.checkpoint.not-a-uuid.json").as_str()], v), None);
    }

    #[test]
    fn partition_values_are_typed() {
        assert_eq!(partition_json(&ColumnType::Int, "2013").unwrap(), b"2013");
        assert_eq!(partition_json(&ColumnType::Int, "").unwrap(), b"null");
        assert_eq!(partition_json(&ColumnType::Str, "").unwrap(), b"null");
        assert_eq!(partition_json(&ColumnType::Str, " ").unwrap(), b"\" \"");
        assert_eq!(partition_json(&ColumnType::Float, "1").unwrap(), b"1.0");
        assert_eq!(
            partition_json(&ColumnType::Timestamp, "2024-01-02 03:04:05").unwrap(),
            b"\"2024-01-02T03:04:05.000000Z\""
        );
        assert!(partition_json(&ColumnType::Int, "x").is_err());
        assert!(partition_json(&ColumnType::Float, "NaN").is_err());
    }
}
