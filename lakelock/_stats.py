"""File statistics: what a data file holds, per column, taken from the parquet footer the
writer has just produced (no request), kept in the file's manifest entry, and used to skip
files a scan's filter rules out.

For each top-level column of a primitive type the footer gives its null count and, for the
types below, its bounds; lakelock keeps them in one canonical JSON form, the one the Iceberg
and Delta views translate from (:mod:`lakelock._mirror`):

=====================================  =============================================
Arrow type                             bound as stored
=====================================  =============================================
bool, integers                         the value
float16/32/64                          the value (finite; NaN is never a bound) and,
                                       counted from the rows written, ``nans``
string, large_string, string_view,     the first 16 characters; the upper bound has
dictionary of those                    its last character incremented when cut, as
                                       Iceberg truncates (none if it cannot be)
date32, date64                         days since 1970-01-01
timestamp (any unit, any zone)         microseconds since the epoch (the lower bound
                                       rounded down, the upper up)
=====================================  =============================================

Other types (decimal, binary, time, nested) get a null count only. Row groups are combined:
a bound exists only if every row group has one. What the footer lacks but the rows show is
taken from the rows: a string column's bounds when a row group's bound is over 4 KiB (the
parquet writer then keeps none), a column without a type's null count (all of its rows). So
a file's statistics do not depend on which other rows share it, nor, then, does the digest
of a commit of files lakelock wrote (:mod:`lakelock._digest`).

**Pruning is sound, not maximal.** A file's *guarantee* is a conjunction the file's rows all
satisfy: ``min <= c <= max`` for a column with bounds, no nulls and (floats) no NaN;
``is_null(c)`` for a column that is all null. pyarrow simplifies the scan's filter against it
(the same machinery that prunes partitions), and a file whose filter simplifies to false is
never fetched. A column that has some nulls, or NaNs, contributes nothing: a filter can be
true on a null (``is_null``) or a NaN (``!=``), which the bounds do not describe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakelock._jsonfields import boolean_free_int, obj, text

__all__ = [
    "TRUNCATE",
    "ColumnStats",
    "FileStats",
    "RowFacts",
    "footer_stats",
    "guarantee",
    "stats_from_json",
    "truncate_lower",
    "truncate_upper",
]

#: Characters kept of a string bound (Iceberg's default ``write.metadata.metrics.default``).
TRUNCATE = 16
_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)

Bound = bool | int | float | str


@dataclass(frozen=True)
class ColumnStats:
    """One column of one file: its null count, NaN count (floats), and bounds (canonical
    form, see the module docstring; ``None`` when unknown)."""

    name: str
    nulls: int | None
    nans: int | None = None
    min: Bound | None = None
    max: Bound | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"nulls": self.nulls}
        if self.nans is not None:
            data["nans"] = self.nans
        if self.min is not None:
            data["min"] = self.min
        if self.max is not None:
            data["max"] = self.max
        return data


@dataclass(frozen=True)
class FileStats:
    """The statistics of one file, by column (top-level columns the file stores)."""

    columns: tuple[ColumnStats, ...]

    def column(self, name: str) -> ColumnStats | None:
        return next((c for c in self.columns if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"columns": {c.name: c.to_json() for c in self.columns}}


def stats_from_json(raw: Any) -> FileStats:
    """The one way to read a manifest entry's ``stats`` (wrong types raise ValueError or
    TypeError, which the manifest parser reports as corruption)."""
    columns = obj(obj(raw, "stats")["columns"], "stats columns")
    found = []
    for name, entry in sorted(columns.items()):
        e = obj(entry, f"stats of {name!r}")
        nulls = e.get("nulls")
        nans = e.get("nans")
        found.append(
            ColumnStats(
                name=text(name, "stats column"),
                nulls=None if nulls is None else boolean_free_int(nulls, "nulls", minimum=0),
                nans=None if nans is None else boolean_free_int(nans, "nans", minimum=0),
                min=_bound(e.get("min")),
                max=_bound(e.get("max")),
            )
        )
    return FileStats(tuple(found))


def _bound(raw: Any) -> Bound | None:
    if raw is None or isinstance(raw, bool | int | str):
        return raw
    if isinstance(raw, float) and math.isfinite(raw):
        return raw
    raise TypeError(f"a statistics bound is a JSON scalar, not {raw!r}")


# -- from the footer --------------------------------------------------------------------------


def footer_stats(metadata: Any, table: Any) -> FileStats:
    """The statistics of a file from its parquet ``metadata`` (``pyarrow.parquet.
    FileMetaData``, as the writer returns it) and the ``table`` written (its schema, and the
    NaN count of float columns, which the footer does not keep)."""
    facts = {}
    for field in table.schema:
        data = table.column(field.name)
        facts[field.name] = _Facts(len(data), _nans(field.type, data), _text_bounds(data))
    return _file_stats(metadata, table.schema, facts)


class RowFacts:
    """What a file's statistics need of its rows beyond its footer, gathered batch by
    batch as the file is written (:meth:`add`): each column's rows, NaNs (a float column)
    and least and greatest text (a text column: the footer keeps no bounds for a row group
    whose least or greatest is longer than 4 KiB). :meth:`stats` then gives what
    :func:`footer_stats` gives for the whole table."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._rows = dict.fromkeys(schema.names, 0)
        self._nans: dict[str, int | None] = {f.name: _nans(f.type, None) for f in schema}
        self._least: dict[str, str | None] = dict.fromkeys(schema.names)
        self._greatest: dict[str, str | None] = dict.fromkeys(schema.names)

    def add(self, batch: Any) -> None:
        """Count ``batch`` (a table or record batch of this schema) in."""
        for field in self.schema:
            if _nested(field.type):
                continue
            data = batch.column(field.name)
            self._rows[field.name] += len(data)
            nans = _nans(field.type, data)
            if nans is not None:
                self._nans[field.name] = (self._nans[field.name] or 0) + nans
            bounds = _text_bounds(data)()
            if bounds is not None:
                least, greatest = self._least[field.name], self._greatest[field.name]
                self._least[field.name] = bounds[0] if least is None else min(least, bounds[0])
                self._greatest[field.name] = (
                    bounds[1] if greatest is None else max(greatest, bounds[1])
                )

    def stats(self, metadata: Any) -> FileStats:
        """The file's statistics, from its footer (``metadata``) and the rows added."""
        facts = {}
        for name in self.schema.names:
            least, greatest = self._least[name], self._greatest[name]
            bounds = None if least is None or greatest is None else (least, greatest)
            facts[name] = _Facts(self._rows[name], self._nans[name], lambda b=bounds: b)
        return _file_stats(metadata, self.schema, facts)


