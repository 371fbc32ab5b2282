"""vacuum: orphans are found and deleted; committed files, files of recent snapshots and
in-flight writes never are. Time is injected: nothing sleeps."""

from __future__ import annotations

import concurrent.futures
import re
import time
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import lakelock._vacuum
from lakelock import Lake, _vacuum_plan
from lakelock._durations import MAX_DURATION
from lakelock._registry import Registry
from lakelock._registry._batch import seconds_of
from lakelock._registry._core import _decide
from lakelock._vacuum import vacuum
from lakelock.errors import (
    InvalidArgumentError,
    NotFoundError,
    ObjectTooOldError,
    RegistryCorruptError,
    SnapshotExpiredError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until
from tests._support.simtime import HOUR, SimTime, later
from tests._support.vacuuming import append_paused_beside_vacuum


def rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "year": [2024] * len(ids)})


def test_uncommitted_old_files_are_orphans(lake: Lake) -> None:
    """A written-but-never-committed file older than the window is an orphan; committed
    files, their manifests and the dataset snapshot are referenced; a fresh uncommitted write
    is left alone."""
    lake.append("sales", rows([1]), partition_by=["year"])
    (stray,) = lake.write("sales", rows([2]), partition_by=["year"])
    now = vacuum(lake.registry, enforce_retention=False, older_than=HOUR)
    assert (now.orphans, now.recent, now.referenced) == ([], 1, 3)
    report = vacuum(lake.registry, enforce_retention=False, older_than=HOUR, clock=later(2))
    assert [o.key for o in report.orphans] == [stray.key]
    assert report.referenced == 3
    assert report.deleted == []  # dry run


def test_the_root_vacuum_moves_says_when_it_moved(lake: Lake) -> None:
    """Vacuum moves the root to record its cutoff before it deletes (FORMAT.md rule 10): the
    root it writes says when, by vacuum's clock, like the root of any commit (``registry
    show``'s "updated" line), not the time of the commit before it."""
    lake.append("sales", rows([1]), partition_by=["year"])
    lake.write("sales", rows([2]), partition_by=["year"])  # written, never committed
    before = lake.registry.read()
    report = vacuum(
        lake.registry, enforce_retention=False, older_than=HOUR, clock=later(2), dry_run=False
    )
    assert len(report.deleted) == 1
    moved = lake.registry.read()
    assert moved.version == before.version + 1
    assert seconds_of(moved.updated_at) == pytest.approx(time.time() + 2 * HOUR, abs=600)


def test_removed_files_survive_the_window(lake: Lake) -> None:
    """A file removed from the registry stays while snapshots within the window may read
    it; after the window it and its retired manifest are orphans."""
    lake.append("sales", rows([1]), partition_by=["year"])
    (old,) = lake.registry.files("sales")
    lake.append("sales", rows([2]), partition_by=["year"])
    lake.registry.commit("sales", remove=[old])
    within = vacuum(lake.registry, enforce_retention=False, older_than=3 * HOUR, clock=later(2))
    assert old.key not in [o.key for o in within.orphans]
    after = vacuum(lake.registry, enforce_retention=False, older_than=HOUR, clock=later(2))
    orphan_keys = {o.key for o in after.orphans}
    assert old.key in orphan_keys
    # The partition's replaced manifest: the append's intent (its delta manifest).
    assert any(k.startswith(("metastore/manifests/", "metastore/intents/")) for k in orphan_keys)
    assert all(f.key not in orphan_keys for f in lake.registry.files("sales"))


def test_delete_removes_only_orphans(lake: Lake) -> None:
    """With dry_run=False the orphans go (conditional deletes), everything else stays and
    the lake still reads."""
    lake.append("sales", rows([1]), partition_by=["year"])
    strays = [lake.write("sales", rows([n]), partition_by=["year"])[0] for n in (7, 8)]
    done: list[tuple[int, int]] = []
    report = vacuum(
        lake.registry,
        older_than=HOUR,
        enforce_retention=False,
        dry_run=False,
        clock=later(2),
        progress=lambda d, t: done.append((d, t)),
    )
    assert sorted(report.deleted) == sorted(f.key for f in strays)
    assert report.failed == {}
    assert done == [(2, 2)]
    remaining = {o.key for o in lake.store.list("datasets/")}
    assert remaining == {f.key for f in lake.registry.files("sales")}
    assert lake.read("sales")["id"].to_pylist() == [1]


