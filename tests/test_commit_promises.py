"""What a commit's outcome promises, forced against the embedded endpoint: an acknowledged
commit is applied, with its own content; a definite failure is never applied afterwards; a
data file is live in a dataset at most once; and the typed error another process decided
reaches the commit's caller. Each ``Registry`` or ``Lake`` here stands for one process.

Each rule is one function of the commit core (docs/FORMAT.md, "The rules"); the last test of
each section switches it off and shows the promise broken, as the simulator's seeds do."""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._clock import DATE_RESOLUTION
from lakelock._datafile import DataFile
from lakelock._digest import change_digest
from lakelock._fence import Fence
from lakelock._registry import Registry, _shell
from lakelock._registry._changes import Change
from lakelock._registry._core import FoldPolicy, _decide
from lakelock._registry._document import IntentFate, parse_registry
from lakelock._registry._intents import intent_group
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore, _resolve
from lakelock._vacuum import vacuum
from lakelock.errors import (
    CommitConflictError,
    CommitIdReusedError,
    CommitStateUnknownError,
    FileAlreadyRegisteredError,
    NotFoundError,
    ObjectTooOldError,
    RetryBudgetExhaustedError,
    SchemaMismatchError,
    StaleFenceError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, no_sleep, plant_intent, registry, wait_until
from tests._support.files import datafile
from tests._support.outcomes import (
    id_taken_while_its_swap_is_held,
    impatient_lake,
    while_its_first_swap_is_in_flight,
)
from tests._support.simtime import HOUR, SimTime, later

ROOT = "metastore/dataset_registry.json"
INT_IDS = pa.schema([("id", pa.int64())])


def table(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids})


def ids(lake: Lake, dataset: str) -> list[int]:
    return sorted(lake.read(dataset)["id"].to_pylist())


# -- one commit id, one change ----------------------------------------------------------------


def crashed_append(lake: Lake, dataset: str, rows: list[int], commit_id: str) -> str:
    """An ``append`` of ``rows`` whose process wrote its data and its intent, then died."""
    files = lake.write(dataset, table(rows))
    digest = change_digest({"partition_by": ()}, table=table(rows))
    change = Change(dataset, commit_id, add=tuple(files), operation="append", digest=digest)
    return plant_intent(lake.store, change)


def test_a_commit_id_taken_by_a_crashed_runs_intent_for_another_dataset_is_refused(
    lake: Lake,
) -> None:
    """A crashed run left an intent appending to ``alpha`` under ``job-42``; another process
    appends to ``beta`` under the same id, and its fold applies both in one batch. Before,
    the second was "settled with its twin": ``beta``'s caller heard "committed" and
    ``beta`` never existed. Now it is ``CommitIdReusedError`` naming ``alpha``."""
    lake.append("alpha", table([0]))
    crashed_append(lake, "alpha", [1, 2], "job-42")
    other = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    with pytest.raises(CommitIdReusedError) as info:
        other.append("beta", table([7]), commit_id="job-42")
    assert info.value.recorded_dataset == "alpha"
    assert "beta" not in other.registry.read().datasets
    assert ids(other, "alpha") == [0, 1, 2]


def test_a_rerun_with_other_rows_beside_its_crashed_runs_intent_is_refused(lake: Lake) -> None:
    """A re-run with one more row than the crashed run whose intent is still pending: both
    land in one batch. Before, the re-run was told it committed while its row was missing
    (the crashed run's rows were applied in its stead); now it is ``CommitIdReusedError``.
    A re-run with the very same rows is the same change: ``already_committed``."""
    lake.append("c", table([0]))
    crashed_append(lake, "c", [1, 2, 3], "job-42")
    other = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    with pytest.raises(CommitIdReusedError, match="other content"):
        other.append("c", table([1, 2, 3, 4]), commit_id="job-42")
    assert ids(other, "c") == [0, 1, 2, 3]

    crashed_append(lake, "c", [5, 6], "job-43")
    again = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    result = again.append("c", table([6, 5]), commit_id="job-43")
    assert result.already_committed
    assert result.version == again.registry.find_commit("job-43")
    assert ids(again, "c") == [0, 1, 2, 3, 5, 6]


