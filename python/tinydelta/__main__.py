"""``python -m tinydelta``: the original package's command lines, over the Python API.

    python -m tinydelta create ./orders id:int region:str year:int
    python -m tinydelta append ./orders --file examples/orders.jsonl
    python -m tinydelta read ./orders --version 1
    python -m tinydelta describe ./orders
    python -m tinydelta history ./orders
    python -m tinydelta restore ./orders --version 1
    python -m tinydelta vacuum ./orders

Exit statuses as ``tinydelta`` (docs/CLI.md "Usage"): 0 ok, 1 error, 2 usage, 3 conflict,
4 not found, 5 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

import tinydelta as td


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _rows_of(args: argparse.Namespace) -> object:
    if args.file:
        return args.file
    return sys.stdin.buffer.read()


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _rows_added(t: td.Table, v: int) -> int:
    for e in t.history():
        if e["version"] == v:
            return e.get("rows") or 0
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tinydelta", description="tinydelta tables of JSONL rows")
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("create", help="create a table: version 0")
    c.add_argument("table")
    c.add_argument("columns", nargs="+", help="NAME:TYPE, e.g. id:int! region:str")

    for name in ("append", "overwrite"):
        w = sub.add_parser(name, help=f"{name} JSONL rows (from --file or stdin)")
        w.add_argument("table")
        w.add_argument("--file")
        w.add_argument("--expect-version", type=int)
        w.add_argument("--json", action="store_true")

    r = sub.add_parser("read", help="print a version's rows as JSONL")
    r.add_argument("table")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--version", type=int)
    g.add_argument("--as-of")
    r.add_argument("--where")
    r.add_argument("--columns")
    r.add_argument("--limit", type=int)

    d = sub.add_parser("describe", help="a version's schema, files, rows")
    d.add_argument("table")
    d.add_argument("--version", type=int)
    d.add_argument("--json", action="store_true")

    h = sub.add_parser("history", help="every version")
    h.add_argument("table")
    h.add_argument("--json", action="store_true")

    rs = sub.add_parser("restore", help="commit an old version's rows as a new version")
    rs.add_argument("table")
    rs.add_argument("--version", type=int, required=True)
    rs.add_argument("--expect-version", type=int)

    v = sub.add_parser("vacuum", help="delete leftovers and expired data files")
    v.add_argument("table")
    v.add_argument("--retain")
    v.add_argument("--older-than")
    v.add_argument("--force", action="store_true")
    v.add_argument("--dry-run", action="store_true")
    v.add_argument("--json", action="store_true")

    o = sub.add_parser("optimize", help="compact small data files")
    o.add_argument("table")
    o.add_argument("--target-size")
    o.add_argument("--expect-version", type=int)

    k = sub.add_parser("check", help="is the table whole?")
    k.add_argument("table")
    k.add_argument("--deep", action="store_true")
    k.add_argument("--repair", action="store_true")
    k.add_argument("--json", action="store_true")

    ch = sub.add_parser("changes", help="the change data feed as JSONL")
    ch.add_argument("table")
    ch.add_argument("--from-version", type=int)
    ch.add_argument("--to-version", type=int)

    e = sub.add_parser("export", help="export as a Delta table of Parquet files")
    e.add_argument("table")
    e.add_argument("dest")
    e.add_argument("--version", type=int)
    e.add_argument("--all-versions", action="store_true")

    dl = sub.add_parser("delete", help="delete the rows matching --where")
    dl.add_argument("table")
    dl.add_argument("--where", required=True)
    dl.add_argument("--expect-version", type=int)

    u = sub.add_parser("update", help="update the rows matching --where")
    u.add_argument("table")
    u.add_argument("--set", action="append", required=True)
    u.add_argument("--where", required=True)
    u.add_argument("--expect-version", type=int)
    return p


def run(args: argparse.Namespace) -> None:
    cmd = args.cmd
    if cmd == "create":
        td.create(args.table, args.columns)
        _out(f"created table {args.table} at version 0: {' '.join(args.columns)}")
        return
    t = td.Table(args.table)
    if cmd in ("append", "overwrite"):
        rows = _rows_of(args)
        if cmd == "append":
            v = t.append(rows, expect_version=args.expect_version)
        else:
            v = t.overwrite(rows, expect_version=args.expect_version)
        if args.json:
            _out(json.dumps({"table": args.table, "committed": v is not None, "version": v}))
        elif v is None:
            _out(f"no rows in {args.file or '<stdin>'}; nothing committed to {args.table}")
        elif cmd == "append":
            _out(f"appended {_count(_rows_added(t, v), 'row', 'rows')} to {args.table} as version {v}")
        else:
            _out(f"overwrote {args.table} with {_count(_rows_added(t, v), 'row', 'rows')} as version {v}")
    elif cmd == "read":
        v = t._version(args.version, args.as_of)
        cols = args.columns.split(",") if args.columns else None
        data = t._t.read_jsonl(v, cols, args.where, args.limit)
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
    elif cmd == "describe":
        d = t.describe(args.version)
        if args.json:
            _out(json.dumps(d))
        else:
            ranges = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in d["readableVersions"])
            _out(
                f"table:   {args.table}\nversion: {d['version']}\ntime:    {d['time']}\n"
                f"schema:  {d['schemaCli']}\nfiles:   {d['numFiles']}\nrows:    {d['rows']}\n"
                f"bytes:   {d['bytes']}\nreadable versions: {ranges}"
            )
    elif cmd == "history":
        h = t.history()
        if args.json:
            _out(json.dumps(h))
        else:
            w = max([10] + [len(e["operation"]) for e in h])
            _out(f"{'VERSION':<8} {'TIME':<24} {'OPERATION':<{w}} {'ROWS':>10} {'TABLE_ROWS':>12}")
            for e in h:
                rows = "?" if e["rows"] is None else e["rows"]
                table_rows = "?" if e["tableRows"] is None else e["tableRows"]
                _out(f"{e['version']:<8} {e['time']:<24} {e['operation']:<{w}} {rows:>10} {table_rows:>12}")
    elif cmd == "restore":
        v = t.restore(args.version, expect_version=args.expect_version)
        _out(f"restored {args.table} to version {args.version} as version {v}")
    elif cmd == "vacuum":
        r = t.vacuum(args.retain, older_than=args.older_than, force=args.force, dry_run=args.dry_run)
        if args.json:
            _out(json.dumps(r))
            return
        verb = "would delete" if args.dry_run else "deleted"
        if r["dataKept"]:
            _out(f"kept every data file: {r['dataKept']}")
        for f in r["files"]:
            _out(f"{verb} {f['path']} ({_count(f['size'], 'byte', 'bytes')})")
        _out(
            f"{verb} {_count(r['numFiles'], 'file', 'files')} ({_count(r['sizeBytes'], 'byte', 'bytes')}) "
            f"from {args.table}; {r['numExpiredDataFiles']} of them data files removed more than {r['retention']} ago"
            + (
                f" and {_count(r['numExpiredChangeDataFiles'], 'change data file', 'change data files')} "
                "written that long ago"
                if r["numExpiredChangeDataFiles"]
                else ""
            )
        )
        if r["vacuumStartVersion"] is not None:
            _out(
                f"recorded as VACUUM START version {r['vacuumStartVersion']} "
                f"and VACUUM END version {r['vacuumEndVersion']}"
            )
    elif cmd == "optimize":
        r = t.optimize(args.target_size, expect_version=args.expect_version)
        if r["version"] is None:
            _out(f"nothing to optimize in {args.table} ({_count(r['filesAfter'], 'file', 'files')} live)")
        else:
            _out(
                f"optimized {args.table}: {_count(r['removedFiles'], 'file', 'files')} into "
                f"{r['addedFiles']} as version {r['version']}; {_count(r['filesAfter'], 'file', 'files')} live"
            )
    elif cmd == "check":
        r = t.check(args.deep, args.repair)
        if args.json:
            _out(json.dumps(r))
        else:
            for p in r["problems"]:
                _out(f"{p.get('severity', 'problem')}: {p.get('message')} (what to do: {p.get('hint')})")
            state = "whole" if r["whole"] else "damaged"
            _out(f"{args.table}: {state}, versions up to {r['readableThrough']}")
        if not r["whole"]:
            raise SystemExit(1)
    elif cmd == "changes":
        for c in t.changes(args.from_version, args.to_version):
            _out(json.dumps(c, separators=(",", ":")))
    elif cmd == "export":
        r = t.export(args.dest, args.version, args.all_versions)
        _out(
            f"exported {args.table} version {r['sourceVersion']} into {args.dest}: it holds "
            f"{_count(r['rowsHeld'], 'row', 'rows')} ({_count(r['rows'], 'row', 'rows')} written)"
        )
    elif cmd == "delete":
        r = t.delete(args.where, expect_version=args.expect_version)
        _out(_change_line(args.table, r))
    elif cmd == "update":
        r = t.update(args.set, args.where, expect_version=args.expect_version)
        _out(_change_line(args.table, r))


def _change_line(table: str, r: dict) -> str:
    if r["version"] is None:
        return f"nothing committed to {table} ({r['reason']})"
    return f"{r['operation']} {table} as version {r['version']}: {json.dumps(r['metrics'])}"


_EXIT = {
    td.ConcurrentWriteError: 3,
    td.NotFoundError: 4,
    td.BadInputError: 5,
    td.InvalidArgumentError: 2,
}


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    # This command line takes flags, so its messages name flags (`--force`), not keywords.
    td._tinydelta._spell_options_as("cli")
    try:
        run(args)
    except td.TinyDeltaError as e:
        sys.stdout.flush()
        print(f"tinydelta: {e}", file=sys.stderr)
        for cls, code in _EXIT.items():
            if isinstance(e, cls):
                return code
        return 1
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
