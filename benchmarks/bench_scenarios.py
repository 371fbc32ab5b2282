"""Simulator scenarios side by side: each case is ``lakelock simulate`` with some arguments, run
for every writer count and seed, its ``--json`` figures averaged over the seeds, one table.

    python benchmarks/bench_scenarios.py --writers 50 256 --seeds 1 2 3 --seconds 6 \\
        --case "appends:--mix append=1" --case "default mix:"
    python benchmarks/bench_scenarios.py --writers 64 --seeds 1 2 --seconds 60 \\
        --case "brownout:--brownout 20:10:10"

Per row: commits/s (mean over the seeds, the worst seed in brackets), p99 commit latency (the
same), S3 requests per commit, commits throttled, given up, failed and unknown (sums over the
seeds), violations, the ratio of commits/s to the first case at the same writer count (with
``--ratio first``: to the table's first row, to compare writer counts), and with
``--brownout`` the seconds from the brownout's end until commits/s is back to 90 % of before
it. Figures are the steady state ``lakelock simulate`` reports (past the start-up). Each run is a
process of its own, ``--parallel`` at once.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson


def case(text: str) -> tuple[str, list[str]]:
    """``label:arguments of lakelock simulate`` (``label:`` alone: its defaults)."""
    label, _, arguments = text.partition(":")
    return label.strip(), shlex.split(arguments)


def run(arguments: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "lakelock", "simulate", *arguments, "--json"]
    done = subprocess.run(command, capture_output=True, check=True, text=True)
    figures: dict[str, Any] = orjson.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[16])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument(
        "--case",
        type=case,
        action="append",
        default=[],
        metavar="LABEL:ARGUMENTS",
        help="lakelock simulate's arguments to compare (repeatable; the first: the ratio's base)",
    )
    parser.add_argument(
        "--ratio",
        choices=("case", "first"),
        default="case",
        help="commits/s against the first case at the same writers, or the first row",
    )
    parser.add_argument("--parallel", type=int, default=2, help="runs at once (default 2)")
    args = parser.parse_args()
    cases = args.case or [("default", [])]
    runs = {
        (writers, label, seed): [
            "--writers",
            str(writers),
            "--seconds",
            f"{args.seconds:g}",
            "--seed",
            str(seed),
            *arguments,
        ]
        for writers in args.writers
        for label, arguments in cases
        for seed in args.seeds
    }
    with ThreadPoolExecutor(args.parallel) as pool:
        results = dict(zip(runs, pool.map(run, runs.values()), strict=True))
    brownout = any("--brownout" in arguments for _, arguments in cases)
    print(
        "| writers | case | seeds | commits/s: mean (worst) | p99 ms: mean (worst) | req/commit "
        "| throttled | gave up | failed | unknown | violations | ratio |"
        + (" back to 90 % (s) |" if brownout else "")
        + "\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        + ("---:|" if brownout else "")
    )
    seeds = " ".join(map(str, args.seeds))
    base = 0.0
    for writers in args.writers:
        if args.ratio == "case":
            base = 0.0
        for label, _ in cases:
            cells = [results[writers, label, seed] for seed in args.seeds]
            rate = statistics.mean(c["commits_per_second"] for c in cells)
            base = base or rate

            def total(key: str, cells: list[dict[str, Any]] = cells) -> int:
                return sum(int(c[key]) for c in cells)

            recovered = " / ".join(
                "never" if c["brownout_recovered_s"] is None else f"{c['brownout_recovered_s']:g}"
                for c in cells
            )
            print(
                f"| {writers} | {label} | {seeds} "
                f"| {rate:,.1f} ({min(c['commits_per_second'] for c in cells):,.1f}) "
                f"| {statistics.mean(c['p99_ms'] for c in cells):,.0f} "
                f"({max(c['p99_ms'] for c in cells):,.0f}) "
                f"| {statistics.mean(c['requests_per_commit'] for c in cells):.2f} "
                f"| {total('throttled'):,} | {total('gave_up')} | {total('failed')} "
                f"| {total('unknown')} | {total('violations')} | {rate / base:.2f} |"
                + (f" {recovered} |" if brownout else ""),
                flush=True,
            )


if __name__ == "__main__":
    main()
