"""Server time: the shared clock that lease and lock expiry is decided in.

Why not local clocks
--------------------
Leases and lock-table holders carry an ``expires_at`` that processes on different machines
compare with "now". Wall clocks of two machines can disagree by seconds (no NTP, a VM resumed
from pause, a clock stepped by hand), so lakelock never compares ``expires_at`` with a local
wall clock. Every instant stored in a lease or lock table is **server time**: seconds since
the epoch as S3's own ``Date`` response header counts them. All machines talk to the same S3,
so they share that reference.

The model
---------
Locally only a monotonic clock is used (``clock=``, :func:`time.monotonic` by default,
injectable). Each GET through the adapter reports the response's ``Date`` header ``D``; the
caller notes its monotonic clock just before sending (``sent``) and just after the response
(``received``). ``Date`` is truncated to whole seconds (RFC 9110 ``HTTP-date``; verified against
AWS and the embedded endpoint), so the true server time ``s`` at the moment the response was
generated satisfies ``D <= s < D + 1``, and that moment lies somewhere in ``[sent, received]``.
Hence the offset ``s - local`` lies in ``[D - received, D + 1 - sent]``: an interval about
1 s + one round trip wide. :class:`ServerClock` keeps the **intersection** of these intervals
over successive responses, which shrinks below one second as soon as two samples straddle a
tick of the server's clock. Intervals are widened by ``max_drift`` (default 1000 ppm, ten times
a cheap quartz oscillator) per second of age, because the local monotonic clock and the
server's clock may run at slightly different rates. If a new sample does not intersect the kept
interval (the server's clock was stepped, or a different server answered with a different
clock beyond the drift allowance) the kept interval is dropped for the new sample.

From the kept interval, :meth:`ServerClock.now` gives :class:`TimeBounds` ``(earliest,
latest)``: the server time *now* is known to lie between them. All leases and locks of a
process on one store share one :class:`ServerClock` (:func:`shared_server_clock`), so each
benefits from the others' responses.

The safety margin
-----------------
Every expiry decision uses the bound that is safe for the decider, plus a stated margin
``margin`` (:data:`DEFAULT_MARGIN`, 1 s):

- the **holder** considers itself valid only while ``latest < expires_at - margin``;
- **everyone else** considers a holder gone only once ``earliest > expires_at + margin``.

If the bounds are right, the holder's last valid server instant and anyone else's first
takeover instant are therefore more than ``2 * margin`` apart in server time. The margin is what
absorbs what the bounds cannot see: S3 front-ends whose clocks disagree with each other, a
``Date`` that is rounded instead of truncated (half a second), local clock rates beyond
``max_drift``. It does **not** cover a holder that is paused between checking its lease and
acting on it (a GC pause, a stopped VM): that is what fencing tokens are for.

Trust boundary: lakelock trusts the ``Date`` headers of the S3 endpoint it talks to and the
monotonic clock of its own machine (up to ``max_drift``); it trusts no other machine's clock.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

__all__ = [
    "DATE_RESOLUTION",
    "DEFAULT_MARGIN",
    "MAX_DRIFT",
    "ServerClock",
    "TimeBounds",
    "shared_server_clock",
]

#: Seconds by which lease and lock decisions keep away from ``expires_at`` (module docstring).
DEFAULT_MARGIN = 1.0
#: Largest relative rate difference assumed between the local monotonic clock and S3's clock.
MAX_DRIFT = 1e-3
#: S3's ``Date`` header counts whole seconds.
DATE_RESOLUTION = 1.0


@dataclass(frozen=True, slots=True)
class TimeBounds:
    """Server time now lies in ``[earliest, latest]`` (seconds since the epoch)."""

    earliest: float
    latest: float

    def __post_init__(self) -> None:
        if not self.earliest <= self.latest:
            raise ValueError(f"earliest {self.earliest} is after latest {self.latest}")

    @property
    def width(self) -> float:
        return self.latest - self.earliest


@dataclass(frozen=True, slots=True)
class _Offset:
    """``server - local`` lies in ``[low, high]`` at local time ``at``; widens with age."""

    low: float
    high: float
    at: float

    def aged(self, local: float, drift: float) -> tuple[float, float]:
        spread = drift * max(0.0, local - self.at)
        return self.low - spread, self.high + spread


class ServerClock:
    """Bounds on S3's clock, learnt from ``Date`` headers, read through the local ``clock``.

    Thread-safe: a heartbeat thread and the caller's thread share one.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_drift: float = MAX_DRIFT,
        resolution: float = DATE_RESOLUTION,
    ) -> None:
        if not 0 <= max_drift < 1:
            raise ValueError(f"max_drift must be in [0, 1), got {max_drift}")
        if resolution < 0:
            raise ValueError(f"resolution must be >= 0, got {resolution}")
        self.clock = clock
        self.max_drift = max_drift
        self.resolution = resolution
        self._mutex = threading.Lock()
        self._offset: _Offset | None = None
        #: How many times a sample contradicted the kept interval and replaced it.
        self.resets = 0

    @property
    def has_sample(self) -> bool:
        with self._mutex:
            return self._offset is not None

    def observe(self, server_time: datetime | float | None, sent: float, received: float) -> None:
        """Learn from one response: its ``Date`` was ``server_time``; the request left at local
        time ``sent`` and the response arrived at ``received``. ``None`` (no header) teaches
        nothing."""
        if server_time is None:
            return
        date = server_time.timestamp() if isinstance(server_time, datetime) else server_time
        if received < sent:
            raise ValueError(f"received {received} before sent {sent}")
        # The offset held at some instant in [sent, received]; carried to `received` it may
        # have moved by drift * (received - sent) more.
        slack = self.max_drift * (received - sent)
        sample = _Offset(date - received - slack, date + self.resolution - sent + slack, received)
        with self._mutex:
            kept = self._offset
            if kept is None:
                self._offset = sample
                return
            low, high = kept.aged(received, self.max_drift)
            low, high = max(low, sample.low), min(high, sample.high)
            if low <= high:
                self._offset = _Offset(low, high, received)
            else:
                self._offset = sample
                self.resets += 1

    def now(self) -> TimeBounds:
        """Bounds on the server's time now. Raises :class:`RuntimeError` before any sample."""
        local = self.clock()
        with self._mutex:
            offset = self._offset
        if offset is None:
            raise RuntimeError("no server time observed yet: read an object first")
        low, high = offset.aged(local, self.max_drift)
        return TimeBounds(local + low, local + high)

    def local_when_earliest_exceeds(self, server_time: float) -> float:
        """The local time from which :meth:`now` ``.earliest`` exceeds ``server_time`` (unless
        a later sample moves the bounds): when a waiter should look again."""
        with self._mutex:
            offset = self._offset
        if offset is None:
            raise RuntimeError("no server time observed yet: read an object first")
        # earliest(t) = t + low - drift * (t - at), increasing in t; solve earliest(t) = target.
        drift = self.max_drift
        at_or_after = (server_time - offset.low - drift * offset.at) / (1 - drift)
        return max(at_or_after, offset.at)


_shared: weakref.WeakKeyDictionary[object, dict[Callable[[], float], ServerClock]] = (
    weakref.WeakKeyDictionary()
)
_shared_mutex = threading.Lock()


def shared_server_clock(source: object, clock: Callable[[], float]) -> ServerClock:
    """The one :class:`ServerClock` of ``source`` (an object store) read through ``clock``.

    Every lease and lock of a process on one store shares it, so each learns from all their
    responses: after the first few polls the bounds are about a round trip wide instead of a
    second. Kept only as long as ``source`` lives.
    """
    with _shared_mutex:
        clocks = _shared.setdefault(source, {})
        server_clock = clocks.get(clock)
        if server_clock is None:
            server_clock = clocks[clock] = ServerClock(clock)
        return server_clock