def test_window_beyond_retention_is_refused(lake: Lake) -> None:
    """older_than above the registry's retention cannot be honoured: a typed error."""
    with pytest.raises(InvalidArgumentError):
        lake.vacuum(older_than=lake.registry.settings().retention + 1)
    with pytest.raises(InvalidArgumentError):
        lake.vacuum(older_than=-1)


CENTURY = "older_than is at most 3153600000 seconds"


@pytest.mark.parametrize(
    ("older_than", "reason"),
    [
        pytest.param(MAX_DURATION + 1, f"{CENTURY} (a century)", id="seconds"),
        pytest.param("99999999999d", f"{CENTURY} (a century)", id="text"),
        pytest.param(timedelta(days=36501), f"{CENTURY} (a century)", id="timedelta"),
        pytest.param(10**400, "finite", id="an int past every float"),
    ],
)
def test_a_window_past_a_century_is_refused_before_anything_is_read(
    s3: S3Endpoint, lake: Lake, older_than: object, reason: str
) -> None:
    """``older_than`` is bounded as every other duration is (a century, ``MAX_DURATION``),
    with the same error, before a request is sent: it was read against the lake's retention
    first, and an integer past every float escaped as ``OverflowError``."""
    lake.append("sales", rows([1]), partition_by=["year"])
    s3.reset_stats()
    with pytest.raises(InvalidArgumentError, match=re.escape(reason)):
        lake.vacuum(older_than=older_than, dry_run=False)
    assert s3.stats() == {}
    assert lake.read("sales")["id"].to_pylist() == [1]


def test_vacuum_twice_then_every_kept_version_reads(lake: Lake) -> None:
    """Vacuum with a window keeps every version current within it readable; vacuum again
    (with a longer window, as another run would) does not stop on what the first deleted;
    versions replaced before the window are refused with SnapshotExpiredError, never read in
    part."""
    lake.append("sales", rows([1]), partition_by=["year"])
    (first,) = lake.registry.files("sales")
    lake.append("sales", rows([2]), partition_by=["year"])
    lake.registry.commit("sales", remove=[first])  # v3: consolidates the partition
    lake.append("sales", rows([3]), partition_by=["year"])  # v4
    expected = {1: [1], 2: [1, 2], 3: [2], 4: [2, 3]}
    for version, ids in expected.items():
        assert (
            sorted(
                lake.read("sales", snapshot=lake.registry.read(version=version))["id"].to_pylist()
            )
            == ids
        )
    lake.configure(vacuum_floor=0)  # a window of 0 s: nobody else writes this lake
    report = lake.vacuum(enforce_retention=False, older_than=0, dry_run=False)
    assert report.deleted
    assert not report.failed
    again = lake.vacuum(enforce_retention=False, older_than=0, dry_run=False)
    assert again.deleted == []
    assert not again.failed
    assert sorted(lake.read("sales")["id"].to_pylist()) == [2, 3]
    lake.configure(retention=0)
    for version in (1, 2, 3):
        with pytest.raises(SnapshotExpiredError) as info:
            lake.registry.read(version=version).datasets["sales"]
        assert info.value.version == version


def test_vacuum_inside_the_window_keeps_old_versions(lake: Lake) -> None:
    """Objects of versions replaced within the window are kept, so time travel still reads
    them after a real delete."""
    lake.append("sales", rows([1]), partition_by=["year"])
    (first,) = lake.registry.files("sales")
    lake.registry.commit("sales", remove=[first])
    report = lake.vacuum(enforce_retention=False, older_than=HOUR, dry_run=False)
    assert report.deleted == []
    old = lake.registry.read(version=1)
    assert lake.read("sales", snapshot=old)["id"].to_pylist() == [1]


