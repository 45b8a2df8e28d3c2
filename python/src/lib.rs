//! `tinydelta._tinydelta`: the Python package's native module (docs/PYTHON.md). A thin layer over
//! the tinydelta library, the same one the CLI stands on: every operation calls the library
//! function the CLI calls, with the GIL released while it reads or writes. The Python side
//! (`tinydelta/__init__.py`) turns inputs into JSONL bytes, a file path or an Arrow C stream, and
//! the JSON documents returned here into dicts.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatchReader;
use arrow_array::ffi::FFI_ArrowSchema;
use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule};
use serde_json::{Value, json};
use tinydelta::{Error, ErrorKind, Schema, Table, WriteOptions};

create_exception!(tinydelta, TinyDeltaError, PyException, "Every error of tinydelta.");
create_exception!(
    tinydelta,
    ConcurrentWriteError,
    TinyDeltaError,
    "Another writer committed the version this write expected; nothing was committed."
);
create_exception!(
    tinydelta,
    NotFoundError,
    TinyDeltaError,
    "A table, a version or a version's data is not there."
);
create_exception!(tinydelta, TableNotFoundError, NotFoundError, "The path holds no table.");
create_exception!(
    tinydelta,
    VersionNotFoundError,
    NotFoundError,
    "The table has no such version."
);
create_exception!(
    tinydelta,
    BadInputError,
    TinyDeltaError,
    "Input rows break the rules; carries .file, .line and .column."
);
create_exception!(
    tinydelta,
    SchemaError,
    BadInputError,
    "A schema that does not parse, or input with a column the table lacks."
);
create_exception!(
    tinydelta,
    InvalidArgumentError,
    TinyDeltaError,
    "An argument is not valid."
);

/// The line of a `Corrupt` reason that starts `line N: ...`.
fn reason_line(reason: &str) -> Option<u64> {
    reason.strip_prefix("line ")?.split(':').next()?.parse().ok()
}

/// `e` as the Python exception of its kind, with `.kind`, `.version`, `.file`, `.line` and
/// `.column` set where the error names them (docs/PYTHON.md "Exceptions").
fn py_err(e: Error) -> PyErr {
    let msg = e.to_string();
    let (mut version, mut file, mut line, mut column, mut read_version) = (None, None, None, None, None);
    let err = match &e {
        Error::BadInput {
            file: f,
            line: l,
            column: c,
            reason,
        } => {
            file = Some(f.clone());
            line = Some(*l);
            // A column name is quoted (`"year"`); a syntax error's column is a position.
            column = Some(serde_json::from_str::<String>(c).unwrap_or_else(|_| c.clone()));
            if reason.starts_with("unknown column") {
                SchemaError::new_err(msg)
            } else {
                BadInputError::new_err(msg)
            }
        }
        Error::ConcurrentWrite {
            table,
            read_version: r,
            version: v,
        } => {
            file = Some(table.display().to_string());
            version = Some(*v);
            read_version = Some(*r);
            ConcurrentWriteError::new_err(msg)
        }
        Error::TableNotFound(p) => {
            file = Some(p.display().to_string());
            TableNotFoundError::new_err(msg)
        }
        Error::VersionNotFound { table, version: v, .. } => {
            file = Some(table.display().to_string());
            version = Some(*v);
            VersionNotFoundError::new_err(msg)
        }
        Error::Vacuumed { version: v, path, .. } | Error::ChangesVacuumed { version: v, path, .. } => {
            file = Some(path.display().to_string());
            version = Some(*v);
            NotFoundError::new_err(msg)
        }
        Error::Corrupt { path, reason } => {
            file = Some(path.display().to_string());
            line = reason_line(reason);
            TinyDeltaError::new_err(msg)
        }
        _ => match e.kind() {
            ErrorKind::Conflict => ConcurrentWriteError::new_err(msg),
            ErrorKind::NotFound => NotFoundError::new_err(msg),
            ErrorKind::BadInput => BadInputError::new_err(msg),
            ErrorKind::InvalidArgument => InvalidArgumentError::new_err(msg),
            _ => TinyDeltaError::new_err(msg),
        },
    };
    let kind = match e.kind() {
        ErrorKind::Conflict => "conflict",
        ErrorKind::NotFound => "not_found",
        ErrorKind::BadInput => "bad_input",
        ErrorKind::InvalidArgument => "invalid_argument",
        _ => "failed",
    };
    Python::attach(|py| {
        let v = err.value(py);
        let _ = v.setattr("kind", kind);
        let _ = v.setattr("version", version);
        let _ = v.setattr("read_version", read_version);
        let _ = v.setattr("file", file);
        let _ = v.setattr("line", line);
        let _ = v.setattr("column", column);
    });
    err
}

