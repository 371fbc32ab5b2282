"""The pure core of leases: the document, its parser, and every state transition.

Nothing here performs I/O or reads a clock: each decision takes the server-time bounds
(:class:`~lakelock._lease_clock.TimeBounds`) it is made at. ``_lease`` wraps these functions in
S3 calls; the lock tables of ``_dlock_core`` reuse :class:`Owner`, the expiry predicates and the
document reader.

The document (``metastore/leases/<name>.json``)
-----------------------------------------------
::

    {
      "format_version": 1,
      "kind": "lakelock.lease",
      "name": "nightly-compaction",
      "token": 7,                        # fencing token of the current/last holder
      "owner": {"id": "<uuid hex>", "host": "etl-3", "pid": 4242, "label": "compactor"},
      "acquired_at": 1767225600.0,       # server time of the takeover that issued `token`
      "renewed_at": 1767225620.0,        # server time of the last renewal
      "expires_at": 1767225630.0,        # server time; 0 = released
      "ttl": 30.0
    }

A new name starts as the *initial* document: token 0, ``owner`` null, ``expires_at`` 0. The
object is never deleted: deleting it would reset the token.

Transitions
-----------
=============  ==========================================  ==================================
transition     allowed when (``now`` = server-time bounds)  result
=============  ==========================================  ==================================
acquire        released, initial, provably expired          token + 1, new owner,
               (``now.earliest > expires_at + margin``),    ``expires_at = now.latest + ttl``
               or already ours                              (:func:`decide_acquire`)
renew          ours and still valid for us                  ``expires_at`` extended, token kept
               (``now.latest < expires_at - margin``)       (:func:`decide_renew`)
release        ours (valid or not)                          ``expires_at = 0``, token and owner
                                                            kept (:func:`decide_release`)
=============  ==========================================  ==================================

Each result is written with ``If-Match`` on the ETag it was computed from, so two deciders
can never both succeed from the same document. Tokens therefore strictly increase across
holders: every acquire writes ``token + 1`` over the document it read, and renew/release keep
the token of a document that already holds it.

Renewing a lease that lapsed in the holder's own view is refused even if nobody took it over:
a holder's validity is one contiguous interval, ended for good by the first instant it cannot
vouch for.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import orjson

from lakelock import _jsonfields as jsonfields
from lakelock._lease_clock import TimeBounds

__all__ = [
    "FORMAT_VERSION",
    "DocumentReader",
    "Lapsed",
    "LeaseDoc",
    "Owner",
    "Stored",
    "Take",
    "Wait",
    "decide_acquire",
    "decide_release",
    "decide_renew",
    "dump_lease",
    "holder_valid",
    "initial_lease",
    "parse_lease",
    "provably_expired",
]

#: The only document version this code reads or writes.
FORMAT_VERSION: Final = 1
LEASE_KIND: Final = "lakelock.lease"

_DocT = TypeVar("_DocT")
_T = TypeVar("_T")


# --- time predicates ---------------------------------------------------------------------------


def holder_valid(expires_at: float, now: TimeBounds, margin: float) -> bool:
    """The holder's view: it may act as holder only while even the latest possible server
    time is ``margin`` short of expiry."""
    return expires_at > 0 and now.latest < expires_at - margin


def provably_expired(expires_at: float, now: TimeBounds, margin: float) -> bool:
    """Everyone else's view: a holder is gone only once even the earliest possible server
    time is ``margin`` past its expiry (or it released: ``expires_at == 0``)."""
    return expires_at <= 0 or now.earliest > expires_at + margin


# --- documents ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a lease or lock: ``id`` is unique per :class:`~lakelock._lease.Lease` or
    :class:`~lakelock._dlock.DistributedPathLock` object; the rest is for humans."""

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
class LeaseDoc:
    """One lease document, parsed (module docstring has the JSON layout)."""

    name: str
    token: int
    owner: Owner | None
    acquired_at: float
    renewed_at: float
    expires_at: float
    ttl: float

    @property
    def released(self) -> bool:
        """Nobody holds it by intent: released, or never acquired."""
        return self.owner is None or self.expires_at <= 0

    def held_by(self, owner: Owner) -> bool:
        """Whether ``owner`` is the document's holder (valid or not) and has not released."""
        return not self.released and self.owner is not None and self.owner.id == owner.id


