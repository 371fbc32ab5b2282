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
from lakelock.errors import InvalidNameError, StaleFenceError


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


#: (the column's values, the partition copied, a destination naming a value taken already,
#: spelt otherwise than the column spells it).
TAKEN_SPELT_OTHERWISE = {
    "decimal-path": (pa.array([1, 2], pa.decimal128(5, 2)), "price=2.00", "price=1"),
    "decimal-mapping": (pa.array([1, 2], pa.decimal128(5, 2)), "price=2.00", {"price": 1}),
    "timestamp-path": (
        pa.array([0, 86_400_000_000], pa.timestamp("us")),
        "price=1970-01-02T00%3A00%3A00",
        "price=1970-01-01T00:00:00.000000",
    ),
}


@pytest.mark.parametrize("case", TAKEN_SPELT_OTHERWISE.values(), ids=TAKEN_SPELT_OTHERWISE)
def test_a_copy_to_a_taken_value_spelt_otherwise_is_refused_not_a_second_partition(
    lake: Lake, client: Any, bucket: str, case: tuple[pa.Array, str, str | dict[str, object]]
) -> None:
    """``copy_partition`` to ``price=1`` of a dataset whose ``price`` is a ``decimal(5, 2)``,
    which spells that value ``price=1.00``, where a partition of that value exists already,
    is refused (``InvalidNameError``, naming the spelling) with nothing copied or committed,
    as a copy to ``price=1.00`` is (it exists). What a user would lose: the copy committed a
    second partition of the value 1.00 beside the first, so an overwrite of the rows of
    price 1.00 replaced one and left the copied rows in place, and a read naming that
    partition missed them, while a filter on the value returned both."""
    values, source, to_partition = case
    table = pa.table({"id": [1, 2], "price": values})
    lake.append("prices", table, partition_by=["price"])
    before = len(lake.history("prices"))
    with pytest.raises(InvalidNameError, match="spells that value"):
        lake.copy_partition("prices", source, to_partition=to_partition)
    assert len(lake.history("prices")) == before
    assert len(lake.registry.read().datasets["prices"].partitions) == 2
    assert len(objects_under(client, bucket, "datasets/prices/")) == 2
    assert lake.read("prices").sort_by("id").to_pydict() == table.to_pydict()


@pytest.mark.parametrize("rename", [False, True], ids=["copy", "rename"])
@pytest.mark.xfail(
    strict=True,
    raises=TypeError,
    reason="a move takes no fence=: its commit carries its own path-lock grant's fence, and "
    "a change carries one fence (Change.fence, the intent's 'fence', checked by the commit "
    "core's rules); carrying a lease's as well is a change of the intent format, of "
    "lakelock/_registry/_core/ and of the simulator's model",
)
def test_a_move_under_a_lease_taken_over_since_is_refused_and_copies_nothing(
    lake: Lake, client: Any, bucket: str, rename: bool
) -> None:
    """A lease holder's every other write takes ``fence=lease.fence`` and is refused once
    another holder took the lease over (``StaleFenceError``, nothing written); a partition
    copy or rename does not take one, so a holder paused past its expiry moves the partition
    after the new holder took over."""
    lake.append("sales", sales(), partition_by=["year", "month"])
    with lake.lease("mover", ttl=30, heartbeat=False, timeout=0) as first:
        stale = first.fence
    with lake.lease("mover", ttl=30, heartbeat=False, timeout=0) as second:
        assert second.token is not None
        assert stale.token < second.token
    move = lake.rename_partition if rename else lake.copy_partition
    before = len(lake.history("sales"))
    with pytest.raises(StaleFenceError):
        move("sales", "year=2024/month=2", to_partition="year=2023/month=2", fence=stale)  # type: ignore[call-arg]
    assert len(lake.history("sales")) == before
    assert objects_under(client, bucket, "datasets/sales/year=2023/") == []
