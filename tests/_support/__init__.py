"""Helpers shared by test modules (fixtures live in ``tests/conftest.py``). Test modules
import from here, never from each other."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from lakelock._retry import RetryPolicy

__all__ = ["FAST_RETRY", "REPO", "no_sleep", "wait_until"]

#: The repository's root: the working directory of worker processes.
REPO = Path(__file__).resolve().parents[2]


def no_sleep(seconds: float) -> None:
    """Retry backoff that does not wait: tests force outcomes, they do not wait them out."""


FAST_RETRY = RetryPolicy(max_attempts=10, sleep=no_sleep)


def wait_until(condition: Callable[[], bool], *, attempts: int = 4000) -> None:
    """Poll a server-side condition (a stalled request arriving), bounded: this waits for an
    event that is certain to happen, it does not let time pass to make something happen."""
    for _ in range(attempts):
        if condition():
            return
        time.sleep(0.005)
    raise AssertionError("condition never held")
