"""Registry commit throughput and cost, printed as tables.

    python benchmarks/bench_registry.py                 # throughput + growth (a few minutes)
    python benchmarks/bench_registry.py --quick         # smaller, for a smoke run

Part 1: W concurrent writers (threads of one process) committing one small partition each
time, for 1, 4 and 16 writers, at 0 ms and 20 ms injected latency per S3 request, with group
commit on (one Registry shared, commits merged into one CAS) and off (a Registry per writer,
every commit its own CAS). Prints commits/s, mean attempts per commit, S3 requests per commit
(counted at the endpoint) and failures.

Part 2: the cost of one commit as the registry grows from 1,000 to 1,000,000 registered files
(1,000 files per partition): wall time, requests and root size. It must stay nearly flat,
because a commit never rewrites file lists it does not change.

The endpoint runs in its own process, so server and clients do not share one interpreter.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import threading
import time
from dataclasses import dataclass

import boto3

from lakelock._datafile import DataFile
from lakelock._registry import REGISTRY_KEY, Registry, RegistryDoc
from lakelock._registry._changes import Change, apply_change, delta_manifests, seal
from lakelock._registry._document import serialize_registry
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.testing import S3Endpoint, client_kwargs


@dataclass
class Run:
    writers: int
    latency_ms: int
    group: bool
    commits: int
    seconds: float
    attempts: float
    requests_per_commit: float
    failures: int
    p50_ms: float
    p99_ms: float


def datafile(dataset: str, partition: str, name: str) -> DataFile:
    key = f"datasets/{dataset}/{partition}/{name}"
    return DataFile(dataset, key, partition, 1000, 10, "sha256:00", '"0"', "w")


def throughput(
    endpoint: S3Endpoint, *, writers: int, latency_ms: int, group: bool, seconds: float, bucket: str
) -> Run:
    endpoint.clear_faults()
    if latency_ms:
        endpoint.inject("latency", delay=latency_ms / 1000, jitter=latency_ms / 10000)
    retry = RetryPolicy(max_attempts=200, max_elapsed=120)
    client = boto3.client("s3", **client_kwargs(endpoint.url))
    store = ObjectStore(client, bucket, retry=retry)
    shared = Registry(store, retry=retry, group_commit=True)
    shared.commit("bench", partition_by=["w"])  # the root exists before the clock starts
    endpoint.reset_stats()
    stop = threading.Event()
    latencies: list[float] = []
    attempts: list[int] = []
    failures = 0
    lock = threading.Lock()

    def writer(n: int) -> None:
        nonlocal failures
        registry = shared if group else Registry(store, retry=retry, group_commit=False)
        i = 0
        while not stop.is_set():
            started = time.perf_counter()
            try:
                result = registry.commit("bench", add=[datafile("bench", f"w={n}", f"f{i}")])
            except Exception as error:
                with lock:
                    failures += 1
                    if failures == 1:
                        print(f"first failure: {type(error).__name__}: {error}", flush=True)
                continue
            finally:
                i += 1
            with lock:
                latencies.append(time.perf_counter() - started)
                attempts.append(result.attempts)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        futures = [pool.submit(writer, n) for n in range(writers)]
        time.sleep(seconds)
        stop.set()
        for f in futures:
            f.result()
    elapsed = time.perf_counter() - started
    requests = sum(endpoint.stats().values())
    endpoint.clear_faults()
    ordered = sorted(latencies) or [0.0]
    return Run(
        writers=writers,
        latency_ms=latency_ms,
        group=group,
        commits=len(latencies),
        seconds=elapsed,
        attempts=statistics.fmean(attempts) if attempts else 0.0,
        requests_per_commit=requests / max(1, len(latencies)),
        failures=failures,
        p50_ms=1000 * ordered[len(ordered) // 2],
        p99_ms=1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
    )


def grown_registry(store: ObjectStore, files: int, per_partition: int = 1000) -> None:
    """Write a registry with `files` files (manifests included) straight through the pure
    core, as if that many commits had happened."""
    doc = RegistryDoc()
    changes = []
    for p in range(max(1, files // per_partition)):
        group = [
            datafile("big", f"p={p:05d}", f"f{i:05d}") for i in range(min(per_partition, files))
        ]
        refs = {}
        for path, (ref, body) in delta_manifests("big", group, nonce=f"seed{p}").items():
            store.put(ref.key, body)
            refs[path] = ref
        change = Change(
            "big", f"seed-{p}", add=tuple(group), added_manifests=refs, partition_by=("p",)
        )
        applied = apply_change(doc, change, manifests={}, now="", next_version=1)
        doc = applied.doc
        changes.append((change, applied))
    doc = seal(doc, changes[-10:], now="", window=1000)
    store.put(REGISTRY_KEY, serialize_registry(doc), mode="overwrite")


def growth(
    endpoint: S3Endpoint, sizes: list[int], bucket_prefix: str, repeats: int
) -> list[tuple[int, float, float, int]]:
    rows = []
    for size in sizes:
        bucket = f"{bucket_prefix}-{size}"
        endpoint.create_bucket(bucket)
        client = boto3.client("s3", **client_kwargs(endpoint.url))
        store = ObjectStore(client, bucket)
        grown_registry(store, size)
        registry = Registry(store)
        times = []
        endpoint.reset_stats()
        for r in range(repeats):
            started = time.perf_counter()
            registry.commit("big", add=[datafile("big", "p=00000", f"new-{r}")])
            times.append(time.perf_counter() - started)
        requests = sum(endpoint.stats().values()) / repeats
        root = store.head(REGISTRY_KEY).size
        rows.append((size, 1000 * statistics.median(times), requests, root))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer sizes")
    parser.add_argument("--seconds", type=float, default=None)
    args = parser.parse_args()
    seconds = args.seconds or (1.5 if args.quick else 4.0)
    with S3Endpoint(mode="process") as endpoint:
        print(f"# registry throughput: {seconds:.1f} s per configuration\n")
        print(
            "| writers | latency | group commit | commits/s | attempts/commit "
            "| S3 req/commit | p50 ms | p99 ms | failures |"
        )
        print("|---:|---:|:---:|---:|---:|---:|---:|---:|---:|")
        n = 0
        for latency in (0, 20):
            for writers in (1, 4, 16):
                for group in (False, True):
                    n += 1
                    bucket = f"bench-{n}"
                    endpoint.create_bucket(bucket)
                    run = throughput(
                        endpoint,
                        writers=writers,
                        latency_ms=latency,
                        group=group,
                        seconds=seconds,
                        bucket=bucket,
                    )
                    print(
                        f"| {run.writers} | {run.latency_ms} ms | {'on' if run.group else 'off'} "
                        f"| {run.commits / run.seconds:.1f} | {run.attempts:.2f} "
                        f"| {run.requests_per_commit:.2f} | {run.p50_ms:.1f} "
                        f"| {run.p99_ms:.1f} | {run.failures} |",
                        flush=True,
                    )
        sizes = [1_000, 10_000, 100_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000]
        print("\n# cost of one commit as the registry grows (1,000 files/partition, median of 5)\n")
        print("| registered files | commit ms | S3 requests | root bytes |")
        print("|---:|---:|---:|---:|")
        for size, ms, requests, root in growth(endpoint, sizes, "grow", repeats=5):
            print(f"| {size:,} | {ms:.1f} | {requests:.1f} | {root:,} |", flush=True)


if __name__ == "__main__":
    main()
