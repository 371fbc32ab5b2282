"""Subprocess entry point: rename one partition and print the outcome as JSON.

python -m tests._partition_workers URL BUCKET TO_PARTITION
"""

from __future__ import annotations

import sys

import orjson

from lakelock import Lake
from lakelock.errors import LakelockError
from lakelock.testing import client_kwargs


def main(url: str, bucket: str, to_partition: str) -> None:
    # The loser waits for the winner's path lock, then finds the partition gone.
    lake = Lake.from_url(f"s3://{bucket}", lock_timeout=60, **client_kwargs(url))
    try:
        result = lake.rename_partition("sales", "year=2024", to_partition=to_partition)
        outcome = {"ok": True, "version": result.version}
    except LakelockError as error:
        outcome = {"ok": False, "error": type(error).__name__, "message": str(error)}
    sys.stdout.write(orjson.dumps(outcome).decode() + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
