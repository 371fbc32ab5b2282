"""Which faults a simulated run injects, all drawn from the run's seeded generator.

Request faults (a share ``rate`` of the requests that reach the endpoint, mixed over
``mix``):

=============  =================================================================================
``lost_ack``   applied, then answered 500 (:class:`OutcomeUnknownError`): the answer was lost
``throttle``   503 SlowDown before applying (:class:`ThrottledError`)
``conflict``   409 ConditionalRequestConflict before applying (:class:`ConflictError`); a request
               that is not a conditional write gets a 503 instead
``timeout``    no answer until ``timeout`` seconds: applied or not (even odds), then
               :class:`OutcomeUnknownError`
``late``       a write answered :class:`OutcomeUnknownError` after ``timeout`` seconds that lands
               *after* that answer (up to ``timeout`` later: a request the client gave up on
               still in flight at S3); while it is in flight a conditional write to its key
               gets 409 ConditionalRequestConflict, as S3 answers one (a read: a timeout
               that applies nothing)
=============  =================================================================================

``schedule`` forces the faults of the first requests (tests).

A brownout (:class:`Brownout`): for ``length`` virtual seconds from ``start`` every request
sent takes ``factor`` times its latency, and a share ``throttle`` of them is answered 503
SlowDown before applying (a ``throttle`` fault), as a store that slows down for a while and
then recovers: what the protocol does with the load it built up meanwhile is what a run
shows (``commits_by_second``).

Process faults: ``kills`` writers killed at a random request boundary (``generator.close()``)
and restarted as a new process re-running the commit with the same id (a share of them with
other rows: :mod:`._workload`); ``stalls`` writers that stop before sending a request for
``stall`` seconds (default: past the intent TTL) and then send it — in a run with vacuum,
every other stall lasts past vacuum's window instead, while vacuum still runs (a process
paused by its host comes back to commit what vacuum may have judged an orphan);
``swap_stalls`` writers that stop just before their next compare-and-swap of the root (after
the last checks of rule 10, docs/FORMAT.md) for as long as a late writer beside vacuum
stalls, and then send it (a process paused between its last check and its swap);
``rerun_stalls`` writers killed as their next request writing an intent goes out (it lands
all the same) whose restart, on a clock ahead by twice ``stall``, re-runs the commit under
the killed run's id and stops for ``stall`` seconds after looking the id up, before it folds
or sends its intent; the killed run's request lands as that stop begins (others fold it
meanwhile, and with a small ``commit_window`` the window moves past it); ``pauses`` writers
that, from a random moment, stop for a length drawn from ``pause`` (2 to 5 s by default) as
the answer to their next read of the root reaches them, before their code runs on it: a
process that gets a sliver of a CPU shared by many, paused between steps of its own code —
between making a commit ready and reading the root, and its fold and its intent's PUT
(whatever it made before the pause, an intent's key among them, is as old as the pause when
its next send goes out); each
writer's clock off by up to ``skew`` seconds either way, and ``steps`` times a writer's clock
steps to another offset within that bound (an NTP step, either way).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from random import Random

from lakelock.errors import InvalidArgumentError

__all__ = ["FAULT_KINDS", "Brownout", "Faults"]

FAULT_KINDS = ("lost_ack", "throttle", "conflict", "timeout", "late")


@dataclass(frozen=True)
class Brownout:
    """The store slows down from ``start`` for ``length`` virtual seconds: each request sent
    then takes ``factor`` times its latency, and a share ``throttle`` of them is answered 503
    SlowDown. Raises :class:`InvalidArgumentError` on values no brownout has."""

    start: float
    length: float
    factor: float = 1.0
    throttle: float = 0.0

    def __post_init__(self) -> None:
        rules = (
            ("brownout start", self.start, 0 <= self.start < math.inf, "a time >= 0 (s)"),
            ("brownout length", self.length, 0 < self.length < math.inf, "seconds > 0"),
            ("brownout factor", self.factor, 1 <= self.factor < math.inf, "a factor >= 1"),
            ("brownout 503 share", self.throttle, 0 <= self.throttle <= 1, "a share in [0, 1]"),
        )
        for what, value, holds, reason in rules:
            if not holds:
                raise InvalidArgumentError(value, reason, what=what)

    @property
    def end(self) -> float:
        return self.start + self.length

    def covers(self, now: float) -> bool:
        """Whether a request sent at ``now`` (virtual seconds) is sent during the brownout."""
        return self.start <= now < self.end

    def option(self) -> str:
        """The ``lakelock simulate`` options that make this brownout."""
        text = f"--brownout {self.start:g}:{self.length:g}:{self.factor:g}"
        return text + (f" --brownout-503 {self.throttle:g}" if self.throttle else "")


@dataclass(frozen=True)
class Faults:
    rate: float = 0.0
    mix: tuple[tuple[str, float], ...] = tuple((kind, 1.0) for kind in FAULT_KINDS)
    timeout: float = 2.0
    kills: int = 0
    stalls: int = 0
    stall: float | None = None  # default: the intent TTL plus a few seconds
    #: Writers that stall just before their next swap of the root, past vacuum's window.
    swap_stalls: int = 0
    #: Writers killed sending an intent whose restart stalls after looking its id up.
    rerun_stalls: int = 0
    #: Writers paused before they run on the answer to a read of the root (a process starved
    #: of CPU), each for a length (s) drawn uniformly from ``pause``.
    pauses: int = 0
    pause: tuple[float, float] = (2.0, 5.0)
    skew: float = 0.0
    #: Steps of a writer's clock to another offset within ``skew`` (at random moments).
    steps: int = 0
    #: Faults for the first requests, in the order they reach the endpoint (``None``: none),
    #: before ``rate`` applies: what a test forces.
    schedule: tuple[str | None, ...] = ()
    #: A window in which the store is slow and throttles (``None``: none).
    brownout: Brownout | None = None

    def mix_options(self) -> str:
        """This fault mix as ``lakelock simulate`` options, in its order (the order a draw
        walks its weights); empty: the default mix."""
        if self.mix == Faults().mix:
            return ""
        return " ".join(f"--fault-mix {kind}={weight:g}" for kind, weight in self.mix)

    def pause_options(self) -> str:
        """The pauses as ``lakelock simulate`` options; empty: none."""
        if not self.pauses:
            return ""
        lengths = "" if self.pause == Faults().pause else " --pause {:g}:{:g}".format(*self.pause)
        return f"--pauses {self.pauses}{lengths}"

    def slowdown(self, now: float) -> float:
        """What the latency of a request sent at ``now`` is multiplied by (the brownout's)."""
        brownout = self.brownout
        return brownout.factor if brownout is not None and brownout.covers(now) else 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"fault rate must be in [0, 1], got {self.rate}")
        kinds = [kind for kind, _ in self.mix] + [k for k in self.schedule if k is not None]
        unknown = [kind for kind in kinds if kind not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}: known are {FAULT_KINDS}")
        if self.rate and not any(weight > 0 for _, weight in self.mix):
            raise ValueError("a fault rate needs a fault kind of positive weight")
        counts = (
            self.kills,
            self.stalls,
            self.swap_stalls,
            self.rerun_stalls,
            self.pauses,
            self.steps,
        )
        if min(counts) < 0 or self.skew < 0 or self.timeout <= 0:
            raise ValueError("kills, stalls, pauses, steps and skew must be >= 0, timeout > 0")
        if not 0 <= self.pause[0] <= self.pause[1] < math.inf:
            raise ValueError(f"pause lengths need 0 <= shortest <= longest, got {self.pause}")

    def draw(self, rng: Random, index: int, now: float = 0.0) -> str | None:
        """The fault for the ``index``-th request, sent at ``now``, or ``None`` (most
        requests). The brownout's 503s come after the other faults, and draw from ``rng``
        only inside its window: a run without one draws exactly as before."""
        if index < len(self.schedule):
            return self.schedule[index]
        if not self.rate or rng.random() >= self.rate:
            brownout = self.brownout
            if brownout is not None and brownout.throttle and brownout.covers(now):
                return "throttle" if rng.random() < brownout.throttle else None
            return None
        total = sum(weight for _, weight in self.mix)
        pick = rng.random() * total
        for kind, weight in self.mix:
            pick -= weight
            if pick < 0:
                return kind
        return self.mix[-1][0]
