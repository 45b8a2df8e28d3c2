//! Classic Delta checkpoints, of tinydelta's JSONL tables (docs/FORMAT.md "Delta checkpoints")
//! and of exported tables (Delta PROTOCOL "Checkpoints", the classic single-file form, and
//! "Last Checkpoint File"): `_delta_log/<v:020>.checkpoint.parquet`
//! holds one row per action of the table's state at version v (the protocol, the metaData,
//! every live `add`, every `remove` not re-added), with one struct column per action type as
//! delta-rs writes them; `_delta_log/_last_checkpoint` is `{"version":v,"size":rows}`. Both
//! are written under a temporary name, fsynced and renamed into place, so a reader sees a
//! whole checkpoint or none (a missing one only costs it the replay of more commits).

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, MapBuilder, MapFieldNames, StringBuilder};
use arrow_array::{ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray, StructArray};
use arrow_buffer::NullBuffer;
use arrow_schema::{Field, Fields, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::format::actions::{Add, Metadata, Protocol, Remove};
use crate::sys::beneath::Dir;
use crate::error::{Error, IoContext, Result};

/// The table's state at the checkpoint's version (paths decoded; they are encoded again here).
pub struct State<'a> {
    /// The protocol in force.
    pub protocol: Protocol,
    /// The metaData in force.
    pub metadata: Option<&'a Metadata>,
    /// Live files.
    /// Live files in the order of the version's rows (a checkpoint keeps that order, so a
    /// reader that replays from it reads the rows in the same order as from the commits).
    pub live: Vec<(&'a str, &'a Add)>,
    /// Removed files not re-added.
    pub tombstones: &'a BTreeMap<String, Remove>,
}

/// `<v:020>.checkpoint.parquet`.
pub fn file_name(version: u64) -> String {
    format!("{version:020}.checkpoint.parquet")
}

/// One checkpoint row: which action it holds.
enum Row<'a> {
    Protocol,
    Metadata(&'a Metadata),
    Add(&'a str, &'a Add),
    Remove(&'a str, &'a Remove),
}

/// Write the checkpoint of `state` as version `version` into `log` (DEST's `_delta_log/`) and
/// point `_last_checkpoint` at it. Errors: [`Error::Io`] naming the file.
pub fn write(log: &Dir, version: u64, state: &State<'_>) -> Result<()> {
    let mut rows = vec![Row::Protocol];
    rows.extend(state.metadata.map(Row::Metadata));
    rows.extend(state.live.iter().map(|(p, a)| Row::Add(p, a)));
    rows.extend(state.tombstones.iter().map(|(p, r)| Row::Remove(p, r)));
    let batch = batch(&rows, &state.protocol).map_err(|e| Error::io("write", log.join(file_name(version)), e))?;
    let name = file_name(version);
    let path = log.join(&name);
    write_replace(log, &name, |w| {
        let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let mut writer = ArrowWriter::try_new(w, batch.schema(), Some(props)).map_err(std::io::Error::other)?;
        writer.write(&batch).map_err(std::io::Error::other)?;
        writer.into_inner().map_err(std::io::Error::other)?.flush()
    })
    .ctx("write", &path)?;
    let last = serde_json::json!({"version": version, "size": rows.len()}).to_string();
    write_replace(log, "_last_checkpoint", |w| w.write_all(last.as_bytes()))
        .ctx("write", log.join("_last_checkpoint"))?;
    log.sync()
}

/// Write `name` in `dir` through a temporary file: `fill`, fsync, rename over `name`.
fn write_replace(
    dir: &Dir,
    name: &str,
    fill: impl FnOnce(&mut BufWriter<&std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple());
    let res = (|| {
        let f = dir.create_new(&tmp, 0o644).map_err(std::io::Error::other)?;
        let mut w = BufWriter::with_capacity(1 << 20, &f);
        fill(&mut w)?;
        w.flush()?;
        drop(w);
        f.sync_all()?;
        dir.rename(&tmp, dir, name)
    })();
    if res.is_err() {
        let _ = dir.try_unlink(&tmp);
    }
    res
}

fn strs<'a>(rows: &[Row<'a>], f: impl Fn(&Row<'a>) -> Option<&'a str>) -> ArrayRef {
    Arc::new(rows.iter().map(f).collect::<StringArray>())
}

