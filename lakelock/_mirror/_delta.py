"""The Delta view of a dataset: one Delta commit per lakelock version (docs/FORMAT.md).

Delta version ``n`` is the ``n``-th lakelock version mirrored (the first mirrored, usually the
dataset's first, is Delta version 0 and adds every file it has). Each commit is
``_delta_log/<n>.json``, newline-delimited actions serialised with orjson: ``commitInfo``
(with ``"lakelock.version"``), ``protocol`` and ``metaData`` when the schema is new or changed,
then ``remove`` and ``add`` actions. The table root is the dataset's directory, so data files
are referenced by their path below it, percent-encoded as Delta paths are; partition
values in Delta's string form, statistics (``numRecords``, ``nullCount``, ``minValues``,
``maxValues``) from the file's own (:mod:`lakelock._stats`). Every
:data:`CHECKPOINT_INTERVAL` versions a parquet checkpoint (protocol, metadata, the live
files) is written by pyarrow; there is no ``_last_checkpoint`` (it would be overwritten;
readers list the log and find the checkpoint themselves).

Everything is deterministic in the lakelock version it mirrors, so two processes mirroring at
once write the same bytes and the loser of each create simply continues.
"""

from __future__ import annotations

import datetime as dt
import io
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from lakelock._datafile import DataFile
from lakelock._engines import require
from lakelock._layout import files_prefix
from lakelock._mirror._versions import VersionChange, check_view_schema, signed_holding
from lakelock._names import parse_partition_path, parse_partition_value
from lakelock.errors import SchemaMismatchError

__all__ = [
    "CHECKPOINT_INTERVAL",
    "checkpoint_body",
    "commit_body",
    "delta_schema",
    "lakelock_version_of",
]

#: A parquet checkpoint every this many Delta versions (Delta's own default).
CHECKPOINT_INTERVAL = 10
_NAMESPACE = uuid.UUID("6f1d3c1e-6a0b-4b7e-9a57-6c61a7e0c0de")
_EPOCH = dt.datetime(1970, 1, 1)
#: The Arrow field metadata a column's comment is kept in (the Iceberg view's ``doc``), and
#: the Delta field metadata key that is a column's comment.
_DOC = b"doc"
_COMMENT = b"comment"


def table_id(bucket: str, key: str) -> str:
    """The Delta table id: stable for one view, so every writer writes the same."""
    return str(uuid.uuid5(_NAMESPACE, f"s3://{bucket}/{key}"))


def delta_schema(schema: pa.Schema) -> tuple[str, bool]:
    """Delta's ``schemaString`` for ``schema``, and whether it needs ``timestampNtz``."""
    deltalake = require("deltalake", extra="delta")
    check_view_schema(schema, "Delta")
    plain = pa.schema([_delta_field(f) for f in schema])
    try:
        converted = deltalake.Schema.from_arrow(plain)
    except Exception as error:  # delta-rs raises bare Exceptions for schemas it refuses
        raise SchemaMismatchError(f"Delta cannot represent the schema: {error}") from error
    text = converted.to_json()
    return text, "timestamp_ntz" in text


def _delta_field(field: pa.Field) -> pa.Field:
    """``field`` as the Delta view has it: its type as Delta has it (:func:`_plain`), its
    comment (the ``doc`` an engine gave through the catalog, as the Arrow field's ``doc``
    metadata) under Delta's field metadata key ``comment``, what Delta readers show."""
    field = field.with_type(_plain(field.type))
    metadata = dict(field.metadata or {})
    doc = metadata.pop(_DOC, None)
    if doc:
        metadata[_COMMENT] = doc
    return field.with_metadata(metadata) if field.metadata else field


