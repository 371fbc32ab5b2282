"""Adversarial tests of re-running a distributed job (README, "Write" and "Engines": a
``commit_id`` makes a job safe to re-run; :mod:`lakelock.dask`: "Re-running a driver that
failed after its commit with the same ``commit_id`` commits nothing twice"). The re-run
splits the same rows otherwise (another ``npartitions``), as a re-run on a resized cluster
does. Each ``Lake`` stands for one driver process; Dask runs its tasks on threads."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
import pytest

import lakelock.dask
from lakelock import Lake
from lakelock.errors import CommitIdReusedError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until

ROOT = "metastore/dataset_registry.json"


def frame(npartitions: int) -> Any:
    rows = pd.DataFrame({"id": range(12), "day": [1 + i % 3 for i in range(12)]})
    return dd.from_pandas(rows, npartitions=npartitions, sort=False)


def driver(client: Any, bucket: str) -> Lake:
    return Lake(bucket, s3=client, retry=FAST_RETRY)


@pytest.mark.xfail(
    strict=True,
    raises=CommitIdReusedError,
    reason="a distributed commit's digest is over its files' checksums, so the same rows "
    "split otherwise are 'other content' when the first run is not yet recorded",
)
def test_a_rerun_split_otherwise_while_the_first_run_commit_is_in_flight_lands_rows_once(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """A driver's ``lakelock.dask.append`` under ``load-7`` has its files written and its
    intent out; its swap is held at the endpoint (the driver stopped: the orchestrator
    thinks it died). The job is re-run under ``load-7`` with the same rows split into
    another number of partitions. The re-run must land the rows once and hear that they
    are committed (``already_committed``, or its own commit), never an error saying the id
    was reused for other rows: the rows are the same. Let go, the first driver's commit
    must not add them a second time. What a user loses: the re-run is told
    ``CommitIdReusedError`` ("use a new commit id for a new change"); following that advice
    (a new id) commits every row a second time."""
    driver(client, bucket).append(
        "events", pa.table({"id": [100], "day": [1]}), partition_by=["day"]
    )
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(
            lakelock.dask.append,
            driver(client, bucket),
            "events",
            frame(3),
            partition_by=["day"],
            commit_id="load-7",
        )
        wait_until(lambda: s3.stalled() == 1)
        try:
            rerun = lakelock.dask.append(
                driver(client, bucket),
                "events",
                frame(2),
                partition_by=["day"],
                commit_id="load-7",
            )
        finally:
            s3.release_stalls()
        landed = first.result(timeout=60)
    ids = sorted(driver(client, bucket).read("events")["id"].to_pylist())
    assert ids == sorted([100, *range(12)])
    assert rerun.version >= landed.version or rerun.already_committed
