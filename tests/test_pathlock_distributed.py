"""The distributed path lock: lock-table transforms checked exhaustively and by a model, the S3
shell with every outcome forced under simulated time, and real processes contending."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelock._clock import DATE_RESOLUTION, TimeBounds
from lakelock._fence import Fence
from lakelock._holding import Lapsed, Owner, holder_valid
from lakelock._layout import lock_table_key
from lakelock._pathlock import (
    DistributedPathLock,
    LockRequest,
    PathLockHandle,
    read_lock_tables,
    requests_conflict,
)
from lakelock._pathlock._table import (
    Blocked,
    Granted,
    Holder,
    LockTable,
    dataset_of,
    dump_table,
    empty_table,
    grant,
    live_holders,
    parse_table,
    release_holder,
    renew_holder,
    split_by_dataset,
)
from lakelock._s3 import IfMatch, ObjectStore
from lakelock.errors import InvalidNameError, LeaseError, LeaseLostError, LockTimeout
from lakelock.testing import S3Endpoint
from tests._support import REPO, Refused, wait_until
from tests._support.simtime import EPOCH, SimTime
from tests._support.workers import run_workers

ME = Owner("me", "host-a", 1)
THEM = Owner("them", "host-b", 2)
AT = TimeBounds(EPOCH + 100.0, EPOCH + 100.5)


# --- datasets and documents --------------------------------------------------------------------


def test_requests_split_by_dataset_in_order() -> None:
    """Requests are cut by dataset in sorted order; the root and control characters are refused."""
    request = LockRequest(read=["/b/x", "/a"], write=["/b/y/z", "c/"])
    assert split_by_dataset(request) == {
        "a": LockRequest(read=["/a"]),
        "b": LockRequest(read=["/b/x"], write=["/b/y/z"]),
        "c": LockRequest(write=["/c"]),
    }
    assert list(split_by_dataset(request)) == ["a", "b", "c"]
    assert dataset_of("/sales/year=2024") == "sales"
    assert lock_table_key("sales") == "metastore/locks/sales.json"
    with pytest.raises(InvalidNameError):
        dataset_of("/")
    with pytest.raises(InvalidNameError):
        dataset_of("/sa\x01les/x")


def _holder(
    owner: Owner,
    token: int,
    expires_at: float,
    *,
    read: tuple[str, ...] = (),
    write: tuple[str, ...] = ("/d/a",),
) -> Holder:
    return Holder(
        f"{owner.id}-{token}", token, owner, frozenset(read), frozenset(write), 0.0, expires_at
    )


def test_table_roundtrip_and_refusals() -> None:
    """The lock-table parser reads what dump writes and refuses broken invariants."""
    table = LockTable(
        "d",
        9,
        (
            _holder(ME, 7, EPOCH + 5, read=("/d/b",), write=()),
            _holder(THEM, 8, EPOCH + 6, read=("/d/c",), write=("/d/a/x",)),
        ),
    )
    assert parse_table(dump_table(table), dataset="d", fail=Refused) == table
    good = orjson.loads(dump_table(table))
    first = good["holders"][0]
    bad_docs = [
        {**good, "format_version": 2},
        {**good, "kind": "lakelock.lease"},
        {**good, "dataset": "e"},
        {**good, "next_token": 8},
        {**good, "holders": {}},
        {**good, "holders": [{**first, "read": ["/e/b"]}]},
        {**good, "holders": [{**first, "read": ["/d/b/"]}]},
        {**good, "holders": [{**first, "read": [], "write": []}]},
        {**good, "holders": [first, first]},
        {**good, "holders": [first, {**good["holders"][1], "token": 7}]},
        {**good, "holders": [{**first, "token": 0}]},
    ]
    for bad in bad_docs:
        with pytest.raises(Refused):
            parse_table(orjson.dumps(bad), dataset="d", fail=Refused)


# --- the transforms ----------------------------------------------------------------------------

TREE = ("/d", "/d/a", "/d/b", "/d/a/x", "/d/a/y")


def _requests() -> list[LockRequest]:
    """Every request of one or two paths of TREE, each read or written."""
    found = []
    for size in (1, 2):
        for paths in itertools.combinations(TREE, size):
            for modes in itertools.product("rw", repeat=size):
                reads = [p for p, m in zip(paths, modes, strict=True) if m == "r"]
                writes = [p for p, m in zip(paths, modes, strict=True) if m == "w"]
                found.append(LockRequest(reads, writes))
    return found


def test_grant_blocks_exactly_the_conflicting_requests() -> None:
    """Exhaustive: a live holder blocks a grant iff the lineage rule says they conflict."""
    # Every pair of 1-2 path requests on a five-path tree; an expired holder never blocks and
    # is dropped from the granted table.
    requests = _requests()
    assert len(requests) == 50
    ttl, margin = 30.0, 1.0
    for held_request, asked in itertools.product(requests, repeat=2):
        held = grant(
            empty_table("d"), held_request, THEM, AT, ttl=ttl, margin=margin, holder_id="h"
        )
        assert isinstance(held, Granted)
        decision = grant(held.table, asked, ME, AT, ttl=ttl, margin=margin, holder_id="me")
        if requests_conflict(held_request, asked):
            assert decision == Blocked((held.holder,), held.holder.expires_at + margin)
        else:
            assert isinstance(decision, Granted)
            assert decision.table.holders == (held.holder, decision.holder)
        later = TimeBounds(held.holder.expires_at + margin + 0.01, held.holder.expires_at + 3)
        after_expiry = grant(held.table, asked, ME, later, ttl=ttl, margin=margin, holder_id="me")
        assert isinstance(after_expiry, Granted)
        assert after_expiry.table.holders == (after_expiry.holder,)


def test_grant_tokens_and_expiry() -> None:
    """Each grant takes next_token and bumps it; expiry is the latest bound plus the TTL."""
    table = empty_table("d")
    tokens = []
    for n, path in enumerate(("/d/a", "/d/b", "/d/c")):
        decision = grant(
            table, LockRequest(write=[path]), ME, AT, ttl=30, margin=1, holder_id=f"{n}"
        )
        assert isinstance(decision, Granted)
        table = decision.table
        tokens.append(decision.holder.token)
        assert decision.holder.expires_at == AT.latest + 30
    assert tokens == [1, 2, 3]
    assert table.next_token == 4
    with pytest.raises(ValueError, match="already in the table"):
        grant(table, LockRequest(write=["/d/z"]), ME, AT, ttl=30, margin=1, holder_id="0")
    with pytest.raises(ValueError, match="not in dataset"):
        grant(table, LockRequest(write=["/e/z"]), ME, AT, ttl=30, margin=1, holder_id="x")
    with pytest.raises(ValueError, match="at least one path"):
        grant(table, LockRequest(), ME, AT, ttl=30, margin=1, holder_id="x")


def test_blocked_until_the_last_blocker_expires() -> None:
    """A request blocked by several holders may proceed once the last expired past the margin."""
    table = LockTable("d", 3, (_holder(THEM, 1, EPOCH + 200), _holder(ME, 2, EPOCH + 300)))
    decision = grant(
        table, LockRequest(write=["/d"]), Owner("x", "h", 3), AT, ttl=30, margin=1, holder_id="x"
    )
    assert decision == Blocked(table.holders, EPOCH + 301)


def test_renew_and_release_holder() -> None:
    """Renew extends only a present, valid holder; release removes it, or reports nothing to do."""
    dead = _holder(THEM, 1, AT.earliest - 5, write=("/d/b",))
    mine = _holder(ME, 2, AT.latest + 10)
    table = LockTable("d", 3, (dead, mine))
    renewed = renew_holder(table, mine.id, AT, ttl=30, margin=1)
    assert isinstance(renewed, Granted)
    assert renewed.holder == dataclasses.replace(mine, expires_at=AT.latest + 30)
    assert renewed.table == LockTable("d", 3, (renewed.holder,))
    assert isinstance(renew_holder(table, "nobody", AT, ttl=30, margin=1), Lapsed)
    lapsing = LockTable("d", 3, (_holder(ME, 2, AT.latest + 0.99),))
    assert isinstance(renew_holder(lapsing, "me-2", AT, ttl=30, margin=1), Lapsed)
    assert release_holder(table, mine.id, AT, margin=1) == LockTable("d", 3, ())
    assert release_holder(table, "nobody", AT, margin=1) is None
    assert live_holders(table, AT, margin=1) == (mine,)


@dataclasses.dataclass
class _Belief:
    owner: int
    holder: Holder


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["grant", "grant", "renew", "release", "advance"]),
            st.integers(0, 2),
            st.integers(0, 49),
            st.floats(0.0, 1.0),
            st.floats(0.0, 1.0),
            st.floats(0.0, 15.0),
        ),
        max_size=40,
    )
)
def test_model_conflicting_holders_never_both_valid(
    ops: list[tuple[str, int, int, float, float, float]],
) -> None:
    """Model check: conflicting grants are never both believed valid; later ones outrank."""
    # Three owners with arbitrary but true server-time bounds grant, renew and release random
    # requests on one table, each write a compare-and-swap.
    ttl, margin = 10.0, 0.5
    requests = _requests()
    owners = [Owner(f"o{i}", "h", i) for i in range(3)]
    table = empty_table("d")
    beliefs: list[_Belief] = []
    history: list[Holder] = []
    true_time = EPOCH
    ids = itertools.count()

    for op, who, pick, low_error, high_error, dt in ops:
        now = TimeBounds(true_time - low_error, true_time + high_error)
        mine = [b for b in beliefs if b.owner == who]
        if op == "advance":
            true_time += dt
        elif op == "grant":
            decision = grant(
                table,
                requests[pick],
                owners[who],
                now,
                ttl=ttl,
                margin=margin,
                holder_id=f"{next(ids)}",
            )
            if isinstance(decision, Granted):
                table = decision.table
                for earlier in history:
                    if requests_conflict(earlier.request, decision.holder.request):
                        assert decision.holder.token > earlier.token
                history.append(decision.holder)
                beliefs.append(_Belief(who, decision.holder))
        elif op == "renew" and mine:
            belief = mine[pick % len(mine)]
            renewed = renew_holder(table, belief.holder.id, now, ttl=ttl, margin=margin)
            beliefs.remove(belief)
            if isinstance(renewed, Granted):
                table = renewed.table
                beliefs.append(_Belief(who, renewed.holder))
        elif op == "release" and mine:
            belief = mine[pick % len(mine)]
            beliefs.remove(belief)
            released = release_holder(table, belief.holder.id, now, margin=margin)
            if released is not None:
                table = released
        worst = TimeBounds(true_time - 1.0, true_time + 1.0)
        valid = [b for b in beliefs if holder_valid(b.holder.expires_at, worst, margin)]
        for a, b in itertools.combinations(valid, 2):
            assert not requests_conflict(a.holder.request, b.holder.request), (a, b)


# --- the S3 shell ------------------------------------------------------------------------------


def machine(store: ObjectStore, sim: SimTime, **kwargs: Any) -> DistributedPathLock:
    """One simulated process's lock (its own owner, clock and in-process lock)."""
    options: dict[str, Any] = {
        "ttl": 30.0,
        "clock": sim.machine(),
        "sleep": sim.sleep,
        "heartbeat": False,
    }
    options.update(kwargs)
    return DistributedPathLock(store, **options)


