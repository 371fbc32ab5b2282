"""Query a lake with DuckDB: the current snapshot, and an older one, in one SQL session.

    python examples/duckdb_query.py                                     # an embedded S3
    python examples/duckdb_query.py --endpoint-url http://127.0.0.1:9000   # `lakelock serve`

With ``--endpoint-url`` the lake is ``s3://example-lake/`` on that endpoint (created if
missing), reached with the embedded endpoint's development credentials. DuckDB gets the
endpoint, region and credentials from the Lake's own boto3 client: nothing is configured
twice. Re-running it appends nothing (each day has its commit id).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

import boto3
import pyarrow as pa
import pyarrow.compute as pc

import lakelock
from lakelock.testing import S3Endpoint, client_kwargs

BUCKET = "example-lake"


def orders(day: int) -> pa.Table:
    """Stand-in for a day's extract: ``day + 1`` orders."""
    count = day + 1
    return pa.table(
        {
            "order_id": [day * 100 + i for i in range(count)],
            "amount": [10.0 * (i + 1) for i in range(count)],
            "day": pa.array([day] * count, pa.int16()),
        }
    )


def run(lake: lakelock.Lake) -> None:
    for day in (1, 2):
        landed = lake.append(
            "orders", orders(day), partition_by=["day"], commit_id=f"orders-day-{day}"
        )
    # The lake as it was when day 2 landed, before day 3: a re-run, whose appends commit
    # nothing and report the recorded versions, reads the same version.
    before = lake.registry.read(version=landed.version)
    lake.append("orders", orders(3), partition_by=["day"], commit_id="orders-day-3")

    # The current snapshot; the filter prunes day 1 before anything is read.
    con = lake.scan("orders", filter=pc.field("day") >= 2).to_duckdb("orders")
    # The older snapshot, in the same DuckDB session.
    lake.scan("orders", snapshot=before).to_duckdb("orders_before", connection=con)
    query = """
        SELECT day, count(*) AS orders, sum(amount) AS total
        FROM {table} GROUP BY day ORDER BY day
    """
    for table in ("orders", "orders_before"):
        print(f"{table}:")
        for day, count, total in con.sql(query.format(table=table)).fetchall():
            print(f"  day {day}: {count} orders, total {total:.2f}")


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
    return lakelock.Lake(BUCKET, s3=client)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint-url", help="an S3 endpoint such as `lakelock serve`'s")
    options = parser.parse_args()
    with open_lake(options.endpoint_url) as lake:
        run(lake)


if __name__ == "__main__":
    main()
