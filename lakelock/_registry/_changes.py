"""Commits as pure transforms of the registry document.

A :class:`Change` is what one ``registry.commit(...)`` asks for. :func:`apply_change` checks it
against a document and returns the changed document plus the manifests that must be written
first; it is re-run from scratch on every redrive, so a check that passed against an old
document is checked again against the new one (a file removed meanwhile makes the commit a
conflict, not a silent success). :func:`seal` closes a batch of changes into one new version.

Checks (each a :class:`~lakelock.errors.CommitConflictError` unless said otherwise):

- fencing: a lease token below the highest recorded for its name, or a path-lock grant
  superseded by a recorded conflicting grant or whose write lock in force ended →
  :class:`~lakelock.errors.StaleFenceError`
  (:mod:`._fencing` has the rules); otherwise the fence is recorded;
- ``partition_by`` must match the dataset's
  (:class:`~lakelock.errors.PartitionByMismatchError`); every added file must sit in a
  partition path with exactly those columns, under the committed dataset;
- schema: a field present on both sides must keep its type (no widening); a field the
  change lacks must be nullable (its rows read as null; the dataset's schema keeps it); a
  field the dataset lacks must be nullable and is refused unless ``schema_mode="merge"``,
  which adds it and bumps ``schema_version`` (:class:`~lakelock.errors.SchemaMismatchError`
  otherwise; a renamed column is a missing one plus a new one);
- every removed file must be registered; adding the very same set of files to a partition
  twice (the same delta manifest) is refused;
- ``remove_partitions`` removes every file of every partition at or under the given paths
  (``"year=2024"`` covers its months; ``""`` every partition) *in the document the change is
  applied to*: on a redrive, files and partitions another commit added meanwhile go too (what
  overwrite and delete mean). A path matching nothing removes nothing; files the same change
  adds stay;
- ``restore`` makes an older version of the dataset current again (its schema, partitions
  and properties; the commit-id history stays and records the restore).

A new dataset takes ``partition_by`` from the change, or else from the partition paths of the
files it adds (which must agree).

Nothing here does I/O: manifests a change needs (for removals and consolidation) are loaded by
the caller, who asks :func:`manifests_needed` first.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal, TypeVar

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._digest import comparable
from lakelock._fence import Fence
from lakelock._layout import files_prefix
from lakelock._names import clashing_names
from lakelock._registry import _fencing
from lakelock._registry._document import (
    CommitRecord,
    DatasetState,
    ManifestRef,
    PartitionState,
    RegistryDoc,
)
from lakelock._registry._fencing import (
    LOCK,
    TAKEOVER,
    UNLOCK,
    check_write_locks,
    record_fence,
    unfenced_writes,
)
from lakelock._registry._manifest import (
    Manifest,
    manifest_digest,
    manifest_key,
    parse_manifest,
    partition_parts,
    serialize_manifest,
)
from lakelock._registry._snapshot import Overlay, SnapshotCommit, Totals
from lakelock.errors import (
    CommitConflictError,
    CommitIdReusedError,
    InvalidArgumentError,
    PartitionByMismatchError,
    SchemaMismatchError,
)

__all__ = [
    "HARD_MAX_MANIFESTS_PER_PARTITION",
    "MAX_MANIFESTS_PER_PARTITION",
    "Applied",
    "Change",
    "Fence",
    "Group",
    "SchemaMode",
    "apply_change",
    "check_fits",
    "check_partition_by",
    "checked_schema_mode",
    "delta_manifests",
    "evolve_schema",
    "is_takeover",
    "makes_version",
    "manifests_needed",
    "new_commit_id",
    "oldest_write",
    "other_datasets",
    "partition_of_key",
    "removed_partitions",
    "reused_commit_id",
    "reused_for_datasets",
    "seal",
    "takeover",
    "totals_of",
    "window_kept",
    "with_dataset",
    "written_paths",
]


#: How a commit treats columns its schema brings that the dataset lacks: ``None`` refuses
#: them (:class:`~lakelock.errors.SchemaMismatchError`), ``"merge"`` adds them to its schema.
SchemaMode = Literal["merge"] | None


def checked_schema_mode(mode: object) -> SchemaMode:
    """``mode`` as a :data:`SchemaMode`; anything else is
    :class:`~lakelock.errors.InvalidArgumentError`."""
    if mode is None:
        return None
    if mode != "merge":
        raise InvalidArgumentError(mode, "None (refuse new columns) or 'merge'", what="schema_mode")
    return "merge"


#: A partition with more manifests than this is consolidated into one by the next commit
#: touching it whose committer has them all at hand (cached: no GET), so reading a partition
#: costs a bounded number of GETs ...
MAX_MANIFESTS_PER_PARTITION = 16
#: ... and past this many, by the next commit touching it whatever that costs. Between the
#: two, a committer folding other processes' intents leaves the partition to its own writer,
#: who made (and so holds) most of its manifests.
HARD_MAX_MANIFESTS_PER_PARTITION = 2 * MAX_MANIFESTS_PER_PARTITION


def oldest_write(change: Change) -> float | None:
    """When the oldest file ``change`` adds was written (server time, or a little before:
    ``Change.written``, else its files' ``DataFile.written_at``); ``None``: unknown (files
    registered without a write time), not checked against the vacuum floor."""
    if change.written is not None:
        return change.written
    return min((f.written_at for f in change.add if f.written_at is not None), default=None)


def new_commit_id(seconds: float, *, token: str) -> str:
    """A commit id for a caller that chose none: 32 hex digits, the first 12 the time
    (milliseconds since the epoch: ``seconds``), the rest ``token`` (20 random hex digits).
    Ids made later sort later, so each dataset's commit-id index (an ordered tree) grows at
    its right edge. The registry is the one generator (its clock, the commit core's
    randomness: ``Registry._new_commit_id``); this is their shape."""
    return f"{int(seconds * 1000) & 0xFFFFFFFFFFFF:012x}{token}"


@dataclass(frozen=True)
class Group:
    """The commit an intent is one part of, when that commit spans datasets: one intent per
    dataset, all carrying the same ``id`` (random: no other commit's intents carry it) and
    the commit's ``datasets``. A fold applies them together or not at all (FORMAT.md rule
    16)."""

    id: str
    datasets: tuple[str, ...]


@dataclass(frozen=True)
class Change:
    """One commit request. ``added_manifests`` maps a partition path to the prepared delta
    manifest holding exactly the files of ``add`` in that partition (see
    :func:`delta_manifests`); ``remove`` holds keys of registered files."""

    dataset: str
    commit_id: str
    add: tuple[DataFile, ...] = ()
    added_manifests: Mapping[str, ManifestRef] = field(default_factory=dict)
    remove: tuple[str, ...] = ()
    schema: pa.Schema | None = None
    partition_by: tuple[str, ...] | None = None
    properties: Mapping[str, str | None] | None = None
    fence: Fence | None = None
    remove_partitions: tuple[str, ...] = ()
    operation: str = "commit"
    restore: DatasetState | None = None
    # The commit id was made up by lakelock (new_commit_id), not chosen by the caller: no other
    # commit can carry it, so the intent's fate alone says whether it was applied.
    generated_id: bool = False
    # "merge": columns the dataset lacks join its schema; None: they are refused.
    schema_mode: str | None = None
    # When its oldest added file was written, by the server's clock or a little before (an
    # intent of another process says so; None: see oldest_write).
    written: float | None = None
    # What the change commits, by content (lakelock._digest.change_digest): a commit id found
    # recorded with another digest belongs to another change (reused_commit_id). None: unknown.
    digest: str | None = None
    # A restore: when its version leaves the retention (its successor's commit time plus the
    # retention), after which vacuum may delete what it references (FORMAT.md rule 9).
    restore_until: float | None = None
    # A restore: its version's successor's commit time (when the version was replaced), from
    # which whoever applies the restore measures the retention of the root it applies on: the
    # lake's retention may have shrunk since ``restore_until`` was reckoned (FORMAT.md rule 9).
    # None: the current version, or an intent of a writer that did not record it.
    restore_since: float | None = None
    # The added files existed before this commit (``registry.commit`` of files written
    # earlier): one already live in the dataset is refused (FORMAT.md rule 14), which reads
    # the manifests of the partitions they join. lakelock's own operations add files they
    # have just created by create-only PUTs, which cannot be live, and skip those reads.
    existing_files: bool = False
    # The version of the dataset the change was planned on: it applies only while the
    # dataset's ``updated_version`` is still this (0: only while the dataset does not exist),
    # else it is refused (FORMAT.md rule 15). None: on whatever version is current.
    on_version: int | None = None
    # A restore read from another process's intent names the snapshot of the version it
    # makes current; the committer that applies it loads that version into ``restore``.
    restore_from: str | None = None
    # One part of an intent group (a commit spanning datasets, read from its intents).
    group: Group | None = None
    # The key of the intent that makes this commit (a commit spanning datasets: its first,
    # the same in every change of it), recorded with its commit id so that whoever finds
    # the id recorded tells its own commit from another under the id (FORMAT.md rule 2).
    # None: a commit written as no intent (a restore of a format-1 lake).
    intent: str | None = None

    @property
    def restoring(self) -> bool:
        """Whether this is a restore (its version loaded or only named)."""
        return self.restore is not None or self.restore_from is not None


@dataclass(frozen=True)
class Applied:
    doc: RegistryDoc
    writes: tuple[tuple[str, bytes], ...]  # manifests to create before the root CAS
    added: int
    removed: int
    #: The manifests of ``writes`` (consolidations), by key, equal to what parsing their
    #: bytes gives: a later commit of the batch on the same partition reads them from the
    #: cache (they do not exist until the swap), and parsing a busy partition's thousands
    #: of files again was a sixth of a long simulated run.
    manifests: tuple[tuple[str, Manifest], ...] = ()


def delta_manifests(
    dataset: str, files: Iterable[DataFile], *, nonce: str
) -> dict[str, tuple[ManifestRef, bytes]]:
    """Per partition, the reference to the manifest of the added files, and its bytes (see
    :func:`~lakelock._registry._manifest.manifest_key` for ``nonce``). Files of one
    partition get a manifest of that partition; files of several share one manifest (one
    PUT however many partitions a commit touches), each partition's reference counting its
    own files."""
    by_partition: dict[str, list[DataFile]] = {}
    for f in files:
        by_partition.setdefault(f.partition_path, []).append(f)
    everything = tuple(sorted((f for g in by_partition.values() for f in g), key=lambda f: f.key))
    if len(by_partition) == 1:
        (path,) = by_partition
        body = serialize_manifest(Manifest(dataset, path, everything))
        return {path: (_ref(dataset, everything, body, nonce), body)}
    body = serialize_manifest(Manifest(dataset, None, everything))
    key = manifest_key(dataset, body, nonce)
    parts = partition_parts(body, everything)  # a reader of one partition reads its part
    return {
        path: (
            ManifestRef(
                key=key,
                files=len(group),
                records=sum(f.record_count for f in group),
                size=sum(f.size for f in group),
                part=parts.get(path),
            ),
            body,
        )
        for path, group in by_partition.items()
    }


def _ref(dataset: str, files: tuple[DataFile, ...], body: bytes, nonce: str) -> ManifestRef:
    return ManifestRef(
        key=manifest_key(dataset, body, nonce),
        files=len(files),
        records=sum(f.record_count for f in files),
        size=sum(f.size for f in files),
    )


def partition_of_key(dataset: str, key: str) -> str:
    """The partition path of a data file key ``datasets/<dataset>/<partition>/<name>``."""
    prefix = files_prefix(dataset)
    if not key.startswith(prefix):
        raise CommitConflictError(f"{key!r} is not a file of dataset {dataset!r}", dataset=dataset)
    rest = key[len(prefix) :]
    return rest.rsplit("/", 1)[0] if "/" in rest else ""


def written_paths(change: Change) -> tuple[str, ...]:
    """The paths (as the path lock names them) ``change`` writes: each partition it adds
    files to or removes from, or the whole dataset (``/<dataset>``) for a restore, a removal
    of every partition, or a change of the dataset alone (its schema, its properties); none
    for a dataset it only reads."""
    root = f"/{change.dataset}"
    if change.restoring or "" in change.remove_partitions:
        return (root,)
    partitions = {f.partition_path for f in change.add} | set(change.remove_partitions)
    prefix = files_prefix(change.dataset)
    for key in change.remove:  # a key of another dataset is refused later, as a conflict
        if key.startswith(prefix):
            partitions.add(partition_of_key(change.dataset, key))
    if not partitions:
        return () if _fence_only(change) else (root,)
    return tuple(sorted(f"{root}/{p}" if p else root for p in partitions))


def check_fence_writes(change: Change, *, before_files: bool = False) -> None:
    """Refuse (:class:`~lakelock.errors.InvalidArgumentError`, nothing committed) a change
    whose path-lock fence holds what it writes only for reading (FORMAT.md, "Write locks in
    force"): a read grant's fence would carry it as if the path were held exclusively
    (:func:`~lakelock._registry._fencing.unfenced_writes`). ``before_files``: an
    operation's check before its first data PUT, whose partitions are not known yet: a
    fence that writes no path at all is refused then."""
    fence = change.fence
    if fence is None or not fence.hierarchical:
        return
    unfenced: tuple[str, ...]
    if before_files:
        unfenced = () if fence.write else (f"/{change.dataset}",)
    else:
        unfenced = unfenced_writes(written_paths(change), fence)
    if not unfenced:
        return
    held = f"writes {list(fence.write)}" if fence.write else f"only reads {list(fence.read)}"
    raise InvalidArgumentError(
        fence,
        f"the fence of lock grant {fence.token} on {fence.name!r} {held}, and this commit "
        f"writes {list(unfenced)}: a read lock's fence does not fence a write (take the lock "
        "with write=[...] over those paths)",
        what="fence",
    )


def manifests_needed(
    doc: RegistryDoc, change: Change, *, max_manifests: int = MAX_MANIFESTS_PER_PARTITION
) -> set[str]:
    """Keys of the manifests :func:`apply_change` will need: every manifest of a partition
    that loses files or that has grown past ``max_manifests``."""
    dataset = doc.datasets.get(change.dataset)
    if dataset is None:
        return set()
    paths = {partition_of_key(change.dataset, key) for key in change.remove}
    paths.update(removed_partitions(dataset.partitions, change, len(dataset.partition_by)))
    if change.existing_files:
        paths.update(change.added_manifests)  # the files they hold: rule 14
    for path in change.added_manifests:
        partition = dataset.partitions.get(path)
        if partition is not None and len(partition.manifests) + 1 > max_manifests:
            paths.add(path)
    return {
        m.key
        for path in paths
        if (partition := dataset.partitions.get(path)) is not None
        for m in partition.manifests
    }


def apply_change(
    doc: RegistryDoc,
    change: Change,
    *,
    manifests: Mapping[str, Manifest],
    now: str,
    next_version: int,
    max_manifests: int = MAX_MANIFESTS_PER_PARTITION,
    retired_at: float = 0.0,
    nonce: str = "0",
) -> Applied:
    """``change`` applied to ``doc`` (version unchanged: see :func:`seal`). Manifests that
    leave the registry are listed in ``doc.retired`` with time ``retired_at``; consolidated
    manifests are keyed with ``nonce`` (fresh for every attempt, see ``manifest_key``)."""
    doc = _fenced(doc, change, at=retired_at)
    if _fence_only(change):
        # A dataset an operation only read (the source of a copy): its fence is checked and
        # recorded, the dataset itself is left as it is.
        return Applied(doc=doc, writes=(), added=0, removed=0)

    existing = doc.datasets.get(change.dataset)
    if change.restore is not None:
        return _restore(doc, change, existing, now=now, next_version=next_version)
    dataset = existing or DatasetState(
        name=change.dataset,
        schema=None,
        schema_version=0,
        partition_by=(
            change.partition_by
            if change.partition_by is not None
            else _inferred_partition_by(change)
        ),
        properties=MappingProxyType({}),
        partitions=MappingProxyType({}),
        created_at=now,
        updated_at=now,
        updated_version=next_version,
        totals=Totals(),
        created_version=next_version,
    )
    check_partition_by(dataset, change)
    schema, schema_version = evolve_schema(
        dataset.schema, change.schema, dataset.schema_version, change
    )
    for f in change.add:
        _check_file(f, change, dataset.partition_by)

    # Partitions change in an overlay over the stored index: nothing is copied, and the
    # registry shell writes just the changed paths of the tree (see _tree). The loop below
    # reads each partition it touches before it changes it, so the overlay it reads from is
    # the one it changes.
    if isinstance(dataset.partitions, Overlay):
        base, overlay = dataset.partitions.base, dict(dataset.partitions.changes)
    else:
        base, overlay = dataset.partitions, {}
    partitions = Overlay.owning(base, overlay)
    totals = dataset.totals if dataset.totals is not None else totals_of(dataset.partitions)
    made: list[tuple[str, bytes, Manifest]] = []  # consolidated manifests
    removed_by_partition, cleared = _removals(change, partitions, len(dataset.partition_by))

    removed = len(change.remove)
    touched = set(change.added_manifests) | set(removed_by_partition) | cleared
    for path in sorted(touched):
        partition = partitions.get(path)
        refs = list(partition.manifests) if partition is not None else []
        delta = change.added_manifests.get(path)
        gone = removed_by_partition.get(path, set())
        if path in cleared and partition is not None:
            # Every file the partition holds now (loaded: see manifests_needed).
            held = {f.key for ref in refs for f in manifests[ref.key].files_of(path)}
            removed += len(held - gone)
            gone = gone | held
        if delta is not None:
            digest = manifest_digest(delta.key)
            if digest in map(manifest_digest, map(_ref_key, refs)):
                raise _conflict(
                    change, f"these files are already registered in {change.dataset!r}/{path!r}"
                )
            refs.append(delta)
        if gone or len(refs) > max_manifests:
            consolidated = _consolidate(
                change,
                path,
                refs=refs,
                gone=gone,
                manifests=manifests,
                delta=delta,
                nonce=nonce,
            )
            if consolidated is None:
                refs = []
            else:
                ref, body, manifest = consolidated
                refs = [ref]
                made.append((ref.key, body, manifest))
        new_partition = PartitionState(path, tuple(refs), next_version) if refs else None
        totals = _retotal(totals, partition, new_partition)
        overlay[path] = new_partition

    properties = dict(dataset.properties)
    for name, value in (change.properties or {}).items():
        if value is None:
            properties.pop(name, None)
        else:
            properties[name] = str(value)

    record = SnapshotCommit(
        change.commit_id, change.operation, len(change.add), removed, change.digest, change.intent
    )
    updated = _replaced(
        dataset,
        schema=schema,
        schema_version=schema_version,
        properties=MappingProxyType(properties),
        partitions=partitions,
        updated_at=now,
        updated_version=next_version,
        totals=totals,
        commits=_commits_of(dataset, next_version, record),
        **_unstored(dataset),
    )
    return Applied(
        doc=with_dataset(doc, change.dataset, updated),
        writes=tuple([(key, body) for key, body, _ in made]) if made else (),
        added=len(change.add),
        removed=removed,
        manifests=tuple([(key, manifest) for key, _, manifest in made]) if made else (),
    )


def _removals(
    change: Change, partitions: Mapping[str, PartitionState], columns: int
) -> tuple[dict[str, set[str]], set[str]]:
    """The files ``change`` removes, by partition, and the partitions it clears."""
    removed_by_partition: dict[str, set[str]] = {}
    for key in change.remove:
        removed_by_partition.setdefault(partition_of_key(change.dataset, key), set()).add(key)
    return removed_by_partition, set(removed_partitions(partitions, change, columns))


def removed_partitions(
    partitions: Mapping[str, PartitionState], change: Change, columns: int
) -> list[str]:
    """The partition paths at or under one of ``change.remove_partitions``. A whole path
    (one segment per partition column) is looked up, not searched for: clearing one
    partition of a large dataset loads one path of its index, not all of it."""
    if not change.remove_partitions:
        return []
    whole = [p for p in change.remove_partitions if p and p.count("/") + 1 == columns]
    prefixes = [p for p in change.remove_partitions if p not in whole]
    found = {p for p in whole if p in partitions}
    if prefixes:
        found.update(
            path
            for path in partitions
            if any(not p or path == p or path.startswith(f"{p}/") for p in prefixes)
        )
    return sorted(found)


def _restore(
    doc: RegistryDoc,
    change: Change,
    existing: DatasetState | None,
    *,
    now: str,
    next_version: int,
) -> Applied:
    """The dataset as it was in ``change.restore`` (an older version of it), made current."""
    old = change.restore
    assert old is not None
    if existing is None:
        raise _conflict(change, f"dataset {change.dataset!r} does not exist any more")
    if change.add or change.remove or change.remove_partitions:
        raise _conflict(change, "a restore adds and removes no files of its own")
    restored = replace(
        existing,
        schema=old.schema,
        schema_version=max(old.schema_version, existing.schema_version),
        partition_by=old.partition_by,
        properties=old.properties,
        partitions=old.partitions,
        totals=old.totals if old.totals is not None else totals_of(old.partitions),
        updated_at=now,
        updated_version=next_version,
        commits=_commits_of(
            existing,
            next_version,
            SnapshotCommit(
                change.commit_id,
                "restore",
                old.file_count,
                existing.file_count,
                change.digest,
                change.intent,
            ),
        ),
        **_unstored(existing),
    )
    # Counted as the snapshot's commit record counts them: the root's log says the same.
    return Applied(
        doc=with_dataset(doc, change.dataset, restored),
        writes=(),
        added=old.file_count,
        removed=existing.file_count,
    )


def with_dataset(doc: RegistryDoc, name: str, state: DatasetState) -> RegistryDoc:
    """``doc`` with one dataset changed: an overlay, so untouched datasets are not loaded."""
    datasets = doc.datasets
    if isinstance(datasets, Overlay):
        changes = {**datasets.changes, name: state}
        return _replaced(doc, datasets=Overlay.owning(datasets.base, changes))
    return _replaced(doc, datasets=Overlay.owning(datasets, {name: state}))


_Record = TypeVar("_Record", DatasetState, RegistryDoc, Change, DataFile)


def _replaced(record: _Record, **changes: Any) -> _Record:
    """``dataclasses.replace`` for the records every applied commit changes, and the
    changes and files the simulator's writers stamp with their write times (each a frozen
    dataclass with no ``__post_init__``; what a root keeps beside its fields, its indexes,
    comes along, each checked against the field it was made from):
    the same fields, without re-running ``__init__`` over all of them — a batch of a few
    hundred folded commits replaces a dataset and the root once per commit."""
    fields = record.__dataclass_fields__
    if not changes.keys() <= fields.keys():
        unknown = [name for name in changes if name not in fields]
        raise TypeError(f"{type(record).__name__} has no field {unknown[0]!r}")
    copy = object.__new__(type(record))
    copy.__dict__.update(record.__dict__)
    copy.__dict__.update(changes)
    return copy


def _unstored(dataset: DatasetState) -> dict[str, Any]:
    """A changed dataset is not stored yet; its parent is the version it was read at."""
    return {
        "snapshot": None,
        "parent": dataset.snapshot if dataset.snapshot is not None else dataset.parent,
    }


def _commits_of(
    dataset: DatasetState, version: int, record: SnapshotCommit
) -> tuple[SnapshotCommit, ...]:
    """The commits of the version being built: the batch's earlier ones plus ``record``."""
    fresh = dataset.snapshot is None and dataset.updated_version == version
    earlier = dataset.commits if fresh else ()
    return (*earlier, record)


