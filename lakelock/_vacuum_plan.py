"""What vacuum may delete, as a sans-I/O computation: the reads it makes (yielded as the
commit core's requests, :mod:`lakelock._registry._core._requests`) and the decisions it takes
from them (pure functions). :func:`lakelock._vacuum.vacuum` runs it on a real store through
the core's :class:`~lakelock._registry._core.Driver`; the simulator (:mod:`lakelock._sim`)
runs the very same generator in virtual time, next to many writers.

The reads, in the order that makes vacuum safe (:func:`plan`):

1. the clock (the window's end) and the listing of every scanned prefix, page by page: an
   object written after the listing began is not a candidate at all;
2. the root, once: the intents it has not decided yet (:func:`undecided`) and the versions
   it keeps (:func:`reachable`) both come from this one document. An intent applied before
   this read is referenced by the version that applied it (current, or replaced after the
   listing began: within the window); one applied after it is undecided in it;
3. the snapshots, index nodes and manifests of the versions kept (write-once, so the order
   among them does not matter), fetched in parallel rounds where the walk misses them
   (the commit core's ``_need`` pattern: compute, and on :class:`Missing` fetch and ask again).

Then, before anything is deleted, :func:`claim` swaps the root it read for one that records
the cutoff vacuum deletes under (FORMAT.md rule 10): a writer's swap based on an older root
can no longer land, and is judged again against the cutoff. A root that moved meanwhile is
read and decided on again (:func:`decide`) before the swap is tried again.

An object of a kept version that is missing or damaged ends nothing: the walk goes on to
the versions before it (:func:`walks_past`), and what vacuum can no longer prove unneeded —
every object of that dataset, and every intent — is kept, with the reason
(:func:`unproven`, ``VacuumReport.unproven``).

Deleting is not part of the plan: the shell deletes with the store's conditional delete
(:meth:`lakelock._s3.ObjectStore.delete_if_unchanged`: ``DeleteObjects`` with per-key ETags
where honoured), the simulator with :func:`delete_steps` (one ``DeleteObject`` with
``If-Match`` per object); both book the outcome with :func:`record_deletions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from random import Random
from typing import Any, TypeVar

import tenacity

from lakelock._layout import DATASETS_PREFIX, VIEWS_PREFIX
from lakelock._registry._batch import iso
from lakelock._registry._core import _requests
from lakelock._registry._core._requests import (
    Delete,
    Get,
    List,
    Listing,
    Now,
    Parallel,
    Put,
    Sleep,
    Steps,
)
from lakelock._registry._document import (
    LAST_MODIFIED_RESOLUTION,
    REGISTRY_KEY,
    RegistryDoc,
    decode_schema,
    parse_registry,
    serialize_registry,
)
from lakelock._registry._intents import INTENT_PREFIX, is_intent, parse_intent
from lakelock._registry._manifest import MANIFEST_PREFIX, verify_manifest
from lakelock._registry._objects import Missing, Objects, missing_object, partition_from_entry
from lakelock._registry._snapshot import SNAPSHOT_PREFIX, DatasetEntry, Snapshot, verify_snapshot
from lakelock._registry._tree import NODE_PREFIX, Node, verify_node
from lakelock._retry import OutOfTime, RetryPolicy
from lakelock._s3 import ListedObject, PutResult
from lakelock.errors import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    RegistryCorruptError,
    RetryBudgetExhaustedError,
    StorageError,
    ThrottledError,
    UnsupportedError,
)

__all__ = [
    "SCANNED_PREFIXES",
    "Plan",
    "VacuumReport",
    "claim",
    "classify",
    "decide",
    "delete_steps",
    "plan",
    "reachable",
    "record_deletions",
    "undecided",
    "unproven",
    "walks_past",
]

SCANNED_PREFIXES = (
    DATASETS_PREFIX,
    MANIFEST_PREFIX,
    NODE_PREFIX,
    SNAPSHOT_PREFIX,
    INTENT_PREFIX,
    VIEWS_PREFIX,
)

_T = TypeVar("_T")

#: Most keys one delete round names (DeleteObjects' limit).
DELETE_BATCH = 1000


@dataclass
class VacuumReport:
    """What vacuum found and did. ``orphans`` are the deletable objects (deleted unless
    ``dry_run``); ``deleted`` and ``failed`` say what happened to them. ``unproven``: the
    datasets whose kept versions vacuum could not read whole, and why (every object of
    such a dataset, and every intent, was kept: counted in ``referenced``)."""

    dry_run: bool
    scanned: int = 0
    referenced: int = 0
    recent: int = 0
    orphans: list[ListedObject] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: dict[str, StorageError] = field(default_factory=dict)
    unproven: dict[str, str] = field(default_factory=dict)

    @property
    def orphan_bytes(self) -> int:
        return sum(o.size for o in self.orphans)


@dataclass(frozen=True)
class Plan:
    """What vacuum read: its clock when it began (``now``, seconds since the epoch), the
    objects listed, the root, the keys it must keep (undecided intents, everything the
    kept versions reach, and what it could not prove unneeded), each dataset's oldest
    version kept (the views keep theirs) and why it could not prove some (``unproven``:
    dataset -> reason)."""

    now: float
    listed: tuple[ListedObject, ...]
    doc: RegistryDoc
    protected: frozenset[str]
    oldest: Mapping[str, int]
    unproven: Mapping[str, str] = field(default_factory=dict)
    #: The root's ETag as read (``None``: there was none), what :func:`claim` swaps on.
    etag: str | None = None
    #: What the walk read, for :func:`claim` to decide again on a newer root.
    known: Known | None = field(default=None, repr=False, compare=False)


# -- the decisions (pure) ------------------------------------------------------------------------


def undecided(doc: RegistryDoc, listed: Iterable[ListedObject], *, since: float) -> set[str]:
    """The listed intents whose fate ``doc`` does not record and that may still be applied:
    those above the watermark (the next fold may apply them), and those below it written
    after ``since`` (seconds since the epoch, the listing's server time): a fold passed them
    over (their PUT landed after its LIST) and their writers apply them in their own swaps.
    With ``since`` at least the intent TTL ago, every one still in use."""
    if doc.format_version == 1:
        return set()
    decided = {f.key for f in doc.fates}
    return {
        o.key
        for o in listed
        if is_intent(o.key)
        and o.key not in decided
        and (o.key > doc.watermark or o.last_modified.timestamp() > since)
    }


class Known:
    """The objects vacuum has read (parsed once, kept for the whole run: the walk asks again
    from the start after every round of fetches, so nothing it needs may be evicted) and the
    keys found missing. ``cache``: a shared cache consulted first, without I/O (a lake's warm
    :class:`~lakelock._registry._objects.Objects`). A key neither known nor missing raises
    :class:`Missing`. ``broken``: keys whose bytes did not verify; ``damage``: per dataset,
    why the walk of its kept versions could not read them whole."""

    def __init__(self, bucket: str | None, cache: Objects | None = None) -> None:
        self.bucket = bucket
        self.cache = cache.offline() if cache is not None else None
        self.found: dict[str, Any] = {}
        self.gone: dict[str, NotFoundError] = {}
        self.broken: dict[str, RegistryCorruptError] = {}
        self.damage: dict[str, str] = {}
        self._leaves: dict[str, tuple[str, ...]] = {}

    def load(self, key: str, body: bytes) -> None:
        bucket = self.bucket
        if key.startswith(NODE_PREFIX):
            self.found[key] = verify_node(key, body, bucket=bucket)
        elif key.startswith(SNAPSHOT_PREFIX):
            self.found[key] = verify_snapshot(key, body, decode_schema, bucket=bucket)
        elif is_intent(key):
            self.found[key] = tuple(f.key for f in parse_intent(key, body, bucket=bucket)[1].files)
        else:
            self.found[key] = tuple(f.key for f in verify_manifest(key, body, bucket=bucket).files)

    def _get(self, key: str, shared: Callable[[Objects], Any]) -> Any:
        found = self.found.get(key)
        if found is not None:
            return found
        error = self.gone.get(key)
        if error is not None:
            raise missing_object(key, self.bucket, None) from error
        damaged = self.broken.get(key)
        if damaged is not None:
            raise damaged
        if self.cache is not None:
            try:
                return shared(self.cache)
            except Missing:
                pass
        raise Missing((key,))

    def node(self, key: str) -> Node:
        node: Node = self._get(key, lambda c: c.node(key))
        return node

    def leaf_manifests(self, key: str, leaf: Node) -> tuple[str, ...]:
        """The manifests a leaf of a partitions tree refers to (kept per leaf key, or
        snapshot key for a top inline in it: the walk asks again after every round)."""
        found = self._leaves.get(key)
        if found is None:
            found = self._leaves[key] = tuple(
                m.key
                for path, raw in leaf.entries.items()
                for m in partition_from_entry(path, raw).manifests
            )
        return found

    def snapshot(self, key: str) -> Snapshot:
        snap: Snapshot = self._get(key, lambda c: c.snapshot(key))
        return snap

    def files(self, keys: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The file keys each manifest (or applied intent) of ``keys`` lists; every key not
        known in one :class:`Missing`."""
        found: dict[str, tuple[str, ...]] = {}
        missing: list[str] = []
        for key in keys:

            def shared(cache: Objects, key: str = key) -> Any:
                return cache.manifest(key)

            try:
                files = self._get(key, shared)
            except Missing:
                missing.append(key)
                continue
            found[key] = files if isinstance(files, tuple) else tuple(f.key for f in files.files)
        if missing:
            raise Missing(tuple(missing))
        return found


def reachable(doc: RegistryDoc, known: Known, *, cutoff: float) -> set[str]:
    """Every object a reader of a version current at or after ``cutoff`` (seconds since the
    epoch) can need (module docstring of :mod:`lakelock._vacuum`). Raises :class:`Missing`
    for objects not read yet (all those of one level of a walk at once)."""
    if doc.format_version == 1:
        return _reachable_format1(doc, known, cutoff=cutoff)
    keep: set[str] = set()
    missing: list[str] = []
    for name, entry in doc.entries.items():
        try:
            keep |= _reachable_entry(name, entry, known, cutoff=cutoff)
        except Missing as miss:
            missing += miss.keys
    if missing:
        raise Missing(tuple(dict.fromkeys(missing)))
    return keep


def _reachable_entry(name: str, entry: DatasetEntry, known: Known, *, cutoff: float) -> set[str]:
    """The snapshots of the versions kept (:func:`_walk_kept`), their index nodes,
    manifests and data files."""
    seen: set[str] = set()
    found = _walk_kept(
        name, entry, known, cutoff, lambda key, snap: {key} | _tree_objects(key, snap, known, seen)
    )
    return set().union(*found)


def _walk_kept(
    name: str,
    entry: DatasetEntry,
    known: Known,
    cutoff: float,
    visit: Callable[[str, Snapshot], _T],
) -> list[_T]:
    """``visit`` of the current snapshot and of each older one that was still current at
    ``cutoff`` or later (its successor was committed at or after ``cutoff``), newest first.
    A version whose objects are missing or damaged is noted in ``known.damage`` (what it
    reaches cannot be proven unneeded: :func:`unproven`) and the walk goes on to its parent
    (:func:`walks_past`); only a snapshot that cannot be read ends it, as its parent is
    unknown."""
    visited: list[_T] = []
    successor_at: float | None = None
    key: str | None = entry.snapshot
    while key is not None and (successor_at is None or successor_at >= cutoff):
        try:
            snap = known.snapshot(key)
        except RegistryCorruptError as error:
            _note_damage(known, name, entry, key, error)
            break
        try:
            visited.append(visit(key, snap))
        except RegistryCorruptError as error:
            _note_damage(known, name, entry, key, error)
            if not walks_past(error):
                break
        successor_at, key = snap.at, snap.parent
    return visited


def walks_past(error: RegistryCorruptError) -> bool:
    """Rule (FORMAT.md, "Retention and vacuum"): a kept version with a missing or damaged
    object does not end the walk of the kept versions: its snapshot names its parent, and
    every version current within the window is kept whatever a newer one lost (a late
    writer's deleted manifest, a damaged node). Ending it there left every older version
    within the retention to be deleted."""
    return True


def _note_damage(
    known: Known, name: str, entry: DatasetEntry, key: str, error: RegistryCorruptError
) -> None:
    version = f"the version of snapshot {key}"
    if entry.snapshot == key:
        version = f"the current version (snapshot {key})"
    known.damage.setdefault(name, f"{version} cannot be read whole: {error}")


def unproven(listed: Iterable[ListedObject], damage: Mapping[str, str]) -> set[str]:
    """Rule (FORMAT.md, "Retention and vacuum"): what vacuum keeps because it cannot prove
    it unneeded. A dataset whose kept versions it could not read whole (``damage``) may
    reach any of its objects through what is missing, and any intent may be one of its
    manifests: every listed object of the dataset (its data files, snapshots, nodes,
    manifests and views) and every intent is kept."""
    if not damage:
        return set()
    prefixes = tuple(
        f"{top}{name}/"
        for name in damage
        for top in (DATASETS_PREFIX, MANIFEST_PREFIX, NODE_PREFIX, SNAPSHOT_PREFIX, VIEWS_PREFIX)
    )
    return {o.key for o in listed if o.key.startswith(prefixes) or is_intent(o.key)}


def _tree_objects(key: str, snap: Snapshot, known: Known, seen: set[str]) -> set[str]:
    """The nodes of a snapshot's two trees not below a node in ``seen`` (a subtree shared
    with a newer version was collected with it), its manifests and their files."""
    found: set[str] = set()
    manifests: set[str] = set()
    for leaf_key, leaf in _new_leaves(snap.partitions, known, seen, found):
        manifests.update(known.leaf_manifests(leaf_key or f"{key}#top", leaf))
    for _ in _new_leaves(snap.commit_ids, known, seen, found):
        pass
    found |= manifests
    for files in known.files(sorted(manifests)).values():
        found.update(files)
    return found


def _new_leaves(
    top: Node, known: Known, seen: set[str], found: set[str]
) -> Iterator[tuple[str | None, Node]]:
    """The leaves of a tree (and their keys; ``None``: the top, inline in its snapshot),
    level by level; the nodes of one level not read yet are one :class:`Missing` (one
    parallel round of GETs, not one GET at a time)."""
    level: list[tuple[str | None, Node]] = [(None, top)]
    while level:
        below: list[tuple[str | None, Node]] = []
        missing: list[str] = []
        for key, node in level:
            if not node.is_branch:
                yield key, node
                continue
            for ref in node.children.values():
                if ref.key in seen:
                    continue
                try:
                    below.append((ref.key, known.node(ref.key)))
                except Missing:
                    missing.append(ref.key)
                    continue
                seen.add(ref.key)
                found.add(ref.key)
        if missing:
            raise Missing(tuple(missing))
        level = below


def _reachable_format1(doc: RegistryDoc, known: Known, *, cutoff: float) -> set[str]:
    """Format 1: the current manifests and their files, and the manifests retired within the
    window and theirs (one already deleted by an earlier vacuum protects nothing)."""
    manifests = {
        ref.key
        for dataset in doc.datasets.values()
        for partition in dataset.partitions.values()
        for ref in partition.manifests
    }
    keep = set(manifests)
    for files in known.files(sorted(manifests)).values():
        keep.update(files)
    retired = [r.key for r in doc.retired if r.at >= cutoff and r.key not in keep]
    keep.update(retired)
    present = [k for k in dict.fromkeys(retired) if k not in known.gone]
    for files in known.files(present).values():
        keep.update(files)
    return keep


def oldest_kept(doc: RegistryDoc, known: Known, *, cutoff: float) -> dict[str, int]:
    """Each dataset's oldest version vacuum keeps (the snapshots of the walk of
    :func:`reachable`; the views keep the objects of every version from it on)."""
    if doc.format_version == 1:
        return {}
    oldest: dict[str, int] = {}
    for name, entry in doc.entries.items():
        versions = _walk_kept(name, entry, known, cutoff, lambda _, snap: snap.version)
        if versions:
            oldest[name] = versions[-1]
    return oldest


def classify(
    listed: Iterable[ListedObject], protected: Iterable[str], *, cutoff: float, dry_run: bool
) -> VacuumReport:
    """Each listed object is referenced (in ``protected``), recent (modified after
    ``cutoff``) or an orphan."""
    keep = protected if isinstance(protected, set | frozenset) else set(protected)
    report = VacuumReport(dry_run=dry_run)
    for obj in listed:
        report.scanned += 1
        if obj.key in keep:
            report.referenced += 1
        elif obj.last_modified.timestamp() > cutoff:
            report.recent += 1
        else:
            report.orphans.append(obj)
    return report


# -- the reads (a generator of the core's requests) ----------------------------------------------


def plan(
    *,
    older_than: float,
    intent_ttl: float,
    bucket: str | None,
    cache: Objects | None = None,
    root_name: str = REGISTRY_KEY,
    prefixes: Sequence[str] = SCANNED_PREFIXES,
    listing: Callable[[int], None] | None = None,
) -> Steps:
    """Read what vacuum needs, in the safe order (module docstring); returns a :class:`Plan`.
    ``listing`` is told how many objects have been listed (every 1000, and at the end)."""
    now: float = yield Now()
    listed: list[ListedObject] = []
    for prefix in prefixes:
        start = ""
        while True:
            page: Listing = yield List(prefix, start_after=start)
            for obj in page.objects:
                listed.append(obj)
                if listing is not None and len(listed) % 1000 == 0:
                    listing(len(listed))
            if not page.truncated or not page.objects:
                break
            if page.objects[-1].key <= start:
                raise UnsupportedError(
                    f"the store listed {prefix!r} from its start again when asked for the keys "
                    f"after {start!r}: it ignores ListObjectsV2's StartAfter, which lakelock "
                    "needs (`lakelock doctor` checks a store)",
                    bucket=bucket or "",
                    key=prefix,
                    operation="ListObjectsV2",
                )
            start = page.objects[-1].key
    if listing is not None:
        listing(len(listed))
    root = yield from read_root(bucket, root_name)
    known = Known(bucket, cache)
    if root[1] is None:
        yield from _no_root_lost(listed, known, bucket=bucket, root_name=root_name)
    return (
        yield from decide(
            now, tuple(listed), root, known, older_than=older_than, intent_ttl=intent_ttl
        )
    )


#: Snapshots read at once while looking for a sign that a lake with no root had one.
_LOST_ROOT_READS = 64


def _no_root_lost(
    listed: Sequence[ListedObject], known: Known, *, bucket: str | None, root_name: str
) -> Steps:
    """Refuse to vacuum a lake whose root is gone but existed (``RegistryCorruptError``).
    With no root every listed object is unreferenced, which is true of a lake whose first
    commit never landed (its snapshots are of version 1: no root was read to write them),
    and false of one whose root was deleted: a snapshot of a later version was written by a
    commit on a root, and the snapshots left describe every version vacuum would take.
    Read a few at a time, stopping at the first such one (a lake with no root has few)."""
    keys = [o.key for o in listed if o.key.startswith(SNAPSHOT_PREFIX)]
    for start in range(0, len(keys), _LOST_ROOT_READS):
        chunk = keys[start : start + _LOST_ROOT_READS]

        def later(chunk: Sequence[str] = chunk) -> list[Snapshot]:
            found: list[Snapshot] = []
            missing: list[str] = []
            for key in chunk:
                try:
                    snap = known.snapshot(key)
                except Missing as error:
                    missing.extend(error.keys)
                    continue
                except RegistryCorruptError:  # gone or damaged since the listing: no sign
                    continue
                if snap.version > 1:
                    found.append(snap)
            if missing:
                raise Missing(tuple(missing))
            return found

        found: list[Snapshot] = yield from need(later, known)
        if found:
            snap = found[0]
            raise RegistryCorruptError(
                f"the registry's root {root_name} is missing, but version {snap.version} of "
                f"dataset {snap.dataset!r} exists ({len(keys)} snapshots in all), written by "
                "a commit on a root: with no root vacuum would take every version the lake "
                "had as unreferenced, so it deletes nothing. Put the root back (a version "
                "the bucket keeps of it, or a backup) before vacuuming",
                bucket=bucket,
                key=root_name,
            )


def decide(
    now: float,
    listed: tuple[ListedObject, ...],
    root: tuple[RegistryDoc, str | None],
    known: Known,
    *,
    older_than: float,
    intent_ttl: float,
) -> Steps:
    """What to keep of ``listed`` by the root ``root`` (the document and its ETag), reading
    the objects of the versions it keeps that ``known`` lacks; returns a :class:`Plan`."""
    doc, etag = root
    cutoff = now - older_than
    kept = yield from need(lambda: reachable(doc, known, cutoff=cutoff), known)
    oldest = yield from need(lambda: oldest_kept(doc, known, cutoff=cutoff), known)
    damage = dict(known.damage)
    protected = undecided(doc, listed, since=now - intent_ttl) | kept | unproven(listed, damage)
    return Plan(now, listed, doc, frozenset(protected), oldest, damage, etag, known)


def read_root(bucket: str | None, root_name: str = REGISTRY_KEY) -> Steps:
    """The root as it is now and its ETag (an empty registry and ``None`` where there is
    none); ``root_name``: its full key, for errors."""
    try:
        data = yield Get(REGISTRY_KEY)
    except NotFoundError as error:
        if error.code == "NoSuchBucket":
            raise
        return RegistryDoc(), None
    return parse_registry(data.body, bucket=bucket, key=root_name), data.etag


class _Moved(Exception):
    """The root moved before vacuum's compare-and-swap landed: decided again, try again."""


def claim(
    found: Plan,
    *,
    older_than: float,
    intent_ttl: float,
    retry: RetryPolicy,
    bucket: str | None,
    root_name: str = REGISTRY_KEY,
    rng: Random | None = None,
) -> Steps:
    """Rule (FORMAT.md rule 10, ``claim``): before it deletes anything, vacuum moves the
    root by a compare-and-swap based on the very root its plan read, recording the cutoff
    it deletes under (``vacuum_cutoff``: the newest ``LastModified`` of an orphan, by the
    server's clock, plus a second: :func:`recorded_cutoff`; never lowered) and where its
    window began (``vacuum_horizon``: it keeps no version replaced before then; never
    lowered, and FORMAT.md rule 9 refuses restoring or reading such a version). Every swap
    based on an older root then fails its ``If-Match`` and its
    writer reads the root again, where rule 10 refuses what it wrote before the cutoff: a
    writer paused between its last check and its swap can no longer land a version
    referencing what vacuum deletes. A root that moved since the plan read it (a commit
    landed: it may reference what the plan found orphaned) is read again and the plan
    decided again on it (the listing and the window stay), within ``retry``'s budget
    (:class:`~lakelock.errors.RetryBudgetExhaustedError`: nothing deleted). A swap whose
    outcome is unknown is read back: the root holding our bytes is ours (had it landed
    later, it moved nothing but the root). Returns the plan to delete by, its ``doc`` the
    root swapped in. A format-1 root is moved too, kept in format 1 (which has no field for
    the cutoff): the commit that upgrades it swaps on its ETag, so a writer paused before
    that swap must fail its ``If-Match`` like any other; its next attempt, on the moved
    root, is refused by the floor (rule 10's check by the root's ``Date``)."""
    slept: list[float] = []
    started = clock = yield Now()
    jitter = rng if rng is not None else Random()
    # The policy's budget and full-jitter backoff, drawn from ``rng`` (the simulator's seed)
    # and slept through the driver, in whatever time it runs.
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(retry.max_attempts)
        | OutOfTime(lambda: clock - started, retry.max_elapsed),
        wait=lambda state: jitter.uniform(
            0.0, min(retry.max_backoff, retry.initial_backoff * 2**state.attempt_number)
        ),
        retry=tenacity.retry_if_exception_type(_Moved),
        sleep=slept.append,
        reraise=True,
    )
    attempts = 0
    try:
        for attempt in retrying:
            if slept:
                yield Sleep(slept.pop())
                clock = yield Now()
            with attempt:
                attempts += 1
                found, landed = yield from _claim_once(
                    found,
                    older_than=older_than,
                    intent_ttl=intent_ttl,
                    bucket=bucket,
                    root_name=root_name,
                )
                if not landed:
                    raise _Moved
    except _Moved as error:
        raise RetryBudgetExhaustedError(
            f"vacuum deleted nothing: the root moved under each of its {attempts} attempts "
            "to record the cutoff it deletes under (FORMAT.md rule 10); run it again when "
            "the lake is quieter",
            attempts=attempts,
            seconds=clock - started,
        ) from error
    return found


