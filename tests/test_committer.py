"""Group commit across processes: intents folded by other committers, forced branch by branch
against the embedded endpoint. Each ``Registry`` here stands for one process (its own cache,
its own in-process queue); they share only the bucket."""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lakelock import _vacuum_plan
from lakelock._registry import CommitResult, Registry
from lakelock._registry._changes import (
    HARD_MAX_MANIFESTS_PER_PARTITION,
    MAX_MANIFESTS_PER_PARTITION,
    Change,
    Fence,
)
from lakelock._registry._core import FoldPolicy
from lakelock._registry._core._requests import Steps
from lakelock._registry._core._schedule import (
    CROWD,
    GATHER,
    MAX_WAITS,
    TAKE_OVER,
    Hints,
    Scheduler,
    fixed_values,
)
from lakelock._registry._document import REGISTRY_KEY, IntentFate, RegistryDoc
from lakelock._registry._intents import (
    INTENT_PREFIX,
    intent_document,
    intent_ms,
    parse_intent,
    prune_fates,
)
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock._vacuum import vacuum
from lakelock.errors import RetryBudgetExhaustedError
from lakelock.testing import S3Endpoint
from tests._support import (
    FAST_RETRY,
    StallAndRace,
    no_sleep,
    plant_intent,
    registry,
    wait_until,
)
from tests._support.files import append, datafile
from tests._support.simtime import Clock, SimTime

ROOT = "metastore/dataset_registry.json"


#: A folder that does not read its next fold ahead (``FoldPolicy.read_ahead``): the LIST it
#: would make as its swap lands runs on a thread of its own, so the endpoint counts it at no
#: fixed point of a test that counts the LISTs of others.
NO_READ_AHEAD = FoldPolicy(read_ahead=False)


def contended_waiter(
    store: ObjectStore, sleep: Callable[[float], None], *, max_attempts: int = 50, **kw: Any
) -> Registry:
    """A committer of another process, as after a lost race: it knows the root (and did not
    make the last swap), and other processes are busy here, so its commits wait first.
    ``sleep`` is where the test makes things happen while it waits."""
    kw.setdefault("policy", NO_READ_AHEAD)  # its LISTs are its commit's, at fixed points
    waiter = registry(
        store, group_commit=False, retry=RetryPolicy(max_attempts=max_attempts, sleep=sleep), **kw
    )
    waiter.read()
    return busy(waiter)


def callers_sleeps(sleeps: list[float]) -> Callable[[float], None]:
    """A sleep that does not wait and records the sleeps of the committing threads, not
    those of a lingering fold that waits for its caller to be away (a thread of its own)."""

    def sleep(seconds: float) -> None:
        if threading.current_thread().name != "lakelock-linger":
            sleeps.append(seconds)

    return sleep


def busy(reg: Registry) -> Registry:
    """``reg`` as a process that sees others commit here: it lost a race (contended), and
    another process's swap is fresh (a folder at work: its commits wait for a fold)."""
    reg.internals.hints.contended_until = float("inf")
    reg.internals.hints.others_swapped_at = float("inf")
    return reg


def seasoned(reg: Registry) -> Registry:
    """``reg`` as a process that has listed intents before: its next fold is not its first
    (a first fold sends its intents before it lists, and waits for any older one's writer)."""
    reg.internals.hints.listed_at = 0.0
    return reg


def names(reg: Registry, dataset: str = "sales") -> list[str]:
    return [f.name for f in reg.files(dataset)]


def test_a_crashed_writers_intent_is_applied_once_by_the_next_committer(store: ObjectStore) -> None:
    """An intent left by a writer that died before its swap is applied by the next committer
    of another process, once; its fate and commit id are recorded; later folds skip it."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    key = plant_intent(store, Change("sales", "dead-1", add=(datafile("sales", "", "d"),)))
    other = registry(store)
    result = other.commit("sales", add=[datafile("sales", "", "b")])
    doc = other._current()[0]
    fate = doc.fate(key)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)
    # Made just now: the watermark stays ``watermark_lag`` behind the fold; the fate stays.
    assert doc.watermark < key
    assert names(other) == ["a", "b", "d"]
    assert other.find_commit("dead-1") == result.version
    third = registry(store)
    third.commit("sales", add=[datafile("sales", "", "c")])
    assert names(third) == ["a", "b", "c", "d"]
    assert [c.id for c in third.read().commits].count("dead-1") == 1


def test_a_fold_that_fails_to_read_one_intent_reads_only_that_one_again(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A fold reads every pending intent of others in parallel; one of those reads answered
    503 past the store's retries fails the attempt, and the next attempt reads that intent
    again, and no other: the answers that came with it are kept (intents are write-once).
    Under a few percent of faults a fold of hundreds of intents meets such a read nearly
    every time, and would otherwise read most of them again at each attempt."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    now = int(time.time() * 1000)
    dead = [
        plant_intent(
            store,
            Change("sales", f"dead-{n}", add=(datafile("sales", "", f"d{n}"),)),
            ms=now - 10_000 + n,
        )
        for n in range(6)
    ]
    # No second copies of slow reads (hedging: timing's, not the fold's): the reads are counted.
    other = registry(store, policy=FoldPolicy(read_ahead=False, hedge=0))
    s3.reset_stats()
    # The oldest intent is read first: every other answer comes after the one that fails.
    # Thirty 503s: more than one read's tries (the store's and the SDK's under FAST_RETRY).
    s3.inject("slowdown", operation="GetObject", prefix=dead[0], count=30)
    result = other.commit("sales", add=[datafile("sales", "", "b")])
    failed = s3.faults()["injected"]["slowdown"]
    assert failed == 30
    # The failed tries of the oldest, its one read that landed, and one read of each other
    # listed: the other dead writers' and the first commit's (found applied by its id).
    assert s3.areas()["GetObject metastore/intents"] == failed + 1 + len(dead) - 1 + 1
    assert result.attempts >= 2
    assert names(other) == ["a", "b", *(f"d{n}" for n in range(6))]


def test_a_loser_finds_its_commit_applied_without_redriving_it(
    store: ObjectStore, stall_and_race: StallAndRace
) -> None:
    """Our swap is held while another process commits: that process folds our intent in;
    our swap then fails (412) and the re-read shows our intent applied at its version."""
    ours, theirs = registry(store, group_commit=False), registry(store, group_commit=False)
    ours.commit("sales", add=[datafile("sales", "", "a")])
    result, other = stall_and_race(
        lambda: ours.commit("sales", add=[datafile("sales", "", "mine")]),
        lambda: theirs.commit("sales", add=[datafile("sales", "", "theirs")]),
    )
    assert (result.version, result.redrives, result.already_committed) == (other.version, 1, False)
    assert names(ours) == ["a", "mine", "theirs"]
    assert ours.read().version == other.version


def test_an_intent_that_no_longer_applies_is_rejected_alone(store: ObjectStore) -> None:
    """A folded intent with a stale fence is rejected, with its reason, and the folding
    commit lands; the rejected intent is never applied afterwards."""
    reg = registry(store)
    reg.commit("sales", fence=("lease:etl", 5))
    key = plant_intent(
        store,
        Change("sales", "zombie", add=(datafile("sales", "", "z"),), fence=Fence("lease:etl", 4)),
    )
    other = registry(store)
    other.commit("sales", add=[datafile("sales", "", "b")])
    fate = other._current()[0].fate(key)
    assert fate is not None
    assert fate.state == "rejected"
    assert "stale" in fate.reason
    registry(store).commit("sales", add=[datafile("sales", "", "c")])
    assert names(other) == ["b", "c"]


def test_an_expired_intent_is_not_applied(s3: S3Endpoint, store: ObjectStore) -> None:
    """An intent pending longer than the intent TTL by the *server's* clock (the ``Date`` of
    the folder's root read against the listing's ``LastModified``) is rejected as expired: a
    writer that far behind cannot still be waiting for it. A folder whose own clock is an
    hour ahead does not expire it: expiry never trusts a writer's clock."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    key = plant_intent(store, Change("sales", "late", add=(datafile("sales", "", "l"),)))
    ahead = registry(store, clock=lambda: time.time() + 3600, intent_ttl=600)
    ahead.commit("sales", add=[datafile("sales", "", "b")])
    fate = ahead._current()[0].fate(key)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", 2)
    key = plant_intent(store, Change("sales", "later", add=(datafile("sales", "", "m"),)))
    server_later = SimTime(start=time.time() + 3600).attach(s3.client())
    later = registry(ObjectStore(server_later, store.bucket, retry=FAST_RETRY), intent_ttl=600)
    # Its file written now by that server's clock (rule 10 holds it to the vacuum floor).
    later.commit("sales", add=[replace(datafile("sales", "", "c"), written_at=time.time() + 3600)])
    fate = later._current()[0].fate(key)
    assert fate is not None
    assert (fate.state, fate.reason.split(":")[0]) == ("rejected", "expired")
    assert sorted(names(later)) == ["a", "b", "c", "l"]


