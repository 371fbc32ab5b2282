"""``lakelock simulate``: size a lake before buying anything. Many writers run lakelock's
commit protocol against a simulated S3 in virtual time (``lakelock._sim``); the run is checked
and measured, and the same arguments print the same figures every time."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from lakelock._cli._common import add_command, add_progress_option, commit_window, number_type
from lakelock._cli._progress import ProgressBar, progress_wanted
from lakelock._durations import MAX_DURATION
from lakelock._registry._core import FoldPolicy
from lakelock._registry._core._schedule import FIXED
from lakelock._registry._settings import MAX_COMMIT_WINDOW, MAX_INTENT_TTL
from lakelock._sim._faults import FAULT_KINDS, Brownout, Faults
from lakelock._sim._latency import profile
from lakelock._sim._plot import plot, require_matplotlib
from lakelock._sim._run import RECOVERED, Metrics, SimConfig, SimResult, simulate
from lakelock._sim._workload import KINDS, Mix
from lakelock.errors import InvalidArgumentError

__all__ = ["add_parser", "run"]


#: The most writers and virtual seconds one run takes: a run costs memory and CPU in their
#: product, and ten times the largest run the docs make (1,024 writers, 120 s) is still a
#: question; 10^7 writers is a typo that would take the machine.
MAX_WRITERS = 10_000
MAX_SECONDS = 3_600.0
#: The most of any other count of one run: readers and vacuums (processes, as writers are),
#: and each kind of fault (--kills, --stalls, --swap-stalls, --rerun-stalls, --pauses,
#: --clock-steps: each an event that befalls a writer at random, one writer perhaps more than
#: once).
#: More than the most writers a run takes is a typo, not a scenario.
MAX_COUNT = MAX_WRITERS
#: The most commits each writer makes with --commits (a run of them ends when they are
#: made, not at --seconds): about what a lone writer commits within MAX_SECONDS on the
#: fastest store (34 commits/s on fixed:10).
MAX_COMMITS = 100_000
#: The most cores of the machine --cpu-ms and --first-cpu-ms are spent on: the largest
#: machines have a few hundred (the simulator keeps a clock for each).
MAX_CORES = 1_024
#: The furthest a writer's clock is off (--skew, seconds): a day is far past any clock NTP
#: keeps; further, a writer's times leave the dates Python holds (1e300 crashed every
#: writer, and the run reported the crashes as violations of lakelock's guarantees).
MAX_SKEW = 86_400.0

_positive = number_type(int, lambda value: value >= 1, "an integer >= 1")
_writers = number_type(
    int, lambda value: 1 <= value <= MAX_WRITERS, f"an integer from 1 to {MAX_WRITERS:,}"
)
_count = number_type(
    int, lambda value: 0 <= value <= MAX_COUNT, f"an integer from 0 to {MAX_COUNT:,}"
)
_commits = number_type(
    int, lambda value: 0 <= value <= MAX_COMMITS, f"an integer from 0 to {MAX_COMMITS:,}"
)
_cores = number_type(
    int, lambda value: 0 <= value <= MAX_CORES, f"an integer from 0 to {MAX_CORES:,}"
)
_run_seconds = number_type(
    float, lambda value: 0 < value <= MAX_SECONDS, f"seconds > 0, at most {MAX_SECONDS:,.0f}"
)
_non_negative = number_type(int, lambda value: value >= 0, "an integer >= 0")
#: Every other length of time an option gives: at most a century (MAX_DURATION), as every
#: bounded duration of lakelock; further, the simulated clock leaves the dates Python holds
#: (--quiet-before 1e300 was an internal error, OverflowError) or a lake's settings refuse it.
_CENTURY = f"at most {MAX_DURATION:,.0f} (a century)"
_seconds = number_type(float, lambda value: 0 < value <= MAX_DURATION, f"seconds > 0, {_CENTURY}")
_pause = number_type(float, lambda value: 0 <= value <= MAX_DURATION, f"seconds >= 0, {_CENTURY}")
_intent_ttl = number_type(
    float,
    lambda value: 0 < value <= MAX_INTENT_TTL,
    f"seconds > 0, at most {MAX_INTENT_TTL:,.0f} (a lake's longest intent TTL)",
)
_fraction = number_type(float, lambda value: 0 <= value <= 1, "a fraction in [0, 1]")
_skew = number_type(
    float, lambda value: 0 <= value <= MAX_SKEW, f"seconds >= 0, at most {MAX_SKEW:,.0f}"
)
_milliseconds = number_type(
    float, lambda value: 0 <= value <= MAX_DURATION * 1000, f"milliseconds >= 0, {_CENTURY}"
)


def _store(text: str) -> str:
    try:
        profile(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    return text


def _policy_field(text: str) -> tuple[str, float]:
    """``FIELD=NUMBER``, FIELD one of FoldPolicy's knobs or the scheduler's fixed values: an
    unknown one is a usage error listing those there are."""
    name, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIELD=NUMBER, got {text!r}") from None
    known = sorted({field.name for field in dataclasses.fields(FoldPolicy)} | set(FIXED))
    if name.strip() not in known:
        raise argparse.ArgumentTypeError(
            f"unknown field {name.strip()!r}: one of {', '.join(known)}"
        )
    return name.strip(), int(number) if number.is_integer() else number


def _check_writable(path: str) -> None:
    """``--plot``'s PATH can be written, said before the run (it may take minutes, and its
    figures were lost with the plot's error after it): opened for appending, or made and
    removed again, nothing in it changed."""
    target = Path(path)
    try:
        if target.exists():
            with target.open("ab"):
                pass
        else:
            with target.open("xb"):
                pass
            target.unlink()
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise InvalidArgumentError(path, f"cannot be written: {reason}", what="--plot") from None


def _brownout(text: str) -> Brownout:
    """``START:LENGTH:FACTOR`` (seconds, seconds, a factor) as a :class:`Brownout`."""
    parts = text.split(":")
    try:
        start, length, factor = (float(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected START:LENGTH:FACTOR (seconds, seconds, a factor >= 1), got {text!r}"
        ) from None
    try:
        return Brownout(start, length, factor)
    except InvalidArgumentError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _pause_range(text: str) -> tuple[float, float]:
    """``SHORTEST:LONGEST`` (seconds, 0 <= SHORTEST <= LONGEST): the lengths ``--pauses``
    draws from."""
    shortest, _, longest = text.partition(":")
    try:
        low, high = float(shortest), float(longest)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected SHORTEST:LONGEST (seconds), got {text!r}"
        ) from None
    if not 0 <= low <= high <= MAX_DURATION:
        raise argparse.ArgumentTypeError(
            f"expected 0 <= SHORTEST <= LONGEST <= {MAX_DURATION:,.0f} (seconds: a century), "
            f"got {text!r}"
        )
    return low, high


#: What each way a commit ends without an acknowledgement means to its caller (the text
#: output says it beside the count).
OUTCOMES = (
    (
        "failed",
        "refused: the change no longer applies, or the input is refused as it is (the error "
        "says which); nothing committed",
    ),
    (
        "gave_up",
        "out of its retry budget (--max-attempts, --max-seconds) before it could land; "
        "nothing committed, safe to retry with the same commit id",
    ),
    ("unknown", "may or may not have committed: a later read of the registry decides"),
)


def _weight_of(kinds: Sequence[str]) -> Callable[[str], tuple[str, float]]:
    """The parser of a ``KIND=WEIGHT`` option whose KIND is one of ``kinds``."""

    def weight_of(text: str) -> tuple[str, float]:
        kind, equals, value = text.partition("=")
        kind = kind.strip()
        if kind not in kinds:
            raise argparse.ArgumentTypeError(
                f"expected KIND=WEIGHT with KIND one of {', '.join(kinds)}, got {text!r}"
            )
        try:
            weight = float(value) if equals else -1.0
        except ValueError:
            weight = -1.0
        if not 0 <= weight < float("inf"):
            raise argparse.ArgumentTypeError(f"expected a weight >= 0 in {text!r}")
        return kind, weight

    return weight_of


_mix_weight = _weight_of(KINDS)
_fault_weight = _weight_of(FAULT_KINDS)


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "simulate",
        run,
        help="simulate many writers on S3 (virtual time): throughput, latency, cost",
        description="Run lakelock's commit protocol with many writers against a simulated S3 "
        "in virtual time, check every guarantee, and print commits/s, commit latency, "
        "requests and bytes per commit, and the physical bound for the configuration, in the "
        "steady state past the start-up (--include-warmup counts it); the commits that failed, "
        "gave up or ended unknown, and what each means; with --json each second's figures too "
        "(commits_by_second), with --plot a PNG of them. --brownout slows the store for a "
        "while, to see how the protocol comes back. "
        "Deterministic: the same arguments print the same figures.",
        json=True,
        arguments=_arguments,
        check=_check_weights,
    )


def _check_weights(args: argparse.Namespace) -> None:
    """``--mix`` and ``--fault-mix`` give something a weight above 0: every weight 0 is a mix
    of nothing, which no run can draw from."""
    for option, weights, of in (
        ("--mix", args.mix, "kind of commit"),
        ("--fault-mix", args.fault_mix, "fault kind"),
    ):
        if weights and not any(weight > 0 for _, weight in weights):
            given = ",".join(f"{kind}={weight:g}" for kind, weight in weights)
            raise InvalidArgumentError(given, f"no {of} has a weight > 0", what=option)


def _arguments(parser: argparse.ArgumentParser) -> None:
    def option(flag: str, parse: Callable[[str], object], default: object, help: str) -> None:
        """Most of the options: a checked value, with a default, which the help shows (unless
        it says what the default means itself)."""
        if "default" not in help:
            shown = f"{default:g}" if isinstance(default, float) else default
            help = f"{help} (default {shown})"
        parser.add_argument(flag, type=parse, default=default, help=help)

    option("--writers", _writers, 16, f"writer processes, at most {MAX_WRITERS:,}")
    option(
        "--seconds",
        _run_seconds,
        10.0,
        f"virtual seconds writers commit for, at most {MAX_SECONDS:,.0f}",
    )
    option(
        "--store",
        _store,
        "s3-standard",
        "latency profile: s3-standard, s3-express or fixed:<ms> (default s3-standard)",
    )
    option("--seed", _non_negative, 0, "the run's seed")
    parser.add_argument(
        "--ignores-start-after",
        action="store_true",
        help="the store ignores ListObjectsV2's StartAfter: every LIST starts at its prefix "
        "(as on S3 Express One Zone's directory buckets, which lakelock doctor refuses; "
        "default: it honours StartAfter, as S3 Standard does)",
    )
    option(
        "--faults",
        _fraction,
        0.0,
        "fraction of requests answered with a fault (lost ack, 503, 409, timeout, a write "
        "that lands after its timeout)",
    )
    parser.add_argument(
        "--fault-mix",
        type=_fault_weight,
        action="append",
        default=[],
        metavar="KIND=WEIGHT",
        help="with --faults: which faults, by relative weight (repeatable, drawn in the order "
        f"given; kinds: {', '.join(FAULT_KINDS)}). Given at all, kinds not named get 0. "
        "Default: every kind, weight 1",
    )
    parser.add_argument(
        "--brownout",
        type=_brownout,
        default=None,
        metavar="START:LENGTH:FACTOR",
        help="the store slows down for LENGTH virtual seconds from START: every request sent "
        "then takes FACTOR times its latency, e.g. 20:10:10 (default: none)",
    )
    parser.add_argument(
        "--brownout-503",
        type=_fraction,
        default=0.0,
        metavar="RATE",
        help="with --brownout: the share of requests sent in its window answered 503 "
        "SlowDown, and none outside it (default 0)",
    )
    option("--kills", _count, 0, f"writers killed and restarted, at most {MAX_COUNT:,}")
    option(
        "--stalls",
        _count,
        0,
        f"writers that stall past the intent TTL before a request, at most {MAX_COUNT:,}",
    )
    option(
        "--swap-stalls",
        _count,
        0,
        "writers that stall past vacuum's window just before their next swap of the root, at "
        f"most {MAX_COUNT:,}",
    )
    option(
        "--rerun-stalls",
        _count,
        0,
        "writers killed sending an intent whose restart stalls after looking its commit id "
        f"up, at most {MAX_COUNT:,}",
    )
    option(
        "--skew", _skew, 0.0, f"each writer's clock off by up to this (s), at most {MAX_SKEW:,.0f}"
    )
    option(
        "--pauses",
        _count,
        0,
        "writers paused (starved of CPU), from a random moment, as the answer to their next "
        f"read of the root arrives, before their code runs on it, at most {MAX_COUNT:,}",
    )
    option(
        "--pause",
        _pause_range,
        Faults().pause,
        "with --pauses: the lengths each pause is drawn from, SHORTEST:LONGEST (default 2:5 s: "
        "past the watermark's lag of 1 s, within the intent TTL)",
    )
    option(
        "--clock-steps",
        _count,
        0,
        f"times a writer's clock steps to another offset within --skew, at most {MAX_COUNT:,}",
    )
    option(
        "--commits",
        _commits,
        0,
        f"each writer makes this many commits, then stops, at most {MAX_COMMITS:,} (default: "
        "for --seconds)",
    )
    option(
        "--cpu-ms",
        _milliseconds,
        0.0,
        "CPU milliseconds per request on a machine of --cores cores (to compare with a run on "
        "one machine; default 0: CPU is free)",
    )
    option(
        "--first-cpu-ms",
        _milliseconds,
        0.0,
        "CPU milliseconds each writer process spends on its first commit beyond its "
        "requests', on one of --cores cores (a burst of cold processes on one machine; "
        "default 0)",
    )
    option(
        "--endpoint-cpu-ms",
        _milliseconds,
        0.0,
        "of --cpu-ms, the milliseconds the endpoint spends on a request, in one process that "
        "serves one request at a time on the same cores (as the embedded endpoint does; "
        "default 0: every request's CPU on any free core)",
    )
    option(
        "--endpoint-crowding",
        _fraction,
        0.0,
        "how much --endpoint-cpu-ms grows for each request waiting at the endpoint (its "
        "threads contending for one interpreter; 0.004 measured; default 0)",
    )
    option(
        "--cores",
        _cores,
        2,
        "cores for --cpu-ms and --first-cpu-ms (at least one when either is given), at most "
        f"{MAX_CORES:,}",
    )
    option(
        "--think",
        _pause,
        0.0,
        "each writer pauses this long on average between commits (exponential; default 0: "
        "back to back)",
    )
    option(
        "--start-over",
        _pause,
        0.1,
        "writers start their first commit at random over this many seconds (a burst a loaded "
        "machine starts one process after another)",
    )
    option(
        "--opened",
        _pause,
        0.0,
        "each writer reads the root this long before its first commit, as a process that "
        "opened its lake and waits for the go (default 0: it starts cold)",
    )
    option(
        "--quiet-before",
        _pause,
        0.0,
        "the lake was made, and last committed to, this long before the writers start, as "
        "pipelines started on a lake made earlier find it (default 0: no lake yet, the "
        "writers' first commits make it)",
    )
    option("--readers", _count, 0, f"reader processes, at most {MAX_COUNT:,}")
    option(
        "--intent-ttl",
        _intent_ttl,
        600.0,
        f"intents expire after this (s, at most {MAX_INTENT_TTL:,.0f}, as a lake's setting)",
    )
    option(
        "--commit-window",
        commit_window,
        100,
        "the idempotency window: commits the root keeps the ids of, at most "
        f"{MAX_COMMIT_WINDOW} (default 100)",
    )
    option(
        "--vacuums",
        _count,
        0,
        f"vacuum processes: lakelock's vacuum, deleting, next to the writers, at most "
        f"{MAX_COUNT:,}",
    )
    option(
        "--vacuum-every",
        _seconds,
        0.5,
        "each vacuum process vacuums about this often (s, default 0.5)",
    )
    option(
        "--vacuum-older-than",
        _seconds,
        1.0,
        "vacuum's window (older_than, s, default 1; no retention check): longer than any "
        "commit takes, or a writer loses what it wrote",
    )
    parser.add_argument(
        "--protocol",
        choices=("core", "toy"),
        default="core",
        help="the commit core (default) or the simulator's toy protocol",
    )
    option("--max-attempts", _positive, 50, "a commit's attempts (default 50)")
    option("--max-seconds", _seconds, 300.0, "a commit's seconds (default 300)")
    parser.add_argument(
        "--policy",
        type=_policy_field,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="change a knob of the core's FoldPolicy (repeatable), e.g. --policy max_fold=32 "
        "(default: FoldPolicy's own values, as lakelock runs)",
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
        "--include-warmup",
        action="store_true",
        help="count the start-up in the figures (default: they are the steady state past it — "
        "until nine writers in ten ended their first commit, in whole seconds, at most a "
        "quarter of --seconds; --json's commits_by_second always has every second)",
    )
    parser.add_argument(
        "--plot",
        metavar="PATH",
        default=None,
        help="draw commits/s, p99 latency and requests per commit, second by second, as a PNG "
        "at PATH (needs matplotlib: pip install 'lakelock[plot]'; default: no plot)",
    )
    parser.add_argument(
        "--trace",
        metavar="PATH",
        default=None,
        help="write every request (sent, answered, process, key, fault, answer) to PATH as "
        "JSON lines: what a seed did, to debug it (default: no trace)",
    )
    add_progress_option(parser)


def run(args: argparse.Namespace) -> int:
    if args.cores == 0 and (args.cpu_ms > 0 or args.first_cpu_ms > 0):
        # No machine to spend it on: the run would price CPU at nothing, silently.
        raise InvalidArgumentError(
            "0",
            "--cpu-ms and --first-cpu-ms are spent on a machine of at least one core",
            what="--cores",
        )
    if args.endpoint_cpu_ms > args.cpu_ms:
        raise InvalidArgumentError(
            f"{args.endpoint_cpu_ms:g}",
            "is the endpoint's part of --cpu-ms: at most --cpu-ms",
            what="--endpoint-cpu-ms",
        )
    if args.endpoint_crowding and not args.endpoint_cpu_ms:
        raise InvalidArgumentError(
            f"{args.endpoint_crowding:g}",
            "needs --endpoint-cpu-ms (the CPU it grows)",
            what="--endpoint-crowding",
        )
    brownout: Brownout | None = args.brownout
    if args.brownout_503 and brownout is None:
        raise InvalidArgumentError(
            args.brownout_503, "needs --brownout (the window it applies in)", what="--brownout-503"
        )
    if args.pause != Faults().pause and not args.pauses:
        raise InvalidArgumentError(
            "{:g}:{:g}".format(*args.pause), "needs --pauses (the writers paused)", what="--pause"
        )
    if args.fault_mix and not args.faults:
        raise InvalidArgumentError(
            args.fault_mix[0][0],
            "needs --faults (the share of requests it mixes)",
            what="--fault-mix",
        )
    if brownout is not None:
        if brownout.start >= args.seconds:
            raise InvalidArgumentError(
                f"{brownout.start:g}", "starts after --seconds", what="--brownout START"
            )
        brownout = Brownout(brownout.start, brownout.length, brownout.factor, args.brownout_503)
    if args.plot is not None:
        require_matplotlib()  # before the run, which may take minutes
        _check_writable(args.plot)
    config = SimConfig(
        writers=args.writers,
        seconds=args.seconds,
        store=args.store,
        seed=args.seed,
        faults=Faults(
            rate=args.faults,
            # A kind named twice keeps its first place and its last weight.
            mix=tuple(dict(args.fault_mix).items()) if args.fault_mix else Faults().mix,
            kills=args.kills,
            stalls=args.stalls,
            swap_stalls=args.swap_stalls,
            rerun_stalls=args.rerun_stalls,
            pauses=args.pauses,
            pause=args.pause,
            skew=args.skew,
            steps=args.clock_steps,
            brownout=brownout,
        ),
        readers=args.readers,
        think=args.think,
        commits=args.commits,
        start_over=args.start_over,
        opened=args.opened,
        quiet_before=args.quiet_before,
        cpu=args.cpu_ms / 1000,
        cores=args.cores if args.cpu_ms > 0 or args.first_cpu_ms > 0 else 0,
        first_cpu=args.first_cpu_ms / 1000,
        endpoint_cpu=args.endpoint_cpu_ms / 1000,
        endpoint_crowding=args.endpoint_crowding,
        intent_ttl=args.intent_ttl,
        commit_window=args.commit_window,
        protocol=args.protocol,
        policy=tuple(args.policy),
        max_attempts=args.max_attempts,
        max_seconds=args.max_seconds,
        mix=Mix.of(args.mix) if args.mix else Mix(),
        vacuums=args.vacuums,
        vacuum_every=args.vacuum_every,
        vacuum_older_than=args.vacuum_older_than,
        ignores_start_after=args.ignores_start_after,
        include_warmup=args.include_warmup,
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
    if args.plot is not None:
        plot(metrics, args.plot, brownout=brownout)
    if args.json:
        figures = metrics.as_json()
        if config.faults.pauses:  # what a paused writer risks (without them: as before)
            figures["passed_over"] = len(result.passed_over)
        sys.stdout.write(orjson.dumps(figures, option=orjson.OPT_SORT_KEYS).decode())
        sys.stdout.write("\n")
    else:
        _table(result)
    return 1 if result.violations else 0


def _measured(metrics: Metrics, config: SimConfig) -> str:
    """Which seconds the figures are of, and why."""
    if metrics.warmup:
        return (
            f"seconds {metrics.warmup:g}-{metrics.makespan:g}: the steady state, past the "
            f"warm-up (until 9 writers in 10 ended their first commit; {metrics.warmup_commits} "
            "commits left out; --include-warmup counts them)"
        )
    if config.include_warmup:
        return "the whole run, warm-up included (--include-warmup)"
    if config.commits:
        return "the whole run (--commits: a burst, each writer's first commit counted)"
    return "the whole run (too short to leave out a warm-up: a quarter of it is under 1 s)"


def _table(result: SimResult) -> None:
    config, metrics = result.config, result.metrics
    brownout = config.faults.brownout
    rows = [
        ("store", metrics.store),
        ("writers", str(metrics.writers)),
        ("virtual seconds", f"{metrics.makespan:g}"),
        ("measured", _measured(metrics, config)),
    ]
    if config.quiet_before:
        rows.append(
            (
                "lake",
                f"made, and last committed to, {config.quiet_before:g} s before the writers "
                "started (--quiet-before; its making left out of the figures)",
            )
        )
    rows += [
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
    ]
    if brownout is not None:
        rows.append(("brownout", _brownout_summary(metrics, brownout)))
    rows += [
        ("bound: key CAS rate x fold", f"{metrics.bound_cas:.1f} commits/s"),
        ("bound: writers / latency floor", f"{metrics.bound_latency:.1f} commits/s"),
    ]
    if config.vacuums:
        rows += [
            ("vacuum runs / objects deleted", f"{metrics.vacuum_runs} / {metrics.vacuum_deleted}"),
            ("held past the window (late)", str(metrics.vacuum_late)),
        ]
    width = max(len(name) for name in [*(n for n, _ in rows), *metrics.areas]) + 2
    for name, value in rows:
        sys.stdout.write(f"{name:<{width}}  {value}\n")
    for area, per_commit in sorted(metrics.areas.items(), key=lambda item: -item[1]):
        sys.stdout.write(f"  {area:<{width - 2}}  {per_commit:.2f}/commit\n")
    sys.stdout.write("commits not acknowledged (the whole run):\n")
    for outcome, meaning in OUTCOMES:
        errors = metrics.unacknowledged.get(outcome, {})
        count = sum(errors.values())
        sys.stdout.write(f"  {outcome.replace('_', ' '):<{width - 2}}  {count:<5}  {meaning}\n")
        for error, times in errors.items():
            sys.stdout.write(f"    {error:<{width - 4}}  {times}\n")
    sys.stdout.write(
        f"  {'killed':<{width - 2}}  {metrics.killed:<5}  writer processes killed mid-commit "
        "and restarted, re-running it with the same commit id (counted above if it then "
        "did not land)\n"
    )
    sys.stdout.write(f"{'violations':<{width}}  {metrics.violations}\n")
    for violation in result.violations[:20]:
        sys.stdout.write(f"violation: {violation}\n")
    if result.violations:
        sys.stdout.write(f"replay: {config.replay_command()}\n")


def _brownout_summary(metrics: Metrics, brownout: Brownout) -> str:
    """The brownout, the commits per second before and in it, and when the run was back."""
    text = f"seconds {brownout.start:g}-{brownout.end:g}, latency x{brownout.factor:g}"
    if brownout.throttle:
        text += f", {brownout.throttle:.0%} answered 503"
    by_second = metrics.commits_by_second
    inside = by_second[math.ceil(brownout.start) : math.floor(brownout.end)]
    if metrics.brownout_before:
        text += f"; commits/s {metrics.brownout_before:.1f} before"
        if inside:
            text += f", {sum(inside) / len(inside):.1f} in it"
        if metrics.brownout_recovered_s is not None:
            text += (
                f"; back to >= {RECOVERED:.0%} of before {metrics.brownout_recovered_s:g} s "
                "after its end"
            )
        else:
            text += f"; not back to {RECOVERED:.0%} of before by the run's end"
    return text
