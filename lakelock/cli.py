"""The ``lakelock`` command line.

```
lakelock policy   --bucket B --principal ARN [...]       bucket policy JSON on stdout
lakelock registry show|log s3://bucket/prefix            datasets, partitions, recent commits
lakelock locks    s3://bucket/prefix                     lease and lock holders, tokens, expiry
lakelock doctor   s3://bucket/prefix                     can lakelock run safely on this store?
lakelock vacuum   s3://bucket/prefix --older-than 24h    unreferenced files (--delete removes)
lakelock mirror   s3://bucket/prefix --dataset NAME      Iceberg and Delta views of each version
lakelock serve    [--port N] [--bucket B] [--catalog]    embedded S3 endpoint for development
lakelock catalog  s3://bucket/prefix [--port N]          Iceberg REST catalog (takes commits)
lakelock demo     [--writers N]                          many writers, one lake, on embedded S3
lakelock simulate [--writers N] [--store s3-standard]    many writers, simulated S3, virtual time
```

Exit status: 0 success; 1 an operation failed or ``doctor`` found a required feature missing;
2 bad usage; 141 the reader of stdout went away (``| head``, ``--help`` included), quietly.
Errors are one line on stderr unless ``--debug``. What a lake holds is printed with control
characters and bidirectional controls escaped: as ``\x1b`` in text, as ``\u009b`` in
``--json`` (the same JSON, parsed). Each command lives in its own module of
:mod:`lakelock._cli`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from lakelock import __version__
from lakelock._cli import (
    _catalog,
    _demo,
    _doctor,
    _locks,
    _mirror,
    _policy,
    _registry,
    _serve,
    _simulate,
    _vacuum,
)
from lakelock._cli._common import (
    add_debug_option,
    describe_error,
    is_expected,
    join_dash_values,
)
from lakelock.errors import InvalidArgumentError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["build_parser", "main"]

_COMMANDS = (
    _policy,
    _registry,
    _locks,
    _doctor,
    _vacuum,
    _mirror,
    _serve,
    _catalog,
    _demo,
    _simulate,
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a command (or a ``registry`` action) left out shows the help
    listing them, not only a usage line that names none."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required: ") and (
            "COMMAND" in message or "ACTION" in message
        ):
            self.print_help(sys.stderr)
            self.exit(2, f"{self.prog}: error: {message}\n")
        super().error(message)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """argparse's, but a reader gone away (``--help | head``) is not ignored: the help
        is flushed here and :func:`main` answers a broken pipe as every command does (141)."""
        if message:
            stream = file or sys.stderr
            stream.write(message)
            flush = getattr(stream, "flush", None)
            if flush is not None:
                flush()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lakelock",
        description="Many writers, one S3 data lake, no coordinator but S3's conditional requests.",
    )
    parser.add_argument("--version", action="version", version=f"lakelock {__version__}")
    add_debug_option(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _COMMANDS:
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lakelock`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(join_dash_values(sys.argv[1:] if argv is None else argv))
    except SystemExit as exit_:  # --help, --version, usage errors (status 2)
        return exit_.code if isinstance(exit_.code, int) else 1
    except BrokenPipeError:  # --help or --version into a reader gone away
        _silence_stdout()
        return 141
    refused = _usage_refused(args)
    if refused is not None:
        sys.stderr.write(f"{args.usage_prog}: error: {refused}\n")
        return 2
    try:
        status: int = args.run(args)
        sys.stdout.flush()  # a reader gone away is found here, not at the interpreter's exit
    except KeyboardInterrupt:
        if args.debug:
            raise
        sys.stderr.write("lakelock: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as a tool killed by SIGPIPE does,
        # and keep the interpreter's final flush from complaining about it again.
        _silence_stdout()
        return 141
    except Exception as error:
        if args.debug:
            raise
        message = describe_error(error, args)
        if not is_expected(error):
            message = (
                f"internal error: {type(error).__name__}: {message} "
                "(run with --debug for the traceback)"
            )
        sys.stderr.write(f"lakelock: error: {message}\n")
        return 1
    return status


def _usage_refused(args: argparse.Namespace) -> str | None:
    """What the command's ``check`` refuses in its options taken together, else ``None``."""
    check = getattr(args, "check", None)
    if check is None:
        return None
    try:
        check(args)
    except InvalidArgumentError as error:
        return str(error)
    return None


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor behind stdout
        pass


if __name__ == "__main__":
    sys.exit(main())
