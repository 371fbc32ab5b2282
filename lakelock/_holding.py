"""What every holder shares: leases (:mod:`lakelock._lease`) and path-lock grants
(:mod:`lakelock._pathlock._distributed`), and the options of the in-process path lock.

Both protocols keep one JSON document per thing held (a lease, a dataset's lock table) and
decide expiry in server time (:mod:`lakelock._clock`). Once each, here:

- the vocabulary of the documents, pure: :class:`Owner`, :class:`Stored`, :class:`Lapsed`, the
  two expiry predicates (:func:`holder_valid` for the holder, :func:`provably_expired` for
  everyone else) and :class:`DocumentReader`, the typed reader both parsers are built on;
- the options: :data:`DEFAULT` ("the value given to the constructor"), the checks of
  ``timeout``, ``ttl``, ``margin`` and ``poll_interval``, and the pause between polls;
- the shell: :class:`Setup` (what a lease or a path lock is made with: terms, owner, the
  shared server clock), :class:`CasDocument` (read a document learning server time, create it
  once, write it by compare-and-swap), :class:`Heartbeat`, :func:`read_stored` (every document
  under a prefix), and :class:`Holding`, the base of ``Lease`` and ``PathLockHandle``: loss
  reported once through ``on_lost``, the heartbeat started and stopped, and the releasing
  ``__exit__``.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import inspect
import logging
import math
import numbers
import os
import socket
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Self, TypeVar

import orjson

from lakelock import _jsonfields as jsonfields
from lakelock._clock import ServerClock, TimeBounds, shared_server_clock
from lakelock._durations import at_most_a_century
from lakelock._names import is_utf8
from lakelock._s3 import IfMatch, ObjectStore
from lakelock.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    LakelockError,
    LeaseError,
    LeaseLostError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
)

__all__ = [
    "DEFAULT",
    "FORMAT_VERSION",
    "MIN_PAUSE",
    "RACED",
    "UNSETTLED",
    "CasDocument",
    "Default",
    "DocumentReader",
    "Heartbeat",
    "Holding",
    "Lapsed",
    "Owner",
    "Setup",
    "Snapshot",
    "Stored",
    "Terms",
    "Unreadable",
    "check_durations",
    "check_timeout",
    "holder_valid",
    "pause_before",
    "provably_expired",
    "read_stored",
]

logger = logging.getLogger("lakelock.holding")

#: The only version of lease and lock-table documents this code reads or writes.
FORMAT_VERSION: Final = 1
#: A compare-and-swap of a lease or lock table that lost to another writer: the document
#: changed (412) or is gone (404) since it was read. Nothing was written: decide again.
RACED: Final = (PreconditionFailedError, NotFoundError)
#: A compare-and-swap whose landing is not known: it raced, or its answer was lost. Resolved
#: by reading the document back (our write id, or our holder, says whether it landed).
UNSETTLED: Final = (*RACED, OutcomeUnknownError)
#: Floor for a wait between attempts, so a wake-up computed as "now" cannot spin.
MIN_PAUSE: Final = 0.001

_DocT = TypeVar("_DocT")
_T = TypeVar("_T")


# --- options -----------------------------------------------------------------------------------


class Default(enum.Enum):
    VALUE = enum.auto()


#: "Use the value given to the constructor."
DEFAULT: Final = Default.VALUE


def _check_seconds(value: object, what: str) -> None:
    """Refuse a number of seconds given as anything but a number (text read from a config
    file or an environment variable, a bool) with the typed error every bad value gets."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise InvalidArgumentError(
            value, f"{what} is a number of seconds, not {type(value).__name__}", what=what
        )


def check_timeout(timeout: float | None) -> float | None:
    """``timeout`` if it is ``None`` (wait forever) or a number of seconds >= 0."""
    if timeout is not None:
        _check_seconds(timeout, "timeout")
    if timeout is not None and not timeout >= 0:
        raise InvalidArgumentError(
            timeout, f"timeout must be None or >= 0 seconds, got {timeout!r}", what="timeout"
        )
    return timeout