@dataclass(frozen=True, slots=True)
class Stored(Generic[_DocT]):
    """A document as read from S3: its key, ETag, and the server's ``Date`` at reading time
    (seconds since the epoch; ``None`` if the store sent none)."""

    key: str
    etag: str
    doc: _DocT
    server_time: float | None


def initial_lease(name: str) -> LeaseDoc:
    """The document a new lease name starts as: token 0, no owner, released."""
    return LeaseDoc(name, 0, None, 0.0, 0.0, 0.0, 0.0)


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


def parse_lease(body: bytes, *, name: str, fail: Callable[[str], Exception]) -> LeaseDoc:
    """The one parser of lease documents; ``fail(reason)`` builds the error raised for a
    document that is not a version-1 lease named ``name``."""
    doc = DocumentReader.load(body, kind=LEASE_KIND, fail=fail)
    if doc.text("name") != name:
        raise fail(f"document names lease {doc.raw['name']!r}, expected {name!r}")
    owner = None if doc.get("owner") is None else doc.owner("owner")
    parsed = LeaseDoc(
        name,
        doc.integer("token"),
        owner,
        doc.number("acquired_at"),
        doc.number("renewed_at"),
        doc.number("expires_at"),
        doc.number("ttl"),
    )
    if parsed.owner is None and (parsed.expires_at > 0 or parsed.token > 0):
        raise fail("a lease with a token or an expiry must name its owner")
    return parsed


def dump_lease(doc: LeaseDoc) -> bytes:
    return orjson.dumps(
        {
            "format_version": FORMAT_VERSION,
            "kind": LEASE_KIND,
            "name": doc.name,
            "token": doc.token,
            "owner": None if doc.owner is None else doc.owner.to_json(),
            "acquired_at": doc.acquired_at,
            "renewed_at": doc.renewed_at,
            "expires_at": doc.expires_at,
            "ttl": doc.ttl,
        }
    )


# --- transitions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Take:
    """Write ``doc`` (``If-Match`` the document decided on) to become the holder."""

    doc: LeaseDoc


@dataclass(frozen=True, slots=True)
class Wait:
    """Someone else holds the lease: it is free for us once server time is past ``until``
    (unless released earlier)."""

    until: float
    holder: LeaseDoc


@dataclass(frozen=True, slots=True)
class Lapsed:
    """The holder can no longer vouch for its lease: ``reason`` says why."""

    reason: str


def decide_acquire(
    doc: LeaseDoc, now: TimeBounds, owner: Owner, *, ttl: float, margin: float
) -> Take | Wait:
    """Acquire or wait: take over a free, expired or own lease with the next token.

    A missing object is decided as :func:`initial_lease`. Taking over our own unexpired lease
    (an earlier acquire whose outcome we lost track of) also bumps the token: a higher token
    for the same owner invalidates nothing it still does."""
    if (
        not doc.released
        and doc.owner is not None
        and doc.owner.id != owner.id
        and not provably_expired(doc.expires_at, now, margin)
    ):
        return Wait(doc.expires_at + margin, doc)
    latest = now.latest
    return Take(LeaseDoc(doc.name, doc.token + 1, owner, latest, latest, latest + ttl, ttl))


def decide_renew(
    doc: LeaseDoc, now: TimeBounds, owner: Owner, *, ttl: float, margin: float
) -> LeaseDoc | Lapsed:
    """Extend our own, still valid lease; never shortens it, never changes the token."""
    if doc.owner is None or doc.owner.id != owner.id:
        return Lapsed(f"taken over by {doc.owner} with token {doc.token}")
    if doc.expires_at <= 0:
        return Lapsed("released")
    if not holder_valid(doc.expires_at, now, margin):
        return Lapsed(
            f"expired: server time may be {now.latest:.3f}, lease valid until "
            f"{doc.expires_at - margin:.3f} (expires_at {doc.expires_at:.3f} - margin {margin})"
        )
    expires_at = max(doc.expires_at, now.latest + ttl)
    return dataclasses.replace(doc, renewed_at=now.latest, expires_at=expires_at, ttl=ttl)


def decide_release(doc: LeaseDoc, owner: Owner) -> LeaseDoc | None:
    """Our lease with ``expires_at = 0`` (token and owner kept), or ``None`` if it is not ours
    (taken over, or already released): then there is nothing to write."""
    if not doc.held_by(owner):
        return None
    return dataclasses.replace(doc, expires_at=0.0)
