#!/usr/bin/env python3
"""Write a tinydelta table of N one-row append commits without going through the CLI.

Usage: gen_log.py TEMPLATE_TABLE OUT_TABLE N

TEMPLATE_TABLE is a real table made by `tinydelta create` + one `tinydelta append` of one row.
OUT_TABLE gets TEMPLATE's version 0 byte for byte, then versions 1..N, each a copy of the
template's version 1 (commitInfo line, then add line, exactly as tinydelta writes them) with
its own timestamp (strictly increasing), readVersion, modificationTime and part-<uuid>.jsonl path.
Every part file is a hard link to one copy of the template's one-row part file (a new copy every
60,000 links, below ext4's per-inode link limit). No fsyncs: generation only, not a commit path.
"""
import json
import os
import shutil
import sys
import uuid

LINKS_PER_INODE = 60_000


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def main():
    tpl, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    log_in = os.path.join(tpl, "_delta_log")
    with open(os.path.join(log_in, f"{1:020}.json"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    actions = [json.loads(l) for l in lines]
    # The generator must reproduce tinydelta's bytes: check the template round-trips exactly.
    for l, a in zip(lines, actions):
        assert dumps(a) == l, "template commit does not round-trip byte for byte"
    assert [next(iter(a)) for a in actions] == ["commitInfo", "add"], [list(a) for a in actions]
    ci, add = actions[0]["commitInfo"], actions[1]["add"]
    src_part = os.path.join(tpl, add["path"])
    base_ts = ci["timestamp"]

    if os.path.exists(out):
        shutil.rmtree(out)
    log_out = os.path.join(out, "_delta_log")
    os.makedirs(log_out)
    shutil.copyfile(os.path.join(log_in, f"{0:020}.json"), os.path.join(log_out, f"{0:020}.json"))
    v0_ts = json.loads(open(os.path.join(log_in, f"{0:020}.json")).readline())["commitInfo"]["timestamp"]
    base_ts = max(base_ts, v0_ts + 1)

    inode_src = None
    for v in range(1, n + 1):
        if (v - 1) % LINKS_PER_INODE == 0:
            inode_src = os.path.join(out, f"part-{uuid.uuid4()}.jsonl")
            shutil.copyfile(src_part, inode_src)
            name = os.path.basename(inode_src)
        else:
            name = f"part-{uuid.uuid4()}.jsonl"
            os.link(inode_src, os.path.join(out, name))
        ts = base_ts + v - 1
        ci["timestamp"] = ts
        ci["readVersion"] = v - 1
        add["path"] = name
        add["modificationTime"] = ts
        with open(os.path.join(log_out, f"{v:020}.json"), "w", encoding="utf-8") as f:
            f.write(dumps({"commitInfo": ci}) + "\n" + dumps({"add": add}) + "\n")
    print(f"generated {out}: versions 0..{n} ({n} one-row append commits, written directly, not via the CLI)")


if __name__ == "__main__":
    main()
