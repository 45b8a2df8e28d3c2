#!/usr/bin/env python3
"""Print scripts/bench's results (a TSV written by its `record` function) as one table.

Columns of the TSV: id, figure, ours, baseline, kind, target, note.
  kind speed|faster: ratio = baseline / ours (higher is better), pass when ratio >= target
                     (target "-": the ratio is reported, no pass or miss)
  kind scale:        ratio = ours / baseline (the cost multiple), pass when ratio <= target
  kind max_mib:      ours is in MiB, pass when ours <= target
  kind max_count:    ours is a count (files), pass when ours <= target
  kind max_s:        ours is seconds, pass when ours <= target (a baseline, when given, is shown
                     with the ratio baseline / ours)
  kind report:       no target
Times are seconds; "-" means not measured.
"""
import sys


def fmt_time(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def num(x):
    try:
        return float(x)
    except ValueError:
        return None


def main():
    rows = []
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(line.rstrip("\n").split("\t"))
    def order(r):
        digits = "".join(c for c in r[0] if c.isdigit())
        return int(digits) if digits else 99
    rows.sort(key=order)  # stable: within a figure, the order they were recorded
    out = [("#", "figure", "median", "baseline median", "ratio", "target", "result")]
    notes = []
    for id_, fig, ours, base, kind, target, note in rows:
        o, b, t = num(ours), num(base), num(target)
        ratio, res = "-", "report"
        if kind in ("speed", "faster"):
            if o and b:
                r = b / o
                ratio = f"{r:.2f}" if kind == "speed" else f"{r:.1f}x faster"
                res = "report" if t is None else "pass" if r >= t else "MISS"
            else:
                res = "n/a"
            tgt = f">= {target}" if kind == "speed" else f">= {target}x faster"
            if t is None:
                tgt = "report"
        elif kind == "scale":
            if o and b:
                r = o / b
                ratio = f"{r:.2f}x cost"
                res = "pass" if r <= t else "MISS"
            else:
                res = "n/a"
            tgt = f"<= {target}x"
        elif kind == "max_mib":
            tgt = f"<= {target} MiB"
            res = ("pass" if o <= t else "MISS") if o is not None else "n/a"
        elif kind == "max_s":
            tgt = f"<= {target} s"
            res = ("pass" if o <= t else "MISS") if o is not None else "n/a"
            if o and b:
                ratio = f"{b / o:.1f}x faster"
        elif kind == "max_count":
            tgt = f"<= {target}"
            res = ("pass" if o <= t else "MISS") if o is not None else "n/a"
        else:
            tgt = "report"
            if o is None:
                res = "n/a"
        if kind == "max_mib":
            o_s = f"{o:.1f} MiB" if o is not None else "-"
            b_s = "-"
        elif kind == "max_count":
            o_s = f"{o:.0f}" if o is not None else "-"
            b_s = "-"
        else:
            o_s, b_s = fmt_time(o), fmt_time(b)
        out.append((id_, fig, o_s, b_s, ratio, tgt, res))
        if note:
            notes.append(f"  [{id_}] {note}")
    widths = [max(len(r[i]) for r in out) for i in range(len(out[0]))]
    for n, r in enumerate(out):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    if notes:
        print("\nnotes:")
        print("\n".join(notes))
    passed = sum(1 for r in out[1:] if r[6] == "pass")
    missed = [r[0] for r in out[1:] if r[6] == "MISS"]
    print(f"\n{passed} pass, {len(missed)} miss" + (f" ({', '.join(missed)})" if missed else ""))


if __name__ == "__main__":
    main()
