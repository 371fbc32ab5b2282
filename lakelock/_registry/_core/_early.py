"""Reads made ahead (:class:`~._requests.Ahead`), sans-I/O: which reads a process keeps, for
how long, which request each answers, and what a listing made ahead reads in turn
(docs/FORMAT.md, "Scheduling" 8).

The driver (:mod:`._driver`) keeps each read's future here, the simulator
(:mod:`lakelock._sim._loop`) its simulated answer: the same decisions, in real or virtual
time."""

from __future__ import annotations

from typing import Generic, TypeVar

from lakelock._registry._core._requests import Ahead, Get, List, Listing

__all__ = ["ReadsAhead"]

_H = TypeVar("_H")


class ReadsAhead(Generic[_H]):
    """The reads one process made ahead and has not been asked for yet, each with its
    handle (``_H``: how its sender finds the answer) and when it was sent. Each
    :class:`Ahead` replaces the reads made before it (those still in flight run on, their
    answers unread); a read answers the next equal request once, within the window the
    :class:`Ahead` gave (later, that request is sent anew). Not thread-safe: the driver
    holds its lock around each call."""

    def __init__(self) -> None:
        self._kept: dict[Get | List, tuple[_H, float]] = {}
        self._until = 0.0
        #: Which :class:`Ahead` is current: a listing of an earlier one reads nothing more.
        self.generation = 0

    def begin(self, ahead: Ahead, now: float) -> list[Get | List]:
        """``ahead`` made at ``now``: the reads to send (each once, in the core's order),
        each to be :meth:`keep`-ed; those made before are dropped."""
        self.generation += 1
        self._kept = {}
        self._until = now + ahead.seconds
        return list(dict.fromkeys(ahead.requests))

    def keep(self, request: Get | List, handle: _H, sent: float, generation: int) -> bool:
        """``request``, sent at ``sent`` by the :class:`Ahead` of ``generation``, answers the
        next equal request; False (not kept) if a later :class:`Ahead` replaced that one."""
        if generation != self.generation:
            return False
        self._kept[request] = (handle, sent)
        return True

    def listed(
        self, ahead: Ahead, request: Get | List, listing: Listing, generation: int
    ) -> list[Get]:
        """``request`` of ``ahead`` (of ``generation``) answered ``listing``: the reads of the
        keys it found to make ahead in turn (:meth:`Ahead.to_read`), each to be kept; none
        if it is no listing that reads on, or a later :class:`Ahead` replaced it."""
        if (
            generation != self.generation
            or ahead.read_listed is None
            or not isinstance(request, List)
        ):
            return []
        return [Get(key) for key in ahead.to_read(listing)]

    def claim(self, request: object, now: float) -> tuple[_H, float] | None:
        """The read made ahead that answers ``request`` at ``now`` (taken: it answers once),
        with when it was sent; None if there is none, or it is too old."""
        if not self._kept or (type(request) is not Get and type(request) is not List):
            return None
        kept = self._kept.pop(request, None)
        if kept is not None and now > self._until:
            return None  # too old to answer for now
        return kept
