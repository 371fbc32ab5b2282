"""The registry's commit loop against the embedded endpoint: every branch of the AWS blog's
412/409 table forced deterministically, plus idempotency, fencing and group commit."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest

from lakelock._registry import REGISTRY_KEY
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    RegistryCorruptError,
    RetryBudgetExhaustedError,
    StaleFenceError,
)
from lakelock.testing import S3Endpoint
from tests._support import StallAndRace, no_sleep, registry, wait_until
from tests._support.files import append, datafile

ROOT = REGISTRY_KEY


def committed_ids(store: ObjectStore) -> list[str]:
    return [c.id for c in registry(store).read().commits]


def test_first_commit_creates_then_cas(s3: S3Endpoint, store: ObjectStore) -> None:
    """The first commit creates the root (version 1), the next replaces it (version 2)."""
    reg = registry(store)
    assert reg.read().version == 0
    first = reg.commit("sales", add=[datafile("sales", "", "a")])
    second = reg.commit("sales", add=[datafile("sales", "", "b")])
    assert (first.version, second.version, first.attempts) == (1, 2, 1)
    assert [f.name for f in reg.files("sales")] == ["a", "b"]


def test_uncontended_commit_chains_from_its_own_write(s3: S3Endpoint, store: ObjectStore) -> None:
    """After its own commit a registry needs no GET: manifest and dataset snapshot PUTs, then
    the root PUT (If-Match on the ETag its last PUT returned). A fresh registry reads the root
    and the dataset's current snapshot first, and lists pending intents of other processes
    once. (Files just written, as ``Lake.append`` commits them; ``Registry.commit`` of files
    written earlier also reads the manifests of the partitions they join, which it does not
    hold: docs/FORMAT.md rule 14.)"""
    reg = registry(store)
    append(reg, "sales", datafile("sales", "", "a"))
    store.stats.reset()
    append(reg, "sales", datafile("sales", "", "b"))
    assert store.stats.snapshot() == {"PutObject": 3}
    store.stats.reset()
    append(registry(store), "sales", datafile("sales", "", "c"))
    assert store.stats.snapshot() == {"PutObject": 3, "GetObject": 2, "ListObjectsV2": 1}
    store.stats.reset()
    registry(store).commit("sales", add=[datafile("sales", "", "d")])
    assert store.stats.snapshot() == {"PutObject": 3, "GetObject": 5, "ListObjectsV2": 1}


def test_stale_chained_root_redrives(store: ObjectStore) -> None:
    """When another writer committed since our last write, the chained PUT meets 412 and
    the commit redrives from a fresh read: nothing is lost."""
    reg, other = registry(store), registry(store)
    reg.commit("sales", add=[datafile("sales", "", "a")])
    other.commit("sales", add=[datafile("sales", "", "b")])
    result = reg.commit("sales", add=[datafile("sales", "", "c")])
    assert (result.redrives, result.version) == (1, 3)
    assert [f.name for f in reg.files("sales")] == ["a", "b", "c"]


def test_precondition_failed_redrives(store: ObjectStore, stall_and_race: StallAndRace) -> None:
    """A commit landing between our read and our PUT makes us re-read and re-apply (412).
    (Folding disabled: the other writer would otherwise apply our intent for us, see
    test_committer.py.)"""
    reg, other = (registry(store, group_commit=False, max_fold=0) for _ in range(2))
    reg.commit("sales", add=[datafile("sales", "", "a")])
    result, theirs = stall_and_race(
        lambda: reg.commit("sales", add=[datafile("sales", "", "mine")]),
        lambda: other.commit("sales", add=[datafile("sales", "", "theirs")]),
    )
    assert (theirs.version, result.version, result.redrives) == (2, 3, 1)
    assert [f.name for f in reg.files("sales")] == ["a", "mine", "theirs"]


def test_redrive_revalidates(store: ObjectStore, stall_and_race: StallAndRace) -> None:
    """On redrive the change is checked again: removing a file another commit removed is a
    conflict, not a silent success. (Folding disabled, as above.)"""
    reg, other = (registry(store, group_commit=False, max_fold=0) for _ in range(2))
    a = datafile("sales", "", "a")
    reg.commit("sales", add=[a, datafile("sales", "", "b")])
    with pytest.raises(CommitConflictError) as info:
        stall_and_race(
            lambda: reg.commit("sales", remove=[a]), lambda: other.commit("sales", remove=[a])
        )
    assert "not registered" in str(info.value)
    assert [f.name for f in reg.files("sales")] == ["b"]


def test_a_rejected_commit_is_judged_again_when_its_swap_loses(
    store: ObjectStore, stall_and_race: StallAndRace
) -> None:
    """A commit that does not apply is rejected only by the swap that records its intent's
    fate: when that swap loses a race, the commit is checked again on the new root, where
    it may apply (its caller is not told "failed" while its intent is still undecided, which
    another process could then apply). (Folding disabled, as above.)"""
    reg, other = (registry(store, group_commit=False, max_fold=0) for _ in range(2))
    reg.commit("sales", add=[datafile("sales", "", "a")])
    late = datafile("sales", "", "late")
    result, _ = stall_and_race(  # ours: rejected ("not registered"), held at its swap
        lambda: reg.commit("sales", remove=[late], commit_id="drop-late"),
        lambda: other.commit("sales", add=[late]),
    )
    assert (result.version, result.redrives) == (3, 1)
    assert [f.name for f in reg.files("sales")] == ["a"]
    assert "drop-late" in committed_ids(store)


def test_conflict_409_retries(s3: S3Endpoint, store: ObjectStore) -> None:
    """409 ConditionalRequestConflict on the root PUT is retried after backoff."""
    reg = registry(store)
    reg.commit("sales")
    s3.inject("conflict", operation="PutObject", prefix=ROOT, count=2)
    result = reg.commit("sales", add=[datafile("sales", "", "a")])
    assert (result.retries, result.attempts, result.version) == (2, 3, 2)


def test_slowdown_503_backs_off(s3: S3Endpoint, store: ObjectStore) -> None:
    """503 SlowDown that outlasts the SDK's own retries is retried by the commit loop."""
    reg = registry(store)
    reg.commit("sales")
    s3.inject("slowdown", operation="PutObject", prefix=ROOT, count=3)  # the SDK tries 3 times
    result = reg.commit("sales", add=[datafile("sales", "", "a")])
    assert (result.retries, result.version) == (1, 2)