def recorded_cutoff(found: Plan, *, older_than: float) -> float | None:
    """The cutoff :func:`claim` records: the newest ``LastModified`` among what ``found``
    may delete (by the server's clock, not vacuum's, which may run ahead of it), plus
    :data:`LAST_MODIFIED_RESOLUTION` (``None``: it deletes nothing)."""
    window_end = found.now - older_than
    newest = max(
        (
            at
            for o in found.listed
            if o.key not in found.protected and (at := o.last_modified.timestamp()) <= window_end
        ),
        default=None,
    )
    return None if newest is None else newest + LAST_MODIFIED_RESOLUTION


def _claim_once(
    found: Plan, *, older_than: float, intent_ttl: float, bucket: str | None, root_name: str
) -> Steps:
    """One compare-and-swap of :func:`claim`: the plan to delete by and ``True``, or
    ``found`` decided again on the root as it is now and ``False``."""
    doc = found.doc
    cutoffs = (recorded_cutoff(found, older_than=older_than), doc.vacuum_cutoff)
    cutoff = max((c for c in cutoffs if c is not None), default=None)
    # Where its window began, which no later retention brings back (rule 9, ``restore_end``).
    horizons = (found.now - older_than, doc.vacuum_horizon)
    horizon = max(h for h in horizons if h is not None)
    ours = replace(
        doc,
        version=doc.version + 1,
        vacuum_cutoff=cutoff,
        vacuum_horizon=horizon,
        updated_at=iso(found.now),
    )
    body = serialize_registry(ours)
    put = Put(REGISTRY_KEY, body, create=found.etag is None, if_match=found.etag, retried=False)
    try:
        written: PutResult = yield put
        return replace(found, doc=ours, etag=written.etag), True
    except (
        PreconditionFailedError,
        AlreadyExistsError,
        ConflictError,
        ThrottledError,
        OutcomeUnknownError,
    ):
        pass  # lost the race, or may have: read the root
    except NotFoundError as error:
        raise RegistryCorruptError(
            "the registry was deleted while vacuum recorded its cutoff in it; vacuum deleted "
            "nothing (restore it, or delete the whole lake deliberately)",
            bucket=bucket,
            key=root_name,
        ) from error
    try:
        data = yield Get(REGISTRY_KEY)
    except NotFoundError:
        now_root: tuple[RegistryDoc, str | None] = (RegistryDoc(), None)
    else:
        if data.body == body:  # our swap landed (its answer was lost)
            return replace(found, doc=ours, etag=data.etag), True
        now_root = (parse_registry(data.body, bucket=bucket, key=root_name), data.etag)
    known = found.known if found.known is not None else Known(bucket)
    again = yield from decide(
        found.now, found.listed, now_root, known, older_than=older_than, intent_ttl=intent_ttl
    )
    return again, False


