"""Adversarial tests of a cluster's append (README, "Engines": ``lakelock.dask.append``, and
the same steps for Spark and Ray: workers write, the driver commits once, judging the
workers' files as an append judges its rows, "a type the dataset's cannot hold is refused").
Frames with a pandas categorical or a pandas string column: the dataset must stay readable,
and Dask must commit what the README's own steps commit."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
import pytest

import lakelock.dask
from lakelock import Lake
from lakelock.errors import SchemaMismatchError


def categories(count: int, index: pa.DataType) -> pa.Array:
    """``count`` distinct strings as a dictionary of ``index`` indices (a pandas categorical
    of that many categories arrives so: int8 up to 127, int16 past)."""
    plain = pa.array([f"k{i}" for i in range(count)])
    return plain.dictionary_encode().cast(pa.dictionary(index, pa.string()))


@pytest.mark.parametrize(
    "column",
    [categories(300, pa.int16()), pa.array([f"k{i}" for i in range(300)])],
    ids=["wider-indices", "plain-strings"],
)
def test_a_workers_file_of_more_values_than_the_datasets_dictionary_counts_is_refused(
    lake: Lake, column: pa.Array
) -> None:
    """A dataset made of a categorical of a few categories stores them as a dictionary of
    int8 indices. A worker's file of 300 (int16 indices, or plain strings) was committed by
    the driver, and then every read of the dataset failed (ArrowInvalid: "Integer value
    128 not in range: -128 to 127"), an error of no lakelock type, for good."""
    lake.append("labels", pa.table({"c": categories(3, pa.int8())}))
    before = lake.registry.read().version
    files = lake.config.open().write("labels", pa.table({"c": column}))
    with pytest.raises(SchemaMismatchError, match="cannot hold it"):
        lake.registry.commit("labels", add=files)
    assert lake.registry.read().version == before
    assert lake.read("labels").num_rows == 3


def test_a_workers_categories_the_datasets_dictionary_counts_are_committed(lake: Lake) -> None:
    """Narrower indices than the dataset's hold: a file of int8 indices joins an int32 one."""
    lake.append("labels", pa.table({"c": categories(3, pa.int32())}))
    files = lake.config.open().write("labels", pa.table({"c": categories(5, pa.int8())}))
    lake.registry.commit("labels", add=files)
    assert lake.read("labels").num_rows == 8


def test_a_dask_frame_of_pandas_strings_appends_where_the_readmes_steps_do(lake: Lake) -> None:
    """A dataset made of Arrow strings (``pa.table``), then a Dask frame of the same column
    (pandas' strings arrive as ``large_string``): ``lakelock.dask.append`` refused it ("is
    string, not large_string") where the README's steps for Spark and Ray, the very files
    committed by ``lake.registry.commit``, append it. Dask's commit judges by what the
    dataset can hold, as theirs does."""
    lake.append("people", pa.table({"id": [0], "name": ["zero"]}))
    frame = dd.from_pandas(pd.DataFrame({"id": [1, 2], "name": ["one", "two"]}), npartitions=2)
    with dask.config.set(scheduler="sync"):
        result = lakelock.dask.append(lake, "people", frame, commit_id="load-1")
    assert not result.already_committed
    people = lake.read("people")
    assert sorted(people.column("name").to_pylist()) == ["one", "two", "zero"]
    assert people.schema.field("name").type == pa.string()  # the dataset's type, kept


def test_a_dask_frame_in_a_type_the_dataset_cannot_hold_is_still_refused(lake: Lake) -> None:
    """What the dataset cannot hold stays refused, typed, nothing committed: floats for a
    column of longs."""
    lake.append("people", pa.table({"id": [0], "score": [1]}))
    frame = dd.from_pandas(pd.DataFrame({"id": [1], "score": [1.5]}), npartitions=1)
    with dask.config.set(scheduler="sync"), pytest.raises(SchemaMismatchError):
        lakelock.dask.append(lake, "people", frame)
    assert lake.read("people").num_rows == 1


@pytest.mark.xfail(
    strict=True,
    raises=SchemaMismatchError,
    reason="a dataset keeps the dictionary index type of its first categorical (int8 for up "
    "to 127 categories; evolve_schema compares types exactly), so a later frame of more "
    "categories (int16) is refused: storing a dictionary column with int32 indices, or "
    "comparing dictionaries by value type and reading with the widest, is a schema change "
    "left to a design decision",
)
def test_a_categorical_whose_categories_grow_past_127_still_appends(lake: Lake) -> None:
    """A daily pandas frame with a categorical column: 3 categories on the first day, 300 on
    a later one. The column is the same (strings, as categories), but the append is refused
    ("is dictionary<... indices=int8>, not dictionary<... indices=int16>"), through
    ``lakelock.dask.append`` as through ``lake.append``, for good."""
    first = pd.DataFrame({"c": pd.Categorical(["a", "b", "c"])})
    later = pd.DataFrame({"c": pd.Categorical([f"k{i}" for i in range(300)])})
    with dask.config.set(scheduler="sync"):
        lakelock.dask.append(lake, "labels", dd.from_pandas(first, npartitions=1))
        lakelock.dask.append(lake, "labels", dd.from_pandas(later, npartitions=1))
    assert lake.read("labels").num_rows == 303
