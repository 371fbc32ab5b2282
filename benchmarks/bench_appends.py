"""Concurrent appends, lakelock side by side with delta-rs (``deltalake``), printed as a table.

    python benchmarks/bench_appends.py              # the full grid (about 8 minutes)
    python benchmarks/bench_appends.py --quick      # shorter cells, one repeat of fewer cells

W writers (1, 4, 16) each append a small table (100 rows, one partition: its own
``writer=<w>``) to one table, again and again, for a fixed time per cell, at 0 ms and 20 ms
injected latency per S3 request. Writers are threads of one process (lakelock: one ``Lake``
shared, so group commit merges concurrent appends into one CAS; delta-rs: one ``DeltaTable``
per thread) or processes (each with its own client, ``Lake`` or ``DeltaTable``: lakelock's
appends are intents that any process folds into its compare-and-swap, so group commit spans
processes too).

Both systems run against the same embedded endpoint (moto behind lakelock's gateway, in its
own process), in the same run, each cell on a fresh bucket whose table was created before the
clock starts; the two systems alternate which goes first. Per cell: commits/s, p50/p99 commit
latency, S3 requests per commit (counted at the endpoint, every operation), failures (appends
that raised), and the lakelock/delta-rs ratio of commits/s measured in the same repeat. Every
figure is the median over repeats; failures are summed. After each run the committed files are
counted (lakelock's registry, delta-rs's log) and compared with the appends that succeeded: a
lost or phantom commit is reported in the ``check`` column.

delta-rs commits by writing ``_delta_log/<version>.json`` with ``If-None-Match: *`` (its
default for S3 since 0.23; ``conditional_put=etag`` is passed anyway), and retries a lost race
on the next version itself (``max_commit_retries``, default 15); no unsafe rename, no DynamoDB.
Both systems run with their default retry budgets.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import queue
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3
import pyarrow as pa

DATASET = "events"
PARTITION_BY = ["writer"]
SYSTEMS = ("lakelock", "delta-rs")


# --- what one writer does ----------------------------------------------------------------------


def batch(writer: int, n: int, rows: int) -> pa.Table:
    """One append: ``rows`` rows of one partition (``writer``), the same for both systems."""
    return pa.table(
        {
            "writer": pa.array([writer] * rows, pa.int64()),
            "batch": pa.array([n] * rows, pa.int64()),
            "row": pa.array(range(rows), pa.int64()),
            "value": pa.array([float(i) * 0.5 for i in range(rows)], pa.float64()),
            "label": pa.array([f"w{writer}-b{n}-r{i}" for i in range(rows)], pa.string()),
        }
    )


def delta_options(url: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "lakelock",
        "AWS_SECRET_ACCESS_KEY": "lakelock-secret",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "conditional_put": "etag",
    }


def delta_uri(bucket: str) -> str:
    return f"s3://{bucket}/{DATASET}"


def open_lake(url: str, bucket: str) -> Any:
    from lakelock import Lake
    from lakelock.testing import client_kwargs

    return Lake(bucket, s3=boto3.client("s3", **client_kwargs(url)))


def open_handle(system: str, url: str, bucket: str) -> Any:
    """What one writer appends through: a ``Lake`` or a ``DeltaTable`` (loaded, so warm)."""
    if system == "lakelock":
        lake = open_lake(url, bucket)
        lake.registry.read()  # warm the connection like opening the DeltaTable does
        return lake
    from deltalake import DeltaTable

    return DeltaTable(delta_uri(bucket), storage_options=delta_options(url))


def append_once(system: str, handle: Any, table: pa.Table) -> None:
    """One append."""
    if system == "lakelock":
        handle.append(DATASET, table, partition_by=PARTITION_BY)
        return
    from deltalake import write_deltalake

    write_deltalake(handle, table, mode="append", partition_by=PARTITION_BY)


@dataclass
class Outcome:
    """What one writer did in one timed run."""

    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    first_error: str | None = None
    # CPU seconds the writer's process used during the loop (processes mode: all its threads).
    cpu_seconds: float = 0.0


def append_loop(system: str, handle: Any, writer: int, rows: int, deadline: float) -> Outcome:
    """Append until ``deadline`` (``time.monotonic``, shared by every process of a machine)."""
    out = Outcome()
    cpu = time.process_time()
    n = 0
    while time.monotonic() < deadline:
        table = batch(writer, n, rows)
        n += 1
        started = time.perf_counter()
        try:
            append_once(system, handle, table)
        except Exception as error:
            out.failures += 1
            if out.first_error is None:
                out.first_error = f"{type(error).__name__}: {str(error)[:200]}"
            continue
        out.latencies.append(time.perf_counter() - started)
    out.cpu_seconds = time.process_time() - cpu
    return out


def worker_main(index: int, tasks: Any, results: Any) -> None:
    """A writer process: ``prepare`` opens its own client and handle, ``go`` runs one timed
    loop; kept for the whole benchmark so that interpreter start-up is paid once."""
    import deltalake  # noqa: F401 - imported before the first run, not during it
    import pyarrow.acero  # noqa: F401 - lakelock's first partitioned write loads it (group_by)

    import lakelock.testing  # noqa: F401

    results.put(("up", index, None))
    handle: Any = None
    system = ""
    rows = 0
    while True:
        task = tasks.get()
        try:
            if task[0] == "stop":
                return
            if task[0] == "prepare":
                _, system, url, bucket, rows = task
                handle = None
                handle = open_handle(system, url, bucket)
                results.put(("ready", index, None))
            elif task[0] == "go":
                outcome = append_loop(system, handle, index, rows, task[1])
                results.put(("done", index, outcome))
        except Exception as error:
            results.put(("error", index, f"{type(error).__name__}: {error}"))


class ProcessPool:
    """Writer processes (spawned: delta-rs's runtime threads and boto3 do not survive fork)."""

    def __init__(self, size: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.results: Any = context.Queue()
        self.tasks: list[Any] = [context.Queue() for _ in range(size)]
        self.processes = [
            context.Process(target=worker_main, args=(i, self.tasks[i], self.results), daemon=True)
            for i in range(size)
        ]
        for p in self.processes:
            p.start()
        self.collect(size, "up")  # start-up done: it would steal CPU from the first runs

    def collect(self, count: int, kind: str, timeout: float = 300) -> dict[int, Any]:
        got: dict[int, Any] = {}
        while len(got) < count:
            try:
                tag, index, payload = self.results.get(timeout=timeout)
            except queue.Empty as error:
                raise RuntimeError(f"writer processes did not answer {kind!r}") from error
            if tag == "error":
                raise RuntimeError(f"writer process {index}: {payload}")
            if tag == kind:
                got[index] = payload
        return got

    def close(self) -> None:
        for t in self.tasks:
            t.put(("stop",))
        for p in self.processes:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


# --- one timed run -----------------------------------------------------------------------------


@dataclass
class Sample:
    system: str
    commits: int
    seconds: float
    requests: int
    failures: int
    p50_ms: float
    p99_ms: float
    # Each writer's first append pays for its start (a cold process, every writer starting at
    # once): the p99 of the others, and the mean of those.
    p99_later_ms: float
    first_mean_ms: float
    batch: float
    check: str
    first_error: str | None
    ops: dict[str, int] = field(default_factory=dict)
    traffic: dict[str, int] = field(default_factory=dict)
    # CPU seconds used during the run by the writers (their processes, or this one in threads
    # mode) and by the endpoint's process.
    writers_cpu: float = 0.0
    endpoint_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.commits / self.seconds

    @property
    def per_commit(self) -> float:
        return self.requests / max(1, self.commits)


def percentile(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def create_table(system: str, url: str, bucket: str, rows: int) -> None:
    """The table exists (one committed file) before the clock starts."""
    if system == "lakelock":
        open_lake(url, bucket).append(DATASET, batch(0, -1, rows), partition_by=PARTITION_BY)
    else:
        from deltalake import write_deltalake

        write_deltalake(
            delta_uri(bucket),
            batch(0, -1, rows),
            mode="append",
            partition_by=PARTITION_BY,
            storage_options=delta_options(url),
        )


def committed_files(system: str, url: str, bucket: str) -> int:
    if system == "lakelock":
        return len(open_lake(url, bucket).registry.files(DATASET))
    from deltalake import DeltaTable

    return len(DeltaTable(delta_uri(bucket), storage_options=delta_options(url)).file_uris())


def timed_run(
    endpoint: Any,
    *,
    system: str,
    writers: int,
    mode: str,
    latency_ms: int,
    seconds: float,
    rows: int,
    bucket: str,
    pool: ProcessPool | None,
) -> Sample:
    url = endpoint.url
    endpoint.clear_faults()
    endpoint.create_bucket(bucket)
    create_table(system, url, bucket, rows)
    if latency_ms:
        endpoint.inject("latency", delay=latency_ms / 1000, jitter=latency_ms / 10000)

    outcomes: list[Outcome]
    if mode == "threads":
        if system == "lakelock":
            shared = open_handle(system, url, bucket)
            handles = [shared] * writers  # one Lake: group commit across the threads
        else:
            handles = [open_handle(system, url, bucket) for _ in range(writers)]
        endpoint.reset_stats()
        endpoint_cpu = endpoint.cpu_seconds()
        own_cpu = time.process_time()
        started = time.perf_counter()
        deadline = time.monotonic() + seconds
        results: list[Outcome] = [Outcome()] * writers

        def run(w: int) -> None:
            results[w] = append_loop(system, handles[w], w, rows, deadline)

        threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        outcomes = results
        writers_cpu = time.process_time() - own_cpu
    else:
        assert pool is not None
        for w in range(writers):
            pool.tasks[w].put(("prepare", system, url, bucket, rows))
        pool.collect(writers, "ready")
        endpoint.reset_stats()
        endpoint_cpu = endpoint.cpu_seconds()
        started = time.perf_counter()
        deadline = time.monotonic() + seconds
        for w in range(writers):
            pool.tasks[w].put(("go", deadline))
        done = pool.collect(writers, "done")
        elapsed = time.perf_counter() - started
        outcomes = [done[w] for w in range(writers)]
        writers_cpu = sum(o.cpu_seconds for o in outcomes)

    endpoint_cpu = endpoint.cpu_seconds() - endpoint_cpu
    ops = endpoint.areas()  # per operation and part of the layout (root, intents, data...)
    traffic = endpoint.traffic()
    requests = sum(ops.values())
    endpoint.clear_faults()
    latencies = sorted(x for o in outcomes for x in o.latencies)
    later = sorted(x for o in outcomes for x in o.latencies[1:])
    firsts = [o.latencies[0] for o in outcomes if o.latencies]
    failures = sum(o.failures for o in outcomes)
    expected = 1 + len(latencies)
    found = committed_files(system, url, bucket)
    check = "ok" if found == expected else f"{found - expected:+d} files"
    return Sample(
        system=system,
        commits=len(latencies),
        seconds=elapsed,
        requests=requests,
        failures=failures,
        p50_ms=1000 * percentile(latencies, 0.5),
        p99_ms=1000 * percentile(latencies, 0.99),
        p99_later_ms=1000 * percentile(later, 0.99),
        first_mean_ms=1000 * statistics.fmean(firsts) if firsts else float("nan"),
        # Commits per compare-and-swap of the root at the endpoint (lost ones too): what
        # group commit shares, in one process (its batches) and across them (folded intents).
        batch=len(latencies) / ops["PutObject root"] if ops.get("PutObject root") else 1.0,
        check=check,
        first_error=next((o.first_error for o in outcomes if o.first_error), None),
        ops=ops,
        traffic=traffic,
        writers_cpu=writers_cpu,
        endpoint_cpu=endpoint_cpu,
    )


# --- the grid ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    writers: int
    mode: str
    latency_ms: int


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(cell: Cell, runs: list[dict[str, Sample]], systems: Sequence[str]) -> list[str]:
    ratios = [
        r["lakelock"].rate / r["delta-rs"].rate
        for r in runs
        if "lakelock" in r and "delta-rs" in r and r["delta-rs"].commits
    ]
    lines = []
    for system in systems:
        samples = [r[system] for r in runs]
        checks = sorted({s.check for s in samples})
        mode = cell.mode
        if cell.mode == "processes" and system == "lakelock":
            mode = "processes (intents)"
        batch = f"{median([s.batch for s in samples]):.1f}" if system == "lakelock" else "1"
        ratio = f"**{median(ratios):.1f}x**" if system == "lakelock" and ratios else ""
        lines.append(
            f"| {system} | {cell.writers} | {mode} | {cell.latency_ms} ms "
            f"| {median([s.rate for s in samples]):.1f} "
            f"| {median([s.p50_ms for s in samples]):.0f} "
            f"| {median([s.p99_ms for s in samples]):.0f} "
            f"| {median([s.per_commit for s in samples]):.1f} | {batch} "
            f"| {sum(s.failures for s in samples)} | {', '.join(checks)} | {ratio} |"
        )
    return lines


def breakdown(cell: Cell, runs: list[dict[str, Sample]], systems: Sequence[str]) -> list[str]:
    """Requests per commit by S3 operation and the part of the lake's layout it touched
    (root, intents, snapshots, data files...; delta-rs's log is "other"), body bytes per
    commit, and CPU per commit, the writers' and the endpoint's, with how many of the machine's
    cores that kept busy; and latency apart from each writer's first append, which pays for
    its start (the last repeat)."""
    lines = []
    for system in systems:
        sample = runs[-1][system]
        commits = max(1, sample.commits)
        ops = ", ".join(
            f"{op} {count / commits:.2f}"
            for op, count in sorted(sample.ops.items(), key=lambda kv: -kv[1])
        )
        moved = sum(sample.traffic.values()) / commits / 1024
        busy = (sample.writers_cpu + sample.endpoint_cpu) / sample.seconds
        lines.append(
            f"- {system}, {cell.writers} {cell.mode}, {cell.latency_ms} ms: per commit {ops}; "
            f"{moved:.1f} KiB moved; CPU {1000 * sample.writers_cpu / commits:.1f} ms in the "
            f"writers + {1000 * sample.endpoint_cpu / commits:.1f} ms in the endpoint "
            f"({busy:.2f} of {os.cpu_count()} cores busy); each writer's first append "
            f"{sample.first_mean_ms:.0f} ms on average, p99 of the others "
            f"{sample.p99_later_ms:.0f} ms"
        )
    return lines


def grid(args: argparse.Namespace) -> list[Cell]:
    cells = []
    for latency in args.latency:
        for mode in args.modes:
            for writers in args.writers:
                if mode == "processes" and writers == 1:
                    continue  # the same as one thread
                cells.append(Cell(writers, mode, latency))
    return cells


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short cells, one repeat")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per run")
    parser.add_argument("--repeats", type=int, default=None, help="runs per cell (median)")
    parser.add_argument("--writers", type=parse_ints, default=[1, 4, 16])
    parser.add_argument("--latency", type=parse_ints, default=[0, 20], help="ms per request")
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["threads", "processes"])
    parser.add_argument("--rows", type=int, default=100, help="rows per append")
    parser.add_argument(
        "--systems", type=lambda s: s.split(","), default=list(SYSTEMS), help="lakelock,delta-rs"
    )
    parser.add_argument(
        "--ops",
        action="store_true",
        help="also print requests per commit by S3 operation and part of the layout",
    )
    parser.add_argument(
        "--aws-conflicts",
        action="store_true",
        help="answer 409 to a conditional write that meets another write to its key in flight "
        "(as AWS does) instead of queueing it behind that write (the endpoint's default)",
    )
    args = parser.parse_args()
    seconds = args.seconds or (2.0 if args.quick else 4.0)
    repeats = args.repeats or (1 if args.quick else 3)

    import deltalake

    from lakelock.testing import S3Endpoint

    cells = grid(args)
    pool_size = max((c.writers for c in cells if c.mode == "processes"), default=0)
    print(
        f"# concurrent appends: lakelock vs delta-rs {deltalake.__version__}, "
        f"{seconds:.1f} s per run, median of {repeats} run(s), {args.rows} rows per append"
        f"{', 409 on concurrent conditional writes' if args.aws_conflicts else ''}\n"
    )
    print(
        "| system | writers | mode | latency | commits/s | p50 ms | p99 ms | S3 req/commit "
        "| commits/CAS | failures | check | lakelock/delta |"
    )
    print("|:---|---:|:---|---:|---:|---:|---:|---:|---:|---:|:---|---:|")
    errors: dict[str, tuple[int, str]] = {}
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(S3Endpoint(mode="process"))
        endpoint.configure(concurrent_conflicts=args.aws_conflicts)
        pool = ProcessPool(pool_size) if pool_size else None
        if pool is not None:
            stack.callback(pool.close)
        n = 0
        for cell in cells:
            runs: list[dict[str, Sample]] = []
            for r in range(repeats):
                order = args.systems if r % 2 == 0 else args.systems[::-1]
                run: dict[str, Sample] = {}
                for system in order:
                    n += 1
                    sample = timed_run(
                        endpoint,
                        system=system,
                        writers=cell.writers,
                        mode=cell.mode,
                        latency_ms=cell.latency_ms,
                        seconds=seconds,
                        rows=args.rows,
                        bucket=f"appends-{n}",
                        pool=pool if cell.mode == "processes" else None,
                    )
                    if sample.first_error:
                        where = (
                            f"{system}, {cell.writers} writers, {cell.mode}, {cell.latency_ms} ms"
                        )
                        count, first = errors.get(where, (0, sample.first_error))
                        errors[where] = (count + sample.failures, first)
                    run[system] = sample
                runs.append(run)
            for line in summarize(cell, runs, args.systems):
                print(line, flush=True)
            if args.ops:
                for line in breakdown(cell, runs, args.systems):
                    print(line, flush=True)
    if errors:
        print("\nfailures (all runs of a cell) and the first error seen:")
        for where, (count, first) in errors.items():
            print(f"- {where}: {count} x, first: {first}")


if __name__ == "__main__":
    main()
