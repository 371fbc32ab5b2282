"""The commit protocol, sans I/O: one :class:`Committer` per process.

A commit batch is a generator (:meth:`Committer.run`) that yields requests
(:mod:`._requests`) and is sent their answers; it reads no clock (it asks: :class:`Now`),
draws its randomness from the ``rng`` it was given, and performs no I/O. What it decides is
:mod:`._decide` (safety); when it waits, lists and folds is :mod:`._policy` (liveness). The
same generator runs against S3 (:mod:`._driver`) and in the simulator
(:mod:`lakelock.testing.simulate`).

One attempt (docs/FORMAT.md, "Group commit across processes"):

1. *Look*: under contention, send our intents and wait a round first. Then the root: the one
   this process last read or wrote, or a GET. Settle what the root already decided.
2. *Fold*: maybe LIST the intents after the watermark; wait for an older intent's writer, or
   read the others' intents (in parallel, once each).
3. *Apply* every commit in intent order, each validated alone; record every intent's fate;
   propose the watermark.
4. *Swap*: create the version's objects (intents, manifests, nodes, snapshots) in one
   parallel round, then PUT the root ``If-Match`` its ETag. 412: redrive; 409/503/unknown:
   retry after backoff; attempts or time run out: cancel our intents by a swap first.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar

import tenacity

from lakelock._registry._batch import Pending, for_commit, iso, seconds_of, validate_change
from lakelock._registry._changes import Change, delta_manifests, new_commit_id, seal
from lakelock._registry._core import _decide
from lakelock._registry._core._policy import BatchWaits, FoldPolicy, Hints, Liveness, advise
from lakelock._registry._core._requests import (
    Ahead,
    Get,
    List,
    Listing,
    Now,
    Parallel,
    Put,
    Sleep,
    Steps,
    fetching,
)
from lakelock._registry._document import (
    REGISTRY_KEY,
    IntentFate,
    RegistryDoc,
    parse_registry,
    serialize_registry,
    with_datasets,
)
from lakelock._registry._intents import INTENT_PREFIX, intent_group, writable
from lakelock._registry._manifest import parse_manifest
from lakelock._registry._objects import Objects, missing_object
from lakelock._registry._settings import LakeSettings, configured, explicit_settings, lake_settings
from lakelock._retry import Load, LoadWait, OutOfTime, SteadyOr
from lakelock._s3._types import ListedObject, ObjectData, PutResult
from lakelock.errors import (
    AlreadyExistsError,
    CommitConflictError,
    CommitError,
    CommitIdReusedError,
    CommitStateUnknownError,
    ConflictError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    ReadTimeoutError,
    RegistryCorruptError,
    RetryBudgetExhaustedError,
    SettingsMismatchError,
    StorageError,
    ThrottledError,
)

__all__ = ["Committer"]

_T = TypeVar("_T")

#: Answers that say "try again": the request may succeed next time (a read that timed out
#: too: the commit's own budget bounds its tries).
TRANSIENT = (ConflictError, ThrottledError, OutcomeUnknownError, ReadTimeoutError)


class Redrive(Exception):
    """412: somebody committed since our read."""


class Retry(Exception):
    """409/503/an unknown outcome: try again after backoff."""


class Wait(Retry):
    """Another process is expected to fold ours: look again after a poll."""


#: What a batch's loop retries: one strategy for every batch (tenacity's holds a method of
#: itself, a cycle only the garbage collector would free, one per batch).
_RETRIED = tenacity.retry_if_exception_type((Redrive, Retry))


@dataclass
class Fold:
    """Other processes' intents found for one attempt."""

    pending: list[Pending] = field(default_factory=list)
    fates: list[IntentFate] = field(default_factory=list)
    listed: tuple[str, ...] = ()
    paused: float = 0.0


@dataclass
class Batch:
    """One batch's attempts: its pending commits, counters, and how long it has waited."""

    pending: list[Pending]
    size: int
    attempts: int = 0
    redrives: int = 0
    retries: int = 0
    #: The version our first swap was based on: a recorded commit newer than it is ours.
    first_base: int | None = None
    #: The version the last swap with an unknown outcome was based on, while unresolved.
    unknown_base: int | None = None
    waits: BatchWaits = field(default_factory=BatchWaits)
    started: float = 0.0
    #: Our monotonic clock when the attempt read its clock (``seconds``): the moment its
    #: estimates of the server's clock are for (:attr:`Committer.server_offset`).
    elapsed: float = 0.0
    #: Why a cancelled batch failed, when it was not a budget running out.
    failure: BaseException | None = None
    #: Commits this writer refused itself once their intents were written (by ``id`` of
    #: the pending), until a swap records it: a later root may no longer show why.
    refusing: dict[int, CommitError] = field(default_factory=dict)


