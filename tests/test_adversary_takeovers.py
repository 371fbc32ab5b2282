"""Adversarial tests of a lease takeover's record (docs/FORMAT.md, "Lease takeovers": a
takeover that finds a higher token recorded is refused as stale, whether or not it was
recorded before: the lease is another acquirer's either way). A takeover's commit is paused
at its swap while another process folds its intent, a later acquisition is recorded and the
root's windows move past its record; the registry is driven as ``Lake.lease`` drives it
(``record_takeover``). Nothing sleeps."""

from __future__ import annotations

import concurrent.futures
import time

import pyarrow as pa

from lakelock import Lake
from lakelock._fence import Fence
from lakelock._registry import Registry
from lakelock._retry import RetryPolicy
from lakelock.errors import StaleFenceError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, no_sleep, wait_until


def test_a_takeover_giving_up_after_a_later_acquisition_is_told_it_is_stale(
    s3: S3Endpoint, lake: Lake
) -> None:
    """Token 1's takeover writes its intent and sends its swap, which the endpoint holds
    (its process paused). Meanwhile another process's append folds that intent (token 1 is
    recorded), token 2's takeover is recorded, and a few commits move the root's windows
    past token 1's record and fate. Let go, the paused swap loses its race, and its commit
    has no attempt left: it gives up. It must hear what FORMAT promises a takeover that finds
    a higher token: ``StaleFenceError`` (current 2), the lease being another's. What a user
    would have lost: told ``RetryBudgetExhaustedError``, its intent "recorded cancelled, so
    nobody will apply it" (a definite failure: rule 13 says such a commit never lands), an
    operator reads that token 1 was never recorded, while the registry recorded it at a
    version where commits under token 1 were taken."""
    other = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    other.append("sales", pa.table({"id": [0]}))
    other.configure(commit_window=1)
    paused = Lake(lake.bucket, s3=lake.client, retry=RetryPolicy(max_attempts=1, sleep=no_sleep))
    paused.registry.read()
    s3.inject("stall", operation="PutObject", prefix="metastore/dataset_registry", count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        taking = pool.submit(paused.registry.internals.record_takeover, Fence("lease:nightly", 1))
        wait_until(lambda: s3.stalled() == 1)
        # A process that has not swapped lately lists the intents pending, token 1's too.
        folder = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
        folder.append("sales", pa.table({"id": [1]}))
        assert other.registry.read().fences["lease:nightly"] == 1
        other.registry.internals.record_takeover(Fence("lease:nightly", 2))
        # Commits by a process a minute on (its clock ahead: the pause goes on), whose folds
        # move the watermark past token 1's intent, so its fate leaves the root.
        later = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
        later.registry = Registry(lake.store, retry=FAST_RETRY, clock=lambda: time.time() + 60)
        for n in range(2, 5):
            later.append("sales", pa.table({"id": [n]}))
        s3.release_stalls()
        error = taking.exception(timeout=60)
    assert isinstance(error, StaleFenceError), repr(error)
    assert (error.token, error.current) == (1, 2)
