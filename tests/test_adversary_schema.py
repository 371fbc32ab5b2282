"""Adversarial tests of "schemas change only when asked" (README, "Write"): two processes
merging a column into one dataset, each from a view of the registry the other's merge has
made stale. Each ``Lake`` stands for one process."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import SchemaMismatchError
from tests._support import FAST_RETRY


def rows(ids: list[int], **extra: pa.Array) -> pa.Table:
    return pa.table({"id": ids, "day": [1] * len(ids), **extra})


@pytest.mark.parametrize(
    "theirs",
    [
        pytest.param(pa.array([7], pa.int64()), id="same-name-other-type"),
        pytest.param(None, id="same-name-ignoring-case"),
    ],
)
def test_a_merge_from_a_stale_view_cannot_retype_or_shadow_a_column_merged_meanwhile(
    lake: Lake, client: Any, bucket: str, theirs: pa.Array | None
) -> None:
    """Two processes know ``sales`` without a ``note`` column. One merges ``note`` as a
    string; the other, whose view predates that merge (its early check passes), merges
    ``note`` as an integer, or ``NOTE`` (a name that clashes ignoring case, which engines
    resolve to one column). The second must be refused with SchemaMismatchError and nothing
    of it committed: a type never changes, names are unique ignoring case. What a user
    would lose: a dataset whose files disagree on a column's type, or that DuckDB, Spark and
    the Iceberg and Delta views read with wrong values."""
    lake.append("sales", rows([1]), partition_by=["day"])
    stale = Lake(bucket, s3=client, retry=FAST_RETRY)
    stale.read("sales")  # its view of the registry: no ``note`` yet
    lake.append("sales", rows([2], note=pa.array(["x"])), partition_by=["day"], schema_mode="merge")
    late = rows([3], NOTE=pa.array(["y"])) if theirs is None else rows([3], note=theirs)
    with pytest.raises(SchemaMismatchError):  # its file is written: the commit refuses it
        stale.append("sales", late, partition_by=["day"], schema_mode="merge")
    fresh = Lake(bucket, s3=client, retry=FAST_RETRY)
    table = fresh.read("sales").sort_by("id")
    assert sorted(table.schema.names) == ["day", "id", "note"]
    assert table.schema.field("note").type == pa.string()
    assert table["id"].to_pylist() == [1, 2]
