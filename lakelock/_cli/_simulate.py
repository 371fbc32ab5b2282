"""``lakelock simulate``: size a lake before buying anything. Many writers run lakelock's
commit protocol against a simulated S3 in virtual time (``lakelock._sim``); the run is checked
and measured, and the same arguments print the same figures every time."""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable
from typing import Any

import orjson

from lakelock._cli._common import add_command, add_progress_option
from lakelock._cli._progress import ProgressBar, progress_wanted
from lakelock._sim import Faults, Mix, SimConfig, profile, simulate
from lakelock._sim._workload import KINDS

__all__ = ["add_parser", "run"]


def _count(text: str, *, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}")
    return value


def _positive(text: str) -> int:
    return _count(text, least=1)


def _non_negative(text: str) -> int:
    return _count(text, least=0)


def _number(text: str, accept: Callable[[float], bool], expected: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not accept(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def _seconds(text: str) -> float:
    return _number(text, lambda v: 0 < v < math.inf, "seconds > 0")


def _pause(text: str) -> float:
    return _number(text, lambda v: 0 <= v < math.inf, "seconds >= 0")


def _fraction(text: str) -> float:
    return _number(text, lambda v: 0 <= v <= 1, "a fraction in [0, 1]")


def _store(text: str) -> str:
    try:
        profile(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    return text


def _policy_field(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIELD=NUMBER, got {text!r}") from None
    return name.strip(), int(number) if number.is_integer() else number


def _mix_weight(text: str) -> tuple[str, float]:
    kind, equals, value = text.partition("=")
    kind = kind.strip()
    if kind not in KINDS:
        raise argparse.ArgumentTypeError(
            f"expected KIND=WEIGHT with KIND one of {', '.join(KINDS)}, got {text!r}"
        )
    try:
        weight = float(value) if equals else -1.0
    except ValueError:
        weight = -1.0
    if not 0 <= weight < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a weight >= 0 in {text!r}")
    return kind, weight


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "simulate",
        run,
        help="simulate many writers on S3 (virtual time): throughput, latency, cost",
        description="Run lakelock's commit protocol with many writers against a simulated S3 "
        "in virtual time, check every guarantee, and print commits/s, commit latency, "
        "requests and bytes per commit, and the physical bound for the configuration. "
        "Deterministic: the same arguments print the same figures.",
        json=True,
        arguments=_arguments,
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--writers", type=_positive, default=16, help="writer processes")
    parser.add_argument(
        "--seconds", type=_seconds, default=10.0, help="virtual seconds writers commit for"
    )
    parser.add_argument(
        "--store",
        type=_store,
        default="s3-standard",
        help="latency profile: s3-standard, s3-express or fixed:<ms> (default s3-standard)",
    )
    parser.add_argument("--seed", type=_non_negative, default=0, help="the run's seed")
    parser.add_argument(
        "--ignores-start-after",
        action="store_true",
        help="the store ignores ListObjectsV2's StartAfter: every LIST starts at its prefix "
        "(as on S3 Express One Zone's directory buckets, which lakelock doctor refuses)",
    )
    parser.add_argument(
        "--faults",
        type=_fraction,
        default=0.0,
        help="fraction of requests answered with a fault (lost ack, 503, 409, timeout)",
    )
    parser.add_argument(
        "--kills", type=_non_negative, default=0, help="writers killed and restarted"
    )
    parser.add_argument(
        "--stalls",
        type=_non_negative,
        default=0,
        help="writers that stall past the intent TTL before a request",
    )
    parser.add_argument(
        "--skew", type=float, default=0.0, help="each writer's clock off by up to this (s)"
    )
    parser.add_argument(
        "--commits",
        type=_non_negative,
        default=0,
        help="each writer makes this many commits, then stops (default: for --seconds)",
    )
    parser.add_argument(
        "--cpu-ms",
        type=float,
        default=0.0,
        help="CPU milliseconds per request on a machine of --cores cores (to compare with a "
        "run on one machine; default 0: CPU is free)",
    )
    parser.add_argument("--cores", type=_non_negative, default=2, help="cores for --cpu-ms")
    parser.add_argument(
        "--think",
        type=_pause,
        default=0.0,
        help="each writer pauses this long on average between commits (exponential; default "
        "0: back to back)",
    )
    parser.add_argument("--readers", type=_non_negative, default=0, help="reader processes")
    parser.add_argument(
        "--intent-ttl", type=_seconds, default=600.0, help="intents expire after this (s)"
    )
    parser.add_argument(
        "--vacuums",
        type=_non_negative,
        default=0,
        help="vacuum processes: lakelock's vacuum, deleting, next to the writers",
    )
    parser.add_argument(
        "--vacuum-every",
        type=_seconds,
        default=0.5,
        help="each vacuum process vacuums about this often (s, default 0.5)",
    )
    parser.add_argument(
        "--vacuum-older-than",
        type=_seconds,
        default=1.0,
        help="vacuum's window (older_than, s, default 1; no retention check): longer than "
        "any commit takes, or a writer loses what it wrote",
    )
    parser.add_argument(
        "--protocol",
        choices=("core", "toy"),
        default="core",
        help="the commit core (default) or the simulator's toy protocol",
    )
    parser.add_argument(
        "--max-attempts", type=_positive, default=50, help="a commit's attempts (default 50)"
    )
    parser.add_argument(
        "--max-seconds", type=_seconds, default=300.0, help="a commit's seconds (default 300)"
    )
    parser.add_argument(
        "--policy",
        type=_policy_field,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="change a knob of the core's FoldPolicy (repeatable), e.g. --policy max_fold=32",
    )
    parser.add_argument(
        "--mix",
        type=_mix_weight,
        action="append",
        default=[],
        metavar="KIND=WEIGHT",
        help="the commits writers make, by relative weight (repeatable; kinds: "
        f"{', '.join(KINDS)}). Given at all, kinds not named get 0: --mix append=1 is "
        "appends only. Default: "
        + ", ".join(f"{name} {weight:g}" for name, weight in Mix().kinds()),
    )
    parser.add_argument(
        "--trace",
        metavar="PATH",
        default=None,
        help="write every request (sent, answered, process, key, fault, answer) to PATH as "
        "JSON lines: what a seed did, to debug it",
    )
    add_progress_option(parser)


def run(args: argparse.Namespace) -> int:
    if args.skew < 0 or args.cpu_ms < 0:
        raise ValueError("--skew and --cpu-ms must be >= 0")
    config = SimConfig(
        writers=args.writers,
        seconds=args.seconds,
        store=args.store,
        seed=args.seed,
        faults=Faults(rate=args.faults, kills=args.kills, stalls=args.stalls, skew=args.skew),
        readers=args.readers,
        think=args.think,
        commits=args.commits,
        cpu=args.cpu_ms / 1000,
        cores=args.cores if args.cpu_ms > 0 else 0,
        intent_ttl=args.intent_ttl,
        protocol=args.protocol,
        policy=tuple(args.policy),
        max_attempts=args.max_attempts,
        max_seconds=args.max_seconds,
        mix=Mix.of(args.mix) if args.mix else Mix(),
        vacuums=args.vacuums,
        vacuum_every=args.vacuum_every,
        vacuum_older_than=args.vacuum_older_than,
        ignores_start_after=args.ignores_start_after,
    )
    bar = ProgressBar("simulating (virtual s)") if progress_wanted(args.progress) else None
    with contextlib.ExitStack() as stack:
        trace = None
        if args.trace is not None:
            out = stack.enter_context(open(args.trace, "wb"))

            def trace(event: dict[str, Any]) -> None:
                out.write(orjson.dumps(event) + b"\n")

        try:
            result = simulate(config, progress=bar, trace=trace)
        finally:
            if bar is not None:
                bar.close()
    metrics = result.metrics
    if args.json:
        sys.stdout.write(orjson.dumps(metrics.as_json(), option=orjson.OPT_SORT_KEYS).decode())
        sys.stdout.write("\n")
    else:
        rows = [
            ("store", metrics.store),
            ("writers", str(metrics.writers)),
            ("virtual seconds", f"{metrics.makespan:g}"),
            ("commits acknowledged", str(metrics.commits)),
            ("commits/s", f"{metrics.commits_per_second:.1f}"),
            ("commit latency p50", f"{metrics.p50_ms:.0f} ms"),
            ("commit latency p99", f"{metrics.p99_ms:.0f} ms"),
            ("S3 requests/commit", f"{metrics.requests_per_commit:.2f}"),
            ("bytes/commit", f"{metrics.bytes_per_commit:.0f}"),
            ("commits per root swap", f"{metrics.commits_per_cas:.2f}"),
            ("largest fold", str(metrics.largest_fold)),
            ("503 SlowDown", str(metrics.throttled)),
            ("faults injected", str(metrics.faults_injected)),
            (
                "failed / unknown / killed",
                f"{metrics.failed} / {metrics.unknown} / {metrics.killed}",
            ),
            ("bound: key CAS rate x fold", f"{metrics.bound_cas:.1f} commits/s"),
            ("bound: writers / latency floor", f"{metrics.bound_latency:.1f} commits/s"),
            ("violations", str(metrics.violations)),
        ]
        if config.vacuums:
            rows[-1:-1] = [
                (
                    "vacuum runs / objects deleted",
                    f"{metrics.vacuum_runs} / {metrics.vacuum_deleted}",
                ),
                ("held past the window (late)", str(metrics.vacuum_late)),
            ]
        width = max(len(name) for name in [*(n for n, _ in rows), *metrics.areas]) + 2
        for name, value in rows:
            sys.stdout.write(f"{name:<{width}}  {value}\n")
        for area, per_commit in sorted(metrics.areas.items(), key=lambda item: -item[1]):
            sys.stdout.write(f"  {area:<{width - 2}}  {per_commit:.2f}/commit\n")
        for violation in result.violations[:20]:
            sys.stdout.write(f"violation: {violation}\n")
        if result.violations:
            sys.stdout.write(f"replay: {config.replay_command()}\n")
    return 1 if result.violations else 0
