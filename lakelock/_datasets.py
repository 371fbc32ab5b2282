"""Write-once datasets: one parquet file per partition, created with ``If-None-Match: *``.

Layout (keys relative to the lake prefix; names, escaping and the null spelling are in
:mod:`lakelock._names`)::

    datasets/<dataset>/<col>=<value>/.../part-<uuid4 hex>.parquet    generated name
    datasets/<dataset>/<col>=<value>/.../<file_name>                 caller-given name

**Files.** Hive-style: partition columns are not stored in the files, only in the path. Each
file carries, in its parquet key-value metadata under ``lakelock.schema``, the whole table's
Arrow schema (partition columns included, in their original order, with their types), so
:func:`read_files` rebuilds the table exactly without being told the schema. The object's S3
metadata holds the write id (proof of authorship, see :mod:`lakelock._s3`), the record
count (``lakelock-records``) and ``sha256:<hex>`` of the bytes (``lakelock-checksum``), which
the :class:`~lakelock._datafile.DataFile` also records and :func:`read_files` verifies.

**Writing.** :func:`write_table` validates every name, type and key first, then serialises
every partition (in memory, or spooled to a temporary file above ``spool_threshold``), and
only then uploads; bad input therefore writes nothing. Memory held: at most
``spool_threshold`` bytes per partition (in all, about the table's size as parquet). Each
upload is create-only; the store goes multipart above its threshold with a conditional
completion, aborting on failure, and resolves lost acknowledgements by reading back the write
id: ours is success, another writer's is :class:`~lakelock.errors.AlreadyExistsError`.
Given ``hedge`` (a lake's registry passes its own), a file of at most ``HEDGED_BODY`` bytes
whose PUT is slow to be answered is sent a second time, with the same write id, and the first
success is the answer: the other copy is refused, or resolved as ours (docs/FORMAT.md,
"Scheduling" 7).

Generated names are unique, so such writes never collide. A caller-given ``file_name`` makes
a write idempotent across pipeline retries, the AWS blog's duplicate-upload case: the same
name in the same partition is the same key, and nothing is ever overwritten. A second
writer of other bytes there gets ``AlreadyExistsError`` and must stop retrying. The same
bytes there (its size and recorded checksum: an earlier run of the same job, refused or
killed before its commit, or committed) are taken as this write's, without a write time,
so that its commit decides: registered already is ``FileAlreadyRegisteredError`` (the
first run got through; ``Lake.append`` checks such files as ``registry.commit`` does,
FORMAT.md rule 14), older than half the vacuum floor ``ObjectTooOldError`` (rule 10);
otherwise the re-run commits what the refused run left, where it would have been refused
for ever before. Partitions are uploaded in partition-path order, so writers racing with
the same ``file_name`` over the same partitions contend first on the same key and the losers
stop before writing anything.

**Partial writes.** Files become visible only through a registry commit, so a write of several
partitions need not be atomic by itself. If partition *k* fails (already exists, access
denied, outcome unknown...), the error is raised as it is, unwrapped, with the files written
before it attached (:func:`written_before`, and an exception note naming their keys); later
partitions are not attempted. Those files are unreferenced orphans for ``vacuum``; nothing is
deleted here, least of all after an unknown outcome.

**Empty tables** write nothing and return ``[]`` (after validation).

**Reading.** :func:`read_files` fetches the files it is given — the caller decides which:
``lake.scan`` passes exactly a snapshot's files, never a listing — whole and in parallel
(:data:`DEFAULT_READ_WORKERS` at a time), verifies each against its recorded checksum, and
re-attaches the partition columns from the path, typed by the dataset's schema. The first
failure, in file order, is raised; files not yet started are not fetched.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakelock._datafile import DataFile, Partition
from lakelock._layout import data_file_key
from lakelock._names import (
    clashing_names,
    format_partition_value,
    parse_partition_path,
    parse_partition_value,
    partition_columns,
    partition_path,
    require_named_columns,
    validate_column_name,
    validate_dataset_name,
    validate_file_name,
    validate_partition_type,
    written_partition_value,
)
from lakelock._registry._core._driver import HEDGED_BODY
from lakelock._s3 import ObjectStore, PutResult, new_write_id
from lakelock._s3._types import read_all
from lakelock._stats import FileStats, footer_stats
from lakelock.errors import (
    AlreadyExistsError,
    InvalidNameError,
    NotFoundError,
    SchemaMismatchError,
    StorageError,
)

__all__ = [
    "CHECKSUM_METADATA",
    "DEFAULT_READ_WORKERS",
    "DEFAULT_SPOOL_THRESHOLD",
    "PARQUET_CONTENT_TYPE",
    "RECORDS_METADATA",
    "SCHEMA_METADATA",
    "Hedge",
    "Progress",
    "read_files",
    "recorded_schema",
    "table_schema",
    "write_table",
    "written_at",
    "written_before",
]

MIB = 1024 * 1024
#: Parquet bodies up to this size stay in memory; larger ones spill to a temporary file.
DEFAULT_SPOOL_THRESHOLD = 32 * MIB
#: Data files fetched at once when reading.
DEFAULT_READ_WORKERS = 16
#: The IANA media type registered for Apache Parquet.
PARQUET_CONTENT_TYPE = "application/vnd.apache.parquet"
#: S3 metadata keys (sent as ``x-amz-meta-...``).
RECORDS_METADATA = "lakelock-records"
CHECKSUM_METADATA = "lakelock-checksum"
#: Parquet key-value metadata key holding the whole table's serialised Arrow schema.
SCHEMA_METADATA = b"lakelock.schema"
_WRITTEN_ATTRIBUTE = "lakelock_written"
_HASH_CHUNK = 1 * MIB

#: The ``progress(done, total)`` callback of writes, reads, copies and vacuum (bytes, or
#: objects where there are no bytes to count).
Progress = Callable[[int, int], None]
#: ``hedge(put)``: ``put()``, one create-only PUT of a small new object, called a second time
#: if it is slow to be answered; the first success is the answer (``Driver.hedged``).
Hedge = Callable[[Callable[[], PutResult]], PutResult]


@dataclass(frozen=True)
class _Planned:
    """One partition, serialised and ready to upload."""

    partition_path: str
    key: str
    records: int
    body: IO[bytes]
    size: int
    checksum: str
    stats: FileStats


def write_table(
    store: ObjectStore,
    dataset: str,
    table: Any,
    *,
    partition_by: Sequence[str] | None = (),
    file_name: str | None = None,
    progress: Progress | None = None,
    spool_threshold: int = DEFAULT_SPOOL_THRESHOLD,
    hedge: Hedge | None = None,
) -> list[DataFile]:
    """Write ``table`` as write-once parquet files of ``dataset``, one per partition, and
    return what was written (uncommitted), in partition-path order.

    ``partition_by`` names the partition columns, outermost first (a single ``str`` is one
    column; ``None`` or ``()``: not partitioned). ``file_name`` is the name of the file in
    every partition directory; without it each file gets a unique
    ``part-<uuid4 hex>.parquet``. ``progress(done, total)`` is called
    with the bytes uploaded so far and the total of all files. ``hedge`` sends each file of
    at most ``HEDGED_BODY`` bytes through it (see the module docstring).

    Raises :class:`~lakelock.errors.InvalidNameError` (nothing written) for a bad dataset,
    column, type, value, file name or too long a key; the store's errors otherwise, notably
    :class:`~lakelock.errors.AlreadyExistsError` when a file's key is taken by another
    writer's bytes (the same bytes, an earlier run's, are returned as written: see the
    module docstring, which also says what a failure leaves behind).
    """
    if not isinstance(table, pa.Table):
        raise TypeError(f"table must be a pyarrow.Table, not {type(table).__name__}")
    dataset = validate_dataset_name(dataset)
    columns = _partition_columns(table, partition_by, dataset)
    name = validate_file_name(file_name) if file_name is not None else None
    metadata = {SCHEMA_METADATA: base64.b64encode(table.schema.serialize().to_pybytes())}
    splits = _split(table, columns)
    keys = [
        data_file_key(dataset, path, name or _generated_name(), prefix=store.prefix)
        for path, _ in splits
    ]
    if table.num_rows == 0:
        return []
    with contextlib.ExitStack() as stack:
        planned = []
        for (path, part), key in zip(splits, keys, strict=True):
            body = stack.enter_context(tempfile.SpooledTemporaryFile(max_size=spool_threshold))
            planned.append(_serialise(path, key, part, metadata, body))
        return _upload(store, dataset, planned, progress, hedge, schema=table.schema)


def written_before(error: BaseException) -> tuple[DataFile, ...]:
    """The files a failed :func:`write_table` had written before ``error`` (unreferenced
    orphans, left for ``vacuum``); ``()`` for any other error."""
    written = getattr(error, _WRITTEN_ATTRIBUTE, ())
    return tuple(f for f in written if isinstance(f, DataFile))


def table_schema(
    table: Any, partition_by: Sequence[str] | None = (), dataset: str | None = None
) -> Any:
    """The schema a dataset written from ``table`` has (partition columns included, in
    their places), after checking that ``partition_by`` can partition it and that its
    column names are unique ignoring case (``dataset`` names it in the error)."""
    _partition_columns(table, partition_by, dataset)
    return table.schema


def _partition_columns(
    table: Any, partition_by: Sequence[str] | None, dataset: str | None
) -> tuple[str, ...]:
    columns = partition_columns(partition_by)
    names = list(table.schema.names)
    require_named_columns(names, of="table")
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise InvalidNameError(duplicated[0], "the table has two columns of this name")
    clash = clashing_names(names)
    if clash is not None:
        first, second = clash
        raise SchemaMismatchError(
            f"the table for dataset {dataset!r} has columns {first!r} and {second!r}: column "
            "names must be unique ignoring case (DuckDB, Spark, Delta and Iceberg readers "
            "would take one for the other)",
            dataset=dataset,
        )
    for column in columns:
        validate_column_name(column)
        if columns.count(column) > 1:
            raise InvalidNameError(column, "partition column named twice")
        if column not in names:
            raise InvalidNameError(column, "partition column is not a column of the table")
        validate_partition_type(column, table.schema.field(column).type)
    if len(columns) == len(names):
        # A parquet file without columns does not keep its row count (Hive, Spark and Delta
        # refuse this for the same reason).
        raise InvalidNameError(
            tuple(columns), "at least one column must remain in the files, not partitioned"
        )
    return columns


def _split(table: Any, columns: tuple[str, ...]) -> list[tuple[str, Any]]:
    """``[(partition path, rows without the partition columns), ...]`` sorted by path, rows
    in their original order within each partition."""
    if not columns:
        return [("", table)]
    row = _fresh_name("__lakelock_row", table.schema.names)
    keys = table.select(list(columns))
    # Group on plain values: a dictionary may hold one value under two indices.
    for i, field in enumerate(keys.schema):
        if pa.types.is_dictionary(field.type):
            keys = keys.set_column(i, field.name, keys.column(i).cast(field.type.value_type))
    keys = keys.append_column(row, pa.array(range(table.num_rows), pa.int64()))
    groups = keys.group_by(list(columns), use_threads=False).aggregate([(row, "list")])
    rows_by_path: dict[str, list[Any]] = {}
    for i in range(groups.num_rows):
        values = [
            (c, written_partition_value(c, format_partition_value(groups.column(c)[i])))
            for c in columns
        ]
        rows_by_path.setdefault(partition_path(values), []).append(
            groups.column(f"{row}_list")[i].values
        )
    data = table.drop_columns(list(columns))
    splits = []
    for path in sorted(rows_by_path):
        pieces = rows_by_path[path]
        rows = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces).sort()
        splits.append((path, _take(data, rows)))
    return splits


def _take(table: Any, rows: Any) -> Any:
    """``table.take(rows)``, also for view types, which pyarrow cannot take directly: those
    columns go through their plain (large) equivalent and back."""
    columns = []
    for column in table.columns:
        plain = _without_views(column.type)
        if plain.equals(column.type):
            columns.append(column.take(rows))
        else:
            columns.append(column.cast(plain).take(rows).cast(column.type))
    return pa.Table.from_arrays(columns, schema=table.schema)


def _without_views(type_: Any) -> Any:
    """``type_`` with string/binary views replaced by large strings/binaries, recursively
    through lists, structs and maps."""
    if type_.equals(pa.string_view()):
        return pa.large_string()
    if type_.equals(pa.binary_view()):
        return pa.large_binary()
    if pa.types.is_struct(type_):
        return pa.struct([f.with_type(_without_views(f.type)) for f in type_])
    if pa.types.is_map(type_):
        return pa.map_(
            type_.key_field.with_type(_without_views(type_.key_type)),
            type_.item_field.with_type(_without_views(type_.item_type)),
            keys_sorted=type_.keys_sorted,
        )
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        field = type_.value_field.with_type(_without_views(type_.value_type))
        return pa.list_(field) if pa.types.is_list(type_) else pa.large_list(field)
    if pa.types.is_fixed_size_list(type_):
        field = type_.value_field.with_type(_without_views(type_.value_type))
        return pa.list_(field, type_.list_size)
    return type_


def _fresh_name(base: str, taken: Sequence[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


def _generated_name() -> str:
    return f"part-{uuid.uuid4().hex}.parquet"


def _serialise(
    path: str, key: str, part: Any, metadata: dict[bytes, bytes], body: IO[bytes]
) -> _Planned:
    schema_metadata = {**(part.schema.metadata or {}), **metadata}
    footer: list[Any] = []
    pq.write_table(part.replace_schema_metadata(schema_metadata), body, metadata_collector=footer)
    size = body.tell()
    body.seek(0)
    digest = hashlib.sha256()
    while chunk := body.read(_HASH_CHUNK):
        digest.update(chunk)
    body.seek(0)
    checksum = f"sha256:{digest.hexdigest()}"
    return _Planned(path, key, part.num_rows, body, size, checksum, footer_stats(footer[0], part))


def _upload(
    store: ObjectStore,
    dataset: str,
    planned: list[_Planned],
    progress: Progress | None,
    hedge: Hedge | None,
    *,
    schema: pa.Schema,
) -> list[DataFile]:
    meter = _Meter(progress, sum(p.size for p in planned))
    written: list[DataFile] = []
    for plan in planned:
        hedged = hedge if plan.size <= HEDGED_BODY else None
        # Two copies of one PUT may be in flight at once: they send the same bytes, read once.
        body = read_all(plan.body) if hedged is not None else plan.body
        put = functools.partial(
            store.put,
            plan.key,
            body,
            mode="create",
            metadata={RECORDS_METADATA: str(plan.records), CHECKSUM_METADATA: plan.checksum},
            write_id=new_write_id(),  # the same for both copies: either landing is ours
            resent=hedged is not None,  # so a copy refused because the other landed is ours
            content_type=PARQUET_CONTENT_TYPE,
            progress=meter.start(plan.size),
        )
        sent = time.monotonic()
        try:
            try:
                result = hedged(put) if hedged is not None else put()
            except AlreadyExistsError:
                earlier = _earlier_upload(store, dataset, plan)
                if earlier is None:
                    raise
                meter.finish()
                written.append(earlier)
                continue
        except Exception as error:
            setattr(error, _WRITTEN_ATTRIBUTE, tuple(written))
            if written:
                keys = ", ".join(f.key for f in written)
                error.add_note(f"written before this failure (uncommitted orphans): {keys}")
            raise
        meter.finish()
        written.append(
            DataFile(
                dataset=dataset,
                key=plan.key,
                partition_path=plan.partition_path,
                size=result.size,
                record_count=plan.records,
                checksum=plan.checksum,
                etag=result.etag,
                write_id=result.write_id,
                stats=plan.stats,
                written_at=written_at(result, time.monotonic() - sent),
                schema=schema,
                stores_partition=False,
            )
        )
    return written


def _earlier_upload(store: ObjectStore, dataset: str, plan: _Planned) -> DataFile | None:
    """The file at ``plan.key`` if it is this very upload made before (its size and
    recorded checksum ours: a caller-given name written by a run refused or killed before
    its commit), else None (another writer's file). It has no write time here: its commit
    looks up its ``LastModified`` against the vacuum floor (FORMAT.md rule 10), and checks
    that it is not live already (rule 14: the first run's commit may have landed)."""
    try:
        there = store.head(plan.key)
    except NotFoundError:  # deleted since (vacuum took an orphan): not ours to name
        return None
    if there.size != plan.size or there.metadata.get(CHECKSUM_METADATA) != plan.checksum:
        return None
    return DataFile(
        dataset=dataset,
        key=plan.key,
        partition_path=plan.partition_path,
        size=there.size,
        record_count=plan.records,
        checksum=plan.checksum,
        etag=there.etag,
        write_id=there.write_id or "",
        stats=plan.stats,
    )


def written_at(result: PutResult, took: float) -> float | None:
    """When the server wrote a file, or a little before: the ``Date`` of the answer
    less the PUT's whole duration (the object was created after the request left; the
    ``Date`` is rounded down to the second, which only makes the file look older)."""
    if result.server_time is None:
        return None
    return result.server_time.timestamp() - took


class _Meter:
    """Turns the store's per-part byte counts into ``progress(done, total)`` over all files.

    The store may report a file short (a lost acknowledgement resolved by reading back reports
    nothing) or twice (a multipart upload restarted after a 409), so each file's count is
    clamped to its size and completed when the file is; ``done`` never decreases."""

    def __init__(self, callback: Progress | None, total: int) -> None:
        self._callback = callback
        self._total = total
        self._finished = 0
        self._current = 0
        self._size = 0
        self._reported = 0

    def start(self, size: int) -> Callable[[int], None] | None:
        if self._callback is None:
            return None
        self._current, self._size = 0, size
        return self._advance

    def _advance(self, count: int) -> None:
        self._current += count
        self._report(self._finished + min(self._current, self._size))

    def finish(self) -> None:
        self._finished += self._size
        self._current = self._size = 0
        self._report(self._finished)

    def _report(self, done: int) -> None:
        if self._callback is not None and done > self._reported:
            self._reported = done
            self._callback(done, self._total)


# -- reading back -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """One data file read back: its columns, partition values and recorded schema."""

    file: DataFile
    data: Any
    partition: Partition
    schema: Any


def read_files(
    store: ObjectStore,
    files: Sequence[DataFile],
    *,
    schema: Any = None,
    partition_by: Sequence[str] | None = (),
    columns: Sequence[str] | None = None,
    filter: Any = None,
    max_workers: int = DEFAULT_READ_WORKERS,
    progress: Progress | None = None,
) -> Any:
    """The table made of ``files``, in their order, partition columns re-attached.

    Files are fetched whole, ``max_workers`` at a time, and each one's bytes are checked
    against its recorded checksum (a mismatch raises
    :class:`~lakelock.errors.StorageError` with ``code="ChecksumMismatch"``). The result has
    ``schema`` when given (columns missing from a file are null, types cast); otherwise the
    schema recorded in the files (unified across them), where files written by other tools
    contribute their partition columns as strings. ``partition_by``, when given, must be the
    partition columns of every file, in order. ``columns`` keeps only those columns, in that
    order; ``filter`` (a ``pyarrow.compute.Expression`` over the whole schema) keeps only the
    rows it is true for. ``progress(done, total)`` counts the bytes of the files read.
    """
    expected = partition_columns(partition_by)
    wanted = tuple(columns) if columns is not None else None
    # Without a filter, only the wanted columns are decoded; a filter may need any column.
    decode = wanted if filter is None else None
    meter = _ReadMeter(progress, sum(f.size for f in files))

    def read(file: DataFile) -> _Piece:
        piece = _read_piece(store, file, expected, decode)
        if schema is not None:  # conform here, in parallel, and drop the raw columns
            piece = _Piece(file, _finish(piece, schema, wanted, filter), (), schema)
        meter.advance(file.size)
        return piece

    pieces = _parallel_map(read, files, max_workers)
    target = schema if schema is not None else _unified_schema(pieces)
    if schema is None:
        tables = [_finish(piece, target, wanted, filter) for piece in pieces]
    else:
        tables = [piece.data for piece in pieces]
    if not tables:
        return _project(target, wanted).empty_table()
    return pa.concat_tables(tables)


def _parallel_map(
    function: Callable[[DataFile], _Piece], files: Sequence[DataFile], workers: int
) -> list[_Piece]:
    """``[function(f) for f in files]`` on up to ``workers`` threads; the first error (in
    file order) is raised and the files not yet started are not read."""
    if len(files) <= 1 or workers <= 1:
        return [function(f) for f in files]
    pool = ThreadPoolExecutor(
        max_workers=min(workers, len(files)), thread_name_prefix="lakelock-read"
    )
    try:
        futures = [pool.submit(function, f) for f in files]
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _finish(piece: _Piece, target: Any, columns: tuple[str, ...] | None, filter: Any) -> Any:
    table = _conform(piece, target)
    if filter is not None:
        table = table.filter(filter)
    return table.select(list(columns)) if columns is not None else table


def _project(schema: Any, columns: tuple[str, ...] | None) -> Any:
    return schema if columns is None else pa.schema([schema.field(c) for c in columns])


class _ReadMeter:
    """``progress(done, total)`` over bytes, from several reading threads."""

    def __init__(self, callback: Progress | None, total: int) -> None:
        self._callback = callback
        self._total = total
        self._done = 0
        self._lock = threading.Lock()

    def advance(self, size: int) -> None:
        if self._callback is None:
            return
        with self._lock:
            self._done += size
            self._callback(self._done, self._total)


def recorded_schema(store: ObjectStore, file: DataFile) -> Any:
    """The schema ``file`` records (read whole, checksum verified): the dataset's schema when
    lakelock wrote it; for another tool's file, its columns and then its partition columns
    as strings."""
    return _read_piece(store, file, (), ()).schema


def _read_piece(
    store: ObjectStore, file: DataFile, expected: tuple[str, ...], decode: tuple[str, ...] | None
) -> _Piece:
    partition = parse_partition_path(file.partition_path)
    columns = tuple(column for column, _ in partition)
    if expected and columns != expected:
        raise InvalidNameError(
            file.partition_path, f"partition columns {columns} are not {expected} ({file.key})"
        )
    obj = store.get(file.key)
    _verify_checksum(store, file, obj.body)
    parquet = pq.ParquetFile(pa.BufferReader(obj.body))
    stored = parquet.schema_arrow
    if decode is None:
        data = parquet.read()
    else:
        data = parquet.read(columns=[c for c in decode if c in stored.names])
    recorded = (stored.metadata or {}).get(SCHEMA_METADATA)
    if recorded is not None:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(recorded)))
    else:  # written by another tool: its own columns, then the path's as strings
        schema = stored.remove_metadata()
        for column in columns:
            if column not in schema.names:
                schema = schema.append(pa.field(column, pa.string()))
    return _Piece(file, data, partition, schema)


