"""Lingering: a folder goes on folding for others after its batch is done
(``FoldPolicy.linger``, docs/decisions/0019-linger.md).

A folder whose swap carried other processes' intents knows the root (it swapped it in), and
the writers its swap settled are about to send their next intents: it lists again every
``look`` of a round and swaps whatever it finds, for up to ``linger`` rounds without finding
any, so the next fold starts as soon as theirs are out, not after their stagger. In
production the process's commit queue runs :func:`linger` on a daemon thread after
``commit()`` returned (``CommitQueue``); the simulator runs it as a process of its own beside
the writer's next data PUT. Whether to linger at all, and how long to pause, is the
scheduler's (:meth:`._schedule.Scheduler.linger`, :meth:`~._schedule.Scheduler.linger_pause`);
safety is the attempt path's, which a lingering round runs without commits of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakelock._registry._core._attempt import apply_and_swap
from lakelock._registry._core._fold import fold
from lakelock._registry._core._requests import Now, Sleep, Steps
from lakelock._registry._core._state import Batch, Redrive, Retry
from lakelock.errors import RegistryCorruptError, StorageError

if TYPE_CHECKING:
    from lakelock._registry._core._committer import Committer

__all__ = ["AWAY", "away_after", "linger", "lingering"]

#: A caller that has not come back for its next commit within this many times the pause it
#: usually makes between commits (and at least a round) is away: its burst is over, for now.
#: A folder whose last swap carried others' intents then lingers after all, as one whose
#: caller pauses does: else the writers it folded for send their next intents and wait out
#: their patience (``MAX_WAITS`` rounds of a root standing still, a second or more) before
#: one of them folds, once for every folder that finishes its burst. Four times: callers
#: that pause at random rarely pause that long
#: (docs/decisions/0046-linger-when-the-caller-is-away.md).
AWAY = 4.0


def lingering(core: Committer, *, away: bool = False) -> bool:
    """Whether this process should go on folding for others now that its batch is done:
    its swap carried other processes' intents, and no commit of its own is queued (and its
    caller pauses between commits, or, ``away``, has not come back when it usually would)."""
    return core.schedule.linger(away=away)


def away_after(core: Committer) -> float | None:
    """For a process that does not linger now (:func:`lingering` said so): how long after
    its batch ended its caller, if it has not made its next commit by then, is away
    (:data:`AWAY`); then :func:`lingering` is asked again with ``away``. None: it would not
    linger even if its caller were away. A caller committing back to back is back within
    that, and folds again itself."""
    schedule = core.schedule
    if not schedule.linger(away=True):
        return None
    hints = schedule.hints
    return max(AWAY * (hints.pause or 0.0), hints.round_seconds)


def linger(core: Committer) -> Steps:
    """Fold other processes' intents for up to ``linger`` more rounds, from the root this
    process just swapped in. Stops at the first round that finds nothing to apply, when a
    commit of this process is queued (its batch folds next), or at the first lost race or
    failure (then the waiters' rules take over, as after any folder's last swap)."""
    schedule = core.schedule
    swapped = core.now = yield Now()
    while True:
        pause = schedule.linger_pause(swapped, core.now)
        if pause is None:
            return
        yield Sleep(max(pause, core.load.hold() if core.load is not None else 0.0))
        known = core.known
        if known is None or not schedule.still_folding():
            return
        doc, etag = known
        batch = Batch(pending=[], size=0, attempts=1)
        start = core.now = yield Now()
        batch.elapsed = yield Now(monotonic=True)
        schedule.round_starts(start)
        try:
            found = yield from fold(core, doc, batch, start)
            if found.pending:
                yield from apply_and_swap(core, batch, doc, etag, found=found, start=start)
                swapped = core.now
        except (Retry, Redrive, StorageError, RegistryCorruptError):
            # Retry covers a Wait. RegistryCorruptError: the root we swapped in is old by now
            # and vacuum took what it refers to (or the lake is damaged: our next commit
            # will say so).
            schedule.stopped_folding()
            return
