"""Restores and time travel after a retention shrunk, vacuumed under and grown again
(FORMAT.md rule 9, "Retention and vacuum"): vacuum deletes what only versions out of the
retention it ran under reach, and no retention set afterwards brings that back, so such a
version is refused for restore and for reading, judged by the vacuum recorded in the root.
Time is injected: vacuum and the readers run on clocks hours ahead; nothing sleeps."""

from __future__ import annotations

import time

import orjson
import pytest

from lakelock import Lake
from lakelock._layout import REGISTRY_KEY
from lakelock._registry import Registry
from lakelock._s3 import IfMatch, ObjectStore
from lakelock._vacuum import vacuum
from lakelock.errors import CommitConflictError, SnapshotExpiredError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.simtime import later
from tests._support.tables import day_rows
from tests._support.vacuuming import restore_held_through_vacuum


def a_process_three_hours_on(lake: Lake, store: ObjectStore) -> Lake:
    """Another handle on the lake whose clock runs three hours ahead (as vacuum's did)."""
    other = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    other.registry = Registry(store, retry=FAST_RETRY, clock=later(3))
    return other


def test_a_restore_of_a_version_vacuumed_before_the_retention_grew_is_snapshot_expired(
    store: ObjectStore, lake: Lake
) -> None:
    """A long-lived process read version 1 of ``sales`` (its snapshot and manifests are in
    its cache); the retention is shrunk to an hour, vacuum deletes version 1's objects, and
    the retention is grown back to a week. A restore of version 1 from that process must be
    refused (``SnapshotExpiredError``, nothing committed) and the dataset still read whole.
    What a user lost before: the restore was judged by the grown retention alone, planned
    from the cached snapshot and acknowledged; the current version then pointed at deleted
    objects and every read of ``sales`` failed (``RegistryCorruptError``) until the lake was
    repaired by hand."""
    service = a_process_three_hours_on(lake, store)
    lake.append("sales", day_rows([1]), partition_by=["day"])
    assert service.read("sales")["id"].to_pylist() == [1]
    lake.overwrite("sales", day_rows([2]), partition_by=["day"])
    lake.configure(retention="1h")
    report = vacuum(lake.registry, clock=later(3), dry_run=False)
    assert [k for k in report.deleted if k.startswith("datasets/")], report
    lake.configure(retention="7d")
    with pytest.raises(SnapshotExpiredError, match="last vacuum"):
        service.restore("sales", version=1)
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)  # nothing cached
    assert fresh.read("sales")["id"].to_pylist() == [2]
    assert fresh.history("sales")[0].operation == "overwrite"  # no restore landed


def test_reading_a_version_vacuumed_before_the_retention_grew_is_snapshot_expired(
    store: ObjectStore, lake: Lake
) -> None:
    """After the retention was shrunk, vacuumed under and grown back, a process that read
    version 1 before (cached) asks for it by version, by time and for its files: each must
    be ``SnapshotExpiredError`` naming what remains readable. Before, it read from its cache
    and heard ``NotFoundError`` for a deleted data file (``lake.read``), was handed the list
    of files vacuum had deleted (``registry.files``), or the dataset as if it were whole
    (``registry.read(as_of=...)``)."""
    service = a_process_three_hours_on(lake, store)
    lake.append("sales", day_rows([1]), partition_by=["day"])
    first_at = time.time()
    assert service.read("sales")["id"].to_pylist() == [1]
    lake.overwrite("sales", day_rows([2]), partition_by=["day"])
    lake.configure(retention="1h")
    vacuum(lake.registry, clock=later(3), dry_run=False)
    lake.configure(retention="7d")
    registry = service.registry
    with pytest.raises(SnapshotExpiredError, match="remain readable"):
        service.read("sales", version=1)
    with pytest.raises(SnapshotExpiredError, match="remain readable"):
        registry.files("sales", snapshot=registry.read(version=1))
    with pytest.raises(SnapshotExpiredError, match="remain readable"):
        registry.read(as_of=first_at).datasets["sales"]
    assert service.read("sales", version=2)["id"].to_pylist() == [2]


