#!/usr/bin/env python3
"""What delta-rs (the `deltalake` Python package) sees in a Delta table, as JSON on stdout.

    delta_check.py TABLE            every version from 0 to the latest
    delta_check.py TABLE N [M ...]  only these versions

Used by tests/cli/delta_compat.rs, which compares the output with `tinydelta describe --json` and
`tinydelta history --json`. delta-rs cannot read JSON data files into Arrow (metaData.format is
`json`), so this looks only at the log as delta-rs replays it: version, protocol, metadata,
schema, live files (add actions with parsed stats) and history, plus the rows DuckDB reads
from each file delta-rs lists (an independent count).

A version delta-rs refuses to open is reported as {"version": N, "error": "..."} rather than
aborting, so the test can name exactly what was rejected. Exit status: 0 when the report was
written, 3 when deltalake, pyarrow or duckdb cannot be imported.
"""

import datetime
import decimal
import json
import os
import sys


def fail_import(what, err):
    sys.stderr.write(
        f"delta_check.py: cannot import {what} with {sys.executable}: {err}\n"
        "Run scripts/test.sh (it creates .venv with deltalake, duckdb and pyarrow), or point "
        "TINYDELTA_PYTHON at a python that has them.\n"
    )
    sys.exit(3)


try:
    import deltalake
    from deltalake import DeltaTable
except Exception as e:  # noqa: BLE001 - any import failure means "not installed properly"
    fail_import("deltalake", e)

try:
    import pyarrow as pa
except Exception as e:  # noqa: BLE001
    fail_import("pyarrow", e)

try:
    import duckdb
except Exception as e:  # noqa: BLE001
    fail_import("duckdb", e)


def plain(v):
    """A JSON-friendly value, spelled the way tinydelta writes stats."""
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return v.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


def add_actions(dt):
    """Live files as delta-rs replays them: path, size, numRecords and parsed stats."""
    raw = dt.get_add_actions(flatten=True)
    rows = pa.table(raw).to_pylist()
    files = []
    for r in rows:
        f = {
            "path": r.pop("path"),
            "size": r.pop("size_bytes"),
            "numRecords": r.pop("num_records", None),
            "nullCount": {},
            "minValues": {},
            "maxValues": {},
        }
        for key, value in r.items():
            for prefix, dest in (("null_count.", "nullCount"), ("min.", "minValues"), ("max.", "maxValues")):
                if key.startswith(prefix):
                    f[dest][key[len(prefix):]] = plain(value)
        files.append(f)
    return files


def duckdb_rows(uris):
    """Lines DuckDB reads from each data file (as JSON, independent of delta-rs and tinydelta);
    null for a file that is gone (vacuumed)."""
    con = duckdb.connect()
    out = {}
    for uri in uris:
        path = uri[len("file://"):] if uri.startswith("file://") else uri
        if not os.path.exists(path):
            # Deleted by a retention vacuum: the log still names it, the version is unreadable.
            out[os.path.basename(path)] = None
            continue
        n = con.execute(
            "SELECT count(*) FROM read_json(?, format='newline_delimited', records=true)", [path]
        ).fetchone()[0]
        out[os.path.basename(path)] = n
    return out


def one_version(table, v):
    try:
        dt = DeltaTable(table, version=v)
        proto = dt.protocol()
        meta = dt.metadata()
        schema = json.loads(dt.schema().to_json())
        uris = list(dt.file_uris())
        rep = {
            "version": dt.version(),
            "protocol": {
                "minReaderVersion": proto.min_reader_version,
                "minWriterVersion": proto.min_writer_version,
                "readerFeatures": proto.reader_features,
                "writerFeatures": proto.writer_features,
            },
            "metadata": {
                "id": meta.id,
                "partitionColumns": list(meta.partition_columns),
                "configuration": dict(meta.configuration),
                "createdTime": meta.created_time,
            },
            "schema": [
                {"name": f["name"], "type": f["type"], "nullable": f["nullable"]}
                for f in schema["fields"]
            ],
            "fileUris": uris,
            "files": add_actions(dt),
        }
        rep["duckdbRows"] = duckdb_rows(uris)
        return rep
    except Exception as e:  # noqa: BLE001 - report what delta-rs refused, precisely
        return {"version": v, "error": f"{type(e).__name__}: {e}"}


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: delta_check.py TABLE [VERSION...]\n")
        return 2
    table = os.path.abspath(sys.argv[1])
    report = {"deltalake": deltalake.__version__, "table": table}
    try:
        latest = DeltaTable(table)
        report["latest"] = latest.version()
        report["history"] = latest.history()
    except Exception as e:  # noqa: BLE001
        report["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(report, default=str))
        return 0
    versions = [int(a) for a in sys.argv[2:]] or list(range(report["latest"] + 1))
    report["versions"] = [one_version(table, v) for v in versions]
    print(json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    code = main()
    # deltalake's runtime threads can abort the interpreter's teardown ("terminate called without
    # an active exception") on a loaded machine, after the work is done: leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
