"""A few writers: a process waits for another's fold only while a folder is at work (it saw
another process swap within the last few rounds); otherwise it reads the root and swaps
itself, and the waiting protocol engages again once swaps collide. Each ``Registry`` here
stands for one process; they share only the bucket, and their clocks are the test's."""

from __future__ import annotations

import random
from typing import Any

from lakelock._registry import CommitResult, Registry
from lakelock._registry._core import FoldPolicy
from lakelock._registry._core._schedule import Hints, Scheduler
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.testing import S3Endpoint
from tests._support import wait_until
from tests._support.files import datafile
from tests._support.simtime import Clock


def process(store: ObjectStore, clock: Clock, sleeps: list[float], **kw: Any) -> Registry:
    """One writer process; its waits and backoffs are recorded in ``sleeps`` (and pass no
    time unless the test says so)."""
    retry = RetryPolicy(max_attempts=30, sleep=kw.pop("sleep", sleeps.append))
    return Registry(store, group_commit=False, retry=retry, clock=clock, **kw)


def commit(reg: Registry, name: str) -> CommitResult:
    return reg.commit("sales", add=[datafile("sales", "", name)])


def names(reg: Registry) -> list[str]:
    return sorted(f.name for f in reg.files("sales"))


def test_two_writers_taking_turns_swap_directly_without_waiting(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Two processes that commit in turn, each pausing between commits for many rounds:
    once each has seen the other commit (its first swap on the root it knew loses: a 412),
    every commit is one attempt — a root GET, no 412, no wait, no intent sent ahead of its
    snapshot. Before, a process that had lost a race swapped on the root it swapped in long
    ago (stale: a 412 and a redrive every commit) or, once the other's swap served it, sent
    its intent and waited rounds for a fold nobody was making."""
    clock = Clock(stopped=True)
    sleeps: list[float] = []
    a = process(store, clock, sleeps)
    b = process(store, clock, sleeps)
    commit(a, "a-0")
    results = []
    for n in range(8):
        clock.passed += 1.0  # the callers compute their next batches
        results.append(commit((b, a)[n % 2], f"{'ba'[n % 2]}-{n + 1}"))
    # b's first commit reads the root it never knew; the next two lose to the other's swap.
    assert [(r.attempts, r.redrives) for r in results[:3]] == [(1, 0), (2, 1), (2, 1)]
    waited = len(sleeps)
    s3.reset_stats()
    for n in range(8, 12):
        clock.passed += 1.0
        results.append(commit((b, a)[n % 2], f"{'ba'[n % 2]}-{n + 1}"))
    assert [(r.attempts, r.redrives) for r in results[3:]] == [(1, 0)] * 9
    assert len(sleeps) == waited  # no wait and no backoff since the first races
    areas = s3.areas()
    assert areas["GetObject root"] == 4  # one look each, before the swap
    assert areas["PutObject root"] == 4
    assert areas["PutObject metastore/intents"] == 4  # each with its snapshot, not before
    assert names(a) == sorted(["a-0", *(f"{'ba'[n % 2]}-{n + 1}" for n in range(12))])


def test_writers_whose_swaps_collide_are_both_applied_and_then_wait_for_the_folder(
    store: ObjectStore,
) -> None:
    """Two processes whose swaps collide: each loser's redrive applies its commit on top of
    the other's, and nothing is lost. A process that lost a race and has just seen the other
    swap (a folder at work) sends its next commit's intent and waits: the other's next swap
    folds it in, and the waiter's commit reports that version — the waiting protocol engages
    once swaps collide."""
    clock = Clock(stopped=True)
    a_sleeps: list[float] = []
    b_sleeps: list[float] = []
    # Neither reads ahead: the test's clock stands still, so a listing made ahead would
    # answer for the next fold whatever was sent since.
    a = process(store, clock, a_sleeps, policy=FoldPolicy(read_ahead=False))
    folded: list[int] = []
    armed: list[bool] = []

    def b_waits(seconds: float) -> None:  # b's wait: once armed, a folds and swaps meanwhile
        b_sleeps.append(seconds)
        if armed and not folded:
            folded.append(commit(a, "a-2").version)

    b = process(store, clock, b_sleeps, sleep=b_waits, policy=FoldPolicy(read_ahead=False))
    b.internals.hints.listed_at = 0.0  # b has committed here before (not a first fold)
    commit(a, "a-0")
    b.read()  # b knows the root ...
    commit(a, "a-1")  # ... which a's swap makes stale
    lost = commit(b, "b-1")  # a collision: b's swap loses, its redrive applies it
    assert (lost.attempts, lost.redrives) == (2, 1)
    assert names(Registry(store)) == ["a-0", "a-1", "b-1"]  # a reader: a's root stays stale
    clock.passed += 0.05  # within a round: b saw a's swap just now
    b.read()  # b's look at the root after its swap: still its own
    commit(a, "a-1b")  # a swaps again (a's root is stale too: a 412 and its redrive)
    b.read()  # b sees a swap of a's: a folder at work, and b no longer swapped last
    armed.append(True)
    waited = commit(b, "b-2")
    assert folded, "b did not wait for a's fold"
    assert (waited.attempts, waited.redrives, waited.version) == (2, 0, folded[0])
    assert names(Registry(store)) == ["a-0", "a-1", "a-1b", "a-2", "b-1", "b-2"]


def test_a_folder_under_contention_reads_ahead_after_a_lone_swap(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A process that others' intents or a lost race showed to be contended reads its next
    fold ahead even after a swap that carried none of theirs: with a few writers, the
    writers its last fold served send their next intents while it swaps alone, and its next
    fold finds them read beside its data PUT. Uncontended, a lone swap reads nothing ahead
    (a writer alone would pay a LIST a commit)."""
    clock = Clock(stopped=True)
    reg = process(store, clock, [])
    commit(reg, "a-0")
    reg.internals.hints.contended_until = float("inf")  # others' intents seen here lately
    s3.reset_stats()
    commit(reg, "a-1")  # a swap that carried nobody's intents
    wait_until(lambda: s3.stats().get("ListObjectsV2", 0) >= 2)  # its fold's, then ahead
    schedule = Scheduler(FoldPolicy(), random.Random(1))
    schedule.hints = Hints(round_seconds=0.2)
    assert schedule.read_ahead(clock()) is None  # not contended, carried nobody's
    schedule.carried = True
    assert schedule.read_ahead(clock()) == 0.2
    schedule.carried = False
    schedule.hints.contended_until = clock() + 1.0
    assert schedule.read_ahead(clock()) == 0.2