def test_retry_budget_exhausted_is_its_own_error(s3: S3Endpoint, store: ObjectStore) -> None:
    """409s that outlast the retry budget end in RetryBudgetExhaustedError (not a conflict:
    the change conflicts with nothing) saying what ran out, with the attempts counted, after
    the commit's intent is recorded cancelled (so no other committer applies it later); a
    409 that never clears leaves the outcome unknown."""
    reg = registry(store, retry=RetryPolicy(max_attempts=4, sleep=no_sleep))
    reg.commit("sales")
    s3.inject("conflict", operation="PutObject", prefix=ROOT, count=4)
    with pytest.raises(RetryBudgetExhaustedError, match="its 4 attempts ran out") as info:
        reg.commit("sales", add=[datafile("sales", "", "a")])
    assert info.value.attempts == 4
    assert not isinstance(info.value, CommitConflictError)
    snap = registry(store).read()
    assert snap.version == 2  # the cancellation
    assert registry(store).commit("sales", properties={"k": "v"}).version == 3
    assert registry(store).files("sales") == []
    s3.inject("conflict", operation="PutObject", prefix=ROOT)
    with pytest.raises(CommitStateUnknownError):
        reg.commit("sales", add=[datafile("sales", "", "b")])


def test_a_rejected_commit_that_gives_up_says_why(s3: S3Endpoint, store: ObjectStore) -> None:
    """A commit that does not apply, whose swaps recording that all meet conflicts until its
    attempts run out, fails with the reason its last attempt found. Its intent was not out
    yet, and a rejection keeps it unsent, so nothing is left for anyone to apply."""
    reg = registry(store, retry=RetryPolicy(max_attempts=2, sleep=no_sleep))
    reg.commit("sales", add=[datafile("sales", "", "a")])
    s3.inject("conflict", operation="PutObject", prefix=ROOT, count=2)
    with pytest.raises(CommitConflictError) as info:
        reg.commit("sales", remove=["datasets/sales/never-registered"])
    message = str(info.value)
    assert "gave up: its 2 attempts ran out" in message
    assert "the last attempt rejected it" in message
    assert "not registered" in message
    fresh = registry(store)
    assert fresh.read().version == 1
    assert fresh.pending_intents() == []


