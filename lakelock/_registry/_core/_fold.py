"""A fold: the pending intents of other processes, listed after the watermark, judged, read
and made ready to apply beside ours (docs/FORMAT.md, "Group commit across processes").

What may be applied is :mod:`._decide`'s (rules 3, 4, 5, 16); whether to list at all, to
wait for an older intent's writer instead, or to pause for intents on their way is the
scheduler's (:mod:`._schedule`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from lakelock._registry._batch import Pending
from lakelock._registry._changes import Change
from lakelock._registry._core import _decide, _io
from lakelock._registry._core._requests import Sleep, Steps
from lakelock._registry._core._state import Batch, Wait
from lakelock._registry._document import IntentFate, RegistryDoc
from lakelock._s3._types import ListedObject
from lakelock.errors import CommitIdReusedError

if TYPE_CHECKING:
    from lakelock._registry._core._committer import Committer

__all__ = ["Fold", "fold"]


@dataclass
class Fold:
    """Other processes' intents found for one attempt: those to apply, the fates of those
    that cannot be, and every key listed (the watermark moves up to them)."""

    pending: list[Pending] = field(default_factory=list)
    fates: list[IntentFate] = field(default_factory=list)
    listed: tuple[str, ...] = ()


def fold(core: Committer, doc: RegistryDoc, batch: Batch, seconds: float) -> Steps:
    """The pending intents of other processes, oldest first (at most ``max_fold``), read
    and ready to apply; those that cannot be applied get their fate at once. Raises
    :class:`~._state.Wait` when an older intent's writer is expected to fold ours."""
    schedule = core.schedule
    most = core.policy.max_fold
    decided = {f.key for f in doc.fates}
    first = schedule.listed(seconds)
    listed = yield from _io.list_intents(doc.watermark, most, decided)
    own = core.own_intents(batch)
    todo = [o for o in listed if o.key not in own and o.key not in decided]
    if todo:
        schedule.lost_race(seconds)
    ours_unsent = bool(batch.pending) and all(
        p.intent is not None and not p.intent_sent for p in batch.pending
    )
    if schedule.crowd(len(todo), ours_unsent=ours_unsent):
        yield from _io.send_intents(core, batch.pending)
    mine = sorted(p.intent for p in batch.pending if p.intent is not None and p.intent_sent)
    if (
        mine
        and todo
        and todo[0].key < mine[0]
        and schedule.wait_for(
            seconds,
            batch.spent,
            core.max_attempts,
            version=doc.version,
            older=todo[0].key,
            ours=mine[0],
            first_fold=first,
            ahead=sum(o.key < mine[0] for o in todo),
        )
    ):
        raise Wait
    if mine and (paused := schedule.gather(seconds, room=len(todo) < most)) > 0:
        yield Sleep(paused)
        after = listed[-1].key if listed else doc.watermark
        more = yield from _io.list_intents(after, most - len(todo), decided)
        own = core.own_intents(batch)
        listed += more
        todo += [o for o in more if o.key not in own and o.key not in decided]
    found = Fold(listed=tuple(o.key for o in listed))
    newest = max((o.last_modified.timestamp() for o in listed), default=None)
    yield from _judge(core, doc, todo, seconds, found=found, newest=newest, elapsed=batch.elapsed)
    return found


def _judge(
    core: Committer,
    doc: RegistryDoc,
    todo: Sequence[ListedObject],
    seconds: float,
    *,
    found: Fold,
    newest: float | None,
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
    if core.server_offset is not None:
        estimates.append(elapsed + core.server_offset)
    server_now = max(estimates, default=None)
    version = doc.version + 1
    readable = []
    for o in todo:
        reason = _decide.judge_listed(o, server_now=server_now, ttl=core.intent_ttl, loaded=None)
        if reason is not None:
            found.fates.append(IntentFate(o.key, "rejected", version, seconds, reason))
        else:
            readable.append(o)
    loaded = yield from _io.read_intents(core, readable)
    changes: list[tuple[str, Change]] = []
    for o in readable:
        got = loaded[o.key]
        if isinstance(got, str):
            found.fates.append(IntentFate(o.key, "rejected", version, seconds, got))
        else:
            changes.append((o.key, got))
    # A commit spanning datasets is applied whole, once all its intents were read (rule
    # 16); a restore, once the version it makes current is loaded.
    units = _decide.whole_groups(changes)
    yield from _load_restored(core, units, seconds)
    recorded_all = yield from _io.need(
        core, functools.partial(_decide.recorded_versions, doc, [u for _, u in units], core.objects)
    )
    for (keys, unit), recorded in zip(units, recorded_all, strict=True):
        if isinstance(recorded, CommitIdReusedError):  # its id names another change
            kind = _decide.error_kind(recorded)
            found.fates.extend(
                IntentFate(key, "rejected", version, seconds, str(recorded), kind) for key in keys
            )
            continue
        if recorded is not None:  # applied already, through another intent of its id
            found.fates.extend(
                IntentFate(key, "applied", recorded, seconds, already=True) for key in keys
            )
            continue
        # Each change names the commit's first intent, which its records keep (rule 2).
        restored = tuple(
            replace(c, restore=core.objects.state(c.restore_from), intent=keys[0])
            if c.restore_from is not None and core.objects.has_all((c.restore_from,))
            else replace(c, intent=keys[0])
            for c in unit
        )
        found.pending.append(Pending(restored, intents=keys, foreign=True))


def _load_restored(
    core: Committer, units: Sequence[tuple[tuple[str, ...], tuple[Change, ...]]], seconds: float
) -> Steps:
    """The snapshots other processes' restores make current, read into the cache (in
    parallel, once each). One gone or unreadable is left out: the batch refuses that
    restore. So is one too close to leaving the retention (rule 9 refuses it anyway,
    and vacuum may be deleting it)."""
    margin = core.restore_lead / 2
    wanted = sorted(
        {
            c.restore_from
            for _, changes in units
            for c in changes
            if c.restore_from is not None
            and _decide.restore_too_late((c,), now=seconds, margin=margin, retention=core.retention)
            is None
        }
    )
    fetch = [key for key in wanted if not core.objects.has_all((key,))]
    if fetch:
        yield from _io.load_objects(core, fetch)
