"""Fencing checks: a commit's fence against the fences the registry has recorded.

A pure transform of the root document, run by :func:`~lakelock._registry._changes.apply_change`
first, before anything else of a change is checked:

- exclusive (a lease): ``fence.token`` below the highest token recorded for ``fence.name`` →
  :class:`~lakelock.errors.StaleFenceError`; otherwise the highest token is raised to it;
- hierarchical (a path-lock grant, whose fence carries the ``read``/``write`` paths it holds):
  compatible holders of one lock table hold different tokens at the same time, so "lower than
  the highest" would refuse legitimate commits. Instead a commit is stale if an earlier commit
  was made under a *conflicting* grant with a higher token (that grant could only have been
  given after ours was gone); each commit's grant is recorded for that check, for good
  (:func:`lock_fences_kept`): a holder paused for any length of time is still refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from lakelock._fence import Fence
from lakelock._pathlock._core import LockRequest, requests_conflict
from lakelock._registry._document import LockFenceRecord, RegistryDoc
from lakelock.errors import StaleFenceError

__all__ = ["compact_lock_fences", "lock_fences_kept", "record_fence"]


def record_fence(
    doc: RegistryDoc, fence: Fence | None, *, at: float, dataset: str, commit_id: str
) -> RegistryDoc:
    """``doc`` with ``fence`` checked and recorded (module docstring; unchanged without a
    fence); ``dataset`` and ``commit_id`` name the commit that carries it, for the error."""
    if fence is None:
        return doc
    if fence.hierarchical:
        lock_fences = dict(doc.lock_fences)
        lock_fences[fence.name] = _check_lock_fence(
            lock_fences.get(fence.name, ()), fence, at=at, dataset=dataset, commit_id=commit_id
        )
        return replace(doc, lock_fences=MappingProxyType(lock_fences))
    current = doc.fences.get(fence.name)
    if current is not None and fence.token < current:
        raise StaleFenceError(
            f"fencing token {fence.token} for {fence.name!r} is stale: {current} has been seen",
            name=fence.name,
            token=fence.token,
            current=current,
            dataset=dataset,
            commit_id=commit_id,
        )
    fences = {**doc.fences, fence.name: max(fence.token, current or fence.token)}
    return replace(doc, fences=MappingProxyType(fences))


def _check_lock_fence(
    records: tuple[LockFenceRecord, ...],
    fence: Fence,
    *,
    at: float,
    dataset: str,
    commit_id: str,
) -> tuple[LockFenceRecord, ...]:
    """Refuse a commit whose grant a recorded conflicting grant superseded; record ours."""
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
    mine = LockFenceRecord(fence.token, tuple(sorted(fence.read)), tuple(sorted(fence.write)), at)
    return compact_lock_fences((*records, mine))


def compact_lock_fences(records: Iterable[LockFenceRecord]) -> tuple[LockFenceRecord, ...]:
    """``records`` as one record per path and mode, the highest token of each: a grant is
    refused when *some* path of it conflicts with a path of a recorded grant with a higher
    token (:func:`~lakelock._pathlock._core.requests_conflict` is a pair of paths in one
    lineage, one of them written), so the highest token that wrote (or read) a path refuses
    every grant any lower record on that path would, and nothing else. A read of a path is
    dropped where a write of it has as high a token (a write conflicts with whatever a read
    does). The records thus grow with the paths ever locked, not with the commits."""
    best: dict[tuple[str, bool], LockFenceRecord] = {}
    for record in records:
        modes = [*((p, False) for p in record.read), *((p, True) for p in record.write)]
        for path, writes in modes:
            kept = best.get((path, writes))
            if kept is None or kept.token < record.token:
                best.pop((path, writes), None)
                best[path, writes] = LockFenceRecord(
                    record.token,
                    () if writes else (path,),
                    (path,) if writes else (),
                    record.at,
                )
    return tuple(
        record
        for (path, writes), record in best.items()
        if writes or (path, True) not in best or best[path, True].token < record.token
    )


def lock_fences_kept(
    lock_fences: Mapping[str, tuple[LockFenceRecord, ...]], *, before: float
) -> Mapping[str, tuple[LockFenceRecord, ...]]:
    """The path-lock grant records a new root keeps (FORMAT.md, "Fencing"): every one,
    whatever its age. ``before`` (the retention's start) is no reason to forget one: a
    holder paused past it whose grant a recorded one superseded would then commit over
    the newer holder's data. (The records are compact already: :func:`compact_lock_fences`.)"""
    return lock_fences
