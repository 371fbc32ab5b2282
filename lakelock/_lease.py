"""``Lease``: a named, fenced lease over one S3 object, for leader election across machines.

```python
lease = Lease(store, "nightly-compaction", ttl=30, heartbeat=True)
with lease:                                  # acquire (waits), then release on exit
    lake.append("sales", table, partition_by=["year", "month"], fence=lease.fence)
```

On S3
-----
One JSON object per lease at ``metastore/leases/<name>.json`` (layout in
:mod:`lakelock._lease_core`). Every write is conditional: the first use of a name creates the
*initial* document (token 0, released) with ``If-None-Match: *``; acquire, renew and release
are compare-and-swaps (``If-Match``) on the ETag the decision was made from. The object is
never deleted (that would reset the fencing token). Every write carries a write id in its
object metadata (the adapter's ``lakelock-write-id``).

Protocol
--------
- **acquire**: GET (learning server time from ``Date``) → :func:`decide_acquire` → CAS with
  ``token + 1``. A 412 means another process won that race: read again. While someone else
  holds it, poll every ``poll_interval`` seconds (sooner if the holder's expiry comes first)
  until ``timeout``, then :class:`~lakelock.errors.LockTimeout`.
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
clock by :class:`~lakelock._lease_clock.ServerClock`; see that module for the model. The holder
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

Heartbeat: with ``heartbeat=True`` a daemon thread renews every ``(ttl - margin) / 3``
seconds (real time, whatever ``clock`` is) from acquire until release or loss. It holds the
lease weakly: a ``Lease`` dropped without release (once garbage-collected) expires like a
crashed holder's.

Trust boundary: the lease trusts S3's conditional writes and ``Date`` headers, its own
monotonic clock, and that other processes follow this protocol. It cannot stop a paused
holder from acting after expiry: consumers must check the fencing token (the registry does,
given ``fence=lease.fence``).
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Literal, Self

from lakelock._lease_clock import DEFAULT_MARGIN, shared_server_clock
from lakelock._lease_core import (
    Lapsed,
    LeaseDoc,
    Owner,
    Stored,
    Wait,
    decide_acquire,
    decide_release,
    decide_renew,
    dump_lease,
    holder_valid,
    initial_lease,
    parse_lease,
)
from lakelock._s3 import IfMatch, ObjectStore, new_write_id
from lakelock.errors import (
    AlreadyExistsError,
    InvalidNameError,
    LakelockError,
    LeaseError,
    LeaseLostError,
    LockTimeout,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
)

__all__ = [
    "LEASE_PREFIX",
    "Heartbeat",
    "Lease",
    "lease_key",
    "read_leases",
    "validate_lease_name",
]

logger = logging.getLogger("lakelock.lease")

LEASE_PREFIX: Final = "metastore/leases/"
MAX_KEY_BYTES: Final = 1024
#: Floor for a wait between attempts, so a wake-up computed as "now" cannot spin.
MIN_PAUSE: Final = 0.001
#: A renew or release re-reads and retries at most this often before giving up: more would
#: mean someone else keeps writing a document that names us as holder.
MAX_RESOLVES: Final = 5


class _Default(enum.Enum):
    VALUE = enum.auto()


#: "Use the value given to the constructor."
DEFAULT: Final = _Default.VALUE


def validate_lease_name(name: str) -> str:
    """``name`` if it can name a lease: non-empty, no ``/``, no control characters, UTF-8."""
    if not isinstance(name, str):
        raise TypeError(f"a lease name is a str, not {type(name).__name__}")
    if not name:
        raise InvalidNameError(name, "a lease name may not be empty")
    if "/" in name:
        raise InvalidNameError(name, "a lease name may not contain '/'")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidNameError(name, "a lease name may not contain control characters")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidNameError(name, "a lease name must be valid UTF-8") from error
    return name


def lease_key(name: str) -> str:
    """The key (relative to the store's prefix) of lease ``name``."""
    return f"{LEASE_PREFIX}{validate_lease_name(name)}.json"


def check_durations(ttl: float, margin: float, poll_interval: float) -> None:
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0 seconds, got {margin!r}")
    if not ttl > 2 * margin:
        raise ValueError(f"ttl ({ttl!r}) must exceed twice the margin ({margin!r})")
    if not poll_interval > 0:
        raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval!r}")


