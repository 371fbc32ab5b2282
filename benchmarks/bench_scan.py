"""Reading a lake through ``lake.scan`` versus reading the same files directly, as a table.

    python benchmarks/bench_scan.py               # 2M rows over 30 partitions, 0 and 20 ms
    python benchmarks/bench_scan.py --quick       # 200k rows, for a smoke run

One dataset (``id`` int64, ``amount`` float64, ``name`` string, partitioned by ``day``
int16) is appended once. Each reader then materialises every row as an Arrow table:

- ``pyarrow.dataset`` over the same file paths with hive partitioning (the baseline);
- ``scan().to_arrow()`` (registry + manifests read, files fetched whole in parallel through
  boto3, checksums verified);
- ``scan().to_pyarrow_dataset()``;
- ``scan().to_duckdb()`` then ``SELECT *``, and DuckDB's ``read_parquet`` over the same files
  directly;
- ``scan().to_polars().collect()``, and Polars' ``scan_parquet`` over the same files directly.

The lakelock rows include planning the scan (reading the registry and the manifests). Each
figure is the median of ``--repeat`` runs, taken round robin across the readers (so that other
load on the machine hits them alike), at 0 ms and 20 ms of latency added by the endpoint to
every request. The endpoint runs in its own process.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

import lakelock
from lakelock._connection import Connection
from lakelock._engines import (
    duckdb_connection,
    polars_storage_options,
    pyarrow_filesystem,
)
from lakelock.testing import S3Endpoint

DATASET = "events"


def make_table(rows: int, partitions: int) -> pa.Table:
    rng = np.random.default_rng(7)
    ids = np.arange(rows, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "amount": rng.random(rows),
            "name": pa.array([f"customer-{i % 5000}" for i in range(rows)]),
            "day": pa.array((ids % partitions + 1).astype(np.int16)),
        }
    )


def timed(read: Callable[[], pa.Table], rows: int) -> float:
    start = time.perf_counter()
    table = read()
    seconds = time.perf_counter() - start
    if table.num_rows != rows:
        raise AssertionError(f"read {table.num_rows} rows, expected {rows}")
    return seconds


def readers(lake: lakelock.Lake) -> dict[str, Callable[[], pa.Table]]:
    files = lake.registry.files(DATASET)
    connection = Connection.of(lake.client)
    filesystem = pyarrow_filesystem(connection)
    base = f"{lake.bucket}/{lake.store.full_key(f'datasets/{DATASET}')}"
    paths = [f"{lake.bucket}/{lake.store.full_key(f.key)}" for f in files]
    urls = [f"s3://{path}" for path in paths]
    scope = f"s3://{lake.bucket}/{lake.prefix}"
    partitioning = ds.partitioning(pa.schema([("day", pa.int16())]), flavor="hive")

    def pyarrow_direct() -> pa.Table:
        dataset = ds.dataset(
            paths,
            filesystem=filesystem,
            format="parquet",
            partitioning=partitioning,
            partition_base_dir=base,
        )
        return dataset.to_table()

    def duckdb_scan() -> pa.Table:
        con = lake.scan(DATASET).to_duckdb("events")
        return con.sql("SELECT * FROM events").to_arrow_table()

    def duckdb_direct() -> pa.Table:
        con = duckdb_connection(connection, scope)
        listed = "[" + ", ".join(f"'{url}'" for url in urls) + "]"
        query = (
            f"SELECT * FROM read_parquet({listed}, hive_partitioning = true,"
            " hive_types = {'day': 'SMALLINT'})"
        )
        return con.sql(query).to_arrow_table()

    def polars_direct() -> pa.Table:
        frame = pl.scan_parquet(
            urls,
            hive_partitioning=True,
            hive_schema={"day": pl.Int16},
            storage_options=polars_storage_options(connection),
        )
        return frame.collect().to_arrow()

    return {
        "pyarrow.dataset, direct": pyarrow_direct,
        "scan().to_arrow()": lambda: lake.scan(DATASET).to_arrow(),
        "scan().to_pyarrow_dataset()": lambda: lake.scan(DATASET).to_pyarrow_dataset().to_table(),
        "scan().to_duckdb()": duckdb_scan,
        "duckdb read_parquet, direct": duckdb_direct,
        "scan().to_polars()": lambda: lake.scan(DATASET).to_polars().collect().to_arrow(),
        "polars scan_parquet, direct": polars_direct,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200k rows, 2 repeats")
    options = parser.parse_args()
    if options.quick:
        options.rows, options.repeat = 200_000, 2

    with S3Endpoint(mode="process") as s3:
        s3.create_bucket("bench")
        lake = lakelock.Lake("bench", prefix="lake", s3=s3.client())
        table = make_table(options.rows, options.partitions)
        lake.append(DATASET, table, partition_by=["day"])
        size = sum(f.size for f in lake.registry.files(DATASET))
        print(
            f"{options.rows:,} rows, {options.partitions} partitions, "
            f"{size / 2**20:.1f} MiB of parquet; median of {options.repeat} full reads"
        )
        results: dict[tuple[str, int], float] = {}
        for latency_ms in (0, 20):
            s3.clear_faults()
            if latency_ms:
                s3.inject("latency", delay=latency_ms / 1000)
            each = readers(lake)
            for read in each.values():
                timed(read, options.rows)  # warm up: imports, extension loading, pools
            # Round robin, so that load from elsewhere on the machine hits every reader alike.
            times: dict[str, list[float]] = {name: [] for name in each}
            for _ in range(options.repeat):
                for name, read in each.items():
                    times[name].append(timed(read, options.rows))
            for name, seconds in times.items():
                results[name, latency_ms] = statistics.median(seconds)
        s3.clear_faults()
        print_table(results)


def print_table(results: dict[tuple[str, int], float]) -> None:
    names = list(dict.fromkeys(name for name, _ in results))
    baseline = "pyarrow.dataset, direct"
    print()
    print("| reader | 0 ms: s | vs pyarrow | 20 ms: s | vs pyarrow |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        cells: list[Any] = [name]
        for latency_ms in (0, 20):
            seconds = results[name, latency_ms]
            cells += [f"{seconds:.2f}", f"{seconds / results[baseline, latency_ms]:.2f}x"]
        print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
