"""``PathLock``: the hierarchical path lock for threads.

The grant logic is the pure core's (``_core``); this shell adds one mutex per lock and one
:class:`threading.Event` per blocked acquisition.

- Every :class:`~lakelock._pathlock._core.Claim` and node call happens under ``_mutex``, held
  only for O(1) work per step, never while waiting.
- A blocked acquisition waits on its event with the mutex released. Whoever grants its waiter
  sets the event after releasing the mutex, so the waiter re-checks its state under the mutex:
  a stale or early wake-up only costs a loop.
- A grant made while a waiter was timing out is kept if the waiter sees it; otherwise the
  waiter withdraws (releasing the grant if it raced in) and everything it held is released
  before :class:`~lakelock.errors.LockTimeout` is raised. The same holds for any exception
  raised while waiting (``KeyboardInterrupt``).
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeAlias, TypeVar

from lakelock._holding import DEFAULT, Default, check_timeout
from lakelock._pathlock._core import (
    Claim,
    ExactIndex,
    LockRequest,
    NodeIndex,
    PathLike,
    Waiter,
)
from lakelock._pathlock._striped import StripedIndex
from lakelock.errors import LockTimeout

__all__ = ["PathLock", "PathLockGuard"]


#: Called under the lock's mutex each time an acquisition blocks: the waiting request, the
#: node key it waits at, and the requests of the holders and earlier waiters in its way.
Observer: TypeAlias = Callable[[LockRequest, Hashable, list[LockRequest]], None]


class Guard:
    """What the guards of both locks share: one request, entered once, its claim released
    on exit."""

    __slots__ = ("_claim", "_used", "request", "timeout")

    def __init__(self, request: LockRequest, timeout: float | None) -> None:
        self.request = request
        self.timeout = timeout
        self._claim: Claim | None = None
        self._used = False

    def _enter(self) -> None:
        if self._used:
            raise RuntimeError("a path lock guard can be entered only once; call the lock again")
        self._used = True

    def _take_claim(self) -> Claim | None:
        claim, self._claim = self._claim, None
        return claim


_G = TypeVar("_G", bound=Guard)


class LockBase(abc.ABC, Generic[_G]):
    """What :class:`PathLock` and :class:`~lakelock._pathlock.AsyncPathLock` share: the
    default timeout, the node index (exact, or ``stripes`` fixed nodes), the observer, and
    the call that makes a guard."""

    def __init__(self, *, timeout: float | None = None, stripes: int | None = None) -> None:
        self._timeout = check_timeout(timeout)
        self._index: NodeIndex = ExactIndex() if stripes is None else StripedIndex(stripes)
        self._observer: Observer | None = None

    def __call__(
        self,
        read: Iterable[PathLike] = (),
        write: Iterable[PathLike] = (),
        *,
        timeout: float | Default | None = DEFAULT,
    ) -> _G:
        """A guard that holds ``read`` and ``write`` while inside it (``with`` for
        :class:`PathLock`, ``async with`` for ``AsyncPathLock``); ``timeout`` overrides the
        lock's. Paths are checked here, so a bad path raises before anything is locked."""
        chosen = self._timeout if timeout is DEFAULT else check_timeout(timeout)
        return self._guard(LockRequest(read, write), chosen)

    @abc.abstractmethod
    def _guard(self, request: LockRequest, timeout: float | None) -> _G: ...


def timed_out(request: LockRequest, waiter: Waiter, timeout: float | None) -> LockTimeout:
    """The error for ``request`` still waiting at ``waiter`` when its time ran out."""
    key = waiter.node.key
    where = "/" + "/".join(key) if isinstance(key, tuple) else f"stripe {key}"
    return LockTimeout(
        f"path lock ({request}) not acquired within {timeout}s, waiting at {where}",
        target=request,
        timeout=timeout,
    )


def report(observer: Observer | None, claim: Claim, waiter: Waiter) -> None:
    """Tell ``observer`` (if any) who ``claim`` waits for."""
    if observer is not None:
        blockers = [c.request for c in waiter.node.blockers(waiter)]
        observer(claim.request, waiter.node.key, blockers)


def wake(granted: list[Waiter]) -> None:
    """Wake the owners of newly granted waiters."""
    for waiter in granted:
        if waiter.owner.wake is not None:
            waiter.owner.wake()


class PathLock(LockBase["PathLockGuard"]):
    """A hierarchical read/write lock on pseudo-folder paths, for threads.

    ``with lock(read=[...], write=[...]):`` blocks until no other holder's request conflicts
    with this one (see :func:`~lakelock._pathlock.requests_conflict`), and never for a
    request that does not. ``timeout`` (seconds; ``None`` waits forever) bounds the wait and
    raises :class:`~lakelock.errors.LockTimeout`; the constructor sets the default, each call
    may override it; the error's ``target`` is the :class:`LockRequest`. Not re-entrant: a
    thread asking again for a path it holds in a clashing mode waits for itself.

    Fairness: at each path, a request is granted when compatible with the holders and with
    every request queued there before it, so later arrivals overtake only requests they do
    not clash with, and a stream of readers cannot starve a writer.

    ``stripes=n`` bounds memory to n nodes whatever the number of distinct paths, at the price
    of false conflicts between paths that share a stripe (see ``_striped``). By default the
    lock is exact and keeps a node only while someone holds or waits for its path.
    """

    def __init__(self, *, timeout: float | None = None, stripes: int | None = None) -> None:
        super().__init__(timeout=timeout, stripes=stripes)
        self._mutex = threading.Lock()

    def _guard(self, request: LockRequest, timeout: float | None) -> PathLockGuard:
        return PathLockGuard(self, request, timeout)

    def _acquire(self, request: LockRequest, timeout: float | None) -> Claim:
        claim = Claim(request, self._index)
        mutex = self._mutex
        granted: list[Waiter] = []
        mutex.acquire()
        try:
            waiter = claim.advance()
            if waiter is None:
                return claim
            deadline = None if timeout is None else time.monotonic() + timeout
            # The event is set only by a grant, which needs the mutex, and it is cleared under
            # the mutex before each wait, so no grant is missed; a stale set only costs a loop.
            event = threading.Event()
            claim.wake = event.set
            while waiter is not None:
                report(self._observer, claim, waiter)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise timed_out(request, waiter, timeout)
                event.clear()
                mutex.release()
                try:
                    event.wait(remaining)
                finally:
                    mutex.acquire()
                waiter = claim.advance()
        except BaseException:
            granted = claim.release()
            # A caller may keep the exception, and with it this frame: drop the last
            # reference to the node we were waiting at, so it is not retained.
            waiter = None
            raise
        finally:
            mutex.release()
            wake(granted)
        return claim

    def _release(self, claim: Claim) -> None:
        with self._mutex:
            granted = claim.release()
        wake(granted)


class PathLockGuard(Guard):
    """Holds one request of a :class:`PathLock` while inside ``with``; single use."""

    __slots__ = ("_lock",)

    def __init__(self, lock: PathLock, request: LockRequest, timeout: float | None) -> None:
        super().__init__(request, timeout)
        self._lock = lock

    def __enter__(self) -> PathLockGuard:
        self._enter()
        self._claim = self._lock._acquire(self.request, self.timeout)
        return self

    def __exit__(self, *exc_info: object) -> None:
        claim = self._take_claim()
        if claim is not None:
            self._lock._release(claim)