def test_a_typed_refusal_that_gives_up_keeps_its_type(s3: S3Endpoint, store: ObjectStore) -> None:
    """A commit its last attempt refused with a typed error (here a stale fence), whose swaps
    recording that meet conflicts until its attempts run out, raises that error with its
    fields and what ran out: a zombie leader catching StaleFenceError learns it lost the
    lease, not that the lake was busy."""
    reg = registry(store, retry=RetryPolicy(max_attempts=2, sleep=no_sleep))
    reg.commit("sales", fence=("lease:leader", 2))
    s3.inject("conflict", operation="PutObject", prefix=ROOT, count=2)
    with pytest.raises(StaleFenceError) as info:
        reg.commit("sales", add=[datafile("sales", "", "a")], fence=("lease:leader", 1))
    assert (info.value.name, info.value.token, info.value.current) == ("lease:leader", 1, 2)
    assert info.value.attempts == 2
    assert "gave up: its 2 attempts ran out" in str(info.value)
    assert registry(store).read().version == 1


def test_a_commit_whose_root_grew_old_while_it_paused_reads_the_root_again(
    s3: S3Endpoint, store: ObjectStore, stall_and_race: StallAndRace
) -> None:
    """A process that read the root, then paused (here: its read of a snapshot held)
    while others committed and vacuum deleted what only that older root reached, reads
    the root again and commits, instead of failing with RegistryCorruptError: a pipeline
    paused past vacuum's window gets its commit, not a report of a damaged lake."""
    a = datafile("sales", "", "a")
    registry(store).commit("sales", add=[a])
    old = {o.key: o.etag for o in store.list("metastore/snapshots/")}
    paused, other = registry(store), registry(store)

    def theirs() -> Any:
        result = other.commit("sales", add=[datafile("sales", "", "b")], remove=[a])
        for key, etag in old.items():  # as vacuum deletes them once older than its window
            store.delete(key, if_match=etag)
        return result

    mine, _ = stall_and_race(
        lambda: paused.commit("sales", add=[datafile("sales", "", "c")]),
        theirs,
        operation="GetObject",
        prefix="metastore/snapshots/",
    )
    assert mine.version >= 2  # applied by itself, or by the other's fold
    assert [f.name for f in registry(store).files("sales")] == ["b", "c"]


@pytest.mark.unguarded  # the generated policy refuses deleting the root (the store's owner may)
def test_registry_deleted_under_us_is_an_error(
    store: ObjectStore, stall_and_race: StallAndRace
) -> None:
    """404 on If-Match: the registry vanished (deleted by a principal the bucket policy does
    not bind); this process does not re-create it. The commit's intent was sent, and a
    process that makes a root again applies it, so its caller hears CommitStateUnknownError
    (the RegistryCorruptError its cause), never a definite failure
    (tests/test_root_deleted_under_a_commit.py)."""
    reg = registry(store)
    reg.commit("sales")
    with pytest.raises(CommitStateUnknownError) as unknown:
        stall_and_race(
            lambda: reg.commit("sales", add=[datafile("sales", "", "a")]),
            lambda: store.client.delete_object(Bucket=store.bucket, Key=ROOT),
        )
    assert isinstance(unknown.value.__cause__, RegistryCorruptError)
    assert reg.read().version == 0


