"""Dataset properties from the Lake: set and removed in their own commit, or with the data
they describe; kept per version; bad ones refused before anything is written."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import (
    CommitIdReusedError,
    DatasetNotFoundError,
    InvalidArgumentError,
)


def rows() -> pa.Table:
    return pa.table({"id": [1, 2]})


def properties(lake: Lake, version: int | None = None) -> dict[str, str]:
    return dict(lake.registry.dataset("sales", version=version).properties)


def test_set_and_remove_properties(lake: Lake) -> None:
    lake.append("sales", rows(), properties={"source": "crm"})
    result = lake.set_properties("sales", {"owner": "etl"}, commit_id="p1")
    assert properties(lake) == {"source": "crm", "owner": "etl"}
    assert lake.set_properties("sales", {"owner": "etl"}, commit_id="p1").already_committed
    with pytest.raises(CommitIdReusedError):
        lake.set_properties("sales", {"owner": "ops"}, commit_id="p1")
    lake.set_properties("sales", {"source": None})
    assert properties(lake) == {"owner": "etl"}
    assert properties(lake, version=1) == {"source": "crm"}  # each version keeps its own
    assert lake.history("sales")[1].operation == "properties"
    assert result.version == 2


def test_bad_properties_are_refused(lake: Lake) -> None:
    with pytest.raises(DatasetNotFoundError):
        lake.set_properties("sales", {"owner": "etl"})
    lake.append("sales", rows())
    for bad in ({"owner": 7}, {"": "x"}, {}):
        with pytest.raises(InvalidArgumentError):
            lake.set_properties("sales", bad)  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError):
        lake.append("sales", rows(), properties={"owner": 7})  # type: ignore[dict-item]
    assert lake.registry.read().version == 1
