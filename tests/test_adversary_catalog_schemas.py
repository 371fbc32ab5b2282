"""Adversarial tests of the schemas an engine gives the Iceberg REST catalog (README,
"Iceberg and Delta views; the Iceberg REST catalog": a stale commit is a 409 the engine
retries; "Write": column names are non-empty and unique ignoring case). pyiceberg's
``RestCatalog`` talks HTTP to a catalog started in-process over the embedded endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, StructType

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog
from lakelock.testing import S3Endpoint
from tests._support.catalog import ENGINE


@pytest.fixture
def engine(lake: Lake, s3: S3Endpoint) -> Iterator[Any]:
    """pyiceberg's REST catalog client on a catalog served over the test lake."""
    running = CatalogServer(LakeCatalog(lake), port=0).start()
    yield RestCatalog("lakelock", uri=running.url, **ENGINE, **{"s3.endpoint": s3.url})
    running.close()


@pytest.mark.parametrize(
    "names", [("id", ""), ("id", "ID")], ids=["unnamed", "one-name-ignoring-case"]
)
def test_a_table_created_with_columns_no_dataset_can_hold_is_a_bad_request(
    engine: Any, lake: Lake, names: tuple[str, str]
) -> None:
    """An engine creating a table with a column named ``""``, or with two columns whose
    names differ only in case, hears 400 (``BadRequestError``) and no dataset is made. What
    a user would lose: the unnamed column was created and stays in the dataset's schema for
    good, so DuckDB could never scan the table; the clashing names were a 409, which
    pyiceberg reports for a create as "table already exists" while no table does."""
    schema = Schema(*(NestedField(i, n, LongType(), required=False) for i, n in enumerate(names)))
    with pytest.raises(BadRequestError):
        engine.create_table("lake.events", schema=schema)
    assert "events" not in lake.registry.read().datasets


def test_a_column_added_under_an_existing_name_in_another_case_is_a_bad_request(
    engine: Any, lake: Lake
) -> None:
    """An engine adding column ``KIND`` to a table that has ``kind`` hears 400, not the 409
    that tells it to refresh and retry a commit that can never succeed; the table keeps its
    columns. What a user would lose: Spark and pyiceberg retried the schema change as if
    another writer had raced it, then failed with a "commit failed, retry" error that hides
    the cause."""
    schema = Schema(NestedField(1, "kind", StringType(), required=False))
    table = engine.create_table("lake.events", schema=schema)
    with pytest.raises(BadRequestError):
        table.update_schema().add_column("KIND", LongType()).commit()
    dataset = lake.registry.read().datasets["events"]
    assert dataset.schema is not None
    assert dataset.schema.names == ["kind"]


def test_a_table_created_with_no_columns_takes_columns_and_rows_after(
    engine: Any, lake: Lake
) -> None:
    """An empty schema is an Iceberg schema (the spec's ``fields`` may be empty; pyiceberg
    and Java create such tables), and a lakelock dataset holds one (its schema has no
    columns until a commit adds some): the create is taken, the table reads as no rows,
    and what follows works as for any table: the engine adds columns, appends, and every
    reader (lakelock, the engine) reads its rows; lakelock merges a column into it too."""
    table = engine.create_table("lake.events", schema=Schema())
    assert lake.registry.read().datasets["events"].schema == pa.schema([])
    assert lake.read("events").num_rows == 0
    assert table.scan().to_arrow().num_rows == 0
    with table.update_schema() as update:
        update.add_column("kind", StringType())
        update.add_column("n", LongType())
    table = engine.load_table("lake.events")
    table.append(pa.table({"kind": ["a"], "n": pa.array([1], pa.int64())}))
    lake.append(
        "events",
        pa.table({"kind": ["b"], "n": pa.array([2], pa.int64()), "score": [0.5]}),
        schema_mode="merge",
    )
    expected = [
        {"kind": "a", "n": 1, "score": None},
        {"kind": "b", "n": 2, "score": 0.5},
    ]
    assert sorted(lake.read("events").to_pylist(), key=str) == expected
    read = engine.load_table("lake.events").scan().to_arrow().to_pylist()
    assert sorted(read, key=str) == expected


