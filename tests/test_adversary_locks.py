"""Adversarial tests of the path lock (README, "Locks, leases and the bucket policy": "A
``write`` path keeps out every other commit"; docs/ARCHITECTURE.md, "The path lock"). Each
``Lake`` stands for one process."""

from __future__ import annotations

import datetime
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import LockedError, LockTimeout
from tests._support import FAST_RETRY


def events(*ids: int) -> pa.Table:
    ts = datetime.datetime(2024, 1, 1, 6, 30)
    return pa.table({"id": list(ids), "ts": pa.array([ts] * len(ids), pa.timestamp("s"))})


def test_a_write_lock_on_a_partition_spelled_as_written_keeps_out_its_commits(
    client: Any, bucket: str
) -> None:
    """A pipeline partitions ``ev`` by a timestamp and write-locks the partition it is about
    to rebuild as people spell it, ``/ev/ts=2024-01-01T06:30:00`` (the spelling ``lake.read``
    and ``rename_partition`` take; the key escapes ``:`` as ``%3A``). Another process's plain
    append into that very partition must be refused with LockedError while the lock is
    held, else the holder's overwrite then drops rows acknowledged meanwhile; and another
    process's rename of it must not be granted the lock (it would move the rows away under
    the holder)."""
    holder = Lake(bucket, s3=client, retry=FAST_RETRY)
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    holder.append("ev", events(1), partition_by=["ts"])
    with holder.lock(write=["/ev/ts=2024-01-01T06:30:00"]) as held:
        with pytest.raises(LockedError):
            other.append("ev", events(7), partition_by=["ts"])
        with pytest.raises(LockTimeout):
            other.rename_partition(
                "ev", "ts=2024-01-01T06:30:00", to_partition="ts=2024-01-02T00:00:00", timeout=0
            )
        holder.overwrite("ev", events(2), partition_by=["ts"], fence=held.fence)
    assert holder.read("ev", partitions=["ts=2024-01-01T06:30:00"])["id"].to_pylist() == [2]


def test_a_write_lock_on_a_dataset_named_in_another_unicode_form_keeps_out_its_commits(
    client: Any, bucket: str
) -> None:
    """Dataset names are NFC-normalised (``café`` typed on a keyboard that composes ``é``
    from ``e`` and an accent is the same dataset). A process write-locks ``/café`` spelt
    so; another process's append to ``café`` must be refused while the lock is held, as
    for any other spelling of the name the registry takes."""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    holder = Lake(bucket, s3=client, retry=FAST_RETRY)
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    holder.append(composed, events(1), partition_by=["ts"])
    with holder.lock(write=[f"/{decomposed}"]) as held:
        with pytest.raises(LockedError):
            other.append(decomposed, events(7), partition_by=["ts"])
        holder.append(composed, events(2), partition_by=["ts"], fence=held.fence)
    assert sorted(other.read(composed)["id"].to_pylist()) == [1, 2]
