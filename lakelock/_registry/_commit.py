"""The registry's commit loop, with group commit within a process and across processes
(:mod:`._fold`); settling what the root already decided is :mod:`._settle`, reading
:mod:`._shell`.

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
commit-id index, which every later attempt and fold consults."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._names import validate_partition_path
from lakelock._registry._batch import (
    BatchState,
    CommitResult,
    Fold,
    Pending,
    Redrive,
    Retry,
    Wait,
    fates_of,
    for_commit,
    iso,
    validate_change,
)
from lakelock._registry._changes import (
    HARD_MAX_MANIFESTS_PER_PARTITION,
    MAX_MANIFESTS_PER_PARTITION,
    Applied,
    Change,
    Fence,
    apply_change,
    delta_manifests,
    manifests_needed,
    new_commit_id,
    seal,
)
from lakelock._registry._document import (
    REGISTRY_KEY,
    IntentFate,
    RegistryDoc,
    parse_registry,
    serialize_registry,
)
from lakelock._registry._fold import Folding
from lakelock._registry._intents import intent_document, prune_fates
from lakelock._registry._manifest import Manifest, parse_manifest
from lakelock._registry._settle import Settling
from lakelock._s3 import IfMatch, ObjectStore, PutMode, PutResult
from lakelock.errors import (
    AlreadyExistsError,
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
    ConflictError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    RegistryCorruptError,
    StorageError,
    ThrottledError,
)

__all__ = ["CommitLoop"]


class CommitLoop(Folding, Settling):
    """The commit loop of :class:`Registry` (which sets these attributes): queueing, batches,
    attempts and their outcomes, settling what the root decided, cancelling on giving up."""

    group_commit: bool
    max_batch: int
    commit_window: int
    retention: float
    _root: ObjectStore
    _turn: threading.Condition
    _committing: bool

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
            commit_id=commit_id if commit_id is not None else new_commit_id(self._clock()),
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
        checked = [validate_change(change) for change in changes]
        unwritten: list[tuple[str, bytes]] = []
        if len(checked) == 1 and checked[0].restore is None:
            # One dataset: written as an intent that any committer can fold in.
            key, body, refs = intent_document(checked[0], now_ms=int(self._clock() * 1000))
            self._remember(key, parse_manifest(body, key=key))
            pending = Pending(
                (replace(checked[0], added_manifests=MappingProxyType(refs)),),
                check_index=explicit_id,
                unwritten=[(key, body)],
                intent=key,
            )
        else:
            pending = Pending(
                tuple(self._prepare(c, unwritten) for c in checked),
                check_index=explicit_id,
                unwritten=unwritten,
            )
        if not self.group_commit:
            self._commit_batch([pending])
        else:
            with self._turn:
                busy = self._committing and pending.intent is not None
                if busy:
                    self._sending.add(pending.intent)
            if busy:
                self._send_early(pending)
            with self._turn:
                self._queue.append(pending)
                self._sending.discard(pending.intent)
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

    def _send_early(self, pending: Pending) -> None:
        """A batch is in flight, so this commit waits for the next one anyway: create its
        intent now, in the caller's thread, and the next batch has only its snapshot and root
        to write. If the PUT fails, the batch creates the intent (it may exist already: a
        create that finds it is our own lost answer)."""
        with contextlib.suppress(StorageError):
            self._send_intents([pending])

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

    def _commit_batch(self, pending: list[Pending]) -> None:
        state = BatchState(pending=list(pending), size=len(pending))
        try:
            poll = functools.partial(self._poll, state)
            for attempt in self.retry.retrying((Redrive, Retry), steady=(Wait,), poll=poll):
                with attempt:
                    self._attempt(state)
        except (Redrive, Retry):
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
                p.fail(_gave_up(p, state))
        except (CommitError, RegistryCorruptError, StorageError) as error:
            if not isinstance(error, RegistryCorruptError):
                self._cancel_intents(state)
            for p in state.pending:
                p.fail(for_commit(error, p.change, state))
        except BaseException as error:
            for p in state.pending:
                p.fail(error)
            raise

    def _cancel_intents(self, state: BatchState) -> None:
        """A batch is giving up: the intents it may have written are visible to every other
        committer, so before its callers hear "failed", the root must say so. Each intent
        whose fate is decided already settles its caller (applied after all: success); the
        rest are recorded ``cancelled`` by a compare-and-swap, so nobody can apply them. If
        that swap cannot be made, their outcome is unknown (CommitStateUnknownError)."""
        todo = [p for p in state.pending if p.intent is not None and p.intent_sent]
        if not todo:
            return
        try:
            for attempt in self.retry.retrying((Redrive, Retry)):
                with attempt:
                    todo = self._cancel_attempt(todo, state)
        except (Redrive, Retry, StorageError, RegistryCorruptError) as error:
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

    def _cancel_attempt(self, todo: list[Pending], state: BatchState) -> list[Pending]:
        try:
            doc, etag = self._read_root()
        except (ConflictError, ThrottledError, OutcomeUnknownError) as error:
            raise Retry from error
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
            updated_at=iso(seconds),
            fates=prune_fates(
                [*doc.fates, *cancelled], watermark=doc.watermark, keep=self.commit_window
            ),
        )
        self._write_version(doc, sealed, etag, seconds)
        for p in todo:
            p.fail(
                _gave_up(p, state, "; its intent is recorded cancelled, so nobody will apply it")
            )
        return []

    def _look(self, state: BatchState, seconds: float) -> tuple[RegistryDoc, str | None] | None:
        """The root an attempt starts from, after settling what it already decided (None:
        nothing is left to commit). Raises Wait while another process is expected to fold
        our intents."""
        known = self._known
        waiting = len(state.pending)
        if state.attempts == 1 and self._contended(seconds) and self._may_wait_first(state):
            # Other processes are committing here: one of them is about to fold and swap.
            # Our intents go out now and we look at the root after about one round; only if
            # nobody has applied them by then do we list and maybe fold ourselves. A commit
            # that somebody else folds costs its intent PUT and one root GET.
            self._send_intents(state.pending)
            state.wait_started = state.looked_at = seconds
            raise Wait
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
            raise Retry from error
        self._settle_known(doc, state)
        if state.wait_started is not None and state.looked_at is not None:
            if len(state.pending) < waiting:
                # Someone else's swap settled ours, some time between our last look and this
                # one: how long that took (the middle of that span, not when we happened to
                # look, which would make each wait longer than the last) tells how often to
                # look.
                self._learn_round((state.looked_at + seconds) / 2 - state.wait_started)
                # Other processes are committing here: our next commit waits for them too,
                # instead of swapping on the root we knew (a 412) once the memory ran out.
                self._contended_until = seconds + self.contention_memory
            state.looked_at = seconds
        if not state.pending:
            return None
        if state.wait_version is not None:
            if doc.version == state.wait_version and self._patient(state):
                # The older intent's writer has not swapped yet: keep waiting (one GET a
                # round). Once the root moves without our intents, look again (a LIST).
                state.waits += 1
                state.waited += 1
                raise Wait
            if doc.version != state.wait_version:
                # The root moved: somebody is folding. Rounds of standing still are counted
                # again from here (a fold of many intents may take several rounds on a busy
                # store); rounds in all are not (see Folding._patient).
                state.waits = 0
            state.wait_version = None
        if self._stagger(doc, state):
            raise Wait
        return doc, etag

    def _attempt(self, state: BatchState) -> None:
        state.attempts += 1
        started = time.monotonic()
        seconds = self._clock()
        now = iso(seconds)
        found = self._look(state, seconds)
        if found is None:
            return
        doc, etag = found
        fold = Fold()
        if doc.format_version > 1 and self._should_list(doc, state, seconds):
            first = self._listed_at == float("-inf") and self._recent(doc, seconds)
            if (self._contended(seconds) or first) and not self._swapped_last:
                # Visible to the others before we look at theirs. The process that swapped
                # last folds now instead (see Folding._foreign_intents): its intents go with
                # its snapshot, and it does not pause for intents being sent (its next fold
                # takes them). A process's first fold sends them first too, if the root
                # moved lately: processes that start together then find each other's
                # intents, and all but the oldest wait for its fold, instead of each
                # swapping alone (one wins; and, finding nobody, lists again only a
                # fold_interval later). On a quiet lake a first commit does not pay that
                # round trip.
                self._send_intents(state.pending)
            fold = self._foreign_intents(doc, state, seconds)
        own = list(state.pending)
        state.pending = sorted(
            own + fold.pending, key=lambda p: p.intent if p.intent is not None else ""
        )
        try:
            current, applied = self._apply_batch(doc, state, now=now, seconds=seconds)
        finally:
            state.pending = [p for p in own if not p.done.is_set()]
        fates = [*fold.fates, *fates_of(applied, [*own, *fold.pending], doc.version + 1, seconds)]
        if not applied and not fates:  # commits without intents, none of which applies
            self._conclude(state, None)
            return
        sealed = seal(
            current,
            applied,
            now=now,
            window=self.commit_window,
            retire_before=seconds - self.retention,
        )
        watermark = self._watermark(doc, fold, seconds)
        sealed = replace(
            sealed,
            watermark=watermark,
            fates=prune_fates([*doc.fates, *fates], watermark=watermark, keep=self.commit_window),
        )
        new_doc, writes = self.objects.materialize(doc, sealed, at=seconds)
        self._send_intents(
            [p for p in state.pending if p.rejected is None],
            [*(w for _, a in applied for w in a.writes), *writes],
        )
        written = self._swap(state, doc, etag, new_doc)
        self._known = (new_doc, written.etag)
        self._swapped_last = True
        self._learn_round(time.monotonic() - started - fold.paused)
        self._conclude(state, new_doc.version)

    def _conclude(self, state: BatchState, version: int | None) -> None:
        """The batch's version landed (``version``; None: nothing needed a swap): its
        commits succeed, and those it rejected fail, their fates recorded."""
        assert version is not None or all(p.rejected is not None for p in state.pending)
        for p in state.pending:
            if p.rejected is not None:
                p.fail(p.rejected)
            elif version is not None:
                p.succeed(self._result(p, version, state, already=False))
        state.pending = []

    def _apply_batch(
        self, doc: RegistryDoc, state: BatchState, *, now: str, seconds: float
    ) -> tuple[RegistryDoc, list[tuple[Change, Applied]]]:
        """Apply every pending commit in turn; a commit whose changes do not all apply is
        rejected alone (all or nothing per commit), its caller told once the swap recording
        that lands. Returns the document and what was applied."""
        applied: list[tuple[Change, Applied]] = []
        current = doc
        seen: set[str] = set()
        for p in state.pending:
            p.rejected = None
            if p.change.commit_id in seen:
                continue  # a duplicate id within the batch: settled with its twin
            # Against the document as the batch has changed it so far: an earlier commit of
            # the batch may have added or consolidated manifests of the same partition.
            candidate = current
            results: list[tuple[Change, Applied]] = []
            try:
                for change in p.changes:
                    needed, most = manifests_needed(candidate, change), MAX_MANIFESTS_PER_PARTITION
                    if needed and not self.objects.has_all(needed):
                        # Consolidating would read manifests we do not hold: only a
                        # partition past the hard bound (or losing files) needs it now.
                        most = HARD_MAX_MANIFESTS_PER_PARTITION
                        needed = manifests_needed(candidate, change, max_manifests=most)
                    result = apply_change(
                        candidate,
                        change,
                        manifests=self.load_manifests(needed),
                        now=now,
                        next_version=doc.version + 1,
                        max_manifests=most,
                        retired_at=seconds,
                        nonce=uuid.uuid4().hex,
                    )
                    candidate = result.doc
                    results.append((change, result))
            except CommitConflictError as error:
                p.rejected = error
                continue
            for _, result in results:
                for key, body in result.writes:
                    self._remember(key, parse_manifest(body))
            applied.extend(results)
            seen.add(p.change.commit_id)
            current = candidate
        return current, applied

    def _swap(
        self, state: BatchState, doc: RegistryDoc, etag: str | None, new_doc: RegistryDoc
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
            raise Redrive from error
        except (ConflictError, ThrottledError) as error:
            state.retries += 1
            raise Retry from error
        except OutcomeUnknownError as error:
            state.retries += 1
            state.unknown_base = doc.version
            raise Retry from error
        except NotFoundError as error:
            raise RegistryCorruptError(
                "the registry was deleted while committing; lakelock will not re-create it "
                "(restore it, or delete the whole lake deliberately)",
                bucket=self.store.bucket,
                key=self._root.full_key(REGISTRY_KEY),
            ) from error

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
            raise Redrive from error
        except (ConflictError, ThrottledError, OutcomeUnknownError) as error:
            raise Retry from error
        self._known = (new_doc, written.etag)
        return new_doc

    def load_manifests(self, keys: Iterable[str]) -> dict[str, Manifest]:
        """The manifests at ``keys`` (cached: they are content-addressed, never change)."""
        return self.objects.manifests(keys)


def _gave_up(p: Pending, state: BatchState, then: str = "") -> CommitConflictError:
    """The error of a commit whose attempts ran out: how many, what the last one found wrong
    with it if anything (the reason its caller would have heard had that attempt's swap
    landed), and ``then`` what became of its intent."""
    found = f"; the last attempt rejected it: {p.rejected}" if p.rejected is not None else ""
    return CommitConflictError(
        f"gave up after {state.attempts} attempts ({state.redrives} redrives, "
        f"{state.retries} retries){found}{then}",
        dataset=p.change.dataset,
        commit_id=p.change.commit_id,
        attempts=state.attempts,
    )
