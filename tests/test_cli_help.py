"""``lakelock <command> --help``: every option of every command says what it does and what
holds when it is not given (its default), or that it must be given; every command and
action has a description of its own."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from lakelock.cli import build_parser


def _parsers(
    parser: argparse.ArgumentParser, name: str = "lakelock"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {command}")


def _options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    shown = (action for action in parser._actions if action.help != argparse.SUPPRESS)
    for action in shown:
        if action.option_strings and not isinstance(
            action, (argparse._HelpAction, argparse._VersionAction)
        ):
            yield action


def test_every_option_says_its_default_or_that_it_is_required() -> None:
    """An option's help names its default ("default ...") unless it is required or a
    switch that is off unless given: a user reading ``--help`` knows what runs without it."""
    switches = (argparse._StoreTrueAction, argparse._StoreFalseAction)
    silent = [
        f"{name} {'/'.join(option.option_strings)}"
        for name, parser in _parsers(build_parser())
        for option in _options(parser)
        if not option.help
        or not (
            option.required
            or isinstance(option, switches)
            or "default" in option.help.lower()
            or "required" in option.help.lower()
        )
    ]
    assert silent == []


def test_every_command_describes_itself() -> None:
    """Each command and action has a description: what it does, shown by its ``--help``."""
    undescribed = [name for name, parser in _parsers(build_parser()) if not parser.description]
    assert undescribed == []


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["registry", "show", "--help"]])
def test_help_into_a_reader_gone_away_exits_as_every_command_does(argv: list[str]) -> None:
    """``lakelock --help | head -1``: the reader goes away before the help is written. As
    for every command's output, that is exit status 141, quietly; before, the write's
    error was swallowed and the exit status was 0, as if the help had been read."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "lakelock.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")
