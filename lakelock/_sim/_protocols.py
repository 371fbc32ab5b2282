"""The commit protocols a simulation can run, behind one small interface: how to make a
process's committer, how to read the registry at the end (a :class:`~._check.View`), what a
reader reads, and how to find an older version to restore.

``core`` is lakelock's commit core (:mod:`lakelock._registry._core`), the code a ``Lake``
runs; ``toy`` (:mod:`._toy`) is a plain compare-and-swap loop for testing the simulator.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from random import Random
from typing import Any, Protocol

import orjson

from lakelock._datafile import DataFile
from lakelock._registry._changes import Change
from lakelock._registry._core import Committer, FoldPolicy
from lakelock._registry._core._decide import restore_refused, vacuum_horizon
from lakelock._registry._core._schedule import FIXED, fixed_values
from lakelock._registry._document import (
    REGISTRY_KEY,
    DatasetState,
    RegistryDoc,
    decode_schema,
    parse_registry,
)
from lakelock._registry._fencing import TAKEOVER
from lakelock._registry._intents import is_intent, parse_intent
from lakelock._registry._manifest import (
    MANIFEST_PREFIX,
    Manifest,
    manifest_digest,
    serialize_manifest,
    verify_manifest,
)
from lakelock._registry._objects import Objects, partition_from_entry, state_of
from lakelock._registry._snapshot import LazyPartitions, Snapshot, verify_snapshot
from lakelock._registry._tree import Node, index_get, require_digest, require_filed, verify_node
from lakelock._sim._check import DatasetVersion, Expired, View
from lakelock._sim._store import BUCKET, SimS3
from lakelock._sim._toy import ToyCommitter
from lakelock.errors import LakelockError

__all__ = [
    "CommitterSettings",
    "CoreProtocol",
    "SimProtocol",
    "ToyProtocol",
    "passed_over",
    "protocol_named",
]


class CommitterSettings(Protocol):
    """What a process's committer is made from: a run's settings (:class:`~._run.SimConfig`
    has them), named here so that this module need not know the run's."""

    @property
    def commit_window(self) -> int: ...
    @property
    def writers_retention(self) -> float: ...
    @property
    def given_retention(self) -> float | None: ...
    @property
    def intent_ttl(self) -> float: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def max_seconds(self) -> float: ...


class SimProtocol:
    """What the simulator needs of a commit protocol."""

    name = "?"
    #: Whether its writers can restore older versions.
    restores = False
    #: The most commits one swap can carry (the physical bound multiplies by it).
    max_fold = 1
    #: Whether its writers make every kind of commit (else only the basic ones:
    #: :data:`~._workload.BASIC_KINDS`).
    full_api = False

    def committer(self, rng: Random, config: CommitterSettings) -> Any:
        raise NotImplementedError

    def view(self, store: SimS3) -> View:
        raise NotImplementedError

    def root_version(self, body: bytes) -> int:
        version = orjson.loads(body)["version"]
        return int(version)

    def follow(self, body: bytes, rng: Random) -> str | None:
        """A key a reader reads after the root (one dataset's snapshot), or ``None``."""
        return None

    def files_of(
        self, store: SimS3, dataset: str, partition: str | None
    ) -> Sequence[DataFile] | None:
        """The files of ``partition`` in ``dataset``'s current version (``None``: none;
        ``partition`` ``None``: ``()`` if the dataset exists)."""
        return None

    def older_state(
        self, store: SimS3, dataset: str, rng: Random, *, now: float, retention: float
    ) -> tuple[Any, int, float, float] | None:
        """An older version of ``dataset`` a restore at ``now`` may make current again, its
        registry version, when it leaves the retention (the root's; ``retention`` where the
        root stores none) and when it was replaced."""
        return None


@dataclass
class ToyProtocol(SimProtocol):
    """:class:`~._toy.ToyCommitter`; ``check_ids=False`` applies a commit again after a lost
    answer (the checker must say so)."""

    check_ids: bool = True
    name = "toy"

    def committer(self, rng: Random, config: CommitterSettings) -> ToyCommitter:
        return ToyCommitter(rng, config.max_attempts, config.max_seconds, check_ids=self.check_ids)

    def view(self, store: SimS3) -> View:
        view = View()
        for _, body in store.history.get(REGISTRY_KEY, []):
            doc = orjson.loads(body)
            view.root_versions.append(doc["version"])
            for name in dict.fromkeys(name for name, _ in doc["made"]):
                ids = tuple(cid for ds, cid in doc["made"] if ds == name)
                view.datasets.setdefault(name, []).append(
                    DatasetVersion(name, doc["version"], ids, doc["datasets"].get(name, {}))
                )
        return view


