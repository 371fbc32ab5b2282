"""What a commit commits, as one digest: the key an idempotent commit id is bound to.

A commit id names one change. Re-running a pipeline with the same id is a retry, and the
registry reports the commit it recorded; the same id for a different change is refused
(:class:`~lakelock.errors.CommitIdReusedError`). "The same change" is the same dataset and
operation (compared as they are) and the same :func:`change_digest`:

- the request: the operation's own parameters (``partition_by``, the partitions an overwrite
  replaces, a delete removes or a compaction merges, as the set of paths they name however
  they were spelt and in whatever order, a delete's ``where``, compaction's target size,
  the version a restore goes back to), as sorted JSON;
- the rows, when the commit writes a table: its columns sorted by name, its rows sorted by
  every column of a sortable type (numbers, strings, binaries, booleans, dates and times,
  decimals; dictionary columns by their values), schema metadata dropped, written as one
  Arrow IPC stream. So a re-run that builds the same rows in another order, other chunks or
  another column order is a retry; one row more, less or different is another change.
- for files an engine wrote that the catalog commits (``lakelock catalog``), the sorted
  content checksums of the files instead of the rows (its commit id already names them).
- for files written elsewhere and committed as a whole, a low-level ``registry.commit`` and
  the workers' files of ``lakelock.dask`` and ``lakelock.spark`` (``summary``:
  ``"commit:sha256:<hex>"``, compared only with digests of its kind: :func:`comparable`):
  the request is what it removes (the keys, the partitions), its ``partition_by`` and
  properties, and what it adds is summarised as a re-run rewriting the same rows reproduces
  it, per partition: the row count and the column statistics lakelock records (min, max,
  null count per column) combined over the files, not the files' names, bytes or split; the
  content checksums only where a file carries no statistics.

One function makes all of them, :func:`change_digest`; which request and content a commit's
digest covers is chosen where the commit is built
(:class:`~lakelock._registry._builder.CommitBuilder`).

Rows that tie on every sortable column keep their order: two runs that order such rows
differently (rare: they differ only in list or struct columns) count as different changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from lakelock._datafile import DataFile

__all__ = ["COMMIT_KIND", "change_digest", "comparable"]


def change_digest(
    request: Mapping[str, Any],
    *,
    table: pa.Table | None = None,
    files: Iterable[DataFile] | None = None,
    summary: Iterable[DataFile] | None = None,
) -> str:
    """The digest of a change: ``"sha256:<hex>"`` of the operation's ``request`` and of what
    it commits, ``table``'s rows or ``files``' contents (their checksums); or, for a commit
    that adds ``summary`` (files written elsewhere, summarised by rows and statistics, not
    bytes), ``"commit:sha256:<hex>"`` (the module docstring)."""
    if summary is not None:
        by_partition: dict[str, list[DataFile]] = {}
        for f in summary:
            by_partition.setdefault(f.partition_path, []).append(f)
        added = {path: _partition_summary(group) for path, group in by_partition.items()}
        return COMMIT_KIND + change_digest({**request, "add": added}, table=table, files=files)
    h = hashlib.sha256(orjson.dumps(request, option=orjson.OPT_SORT_KEYS, default=str))
    if table is not None:
        h.update(b"\0rows\0")
        _hash_rows(h, table)
    if files is not None:
        h.update(b"\0files\0")
        for path, checksum in sorted((f.partition_path, f.checksum) for f in files):
            h.update(f"{path}\0{checksum}\n".encode())
    return f"sha256:{h.hexdigest()}"


#: What a summary digest starts with (``registry.commit``, ``lakelock.dask``, ``lakelock.spark``):
#: it summarises files where a table operation hashes rows, so the two kinds are never compared
#: (:func:`comparable`).
COMMIT_KIND = "commit:"


def comparable(recorded: str, new: str) -> bool:
    """Whether two digests were made the same way, so that differing means another change. A
    summary (files summarised) and a ``"sha256:"`` digest (rows hashed, or files' checksums)
    are not: a re-run that commits with ``registry.commit`` the rows an ``append`` committed
    under the same id is a retry, told from another change by dataset and operation only, as
    before ``registry.commit`` had a digest; so is a ``lakelock.dask`` re-run of a commit an
    earlier lakelock bound to its files' checksums."""
    return recorded.startswith(COMMIT_KIND) == new.startswith(COMMIT_KIND)


def _partition_summary(files: list[DataFile]) -> dict[str, Any]:
    """What one partition's added files hold, however the rows were split into files: the
    row count and, per column, the null (and NaN) count and the bounds, combined over the
    files. A file without statistics makes it the files' sorted checksums instead.

    A bound is combined only from every file that has values in the column (rows neither
    null nor NaN): if one of them has none (a float column holding an infinity, a string
    whose bound cannot be cut to 16 characters), the partition's is unknown too, as it
    would be had the rows been one file, since the file holding that value lacks it
    however the rows are split."""
    rows = sum(f.record_count for f in files)
    if any(f.stats is None for f in files):
        return {"rows": rows, "checksums": sorted(f.checksum for f in files)}
    columns: dict[str, dict[str, Any]] = {}
    for f in files:
        for c in f.stats.columns if f.stats is not None else ():
            seen = columns.setdefault(c.name, {"nulls": 0, "nans": 0, "min": [], "max": []})
            seen["nulls"] = _sum(seen["nulls"], c.nulls)
            seen["nans"] = _sum(seen["nans"], c.nans)
            if c.nulls is None or c.nulls + (c.nans or 0) < f.record_count:  # has values
                seen["min"].append(c.min)
                seen["max"].append(c.max)
    try:
        combined = {
            name: {
                "nulls": seen["nulls"],
                "nans": seen["nans"],
                "min": _extreme(min, seen["min"]),
                "max": _extreme(max, seen["max"]),
            }
            for name, seen in columns.items()
        }
    except TypeError:  # bounds of one column that do not compare (not lakelock's stats)
        return {"rows": rows, "checksums": sorted(f.checksum for f in files)}
    return {"rows": rows, "columns": combined}


def _extreme(pick: Any, bounds: list[Any]) -> Any:
    """The least or greatest of the files' bounds: unknown if any file's is."""
    return None if not bounds or None in bounds else pick(bounds)


def _sum(total: int | None, count: int | None) -> int | None:
    """A count over files: unknown if unknown for any."""
    return None if total is None or count is None else total + count


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