def test_vacuum_below_the_retention_is_refused_unless_asked_for(lake: Lake) -> None:
    """The retention is a promise to readers: vacuum keeps every version current within it
    unless the caller explicitly says not to; by default it vacuums at the retention."""
    lake.append("sales", rows([1]), partition_by=["year"])
    lake.append("sales", rows([2]), partition_by=["year"])
    stray = lake.write("sales", rows([9]), partition_by=["year"])[0]
    lake.configure(vacuum_floor=0)
    with pytest.raises(InvalidArgumentError, match="enforce_retention=False"):
        lake.vacuum(older_than=0, dry_run=False)
    assert lake.vacuum(dry_run=False).deleted == []  # at the retention: all is younger
    assert stray.key in {o.key for o in lake.store.list("datasets/")}
    assert lake.read("sales", version=1)["id"].to_pylist() == [1]


def test_a_version_vacuum_removed_says_which_versions_remain(lake: Lake) -> None:
    for n in (1, 2, 3):
        lake.append("sales", rows([n]), partition_by=["year"])
    lake.configure(vacuum_floor=0)
    lake.vacuum(older_than=0, dry_run=False, enforce_retention=False)
    fresh = Lake(lake.bucket, s3=lake.client)  # nothing cached
    with pytest.raises(SnapshotExpiredError) as info:
        fresh.read("sales", version=1)
    assert "vacuum removed it" in str(info.value)
    assert "versions 3 and later of 'sales' remain readable" in str(info.value)


def test_vacuum_keeps_the_views_of_kept_versions_only(lake: Lake, s3: Any) -> None:
    """Twelve versions mirrored (a Delta checkpoint at 10): vacuum keeping only the current
    version deletes the Iceberg metadata and lists of the others and the Delta log before the
    checkpoint, keeps what the current version needs, and both views still read it; keeping
    every version keeps every view object."""
    pytest.importorskip("pyiceberg")
    deltalake = pytest.importorskip("deltalake")
    from pyiceberg.table import StaticTable

    from lakelock._mirror._vacuum import view_keep
    from tests._support.views import delta_options, iceberg_properties

    for i in range(12):
        lake.append("sales", pa.table({"id": [i], "year": [2020 + i % 3]}), partition_by=["year"])
        lake.mirror("sales")
    views = [
        o for prefix in ("views/", "datasets/sales/_delta_log/") for o in lake.store.list(prefix)
    ]
    assert view_keep(lake.registry, views, cutoff=0.0) == {o.key for o in views}
    lake.configure(vacuum_floor=0)
    report = vacuum(
        lake.registry, older_than=0, dry_run=False, clock=later(2), enforce_retention=False
    )
    assert not report.failed
    deleted = set(report.deleted)
    log = "datasets/sales/_delta_log/"
    assert {f"{log}{n:020d}.json" for n in range(10)} <= deleted
    assert f"{log}{10:020d}.json" not in deleted
    current = lake.registry.read().datasets["sales"].updated_version
    metadata = "views/sales/iceberg/metadata/"
    assert {k for k in deleted if k.startswith(metadata)} == {
        f"{metadata}{v:020d}.metadata.json" for v in range(1, current)
    }
    result = lake.mirror("sales")
    expected = sorted(lake.read("sales")["id"].to_pylist())
    table = StaticTable.from_metadata(result.iceberg, properties=iceberg_properties(s3.url))
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == expected
    delta = deltalake.DeltaTable(result.delta, storage_options=delta_options(s3.url))
    assert sorted(delta.to_pyarrow_table()["id"].to_pylist()) == expected