class Committer:
    """The commit protocol of one process, sans I/O (module docstring).

    ``objects`` is the process's object cache (shared with its readers; the core only ever
    uses it offline). ``own`` returns the intents this process is about to commit outside
    the batch in flight (queued behind it): a fold skips them instead of reading them.
    ``queued`` says whether a commit of this process waits for its turn (a lingering fold
    then stops: :meth:`linger`). ``commit_window``, ``retention``, ``intent_ttl`` and
    ``vacuum_floor`` are the lake's settings this process was given (``None``: the lake's,
    as its root stores them; one that disagrees with the lake's is refused:
    :mod:`lakelock._registry._settings`).
    """

    def __init__(
        self,
        objects: Objects | None = None,
        *,
        policy: FoldPolicy | None = None,
        rng: random.Random | None = None,
        commit_window: int | None = None,
        retention: float | None = None,
        intent_ttl: float | None = None,
        vacuum_floor: float | None = None,
        max_attempts: int = 50,
        max_seconds: float = 60.0,
        initial_backoff: float = 0.02,
        max_backoff: float = 2.0,
        own: Callable[[], set[str]] = set,
        queued: Callable[[], bool] = bool,
        bucket: str | None = None,
        root_key: str = REGISTRY_KEY,
        load: Load | None = None,
    ) -> None:
        self.objects = (objects or Objects()).offline()
        self.load = load
        self.policy = policy or FoldPolicy()
        self.rng = rng or random.Random()
        self.hints = Hints(self.policy.first_round)
        #: The settings this process was given; the lake's (from the last root read, or
        #: these over the defaults before any).
        self.explicit = explicit_settings(
            commit_window=commit_window,
            retention=retention,
            intent_ttl=intent_ttl,
            vacuum_floor=vacuum_floor,
        )
        self.settings = lake_settings(None, self.explicit)
        self.max_attempts = max_attempts
        self.max_seconds = max_seconds
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.own = own
        self.queued = queued
        self.bucket = bucket
        self.root_key = root_key
        #: The root as this process last read or wrote it (a hint: a stale one costs a 412).
        self.known: tuple[RegistryDoc, str] | None = None
        #: Objects a root referred to that were missing (another attempt reads the root again
        #: before calling the lake damaged).
        self.missed: set[str] = set()
        #: Whether our last swap carried other processes' intents (we are their folder).
        self.carried = False
        #: The server's clock minus our monotonic one (a step of the wall clock must not
        #: move our estimate of the server's), from the ``Date`` of our last root read (None:
        #: no root read yet; a process that created the root and swapped ever since knows
        #: the server's clock only from what it listed).
        self.server_offset: float | None = None
        #: The newest ``Date`` of an answer to one of our writes (server time, or None).
        self.written_date: float | None = None
        #: Other processes' intents, parsed (write-once: a key's content never changes).
        self.intents: OrderedDict[str, Change] = OrderedDict()
        self._now = 0.0

    @property
    def commit_window(self) -> int:
        return self.settings.commit_window

    @property
    def retention(self) -> float:
        return self.settings.retention

    @property
    def intent_ttl(self) -> float:
        return self.settings.intent_ttl

    @property
    def restore_lead(self) -> float:
        return _decide.restore_lead(self.settings.retention)

    def lake_settings(self, doc: RegistryDoc) -> LakeSettings:
        """The lake's settings as ``doc`` stores them (before any are stored: this process's
        over the defaults), which every commit from ``doc`` uses; a setting this process was
        given that disagrees is :class:`~lakelock.errors.SettingsMismatchError`."""
        self.settings = lake_settings(doc.settings, self.explicit)
        return self.settings

    @property
    def liveness(self) -> Liveness:
        return Liveness(self.policy, self.hints, self.rng)

    def _nonce(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    # -- preparing (pure) -------------------------------------------------------------------

    def prepare(self, changes: Sequence[Change], *, now: float) -> Pending:
        """A commit ready to run: its intents, which any process can fold (one per dataset:
        a commit spanning datasets is a group, applied whole: FORMAT.md rule 16). Only a
        restore of a version no snapshot stores (a format-1 lake's) gets plain delta
        manifests instead, applied by this process alone. Nothing is written yet. Invalid
        changes raise their typed error here."""
        checked = [validate_change(change) for change in changes]
        chosen = not checked[0].generated_id  # the caller chose the id: see Pending.check_index
        if self.hints.finished_at is not None:
            self.hints.learn_pause(now - self.hints.finished_at)
            self.hints.finished_at = None
        if all(map(writable, checked)):
            token = f"{self.rng.getrandbits(32):08x}"
            group = f"{self.rng.getrandbits(128):032x}" if len(checked) > 1 else ""
            made = intent_group(checked, now_ms=int(now * 1000), token=token, group=group)
            prepared, writes = [], []
            for change, (key, body, refs) in zip(checked, made, strict=True):
                self.objects.remember(key, parse_manifest(body, key=key))
                prepared.append(replace(change, added_manifests=MappingProxyType(refs)))
                writes.append((key, body))
            return Pending(
                tuple(prepared),
                check_index=chosen,
                unwritten=writes,
                intents=tuple(sorted(key for key, _ in writes)),
            )
        unwritten: list[tuple[str, bytes]] = []
        prepared = []
        for change in checked:
            refs = {}
            delta = delta_manifests(change.dataset, change.add, nonce=self._nonce())
            for path, (ref, body) in delta.items():
                if ref.key not in {key for key, _ in unwritten}:
                    unwritten.append((ref.key, body))
                    self.objects.remember(ref.key, parse_manifest(body))
                refs[path] = ref
            prepared.append(replace(change, added_manifests=MappingProxyType(refs)))
        return Pending(tuple(prepared), check_index=chosen, unwritten=unwritten)

    def new_commit_id(self, now: float) -> str:
        return new_commit_id(now, token=f"{self.rng.getrandbits(80):020x}")

    # -- running a batch --------------------------------------------------------------------

    def run(self, pending: Sequence[Pending]) -> Steps:
        """Commit ``pending`` as one batch: afterwards each has its result or error."""
        state = Batch(pending=list(pending), size=len(pending))
        try:
            state.started = self._now = yield Now()
            yield from self._retrying(state, self._attempt, steady=True)
        except (Redrive, Retry) as error:
            yield from self._cancel(state)
            for p in state.pending:
                if state.unknown_base is not None:
                    p.fail(
                        CommitStateUnknownError(
                            f"commit outcome unknown after {state.attempts} attempts: the "
                            "answer to a swap of it was lost, and no read of the registry "
                            "since could settle it (the swap may still land: look its commit "
                            "id up)",
                            dataset=p.change.dataset,
                            commit_id=p.change.commit_id,
                        )
                    )
                    continue
                p.fail(self._gave_up(p, state, error))
        except (CommitError, RegistryCorruptError, StorageError, SettingsMismatchError) as error:
            if not isinstance(error, RegistryCorruptError):
                # A lake setting this process disagrees with is what its callers hear,
                # once their intents are recorded cancelled.
                refused = error if isinstance(error, SettingsMismatchError) else None
                yield from self._cancel(state, refused)
            for p in state.pending:
                p.fail(for_commit(error, p.change, state.unknown_base))
        except BaseException as error:
            for p in state.pending:
                p.fail(error)
            raise
        self.hints.finished_at = self._now = yield Now()

    def send(self, pending: Sequence[Pending]) -> Steps:
        """Create ``pending``'s intents now (a batch is in flight: they will go with the
        next, and meanwhile others can fold them). A failure is left to the batch; so are
        intents rule 17 keeps back until the root this process knows is upgraded."""
        known = self.known[0] if self.known is not None else None
        with contextlib.suppress(StorageError, Retry):
            yield from self._send_intents([p for p in pending if not self._unguarded(known, [p])])

    def _retrying(self, state: Batch, attempt: Callable[[Batch], Steps], *, steady: bool) -> Steps:
        """``attempt`` until it returns, within the budget (attempts and seconds, by the
        clock the core is handed), with tenacity's strategies: jittered exponential backoff
        after a failure, the policy's poll after a :class:`Wait`."""
        slept: list[float] = []
        started = self._now
        backoff: tenacity.wait.wait_base = _Jittered(
            self.rng, self.initial_backoff, self.max_backoff
        )
        if self.load is not None:
            # A retry or a redrive is the process's retry budget's to pay, at its pace.
            backoff = LoadWait(backoff, self.load)
        liveness = self.liveness
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_attempts)
            | OutOfTime(lambda: self._now - started, self.max_seconds),
            wait=SteadyOr(
                backoff,
                (Wait,),
                lambda: advise(lambda: liveness.poll(state.waits, state.attempts), 0.05),
            )
            if steady
            else backoff,
            retry=_RETRIED,
            sleep=slept.append,
            reraise=True,
        )
        try:
            for try_ in retrying:
                if slept:
                    yield Sleep(slept.pop())
                    self._now = yield Now()
                with try_:
                    yield from attempt(state)
        finally:
            # tenacity keeps the last round's actions, bound methods of ``retrying``, in its
            # own state: a cycle per batch (every writer's every commit) that only the garbage
            # collector would free, with the batch it holds.
            retrying.iter_state.reset()

    def _attempt(self, state: Batch) -> Steps:
        state.attempts += 1
        seconds = self._now = yield Now()
        state.elapsed = yield Now(monotonic=True)
        found = yield from self._look(state, seconds)
        if found is None:
            return
        if (yield from self._paced()):
            seconds = self._now = yield Now()
            state.elapsed = yield Now(monotonic=True)
        doc, etag = found
        if self._unguarded(doc, state.pending):
            doc, etag = yield from self._upgrade(doc, etag)
        live = self.liveness
        fold = Fold()
        known = self.known
        moved = known is None or known[0].version != doc.version or not self.hints.swapped_last
        if doc.format_version > 1 and advise(
            lambda: live.should_list(seconds, attempts=state.attempts, root_moved=moved), True
        ):
            if advise(lambda: live.send_before_listing(seconds, root_updated=_updated(doc)), False):
                yield from self._send_intents(state.pending)
            fold = yield from self._fold(doc, state, seconds)
        yield from self._apply_and_swap(state, doc, etag, fold, seconds)

    def _apply_and_swap(
        self, state: Batch, doc: RegistryDoc, etag: str | None, fold: Fold, seconds: float
    ) -> Steps:
        """Apply the batch's own commits and the folded ones to ``doc``, write the new
        version's objects and swap the root to it."""
        live = self.liveness
        own = list(state.pending)
        batch = sorted(own + fold.pending, key=lambda p: p.intent if p.intent is not None else "")
        now = iso(seconds)
        server_now = self._server_now(state.elapsed)
        current, applied, rejected = yield from self._need(
            lambda: _decide.applied_batch(
                doc,
                batch,
                self.objects,
                now=now,
                seconds=seconds,
                nonces=self._nonce,
                restore_margin=self.restore_lead / 2,
                server_now=server_now,
                floor=self.settings.vacuum_floor,
            )
        )
        for _, done in applied:
            # A later batch of ours reads a manifest consolidated here from the cache.
            for key, manifest in done.manifests:
                self.objects.remember(key, manifest)
        made = {id(change) for change, _ in applied}
        for n, p in enumerate(batch):
            p.rejected = rejected.get(n)
            p.twin = p.rejected is None and id(p.change) not in made
        fates = [*fold.fates, *_decide.fates_of(applied, batch, rejected, doc.version + 1, seconds)]
        if not applied and not fates:  # commits without intents, none of which applies
            self._conclude(state, None)
            return
        sealed = yield from self._need(
            lambda: seal(
                current,
                applied,
                now=now,
                window=self.commit_window,
                retire_before=seconds - self.retention,
            )
        )
        proposed = advise(
            lambda: live.watermark(doc.watermark, fold.listed, seconds, carried=len(fold.pending)),
            fold.listed[-1] if fold.listed else doc.watermark,
        )
        watermark = _decide.bound_watermark(doc, fold.listed, proposed)
        sealed = replace(
            sealed,
            watermark=watermark,
            fates=_decide.sealed_fates(doc, fates, watermark=watermark, keep=self.commit_window),
            # The lake's first commit (or the first since settings were stored) stores them.
            settings=doc.settings if doc.settings is not None else self.settings,
        )
        new_doc, writes = yield from self._need(
            lambda: self.objects.materialize(doc, sealed, at=seconds, nonces=self._nonce)
        )
        version_writes = [*(w for _, a in applied for w in a.writes), *writes]
        sent = yield Now(monotonic=True)
        yield from self._send_intents([p for p in own if p.rejected is None], version_writes)
        # The last moment before the swap: our clock now, not the attempt's start.
        self._now = yield Now()
        elapsed = yield Now(monotonic=True)
        server_now = self._server_now(elapsed)
        if server_now is not None and _decide.too_old_to_reference(
            [
                *_decide.written_by(change for change, _ in applied),
                # This attempt's own objects: written no earlier than it sent them.
                *((key, server_now - (elapsed - sent)) for key, _ in version_writes),
            ],
            server_now=server_now,
            floor=self.settings.vacuum_floor,
        ):
            # Rule 10 at the last moment (a pause since the batch was applied): try again,
            # with new objects; the next attempt refuses a commit whose files are too old.
            raise Retry
        stale = _decide.too_old_to_apply(
            [key for p in own if p.rejected is None for key in p.intents],
            watermark=doc.watermark,
            now=self._now,
            ttl=self.intent_ttl,
        )
        if stale is not None:
            first = own[0]
            raise RetryBudgetExhaustedError(
                f"gave up: {stale}",
                dataset=first.change.dataset,
                commit_id=first.change.commit_id,
                attempts=state.attempts,
                seconds=self._now - state.started,
            )
        if _decide.restore_too_late(
            (change for change, _ in applied), now=self._now, margin=self.restore_lead / 4
        ):
            # Rule 9 at the last moment (a pause since the batch was applied): try again,
            # and the next attempt refuses the restore.
            raise Retry
        written = yield from self._swap(state, doc, etag, new_doc)
        self.known = (new_doc, written.etag)
        self.hints.swapped_last = True
        self.carried = bool(fold.pending)
        self._now = yield Now()
        self.hints.saw_root(self._now, moved=False)
        self.hints.learn_round(self._now - seconds - fold.paused, self.policy)
        window = advise(functools.partial(live.read_ahead, self._now, carried=self.carried), None)
        if window is not None:
            yield self._read_ahead(new_doc, state, window)
        self._conclude(state, new_doc.version)

    # -- lingering ------------------------------------------------------------------------------

    def lingering(self) -> bool:
        """Whether this process should go on folding for others now that its batch is
        done (:meth:`Liveness.linger`): its swap carried other processes' intents."""
        return advise(
            lambda: self.liveness.linger(carried=self.carried, own_queued=self.queued()),
            False,
        )

    def linger(self) -> Steps:
        """Fold other processes' intents for up to ``policy.linger`` more swaps, from the
        root this process just swapped in: the next fold starts as soon as ours landed,
        not after the waiters' stagger. Stops at the first round that finds nothing to
        apply, when a commit of this process is queued (its batch folds next), or at the
        first lost race or failure (then the waiters' rules take over, as after any
        folder's last swap). Safety is the batch's: this is :meth:`_attempt` without
        commits of our own."""
        swapped = self._now = yield Now()
        while True:
            pause = advise(functools.partial(self.liveness.linger_pause, swapped, self._now), None)
            if pause is None:
                return
            yield Sleep(max(pause, self.load.hold() if self.load is not None else 0.0))
            known = self.known
            if known is None or not self.hints.swapped_last or self.queued():
                return
            doc, etag = known
            state = Batch(pending=[], size=0, attempts=1)
            seconds = self._now = yield Now()
            state.elapsed = yield Now(monotonic=True)
            try:
                fold = yield from self._fold(doc, state, seconds)
                if fold.pending:
                    yield from self._apply_and_swap(state, doc, etag, fold, seconds)
                    swapped = self._now
            except (Wait, Redrive, Retry, StorageError, RegistryCorruptError):
                # RegistryCorruptError: the root we swapped in is old by now and vacuum took
                # what it refers to (or the lake is damaged: our next commit will say so).
                self.hints.swapped_last = False
                self.carried = False
                return

    def _paced(self) -> Steps:
        """Hold the next fold back as the process's pace says (after a 503 SlowDown:
        :class:`~lakelock._retry.Load`); at once otherwise. Whether it held. A waiter's looks
        (one GET of the root each) are not held: its wait already spaces them."""
        held = self.load.hold() if self.load is not None else 0.0
        if held > 0:
            yield Sleep(held)
        return held > 0

    def _look(self, state: Batch, seconds: float) -> Steps:
        """The root an attempt starts from, after settling what it already decided (None:
        nothing left to commit). Raises :class:`Wait` while another process is expected to
        fold our intents."""
        live = self.liveness
        known = self.known
        waits = state.waits
        waiting = len(state.pending)
        if state.attempts == 1 and advise(
            lambda: live.wait_first(
                seconds,
                knows_format2=known is not None
                and known[0].format_version > 1
                and not self._unguarded(known[0], state.pending),
                all_intents=all(p.intent is not None for p in state.pending),
            ),
            False,
        ):
            yield from self._send_intents(state.pending)
            waits.started = waits.looked_at = seconds
            raise Wait
        if (
            state.attempts == 1
            and known is not None
            and advise(lambda: live.use_known_root(seconds), False)
        ):
            doc, etag = known
        else:
            try:
                doc, etag = yield from self._read_root()
            except TRANSIENT as error:
                state.retries += 1
                raise Retry from error
            self.hints.learn_swaps(doc.version, self._now, self.policy)
        self.lake_settings(doc)
        doc, etag = yield from self._settle(doc, state, etag)
        if waits.started is not None and waits.looked_at is not None:
            if len(state.pending) < waiting:
                # Another's swap settled ours between our last look and this one: the middle
                # of that span, not this look, tells how long a round is here.
                self.hints.learn_round((waits.looked_at + seconds) / 2 - waits.started, self.policy)
                self.hints.contend(seconds, self.policy)
            waits.looked_at = seconds
        if not state.pending:
            return None
        if waits.wait_version is not None:
            if doc.version == waits.wait_version and advise(
                lambda: live.patient(waits, state.attempts, self.max_attempts), False
            ):
                waits.waits += 1
                waits.waited += 1
                raise Wait
            if doc.version != waits.wait_version:
                waits.waits = 0  # the root moved: somebody is folding
            waits.wait_version = None
        if (
            waits.started is not None
            and doc.fates
            and state.pending
            and all(p.intent is not None and p.intent_sent for p in state.pending)
        ):
            oldest = min(p.intent for p in state.pending if p.intent is not None)
            if advise(
                lambda: live.stagger(
                    waits,
                    state.attempts,
                    self.max_attempts,
                    version=doc.version,
                    oldest=oldest,
                    newest_decided=doc.newest_decided(),
                    passed_over=oldest <= doc.watermark,
                ),
                False,
            ):
                raise Wait
        return doc, etag

    def _settle(self, doc: RegistryDoc, state: Batch, etag: str | None) -> Steps:
        """End the commits ``doc`` already decided (:func:`._decide.settle`); resolve an
        earlier swap whose outcome was unknown. Returns the root to go on from: ``doc``, or
        the one that recorded this writer's own refusals (:meth:`_record_refused`)."""
        for p in state.pending:
            if p.indexed is not None and _decide.past_the_window(doc, p.indexed + 1):
                p.check_index = True  # a twin may have been applied and left the window since
        settled = yield from self._need(
            lambda: _decide.settle(doc, state.pending, self.objects, first_base=state.first_base)
        )
        found = {id(s.pending) for s in settled}
        settled += [
            _decide.Settled(p, error=state.refusing[id(p)])
            for p in state.pending
            if id(p) in state.refusing and id(p) not in found
        ]
        for s in settled:
            if not _decide.refused_unrecorded(doc, s):
                self._end(s, state)
        for p in state.pending:
            if p.check_index:
                p.check_index, p.indexed = False, doc.version
        state.pending = [p for p in state.pending if not p.finished]
        if state.unknown_base is None or not state.pending:
            return (yield from self._record_refused(doc, etag, settled, state))
        if _decide.swap_may_land(doc, state.unknown_base):
            # Not proven absent: our next swap (on this root) or its move decides; so does
            # a swap recording a refusal (the same If-Match: one of them lands).
            return (yield from self._record_refused(doc, etag, settled, state))
        beyond = _decide.past_the_window(doc, state.unknown_base + 1)
        if beyond and doc.format_version > 1:
            # Past the root's window: each dataset's commit-id index is durable.
            refused = {id(s.pending) for s in settled}
            for p in state.pending:
                if id(p) in refused:
                    continue  # refused above, to be recorded
                version = yield from self._need(
                    functools.partial(_decide.indexed_version, doc, p.changes, self.objects)
                )
                if isinstance(version, CommitIdReusedError):
                    settled.append(_decide.Settled(p, error=version))
                elif version is not None:
                    ours = state.first_base is not None and version > state.first_base
                    self._end(_decide.Settled(p, version=version, already=not ours), state)
            state.pending = [p for p in state.pending if not p.finished]
        if beyond and doc.format_version == 1:
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
        state.unknown_base = None  # proven absent: a plain redrive from here
        return (yield from self._record_refused(doc, etag, settled, state))

    def _record_refused(
        self,
        doc: RegistryDoc,
        etag: str | None,
        settled: Sequence[_decide.Settled],
        state: Batch,
    ) -> Steps:
        """Rule 7 for a commit its own writer refuses once its intent is written (its id
        recorded for another change): every other process can see that intent, and a fold
        applies it once the record that refuses it has left the root's window. So before
        its caller hears the refusal, a swap records the intent ``rejected`` with it (the
        error's kind too, rule 12). The batch keeps the refusal (``refusing``) until that
        swap lands: a redrive or a retry settles the commit again from the root then read,
        which may no longer show why, and a budget that runs out records it all the same
        (:meth:`_cancel` carries it) or the caller hears the outcome is unknown."""
        todo = [s for s in settled if s.error is not None and not s.pending.finished]
        record = [s for s in todo if _decide.refused_unrecorded(doc, s)]
        if record:
            state.refusing.update((id(s.pending), s.error) for s in record if s.error is not None)
            sealed = _decide.rejected_by_writer(
                doc,
                [(s.pending, s.error) for s in record if s.error is not None],
                seconds=self._now,
                keep=self.commit_window,
            )
            doc = yield from self.write_version(Batch([], 0), doc, sealed, etag)
            assert self.known is not None
            etag = self.known[1]
        for s in todo:
            self._end(s, state)  # the caller hears the writer's own error, as recorded
        state.pending = [p for p in state.pending if not p.finished]
        return doc, etag

    def _end(self, settled: _decide.Settled, state: Batch) -> None:
        p = settled.pending
        if settled.error is not None:
            p.fail(settled.error)
        elif settled.version is not None:
            p.succeed(
                _decide.result(
                    p,
                    settled.version,
                    attempts=state.attempts,
                    redrives=state.redrives,
                    retries=state.retries,
                    size=state.size,
                    already=settled.already,
                )
            )

    def _fold(self, doc: RegistryDoc, state: Batch, seconds: float) -> Steps:
        """The pending intents of other processes, oldest first (at most ``max_fold``), read
        and ready to apply; those that cannot be applied get their fate at once. Raises
        :class:`Wait` when an older intent's writer is expected to fold ours."""
        live = self.liveness
        policy = self.policy
        decided = {f.key for f in doc.fates}
        first = self.hints.listed_at == float("-inf")
        self.hints.listed_at = seconds
        listed = yield from self._list_intents(doc.watermark, policy.max_fold, decided)
        own = self._own(state)
        todo = [o for o in listed if o.key not in own and o.key not in decided]
        if todo:
            self.hints.contend(seconds, policy)
        ours_unsent = bool(state.pending) and all(
            p.intent is not None and not p.intent_sent for p in state.pending
        )
        if advise(lambda: live.crowd(len(todo), ours_unsent=ours_unsent), False):
            yield from self._send_intents(state.pending)
        mine = sorted(p.intent for p in state.pending if p.intent is not None and p.intent_sent)
        if (
            mine
            and todo
            and todo[0].key < mine[0]
            and advise(
                lambda: live.wait_for_older(
                    state.waits,
                    state.attempts,
                    self.max_attempts,
                    older=todo[0].key,
                    ours=mine[0],
                    first_fold=first,
                ),
                False,
            )
        ):
            waits = state.waits
            waits.waits += 1
            waits.waited += 1
            waits.wait_version = doc.version
            if waits.started is None:
                waits.started = waits.looked_at = seconds
            raise Wait
        paused = 0.0
        if mine:
            paused = advise(lambda: live.gather(seconds, room=len(todo) < policy.max_fold), 0.0)
        if paused > 0:
            yield Sleep(paused)
            after = listed[-1].key if listed else doc.watermark
            more = yield from self._list_intents(after, policy.max_fold - len(todo), decided)
            own = self._own(state)
            listed += more
            todo += [o for o in more if o.key not in own and o.key not in decided]
        fold = Fold(listed=tuple(o.key for o in listed), paused=paused)
        newest = max((o.last_modified.timestamp() for o in listed), default=None)
        yield from self._judge(doc, todo, seconds, fold, newest, elapsed=state.elapsed)
        return fold

    def _judge(
        self,
        doc: RegistryDoc,
        todo: Sequence[ListedObject],
        seconds: float,
        fold: Fold,
        newest: float | None,
        *,
        elapsed: float,
    ) -> Steps:
        """Each listed intent of another process: expired or unreadable (rejected), applied
        already through its commit id (applied at that version), or pending to apply.

        The server's clock at ``seconds`` (our monotonic clock then: ``elapsed``) is what the
        ``Date`` of our last root read said, moved on by our monotonic clock since (a step of
        our wall clock moves it not), and at least the newest ``LastModified`` listed (the
        server wrote it before it answered our LIST). With neither (no root read yet, nothing
        listed), it is unknown and nothing expires: our own clock never decides."""
        estimates = [e for e in (newest,) if e is not None]
        if self.server_offset is not None:
            estimates.append(elapsed + self.server_offset)
        server_now = max(estimates, default=None)
        readable = []
        for o in todo:
            reason = _decide.judge_listed(
                o, server_now=server_now, ttl=self.intent_ttl, loaded=None
            )
            if reason is not None:
                fold.fates.append(IntentFate(o.key, "rejected", doc.version + 1, seconds, reason))
            else:
                readable.append(o)
        loaded = yield from self._read_intents(readable)
        found: list[tuple[str, Change]] = []
        for o in readable:
            got = loaded[o.key]
            if isinstance(got, str):
                fold.fates.append(IntentFate(o.key, "rejected", doc.version + 1, seconds, got))
            else:
                found.append((o.key, got))
        # A commit spanning datasets is applied whole, once all its intents were read (rule
        # 16); a restore, once the version it makes current is loaded.
        units = _decide.whole_groups(found)
        yield from self._load_restored(units, seconds)
        for keys, changes in units:
            version = yield from self._recorded(doc, changes)
            if isinstance(version, CommitIdReusedError):  # its id names another change
                fold.fates.extend(
                    IntentFate(
                        key,
                        "rejected",
                        doc.version + 1,
                        seconds,
                        str(version),
                        _decide.error_kind(version),
                    )
                    for key in keys
                )
                continue
            if version is not None:  # applied already, through another intent of its id
                fold.fates.extend(IntentFate(key, "applied", version, seconds) for key in keys)
                continue
            restored = tuple(
                replace(c, restore=self.objects.state(c.restore_from))
                if c.restore_from is not None and self.objects.has_all((c.restore_from,))
                else c
                for c in changes
            )
            fold.pending.append(Pending(restored, intents=keys, foreign=True))

    def _recorded(self, doc: RegistryDoc, changes: Sequence[Change]) -> Steps:
        """Rule 3 for one commit of another process: the version its commit id was applied
        at, or the error if the id is recorded for another change (``None``: neither)."""
        for change in changes:
            version = yield from self._need(
                functools.partial(_decide.recorded_version, doc, change, self.objects)
            )
            if version is not None:
                return version
        return None

    def _load_restored(
        self, units: Sequence[tuple[tuple[str, ...], tuple[Change, ...]]], seconds: float
    ) -> Steps:
        """The snapshots other processes' restores make current, read into the cache (in
        parallel, once each). One gone or unreadable is left out: the batch refuses that
        restore. So is one too close to leaving the retention (rule 9 refuses it anyway,
        and vacuum may be deleting it)."""
        margin = self.restore_lead / 2
        wanted = sorted(
            {
                c.restore_from
                for _, changes in units
                for c in changes
                if c.restore_from is not None
                and _decide.restore_too_late((c,), now=seconds, margin=margin) is None
            }
        )
        fetch = [key for key in wanted if not self.objects.has_all((key,))]
        if not fetch:
            return
        answers = yield Parallel(tuple(Get(key) for key in fetch))
        for key, answer in zip(fetch, answers, strict=True):
            if isinstance(answer, NotFoundError):
                continue
            if isinstance(answer, TRANSIENT):
                raise Retry from answer
            if isinstance(answer, BaseException):
                raise answer
            with contextlib.suppress(RegistryCorruptError):
                self.objects.load(key, answer.body)

    def _own(self, state: Batch) -> set[str]:
        return {key for p in state.pending for key in p.intents} | self.own()

    def _next_listing(self, doc: RegistryDoc) -> List:
        """The first LIST of a fold from ``doc``, as :meth:`_fold` makes it (a read made
        ahead answers only an equal request)."""
        return _listing(doc.watermark, self.policy.max_fold, len({f.key for f in doc.fates}))

    def _read_ahead(self, doc: RegistryDoc, state: Batch, window: float) -> Ahead:
        """The next fold from ``doc``, read ahead (``FoldPolicy.read_ahead``): its first
        LIST, and the intents of others it finds that ``doc`` leaves undecided and this
        process has not parsed, while the caller goes on (the driver keeps the answers for
        ``window`` seconds)."""
        skip = frozenset({f.key for f in doc.fates} | self._own(state) | self.intents.keys())
        listing = self._next_listing(doc)
        return Ahead((listing,), window, read_listed=skip, most=self.policy.max_fold)

    def _list_intents(self, after: str, limit: int, decided: set[str]) -> Steps:
        """The intents after ``after``, oldest first, up to the ``limit``-th not in
        ``decided`` (those a recent swap decided are listed too, but do not use up a fold's
        share)."""
        found: list[ListedObject] = []
        undecided = 0
        start = after
        while True:
            try:
                listing: Listing = yield _listing(start, limit, len(decided))
            except TRANSIENT as error:
                raise Retry from error
            for o in _decide.above_watermark(listing.objects, after):
                if undecided >= limit:
                    return found
                found.append(o)
                undecided += o.key not in decided
            if not listing.truncated or not listing.objects:
                return found
            if listing.objects[-1].key <= start:
                return found  # the same page again: the store ignores StartAfter
            start = listing.objects[-1].key

    def _read_intents(self, todo: Sequence[ListedObject]) -> Steps:
        """Each listed intent as the change it asks for (parsed once per process), or why
        it cannot be applied: gone, unreadable. Reads what is not cached in parallel."""
        result: dict[str, Change | str] = {}
        fetch = []
        for o in todo:
            cached = self.intents.get(o.key)
            if cached is not None:
                result[o.key] = cached
            else:
                fetch.append(o.key)
        answers = (yield Parallel(tuple(Get(k) for k in fetch))) if fetch else ()
        for key, answer in zip(fetch, answers, strict=True):
            if isinstance(answer, NotFoundError):
                result[key] = "gone: the intent object was deleted before it was applied"
                continue
            if isinstance(answer, TRANSIENT):
                raise Retry from answer
            if isinstance(answer, BaseException):
                raise answer
            try:
                change, manifest = self.objects.intent(key, answer.body, bucket=self.bucket)
            except RegistryCorruptError as error:
                result[key] = f"unreadable: {error}"
                continue
            self.objects.remember(key, manifest)
            self.intents[key] = change
            while len(self.intents) > self.policy.intent_cache:
                self.intents.popitem(last=False)
            result[key] = change
        return result

    # -- requests ----------------------------------------------------------------------------

    def _need(self, compute: Callable[[], _T]) -> Steps:
        """``compute()``, fetching whatever objects it misses (it is pure: asked again once
        they are cached)."""
        return (yield from fetching(compute, self._fetched))

    def _fetched(self, key: str, answer: Any) -> None:
        """One object :meth:`_need` fetched: cached, or why it could not be."""
        if isinstance(answer, NotFoundError):
            if key not in self.missed:
                # The root this attempt works from may be old by now (the process paused
                # past vacuum's window since reading it): vacuum takes what only versions
                # out of the retention reach. Another attempt reads the root again; missing
                # from that one too, the lake is damaged.
                self.missed.add(key)
                self.known = None
                raise Retry from answer
            raise missing_object(key, self.bucket, None) from answer
        if isinstance(answer, TRANSIENT):
            raise Retry from answer
        if isinstance(answer, BaseException):
            raise answer
        self.objects.load(key, answer.body)

    def _server_now(self, monotonic: float) -> float | None:
        """The server's clock at our ``monotonic`` time, as far as we know it (a little
        behind: rule 10 errs towards references that look older): the ``Date`` of our last
        root read carried forward by our monotonic clock, or the newest ``Date`` our writes
        were answered with, whichever is later; ``None`` before either."""
        estimates = [e for e in (self.written_date,) if e is not None]
        if self.server_offset is not None:
            estimates.append(monotonic + self.server_offset)
        return max(estimates, default=None)

    def _read_root(self) -> Steps:
        try:
            data: ObjectData = yield Get(self.root_key, retried=False)
        except NotFoundError as error:
            if error.code == "NoSuchBucket":  # a missing bucket is not an empty lake
                raise
            return RegistryDoc(), None
        doc = parse_registry(data.body, bucket=self.bucket, key=self.root_key)
        if data.server_time is not None:
            # Our clock when the answer came, not when we asked: the server wrote its Date
            # before that, so the offset can only come out low (an intent expires a little
            # late), never high — a pause between asking and sending (a stalled process)
            # would otherwise count as server time and expire intents seconds old.
            self._now = yield Now()
            self.server_offset = data.server_time.timestamp() - (yield Now(monotonic=True))
        if doc.format_version > 1:
            doc = with_datasets(doc, self.objects.datasets(doc))
        self.observe(doc, data.etag, self._now)
        return doc, data.etag

    def observe(self, doc: RegistryDoc, etag: str | None, now: float | None = None) -> None:
        """A root read (here or by the process's readers) at ``now``: the next commit may
        start from it, and another process swapped last as far as we know — unless it is the
        root we swapped in (the same ETag): then, with the hand-over, we still swapped last.
        A root newer than the one we knew, and not ours, is another process swapping: when
        we saw that last tells whether a folder is at work (:meth:`Liveness.folder_at_work`)."""
        ours = self.known is not None and etag is not None and etag == self.known[1]
        if now is not None:
            self.hints.saw_root(
                now,
                moved=not ours and self.known is not None and doc.version > self.known[0].version,
            )
        if etag is not None:
            self.known = (doc, etag)
        self.hints.swapped_last = self.policy.handover and self.hints.swapped_last and ours

    def _send_intents(
        self, pending: Sequence[Pending], also: Sequence[tuple[str, bytes]] = ()
    ) -> Steps:
        """Create ``pending``'s intents (and delta manifests) not created yet, and ``also``,
        in one parallel round. They count as sent before the PUTs go out: an intent whose
        answer is lost may exist, and others may fold it."""
        writes = [w for p in pending for w in p.unwritten]
        for p in pending:
            p.intent_sent = p.intent_sent or bool(p.unwritten)
        yield from self._create_all([*writes, *also])
        for p in pending:
            p.unwritten = []

    def _create_all(self, writes: Sequence[tuple[str, bytes]]) -> Steps:
        """Create write-once objects: each key is new (a digest and a nonce), so one that
        exists already can only be our own write whose answer was lost."""
        if not writes:
            return
        answers = yield Parallel(tuple(Put(k, b, create=True) for k, b in writes))
        for answer in answers:
            if isinstance(answer, PutResult) and answer.server_time is not None:
                date = answer.server_time.timestamp()
                self.written_date = max(date, self.written_date or date)
            if isinstance(answer, AlreadyExistsError | PreconditionFailedError):
                continue
            if isinstance(answer, TRANSIENT):
                raise Retry from answer
            if isinstance(answer, BaseException):
                raise answer

    def _swap(self, state: Batch, doc: RegistryDoc, etag: str | None, new: RegistryDoc) -> Steps:
        """The root's compare-and-swap, its outcome turned into a redrive or a retry."""
        if state.first_base is None:
            state.first_base = doc.version
        put = Put(
            self.root_key,
            serialize_registry(new),
            create=etag is None,
            if_match=etag,
            retried=False,
        )
        try:
            written: PutResult = yield put
        except (PreconditionFailedError, AlreadyExistsError) as error:
            state.redrives += 1
            self.hints.contend(self._now, self.policy)
            raise Redrive from error
        except (ConflictError, ThrottledError) as error:
            state.retries += 1
            if etag is None:
                # Creating the root: the store resolves a retried compare-and-swap that met
                # a write in flight (it may be ours: OutcomeUnknownError), but leaves a
                # create to its own retries, which the root's store does not make.
                state.unknown_base = doc.version
            raise Retry from error
        except OutcomeUnknownError as error:
            state.retries += 1
            state.unknown_base = doc.version
            raise Retry from error
        except NotFoundError as error:
            raise RegistryCorruptError(
                "the registry was deleted while committing; lakelock will not re-create it "
                "(restore it, or delete the whole lake deliberately)",
                bucket=self.bucket,
                key=self.root_key,
            ) from error
        return written

    def _conclude(self, state: Batch, version: int | None) -> None:
        """The batch's version landed (None: nothing needed a swap): its commits succeed,
        and those it rejected fail, their fates recorded."""
        for p in state.pending:
            if p.rejected is not None:
                # Refused without a swap (nothing to record: no intent), while an earlier
                # swap of it may still land (rule 13): its outcome is unknown.
                late = version is None and state.unknown_base is not None
                p.fail(for_commit(p.rejected, p.change, state.unknown_base if late else None))
            elif version is not None:
                self._end(_decide.Settled(p, version=version, already=p.twin), state)
        state.pending = []

    # -- giving up -----------------------------------------------------------------------------

    def _cancel(self, state: Batch, failure: BaseException | None = None) -> Steps:
        """A batch is giving up: its intents are visible to every other committer, so before
        its callers hear "failed", the root must say so (rule 7). An intent decided already
        settles its caller (applied after all: success); the rest are recorded ``cancelled``
        by a compare-and-swap. If that cannot be made, their outcome is unknown."""
        todo = [p for p in state.pending if p.intent is not None and p.intent_sent]
        if not todo:
            return
        cancel = Batch(
            pending=todo,
            size=state.size,
            first_base=state.first_base,
            started=state.started,
            failure=failure,
            refusing=state.refusing,
        )
        cancel.attempts, cancel.redrives, cancel.retries = (
            state.attempts,
            state.redrives,
            state.retries,
        )
        try:
            yield from self._retrying(cancel, self._cancel_attempt, steady=False)
        except (Redrive, Retry, StorageError, RegistryCorruptError) as error:
            for p in cancel.pending:
                failure = CommitStateUnknownError(
                    "giving up, but its intent could not be cancelled: another committer may "
                    f"still apply it (look up its commit id): {error}",
                    dataset=p.change.dataset,
                    commit_id=p.change.commit_id,
                )
                failure.__cause__ = error
                p.fail(failure)
        state.pending = [p for p in state.pending if not p.finished]

    def _cancel_attempt(self, cancel: Batch) -> Steps:
        try:
            doc, etag = yield from self._read_root()
        except TRANSIENT as error:
            raise Retry from error
        cancel.first_base = cancel.first_base if cancel.first_base is not None else doc.version
        doc, etag = yield from self._settle(doc, cancel, etag)
        if not cancel.pending:
            return
        # No root yet (etag None): the cancellation creates it (create-only), so the writer
        # who would otherwise create it first cannot fold our intent in.
        sealed = _decide.cancelled(doc, cancel.pending, seconds=self._now, keep=self.commit_window)
        yield from self.write_version(cancel, doc, sealed, etag)
        for p in cancel.pending:
            p.fail(
                cancel.failure
                or self._gave_up(
                    p, cancel, None, "; its intent is recorded cancelled, so nobody will apply it"
                )
            )
        cancel.pending = []

    def write_version(
        self, state: Batch, doc: RegistryDoc, sealed: RegistryDoc, etag: str | None
    ) -> Steps:
        """A version that changes no dataset (an upgrade, cancelled fates): its objects,
        then the root's swap (:meth:`_swap`, the one compare-and-swap of the root)."""
        new_doc, writes = yield from self._need(
            lambda: self.objects.materialize(doc, sealed, at=self._now, nonces=self._nonce)
        )
        yield from self._create_all(writes)
        written = yield from self._swap(state, doc, etag, new_doc)
        self.known = (new_doc, written.etag)
        return new_doc

    def _unguarded(self, doc: RegistryDoc | None, pending: Sequence[Pending]) -> bool:
        """Rule 17: whether some of ``pending``'s intents must not be created on ``doc``
        (the root as this process read it) before an upgrade."""
        return not _decide.guards(doc) and any(map(_decide.needs_guard, pending))

    def _upgrade(self, doc: RegistryDoc, etag: str | None) -> Steps:
        """Rule 17: the root upgraded (or a new lake's created) by a swap that changes
        nothing else, before a group's or a restore's intents are written: once per lake.
        Losing the race is the batch's redrive; the root read then is upgraded already."""
        self._now = yield Now()
        sealed = replace(
            doc,
            version=doc.version + 1,
            updated_at=iso(self._now),
            settings=doc.settings if doc.settings is not None else self.settings,
        )
        new_doc = yield from self.write_version(Batch([], 0), doc, sealed, etag)
        assert self.known is not None
        return new_doc, self.known[1]

    def migrate(self) -> Steps:
        """Upgrade a format-1 or format-2 root to this lakelock's format by one
        compare-and-swap: the format it was in and the new root (None: upgraded already,
        no root, or a concurrent upgrade won)."""
        self._now = yield Now()
        result: list[tuple[int, RegistryDoc] | None] = [None]

        def attempt(state: Batch) -> Steps:
            try:
                doc, etag = yield from self._read_root()
            except TRANSIENT as error:
                raise Retry from error
            if _decide.guards(doc) or etag is None:
                return
            sealed = replace(doc, version=doc.version + 1, updated_at=iso(self._now))
            new_doc = yield from self.write_version(state, doc, sealed, etag)
            result[0] = doc.format_version, new_doc

        yield from self._retrying(Batch([], 0), attempt, steady=False)
        return result[0]

    def configure(self, changes: dict[str, float | int]) -> Steps:
        """Change the lake's settings by one compare-and-swap (creating the root of a new
        lake); returns the settings stored. The settings given to this process for those
        names are dropped: from now on it uses the lake's."""
        self._now = yield Now()
        result: list[LakeSettings] = []

        def attempt(state: Batch) -> Steps:
            doc, etag = yield from self._read_root()
            base = doc.settings or lake_settings(None, self.explicit)
            new = configured(base, changes)
            result[:] = [new]
            if doc.settings == new:
                return
            sealed = replace(doc, version=doc.version + 1, updated_at=iso(self._now), settings=new)
            yield from self.write_version(state, doc, sealed, etag)

        def retried(state: Batch) -> Steps:
            try:
                yield from attempt(state)
            except TRANSIENT as error:
                raise Retry from error

        yield from self._retrying(Batch([], 0), retried, steady=False)
        for name in changes:
            self.explicit.pop(name, None)
        self.settings = result[0]
        return result[0]

    def _gave_up(
        self, p: Pending, state: Batch, error: BaseException | None, then: str = ""
    ) -> CommitError:
        """A commit whose budget ran out (attempts or time): what ran out, what the last
        attempt found wrong with it (if anything), and ``then`` what became of its intent.
        Not a conflict, unless the last attempt rejected it."""
        found = f"; the last attempt rejected it: {p.rejected}" if p.rejected is not None else ""
        spent = self._now - state.started
        what = (
            f"its {self.max_attempts} attempts"
            if state.attempts >= self.max_attempts
            else f"its {self.max_seconds:g} s"
        )
        message = (
            f"gave up: {what} ran out ({state.attempts} attempts in {spent:.1f} s, "
            f"{state.redrives} redrives, {state.retries} retries){found}{then}"
        )
        if isinstance(p.rejected, CommitError) and type(p.rejected) is not CommitConflictError:
            # A typed refusal (a stale fence, a schema that does not fit, ...) is what its
            # caller hears, with its fields, as when a swap recording it lands (rule 12).
            typed = copy.copy(p.rejected)
            typed.args = (message,)
            if isinstance(typed, CommitConflictError):
                typed.attempts = state.attempts
            return typed
        if p.rejected is not None:
            return CommitConflictError(
                message,
                dataset=p.change.dataset,
                commit_id=p.change.commit_id,
                attempts=state.attempts,
            )
        return RetryBudgetExhaustedError(
            message,
            dataset=p.change.dataset,
            commit_id=p.change.commit_id,
            attempts=state.attempts,
            seconds=spent,
        )


def _listing(after: str, limit: int, decided: int) -> List:
    """One page of intents after ``after``: room for ``limit`` undecided ones past the
    ``decided`` ones a recent swap left above the watermark."""
    return List(INTENT_PREFIX, start_after=after, max_keys=min(1000, limit + decided))


def _updated(doc: RegistryDoc) -> float | None:
    try:
        return seconds_of(doc.updated_at)
    except ValueError:  # no commit yet
        return None


class _Jittered(tenacity.wait.wait_base):
    """Full-jitter exponential backoff from the core's own ``rng`` (tenacity's
    ``wait_random_exponential`` draws from the global ``random``: not replayable)."""

    def __init__(self, rng: random.Random, initial: float, most: float) -> None:
        self._rng = rng
        self._initial = initial
        self._most = most

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        high = min(self._most, self._initial * 2 ** (retry_state.attempt_number - 1))
        return self._rng.uniform(0, high)
