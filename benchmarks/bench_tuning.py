"""Scheduling variants side by side in the simulator, in steady state: what a knob of the
commit core's ``FoldPolicy`` changes, over several seeds, printed as one table.

    python benchmarks/bench_tuning.py --writers 16 64 --variant base: --variant linger:linger=2
    python benchmarks/bench_tuning.py --writers 16 --stores s3-express --think 0 0.3 \\
        --variant base: --variant linger:linger=2 --seeds 1 2 3

Each cell is one seeded run of ``--seconds`` virtual seconds; figures count only commits
that end, and requests answered, after ``--warmup`` (the start-up burst of every writer
committing at once is another regime). Per row: commits/s, p50/p99 commit latency, S3
requests per commit (steady state), KB per commit (whole run), violations, and commits that
failed (conflicts of overwrites and deletes: legitimate). Appends only unless ``--mix
default`` (which has commits spanning datasets and restores: each needs a swap of its own).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import statistics
import time
from collections import defaultdict
from typing import Any

from lakelock._layout import INTENT_PREFIX, REGISTRY_KEY
from lakelock.testing.simulate import Mix, SimConfig, simulate

APPENDS = Mix.of([("append", 1.0)])


def variant(text: str) -> tuple[str, tuple[tuple[str, float], ...]]:
    """``name:field=value,field=value`` (``name:`` alone: the defaults)."""
    name, _, knobs = text.partition(":")
    pairs = []
    for item in filter(None, knobs.split(",")):
        field, _, value = item.partition("=")
        number = float(value)
        pairs.append((field.strip(), int(number) if number.is_integer() else number))
    return name or "default", tuple(pairs)


def steady(config: SimConfig, warmup: float, *, phases: bool = False) -> dict[str, Any]:
    answered = [0]
    intents: dict[str, list[float]] = defaultdict(list)  # per process: intent PUTs answered
    looks: dict[str, list[float]] = defaultdict(list)  # per process: root GETs answered
    swaps: list[float] = []  # when each swap of the root took effect

    def count(event: dict[str, Any]) -> None:
        if warmup <= event["answered"] < config.seconds:
            answered[0] += 1
        if not phases or event["answer"] != "ok":
            return
        key, operation = event["key"], event["operation"]
        if key == REGISTRY_KEY:
            if operation == "PutObject":
                swaps.append(event["applied"])
            elif operation == "GetObject":
                looks[event["process"]].append(event["answered"])
        elif operation == "PutObject" and key.startswith(INTENT_PREFIX):
            intents[event["process"]].append(event["answered"])

    started = time.process_time()
    result = simulate(config, trace=count)
    cpu = time.process_time() - started
    done = sorted(
        i.end - i.start
        for i in result.invocations
        if i.outcome == "ok" and i.end is not None and warmup <= i.end < config.seconds
    )
    n = len(done)

    def pick(q: float) -> float:
        return done[min(n - 1, int(q * n))] * 1000 if n else 0.0

    figures = (
        where_time_goes(
            result,
            warmup,
            seconds=config.seconds,
            intents=intents,
            looks=looks,
            swaps=sorted(swaps),
        )
        if phases
        else {}
    )
    return figures | {
        "commits_per_second": n / (config.seconds - warmup),
        "p50_ms": pick(0.50),
        "p99_ms": pick(0.99),
        "requests_per_commit": answered[0] / n if n else 0.0,
        "kb_per_commit": result.metrics.bytes_per_commit / 1000,
        "violations": len(result.violations),
        "failed": sum(1 for i in result.invocations if i.outcome in ("fail", "gaveup")),
        "cpu": cpu,
    }


def where_time_goes(
    result: Any,
    warmup: float,
    *,
    seconds: float,
    intents: dict[str, list[float]],
    looks: dict[str, list[float]],
    swaps: list[float],
) -> dict[str, float]:
    """``--phases``: the medians of an append's three phases (ms), the swap period (ms) and
    root GETs per commit, over the steady-state commits that sent an intent."""
    ok = [
        i
        for i in result.invocations
        if i.outcome == "ok" and i.end is not None and warmup <= i.end < seconds
    ]
    if not swaps or not ok:
        return {}
    # Each swap makes the next version; find which swap made the first, as the commits say.
    offset = min(
        range(-3, 4),
        key=lambda o: sum(
            1 for i in ok if not 0 <= i.version - o < len(swaps) or swaps[i.version - o] > i.end
        ),
    )
    sent, waited, looked, gets = [], [], [], []
    for i in ok:
        name = f"writer {i.writer}"
        own = intents.get(name, [])
        first = bisect.bisect_left(own, i.start)
        if first == len(own) or own[first] > i.end or not 0 <= i.version - offset < len(swaps):
            continue
        swapped = swaps[i.version - offset]
        sent.append(own[first] - i.start)
        waited.append(swapped - own[first])
        looked.append(i.end - swapped)
        root = looks.get(name, [])
        gets.append(bisect.bisect_right(root, i.end) - bisect.bisect_left(root, i.start))
    periods = [b - a for a, b in itertools.pairwise(swaps) if warmup <= a < seconds]
    if not sent:
        return {}
    return {
        "sent_ms": statistics.median(sent) * 1000,
        "waited_ms": statistics.median(waited) * 1000,
        "looked_ms": statistics.median(looked) * 1000,
        "period_ms": statistics.median(periods) * 1000 if periods else 0.0,
        "root_gets": statistics.mean(gets),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--stores", nargs="+", default=["s3-standard"])
    parser.add_argument("--think", type=float, nargs="+", default=[0.0])
    parser.add_argument("--mix", choices=("append", "default"), default="append")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument(
        "--variant",
        type=variant,
        action="append",
        default=[],
        metavar="NAME:FIELD=VALUE,...",
        help="a policy to compare (repeatable); NAME: alone is the defaults",
    )
    parser.add_argument(
        "--phases", action="store_true", help="add where an append's time goes (medians)"
    )
    args = parser.parse_args()
    if args.warmup >= args.seconds:
        parser.error("--warmup must be shorter than --seconds")
    variants = args.variant or [("default", ())]
    mix = APPENDS if args.mix == "append" else Mix()
    extra = (
        " intent sent ms | to the swap ms | to the return ms | swap period ms | root GETs |"
        if args.phases
        else ""
    )
    print(
        "| writers | store | think (s) | variant | seeds | commits/s | p50 ms | p99 ms "
        "| req/commit | KB/commit | violations | failed | CPU s |" + extra + "\n"
        "|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        + "---:|"
        * (5 if args.phases else 0)
    )
    for writers in args.writers:
        for store in args.stores:
            for think in args.think:
                for name, policy in variants:
                    cells = [
                        steady(
                            SimConfig(
                                writers=writers,
                                seconds=args.seconds,
                                store=store,
                                seed=seed,
                                mix=mix,
                                think=think,
                                policy=policy,
                            ),
                            args.warmup,
                            phases=args.phases,
                        )
                        for seed in args.seeds
                    ]

                    def each(key: str, form: str, cells: list[dict[str, Any]] = cells) -> str:
                        return " / ".join(format(c[key], form) for c in cells)

                    def phase(key: str, form: str, cells: list[dict[str, Any]] = cells) -> str:
                        # A cell with no steady-state commit that sent an intent has none.
                        return " / ".join(format(c.get(key, 0.0), form) for c in cells)

                    more = (
                        f" {phase('sent_ms', '.0f')} | {phase('waited_ms', '.0f')} "
                        f"| {phase('looked_ms', '.0f')} | {phase('period_ms', '.0f')} "
                        f"| {phase('root_gets', '.2f')} |"
                        if args.phases
                        else ""
                    )

                    print(
                        f"| {writers} | {store} | {think:g} | {name} "
                        f"| {' '.join(map(str, args.seeds))} | {each('commits_per_second', '.1f')} "
                        f"| {each('p50_ms', '.0f')} | {each('p99_ms', '.0f')} "
                        f"| {each('requests_per_commit', '.2f')} | {each('kb_per_commit', '.0f')} "
                        f"| {sum(c['violations'] for c in cells)} "
                        f"| {sum(c['failed'] for c in cells)} "
                        f"| {sum(c['cpu'] for c in cells):.1f} |" + more,
                        flush=True,
                    )


if __name__ == "__main__":
    main()