def test_a_rerun_whose_crashed_runs_intent_is_applied_while_it_waits_commits_once(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A pipeline re-runs a crashed commit under its commit id with the same rows (new
    files, the same digest). Its process looks the id up (not recorded) and is then held
    (its intent's PUT stalled at the endpoint) while another process folds the crashed
    run's intent in and more commits than the idempotency window follow. Before, the
    re-run, having looked the id up once, applied its own intent as well: its rows were
    committed twice. Now it looks again once the root's window no longer covers every
    version since it last looked, and hears ``already_committed`` at the crashed run's
    version."""
    digest = change_digest({"rows": "the same"})
    registry(store, commit_window=3).commit("c", add=[datafile("c", "", "before")])
    rerun = registry(store, commit_window=3, clock=lambda: time.time() + 3600)
    again = Change("c", "job-7", add=(datafile("c", "", "again"),), operation="append")
    s3.inject("stall", operation="PutObject", prefix="metastore/intents/", count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(rerun.commit_changes, [replace(again, digest=digest)])
        wait_until(lambda: s3.stalled() == 1)
        crashed = Change("c", "job-7", add=(datafile("c", "", "first"),), operation="append")
        plant_intent(store, replace(crashed, digest=digest))
        other = registry(store, commit_window=3)
        for n in range(5):
            other.commit("c", add=[datafile("c", "", f"other-{n}")])
        first = other.find_commit("job-7")
        assert first is not None
        s3.release_stalls()
        result = waiting.result(timeout=60)
    assert (result.already_committed, result.version) == (True, first)
    names = [f.name for f in registry(store).files("c")]
    assert "first" in names
    assert "again" not in names


def test_a_commit_whose_own_intent_a_fold_applied_is_not_told_already_committed(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A pipeline commits under its commit id; its intent is written and its swap held at
    the endpoint while another process folds that intent in and more commits than the
    idempotency window follow (the intent's fate pruned, the watermark past it, the id's
    record gone from the root's window). Let go, the swap is refused, and the commit finds
    its id in the dataset's commit-id index at the fold's version: that entry names the
    commit's own intent, so its caller hears it committed, not ``already_committed``.
    Before, an index entry named no intent, and a caller-chosen id found there was always
    taken as an earlier commit's: a pipeline counting its own commits counted one too few."""
    registry(store, commit_window=3).commit("c", add=[datafile("c", "", "before")])
    writer = registry(store, commit_window=3)
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            writer.commit, "c", add=[datafile("c", "", "mine")], commit_id="job-7"
        )
        wait_until(lambda: s3.stalled() == 1)
        other = registry(store, commit_window=3)
        # Its folds move the watermark up to the newest intent listed (no lag).
        other.internals.policy = replace(other.internals.policy, watermark_lag=0.0)
        for n in range(5):
            other.commit("c", add=[datafile("c", "", f"other-{n}")])
        folded = other.find_commit("job-7")
        assert folded is not None
        root = parse_registry(store.get(ROOT).body)
        # Only the index records it: the window moved on, the fate is pruned.
        assert root.commit("job-7") is None
        assert all(f.version > folded for f in root.fates)
        s3.release_stalls()
        result = waiting.result(timeout=60)
    assert (result.version, result.already_committed) == (folded, False)
    assert [f.name for f in registry(store).files("c")].count("mine") == 1


def two_commits_in_one_batch(s3: S3Endpoint, lake: Lake, *commits: Any) -> list[Any]:
    """Each of ``commits`` run in a thread of its own while an earlier commit of the same
    ``Lake`` holds the batch in flight (its swap held at the endpoint): they queue, and the
    next batch takes them all. Returns each one's result or error."""
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    queue = lake.registry._commits.queue
    with concurrent.futures.ThreadPoolExecutor(len(commits) + 1) as pool:
        first = pool.submit(lake.append, "other", table([0]))
        wait_until(lambda: s3.stalled() == 1)
        futures = [pool.submit(c) for c in commits]
        wait_until(lambda: len(queue) == len(commits))
        s3.release_stalls()
        first.result(timeout=60)
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result(timeout=60))
            except Exception as error:
                outcomes.append(error)
    return outcomes


def test_two_threads_committing_one_id_to_two_datasets_in_one_batch(
    s3: S3Endpoint, lake: Lake
) -> None:
    """Two threads of one ``Lake`` append to ``alpha`` and ``beta`` under ``job-42`` and
    land in one batch. Before, both returned the same version, not ``already_committed``,
    and ``beta`` did not exist. Now one commits and the other is ``CommitIdReusedError``."""
    outcomes = two_commits_in_one_batch(
        s3,
        lake,
        lambda: lake.append("alpha", table([1]), commit_id="job-42"),
        lambda: lake.append("beta", table([2]), commit_id="job-42"),
    )
    errors = [o for o in outcomes if isinstance(o, Exception)]
    assert len(errors) == 1, outcomes
    assert isinstance(errors[0], CommitIdReusedError)
    datasets = lake.registry.read().datasets
    assert ("alpha" in datasets) != ("beta" in datasets)


def test_two_threads_committing_one_change_in_one_batch_commit_it_once(
    s3: S3Endpoint, lake: Lake
) -> None:
    """The very same change twice in one batch (a retry racing its first run): it is applied
    once, both callers hear its version, and the second hears ``already_committed``."""
    outcomes = two_commits_in_one_batch(
        s3,
        lake,
        lambda: lake.append("alpha", table([1]), commit_id="job-42"),
        lambda: lake.append("alpha", table([1]), commit_id="job-42"),
    )
    assert len({o.version for o in outcomes}) == 1, outcomes
    assert sorted(o.already_committed for o in outcomes) == [False, True]
    assert ids(lake, "alpha") == [1]


