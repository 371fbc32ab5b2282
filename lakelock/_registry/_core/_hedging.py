"""Hedged requests, sans-I/O: which requests get a second, identical copy, when, and which
copy's answer is the answer (docs/FORMAT.md, "Scheduling" 7;
docs/decisions/0014-hedged-requests.md).

:class:`Hedging` is a process's memory of how long its requests take; a :class:`Race` is one
hedged request. Neither sends, waits or reads a clock: the driver (:mod:`._driver`) feeds them
its threads' answers and ``time.monotonic()``, the simulator (:mod:`lakelock._sim._loop`) its
simulated answers and virtual time — the same decisions in both."""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import dataclass

from lakelock._registry._core._requests import Get, List, Put, Request

__all__ = ["HEDGED_BODY", "PATIENT", "Hedging", "Race"]

#: The largest body of a write that is hedged: past S3's first-byte latency a write's time is
#: its bytes', which a second copy would send again.
HEDGED_BODY = 256 * 1024

#: The root's reads and the listings of intents are sent again only after this many times the
#: median of the process's reads (not ``factor``): a request S3 never answers (a read timeout
#: of seconds) then costs a fold a tenth of a second, while a slow answer in the store's
#: ordinary tail (3-12 times the median for 1 % of them) seldom sends a second copy —
#: hedging the waiters' looks of the root at twice the median cost 10 % of the commits
#: (docs/decisions/0014-hedged-requests.md, 0042-a-request-never-answered.md).
PATIENT = 8.0


class Hedging:
    """When a request gets a second, identical one (a *hedge*): once it has been outstanding
    ``factor`` times the median of this process's recent requests of its kind (reads, and
    create-only writes).

    A fold at hundreds of writers reads a hundred or more intents at once, and writes a
    snapshot's objects at once, and waits for the slowest: with 1 % of S3's answers 3-12
    times slower than the median, most such batches wait for one of those. A commit waits
    for each of its own requests in turn too — its data file, its intent, the fold's reads —
    so one slow answer among them is a slow commit. A read changes nothing, and a
    create-only write of a write-once object (its key made by this process) lands once
    whichever copy lands first — the other is refused, or resolved as ours by the store
    layer (both copies carry one write id) — so the first success of the two is the
    answer, and only the few slow requests are sent twice. The root's reads and listings
    are sent again only past :data:`PATIENT` times the median of reads: what a timeout
    would do, without giving the first copy up. Nothing else of the root's is hedged (its
    compare-and-swap), nor a write of more than :data:`HEDGED_BODY` bytes;
    ``alone=False``: only the requests of a batch of several are. Thread-safe."""

    def __init__(
        self, factor: float, *, alone: bool = True, samples: int = 64, least: int = 16
    ) -> None:
        if not factor > 1:
            raise ValueError(f"a hedging factor must be > 1, got {factor!r}")
        self.factor = factor
        self.alone = alone
        self.least = least
        self._recent: dict[bool, deque[float]] = {
            False: deque(maxlen=samples),
            True: deque(maxlen=samples),
        }
        self._lock = threading.Lock()

    @staticmethod
    def hedgeable(request: Request) -> bool:
        """A read (the root's and a listing too: :meth:`patient`) or a small create-only
        write the store layer may retry: a write-once object's."""
        return isinstance(request, Get | List) or (
            isinstance(request, Put)
            and request.create
            and request.retried
            and len(request.body) <= HEDGED_BODY
        )

    @staticmethod
    def patient(request: Request) -> bool:
        """Whether ``request`` is sent again only after :data:`PATIENT` times the median of
        reads: the root's reads (a waiter's looks) and listings (twice a GET's time), whose
        time no other request's measure is learnt from."""
        return isinstance(request, List) or (isinstance(request, Get) and not request.retried)

    def hedges(self, request: Request, *, alone: bool) -> bool:
        """Whether ``request`` is hedged: a hedgeable one, of a batch of several, or ``alone``
        (a lone request, or a batch of one) if lone ones are."""
        return self.hedgeable(request) and (self.alone or not alone)

    def observe(self, write: bool, seconds: float) -> None:
        """One request of this process (a write, or a read) took ``seconds`` to its first
        success."""
        with self._lock:
            self._recent[write].append(seconds)

    def after(self, write: bool) -> float | None:
        """Seconds after which an unanswered request (a write, or a read) of a batch sent now
        is hedged; None until ``least`` of its kind were timed."""
        with self._lock:
            recent = self._recent[write]
            if len(recent) < self.least:
                return None
            return self.factor * statistics.median(recent)

    def batch(self) -> dict[bool, float | None]:
        """:meth:`after` for writes (True) and reads (False), as a batch starting now knows
        them: every request of one batch is hedged by the same measure, however late a
        thread gets to it."""
        return {write: self.after(write) for write in (False, True)}

    def race(self, write: bool, *, sent: float, after: float | None) -> Race:
        """One hedged request (a write, or a read) whose first copy went at ``sent``,
        hedged ``after`` seconds later (None: never)."""
        return Race(self, write, sent, after)

    def race_for(self, request: Request, *, sent: float, after: dict[bool, float | None]) -> Race:
        """One hedged ``request`` whose first copy went at ``sent``, hedged as ``after``
        (:meth:`batch`, or :meth:`after` now for both kinds) says for its kind — a
        :meth:`patient` one later, and not learnt from."""
        write = isinstance(request, Put)
        when = after[write]
        if not self.patient(request):
            return Race(self, write, sent, when)
        later = None if when is None else when * PATIENT / self.factor
        return Race(self, write, sent, later, learns=False)


@dataclass(slots=True)
class Race:
    """One hedged request: its first copy went at ``sent``; a second, identical one goes at
    :attr:`due` if no copy has answered by then (:meth:`hedge`); the first success is the
    answer, or, when every copy failed, the last failure (:meth:`answers`). The time to the
    first success is what :class:`Hedging` learns from. Not thread-safe: the driver's thread
    that waits for the copies drives it."""

    hedging: Hedging
    write: bool
    sent: float
    after: float | None
    #: Whether the time to its first success is one :class:`Hedging` learns from.
    learns: bool = True
    outstanding: int = 1
    hedged: bool = False
    answered: bool = False

    @property
    def due(self) -> float | None:
        """When the second copy goes, if none has answered by then (None: never)."""
        return None if self.after is None or self.hedged else self.sent + self.after

    def hedge(self) -> bool:
        """The time is :attr:`due`: whether to send the second copy now (counted as out)."""
        if self.answered or self.hedged or self.after is None:
            return False
        self.hedged = True
        self.outstanding += 1
        return True

    def answers(self, failed: bool, now: float) -> bool:
        """A copy answered at ``now`` (``failed``: with an error): whether its answer is the
        request's. A failure while the other copy is still out is not: that one may yet
        succeed."""
        self.outstanding -= 1
        if self.answered or (failed and self.outstanding > 0):
            return False
        self.answered = True
        if not failed and self.learns:
            self.hedging.observe(self.write, now - self.sent)
        return True
