"""A lake its pipeline is done with: ``Lake.close()`` (or the end of ``with Lake(...)``) ends
what it does in the background, so it sends no request afterwards and leaves no thread."""

from __future__ import annotations

import concurrent.futures.thread
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import REGISTRY_KEY
from lakelock._registry import Registry
from lakelock._registry._changes import Change
from lakelock._registry._core import Driver, FoldPolicy
from lakelock._registry._core._hedging import Race
from lakelock._registry._core._requests import Ahead, Get, List, Parallel, Put, Request
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore, PutResult
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, plant_intent, registry, wait_until
from tests._support.files import datafile
from tests.test_driver_hedging import warm, warmed


def started_during(before: set[threading.Thread]) -> list[str]:
    """Names of lakelock's threads alive now that were not in ``before`` (the endpoint's
    threads serving connections are not lakelock's)."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t not in before and t.is_alive() and t.name.startswith("lakelock-")
    )


def test_close_waits_for_a_hedged_writes_slower_copy(s3: S3Endpoint, bucket: str) -> None:
    """A data PUT held at the endpoint is sent again and the copy lands: the append returns
    while the held copy is still on its way, to be refused and read back later. Closing the
    lake waits for both, so nothing of the lake reaches S3 after ``close()`` returned (a
    pipeline's next step, or whoever counts its requests, meets none), and none of its
    threads is left."""
    before = set(threading.enumerate())
    lake = Lake(bucket, s3=s3.client(), retry=FAST_RETRY)
    table = pa.table({"amount": [1, 2]})
    lake.append("sales", table)
    warm(lake)
    s3.inject("stall", operation="PutObject", prefix="datasets/sales/", count=1)
    lake.append("sales", table)  # its hedge landed; the held copy is still held
    assert s3.stalled() == 1
    closer = threading.Thread(target=lake.close)
    closer.start()
    closer.join(timeout=0.5)
    assert closer.is_alive()  # it waits for the held copy
    s3.reset_stats()
    s3.release_stalls()
    closer.join(timeout=60)
    assert not closer.is_alive()
    # The held copy was refused (its hedge made the object) and read back as ours. (Reads the
    # commit made ahead may land after the reset too: they are not what is counted here.)
    assert s3.refused().get("PutObject datasets 412") == 1
    assert s3.stats().get("HeadObject") == 1
    assert started_during(before) == []
    assert lake.read("sales")["amount"].to_pylist() == [1, 2, 1, 2]  # still usable


class _Seen(Race):
    """A race that says when it comes to its second copy (``due``)."""

    def __init__(self, *fields: Any, due: threading.Event) -> None:
        super().__init__(*fields)
        self.due_seen = due

    def hedge(self) -> bool:
        try:
            return super().hedge()
        finally:
            self.due_seen.set()


def test_close_while_a_hedged_request_waits_to_hedge_it_finishes_on_its_first_copy(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A commit's create held at the endpoint while another thread closes the lake (its
    driver's pool shut down, waiting for the held copy): when the race comes to send the
    second copy, the pool takes no more. The request is answered by its first copy, the
    object written once; before, it failed with a bare RuntimeError ("cannot schedule new
    futures after shutdown") for a write that then landed. (Its clock is the test's: it
    reaches the hedge only once the pool is shut down.)"""
    offset = 0.0
    hedging = warmed(2.0, writes=0.05)
    due = threading.Event()
    race_for = hedging.race_for

    def seen(request: Request, *, sent: float, after: dict[bool, float | None]) -> Race:
        race = race_for(request, sent=sent, after=after)
        return _Seen(race.hedging, race.write, race.sent, race.after, race.learns, due=due)

    hedging.race_for = seen  # type: ignore[method-assign]
    driver = Driver(store, store, hedging=hedging, timer=lambda: time.monotonic() + offset)
    s3.reset_stats()
    s3.inject("stall", operation="PutObject", prefix="held/", count=1)
    outcome: list[object] = []

    def request() -> None:
        try:
            outcome.append(driver.perform(Put("held/a", b"x" * 300, create=True)))
        except BaseException as failure:
            outcome.append(failure)

    asking = threading.Thread(target=request)
    asking.start()
    wait_until(lambda: s3.stalled() == 1)
    pool = driver._hedges
    assert pool is not None
    closer = threading.Thread(target=driver.close)
    closer.start()
    wait_until(lambda: pool._shutdown)  # close() waits for the held copy
    offset = 10.0  # the hedge is due
    assert due.wait(30)  # the race came to its second copy
    s3.release_stalls()
    asking.join(timeout=60)
    closer.join(timeout=60)
    assert not asking.is_alive()
    assert not closer.is_alive()
    (answer,) = outcome
    assert isinstance(answer, PutResult), answer
    assert s3.stats()["PutObject"] == 1
    assert store.get("held/a").body == b"x" * 300


def test_requests_of_a_driver_at_interpreter_exit_are_sent_on_its_own_thread(
    s3: S3Endpoint, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At interpreter exit no thread pool takes work ("cannot schedule new futures after
    interpreter shutdown"), while a fold for other processes may still be running: a
    batch's requests and a hedged one are sent on the calling thread, answered as
    always, not failed with a bare RuntimeError."""
    store.put("a", b"a body")
    store.put("b", b"b body")
    driver = Driver(store, store, hedging=warmed(2.0))
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", True)
    a, b = driver.perform(Parallel((Get("a"), Get("b"))))
    assert (a.body, b.body) == (b"a body", b"b body")
    assert isinstance(driver.perform(Put("exit/a", b"x" * 300, create=True)), PutResult)
    assert driver.perform(Ahead((Get("a"),), seconds=60.0)) is None  # none made ahead
    assert driver.perform(Get("a")).body == b"a body"
    monkeypatch.undo()
    driver.close()


def test_a_listing_read_ahead_that_lands_at_interpreter_exit_still_answers(
    s3: S3Endpoint, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing made ahead lands once the interpreter is exiting, when the reads of the
    keys it found can no longer be sent ahead: it still answers the listing the fold then
    asks for (they are read when asked), where it held a bare RuntimeError instead."""
    store.put("listed/a", b"a body")
    driver = Driver(store, store)
    s3.inject("stall", operation="ListObjectsV2", count=1)
    listing = List("listed/")
    driver.perform(Ahead((listing,), seconds=60.0, read_listed=frozenset()))
    wait_until(lambda: s3.stalled() == 1)
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", True)
    s3.release_stalls()
    answer = driver.perform(listing)
    assert [o.key for o in answer.objects] == ["listed/a"]
    assert driver.perform(Get("listed/a")).body == b"a body"
    monkeypatch.undo()
    driver.close()


def lingering_folder(store: ObjectStore) -> tuple[set[threading.Thread], Registry]:
    """A lake with one commit and another process's intent ``other-1`` left 5 s ago, and a
    registry that will fold it and then linger (real sleeps, far longer than a test: only
    ``close()`` ends it); with the threads alive before that registry was made."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    stale = int(time.time() * 1000) - 5000
    plant_intent(store, Change("sales", "other-1", add=(datafile("sales", "", "b"),)), ms=stale)
    before = set(threading.enumerate())
    folder = registry(
        store,
        policy=FoldPolicy(linger=100_000, read_ahead=False),
        retry=RetryPolicy(max_attempts=10),
    )
    return before, folder


def test_close_stops_folding_for_other_processes(s3: S3Endpoint, store: ObjectStore) -> None:
    """A process that folded others' intents goes on folding for them on a thread after its
    caller returned (lingering: here up to 100,000 rounds that find nothing), sleeping real
    time between rounds. Closing its registry ends that thread at once, in its sleep or
    after the request it is making: a closed registry sends nothing more, and an intent
    planted afterwards is left to the others' own rules."""
    before, folder = lingering_folder(store)
    folder.commit("sales", add=[datafile("sales", "", "c")])  # folds other-1
    lingerer = folder._commits.lingerer
    assert lingerer is not None
    assert lingerer.is_alive()
    folder.close()
    assert not lingerer.is_alive()
    assert started_during(before) == []
    s3.reset_stats()
    later = plant_intent(store, Change("sales", "other-2", add=(datafile("sales", "", "d"),)))
    assert registry(store)._current()[0].fate(later) is None  # nobody folded it
    requests: dict[str, Any] = s3.stats()
    assert requests == {"PutObject": 1, "GetObject": 1}  # the plant and the read, no more


def test_the_end_of_a_with_block_brings_the_views_up_to_date(s3: S3Endpoint, bucket: str) -> None:
    """``with Lake(..., mirror=...)``: the views of the block's last commit are written by
    its end (a short-lived pipeline's process would otherwise exit with them behind), and
    the mirroring thread is gone."""
    before = set(threading.enumerate())
    with Lake(bucket, s3=s3.client(), retry=FAST_RETRY, mirror=("delta",)) as lake:
        for amount in range(3):
            lake.append("sales", pa.table({"amount": [amount]}))
    assert started_during(before) == []
    assert lake.auto_mirror is not None
    assert lake.auto_mirror.errors == 0
    assert lake.mirror("sales", "delta").already_current


def test_close_mirrors_a_commit_scheduled_while_the_mirror_thread_was_ending(
    s3: S3Endpoint, bucket: str
) -> None:
    """The end of a ``with`` block takes the mirroring thread to end it just as a commit
    on another thread schedules its dataset: that commit finds the thread, starts none, and
    the thread ends without mirroring it. ``close()`` must still mirror it and return (it
    waited for ever: nothing was left to mirror what was pending). The interleaving is made
    here by hand, under the mirror's own lock, as the two threads would make it."""
    lake = Lake(bucket, s3=s3.client(), retry=FAST_RETRY, mirror=("delta",))
    lake.append("sales", pa.table({"amount": [1]}))
    auto = lake.auto_mirror
    assert auto is not None
    assert auto.wait(timeout=60)
    lake.registry.commit("refunds", add=lake.config.open().write("refunds", pa.table({"n": [1]})))
    auto.wait(timeout=60)
    with auto._changed:  # the commit's schedule() finds a thread; close() takes it
        auto._pending.add("refunds")
        ending, auto._thread = auto._thread, None
        auto._changed.notify_all()
    assert ending is not None
    ending.join(timeout=60)
    closing = threading.Thread(target=lake.close, name="test-close")
    closing.start()
    closing.join(timeout=120)
    assert not closing.is_alive(), "close() waits for a mirror nothing will run"
    assert lake.mirror("refunds", "delta").already_current


def test_close_during_a_commit_that_then_folds_for_others_leaves_no_fold_running(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A pipeline's commit on one thread folds another process's intent; its swap is held
    at the endpoint while the main thread closes the registry. ``close()`` returns (no fold
    for others is running yet), the swap is let go and the commit returns: it must not
    start folding for others then. Once, it did: a lingering thread, started after
    ``close()`` returned, went on listing and swapping on a registry its user had closed."""
    before, folder = lingering_folder(store)
    s3.inject("stall", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    committing = threading.Thread(
        target=folder.commit, args=("sales",), kwargs={"add": [datafile("sales", "", "c")]}
    )
    committing.start()
    try:
        wait_until(lambda: s3.stalled() == 1)  # its swap, which folds other-1, is held
        folder.close()
        s3.release_stalls()
        committing.join(timeout=60)
        assert not committing.is_alive()
        assert started_during(before) == []  # no thread folds for others
    finally:
        folder.close()
    assert sorted(f.name for f in registry(store).files("sales")) == ["a", "b", "c"]
