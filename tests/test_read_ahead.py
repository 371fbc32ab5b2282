"""Reads made ahead (``Ahead``) and the fold read ahead (``FoldPolicy.read_ahead``): the driver
and the simulator send an ``Ahead``'s reads at once, answer the next equal request with them
within their window, read ahead what a listing made ahead found, and drop them at the next
``Ahead``; a folder whose swap carried others' intents makes its next fold's LIST right after
the swap. And the hand-over: a folder whose swap is still the root after a race nobody won
folds again at once (``_schedule.HANDOVER``). Counted at the embedded S3 and the simulated one."""

from __future__ import annotations

import random
from random import Random
from typing import Any

import pytest

from lakelock._registry._core import Committer, Driver, FoldPolicy
from lakelock._registry._core._requests import Ahead, Get, List, Now, Parallel, Sleep, Steps
from lakelock._registry._core._schedule import Hints, Scheduler, fixed_values
from lakelock._registry._document import REGISTRY_KEY, RegistryDoc
from lakelock._s3 import ObjectStore
from lakelock._sim._faults import Faults
from lakelock._sim._latency import Latency, Profile
from lakelock._sim._loop import Endpoint, Loop, Process, StoreRetry
from lakelock._sim._store import SimS3
from lakelock.testing import S3Endpoint
from lakelock.testing.simulate import Mix, SimConfig, simulate

APPENDS = Mix.of([("append", 1.0)])


class Timer:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def two_objects(s3: S3Endpoint, store: ObjectStore) -> ObjectStore:
    """``store`` with objects ``a`` and ``b``, the endpoint's counts reset after them."""
    store.put("a", b"body a")
    store.put("b", b"body b")
    s3.reset_stats()
    return store


def test_a_read_made_ahead_answers_the_next_equal_request_once(
    s3: S3Endpoint, two_objects: ObjectStore
) -> None:
    store = two_objects
    driver = Driver(store, store)
    assert driver.perform(Ahead((Get("a"),), 5.0)) is None
    assert driver.perform(Get("a")).body == b"body a"
    assert s3.stats()["GetObject"] == 1  # answered by the read made ahead
    assert driver.perform(Get("a")).body == b"body a"
    assert driver.perform(Get("b")).body == b"body b"
    assert s3.stats()["GetObject"] == 3  # it answers once; "b" was never read ahead


def test_a_read_made_ahead_is_dropped_by_the_next_and_when_too_old(
    s3: S3Endpoint, two_objects: ObjectStore
) -> None:
    store = two_objects
    timer = Timer()
    driver = Driver(store, store, timer=timer)
    driver.perform(Ahead((Get("a"),), 5.0))
    # Answered before the next replaces it (else, on a loaded machine, the server may not
    # have seen it when the requests are counted below).
    driver._early._kept[Get("a")][0].result()
    driver.perform(Ahead((Get("b"),), 5.0))  # replaces the first
    timer.now += 4.9
    answers = driver.perform(Parallel((Get("a"), Get("b"))))
    assert [a.body for a in answers] == [b"body a", b"body b"]
    assert s3.stats()["GetObject"] == 3  # "a" twice, "b" once

    driver.perform(Ahead((Get("a"),), 5.0))
    driver._early._kept[Get("a")][0].result()
    timer.now += 5.1  # older than its window: sent anew
    assert driver.perform(Get("a")).body == b"body a"
    assert s3.stats()["GetObject"] == 5


