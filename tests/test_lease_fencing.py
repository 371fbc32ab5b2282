"""Leases and the registry together: a paused holder whose lease was taken over cannot
commit with its old fencing token. Time is simulated (server Date headers and local clocks,
see tests/_support/simtime.py): nothing sleeps."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._fence import Fence
from lakelock._layout import INTENT_PREFIX, LEASES_PREFIX, REGISTRY_KEY
from lakelock._lease import Lease, read_leases
from lakelock._registry import Registry
from lakelock._registry._document import RegistryDoc, parse_registry
from lakelock._s3 import ObjectStore
from lakelock.advanced import FoldPolicy
from lakelock.errors import CommitError, InvalidNameError, LeaseLostError, StaleFenceError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, StallAndRace
from tests._support.simtime import SimTime


def test_paused_holder_cannot_commit_after_takeover(store: ObjectStore) -> None:
    """Takeover after expiry raises the token; the old holder's commit is StaleFenceError;
    the old holder's own renew reports the loss."""
    sim = SimTime()
    sim.attach(store.client)
    registry = Registry(store, retry=FAST_RETRY)
    paused = Lease(store, "leader", ttl=5, clock=sim.machine(), sleep=sim.sleep, heartbeat=False)
    assert paused.try_acquire()
    old_fence = paused.fence
    registry.commit("sales", properties={"by": "first"}, fence=old_fence)

    sim.advance(60)  # the holder is paused (GC, swap, a stopped VM) far past its TTL
    taker = Lease(
        store, "leader", ttl=5, clock=sim.machine(base=7.0), sleep=sim.sleep, heartbeat=False
    )
    assert taker.try_acquire()
    assert taker.token is not None
    assert taker.token > old_fence.token
    registry.commit("sales", properties={"by": "taker"}, fence=taker.fence)

    # The paused holder wakes up believing nothing happened and commits with its old token.
    with pytest.raises(StaleFenceError) as info:
        registry.commit("sales", properties={"by": "zombie"}, fence=old_fence)
    assert (info.value.token, info.value.current) == (old_fence.token, taker.token)
    assert registry.read().datasets["sales"].properties == {"by": "taker"}
    with pytest.raises(LeaseLostError):
        paused.renew()


def test_release_then_acquire_keeps_fences_increasing(store: ObjectStore) -> None:
    """Every holder after a release commits with a higher token, so all are accepted in
    order and an earlier holder's token stays refused."""
    registry = Registry(store, retry=FAST_RETRY)
    tokens = []
    for n in range(3):
        with Lease(store, "leader", ttl=30) as lease:
            registry.commit("sales", properties={"n": str(n)}, fence=lease.fence)
            tokens.append(lease.fence.token)
    assert tokens == sorted(set(tokens))
    assert len(tokens) == 3
    with pytest.raises(StaleFenceError):
        registry.commit("sales", fence=("lease:leader", tokens[0]))


# -- a takeover is recorded in the registry (FORMAT.md, "Lease takeovers") ------------------


def _fences(lake: Lake) -> dict[str, int]:
    return dict(Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY).registry.read().fences)


def test_each_acquisition_is_one_commit_and_renewals_none(lake: Lake, sim: SimTime) -> None:
    """Taking a lease records its token in the registry before ``acquire`` returns, by one
    commit that names no dataset and changes nothing else; renewing and releasing it commit
    nothing (the cost of a takeover: one compare-and-swap of the root)."""
    lake.append("sales", pa.table({"id": [1]}))
    before = lake.registry.read()
    lease = lake.lease("leader", ttl=5, clock=sim.machine(), sleep=sim.sleep, heartbeat=False)
    lease.acquire()
    after = lake.registry.read()
    assert after.version == before.version + 1
    assert after.fences == {"lease:leader": 1}
    assert after.datasets.keys() == {"sales"}
    assert after.datasets["sales"].updated_version == before.version
    record = after.commits[-1]
    assert (record.dataset, record.operation, record.added) == ("", "takeover", 0)
    for _ in range(3):
        sim.advance(1)
        lease.renew()
    lease.release()
    assert lake.registry.read().version == after.version
    with lake.lease("leader", ttl=5, clock=sim.machine(), sleep=sim.sleep, heartbeat=False):
        assert _fences(lake) == {"lease:leader": 2}
    assert lake.registry.read().version == after.version + 1
    assert lake.history("sales")[0].version == before.version
    with pytest.raises(InvalidNameError):  # only a lease's takeover names no dataset
        lake.registry.commit("", fence=("lease:leader", 3))


