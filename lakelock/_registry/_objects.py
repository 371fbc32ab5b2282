"""The registry's write-once objects: loading and caching them, walking a dataset's history,
and writing a new version (the tree paths a batch changed, one snapshot per changed dataset).

Every object here is immutable and digest-named, so a :class:`Objects` cache never goes stale:
a ``Lake`` downloads a snapshot, node or manifest again only once it has dropped out of the
cache (the ``CACHE_SIZE`` most recently used are kept).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, TypeVar, overload

from lakelock._datafile import DataFile
from lakelock._jsonfields import boolean_free_int, obj
from lakelock._registry._changes import Change, totals_of
from lakelock._registry._document import (
    FORMAT_VERSION,
    DatasetState,
    ManifestRef,
    PartitionState,
    RegistryDoc,
    decode_schema,
    encode_schema,
    parse_partition,
    serialize_registry,
)
from lakelock._registry._intents import is_intent, parse_intent
from lakelock._registry._manifest import Manifest, parse_part, verify_manifest
from lakelock._registry._snapshot import (
    SNAPSHOT_PREFIX,
    DatasetEntry,
    LazyPartitions,
    Overlay,
    Snapshot,
    backup_key,
    serialize_snapshot,
    snapshot_key,
    verify_snapshot,
)
from lakelock._registry._tree import (
    EMPTY,
    NODE_PREFIX,
    Node,
    index_get,
    index_update,
    node_body,
    node_key,
    tree_update,
    verify_node,
)
from lakelock._s3 import ObjectStore
from lakelock.errors import (
    AlreadyExistsError,
    NotFoundError,
    RegistryCorruptError,
    SnapshotExpiredError,
    VersionNotFoundError,
)

__all__ = [
    "CACHE_SIZE",
    "HistoryEntry",
    "Missing",
    "Objects",
    "dataset_for_checks",
    "partition_entry",
    "partition_from_entry",
    "state_of",
    "version_time",
]

#: The fields a dataset's state takes from its snapshot as they are.
_KEPT_FROM_SNAPSHOT = (
    "schema", "schema_version", "partition_by", "properties", "created_at", "updated_at",
    "parent", "totals", "commit_ids", "recent_ids", "at", "commits", "created_version",
)  # fmt: skip
#: How many write-once objects an :class:`Objects` keeps, least recently used dropped first.
CACHE_SIZE = 16384
# How many recent commit ids a snapshot carries before they are written into the commit-id
# tree together (a leaf rewrite shared by up to this many commits instead of one each).
RECENT_IDS = 64


@dataclass(frozen=True)
class HistoryEntry:
    """One commit in a dataset's history: the registry ``version`` it made, its server
    commit time ``at`` (seconds since the epoch), id, operation and file counts."""

    dataset: str
    version: int
    at: float
    commit_id: str
    operation: str
    added: int
    removed: int


def partition_entry(p: PartitionState) -> dict[str, Any]:
    return {
        "manifests": [
            {
                "key": m.key,
                "files": m.files,
                "records": m.records,
                "size": m.size,
                **({"part": list(m.part)} if m.part is not None else {}),
            }
            for m in p.manifests
        ],
        "updated_version": p.updated_version,
    }


def state_of(key: str, snap: Snapshot, partitions: Mapping[str, PartitionState]) -> DatasetState:
    """The dataset version stored in snapshot ``key`` (``snap``, its parse), its partitions
    read through ``partitions``: one spelling for :meth:`Objects.state` and the simulator's
    checker, so the two cannot disagree on what a snapshot holds."""
    return DatasetState(
        name=snap.dataset,
        partitions=partitions,
        updated_version=snap.version,
        snapshot=key,
        **{name: getattr(snap, name) for name in _KEPT_FROM_SNAPSHOT},
    )


def partition_from_entry(path: str, raw: Any) -> PartitionState:
    """A partition entry of the index (format 1's root holds the same JSON)."""
    try:
        return parse_partition(path, obj(raw, f"partition {path!r}"))
    except (KeyError, TypeError, ValueError) as error:
        raise RegistryCorruptError(
            f"index entry of partition {path!r} is malformed: {error}"
        ) from error


def _readable_from(oldest: Snapshot) -> str:
    """Which versions of a dataset remain readable, from the oldest snapshot still kept."""
    return f"versions {oldest.version} and later of {oldest.dataset!r} remain readable"


_T = TypeVar("_T")
#: Datasets :meth:`LazyDatasets.load_together` loads at once (as many as index nodes are read).
LOADERS = 16


class LazyDatasets(Mapping[str, DatasetState]):
    """The datasets of a format-2 root: each loaded from its snapshot when first looked up.
    With ``sparse`` (time travel), a name may resolve to no dataset (``load`` returns None):
    iterating then loads every dataset to know which exist."""

    def __init__(
        self,
        names: Iterable[str],
        load: Callable[[str], DatasetState | None],
        *,
        sparse: bool = False,
        loaded: Mapping[str, DatasetState] | None = None,
        stand_in: Callable[[str], DatasetState | None] | None = None,
    ) -> None:
        self._names = sorted(names)
        self._known = set(self._names)
        self._load = load
        self._stand_in = stand_in
        self._sparse = sparse
        self._loaded: dict[str, DatasetState | None] = dict(loaded or {})
        self._lock = threading.Lock()

    def for_checks(self, name: str) -> DatasetState | None:
        """Dataset ``name`` for an operation's checks before it writes (its partition
        columns and schema, :func:`~lakelock._registry._changes.check_fits`): this version
        if it is loaded, else what ``stand_in`` finds at no request (this version if cached,
        else the newest version of it since it was created), else this version, loaded.
        Within one dataset's life its partition columns never change and its schema only
        gains nullable columns, so an earlier version refuses what this one refuses but for
        columns added since; the commit loop checks every change again on the version it
        swaps from."""
        if name not in self._known:
            return None
        with self._lock:
            if name in self._loaded:
                return self._loaded[name]
        if self._stand_in is not None and (state := self._stand_in(name)) is not None:
            return state
        return self.get(name)

    def __getitem__(self, name: str) -> DatasetState:
        if name not in self._known:
            raise KeyError(name)
        with self._lock:
            if name not in self._loaded:
                self._loaded[name] = self._load(name)
            state = self._loaded[name]
        if state is None:
            raise KeyError(name)
        return state

    def __iter__(self) -> Iterator[str]:
        if not self._sparse:
            return iter(self._names)
        return iter([n for n in self._names if n in self])

    def __len__(self) -> int:
        return len(self._names) if not self._sparse else sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or name not in self._known:
            return False
        if not self._sparse:
            return True
        # Time travel: a dataset that did not exist then is not there; one whose version of
        # then is no longer kept raises (SnapshotExpiredError), never "not there".
        with self._lock:
            if name not in self._loaded:
                self._loaded[name] = self._load(name)
            return self._loaded[name] is not None

    def load_together(self, workers: int = LOADERS) -> None:
        """Load every dataset not loaded yet, up to ``workers`` at once: a look at every
        dataset of a lake of thousands (``lakelock registry show``) waits for a round trip
        to S3 per ``workers`` datasets, not per dataset. A dataset that cannot be read
        raises here as its lookup would."""
        with self._lock:
            missing = [n for n in self._names if n not in self._loaded]
        if len(missing) < 2:
            return
        with ThreadPoolExecutor(min(workers, len(missing))) as pool:
            states = list(pool.map(self._load, missing))
        with self._lock:
            for name, state in zip(missing, states, strict=True):
                self._loaded.setdefault(name, state)

    @overload
    def get(self, name: str, /) -> DatasetState | None: ...

    @overload
    def get(self, name: str, default: DatasetState | _T, /) -> DatasetState | _T: ...

    def get(self, name: str, default: Any = None, /) -> Any:
        """The dataset, or ``default`` if there is none of that name (then); a version that
        cannot be read (:class:`VersionNotFoundError`: expired, vacuumed) raises, which
        ``Mapping.get`` would hide (it is a ``KeyError``)."""
        try:
            return self[name]
        except VersionNotFoundError:
            raise
        except KeyError:
            return default


def dataset_for_checks(datasets: Mapping[str, DatasetState], name: str) -> DatasetState | None:
    """Dataset ``name`` of a registry's ``datasets`` for an operation's checks before it
    writes: :meth:`LazyDatasets.for_checks` (format 2: an earlier version the cache holds, at
    no request), else the dataset itself (format 1: inline)."""
    if isinstance(datasets, LazyDatasets):
        return datasets.for_checks(name)
    return datasets.get(name)


def missing_object(key: str, bucket: str | None, store: ObjectStore | None) -> RegistryCorruptError:
    """The registry refers to ``key`` and it is gone: corruption, never an empty table."""
    return RegistryCorruptError(
        f"the registry refers to {key}, which is missing",
        bucket=bucket,
        key=store.full_key(key) if store is not None else key,
    )


class Missing(BaseException):
    """An object the sans-I/O commit core needs is not cached: the core fetches ``keys``
    and asks again. A ``BaseException``, so no ``except Exception`` on the way swallows it."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        super().__init__(keys)
        self.keys = keys


def version_time(at: float, *, parent_at: float) -> float:
    """The recorded commit time of a new version: never before its parent's (FORMAT.md
    invariant 3). ``at`` is the committer's wall clock, and one running behind would date
    the version it replaces as replaced long ago, which time travel and vacuum would then
    expire at once."""
    return max(at, parent_at)


class Objects:
    r"""Loads (and caches) manifests, index nodes and snapshots of one lake.

    With a ``store``, a miss is fetched from it. :meth:`offline` is the same cache for the
    sans-I/O commit core: a miss raises :class:`Missing` instead, and the core fetches the
    object itself and :meth:`load`\ s it. ``fetch`` (key -> bytes) replaces the store for
    readers that are neither (the simulator's checker)."""

    def __init__(
        self,
        store: ObjectStore | None = None,
        *,
        fetch: Callable[[str], bytes] | None = None,
        bucket: str | None = None,
    ) -> None:
        self.store = store
        self.bucket = store.bucket if store is not None else bucket
        self._fetch = fetch
        self._offline = False
        self._cache: OrderedDict[str, Any] = OrderedDict()
        # Per dataset, the newest snapshot remembered: (created_version, version, key).
        self._newest: dict[str, tuple[int, int, str]] = {}
        self._lock = threading.Lock()

    def offline(self) -> Objects:
        """This cache, for code that performs no I/O: a miss raises :class:`Missing`."""
        view = type(self).__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._offline = True
        return view

    def load(self, key: str, body: bytes) -> None:
        """Parse and cache ``key``'s fetched ``body`` (what an offline miss asked for)."""
        self._parser(key)(key, body)

    def _parser(self, key: str) -> Callable[[str, bytes], Any]:
        bucket = self.bucket
        if is_intent(key):
            parse: Callable[[str, bytes], Any] = lambda k, b: self.intent(k, b, bucket=bucket)[1]  # noqa: E731
        elif key.startswith(NODE_PREFIX):
            parse = lambda k, b: verify_node(k, b, bucket=bucket)  # noqa: E731
        elif key.startswith(SNAPSHOT_PREFIX):
            parse = lambda k, b: verify_snapshot(k, b, decode_schema, bucket=bucket)  # noqa: E731
        else:
            parse = lambda k, b: verify_manifest(k, b, bucket=bucket)  # noqa: E731

        def parse_and_remember(k: str, b: bytes) -> Any:
            value = parse(k, b)
            self.remember(k, value)
            return value

        return parse_and_remember

    def intent(self, key: str, body: bytes, *, bucket: str | None) -> tuple[Change, Manifest]:
        """An intent's change and manifest (:func:`parse_intent`, not cached here: the
        committer keeps the changes it read). A pure function of its arguments, so a cache
        that many processes' caches share can answer it (the simulator's)."""
        return parse_intent(key, body, bucket=bucket)

    # -- cache --------------------------------------------------------------------------------

    def remember(self, key: str, value: Any) -> None:
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            if isinstance(value, Snapshot):
                newest = self._newest.get(value.dataset)
                if newest is None or newest[:2] < (value.created_version, value.version):
                    self._newest[value.dataset] = (value.created_version, value.version, key)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)

    def _cached(self, key: str) -> Any | None:
        with self._lock:
            value = self._cache.get(key)
            if value is not None:
                self._cache.move_to_end(key)
            return value

    def _get(self, key: str) -> Any:
        value = self._cached(key)
        if value is None:
            if self._offline:
                raise Missing((key,))
            try:
                body = self._fetch(key) if self._fetch is not None else self._store_get(key)
            except NotFoundError as error:
                raise missing_object(key, self.bucket, self.store) from error
            value = self._parser(key)(key, body)
        return value

    def _store_get(self, key: str) -> bytes:
        assert self.store is not None, "Objects needs a store or a fetch function"
        return self.store.get(key).body

    def node(self, key: str) -> Node:
        return self._get(key)  # type: ignore[no-any-return]

    def snapshot(self, key: str) -> Snapshot:
        return self._get(key)  # type: ignore[no-any-return]

    def manifest(self, key: str) -> Manifest:
        """A manifest, or an applied intent read as the manifest of its files."""
        return self._get(key)  # type: ignore[no-any-return]

    def partition_files(
        self, dataset: str, path: str, ref: ManifestRef
    ) -> tuple[DataFile, ...] | None:
        """The files of partition ``path`` that manifest ``ref`` lists, read from the ref's
        part alone (a ranged GET: its bytes only, checked against the part's digest) unless
        the whole manifest is cached; ``None`` if the ref has no part (read it whole)."""
        if ref.part is None or self.store is None:  # no store to range-read: read it whole
            return None
        whole = self._cached(ref.key)
        if isinstance(whole, Manifest):
            return whole.files_of(path)
        start, end, _ = ref.part
        cache_key = f"{ref.key}#{start}-{end}"
        found = self._cached(cache_key)
        if found is None:
            try:
                data = self.store.get(ref.key, byte_range=(start, end)).body
            except NotFoundError as error:
                raise missing_object(ref.key, self.bucket, self.store) from error
            found = parse_part(dataset, path, ref.part, data, bucket=self.store.bucket, key=ref.key)
            self.remember(cache_key, found)
        files: tuple[DataFile, ...] = found
        return files

    def has_all(self, keys: Iterable[str]) -> bool:
        """Whether every one of ``keys`` is cached (loading them costs no request); each
        cached one up to the first that is not counts as used (as :meth:`_cached`)."""
        with self._lock:
            cache = self._cache
            for k in keys:
                if cache.get(k) is None:
                    return False
                cache.move_to_end(k)
        return True

    def manifests(self, keys: Iterable[str]) -> dict[str, Manifest]:
        """The manifests at ``keys``, fetched in parallel where not cached."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, Manifest] = {}
        missing = []
        with self._lock:  # what _cached does for each key, under one lock
            cache = self._cache
            for k in wanted:
                value = cache.get(k)
                if value is None:
                    missing.append(k)
                else:
                    cache.move_to_end(k)
                    found[k] = value
        if not missing:
            return found
        if self._offline:
            raise Missing(tuple(missing))
        if len(missing) > 1:
            with ThreadPoolExecutor(min(LOADERS, len(missing))) as pool:
                list(pool.map(self.manifest, missing))
        return {k: self.manifest(k) for k in wanted}

    def nodes(self, keys: Iterable[str]) -> dict[str, Node]:
        """The index nodes at ``keys``, fetched in parallel where not cached (a walk of a
        whole index: a level at a time)."""
        wanted = list(dict.fromkeys(keys))
        missing = [k for k in wanted if self._cached(k) is None]
        if missing and self._offline:
            raise Missing(tuple(missing))
        if len(missing) > 1:
            with ThreadPoolExecutor(min(LOADERS, len(missing))) as pool:
                list(pool.map(self.node, missing))
        return {k: self.node(k) for k in wanted}

    # -- datasets -----------------------------------------------------------------------------

    def state(self, key: str) -> DatasetState:
        """The dataset version stored in snapshot ``key``."""
        snap = self.snapshot(key)
        partitions = LazyPartitions(
            snap.partitions,
            self.node,
            partition_from_entry,
            # Readers only: the commit core's (offline) walks ask for what they miss one
            # node at a time, as its driver and the simulator expect.
            prefetch=None if self._offline else self.nodes,
        )
        return state_of(key, snap, partitions)

    def datasets(self, doc: RegistryDoc) -> Mapping[str, DatasetState]:
        """The datasets of a root document (format 1: inline; format 2: loaded on demand)."""
        if doc.format_version == 1:
            return doc.datasets
        entries = doc.entries
        return LazyDatasets(
            entries,
            lambda name: self.state(entries[name].snapshot),
            stand_in=lambda name: self._stand_in(name, entries[name]),
        )

    def _stand_in(self, name: str, entry: DatasetEntry) -> DatasetState | None:
        """A version of dataset ``name`` (its root entry ``entry``) for checks, at no request
        (``None``: none held): ``entry``'s own if cached, else the newest of the same dataset's
        life in the cache. That may be one this process wrote for a swap it then lost, with a
        column the swap would have merged: a change it lets through is refused by the commit
        loop all the same."""
        with self._lock:
            if entry.snapshot in self._cache:
                key = entry.snapshot
            else:
                newest = self._newest.get(name)
                if newest is None or newest[0] != entry.created_version:
                    return None
                if newest[2] not in self._cache:
                    return None
                key = newest[2]
        return self.state(key)

    def walk(self, key: str | None) -> Iterator[tuple[str, Snapshot]]:
        """A dataset's snapshots from ``key`` back to its first (newest first)."""
        while key is not None:
            snap = self.snapshot(key)
            yield key, snap
            key = snap.parent

    def replaced_at(self, entry: DatasetEntry, version: int) -> float | None:
        """When the dataset's version ``version`` was replaced: the recorded commit time of
        the snapshot after it (``None``: it is the current one). Its retention runs from
        then (what vacuum measures)."""
        after: Snapshot | None = None
        for _, snap in self.walk(entry.snapshot):
            if snap.version <= version:
                return after.at if after is not None else None
            after = snap
        return None

    def at_version(
        self,
        entry: DatasetEntry,
        name: str,
        *,
        version: int | None = None,
        as_of: float | None = None,
        expire_before: float,
        upgrade: int | None = None,
    ) -> DatasetState | None:
        """The dataset as it was at registry ``version`` (or at server time ``as_of``):
        ``None`` if it did not exist yet; :class:`SnapshotExpiredError` if that version was
        replaced before ``expire_before`` (the retention, or the last vacuum's horizon:
        vacuum may have deleted what it reads);
        :class:`VersionNotFoundError` saying so if it is older than ``upgrade``, the version
        that upgraded the registry from format 1 (which kept no snapshots)."""
        if version is not None and entry.created_version > version:
            return None
        successor_at: float | None = None
        first: Snapshot | None = None
        readable: Snapshot | None = None
        try:
            for key, snap in self.walk(entry.snapshot):
                if (version is not None and snap.version <= version) or (
                    as_of is not None and snap.at <= as_of
                ):
                    if successor_at is not None and successor_at < expire_before:
                        assert readable is not None
                        raise SnapshotExpiredError(
                            name,
                            version=version,
                            as_of=as_of,
                            reason=": it is older than the registry's retention or the "
                            "window of the lake's last vacuum (vacuum may have removed it); "
                            f"{_readable_from(readable)}",
                        )
                    return self.state(key)
                if successor_at is None or successor_at >= expire_before:
                    readable = snap  # the oldest version found that a read may still use
                successor_at = snap.at
                first = snap
        except RegistryCorruptError as error:
            # An older snapshot that is gone was vacuumed (a window shorter than the
            # retention deletes what it replaced); a current one that is gone is damage.
            vacuumed = isinstance(error.__cause__, NotFoundError)
            if (
                readable is not None
                and (successor_at is not None)
                and (successor_at < expire_before or vacuumed)
            ):
                raise SnapshotExpiredError(
                    name,
                    version=version,
                    as_of=as_of,
                    reason=": vacuum removed it (older than vacuum's window or the retention); "
                    f"{_readable_from(readable)}",
                ) from error
            raise
        if first is not None and (not first.commits or first.version == upgrade):
            # The walk ended at the snapshot of the upgrade from format 1 (it records no
            # commit of its own): what came before was never kept.
            raise VersionNotFoundError(
                name,
                version=version,
                as_of=as_of,
                reason=": it is older than the registry's upgrade to format 2 at version "
                f"{first.version}; format 1 kept no snapshots, so time travel begins there",
            )
        return None

    def history(self, entry: DatasetEntry, name: str, *, limit: int | None) -> list[HistoryEntry]:
        """The commits of a dataset, newest first (as far back as its snapshots are kept)."""
        found: list[HistoryEntry] = []
        try:
            for _, snap in self.walk(entry.snapshot):
                for c in reversed(snap.commits):
                    found.append(
                        HistoryEntry(
                            name, snap.version, snap.at, c.id, c.operation, c.added, c.removed
                        )
                    )
                if limit is not None and len(found) >= limit:
                    return found[:limit]
        except RegistryCorruptError as error:
            if not isinstance(error.__cause__, NotFoundError) or not found:
                raise  # a vacuumed past ends the history; anything else is damage
        return found

    def commit_version(self, state: DatasetState, commit_id: str) -> int | None:
        """The version at which ``commit_id`` changed this dataset: from the snapshot's recent
        commit ids, else its commit-id tree."""
        entry = self.commit_entry(state, commit_id)
        return None if entry is None else int(entry["version"])

    def commit_entry(self, state: DatasetState, commit_id: str) -> Mapping[str, Any] | None:
        """What this dataset's commit-id index records of ``commit_id`` (its ``version``,
        ``at``, ``operation`` and, when known, ``digest`` and ``intent``), or ``None``."""
        raw = state.recent_ids.get(commit_id)
        if raw is None:
            raw = index_get(state.commit_ids, commit_id, self.node)
        if raw is None:
            return None
        entry = obj(raw, "commit id entry")
        boolean_free_int(entry["version"], "version", minimum=1)
        return entry

    # -- writing a version --------------------------------------------------------------------

    def materialize(
        self,
        base: RegistryDoc,
        doc: RegistryDoc,
        *,
        at: float,
        nonces: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> tuple[RegistryDoc, list[tuple[str, bytes]]]:
        """``doc`` (a sealed batch) as a root of this lakelock's format, and the objects to
        create before its compare-and-swap: new index nodes, one snapshot per changed dataset
        (every dataset when ``base`` is format 1: the upgrade, which also keeps the old root
        as a backup)."""
        writes: list[tuple[str, bytes]] = []
        upgrading = base.format_version == 1
        entries = {} if upgrading else dict(doc.entries)
        if upgrading:
            changed: Iterable[tuple[str, DatasetState]] = list(doc.datasets.items())
        elif isinstance(doc.datasets, Overlay):
            changed = [(n, s) for n, s in doc.datasets.changes.items() if s is not None]
        else:
            changed = []
        stored: dict[str, DatasetState] = {}
        for name, state in changed:
            new = self._store_dataset(
                name, state, version=doc.version, at=at, writes=writes, nonces=nonces
            )
            assert new.snapshot is not None
            assert new.totals is not None
            stored[name] = new
            entries[name] = DatasetEntry(
                snapshot=new.snapshot,
                version=new.updated_version,
                totals=new.totals,
                **{f: getattr(new, f) for f in ("created_version", "partition_by", "updated_at")},
            )
        backup = doc.backup
        if upgrading:
            body = serialize_registry(base)
            backup = backup_key(base.version, body)
            writes.append((backup, body))
        frozen = MappingProxyType(entries)
        datasets = LazyDatasets(
            entries, lambda name: self.state(frozen[name].snapshot), loaded=stored
        )
        new_doc = replace(
            doc,
            format_version=FORMAT_VERSION,
            entries=frozen,
            datasets=datasets,
            retired=(),
            backup=backup,
        )
        return new_doc, writes

    def _store_dataset(
        self,
        name: str,
        state: DatasetState,
        *,
        version: int,
        at: float,
        writes: list[tuple[str, bytes]],
        nonces: Callable[[], str],
    ) -> DatasetState:
        at = version_time(at, parent_at=state.at)

        def store(node: Node) -> str:
            body = node_body(node)
            key = node_key(name, body, nonces())
            writes.append((key, body))
            self.remember(key, node)
            return key

        partitions = state.partitions
        if isinstance(partitions, Overlay) and isinstance(partitions.base, LazyPartitions):
            top = tree_update(
                partitions.base.top,
                {k: partition_entry(v) if v else None for k, v in partitions.changes.items()},
                load=self.node,
                store=store,
            )
        elif isinstance(partitions, LazyPartitions):
            top = partitions.top  # a restore: the older version's index, shared
        else:  # format 1 (the upgrade), or a dataset new in this batch
            top = tree_update(
                EMPTY,
                {k: partition_entry(v) for k, v in partitions.items()},
                load=self.node,
                store=store,
            )
        recent = dict(state.recent_ids)
        recent.update(
            {
                c.id: {
                    "version": version,
                    "at": at,
                    "operation": c.operation,
                    **({"digest": c.digest} if c.digest is not None else {}),
                    **({"intent": c.intent} if c.intent is not None else {}),
                }
                for c in state.commits
            }
        )
        commit_ids = state.commit_ids
        if len(recent) >= RECENT_IDS:
            commit_ids = index_update(commit_ids, recent, load=self.node, store=store)
            recent = {}
        totals = state.totals if state.totals is not None else totals_of(state.partitions)
        snap = Snapshot(
            dataset=name,
            version=version,
            parent=state.parent,
            at=at,
            created_at=state.created_at,
            updated_at=state.updated_at,
            created_version=state.created_version or state.updated_version or version,
            commits=state.commits,
            schema=state.schema,
            schema_version=state.schema_version,
            partition_by=state.partition_by,
            properties=state.properties,
            totals=totals,
            partitions=top,
            commit_ids=commit_ids,
            recent_ids=MappingProxyType(recent),
        )
        body = serialize_snapshot(snap, encode_schema)
        key = snapshot_key(name, body, nonces())
        writes.append((key, body))
        self.remember(key, snap)
        return self.state(key)

    def create_all(self, writes: list[tuple[str, bytes]]) -> None:
        """Create the objects of a version, in parallel. Each key is new (a digest and a
        nonce), so one that exists already can only be our own write whose answer was lost."""

        def put(item: tuple[str, bytes]) -> None:
            key, body = item
            assert self.store is not None
            with contextlib.suppress(AlreadyExistsError):
                self.store.put(key, body, mode="create", content_type="application/json")

        if len(writes) <= 1:
            for item in writes:
                put(item)
            return
        with ThreadPoolExecutor(min(16, len(writes))) as pool:
            list(pool.map(put, writes))
