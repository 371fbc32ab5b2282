"""Data files as the dataset writer records them, for tests of the registry that need no
object behind them."""

from __future__ import annotations

import hashlib
import io
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from lakelock._datafile import DataFile
from lakelock._layout import data_file_key
from lakelock._registry._builder import CommitBuilder
from lakelock._registry._changes import Change

if TYPE_CHECKING:
    from lakelock import Lake
    from lakelock._registry import CommitResult, Registry

__all__ = ["append", "datafile", "foreign", "parquet", "registered_unchecked"]


def datafile(dataset: str, partition: str, name: str, records: int = 10) -> DataFile:
    """A DataFile as the dataset writer would record it (no object needed here): with the
    time it was written, so no commit looks it up in the store (FORMAT.md rule 10)."""
    key = data_file_key(dataset, partition, name)
    return DataFile(
        dataset, key, partition, 100 * records, records, "sha256:00", '"e"', "w", None, time.time()
    )


def append(reg: Registry, dataset: str, *files: DataFile) -> CommitResult:
    """``files`` committed as ``Lake.append`` commits the files it has just created: no
    commit can have registered them yet, so nothing is read to check that none did, as
    ``Registry.commit`` of files written earlier does (docs/FORMAT.md rule 14)."""
    commit = CommitBuilder(reg, dataset, "append")
    commit.add(files)
    return commit.commit()


def registered_unchecked(reg: Registry, *files: DataFile, commit_id: str) -> CommitResult:
    """``files`` (of one dataset) registered past ``Registry.commit``'s checks of what
    another tool wrote, as a lakelock from before a check registered them: a partition
    spelt as no writer may spell it now (a value not in Unicode NFC) that a lake can still
    hold."""
    change = Change(files[0].dataset, commit_id, add=files, existing_files=True)
    return reg.commit_changes([change])


def parquet(rows: pa.Table) -> bytes:
    """``rows`` as a parquet file another tool wrote (every column stored)."""
    written = io.BytesIO()
    pq.write_table(rows, written)
    return written.getvalue()


def foreign(lake: Lake, partition: str, body: bytes, rows: int, name: str) -> DataFile:
    """``body`` (holding ``rows`` rows) put under ``partition`` of ``events`` and described
    by hand, as ``registry.commit`` takes a file another tool wrote."""
    key = f"datasets/events/{partition}/{name}"
    put = lake.store.put(key, body, mode="create")
    return DataFile(
        dataset="events",
        key=key,
        partition_path=partition,
        size=len(body),
        record_count=rows,
        checksum=f"sha256:{hashlib.sha256(body).hexdigest()}",
        etag=put.etag,
        write_id=name,
    )