def _verify_checksum(store: ObjectStore, file: DataFile, body: bytes) -> None:
    algorithm, _, expected = file.checksum.partition(":")
    if algorithm != "sha256":
        code, problem = "UnsupportedChecksum", f"unsupported checksum {file.checksum!r}"
    elif (actual := hashlib.sha256(body).hexdigest()) != expected:
        code, problem = (
            "ChecksumMismatch",
            f"content is sha256:{actual}, written as {file.checksum}",
        )
    else:
        return
    raise StorageError(
        f"{file.key!r}: {problem}",
        bucket=store.bucket,
        key=file.key,
        operation="GetObject",
        code=code,
    )


def _unified_schema(pieces: list[_Piece]) -> Any:
    schemas = [piece.schema for piece in pieces]
    if not schemas:
        return pa.schema([])
    if all(s.equals(schemas[0], check_metadata=True) for s in schemas[1:]):
        return schemas[0]
    return pa.unify_schemas(schemas)


def _conform(piece: _Piece, target: Any) -> Any:
    """``piece`` as a table of exactly ``target``: partition values from the path, data
    columns cast, columns the file lacks as nulls."""
    values = dict(piece.partition)
    missing = [column for column in values if column not in target.names]
    if missing:
        raise InvalidNameError(
            piece.file.partition_path, f"partition column {missing[0]!r} is not in the schema"
        )
    rows = piece.data.num_rows
    arrays = []
    for field in target:
        if field.name in values:
            arrays.append(_constant(values[field.name], field.type, rows))
        elif field.name in piece.data.column_names:
            arrays.append(piece.data.column(field.name).cast(field.type))
        else:
            arrays.append(pa.nulls(rows, field.type))
    return pa.Table.from_arrays(arrays, schema=target)


def _constant(text: str | None, type_: Any, rows: int) -> Any:
    """A column of ``rows`` copies of the partition value spelled ``text``."""
    if text is None:
        return pa.nulls(rows, type_)
    column = pa.repeat(parse_partition_value(text, type_), rows)
    if pa.types.is_dictionary(type_):
        column = column.dictionary_encode().cast(type_)
    return column
