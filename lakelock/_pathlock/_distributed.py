"""``DistributedPathLock``: the hierarchical path lock across processes and machines, on S3.

```python
locks = DistributedPathLock(store, ttl=30)
with locks.lock(write=["/sales/year=2024"]) as held:   # every 2024 partition of sales
    lake.append("sales", table, partition_by=["year", "month"], fence=held.fence)
```

What it guarantees
------------------
Two requests that conflict by the lineage rule (:mod:`lakelock._pathlock._table`, the same rule as
the in-process :class:`~lakelock._pathlock.PathLock`) never hold the lock at the same time,
whichever threads, processes or machines they come from; requests that do not conflict never
wait for each other. A holder that crashes blocks others for at most its TTL plus the margins
(below). There is no queue on S3: a waiter polls, so under a steady stream of compatible
readers a writer may wait (the in-process lock, which is fair, orders this process's own
threads first).

On S3
-----
One lock table per dataset at ``metastore/locks/<dataset>.json`` (layout in
:mod:`lakelock._pathlock._table`), never deleted (it carries ``next_token``). A request is split by
dataset; tables are taken in dataset order, each with one compare-and-swap that grants all of
the request's paths in that dataset or none. If a later table is not granted within the
timeout, the tables already taken are released before :class:`~lakelock.errors.LockTimeout` is
raised: nobody holds some tables while waiting forever for others, and since all requests take
tables in the same order, no cycle of waits can form.

- grant: GET the table (learning server time from ``Date``) → :func:`grant` → CAS. A 412 means
  the table changed: decide again at once. Blocked: poll every ``poll_interval`` seconds (sooner
  if all blockers expire first), renewing tables already taken if they age.
- renew: CAS from the table we last wrote; on 412, GET and re-apply (other holders come and go
  all the time: a 412 is not a loss). Lost only when our holder is gone from the table or has
  lapsed in our own view.
- release: CAS without our holder, re-applied after 412 the same way.
- Lost acknowledgements: an unknown outcome is resolved by reading the table back: for a grant
  our holder id (unique per grant) being present means granted; for a renewal, our write id on
  the object; for a release, our holder being absent.

In process: each :class:`DistributedPathLock` first takes its own in-process
:class:`~lakelock._pathlock.PathLock` for the same request, so threads of one process that
conflict wait for each other locally instead of polling S3.

Time model and safety margin
----------------------------
As for leases (:mod:`lakelock._clock`): expiry instants are S3 server time from ``Date``
headers; a holder stops vouching for its grant ``margin`` seconds before ``expires_at`` by its
latest bound, and others ignore it only ``margin`` seconds after by their earliest bound. A
holder that crashed right after renewing blocks others for at most ``ttl + margin`` plus the
widths of the holder's and the waiter's server-time bounds (each at most 1 s + a round trip,
usually far less once a waiter has polled across a tick of the server's clock) plus one
``poll_interval``.

The heartbeat (``heartbeat=True``, the default) renews every held request's tables every
``(ttl - margin) / 3`` seconds of real time. It holds the handle weakly: a handle dropped
without release stops being renewed once garbage-collected, and expires like a crashed
holder's. A loss is reported
through ``on_lost`` once, by :meth:`PathLockHandle.check`, ``renew`` and ``fence`` raising
:class:`~lakelock.errors.LeaseLostError` (``name`` is ``"lock:<dataset>"``), and by leaving
the ``with`` block (unless another exception is already propagating).

Fencing
-------
:attr:`PathLockHandle.fence` is the registry's :class:`~lakelock._fence.Fence`
``("lock:<dataset>", token, read, write)`` for a single-dataset request
(:meth:`~PathLockHandle.fence_for` / :attr:`~PathLockHandle.fences` for several, one per
``Change`` of ``registry.commit_changes``). Tokens are per dataset table and compatible holders
hold different tokens concurrently, so the registry compares a token only with those of
recorded grants whose paths conflict with its own (a conflicting grant with a higher token was
given only after ours was gone). The holders' paths and modes are on
:attr:`PathLockHandle.grants`.

Trust boundary: as for leases. The lock trusts S3's conditional writes and ``Date`` headers,
its machine's monotonic clock, and that every process follows this protocol; it does not stop
a paused holder from acting after expiry: consumers check fencing tokens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal, Protocol, Self, TypedDict, Unpack

from lakelock._clock import DEFAULT_MARGIN, ServerClock, shared_server_clock
from lakelock._fence import Fence
from lakelock._holding import (
    RACED,
    UNSETTLED,
    CasDocument,
    Holding,
    Lapsed,
    Setup,
    Snapshot,
    Stored,
    Terms,
    Unreadable,
    holder_valid,
    pause_before,
    read_stored,
)
from lakelock._layout import LOCKS_PREFIX, lock_table_key
from lakelock._pathlock._core import LockRequest, PathLike
from lakelock._pathlock._sync import PathLock, PathLockGuard
from lakelock._pathlock._table import (
    Blocked,
    Granted,
    Holder,
    LockTable,
    canonical_request,
    describe,
    dump_table,
    empty_table,
    grant,
    live_holders,
    parse_table,
    release_holder,
    renew_holder,
    split_by_dataset,
)
from lakelock._s3 import ObjectStore, new_write_id
from lakelock.errors import (
    LakelockError,
    LeaseError,
    LeaseLostError,
    LockTimeout,
    OutcomeUnknownError,
    StorageError,
)

__all__ = [
    "DistributedPathLock",
    "LiveGrants",
    "LockOptions",
    "PathLockHandle",
    "WriteLocks",
    "read_lock_tables",
]

logger = logging.getLogger("lakelock.lock")

#: Compare-and-swap rounds a renewal or release tries before giving up for now (each lost
#: round means another holder changed the table meanwhile).
MAX_CAS_ROUNDS: Final = 100


class WriteLocks(Protocol):
    """Where write grants register as write locks in force (a lake's ``registry.internals``:
    FORMAT.md, "Write locks in force"), so that commits of other processes keep out of their
    paths."""

    def hold_write_locks(self, fences: tuple[Fence, ...]) -> None: ...

    def release_write_locks(self, fences: tuple[Fence, ...]) -> None: ...


class LiveGrants:
    """Whether a grant still holds, from its dataset's lock table (one GET, learning the
    server's time): what a committer that a write lock in force keeps out asks before it
    clears the lock (its grant ended) or waits (FORMAT.md, "Write locks in force")."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Callable[[], float] = time.monotonic,
        margin: float = DEFAULT_MARGIN,
        server_clock: ServerClock | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.margin = margin
        self.server_clock = server_clock or shared_server_clock(store, clock)

    def holder(self, dataset: str, token: int) -> Holder | None:
        """The holder of grant ``token`` on ``dataset`` if it may still hold (not released,
        not provably expired), else ``None``: that grant ended and never holds again."""
        key = lock_table_key(dataset)
        fail = functools.partial(_table_error, dataset, key)
        document = CasDocument(
            store=self.store,
            key=key,
            parse=functools.partial(parse_table, dataset=dataset, fail=fail),
            dump=dump_table,
            initial=empty_table(dataset),
            server_clock=self.server_clock,
            clock=self.clock,
            fail=fail,
        )
        snap = document.read()
        if snap is None:
            return None
        live = live_holders(snap.doc, self.server_clock.now(), self.margin)
        return next((h for h in live if h.token == token), None)