def test_listing_a_version_vacuumed_before_the_retention_grew_is_snapshot_expired(
    store: ObjectStore, lake: Lake
) -> None:
    """After the retention was shrunk, vacuumed under and grown back, the registry as of
    version 1 is asked which datasets it held, and whether it held ``sales``: each must be
    ``SnapshotExpiredError`` naming what remains readable, never an empty answer. Before,
    the listing was empty and ``sales`` not in it, as if version 1 had held no dataset."""
    lake.append("sales", day_rows([1]), partition_by=["day"])
    lake.overwrite("sales", day_rows([2]), partition_by=["day"])
    lake.configure(retention="1h")
    vacuum(lake.registry, clock=later(3), dry_run=False)
    lake.configure(retention="7d")
    registry = a_process_three_hours_on(lake, store).registry
    first = registry.read(version=1)
    with pytest.raises(SnapshotExpiredError, match="remain readable"):
        dict(first.datasets)
    with pytest.raises(SnapshotExpiredError, match="remain readable"):
        "sales" in first.datasets  # noqa: B015 - the question is what raises
    with pytest.raises(SnapshotExpiredError, match="remain readable"):
        first.datasets.get("sales")
    assert sorted(registry.read(version=2).datasets) == ["sales"]


def test_a_restore_held_while_vacuum_ran_is_refused_after_the_retention_grew(
    s3: S3Endpoint, store: ObjectStore, lake: Lake
) -> None:
    """A restore of version 1 planned under the default week, its swap held at the endpoint
    (its process paused) while another process shrinks the retention to an hour, vacuum at
    that retention deletes version 1's objects, and the retention is grown back to a week.
    Let go, the restore must be refused by whoever applies it (the root records the vacuum:
    ``CommitConflictError``, nothing committed). Before, the applier judged it by the
    grown retention alone and applied it from its cached snapshot: acknowledged, and every
    read of ``sales`` failed on the deleted objects."""
    error = restore_held_through_vacuum(s3, store, lake, grown_back=True)
    assert isinstance(error, CommitConflictError), repr(error)
    assert "last vacuum" in str(error)
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)  # nothing cached
    assert fresh.read("sales")["id"].to_pylist() == [2]


def test_a_root_recording_only_the_vacuum_cutoff_still_refuses_the_restore(
    store: ObjectStore, lake: Lake
) -> None:
    """A root whose vacuum recorded its cutoff alone (a vacuum of an earlier lakelock, or a
    writer of one that dropped the rest when it swapped). ``sales`` was written and
    overwritten an hour before the lake's other commits (its writer's clock reads an hour
    earlier); the retention shrunk, vacuumed under and grown back, a restore of version 1
    must still be refused, judged by the cutoff (``SnapshotExpiredError``): vacuum deleted
    objects written an hour after version 1 was replaced, so that version was out of its
    window. Before, it was acknowledged over deleted objects."""
    earlier = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    earlier.registry = Registry(store, retry=FAST_RETRY, clock=later(-1))
    service = a_process_three_hours_on(lake, store)
    earlier.append("sales", day_rows([1]), partition_by=["day"])
    assert service.read("sales")["id"].to_pylist() == [1]
    earlier.overwrite("sales", day_rows([2]), partition_by=["day"])
    lake.configure(retention="1h")
    vacuum(lake.registry, clock=later(3), dry_run=False)
    lake.configure(retention="7d")
    root = store.get(REGISTRY_KEY)
    doc = orjson.loads(root.body)
    doc["vacuum"] = {"cutoff": doc["vacuum"]["cutoff"]}
    store.put(REGISTRY_KEY, orjson.dumps(doc), mode=IfMatch(root.etag))
    with pytest.raises(SnapshotExpiredError, match="last vacuum"):
        service.restore("sales", version=1)
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    assert fresh.read("sales")["id"].to_pylist() == [2]
