"""Hedged requests (``_driver.Hedging``): a read, or a small create-only write of a write-once
object — of a batch or alone, an append's data files too — still unanswered long after this
process's requests usually are gets a second, identical request, and the first success is the
answer. Forced with the embedded S3's
latency faults (one request held back) and in the simulator (a profile whose tail is
certain for some requests)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from random import Random
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry._core import Driver, FoldPolicy, Hedging
from lakelock._registry._core._driver import HEDGED_BODY
from lakelock._registry._core._hedging import PATIENT
from lakelock._registry._core._requests import Get, List, Now, Parallel, Put, Request, Steps
from lakelock._registry._core._schedule import fixed_values
from lakelock._registry._document import REGISTRY_KEY
from lakelock._registry._intents import INTENT_PREFIX
from lakelock._s3 import ObjectStore
from lakelock._sim._faults import Faults
from lakelock._sim._loop import Endpoint, Loop, Process, StoreRetry
from lakelock._sim._store import EPOCH, SimS3
from lakelock.errors import AlreadyExistsError, NotFoundError
from lakelock.testing import S3Endpoint
from tests._support.hedging import tailed, warmed


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


@pytest.mark.parametrize(
    ("request_", "sent", "delay"),
    [
        (Get("alone"), 2, 1.0),
        (Put("lone", b"v", create=True), 2, 1.0),
        (Get(REGISTRY_KEY, retried=False), 1, 0.5),
        (Put("big", b"x" * (HEDGED_BODY + 1), create=True), 1, 1.0),
    ],
    ids=["lone read", "lone create", "root read", "big create"],
)
def test_a_lone_slow_request_is_hedged_but_not_the_roots_nor_a_big_write(
    request_: Get | Put, sent: int, delay: float, s3: S3Endpoint, store: ObjectStore
) -> None:
    """A commit waits for each of its own requests in turn (its intent, a lone read), so a
    slow one is hedged as in a batch; the root's read is not at twice the median (a slow
    answer in the store's tail: below ``PATIENT`` times it), nor a write of more than
    ``HEDGED_BODY`` bytes."""
    store.put("alone", b"x")
    store.put(REGISTRY_KEY, b"root")
    s3.reset_stats()
    operation = "GetObject" if isinstance(request_, Get) else "PutObject"
    s3.inject("latency", operation=operation, prefix=request_.key, delay=delay, count=1)
    driver = Driver(store, store, hedging=warmed(2.0, reads=0.1, writes=0.1))
    answer = driver.perform(request_)
    if isinstance(request_, Put):
        assert answer.etag == store.head(request_.key).etag
        assert store.get(request_.key).body == request_.body
    else:
        assert answer.body == store.get(request_.key).body
    assert s3.stats()[operation] == sent + (1 if operation == "GetObject" else 0)


@pytest.mark.parametrize(
    ("request_", "operation"),
    [(Get(REGISTRY_KEY, retried=False), "GetObject"), (List(INTENT_PREFIX), "ListObjectsV2")],
    ids=["root read", "listing"],
)
def test_a_root_read_or_listing_never_answered_is_sent_again_past_patient_times_the_median(
    request_: Get | List, operation: str, s3: S3Endpoint, store: ObjectStore
) -> None:
    """A fold waits for its read of the root and its listing of the intents: one S3 does
    not answer (held back 3 s here, a read timeout in production) is sent again after
    ``PATIENT`` times the median of reads (0.4 s), and the first answer is the fold's —
    instead of the fold, and every waiter behind it, standing still until the timeout."""
    store.put(REGISTRY_KEY, b"root")
    store.put(f"{INTENT_PREFIX}0001", b"intent")
    s3.reset_stats()
    s3.inject("latency", operation=operation, delay=3.0, count=1)
    driver = Driver(store, store, hedging=warmed(2.0, reads=0.05))
    started = time.monotonic()
    answer = driver.perform(request_)
    took = time.monotonic() - started
    if isinstance(request_, Get):
        assert answer.body == b"root"
    else:
        assert [o.key for o in answer.objects] == [f"{INTENT_PREFIX}0001"]
    assert 0.05 * PATIENT <= took < 2.0
    assert s3.stats()[operation] == 2  # the one held back, and its second copy


def test_with_hedge_alone_off_only_a_batchs_requests_are_hedged(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """``Hedging(alone=False)`` (``HEDGE_ALONE`` off, as the simulator can run it): a slow
    lone read is waited for; in a batch it is hedged."""
    store.put("slow", b"slow body")
    store.put("quick", b"quick body")
    s3.reset_stats()
    s3.inject("latency", operation="GetObject", prefix="slow", delay=1.0, count=2)
    driver = Driver(store, store, hedging=warmed(2.0, reads=0.1, alone=False))
    assert driver.perform(Get("slow")).body == b"slow body"
    assert s3.stats()["GetObject"] == 1
    slow, _ = driver.perform(Parallel((Get("slow"), Get("quick"))))
    assert slow.body == b"slow body"
    assert s3.stats()["GetObject"] == 4  # the slow read, its hedge, the quick one
    with pytest.raises(ValueError, match="hedge_alone must be true or false"):
        fixed_values({"hedge_alone": 2})


def test_the_roots_compare_and_swap_is_never_hedged(s3: S3Endpoint, store: ObjectStore) -> None:
    store.put(REGISTRY_KEY, b"root")
    s3.reset_stats()
    s3.inject("latency", operation="PutObject", delay=0.3, count=1)
    driver = Driver(store, store, hedging=warmed(2.0))
    root, again = driver.perform(
        Parallel((Get(REGISTRY_KEY, retried=False), Put(REGISTRY_KEY, b"new", if_match="x")))
    )
    assert root.body == b"root"
    assert isinstance(again, BaseException)  # a stale If-Match: not hedged, not retried
    assert s3.stats()["PutObject"] == 1


def test_a_requests_clock_starts_when_its_first_copy_is_sent(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Time that passes after a request is made and before its first copy goes — waiting for
    one of the driver's threads, busy with earlier requests' slower copies — is not the
    store's: a create whose clock jumps 100 s there (its first reading, when it is made, is
    the only one before the jump) and whose copy is answered within ms is sent once, not
    hedged for the wait (a big batch on a loaded machine had most of its creates sent twice,
    each refused copy read back, and each copy made the next requests wait longer)."""
    readings = 0

    def timer() -> float:
        nonlocal readings
        readings += 1
        return time.monotonic() + (0.0 if readings == 1 else 100.0)

    driver = Driver(store, store, hedging=warmed(2.0, writes=1.0), timer=timer)
    s3.reset_stats()
    driver.perform(Put("waited/a", b"x" * 300, create=True))  # hedged past 2 s in flight
    driver.close()
    assert s3.stats()["PutObject"] == 1, s3.stats()


