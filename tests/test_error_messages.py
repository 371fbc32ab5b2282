"""Each mistake a user makes gets one clear line, in the user's terms: no internal column
names, no 1,000-character values, no ``'*'`` for a dataset."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakelock import Lake
from lakelock.errors import (
    DatasetNotFoundError,
    InvalidNameError,
    PartitionByMismatchError,
    VersionNotFoundError,
)


def rows(year: object = 2024) -> pa.Table:
    return pa.table({"id": [1], "year": [year]})


def one_line(error: BaseException, limit: int = 200) -> str:
    text = str(error)
    assert "\n" not in text
    assert len(text) <= limit, text
    return text


def test_another_partition_by_names_both(lake: Lake) -> None:
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(PartitionByMismatchError) as info:
        lake.append("events", rows(), partition_by=["id"])
    text = one_line(info.value)
    assert "partitioned by ['year']" in text
    assert "partition_by=['id']" in text


def test_delete_where_on_a_missing_column(lake: Lake) -> None:
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(InvalidNameError) as info:
        lake.delete("events", where=pc.field("nope") < 3)
    text = one_line(info.value)
    assert "__lakelock" not in text
    assert "'nope' is not one of them" in text
    assert "['year']" in text


def test_a_version_that_does_not_exist_names_the_dataset(lake: Lake) -> None:
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(VersionNotFoundError) as info:
        lake.read("events", version=999)
    text = one_line(info.value)
    assert "'*'" not in text
    assert "dataset 'events'" in text
    assert "version 999" in text
    assert "at version 1" in text
    with pytest.raises(VersionNotFoundError, match="registry version 999 does not exist"):
        lake.registry.read(version=999)


def test_a_long_partition_value_is_quoted_short(lake: Lake) -> None:
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(InvalidNameError) as info:
        lake.append("other", rows("x" * 1200), partition_by=["year"])
    assert "characters)" in one_line(info.value)
    with pytest.raises(DatasetNotFoundError) as missing:
        lake.read("events", partitions=["year=" + "x" * 1200])
    assert "(1,207 characters) of dataset 'events'" in one_line(missing.value)
