"""Registry commit throughput and cost, printed as tables.

    python benchmarks/bench_registry.py                 # throughput + growth (a few minutes)
    python benchmarks/bench_registry.py --quick         # smaller, for a smoke run
    python benchmarks/bench_registry.py --throughput-only --writers 16 --latencies 20 \
        --group on --repeats 3                          # one row, three times
    python benchmarks/bench_registry.py --history 0,20000,100000 --seconds 8   # part 3 only
    python benchmarks/bench_registry.py --point-read 1000,20000 --latencies 0,20  # part 4 only

Part 1: W concurrent writers (threads of one process) committing one small partition each
time, for 1, 4 and 16 writers, at 0 ms and 20 ms injected latency per S3 request, with group
commit on (one Registry shared, commits merged into one CAS) and off (a Registry per writer,
every commit its own CAS). Prints commits/s, mean attempts per commit, S3 requests per commit
(counted at the endpoint) and failures.

Part 2: the cost of a one-row ``lake.append`` into an existing partition as the lake grows from
1,000 to 1,000,000 partitions (one file each), all in one dataset and spread over 50 datasets:
wall time, S3 requests and bytes moved (request + response bodies, counted at the endpoint),
and the time a fresh ``Lake`` takes to read one partition. The grown index is written straight
through the format's own tree code, as if that many commits had happened; the manifests of
partitions the measured operations never read are not materialised.

Part 3 (``--history``): in-process group commit (16 writers, 20 ms unless told) on a dataset
whose commit history has grown: its commit-id index seeded with up to 100,000 generated commit
ids, written as the ordered tree lakelock writes now and as the hash trie it wrote before (a
lake with such a trie keeps one; 128 ids make a young trie, past its first split). Prints
commits/s, S3 requests, index-node PUTs and KB moved per commit: what a commit costs on a
dataset that has had many commits.

Part 4 (``--point-read``): a fresh ``Lake`` reading one partition of a dataset of N partitions
that one commit added (one file each: a single manifest, or intent, lists them all), with the
manifest's per-partition parts recorded in the index (how lakelock writes it now) and without
(a manifest written before: read whole). The partition is given exactly, or by a filter that
pins the partition column (``pc.field("p") == 0``: looked up the same way), or by a range
that admits it alone (the index walked, only that partition's part read).
Prints S3 GETs, KB read and the median time: the read's cost should grow with the index's
depth only.

The endpoint runs in its own process, so server and clients do not share one interpreter.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import secrets
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import boto3
import pyarrow as pa
import pyarrow.compute as pc

from lakelock import Lake
from lakelock._datafile import DataFile
from lakelock._datasets import table_schema
from lakelock._registry import REGISTRY_KEY, Registry, RegistryDoc, new_commit_id
from lakelock._registry._changes import delta_manifests
from lakelock._registry._document import (
    ManifestRef,
    PartitionState,
    encode_schema,
    serialize_registry,
)
from lakelock._registry._manifest import (
    Manifest,
    manifest_key,
    partition_parts,
    serialize_manifest,
)
from lakelock._registry._objects import partition_entry
from lakelock._registry._snapshot import (
    DatasetEntry,
    Snapshot,
    Totals,
    serialize_snapshot,
    snapshot_key,
)
from lakelock._registry._tree import (
    EMPTY,
    Node,
    node_body,
    node_key,
    ordered_update,
    tree_update,
)
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
    node_puts_per_commit: float = 0.0
    kb_per_commit: float = 0.0


def datafile(dataset: str, partition: str, name: str) -> DataFile:
    key = f"datasets/{dataset}/{partition}/{name}"
    return DataFile(dataset, key, partition, 1000, 10, "sha256:00", '"0"', "w")


def seed_history(store: ObjectStore, registry: Registry, ids: int, *, ordered_index: bool) -> None:
    """Give dataset ``bench`` a commit-id index of ``ids`` generated commit ids (10 ms apart,
    ending now), written RECENT_IDS at a time as snapshots write them: as an ordered tree, or
    as a hash trie (the index before it was ordered)."""
    if not ids:
        return
    doc = registry._read_root()[0]
    entry = doc.entries["bench"]
    snap = registry.internals.objects.snapshot(entry.snapshot)
    writes: list[tuple[str, bytes]] = []
    nodes: dict[str, Node] = {}

    def store_node(node: Node) -> str:
        body = node_body(node)
        key = node_key("bench", body, uuid.uuid4().hex)
        nodes[key] = node
        writes.append((key, body))
        return key

    update = ordered_update if ordered_index else tree_update
    top, now = snap.commit_ids, time.time() - ids / 100
    value = {"version": 1, "at": now, "operation": "append"}
    for _ in range(0, ids, 64):
        batch = {}
        for _ in range(64):
            now += 0.01
            batch[new_commit_id(now, token=secrets.token_hex(10))] = value
        top = update(top, batch, load=lambda key: nodes[key], store=store_node)
    # Only the nodes the final tree references are needed; the rest were overwritten.
    live: set[str] = set()
    stack = [top]
    while stack:
        node = stack.pop()
        for ref in node.children.values():
            live.add(ref.key)
            stack.append(nodes[ref.key])
    seeded = dataclasses.replace(snap, commit_ids=top)
    body = serialize_snapshot(seeded, encode_schema)
    key = snapshot_key("bench", body, "seed")
    registry.internals.objects.create_all([(k, b) for k, b in writes if k in live] + [(key, body)])
    root = dataclasses.replace(
        doc,
        version=doc.version + 1,
        entries={**doc.entries, "bench": dataclasses.replace(entry, snapshot=key)},
    )
    store.put(REGISTRY_KEY, serialize_registry(root), mode="overwrite")


def throughput(
    endpoint: S3Endpoint,
    *,
    writers: int,
    latency_ms: int,
    group: bool,
    seconds: float,
    bucket: str,
    history: int = 0,
    ordered_index: bool = True,
) -> Run:
    endpoint.clear_faults()
    if latency_ms:
        endpoint.inject("latency", delay=latency_ms / 1000, jitter=latency_ms / 10000)
    retry = RetryPolicy(max_attempts=200, max_elapsed=120)
    client = boto3.client("s3", **client_kwargs(endpoint.url))
    store = ObjectStore(client, bucket, retry=retry)
    shared = Registry(store, retry=retry, group_commit=True)
    shared.commit("bench", partition_by=["w"])  # the root exists before the clock starts
    if history:
        seed_history(store, shared, history, ordered_index=ordered_index)
        shared = Registry(store, retry=retry, group_commit=True)
        shared.commit("bench", add=[datafile("bench", "w=0", "warm")])
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
    areas = endpoint.areas()
    traffic = endpoint.traffic()
    endpoint.clear_faults()
    done = max(1, len(latencies))
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
        node_puts_per_commit=areas.get("PutObject metastore/nodes", 0) / done,
        kb_per_commit=(traffic["in"] + traffic["out"]) / 1000 / done,
    )


def grown_lake(lake: Lake, datasets: int, partitions: int) -> None:
    """A format-2 lake with ``partitions`` one-file partitions spread over ``datasets``
    datasets; partition ``p=0000000`` of each holds a real file (the one the benchmark reads)."""
    objects = lake.registry.internals.objects
    seed = pa.table({"id": [0], "p": [0]})
    entries = {}
    writes: list[tuple[str, bytes]] = []
    for d in range(datasets):
        name = f"ds{d:02d}"
        files = lake.write(name, seed, partition_by=["p"])
        ((ref, body),) = delta_manifests(name, files, nonce="seed").values()
        lake.store.put(ref.key, body, mode="create")
        real = partition_entry(PartitionState("p=0", (ref,), 1))
        fake = {
            "manifests": [
                {
                    "key": f"metastore/manifests/{name}/unread",
                    "files": 1,
                    "records": 1,
                    "size": 1000,
                }
            ],
            "updated_version": 1,
        }
        changes = {f"p={n}": fake for n in range(1, partitions // datasets)}
        changes["p=0"] = real

        def store(node: Node, name: str = name) -> str:
            body = node_body(node)
            key = node_key(name, body, uuid.uuid4().hex)
            writes.append((key, body))
            return key

        top = tree_update(EMPTY, changes, load=objects.node, store=store)
        snap = Snapshot(
            dataset=name,
            version=1,
            parent=None,
            at=time.time(),
            created_at="",
            updated_at="",
            created_version=1,
            commits=(),
            schema=table_schema(seed, ("p",)),
            schema_version=1,
            partition_by=("p",),
            properties={},
            totals=Totals(len(changes), len(changes), len(changes), 1000 * len(changes)),
            partitions=top,
            commit_ids=EMPTY,
        )
        body = serialize_snapshot(snap, encode_schema)
        key = snapshot_key(name, body, "seed")
        writes.append((key, body))
        entries[name] = DatasetEntry(key, 1, 1, ("p",), snap.totals, "")
    objects.create_all(writes)
    root = RegistryDoc(version=1, updated_at="", entries=entries)
    lake.store.put(REGISTRY_KEY, serialize_registry(root), mode="create")


def shared_manifest_lake(lake: Lake, partitions: int, *, parts: bool) -> None:
    """Dataset ``ev`` of ``partitions`` one-file partitions, all listed by one manifest (as
    one commit of that many partitions writes them); partition ``p=0``'s file is real."""
    name = "ev"
    (real,) = lake.write(name, pa.table({"id": [0], "p": [0]}), partition_by=["p"])
    files = sorted(
        [real, *(datafile(name, f"p={n}", "f.parquet") for n in range(1, partitions))],
        key=lambda f: f.key,
    )
    body = serialize_manifest(Manifest(name, None, tuple(files)))
    key = manifest_key(name, body, "seed")
    lake.store.put(key, body, mode="create")
    found = partition_parts(body, tuple(files)) if parts else {}
    changes = {
        f.partition_path: partition_entry(
            PartitionState(
                f.partition_path,
                (ManifestRef(key, 1, f.record_count, f.size, found.get(f.partition_path)),),
                1,
            )
        )
        for f in files
    }
    writes: list[tuple[str, bytes]] = []

    def store(node: Node) -> str:
        node_bytes = node_body(node)
        node_at = node_key(name, node_bytes, uuid.uuid4().hex)
        writes.append((node_at, node_bytes))
        return node_at

    top = tree_update(EMPTY, changes, load=lake.registry.internals.objects.node, store=store)
    totals = Totals(partitions, partitions, partitions, 1000 * partitions)
    snap = Snapshot(
        dataset=name,
        version=1,
        parent=None,
        at=time.time(),
        created_at="",
        updated_at="",
        created_version=1,
        commits=(),
        schema=table_schema(pa.table({"id": [0], "p": [0]}), ("p",)),
        schema_version=1,
        partition_by=("p",),
        properties={},
        totals=totals,
        partitions=top,
        commit_ids=EMPTY,
    )
    snap_body = serialize_snapshot(snap, encode_schema)
    snap_key = snapshot_key(name, snap_body, "seed")
    writes.append((snap_key, snap_body))
    lake.registry.internals.objects.create_all(writes)
    entry = DatasetEntry(snap_key, 1, 1, ("p",), totals, "")
    root = RegistryDoc(version=1, updated_at="", entries={name: entry})
    lake.store.put(REGISTRY_KEY, serialize_registry(root), mode="create")