class _Reader:
    """Loads the registry's write-once objects straight from the simulated bucket (no
    latency, no faults: the checker's view), each once; an object vacuum deleted from the
    bucket's graveyard (the checker still reads the versions vacuum removed). ``parsed``: the
    run's processes' parses (:class:`_SharedParsing`), by (kind, key, bytes): the same
    functions of the same bytes, so the checker takes what is there rather than parse a
    consolidated manifest of thousands of files again. ``made``: the manifests the processes
    consolidated (:class:`_SharedParsing`), by key: one is taken when it serialises to
    exactly the bytes stored (the core keeps a consolidated manifest equal to the parse of
    its bytes, ``Applied.manifests``), else the bytes are parsed."""

    def __init__(
        self,
        store: SimS3,
        parsed: Mapping[tuple[str, str, bytes], Any] | None = None,
        made: Mapping[str, Manifest] | None = None,
    ) -> None:
        self.store = store
        self._cache: dict[str, Any] = {}
        self._parsed = parsed if parsed is not None else {}
        self._made = made if made is not None else {}

    def _load(self, key: str, parse: Callable[[str, bytes], Any], kind: str = "object") -> Any:
        found = self._cache.get(key)
        if found is None:
            stored = self.store.objects.get(key) or self.store.graveyard.get(key)
            if stored is None:
                raise LakelockError(f"the registry refers to {key}, which is missing")
            found = self._parsed.get((kind, key, stored.body))
            if found is not None and kind == "intent":
                found = found[1]  # (change, manifest): an intent read as its manifest
            made = self._made.get(key) if found is None else None
            if made is not None:
                found = _as_stored(key, stored.body, made)
            if found is None:
                found = parse(key, stored.body)
            self._cache[key] = found
        return found

    def node(self, key: str) -> Node:
        node: Node = self._load(key, lambda k, b: verify_node(k, b, bucket=BUCKET))
        return node

    def snapshot(self, key: str) -> Snapshot:
        snap: Snapshot = self._load(
            key, lambda k, b: verify_snapshot(k, b, decode_schema, bucket=BUCKET)
        )
        return snap

    def manifest(self, key: str) -> Manifest:
        if is_intent(key):
            found: Manifest = self._load(
                key, lambda k, b: parse_intent(k, b, bucket=BUCKET)[1], "intent"
            )
            return found
        found = self._load(key, lambda k, b: verify_manifest(k, b, bucket=BUCKET))
        return found

    def chain(self, key: str | None) -> list[tuple[str, Snapshot]]:
        """A dataset's snapshots from ``key`` back to its first, oldest first."""
        found = []
        while key is not None:
            snap = self.snapshot(key)
            found.append((key, snap))
            key = snap.parent
        return found[::-1]

    def files(self, snap: Snapshot) -> dict[str, str]:
        return self.listed(snap)[0]

    def listed(self, snap: Snapshot) -> tuple[dict[str, str], tuple[str, ...]]:
        """The files of a version (key -> partition path), and those its manifests list
        more than once (a reader would read their rows twice)."""
        files: dict[str, str] = {}
        twice: list[str] = []
        partitions = LazyPartitions(snap.partitions, self.node, partition_from_entry)
        for path, partition in partitions.items_loaded():
            for ref in partition.manifests:
                for f in self.manifest(ref.key).files_of(path):
                    if f.key in files:
                        twice.append(f.key)
                    files[f.key] = path
        return files, tuple(twice)

    def index_problems(self, name: str, chain: list[tuple[str, Snapshot]]) -> list[str]:
        """Every commit id of the dataset's history must be found, at its version, where
        the commit loop looks ids up (the current snapshot's recent ids, then its commit-id
        index): that lookup is what keeps a re-run from applying twice."""
        if not chain:
            return []
        current = chain[-1][1]
        problems = []
        for _, snap in chain:
            for commit in snap.commits:
                raw = current.recent_ids.get(commit.id)
                if raw is None:
                    raw = index_get(current.commit_ids, commit.id, self.node)
                found = raw.get("version") if isinstance(raw, Mapping) else None
                if found != snap.version:
                    problems.append(
                        f"{name}: commit {commit.id} made v{snap.version}, but the commit-id "
                        f"index of v{current.version} has it at {found}"
                    )
        return problems

    def state(self, key: str) -> DatasetState:
        """The dataset version in snapshot ``key`` (as :meth:`Objects.state` builds it)."""
        snap = self.snapshot(key)
        return state_of(key, snap, LazyPartitions(snap.partitions, self.node, partition_from_entry))


