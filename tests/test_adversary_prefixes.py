"""Adversarial tests of several lakes in one bucket (README, "Write":
``Lake.from_url("s3://bucket/prefix", ...)``; "Time travel": ``vacuum`` deletes only what no
version within the retention reads). A lake is its prefix: two lakes of one bucket must not
reach each other's objects. Each ``Lake`` stands for one team's process; vacuum's clock is
injected, nothing sleeps."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._vacuum import vacuum
from lakelock.errors import InvalidNameError
from tests._support import FAST_RETRY

DAY = 24 * 3600.0


@pytest.mark.unguarded  # the root lake's policy would refuse the nested lake's swaps
@pytest.mark.parametrize("area", ["datasets", "views"])
def test_a_lake_inside_another_lakes_area_is_refused_before_vacuum_takes_it(
    client: Any, bucket: str, area: str
) -> None:
    """One team keeps a lake at the bucket's root (``Lake("my-bucket")``, as the README
    does); another opens theirs at ``datasets/eu`` in the same bucket. Every object of the
    second lake then lies in the first lake's ``datasets/`` area (or ``views/``), read by
    none of its versions: the first lake's vacuum, a week later, deletes the second lake
    whole, its registry and every file of every version. A lake prefix inside a lake's area
    must be refused (InvalidNameError) before anything is written, so the first lake's
    vacuum finds nothing of anyone else's."""
    root = Lake(bucket, s3=client, retry=FAST_RETRY)
    root.append("sales", pa.table({"id": [1]}))
    nested = None
    with contextlib.suppress(InvalidNameError):
        nested = Lake(bucket, prefix=f"{area}/eu", s3=client, retry=FAST_RETRY)
    if nested is not None:
        nested.append("orders", pa.table({"id": [7]}))
    week_later = time.time() + 8 * DAY
    report = vacuum(root.registry, clock=lambda: week_later, dry_run=True)
    assert [o.key for o in report.orphans] == []
    assert nested is None
    with pytest.raises(InvalidNameError):  # the URL too, before any client is made
        Lake.from_url(f"s3://{bucket}/team/{area}/")