def _inferred_partition_by(change: Change) -> tuple[str, ...]:
    """The partition columns the added files' paths name (they must all agree)."""
    found = {
        tuple(s.split("=", 1)[0] for s in f.partition_path.split("/")) if f.partition_path else ()
        for f in change.add
    }
    if len(found) > 1:
        raise _conflict(
            change,
            f"the added files are partitioned in different ways: {sorted(map(list, found))}",
        )
    return found.pop() if found else ()


def totals_of(partitions: Mapping[str, PartitionState]) -> Totals:
    totals = Totals()
    for partition in partitions.values():
        totals = _retotal(totals, None, partition)
    return totals


def _retotal(totals: Totals, before: PartitionState | None, after: PartitionState | None) -> Totals:
    b, a = _stats(before), _stats(after)
    return Totals(
        partitions=totals.partitions - b[0] + a[0],
        files=totals.files - b[1] + a[1],
        records=totals.records - b[2] + a[2],
        size=totals.size - b[3] + a[3],
    )


def _stats(p: PartitionState | None) -> tuple[int, int, int, int]:
    """A partition's share of the totals: itself, its files, records and bytes."""
    if p is None:
        return 0, 0, 0, 0
    # One pass over the manifests (the three properties would take three).
    files = records = size = 0
    for m in p.manifests:
        files += m.files
        records += m.records
        size += m.size
    return 1, files, records, size