def test_a_clock_that_fails_as_a_hedged_request_is_sent_fails_it_and_does_not_hang(
    store: ObjectStore,
) -> None:
    """The driver's clock (the retry policy's, which a caller may inject) raising when a
    hedged request's first copy is sent: the request fails with the clock's error. The
    thread that waits for the copy was left waiting forever for a send that never came."""

    class Stopped(Exception):
        pass

    readings = 0

    def timer() -> float:
        nonlocal readings
        readings += 1
        if readings > 1:  # it works when the request is made, then stops
            raise Stopped("the clock stopped")
        return time.monotonic()

    driver = Driver(store, store, hedging=warmed(2.0, writes=1.0), timer=timer)
    outcome: list[BaseException | None] = []

    def request() -> None:
        try:
            driver.perform(Put("stopped/a", b"x" * 300, create=True))
        except Exception as failure:
            outcome.append(failure)
        else:
            outcome.append(None)

    waiting = threading.Thread(target=request, daemon=True)  # left behind if it hangs
    waiting.start()
    waiting.join(timeout=30.0)
    assert not waiting.is_alive(), "the request waits forever"
    (failure,) = outcome
    assert isinstance(failure, Stopped), failure
    driver.close()


# -- an append's data files ------------------------------------------------------------------


def warm(lake: Lake, writes: float = 0.1) -> None:
    """The lake's process has timed enough writes: a data PUT unanswered after twice
    ``writes`` is hedged."""
    hedging = lake.registry._driver.hedging
    assert hedging is not None
    for _ in range(hedging.least):
        hedging.observe(True, writes)


