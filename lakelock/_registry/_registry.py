"""The registry's I/O shell: reading (now, or at a version), and the commit loop, with group
commit within a process and across processes.

One commit (docs/ARCHITECTURE.md, "The registry"; docs/FORMAT.md for the objects):

1. *Prepare* (in the caller's thread): a one-dataset commit becomes an intent (its delta
   manifest plus what it asks, :mod:`._intents`); a commit spanning datasets gets plain delta
   manifests. Nothing is written yet.
2. *Queue*: with group commit on, concurrent ``commit()`` calls of one :class:`Registry` wait
   for the one commit in flight; whoever goes next takes everything queued as one batch.
3. *Attempt*: GET the root (body + ETag) — on a first attempt, the root as this process last
   read or wrote it stands in for the GET, and a stale one costs a 412 and a redrive. Settle
   commits the root already decided (an intent's fate, a recorded commit id: success, or the
   reason it was refused). Fold in other processes' pending intents (a LIST after the
   watermark; see :meth:`Registry._should_list`). Apply every change in intent order
   (:mod:`._changes`), failing just the ones that no longer apply; record each intent's fate;
   create the intents, manifests, index nodes and snapshots of the new version in one parallel
   round; PUT the root with ``If-Match: <etag>`` (``If-None-Match: *`` for the very first
   commit).
4. *Outcome*:

   ===================================  ====================================================
   200                                  every change in the batch is committed
   412 PreconditionFailed               **redrive**: back to 3 (usually another process has
                                        applied our intents: settled there, not re-applied)
   409 ConditionalRequestConflict       **retry** after jittered backoff, then 3
   503 SlowDown                         back off, then 3
   404 on If-Match                      the registry was deleted: RegistryCorruptError,
                                        never re-created behind the users' backs
   unknown (timeout, reset, 5xx)        back to 3: the re-read finds our commit ids (success)
                                        or proves they are absent (redrive), else
                                        CommitStateUnknownError
   attempts run out                     the batch's intents are recorded cancelled by a swap
                                        before anyone hears "failed" (or found applied:
                                        success); if that cannot be done either,
                                        CommitStateUnknownError
   ===================================  ====================================================

Attempts are bounded by the :class:`~lakelock._retry.RetryPolicy` (count and total time),
driven by tenacity. The adapter's own lost-acknowledgement resolution (write id in metadata)
catches most lost acks before step 4 sees them; the commit-id check covers the rest.

Why nothing commits twice: every attempt is conditional on the ETag it read; an intent is
applied only by the swap that records its fate, and with it its commit id in the dataset's
commit-id index, which every later attempt and fold consults.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import MappingProxyType

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._names import validate_dataset_name, validate_partition_path
from lakelock._registry._changes import (
    Applied,
    Change,
    Fence,
    apply_change,
    delta_manifests,
    manifests_needed,
    seal,
)
from lakelock._registry._document import (
    REGISTRY_KEY,
    CommitRecord,
    DatasetState,
    IntentFate,
    LockFenceRecord,
    Manifest,
    RegistryDoc,
    RetiredManifest,
    parse_manifest,
    parse_registry,
    serialize_registry,
)
from lakelock._registry._intents import INTENT_PREFIX, intent_document, parse_intent, prune_fates
from lakelock._registry._objects import HistoryEntry, LazyDatasets, Objects
from lakelock._retry import RetryPolicy
from lakelock._s3 import IfMatch, ListedObject, ObjectStore, PutMode, PutResult
from lakelock.errors import (
    AlreadyExistsError,
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
    ConflictError,
    DatasetNotFoundError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    RegistryCorruptError,
    StorageError,
    ThrottledError,
    VersionNotFoundError,
)

__all__ = ["CommitResult", "MigrationResult", "Registry", "RegistrySnapshot"]

MIB = 1024 * 1024
# Other processes' intents kept parsed, so a committer that loses a race does not read them
# again in its next round.
INTENT_CACHE = 4096


@dataclass(frozen=True)
class CommitResult:
    """What a commit did. ``version`` is the registry version that holds it; ``attempts``
    counts CAS attempts of its batch (``redrives`` after 412, ``retries`` after 409/503/unknown
    outcomes); ``already_committed`` is true when the commit id was found already recorded
    (nothing changed); ``batch_size`` is how many commits shared the CAS; ``empty`` is true
    when there was nothing to commit (no registry version was made, ``version`` is the one
    read)."""

    version: int
    commit_id: str
    attempts: int = 1
    redrives: int = 0
    retries: int = 0
    already_committed: bool = False
    batch_size: int = 1
    empty: bool = False


@dataclass(frozen=True)
class MigrationResult:
    """An upgrade to format 2: the version that did it and where the old root was kept."""

    version: int
    backup: str


@dataclass(frozen=True)
class RegistrySnapshot:
    """One consistent version of the registry."""

    version: int
    etag: str | None
    updated_at: str
    datasets: Mapping[str, DatasetState]
    fences: Mapping[str, int]
    commits: tuple[CommitRecord, ...]
    retired: tuple[RetiredManifest, ...] = ()
    lock_fences: Mapping[str, tuple[LockFenceRecord, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    format_version: int = 2
    #: ``True`` for a version other than the current one (time travel): ``datasets`` are as
    #: they were then; ``fences`` and ``commits`` are the current root's.
    historical: bool = False

    @classmethod
    def of(cls, doc: RegistryDoc, etag: str | None) -> RegistrySnapshot:
        return cls(
            doc.version,
            etag,
            doc.updated_at,
            doc.datasets,
            doc.fences,
            doc.commits,
            doc.retired,
            doc.lock_fences,
            doc.format_version,
        )


@dataclass
class Fold:
    """Other processes' intents found for one attempt: those to apply, fates decided without
    applying (expired, unreadable, applied already), and the highest key listed."""

    pending: list[_Pending] = field(default_factory=list)
    fates: list[IntentFate] = field(default_factory=list)
    listed: bool = False
    listed_max: str = ""


class _Redrive(Exception):
    """412: somebody committed since our read."""


class _Retry(Exception):
    """409/503/unknown outcome: try again after backoff."""


class _Wait(_Retry):
    """An older pending intent's writer is expected to fold ours: look again after backoff."""


