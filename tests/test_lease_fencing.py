"""Leases and the registry together: a paused holder whose lease was taken over cannot
commit with its old fencing token. Time is simulated (server Date headers and local clocks,
see tests/_support/simtime.py): nothing sleeps."""

from __future__ import annotations

import pytest

from lakelock._lease import Lease
from lakelock._registry import Registry
from lakelock._s3 import ObjectStore
from lakelock.errors import LeaseLostError, StaleFenceError
from tests._support import FAST_RETRY
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
