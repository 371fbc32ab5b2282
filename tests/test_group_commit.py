"""Group commit within a process (``_registry/_group.GroupCommit`` on ``CommitQueue``'s
threads): the turn a batch holds is given back however the batch ends."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from lakelock._registry import Registry
from lakelock._registry._batch import Pending
from lakelock._registry._changes import Change
from lakelock._registry._core._requests import Parallel, Put
from lakelock._registry._group import Turn, TurnSteps
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.advanced import FoldPolicy
from lakelock.errors import CommitStateUnknownError
from lakelock.testing import S3Endpoint
from tests._support.files import datafile

ROOT = "metastore/dataset_registry.json"


def test_a_commit_interrupted_mid_batch_leaves_its_registry_able_to_commit(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Ctrl-C during a commit (a ``KeyboardInterrupt`` out of its backoff, which the driver
    does not hand to the core) gives the process's turn back at once: the registry's next
    commit runs, though the interrupted one's traceback is still held (as a notebook holds
    the last one), instead of waiting forever for a batch that will never end."""
    interrupts = [1]

    def sleep(_: float) -> None:
        if interrupts:  # the first backoff only
            interrupts.pop()
            raise KeyboardInterrupt

    registry = Registry(store, retry=RetryPolicy(max_attempts=10, sleep=sleep))
    registry.commit("sales", add=[datafile("sales", "", "a")])
    s3.inject("conflict", operation="PutObject", prefix=ROOT, count=1)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        registry.commit("sales", add=[datafile("sales", "", "b")])
    results: list[Any] = []
    thread = threading.Thread(
        target=lambda: results.append(registry.commit("sales", add=[datafile("sales", "", "c")])),
        daemon=True,
    )
    thread.start()
    thread.join(timeout=60)
    assert interrupted.traceback  # still held
    assert len(results) == 1, "the next commit waited for the interrupted batch's turn"
    assert "c" in [f.name for f in registry.files("sales")]


def _early_intent_sent(registry_: Registry, pending: Pending) -> TurnSteps[bool]:
    """``pending`` committed while another batch holds the turn (it sends its intent early),
    driven by the registry's driver until that intent's PUT has been answered: the intent is
    at the endpoint, and the steps wait for their next request's answer."""
    queue = registry_._commits
    with queue.group.lock:
        queue.group.committing = True  # another caller's batch is in flight
    steps = queue.group.commit(pending)
    answer: Any = None
    while True:
        request = steps.send(answer)
        assert not isinstance(request, Turn)  # sending early waits for no turn
        answer = queue.driver.perform(request)
        puts = request.requests if isinstance(request, Parallel) else (request,)
        if any(isinstance(p, Put) and p.key in pending.intents for p in puts):
            return steps


@pytest.mark.parametrize("ending", ["bug", "interrupt", "closed"])
def test_an_early_send_that_ends_otherwise_leaves_its_intent_to_folds(
    s3: S3Endpoint, store: ObjectStore, ending: str
) -> None:
    """A commit that arrives while a batch holds the turn creates its intent at once; the
    intent is then "being sent", which every fold of this process skips and which keeps
    ``has_queued`` true. Ended there by something other than a failed PUT (a bug's
    exception, an interrupt, its steps closed), the intent stayed "being sent" for ever:
    this process never folded it, and the caller of a bug heard a plain error though the
    intent exists and may be applied. Now the caller hears ``CommitStateUnknownError`` (an
    interrupt stays an interrupt, noted), nothing is left queued or being sent, and the
    process's next commit folds that intent in."""
    reg = Registry(
        store,
        retry=RetryPolicy(max_attempts=10, sleep=lambda _: None),
        policy=FoldPolicy(fold_interval=0.0),  # every fold lists the pending intents
    )
    reg.commit("sales", add=[datafile("sales", "", "a")])
    change = Change("sales", "early-1", add=(datafile("sales", "", "b"),))
    pending = reg._committer.prepare([change], now=time.time(), monotonic=reg.retry.clock())
    steps = _early_intent_sent(reg, pending)
    group = reg._commits.group
    if ending == "bug":
        with pytest.raises(CommitStateUnknownError, match="early-1") as unknown:
            steps.throw(RuntimeError("a bug"))
        assert isinstance(unknown.value.__cause__, RuntimeError)
    elif ending == "interrupt":
        with pytest.raises(KeyboardInterrupt) as interrupted:
            steps.throw(KeyboardInterrupt)
        assert "may still apply it" in "".join(getattr(interrupted.value, "__notes__", []))
    else:
        steps.close()
    assert (group.sending, group.queue, group.has_queued()) == (set(), [], False)
    assert not set(pending.intents) & group.own_intents()
    group._release()  # the other caller's batch ends
    reg.commit("sales", add=[datafile("sales", "", "c")])
    assert {"a", "b", "c"} <= {f.name for f in reg.files("sales")}