class LockOptions(TypedDict, total=False):
    """Per-request options of :meth:`DistributedPathLock.lock` (and ``Lake.lock``); each one
    not given is the lock's own (its constructor's argument of the same name, which says
    what it means)."""

    heartbeat: bool
    margin: float
    on_lost: Callable[[LeaseLostError], None] | None
    poll_interval: float
    timeout: float | None
    ttl: float


@dataclass(slots=True)
class _Grant:
    """A table we hold a grant in: our holder, and the table as we last wrote it."""

    holder: Holder
    table: LockTable
    etag: str


def _table_error(dataset: str, key: str, reason: str) -> LeaseError:
    return LeaseError(f"lock table {key!r}: {reason}", name=f"lock:{dataset}")


class DistributedPathLock:
    """The hierarchical path lock across machines (module docstring).

    ``ttl``, ``timeout`` (``None``: wait forever), ``poll_interval``, ``margin`` (the safety
    margin of :mod:`lakelock._clock`), ``heartbeat`` (renew held locks in the background) and
    ``on_lost`` (called once per handle whose lock is lost) are defaults for :meth:`lock`,
    which can override each; ``clock`` (monotonic) and ``sleep`` are injectable. Thread-safe.

    ``write_locks`` (a lake's ``registry.internals``; ``Lake.lock`` passes its own) is where
    each grant with write paths registers itself once its tables are taken, before ``acquire``
    returns, and unregisters at release: while it holds, the registry refuses every commit to
    those paths that does not carry its fence (FORMAT.md, "Write locks in force"). Without it
    the lock excludes only other lock holders.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        ttl: float = 30.0,
        timeout: float | None = None,
        poll_interval: float = 1.0,
        margin: float = DEFAULT_MARGIN,
        heartbeat: bool = True,
        on_lost: Callable[[LeaseLostError], None] | None = None,
        owner_label: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        local: PathLock | None = None,
        write_locks: WriteLocks | None = None,
    ) -> None:
        self.store = store
        self.write_locks = write_locks
        self.terms = Terms(ttl, timeout, poll_interval, margin, heartbeat, on_lost)
        self.setup = setup = Setup.make(store, self.terms, owner_label, clock, sleep)
        self.owner, self.server_clock = setup.owner, setup.server_clock
        self.clock, self.sleep = clock, sleep
        self.local = local if local is not None else PathLock()

    def lock(
        self,
        *,
        read: Iterable[PathLike] = (),
        write: Iterable[PathLike] = (),
        **options: Unpack[LockOptions],
    ) -> PathLockHandle:
        """A handle for ``read`` and ``write`` paths, acquired by ``with`` (or
        :meth:`PathLockHandle.acquire`); ``options`` not given are the constructor's. Paths
        are checked here: a bad path, an empty request, the root or a table key over S3's
        limit raise before any request is sent. A partition is named as the registry names
        it, whatever its spelling (:func:`~lakelock._pathlock._table.canonical_request`)."""
        request = canonical_request(LockRequest(read, write))
        if not request.paths:
            raise ValueError("a lock request needs at least one path")
        parts = split_by_dataset(request)
        for dataset in parts:
            lock_table_key(dataset, prefix=self.store.prefix)
        return PathLockHandle(self, request, parts, dataclasses.replace(self.terms, **options))

    # -- table I/O, shared by handles ---------------------------------------------------------

    def _table_document(self, dataset: str) -> CasDocument[LockTable]:
        """``dataset``'s lock table on S3 (created empty by the first read that misses it)."""
        key = lock_table_key(dataset)
        fail = functools.partial(_table_error, dataset, key)
        return self.setup.document(
            key,
            parse=functools.partial(parse_table, dataset=dataset, fail=fail),
            dump=dump_table,
            initial=empty_table(dataset),
            fail=fail,
        )