def table_of(store: ObjectStore, dataset: str = "sales") -> LockTable:
    return parse_table(
        store.get(lock_table_key(dataset)).body, dataset=dataset, fail=AssertionError
    )


def test_lock_grants_fences_and_releases(store: ObjectStore, sim: SimTime) -> None:
    """A lock writes one holder into its dataset's table, fences with it, and removes it on exit."""
    locks = machine(store, sim, owner_label="copier")
    with locks.lock(read=["/sales/year=2024/month=01"], write=["/sales/year=2024/month=02"]) as h:
        [holder] = table_of(store).holders
        assert holder == h.grants[0]
        assert (holder.owner, holder.token, h.token, h.tokens) == (locks.owner, 1, 1, {"sales": 1})
        assert holder.modes == (
            ("/sales/year=2024/month=01", "read"),
            ("/sales/year=2024/month=02", "write"),
        )
        assert EPOCH + 30 <= holder.expires_at <= EPOCH + 31.25
        assert h.fence == Fence(
            "lock:sales", 1, ("/sales/year=2024/month=01",), ("/sales/year=2024/month=02",)
        )
        assert h.held
        [listed] = read_lock_tables(store)
        assert listed.doc.holders == (holder,)
    assert table_of(store) == LockTable("sales", 2, ())
    assert not h.held
    with pytest.raises(RuntimeError):
        h.acquire()


