#!/usr/bin/env python3
"""Concurrent one-row commits for scripts/bench (figure 7c): `concurrent.py MODE DIR PROCS COUNT ROWFILE`.

PROCS processes start together (after all are forked) and each does COUNT times:
  MODE=mount: write ROWFILE's bytes into a new file DIR/p<P>-<i>.jsonl and close it (DIR is a
              mount's incoming/: each close is one commit);
  MODE=floor: the durable floor of durable_floor.py in its own folder DIR/p<P>: write the bytes
              to a new file, fsync it, link it to its final name, fsync the folder.
Prints the wall time from the start signal until the last process ended, divided by
PROCS * COUNT: seconds per operation of the aggregate. A process that fails fails the run.
"""
import os
import sys
import time


def main():
    mode, d, procs, count, rowfile = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    if mode not in ("mount", "floor"):
        sys.exit(f"concurrent.py: unknown mode {mode}")
    row = open(rowfile, "rb").read()
    start_r, start_w = os.pipe()
    pids = []
    for p in range(procs):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(start_w)
                if mode == "floor":
                    pd = os.path.join(d, f"p{p}")
                    os.makedirs(pd)
                    dfd = os.open(pd, os.O_RDONLY | os.O_DIRECTORY)
                os.read(start_r, 1)
                for i in range(count):
                    if mode == "floor":
                        tmp = os.path.join(pd, f".tmp-{i}")
                        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                        os.write(fd, row)
                        os.fsync(fd)
                        os.close(fd)
                        os.link(tmp, os.path.join(pd, f"{i:020}.json"))
                        os.fsync(dfd)
                        os.unlink(tmp)
                    else:
                        fd = os.open(os.path.join(d, f"p{p}-{i}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                        os.write(fd, row)
                        os.close(fd)
                code = 0
            except OSError as e:
                print(f"concurrent.py: process {p}: {e}", file=sys.stderr)
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(start_r)
    time.sleep(0.2)  # every child is at its read of the start signal
    t0 = time.perf_counter()
    os.write(start_w, b"x" * procs)
    os.close(start_w)
    failed = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    dt = time.perf_counter() - t0
    if failed:
        sys.exit(f"concurrent.py: {failed} of {procs} processes failed")
    print(dt / (procs * count))


if __name__ == "__main__":
    main()
