"""Fencing checks: a commit's fence against the fences the registry has recorded.

A pure transform of the root document, run by :func:`~lakelock._registry._changes.apply_change`
first, before anything else of a change is checked:

- exclusive (a lease): ``fence.token`` below the highest token recorded for ``fence.name`` →
  :class:`~lakelock.errors.StaleFenceError`; otherwise the highest token is raised to it.
  Every takeover of a lease raises it before its holder gets the token, by a commit of
  operation ``takeover`` (:data:`TAKEOVER`) that names no dataset and carries the new fence:
  a holder paused past the takeover is refused even before the new holder commits;
- hierarchical (a path-lock grant, whose fence carries the ``read``/``write`` paths it holds):
  compatible holders of one lock table hold different tokens at the same time, so "lower than
  the highest" would refuse legitimate commits. Instead a commit is stale if an earlier commit
  was made under a *conflicting* grant with a higher token (that grant could only have been
  given after ours was gone); each commit's grant is recorded for that check. A grant whose
  write lock in force ended (below) is stale too, whatever its token. Every record is kept
  for good (:func:`lock_fences_kept`): a holder paused for any length of time is still
  refused.

A grant's read paths fence no write (:func:`unfenced_writes`): a change carrying a read grant's
fence that writes (an append), or a grant's fence that writes a path it only reads, is refused
before anything is committed, since compatible readers hold one path at once and a write under
any of their fences would land as if it were exclusive.

Write locks in force (FORMAT.md): a grant with write paths registers itself before its holder
acts, by a commit of operation ``lock`` (:data:`LOCK`) carrying its fence: its
record is then ``held``, and every conflicting record of a lower token is no longer held (the
lock table granted it only once those were gone) and ``ended``. :func:`check_write_locks`
refuses a commit whose written paths conflict with a held record, unless it carries that very
grant's fence: :class:`~lakelock.errors.LockedError`. An ``unlock`` commit (:data:`UNLOCK`)
clears a record and marks it ``ended`` (recording the grant if it had no record yet): the
holder's own at release, or anyone's once the lock table shows that grant gone (released, or
provably expired). A grant that ended never holds again, so clearing it is always safe: every
later commit or ``lock`` carrying its fence is refused (:class:`~lakelock.errors.StaleFenceError`
with ``current`` equal to its own token), or a holder that paused past its grant and comes
back would overwrite what others committed once the lock was cleared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from lakelock._fence import Fence
from lakelock._pathlock._core import LockRequest, covers, in_lineage, requests_conflict
from lakelock._registry._document import LockFenceRecord, RegistryDoc
from lakelock.errors import LockedError, StaleFenceError

__all__ = [
    "FENCE_ONLY",
    "LOCK",
    "TAKEOVER",
    "UNLOCK",
    "check_write_locks",
    "compact_lock_fences",
    "held_write_locks",
    "lock_fences_kept",
    "record_fence",
    "superseded",
    "unfenced_writes",
]

#: The operations of the commits that register a write lock in force and clear it.
LOCK = "lock"
UNLOCK = "unlock"
#: The operation of the commit that records a lease's takeover (FORMAT.md, "Lease
#: takeovers"): it names no dataset and carries only the new holder's fence.
TAKEOVER = "takeover"
#: The operations whose commits carry a fence and change no dataset: no files to hold to
#: the vacuum floor, no view to mirror.
FENCE_ONLY = (LOCK, UNLOCK, TAKEOVER)


def record_fence(
    doc: RegistryDoc,
    fence: Fence | None,
    *,
    at: float,
    dataset: str,
    commit_id: str,
    operation: str = "",
) -> RegistryDoc:
    """``doc`` with ``fence`` checked and recorded (module docstring; unchanged without a
    fence); ``dataset`` and ``commit_id`` name the commit that carries it, for the error;
    ``operation`` :data:`LOCK` or :data:`UNLOCK` registers or clears a write lock in force."""
    if fence is None:
        return doc
    if fence.hierarchical:
        lock_fences = dict(doc.lock_fences)
        records = lock_fences.get(fence.name, ())
        if operation == UNLOCK:
            lock_fences[fence.name] = _end(records, fence, at=at)
        else:
            records = _check_lock_fence(records, fence, at=at, dataset=dataset, commit_id=commit_id)
            if operation == LOCK:
                records = _hold(records, fence)
            lock_fences[fence.name] = records
        return replace(doc, lock_fences=MappingProxyType(lock_fences))
    stale = superseded(doc, fence, dataset=dataset, commit_id=commit_id)
    if stale is not None:
        raise stale
    current = doc.fences.get(fence.name)
    fences = {**doc.fences, fence.name: max(fence.token, current or fence.token)}
    return replace(doc, fences=MappingProxyType(fences))


def superseded(
    doc: RegistryDoc, fence: Fence, *, dataset: str, commit_id: str
) -> StaleFenceError | None:
    """The refusal of a lease's ``fence`` whose token is below the highest ``doc`` records
    of its lease (another acquirer holds it); ``None`` if it is still current."""
    current = doc.fences.get(fence.name)
    if current is None or fence.token >= current:
        return None
    return StaleFenceError(
        f"fencing token {fence.token} for {fence.name!r} is stale: {current} has been seen",
        name=fence.name,
        token=fence.token,
        current=current,
        dataset=dataset,
        commit_id=commit_id,
    )


def _check_lock_fence(
    records: tuple[LockFenceRecord, ...],
    fence: Fence,
    *,
    at: float,
    dataset: str,
    commit_id: str,
) -> tuple[LockFenceRecord, ...]:
    """Refuse a commit whose grant ended or a recorded conflicting grant superseded; record
    ours."""
    if any(r.ended for r in records if r.token == fence.token):
        raise StaleFenceError(
            f"lock grant {fence.token} on {fence.name!r} has ended: its write lock was "
            "cleared (released, or expired and cleared by another process), and a grant that "
            "ended never holds again; take the lock again",
            name=fence.name,
            token=fence.token,
            current=fence.token,
            dataset=dataset,
            commit_id=commit_id,
        )
    ours = LockRequest(read=fence.read, write=fence.write)
    for record in records:
        if record.token > fence.token and requests_conflict(
            LockRequest(read=record.read, write=record.write), ours
        ):
            raise StaleFenceError(
                f"lock grant {fence.token} on {fence.name!r} was superseded by grant "
                f"{record.token}, which committed to a conflicting path",
                name=fence.name,
                token=fence.token,
                current=record.token,
                dataset=dataset,
                commit_id=commit_id,
            )
    held = any(r.held for r in records if r.token == fence.token)
    mine = LockFenceRecord(
        fence.token, tuple(sorted(fence.read)), tuple(sorted(fence.write)), at, held=held
    )
    return compact_lock_fences((*[r for r in records if r.token != fence.token], mine))


def compact_lock_fences(records: Iterable[LockFenceRecord]) -> tuple[LockFenceRecord, ...]:
    """``records`` with those not held as one record per path and mode, the highest token
    of each: a grant is refused when *some* path of it conflicts with a path of a recorded
    grant with a higher token (:func:`~lakelock._pathlock._core.requests_conflict` is a pair
    of paths in one lineage, one of them written), so the highest token that wrote (or
    read) a path refuses every grant any lower record on that path would, and nothing else.
    A read of a path is dropped where a write of it has as high a token (a write conflicts
    with whatever a read does). Held records (write locks in force) stay as they are; so do
    ended ones (cleared, which refuse their own token) until a record of a higher token
    conflicts with them: that one refuses their token too, and every grant they refuse is
    refused by their paths' records, so they are compacted like the others. The records
    thus grow with the paths ever locked, not with the grants nor the commits."""
    records = tuple(records)
    kept: list[LockFenceRecord] = []
    best: dict[tuple[str, bool], LockFenceRecord] = {}
    for record in records:
        if record.held or (record.ended and not _superseded(record, records)):
            kept.append(record)
            continue
        modes = [*((p, False) for p in record.read), *((p, True) for p in record.write)]
        for path, writes in modes:
            known = best.get((path, writes))
            if known is None or known.token < record.token:
                best.pop((path, writes), None)
                best[path, writes] = LockFenceRecord(
                    record.token,
                    () if writes else (path,),
                    (path,) if writes else (),
                    record.at,
                )
    return (
        *kept,
        *(
            record
            for (path, writes), record in best.items()
            if writes or (path, True) not in best or best[path, True].token < record.token
        ),
    )


def _superseded(record: LockFenceRecord, records: tuple[LockFenceRecord, ...]) -> bool:
    """Whether a record of a higher token conflicts with ``record``: a commit under its
    grant's fence is then refused by that record (:func:`_check_lock_fence`), ended or not."""
    ours = LockRequest(read=record.read, write=record.write)
    return any(
        other.token > record.token
        and requests_conflict(LockRequest(read=other.read, write=other.write), ours)
        for other in records
    )