def test_conflicting_request_times_out_compatible_one_does_not(
    store: ObjectStore, sim: SimTime
) -> None:
    """A request in a held path's lineage times out; compatible requests are granted at once."""
    first, second = machine(store, sim), machine(store, sim)
    with first.lock(write=["/sales/year=2024"], read=["/sales/year=2023"]):
        start = sim.server
        with pytest.raises(LockTimeout) as info:
            second.lock(write=["/sales/year=2024/month=01"], timeout=5).acquire()
        assert sim.server - start == 5.0
        assert info.value.target == LockRequest(write=["/sales/year=2024/month=01"])
        assert info.value.timeout == 5
        for compatible in (
            {"write": ["/sales/year=2025"]},
            {"read": ["/sales/year=2023/month=01"]},
            {"write": ["/other/year=2024"]},
        ):
            with second.lock(**compatible, timeout=0):  # type: ignore[arg-type]
                pass
        assert sim.server - start == 5.0
    assert table_of(store).next_token == 4


def test_crashed_holder_is_ignored_after_ttl(store: ObjectStore, sim: SimTime) -> None:
    """A crashed holder blocks only until expiry + margin; the next grant outranks and drops it."""
    crashed, other = machine(store, sim), machine(store, sim)
    old = crashed.lock(write=["/sales"]).acquire()
    sim.advance(30.0)
    with pytest.raises(LockTimeout):
        other.lock(write=["/sales/year=2024"], timeout=0).acquire()
    sim.advance(3.0)
    with other.lock(write=["/sales/year=2024"], timeout=0) as new:
        assert new.token == 2 > old.token == 1
        assert [h.token for h in table_of(store).holders] == [2]
        with pytest.raises(LeaseLostError) as info:
            old.check()
        assert (info.value.name, info.value.token) == ("lock:sales", 1)
        with pytest.raises(LeaseLostError):
            old.renew()
        with pytest.raises(LeaseLostError):
            _ = old.fence
        old.release()  # nothing of ours is left to remove; the new holder is untouched
        assert [h.token for h in table_of(store).holders] == [2]


