"""Fencing checks: a commit's fence against the fences the registry has recorded.

A pure transform of the root document, run by :func:`~lakelock._registry._changes.apply_change`
first, before anything else of a change is checked:

- exclusive (a lease): ``fence.token`` below the highest token recorded for ``fence.name`` →
  :class:`~lakelock.errors.StaleFenceError`; otherwise the highest token is raised to it;
- hierarchical (a path-lock grant, whose fence carries the ``read``/``write`` paths it holds):
  compatible holders of one lock table hold different tokens at the same time, so "lower than
  the highest" would refuse legitimate commits. Instead a commit is stale if an earlier commit
  was made under a *conflicting* grant with a higher token (that grant could only have been
  given after ours was gone); each commit's grant is recorded for that check.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from lakelock._fence import Fence
from lakelock._pathlock._core import LockRequest, requests_conflict
from lakelock._registry._document import LockFenceRecord, RegistryDoc
from lakelock.errors import StaleFenceError

__all__ = ["record_fence"]


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
    return (*[r for r in records if r.token != fence.token], mine)