type R<T> = PyResult<T>;

fn lib<T>(r: tinydelta::Result<T>) -> R<T> {
    r.map_err(py_err)
}

/// Spell options in messages as `"python"` keyword arguments (`force=True`, the default once the
/// module is imported) or as `"cli"` flags (`--force`; `python -m tinydelta` takes flags).
#[pyfunction]
fn _spell_options_as(spelling: &str) -> R<()> {
    use tinydelta::spelling::{Spelling, set};
    match spelling {
        "python" => set(Spelling::Python),
        "cli" => set(Spelling::Cli),
        other => {
            return Err(InvalidArgumentError::new_err(format!(
                "spelling {other:?} is not \"python\" or \"cli\""
            )));
        }
    }
    Ok(())
}

/// Create a table at `path` with columns in the CLI's syntax (`id:int!`, `region:str`).
#[pyfunction]
fn create(py: Python<'_>, path: PathBuf, columns: Vec<String>) -> R<PyTable> {
    let schema = Schema::parse_cli(&columns).map_err(|e| match e {
        Error::InvalidArgument(m) => SchemaError::new_err(m),
        e => py_err(e),
    })?;
    let t = lib(py.detach(|| Table::create(&path, &schema)))?;
    Ok(PyTable { t })
}

/// Where a write's rows come from.
enum Source {
    Bytes(Vec<u8>),
    Path(PathBuf),
}

/// The rows of an Arrow C stream as JSONL, one batch at a time ([`tinydelta::arrow::batch_jsonl`]):
/// a `BufRead` for the library's write path, which checks them as it checks any input. A batch
/// that does not fit the schema stops the read; its error is kept in `failed`.
struct BatchLines {
    reader: RecordBatchStreamReader,
    schema: Schema,
    name: String,
    next_row: u64,
    buf: Vec<u8>,
    pos: usize,
    failed: Arc<Mutex<Option<Error>>>,
}

impl BatchLines {
    fn fail(&self, e: Error) -> io::Error {
        let msg = e.to_string();
        if let Ok(mut f) = self.failed.lock() {
            *f = Some(e);
        }
        io::Error::other(msg)
    }
}

