"""Tables the tests write, and what they read back."""

from __future__ import annotations

import pyarrow as pa

from lakelock import Lake

__all__ = ["committed_ids", "day_rows"]


def day_rows(ids: list[int], day: int = 1) -> pa.Table:
    """Rows ``ids``, all of day ``day``."""
    return pa.table({"id": ids, "day": [day] * len(ids)})


def committed_ids(lake: Lake, dataset: str = "events") -> list[int]:
    """The ids ``dataset`` holds at its latest version, sorted."""
    return sorted(lake.read(dataset).column("id").to_pylist())
