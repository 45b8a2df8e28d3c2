"""The original package's README example, verbatim, as subprocesses (docs/PYTHON.md
"Command line"). It runs where the original's did, beside its `examples/orders.jsonl`: in a copy
of the repository's `examples/` (whose orders have the original's columns id, region, year)."""

import json
import shutil
import subprocess
import sys

from conftest import PYTHON_DIR

EXAMPLE = """\
python -m tinydelta create ./orders id:int region:str year:int
python -m tinydelta append ./orders --file examples/orders.jsonl
python -m tinydelta read ./orders
python -m tinydelta describe ./orders
python -m tinydelta overwrite ./orders --file examples/orders.jsonl
python -m tinydelta read ./orders --version 1
python -m tinydelta history ./orders
python -m tinydelta restore ./orders --version 1
python -m tinydelta vacuum ./orders
"""


def run(line, cwd):
    argv = line.split()
    assert argv[0] == "python"
    return subprocess.run([sys.executable] + argv[1:], cwd=cwd, capture_output=True, text=True)


def test_readme_example_runs_verbatim(tmp_path):
    shutil.copytree(PYTHON_DIR.parent / "examples", tmp_path / "examples")
    expected_rows = [json.loads(l) for l in (tmp_path / "examples" / "orders.jsonl").read_text().splitlines()]
    outputs = []
    for line in EXAMPLE.splitlines():
        p = run(line, tmp_path)
        assert p.returncode == 0, f"{line}: exit {p.returncode}: {p.stderr}"
        outputs.append(p.stdout)
    create, append, read, describe, overwrite, read_v1, history, restore, vacuum = outputs
    assert "created table ./orders at version 0" in create
    assert append.strip() == "appended 8 rows to ./orders as version 1"
    assert [json.loads(l) for l in read.splitlines()] == expected_rows
    assert "version: 1" in describe and "rows:    8" in describe
    assert overwrite.strip() == "overwrote ./orders with 8 rows as version 2"
    assert [json.loads(l) for l in read_v1.splitlines()] == expected_rows
    ops = [l.split()[2] for l in history.splitlines()[1:]]
    assert ops == ["CREATE", "APPEND", "OVERWRITE"], history
    assert restore.strip() == "restored ./orders to version 1 as version 3"
    assert "from ./orders" in vacuum and "data files removed more than 7 days ago" in vacuum, vacuum
