"""Adversarial tests of group commit across processes (docs/FORMAT.md, "Scheduling", and
rules 1-2): a folder that stops in the middle of its swap, with others' commits waiting on
it. Each ``Registry`` stands for one process, each on its own thread."""

from __future__ import annotations

import concurrent.futures

from lakelock._s3 import ObjectStore
from lakelock.testing import S3Endpoint
from tests._support import registry, wait_until
from tests._support.files import datafile

ROOT = "metastore/dataset_registry.json"


def test_writers_behind_a_folder_stopped_mid_swap_commit_and_its_commit_lands_once(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A process's swap is held at the endpoint (a folder stopped: paused, or its PUT stuck)
    after its intent is out; four other processes commit to the same dataset meanwhile,
    their intents newer than its. They must not wait on it for ever: one of them takes over
    and folds (its intent too), and each hears its commit landed. Let go, the stopped
    process's swap fails (the root moved) and it hears its commit landed too, applied
    exactly once by the fold that took over."""
    registry(store).commit("sales", add=[datafile("sales", "", "first")])
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        stopped = pool.submit(registry(store).commit, "sales", add=[datafile("sales", "", "f")])
        wait_until(lambda: s3.stalled() == 1)
        waiters = [
            pool.submit(registry(store).commit, "sales", add=[datafile("sales", "", f"w{n}")])
            for n in range(4)
        ]
        landed = [w.result(timeout=60) for w in waiters]
        assert s3.stalled() == 1  # the stopped swap is still held: others took over
        s3.release_stalls()
        theirs = stopped.result(timeout=60)
    names = sorted(f.name for f in registry(store).files("sales"))
    assert names == sorted(["first", "f", "w0", "w1", "w2", "w3"])
    assert theirs.version <= max(r.version for r in landed)
