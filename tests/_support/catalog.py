"""What the catalog's test modules share: the token they configure, its header, a lake with
two datasets, the check that an engine read what lakelock reads, DuckDB with its Iceberg
extension."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

from lakelock import Lake
from lakelock._engines import load_httpfs, sql_string
from tests._support.views import rows as mirror_rows

if TYPE_CHECKING:
    from lakelock._catalog import CatalogServer
    from lakelock.testing import S3Endpoint

__all__ = [
    "ENGINE",
    "ENGINE_KEY",
    "TOKEN",
    "bearer",
    "duckdb_with_iceberg",
    "engine",
    "events",
    "reads_as_lakelock",
    "serving",
    "two_datasets",
]

#: The bearer token of catalogs started with one.
TOKEN = "s3cr3t-catalog-token"


#: The access key of the engines' S3 credentials (ones the bucket policy does not bind).
ENGINE_KEY = "engine"
#: Those credentials, as pyiceberg's catalog properties.
ENGINE = {"s3.access-key-id": ENGINE_KEY, "s3.secret-access-key": "x"}


def engine(server: CatalogServer, s3: S3Endpoint | None = None, **properties: str) -> Any:
    """pyiceberg's RestCatalog on ``server`` with the engine's S3 keys (and ``s3``'s URL,
    when given, for the files it writes), and ``properties``."""
    endpoint = {} if s3 is None else {"s3.endpoint": s3.url}
    return RestCatalog("lakelock", uri=server.url, **{**ENGINE, **endpoint, **properties})


def events(kinds: list[str], ns: list[int]) -> pa.Table:
    """Rows of the catalog tests' ``events`` table: a ``kind`` and an ``n`` each."""
    return pa.table({"kind": pa.array(kinds, pa.string()), "n": pa.array(ns, pa.int64())})


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


def reads_as_lakelock(read: pa.Table, lake: Lake, name: str, version: int | None = None) -> None:
    """``read`` (an engine's read of ``name`` at ``version``, None: the newest) has exactly
    lakelock's columns, typed as lakelock types them (strings may come as large_string), and
    its rows."""
    expected = lake.read(name, version=version)
    assert sorted(read.column_names) == sorted(expected.column_names), (name, version)
    for field in expected.schema:
        got = read.schema.field(field.name).type
        assert got == field.type or (
            pa.types.is_string(field.type) and pa.types.is_large_string(got)
        ), (name, version, field.name, got)
    assert mirror_rows(read, expected.schema) == mirror_rows(expected, expected.schema), (
        name,
        version,
    )


def duckdb_with_iceberg() -> Any:
    """A DuckDB connection with httpfs, avro and iceberg loaded from the
    ``duckdb-extension-*`` packages (the test extra installs them: nothing is downloaded)."""
    con = duckdb.connect()
    load_httpfs(duckdb, con)
    for name in ("avro", "iceberg"):  # iceberg needs avro loaded first
        module = importlib.import_module(f"duckdb_extension_{name}")
        assert module.__file__ is not None
        binary = (
            Path(module.__file__).parent
            / "extensions"
            / f"v{duckdb.__version__}"
            / f"{name}.duckdb_extension"
        )
        con.execute(f"LOAD {sql_string(str(binary))}")
    return con


@contextlib.contextmanager
def serving(lake: Lake, *, token: str | None = None) -> Iterator[CatalogServer]:
    """``lakelock catalog`` over ``lake`` (namespace ``lake``; ``token``: the bearer token
    engines must send), in this process on a free port of 127.0.0.1; closed after."""
    from lakelock._catalog import CatalogServer, LakeCatalog

    server = CatalogServer(LakeCatalog(lake, namespace="lake"), port=0, token=token).start()
    try:
        yield server
    finally:
        server.close()
