"""One thread, virtual time: the event queue, the simulated endpoint (latency, faults, and the
retries the real store layer makes), and the processes it runs (sans-I/O generators).

A request sent at ``t`` with latency ``L`` takes effect at ``t + L/2`` (the store decides
it then: :class:`~._store.SimS3`) and is answered at ``t + L``. A request marked ``retried``
is retried here on 409, 503 and a lost answer, with jittered exponential backoff within a
budget, as :meth:`lakelock._s3.ObjectStore._retry_transient` and the core's driver do — each
retry through the process's own :class:`~lakelock._retry.Load` (its retry budget and pace),
which every request pays into and every 503 slows, as the store layer's does; a
create-only PUT whose earlier attempt's answer was lost and that then finds the key holding
its own body succeeds (the real store tells by the write id in the object's metadata). Other
requests get every fault thrown into their generator.

The processes drive the shell's own scheduling code in virtual time: hedging
(:class:`~lakelock._registry._core._hedging.Race`), reads made ahead
(:class:`~lakelock._registry._core._early.ReadsAhead`) and group commit's turns
(:class:`~lakelock._registry._group.Turn`, :class:`Turns`), as the driver's and
``CommitQueue``'s threads drive them in real time.

Nothing here reads a clock or the ``random`` module's global generator: a run is a function
of its seed.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from random import Random
from typing import Any

from lakelock._layout import INTENT_PREFIX, REGISTRY_KEY
from lakelock._registry._core._driver import THREADS
from lakelock._registry._core._early import ReadsAhead
from lakelock._registry._core._hedging import Hedging, Race
from lakelock._registry._core._requests import (
    Ahead,
    Delete,
    Get,
    List,
    Listing,
    Now,
    Parallel,
    Put,
    Sleep,
)
from lakelock._registry._group import Turn
from lakelock._retry import Load
from lakelock._s3 import _resolve
from lakelock._s3._classify import Call
from lakelock._s3._types import IfMatch, PutResult
from lakelock._sim._faults import Faults
from lakelock._sim._store import BUCKET, EPOCH, SimS3
from lakelock.errors import (
    AlreadyExistsError,
    ConflictError,
    OutcomeUnknownError,
    PreconditionFailedError,
    StorageError,
    ThrottledError,
)

__all__ = ["Endpoint", "Loop", "Process", "StoreRetry", "Turns"]

Answer = Callable[[Any, BaseException | None], None]
_OPERATION = {Get: "GetObject", Put: "PutObject", List: "ListObjectsV2", Delete: "DeleteObject"}
_TRANSIENT = (ConflictError, ThrottledError, OutcomeUnknownError)
#: Bytes a LIST answer takes per key (the XML of one ``Contents`` element, roughly).
LIST_ENTRY_BYTES = 250


class Loop:
    """The event queue: ``(time, sequence, callback, argument)``; equal times run in the
    order they were scheduled."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._seq = itertools.count()
        self.events = 0

    def at(self, when: float, callback: Callable[[Any], None], argument: Any = None) -> None:
        heapq.heappush(self._queue, (when, next(self._seq), callback, argument))

    def run(self, until: float) -> None:
        """Run events up to virtual time ``until`` (or until none are left)."""
        queue = self._queue
        pop = heapq.heappop
        while queue and queue[0][0] <= until:
            when, _, callback, argument = pop(queue)
            self.now = when
            self.events += 1
            callback(argument)

    @property
    def idle(self) -> bool:
        return not self._queue


@dataclass(frozen=True)
class StoreRetry:
    """The store layer's budget for a ``retried`` request (the defaults of
    :class:`lakelock._retry.RetryPolicy`)."""

    max_attempts: int = 50
    max_elapsed: float = 60.0
    initial_backoff: float = 0.02
    max_backoff: float = 2.0

    def backoff(self, failures: int, rng: Random) -> float:
        return rng.uniform(0.0, min(self.max_backoff, self.initial_backoff * 2.0**failures))


@dataclass(slots=True)
class _Call:
    """One request as the store layer sees it: every attempt, until an answer."""

    request: Get | Put | List | Delete
    process: Process
    answer: Answer
    retried: bool
    started: float
    attempts: int = 0
    #: This attempt: when it was sent, the fault it drew, when it took effect (if it did).
    sent: float = 0.0
    fault: str | None = None
    applied: float | None = None
    #: The write id of the object an attempt of this write created (the store's metadata).
    wrote: str | None = None
    #: Every copy of a hedged write, this one among them (None: not hedged): they carry one
    #: write id, so the object any of them created is this one's too.
    copies: list[_Call] | None = None

    def ours(self) -> tuple[str, ...]:
        """The write ids of the objects this write (any copy of it) created."""
        calls = self.copies if self.copies is not None else (self,)
        return tuple(c.wrote for c in calls if c.wrote is not None)


