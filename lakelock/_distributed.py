"""The driver's side of a distributed append (:mod:`lakelock.dask`, :mod:`lakelock.spark`):
the commit is planned before any task runs, the engine's tasks write the files, and the files
the engine finally returns are committed in one registry update."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._digest import change_digest
from lakelock._lake import Lake
from lakelock._operations import SchemaMode, commit_planned, planned_change, prepare_commit
from lakelock._registry import CommitResult, Fence

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
    before the tasks write them: the commit records the digest of the files' contents."""
    change = planned_change(
        dataset,
        "append",
        commit_id=commit_id,
        fence=fence,
        digest=None,
        partition_by=partition_by,
        schema_mode=schema_mode,
    )
    planned = prepare_commit(lake.registry, change)
    if isinstance(planned, CommitResult):
        return planned
    files, schema = write()
    digest = change_digest({"partition_by": partition_by}, files=files)
    return commit_planned(
        lake.registry, replace(change, add=tuple(files), schema=schema, digest=digest)
    )
