"""Commands run as a user runs them: ``lakelock`` in a process of its own, run to its end, or
started, its output read up to a line, and Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable

from tests._support import CLI_ENV

__all__ = ["InProcess", "interrupt", "lakelock", "read_until", "start_cli"]

#: The ``in_process`` fixture (tests/conftest.py): ``lakelock <args>`` run in the test's own
#: process, its result as :func:`lakelock` gives it.
InProcess = Callable[..., subprocess.CompletedProcess[str]]


def lakelock(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``lakelock <args>`` run to its end with :data:`~tests._support.CLI_ENV` (or ``env``
    instead), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "lakelock.cli", *args],
        capture_output=True,
        text=True,
        env=env or CLI_ENV,
        timeout=timeout,
        check=False,
    )


def start_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``lakelock <args>`` started with :data:`~tests._support.CLI_ENV` (and ``env``), its
    output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "lakelock.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**CLI_ENV, **(env or {})},
    )


def read_until(process: subprocess.Popen[str], marker: str, timeout: float = 90) -> list[str]:
    """Lines of ``process``'s stdout up to ``marker`` (fails after ``timeout`` seconds: a
    safety net against a server that never starts, generous for start-up on a loaded
    machine)."""
    assert process.stdout is not None
    lines: list[str] = []
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.strip() == marker:
                return lines
    finally:
        timer.cancel()
    raise AssertionError(f"no {marker!r} in output: {lines}")


def interrupt(process: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """Ctrl-C, then the rest of stdout and stderr; the process must exit 0 (``timeout``: a
    safety net, the exit is the check)."""
    try:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    return out, err
