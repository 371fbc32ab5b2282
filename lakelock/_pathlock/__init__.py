"""The hierarchical path lock: in process (:class:`PathLock` for threads,
:class:`AsyncPathLock` for asyncio) and across machines (:class:`DistributedPathLock`, one
lock table per dataset on S3), over one rule.

Two requests conflict iff a path of one lies in the lineage (ancestor, itself, descendant) of
a path of the other and at least one of the two writes it; the lock makes exactly the
conflicting requests wait for each other. ``_core`` holds the rule, the five lock modes
(IS, IX, S, SIX, X), the plans and the grant logic, with the invariants and their proofs in
its docstring; ``_sync`` and ``_async`` are thin shells; ``_striped`` is the bounded-memory
option. ``_table`` is the pure core of the lock tables (grant, renew, release, the document)
and ``_distributed`` the S3 shell around it.
"""

from __future__ import annotations

from lakelock._pathlock._async import AsyncPathLock, AsyncPathLockGuard
from lakelock._pathlock._core import (
    LockRequest,
    Mode,
    compatible,
    in_lineage,
    lock_plan,
    normalize_path,
    requests_conflict,
)
from lakelock._pathlock._distributed import (
    DistributedPathLock,
    LockOptions,
    PathLockHandle,
    read_lock_tables,
)
from lakelock._pathlock._sync import PathLock, PathLockGuard

__all__ = [
    "AsyncPathLock",
    "AsyncPathLockGuard",
    "DistributedPathLock",
    "LockOptions",
    "LockRequest",
    "Mode",
    "PathLock",
    "PathLockGuard",
    "PathLockHandle",
    "compatible",
    "in_lineage",
    "lock_plan",
    "normalize_path",
    "read_lock_tables",
    "requests_conflict",
]
