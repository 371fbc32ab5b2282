"""The Iceberg and Delta views of every version, and the Iceberg REST catalog, on
LocalStack's S3, an S3 implementation independent of the embedded endpoint (opt-in: ``python
-m pytest -m localstack``): test_mirror's history written there, mirrored, and read back by
pyiceberg and delta-rs straight from ``s3://`` and by pyiceberg through the catalog.

The ``localstack`` fixture serves LocalStack on plain HTTP (``http://127.0.0.1:PORT``; its
self-signed certificate is only for HTTPS on the same port), so the engines are given that
endpoint, LocalStack's test credentials and path-style addressing, and no TLS setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakelock import Lake
from lakelock._catalog import CatalogServer
from lakelock._retry import RetryPolicy
from tests._localstack import MARKS, LocalStack
from tests._support.catalog import serving
from tests._support.views import delta_options, history, iceberg_properties, rows

deltalake = pytest.importorskip("deltalake")
pyiceberg_table = pytest.importorskip("pyiceberg.table")
pyiceberg_rest = pytest.importorskip("pyiceberg.catalog.rest")

pytestmark = list(MARKS)

#: LocalStack accepts any keys; these are the ones its documentation and the fixture use.
KEY, SECRET = "test", "test"


@pytest.fixture
def lake(localstack: LocalStack, request: pytest.FixtureRequest) -> Lake:
    """A lake under a prefix of a new LocalStack bucket (a prefix, as in test_mirror, so the
    views' ``s3://`` locations carry one)."""
    bucket = localstack.new_bucket(request.node.name)
    retry = RetryPolicy(max_attempts=100, initial_backoff=0.005, max_backoff=0.1)
    return Lake(bucket, prefix="lake", s3=localstack.client(), retry=retry)


@pytest.fixture
def catalog_server(lake: Lake) -> Iterator[CatalogServer]:
    """``lakelock catalog`` over ``lake`` (namespace ``lake``), in this process."""
    with serving(lake) as server:
        yield server


def assert_reads(got: pa.Table, expected: pa.Table, where: tuple[Any, ...]) -> None:
    """``got`` has lakelock's columns, the partition column typed as lakelock has it (rows()
    casts, so a string day would pass it), and exactly lakelock's rows."""
    assert sorted(got.column_names) == sorted(expected.column_names), where
    assert got.schema.field("day").type == pa.date32(), where
    assert rows(got, expected.schema) == rows(expected, expected.schema), where


def test_views_and_catalog_read_every_version_on_localstack(
    localstack: LocalStack, lake: Lake, catalog_server: CatalogServer
) -> None:
    """After appends, an added column, an overwrite, a partition delete, a compaction and a
    restore written to LocalStack, ``lake.mirror`` writes both views there; pyiceberg
    (StaticTable from the metadata.json URI, by snapshot id) and delta-rs (by version) read
    exactly lakelock's rows at every version, the added column null in the files written
    before it; and pyiceberg's RestCatalog, through the catalog served over the same lake,
    loads the table with one snapshot per version, each reading as lakelock reads it."""
    versions = history(lake)
    assert len(versions) == 8
    result = lake.mirror("events", formats=("iceberg", "delta"))
    assert result.version == versions[-1]
    assert result.iceberg is not None
    assert result.iceberg.startswith(f"s3://{lake.bucket}/lake/")
    assert result.delta == f"s3://{lake.bucket}/lake/datasets/events"

    table = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(localstack.url, KEY, SECRET, path_style=True)
    )
    assert [s.snapshot_id for s in table.snapshots()] == versions
    assert [s.summary["lakelock.version"] for s in table.snapshots()] == [str(v) for v in versions]
    for number, version in enumerate(versions):
        expected = lake.read("events", version=version)
        delta = deltalake.DeltaTable(
            result.delta,
            version=number,
            storage_options=delta_options(localstack.url, KEY, SECRET, path_style=True),
        )
        assert delta.version() == number
        reads = {
            "pyiceberg": table.scan(snapshot_id=version).to_arrow(),
            "delta-rs": delta.to_pyarrow_table(),
        }
        for engine, got in reads.items():
            assert_reads(got, expected, (engine, version))

    # The added column (versions[2]): null in the ten rows of the files written before it, in
    # lakelock and in both engines alike; the restore (the newest) goes back to before it.
    with_score = versions[2]
    assert (
        lake.read("events", version=with_score)
        .filter(pc.field("id") < 10)
        .column("score")
        .null_count
        == 10
    )
    old_files = pc.field("id") < 10
    delta_then = deltalake.DeltaTable(
        result.delta,
        version=2,
        storage_options=delta_options(localstack.url, KEY, SECRET, path_style=True),
    ).to_pyarrow_table()
    for engine, got in {
        "pyiceberg": table.scan(snapshot_id=with_score).to_arrow(),
        "delta-rs": delta_then,
    }.items():
        score = got.filter(old_files).column("score")
        assert (len(score), score.null_count) == (10, 10), engine
        assert got.filter(~old_files).column("score").null_count == 0, engine
    assert "score" not in lake.read("events").column_names

    # The catalog over the same lake: its defaults carry LocalStack's endpoint, so pyiceberg
    # needs only keys of its own (the catalog hands out none).
    catalog = pyiceberg_rest.RestCatalog(
        "lakelock",
        uri=catalog_server.url,
        **{"s3.access-key-id": KEY, "s3.secret-access-key": SECRET},
    )
    assert catalog.list_tables("lake") == [("lake", "events")]
    loaded = catalog.load_table("lake.events")
    assert loaded.metadata_location == result.iceberg  # mirrored already: nothing new written
    assert [int(s.summary["lakelock.version"]) for s in loaded.metadata.snapshots] == versions
    assert_reads(loaded.scan().to_arrow(), lake.read("events"), ("catalog", "newest"))
    for snapshot in loaded.metadata.snapshots:
        version = int(snapshot.summary["lakelock.version"])
        got = loaded.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        assert_reads(got, lake.read("events", version=version), ("catalog", version))
