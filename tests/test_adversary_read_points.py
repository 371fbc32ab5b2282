"""Adversarial tests of how a read names its version (README, "Time travel": ``version=``
or ``as_of=``; "Errors are typed (``lakelock.errors``)")."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import InvalidArgumentError


def test_a_read_given_both_a_version_and_an_instant_is_a_typed_bad_argument(lake: Lake) -> None:
    """A read (or scan, or registry read) given both ``version=`` and ``as_of=`` names two
    points at once: it is refused as ``InvalidArgumentError``, which a pipeline catching
    ``LakelockError`` handles, as ``restore`` refuses the same mistake. What a user would
    lose: a bare ``ValueError`` outside lakelock's tree of errors escaped the handler meant
    for lakelock's bad input and killed the job."""
    result = lake.append("sales", pa.table({"id": [1]}))
    now = datetime.now(UTC)
    with pytest.raises(InvalidArgumentError):
        lake.read("sales", version=result.version, as_of=now)
    with pytest.raises(InvalidArgumentError):
        lake.scan("sales", version=result.version, as_of=now)
    with pytest.raises(InvalidArgumentError):
        lake.registry.read(version=result.version, as_of=now)
