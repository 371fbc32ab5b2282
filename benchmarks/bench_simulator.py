"""The simulator (``lakelock simulate``): what lakelock's commit protocol does with many writers
on simulated S3 (virtual time), and what simulating it costs (wall time), printed as tables.

    python benchmarks/bench_simulator.py                 # the baseline grid
    python benchmarks/bench_simulator.py --writers 16 256 --stores s3-express --seconds 5
    python benchmarks/bench_simulator.py --writers 1024 --seconds 2 --mix append=1
    python benchmarks/bench_simulator.py --endpoint-only # the simulator's own cost
    python benchmarks/bench_simulator.py --writers 256 --stores s3-standard --seconds 24 \
        --warmup 12 --mix append=1                      # steady state, past the start-up
    python benchmarks/bench_simulator.py --writers 256 --stores s3-standard --seconds 12 \
        --mix append=1 --parallel 2                     # seeds 1 and 2 at once, one a core

``--warmup W`` runs each cell for ``W`` seconds too and prints the commits per CPU second of
the seconds after ``W`` (the difference of the two runs): a run's first seconds are 256
writers starting at once, whose fold and retry storm costs far more CPU a commit than the
rest of the run.

Per cell (one seeded run, deterministic: the virtual-time figures are the same on every
machine): commits/s, p50/p99 commit latency, S3 requests and bytes per commit, commits per
root swap, the largest fold, 503s, violations, the physical bound (one key's CAS rate x the
largest fold a swap may carry; writers / the latency floor of one commit), the run's
``trace`` (a digest of every commit's outcome and timing and the requests sent: a change
that makes the simulator faster must leave it as it was), and the wall and CPU seconds the
run took here, with the simulated commits per CPU second.

``--parallel N`` runs each cell for N seeds (``--seed`` and the next ones) at once, one
process each, and adds a line with the simulated commits of all N per wall second of the
whole: what a machine of N cores simulates (a seed sweep runs that way), where one run is
one thread.

``--endpoint-only`` measures the simulator without the commit core: N processes each sending
GETs and create-only PUTs back to back, and how many simulated requests one wall second runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from random import Random
from typing import Any

from lakelock._registry._core._requests import Get, Put, Steps
from lakelock._sim._loop import Endpoint, Loop, Process
from lakelock.testing.simulate import Faults, Mix, SimConfig, SimS3, StoreRetry, profile, simulate

ROOT = "metastore/dataset_registry.json"


def endpoint_only(processes: int, seconds: float) -> tuple[int, float]:
    """Simulated requests, and the wall seconds they took."""
    loop = Loop()
    store = SimS3(profile("s3-standard"), Random(1))
    endpoint = Endpoint(loop, store, Random(2), Faults(), StoreRetry(), root_key=ROOT)

    def program(n: int) -> Steps:
        count = 0
        while loop.now < seconds:
            count += 1
            yield Put(f"metastore/intents/{n:04d}-{count:08d}", b"x" * 512, create=True)
            yield Get(f"metastore/intents/{n:04d}-{count:08d}")

    for n in range(processes):
        Process(loop, endpoint, program(n), kind="writer").start(0.0)
    started = time.perf_counter()
    loop.run(seconds + 60)
    return sum(endpoint.counts.requests.values()), time.perf_counter() - started


def _timed(config: SimConfig) -> tuple[Any, float, float]:
    """The run's metrics, and the wall and CPU seconds ``simulate`` took."""
    started, cpu = time.perf_counter(), time.process_time()
    metrics = simulate(config).metrics
    return metrics, time.perf_counter() - started, time.process_time() - cpu