def _consolidate(
    change: Change,
    path: str,
    *,
    refs: list[ManifestRef],
    gone: set[str],
    manifests: Mapping[str, Manifest],
    delta: ManifestRef | None,
    nonce: str,
) -> tuple[ManifestRef, bytes, Manifest] | None:
    """One manifest for a partition's remaining files (``None`` if none remain): its
    reference, bytes, and the manifest parsing those bytes gives."""
    files: dict[str, DataFile] = {}
    for ref in refs:
        if ref is delta:
            for f in change.add:
                if f.partition_path == path:
                    files[f.key] = f
            continue
        manifest = manifests.get(ref.key)
        if manifest is None:
            raise AssertionError(f"manifest {ref.key} was not loaded (see manifests_needed)")
        held = manifest.files_of(path)
        files.update(zip(map(_file_key, held), held, strict=True))
    missing = sorted(gone - files.keys())
    if missing:
        raise _conflict(
            change,
            f"cannot remove {missing[:3]}{'...' if len(missing) > 3 else ''} from "
            f"{change.dataset!r}/{path!r}: not registered (removed by another commit?)",
        )
    kept = [f for k, f in files.items() if k not in gone] if gone else files.values()
    remaining = tuple(sorted(kept, key=_file_key))
    if not remaining:
        return None
    manifest = Manifest(change.dataset, path, remaining)
    body = serialize_manifest(manifest)
    if list(map(_file_stats, remaining)).count(None) < len(remaining) or any(
        dataset != change.dataset for dataset in set(map(_file_dataset, remaining))
    ):
        # Parsed statistics come back with their columns sorted (and a file named for the
        # manifest's dataset): equal bytes, not an equal value. Without either, it is equal.
        manifest = parse_manifest(body)
    return _ref(change.dataset, remaining, body, nonce), body, manifest