@dataclass
class _Pending:
    """One ``commit()`` call: its changes (one per dataset, all-or-nothing, one commit id)."""

    changes: tuple[Change, ...]
    # The caller chose the commit id: it may be a re-run of a commit older than the root's
    # window, so the datasets' commit-id indexes are checked once.
    check_index: bool = False
    # Delta manifests not created yet (the first attempt that gets to the PUTs creates them).
    unwritten: list[tuple[str, bytes]] = field(default_factory=list)
    # The commit's intent key (a one-dataset commit: other processes may fold it in), and
    # whether this is another process's intent being folded in (nobody waits for it here).
    intent: str | None = None
    foreign: bool = False
    # The intent's PUT was sent (it may exist even if the answer never came).
    intent_sent: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    result: CommitResult | None = None
    error: BaseException | None = None

    @property
    def change(self) -> Change:
        """The first change: its commit id and dataset name the commit in errors."""
        return self.changes[0]

    def succeed(self, result: CommitResult) -> None:
        self.result = result
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


@dataclass
class _BatchState:
    pending: list[_Pending]
    size: int
    attempts: int = 0
    redrives: int = 0
    retries: int = 0
    # Version the first root PUT was based on: a recorded commit newer than it is ours.
    first_base: int | None = None
    # Version the last ambiguous attempt was based on, while its outcome is unresolved.
    unknown_base: int | None = None
    # Rounds spent waiting, with no progress at the root, for an older intent's writer to
    # fold ours (see _foreign_intents), and the root version that wait started from.
    waits: int = 0
    wait_version: int | None = None
    wait_started: float | None = None


