"""What one batch carries through its attempts, and how an attempt that does not land ends:
a redrive (the root moved), a retry (a transient answer), or a wait (another process is
expected to fold ours)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lakelock._registry._batch import Pending
from lakelock.errors import ConflictError, OutcomeUnknownError, ReadTimeoutError, ThrottledError

__all__ = ["TRANSIENT", "Batch", "Redrive", "Retry", "Wait"]

#: Answers that say "try again": the request may succeed next time (a read that timed out
#: too: the commit's own budget bounds its tries).
TRANSIENT = (ConflictError, ThrottledError, OutcomeUnknownError, ReadTimeoutError)


class Redrive(Exception):
    """412: somebody committed since our read."""


class Retry(Exception):
    """409/503/an unknown outcome: try again after backoff."""


class Wait(Retry):
    """Another process is expected to fold ours: look again after a poll."""


@dataclass
class Batch:
    """One batch's attempts: its pending commits and what its attempts counted (how long it
    waited for others is the scheduler's: :class:`._schedule.Waits`)."""

    pending: list[Pending]
    size: int
    attempts: int = 0
    #: Of those, the looks at a root that stood still while the batch waited on within its
    #: patience: no attempt of the budget (:attr:`spent`).
    looks: int = 0
    redrives: int = 0
    retries: int = 0
    #: The versions a swap of ours whose answer was lost may have made: a commit its id
    #: records at one of them, in a record naming no intent, may be ours
    #: (:func:`._decide.made_here`).
    maybe_made: set[int] = field(default_factory=set)
    #: The version the last swap with an unknown outcome was based on, while unresolved.
    unknown_base: int | None = None
    started: float = 0.0
    #: Our monotonic clock when the attempt read its clock: the moment its estimates of
    #: the server's clock are for (:attr:`~._committer.Committer.server_offset`).
    elapsed: float = 0.0
    #: Why a cancelled batch failed, when it was not a budget running out.
    failure: BaseException | None = None

    @property
    def spent(self) -> int:
        """The attempts the batch's budget counts: every attempt but a look at a root that
        stood still while it waited on. A stall of the root (a swap held 2-4 s by a write in
        flight at S3) would otherwise spend every waiter's budget alike, at one look a
        round, and all of them would then fold every pending intent at once the moment the
        root moved (docs/decisions/0044-a-stall-spends-no-attempts.md)."""
        return self.attempts - self.looks
