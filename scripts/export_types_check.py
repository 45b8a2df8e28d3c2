"""Reads an exported DEST (tinydelta export) with a real Delta reader and prints each row as the
canonical JSON line `tinydelta read` prints for the source (docs/FORMAT.md "Column types"), so
the test compares bytes: decimals as exact text with their scale, binary as base64, timestamps
in UTC with microseconds, json columns (DEST `string`) as their JSON text.

usage: export_types_check.py deltalake|polars|duckdb DEST SOURCE_SCHEMA_STRING_FILE
prints {"rows": [line, ...] (sorted by id), "types": {column: reader's type text}}; with
deltalake also "stats_equal", "expected" and "logged": the add.stats of DEST's log (parsed
with decimals exact) against the statistics of the rows deltalake reads, as Delta keeps them
(PROTOCOL "Per-file Statistics": min/max per leaf of structs, nested; nullCount of every
column, a null struct counting a null in each leaf; no min/max for booleans, binary, arrays,
maps and json).
`duckdb` needs DuckDB's delta extension (the pip package duckdb-extension-delta).
"""
import decimal
import base64
import datetime
import json
import os
import sys


def ts_text(v, utc):
    if v.tzinfo is not None:
        v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return json.dumps(v.isoformat(timespec="microseconds") + ("Z" if utc else ""))


def render(v, t):
    """The canonical JSON text of value `v` of the source's Delta type `t`."""
    if v is None:
        return "null"
    if isinstance(t, str):
        if t == "variant":
            return v  # DEST holds the canonical JSON text in a string
        if t.startswith("decimal"):
            return format(v, "f")
        if t == "binary":
            return json.dumps(base64.b64encode(bytes(v)).decode())
        if t in ("timestamp", "timestamp_ntz"):
            return ts_text(v, t == "timestamp")
        if t == "date":
            return json.dumps(v.isoformat())
        if t == "boolean":
            return "true" if v else "false"
        if t == "double":
            return repr(float(v))
        if t == "long":
            return str(int(v))
        if t == "string":
            return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
        raise SystemExit("unknown type " + t)
    kind = t["type"]
    if kind == "array":
        return "[" + ",".join(render(x, t["elementType"]) for x in v) + "]"
    if kind == "map":
        if isinstance(v, dict) and set(v) == {"key", "value"} and isinstance(v["key"], list):
            items = zip(v["key"], v["value"])  # DuckDB's MAP as two lists
        elif isinstance(v, dict):
            items = v.items()
        else:
            items = [(e["key"], e["value"]) if isinstance(e, dict) else e for e in v]
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + render(x, t["valueType"]) for k, x in items) + "}"
    if kind == "struct":
        return "{" + ",".join(
            json.dumps(f["name"], ensure_ascii=False) + ":" + render(v.get(f["name"]), f["type"]) for f in t["fields"]
        ) + "}"
    raise SystemExit("unknown type " + kind)


NO_BOUNDS = ("boolean", "binary", "variant")


def stat_value(v, t):
    if t in ("timestamp", "timestamp_ntz"):
        return json.loads(ts_text(v, t == "timestamp"))
    if t == "date":
        return v.isoformat()
    return v


def expected_stats(rows, fields):
    """(minValues, maxValues, nullCount) of `rows` (dicts) for struct `fields`."""
    lo, hi, nulls = {}, {}, {}
    for f in fields:
        name, t = f["name"], f["type"]
        vals = [r.get(name) if r is not None else None for r in rows]
        if isinstance(t, dict) and t["type"] == "struct":
            a, b, n = expected_stats(vals, t["fields"])
            if a:
                lo[name] = a
            if b:
                hi[name] = b
            nulls[name] = n
            continue
        nulls[name] = sum(v is None for v in vals)
        present = [stat_value(v, t) for v in vals if v is not None]
        if present and isinstance(t, str) and t not in NO_BOUNDS:
            lo[name], hi[name] = min(present), max(present)
    return lo, hi, nulls


def check_stats(dest, schema, rows):
    logged = []
    for name in sorted(os.listdir(os.path.join(dest, "_delta_log"))):
        if name.endswith(".json"):
            for line in open(os.path.join(dest, "_delta_log", name)):
                a = json.loads(line)
                if "add" in a:
                    logged.append(json.loads(a["add"]["stats"], parse_float=decimal.Decimal))
    lo, hi, nulls = expected_stats(rows, schema["fields"])
    expected = [{"numRecords": len(rows), "minValues": lo, "maxValues": hi, "nullCount": nulls}]
    return {"stats_equal": logged == expected, "expected": expected, "logged": logged}


def main():
    reader, dest, schema_file = sys.argv[1:4]
    schema = json.load(open(schema_file))
    if reader == "deltalake":
        from deltalake import DeltaTable

        t = DeltaTable(dest).to_pyarrow_table()
        rows, types = t.to_pylist(), {f.name: str(f.type) for f in t.schema}
    elif reader == "polars":
        import polars

        df = polars.read_delta(dest)
        rows, types = df.to_dicts(), {k: str(v) for k, v in df.schema.items()}
    else:
        import duckdb
        import duckdb_extension_delta

        base = os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions")
        ext = [os.path.join(base, v, "delta.duckdb_extension") for v in sorted(os.listdir(base))][-1]
        con = duckdb.connect()
        con.execute("LOAD '" + ext.replace("'", "''") + "'")
        con.execute("SET TimeZone = 'UTC'")
        scan = "delta_scan('" + dest.replace("'", "''") + "')"
        cols = con.execute("DESCRIBE SELECT * FROM " + scan).fetchall()
        types = {c[0]: c[1] for c in cols}
        # Python's duckdb needs pytz for values WITH TIME ZONE: the UTC wall clock instead.
        sel = ", ".join(
            '"%s"::%s' % (c[0], c[1].replace("TIMESTAMP WITH TIME ZONE", "TIMESTAMP")) for c in cols
        )
        res = con.execute("SELECT " + sel + " FROM " + scan)
        names = [c[0] for c in cols]
        rows = [dict(zip(names, r)) for r in res.fetchall()]
    lines = []
    for r in sorted(rows, key=lambda r: r["id"]):
        lines.append("{" + ",".join(json.dumps(f["name"]) + ":" + render(r.get(f["name"]), f["type"]) for f in schema["fields"]) + "}")
    out = {"rows": lines, "types": types}
    if reader == "deltalake":
        out.update(check_stats(dest, schema, rows))
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
    # deltalake's runtime threads can abort the interpreter's teardown ("terminate called without
    # an active exception") on a loaded machine, after the work is done: leave without it.
    sys.stdout.flush()
    os._exit(0)
