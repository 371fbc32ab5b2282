"""Adversarial tests of vacuum and of writers on a lake whose registry root is gone
(README, "Time travel": vacuum deletes only what no version within the retention reads). A
root deleted by hand (an ``aws s3 rm``, a sync from a copy that missed it, a lifecycle rule)
leaves every version's snapshot, manifests and data files in place; the library's vacuum,
unlike the command line, runs on a prefix with no root (a lake's first commit paused past
vacuum relies on that: tests/test_adversary_vacuum.py). Time is injected: nothing sleeps."""

from __future__ import annotations

import concurrent.futures
import math
import time

import pyarrow as pa
import pytest

from lakelock import Lake, RetryPolicy
from lakelock._layout import DATASETS_PREFIX, METASTORE_PREFIX, REGISTRY_KEY, SNAPSHOT_PREFIX
from lakelock._s3 import ObjectStore
from lakelock._vacuum import vacuum
from lakelock.errors import CommitStateUnknownError, RegistryCorruptError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, no_sleep, registry, wait_until
from tests._support.files import datafile
from tests._support.simtime import SimTime

WEEK = 7 * 24 * 3600.0
#: A commit's budget: its root PUT answered 500 twice, it gives up.
TWO_ATTEMPTS = RetryPolicy(max_attempts=2, sleep=no_sleep)