#: A data file's key (what manifests are sorted by), and a manifest reference's.
_file_key = operator.attrgetter("key")
_ref_key = operator.attrgetter("key")
_file_stats = operator.attrgetter("stats")
_file_dataset = operator.attrgetter("dataset")


def _check_file(f: DataFile, change: Change, partition_by: tuple[str, ...]) -> None:
    if f.dataset != change.dataset or not f.key.startswith(files_prefix(change.dataset)):
        raise _conflict(change, f"{f.key!r} is not a file of dataset {change.dataset!r}")
    if partition_of_key(change.dataset, f.key) != f.partition_path:
        raise _conflict(change, f"{f.key!r} does not lie in partition {f.partition_path!r}")
    columns = (
        tuple(s.split("=", 1)[0] for s in f.partition_path.split("/")) if f.partition_path else ()
    )
    if columns != partition_by:
        raise _conflict(
            change,
            f"{f.key!r} is partitioned by {list(columns)}; "
            f"dataset {change.dataset!r} by {list(partition_by)}",
        )


def check_partition_by(dataset: DatasetState, change: Change) -> None:
    """A change declaring ``partition_by`` must declare the dataset's own (the layout of a
    dataset's files never changes): :class:`~lakelock.errors.PartitionByMismatchError`."""
    if change.partition_by is not None and tuple(change.partition_by) != dataset.partition_by:
        raise PartitionByMismatchError(
            f"dataset {change.dataset!r} is partitioned by {list(dataset.partition_by)}; "
            f"this {change.operation} gives partition_by={list(change.partition_by)} "
            "(a dataset's partition columns never change)",
            dataset=change.dataset,
            commit_id=change.commit_id,
        )


