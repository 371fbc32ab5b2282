"""Partition columns a data file stores: the one check that readers will agree on its rows.

lakelock writes a file's partition columns into its path only, and reads them from there.
Engines (Spark, pyiceberg, Iceberg's Java writers) store them in the parquet as well, and an
Iceberg reader takes a stored column over the partition's value. A file stored under
``kind=a`` whose rows hold ``kind='b'`` would read ``a`` in lakelock and ``b`` through the
Iceberg view or catalog. So every commit of files lakelock did not just write itself judges
them by their footer's row-group statistics (:func:`contradiction`): the catalog's commit of
an engine's files and ``registry.commit``'s of files written elsewhere
(:func:`check_stored_partitions`, which refuses such a file). A partition move to another
value copies a file's bytes unchanged, so a file storing a partition column the move changes
is written again holding the new value instead (:func:`moved_stored_columns` says which,
:func:`with_partition_values` writes it, a row group at a time, as the source was written).

What it costs: one ranged GET of a file's last 64 KiB (a second for a longer footer), only
for files that may store a partition column: not the files lakelock's ``write`` returned
(``DataFile.stores_partition`` is ``False``); a move's files come from the registry, which
does not record it, so a move to another value reads every moved file's footer.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakelock._datafile import DataFile
from lakelock._names import parse_partition_path, parse_partition_value
from lakelock._s3 import ObjectStore
from lakelock._stats import FileStats, RowFacts
from lakelock.errors import InvalidNameError, NotFoundError, SchemaMismatchError

__all__ = [
    "FooterTooLong",
    "NotParquet",
    "check_stored_partitions",
    "contradiction",
    "moved_stored_columns",
    "parquet_footer",
    "read_footer",
    "stored_partition_columns",
    "with_partition_values",
]

#: The bytes of a data file's tail read first for its parquet footer (pyarrow's own first read
#: of a footer is 64 KiB): most footers are in it, a longer one is read with a second GET.
FOOTER_READ = 64 * 1024
#: The longest parquet footer read (Dremio refuses footers over 16 MB too; a 1 GB file's is
#: tens of KiB). A file's last 8 bytes declare its footer's length, and the footer is read into
#: memory whole: a hostile or damaged file declaring gigabytes would otherwise be held.
MAX_FOOTER = 16 * 1024 * 1024
#: Footers read at once by one commit.
READERS = 8
_MAGIC = b"PAR1"


def contradiction(footer: pq.FileMetaData, values: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The first partition column of ``values`` (each column's value as Python holds it;
    ``None``: a null) that the file of ``footer`` stores holding another value, by its row
    groups' statistics, with a value it holds (``"null"`` for a null); ``None`` when none
    does. A column without statistics, or whose statistics are of another Python type than
    the value, is not judged."""
    stored = {footer.schema.column(j).path: j for j in range(footer.num_columns)}
    for column, expected in values.items():
        j = stored.get(column)
        if j is None:
            continue
        for g in range(footer.num_row_groups):
            found = _other_value(footer.row_group(g).column(j).statistics, expected)
            if found is not None:
                return column, found
    return None


def _other_value(statistics: Any, expected: Any) -> Any:
    """A value a column chunk's ``statistics`` show it holds other than ``expected`` (None:
    a null), or ``None`` when they show none (or cannot tell)."""
    if statistics is None:
        return None
    nulls = statistics.null_count if statistics.has_null_count else None
    if expected is None:
        if statistics.has_min_max:
            return statistics.min
        return None
    if nulls:
        return "null"
    if not statistics.has_min_max:
        return None
    for bound in (statistics.min, statistics.max):
        if type(bound) is type(expected) and bound != expected:
            return bound
    return None


def stored_partition_columns(footer: pq.FileMetaData, partition_path: str) -> list[str]:
    """The columns of ``partition_path`` the file of ``footer`` stores (top-level)."""
    stored = {footer.schema.column(j).path for j in range(footer.num_columns)}
    return [column for column, _ in parse_partition_path(partition_path) if column in stored]


class NotParquet(ValueError):
    """The file read by :func:`parquet_footer` is not parquet (its message says why)."""


