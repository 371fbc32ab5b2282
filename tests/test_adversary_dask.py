"""Adversarial tests of ``lakelock.dask`` given a frame no dataset can hold (README, "Engines":
``lakelock.dask.append``; "Errors are typed", and every error carries the fields a caller
acts on: ``lakelock.errors``)."""

from __future__ import annotations

import dask.dataframe as dd
import pandas as pd
import pytest

import lakelock.dask
from lakelock import Lake
from lakelock.errors import SchemaMismatchError


def test_a_frame_whose_column_names_clash_is_refused_naming_its_dataset(lake: Lake) -> None:
    """A Dask frame with columns ``day`` and ``Day`` is refused before any task runs, with a
    ``SchemaMismatchError`` whose ``dataset`` is the one being appended to, as
    ``lake.append`` names it. What a user would lose: the error said "the table for dataset
    None" and its ``dataset`` field was ``None``, so a pipeline appending to many datasets
    could not tell which one to fix."""
    frame = dd.from_pandas(
        pd.DataFrame({"id": [1, 2], "Day": [1, 2], "day": [1, 2]}), npartitions=1
    )
    with pytest.raises(SchemaMismatchError) as refused:
        lakelock.dask.append(lake, "events", frame)
    assert refused.value.dataset == "events"
    assert "events" not in lake.registry.read().datasets