def test_a_step_of_the_folders_wall_clock_expires_no_young_intent(store: ObjectStore) -> None:
    """A folder's wall clock stepped 15 minutes forward (NTP, by hand) after it read the
    root does not carry its estimate of the server's clock with it: that estimate moves on
    by a monotonic clock, so another process's intent written a moment ago is applied, not
    rejected as expired (it was: the ``Date`` of the root read plus how far the wall clock
    moved since put the intent past the 10-minute TTL, and its writer heard its commit
    refused; a step past half the vacuum floor refused the folder's own fresh file as too
    old, too)."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    stepped = [0.0]
    folder = registry(store, clock=lambda: time.time() + stepped[0], intent_ttl=600)
    folder.commit("sales", add=[datafile("sales", "", "b")])  # reads the root: its Date
    key = plant_intent(store, Change("sales", "young", add=(datafile("sales", "", "y"),)))
    stepped[0] = 900.0
    # Its next commit starts from the root it swapped in, and folds the young intent.
    result = folder.commit("sales", add=[datafile("sales", "", "c")])
    fate = folder._current()[0].fate(key)
    assert fate is not None
    assert (fate.state, fate.version, fate.reason) == ("applied", result.version, "")
    assert names(folder) == ["a", "b", "c", "y"]


def test_a_giving_up_commit_is_cancelled_and_never_applied(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A commit out of retries records its intent cancelled before it reports failure;
    another process's fold later does not apply it."""
    quitter = registry(store, retry=RetryPolicy(max_attempts=2, sleep=no_sleep))
    quitter.commit("sales", add=[datafile("sales", "", "a")])
    s3.inject("conflict", operation="PutObject", prefix=ROOT, count=2)
    with pytest.raises(RetryBudgetExhaustedError):
        quitter.commit("sales", add=[datafile("sales", "", "gave-up")])
    fates = quitter._current()[0].fates
    assert [f.state for f in fates] == ["applied", "cancelled"]
    registry(store).commit("sales", add=[datafile("sales", "", "b")])
    assert names(registry(store)) == ["a", "b"]


def test_cancelling_after_someone_applied_it_reports_success(
    store: ObjectStore, stall_and_race: StallAndRace
) -> None:
    """Exactly one outcome when cancellation races a fold: our only attempt is held while
    another process applies our intent; giving up, we find it applied and report success."""
    ours = registry(store, group_commit=False, retry=RetryPolicy(max_attempts=1, sleep=no_sleep))
    theirs = registry(store, group_commit=False)
    ours.commit("sales", add=[datafile("sales", "", "a")])
    result, other = stall_and_race(
        lambda: ours.commit("sales", add=[datafile("sales", "", "mine")]),
        lambda: theirs.commit("sales", add=[datafile("sales", "", "theirs")]),
    )
    assert result.version == other.version
    assert names(theirs) == ["a", "mine", "theirs"]


def test_lost_ack_on_the_intent_put_commits_once(s3: S3Endpoint, store: ObjectStore) -> None:
    """The answer to the intent's PUT is lost after it applied: the commit lands once."""
    reg = registry(store)
    reg.commit("sales", add=[datafile("sales", "", "a")])
    s3.inject("lost_ack", operation="PutObject", prefix=INTENT_PREFIX, count=1)
    result = reg.commit("sales", add=[datafile("sales", "", "b")], commit_id="once")
    assert s3.faults()["injected"] == {"lost_ack": 1}
    assert names(registry(store)) == ["a", "b"]
    assert registry(store).find_commit("once") == result.version


def test_list_failure_is_retried(s3: S3Endpoint, store: ObjectStore) -> None:
    """A LIST of the intents that fails (503, 500) is retried within the budget."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    s3.inject("slowdown", operation="ListObjectsV2", count=2)
    registry(store).commit("sales", add=[datafile("sales", "", "b")])
    assert s3.faults()["injected"] == {"slowdown": 2}
    assert names(registry(store)) == ["a", "b"]


def test_many_processes_share_swaps(store: ObjectStore) -> None:
    """Eight registries (processes) commit 5 times each at once: every commit lands exactly
    once, and they need fewer swaps than commits (intents folded into others' swaps)."""

    def writer(n: int) -> list[int]:
        reg = registry(
            store, group_commit=False, retry=RetryPolicy(max_attempts=200, sleep=no_sleep)
        )
        return [
            reg.commit("sales", add=[datafile("sales", "", f"w{n}-{i}")]).version for i in range(5)
        ]

    registry(store).commit("sales", add=[datafile("sales", "", "seed")])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        versions = [v for vs in pool.map(writer, range(8)) for v in vs]
    final = registry(store)
    assert len(names(final)) == 41
    commits = [c for c in final.read().commits if c.version > 1]
    assert len(commits) == 40
    assert sorted({c.version for c in commits}) == sorted(set(versions))


def test_a_younger_commit_waits_for_the_oldest_pending_intent_then_helps(
    store: ObjectStore,
) -> None:
    """Under contention a committer whose intent is younger than another pending one waits
    (reading nobody's intents) for that one's writer to fold both; if it never does (here:
    it died), after ``MAX_WAITS`` rounds the committer folds it in itself."""
    now = time.time()  # so our intent is made when the last swap's was: a stagger of a round
    reg = registry(store, retry=RetryPolicy(max_attempts=30, sleep=no_sleep), clock=lambda: now)
    reg.commit("sales", add=[datafile("sales", "", "a")])
    key = plant_intent(
        store,
        Change("sales", "dead-2", add=(datafile("sales", "", "d"),)),
        ms=int(time.time() * 1000) - 1000,
    )
    reg.internals.hints.swapped_last = False  # as if another process had swapped since
    busy(reg)  # as after a lost race: other processes are busy here
    result = reg.commit("sales", add=[datafile("sales", "", "b")])
    # Its first wait (for any process to fold it), its stagger (a round, in looks a third of
    # a round apart), max_waits rounds waiting for the older intent's writer, then its fold.
    assert result.attempts == 1 + round(1 / FoldPolicy().look) + MAX_WAITS + 1
    fate = reg._current()[0].fate(key)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)
    assert names(registry(store)) == ["a", "b", "d"]


def test_waiters_behind_a_stopped_folder_take_over_in_the_order_of_their_intents(
    store: ObjectStore,
) -> None:
    """When a folder stops, its waiters do not all run out of patience at once (each would
    then list and read every pending intent, and race the others' swaps): one whose intent
    has two pending intents ahead of it waits ``TAKE_OVER`` looks longer than the first in
    line (one intent ahead), which by then has folded everybody's."""

    def waiter(dead: int) -> int:
        now = time.time()
        reg = registry(store, retry=RetryPolicy(max_attempts=30, sleep=no_sleep), clock=lambda: now)
        reg.commit("sales", add=[datafile("sales", "", f"a{dead}")])
        for n in range(dead):
            plant_intent(
                store,
                Change("sales", f"dead-{dead}-{n}", add=(datafile("sales", "", f"d{dead}{n}"),)),
                ms=int(now * 1000) - 500 - n,  # after the watermark (a lag behind now), before ours
            )
        reg.internals.hints.swapped_last = False  # as if another process had swapped since
        busy(reg)  # as after a lost race: other processes are busy here
        return reg.commit("sales", add=[datafile("sales", "", f"b{dead}")]).attempts

    first, second = waiter(1), waiter(2)
    assert TAKE_OVER > 0
    assert second - first == TAKE_OVER


def test_a_stall_of_the_root_spends_no_attempts_of_a_waiters_budget(store: ObjectStore) -> None:
    """A waiter's looks at a root that stands still (a folder stopped, or a swap held by a
    write in flight at S3 for seconds) are not attempts of its retry budget: with 20 attempts,
    a waiter behind ten intents of stopped writers still waits its place in the line (its
    ``MAX_WAITS`` looks and ``TAKE_OVER`` more for each intent ahead but the first, 26 in
    all) and then folds them, instead of folding once its looks reached half its budget.
    Counting looks, every waiter behind one stall spent its budget alike, and all of them
    listed and read every pending intent at once when the root moved: at 256 writers under
    faults, 32,000 requests in one second."""
    now = time.time()  # so our intent is made when the last swap's was: a stagger of a round
    reg = registry(store, retry=RetryPolicy(max_attempts=20, sleep=no_sleep), clock=lambda: now)
    reg.commit("sales", add=[datafile("sales", "", "a")])
    dead = 10
    keys = [
        plant_intent(
            store,
            Change("sales", f"dead-{n}", add=(datafile("sales", "", f"d{n}"),)),
            ms=int(now * 1000) - 500 - n,  # after the watermark (a lag behind now), before ours
        )
        for n in range(dead)
    ]
    reg.internals.hints.swapped_last = False  # as if another process had swapped since
    busy(reg)  # as after a lost race: other processes are busy here
    result = reg.commit("sales", add=[datafile("sales", "", "b")])
    looks = MAX_WAITS + TAKE_OVER * (dead - 1)
    assert looks > 20 // 2
    assert result.attempts == 1 + round(1 / FoldPolicy().look) + looks + 1
    for key in keys:
        fate = reg._current()[0].fate(key)
        assert fate is not None
        assert (fate.state, fate.version) == ("applied", result.version)


