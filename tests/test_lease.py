"""Leases: the server-time model, the pure transitions (model-checked), and the S3 shell with
every outcome forced against the embedded endpoint, under simulated time."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
import threading
import time
import weakref
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelock._clock import ServerClock, TimeBounds, shared_server_clock
from lakelock._fence import Fence
from lakelock._holding import Heartbeat, Lapsed, Owner, holder_valid, provably_expired
from lakelock._layout import lease_key
from lakelock._lease import Lease, read_leases
from lakelock._lease._core import (
    LeaseDoc,
    Take,
    Wait,
    decide_acquire,
    decide_release,
    decide_renew,
    dump_lease,
    initial_lease,
    parse_lease,
)
from lakelock._s3 import IfMatch, ObjectStore
from lakelock.errors import InvalidNameError, LeaseError, LeaseLostError, LockTimeout
from lakelock.testing import S3Endpoint
from tests._support import Refused, wait_until
from tests._support.simtime import EPOCH, SimTime
from tests._support.workers import run_workers


def make_lease(store: ObjectStore, sim: SimTime, name: str = "leader", **kwargs: Any) -> Lease:
    options: dict[str, Any] = {
        "ttl": 30.0,
        "clock": sim.machine(),
        "sleep": sim.sleep,
        "heartbeat": False,  # simulated time: renewals are the test's to make
    }
    options.update(kwargs)
    return Lease(store, name, **options)


def stored(store: ObjectStore, name: str = "leader") -> LeaseDoc:
    return parse_lease(store.get(lease_key(name)).body, name=name, fail=AssertionError)


# --- the server clock --------------------------------------------------------------------------


def test_server_clock_bounds_from_one_date() -> None:
    """One truncated Date gives bounds one second plus the round trip wide around the truth."""
    local = [100.0]
    clock = ServerClock(lambda: local[0], max_drift=0.0)
    clock.observe(EPOCH, sent=99.9, received=100.0)  # true server time in [EPOCH, EPOCH+1)
    bounds = clock.now()
    assert bounds == TimeBounds(EPOCH, EPOCH + 1.1)
    local[0] = 110.0
    assert clock.now() == TimeBounds(EPOCH + 10, EPOCH + 11.1)


def test_server_clock_intersects_samples_below_a_second() -> None:
    """Two samples straddling a tick of the server's clock pin it far below 1 s resolution."""
    clock = ServerClock(lambda: 0.0, max_drift=0.0)
    clock.observe(EPOCH, sent=0.0, received=0.0)  # server in [E, E+1) at local 0
    clock.observe(EPOCH + 1, sent=0.7, received=0.7)  # server in [E+1, E+2) at local 0.7
    assert clock.now() == TimeBounds(EPOCH + 0.3, EPOCH + 1.0)


def test_server_clock_widens_with_drift_and_resets_on_contradiction() -> None:
    """Bounds widen by max_drift per second of age; a contradicting sample replaces them."""
    local = [0.0]
    clock = ServerClock(lambda: local[0], max_drift=0.01)
    clock.observe(EPOCH, sent=0.0, received=0.0)
    local[0] = 100.0
    assert clock.now() == TimeBounds(EPOCH + 99.0, EPOCH + 102.0)
    clock.observe(EPOCH + 500, sent=100.0, received=100.0)  # the server's clock was stepped
    assert clock.resets == 1
    assert clock.now() == TimeBounds(EPOCH + 500, EPOCH + 501)


def test_server_clocks_are_shared_per_store_and_clock() -> None:
    """Leases and locks on one store and clock share one server clock, dropped with the store."""

    class Store:
        pass

    store, clock = Store(), time.monotonic
    shared = shared_server_clock(store, clock)
    assert shared_server_clock(store, clock) is shared
    assert shared_server_clock(store, lambda: 0.0) is not shared
    assert shared_server_clock(Store(), clock) is not shared
    gone = weakref.ref(shared)
    del store, shared
    gc.collect()
    assert gone() is None


def test_server_clock_needs_a_sample() -> None:
    """Without any Date seen there is no server time, and a missing header teaches nothing."""
    clock = ServerClock(lambda: 0.0)
    clock.observe(None, 0.0, 0.0)
    assert not clock.has_sample
    with pytest.raises(RuntimeError):
        clock.now()