fn i64s<'a>(rows: &[Row<'a>], f: impl Fn(&Row<'a>) -> Option<i64>) -> ArrayRef {
    Arc::new(rows.iter().map(f).collect::<Int64Array>())
}

fn bools<'a>(rows: &[Row<'a>], f: impl Fn(&Row<'a>) -> Option<bool>) -> ArrayRef {
    Arc::new(rows.iter().map(f).collect::<BooleanArray>())
}

/// A `map<string, string>` column (`key_value` entries, as Parquet names them).
fn maps<'a>(rows: &[Row<'a>], f: impl Fn(&Row<'a>) -> Option<Vec<(&'a str, Option<&'a str>)>>) -> ArrayRef {
    let names = MapFieldNames {
        entry: "key_value".into(),
        key: "key".into(),
        value: "value".into(),
    };
    let mut b = MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new());
    for r in rows {
        match f(r) {
            Some(kv) => {
                for (k, v) in kv {
                    b.keys().append_value(k);
                    b.values().append_option(v);
                }
                // Appending a whole entry list cannot fail for matching key/value counts.
                let _ = b.append(true);
            }
            None => {
                let _ = b.append(false);
            }
        }
    }
    Arc::new(b.finish())
}

/// A struct column present on the rows where `present` holds; `children` are (name, array,
/// nullable). A non-nullable child holds a placeholder on rows where the struct is null.
fn structure(
    rows: &[Row<'_>],
    present: impl Fn(&Row<'_>) -> bool,
    children: Vec<(&str, ArrayRef, bool)>,
) -> std::io::Result<ArrayRef> {
    let fields: Fields = children
        .iter()
        .map(|(n, a, nullable)| Field::new(*n, a.data_type().clone(), *nullable))
        .collect();
    let arrays = children.into_iter().map(|(_, a, _)| a).collect();
    let nulls = NullBuffer::from(rows.iter().map(present).collect::<Vec<bool>>());
    Ok(Arc::new(
        StructArray::try_new(fields, arrays, Some(nulls)).map_err(std::io::Error::other)?,
    ))
}

fn meta<'a>(r: &Row<'a>) -> Option<&'a Metadata> {
    if let Row::Metadata(m) = r { Some(*m) } else { None }
}

