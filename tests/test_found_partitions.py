"""Partition moves into a dataset they do not fit: promises broken today."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import PartitionByMismatchError, SchemaMismatchError


def data_objects(client: Any, lake: Lake) -> list[str]:
    listed = client.list_objects_v2(Bucket=lake.bucket, Prefix=f"{lake.prefix}datasets/")
    return sorted(o["Key"] for o in listed.get("Contents", []))


@pytest.mark.parametrize(
    ("archive", "error"),
    [
        (pa.table({"year": [2023], "amount": [1.0]}), PartitionByMismatchError),
        (pa.table({"year": [2023], "month": [1], "amount": ["x"]}), SchemaMismatchError),
    ],
)
def test_a_copy_that_does_not_fit_its_destination_writes_nothing(
    lake: Lake, client: Any, archive: pa.Table, error: type[Exception]
) -> None:
    """README: "Another partition_by than the dataset's is PartitionByMismatchError. All of
    it is checked before any file is written" (and a type that differs is refused). A
    ``copy_partition`` into a dataset partitioned otherwise, or whose column has another
    type, is refused with the right error today, but only at its commit, after its files
    were copied into the destination: each attempt leaves objects under the dataset's
    folder that nothing references (until vacuum, 7 days later)."""
    lake.append(
        "sales",
        pa.table({"year": [2024], "month": [1], "amount": [1.0]}),
        partition_by=["year", "month"],
    )
    columns = [c for c in ("year", "month") if c in archive.column_names]
    lake.append("archive", archive, partition_by=columns)
    before = data_objects(client, lake)
    with pytest.raises(error):
        lake.copy_partition("sales", "year=2024/month=1", to_dataset="archive")
    assert data_objects(client, lake) == before
