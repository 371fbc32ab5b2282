"""Subprocess entry points of the catalog's concurrency tests.

Run as ``python -m tests._catalog_workers <role> '<json args>'`` from the repository root.
``pyiceberg``: appends ``rounds`` batches of rows through the Iceberg REST catalog at
``catalog``; ``lakelock``: appends them with ``lake.append`` directly. Each row is
``(id, who)`` with ids ``worker * 1000 + i``. A commit refused with 409 (another writer went
first, after pyiceberg's own retries) is committed again on the refreshed table: a 409 applied
nothing. Prints one JSON line when done: the ids it committed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pyarrow as pa


def _batch(worker: int, round_: int, size: int) -> pa.Table:
    start = worker * 1000 + round_ * size
    ids = list(range(start, start + size))
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "who": pa.array([f"w{worker}"] * size, pa.string())}
    )


def pyiceberg_appends(args: dict[str, Any]) -> list[int]:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import CommitFailedException
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

    catalog = RestCatalog(
        "lakelock",
        uri=args["catalog"],
        **{"s3.access-key-id": "engine", "s3.secret-access-key": "x"},
    )
    table = catalog.load_table(args["table"])
    committed: list[int] = []
    for round_ in range(args["rounds"]):
        batch = _batch(args["worker"], round_, args["size"])
        for attempt in Retrying(
            retry=retry_if_exception_type(CommitFailedException),
            stop=stop_after_attempt(100),
            reraise=True,
        ):
            with attempt:
                table.refresh()
                table.append(batch)
        committed += batch["id"].to_pylist()
    return committed


def lakelock_appends(args: dict[str, Any]) -> list[int]:
    import boto3

    from lakelock import Lake
    from lakelock.testing import client_kwargs

    lake = Lake(
        args["bucket"], prefix=args["prefix"], s3=boto3.client("s3", **client_kwargs(args["url"]))
    )
    committed: list[int] = []
    for round_ in range(args["rounds"]):
        batch = _batch(args["worker"], round_, args["size"])
        lake.append(args["table"].split(".")[-1], batch)
        committed += batch["id"].to_pylist()
    return committed


ROLES = {"pyiceberg": pyiceberg_appends, "lakelock": lakelock_appends}

if __name__ == "__main__":
    role, raw = sys.argv[1], sys.argv[2]
    ids = ROLES[role](json.loads(raw))
    print(json.dumps({"role": role, "ids": ids}), flush=True)
