"""Hedged requests (``_driver.Hedging``): a read, or a create-only write of a write-once object,
of a batch still unanswered long after this process's requests usually are gets a second,
identical request, and the first success is the answer. Forced with the embedded S3's
latency faults (one request held back) and in the simulator (a profile whose tail is
certain for some requests)."""

from __future__ import annotations

from random import Random
from typing import Any

import pytest

from lakelock._registry._core import Driver, FoldPolicy, Hedging
from lakelock._registry._core._requests import Get, Now, Parallel, Put, Steps
from lakelock._registry._document import REGISTRY_KEY
from lakelock._s3 import ObjectStore
from lakelock._sim._faults import Faults
from lakelock._sim._latency import Latency, Profile
from lakelock._sim._loop import Endpoint, Loop, Process, StoreRetry
from lakelock._sim._store import EPOCH, SimS3
from lakelock.errors import AlreadyExistsError
from lakelock.testing import S3Endpoint


def warmed(factor: float, *, reads: float = 0.01, writes: float = 0.01) -> Hedging:
    """Hedging that has timed enough requests: hedges after ``factor`` x those times."""
    hedging = Hedging(factor)
    for _ in range(hedging.least):
        hedging.observe(False, reads)
        hedging.observe(True, writes)
    return hedging


def test_hedging_waits_for_enough_requests_of_each_kind_and_uses_their_median() -> None:
    hedging = Hedging(3.0, least=3)
    for seconds in (0.01, 0.02):
        hedging.observe(False, seconds)
    assert hedging.after(False) is None
    hedging.observe(False, 0.5)
    assert hedging.after(False) == pytest.approx(0.06)
    assert hedging.after(True) is None  # writes are timed apart from reads
    with pytest.raises(ValueError, match="must be > 1"):
        Hedging(1.0)
    with pytest.raises(ValueError, match="hedge must be 0"):
        FoldPolicy(hedge=0.5)


@pytest.mark.parametrize(("hedge", "reads"), [(2.0, 3), (0.0, 2)], ids=["hedged", "not"])
def test_a_slow_read_of_a_batch_is_sent_again_and_the_first_answer_wins(
    hedge: float, reads: int, s3: S3Endpoint, store: ObjectStore
) -> None:
    """One read of a batch held back 1.5 s: hedged after 0.4 s (the held-back read, its
    hedge, and the other); without hedging the batch waits for it (two reads). (0.4 s: a
    loaded machine's ordinary request is not hedged.)"""
    store.put("slow", b"slow body")
    store.put("quick", b"quick body")
    s3.reset_stats()
    s3.inject("latency", operation="GetObject", prefix="slow", delay=1.5, count=1)
    driver = Driver(store, store, hedging=warmed(hedge, reads=0.2) if hedge else None)
    slow, quick = driver.perform(Parallel((Get("slow"), Get("quick"))))
    assert (slow.body, quick.body) == (b"slow body", b"quick body")
    assert s3.stats()["GetObject"] == reads


def test_a_slow_create_of_a_batch_lands_once_and_the_late_copy_is_refused(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """The held-back PUT reaches the bucket after its hedge created the object: it is refused
    (412), and that refusal is not the batch's answer."""
    snapshot, node = "metastore/snapshots/s", "metastore/nodes/n"
    s3.inject("latency", operation="PutObject", prefix=snapshot, delay=1.5, count=1)
    driver = Driver(store, store, hedging=warmed(2.0, writes=0.2))
    snap, other = driver.perform(
        Parallel((Put(snapshot, b"snapshot", create=True), Put(node, b"node", create=True)))
    )
    assert not isinstance(snap, BaseException)
    assert not isinstance(other, BaseException)
    assert store.get(snapshot).body == b"snapshot"
    areas = s3.areas()
    assert areas["PutObject metastore/snapshots"] == 2  # the held-back PUT and its hedge
    # The other PUT is hedged too only if this machine took > 0.4 s to answer it.
    assert areas["PutObject metastore/nodes"] >= 1


def test_the_roots_requests_and_lone_requests_are_never_hedged(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    store.put("alone", b"x")
    store.put(REGISTRY_KEY, b"root")
    s3.reset_stats()
    s3.inject("latency", operation="GetObject", delay=0.2, count=2)
    driver = Driver(store, store, hedging=warmed(2.0))
    assert driver.perform(Get("alone")).body == b"x"
    root, again = driver.perform(
        Parallel((Get(REGISTRY_KEY, retried=False), Put(REGISTRY_KEY, b"new", if_match="x")))
    )
    assert root.body == b"root"
    assert isinstance(again, BaseException)  # a stale If-Match: not hedged, not retried
    assert s3.stats()["GetObject"] == 2


# -- the simulator hedges as the driver does -------------------------------------------------


def tailed() -> Profile:
    """10 ms requests, 15 % of them 30 times slower."""
    each = Latency(0.010, tail=0.15, tail_factor=(30.0, 30.0))
    return Profile(name="tailed", get=each, put=each, cas=each, list=each, delete=each)


def run_batch(hedging: Hedging | None, batch: Parallel) -> tuple[float, Any, SimS3, Endpoint]:
    loop = Loop()
    sim = SimS3(tailed(), Random(1), tracked=frozenset({REGISTRY_KEY}))
    endpoint = Endpoint(loop, sim, Random(2), Faults(), StoreRetry(), root_key=REGISTRY_KEY)
    for n in range(20):
        sim.put(f"k{n}", f"body {n}".encode(), 0.0, create=True)
    outcome: list[Any] = []

    def program() -> Steps:
        answers = yield batch
        now = yield Now()
        return now - EPOCH - 1.0, answers

    def done(result: Any, error: BaseException | None) -> None:
        outcome.append(error if error is not None else result)

    Process(loop, endpoint, program(), kind="writer", done=done, hedging=hedging).start(1.0)
    loop.run(100.0)
    ((took, answers),) = outcome
    return took, answers, sim, endpoint


def test_the_simulator_hedges_a_batchs_slow_reads_and_creates() -> None:
    reads = Parallel(tuple(Get(f"k{n}") for n in range(20)))
    took, answers, _, endpoint = run_batch(warmed(2.0), reads)
    plain_took, plain, _, plain_endpoint = run_batch(None, reads)
    assert (
        [a.body for a in answers]
        == [a.body for a in plain]
        == [f"body {n}".encode() for n in range(20)]
    )
    assert plain_endpoint.counts.requests["writer:GetObject"] == 20
    assert endpoint.counts.requests["writer:GetObject"] > 20  # the slow ones went twice
    assert took < 0.1 < plain_took  # 10 ms, or hedged at 20 ms; 300 ms unhedged

    creates = Parallel(tuple(Put(f"new{n}", b"v", create=True) for n in range(20)))
    _, written, sim, endpoint = run_batch(warmed(2.0), creates)
    assert not any(isinstance(w, BaseException) for w in written)
    assert all(sim.objects[f"new{n}"].body == b"v" for n in range(20))
    assert endpoint.counts.requests["writer:PutObject"] > 20


def test_a_hedged_create_is_not_hidden_when_both_copies_are_refused() -> None:
    """Another process holds the key: both copies are refused, and that is the answer."""
    clash = Parallel((Put("k3", b"mine", create=True), Put("free", b"v", create=True)))
    _, written, sim, endpoint = run_batch(warmed(1.01, writes=0.001), clash)
    assert isinstance(written[0], AlreadyExistsError)
    assert endpoint.counts.requests["writer:PutObject"] >= 3  # "k3" was hedged
    assert sim.objects["k3"].body == b"body 3"
    assert sim.objects["free"].body == b"v"
