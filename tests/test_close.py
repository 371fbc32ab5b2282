"""A lake its pipeline is done with: ``Lake.close()`` (or the end of ``with Lake(...)``) ends
what it does in the background, so it sends no request afterwards and leaves no thread."""

from __future__ import annotations

import threading
import time
from typing import Any

import pyarrow as pa

from lakelock import Lake
from lakelock._registry._changes import Change
from lakelock._registry._core import FoldPolicy
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, registry
from tests._support.files import datafile
from tests.test_committer import plant_intent
from tests.test_driver_hedging import warm


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


def test_close_stops_folding_for_other_processes(s3: S3Endpoint, store: ObjectStore) -> None:
    """A process that folded others' intents goes on folding for them on a thread after its
    caller returned (lingering: here up to 100,000 rounds that find nothing), sleeping real
    time between rounds. Closing its registry ends that thread at once, in its sleep or
    after the request it is making: a closed registry sends nothing more, and an intent
    planted afterwards is left to the others' own rules."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    stale = int(time.time() * 1000) - 5000
    plant_intent(store, Change("sales", "other-1", add=(datafile("sales", "", "b"),)), ms=stale)
    before = set(threading.enumerate())
    folder = registry(
        store,
        # Real sleeps, and lingering far longer than the test: only close() ends it.
        policy=FoldPolicy(linger=100_000, read_ahead=False),
        retry=RetryPolicy(max_attempts=10),
    )
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
