#!/usr/bin/env python3
"""The durable-commit floor for scripts/bench: `durable_floor.py DIR COUNT ROWFILE`.

COUNT times: write ROWFILE's bytes to a new file in DIR, fsync it, link it to its final name,
fsync DIR (what any durable, atomic publish of a small file costs on this disk: the least a
one-row commit can cost). Prints the median seconds per commit; DIR is emptied first.
"""
import os
import statistics
import sys
import time


def main():
    d, count, rowfile = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    os.makedirs(d, exist_ok=True)
    for n in os.listdir(d):
        os.unlink(os.path.join(d, n))
    row = open(rowfile, "rb").read()
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    times = []
    for i in range(count):
        t0 = time.perf_counter()
        tmp = os.path.join(d, f".tmp-{i}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, row)
        os.fsync(fd)
        os.close(fd)
        os.link(tmp, os.path.join(d, f"{i:020}.json"))
        os.fsync(dfd)
        times.append(time.perf_counter() - t0)
        os.unlink(tmp)
    os.close(dfd)
    print(statistics.median(times))


if __name__ == "__main__":
    main()