@dataclass
class Counts:
    """What crossed the endpoint, per process kind and operation."""

    requests: Counter[str] = field(default_factory=Counter)
    #: Writers' requests per operation and part of the lake ("GetObject root", ...).
    areas: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    #: Writers' requests a fault was injected in, by the fault answered (a ``conflict`` on a
    #: request that is not a conditional write is its ``throttle``) and part of the lake.
    writer_faults: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Writers' requests by the whole virtual second they were sent in.
    writer_seconds: Counter[int] = field(default_factory=Counter)
    throttled: int = 0
    root_swaps: int = 0
    #: The root's compare-and-swaps answered 409, by why: ``in flight`` (a write to it the
    #: client gave up on had not landed yet), ``at once`` (another conditional write to it
    #: took effect while this one was in flight), ``injected`` (the ``conflict`` fault).
    root_conflicts: Counter[str] = field(default_factory=Counter)


class Endpoint:
    """Sends requests to the simulated bucket with latency and faults, and retries the
    ``retried`` ones as the store layer does."""

    def __init__(
        self,
        loop: Loop,
        store: SimS3,
        rng: Random,
        faults: Faults,
        retry: StoreRetry,
        *,
        root_key: str,
        cpu: float = 0.0,
        cores: int = 0,
        serving: float = 0.0,
        crowding: float = 0.0,
    ) -> None:
        self.loop = loop
        #: CPU seconds each request costs on a machine of ``cores`` cores shared by every
        #: process (0 cores: CPU is free): what a run on one machine adds to S3's latency.
        self.cpu = cpu
        self.cores: list[float] = [0.0] * cores
        #: Of ``cpu``, the seconds the endpoint's own process spends on a request (0: none
        #: apart, every request's CPU on any free core): one process, so one request at a
        #: time (:meth:`_serve`), on the same cores.
        self.serving = serving
        #: How much the endpoint's CPU a request grows for each request waiting at it: a
        #: thread a connection, the waiting threads contending for the one interpreter.
        self.crowding = crowding
        #: When each request the endpoint has taken ends, oldest first.
        self._served: deque[float] = deque()
        self.store = store
        self.rng = rng
        self.faults = faults
        self.retry = retry
        self.root_key = root_key
        self.counts = Counts()
        self.counting = True
        self.sent = 0
        #: Called with one dict per answered attempt (``lakelock simulate --trace``).
        self.trace: Callable[[dict[str, Any]], None] | None = None
        self._names: dict[tuple[str, type], str] = {}
        self._areas: dict[tuple[type, str], str] = {}

    def send(
        self,
        request: Get | Put | List | Delete,
        process: Process,
        answer: Answer,
        *,
        copies: list[_Call] | None = None,
    ) -> None:
        """Send ``request`` for ``process``; ``answer(result, error)`` gets the outcome.
        ``copies``: the copies of one hedged write sent so far (this one joins them)."""
        retried = getattr(request, "retried", isinstance(request, List))
        call = _Call(request, process, answer, retried, self.loop.now, copies=copies)
        if copies is not None:
            copies.append(call)
        if process.load is not None:
            process.load.sent()
        self._attempt(call)

    def work(self, seconds: float) -> float:
        """``seconds`` of a process's own CPU, not a request's, on the machine's earliest free
        core from now: when it ends (now if the machine has no cores: CPU is free)."""
        if not self.cores:
            return self.loop.now
        end = max(self.loop.now, heapq.heappop(self.cores)) + seconds
        heapq.heappush(self.cores, end)
        return end

    def _serve(self, arrives: float) -> float:
        """The endpoint's part of a request that reaches it at ``arrives``: after the
        requests it took before (one process: one at a time), on a core (the one that came
        free last by then, so no other's gap is taken; else the first to come free), for
        ``serving`` seconds more ``crowding`` of that for each request still waiting at it.
        When it ends."""
        served = self._served
        while served and served[0] <= arrives:
            served.popleft()
        seconds = self.serving * (1.0 + self.crowding * len(served))
        ready = max(arrives, served[-1]) if served else arrives
        cores = self.cores
        free = [c for c in cores if c <= ready]
        core = cores.index(max(free) if free else min(cores))
        end = max(ready, cores[core]) + seconds
        cores[core] = end
        heapq.heapify(cores)
        served.append(end)
        return end

    def _named(self, process: str, kind: type) -> str:
        """``<process kind>:<operation>``, made once per pair (every request counts one)."""
        found = self._names.get((process, kind))
        if found is None:
            found = self._names[(process, kind)] = f"{process}:{_OPERATION[kind]}"
        return found

    def _area_named(self, request: Get | Put | List | Delete) -> str:
        """``<operation> <part of the lake>``, made once per operation and key."""
        key = request.prefix if isinstance(request, List) else request.key
        found = self._areas.get((type(request), key))
        if found is None:
            found = f"{_OPERATION[type(request)]} {self._area(request)}"
            self._areas[(type(request), key)] = found
        return found

    def _area(self, request: Get | Put | List | Delete) -> str:
        key = request.prefix if isinstance(request, List) else request.key
        if key == self.root_key:
            return "root"
        parts = key.split("/", 2)
        if parts[0] == "metastore" and len(parts) > 1:
            return f"metastore/{parts[1]}"
        return parts[0]

    # -- one attempt --------------------------------------------------------------------------

    def _attempt(self, call: _Call) -> None:
        call.attempts += 1
        request = call.request
        now = self.loop.now
        if self.cores:
            # The request's CPU (client and server) on the machine's earliest free core.
            start = max(now, heapq.heappop(self.cores))
            now = start + self.cpu - self.serving
            heapq.heappush(self.cores, now)
            if self.serving:
                now = self._serve(now)
        kind = type(request)
        latency = self._latency(request) * self.faults.slowdown(now)  # 1.0 but in a brownout
        fault = self.faults.draw(self.rng, self.sent, now)
        self.sent += 1
        if self.counting:
            counts = self.counts
            process = call.process.kind
            counts.requests[self._named(process, kind)] += 1
            if process == "writer":
                counts.areas[self._area_named(request)] += 1
                counts.writer_seconds[int(now)] += 1
            if isinstance(request, Put):
                counts.bytes[process] += len(request.body)
            if fault is not None:
                counts.faults[fault] += 1
        if fault == "conflict" and not (
            isinstance(request, Put) and (request.create or request.if_match is not None)
        ):
            fault = "throttle"
        if fault is not None and self.counting and call.process.kind == "writer":
            self.counts.writer_faults[fault, self._area_named(request)] += 1
        call.sent, call.fault, call.applied = now, fault, None
        if fault == "conflict" and self.counting and isinstance(request, Put):
            self._conflicted(request.key, why="injected")
        if fault in ("throttle", "conflict"):
            error = _fault_error(fault, request)
            self.loop.at(now + latency, self._answered, (call, None, error))
            return
        if fault in ("late", "timeout"):
            self._timed_out(call, fault, now, latency)
            return
        answer_at = now + latency
        self.loop.at(now + latency / 2, self._effect, (call, answer_at, now, fault))

    def _timed_out(self, call: _Call, fault: str, now: float, latency: float) -> None:
        """An attempt the client gives up on after the timeout: a ``timeout`` applied or
        not (even odds), a ``late`` write still in flight at S3 that lands after the
        answer (until then a conditional write to its key is answered 409). The client
        hears ``OutcomeUnknownError``, or the SDK sends it again (:func:`_sdk_resends`)."""
        request = call.request
        answered = now + self.faults.timeout
        if fault == "late" and isinstance(request, Put | Delete):
            lands = now + self.faults.timeout * (1.0 + self.rng.random())
            self.store.in_flight(request.key, until=lands)
            self.loop.at(lands, self._effect, (call, None, now))
        elif fault == "timeout" and self.rng.random() < 0.5:
            self.loop.at(now + latency / 2, self._effect, (call, None, now))
        if _sdk_resends(call):
            self.loop.at(answered, self._resend, call)
        else:
            self.loop.at(answered, self._answered, (call, None, _fault_error(fault, request)))

    def _latency(self, request: Get | Put | List | Delete) -> float:
        """How long ``request`` takes on the store's profile (drawn from the run's seed)."""
        profile = self.store.profile
        if isinstance(request, Get):
            return profile.get.sample(self.rng)
        if isinstance(request, Put):
            timing = profile.cas if request.if_match is not None else profile.put
            return timing.sample(self.rng) + len(request.body) / profile.bandwidth
        if isinstance(request, List):
            return profile.list.sample(self.rng)
        return profile.delete.sample(self.rng)

    def _effect(self, argument: tuple[Any, ...]) -> None:
        """The request takes effect; its answer (or the fault in its place) is scheduled for
        ``answer_at`` (``None``: nobody hears of it, a timeout)."""
        call, answer_at, sent = argument[0], argument[1], argument[2]
        fault = argument[3] if len(argument) > 3 else None
        request = call.request
        now = self.loop.now
        store = self.store
        result: Any = None
        error: BaseException | None = None
        held = False
        try:
            if isinstance(request, Get):
                result = store.get(request.key, now)
            elif isinstance(request, Put):
                held = store.held(request.key, now)
                result = store.put(
                    request.key,
                    request.body,
                    now,
                    create=request.create,
                    if_match=request.if_match,
                    started=sent,
                )
                if request.key == self.root_key and self.counting:
                    self.counts.root_swaps += 1
            elif isinstance(request, List):
                result = store.list(request.prefix, request.start_after, request.max_keys, now)
            else:
                store.delete(
                    request.key, now, if_match=request.if_match, by=(call.process.name, sent)
                )
        except StorageError as failure:
            # Without the traceback through this frame, which holds the error: that cycle
            # (hundreds a second) would wait for the garbage collector.
            error = failure.with_traceback(None)
            if isinstance(failure, ThrottledError) and self.counting:
                self.counts.throttled += 1
            if isinstance(failure, ConflictError) and self.counting:
                self._conflicted(request.key, why="in flight" if held else "at once")
        else:
            call.applied = now
            if isinstance(result, PutResult):
                call.wrote = result.write_id
        if answer_at is None:
            return
        if fault == "lost_ack":
            result, error = None, _fault_error("lost_ack", request)
        self.loop.at(answer_at, self._answered, (call, result, error))

    def _conflicted(self, key: str, *, why: str) -> None:
        """A write to ``key`` was answered 409, for ``why`` (:attr:`Counts.root_conflicts`):
        counted if it swapped the root."""
        if key == self.root_key:
            self.counts.root_conflicts[why] += 1

    # -- the store layer ----------------------------------------------------------------------

    def _answered(self, argument: tuple[_Call, Any, BaseException | None]) -> None:
        call, result, error = argument
        request = call.request
        if self.trace is not None:
            self.trace(
                {
                    "sent": round(call.sent, 6),
                    "answered": round(self.loop.now, 6),
                    "process": call.process.name,
                    "operation": _OPERATION[type(request)],
                    "key": request.prefix if isinstance(request, List) else request.key,
                    "attempt": call.attempts,
                    "fault": call.fault,
                    "applied": None if call.applied is None else round(call.applied, 6),
                    "answer": "ok" if error is None else type(error).__name__,
                }
            )
        if self.counting:
            kind = call.process.kind
            if isinstance(result, Listing):
                self.counts.bytes[kind] += LIST_ENTRY_BYTES * max(1, len(result.objects))
            elif result is not None and hasattr(result, "body"):
                self.counts.bytes[kind] += len(result.body)
        load = call.process.load
        if load is not None and isinstance(error, ThrottledError):
            load.slowed(call.sent)
        again = call.attempts > 1 or call.copies is not None  # another attempt may have landed
        if error is not None and call.retried and again and isinstance(request, Put):
            result, error = self._resolve(request, error, result, ours=call.ours())
        elif error is not None and call.attempts > 1 and isinstance(request, Put):
            result, error = self._resolve_resent(request, error, result, ours=call.ours())
        if (
            error is not None
            and call.retried
            and isinstance(error, _TRANSIENT)
            and call.attempts < self.retry.max_attempts
            and self.loop.now - call.started < self.retry.max_elapsed
        ):
            wait = self.retry.backoff(call.attempts, self.rng)
            if load is not None:
                wait = load.retry_wait(wait)
            self.loop.at(self.loop.now + wait, self._retry, call)
            return
        call.answer(result, error)

    def _retry(self, call: _Call) -> None:
        self._attempt(call)

    def _resend(self, call: _Call) -> None:
        """The SDK sends a timed-out request again (:func:`_sdk_resends`), after its own
        short jittered wait."""
        self.loop.at(self.loop.now + self.retry.backoff(0, self.rng), self._retry, call)

    def _resolve_resent(
        self, request: Put, error: BaseException, result: Any, *, ours: tuple[str, ...]
    ) -> tuple[Any, BaseException | None]:
        """What the store makes of a compare-and-swap the SDK sent again (``resolve_write``
        in :mod:`lakelock._s3._resolve`): a 409 or 503 that may meet the first attempt
        still in flight (:func:`~lakelock._s3._resolve.may_still_land`), or a 412 that
        may be that attempt landed, is read back — ours (the object an attempt of this
        call wrote): success; else the outcome is unknown. Anything else is the answer."""
        assert request.if_match is not None
        if isinstance(error, ConflictError | ThrottledError):
            call = Call("PutObject", request.key, IfMatch(request.if_match))
            if not _resolve.may_still_land(error, call, retried=True):
                return result, error
            why = f"the SDK's retry was answered {error.status}; an earlier attempt may land"
        elif isinstance(error, PreconditionFailedError):
            why = "retried into a 412 and the object is not ours"
        else:
            return result, error
        landed = self._landed(request, ours)
        if landed is not None:
            return landed, None
        return None, OutcomeUnknownError(
            f"PutObject {request.key!r}: {why}",
            bucket=BUCKET,
            key=request.key,
            operation="PutObject",
            status=getattr(error, "status", None),
        )

    def _landed(self, request: Put, ours: tuple[str, ...]) -> PutResult | None:
        """The object at the key, if it is the one an earlier attempt of this call (or a
        copy of it) wrote (``ours``: their write ids): that attempt landed. Resolved by
        reading it back, so that answer's Date settles its time (as the store does)."""
        current = self.store.objects.get(request.key)
        if current is None or current.write_id not in ours:
            return None
        return PutResult(
            request.key,
            current.etag,
            current.write_id,
            len(request.body),
            resolved=True,
            server_time=self.store.stamp(self.loop.now),
        )

    def _resolve(
        self, request: Put, error: BaseException, result: Any, *, ours: tuple[str, ...]
    ) -> tuple[Any, BaseException | None]:
        """A resent write (or a copy of a hedged one) refused because the key is taken or
        changed: if the object is the one an earlier attempt of this call or another copy
        of it wrote (``ours``: their write ids, as the real store tells by the one write
        id in the object's metadata), that attempt landed (its answer late or lost):
        success. The same bytes another process wrote (a killed run's file that its
        restart writes again) are not ours. A compare-and-swap whose object is not ours may
        have landed and been replaced since: outcome unknown."""
        if not isinstance(error, AlreadyExistsError | PreconditionFailedError):
            return result, error
        landed = self._landed(request, ours)
        if landed is not None:
            return landed, None
        if request.if_match is not None:
            return None, OutcomeUnknownError(
                f"PutObject {request.key!r}: retried into a 412 and the object is not ours",
                bucket=BUCKET,
                key=request.key,
                operation="PutObject",
                status=412,
            )
        return result, error


