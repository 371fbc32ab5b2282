"""Retry budgets, built on tenacity: bounded by attempts *and* total time, with jitter.

Every retry loop in lakelock takes a :class:`RetryPolicy`, so callers can tune it and tests can
inject ``sleep`` (no real waiting) and ``clock``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import tenacity

__all__ = ["OutOfTime", "RetryPolicy", "SteadyOr"]


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying.

    ``max_attempts`` counts the first try (generous by default: under contention a 412
    means another writer got through, so retrying is progress); ``max_elapsed`` caps the
    total seconds (measured with ``clock``); the wait before attempt *n* is random in
    ``[0, min(max_backoff, initial_backoff * 2**n)]`` ("full jitter"), so contending writers
    spread out.
    """

    max_attempts: int = 50
    max_elapsed: float = 60.0
    initial_backoff: float = 0.02
    max_backoff: float = 2.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.max_elapsed <= 0:
            raise ValueError(f"max_elapsed must be > 0, got {self.max_elapsed}")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ValueError("need 0 <= initial_backoff <= max_backoff")

    def retrying(
        self,
        retry_on: type[BaseException] | tuple[type[BaseException], ...],
        *,
        steady: tuple[type[BaseException], ...] = (),
        poll: Callable[[], float] | None = None,
    ) -> tenacity.Retrying:
        """A tenacity ``Retrying`` that retries ``retry_on`` exceptions within this budget and
        re-raises the last one when the budget is spent. An exception of a ``steady`` type is
        not a failure but a wait for somebody else's progress: it is retried after ``poll()``
        seconds, and does not grow the backoff of the failures that follow."""
        backoff = tenacity.wait_random_exponential(
            multiplier=self.initial_backoff, max=self.max_backoff
        )
        started, clock = self.clock(), self.clock
        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_attempts)
            | OutOfTime(lambda: clock() - started, self.max_elapsed),
            wait=SteadyOr(backoff, steady, poll) if steady and poll is not None else backoff,
            retry=tenacity.retry_if_exception_type(retry_on),
            sleep=self.sleep,
            reraise=True,
        )


class SteadyOr(tenacity.wait.wait_base):
    """``poll()`` after a ``steady`` exception (a wait for somebody else's progress, not a
    failure); otherwise ``backoff``, counting failures only, so waits do not grow it. Used by
    :meth:`RetryPolicy.retrying` and by the registry's commit core."""

    def __init__(
        self,
        backoff: tenacity.wait.wait_base,
        steady: tuple[type[BaseException], ...],
        poll: Callable[[], float],
    ) -> None:
        self._backoff = backoff
        self._steady = steady
        self._poll = poll
        self._failures = 0

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        if isinstance(error, self._steady):
            return self._poll()
        self._failures += 1
        counted = copy.copy(retry_state)
        counted.attempt_number = self._failures
        return float(self._backoff(counted))


class OutOfTime(tenacity.stop.stop_base):
    """Stop once ``elapsed()`` reaches ``most`` seconds. tenacity's ``stop_after_delay``
    reads ``time.monotonic`` itself; this reads whatever clock it is given (a policy's
    injectable clock, or the time the commit core is handed)."""

    def __init__(self, elapsed: Callable[[], float], most: float) -> None:
        self._elapsed = elapsed
        self._most = most

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._elapsed() >= self._most