impl Read for BatchLines {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let have = self.fill_buf()?;
            let n = have.len().min(out.len());
            out[..n].copy_from_slice(&have[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for BatchLines {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            let batch = match self.reader.next() {
                None => return Ok(&[]),
                Some(Ok(b)) => b,
                Some(Err(e)) => {
                    return Err(self.fail(Error::InvalidArgument(format!(
                        "{}: the Arrow stream failed after row {}: {e}",
                        self.name,
                        self.next_row - 1
                    ))));
                }
            };
            if let Err(e) =
                tinydelta::arrow::batch_jsonl(&batch, &self.schema, &self.name, self.next_row, &mut self.buf)
            {
                return Err(self.fail(e));
            }
            self.next_row += batch.num_rows() as u64;
        }
        Ok(&self.buf[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
    }
}

/// An open table (`tinydelta.Table` wraps it).
#[pyclass(name = "_Table", module = "tinydelta._tinydelta", frozen)]
struct PyTable {
    t: Table,
}

fn write_opts(expect_version: Option<u64>) -> WriteOptions {
    WriteOptions {
        expect_version,
        ..Default::default()
    }
}

impl PyTable {
    /// Append or overwrite from `input` named `name`; `None` when an append had no rows.
    fn write(
        &self,
        name: &str,
        input: impl BufRead,
        overwrite: bool,
        opts: &WriteOptions,
    ) -> tinydelta::Result<Option<u64>> {
        if overwrite {
            self.t.overwrite(name, input, opts).map(Some)
        } else {
            self.t.append(name, input, opts)
        }
    }

    /// `e` with the CLI's hints for its input (a CSV header, a JSON array: the `hint:` lines of
    /// `tinydelta append`, docs/CLI.md "Errors that teach") added to its reason, when `e` is bad input;
    /// the hints come from the input's first MiB. Any other error, or none found: `e` as it is.
    fn with_hints(&self, e: Error, name: &str, source: &Source) -> Error {
        let Error::BadInput {
            file,
            line,
            column,
            reason,
        } = e
        else {
            return e;
        };
        const HEAD: u64 = 1 << 20;
        let hints = self.t.latest_snapshot().ok().and_then(|snap| {
            let d = match source {
                Source::Bytes(d) => tinydelta::diagnose::scan(&snap.schema, name, (&d[..]).take(HEAD), 1, 1, None),
                Source::Path(p) => {
                    let f = File::open(p).ok()?;
                    tinydelta::diagnose::scan(&snap.schema, name, BufReader::new(f.take(HEAD)), 1, 1, None)
                }
            };
            d.ok().map(|d| d.hints).filter(|h| !h.is_empty())
        });
        let reason = match hints {
            Some(h) => format!("{reason}; hint: {}", h.join(" ")),
            None => reason,
        };
        Error::BadInput {
            file,
            line,
            column,
            reason,
        }
    }

    fn version_of(&self, version: Option<u64>, as_of: Option<&str>) -> tinydelta::Result<u64> {
        match (version, as_of) {
            (Some(v), _) => Ok(v),
            (None, Some(time)) => self.t.version_at_time(time),
            (None, None) => self.t.latest_version(),
        }
    }
}

fn duration(flag: &str, d: Option<String>) -> R<Option<std::time::Duration>> {
    d.map(|d| {
        humantime::parse_duration(&d).map_err(|e| {
            InvalidArgumentError::new_err(format!(
                "{flag} {d:?} is not a duration: write a number and a unit, e.g. 0s, 30m, 1h, 7d ({e})"
            ))
        })
    })
    .transpose()
}

fn size(flag: &str, s: Option<String>, default: u64) -> R<u64> {
    match s {
        None => Ok(default),
        Some(s) => tinydelta::optimize::parse_size(&s)
            .ok_or_else(|| InvalidArgumentError::new_err(format!("{flag} {s:?} is not a size like 128MiB or 65536"))),
    }
}

fn change_json(r: &tinydelta::dml::ChangeReport) -> String {
    json!({
        "version": r.version,
        "committed": r.version.is_some(),
        "reason": r.reason,
        "txnRecordedVersion": r.txn_recorded,
        "operation": r.operation,
        "metrics": r.metrics,
    })
    .to_string()
}

#[pymethods]
impl PyTable {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> R<Self> {
        Ok(PyTable {
            t: lib(py.detach(|| Table::open(&path)))?,
        })
    }

    /// The table folder.
    #[getter]
    fn path(&self) -> PathBuf {
        self.t.root().to_path_buf()
    }

    fn latest_version(&self, py: Python<'_>) -> R<u64> {
        lib(py.detach(|| self.t.latest_version()))
    }

    /// Resolve `version` / `as_of` to a version number (time travel as `read --as-of`).
    #[pyo3(signature = (version=None, as_of=None))]
    fn resolve(&self, py: Python<'_>, version: Option<u64>, as_of: Option<String>) -> R<u64> {
        lib(py.detach(|| self.version_of(version, as_of.as_deref())))
    }

    /// Append (or overwrite with) JSONL rows: `data` bytes named `name`, or the file `path`.
    #[pyo3(signature = (name, data=None, path=None, overwrite=false, expect_version=None))]
    fn write_jsonl(
        &self,
        py: Python<'_>,
        name: String,
        data: Option<Vec<u8>>,
        path: Option<PathBuf>,
        overwrite: bool,
        expect_version: Option<u64>,
    ) -> R<Option<u64>> {
        let source = match (data, path) {
            (Some(d), _) => Source::Bytes(d),
            (None, Some(p)) => Source::Path(p),
            (None, None) => return Err(InvalidArgumentError::new_err("no rows given")),
        };
        let opts = write_opts(expect_version);
        lib(py.detach(|| {
            let r = match &source {
                Source::Bytes(d) => self.write(&name, &d[..], overwrite, &opts),
                Source::Path(p) => {
                    let f = File::open(p).map_err(|e| Error::io("open", p, e))?;
                    self.write(&name, BufReader::with_capacity(1 << 20, f), overwrite, &opts)
                }
            };
            r.map_err(|e| self.with_hints(e, &name, &source))
        }))
    }

    /// Append (or overwrite with) the rows of an Arrow C stream (the capsule of
    /// `__arrow_c_stream__`), converted batch by batch to JSONL under the table's schema.
    #[pyo3(signature = (capsule, name, overwrite=false, expect_version=None))]
    fn write_arrow(
        &self,
        py: Python<'_>,
        capsule: &Bound<'_, PyCapsule>,
        name: String,
        overwrite: bool,
        expect_version: Option<u64>,
    ) -> R<Option<u64>> {
        let expected = c"arrow_array_stream";
        if capsule.name()?.map(|n| unsafe { n.as_cstr() }) != Some(expected) {
            return Err(InvalidArgumentError::new_err(
                "expected an arrow_array_stream capsule from __arrow_c_stream__",
            ));
        }
        let ptr = capsule.pointer_checked(Some(expected))?.as_ptr() as *mut FFI_ArrowArrayStream;
        // SAFETY: the capsule holds an ArrowArrayStream (its name says so, Arrow PyCapsule
        // interface); from_raw moves it out and marks the capsule's copy released.
        let stream = unsafe { FFI_ArrowArrayStream::from_raw(ptr) };
        let reader = RecordBatchStreamReader::try_new(stream)
            .map_err(|e| InvalidArgumentError::new_err(format!("{name}: not a readable Arrow stream: {e}")))?;
        let opts = write_opts(expect_version);
        let failed = Arc::new(Mutex::new(None));
        let result = py.detach(|| -> tinydelta::Result<Option<u64>> {
            let schema = self.t.latest_snapshot()?.schema;
            let lines = BatchLines {
                reader,
                schema,
                name: name.clone(),
                next_row: 1,
                buf: Vec::new(),
                pos: 0,
                failed: failed.clone(),
            };
            self.write(&name, lines, overwrite, &opts)
        });
        match result {
            Ok(v) => Ok(v),
            Err(e) => Err(py_err(failed.lock().ok().and_then(|mut f| f.take()).unwrap_or(e))),
        }
    }

    /// The rows of a version as canonical JSONL bytes; with `columns`, `where` or `limit`, as
    /// `tinydelta read --columns --where --limit` selects them.
    #[pyo3(signature = (version, columns=None, r#where=None, limit=None))]
    fn read_jsonl<'py>(
        &self,
        py: Python<'py>,
        version: u64,
        columns: Option<Vec<String>>,
        r#where: Option<String>,
        limit: Option<u64>,
    ) -> R<Bound<'py, PyBytes>> {
        let out = lib(py.detach(|| -> tinydelta::Result<Vec<u8>> {
            let snap = self.t.snapshot(version)?;
            let mut out = Vec::new();
            if columns.is_some() || r#where.is_some() || limit.is_some() {
                let opts = tinydelta::dml::ReadOptions {
                    predicate: r#where
                        .map(|w| tinydelta::dml::Predicate::parse(&snap.schema, &w))
                        .transpose()?,
                    columns,
                    limit,
                };
                tinydelta::dml::read(&self.t, &snap, &opts, &mut out)?;
            } else {
                self.t.write_rows(&snap, &mut out)?;
            }
            Ok(out)
        }))?;
        Ok(PyBytes::new(py, &out))
    }

