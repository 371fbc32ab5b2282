"""What a user's operations cost as the lake grows, printed as one table per size.

    python benchmarks/bench_sizes.py                          # small sizes, in seconds
    python benchmarks/bench_sizes.py --datasets 1,100,1000    # lakes of that many datasets
    python benchmarks/bench_sizes.py --versions 1,10,100,300  # one dataset, that many versions

Axis ``--datasets``: a lake of N one-partition datasets (made by N ordinary appends). Per
operation: a one-row ``lake.append`` into one dataset (warm ``Lake``), a fresh ``Lake``
reading one dataset, ``registry.read()`` from a fresh ``Lake``, ``registry.log()`` and
``registry.find_commit`` of a commit id that was never recorded.

Axis ``--versions``: one dataset with V versions (V one-row appends). Per operation: a
one-row append, a fresh read of the current version, ``lake.read(..., version=1)`` (time
travel to the oldest version: ``registry.read(version=1)`` alone loads no dataset until one is
asked for), ``lake.history`` and a dry-run ``lake.vacuum``.

Requests and KiB (request + response bodies) are counted at the embedded endpoint, which
runs in its own process; seconds are the client's wall time, with no injected latency.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import boto3
import pyarrow as pa

from lakelock import Lake
from lakelock.testing import S3Endpoint, client_kwargs


@dataclass(frozen=True)
class Cost:
    """One operation's cost at one size."""

    operation: str
    requests: int
    kib: float
    seconds: float


def counts(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part)


def measure(endpoint: S3Endpoint, operation: str, action: Callable[[], object]) -> Cost:
    endpoint.reset_stats()
    started = time.perf_counter()
    action()
    elapsed = time.perf_counter() - started
    requests = sum(endpoint.stats().values())
    traffic = endpoint.traffic()
    moved = (traffic.get("in", 0) + traffic.get("out", 0)) / 1024
    return Cost(operation, requests, moved, elapsed)


def row(value: int) -> pa.Table:
    return pa.table({"p": [0], "x": [value]})


def fresh(endpoint: S3Endpoint, bucket: str) -> Lake:
    return Lake(bucket, s3=boto3.client("s3", **client_kwargs(endpoint.url)))


def opened(
    endpoint: S3Endpoint, bucket: str, use: Callable[[Lake], object]
) -> Callable[[], object]:
    """An action that opens a fresh ``Lake`` inside the measurement (its first reads count)
    and closes it, so nothing it left running reaches the next operation's counts."""

    def action() -> object:
        lake = fresh(endpoint, bucket)
        try:
            return use(lake)
        finally:
            lake.close()

    return action


def print_table(title: str, costs: list[Cost]) -> None:
    print(f"\n## {title}\n")
    print("| operation | requests | KiB | seconds |")
    print("|:---|---:|---:|---:|")
    for cost in costs:
        print(f"| {cost.operation} | {cost.requests} | {cost.kib:.1f} | {cost.seconds:.3f} |")


def by_datasets(endpoint: S3Endpoint, size: int) -> list[Cost]:
    bucket = f"datasets-{size}"
    endpoint.create_bucket(bucket)
    lake = fresh(endpoint, bucket)
    for n in range(size):
        lake.append(f"d{n}", row(n), partition_by=["p"])
    costs = [
        measure(endpoint, "append one row", lambda: lake.append("d0", row(-1), partition_by=["p"])),
        measure(
            endpoint,
            "fresh Lake: read one dataset",
            opened(endpoint, bucket, lambda f: f.read("d0")),
        ),
        measure(
            endpoint,
            "fresh Lake: registry.read()",
            opened(endpoint, bucket, lambda f: f.registry.read()),
        ),
        measure(endpoint, "registry.log()", opened(endpoint, bucket, lambda f: f.registry.log())),
        measure(
            endpoint,
            "registry.find_commit(unknown id)",
            opened(endpoint, bucket, lambda f: f.registry.find_commit("never-recorded")),
        ),
    ]
    lake.close()
    return costs


def by_versions(endpoint: S3Endpoint, size: int) -> list[Cost]:
    bucket = f"versions-{size}"
    endpoint.create_bucket(bucket)
    lake = fresh(endpoint, bucket)
    for n in range(size):
        lake.append("d", row(n), partition_by=["p"])
    costs = [
        measure(endpoint, "append one row", lambda: lake.append("d", row(-1), partition_by=["p"])),
        measure(
            endpoint, "fresh Lake: read current", opened(endpoint, bucket, lambda f: f.read("d"))
        ),
        measure(
            endpoint,
            "fresh Lake: read(version=1)",
            opened(endpoint, bucket, lambda f: f.read("d", version=1)),
        ),
        measure(endpoint, "lake.history", opened(endpoint, bucket, lambda f: f.history("d"))),
        measure(endpoint, "lake.vacuum (dry run)", opened(endpoint, bucket, lambda f: f.vacuum())),
    ]
    lake.close()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", type=counts, default=(1, 10, 100))
    parser.add_argument("--versions", type=counts, default=(1, 10, 100))
    args = parser.parse_args()
    with S3Endpoint(mode="process") as endpoint:
        for size in args.datasets:
            print_table(f"{size} datasets", by_datasets(endpoint, size))
        for size in args.versions:
            print_table(f"one dataset, {size} versions", by_versions(endpoint, size))


if __name__ == "__main__":
    main()
