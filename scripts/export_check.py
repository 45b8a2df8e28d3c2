#!/usr/bin/env python3
"""What Delta readers see in a table written by `tinydelta export` (tests/cli/export.rs).

Reads one JSON request on stdin:

    {"dest": "/path/to/dest",
     "columns": [["id", "long"], ["t", "timestamp"], ...],
     "versions": [{"version": 0, "jsonl": "/path/to/v0.jsonl", "timestamp": 1796083101295}, ...]}

`jsonl` is `tinydelta read --version N` of the source (the expected rows); `dest_jsonl`, if
given, is `tinydelta read` of the DEST version (tinydelta reading the Parquet files back).
Prints one JSON object:
for every version, the row count and per-column checksums of (a) the expected JSONL rows, typed
by the column types, (b) deltalake's reading of that version of DEST and (c) DuckDB's
`read_parquet` of the Parquet files deltalake lists for it; and for time travel by timestamp,
the version deltalake loads at each commit's time and 1 ms before it.

With `--delta-scan` (run by the interpreter of .venv-delta, which has DuckDB's delta extension
and no deltalake), prints only the checksums of DuckDB's `delta_scan` of DEST's newest version.

A checksum is (values, nulls, sum of a 64-bit hash of each typed value mod 2^64): the same
multiset of typed values gives the same checksum in any row order. `delta_scan` comes from
DuckDB's delta extension as packaged for pip (`duckdb-extension-delta`, installed by
scripts/test.sh into .venv-delta, since it pins its duckdb version): DuckDB's own
`INSTALL delta` downloads from its extension server instead.
"""

import datetime as dt
import hashlib
import json
import os
import sys

import duckdb

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def micros(v):
    """A timestamp (datetime, RFC 3339 text, or µs since the epoch) as µs since the epoch."""
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        v = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    if v.tzinfo is None:
        v = v.replace(tzinfo=dt.timezone.utc)
    return (v - EPOCH) // dt.timedelta(microseconds=1)


def typed(ty, v):
    """The canonical text of one typed value, or None for null."""
    if v is None:
        return None
    if ty == "long":
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"not an integer: {v!r}")
        return str(v)
    if ty == "double":
        return repr(float(v))
    if ty == "string":
        return "s:" + v
    if ty == "boolean":
        if not isinstance(v, bool):
            raise ValueError(f"not a boolean: {v!r}")
        return "true" if v else "false"
    if ty == "date":
        if isinstance(v, str):
            v = dt.date.fromisoformat(v)
        return v.isoformat()
    if ty == "timestamp":
        return str(micros(v))
    raise ValueError(f"unknown type {ty}")


def checksums(columns, rows):
    """rows: an iterable of dicts name -> value."""
    out = {name: [0, 0, 0] for name, _ in columns}
    n = 0
    for row in rows:
        n += 1
        for name, ty in columns:
            t = typed(ty, row.get(name))
            c = out[name]
            if t is None:
                c[1] += 1
            else:
                c[0] += 1
                h = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
                c[2] = (c[2] + h) % (1 << 64)
    return {"rows": n, "columns": {k: [a, b, str(c)] for k, (a, b, c) in out.items()}}


def expected(columns, path):
    with open(path, encoding="utf-8") as f:
        return checksums(columns, (json.loads(line) for line in f if line.strip()))


def from_deltalake(columns, dest, version):
    import deltalake

    t = deltalake.DeltaTable(dest, version=version)
    table = t.to_pyarrow_table()
    files = [u[len("file://"):] if u.startswith("file://") else u for u in t.file_uris()]
    return checksums(columns, table.to_pylist()), files


def duckdb_select(con, columns, source, params):
    """Checksums of `SELECT ... FROM source`: timestamps as µs, dates as text; a column the
    source lacks (files written before an ADD COLUMNS) is null, as Delta readers read it."""
    present = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}", params).fetchall()}
    select = []
    for name, ty in columns:
        q = '"' + name.replace('"', '""') + '"'
        if name not in present:
            select.append(f"NULL AS {q}")
        elif ty == "timestamp":
            select.append(f"epoch_us({q}) AS {q}")
        elif ty == "date":
            select.append(f"CAST({q} AS VARCHAR) AS {q}")
        else:
            select.append(q)
    cur = con.execute(f"SELECT {', '.join(select)} FROM {source}", params)
    names = [d[0] for d in cur.description]
    return checksums(columns, (dict(zip(names, r)) for r in cur.fetchall()))


def from_duckdb(columns, files):
    if not files:
        return checksums(columns, [])
    con = duckdb.connect()
    return duckdb_select(con, columns, "read_parquet($files, union_by_name = true)", {"files": files})


def from_delta_scan(columns, dest):
    """DuckDB's delta extension (the pip package duckdb-extension-delta, built for the duckdb
    version it pins) reading DEST's newest version."""
    import duckdb_extension_delta

    base = os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions")
    paths = [os.path.join(base, v, "delta.duckdb_extension") for v in sorted(os.listdir(base))]
    con = duckdb.connect()
    con.execute("LOAD '" + paths[-1].replace("'", "''") + "'")
    return duckdb_select(con, columns, "delta_scan('" + dest.replace("'", "''") + "')", {})


def main():
    req = json.load(sys.stdin)
    dest, columns = req["dest"], [tuple(c) for c in req["columns"]]
    if sys.argv[1:] == ["--delta-scan"]:
        print(json.dumps({"duckdb": duckdb.__version__, "delta_scan": from_delta_scan(columns, dest)}))
        return
    import deltalake

    out = {"deltalake": deltalake.__version__, "duckdb": duckdb.__version__, "versions": [], "time_travel": []}
    for v in req["versions"]:
        k = v["version"]
        dl, files = from_deltalake(columns, dest, k)
        out["versions"].append(
            {
                "version": k,
                "expected": expected(columns, v["jsonl"]),
                "dest_jsonl": expected(columns, v["dest_jsonl"]) if v.get("dest_jsonl") else None,
                "deltalake": dl,
                "duckdb": from_duckdb(columns, files),
                "files": len(files),
            }
        )
    table = deltalake.DeltaTable(dest)
    for v in req["versions"]:
        at = dt.datetime.fromtimestamp(v["timestamp"] / 1000, tz=dt.timezone.utc)
        table.load_as_version(at)
        loaded = table.version()
        before = None
        if v["version"] > 0:
            table.load_as_version(at - dt.timedelta(milliseconds=1))
            before = table.version()
        out["time_travel"].append({"version": v["version"], "at": loaded, "before": before})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
    # deltalake's runtime threads can abort the interpreter's teardown ("terminate called without
    # an active exception") on a loaded machine, after the work is done: leave without it.
    sys.stdout.flush()
    os._exit(0)
