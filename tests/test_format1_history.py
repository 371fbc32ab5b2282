"""A lake written in format 1 and upgraded: its old versions cannot be read (format 1 kept no
snapshots) and the error says so, naming the version where time travel begins; its format-1
commit log stays in the dataset's history."""

from __future__ import annotations

import pytest

from lakelock import Lake
from lakelock.errors import VersionNotFoundError
from tests._support.format1 import plant_format1
from tests._support.tables import day_rows


def plant_format1_versions(lake: Lake) -> None:
    """Format-1 versions 1-3, one commit each: sales, sales, events."""
    commits = [("sales", "old-1", [1], 1), ("sales", "old-2", [2], 2), ("events", "old-3", [3], 3)]
    plant_format1(lake, commits, versions=True)


def test_time_travel_begins_at_the_upgrade_and_history_keeps_format_1(lake: Lake) -> None:
    plant_format1_versions(lake)
    upgrade = lake.append("sales", day_rows([4], 4), partition_by=["day"], commit_id="new-4")
    assert upgrade.version == 4
    fresh = Lake(lake.bucket, s3=lake.client)
    with pytest.raises(VersionNotFoundError) as info:
        fresh.read("sales", version=1)
    text = str(info.value)
    assert "dataset 'sales'" in text
    assert "time travel begins at version 4" in text
    assert "format 1 kept no snapshots" in text
    assert sorted(fresh.read("sales", version=4)["id"].to_pylist()) == [1, 2, 4]
    history = fresh.history("sales")
    assert [(h.version, h.commit_id, h.operation) for h in history] == [
        (4, "new-4", "append"),
        (2, "old-2", "append"),
        (1, "old-1", "append"),
    ]
    assert [h.commit_id for h in fresh.history("sales", limit=2)] == ["new-4", "old-2"]
    with pytest.raises(VersionNotFoundError, match="format 1 kept no snapshots"):
        fresh.read("sales", as_of=history[-1].at)
