"""Schema changes are never silent: a column the dataset lacks is refused unless
``schema_mode="merge"``; a nullable column the table lacks reads as null while the dataset
keeps its schema; and whatever is refused for its schema or partition columns is refused
before the first data PUT, leaving no files behind. A folded intent is judged the same way
in another process: ``schema_mode`` travels in the intent."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry._intents import intent_document, parse_intent
from lakelock.advanced import Change
from lakelock.errors import (
    InvalidArgumentError,
    PartitionByMismatchError,
    SchemaMismatchError,
)
from lakelock.testing import S3Endpoint


def rows(ids: list[int], **extra: list[Any]) -> pa.Table:
    return pa.table({"id": ids, "day": [1] * len(ids), **extra})


def data_files(lake: Lake, dataset: str) -> list[str]:
    return [o.key for o in lake.store.list(f"datasets/{dataset}/")]


def test_an_added_column_is_refused_by_default_and_says_how_to_opt_in(lake: Lake) -> None:
    lake.append("sales", rows([1]), partition_by=["day"])
    before = data_files(lake, "sales")
    with pytest.raises(SchemaMismatchError, match="schema_mode='merge'") as info:
        lake.append("sales", rows([2], note=["x"]), partition_by=["day"])
    assert "'note'" in str(info.value)
    assert data_files(lake, "sales") == before  # refused before its first data PUT
    state = lake.registry.read().datasets["sales"]
    assert (state.schema_version, state.schema.names) == (1, ["id", "day"])


def test_schema_mode_merge_adds_the_column(lake: Lake) -> None:
    lake.append("sales", rows([1]), partition_by=["day"])
    lake.append("sales", rows([2], note=["x"]), partition_by=["day"], schema_mode="merge")
    table = lake.read("sales").sort_by("id")
    assert table["note"].to_pylist() == [None, "x"]
    with pytest.raises(InvalidArgumentError, match="schema_mode"):
        lake.append("sales", rows([3]), partition_by=["day"], schema_mode="add")  # type: ignore[arg-type]


def test_registry_commit_declaring_a_new_column_takes_the_schema_mode_its_refusal_names(
    lake: Lake,
) -> None:
    """``registry.commit(schema=...)`` with a column the dataset lacks is refused with
    "pass schema_mode='merge'", and ``registry.commit`` takes that parameter: a driver
    committing its workers' files with a wider declared schema had no way to add the
    column it was told to add (the parameter existed only on ``Lake.append``)."""
    lake.append("sales", rows([1]), partition_by=["day"])
    wider = pa.schema([("id", pa.int64()), ("day", pa.int64()), ("note", pa.string())])
    with pytest.raises(SchemaMismatchError, match="schema_mode='merge'"):
        lake.registry.commit("sales", schema=wider, commit_id="declare-note")
    lake.registry.commit("sales", schema=wider, commit_id="declare-note", schema_mode="merge")
    state = lake.registry.read().datasets["sales"]
    assert (state.schema_version, state.schema.names) == (2, ["id", "day", "note"])
    assert lake.read("sales")["note"].to_pylist() == [None]
    with pytest.raises(InvalidArgumentError, match="schema_mode"):
        lake.registry.commit("sales", schema=wider, schema_mode="add")  # type: ignore[arg-type]


def test_a_missing_nullable_column_reads_as_null_and_the_schema_stays(lake: Lake) -> None:
    lake.append("sales", rows([1], note=["x"]), partition_by=["day"])
    lake.append("sales", rows([2]), partition_by=["day"])
    state = lake.registry.read().datasets["sales"]
    assert (state.schema_version, state.schema.names) == (1, ["id", "day", "note"])
    assert lake.read("sales").sort_by("id")["note"].to_pylist() == ["x", None]


def test_a_type_change_is_refused_before_any_write(lake: Lake) -> None:
    lake.append("sales", rows([1]), partition_by=["day"])
    before = data_files(lake, "sales")
    for _ in range(3):
        with pytest.raises(SchemaMismatchError, match="column 'id' is int64, not string"):
            lake.append("sales", pa.table({"id": ["a"], "day": [1]}), partition_by=["day"])
    assert data_files(lake, "sales") == before


def test_another_partition_by_is_refused_before_any_write(lake: Lake) -> None:
    lake.append("sales", rows([1]), partition_by=["day"])
    before = data_files(lake, "sales")
    for _ in range(3):
        with pytest.raises(PartitionByMismatchError, match=r"partitioned by \['day'\]"):
            lake.append("sales", rows([2]), partition_by=[])
        with pytest.raises(PartitionByMismatchError):
            lake.overwrite("sales", rows([2]), partition_by=["id"])
    assert data_files(lake, "sales") == before


def test_the_commit_loop_refuses_what_the_early_check_could_not_see(
    s3: S3Endpoint, lake: Lake, client: Any, bucket: str
) -> None:
    """Another process creates the dataset after this Lake last read the registry: the
    early check passes on the stale registry, the commit is still refused."""
    lake.append("other", rows([0]))  # this Lake now knows a registry without "sales"
    elsewhere = Lake(bucket, s3=client)
    elsewhere.append("sales", rows([1]), partition_by=["day"])
    with pytest.raises(SchemaMismatchError, match="schema_mode"):
        lake.append("sales", rows([2], note=["x"]), partition_by=["day"])
    assert "note" not in lake.registry.read().datasets["sales"].schema.names


def test_schema_mode_travels_in_the_intent() -> None:
    """A folding process judges another's intent by the mode it was made with; an intent of
    a lakelock that knew no schema_mode merged new columns, and is judged so."""
    for mode in ("merge", None):
        change = Change(dataset="sales", commit_id="c1", schema_mode=mode)
        key, body, _ = intent_document(change, now_ms=1)
        assert parse_intent(key, body)[0].schema_mode == mode
    key, body, _ = intent_document(Change(dataset="sales", commit_id="c1"), now_ms=1)
    old = body.replace(b',"schema_mode":null', b"")
    assert old != body
    digest = hashlib.sha256(old).hexdigest()
    old_key = key.rsplit("-", 1)[0] + f"-{digest}.json"
    assert parse_intent(old_key, old)[0].schema_mode == "merge"


def test_a_column_another_process_merged_is_not_refused_on_a_stale_view(
    lake: Lake, client: Any, bucket: str
) -> None:
    """This Lake last saw the dataset before another process merged a column: its append
    with that column is checked again on the current registry, and goes through."""
    lake.append("sales", rows([1]), partition_by=["day"])
    elsewhere = Lake(bucket, s3=client)
    elsewhere.append("sales", rows([2], note=["x"]), partition_by=["day"], schema_mode="merge")
    lake.append("sales", rows([3], note=["y"]), partition_by=["day"])
    assert lake.read("sales").sort_by("id")["note"].to_pylist() == [None, "x", "y"]


def test_column_names_that_clash_ignoring_case_are_refused_before_any_file(lake: Lake) -> None:
    """A data column ``Day`` beside the partition column ``day`` is refused with
    SchemaMismatchError before any file is written: DuckDB, Spark, Delta and Iceberg resolve
    names ignoring case, so such a dataset read back wrong counts with no error. So is a
    merge that would add ``DAY`` to a dataset that has ``day``, and a registry commit that
    declares such a schema."""
    clash = pa.table({"day": [1] * 10 + [2], "Day": list(range(11))})
    with pytest.raises(SchemaMismatchError, match="'day' and 'Day'") as info:
        lake.append("lk", clash, partition_by=["day"])
    assert info.value.dataset == "lk"
    with pytest.raises(SchemaMismatchError):
        lake.write("lk", clash, partition_by=["day"])
    assert data_files(lake, "lk") == []
    assert "lk" not in lake.registry.read().datasets
    lake.append("sales", rows([1]), partition_by=["day"])
    before = data_files(lake, "sales")
    with pytest.raises(SchemaMismatchError, match="'day' and 'DAY'"):
        lake.append("sales", rows([2], DAY=[3]), partition_by=["day"], schema_mode="merge")
    assert data_files(lake, "sales") == before
    files = lake.write("other", pa.table({"id": [1]}))
    with pytest.raises(SchemaMismatchError, match="'id' and 'ID'"):
        lake.registry.commit(
            "other", add=files, schema=pa.schema({"id": pa.int64(), "ID": pa.int64()})
        )
