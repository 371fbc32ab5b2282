"""A folder whose caller commits back to back, then stops (a batch job's last append): it
folds for the others once its caller is away, and only then."""

from __future__ import annotations

import threading
import time
from typing import Any

from lakelock._registry import Registry
from lakelock._registry._changes import Change
from lakelock._registry._core import FoldPolicy
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.testing import S3Endpoint
from tests._support import plant_intent, registry, wait_until
from tests._support.files import datafile
from tests.test_committer import names

#: Lingering as long as the test needs it (its end is not what is tested), reading nothing
#: ahead: the LIST made as a swap lands would answer the next fold, which then would not
#: see an intent planted meanwhile.
POLICY = FoldPolicy(linger=100_000, read_ahead=False)


class Away:
    """The folder's clocks: a monotonic clock that moves only as its sleeps say, and a sleep
    that, on the lingering thread, first waits until the test lets the caller be away."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()
        self.gone = threading.Event()
        self.asleep = threading.Event()

    def clock(self) -> float:
        with self.lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        if threading.current_thread().name == "lakelock-linger":
            self.asleep.set()
            assert self.gone.wait(timeout=60)
        with self.lock:
            self.now += seconds


def burst_folder(store: ObjectStore, away: Away) -> Registry:
    """A committer that folds a dead writer's intent in its swap, its caller committing
    back to back (no pause between commits seen): it does not linger at once."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    stale = int(time.time() * 1000) - 5000
    plant_intent(store, Change("sales", "other-1", add=(datafile("sales", "", "b"),)), ms=stale)
    folder = registry(
        store,
        policy=POLICY,
        retry=RetryPolicy(max_attempts=10, sleep=away.sleep, clock=away.clock),
    )
    folder.commit("sales", add=[datafile("sales", "", "c")])  # folds other-1
    assert folder.internals.hints.pause is None
    assert not folder._committer.lingering()  # its caller is not seen to pause
    return folder


def test_a_folder_whose_caller_stops_folds_for_the_others(store: ObjectStore) -> None:
    """The process that folded for the others makes its last commit (its burst is over) and
    its caller never comes back: once that caller is away, the process folds the others'
    next intents, so they do not wait out their patience before one of them folds (a second
    or more, each time a folder finishes its burst). Without it another process's intent,
    whose writer never swaps, is applied by nobody here."""
    away = Away()
    folder = burst_folder(store, away)
    lingerer = folder._commits.lingerer
    assert lingerer is not None
    later = plant_intent(store, Change("sales", "other-2", add=(datafile("sales", "", "d"),)))
    reader = registry(store)

    def applied() -> bool:
        fate = reader._current()[0].fate(later)
        return fate is not None and fate.state == "applied"

    assert not applied()
    away.gone.set()  # the caller is away
    wait_until(applied)  # nobody but the folder swaps here
    folder.commit("sales", add=[datafile("sales", "", "e")])  # back: the lingering stops
    lingerer.join(timeout=60)
    assert not lingerer.is_alive()
    assert names(reader) == ["a", "b", "c", "d", "e"]


def test_a_caller_back_in_time_is_not_delayed_and_nothing_is_folded_for_it(
    store: ObjectStore, s3: S3Endpoint
) -> None:
    """The caller commits again before it counts as away: its commit does not wait for the
    lingering fold (which never took the turn), and that fold, when its wait ends, sends no
    request: the caller's own batches fold."""
    away = Away()
    folder = burst_folder(store, away)
    lingerer = folder._commits.lingerer
    assert lingerer is not None
    assert away.asleep.wait(timeout=60)  # it waits for the caller to be away
    folder.commit("sales", add=[datafile("sales", "", "e")])  # back in time, not held up
    s3.reset_stats()
    away.gone.set()
    lingerer.join(timeout=60)
    assert not lingerer.is_alive()
    requests: dict[str, Any] = s3.stats()
    assert requests == {}
    assert names(registry(store)) == ["a", "b", "c", "e"]
