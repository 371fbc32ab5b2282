"""What the sans-I/O commit core asks for, and what it is handed back.

The core (:mod:`lakelock._registry._core`) performs no I/O: it is a generator that *yields*
a request and is *sent* the answer (h11's pattern, written as a coroutine). A failed
request is *thrown* into it as the same :mod:`lakelock.errors` exception the
:class:`~lakelock._s3.ObjectStore` raises (``PreconditionFailedError`` for a 412,
``ConflictError`` for a 409, ``ThrottledError`` for a 503, ``OutcomeUnknownError`` when the
request may or may not have been applied, ``NotFoundError``, ``AlreadyExistsError``), so the
core reads like ordinary code with ``try``/``except`` around each ``yield``.

Two drivers run it: :mod:`lakelock._registry._core._driver` with a real
:class:`~lakelock._s3.ObjectStore` (threads for :class:`Parallel`), and the deterministic
simulator (:mod:`lakelock.testing.simulate`) against a simulated S3 in virtual time.

=================  ===========================================  ==================================
request            asks                                         answer (``send``)
=================  ===========================================  ==================================
:class:`Get`       the object's body and ETag                   ``ObjectData`` (``_s3/_types.py``)
:class:`Put`       a write: create-only, If-Match, or plain     :class:`~lakelock._s3.PutResult`
:class:`List`      one page of keys after ``start_after``       :class:`Listing`
:class:`Delete`    a (conditional) delete                       ``None``
:class:`Parallel`  several of the above at once                 a tuple: each answer, or the
                                                                exception that request raised
:class:`Ahead`     reads to start now, answered later           ``None`` (at once)
:class:`Sleep`     time to pass (a backoff, a wait)             ``None``
:class:`Now`       this process's clock (seconds since epoch;   ``float``
                   ``monotonic``: a clock no step moves)
=================  ===========================================  ==================================

``retried``: a request the driver may retry itself on a transient failure (409, 503, a lost
answer) within its store's budget — reads and create-only writes of write-once objects,
whose repetition is harmless. The root's requests are not: the core counts and decides every
retry of the compare-and-swap itself.

An :class:`Ahead` read is sent at once and not waited for; the driver keeps its answer for the
next request equal to it (alone or in a :class:`Parallel`), which is then answered by it
instead of being sent again — waiting for it if it is still on its way. A read made ahead
answers what the object (or the listing) was when it was read: only reads of write-once
objects, and listings (every fold's listing is a past view already), are made ahead.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeAlias

from lakelock._registry._objects import Missing
from lakelock._s3._types import ListedObject

__all__ = [
    "Ahead",
    "Delete",
    "Get",
    "List",
    "Listing",
    "Now",
    "Parallel",
    "Put",
    "Request",
    "Sleep",
    "Steps",
    "fetching",
]


@dataclass(frozen=True)
class Get:
    key: str
    retried: bool = True


@dataclass(frozen=True)
class Put:
    """``create``: ``If-None-Match: *``; ``if_match``: replace only that ETag; neither: a
    plain overwrite (never used by the commit core)."""

    key: str
    body: bytes
    create: bool = False
    if_match: str | None = None
    retried: bool = True


@dataclass(frozen=True)
class List:
    """One page (at most ``max_keys``) of the keys under ``prefix`` after ``start_after``,
    in key order."""

    prefix: str
    start_after: str = ""
    max_keys: int = 1000


@dataclass(frozen=True)
class Listing:
    objects: tuple[ListedObject, ...]
    truncated: bool


@dataclass(frozen=True)
class Delete:
    key: str
    if_match: str | None = None


@dataclass(frozen=True)
class Parallel:
    """Requests sent together; the answer is a tuple in the same order, each element the
    request's answer or the exception it raised (a batch never throws as a whole)."""

    requests: tuple[Get | Put | List | Delete, ...]


@dataclass(frozen=True)
class Ahead:
    """Reads the core will ask for soon, sent now and not waited for (answered ``None``);
    the next request equal to one of them, within ``seconds`` of its sending, is answered
    by it (later, it is sent anew). Those not asked for by the next :class:`Ahead` are
    dropped, their answers unread.

    ``read_listed``: for a :class:`List` among them, each key it lists that is not in
    ``read_listed`` is read ahead too (at most ``most``), as soon as the listing comes."""

    requests: tuple[Get | List, ...]
    seconds: float
    read_listed: frozenset[str] | None = None
    most: int = 1000

    def to_read(self, listing: Listing) -> list[str]:
        """The keys ``listing`` (of a :class:`List` among them) found that are read ahead
        in turn, in its order."""
        skip = self.read_listed or frozenset()
        return [o.key for o in listing.objects if o.key not in skip][: self.most]


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Now:
    """The process's wall clock; ``monotonic``: a clock that only measures time passing
    (any origin), which no step of the wall clock moves: what a span is measured by."""

    monotonic: bool = False


Request: TypeAlias = Get | Put | List | Delete | Parallel | Ahead | Sleep | Now

#: A sans-I/O computation: yields requests, is sent their answers, returns a ``T``.
Steps: TypeAlias = Generator[Request, Any, Any]


def fetching(compute: Callable[[], Any], take: Callable[[str, Any], None]) -> Steps:
    """``compute()``, fetching in parallel whatever objects it misses (it is pure: asked
    again once they are known). ``take(key, answer)`` is handed each object fetched, or the
    exception its GET raised, before ``compute`` is asked again; what it raises ends this."""
    while True:
        try:
            return compute()
        except Missing as miss:
            keys = tuple(dict.fromkeys(miss.keys))
        answers = yield Parallel(tuple(Get(k) for k in keys))
        for key, answer in zip(keys, answers, strict=True):
            take(key, answer)
