"""One attempt at a batch, straight through (docs/FORMAT.md, "Group commit across
processes"), and the loop that retries it:

1. *read* the root: the one this process last read or wrote, or a GET (under contention, send
   our intents and look a round later first: another process is about to fold them);
2. *settle* what the root already decided (rule 2), and wait on while another process is
   expected to fold ours;
3. *fold*: maybe LIST the intents after the watermark, and read the others' (:mod:`._fold`);
4. *apply* every commit in intent order, each validated alone, and record every fate;
5. *seal* the version: the watermark, the fates kept, its objects;
6. *swap*: create the version's objects (intents, manifests, nodes, snapshots) in one
   parallel round, check the rules that hold only at the last moment (4, 9, 10), then PUT
   the root ``If-Match`` its ETag.

A 412 is a :class:`~._state.Redrive` (read again, apply again); a 409, 503 or unknown outcome
a :class:`~._state.Retry` after jittered backoff; a :class:`~._state.Wait` looks again after
the scheduler's poll. :func:`retrying` runs attempts until one returns or the budget
(attempts, seconds) runs out. Safety is :mod:`._decide`'s at every step; every "when" is the
scheduler's (:mod:`._schedule`).
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import tenacity

from lakelock._registry._batch import Pending, for_commit, iso, seconds_of
from lakelock._registry._changes import Applied, Change, seal
from lakelock._registry._core import _decide, _io, _read_ahead
from lakelock._registry._core._fold import Fold, fold
from lakelock._registry._core._requests import Now, Sleep, Steps
from lakelock._registry._core._state import TRANSIENT, Batch, Redrive, Retry, Wait
from lakelock._registry._document import IntentFate, RegistryDoc
from lakelock._retry import LoadWait, OutOfTime, SteadyOr
from lakelock.errors import (
    CommitIdReusedError,
    CommitStateUnknownError,
    RetryBudgetExhaustedError,
    SettingsMismatchError,
)

if TYPE_CHECKING:
    from lakelock._registry._core._committer import Committer

__all__ = ["apply_and_swap", "attempt", "end", "retrying", "settle"]

#: What a batch's loop retries: one strategy for every batch (tenacity's holds a method of
#: itself, a cycle only the garbage collector would free, one per batch).
_RETRIED = tenacity.retry_if_exception_type((Redrive, Retry))


def retrying(
    core: Committer, batch: Batch, attempt: Callable[[Batch], Steps], *, steady: bool
) -> Steps:
    """``attempt`` until it returns, within the budget (attempts and seconds, by the
    clock the core is handed), with tenacity's strategies: jittered exponential backoff
    after a :class:`Redrive` or :class:`Retry` (paid from the process's retry budget, at its
    pace), the scheduler's poll after a :class:`Wait` (``steady``: a batch's attempts)."""
    slept: list[float] = []
    started = core.now
    backoff: tenacity.wait.wait_base = _Jittered(core.rng, core.initial_backoff, core.max_backoff)
    if core.load is not None:
        backoff = LoadWait(backoff, core.load)
    retries = tenacity.Retrying(
        stop=_Spent(batch, core.max_attempts)
        | OutOfTime(lambda: core.now - started, core.max_seconds),
        wait=SteadyOr(backoff, (Wait,), lambda: core.schedule.poll(batch.attempts))
        if steady
        else backoff,
        retry=_RETRIED,
        sleep=slept.append,
        reraise=True,
    )
    try:
        for try_ in retries:
            if slept:
                yield Sleep(slept.pop())
                core.now = yield Now()
            with try_:
                yield from attempt(batch)
    finally:
        # tenacity keeps the last round's actions, bound methods of ``retries``, in its own
        # state: a cycle per batch (every writer's every commit) that only the garbage
        # collector would free, with the batch it holds.
        retries.iter_state.reset()


class _Spent(tenacity.stop.stop_base):
    """Stop once ``batch`` spent ``most`` attempts (:attr:`~._state.Batch.spent`: its looks
    at a still root while it waited on are not counted)."""

    def __init__(self, batch: Batch, most: int) -> None:
        self._batch = batch
        self._most = most

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._batch.spent >= self._most


def attempt(core: Committer, batch: Batch) -> Steps:
    """One attempt at ``batch``: the six steps of the module docstring."""
    batch.attempts += 1
    start = core.now = yield Now()
    batch.elapsed = yield Now(monotonic=True)
    doc, etag = yield from read(core, batch, start)  # 1. read
    waiting = len(batch.pending)
    yield from settle(core, doc, batch)  # 2. settle
    core.schedule.looked(start, settled=len(batch.pending) < waiting)
    if not batch.pending:
        return  # the root decided every commit of the batch
    wait_on(core, doc, batch, start)
    if (yield from _paced(core)):
        start = core.now = yield Now()
        batch.elapsed = yield Now(monotonic=True)
    if core.unguarded(doc, batch.pending):  # rule 17: the root upgraded first
        doc, etag = yield from core.upgrade(doc, etag)
    core.schedule.round_starts(start)
    found = yield from fold_if_due(core, doc, batch, start)  # 3. fold
    yield from apply_and_swap(core, batch, doc, etag, found=found, start=start)  # 4. to 6.


def apply_and_swap(
    core: Committer, batch: Batch, doc: RegistryDoc, etag: str | None, *, found: Fold, start: float
) -> Steps:
    """Steps 4 to 6: apply the batch's own commits and the folded ones to ``doc``, seal the
    version, write its objects and swap the root to it; then the batch's commits end."""
    own = list(batch.pending)
    yield from _io.make_intents(core, own)  # made now: the version sealed below names them
    applied = yield from apply(core, doc, own, found, start, elapsed=batch.elapsed)  # 4. apply
    if applied is None:  # commits without intents, none of which applies
        conclude(batch, None)
        return
    current, changes, fates = applied
    new_doc, writes = yield from seal_version(  # 5. seal
        core, doc, current, applied=changes, fates=fates, found=found, start=start
    )
    sent = yield Now(monotonic=True)  # 6. swap: the version's objects, the last rules, the root
    yield from _io.put_intents(core, [p for p in own if p.rejected is None], writes)
    core.now = yield Now()  # the last moment before the swap: our clocks now
    elapsed = yield Now(monotonic=True)
    last_moment(
        core, batch, own, doc=doc, applied=changes, writes=writes, sent=sent, elapsed=elapsed
    )
    yield from _io.swap(core, batch, doc, etag, new_doc)
    core.now = yield Now()
    core.schedule.swapped(core.now, carried=bool(found.pending))
    window = core.schedule.read_ahead(core.now)
    if window is not None:
        yield _read_ahead.next_fold(
            new_doc,
            known=core.own_intents(batch) | core.intents.keys(),
            max_fold=core.policy.max_fold,
            window=window,
        )
    conclude(batch, new_doc.version)


