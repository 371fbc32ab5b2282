"""Append a Spark DataFrame to a lake: executors write, the driver commits once (extra
``spark``). No Iceberg or Delta catalog is involved: the files and the commit are lakelock's.

With ``spark`` a SparkSession::

    import lakelock
    import lakelock.spark

    lake = lakelock.Lake("my-bucket")
    frame = spark.createDataFrame([(1, 1), (2, 1), (3, 2)], "id long, day int")  # or spark.read
    result = lakelock.spark.append(lake, "events", frame, partition_by=["day"],
                                   commit_id="load-42")

The same three steps as :mod:`lakelock.dask`: the driver hands ``lake.config`` (the lake as
picklable data) to the tasks; each task (``DataFrame.mapInArrow``) receives its partition's
rows as Arrow batches and writes them with ``lake.write`` as write-once files under fresh
names, returning the :class:`~lakelock.DataFile` list it wrote; the driver collects the lists
the tasks *finally* returned and makes **one** registry commit.

Retries cannot duplicate rows. A task Spark runs again (its Python worker or executor died,
``spark.task.maxFailures``) or twice (speculation) writes new files under new names; Spark
returns the result of one successful attempt per partition, and only those files are committed.
Files of the failed or losing attempts are referenced by no snapshot: ``lake.vacuum`` deletes
them as orphans. Re-running a driver that failed after its commit with the same ``commit_id``
commits nothing twice: recorded by then, the commit is reported before any task runs
(``already_committed``, compared by dataset and operation only: the rows are not known before
the tasks write them); still in flight, the re-run is compared by what its files hold per lake
partition (rows, null counts, bounds), not by how the rows were split, so the same rows split
otherwise are a retry and other rows :class:`~lakelock.errors.CommitIdReusedError`
(docs/FORMAT.md, "Commit ids").

Each Spark partition becomes one file per lake partition it has rows for (the partition is
held in the task's memory as Arrow while it is written, as a Dask partition is). A lakelock
error in a task (say :class:`~lakelock.errors.AccessDeniedError`: lakelock has already
retried what can be retried) reaches the driver as itself, with its fields, and nothing is
committed; any other failure of the job is Spark's own error.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._datasets import table_schema
from lakelock._distributed import append_written
from lakelock._engines import require
from lakelock._lake import Lake, LakeConfig
from lakelock._names import partition_columns, validate_dataset_name
from lakelock._registry import CommitResult, Fence
from lakelock._registry._changes import SchemaMode
from lakelock.errors import LakelockError, SchemaMismatchError

__all__ = ["append", "write"]

#: What each task returns, one row: the files it wrote (their JSON entries), the schema of
#: its rows (Arrow IPC), or the lakelock error that stopped it (pickled: errors pickle with
#: their fields, see lakelock.errors).
_RESULT = "files binary, schema binary, error binary"


def write(
    lake: Lake, dataset: str, frame: Any, *, partition_by: Sequence[str] | None = ()
) -> tuple[list[DataFile], pa.Schema]:
    """Write every partition of the Spark DataFrame ``frame`` as files of ``dataset`` on the
    executors, uncommitted, and return the files and the schema they share (the tasks' own
    schemas unified; the frame's schema when it has no rows).

    The partition columns are checked against the frame's schema before any task runs
    (:class:`~lakelock.errors.InvalidNameError`); a lakelock error in a task is raised here
    as itself (the files other tasks wrote are left as orphans)."""
    sql = require("pyspark.sql", extra="spark", package="pyspark")
    if not isinstance(frame, sql.DataFrame):
        raise TypeError(f"frame must be a pyspark.sql.DataFrame, not {type(frame).__name__}")
    dataset = validate_dataset_name(dataset)
    columns = partition_columns(partition_by)
    types = require("pyspark.sql.pandas.types", extra="spark", package="pyspark")
    declared: pa.Schema = types.to_arrow_schema(frame.schema)
    table_schema(declared.empty_table(), columns, dataset)  # bad names, types: before any task
    task = functools.partial(_write_partition, lake.config, dataset, columns)
    files: list[DataFile] = []
    schemas: list[pa.Schema] = []
    for row in frame.mapInArrow(task, _RESULT).collect():
        if row["error"] is not None:
            error: LakelockError = pickle.loads(row["error"])
            raise error
        files.extend(DataFile.from_json(dataset, entry) for entry in orjson.loads(row["files"]))
        schemas.append(pa.ipc.read_schema(pa.py_buffer(row["schema"])))
    try:
        schema = pa.unify_schemas(schemas) if schemas else declared
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise SchemaMismatchError(
            f"the partitions of the frame do not share a schema: {error}", dataset=dataset
        ) from error
    return files, schema.remove_metadata()


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
    """:func:`write` the frame on the executors, then commit all of its files in one
    registry update on this (the driver's) process. With a ``commit_id`` already recorded
    for this dataset and operation nothing is written and the earlier commit is reported
    (``already_committed``), whatever rows the frame holds: they are not known before the
    tasks write them; recorded for another dataset or operation, it is
    :class:`~lakelock.errors.CommitIdReusedError`. The commit is bound to its files' rows,
    null counts and bounds per lake partition, however the frame is split: recorded while
    the tasks write (a first run still in flight), the same rows are a retry and other rows
    ``CommitIdReusedError``. A frame without rows commits nothing and records no commit
    id (``result.empty``), as :meth:`lakelock.Lake.append`'s empty table. A
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
    config: LakeConfig,
    dataset: str,
    partition_by: tuple[str, ...],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """One task: the partition's rows as write-once files (not committed), reported as one
    row of ``_RESULT``; a partition without rows reports nothing."""
    batches = iter(batches)
    first = next(batches, None)
    if first is None:
        return
    table = pa.Table.from_batches([first, *batches]).replace_schema_metadata(None)
    if table.num_rows == 0:
        return
    try:
        written = _lake(config).write(dataset, table, partition_by=partition_by)
    except LakelockError as error:
        yield _result(error=pickle.dumps(error))
        return
    entries = orjson.dumps([f.to_json() for f in written])
    yield _result(files=entries, schema=table.schema.serialize().to_pybytes())


def _result(
    *, files: bytes | None = None, schema: bytes | None = None, error: bytes | None = None
) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"files": [files], "schema": [schema], "error": [error]},
        schema=pa.schema([("files", pa.binary()), ("schema", pa.binary()), ("error", pa.binary())]),
    )


@functools.lru_cache(maxsize=8)
def _lake(config: LakeConfig) -> Lake:
    """One Lake per configuration in each Python worker (Spark reuses its workers)."""
    return config.open()