#: Epoch seconds as doubles resolve ~2.4e-7 s; at a drift of exactly max_drift the bounds are
#: tight, so rounding may put the truth an ulp outside them.
FLOAT_SLACK = 1e-6


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    offset=st.floats(-1e6, 1e6),
    rate=st.floats(1 - 1e-3, 1 + 1e-3),
    events=st.lists(
        st.tuples(st.floats(0.0, 50.0), st.floats(0.0, 0.5), st.floats(0.0, 1.0)),
        min_size=1,
        max_size=12,
    ),
)
def test_server_clock_bounds_always_hold_the_truth(
    offset: float, rate: float, events: list[tuple[float, float, float]]
) -> None:
    """Property: with true Date samples and drift within max_drift, bounds always hold the truth."""
    local = [0.0]
    clock = ServerClock(lambda: local[0])

    def server_at(t: float) -> float:
        return EPOCH + offset + t * rate

    for gap, rtt, where in events:
        sent = local[0] + gap
        received = sent + rtt
        generated = sent + rtt * where  # when the server stamped its Date
        clock.observe(float(int(server_at(generated))), sent, received)
        local[0] = received
        bounds = clock.now()
        assert bounds.earliest - FLOAT_SLACK <= server_at(local[0]) <= bounds.latest + FLOAT_SLACK
        local[0] += gap
        bounds = clock.now()
        assert bounds.earliest - FLOAT_SLACK <= server_at(local[0]) <= bounds.latest + FLOAT_SLACK


# --- the pure transitions ----------------------------------------------------------------------

ME = Owner("me", "host-a", 1, "test")
THEM = Owner("them", "host-b", 2, None)
AT = TimeBounds(EPOCH + 100.0, EPOCH + 100.5)


def held(owner: Owner, token: int, expires_at: float) -> LeaseDoc:
    return LeaseDoc("leader", token, owner, expires_at - 30, expires_at - 30, expires_at, 30.0)


def test_decide_acquire_cases() -> None:
    """Free, released, expired or own leases are taken with token + 1; live ones mean waiting."""
    # A foreign lease expired by less than the margin is still live: wait until expiry + margin.
    fresh = decide_acquire(initial_lease("leader"), AT, ME, ttl=30, margin=1)
    assert fresh == Take(LeaseDoc("leader", 1, ME, AT.latest, AT.latest, AT.latest + 30, 30))
    released = dataclasses.replace(held(THEM, 6, EPOCH + 200), expires_at=0.0)
    assert isinstance(decision := decide_acquire(released, AT, ME, ttl=30, margin=1), Take)
    assert decision.doc.token == 7
    expired = held(THEM, 6, AT.earliest - 1.01)
    assert isinstance(decision := decide_acquire(expired, AT, ME, ttl=30, margin=1), Take)
    assert decision.doc.token == 7
    within_margin = held(THEM, 6, AT.earliest - 0.99)
    assert decide_acquire(within_margin, AT, ME, ttl=30, margin=1) == Wait(
        within_margin.expires_at + 1, within_margin
    )
    live = held(THEM, 6, EPOCH + 120)
    assert decide_acquire(live, AT, ME, ttl=30, margin=1) == Wait(EPOCH + 121, live)
    mine = held(ME, 6, EPOCH + 120)
    assert isinstance(decision := decide_acquire(mine, AT, ME, ttl=30, margin=1), Take)
    assert decision.doc.token == 7


def test_decide_renew_cases() -> None:
    """Renew extends only our valid lease, never shortening it and keeping the token."""
    mine = held(ME, 3, AT.latest + 1.01)
    renewed = decide_renew(mine, AT, ME, ttl=30, margin=1)
    assert renewed == dataclasses.replace(
        mine, renewed_at=AT.latest, expires_at=AT.latest + 30, ttl=30
    )
    longer = held(ME, 3, AT.latest + 100)
    assert isinstance(r := decide_renew(longer, AT, ME, ttl=30, margin=1), LeaseDoc)
    assert r.expires_at == longer.expires_at
    assert isinstance(decide_renew(held(ME, 3, AT.latest + 0.99), AT, ME, ttl=30, margin=1), Lapsed)
    assert isinstance(decide_renew(held(THEM, 3, EPOCH + 200), AT, ME, ttl=30, margin=1), Lapsed)
    gone = dataclasses.replace(mine, expires_at=0.0)
    assert isinstance(decide_renew(gone, AT, ME, ttl=30, margin=1), Lapsed)