def settle(lake: Lake) -> None:
    """Wait for both copies of every hedged request to be answered (the late one too)."""
    driver = lake.registry._driver
    assert driver._hedges is not None
    driver._hedges.shutdown(wait=True)
    driver._hedges = None  # the next hedge makes a new pool


def test_a_slow_data_put_is_hedged_and_the_file_committed_is_the_one_that_landed(
    s3: S3Endpoint, lake: Lake
) -> None:
    """The data PUT held back 1.5 s is sent again after 0.2 s; the held-back copy reaches
    the bucket after its hedge made the object and is refused. Both carry one write id and
    the same bytes, so the file the append records is the object in the bucket."""
    table = pa.table({"region": ["eu", "us"], "amount": [1, 2]})
    lake.append("sales", table, partition_by=["region"])
    warm(lake)
    s3.reset_stats()
    s3.inject(
        "latency", operation="PutObject", prefix="datasets/sales/region=eu/", delay=1.5, count=1
    )
    written = lake.write("sales", table, partition_by=["region"])
    settle(lake)
    assert s3.areas()["PutObject datasets"] == 3  # eu twice (held back, hedge), us once
    for file in written:
        head = lake.store.head(file.key)
        assert (head.etag, head.write_id, head.size) == (file.etag, file.write_id, file.size)
    lake.registry.commit("sales", add=written)
    assert sorted(lake.scan("sales").to_arrow()["amount"].to_pylist()) == [1, 1, 2, 2]


def test_a_hedged_data_put_refused_twice_raises_and_leaves_the_other_writers_file(
    s3: S3Endpoint, lake: Lake
) -> None:
    """A caller-given file name another writer took: both copies are refused, and the
    append says so; the object is the other writer's still."""
    table = pa.table({"amount": [1, 2]})
    lake.append("sales", table)
    key = "datasets/sales/fixed.parquet"
    lake.store.put(key, b"another writer's file")
    warm(lake)
    s3.reset_stats()
    s3.inject("latency", operation="PutObject", prefix=key, delay=1.0, count=1)
    with pytest.raises(AlreadyExistsError):
        lake.write("sales", table, file_name="fixed.parquet")
    settle(lake)
    assert s3.areas()["PutObject datasets"] == 2
    assert lake.store.get(key).body == b"another writer's file"


def test_a_big_data_file_is_not_hedged(s3: S3Endpoint, lake: Lake) -> None:
    """Past ``HEDGED_BODY`` bytes a second copy would send the bytes again: sent once."""
    table = pa.table({"blob": [os.urandom(HEDGED_BODY + 1024)]})
    warm(lake, writes=0.01)
    s3.reset_stats()
    s3.inject("latency", operation="PutObject", prefix="datasets/", delay=0.5, count=1)
    [file] = lake.write("blobs", table)
    assert file.size > HEDGED_BODY
    assert s3.areas()["PutObject datasets"] == 1


# -- the simulator hedges as the driver does -------------------------------------------------


def run_steps(
    hedging: Hedging | None, requests: Sequence[Request]
) -> tuple[float, list[Any], SimS3, Endpoint, Counter[str]]:
    """``requests`` sent one after another by one simulated process: how long they took,
    each one's answer (or error), the bucket, the endpoint, and how often each key was
    sent."""
    loop = Loop()
    sim = SimS3(tailed(), Random(1), tracked=frozenset({REGISTRY_KEY}))
    endpoint = Endpoint(loop, sim, Random(2), Faults(), StoreRetry(), root_key=REGISTRY_KEY)
    sent: Counter[str] = Counter()
    endpoint.trace = lambda event: sent.update([event["key"]])
    for n in range(20):
        sim.put(f"k{n}", f"body {n}".encode(), 0.0, create=True)
    outcome: list[Any] = []

    def program() -> Steps:
        answers = []
        for request in requests:
            try:
                answers.append((yield request))
            except Exception as error:
                answers.append(error)
        now = yield Now()
        return now - EPOCH - 1.0, answers

    def done(result: Any, error: BaseException | None) -> None:
        outcome.append(error if error is not None else result)

    Process(loop, endpoint, program(), kind="writer", done=done, hedging=hedging).start(1.0)
    loop.run(100.0)
    ((took, answers),) = outcome
    return took, answers, sim, endpoint, sent


