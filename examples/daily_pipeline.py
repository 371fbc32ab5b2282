"""A daily ETL job as several machines would run it: append a day idempotently, then let
whichever instance holds the lease publish the day from staging into the main dataset.

    python examples/daily_pipeline.py                         # against an embedded S3
    python examples/daily_pipeline.py s3://bucket/lake        # against a real bucket
    python examples/daily_pipeline.py s3://bucket/lake --endpoint-url http://127.0.0.1:9000
                                                              # MinIO, `lakelock serve`...

Re-running it for the same day changes nothing (commit ids and file names are the day's).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
from collections.abc import Iterator

import pyarrow as pa

import lakelock
from lakelock.testing import S3Endpoint


def extract(day: dt.date) -> pa.Table:
    """Stand-in for the real source: one row per customer seen that day."""
    customers = [101, 102, 103]
    return pa.table(
        {
            "customer_id": customers,
            "visits": [day.day, day.day + 1, day.day + 2],
            "year": [day.year] * 3,
            "month": [day.month] * 3,
            "day": [day.day] * 3,
        }
    )


def run(lake: lakelock.Lake, day: dt.date) -> None:
    partition = f"year={day.year}/month={day.month}/day={day.day}"
    staged = lake.append(
        "staging_visits",
        extract(day),
        partition_by=["year", "month", "day"],
        commit_id=f"stage-{day}",
        file_name=f"visits-{day}.parquet",
    )
    print(
        f"staged {day}: registry version {staged.version}"
        f"{' (already done)' if staged.already_committed else ''}"
    )
    lease = lake.lease("publisher", ttl=30)
    if not lease.try_acquire():
        print("another instance is publishing; done")
        return
    try:
        visits = lake.registry.read().datasets.get("visits")
        if visits is None or partition not in visits.partitions:
            result = lake.rename_partition("staging_visits", partition, to_dataset="visits")
            print(f"published {partition} at version {result.version}")
        print(f"visits now has {lake.read('visits').num_rows} rows")
    finally:
        lease.release()


@contextlib.contextmanager
def embedded_lake() -> Iterator[lakelock.Lake]:
    with S3Endpoint() as s3:
        s3.create_bucket("example-lake")
        yield lakelock.Lake("example-lake", s3=s3.client())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", help="s3://bucket[/prefix] (default: an embedded S3)")
    parser.add_argument("--endpoint-url", help="S3 endpoint (default: AWS)")
    args = parser.parse_args(argv)
    day = dt.date(2024, 1, 15)
    if args.url is None:
        if args.endpoint_url is not None:
            parser.error("--endpoint-url needs the lake's s3:// URL")
        with embedded_lake() as lake:
            run(lake, day)
            run(lake, day)  # a re-run: nothing is appended or published twice
        return 0
    try:
        run(lakelock.Lake.from_url(args.url, endpoint_url=args.endpoint_url), day)
    except lakelock.errors.LakelockError as error:
        # A pipeline's operator wants the one line that says what is wrong, not a traceback.
        print(f"daily_pipeline: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
