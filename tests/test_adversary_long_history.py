"""Adversarial tests of a dataset with a long history: what a read of its views costs must
follow from the dataset's size, not from how many versions made it (FORMAT.md, "Iceberg and
Delta views"), and every version kept stays readable as it was."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._mirror._iceberg import MERGE_MIN_COUNT
from lakelock.testing import S3Endpoint
from tests._support.views import iceberg_properties

pyiceberg_table = pytest.importorskip("pyiceberg.table")

#: Appends of one row each: past the point where Iceberg's own writers merge manifests.
APPENDS = MERGE_MIN_COUNT + 20


def one_row_appends(lake: Lake, count: int) -> list[int]:
    """``count`` appends of one row each (id ``i`` by the ``i``-th) to ``events``; the
    version of each."""
    return [lake.append("events", pa.table({"id": [i]})).version for i in range(count)]


def manifests_listed(table: Any, snapshot_id: int | None = None) -> list[Any]:
    """The manifests the manifest list of ``snapshot_id`` (the current one) names."""
    snapshot = (
        table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    )
    return list(snapshot.manifests(table.io))


@pytest.mark.slow
@pytest.mark.timeout(900)  # 120 commits and mirrors: 25-85 s alone, minutes beside other work
def test_a_view_of_many_small_appends_lists_a_bounded_number_of_manifests(
    lake: Lake, s3: S3Endpoint
) -> None:
    """120 appends of one row each, mirrored: the newest Iceberg snapshot names fewer than
    100 manifests (the view merges its small ones as Iceberg's writers do; it named one per
    append, so every read of the view fetched 120 manifests, and 10,000 after 10,000
    appends), and pyiceberg reads every version's rows as lakelock does, the newest and one
    from before the merge."""
    versions = one_row_appends(lake, APPENDS)
    result = lake.mirror("events", formats=("iceberg",))
    assert result.iceberg is not None
    table = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(s3.url)
    )
    listed = manifests_listed(table)
    assert len(listed) < MERGE_MIN_COUNT, f"{len(listed)} manifests for {APPENDS} appends"
    # The 100 of the first 100 appends merged into one by the 101st, then one an append.
    assert len(listed) == 1 + APPENDS - MERGE_MIN_COUNT
    assert sum(m.added_files_count + m.existing_files_count for m in listed) == APPENDS
    newest = table.scan().to_arrow()
    assert sorted(newest["id"].to_pylist()) == list(range(APPENDS))
    before = versions[MERGE_MIN_COUNT // 2]
    assert len(manifests_listed(table, before)) == MERGE_MIN_COUNT // 2 + 1
    old = table.scan(snapshot_id=before).to_arrow()
    assert sorted(old["id"].to_pylist()) == sorted(
        lake.read("events", version=before)["id"].to_pylist()
    )