    /// A version's rows as an Arrow stream (each `__arrow_c_stream__` call reads it anew).
    fn to_arrow(&self, py: Python<'_>, version: u64) -> R<ArrowStream> {
        let snap = lib(py.detach(|| self.t.snapshot(version)))?;
        Ok(ArrowStream {
            t: self.t.clone(),
            snap: Arc::new(snap),
        })
    }

    /// `describe --json`'s document for a version.
    fn describe(&self, py: Python<'_>, version: u64) -> R<String> {
        lib(py.detach(|| -> tinydelta::Result<String> {
            let s = self.t.snapshot(version)?;
            self.t.stat_data_files(&s)?;
            let readable = tinydelta::readable_versions(&self.t)?;
            let schema: Value = serde_json::from_str(&s.schema.to_pretty_json()).unwrap_or_default();
            let files: Vec<Value> = s
                .files
                .iter()
                .map(|f| json!({"path": f.path, "size": f.size, "numRecords": f.num_records}))
                .collect();
            Ok(json!({
                "table": self.t.root().display().to_string(),
                "version": s.version,
                "timestamp": s.timestamp,
                "time": tinydelta::time::shown_ms(s.timestamp),
                "tableId": s.metadata.id,
                "schema": schema["columns"],
                "schemaCli": s.schema.to_cli_string(),
                "properties": s.metadata.configuration,
                "rows": s.num_records(),
                "bytes": s.size_bytes(),
                "numFiles": s.files.len(),
                "files": files,
                "readableVersions": readable.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
            })
            .to_string())
        }))
    }