# -- 1. read ------------------------------------------------------------------------------


def read(core: Committer, batch: Batch, start: float) -> Steps:
    """The root an attempt starts from, and its ETag; the lake's settings are taken from
    it. Under contention, with a folder at work, a first attempt sends its intents
    and waits a round first (:class:`Wait`); it starts from the root it knows when the
    scheduler says that one is likely current and agrees with the settings this process
    was given, and reads it (a GET) otherwise."""
    known = core.known
    schedule = core.schedule
    if batch.attempts == 1 and schedule.wait_first(
        start,
        knows_format2=known is not None
        and known[0].format_version > 1
        and not core.unguarded(known[0], batch.pending),
        all_intents=all(p.intent is not None for p in batch.pending),
    ):
        yield from _io.send_intents(core, batch.pending)
        schedule.waiting(start)
        raise Wait
    if batch.attempts == 1 and known is not None and schedule.known_root(start):
        doc, etag = known
        with contextlib.suppress(SettingsMismatchError):
            # A setting of ours the root we know disagrees with may be one the lake was
            # configured to since: only the current root's refusal is the caller's answer.
            core.lake_settings(doc)
            return doc, etag
    try:
        # Timed by the root's GET alone: a fresh lake's look for a lost root is no root read.
        doc, etag, took = yield from _io.read_root_timed(core)
    except TRANSIENT as error:
        batch.retries += 1
        raise Retry from error
    schedule.read_root(doc.version, core.now, took=took)
    core.lake_settings(doc)
    return doc, etag


# -- 2. settle ----------------------------------------------------------------------------