def test_the_committer_that_swapped_last_folds_an_older_intent_without_waiting(
    store: ObjectStore,
) -> None:
    """The process that made the last swap does not wait for an older pending intent's
    writer: it knows the root without reading it and is committing now, while that writer is
    asleep between two looks. It folds the older intent into its own swap at once: one
    attempt, no wait, no pause for intents being sent, and the older commit applied in the
    same version."""
    sleeps: list[float] = []
    now = time.time()  # so our intent is made when the last swap's was: a stagger of a round
    reg = registry(
        store, retry=RetryPolicy(max_attempts=30, sleep=callers_sleeps(sleeps)), clock=lambda: now
    )
    reg.commit("sales", add=[datafile("sales", "", "a")])
    key = plant_intent(
        store,
        Change("sales", "older", add=(datafile("sales", "", "d"),)),
        ms=int(time.time() * 1000) - 1000,
    )
    busy(reg)  # other processes are busy here
    result = reg.commit("sales", add=[datafile("sales", "", "b")])
    assert result.attempts == 1  # a wait would have been an attempt
    assert sleeps == []
    fate = reg._current()[0].fate(key)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)
    assert names(registry(store)) == ["a", "b", "d"]


def test_a_process_lists_again_at_its_first_commit_after_its_first_swap(
    store: ObjectStore,
) -> None:
    """A process that started on a quiet lake and swapped before the processes started with
    it sent their intents (its LIST found none) folds them at its next commit, within
    ``fold_interval``: a burst's first swapper, committing alone and fast, otherwise passed
    the others' first commits over for a second, each of its swaps beating their folder's
    (412), and sixteen processes' first commits waited for it to finish its burst."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    later = time.time() + 60  # a minute after the lake's last commit; no fold_interval passes
    reg = registry(store, clock=lambda: later)
    first = reg.commit("sales", add=[datafile("sales", "", "b")])
    assert first.attempts == 1
    # Another process started with ours: its intent lands after our LIST and swap.
    key = plant_intent(
        store,
        Change("sales", "started-with-us", add=(datafile("sales", "", "c"),)),
        ms=int(later * 1000) - 1,
    )
    result = reg.commit("sales", add=[datafile("sales", "", "d")])
    fate = registry(store)._current()[0].fate(key)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)
    assert names(registry(store)) == ["a", "b", "c", "d"]


def test_a_contended_commit_waits_first_and_is_folded_by_another_process(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Under contention a committer sends its intent and looks at the root one round later,
    without listing: another process's swap applied it meanwhile, so the commit costs its
    intent PUT and one root GET, and reports the other's version."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    other = seasoned(registry(store, group_commit=False, policy=NO_READ_AHEAD))
    swaps: list[int] = []

    def meanwhile(_: float) -> None:  # our wait: the other process folds and swaps now
        if not swaps:
            swaps.append(append(other, "sales", datafile("sales", "", "theirs")).version)

    ours = contended_waiter(store, meanwhile)
    s3.reset_stats()
    result = append(ours, "sales", datafile("sales", "", "mine"))
    assert (result.version, result.attempts) == (swaps[0], 2)
    ops = s3.stats()
    assert ops["ListObjectsV2"] == 1  # the other's fold; we listed nothing
    # The other's reads of the root, the dataset's snapshot and our intent; our one look.
    assert ops["GetObject"] == 4
    assert names(other) == ["a", "mine", "theirs"]


def folded_watermark(store: ObjectStore, ms: int) -> str:
    """A dead writer's intent made at ``ms``, folded by another process's commit: the root's
    watermark (the newest intent that fold listed) is then at least that intent's key."""
    change = Change("sales", f"dead-{ms}", add=(datafile("sales", "", "d"),))
    key = plant_intent(store, change, ms=ms)
    folder = registry(store)
    # Up to the newest key listed.
    folder.internals.policy = replace(folder.internals.policy, watermark_lag=0.0)
    folder.commit("sales", add=[datafile("sales", "", "folded-it")])
    watermark = registry(store)._current()[0].watermark
    assert watermark >= key
    return watermark


def newest_decided(store: ObjectStore) -> str:
    """The newest intent the root's last swap decided."""
    doc = registry(store)._current()[0]
    return max(f.key for f in doc.fates if f.version == doc.version)


def left_behind(
    store: ObjectStore, fold_at: int | None
) -> tuple[Registry, list[float], list[str], float]:
    """Our intent is out; another process swaps without it, its own intent made a second
    before ours. If ``fold_at``, a third process folds ours at our sleep of that number.
    Returns our registry (not committed yet), our sleeps, the other's intent (once made) and
    when ours is made."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    now = [time.time()]
    sleeps: list[float] = []
    decided: list[str] = []

    def meanwhile(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 1:  # a process that does not fold moves the root without ours
            slow = registry(store, max_fold=0, clock=lambda: now[0] - 1.0)
            slow.commit("sales", add=[datafile("sales", "", "x")])
            decided.append(newest_decided(store))
        elif len(sleeps) == fold_at:  # a process that folds ours in
            folder = seasoned(registry(store, policy=NO_READ_AHEAD))
            folder.commit("sales", add=[datafile("sales", "", "y")])

    ours = contended_waiter(store, meanwhile, clock=lambda: now[0])
    # Neither bound binds: the wait is set by the time behind.
    ours.internals.hints.round_seconds = 1.5
    ours._committer.schedule.gather_for = 0.0
    return ours, sleeps, decided, now[0]


def test_a_waiter_left_behind_by_a_swap_staggers_before_it_lists(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Another process swaps without our intent (its fold listed before our intent was
    there). We do not list at once: we list once the root has stood still ``stagger`` times
    as long as our intent was made after the newest intent that swap decided (at least one
    round, so that we do not race a folder at work; at most two), so the oldest waiter lists
    first. Meanwhile we look at the root every third of a round: a folder at work would have
    applied ours by then."""
    ours, sleeps, decided, made = left_behind(store, fold_at=None)
    s3.reset_stats()
    result = ours.commit("sales", add=[datafile("sales", "", "mine")])
    assert result.attempts == len(sleeps) + 1  # nobody folded ours: we did
    behind = (int(made * 1000) - intent_ms(decided[0])) / 1000
    assert behind == pytest.approx(1.0, abs=0.002)
    staggered = sleeps[1:]
    assert sum(staggered) == pytest.approx(ours.internals.policy.stagger * behind, abs=0.01)
    assert all(s <= 1.5 * FoldPolicy().look + 1e-9 for s in staggered)
    assert s3.stats()["ListObjectsV2"] == 1  # ours, once the root stood still
    assert names(ours) == ["a", "mine", "x"]


def test_a_waiter_left_behind_is_folded_while_it_staggers(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A third process folds our intent while we stagger: our next look finds it applied,
    and our commit costs no LIST at all."""
    ours, sleeps, _, _ = left_behind(store, fold_at=2)
    s3.reset_stats()
    result = ours.commit("sales", add=[datafile("sales", "", "mine")])
    assert (result.attempts, len(sleeps)) == (3, 2)
    assert sleeps[1] == pytest.approx(1.5 * FoldPolicy().look)
    assert s3.stats()["ListObjectsV2"] == 1  # the folder's; ours none
    assert names(ours) == ["a", "mine", "x", "y"]


def test_a_waiter_passed_over_by_a_fold_lists_at_once(s3: S3Endpoint, store: ObjectStore) -> None:
    """The last fold listed past our intent's key without seeing it (our PUT landed after its
    LIST): ours is among the oldest pending, so we list and fold at once, no stagger. And
    with ``stagger = 0`` a waiter left behind lists at once too."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    folded_watermark(store, int(time.time() * 1000) + 60_000)  # made "later" than ours
    for stagger in (2.0, 0.0):
        sleeps: list[float] = []

        def meanwhile(
            seconds: float, sleeps: list[float] = sleeps, x: str = f"x-{stagger}"
        ) -> None:
            sleeps.append(seconds)
            if len(sleeps) == 1:
                registry(store, max_fold=0).commit("sales", add=[datafile("sales", "", x)])

        ours = contended_waiter(store, meanwhile)
        ours.internals.policy = replace(ours.internals.policy, stagger=stagger)
        ours._committer.schedule.gather_for = 0.0
        s3.reset_stats()
        result = ours.commit("sales", add=[datafile("sales", "", f"mine-{stagger}")])
        assert result.attempts == 2
        assert len(sleeps) == 1  # the first wait only
        assert s3.stats()["ListObjectsV2"] == 1  # ours: we folded