def test_a_takeover_that_cannot_be_recorded_is_not_acquired(
    s3: S3Endpoint, lake: Lake, sim: SimTime
) -> None:
    """The registry cannot record a takeover (every swap of its root fails): ``acquire``
    raises the registry's typed error instead of handing out a token the registry would
    still let the previous holder's commits past; the lease document is released again (its
    token kept), so another acquirer takes it at once, with a higher token, and records it."""
    lake.append("sales", pa.table({"id": [1]}))
    s3.inject("error", operation="PutObject", prefix=REGISTRY_KEY)
    lease = lake.lease("leader", ttl=5, clock=sim.machine(), sleep=sim.sleep, heartbeat=False)
    with pytest.raises(CommitError):
        lease.acquire(timeout=0)
    assert not lease.held
    (stored,) = read_leases(lake.store)
    assert (stored.doc.token, stored.doc.released) == (1, True)
    s3.clear_faults()
    other = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    taker = other.lease("leader", ttl=5, clock=sim.machine(base=3.0), sleep=sim.sleep)
    assert taker.try_acquire()
    try:
        assert taker.fence.token == 2
        assert _fences(lake) == {"lease:leader": 2}
    finally:
        taker.release()


def test_a_lease_given_back_by_a_write_whose_outcome_is_unknown_is_released(
    s3: S3Endpoint, client: Any, bucket: str, sim: SimTime, stall_and_race: StallAndRace
) -> None:
    """The registry cannot record a takeover, and every attempt of the write that gives the
    lease document back loses its connection before it lands (its outcome unknown to the
    writer): the give-back reads the document back, finds it still ours, and writes it
    released again, as a release does, so the next acquirer takes the lease at once. Before,
    it wrote once and left the document held: the next acquirer waited out the TTL."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, fold_policy=FoldPolicy(hedge=0))
    lake.append("sales", pa.table({"id": [1]}))
    lease = lake.lease("leader", ttl=5, clock=sim.machine(), sleep=sim.sleep, heartbeat=False)

    def acquire() -> CommitError | Lease:
        try:
            return lease.acquire(timeout=0)
        except CommitError as error:
            return error

    def break_the_next_writes() -> None:
        # The lease document is taken (token 1) and the takeover's intent held: from here
        # the root cannot be written, and the SDK's three attempts of one lease write fail.
        s3.inject("error", operation="PutObject", prefix=REGISTRY_KEY)
        s3.inject("reset", operation="PutObject", prefix=LEASES_PREFIX, count=3)

    outcome, _ = stall_and_race(acquire, break_the_next_writes, prefix=INTENT_PREFIX)
    assert isinstance(outcome, CommitError)
    assert s3.faults()["injected"]["reset"] == 3
    (stored,) = read_leases(lake.store)
    assert (stored.doc.token, stored.doc.released) == (1, True)


def test_a_takeover_whose_record_lost_its_answer_is_held(
    s3: S3Endpoint, lake: Lake, sim: SimTime
) -> None:
    """The swap that records a takeover lands but its answer is lost: the registry finds
    its record landed, and the lease is held with the fence recorded."""
    s3.inject("lost_ack", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    lease = lake.lease("leader", ttl=5, clock=sim.machine(), sleep=sim.sleep, heartbeat=False)
    lease.acquire(timeout=0)
    assert s3.faults()["injected"] == {"lost_ack": 1}
    assert lease.fence.token == 1
    assert _fences(lake) == {"lease:leader": 1}


def test_the_fences_never_go_back(lake: Lake) -> None:
    """Two acquirers race and the one with the lower token records its takeover last (it
    was paused in between): that record is refused (StaleFenceError, naming the token
    recorded) and the registry keeps the higher token, so the later holder's commits still
    pass and the earlier holder's are still refused."""
    takeovers = lake.registry.internals
    takeovers.record_takeover(Fence("lease:leader", 3))
    with pytest.raises(StaleFenceError) as info:
        takeovers.record_takeover(Fence("lease:leader", 2))
    assert (info.value.token, info.value.current) == (2, 3)
    assert _fences(lake) == {"lease:leader": 3}
    lake.append("sales", pa.table({"id": [1]}), fence=("lease:leader", 3))
    with pytest.raises(StaleFenceError):
        lake.append("sales", pa.table({"id": [2]}), fence=("lease:leader", 2))