def check_fits(dataset: DatasetState | None, change: Change) -> None:
    """What :func:`apply_change` refuses in ``change`` whatever else commits first: a
    ``partition_by`` or schema that does not fit ``dataset`` (``None``: a new dataset, which
    anything fits). Operations check it against the registry they know before they write any
    data, so a refused commit leaves no files behind; the commit loop checks again."""
    if dataset is not None:
        check_partition_by(dataset, change)
        evolve_schema(dataset.schema, change.schema, dataset.schema_version, change)


def evolve_schema(
    current: pa.Schema | None, new: pa.Schema | None, version: int, change: Change
) -> tuple[pa.Schema | None, int]:
    """The dataset schema after a commit declaring ``new`` (see the module docstring)."""
    if new is None:
        return current, version
    names = new.names if current is None else [*current.names, *_new_names(current, new)]
    clash = clashing_names(names)
    if clash is not None:  # binding: a dataset's column names are unique ignoring case
        raise SchemaMismatchError(
            f"schema does not fit dataset {change.dataset!r}: columns {clash[0]!r} and "
            f"{clash[1]!r} are one name ignoring case (engines read names so)",
            dataset=change.dataset,
            commit_id=change.commit_id,
        )
    if current is None:
        return new, version + 1
    problems = []
    for column in new:
        index = current.get_field_index(column.name)
        if index < 0:
            if not column.nullable:
                problems.append(f"new column {column.name!r} must be nullable")
        elif not current.field(index).type.equals(column.type):
            problems.append(
                f"column {column.name!r} is {current.field(index).type}, not {column.type}"
            )
    for column in current:
        if new.get_field_index(column.name) < 0 and not column.nullable:
            problems.append(f"required column {column.name!r} is missing")
    if problems:
        raise SchemaMismatchError(
            f"schema does not fit dataset {change.dataset!r}: {'; '.join(problems)}",
            dataset=change.dataset,
            commit_id=change.commit_id,
        )
    added = [column for column in new if current.get_field_index(column.name) < 0]
    if not added:
        return current, version
    if change.schema_mode != "merge":
        names = ", ".join(repr(column.name) for column in added)
        raise SchemaMismatchError(
            f"{change.operation} adds column{'s' if len(added) > 1 else ''} {names} to "
            f"dataset {change.dataset!r}: pass schema_mode='merge' to add "
            f"{'them' if len(added) > 1 else 'it'} to the dataset's schema",
            dataset=change.dataset,
            commit_id=change.commit_id,
        )
    return pa.schema([*current, *added], metadata=current.metadata), version + 1


