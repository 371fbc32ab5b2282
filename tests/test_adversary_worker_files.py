"""Adversarial tests of a cluster job's commit of its workers' files (README, "Engines": the
workers write with ``config.open().write`` and the driver commits once with
``registry.commit``): a worker whose rows carry a column in another type than the
dataset's, as a job reading a CSV without its schema would."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import SchemaMismatchError


@pytest.mark.parametrize("id_type", [pa.string(), pa.float64()], ids=["string", "double"])
def test_a_workers_file_in_a_type_the_dataset_cannot_hold_is_refused(
    lake: Lake, id_type: pa.DataType
) -> None:
    """``events`` holds ``id`` as int64. A job's workers write their shares, one of them
    with ``id`` as a string (or a double), and the driver commits them all. The commit must
    be refused (``SchemaMismatchError`` naming the file, the column and both types),
    nothing committed: lakelock reads every file cast to the dataset's schema, so what a
    user would have lost is the dataset, every later read of it failing with pyarrow's
    untyped ``ArrowInvalid`` until an earlier version is restored by hand. (Before, the
    commit landed.)"""
    lake.append("events", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    config = lake.config
    good = config.open().write("events", pa.table({"id": [2], "day": [2]}), partition_by=["day"])
    shares = pa.table({"id": pa.array(["3"]).cast(id_type), "day": [3]})
    bad = config.open().write("events", shares, partition_by=["day"])
    with pytest.raises(SchemaMismatchError, match=f"column 'id' as {id_type}") as refused:
        lake.registry.commit("events", add=good + bad, commit_id="load-3")
    assert refused.value.dataset == "events"
    assert lake.read("events")["id"].to_pylist() == [1]
    assert [h.operation for h in lake.history("events")] == ["append"]


def test_a_workers_file_in_a_type_the_dataset_holds_is_committed(lake: Lake) -> None:
    """A worker's ``id`` as int32 where the dataset's is int64 (every value fits: the
    reader widens it) is committed, and reads as the dataset's type."""
    lake.append("events", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    narrow = pa.table({"id": pa.array([2], pa.int32()), "day": [2]})
    files = lake.config.open().write("events", narrow, partition_by=["day"])
    lake.registry.commit("events", add=files, commit_id="load-2")
    assert sorted(lake.read("events")["id"].to_pylist()) == [1, 2]