#: Each injected fault as the store answers it: its error, what the message says, the HTTP
#: status and the S3 error code (a timeout has neither: no answer came).
_FAULT_ERRORS: dict[str, tuple[type[StorageError], str, int | None, str | None]] = {
    "throttle": (ThrottledError, "SlowDown (injected)", 503, "SlowDown"),
    "conflict": (
        ConflictError,
        "ConditionalRequestConflict (injected)",
        409,
        "ConditionalRequestConflict",
    ),
    "timeout": (OutcomeUnknownError, "read timeout (injected)", None, None),
    "late": (OutcomeUnknownError, "read timeout (injected; the request lands later)", None, None),
    "lost_ack": (
        OutcomeUnknownError,
        "500 InternalError after applying (injected lost answer)",
        500,
        "InternalError",
    ),
}


def _sdk_resends(call: _Call) -> bool:
    """Whether the SDK sends ``call`` again when it times out: a compare-and-swap the core
    makes without the store layer's retries (the root's), once — as botocore retries a read
    timeout (``total_max_attempts`` 2). The resend may meet the first attempt still in
    flight at S3 (answered 409) or landed (412)."""
    request = call.request
    return (
        not call.retried
        and call.attempts == 1
        and isinstance(request, Put)
        and request.if_match is not None
    )


