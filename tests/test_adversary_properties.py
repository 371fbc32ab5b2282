"""Adversarial tests of dataset properties given text JSON cannot hold (README, "Write":
``lake.set_properties``; "Errors are typed (``lakelock.errors``)"). A value decoded from
bytes with ``errors="surrogateescape"`` (a file name, an environment variable) is a Python
str that is not UTF-8."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import InvalidNameError


@pytest.mark.parametrize("properties", [{"source": "\udcff.csv"}, {"\udcff": "etl"}])
def test_a_property_that_is_not_utf8_is_refused_as_a_bad_name(
    lake: Lake, properties: dict[str, str]
) -> None:
    """``set_properties`` and ``append(properties=...)`` with a name or value that cannot be
    encoded as UTF-8 are refused as ``InvalidNameError``, nothing committed. What a user
    would lose: an untyped ``TypeError`` from the JSON encoder, outside lakelock's errors,
    escaped the handler meant for bad input."""
    lake.append("sales", pa.table({"id": [1]}))
    with pytest.raises(InvalidNameError):
        lake.set_properties("sales", properties)
    with pytest.raises(InvalidNameError):
        lake.append("sales", pa.table({"id": [2]}), properties=properties)
    assert len(lake.history("sales")) == 1
    assert lake.read("sales").to_pydict() == {"id": [1]}