def test_a_lease_on_a_new_lake_creates_its_registry_with_the_lakes_settings(
    client: Any, bucket: str
) -> None:
    """A lease taken on a bucket with no lake yet records its takeover by creating the
    lake's registry: no dataset, the settings of the Lake the lease came from (as its first
    commit would have), so that Lake's writers go on as before."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, retention="30d")
    with lake.lease("leader", ttl=30, heartbeat=False) as lease:
        snapshot = lake.registry.read()
        assert (snapshot.version, dict(snapshot.datasets)) == (1, {})
        assert snapshot.fences == {"lease:leader": 1}
        assert snapshot.settings is not None
        assert snapshot.settings.retention == 30 * 86400
        lake.append("sales", pa.table({"id": [1]}), fence=lease.fence)
    again = Lake(bucket, s3=client, retry=FAST_RETRY, retention="30d")
    assert again.read("sales").to_pylist() == [{"id": 1}]


def test_a_takeover_folded_by_another_process_is_held(
    lake: Lake, stall_and_race: StallAndRace
) -> None:
    """The swap that would record a takeover is held up while another process commits: that
    process's swap folds the takeover's intent (it names no dataset) with its own commit, and
    the lease is acquired on that record."""
    other = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    lease = lake.lease("leader", ttl=30, heartbeat=False)
    held, _ = stall_and_race(
        lambda: lease.acquire(timeout=0), lambda: other.append("sales", pa.table({"id": [1]}))
    )
    try:
        assert held is lease
        assert _fences(lake) == {"lease:leader": 1}
        assert [c.operation for c in other.registry.read().commits] == ["takeover", "append"]
    finally:
        lease.release()


@pytest.mark.parametrize("paused_at", ["intent", "swap"])
def test_a_holder_paused_before_its_takeover_is_recorded_never_lowers_the_fence(
    client: Any, bucket: str, sim: SimTime, stall_and_race: StallAndRace, paused_at: str
) -> None:
    """Two acquirers race: the first takes the lease (token 1) and is paused before its
    takeover is recorded; past its TTL the second takes it over (token 2) and records that.
    When the first wakes, its record cannot lower the registry's fence. Paused before its
    intent was written, its record is refused: its acquire fails with StaleFenceError and it
    does not hold the lease. Paused at its swap, its intent was folded before the second's
    in one swap, and the lease it gets has lapsed by then. Either way token 2 stays recorded
    and token 1 is refused."""
    # Not hedged: the intent's one PUT is the one paused.
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, fold_policy=FoldPolicy(hedge=0))
    first = lake.lease("leader", ttl=5, clock=sim.machine(), sleep=sim.sleep, heartbeat=False)
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    second = other.lease(
        "leader", ttl=5, clock=sim.machine(base=7.0), sleep=sim.sleep, heartbeat=False
    )

    def acquire_first() -> Lease | StaleFenceError:
        try:
            return first.acquire(timeout=0)
        except StaleFenceError as refused:
            return refused

    def take_over() -> bool:
        sim.advance(60)
        return second.try_acquire()

    prefix = INTENT_PREFIX if paused_at == "intent" else REGISTRY_KEY
    outcome, took = stall_and_race(acquire_first, take_over, prefix=prefix)
    assert took
    assert second.fence.token == 2
    if paused_at == "intent":
        assert isinstance(outcome, StaleFenceError)
        assert (outcome.token, outcome.current) == (1, 2)
        assert not first.held
        (stored,) = read_leases(lake.store)
        assert (stored.doc.token, stored.doc.owner) == (2, second.owner)
    else:
        assert outcome is first
        with pytest.raises(LeaseLostError):
            first.fence  # noqa: B018 - reading it is the check
    assert _fences(lake) == {"lease:leader": 2}
    with pytest.raises(StaleFenceError):
        lake.append("sales", pa.table({"id": [1]}), fence=("lease:leader", 1))


def test_a_takeover_on_a_mirroring_lake_mirrors_nothing(
    client: Any, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A lake that keeps Iceberg views records a lease's takeover like any other: the
    takeover changes no dataset, so nothing is mirrored for it (no view of a dataset named
    ``""`` attempted, no error logged)."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, mirror=["iceberg"])
    with caplog.at_level("ERROR", logger="lakelock"), lake.lease("leader", heartbeat=False):
        assert lake.auto_mirror is not None
        assert lake.auto_mirror.wait(timeout=30)
    assert _fences(lake) == {"lease:leader": 1}
    assert [r.getMessage() for r in caplog.records] == []


def test_a_takeover_whose_record_left_the_window_is_settled_by_its_token(
    client: Any, bucket: str, stall_and_race: StallAndRace
) -> None:
    """The swap that would record a takeover is held up while another process folds the
    takeover's intent and commits more than the root's window of commit ids after it (its
    fate pruned, its record gone from the window; a takeover names no dataset, so no
    commit-id index keeps it). Let go, the swap is refused, and the takeover finds the token
    the root records is its own: the lease is held on that record, with no second swap
    recording it again (before, the takeover was taken as absent and applied a second time:
    a swap for nothing, and a retry out of budget gave up a lease the registry held)."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, commit_window=3)
    lake.append("sales", pa.table({"id": [0]}))
    # Its folds move the watermark up to the newest intent listed (no lag).
    other = Lake(
        bucket,
        s3=client,
        retry=FAST_RETRY,
        commit_window=3,
        fold_policy=FoldPolicy(watermark_lag=0),
    )
    lease = lake.lease("leader", ttl=30, heartbeat=False)

    def commit_past_the_window() -> RegistryDoc:
        for n in range(5):
            other.append("sales", pa.table({"id": [n + 1]}))
        return parse_registry(lake.store.get(REGISTRY_KEY).body)

    held, moved = stall_and_race(lambda: lease.acquire(timeout=0), commit_past_the_window)
    try:
        assert held is lease
        assert moved.fences == {"lease:leader": 1}  # the fold recorded it
        # Only the token records it: the window moved on, the fate is pruned.
        assert "takeover" not in [c.operation for c in moved.commits]
        assert all(f.version > 2 for f in moved.fates)
        root = other.registry.read()
        assert root.version == moved.version  # no second swap recorded it again
        assert root.fences == {"lease:leader": 1}
    finally:
        lease.release()
