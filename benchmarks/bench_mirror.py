"""Mirroring a dataset's versions to Iceberg and Delta views, printed as tables.

    python benchmarks/bench_mirror.py                    # 10,000 partitions, 1,000 versions
    python benchmarks/bench_mirror.py --versions 400 --step 130   # what BENCHMARKS.md ran

The dataset is built through ``registry.commit`` with synthetic ``DataFile``s (no parquet is
written: mirroring never reads data files, only the registry): version 1 adds one file in
each of ``--partitions`` partitions, every later version appends one file to a random
partition. Then:

1. one ``lake.mirror`` of every version, per format (Delta, then Iceberg), from a fresh
   ``Lake``: wall time, S3 requests by operation and bytes moved (counted at the endpoint);
2. the cost of mirroring one new version, after every ``--step`` versions mirrored: one more
   commit, then a mirror from a fresh Lake, per format: requests, bytes written and read.

The endpoint runs in its own process, so server and client do not share one interpreter.
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from collections.abc import Callable

import pyarrow as pa

from lakelock import Lake
from lakelock._datafile import DataFile
from lakelock._stats import ColumnStats, FileStats
from lakelock.testing import S3Endpoint

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.int32())])


def datafile(partition: int, n: int) -> DataFile:
    path = f"day={partition}"
    key = f"datasets/bench/{path}/part-{uuid.uuid4().hex}.parquet"
    stats = FileStats((ColumnStats("id", 0, None, n * 10, n * 10 + 9),))
    return DataFile("bench", key, path, 1000, 10, "sha256:00", '"0"', "w", stats)


def build(lake: Lake, partitions: int, versions: int, rng: random.Random) -> None:
    lake.registry.commit(
        "bench",
        add=[datafile(p, p) for p in range(partitions)],
        schema=SCHEMA,
        partition_by=["day"],
    )
    for v in range(1, versions):
        lake.registry.commit("bench", add=[datafile(rng.randrange(partitions), v)])


def measure(
    endpoint: S3Endpoint, action: Callable[[], object]
) -> tuple[float, dict[str, int], dict[str, int]]:
    endpoint.reset_stats()
    start = time.perf_counter()
    action()
    return time.perf_counter() - start, endpoint.stats(), endpoint.traffic()


def mirror_once(endpoint: S3Endpoint, fmt: str) -> Callable[[], object]:
    """A mirror of one format by a fresh Lake (nothing cached)."""
    return lambda: Lake("bench-mirror", s3=endpoint.client()).mirror("bench", (fmt,))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--versions", type=int, default=1_000)
    parser.add_argument("--step", type=int, default=0, help="growth sample every N versions")
    args = parser.parse_args()
    step = args.step or max(1, args.versions // 4)
    rng = random.Random(7)
    with S3Endpoint(mode="process") as endpoint:
        endpoint.create_bucket("bench-mirror")
        lake = Lake("bench-mirror", s3=endpoint.client())
        start = time.perf_counter()
        build(lake, args.partitions, 1, rng)
        built = 1
        print(
            f"dataset: {args.partitions} partitions, {args.versions} versions "
            "(synthetic files, registry.commit)"
        )
        print()
        print(
            "| format | versions mirrored | seconds | ms/version | requests | by operation "
            "| MB written | MB read |"
        )
        print("|---|---:|---:|---:|---:|---|---:|---:|")
        growth: list[tuple[int, str, float, dict[str, int], dict[str, int]]] = []
        mirrored = 0
        while built < args.versions:
            target = min(args.versions, built + step)
            for v in range(built, target):
                lake.registry.commit("bench", add=[datafile(rng.randrange(args.partitions), v)])
            built = target
            for fmt in ("delta", "iceberg"):
                seconds, stats, traffic = measure(endpoint, mirror_once(endpoint, fmt))
                versions = built - mirrored
                print(
                    f"| {fmt} | {versions} (to version {built}) | {seconds:.1f} | "
                    f"{1000 * seconds / versions:.1f} | {sum(stats.values())} | "
                    + ", ".join(f"{k} {n}" for k, n in sorted(stats.items()))
                    + f" | {traffic['in'] / 1e6:.1f} | {traffic['out'] / 1e6:.1f} |"
                )
            mirrored = built
            if built >= args.versions:
                break
            # One more version, mirrored alone by a fresh Lake: the marginal cost now.
            lake.registry.commit("bench", add=[datafile(rng.randrange(args.partitions), built)])
            built += 1
            for fmt in ("delta", "iceberg"):
                seconds, stats, traffic = measure(endpoint, mirror_once(endpoint, fmt))
                growth.append((built, fmt, seconds, stats, traffic))
            mirrored = built
        print()
        print(f"(built and mirrored in {time.perf_counter() - start:.0f} s)")
        print()
        print("One new version, mirrored by a fresh Lake, as the view grows:")
        print()
        print("| view at version | format | ms | requests | by operation | KB written | KB read |")
        print("|---:|---|---:|---:|---|---:|---:|")
        for version, fmt, seconds, stats, traffic in growth:
            print(
                f"| {version} | {fmt} | {1000 * seconds:.0f} | {sum(stats.values())} | "
                + ", ".join(f"{k} {n}" for k, n in sorted(stats.items()))
                + f" | {traffic['in'] / 1e3:.1f} | {traffic['out'] / 1e3:.1f} |"
            )


if __name__ == "__main__":
    main()
