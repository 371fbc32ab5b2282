"""Committing, in one process: ``Registry.commit`` calls queue up, and whoever goes next
takes everything queued as one batch for the commit core (:mod:`._core`), which the
:class:`~._core.Driver` runs against S3.

One commit (docs/ARCHITECTURE.md, "The commit core"; docs/FORMAT.md for the objects):

1. *Prepare* (in the caller's thread, :meth:`Committer.prepare`): a commit becomes its
   intents (one per dataset it changes; a restore's names the version it makes current).
   Nothing is written yet; an invalid change raises here.
2. *Queue*: with group commit on, concurrent ``commit()`` calls of one :class:`Registry` wait
   for the one batch in flight; meanwhile each sends its intent, so other processes can fold
   it; whoever goes next takes everything queued as one batch.
3. *Run* the batch through the core: settle, fold, apply, swap, with its outcomes:

   ===================================  ====================================================
   200                                  every change in the batch is committed
   412 PreconditionFailed               **redrive** (usually another process applied ours:
                                        settled there, not re-applied)
   409 / 503 / unknown outcome          **retry** after jittered backoff
   404 on If-Match                      the registry was deleted: once the intent was
                                        sent, CommitStateUnknownError (its cause
                                        RegistryCorruptError)
   attempts or time run out             the batch's intents are recorded cancelled by a swap
                                        first (RetryBudgetExhaustedError), or found applied
                                        (success); if that cannot be done either,
                                        CommitStateUnknownError
   ===================================  ====================================================
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

from lakelock._registry._batch import CommitResult, Pending
from lakelock._registry._changes import Change
from lakelock._registry._core import Committer, Driver
from lakelock._registry._core._requests import Sleep
from lakelock._registry._group import GroupCommit, Turn, TurnSteps

__all__ = ["CommitQueue"]

log = logging.getLogger("lakelock.registry")

_T = TypeVar("_T")


class CommitQueue:
    """Group commit within a process (:class:`~._group.GroupCommit`: one batch in flight;
    callers who arrive meanwhile send their intents early and go in the next batch together,
    up to ``max_batch``), on the callers' threads: they only wait for their turn, and the
    lingering fold runs on a daemon thread."""

    def __init__(
        self, committer: Committer, driver: Driver, *, group_commit: bool, max_batch: int
    ) -> None:
        self.committer = committer
        self.driver = driver
        self.group_commit = group_commit
        self.group = GroupCommit(committer, max_batch=max_batch)
        #: Guards the group's state (and what the core knows: the shell reads it under it).
        self.lock = self.group.lock
        # Callers wait on this for their turn (or to find their commit done by the batch in
        # flight); the group notifies it whenever the turn is given back.
        self.turn = threading.Condition(self.group.lock)
        self.group.released = self.turn.notify_all
        #: The thread folding for other processes after our last batch (:meth:`_linger`).
        self.lingerer: threading.Thread | None = None
        # Set while :meth:`close` stops the lingering fold; it cuts its real sleeps short.
        self._closing = threading.Event()
        #: How many times :meth:`close` was called: a commit in flight meanwhile does not
        #: start folding for others once it returns. Guarded by ``_starting``, with
        #: :attr:`lingerer`, so that :meth:`close` sees any lingering fold it must stop.
        self._closes = 0
        self._starting = threading.Lock()

    @property
    def max_batch(self) -> int:
        return self.group.max_batch

    @property
    def queue(self) -> list[Pending]:
        """The commits waiting for the next batch."""
        return self.group.queue

    def commit(self, changes: Sequence[Change], *, now: float) -> CommitResult:
        with self._starting:
            closes = self._closes
        pending = self.committer.prepare(changes, now=now, monotonic=self.driver.timer())
        if not self.group_commit:
            self.driver.run(self.committer.run([pending]))
        elif self._drive(self.group.commit(pending)):
            # Our batch's swap carried other processes' intents: keep folding for them a
            # little while, so the caller returns now and the next fold does not wait for
            # the other processes' stagger.
            self._start_lingering(closes)
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def _start_lingering(self, closes: int) -> None:
        """The lingering fold the group planned, on a thread of its own; none if
        :meth:`close` was called since the commit that plans it began (``closes``: the
        calls then): its user expects nothing more sent for others."""
        steps = self.group.linger()
        with self._starting:
            if self._closes == closes:
                lingerer = threading.Thread(
                    target=self._linger, args=(steps,), name="lakelock-linger", daemon=True
                )
                try:
                    lingerer.start()
                except RuntimeError:
                    # No thread to be had (a process at its thread limit, an interpreter
                    # exiting): nobody folds for others now, and the commit's outcome
                    # stands.
                    log.debug("no thread to fold for other processes on", exc_info=True)
                else:
                    self.lingerer = lingerer
                    return
        steps.close()
        self.group.not_lingering()

    def close(self) -> None:
        """Stop folding for other processes: the lingering fold sends nothing more (a
        request of it in flight is answered first) and its thread ends before this returns;
        a commit in flight meanwhile starts none. A later commit may linger again."""
        with self._starting:
            self._closes += 1
            lingerer = self.lingerer
        self._closing.set()
        try:
            if lingerer is not None:
                lingerer.join()
        finally:
            self._closing.clear()

    def _linger(self, steps: TurnSteps[None]) -> None:
        try:
            self._drive(self._until_closed(steps))
        except Exception:
            # A courtesy fold for others: never the caller's failure, nor something to act
            # on (the others' own rules fold their commits; a process exiting meanwhile
            # ends here too), so it is not shown unless asked for.
            log.debug("folding for other processes failed", exc_info=True)

    def _until_closed(self, steps: TurnSteps[None]) -> TurnSteps[None]:
        """``steps`` until :meth:`close`: no request of theirs is passed on once it is
        called, and a real sleep of theirs (the caller may be away for seconds) ends when
        it is; closed, ``steps`` are closed, which gives their turn back."""
        answer: Any = None
        error: BaseException | None = None
        try:
            while not self._closing.is_set():
                try:
                    request = steps.throw(error) if error is not None else steps.send(answer)
                except StopIteration:
                    return
                answer, error = None, None
                if isinstance(request, Sleep) and self.driver.sleep is time.sleep:
                    self._closing.wait(request.seconds)
                    continue
                try:
                    answer = yield request
                except Exception as failure:
                    error = failure
        finally:
            steps.close()

    def run(self, steps: object) -> object:
        """Run other steps of the core (an upgrade) while no batch is in flight."""
        return self._drive(self.group.run(steps))  # type: ignore[arg-type]

    def _drive(self, steps: TurnSteps[_T]) -> _T:
        """``steps`` run by the driver, each :class:`Turn` waited for on this thread."""
        try:
            result: _T = self.driver.run(self._waiting(steps))
        except BaseException as error:
            if not isinstance(error, Exception):
                # An interrupt the driver does not hand to the steps (a KeyboardInterrupt
                # as a request was sent): handed to them now, so that what they say of it
                # (the commits it leaves unsettled) is on the exception the caller gets.
                with contextlib.suppress(BaseException):
                    steps.throw(error)
            raise
        finally:
            # Whatever ended the run: a turn the steps hold is given back now, not whenever
            # the traceback that holds them is collected.
            steps.close()
        return result

    def _waiting(self, steps: TurnSteps[_T]) -> Generator[Any, Any, _T]:
        """``steps`` but its turns (:class:`Turn`), each waited for here on the condition."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                request = steps.throw(error) if error is not None else steps.send(answer)
            except StopIteration as stop:
                value: _T = stop.value
                return value
            answer, error = None, None
            if isinstance(request, Turn):
                with self.turn:
                    self.turn.wait_for(request.ready)
                continue
            try:
                answer = yield request
            except Exception as failure:
                error = failure
