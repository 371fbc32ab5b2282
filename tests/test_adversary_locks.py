"""Adversarial tests of the path lock (README, "Locks, leases and the bucket policy": "A
``write`` path keeps out every other commit"; docs/ARCHITECTURE.md, "The path lock"). Each
``Lake`` stands for one process."""

from __future__ import annotations

import datetime
import hashlib
import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakelock import DataFile, Lake
from lakelock.errors import (
    InvalidArgumentError,
    InvalidNameError,
    LockedError,
    LockTimeout,
    StaleFenceError,
)
from tests._support import FAST_RETRY
from tests._support.files import registered_unchecked


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


def test_write_locks_taken_again_and_again_leave_a_record_per_path_not_per_grant(
    client: Any, bucket: str
) -> None:
    """A pipeline write-locks the partition it rebuilds, run after run (every rename and
    copy takes such a lock too). The registry keeps one lock record per path and mode
    (FORMAT.md, "The root": it is O(datasets) plus a bounded window and those records), but
    each grant that ended stayed in the root as one more record for good: the root every
    commit of every writer reads and swaps grew by one record per lock taken, for ever. A
    grant ended and superseded by a later conflicting one is refused through that one's
    record: the root must keep one record per path (and the last grant's), and every
    earlier grant's fence stays refused."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.append("ev", events(1), partition_by=["ts"])
    fences = []
    for run in range(8):
        with lake.lock(write=["/ev/ts=2024-01-01T06:30:00"], heartbeat=False) as held:
            lake.overwrite("ev", events(10 + run), partition_by=["ts"], fence=held.fence)
            fences.append(held.fence)
    records = lake.registry.read().lock_fences["lock:ev"]
    assert len(records) <= 2, records
    for stale in fences:
        with pytest.raises(StaleFenceError):
            lake.append("ev", events(99), partition_by=["ts"], fence=stale)
    assert lake.read("ev")["id"].to_pylist() == [17]


def places(place: str, *ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "place": [place] * len(ids)})


def decomposed_file(lake: Lake, place: str, *ids: int) -> DataFile:
    """A file of ``ids`` in partition ``place`` spelt as given (not NFC: lakelock writes no
    such rows), put as another tool would, for ``registry.commit(add=...)``."""
    body = io.BytesIO()
    pq.write_table(pa.table({"id": list(ids)}), body)
    data = body.getvalue()
    key = f"datasets/visits/place={place}/part-{ids[0]}.parquet"
    put = lake.store.put(key, data, mode="create")
    checksum = f"sha256:{hashlib.sha256(data).hexdigest()}"
    return DataFile(
        "visits", key, f"place={place}", len(data), len(ids), checksum, put.etag, put.write_id
    )


def test_a_partition_value_spelt_two_ways_is_one_path_to_the_lock(client: Any, bucket: str) -> None:
    """``place=café`` typed composed on one machine and decomposed on another (a macOS file
    name), or ``place=a%2fb`` beside the registry's ``place=a%2Fb``, print as one partition
    and decode to one value: two writers must not both hold the write lock on it, and a
    file registered into the other spelling must not land while one is held (LockedError;
    the spelling is a partition registered before such values were refused: an append of
    such rows, or a file registered into a new such partition, is refused whatever the
    locks, InvalidNameError: a partition value written is NFC,
    tests/test_adversary_spellings.py)."""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    holder = Lake(bucket, s3=client, retry=FAST_RETRY)
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    holder.append("visits", places(composed, 1), partition_by=["place"])
    registered_unchecked(other.registry, decomposed_file(other, decomposed, 5), commit_id="old")
    with holder.lock(write=[f"/visits/place={composed}"], heartbeat=False):
        with pytest.raises(LockTimeout):
            other.lock(write=[f"/visits/place={decomposed}"], timeout=0).acquire()
        with pytest.raises(InvalidNameError):
            other.append("visits", places(decomposed, 7), partition_by=["place"])
        with pytest.raises(LockedError):  # another tool's file, registered as it is spelt
            other.registry.commit("visits", add=[decomposed_file(other, decomposed, 7)])
    with holder.lock(write=["/visits/place=a%2fb"], heartbeat=False), pytest.raises(LockTimeout):
        other.lock(read=["/visits/place=a%2Fb"], timeout=0).acquire()


def test_a_read_grants_fence_fences_no_write_to_another_spelling_of_its_path(
    client: Any, bucket: str
) -> None:
    """A grant that reads ``/visits/place=café`` (composed) and writes elsewhere must not
    carry a write into the decomposed spelling of that partition: readers of it hold it at
    the same time, so the write would land as if it were exclusive. (The decomposed
    spelling is a partition registered before such values were refused.)"""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.append("visits", places(composed, 1), partition_by=["place"])
    registered_unchecked(lake.registry, decomposed_file(lake, decomposed, 5), commit_id="old")
    read, written = f"/visits/place={composed}", "/visits/place=elsewhere"
    with (
        lake.lock(read=[read], write=[written], heartbeat=False) as held,
        pytest.raises(InvalidArgumentError, match="does not fence a write"),
    ):
        lake.registry.commit("visits", add=[decomposed_file(lake, decomposed, 2)], fence=held.fence)
    assert sorted(lake.read("visits")["id"].to_pylist()) == [1, 5]