def _as_stored(key: str, body: bytes, made: Manifest) -> Manifest | None:
    """``made`` if it is what manifest ``key``'s ``body`` parses to (it serialises to those
    bytes exactly), checked as :func:`verify_manifest` checks a parse; else ``None``."""
    require_digest(body, manifest_digest(key), "manifest", key=key, bucket=BUCKET)
    if serialize_manifest(made) != body:
        return None
    require_filed(key, MANIFEST_PREFIX, made.dataset, "manifest", bucket=BUCKET)
    return made


#: How many parsed objects the processes of a run share (:class:`_SharedParsing`).
SHARED_PARSES = 1 << 15


class _SharedParsing(Objects):
    """One simulated process's object cache: its own (what it holds decides what it
    fetches, and a restarted process starts cold), but the parsing of what it fetches is
    shared by every process of the run. The objects are write-once and their parsed forms
    immutable, so a key and its bytes parse to the same value whoever reads them; 256
    processes each parsing every snapshot, manifest and intent they read was a sixth of a
    256-writer run's CPU. ``parsed``: (kind, key, bytes) -> the parse, the
    :data:`SHARED_PARSES` newest kept (objects are read soon after they are written).
    ``made``: every manifest a process remembers under a manifest key (those it
    consolidated: they are never fetched), for the checker (:class:`_Reader`)."""

    def __init__(
        self,
        parsed: OrderedDict[tuple[str, str, bytes], Any],
        made: dict[str, Manifest] | None = None,
    ) -> None:
        super().__init__(bucket=BUCKET)
        self._parsed = parsed
        self._made = made if made is not None else {}

    def remember(self, key: str, value: Any) -> None:
        super().remember(key, value)
        if isinstance(value, Manifest) and key.startswith(MANIFEST_PREFIX):
            self._made[key] = value

    def _keep(self, memo: tuple[str, str, bytes], value: Any) -> None:
        self._parsed[memo] = value
        if len(self._parsed) > SHARED_PARSES:
            self._parsed.popitem(last=False)

    def _parser(self, key: str) -> Callable[[str, bytes], Any]:
        parse_and_remember = super()._parser(key)
        parsed = self._parsed

        def shared(k: str, b: bytes) -> Any:
            found = parsed.get(("object", k, b))
            if found is None:
                found = parse_and_remember(k, b)
                self._keep(("object", k, b), found)
            else:
                self.remember(k, found)
            return found

        return shared

    def manifests(self, keys: Iterable[str]) -> dict[str, Manifest]:
        """As :meth:`Objects.manifests`, in key order: the core passes a set, whose order
        changes with Python's hash seed, and the order of the keys it misses is the order it
        loads what it fetched — stopping at the first one gone (vacuumed), so which of them
        a process then holds was the hash seed's choice, not the run's seed."""
        return super().manifests(sorted(keys))

    def intent(self, key: str, body: bytes, *, bucket: str | None) -> tuple[Change, Manifest]:
        memo = ("intent" if bucket == BUCKET else f"intent {bucket}", key, body)
        found: tuple[Change, Manifest] | None = self._parsed.get(memo)
        if found is None:
            found = super().intent(key, body, bucket=bucket)
            self._keep(memo, found)
        return found