def test_lost_ack_on_root_is_committed_once(s3: S3Endpoint, store: ObjectStore) -> None:
    """The root PUT lands but its answer is lost: success, and the commit is recorded once."""
    reg = registry(store)
    reg.commit("sales")
    s3.inject("lost_ack", operation="PutObject", prefix=ROOT, count=1)
    result = reg.commit("sales", add=[datafile("sales", "", "a")], commit_id="c-lost")
    assert (result.version, result.already_committed) == (2, False)
    assert committed_ids(store).count("c-lost") == 1
    assert reg.read().version == 2


def test_unknown_outcome_resolved_by_commit_id(s3: S3Endpoint, store: ObjectStore) -> None:
    """Lost ack where even the adapter's read-back fails: the commit loop re-reads the root
    and finds its commit id, so it reports success without committing twice."""
    reg = registry(store)
    reg.commit("sales")
    s3.inject("lost_ack", operation="PutObject", prefix=ROOT, count=1)
    s3.inject("error", operation="HeadObject", prefix=ROOT, count=3)
    result = reg.commit("sales", add=[datafile("sales", "", "a")], commit_id="c-unknown")
    assert (result.version, result.retries, result.already_committed) == (2, 1, False)
    assert committed_ids(store).count("c-unknown") == 1


def test_unknown_outcome_proven_absent_redrives(s3: S3Endpoint, store: ObjectStore) -> None:
    """A root PUT that failed without landing (5xx each SDK try) is proven absent by the
    re-read and simply retried: committed once."""
    reg = registry(store)
    reg.commit("sales")
    s3.inject("error", operation="PutObject", prefix=ROOT, count=3)
    result = reg.commit("sales", add=[datafile("sales", "", "a")], commit_id="c-absent")
    assert (result.version, result.retries) == (2, 1)
    assert committed_ids(store).count("c-absent") == 1


def test_unknown_outcome_unresolvable_is_state_unknown(s3: S3Endpoint, store: ObjectStore) -> None:
    """If the outcome is unknown and the registry cannot be re-read, the caller learns that
    the state is unknown (CommitStateUnknownError), never a conflict."""
    reg = registry(store, retry=RetryPolicy(max_attempts=3, sleep=no_sleep))
    reg.commit("sales")
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    s3.inject("lost_ack", operation="PutObject", prefix=ROOT, count=1)
    s3.inject("error", operation="HeadObject", prefix=ROOT)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ours = pool.submit(
            reg.commit, "sales", add=[datafile("sales", "", "a")], commit_id="c-limbo"
        )
        wait_until(lambda: s3.stalled() == 1)
        s3.inject("error", operation="GetObject", prefix=ROOT)  # from now on: unreadable
        s3.release_stalls()
        with pytest.raises(CommitStateUnknownError) as info:
            ours.result(timeout=60)
    assert info.value.commit_id == "c-limbo"
    s3.clear_faults()
    assert committed_ids(store).count("c-limbo") == 1  # it had landed after all


def test_corrupt_registry_is_never_overwritten(store: ObjectStore, admin: Any) -> None:
    """Invalid JSON or a future format_version at the root: RegistryCorruptError, untouched."""
    reg = registry(store)
    for body in (b"{not json", b'{"format_version": 99, "version": 7}'):
        admin.put_object(Bucket=store.bucket, Key=ROOT, Body=body)  # a rogue writer
        with pytest.raises(RegistryCorruptError):
            reg.commit("sales", add=[datafile("sales", "", "a")])
        with pytest.raises(RegistryCorruptError):
            reg.read()
        assert store.get(ROOT).body == body


def test_stale_fence_is_refused(store: ObjectStore) -> None:
    """A commit carrying a fencing token below the highest seen is StaleFenceError."""
    reg = registry(store)
    reg.commit("sales", fence=("lease:leader", 2))
    with pytest.raises(StaleFenceError) as info:
        reg.commit("sales", add=[datafile("sales", "", "a")], fence=("lease:leader", 1))
    assert (info.value.token, info.value.current) == (1, 2)
    snap = reg.read()
    assert snap.version == 2  # records the intent's fate: rejected, so nobody applies it
    assert "sales" not in snap.datasets


