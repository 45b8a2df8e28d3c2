#!/usr/bin/env python3
"""Interleaved timings for scripts/bench: `alt.py RUNS WARM NAME PREPARE CMD [NAME PREPARE CMD ...]`.

Runs the commands in turn, round after round (WARM untimed rounds, then RUNS timed ones), each
after its PREPARE (a shell command, untimed; "" for none), so that a figure and its baseline
share the machine's load from one moment to the next (the machine is shared: a figure measured
a minute after its baseline can differ by 2x). Each CMD runs under `bash -c`; the median time of
`bash -c true` is subtracted. Prints one line per NAME: the median in seconds.
"""
import statistics
import subprocess
import sys
import time


def timed(cmd):
    t = time.perf_counter()
    subprocess.run(["bash", "-c", cmd], check=True)
    return time.perf_counter() - t


def main():
    runs, warm = int(sys.argv[1]), int(sys.argv[2])
    rest = sys.argv[3:]
    if len(rest) % 3:
        sys.exit("alt.py: arguments after RUNS WARM come in threes: NAME PREPARE CMD")
    figs = [rest[i:i + 3] for i in range(0, len(rest), 3)]
    shell = [timed("true") for _ in range(max(runs, 5))]
    times = {name: [] for name, _, _ in figs}
    for r in range(warm + runs):
        for name, prepare, cmd in figs:
            if prepare:
                subprocess.run(["bash", "-c", prepare], check=True)
            t = timed(cmd)
            if r >= warm:
                times[name].append(t)
    base = statistics.median(shell)
    for name, _, _ in figs:
        print(name, max(statistics.median(times[name]) - base, 0.0))
        print(name, " ".join(f"{t:.6f}" for t in times[name]), file=sys.stderr)


if __name__ == "__main__":
    main()
