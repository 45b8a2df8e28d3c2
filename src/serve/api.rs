//! The JSON endpoints of `tinydelta serve` (docs/SERVE.md "Endpoints"). Every answer is a JSON
//! object; an error is `{"error": "..."}` with the sentence the CLI prints for it.

use serde_json::{Value, json};

use super::rows::{MAX_PAGE_BYTES, runs};
use super::{MAX_PAGE_ROWS, Query, Reply, State, error_response, json_response, read_body, status_of};
use crate::error::{Error, Result};
use crate::log::snapshot::FileEntry;
use crate::ops::changes::{ChangeFeed, ChangeType};
use crate::table::{Table, WriteOptions};

/// `GET /api/...`.
pub(super) fn get(st: &State, path: &str, q: &Query) -> Reply {
    let r = match path {
        "/api/versions" => versions(st),
        "/api/describe" => describe(st, q),
        "/api/schema" => schema(st, q),
        "/api/rows" => rows(st, q),
        "/api/changes" => changes(st, q),
        p => return error_response(404, &format!("no endpoint {}", crate::util::quote::quoted(p))),
    };
    match r {
        Ok(v) => json_response(200, &v),
        Err(e) => error_response(status_of(&e), &e.to_string()),
    }
}

/// `?version=N`, else the latest; a version past the latest is [`Error::VersionNotFound`].
fn version_of(t: &Table, q: &Query) -> Result<u64> {
    let latest = t.latest_version()?;
    match q.num("version")? {
        Some(v) if v > latest => Err(Error::VersionNotFound {
            table: t.root().to_path_buf(),
            version: v,
            first: t.segment()?.first,
            latest,
        }),
        Some(v) => Ok(v),
        None => Ok(latest),
    }
}

/// `?offset=&limit=`: defaults 0 and 100; a limit over [`MAX_PAGE_ROWS`] is refused.
fn page_of(q: &Query) -> Result<(u64, u64)> {
    let offset = q.num("offset")?.unwrap_or(0);
    let limit = q.num("limit")?.unwrap_or(100);
    if limit > MAX_PAGE_ROWS {
        return Err(Error::InvalidArgument(format!(
            "limit={limit} is over the most rows one page holds ({MAX_PAGE_ROWS})"
        )));
    }
    Ok((offset, limit))
}

fn versions(st: &State) -> Result<Value> {
    let t = &st.table;
    let latest = t.latest_version()?;
    let mut tl = crate::util::sync::lock(&st.timeline);
    // A damaged version stops the timeline there: the versions before it are listed with the
    // error, so the page shows both.
    let error = tl.extend(t, latest).err().map(|e| e.to_string());
    Ok(json!({
        "table": st.shown,
        "latest": latest,
        "writable": st.opts.writable,
        "versions": tl.entries(),
        "error": error,
    }))
}

/// Rows of `f`, through the pager (counted once when the log records none).
fn counts<'a>(
    st: &State,
    files: impl IntoIterator<Item = &'a std::sync::Arc<FileEntry>>,
    schema: &crate::format::schema::Schema,
) -> Result<Vec<u64>> {
    files.into_iter().map(|f| st.pager.rows_of(&st.table, f, schema)).collect()
}

fn describe(st: &State, q: &Query) -> Result<Value> {
    let t = &st.table;
    let v = version_of(t, q)?;
    let s = t.snapshot(v)?;
    // The numbers come from the log: only shown when the files back them (as `describe`).
    t.stat_data_files(&s)?;
    let rows: u64 = counts(st, &s.files, &s.schema)?.iter().sum();
    let readable = crate::table::history::readable_versions(t)?;
    Ok(json!({
        "table": st.shown,
        "version": s.version,
        "timestamp": s.timestamp,
        "time": crate::util::time::shown_ms(s.timestamp),
        "tableId": s.metadata.id,
        "schema": schema_json(&s.schema),
        "numFiles": s.files.len(),
        "rows": rows,
        "bytes": s.size_bytes(),
        "filesWithoutStats": s.files.iter().filter(|f| !f.has_stats).count(),
        "readableVersions": readable.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
        "txns": s.txns,
    }))
}

fn schema_json(schema: &crate::format::schema::Schema) -> Value {
    serde_json::from_str::<Value>(&schema.to_pretty_json()).map_or(Value::Null, |v| v["columns"].clone())
}

