"""Partition copy and rename: create-only copies, one commit, under the path lock."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._pathlock import DistributedPathLock
from lakelock._registry import CommitResult, _fencing
from lakelock.errors import (
    CommitConflictError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidNameError,
    LockTimeout,
    PartitionByMismatchError,
    SchemaMismatchError,
    StaleFenceError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, StallAndRace, forgotten_by_age
from tests._support.simtime import SimTime

ROOT_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def sales(lake: Lake) -> None:
    """The lake of every test here holds a partitioned dataset: year=2024 in five files,
    year=2025 in one."""
    for n in range(5):
        lake.append(
            "sales", pa.table({"id": [n, n + 10], "year": [2024, 2024]}), partition_by=["year"]
        )
    lake.append("sales", pa.table({"id": [99], "year": [2025]}), partition_by=["year"])


def ids(lake: Lake, dataset: str = "sales") -> list[int]:
    return sorted(lake.read(dataset)["id"].to_pylist())


def test_rename_within_a_dataset(lake: Lake) -> None:
    """Rename moves every file and row of the partition in one commit, between the commits
    that take and release its write lock."""
    before = lake.registry.read()
    result = lake.rename_partition("sales", "year=2024", to_partition="year=2023")
    after = lake.registry.read()
    assert result.version == before.version + 2 == after.version - 1
    assert [c.operation for c in after.commits[-3:]] == ["lock", "rename", "unlock"]
    assert set(after.datasets["sales"].partitions) == {"year=2023", "year=2025"}
    assert lake.read("sales", partitions=["year=2023"])["year"].to_pylist() == [2023] * 10
    assert ids(lake) == sorted([*range(5), *range(10, 15), 99])


def test_copy_to_another_dataset(lake: Lake) -> None:
    """Copy leaves the source and creates the destination dataset with the same schema."""
    lake.copy_partition("sales", "year=2025", to_dataset="archive")
    assert ids(lake, "archive") == [99]
    assert ids(lake) == sorted([*range(5), *range(10, 15), 99])
    snapshot = lake.registry.read()
    assert snapshot.datasets["archive"].schema == snapshot.datasets["sales"].schema


def test_rename_across_datasets_is_one_commit(lake: Lake) -> None:
    """Across datasets, removing and adding land in the same version (one CAS)."""
    result = lake.rename_partition("sales", "year=2024", to_dataset="archive")
    snapshot = lake.registry.read()
    assert "year=2024" not in snapshot.datasets["sales"].partitions
    assert snapshot.datasets["archive"].partitions["year=2024"].updated_version == result.version
    assert snapshot.datasets["sales"].updated_version == result.version
    (record,) = [c for c in snapshot.commits if c.id == result.commit_id]
    assert (record.added, record.removed) == (5, 5)


def test_bad_requests_are_typed_errors(lake: Lake) -> None:
    """Same place, unknown source, taken destination, mismatched columns: clear errors,
    nothing written."""
    objects = len(list(lake.store.list("datasets/")))
    with pytest.raises(InvalidNameError):
        lake.rename_partition("sales", "year=2024")
    with pytest.raises(DatasetNotFoundError):
        lake.rename_partition("sales", "year=1999", to_partition="year=2000")
    with pytest.raises(DatasetNotFoundError):
        lake.copy_partition("nothing", "year=1999", to_dataset="other")
    with pytest.raises(CommitConflictError):
        lake.rename_partition("sales", "year=2024", to_partition="year=2025")
    with pytest.raises(InvalidNameError):
        lake.copy_partition("sales", "year=2024", to_partition="year=2030/month=1")
    with pytest.raises(InvalidNameError):
        lake.copy_partition("sales", "year=2024/../x", to_partition="year=2030")
    assert len(list(lake.store.list("datasets/"))) == objects


def test_interrupted_rename_resumes(lake: Lake) -> None:
    """A copy left at the destination by a crashed attempt does not stop the rename: the
    file is copied again under a fresh name, and the leftover stays unreferenced (vacuum)."""
    (first, *_) = lake.registry.files("sales", partitions=["year=2024"])
    leftover = first.key.replace("year=2024", "year=2023")
    lake.store.copy(first.key, leftover)
    lake.rename_partition("sales", "year=2024", to_partition="year=2023")
    moved = lake.registry.files("sales", partitions=["year=2023"])
    assert len(moved) == 5
    assert leftover not in {f.key for f in moved}
    assert ids(lake) == sorted([*range(5), *range(10, 15), 99])


def test_foreign_object_at_destination_is_left_alone(lake: Lake) -> None:
    """Another writer's file at a destination key is neither overwritten nor adopted."""
    (first, *_) = lake.registry.files("sales", partitions=["year=2024"])
    foreign = first.key.replace("year=2024", "year=2023")
    lake.store.put(foreign, b"someone else's")
    lake.rename_partition("sales", "year=2024", to_partition="year=2023")
    assert lake.store.get(foreign).body == b"someone else's"
    assert foreign not in {f.key for f in lake.registry.files("sales")}
    assert ids(lake) == sorted([*range(5), *range(10, 15), 99])