def check_timeout(timeout: float | None) -> float | None:
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
    return timeout


def exit_releasing(
    check: Callable[[], object],
    release: Callable[[], None],
    exc_type: type[BaseException] | None,
    *,
    what: str,
) -> None:
    """The ``__exit__`` of leases and path locks: always release; if the hold was lost while
    the block ran and no other exception is leaving it, raise :class:`LeaseLostError`."""
    lost: LeaseLostError | None = None
    try:
        check()
    except LeaseLostError as error:
        lost = error
    except LeaseError:
        pass  # not held (never acquired, or already released): nothing was lost
    release()
    if lost is not None and exc_type is None:
        raise LeaseLostError(
            f"{what} was lost while held: {lost}", name=lost.name, token=lost.token
        ) from lost


class Heartbeat:
    """A daemon thread calling ``renew`` every ``interval`` seconds until stopped.

    ``renew`` is held through a weak reference: a lease or lock dropped without release is
    not kept alive by its heartbeat, it expires like a crashed holder's. The thread stops
    by itself when ``renew`` raises :class:`LeaseLostError`; other lakelock errors (S3
    unavailable, a renewal that kept losing races) are logged and retried at the next beat,
    since ``renew`` itself declares the loss once the lease has lapsed.
    """

    def __init__(self, renew: Callable[[], object], interval: float, *, name: str) -> None:
        if not interval > 0:
            raise ValueError(f"heartbeat interval must be > 0, got {interval!r}")
        self._renew: Callable[[], Callable[[], object] | None]
        if inspect.ismethod(renew):
            self._renew = weakref.WeakMethod(renew)
        else:
            self._renew = lambda: renew
        self.interval = interval
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
        while not self._stop.wait(self.interval):
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


@dataclass(frozen=True, slots=True)
class _Snapshot:
    doc: LeaseDoc
    etag: str
    write_id: str | None


_State = Literal["idle", "held", "lost"]


