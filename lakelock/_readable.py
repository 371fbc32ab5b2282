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
dataset's unit cannot hold); a column of type null (all nulls when the dataset got it) holds
only nulls; a struct holds a struct whose every field it has, in a type that holds it (a
read casts a struct by field name, dropping a field the dataset's lacks), a list or map
one whose values it holds; types not named here are left to the reader.

A column the dataset lacks is not read, but would be the day another process merged it in a
type that cannot hold the file's: a commit refuses such a column unless it merges it
(:func:`held_columns` names the columns files hold). A partition column (read from the
file's path) and pandas' unnamed index stored as a column (``__index_level_0__``, which the
file's ``pandas`` metadata names as an index: not data) are never lacking. A named index
(``set_index("user")``) is stored as its column, which every engine reads: data.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable

import orjson
import pyarrow as pa

from lakelock._names import parse_partition_path

__all__ = ["file_shape", "held_columns", "unholdable"]

#: How pandas names an index it stores as a column because the index has no name of its own.
_UNNAMED_INDEX = re.compile(r"__index_level_\d+__")


def held_columns(
    files: Iterable[tuple[pa.Schema, str]], *, partition_columns: bool = False
) -> dict[str, tuple[int, pa.Field]]:
    """The data columns ``files`` (each a file's schema and its partition path) hold, in the
    order first held, each with the first file holding it in a type (not null: all nulls; its
    place in ``files``) and its field there: not a file's partition columns, nor the
    columns its pandas metadata names as the frame's index (``partition_columns``: its
    partition columns too, as written, for the schema of a dataset the files make)."""
    held: dict[str, tuple[int, pa.Field]] = {}
    seen: set[Hashable] = set()
    for place, (schema, partition_path) in enumerate(files):
        shape = file_shape(schema, partition_path)
        if shape in seen:
            continue  # a file like one before it holds nothing new
        seen.add(shape)
        skipped = index = _pandas_index(schema)
        if not partition_columns:
            skipped = index | {column for column, _ in parse_partition_path(partition_path)}
        for column in schema:
            if column.name in skipped:
                continue
            first = held.get(column.name)
            # A worker whose rows are all null in a column stores it without a type (null):
            # another file's type is the column's.
            if first is None or (
                pa.types.is_null(first[1].type) and not pa.types.is_null(column.type)
            ):
                held[column.name] = (place, column)
    return held


def file_shape(schema: pa.Schema, partition_path: str) -> Hashable:
    """What judging a file by its schema depends on: files of one shape are judged once. A
    job's thousands of workers write few shapes (one schema, a few partitions), but each
    its own schema object, so the shape compares them by value, metadata included."""
    return schema, tuple(sorted((schema.metadata or {}).items())), partition_path


def _pandas_index(schema: pa.Schema) -> set[str]:
    """The columns ``schema``'s pandas metadata (what ``pa.Table.from_pandas`` records)
    names as the frame's unnamed index: a range index is stored as no column, any other as
    one; a named index keeps its name, and is read as data by every engine."""
    raw = (schema.metadata or {}).get(b"pandas")
    if raw is None:
        return set()
    try:
        index = orjson.loads(raw).get("index_columns", [])
    except (orjson.JSONDecodeError, AttributeError):
        return set()  # not what pandas writes: every column is data
    if not isinstance(index, list):
        return set()
    return {name for name in index if isinstance(name, str) and _UNNAMED_INDEX.fullmatch(name)}


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
        if not _type_holds(wanted, column.type):
            return column.name, wanted
    return None


def _type_holds(wanted: pa.DataType, found: pa.DataType) -> bool:
    """Whether a column of type ``wanted`` holds every value stored as ``found``. A read
    casts a struct by field name: a field ``found`` has that ``wanted`` lacks would be
    dropped unseen (an engine that writes a nested field under another name, as Iceberg
    writers spell one Avro cannot hold, ``a b`` as ``a_x20b``), one it lacks reads as
    nulls; a list's or map's values are held as their types are; a nested type and
    another are not (every read would fail). Primitive types not named by :func:`_kind`
    are left to the reader."""
    t = pa.types
    if t.is_null(wanted) and not t.is_null(found):
        return False  # no value can be cast to null: every read fails
    if not _indices_hold(wanted, found):
        return False
    if t.is_null(found):
        return True
    nested = _nested(wanted), _nested(found)
    if nested != (None, None):
        return nested[0] == nested[1] and _children_held(wanted, found)
    kinds = _kind(_values(wanted)), _kind(_values(found))
    return kinds[0] is None or kinds[1] is None or _holds(kinds[0], kinds[1])


def _nested(type_: pa.DataType) -> str | None:
    """A nested type's kind (a struct, a map, a list, a list of a fixed size), None for
    others."""
    t = pa.types
    if t.is_struct(type_):
        return "struct"
    if t.is_map(type_):
        return "map"
    if t.is_fixed_size_list(type_):
        return f"list of {type_.list_size}"
    if t.is_list(type_) or t.is_large_list(type_):
        return "list"
    if t.is_list_view(type_) or t.is_large_list_view(type_):
        return "list"
    return None


def _children_held(wanted: pa.DataType, found: pa.DataType) -> bool:
    """Whether the nested type ``wanted`` holds the children of ``found``, of its kind."""
    if pa.types.is_struct(found):
        fields = {wanted.field(i).name: wanted.field(i).type for i in range(wanted.num_fields)}
        return all(
            f.name in fields and _type_holds(fields[f.name], f.type)
            for f in (found.field(i) for i in range(found.num_fields))
        )
    if pa.types.is_map(found):
        return _type_holds(wanted.key_type, found.key_type) and _type_holds(
            wanted.item_type, found.item_type
        )
    return _type_holds(wanted.value_type, found.value_type)


def _values(type_: pa.DataType) -> pa.DataType:
    """A dictionary's value type; any other type itself (a dictionary is an encoding of its
    values)."""
    return type_.value_type if pa.types.is_dictionary(type_) else type_


def _indices_hold(wanted: pa.DataType, found: pa.DataType) -> bool:
    """Whether a column of ``wanted`` type holds as many distinct values as one of ``found``
    may: a dictionary holds as many as its index type counts, a plain column any number (a
    file's column is a 32-bit count at most). A file whose categories outnumber the
    dataset's dictionary indices (int16 ones, for an int8 dataset) failed every read."""
    if not pa.types.is_dictionary(wanted):
        return True
    return _index_capacity(found) <= _index_capacity(wanted)


def _index_capacity(type_: pa.DataType) -> int:
    """How many distinct values a column of ``type_`` can hold: its dictionary's index
    type's largest value; a plain column's, a 32-bit count."""
    if not pa.types.is_dictionary(type_):
        return 2**31 - 1
    index = type_.index_type
    bits = index.bit_width if pa.types.is_unsigned_integer(index) else index.bit_width - 1
    return int(2**bits - 1)


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
