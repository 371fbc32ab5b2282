"""Group commit within one process, sans-I/O: which queued commits go into one batch, when a
batch closes, whose intents are sent early, and when the process lingers to fold for others.

One batch (or one lingering fold, or one upgrade) holds the process's *turn* at a time.
A commit that arrives while the turn is held sends its intents at once (other processes may
fold them meanwhile, and its batch has only its snapshot and root left to write), queues, and
waits; whoever takes the turn next takes everything queued, up to ``max_batch``, as one batch
for the commit core. A batch whose swap carried other processes' intents keeps the turn for a
lingering fold (:meth:`Committer.linger`), which stops at its next round once a commit of this
process is queued. One whose caller commits back to back lingers only once that caller has
not come back in time (:meth:`Committer.away_after`: a burst's last commit): it waits first,
without the turn, so that a caller who is back loses nothing.

:class:`GroupCommit`'s steps yield the core's requests and a :class:`Turn` where they wait
for the turn. Two drivers run the very same steps: :class:`~._commit.CommitQueue` on its
callers' threads (a :class:`Turn` waits on a condition of :attr:`GroupCommit.lock`, the
lingering fold runs on a daemon thread), and the simulator's writer processes in virtual time
(:mod:`lakelock._sim._run`), so the two cannot drift.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from lakelock._registry._batch import Pending, may_have_landed
from lakelock._registry._core._requests import Now, Request, Sleep
from lakelock.errors import CommitStateUnknownError

if TYPE_CHECKING:
    from lakelock._registry._core import Committer

__all__ = ["GroupCommit", "Turn", "TurnSteps"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Turn:
    """Wait until ``ready()``: the batch, lingering fold or upgrade holding the turn has
    given it back (:attr:`GroupCommit.released` is called then), or ours is done meanwhile.
    Answered ``None``. No request to S3: its driver waits."""

    ready: Callable[[], bool]


#: Steps of :class:`GroupCommit`: the core's requests, and :class:`Turn`.
TurnSteps = Generator[Request | Turn, Any, _T]


class GroupCommit:
    """The turn and the queue of one process's commits (see the module). Thread-safe:
    :attr:`lock` guards its state; :attr:`released` is called, under it, each time the turn
    is given back (the shell notifies its condition, the simulator wakes its waiters)."""

    def __init__(self, committer: Committer, *, max_batch: int) -> None:
        self.committer = committer
        self.max_batch = max_batch
        self.lock = threading.Lock()
        self.queue: list[Pending] = []
        #: Intents being created by commits that will queue next: ours.
        self.sending: set[str] = set()
        #: Whether a batch, a lingering fold or an upgrade holds the turn.
        self.committing = False
        self.released: Callable[[], None] = _nothing
        #: Commits that have arrived so far: a caller who came back since a lingering fold
        #: was planned for when it is away.
        self.arrivals = 0
        #: The lingering fold :meth:`linger` starts next, planned by :meth:`_lingers` for
        #: when the caller is away: the arrivals then, and the seconds to wait (None: it
        #: lingers at once, the turn already taken).
        self._away: tuple[int, float] | None = None
        #: Whether the plan :meth:`linger` last took held the turn already (to linger at
        #: once), which :meth:`not_lingering` gives back if its fold never runs.
        self._turn_taken = False
        committer.own = self.own_intents
        committer.queued = self.has_queued

    def own_intents(self) -> set[str]:
        """The intents of this process outside the batch in flight (queued, or being
        sent): a fold skips them (they go with the next batch) instead of reading them."""
        with self.lock:
            return {key for p in self.queue for key in p.intents} | self.sending

    def has_queued(self) -> bool:
        """Whether a commit of this process waits for the batch in flight."""
        with self.lock:
            return bool(self.queue or self.sending)

    def commit(self, pending: Pending) -> TurnSteps[bool]:
        """``pending`` (prepared) committed, by the batch it goes in: this one's, or one
        another caller runs meanwhile. Returns whether this process lingers now: the turn
        is kept for it, and :meth:`linger` must run.

        However it ends, ``pending`` is left neither queued nor being sent (:meth:`_withdraw`:
        a fold of this process would skip its intents forever). An error that is not the
        commit's own (a bug, an interrupt) once its intent may exist is not a plain failure:
        another process may still apply that intent, so an exception is raised as
        :class:`~lakelock.errors.CommitStateUnknownError` (:func:`_maybe_applied`), and an
        interrupt as itself, with a note saying so."""
        with self.lock:
            self.arrivals += 1
            early = self.committing and pending.intent is not None
        try:
            if early:
                yield from self._send_early(pending)
            with self.lock:
                self.queue.append(pending)
            yield from self._batch(pending)
        except BaseException as error:
            self._withdraw(pending)
            told = _maybe_applied(error, pending)
            if told is error:
                raise
            raise told from error
        return self._lingers()

    def _send_early(self, pending: Pending) -> TurnSteps[None]:
        # The turn is held, so this commit waits for the next batch anyway: create its
        # intents now (made now: their keys are final before the batch in flight is told
        # to skip them), and that batch has only its snapshot and root to write (a failed
        # PUT is left to the batch).
        yield from self.committer.make([pending])
        with self.lock:
            self.sending.update(pending.intents)
        try:
            yield from self.committer.send([pending])
        finally:
            with self.lock:
                self.sending.difference_update(pending.intents)

    def _batch(self, pending: Pending) -> TurnSteps[None]:
        """Until ``pending`` is done: by a batch of its own, or one another caller runs."""

        def ready() -> bool:
            return pending.finished or not self.committing

        while True:
            with self.lock:
                if pending.finished:
                    return
                batch = None
                if not self.committing:
                    self.committing = True
                    batch = self.queue[: self.max_batch]
                    del self.queue[: self.max_batch]
            if batch is None:
                yield Turn(ready)
                continue
            try:
                yield from self.committer.run(batch)
            finally:
                self._release()

    def _withdraw(self, pending: Pending) -> None:
        """``pending``, whose caller leaves (an error, an interrupt, its steps closed), taken
        out of the queue and of the intents being sent: this process's folds no longer skip
        its intents (one that exists is folded as any other process's would be), and
        :meth:`has_queued` no longer says a commit waits."""
        with self.lock:
            self.sending.difference_update(pending.intents)
            self.queue[:] = [p for p in self.queue if p is not pending]

    def _lingers(self) -> bool:
        """Whether to fold for others (:meth:`Committer.lingering`): now, and then the turn
        is taken for it, unless a batch holds it or a commit of ours is queued; or once the
        caller is away (:meth:`Committer.away_after`), planned here."""
        if not self.committer.lingering():  # outside the lock: it asks has_queued
            away = self.committer.away_after()
            if away is None:
                return False
            with self.lock:
                self._away = (self.arrivals, away)
            return True
        with self.lock:
            if self.committing or self.queue:
                return False
            self.committing = True
            self._away = None
            return True

    def linger(self) -> TurnSteps[None]:
        """The lingering fold :meth:`commit` said to run (call it then: it takes that
        plan); the turn is given back when it ends, fails or is closed."""
        with self.lock:
            away, self._away = self._away, None
            self._turn_taken = away is None
        return self._linger(away)

    def not_lingering(self) -> None:
        """The lingering fold :meth:`linger` returned will never run (no thread could be
        started for it): the turn its plan took, to linger at once, is given back."""
        with self.lock:
            taken, self._turn_taken = self._turn_taken, False
        if taken:
            self._release()

    def _linger(self, away: tuple[int, float] | None) -> TurnSteps[None]:
        with self.lock:
            self._turn_taken = False  # running: its finally gives the turn back
        if away is not None:
            arrivals, seconds = away
            since = yield Now(monotonic=True)
            yield Sleep(seconds)
            if (yield Now(monotonic=True)) - since < seconds / 2:
                return  # a sleep that does not wait (a test's) says nothing of the caller
            if not self.committer.lingering(away=True):  # outside the lock: has_queued
                return
            with self.lock:
                if self.arrivals != arrivals or self.committing or self.queue:
                    return  # the caller is back: its batch folds
                self.committing = True
        try:
            yield from self.committer.linger()
        finally:
            self._release()

    def run(self, steps: Generator[Request, Any, _T]) -> TurnSteps[_T]:
        """Other steps of the core (an upgrade) run while no batch is in flight."""

        def ready() -> bool:
            return not self.committing

        while True:
            with self.lock:
                if not self.committing:
                    self.committing = True
                    break
            yield Turn(ready)
        try:
            return (yield from steps)
        finally:
            self._release()

    def _release(self) -> None:
        with self.lock:
            self.committing = False
            self.released()


def _maybe_applied(error: BaseException, pending: Pending) -> BaseException:
    """What the caller of ``pending`` hears of ``error``, which ended its commit: the
    unknown outcome its batch decided (``error`` its cause), or, if its intent may exist (its
    PUT was sent) and nothing decided it, :class:`~lakelock.errors.CommitStateUnknownError`
    (:func:`may_have_landed`): another process may still apply it. An interrupt (a
    ``KeyboardInterrupt``, a closed generator's ``GeneratorExit``) stays itself, with a note
    saying so."""
    decided = pending.error if pending.finished else None
    unsettled = isinstance(decided, CommitStateUnknownError) or (
        not pending.finished and pending.intent_sent
    )
    if not unsettled:
        return error
    if isinstance(error, Exception):
        return decided or may_have_landed(error, pending.change)
    error.add_note(
        f"lakelock: the commit to {pending.change.dataset!r} was interrupted after its intent "
        f"was sent: another process may still apply it (look its commit id "
        f"{pending.change.commit_id!r} up)"
    )
    return error


def _nothing() -> None:
    return None