_HandleState = Literal["new", "acquiring", "held", "lost", "released"]


class PathLockHandle(Holding):
    """One request of a :class:`DistributedPathLock`; single use.

    ``with handle:`` (or :meth:`acquire` / :meth:`release`) holds every requested path.
    """

    def __init__(
        self,
        lock: DistributedPathLock,
        request: LockRequest,
        parts: dict[str, LockRequest],
        terms: Terms,
    ) -> None:
        super().__init__(f"path lock ({request})")
        self.request = request
        self.terms = terms
        self._lock = lock
        self._parts = parts
        self._tables = {dataset: lock._table_document(dataset) for dataset in parts}
        self._state: _HandleState = "new"
        self._grants: dict[str, _Grant] = {}
        self._local: PathLockGuard | None = None
        self._lost: LeaseLostError | None = None
        self._registered: tuple[Fence, ...] = ()

    def __repr__(self) -> str:
        return f"<PathLockHandle {self.request} {self._state} tokens={self.tokens}>"

    # -- what a holder needs ------------------------------------------------------------------

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(self._parts)

    @property
    def grants(self) -> tuple[Holder, ...]:
        """Our holder entry per dataset (token, paths, modes, expiry), in dataset order."""
        with self._mutex:
            return tuple(g.holder for g in self._grants.values())

    @property
    def tokens(self) -> dict[str, int]:
        """The fencing token per dataset."""
        with self._mutex:
            return {dataset: g.holder.token for dataset, g in self._grants.items()}

    @property
    def token(self) -> int:
        """The fencing token of a single-dataset request (``ValueError`` for several: use
        :attr:`tokens`). Does not check validity."""
        return self._single()[1]

    @property
    def fence(self) -> Fence:
        """What a registry commit made under this lock carries, after :meth:`check`:
        ``Fence("lock:<dataset>", token, read=..., write=...)`` with this grant's paths, so
        the registry refuses it only if a *conflicting* grant with a higher token committed
        (module docstring). Single-dataset requests only; else :meth:`fence_for`."""
        self.check()
        return self._fence(self._single()[0])

    @property
    def fences(self) -> tuple[Fence, ...]:
        """One fence per dataset (for ``registry.commit_changes``), after :meth:`check`."""
        self.check()
        return tuple(self._fence(dataset) for dataset in self.tokens)

    def fence_for(self, dataset: str) -> Fence:
        """The fence of one dataset of the request, after :meth:`check`."""
        self.check()
        return self._fence(dataset)

    def _fence(self, dataset: str) -> Fence:
        with self._mutex:
            holder = self._grants[dataset].holder
        return Fence(
            f"lock:{dataset}", holder.token, tuple(sorted(holder.read)), tuple(sorted(holder.write))
        )

    def _single(self) -> tuple[str, int]:
        tokens = self.tokens
        if len(self._parts) != 1:
            raise ValueError(
                f"the request spans datasets {list(self._parts)}: use .tokens / .fences"
            )
        if not tokens:
            raise LeaseError("the lock is not held", name=f"lock:{self.datasets[0]}")
        [(dataset, token)] = tokens.items()
        return dataset, token

    def check(self) -> None:
        """Raise :class:`LeaseLostError` if any grant was lost or has lapsed by our clock,
        :class:`LeaseError` if the lock is not held."""
        with self._telling_loss():
            self._check_locked()

    def _check_locked(self) -> None:
        if self._lost is not None:
            raise self._lost_again()
        if self._state != "held":
            raise LeaseError(
                f"path lock ({self.request}) is not held", name=f"lock:{self.datasets[0]}"
            )
        now = self._lock.server_clock.now()
        for dataset, held in self._grants.items():
            if not holder_valid(held.holder.expires_at, now, self.terms.margin):
                raise self._lose(dataset, "lapsed: not renewed in time")

    # -- acquire ------------------------------------------------------------------------------

    def acquire(self) -> Self:
        """Take every table, waiting up to ``timeout``; :class:`LockTimeout` otherwise, with
        nothing held."""
        with self._mutex:
            if self._state != "new":
                raise RuntimeError("a path lock handle is single use; call lock() again")
            self._state = "acquiring"
        clock = self._lock.clock
        deadline = None if self.terms.timeout is None else clock() + self.terms.timeout
        # The in-process lock waits in real time; with an injected clock that is only an
        # approximation of the budget, which is fine: it is bounded either way.
        local = self._lock.local(self.request.read, self.request.write, timeout=self.terms.timeout)
        try:
            local.__enter__()
        except BaseException:
            with self._mutex:
                self._state = "released"  # a failed acquire leaves the handle spent
            raise
        try:
            for dataset, part in self._parts.items():
                self._acquire_table(dataset, part, deadline)
            self._register()
        except BaseException:
            with self._mutex:
                self._state = "released"  # a failed acquire leaves the handle spent
            try:
                with contextlib.suppress(LakelockError):
                    self._release_tables()
            finally:
                local.__exit__(None, None, None)
            raise
        with self._mutex:
            self._local = local
            self._state = "held"
        if self.terms.heartbeat:
            self._start_heartbeat(
                self.terms.beat,
                name=f"lakelock-lock-{','.join(self.datasets)}",
                first=self._first_beat(),
            )
        return self

    def _first_beat(self) -> float:
        """Seconds until the heartbeat's first renewal: when the grant nearest its expiry has
        less than two beats left (as :meth:`_keep_alive` renews while waiting), at most a
        beat. Registering the grants, or the tables taken one after another, may have used
        part of the ttl before ``acquire`` returns."""
        now = self._lock.server_clock.now()
        with self._mutex:
            left = min(held.holder.expires_at for held in self._grants.values()) - now.latest
        return left - 2 * self.terms.beat

    def _acquire_table(self, dataset: str, part: LockRequest, deadline: float | None) -> None:
        lock = self._lock
        holder_id = uuid.uuid4().hex
        races = 0
        while True:
            snap = self._tables[dataset].read_or_create()
            decision = grant(
                snap.doc,
                part,
                lock.owner,
                lock.server_clock.now(),
                ttl=self.terms.ttl,
                margin=self.terms.margin,
                holder_id=holder_id,
            )
            if isinstance(decision, Granted):
                if self._write_grant(dataset, decision, snap):
                    return
                # Not blocked, only raced (or the write did not land): look again at once,
                # even past the deadline, unless the table keeps changing under us.
                races += 1
                if races < MAX_CAS_ROUNDS:
                    continue
                wake = None
            else:
                wake = lock.server_clock.local_when_earliest_exceeds(decision.until)
            now = lock.clock()
            if deadline is not None and now >= deadline:
                blockers = describe(decision.holders) if isinstance(decision, Blocked) else ""
                raise LockTimeout(
                    f"path lock ({self.request}) not acquired within {self.terms.timeout}s; "
                    f"dataset {dataset!r} held by: {blockers or 'racing writers'}",
                    target=self.request,
                    timeout=self.terms.timeout,
                )
            if wake is None:
                races = 0
                continue
            poll = self.terms.poll_interval
            if self._keep_alive():
                poll = min(poll, self.terms.beat)
            lock.sleep(pause_before(wake, now, poll, deadline))

    def _register(self) -> None:
        """Register our write grants in the lake's registry (class docstring): from here on,
        commits of others to their paths are refused. A grant that cannot register is not
        acquired (the caller releases its tables; a registration whose outcome is unknown is
        cleared by the next committer it keeps out, once the table shows the grant gone)."""
        registry = self._lock.write_locks
        with self._mutex:
            written = [d for d, held in self._grants.items() if held.holder.write]
        fences = tuple(self._fence(dataset) for dataset in written)
        if registry is None or not fences:
            return
        registry.hold_write_locks(fences)
        with self._mutex:
            self._registered = fences

    def _unregister(self) -> None:
        """Clear our write locks in force before our tables are released; a failure is
        logged and left to the next committer they keep out (the table then shows the grant
        gone)."""
        registry = self._lock.write_locks
        with self._mutex:
            fences, self._registered = self._registered, ()
        if registry is None or not fences:
            return
        try:
            registry.release_write_locks(fences)
        except LakelockError:
            logger.warning("could not clear the write locks of %s", self.what, exc_info=True)

    def _write_grant(self, dataset: str, decision: Granted, snap: Snapshot[LockTable]) -> bool:
        """CAS the granted table; whether our holder is now in it."""
        table = self._tables[dataset]
        try:
            etag = table.write(decision.table, snap.etag, new_write_id())
        except RACED:
            return False  # the table changed since we read it
        except OutcomeUnknownError:
            # Our holder id is unique to this grant: present means our write landed (whoever
            # wrote after us kept it, since it is live); absent means it did not.
            back = table.read_or_create()
            holder = back.doc.find(decision.holder.id)
            if holder is None:
                return False
            with self._mutex:
                self._grants[dataset] = _Grant(holder, back.doc, back.etag)
            return True
        with self._mutex:
            self._grants[dataset] = _Grant(decision.holder, decision.table, etag)
        return True

    def _keep_alive(self) -> bool:
        """While waiting for a later table, renew earlier ones once they are a third of the
        way through their life (the wait may outlast the TTL); whether any table is held."""
        now = self._lock.server_clock.now()
        with self._mutex:
            due = [
                dataset
                for dataset, held in self._grants.items()
                if held.holder.expires_at - now.latest < 2 * self.terms.beat
            ]
            holding = bool(self._grants)
        for dataset in due:
            self._renew_table(dataset)
        return holding

    # -- renew --------------------------------------------------------------------------------

    def renew(self) -> None:
        """Extend every grant by ``ttl`` from now. :class:`LeaseLostError` if any was lost
        (removed from its table, or lapsed by our clock); other
        :class:`~lakelock.errors.StorageError`\\ s leave the lock as it was."""
        with self._telling_loss():
            self._check_locked()
            for dataset in list(self._grants):
                self._renew_table(dataset)

    def _renew_table(self, dataset: str) -> None:
        document = self._tables[dataset]
        with self._mutex:
            held = self._grants[dataset]
            table, etag = held.table, held.etag
            for _ in range(MAX_CAS_ROUNDS):
                decision = renew_holder(
                    table,
                    held.holder.id,
                    self._lock.server_clock.now(),
                    ttl=self.terms.ttl,
                    margin=self.terms.margin,
                )
                if isinstance(decision, Lapsed):
                    raise self._lose(dataset, decision.reason)
                write_id = new_write_id()
                try:
                    etag = document.write(decision.table, etag, write_id)
                except UNSETTLED:
                    snap = document.read_or_create()
                    if snap.write_id == write_id:  # landed; the acknowledgement did not
                        self._grants[dataset] = _Grant(decision.holder, snap.doc, snap.etag)
                        return
                    table, etag = snap.doc, snap.etag
                    continue
                self._grants[dataset] = _Grant(decision.holder, decision.table, etag)
                return
        raise LeaseError(
            f"lock table of {dataset!r}: renewal lost {MAX_CAS_ROUNDS} races in a row",
            name=f"lock:{dataset}",
            token=held.holder.token,
        )

    # -- release ------------------------------------------------------------------------------

    def release(self) -> None:
        """Stop the heartbeat, remove our holders from their tables, release the in-process
        lock. Idempotent; a lost lock releases what is left without raising."""
        self._stop_heartbeat()
        with self._mutex:
            if self._state in ("new", "acquiring", "released"):
                if self._state == "new":
                    self._state = "released"
                return
            local, self._local = self._local, None
            self._state = "released"
        try:
            self._unregister()
            self._release_tables()
        finally:
            if local is not None:
                local.__exit__(None, None, None)

    def _release_tables(self) -> None:
        errors: list[StorageError] = []
        with self._mutex:
            grants = list(self._grants.items())
        for dataset, held in reversed(grants):
            try:
                self._release_table(dataset, held)
            except StorageError as error:
                errors.append(error)
        if errors:
            # The holders left behind expire by themselves within their TTL.
            raise errors[0]

    def _release_table(self, dataset: str, held: _Grant) -> None:
        document = self._tables[dataset]
        table, etag = held.table, held.etag
        for _ in range(MAX_CAS_ROUNDS):
            target = release_holder(
                table, held.holder.id, self._lock.server_clock.now(), margin=self.terms.margin
            )
            if target is None:
                return
            write_id = new_write_id()
            try:
                document.write(target, etag, write_id)
                return
            except UNSETTLED:
                snap = document.read_or_create()
                if snap.write_id == write_id:
                    return
                table, etag = snap.doc, snap.etag
        raise LeaseError(
            f"lock table of {dataset!r}: release lost {MAX_CAS_ROUNDS} races in a row",
            name=f"lock:{dataset}",
            token=held.holder.token,
        )

    # -- plumbing -----------------------------------------------------------------------------

    def _lose(self, dataset: str, reason: str) -> LeaseLostError:
        token = self._grants[dataset].holder.token
        self._state = "lost"
        self._lost = LeaseLostError(
            f"path lock ({self.request}) lost its grant on {dataset!r} (token {token}): {reason}",
            name=f"lock:{dataset}",
            token=token,
        )
        logger.warning("%s", self._lost)
        return self._lost_again()

    def _lost_again(self) -> LeaseLostError:
        assert self._lost is not None
        return LeaseLostError(str(self._lost), name=self._lost.name, token=self._lost.token)

    def _on_lost(self) -> Callable[[LeaseLostError], None] | None:
        return self.terms.on_lost


def read_lock_tables(
    store: ObjectStore, *, unreadable: list[Unreadable] | None = None
) -> tuple[Stored[LockTable], ...]:
    """Every lock table under ``metastore/locks/``, as stored, expired holders included (for
    ``lakelock locks``; :func:`~lakelock._pathlock._table.live_holders` tells live from dead
    given a server time, e.g. the ``server_time`` of the read). Raises :class:`LeaseError`
    for a table it cannot parse, or, given ``unreadable``, adds it there and reads the others."""

    def parse(dataset: str, key: str, body: bytes) -> LockTable:
        fail = functools.partial(_table_error, dataset, key)
        return parse_table(body, dataset=dataset, fail=fail)

    return read_stored(store, LOCKS_PREFIX, parse, unreadable=unreadable)
