"""Committing, in one process: ``Registry.commit`` calls queue up, and whoever goes next
takes everything queued as one batch for the commit core (:mod:`._core`), which the
:class:`~._core.Driver` runs against S3.

One commit (docs/ARCHITECTURE.md, "The commit core"; docs/FORMAT.md for the objects):

1. *Prepare* (in the caller's thread, :meth:`Committer.prepare`): a one-dataset commit
   becomes an intent; a commit spanning datasets gets plain delta manifests. Nothing is
   written yet; an invalid change raises here.
2. *Queue*: with group commit on, concurrent ``commit()`` calls of one :class:`Registry` wait
   for the one batch in flight; meanwhile each sends its intent, so other processes can fold
   it; whoever goes next takes everything queued as one batch.
3. *Run* the batch through the core: settle, fold, apply, swap, with its outcomes:

   ===================================  ====================================================
   200                                  every change in the batch is committed
   412 PreconditionFailed               **redrive** (usually another process applied ours:
                                        settled there, not re-applied)
   409 / 503 / unknown outcome          **retry** after jittered backoff
   404 on If-Match                      the registry was deleted: RegistryCorruptError
   attempts or time run out             the batch's intents are recorded cancelled by a swap
                                        first (RetryBudgetExhaustedError), or found applied
                                        (success); if that cannot be done either,
                                        CommitStateUnknownError
   ===================================  ====================================================
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from lakelock._registry._batch import CommitResult, Pending
from lakelock._registry._changes import Change
from lakelock._registry._core import Committer, Driver

__all__ = ["CommitQueue"]

log = logging.getLogger("lakelock.registry")


class CommitQueue:
    """Group commit within a process: one batch in flight; callers who arrive meanwhile
    send their intents early and go in the next batch together (up to ``max_batch``)."""

    def __init__(
        self, committer: Committer, driver: Driver, *, group_commit: bool, max_batch: int
    ) -> None:
        self.committer = committer
        self.driver = driver
        self.group_commit = group_commit
        self.max_batch = max_batch
        self.queue: list[Pending] = []
        self.lock = threading.Lock()
        # One batch in flight at a time; the others' callers wait on this for their turn
        # (or to find their commit done by the batch in flight).
        self.turn = threading.Condition(self.lock)
        self.committing = False
        # Intents being created by callers that will queue next (see _send_early): ours.
        self.sending: set[str] = set()
        committer.own = self.own_intents
        committer.queued = self.has_queued
        #: The thread folding for other processes after our last batch (:meth:`_linger`).
        self.lingerer: threading.Thread | None = None

    def own_intents(self) -> set[str]:
        """The intents of this process outside the batch in flight (queued, or being
        sent): a fold skips them (they go with the next batch) instead of reading them."""
        with self.lock:
            return {p.intent for p in self.queue if p.intent is not None} | self.sending

    def has_queued(self) -> bool:
        """Whether a commit of this process waits for the batch in flight."""
        with self.lock:
            return bool(self.queue or self.sending)

    def commit(self, changes: Sequence[Change], *, now: float) -> CommitResult:
        pending = self.committer.prepare(changes, now=now)
        if not self.group_commit:
            self.driver.run(self.committer.run([pending]))
        else:
            with self.turn:
                busy = self.committing and pending.intent is not None
                if busy and pending.intent is not None:
                    self.sending.add(pending.intent)
            if busy:
                # A batch is in flight, so this commit waits for the next one anyway:
                # create its intent now, and the next batch has only its snapshot and root
                # to write (a failed PUT is left to the batch).
                self.driver.run(self.committer.send([pending]))
            with self.turn:
                self.queue.append(pending)
                self.sending.discard(pending.intent or "")
            while True:
                with self.turn:
                    while self.committing and not pending.done.is_set():
                        self.turn.wait()
                    if pending.done.is_set():
                        break
                    self.committing = True
                    batch = self.queue[: self.max_batch]
                    del self.queue[: self.max_batch]
                try:
                    self.driver.run(self.committer.run(batch))
                finally:
                    with self.turn:
                        self.committing = False
                        self.turn.notify_all()
            self._start_lingering()
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def _start_lingering(self) -> None:
        """Our batch's swap carried other processes' intents: keep folding for them a
        little while in a daemon thread (:meth:`Committer.linger`), so the caller returns
        now and the next fold does not wait for the other processes' stagger. A commit of
        ours that arrives meanwhile waits for at most the round in flight."""
        if not self.committer.lingering():
            return
        with self.turn:
            if self.committing or self.queue or (self.lingerer and self.lingerer.is_alive()):
                return
            self.committing = True
            self.lingerer = threading.Thread(
                target=self._linger, name="lakelock-linger", daemon=True
            )
        self.lingerer.start()

    def _linger(self) -> None:
        try:
            self.driver.run(self.committer.linger())
        except Exception:
            # A courtesy fold for others: never the caller's failure, nor something to act
            # on (the others' own rules fold their commits; a process exiting meanwhile
            # ends here too), so it is not shown unless asked for.
            log.debug("folding for other processes failed", exc_info=True)
        finally:
            with self.turn:
                self.committing = False
                self.turn.notify_all()

    def run(self, steps: object) -> object:
        """Run other steps of the core (an upgrade) while no batch is in flight."""
        with self.turn:
            while self.committing:
                self.turn.wait()
            self.committing = True
        try:
            return self.driver.run(steps)  # type: ignore[arg-type]
        finally:
            with self.turn:
                self.committing = False
                self.turn.notify_all()