def settle(core: Committer, doc: RegistryDoc, batch: Batch) -> Steps:
    """End the commits ``doc`` already decided (:func:`._decide.settle`); resolve an
    earlier swap whose outcome was unknown. A commit its own writer refuses once its
    intent is written stays in the batch, its refusal kept (:func:`_keep_refused`)."""
    for p in batch.pending:
        if p.indexed is not None and _decide.past_the_window(doc, p.indexed + 1):
            p.check_index = True  # a twin may have been applied and left the window since
    settled = yield from _io.need(
        core, lambda: _decide.settle(doc, batch.pending, core.objects, made=batch.maybe_made)
    )
    found = {id(s.pending) for s in settled}
    settled += [
        _decide.Settled(p, error=p.refused)
        for p in batch.pending
        if p.refused is not None and id(p) not in found
    ]
    for s in settled:
        if not _decide.refused_unrecorded(doc, s):
            end(s, batch)
    for p in batch.pending:
        if p.check_index:
            p.check_index, p.indexed = False, doc.version
    batch.pending = [p for p in batch.pending if not p.finished]
    settled += yield from _unknown_outcome(core, doc, batch, settled)
    _keep_refused(doc, settled, batch)


def _unknown_outcome(
    core: Committer, doc: RegistryDoc, batch: Batch, settled: list[_decide.Settled]
) -> Steps:
    """An earlier swap of the batch whose answer was lost: settled by ``doc`` if it moved
    past that swap's base (rule 13), looked up in the commit-id indexes if it moved past
    the root's window since. Returns the refusals the indexes gave, to be recorded."""
    refusals: list[_decide.Settled] = []
    if batch.unknown_base is None or not batch.pending:
        return refusals
    if _decide.swap_may_land(doc, batch.unknown_base):
        # Not proven absent: our next swap (on this root) or its move decides; so does a
        # swap recording a refusal (the same If-Match: one of them lands).
        return refusals
    beyond = _decide.past_the_window(doc, batch.unknown_base + 1)
    if beyond and doc.format_version > 1:
        # Past the root's window: each dataset's commit-id index is durable.
        refused = {id(s.pending) for s in settled}
        for p in batch.pending:
            if id(p) in refused:
                continue  # refused already, to be recorded
            indexed = yield from _io.need(
                core, functools.partial(_decide.indexed_version, doc, p.changes, core.objects)
            )
            if isinstance(indexed, CommitIdReusedError):
                refusals.append(_decide.Settled(p, error=indexed))
            elif indexed is not None:
                version, intent = indexed
                ours = _decide.made_here(doc, p, version, batch.maybe_made, intent=intent)
                end(_decide.Settled(p, version=version, already=not ours), batch)
        batch.pending = [p for p in batch.pending if not p.finished]
    if beyond and doc.format_version == 1:
        for p in batch.pending:
            p.fail(
                CommitStateUnknownError(
                    "commit outcome unknown: more commits than the idempotency window "
                    f"({core.commit_window}) happened since",
                    dataset=p.change.dataset,
                    commit_id=p.change.commit_id,
                )
            )
        batch.pending = []
    batch.unknown_base = None  # proven absent: a plain redrive from here
    return refusals


def _keep_refused(doc: RegistryDoc, settled: list[_decide.Settled], batch: Batch) -> None:
    """Rule 7 for a commit its own writer refuses once its intent is written (its id
    recorded for another change): every other process can see that intent, and a fold
    applies it once the record that refuses it has left the root's window. So its caller
    hears the refusal only once a swap records the intent ``rejected``. That costs no swap
    of its own: the commit stays in the batch, refused (``Pending.refused``), and goes on
    as any other. While it waits, a fold of another process rejects the intent itself
    (rule 3: the record is in the root it folds on) and the writer settles that fate; a
    swap of its own records the refusal beside what it folds (:func:`apply`). It keeps the
    refusal until one of those lands: a root read after a lost race may no longer show
    why. A budget that runs out records it all the same (the cancel carries it), or the
    caller hears the outcome is unknown."""
    for s in settled:
        if s.error is None or s.pending.finished:
            continue
        if _decide.refused_unrecorded(doc, s):
            s.pending.refused = s.error
        else:
            end(s, batch)  # nothing to record: the caller hears the error now
    batch.pending = [p for p in batch.pending if not p.finished]


