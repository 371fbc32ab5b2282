"""One registry-throughput row measured on several checkouts of lakelock, alternating, in one run.

    git worktree add /tmp/format1 b64023f              # e.g. the last format-1 registry
    python benchmarks/compare_checkouts.py . /tmp/format1 --writers 16 --latency 20 --repeats 2

Each checkout's own ``benchmarks/bench_registry.py`` measures the row (its ``throughput``:
W threads of one process sharing one group-committing ``Registry``, one small commit each at a
time, against an embedded endpoint with injected latency), in a child process that imports
that checkout's ``lakelock``. The endpoint is the first checkout's for all of them (``--endpoint``
picks another): the endpoint is part of what is measured, and runs compare only on the same
one. Checkouts take turns, so a machine that slows down or speeds up
during the run weighs on each alike. Prints one table line per run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

#: Runs in the child: the checkout's bench_registry.throughput on a fresh endpoint.
CHILD = """
import os, sys
root, writers, latency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seconds = float(sys.argv[4])
os.environ["PYTHONPATH"] = sys.argv[5]  # the endpoint process imports this checkout's lakelock
sys.path[:0] = [root + "/benchmarks", root]
import bench_registry
from lakelock.testing import S3Endpoint
with S3Endpoint(mode="process") as endpoint:
    endpoint.create_bucket("compare-0")
    run = bench_registry.throughput(
        endpoint, writers=writers, latency_ms=latency, group=True, seconds=seconds,
        bucket="compare-0",
    )
print(f"{run.commits / run.seconds:.1f} {run.requests_per_commit:.2f} {run.p50_ms:.0f} "
      f"{run.p99_ms:.0f} {run.failures}")
"""


def describe(checkout: Path) -> str:
    """The checkout's commit (short hash), or its path if it is not a git checkout."""

    def git(*arguments: str) -> str:
        return subprocess.run(
            ["git", "-C", str(checkout), *arguments], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return str(checkout)
    return f"{head}{' (modified)' if dirty else ''}"


def measure(
    checkout: Path, writers: int, latency: int, seconds: float, endpoint: Path
) -> list[str]:
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    arguments = [str(checkout), str(writers), str(latency), str(seconds), str(endpoint)]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *arguments],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
        timeout=seconds + 300,
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: the run failed:\n{done.stderr[-2000:]}")
    return done.stdout.split()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkouts", nargs="+", type=Path, help="lakelock checkouts to compare")
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--latency", type=int, default=20, help="injected latency, ms")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of one run")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each checkout")
    parser.add_argument(
        "--endpoint",
        type=Path,
        default=None,
        help="the checkout whose embedded endpoint every run uses (default: the first)",
    )
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkouts]
    endpoint = (args.endpoint or checkouts[0]).resolve()
    for c in checkouts:
        if not (c / "benchmarks" / "bench_registry.py").is_file():
            parser.error(f"{c} has no benchmarks/bench_registry.py")
    names = {c: describe(c) for c in checkouts}
    print(
        f"# {args.writers} writers, {args.latency} ms, group commit on, "
        f"{args.seconds:.0f} s per run, the endpoint of {describe(endpoint)}\n"
    )
    print("| checkout | run | commits/s | S3 req/commit | p50 ms | p99 ms | failures |")
    print("|:---|---:|---:|---:|---:|---:|---:|")
    for run in range(1, args.repeats + 1):
        for c in checkouts:
            rate, requests, p50, p99, failures = measure(
                c, args.writers, args.latency, args.seconds, endpoint
            )
            print(
                f"| {names[c]} | {run} | {rate} | {requests} | {p50} | {p99} | {failures} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