def test_a_listing_made_ahead_reads_what_it_found_except_the_keys_to_skip(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    for name in ("p/1", "p/2", "p/3", "p/4"):
        store.put(name, name.encode())
    s3.reset_stats()
    driver = Driver(store, store)
    listing = List("p/", start_after="p/1", max_keys=10)
    driver.perform(Ahead((listing,), 5.0, read_listed=frozenset({"p/3"}), most=1000))
    listed = driver.perform(listing)
    assert [o.key for o in listed.objects] == ["p/2", "p/3", "p/4"]
    answers = driver.perform(Parallel((Get("p/2"), Get("p/4"))))
    assert [a.body for a in answers] == [b"p/2", b"p/4"]
    assert s3.stats()["ListObjectsV2"] == 1
    assert s3.stats()["GetObject"] == 2  # read ahead, each once
    assert driver.perform(Get("p/3")).body == b"p/3"  # skipped: read now
    assert s3.stats()["GetObject"] == 3


def test_a_failed_read_made_ahead_is_its_answer(s3: S3Endpoint, store: ObjectStore) -> None:
    driver = Driver(store, store)
    driver.perform(Ahead((Get("missing"),), 5.0))
    failed = driver.perform(Parallel((Get("missing"), Get("missing"))))
    assert type(failed[0]).__name__ == "NotFoundError"  # the read made ahead's answer
    assert type(failed[1]).__name__ == "NotFoundError"  # taken once: the second was sent


# -- the simulator does the same ---------------------------------------------------------------


def even() -> Profile:
    each = Latency(0.010)
    return Profile(name="even", get=each, put=each, cas=each, list=each, delete=each)


def run(program: Steps) -> tuple[Any, Endpoint]:
    loop = Loop()
    sim = SimS3(even(), Random(1), tracked=frozenset({REGISTRY_KEY}))
    endpoint = Endpoint(loop, sim, Random(2), Faults(), StoreRetry(), root_key=REGISTRY_KEY)
    for name in ("p/1", "p/2", "p/3", "p/4"):
        sim.put(name, name.encode(), 0.0, create=True)
    outcome: list[Any] = []

    def done(result: Any, error: BaseException | None) -> None:
        outcome.append(error if error is not None else result)

    Process(loop, endpoint, program, kind="writer", done=done).start(1.0)
    loop.run(100.0)
    return outcome[0], endpoint


def test_the_simulator_answers_requests_with_reads_made_ahead() -> None:
    listing = List("p/", start_after="p/1", max_keys=10)

    def program() -> Steps:
        yield Ahead((listing,), 1.0, read_listed=frozenset({"p/3"}))
        yield Sleep(0.5)
        listed = yield listing
        start = yield Now()
        answers = yield Parallel((Get("p/2"), Get("p/4")))
        took = (yield Now()) - start
        late = yield Get("p/3")
        yield Ahead((Get("p/2"),), 1.0)
        yield Sleep(2.0)
        again = yield Get("p/2")  # older than its window: sent anew
        return [o.key for o in listed.objects], [a.body for a in answers], took, late, again

    (keys, bodies, took, late, again), endpoint = run(program())
    assert keys == ["p/2", "p/3", "p/4"]
    assert bodies == [b"p/2", b"p/4"]
    assert took == 0.0  # answered when asked: read during the sleep
    assert late.body == b"p/3"
    assert again.body == b"p/2"
    requests = endpoint.counts.requests
    assert requests["writer:ListObjectsV2"] == 1
    assert requests["writer:GetObject"] == 5  # p/2, p/4 ahead; p/3; p/2 ahead and again


# -- a folder reads its next fold ahead ------------------------------------------------------


def _lists_right_after_own_swap(read_ahead: int) -> tuple[int, int]:
    """LISTs a process sent the moment its own swap was answered, and the run's commits."""
    events: list[dict[str, Any]] = []
    config = SimConfig(
        writers=16, seconds=3, seed=1, mix=APPENDS, policy=(("read_ahead", read_ahead),)
    )
    result = simulate(config, trace=events.append)
    swapped = {
        (e["process"], e["answered"])
        for e in events
        if e["key"] == REGISTRY_KEY and e["operation"] == "PutObject" and e["answer"] == "ok"
    }
    ahead = sum(
        1
        for e in events
        if e["operation"] == "ListObjectsV2" and (e["process"], e["sent"]) in swapped
    )
    assert result.violations == []
    return ahead, result.metrics.commits


def test_a_folder_lists_its_next_fold_as_its_swap_lands() -> None:
    ahead, commits = _lists_right_after_own_swap(1)
    none, _ = _lists_right_after_own_swap(0)
    assert none == 0
    assert ahead > 5  # 9 swaps carried others' intents and each listed at once
    assert commits > 50


# -- the hand-over -------------------------------------------------------------------------


def test_a_root_read_that_returns_our_own_swap_leaves_us_the_last_swapper() -> None:
    """The hand-over: reading back the root we swapped in (its ETag ours: a race nobody won)
    leaves us the last swapper, who folds instead of waiting for the oldest writer; any
    other root, or the hand-over off, makes us a waiter."""
    doc = RegistryDoc(version=3)

    def after(handover: bool, etag: str) -> bool:
        committer = Committer(rng=Random(1), fixed={"handover": handover})
        committer.known, committer.hints.swapped_last = (doc, '"ours"'), True
        committer.observe(doc, etag)
        return committer.hints.swapped_last

    def waits(swapped_last: bool) -> bool:
        schedule = Scheduler(FoldPolicy(), random.Random(1))
        schedule.hints = Hints(round_seconds=0.2, swapped_last=swapped_last)
        return schedule.wait_for(0.0, 1, 50, version=0, older="a", ours="b", first_fold=False)

    assert after(True, '"ours"')
    assert not after(True, '"theirs"')  # somebody else swapped: a waiter
    assert not after(False, '"ours"')
    assert not waits(swapped_last=True)
    assert waits(swapped_last=False)
    with pytest.raises(ValueError, match="handover must be true or false"):
        fixed_values({"handover": 2.0})


def test_without_the_hand_over_a_lost_race_stalls_every_writer() -> None:
    """Seed 15, 64 writers: the folder's swap and a waiter's race each other; S3 refuses the
    folder's (a 409) and the waiter's (a 412): nobody won. Without the hand-over the folder,
    having read the root again, waits for the oldest writer, who waits for a folder: no
    swap for 0.87 s. With it the folder is still the last swapper and folds again at once:
    the next swap is one fold later. (The runs differ after the first such race. Found
    before lone requests were hedged, which changes the run: run without that. Seed 2 showed
    it until registry commits carried whether their files existed before, which moves the
    run; seed 22 showed it until the simulator's workload became the whole public API, seed
    29 until writers used the floor the lake stores, seed 114 until each process kept a retry
    budget and a pace, seed 51 until the simulator ran the shell's own group commit and
    roots became format 3, seed 47 until later changes of the core moved its run too,
    seed 1 of 0-59 until an intent's key took the time its PUT goes out, seed 47 of 0-57
    until a process that does not linger read no fold ahead, seed 2 until a writer that
    reads no root listed the snapshots, the first of 0-15 since: seed 15. Run without
    lingering too: since a folder whose caller is away lingers, no
    seed of 0-59 shows the stall, the lingering fold ending it.)"""

    def after_lost_races(handover: bool) -> list[tuple[float, str]]:
        """For each swap refused after the start-up: how long until the next swap, and why
        it was refused."""
        events: list[dict[str, Any]] = []
        policy = (("handover", handover), ("hedge_alone", 0), ("linger", 0))
        config = SimConfig(writers=64, seconds=6, seed=15, mix=APPENDS, policy=policy)
        assert simulate(config, trace=events.append).violations == []
        cas = [
            (e["answered"], e["answer"])
            for e in events
            if e["key"] == REGISTRY_KEY and e["operation"] == "PutObject"
        ]
        swaps = sorted(t for t, answer in cas if answer == "ok")
        lost = sorted((t, answer) for t, answer in cas if answer != "ok" and t > 1.5)
        return [(min(s for s in swaps if s > t) - t, why) for t, why in lost if t < swaps[-1]]

    without = after_lost_races(False)
    stalled = {why for gap, why in without if gap > 0.7}
    # The folder's 409 and a waiter's 412: nobody won, the root was still the folder's.
    assert stalled == {"ConflictError", "PreconditionFailedError"}
    handed_over = [gap for gap, _ in after_lost_races(True)]
    assert handed_over
    assert max(handed_over) < 0.5  # one fold: root, LIST, reads, writes, swap
