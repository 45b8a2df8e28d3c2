#!/usr/bin/env python3
"""Figure 7 baseline: one-row appends with the `deltalake` package, all in one process.

Usage: delta_append.py TABLE_DIR COMMITS ROW_JSON_FILE [--keep]

Creates a fresh Delta table at TABLE_DIR (untimed) with the first row of ROW_JSON_FILE, then
times COMMITS calls of write_deltalake(TABLE_DIR, one_row, mode="append") and prints the seconds
per commit (total / COMMITS). With --keep, TABLE_DIR is an existing table: only the COMMITS
appends are made.
"""
import json
import shutil
import sys
import time
from datetime import datetime

import pyarrow as pa
from deltalake import write_deltalake

INT = {"year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time", "sched_arr_time",
       "arr_delay", "flight", "air_time", "distance", "hour", "minute"}


def main():
    path, n, row_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    row = json.loads(open(row_file).readline())
    fields = []
    for k in row:
        if k in INT:
            fields.append(pa.field(k, pa.int64(), nullable=k not in {"year", "month", "day"}))
        elif k == "time_hour":
            fields.append(pa.field(k, pa.timestamp("us", tz="UTC")))
        else:
            fields.append(pa.field(k, pa.string()))
    schema = pa.schema(fields)
    r = dict(row)
    r["time_hour"] = datetime.fromisoformat(r["time_hour"].replace("Z", "+00:00"))
    tbl = pa.Table.from_pylist([r], schema=schema)
    if "--keep" not in sys.argv[4:]:
        shutil.rmtree(path, ignore_errors=True)
        write_deltalake(path, tbl, mode="append")  # version 0, untimed
    t = time.perf_counter()
    for _ in range(n):
        write_deltalake(path, tbl, mode="append")
    print(f"{(time.perf_counter() - t) / n:.6f}")


if __name__ == "__main__":
    main()