def test_a_waiter_whose_root_did_not_move_lists(s3: S3Endpoint, store: ObjectStore) -> None:
    """Nobody swapped while we waited and then staggered: nobody is folding, so we list (and
    fold) rather than stagger again. Our intent is the oldest pending (made just after the
    last swap's newest), and still the stagger is one round: a folder at work would have
    swapped within it, and we would not race it."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    folded_watermark(store, int(time.time() * 1000) - 60)
    made = intent_ms(newest_decided(store)) / 1000 + 0.010  # ours: 10 ms after it
    sleeps: list[float] = []
    ours = contended_waiter(store, sleeps.append, clock=lambda: made)
    ours._committer.schedule.gather_for = 0.0
    round_seconds = ours.internals.hints.round_seconds  # learnt again after the swap
    assert ours.internals.policy.stagger * 0.010 < round_seconds
    s3.reset_stats()
    result = ours.commit("sales", add=[datafile("sales", "", "mine")])
    looks = round(1 / FoldPolicy().look)
    assert (result.attempts, len(sleeps)) == (2 + looks, 1 + looks)  # the first wait, a stagger
    assert sum(sleeps[1:]) == pytest.approx(round_seconds)
    assert s3.stats()["ListObjectsV2"] == 1


def test_a_waiters_stagger_is_capped_at_two_rounds(store: ObjectStore) -> None:
    """A waiter whose intent was made long after the last swap's newest waits two rounds
    at most before it looks again."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    folded_watermark(store, int(time.time() * 1000) - 60)
    made = intent_ms(newest_decided(store)) / 1000 + 60.0
    sleeps: list[float] = []
    ours = contended_waiter(store, sleeps.append, clock=lambda: made)
    ours._committer.schedule.gather_for = 0.0
    round_seconds = ours.internals.hints.round_seconds
    ours.commit("sales", add=[datafile("sales", "", "mine")])
    assert sum(sleeps[1:]) == pytest.approx(2 * round_seconds)


