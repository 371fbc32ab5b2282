"""Adversarial tests of a lake that does not linger (README, "Sizing a lake": "Sending nothing
once a commit returned: ``Lake(fold_policy=lakelock.advanced.FoldPolicy(linger=0))``"; the
``Lake`` docstring: ``FoldPolicy(linger=0)``: no requests after a commit returned). A pipeline
picks it to keep a process from talking to S3 once its work is done (a short-lived task, a
request budget). Requests are counted at the endpoint; the commit's swap is held there while
the test arranges what comes after it, nothing sleeps to make time pass."""

from __future__ import annotations

import concurrent.futures
import time

import pyarrow as pa

from lakelock import Lake
from lakelock._layout import INTENT_PREFIX, REGISTRY_KEY
from lakelock._registry._changes import Change
from lakelock._registry._core import FoldPolicy
from lakelock.testing import S3Endpoint
from tests._support import plant_intent, wait_until
from tests._support.files import datafile


def test_a_lake_that_does_not_linger_leaves_nothing_in_flight_once_its_commit_returned(
    s3: S3Endpoint, bucket: str
) -> None:
    """A commit that folds another process's intent (one that died before its swap)
    returns. A lake with ``linger=0`` then has no request in flight: any listing of the
    intents from the swap on is held at the endpoint, and closing the lake (which answers
    what it sent) ends without one reaching it."""
    Lake(bucket, s3=s3.client()).append("sales", pa.table({"id": [1]}))  # another process
    lake = Lake(bucket, s3=s3.client(), fold_policy=FoldPolicy(linger=0))
    stale = int(time.time() * 1000) - 5000
    plant_intent(lake.store, Change("sales", "died-1", add=(datafile("sales", "", "b"),)), ms=stale)
    s3.inject("stall", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        commit = pool.submit(lake.append, "sales", pa.table({"id": [2]}))
        wait_until(lambda: s3.stalled() == 1)  # its swap, its fold (died-1's) done
        s3.inject("stall", operation="ListObjectsV2", prefix=INTENT_PREFIX, count=1)
        s3.release_stalls()
        assert commit.result(timeout=60).version == 2
        closed = pool.submit(lake.close)
        wait_until(lambda: closed.done() or s3.stalled() == 1)
        held = s3.stalled()
        s3.release_stalls()
        closed.result(timeout=60)
    assert held == 0