def grid(
    writers: Sequence[int],
    stores: Sequence[str],
    seconds: float,
    seed: int,
    mix: Mix,
    *,
    warmup: float = 0.0,
    parallel: int = 1,
) -> None:
    head = (
        f"{'store':<12} {'writers':>7} {'commits/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'req/commit':>10} {'bytes/commit':>12} {'commits/CAS':>11} {'fold':>5} {'503s':>5} "
        f"{'bound/s':>8} {'viol.':>5} {'trace':>16} {'wall s':>7} {'CPU s':>7} {'sim c/CPU s':>11}"
        + (f" {'after warmup':>12}" if warmup else "")
    )
    print(head)
    print("-" * len(head))
    for store in stores:
        for count in writers:
            # Every commit counted, warm-up included: the CPU measured is the whole run's.
            config = SimConfig(
                writers=count,
                seconds=seconds,
                store=store,
                seed=seed,
                mix=mix,
                include_warmup=True,
            )
            if parallel > 1:
                at_once(config, parallel)
                continue
            m, wall, cpu = _timed(config)
            steady = ""
            if warmup:
                w, _, warm_cpu = _timed(dataclasses.replace(config, seconds=warmup))
                steady = f" {(m.commits - w.commits) / max(cpu - warm_cpu, 1e-9):>12.1f}"
            print(_row(config, m, wall, cpu) + steady, flush=True)


def _row(config: SimConfig, m: Any, wall: float, cpu: float) -> str:
    return (
        f"{config.store:<12} {config.writers:>7} {m.commits_per_second:>9.1f} {m.p50_ms:>7.0f} "
        f"{m.p99_ms:>7.0f} {m.requests_per_commit:>10.2f} {m.bytes_per_commit:>12.0f} "
        f"{m.commits_per_cas:>11.2f} {m.largest_fold:>5} {m.throttled:>5} "
        f"{m.bound_commits_per_second:>8.0f} {m.violations:>5} {m.trace:>16} {wall:>7.1f} "
        f"{cpu:>7.1f} {m.commits / cpu:>11.1f}"
    )


def at_once(config: SimConfig, runs: int) -> None:
    """``config`` for ``runs`` seeds at once, one process each: a row per seed (seed ``s``:
    the row's trace is that run's), then the simulated commits of all per wall second."""
    configs = [dataclasses.replace(config, seed=config.seed + n) for n in range(runs)]
    started = time.perf_counter()
    with ProcessPoolExecutor(runs) as pool:
        done = list(pool.map(_timed, configs))
    wall = time.perf_counter() - started
    for each, (m, run_wall, cpu) in zip(configs, done, strict=True):
        print(_row(each, m, run_wall, cpu) + f"  (seed {each.seed})", flush=True)
    commits = sum(m.commits for m, _, _ in done)
    print(
        f"{runs} runs at once: {commits} simulated commits in {wall:.1f} wall s, "
        f"{commits / wall:.0f} a wall second (process start-up included)",
        flush=True,
    )


def _mix_weight(text: str) -> tuple[str, float]:
    kind, _, weight = text.partition("=")
    return kind, float(weight)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--stores", nargs="+", default=["s3-standard", "s3-express"])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--endpoint-only", action="store_true")
    parser.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        help="also run each cell this many seconds and print the commits per CPU second after "
        "them (the steady state past the start-up burst)",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="run each cell for N seeds at once, one process each, and print the simulated "
        "commits of all per wall second",
    )
    parser.add_argument(
        "--mix",
        type=_mix_weight,
        action="append",
        default=[],
        metavar="KIND=WEIGHT",
        help="the commits writers make (as lakelock simulate --mix; default: the default mix)",
    )
    args = parser.parse_args()
    if args.endpoint_only:
        print(f"{'processes':>9} {'requests':>9} {'wall s':>7} {'requests/wall s':>15}")
        for processes in args.writers:
            requests, wall = endpoint_only(processes, args.seconds)
            print(f"{processes:>9} {requests:>9} {wall:>7.2f} {requests / wall:>15.0f}")
        return
    if not 0 <= args.warmup < args.seconds:
        parser.error("--warmup must be at least 0 and less than --seconds")
    if args.parallel < 1 or (args.parallel > 1 and args.warmup):
        parser.error("--parallel takes a whole number >= 1, and not with --warmup")
    mix = Mix.of(args.mix) if args.mix else Mix()
    grid(
        args.writers,
        args.stores,
        args.seconds,
        args.seed,
        mix,
        warmup=args.warmup,
        parallel=args.parallel,
    )


if __name__ == "__main__":
    main()
