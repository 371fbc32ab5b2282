"""A deliberately small commit protocol with the commit core's interface, for testing the
simulator itself: the simulator's semantics, faults and checker are tested against a
protocol simple enough to be obviously right (and, with ``check_ids=False``, obviously wrong).

Its root (at the registry's key, ``{"toy": 1, ...}``) holds every dataset's files, the ids
of every commit applied, and which commits made the current version. A commit reads the
root, applies its changes (or finds its id recorded: already applied) and compare-and-swaps;
a 412, 409 or 503 redrives after a jittered backoff, a lost answer re-reads and settles by the
commit id. No intents, no folding: one commit per swap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any

import orjson

from lakelock._registry._batch import CommitResult
from lakelock._registry._changes import Change
from lakelock._registry._core._requests import Get, Now, Put, Sleep, Steps
from lakelock._registry._document import REGISTRY_KEY
from lakelock.errors import (
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
    ConflictError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    StorageError,
    ThrottledError,
)

__all__ = ["ToyCommitter", "ToyPending", "toy_root"]


@dataclass
class ToyPending:
    changes: tuple[Change, ...]
    result: CommitResult | None = None
    error: CommitError | None = None

    @property
    def commit_id(self) -> str:
        return self.changes[0].commit_id


@dataclass
class ToyCommitter:
    """``check_ids=False`` is the broken variant: it never looks for its commit id, so a
    lost answer to its swap makes it apply the commit a second time."""

    rng: Random
    max_attempts: int = 50
    max_seconds: float = 300.0
    check_ids: bool = True
    options: dict[str, Any] = field(default_factory=dict)

    def prepare(
        self, changes: Sequence[Change], *, now: float, monotonic: float | None = None
    ) -> ToyPending:
        return ToyPending(tuple(changes))

    def run(self, pendings: Sequence[ToyPending]) -> Steps:
        for pending in pendings:
            yield from self._commit(pending)

    def _commit(self, pending: ToyPending) -> Steps:
        started: float = yield Now()
        unknown = False
        for attempt in range(1, self.max_attempts + 1):
            try:
                data = yield Get(REGISTRY_KEY)
                doc, etag = orjson.loads(data.body), data.etag
            except NotFoundError:
                doc, etag = toy_root(), None
            if self.check_ids and pending.commit_id in doc["ids"]:
                pending.result = CommitResult(
                    doc["ids"][pending.commit_id],
                    pending.commit_id,
                    attempts=attempt,
                    already_committed=True,
                )
                return
            try:
                new = _applied(doc, pending.changes)
            except CommitConflictError as error:
                pending.error = error
                return
            body = orjson.dumps(new)
            try:
                if etag is None:
                    yield Put(REGISTRY_KEY, body, create=True, retried=False)
                else:
                    yield Put(REGISTRY_KEY, body, if_match=etag, retried=False)
            except OutcomeUnknownError:
                unknown = True
                continue
            except (PreconditionFailedError, ConflictError, ThrottledError, NotFoundError):
                yield Sleep(self.rng.uniform(0.0, min(1.0, 0.02 * 2**attempt)))
                now: float = yield Now()
                if now - started > self.max_seconds:
                    break
                continue
            except StorageError:
                unknown = True
                continue
            pending.result = CommitResult(new["version"], pending.commit_id, attempts=attempt)
            return
        error_type = CommitStateUnknownError if unknown else CommitConflictError
        pending.error = error_type(
            f"gave up after {self.max_attempts} attempts", commit_id=pending.commit_id
        )


def toy_root() -> dict[str, Any]:
    return {"toy": 1, "version": 0, "datasets": {}, "ids": {}, "made": []}


def _applied(doc: dict[str, Any], changes: tuple[Change, ...]) -> dict[str, Any]:
    version = doc["version"] + 1
    datasets = {name: dict(files) for name, files in doc["datasets"].items()}
    for change in changes:
        if change.restore is not None:
            raise CommitConflictError("the toy protocol cannot restore", dataset=change.dataset)
        files = datasets.setdefault(change.dataset, {})
        for key in change.remove:
            if key not in files:
                raise CommitConflictError(
                    f"{key!r} is not registered",
                    dataset=change.dataset,
                    commit_id=change.commit_id,
                )
            del files[key]
        for path in change.remove_partitions:
            for key, partition in list(files.items()):
                if not path or partition == path or partition.startswith(path + "/"):
                    del files[key]
        for f in change.add:
            files[f.key] = f.partition_path
    ids = dict(doc["ids"])
    ids[changes[0].commit_id] = version
    made = [[c.dataset, c.commit_id] for c in changes]
    return {"toy": 1, "version": version, "datasets": datasets, "ids": ids, "made": made}
