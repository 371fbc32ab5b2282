"""Simulated time: the S3 server's clock (stamped into every response's ``Date`` header) and
the local monotonic clocks of simulated machines, advancing only when a test says so."""

from __future__ import annotations

from collections.abc import Callable
from email.utils import formatdate
from typing import Any

__all__ = ["EPOCH", "SimTime"]

EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z


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
