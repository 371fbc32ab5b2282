"""Whether a dataset's column type can read a file's column whatever its values.

lakelock reads every file of a dataset cast to the dataset's schema, so a file committed with
a column stored in a type the dataset's cannot hold (a string for a ``long``) makes every
read of the dataset fail. A commit of files lakelock did not just write from the dataset's
own schema (``registry.commit`` of a worker's files, an engine's through ``lakelock
catalog``) is checked with :func:`unholdable` before it is committed.

Types of one kind hold each other (``string`` and ``large_string``; an ``int`` in a ``long``
and a ``float`` in a ``double``, as Iceberg promotes them; a decimal of a smaller precision
and the same scale; a timestamp, time or date of the same or a coarser unit, with a time
zone or without as the dataset's: a finer one fails the safe cast of any value the
dataset's unit cannot hold); nested types and those not named here are left to the reader.
"""

from __future__ import annotations

import pyarrow as pa

from lakelock._names import parse_partition_path

__all__ = ["unholdable"]


def unholdable(
    stored: pa.Schema, dataset: pa.Schema, partition_path: str = ""
) -> tuple[str, pa.DataType] | None:
    """The first column of ``stored`` (the schema of a file in the partition at
    ``partition_path``) whose type ``dataset``'s column of that name cannot hold, with that
    type; None if there is none. Columns the dataset lacks are not read, those the file
    lacks read as nulls, and a partition column's values are read from the file's path,
    never from the file: none is a problem."""
    from_path = {column for column, _ in parse_partition_path(partition_path)}
    for column in stored:
        index = dataset.get_field_index(column.name)
        if index < 0 or column.name in from_path:
            continue
        wanted = dataset.field(index).type
        found, expected = _kind(column.type), _kind(wanted)
        if found is None or expected is None or _holds(expected, found):
            continue
        return column.name, wanted
    return None


#: A time unit's width: a finer unit is wider (it holds values a coarser one cannot).
_UNITS = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def _kind(type_: pa.DataType) -> tuple[str, int] | None:
    """A primitive type's kind and width (bits; a decimal's precision, a fixed binary's
    bytes, a time's unit), or None for a type not checked."""
    t = pa.types
    if t.is_string(type_) or t.is_large_string(type_) or t.is_string_view(type_):
        return ("string", 0)
    if t.is_fixed_size_binary(type_):
        return ("fixed", type_.byte_width)
    if t.is_binary(type_) or t.is_large_binary(type_) or t.is_binary_view(type_):
        return ("binary", 0)
    if t.is_boolean(type_):
        return ("boolean", 0)
    if t.is_signed_integer(type_):
        return ("int", type_.bit_width)
    if t.is_floating(type_):
        return ("float", type_.bit_width)
    if t.is_date(type_):
        return ("date", 0 if t.is_date32(type_) else _UNITS["ms"])  # days, or milliseconds
    if t.is_time(type_):
        return ("time", _UNITS[type_.unit])
    if t.is_timestamp(type_):
        return ("timestamptz" if type_.tz is not None else "timestamp", _UNITS[type_.unit])
    if t.is_decimal(type_):
        return (f"decimal scale {type_.scale}", type_.precision)
    return None


def _holds(expected: tuple[str, int], found: tuple[str, int]) -> bool:
    """Whether a column of kind ``expected`` holds every value of kind ``found``: the same
    kind, no wider; a fixed binary of the same width."""
    (kind, width), (found_kind, found_width) = expected, found
    if kind != found_kind:
        return False
    return found_width == width if kind == "fixed" else found_width <= width
