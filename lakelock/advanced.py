"""What lakelock hands out that a pipeline seldom names: the commit protocol's objects, the
types behind a few attributes, and the option dictionaries' types.

``lakelock`` itself exports what writing, reading, time travel, locks, leases, views and the
bucket policy need. The names here are for diagnostics, tooling and tuning:

- **The commit protocol** (docs/FORMAT.md; its words: docs/ARCHITECTURE.md's glossary):
  :class:`Change` (one dataset's part of a commit, as ``Registry.commit_changes`` takes it),
  :class:`CommitRecord` (a commit the root remembers: ``RegistrySnapshot.commits``),
  :class:`IntentFate` (what a fold decided about an intent),
  :class:`LogEntry` (a commit in ``Registry.log``: applied, or refused or cancelled, why),
  :class:`RegistryInternals` (``registry.internals``: the root this process last saw, the
  intents' fates, the process's learnt :class:`Hints`), and
  :class:`MigrationResult` (``Registry.migrate``).
- **Tuning**: :class:`FoldPolicy`, the scheduling knobs of commits across processes, given
  as ``Lake(fold_policy=FoldPolicy(linger=0))`` (no requests after a commit returned). The
  defaults need no tuning; why each is what it is: docs/decisions/.
- **Behind attributes**: :class:`PartitionState` (``DatasetState.partitions``),
  :class:`FileStats` and :class:`ColumnStats` (``DataFile.stats``), :class:`AutoMirror`
  (``Lake.auto_mirror``), :class:`DistributedPathLock` (``Lake.locks``), the in-process
  locks' guards :class:`PathLockGuard` and :class:`AsyncPathLockGuard`, and
  :class:`LockRequest` (what a path lock was asked: ``LockTimeout.target``).
- **Options** (``TypedDict``, to type a dictionary passed as ``**options``):
  :class:`WriteOptions`, :class:`ScanOptions`, :class:`MoveOptions`, :class:`LockOptions`,
  :class:`LeaseOptions`.
"""

from __future__ import annotations

from lakelock._lake import MoveOptions, ScanOptions
from lakelock._lease import LeaseOptions
from lakelock._mirror._auto import AutoMirror
from lakelock._operations import WriteOptions
from lakelock._pathlock import (
    AsyncPathLockGuard,
    DistributedPathLock,
    LockOptions,
    LockRequest,
    PathLockGuard,
)
from lakelock._registry import (
    Change,
    CommitRecord,
    IntentFate,
    LogEntry,
    MigrationResult,
    PartitionState,
)
from lakelock._registry._core import FoldPolicy, Hints
from lakelock._registry._shell import RegistryInternals
from lakelock._stats import ColumnStats, FileStats

__all__ = [
    "AsyncPathLockGuard",
    "AutoMirror",
    "Change",
    "ColumnStats",
    "CommitRecord",
    "DistributedPathLock",
    "FileStats",
    "FoldPolicy",
    "Hints",
    "IntentFate",
    "LeaseOptions",
    "LockOptions",
    "LockRequest",
    "LogEntry",
    "MigrationResult",
    "MoveOptions",
    "PartitionState",
    "PathLockGuard",
    "RegistryInternals",
    "ScanOptions",
    "WriteOptions",
]