class FooterTooLong(ValueError):
    """The file read by :func:`parquet_footer` declares a footer over ``MAX_FOOTER`` bytes."""

    def __init__(self, length: int) -> None:
        super().__init__(f"declares a parquet footer of {length} bytes")
        self.length = length


def parquet_footer(store: ObjectStore, key: str, size: int) -> pq.FileMetaData:
    """The parquet footer of the ``size``-byte file at ``key`` (its row count, its schema,
    its row groups' statistics), read by ranged GETs of the file's tail only (a file ends
    ``<footer><its length: 4 bytes LE>PAR1``) and parsed as a file of its own: pyarrow reads
    a file's metadata from its end. :class:`NotParquet` or :class:`FooterTooLong` when the
    tail says so (a footer over ``MAX_FOOTER`` is not read)."""
    tail = store.get(key, byte_range=(max(0, size - FOOTER_READ), size)).body if size else b""
    length = int.from_bytes(tail[-8:-4], "little") if len(tail) >= 8 else -1
    if tail[-4:] != _MAGIC or not 0 < length <= size - 12:
        raise NotParquet("it does not end with a parquet footer")
    if length > MAX_FOOTER:
        raise FooterTooLong(length)
    if length + 8 > len(tail):
        tail = store.get(key, byte_range=(size - 8 - length, size)).body
    try:
        return pq.read_metadata(pa.BufferReader(_MAGIC + tail[-(length + 8) :]))
    except (pa.ArrowInvalid, OSError) as error:
        raise NotParquet(str(error)) from error


def read_footer(store: ObjectStore, f: DataFile) -> pq.FileMetaData | None:
    """The parquet footer of ``f`` (:func:`parquet_footer`); ``None`` for a file that is not
    parquet or not there (left to the commit and its readers, as before this check). A footer
    over ``MAX_FOOTER`` is :class:`~lakelock.errors.SchemaMismatchError`, not read."""
    try:
        return parquet_footer(store, f.key, f.size)
    except (NotFoundError, NotParquet):
        return None  # the commit refuses a file that is not there, saying so
    except FooterTooLong as error:
        raise SchemaMismatchError(
            f"data file {f.key} declares a parquet footer of {error.length} bytes: lakelock "
            f"reads none over {MAX_FOOTER} to judge its partition columns (write fewer "
            "columns or row groups a file)",
            dataset=f.dataset,
        ) from None


def _footers(
    store: ObjectStore, files: Sequence[DataFile]
) -> list[tuple[DataFile, pq.FileMetaData]]:
    """Each of ``files`` that is parquet, with its footer (read in parallel)."""
    if len(files) <= 1:
        footers = [read_footer(store, f) for f in files]
    else:
        with ThreadPoolExecutor(min(READERS, len(files))) as pool:
            footers = list(pool.map(lambda f: read_footer(store, f), files))
    return [(f, footer) for f, footer in zip(files, footers, strict=True) if footer is not None]


def _may_store_partition(f: DataFile) -> bool:
    return bool(f.partition_path) and f.stores_partition is not False


def _path_values(footer: pq.FileMetaData, partition_path: str) -> dict[str, Any]:
    """Each stored partition column's value as ``partition_path`` spells it, read in the
    type the file stores it in (a spelling that type cannot hold is not judged)."""
    arrow = footer.schema.to_arrow_schema()
    values: dict[str, Any] = {}
    for column, text in parse_partition_path(partition_path):
        if arrow.get_field_index(column) < 0:
            continue
        try:
            values[column] = parse_partition_value(text, arrow.field(column).type).as_py()
        except InvalidNameError:
            continue
    return values


def check_stored_partitions(store: ObjectStore, files: Sequence[DataFile]) -> None:
    """Refuse (:class:`~lakelock.errors.SchemaMismatchError`, naming the file and the
    column) a file of ``files`` that stores a partition column holding another value than
    its partition path's: lakelock would read the path's value, Iceberg readers the
    stored one. Reads the footer of each file that may store one (module docstring)."""
    judged = [f for f in files if _may_store_partition(f)]
    for f, footer in _footers(store, judged):
        found = contradiction(footer, _path_values(footer, f.partition_path))
        if found is not None:
            column, value = found
            raise SchemaMismatchError(
                f"data file {f.key} stores partition column {column!r} holding {value!r} in "
                f"the partition {f.partition_path!r}: lakelock reads a partition column from "
                "the partition, Iceberg readers from the file; write each partition's rows "
                "to its own files, under its own path",
                dataset=f.dataset,
            )