def test_idempotent_recommit(store: ObjectStore) -> None:
    """Re-committing a recorded commit id changes nothing and reports already_committed."""
    reg = registry(store)
    first = reg.commit("sales", add=[datafile("sales", "", "a")], commit_id="run-42")
    again = reg.commit("sales", add=[datafile("sales", "", "a")], commit_id="run-42")
    assert (again.version, again.already_committed, first.already_committed) == (1, True, False)
    assert reg.read().version == 1


def test_multipart_root_with_racing_writer(
    s3: S3Endpoint, store: ObjectStore, stall_and_race: StallAndRace
) -> None:
    """A root above the threshold goes by multipart with an If-Match completion; a writer
    that lands first makes our completion fail with 412 and we redrive."""
    reg = registry(store, group_commit=False, root_multipart_threshold=1, max_fold=0)
    other = registry(store, group_commit=False, max_fold=0)
    reg.commit("sales", add=[datafile("sales", "", "a")])
    result, _ = stall_and_race(
        lambda: reg.commit("sales", add=[datafile("sales", "", "mine")]),
        lambda: other.commit("sales", add=[datafile("sales", "", "theirs")]),
        operation="CompleteMultipartUpload",
    )
    assert (result.version, result.redrives) == (3, 1)
    assert s3.stats()["CompleteMultipartUpload"] >= 3
    assert [f.name for f in reg.files("sales")] == ["a", "mine", "theirs"]


def test_group_commit_merges_concurrent_commits(s3: S3Endpoint, store: ObjectStore) -> None:
    """16 concurrent commits through one Registry share fewer CASes; a bad one fails alone."""
    reg = registry(store)
    reg.commit("sales", add=[datafile("sales", "", "keep")])
    s3.reset_stats()
    s3.inject("latency", operation="PutObject", prefix=ROOT, delay=0.05)

    def commit(n: int) -> Any:
        if n == 7:
            return reg.commit("sales", remove=["datasets/sales/never-registered"])
        return reg.commit("sales", add=[datafile("sales", "", f"f{n:02d}")], commit_id=f"g{n}")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(commit, n) for n in range(16)]
        concurrent.futures.wait(futures)
    with pytest.raises(CommitConflictError):
        futures[7].result()
    results = [f.result() for n, f in enumerate(futures) if n != 7]
    root_puts = s3.stats()["PutObject"] - 15  # minus the 15 delta manifests
    assert root_puts < 15
    assert max(r.batch_size for r in results) > 1
    ids = committed_ids(store)
    assert sorted(i for i in ids if i.startswith("g")) == sorted(
        f"g{n}" for n in range(16) if n != 7
    )
    assert len(reg.files("sales")) == 16


def swap_held(s3: S3Endpoint, number: int) -> bool:
    """Whether the ``number``-th stalled request is the one held now. A released request
    counts as stalled until its thread wakes, so ``stalled() == 1`` just after a release may
    still be the request let go. Here each stalled swap is sent only after the one before it
    was answered, after it stopped counting: once ``number`` stalls have struck, the one
    still counted is the last (the stall count is read second for that reason)."""
    return s3.faults()["injected"].get("stall", 0) == number and s3.stalled() == 1