def check_durations(ttl: float, margin: float, poll_interval: float) -> None:
    """Refuse what no document can hold or no wait can last: each a finite number of
    seconds (JSON has no infinity, so a lease or lock table written with one could never be
    read again, by anyone), at most :data:`MAX_DURATION`."""
    for what, value in (("ttl", ttl), ("margin", margin), ("poll_interval", poll_interval)):
        _check_seconds(value, what)
        if not math.isfinite(value):
            raise InvalidArgumentError(
                value, f"{what} is a finite number of seconds, got {value!r}", what=what
            )
        # "Until I release it" is a ttl the heartbeat renews, not one that never ends: an
        # expiry in the year 33,000 broke every other process's acquire.
        at_most_a_century(value, what=what)
    if not margin >= 0:
        raise InvalidArgumentError(
            margin, f"margin must be >= 0 seconds, got {margin!r}", what="margin"
        )
    if not ttl > 2 * margin:
        raise InvalidArgumentError(
            ttl,
            f"ttl ({ttl!r}) must exceed twice the margin ({margin!r}): margin is the clock "
            "safety margin, seconds by which a holder stops acting before its ttl runs out and "
            "others wait after it (for clock uncertainty); raise ttl or pass a smaller margin=",
            what="ttl",
        )
    if not poll_interval > 0:
        raise InvalidArgumentError(
            poll_interval,
            f"poll_interval must be > 0 seconds, got {poll_interval!r}",
            what="poll_interval",
        )


@dataclass(frozen=True, slots=True)
class Terms:
    """How a lease or a path-lock grant is held and waited for, checked when made: ``ttl``
    (seconds each acquire or renewal holds it), ``timeout`` (how long acquiring may wait;
    ``None``: forever), ``poll_interval`` (between looks while waiting), ``margin`` (the
    safety margin of :mod:`lakelock._clock`), ``heartbeat`` (renew in the background) and
    ``on_lost`` (told once of a loss)."""

    ttl: float
    timeout: float | None
    poll_interval: float
    margin: float
    heartbeat: bool
    on_lost: Callable[[LeaseLostError], None] | None

    def __post_init__(self) -> None:
        check_durations(self.ttl, self.margin, self.poll_interval)
        check_timeout(self.timeout)

    @property
    def beat(self) -> float:
        """Seconds between renewals by the heartbeat: a third of what a holder can act for."""
        return (self.ttl - self.margin) / 3


def pause_before(wake: float, now: float, poll: float, deadline: float | None) -> float:
    """How long a waiter sleeps: until ``wake`` (local time), at most ``poll``, never past
    ``deadline``, never zero."""
    pause = min(poll, max(wake - now, MIN_PAUSE))
    return pause if deadline is None else min(pause, deadline - now)


# --- expiry ------------------------------------------------------------------------------------


def holder_valid(expires_at: float, now: TimeBounds, margin: float) -> bool:
    """The holder's view: it may act as holder only while even the latest possible server
    time is ``margin`` short of expiry."""
    return expires_at > 0 and now.latest < expires_at - margin


def provably_expired(expires_at: float, now: TimeBounds, margin: float) -> bool:
    """Everyone else's view: a holder is gone only once even the earliest possible server
    time is ``margin`` past its expiry (or it released: ``expires_at == 0``)."""
    return expires_at <= 0 or now.earliest > expires_at + margin


@dataclass(frozen=True, slots=True)
class Lapsed:
    """The holder can no longer vouch for its lease or grant: ``reason`` says why."""

    reason: str


