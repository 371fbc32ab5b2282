"""Adversarial tests of vacuum beside writers (FORMAT.md rule 10, "Retention and vacuum"):
a writer paused between its last check and its swap while vacuum runs, on every kind of
lake vacuum accepts. Time is injected: nothing sleeps."""

from __future__ import annotations

from lakelock import Lake
from lakelock._s3 import ObjectStore
from lakelock.errors import LakelockError, ObjectTooOldError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.format1 import plant_format1
from tests._support.tables import day_rows
from tests._support.vacuuming import append_paused_beside_vacuum, restore_held_through_vacuum


def test_an_append_upgrading_a_format_1_lake_paused_past_vacuum_is_refused(
    s3: S3Endpoint, lake: Lake
) -> None:
    """A lake an older lakelock left in format 1. An append (the commit that upgrades it)
    passes its checks and sends its swap, which the endpoint holds (its process paused just
    before the PUT went out) while two hours pass by the server's clock; vacuum (window an
    hour) runs meanwhile and takes the append's data file and the snapshot its upgrade
    wrote, unreferenced and older than its window. Vacuum moves the format-1 root before it
    deletes, so the held swap fails and the append is refused (``ObjectTooOldError``,
    nothing committed). Before, vacuum left a format-1 root alone: the swap landed, the
    append was acknowledged, its rows were gone and every read of the dataset failed on the
    missing snapshot until the lake was repaired by hand."""
    plant_format1(lake, [("sales", "old-1", [1], 1)], versions=False)
    error, taken = append_paused_beside_vacuum(s3, lake, day_rows([2]), partition_by=["day"])
    assert isinstance(error, ObjectTooOldError), repr(error)
    assert error.key == taken
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)  # nothing cached
    assert fresh.read("sales")["id"].to_pylist() == [1]
    fresh.append("sales", day_rows([3]), partition_by=["day"])
    assert sorted(fresh.read("sales")["id"].to_pylist()) == [1, 3]


def test_the_lakes_first_commit_paused_past_vacuum_is_refused_and_the_lake_goes_on(
    s3: S3Endpoint, lake: Lake
) -> None:
    """The very first commit of a lake (the one that creates the registry's root) passes its
    checks and sends its create, which the endpoint holds while two hours pass by the
    server's clock; vacuum (window an hour) finds no root, takes the commit's data file and
    snapshot, and records its cutoff by creating the root itself (FORMAT.md rule 10). The
    held create then fails and the commit is refused (``ObjectTooOldError``, nothing
    committed) instead of being acknowledged over deleted objects; the lake takes its next
    commit as a fresh one."""
    error, taken = append_paused_beside_vacuum(s3, lake, day_rows([1]), partition_by=["day"])
    assert isinstance(error, ObjectTooOldError), repr(error)
    assert error.key == taken
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)  # nothing cached
    assert "sales" not in fresh.registry.read().datasets
    fresh.append("sales", day_rows([2]), partition_by=["day"])
    assert fresh.read("sales")["id"].to_pylist() == [2]


def test_a_restore_paused_while_the_retention_shrinks_is_not_acknowledged_over_vacuum(
    s3: S3Endpoint, store: ObjectStore, lake: Lake
) -> None:
    """A restore of version 1 (its rows replaced by an overwrite since), planned under the
    default retention of 7 days: its version leaves the retention in a week, so it may
    land. Its swap is held at the endpoint (its process paused) while another process
    shrinks the lake's retention to an hour and, three hours later, vacuum at that retention
    takes version 1's manifest and data file. Let go, the restore must be refused (its
    version left the retention it is applied under) or read whole. What a user loses
    otherwise: the restore is acknowledged, the dataset's current version points at the
    deleted objects, and every read of it fails until the lake is repaired by hand. The
    restoring process's clock jumps the three hours when it is let go (it was paused
    through them); every clock agrees, so only the retention tells the restore it is late.
    Before, the restore judged its version by the retention it was planned under and
    landed."""
    error = restore_held_through_vacuum(s3, store, lake, grown_back=False)
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)  # nothing cached
    if error is None:  # acknowledged: the version it made current must read whole
        assert fresh.read("sales")["id"].to_pylist() == [1]
    else:
        assert isinstance(error, LakelockError), repr(error)
        assert fresh.read("sales")["id"].to_pylist() == [2]
