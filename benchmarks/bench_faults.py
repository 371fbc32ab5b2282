"""What transient faults cost: W writer processes append N times each to one lake, on the
embedded endpoint with a fixed latency, first without faults and then with a fraction of the
PUT/GET/LIST requests answered 503 SlowDown (before applying) or 500 (a PUT after applying:
a lost acknowledgement), seeded. Prints one table: wall time, the ratio to the fault-free run,
appends that failed (and the first error), and the faults the endpoint served.

    python benchmarks/bench_faults.py                      # 4 processes x 6 appends, 5 ms, 6 %
    python benchmarks/bench_faults.py --writers 16 --appends 10 --faults 0,0.02,0.06

A writer retries within its default budget; an append that gives up is counted, never
hidden. Every run ends with the chaos invariant that matters here: the lake holds exactly
the rows of the appends that succeeded.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from typing import Any

import pyarrow as pa

from lakelock import Lake
from lakelock.testing import FaultRule, S3Endpoint

OPERATIONS = ("PutObject", "GetObject", "ListObjectsV2")


def writer(where: tuple[str, str], index: int, appends: int, go: Any, out: Any) -> None:
    url, bucket = where
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    lake = Lake(bucket, s3=client)
    out.put(("ready", index))
    go.wait()
    failures: list[str] = []
    done = 0
    for n in range(appends):
        table = pa.table({"writer": [index], "n": [n]})
        try:
            lake.append("events", table, commit_id=f"w{index}-{n}")
            done += 1
        except Exception as error:
            failures.append(f"{type(error).__name__}: {str(error)[:160]}")
    out.put(("done", index, done, failures))


def run(
    endpoint: S3Endpoint,
    *,
    writers: int,
    appends: int,
    latency: float,
    faults: float,
    seed: int,
    bucket: str,
) -> dict[str, Any]:
    endpoint.create_bucket(bucket)
    rules = [FaultRule(kind="latency", delay=latency, jitter=latency / 10)]
    if faults > 0:
        for operation in OPERATIONS:
            rules.append(FaultRule(kind="slowdown", operation=operation, probability=faults / 2))
            # A write applied and then answered 500 (its acknowledgement lost); a read has
            # nothing to lose, and is answered 500 instead (the endpoint strikes no read
            # with a lost acknowledgement).
            after = "lost_ack_5xx" if operation == "PutObject" else "error"
            rules.append(FaultRule(kind=after, operation=operation, probability=faults / 2))
    endpoint.set_faults(rules, seed=seed)
    context = multiprocessing.get_context("spawn")
    out: Any = context.Queue()
    go = context.Event()
    processes = [
        context.Process(target=writer, args=((endpoint.url, bucket), i, appends, go, out))
        for i in range(writers)
    ]
    for p in processes:
        p.start()
    for _ in processes:  # interpreter start-up is not what is measured
        out.get(timeout=300)
    endpoint.reset_stats()
    started = time.perf_counter()
    go.set()
    results = [out.get(timeout=900)[1:] for _ in processes]
    seconds = time.perf_counter() - started
    for p in processes:
        p.join()
    endpoint.clear_faults()
    requests = sum(endpoint.stats().values())
    done = sum(r[1] for r in results)
    failures = [f for r in results for f in r[2]]
    rows = Lake(bucket, s3=endpoint.client()).read("events").num_rows if done else 0
    return {
        "faults": faults,
        "seconds": seconds,
        "done": done,
        "failed": len(failures),
        "first_error": failures[0] if failures else "",
        "exact": rows == done,
        "requests": requests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--appends", type=int, default=6)
    parser.add_argument("--latency", type=float, default=5.0, help="ms per request")
    parser.add_argument("--faults", default="0,0.02,0.06", help="fractions, comma-separated")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    fractions = [float(f) for f in args.faults.split(",")]
    print(
        f"{args.writers} processes x {args.appends} appends, {args.latency:g} ms per request; "
        "faults: half 503 SlowDown before applying, half 500 (a PUT after applying)"
    )
    print(
        f"{'faults':>7} {'seconds':>8} {'ratio':>6} {'appended':>9} {'failed':>7} "
        f"{'req/append':>10} exact  first error"
    )
    base = None
    with S3Endpoint(mode="process") as endpoint:
        for n, fraction in enumerate(fractions):
            row = run(
                endpoint,
                writers=args.writers,
                appends=args.appends,
                latency=args.latency / 1000,
                faults=fraction,
                seed=args.seed,
                bucket=f"faults-{n}",
            )
            base = row["seconds"] if base is None else base
            print(
                f"{fraction:>7.0%} {row['seconds']:>8.1f} {row['seconds'] / base:>5.1f}x "
                f"{row['done']:>9} {row['failed']:>7} "
                f"{row['requests'] / max(1, row['done']):>10.1f} {row['exact']!s:5}  "
                f"{row['first_error']}"
            )


if __name__ == "__main__":
    main()