fn schema(st: &State, q: &Query) -> Result<Value> {
    let t = &st.table;
    let v = version_of(t, q)?;
    let s = t.snapshot_arc(v)?;
    Ok(json!({
        "version": v,
        "columns": schema_json(&s.schema),
        "cli": s.schema.to_cli_string(),
    }))
}

fn rows(st: &State, q: &Query) -> Result<Value> {
    let t = &st.table;
    let v = version_of(t, q)?;
    let (offset, limit) = page_of(q)?;
    let s = t.snapshot_arc(v)?;
    let n = counts(st, &s.files, &s.schema)?;
    let mut out = Vec::new();
    let mut budget = MAX_PAGE_BYTES;
    for run in runs(&n, offset, limit) {
        let f = &s.files[run.index];
        let whole = st
            .pager
            .read_run(t, f, &s.schema, &run, &mut out, &mut budget)
            .map_err(|e| crate::table::history::explain_missing(t, v, &f.path, e))?;
        if !whole {
            break;
        }
    }
    Ok(json!({
        "version": v,
        "offset": offset,
        "limit": limit,
        "total": n.iter().sum::<u64>(),
        "rows": out,
    }))
}

/// What changed from version `from` to `to`: the change feed of versions `from + 1..=to`.
fn changes(st: &State, q: &Query) -> Result<Value> {
    let t = &st.table;
    let latest = t.latest_version()?;
    let to = q.num("to")?.unwrap_or(latest);
    let from = match q.num("from")? {
        Some(f) => f,
        None => to.saturating_sub(1),
    };
    for v in [from, to] {
        if v > latest {
            return Err(Error::VersionNotFound {
                table: t.root().to_path_buf(),
                version: v,
                first: t.segment()?.first,
                latest,
            });
        }
    }
    if from > to {
        return Err(Error::InvalidArgument(format!("from={from} is after to={to}")));
    }
    let (offset, limit) = page_of(q)?;
    let mut feed = ChangeFeed::new(t, Some(from + 1))?;
    if to > from {
        feed.extend(t, to)?;
    }
    let parts = feed.parts();
    let count = |c: ChangeType| parts.iter().filter(|p| p.change == c).map(|p| p.rows).sum::<u64>();
    let (mut deleted, mut inserted) = (count(ChangeType::Delete), count(ChangeType::Insert));
    // A change data file's rows carry their own `_change_type` (docs/FORMAT.md "The change
    // feed"): counted from the file (pre-images as deleted, post-images as inserted rows).
    let mut updated = 0u64;
    for p in parts.iter().filter(|p| p.change == ChangeType::Recorded) {
        let f = t.open_data_file(&p.path, p.size)?;
        for line in std::io::BufRead::split(std::io::BufReader::new(f), b'\n') {
            let line = line.map_err(|e| Error::io("read", t.root().join(&p.path), e))?;
            let kind = |k: &str| line.ends_with(format!("\"_change_type\":\"{k}\"}}").as_bytes());
            if kind("delete") {
                deleted += 1;
            } else if kind("insert") {
                inserted += 1;
            } else if kind("update_preimage") {
                updated += 1;
            }
        }
    }
    let n: Vec<u64> = parts.iter().map(|p| p.rows).collect();
    let schema = t.snapshot_arc(to)?.schema.clone();
    let mut out = Vec::new();
    let mut budget = MAX_PAGE_BYTES;
    for run in runs(&n, offset, limit) {
        let p = &parts[run.index];
        let (f, schema) = match &p.parquet {
            Some(x) => (x.0.clone(), &x.1),
            None => (
                FileEntry {
                    path: p.path.as_str().into(),
                    size: p.size,
                    num_records: p.rows,
                    has_stats: true,
                    modification_time: 0,
                    partition_values: Default::default(),
                    added_in: p.version,
                    deletion_vector: None,
                },
                &schema,
            ),
        };
        let mut rows = Vec::new();
        // `rows` starts empty for each part: at least one row whatever the budget, as a page.
        let whole = st.pager.read_run(t, &f, schema, &run, &mut rows, &mut budget)?;
        let last = !whole || budget == 0;
        for r in rows {
            let (change, row) = match p.change.as_str() {
                Some(c) => (json!(c), json!(r)),
                // A change data row: its own `_change_type`, taken out of the row.
                None => {
                    let mut v: Value = serde_json::from_str(r.get())
                        .map_err(|e| Error::Internal(format!("a change data row read back is not JSON: {e}")))?;
                    let c = v.as_object_mut().and_then(|o| o.remove("_change_type")).unwrap_or(Value::Null);
                    (c, v)
                }
            };
            out.push(json!({
                "_change_type": change,
                "_commit_version": p.version,
                "row": row,
            }));
        }
        if last {
            break;
        }
    }
    Ok(json!({
        "from": from,
        "to": to,
        "deleted": deleted,
        "inserted": inserted,
        "updated": updated,
        "total": deleted + inserted + 2 * updated,
        "offset": offset,
        "limit": limit,
        "rows": out,
    }))
}