def test_readers_never_see_half_a_rename(lake: Lake) -> None:
    """Snapshots taken while renames run show the partition at exactly one place, whole."""
    stop = threading.Event()
    seen: list[tuple[int, int]] = []

    def reader() -> None:
        while not stop.is_set():
            snapshot = lake.registry.read()
            parts = snapshot.datasets["sales"].partitions
            moving = [p for p in ("year=2024", "year=2023", "year=2022") if p in parts]
            seen.append((len(moving), sum(parts[p].record_count for p in moving)))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        watching = pool.submit(reader)
        lake.rename_partition("sales", "year=2024", to_partition="year=2023")
        lake.rename_partition("sales", "year=2023", to_partition="year=2022")
        stop.set()
        watching.result()
    assert seen
    assert set(seen) == {(1, 10)}


def test_superseded_lock_holder_cannot_commit(lake: Lake, sim: SimTime) -> None:
    """A holder whose grant expired and was superseded by a conflicting grant that
    committed is refused by the registry (StaleFenceError). (Simulated time: the second
    machine's wait for the first grant to expire passes at once.)"""
    paused, later = (
        DistributedPathLock(
            lake.store, ttl=5, heartbeat=False, clock=sim.machine(), sleep=sim.sleep
        )
        for _ in range(2)
    )
    zombie = paused.lock(write=["/sales/year=2024"]).acquire()
    with later.lock(write=["/sales/year=2024"], timeout=60) as fresh:
        assert sum(sim.slept) >= 5  # it waited, in simulated time, for the grant to expire
        lake.registry.commit("sales", properties={"by": "fresh"}, fence=fresh.fence)
    with pytest.raises(StaleFenceError):
        lake.registry.commit("sales", properties={"by": "zombie"}, fence=zombie._fence("sales"))
    assert lake.registry.read().datasets["sales"].properties == {"by": "fresh"}


def test_a_superseded_lock_holder_is_refused_however_long_it_was_paused(
    lake: Lake, sim: SimTime
) -> None:
    """A holder paused past the registry's retention (0 s here: any later commit is past
    it) comes back after a newer conflicting holder committed and another commit sealed
    the root. It is still refused (StaleFenceError), and the newer holder's data stays.
    Before, sealing dropped the newer grant's record as older than the retention, and the
    zombie's overwrite replaced the newer holder's rows with its own."""
    lake.configure(retention=0)
    paused, later = (
        DistributedPathLock(
            lake.store, ttl=5, heartbeat=False, clock=sim.machine(), sleep=sim.sleep
        )
        for _ in range(2)
    )
    zombie = paused.lock(write=["/sales/year=2024"]).acquire()
    with later.lock(write=["/sales/year=2024"], timeout=60) as fresh:
        lake.overwrite(
            "sales",
            pa.table({"id": [7], "year": [2024]}),
            partitions=["year=2024"],
            partition_by=["year"],
            fence=fresh.fence,
        )
    lake.append("sales", pa.table({"id": [8], "year": [2025]}), partition_by=["year"])
    with pytest.raises(StaleFenceError):
        lake.overwrite(
            "sales",
            pa.table({"id": [666], "year": [2024]}),
            partitions=["year=2024"],
            partition_by=["year"],
            fence=zombie._fence("sales"),
        )
    assert ids(lake) == [7, 8, 99]


