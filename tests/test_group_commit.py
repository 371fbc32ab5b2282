"""Group commit within a process (``_registry/_group.GroupCommit`` on ``CommitQueue``'s
threads): the turn a batch holds is given back however the batch ends."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lakelock._registry import Registry
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
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
