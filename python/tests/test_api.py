"""The library from Python: versions, time travel, table operations, errors (docs/PYTHON.md)."""

import pathlib

import pytest

import tinydelta
from conftest import PYTHON_DIR

ROWS = [{"id": 1, "region": "EU", "year": 2024}, {"id": 2, "region": "US", "year": 2025}]
OTHER = [{"id": 9, "region": "APAC", "year": 2026}]


def test_versions_and_time_travel(table_path):
    t = tinydelta.create(table_path, "id:int! region:str year:int")
    assert t.version == 0
    assert t.append(ROWS) == 1
    assert t.overwrite(OTHER) == 2
    assert t.version == 2
    assert t.read() == OTHER
    assert t.read(version=1) == ROWS
    assert t.read(version=0) == []
    assert t.read(as_of="2999-01-01T00:00:00Z") == OTHER
    with pytest.raises(tinydelta.NotFoundError):
        t.read(as_of="1970-01-01T00:00:00Z")
    d = t.describe()
    assert d["version"] == 2 and d["rows"] == 1
    assert [c["name"] for c in d["schema"]] == ["id", "region", "year"]
    assert t.describe(1)["rows"] == 2
    h = t.history()
    assert [e["version"] for e in h] == [0, 1, 2]
    assert t.restore(1) == 3
    assert t.read() == ROWS


def test_schema_as_mapping_and_reopen(table_path):
    tinydelta.create(table_path, {"id": "int!", "region": "str"})
    t = tinydelta.Table(table_path)
    t.append([{"id": 1, "region": "EU"}])
    assert tinydelta.open(str(table_path)).read() == [{"id": 1, "region": "EU"}]
    assert t.read(columns=["region"]) == [{"region": "EU"}]
    assert t.read(where="id = 2") == []


def test_operations(table_path, tmp_path):
    t = tinydelta.create(table_path, "id:int! region:str year:int")
    for r in ROWS:
        t.append([r])
    assert t.optimize()["version"] == 3
    assert t.check()["whole"] is True
    r = t.update({"year": "year + 1"}, "id = 1")
    assert r["version"] == 4
    assert t.read(where="id = 1")[0]["year"] == 2025
    assert t.delete("id = 2")["version"] == 5
    m = t.merge([{"id": 1, "region": "XX", "year": 1}, {"id": 3, "region": "YY", "year": 3}], on="id")
    assert m["version"] == 6
    assert sorted(r["id"] for r in t.read()) == [1, 3]
    ch = t.changes(from_version=5)
    assert ch, "the change feed of versions 5-6 has rows"
    v = t.vacuum(dry_run=True)
    assert v["dryRun"] is True
    e = t.export(tmp_path / "exported")
    assert e["rows"] == 2


def test_table_not_found(tmp_path):
    with pytest.raises(tinydelta.TableNotFoundError) as e:
        tinydelta.Table(tmp_path / "nothing")
    assert isinstance(e.value, tinydelta.NotFoundError)
    assert isinstance(e.value, tinydelta.TinyDeltaError)
    assert e.value.file.endswith("nothing")


def test_version_not_found(table_path):
    t = tinydelta.create(table_path, "id:int")
    with pytest.raises(tinydelta.VersionNotFoundError) as e:
        t.read(version=7)
    assert e.value.version == 7


def test_bad_schema(table_path):
    with pytest.raises(tinydelta.SchemaError):
        tinydelta.create(table_path, "id:integer")


def test_bad_rows_name_line_and_column(table_path):
    t = tinydelta.create(table_path, "id:int! region:str year:int")
    with pytest.raises(tinydelta.BadInputError) as e:
        t.append([ROWS[0], {"id": 2, "region": "US", "year": "2025"}])
    assert (e.value.file, e.value.line, e.value.column) == ("<rows>", 2, "year")
    assert t.version == 0, "nothing was committed"


def test_bad_jsonl_file_names_it(table_path):
    t = tinydelta.create(table_path, "id:int! region:str year:int amount:float ordered:date")
    bad = PYTHON_DIR.parent / "examples" / "orders-bad.jsonl"
    with pytest.raises(tinydelta.BadInputError) as e:
        t.append(bad)
    assert e.value.file == str(bad)
    assert (e.value.line, e.value.column) == (2, "year")
    assert str(bad) in str(e.value)