class CoreProtocol(SimProtocol):
    """lakelock's commit core: one :class:`~lakelock._registry._core.Committer` per
    simulated process, with its own object cache (a restarted process starts cold; the
    parsing is shared: :class:`_SharedParsing`).
    ``policy``: the :class:`~lakelock._registry._core.FoldPolicy` (default: its defaults)."""

    name = "core"
    restores = True
    full_api = True

    def __init__(
        self, policy: FoldPolicy | None = None, fixed: Mapping[str, float] | None = None
    ) -> None:
        self.policy = policy or FoldPolicy()
        #: The scheduler's fixed values to vary (``_schedule.FIXED``), checked here.
        self.fixed = fixed_values(fixed or {})
        # A swap carries the folder's own commits and up to max_fold of others'.
        self.max_fold = self.policy.max_fold + 1
        self._parsed: OrderedDict[tuple[str, str, bytes], Any] = OrderedDict()
        self._made: dict[str, Manifest] = {}
        #: What a writer's read of a partition's files (at no cost) reads with: the current
        #: root (parsed once per root written) and a reader of the write-once objects.
        self._root: tuple[Any, RegistryDoc] | None = None
        self._reader: _Reader | None = None

    def committer(self, rng: Random, config: CommitterSettings) -> Committer:
        return Committer(
            _SharedParsing(self._parsed, self._made),
            policy=self.policy,
            rng=rng,
            commit_window=config.commit_window,
            retention=config.given_retention,
            intent_ttl=config.intent_ttl,
            # The lake's vacuum floor, as a writer opening the lake without one uses it: the
            # one its root stores, which the first commit stored from the retention given
            # (the floor follows a retention below it): vacuum's window when vacuum runs.
            # Writers refuse to commit what they wrote more than half of it ago (FORMAT.md
            # rule 10), and the checker holds every commit to what vacuum deleted.
            vacuum_floor=None,
            max_attempts=config.max_attempts,
            max_seconds=config.max_seconds,
            bucket=BUCKET,
            fixed=self.fixed,
        )

    def view(self, store: SimS3) -> View:
        view = View()
        for at, body in store.history.get(REGISTRY_KEY, []):
            root = orjson.loads(body)
            version = int(root["version"])
            view.root_versions.append(version)
            view.applied_order[version] = tuple(
                c["id"] for c in root.get("commits") or () if c.get("version") == version
            )
            view.takeovers[version] = tuple(
                c["id"]
                for c in root.get("commits") or ()
                if c.get("version") == version and c.get("operation") == TAKEOVER
            )
            view.expired += _expired(root, at, store.created)
            view.applied_intents[version] = frozenset(
                f["key"]
                for f in (root.get("intents") or {}).get("fates") or ()
                if f.get("state") == "applied"
                and f.get("version") == version
                and not f.get("already")
            )
        current = store.objects.get(REGISTRY_KEY)
        if current is None:
            return view
        reader = _Reader(store, self._parsed, self._made)
        try:
            doc = parse_registry(current.body, bucket=BUCKET, key=REGISTRY_KEY)
            for name, entry in sorted(doc.entries.items()):
                chain = reader.chain(entry.snapshot)
                versions = view.datasets[name] = []
                for _, snap in chain:
                    files, twice = reader.listed(snap)
                    versions.append(
                        DatasetVersion(
                            name,
                            snap.version,
                            tuple(c.id for c in snap.commits),
                            files,
                            commits=tuple((c.id, c.operation, c.digest) for c in snap.commits),
                            at=snap.at,
                            properties=snap.properties,
                            columns=_columns(snap.schema),
                            twice=twice,
                        )
                    )
                view.problems += reader.index_problems(name, chain)
        except LakelockError as error:
            view.problems.append(f"the registry cannot be read: {type(error).__name__}: {error}")
        return view

    def files_of(
        self, store: SimS3, dataset: str, partition: str | None
    ) -> Sequence[DataFile] | None:
        current = store.objects.get(REGISTRY_KEY)
        if current is None:
            return None
        if self._root is None or self._root[0] is not current:
            self._root = (current, parse_registry(current.body, bucket=BUCKET, key=REGISTRY_KEY))
        entry = self._root[1].entries.get(dataset)
        if entry is None:
            return None
        if partition is None:
            return ()
        reader = self._reader
        if reader is None or reader.store is not store:
            reader = self._reader = _Reader(store, self._parsed, self._made)
        try:
            snap = reader.snapshot(entry.snapshot)
            partitions = LazyPartitions(snap.partitions, reader.node, partition_from_entry)
            found = partitions.get(partition)
            if found is None:
                return None
            return [
                f for ref in found.manifests for f in reader.manifest(ref.key).files_of(partition)
            ]
        except LakelockError:
            return None

    def follow(self, body: bytes, rng: Random) -> str | None:
        datasets = orjson.loads(body).get("datasets") or {}
        if not datasets:
            return None
        entry = datasets[rng.choice(sorted(datasets))]
        snapshot = entry.get("snapshot") if isinstance(entry, dict) else None
        return snapshot if isinstance(snapshot, str) else None

    def older_state(
        self, store: SimS3, dataset: str, rng: Random, *, now: float, retention: float
    ) -> tuple[Any, int, float, float] | None:
        current = store.objects.get(REGISTRY_KEY)
        if current is None:
            return None
        doc = parse_registry(current.body, bucket=BUCKET, key=REGISTRY_KEY)
        entry = doc.entries.get(dataset)
        if entry is None:
            return None
        reader = _Reader(store, self._parsed, self._made)
        chain = reader.chain(entry.snapshot)[-20:]
        # As registry.internals.restore_point: by the retention the root stores, a version
        # replaced long enough ago that it leaves the retention within the restore's lead is
        # refused, and so is one replaced before the last vacuum's window (FORMAT.md rule 9).
        if doc.settings is not None:
            retention = doc.settings.retention
        horizon = vacuum_horizon(doc)
        choices = [
            (key, snap, after.at + retention, after.at)
            for (key, snap), (_, after) in pairwise(chain)
            if not restore_refused(after.at + retention, now=now, retention=retention)
            and (horizon is None or after.at >= horizon)
            and key in store.objects
        ]
        if not choices:
            return None
        key, snap, until, since = rng.choice(choices)
        return reader.state(key), snap.version, until, since


