"""File statistics: recorded from the footer when lakelock writes a file, kept in manifests
(old entries without them still parse), and used by ``lake.scan`` to skip files whose bounds
rule a filter out, counted in GETs at the endpoint."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakelock import Lake
from lakelock._datafile import DataFile
from lakelock._registry._manifest import Manifest, parse_manifest, serialize_manifest
from lakelock._stats import (
    TRUNCATE,
    ColumnStats,
    FileStats,
    footer_stats,
    guarantee,
    stats_from_json,
    truncate_upper,
)
from lakelock.errors import RegistryCorruptError
from lakelock.testing import S3Endpoint


def stats_of(table: pa.Table, **options: Any) -> FileStats:
    footer: list[Any] = []
    pq.write_table(table, io.BytesIO(), metadata_collector=footer, **options)
    return footer_stats(footer[0], table)


def test_footer_stats_per_type() -> None:
    """Null counts and canonical bounds per type: timestamps in microseconds (the upper bound
    rounded up), dates in days, floats with their NaN count, nested columns left out."""
    table = pa.table(
        {
            "i": pa.array([3, None, -7], pa.int32()),
            "f": pa.array([1.5, float("nan"), -2.0]),
            "s": pa.array(["b", "a", None]).dictionary_encode(),
            "ts": pa.array([1_500, 2_001, 999], pa.timestamp("ns", "UTC")),
            "d": pa.array([10, 12, 11], pa.date32()),
            "b": pa.array([True, False, True]),
            "l": pa.array([[1], [], None]),
        }
    )
    stats = stats_of(table)
    assert stats.column("l") is None
    assert stats.column("i") == ColumnStats("i", 1, None, -7, 3)
    assert stats.column("f") == ColumnStats("f", 0, 1, -2.0, 1.5)
    assert stats.column("s") == ColumnStats("s", 1, None, "a", "b")
    assert stats.column("ts") == ColumnStats("ts", 0, None, 0, 3)
    assert stats.column("d") == ColumnStats("d", 0, None, 10, 12)
    assert stats.column("b") == ColumnStats("b", 0, None, False, True)


def test_row_groups_combine_and_a_missing_bound_drops_it() -> None:
    """Bounds span every row group; a row group of nulls only does not erase them."""
    table = pa.table({"x": pa.array([5, 9, None, None, 1, 2], pa.int64())})
    stats = stats_of(table, row_group_size=2)
    assert stats.column("x") == ColumnStats("x", 2, None, 1, 9)


def test_string_bounds_truncate_as_iceberg_does() -> None:
    """Long strings keep 16 characters; the upper bound's last character goes up by one (and
    past one that cannot, to the one before); none when nothing can be incremented."""
    long = "a" * 20
    stats = stats_of(pa.table({"s": [long, "a" * 17]}))
    column = stats.column("s")
    assert column is not None
    assert column.min == "a" * TRUNCATE
    assert column.max == "a" * (TRUNCATE - 1) + "b"
    assert truncate_upper("x" * (TRUNCATE - 1) + "\U0010ffff" + "zz") == "x" * (TRUNCATE - 2) + "y"
    assert truncate_upper("\U0010ffff" * (TRUNCATE + 1)) is None
    assert truncate_upper("\ud7ff" * (TRUNCATE + 1)) == "\ud7ff" * (TRUNCATE - 1) + "\ue000"


def test_statistics_the_footer_lacks_are_taken_from_the_rows() -> None:
    """A string over 4 KiB as a row group's bound (the parquet writer then keeps no bounds
    for the row group) still bounds the file, taken from the rows written; a column with no
    type (all null: parquet keeps no statistics for it) counts every row null. Without them
    a file's statistics would depend on which rows share it, and so would the digest of a
    commit of worker-written files (docs/FORMAT.md, "Commit ids")."""
    huge = "q" * 5000
    stats = stats_of(pa.table({"s": pa.array([huge, "b", None]), "n": pa.nulls(3)}))
    bound = "q" * (TRUNCATE - 1) + "r"
    assert stats.column("s") == ColumnStats("s", 1, None, "b", bound)
    assert stats.column("n") == ColumnStats("n", 3)
    words = pa.array([huge, "b"]).dictionary_encode()
    assert stats_of(pa.table({"s": words})).column("s") == ColumnStats("s", 0, None, "b", bound)


def test_guarantee_is_sound_for_nulls_and_nans() -> None:
    """Columns with nulls or NaNs guarantee nothing (a filter can be true on them); an
    all-null column guarantees is_null."""
    schema = pa.schema([("x", pa.int64()), ("f", pa.float64()), ("n", pa.string())])
    stats = FileStats(
        (
            ColumnStats("x", 1, None, 1, 5),
            ColumnStats("f", 0, 1, 1.0, 2.0),
            ColumnStats("n", 3, None),
        )
    )
    assert guarantee(stats, schema, 3).equals(pc.scalar(True) & pc.field("n").is_null())


def test_manifest_entries_keep_stats_and_old_entries_parse() -> None:
    """Stats round-trip through a manifest; an entry without them (older lakelock) parses
    with none; malformed stats are corruption."""
    table = pa.table({"x": [1, 2]})
    file = DataFile("d", "datasets/d/f.parquet", "", 10, 2, "sha256:00", "e", "w", stats_of(table))
    body = serialize_manifest(Manifest("d", "", (file,)))
    assert parse_manifest(body).files[0] == file
    raw = orjson.loads(body)
    del raw["files"][0]["stats"]
    assert parse_manifest(orjson.dumps(raw)).files[0].stats is None
    raw["files"][0]["stats"] = {"columns": {"x": {"nulls": 0, "min": [1]}}}
    with pytest.raises(RegistryCorruptError):
        parse_manifest(orjson.dumps(raw))
    with pytest.raises(ValueError, match="nulls"):
        stats_from_json({"columns": {"x": {"nulls": -1}}})


def test_lake_writes_stats_and_scan_skips_files_by_bounds(lake: Lake, s3: S3Endpoint) -> None:
    """Four appends of disjoint id ranges into one partition: a filter on ``id`` (not a
    partition column) fetches only the file whose bounds admit it, counted at the endpoint;
    the rows are those of a full read."""
    for batch in range(4):
        ids = list(range(batch * 100, batch * 100 + 100))
        lake.append(
            "events",
            pa.table({"id": ids, "kind": ["k"] * 100, "day": [1] * 100}),
            partition_by=["day"],
        )
    files = lake.registry.files("events")
    assert {f.stats.column("id") for f in files if f.stats is not None} == {
        ColumnStats("id", 0, None, b * 100, b * 100 + 99) for b in range(4)
    }
    everything = lake.read("events")
    wanted = pc.field("id") == 250
    scan = lake.scan("events", filter=wanted)
    assert len(scan.files()) == 1
    s3.reset_stats()
    got = scan.to_arrow()
    data_gets = s3.areas().get("GetObject datasets", 0)
    assert data_gets == 1
    assert got.equals(everything.filter(wanted))
    # A filter no bound admits reads nothing; one all bounds admit reads all.
    assert lake.scan("events", filter=pc.field("id") > 1000).files() == []
    assert len(lake.scan("events", filter=pc.field("id") >= 0).files()) == 4
    assert lake.scan("events", filter=pc.field("kind") == "zz").files() == []


def test_files_without_stats_are_never_skipped_by_them(lake: Lake) -> None:
    """A file committed without statistics (registered from elsewhere) is read for any
    filter on a data column."""
    written = lake.write("events", pa.table({"id": [1, 2]}))
    lake.registry.commit("events", add=[replace(f, stats=None) for f in written])
    assert lake.scan("events", filter=pc.field("id") == 99).files() == lake.registry.files("events")
