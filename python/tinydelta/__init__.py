"""tinydelta: Delta-Lake-compatible tables of JSONL files, from Python.

The same Rust library as the ``tinydelta`` command line, bound with PyO3 (docs/PYTHON.md)::

    import tinydelta
    t = tinydelta.create("./orders", "id:int! region:str year:int")
    t.append([{"id": 1, "region": "EU", "year": 2024}])
    t.read()                   # rows of the latest version, as dicts
    t.read(version=1)          # time travel
    pa.table(t.to_arrow())     # Arrow, streamed (pyarrow, polars, DuckDB)

Writes take an iterable of dicts, a JSONL path or bytes, or any object with
``__arrow_c_stream__`` (a pyarrow Table or RecordBatchReader, a pandas or polars DataFrame).
Every write is one commit; a write that lost a race raises :class:`ConcurrentWriteError`.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal as _decimal
import json
import os
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

from . import _tinydelta
from ._tinydelta import (
    ArrowStream,
    BadInputError,
    ConcurrentWriteError,
    InvalidArgumentError,
    NotFoundError,
    SchemaError,
    TableNotFoundError,
    TinyDeltaError,
    VersionNotFoundError,
)

__version__ = _tinydelta.__version__

__all__ = [
    "ArrowStream",
    "BadInputError",
    "ConcurrentWriteError",
    "InvalidArgumentError",
    "NotFoundError",
    "SchemaError",
    "Table",
    "TableNotFoundError",
    "TinyDeltaError",
    "VersionNotFoundError",
    "create",
    "open",
]

SchemaLike = Union[str, Mapping[str, str], Sequence[str]]


def _columns(schema: SchemaLike) -> list:
    """A schema as the CLI's column arguments (``["id:int!", "region:str"]``)."""
    if isinstance(schema, str):
        return schema.split()
    if isinstance(schema, Mapping):
        return [f"{name}:{ty}" for name, ty in schema.items()]
    return [str(c) for c in schema]


def create(path: Union[str, os.PathLike], schema: SchemaLike) -> "Table":
    """Create a table at ``path`` (version 0) and return it.

    ``schema`` is the CLI's column syntax as one string (``"id:int! region:str"``), a mapping
    ``{"id": "int!", "region": "str"}`` or a list of ``NAME:TYPE`` strings. A trailing ``!``
    means NOT NULL. Raises :class:`SchemaError` for a schema that does not parse.
    """
    raw = _tinydelta.create(os.fspath(path), _columns(schema))
    return Table._wrap(raw)


def open(path: Union[str, os.PathLike]) -> "Table":  # noqa: A001 - the package's verb
    """Open the table at ``path`` (same as ``Table(path)``)."""
    return Table(path)


def _json_default(v: Any) -> Any:
    if isinstance(v, _dt.datetime):
        return v.isoformat()
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, _decimal.Decimal):
        raise _HasDecimal
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    raise TypeError(f"{type(v).__name__} is not a JSON value")


class _HasDecimal(Exception):
    """A row holds a ``decimal.Decimal``: encode it with :func:`_exact_json` instead."""


def _exact_json(v: Any) -> str:
    """``v`` as JSON text as ``json.dumps`` writes it, except that a ``Decimal`` is written as its
    exact digits (a JSON number, never through ``float``), so a ``decimal(38,s)`` column gets the
    value the caller holds. NaN and infinities raise ``ValueError`` as ``allow_nan=False`` does."""
    if isinstance(v, _decimal.Decimal):
        if not v.is_finite():
            raise ValueError(f"Out of range decimal values are not JSON compliant: {v}")
        return str(v)
    if isinstance(v, Mapping):
        parts = []
        for k, x in v.items():
            if not isinstance(k, str):
                # json.dumps's own key rules (int, float, bool, None keys become text).
                k = next(iter(json.loads(json.dumps({k: None}))))
            parts.append(json.dumps(k, ensure_ascii=False) + ":" + _exact_json(x))
        return "{" + ",".join(parts) + "}"
    if isinstance(v, (list, tuple, set, frozenset)):
        return "[" + ",".join(_exact_json(x) for x in v) + "]"
    return json.dumps(v, default=_json_default, ensure_ascii=False, allow_nan=False)


def _dict_rows(rows: Iterable[Mapping[str, Any]]) -> bytes:
    out = []
    for r in rows:
        if not isinstance(r, Mapping):
            raise TypeError(f"rows must be dicts, got {type(r).__name__}")
        try:
            out.append(json.dumps(r, default=_json_default, ensure_ascii=False, allow_nan=False))
        except _HasDecimal:
            out.append(_exact_json(r))
        out.append("\n")
    return "".join(out).encode("utf-8")


RowsLike = Union[Iterable[Mapping[str, Any]], str, os.PathLike, bytes, Any]


