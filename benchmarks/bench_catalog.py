"""What one request to the Iceberg REST catalog costs, and how many commits it takes a
second beside pyiceberg's own SQLite catalog, as tables.

    python benchmarks/bench_catalog.py            # 10 and 1,000 partitions, 0 and 20 ms
    python benchmarks/bench_catalog.py --quick    # fewer repeats, for a smoke run
    python benchmarks/bench_catalog.py --commits  # commits/s: lakelock catalog vs SQLite

**Commits** (``--commits``, extra ``bench``): pyiceberg appends the same 100-row batch (two
int64 columns) ``--appends`` times, one writer, or four writers on four tables at once
(threads, one table each), through ``RestCatalog`` on ``lakelock catalog`` (in this process,
port 0) and through pyiceberg's ``SqlCatalog`` on a SQLite file (a warehouse in another bucket
of the same endpoint); at 0 and 20 ms added to every S3 request. Per cell: commits per
second (wall clock over all appends) and the S3 requests per commit, all of them (the
engine's and, for lakelock, the catalog's: the registry commit, reading the engine's
manifests and file, mirroring the view the answer carries).

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
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
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


#: The S3 keys the engine writes with (the endpoint checks no signature).
ENGINE_KEYS = {"s3.access-key-id": "engine", "s3.secret-access-key": "engine"}


def batch() -> pa.Table:
    return pa.table({"day": pa.array([1] * 100, pa.int64()), "n": pa.array(range(100), pa.int64())})


def appends(s3: S3Endpoint, tables: list[Any], count: int, latency: float) -> tuple[float, float]:
    """Commits per second of ``count`` appends to each of ``tables`` (one thread each), and
    the S3 requests per commit."""
    rows = batch()
    for table in tables:
        table.append(rows)  # warm: the first commit of each table is not timed
    if latency:
        s3.inject("latency", delay=latency)
    s3.reset_stats()
    errors: list[BaseException] = []

    def write(table: Any) -> None:
        try:
            for _ in range(count):
                table.append(rows)
        except BaseException as error:  # reported after the run
            errors.append(error)

    threads = [threading.Thread(target=write, args=(table,)) for table in tables]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    requests = sum(s3.stats().values())
    s3.clear_faults()
    if errors:
        raise errors[0]
    commits = count * len(tables)
    return commits / elapsed, requests / commits


def commits_cell(
    s3: S3Endpoint, writers: int, latency: float, count: int, scratch: Path
) -> dict[str, tuple[float, float]]:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog

    schema = batch().schema
    name = f"{writers}-{int(latency * 1000)}"
    s3.create_bucket(f"commits-lakelock-{name}")
    s3.create_bucket(f"commits-sqlite-{name}")
    lake = Lake(f"commits-lakelock-{name}", s3=s3.client())
    results: dict[str, tuple[float, float]] = {}
    with CatalogServer(LakeCatalog(lake), port=0) as server:
        rest = RestCatalog("lakelock", uri=server.url, **ENGINE_KEYS)
        tables = [rest.create_table(f"lake.t{w}", schema) for w in range(writers)]
        results["lakelock catalog"] = appends(s3, tables, count, latency)
    sql = SqlCatalog(
        "sqlite",
        uri=f"sqlite:///{scratch / f'{name}.db'}",
        warehouse=f"s3://commits-sqlite-{name}/warehouse",
        **{"s3.endpoint": s3.url, "s3.region": "us-east-1", **ENGINE_KEYS},
    )
    sql.create_namespace("bench")
    tables = [sql.create_table(f"bench.t{w}", schema) for w in range(writers)]
    results["pyiceberg SqlCatalog (SQLite)"] = appends(s3, tables, count, latency)
    return results


def commits_main(count: int) -> None:
    results: dict[tuple[int, float], dict[str, tuple[float, float]]] = {}
    with S3Endpoint(mode="process") as s3, tempfile.TemporaryDirectory() as scratch:
        for writers in (1, 4):
            for latency in (0.0, 0.02):
                cell_ = commits_cell(s3, writers, latency, count, Path(scratch))
                results[writers, latency] = cell_
                print(f"done: {writers} writers, {latency * 1000:.0f} ms", flush=True)
    print()
    print(
        "| catalog | writers | 0 ms: commits/s | S3 req/commit | 20 ms: commits/s | S3 req/commit |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for catalog in results[1, 0.0]:
        for writers in (1, 4):
            cells = [catalog, str(writers)]
            for latency in (0.0, 0.02):
                rate, requests = results[writers, latency][catalog]
                cells += [f"{rate:.1f}", f"{requests:.1f}"]
            print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and partitions")
    parser.add_argument(
        "--commits", action="store_true", help="commits/s beside pyiceberg's SQLite catalog"
    )
    parser.add_argument(
        "--appends", type=int, default=20, help="appends per writer (--commits; default 20)"
    )
    args = parser.parse_args()
    if args.commits:
        commits_main(args.appends)
        return
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