def wait_on(core: Committer, doc: RegistryDoc, batch: Batch, start: float) -> None:
    """A waiter whose intents are out looks again: it waits on (:class:`Wait`) while the
    root still stands where its wait for an older writer began, or while its stagger says
    an older waiter should list first."""
    schedule = core.schedule
    if schedule.wait_on(doc.version, batch.spent, core.max_attempts):
        batch.looks += 1  # the root stood still: a look, not an attempt of the budget
        raise Wait
    if doc.fates and all(p.intent is not None and p.intent_sent for p in batch.pending):
        oldest = min(p.intent for p in batch.pending if p.intent is not None)
        if schedule.stagger(
            batch.spent,
            core.max_attempts,
            version=doc.version,
            oldest=oldest,
            newest_decided=doc.newest_decided(),
            passed_over=oldest <= doc.watermark,
        ):
            raise Wait


def _paced(core: Committer) -> Steps:
    """Hold the next fold back as the process's pace says (after a 503 SlowDown:
    :class:`~lakelock._retry.Load`); at once otherwise. Whether it held. A waiter's looks
    (one GET of the root each) are not held: its wait already spaces them."""
    held = core.load.hold() if core.load is not None else 0.0
    if held > 0:
        yield Sleep(held)
    return held > 0


# -- 3. fold -----------------------------------------------------------------------------


def fold_if_due(core: Committer, doc: RegistryDoc, batch: Batch, start: float) -> Steps:
    """Other processes' intents to apply beside ours (:func:`._fold.fold`), if the
    scheduler says to list now (after a lost race, when the root moved, under contention,
    every ``fold_interval``); our intents first if it says so. A format-1 root folds none."""
    schedule = core.schedule
    if doc.format_version < 2 or not schedule.list_now(
        start, attempts=batch.attempts, root_moved=_moved(core.known, doc)
    ):
        return Fold()
    if schedule.send_first(start, root_updated=_updated(doc)):
        yield from _io.send_intents(core, batch.pending)
    return (yield from fold(core, doc, batch, start))


# -- 4. apply -----------------------------------------------------------------------------


def apply(
    core: Committer,
    doc: RegistryDoc,
    own: list[Pending],
    found: Fold,
    start: float,
    *,
    elapsed: float,
) -> Steps:
    """Every commit, ours (``own``) and the folded ones, applied to ``doc`` in intent order,
    each validated alone (:func:`._decide.applied_batch`); each learns whether it was
    rejected, or is a twin of another. Ours that their writer refused (rule 7) are not
    applied: their intents are recorded ``rejected`` with the refusal. Returns the
    document, what was applied and every fate to record, or ``None``: nothing to record."""
    refused = [p for p in own if p.refused is not None]
    batch = sorted(
        [p for p in own if p.refused is None] + found.pending,
        key=lambda p: p.intent if p.intent is not None else "",
    )
    server_now = _io.server_now(core, elapsed)
    current, applied, rejected = yield from _io.need(
        core,
        lambda: _decide.applied_batch(
            doc,
            batch,
            core.objects,
            now=iso(start),
            seconds=start,
            nonces=core.nonce,
            retention=core.retention,  # the settings of ``doc``: read_root set them
            restore_margin=core.restore_lead / 2,
            server_now=server_now,
            floor=core.settings.vacuum_floor,
        ),
    )
    for _, done in applied:
        # A later batch of ours reads a manifest consolidated here from the cache.
        for key, manifest in done.manifests:
            core.objects.remember(key, manifest)
    made = {id(change) for change, _ in applied}
    for n, p in enumerate(batch):
        p.rejected = rejected.get(n)
        p.twin = p.rejected is None and id(p.change) not in made
    for p in refused:
        p.rejected, p.twin = p.refused, False
    fates = [
        *found.fates,
        *_decide.fates_of(applied, batch, rejected, doc.version + 1, start),
        *_decide.refused_fates(refused, doc.version + 1, start),
    ]
    if not applied and not fates:
        return None
    return current, applied, fates


# -- 5. seal ------------------------------------------------------------------------------