fn batch(rows: &[Row<'_>], protocol: &Protocol) -> std::io::Result<RecordBatch> {
    let empty: BTreeMap<String, Option<String>> = BTreeMap::new();
    let is_add = |r: &Row| matches!(r, Row::Add(..));
    let is_remove = |r: &Row| matches!(r, Row::Remove(..));
    let is_meta = |r: &Row| matches!(r, Row::Metadata(_));
    let is_proto = |r: &Row| matches!(r, Row::Protocol);
    let encoded: Vec<String> = rows
        .iter()
        .map(|r| match r {
            Row::Add(p, _) | Row::Remove(p, _) => crate::format::actions::encode_path(p),
            _ => String::new(),
        })
        .collect();
    let path = Arc::new(
        rows.iter()
            .zip(&encoded)
            .map(|(r, p)| (is_add(r) || is_remove(r)).then_some(p.as_str()).or(Some("")))
            .collect::<StringArray>(),
    ) as ArrayRef;
    let pv = |r: &Row<'_>| {
        (is_add(r) || is_remove(r)).then(|| empty.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect())
    };
    let add = structure(
        rows,
        is_add,
        vec![
            ("path", path.clone(), false),
            ("partitionValues", maps(rows, |r| pv(r).or(Some(vec![]))), false),
            (
                "size",
                i64s(rows, |r| Some(if let Row::Add(_, a) = r { a.size as i64 } else { 0 })),
                false,
            ),
            (
                "modificationTime",
                i64s(rows, |r| {
                    Some(if let Row::Add(_, a) = r { a.modification_time } else { 0 })
                }),
                false,
            ),
            (
                "dataChange",
                bools(rows, |r| {
                    Some(if let Row::Add(_, a) = r { a.data_change } else { false })
                }),
                false,
            ),
            (
                "stats",
                strs(rows, |r| {
                    if let Row::Add(_, a) = r {
                        a.stats.as_deref()
                    } else {
                        None
                    }
                }),
                true,
            ),
        ],
    )?;
    let remove = structure(
        rows,
        is_remove,
        vec![
            ("path", path, false),
            (
                "deletionTimestamp",
                i64s(rows, |r| {
                    if let Row::Remove(_, x) = r {
                        x.deletion_timestamp
                    } else {
                        None
                    }
                }),
                true,
            ),
            (
                "dataChange",
                bools(rows, |r| {
                    Some(if let Row::Remove(_, x) = r {
                        x.data_change
                    } else {
                        false
                    })
                }),
                false,
            ),
            (
                "extendedFileMetadata",
                bools(rows, |r| {
                    if let Row::Remove(_, x) = r {
                        x.extended_file_metadata
                    } else {
                        None
                    }
                }),
                true,
            ),
            ("partitionValues", maps(rows, pv), true),
            (
                "size",
                i64s(rows, |r| {
                    if let Row::Remove(_, x) = r {
                        x.size.map(|s| s as i64)
                    } else {
                        None
                    }
                }),
                true,
            ),
        ],
    )?;
    let format = structure(
        rows,
        is_meta,
        vec![
            (
                "provider",
                strs(rows, |r| Some(meta(r).map_or("", |m| m.format.provider.as_str()))),
                false,
            ),
            (
                "options",
                maps(rows, |r| {
                    Some(meta(r).map_or(vec![], |m| {
                        m.format
                            .options
                            .iter()
                            .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                            .collect()
                    }))
                }),
                false,
            ),
        ],
    )?;
    let mut part_cols = ListBuilder::new(StringBuilder::new());
    for r in rows {
        if let Some(m) = meta(r) {
            for c in &m.partition_columns {
                part_cols.values().append_value(c);
            }
        }
        part_cols.append(true);
    }
    let metadata = structure(
        rows,
        is_meta,
        vec![
            ("id", strs(rows, |r| Some(meta(r).map_or("", |m| m.id.as_str()))), false),
            ("name", strs(rows, |_| None), true),
            ("description", strs(rows, |_| None), true),
            ("format", format, false),
            (
                "schemaString",
                strs(rows, |r| Some(meta(r).map_or("", |m| m.schema_string.as_str()))),
                false,
            ),
            ("partitionColumns", Arc::new(part_cols.finish()), false),
            (
                "createdTime",
                i64s(rows, |r| meta(r).and_then(|m| m.created_time)),
                true,
            ),
            (
                "configuration",
                maps(rows, |r| {
                    Some(meta(r).map_or(vec![], |m| {
                        m.configuration
                            .iter()
                            .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                            .collect()
                    }))
                }),
                false,
            ),
        ],
    )?;
    let version = |v: i64| i32::try_from(v).unwrap_or(i32::MAX);
    // PROTOCOL "Table Features": at reader 3 / writer 7 the feature lists are part of the
    // protocol, and readers refuse a writer version 7 protocol without `writerFeatures`.
    let features = |list: &Option<Vec<String>>| {
        let mut b = ListBuilder::new(StringBuilder::new());
        for r in rows {
            match list {
                Some(names) if is_proto(r) => {
                    for n in names {
                        b.values().append_value(n);
                    }
                    b.append(true);
                }
                _ => b.append(false),
            }
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let proto = structure(
        rows,
        is_proto,
        vec![
            (
                "minReaderVersion",
                Arc::new(Int32Array::from(vec![version(protocol.min_reader_version); rows.len()])),
                false,
            ),
            (
                "minWriterVersion",
                Arc::new(Int32Array::from(vec![version(protocol.min_writer_version); rows.len()])),
                false,
            ),
            ("readerFeatures", features(&protocol.reader_features), true),
            ("writerFeatures", features(&protocol.writer_features), true),
        ],
    )?;
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("add", add),
        ("remove", remove),
        ("metaData", metadata),
        ("protocol", proto),
    ];
    let schema = Schema::new(
        columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    );
    RecordBatch::try_new(Arc::new(schema), columns.into_iter().map(|(_, a)| a).collect()).map_err(std::io::Error::other)
}