def test_a_batch_of_intents_sent_early_commits_without_staggering(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """In one process, a commit that arrives while a batch is in flight sends its intent
    early; its own batch then commits at once. Only a committer waiting for another process
    staggers: this one waits for nobody."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    folded_watermark(store, int(time.time() * 1000) - 60)
    sleeps: list[float] = []
    reg = registry(store, retry=RetryPolicy(sleep=sleeps.append))
    reg.read()
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(reg.commit, "sales", add=[datafile("sales", "", "first")])
        wait_until(lambda: s3.stalled() == 1)
        second = pool.submit(reg.commit, "sales", add=[datafile("sales", "", "second")])
        wait_until(lambda: any(p.intent_sent for p in reg._commits.queue))
        s3.release_stalls()
        assert first.result(timeout=60).attempts == 1
        result = second.result(timeout=60)
    assert (result.attempts, result.batch_size, sleeps) == (1, 1, [])


def test_waiting_rounds_poll_steadily_not_with_growing_backoff(store: ObjectStore) -> None:
    """Waiting for an older intent's writer sleeps about one fold-and-swap round each time
    (jittered below it), not an exponential backoff."""
    sleeps: list[float] = []
    now = time.time()  # so our intent is made when the last swap's was: a stagger of a round
    reg = registry(
        store, retry=RetryPolicy(max_attempts=30, sleep=callers_sleeps(sleeps)), clock=lambda: now
    )
    reg.commit("sales", add=[datafile("sales", "", "a")])
    plant_intent(
        store,
        Change("sales", "dead-3", add=(datafile("sales", "", "d"),)),
        ms=int(time.time() * 1000) - 1000,
    )
    reg.internals.hints.swapped_last = False  # as if another process had swapped since
    busy(reg)
    reg.internals.hints.round_seconds = 0.3
    reg.commit("sales", add=[datafile("sales", "", "b")])
    # Its first wait (about a round: sooner mostly finds the intent pending), its stagger (a
    # round: its intent is the newest, in looks a third of a round apart), then max_waits
    # waits for the older intent's writer.
    looks = round(1 / FoldPolicy().look)
    first, stagger = sleeps[0], sleeps[1 : 1 + looks]
    waits = sleeps[1 + looks : 1 + looks + MAX_WAITS]
    gathering = sleeps[1 + looks + MAX_WAITS :]
    assert 0.9 * 0.3 <= first <= 1.1 * 0.3
    assert stagger == [pytest.approx(0.3 * FoldPolicy().look)] * looks
    assert len(waits) == MAX_WAITS
    assert all(0.15 <= s <= 0.3 for s in waits)
    # Then it folds for everybody: a moment for intents being sent, before reading them.
    assert gathering == [pytest.approx(0.3 * GATHER)]


def test_a_rerun_commit_id_is_not_applied_twice_through_an_old_intent(store: ObjectStore) -> None:
    """A caller-chosen commit id whose first run left an intent behind (the writer died) and
    whose re-run committed through another: folding the old intent finds the id in the
    dataset's commit-id index and records it applied there, never applying it again."""
    # A lake whose root keeps one commit id (every registry below uses it).
    registry(store, commit_window=1).commit("sales", add=[datafile("sales", "", "a")])
    # Its writer's clock a minute ahead: no swap's watermark passes its key however slowly
    # this runs (one made now is passed over once the swaps below come a lag later, as they
    # did on a loaded machine, and the folder never lists it).
    first = Change("sales", "run-7", add=(datafile("sales", "", "first"),))
    key = plant_intent(store, first, ms=int(time.time() * 1000) + 60_000)
    # Commits without folding anyone's intent; a root window of one commit id, so the id
    # has left the root when the old intent is folded: only the index knows it.
    rerun = registry(store, max_fold=0, commit_window=1)
    done = rerun.commit("sales", add=[datafile("sales", "", "second")], commit_id="run-7")
    rerun.commit("sales", add=[datafile("sales", "", "c")])
    folder = registry(store)
    folder.commit("sales", add=[datafile("sales", "", "b")])
    fate = folder._current()[0].fate(key)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", done.version)
    assert names(folder) == ["a", "b", "c", "second"]


def test_waits_do_not_grow_the_backoff_of_later_failures() -> None:
    """A retry policy with steady waits: each wait sleeps the poll; the failures after them
    back off from the smallest step, as if the waits had not happened."""

    class Waiting(Exception):
        pass

    class Failing(Exception):
        pass

    sleeps: list[float] = []
    policy = RetryPolicy(initial_backoff=0.01, max_backoff=10.0, sleep=sleeps.append)
    outcomes = [Waiting] * 6 + [Failing] * 3
    for attempt in policy.retrying((Waiting, Failing), steady=(Waiting,), poll=lambda: 0.5):
        with attempt:
            if outcomes:
                raise outcomes.pop(0)()
    assert sleeps[:6] == [0.5] * 6
    # Full jitter below 0.01 * 2**n for the n-th failure (n = 1, 2, 3), not 2**7 and up.
    assert all(0 <= s <= 0.01 * 2**n for n, s in enumerate(sleeps[6:], start=1))
    assert len(sleeps) == 9


def test_a_folder_without_a_partitions_manifests_leaves_consolidating_to_its_writer(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A partition past 16 manifests is consolidated by a commit whose committer holds them
    all (no GET); a committer that would have to read them (folding another process's
    intents) leaves it, up to 32, and past that consolidates whatever it costs."""
    writer = registry(store, group_commit=False)
    for n in range(MAX_MANIFESTS_PER_PARTITION):
        writer.commit("sales", add=[datafile("sales", "", f"w{n}")])

    def manifests(reg: Registry) -> int:
        return len(reg.read().datasets["sales"].partitions[""].manifests)

    assert manifests(writer) == MAX_MANIFESTS_PER_PARTITION
    s3.reset_stats()
    stranger = registry(store, group_commit=False)
    append(stranger, "sales", datafile("sales", "", "s0"))
    assert manifests(stranger) == MAX_MANIFESTS_PER_PARTITION + 1  # not consolidated
    assert s3.areas().get("GetObject metastore/intents", 0) == 0  # and nothing read for it
    for n in range(1, HARD_MAX_MANIFESTS_PER_PARTITION - MAX_MANIFESTS_PER_PARTITION):
        append(stranger, "sales", datafile("sales", "", f"s{n}"))
    assert manifests(stranger) == HARD_MAX_MANIFESTS_PER_PARTITION
    s3.reset_stats()
    append(stranger, "sales", datafile("sales", "", "past-the-bound"))
    assert manifests(stranger) == 1  # consolidated, reading the writer's manifests
    assert s3.areas()["GetObject metastore/intents"] == MAX_MANIFESTS_PER_PARTITION
    assert len(names(registry(store))) == HARD_MAX_MANIFESTS_PER_PARTITION + 1


def test_the_writer_holding_a_partitions_manifests_consolidates_it_at_once(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """The process that made a partition's manifests (its intents) holds them: its commit
    past 16 consolidates the partition without reading anything."""
    writer = registry(store, group_commit=False)
    for n in range(MAX_MANIFESTS_PER_PARTITION + 1):
        s3.reset_stats()
        writer.commit("sales", add=[datafile("sales", "", f"w{n}")])
    assert len(writer.read().datasets["sales"].partitions[""].manifests) == 1
    assert s3.areas().get("GetObject metastore/intents", 0) == 0  # all its own, held


def test_a_waiter_whose_applied_intent_left_the_root_finds_it_in_the_index(
    store: ObjectStore,
) -> None:
    """Another process folds our intent while we wait, and so many swaps follow that its fate
    and commit record leave the root's windows before we look. Our intent is at or below
    the watermark with no fate: the dataset's commit-id index says it was applied, so the
    commit succeeds at that version (it is not judged again, which would reject its files as
    already registered)."""
    registry(store, commit_window=1).commit("sales", add=[datafile("sales", "", "a")])
    sleeps: list[float] = []
    folded: list[int] = []

    def meanwhile(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 1:
            folder = registry(store, commit_window=1)
            # Up to the newest key listed.
            folder.internals.policy = replace(folder.internals.policy, watermark_lag=0.0)
            folded.append(folder.commit("sales", add=[datafile("sales", "", "f")]).version)
            for n in range(3):
                more = registry(store, commit_window=1, max_fold=0)
                more.commit("sales", add=[datafile("sales", "", f"m{n}")])

    ours = contended_waiter(store, meanwhile)
    result = ours.commit("sales", add=[datafile("sales", "", "mine")])
    doc = ours._current()[0]
    # Our intent (the newest the folder listed: the watermark) has no fate in the root now.
    assert doc.fate(doc.watermark) is None
    assert any(o.key == doc.watermark for o in store.list(INTENT_PREFIX))
    assert doc.commit(result.commit_id) is None  # out of the root's window
    assert (result.version, result.already_committed, len(sleeps)) == (folded[0], False, 1)
    assert names(ours) == ["a", "f", "m0", "m1", "m2", "mine"]


def test_rejections_outlive_applied_fates_in_the_root() -> None:
    """Pruning keeps the most recent fates, and as many of the most recent rejections and
    cancellations again: they are recorded nowhere else."""
    rejected = IntentFate(f"{INTENT_PREFIX}01", "rejected", 2, 1.0, "stale fence")
    applied = [IntentFate(f"{INTENT_PREFIX}0{n + 2}", "applied", 3, 1.0) for n in range(5)]
    kept = prune_fates([rejected, *applied], watermark=f"{INTENT_PREFIX}99", keep=2)
    assert kept == (rejected, *applied[-2:])


def test_a_waiter_learns_when_its_intent_was_applied_not_when_it_looked(
    store: ObjectStore,
) -> None:
    """A waiter settled by another process's swap learns how long that took from the middle
    of the span between its last two looks (the swap landed somewhere in it), not from when
    it happened to look: learning the latter made each wait longer than the last, since a
    look comes up to a round after the swap."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    now = [time.time()]
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # our wait: the clock moves; another process folds us
        now[0] += seconds
        slept.append(seconds)
        if len(slept) == 1:
            registry(store).commit("sales", add=[datafile("sales", "", "theirs")])

    ours = contended_waiter(store, sleep, clock=lambda: now[0])
    ours.internals.hints.round_seconds = 0.4
    result = ours.commit("sales", add=[datafile("sales", "", "mine")])
    assert (result.attempts, len(slept)) == (2, 1)
    assert ours.internals.hints.round_seconds == pytest.approx(0.8 * 0.4 + 0.2 * slept[0] / 2)


def test_a_committer_finding_a_crowd_of_intents_sends_its_own_and_waits(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A committer that was not contended (a process starting, say) and finds ``CROWD``
    intents of other processes pending does not read them all: it sends its intent and
    waits, and another process folds the crowd and ours in one swap. Ours read no intent."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    base = int(time.time() * 1000) - 500  # above the watermark that commit left
    planted = [
        plant_intent(
            store, Change("sales", f"crowd-{n}", add=(datafile("sales", "", f"c{n}"),)), ms=base + n
        )
        for n in range(CROWD)
    ]
    swaps: list[int] = []

    def meanwhile(_: float) -> None:  # our wait: another process folds everything pending
        if not swaps:
            swaps.append(append(registry(store), "sales", datafile("sales", "", "x")).version)

    ours = seasoned(registry(store, group_commit=False, retry=RetryPolicy(sleep=meanwhile)))
    ours.read()
    s3.reset_stats()
    result = append(ours, "sales", datafile("sales", "", "mine"))
    assert result.version == swaps[0]
    doc = ours._current()[0]
    for key in planted:
        fate = doc.fate(key)
        assert fate is not None
        assert (fate.state, fate.version) == ("applied", swaps[0])
    # The other process read the crowd and our intent once each; we read none.
    assert s3.areas()["GetObject metastore/intents"] == CROWD + 1
    assert len(names(ours)) == CROWD + 3


def wait_while_the_root_moves(
    store: ObjectStore, moves: int, *, every: int = 3, attempts: int = 500
) -> tuple[CommitResult, IntentFate | None, list[int], Registry]:
    """Our commit (a retry budget of ``attempts``) waits behind a dead writer's older intent
    while another process swaps every ``every`` rounds, ``moves`` times, never folding
    anybody's intent. Returns our result, the dead intent's fate, the versions those swaps
    made, and our registry."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    dead = plant_intent(
        store,
        Change("sales", "dead-4", add=(datafile("sales", "", "d"),)),
        ms=int(time.time() * 1000) - 1000,
    )
    movers: list[int] = []
    mover = registry(store, max_fold=0)  # commits without folding anybody's intent
    sleeps = itertools.count(1)

    def meanwhile(_: float) -> None:  # another swap (ours not in it) every few looks
        if next(sleeps) % every == 0 and len(movers) < moves:
            movers.append(
                mover.commit("sales", add=[datafile("sales", "", f"m{len(movers)}")]).version
            )

    ours = contended_waiter(store, meanwhile, max_attempts=attempts)
    result = ours.commit("sales", add=[datafile("sales", "", "mine")])
    return result, ours._current()[0].fate(dead), movers, ours


def test_a_waiter_stays_patient_while_the_root_moves(store: ObjectStore) -> None:
    """A waiter counts ``MAX_WAITS`` only over rounds in which the root did not move: while
    other processes keep swapping it waits on (somebody is folding; a fold of many intents
    may take several rounds), and it folds the older intent of a dead writer itself only once
    the root has stood still for ``MAX_WAITS`` rounds."""
    result, fate, movers, _ = wait_while_the_root_moves(store, moves=6)
    assert len(movers) == 6
    assert result.version > movers[-1]  # it folded only after the root stood still
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)


def test_a_waiter_folds_itself_before_its_retry_budget_runs_out(store: ObjectStore) -> None:
    """Patience is bounded though the root moves: with the default retry budget (50
    attempts), a waiter behind a dead writer's intent, while the root moves every third
    round without it (nobody folds that intent), folds the intent itself rather than give
    up: it waits half its budget at most."""
    assert RetryPolicy().max_attempts == 50
    result, fate, _, _ = wait_while_the_root_moves(store, moves=10**6, every=3, attempts=50)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)
    assert result.attempts <= 26


def test_the_last_swapper_does_not_pause_for_intents_being_sent(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A batch of the process that swapped last folds without the gather pause, even when
    its intents went out early (a commit that arrived while the previous batch was in
    flight): it folds again soon, and what is sent meanwhile waits for that fold."""
    sleeps: list[float] = []
    reg = registry(store, retry=RetryPolicy(sleep=sleeps.append))
    reg.commit("sales", add=[datafile("sales", "", "a")])
    busy(reg)  # other processes are busy here
    plant_intent(store, Change("sales", "older", add=(datafile("sales", "", "d"),)))
    s3.reset_stats()
    s3.inject("stall", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(reg.commit, "sales", add=[datafile("sales", "", "b")])
        wait_until(lambda: s3.stalled() == 1)  # the first batch is swapping
        second = pool.submit(reg.commit, "sales", add=[datafile("sales", "", "c")])
        # The first batch's intent went with its snapshot; the second's goes out early.
        wait_until(lambda: s3.areas().get("PutObject metastore/intents", 0) >= 2)
        s3.release_stalls()
        results = [first.result(timeout=60), second.result(timeout=60)]
    assert [r.attempts for r in results] == [1, 1]
    assert sleeps == []  # no wait, no pause
    assert names(registry(store)) == ["a", "b", "c", "d"]


def test_a_waiter_settled_by_another_process_does_not_swap_on_a_stale_root(
    store: ObjectStore,
) -> None:
    """A commit that another process's swap applied shows that others commit here: the
    writer's next commit, past the memory of its last lost race, does not swap on the root
    it knew (stale: a 412 and a redrive). With no swap of the others seen for a while, no
    fold is coming either: it reads the root and swaps itself, at its first attempt."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    now = [time.time()]
    other = registry(store, group_commit=False)

    def sleep(seconds: float) -> None:  # each wait of ours: the other process folds and swaps
        now[0] += seconds
        other.commit("sales", add=[datafile("sales", "", f"theirs-{len(names(other))}")])

    ours = seasoned(contended_waiter(store, sleep, clock=lambda: now[0]))
    ours.internals.hints.contended_until = now[0] + 1.0  # a race lost a while ago
    ours.internals.hints.others_swapped_at = now[0]  # and another process's swap seen just now
    first = ours.commit("sales", add=[datafile("sales", "", "mine-1")])
    assert (first.attempts, first.redrives) == (2, 0)
    now[0] += 2.0  # past that race's memory, and many rounds after the swap that served us
    other.commit("sales", add=[datafile("sales", "", "theirs-late")])  # the root we know is stale
    second = ours.commit("sales", add=[datafile("sales", "", "mine-2")])
    assert (second.attempts, second.redrives) == (1, 0)
    assert {"mine-1", "mine-2", "theirs-late"} <= set(names(other))


def test_an_intent_landing_after_a_fold_listed_it_is_folded_by_the_next(
    store: ObjectStore,
) -> None:
    """A fold moves the watermark no later than ``watermark_lag`` before it listed. An intent
    made before that LIST whose PUT landed after it (here: made half a second before, written
    after) stays above the watermark, and the next fold, of any process, applies it: its
    writer need not fold it alone, racing the others."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    now = time.time()
    listed = plant_intent(
        store, Change("sales", "listed", add=(datafile("sales", "", "l"),)), ms=int(now * 1000)
    )
    folder = registry(store, clock=lambda: now)
    folder.commit("sales", add=[datafile("sales", "", "b")])
    doc = folder._current()[0]
    assert doc.fate(listed) is not None
    late = plant_intent(
        store,
        Change("sales", "late", add=(datafile("sales", "", "late"),)),
        ms=int(now * 1000) - 500,
    )
    assert doc.watermark < late < listed
    result = seasoned(registry(store, clock=lambda: now + 0.1)).commit(
        "sales", add=[datafile("sales", "", "c")]
    )
    assert result.attempts == 1
    fate = registry(store)._current()[0].fate(late)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)
    assert names(folder) == ["a", "b", "c", "l", "late"]


def test_an_intent_is_made_when_its_put_goes_out_not_when_its_commit_was_called(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A commit held seconds between its call and its intent's PUT (here its root read
    stalls at the endpoint; in life a process short of CPU, or a read that timed out) while
    another process's fold moves the watermark past the moment it was called. Its intent's
    key takes the time its PUT goes out, so it lands above that watermark, where every fold
    lists it (FORMAT.md rule 5). Before, the key took the moment of the call: the intent
    landed passed over, for its writer alone to apply, racing every folder (on 64 processes
    of a 2-core machine, appends gave up after their 60 s)."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    now = [time.time() - 1.0]  # the writer's clock: a second behind the folder's
    writer = registry(store, clock=lambda: now[0])
    s3.inject("stall", operation="GetObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(writer.commit, "sales", add=[datafile("sales", "", "held")])
        wait_until(lambda: s3.stalled() == 1)
        called = now[0]
        folder = registry(store)
        folder.internals.policy = replace(folder.internals.policy, watermark_lag=0.0)
        folder.commit("sales", add=[datafile("sales", "", "b")])
        watermark = registry(store)._current()[0].watermark
        assert intent_ms(watermark) > called * 1000  # past the moment the commit was called
        now[0] += 5.0  # held five seconds
        s3.release_stalls()
        held.result(timeout=60)
    (key,) = [
        o.key
        for o in store.list(INTENT_PREFIX)
        if any(f.name == "held" for f in parse_intent(o.key, store.get(o.key).body)[0].add)
    ]
    assert key > watermark  # above it: any fold lists it
    assert intent_ms(key) >= int((called + 5.0) * 1000)
    assert names(registry(store)) == ["a", "b", "held"]


def folded_by_another(s3: S3Endpoint, store: ObjectStore) -> tuple[Registry, CommitResult, int]:
    """A process (no group commit) appends ``mine``; during its first wait another process
    folds what is pending and swaps (appending ``other``). Requests are counted from our
    commit on. Our registry, our result and the other's version."""
    swaps: list[int] = []

    def meanwhile(_: float) -> None:
        if not swaps:
            folder = seasoned(registry(store))
            swaps.append(append(folder, "sales", datafile("sales", "", "other")).version)

    ours = registry(store, group_commit=False, retry=RetryPolicy(sleep=meanwhile))
    s3.reset_stats()
    result = append(ours, "sales", datafile("sales", "", "mine"))
    return ours, result, swaps[0]


def test_a_first_fold_sends_its_intent_first_and_waits_for_an_older_one(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Processes that start together: a process's first fold sends its intent before it
    lists, so that the others starting with it see it, and finding an older pending intent
    (here: of another process starting too) it waits for that one's writer to fold both,
    instead of each swapping alone (one wins; and, having found nobody, it would list again
    only a ``fold_interval`` later)."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    plant_intent(
        store,
        Change("sales", "starting", add=(datafile("sales", "", "s"),)),
        ms=int(time.time() * 1000) - 100,
    )
    # Our wait: the older intent's writer folds both.
    ours, result, swapped = folded_by_another(s3, store)
    assert (result.version, result.attempts) == (swapped, 2)
    assert s3.areas()["GetObject metastore/intents"] == 2  # the folder read both; we, none
    assert names(ours) == ["a", "mine", "other", "s"]


def test_vacuum_keeps_an_intent_applied_between_its_listing_and_its_read_of_the_root(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vacuum protects what the versions it keeps reference and the intents still pending,
    both from one read of the root after its listing. An old intent that another process
    applies between the listing and that read is referenced by the current version it has
    just become: never deleted."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    key = plant_intent(store, Change("sales", "slow", add=(datafile("sales", "", "slow"),)))
    reads: list[str] = []
    read_root = _vacuum_plan.read_root

    def interleaved(bucket: str | None, name: str = REGISTRY_KEY) -> Steps:
        """Another process folds the intent right before vacuum reads the root."""
        reads.append("root")
        seasoned(registry(store)).commit("sales", add=[datafile("sales", "", "b")])
        root: tuple[RegistryDoc, str | None] = yield from read_root(bucket, name)
        return root

    monkeypatch.setattr(_vacuum_plan, "read_root", interleaved)
    # Vacuum's clock an hour ahead: every object listed is older than its window.
    registry(store).configure(vacuum_floor=60)
    report = vacuum(
        registry(store),
        older_than=60,
        enforce_retention=False,
        dry_run=False,
        clock=lambda: time.time() + 3600,
    )
    assert reads == ["root"]
    assert key not in {o.key for o in report.orphans}  # referenced by the current version
    fate = registry(store)._current()[0].fate(key)
    assert fate is not None
    assert fate.state == "applied"
    assert names(registry(store)) == ["a", "b", "slow"]


def test_intents_a_swap_decided_do_not_use_up_the_next_folds_share(store: ObjectStore) -> None:
    """The intents recent swaps decided stay above the watermark for a while, so a LIST
    returns them first; they do not count against ``max_fold``: a fold still reaches the
    pending intent behind more of them than its share."""
    writer = registry(store)
    for n in range(6):  # a lone writer: its commits' intents, decided, above the watermark
        writer.commit("sales", add=[datafile("sales", "", f"w{n}")])
    doc = writer._current()[0]
    above = [f.key for f in doc.fates if f.key > doc.watermark]
    assert len(above) > 4
    pending = plant_intent(store, Change("sales", "behind", add=(datafile("sales", "", "p"),)))
    result = seasoned(registry(store, max_fold=4)).commit("sales", add=[datafile("sales", "", "x")])
    fate = registry(store)._current()[0].fate(pending)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)


def test_a_swap_leaves_at_most_lagging_keys_above_the_watermark(store: ObjectStore) -> None:
    """However recent the keys a fold lists (fast commits, or a folder whose clock is behind
    the writers'), it leaves no more than ``lagging`` of them above the watermark besides the
    intents it carries: each keeps its fate in the root, and every later fold lists it
    again. The intents it carries do not count: at a thousand writers as many are pending at
    once, and a watermark moved past them passes over the ones still landing below them."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])

    def plant(tag: str) -> list[str]:
        return sorted(
            plant_intent(
                store, Change("sales", f"{tag}-{n}", add=(datafile("sales", "", tag + str(n)),))
            )
            for n in range(6)
        )

    first = plant("fast")
    # Without the read made ahead, the second fold lists after the second plant; with a lag
    # of an hour, however slow this machine is, no key passes under the watermark by its age:
    # the count alone decides.
    policy = FoldPolicy(read_ahead=False, watermark_lag=3600.0)
    folder = seasoned(registry(store, policy=policy))
    folder._committer.schedule.lagging = 3
    folder.commit("sales", add=[datafile("sales", "", "b")])
    doc = folder._current()[0]
    assert doc.watermark < first[0]  # 6 carried, 3 + 6 may stay above: the lag alone decides
    second = plant("next")
    folder.commit("sales", add=[datafile("sales", "", "c")])
    doc = folder._current()[0]
    # Listed: the 6 decided ones and the folder's own first intent again, then the 6 it
    # carries. 3 + 6 stay above: the watermark passes the first 4 of them.
    assert doc.watermark == first[3]
    for key in first + second:
        fate = doc.fate(key)
        assert fate is not None
        assert fate.state == "applied"


def test_decided_intents_above_the_watermark_keep_their_fates(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """The fates of intents above the watermark stay in the root beyond ``commit_window``:
    the next fold lists those intents again and must see them decided (it reads none)."""
    registry(store, commit_window=1).commit("sales", add=[datafile("sales", "", "a")])
    planted = [
        plant_intent(store, Change("sales", f"k{n}", add=(datafile("sales", "", f"k{n}"),)))
        for n in range(3)
    ]
    seasoned(registry(store, commit_window=1)).commit("sales", add=[datafile("sales", "", "b")])
    doc = registry(store)._current()[0]
    assert all(key > doc.watermark and doc.fate(key) is not None for key in planted)
    s3.reset_stats()
    append(seasoned(registry(store, commit_window=1)), "sales", datafile("sales", "", "c"))
    assert s3.areas().get("GetObject metastore/intents", 0) == 0
    assert names(registry(store)) == ["a", "b", "c", "k0", "k1", "k2"]


def test_a_first_fold_does_not_wait_for_an_intent_made_long_before(store: ObjectStore) -> None:
    """A process's first fold waits only for intents made about when its own was (processes
    starting with it): one made longer ago than the watermark's lag has a writer that is not
    folding (it would be applied by now), and the first fold folds it at once."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])  # the root moved lately
    dead = plant_intent(
        store,
        Change("sales", "dead-5", add=(datafile("sales", "", "d"),)),
        ms=int(time.time() * 1000) - 5000,
    )
    result = registry(store).commit("sales", add=[datafile("sales", "", "mine")])
    assert result.attempts == 1
    fate = registry(store)._current()[0].fate(dead)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)


def test_a_first_fold_behind_a_crowd_of_old_intents_waits_for_their_folder(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A process starting while a crowd of intents made long before its own is pending (a
    burst's earlier processes, behind a folder a loaded machine slows down) sends its intent
    and waits for that folder's swap, as a waiter does, instead of reading every pending
    intent and racing it: 64 processes started one after another on two cores each read
    every intent on their first fold and lost the swap (412), and the reads' CPU slowed the
    folder further. One dead writer's intent is still folded at once
    (``test_a_first_fold_does_not_wait_for_an_intent_made_long_before``)."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])  # the root moved lately
    made = int(time.time() * 1000) - 5000
    for n in range(CROWD):
        plant_intent(
            store,
            Change("sales", f"earlier-{n}", add=(datafile("sales", "", f"e{n}"),)),
            ms=made + n,
        )
    # Our wait: the folder at work swaps, ours folded too.
    ours, result, swapped = folded_by_another(s3, store)
    assert (result.version, result.attempts) == (swapped, 2)
    # The folder read the crowd's intents and ours; we read none.
    assert s3.areas()["GetObject metastore/intents"] == CROWD + 1
    assert len(names(ours)) == CROWD + 3


def test_a_first_commit_on_a_quiet_lake_lists_before_it_sends(store: ObjectStore) -> None:
    """On a lake whose root has not moved for a while, a process's first commit does not
    send its intent ahead of its LIST (nobody is starting with it): it folds an older
    pending intent at once, in one attempt, its intent created with its snapshot."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    later = time.time() + 60  # this process starts a minute after the last commit
    older = plant_intent(
        store,
        Change("sales", "just-before", add=(datafile("sales", "", "o"),)),
        ms=int(later * 1000) - 100,
    )
    result = registry(store, clock=lambda: later).commit("sales", add=[datafile("sales", "", "m")])
    assert result.attempts == 1
    fate = registry(store)._current()[0].fate(older)
    assert fate is not None
    assert (fate.state, fate.version) == ("applied", result.version)


def test_vacuum_keeps_an_intent_a_fold_passed_over(store: ObjectStore) -> None:
    """An intent below the watermark with no fate was passed over by a fold (its PUT landed
    after the LIST): its writer still applies it in its own swap, so vacuum keeps it while
    it is younger than the intent TTL, whatever vacuum's window (its writer's commit lands
    with the intent as the manifest of its files)."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    change = Change("sales", "late", add=(datafile("sales", "", "late"),))
    key, body, _ = intent_document(change, now_ms=int(time.time() * 1000) - 5000)  # made...
    # ...and written only after another process's fold moved the watermark past it.
    folder = seasoned(registry(store))
    folder.internals.policy = replace(folder.internals.policy, watermark_lag=0.0)
    plant_intent(store, Change("sales", "newer", add=(datafile("sales", "", "n"),)))
    folder.commit("sales", add=[datafile("sales", "", "b")])
    store.put(key, body, mode="create")
    doc = registry(store)._current()[0]
    assert key < doc.watermark
    assert doc.fate(key) is None
    # Two minutes later, with a one-minute window: older than the window, not than the TTL.
    registry(store).configure(vacuum_floor=60)
    report = vacuum(
        registry(store),
        enforce_retention=False,
        older_than=60,
        dry_run=False,
        clock=lambda: time.time() + 120,
    )
    assert key not in report.deleted
    assert key in {o.key for o in store.list(INTENT_PREFIX)}


def test_a_waiter_staggers_after_a_version_that_decided_no_intent(store: ObjectStore) -> None:
    """The last version decided no intent (it changed the lake's settings) and no fold has
    set a watermark yet: a waiter measures how late its intent came from the newest intent
    the root records, and commits."""
    first = registry(store)
    first.commit("sales", add=[datafile("sales", "", "a")])
    first.commit("sales", add=[datafile("sales", "", "s")])
    first.configure(commit_window=200)
    doc = registry(store)._current()[0]
    assert doc.watermark == ""
    assert doc.fates
    assert all(f.version < doc.version for f in doc.fates)
    sleeps: list[float] = []
    ours = contended_waiter(store, sleeps.append)
    result = ours.commit("sales", add=[datafile("sales", "", "mine")])
    assert result.version == doc.version + 1
    assert len(sleeps) >= 2  # the first wait, then the stagger before it listed
    assert names(ours) == ["a", "mine", "s"]


def test_a_folder_lingers_after_its_commit_and_folds_what_comes_next(store: ObjectStore) -> None:
    """With ``linger`` on, a process whose swap carried another process's intent goes on
    folding in a daemon thread after its ``commit()`` returned: an intent sent afterwards is
    applied by it though its writer never swaps, and a commit of its own stops it."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    # Left by a writer that died a while ago: the folder's first fold applies it at once.
    stale = int(time.time() * 1000) - 5000
    plant_intent(store, Change("sales", "other-1", add=(datafile("sales", "", "b"),)), ms=stale)
    folder = registry(store, policy=FoldPolicy(linger=100_000))
    folder._committer.schedule.linger_after = 0.0  # whatever the caller's pauses
    folder.commit("sales", add=[datafile("sales", "", "c")])  # folds other-1 in its swap
    lingerer = folder._commits.lingerer
    assert lingerer is not None
    assert lingerer.is_alive()
    later = plant_intent(store, Change("sales", "other-2", add=(datafile("sales", "", "d"),)))
    reader = registry(store)

    def applied() -> bool:
        fate = reader._current()[0].fate(later)
        return fate is not None and fate.state == "applied"

    wait_until(applied)  # nobody but the lingering folder swaps here
    assert lingerer.is_alive()
    folder.commit("sales", add=[datafile("sales", "", "e")])  # queued: the lingering stops
    lingerer.join(timeout=60)
    assert not lingerer.is_alive()
    assert names(reader) == ["a", "b", "c", "d", "e"]
    assert reader.find_commit("other-2") is not None


@pytest.mark.parametrize(
    ("pause", "after", "lingers"),
    [(None, 1.0, False), (0.05, 1.0, False), (0.25, 1.0, True), (None, 0.0, True)],
    ids=["no pause seen", "back to back", "pausing", "rule off"],
)
def test_a_folder_lingers_only_if_its_caller_pauses_a_round(
    pause: float | None, after: float, lingers: bool
) -> None:
    """``LINGER_AFTER``: the caller's pause between commits (averaged) must be
    at least that many rounds (here a round is 0.2 s)."""
    schedule = Scheduler(FoldPolicy(linger=2), random.Random(1), fixed={"linger_after": after})
    schedule.hints = hints = Hints(round_seconds=0.2, swapped_last=True, pause=pause)
    schedule.carried = True  # our swap carried others' intents
    assert schedule.linger() is lingers
    schedule.carried = False
    assert not schedule.linger()
    hints.learn_pause(1.0)
    hints.learn_pause(0.0)
    assert hints.pause == pytest.approx(0.7 if pause is None else 0.7 * (0.7 * pause + 0.3))


def folds_after_a_pause(store: ObjectStore, policy: FoldPolicy) -> Registry:
    """A committer (``policy``, its clock the test's) whose first commit folds a dead
    writer's intent and whose caller then pauses a second before a commit that folds
    another's: its last swap carried others' intents, and its caller is seen to pause.
    Not reading ahead (``policy`` should not): the LIST made as its first swap landed would
    answer its next fold, which then would not see the intent planted meanwhile."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    stale = int(time.time() * 1000) - 5000
    plant_intent(store, Change("sales", "other-1", add=(datafile("sales", "", "b"),)), ms=stale)
    clock = Clock()
    folder = registry(store, clock=clock, policy=policy)
    folder.commit("sales", add=[datafile("sales", "", "c")])  # folds other-1
    clock.passed += 1.0  # the caller computes its next batch
    # Made after the folder's own last intent: above the watermark its swap set.
    plant_intent(store, Change("sales", "other-2", add=(datafile("sales", "", "d"),)))
    folder.commit("sales", add=[datafile("sales", "", "e")])  # folds other-2
    return folder


def test_linger_turned_on_on_a_registry_in_use_takes_effect(store: ObjectStore) -> None:
    """A policy changed on a registry already made
    (``registry.internals.policy = replace(..., linger=...)``) takes effect. Its caller
    committing again at once, it does not linger (its next commit folds anyway); once its
    caller pauses a round or more between commits, its next swap that carries another's
    intent lingers."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    clock = Clock()
    # Not reading ahead: the LIST made as its first swap landed would answer its next fold,
    # which then would not see the intent planted meanwhile (NO_READ_AHEAD).
    folder = registry(store, clock=clock, policy=NO_READ_AHEAD)
    folder.internals.policy = replace(folder.internals.policy, linger=100_000)
    stale = int(time.time() * 1000) - 5000
    plant_intent(store, Change("sales", "other-1", add=(datafile("sales", "", "b"),)), ms=stale)
    folder.commit("sales", add=[datafile("sales", "", "c")])  # folds other-1: no pause seen
    assert not folder._committer.lingering()  # not at once: only if its caller is away
    clock.passed += 1.0  # the caller computes its next batch
    # Made after the folder's own last intent: above the watermark its swap set.
    plant_intent(store, Change("sales", "other-2", add=(datafile("sales", "", "d"),)))
    folder.commit("sales", add=[datafile("sales", "", "e")])  # folds other-2
    assert folder.internals.hints.pause is not None
    assert folder.internals.hints.pause >= 1.0
    lingerer = folder._commits.lingerer
    assert lingerer is not None
    assert lingerer.is_alive()
    folder.commit("sales", add=[datafile("sales", "", "f")])  # queued: the lingering stops
    lingerer.join(timeout=60)
    assert not lingerer.is_alive()
    assert names(registry(store)) == ["a", "b", "c", "d", "e", "f"]


#: A pipeline that commits twice, pausing in between, and exits while its process lingers.
EXITING_WHILE_LINGERING = """
import sys
import boto3
from lakelock._s3 import ObjectStore
from lakelock.testing import client_kwargs
from tests.test_committer import NO_READ_AHEAD, folds_after_a_pause

store = ObjectStore(boto3.client("s3", **client_kwargs(sys.argv[1])), sys.argv[2])
folder = folds_after_a_pause(store, NO_READ_AHEAD)
assert folder._commits.lingerer is not None and folder._commits.lingerer.is_alive()
print("lingering")
"""


def test_a_process_that_exits_while_lingering_exits_cleanly(
    s3: S3Endpoint, bucket: str, tmp_path: Any
) -> None:
    """A short-lived pipeline: it exits while its lingering thread is inside a LIST (held
    back 1 s). The process ends at once, says nothing on stderr, and its commits stand."""
    s3.inject("latency", operation="ListObjectsV2", delay=1.0, count=1_000)
    script = tmp_path / "pipeline.py"
    script.write_text(EXITING_WHILE_LINGERING)
    done = subprocess.run(
        [sys.executable, str(script), s3.url, bucket],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
        check=False,
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "lingering", "")
    s3.clear_faults()
    store = ObjectStore(s3.client(), bucket, retry=FAST_RETRY)
    assert names(registry(store))[:5] == ["a", "b", "c", "d", "e"]


def test_without_linger_a_folder_hands_over_when_its_commit_returns(store: ObjectStore) -> None:
    """``linger=0``: a commit that carried another process's intent starts no thread (nor,
    by default, one whose caller was not seen to pause: the test above)."""
    folder = folds_after_a_pause(store, replace(NO_READ_AHEAD, linger=0))
    assert folder.internals.hints.pause is not None
    assert folder.internals.hints.pause >= 1.0
    assert folder.find_commit("other-1") is not None
    assert folder.find_commit("other-2") is not None
    assert folder._commits.lingerer is None


def test_policy_counts_must_be_whole_numbers() -> None:
    """A count given as a fraction (``--policy linger=2.5``) is refused when the policy is
    made, not swallowed by the scheduling advice on every commit; so is one of the
    scheduler's fixed values the simulator varies (``--policy lagging=2.5``)."""
    with pytest.raises(ValueError, match="linger must be a whole number"):
        FoldPolicy(linger=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lagging must be a whole number"):
        fixed_values({"lagging": 2.5})
    with pytest.raises(ValueError, match="linger"):
        FoldPolicy(linger=-1)


def test_a_step_back_of_the_writers_clock_does_not_let_it_apply_an_old_passed_over_intent(
    s3: S3Endpoint, client: Any, store: ObjectStore
) -> None:
    """A writer's intent is passed over by another process's fold (its PUT, held at the
    endpoint, lands after that fold listed), and the writer is paused past half the intent
    TTL by the server's clock while its wall clock is stepped back as far (NTP, a VM
    restored). Vacuum may remove such an intent once it is older than the TTL, so the writer
    applies it only while it is younger than half the TTL (rule 4b): it gives up and
    cancels it, nothing applied. Before, the writer measured the intent's age by its wall
    clock (the key's time against now), which the step made look a moment old: it applied
    an intent vacuum could delete as it landed, a version referencing a missing manifest."""
    sim = SimTime(start=time.time())
    sim.attach(client)  # the server's clock: every answer's Date
    step = [0.0]
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    writer = registry(
        store,
        clock=lambda: sim.server + step[0],
        retry=RetryPolicy(
            max_attempts=10, max_elapsed=3_600.0, sleep=no_sleep, clock=sim.machine()
        ),
        intent_ttl=600,
    )
    s3.inject("stall", operation="PutObject", prefix=INTENT_PREFIX, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        late = pool.submit(writer.commit, "sales", add=[datafile("sales", "", "late")])
        wait_until(lambda: s3.stalled() == 1)
        sim.advance(400.0)  # past half the TTL by the server's (and its monotonic) clock
        step[0] = -400.0  # its wall clock stepped back as far
        folder = registry(store)
        folder.internals.policy = replace(folder.internals.policy, watermark_lag=0.0)
        folder.commit("sales", add=[datafile("sales", "", "b")])  # lists before it lands
        s3.release_stalls()
        with pytest.raises(RetryBudgetExhaustedError, match="passed over by a fold"):
            late.result(timeout=60)
    doc = registry(store)._current()[0]
    (cancelled,) = [f for f in doc.fates if f.state == "cancelled"]
    assert cancelled.key <= doc.watermark  # the writer's own, passed over
    assert names(registry(store)) == ["a", "b"]


def test_an_intent_made_late_is_as_old_as_its_put_not_as_its_commit_call(
    s3: S3Endpoint, client: Any, store: ObjectStore
) -> None:
    """A commit held past half the intent TTL between its call and its intent's PUT (its
    root read stalls at the endpoint while the writer's monotonic clock runs on 400 s) makes
    its intent then (FORMAT.md, "An intent's time is when its PUT is sent"). That PUT lands
    after another process's fold listed, so the intent is passed over and only its writer
    applies it, while it is younger than half the TTL (rule 4b): younger by the moment it
    was made, a moment ago, so it applies. Before, its age was counted from the commit's
    call, 400 s: the writer gave up on an intent it had just written."""
    sim = SimTime(start=time.time())
    sim.attach(client)  # the server's clock: every answer's Date
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    writer = registry(
        store,
        retry=RetryPolicy(
            max_attempts=10, max_elapsed=3_600.0, sleep=no_sleep, clock=sim.machine()
        ),
        intent_ttl=600,
    )
    s3.inject("stall", operation="GetObject", prefix=ROOT, count=1)
    s3.inject("stall", operation="PutObject", prefix=INTENT_PREFIX, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        late = pool.submit(writer.commit, "sales", add=[datafile("sales", "", "late")])
        wait_until(lambda: s3.stalled() == 1)
        sim.advance(400.0)  # held past half the TTL by its monotonic clock (and the server's)
        s3.release_stalls()
        wait_until(lambda: s3.faults()["injected"]["stall"] == 2 and s3.stalled() == 1)
        folder = registry(store)
        folder.internals.policy = replace(folder.internals.policy, watermark_lag=0.0)
        folder.commit("sales", add=[datafile("sales", "", "b")])  # lists before it lands
        s3.release_stalls()
        result = late.result(timeout=60)
    doc = registry(store)._current()[0]
    (mine,) = [f for f in doc.fates if f.version == result.version and f.state == "applied"]
    assert mine.key <= doc.watermark  # passed over, applied by its writer
    assert names(registry(store)) == ["a", "b", "late"]