class Registry:
    """The registry of one lake: ``metastore/dataset_registry.json`` and its manifests.

    ``group_commit`` merges concurrent ``commit()`` calls of this object into one CAS (up to
    ``max_batch`` commits). ``commit_window`` bounds the recent commit ids kept for
    idempotency. ``root_multipart_threshold`` is the root size from which it is written by
    multipart upload with an ``If-Match`` completion.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        retry: RetryPolicy | None = None,
        group_commit: bool = True,
        max_batch: int = 256,
        commit_window: int = 100,
        root_multipart_threshold: int = 8 * MIB,
        retention: float = 7 * 24 * 3600.0,
        clock: Callable[[], float] = time.time,
        max_fold: int = 256,
        fold_interval: float = 1.0,
        intent_ttl: float = 600.0,
    ) -> None:
        if max_batch < 1 or commit_window < 1:
            raise ValueError("max_batch and commit_window must be positive")
        self.store = store
        self.retry = retry or RetryPolicy()
        # The root's own store does not retry 409/503 itself: the commit loop counts them.
        self._root = ObjectStore(
            store.client,
            store.bucket,
            prefix=store.prefix,
            multipart_threshold=root_multipart_threshold,
            retry=RetryPolicy(max_attempts=1, sleep=self.retry.sleep, clock=self.retry.clock),
        )
        self.group_commit = group_commit
        self.max_batch = max_batch
        self.commit_window = commit_window
        self.retention = retention
        self._clock = clock
        self._queue: list[_Pending] = []
        self._queue_lock = threading.Lock()
        # One batch in flight at a time; the others' callers wait on this for their turn
        # (or to find their commit done by the batch in flight).
        self._turn = threading.Condition(self._queue_lock)
        self._committing = False
        # The root as this process last read or wrote it: the next commit starts from it
        # instead of a GET (a compare-and-swap returns the new ETag, so CAS updates chain).
        # If another writer committed meanwhile, the PUT's If-Match fails and the redrive reads.
        self._known: tuple[RegistryDoc, str] | None = None
        # Whether the root we know is one this process swapped in: then, as far as we know,
        # we are the one folding for everybody (see _may_wait_first).
        self._swapped_last = False
        self.objects = Objects(store)
        self.max_fold = max_fold
        self.fold_interval = fold_interval
        self.intent_ttl = intent_ttl
        self._listed_at = float("-inf")
        # Until when this process assumes other processes commit here too (see _contended).
        self.contention_memory = 5.0
        self.max_waits = 8
        # A committer folding for others under contention waits this fraction of a round
        # for the intents being sent right then, before it reads them (see _foreign_intents).
        self.gather = 0.3
        self._contended_until = float("-inf")
        # How long one fold-and-swap takes here (moving average, seconds): a committer waiting
        # for another's swap looks at the root again after about that long.
        self._round_seconds = 0.05
        # Other processes' intents read so far (write-once: a key's content never changes).
        self._intents: OrderedDict[str, Change] = OrderedDict()

    # -- reading ------------------------------------------------------------------------------

    def read(
        self, *, version: int | None = None, as_of: float | datetime | None = None
    ) -> RegistrySnapshot:
        """The current registry (version 0 and no datasets before the first commit), or, with
        ``version`` or ``as_of`` (server time: seconds since the epoch or an aware datetime),
        every dataset as it was then. A version older than the retention is
        :class:`~lakelock.errors.SnapshotExpiredError`; one that does not exist
        :class:`~lakelock.errors.VersionNotFoundError`. Throttling and transport failures
        are retried within the registry's budget."""
        doc, etag = self._current()
        if version is None and as_of is None:
            return RegistrySnapshot.of(doc, etag)
        return self._travel(doc, version=version, as_of=as_of)

    def _current(self) -> tuple[RegistryDoc, str | None]:
        for attempt in self.retry.retrying((ConflictError, ThrottledError, OutcomeUnknownError)):
            with attempt:
                doc, etag = self._read_root()
        return doc, etag

    def _travel(
        self, doc: RegistryDoc, *, version: int | None, as_of: float | datetime | None
    ) -> RegistrySnapshot:
        if version is not None and as_of is not None:
            raise ValueError("give version or as_of, not both")
        seconds = as_of.timestamp() if isinstance(as_of, datetime) else as_of
        if version is not None and (version < 1 or version > doc.version):
            raise VersionNotFoundError(
                "*", version=version, reason=f": the registry is at version {doc.version}"
            )
        if doc.format_version == 1:
            raise VersionNotFoundError(
                "*",
                version=version,
                as_of=seconds,
                reason=": this registry is still in format 1, which keeps no history "
                "(the next commit, or `lakelock registry migrate`, upgrades it)",
            )
        if version == doc.version:
            return RegistrySnapshot.of(doc, None)
        entries = doc.entries
        expire_before = self._clock() - self.retention

        def load(name: str) -> DatasetState | None:
            return self.objects.at_version(
                entries[name], name, version=version, as_of=seconds, expire_before=expire_before
            )

        datasets = LazyDatasets(entries, load, sparse=True)
        found = [datasets[n].updated_version for n in datasets] if version is None else []
        return RegistrySnapshot(
            version=version if version is not None else max(found, default=0),
            etag=None,
            updated_at=doc.updated_at,
            datasets=datasets,
            fences=doc.fences,
            commits=doc.commits,
            lock_fences=doc.lock_fences,
            historical=True,
        )

    def dataset(
        self,
        name: str,
        *,
        version: int | None = None,
        as_of: float | datetime | None = None,
        snapshot: RegistrySnapshot | None = None,
    ) -> DatasetState:
        """One dataset, now or at ``version``/``as_of``: loads just that dataset."""
        name = validate_dataset_name(name)
        snap = snapshot or self.read(version=version, as_of=as_of)
        state = snap.datasets.get(name)
        if state is None:
            if version is not None or as_of is not None:
                seconds = as_of.timestamp() if isinstance(as_of, datetime) else as_of
                raise VersionNotFoundError(name, version=version, as_of=seconds)
            raise DatasetNotFoundError(name)
        return state

    def history(self, dataset: str, *, limit: int | None = None) -> list[HistoryEntry]:
        """The commits of ``dataset``, newest first: version, server time, commit id,
        operation and counts, as far back as its snapshots are kept (see vacuum)."""
        dataset = validate_dataset_name(dataset)
        doc, _ = self._current()
        if doc.format_version == 1:
            if dataset not in doc.datasets:
                raise DatasetNotFoundError(dataset)
            return [
                HistoryEntry(
                    dataset, c.version, _seconds(c.at), c.id, c.operation, c.added, c.removed
                )
                for c in reversed(doc.commits)
                if dataset in c.datasets
            ][:limit]
        entry = doc.entries.get(dataset)
        if entry is None:
            raise DatasetNotFoundError(dataset)
        return self.objects.history(entry, dataset, limit=limit)

    def migrate(self) -> MigrationResult | None:
        """Upgrade a format-1 registry to format 2 by compare-and-swap (any commit does it
        too), keeping the format-1 document as a write-once backup; ``None`` if it is in
        format 2 already (or a concurrent upgrade won: exactly one does)."""
        for attempt in self.retry.retrying((_Redrive, _Retry)):
            with attempt:
                try:
                    doc, etag = self._read_root()
                except (ConflictError, ThrottledError, OutcomeUnknownError) as error:
                    raise _Retry from error
                if doc.format_version > 1 or etag is None:
                    return None
                seconds = self._clock()
                sealed = replace(doc, version=doc.version + 1, updated_at=_iso(seconds))
                new_doc = self._write_version(doc, sealed, etag, seconds)
                assert new_doc.backup is not None
                return MigrationResult(new_doc.version, new_doc.backup)
        raise AssertionError("unreachable: the retry loop returns or raises")

    def intent_fates(self) -> tuple[IntentFate, ...]:
        """What the root has decided about recent intents (applied at a version, rejected
        with a reason, cancelled), oldest first: every one above the watermark, and at least
        the ``commit_window`` most recent."""
        doc, _ = self._current()
        return doc.fates

    def pending_intents(self) -> list[str]:
        """Intents no swap has decided yet (above the watermark, no fate): commits of other
        processes, or of crashed ones, that the next fold may apply."""
        doc, _ = self._current()
        if doc.format_version == 1:
            return []
        decided = {f.key for f in doc.fates}
        return [
            o.key
            for o in self.store.list(INTENT_PREFIX, start_after=doc.watermark)
            if o.key not in decided
        ]

    def _write_version(
        self, doc: RegistryDoc, sealed: RegistryDoc, etag: str, seconds: float
    ) -> RegistryDoc:
        """A version that changes no dataset (an upgrade, cancelled fates): its objects, then
        the root's swap; a lost race is a redrive, anything transient a retry."""
        new_doc, writes = self.objects.materialize(doc, sealed, at=seconds)
        self.objects.create_all(writes)
        try:
            written = self._root.put(
                REGISTRY_KEY,
                serialize_registry(new_doc),
                mode=IfMatch(etag),
                content_type="application/json",
            )
        except PreconditionFailedError as error:
            raise _Redrive from error
        except (ConflictError, ThrottledError, OutcomeUnknownError) as error:
            raise _Retry from error
        self._known = (new_doc, written.etag)
        return new_doc

    def reachable(self, *, cutoff: float) -> set[str]:
        """Every object a reader of a version current at or after ``cutoff`` (seconds since
        the epoch) can need (see :mod:`lakelock._vacuum`)."""
        doc, _ = self._current()
        if doc.format_version > 1:
            keep: set[str] = set()
            for entry in doc.entries.values():
                keep |= self.objects.reachable(entry, cutoff=cutoff)
            return keep
        manifests = {
            ref.key
            for dataset in doc.datasets.values()
            for partition in dataset.partitions.values()
            for ref in partition.manifests
        }
        keep = set(manifests)
        for manifest in self.load_manifests(sorted(manifests)).values():
            keep.update(f.key for f in manifest.files)
        for retired in doc.retired:
            if retired.at < cutoff or retired.key in keep:
                continue
            keep.add(retired.key)
            try:  # deleted by an earlier vacuum: its files are not protected by it any more
                manifest = self.objects.manifest(retired.key)
            except RegistryCorruptError as error:
                if not isinstance(error.__cause__, NotFoundError):
                    raise
                continue
            keep.update(f.key for f in manifest.files)
        return keep

    def find_commit(self, commit_id: str, *, datasets: Iterable[str] | None = None) -> int | None:
        """The version that recorded ``commit_id``, or None: the root's recent window first,
        then the commit-id index of each dataset (of ``datasets``, default all) — so a re-run
        is recognised long after it left the window (as long as its dataset exists)."""
        snap = self.read()
        for record in reversed(snap.commits):
            if record.id == commit_id:
                return record.version
        names = list(datasets) if datasets is not None else list(snap.datasets)
        for name in names:
            state = snap.datasets.get(name)
            if state is not None:
                found = self.objects.commit_version(state, commit_id)
                if found is not None:
                    return found
        return None

    def files(
        self,
        dataset: str,
        *,
        snapshot: RegistrySnapshot | None = None,
        partitions: Iterable[str] | None = None,
    ) -> list[DataFile]:
        """The committed files of ``dataset`` in ``snapshot`` (default: a fresh read),
        optionally only of the given partition paths, in key order."""
        snap = snapshot or self.read()
        state = snap.datasets.get(dataset)
        if state is None:
            raise DatasetNotFoundError(dataset)
        if partitions is not None:
            chosen = [(p, state.partitions.get(p)) for p in dict.fromkeys(partitions)]
        else:
            chosen = list(state.partitions.items())
        refs = [
            (path, ref)
            for path, partition in chosen
            if partition is not None
            for ref in partition.manifests
        ]
        loaded = self.load_manifests(ref.key for _, ref in refs)
        files: list[DataFile] = []
        for path, ref in refs:
            manifest = loaded[ref.key]
            prefix = f"datasets/{dataset}/{path}/" if path else f"datasets/{dataset}/"
            mine = manifest.files_of(path)
            stray = [
                f.key
                for f in (manifest.files if manifest.partition is not None else mine)
                if f.partition_path != path or not f.key.startswith(prefix)
            ]
            if (
                manifest.dataset != dataset
                or manifest.partition not in (None, path)
                or stray
                or len(mine) != ref.files
            ):
                raise RegistryCorruptError(
                    f"manifest filed under {dataset!r}/{path!r} lists other files "
                    f"({manifest.dataset!r}/{manifest.partition!r}, {stray[:3]}, "
                    f"{len(mine)} of {ref.files} files)",
                    bucket=self.store.bucket,
                    key=self.store.full_key(ref.key),
                )
            files.extend(mine)
        return sorted(files, key=lambda f: f.key)

    def _read_root(self) -> tuple[RegistryDoc, str | None]:
        try:
            data = self._root.get(REGISTRY_KEY)
        except NotFoundError as error:
            if error.code == "NoSuchBucket":  # a missing bucket is not an empty lake
                raise NotFoundError(
                    f"bucket {self.store.bucket!r} does not exist",
                    bucket=self.store.bucket,
                    key=error.key,
                    operation=error.operation,
                    status=error.status,
                    code=error.code,
                ) from error
            return RegistryDoc(), None
        doc = parse_registry(
            data.body, bucket=self.store.bucket, key=self._root.full_key(REGISTRY_KEY)
        )
        if doc.format_version > 1:
            doc = replace(doc, datasets=self.objects.datasets(doc))
        self._known = (doc, data.etag)
        self._swapped_last = False
        return doc, data.etag

    def load_manifests(self, keys: Iterable[str]) -> dict[str, Manifest]:
        """The manifests at ``keys`` (cached: they are content-addressed, never change)."""
        return self.objects.manifests(keys)

    def _remember(self, key: str, manifest: Manifest) -> None:
        self.objects.remember(key, manifest)

    # -- committing ---------------------------------------------------------------------------

    def commit(
        self,
        dataset: str,
        *,
        add: Sequence[DataFile] = (),
        remove: Sequence[DataFile | str] = (),
        schema: pa.Schema | None = None,
        properties: Mapping[str, str | None] | None = None,
        commit_id: str | None = None,
        fence: Fence | tuple[str, int] | None = None,
        partition_by: Sequence[str] | None = None,
        remove_partitions: Sequence[str] = (),
        operation: str | None = None,
    ) -> CommitResult:
        """Add and remove files of ``dataset`` (and declare its schema, partition columns and
        properties) in one atomic registry update. A ``commit_id`` already recorded makes this
        a no-op success, so a re-run pipeline commits once. ``fence=(name, token)`` refuses
        the commit if a higher token was seen for ``name`` (:class:`StaleFenceError`).
        ``remove_partitions`` removes every file of the partitions at or under those paths
        (``""``: all) as they are when the commit applies (files added by this commit stay);
        ``operation`` names the commit in the log (default ``"commit"``). A new dataset
        without ``partition_by`` takes the partition columns its files' paths name."""
        change = Change(
            dataset=dataset,
            commit_id=commit_id if commit_id is not None else uuid.uuid4().hex,
            add=tuple(add),
            remove=tuple(r.key if isinstance(r, DataFile) else r for r in remove),
            schema=schema,
            partition_by=tuple(partition_by) if partition_by is not None else None,
            properties=dict(properties) if properties is not None else None,
            fence=Fence(*fence) if isinstance(fence, tuple) else fence,
            remove_partitions=tuple(
                dict.fromkeys(validate_partition_path(p) for p in remove_partitions)
            ),
            operation=operation or "commit",
            generated_id=commit_id is None,
        )
        return self.commit_changes([change], explicit_id=commit_id is not None)

    def commit_changes(
        self, changes: Sequence[Change], *, explicit_id: bool = True
    ) -> CommitResult:
        """Commit changes to several datasets as one, all or nothing (they must share one
        commit id). ``commit`` is this with one change; partition renames across datasets
        use it directly."""
        if not changes or len({c.commit_id for c in changes}) != 1:
            raise ValueError("commit_changes needs at least one change and one commit id")
        if len({c.dataset for c in changes}) != len(changes):
            raise ValueError("commit_changes takes one change per dataset")
        checked = [_validate(change) for change in changes]
        unwritten: list[tuple[str, bytes]] = []
        if len(checked) == 1 and checked[0].restore is None:
            # One dataset: written as an intent that any committer can fold in.
            key, body, refs = intent_document(checked[0], now_ms=int(self._clock() * 1000))
            self._remember(key, parse_manifest(body, key=key))
            pending = _Pending(
                (replace(checked[0], added_manifests=MappingProxyType(refs)),),
                check_index=explicit_id,
                unwritten=[(key, body)],
                intent=key,
            )
        else:
            pending = _Pending(
                tuple(self._prepare(c, unwritten) for c in checked),
                check_index=explicit_id,
                unwritten=unwritten,
            )
        if not self.group_commit:
            self._commit_batch([pending])
        else:
            with self._turn:
                self._queue.append(pending)
            while True:
                with self._turn:
                    while self._committing and not pending.done.is_set():
                        self._turn.wait()
                    if pending.done.is_set():
                        break
                    self._committing = True
                    batch = self._queue[: self.max_batch]
                    del self._queue[: self.max_batch]
                try:
                    self._commit_batch(batch)
                finally:
                    with self._turn:
                        self._committing = False
                        self._turn.notify_all()
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def _prepare(self, change: Change, unwritten: list[tuple[str, bytes]]) -> Change:
        """The delta manifests of the added files (digest-named, with a nonce), queued in
        ``unwritten``: they are created together with the version's snapshot and index
        nodes, in one parallel round before the root's compare-and-swap."""
        refs = {}
        delta = delta_manifests(change.dataset, change.add, nonce=uuid.uuid4().hex)
        for path, (ref, body) in delta.items():
            if ref.key not in {key for key, _ in unwritten}:
                unwritten.append((ref.key, body))
                self._remember(ref.key, parse_manifest(body))
            refs[path] = ref
        return replace(change, added_manifests=MappingProxyType(refs))

    def _commit_batch(self, pending: list[_Pending]) -> None:
        state = _BatchState(pending=list(pending), size=len(pending))
        try:
            for attempt in self.retry.retrying(
                (_Redrive, _Retry), steady=(_Wait,), poll=self._poll
            ):
                with attempt:
                    self._attempt(state)
        except (_Redrive, _Retry):
            self._cancel_intents(state)
            for p in state.pending:
                if state.unknown_base is not None:
                    p.fail(
                        CommitStateUnknownError(
                            f"commit outcome unknown after {state.attempts} attempts: the "
                            "registry could not be re-read to settle it",
                            dataset=p.change.dataset,
                            commit_id=p.change.commit_id,
                        )
                    )
                    continue
                p.fail(
                    CommitConflictError(
                        f"gave up after {state.attempts} attempts "
                        f"({state.redrives} redrives, {state.retries} retries)",
                        dataset=p.change.dataset,
                        commit_id=p.change.commit_id,
                        attempts=state.attempts,
                    )
                )
        except (CommitError, RegistryCorruptError, StorageError) as error:
            if not isinstance(error, RegistryCorruptError):
                self._cancel_intents(state)
            for p in state.pending:
                p.fail(_for_commit(error, p.change, state))
        except BaseException as error:
            for p in state.pending:
                p.fail(error)
            raise

    def _cancel_intents(self, state: _BatchState) -> None:
        """A batch is giving up: the intents it may have written are visible to every other
        committer, so before its callers hear "failed", the root must say so. Each intent
        whose fate is decided already settles its caller (applied after all: success); the
        rest are recorded ``cancelled`` by a compare-and-swap, so nobody can apply them. If
        that swap cannot be made, their outcome is unknown (CommitStateUnknownError)."""
        todo = [p for p in state.pending if p.intent is not None and p.intent_sent]
        if not todo:
            return
        try:
            for attempt in self.retry.retrying((_Redrive, _Retry)):
                with attempt:
                    todo = self._cancel_attempt(todo, state)
        except (_Redrive, _Retry, StorageError, RegistryCorruptError) as error:
            for p in todo:
                failure = CommitStateUnknownError(
                    "giving up, but its intent could not be cancelled: another committer may "
                    f"still apply it (look up its commit id): {error}",
                    dataset=p.change.dataset,
                    commit_id=p.change.commit_id,
                )
                failure.__cause__ = error
                p.fail(failure)
        state.pending = [p for p in state.pending if not p.done.is_set()]

    def _cancel_attempt(self, todo: list[_Pending], state: _BatchState) -> list[_Pending]:
        try:
            doc, etag = self._read_root()
        except (ConflictError, ThrottledError, OutcomeUnknownError) as error:
            raise _Retry from error
        state.first_base = state.first_base if state.first_base is not None else doc.version
        self._settle_known(doc, replace(state, pending=todo))
        todo = [p for p in todo if not p.done.is_set()]
        if not todo or etag is None:
            return todo
        seconds = self._clock()
        version = doc.version + 1
        cancelled = [
            IntentFate(p.intent, "cancelled", version, seconds, "its committer gave up")
            for p in todo
            if p.intent is not None
        ]
        sealed = replace(
            doc,
            version=version,
            updated_at=_iso(seconds),
            fates=prune_fates(
                [*doc.fates, *cancelled], watermark=doc.watermark, keep=self.commit_window
            ),
        )
        self._write_version(doc, sealed, etag, seconds)
        for p in todo:
            p.fail(
                CommitConflictError(
                    f"gave up after {state.attempts} attempts ({state.redrives} redrives, "
                    f"{state.retries} retries); its intent is recorded cancelled, so nobody "
                    "will apply it",
                    dataset=p.change.dataset,
                    commit_id=p.change.commit_id,
                    attempts=state.attempts,
                )
            )
        return []

    def _may_wait_first(self, state: _BatchState) -> bool:
        known = self._known
        return (
            self.max_fold > 0
            and not self._swapped_last
            and known is not None
            and known[0].format_version > 1
            and all(p.intent is not None for p in state.pending)
        )

    def _learn_round(self, seconds: float) -> None:
        self._round_seconds = 0.8 * self._round_seconds + 0.2 * min(seconds, 5.0)

    def _poll(self) -> float:
        """How long a waiting committer sleeps before it looks at the root again: about one
        fold-and-swap round, jittered so waiters do not look all at once."""
        return self._round_seconds * random.uniform(0.5, 1.0)

    def _look(self, state: _BatchState, seconds: float) -> tuple[RegistryDoc, str | None] | None:
        """The root an attempt starts from, after settling what it already decided (None:
        nothing is left to commit). Raises _Wait while another process is expected to fold
        our intents."""
        known = self._known
        waiting = len(state.pending)
        if state.attempts == 1 and self._contended(seconds) and self._may_wait_first(state):
            # Other processes are committing here: one of them is about to fold and swap.
            # Our intents go out now and we look at the root after about one round; only if
            # nobody has applied them by then do we list and maybe fold ourselves. A commit
            # that somebody else folds costs its intent PUT and one root GET.
            self._send_intents(state)
            state.wait_started = time.monotonic()
            raise _Wait
        etag: str | None
        try:
            if (
                state.attempts == 1
                and known is not None
                and (self._swapped_last or not self._contended(seconds))
            ):
                doc, etag = known
            else:
                doc, etag = self._read_root()
        except (ConflictError, ThrottledError, OutcomeUnknownError) as error:
            state.retries += 1
            raise _Retry from error
        self._settle_known(doc, state)
        if state.wait_started is not None and len(state.pending) < waiting:
            # Someone else's swap settled ours: how long that took tells how often to look.
            self._learn_round(time.monotonic() - state.wait_started)
        if not state.pending:
            return None
        if state.wait_version is not None:
            if doc.version == state.wait_version and state.waits < self.max_waits:
                # The older intent's writer has not swapped yet: keep waiting (one GET a
                # round). Once the root moves without our intents, look again (a LIST).
                state.waits += 1
                raise _Wait
            state.wait_version = None
        return doc, etag

    def _attempt(self, state: _BatchState) -> None:
        state.attempts += 1
        started = time.monotonic()
        seconds = self._clock()
        now = _iso(seconds)
        found = self._look(state, seconds)
        if found is None:
            return
        doc, etag = found
        fold = Fold()
        if doc.format_version > 1 and self._should_list(doc, state, seconds):
            if self._contended(seconds):
                self._send_intents(state)  # visible to the others before we look at theirs
            fold = self._foreign_intents(doc, state, seconds)
        own = list(state.pending)
        state.pending = sorted(
            own + fold.pending, key=lambda p: p.intent if p.intent is not None else ""
        )
        try:
            current, applied = self._apply_batch(doc, state, now=now, seconds=seconds)
        finally:
            state.pending = [p for p in own if not p.done.is_set()]
        fates = [*fold.fates, *_fates_of(applied, [*own, *fold.pending], doc.version + 1, seconds)]
        if not applied and not fates:
            return
        sealed = seal(
            current,
            applied,
            now=now,
            window=self.commit_window,
            retire_before=seconds - self.retention,
        )
        watermark = max(doc.watermark, fold.listed_max)
        sealed = replace(
            sealed,
            watermark=watermark,
            fates=prune_fates([*doc.fates, *fates], watermark=watermark, keep=self.commit_window),
        )
        new_doc, writes = self.objects.materialize(doc, sealed, at=seconds)
        deltas = [w for p in state.pending for w in p.unwritten]
        for p in state.pending:
            p.intent_sent = p.intent_sent or bool(p.unwritten)
        self.objects.create_all(deltas + [w for _, a in applied for w in a.writes] + writes)
        for p in state.pending:
            p.unwritten = []
        written = self._swap(state, doc, etag, new_doc)
        self._known = (new_doc, written.etag)
        self._swapped_last = True
        self._learn_round(time.monotonic() - started)
        if fold.listed:
            self._listed_at = seconds
        for p in state.pending:
            p.succeed(self._result(p, new_doc.version, state, already=False))
        state.pending = []

    def _apply_batch(
        self, doc: RegistryDoc, state: _BatchState, *, now: str, seconds: float
    ) -> tuple[RegistryDoc, list[tuple[Change, Applied]]]:
        """Apply every pending commit in turn; a commit whose changes do not all apply fails
        alone (all or nothing per commit). Returns the document and what was applied."""
        applied: list[tuple[Change, Applied]] = []
        current = doc
        seen: set[str] = set()
        for p in state.pending:
            if p.change.commit_id in seen:
                continue  # a duplicate id within the batch: settled with its twin
            # Against the document as the batch has changed it so far: an earlier commit of
            # the batch may have added or consolidated manifests of the same partition.
            candidate = current
            results: list[tuple[Change, Applied]] = []
            try:
                for change in p.changes:
                    result = apply_change(
                        candidate,
                        change,
                        manifests=self.load_manifests(manifests_needed(candidate, change)),
                        now=now,
                        next_version=doc.version + 1,
                        retired_at=seconds,
                        nonce=uuid.uuid4().hex,
                    )
                    candidate = result.doc
                    results.append((change, result))
            except CommitConflictError as error:
                p.fail(error)
                continue
            for _, result in results:
                for key, body in result.writes:
                    self._remember(key, parse_manifest(body))
            applied.extend(results)
            seen.add(p.change.commit_id)
            current = candidate
        return current, applied

    def _swap(
        self, state: _BatchState, doc: RegistryDoc, etag: str | None, new_doc: RegistryDoc
    ) -> PutResult:
        """The root's compare-and-swap, its outcome turned into a redrive or a retry."""
        mode: PutMode = IfMatch(etag) if etag is not None else "create"
        if state.first_base is None:
            state.first_base = doc.version
        try:
            return self._root.put(
                REGISTRY_KEY,
                serialize_registry(new_doc),
                mode=mode,
                content_type="application/json",
            )
        except (PreconditionFailedError, AlreadyExistsError) as error:
            state.redrives += 1
            self._contended_until = self._clock() + self.contention_memory
            raise _Redrive from error
        except (ConflictError, ThrottledError) as error:
            state.retries += 1
            raise _Retry from error
        except OutcomeUnknownError as error:
            state.retries += 1
            state.unknown_base = doc.version
            raise _Retry from error
        except NotFoundError as error:
            raise RegistryCorruptError(
                "the registry was deleted while committing; lakelock will not re-create it "
                "(restore it, or delete the whole lake deliberately)",
                bucket=self.store.bucket,
                key=self._root.full_key(REGISTRY_KEY),
            ) from error

    def _should_list(self, doc: RegistryDoc, state: _BatchState, seconds: float) -> bool:
        """Whether this attempt looks for other processes' intents: after a lost race,
        when someone else has committed since our last write, and at least every
        ``fold_interval`` seconds (so a crashed writer's intent is applied by somebody)."""
        known = self._known
        return self.max_fold > 0 and (
            state.attempts > 1
            or self._contended(seconds)
            or known is None
            or known[0].version != doc.version
            or seconds - self._listed_at >= self.fold_interval
        )

    def _send_intents(self, state: _BatchState) -> None:
        """Create the batch's intents now (they are otherwise created with the version)."""
        writes = [w for p in state.pending for w in p.unwritten]
        for p in state.pending:
            p.intent_sent = p.intent_sent or bool(p.unwritten)
        self.objects.create_all(writes)
        for p in state.pending:
            p.unwritten = []

    def _contended(self, seconds: float) -> bool:
        """Whether other processes have been committing here lately (a lost race, or their
        intents found): then a first attempt reads the root afresh and folds in what is
        pending, so one swap carries everyone's commits instead of each losing in turn."""
        return seconds < self._contended_until

    def _foreign_intents(self, doc: RegistryDoc, state: _BatchState, seconds: float) -> Fold:
        """The pending intents of other processes, oldest first (at most ``max_fold``), read
        and ready to apply; those that cannot be applied get their fate at once."""
        # Commits of this process waiting for the next batch are not others' to read: they go
        # with that batch (reading them here would cost a GET each for nothing).
        with self._queue_lock:
            queued = {p.intent for p in self._queue}
        own = {p.intent for p in state.pending} | queued
        listed = self._list_intents(doc.watermark, self.max_fold)
        decided = {f.key for f in doc.fates}
        todo = [o for o in listed if o.key not in own and o.key not in decided]
        if todo:
            self._contended_until = seconds + self.contention_memory
        mine = sorted(p.intent for p in state.pending if p.intent is not None and p.intent_sent)
        if mine and todo[:1] and todo[0].key < mine[0] and state.waits < self.max_waits:
            # An older intent is pending: its writer folds everything pending (ours too)
            # in its next swap. Waiting for that, instead of reading every intent and racing
            # it, keeps a crowd of writers from each reading everyone's intents (N^2 GETs).
            # After max_waits rounds in which the root did not move, we fold anyway (its
            # writer may have died).
            state.waits += 1
            state.wait_version = doc.version
            if state.wait_started is None:
                state.wait_started = time.monotonic()
            raise _Wait
        if mine and self._contended(seconds) and self.gather > 0 and len(listed) < self.max_fold:
            # We fold for everybody this round. The writers whose commits the last swap
            # settled are sending their next intents about now: give them a moment, then
            # list what came since (a LIST from where this one ended), so this swap carries
            # them too instead of leaving them to the next round.
            self.retry.sleep(self._round_seconds * self.gather)
            after = listed[-1].key if listed else doc.watermark
            more = self._list_intents(after, self.max_fold - len(listed))
            listed += more
            todo += [o for o in more if o.key not in own and o.key not in decided]
        fold = Fold(listed=True, listed_max=listed[-1].key if listed else "")

        def load(listed_object: ListedObject) -> tuple[str, Change | str]:
            key = listed_object.key
            if listed_object.last_modified.timestamp() < seconds - self.intent_ttl:
                return key, f"expired: pending for more than {self.intent_ttl:.0f} s"
            cached = self._intents.get(key)
            if cached is not None:
                return key, cached
            try:
                body = self.store.get(key).body
                change, manifest = parse_intent(key, body, bucket=self.store.bucket)
            except NotFoundError:
                return key, "gone: the intent object was deleted before it was applied"
            except RegistryCorruptError as error:
                return key, f"unreadable: {error}"
            self._remember(key, manifest)
            return key, change

        loaded: list[tuple[str, Change | str]] = []
        if todo:
            with ThreadPoolExecutor(min(16, len(todo))) as pool:
                loaded = list(pool.map(load, todo))
        for key, found in loaded:
            if isinstance(found, str):
                fold.fates.append(IntentFate(key, "rejected", doc.version + 1, seconds, found))
                continue
            self._intents[key] = found
            while len(self._intents) > INTENT_CACHE:
                self._intents.popitem(last=False)
            version = self._recorded_version(doc, found)
            if version is not None:  # applied already, by another intent of its commit id
                fold.fates.append(IntentFate(key, "applied", version, seconds))
                continue
            fold.pending.append(_Pending((found,), intent=key, foreign=True))
        return fold

    def _list_intents(self, after: str, limit: int) -> list[ListedObject]:
        return list(
            itertools.islice(
                self.store.list(INTENT_PREFIX, start_after=after, page_size=limit), limit
            )
        )

    def _recorded_version(self, doc: RegistryDoc, change: Change) -> int | None:
        """The version that applied ``change``'s commit id, if one did. A listed intent is
        above the watermark, so its own fate would be in the root; a caller-chosen commit id
        may also have been applied by another intent (a re-run), which the commit-id index
        records. A generated id belongs to this intent alone: no lookup needed."""
        record = doc.commit(change.commit_id)
        if record is not None:
            return record.version
        if change.generated_id:
            return None
        dataset = doc.datasets.get(change.dataset) if doc.format_version > 1 else None
        return self.objects.commit_version(dataset, change.commit_id) if dataset else None

    def _settle_known(self, doc: RegistryDoc, state: _BatchState) -> None:
        """Commits whose ids the registry already records are done: either re-runs (the
        caller's id was committed before) or ours, landed by an attempt whose answer was lost."""
        for p in state.pending:
            fate = doc.fate(p.intent) if p.intent is not None else None
            if fate is not None and fate.state == "applied":
                p.succeed(self._result(p, fate.version, state, already=False))
                continue
            if fate is not None:
                p.fail(
                    CommitConflictError(
                        f"the commit's intent was {fate.state}: {fate.reason}",
                        dataset=p.change.dataset,
                        commit_id=p.change.commit_id,
                    )
                )
                continue
            record = doc.commit(p.change.commit_id)
            if record is not None:
                ours = state.first_base is not None and record.version > state.first_base
                p.succeed(self._result(p, record.version, state, already=not ours))
            elif p.check_index and doc.format_version > 1:
                p.check_index = False
                found = self._indexed_version(doc, p)
                if found is not None:
                    p.succeed(self._result(p, found, state, already=True))
        state.pending = [p for p in state.pending if not p.done.is_set()]
        if state.unknown_base is not None and state.pending:
            oldest = doc.commits[0].version if doc.commits else doc.version + 1
            if oldest > state.unknown_base + 1 and doc.version > state.unknown_base:
                # Past the root's window: each dataset's commit-id index is durable.
                self._settle_from_index(doc, state)
            if not state.pending:
                return
            if (
                doc.format_version == 1
                and oldest > state.unknown_base + 1
                and (doc.version > state.unknown_base)
            ):
                for p in state.pending:
                    p.fail(
                        CommitStateUnknownError(
                            "commit outcome unknown: more commits than the idempotency window "
                            f"({self.commit_window}) happened since",
                            dataset=p.change.dataset,
                            commit_id=p.change.commit_id,
                        )
                    )
                state.pending = []
            else:
                state.unknown_base = None  # proven absent: a plain redrive from here

    def _settle_from_index(self, doc: RegistryDoc, state: _BatchState) -> None:
        if doc.format_version == 1:
            return
        for p in state.pending:
            found = self._indexed_version(doc, p)
            if found is not None:
                ours = state.first_base is not None and found > state.first_base
                p.succeed(self._result(p, found, state, already=not ours))
        state.pending = [p for p in state.pending if not p.done.is_set()]

    def _indexed_version(self, doc: RegistryDoc, p: _Pending) -> int | None:
        for change in p.changes:
            dataset = doc.datasets.get(change.dataset)
            if dataset is not None:
                found = self.objects.commit_version(dataset, change.commit_id)
                if found is not None:
                    return found
        return None

    def _result(
        self, p: _Pending, version: int, state: _BatchState, *, already: bool
    ) -> CommitResult:
        return CommitResult(
            version=version,
            commit_id=p.change.commit_id,
            attempts=state.attempts,
            redrives=state.redrives,
            retries=state.retries,
            already_committed=already,
            batch_size=state.size,
        )


