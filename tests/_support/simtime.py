"""Simulated time: the S3 server's clock (stamped into every response's ``Date`` header) and
the local monotonic clocks of simulated machines, advancing only when a test says so; a
process's wall clock the test moves on by hand."""

from __future__ import annotations

import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

__all__ = ["EPOCH", "HOUR", "Clock", "SimTime", "later"]

EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z
HOUR = 3600.0


class Clock:
    """A process's wall clock (a ``clock=`` to inject) that the test moves on by adding to
    ``passed``: ``time.time()`` plus what has passed or, ``stopped``, the time it was made
    plus what has passed (no time passes unless the test says so)."""

    def __init__(self, *, stopped: bool = False) -> None:
        self.passed = 0.0
        self.stopped_at = time.time() if stopped else None

    def __call__(self) -> float:
        return (time.time() if self.stopped_at is None else self.stopped_at) + self.passed


def later(hours: float) -> Callable[[], float]:
    """A clock ``hours`` ahead of now."""
    return lambda: time.time() + hours * HOUR


class SimTime:
    """Simulated time for one test: the S3 server's clock (stamped into every response's
    ``Date`` header, truncated to the second as S3 does) and the local monotonic clocks of
    simulated machines all advance together, only when the test says so."""

    def __init__(self, start: float = EPOCH + 0.25) -> None:
        self.server = start
        self.slept: list[float] = []

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        self.server += seconds

    def machine(self, base: float = 1000.0, rate: float = 1.0) -> Callable[[], float]:
        """A local monotonic clock: arbitrary origin ``base``, running at ``rate``."""
        origin = self.server
        return lambda: base + (self.server - origin) * rate

    def sleep(self, seconds: float) -> None:
        """Injected ``sleep``: time passes for everyone, instantly."""
        self.slept.append(seconds)
        self.advance(seconds)

    def attach(self, client: Any) -> Any:
        """Make ``client`` see this simulation's server time in every ``Date`` header."""

        def stamp(response_dict: dict[str, Any], **_: Any) -> None:
            response_dict["headers"]["Date"] = formatdate(self.server, usegmt=True)

        client.meta.events.register("before-parse.s3.*", stamp)
        return client