def _plain(type_: Any) -> Any:
    """Types as Delta has them: dictionaries as their values, views and large types as plain
    strings/binaries, timestamps in microseconds (the same zone or none), unsigned integers
    in the signed type that holds them (:func:`~lakelock._mirror._versions.signed_holding`)."""
    if pa.types.is_unsigned_integer(type_):
        return signed_holding(type_)
    if pa.types.is_dictionary(type_):
        return _plain(type_.value_type)
    if pa.types.is_timestamp(type_):
        return pa.timestamp("us", type_.tz)
    if pa.types.is_large_string(type_) or str(type_) == "string_view":
        return pa.string()
    if pa.types.is_large_binary(type_) or str(type_) == "binary_view":
        return pa.binary()
    if pa.types.is_struct(type_):
        return pa.struct([_delta_field(f) for f in type_])
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return pa.list_(_delta_field(type_.value_field))
    return type_


def _protocol(ntz: bool) -> dict[str, Any]:
    if ntz:
        return {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["timestampNtz"],
            "writerFeatures": ["timestampNtz"],
        }
    return {"minReaderVersion": 1, "minWriterVersion": 2}


def _metadata(
    table: str, schema: pa.Schema, partition_by: Sequence[str], created_ms: int
) -> dict[str, Any]:
    text, _ = delta_schema(schema)
    return {
        "id": table,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": text,
        "partitionColumns": list(partition_by),
        "configuration": {},
        "createdTime": created_ms,
    }


def commit_body(
    change: VersionChange, *, bucket: str, prefix: str, table: str, created_ms: int
) -> bytes:
    """The ``_delta_log/<n>.json`` of one lakelock version."""
    ms = round(change.at * 1000)
    actions: list[dict[str, Any]] = [
        {
            "commitInfo": {
                "timestamp": ms,
                "operation": _OPERATIONS.get(change.operation, "WRITE"),
                "operationParameters": {"lakelock.operation": change.operation},
                "lakelock.version": str(change.version),
                "engineInfo": "lakelock",
            }
        }
    ]
    schema = change.schema if change.schema is not None else pa.schema([])
    if change.full or not _same(change.schema, change.parent_schema):
        _, ntz = delta_schema(schema)
        actions.append({"protocol": _protocol(ntz)})
        actions.append({"metaData": _metadata(table, schema, change.partition_by, created_ms)})
    for f in change.removed:
        actions.append(
            {
                "remove": {
                    "path": file_uri(bucket, prefix, f),
                    "deletionTimestamp": ms,
                    "dataChange": True,
                    "extendedFileMetadata": True,
                    "partitionValues": partition_values(f, schema),
                    "size": f.size,
                }
            }
        )
    for f in change.added:
        actions.append({"add": add_action(f, bucket=bucket, prefix=prefix, schema=schema, ms=ms)})
    return b"".join(orjson.dumps(a, option=orjson.OPT_SORT_KEYS) + b"\n" for a in actions)


_OPERATIONS = {
    "append": "WRITE",
    "overwrite": "WRITE",
    "delete": "DELETE",
    "compact": "OPTIMIZE",
    "restore": "RESTORE",
}


def _same(a: pa.Schema | None, b: pa.Schema | None) -> bool:
    if a is None or b is None:
        return a is b
    return bool(a.equals(b))


def add_action(
    f: DataFile, *, bucket: str, prefix: str, schema: pa.Schema, ms: int
) -> dict[str, Any]:
    return {
        "path": file_uri(bucket, prefix, f),
        "partitionValues": partition_values(f, schema),
        "size": f.size,
        "modificationTime": ms,
        "dataChange": True,
        "stats": orjson.dumps(delta_stats(f, schema), option=orjson.OPT_SORT_KEYS).decode(),
    }


def file_uri(bucket: str, prefix: str, f: DataFile) -> str:
    """A data file's path relative to the table root (the dataset's directory),
    percent-encoded as Delta paths are."""
    root = files_prefix(f.dataset)
    if not f.key.startswith(root):
        raise ValueError(f"{f.key!r} is not a file of dataset {f.dataset!r}")
    return quote(f.key[len(root) :], safe="/=")


def partition_values(f: DataFile, schema: pa.Schema) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for column, text in parse_partition_path(f.partition_path):
        index = schema.get_field_index(column)
        if text is None or index < 0:
            values[column] = text
            continue
        values[column] = _delta_value(parse_partition_value(text, schema.field(index).type))
    return values


