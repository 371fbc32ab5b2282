"""Append a Dask DataFrame to a lake: workers write, the driver commits once (extra ``dask``).

```python
import dask.dataframe as dd
import lakelock
import lakelock.dask

lake = lakelock.Lake("my-bucket")
frame = dd.from_dict({"id": [1, 2, 3], "day": [1, 1, 2]}, npartitions=2)  # or read_parquet...
result = lakelock.dask.append(lake, "events", frame, partition_by=["day"], commit_id="load-42")
```

**The pattern, for any distributed engine** (Dask here; Spark, Ray the same way):

1. on the driver, ``config = lake.config`` — the lake as picklable data (bucket, prefix,
   endpoint, region, credentials);
2. in each task, ``config.open().write(dataset, table, partition_by=...)`` — write-once
   parquet files (``If-None-Match: *``) under fresh names, not yet visible to anyone; the task
   returns the :class:`~lakelock.DataFile` list it wrote;
3. on the driver, gather the lists the tasks *finally* returned and make **one**
   ``lake.registry.commit(dataset, add=files, schema=..., partition_by=..., commit_id=...)``.

Retries cannot duplicate rows. A task re-executed because its worker died, or run twice
speculatively, writes new files under new names; only the files named by the results the engine
finally returns are committed, so each row is committed once. Files of abandoned attempts —
even ones a dead worker's request completes after the commit — are referenced by no snapshot:
``lake.vacuum`` deletes them as orphans. Re-running a driver that failed after its commit with
the same ``commit_id`` commits nothing twice: recorded by then, the commit is reported before
any task runs (``already_committed``, compared by dataset and operation only: the rows are not
known before the tasks write them); still in flight, the re-run is compared by what its files
hold per lake partition (rows, null counts, bounds), not by how the rows were split, so the
same rows split otherwise are a retry and other rows
:class:`~lakelock.errors.CommitIdReusedError` (docs/FORMAT.md, "Commit ids").

With Spark, :mod:`lakelock.spark` does the same (``DataFrame.mapInArrow``); with Ray,
``ds.map_batches`` returning the files, then one commit on the driver.

The frame's index is not written (``reset_index()`` first to keep it). Each Dask partition
becomes one file per lake partition it has rows for.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._datasets import table_schema
from lakelock._distributed import append_written
from lakelock._engines import require
from lakelock._lake import Lake, LakeConfig
from lakelock._names import partition_columns, validate_dataset_name
from lakelock._registry import CommitResult, Fence
from lakelock._registry._changes import SchemaMode
from lakelock.errors import SchemaMismatchError

__all__ = ["append", "write"]


def write(
    lake: Lake, dataset: str, frame: Any, *, partition_by: Sequence[str] | None = ()
) -> tuple[list[DataFile], pa.Schema]:
    """Write every partition of the Dask DataFrame ``frame`` as files of ``dataset`` on the
    workers, uncommitted, and return the files (in partition order) and the schema they
    share (the partitions' own schemas unified: an all-null column takes the others' type).

    The partition columns are checked against the frame's columns before any task runs
    (:class:`~lakelock.errors.InvalidNameError`); partitions whose types cannot be unified
    raise :class:`~lakelock.errors.SchemaMismatchError` (their files are left as orphans)."""
    dask = require("dask", extra="dask")
    dd = require("dask.dataframe", extra="dask")
    if not isinstance(frame, dd.DataFrame):
        raise TypeError(f"frame must be a dask.dataframe.DataFrame, not {type(frame).__name__}")
    dataset = validate_dataset_name(dataset)
    columns = partition_columns(partition_by)
    table_schema(_to_arrow(frame._meta), columns, dataset)  # bad names, types: before any task
    config = lake.config
    task = dask.delayed(_write_partition, pure=False)
    results = dask.compute(*[task(config, dataset, columns, part) for part in frame.to_delayed()])
    files = [f for written, _ in results for f in written]
    try:
        schema = pa.unify_schemas([schema for _, schema in results])
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise SchemaMismatchError(
            f"the partitions of the frame do not share a schema: {error}", dataset=dataset
        ) from error
    return files, schema


def append(
    lake: Lake,
    dataset: str,
    frame: Any,
    *,
    partition_by: Sequence[str] | None = (),
    schema_mode: SchemaMode = None,
    commit_id: str | None = None,
    fence: Fence | tuple[str, int] | None = None,
) -> CommitResult:
    """:func:`write` the frame on the workers, then commit all of its files in one registry
    update on this (the driver's) process. With a ``commit_id`` already recorded for this
    dataset and operation nothing is written and the earlier commit is reported
    (``already_committed``), whatever rows the frame holds: they are not known before the
    workers write them; recorded for another dataset or operation, it is
    :class:`~lakelock.errors.CommitIdReusedError`. The commit is bound to its files' rows,
    null counts and bounds per lake partition, however the frame is split: recorded while
    the workers write (a first run still in flight), the same rows are a retry and other
    rows ``CommitIdReusedError``. A frame without rows commits nothing and records no
    commit id (``result.empty``), as :meth:`lakelock.Lake.append`'s empty table. A
    ``partition_by`` other than the dataset's is refused before any task runs; the schema
    follows :meth:`lakelock.Lake.append`'s rules (``schema_mode``), checked at the
    commit."""
    dataset = validate_dataset_name(dataset)
    columns = partition_columns(partition_by)
    return append_written(
        lake,
        dataset,
        columns,
        lambda: write(lake, dataset, frame, partition_by=columns),
        schema_mode=schema_mode,
        commit_id=commit_id,
        fence=fence,
    )


def _write_partition(
    config: LakeConfig, dataset: str, partition_by: tuple[str, ...], part: Any
) -> tuple[tuple[DataFile, ...], pa.Schema]:
    """One task: the partition's rows as write-once files (not committed)."""
    table = _to_arrow(part)
    if table.num_rows == 0:
        return (), table.schema
    files = _lake(config).write(dataset, table, partition_by=partition_by)
    return tuple(files), table.schema


def _to_arrow(frame: Any) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)


@functools.lru_cache(maxsize=8)
def _lake(config: LakeConfig) -> Lake:
    """One Lake per configuration in each worker process (its client is thread-safe)."""
    return config.open()