def lock_fences_kept(
    lock_fences: Mapping[str, tuple[LockFenceRecord, ...]], *, before: float
) -> Mapping[str, tuple[LockFenceRecord, ...]]:
    """The path-lock grant records a new root keeps (FORMAT.md, "Path-lock grant records"):
    every one, whatever its age. ``before`` (the retention's start) is no reason to forget
    one: a holder paused past it whose grant a recorded one superseded would then commit
    over the newer holder's data. (They are compact already: :func:`compact_lock_fences`.)"""
    return lock_fences


def _end(
    records: tuple[LockFenceRecord, ...], fence: Fence, *, at: float
) -> tuple[LockFenceRecord, ...]:
    """The grant of ``fence`` cleared and ended, at ``at`` (so its record outlives the
    retention counted from its end); recorded if it had no record (a ``lock`` commit of it
    still to land, through its intent, is then refused)."""
    mine = next((r for r in records if r.token == fence.token), None)
    if mine is None:
        mine = LockFenceRecord(
            fence.token, tuple(sorted(fence.read)), tuple(sorted(fence.write)), at
        )
    ended = replace(mine, at=max(mine.at, at), held=False, ended=True)
    return (*[r for r in records if r.token != fence.token], ended)


def _hold(records: tuple[LockFenceRecord, ...], fence: Fence) -> tuple[LockFenceRecord, ...]:
    """Our record held; conflicting records of lower tokens ended (the table granted ours)."""
    ours = LockRequest(read=fence.read, write=fence.write)
    return tuple(
        replace(r, held=True)
        if r.token == fence.token
        else replace(r, held=False, ended=True)
        if r.held
        and r.token < fence.token
        and requests_conflict(LockRequest(read=r.read, write=r.write), ours)
        else r
        for r in records
    )


