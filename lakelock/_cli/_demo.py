"""``lakelock demo``: many writers, one lake, on an embedded S3 endpoint (``lakelock._demo``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lakelock._cli._common import add_command, add_progress_option, number_type
from lakelock._cli._progress import progress_wanted

__all__ = ["add_parser", "run"]


_positive_int = number_type(int, lambda value: value >= 1, "a positive integer")
_non_negative = number_type(float, lambda value: value >= 0, "seconds >= 0")


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
    parser.add_argument(
        "--writers", type=_positive_int, default=4, help="concurrent writers (default 4)"
    )
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
        # The `local` extra (moto) is missing: say what to install, once.
        raise OSError(
            "lakelock demo runs on the embedded S3 endpoint, which needs the `local` extra: "
            "pip install 'lakelock[local]'"
        ) from error
    status: int = run_demo(
        writers=args.writers,
        seconds=args.seconds,
        latency=args.latency,
        out=sys.stdout,
        progress=progress_wanted(args.progress),
    )
    return status
