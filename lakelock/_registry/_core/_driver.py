"""Runs the sans-I/O commit core against S3: each request the core yields is performed with
an :class:`~lakelock._s3.ObjectStore` and its answer (or exception) handed back.

The root's requests (``retried=False``) go through a store that does not retry: the core
counts and decides every retry of the compare-and-swap. Everything else goes through the
lake's store, which retries transient failures of write-once objects itself and resolves a
create's lost answer by its write id. A :class:`~._requests.Parallel` batch runs on up to 64
threads (the S3 client's connection pool). A read, or a small create-only write, still
unanswered long after this process's requests of its kind usually are gets a second, identical
request, and the first answer wins (:class:`Hedging`).
An :class:`~._requests.Ahead` batch is sent on threads of its own and not waited for; the next
request equal to one of its reads is answered by that read."""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from lakelock._registry._core._requests import (
    Ahead,
    Delete,
    Get,
    List,
    Listing,
    Now,
    Parallel,
    Put,
    Request,
    Sleep,
    Steps,
)
from lakelock._s3 import IfMatch, ObjectStore, PutMode

__all__ = ["HEDGED_BODY", "Driver", "Hedging"]

_T = TypeVar("_T")

#: Most requests of one :class:`Parallel` batch in flight at once: the S3 client's connection
#: pool (``max_pool_connections``). A fold at hundreds of writers reads a hundred or more
#: intents in one batch; the simulator runs batches under the same limit
#: (docs/decisions/0013-driver-threads.md).
THREADS = 64


#: The largest body of a write that is hedged: past S3's first-byte latency a write's time is
#: its bytes', which a second copy would send again.
HEDGED_BODY = 256 * 1024


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
    layer — so the first success of the two is the answer, and only the few slow requests
    are sent twice (docs/FORMAT.md, "Scheduling"; docs/decisions/0014-hedged-requests.md).
    Nothing of the root's is hedged, nor a write of more than :data:`HEDGED_BODY` bytes;
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
        """A read or a small create-only write the store layer may retry: a write-once
        object's."""
        return (isinstance(request, Get) and request.retried) or (
            isinstance(request, Put)
            and request.create
            and request.retried
            and len(request.body) <= HEDGED_BODY
        )

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