class Lease:
    """A named lease with a strictly increasing fencing token (module docstring).

    ``ttl`` is how long each acquire or renewal holds it (seconds); ``timeout`` (``None``:
    wait forever) and ``poll_interval`` are defaults for :meth:`acquire`; ``clock`` (a
    monotonic clock) and ``sleep`` are injectable for tests; ``margin`` is the safety margin
    of :mod:`lakelock._lease_clock`. Thread-safe; one holder per object at a time, and the
    object can be acquired again after release.
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
        heartbeat: bool = False,
        on_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> None:
        self.key = lease_key(name)
        if len(store.full_key(self.key).encode("utf-8")) > MAX_KEY_BYTES:
            raise InvalidNameError(name, f"the lease's key exceeds {MAX_KEY_BYTES} bytes")
        check_durations(ttl, margin, poll_interval)
        self.name = name
        self.ttl = ttl
        self.margin = margin
        self.timeout = check_timeout(timeout)
        self.poll_interval = poll_interval
        self.heartbeat = heartbeat
        self.on_lost = on_lost
        self.owner = Owner.current(owner_label)
        self.server_clock = shared_server_clock(store, clock)
        self._store = store
        self._clock = clock
        self._sleep = sleep
        self._mutex = threading.RLock()
        self._state: _State = "idle"
        self._doc: LeaseDoc | None = None
        self._etag: str | None = None
        self._lost_reason = ""
        self._notified = False
        self._heartbeat: Heartbeat | None = None
        self._waiting_for: Owner | None = None

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

    @property
    def held(self) -> bool:
        """Whether we hold the lease and can still vouch for it (no I/O)."""
        try:
            self.check()
        except LeaseError:
            return False
        return True

    def remaining(self) -> float:
        """Seconds (approximately, local) we can still act as holder; 0 when not held."""
        with self._mutex:
            if self._state != "held" or self._doc is None:
                return 0.0
            latest = self.server_clock.now().latest
            return max(0.0, self._doc.expires_at - self.margin - latest)

    def check(self) -> int:
        """Our token if we hold the lease and it is still valid by our clock; otherwise
        :class:`LeaseLostError` (lost or lapsed) or :class:`LeaseError` (not acquired)."""
        try:
            with self._mutex:
                doc = self._held_doc()
                if not holder_valid(doc.expires_at, self.server_clock.now(), self.margin):
                    raise self._lose("lapsed: not renewed in time")
                return doc.token
        except LeaseLostError as error:
            self._notify(error)
            raise

    @property
    def fence(self) -> tuple[str, int]:
        """What a registry commit made under this lease carries: ``("lease:<name>",
        token)``. Checks validity first (:meth:`check`)."""
        return (f"lease:{self.name}", self.check())

    # -- acquire ------------------------------------------------------------------------------

    def acquire(
        self,
        timeout: float | _Default | None = DEFAULT,
        poll_interval: float | _Default = DEFAULT,
    ) -> Self:
        """Become the holder, waiting up to ``timeout`` seconds (``None``: forever); raises
        :class:`~lakelock.errors.LockTimeout`. Starts the heartbeat if enabled."""
        wait = self.timeout if timeout is DEFAULT else check_timeout(timeout)
        poll = self.poll_interval if poll_interval is DEFAULT else poll_interval
        if not poll > 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll!r}")
        with self._mutex:
            if self._state == "held":
                raise LeaseError(
                    f"lease {self.name!r} is already held by this object",
                    name=self.name,
                    token=self.token,
                )
        deadline = None if wait is None else self._clock() + wait
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
            pause = min(poll, max(wake - now, MIN_PAUSE))
            if deadline is not None:
                pause = min(pause, deadline - now)
            self._sleep(pause)
        self._start_heartbeat()
        return self

    def try_acquire(self) -> bool:
        """One attempt, no waiting: whether we now hold the lease."""
        with self._mutex:
            if self._state == "held":
                return True
        if self._attempt() is not None:
            return False
        self._start_heartbeat()
        return True

    def _attempt(self) -> float | None:
        """One read-decide-write round: ``None`` once held, else the local time to look again."""
        with self._mutex:
            if self._state == "held":
                return None
            snap = self._read()
            if snap is None:
                self._create_initial()
                snap = self._read()
                if snap is None:
                    raise LeaseError(f"lease {self.name!r} vanished while created", name=self.name)
            decision = decide_acquire(
                snap.doc, self.server_clock.now(), self.owner, ttl=self.ttl, margin=self.margin
            )
            if isinstance(decision, Wait):
                self._waiting_for = decision.holder.owner
                return self.server_clock.local_when_earliest_exceeds(decision.until)
            write_id = new_write_id()
            try:
                etag = self._put(decision.doc, snap.etag, write_id)
            except (PreconditionFailedError, NotFoundError):
                return self._clock()  # another process won this round: look again now
            except OutcomeUnknownError:
                back = self._read()
                if back is None or back.write_id != write_id:
                    return self._clock()
                etag = back.etag
            self._state = "held"
            self._doc, self._etag = decision.doc, etag
            self._lost_reason, self._notified = "", False
            logger.debug("acquired lease %r with token %d", self.name, decision.doc.token)
            return None

    # -- renew --------------------------------------------------------------------------------

    def renew(self) -> None:
        """Extend the lease by ``ttl`` from now. :class:`LeaseLostError` if it was taken over
        or has lapsed by our clock (even if nobody took it yet); other
        :class:`~lakelock.errors.StorageError`\\ s leave the lease as it was."""
        try:
            with self._mutex:
                self._renew_locked()
        except LeaseLostError as error:
            self._notify(error)
            raise

    def _renew_locked(self) -> None:
        doc = self._held_doc()
        etag = self._etag
        assert etag is not None
        for _ in range(MAX_RESOLVES):
            decision = decide_renew(
                doc, self.server_clock.now(), self.owner, ttl=self.ttl, margin=self.margin
            )
            if isinstance(decision, Lapsed):
                raise self._lose(decision.reason)
            write_id = new_write_id()
            try:
                etag = self._put(decision, etag, write_id)
            except (PreconditionFailedError, NotFoundError, OutcomeUnknownError) as error:
                snap = self._read()
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
        doc, etag = self._doc, self._etag
        assert doc is not None
        assert etag is not None
        for _ in range(MAX_RESOLVES):
            target = decide_release(doc, self.owner)
            if target is None:
                return
            write_id = new_write_id()
            try:
                self._etag = self._put(target, etag, write_id)
                self._doc = target
                return
            except (PreconditionFailedError, NotFoundError, OutcomeUnknownError):
                snap = self._read()
                if snap is None:
                    return
                if snap.write_id == write_id:
                    self._doc, self._etag = snap.doc, snap.etag
                    return
                doc, etag = snap.doc, snap.etag  # not ours any more, or ours unchanged: decide
        raise LeaseError(
            f"lease {self.name!r}: release did not land after {MAX_RESOLVES} attempts",
            name=self.name,
            token=doc.token,
        )

    # -- context manager ----------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        exit_releasing(self.check, self.release, exc_type, what=f"lease {self.name!r}")

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

    def _notify(self, error: LeaseLostError) -> None:
        with self._mutex:
            if self._notified or self.on_lost is None:
                return
            self._notified = True
            callback = self.on_lost
        try:
            callback(error)
        except Exception:
            logger.exception("on_lost callback of lease %r failed", self.name)

    def _fail(self, reason: str) -> LeaseError:
        return LeaseError(f"lease {self.name!r} at {self.key!r}: {reason}", name=self.name)

    def _read(self) -> _Snapshot | None:
        sent = self._clock()
        try:
            data = self._store.get(self.key)
        except NotFoundError:
            return None
        self.server_clock.observe(data.server_time, sent, self._clock())
        if not self.server_clock.has_sample:
            raise self._fail("the store sent no Date header; leases need the server's time")
        doc = parse_lease(data.body, name=self.name, fail=self._fail)
        return _Snapshot(doc, data.etag, data.write_id)

    def _create_initial(self) -> None:
        # Someone else creating it first is just as good.
        with contextlib.suppress(AlreadyExistsError):
            self._store.put(self.key, dump_lease(initial_lease(self.name)), mode="create")

    def _put(self, doc: LeaseDoc, etag: str, write_id: str) -> str:
        return self._store.put(
            self.key, dump_lease(doc), mode=IfMatch(etag), write_id=write_id
        ).etag

    def _start_heartbeat(self) -> None:
        if not self.heartbeat:
            return
        beat = Heartbeat(
            self.renew, (self.ttl - self.margin) / 3, name=f"lakelock-lease-{self.name}"
        )
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


def read_leases(store: ObjectStore) -> tuple[Stored[LeaseDoc], ...]:
    """Every lease under ``metastore/leases/``, as stored (for ``lakelock locks`` and
    monitoring). Raises :class:`LeaseError` for a document it cannot parse."""
    found: list[Stored[LeaseDoc]] = []
    for listed in store.list(LEASE_PREFIX):
        name = listed.key[len(LEASE_PREFIX) :]
        if not name.endswith(".json") or "/" in name:
            continue
        name = name[: -len(".json")]
        try:
            data = store.get(listed.key)
        except NotFoundError:
            continue

        def fail(reason: str, name: str = name, key: str = listed.key) -> LeaseError:
            return LeaseError(f"lease {name!r} at {key!r}: {reason}", name=name)

        doc = parse_lease(data.body, name=name, fail=fail)
        server_time = data.server_time.timestamp() if data.server_time else None
        found.append(Stored(listed.key, data.etag, doc, server_time))
    return tuple(found)
