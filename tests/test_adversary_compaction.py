"""Adversarial tests of compaction's target size given in the wrong type (README, "Locks,
leases and the bucket policy": ``lake.compact(..., target_file_size=128 * 1024**2)``; "Errors
are typed"). A size read from a config file arrives as text, a flag as a bool."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import InvalidArgumentError


@pytest.mark.parametrize("size", ["134217728", True, 1.5e8])
def test_a_target_size_that_is_no_whole_byte_count_is_refused(lake: Lake, size: Any) -> None:
    """``compact(target_file_size=...)`` given text, a bool or a float is refused
    (``InvalidArgumentError``) and nothing is committed. What a user would lose: text died
    on an untyped ``TypeError``; ``True`` was taken as a target of one byte, so no file was
    small enough to merge and the nightly compaction silently did nothing; ``1.5e8`` was
    bound into the commit id's digest as a float, so the re-run of that compaction with
    ``150_000_000`` under the same commit id was refused as another change."""
    for i in range(2):
        lake.append("sales", pa.table({"id": [i]}))
    with pytest.raises(InvalidArgumentError):
        lake.compact("sales", target_file_size=size)
    assert len(lake.history("sales")) == 2