def test_one_id_one_change_switched_off_drops_an_acknowledged_commit(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_decide.reused_in_batch`` switched off (a twin of one id is settled with the first,
    whatever it changes): the other dataset's caller hears "committed" and nothing of it
    is in the registry — what the rule prevents."""
    monkeypatch.setattr(_decide, "reused_in_batch", lambda *_, **__: None)
    lake.append("alpha", table([0]))
    crashed_append(lake, "alpha", [1, 2], "job-42")
    other = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    result = other.append("beta", table([7]), commit_id="job-42")
    assert result.version == other.registry.find_commit("job-42")
    assert "beta" not in other.registry.read().datasets


# -- the typed error, from whichever process decided it --------------------------------------


def folded_by_another_process(store: ObjectStore, **commit: Any) -> BaseException:
    """Our commit (``commit``: ``Registry.commit``'s arguments) sends its intent and waits a
    round, as under contention; meanwhile another process's fold decides it. Returns the
    error our caller gets."""
    outcome, _ = while_another_process_folds(store, lambda ours: ours.commit("sales", **commit))
    assert isinstance(outcome, Exception), outcome
    other = registry(store, group_commit=False)
    assert [f.state for f in other._current()[0].fates][-2:] == ["rejected", "applied"]
    return outcome


def test_a_stale_fence_found_by_another_process_is_stale_fence_error(
    store: ObjectStore,
) -> None:
    """A leader whose lease was taken over commits with its old token; another process's fold
    finds the token stale and rejects the intent. Before, the leader got a plain
    ``CommitConflictError`` built from the fate's reason, and code that catches
    ``StaleFenceError`` to step down missed it. Now it is ``StaleFenceError`` with its
    fields, as when its own process finds it stale."""
    registry(store).commit("sales", fence=("lease:etl", 5))
    error = folded_by_another_process(
        store, add=[datafile("sales", "", "zombie")], fence=("lease:etl", 4)
    )
    assert isinstance(error, StaleFenceError), repr(error)
    assert (error.name, error.token, error.current) == ("lease:etl", 4, 5)
    assert (error.dataset, error.commit_id) == ("sales", error.commit_id)
    assert "zombie" not in [f.name for f in registry(store).files("sales")]


def test_a_schema_conflict_found_by_another_process_is_schema_mismatch_error(
    store: ObjectStore,
) -> None:
    """A commit whose schema does not fit the dataset, rejected by another process's fold:
    ``SchemaMismatchError`` (a ``ValueError``), not a plain conflict."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")], schema=INT_IDS)
    error = folded_by_another_process(
        store, add=[datafile("sales", "", "b")], schema=pa.schema([("id", pa.string())])
    )
    assert isinstance(error, SchemaMismatchError), repr(error)
    assert "column 'id' is int64, not string" in str(error)


def test_a_reused_id_found_by_another_process_is_commit_id_reused_error(
    store: ObjectStore,
) -> None:
    """A commit id recorded for another dataset, found by another process's fold:
    ``CommitIdReusedError`` with the recorded version, dataset and operation."""
    first = registry(store).commit("alpha", add=[datafile("alpha", "", "a")], commit_id="k")
    error = folded_by_another_process(store, add=[datafile("sales", "", "b")], commit_id="k")
    assert isinstance(error, CommitIdReusedError), repr(error)
    assert (error.version, error.recorded_dataset) == (first.version, "alpha")