def _new_names(current: pa.Schema, new: pa.Schema) -> list[str]:
    return [name for name in new.names if current.get_field_index(name) < 0]


def seal(
    doc: RegistryDoc,
    changes: Iterable[tuple[Change, Applied]],
    *,
    now: str,
    window: int,
    retire_before: float | None = None,
) -> RegistryDoc:
    """Close a batch: bump the version once, record each commit id, keep the window of them
    (:func:`window_kept`: at least ``window``, versions whole), and forget (format 1) retired
    manifests older than ``retire_before`` (seconds since the epoch); the path-lock grant
    records are kept whatever their age (:func:`~lakelock._registry._fencing.lock_fences_kept`)."""
    version = doc.version + 1
    # One record per commit id: a commit spanning several datasets names them all.
    merged: dict[str, CommitRecord] = {}
    for change, applied in changes:
        before = merged.get(change.commit_id)
        if before is None:
            merged[change.commit_id] = CommitRecord(
                change.commit_id,
                version,
                change.dataset,
                now,
                applied.added,
                applied.removed,
                change.operation,
                change.digest,
                change.intent,
            )
        else:
            merged[change.commit_id] = replace(
                before,
                dataset=f"{before.dataset},{change.dataset}",
                added=before.added + applied.added,
                removed=before.removed + applied.removed,
                # Each dataset's own digest is in its commit-id index; the root's line for
                # the whole commit keeps one only if they agree.
                digest=before.digest if before.digest == change.digest else None,
            )
    records = list(merged.values())
    commits = window_kept((*doc.commits, *records), window)
    retired = doc.retired if doc.format_version == 1 else ()
    lock_fences = doc.lock_fences
    if retire_before is not None:
        retired = tuple(r for r in retired if r.at >= retire_before)
        lock_fences = _fencing.lock_fences_kept(lock_fences, before=retire_before)
    return replace(
        doc,
        version=version,
        updated_at=now,
        commits=commits,
        retired=retired,
        lock_fences=lock_fences,
    )


