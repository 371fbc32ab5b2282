"""Runs the sans-I/O commit core against S3: each request the core yields is performed with
an :class:`~lakelock._s3.ObjectStore` and its answer (or exception) handed back.

The root's requests (``retried=False``) go through a store that does not retry: the core
counts and decides every retry of the compare-and-swap. Everything else goes through the
lake's store, which retries transient failures of write-once objects itself and resolves a
create's lost answer by its write id. A :class:`~._requests.Parallel` batch runs on up to 64
threads (the S3 client's connection pool). A read, or a small create-only write, still
unanswered long after this process's requests of its kind usually are gets a second, identical
request, and the first success wins (:class:`~._hedging.Race` decides).
An :class:`~._requests.Ahead` batch is sent on threads of its own and not waited for; the next
request equal to one of its reads is answered by that read (:class:`~._early.ReadsAhead`
decides). Those decisions are sans-I/O so that the simulator runs them too: the threads here
only send, wait on real time, and feed them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from lakelock._registry._core._early import ReadsAhead
from lakelock._registry._core._hedging import HEDGED_BODY, Hedging, Race
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
from lakelock._s3 import IfMatch, ObjectStore, PutMode, new_write_id

__all__ = ["HEDGED_BODY", "THREADS", "Driver", "Hedging"]

_T = TypeVar("_T")

#: Most requests of one :class:`Parallel` batch in flight at once: the S3 client's connection
#: pool (``max_pool_connections``). A fold at hundreds of writers reads a hundred or more
#: intents in one batch; the simulator runs batches under the same limit
#: (docs/decisions/0013-driver-threads.md).
THREADS = 64


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
        self._early: ReadsAhead[Future[Any]] = ReadsAhead()
        self._lock = threading.Lock()

    def close(self) -> None:
        """Wait for the requests this driver sent and no longer waits for (a hedged
        request's slower copy, which goes on after the first answer won, and its read-back
        if refused; reads made ahead), then end their threads: afterwards it sends nothing
        of its own. Reads made ahead are dropped. A request another thread is waiting for
        meanwhile is answered by its copy already sent (never a second one, nor an error for
        it). It stays usable: the next hedge or read ahead starts threads again."""
        with self._lock:
            pools = [pool for pool in (self._hedges, self._aheads) if pool is not None]
            self._hedges = self._aheads = None
        for pool in pools:
            pool.shutdown(wait=True)
        with self._lock:
            self._early = ReadsAhead()

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
            assert isinstance(request, Get | Put | List)
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

    def _send(self, request: Get | Put | List | Delete, *, write_id: str | None = None) -> Any:
        """``request`` sent to S3 now (never answered by a read made ahead). ``write_id``:
        a write's, shared by its copies (a hedged create's): a 412 on either is read back,
        and the object either copy wrote is ours."""
        match request:
            case Get(key, retried):
                return (self.store if retried else self.root).get(key)
            case Put(key, body, create, if_match, retried):
                mode: PutMode = (
                    "create" if create else IfMatch(if_match) if if_match else "overwrite"
                )
                store = self.store if retried else self.root
                return store.put(
                    key,
                    body,
                    mode=mode,
                    content_type="application/json",
                    write_id=write_id,
                    resent=write_id is not None,
                )
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
            reads = self._early.begin(ahead, sent)
            generation = self._early.generation
        for request in reads:
            future = _submitted(pool, self._read_ahead, request, ahead, generation, pool)
            if future is None:  # closed meanwhile: reads ahead are only ever a head start
                return
            with self._lock:
                if not self._early.keep(request, future, sent, generation):
                    return

    def _read_ahead(
        self, request: Get | List, ahead: Ahead, generation: int, pool: ThreadPoolExecutor
    ) -> Any:
        """``request``'s answer; a listing's once each key it found that is read on
        (:meth:`ReadsAhead.listed`) is being read ahead in turn: whoever is answered by the
        listing finds those reads there."""
        answer = self._send(request)
        if isinstance(answer, Listing):
            with self._lock:
                for read in self._early.listed(ahead, request, answer, generation):
                    future = _submitted(pool, self._send, read)
                    if future is not None:
                        self._early.keep(read, future, self.timer(), generation)
        return answer

    def _claim(self, request: Get | List) -> tuple[Future[Any], float] | None:
        """The read made ahead that answers ``request`` (taken: it answers once), if any."""
        with self._lock:
            return self._early.claim(request, self.timer())

    def _parallel(self, requests: tuple[Request, ...]) -> tuple[Any, ...]:
        def one(request: Request) -> Any:
            try:
                return self.perform(request)
            except Exception as failure:
                return failure

        if len(requests) <= 1:
            return tuple(one(r) for r in requests)
        hedging = self.hedging
        after = hedging.batch() if hedging else {}

        def each(request: Request) -> Any:
            if hedging is None or not hedging.hedges(request, alone=False):
                return one(request)
            assert isinstance(request, Get | Put | List)
            try:
                return self._hedged_request(request, after=after)
            except Exception as failure:
                return failure

        with ThreadPoolExecutor(min(THREADS, len(requests))) as pool:
            futures = [_submitted(pool, each, request) for request in requests]
            # One the pool refused (the interpreter is exiting) is sent on this thread.
            return tuple(
                each(request) if future is None else future.result()
                for future, request in zip(futures, requests, strict=True)
            )

    def _hedged_request(
        self, request: Get | Put | List, *, after: dict[bool, float | None] | None = None
    ) -> Any:
        """``request`` (a hedgeable one), hedged; answered by the same read made ahead if
        there is one. When to hedge: as ``after`` says (:meth:`Hedging.batch`, as its
        batch's start knew it), else as :class:`Hedging` says now."""
        hedging = self.hedging
        assert hedging is not None
        early = self._claim(request) if isinstance(request, Get | List) else None
        sent = early[1] if early is not None else self.timer()
        race = hedging.race_for(request, sent=sent, after=after or hedging.batch())
        # Both copies of a create carry one write id: a copy refused because the other
        # landed (its answer late or lost) is resolved as ours at once, not after the
        # other's timeout.
        write_id = new_write_id() if isinstance(request, Put) and race.due is not None else None
        return self._race(lambda: self._send(request, write_id=write_id), race, early)

    def hedged(self, send: Callable[[], _T]) -> _T:
        """``send()``, one create-only write of a new object of at most :data:`HEDGED_BODY`
        bytes (the same write however often it is sent), hedged as a lone request of the
        core is: called a second time if it is slower than this process's writes usually
        are, the first success the answer (or the last failure). An append's data files
        are written through here."""
        hedging = self.hedging
        if hedging is None or not hedging.alone:
            return send()
        return self._race(send, hedging.race(True, sent=self.timer(), after=hedging.after(True)))

    def _race(
        self,
        send: Callable[[], _T],
        race: Race,
        early: tuple[Future[Any], float] | None = None,
    ) -> _T:
        """``send()`` as ``race`` decides: called a second time if it is unanswered when
        the race says (never, if it does not), the first success the answer (or the last
        failure). ``early``: the same read made ahead (the first copy, and when it was
        sent). This thread only waits: the race decides."""
        if early is None and race.due is None:
            only = send()  # never hedged: no thread to wait on
            race.answers(False, self.timer())
            return only
        with self._lock:
            if self._hedges is None:
                self._hedges = ThreadPoolExecutor(2 * THREADS, thread_name_prefix="lakelock-hedge")
            pool = self._hedges
        if early is not None:
            pending: set[Future[Any]] = {early[0]}
        else:
            # The race's clock starts when its first copy is sent, not when it waits for
            # one of these threads (busy with earlier races' slower copies): time waited is
            # not the store's, and each copy it hedged made the next requests wait longer.
            # The simulator's clock starts at the send too
            # (docs/decisions/0059-hedges-a-share-of-requests.md).
            sending = threading.Event()

            def first() -> _T:
                try:
                    race.sent = self.timer()
                finally:
                    sending.set()  # a clock that raised: its error is the copy's answer
                return send()

            sent = _submitted(pool, first)
            if sent is None:  # closed meanwhile: sent once, on this thread
                only = send()
                race.answers(False, self.timer())
                return only
            pending = {sent}
            sending.wait()
        while True:
            due = race.due
            timeout = None if due is None else max(0.0, due - self.timer())
            done, pending = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
            if not done:
                if race.hedge():
                    hedge = _submitted(pool, send)
                    if hedge is None:  # closed meanwhile: the first copy is the answer
                        race.answers(True, self.timer())
                    else:
                        pending.add(hedge)
                continue
            for future in done:
                failure = future.exception()
                if race.answers(failure is not None, self.timer()):
                    if failure is not None:
                        raise failure
                    answer: _T = future.result()
                    return answer


def _submitted(pool: ThreadPoolExecutor, call: Callable[..., _T], *args: Any) -> Future[_T] | None:
    """``call(*args)`` on ``pool``; ``None`` if the pool takes no more (:meth:`Driver.close`
    shut it down from another thread, or the interpreter is exiting): the caller then does
    without the copy, the read ahead, or the thread, never failing its request for it."""
    try:
        return pool.submit(call, *args)
    except RuntimeError:  # "cannot schedule new futures after [interpreter] shutdown"
        return None
