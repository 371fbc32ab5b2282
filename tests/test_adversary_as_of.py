"""Adversarial tests of time travel by time (README, "Time travel": ``as_of=<time>``;
FORMAT.md, "A dataset snapshot"): a reader asks for an instant no version was committed at,
or one that has not come yet."""

from __future__ import annotations

import time

import pyarrow as pa

from lakelock import Lake

DAY = 86_400.0


def test_an_as_of_in_the_future_reads_the_newest_version_so_far(lake: Lake) -> None:
    """A report asks for ``sales`` as of the end of a day that is not over yet. It reads the
    version current when it asks (as Iceberg's time travel does), named by its version, and
    the same call made after another commit reads that one: FORMAT.md says so, and that
    ``version=`` is the repeatable read. What a reader would have been left to guess: whether
    a future instant is refused, read as now, or read as of when the read is repeated."""
    lake.append("sales", pa.table({"id": [1]}))
    tonight = time.time() + DAY
    first = lake.registry.read(as_of=tonight)
    assert first.datasets["sales"].updated_version == first.version == 1
    assert lake.read("sales", as_of=tonight)["id"].to_pylist() == [1]
    lake.append("sales", pa.table({"id": [2]}))
    assert sorted(lake.read("sales", as_of=tonight)["id"].to_pylist()) == [1, 2]
    assert lake.read("sales", version=first.version)["id"].to_pylist() == [1]
