"""A write-lock holder that pauses past its grant and comes back: promise broken today."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake, RetryPolicy
from lakelock._pathlock import DistributedPathLock
from lakelock.errors import LakelockError
from tests._support.simtime import SimTime


def day(number: int, ids: tuple[int, ...]) -> pa.Table:
    return pa.table({"id": list(ids), "day": [number] * len(ids)})


def sim_lake(client: Any, bucket: str, sim: SimTime) -> Lake:
    retry = RetryPolicy(max_attempts=10, sleep=sim.sleep, clock=sim.machine())
    return Lake(bucket, s3=client, retry=retry)


def test_a_paused_holders_overwrite_does_not_drop_an_append_that_landed_after_its_lock_ended(
    client: Any, bucket: str, sim: SimTime
) -> None:
    """FORMAT "Write locks in force": a held write lock keeps everybody else out, and once
    its grant ended (expired, cleared by ``unlock``) "a grant that ended never holds again".
    A holder that took its fence, paused past its grant (a GC pause, a suspended VM), and
    comes back commits an overwrite of the locked partition with that fence: it lands today
    and silently replaces the rows another pipeline appended, and was acknowledged, after
    the lock ended - the acknowledged-data loss write locks exist to prevent. Promised: the
    ended grant's fence is refused (StaleFenceError or LockedError), nothing committed."""
    holder = sim_lake(client, bucket, sim)
    holder.append("lk", day(1, (1, 2)), partition_by=["day"])
    locks = DistributedPathLock(
        holder.store,
        clock=sim.machine(),
        sleep=sim.sleep,
        heartbeat=False,
        write_locks=holder.registry,
    )
    held = locks.lock(write=["/lk/day=1"], ttl=30).acquire()
    fence = held.fence  # taken before the pause
    sim.advance(40.0)  # the holder is paused; its grant expires
    other = sim_lake(client, bucket, sim)
    other.append("lk", day(1, (9,)), partition_by=["day"])  # clears the lock, lands
    with pytest.raises(LakelockError):
        holder.overwrite("lk", day(1, (3,)), partition_by=["day"], fence=fence)
    assert sorted(other.read("lk")["id"].to_pylist()) == [1, 2, 9]
