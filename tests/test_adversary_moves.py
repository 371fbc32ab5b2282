"""Adversarial tests of partition renames beside other writers (README, "Locks, leases and
the bucket policy": renames lock for themselves; ``rename_partition``: readers see the
partition at the old place or the new one, never half). Each ``Lake`` stands for one
process; the endpoint holds a request to stop a process mid-commit."""

from __future__ import annotations

from typing import Any

from lakelock import Lake
from tests._support import FAST_RETRY, StallAndRace
from tests._support.tables import day_rows


def test_a_rename_beside_an_overwrite_stopped_mid_commit_moves_what_the_overwrite_left(
    stall_and_race: StallAndRace, client: Any, bucket: str
) -> None:
    """An overwrite of ``day=1`` has its intent out and its swap held at the endpoint (its
    process stopped) when another process renames ``day=1`` to ``day=3``. The rename must
    not move the rows the overwrite replaced, nor leave the overwrite's rows behind at
    ``day=1``: history reads as one order (the overwrite, then the rename), each version
    whole. What a user would lose: rows replaced by an overwrite that was acknowledged
    coming back at the new place, or the new rows stranded at a partition that was
    renamed away."""

    def process() -> Lake:
        return Lake(bucket, s3=client, retry=FAST_RETRY)

    process().append("sales", day_rows([1, 2], 1), partition_by=["day"])
    process().append("sales", day_rows([3], 2), partition_by=["day"])
    overwrite, rename = stall_and_race(
        lambda: process().overwrite("sales", day_rows([9], 1), partition_by=["day"]),
        lambda: process().rename_partition("sales", "day=1", to_partition="day=3"),
    )
    assert overwrite.version < rename.version
    reader = process()
    assert reader.read("sales", version=overwrite.version).sort_by("id").to_pydict() == {
        "id": [3, 9],
        "day": [2, 1],
    }
    assert reader.read("sales").sort_by("id").to_pydict() == {"id": [3, 9], "day": [2, 3]}
