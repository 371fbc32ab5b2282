"""Reading one partition stays cheap as the dataset grows: a partition that a commit of many
partitions added is read from its part of the shared manifest (a ranged GET checked against
the part's digest in the index), not from the whole manifest; the index is looked up, not
walked (depth + 4 GETs for a fresh Lake)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import RegistryCorruptError
from lakelock.testing import S3Endpoint

PARTITIONS = 200


@pytest.fixture
def wide(lake: Lake) -> Lake:
    """One commit of PARTITIONS partitions: one intent lists every file."""
    lake.append(
        "ev", pa.table({"id": range(PARTITIONS), "p": range(PARTITIONS)}), partition_by=["p"]
    )
    return lake


def shared_manifest(lake: Lake) -> str:
    (ref,) = lake.registry.read().datasets["ev"].partitions["p=7"].manifests
    assert ref.part is not None
    return ref.key


def test_a_fresh_lake_reads_one_partition_from_its_part(s3: S3Endpoint, wide: Lake) -> None:
    manifest_size = wide.store.head(shared_manifest(wide)).size
    fresh = Lake(wide.bucket, s3=wide.client)
    s3.reset_stats()
    table = fresh.read("ev", partitions=["p=7"])
    assert table["id"].to_pylist() == [7]
    # root, snapshot, one index node (200 entries: a branch over leaves), the part, the file
    assert s3.stats() == {"GetObject": 5}
    assert s3.traffic()["out"] < manifest_size / 4
    assert sorted(fresh.read("ev", partitions=["p=3", "p=150"])["id"].to_pylist()) == [3, 150]
    assert fresh.read("ev").num_rows == PARTITIONS  # the whole dataset: manifests whole


def test_a_part_that_is_not_what_the_index_names_is_refused(wide: Lake, admin: Any) -> None:
    key = shared_manifest(wide)
    body = wide.store.get(key).body
    tampered = body.replace(b'"records":1,', b'"records":9,', PARTITIONS)
    assert tampered != body
    admin.put_object(Bucket=wide.bucket, Key=key, Body=tampered)
    with pytest.raises(RegistryCorruptError, match="not those the index names"):
        Lake(wide.bucket, s3=wide.client).read("ev", partitions=["p=7"])
