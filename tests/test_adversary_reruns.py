"""Adversarial tests of re-running a distributed job (README, "Write" and "Engines": a
``commit_id`` makes a job safe to re-run; :mod:`lakelock.dask`: "Re-running a driver that
failed after its commit with the same ``commit_id`` commits nothing twice"). The re-run
splits the same rows otherwise (another ``npartitions``), as a re-run on a resized cluster
does. Each ``Lake`` stands for one driver process; Dask runs its tasks on threads. The first
run's commit is held in flight (its root PUT stalled at the endpoint) while the re-run
commits: the re-run's rows are then told from the first run's by the commit's digest alone
(docs/FORMAT.md, "Commit ids")."""

from __future__ import annotations

import concurrent.futures
import math
from collections.abc import Callable
from typing import Any

import dask
import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
import pytest

import lakelock.dask
from lakelock import CommitResult, Lake
from lakelock._registry._builder import CommitBuilder
from lakelock.errors import CommitIdReusedError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until

ROOT = "metastore/dataset_registry.json"
#: What ``events`` holds before the job runs (id 100).
BEFORE = pa.table({"id": [100], "day": [1]})


def frame(npartitions: int, rows: pd.DataFrame | None = None) -> Any:
    if rows is None:
        rows = pd.DataFrame({"id": range(12), "day": [1 + i % 3 for i in range(12)]})
    return dd.from_pandas(rows, npartitions=npartitions, sort=False)


def driver(client: Any, bucket: str) -> Lake:
    return Lake(bucket, s3=client, retry=FAST_RETRY)


def rerun_beside_first_in_flight(
    s3: S3Endpoint,
    client: Any,
    bucket: str,
    first: Callable[[Lake], CommitResult],
    rerun: Callable[[Lake], CommitResult],
    *,
    before: pa.Table = BEFORE,
) -> tuple[CommitResult, CommitResult | CommitIdReusedError]:
    """``events`` holds ``before``; ``first`` commits on one driver until its swap of the
    root is held at the endpoint (its files and intent are out); ``rerun`` runs to its end
    on another driver; then the first is let go. Their results (the re-run's refusal, if
    refused)."""
    driver(client, bucket).append("events", before, partition_by=["day"])
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        landing = pool.submit(first, driver(client, bucket))
        wait_until(lambda: s3.stalled() == 1)
        again: CommitResult | CommitIdReusedError
        try:
            again = rerun(driver(client, bucket))
        except CommitIdReusedError as refused:
            again = refused
        finally:
            s3.release_stalls()
        return landing.result(timeout=60), again


def dask_append(npartitions: int, rows: pd.DataFrame | None = None) -> Callable[[Lake], Any]:
    return lambda lake: lakelock.dask.append(
        lake, "events", frame(npartitions, rows), partition_by=["day"], commit_id="load-7"
    )


def ids(client: Any, bucket: str) -> list[int]:
    return sorted(driver(client, bucket).read("events")["id"].to_pylist())


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
    landed, rerun = rerun_beside_first_in_flight(s3, client, bucket, dask_append(3), dask_append(2))
    assert not isinstance(rerun, CommitIdReusedError), rerun
    assert ids(client, bucket) == sorted([100, *range(12)])
    assert rerun.version >= landed.version or rerun.already_committed


def test_a_rerun_split_otherwise_is_a_retry_whatever_statistics_its_files_lack(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """The same in-flight re-run, split otherwise, of rows whose files' statistics have
    gaps that depend on the split: a column of Python objects (Dask told not to convert
    them to strings) all null in the first Dask partition only, whose file's column has
    then no type and parquet no statistics; a string over 4 KiB (parquet keeps no bounds
    for a row group it bounds); an infinity (no float bound). The re-run is a retry and the
    rows land once. What a user loses: the digest summed and bounded only the files that
    had statistics, which differ with the split, and the re-run was refused as other rows."""
    n = 12
    rows = pd.DataFrame(
        {
            "id": range(n),
            "day": [1 + i % 3 for i in range(n)],
            "note": pd.Series([None] * 4 + ["x"] * (n - 4), dtype=object),
            "name": ["z" * 5000 if i == 4 else "{" if i == 7 else chr(97 + i) for i in range(n)],
            "score": [math.inf if i == 2 else float(i) for i in range(n)],
        }
    )
    with dask.config.set({"dataframe.convert-string": False}):
        before = pa.Table.from_pandas(rows.iloc[5:6], preserve_index=False)
        before = before.set_column(0, "id", pa.array([100])).replace_schema_metadata(None)
        landed, rerun = rerun_beside_first_in_flight(
            s3, client, bucket, dask_append(3, rows), dask_append(2, rows), before=before
        )
    assert not isinstance(rerun, CommitIdReusedError), rerun
    assert ids(client, bucket) == sorted([100, *range(n)])
    assert rerun.version >= landed.version or rerun.already_committed


@pytest.mark.parametrize(
    ("other", "what"),
    [
        ([*range(11)], "a row fewer in one partition"),
        ([*range(11), 14], "another greatest id in one partition, the same counts"),
    ],
)
def test_a_rerun_with_other_rows_while_the_first_run_commit_is_in_flight_is_refused(
    s3: S3Endpoint, client: Any, bucket: str, other: list[int], what: str
) -> None:
    """The in-flight first run under ``load-7`` appends ids 0-11; a re-run under ``load-7``
    brings other rows, split otherwise: a row fewer in one partition, or the same counts
    with another greatest id in one. It is ``CommitIdReusedError`` naming the
    first run's commit, and only the first run's rows land. What a user would lose: told
    ``already_committed``, the re-run's rows would silently never be committed."""
    changed = pd.DataFrame({"id": other, "day": [1 + i % 3 for i in other]})
    landed, rerun = rerun_beside_first_in_flight(
        s3, client, bucket, dask_append(3), dask_append(2, changed)
    )
    assert isinstance(rerun, CommitIdReusedError), what
    assert "other content" in str(rerun)
    assert rerun.version == landed.version
    assert ids(client, bucket) == sorted([100, *range(12)])


def test_a_rerun_of_a_commit_in_flight_from_an_earlier_version_is_a_retry(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """The first run is made as lakelock before this digest made it: a ``lakelock.dask``
    commit bound to its files' sorted checksums (``"sha256:"``). A re-run by this version,
    split otherwise, binds the summary (``"commit:sha256:"``), a digest not comparable with
    the first: it is a retry (same dataset and operation), never refused, and the rows land
    once. What a user upgrading mid-incident would lose: the re-run refused, or, with a new
    id, every row committed twice."""

    def earlier(lake: Lake) -> CommitResult:
        def written() -> tuple[list[Any], pa.Schema]:
            return lakelock.dask.write(lake, "events", frame(3), partition_by=["day"])

        files, schema = written()
        commit = CommitBuilder(
            lake.registry, "events", "append", commit_id="load-7", partition_by=("day",)
        )
        commit.declare(schema=schema)
        commit.add(files)
        commit.bind({"partition_by": ("day",)}, files=files)  # the earlier versions' binding
        assert commit.change.digest is not None
        assert commit.change.digest.startswith("sha256:")
        return commit.commit()

    landed, rerun = rerun_beside_first_in_flight(s3, client, bucket, earlier, dask_append(2))
    assert not isinstance(rerun, CommitIdReusedError), rerun
    assert ids(client, bucket) == sorted([100, *range(12)])
    assert rerun.version >= landed.version or rerun.already_committed