def window_kept(commits: Sequence[CommitRecord], window: int) -> tuple[CommitRecord, ...]:
    """The root's window of recent commits (oldest first): the ``window`` newest records, and
    every other record of the version the oldest of them belongs to. A version is kept whole
    while fewer than ``window`` records of later versions are, so a commit id is bound across
    datasets until ``window`` commits were recorded after its version, however many one swap
    applied: a fold larger than ``window`` would otherwise leave some of its ids in no window
    at all, not even the root it made (docs/FORMAT.md, "Commit ids")."""
    if len(commits) <= window:
        return tuple(commits)
    start = len(commits) - window
    oldest = commits[start].version
    while start > 0 and commits[start - 1].version == oldest:
        start -= 1
    return tuple(commits[start:])


def reused_commit_id(
    recorded: CommitRecord | Mapping[str, Any], change: Change
) -> CommitIdReusedError | None:
    """Whether ``change``'s commit id, found recorded, was recorded for another change: the
    error to raise if so, ``None`` if ``change`` is a retry of the recorded one (report the
    recorded commit). ``recorded`` is the root's record of a recent commit, or an entry of
    the commit-id index of ``change.dataset`` (which names no dataset: its own).

    The same change means the same dataset, the same operation (``"commit"``, a registry
    commit that named none, matches any) and, where both sides know it, the same digest
    (:func:`lakelock._digest.change_digest`: the request and the rows, in any order): a
    re-run pipeline rewriting identical rows is a retry; the same key for other rows,
    another dataset or another operation is refused. A ``registry.commit``'s digest and a
    table operation's are not compared (:func:`lakelock._digest.comparable`)."""
    if isinstance(recorded, CommitRecord):
        version, datasets = recorded.version, recorded.datasets
        operation, digest = recorded.operation, recorded.digest
    else:
        version, datasets = int(recorded["version"]), (change.dataset,)
        operation = str(recorded.get("operation", "commit"))
        raw = recorded.get("digest")
        digest = raw if isinstance(raw, str) else None
    # A lease takeover's record names no dataset, as its change does (FORMAT.md, "Lease
    # takeovers"): a retry of it is the same change.
    if change.dataset not in (datasets or ("",)):
        why = f"dataset {','.join(datasets)!r}, not {change.dataset!r}"
    elif operation != change.operation and "commit" not in (operation, change.operation):
        why = f"operation {operation!r}, not {change.operation!r}"
    elif (
        digest is not None
        and change.digest is not None
        and digest != change.digest
        and comparable(digest, change.digest)
    ):
        why = "other content (its rows or request differ from this one's)"
    else:
        return None
    return CommitIdReusedError(
        f"commit id {change.commit_id!r} was recorded at version {version} for "
        f"{operation} of {','.join(datasets)!r}: it names another change ({why}); "
        "use a new commit id for a new change",
        version=version,
        recorded_dataset=",".join(datasets),
        recorded_operation=operation,
        dataset=change.dataset,
        commit_id=change.commit_id,
    )


