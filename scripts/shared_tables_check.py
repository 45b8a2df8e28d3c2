#!/usr/bin/env python3
"""Compare `tinydelta read` with delta-rs (the `deltalake` package) on a folder of Delta tables.

    shared_tables_check.py [ROOT] [--tinydelta PATH] [--timeout SECONDS] [--table NAME ...]

ROOT (default: ../shared/delta-tables next to the repository, i.e. /work/shared/delta-tables)
is searched for tables: any folder holding `_delta_log/`, at ROOT/<name> or one level deeper
(ROOT/golden/<name>). For every table and every version from 0 to the latest:

  * delta-rs reads `DeltaTable(path, version=v).to_pyarrow_table()`; each row becomes canonical
    JSON values: ints, floats, strings, bools, dates 'YYYY-MM-DD', timestamps with a zone as
    'YYYY-MM-DDTHH:MM:SS.ffffffZ' (UTC), without a zone as 'YYYY-MM-DDTHH:MM:SS.ffffff',
    decimals as text with exactly `scale` fraction digits, binary as padded standard base64,
    lists as lists, structs as objects, maps as objects with string keys;
  * tinydelta reads `tinydelta read COPY --version V`, COPY a private copy of the table in a
    temporary folder (tinydelta caches converted Parquet rows in the table folder when it can
    write there, as root can anywhere: the tables under ROOT are never written) (JSONL on stdout; a non-zero exit status
    means it refused, and the first line of stderr is the reason).

The rows are compared as multisets (order does not matter). Numbers are normalised before the
comparison: a decimal compares as decimal.Decimal whether written as text or as a JSON number,
a float compares exactly in its column's width (float32 columns are rounded to float32 on both
sides), an int must be an int. Timestamps, dates, strings and base64 compare as text.

One line per (table, version):

  MATCH     the same rows (a note follows when tinydelta spells values differently but equal,
            e.g. a decimal as a JSON number)
  DIFFER    different rows: counts, and one example row from each side with the columns that
            differ
  REFUSED   tinydelta exited non-zero (or timed out); its reason
  DL-ERROR  neither delta-rs nor DuckDB can load or read this version; not counted

Variants (a struct of `metadata` and `value` binaries, which delta-rs returns undecoded) are
decoded by this script (the variant binary encoding, independently of tinydelta's crate) and
compared as JSON values.

When delta-rs cannot read a version (deletion vectors, v2 checkpoints...), or the version uses
column mapping (delta-rs reads its mapped columns as nulls), the
version is read with DuckDB's delta extension instead (`delta_scan(path, version := V)`, run by
the interpreter given with --duckdb-python, default the project's .venv-delta, which has the
pip package duckdb-extension-delta): DuckDB copies the rows to a temporary Parquet file, read
back with pyarrow like delta-rs's table. Such lines say "(duckdb)" after the status.

then a summary: counts, and the refusal reasons grouped by message with numbers, paths and the
table's name stripped. Run it with a Python that has deltalake and pyarrow (the project's .venv).
Exit status: 0 when the report was written (whatever it says), 2 on bad usage, 3 when deltalake
or pyarrow cannot be imported.
"""

import argparse
import base64
import collections
import datetime
import decimal
import json
import os
import re
import struct
import subprocess
import sys
import time

try:
    import pyarrow as pa
    from deltalake import DeltaTable
except Exception as e:  # noqa: BLE001 - any import failure means "not installed properly"
    sys.stderr.write(f"shared_tables_check.py: cannot import deltalake/pyarrow with {sys.executable}: {e}\n")
    sys.exit(3)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_ROOT = "/work/shared/delta-tables"
DEFAULT_TINYDELTA = os.path.join(REPO, "target", "release", "tinydelta")
DEFAULT_DUCKDB_PYTHON = os.path.join(REPO, ".venv-delta", "bin", "python")
if not os.path.exists(DEFAULT_DUCKDB_PYTHON):
    DEFAULT_DUCKDB_PYTHON = "/work/main/.venv-delta/bin/python"