def test_vacuum_of_a_lake_whose_root_was_deleted_refuses_and_deletes_nothing(
    s3: S3Endpoint, lake: Lake
) -> None:
    """``sales`` has two versions; then its registry root is deleted by hand, and a week and
    a day later vacuum runs (its dry run, then for real). With no root it once judged every
    object of the lake unreferenced: it deleted every snapshot and data file, and created an
    empty root over them. What the user would have lost: the whole lake, which
    the snapshots left behind still describe (a root can be restored from a bucket version
    or rebuilt from them). A snapshot of a version after the first was written by a commit
    that read a root, so a root existed: vacuum must refuse (``RegistryCorruptError`` naming
    the root), deleting nothing and writing no root."""
    lake.append("sales", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    lake.append("sales", pa.table({"id": [2], "day": [2]}), partition_by=["day"])
    admin = s3.client(access_key="engine")  # a key the bucket's policy does not bind
    admin.delete_object(Bucket=lake.bucket, Key=lake.store.full_key(REGISTRY_KEY))
    before = sorted(o.key for o in lake.store.list(""))
    at = time.time() + WEEK + 24 * 3600.0
    for dry_run in (True, False):
        with pytest.raises(RegistryCorruptError, match="root") as refused:
            vacuum(lake.registry, dry_run=dry_run, clock=lambda: at)
        assert refused.value.key == lake.store.full_key(REGISTRY_KEY)
    assert sorted(o.key for o in lake.store.list("")) == before
    assert any(k.startswith(DATASETS_PREFIX) for k in before)


def test_a_commit_on_a_lake_whose_root_was_deleted_refuses_and_makes_no_root(
    s3: S3Endpoint, lake: Lake
) -> None:
    """``sales`` has two versions; its registry root is deleted by hand. Another pipeline's
    append then read no root and took the lake for a new one: it created an empty root,
    listed every intent from the start and applied those still within their TTL, so the
    lake's history was gone and vacuum would then delete every older version's files. It
    must refuse (``RegistryCorruptError`` naming the root, the version it found and what to
    do), writing nothing to the registry: no intent, no snapshot, no root. The one object
    it leaves is its own rows' file, written before the commit read the root and read by
    no version (vacuum's to delete once the root is back)."""
    lake.append("sales", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    lake.append("sales", pa.table({"id": [2], "day": [2]}), partition_by=["day"])
    admin = s3.client(access_key="engine")  # a key the bucket's policy does not bind
    admin.delete_object(Bucket=lake.bucket, Key=lake.store.full_key(REGISTRY_KEY))
    before = {o.key for o in lake.store.list("")}
    other = Lake(lake.bucket, s3=lake.store.client, retry=FAST_RETRY)
    try:
        with pytest.raises(RegistryCorruptError, match="version 2 of dataset 'sales'") as refused:
            other.append("sales", pa.table({"id": [3], "day": [3]}), partition_by=["day"])
    finally:
        other.close()
    assert refused.value.key == REGISTRY_KEY
    assert "Put the root back" in str(refused.value)
    made = {o.key for o in lake.store.list("")} - before
    assert [k.split("/")[:3] for k in made] == [["datasets", "sales", "day=3"]]


def test_a_fresh_lakes_first_commit_lists_the_snapshots_once_and_a_rooted_one_never(
    s3: S3Endpoint, lake: Lake
) -> None:
    """What a writer's refusal of a lost root costs, counted at the endpoint: a commit that
    reads no root lists the snapshots once (a new lake has none to read), and a commit that
    finds its root, in a process that knew none before, lists none of them."""
    s3.reset_stats()
    lake.append("sales", pa.table({"id": [1]}))
    fresh = s3.areas()
    assert fresh["ListObjectsV2 metastore/snapshots"] == 1
    assert "GetObject metastore/snapshots" not in fresh
    other = Lake(lake.bucket, s3=lake.store.client, retry=FAST_RETRY)
    try:
        s3.reset_stats()
        other.append("sales", pa.table({"id": [2]}))
        rooted = s3.areas()
    finally:
        other.close()
    assert "ListObjectsV2 metastore/snapshots" not in rooted
    assert rooted["PutObject root"] == 1
    assert sorted(lake.read("sales").column("id").to_pylist()) == [1, 2]


def test_a_fresh_lakes_look_for_a_lost_root_is_not_learnt_as_a_root_read(
    s3: S3Endpoint, bucket: str
) -> None:
    """A process learns how long its root reads take, so that after a brownout its first
    fast read cuts the rounds it stretched. On a new lake its first read lists the snapshots
    too: that listing is not a root read. Here every GET takes 20 ms and a LIST a second (by
    the test's clock): the process learns 20 ms, not the second that the look for a lost
    root cost (it learnt 1.02 s, and waited out a brownout's end seconds too long)."""
    sim = SimTime()
    client = s3.client()
    client.meta.events.register("before-send.s3.GetObject", lambda **_: sim.advance(0.02))
    client.meta.events.register("before-send.s3.ListObjectsV2", lambda **_: sim.advance(1.0))
    timed = RetryPolicy(sleep=sim.sleep, clock=sim.machine())
    ours = registry(ObjectStore(client, bucket, retry=timed), retry=timed)
    ours.commit("sales", add=[datafile("sales", "", "a")])
    hints = ours.internals.hints
    learnt = (hints.usual_reads, hints.reads)
    assert [None if r is None else math.exp(r) for r in learnt] == pytest.approx([0.02, 0.02])


@pytest.mark.parametrize("lost", ["its root PUT answered 500", "its root deleted by hand"])
def test_a_lake_whose_only_version_is_the_first_is_a_new_lake_and_keeps_its_rows(
    s3: S3Endpoint, lake: Lake, lost: str
) -> None:
    """A lake whose first commit left snapshots of version 1 and no root: the commit's every
    root PUT answered 500 (its caller heard ``CommitStateUnknownError``: it may still be
    applied), or its root was deleted by hand after it. Nothing tells the two apart, and a
    first commit that gave up must not leave a lake no one can write, so the next commit,
    in another process, is not refused: it takes the lake for a new one, and its fold
    applies the first commit's intent, still in the bucket, so its rows are there once."""
    if lost == "its root deleted by hand":
        lake.append("sales", pa.table({"id": [1]}))
        admin = s3.client(access_key="engine")  # a key the bucket's policy does not bind
        admin.delete_object(Bucket=lake.bucket, Key=lake.store.full_key(REGISTRY_KEY))
    else:
        s3.inject("error", operation="PutObject", prefix=REGISTRY_KEY)
        first = Lake(lake.bucket, s3=lake.store.client, retry=TWO_ATTEMPTS)
        try:
            with pytest.raises(CommitStateUnknownError):
                first.append("sales", pa.table({"id": [1]}))
        finally:
            s3.clear_faults()
            first.close()
    left = [o.key for o in lake.store.list(METASTORE_PREFIX)]
    assert REGISTRY_KEY not in left
    assert any(k.startswith(SNAPSHOT_PREFIX) for k in left)
    other = Lake(lake.bucket, s3=lake.store.client, retry=FAST_RETRY)
    try:
        other.append("sales", pa.table({"id": [2]}))
        assert sorted(other.read("sales").column("id").to_pylist()) == [1, 2]
    finally:
        other.close()


def test_a_new_lakes_first_commits_racing_are_not_taken_for_a_lost_root(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A new lake: one pipeline reads no root and lists the snapshots, its listing held at
    the endpoint while another creates the root and commits again (a snapshot of version
    2). Let go, the listing shows that snapshot, but the root is there when read again:
    the first pipeline commits on it instead of calling the lake's root lost."""
    s3.inject("stall", operation="ListObjectsV2", prefix=SNAPSHOT_PREFIX, count=1)
    ours = registry(store)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(ours.commit, "sales", add=[datafile("sales", "", "ours")])
        wait_until(lambda: s3.stalled() == 1)
        theirs = registry(store)
        theirs.commit("sales", add=[datafile("sales", "", "a")])
        theirs.commit("sales", add=[datafile("sales", "", "b")])
        s3.release_stalls()
        waiting.result(timeout=60)
    assert sorted(f.name for f in registry(store).files("sales")) == ["a", "b", "ours"]


def test_several_processes_creating_a_new_lake_at_once_all_commit(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Four processes commit to a new lake at once: each may write snapshots of version 1
    before any root exists, and each that finds no root lists them. None is refused."""
    writers = [registry(store) for _ in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        done = [
            pool.submit(w.commit, "sales", add=[datafile("sales", "", f"w{i}")])
            for i, w in enumerate(writers)
        ]
        for future in done:
            future.result(timeout=60)
    names = sorted(f.name for f in registry(store).files("sales"))
    assert names == ["w0", "w1", "w2", "w3"]
