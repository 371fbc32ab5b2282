"""The hierarchical path lock, in process: :class:`PathLock` (threads) and
:class:`AsyncPathLock` (asyncio), over one pure core.

Two requests conflict iff a path of one lies in the lineage (ancestor, itself, descendant) of
a path of the other and at least one of the two writes it; the lock makes exactly the
conflicting requests wait for each other. ``_core`` holds the rule, the five lock modes
(IS, IX, S, SIX, X), the plans and the grant logic, with the invariants and their proofs in
its docstring; ``_sync`` and ``_async`` are thin shells; ``_striped`` is the bounded-memory
option.
"""

from __future__ import annotations

from lakelock._pathlock._async import AsyncPathLock
from lakelock._pathlock._core import (
    LockRequest,
    Mode,
    compatible,
    in_lineage,
    lock_plan,
    normalize_path,
    requests_conflict,
)
from lakelock._pathlock._sync import PathLock

__all__ = [
    "AsyncPathLock",
    "LockRequest",
    "Mode",
    "PathLock",
    "compatible",
    "in_lineage",
    "lock_plan",
    "normalize_path",
    "requests_conflict",
]