    /// `history --json`'s document.
    fn history(&self, py: Python<'_>) -> R<String> {
        lib(py.detach(|| -> tinydelta::Result<String> {
            let h = self.t.history()?;
            let rows: Vec<Value> = h
                .iter()
                .map(|e| {
                    json!({
                        "version": e.version,
                        "timestamp": e.commit_info.timestamp,
                        "time": tinydelta::time::shown_ms(e.commit_info.timestamp),
                        "operation": e.commit_info.short_operation(),
                        "deltaOperation": e.commit_info.operation,
                        "operationParameters": e.commit_info.operation_parameters,
                        "rows": e.rows,
                        "tableRows": e.table_rows,
                        "tableFiles": e.table_files,
                        "source": e.source(),
                    })
                })
                .collect();
            Ok(Value::Array(rows).to_string())
        }))
    }

    #[pyo3(signature = (version, expect_version=None))]
    fn restore(&self, py: Python<'_>, version: u64, expect_version: Option<u64>) -> R<u64> {
        lib(py.detach(|| self.t.restore(version, &write_opts(expect_version))))
    }

    #[pyo3(signature = (retain=None, older_than=None, force=false, dry_run=false))]
    fn vacuum(
        &self,
        py: Python<'_>,
        retain: Option<String>,
        older_than: Option<String>,
        force: bool,
        dry_run: bool,
    ) -> R<String> {
        let opts = tinydelta::vacuum::VacuumOptions {
            retain: duration("retain", retain)?,
            force,
            older_than: duration("older_than", older_than)?.unwrap_or(tinydelta::vacuum::DEFAULT_RETENTION),
            dry_run,
        };
        let r = lib(py.detach(|| tinydelta::vacuum::vacuum(&self.t, &opts)))?;
        let files: Vec<Value> = r
            .deleted
            .iter()
            .map(|(p, size)| json!({"path": p.display().to_string(), "size": size}))
            .collect();
        Ok(json!({
            "dryRun": dry_run,
            "files": files,
            "numFiles": r.deleted.len(),
            "sizeBytes": r.bytes,
            "numExpiredDataFiles": r.expired,
            "numExpiredChangeDataFiles": r.expired_change_data,
            "retentionMillis": r.retention.as_millis() as u64,
            "retention": tinydelta::vacuum::format_duration(r.retention),
            "dataKept": r.data_kept,
            "vacuumStartVersion": r.commits.map(|c| c.0),
            "vacuumEndVersion": r.commits.map(|c| c.1),
        })
        .to_string())
    }