def test_typed_fates_switched_off_lose_the_stale_fence(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_decide.fate_error`` switched off (the writer rebuilds a plain conflict from the
    fate's reason): a zombie leader's ``except StaleFenceError`` no longer sees its fence
    refused — what the rule prevents."""
    monkeypatch.setattr(
        _decide,
        "fate_error",
        lambda fate, change: CommitConflictError(fate.reason, dataset=change.dataset),
    )
    registry(store).commit("sales", fence=("lease:etl", 5))
    error = folded_by_another_process(
        store, add=[datafile("sales", "", "zombie")], fence=("lease:etl", 4)
    )
    assert not isinstance(error, StaleFenceError)


# -- a swap that may still land is never a definite failure ----------------------------------


def two_datasets(lake: Lake) -> Any:
    lake.append("other", table([0]))
    return the_lakes_first_commit(lake)


def the_lakes_first_commit(lake: Lake) -> Any:
    """The commit that creates the registry (a create-only PUT). (A commit spanning
    datasets would not: the registry is created for it first, by a swap of its own, rule 17.)"""
    files = lake.write("alpha", table([1]))
    change = Change("alpha", "first", add=tuple(files), operation="append")
    return lambda: lake.registry.commit_changes([change])


def a_restore(lake: Lake) -> Any:
    lake.append("alpha", table([1]))
    lake.append("alpha", table([2]))
    return lambda: lake.restore("alpha", version=1)


def a_restore_without_intent(lake: Lake) -> Any:
    """A restore of a version no snapshot stores (as on a format-1 lake): the one commit
    that writes no intent to cancel, applied by its own process's swap alone."""
    first = lake.append("alpha", table([1])).version
    lake.append("alpha", table([2]))
    old, until, _ = lake.registry.internals.restore_point("alpha", version=first)
    change = Change(
        "alpha",
        "undo",
        operation="restore",
        restore=replace(old, snapshot=None),
        restore_until=until,
    )
    return lambda: lake.registry.commit_changes([change])


@pytest.mark.parametrize(
    "kind", [two_datasets, a_restore, the_lakes_first_commit, a_restore_without_intent]
)
def test_a_swap_still_in_flight_is_an_unknown_outcome_not_a_failure(
    s3: S3Endpoint, bucket: str, kind: Any
) -> None:
    """A commit spanning datasets, a restore, the commit that creates the registry, or one
    that writes no intent to cancel, whose root PUT is still in flight at the server after
    the client's timeout: the SDK's retry, and every later attempt, is answered 409. Before,
    409 after a retry counted as "not applied", the budget ran out and the caller heard
    ``RetryBudgetExhaustedError`` — then the first PUT landed and the commit was in the
    registry. Now the caller hears ``CommitStateUnknownError`` (look its id up), and a
    definite failure never lands (a commit with intents: its cancelling swap meets the one
    in flight too)."""
    lake = impatient_lake(s3, bucket)
    commit = kind(lake)
    before = lake.registry.read().version
    outcome = while_its_first_swap_is_in_flight(s3, commit)
    landed = lake.registry.read().version > before
    assert landed  # the held PUT was the commit's first swap: it lands once let go
    assert isinstance(outcome, CommitStateUnknownError), repr(outcome)


@pytest.mark.parametrize("rule", [(_decide, "swap_may_land"), (_resolve, "may_still_land")])
def test_a_swap_that_may_still_land_switched_off_is_a_failure_that_lands(
    s3: S3Endpoint, bucket: str, monkeypatch: pytest.MonkeyPatch, rule: tuple[Any, str]
) -> None:
    """Either half of rule 13 switched off — ``_decide.swap_may_land`` (a root read that does
    not show the lost swap proves it absent, though the root has not moved past the version
    it was based on) or ``_resolve.may_still_land`` (a 409 to the SDK's retry of the root's
    PUT is "not applied"): a commit with no intent to cancel (every other kind's cancelling
    swap meets the one in flight) hears a definite failure, and lands afterwards."""
    monkeypatch.setattr(*rule, lambda *_, **__: False)
    lake = impatient_lake(s3, bucket)
    commit = a_restore_without_intent(lake)
    outcome = while_its_first_swap_is_in_flight(s3, commit)
    assert isinstance(outcome, RetryBudgetExhaustedError), repr(outcome)
    assert lake.history("alpha", limit=1)[0].operation == "restore"


def refused_after_its_intent(s3: S3Endpoint, store: ObjectStore) -> BaseException | None:
    """A commit to ``beta`` under ``job-42`` whose writer has written its intent, its first
    swap held at the endpoint while another process (one that folds nobody's intents)
    commits ``alpha`` under the same id; let go, the swap is refused (the root moved), and
    the writer reads the root that records ``job-42`` for ``alpha``. Then that process
    commits past the idempotency window, and a third process folds. Returns the ``beta``
    commit's error (``None``: it committed)."""
    mover = registry(store, commit_window=3, max_fold=0)
    mover.commit("alpha", add=[datafile("alpha", "", "first")])
    writer = registry(store, commit_window=3)
    error, _ = id_taken_while_its_swap_is_held(s3, writer, mover)
    for n in range(4):
        mover.commit("alpha", add=[datafile("alpha", "", f"after-{n}")])
    registry(store, commit_window=3).commit("gamma", add=[datafile("gamma", "", "g")])
    return error


def test_a_commit_refused_by_its_own_writer_after_its_intent_is_written_never_lands(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A commit whose own writer finds its id recorded for another dataset once its intent
    is written is refused (``CommitIdReusedError``: nothing committed). Before, the intent
    was left without a fate: once the record left the root's window, another process's fold
    applied it, and ``beta`` gained the rows its caller was told were never committed. Now
    the writer records the intent rejected by a swap before its caller hears the refusal."""
    error = refused_after_its_intent(s3, store)
    assert isinstance(error, CommitIdReusedError), repr(error)
    assert error.recorded_dataset == "alpha"
    assert "beta" not in registry(store).read().datasets


def test_a_refusal_left_unrecorded_lands_later(
    s3: S3Endpoint, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a writer's own refusal switched back to unrecorded (its caller hears it at once,
    its intent left without a fate), the refused commit is applied by a later fold: what
    the test above pins."""
    monkeypatch.setattr(_decide, "refused_unrecorded", lambda *_: False)
    error = refused_after_its_intent(s3, store)
    assert isinstance(error, CommitIdReusedError), repr(error)
    assert [f.name for f in registry(store).files("beta")] == ["b"]


def refusal_fate(store: ObjectStore) -> IntentFate:
    """The one fate the root records that is not ``applied``: the refused intent's."""
    root = parse_registry(store.get(ROOT).body)
    (fate,) = [f for f in root.fates if f.state != "applied"]
    return fate


def test_a_writers_own_refusal_is_recorded_by_a_swap_that_folds_the_others(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """The swap that records a writer's own refusal does a folder's work too: another
    process's pending intent (a writer that died before its swap) is applied in that same
    version. Before, the refusal was a swap of its own carrying no fold, racing the folders'
    swaps (at 256 writers of the default mix it halved the commits a second): the dead
    writer's commit waited for somebody else's fold."""
    mover = registry(store, commit_window=3, max_fold=0)
    mover.commit("alpha", add=[datafile("alpha", "", "first")])
    writer = registry(store, commit_window=3)
    dead = Change("gamma", "dead-writer", add=(datafile("gamma", "", "g"),))
    error, taken = id_taken_while_its_swap_is_held(
        s3, writer, mover, meanwhile=lambda: plant_intent(store, dead)
    )
    assert isinstance(error, CommitIdReusedError), repr(error)
    root = registry(store).read()
    assert root.version == taken.version + 1  # one swap: the refusal and the fold
    assert "beta" not in root.datasets
    assert [f.name for f in registry(store).files("gamma")] == ["g"]
    fate = refusal_fate(store)
    assert (fate.state, fate.version) == ("rejected", root.version)
    assert fate.error is not None
    assert fate.error["kind"] == "CommitIdReusedError"


def test_a_refusal_kept_when_the_budget_runs_out_is_recorded_rejected_not_cancelled(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A commit whose budget (one attempt) runs out on the lost race after which its writer
    finds its id recorded for another dataset: the swap that gives up (rule 7's cancel)
    records the intent ``rejected`` with the refusal, not ``cancelled``; its caller hears
    ``CommitIdReusedError`` naming the recorded change, not "gave up"; and no later fold,
    past the window, applies it."""
    mover = registry(store, commit_window=3, max_fold=0)
    mover.commit("alpha", add=[datafile("alpha", "", "first")])
    writer = registry(store, commit_window=3, retry=RetryPolicy(max_attempts=1, sleep=no_sleep))
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        refused = pool.submit(
            writer.commit, "beta", add=[datafile("beta", "", "b")], commit_id="job-42"
        )
        wait_until(lambda: s3.stalled() == 1)
        mover.commit("alpha", add=[datafile("alpha", "", "taken")], commit_id="job-42")
        s3.release_stalls()
        error = refused.exception(timeout=60)
    assert isinstance(error, CommitIdReusedError), repr(error)
    assert error.recorded_dataset == "alpha"
    fate = refusal_fate(store)
    assert fate.state == "rejected"
    assert fate.error is not None
    assert fate.error["kind"] == "CommitIdReusedError"
    for n in range(4):
        mover.commit("alpha", add=[datafile("alpha", "", f"after-{n}")])
    registry(store, commit_window=3).commit("gamma", add=[datafile("gamma", "", "g")])
    assert "beta" not in registry(store).read().datasets


# -- a data file is live in a dataset at most once -------------------------------------------


def test_registering_files_again_after_an_unknown_outcome_does_not_double_their_rows(
    s3: S3Endpoint, bucket: str
) -> None:
    """``registry.commit(add=files)`` without a commit id whose outcome is unknown (its swap
    held at the server past the client's timeout, its cancellation refused as well), then
    landed; the caller retries it. Before, the files were registered twice and ``[1, 2, 3,
    4]`` read ``[1, 1, 2, 2, 3, 3, 4, 4]``. Now the retry is ``FileAlreadyRegisteredError``
    naming the files, and each row reads once."""
    lake = impatient_lake(s3, bucket)
    lake.append("c", table([0]))
    files = lake.write("c", table([1, 2, 3, 4]))
    outcome = while_its_first_swap_is_in_flight(s3, lambda: lake.registry.commit("c", add=files))
    assert isinstance(outcome, CommitStateUnknownError), repr(outcome)
    assert ids(lake, "c") == [0, 1, 2, 3, 4]  # it landed
    with pytest.raises(FileAlreadyRegisteredError) as info:
        lake.registry.commit("c", add=files)
    assert info.value.keys == tuple(sorted(f.key for f in files))
    assert ids(lake, "c") == [0, 1, 2, 3, 4]


def test_files_registered_by_another_process_meanwhile_are_refused_in_its_fold(
    store: ObjectStore,
) -> None:
    """Two processes register the same file, one after the other's intent is out: the fold
    that applies the first refuses the second (in the same batch, or later), and the second
    caller hears ``FileAlreadyRegisteredError`` from that process's decision."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    twice = datafile("sales", "", "twice")
    registry(store).commit("sales", add=[twice])
    error = folded_by_another_process(store, add=[twice, datafile("sales", "", "new")])
    assert isinstance(error, FileAlreadyRegisteredError), repr(error)
    assert error.keys == (twice.key,)
    assert [f.name for f in registry(store).files("sales")] == ["a", "theirs", "twice"]


def test_a_file_once_switched_off_doubles_rows(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_decide.registered_twice`` switched off: the same files committed twice without a
    commit id are live twice, and each of their rows reads twice — what the rule prevents."""
    monkeypatch.setattr(_decide, "registered_twice", lambda *_, **__: None)
    files = lake.write("c", table([1, 2]))
    lake.registry.commit("c", add=files)
    lake.registry.commit("c", add=files)
    assert ids(lake, "c") == [1, 1, 2, 2]


# -- nothing vacuum may take is committed: files written before their commit ------------------


def as_reported(files: list[DataFile]) -> list[DataFile]:
    """``files`` as another process reports them (Spark's executors send them as JSON; a
    re-run reads what its killed run wrote back from the store): without the write time
    only the writing process knew."""
    return [DataFile.from_json(f.dataset, f.to_json()) for f in files]


def test_registering_files_vacuum_took_is_refused_not_acknowledged(lake: Lake) -> None:
    """A pipeline's files are written, its driver is stalled two hours (the server's clock),
    and vacuum (window an hour, the lake's floor) deletes them as orphans; then the driver
    registers them (``registry.commit(add=files)``). Before, the commit was acknowledged
    pointing at files that were gone: its rows were lost, and every read of the dataset
    raised RegistryCorruptError until it was repaired by hand. Now it looks each file up and
    refuses the commit (NotFoundError, naming the file): nothing is committed and the
    dataset reads and takes appends as before."""
    sim = SimTime(start=time.time())
    sim.attach(lake.client)  # the writer's server clock: every answer's Date
    lake.append("sales", table([1]))
    files = as_reported(lake.write("sales", table([2])))
    sim.advance(2 * HOUR)
    report = vacuum(
        lake.registry, enforce_retention=False, older_than=HOUR, clock=later(2), dry_run=False
    )
    assert [f.key for f in files] == [k for k in report.deleted if k.startswith("datasets/")]
    with pytest.raises(NotFoundError) as info:
        lake.registry.commit("sales", add=files)
    assert info.value.key == files[0].key
    assert ids(lake, "sales") == [1]
    lake.append("sales", table([3]))
    assert ids(lake, "sales") == [1, 3]


def test_registering_files_older_than_half_the_floor_is_refused(lake: Lake) -> None:
    """Files registered from elsewhere are held to the lake's vacuum floor by when the
    server wrote them (their ``LastModified``), as the files of an append are: within half
    the floor they commit; past it the commit is ``ObjectTooOldError`` naming the file and
    its age, nothing committed. Before, files without a write time were not checked: one
    older than vacuum's window could be deleted by a vacuum running as its commit landed."""
    sim = SimTime(start=time.time())
    sim.attach(lake.client)
    fresh = as_reported(lake.write("sales", table([1])))
    old = as_reported(lake.write("sales", table([2])))
    lake.registry.commit("sales", add=fresh)
    sim.advance(HOUR)
    with pytest.raises(ObjectTooOldError) as info:
        lake.registry.commit("sales", add=old)
    assert (info.value.key, info.value.floor) == (old[0].key, HOUR)
    assert info.value.age >= HOUR - DATE_RESOLUTION  # whole seconds of the server's Date
    assert ids(lake, "sales") == [1]


def test_write_times_switched_off_commit_files_vacuum_took(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The looking up of files written before their commit switched off, as lakelock was
    before it: the files vacuum took are acknowledged, and the dataset cannot be read any
    more (a data file it references is gone). What a mutation test of it starts from."""
    monkeypatch.setattr(_shell, "with_write_times", lambda changes, **_: iter_of(changes))
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        test_registering_files_vacuum_took_is_refused_not_acknowledged(lake)
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)  # nothing cached
    with pytest.raises(NotFoundError) as info:
        fresh.read("sales")
    assert (info.value.operation, info.value.key.split("/")[:2]) == (
        "GetObject",
        ["datasets", "sales"],
    )


def iter_of(changes: Any) -> Any:
    """A sans-I/O computation that asks nothing and returns ``changes``."""
    return list(changes)
    yield  # a generator


# -- a commit planned on a version applies on it ----------------------------------------------


def test_a_commit_planned_on_a_replaced_version_is_refused(lake: Lake) -> None:
    """A change planned on a version of its dataset (``on_version``: the version an Iceberg
    engine's requirements were checked against) is refused once another commit moved the
    dataset, nothing committed: a delete planned before an append cannot land after it."""
    lake.append("c", table([1]))
    planned_on = lake.registry.read().datasets["c"].updated_version
    lake.append("c", table([2]))
    files = lake.write("c", table([3]))
    stale = Change("c", "planned", add=tuple(files), existing_files=True, on_version=planned_on)
    with pytest.raises(CommitConflictError, match=f"planned on version {planned_on}"):
        lake.registry.commit_changes([stale])
    assert ids(lake, "c") == [1, 2]
    current = lake.registry.read().datasets["c"].updated_version
    lake.registry.commit_changes([replace(stale, on_version=current)])
    assert ids(lake, "c") == [1, 2, 3]


def test_a_create_planned_on_no_dataset_is_refused_once_it_exists(lake: Lake) -> None:
    """A create planned on the dataset not existing (``on_version=0``) is refused when
    another commit created it first: two creators never both hear "created"."""
    lake.append("c", table([1]))
    create = Change("c", "create-c", operation="create", on_version=0)
    with pytest.raises(CommitConflictError, match="did not exist"):
        lake.registry.commit_changes([create])
    assert [e.operation for e in lake.history("c")] == ["append"]


def test_the_version_a_crashed_writer_planned_on_travels_in_its_intent(lake: Lake) -> None:
    """An intent planned on a version another commit replaced, left by a process that died
    before its swap, is rejected by the fold of another process too (the intent carries
    ``on_version``), never applied there on a version it was not planned on."""
    lake.append("c", table([1]))
    planned_on = lake.registry.read().datasets["c"].updated_version
    lake.append("c", table([2]))
    files = lake.write("c", table([3]))
    plant_intent(
        lake.store,
        Change("c", "crashed", add=tuple(files), existing_files=True, on_version=planned_on),
    )
    other = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    other.append("c", table([4]))
    assert ids(lake, "c") == [1, 2, 4]
    assert [f.state for f in other.registry._current()[0].fates][-2:] == ["rejected", "applied"]


def test_a_version_once_switched_off_lets_a_stale_plan_land(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_decide.moved_since`` switched off: a change planned on a replaced version lands
    beside the commit that replaced it — what the rule prevents."""
    monkeypatch.setattr(_decide, "moved_since", lambda *_, **__: None)
    lake.append("c", table([1]))
    planned_on = lake.registry.read().datasets["c"].updated_version
    lake.append("c", table([2]))
    files = lake.write("c", table([3]))
    stale = Change("c", "planned", add=tuple(files), existing_files=True, on_version=planned_on)
    lake.registry.commit_changes([stale])
    assert ids(lake, "c") == [1, 2, 3]


# -- every kind of commit folds ----------------------------------------------------------------


def plant_group(store: ObjectStore, changes: list[Change], *, only: int | None = None) -> list[str]:
    """The intents of a commit spanning datasets, written by a process that then died before
    its swap (``only``: it had written just that one of them)."""
    return plant_parts(store, group_intents(changes), only=only)


def group_intents(changes: list[Change]) -> list[tuple[str, bytes]]:
    """The intents of one commit spanning datasets, as its writer makes them."""
    made = intent_group(changes, now_ms=int(time.time() * 1000), token="0badcafe", group="g" * 32)
    return [(key, body) for key, body, _ in made]


def plant_parts(
    store: ObjectStore, intents: list[tuple[str, bytes]], *, only: int | None = None
) -> list[str]:
    """``intents`` written (``only``: just that one); all their keys."""
    for n, (key, body) in enumerate(intents):
        if only is None or n == only:
            store.put(key, body, mode="create")
    return [key for key, _ in intents]


def while_another_process_folds(store: ObjectStore, commit: Any) -> tuple[Any, int]:
    """``commit(registry)`` of our process sends its intents and waits a round, as under
    contention; meanwhile another process appends to ``sales``, and its fold decides ours.
    Returns our outcome (result or error) and the version the other process's swap made."""
    other = registry(store, group_commit=False)
    other.internals.hints.listed_at = 0.0  # not its first fold: it lists before it sends
    folded: list[int] = []

    def meanwhile(_: float) -> None:  # our wait: the other process folds ours now
        if not folded:
            folded.append(other.commit("sales", add=[datafile("sales", "", "theirs")]).version)

    ours = registry(store, group_commit=False, retry=RetryPolicy(max_attempts=50, sleep=meanwhile))
    ours.read()
    ours.internals.hints.contended_until = float("inf")  # under contention, a folder at work
    ours.internals.hints.others_swapped_at = float("inf")
    try:
        outcome: Any = commit(ours)
    except Exception as error:
        outcome = error
    assert folded, "the other process did not fold our commit"
    return outcome, folded[0]


def spanning(commit_id: str, **fenced: Any) -> list[Change]:
    """One commit adding a file to each of ``alpha`` and ``beta``."""
    return [
        Change("alpha", commit_id, add=(datafile("alpha", "", f"{commit_id}-a"),), **fenced),
        Change("beta", commit_id, add=(datafile("beta", "", f"{commit_id}-b"),), **fenced),
    ]


def names(store: ObjectStore, dataset: str) -> list[str]:
    return sorted(f.name for f in registry(store).files(dataset))


def test_a_commit_spanning_datasets_is_applied_by_another_processs_fold(
    store: ObjectStore,
) -> None:
    """A commit spanning two datasets waits under contention while another process folds:
    that fold applies it, both datasets in the other's one swap, and our caller hears it
    committed at that version. Before, such a commit wrote no intent: only its own process
    could apply it, by a root swap of its own, racing every folder (a 6 % share of them cut
    a simulated lake's throughput threefold)."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    result, theirs = while_another_process_folds(
        store, lambda reg: reg.commit_changes(spanning("both"))
    )
    assert not isinstance(result, BaseException), repr(result)
    assert result.version == theirs
    doc = registry(store).read()
    assert doc.datasets["alpha"].updated_version == doc.datasets["beta"].updated_version == theirs
    assert [c.datasets for c in doc.commits if c.id == "both"] == [("alpha", "beta")]


def test_a_restore_is_applied_by_another_processs_fold(store: ObjectStore) -> None:
    """A restore waits under contention while another process folds: that fold makes the
    version it names current again (read from its snapshot), and our caller hears it
    committed at that version. Before, a restore was its own process's alone."""
    first = registry(store).commit("sales", add=[datafile("sales", "", "a")]).version
    registry(store).commit("sales", add=[datafile("sales", "", "b")])

    def restore(reg: Registry) -> Any:
        old, until, _ = reg.internals.restore_point("sales", version=first)
        change = Change("sales", "undo", operation="restore", restore=old, restore_until=until)
        return reg.commit_changes([change])

    result, theirs = while_another_process_folds(store, restore)
    assert not isinstance(result, BaseException), repr(result)
    assert result.version == theirs
    # The other process's own file, committed in the same swap after the restore.
    assert names(store, "sales") == ["a", "theirs"]
    assert registry(store).history("sales", limit=2)[1].operation == "restore"


def test_a_commit_spanning_datasets_refused_by_another_processs_fold_is_typed(
    store: ObjectStore,
) -> None:
    """A commit spanning two datasets whose fence is stale, refused by another process's
    fold: its caller hears ``StaleFenceError`` with its fields (rule 12), and neither
    dataset changed (the fold refuses its intents together)."""
    registry(store).commit("sales", fence=("lease:etl", 5))
    error, _ = while_another_process_folds(
        store, lambda reg: reg.commit_changes(spanning("zombie", fence=Fence("lease:etl", 4)))
    )
    assert isinstance(error, StaleFenceError), repr(error)
    assert (error.token, error.current) == (4, 5)
    datasets = registry(store).read().datasets
    assert "alpha" not in datasets
    assert "beta" not in datasets


def test_a_restore_too_late_for_the_retention_is_refused_by_another_processs_fold(
    store: ObjectStore,
) -> None:
    """A restore left by a process that died before its swap, whose version leaves the
    retention within half the restore's lead: another process's fold refuses it (rule 9,
    by the folder's clock), and the dataset stays as it is; vacuum may be deleting what
    that version references."""
    first = registry(store).commit("sales", add=[datafile("sales", "", "a")]).version
    registry(store).commit("sales", add=[datafile("sales", "", "b")])
    old, _, _ = registry(store).internals.restore_point("sales", version=first)
    soon = time.time() + 60  # the lead is an hour at the default retention
    key = plant_intent(
        store, Change("sales", "late", operation="restore", restore=old, restore_until=soon)
    )
    registry(store).commit("sales", add=[datafile("sales", "", "c")])
    fate = registry(store)._current()[0].fate(key)
    assert fate is not None
    assert fate.state == "rejected"
    assert "leaves the retention" in fate.reason
    assert names(store, "sales") == ["a", "b", "c"]


def test_a_commit_spanning_datasets_whose_writer_died_mid_way_is_applied_whole_or_not_at_all(
    store: ObjectStore,
) -> None:
    """A writer died having written one of its two intents: folds leave that one pending
    (the other's PUT may still be landing), and neither dataset changes. Once the other
    lands (a slow PUT, not a death), the next fold applies both in one swap."""
    # Folds that keep a minute of listed keys above the watermark: the slow PUT lands
    # above it, as it does within a second on S3.
    patient = FoldPolicy(watermark_lag=60.0)
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    intents = group_intents(spanning("half"))
    alpha, beta = plant_parts(store, intents, only=0)
    registry(store, policy=patient).commit("sales", add=[datafile("sales", "", "b")])
    doc = registry(store)._current()[0]
    assert doc.fate(alpha) is None
    assert "alpha" not in doc.datasets
    plant_parts(store, intents, only=1)
    done = registry(store, policy=patient).commit("sales", add=[datafile("sales", "", "c")])
    doc = registry(store)._current()[0]
    fates = [doc.fate(key) for key in (alpha, beta)]
    assert [(f.state, f.version) if f else None for f in fates] == [("applied", done.version)] * 2
    assert doc.datasets["alpha"].updated_version == doc.datasets["beta"].updated_version


def test_a_commit_applied_whole_switched_off_lands_in_part(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_decide.whole_groups`` switched off (each intent of a group applied as a commit of
    its own): one of the two datasets changes while the other intent's PUT is still
    landing — half a commit, what rule 16 prevents."""
    monkeypatch.setattr(
        _decide, "whole_groups", lambda found: [((key,), (change,)) for key, change in found]
    )
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    plant_group(store, spanning("half"), only=0)
    registry(store).commit("sales", add=[datafile("sales", "", "b")])
    datasets = registry(store).read().datasets
    assert "alpha" in datasets
    assert "beta" not in datasets


def test_a_fenced_restore_restores(lake: Lake) -> None:
    """A restore made under a fence (a lease's token) makes its version current. Before, a
    change carrying a fence and no files was taken for a fence-only change (the source of
    a copy): the restore was reported committed and nothing was restored."""
    first = lake.append("alpha", table([1])).version
    lake.append("alpha", table([2]))
    lake.restore("alpha", version=first, fence=("lease:etl", 1))
    assert ids(lake, "alpha") == [1]