def test_a_csv_file_gets_the_clis_hint(table_path, tmp_path):
    t = tinydelta.create(table_path, "id:int! region:str")
    csv = tmp_path / "orders.csv"
    csv.write_text("id,region\n1,EU\n")
    with pytest.raises(tinydelta.BadInputError) as e:
        t.append(csv)
    assert (e.value.file, e.value.line) == (str(csv), 1)
    msg = str(e.value)
    assert "CSV header" in msg and "duckdb -c" in msg and "orders.csv" in msg, msg
    with pytest.raises(tinydelta.BadInputError) as e:
        t.append(b'[{"id": 1, "region": "EU"}]\n')
    assert "jq -c" in str(e.value), str(e.value)
    assert t.version == 0, "nothing was committed"


def test_history_names_the_source(table_path):
    t = tinydelta.create(table_path, "id:int!")
    t.append([{"id": 1}])
    h = t.history()
    assert [e["source"] for e in h] == [None, None]


def test_unknown_column_is_a_schema_error(table_path):
    t = tinydelta.create(table_path, "id:int")
    with pytest.raises(tinydelta.SchemaError) as e:
        t.append([{"id": 1, "zz": 2}])
    assert e.value.column == "zz" and e.value.line == 1
    assert isinstance(e.value, tinydelta.BadInputError)


def test_read_of_a_bad_version_number_raises(table_path):
    t = tinydelta.create(table_path, "id:int")
    with pytest.raises(tinydelta.NotFoundError):
        t.to_arrow(version=3)


def test_stub_and_marker_ship():
    pkg = pathlib.Path(tinydelta.__file__).parent
    assert (pkg / "py.typed").exists()
    assert (pkg / "__init__.pyi").exists()


def test_messages_name_keyword_arguments_not_cli_flags(table_path, tmp_path):
    t = tinydelta.create(table_path, "id:int! region:str year:int")
    t.append(ROWS)
    with pytest.raises(tinydelta.InvalidArgumentError) as e:
        t.vacuum("0s")
    assert "pass force=True" in str(e.value) and 'retain="0 seconds"' in str(e.value), str(e.value)
    assert "--" not in str(e.value), str(e.value)
    with pytest.raises(tinydelta.InvalidArgumentError) as e:
        t.read(where="nope = 1")
    assert str(e.value).startswith("where= "), str(e.value)
    with pytest.raises(tinydelta.InvalidArgumentError) as e:
        t.update({"year": "nope"}, "id = 1")
    assert str(e.value).startswith("set= "), str(e.value)
    with pytest.raises(tinydelta.InvalidArgumentError) as e:
        t.merge([{"id": 1, "region": "EU", "year": 1}], on="nope")
    assert str(e.value).startswith("on= no column"), str(e.value)
    with pytest.raises(tinydelta.InvalidArgumentError) as e:
        t.changes(from_version=1, to_version=0)
    assert str(e.value) == "from_version=1 is after to_version=0", str(e.value)
    t.export(tmp_path / "exported")
    with pytest.raises(tinydelta.TinyDeltaError) as e:
        t.export(tmp_path / "exported", all_versions=True)
    assert "without all_versions=True" in str(e.value), str(e.value)


def test_the_python_command_line_names_flags(table_path):
    import subprocess
    import sys

    tinydelta.create(table_path, "id:int! region:str year:int")
    r = subprocess.run(
        [sys.executable, "-m", "tinydelta", "vacuum", str(table_path), "--retain", "0s"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2, r.stderr
    assert "pass --force" in r.stderr and "--retain 0 seconds" in r.stderr, r.stderr


def test_export_of_an_older_version_counts_the_rows_dest_holds(table_path, tmp_path):
    t = tinydelta.create(table_path, "id:int! region:str year:int")
    t.append(ROWS)
    t.append(OTHER)
    first = t.export(tmp_path / "dest")
    assert (first["rows"], first["rowsHeld"]) == (3, 3)
    back = t.export(tmp_path / "dest", version=1)
    assert (back["rows"], back["rowsHeld"], back["sourceVersion"]) == (0, 2, 1)