def test_decide_release_keeps_token_and_owner() -> None:
    """Release zeroes the expiry only, and only for our own unreleased lease."""
    mine = held(ME, 3, EPOCH + 200)
    assert decide_release(mine, ME) == dataclasses.replace(mine, expires_at=0.0)
    assert decide_release(held(THEM, 3, EPOCH + 200), ME) is None
    assert decide_release(dataclasses.replace(mine, expires_at=0.0), ME) is None


def test_expiry_predicates_leave_a_two_margin_gap() -> None:
    """Holder's last valid instant and others' first free instant lie two margins apart."""
    expires, margin = EPOCH + 50, 1.0
    assert holder_valid(expires, TimeBounds(expires - 1.01, expires - 1.01), margin)
    assert not holder_valid(expires, TimeBounds(expires - 2, expires - 1.0), margin)
    assert not provably_expired(expires, TimeBounds(expires + 1.0, expires + 5), margin)
    assert provably_expired(expires, TimeBounds(expires + 1.01, expires + 5), margin)
    assert provably_expired(0.0, TimeBounds(0.0, 0.0), margin)


def test_parse_roundtrip_and_refusals() -> None:
    """The lease parser reads what dump writes and refuses anything else, never guessing."""
    doc = held(ME, 3, EPOCH + 200)
    assert parse_lease(dump_lease(doc), name="leader", fail=ValueError) == doc
    good = orjson.loads(dump_lease(doc))
    bad_docs = [
        b"not json",
        b"[1]",
        {**good, "format_version": 2},
        {**good, "format_version": True},
        {**good, "kind": "lakelock.lock-table"},
        {**good, "name": "other"},
        {**good, "token": -1},
        {**good, "token": 1.5},
        {**good, "expires_at": "soon"},
        {**good, "owner": {"id": "x"}},
        {**good, "owner": None},
        {k: v for k, v in good.items() if k != "ttl"},
    ]
    for bad in bad_docs:
        body = bad if isinstance(bad, bytes) else orjson.dumps(bad)
        with pytest.raises(Refused):
            parse_lease(body, name="leader", fail=Refused)


@dataclasses.dataclass
class _ModelOwner:
    owner: Owner
    doc: LeaseDoc | None = None  # what it last wrote: it believes it holds this


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["acquire", "renew", "release", "advance"]),
            st.integers(0, 2),
            st.floats(0.0, 1.0),
            st.floats(0.0, 1.0),
            st.floats(0.0, 20.0),
        ),
        max_size=40,
    )
)
def test_model_at_most_one_valid_holder_and_tokens_increase(
    ops: list[tuple[str, int, float, float, float]],
) -> None:
    """Model check: at most one owner believes it holds the lease; takeovers raise the token."""
    # Three owners, server-time bounds arbitrary but true, writes applied as compare-and-swap;
    # the believer must also be the document's holder.
    ttl, margin = 10.0, 0.5
    owners = [_ModelOwner(Owner(f"o{i}", "h", i)) for i in range(3)]
    current = initial_lease("leader")
    true_time = EPOCH
    tokens = [0]

    def bounds(low_error: float, high_error: float) -> TimeBounds:
        return TimeBounds(true_time - low_error, true_time + high_error)

    for op, who, low_error, high_error, dt in ops:
        actor = owners[who]
        now = bounds(low_error, high_error)
        if op == "advance":
            true_time += dt
        elif op == "acquire":
            decision = decide_acquire(current, now, actor.owner, ttl=ttl, margin=margin)
            if isinstance(decision, Take):
                current = actor.doc = decision.doc
                assert current.token > tokens[-1]
                tokens.append(current.token)
        elif op == "renew" and actor.doc is not None:
            renewed = decide_renew(actor.doc, now, actor.owner, ttl=ttl, margin=margin)
            if isinstance(renewed, Lapsed):
                actor.doc = None
            elif actor.doc == current:  # the CAS succeeds only on an unchanged document
                current = actor.doc = renewed
            else:
                actor.doc = None
        elif op == "release" and actor.doc is not None:
            target = decide_release(actor.doc, actor.owner)
            if target is not None and actor.doc == current:
                current = target
            actor.doc = None
        # Every owner checks its belief with the worst bounds that are still true.
        believers = [
            o
            for o in owners
            if o.doc is not None and holder_valid(o.doc.expires_at, bounds(1.0, 1.0), margin)
        ]
        assert len(believers) <= 1
        for believer in believers:
            assert current.owner == believer.owner
            assert current.token == believer.doc.token if believer.doc else False


