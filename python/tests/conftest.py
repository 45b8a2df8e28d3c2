"""Shared fixtures: a fresh table folder, and the `tinydelta` binary of this checkout for the
races between Python and the CLI (built by `cargo test --release` before pytest runs)."""

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"


@pytest.fixture
def table_path(tmp_path):
    return tmp_path / "orders"


@pytest.fixture(scope="session")
def cli_bin():
    path = pathlib.Path(os.environ.get("TINYDELTA_BIN", REPO / "target" / "release" / "tinydelta"))
    assert path.is_file(), f"{path} is missing: build it with cargo build --release (scripts/test.sh does)"
    return str(path)
