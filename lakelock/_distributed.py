"""The driver's side of a distributed append (:mod:`lakelock.dask`, :mod:`lakelock.spark`):
the commit is planned before any task runs, the engine's tasks write the files, and the files
the engine finally returns are committed in one registry update."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._lake import Lake
from lakelock._registry import CommitResult, Fence
from lakelock._registry._builder import CommitBuilder
from lakelock._registry._changes import SchemaMode, checked_schema_mode
from lakelock._registry._document import DatasetState

__all__ = ["append_written"]


def append_written(
    lake: Lake,
    dataset: str,
    partition_by: tuple[str, ...],
    write: Callable[[], tuple[Sequence[DataFile], pa.Schema]],
    *,
    schema_mode: SchemaMode,
    commit_id: str | None,
    fence: Fence | tuple[str, int] | None,
) -> CommitResult:
    """Append what ``write()`` wrote (its files and their schema) to ``dataset`` in one
    commit. ``write`` is not called when the ``commit_id`` is already recorded (the earlier
    commit is reported) or the change is refused before any task runs (another
    ``partition_by`` than the dataset's, a reused ``commit_id``). The rows are not known
    before the tasks write them: a recorded id is told from another change by dataset and
    operation only, and the commit is bound to its files summarised as a ``registry.commit``
    binds them (rows and statistics per partition, not the split into files:
    :func:`~lakelock._registry._builder.summary_digest`), so the same rows split otherwise
    are a retry of a commit still in flight, and other rows another change. No files (no
    rows) commit nothing (``result.empty``), and the commit id is not recorded."""
    commit = CommitBuilder(
        lake.registry,
        dataset,
        "append",
        commit_id=commit_id,
        fence=fence,
        partition_by=partition_by,
        schema_mode=checked_schema_mode(schema_mode),
    )
    planned = commit.check()
    if isinstance(planned, CommitResult):
        return planned
    files, schema = write()
    if not files:
        # No rows: nothing is committed and the id stays unrecorded, as Lake.append's empty
        # table (a re-run that finds the rows commits them, not "already committed").
        return commit.empty(planned.version)
    commit.declare(schema=_in_the_datasets_types(schema, planned.datasets.get(dataset)))
    commit.add(files)
    commit.bind_to_files()
    return commit.commit()


def _in_the_datasets_types(schema: pa.Schema, dataset: DatasetState | None) -> pa.Schema:
    """The frame's ``schema``, each column the dataset has as the dataset has it: the files
    are then judged as the driver's commit of the README's steps judges a worker's files (a
    type the dataset's holds is committed, one it cannot hold refused), not by an equal
    type (a pandas frame's ``large_string`` column was refused for a ``string`` dataset
    that ``lake.registry.commit`` of the same files appends to)."""
    current = None if dataset is None else dataset.schema
    if current is None:
        return schema
    fields = []
    for column in schema:
        index = current.get_field_index(column.name)
        fields.append(column if index < 0 else current.field(index))
    return pa.schema(fields, metadata=schema.metadata)