# --- the S3 shell ------------------------------------------------------------------------------


def test_first_acquire_creates_the_document(store: ObjectStore, sim: SimTime) -> None:
    """The first acquire creates the lease with token 1, owner details and server-time expiry."""
    lease = make_lease(store, sim, owner_label="nightly")
    assert lease.try_acquire()
    doc = stored(store)
    assert doc.token == lease.token == lease.check() == 1
    assert doc.owner == lease.owner
    assert (doc.owner.host, doc.owner.pid, doc.owner.label) == (
        lease.owner.host,
        os.getpid(),
        "nightly",
    )
    assert EPOCH + 30 <= doc.expires_at <= EPOCH + 31.25
    assert lease.fence == Fence("lease:leader", 1)
    [listed] = read_leases(store)
    assert (listed.key, listed.doc) == ("metastore/leases/leader.json", doc)
    lease.release()


def test_takeover_after_expiry_gives_higher_token(store: ObjectStore, sim: SimTime) -> None:
    """Takeover happens only past expiry + margin, with a higher token; the old holder is lost."""
    old = make_lease(store, sim, "leader")
    new = make_lease(store, sim, "leader")
    old.acquire()
    sim.advance(30.0)  # expires_at <= start+31; +margin; our bound may lag by 1
    assert not new.try_acquire()
    sim.advance(3.0)
    assert new.try_acquire()
    assert new.token == 2 > old.token == 1  # type: ignore[operator]
    with pytest.raises(LeaseLostError) as info:
        old.renew()
    assert (info.value.name, info.value.token) == ("leader", 1)
    with pytest.raises(LeaseLostError):
        old.check()
    assert stored(store).owner == new.owner
    old.release()  # a lost lease needs no release and does not disturb the new holder
    assert stored(store).token == 2
    assert new.check() == 2
    new.release()


def test_renew_after_loss_fails_even_without_takeover(store: ObjectStore, sim: SimTime) -> None:
    """A lease lapsed by the holder's clock cannot be renewed, though nobody took it."""
    # Loss is reported once to on_lost, and on every later use.
    losses: list[LeaseLostError] = []
    lease = make_lease(store, sim, on_lost=losses.append)
    lease.acquire()
    sim.advance(29.5)  # our latest bound is now within the margin of expiry; nobody took it
    with pytest.raises(LeaseLostError):
        lease.renew()
    with pytest.raises(LeaseLostError):
        lease.renew()
    with pytest.raises(LeaseLostError):
        _ = lease.fence
    assert len(losses) == 1
    assert losses[0].token == 1
    assert not lease.held
    assert stored(store).owner == lease.owner  # nothing was written by the failed renewals
    lease.release()
    assert stored(store).expires_at == 0.0


def test_renew_extends_from_now(store: ObjectStore, sim: SimTime) -> None:
    """Renewals keep one holder valid past its first TTL with the same token."""
    holder = make_lease(store, sim)
    other = make_lease(store, sim)
    holder.acquire()
    for _ in range(4):
        sim.advance(20.0)
        holder.renew()
        assert not other.try_acquire()
    assert holder.check() == 1
    assert stored(store).expires_at >= sim.server + 29
    holder.release()


def test_release_then_acquire_keeps_tokens_increasing(store: ObjectStore, sim: SimTime) -> None:
    """Release keeps token and owner; each later acquire, by anyone, takes the next token."""
    a = make_lease(store, sim)
    b = make_lease(store, sim)
    tokens = []
    for lease in (a, b, a, a, b):
        lease.acquire(timeout=0)
        tokens.append(lease.check())
        lease.release()
        doc = stored(store)
        assert (doc.token, doc.expires_at, doc.owner) == (tokens[-1], 0.0, lease.owner)
    assert tokens == [1, 2, 3, 4, 5]
    with pytest.raises(LeaseError) as info:
        a.renew()
    assert not isinstance(info.value, LeaseLostError)


def test_acquire_waits_for_expiry_then_takes_over(store: ObjectStore, sim: SimTime) -> None:
    """A blocked acquire polls within poll_interval and takes over just after expiry + margin."""
    holder = make_lease(store, sim)
    holder.acquire()
    start = sim.server
    waiter = make_lease(store, sim)
    waiter.acquire(timeout=100, poll_interval=5.0)
    waited = sim.server - start
    assert 31.0 - 1.0 < waited <= 31.0 + 1.0 + 0.5
    assert max(sim.slept) <= 5.0
    assert waiter.token == 2
    waiter.release()


