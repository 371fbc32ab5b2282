"""The registry's I/O shell: reading snapshots and the commit loop, with group commit.

One commit, as the AWS multi-writer blog's table has it (DESIGN.md §3.2):

1. *Prepare* (in the caller's thread, in parallel with other callers): write the delta
   manifests of the added files, create-only and content-addressed.
2. *Queue*: with group commit on, concurrent ``commit()`` calls of one :class:`Registry` wait
   for the one commit in flight; whoever goes next takes everything queued as one batch.
3. *Attempt*: GET the root (body + ETag) — on a first attempt, the root as this process last
   read or wrote it stands in for the GET, and a stale one costs a 412 and a redrive; drop
   changes whose commit id is already recorded
   (idempotent success); apply each change to the document (:mod:`._changes`), failing just the
   ones that no longer apply; write any consolidated manifests; PUT the root with
   ``If-Match: <etag>`` (``If-None-Match: *`` for the very first commit).
4. *Outcome*:

   ===================================  ====================================================
   200                                  every change in the batch is committed
   412 PreconditionFailed               **redrive**: back to 3, re-read and re-validate
   409 ConditionalRequestConflict       **retry** after jittered backoff, then 3
   503 SlowDown                         back off, then 3
   404 on If-Match                      the registry was deleted: RegistryCorruptError,
                                        never re-created behind the users' backs
   unknown (timeout, reset, 5xx)        back to 3: the re-read finds our commit ids (success)
                                        or proves they are absent (redrive), else
                                        CommitStateUnknownError
   ===================================  ====================================================

Attempts are bounded by the :class:`~lakelock._retry.RetryPolicy` (count and total time),
driven by tenacity. The adapter's own lost-acknowledgement resolution (write id in metadata)
catches most lost acks before step 4 sees them; the commit-id check covers the rest.

Why a redrive cannot commit twice: every attempt is conditional on the ETag it read, and
carries the same commit ids; if an earlier attempt landed after all, the re-read sees its ids.
"""

from __future__ import annotations

import contextlib
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
    LockFenceRecord,
    Manifest,
    RegistryDoc,
    RetiredManifest,
    parse_manifest,
    parse_registry,
    serialize_registry,
    verify_manifest,
)
from lakelock._retry import RetryPolicy
from lakelock._s3 import IfMatch, ObjectStore, PutMode
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
)

__all__ = ["CommitResult", "Registry", "RegistrySnapshot"]

MIB = 1024 * 1024


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
        )


class _Redrive(Exception):
    """412: somebody committed since our read."""


class _Retry(Exception):
    """409/503/unknown outcome: try again after backoff."""


