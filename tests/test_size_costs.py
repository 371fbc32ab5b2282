"""What an operation costs as the lake grows: requests counted at the endpoint (0070)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.testing import S3Endpoint

# Reading version 1 walks the parent chain today: 131 GETs at 130 versions.
VERSIONS = 130


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="time travel walks the snapshot chain one GET a version (0070: skip pointers fix it)",
)
def test_time_travel_to_the_oldest_version_costs_log_requests(
    lake: Lake, s3: S3Endpoint, client: Any, bucket: str, lake_prefix: str
) -> None:
    """A fresh process reading version 1 of a dataset with 130 versions pays a few dozen
    GETs at most (a walk by skip pointers, B = 16), not one GET per version."""
    for n in range(VERSIONS):
        lake.append("d", pa.table({"p": [0], "x": [n]}), partition_by=["p"])
    fresh = Lake(bucket, prefix=lake_prefix, s3=client)
    try:
        s3.reset_stats()
        fresh.registry.read(version=1).datasets.get("d")  # a dataset is loaded when asked for
        gets = s3.stats().get("GetObject", 0)
    finally:
        fresh.close()
    assert gets <= 32, gets
