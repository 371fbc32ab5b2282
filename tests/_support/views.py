"""What the tests of the Iceberg and Delta views share: the history they mirror, rows as the
engines read them, and the options that aim delta-rs and pyiceberg at an S3 endpoint (the
embedded one, LocalStack)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pyarrow as pa

from lakelock import Lake
from lakelock.testing import DEFAULT_ACCESS_KEY

__all__ = ["SECRET", "delta_options", "events", "history", "iceberg_properties", "rows"]

#: The embedded endpoint's secret key.
SECRET = "lakelock-secret"

#: The settings an engine is given, in order: endpoint, access key, secret, region, and
#: path-style addressing (last: given only when asked for), in each engine's spelling.
_DELTA = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_FORCE_PATH_STYLE",
)
_ICEBERG = (
    "s3.endpoint",
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.region",
    "s3.path-style-access",
)


def _settings(
    names: tuple[str, ...], url: str, key: str, secret: str, path_style: bool
) -> dict[str, str]:
    values = (url, key, secret, "us-east-1", "true")
    return dict(zip(names if path_style else names[:-1], values, strict=False))


def delta_options(
    url: str, key: str = DEFAULT_ACCESS_KEY, secret: str = SECRET, *, path_style: bool = False
) -> dict[str, str]:
    """delta-rs's ``storage_options`` for the endpoint at ``url`` (plain HTTP)."""
    return _settings(_DELTA, url, key, secret, path_style) | {"AWS_ALLOW_HTTP": "true"}


def iceberg_properties(
    url: str, key: str = DEFAULT_ACCESS_KEY, secret: str = SECRET, *, path_style: bool = False
) -> dict[str, str]:
    """pyiceberg's FileIO properties for the endpoint at ``url``."""
    return _settings(_ICEBERG, url, key, secret, path_style)


def rows(table: pa.Table, schema: pa.Schema) -> list[dict[str, Any]]:
    """``table`` as sorted rows, cast to ``schema`` (Iceberg widens int16 to int; DuckDB
    and delta-rs may order columns their way)."""
    table = table.select(schema.names).cast(schema)
    return sorted(table.to_pylist(), key=lambda r: orjson.dumps(r, option=orjson.OPT_SORT_KEYS))


def events(ids: range, day: int, *, extra: bool = False) -> pa.Table:
    """Rows ``ids`` of ``events`` on 2026-01-``day`` (``extra``: with a ``score`` column)."""
    columns: dict[str, Any] = {
        "id": pa.array(list(ids), pa.int64()),
        "name": pa.array([f"n{i}" for i in ids]),
        "day": pa.array([dt.date(2026, 1, day)] * len(ids), pa.date32()),
    }
    if extra:
        columns["score"] = pa.array([float(i) for i in ids])
    return pa.table(columns)


def history(lake: Lake) -> list[int]:
    """Versions of ``events``: appends, an added column, an overwrite, a partition delete, a
    compaction and a restore."""
    lake.append("events", events(range(0, 5), 1), partition_by=["day"])
    lake.append("events", events(range(5, 10), 2), partition_by=["day"])
    lake.append(
        "events", events(range(10, 12), 2, extra=True), partition_by=["day"], schema_mode="merge"
    )
    lake.overwrite("events", events(range(20, 23), 1), partition_by=["day"])
    lake.append("events", events(range(30, 33), 3), partition_by=["day"])
    lake.delete("events", partitions=[{"day": dt.date(2026, 1, 3)}])
    lake.compact("events")
    lake.restore("events", version=2)
    return [h.version for h in reversed(lake.history("events"))]