DUCKDB_SCRIPT = r"""
import duckdb, os, sys, duckdb_extension_delta
path, version, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
base = os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions")
ext = [os.path.join(base, v, "delta.duckdb_extension") for v in sorted(os.listdir(base))][-1]
con = duckdb.connect()
con.execute("SET TimeZone = 'UTC'")
con.execute("LOAD '" + ext.replace("'", "''") + "'")
q = "delta_scan('" + path.replace("'", "''") + "', version := " + str(version) + ")"
con.execute("COPY (SELECT * FROM " + q + ") TO '" + out.replace("'", "''") + "' (FORMAT parquet)")
"""

EPOCH = datetime.datetime(1970, 1, 1)
UNIT_PER_US = {"s": None, "ms": None, "us": 1, "ns": 1000}


# ---------------------------------------------------------------------------------------------
# Finding tables and versions
# ---------------------------------------------------------------------------------------------


def is_table(path):
    return os.path.isdir(os.path.join(path, "_delta_log"))


def find_tables(root):
    """Tables at ROOT/<name> and ROOT/<group>/<name>, sorted by relative path."""
    found = []
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if not os.path.isdir(p):
            continue
        if is_table(p):
            found.append(p)
            continue
        for sub in sorted(os.listdir(p)):
            q = os.path.join(p, sub)
            if os.path.isdir(q) and is_table(q):
                found.append(q)
    return found


LOG_RECORD = re.compile(r"^\[\S+\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s")
LOG_FILE = re.compile(r"^(\d{20})\.(json|checkpoint\..*parquet|checkpoint\.parquet)$")


def latest_version(path):
    """The latest version as delta-rs sees it, or else the highest commit/checkpoint in the log."""
    try:
        return DeltaTable(path).version()
    except Exception:  # noqa: BLE001 - fall back to listing the log
        pass
    best = -1
    for name in os.listdir(os.path.join(path, "_delta_log")):
        m = LOG_FILE.match(name)
        if m:
            best = max(best, int(m.group(1)))
    return best


# ---------------------------------------------------------------------------------------------
# delta-rs side: Arrow values to canonical JSON values
# ---------------------------------------------------------------------------------------------


