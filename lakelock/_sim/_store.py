"""The simulated S3 bucket: its objects and what each request does to them, decided at the
instant the request takes effect (the event loop, :mod:`._loop`, chooses that instant inside
the request's latency and delivers the answer at its end).

Semantics the commit protocol relies on, as S3 has them:

- strong read-after-write: a GET or LIST that takes effect after a write sees it;
- ``If-None-Match: *`` on an existing key, ``If-Match`` on another ETag: 412
  (:class:`AlreadyExistsError`, :class:`PreconditionFailedError`); ``If-Match`` on a missing
  key: :class:`NotFoundError`;
- two conditional writes to one key in flight at once: the later one to take effect may get
  409 ConditionalRequestConflict (:class:`ConflictError`, nothing applied);
- conditional writes to one key beyond its rate (``Profile.cas_rate``): 503 SlowDown
  (:class:`ThrottledError`, nothing applied);
- LIST in key order, in pages of at most ``max_keys`` after ``start_after``; LastModified and
  the ``Date`` header are the server's clock truncated to the second; ETags are the MD5 of the
  body, quoted.

Every successful write of a ``tracked`` key is kept (``history``): the checker reads each
version of the root that ever existed. When each key was first written is kept too
(``created``, virtual seconds): the checker holds an intent rejected as expired to its age.
Every object deleted is kept (``deleted``, in order, and the last body of each key in
``graveyard``): the checker judges each deletion (vacuum's) and still reads the versions
vacuum removed.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from random import Random

from lakelock._registry._core._requests import Listing
from lakelock._s3._types import WRITE_ID_KEY, ListedObject, ObjectData, PutResult
from lakelock._sim._latency import Profile
from lakelock.errors import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
    ThrottledError,
)

__all__ = ["BUCKET", "EPOCH", "SimS3", "StoredObject"]

BUCKET = "simulated"
#: Virtual time 0 is this server time (2026-01-01T00:00:00Z).
EPOCH = 1_767_225_600.0


@dataclass(frozen=True, slots=True)
class StoredObject:
    body: bytes
    etag: str
    modified: float  # server seconds, whole
    write_id: str
    listed: ListedObject  # how a LIST shows it (made once: a listing is the hot path)


class SimS3:
    """One bucket in memory. Methods take ``now`` (virtual seconds) and apply at once; they
    are called by the event loop at the instant a request takes effect."""

    def __init__(
        self,
        profile: Profile,
        rng: Random,
        *,
        tracked: frozenset[str] = frozenset(),
        conflict_share: float = 0.5,
        ignores_start_after: bool = False,
        resolution: float = 1.0,
    ) -> None:
        self.profile = profile
        #: The server clock's resolution (``Date``, ``LastModified``): S3's one second, or
        #: finer where a run compresses the windows it is measured against.
        self.resolution = resolution
        #: Every LIST starts at its prefix, as on a store without ``StartAfter`` (S3 Express
        #: One Zone's directory buckets): what lakelock must not take on the store's word.
        self.ignores_start_after = ignores_start_after
        self._rng = rng
        self.objects: dict[str, StoredObject] = {}
        #: The keys, sorted, in groups by their first two segments (:func:`_group`): a new
        #: key goes into its group's list (one sorted list of every key moved half of it on
        #: each insert: a long run writes hundreds of thousands); ``_all``: every key,
        #: sorted, made when a listing needs it (its prefix spans groups).
        self._groups: dict[str, list[str]] = {}
        self._all: list[str] | None = None
        self.tracked = tracked
        self.history: dict[str, list[tuple[float, bytes]]] = {k: [] for k in tracked}
        #: When each key's first PUT took effect (virtual seconds; kept if it is deleted).
        self.created: dict[str, float] = {}
        self.conflict_share = conflict_share
        self._last_conditional: dict[str, float] = {}
        #: Keys with a write in flight that lands later, and until when (:meth:`in_flight`).
        self._flying: dict[str, float] = {}
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._writes = 0
        self._stamps: dict[float, datetime] = {}
        self.throttled = 0
        self.conflicts = 0
        #: Every deletion: (virtual time, key, the object deleted).
        self.deleted: list[tuple[float, str, StoredObject]] = []
        #: Which process made each deletion of ``deleted``, and when it sent the request
        #: (``None``: unknown).
        self.deleted_by: list[tuple[str, float] | None] = []
        self.graveyard: dict[str, StoredObject] = {}
        #: When each deleted key was written again (virtual times).
        self.recreated: dict[str, list[float]] = {}

    # -- time ---------------------------------------------------------------------------------

    def server_seconds(self, now: float) -> float:
        """The server clock at virtual time ``now``, rounded down to its resolution."""
        if self.resolution == 1.0:
            return float(int(EPOCH + now))
        return math.floor((EPOCH + now) / self.resolution) * self.resolution

    def stamp(self, now: float) -> datetime:
        return self._datetime(self.server_seconds(now))

    def _datetime(self, seconds: float) -> datetime:
        found = self._stamps.get(seconds)
        if found is None:
            found = self._stamps[seconds] = datetime.fromtimestamp(seconds, UTC)
        return found

    # -- requests -----------------------------------------------------------------------------

    def get(self, key: str, now: float) -> ObjectData:
        found = self.objects.get(key)
        if found is None:
            raise NotFoundError(
                f"GetObject {key!r}: NoSuchKey",
                bucket=BUCKET,
                key=key,
                operation="GetObject",
                status=404,
                code="NoSuchKey",
            )
        return ObjectData(
            key=key,
            etag=found.etag,
            size=len(found.body),
            metadata={WRITE_ID_KEY: found.write_id},
            last_modified=self._datetime(found.modified),
            server_time=self.stamp(now),
            body=found.body,
        )

    def put(
        self,
        key: str,
        body: bytes,
        now: float,
        *,
        create: bool = False,
        if_match: str | None = None,
        started: float | None = None,
    ) -> PutResult:
        """Apply a PUT; ``started``: when the request was sent (for 409 on overlap)."""
        conditional = create or if_match is not None
        if conditional:
            self._admit(key, now, started)
        current = self.objects.get(key)
        if create and current is not None:
            raise AlreadyExistsError(
                f"PutObject {key!r}: PreconditionFailed (exists)",
                bucket=BUCKET,
                key=key,
                operation="PutObject",
                status=412,
                code="PreconditionFailed",
                actual_etag=current.etag,
            )
        if if_match is not None:
            _require_etag(key, current, if_match, "PutObject")
        self._writes += 1
        etag = f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"'
        write_id = f"w{self._writes}"
        if current is None:
            bisect.insort(self._groups.setdefault(_group(key), []), key)
            self._all = None
            self.created.setdefault(key, now)
            if key in self.graveyard:
                self.recreated.setdefault(key, []).append(now)
        modified = self.server_seconds(now)
        listed = ListedObject(key, etag, len(body), self._datetime(modified))
        self.objects[key] = StoredObject(body, etag, modified, write_id, listed)
        if key in self.tracked:
            self.history[key].append((now, body))
        return PutResult(key, etag, write_id, len(body), server_time=self.stamp(now))

    def list(self, prefix: str, start_after: str, max_keys: int, now: float) -> Listing:
        keys = self._sorted(prefix)
        if self.ignores_start_after:
            start_after = ""
        start = max(prefix, start_after)
        at = (
            bisect.bisect_right(keys, start)
            if start == start_after
            else bisect.bisect_left(keys, start)
        )
        # The keys from ``at`` that start with ``prefix`` end before the first key past it.
        end = bisect.bisect_left(keys, _past(prefix), at) if prefix else len(keys)
        stop = min(end, at + max(1, min(max_keys, 1000)))
        found = tuple(map(_LISTED, map(self.objects.__getitem__, keys[at:stop])))
        return Listing(found, truncated=end > stop)

    def delete(
        self,
        key: str,
        now: float,
        *,
        if_match: str | None = None,
        by: tuple[str, float] | None = None,
    ) -> None:
        current = self.objects.get(key)
        if if_match is not None:
            _require_etag(key, current, if_match, "DeleteObject")
        if current is None:
            return  # S3 answers 204 for a missing key
        del self.objects[key]
        group = self._groups[_group(key)]
        del group[bisect.bisect_left(group, key)]
        self._all = None
        self.deleted.append((now, key, current))
        self.deleted_by.append(by)
        self.graveyard[key] = current

    def _sorted(self, prefix: str) -> Sequence[str]:
        """Sorted keys among which are all those starting with ``prefix`` (its group's, or
        every key)."""
        if prefix.count("/") >= 2:
            return self._groups.get(_group(prefix), [])
        if self._all is None:
            self._all = sorted(key for group in self._groups.values() for key in group)
        return self._all

    # -- limits -------------------------------------------------------------------------------

    def in_flight(self, key: str, *, until: float) -> None:
        """A write to ``key`` is in flight at S3 until ``until`` (virtual seconds): one whose
        client gave up on it (a timeout) and that lands then."""
        self._flying[key] = max(until, self._flying.get(key, until))

    def held(self, key: str, now: float) -> bool:
        """Whether a write to ``key`` is in flight at ``now`` (:meth:`in_flight`): a
        conditional write to it is answered 409 until that one lands."""
        flying = self._flying.get(key)
        return flying is not None and flying > now

    def _admit(self, key: str, now: float, started: float | None) -> None:
        """409 if a write to ``key`` is in flight (one that lands later: :meth:`in_flight`,
        always), or another conditional write to it took effect while this one was in flight
        (S3's ConditionalRequestConflict, for a share of them); 503 past the key's rate of
        conditional writes. Neither applies anything."""
        flying = self._flying.get(key)
        if flying is not None and flying > now:
            self.conflicts += 1
            raise ConflictError(
                f"PutObject {key!r}: ConditionalRequestConflict (a write to it is in flight)",
                bucket=BUCKET,
                key=key,
                operation="PutObject",
                status=409,
                code="ConditionalRequestConflict",
            )
        last = self._last_conditional.get(key)
        self._last_conditional[key] = now
        if (
            started is not None
            and last is not None
            and last > started
            and self._rng.random() < self.conflict_share
        ):
            self.conflicts += 1
            raise ConflictError(
                f"PutObject {key!r}: ConditionalRequestConflict",
                bucket=BUCKET,
                key=key,
                operation="PutObject",
                status=409,
                code="ConditionalRequestConflict",
            )
        rate = self.profile.cas_rate
        if rate is None:
            return
        burst = self.profile.cas_burst
        tokens, at = self._buckets.get(key, (burst, now))
        tokens = min(burst, tokens + (now - at) * rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            self.throttled += 1
            raise ThrottledError(
                f"PutObject {key!r}: SlowDown (conditional writes to one key past {rate:g}/s)",
                bucket=BUCKET,
                key=key,
                operation="PutObject",
                status=503,
                code="SlowDown",
            )
        self._buckets[key] = (tokens - 1.0, now)


#: A stored object's listing entry.
_LISTED = operator.attrgetter("listed")


def _group(key: str) -> str:
    """A key's first two segments (``metastore/intents/``; ``""`` for a key with fewer):
    every key starting with a prefix of two segments or more is in the prefix's group."""
    first = key.find("/")
    second = key.find("/", first + 1) if first >= 0 else -1
    return key[: second + 1] if second >= 0 else ""


def _past(prefix: str) -> str:
    """The least string greater than every string starting with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _require_etag(key: str, current: StoredObject | None, if_match: str, operation: str) -> None:
    """An If-Match request's precondition: 404 on a missing key, 412 on another ETag."""
    if current is None:
        raise NotFoundError(
            f"{operation} {key!r}: NoSuchKey (If-Match)",
            bucket=BUCKET,
            key=key,
            operation=operation,
            status=404,
            code="NoSuchKey",
            expected_etag=if_match,
        )
    if current.etag != if_match:
        raise PreconditionFailedError(
            f"{operation} {key!r}: PreconditionFailed",
            bucket=BUCKET,
            key=key,
            operation=operation,
            status=412,
            code="PreconditionFailed",
            expected_etag=if_match,
            actual_etag=current.etag,
        )
