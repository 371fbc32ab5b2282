"""Dataset properties from the Lake: set and removed in their own commit, or with the data
they describe; kept per version; bad ones refused before anything is written."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._properties import MAX_NAME_BYTES, MAX_PROPERTIES, MAX_VALUE_BYTES
from lakelock._registry._builder import CommitBuilder
from lakelock.errors import (
    CommitIdReusedError,
    DatasetNotFoundError,
    InvalidArgumentError,
)


def rows() -> pa.Table:
    return pa.table({"id": [1, 2]})


def properties(lake: Lake, version: int | None = None) -> dict[str, str]:
    return dict(lake.registry.dataset("sales", version=version).properties)


def test_set_and_remove_properties(lake: Lake) -> None:
    lake.append("sales", rows(), properties={"source": "crm"})
    result = lake.set_properties("sales", {"owner": "etl"}, commit_id="p1")
    assert properties(lake) == {"source": "crm", "owner": "etl"}
    assert lake.set_properties("sales", {"owner": "etl"}, commit_id="p1").already_committed
    with pytest.raises(CommitIdReusedError):
        lake.set_properties("sales", {"owner": "ops"}, commit_id="p1")
    lake.set_properties("sales", {"source": None})
    assert properties(lake) == {"owner": "etl"}
    assert properties(lake, version=1) == {"source": "crm"}  # each version keeps its own
    assert lake.history("sales")[1].operation == "properties"
    assert result.version == 2


def test_bad_properties_are_refused(lake: Lake) -> None:
    with pytest.raises(DatasetNotFoundError):
        lake.set_properties("sales", {"owner": "etl"})
    lake.append("sales", rows())
    for bad in ({"owner": 7}, {"": "x"}, {}):
        with pytest.raises(InvalidArgumentError):
            lake.set_properties("sales", bad)  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError):
        lake.append("sales", rows(), properties={"owner": 7})  # type: ignore[dict-item]
    assert lake.registry.read().version == 1


def test_properties_past_a_limit_are_refused_naming_it_and_nothing_is_written(
    lake: Lake,
) -> None:
    """A name over 255 bytes, a value over 512,000 bytes (AWS Glue's limits), more than 1,000
    properties, or more than 1 MiB of them together (a dataset's, counting those it holds)
    is ``InvalidArgumentError`` naming the limit, from ``set_properties`` and from
    ``append(properties=)``; no version is made and no file written."""
    lake.append("sales", rows())
    half = "v" * (MAX_VALUE_BYTES // 2 + 20_000)  # two with a full one: over 1 MiB
    lake.set_properties("sales", {"a": "v" * MAX_VALUE_BYTES, "b": half})
    version = lake.registry.read().version
    cases: list[tuple[dict[str, str | None], str]] = [
        ({"n" * (MAX_NAME_BYTES + 1): "x"}, "255 bytes"),
        ({"é" * 128: "x"}, "255 bytes"),  # 256 bytes of UTF-8
        ({"big": "v" * (MAX_VALUE_BYTES + 1)}, "512,000 bytes"),
        ({f"k{i}": "x" for i in range(MAX_PROPERTIES + 1)}, "at most 1,000 properties"),
        ({"c": half}, "1,048,576 bytes"),  # with the two held: over 1 MiB
    ]
    for bad, limit in cases:
        with pytest.raises(InvalidArgumentError, match=limit):
            lake.set_properties("sales", bad)
        with pytest.raises(InvalidArgumentError, match=limit):
            lake.append("sales", rows(), properties=bad)
    assert lake.registry.read().version == version
    assert len(lake.registry.files("sales")) == 1
    lake.set_properties("sales", {"a": None, "c": half})  # within the limits once "a" goes
    assert sorted(properties(lake)) == ["b", "c"]
    many = {f"k{i}": "x" for i in range(MAX_PROPERTIES - 2)}
    lake.set_properties("sales", many)  # 1,000 properties: the most a dataset has
    with pytest.raises(InvalidArgumentError, match="a dataset has at most 1,000 properties"):
        lake.set_properties("sales", {"one-more": "x"})


def test_a_dataset_over_the_limits_already_may_shrink(lake: Lake) -> None:
    """Properties a lakelock without limits recorded (here: 1,002 committed past the
    builder's check) stay readable, and a change that does not add to them is taken (a
    removal, a value replaced by a shorter one), though 1,001 is still over; one more
    property is refused."""
    lake.append("sales", rows())
    commit = CommitBuilder(lake.registry, "sales", "properties", properties={"seed": "x"})
    many = {f"k{i}": "x" for i in range(MAX_PROPERTIES + 2)}
    commit.change = dataclasses.replace(commit.change, properties=many)
    commit.commit()
    assert len(properties(lake)) == MAX_PROPERTIES + 2
    lake.set_properties("sales", {"k0": None, "k1": ""})
    assert len(properties(lake)) == MAX_PROPERTIES + 1
    with pytest.raises(InvalidArgumentError, match="at most 1,000 properties"):
        lake.set_properties("sales", {"one-more": "x"})