# --- documents ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a lease or lock: ``id`` is unique per :class:`~lakelock._lease.Lease` or
    :class:`~lakelock._pathlock.DistributedPathLock` object; the rest is for humans."""

    id: str
    host: str
    pid: int
    label: str | None = None

    @classmethod
    def current(cls, label: str | None = None) -> Owner:
        """A fresh owner for this process."""
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(), label)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "host": self.host, "pid": self.pid, "label": self.label}

    def __str__(self) -> str:
        label = f" {self.label!r}" if self.label else ""
        return f"{self.host}:{self.pid}{label} ({self.id[:8]})"


@dataclass(frozen=True, slots=True)
class Stored(Generic[_DocT]):
    """A document as read from S3: its key, ETag, and the server's ``Date`` at reading time
    (seconds since the epoch; ``None`` if the store sent none)."""

    key: str
    etag: str
    doc: _DocT
    server_time: float | None


class DocumentReader:
    """Typed field access over one parsed JSON object; every failure goes through ``fail``
    (which raises the caller's error type) so a corrupt document never half-parses."""

    def __init__(self, raw: Mapping[str, Any], fail: Callable[[str], Exception]) -> None:
        self.raw = raw
        self.fail = fail

    @classmethod
    def load(cls, body: bytes, *, kind: str, fail: Callable[[str], Exception]) -> DocumentReader:
        """Parse ``body``; refuse non-objects, other kinds and unknown format versions."""
        try:
            raw = orjson.loads(body)
        except orjson.JSONDecodeError as error:
            raise fail(f"not JSON: {error}") from error
        if not isinstance(raw, dict):
            raise fail(f"expected a JSON object, got {type(raw).__name__}")
        version = raw.get("format_version")
        if version != FORMAT_VERSION or isinstance(version, bool):
            raise fail(
                f"format_version {version!r} is not {FORMAT_VERSION}: written by another "
                "lakelock version; refusing to interpret (or overwrite) it"
            )
        if raw.get("kind") != kind:
            raise fail(f"kind {raw.get('kind')!r} is not {kind!r}")
        return cls(raw, fail)

    @staticmethod
    def dump(kind: str, fields: Mapping[str, Any]) -> bytes:
        """The document of ``kind`` with ``fields``, in the version this code reads."""
        return orjson.dumps({"format_version": FORMAT_VERSION, "kind": kind, **fields})

    def sub(self, raw: object, where: str) -> DocumentReader:
        if not isinstance(raw, dict):
            raise self.fail(f"{where}: expected an object, got {type(raw).__name__}")
        return DocumentReader(raw, self.fail)

    def get(self, key: str) -> object:
        if key not in self.raw:
            raise self.fail(f"missing field {key!r}")
        return self.raw[key]

    def text(self, key: str) -> str:
        return self._checked(jsonfields.text, key)

    def opt_text(self, key: str) -> str | None:
        value = self.raw.get(key)
        return None if value is None else self.text(key)

    def integer(self, key: str, *, minimum: int = 0) -> int:
        # A token is incremented and written back: the shared check keeps room for +1.
        return self._checked(
            lambda value, name: jsonfields.boolean_free_int(value, name, minimum=minimum), key
        )

    def number(self, key: str) -> float:
        value = self._checked(jsonfields.number, key)
        if not math.isfinite(value) or value < 0:
            raise self.fail(f"{key!r} must be finite and >= 0, got {value!r}")
        return value

    def _checked(self, check: Callable[[Any, str], _T], key: str) -> _T:
        """``check`` (from :mod:`lakelock._jsonfields`) on field ``key``, its refusal turned
        into this document's error."""
        try:
            return check(self.get(key), repr(key))
        except ValueError as error:
            raise self.fail(str(error)) from None

    def texts(self, key: str) -> list[str]:
        value = self.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"{key!r} must be a list of strings, got {value!r}")
        return list(value)

    def owner(self, key: str) -> Owner:
        owner = self.sub(self.get(key), key)
        return Owner(
            owner.text("id"), owner.text("host"), owner.integer("pid"), owner.opt_text("label")
        )


# --- the shell: documents on S3 ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot(Generic[_DocT]):
    """A document as just read: the ETag to compare-and-swap on, and the write id the object
    carries (to recognise our own write after a lost acknowledgement)."""

    doc: _DocT
    etag: str
    write_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CasDocument(Generic[_DocT]):
    """One JSON document at ``key``, written only by compare-and-swap and never deleted.

    Every read teaches ``server_clock`` the server's time (the ``Date`` header, bounded by the
    local ``clock`` readings around the request); a store that sends no ``Date`` is refused,
    since expiry cannot be decided without it. ``fail(reason)`` builds the error for a
    document that cannot be parsed or used; ``initial`` is what a first read creates.
    """

    store: ObjectStore
    key: str
    parse: Callable[[bytes], _DocT]
    dump: Callable[[_DocT], bytes]
    initial: _DocT
    server_clock: ServerClock
    clock: Callable[[], float]
    fail: Callable[[str], LeaseError]

    def read(self) -> Snapshot[_DocT] | None:
        """The document, or ``None`` if there is none."""
        sent = self.clock()
        try:
            data = self.store.get(self.key)
        except NotFoundError:
            return None
        self.server_clock.observe(data.server_time, sent, self.clock())
        if not self.server_clock.has_sample:
            raise self.fail("the store sent no Date header; leases and locks need its time")
        return Snapshot(self.parse(data.body), data.etag, data.write_id)

    def read_or_create(self) -> Snapshot[_DocT]:
        """The document, created as ``initial`` (create-only) first if there is none."""
        for _ in range(2):
            snap = self.read()
            if snap is not None:
                return snap
            # Someone else creating it first is just as good.
            with contextlib.suppress(AlreadyExistsError):
                self.store.put(self.key, self.dump(self.initial), mode="create")
        raise self.fail("the document vanished right after it was created")

    def write(self, doc: _DocT, etag: str, write_id: str) -> str:
        """Compare-and-swap ``doc`` over the version ``etag``; the new ETag."""
        return self.store.put(self.key, self.dump(doc), mode=IfMatch(etag), write_id=write_id).etag