def test_removed_holder_cannot_renew(store: ObjectStore, sim: SimTime) -> None:
    """A holder removed from the table is lost on renew, even while its clock believes in it."""
    holder = machine(store, sim).lock(write=["/sales/a"]).acquire()
    etag = store.head(lock_table_key("sales")).etag
    store.put(lock_table_key("sales"), dump_table(LockTable("sales", 2, ())), mode=IfMatch(etag))
    with pytest.raises(LeaseLostError):
        holder.renew()
    holder.release()


def test_waiter_is_granted_after_expiry_and_keeps_earlier_tables(
    store: ObjectStore, sim: SimTime
) -> None:
    """A multi-dataset waiter renews tables it holds while it waits for a later one."""
    crashed, waiter = machine(store, sim), machine(store, sim, poll_interval=4.0)
    crashed.lock(write=["/sales/year=2024"]).acquire()
    start = sim.server
    with waiter.lock(write=["/archive/year=2024", "/sales/year=2024"], timeout=100) as h:
        waited = sim.server - start
        assert 31.0 - DATE_RESOLUTION < waited <= 31.0 + DATE_RESOLUTION + 0.5
        assert h.datasets == ("archive", "sales")
        assert h.tokens == {"archive": 1, "sales": 2}
        assert [f.name for f in h.fences] == ["lock:archive", "lock:sales"]
        assert h.fence_for("sales").token == 2
        h.check()  # the archive grant was renewed while waiting, so it has not lapsed
        [archive] = table_of(store, "archive").holders
        assert archive.expires_at > start + 31 + 20
        with pytest.raises(ValueError, match="spans datasets"):
            _ = h.token


def test_timeout_on_a_later_table_releases_earlier_ones(store: ObjectStore, sim: SimTime) -> None:
    """Timing out on a later table releases the earlier tables and the in-process lock."""
    holder, waiter = machine(store, sim), machine(store, sim)
    seen_waiting: list[int] = []

    def sleep(seconds: float) -> None:
        seen_waiting.append(len(table_of(store, "archive").holders))
        sim.sleep(seconds)

    waiter.sleep = sleep
    with holder.lock(write=["/sales/x"]):
        with pytest.raises(LockTimeout):
            waiter.lock(write=["/archive/x", "/sales/x"], timeout=3).acquire()
        assert seen_waiting
        assert set(seen_waiting) == {1}  # archive was held while waiting
        assert table_of(store, "archive").holders == ()
        with waiter.local(write=["/archive/x", "/sales/x"], timeout=0):
            pass