def test_a_damaged_version_does_not_end_the_protection_of_older_retained_ones(
    lake: Lake, admin: Any
) -> None:
    """Three versions, all within vacuum's window (committed by a writer whose clock runs
    two hours ahead, so their objects are older than the window while the versions are
    not); the manifest that only version 2 adds is lost. Vacuum keeps version 1 whole and
    says why it kept what it could not prove unneeded; version 1 still reads. Before, the
    walk of the kept versions ended at version 2, and vacuum deleted version 1's snapshot,
    manifest and file: a version time travel promised was gone."""
    ahead = Registry(lake.store, retry=FAST_RETRY, clock=later(2))

    def commit(ids: list[int], **options: Any) -> int:
        files = lake.write("sales", rows(ids), partition_by=["year"])
        return ahead.commit("sales", add=files, partition_by=["year"], **options).version

    first = commit([1])
    second = commit([2])
    commit([3], remove_partitions=["year=2024"])
    kept = {
        m.key
        for m in lake.registry.read(version=first)
        .datasets["sales"]
        .partitions["year=2024"]
        .manifests
    }
    (lost,) = {
        m.key
        for m in lake.registry.read(version=second)
        .datasets["sales"]
        .partitions["year=2024"]
        .manifests
    } - kept
    admin.delete_object(Bucket=lake.bucket, Key=lost)
    report = vacuum(
        lake.registry, enforce_retention=False, older_than=HOUR, clock=later(2.5), dry_run=False
    )
    assert not report.failed
    assert lost in report.unproven["sales"]
    fresh = Lake(lake.bucket, s3=lake.client)
    assert fresh.read("sales", version=first)["id"].to_pylist() == [1]
    assert fresh.read("sales")["id"].to_pylist() == [3]


def test_with_the_walk_ending_at_damage_vacuum_loses_an_older_retained_version(
    lake: Lake, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two rules of the test above switched off (``walks_past``: the walk ends at the
    first damaged version; ``unproven``: nothing is kept for want of proof): the same run
    deletes version 1 again. What a mutation test of either rule starts from."""
    monkeypatch.setattr(_vacuum_plan, "walks_past", lambda error: False)
    monkeypatch.setattr(_vacuum_plan, "unproven", lambda listed, damage: set())
    with pytest.raises(SnapshotExpiredError):
        test_a_damaged_version_does_not_end_the_protection_of_older_retained_ones(lake, admin)


def test_an_append_stalled_past_vacuums_window_is_refused_not_acknowledged(
    s3: S3Endpoint, lake: Lake
) -> None:
    """An append whose commit stalls (its intent's PUT held at the endpoint) while two hours
    pass by the server's clock, during which vacuum (window an hour, the lake's floor) takes
    its data file, snapshot and index objects, all unreferenced and older than the window.
    When it goes on, the commit sees by the server's ``Date`` that its file is older than
    half the floor and refuses (ObjectTooOldError, naming the file): nothing is committed
    and the dataset reads and takes appends as before. Before, the append was acknowledged
    pointing at the deleted snapshot and file: its rows were lost, and every read, append
    and vacuum of the dataset raised RegistryCorruptError until it was repaired by hand."""
    sim = SimTime(start=time.time())
    sim.attach(lake.client)  # the writer's server clock: every answer's Date
    lake.append("sales", rows([1]), partition_by=["year"])
    s3.inject("stall", operation="PutObject", prefix="metastore/intents/", count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        late = pool.submit(lake.append, "sales", rows([2]), partition_by=["year"])
        wait_until(lambda: s3.stalled() == 1)
        sim.advance(2 * HOUR)
        report = vacuum(
            lake.registry, enforce_retention=False, older_than=HOUR, clock=later(2), dry_run=False
        )
        (taken,) = [k for k in report.deleted if k.startswith("datasets/")]
        s3.release_stalls()
        with pytest.raises(ObjectTooOldError) as info:
            late.result(timeout=60)
    assert info.value.key == taken
    assert info.value.age > HOUR
    assert lake.read("sales")["id"].to_pylist() == [1]
    lake.append("sales", rows([3]), partition_by=["year"])
    assert sorted(lake.read("sales")["id"].to_pylist()) == [1, 3]
    assert not vacuum(lake.registry, enforce_retention=False, older_than=HOUR).failed


def test_with_rule_10_switched_off_the_stalled_append_wedges_the_dataset(
    s3: S3Endpoint, lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above with the writer's side of FORMAT.md rule 10 switched off, as
    lakelock was before it: ``too_old_to_reference`` (by the floor) and ``vacuumed`` (by the
    cutoff vacuum records in the root; either alone refuses this append). The stalled
    append is acknowledged, its rows are gone, and reading the dataset fails on the
    missing file. What a mutation test of the rule starts from."""
    monkeypatch.setattr(_decide, "too_old_to_reference", lambda *_, **__: None)
    monkeypatch.setattr(_decide, "vacuumed", lambda *_, **__: None)
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        test_an_append_stalled_past_vacuums_window_is_refused_not_acknowledged(s3, lake)
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)  # nothing cached
    with pytest.raises(NotFoundError, match="datasets/sales/"):
        fresh.read("sales")