@dataclass(frozen=True)
class _Facts:
    rows: int
    nans: int | None
    #: The least and greatest text of a text column's rows (``None``: none, all null, or
    #: not text), computed only when the footer has no bounds.
    text_bounds: Any


def _nans(type_: Any, data: Any) -> int | None:
    """NaNs in ``data`` of a float column (``None`` of another; 0 for no data yet)."""
    if not pa.types.is_floating(_value_type(type_)):
        return None
    return 0 if data is None else int(pc.sum(pc.is_nan(data)).as_py() or 0)


def _text_bounds(data: Any) -> Any:
    """A function giving the least and greatest of a text column's ``data`` (``None`` when
    it is not text or all null)."""
    value_type = _value_type(data.type)

    def bounds() -> tuple[str, str] | None:
        if not _is_text(value_type) or data.null_count >= len(data):
            return None
        least, greatest = pc.min_max(data.cast(value_type).cast(pa.large_string())).values()
        return least.as_py(), greatest.as_py()

    return bounds


def _file_stats(metadata: Any, schema: pa.Schema, facts: dict[str, _Facts]) -> FileStats:
    leaves: dict[str, int] = {}
    parquet_schema = metadata.schema
    for i in range(len(parquet_schema)):
        path = parquet_schema.column(i).path
        if "." not in path:
            leaves[path] = i
    columns = []
    for field in schema:
        index = leaves.get(field.name)
        if index is None or _nested(field.type):
            continue
        columns.append(_column(field, index, metadata, facts[field.name]))
    return FileStats(tuple(columns))


def _nested(type_: Any) -> bool:
    return bool(
        pa.types.is_nested(type_)
        or (pa.types.is_dictionary(type_) and pa.types.is_nested(type_.value_type))
    )


def _column(field: Any, index: int, metadata: Any, facts: _Facts) -> ColumnStats:
    if pa.types.is_null(field.type):  # parquet keeps no statistics for it: every row is null
        return ColumnStats(field.name, facts.rows)
    nulls: int | None = 0
    low: Bound | None = None
    high: Bound | None = None
    bounded = True
    for g in range(metadata.num_row_groups):
        s = metadata.row_group(g).column(index).statistics
        if s is None or not s.has_null_count:
            nulls = None
        elif nulls is not None:
            nulls += s.null_count
        if s is None or not s.has_min_max:
            rows = metadata.row_group(g).num_rows
            # A row group of nulls only has no bounds and needs none.
            if s is None or not s.has_null_count or s.null_count != rows:
                bounded = False
            continue
        pair = _canonical(field.type, s)
        if pair is None:
            bounded = False
            continue
        low = pair[0] if low is None else min(low, pair[0])
        high = pair[1] if high is None else max(high, pair[1])
    nans = facts.nans
    if not bounded and (text := facts.text_bounds()) is not None:
        # The parquet writer keeps no bounds for a row group whose least or greatest value
        # is longer than 4 KiB; the rows are at hand, and bounds that depend on how rows were
        # split into files would make a commit's digest depend on it too (lakelock._digest).
        low, high, bounded = text[0], text[1], True
    if not bounded or low is None or high is None:
        return ColumnStats(field.name, nulls, nans)
    if isinstance(low, str):
        assert isinstance(high, str)
        return ColumnStats(field.name, nulls, nans, truncate_lower(low), truncate_upper(high))
    return ColumnStats(field.name, nulls, nans, low, high)


