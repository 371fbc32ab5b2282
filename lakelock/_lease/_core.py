"""The pure core of leases: the document, its parser, and every state transition.

Nothing here performs I/O or reads a clock: each decision takes the server-time bounds
(:class:`~lakelock._clock.TimeBounds`) it is made at. ``_shell`` wraps these functions in
S3 calls. The owner, the expiry predicates and the document reader are shared with the lock
tables of the distributed path lock (:mod:`lakelock._holding`).

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from lakelock._clock import TimeBounds
from lakelock._holding import DocumentReader, Lapsed, Owner, holder_valid, provably_expired

__all__ = [
    "LeaseDoc",
    "Take",
    "Wait",
    "decide_acquire",
    "decide_release",
    "decide_renew",
    "dump_lease",
    "initial_lease",
    "parse_lease",
]

LEASE_KIND: Final = "lakelock.lease"

# --- documents ---------------------------------------------------------------------------------


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


def initial_lease(name: str) -> LeaseDoc:
    """The document a new lease name starts as: token 0, no owner, released."""
    return LeaseDoc(name, 0, None, 0.0, 0.0, 0.0, 0.0)


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
    return DocumentReader.dump(
        LEASE_KIND,
        {
            "name": doc.name,
            "token": doc.token,
            "owner": None if doc.owner is None else doc.owner.to_json(),
            "acquired_at": doc.acquired_at,
            "renewed_at": doc.renewed_at,
            "expires_at": doc.expires_at,
            "ttl": doc.ttl,
        },
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
