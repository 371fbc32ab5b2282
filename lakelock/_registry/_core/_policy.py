"""The commit core's knobs: :class:`FoldPolicy`, what the scheduler's rules read.

Every knob of group commit across processes is a field of :class:`FoldPolicy`, with the reason
it exists; its value's evidence is a decision record (docs/decisions/README.md maps each knob
to its own). The rules that read them are :mod:`._schedule`'s, and every answer they give goes
through :func:`advise`, which turns any exception into the safe default (fold now, do not
wait): nothing here can raise into a commit, and nothing here decides who applies an intent —
:mod:`._decide` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["FoldPolicy", "advise"]

log = logging.getLogger("lakelock.registry")

_T = TypeVar("_T")


@dataclass(frozen=True)
class FoldPolicy:
    """The tuning knobs of the commit loop's scheduling (docs/FORMAT.md, "Scheduling"):
    what the code cannot answer for every lake. A mechanism that is worth keeping but not
    worth tuning is a named constant of :mod:`._schedule` instead
    (docs/decisions/0035-fewer-knobs.md).

    Units: seconds, or *rounds* (what one fold-and-swap takes here, learnt as it goes). Each
    knob's default, and the measurements that set it, are in docs/decisions/ (its README
    maps every knob to its record).
    """

    #: Most intents of others one fold reads and applies (oldest first). Bounds a swap's
    #: bytes and the GETs one committer pays for others; with a swap every few tenths of a
    #: second at scale it bounds commits/s too, so it is set for a thousand writers
    #: (docs/decisions/0016-max-fold.md).
    max_fold: int = 512
    #: A committer lists at least this often even when it believes it is alone, so a
    #: crashed writer's intent is applied within about a second by whoever commits next.
    fold_interval: float = 1.0
    #: A waiter left behind by a swap lists only once the root stood still ``stagger`` times
    #: as long as its intent was made after the last swap's newest (one to two rounds): the
    #: oldest lists first and folds the others (docs/decisions/0007-stagger.md).
    stagger: float = 2.0
    #: While it waits for the root to stand still, a waiter looks this often (rounds): a
    #: folder at work applies its intent in its next swap. Timing looks on the swaps seen
    #: instead was tried and lost commits/s (docs/decisions/0020-timed-looks.md).
    look: float = 1 / 3
    #: A swap leaves the watermark this long (or two rounds) behind what it listed, so
    #: intents whose PUT was still landing are the next fold's, not left to their writers
    #: (docs/decisions/0011-nobody-races-the-folder.md).
    watermark_lag: float = 1.0
    #: After a swap that carried other processes' intents, the folder goes on folding (a
    #: LIST every ``look`` of a round, a swap whenever others' intents are pending) until
    #: this many rounds pass without one, or a commit of its own is queued: the next fold
    #: starts as soon as the writers its swap settled send their next intents, instead of
    #: after their stagger, and a folder that stops committing hands over without a stall.
    #: In production a daemon thread does it after ``commit()`` returns
    #: (``CommitQueue``): the process makes S3 requests after the call returned (0: never,
    #: and no fold is read ahead either: ``Scheduler.read_ahead``).
    #: Only a process whose caller pauses between commits lingers (``_schedule.LINGER_AFTER``)
    #: (docs/decisions/0019-linger.md).
    linger: int = 2
    #: A read or small create (the intents a fold reads, the objects its snapshot writes, a
    #: commit's intent and data file) still unanswered after this many times the median of
    #: the process's recent ones of its kind is sent again, and the first success wins
    #: (``_driver.Hedging``); 0: never. A batch waits for its slowest request, and at
    #: hundreds of writers a fold reads a hundred intents or more
    #: (docs/decisions/0014-hedged-requests.md).
    hedge: float = 2.0
    #: A folder reads its next fold ahead: as soon as its swap (carrying others' intents)
    #: lands it lists the intents the new root leaves pending, and reads those it has not
    #: parsed, while its caller goes on (``Ahead``); its next fold, within a round, finds
    #: them answered instead of listing and reading then (docs/decisions/0017-read-ahead.md).
    read_ahead: bool = True

    def __post_init__(self) -> None:
        if self.read_ahead not in (0, 1):  # 0 and 1 from a command line
            raise ValueError(f"read_ahead must be true or false, got {self.read_ahead!r}")
        object.__setattr__(self, "read_ahead", bool(self.read_ahead))
        counts = ("max_fold", "linger")
        for name in counts:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
        if min(self.max_fold, self.linger) < 0:
            raise ValueError("max_fold and linger must be >= 0")
        durations = (self.fold_interval, self.stagger, self.watermark_lag)
        if min(durations) < 0:
            raise ValueError("durations and fractions must be >= 0")
        if self.hedge != 0 and not self.hedge > 1:
            raise ValueError(f"hedge must be 0 (never) or > 1, got {self.hedge!r}")
        if not 0 < self.look <= 1:
            raise ValueError("look must be in (0, 1]")


def advise(what: Callable[[], _T], default: _T) -> _T:
    """The policy's answer, or ``default`` if computing it raised: a policy bug costs
    liveness (a fold sooner than needed), never a commit."""
    try:
        return what()
    except Exception:
        log.exception("commit scheduling advice failed; folding now instead")
        return default
