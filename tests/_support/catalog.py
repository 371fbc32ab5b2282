"""What the catalog's test modules share: the token they configure, its header, a lake with
two datasets."""

from __future__ import annotations

import pyarrow as pa

from lakelock import Lake

__all__ = ["TOKEN", "bearer", "two_datasets"]

#: The bearer token of catalogs started with one.
TOKEN = "s3cr3t-catalog-token"


def bearer(token: str = TOKEN) -> dict[str, str]:
    """The ``Authorization`` header that carries ``token``."""
    return {"Authorization": f"Bearer {token}"}


def two_datasets(lake: Lake) -> None:
    """``sales`` (unpartitioned, 3 rows) and ``events`` (partitioned by ``kind``, 2 rows)."""
    lake.append("sales", pa.table({"day": [1, 2, 3], "amount": [10.0, 20.0, 30.0]}))
    lake.append(
        "events",
        pa.table({"kind": ["a", "b"], "n": [1, 2]}),
        partition_by=["kind"],
    )
