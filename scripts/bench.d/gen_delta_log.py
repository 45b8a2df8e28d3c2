#!/usr/bin/env python3
"""Write a Delta table of N one-row append commits in the bytes `deltalake` writes, fast.

Usage: gen_delta_log.py TEMPLATE_TABLE OUT_TABLE N

TEMPLATE_TABLE is a real table written by `deltalake` (scripts/bench.d/delta_append.py with one
append: version 0 creates it, version 1 appends one row). OUT_TABLE gets the template's version 0
byte for byte, then versions 1..N, each the template's version 1 with its own timestamp, add
path and modificationTime (every other field as deltalake wrote it); each add names a hard link
to one copy of the template's Parquet part file. No fsyncs and no checkpoints: the caller makes
the last commit with deltalake itself, which writes the checkpoint a deltalake-written table has.
"""
import json
import os
import shutil
import sys
import uuid

LINKS_PER_INODE = 60_000


def main():
    tpl, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    log_in = os.path.join(tpl, "_delta_log")
    with open(os.path.join(log_in, f"{1:020}.json"), encoding="utf-8") as f:
        actions = [json.loads(l) for l in f.read().splitlines() if l]
    kinds = [next(iter(a)) for a in actions]
    assert kinds.count("add") == 1, kinds
    add = next(a["add"] for a in actions if "add" in a)
    ci = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
    src_part = os.path.join(tpl, add["path"])
    base_ts = (ci or {}).get("timestamp", add["modificationTime"]) + 1

    if os.path.exists(out):
        shutil.rmtree(out)
    log_out = os.path.join(out, "_delta_log")
    os.makedirs(log_out)
    shutil.copyfile(os.path.join(log_in, f"{0:020}.json"), os.path.join(log_out, f"{0:020}.json"))
    inode_src = None
    for v in range(1, n + 1):
        name = f"part-00001-{uuid.uuid4()}-c000.snappy.parquet"
        if (v - 1) % LINKS_PER_INODE == 0:
            inode_src = os.path.join(out, name)
            shutil.copyfile(src_part, inode_src)
        else:
            os.link(inode_src, os.path.join(out, name))
        ts = base_ts + v
        add["path"] = name
        add["modificationTime"] = ts
        if ci is not None:
            ci["timestamp"] = ts
            if "readVersion" in ci:
                ci["readVersion"] = v - 1
        with open(os.path.join(log_out, f"{v:020}.json"), "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions))
    print(f"generated {out}: versions 0..{n} ({n} one-row deltalake append commits, written directly)")


if __name__ == "__main__":
    main()