#: Part 4's reads of partition ``p=0``: given exactly; by a filter that pins it (looked up as
#: the exact one is); by a range that admits it alone, which lakelock cannot look up (every
#: index node is read, then only the parts of the partitions the range admits).
POINT_READS: dict[str, Callable[[Lake], pa.Table]] = {
    'partitions=["p=0"]': lambda lake: lake.read("ev", partitions=["p=0"]),
    'filter=pc.field("p") == 0': lambda lake: lake.read("ev", filter=pc.field("p") == 0),
    "filter=(p >= 0) & (p < 1)": lambda lake: lake.read(
        "ev", filter=(pc.field("p") >= 0) & (pc.field("p") < 1)
    ),
}


def point_read(endpoint: S3Endpoint, sizes: tuple[int, ...], latencies: tuple[int, ...]) -> None:
    """Part 4: a fresh Lake reading one partition, given exactly or by a filter, as the
    dataset grows."""
    print("# a fresh Lake reads one partition (median of 7)\n")
    print("| partitions | index | read | latency | GETs | KB read | ms |")
    print("|---:|:---|:---|---:|---:|---:|---:|")
    for parts in (True, False):
        for size in sizes:
            bucket = f"point-{size}-{'parts' if parts else 'whole'}"
            endpoint.create_bucket(bucket)
            client = boto3.client("s3", **client_kwargs(endpoint.url))
            shared_manifest_lake(Lake(bucket, s3=client), size, parts=parts)
            reads = POINT_READS if parts else dict(list(POINT_READS.items())[:1])
            for latency in latencies:
                endpoint.clear_faults()
                if latency:
                    endpoint.inject("latency", delay=latency / 1000)
                for name, read in reads.items():
                    times, gets, moved = [], [], []
                    for _ in range(7):
                        endpoint.reset_stats()
                        fresh = Lake(bucket, s3=client)
                        started = time.perf_counter()
                        assert read(fresh).num_rows == 1
                        times.append(time.perf_counter() - started)
                        gets.append(endpoint.stats().get("GetObject", 0))
                        moved.append(endpoint.traffic()["out"])
                    print(
                        f"| {size:,} | {'parts' if parts else 'whole manifest'} | `{name}` "
                        f"| {latency} ms | {statistics.mean(gets):.0f} "
                        f"| {statistics.median(moved) / 1000:.1f} "
                        f"| {1000 * statistics.median(times):.1f} |",
                        flush=True,
                    )
                endpoint.clear_faults()


