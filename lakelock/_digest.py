"""What a commit commits, as one digest: the key an idempotent commit id is bound to.

A commit id names one change. Re-running a pipeline with the same id is a retry, and the
registry reports the commit it recorded; the same id for a different change is refused
(:class:`~lakelock.errors.CommitIdReusedError`). "The same change" is the same dataset and
operation (compared as they are) and the same :func:`change_digest`:

- the request: the operation's own parameters (``partition_by``, the partitions an overwrite
  replaces or a delete removes, a delete's ``where``, compaction's target size, the version a
  restore goes back to), as sorted JSON;
- the rows, when the commit writes a table: its columns sorted by name, its rows sorted by
  every column of a sortable type (numbers, strings, binaries, booleans, dates and times,
  decimals; dictionary columns by their values), schema metadata dropped, written as one
  Arrow IPC stream. So a re-run that builds the same rows in another order, other chunks or
  another column order is a retry; one row more, less or different is another change.
- for files written elsewhere (``lakelock.dask``), the sorted content checksums of the
  files instead of the rows.

Rows that tie on every sortable column keep their order: two runs that order such rows
differently (rare: they differ only in list or struct columns) count as different changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from lakelock._datafile import DataFile

__all__ = ["change_digest"]


def change_digest(
    request: dict[str, Any],
    *,
    table: pa.Table | None = None,
    files: Iterable[DataFile] | None = None,
) -> str:
    """``"sha256:<hex>"`` of the request, and of ``table``'s rows or ``files``' contents."""
    h = hashlib.sha256(orjson.dumps(request, option=orjson.OPT_SORT_KEYS, default=str))
    if table is not None:
        h.update(b"\0rows\0")
        _hash_rows(h, table)
    if files is not None:
        h.update(b"\0files\0")
        for path, checksum in sorted((f.partition_path, f.checksum) for f in files):
            h.update(f"{path}\0{checksum}\n".encode())
    return f"sha256:{h.hexdigest()}"


class _Sink:
    """A file-like object that hashes what is written to it (nothing is kept)."""

    def __init__(self, h: Any) -> None:
        self._h = h
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self._h.update(view)
        return view.nbytes

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _hash_rows(h: Any, table: pa.Table) -> None:
    table = table.replace_schema_metadata(None).select(sorted(table.column_names))
    columns = [
        column.cast(field.type.value_type) if pa.types.is_dictionary(field.type) else column
        for field, column in zip(table.schema, table.columns, strict=True)
    ]
    table = pa.table(columns, names=table.column_names)
    keys = [(field.name, "ascending") for field in table.schema if _sortable(field)]
    if keys and table.num_rows > 1:
        order = pc.sort_indices(table, sort_keys=keys)
        table = table.take(order)
    table = table.combine_chunks()
    sink = pa.PythonFile(_Sink(h), mode="w")
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches():
            writer.write_batch(batch)


def _sortable(field: pa.Field) -> bool:
    t = field.type
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
    )