def _delta_value(scalar: Any) -> str:
    """A partition value as Delta spells it."""
    type_ = scalar.type
    if pa.types.is_boolean(type_):
        return "true" if scalar.as_py() else "false"
    if pa.types.is_timestamp(type_):
        micros = scalar.cast(pa.timestamp("us", type_.tz)).cast(pa.int64()).as_py()
        moment = _EPOCH + dt.timedelta(microseconds=micros)
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")
    if pa.types.is_date(type_):
        return str(scalar.as_py().isoformat())
    return str(scalar.as_py())


def delta_stats(f: DataFile, schema: pa.Schema) -> dict[str, Any]:
    """Delta's per-file statistics from lakelock's. Timestamp bounds are left out (Delta keeps
    milliseconds, and a bound rounded the wrong way would skip rows); so are float bounds of
    a column with NaNs."""
    stats: dict[str, Any] = {"numRecords": f.record_count}
    if f.stats is None:
        return stats
    nulls: dict[str, int] = {}
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    for column in f.stats.columns:
        index = schema.get_field_index(column.name)
        if index < 0:
            continue
        type_ = schema.field(index).type
        if pa.types.is_dictionary(type_):
            type_ = type_.value_type
        if column.nulls is not None:
            nulls[column.name] = column.nulls
        if column.min is None or column.max is None or pa.types.is_timestamp(type_):
            continue
        if pa.types.is_floating(type_) and column.nans != 0:
            continue
        if pa.types.is_date(type_):
            lows[column.name] = _day(int(column.min))
            highs[column.name] = _day(int(column.max))
        else:
            lows[column.name], highs[column.name] = column.min, column.max
    stats.update(nullCount=nulls, minValues=lows, maxValues=highs)
    return stats


def _day(days: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=days)).isoformat()


def lakelock_version_of(body: bytes) -> int | None:
    """The lakelock version a Delta commit mirrors (its commitInfo's), or None."""
    for line in body.splitlines():
        action = orjson.loads(line)
        info = action.get("commitInfo") if isinstance(action, dict) else None
        if isinstance(info, dict) and isinstance(info.get("lakelock.version"), str):
            return int(info["lakelock.version"])
    return None


_STRING_MAP = pa.map_(pa.string(), pa.string())
_CHECKPOINT = pa.schema(
    [
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("name", pa.string()),
                    ("description", pa.string()),
                    (
                        "format",
                        pa.struct([("provider", pa.string()), ("options", _STRING_MAP)]),
                    ),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("configuration", _STRING_MAP),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
        (
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", _STRING_MAP),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("stats", pa.string()),
                ]
            ),
        ),
        (
            "remove",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("deletionTimestamp", pa.int64()),
                    ("dataChange", pa.bool_()),
                ]
            ),
        ),
    ]
)


def checkpoint_body(
    files: Iterable[DataFile],
    *,
    schema: pa.Schema,
    partition_by: Sequence[str],
    at: float,
    bucket: str,
    prefix: str,
    table: str,
    created_ms: int,
) -> bytes:
    """A parquet checkpoint: the protocol, the metadata and one ``add`` per live file."""
    _, ntz = delta_schema(schema)
    protocol = _protocol(ntz)
    meta = _metadata(table, schema, partition_by, created_ms)
    ms = round(at * 1000)
    rows: list[Mapping[str, Any]] = [
        {"protocol": protocol},
        {"metaData": {**meta, "name": None, "description": None, **_maps(meta)}},
    ]
    for f in files:
        add = add_action(f, bucket=bucket, prefix=prefix, schema=schema, ms=ms)
        add["partitionValues"] = list(add["partitionValues"].items())
        rows.append({"add": add})
    table_ = pa.Table.from_pylist(
        [{name: row.get(name) for name in _CHECKPOINT.names} for row in rows], schema=_CHECKPOINT
    )
    out = io.BytesIO()
    pq.write_table(table_, out)
    return out.getvalue()


def _maps(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "format": {"provider": "parquet", "options": []},
        "configuration": list(meta["configuration"].items()),
    }
