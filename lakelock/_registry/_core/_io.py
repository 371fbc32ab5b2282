"""The registry's requests, as steps of the commit core: the root read and swapped, intents
listed, read and created, objects fetched into the cache — and what their answers teach the
process (the server's clock, the root it last knew, intents parsed once).

Each function takes the process's :class:`~._committer.Committer` (its caches and what it
knows) and yields :mod:`._requests`; a transient answer is a :class:`~._state.Retry`, the
root's 412 a :class:`~._state.Redrive`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from lakelock._registry._batch import Pending
from lakelock._registry._changes import Change
from lakelock._registry._core import _decide
from lakelock._registry._core._requests import (
    Get,
    List,
    Listing,
    Now,
    Parallel,
    Put,
    Steps,
    fetching,
)
from lakelock._registry._core._state import TRANSIENT, Batch, Redrive, Retry
from lakelock._registry._document import (
    RegistryDoc,
    parse_registry,
    serialize_registry,
    with_datasets,
)
from lakelock._registry._intents import INTENT_PREFIX
from lakelock._registry._objects import Missing, missing_object
from lakelock._registry._snapshot import SNAPSHOT_PREFIX, Snapshot
from lakelock._s3._types import ListedObject, ObjectData, PutResult
from lakelock.errors import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    RegistryCorruptError,
    ThrottledError,
)

if TYPE_CHECKING:
    from lakelock._registry._core._committer import Committer

__all__ = [
    "create_all",
    "list_intents",
    "listing",
    "load_objects",
    "make_intents",
    "need",
    "put_intents",
    "read_intents",
    "read_root",
    "read_root_timed",
    "send_intents",
    "server_now",
    "swap",
]

_T = TypeVar("_T")


def read_root(core: Committer) -> Steps:
    """The root and its ETag (an empty registry and ``None``: no root yet). A lake whose
    root is gone but existed is :class:`~lakelock.errors.RegistryCorruptError`
    (:func:`lost_root`): its next swap would create an empty one over every version."""
    doc, etag, _ = yield from read_root_timed(core)
    return doc, etag


def read_root_timed(core: Committer) -> Steps:
    """:func:`read_root`'s root and ETag, and the seconds the store took to answer the
    root's GET (the second one when a look for a lost root made it read again): what a
    root read costs here, which the scheduler learns. The snapshots :func:`lost_root`
    lists and reads are not counted: a lake with a root never pays them, and a process
    that learnt them as its usual read would wait out a brownout seconds too long."""
    data, took = yield from _get_root(core)
    if data is None:
        later = yield from lost_root(core)
        if later is None:
            return RegistryDoc(), None, took
        # Made since our read (a new lake's first commits racing ours)?
        data, took = yield from _get_root(core)
        if data is None:
            raise _lost_root_error(core, later)
    doc = parse_registry(data.body, bucket=core.bucket, key=core.root_key)
    if data.server_time is not None:
        # Our clock when the answer came, not when we asked: the server wrote its Date
        # before that, so the offset can only come out low (an intent expires a little
        # late), never high — a pause between asking and sending (a stalled process)
        # would otherwise count as server time and expire intents seconds old.
        core.now = yield Now()
        core.server_offset = data.server_time.timestamp() - (yield Now(monotonic=True))
    if doc.format_version > 1:
        doc = with_datasets(doc, core.objects.datasets(doc))
    core.observe(doc, data.etag, core.now)
    return doc, data.etag, took


def _get_root(core: Committer) -> Steps:
    """The root's object (``None``: there is none) and the seconds its GET took, by the
    monotonic clock. A missing bucket is raised: it is not an empty lake."""
    sent: float = yield Now(monotonic=True)
    data: ObjectData | None
    try:
        data = yield Get(core.root_key, retried=False)
    except NotFoundError as error:
        if error.code == "NoSuchBucket":
            raise
        data = None
    answered: float = yield Now(monotonic=True)
    return data, answered - sent


#: Snapshots read at once while looking for a sign that a lake with no root had one.
LOST_ROOT_READS = 64


def lost_root(core: Committer) -> Steps:
    """With no root found: a snapshot of a version after the first, if one exists (else
    ``None``). Such a snapshot was written by a commit on a root, so the lake had one and
    it was deleted; a new lake's first commits, racing before any root exists, write
    snapshots of version 1 only. Only this path lists (a commit that finds its root pays
    nothing), a page and a few snapshots at a time, stopping at the first sign."""
    start = ""
    while True:
        try:
            page: Listing = yield List(SNAPSHOT_PREFIX, start_after=start)
        except TRANSIENT as error:
            raise Retry from error
        keys = [o.key for o in page.objects]
        for at in range(0, len(keys), LOST_ROOT_READS):
            chunk = keys[at : at + LOST_ROOT_READS]
            yield from load_objects(core, chunk)  # one gone or unreadable is no sign
            for key in chunk:
                with contextlib.suppress(Missing):
                    snap = core.objects.snapshot(key)
                    if snap.version > 1:
                        return snap
        if not page.truncated or not keys or keys[-1] <= start:
            return None
        start = keys[-1]


def _lost_root_error(core: Committer, later: Snapshot) -> RegistryCorruptError:
    return RegistryCorruptError(
        f"the registry's root {core.root_key} is missing, but version {later.version} of "
        f"dataset {later.dataset!r} exists, written by a commit on a root: this process "
        "will not create an empty root over the lake's versions. Put the root back (a "
        "version the bucket keeps of it, or a backup) before anything commits here again, "
        "or delete the whole lake deliberately",
        bucket=core.bucket,
        key=core.root_key,
    )


def server_now(core: Committer, monotonic: float) -> float | None:
    """The server's clock at our ``monotonic`` time, as far as we know it (a little
    behind: rule 10 errs towards references that look older): the ``Date`` of our last
    root read carried forward by our monotonic clock, or the newest ``Date`` our writes
    were answered with, whichever is later; ``None`` before either."""
    estimates = [e for e in (core.written_date,) if e is not None]
    if core.server_offset is not None:
        estimates.append(monotonic + core.server_offset)
    return max(estimates, default=None)


def need(core: Committer, compute: Callable[[], _T]) -> Steps:
    """``compute()``, fetching whatever objects it misses (it is pure: asked again once
    they are cached)."""
    return (yield from fetching(compute, lambda key, answer: _fetched(core, key, answer)))


def _fetched(core: Committer, key: str, answer: Any) -> None:
    """One object :func:`need` fetched: cached, or why it could not be."""
    if isinstance(answer, NotFoundError):
        if key not in core.missed:
            # The root this attempt works from may be old by now (the process paused
            # past vacuum's window since reading it): vacuum takes what only versions
            # out of the retention reach. Another attempt reads the root again; missing
            # from that one too, the lake is damaged.
            core.missed.add(key)
            core.known = None
            raise Retry from answer
        raise missing_object(key, core.bucket, None) from answer
    if isinstance(answer, TRANSIENT):
        raise Retry from answer
    if isinstance(answer, BaseException):
        raise answer
    core.objects.load(key, answer.body)


def load_objects(core: Committer, keys: Sequence[str]) -> Steps:
    """Read ``keys`` into the cache, in parallel; one gone or unreadable is left out."""
    answers = yield Parallel(tuple(Get(key) for key in keys))
    for key, answer in zip(keys, answers, strict=True):
        if isinstance(answer, NotFoundError):
            continue
        if isinstance(answer, TRANSIENT):
            raise Retry from answer
        if isinstance(answer, BaseException):
            raise answer
        with contextlib.suppress(RegistryCorruptError):
            core.objects.load(key, answer.body)


def send_intents(
    core: Committer, pending: Sequence[Pending], also: Sequence[tuple[str, bytes]] = ()
) -> Steps:
    """Create ``pending``'s intents (and delta manifests) not created yet, and ``also``,
    in one parallel round, made now (:func:`make_intents`)."""
    yield from make_intents(core, pending)
    yield from put_intents(core, pending, also)


def make_intents(core: Committer, pending: Sequence[Pending]) -> Steps:
    """``pending``'s intents not sent yet are made now: their keys take this moment's time
    (:meth:`~._committer.Committer.made_now`), and their age (rule 4b) counts from now."""
    now = yield Now()
    core.made_now(pending, now, (yield Now(monotonic=True)))


def put_intents(
    core: Committer, pending: Sequence[Pending], also: Sequence[tuple[str, bytes]] = ()
) -> Steps:
    """Create ``pending``'s intents (and delta manifests) not created yet, and ``also``,
    in one parallel round, under the keys they have. They count as sent before the PUTs go
    out: an intent whose answer is lost may exist, and others may fold it."""
    writes = [w for p in pending for w in p.unwritten]
    for p in pending:
        p.intent_sent = p.intent_sent or bool(p.unwritten)
    yield from create_all(core, [*writes, *also])
    for p in pending:
        p.unwritten = []


def create_all(core: Committer, writes: Sequence[tuple[str, bytes]]) -> Steps:
    """Create write-once objects: each key is new (a digest and a nonce), so one that
    exists already can only be our own write whose answer was lost."""
    if not writes:
        return
    answers = yield Parallel(tuple(Put(k, b, create=True) for k, b in writes))
    for answer in answers:
        if isinstance(answer, PutResult) and answer.server_time is not None:
            date = answer.server_time.timestamp()
            core.written_date = max(date, core.written_date or date)
        if isinstance(answer, AlreadyExistsError | PreconditionFailedError):
            continue
        if isinstance(answer, TRANSIENT):
            raise Retry from answer
        if isinstance(answer, BaseException):
            raise answer


def listing(after: str, limit: int, decided: int) -> List:
    """One page of intents after ``after``: room for ``limit`` undecided ones past the
    ``decided`` ones a recent swap left above the watermark."""
    return List(INTENT_PREFIX, start_after=after, max_keys=min(1000, limit + decided))


def list_intents(after: str, limit: int, decided: set[str]) -> Steps:
    """The intents after ``after``, oldest first, up to the ``limit``-th not in
    ``decided`` (those a recent swap decided are listed too, but do not use up a fold's
    share)."""
    found: list[ListedObject] = []
    undecided = 0
    start = after
    while True:
        try:
            page: Listing = yield listing(start, limit, len(decided))
        except TRANSIENT as error:
            raise Retry from error
        for o in _decide.above_watermark(page.objects, after):
            if undecided >= limit:
                return found
            found.append(o)
            undecided += o.key not in decided
        if not page.truncated or not page.objects:
            return found
        if page.objects[-1].key <= start:
            return found  # the same page again: the store ignores StartAfter
        start = page.objects[-1].key


def read_intents(core: Committer, todo: Sequence[ListedObject]) -> Steps:
    """Each listed intent as the change it asks for (parsed once per process), or why
    it cannot be applied: gone, unreadable. Reads what is not cached in parallel. One read
    that fails for now fails the attempt (:class:`~._state.Retry`), but only once every
    other answer is cached: intents are write-once, and a fold of hundreds of them would
    otherwise read again, at its next attempt, every one answered after the one that
    failed."""
    result: dict[str, Change | str] = {}
    fetch = []
    for o in todo:
        cached = core.intents.get(o.key)
        if cached is not None:
            result[o.key] = cached
        else:
            fetch.append(o.key)
    answers = (yield Parallel(tuple(Get(k) for k in fetch))) if fetch else ()
    failed: BaseException | None = None
    for key, answer in zip(fetch, answers, strict=True):
        if isinstance(answer, NotFoundError):
            result[key] = "gone: the intent object was deleted before it was applied"
            continue
        if isinstance(answer, TRANSIENT):
            failed = failed or answer
            continue
        if isinstance(answer, BaseException):
            raise answer
        try:
            change, manifest = core.objects.intent(key, answer.body, bucket=core.bucket)
        except RegistryCorruptError as error:
            result[key] = f"unreadable: {error}"
            continue
        core.objects.remember(key, manifest)
        core.intents[key] = change
        while len(core.intents) > core.schedule.intent_cache:
            core.intents.popitem(last=False)
        result[key] = change
    if failed is not None:
        raise Retry from failed
    return result


def swap(
    core: Committer, batch: Batch, doc: RegistryDoc, etag: str | None, new: RegistryDoc
) -> Steps:
    """The root's compare-and-swap (the one the core makes), from ``doc`` read with ``etag``
    to ``new``: its outcome turned into a redrive or a retry."""
    put = Put(
        core.root_key, serialize_registry(new), create=etag is None, if_match=etag, retried=False
    )
    try:
        written: PutResult = yield put
    except (PreconditionFailedError, AlreadyExistsError) as error:
        batch.redrives += 1
        core.schedule.lost_race(core.now)
        raise Redrive from error
    except (ConflictError, ThrottledError) as error:
        batch.retries += 1
        if etag is None:
            # Creating the root: the store resolves a retried compare-and-swap that met
            # a write in flight (it may be ours: OutcomeUnknownError), but leaves a
            # create to its own retries, which the root's store does not make.
            batch.unknown_base = doc.version
            batch.maybe_made.add(new.version)
        raise Retry from error
    except OutcomeUnknownError as error:
        batch.retries += 1
        batch.unknown_base = doc.version
        batch.maybe_made.add(new.version)
        raise Retry from error
    except NotFoundError as error:
        raise RegistryCorruptError(
            "the registry's root was deleted while committing; this process will not "
            "re-create it: put it back before anything commits here again (a process that "
            "finds no root refuses a lake with a version after the first, but takes one "
            "with no more than its first for a new lake), or delete the whole lake "
            "deliberately",
            bucket=core.bucket,
            key=core.root_key,
        ) from error
    core.known = (new, written.etag)
    return written
