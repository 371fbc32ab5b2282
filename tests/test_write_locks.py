"""A write lock keeps every commit of anyone else out of its paths while it is held
(FORMAT.md, "Write locks in force"): a plain append into a locked partition is refused with
LockedError naming the holder, or waits up to the lake's ``lock_timeout``; a grant that ended
(released, or expired with its holder gone) stops keeping anyone out; and none of it costs a
request while no lock is held over what a commit writes."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Fence, Lake, RetryPolicy
from lakelock._pathlock import DistributedPathLock
from lakelock.errors import (
    CommitConflictError,
    InvalidArgumentError,
    LockedError,
    StaleFenceError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.simtime import SimTime


def day(number: int, ids: tuple[int, ...] = (1, 2)) -> pa.Table:
    return pa.table({"id": list(ids), "day": [number] * len(ids)})


def rows_of(lake: Lake, number: int) -> list[int]:
    table = lake.read("lk", partitions=[{"day": number}])
    return sorted(table["id"].to_pylist())


def test_a_plain_append_into_a_write_locked_partition_is_refused(client: Any, bucket: str) -> None:
    """While another process holds a write lock on ``/lk/day=1``, a plain ``lake.append``
    into that partition is refused with LockedError naming the holder (it used to commit,
    and the holder's overwrite then silently replaced it: acknowledged data dropped); so are
    an overwrite and a delete there. Other partitions stay open, and the holder commits
    under its fence. Once released, the append lands."""
    holder = Lake(bucket, s3=client, retry=FAST_RETRY)
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    holder.append("lk", day(1), partition_by=["day"])
    with holder.lock(write=["/lk/day=1"]) as held:
        with pytest.raises(LockedError) as info:
            other.append("lk", day(1, (7,)), partition_by=["day"])
        locked = info.value
        assert isinstance(locked, CommitConflictError)
        assert f":{os.getpid()} " in locked.holder
        assert (locked.token, locked.paths, locked.dataset) == (held.token, ("/lk/day=1",), "lk")
        with pytest.raises(LockedError):
            other.overwrite("lk", day(1, (8,)), partition_by=["day"])
        with pytest.raises(LockedError):
            other.delete("lk", partitions=[{"day": 1}])
        with pytest.raises(LockedError):  # the whole dataset writes the locked partition too
            other.delete("lk", partitions="all")
        other.append("lk", day(2), partition_by=["day"])  # not locked
        holder.overwrite("lk", day(1, (3,)), partition_by=["day"], fence=held.fence)
        assert rows_of(other, 1) == [3]
    other.append("lk", day(1, (7,)), partition_by=["day"])
    assert rows_of(holder, 1) == [3, 7]
    assert rows_of(holder, 2) == [1, 2]


def test_a_read_lock_keeps_out_only_other_lock_writers(client: Any, bucket: str) -> None:
    """A read lock does not keep plain commits out (only other lock requests that write in
    its lineage): an append into a read-locked partition lands."""
    holder = Lake(bucket, s3=client, retry=FAST_RETRY)
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    holder.append("lk", day(1), partition_by=["day"])
    with holder.lock(read=["/lk"]):
        other.append("lk", day(1, (5,)), partition_by=["day"])
    assert rows_of(holder, 1) == [1, 2, 5]


def test_no_lock_held_costs_no_request(s3: S3Endpoint, client: Any, bucket: str) -> None:
    """Checking for write locks costs a commit no request when none is held over what it
    writes: an append makes the same requests of the root (and none of a lock table) after
    another process's plain commit, after it took a write lock on another partition of the
    dataset (held meanwhile), and after it released it: the check reads the root the commit
    reads anyway."""
    holder = Lake(bucket, s3=client, retry=FAST_RETRY)
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    holder.append("lk", day(1), partition_by=["day"])
    other.append("lk", day(2), partition_by=["day"])

    def append() -> dict[str, int]:
        """An append into day 3, from a process that read the root since the holder's last
        commit: its requests of the root and of lock tables."""
        other.registry.read()
        s3.reset_stats()
        other.append("lk", day(3), partition_by=["day"])
        return {
            area: count
            for area, count in s3.areas().items()
            if area.endswith(" root") or "locks" in area
        }

    holder.append("lk", day(5), partition_by=["day"])
    baseline = append()
    assert baseline == {"PutObject root": 1}
    with holder.lock(write=["/lk/day=4"]):
        assert append() == baseline
    assert append() == baseline


def sim_lake(client: Any, bucket: str, sim: SimTime, **options: Any) -> Lake:
    """A lake whose waits and clocks are the simulation's."""
    retry = RetryPolicy(max_attempts=10, sleep=sim.sleep, clock=sim.machine())
    return Lake(bucket, s3=client, retry=retry, **options)


def sim_lock(lake: Lake, sim: SimTime) -> DistributedPathLock:
    """The lake's path lock on simulated time, with no heartbeat: a holder that stops
    renewing, as a crashed one does."""
    return DistributedPathLock(
        lake.store,
        clock=sim.machine(),
        sleep=sim.sleep,
        heartbeat=False,
        write_locks=lake.registry.internals,
    )


def test_a_commit_waits_up_to_the_lock_timeout_for_the_holder(
    client: Any, bucket: str, sim: SimTime
) -> None:
    """With ``lock_timeout``, a commit a held write lock keeps out waits that long (in
    polls, reading the lock table) and then raises LockedError saying how long it waited;
    a holder whose grant ran out (it stopped renewing: crashed) keeps it out only until the
    table shows the grant expired, then the commit clears the lock and lands."""
    holder = sim_lake(client, bucket, sim)
    holder.append("lk", day(1), partition_by=["day"])
    held = sim_lock(holder, sim).lock(write=["/lk/day=1"], ttl=30).acquire()
    patient = sim_lake(client, bucket, sim, lock_timeout=5)
    start = sim.server
    with pytest.raises(LockedError) as info:
        patient.append("lk", day(1, (7,)), partition_by=["day"])
    assert info.value.timeout == 5
    assert sim.server - start == pytest.approx(5.0)
    assert "waited 5 s" in str(info.value)
    waiter = sim_lake(client, bucket, sim, lock_timeout=60)
    waiter.append("lk", day(1, (7,)), partition_by=["day"])
    assert 30 < sim.server - start < 40  # the grant's 30 s, its margins and a poll
    assert rows_of(holder, 1) == [1, 2, 7]
    [record] = holder.registry.read().lock_fences["lock:lk"]
    assert (record.token, record.held) == (held.token, False)
    held.release()


def test_a_crashed_holders_lock_is_cleared_by_the_next_commit(
    client: Any, bucket: str, sim: SimTime
) -> None:
    """A write lock whose holder crashed (never released, its grant expired) does not keep
    commits out for ever: the first commit it would refuse reads the lock table, finds the
    grant gone, clears the lock in the registry and lands, without waiting."""
    holder = sim_lake(client, bucket, sim)
    holder.append("lk", day(1), partition_by=["day"])
    sim_lock(holder, sim).lock(write=["/lk"], ttl=30).acquire()  # never released
    sim.advance(40.0)
    other = sim_lake(client, bucket, sim)
    start = sim.server
    other.append("lk", day(1, (9,)), partition_by=["day"])
    assert sim.server == start  # no wait
    assert rows_of(other, 1) == [1, 2, 9]
    operations = [c.operation for c in other.registry.read().commits]
    assert operations[-3:] == ["lock", "unlock", "append"]


def test_a_paused_holders_overwrite_does_not_replace_what_landed_after_its_lock_was_cleared(
    client: Any, bucket: str, sim: SimTime
) -> None:
    """A holder that took its fence, paused past its grant (whose lock another pipeline's
    append then cleared and landed in) and comes back has its fenced overwrite refused with
    StaleFenceError (``current`` its own token), nothing committed: the append survives."""
    holder = sim_lake(client, bucket, sim)
    holder.append("lk", day(1), partition_by=["day"])
    held = sim_lock(holder, sim).lock(write=["/lk/day=1"], ttl=30).acquire()
    fence = held.fence  # taken before the pause
    sim.advance(40.0)  # paused: the grant expires
    other = sim_lake(client, bucket, sim)
    other.append("lk", day(1, (9,)), partition_by=["day"])  # clears the lock, lands
    with pytest.raises(StaleFenceError) as info:
        holder.overwrite("lk", day(1, (3,)), partition_by=["day"], fence=fence)
    stale = info.value
    assert (stale.name, stale.token, stale.current) == ("lock:lk", fence.token, fence.token)
    assert rows_of(other, 1) == [1, 2, 9]
    assert "overwrite" not in [c.operation for c in other.registry.read().commits]


def test_a_released_grants_fence_commits_no_more(client: Any, bucket: str) -> None:
    """Once its holder released it, a write grant's fence kept by the caller is refused
    (StaleFenceError): an ended grant never holds again, even with no other lock since."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.append("lk", day(1), partition_by=["day"])
    with lake.lock(write=["/lk/day=1"]) as held:
        fence = held.fence
    with pytest.raises(StaleFenceError):
        lake.append("lk", day(1, (5,)), partition_by=["day"], fence=fence)
    assert rows_of(lake, 1) == [1, 2]


def test_a_cleared_grant_cannot_register_again(client: Any, bucket: str) -> None:
    """A ``lock`` commit of a grant already cleared (its registration landing late) is
    refused with StaleFenceError, so it keeps nobody out: an ``unlock`` of a grant with no
    record yet records it ended."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.append("lk", day(1), partition_by=["day"])
    fence = Fence("lock:lk", 7, (), ("/lk/day=1",))
    lake.registry.internals.release_write_locks((fence,))
    with pytest.raises(StaleFenceError):
        lake.registry.internals.hold_write_locks((fence,))
    Lake(bucket, s3=client, retry=FAST_RETRY).append("lk", day(1, (4,)), partition_by=["day"])
    assert rows_of(lake, 1) == [1, 2, 4]


def test_a_read_grants_fence_fences_no_write(client: Any, bucket: str) -> None:
    """A fence fences only what its grant writes: two readers hold one path at once, so a
    commit under a read grant's fence would land as if the path were held exclusively while
    another reader commits under its own. It is refused (InvalidArgumentError naming why)
    before any file is written (an operation) or anything committed (``registry.commit``),
    as is the read half of a grant that writes elsewhere; the grant's written paths, and a
    copy's source (read, nothing written there), commit as before."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.append("lk", day(1), partition_by=["day"])
    files = lake.write("lk", day(1, (6,)), partition_by=["day"])
    before = lake.registry.read().version
    objects = {o.key for o in lake.store.list("datasets/")}
    with lake.lock(read=["/lk/day=1"]) as held, lake.lock(read=["/lk/day=1"]) as other:
        for fence in (held.fence, other.fence):
            with pytest.raises(InvalidArgumentError, match="only reads"):
                lake.append("lk", day(1, (5,)), partition_by=["day"], fence=fence)
            with pytest.raises(InvalidArgumentError, match="only reads"):
                lake.registry.commit("lk", add=files, fence=fence)
    assert {o.key for o in lake.store.list("datasets/")} == objects  # no file written
    assert lake.registry.read().version == before
    with lake.lock(read=["/lk/day=1"], write=["/lk/day=2"]) as mixed:
        with pytest.raises(InvalidArgumentError, match=r"writes \['/lk/day=1'\]"):
            lake.registry.commit("lk", add=files, fence=mixed.fence)
        lake.append("lk", day(2, (7,)), partition_by=["day"], fence=mixed.fence)
    lake.copy_partition("lk", "day=1", to_dataset="copied")
    assert rows_of(lake, 1) == [1, 2]
    assert rows_of(lake, 2) == [7]


def test_a_write_grant_fences_every_write_under_the_paths_it_writes(
    client: Any, bucket: str
) -> None:
    """The read-grant refusal leaves a write grant's own writes alone wherever they fall
    under what it writes: a partition below the locked path (a grant on ``day=1`` of a
    dataset partitioned by day and hour), the whole dataset (a grant on ``/n``: appends,
    properties, a delete of everything, a restore), a grant that reads the dataset and
    writes one partition of it, and a lock path spelt without its leading slash and with a
    trailing one."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    hours = pa.table({"id": [1], "day": [1], "hour": [2]})
    lake.append("n", hours, partition_by=["day", "hour"])
    with lake.lock(write=["/n/day=1"]) as held:
        lake.append("n", hours, partition_by=["day", "hour"], fence=held.fence)
        lake.delete("n", partitions=["day=1/hour=2"], fence=held.fence)
        lake.append("n", hours, partition_by=["day", "hour"], fence=held.fence)
        lake.append("n", hours, partition_by=["day", "hour"], fence=held.fence)
        assert not lake.compact("n", fence=held.fence).empty
    with lake.lock(write=["/n"]) as held:
        kept = lake.append("n", hours, partition_by=["day", "hour"], fence=held.fence)
        lake.set_properties("n", {"owner": "etl"}, fence=held.fence)
        lake.delete("n", partitions="all", fence=held.fence)
        lake.restore("n", version=kept.version, fence=held.fence)
    with lake.lock(read=["/n"], write=["/n/day=1"]) as held:
        lake.append("n", hours, partition_by=["day", "hour"], fence=held.fence)
    with lake.lock(write=["n/day=1/"]) as held:
        lake.append("n", hours, partition_by=["day", "hour"], fence=held.fence)
    assert lake.read("n").num_rows == 5  # 3 restored, 2 appended after