def test_renewal_survives_other_holders_changing_the_table(
    store: ObjectStore, sim: SimTime
) -> None:
    """A renewal whose CAS fails because others changed the table re-reads and succeeds."""
    a, b = machine(store, sim), machine(store, sim)
    first = a.lock(write=["/sales/a"]).acquire()
    second = b.lock(write=["/sales/b"]).acquire()
    sim.advance(20)
    first.renew()
    holders = {h.token: h for h in table_of(store).holders}
    assert holders[1].expires_at >= sim.server + 29
    assert holders[2] == second.grants[0]
    sim.advance(20)
    first.check()
    with pytest.raises(LeaseLostError):
        second.check()
    first.release()
    second.release()


@pytest.mark.parametrize("kind", ["lost_ack", "lost_ack_5xx"])
def test_lost_ack_on_grant_renew_release_is_resolved(
    s3: S3Endpoint, store: ObjectStore, sim: SimTime, kind: Any
) -> None:
    """Lost acknowledgements on grant, renew and release are resolved by reading back: once each."""
    locks = machine(store, sim)
    s3.inject(kind, operation="PutObject", prefix="metastore/locks/", count=1)
    machine(store, sim).lock(write=["/sales/warmup"]).acquire().release()  # eats the create
    s3.inject(kind, operation="PutObject", prefix="metastore/locks/", count=1)
    h = locks.lock(write=["/sales/a"], timeout=0).acquire()
    assert [x.id for x in table_of(store).holders] == [h.grants[0].id]
    sim.advance(10)
    s3.inject(kind, operation="PutObject", prefix="metastore/locks/", count=1)
    h.renew()
    assert table_of(store).holders[0].expires_at >= sim.server + 29
    s3.inject(kind, operation="PutObject", prefix="metastore/locks/", count=1)
    h.release()
    assert table_of(store).holders == ()
    assert s3.faults()["injected"] == {kind: 4}


def test_unknown_grant_outcome_resolved_by_holder_id(
    s3: S3Endpoint, store: ObjectStore, sim: SimTime
) -> None:
    """A grant of unknown outcome is resolved by our holder id in the table: granted once."""
    locks = machine(store, sim)
    locks.lock(write=["/sales/warmup"]).acquire().release()
    s3.inject("lost_ack", operation="PutObject", prefix="metastore/locks/", count=1)
    s3.inject("error", operation="HeadObject", count=3)
    h = locks.lock(write=["/sales/a"], timeout=0).acquire()
    assert [x.id for x in table_of(store).holders] == [h.grants[0].id]
    s3.inject("error", operation="PutObject", prefix="metastore/locks/", count=3)
    h2 = locks.lock(write=["/sales/b"], timeout=0).acquire()
    assert sorted(x.id for x in table_of(store).holders) == sorted(
        [h.grants[0].id, h2.grants[0].id]
    )
    assert s3.faults()["injected"] == {"lost_ack": 1, "error": 6}
    h.release()
    h2.release()


def test_unknown_format_version_is_refused_and_kept(store: ObjectStore, sim: SimTime) -> None:
    """A lock table written by a future version is never interpreted or overwritten."""
    body = orjson.dumps({**orjson.loads(dump_table(empty_table("sales"))), "format_version": 2})
    store.put(lock_table_key("sales"), body)
    with pytest.raises(LeaseError) as info:
        machine(store, sim).lock(write=["/sales/a"], timeout=0).acquire()
    assert info.value.name == "lock:sales"
    assert store.get(lock_table_key("sales")).body == body
    with pytest.raises(LeaseError):
        read_lock_tables(store)