def growth(
    endpoint: S3Endpoint, sizes: list[int], datasets: int, repeats: int
) -> Iterator[tuple[int, float, float, float, float]]:
    """One row per lake size, as soon as it is measured."""
    for size in sizes:
        bucket = f"grow-{datasets}-{size}"
        endpoint.create_bucket(bucket)
        client = boto3.client("s3", **client_kwargs(endpoint.url))
        lake = Lake(bucket, s3=client)
        grown_lake(lake, datasets, size)
        lake = Lake(bucket, s3=client)
        lake.append("ds00", pa.table({"id": [1], "p": [0]}), partition_by=["p"])  # warm
        times, requests, moved = [], [], []
        for r in range(repeats):
            endpoint.reset_stats()
            started = time.perf_counter()
            lake.append("ds00", pa.table({"id": [r], "p": [0]}), partition_by=["p"])
            times.append(time.perf_counter() - started)
            requests.append(sum(endpoint.stats().values()))
            traffic = endpoint.traffic()
            moved.append(traffic["in"] + traffic["out"])
        reads = []
        for _ in range(repeats):
            fresh = Lake(bucket, s3=client)
            started = time.perf_counter()
            fresh.read("ds00", partitions=["p=0"])
            reads.append(time.perf_counter() - started)
        yield (
            size,
            1000 * statistics.median(times),
            statistics.mean(requests),
            statistics.median(moved) / 1000,
            1000 * statistics.median(reads),
        )