    #[pyo3(signature = (target_size=None, expect_version=None))]
    fn optimize(&self, py: Python<'_>, target_size: Option<String>, expect_version: Option<u64>) -> R<String> {
        let opts = tinydelta::optimize::OptimizeOptions {
            target_size: size("target_size", target_size, tinydelta::optimize::DEFAULT_TARGET_SIZE)?,
            write: write_opts(expect_version),
            settled_before_ms: None,
            tiered: false,
        };
        let r = lib(py.detach(|| tinydelta::optimize::optimize(&self.t, &opts)))?;
        Ok(json!({
            "version": r.version,
            "removedFiles": r.removed_files,
            "removedBytes": r.removed_bytes,
            "addedFiles": r.added_files,
            "filesAfter": r.files_after,
        })
        .to_string())
    }

    #[pyo3(signature = (deep=false, repair=false))]
    fn check(&self, py: Python<'_>, deep: bool, repair: bool) -> R<String> {
        let r = lib(py.detach(|| tinydelta::check::check(&self.t, &tinydelta::check::CheckOptions { deep, repair })))?;
        Ok(json!({
            "whole": r.is_whole(),
            "readableThrough": r.readable_through,
            "problems": r.problems,
            "notes": r.notes,
            "repaired": r.repaired,
        })
        .to_string())
    }

