"""``Lease``: a named, fenced lease over one S3 object, for leader election across machines.

```python
lease = lake.lease("nightly-compaction", ttl=30)      # renewed by a heartbeat
with lease:                                  # acquire (waits), then release on exit
    lake.append("sales", table, partition_by=["year", "month"], fence=lease.fence)
```

On S3
-----
One JSON object per lease at ``metastore/leases/<name>.json`` (layout in
:mod:`lakelock._lease._core`). Every write is conditional: the first use of a name creates the
*initial* document (token 0, released) with ``If-None-Match: *``; acquire, renew and release
are compare-and-swaps (``If-Match``) on the ETag the decision was made from. The object is
never deleted (that would reset the fencing token). Every write carries a write id in its
object metadata (the adapter's ``lakelock-write-id``).

Protocol
--------
- **acquire**: GET (learning server time from ``Date``) → :func:`decide_acquire` → CAS with
  ``token + 1``. A 412 means another process won that race: read again. While someone else
  holds it, poll every ``poll_interval`` seconds (sooner if the holder's expiry comes first)
  until ``timeout``, then :class:`~lakelock.errors.LockTimeout`. Once the CAS landed, the
  takeover is recorded in the lake's registry (``takeovers``, below) before ``acquire``
  returns.
- **the takeover's record**: a lease made by ``Lake.lease`` has ``takeovers``, the lake's
  registry: every acquisition (each raises the token) commits the new fence there, a commit
  that names no dataset (FORMAT.md, "Lease takeovers"), so that the registry refuses the
  previous holder's token from then on, not only from the new holder's first commit. One
  commit per acquisition; renewals and releases commit nothing. A record that fails (its
  budget ran out, its outcome is unknown, a higher token is recorded already:
  :class:`~lakelock.errors.StaleFenceError`) fails the acquisition with that error: the
  lease document is released again (token kept), so the next acquirer goes on with a higher
  token at once. A lease made without ``takeovers`` (``Lease(store, name)``) records
  nothing: its token reaches the registry with the first commit that carries it, so until
  then a holder paused past the takeover can still commit under the old one.
- **renew**: CAS with the ETag of our last write (no GET in the common case). A 412 or an
  unknown outcome is resolved by reading back: our write id → renewed; still our document
  (our write did not land) → try again; anything else → :class:`LeaseLostError`.
- **release**: CAS with ``expires_at = 0``, token and owner kept; resolved the same way. A
  lease that was taken over needs no release.
- **Lost acknowledgements** on all three are resolved by reading the object back and comparing
  its write id with the one just sent (the adapter does this first; the lease repeats it with a
  GET when the adapter could only answer "unknown").

Time model and safety margin
----------------------------
Expiry instants are server time (S3's ``Date`` header), bounded through the local monotonic
clock by :class:`~lakelock._clock.ServerClock`; see that module for the model. The holder
treats its lease as lost ``margin`` seconds before ``expires_at`` by its latest estimate of
server time; others treat it as free only ``margin`` seconds after ``expires_at`` by their
earliest estimate. With ``margin=1`` (the default) and ``ttl=30`` a holder can act for about
29 s after each renewal, and a crashed holder blocks others for at most
``ttl + margin`` plus the widths of the holder's and the waiter's server-time bounds (each at
most 1 s + a round trip, usually far less) plus one ``poll_interval``.

Loss is reported three ways: :meth:`Lease.renew`, :meth:`Lease.check` and :attr:`Lease.fence`
raise :class:`LeaseLostError`; ``on_lost`` is called once (from the heartbeat thread if that is
where it was noticed); and leaving a ``with`` block whose lease was lost raises
:class:`LeaseLostError` unless another exception is already propagating.

Heartbeat: by default (``heartbeat=False`` to renew by hand) a daemon thread renews every
``(ttl - margin) / 3`` seconds (real time, whatever ``clock`` is) from acquire until release or
loss. It holds the lease weakly: a ``Lease`` dropped without release (once garbage-collected)
expires like a crashed holder's.

Trust boundary: the lease trusts S3's conditional writes and ``Date`` headers, its own
monotonic clock, and that other processes follow this protocol. It cannot stop a paused
holder from acting after expiry: consumers must check the fencing token (the registry does,
given ``fence=lease.fence``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from typing import Final, Literal, Protocol, Self, TypedDict

from lakelock._clock import DEFAULT_MARGIN
from lakelock._durations import format_instant
from lakelock._fence import Fence
from lakelock._holding import (
    DEFAULT,
    RACED,
    UNSETTLED,
    Default,
    Holding,
    Lapsed,
    Owner,
    Setup,
    Stored,
    Terms,
    Unreadable,
    holder_valid,
    pause_before,
    read_stored,
)
from lakelock._layout import LEASES_PREFIX, lease_key
from lakelock._lease._core import (
    LeaseDoc,
    Wait,
    decide_acquire,
    decide_release,
    decide_renew,
    dump_lease,
    initial_lease,
    parse_lease,
)
from lakelock._names import validate_lease_name
from lakelock._s3 import ObjectStore, new_write_id
from lakelock.errors import (
    LakelockError,
    LeaseError,
    LeaseLostError,
    LockTimeout,
    NotFoundError,
    OutcomeUnknownError,
)

__all__ = ["LEASE_FENCE", "Lease", "LeaseOptions", "Takeovers", "issued_token", "read_leases"]

logger = logging.getLogger("lakelock.lease")

#: A renew or release re-reads and retries at most this often before giving up: more would
#: mean someone else keeps writing a document that names us as holder.
MAX_RESOLVES: Final = 5

#: How a lease's fence names it: ``Fence("lease:<name>", token)``.
LEASE_FENCE: Final = "lease:"

_State = Literal["idle", "held", "lost"]


class LeaseOptions(TypedDict, total=False):
    """The options of a :class:`Lease` (its constructor's keywords, with their defaults
    there), for ``Lake.lease(name, **options)``."""

    ttl: float
    owner_label: str | None
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    margin: float
    timeout: float | None
    poll_interval: float
    heartbeat: bool
    on_lost: Callable[[LeaseLostError], None] | None


class Takeovers(Protocol):
    """Where a lease records each takeover before its holder gets the token (a lake's
    ``registry.internals``; ``Lake.lease`` passes its own): module docstring."""

    def record_takeover(self, fence: Fence) -> None: ...


def _lease_error(name: str, key: str, reason: str) -> LeaseError:
    return LeaseError(f"lease {name!r} at {key!r}: {reason}", name=name)


class Lease(Holding):
    """A named lease with a strictly increasing fencing token (module docstring).

    ``ttl`` is how long each acquire or renewal holds it (seconds); ``timeout`` (``None``:
    wait forever) and ``poll_interval`` are defaults for :meth:`acquire`; ``clock`` (a
    monotonic clock) and ``sleep`` are injectable for tests; ``margin`` is the safety margin
    of :mod:`lakelock._clock`. ``takeovers`` is where each acquisition is recorded before
    it returns (``Lake.lease`` passes its registry; ``None``: nowhere, module docstring).
    Thread-safe; one holder per object at a time, and the object can be acquired again
    after release.
    """

    def __init__(
        self,
        store: ObjectStore,
        name: str,
        *,
        ttl: float = 30.0,
        owner_label: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        margin: float = DEFAULT_MARGIN,
        timeout: float | None = None,
        poll_interval: float = 1.0,
        heartbeat: bool = True,
        on_lost: Callable[[LeaseLostError], None] | None = None,
        takeovers: Takeovers | None = None,
    ) -> None:
        super().__init__(f"lease {name!r}")
        self.takeovers = takeovers
        self.name = name = validate_lease_name(name)
        self.key = lease_key(name, prefix=store.prefix)
        terms = Terms(ttl, timeout, poll_interval, margin, heartbeat, on_lost)
        setup = Setup.make(store, terms, owner_label, clock, sleep)
        self.terms, self.owner, self.server_clock = terms, setup.owner, setup.server_clock
        self._clock, self._sleep = clock, sleep
        self._document = setup.document(
            self.key,
            parse=functools.partial(parse_lease, name=name, fail=self._fail),
            dump=dump_lease,
            initial=initial_lease(name),
            fail=self._fail,
        )
        self._state: _State = "idle"
        self._doc: LeaseDoc | None = None
        self._etag: str | None = None
        self._lost_reason = ""
        self._waiting_for: Owner | None = None
        #: When (``clock``) the current holding's expiry was decided.
        self._decided = 0.0

    def __repr__(self) -> str:
        return f"<Lease {self.name!r} {self._state} token={self.token}>"

    # -- state --------------------------------------------------------------------------------

    @property
    def token(self) -> int | None:
        """The fencing token of our current or last holding (``None`` before the first
        acquire). Does not check validity: use :meth:`check` or :attr:`fence` for that."""
        with self._mutex:
            return None if self._doc is None else self._doc.token

    @property
    def expires_at(self) -> float | None:
        """Server time our current holding expires (``None`` when not held)."""
        with self._mutex:
            return self._doc.expires_at if self._state == "held" and self._doc else None

    def remaining(self) -> float:
        """Seconds (approximately, local) we can still act as holder; 0 when not held."""
        with self._mutex:
            if self._state != "held" or self._doc is None:
                return 0.0
            latest = self.server_clock.now().latest
            return max(0.0, self._doc.expires_at - self.terms.margin - latest)

    def check(self) -> int:
        """Our token if we hold the lease and it is still valid by our clock; otherwise
        :class:`LeaseLostError` (lost or lapsed) or :class:`LeaseError` (not acquired)."""
        with self._telling_loss():
            doc = self._held_doc()
            if not holder_valid(doc.expires_at, self.server_clock.now(), self.terms.margin):
                raise self._lose("lapsed: not renewed in time")
            return doc.token

    @property
    def fence(self) -> Fence:
        """What a registry commit made under this lease carries: ``Fence("lease:<name>",
        token)``. Checks validity first (:meth:`check`)."""
        return Fence(f"{LEASE_FENCE}{self.name}", self.check())

    # -- acquire ------------------------------------------------------------------------------

    def acquire(
        self,
        timeout: float | Default | None = DEFAULT,
        poll_interval: float | Default = DEFAULT,
    ) -> Self:
        """Become the holder, waiting up to ``timeout`` seconds (``None``: forever); raises
        :class:`~lakelock.errors.LockTimeout`. Starts the heartbeat if enabled."""
        terms = self.terms
        if not isinstance(timeout, Default):
            terms = dataclasses.replace(terms, timeout=timeout)
        if not isinstance(poll_interval, Default):
            terms = dataclasses.replace(terms, poll_interval=poll_interval)
        wait, poll = terms.timeout, terms.poll_interval
        with self._mutex:
            if self._state == "held":
                raise LeaseError(
                    f"lease {self.name!r} is already held by this object",
                    name=self.name,
                    token=self.token,
                )
        deadline = None if wait is None else self._clock() + wait
        self._waiting_for = None  # each acquire says whom it waits for
        while True:
            wake = self._attempt()
            if wake is None:
                break
            now = self._clock()
            if deadline is not None and now >= deadline:
                raise LockTimeout(
                    f"lease {self.name!r} not acquired within {wait}s "
                    f"(held by {self._waiting_for})",
                    target=self.name,
                    timeout=wait,
                )
            self._sleep(pause_before(wake, now, poll, deadline))
        self._start()
        return self

    def try_acquire(self) -> bool:
        """One attempt, no waiting: whether we now hold the lease."""
        with self._mutex:
            if self._state == "held":
                return True
        if self._attempt() is not None:
            return False
        self._start()
        return True

    def _attempt(self) -> float | None:
        """One read-decide-write round: ``None`` once held, else the local time to look again."""
        with self._mutex:
            if self._state == "held":
                return None
            snap = self._document.read_or_create()
            decided = self._clock()
            decision = decide_acquire(
                snap.doc,
                self.server_clock.now(),
                self.owner,
                ttl=self.terms.ttl,
                margin=self.terms.margin,
            )
            if isinstance(decision, Wait):
                if decision.holder.owner != self._waiting_for:
                    self._tell_waiting(decision)
                self._waiting_for = decision.holder.owner
                return self.server_clock.local_when_earliest_exceeds(decision.until)
            write_id = new_write_id()
            try:
                etag = self._document.write(decision.doc, snap.etag, write_id)
            except RACED:
                return self._clock()  # another process won this round: look again now
            except OutcomeUnknownError:
                back = self._document.read()
                if back is None or back.write_id != write_id:
                    return self._clock()
                etag = back.etag
            self._record_takeover(decision.doc, etag)
            self._decided = decided
            self._state = "held"
            self._doc, self._etag = decision.doc, etag
            self._lost_reason, self._notified = "", False
            logger.debug("acquired lease %r with token %d", self.name, decision.doc.token)
            return None

    def _record_takeover(self, doc: LeaseDoc, etag: str) -> None:
        """Record the takeover that wrote ``doc`` (at ``etag``) in the registry before we act
        on its token (module docstring); if that fails, release the document again (a
        second takeover, with a higher token, need not wait for our TTL) and raise the
        registry's error: the lease is not ours."""
        if self.takeovers is None:
            return
        try:
            self.takeovers.record_takeover(Fence(f"{LEASE_FENCE}{self.name}", doc.token))
        except BaseException:
            self._give_back(doc, etag)
            raise

    def _give_back(self, doc: LeaseDoc, etag: str) -> None:
        """Release ``doc`` (just written, at ``etag``) as :meth:`release` does; a failure is
        logged: it then expires after its TTL as a crashed holder's would."""
        try:
            self._write_released(doc, etag)
        except LakelockError:
            logger.warning(
                "lease %r: could not release token %d after its takeover failed to be "
                "recorded; it expires after its ttl",
                self.name,
                doc.token,
                exc_info=True,
            )

    def _tell_waiting(self, wait: Wait) -> None:
        """Say (logging: WARNING, so on stderr by default) whom an acquire waits for, who
        waits (several waiters' lines differ), and until when at most: a wait for a lease
        can be long, and should not be silent."""
        holder = wait.holder
        expires = format_instant(holder.expires_at, "%H:%M:%S UTC")
        left = max(0.0, wait.until - self.server_clock.now().earliest)
        logger.warning(
            "lease %r is held by %s (token %d) until %s: %s is waiting up to %.0f s for it "
            "to be released or to expire",
            self.name,
            holder.owner,
            holder.token,
            expires,
            self.owner,
            left,
        )

    def _start(self) -> None:
        """Start the heartbeat: its first renewal a beat after the holding's expiry was
        decided, not after ``acquire`` returns (recording the takeover in the registry, or
        a slow store, may have taken part of the ttl)."""
        if self.terms.heartbeat:
            beat = self.terms.beat
            first = beat - (self._clock() - self._decided)
            self._start_heartbeat(beat, name=f"lakelock-lease-{self.name}", first=first)

    # -- renew --------------------------------------------------------------------------------

    def renew(self) -> None:
        """Extend the lease by ``ttl`` from now. :class:`LeaseLostError` if it was taken over
        or has lapsed by our clock (even if nobody took it yet); other
        :class:`~lakelock.errors.StorageError`\\ s leave the lease as it was."""
        with self._telling_loss():
            self._renew_locked()

    def _renew_locked(self) -> None:
        doc = self._held_doc()
        etag = self._etag
        assert etag is not None
        for _ in range(MAX_RESOLVES):
            decision = decide_renew(
                doc,
                self.server_clock.now(),
                self.owner,
                ttl=self.terms.ttl,
                margin=self.terms.margin,
            )
            if isinstance(decision, Lapsed):
                raise self._lose(decision.reason)
            write_id = new_write_id()
            try:
                etag = self._document.write(decision, etag, write_id)
            except UNSETTLED as error:
                snap = self._document.read()
                if snap is None:
                    raise self._lose("the lease object was deleted") from error
                if snap.write_id == write_id:  # the write landed; its acknowledgement did not
                    self._doc, self._etag = snap.doc, snap.etag
                    return
                if snap.doc.held_by(self.owner) and snap.doc.token == doc.token:
                    doc, etag = snap.doc, snap.etag  # ours still, our write did not land: again
                    self._doc, self._etag = doc, etag
                    continue
                raise self._lose(
                    f"taken over by {snap.doc.owner} with token {snap.doc.token}"
                ) from error
            self._doc, self._etag = decision, etag
            return
        raise LeaseError(
            f"lease {self.name!r}: renewal did not land after {MAX_RESOLVES} attempts",
            name=self.name,
            token=doc.token,
        )

    # -- release ------------------------------------------------------------------------------

    def release(self) -> None:
        """Stop the heartbeat and write ``expires_at = 0`` if the lease is still ours. A no-op
        when not held; never raises for a lease that was lost."""
        self._stop_heartbeat()
        with self._mutex:
            if self._state == "idle":
                return
            try:
                self._release_locked()
            finally:
                self._state = "idle"

    def _release_locked(self) -> None:
        assert self._doc is not None
        assert self._etag is not None
        released = self._write_released(self._doc, self._etag)
        if released is not None:
            self._doc, self._etag = released

    def _write_released(self, doc: LeaseDoc, etag: str) -> tuple[LeaseDoc, str] | None:
        """Write ``doc`` (stored at ``etag``) released if it is still ours: the document and
        ETag written, or ``None`` if there was nothing of ours to release. A swap that raced
        or whose answer was lost is settled by reading the document back (our write id: it
        landed; else decide again on what is there)."""
        for _ in range(MAX_RESOLVES):
            target = decide_release(doc, self.owner)
            if target is None:
                return None
            write_id = new_write_id()
            try:
                return target, self._document.write(target, etag, write_id)
            except UNSETTLED:
                snap = self._document.read()
                if snap is None:
                    return None
                if snap.write_id == write_id:
                    return snap.doc, snap.etag
                doc, etag = snap.doc, snap.etag  # not ours any more, or ours unchanged: decide
        raise LeaseError(
            f"lease {self.name!r}: release did not land after {MAX_RESOLVES} attempts",
            name=self.name,
            token=doc.token,
        )

    # -- plumbing -----------------------------------------------------------------------------

    def _held_doc(self) -> LeaseDoc:
        if self._state == "lost":
            raise LeaseLostError(
                f"lease {self.name!r} was lost: {self._lost_reason}",
                name=self.name,
                token=self.token,
            )
        if self._state != "held" or self._doc is None:
            raise LeaseError(f"lease {self.name!r} is not held", name=self.name, token=self.token)
        return self._doc

    def _lose(self, reason: str) -> LeaseLostError:
        self._state = "lost"
        self._lost_reason = reason
        logger.warning("lease %r lost (token %s): %s", self.name, self.token, reason)
        return LeaseLostError(
            f"lease {self.name!r} lost: {reason}", name=self.name, token=self.token
        )

    def _on_lost(self) -> Callable[[LeaseLostError], None] | None:
        return self.terms.on_lost

    def _fail(self, reason: str) -> LeaseError:
        return _lease_error(self.name, self.key, reason)


