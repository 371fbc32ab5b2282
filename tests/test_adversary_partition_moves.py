"""Adversarial tests of partition copies and renames given a destination the dataset cannot
hold (README, "Locks, leases and the bucket policy"; ``lakelock/_partitions.py``: a move
refused for what it is copies nothing). The destination partition is the user's string: a
typo in a column's value or name must be bad input, refused before a byte is copied, never a
commit that breaks every later read."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import InvalidNameError


def sales() -> pa.Table:
    return pa.table({"id": [1, 2], "year": [2024, 2024], "month": [1, 2]})


def objects_under(client: Any, bucket: str, prefix: str) -> list[str]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_a_copy_to_a_partition_value_its_column_cannot_hold_is_refused_before_copying(
    lake: Lake, client: Any, bucket: str
) -> None:
    """``copy_partition`` to ``year=abc`` of a dataset whose ``year`` is an integer is a
    typo, refused (``InvalidNameError``) with nothing copied or committed. What a user would
    lose: the copy committed a partition no reader can parse, so every read and scan of the
    whole dataset failed from then on, until someone deleted that partition by hand."""
    lake.append("sales", sales(), partition_by=["year", "month"])
    before = len(lake.history("sales"))
    with pytest.raises(InvalidNameError):
        lake.copy_partition("sales", "year=2024/month=2", to_partition="year=abc/month=2")
    assert len(lake.history("sales")) == before
    assert objects_under(client, bucket, "datasets/sales/year=abc/") == []
    assert lake.read("sales").sort_by("id").to_pydict() == sales().to_pydict()


@pytest.mark.parametrize("to_partition", ["month=1/year=2023", "yr=2023/month=1"])
def test_a_rename_to_a_partition_naming_other_columns_is_bad_input_before_copying(
    lake: Lake, client: Any, bucket: str, to_partition: str
) -> None:
    """``rename_partition`` to a path naming the dataset's partition columns in another
    order, or misspelt, is refused as bad input (``InvalidNameError``) before any file is
    copied. What a user would lose: the rename copied every file, then the commit refused
    it as a ``CommitConflictError``, which says "retry": a pipeline retrying conflicts copied
    the partition again on every attempt, and never succeeded."""
    lake.append("sales", sales(), partition_by=["year", "month"])
    before = len(lake.history("sales"))
    with pytest.raises(InvalidNameError):
        lake.rename_partition("sales", "year=2024/month=1", to_partition=to_partition)
    assert len(lake.history("sales")) == before
    top = to_partition.split("/", 1)[0]
    assert objects_under(client, bucket, f"datasets/sales/{top}/") == []
    assert lake.read("sales").sort_by("id").to_pydict() == sales().to_pydict()
