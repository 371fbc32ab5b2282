"""A folder's next fold, read ahead (``FoldPolicy.read_ahead``,
docs/decisions/0017-read-ahead.md).

As soon as a folder's swap lands, it lists the intents the new root leaves pending and reads
those it has not parsed, while its caller goes on (an :class:`~._requests.Ahead` request: the
driver sends it and keeps the answers). Its next fold, within a round, makes the same first
LIST and the same GETs, and finds them answered instead of waiting for them. Whether and for
how long is the scheduler's (:meth:`._schedule.Scheduler.read_ahead`); what is read is this
module's, and it must be exactly what the next fold asks for: a read made ahead answers only
a request equal to it.
"""

from __future__ import annotations

from collections.abc import Iterable

from lakelock._registry._core._io import listing
from lakelock._registry._core._requests import Ahead, List
from lakelock._registry._document import RegistryDoc

__all__ = ["first_listing", "next_fold"]


def first_listing(doc: RegistryDoc, max_fold: int) -> List:
    """The first LIST of a fold from ``doc``, as :func:`._fold.fold` makes it."""
    return listing(doc.watermark, max_fold, len({f.key for f in doc.fates}))


def next_fold(doc: RegistryDoc, *, known: Iterable[str], max_fold: int, window: float) -> Ahead:
    """The next fold from ``doc``, read ahead: its first LIST, and the intents it finds that
    ``doc`` leaves undecided and are not ``known`` (this process's own, and those it has
    parsed already), at most ``max_fold``; the driver keeps the answers for ``window``
    seconds."""
    skip = frozenset({f.key for f in doc.fates} | set(known))
    return Ahead((first_listing(doc, max_fold),), window, read_listed=skip, most=max_fold)