def _fates_of(
    applied: list[tuple[Change, Applied]], pending: list[_Pending], version: int, seconds: float
) -> list[IntentFate]:
    """The fate of every intent a batch attempted: applied at ``version`` or rejected (with
    the reason its commit failed)."""
    ids = {change.commit_id for change, _ in applied}
    fates = []
    for p in pending:
        if p.intent is None:
            continue
        if p.change.commit_id in ids and p.error is None:
            fates.append(IntentFate(p.intent, "applied", version, seconds))
        elif p.error is not None:
            fates.append(IntentFate(p.intent, "rejected", version, seconds, str(p.error)))
    return fates


def _validate(change: Change) -> Change:
    """The change with its dataset name in canonical (NFC) form, or a typed error."""
    change = replace(change, dataset=validate_dataset_name(change.dataset))
    keys = [f.key for f in change.add]
    if len(set(keys)) != len(keys):
        raise CommitConflictError(
            "the same file is added twice in one commit",
            dataset=change.dataset,
            commit_id=change.commit_id,
        )
    if set(keys) & set(change.remove):
        raise CommitConflictError(
            "a file is both added and removed in one commit",
            dataset=change.dataset,
            commit_id=change.commit_id,
        )
    return change


def _for_commit(error: BaseException, change: Change, state: _BatchState) -> BaseException:
    """The error a waiter gets when its batch failed: a storage error after an attempt whose
    outcome is unknown makes the commit's state unknown too; anything else is raised as is
    (nothing was committed)."""
    if state.unknown_base is None or isinstance(error, CommitStateUnknownError):
        return error
    wrapped = CommitStateUnknownError(
        f"commit outcome unknown, and resolving it failed: {error}",
        dataset=change.dataset,
        commit_id=change.commit_id,
    )
    wrapped.__cause__ = error
    return wrapped


def _seconds(iso: str) -> float:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