def _columns(schema: Any) -> Mapping[str, str]:
    """A schema's columns and their types, as the model compares them."""
    if schema is None:
        return {}
    return {f.name: str(f.type) for f in schema}


def passed_over(store: SimS3) -> list[str]:
    """The intents that landed passed over (FORMAT.md rule 5): the root in place when an
    intent's first PUT took effect had its watermark at or above the intent's key and no
    fate for it, so no fold lists it and only its own writer may apply it, folding alone.
    In key order. A writer whose intent's key was made well before its PUT went out (a
    process paused in between) lands one."""
    history = store.history.get(REGISTRY_KEY, [])
    times = [at for at, _ in history]
    marks: dict[int, tuple[str, frozenset[str]]] = {}
    landed = []
    for key, written in sorted(store.created.items()):
        index = bisect.bisect_right(times, written) - 1
        if not is_intent(key) or index < 0:
            continue
        if index not in marks:
            intents = orjson.loads(history[index][1]).get("intents") or {}
            fates = frozenset(f["key"] for f in intents.get("fates") or ())
            marks[index] = (str(intents.get("watermark") or ""), fates)
        watermark, fates = marks[index]
        if key <= watermark and key not in fates:
            landed.append(key)
    return landed


def _expired(root: Any, at: float, created: Mapping[str, float]) -> list[Expired]:
    """The intents root ``root`` (written at ``at``) is the first to reject as expired: a
    rejected fate carries the version of the swap that decided it."""
    version = int(root["version"])
    intents = root.get("intents") or {}
    return [
        Expired(f["key"], version, at, created.get(f["key"]), str(f.get("reason", "")))
        for f in intents.get("fates") or ()
        if f.get("state") == "rejected"
        and f.get("version") == version
        and str(f.get("reason", "")).startswith("expired")
    ]


def protocol_named(name: str, policy: Mapping[str, float] | None = None) -> SimProtocol:
    """The protocol ``name``; ``policy``: the core's :class:`FoldPolicy` fields to change,
    and the scheduler's fixed values (``_schedule.FIXED``) to vary."""
    if name == "toy":
        if policy:
            raise ValueError("the toy protocol has no policy")
        return ToyProtocol()
    if name == "core":
        knobs: dict[str, Any] = dict(policy or {})
        fixed = {name: knobs.pop(name) for name in list(knobs) if name in FIXED}
        try:
            chosen = FoldPolicy(**knobs)
        except TypeError as error:
            raise ValueError(f"not a FoldPolicy field: {error}") from error
        return CoreProtocol(chosen, fixed)
    raise ValueError(f"unknown protocol {name!r}: core or toy")