def test_acquire_sees_a_release_at_the_next_poll(store: ObjectStore, sim: SimTime) -> None:
    """A released lease is taken at the waiter's next poll, long before its expiry."""
    holder = make_lease(store, sim)
    holder.acquire()

    def sleep_and_release(seconds: float) -> None:
        sim.sleep(seconds)
        holder.release()

    waiter = make_lease(store, sim, sleep=sleep_and_release)
    start = sim.server
    waiter.acquire(timeout=100, poll_interval=2.0)
    assert sim.server - start == 2.0
    assert waiter.token == 2
    waiter.release()


def test_acquire_times_out(store: ObjectStore, sim: SimTime) -> None:
    """A held lease is not acquired within the timeout: LockTimeout with target and timeout."""
    holder = make_lease(store, sim)
    holder.acquire()
    waiter = make_lease(store, sim, poll_interval=3.0)
    start = sim.server
    with pytest.raises(LockTimeout) as info:
        waiter.acquire(timeout=10)
    assert isinstance(info.value, TimeoutError)
    assert (info.value.target, info.value.timeout) == ("leader", 10)
    assert sim.server - start == 10.0
    assert waiter.token is None
    holder.release()


def _put_foreign(store: ObjectStore, token: int, expires_at: float) -> None:
    """Overwrite the lease as another process would after a takeover."""
    doc = LeaseDoc("leader", token, THEM, expires_at - 30, expires_at - 30, expires_at, 30.0)
    etag = store.head(lease_key("leader")).etag
    store.put(lease_key("leader"), dump_lease(doc), mode=IfMatch(etag))


@pytest.mark.parametrize(
    ("kind", "head_errors"), [("lost_ack", 0), ("lost_ack_5xx", 0), ("lost_ack", 3)]
)
def test_lost_ack_on_acquire_is_resolved(
    s3: S3Endpoint, store: ObjectStore, sim: SimTime, kind: Any, head_errors: int
) -> None:
    """A takeover whose acknowledgement is lost is recognised by its write id: held, once.
    Where the adapter cannot resolve it (every SDK attempt of its read-back fails:
    ``head_errors``), our own read of the lease does."""
    make_lease(store, sim).acquire().release()
    lease = make_lease(store, sim)
    s3.inject(kind, operation="PutObject", prefix="metastore/leases/", count=1)
    if head_errors:
        s3.inject("error", operation="HeadObject", count=head_errors)
    lease.acquire(timeout=0)
    assert s3.faults()["injected"] == {kind: 1, **({"error": head_errors} if head_errors else {})}
    assert lease.check() == 2
    assert stored(store).owner == lease.owner
    lease.release()


def test_failed_takeover_with_unknown_outcome_is_not_held(
    s3: S3Endpoint, store: ObjectStore, sim: SimTime
) -> None:
    """A takeover that failed with an unknown outcome and did not land leaves us waiting."""
    make_lease(store, sim).acquire().release()
    lease = make_lease(store, sim)
    s3.inject("error", operation="PutObject", prefix="metastore/leases/", count=3)
    assert not lease.try_acquire()
    assert stored(store).token == 1
    assert lease.try_acquire()
    assert lease.check() == 2
    lease.release()


@pytest.mark.parametrize("kind", ["lost_ack", "lost_ack_5xx"])
def test_lost_ack_on_renew_is_resolved(
    s3: S3Endpoint, store: ObjectStore, sim: SimTime, kind: Any
) -> None:
    """A renewal whose acknowledgement is lost is recognised by its write id."""
    lease = make_lease(store, sim)
    lease.acquire()
    sim.advance(10)
    s3.inject(kind, operation="PutObject", prefix="metastore/leases/", count=1)
    lease.renew()
    assert s3.faults()["injected"] == {kind: 1}
    assert lease.expires_at == stored(store).expires_at >= sim.server + 29
    s3.inject("lost_ack", operation="PutObject", prefix="metastore/leases/", count=1)
    s3.inject("error", operation="HeadObject", count=3)
    sim.advance(10)
    s3.reset_stats()
    lease.renew()  # the adapter could not tell; the lease's own read found its write id
    assert s3.stats()["PutObject"] == 2  # the write and the SDK's retry: nothing re-sent
    assert lease.expires_at == stored(store).expires_at >= sim.server + 29
    lease.release()