def run_batch(hedging: Hedging | None, batch: Parallel) -> tuple[float, Any, SimS3, Endpoint]:
    took, (answers,), sim, endpoint, _ = run_steps(hedging, [batch])
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


def test_the_simulator_hedges_lone_requests_as_the_driver_does() -> None:
    """Reads and small creates sent one at a time: the slow ones go twice, and the answers
    (the refusal of a key another process holds among them) are those sent once; the
    root's read and a big create are sent once."""
    requests: list[Request] = [Get(f"k{n}") for n in range(20)]
    requests += [Put(f"new{n}", b"v", create=True) for n in range(20)]
    requests += [Put("k3", b"mine", create=True), Get(REGISTRY_KEY, retried=False)]
    requests += [Put("big", b"x" * (HEDGED_BODY + 1), create=True)]
    took, answers, sim, endpoint, sent = run_steps(warmed(2.0), requests)
    plain_took, plain, _, plain_endpoint, _ = run_steps(None, requests)
    assert [a.body for a in answers[:20]] == [f"body {n}".encode() for n in range(20)]
    assert not any(isinstance(a, BaseException) for a in answers[20:40])
    assert isinstance(answers[40], AlreadyExistsError)
    assert isinstance(plain[40], AlreadyExistsError)
    assert isinstance(answers[41], NotFoundError)  # no root yet: read once, not retried
    assert sent[REGISTRY_KEY] == sent["big"] == 1
    assert all(sim.objects[f"new{n}"].body == b"v" for n in range(20))
    assert sim.objects["k3"].body == b"body 3"
    assert plain_endpoint.counts.requests["writer:GetObject"] == 21
    assert plain_endpoint.counts.requests["writer:PutObject"] == 22
    assert endpoint.counts.requests["writer:GetObject"] > 21  # the slow ones went twice
    assert endpoint.counts.requests["writer:PutObject"] > 22
    assert took < plain_took


def test_a_copy_refused_because_the_other_copy_landed_is_resolved_as_ours(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Both copies of a hedged create carry one write id and are sent ``resent``: the copy
    refused (412) because the other landed first is read back and is the write's success,
    at once; another writer's object under the key is still ``AlreadyExistsError``."""
    first = store.put("metastore/snapshots/s", b"snapshot", write_id="w-1")
    again = store.put("metastore/snapshots/s", b"snapshot", write_id="w-1", resent=True)
    assert again.resolved
    assert (again.etag, again.write_id) == (first.etag, "w-1")
    with pytest.raises(AlreadyExistsError):
        store.put("metastore/snapshots/s", b"snapshot", write_id="w-2", resent=True)


def test_the_simulator_resolves_a_hedged_create_whose_first_copy_landed_unanswered() -> None:
    """A create whose first copy lands but is not answered (a timeout of 2 s after it
    applied): its hedge is refused (412) and read back, finds the first copy's object (one
    write id) and is the answer — a tenth of a second, not the 2 s the first copy's answer
    takes."""
    loop = Loop()
    sim = SimS3(tailed(), Random(1), tracked=frozenset({REGISTRY_KEY}))
    # The first request times out; this endpoint's generator applies it first.
    faults = Faults(schedule=("timeout",), timeout=2.0)
    endpoint = Endpoint(loop, sim, Random(4), faults, StoreRetry(), root_key=REGISTRY_KEY)
    outcome: list[Any] = []

    def program() -> Steps:
        answers = yield Parallel((Put("new", b"v", create=True), Put("other", b"w", create=True)))
        now = yield Now()
        return now - EPOCH - 1.0, answers

    def done(result: Any, error: BaseException | None) -> None:
        outcome.append(error if error is not None else result)

    hedging = warmed(2.0, writes=0.01)
    Process(loop, endpoint, program(), kind="writer", done=done, hedging=hedging).start(1.0)
    loop.run(100.0)
    ((took, answers),) = outcome
    assert not any(isinstance(a, BaseException) for a in answers)
    assert answers[0].resolved
    assert answers[0].write_id == sim.objects["new"].write_id
    assert endpoint.counts.faults["timeout"] == 1
    assert took < 0.5