def held_write_locks(
    lock_fences: Mapping[str, tuple[LockFenceRecord, ...]],
    dataset: str,
    paths: tuple[str, ...],
    fence: Fence | None,
) -> tuple[LockFenceRecord, ...]:
    """The held write locks of ``dataset`` (in a root's ``lock_fences``) whose write paths
    conflict with ``paths`` (the paths a commit writes) and that ``fence`` is not (module
    docstring)."""
    name = f"lock:{dataset}"
    if not paths or name not in lock_fences:
        return ()
    written = LockRequest(write=paths)
    return tuple(
        r
        for r in lock_fences[name]
        if r.held
        and r.write
        and not (
            fence is not None
            and fence.hierarchical
            and fence.name == name
            and fence.token == r.token
        )
        and requests_conflict(LockRequest(write=r.write), written)
    )


def check_write_locks(
    doc: RegistryDoc,
    dataset: str,
    paths: tuple[str, ...],
    fence: Fence | None,
    *,
    commit_id: str,
) -> None:
    """Refuse (:class:`~lakelock.errors.LockedError`) a commit of ``dataset`` writing
    ``paths`` that a held write lock other than its own ``fence`` covers (FORMAT.md, "Write
    locks in force")."""
    blocking = held_write_locks(doc.lock_fences, dataset, paths, fence)
    if blocking:
        first = blocking[0]
        raise LockedError(
            f"dataset {dataset!r}: {list(paths)} lie under the write lock of grant "
            f"{first.token} on {list(first.write)}, held by another process (commit under "
            "its fence, or wait for its release)",
            holder=f"grant {first.token}",
            paths=tuple(sorted(first.write)),
            token=first.token,
            dataset=dataset,
            commit_id=commit_id,
        )


def unfenced_writes(paths: tuple[str, ...], fence: Fence | None) -> tuple[str, ...]:
    """The ``paths`` a commit writes (:func:`~lakelock._registry._changes.written_paths`)
    that its path-lock ``fence`` holds only for reading: every one, if the grant writes
    nothing (a read grant), else those in the lineage of a path it reads that none of its
    write paths is, or is an ancestor of. Compatible readers hold a path at the same time,
    so a read fences no write. Empty for a lease's fence and for no fence."""
    if fence is None or not fence.hierarchical:
        return ()
    return tuple(
        p
        for p in paths
        if not any(covers(w, p) for w in fence.write)
        and (not fence.write or any(in_lineage(r, p) for r in fence.read))
    )