@dataclass
class _Pending:
    """One ``commit()`` call: its changes (one per dataset, all-or-nothing, one commit id)."""

    changes: tuple[Change, ...]
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
        commit_window: int = 1000,
        root_multipart_threshold: int = 8 * MIB,
        retention: float = 7 * 24 * 3600.0,
        clock: Callable[[], float] = time.time,
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
        self._leader = threading.Lock()
        # The root as this process last read or wrote it: the next commit starts from it
        # instead of a GET (a compare-and-swap returns the new ETag, so CAS updates chain).
        # If another writer committed meanwhile, the PUT's If-Match fails and the redrive reads.
        self._known: tuple[RegistryDoc, str] | None = None
        self._manifests: OrderedDict[str, Manifest] = OrderedDict()
        self._manifests_lock = threading.Lock()

    # -- reading ------------------------------------------------------------------------------

    def read(self) -> RegistrySnapshot:
        """The current registry (version 0 and no datasets before the first commit).
        Throttling and transport failures are retried within the registry's budget."""
        for attempt in self.retry.retrying((ConflictError, ThrottledError, OutcomeUnknownError)):
            with attempt:
                doc, etag = self._read_root()
        return RegistrySnapshot.of(doc, etag)

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
        wanted = set(partitions) if partitions is not None else None
        refs = [
            (path, ref.key)
            for path, partition in state.partitions.items()
            if wanted is None or path in wanted
            for ref in partition.manifests
        ]
        loaded = self.load_manifests(key for _, key in refs)
        files: list[DataFile] = []
        for path, key in refs:
            manifest = loaded[key]
            prefix = f"datasets/{dataset}/{path}/" if path else f"datasets/{dataset}/"
            stray = [
                f.key
                for f in manifest.files
                if f.partition_path != path or not f.key.startswith(prefix)
            ]
            if manifest.dataset != dataset or manifest.partition != path or stray:
                raise RegistryCorruptError(
                    f"manifest filed under {dataset!r}/{path!r} lists other files "
                    f"({manifest.dataset!r}/{manifest.partition!r}, {stray[:3]})",
                    bucket=self.store.bucket,
                    key=self.store.full_key(key),
                )
            files.extend(manifest.files)
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
        self._known = (doc, data.etag)
        return doc, data.etag

    def load_manifests(self, keys: Iterable[str]) -> dict[str, Manifest]:
        """The manifests at ``keys`` (cached: they are content-addressed, never change)."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, Manifest] = {}
        missing: list[str] = []
        with self._manifests_lock:
            for key in wanted:
                if key in self._manifests:
                    self._manifests.move_to_end(key)
                    found[key] = self._manifests[key]
                else:
                    missing.append(key)

        def fetch(key: str) -> Manifest:
            return verify_manifest(key, self.store.get(key).body, bucket=self.store.bucket)

        if missing:
            with ThreadPoolExecutor(min(16, len(missing))) as pool:
                loaded = dict(zip(missing, pool.map(fetch, missing), strict=True))
            for key, manifest in loaded.items():
                self._remember(key, manifest)
            found.update(loaded)
        return found

    def _remember(self, key: str, manifest: Manifest) -> None:
        """Cache a manifest: content-addressed, so an entry can never go stale."""
        with self._manifests_lock:
            self._manifests[key] = manifest
            self._manifests.move_to_end(key)
            while len(self._manifests) > 4096:
                self._manifests.popitem(last=False)

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
        ``operation`` names the commit in the log (default ``"commit"``)."""
        change = Change(
            dataset=dataset,
            commit_id=commit_id or uuid.uuid4().hex,
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
        )
        return self.commit_changes([change])

    def commit_changes(self, changes: Sequence[Change]) -> CommitResult:
        """Commit changes to several datasets as one, all or nothing (they must share one
        commit id). ``commit`` is this with one change; partition renames across datasets
        use it directly."""
        if not changes or len({c.commit_id for c in changes}) != 1:
            raise ValueError("commit_changes needs at least one change and one commit id")
        if len({c.dataset for c in changes}) != len(changes):
            raise ValueError("commit_changes takes one change per dataset")
        checked = [_validate(change) for change in changes]
        pending = _Pending(tuple(self._prepare(c) for c in checked))
        if not self.group_commit:
            self._commit_batch([pending])
        else:
            with self._queue_lock:
                self._queue.append(pending)
            while not pending.done.is_set():
                with self._leader:
                    if pending.done.is_set():
                        break
                    with self._queue_lock:
                        batch = self._queue[: self.max_batch]
                        del self._queue[: self.max_batch]
                    if batch:
                        self._commit_batch(batch)
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def _prepare(self, change: Change) -> Change:
        """Write the delta manifests of the added files (create-only, content-addressed: if
        one exists already it holds exactly these bytes)."""
        refs = {}
        delta = delta_manifests(change.dataset, change.add, nonce=uuid.uuid4().hex)
        for path, (ref, body) in delta.items():
            self._put_manifest(ref.key, body)
            self._remember(ref.key, parse_manifest(body))
            refs[path] = ref
        return replace(change, added_manifests=MappingProxyType(refs))

    def _put_manifest(self, key: str, body: bytes) -> None:
        # Content-addressed: an object already there holds these very bytes.
        with contextlib.suppress(AlreadyExistsError):
            self.store.put(key, body, mode="create", content_type="application/json")

    def _commit_batch(self, pending: list[_Pending]) -> None:
        state = _BatchState(pending=list(pending), size=len(pending))
        try:
            for attempt in self.retry.retrying((_Redrive, _Retry)):
                with attempt:
                    self._attempt(state)
        except (_Redrive, _Retry):
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
            for p in state.pending:
                p.fail(_for_commit(error, p.change, state))
        except BaseException as error:
            for p in state.pending:
                p.fail(error)
            raise

    def _attempt(self, state: _BatchState) -> None:
        state.attempts += 1
        seconds = self._clock()
        now = _iso(seconds)
        known = self._known
        etag: str | None
        try:
            if state.attempts == 1 and known is not None:
                doc, etag = known
            else:
                doc, etag = self._read_root()
        except (ConflictError, ThrottledError, OutcomeUnknownError) as error:
            state.retries += 1
            raise _Retry from error
        self._settle_known(doc, state)
        if not state.pending:
            return
        current, applied = self._apply_batch(doc, state, now=now, seconds=seconds)
        state.pending = [p for p in state.pending if not p.done.is_set()]
        if not applied:
            return
        new_doc = seal(
            current,
            applied,
            now=now,
            window=self.commit_window,
            retire_before=seconds - self.retention,
        )
        for _, a in applied:
            for key, body in a.writes:
                self._put_manifest(key, body)
        mode: PutMode = IfMatch(etag) if etag is not None else "create"
        if state.first_base is None:
            state.first_base = doc.version
        try:
            written = self._root.put(
                REGISTRY_KEY,
                serialize_registry(new_doc),
                mode=mode,
                content_type="application/json",
            )
        except (PreconditionFailedError, AlreadyExistsError) as error:
            state.redrives += 1
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
        self._known = (new_doc, written.etag)
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

    def _settle_known(self, doc: RegistryDoc, state: _BatchState) -> None:
        """Commits whose ids the registry already records are done: either re-runs (the
        caller's id was committed before) or ours, landed by an attempt whose answer was lost."""
        for p in state.pending:
            record = doc.commit(p.change.commit_id)
            if record is not None:
                ours = state.first_base is not None and record.version > state.first_base
                p.succeed(self._result(p, record.version, state, already=not ours))
        state.pending = [p for p in state.pending if not p.done.is_set()]
        if state.unknown_base is not None and state.pending:
            oldest = doc.commits[0].version if doc.commits else doc.version + 1
            if oldest > state.unknown_base + 1 and doc.version > state.unknown_base:
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


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