class Driver:
    """Performs the core's requests: ``store`` for write-once objects, ``root`` for the
    root (no retries of its own), ``sleep`` and ``clock`` for time, ``timer`` to measure it."""

    def __init__(
        self,
        store: ObjectStore,
        root: ObjectStore,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        hedging: Hedging | None = None,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.root = root
        self.sleep = sleep
        self.clock = clock
        self.hedging = hedging
        #: Measures how long requests take (hedging) and how old reads made ahead are, and
        #: answers the core's ``Now(monotonic=True)`` (its spans of server time).
        self.timer = timer
        #: Threads of hedged requests (both copies of one): created on the first.
        self._hedges: ThreadPoolExecutor | None = None
        #: Threads of reads made ahead, and those reads (with when each was sent) until the
        #: core asks for them or makes the next ones.
        self._aheads: ThreadPoolExecutor | None = None
        self._early: dict[Get | List, tuple[Future[Any], float]] = {}
        self._early_until = 0.0
        self._generation = 0
        self._lock = threading.Lock()

    def run(self, steps: Steps) -> Any:
        """Drive ``steps`` to its end; its return value."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                request = steps.throw(error) if error is not None else steps.send(answer)
            except StopIteration as stop:
                return stop.value
            answer, error = None, None
            try:
                answer = self.perform(request)
            except Exception as failure:
                error = failure

    def perform(self, request: Request) -> Any:
        if self.hedging is not None and self.hedging.hedges(request, alone=True):
            assert isinstance(request, Get | Put)
            return self._hedged_request(request)
        match request:
            case Get() | List():
                early = self._claim(request)
                if early is not None:
                    return early[0].result()
                return self._send(request)
            case Put() | Delete():
                return self._send(request)
            case Parallel(requests):
                return self._parallel(requests)
            case Ahead():
                self._ahead(request)
                return None
            case Sleep(seconds):
                self.sleep(seconds)
                return None
            case Now(monotonic):
                return self.timer() if monotonic else self.clock()
        raise TypeError(f"not a request: {request!r}")

    def _send(self, request: Get | Put | List | Delete) -> Any:
        """``request`` sent to S3 now (never answered by a read made ahead)."""
        match request:
            case Get(key, retried):
                return (self.store if retried else self.root).get(key)
            case Put(key, body, create, if_match, retried):
                mode: PutMode = (
                    "create" if create else IfMatch(if_match) if if_match else "overwrite"
                )
                store = self.store if retried else self.root
                return store.put(key, body, mode=mode, content_type="application/json")
            case List(prefix, start_after, max_keys):
                objects, truncated = self.store.list_page(
                    prefix, start_after=start_after, max_keys=max_keys
                )
                return Listing(tuple(objects), truncated)
            case Delete(key, if_match):
                return self.store.delete(key, if_match=if_match)
        raise TypeError(f"not a request: {request!r}")

    def _ahead(self, ahead: Ahead) -> None:
        """Send ``ahead``'s reads without waiting; they replace those made ahead before."""
        sent = self.timer()
        with self._lock:
            if self._aheads is None:
                self._aheads = ThreadPoolExecutor(THREADS, thread_name_prefix="lakelock-ahead")
            pool = self._aheads
            self._generation += 1
            generation = self._generation
            self._early = {}
            self._early_until = sent + ahead.seconds
        for request in dict.fromkeys(ahead.requests):
            if isinstance(request, List) and ahead.read_listed is not None:
                future = pool.submit(self._list_and_read, request, ahead, generation, pool)
            else:
                future = pool.submit(self._send, request)
            with self._lock:
                if generation != self._generation:
                    return
                self._early[request] = (future, sent)

    def _list_and_read(
        self, request: List, ahead: Ahead, generation: int, pool: ThreadPoolExecutor
    ) -> Listing:
        """``request``'s listing, once each key it found (``Ahead.read_listed``) is being
        read ahead in turn: whoever is answered by the listing finds those reads there."""
        listing: Listing = self._send(request)
        keys = ahead.to_read(listing)
        with self._lock:
            if generation == self._generation:
                for key in keys:
                    read = Get(key)
                    self._early[read] = (pool.submit(self._send, read), self.timer())
        return listing

    def _claim(self, request: Get | List) -> tuple[Future[Any], float] | None:
        """The read made ahead that answers ``request`` (taken: it answers once), if any."""
        if not self._early:
            return None
        with self._lock:
            early = self._early.pop(request, None)
            if early is not None and self.timer() > self._early_until:
                return None  # too old to answer for now
            return early

    def _parallel(self, requests: tuple[Request, ...]) -> tuple[Any, ...]:
        def one(request: Request) -> Any:
            try:
                return self.perform(request)
            except Exception as failure:
                return failure

        if len(requests) <= 1:
            return tuple(one(r) for r in requests)
        hedging = self.hedging
        after = {write: hedging.after(write) for write in (False, True)} if hedging else {}

        def each(request: Request) -> Any:
            if hedging is None or not hedging.hedges(request, alone=False):
                return one(request)
            assert isinstance(request, Get | Put)
            try:
                when = after[isinstance(request, Put)]
                return self._hedged_request(request, after=when, known=True)
            except Exception as failure:
                return failure

        with ThreadPoolExecutor(min(THREADS, len(requests))) as pool:
            return tuple(pool.map(each, requests))

    def _hedged_request(
        self, request: Get | Put, *, after: float | None = None, known: bool = False
    ) -> Any:
        """``request`` (a hedgeable one), hedged; answered by the same read made ahead if
        there is one. When to hedge: ``after`` if ``known`` (as its batch's start knew it;
        None: not yet), else as :class:`Hedging` says now."""
        hedging = self.hedging
        assert hedging is not None
        write = isinstance(request, Put)
        early = self._claim(request) if isinstance(request, Get) else None
        when = after if known else hedging.after(write)
        return self._timed(lambda: self._send(request), hedging, write, when, early)

    def hedged(self, send: Callable[[], _T]) -> _T:
        """``send()``, one create-only write of a new object of at most :data:`HEDGED_BODY`
        bytes (the same write however often it is sent), hedged as a lone request of the
        core is: called a second time if it is slower than this process's writes usually
        are, the first success the answer (or the last failure). An append's data files
        are written through here."""
        hedging = self.hedging
        if hedging is None or not hedging.alone:
            return send()
        return self._timed(send, hedging, True, hedging.after(True))

    def _timed(
        self,
        send: Callable[[], _T],
        hedging: Hedging,
        write: bool,
        after: float | None,
        early: tuple[Future[Any], float] | None = None,
    ) -> _T:
        """:meth:`_first_of_two`, and how long it took (from the read made ahead, if it
        answers) told to ``hedging``."""
        started = early[1] if early is not None else self.timer()
        answer = self._first_of_two(send, after, early)
        hedging.observe(write, self.timer() - started)
        return answer

    def _first_of_two(
        self,
        send: Callable[[], _T],
        after: float | None,
        early: tuple[Future[Any], float] | None = None,
    ) -> _T:
        """``send()``, called a second time if it is unanswered ``after`` seconds (None: not
        hedged yet, called once here); the first success is the answer (or the last
        failure). ``early``: the same read made ahead (the first copy, and when it was
        sent)."""
        if early is None and after is None:
            return send()
        if early is not None and after is None:
            return early[0].result()  # type: ignore[no-any-return]
        assert after is not None
        with self._lock:
            if self._hedges is None:
                self._hedges = ThreadPoolExecutor(2 * THREADS, thread_name_prefix="lakelock-hedge")
            pool = self._hedges
        if early is not None:
            pending: set[Future[Any]] = {early[0]}
            left = early[1] + after - self.timer()
        else:
            pending = {pool.submit(send)}
            left = after
        done, _ = wait(pending, timeout=max(0.0, left))
        if not done:
            pending.add(pool.submit(send))
        failure: BaseException | None = None
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                failure = future.exception()
                if failure is None:
                    answer: _T = future.result()
                    return answer
        assert failure is not None
        raise failure