def need(compute: Callable[[], Any], known: Known) -> Steps:
    """``compute()``, fetching in parallel whatever objects it misses (it is pure: asked
    again once they are known). A key not found is remembered as gone (the walk decides
    whether that is corruption or an older version vacuumed already)."""

    def take(key: str, answer: Any) -> None:
        if isinstance(answer, NotFoundError):
            known.gone[key] = answer
        elif isinstance(answer, BaseException):
            raise answer
        else:
            try:
                known.load(key, answer.body)
            except RegistryCorruptError as error:
                known.broken[key] = error

    return (yield from _requests.fetching(compute, take))


# -- deleting ------------------------------------------------------------------------------------


def record_deletions(
    report: VacuumReport,
    batch: Sequence[ListedObject],
    results: Mapping[str, StorageError | None],
) -> None:
    """Book what a conditional delete of ``batch`` did: ``None`` deleted, an error failed
    (replaced since, gone already, refused); a key with no result was not attempted."""
    for obj in batch:
        error = results.get(obj.key)
        if error is None and obj.key in results:
            report.deleted.append(obj.key)
        elif error is not None:
            report.failed[obj.key] = error


def delete_steps(report: VacuumReport, progress: Callable[[int, int], None] | None = None) -> Steps:
    """Delete ``report``'s orphans, each only if its ETag is still the one listed: one
    ``DeleteObject`` with ``If-Match`` per object, a round of up to 1000 at once (the
    simulator's vacuum; the shell uses the store's batch delete where it is honoured)."""
    total = len(report.orphans)
    for start in range(0, total, DELETE_BATCH):
        batch = report.orphans[start : start + DELETE_BATCH]
        answers = yield Parallel(tuple(Delete(o.key, if_match=o.etag) for o in batch))
        results: dict[str, StorageError | None] = {}
        for obj, answer in zip(batch, answers, strict=True):
            if isinstance(answer, StorageError):
                results[obj.key] = answer
            elif isinstance(answer, BaseException):
                raise answer
            else:
                results[obj.key] = None
        record_deletions(report, batch, results)
        if progress is not None:
            progress(start + len(batch), total)
    return report