def test_a_batchs_callers_return_while_the_next_batch_is_in_flight(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Group commit: once its batch has swapped, every caller of it returns at once, not
    only the one that ran it; none waits for the batch that started after (else callers
    convoy behind each other and batches stay small)."""
    reg = registry(store)
    reg.commit("sales", add=[datafile("sales", "", "a")])
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=3)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:

        def commit(name: str) -> Any:
            return pool.submit(reg.commit, "sales", add=[datafile("sales", "", name)])

        first = commit("b")
        wait_until(lambda: swap_held(s3, 1))  # batch [b] at its swap
        pair = [commit("c"), commit("d")]
        wait_until(lambda: len(reg._commits.queue) == 2)
        s3.release_stalls()
        wait_until(lambda: swap_held(s3, 2))  # batch [c, d] at its swap
        wait_until(first.done)
        last = commit("e")
        wait_until(lambda: len(reg._commits.queue) == 1)
        s3.release_stalls()
        wait_until(lambda: swap_held(s3, 3))  # batch [e] at its swap
        wait_until(lambda: all(f.done() for f in pair))
        assert not last.done()
        s3.release_stalls()
        assert [f.result().version for f in (first, *pair, last)] == [2, 3, 3, 4]
        assert [f.result().batch_size for f in pair] == [2, 2]


def test_a_commit_that_waits_for_the_next_batch_sends_its_intent_at_once(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Group commit: a commit arriving while a batch is in flight creates its intent right
    away (the wait costs it nothing), so its own batch writes only a snapshot and the root;
    this process never reads its own intents back."""
    reg = registry(store)
    reg.commit("sales", add=[datafile("sales", "", "a")])
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    s3.reset_stats()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(reg.commit, "sales", add=[datafile("sales", "", "b")])
        wait_until(lambda: s3.stalled() == 1)  # batch [b] at its swap
        second = pool.submit(reg.commit, "sales", add=[datafile("sales", "", "c")])
        wait_until(lambda: len(reg._commits.queue) == 1)
        # Its intent exists while the batch before it is still held at its swap.
        assert len(reg.pending_intents()) == 2  # b's and c's, both undecided
        puts = s3.stats()["PutObject"]
        s3.release_stalls()
        assert (first.result().version, second.result().version) == (2, 3)
    assert s3.stats()["PutObject"] - puts == 2  # c's snapshot and root: its intent was out
    assert s3.stats().get("GetObject", 0) == 1  # pending_intents' read of the root
    assert [f.name for f in reg.files("sales")] == ["a", "b", "c"]


def test_commit_window_bounds_the_root(store: ObjectStore) -> None:
    """Only the newest `commit_window` commit ids are kept."""
    reg = registry(store, commit_window=3)
    for n in range(5):
        reg.commit("sales", commit_id=f"c{n}", properties={"n": str(n)})
    assert committed_ids(store) == ["c2", "c3", "c4"]


def test_missing_bucket_is_not_an_empty_registry(client: Any) -> None:
    """Reading the registry of a bucket that does not exist is NotFoundError, not version 0."""
    from lakelock.errors import NotFoundError

    with pytest.raises(NotFoundError) as info:
        registry(ObjectStore(client, "no-such-bucket-here")).read()
    assert info.value.code == "NoSuchBucket"


def test_read_retries_throttling(s3: S3Endpoint, store: ObjectStore) -> None:
    """A registry read that meets 503s past the SDK's retries is retried, not failed."""
    reg = registry(store)
    reg.commit("sales")
    s3.inject("slowdown", operation="GetObject", prefix=ROOT, count=4)  # SDK gives up after 3
    assert reg.read().version == 1
    assert s3.faults()["injected"] == {"slowdown": 4}


def test_the_known_registry_loads_datasets_the_commit_core_never_read(store: ObjectStore) -> None:
    """``registry.internals.known()`` hands out the root the commit core last read or wrote; its
    datasets load on demand like any read's. (The core's own documents load through its
    offline view of the cache, where a miss is a signal to the core: handed out as they
    were, a dataset the core never needed escaped as ``Missing``, found by a 16-process run.)"""
    registry(store).commit("other", add=[datafile("other", "", "o")])
    ours = registry(store)
    ours.commit("sales", add=[datafile("sales", "", "s")])  # the core reads the root itself
    known = ours.internals.known()
    assert [f.name for f in ours.files("other", snapshot=known)] == ["o"]
    assert known.datasets["other"].totals is not None
