"""Adversarial tests of ``lake.scan``'s promise to the engines (README, "Engines": the scan
hands one version's files to the engine) when a dataset holds files whose columns are
stored narrower than the dataset's, which FORMAT.md ("File statistics") says a commit
accepts, since every reader casts them: a worker's pandas frame with ``int32`` or
``float32`` columns, committed with ``registry.commit``."""

from __future__ import annotations

import datetime
import decimal
from typing import Any, get_args

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import InvalidNameError


@pytest.mark.parametrize(
    ("wide", "narrow", "value"),
    [
        (pa.int64(), pa.int32(), 7),
        (pa.int64(), pa.int8(), 7),
        (pa.float64(), pa.float32(), 1.5),
        (pa.decimal128(10, 2), pa.decimal128(5, 2), decimal.Decimal("1.50")),
        (pa.time64("us"), pa.time32("s"), datetime.time(1)),
    ],
    ids=["int32", "int8", "float32", "decimal", "time32"],
)
def test_polars_reads_a_file_stored_narrower_than_the_dataset(
    lake: Lake, wide: pa.DataType, narrow: pa.DataType, value: object
) -> None:
    """``events`` holds ``v`` as a wide type; a worker's file stores it narrower, which the
    commit accepts (every value fits). ``scan.to_polars()`` must read both files, ``v`` in
    the dataset's type, as pyarrow and DuckDB do. What a Polars user would have lost: every
    read of the dataset, ``SchemaError: data type mismatch for column v``, from the moment
    one worker's frame carried a narrower type."""
    pl = pytest.importorskip("polars")
    lake.append("events", pa.table({"id": [1], "v": pa.array([value], wide)}))
    worker = pa.table({"id": [2], "v": pa.array([value], narrow)})
    lake.registry.commit("events", add=lake.config.open().write("events", worker))
    frame = lake.scan("events").to_polars().sort("id").collect()
    assert frame["id"].to_list() == [1, 2]
    assert frame["v"].to_list() == [value, value]
    assert frame.schema["v"] == pl.from_arrow(pa.table({"v": pa.array([], wide)})).schema["v"]


def test_a_table_with_an_unnamed_column_is_refused_before_it_is_written(
    lake: Lake, client: Any, bucket: str
) -> None:
    """A pandas frame read from a CSV whose header has a blank cell carries a column named
    ``""``. Appending it must be refused (``InvalidNameError``), nothing written: DuckDB
    (``zero-length delimited identifier``) and Polars (``unable to find column ""``) cannot
    read such a column, so what a user would have lost is every engine read of the dataset
    but pyarrow's, for good (a column is never dropped)."""
    table = pa.table({"": [1], "id": [2]})
    with pytest.raises(InvalidNameError, match="name"):
        lake.append("events", table)
    assert "events" not in lake.registry.read().datasets
    assert client.list_objects_v2(Bucket=bucket, Prefix="datasets/")["KeyCount"] == 0


def test_a_declared_schema_with_an_unnamed_column_is_refused(lake: Lake) -> None:
    """A driver declares the schema of its workers' files from a CSV header with a blank cell
    (``registry.commit(..., schema=...)``). It must be refused as a table with that column
    is (``InvalidNameError``), no dataset made: what a user would have lost is a dataset made
    with an unnamed column, which DuckDB and Polars can never read, for good."""
    schema = pa.schema([("", pa.int64()), ("id", pa.int64())])
    with pytest.raises(InvalidNameError, match="name"):
        lake.registry.commit("events", schema=schema, commit_id="load-1")
    assert "events" not in lake.registry.read().datasets


@pytest.mark.parametrize("unit", ["s", "ms"])
def test_polars_reads_a_timestamp_stored_in_a_coarser_unit(lake: Lake, unit: str) -> None:
    """``events`` holds ``at`` in microseconds; a worker's file stores it in seconds or
    milliseconds (pandas' ``datetime64[ms]``), which the commit accepts and pyarrow and
    DuckDB widen. ``scan.to_polars()`` must read both files, ``at`` in microseconds, where
    the installed Polars can widen at a scan. What a Polars user would have lost: every
    read of the dataset, ``SchemaError: data type mismatch for column at``."""
    pl = pytest.importorskip("polars")
    cast_options = pytest.importorskip("polars.io.scan_options.cast_options")
    if "upcast" not in get_args(cast_options.DatetimeCastOption):
        pytest.skip("this Polars does not widen a timestamp at a scan")
    noon = datetime.datetime(2026, 11, 30, 12, 0, 0)
    lake.append("events", pa.table({"id": [1], "at": pa.array([noon], pa.timestamp("us"))}))
    worker = pa.table({"id": [2], "at": pa.array([noon], pa.timestamp(unit))})
    lake.registry.commit("events", add=lake.config.open().write("events", worker))
    frame = lake.scan("events").to_polars().sort("id").collect()
    assert frame["at"].to_list() == [noon, noon]
    assert frame.schema["at"] == pl.Datetime("us")