def _fault_error(fault: str, request: Get | Put | List | Delete) -> StorageError:
    error, what, status, code = _FAULT_ERRORS[fault]
    key = getattr(request, "key", None)
    operation = _OPERATION[type(request)]
    return error(
        f"{operation} {key!r}: {what}",
        bucket=BUCKET,
        key=key,
        operation=operation,
        status=status,
        code=code,
    )


Steps = Generator[Any, Any, Any]


@dataclass
class _Early:
    """A read made ahead (:class:`Ahead`): when it was sent, its answer once it came, and
    who waits for it meanwhile."""

    sent: float
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    waiting: list[Answer] = field(default_factory=list)


class Turns:
    """The processes of one simulated process's threads waiting for its turn
    (:class:`~lakelock._registry._group.Turn`, group commit's): each woken, to look again,
    when the turn is given back (``GroupCommit.released``), as the shell's condition wakes
    its callers' threads."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.waiting: list[Process] = []

    def wait(self, process: Process, turn: Turn) -> None:
        if turn.ready():
            self.loop.at(self.loop.now, process._deliver, (None, None))
        else:
            process.parked = True
            self.waiting.append(process)

    def released(self) -> None:
        waiting, self.waiting = self.waiting, []
        for process in waiting:
            if process.parked:
                process.parked = False
                self.loop.at(self.loop.now, process._deliver, (None, None))


class Process:
    """A simulated process running one sans-I/O generator: answers ``Now`` with its own
    (skewed) clock, ``Sleep`` in virtual time, sends the rest through the endpoint (a
    ``Parallel`` as concurrent requests; an ``Ahead`` without waiting, at most ``THREADS``
    at once as the driver's threads for them, its answers kept for the requests equal to
    them; a :class:`~lakelock._registry._group.Turn` by waiting in ``turns`` for its
    process's turn). ``done(result, error)`` is called when the
    generator returns or raises; ``killed()`` when it is killed (:meth:`kill`)."""

    def __init__(
        self,
        loop: Loop,
        endpoint: Endpoint,
        steps: Steps,
        *,
        kind: str,
        name: str | None = None,
        skew: float = 0.0,
        done: Callable[[Any, BaseException | None], None] | None = None,
        killed: Callable[[], None] | None = None,
        hedging: Hedging | None = None,
        load: Load | None = None,
        turns: Turns | None = None,
    ) -> None:
        self.loop = loop
        #: Where it waits for its process's turn (group commit's), if it takes turns.
        self.turns = turns
        self.parked = False
        #: The process's retry budget and pace, as its store layer keeps them (None: none).
        self.load = load
        #: Hedges this process's reads and small creates as the driver does (None: never).
        self.hedging = hedging
        self.endpoint = endpoint
        self.steps = steps
        self.kind = kind
        self.name = name or kind
        self.skew = skew
        self.done = done
        self.killed = killed
        self.kill_pending = False
        self.stall_pending: float | None = None
        self.swap_stall_pending: float | None = None
        self.pause_pending: float | None = None
        self.pause_on_answer = False
        self.kill_at_intents = False
        self.in_flight: Any = None
        #: The intents it sent (or kept in flight), oldest first: the checker tells a killed
        #: run's intent from its restart's (``Invocation.killed_intents``).
        self.intents_sent: list[str] = []
        self.intents_stall_pending: float | None = None
        self.landing: Process | None = None
        self.finished = False
        #: Reads made ahead and not yet asked for; those waiting for a thread, and how many
        #: are out.
        self._early: ReadsAhead[_Early] = ReadsAhead()
        self._ahead_queue: deque[tuple[Get | List, _Early, Ahead, int]] = deque()
        self._ahead_out = 0

    def start(self, at: float) -> None:
        self.loop.at(at, self._deliver, (None, None))

    def kill(self) -> None:
        """Die at the next request boundary: when the next answer (or wake-up) arrives, the
        generator is closed instead of sent it."""
        self.kill_pending = True
        if self.parked:  # waiting for a turn: a process dies with all its threads
            self.parked = False
            self.loop.at(self.loop.now, self._deliver, (None, None))

    def stall(self, seconds: float) -> None:
        """Stop for ``seconds`` before sending the next request (a pause the process does not
        notice: its clock was read before)."""
        self.stall_pending = seconds

    def pause(self, seconds: float) -> None:
        """Stop for ``seconds`` as the answer to its next read of the root arrives, before
        running on it: a process starved of CPU, paused between steps of its own code
        (after a commit was made ready and the root read, before its fold and its intent's
        PUT). Unlike :meth:`stall`, what it does next (the clock it reads, the request it
        makes) comes after the pause."""
        self.pause_pending = seconds

    def stall_before_swap(self, seconds: float) -> None:
        """Stop for ``seconds`` before sending the next compare-and-swap of the root: after
        every check the committer makes before it (a pause between the last check and the
        swap, which no check can see)."""
        self.swap_stall_pending = seconds

    def kill_before_intents(self) -> None:
        """Die as the next request that writes an intent goes out: the request is kept in
        ``in_flight``, not sent, for a restart to land (:meth:`stall_before_intents`), as
        a request S3 received from a process that then died lands all the same."""
        self.kill_at_intents = True

    def stall_before_intents(self, seconds: float, *, landing: Process | None = None) -> None:
        """Stop for ``seconds`` before the next request that lists or writes intents: after
        a commit's first read of the root and of the commit-id indexes it settles by, before
        it folds or sends its own intent. ``landing``: a killed process whose request in
        flight (:meth:`kill_before_intents`) lands as this stall begins."""
        self.intents_stall_pending = seconds
        self.landing = landing

    def _deliver(self, argument: tuple[Any, BaseException | None]) -> None:
        if self.finished:
            return
        if self.kill_pending:
            self._die()
            return
        if self.pause_on_answer and self.pause_pending is not None:
            pause, self.pause_pending, self.pause_on_answer = self.pause_pending, None, False
            self.loop.at(self.loop.now + pause, self._deliver, argument)
            return
        value, error = argument
        steps = self.steps
        loop = self.loop
        while True:
            try:
                request = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as stop:
                self._finish(stop.value, None)
                return
            except Exception as failure:
                self._finish(None, failure)
                return
            error = None
            kind = type(request)
            if kind is Now:
                # Its monotonic clock (Now(monotonic=True)) is virtual time: no skew, no step.
                value = loop.now if request.monotonic else EPOCH + loop.now + self.skew
                continue
            if kind is Ahead:
                self._ahead(request)
                value = None
                continue
            if kind is Sleep:
                loop.at(loop.now + max(0.0, request.seconds), self._deliver, (None, None))
                return
            if kind is Turn and self.turns is not None:
                self.turns.wait(self, request)
                return
            if self.stall_pending is not None:
                pause, self.stall_pending = self.stall_pending, None
                loop.at(loop.now + pause, self._send, request)
                return
            if self.swap_stall_pending is not None and _swaps_root(request):
                pause, self.swap_stall_pending = self.swap_stall_pending, None
                loop.at(loop.now + pause, self._send, request)
                return
            if self.kill_at_intents and _touches_intents(request, listing=False):
                self.in_flight = request
                self.intents_sent += _intent_keys(request)
                self._die()
                return
            if self.intents_stall_pending is not None and _touches_intents(request):
                pause, self.intents_stall_pending = self.intents_stall_pending, None
                landing, self.landing = self.landing, None
                if landing is not None and landing.in_flight is not None:
                    request_in_flight, landing.in_flight = landing.in_flight, None
                    landing._send(request_in_flight)  # answered to nobody: it died
                loop.at(loop.now + pause, self._send, request)
                return
            self._send(request)
            return

    def _die(self) -> None:
        self.finished = True
        self.steps.close()
        if self.killed is not None:
            self.killed()

    def _send(self, request: Any) -> None:
        if not self.finished:  # a dead process's request in flight was noted as it died
            self.intents_sent += _intent_keys(request)
        if self.pause_pending is not None and _reads_root(request):
            self.pause_on_answer = True
        if type(request) is Parallel:
            if request.requests:
                self._parallel(request)
            else:
                self.loop.at(self.loop.now, self._deliver, ((), None))
            return
        if type(request) not in _OPERATION:
            self._deliver((None, TypeError(f"the simulator cannot run {request!r}")))
            return
        if self.hedging is not None and self.hedging.hedges(request, alone=True):
            self._parallel(Parallel((request,)), alone=True)  # hedged as in a batch
            return
        early = self._claim(request)
        if early is not None:
            self._await(early, self._answer)
            return
        self.endpoint.send(request, self, self._answer)

    # -- reads made ahead -----------------------------------------------------------------------

    def _ahead(self, request: Ahead) -> None:
        """Queue ``request``'s reads (in the canonical order, as a batch's); they replace
        those made ahead before (which still run, as the driver's threads do)."""
        now = self.loop.now
        reads = self._early.begin(request, now)
        generation = self._early.generation
        for part in sorted(reads, key=_canonical):
            early = _Early(sent=now)
            self._early.keep(part, early, now, generation)
            self._ahead_queue.append((part, early, request, generation))
        self._ahead_next()

    def _ahead_next(self) -> None:
        if self.finished:  # a killed process's threads died with it
            self._ahead_queue.clear()
            return
        while self._ahead_out < THREADS and self._ahead_queue:
            part, early, ahead, generation = self._ahead_queue.popleft()
            self._ahead_out += 1
            self.endpoint.send(part, self, self._landed(part, early, ahead, generation))

    def _landed(self, part: Get | List, early: _Early, ahead: Ahead, generation: int) -> Answer:
        def answer(result: Any, error: BaseException | None) -> None:
            early.done, early.result, early.error = True, result, error
            self._ahead_out -= 1
            if error is None and type(part) is List:
                now = self.loop.now
                for read in self._early.listed(ahead, part, result, generation):
                    made = _Early(sent=now)
                    self._early.keep(read, made, now, generation)
                    self._ahead_queue.append((read, made, ahead, generation))
            waiting, early.waiting = early.waiting, []
            for then in waiting:
                then(result, error)
            self._ahead_next()

        return answer

    def _claim(self, request: Any) -> _Early | None:
        """The read made ahead that answers ``request`` (taken: it answers once), if any."""
        kept = self._early.claim(request, self.loop.now)
        return None if kept is None else kept[0]

    def _await(self, early: _Early, then: Answer) -> None:
        """``then`` the answer of ``early``: now (as an event) if it came, else when it does."""
        if early.done:
            self.loop.at(self.loop.now, _call, (then, early.result, early.error))
        else:
            early.waiting.append(then)

    def _answer(self, result: Any, error: BaseException | None) -> None:
        self._deliver((result, error))

    def _parallel(self, request: Parallel, *, alone: bool = False) -> None:
        """``request``'s requests sent together, the tuple of their answers delivered once
        the last is answered (``alone``: the one request's answer, or its error)."""
        parts, loop = request.requests, self.loop
        results: list[Any] = [None] * len(parts)
        left, races = [len(parts)], dict[int, Race]()
        copies: dict[int, list[_Call]] = {}  # a hedged write's copies: one write id
        # Sent in a canonical order (by operation and key), not the order the core built the
        # batch in: that may come from iterating a set of keys, whose order changes with
        # Python's hash seed, and each send draws its latency from the run's generator. At
        # most THREADS at once, as the driver runs them: the next goes as one is answered.
        order = _order(parts)
        queued = iter(order[THREADS:])
        hedging = self.hedging  # each request hedged as the driver does (Hedging.hedges)
        after = hedging.batch() if hedging is not None else {}

        def settle(index: int, result: Any, error: BaseException | None) -> None:
            nonlocal send  # type: ignore[misc]  # (mypy: bound below, as Python allows)
            results[index] = error if error is not None else result
            left[0] -= 1
            following = next(queued, None)
            if following is not None:
                send(following)
            if left[0] == 0:
                # ``send`` holds ``settle`` (through the answers it makes): dropped, reference
                # counting frees the batch's answers now, not the garbage collector later.
                del send
                self._deliver(_answers(results, alone=alone))

        def one(index: int) -> Answer:
            return lambda result, error: settle(index, result, error)

        def hedged(index: int) -> Answer:
            race = races[index]

            def answer(result: Any, error: BaseException | None) -> None:
                if race.answers(error is not None, loop.now):
                    settle(index, result, error)

            return answer

        def hedge(index: int) -> None:
            if races[index].hedge():
                self.endpoint.send(parts[index], self, hedged(index), copies=copies.get(index))

        def send(index: int) -> None:
            part = parts[index]
            early = self._claim(part)  # a read made ahead answers it
            sent = early.sent if early is not None else loop.now
            if hedging is None or not hedging.hedges(part, alone=len(parts) == 1):
                reply, due = one(index), None
            else:
                race = races[index] = hedging.race_for(part, sent=sent, after=after)
                reply, due = hedged(index), race.due
            if early is not None:
                self._await(early, reply)
            else:
                if due is not None and type(part) is Put:
                    copies[index] = []
                self.endpoint.send(part, self, reply, copies=copies.get(index))
            if due is not None:
                loop.at(max(loop.now, due), hedge, index)

        for index in order[:THREADS]:
            send(index)

    def _finish(self, result: Any, error: BaseException | None) -> None:
        self.finished = True
        if self.done is not None:
            self.done(result, error)


def _answers(results: list[Any], *, alone: bool) -> tuple[Any, BaseException | None]:
    """What a batch delivers: the tuple of its answers (each one an answer or an error);
    ``alone``, its one request's answer, or its error."""
    if not alone:
        return tuple(results), None
    (only,) = results
    return (None, only) if isinstance(only, BaseException) else (only, None)


def _call(argument: tuple[Answer, Any, BaseException | None]) -> None:
    then, result, error = argument
    then(result, error)


def _order(parts: tuple[Any, ...]) -> list[int]:
    """The indexes of ``parts`` in their canonical order (:func:`_canonical`)."""
    if len(parts) == 1:
        return [0]
    canonical = list(map(_canonical, parts))
    return sorted(range(len(parts)), key=canonical.__getitem__)


def _canonical(request: Any) -> tuple[str, str, int]:
    """A request's place among those sent together: its operation, its key, its size."""
    key = getattr(request, "key", None) or getattr(request, "prefix", "")
    body = getattr(request, "body", b"")
    return type(request).__name__, str(key), len(body)


def _swaps_root(request: Any) -> bool:
    """Whether ``request`` is a compare-and-swap of the root (a conditional PUT of it)."""
    return type(request) is Put and request.key == REGISTRY_KEY and request.if_match is not None


def _reads_root(request: Any) -> bool:
    """Whether ``request`` reads the root (alone or in a parallel round)."""
    kind = type(request)
    if kind is Parallel:
        return any(_reads_root(part) for part in request.requests)
    return kind is Get and request.key == REGISTRY_KEY


def _intent_keys(request: Any) -> list[str]:
    """The intents ``request`` writes (alone or in a parallel round)."""
    kind = type(request)
    if kind is Parallel:
        return [key for part in request.requests for key in _intent_keys(part)]
    return [request.key] if kind is Put and request.key.startswith(INTENT_PREFIX) else []


def _touches_intents(request: Any, *, listing: bool = True) -> bool:
    """Whether ``request`` writes an intent (alone or in a parallel round), or lists them
    (``listing``)."""
    kind = type(request)
    if kind is Parallel:
        return any(_touches_intents(part, listing=listing) for part in request.requests)
    if kind is List and listing:
        return bool(request.prefix.startswith(INTENT_PREFIX))
    return kind is Put and bool(request.key.startswith(INTENT_PREFIX))