@pytest.mark.parametrize("lock_timeout", [0, 3])
def test_a_move_waits_for_its_path_lock_no_longer_than_the_lakes_lock_timeout(
    lake: Lake, sim: SimTime, lock_timeout: float
) -> None:
    """A copy or rename meeting its path lock held waits the Lake's ``lock_timeout`` for it,
    as a commit meeting a write lock does: 0 fails at once, with LockTimeout and nothing
    copied or committed. (Simulated time: before, each waited 60 s whatever the Lake's.)"""
    holder = DistributedPathLock(
        lake.store, ttl=600, heartbeat=False, clock=sim.machine(), sleep=sim.sleep
    )
    held = holder.lock(write=["/sales/year=2024"]).acquire()
    mover = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY, lock_timeout=lock_timeout)
    mover.locks = DistributedPathLock(
        mover.store, write_locks=mover.registry.internals, clock=sim.machine(), sleep=sim.sleep
    )
    before = lake.registry.read()
    objects = {o.key for o in lake.store.list("datasets/")}
    try:
        for move in (
            lambda: mover.rename_partition("sales", "year=2024", to_partition="year=2023"),
            lambda: mover.copy_partition("sales", "year=2024", to_dataset="archive"),
        ):
            sim.slept.clear()
            with pytest.raises(LockTimeout) as caught:
                move()
            assert caught.value.timeout == lock_timeout
            assert sum(sim.slept) <= lock_timeout
        sim.slept.clear()
        with pytest.raises(LockTimeout):  # a timeout of the call's own still wins
            mover.copy_partition("sales", "year=2024", to_dataset="archive", timeout=5)
        assert 5 - 1 <= sum(sim.slept) <= 5
    finally:
        held.release()
        mover.close()
    assert lake.registry.read().version == before.version
    assert {o.key for o in lake.store.list("datasets/")} == objects


def test_two_processes_rename_the_same_partition(s3: S3Endpoint, lake: Lake) -> None:
    """Two processes rename one partition to different places: exactly one wins; the other
    gets a clear error; registry and bucket agree."""
    env = {**os.environ, "PYTHONPATH": str(ROOT_DIR)}
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests._partition_workers", s3.url, lake.bucket, target],
            cwd=ROOT_DIR,
            env=env,
            stdout=subprocess.PIPE,
        )
        for target in ("year=2030", "year=2031")
    ]
    outcomes = [orjson.loads(child.communicate(timeout=120)[0]) for child in children]
    assert sorted(o["ok"] for o in outcomes) == [False, True]
    (loser,) = [o for o in outcomes if not o["ok"]]
    assert loser["error"] == "DatasetNotFoundError"
    parts = set(lake.registry.read().datasets["sales"].partitions)
    assert len(parts & {"year=2030", "year=2031"}) == 1
    assert "year=2024" not in parts
    present = {o.key for o in lake.store.list("datasets/")}
    assert all(f.key in present for f in lake.registry.files("sales"))
    assert ids(lake) == sorted([*range(5), *range(10, 15), 99])


def test_copy_records_the_source_fence(lake: Lake) -> None:
    """A cross-dataset copy records its read grant on the source dataset too, so a zombie
    copier superseded by a writer of the source cannot commit what it read."""
    lake.copy_partition("sales", "year=2025", to_dataset="archive")
    fences = lake.registry.read().lock_fences
    (source,) = fences["lock:sales"]
    assert (source.read, source.write) == (("/sales/year=2025",), ())
    (target,) = fences["lock:archive"]
    assert target.write == ("/archive/year=2025",)


