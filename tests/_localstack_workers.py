"""Subprocess entry points for the end-to-end scenario against LocalStack's S3.

Run as ``python -m tests._localstack_workers <role> '<json args>'`` from the repository root;
each worker reaches LocalStack by URL and prints one JSON record per line on stdout.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _lake(args: dict[str, Any]) -> Any:
    from lakelock import Lake
    from lakelock._retry import RetryPolicy
    from tests._localstack import LocalStack

    retry = RetryPolicy(max_attempts=100, initial_backoff=0.005, max_backoff=0.1)
    return Lake(args["bucket"], s3=LocalStack(args["url"]).client(), retry=retry)


def append(args: dict[str, Any]) -> None:
    """``appends`` commits of ``rows`` rows each to dataset ``events``, partitioned by day;
    row ids are unique across workers; each commit has its own commit id."""
    import pyarrow as pa

    lake = _lake(args)
    worker, rows = args["worker"], args["rows"]
    for n in range(args["appends"]):
        first = (worker * args["appends"] + n) * rows
        table = pa.table({"id": list(range(first, first + rows)), "day": [n % 3] * rows})
        result = lake.append("events", table, partition_by=["day"], commit_id=f"w{worker}-{n}")
        print(json.dumps({"worker": worker, "n": n, "version": result.version}), flush=True)


def contend(args: dict[str, Any]) -> None:
    """One attempt at lease ``name``, no waiting: whether it was won, and its token."""
    lease = _lake(args).lease(args["name"], ttl=30)
    won = lease.try_acquire()
    print(json.dumps({"won": won, "token": lease.token if won else None}), flush=True)
    if won:
        lease.release()


if __name__ == "__main__":
    {"append": append, "contend": contend}[sys.argv[1]](json.loads(sys.argv[2]))