/// `POST /api/append?name=FILE`: the body's JSONL rows as one APPEND commit, or the messages
/// `tinydelta append` prints for a refused file (docs/CLI.md "Errors that teach").
pub(super) fn append(st: &State, req: &mut tiny_http::Request, q: &Query) -> Reply {
    let body = match read_body(req, st.opts.max_upload_bytes) {
        Ok(b) => b,
        Err(super::Refused(code, msg)) => return error_response(code, &msg),
    };
    let name: String = q.get("name").filter(|n| !n.is_empty()).unwrap_or("upload.jsonl").chars().take(200).collect();
    let t = &st.table;
    let opts = match q.num("expect") {
        Ok(expect_version) => WriteOptions {
            expect_version,
            ..Default::default()
        },
        Err(e) => return error_response(status_of(&e), &e.to_string()),
    };
    match t.append(&name, std::io::Cursor::new(&body), &opts) {
        Ok(Some(v)) => {
            // As after `tinydelta append`: auto compaction when the table asks for it
            // (docs/FORMAT.md "Auto compaction"); its failure does not undo the append.
            if let Err(e) = crate::ops::optimize::auto_compact(t, &crate::ops::optimize::AutoCompact::default()) {
                ::log::warn!("auto compaction skipped: {e}");
            }
            let rows = t
                .commit_info(v)
                .ok()
                .and_then(|ci| ci.metric("numOutputRows"))
                .unwrap_or(0);
            json_response(
                200,
                &json!({
                    "committed": true,
                    "version": v,
                    "rows": rows,
                    "message": format!("appended {} to {} as version {v}", crate::format::diagnose::count(rows, "row", "rows"), st.shown),
                }),
            )
        }
        Ok(None) => json_response(
            200,
            &json!({
                "committed": false,
                "version": null,
                "message": format!("no rows in {name}; nothing committed to {}", st.shown),
            }),
        ),
        Err(e @ Error::BadInput { .. }) => {
            // Every bad line with its line, column and hints, as `append` lists them.
            let scanned = t.latest_snapshot().and_then(|s| {
                crate::format::diagnose::scan(
                    &s.schema,
                    &name,
                    std::io::Cursor::new(&body),
                    1,
                    crate::format::diagnose::DEFAULT_MAX_ERRORS,
                    None,
                )
            });
            let messages = match scanned {
                Ok(d) if d.total > 0 => d.report(""),
                _ => vec![e.to_string()],
            };
            json_response(
                422,
                &json!({ "error": messages[0], "messages": messages, "committed": false }),
            )
        }
        Err(e) => error_response(status_of(&e), &e.to_string()),
    }
}

/// `POST /api/restore?version=K`: a version whose snapshot equals K's.
pub(super) fn restore(st: &State, q: &Query) -> Reply {
    let r = (|| {
        let k = q
            .num("version")?
            .ok_or_else(|| Error::InvalidArgument("restore needs version=K".into()))?;
        let opts = WriteOptions {
            expect_version: q.num("expect")?,
            ..Default::default()
        };
        let v = st.table.restore(k, &opts)?;
        Ok::<_, Error>(json!({
            "version": v,
            "restoredVersion": k,
            "message": format!("restored {} to version {k} as version {v}", st.shown),
        }))
    })();
    match r {
        Ok(v) => json_response(200, &v),
        Err(e) => error_response(status_of(&e), &e.to_string()),
    }
}
