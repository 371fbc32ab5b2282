"""``AsyncPathLock``: the hierarchical path lock for asyncio.

The grant logic is the pure core's (``_core``); this shell needs no mutex because every node
call runs synchronously on the event loop, between two awaits.

- A blocked acquisition awaits one future per wait. A grant resolves it with ``True``; the
  deadline (a ``call_at`` handle) resolves it with ``False``. After either, the claim re-checks
  its state: a grant that beat the deadline is kept.
- Cancellation of a waiting task (or a timeout) withdraws its waiter and releases every step
  it held, including a grant that arrived after the cancellation was requested, so nothing is
  left held or queued by a task that never entered its ``async with`` body.
- Like :class:`asyncio.Lock`, a lock belongs to the event loop that uses it; it is not
  thread-safe.
"""

from __future__ import annotations

import asyncio
import functools

from lakelock._pathlock._core import Claim, LockRequest
from lakelock._pathlock._sync import Guard, LockBase, report, timed_out, wake

__all__ = ["AsyncPathLock", "AsyncPathLockGuard"]


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


class AsyncPathLock(LockBase["AsyncPathLockGuard"]):
    """A hierarchical read/write lock on pseudo-folder paths, for asyncio tasks.

    ``async with lock(read=[...], write=[...]):`` has the semantics of
    :class:`~lakelock._pathlock.PathLock`: it waits exactly for conflicting holders (and
    conflicting earlier waiters), ``timeout`` raises :class:`~lakelock.errors.LockTimeout`,
    ``stripes=n`` bounds memory. A plain ``with`` raises :class:`TypeError`.
    """

    def _guard(self, request: LockRequest, timeout: float | None) -> AsyncPathLockGuard:
        return AsyncPathLockGuard(self, request, timeout)

    async def _acquire(self, request: LockRequest, timeout: float | None) -> Claim:
        claim = Claim(request, self._index)
        waiter = claim.advance()
        if waiter is None:
            return claim
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            while waiter is not None:
                report(self._observer, claim, waiter)
                if deadline is not None and loop.time() >= deadline:
                    raise timed_out(request, waiter, timeout)
                future: asyncio.Future[bool] = loop.create_future()
                claim.wake = functools.partial(_resolve, future, True)
                expiry = (
                    None if deadline is None else loop.call_at(deadline, _resolve, future, False)
                )
                try:
                    in_time = await future
                finally:
                    if expiry is not None:
                        expiry.cancel()
                waiter = claim.advance()
                if waiter is not None and not in_time:
                    raise timed_out(request, waiter, timeout)
        except BaseException:
            wake(claim.release())
            # A caller may keep the exception, and with it this frame: drop the last
            # reference to the node we were waiting at, so it is not retained.
            waiter = None
            raise
        return claim

    def _release(self, claim: Claim) -> None:
        wake(claim.release())


class AsyncPathLockGuard(Guard):
    """Holds one request of an :class:`AsyncPathLock` while inside ``async with``; single
    use."""

    __slots__ = ("_lock",)

    def __init__(self, lock: AsyncPathLock, request: LockRequest, timeout: float | None) -> None:
        super().__init__(request, timeout)
        self._lock = lock

    async def __aenter__(self) -> AsyncPathLockGuard:
        self._enter()
        self._claim = await self._lock._acquire(self.request, self.timeout)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        claim = self._take_claim()
        if claim is not None:
            self._lock._release(claim)

    def __enter__(self) -> None:
        raise TypeError("AsyncPathLock is used with 'async with', not 'with'")

    def __exit__(self, *exc_info: object) -> None:
        """Never reached: ``__enter__`` raises."""