def _paused_beside_vacuum(s3: S3Endpoint, lake: Lake) -> tuple[BaseException | None, str]:
    """A committed append, then a second one paused beside vacuum
    (:func:`~tests._support.vacuuming.append_paused_beside_vacuum`): what it raised
    (``None``: acknowledged) and its data file vacuum deleted."""
    lake.append("sales", rows([1]), partition_by=["year"])
    return append_paused_beside_vacuum(s3, lake, rows([2]), partition_by=["year"])


def _still_whole(lake: Lake) -> None:
    """The dataset reads what was committed, takes appends, and vacuums."""
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)  # nothing cached
    assert fresh.read("sales")["id"].to_pylist() == [1]
    lake.append("sales", rows([3]), partition_by=["year"])
    assert sorted(fresh.read("sales")["id"].to_pylist()) == [1, 3]
    assert not vacuum(lake.registry, enforce_retention=False, older_than=HOUR).failed


def test_an_append_paused_after_its_last_check_is_refused_once_vacuum_moved_the_root(
    s3: S3Endpoint, lake: Lake
) -> None:
    """FORMAT.md rule 10's last hole (:func:`_paused_beside_vacuum`): vacuum takes the
    paused append's data file and snapshot, unreferenced and older than its window, while
    the root is still the one the held swap's ``If-Match`` names. Vacuum moves the root
    before it deletes (recording its cutoff), so the held swap fails when it goes on and
    the next attempt refuses the commit (ObjectTooOldError, naming the file): nothing is
    committed, the dataset reads and takes appends as before. Before, the swap landed:
    the append was acknowledged pointing at the deleted file and snapshot, its rows lost
    and the dataset unreadable until repaired by hand."""
    error, taken = _paused_beside_vacuum(s3, lake)
    assert isinstance(error, ObjectTooOldError), error
    assert error.key == taken
    assert lake.registry._current()[0].vacuum_cutoff is not None
    _still_whole(lake)