def test_with_grant_records_dropped_by_age_the_paused_holder_overwrites_the_newer(
    lake: Lake, sim: SimTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above with ``lock_fences_kept`` switched back to dropping records older
    than the retention: the zombie's overwrite is accepted. What a mutation test of the
    rule starts from."""
    monkeypatch.setattr(_fencing, "lock_fences_kept", forgotten_by_age)
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        test_a_superseded_lock_holder_is_refused_however_long_it_was_paused(lake, sim)
    assert ids(lake) == [8, 99, 666]


def data_keys(lake: Lake) -> list[str]:
    return sorted(o.key for o in lake.store.list("datasets/"))


@pytest.mark.parametrize(
    ("archive", "columns", "error"),
    [
        (pa.table({"id": [1], "month": [1]}), ["month"], PartitionByMismatchError),
        (pa.table({"id": ["x"], "year": [2023]}), ["year"], SchemaMismatchError),
        (pa.table({"other": [1.0], "year": [2023]}), ["year"], SchemaMismatchError),
    ],
    ids=["partitioned-otherwise", "column-of-another-type", "column-it-lacks"],
)
@pytest.mark.parametrize("rename", [False, True], ids=["copy", "rename"])
def test_a_move_that_does_not_fit_its_destination_writes_nothing(
    lake: Lake, archive: pa.Table, columns: list[str], error: type[Exception], rename: bool
) -> None:
    """A copy or rename into a dataset partitioned otherwise, with a column of another type,
    or lacking a column (without schema_mode="merge") is refused before its first copy:
    no objects left under the destination that nothing references."""
    lake.append("archive", archive, partition_by=columns)
    before = data_keys(lake)
    move = lake.rename_partition if rename else lake.copy_partition
    with pytest.raises(error):
        move("sales", "year=2024", to_dataset="archive")
    assert data_keys(lake) == before
    assert ids(lake) == sorted([*range(5), *range(10, 15), 99])


@pytest.mark.parametrize("rename", [False, True], ids=["copy", "rename"])
def test_schema_mode_merge_moves_a_partition_into_a_dataset_lacking_a_column(
    lake: Lake, rename: bool
) -> None:
    """schema_mode="merge" (as for append) lets a copy or rename add the source's columns
    to the destination's schema; any other mode is InvalidArgumentError, nothing written."""
    lake.append("archive", pa.table({"other": [1.5], "year": [2023]}), partition_by=["year"])
    before = data_keys(lake)
    move = lake.rename_partition if rename else lake.copy_partition
    with pytest.raises(InvalidArgumentError):
        move("sales", "year=2025", to_dataset="archive", schema_mode="add")  # type: ignore[arg-type]
    assert data_keys(lake) == before
    move("sales", "year=2025", to_dataset="archive", schema_mode="merge")
    schema = lake.registry.read().datasets["archive"].schema
    assert schema is not None
    assert "id" in schema.names
    moved = lake.read("archive", partitions=["year=2025"])
    assert (moved["id"].to_pylist(), moved["other"].to_pylist()) == ([99], [None])


def _copy_racing(
    lake: Lake, stall_and_race: StallAndRace, *, vacuum: bool
) -> CommitResult | CommitConflictError:
    """``copy_partition`` of sales' year=2024 into archive, its first server-side copy held
    at the endpoint (after the copy read its version) while the partition is overwritten
    without a lock (and the files replaced vacuumed, with ``vacuum``)."""
    lake.configure(vacuum_floor=0)  # nobody else writes this lake: vacuum may go to now

    def copy() -> CommitResult | CommitConflictError:
        try:
            return lake.copy_partition("sales", "year=2024", to_dataset="archive")
        except CommitConflictError as refused:
            return refused

    def overwrite() -> None:
        lake.overwrite("sales", pa.table({"id": [7], "year": [2024]}), partition_by=["year"])
        if vacuum:
            report = lake.vacuum(enforce_retention=False, older_than=0, dry_run=False)
            assert report.deleted  # the copy's sources among them

    outcome, _ = stall_and_race(copy, overwrite, operation="UploadPartCopy", prefix="")
    assert ids(lake) == [7, 99]
    assert isinstance(outcome, CommitResult | CommitConflictError)
    return outcome


def test_a_copy_racing_an_overwrite_of_its_source_copies_the_version_it_read(
    lake: Lake, stall_and_race: StallAndRace
) -> None:
    """A copy reads its source partition under a read lock, which keeps out other locks'
    writers but not commits made without a lock (docs/ARCHITECTURE.md, "The path lock"): an
    overwrite of the source lands between the copy's read and its commit. The copy is then
    of the version it read, whole (every row of it, none of the overwrite's), in objects of
    its own, none the source's: vacuum deleting what the overwrite replaced leaves the
    destination whole."""
    copied = _copy_racing(lake, stall_and_race, vacuum=False)
    assert isinstance(copied, CommitResult)
    assert ids(lake, "archive") == sorted([*range(5), *range(10, 15)])
    archived = {f.key for f in lake.registry.files("archive")}
    assert all(key.startswith("datasets/archive/") for key in archived)
    lake.vacuum(enforce_retention=False, older_than=0, dry_run=False)
    assert ids(lake, "archive") == sorted([*range(5), *range(10, 15)])


def test_a_copy_whose_source_was_replaced_and_vacuumed_is_refused_whole(
    lake: Lake, stall_and_race: StallAndRace
) -> None:
    """The same race, and vacuum (its window shortened to nothing) deletes the files the
    overwrite replaced before the copy reads them: the copy is refused with a
    ``CommitConflictError`` naming the file gone, and nothing is committed (no archive
    dataset, no part of the partition). Before, the endpoint's answer to the copy of a
    missing object carried no S3 error and the copy failed as ``NotS3Error``, "the endpoint
    does not speak S3"."""
    refused = _copy_racing(lake, stall_and_race, vacuum=True)
    assert isinstance(refused, CommitConflictError)
    assert "is gone" in str(refused)
    assert "archive" not in lake.registry.read().datasets
