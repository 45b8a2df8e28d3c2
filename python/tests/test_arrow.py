"""Inputs through the Arrow PyCapsule interface and outputs to pyarrow, polars, DuckDB and
pandas (docs/PYTHON.md "Inputs" and "Outputs")."""

import datetime
import subprocess
import sys

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import tinydelta

SCHEMA = "id:int! region:str year:int amount:float day:date"
ROWS = [
    {"id": 1, "region": "EU", "year": 2024, "amount": 1.5, "day": "2024-01-02"},
    {"id": 2, "region": None, "year": 2025, "amount": None, "day": None},
]


@pytest.fixture
def t(table_path):
    return tinydelta.create(table_path, SCHEMA)


def arrow_table():
    return pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "region": ["EU", None],
            "year": pa.array([2024, 2025], pa.int32()),
            "amount": [1.5, None],
            "day": pa.array([datetime.date(2024, 1, 2), None], pa.date32()),
        }
    )


def test_input_dicts(t):
    assert t.append(ROWS) == 1
    assert t.read() == ROWS


def test_input_jsonl_path_and_bytes(t, tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text("".join(__import__("json").dumps(r) + "\n" for r in ROWS))
    assert t.append(p) == 1
    assert t.append(str(p)) == 2
    assert t.append(p.read_bytes()) == 3
    assert t.read() == ROWS * 3


def test_input_pyarrow_table_and_reader(t):
    assert t.append(arrow_table()) == 1
    reader = pa.RecordBatchReader.from_batches(arrow_table().schema, arrow_table().to_batches())
    assert t.append(reader) == 2
    assert t.read() == ROWS * 2


def test_input_pandas(t):
    df = pd.DataFrame(
        {
            "id": [1, 2],
            "region": ["EU", None],
            "year": [2024, 2025],
            "amount": [1.5, None],
            "day": [datetime.date(2024, 1, 2), None],
        }
    )
    assert t.append(df) == 1
    assert t.read() == ROWS


def test_input_polars(t):
    df = pl.DataFrame(
        {
            "id": [1, 2],
            "region": ["EU", None],
            "year": [2024, 2025],
            "amount": [1.5, None],
            "day": [datetime.date(2024, 1, 2), None],
        }
    )
    assert t.append(df) == 1
    assert t.read() == ROWS


def test_arrow_input_errors_name_row_and_column(t):
    bad = pa.table({"id": [1, 2, 3], "year": ["x", "y", "z"]})
    with pytest.raises(tinydelta.BadInputError) as e:
        t.append(bad)
    assert (e.value.file, e.value.line, e.value.column) == ("<arrow>", 1, "year")
    nulls = pa.table({"id": pa.array([1, None], pa.int64())})
    with pytest.raises(tinydelta.BadInputError) as e:
        t.append(nulls)
    assert (e.value.line, e.value.column) == (2, "id")
    with pytest.raises(tinydelta.SchemaError) as e:
        t.append(pa.table({"id": [1], "nope": [1]}))
    assert e.value.column == "nope"
    assert t.version == 0


def test_outputs(t):
    t.append(ROWS)
    x = t.to_arrow()
    tab = pa.table(x)
    assert tab.num_rows == 2
    assert tab.schema.field("id").type == pa.int64()
    assert tab.schema.field("day").type == pa.date32()
    assert tab.to_pylist()[0] == {**ROWS[0], "day": datetime.date(2024, 1, 2)}
    assert pa.RecordBatchReader.from_stream(x).read_all().num_rows == 2
    df = pl.DataFrame(t.to_arrow())
    assert df["id"].to_list() == [1, 2]
    assert pl.from_arrow(pa.table(t.to_arrow()))["region"].to_list() == ["EU", None]
    rel = duckdb.sql("select sum(id) as s, count(*) as n from x")
    assert rel.fetchall() == [(3, 2)]
    pdf = t.to_pandas()
    assert list(pdf["id"]) == [1, 2]
    assert t.to_pandas(version=0).shape == (0, 5)


def test_to_arrow_of_a_multi_file_table_streams_batches(table_path):
    t = tinydelta.create(table_path, "id:int! pad:str")
    per_file = 20_000
    for f in range(3):
        rows = b"".join(b'{"id":%d,"pad":"x"}\n' % (f * per_file + i) for i in range(per_file))
        t.append(rows)
    assert t.describe()["numFiles"] == 3
    reader = pa.RecordBatchReader.from_stream(t.to_arrow())
    sizes = [b.num_rows for b in reader]
    assert sum(sizes) == 3 * per_file
    assert max(sizes) <= 8192, sizes
    assert len(sizes) >= 9, sizes  # each file in batches of at most 8192 rows


def test_to_arrow_memory_is_bounded(table_path):
    """Reading ~98 MB of rows batch by batch keeps the peak RSS growth to a few batches (8192
    rows of ~1 KB are ~8 MB; the builders and the consumer's batch hold a few of them), far
    below the version's size."""
    t = tinydelta.create(table_path, "id:int! pad:str")
    pad = "p" * 1000
    for f in range(4):
        t.append(b"".join(b'{"id":%d,"pad":"%s"}\n' % (i, pad.encode()) for i in range(24_000)))
    size = t.describe()["bytes"]
    assert size > 90_000_000
    code = (
        "import sys, pyarrow as pa, tinydelta\n"
        "def hwm():\n"
        "    for l in open('/proc/self/status'):\n"
        "        if l.startswith('VmHWM:'): return int(l.split()[1]) * 1024\n"
        "t = tinydelta.Table(sys.argv[1]); x = t.to_arrow()\n"
        "base = hwm(); n = 0\n"
        "for b in pa.RecordBatchReader.from_stream(x): n += b.num_rows\n"
        "print(n, hwm() - base)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(table_path)], capture_output=True, text=True, check=True)
    rows, grew = map(int, out.stdout.split())
    assert rows == 96_000
    assert grew < 40 << 20, f"peak RSS grew {grew} bytes reading {size} bytes"


def test_a_json_column_round_trips_through_arrow(table_path, tmp_path):
    # to_arrow gives a json column as its canonical text; append takes that text back.
    src = tinydelta.create(table_path, "id:int! doc:json")
    rows = [{"id": 1, "doc": {"a": [1, 2.5, None], "b": {"c": "x"}}}, {"id": 2, "doc": None}, {"id": 3, "doc": "s"}]
    src.append(rows)
    copy = tinydelta.create(str(tmp_path / "copy"), "id:int! doc:json")
    assert copy.append(src.to_arrow()) == 1
    assert copy.read() == src.read() == rows
    bad = pa.table({"id": pa.array([1, 2], pa.int64()), "doc": ["[1]", "{not json"]})
    with pytest.raises(tinydelta.BadInputError) as e:
        copy.append(bad)
    assert e.value.line == 2 and e.value.column == "doc", e.value
    assert "not JSON" in str(e.value)
    assert copy.describe()["version"] == 1


def test_decimals_from_dicts_keep_every_digit(table_path):
    import decimal

    t = tinydelta.create(table_path, "id:int! price:decimal(38,18) small:decimal(10,9)")
    big = decimal.Decimal("12345678901234567890.123456789012345678")
    tiny = decimal.Decimal("1E-9")
    assert float(big) == float(decimal.Decimal("12345678901234567890.123456789012345677"))  # a float loses them
    t.append([{"id": 1, "price": big, "small": tiny}, {"id": 2, "price": decimal.Decimal("-0.5"), "small": None}])
    # to_arrow gives decimal128 values: the exact digits that were written.
    got = pa.table(t.to_arrow()).to_pylist()
    assert [(r["price"], r["small"]) for r in got] == [(big, tiny), (decimal.Decimal("-0.5"), None)], got
    with pytest.raises(ValueError):
        t.append([{"id": 3, "price": decimal.Decimal("NaN"), "small": None}])


def test_pandas_int_column_with_a_missing_value(t):
    # pandas holds it as float64 with NaN: whole floats are the integers, NaN is null.
    df = pd.DataFrame({"id": [1, 2], "year": [2024, None]})
    assert df["year"].dtype == "float64"
    assert t.append(df) == 1
    assert [r["year"] for r in t.read()] == [2024, None]
    with pytest.raises(tinydelta.BadInputError) as e:
        t.append(pd.DataFrame({"id": [3, 4], "year": [2024.0, 2024.5]}))
    assert (e.value.line, e.value.column) == (2, "year"), e.value
    assert "not a whole number" in str(e.value)
    with pytest.raises(tinydelta.BadInputError) as e:
        t.append(pd.DataFrame({"id": [5.0, float("nan")]}))  # id is NOT NULL
    assert (e.value.line, e.value.column) == (2, "id"), e.value
    with pytest.raises(tinydelta.BadInputError) as e:
        t.append(pa.table({"id": [1], "region": [1.5]}))
    assert "Arrow type Float64 does not hold a str column" in str(e.value), e.value
    assert t.version == 1