def test_with_vacuum_not_moving_the_root_the_paused_append_wedges_the_dataset(
    s3: S3Endpoint, lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above with vacuum's compare-and-swap of the root switched off
    (``_vacuum_plan.claim`` returning the plan as read), as lakelock was before it: the
    paused append's swap lands on the unchanged root, it is acknowledged, its rows are gone
    and the dataset cannot be read any more. What a mutation test of the rule starts from."""

    def unclaimed(found: _vacuum_plan.Plan, **_: Any) -> Any:
        return found
        yield  # a generator, as claim is

    monkeypatch.setattr(lakelock._vacuum, "claim", unclaimed)
    error, _ = _paused_beside_vacuum(s3, lake)
    assert error is None
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)  # nothing cached
    with pytest.raises(RegistryCorruptError, match="missing"):
        fresh.read("sales")


@pytest.mark.parametrize("cutoff", ["checked", "switched off"])
def test_without_a_vacuum_floor_the_cutoff_vacuum_recorded_refuses_the_paused_append(
    s3: S3Endpoint, lake: Lake, monkeypatch: pytest.MonkeyPatch, cutoff: str
) -> None:
    """A lake whose vacuum floor is 0 (no check by age: vacuum may take any unreferenced
    object at once): the paused append of :func:`_paused_beside_vacuum` is refused all the
    same, by the cutoff vacuum recorded in the root it moved (``_decide.vacuumed``), which
    needs no clock: ObjectTooOldError naming the file, nothing committed. With that check
    switched off, the append's retry after its failed swap commits the deleted file: it is
    acknowledged, and reading the dataset fails on the missing file."""
    lake.configure(vacuum_floor=0, create=True)
    if cutoff == "switched off":
        monkeypatch.setattr(_decide, "vacuumed", lambda *_, **__: None)
    error, taken = _paused_beside_vacuum(s3, lake)
    if cutoff == "checked":
        assert isinstance(error, ObjectTooOldError), error
        assert error.key == taken
        _still_whole(lake)
    else:
        assert error is None
        fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
        with pytest.raises(NotFoundError, match=taken):
            fresh.read("sales")


def test_vacuum_writes_the_iceberg_views_metadata_again_without_the_versions_it_removes(
    lake: Lake, s3: Any
) -> None:
    """Three versions mirrored: the view's newest metadata lists all three. A dry run writes
    nothing; vacuum, keeping only the current version, writes a metadata.json named for the
    version its claim moved the root to, listing only that version (it listed the two vacuum
    removed, whose manifest lists it deleted, until the dataset's next version), which
    ``lake.mirror`` names; the next version is mirrored on it (the metadata it replaces in
    its log)."""
    pytest.importorskip("pyiceberg")

    for i in range(3):
        lake.append("sales", pa.table({"id": [i]}))
        before = lake.mirror("sales").iceberg
    metadata = "views/sales/iceberg/metadata/"
    listed = {o.key for o in lake.store.list(metadata)}
    vacuum(lake.registry, older_than=HOUR, clock=later(2), enforce_retention=False)
    assert {o.key for o in lake.store.list(metadata)} == listed
    report = vacuum(
        lake.registry, older_than=HOUR, clock=later(2), enforce_retention=False, dry_run=False
    )
    assert not report.failed
    root = lake.registry.read().version
    written = {o.key for o in lake.store.list(metadata)} - listed
    assert written == {f"{metadata}{root:020d}.metadata.json"}
    current = lake.registry.read().datasets["sales"].updated_version
    named, view = mirrored_view(lake, s3)
    assert named.endswith(f"{root:020d}.metadata.json")
    assert [s.snapshot_id for s in view.metadata.snapshots] == [current]
    assert view.metadata.metadata_log[-1].metadata_file == before
    assert view.scan().to_arrow()["id"].to_pylist() == [0, 1, 2]
    # A version of no new file: one would be refused until the server's clock is past the
    # cutoff vacuum recorded, a second after its newest orphan (FORMAT.md rule 10). The
    # vacuum's horizon (its clock two hours ahead) is later than this version: the one it
    # replaces is no longer read either.
    newer = lake.set_properties("sales", {"owner": "etl"}).version
    _, view = mirrored_view(lake, s3)
    assert [s.snapshot_id for s in view.metadata.snapshots] == [newer]
    assert view.metadata.metadata_log[-1].metadata_file == named
    assert view.scan().to_arrow()["id"].to_pylist() == [0, 1, 2]


def test_a_view_behind_its_dataset_is_left_to_its_next_metadata_which_drops_what_vacuum_removed(
    lake: Lake, s3: Any
) -> None:
    """Three versions, the view mirrored to the second: vacuum (keeping only the third,
    inside the retention) writes no metadata of the view; the next mirror's metadata lists
    only the third, by the horizon the root records (by the retention alone, 7 days, it
    listed all three, two of them gone)."""
    pytest.importorskip("pyiceberg")

    for i in range(3):
        lake.append("sales", pa.table({"id": [i]}))
        if i < 2:
            lake.mirror("sales")
    metadata = "views/sales/iceberg/metadata/"
    listed = {o.key for o in lake.store.list(metadata)}
    report = vacuum(
        lake.registry, older_than=HOUR, clock=later(2), enforce_retention=False, dry_run=False
    )
    assert not report.failed
    assert {o.key for o in lake.store.list(metadata)} <= listed
    current = lake.registry.read().datasets["sales"].updated_version
    named, view = mirrored_view(lake, s3)
    assert named.endswith(f"{current:020d}.metadata.json")
    assert [s.snapshot_id for s in view.metadata.snapshots] == [current]
    assert view.scan().to_arrow()["id"].to_pylist() == [0, 1, 2]


def mirrored_view(lake: Lake, s3: Any) -> tuple[str, Any]:
    """``sales`` mirrored: the Iceberg metadata ``lake.mirror`` names, and the view (a
    pyiceberg ``StaticTable``) it is."""
    from pyiceberg.table import StaticTable

    from tests._support.views import iceberg_properties

    named = lake.mirror("sales").iceberg
    assert named is not None
    return named, StaticTable.from_metadata(named, properties=iceberg_properties(s3.url))
