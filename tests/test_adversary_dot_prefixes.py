"""Adversarial tests of a lake prefix with a ``.`` or ``..`` segment (README, "Engines":
``lake.scan`` hands one version's files to the engine; docs/FORMAT.md, "Key layout": a
prefix the lake cannot live at is refused when the store is made). S3 keeps such keys as
written; DuckDB, Polars and pyarrow resolve the segment away before they ask for a key."""

from __future__ import annotations

from typing import Any

import pytest

from lakelock import Lake
from lakelock.errors import InvalidNameError
from lakelock.testing import S3Endpoint


@pytest.mark.parametrize("prefix", ["team/../", "./", "team/./daily/", "team/.."])
def test_a_lake_prefix_with_a_dot_segment_is_refused_before_anything_is_written(
    s3: S3Endpoint, client: Any, bucket: str, prefix: str
) -> None:
    """A ``Lake`` at ``team/../`` (or ``./``) is refused (``InvalidNameError``) before it
    writes. What a user would lose: its appends succeeded, but every engine a scan hands the
    files to asked for ``datasets/...`` instead of ``team/../datasets/...`` (DuckDB and
    pyarrow: not found; Polars: an illegal path), so the lake could be written and never
    read but by ``to_arrow``, and ``lakelock policy`` refused the prefix, so it could not be
    guarded either."""
    with pytest.raises(InvalidNameError):
        Lake(bucket, prefix=prefix, s3=client)
    with pytest.raises(InvalidNameError):
        Lake.from_url(f"s3://{bucket}/{prefix}", endpoint_url=s3.url)
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
