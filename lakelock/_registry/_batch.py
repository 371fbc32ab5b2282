"""What one commit carries through the commit core (:mod:`._core`): a caller's pending
commit and the result it gets, checks of a change before anything is written, and the
registry's time format."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from lakelock._names import validate_dataset_name
from lakelock._registry._changes import Change, is_takeover
from lakelock.errors import (
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
)

__all__ = [
    "CommitResult",
    "Pending",
    "for_commit",
    "iso",
    "may_have_landed",
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
class Pending:
    """One ``commit()`` call: its changes (one per dataset, all-or-nothing, one commit id)."""

    changes: tuple[Change, ...]
    # The datasets' commit-id indexes are still to be checked: set where the caller chose
    # the commit id (``not Change.generated_id``), which may be a re-run of a commit older
    # than the root's window; cleared once an attempt has settled, and set again once the
    # root's window no longer covers every version since (``indexed``: the root version
    # they were last checked at).
    check_index: bool = False
    indexed: int | None = None
    # Delta manifests not created yet (the first attempt that gets to the PUTs creates them).
    unwritten: list[tuple[str, bytes]] = field(default_factory=list)
    # The commit's intent keys, oldest first (one per dataset: other processes may fold them
    # in, all together), and whether they are another process's, being folded in (nobody
    # waits for them here). None: a restore of a format-1 lake, applied by its own process.
    intents: tuple[str, ...] = ()
    foreign: bool = False
    # The intent's PUT was sent (it may exist even if the answer never came).
    intent_sent: bool = False
    # Our monotonic clock when its intents were made: how old they are by a clock no step
    # of the wall clock moves (rule 4b). None: not known (nothing is judged by it).
    made_at: float | None = None
    # Why this attempt could not apply it: its caller hears so once the swap that records
    # the intent's fate "rejected" lands (an attempt that redrives validates it again).
    rejected: CommitError | None = None
    # This writer refused it itself once its intent was written (its id recorded for
    # another change), until a swap records that: a later root may no longer show why.
    refused: CommitError | None = None
    # The same change as another commit of this attempt's batch, under the same id: applied
    # once, by that one, and this caller hears ``already_committed``.
    twin: bool = False
    result: CommitResult | None = None
    error: BaseException | None = None
    #: Whether it has its result or error (:attr:`done` as a flag).
    finished: bool = field(default=False, init=False)
    _done: threading.Event | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def intent(self) -> str | None:
        """The commit's first intent key (where it sorts among intents), if it has one."""
        return self.intents[0] if self.intents else None

    @property
    def change(self) -> Change:
        """The first change: its commit id and dataset name the commit in errors."""
        return self.changes[0]

    @property
    def done(self) -> threading.Event:
        """Set once the commit has its result or error. Made on first use: a process folds
        thousands of other processes' intents that nobody waits for, and an ``Event`` (with
        its condition and lock) for each was a few per cent of a simulated run."""
        with _DONE:
            if self._done is None:
                self._done = threading.Event()
                if self.finished:
                    self._done.set()
            return self._done

    def succeed(self, result: CommitResult) -> None:
        self.result = result
        self._finish()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._finish()

    def _finish(self) -> None:
        with _DONE:
            self.finished = True
            if self._done is not None:
                self._done.set()


#: Guards :attr:`Pending.done`'s creation against a commit finishing meanwhile.
_DONE = threading.Lock()


def validate_change(change: Change) -> Change:
    """The change with its dataset name in canonical (NFC) form, or a typed error (a lease
    takeover's record names none)."""
    if is_takeover(change):
        return change
    name = validate_dataset_name(change.dataset)
    if name != change.dataset:
        change = replace(change, dataset=name)
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


def for_commit(error: BaseException, change: Change, unknown_base: int | None) -> BaseException:
    """The error a waiter gets when its batch failed: a storage error after an attempt whose
    outcome is unknown makes the commit's state unknown too; anything else is raised as is
    (nothing was committed)."""
    if unknown_base is None or isinstance(error, CommitStateUnknownError):
        return error
    wrapped = CommitStateUnknownError(
        f"commit outcome unknown, and resolving it failed: {error}",
        dataset=change.dataset,
        commit_id=change.commit_id,
    )
    wrapped.__cause__ = error
    return wrapped


def may_have_landed(error: BaseException, change: Change) -> CommitStateUnknownError:
    """What a caller hears when ``error`` ended its commit after its intent was sent (or a
    swap's answer was lost) and before anything decided it: another process may still
    apply that intent, so the outcome is unknown (``error`` its cause)."""
    cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    unknown = CommitStateUnknownError(
        f"commit outcome unknown: {cause} stopped it once its intent was sent, before "
        "anything decided it: another process may still apply it "
        f"(look its commit id {change.commit_id!r} up)",
        dataset=change.dataset,
        commit_id=change.commit_id,
    )
    unknown.__cause__ = error
    return unknown


def seconds_of(iso: str) -> float:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