def moved_stored_columns(
    store: ObjectStore, files: Sequence[DataFile], to_partition: str
) -> dict[str, dict[str, str | None]]:
    """For each file of ``files`` (by key) that stores a partition column whose value the
    move to ``to_partition`` changes, those columns with their new values as the path spells
    them: its bytes copied unchanged, Iceberg readers would read the old values, so the move
    writes it again (:func:`with_partition_values`). A new value the stored column's type
    cannot hold is :class:`~lakelock.errors.InvalidNameError`, before anything is written."""
    moved = dict(parse_partition_path(to_partition))
    judged = [f for f in files if _may_store_partition(f) and _changed(f, moved)]
    found: dict[str, dict[str, str | None]] = {}
    for f, footer in _footers(store, judged):
        changed = _changed(f, moved) & set(stored_partition_columns(footer, f.partition_path))
        if not changed:
            continue
        arrow = footer.schema.to_arrow_schema()
        for column in changed:
            parse_partition_value(moved[column], arrow.field(column).type)
        found[f.key] = {column: moved[column] for column in sorted(changed)}
    return found


def _changed(f: DataFile, moved: Mapping[str, str | None]) -> set[str]:
    """The partition columns whose value moving ``f`` to ``moved`` changes."""
    return {c for c, value in parse_partition_path(f.partition_path) if moved.get(c) != value}


def with_partition_values(body: bytes, values: Mapping[str, str | None]) -> tuple[bytes, FileStats]:
    """The parquet file ``body`` written again with each column of ``values`` holding that
    value (as a partition path spells it) in every row, and its statistics: every other
    column, the schema and its metadata (Iceberg's field ids) as they were. Streamed row
    group by row group (one decoded at a time), each written as a row group of as many rows,
    with the source's compression codec, dictionary use and format version per column
    (:func:`_written_like`; a codec's level is not in a footer: the codec's default)."""
    source = pq.ParquetFile(pa.BufferReader(body))
    schema = source.schema_arrow
    replaced = {}
    for column, text in values.items():
        field = schema.field(column)
        replaced[schema.get_field_index(column)] = (field, parse_partition_value(text, field.type))
    facts = RowFacts(schema)
    out = io.BytesIO()
    footer: list[Any] = []
    with pq.ParquetWriter(
        out, schema, metadata_collector=footer, **_written_like(source.metadata)
    ) as writer:
        for g in range(source.num_row_groups):
            group = source.read_row_group(g)
            for i, (field, value) in replaced.items():
                filled = pa.repeat(value, group.num_rows).cast(field.type)
                group = group.set_column(i, field, filled)
            facts.add(group)
            writer.write_table(group, row_group_size=max(group.num_rows, 1))
    return out.getvalue(), facts.stats(footer[0])


#: A footer's codec names as pyarrow's writer takes them.
_CODECS = {
    "UNCOMPRESSED": "none",
    "SNAPPY": "snappy",
    "GZIP": "gzip",
    "BROTLI": "brotli",
    "LZ4": "lz4",
    "LZ4_RAW": "lz4",
    "ZSTD": "zstd",
}


def _written_like(footer: pq.FileMetaData) -> dict[str, Any]:
    """The writer's options that keep what ``footer`` says of its file: each column's
    compression codec and whether it used a dictionary (its first row group's), and the
    format version. A codec pyarrow does not write (LZO) is its default's."""
    if footer.num_row_groups == 0:
        return {"version": footer.format_version}
    group = footer.row_group(0)
    codecs: dict[str, str] = {}
    dictionaries: list[str] = []
    for j in range(group.num_columns):
        chunk = group.column(j)
        codec = _CODECS.get(chunk.compression)
        if codec is not None:
            codecs[chunk.path_in_schema] = codec
        if any("DICTIONARY" in encoding for encoding in chunk.encodings):
            dictionaries.append(chunk.path_in_schema)
    return {"version": footer.format_version, "compression": codecs, "use_dictionary": dictionaries}