def test_renew_that_did_not_land_is_retried(
    s3: S3Endpoint, store: ObjectStore, sim: SimTime
) -> None:
    """A renewal refused with 5xx (nothing applied) finds our unchanged lease and writes again."""
    lease = make_lease(store, sim)
    lease.acquire()
    sim.advance(10)
    s3.inject("error", operation="PutObject", prefix="metastore/leases/", count=3)
    lease.renew()
    assert s3.faults()["injected"] == {"error": 3}
    assert stored(store).expires_at >= sim.server + 29
    lease.release()


def test_renew_into_a_takeover_is_lost(store: ObjectStore, sim: SimTime) -> None:
    """A renewal whose CAS fails because another owner wrote the lease reports the loss."""
    lease = make_lease(store, sim)
    lease.acquire()
    _put_foreign(store, token=2, expires_at=sim.server + 30)
    with pytest.raises(LeaseLostError) as info:
        lease.renew()
    assert info.value.token == 1
    lease.release()
    assert stored(store).owner == THEM  # release did not touch the new holder's lease


@pytest.mark.parametrize("kind", ["lost_ack", "lost_ack_5xx"])
def test_lost_ack_on_release_is_resolved(
    s3: S3Endpoint, store: ObjectStore, sim: SimTime, kind: Any
) -> None:
    """A release whose acknowledgement is lost still releases; the next owner takes over at once."""
    lease = make_lease(store, sim).acquire()
    s3.inject(kind, operation="PutObject", prefix="metastore/leases/", count=1)
    lease.release()
    assert s3.faults()["injected"] == {kind: 1}
    assert stored(store).expires_at == 0.0
    other = make_lease(store, sim)
    assert other.try_acquire()
    assert other.token == 2
    other.release()


def test_unknown_format_version_is_refused_and_kept(store: ObjectStore, sim: SimTime) -> None:
    """A lease written by a future version is never interpreted or overwritten."""
    body = orjson.dumps({**orjson.loads(dump_lease(held(THEM, 9, EPOCH))), "format_version": 2})
    store.put(lease_key("leader"), body)
    lease = make_lease(store, sim)
    with pytest.raises(LeaseError) as info:
        lease.acquire(timeout=0)
    assert info.value.name == "leader"
    assert store.get(lease_key("leader")).body == body
    with pytest.raises(LeaseError):
        read_leases(store)


@pytest.mark.parametrize("name", ["", "a/b", "tab\there", "nul\x00", "del\x7f", "\ud800"])
def test_invalid_lease_names(store: ObjectStore, name: str) -> None:
    """Empty names, '/', control characters and non-UTF-8 are refused before any request."""
    with pytest.raises(InvalidNameError):
        Lease(store, name)
    assert store.stats.total == 0


