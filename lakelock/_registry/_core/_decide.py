"""The commit core's safety: who applies what, and what the root records.

Each rule of docs/FORMAT.md's binding section ("Intents: the rules") is a function here, or a
few (listed below; rule 6 is :mod:`.._intents`'s, rule 8 vacuum's); nothing here reads a clock,
draws a random number (nonces are handed in), performs I/O, or changes what it is handed.
Objects it needs (snapshots, index nodes, manifests) are read from the
:class:`~lakelock._registry._objects.Objects` cache, never put there (a manifest a batch
consolidates is handed to the batch's later commits by :func:`applied_batch` itself, and
cached by the committer); a miss raises :class:`~lakelock._registry._objects.Missing` and
the core fetches it and asks again, so each function here is safe to call twice.

The rules:

1. **Fate by the swap that applies** (:func:`fates_of`): an intent is applied exactly by the
   swap that records it ``applied`` (and its commit id in the dataset's commit-id index);
   rejected and cancelled intents are recorded too, so nobody applies them later.
2. **Settle before apply** (:func:`settle`, :func:`past_the_window`, :func:`indexed_version`):
   a batch first ends every commit whose fate the root already records, or whose commit id
   is recorded (the window, the commit-id indexes): never applied twice; made here, or
   ``already_committed``, as the record's intent says (:func:`made_here`). A commit is
   judged whole, as rule 11 judges one: the record of another set of datasets
   (:func:`reused_by_commit`), or an id in the indexes of some of its datasets only
   (:func:`indexed_commit`), is another change, refused. A lease takeover names no
   dataset, so no index keeps its id past the window: one whose token the root records
   already is applied (:func:`takeover_recorded`).
3. **The commit-id check** (:func:`recorded_version`, :func:`recorded_versions`): an intent
   of another process whose commit id is recorded (or a takeover whose token is) is
   ``applied`` at that version, not applied again; its commit (all the intents of one
   spanning datasets, together) recorded for another change, as rule 2 judges it, is
   ``rejected``.
4. **Expiry by server time** (:func:`judge_listed`): an intent is ``rejected: expired`` only
   when the server's clock says it is older than the TTL; and (:func:`too_old_to_apply`) a
   writer applies its own passed-over intent only while it is younger than half the TTL.
5. **The watermark** (:func:`bound_watermark`): never lowered, never above what was listed;
   folders fold only above it (:func:`above_watermark`, whatever a listing returns), and
   below it only an intent's own writer applies it.
6. **Fates kept** (:func:`~lakelock._registry._intents.prune_fates`).
7. **Cancel by compare-and-swap** (:func:`cancelled`): a commit that gives up records its
   intent cancelled in a swap before its caller hears "failed".
8. (Vacuum keeps pending and undecided intents: :mod:`lakelock._vacuum_plan`.)
9. **A restore lands within the retention** (:func:`restore_too_late`, :func:`restore_end`,
   :func:`restore_lead`, :func:`restore_refused`, :func:`restore_vacuumed`,
   :func:`vacuum_horizon`): the version a
   restore makes current again is kept by vacuum only until it leaves the retention (the
   one of the root the restore applies on, which may have shrunk since it was planned);
   the restore is applied only while that is more than a margin away, and only if the
   root's last vacuum did not leave it out (a retention grown after it brings nothing back).
10. **Nothing older than the vacuum floor is committed** (:func:`too_old_to_reference`):
   vacuum deletes no object younger than the lake's vacuum floor, so a commit references
   what it adds (its files, and the objects its attempt wrote) only while they are younger
   than half of it by the server's clock, just before its swap.
11. **One commit id, one change, within a batch too** (:func:`reused_in_batch`): a second
    commit of an id the batch applies is the same change (settled with it) or refused.
12. **The typed error travels in the fate** (:func:`error_kind`, :func:`fate_error`).
13. **A swap that may still land is not a failure** (:func:`swap_may_land`): after a lost
    answer, only a root that moved past the swap's base proves the commit absent.
14. **A data file is registered at most once** (:func:`registered_twice`).
15. **A commit planned on a version applies on it** (:func:`moved_since`).
16. **A commit spanning datasets applies whole** (:func:`whole_groups`): a fold applies the
    intents of one commit together, having read every one, or none of them.
17. **Older writers are kept out of what they would misapply** (:func:`guards`,
    :func:`needs_guard`): a group's or a restore's intents are written only into a lake
    whose root this writer read at format 3, which lakelocks that know only 1 and 2 refuse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from lakelock._registry._batch import CommitResult, Pending, iso
from lakelock._registry._changes import (
    HARD_MAX_MANIFESTS_PER_PARTITION,
    MAX_MANIFESTS_PER_PARTITION,
    Applied,
    Change,
    apply_change,
    is_takeover,
    makes_version,
    manifests_needed,
    oldest_write,
    other_datasets,
    reused_commit_id,
    reused_for_datasets,
)
from lakelock._registry._document import (
    GUARDED_FORMAT,
    LAST_MODIFIED_RESOLUTION,
    CommitRecord,
    IntentFate,
    RegistryDoc,
)
from lakelock._registry._fencing import superseded
from lakelock._registry._intents import prune_fates
from lakelock._registry._manifest import Manifest
from lakelock._registry._objects import Missing, Objects
from lakelock._s3 import ListedObject
from lakelock.errors import (
    CommitConflictError,
    CommitError,
    CommitIdReusedError,
    FileAlreadyRegisteredError,
    LockedError,
    ObjectTooOldError,
    PartitionByMismatchError,
    SchemaMismatchError,
    StaleFenceError,
)

__all__ = [
    "Settled",
    "above_watermark",
    "applied_batch",
    "bound_watermark",
    "cancelled",
    "error_kind",
    "fate_error",
    "fates_of",
    "guards",
    "indexed_commit",
    "indexed_version",
    "judge_listed",
    "made_here",
    "moved_since",
    "needs_guard",
    "past_the_window",
    "recorded_version",
    "recorded_versions",
    "refused_fates",
    "refused_unrecorded",
    "registered_twice",
    "restore_end",
    "restore_lead",
    "restore_refused",
    "restore_too_late",
    "restore_vacuumed",
    "reused_by_commit",
    "reused_in_batch",
    "settle",
    "stale_fence",
    "swap_may_land",
    "takeover_recorded",
    "too_old_to_reference",
    "vacuum_horizon",
    "vacuumed",
    "whole_groups",
    "written_by",
]


@dataclass(frozen=True)
class Settled:
    """What the root already decided about one pending commit: ``version`` it was applied at
    (``already``: by an earlier commit with its id, not by this batch), or ``error``."""

    pending: Pending
    version: int | None = None
    already: bool = False
    error: CommitError | None = None


def settle(
    doc: RegistryDoc, pending: Sequence[Pending], objects: Objects, *, made: Set[int]
) -> list[Settled]:
    """Rule 2: the commits of ``pending`` that ``doc`` already decided.

    An intent's recorded fate decides it (applied: success, ``already`` if through another
    commit of its id; rejected or cancelled: its reason). A commit id in the root's window
    is a success (``already`` unless it is this commit's own: :func:`made_here`, given
    ``made``, the versions a swap of ours whose answer was lost may have made). A
    caller-chosen id (``check_index``) is looked up in the commit-id index (a re-run of an
    old commit; the committer asks again once the window no longer covers every version
    since: :func:`past_the_window`), and so is an intent at or below the watermark with no
    fate left (applied long ago by another process, its fate pruned; not there: a fold
    passed it over, still ours). An entry found there is this commit's own if it names
    this commit's intent; one that names no intent (recorded by a lakelock from before the
    field) is taken as ours only for an intent passed over whose id was generated (nobody
    else carries it)."""
    found: list[Settled] = []
    for p in pending:
        # The intents of one commit are decided together, in one swap: any one's fate is
        # the commit's (the root may keep some of them and have pruned the rest).
        fate = next((f for key in p.intents if (f := doc.fate(key)) is not None), None)
        if fate is not None and fate.state == "applied":
            found.append(Settled(p, version=fate.version, already=fate.already))
            continue
        if fate is not None:
            found.append(Settled(p, error=fate_error(fate, p.change)))
            continue
        record = doc.commit(p.change.commit_id)
        reused = reused_by_commit(record, p.changes) if record is not None else None
        if reused is not None:  # the id is recorded for another change
            found.append(Settled(p, error=reused))
            continue
        if record is not None:
            ours = made_here(doc, p, record.version, made, intent=record.intent)
            found.append(Settled(p, version=record.version, already=not ours))
            continue
        if p.changes and all(takeover_recorded(doc, c) for c in p.changes):
            # Its id left the window (or it would be found above); the token is ours alone,
            # so a commit of this id recorded it: this one's, unless no swap or intent of
            # ours may have made it (a killed run's, re-run here).
            found.append(Settled(p, version=doc.version, already=not (made or p.intent_sent)))
            continue
        if doc.format_version < 2:
            continue
        passed_over = p.intent is not None and p.intent_sent and p.intent <= doc.watermark
        if p.check_index or passed_over:
            indexed = indexed_version(doc, p.changes, objects)
            if isinstance(indexed, CommitIdReusedError):
                found.append(Settled(p, error=indexed))
            elif indexed is not None:
                version, by = indexed
                ours = by == p.intent if by is not None else passed_over and not p.check_index
                found.append(Settled(p, version=version, already=not ours))
    return found


def takeover_recorded(doc: RegistryDoc, change: Change) -> bool:
    """Rules 2 and 3 for a lease takeover (FORMAT.md, "Lease takeovers"): whether ``doc``
    records ``change``'s token as the highest of its lease already. Every acquisition takes
    a token of its own and acts on it only once its takeover is recorded, so that token in
    ``fences`` was put there by a commit of this takeover's id: it is applied, whether or
    not its record is still in the window (a takeover names no dataset, so no commit-id
    index keeps it beyond). A higher token recorded is another acquisition's: the takeover
    is refused as stale when applied, as its first attempt would have been."""
    fence = change.fence
    return is_takeover(change) and fence is not None and doc.fences.get(fence.name) == fence.token


def stale_fence(doc: RegistryDoc, change: Change) -> StaleFenceError | None:
    """A lease's commit (a takeover included) whose token is below the highest ``doc``
    records of its lease: any attempt would refuse it as stale (FORMAT.md, "Lease
    takeovers"), whether or not it was recorded before — the lease is another acquirer's
    either way. ``None``: no lease fence, or one still current."""
    fence = change.fence
    if fence is None or fence.hierarchical:
        return None
    return superseded(doc, fence, dataset=change.dataset, commit_id=change.commit_id)


def made_here(
    doc: RegistryDoc, p: Pending, version: int, made: Set[int], *, intent: str | None
) -> bool:
    """Rule 2: whether the record of ``p``'s commit id at ``version`` is ``p``'s own (its
    caller hears it committed, not ``already_committed``), given that ``doc`` keeps no fate
    of ``p``'s intents. A record names the intent that made it (``intent``): it is ``p``'s
    exactly when that is ``p``'s intent, whichever swap applied it (ours, its answer lost,
    or another process's fold); any other is another commit's under the id (a killed
    run's, a re-run's in another process: the same change committed already).

    A record that names none (a commit with no intent, or recorded by a lakelock from
    before the field) is guessed: with no intent, or on a format-1 root (no fates), it may
    be ours if a swap of ours whose answer was lost may have made it (``made``). Else it
    may be ours only if the fate the applying swap recorded for ``p``'s intent may have
    been pruned since (rule 6 prunes the oldest first, keeping every fate above the
    watermark and the ``commit_window`` most recent): not if ``p``'s intent is above the
    watermark, nor if ``doc`` keeps an applied fate at or below the watermark recorded
    before it (an older version's, or one of the same version sorting before it: a swap
    records its applied intents in key order), nor if fewer than ``commit_window`` fates
    were recorded after it."""
    if intent is not None:
        return intent == p.intent
    mine = p.intent
    if mine is None or doc.format_version < 2:
        return version in made
    if version not in made and not p.intent_sent:
        return False
    if mine > doc.watermark:
        return False

    def recorded_before(f: IntentFate) -> bool:
        # An ``already`` fate carries the version it points at, not the one recording it.
        if f.already or f.version > version:
            return False
        return f.version < version or (f.state == "applied" and f.key < mine)

    if any(
        recorded_before(f) and f.state == "applied" and f.key <= doc.watermark for f in doc.fates
    ):
        return False
    after = sum(not recorded_before(f) for f in doc.fates)
    return doc.settings is None or after >= doc.settings.commit_window


def guards(doc: RegistryDoc | None) -> bool:
    """Rule 17: whether ``doc``, a root this writer read (``None``: none read; version 0:
    the lake has none yet), keeps out every lakelock that would misapply a group's or a
    restore's intents. Those know root formats 1 and 2 only and refuse any other, reading or
    writing; every swap of this lakelock writes format 3, and nobody writes a lower one over
    it. So once a writer read a format-3 root, every swap that can land after (each is
    conditional on the ETag of a root at least that new) is made by a lakelock that knows
    rules 9 and 16."""
    return doc is not None and doc.version > 0 and doc.format_version >= GUARDED_FORMAT


def needs_guard(pending: Pending) -> bool:
    """Rule 17: whether ``pending``'s intents are ones a lakelock that knows only formats 1
    and 2 would misapply, were it to fold them: a commit spanning datasets (it would apply
    the intents one at a time, breaking rule 16) or a restore (it would apply one as a
    commit that changes nothing, and acknowledge it). Its writer creates them only once
    :func:`guards` holds for its root; until then it upgrades the root first."""
    return bool(pending.intents) and (
        len(pending.changes) > 1 or any(c.restoring for c in pending.changes)
    )


def swap_may_land(doc: RegistryDoc, base: int) -> bool:
    """Rule 13: whether a swap of ours whose outcome is unknown, based on version ``base``
    (``If-Match`` that root's ETag), may still land, seen from ``doc``, a root read since
    that does not show it. While the root is still at ``base`` the swap may be in flight at
    the server (a request timed out at the client is not cancelled at S3, and AWS answers
    409 to the retries that meet it) and land later: the commit is not proven absent, and a
    caller who gives up now hears that its outcome is unknown. Once the root moved past
    ``base``, the swap can never land (its condition no longer holds), and what the root
    records (the window, the commit-id indexes) proves it applied or absent."""
    return doc.version <= base


def past_the_window(doc: RegistryDoc, version: int) -> bool:
    """Rule 2, after a swap whose answer was lost (it may have made ``version``): whether the
    root's window of recent commits can no longer prove that swap absent, so each dataset's
    commit-id index must be asked. The window keeps commits, not versions: the version of
    its oldest record may have lost records already, so it proves only later versions."""
    oldest = doc.commits[0].version if doc.commits else doc.version + 1
    return oldest >= version and doc.version >= version


def reused_by_commit(record: CommitRecord, changes: Sequence[Change]) -> CommitIdReusedError | None:
    """Rules 2 and 3: whether the commit of ``changes`` (one per dataset), whose commit id
    the root's window records (``record``), is another change than the recorded one: the
    error to refuse it with, or ``None``, the very same change (the record settles it).

    The same change names the same datasets as the record (a lease takeover names none, as
    its change does: ``""``), as rule 11 compares two commits of one batch
    (:func:`reused_in_batch`): a re-run spanning a dataset more or fewer than the recorded
    commit adds rows it never had, or leaves out some it had, whichever dataset it names
    first. Then each change is compared as
    :func:`~lakelock._registry._changes.reused_commit_id` compares it: the record's
    operation is that of its first dataset's change (the others' are compared to it only
    through the digest), and its digest is the commit's where its changes agreed on one."""
    recorded = record.datasets or ("",)
    other = other_datasets(record, changes[0], [c.dataset for c in changes])
    if other is not None:
        return other
    lead = next(c for c in changes if c.dataset == recorded[0])
    for change in changes:
        compared = change if change is lead else replace(change, operation=lead.operation)
        reused = reused_commit_id(record, compared)
        if reused is not None:
            return reused
    return None


def indexed_version(
    doc: RegistryDoc, changes: Iterable[Change], objects: Objects
) -> tuple[int, str | None] | CommitIdReusedError | None:
    """Rule 2 past the root's window: the version the commit-id indexes of the commit of
    ``changes`` record for its commit id (every applied id is kept there, however old) and
    the intent their entries name (``None``: none), or the error if they record the id for
    another change (:func:`indexed_commit`); ``None``: no index records it. A change that
    only carries a fence makes no version, so its commit leaves no entry in its dataset's
    index: that index is not asked (an entry there is another commit's)."""
    changes = tuple(changes)
    found: list[tuple[Change, Mapping[str, Any]]] = []
    for change in changes:
        state = doc.datasets.get(change.dataset)
        if state is not None and makes_version(change):
            entry = objects.commit_entry(state, change.commit_id)
            if entry is not None:
                found.append((change, entry))
    return indexed_commit(changes, found) if found else None


def indexed_commit(
    changes: Sequence[Change], found: Sequence[tuple[Change, Mapping[str, Any]]]
) -> tuple[int, str | None] | CommitIdReusedError:
    """Rule 2 past the root's window, given the entries ``found`` of the commit-id indexes
    of some of the datasets ``changes`` make versions of (at least one): the version and
    intent they record, or the error if the recorded commit is another change. An index
    entry names no dataset (its index's own), so the commit is the recorded one only if the
    id is in the index of every dataset it makes a version of (``found`` holds only those:
    a change that only carries a fence leaves no entry), at one version: found in some of
    them only, or at other versions, it was recorded for other datasets (a re-run spanning
    a dataset more than its first run; commits of one dataset each, past the window). Then
    each dataset's entry is compared with its change
    (:func:`~lakelock._registry._changes.reused_commit_id`). A commit of fewer datasets
    than the recorded one cannot be told so here: its datasets' entries are all there
    (docs/FORMAT.md, "Commit ids")."""
    version = int(found[0][1]["version"])
    # The datasets whose index records the id at that version: the commit recorded there.
    there = {change.dataset for change, entry in found if int(entry["version"]) == version}
    if any(c.dataset not in there for c in changes if makes_version(c)):
        return reused_for_datasets(
            changes[0],
            [c.dataset for c in changes],
            version=version,
            recorded=sorted(there),
            operation=str(found[0][1].get("operation", "commit")),
        )
    for change, entry in found:
        reused = reused_commit_id(entry, change)
        if reused is not None:
            return reused
    intent = found[0][1].get("intent")
    return version, intent if isinstance(intent, str) else None


def recorded_version(
    doc: RegistryDoc, commit: Change | Sequence[Change], objects: Objects
) -> int | CommitIdReusedError | None:
    """Rule 3: the version that applied the commit id of ``commit`` (its changes, one per
    dataset; a single change: a commit of one dataset), if one did, or the error if the id
    is recorded for another change (:func:`reused_by_commit` in the root's window,
    :func:`indexed_commit` past it). A listed intent is above the watermark, so its own
    fate would be in the root; its id may have been applied through another intent (a
    re-run), which the commit-id index records. A generated id too: its caller may have
    re-run the commit under it (every error names the id) while this intent was pending,
    and the re-run may have left the root's window since (sweep seed 26933)."""
    changes = (commit,) if isinstance(commit, Change) else tuple(commit)
    record = doc.commit(changes[0].commit_id)
    if record is not None:
        return reused_by_commit(record, changes) or record.version
    if all(takeover_recorded(doc, c) for c in changes):
        return doc.version
    if doc.format_version < 2:
        return None
    indexed = indexed_version(doc, changes, objects)
    return indexed[0] if isinstance(indexed, tuple) else indexed


def recorded_versions(
    doc: RegistryDoc, commits: Sequence[Sequence[Change]], objects: Objects
) -> list[int | CommitIdReusedError | None]:
    """Rule 3 for each commit of other processes (its changes, one per dataset, judged
    together: :func:`recorded_version`): the version its commit id was applied at, or the
    error if the id is recorded for another change (``None``: neither). Every commit is
    judged before a miss is raised, with every key missed, so one fetch serves the whole
    fold (the snapshots it then applies on)."""
    found: list[int | CommitIdReusedError | None] = []
    missing: list[str] = []
    for changes in commits:
        try:
            found.append(recorded_version(doc, changes, objects))
        except Missing as miss:
            missing.extend(miss.keys)
    if missing:
        raise Missing(tuple(dict.fromkeys(missing)))
    return found


def judge_listed(
    listed: ListedObject, *, server_now: float | None, ttl: float, loaded: Change | str | None
) -> str | None:
    """Rule 4: why a listed intent of another process cannot be applied (``None``: it can).
    Expiry compares the listing's ``LastModified`` with the server's clock (``server_now``:
    estimated from the ``Date`` of this process's last root read and the newest
    ``LastModified`` listed), never a writer's own: unknown (``None``), nothing expires."""
    if server_now is not None and listed.last_modified.timestamp() < server_now - ttl:
        return f"expired: pending for more than {ttl:.0f} s"
    if isinstance(loaded, str):
        return loaded
    return None


def too_old_to_apply(
    intents: Iterable[tuple[str, float | None]], *, watermark: str, now: float, ttl: float
) -> str | None:
    """Rule 4b: why a writer must not apply its own intents in the swap it is about to make
    (``None``: it may). One at or below the watermark was passed over by a fold: only its
    writer applies it, and vacuum keeps such an intent only while it is younger than the
    TTL (by the listing's server time). So its writer applies it only while it is younger
    than half the TTL, which leaves the other half for the swap to land and for vacuum's
    clock to run ahead; past that the commit gives up and cancels it (rule 7). Its age is
    measured by the writer's monotonic clock (``now``) since the intent was made (each
    key's time by that clock; ``None``: not known, not judged): the server wrote it later,
    and a step of the writer's wall clock (NTP's, by hand) moves neither, so a step back
    cannot make an old intent look young (the server's clock, which vacuum judges by, runs
    on as the monotonic clock does). Intents above the watermark are kept by vacuum however
    old."""
    for key, made in intents:
        if key > watermark or made is None:
            continue
        age = now - made
        if age > ttl / 2:
            return (
                f"its intent was passed over by a fold and is {age:.1f} s old, more than half "
                f"the intent TTL ({ttl:g} s): vacuum may remove such an intent, so it is not "
                "applied (retry the commit)"
            )
    return None


#: However long the retention, a restore needs at most this long (seconds) between checking
#: that its version is still kept and its swap landing (rule 9): an hour covers any stall
#: and any skew between the clocks of the writers and of vacuum that lakelock tolerates.
RESTORE_LEAD_MAX = 3600.0


def restore_lead(retention: float) -> float:
    """Rule 9's margin: a restore is refused when its version leaves the retention within
    this (half the retention, at most :data:`RESTORE_LEAD_MAX`); it is applied while half
    this is left, and its swap is sent while a quarter is."""
    return min(retention / 2, RESTORE_LEAD_MAX)


def restore_refused(until: float, *, now: float, retention: float) -> bool:
    """Rule 9 when a restore reads its version: refused if the version leaves the retention
    (at ``until``) within the restore's lead (:func:`restore_lead`)."""
    return until - now < restore_lead(retention)


def vacuum_horizon(doc: RegistryDoc) -> float | None:
    """Rule 9 against vacuum: the root's last vacuum kept no version replaced before this
    (its successor's recorded commit time earlier: vacuum's own comparison), so such a
    version may have lost its objects whatever the retention says since: no retention grown
    again brings them back. The horizon the vacuum recorded (``vacuum_horizon``); a root
    whose vacuum recorded only its cutoff (an earlier lakelock's, or a writer of one
    dropped the horizon) stands the cutoff less :data:`LAST_MODIFIED_RESOLUTION` in: the
    newest ``LastModified`` it deleted, which its window had begun after, so never later
    than the horizon (it judges fewer versions vacuumed, never one it kept). ``None``:
    no vacuum recorded either."""
    if doc.vacuum_horizon is not None:
        return doc.vacuum_horizon
    if doc.vacuum_cutoff is None:
        return None
    return doc.vacuum_cutoff - LAST_MODIFIED_RESOLUTION


def restore_vacuumed(change: Change, *, horizon: float | None) -> float | None:
    """Rule 9 against vacuum: when the version ``change`` restores was replaced, if that was
    before the ``horizon`` of the root it is applied on (:func:`vacuum_horizon`: vacuum may
    have deleted its objects), else ``None``. An older writer's intent does not record the
    replacement time; the version's own commit time stands in, as in :func:`restore_end`."""
    since = change.restore_since
    if since is None and change.restore is not None:
        since = change.restore.at
    if since is None or horizon is None or since >= horizon:
        return None
    return since


def restore_end(change: Change, *, retention: float) -> float | None:
    """Rule 9: when the version ``change`` restores leaves the retention of the root it is
    applied on (``retention``; ``None``: it is the current one, or not a restore). Vacuum
    deletes under the retention of the root it claims, which a ``configure`` may have
    shrunk since the restore reckoned ``restore_until``: the end is the sooner of that and
    the version's replacement time plus ``retention``. An older writer's intent does not
    record the replacement time; the restored version's own commit time stands in for it
    (never later: a snapshot's time is never before its parent's, FORMAT.md invariant 3),
    which ends it sooner, never later. Unknown (the version not read yet): ``restore_until``,
    for the version is read before the restore is applied."""
    until = change.restore_until
    if until is None:
        return None
    since = change.restore_since
    if since is None and change.restore is not None:
        since = change.restore.at
    return until if since is None else min(until, since + retention)


def restore_too_late(
    changes: Iterable[Change],
    *,
    now: float,
    margin: float,
    retention: float,
    horizon: float | None = None,
) -> str | None:
    """Rule 9: why a restore among ``changes`` must not be applied now (``None``: none
    must). Vacuum deletes what only a version that left the retention references, so a
    restore re-committing such a version would point at deleted files: each restore carries
    when its version was replaced and leaves (the clock of the recorded commit times), and
    is applied only while more than ``margin`` is left of the ``retention`` of the root it
    applies on (:func:`restore_end`), by the applier's clock, and only if it was replaced
    after that root's vacuum ``horizon`` (:func:`restore_vacuumed`: the retention may have
    been shorter when vacuum ran)."""
    for change in changes:
        replaced = restore_vacuumed(change, horizon=horizon)
        if replaced is not None and horizon is not None:
            return (
                f"the version it restores was replaced {horizon - replaced:.1f} s before the "
                "window of the lake's last vacuum began (recorded in the root): vacuum may "
                "have deleted its files, whatever the retention is now; restore a newer version"
            )
        until = restore_end(change, retention=retention)
        if until is not None and now + margin >= until:
            return (
                f"the version it restores leaves the retention in {until - now:.1f} s, too "
                f"soon to commit it safely (vacuum may delete its files as the restore "
                f"commits; it needs {margin:g} s): restore a newer version"
            )
    return None


def too_old_to_reference(
    written: Iterable[tuple[str, float]], *, server_now: float | None, floor: float
) -> tuple[str, float] | None:
    """Rule 10: the first of ``written`` (keys, and when they were written by the server's
    clock, or a little before) that a commit must not reference now, and its age (``None``:
    none). Vacuum deletes an unreferenced object only once it is older than its window,
    never shorter than the lake's vacuum ``floor``; a commit whose swap lands after such a
    vacuum read the root would reference what it deleted. So an object is referenced only
    while younger than half the floor at ``server_now`` (the server's clock as this process
    knows it: a little behind), which leaves the other half for the swap to land. No floor
    (0) or no server time known: nothing is checked."""
    if server_now is None or floor <= 0:
        return None
    for key, at in written:
        if server_now - at > floor / 2:
            return key, server_now - at
    return None


def vacuumed(
    written: Iterable[tuple[str, float]], *, cutoff: float | None
) -> tuple[str, float] | None:
    """Rule 10, by the root's record: the first of ``written`` (keys, and when they were
    written by the server's clock, or a little before) at or before the ``cutoff`` a vacuum
    recorded in the root it swapped before deleting (``RegistryDoc.vacuum_cutoff``: it may
    have deleted any unreferenced object last modified then or earlier). A commit based on
    that root or a later one must not reference it; one based on an earlier root cannot
    land (its ``If-Match`` fails) and is judged again on the new one. Independent of the
    floor and of how well this process knows the server's clock. ``None``: none (or no
    cutoff recorded); else the key and when it was written."""
    if cutoff is None:
        return None
    return next(((key, at) for key, at in written if at <= cutoff), None)


def taken_by_vacuum(
    p: Pending, key: str, at: float, *, server_now: float | None, floor: float
) -> ObjectTooOldError:
    """Rule 10's refusal of ``p`` by the root's vacuum cutoff (:func:`vacuumed`)."""
    return ObjectTooOldError(
        f"{key} was written before the cutoff of the lake's last vacuum (recorded in the "
        "root before it deleted anything): vacuum may have deleted it, so nothing was "
        "committed (write the data again and commit that)",
        key=key,
        age=math.ceil(server_now - at) if server_now is not None else 0,
        floor=math.ceil(floor),
        dataset=p.change.dataset,
        commit_id=p.change.commit_id,
    )


def written_by(changes: Iterable[Change]) -> list[tuple[str, float]]:
    """Rule 10's objects of ``changes``: the oldest file each adds, and when it was written
    (changes whose files carry no write time are left out)."""
    found = []
    for change in changes:
        at = oldest_write(change)
        if at is None:
            continue
        oldest = min(
            change.add,
            key=lambda f: f.written_at if f.written_at is not None else at,
            default=None,
        )
        found.append((oldest.key if oldest is not None else change.dataset, at))
    return found


def too_old(p: Pending, key: str, age: float, floor: float) -> ObjectTooOldError:
    """Rule 10's refusal of ``p``: what it names, and that nothing was committed."""
    return ObjectTooOldError(
        f"{key} was written {age:.0f} s ago by the server's clock, more than half the "
        f"lake's vacuum floor ({floor:g} s): vacuum may have deleted it, or may before this "
        "commit lands, so nothing was committed (write the data again and commit that)",
        key=key,
        age=math.ceil(age),
        floor=math.ceil(floor),
        dataset=p.change.dataset,
        commit_id=p.change.commit_id,
    )


def applied_batch(
    doc: RegistryDoc,
    pending: Sequence[Pending],
    objects: Objects,
    *,
    now: str,
    seconds: float,
    nonces: Callable[[], str],
    retention: float,
    restore_margin: float = 0.0,
    server_now: float | None = None,
    floor: float = 0.0,
) -> tuple[RegistryDoc, list[tuple[Change, Applied]], dict[int, CommitError]]:
    """Every pending commit applied in turn, each validated alone against the document as
    the batch has changed it so far (all or nothing per commit); a restore too close to its
    version leaving ``doc``'s ``retention`` (rule 9, ``restore_margin``) is refused, and so is a
    commit adding a file too old for the vacuum ``floor`` at ``server_now`` (rule 10). Returns the
    document, what was applied, and why each refused commit (by position) was refused. A
    commit whose manifests are not cached raises :class:`Missing` for all of them at once
    (after trying the rest), so one fetch serves the whole batch."""
    applied: list[tuple[Change, Applied]] = []
    rejected: dict[int, CommitError] = {}
    current = doc
    seen: dict[str, tuple[Change, ...]] = {}
    missing: list[str] = []
    # Manifests this batch consolidated: they exist nowhere until its swap, and a later
    # commit of the batch on the same partition reads them from here.
    made: dict[str, Manifest] = {}
    for n, p in enumerate(pending):
        twin = seen.get(p.change.commit_id)
        if twin is not None:
            # An id a commit of this batch applied already: the very same change is settled
            # with it (applied once); another change under that id is refused (rule 11).
            reused = reused_in_batch(twin, p.changes, version=doc.version + 1)
            if reused is not None:
                rejected[n] = reused
            continue
        candidate = current
        results: list[tuple[Change, Applied]] = []
        refused = _refused_at(
            p,
            seconds=seconds,
            restore_margin=restore_margin,
            retention=retention,
            server_now=server_now,
            floor=floor,
            cutoff=doc.vacuum_cutoff,
            horizon=vacuum_horizon(doc),
        )
        if refused is not None:
            rejected[n] = refused
            continue
        try:
            for change in p.changes:
                moved = moved_since(candidate, change)
                if moved is not None:
                    raise moved
                twice = registered_twice(candidate, change, objects, made=made)
                if twice is not None:
                    raise twice
                needed, most = manifests_needed(candidate, change), MAX_MANIFESTS_PER_PARTITION
                if needed and not objects.has_all(needed - made.keys()):
                    # Consolidating would read manifests we do not hold: only a partition
                    # past the hard bound (or losing files) needs it now.
                    most = HARD_MAX_MANIFESTS_PER_PARTITION
                    needed = manifests_needed(candidate, change, max_manifests=most)
                result = apply_change(
                    candidate,
                    change,
                    manifests=_manifests(objects, needed, made),
                    now=now,
                    next_version=doc.version + 1,
                    max_manifests=most,
                    retired_at=seconds,
                    nonce=nonces(),
                )
                candidate = result.doc
                results.append((change, result))
        except (CommitConflictError, SchemaMismatchError) as error:  # refused: not applied
            # Without its traceback: it would hold this frame, and with it every document
            # the batch built, until the garbage collector found the cycle.
            rejected[n] = error.with_traceback(None)
            continue
        except Missing as miss:
            missing.extend(miss.keys)
            continue
        for _, done in results:
            made.update(done.manifests)
        applied.extend(results)
        seen[p.change.commit_id] = p.changes
        current = candidate
    if missing:
        raise Missing(tuple(missing))
    return current, applied, rejected


def _refused_at(
    p: Pending,
    *,
    seconds: float,
    restore_margin: float,
    retention: float,
    server_now: float | None,
    floor: float,
    cutoff: float | None = None,
    horizon: float | None = None,
) -> CommitError | None:
    """Why ``p`` is refused whatever the document: a restore too close to its version
    leaving the retention, or of a version replaced before the root's vacuum ``horizon``
    (rule 9), or whose version could not be read, a file too old for the vacuum floor, or
    written before the ``cutoff`` a vacuum recorded in the root (rule 10)."""
    late = restore_too_late(
        p.changes, now=seconds, margin=restore_margin, retention=retention, horizon=horizon
    )
    if late is not None:
        return CommitConflictError(
            f"restore refused: {late}", dataset=p.change.dataset, commit_id=p.change.commit_id
        )
    written = written_by(p.changes)
    old = too_old_to_reference(written, server_now=server_now, floor=floor)
    if old is not None:
        return too_old(p, *old, floor)
    taken = vacuumed(written, cutoff=cutoff)
    if taken is not None:
        return taken_by_vacuum(p, *taken, server_now=server_now, floor=floor)
    if any(c.restore_from is not None and c.restore is None for c in p.changes):
        # A restore of another process whose version the folder could not read (vacuumed:
        # it had left the retention long ago): there is nothing to make current.
        return CommitConflictError(
            "restore refused: the version it restores could not be read",
            dataset=p.change.dataset,
            commit_id=p.change.commit_id,
        )
    return None


def _manifests(
    objects: Objects, keys: Iterable[str], made: Mapping[str, Manifest]
) -> dict[str, Manifest]:
    """The manifests at ``keys``: those the batch consolidated so far (``made``: not on S3
    until its swap), the rest from the cache (:class:`Missing` until cached)."""
    wanted = set(keys)
    held = {k: made[k] for k in wanted if k in made}
    return {**objects.manifests(wanted - held.keys()), **held} if len(held) < len(wanted) else held


def registered_twice(
    doc: RegistryDoc,
    change: Change,
    objects: Objects,
    *,
    made: Mapping[str, Manifest] = MappingProxyType({}),
) -> FileAlreadyRegisteredError | None:
    """Rule 14: a data file (its key: keys are write-once) is live in a dataset at most
    once. ``change`` adds files that existed before it (``existing_files``: a
    ``registry.commit``, perhaps retried without a commit id after an unknown outcome whose
    first attempt landed): the error refusing it if one of them is live in ``doc`` already
    — whether an earlier version or an earlier commit of this batch registered it. Reads
    the manifests of the partitions the files join (``made``: those the batch consolidated
    so far; the rest :class:`Missing` until cached)."""
    state = doc.datasets.get(change.dataset)
    if not change.existing_files or not change.add or state is None:
        return None
    wanted: dict[str, set[str]] = {}
    for f in change.add:
        wanted.setdefault(f.partition_path, set()).add(f.key)
    refs = {
        path: partition.manifests
        for path in wanted
        if (partition := state.partitions.get(path)) is not None
    }
    manifests = _manifests(objects, (ref.key for held in refs.values() for ref in held), made)
    live = sorted(
        f.key
        for path, held in refs.items()
        for ref in held
        for f in manifests[ref.key].files_of(path)
        if f.key in wanted[path]
    )
    if not live:
        return None
    shown = ", ".join(repr(k) for k in live[:3]) + (" ..." if len(live) > 3 else "")
    return FileAlreadyRegisteredError(
        f"{len(live)} of the files this commit adds {'is' if len(live) == 1 else 'are'} "
        f"registered in dataset {change.dataset!r} already ({shown}): a file is registered "
        "once (an earlier commit of these files landed? give commits a commit_id to make a "
        "retry report it); nothing was committed",
        keys=tuple(live),
        dataset=change.dataset,
        commit_id=change.commit_id,
    )


def moved_since(doc: RegistryDoc, change: Change) -> CommitConflictError | None:
    """Rule 15: a change planned on a version of its dataset (``on_version``: what an
    Iceberg engine's requirements were checked against, or 0, "the dataset does not exist",
    for a create) applies only while the dataset is still at that version in ``doc`` (as
    the batch has changed it so far): the error refusing it if another commit moved the
    dataset first. Unconditional changes (``on_version`` None) apply on any version."""
    if change.on_version is None:
        return None
    state = doc.datasets.get(change.dataset)
    holds = change.on_version == 0 if state is None else state.updated_version == change.on_version
    if holds:
        return None
    current = state.updated_version if state is not None else 0
    planned = (
        "the dataset did not exist"
        if change.on_version == 0
        else f"version {change.on_version} of the dataset"
    )
    now = "it exists" if change.on_version == 0 else f"it is at version {current}"
    return CommitConflictError(
        f"commit planned on {planned}, but {now}: another commit landed first; nothing was "
        "committed (plan it again on the current version)",
        dataset=change.dataset,
        commit_id=change.commit_id,
    )


def reused_in_batch(
    twin: Sequence[Change], changes: Sequence[Change], *, version: int
) -> CommitIdReusedError | None:
    """Rule 11: whether ``changes``, whose commit id an earlier commit of the same batch
    (``twin``) applies at ``version``, is another change under that id (the error to
    refuse it with), or the very same change (``None``: it is settled with its twin,
    ``already_committed``). The same change is the same datasets, and for each the same
    operation and content (:func:`~lakelock._registry._changes.reused_commit_id`: the
    digest), as for an id found recorded in the root."""
    mine = {c.dataset: c for c in twin}
    datasets = ",".join(mine)
    for change in changes:
        first = mine.get(change.dataset)
        record = CommitRecord(
            change.commit_id,
            version,
            datasets,
            "",
            0,
            0,
            (first or twin[0]).operation,
            first.digest if first is not None else None,
        )
        reused = reused_commit_id(record, change)
        if reused is not None:
            return reused
    if {c.dataset for c in changes} == mine.keys():
        return None
    change = changes[0]
    return CommitIdReusedError(
        f"commit id {change.commit_id!r} is committed at version {version} for "
        f"{twin[0].operation} of {datasets!r}, not for "
        f"{','.join(c.dataset for c in changes)!r}: it names another change; use a new "
        "commit id for a new change",
        version=version,
        recorded_dataset=datasets,
        recorded_operation=twin[0].operation,
        dataset=change.dataset,
        commit_id=change.commit_id,
    )


def fates_of(
    applied: Iterable[tuple[Change, Applied]],
    pending: Sequence[Pending],
    rejected: dict[int, CommitError],
    version: int,
    seconds: float,
) -> list[IntentFate]:
    """Rule 1: the fate of every intent a batch attempted — ``applied`` at ``version`` (the
    swap that records this is the one that applies it), or ``rejected`` with the reason. A
    twin (rule 11: the very same change as a commit of the batch under its id, settled with
    it) is ``applied`` ``already``: its writer hears ``already_committed``."""
    ids = {change.commit_id for change, _ in applied}
    made = {id(change) for change, _ in applied}
    fates: list[IntentFate] = []
    for n, p in enumerate(pending):
        if n in rejected:
            error = rejected[n]
            kind = error_kind(error)
            fates.extend(
                IntentFate(key, "rejected", version, seconds, str(error), kind) for key in p.intents
            )
        elif p.change.commit_id in ids:
            twin = id(p.change) not in made
            fates.extend(
                IntentFate(key, "applied", version, seconds, already=twin) for key in p.intents
            )
    return fates


#: The typed errors a rejection's fate records (rule 12), by kind, with the fields each
#: is made with: a kind not here (or a fate without one) is a plain CommitConflictError.
FATE_ERRORS: dict[str, tuple[type[CommitError], tuple[str, ...]]] = {
    "SchemaMismatchError": (SchemaMismatchError, ()),
    "LockedError": (LockedError, ("holder", "paths", "token")),
    "PartitionByMismatchError": (PartitionByMismatchError, ()),
    "CommitIdReusedError": (
        CommitIdReusedError,
        ("version", "recorded_dataset", "recorded_operation"),
    ),
    "StaleFenceError": (StaleFenceError, ("name", "token", "current")),
    "FileAlreadyRegisteredError": (FileAlreadyRegisteredError, ("keys",)),
    "ObjectTooOldError": (ObjectTooOldError, ("key", "age", "floor")),
}


def error_kind(error: CommitError) -> dict[str, Any] | None:
    """Rule 12: what a rejection's fate records of its typed error: its ``kind`` and the
    fields it is made with (``None``: a plain conflict, told by its reason alone)."""
    known = FATE_ERRORS.get(type(error).__name__)
    if known is None or not isinstance(error, known[0]):
        return None
    fields: dict[str, Any] = {"kind": type(error).__name__}
    for name in known[1]:
        value = getattr(error, name)
        fields[name] = list(value) if isinstance(value, tuple | list) else value
    return fields


def fate_error(fate: IntentFate, change: Change) -> CommitError:
    """Rule 12: the error the writer of an intent another process decided raises: the
    typed error the deciding process recorded (a stale fence is ``StaleFenceError`` with its
    fields wherever it was found stale), or, for a fate that records none (expired,
    cancelled, a plain conflict), ``CommitConflictError`` with the fate's reason."""
    message = f"the commit's intent was {fate.state}: {fate.reason}"
    plain = CommitConflictError(message, dataset=change.dataset, commit_id=change.commit_id)
    recorded = fate.error
    known = FATE_ERRORS.get(str(recorded.get("kind"))) if recorded is not None else None
    if recorded is None or known is None or fate.state != "rejected":
        return plain
    make: Callable[..., CommitError] = known[0]
    try:
        fields: dict[str, Any] = {
            name: tuple(v) if isinstance(v := recorded[name], list) else v for name in known[1]
        }
        return make(message, dataset=change.dataset, commit_id=change.commit_id, **fields)
    except (KeyError, TypeError):  # a record this version cannot make the error from
        return plain


def whole_groups(
    found: Sequence[tuple[str, Change]],
) -> list[tuple[tuple[str, ...], tuple[Change, ...]]]:
    """Rule 16: the commits that ``found`` (other processes' intents read by one fold, in
    key order) stand for, each as its intent keys and changes, oldest first: an intent of a
    one-dataset commit alone; the intents of a commit spanning datasets (a group) together,
    in the order of the datasets it names, once this fold read one for every dataset. A
    group read in part is left pending: the PUTs of the rest may still be landing (or its
    writer died before it sent them all, and nobody applies any of it); a later fold, or its
    writer, applies it whole. Intents that claim one group but disagree (another commit id,
    other datasets, a dataset twice) are no commit lakelock wrote: none is applied."""
    units: list[tuple[tuple[str, ...], tuple[Change, ...]]] = []
    groups: dict[str, list[tuple[str, Change]]] = {}
    for key, change in found:
        if change.group is None:
            units.append(((key,), (change,)))
        else:
            groups.setdefault(change.group.id, []).append((key, change))
    for parts in groups.values():
        first = parts[0][1]
        assert first.group is not None
        by_dataset = {change.dataset: (key, change) for key, change in parts}
        if (
            len(by_dataset) != len(parts)
            or set(by_dataset) != set(first.group.datasets)
            or any(c.group != first.group or c.commit_id != first.commit_id for _, c in parts)
        ):
            continue
        ordered = [by_dataset[name] for name in first.group.datasets]
        units.append((tuple(sorted(k for k, _ in ordered)), tuple(c for _, c in ordered)))
    units.sort(key=lambda unit: unit[0][0])
    return units


def above_watermark(listed: Iterable[ListedObject], watermark: str) -> list[ListedObject]:
    """Rule 5: folders fold only intents above the watermark. A LIST after it returns only
    those on S3, but a store that ignores ``StartAfter`` returns older ones too (S3 Express
    One Zone's directory buckets do not support it): intents applied long ago, whose fates
    the root no longer keeps, that a fold would apply again. They are dropped here, not
    left to the store's word."""
    return [o for o in listed if o.key > watermark]


def bound_watermark(doc: RegistryDoc, listed: Sequence[str], proposed: str) -> str:
    """Rule 5: the watermark a swap may set — never below the current one, never above the
    highest key its fold listed (a key above that was never seen). The policy proposes how
    far behind that to stay (its lag). Folders fold only above it; an intent below it with
    no fate is its own writer's to apply (after the commit-id index check of rule 2)."""
    if not listed:
        return doc.watermark
    return max(doc.watermark, min(proposed, listed[-1]))


def sealed_fates(
    doc: RegistryDoc, fates: Sequence[IntentFate], *, watermark: str, keep: int
) -> tuple[IntentFate, ...]:
    """Rule 6: the fates the next root keeps (see :func:`prune_fates`)."""
    return prune_fates([*doc.fates, *fates], watermark=watermark, keep=keep)


def cancelled(
    doc: RegistryDoc, pending: Sequence[Pending], *, seconds: float, keep: int
) -> RegistryDoc:
    """Rule 7: the next root, recording ``pending``'s intents cancelled (their committer
    gave up), or ``rejected`` for those their own writer refused (:func:`refused_fates`);
    it must land by compare-and-swap before any caller hears it failed."""
    return _fated(
        doc,
        lambda version: [
            *(
                IntentFate(key, "cancelled", version, seconds, "its committer gave up")
                for p in pending
                if p.refused is None
                for key in p.intents
            ),
            *refused_fates(pending, version, seconds),
        ],
        seconds=seconds,
        keep=keep,
    )


def refused_unrecorded(doc: RegistryDoc, settled: Settled) -> bool:
    """Rule 7: whether ``settled`` is a refusal by the commit's own writer (its id recorded
    for another change), not a fate ``doc`` records, of a commit whose intent may be
    written. Every folder can see that intent and applies it once the record that refuses
    it has left the root's window: the refusal is recorded (:func:`refused_fates`)
    before its caller hears it."""
    p = settled.pending
    return (
        settled.error is not None
        and p.intent_sent
        and all(doc.fate(key) is None for key in p.intents)
    )


def refused_fates(pending: Iterable[Pending], version: int, seconds: float) -> list[IntentFate]:
    """Rule 7: the fates recording the intents of ``pending``'s commits their own writer
    refused (``Pending.refused``) ``rejected`` with the error (its kind too, rule 12), for
    the swap making ``version``; the caller hears the refusal once that swap lands, or a
    fold may apply the intent later. The others of ``pending`` get none here."""
    return [
        IntentFate(key, "rejected", version, seconds, str(p.refused), error_kind(p.refused))
        for p in pending
        if p.refused is not None
        for key in p.intents
    ]


def _fated(
    doc: RegistryDoc,
    fates: Callable[[int], Sequence[IntentFate]],
    *,
    seconds: float,
    keep: int,
) -> RegistryDoc:
    """The next root of ``doc`` changing no dataset, recording the ``fates`` made for its
    version (rule 7)."""
    version = doc.version + 1
    return replace(
        doc,
        version=version,
        updated_at=iso(seconds),
        fates=sealed_fates(doc, fates(version), watermark=doc.watermark, keep=keep),
    )


def result(
    p: Pending,
    version: int,
    *,
    attempts: int,
    redrives: int,
    retries: int,
    size: int,
    already: bool,
) -> CommitResult:
    return CommitResult(
        version=version,
        commit_id=p.change.commit_id,
        attempts=attempts,
        redrives=redrives,
        retries=retries,
        already_committed=already,
        batch_size=size,
    )
