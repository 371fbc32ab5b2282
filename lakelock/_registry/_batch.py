"""What one commit of the loop carries (docs/ARCHITECTURE.md, "The registry"): a caller's
pending commit, the state of the batch being attempted, what a fold found, the outcomes an
attempt turns into, and the result a caller gets."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from lakelock._names import validate_dataset_name
from lakelock._registry._changes import (
    Applied,
    Change,
)
from lakelock._registry._document import IntentFate
from lakelock.errors import (
    CommitConflictError,
    CommitStateUnknownError,
)

__all__ = [
    "BatchState",
    "CommitResult",
    "Fold",
    "Pending",
    "Redrive",
    "Retry",
    "Wait",
    "fates_of",
    "for_commit",
    "iso",
    "seconds_of",
    "validate_change",
]


@dataclass(frozen=True)
class CommitResult:
    """What a commit did. ``version`` is the registry version that holds it; ``attempts``
    counts CAS attempts of its batch (``redrives`` after 412, ``retries`` after 409/503/unknown
    outcomes); ``already_committed`` is true when the commit id was found already recorded
    (nothing changed); ``batch_size`` is how many commits shared the CAS; ``empty`` is true
    when there was nothing to commit (no registry version was made, ``version`` is the one
    read)."""

    version: int
    commit_id: str
    attempts: int = 1
    redrives: int = 0
    retries: int = 0
    already_committed: bool = False
    batch_size: int = 1
    empty: bool = False


@dataclass
class Fold:
    """Other processes' intents found for one attempt: those to apply, fates decided without
    applying (expired, unreadable, applied already), and the keys listed."""

    pending: list[Pending] = field(default_factory=list)
    fates: list[IntentFate] = field(default_factory=list)
    # The keys listed, oldest first (empty: this attempt did not list, or found nothing).
    listed: tuple[str, ...] = ()
    # Seconds spent pausing for intents being sent (the gather), not folding.
    paused: float = 0.0


class Redrive(Exception):
    """412: somebody committed since our read."""


class Retry(Exception):
    """409/503/unknown outcome: try again after backoff."""


class Wait(Retry):
    """An older pending intent's writer is expected to fold ours: look again after backoff."""


@dataclass
class Pending:
    """One ``commit()`` call: its changes (one per dataset, all-or-nothing, one commit id)."""

    changes: tuple[Change, ...]
    # The caller chose the commit id: it may be a re-run of a commit older than the root's
    # window, so the datasets' commit-id indexes are checked once.
    check_index: bool = False
    # Delta manifests not created yet (the first attempt that gets to the PUTs creates them).
    unwritten: list[tuple[str, bytes]] = field(default_factory=list)
    # The commit's intent key (a one-dataset commit: other processes may fold it in), and
    # whether this is another process's intent being folded in (nobody waits for it here).
    intent: str | None = None
    foreign: bool = False
    # The intent's PUT was sent (it may exist even if the answer never came).
    intent_sent: bool = False
    # Why this attempt could not apply it: its caller hears so once the swap that records
    # the intent's fate "rejected" lands (an attempt that redrives validates it again).
    rejected: CommitConflictError | None = None
    done: threading.Event = field(default_factory=threading.Event)
    result: CommitResult | None = None
    error: BaseException | None = None

    @property
    def change(self) -> Change:
        """The first change: its commit id and dataset name the commit in errors."""
        return self.changes[0]

    def succeed(self, result: CommitResult) -> None:
        self.result = result
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


@dataclass
class BatchState:
    pending: list[Pending]
    size: int
    attempts: int = 0
    redrives: int = 0
    retries: int = 0
    # Version the first root PUT was based on: a recorded commit newer than it is ours.
    first_base: int | None = None
    # Version the last ambiguous attempt was based on, while its outcome is unresolved.
    unknown_base: int | None = None
    # Rounds spent waiting, with no progress at the root, for an older intent's writer to
    # fold ours (see _foreign_intents), and the root version that wait started from; and
    # rounds spent waiting in all, the root moving or not (a shorter look counts its part).
    waits: int = 0
    wait_version: int | None = None
    waited: float = 0.0
    # When (the registry's clock) it started waiting for another process, and when it last
    # read the root while waiting: a swap that settles it landed between that look and the
    # next (see CommitLoop._look).
    wait_started: float | None = None
    looked_at: float | None = None
    # The root version a waiting committer last saw move (see Folding._stagger), how long it
    # has slept since it saw it, and how long that root must stand still before it lists
    # itself; and the length of its next wait if that is not the usual one.
    watched_version: int | None = None
    still: float = 0.0
    still_needed: float = 0.0
    stagger: float | None = None


def fates_of(
    applied: list[tuple[Change, Applied]], pending: list[Pending], version: int, seconds: float
) -> list[IntentFate]:
    """The fate of every intent a batch attempted: applied at ``version`` or rejected (with
    the reason its commit failed)."""
    ids = {change.commit_id for change, _ in applied}
    fates = []
    for p in pending:
        if p.intent is None:
            continue
        if p.rejected is not None:
            fates.append(IntentFate(p.intent, "rejected", version, seconds, str(p.rejected)))
        elif p.change.commit_id in ids:
            fates.append(IntentFate(p.intent, "applied", version, seconds))
    return fates


def validate_change(change: Change) -> Change:
    """The change with its dataset name in canonical (NFC) form, or a typed error."""
    change = replace(change, dataset=validate_dataset_name(change.dataset))
    keys = [f.key for f in change.add]
    if len(set(keys)) != len(keys):
        raise CommitConflictError(
            "the same file is added twice in one commit",
            dataset=change.dataset,
            commit_id=change.commit_id,
        )
    if set(keys) & set(change.remove):
        raise CommitConflictError(
            "a file is both added and removed in one commit",
            dataset=change.dataset,
            commit_id=change.commit_id,
        )
    return change


def for_commit(error: BaseException, change: Change, state: BatchState) -> BaseException:
    """The error a waiter gets when its batch failed: a storage error after an attempt whose
    outcome is unknown makes the commit's state unknown too; anything else is raised as is
    (nothing was committed)."""
    if state.unknown_base is None or isinstance(error, CommitStateUnknownError):
        return error
    wrapped = CommitStateUnknownError(
        f"commit outcome unknown, and resolving it failed: {error}",
        dataset=change.dataset,
        commit_id=change.commit_id,
    )
    wrapped.__cause__ = error
    return wrapped


def seconds_of(iso: str) -> float:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
