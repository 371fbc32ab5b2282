"""Retry budgets, built on tenacity: bounded by attempts *and* total time, with jitter; and
the load one process puts on the store, controlled (:class:`Load`).

Every retry loop in lakelock takes a :class:`RetryPolicy`, so callers can tune it and tests can
inject ``sleep`` (no real waiting) and ``clock``. Every retry of one process, in its store
layer and in its commit loop, also draws on that process's :class:`Load`: a retry budget (its
retries stay a share of its requests) and a pace that 503 SlowDown halves and time restores
(AIMD). :class:`Load` is pure and reads only the clock it is given, so the simulator runs the
same object in virtual time (docs/decisions/0033-load-control.md).
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import tenacity

__all__ = ["Load", "LoadPolicy", "LoadWait", "OutOfTime", "RetryPolicy", "SteadyOr"]


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying.

    ``max_attempts`` counts the first try (generous by default: under contention a 412
    means another writer got through, so retrying is progress; a commit waiting for another
    process's fold does not count its looks at a root that stood still); ``max_elapsed`` caps the
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
        load: Load | None = None,
    ) -> tenacity.Retrying:
        """A tenacity ``Retrying`` that retries ``retry_on`` exceptions within this budget and
        re-raises the last one when the budget is spent. An exception of a ``steady`` type is
        not a failure but a wait for somebody else's progress: it is retried after ``poll()``
        seconds, and does not grow the backoff of the failures that follow. With ``load``,
        each retry also waits for the process's retry budget and pace (:class:`LoadWait`)."""
        backoff: tenacity.wait.wait_base = tenacity.wait_random_exponential(
            multiplier=self.initial_backoff, max=self.max_backoff
        )
        if load is not None:
            backoff = LoadWait(backoff, load)
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


@dataclass(frozen=True)
class LoadPolicy:
    """The knobs of :class:`Load` (docs/decisions/0033-load-control.md gives each its
    reason). Rates are per second; ``share`` is retries per request."""

    #: Retries may be this share of the process's requests (Finagle's default budget)...
    share: float = 0.2
    #: ... plus this many a second whatever the requests (a process that just started, or
    #: that sends few), ...
    reserve: float = 1.0
    #: ... saved up to at most this many (a burst of faults is retried at once).
    burst: float = 10.0
    #: A pace at or above this (attempts a second) holds nothing back; the first 503 SlowDown
    #: from there sets half of it.
    free: float = 20.0
    #: Each 503 SlowDown multiplies the pace by this (TCP's halving)...
    decrease: float = 0.5
    #: ... and each second adds this much back (attempts a second per second): however slow
    #: the pace fell, an attempt waits a fraction of a second more each second.
    increase: float = 10.0

    def __post_init__(self) -> None:
        if self.share < 0 or self.reserve <= 0 or self.burst < 1:
            raise ValueError("need share >= 0, reserve > 0 and burst >= 1")
        if not 0 < self.decrease < 1 or self.increase <= 0 or self.free <= 0:
            raise ValueError("need 0 < decrease < 1, increase > 0 and free > 0")


class Load:
    """How hard one process may press the store: a retry budget and a pace (sans I/O: it
    reads only ``clock``, the simulator's virtual one there; thread-safe).

    *The retry budget* (as gRPC's retry throttling and Finagle's ``RetryBudget``): each
    request a process sends first deposits ``share`` of a retry, and ``reserve`` retries a
    second accrue besides, up to ``burst``; each retry withdraws one. A retry the budget
    cannot pay for waits until the reserve has (:meth:`retry_wait`; at most a second's
    reserve is owed): it is delayed, never refused, so a commit still ends, and a process's
    retries stay about ``share`` of its requests plus ``reserve`` a second, whatever the
    fault rate.

    *The pace* (AIMD, as TCP's congestion window): a 503 SlowDown multiplies the rate of the
    process's attempts (its folds, each ending in one swap of the root, and its retries) by
    ``decrease``; every second adds ``increase`` back, until it is ``free`` again and holds
    nothing back. Only a 503 to a request sent after the last decrease counts (one decrease
    per window, as TCP's: the other answers to requests sent at the old pace say nothing
    new)."""

    def __init__(
        self, policy: LoadPolicy | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = policy or LoadPolicy()
        self.clock = clock
        self._lock = threading.Lock()
        start = clock()
        self._tokens = self.policy.burst
        self._refilled = start
        #: The pace at the last decrease, and when it was (no decrease yet: free).
        self._pace = math.inf
        self._cut = -math.inf
        #: When the last attempt was let go (:meth:`hold`).
        self._last = -math.inf
        #: First requests, retries, and 503s counted (decreases among them).
        self.requests = 0
        self.retries = 0
        self.throttled = 0
        self.decreases = 0

    # -- the retry budget -------------------------------------------------------------------

    def sent(self) -> None:
        """A request went out for the first time (not a retry): it deposits ``share``."""
        with self._lock:
            self.requests += 1
            self._refill(self.clock())
            self._tokens = min(self.policy.burst, self._tokens + self.policy.share)

    def retry_wait(self, backoff: float) -> float:
        """A retry is due after ``backoff`` seconds: how long it waits instead, withdrawing
        one from the budget — at least ``backoff`` and the pace's gap, and as long as the
        reserve takes to pay for it if the budget is overdrawn."""
        with self._lock:
            now = self.clock()
            self.retries += 1
            self._refill(now)
            # Overdrawn by at most a second of the reserve: a storm's retries wait for it,
            # but its debt does not outlive it (the retries after it would wait it out).
            self._tokens = max(self._tokens - 1.0, -self.policy.reserve)
            owed = -self._tokens / self.policy.reserve if self._tokens < 0 else 0.0
            return max(backoff, owed, self._gap(now))

    def _refill(self, now: float) -> None:
        if now > self._refilled:
            earned = (now - self._refilled) * self.policy.reserve
            self._tokens = min(self.policy.burst, self._tokens + earned)
            self._refilled = now

    # -- the pace -------------------------------------------------------------------------

    def slowed(self, sent: float) -> None:
        """A request sent at ``sent`` (this clock) was answered 503 SlowDown."""
        with self._lock:
            self.throttled += 1
            if sent < self._cut:
                return  # sent before the last decrease: already answered for
            now = self.clock()
            p = self.policy
            self._pace = min(self._rate(now), p.free) * p.decrease
            self._cut = now
            self.decreases += 1

    def gap(self) -> float:
        """Seconds between two attempts at the current pace (0: free)."""
        with self._lock:
            return self._gap(self.clock())

    def hold(self) -> float:
        """How long the next attempt waits so that attempts keep the pace (0: at once); the
        attempt counts as let go when that wait ends."""
        with self._lock:
            now = self.clock()
            wait = max(0.0, self._last + self._gap(now) - now)
            self._last = now + wait
            return wait

    def _rate(self, now: float) -> float:
        if self._pace == math.inf:
            return math.inf
        return self._pace + self.policy.increase * max(0.0, now - self._cut)

    def _gap(self, now: float) -> float:
        rate = self._rate(now)
        if rate >= self.policy.free:
            self._pace = math.inf  # recovered: free until the next 503
            return 0.0
        return 1.0 / rate


class LoadWait(tenacity.wait.wait_base):
    """``backoff``, as long as the process's :class:`Load` makes it (its retry budget and its
    pace): every retry of the store layer and of the commit loop waits through one."""

    def __init__(self, backoff: tenacity.wait.wait_base, load: Load) -> None:
        self._backoff = backoff
        self._load = load

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self._load.retry_wait(float(self._backoff(retry_state)))