def test_invalid_durations(store: ObjectStore) -> None:
    """A TTL must exceed two margins; margins, polls and timeouts must be sane."""
    bad: list[tuple[dict[str, float], str]] = [
        ({"ttl": 2.0, "margin": 1.0}, "ttl"),
        ({"margin": -1.0}, "margin"),
        ({"poll_interval": 0.0}, "poll_interval"),
    ]
    for kwargs, field in bad:
        with pytest.raises(ValueError, match=field):
            Lease(store, "x", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        Lease(store, "x").acquire(timeout=-1)


def test_context_manager_releases_and_reports_loss(store: ObjectStore, sim: SimTime) -> None:
    """``with lease`` releases; a loss inside raises on exit unless another error is leaving."""
    lease = make_lease(store, sim)
    with lease as held_lease:
        assert held_lease.check() == 1
    assert stored(store).expires_at == 0.0
    with pytest.raises(LeaseLostError), lease:
        sim.advance(40)

    def lose_and_fail() -> None:
        sim.advance(40)
        raise KeyError("the block's own error wins")

    with pytest.raises(KeyError), lease:
        lose_and_fail()
    with pytest.raises(LeaseError):
        lease.check()
    assert stored(store).token == 3


def test_acquire_while_held_is_refused(store: ObjectStore, sim: SimTime) -> None:
    """A held lease object refuses a second acquire; try_acquire is idempotent."""
    lease = make_lease(store, sim)
    lease.acquire()
    with pytest.raises(LeaseError):
        lease.acquire()
    assert lease.try_acquire()
    assert lease.token == 1
    lease.release()
    lease.release()  # idempotent


def test_skewed_machine_clocks_do_not_matter(store: ObjectStore, sim: SimTime) -> None:
    """Local clocks hours apart, drifting within the allowance, decide expiry alike."""
    ahead = make_lease(store, sim, clock=sim.machine(base=7200.0, rate=1.0005))
    behind = make_lease(store, sim, clock=sim.machine(base=-7200.0, rate=0.9995))
    ahead.acquire()
    sim.advance(29.0)
    assert not behind.try_acquire()
    sim.advance(4.0)
    assert behind.try_acquire()
    behind.release()


def test_heartbeat_renews_then_reports_loss(store: ObjectStore) -> None:
    """Real time: the heartbeat renews, then reports a takeover once via on_lost and stops."""
    lost = threading.Event()
    losses: list[LeaseLostError] = []

    def on_lost(error: LeaseLostError) -> None:
        losses.append(error)
        lost.set()

    lease = Lease(store, "hb", ttl=2.4, margin=0.15, heartbeat=True, on_lost=on_lost)
    lease.acquire()
    first_expiry = lease.expires_at
    assert first_expiry is not None
    beat = lease._heartbeat
    assert beat is not None
    assert beat.interval == pytest.approx(0.75)
    wait_until(lambda: beat.beats >= 2)
    assert lease.expires_at is not None
    assert lease.expires_at > first_expiry
    assert lease.check() == 1
    doc = dataclasses.replace(stored(store, "hb"), owner=THEM, token=2)
    etag = store.head(lease_key("hb")).etag
    store.put(lease_key("hb"), dump_lease(doc), mode=IfMatch(etag))
    assert lost.wait(10)
    wait_until(lambda: not beat.alive)
    assert len(losses) == 1
    with pytest.raises(LeaseLostError):
        lease.renew()
    lease.release()
    assert stored(store, "hb").owner == THEM


def test_heartbeat_survives_transient_errors(s3: S3Endpoint, bucket: str) -> None:
    """Real time: a failing renewal (S3 errors) is retried at the next beat, not a loss."""
    # One attempt per request: the SDK's own backoff would sleep in real time.
    client = s3.client(retries={"mode": "standard", "total_max_attempts": 1})
    lease = Lease(ObjectStore(client, bucket), "hb", ttl=1.5, margin=0.15, heartbeat=True)
    lease.acquire()
    beat = lease._heartbeat
    assert beat is not None
    s3.inject("error", operation="PutObject", prefix="metastore/leases/", count=1)
    s3.inject("error", operation="GetObject", prefix="metastore/leases/", count=1)
    wait_until(lambda: s3.faults()["injected"].get("error", 0) == 2)
    wait_until(lambda: beat.beats >= 1)
    assert lease.check() == 1
    lease.release()
    assert not beat.alive


def test_heartbeat_stops_only_on_loss() -> None:
    """Heartbeat: plain lakelock errors are retried at the next beat; LeaseLostError stops it."""
    outcomes: list[BaseException | None] = [
        LeaseError("renewal lost every race", name="x"),
        None,
        LeaseLostError("taken over", name="x", token=1),
    ]
    calls: list[int] = []

    def renew() -> None:
        calls.append(1)
        outcome = outcomes[min(len(calls), len(outcomes)) - 1]
        if outcome is not None:
            raise outcome

    beat = Heartbeat(renew, 0.01, name="test-heartbeat")
    beat.start()
    wait_until(lambda: not beat.alive)
    assert (len(calls), beat.beats) == (3, 1)


def test_dropped_lease_is_not_kept_alive_by_its_heartbeat(store: ObjectStore) -> None:
    """A lease dropped without release is not renewed by its heartbeat: it expires."""
    # Real time: the heartbeat holds the lease weakly.
    lease = Lease(store, "dropped", ttl=1.5, margin=0.15, heartbeat=True)
    lease.acquire()
    beat = lease._heartbeat
    assert beat is not None
    before = beat.beats  # 0, unless a loaded machine kept us from here past the first beat
    del lease
    gc.collect()  # tracebacks kept by the adapter's retry state form cycles with our frames
    wait_until(lambda: not beat.alive)
    assert beat.beats <= before + 1  # at most the beat already under way when we let go
    assert stored(store, "dropped").expires_at > 0  # not released: it simply expires


def test_heartbeat_rejects_nonpositive_interval() -> None:
    """A heartbeat needs a positive interval."""
    with pytest.raises(ValueError, match="interval"):
        Heartbeat(lambda: None, 0.0, name="x")


# --- many processes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("processes", "holdings"), [(2, 3), pytest.param(4, 5, marks=pytest.mark.slow)]
)
def test_processes_contending_for_one_lease_never_overlap(
    s3: S3Endpoint, bucket: str, processes: int, holdings: int
) -> None:
    """Real processes: holding intervals of one lease never overlap; tokens rise with time.
    (Two processes take turns, one abandoning a holding, in the default run; four, longer,
    in the slow one.)"""
    # Four processes take one lease in turns, releasing it, and once abandoning it (stopping
    # renewal, as a paused holder would): the next holder then starts more than two margins
    # after the old one last believed it held the lease. Each process shares one server clock
    # across its leases, so bounds are tight and the margins decide (see the worker).
    ttl, margin = 1.0, 0.1
    args = {"url": s3.url, "bucket": bucket, "holdings": holdings, "ttl": ttl, "margin": margin}
    results = run_workers("lease", processes, args)
    intervals = sorted((r for records in results for r in records), key=lambda r: r["start"])
    # A holding starved past its TTL before vouching is skipped.
    assert len(intervals) >= processes * (holdings - 1)
    assert [r["kind"] for r in intervals].count("abandon") == 1
    assert sorted(r["token"] for r in intervals) == [r["token"] for r in intervals]
    assert len({r["token"] for r in intervals}) == len(intervals)
    for before, after in itertools.pairwise(intervals):
        assert before["end"] < after["start"], (before, after)
    # The stated margin, in true server time (the endpoint's clock is this machine's): a
    # holder vouches only until `margin` before expiry; a takeover of a lease that was not
    # released happens only `margin` after it.
    for record in intervals:
        assert record["end_wall"] < record["expires_at"] - margin, record
    [abandoned] = [i for i, r in enumerate(intervals) if r["kind"] == "abandon"]
    if abandoned + 1 < len(intervals):
        taker = intervals[abandoned + 1]
        assert taker["acquired_wall"] > intervals[abandoned]["expires_at"] + margin, taker
        assert taker["start"] - intervals[abandoned]["end"] > 2 * margin