    /// The change data feed of versions `from_version..=to_version` as JSONL bytes.
    #[pyo3(signature = (from_version=None, to_version=None))]
    fn changes<'py>(
        &self,
        py: Python<'py>,
        from_version: Option<u64>,
        to_version: Option<u64>,
    ) -> R<Bound<'py, PyBytes>> {
        let out = lib(py.detach(|| -> tinydelta::Result<Vec<u8>> {
            let mut out = Vec::new();
            let stop = std::sync::atomic::AtomicBool::new(false);
            tinydelta::changes::print(
                &self.t,
                from_version,
                to_version,
                false,
                &mut |_| {},
                &mut out,
                &stop,
                &|| false,
            )?;
            Ok(out)
        }))?;
        Ok(PyBytes::new(py, &out))
    }

    #[pyo3(signature = (dest, version=None, all_versions=false))]
    fn export(&self, py: Python<'_>, dest: PathBuf, version: Option<u64>, all_versions: bool) -> R<String> {
        use tinydelta::export::Mode;
        let mode = if all_versions {
            Mode::AllVersions
        } else {
            Mode::Snapshot(version)
        };
        let r = lib(py.detach(|| tinydelta::export::export(&self.t, &dest, mode, &mut |_| {})))?;
        Ok(json!({
            "destVersions": r.dest_versions,
            "sourceVersion": r.source_version,
            "filesWritten": r.files_written,
            "rows": r.rows,
            "rowsHeld": r.rows_held,
            "bytesIn": r.bytes_in,
            "bytesOut": r.bytes_out,
            "checkpoints": r.checkpoints,
        })
        .to_string())
    }

    #[pyo3(signature = (r#where, expect_version=None))]
    fn delete(&self, py: Python<'_>, r#where: String, expect_version: Option<u64>) -> R<String> {
        let opts = tinydelta::dml::ChangeOptions {
            write: write_opts(expect_version),
            txn: None,
        };
        let r = lib(py.detach(|| tinydelta::dml::delete(&self.t, &r#where, &opts)))?;
        Ok(change_json(&r))
    }

    #[pyo3(signature = (sets, r#where, expect_version=None))]
    fn update(&self, py: Python<'_>, sets: Vec<String>, r#where: String, expect_version: Option<u64>) -> R<String> {
        let opts = tinydelta::dml::ChangeOptions {
            write: write_opts(expect_version),
            txn: None,
        };
        let r = lib(py.detach(|| tinydelta::dml::update(&self.t, &r#where, &sets, &opts)))?;
        Ok(change_json(&r))
    }

    /// MERGE of JSONL source rows (bytes named `name`) on the key columns `on`.
    #[pyo3(signature = (name, data, on, delete_when=None, ignore_unmatched=false, max_source_bytes=None, expect_version=None))]
    #[allow(clippy::too_many_arguments)]
    fn merge(
        &self,
        py: Python<'_>,
        name: String,
        data: Vec<u8>,
        on: Vec<String>,
        delete_when: Option<String>,
        ignore_unmatched: bool,
        max_source_bytes: Option<String>,
        expect_version: Option<u64>,
    ) -> R<String> {
        let opts = tinydelta::dml::MergeOptions {
            on,
            delete_when,
            ignore_unmatched,
            max_source_bytes: size(
                "max_source_bytes",
                max_source_bytes,
                tinydelta::dml::DEFAULT_MAX_SOURCE_BYTES,
            )?,
            change: tinydelta::dml::ChangeOptions {
                write: write_opts(expect_version),
                txn: None,
            },
        };
        let r = lib(py.detach(|| tinydelta::dml::merge(&self.t, &name, &data[..], &opts)))?;
        Ok(change_json(&r))
    }
}

/// One version's rows as an Arrow stream (Arrow PyCapsule interface): every call of
/// `__arrow_c_stream__` streams the version's data files anew in batches of 8192 rows, so
/// pyarrow, polars and DuckDB each read it without a copy and with bounded memory.
#[pyclass(name = "ArrowStream", module = "tinydelta._tinydelta", frozen)]
struct ArrowStream {
    t: Table,
    snap: Arc<tinydelta::Snapshot>,
}

#[pymethods]
impl ArrowStream {
    /// The version these rows are.
    #[getter]
    fn version(&self) -> u64 {
        self.snap.version
    }

    /// The Arrow schema as an `arrow_schema` capsule.
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> R<Bound<'py, PyCapsule>> {
        let schema = tinydelta::arrow::arrow_schema(&self.snap.schema);
        let ffi = FFI_ArrowSchema::try_from(schema.as_ref())
            .map_err(|e| TinyDeltaError::new_err(format!("Arrow schema: {e}")))?;
        PyCapsule::new_with_value(py, ffi, c"arrow_schema")
    }

    /// The rows as an `arrow_array_stream` capsule. `requested_schema` is not applied (the
    /// stream's schema is the table's; consumers cast if they asked for another).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Py<PyAny>>,
    ) -> R<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let reader = lib(py.detach(|| tinydelta::arrow::batches(&self.t, &self.snap)))?;
        let reader: Box<dyn RecordBatchReader + Send> = Box::new(reader);
        let ffi = FFI_ArrowArrayStream::new(reader);
        PyCapsule::new_with_value(py, ffi, c"arrow_array_stream")
    }
}

#[pymodule]
fn _tinydelta(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // Messages name this package's keyword arguments (`force=True`, `where=`), not CLI flags.
    tinydelta::spelling::set(tinydelta::spelling::Spelling::Python);
    m.add_function(wrap_pyfunction!(create, m)?)?;
    m.add_function(wrap_pyfunction!(_spell_options_as, m)?)?;
    m.add_class::<PyTable>()?;
    m.add_class::<ArrowStream>()?;
    m.add("TinyDeltaError", py.get_type::<TinyDeltaError>())?;
    m.add("ConcurrentWriteError", py.get_type::<ConcurrentWriteError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("TableNotFoundError", py.get_type::<TableNotFoundError>())?;
    m.add("VersionNotFoundError", py.get_type::<VersionNotFoundError>())?;
    m.add("BadInputError", py.get_type::<BadInputError>())?;
    m.add("SchemaError", py.get_type::<SchemaError>())?;
    m.add("InvalidArgumentError", py.get_type::<InvalidArgumentError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