def read_leases(
    store: ObjectStore, *, unreadable: list[Unreadable] | None = None
) -> tuple[Stored[LeaseDoc], ...]:
    """Every lease under ``metastore/leases/``, as stored (for ``lakelock locks`` and
    monitoring). Raises :class:`LeaseError` for a document it cannot parse, or, given
    ``unreadable``, adds it there and reads the others."""

    def parse(name: str, key: str, body: bytes) -> LeaseDoc:
        return parse_lease(body, name=name, fail=functools.partial(_lease_error, name, key))

    return read_stored(store, LEASES_PREFIX, parse, unreadable=unreadable)


def issued_token(store: ObjectStore, name: str) -> int | None:
    """The highest fencing token lease ``name`` has issued, as its document holds it now;
    ``None`` if no lakelock lease can be named so, or none was ever made under that name,
    or its document cannot be parsed (then nothing is known of what it issued). Tokens only
    grow, so a token a holder was given is never above this."""
    try:
        key = lease_key(name, prefix=store.prefix)
    except LakelockError:  # InvalidNameError: a name no lease takes
        return None
    try:
        body = store.get(key).body
    except NotFoundError:
        return None
    try:
        fail = functools.partial(_lease_error, name, key)
        return parse_lease(body, name=validate_lease_name(name), fail=fail).token
    except LakelockError:
        return None
