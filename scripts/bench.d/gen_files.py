#!/usr/bin/env python3
"""Write a tinydelta table with FILES live data files in commits of PER_COMMIT adds each,
without going through the CLI.

Usage: gen_files.py TEMPLATE_TABLE OUT_TABLE FILES PER_COMMIT

TEMPLATE_TABLE is a real table made by `tinydelta create` + one `tinydelta append` of one row.
OUT_TABLE gets TEMPLATE's version 0 byte for byte (protocol, metaData), then versions
1..ceil(FILES / PER_COMMIT), each the template's version 1 commitInfo (its timestamp strictly
increasing, readVersion, numFiles/numOutputRows/numOutputBytes scaled) followed by PER_COMMIT
copies of the template's add line (the last commit may hold fewer), each with its own
part-<n>-<uuid>.jsonl path and modificationTime. Every part file is a hard link to one copy of the
template's one-row part file (a new copy every 60,000 links, below ext4's per-inode link limit),
so every version reads, and reads FILES rows at the newest. No fsyncs: generation only, not a
commit path.
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
    if len(sys.argv) != 5:
        sys.exit("usage: gen_files.py TEMPLATE_TABLE OUT_TABLE FILES PER_COMMIT")
    tpl, out, files, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    assert files > 0 and per > 0
    log_in = os.path.join(tpl, "_delta_log")
    with open(os.path.join(log_in, f"{1:020}.json"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    actions = [json.loads(l) for l in lines]
    for l, a in zip(lines, actions):
        assert dumps(a) == l, "template commit does not round-trip byte for byte"
    assert [next(iter(a)) for a in actions] == ["commitInfo", "add"], [list(a) for a in actions]
    ci, add = actions[0]["commitInfo"], actions[1]["add"]
    rows = json.loads(add["stats"])["numRecords"] if add.get("stats") else 1
    src_part = os.path.join(tpl, add["path"])

    if os.path.exists(out):
        shutil.rmtree(out)
    log_out = os.path.join(out, "_delta_log")
    os.makedirs(log_out)
    shutil.copyfile(os.path.join(log_in, f"{0:020}.json"), os.path.join(log_out, f"{0:020}.json"))
    with open(os.path.join(log_in, f"{0:020}.json"), encoding="utf-8") as f:
        v0_ts = json.loads(f.readline())["commitInfo"]["timestamp"]
    base_ts = max(ci["timestamp"], v0_ts + 1)

    inode_src = None
    done = 0
    v = 0
    while done < files:
        v += 1
        n = min(per, files - done)
        ts = base_ts + v - 1
        ci["timestamp"] = ts
        ci["readVersion"] = v - 1
        metrics = ci.get("operationMetrics") or {}
        for key, value in (("numFiles", n), ("numOutputRows", n * rows), ("numOutputBytes", n * add["size"])):
            if key in metrics:
                metrics[key] = str(value)
        parts = [dumps({"commitInfo": ci})]
        for i in range(n):
            k = done + i
            if k % LINKS_PER_INODE == 0:
                name = f"part-{k:07}-{uuid.uuid4()}.jsonl"
                inode_src = os.path.join(out, name)
                shutil.copyfile(src_part, inode_src)
            else:
                name = f"part-{k:07}-{uuid.uuid4()}.jsonl"
                os.link(inode_src, os.path.join(out, name))
            add["path"] = name
            add["modificationTime"] = ts
            parts.append(dumps({"add": add}))
        with open(os.path.join(log_out, f"{v:020}.json"), "w", encoding="utf-8") as f:
            f.write("\n".join(parts) + "\n")
        done += n
    print(f"generated {out}: versions 0..{v}, {files} live files ({per} adds per commit), written directly, not via the CLI")


if __name__ == "__main__":
    main()