def history(endpoint: S3Endpoint, args: argparse.Namespace, seconds: float) -> None:
    """Part 3: group-commit throughput and cost as the dataset's commit history grows, with
    the commit-id index ordered (now) and hashed (before), taking turns."""
    latency = args.latencies[0] if args.latencies != (0, 20) else 20
    writers = args.writers[0] if args.writers != (1, 4, 16) else 16
    print(
        f"# {writers} writers, one Registry, {latency} ms, {seconds:.1f} s per row: commits "
        "on a dataset whose commit-id index holds N ids\n"
    )
    print(
        "| ids in index | index | run | commits/s | S3 req/commit | node PUTs/commit "
        "| KB/commit | p50 ms | p99 ms | failures |"
    )
    print("|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|")
    n = 0
    for ids in args.history:
        for repeat in range(1, args.repeats + 1):
            # An empty index is ordered from the start: there is no hash trie to compare.
            for ordered_index in (True, False) if ids else (True,):
                n += 1
                bucket = f"history-{n}"
                endpoint.create_bucket(bucket)
                run = throughput(
                    endpoint,
                    writers=writers,
                    latency_ms=latency,
                    group=True,
                    seconds=seconds,
                    bucket=bucket,
                    history=ids,
                    ordered_index=ordered_index,
                )
                print(
                    f"| {ids:,} | {'ordered' if ordered_index else 'hash trie'} | {repeat} "
                    f"| {run.commits / run.seconds:.1f} | {run.requests_per_commit:.2f} "
                    f"| {run.node_puts_per_commit:.2f} | {run.kb_per_commit:.1f} "
                    f"| {run.p50_ms:.0f} | {run.p99_ms:.0f} | {run.failures} |",
                    flush=True,
                )


