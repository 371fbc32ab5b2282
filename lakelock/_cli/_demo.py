"""``lakelock demo``: many writers, one lake, on an embedded S3 endpoint (``lakelock._demo``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lakelock._cli._common import add_command, add_progress_option
from lakelock._cli._progress import progress_wanted

__all__ = ["add_parser", "run"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "demo",
        run,
        help="watch many writers share one lake, on an embedded S3 endpoint",
        description="Start an embedded S3 endpoint and run concurrent writers against one "
        "lake, showing commits, conflicts and redrives. Needs the `local` extra.",
        arguments=_arguments,
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--writers", type=_positive_int, default=4, help="concurrent writers")
    parser.add_argument(
        "--seconds",
        type=_non_negative,
        default=None,
        help="run for this long (default: the demo's own plan)",
    )
    parser.add_argument(
        "--latency",
        type=_non_negative,
        default=0.01,
        help="seconds of simulated S3 latency per request (default 0.01)",
    )
    add_progress_option(parser)


def run(args: argparse.Namespace) -> int:
    try:
        from lakelock._demo import run_demo  # noqa: PLC0415 - starts moto: only when asked
    except ImportError as error:
        if error.name == "lakelock._demo":
            raise NotImplementedError("this lakelock version has no demo") from error
        # The `local` extra (moto) is missing.
        raise OSError(f"lakelock demo needs the embedded S3 endpoint: {error}") from error
    status: int = run_demo(
        writers=args.writers,
        seconds=args.seconds,
        latency=args.latency,
        out=sys.stdout,
        progress=progress_wanted(args.progress),
    )
    return status
