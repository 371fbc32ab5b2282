"""A commit whose batch carried another process's intent hands the process's turn to a
lingering fold on a thread of its own (``CommitQueue.commit``). Starting that thread can
fail (``RuntimeError: can't start new thread``: a process or container at its thread or pid
limit, a busy interpreter exiting); the commit itself has landed by then. Its caller hears
its result, nobody folds for others, and the turn taken for the lingering fold is given
back (``GroupCommit.not_lingering``): the process's next commit goes ahead."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import pytest

from lakelock._registry import Registry
from lakelock._registry._changes import Change
from lakelock._registry._core import FoldPolicy
from lakelock._s3 import ObjectStore
from tests._support import plant_intent, registry
from tests._support.files import datafile
from tests._support.simtime import Clock


def names(reg: Registry) -> list[str]:
    return [f.name for f in reg.files("sales")]


#: Lingering for a while, reading nothing ahead.
POLICY = FoldPolicy(linger=100_000, read_ahead=False)


def no_linger_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lingering fold's thread cannot start, as at a process's thread limit."""
    start = threading.Thread.start

    def refused(self: threading.Thread) -> None:
        if self.name == "lakelock-linger":
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refused)


def folder_that_pauses(store: ObjectStore, clock: Clock) -> Any:
    """A committer whose caller pauses a minute between commits (so it lingers at once
    after a swap that carried others' intents), with a dead writer's intent to fold."""
    folder = registry(store, policy=POLICY, clock=clock)
    folder.commit("sales", add=[datafile("sales", "", "a")])
    clock.passed += 60.0
    stale = int(time.time() * 1000) - 5000
    plant_intent(store, Change("sales", "other-1", add=(datafile("sales", "", "b"),)), ms=stale)
    return folder


def test_a_commit_that_landed_is_not_told_it_failed_nor_are_later_commits_stuck(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder's caller commits ``c`` a minute after its last commit; its swap applies
    ``c`` and the dead writer's ``b``; the lingering thread cannot start. ``c`` is
    committed, so its caller must hear so; and the process's next commit must not wait
    for a turn nobody holds any more."""
    clock = Clock()
    folder = folder_that_pauses(store, clock)
    no_linger_thread(monkeypatch)
    heard: BaseException | None = None
    try:
        folder.commit("sales", add=[datafile("sales", "", "c")])
    except RuntimeError as error:
        heard = error
    landed = "c" in names(registry(store))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        later = pool.submit(folder.commit, "sales", add=[datafile("sales", "", "d")])
        done, _ = concurrent.futures.wait([later], timeout=3)
        stuck = not done
        folder._commits.group.committing = False  # let the stuck commit go, for the pool
        with folder._commits.turn:
            folder._commits.turn.notify_all()
    assert landed
    assert (heard, stuck) == (None, False), (
        f"the caller of a commit that landed heard {heard!r}; the next commit "
        + ("waits for the turn the lingering fold never took" if stuck else "went ahead")
    )