def seal_version(
    core: Committer,
    doc: RegistryDoc,
    current: RegistryDoc,
    *,
    applied: list[tuple[Change, Applied]],
    fates: list[IntentFate],
    found: Fold,
    start: float,
) -> Steps:
    """The new version: the commits' records sealed (the window, retired entries), the
    watermark the scheduler proposes within :func:`._decide.bound_watermark`, the fates
    kept (rule 6), and its objects. Returns it and every object it needs created."""
    sealed = yield from _io.need(
        core,
        lambda: seal(
            current,
            applied,
            now=iso(start),
            window=core.commit_window,
            retire_before=start - core.retention,
        ),
    )
    proposed = core.schedule.watermark(
        doc.watermark, found.listed, start, carried=len(found.pending)
    )
    watermark = _decide.bound_watermark(doc, found.listed, proposed)
    sealed = replace(
        sealed,
        watermark=watermark,
        fates=_decide.sealed_fates(doc, fates, watermark=watermark, keep=core.commit_window),
        # The lake's first commit (or the first since settings were stored) stores them.
        settings=doc.settings if doc.settings is not None else core.settings,
    )
    new_doc, writes = yield from _io.need(
        core, lambda: core.objects.materialize(doc, sealed, at=start, nonces=core.nonce)
    )
    return new_doc, [*(w for _, a in applied for w in a.writes), *writes]


# -- 6. swap ------------------------------------------------------------------------------


def last_moment(
    core: Committer,
    batch: Batch,
    own: list[Pending],
    *,
    doc: RegistryDoc,
    applied: list[tuple[Change, Applied]],
    writes: list[tuple[str, bytes]],
    sent: float,
    elapsed: float,
) -> None:
    """The rules that hold only at the swap itself, checked just before it (a pause since
    the batch was applied may break them): rule 10 (what the version references is young
    enough for vacuum's floor) and rule 9 (a restore's version is still retained) try
    again, where the next attempt refuses the commit; rule 4 (our own passed-over intent is
    young enough to apply) gives up."""
    now = core.now
    server_now = _io.server_now(core, elapsed)
    if server_now is not None and _decide.too_old_to_reference(
        [
            *_decide.written_by(change for change, _ in applied),
            # This attempt's own objects: written no earlier than it sent them.
            *((key, server_now - (elapsed - sent)) for key, _ in writes),
        ],
        server_now=server_now,
        floor=core.settings.vacuum_floor,
    ):
        raise Retry
    stale = _decide.too_old_to_apply(
        [(key, p.made_at) for p in own if p.rejected is None for key in p.intents],
        watermark=doc.watermark,
        now=elapsed,
        ttl=core.intent_ttl,
    )
    if stale is not None:
        first = own[0]
        raise RetryBudgetExhaustedError(
            f"gave up: {stale}",
            dataset=first.change.dataset,
            commit_id=first.change.commit_id,
            attempts=batch.attempts,
            seconds=now - batch.started,
        )
    if _decide.restore_too_late(
        (change for change, _ in applied),
        now=now,
        margin=core.restore_lead / 4,
        retention=core.retention,
    ):
        raise Retry


# -- the end ------------------------------------------------------------------------------


def conclude(batch: Batch, version: int | None) -> None:
    """The batch's version landed (None: nothing needed a swap): its commits succeed,
    and those it rejected fail, their fates recorded."""
    for p in batch.pending:
        if p.rejected is not None:
            # Refused without a swap (nothing to record: no intent), while an earlier
            # swap of it may still land (rule 13): its outcome is unknown.
            late = version is None and batch.unknown_base is not None
            p.fail(for_commit(p.rejected, p.change, batch.unknown_base if late else None))
        elif version is not None:
            end(_decide.Settled(p, version=version, already=p.twin), batch)
    batch.pending = []


def end(settled: _decide.Settled, batch: Batch) -> None:
    """One commit ends as the root decided it: its result, or its error."""
    p = settled.pending
    if settled.error is not None:
        p.fail(settled.error)
    elif settled.version is not None:
        p.succeed(
            _decide.result(
                p,
                settled.version,
                attempts=batch.attempts,
                redrives=batch.redrives,
                retries=batch.retries,
                size=batch.size,
                already=settled.already,
            )
        )


def _moved(known: tuple[RegistryDoc, str] | None, doc: RegistryDoc) -> bool:
    """Whether ``doc`` is another root than the one this process knew."""
    return known is None or known[0].version != doc.version


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
