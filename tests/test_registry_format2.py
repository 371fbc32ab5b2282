"""Registry format 2 against the embedded endpoint: history and time travel, restore, the
durable commit-id index, lost acknowledgements on snapshot and node writes, the upgrade from
format 1 (and concurrent upgrades), and a commit's cost as a dataset grows."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry import REGISTRY_KEY, Registry
from lakelock._registry._changes import Change
from lakelock._registry._document import (
    FORMAT_VERSION,
    encode_schema,
    parse_registry,
    serialize_registry,
)
from lakelock._registry._intents import intent_document
from lakelock._registry._objects import RECENT_IDS
from lakelock._registry._snapshot import serialize_snapshot, snapshot_key
from lakelock._registry._tree import LEAF_MAX, Node, node_body, node_key, tree_update
from lakelock._s3 import IfMatch, ObjectStore
from lakelock.advanced import FoldPolicy
from lakelock.errors import CommitConflictError, SnapshotExpiredError, VersionNotFoundError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.files import datafile
from tests._support.format1 import plant_format1
from tests._support.tables import day_rows

HOUR = 3600.0


def ids(table: pa.Table) -> list[int]:
    return sorted(table["id"].to_pylist())


def test_every_version_reads_exactly_what_was_committed_up_to_it(lake: Lake) -> None:
    """A read at version V returns exactly the rows committed up to V; as_of picks the
    version current at that server time; a version that does not exist is a typed error."""
    committed: dict[int, list[int]] = {}
    so_far: list[int] = []
    for n in range(1, 7):
        so_far.append(n)
        result = lake.append("sales", day_rows([n], day=n % 3), partition_by=["day"])
        committed[result.version] = sorted(so_far)
    for version, expected in committed.items():
        assert ids(lake.read("sales", version=version)) == expected
    history = lake.history("sales")
    assert [h.version for h in history] == sorted(committed, reverse=True)
    for h in history:
        assert ids(lake.read("sales", as_of=h.at)) == committed[h.version]
    with pytest.raises(VersionNotFoundError):
        lake.read("sales", version=99)
    with pytest.raises(VersionNotFoundError):
        lake.read("sales", as_of=history[-1].at - 1)


def test_a_historical_read_shows_nothing_of_later_versions(lake: Lake) -> None:
    """Every field of ``registry.read(version=N)`` is as it was at N: its time, its commits
    (none of later versions), no fencing state of later commits."""
    lake.append("sales", day_rows([1]), partition_by=["day"], commit_id="a1")
    then = lake.registry.read()
    lake.append("sales", day_rows([2]), partition_by=["day"], commit_id="a2", fence=("lease:x", 5))
    lake.restore("sales", version=1, commit_id="r1")
    now = lake.registry.read()
    assert then.updated_at != now.updated_at
    old = lake.registry.read(version=1)
    assert (old.version, old.updated_at, old.historical) == (1, then.updated_at, True)
    assert [c.id for c in old.commits] == ["a1"]
    assert dict(old.fences) == {}
    assert dict(now.fences) == {"lease:x": 5}
    second = lake.registry.read(as_of=lake.history("sales")[1].at)
    assert (second.version, [c.id for c in second.commits]) == (2, ["a1", "a2"])
    assert second.updated_at == now.commits[1].at


def test_history_records_operations_and_counts(lake: Lake) -> None:
    """Each commit's version, id, operation and counts are in the dataset's history, newest
    first; a fresh Lake reads the same history."""
    lake.append("sales", day_rows([1, 2]), partition_by=["day"], commit_id="load-1")
    (f,) = lake.registry.files("sales")
    lake.registry.commit("sales", remove=[f], commit_id="drop-1", operation="delete")
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    history = fresh.history("sales")
    assert [(h.commit_id, h.operation, h.added, h.removed) for h in history] == [
        ("drop-1", "delete", 0, 1),
        ("load-1", "append", 1, 0),
    ]


def test_restore_makes_an_old_version_current_and_is_idempotent(lake: Lake) -> None:
    """restore(version=N) commits a new version whose rows are those of N; re-running it
    with the same commit id changes nothing; the versions between stay readable."""
    first = lake.append("sales", day_rows([1]), partition_by=["day"]).version
    lake.append("sales", day_rows([2]), partition_by=["day"])
    restored = lake.restore("sales", version=first, commit_id="undo-2")
    assert ids(lake.read("sales")) == [1]
    again = lake.restore("sales", version=first, commit_id="undo-2")
    assert (again.version, again.already_committed) == (restored.version, True)
    assert lake.registry.read().version == restored.version
    assert ids(lake.read("sales", version=restored.version - 1)) == [1, 2]
    assert lake.history("sales", limit=1)[0].operation == "restore"


def test_restore_is_fenced(lake: Lake) -> None:
    """A restore carrying a stale lease token is refused like any commit."""
    from lakelock.errors import StaleFenceError

    first = lake.append("sales", day_rows([1]), partition_by=["day"], fence=("lease:etl", 5))
    lake.append("sales", day_rows([2]), partition_by=["day"])
    with pytest.raises(StaleFenceError):
        lake.restore("sales", version=first.version, fence=("lease:etl", 4))
    assert ids(lake.read("sales")) == [1, 2]


class _Clock:
    """A clock the test sets; with ``after`` (an endpoint area such as ``"PutObject
    metastore/snapshots"``) it reads ``later`` once the endpoint has answered such a request:
    a writer paused between applying its batch and sending its swap."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.later: tuple[S3Endpoint, str, float] | None = None

    def __call__(self) -> float:
        if self.later is not None:
            endpoint, area, later = self.later
            if endpoint.areas().get(area, 0):
                return later
        return self.now


RETENTION = 100.0  # restore_lead: 50 s; applied while 25 s are left, swapped while 12.5


def _restore_edge(s3: S3Endpoint, client: Any, bucket: str) -> tuple[Lake, _Clock, int]:
    """A lake whose registry keeps versions RETENTION seconds, by a clock the test moves:
    version 1 was replaced (by version 2) at time 1,000, so it leaves the retention at
    1,100."""
    clock = _Clock(1_000.0)
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.registry = Registry(lake.store, retry=FAST_RETRY, clock=clock, retention=RETENTION)
    first = lake.append("sales", day_rows([1]), partition_by=["day"]).version
    lake.append("sales", day_rows([2]), partition_by=["day"])
    s3.reset_stats()
    return lake, clock, first


def test_a_restore_of_a_version_about_to_leave_the_retention_is_refused(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """FORMAT.md rule 9: vacuum deletes what only a version past the retention references,
    so a restore landing after its version left would point at deleted files. A version that
    leaves within the restore's lead (half the retention, at most an hour) is refused with
    SnapshotExpiredError before anything is written; one with more left is restored and
    the change carries when its version leaves."""
    lake, clock, first = _restore_edge(s3, client, bucket)
    clock.now = 1_051.0  # 49 s left: less than the lead
    with pytest.raises(SnapshotExpiredError, match="too soon to restore it safely"):
        lake.restore("sales", version=first)
    assert s3.areas().get("PutObject root", 0) == 0
    clock.now = 1_049.0  # 51 s left
    state, until, _ = lake.registry.internals.restore_point("sales", version=first)
    assert (state.updated_version, until) == (first, 1_100.0)
    restored = lake.restore("sales", version=first)
    assert ids(lake.read("sales")) == [1]
    current = lake.registry.internals.restore_point("sales", version=restored.version)
    assert current[1] is None


def test_a_restore_whose_version_leaves_the_retention_while_it_waits_is_refused(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """Rule 9 when the batch is applied: a restore read in time (60 s left) whose commit
    only applies 30 s later (20 s left, under half the lead) is refused as a conflict;
    nothing is committed (a restore is an intent: the swap that refuses it records its fate
    and leaves the dataset as it was)."""
    lake, clock, first = _restore_edge(s3, client, bucket)
    before = lake.registry.read().datasets["sales"]
    clock.now = 1_040.0
    old, until, _ = lake.registry.internals.restore_point("sales", version=first)
    clock.now = 1_080.0
    change = Change(
        dataset="sales", commit_id="undo", restore=old, operation="restore", restore_until=until
    )
    with pytest.raises(CommitConflictError, match="restore refused: the version it restores"):
        lake.registry.commit_changes([change])
    assert lake.registry.read().datasets["sales"] == before
    assert ids(lake.read("sales")) == [1, 2]


@pytest.mark.parametrize("older_writer", [False, True], ids=["its_intent", "older_writers"])
def test_a_folded_restore_is_judged_by_the_retention_of_the_root_it_applies_on(
    store: ObjectStore, lake: Lake, older_writer: bool
) -> None:
    """Rule 9 in a fold: a process planned a restore of version 1 under the default
    retention (7 days: a week left), wrote its intent and died. The lake's retention is
    then shrunk to an hour, and three hours later another process's append folds the
    intent: version 1 left the retention two hours ago (vacuum may have deleted it), so
    the restore is refused and only the append lands. An intent of an older lakelock,
    which does not record when the version was replaced, is judged by the version's own
    commit time (never later). Before, the folder judged the version by the retention the
    restore was planned under and made it current."""
    first = lake.append("sales", day_rows([1]), partition_by=["day"]).version
    lake.append("sales", day_rows([2]), partition_by=["day"])
    old, until, since = lake.registry.internals.restore_point("sales", version=first)
    assert until is not None
    assert since is not None
    assert until - since == 7 * 24 * HOUR
    change = Change(
        "sales",
        "undo",
        operation="restore",
        restore=old,
        restore_until=until,
        restore_since=None if older_writer else since,
    )
    key, body, _ = intent_document(change, now_ms=int(time.time() * 1000))
    store.put(key, body, mode="create")
    lake.configure(retention="1h")
    folder = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    folder.registry = Registry(store, retry=FAST_RETRY, clock=lambda: time.time() + 3 * HOUR)
    folder.append("sales", day_rows([3]), partition_by=["day"])
    (fate,) = [f for f in folder.registry._current()[0].fates if f.key == key]
    assert fate.state == "rejected", fate
    assert "restore refused" in (fate.reason or ""), fate
    assert ids(folder.read("sales")) == [1, 2, 3]


def test_a_restore_paused_before_its_swap_past_the_margin_is_not_swapped(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """Rule 9 at the last moment: the batch applied with 60 s left, then the writer paused
    (its clock reads 20 s left once the new snapshot is written) — fewer than a quarter of
    the lead, too little for the swap to land safely. It does not swap: it tries again, and
    the next attempt refuses the restore (the swap that records its fate leaves the dataset
    as it was). Without the check the swap would land."""
    lake, clock, first = _restore_edge(s3, client, bucket)
    before = lake.registry.read().datasets["sales"]
    clock.now = 1_040.0
    clock.later = (s3, "PutObject metastore/snapshots", 1_090.0)
    with pytest.raises(CommitConflictError, match="restore refused"):
        lake.restore("sales", version=first)
    assert lake.registry.read().datasets["sales"] == before
    assert ids(lake.read("sales")) == [1, 2]


def test_commit_id_is_recognised_after_it_left_the_root_window(client: Any, bucket: str) -> None:
    """With a root window of 2 commit ids, a re-run of a commit 5 commits old is still
    recognised (the dataset's commit-id index is durable) and appends nothing."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, commit_window=2)
    first = lake.append("sales", day_rows([1]), partition_by=["day"], commit_id="run-1")
    for n in range(2, 7):
        lake.append("sales", day_rows([n]), partition_by=["day"])
    assert "run-1" not in [c.id for c in lake.registry.read().commits]
    fresh = Lake(bucket, s3=client, retry=FAST_RETRY, commit_window=2)
    again = fresh.append("sales", day_rows([1]), partition_by=["day"], commit_id="run-1")
    assert (again.version, again.already_committed) == (first.version, True)
    direct = fresh.registry.commit(
        "sales", add=fresh.write("sales", day_rows([1]), partition_by=["day"]), commit_id="run-1"
    )
    assert (direct.version, direct.already_committed) == (first.version, True)
    assert ids(fresh.read("sales")) == [1, 2, 3, 4, 5, 6]


def test_recent_commit_ids_go_into_the_index_together(store: ObjectStore) -> None:
    """A snapshot carries the latest commit ids and writes them into the commit-id tree
    RECENT_IDS at a time: the commits between two such writes create no index node, and
    every commit id is found by a fresh reader, from the snapshot or from the tree."""
    reg = Registry(store, retry=FAST_RETRY, commit_window=1)
    commits = 2 * RECENT_IDS + 5  # two writes into the tree; the second splits its top leaf
    assert 2 * RECENT_IDS > LEAF_MAX

    def nodes() -> int:
        return sum(1 for _ in store.list("metastore/nodes/sales/"))

    versions = {}
    for n in range(commits):
        if n == 2 * RECENT_IDS - 1:
            before_flush = nodes()
            # The flush by another process: what it carries forward was read, not made.
            reg = Registry(store, retry=FAST_RETRY, commit_window=1)
        if n == 2 * RECENT_IDS:
            after_flush = nodes()
        versions[f"run-{n}"] = reg.commit(
            "sales", add=[datafile("sales", "", f"f{n}")], commit_id=f"run-{n}"
        ).version
    assert after_flush > before_flush  # the flush split the tree's top into nodes
    assert nodes() == after_flush  # the 5 commits since wrote none
    state = reg.dataset("sales")
    assert len(state.recent_ids) == 5
    assert state.commit_ids.count == 2 * RECENT_IDS
    fresh = Registry(store, retry=FAST_RETRY, commit_window=1)
    for commit_id, version in versions.items():
        assert fresh.find_commit(commit_id) == version
    assert fresh.find_commit("never-committed") is None
    again = fresh.commit("sales", add=[datafile("sales", "", "f0")], commit_id="run-0")
    assert (again.version, again.already_committed) == (versions["run-0"], True)


@pytest.mark.parametrize("prefix", ["metastore/snapshots/", "metastore/nodes/"])
def test_lost_ack_on_snapshot_or_node_put_commits_once(
    s3: S3Endpoint, lake: Lake, prefix: str
) -> None:
    """The answer to a snapshot or index-node PUT is lost after the write applied: the
    commit completes once, and a fresh reader sees every row."""
    many = pa.table({"id": list(range(LEAF_MAX + 5)), "day": list(range(LEAF_MAX + 5))})
    lake.append("sales", many, partition_by=["day"])
    s3.inject("lost_ack", operation="PutObject", prefix=prefix, count=1)
    result = lake.append("sales", day_rows([1000], day=3), partition_by=["day"])
    assert s3.faults()["injected"] == {"lost_ack": 1}
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    assert fresh.registry.read().version == result.version
    assert len(ids(fresh.read("sales"))) == LEAF_MAX + 6


# -- the upgrade from format 1 -----------------------------------------------------------------


def plant_format1_lake(lake: Lake) -> bytes:
    """A format-1 registry with two datasets, as an older lakelock wrote it."""
    commits = [("sales", "old-sales", [10, 11], 1), ("events", "old-events", [20, 21], 2)]
    return plant_format1(lake, commits, versions=False, operation="commit")


def test_format1_is_read_as_before_then_upgraded_by_the_first_commit(lake: Lake) -> None:
    """A format-1 registry reads as before; the first commit upgrades it (keeping the old
    body as a write-once backup) and nothing is lost; re-running an old commit id is still a
    no-op; history before the upgrade is a typed error, not an empty table."""
    body = plant_format1_lake(lake)
    before = lake.registry.read()
    assert before.format_version == 1
    assert ids(lake.read("sales")) == [10, 11]
    result = lake.append("sales", day_rows([12]), partition_by=["day"])
    root = parse_registry(lake.store.get(REGISTRY_KEY).body)
    assert (root.format_version, root.version) == (FORMAT_VERSION, result.version)
    assert root.backup is not None
    assert lake.store.get(root.backup).body == body
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    assert ids(fresh.read("sales")) == [10, 11, 12]
    assert ids(fresh.read("events")) == [20, 21]
    again = fresh.append("events", day_rows([20]), partition_by=["day"], commit_id="old-events")
    assert again.already_committed
    with pytest.raises(VersionNotFoundError):
        fresh.read("sales", version=before.version)


def test_concurrent_upgrades_exactly_one_wins(lake: Lake, store: ObjectStore) -> None:
    """Eight registries upgrade one format-1 registry at once: exactly one does it, the rest
    find it upgraded; every row is still there."""
    plant_format1_lake(lake)

    def upgrade(_: int) -> Any:
        return Registry(store, retry=FAST_RETRY).migrate()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(upgrade, range(8)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert Registry(store, retry=FAST_RETRY).migrate() is None
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    assert ids(fresh.read("sales")) == [10, 11]
    assert ids(fresh.read("events")) == [20, 21]
    assert fresh.registry.read().version == winners[0].version


# -- cost ------------------------------------------------------------------------------------


def append_traffic(s3: S3Endpoint, lake: Lake, name: str) -> int:
    s3.reset_stats()
    lake.registry.commit("big", add=[datafile("big", "day=0", name)])
    traffic = s3.traffic()
    return traffic["in"] + traffic["out"]


def bulk(lake: Lake, days: range) -> None:
    """One commit adding a file to each of ``days`` (one shared delta manifest)."""
    lake.registry.commit("big", add=[datafile("big", f"day={d}", "f") for d in days])


def test_append_bytes_do_not_grow_with_the_partition_count(s3: S3Endpoint, lake: Lake) -> None:
    """A one-file commit into one partition moves about as many bytes at 5,000 partitions as
    at 500: the root holds no partitions, and only the touched index path is rewritten."""
    # Hedging off: what the format moves, not copies of requests sent again because the
    # endpoint in this process answered late (the 4,500-partition commit had half its
    # thousand index nodes sent twice and each looked up: most of this test's CPU).
    policy = FoldPolicy(hedge=0)
    with Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY, fold_policy=policy) as unhedged:
        bulk(unhedged, range(500))
        small = append_traffic(s3, unhedged, "a")
        bulk(unhedged, range(500, 5000))
        large = append_traffic(s3, unhedged, "b")
    assert large < 1.5 * small, (small, large)
    assert large < 60_000, large


def test_a_commit_touching_many_partitions_writes_one_manifest(s3: S3Endpoint, lake: Lake) -> None:
    """The delta manifest (the intent) of a commit spanning 300 partitions is one object;
    each partition reads back exactly its own file."""
    s3.reset_stats()
    bulk(lake, range(300))
    assert list(lake.store.list("metastore/manifests/")) == []
    assert len(list(lake.store.list("metastore/intents/"))) == 1
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    (only,) = fresh.registry.files("big", partitions=["day=7"])
    assert only.key == "datasets/big/day=7/f"


def test_a_hash_trie_commit_id_index_keeps_working(store: ObjectStore) -> None:
    """A dataset whose commit-id index is a hash trie (as lakes written before the ordered
    tree have): its ids are recognised, re-runs are no-ops, and writing more ids into it keeps
    it a hash trie that still finds every id."""
    reg = Registry(store, retry=FAST_RETRY, commit_window=1)
    reg.commit("sales", add=[datafile("sales", "", "first")], commit_id="first")
    doc, etag = reg._read_root()
    assert etag is not None
    entry = doc.entries["sales"]
    snap = reg.internals.objects.snapshot(entry.snapshot)
    old = {f"old-{n}": {"version": 1, "at": snap.at, "operation": "append"} for n in range(300)}
    writes: list[tuple[str, bytes]] = []

    def store_node(node: Node) -> str:
        body = node_body(node)
        key = node_key("sales", body, uuid.uuid4().hex)
        writes.append((key, body))
        reg.internals.objects.remember(key, node)
        return key

    top = tree_update(snap.commit_ids, old, load=reg.internals.objects.node, store=store_node)
    assert top.is_branch
    assert not top.lows  # a hash-trie branch
    body = serialize_snapshot(dataclasses.replace(snap, commit_ids=top), encode_schema)
    key = snapshot_key("sales", body, "hashtrie")
    reg.internals.objects.create_all([*writes, (key, body)])
    seeded = dataclasses.replace(
        doc,
        version=doc.version + 1,
        entries={"sales": dataclasses.replace(entry, snapshot=key)},
    )
    store.put(REGISTRY_KEY, serialize_registry(seeded), mode=IfMatch(etag))

    fresh = Registry(store, retry=FAST_RETRY, commit_window=1)
    assert fresh.find_commit("old-17") == 1
    again = fresh.commit("sales", add=[datafile("sales", "", "x")], commit_id="old-17")
    assert (again.version, again.already_committed) == (1, True)
    for n in range(RECENT_IDS + 1):  # one write of recent ids into the index
        fresh.commit("sales", add=[datafile("sales", "", f"new-{n}")], commit_id=f"new-{n}")
    state = fresh.dataset("sales")
    assert state.commit_ids.is_branch
    assert not state.commit_ids.lows  # still a hash trie
    assert state.commit_ids.count == 300 + RECENT_IDS
    reader = Registry(store, retry=FAST_RETRY, commit_window=1)
    assert reader.find_commit("old-299") == 1
    assert reader.find_commit("new-0") is not None
    assert reader.find_commit("new-never") is None
