"""What one request to the read-only Iceberg REST catalog costs, as a table.

    python benchmarks/bench_catalog.py            # 10 and 1,000 partitions, 0 and 20 ms
    python benchmarks/bench_catalog.py --quick    # fewer repeats, for a smoke run

One dataset (``day`` int64 partitions, a few rows each) is appended partition by partition
(one commit per partition), then the catalog (``lakelock._catalog``, in this process, port 0)
is asked, over one kept-alive HTTP connection, for:

- ``config``: ``GET /v1/config``;
- ``list tables``: ``GET /v1/namespaces/lake/tables``;
- ``table exists``: ``HEAD /v1/namespaces/lake/tables/events``;
- ``load, current``: ``GET .../tables/events`` when the view is current (the registry read,
  no mirroring, the metadata from the catalog's cache);
- ``load, 1 new version``: the same right after one more append (to a new partition), so the
  load mirrors that one version first (timed: the load only, not the append).

Per cell: the median and p90 latency of the request as the client sees it, and the S3
requests the catalog made per request (counted at the endpoint, every operation), at 0 ms and
20 ms of latency added by the endpoint to every S3 request. The endpoint runs in its own
process.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog
from lakelock.testing import S3Endpoint

DATASET = "events"


def request(connection: http.client.HTTPConnection, method: str, path: str) -> None:
    connection.request(method, path)
    response = connection.getresponse()
    response.read()
    if response.status not in (200, 204):
        raise RuntimeError(f"{method} {path}: {response.status}")


def measure(
    s3: S3Endpoint, repeat: int, run: Callable[[], None], before: Callable[[], None] | None
) -> tuple[float, float, float]:
    """Median and p90 seconds of ``run``, and S3 requests per run (``before`` untimed)."""
    times: list[float] = []
    requests = 0
    for _ in range(repeat):
        if before is not None:
            before()
        s3.reset_stats()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
        requests += sum(s3.stats().values())
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))], requests / repeat


def cell(s3: S3Endpoint, partitions: int, latency: float, repeat: int) -> dict[str, Any]:
    bucket = f"catalog-{partitions}-{int(latency * 1000)}"
    s3.create_bucket(bucket)
    lake = Lake(bucket, s3=s3.client())
    for day in range(partitions):
        lake.append(DATASET, pa.table({"day": [day] * 3, "n": [1, 2, 3]}), partition_by=["day"])
    lake.mirror(DATASET, formats=("iceberg",))  # the views exist before the clock starts
    results: dict[str, Any] = {}
    catalog = LakeCatalog(lake)
    with CatalogServer(catalog, port=0) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        table = f"/v1/namespaces/lake/tables/{DATASET}"
        request(connection, "GET", table)  # the catalog's first load: view found, cached
        if latency:
            s3.inject("latency", delay=latency)
        next_day = iter(range(partitions, partitions + repeat))

        def append() -> None:
            lake.append(
                DATASET, pa.table({"day": [next(next_day)], "n": [0]}), partition_by=["day"]
            )

        ops: list[tuple[str, Callable[[], None], Callable[[], None] | None]] = [
            ("config", lambda: request(connection, "GET", "/v1/config"), None),
            ("list tables", lambda: request(connection, "GET", "/v1/namespaces/lake/tables"), None),
            ("table exists", lambda: request(connection, "HEAD", table), None),
            ("load, current", lambda: request(connection, "GET", table), None),
            ("load, 1 new version", lambda: request(connection, "GET", table), append),
        ]
        for name, run, before in ops:
            results[name] = measure(s3, repeat, run, before)
        connection.close()
        s3.clear_faults()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and partitions")
    args = parser.parse_args()
    sizes = (10, 200) if args.quick else (10, 1000)
    repeat = 5 if args.quick else 30
    results: dict[tuple[int, float], dict[str, Any]] = {}
    with S3Endpoint(mode="process") as s3:
        for partitions in sizes:
            for latency in (0.0, 0.02):
                results[partitions, latency] = cell(s3, partitions, latency, repeat)
                print(f"done: {partitions} partitions, {latency * 1000:.0f} ms", flush=True)
    print()
    print(
        "| request | partitions | "
        + " | ".join(["0 ms: p50 ms", "p90 ms", "S3 req"] * 1)
        + " | 20 ms: p50 ms | p90 ms | S3 req |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in results[sizes[0], 0.0]:
        for partitions in sizes:
            cells = [name, str(partitions)]
            for latency in (0.0, 0.02):
                p50, p90, requests = results[partitions, latency][name]
                cells += [f"{p50 * 1000:.1f}", f"{p90 * 1000:.1f}", f"{requests:.1f}"]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
