"""The registry's log, pure: which commits the root records, which it refused or cancelled,
and which are still pending (:meth:`~lakelock._registry.Registry.log`,
:meth:`~lakelock._registry.Registry.pending_intents`; ``lakelock registry log|show`` prints them).

A registry version is one compare-and-swap of the root: it may apply several commits (group
commit) or none, recording only why a commit was refused (a stale fence, a conflict) or that
its writer gave up. The root keeps the most recent commits (its window) and the fates of
recent intents, so the log reaches as far back as that window; a dataset's whole history is
:meth:`~lakelock._registry.Registry.history`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from lakelock._registry._batch import seconds_of
from lakelock._registry._document import RegistryDoc
from lakelock.errors import InvalidArgumentError

__all__ = ["LogEntry", "check_limit", "log", "undecided"]


@dataclass(frozen=True)
class LogEntry:
    """One commit in the registry's log: the registry ``version`` that decided it, the
    server time ``at`` (seconds since the epoch) and its ``fate``. An ``applied`` commit has
    its ``commit_id``, ``operation`` (``"commit"`` for a plain registry commit), the
    ``datasets`` it changed (none: a lease's takeover) and its file counts. A ``rejected`` or
    ``cancelled`` one used up its version to record why (``reason``); the root keeps only
    its ``intent``'s key of it, so its id and operation are ``None``."""

    version: int
    at: float
    fate: Literal["applied", "rejected", "cancelled"]
    commit_id: str | None
    operation: str | None
    datasets: tuple[str, ...]
    added: int = 0
    removed: int = 0
    #: The key of the intent that carried it (``None``: made by no intent, or recorded
    #: before roots named it).
    intent: str | None = None
    reason: str = ""
    #: What an applied commit committed (``CommitRecord.digest``: a re-run under its id is
    #: the same change when its digest is this one); ``None`` if unknown or not applied.
    digest: str | None = None


def check_limit(limit: int | None) -> None:
    """A ``limit`` of entries is a count: a negative one (or no int) is refused before any
    request, as a negative slice bound would silently drop entries from the end instead."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise InvalidArgumentError(
            limit, "a limit is a count of entries: an int, 0 or more", what="limit"
        )


def log(doc: RegistryDoc, *, limit: int | None = None) -> list[LogEntry]:
    """The commits ``doc`` records, newest first: those of its window, and the commits
    refused or cancelled since the oldest of them (all that it keeps if its window is empty);
    at most ``limit``. A commit applied and one refused by the same swap share its version:
    the applied one comes first."""
    check_limit(limit)
    applied = [
        LogEntry(
            c.version,
            seconds_of(c.at),
            "applied",
            c.id,
            c.operation or "commit",
            c.datasets,
            c.added,
            c.removed,
            intent=c.intent,
            digest=c.digest,
        )
        for c in reversed(doc.commits)
    ]
    oldest = min((e.version for e in applied), default=0)
    refused = [
        LogEntry(
            f.version,
            f.at,
            "cancelled" if f.state == "cancelled" else "rejected",
            None,
            None,
            (),
            intent=f.key,
            reason=f.reason,
        )
        for f in reversed(doc.fates)
        if f.state != "applied" and f.version >= oldest
    ]
    entries = sorted([*applied, *refused], key=lambda e: e.version, reverse=True)
    return entries[:limit]


def undecided(doc: RegistryDoc, listed: Iterable[str]) -> list[str]:
    """The intents of ``listed`` (keys listed above ``doc``'s watermark, in key order: oldest
    first) that ``doc`` has no fate for: commits written that no swap has applied or refused
    yet, which the next fold may apply."""
    decided = {f.key for f in doc.fates}
    return [key for key in listed if key not in decided]