def test_invalid_requests_are_refused_before_any_request(store: ObjectStore) -> None:
    """The root, empty requests, malformed paths and bad durations raise before S3 is asked."""
    locks = DistributedPathLock(store, heartbeat=False)
    with pytest.raises(InvalidNameError):
        locks.lock(write=["/"])
    with pytest.raises(InvalidNameError):
        locks.lock(read=["/sales/../x"])
    with pytest.raises(ValueError, match="at least one path"):
        locks.lock()
    with pytest.raises(ValueError, match="ttl"):
        locks.lock(write=["/sales"], ttl=1.0)
    with pytest.raises(ValueError, match="timeout"):
        locks.lock(write=["/sales"], timeout=-1)
    assert store.stats.total == 0


def test_context_manager_reports_loss_on_exit(store: ObjectStore, sim: SimTime) -> None:
    """Leaving ``with`` with a lapsed lock raises LeaseLostError unless another error leaves."""
    losses: list[LeaseLostError] = []
    locks = machine(store, sim, on_lost=losses.append)
    with pytest.raises(LeaseLostError), locks.lock(write=["/sales/a"]):
        sim.advance(40)
    assert len(losses) == 1

    def lapse_and_fail() -> None:
        sim.advance(40)
        raise KeyError("the block's own error wins")

    with pytest.raises(KeyError), locks.lock(write=["/sales/a"]):
        lapse_and_fail()
    assert table_of(store).holders == ()


def test_threads_of_one_process_wait_locally(
    s3: S3Endpoint, store: ObjectStore, sim: SimTime
) -> None:
    """Conflicting threads of one process wait on the in-process lock, sending nothing to S3."""

    def sleep(seconds: float) -> None:
        sim.sleep(seconds)
        time.sleep(0.005)  # real time too, so that polling S3 would show and not swamp it

    locks = machine(store, sim, poll_interval=0.001, sleep=sleep)
    first = locks.lock(write=["/sales/a"]).acquire()
    results: list[PathLockHandle] = []
    blocked = threading.Event()
    locks.local._observer = lambda *_: blocked.set()  # the path lock's own test hook
    worker = threading.Thread(
        target=lambda: results.append(locks.lock(write=["/sales/a/b"], timeout=30).acquire())
    )
    s3.reset_stats()
    worker.start()
    assert blocked.wait(30)
    time.sleep(0.3)  # were it polling S3, it would send dozens of requests meanwhile
    assert s3.stats() == {}
    first.release()
    worker.join(timeout=30)
    [second] = results
    assert second.token == 2
    second.release()


def test_local_timeout_leaves_the_handle_spent(store: ObjectStore, sim: SimTime) -> None:
    """A timeout on the in-process lock sends nothing, holds nothing and spends the handle."""
    locks = machine(store, sim)
    with locks.lock(write=["/sales/a"]):
        before = store.stats.total
        late = locks.lock(read=["/sales"], timeout=0.05)
        with pytest.raises(LockTimeout):
            late.acquire()
        assert store.stats.total == before
        late.release()
        with pytest.raises(RuntimeError):
            late.acquire()
    with locks.lock(read=["/sales"], timeout=0):
        pass


def test_heartbeat_keeps_the_lock_past_its_ttl(store: ObjectStore) -> None:
    """Real time: the heartbeat keeps a lock past several TTLs and stops with the release.
    (The holder's clock is frozen, so a beat that a loaded machine runs late is no lapse.)"""
    locks = DistributedPathLock(store, ttl=1.5, margin=0.1, poll_interval=0.05, clock=lambda: 0.0)
    other = DistributedPathLock(store, ttl=1.5, margin=0.1, heartbeat=False)
    with locks.lock(write=["/sales/a"]) as h:
        beat = h._heartbeat
        assert beat is not None
        wait_until(lambda: beat.beats >= 4)  # > 1.2 TTLs
        h.check()
        with pytest.raises(LockTimeout):
            other.lock(write=["/sales"], timeout=0).acquire()
    assert not beat.alive
    with other.lock(write=["/sales"], timeout=0):
        pass


# --- many processes ----------------------------------------------------------------------------