def test_one_lease_name_in_two_unicode_spellings_is_one_lease(
    store: ObjectStore, sim: SimTime
) -> None:
    """A lease name is normalised to NFC as dataset names are: "café" typed with a
    precomposed "é" and with "e" plus a combining accent is one lease (one document, one
    fence). Before, each spelling had a document of its own, and two processes spelling the
    name differently both held the "one" leader lease at once."""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    first = make_lease(store, sim, name=composed)
    second = make_lease(store, sim, name=decomposed)
    assert first.try_acquire()
    try:
        assert not second.try_acquire()
        assert second.name == first.name == composed
        assert first.fence == Fence(f"lease:{decomposed}", 1)  # a fence spelt by hand too
        assert [listed.key for listed in read_leases(store)] == [lease_key(composed)]
    finally:
        first.release()


def test_a_slow_takeover_record_brings_the_first_renewal_forward(
    store: ObjectStore, sim: SimTime
) -> None:
    """Recording the takeover in the registry took longer than a beat (a slow store, a
    loaded machine): the lease's expiry was decided before that, so the heartbeat's first
    renewal is due a beat after it, at once, not a whole beat after ``acquire`` returned
    (by when the lease could have lapsed: its first fence refused). Without the delay the
    first renewal is a beat away, as before."""

    class SlowRecord:
        def record_takeover(self, fence: Fence) -> None:
            sim.advance(250.0)  # more than a beat of a 600 s lease (about 200 s)

    lease = make_lease(store, sim, ttl=600.0, heartbeat=True, takeovers=SlowRecord())
    lease.acquire()
    beat = lease._heartbeat
    assert beat is not None
    assert beat.interval > 150.0
    assert beat.first == 0.0
    wait_until(lambda: beat.beats >= 1)
    assert lease.expires_at is not None
    assert lease.expires_at > sim.server + 500.0  # renewed after the record's 250 s
    lease.release()

    prompt = make_lease(store, sim, name="prompt", ttl=600.0, heartbeat=True)
    prompt.acquire()
    assert prompt._heartbeat is not None
    assert prompt._heartbeat.first == pytest.approx(prompt._heartbeat.interval)
    prompt.release()
