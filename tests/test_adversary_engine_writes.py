"""Adversarial tests of engines writing the lake beside lakelock's own Python API (README,
"Engines" and "Iceberg and Delta views; the Iceberg REST catalog"; docs/FORMAT.md, "File
statistics" and after): nested columns and names an engine stores otherwise than lakelock
reads them, through ``lakelock catalog`` (pyiceberg's ``RestCatalog`` over HTTP to a catalog
started in-process over the embedded endpoint, its files written with S3 keys the test
bucket's policy does not bind) and through ``registry.commit`` of a worker's files. Each is
committed whole and read alike by lakelock and the engine, or refused, nothing committed."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyiceberg.exceptions import BadRequestError

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog
from lakelock._readable import unholdable
from lakelock._registry import _builder
from lakelock.errors import SchemaMismatchError
from lakelock.testing import S3Endpoint
from lakelock.testing.simulate import Mix, SimConfig, simulate
from tests._support.catalog import engine, reads_as_lakelock


@pytest.fixture
def server(lake: Lake) -> Iterator[CatalogServer]:
    running = CatalogServer(LakeCatalog(lake), port=0).start()
    yield running
    running.close()


def nested(name: str, type_: pa.DataType, ids: list[int], values: list[object]) -> pa.Table:
    """Rows of an ``id`` and a column ``name`` of ``type_``."""
    return pa.table({"id": pa.array(ids, pa.int64()), name: pa.array(values, type_)})


def struct_of(field: str, type_: pa.DataType | None = None) -> pa.DataType:
    """A struct of one field ``field``, of ``type_`` (a long if None)."""
    return pa.struct([(field, pa.int64() if type_ is None else type_)])


# -- through the catalog -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "value", "spelt"),
    [
        (struct_of("a b"), {"a b": 1}, "a_x20b"),
        (pa.list_(struct_of("x.y")), [{"x.y": 1}], "x_x2Ey"),
        (pa.map_(pa.string(), struct_of("1z")), [("k", {"1z": 2})], "_1z"),
    ],
    ids=["struct", "list-of-struct", "map-of-struct"],
)
def test_a_nested_field_an_engine_spells_for_avro_is_refused_not_committed_unread(
    server: CatalogServer,
    lake: Lake,
    s3: S3Endpoint,
    *,
    type_: pa.DataType,
    value: object,
    spelt: str,
) -> None:
    """pyiceberg stores a field whose name Avro cannot hold (a space, a dot, a leading
    digit) under its Avro spelling, which Iceberg readers match by field id; lakelock reads
    a struct by field name. What a user lost before: the append was answered 200 and
    pyiceberg read the value back, while every lakelock read of the row saw a null. Now it
    is a 400 naming both spellings, and the lake is as it was."""
    lake.append("shapes", nested("c", type_, [1], [value]))
    version = lake.registry.read().version
    table = engine(server, s3).load_table("lake.shapes")
    with pytest.raises(BadRequestError, match=f"as '{spelt}'.*reads a file's columns and fields"):
        table.append(nested("c", type_, [2], [value]))
    assert lake.registry.read().version == version
    read = engine(server, s3).load_table("lake.shapes").scan().to_arrow()
    reads_as_lakelock(read, lake, "shapes")


def test_a_column_an_engine_spells_for_avro_is_refused_saying_why(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """A top-level column so spelt was refused as one "the table lacks", telling the user
    to add a column the table has; the 400 now says what the engine did."""
    lake.append("spaced", pa.table({"id": [1], "my col": [10]}))
    table = engine(server, s3).load_table("lake.spaced")
    with pytest.raises(BadRequestError, match="stores 'my col' as 'my_x20col'") as refused:
        table.append(pa.table({"id": [2], "my col": [20]}))
    assert "add the column first" not in str(refused.value)
    assert lake.read("spaced").num_rows == 1


def test_nested_columns_with_plain_names_an_engine_appends_read_alike(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """The nested check refuses no file lakelock reads whole: pyiceberg's append of a
    struct, a list of structs and a map of plain names commits, and every reader reads it
    alike."""
    columns = {
        "s": (struct_of("a"), {"a": 1}),
        "l": (pa.list_(struct_of("x")), [{"x": 1}]),
        "m": (pa.map_(pa.string(), pa.int64()), [("k", 2)]),
    }

    def rows(ids: list[int]) -> pa.Table:
        arrays = {n: pa.array([v] * len(ids), t) for n, (t, v) in columns.items()}
        return pa.table({"id": pa.array(ids, pa.int64()), **arrays})

    lake.append("plain", rows([1]))
    engine(server, s3).load_table("lake.plain").append(rows([2, 3]))
    assert lake.read("plain").num_rows == 3
    read = engine(server, s3).load_table("lake.plain").scan().to_arrow()
    reads_as_lakelock(read, lake, "plain")


# -- registry.commit of a worker's files ---------------------------------------------------------


@pytest.mark.parametrize(
    ("dataset_type", "file_type", "value"),
    [
        (struct_of("a"), pa.struct([("a", pa.int64()), ("b", pa.int64())]), {"a": 1, "b": 2}),
        (struct_of("a"), struct_of("a", pa.string()), {"a": "x"}),
        (pa.list_(struct_of("a")), pa.list_(struct_of("b")), [{"b": 1}]),
        (pa.map_(pa.utf8(), struct_of("a")), pa.map_(pa.utf8(), struct_of("b")), [("k", {"b": 1})]),
        (pa.list_(pa.int64()), struct_of("a"), {"a": 1}),
    ],
    ids=["struct-field-lacking", "struct-field-type", "list", "map", "list-as-struct"],
)
def test_a_workers_nested_column_the_dataset_cannot_hold_is_refused(
    lake: Lake, dataset_type: pa.DataType, file_type: pa.DataType, value: object
) -> None:
    """README, "Engines": the driver's commit judges the workers' files as an append judges
    its rows. An append of a struct with a field the dataset's lacks is refused; the same
    rows written by a worker and committed by ``registry.commit`` landed, and every read
    dropped the field's values (or, a field stored in a type the dataset's cannot hold,
    failed). Now the commit is refused, nothing committed."""
    lake.append("nest", nested("c", dataset_type, [1], [None]))
    rows = nested("c", file_type, [2], [value])
    with pytest.raises(SchemaMismatchError):
        lake.append("nest", rows)
    files = lake.write("nest", rows)
    version = lake.registry.read().version
    with pytest.raises(SchemaMismatchError, match="holds column 'c'"):
        lake.registry.commit("nest", add=files)
    assert lake.registry.read().version == version
    assert lake.read("nest").num_rows == 1


def test_a_workers_nested_column_the_dataset_holds_commits(lake: Lake) -> None:
    """What a read casts without loss still commits: a struct lacking a field the
    dataset's has (read as nulls), a list of narrower integers."""
    dataset_type = pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64()))])
    lake.append("nest", nested("c", dataset_type, [1], [{"a": 1, "b": [1]}]))
    narrower = pa.struct([("b", pa.list_(pa.int32()))])
    files = lake.write("nest", nested("c", narrower, [2], [{"b": [2]}]))
    lake.registry.commit("nest", add=files)
    assert lake.read("nest").sort_by("id").column("c").to_pylist() == [
        {"a": 1, "b": [1]},
        {"a": None, "b": [2]},
    ]


#: Workers' files holding a struct of one field or of two (``nested``), beside merges.
NESTED = SimConfig(
    writers=4, seconds=2.0, seed=0, mix=Mix.of([("append", 1), ("nested", 2), ("schema", 1)])
)


def test_the_simulators_checker_reports_a_struct_field_committed_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The simulator's workers commit files holding ``nest`` as a struct of one field or
    of two (``nested``): some are refused, none lands unread. With the shell judging only
    primitive types, as it did, a file of two fields lands in a dataset whose struct has
    one, and the checker reports it."""
    kept = simulate(NESTED)
    assert kept.violations == []
    outcomes = {(i.outcome, i.error_type) for i in kept.invocations if i.op == "typed"}
    assert {("ok", None), ("fail", "SchemaMismatchError")} <= outcomes

    def primitive_only(stored: pa.Schema, dataset: pa.Schema, path: str = "") -> object:
        flat = pa.schema([f for f in stored if not pa.types.is_nested(f.type)])
        return unholdable(flat, dataset, path)

    monkeypatch.setattr(_builder, "unholdable", primitive_only)
    broken = simulate(NESTED)
    assert any("holds column 'nest' as struct<a: int64, b: int64>" in v for v in broken.violations)