@pytest.mark.parametrize("change", ["required", "identifier"])
def test_a_column_made_required_is_a_bad_request_not_a_change_answered_and_left_out(
    engine: Any, lake: Lake, change: str
) -> None:
    """An engine making column ``n`` required (``ALTER COLUMN n SET NOT NULL``), or making
    it the table's identifier field (which Iceberg requires to be required), hears 400
    naming it; the registry does not move and the
    table loads as it was. What a user would lose: the catalog answered 200 as if committed,
    and dropped the change, so a job that set the constraint before relying on it (rows
    without ``n`` refused, upserts by key) went on believing the table enforced it."""
    schema = Schema(
        NestedField(1, "kind", StringType(), required=False),
        NestedField(2, "n", LongType(), required=False),
    )
    table = engine.create_table("lake.events", schema=schema)
    table.append(pa.table({"kind": ["a"], "n": pa.array([1], pa.int64())}))
    version = lake.registry.read().version
    refused = pytest.raises(BadRequestError, match="making column 'n' required")
    with refused, table.update_schema(allow_incompatible_changes=True) as update:
        update.update_column("n", required=True)
        if change == "identifier":
            update.set_identifier_fields("n")
    assert lake.registry.read().version == version
    loaded = engine.load_table("lake.events").schema()
    assert not loaded.find_field("n").required
    assert loaded.identifier_field_ids == []


def test_column_docs_a_client_sends_are_kept_in_what_it_reads_back(engine: Any, lake: Lake) -> None:
    """An engine creates a table with a column comment (Iceberg's ``doc``) and adds a column
    with one: the dataset recorded them, but the table the engine loaded back had none (the
    view's schema dropped every field's metadata but its id), and a change of an existing
    column's doc was answered as committed and left out. Both docs read back, from the
    create's answer, a fresh load and after a lakelock append; a doc change is 400 and the
    table keeps its docs."""
    schema = Schema(
        NestedField(1, "kind", StringType(), required=False, doc="what happened"),
        NestedField(2, "n", LongType(), required=False),
    )

    def docs(table: Any) -> dict[str, str | None]:
        return {f.name: f.doc for f in table.schema().fields}

    table = engine.create_table("lake.events", schema=schema)
    assert docs(table) == {"kind": "what happened", "n": None}
    with table.update_schema() as update:
        update.add_column("score", LongType(), doc="points")
    lake.append("events", pa.table({"kind": ["a"], "n": [1], "score": [2]}))
    expected = {"kind": "what happened", "n": None, "score": "points"}
    table = engine.load_table("lake.events")
    assert docs(table) == expected
    with pytest.raises(BadRequestError, match="doc of column 'n'"):
        table.update_schema().update_column("n", doc="a count").commit()
    assert docs(engine.load_table("lake.events")) == expected


def test_a_nested_fields_doc_changed_is_refused_as_a_doc_change_not_a_type_change(
    engine: Any, lake: Lake
) -> None:
    """An engine changing the doc of a field nested in a struct column (pyiceberg's
    ``update_column("point.x", doc=...)``) heard 400 "changing the type of column 'point'
    ... is not supported", as if it had retyped the column, while the top-level case names
    the doc. It hears the doc's refusal naming the nested field; the table keeps its docs,
    and a nested field really retyped is still refused as a type change."""
    point = StructType(
        NestedField(3, "x", LongType(), required=False, doc="east"),
        NestedField(4, "y", LongType(), required=False),
        NestedField(5, "z", IntegerType(), required=False),
    )
    schema = Schema(
        NestedField(1, "kind", StringType(), required=False),
        NestedField(2, "point", point, required=False),
    )
    table = engine.create_table("lake.events", schema=schema)
    version = lake.registry.read().version
    for path, doc in (("point.x", "west"), ("point.y", "north")):
        with pytest.raises(BadRequestError, match=f"doc of field '{path}' of column 'point'"):
            table.update_schema().update_column(path, doc=doc).commit()
    with pytest.raises(BadRequestError, match="changing the type of column 'point'"):
        table.update_schema().update_column("point.z", field_type=LongType()).commit()
    assert lake.registry.read().version == version
    loaded = engine.load_table("lake.events").schema()
    assert (loaded.find_field("point.x").doc, loaded.find_field("point.y").doc) == ("east", None)
