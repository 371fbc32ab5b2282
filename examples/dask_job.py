"""A Dask job writing a lake: every partition written by a worker process, one commit.

    python examples/dask_job.py                                     # an embedded S3
    python examples/dask_job.py --endpoint-url http://127.0.0.1:9000   # `lakelock serve`

The workers open the lake from ``lake.config`` (bucket, prefix, endpoint, credentials) and
write write-once files; the driver gathers the files the tasks returned and commits them
once, with a commit id: re-running the job appends nothing, and a task re-run after a worker
died leaves only orphans (for ``lake.vacuum``), never duplicate rows. The same three steps
work on Spark or Ray (see ``lakelock.dask``).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

import boto3
import dask.dataframe as dd
import pandas as pd
from distributed import Client, LocalCluster

import lakelock
import lakelock.dask
from lakelock.testing import S3Endpoint, client_kwargs

BUCKET = "example-lake"


def clicks(rows: int = 10_000) -> dd.DataFrame:
    """Stand-in for a large source: clicks over three days, in eight Dask partitions."""
    frame = pd.DataFrame(
        {
            "click_id": range(rows),
            "user": [f"user-{i % 97}" for i in range(rows)],
            "day": [1 + i % 3 for i in range(rows)],
        }
    )
    return dd.from_pandas(frame, npartitions=8)


def run(lake: lakelock.Lake) -> None:
    job = "clicks-2024-01"
    result = lakelock.dask.append(lake, "clicks", clicks(), partition_by=["day"], commit_id=job)
    print(f"committed {job} at version {result.version}")
    again = lakelock.dask.append(lake, "clicks", clicks(), partition_by=["day"], commit_id=job)
    print(f"re-run of {job}: already committed = {again.already_committed}")
    per_day = lake.scan("clicks").to_polars().group_by("day").len().sort("day").collect().rows()
    for day, count in per_day:
        print(f"day {day}: {count} clicks")


@contextlib.contextmanager
def open_lake(endpoint_url: str | None) -> Iterator[lakelock.Lake]:
    if endpoint_url is not None:
        yield connect(endpoint_url)
        return
    with S3Endpoint() as s3:
        yield connect(s3.url)


def connect(endpoint_url: str) -> lakelock.Lake:
    client = boto3.client("s3", **client_kwargs(endpoint_url))
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    return lakelock.Lake(BUCKET, prefix="dask", s3=client)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint-url", help="an S3 endpoint such as `lakelock serve`'s")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    options = parser.parse_args()
    cluster = LocalCluster(
        n_workers=options.workers, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with cluster, Client(cluster), open_lake(options.endpoint_url) as lake:
        run(lake)


if __name__ == "__main__":
    main()
