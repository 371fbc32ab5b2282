"""Promises of ``lakelock catalog`` that engines writing through it can break today."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog

ENGINE = {"s3.access-key-id": "engine", "s3.secret-access-key": "x"}
EVENTS = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
)
BY_KIND = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "kind"))


@pytest.fixture
def server(lake: Lake) -> Iterator[CatalogServer]:
    started = CatalogServer(LakeCatalog(lake), port=0).start()
    yield started
    started.close()


def test_an_engine_adds_a_column_after_a_restore_dropped_one(
    server: CatalogServer, lake: Lake
) -> None:
    """README: through the catalog "an added column is one ordinary lakelock commit". After
    ``lake.restore`` went back to a version before a column was added, every add-column an
    engine sends is a 400 today ("column 'x' has field id 4 where lakelock's is 3: commit
    the schema change alone, reload the table" - it is alone, and reloading changes
    nothing): the view's last-column-id keeps the dropped column's id, lakelock's ids are
    positions. The engine can never evolve that table's schema again."""
    catalog = RestCatalog("r", uri=server.url, **ENGINE)
    table = catalog.create_table("lake.events", EVENTS)
    table.append(pa.table({"kind": pa.array(["a"]), "n": pa.array([1], pa.int64())}))
    before = lake.registry.read().datasets["events"].updated_version
    with table.update_schema() as update:
        update.add_column("score", LongType())
    lake.restore("events", version=before)
    table = catalog.load_table("lake.events")
    with table.update_schema() as update:
        update.add_column("x", StringType())
    assert lake.read("events").column_names == ["kind", "n", "x"]


@pytest.mark.parametrize("kind", ["a b", "a+b", "é", None])
def test_an_engine_appends_rows_whose_partition_value_lakelock_holds(
    server: CatalogServer, lake: Lake, kind: str | None
) -> None:
    """README: what a lakelock dataset cannot hold (non-identity transforms, delete files,
    renamed or retyped columns) is a 400 naming it; ``lake.append`` holds partition values
    with a space, a plus, a non-ASCII letter or a null. pyiceberg's append of such a row is
    refused 400 today ("not where lakelock keeps a file of its partition": pyiceberg spells
    the folder kind=a+b, kind=%C3%A9, kind=null), and the engine cannot spell it otherwise:
    an engine cannot write these rows, nor (copy-on-write) delete from such partitions."""
    table = RestCatalog("r", uri=server.url, **ENGINE).create_table(
        "lake.events", EVENTS, partition_spec=BY_KIND
    )
    table.append(pa.table({"kind": pa.array([kind], pa.string()), "n": pa.array([1], pa.int64())}))
    assert lake.read("events").to_pylist() == [{"kind": kind, "n": 1}]