@dataclass(frozen=True, slots=True)
class Setup:
    """What a lease or a distributed path lock is set up with, from its constructor's
    arguments: the ``store``, the ``terms``, who we are (``owner``), the store's server clock
    (one per process and store, :func:`~lakelock._clock.shared_server_clock`), and the local
    monotonic ``clock`` and ``sleep`` (injectable for tests)."""

    store: ObjectStore
    terms: Terms
    owner: Owner
    server_clock: ServerClock
    clock: Callable[[], float]
    sleep: Callable[[float], None]

    @classmethod
    def make(
        cls,
        store: ObjectStore,
        terms: Terms,
        owner_label: str | None,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> Setup:
        if owner_label is not None and (
            not isinstance(owner_label, str) or not is_utf8(owner_label)
        ):
            # Written into every document this owner writes, which every process parses:
            # another type there would make the lease or lock table unreadable for good.
            raise InvalidArgumentError(
                owner_label, "an owner label is UTF-8 encodable text, or None", what="owner_label"
            )
        owner = Owner.current(owner_label)
        return cls(store, terms, owner, shared_server_clock(store, clock), clock, sleep)

    def document(
        self,
        key: str,
        *,
        parse: Callable[[bytes], _DocT],
        dump: Callable[[_DocT], bytes],
        initial: _DocT,
        fail: Callable[[str], LeaseError],
    ) -> CasDocument[_DocT]:
        """The document at ``key``, read with this setup's clocks."""
        return CasDocument(
            store=self.store,
            key=key,
            parse=parse,
            dump=dump,
            initial=initial,
            server_clock=self.server_clock,
            clock=self.clock,
            fail=fail,
        )


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A document :func:`read_stored` could not parse: its key and why."""

    key: str
    reason: str


def read_stored(
    store: ObjectStore,
    prefix: str,
    parse: Callable[[str, str, bytes], _DocT],
    *,
    unreadable: list[Unreadable] | None = None,
) -> tuple[Stored[_DocT], ...]:
    """Every ``<prefix><name>.json`` document, parsed by ``parse(name, key, body)``, as
    stored (for ``lakelock locks`` and monitoring). Objects gone since listing are skipped.
    A document ``parse`` refuses (:class:`~lakelock.errors.LeaseError`, or another
    :class:`~lakelock.errors.LakelockError` for a name or path in it) raises, or, given
    ``unreadable``, is added to it and the others are still read."""
    found: list[Stored[_DocT]] = []
    for listed in store.list(prefix):
        name = listed.key[len(prefix) :]
        if not name.endswith(".json") or "/" in name:
            continue
        name = name[: -len(".json")]
        try:
            data = store.get(listed.key)
        except NotFoundError:
            continue
        try:
            doc = parse(name, listed.key, data.body)
        except LakelockError as error:  # LeaseError; InvalidNameError for a path in it
            if unreadable is None:
                raise
            unreadable.append(Unreadable(listed.key, str(error)))
            continue
        server_time = data.server_time.timestamp() if data.server_time else None
        found.append(Stored(listed.key, data.etag, doc, server_time))
    return tuple(found)


class Heartbeat:
    """A daemon thread calling ``renew`` every ``interval`` seconds until stopped.

    ``renew`` is held through a weak reference: a lease or lock dropped without release is
    not kept alive by its heartbeat, it expires like a crashed holder's. The thread stops
    by itself when ``renew`` raises :class:`LeaseLostError`; other lakelock errors (S3
    unavailable, a renewal that kept losing races) are logged and retried at the next beat,
    since ``renew`` itself declares the loss once the lease has lapsed.
    """

    def __init__(
        self,
        renew: Callable[[], object],
        interval: float,
        *,
        name: str,
        first: float | None = None,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"heartbeat interval must be > 0, got {interval!r}")
        self._renew: Callable[[], Callable[[], object] | None]
        if inspect.ismethod(renew):
            self._renew = weakref.WeakMethod(renew)
        else:
            self._renew = lambda: renew
        self.interval = interval
        #: Seconds before the first renewal (``None``: ``interval``): less when the holding
        #: was written a while before the heartbeat starts.
        self.first = interval if first is None else max(0.0, min(first, interval))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.beats = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and wait for the thread (unless called from it, e.g. by ``on_lost``)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        wait = self.first
        while not self._stop.wait(wait):
            wait = self.interval
            renew = self._renew()
            if renew is None:
                return  # the holder object is gone: let its lease expire
            try:
                renew()
            except LeaseLostError:
                return
            except LakelockError:
                logger.warning("heartbeat renewal failed; retrying next beat", exc_info=True)
                continue
            finally:
                del renew
            self.beats += 1


# --- the shell: a holder -----------------------------------------------------------------------


class Holding(abc.ABC):
    """The base of a lease and of a path-lock handle: something acquired, renewed, checked
    and released, whose loss is reported three ways (``check``/``renew`` raise
    :class:`LeaseLostError`; ``on_lost`` is called once; leaving ``with`` raises).

    ``what`` names it in messages (``"lease 'x'"``). Subclasses guard their state with
    ``_mutex`` (re-entrant: ``check`` runs inside ``renew``).
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._mutex = threading.RLock()
        self._notified = False
        self._heartbeat: Heartbeat | None = None

    @abc.abstractmethod
    def acquire(self) -> Self: ...

    @abc.abstractmethod
    def check(self) -> object:
        """Raise :class:`LeaseLostError` if lost or lapsed, :class:`LeaseError` if not
        held."""

    @abc.abstractmethod
    def renew(self) -> None: ...

    @abc.abstractmethod
    def release(self) -> None: ...

    @abc.abstractmethod
    def _on_lost(self) -> Callable[[LeaseLostError], None] | None:
        """The callback to tell of a loss."""

    @property
    def held(self) -> bool:
        """Whether it is held and still valid by our clock (no I/O)."""
        try:
            self.check()
        except LeaseError:
            return False
        return True

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        """Always release; if the hold was lost while the block ran and no other exception is
        leaving it, raise :class:`LeaseLostError`."""
        lost: LeaseLostError | None = None
        try:
            self.check()
        except LeaseLostError as error:
            lost = error
        except LeaseError:
            pass  # not held (never acquired, or already released): nothing was lost
        self.release()
        if lost is not None and exc_type is None:
            raise LeaseLostError(
                f"{self.what} was lost while held: {lost}", name=lost.name, token=lost.token
            ) from lost

    @contextlib.contextmanager
    def _telling_loss(self) -> Iterator[None]:
        """Run under ``_mutex``; a :class:`LeaseLostError` leaving it is told to ``on_lost``
        (once, outside the mutex) on its way out."""
        try:
            with self._mutex:
                yield
        except LeaseLostError as error:
            self._notify(error)
            raise

    def _notify(self, error: LeaseLostError) -> None:
        with self._mutex:
            callback = self._on_lost()
            if self._notified or callback is None:
                return
            self._notified = True
        try:
            callback(error)
        except Exception:
            logger.exception("on_lost callback of %s failed", self.what)

    def _start_heartbeat(self, interval: float, *, name: str, first: float | None = None) -> None:
        beat = Heartbeat(self.renew, interval, name=name, first=first)
        with self._mutex:
            previous, self._heartbeat = self._heartbeat, beat
        if previous is not None:
            previous.stop()
        beat.start()

    def _stop_heartbeat(self) -> None:
        with self._mutex:
            beat, self._heartbeat = self._heartbeat, None
        if beat is not None:
            beat.stop()
