"""A lake written in format 1 and upgraded: its old versions cannot be read (format 1 kept no
snapshots) and the error says so, naming the version where time travel begins; its format-1
commit log stays in the dataset's history."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry import REGISTRY_KEY, RegistryDoc, apply_change, seal
from lakelock._registry._changes import Change, delta_manifests
from lakelock._registry._document import serialize_registry
from lakelock.errors import VersionNotFoundError


def rows(ids: list[int], day: int) -> pa.Table:
    return pa.table({"id": ids, "day": [day] * len(ids)})


def plant_format1_versions(lake: Lake) -> None:
    """Format-1 versions 1-3, one commit each: sales, sales, events."""
    doc = RegistryDoc(format_version=1)
    for n, (name, day) in enumerate((("sales", 1), ("sales", 2), ("events", 3)), start=1):
        files = lake.write(name, rows([n], day), partition_by=["day"])
        refs = {}
        for path, (ref, body) in delta_manifests(name, files, nonce=uuid.uuid4().hex).items():
            lake.store.put(ref.key, body, mode="create")
            refs[path] = ref
        change = Change(
            name, f"old-{n}", add=tuple(files), added_manifests=refs, operation="append"
        )
        manifests: dict[str, Any] = {}
        now = f"2026-01-0{n}T00:00:00.000000Z"
        applied = apply_change(doc, change, manifests=manifests, now=now, next_version=n)
        doc = seal(applied.doc, [(change, applied)], now=now, window=100)
    lake.store.put(REGISTRY_KEY, serialize_registry(doc), mode="create")


def test_time_travel_begins_at_the_upgrade_and_history_keeps_format_1(lake: Lake) -> None:
    plant_format1_versions(lake)
    upgrade = lake.append("sales", rows([4], 4), partition_by=["day"], commit_id="new-4")
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