def other_datasets(
    record: CommitRecord, change: Change, datasets: Collection[str]
) -> CommitIdReusedError | None:
    """Whether a commit of ``datasets`` (``change`` one of its changes), whose commit id the
    root's window records (``record``), names another set of datasets than the recorded
    commit: the error to refuse it with (another change, however its changes compare one by
    one: docs/FORMAT.md, "Commit ids"), ``None`` if it names the same. A lease takeover's
    record names none, as its change does (``""``)."""
    recorded = record.datasets or ("",)
    if set(datasets) == set(recorded):
        return None
    return reused_for_datasets(
        change, datasets, version=record.version, recorded=recorded, operation=record.operation
    )


def reused_for_datasets(
    change: Change,
    datasets: Iterable[str],
    *,
    version: int,
    recorded: Iterable[str],
    operation: str,
) -> CommitIdReusedError:
    """The refusal of a commit of ``datasets`` (``change`` one of its changes) under an id
    recorded at ``version`` for ``operation`` of the ``recorded`` datasets, another set."""
    named = ",".join(recorded)
    return CommitIdReusedError(
        f"commit id {change.commit_id!r} was recorded at version {version} for {operation} of "
        f"{named!r}: it names another change (datasets {named!r}, not "
        f"{','.join(datasets)!r}); use a new commit id for a new change",
        version=version,
        recorded_dataset=named,
        recorded_operation=operation,
        dataset=change.dataset,
        commit_id=change.commit_id,
    )


def _fenced(doc: RegistryDoc, change: Change, *, at: float) -> RegistryDoc:
    """``doc`` once ``change`` passed the write locks in force (FORMAT.md, "Write locks in
    force": unless it registers or clears one) and its fence was checked and recorded
    (:mod:`._fencing`)."""
    if change.operation not in (LOCK, UNLOCK):
        check_write_locks(
            doc, change.dataset, written_paths(change), change.fence, commit_id=change.commit_id
        )
    return record_fence(
        doc,
        change.fence,
        at=at,
        dataset=change.dataset,
        commit_id=change.commit_id,
        operation=change.operation,
    )


def takeover(fence: Fence, commit_id: str) -> Change:
    """The change that records a lease's takeover: ``fence`` (the new holder's) and
    nothing else, naming no dataset (FORMAT.md, "Lease takeovers")."""
    return Change(
        dataset="", commit_id=commit_id, fence=fence, operation=TAKEOVER, generated_id=True
    )


def is_takeover(change: Change) -> bool:
    """Whether ``change`` is a lease takeover's record (:func:`takeover`): the one change
    that names no dataset."""
    return (
        change.dataset == ""
        and change.operation == TAKEOVER
        and change.fence is not None
        and not change.fence.hierarchical
        and _fence_only(change)
    )


def makes_version(change: Change) -> bool:
    """Whether applying ``change`` makes a version of its dataset, which records its commit
    id in the dataset's commit-id index: every change but one that only carries a fence (a
    copy's source, a lease's takeover, a path lock's ``lock`` and ``unlock``)."""
    return not _fence_only(change)


def _fence_only(change: Change) -> bool:
    return change.fence is not None and not (
        change.add
        or change.remove
        or change.remove_partitions
        or change.schema is not None
        or change.partition_by is not None
        or change.properties is not None
        or change.restoring
    )


def _conflict(change: Change, message: str) -> CommitConflictError:
    return CommitConflictError(message, dataset=change.dataset, commit_id=change.commit_id)
