"""Adversarial tests of reading no columns (README, "Read" and "Engines": ``columns=``).
``columns=[]`` is how a pyarrow dataset is asked for a row count without reading data; a
reader built on lakelock must not answer it with a count of 0."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import InvalidArgumentError


@pytest.mark.parametrize("partition_by", [["day"], []], ids=["partitioned", "flat"])
def test_reading_no_columns_is_refused_rather_than_counted_as_no_rows(
    lake: Lake, partition_by: list[str]
) -> None:
    """``lake.read(..., columns=[])`` and ``lake.scan(..., columns=[])`` of a dataset of three
    rows are refused (``InvalidArgumentError``) instead of returning no rows. What a user
    would lose: a row count taken by reading no columns (``read(...).num_rows``, Polars'
    ``len()``, ``len(to_pandas())``) came back 0 for a dataset of three rows, with no error."""
    lake.append("sales", pa.table({"id": [1, 2, 3], "day": [1, 2, 2]}), partition_by=partition_by)
    with pytest.raises(InvalidArgumentError):
        lake.read("sales", columns=[])
    with pytest.raises(InvalidArgumentError):
        lake.scan("sales", columns=[])
    assert lake.read("sales", columns=["id"]).num_rows == 3


@pytest.mark.parametrize("partition", ["day=1", {"day": 1}], ids=["path", "mapping"])
def test_one_partition_given_alone_is_refused_as_such(lake: Lake, partition: object) -> None:
    """``lake.read("sales", partitions="day=1")`` (one partition, not a list of them) is
    refused saying a list is wanted, as ``delete`` and ``compact`` refuse it. What a user
    would lose: the path was read as its characters and the error blamed a segment ``'d'``;
    a mapping was read as its column names."""
    lake.append("sales", pa.table({"id": [1, 2], "day": [1, 2]}), partition_by=["day"])
    with pytest.raises(InvalidArgumentError) as refused:
        lake.read("sales", partitions=partition)  # type: ignore[arg-type]
    assert refused.value.value == partition  # the argument as given, not a part of it