def storage_type(t):
    """The type to cast an Arrow type to before to_pylist(): timestamps to int64 and dates to
    int32 (so any range and unit survives), dictionaries decoded, nested types recursively."""
    if pa.types.is_dictionary(t):
        return storage_type(t.value_type)
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_date64(t):
        return pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, storage_type(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(storage_type(t.key_type), storage_type(t.item_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(storage_type(t.value_type))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(storage_type(t.value_type))
    return t


def logical_type(t):
    """The type to interpret the to_pylist() values with (dictionaries decoded)."""
    if pa.types.is_dictionary(t):
        return logical_type(t.value_type)
    return t


def fmt_timestamp(n, unit, tz):
    """Canonical text of an Arrow timestamp value n in unit, with 'Z' when it has a zone."""
    per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[unit]
    secs, frac = divmod(n, per_second)
    micros = frac * 1_000_000 // per_second  # truncate nanoseconds to microseconds
    try:
        dt = EPOCH + datetime.timedelta(seconds=secs, microseconds=micros)
        text = dt.strftime("%Y-%m-%dT%H:%M:%S.%f")
        if dt.year < 1000:
            text = f"{dt.year:04d}" + text[text.index("-"):]
    except OverflowError:
        text = f"<out of range timestamp {n} {unit}>"
    return text + ("Z" if tz else "")


def fmt_date(days):
    try:
        d = datetime.date(1970, 1, 1) + datetime.timedelta(days=days)
        return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"
    except OverflowError:
        return f"<out of range date {days}>"


def fmt_decimal(d, scale):
    q = decimal.Decimal(1).scaleb(-scale)
    with decimal.localcontext() as ctx:
        ctx.prec = 100
        return format(d.quantize(q), "f")


def is_variant(t):
    """Whether Arrow type t is a Parquet variant as delta-rs returns it: a struct of exactly the
    binaries `metadata` and `value` (delta-rs does not decode variants)."""
    return (pa.types.is_struct(t) and sorted(f.name for f in t) == ["metadata", "value"]
            and all(pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type) for f in t))


def decode_variant(metadata, value):
    """The JSON value of one variant (PROTOCOL "Variant Data Type": the Parquet variant binary
    encoding), decoded here independently of tinydelta's crate: dates, timestamps, UUIDs and
    binaries as the strings parquet-variant-json writes."""
    h = metadata[0]
    osz = ((h >> 6) & 3) + 1
    le = lambda b: int.from_bytes(b, "little")
    n = le(metadata[1:1 + osz])
    offs = [le(metadata[1 + osz * (i + 1):1 + osz * (i + 2)]) for i in range(n + 1)]
    base = 1 + osz * (n + 2)
    names = [metadata[base + offs[i]:base + offs[i + 1]].decode("utf-8") for i in range(n)]

    def rfc3339(us, zone):
        t = EPOCH + datetime.timedelta(microseconds=us)
        frac = t.microsecond
        s = t.strftime("%Y-%m-%dT%H:%M:%S")
        if frac:
            s += (".%03d" % (frac // 1000)) if frac % 1000 == 0 else (".%06d" % frac)
        return s + ("+00:00" if zone else "")

    def val(b):
        v0 = b[0]
        basic, vh = v0 & 3, v0 >> 2
        if basic == 1:
            return b[1:1 + vh].decode("utf-8")
        if basic == 0:
            body = b[1:]
            if vh == 0:
                return None
            if vh in (1, 2):
                return vh == 1
            if vh in (3, 4, 5, 6):
                w = {3: 1, 4: 2, 5: 4, 6: 8}[vh]
                return int.from_bytes(body[:w], "little", signed=True)
            if vh == 7:
                return struct.unpack("<d", body[:8])[0]
            if vh == 14:
                return float(struct.unpack("<f", body[:4])[0])
            if vh in (8, 9, 10):
                w = {8: 4, 9: 8, 10: 16}[vh]
                d = decimal.Decimal(int.from_bytes(body[1:1 + w], "little", signed=True)).scaleb(-body[0])
                return int(d) if d == d.to_integral_value() else float(d)
            if vh == 11:
                return fmt_date(int.from_bytes(body[:4], "little", signed=True))
            if vh in (12, 13):
                return rfc3339(int.from_bytes(body[:8], "little", signed=True), vh == 12)
            if vh in (15, 16):
                ln = le(body[:4])
                raw = body[4:4 + ln]
                return base64.b64encode(raw).decode("ascii") if vh == 15 else raw.decode("utf-8")
            if vh == 20:
                import uuid
                return str(uuid.UUID(bytes=bytes(body[:16])))
            raise ValueError(f"variant primitive type {vh} is not decoded by this script")
        large = (vh >> (4 if basic == 2 else 2)) & 1
        osz = (vh & 3) + 1
        cnt_w = 4 if large else 1
        cnt = le(b[1:1 + cnt_w])
        p = 1 + cnt_w
        if basic == 2:
            isz = ((vh >> 2) & 3) + 1
            ids = [le(b[p + i * isz:p + (i + 1) * isz]) for i in range(cnt)]
            p += cnt * isz
        offs = [le(b[p + i * osz:p + (i + 1) * osz]) for i in range(cnt + 1)]
        start = p + (cnt + 1) * osz
        items = [val(b[start + offs[i]:]) for i in range(cnt)]
        if basic == 3:
            return items
        return {names[ids[i]]: items[i] for i in range(cnt)}

    return val(value)


def canonical(v, t):
    """A python value from to_pylist() of storage_type(t), as a canonical JSON value."""
    if v is None:
        return None
    t = logical_type(t)
    if is_variant(t):
        return decode_variant(v["metadata"], v["value"]) if v.get("value") is not None else None
    if pa.types.is_timestamp(t):
        return fmt_timestamp(v, t.unit, t.tz)
    if pa.types.is_date32(t):
        return fmt_date(v)
    if pa.types.is_date64(t):
        return fmt_date(v // 86_400_000)
    if pa.types.is_decimal(t):
        return fmt_decimal(v, t.scale)
    if pa.types.is_floating(t):
        return float(v)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return v
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or (
        hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(t)
    ):
        return base64.b64encode(v).decode("ascii")
    if pa.types.is_struct(t):
        return {f.name: canonical(v.get(f.name), f.type) for f in t}
    if pa.types.is_map(t):
        return {str(canonical(k, t.key_type)): canonical(x, t.item_type) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t):
        return [canonical(x, t.value_type) for x in v]
    return v  # strings and anything else to_pylist() already gives as JSON


def read_deltalake(path, version):
    """(schema, rows as canonical dicts) of one version, as delta-rs reads it."""
    return canonical_rows(DeltaTable(path, version=version).to_pyarrow_table())


def read_duckdb(python, path, version):
    """(schema, rows as canonical dicts) of one version, as DuckDB's delta_scan reads it."""
    import tempfile

    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.parquet")
        p = subprocess.run([python, "-c", DUCKDB_SCRIPT, path, str(version), out],
                           capture_output=True, timeout=600)
        if p.returncode != 0:
            err = [l for l in p.stderr.decode("utf-8", "replace").splitlines() if l.strip()]
            raise RuntimeError(err[-1] if err else f"exit status {p.returncode}")
        return canonical_rows(pq.read_table(out))


def canonical_rows(table):
    schema = table.schema
    target = pa.schema([pa.field(f.name, storage_type(f.type), f.nullable) for f in schema])
    if target != schema:
        table = table.cast(target)
    rows = []
    for r in table.to_pylist():
        rows.append({f.name: canonical(r[f.name], f.type) for f in schema})
    return schema, rows


# ---------------------------------------------------------------------------------------------
# tinydelta side
# ---------------------------------------------------------------------------------------------


COPIES = {}


def td_path(path):
    """The private copy of the table at `path` that tinydelta reads: tinydelta keeps converted
    Parquet rows in the table folder (`_tinydelta/jsonl/`) when it can write there, as root can
    anywhere, and the tables under ROOT must not be written."""
    if path not in COPIES:
        import shutil
        import tempfile

        tmp = tempfile.mkdtemp(prefix="shared-tables-")
        dest = os.path.join(tmp, os.path.basename(path))
        shutil.copytree(path, dest, symlinks=True)
        COPIES[path] = dest
    return COPIES[path]


def drop_copy(path):
    import shutil

    dest = COPIES.pop(path, None)
    if dest:
        shutil.rmtree(os.path.dirname(dest), ignore_errors=True)


def run_tinydelta(binary, path, version, timeout):
    """('ok', rows) or ('refused', reason). Waits for a binary that is being rebuilt."""
    cmd = [binary, "read", "--quiet", path, "--version", str(version)]
    deadline = time.monotonic() + 300
    while True:
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=timeout)
            break
        except subprocess.TimeoutExpired:
            return "refused", f"timed out after {timeout:g} s"
        except OSError as e:  # missing or busy while someone rebuilds it
            if time.monotonic() > deadline:
                return "refused", f"cannot run {binary}: {e}"
            time.sleep(5)
    if p.returncode != 0:
        err = [l for l in p.stderr.decode("utf-8", "replace").splitlines() if l.strip()]
        # the first line that is not a log record ("[2026-... WARN  tinydelta::table] ...")
        msg = [l for l in err if not LOG_RECORD.match(l)] or err
        return "refused", (msg[0] if msg else f"exit status {p.returncode}, no message")
    rows = []
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        if line.strip():
            # parse_float keeps the exact text of non-integral numbers (decimals, floats)
            rows.append(json.loads(line, parse_float=decimal.Decimal))
    return "ok", rows


# ---------------------------------------------------------------------------------------------
# Comparison keys
# ---------------------------------------------------------------------------------------------


class Spelling:
    """Counts cells whose value is equal but spelled differently by tinydelta."""

    def __init__(self):
        self.notes = collections.Counter()

    def note(self, what):
        self.notes[what] += 1


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


SPECIAL_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf"),
                  "inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


def key(v, t, spell=None):
    """A hashable comparison key of a canonical (delta-rs) or parsed (tinydelta) value of type t.
    Values that do not fit the type keep a tagged raw key, so they never match."""
    if v is None:
        return None
    t = logical_type(t)
    raw = ("raw", json.dumps(v, sort_keys=True, default=str))
    if is_variant(t):
        # Any JSON value: compared as sorted JSON text, numbers as floats when not integers.
        norm = lambda x: (float(x) if isinstance(x, (float, decimal.Decimal)) else
                          {k: norm(y) for k, y in x.items()} if isinstance(x, dict) else
                          [norm(y) for y in x] if isinstance(x, list) else x)
        return ("variant", json.dumps(norm(v), sort_keys=True))
    if pa.types.is_decimal(t):
        if isinstance(v, bool):
            return raw
        if isinstance(v, (int, decimal.Decimal)):
            if spell is not None:
                spell.note("decimal written as a JSON number")
            d = decimal.Decimal(v)
        elif isinstance(v, str):
            try:
                d = decimal.Decimal(v)
            except decimal.InvalidOperation:
                return raw
            if spell is not None and fmt_decimal(d, t.scale) != v:
                spell.note(f"decimal text without exactly {t.scale} fraction digits")
        else:
            return raw
        return ("dec", d.normalize() if d else decimal.Decimal(0))
    if pa.types.is_floating(t):
        if isinstance(v, bool):
            return raw
        if isinstance(v, str):
            if v not in SPECIAL_FLOATS:
                return raw
            x = SPECIAL_FLOATS[v]
        elif isinstance(v, (int, float, decimal.Decimal)):
            x = float(v)
        else:
            return raw
        if t.bit_width == 32 and x == x:
            x = f32(x)
        return ("float", repr(x))
    if pa.types.is_integer(t):
        if isinstance(v, bool) or not isinstance(v, int):
            return raw
        return ("int", v)
    if pa.types.is_boolean(t):
        return ("bool", v) if isinstance(v, bool) else raw
    if pa.types.is_struct(t):
        if not isinstance(v, dict):
            return raw
        extra = sorted(set(v) - {f.name for f in t})
        if extra:
            return raw
        return ("struct", tuple((f.name, key(v.get(f.name), f.type, spell)) for f in t))
    if pa.types.is_map(t):
        if not isinstance(v, dict):
            return raw
        return ("map", tuple(sorted(((k, key(x, t.item_type, spell)) for k, x in v.items()),
                                    key=repr)))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t):
        if not isinstance(v, list):
            return raw
        return ("list", tuple(key(x, t.value_type, spell) for x in v))
    if isinstance(v, str):
        return ("str", v)
    return raw


def row_key(row, schema, spell=None):
    """Key of a whole row: the schema's columns in order (a missing column reads as null, and is
    noted), then any columns the schema does not have, raw."""
    names = [f.name for f in schema]
    if spell is not None:
        missing = [n for n in names if n not in row]
        if missing:
            spell.note("column left out of the row (read as null)")
    cols = tuple(key(row.get(f.name), f.type, spell) for f in schema)
    extra = tuple(sorted((k, json.dumps(v, default=str)) for k, v in row.items() if k not in names))
    return cols + (("extra", extra),) if extra else cols


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def short(obj, limit=300):
    text = json.dumps(obj, default=str, sort_keys=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def differing_columns(a, b, schema):
    """Columns where rows a (delta-rs) and b (tinydelta) differ, with both values."""
    out = []
    for f in schema:
        if key(a.get(f.name), f.type) != key(b.get(f.name), f.type):
            out.append(f"{f.name}: delta-rs {short(a.get(f.name), 80)} vs tinydelta {short(b.get(f.name), 80)}")
    for k in b:
        if k not in a:
            out.append(f"{k}: only in tinydelta {short(b[k], 80)}")
    return out


def explain_difference(dl_rows, td_rows, dl_keys, td_keys, schema):
    only_dl = dl_keys - td_keys
    only_td = td_keys - dl_keys
    lines = [
        f"rows: delta-rs {len(dl_rows)}, tinydelta {len(td_rows)}; "
        f"{sum(only_dl.values())} only in delta-rs, {sum(only_td.values())} only in tinydelta"
    ]
    a = b = None
    if only_dl:
        k = next(iter(only_dl))
        a = next(r for r, rk in zip(dl_rows, dl_keys.elements_order) if rk == k)
        lines.append(f"only delta-rs:  {short(a)}")
    if only_td:
        k = next(iter(only_td))
        b = next(r for r, rk in zip(td_rows, td_keys.elements_order) if rk == k)
        lines.append(f"only tinydelta: {short(b)}")
    if a is not None and b is not None:
        # pair the delta-rs example with the tinydelta-only row that differs in fewest columns
        cands = [r for r, rk in zip(td_rows, td_keys.elements_order) if rk in only_td][:2000]
        best = min(cands, key=lambda r: len(differing_columns(a, r, schema)))
        for d in differing_columns(a, best, schema)[:6]:
            lines.append(f"  differs in {d}")
    return lines


class KeyCounter(collections.Counter):
    """A Counter that also remembers the key of each row in order."""

    def __init__(self, keys):
        super().__init__(keys)
        self.elements_order = keys


def reason_group(reason, path, root):
    """A refusal message with paths, the table's name and numbers stripped."""
    s = reason
    for p in sorted({path, os.path.relpath(path, root), os.path.basename(path)}, key=len, reverse=True):
        s = re.sub(r"(?<![\w.-])" + re.escape(p) + r"(?![\w.-])", "<table>", s)
    s = re.sub(r"<table>/[^\s\"',;:)]+", "<table>/<path>", s)
    s = re.sub(r"(?<![\w<>])/[^\s\"',;:)]+", "<path>", s)
    s = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\S*", "<file>", s)
    s = re.sub(r"\b[\w.-]+\.(parquet|json|jsonl|crc|bin)\b", "<file>", s)
    s = re.sub(r"\d+(\.\d+)?", "N", s)
    return s


def binary_stamp(binary):
    """`tinydelta --version` and the binary's modification time, to tell builds apart."""
    try:
        mtime = datetime.datetime.fromtimestamp(os.path.getmtime(binary), datetime.timezone.utc)
        ver = subprocess.run([binary, "--version"], capture_output=True, timeout=30).stdout
        return f"{ver.decode('utf-8', 'replace').strip()}, built {mtime:%Y-%m-%dT%H:%M:%SZ}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run: {e}"


def check_version(path, version, binary, timeout, duckdb_python):
    """(status, detail lines, reader) for one version."""
    reader = "delta-rs"
    try:
        # delta-rs (this version) reads a column-mapped table's mapped columns as nulls: such a
        # version is compared with DuckDB, which resolves physical names.
        mode = DeltaTable(path, version=version).metadata().configuration.get("delta.columnMapping.mode")
        if mode in ("name", "id") and duckdb_python:
            raise RuntimeError(f"column mapping mode {mode}: compared with DuckDB")
        schema, dl_rows = read_deltalake(path, version)
    except Exception as e:  # noqa: BLE001 - delta-rs refusing is a result, not a failure
        msg = str(e).strip().splitlines()
        first = f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]
        if not duckdb_python:
            return "DL-ERROR", [first]
        try:
            schema, dl_rows = read_duckdb(duckdb_python, path, version)
            reader = "duckdb"
        except Exception as e2:  # noqa: BLE001
            return "DL-ERROR", [first, f"duckdb: {str(e2)[:300]}"]
    status, detail = compare_version(path, version, binary, timeout, schema, dl_rows)
    return status + (" (duckdb)" if reader == "duckdb" else ""), detail


def compare_version(path, version, binary, timeout, schema, dl_rows):
    outcome, td = run_tinydelta(binary, td_path(path), version, timeout)
    if outcome == "refused":
        td = td.replace(td_path(path), path)
    if outcome == "refused":
        return "REFUSED", [td]
    spell = Spelling()
    dl_keys = KeyCounter([row_key(r, schema) for r in dl_rows])
    try:
        td_keys = KeyCounter([row_key(r, schema, spell) for r in td])
    except Exception as e:  # noqa: BLE001
        return "DIFFER", [f"tinydelta's rows do not fit the schema: {type(e).__name__}: {e}"]
    if dl_keys == td_keys:
        notes = [f"note: {what} ({n} values)" for what, n in sorted(spell.notes.items())]
        return "MATCH", [f"{len(dl_rows)} rows"] + notes
    return "DIFFER", explain_difference(dl_rows, td, dl_keys, td_keys, schema)


def main():
    ap = argparse.ArgumentParser(
        description="Compare `tinydelta read` with delta-rs on every version of a folder of Delta tables.",
    )
    ap.add_argument("root", nargs="?", default=DEFAULT_ROOT,
                    help=f"folder of Delta tables (default: {DEFAULT_ROOT})")
    ap.add_argument("--tinydelta", default=DEFAULT_TINYDELTA, metavar="PATH",
                    help=f"tinydelta binary (default: {DEFAULT_TINYDELTA})")
    ap.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                    help="time limit per tinydelta call (default: 60)")
    ap.add_argument("--table", action="append", default=[], metavar="NAME",
                    help="only tables whose path relative to ROOT is NAME (repeatable)")
    ap.add_argument("--duckdb-python", default=DEFAULT_DUCKDB_PYTHON, metavar="PATH",
                    help="Python with duckdb and duckdb-extension-delta, used when delta-rs cannot "
                         f"read a version; empty to skip (default: {DEFAULT_DUCKDB_PYTHON})")
    ap.add_argument("--output", "-o", metavar="FILE", help="also write the report to FILE")
    args = ap.parse_args()

    if not os.path.isdir(args.root):
        ap.error(f"{args.root} is not a folder")
    root = os.path.abspath(args.root)
    tables = find_tables(root)
    if args.table:
        tables = [t for t in tables if os.path.relpath(t, root) in args.table]

    out_file = open(args.output, "w", encoding="utf-8") if args.output else None

    def emit(line=""):
        print(line, flush=True)
        if out_file:
            out_file.write(line + "\n")
            out_file.flush()

    emit(f"# tinydelta: {args.tinydelta} ({binary_stamp(args.tinydelta)})")
    emit(f"# root: {root} ({len(tables)} tables)")
    counts = collections.Counter()
    reasons = collections.Counter()
    reason_example = {}
    differ = []
    per_table = collections.OrderedDict()
    for path in tables:
        rel = os.path.relpath(path, root)
        latest = latest_version(path)
        if latest < 0:
            emit(f"{rel}: no versions found")
            continue
        for v in range(latest + 1):
            status, detail = check_version(path, v, args.tinydelta, args.timeout, args.duckdb_python)
            base = status.split()[0]
            counts[status] += 1
            per_table.setdefault(rel, collections.Counter())[base] += 1
            if base == "REFUSED":
                per_table[rel]["why: " + detail[0][:160]] += 1
            emit(f"{status:8} {rel}@{v}" + (f"  {detail[0]}" if detail else ""))
            for d in detail[1:]:
                emit(f"         {d}")
            if base == "REFUSED":
                g = reason_group(detail[0], path, root)
                reasons[g] += 1
                reason_example.setdefault(g, detail[0])
            elif base == "DIFFER":
                differ.append(f"{rel}@{v}")
        drop_copy(path)

    emit()
    emit("## Summary (DL-ERROR versions are not counted)")
    compared = sum(n for s, n in counts.items() if s != "DL-ERROR")
    emit(f"versions compared: {compared}")
    for s in ("MATCH", "DIFFER", "REFUSED"):
        emit(f"  {s:8} {counts[s] + counts[s + ' (duckdb)']}"
             f" ({counts[s + ' (duckdb)']} of them read by DuckDB)")
    emit(f"  {'DL-ERROR':8} {counts['DL-ERROR']} (skipped)")
    if differ:
        emit("differing: " + ", ".join(differ))
    emit()
    emit("## Per table: versions matched / refused / differing / unreadable by delta-rs and DuckDB")
    for rel, c in per_table.items():
        whys = sorted(k[5:] for k in c if k.startswith("why: "))
        emit(f"{rel}: {c['MATCH']} matched, {c['REFUSED']} refused, {c['DIFFER']} differing, "
             f"{c['DL-ERROR']} unreadable" + (f"; refused: {whys[0]}" if whys else ""))
    emit()
    emit("## Refusal reasons")
    for g, n in reasons.most_common():
        emit(f"{n:5}  {g}")
    if out_file:
        out_file.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # deltalake's runtime threads can abort the interpreter at shutdown ("terminate called
    # without an active exception") after a failed load; leave without running finalizers.
    os._exit(code)
