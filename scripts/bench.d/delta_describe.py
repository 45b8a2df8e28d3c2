#!/usr/bin/env python3
"""Figure 8 baseline: `deltalake` loads a table and lists its files.

Usage: delta_describe.py TABLE_DIR RUNS

Imports deltalake once (untimed), then RUNS times: DeltaTable(path).version() plus its file list
(file_uris()); prints one line of seconds per run. A fresh DeltaTable each run: no state is reused.
"""
import sys
import time

from deltalake import DeltaTable


def main():
    path, runs = sys.argv[1], int(sys.argv[2])
    for _ in range(runs):
        t = time.perf_counter()
        dt = DeltaTable(path)
        v = dt.version()
        files = dt.file_uris()
        el = time.perf_counter() - t
        assert v >= 0 and len(files) > 0
        print(f"{el:.6f}", flush=True)


if __name__ == "__main__":
    main()