class Table:
    """An open table. ``Table(path)`` raises :class:`TableNotFoundError` where there is none."""

    __slots__ = ("_t",)

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        self._t = _tinydelta._Table(os.fspath(path))

    @classmethod
    def _wrap(cls, raw: Any) -> "Table":
        t = cls.__new__(cls)
        t._t = raw
        return t

    def __repr__(self) -> str:
        return f"tinydelta.Table({os.fspath(self.path)!r})"

    @property
    def path(self) -> str:
        """The table folder."""
        return os.fspath(self._t.path)

    @property
    def version(self) -> int:
        """The latest version (re-read from the log at each access)."""
        return self._t.latest_version()

    # --- writes ------------------------------------------------------------------------------

    def _write(self, rows: RowsLike, overwrite: bool, expect_version: Optional[int]) -> Optional[int]:
        if isinstance(rows, (bytes, bytearray, memoryview)):
            return self._t.write_jsonl("<bytes>", data=bytes(rows), overwrite=overwrite, expect_version=expect_version)
        if isinstance(rows, (str, os.PathLike)):
            p = os.fspath(rows)
            return self._t.write_jsonl(p, path=p, overwrite=overwrite, expect_version=expect_version)
        stream = getattr(rows, "__arrow_c_stream__", None)
        if stream is not None:
            return self._t.write_arrow(stream(), "<arrow>", overwrite=overwrite, expect_version=expect_version)
        if isinstance(rows, Mapping):
            rows = [rows]
        return self._t.write_jsonl(
            "<rows>", data=_dict_rows(rows), overwrite=overwrite, expect_version=expect_version
        )

    def append(self, rows: RowsLike, *, expect_version: Optional[int] = None) -> Optional[int]:
        """Append ``rows`` as one WRITE/Append commit; returns its version (``None``: no rows).

        ``rows``: an iterable of dicts, a JSONL file path (str or PathLike), JSONL bytes, or an
        object with ``__arrow_c_stream__`` (pyarrow Table/RecordBatchReader, pandas or polars
        DataFrame). With ``expect_version=n`` the commit happens only if the latest version is
        still ``n``; else :class:`ConcurrentWriteError`. Bad rows raise :class:`BadInputError`
        naming ``.file``, ``.line`` (the row, from 1) and ``.column``; nothing is committed.
        """
        return self._write(rows, False, expect_version)

    def overwrite(self, rows: RowsLike, *, expect_version: Optional[int] = None) -> int:
        """Replace all rows with ``rows`` as one WRITE/Overwrite commit; returns its version."""
        v = self._write(rows, True, expect_version)
        assert v is not None
        return v

    # --- reads -------------------------------------------------------------------------------

    def _version(self, version: Optional[int], as_of: Optional[Union[str, _dt.datetime]]) -> int:
        if isinstance(as_of, _dt.datetime):
            if as_of.tzinfo is None:
                as_of = as_of.astimezone()
            as_of = as_of.isoformat()
        return self._t.resolve(version=version, as_of=as_of)

    def read(
        self,
        version: Optional[int] = None,
        as_of: Optional[Union[str, _dt.datetime]] = None,
        *,
        columns: Optional[Sequence[str]] = None,
        where: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> list:
        """The rows of a version (default: the latest) as a list of dicts.

        ``as_of``: the newest version committed at or before a time (RFC 3339, ``"2h ago"``,
        or a datetime). ``columns``, ``where`` (SQL condition) and ``limit`` select as
        ``tinydelta read --columns --where --limit`` does.
        """
        return list(self.iter_rows(version, as_of, columns=columns, where=where, limit=limit))

    def iter_rows(
        self,
        version: Optional[int] = None,
        as_of: Optional[Union[str, _dt.datetime]] = None,
        *,
        columns: Optional[Sequence[str]] = None,
        where: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> Iterator[dict]:
        """The rows of a version as dicts, one at a time."""
        v = self._version(version, as_of)
        data = self._t.read_jsonl(v, list(columns) if columns is not None else None, where, limit)
        for line in data.splitlines():
            if line:
                yield json.loads(line)

    def to_arrow(self, version: Optional[int] = None, as_of: Optional[Union[str, _dt.datetime]] = None) -> ArrowStream:
        """A version's rows as an Arrow stream: an object with ``__arrow_c_stream__`` that
        ``pyarrow.table(x)``, ``pyarrow.RecordBatchReader.from_stream(x)``, ``polars.DataFrame(x)``
        and DuckDB (``duckdb.sql("select * from x")``) read batch by batch (8192 rows), without
        a copy. Each consumer call reads the version anew; the version is fixed here."""
        return self._t.to_arrow(self._version(version, as_of))

    def to_pyarrow(self, version: Optional[int] = None, as_of: Optional[Union[str, _dt.datetime]] = None) -> Any:
        """A version's rows as a ``pyarrow.Table`` (needs pyarrow)."""
        import pyarrow as pa

        return pa.table(self.to_arrow(version, as_of))

    def to_pandas(self, version: Optional[int] = None, as_of: Optional[Union[str, _dt.datetime]] = None) -> Any:
        """A version's rows as a ``pandas.DataFrame`` (needs pandas and pyarrow)."""
        try:
            import pandas  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("to_pandas needs pandas: pip install pandas pyarrow") from e
        return self.to_pyarrow(version, as_of).to_pandas()

    def describe(self, version: Optional[int] = None) -> dict:
        """A version's facts: version, time, schema, rows, bytes, files, readable versions."""
        v = self._t.latest_version() if version is None else version
        return json.loads(self._t.describe(v))

    def history(self) -> list:
        """Every version: version, time, operation, parameters, rows, table rows, source (the mount's incoming/ name, or None)."""
        return json.loads(self._t.history())

    def changes(self, from_version: Optional[int] = None, to_version: Optional[int] = None) -> list:
        """The change data feed: each version's deleted and inserted rows, as dicts."""
        data = self._t.changes(from_version, to_version)
        return [json.loads(line) for line in data.splitlines() if line]

    # --- table operations --------------------------------------------------------------------

    def restore(self, version: int, *, expect_version: Optional[int] = None) -> int:
        """Commit version ``version``'s rows as a new version (RESTORE); returns it."""
        return self._t.restore(version, expect_version)

    def vacuum(
        self,
        retain: Optional[Union[str, float, _dt.timedelta]] = None,
        *,
        older_than: Optional[Union[str, float, _dt.timedelta]] = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> dict:
        """Delete leftovers, and data files removed longer ago than ``retain`` (a duration:
        ``"7d"``, seconds, or a timedelta; below the table's retention needs ``force``)."""
        return json.loads(self._t.vacuum(_duration(retain), _duration(older_than), force, dry_run))

    def optimize(self, target_size: Optional[Union[str, int]] = None, *, expect_version: Optional[int] = None) -> dict:
        """Compact small data files into one OPTIMIZE commit."""
        ts = None if target_size is None else str(target_size)
        return json.loads(self._t.optimize(ts, expect_version))

    def check(self, deep: bool = False, repair: bool = False) -> dict:
        """Is the table whole? ``{"whole": bool, "problems": [...], ...}``."""
        return json.loads(self._t.check(deep, repair))

    def export(self, dest: Union[str, os.PathLike], version: Optional[int] = None, all_versions: bool = False) -> dict:
        """Export as a Delta table of Parquet files at ``dest`` (docs/EXPORT.md)."""
        return json.loads(self._t.export(os.fspath(dest), version, all_versions))

    def delete(self, where: str, *, expect_version: Optional[int] = None) -> dict:
        """DELETE the rows for which the SQL condition ``where`` is true."""
        return json.loads(self._t.delete(where, expect_version))

    def update(
        self, set: Union[Mapping[str, str], Sequence[str], str], where: str, *, expect_version: Optional[int] = None
    ) -> dict:
        """UPDATE: ``set`` maps columns to SQL expressions (``{"year": "year + 1"}``) or is a
        list of ``"COLUMN = EXPRESSION"`` strings."""
        if isinstance(set, str):
            sets = [set]
        elif isinstance(set, Mapping):
            sets = [f"{k} = {v}" for k, v in set.items()]
        else:
            sets = list(set)
        return json.loads(self._t.update(sets, where, expect_version))

    def merge(
        self,
        source: Union[Iterable[Mapping[str, Any]], str, os.PathLike, bytes],
        on: Union[str, Sequence[str]],
        *,
        delete_when: Optional[str] = None,
        ignore_unmatched: bool = False,
        max_source_bytes: Optional[Union[str, int]] = None,
        expect_version: Optional[int] = None,
    ) -> dict:
        """MERGE source rows on the key columns ``on``: matched rows are replaced, others
        inserted (unless ``ignore_unmatched``)."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            name, data = "<bytes>", bytes(source)
        elif isinstance(source, (str, os.PathLike)):
            name = os.fspath(source)
            with builtins_open(name, "rb") as f:
                data = f.read()
        else:
            name, data = "<rows>", _dict_rows(source)
        keys = [on] if isinstance(on, str) else list(on)
        mb = None if max_source_bytes is None else str(max_source_bytes)
        return json.loads(
            self._t.merge(name, data, keys, delete_when, ignore_unmatched, mb, expect_version)
        )


def _duration(d: Optional[Union[str, float, _dt.timedelta]]) -> Optional[str]:
    if d is None or isinstance(d, str):
        return d
    if isinstance(d, _dt.timedelta):
        d = d.total_seconds()
    return f"{int(d * 1000)}ms"


import builtins as _builtins  # noqa: E402

builtins_open = _builtins.open