def overlapping_conflicts(
    records: list[dict[str, Any]],
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of records whose holding intervals overlap and whose requests conflict."""
    found = []
    for a, b in itertools.combinations(records, 2):
        overlap = a["start"] <= b["end"] and b["start"] <= a["end"]
        request_a = LockRequest(a["read"], a["write"])
        if overlap and requests_conflict(request_a, LockRequest(b["read"], b["write"])):
            found.append((a, b))
    return found


def test_checker_finds_an_overlapping_conflict() -> None:
    """Negative control: the checker flags overlapping conflicting holdings, and only those."""
    a = {"start": 0.0, "end": 1.0, "read": [], "write": ["/sales/x"]}
    b = {"start": 0.5, "end": 2.0, "read": ["/sales"], "write": []}
    c = {"start": 0.5, "end": 2.0, "read": [], "write": ["/sales/y"]}
    d = {"start": 1.5, "end": 2.0, "read": [], "write": ["/sales/x/z"]}
    assert overlapping_conflicts([a, b]) == [(a, b)]
    assert overlapping_conflicts([a, c, d]) == []


def test_processes_with_random_requests_never_hold_conflicts_together(
    s3: S3Endpoint, bucket: str
) -> None:
    """Real processes: conflicting requests never hold together; later conflicts outrank."""
    # Three processes of two threads issue random copy, rename, write and read-lock requests
    # over a partition tree of two datasets.
    args = {"url": s3.url, "bucket": bucket, "ops": 8, "threads": 2}
    results = run_workers("locks", 3, args)
    records = [r for rs in results for r in rs]
    assert len(records) == 3 * 2 * 8
    assert overlapping_conflicts(records) == []
    for a, b in itertools.combinations(sorted(records, key=lambda r: r["start"]), 2):
        parts_a = split_by_dataset(LockRequest(a["read"], a["write"]))
        parts_b = split_by_dataset(LockRequest(b["read"], b["write"]))
        for dataset in parts_a.keys() & parts_b.keys():
            if requests_conflict(parts_a[dataset], parts_b[dataset]):
                assert a["tokens"][dataset] < b["tokens"][dataset], (a, b)


def test_killed_holder_stops_blocking_within_ttl_and_margins(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Real processes: a SIGKILLed holder blocks for its remaining lease, then stops."""
    # The bound: ttl + margin + two server-time bound widths (1 s each) + one poll.
    ttl, margin, poll = 1.0, 0.1, 0.1
    args = {"url": s3.url, "bucket": store.bucket, "ttl": ttl, "margin": margin}
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests._mp_workers", "hold", json.dumps(args)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        held = json.loads(holder.stdout.readline())
        waiter = DistributedPathLock(
            store, ttl=ttl, margin=margin, poll_interval=poll, heartbeat=False
        )
        with pytest.raises(LockTimeout):
            waiter.lock(write=["/sales/year=2024"], timeout=0).acquire()
        os.kill(holder.pid, signal.SIGKILL)
        killed = time.monotonic()
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    with waiter.lock(write=["/sales/year=2024"], timeout=10) as h:
        blocked = time.monotonic() - killed
        assert h.token > held["token"]
    heartbeat_interval = (ttl - margin) / 3
    assert ttl + margin - heartbeat_interval < blocked
    assert blocked <= ttl + margin + 2 * (DATE_RESOLUTION + 0.1) + poll


def test_a_slow_registration_brings_the_first_renewal_forward(
    store: ObjectStore, sim: SimTime
) -> None:
    """Registering a write grant in the lake's registry took longer than a beat (a slow
    store, a loaded machine): the heartbeat's first renewal is due when the grant has two
    beats left, as a wait for a later table renews, so at once, not a whole beat after
    ``acquire`` returned (by when the grant could have lapsed). Without the delay the first
    renewal is a beat away, as before."""

    class SlowRegistry:
        def hold_write_locks(self, fences: tuple[Fence, ...]) -> None:
            sim.advance(250.0)  # more than a beat of a 600 s grant (about 200 s)

        def release_write_locks(self, fences: tuple[Fence, ...]) -> None:
            pass

    locks = machine(store, sim, ttl=600.0, heartbeat=True, write_locks=SlowRegistry())
    handle = locks.lock(write=["/sales"]).acquire()
    beat = handle._heartbeat
    assert beat is not None
    assert beat.interval > 150.0
    assert beat.first == 0.0
    wait_until(lambda: beat.beats >= 1)
    handle.check()
    handle.release()

    prompt = machine(store, sim, ttl=600.0, heartbeat=True).lock(write=["/sales"]).acquire()
    assert prompt._heartbeat is not None
    assert prompt._heartbeat.first == pytest.approx(prompt._heartbeat.interval)
    prompt.release()