def counts(text: str) -> tuple[int, ...]:
    """``"1,4,16"`` as (1, 4, 16)."""
    return tuple(int(part) for part in text.split(","))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer sizes")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--growth-only", action="store_true", help="skip the throughput part")
    parser.add_argument("--throughput-only", action="store_true", help="skip the growth part")
    parser.add_argument(
        "--writers", type=counts, default=(1, 4, 16), help="writer counts, e.g. 16 or 1,4,16"
    )
    parser.add_argument(
        "--latencies", type=counts, default=(0, 20), help="injected latencies in ms, e.g. 20"
    )
    parser.add_argument(
        "--group",
        choices=("on", "off", "both"),
        default="both",
        help="group commit on, off or both (default)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each throughput row (one line each)"
    )
    parser.add_argument(
        "--history",
        type=counts,
        default=None,
        help="only part 3: commit-id index sizes to seed, e.g. 0,1000,20000,100000",
    )
    parser.add_argument(
        "--point-read",
        type=counts,
        default=None,
        help="only part 4: partition counts, e.g. 1000,20000 (latencies from --latencies)",
    )
    args = parser.parse_args()
    seconds = args.seconds or (1.5 if args.quick else 4.0)
    groups = {"on": (True,), "off": (False,), "both": (False, True)}[args.group]
    with S3Endpoint(mode="process") as endpoint:
        if args.point_read is not None:
            point_read(endpoint, args.point_read, args.latencies)
            return
        if args.history is not None:
            history(endpoint, args, seconds)
            return
        print(f"# registry throughput: {seconds:.1f} s per configuration\n")
        print(
            "| writers | latency | group commit | commits/s | attempts/commit "
            "| S3 req/commit | p50 ms | p99 ms | failures |"
        )
        print("|---:|---:|:---:|---:|---:|---:|---:|---:|---:|")
        rows = [
            (latency, writers, group)
            for latency in (() if args.growth_only else args.latencies)
            for writers in args.writers
            for group in groups
            for _ in range(args.repeats)
        ]
        for n, (latency, writers, group) in enumerate(rows, 1):
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
        if args.throughput_only:
            return
        sizes = [1_000, 20_000] if args.quick else [1_000, 10_000, 20_000, 100_000, 1_000_000]
        for datasets in (1, 50):
            print(
                f"\n# one-row append as the lake grows: {datasets} dataset(s), one file per "
                "partition (median of 5)\n"
            )
            print("| partitions | append ms | S3 requests | KB moved | fresh Lake read ms |")
            print("|---:|---:|---:|---:|---:|")
            for size, ms, requests, kb, read_ms in growth(endpoint, sizes, datasets, repeats=5):
                print(
                    f"| {size:,} | {ms:.1f} | {requests:.1f} | {kb:.1f} | {read_ms:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