def _value_type(type_: Any) -> Any:
    return type_.value_type if pa.types.is_dictionary(type_) else type_


def _canonical(type_: Any, s: Any) -> tuple[Bound, Bound] | None:
    """The bounds of a row group in canonical form, or None for a type without them."""
    type_ = _value_type(type_)
    if pa.types.is_boolean(type_) or pa.types.is_integer(type_):
        return s.min, s.max
    if pa.types.is_floating(type_):
        low, high = float(s.min), float(s.max)
        if not (math.isfinite(low) and math.isfinite(high)):
            return None
        return low, high
    if _is_text(type_):
        return str(s.min), str(s.max)
    if pa.types.is_date(type_):
        return int(s.min_raw), int(s.max_raw)  # parquet DATE: days, whatever the arrow unit
    if pa.types.is_timestamp(type_):
        per_micro = _units_per_micro(str(s.logical_type))
        if per_micro is None:
            return None
        low, high = int(s.min_raw), int(s.max_raw)
        if per_micro >= 1:
            return low // per_micro, -(-high // per_micro)
        return low * round(1 / per_micro), high * round(1 / per_micro)
    return None


def _is_text(type_: Any) -> bool:
    return bool(
        pa.types.is_string(type_) or pa.types.is_large_string(type_) or _is_string_view(type_)
    )


def _is_string_view(type_: Any) -> bool:
    return bool(getattr(pa.types, "is_string_view", lambda _: False)(type_))


def _units_per_micro(logical: str) -> float | None:
    """How many of the footer's timestamp units make a microsecond."""
    if "timeUnit=nanoseconds" in logical:
        return 1000
    if "timeUnit=microseconds" in logical:
        return 1
    if "timeUnit=milliseconds" in logical:
        return 1 / 1000
    return None


def truncate_lower(value: str) -> str:
    """A lower bound of ``value`` at most :data:`TRUNCATE` characters long: its prefix."""
    return value[:TRUNCATE]


def truncate_upper(value: str) -> str | None:
    """An upper bound of ``value`` at most :data:`TRUNCATE` characters long: ``value`` if it
    fits, else its prefix with the last character that can be incremented incremented
    (Iceberg's rule); ``None`` if no character can be."""
    if len(value) <= TRUNCATE:
        return value
    chars = list(value[:TRUNCATE])
    while chars:
        point = ord(chars[-1]) + 1
        if point in _SURROGATES:
            point = _SURROGATES.stop
        if point <= _MAX_CODE_POINT:
            chars[-1] = chr(point)
            return "".join(chars)
        chars.pop()
    return None


# -- pruning ----------------------------------------------------------------------------------


def guarantee(stats: FileStats, schema: Any, rows: int) -> Any:
    """A ``pyarrow.compute.Expression`` every row of the file satisfies (``True`` when the
    statistics say nothing usable), for the columns of ``schema`` (module docstring)."""
    expression = pc.scalar(True)
    for column in stats.columns:
        index = schema.get_field_index(column.name)
        if index < 0:
            continue
        type_ = _value_type(schema.field(index).type)
        field = pc.field(column.name)
        if column.nulls is not None and column.nulls == rows and rows > 0:
            expression = expression & field.is_null()
            continue
        if column.nulls != 0 or column.min is None or column.max is None:
            continue
        if pa.types.is_floating(type_) and column.nans != 0:
            continue
        low, high = _scalar(column.min, type_), _scalar(column.max, type_)
        if low is None or high is None:
            continue
        expression = expression & (field >= low) & (field <= high)
    return expression


def _scalar(value: Bound, type_: Any) -> Any:
    """A canonical bound as a scalar comparable with a column of ``type_``."""
    try:
        if pa.types.is_timestamp(type_):
            return pc.scalar(pa.scalar(value, pa.timestamp("us", type_.tz)))
        if pa.types.is_date(type_):
            return pc.scalar(pa.scalar(value, pa.int32()).cast(pa.date32()).cast(type_))
        if _is_string_view(type_):
            return pc.scalar(pa.scalar(value, pa.string()))
        return pc.scalar(pa.scalar(value, type_))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return None
