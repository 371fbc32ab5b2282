"""The commit protocol, sans I/O: one :class:`Committer` per process.

A commit batch is a generator (:meth:`Committer.run`) that yields requests
(:mod:`._requests`) and is sent their answers; it reads no clock (it asks: :class:`Now`),
draws its randomness from the ``rng`` it was given, and performs no I/O. The same generator
runs against S3 (:mod:`._driver`) and in the simulator (:mod:`lakelock.testing.simulate`).

The committer holds what one process knows (its object cache, the root it last read or
wrote, the lake's settings, the server's clock) and is where a batch starts and ends:

- :meth:`~Committer.prepare` turns a commit into its intents (pure);
- :meth:`~Committer.run` runs a batch's attempts (:mod:`._attempt`: read, settle, fold,
  apply, seal, swap) until one lands or its budget runs out; then it cancels the batch's
  intents by a swap first (rule 7) and tells each caller what became of its commit;
- :meth:`~Committer.linger` folds on for others after a batch (:mod:`._linger`);
- :meth:`~Committer.migrate` and :meth:`~Committer.configure` make a version that changes no
  dataset.

Safety is :mod:`._decide`'s; every "when" is the :class:`~._schedule.Scheduler`'s.
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from lakelock._layout import intent_key_later
from lakelock._registry._batch import Pending, for_commit, iso, may_have_landed, validate_change
from lakelock._registry._changes import Change, delta_manifests, new_commit_id
from lakelock._registry._core import _decide, _io, _linger
from lakelock._registry._core._attempt import attempt, retrying, settle
from lakelock._registry._core._policy import FoldPolicy
from lakelock._registry._core._requests import Now, Steps
from lakelock._registry._core._schedule import Hints, Scheduler
from lakelock._registry._core._state import TRANSIENT, Batch, Redrive, Retry
from lakelock._registry._document import REGISTRY_KEY, RegistryDoc
from lakelock._registry._intents import intent_group, writable
from lakelock._registry._manifest import parse_manifest
from lakelock._registry._objects import Objects
from lakelock._registry._settings import LakeSettings, configured, explicit_settings, lake_settings
from lakelock._retry import Load
from lakelock.errors import (
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
    RegistryCorruptError,
    RetryBudgetExhaustedError,
    SettingsMismatchError,
    StorageError,
)

__all__ = ["Committer"]


class Committer:
    """The commit protocol of one process, sans I/O (module docstring).

    ``objects`` is the process's object cache (shared with its readers; the core only ever
    uses it offline). ``own`` returns the intents this process is about to commit outside
    the batch in flight (queued behind it): a fold skips them instead of reading them.
    ``queued`` says whether a commit of this process waits for its turn (a lingering fold
    then stops). ``commit_window``, ``retention``, ``intent_ttl`` and ``vacuum_floor`` are
    the lake's settings this process was given (``None``: the lake's, as its root stores
    them; one that disagrees with the lake's is refused:
    :mod:`lakelock._registry._settings`). ``fixed``: the scheduler's fixed values to
    vary (:data:`._schedule.FIXED`; the simulator's, to measure them).
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
        fixed: Mapping[str, float] | None = None,
    ) -> None:
        self.objects = (objects or Objects()).offline()
        self.load = load
        self.rng = rng or random.Random()
        #: Every piece of liveness state, and the rules that read it.
        self.schedule = Scheduler(policy or FoldPolicy(), self.rng, fixed=fixed)
        self.schedule.queued = queued
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
        self.bucket = bucket
        self.root_key = root_key
        #: The root as this process last read or wrote it (a hint: a stale one costs a 412).
        self.known: tuple[RegistryDoc, str] | None = None
        #: Objects a root referred to that were missing (another attempt reads the root again
        #: before calling the lake damaged).
        self.missed: set[str] = set()
        #: The server's clock minus our monotonic one (a step of the wall clock must not
        #: move our estimate of the server's), from the ``Date`` of our last root read (None:
        #: no root read yet; a process that created the root and swapped ever since knows
        #: the server's clock only from what it listed).
        self.server_offset: float | None = None
        #: The newest ``Date`` of an answer to one of our writes (server time, or None).
        self.written_date: float | None = None
        #: Other processes' intents, parsed (write-once: a key's content never changes).
        self.intents: OrderedDict[str, Change] = OrderedDict()
        #: This process's clock, as the core last asked for it.
        self.now = 0.0

    @property
    def policy(self) -> FoldPolicy:
        return self.schedule.policy

    @policy.setter
    def policy(self, policy: FoldPolicy) -> None:
        self.schedule.policy = policy

    @property
    def hints(self) -> Hints:
        return self.schedule.hints

    @property
    def queued(self) -> Callable[[], bool]:
        return self.schedule.queued

    @queued.setter
    def queued(self, queued: Callable[[], bool]) -> None:
        self.schedule.queued = queued

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

    def nonce(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def own_intents(self, batch: Batch) -> set[str]:
        """This process's intents: the batch's, and those queued behind it."""
        return {key for p in batch.pending for key in p.intents} | self.own()

    def observe(self, doc: RegistryDoc, etag: str | None, now: float | None = None) -> None:
        """A root read (here or by the process's readers) at ``now``: the next commit may
        start from it, and another process swapped last as far as we know — unless it is the
        root we swapped in (the same ETag): then, with the hand-over, we still swapped last.
        A root newer than the one we knew, and not ours, is another process swapping: when
        we saw that last tells whether a folder is at work
        (:meth:`~._schedule.Scheduler.folder_at_work`).

        A root older than the one we know (a reader's GET answered after a newer root was
        swapped in or read) is ignored: it tells nothing new, and a commit starting from it
        would decide on settings, datasets and an ETag that are out of date."""
        known = self.known
        if known is not None and doc.version < known[0].version:
            return
        ours = known is not None and etag is not None and etag == known[1]
        moved = not ours and known is not None and doc.version > known[0].version
        if etag is not None:
            self.known = (doc, etag)
        self.schedule.observed(now, moved=moved, ours=ours)

    # -- preparing (pure) -------------------------------------------------------------------

    def prepare(
        self, changes: Sequence[Change], *, now: float, monotonic: float | None = None
    ) -> Pending:
        """A commit ready to run: its intents, which any process can fold (one per dataset:
        a commit spanning datasets is a group, applied whole: FORMAT.md rule 16). Only a
        restore of a version no snapshot stores (a format-1 lake's) gets plain delta
        manifests instead, applied by this process alone. Nothing is written yet. Invalid
        changes raise their typed error here. ``now``: our wall clock (the intents' keys);
        ``monotonic``: our monotonic clock, the same moment (their age, rule 4b)."""
        checked = [validate_change(change) for change in changes]
        chosen = not checked[0].generated_id  # the caller chose the id: see Pending.check_index
        self.schedule.caller_back(now)
        if all(map(writable, checked)):
            token = f"{self.rng.getrandbits(32):08x}"
            group = f"{self.rng.getrandbits(128):032x}" if len(checked) > 1 else ""
            made = intent_group(checked, now_ms=int(now * 1000), token=token, group=group)
            keys = tuple(sorted(key for key, _, _ in made))
            prepared, writes = [], []
            for change, (key, body, refs) in zip(checked, made, strict=True):
                self.objects.remember(key, parse_manifest(body, key=key))
                # Its records name the commit's first intent, as a fold's would (rule 2).
                prepared.append(
                    replace(change, added_manifests=MappingProxyType(refs), intent=keys[0])
                )
                writes.append((key, body))
            return Pending(
                tuple(prepared),
                check_index=chosen,
                unwritten=writes,
                intents=keys,
                made_at=monotonic,
            )
        unwritten: list[tuple[str, bytes]] = []
        prepared = []
        for change in checked:
            refs = {}
            delta = delta_manifests(change.dataset, change.add, nonce=self.nonce())
            for path, (ref, body) in delta.items():
                if ref.key not in {key for key, _ in unwritten}:
                    unwritten.append((ref.key, body))
                    self.objects.remember(ref.key, parse_manifest(body))
                refs[path] = ref
            prepared.append(replace(change, added_manifests=MappingProxyType(refs)))
        return Pending(tuple(prepared), check_index=chosen, unwritten=unwritten)

    def made_now(
        self, pending: Sequence[Pending], now: float, monotonic: float | None = None
    ) -> None:
        """Intents not sent yet are made at ``now`` (``now``: our wall clock; ``monotonic``:
        our monotonic clock, the same moment): an intent's key says when its PUT went out,
        not when its commit was prepared. A commit prepared seconds before its PUT (a process
        short of CPU, a root read that timed out, a fold's reads first) would land behind the
        watermark other folds set meanwhile, and only its own writer could apply it (FORMAT.md
        rule 5). Its bytes, random part and digest stay. Its age (rule 4b) counts from here
        too: the server writes it no earlier, so vacuum's clock finds it no older."""
        ms = int(now * 1000)
        for p in pending:
            if p.intent_sent or not p.intents:
                continue
            if monotonic is not None:
                p.made_at = monotonic
            later = {key: intent_key_later(key, ms) for key in p.intents}
            if all(key == new for key, new in later.items()):
                continue
            p.intents = tuple(sorted(later.values()))
            p.unwritten = [(later.get(key, key), body) for key, body in p.unwritten]
            for key, body in p.unwritten:
                if key in p.intents:
                    self.objects.remember(key, parse_manifest(body, key=key))
            p.changes = tuple(_renamed(change, later, p.intents[0]) for change in p.changes)

    def new_commit_id(self, now: float) -> str:
        return new_commit_id(now, token=f"{self.rng.getrandbits(80):020x}")

    # -- running a batch --------------------------------------------------------------------

    def run(self, pending: Sequence[Pending]) -> Steps:
        """Commit ``pending`` as one batch: afterwards each has its result or error."""
        batch = Batch(pending=list(pending), size=len(pending))
        self.schedule.begin()
        try:
            batch.started = self.now = yield Now()
            yield from retrying(self, batch, lambda b: attempt(self, b), steady=True)
        except (Redrive, Retry) as error:
            yield from self._cancel(batch)
            for p in batch.pending:
                if batch.unknown_base is not None:
                    p.fail(
                        CommitStateUnknownError(
                            f"commit outcome unknown after {batch.attempts} attempts: the "
                            "answer to a swap of it was lost, and no read of the registry "
                            "since could settle it (the swap may still land: look its commit "
                            "id up)",
                            dataset=p.change.dataset,
                            commit_id=p.change.commit_id,
                        )
                    )
                    continue
                p.fail(self._gave_up(p, batch, error))
        except RegistryCorruptError as error:
            # No cancel can be recorded in a root that is gone or unreadable: an intent
            # already sent may still be applied (by a process that makes a root again, or
            # reads this one once it is repaired), so its caller cannot be told it failed.
            for p in batch.pending:
                p.fail(_unsettled(error, p, batch))
        except (CommitError, StorageError, SettingsMismatchError) as error:
            # A lake setting this process disagrees with, or why the commit gave up
            # before its budget ran out (rule 4b), is what its callers hear, once their
            # intents are recorded cancelled.
            told = isinstance(error, SettingsMismatchError | RetryBudgetExhaustedError)
            yield from self._cancel(batch, error if told else None)
            for p in batch.pending:
                p.fail(for_commit(error, p.change, batch.unknown_base))
        except BaseException as error:
            # Interrupted (Ctrl-C, the steps closed): nothing was cancelled, so the other
            # callers of the batch hear that their commits may have landed; the
            # interruption goes on up this thread.
            for p in batch.pending:
                p.fail(_unsettled(error, p, batch))
            raise
        self.now = yield Now()
        self.schedule.finished(self.now)

    def send(self, pending: Sequence[Pending]) -> Steps:
        """Create ``pending``'s intents under the keys :meth:`make` gave them (a batch is in
        flight: they will go with the next, and meanwhile others can fold them). A failure
        is left to the batch; so are intents rule 17 keeps back until the root this process
        knows is upgraded."""
        known = self.known[0] if self.known is not None else None
        with contextlib.suppress(StorageError, Retry):
            yield from _io.put_intents(self, [p for p in pending if not self.unguarded(known, [p])])

    def make(self, pending: Sequence[Pending]) -> Steps:
        """``pending``'s intents not sent yet made now (:meth:`made_now`), before
        :meth:`send` creates them."""
        yield from _io.make_intents(self, pending)

    def lingering(self, *, away: bool = False) -> bool:
        """Whether to go on folding for others now that the batch is done
        (:func:`._linger.lingering`)."""
        return _linger.lingering(self, away=away)

    def away_after(self) -> float | None:
        """For a process that does not linger now: seconds after which a caller not back
        counts as away (:func:`._linger.away_after`)."""
        return _linger.away_after(self)

    def linger(self) -> Steps:
        """Fold for others a few more rounds (:func:`._linger.linger`)."""
        return _linger.linger(self)

    # -- giving up -----------------------------------------------------------------------------

    def _cancel(self, batch: Batch, failure: BaseException | None = None) -> Steps:
        """A batch is giving up: its intents are visible to every other committer, so before
        its callers hear "failed", the root must say so (rule 7). An intent decided already
        settles its caller (applied after all: success); the rest are recorded ``cancelled``
        by a compare-and-swap. If that cannot be made, their outcome is unknown."""
        todo = [p for p in batch.pending if p.intent is not None and p.intent_sent]
        if not todo:
            return
        cancel = Batch(
            pending=todo,
            size=batch.size,
            maybe_made=batch.maybe_made,
            started=batch.started,
            failure=failure,
        )
        cancel.attempts, cancel.redrives, cancel.retries = (
            batch.attempts,
            batch.redrives,
            batch.retries,
        )
        try:
            yield from retrying(self, cancel, self._cancel_attempt, steady=False)
        except (Redrive, Retry, StorageError, RegistryCorruptError) as error:
            # Redrive and Retry carry no message: what they mean to the caller is said here.
            why = str(error) or "the swap that cancels it kept failing until its budget ran out"
            for p in cancel.pending:
                unknown = CommitStateUnknownError(
                    "giving up, but its intent could not be cancelled: another committer may "
                    f"still apply it (re-run it under its commit id: it lands once): {why}",
                    dataset=p.change.dataset,
                    commit_id=p.change.commit_id,
                )
                unknown.__cause__ = error
                p.fail(unknown)
        batch.pending = [p for p in batch.pending if not p.finished]

    def _cancel_attempt(self, cancel: Batch) -> Steps:
        try:
            doc, etag = yield from _io.read_root(self)
        except TRANSIENT as error:
            raise Retry from error
        yield from settle(self, doc, cancel)
        if not cancel.pending:
            return
        # No root yet (etag None): the cancellation creates it (create-only), so the writer
        # who would otherwise create it first cannot fold our intent in.
        sealed = _decide.cancelled(doc, cancel.pending, seconds=self.now, keep=self.commit_window)
        yield from self.write_version(cancel, doc, sealed, etag)
        for p in cancel.pending:
            then = "; its intent is recorded cancelled, so nobody will apply it"
            if p.rejected is None and (stale := _decide.stale_fence(doc, p.change)) is not None:
                # Its token may have been recorded by an earlier fold: what is sure is that
                # a later acquirer holds the lease, as any attempt would have found.
                p.rejected = stale
                then = "; a later token holds the lease, so nothing will apply it"
            p.fail(
                p.refused  # recorded rejected: the caller hears its writer's own refusal
                or cancel.failure
                or self._gave_up(p, cancel, None, then)
            )
        cancel.pending = []

    def _gave_up(
        self, p: Pending, batch: Batch, error: BaseException | None, then: str = ""
    ) -> CommitError:
        """A commit whose budget ran out (attempts or time): what ran out, what the last
        attempt found wrong with it (if anything), and ``then`` what became of its intent.
        Not a conflict, unless the last attempt rejected it."""
        found = f"; the last attempt rejected it: {p.rejected}" if p.rejected is not None else ""
        spent = self.now - batch.started
        what = (
            f"its {self.max_attempts} attempts"
            if batch.spent >= self.max_attempts
            else f"its {self.max_seconds:g} s"
        )
        looks = f", {batch.looks} of them looks at a still root" if batch.looks else ""
        message = (
            f"gave up: {what} ran out ({batch.attempts} attempts{looks} in {spent:.1f} s, "
            f"{batch.redrives} redrives, {batch.retries} retries){found}{then}"
        )
        if isinstance(p.rejected, CommitError) and type(p.rejected) is not CommitConflictError:
            # A typed refusal (a stale fence, a schema that does not fit, ...) is what its
            # caller hears, with its fields, as when a swap recording it lands (rule 12).
            typed = copy.copy(p.rejected)
            typed.args = (message,)
            if isinstance(typed, CommitConflictError):
                typed.attempts = batch.attempts
            return typed
        if p.rejected is not None:
            return CommitConflictError(
                message,
                dataset=p.change.dataset,
                commit_id=p.change.commit_id,
                attempts=batch.attempts,
            )
        return RetryBudgetExhaustedError(
            message,
            dataset=p.change.dataset,
            commit_id=p.change.commit_id,
            attempts=batch.attempts,
            seconds=spent,
        )

    # -- versions that change no dataset -------------------------------------------------------

    def write_version(
        self, batch: Batch, doc: RegistryDoc, sealed: RegistryDoc, etag: str | None
    ) -> Steps:
        """A version that changes no dataset (an upgrade, cancelled fates): its objects,
        then the root's swap (:func:`._io.swap`, the one compare-and-swap of the root)."""
        new_doc, writes = yield from _io.need(
            self, lambda: self.objects.materialize(doc, sealed, at=self.now, nonces=self.nonce)
        )
        yield from _io.create_all(self, writes)
        yield from _io.swap(self, batch, doc, etag, new_doc)
        return new_doc

    def unguarded(self, doc: RegistryDoc | None, pending: Sequence[Pending]) -> bool:
        """Rule 17: whether some of ``pending``'s intents must not be created on ``doc``
        (the root as this process read it) before an upgrade."""
        return not _decide.guards(doc) and any(map(_decide.needs_guard, pending))

    def upgrade(self, doc: RegistryDoc, etag: str | None) -> Steps:
        """Rule 17: the root upgraded (or a new lake's created) by a swap that changes
        nothing else, before a group's or a restore's intents are written: once per lake.
        Losing the race is the batch's redrive; the root read then is upgraded already."""
        self.now = yield Now()
        sealed = replace(
            doc,
            version=doc.version + 1,
            updated_at=iso(self.now),
            settings=doc.settings if doc.settings is not None else self.settings,
        )
        new_doc = yield from self.write_version(Batch([], 0), doc, sealed, etag)
        assert self.known is not None
        return new_doc, self.known[1]

    def migrate(self) -> Steps:
        """Upgrade a format-1 or format-2 root to this lakelock's format by one
        compare-and-swap: the format it was in and the new root (None: upgraded already,
        no root, or a concurrent upgrade won)."""
        self.now = yield Now()
        result: list[tuple[int, RegistryDoc] | None] = [None]

        def upgrade(batch: Batch) -> Steps:
            try:
                doc, etag = yield from _io.read_root(self)
            except TRANSIENT as error:
                raise Retry from error
            if _decide.guards(doc) or etag is None:
                return
            sealed = replace(doc, version=doc.version + 1, updated_at=iso(self.now))
            new_doc = yield from self.write_version(batch, doc, sealed, etag)
            result[0] = doc.format_version, new_doc

        yield from retrying(self, Batch([], 0), upgrade, steady=False)
        return result[0]

    def configure(self, changes: dict[str, float | int]) -> Steps:
        """Change the lake's settings by one compare-and-swap (creating the root of a new
        lake); returns the settings stored. The settings given to this process for those
        names are dropped: from now on it uses the lake's."""
        self.now = yield Now()
        result: list[LakeSettings] = []

        def store(batch: Batch) -> Steps:
            try:
                doc, etag = yield from _io.read_root(self)
                base = doc.settings or lake_settings(None, self.explicit)
                new = configured(base, changes)
                result[:] = [new]
                if doc.settings == new:
                    return
                sealed = replace(
                    doc, version=doc.version + 1, updated_at=iso(self.now), settings=new
                )
                yield from self.write_version(batch, doc, sealed, etag)
            except TRANSIENT as error:
                raise Retry from error

        yield from retrying(self, Batch([], 0), store, steady=False)
        for name in changes:
            self.explicit.pop(name, None)
        self.settings = result[0]
        return result[0]


def _renamed(change: Change, later: Mapping[str, str], first: str) -> Change:
    """``change`` pointing at its intents' ``later`` keys (its first intent: ``first``)."""
    refs = {
        path: replace(ref, key=later.get(ref.key, ref.key))
        for path, ref in change.added_manifests.items()
    }
    return replace(change, added_manifests=MappingProxyType(refs), intent=first)


def _unsettled(error: BaseException, p: Pending, batch: Batch) -> BaseException:
    """What the caller of ``p`` hears when its batch stopped on ``error`` without recording
    its intent's fate: unknown (:func:`may_have_landed`) once its intent was sent or a
    swap's answer was lost (either may still land), else ``error`` itself."""
    if not p.intent_sent and batch.unknown_base is None:
        return error
    return may_have_landed(error, p.change)
