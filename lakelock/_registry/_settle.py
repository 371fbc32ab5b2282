"""Settling: what the root already decided about a batch's commits, before an attempt
builds on it. An intent's recorded fate (applied at version V, or refused and why), a commit id
in the root's window, or one in a dataset's commit-id index past it: each ends its caller's
wait (success, or the reason it failed) without applying anything again. A batch whose last
swap had an unknown outcome is settled here too: found (success), proven absent (a plain
redrive), or past every record (CommitStateUnknownError, format 1 only)."""

from __future__ import annotations

from lakelock._registry._batch import BatchState, CommitResult, Pending
from lakelock._registry._changes import reused_commit_id
from lakelock._registry._document import RegistryDoc
from lakelock._registry._objects import Objects
from lakelock.errors import CommitConflictError, CommitIdReusedError, CommitStateUnknownError

__all__ = ["Settling"]


class Settling:
    """The settling half of the commit loop, mixed into :class:`Registry` (which sets these
    attributes)."""

    objects: Objects
    commit_window: int

    def _settle_known(self, doc: RegistryDoc, state: BatchState) -> None:
        """Commits whose ids the registry already records are done: either re-runs (the
        caller's id was committed before) or ours, landed by an attempt whose answer was lost."""
        for p in state.pending:
            fate = doc.fate(p.intent) if p.intent is not None else None
            if fate is not None and fate.state == "applied":
                p.succeed(self._result(p, fate.version, state, already=False))
                continue
            if fate is not None:
                p.fail(
                    CommitConflictError(
                        f"the commit's intent was {fate.state}: {fate.reason}",
                        dataset=p.change.dataset,
                        commit_id=p.change.commit_id,
                    )
                )
                continue
            record = doc.commit(p.change.commit_id)
            reused = reused_commit_id(record, p.change) if record is not None else None
            if reused is not None:
                p.fail(reused)
            elif record is not None:
                ours = state.first_base is not None and record.version > state.first_base
                p.succeed(self._result(p, record.version, state, already=not ours))
            elif p.check_index and doc.format_version > 1:
                p.check_index = False
                found = self._indexed_version(doc, p)
                if isinstance(found, CommitIdReusedError):
                    p.fail(found)
                elif found is not None:
                    p.succeed(self._result(p, found, state, already=True))
            elif (
                p.intent is not None
                and p.intent_sent
                and p.intent <= doc.watermark
                and doc.format_version > 1
            ):
                # A fold listed past our intent and the root no longer says what became of
                # it: another process may have applied it long enough ago that its fate and
                # commit record left the root's windows. The dataset's commit-id index keeps
                # every applied commit id. (Not found: passed over by that fold, still ours.)
                found = self._indexed_version(doc, p)
                if isinstance(found, CommitIdReusedError):
                    p.fail(found)
                elif found is not None:
                    p.succeed(self._result(p, found, state, already=False))
        state.pending = [p for p in state.pending if not p.done.is_set()]
        if state.unknown_base is not None and state.pending:
            oldest = doc.commits[0].version if doc.commits else doc.version + 1
            if oldest > state.unknown_base + 1 and doc.version > state.unknown_base:
                # Past the root's window: each dataset's commit-id index is durable.
                self._settle_from_index(doc, state)
            if not state.pending:
                return
            if (
                doc.format_version == 1
                and oldest > state.unknown_base + 1
                and (doc.version > state.unknown_base)
            ):
                for p in state.pending:
                    p.fail(
                        CommitStateUnknownError(
                            "commit outcome unknown: more commits than the idempotency window "
                            f"({self.commit_window}) happened since",
                            dataset=p.change.dataset,
                            commit_id=p.change.commit_id,
                        )
                    )
                state.pending = []
            else:
                state.unknown_base = None  # proven absent: a plain redrive from here

    def _settle_from_index(self, doc: RegistryDoc, state: BatchState) -> None:
        if doc.format_version == 1:
            return
        for p in state.pending:
            found = self._indexed_version(doc, p)
            if isinstance(found, CommitIdReusedError):
                p.fail(found)
            elif found is not None:
                ours = state.first_base is not None and found > state.first_base
                p.succeed(self._result(p, found, state, already=not ours))
        state.pending = [p for p in state.pending if not p.done.is_set()]

    def _indexed_version(self, doc: RegistryDoc, p: Pending) -> int | CommitIdReusedError | None:
        for change in p.changes:
            dataset = doc.datasets.get(change.dataset)
            if dataset is not None:
                entry = self.objects.commit_entry(dataset, change.commit_id)
                if entry is not None:
                    return reused_commit_id(entry, change) or int(entry["version"])
        return None

    def _result(
        self, p: Pending, version: int, state: BatchState, *, already: bool
    ) -> CommitResult:
        return CommitResult(
            version=version,
            commit_id=p.change.commit_id,
            attempts=state.attempts,
            redrives=state.redrives,
            retries=state.retries,
            already_committed=already,
            batch_size=state.size,
        )
