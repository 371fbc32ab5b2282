"""lakelock.dask on a real distributed.LocalCluster (worker processes) against the embedded
endpoint: workers write, the driver commits once, a worker killed mid-write duplicates
nothing."""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import dask.dataframe as dd
import orjson
import pandas as pd
import pyarrow as pa
import pytest
from distributed import Client, LocalCluster

import lakelock.dask
from lakelock import Lake
from lakelock.errors import (
    AccessDeniedError,
    CommitConflictError,
    DatasetNotFoundError,
    InvalidNameError,
    MissingExtraError,
    StorageError,
)
from lakelock.testing import S3Endpoint
from tests._support import wait_until
from tests._support.tables import committed_ids


@pytest.fixture(scope="module")
def cluster() -> Iterator[Client]:
    """Two single-threaded worker processes, restarted by their nannies if killed."""
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as local,
        Client(local) as client,
    ):
        yield client


@pytest.fixture
def lake_prefix() -> str:
    """The ``lake`` fixture lives under a prefix of the test bucket."""
    return "lake"


def events(partitions: int = 4, days: int = 3, per_day: int = 5) -> dd.DataFrame:
    """``partitions`` Dask partitions, each with rows of every day; ids unique."""
    rows = partitions * days * per_day
    frame = pd.DataFrame(
        {
            "id": range(rows),
            "day": [1 + (i // per_day) % days for i in range(rows)],
            "name": [f"event-{i}" for i in range(rows)],
        }
    )
    return dd.from_pandas(frame, npartitions=partitions, sort=False)


def test_append_writes_on_workers_and_commits_once(cluster: Client, lake: Lake) -> None:
    """Every row once, one registry version for the whole frame, one file per (Dask
    partition, day), and the files were written by the worker processes."""
    before = lake.registry.read().version
    result = lakelock.dask.append(lake, "events", events(), partition_by=["day"], commit_id="c1")
    assert result.version == before + 1
    assert committed_ids(lake) == list(range(60))
    files = lake.registry.files("events")
    assert len(files) == 4 * 3
    table = lake.read("events")
    assert table.schema.field("day").type == pa.int64()
    assert lake.read("events", partitions=[{"day": 2}]).num_rows == 20
    again = lakelock.dask.append(lake, "events", events(), partition_by=["day"], commit_id="c1")
    assert again.already_committed
    assert len(lake.registry.files("events")) == 12


def test_worker_killed_mid_write_duplicates_nothing(
    cluster: Client, s3: S3Endpoint, lake: Lake
) -> None:
    """A worker killed between two of its uploads: its task re-runs elsewhere, the one commit
    names only the files of the final results (each row once); the dead attempt's files,
    including the upload that lands after the commit, are orphans for vacuum."""
    s3.inject("stall", operation="PutObject", prefix="lake/datasets/events/day=2/", count=1)
    with ThreadPoolExecutor(1) as pool:
        job = pool.submit(
            lakelock.dask.append, lake, "events", events(), partition_by=["day"], commit_id="c2"
        )
        wait_until(lambda: s3.stalled() == 1)
        # The other worker finishes everything else; then the one task left is the stalled
        # one, on the worker to kill (it wrote its day=1 file and is uploading day=2).
        wait_until(lambda: sum(len(t) for t in cluster.processing().values()) == 1)
        (stuck,) = [w for w, tasks in cluster.processing().items() if tasks]
        pid = cluster.run(os.getpid, workers=[stuck])[stuck]
        os.kill(pid, signal.SIGKILL)
        result = job.result(timeout=100)
    s3.release_stalls()  # the dead worker's upload now completes, after the commit
    assert not result.already_committed
    assert committed_ids(lake) == list(range(60))
    committed = {f.key for f in lake.registry.files("events")}
    assert len(committed) == 12
    stored = {
        o["Key"].removeprefix("lake/")
        for o in lake.client.list_objects_v2(Bucket=lake.bucket, Prefix="lake/datasets/")[
            "Contents"
        ]
    }
    strays = stored - committed
    assert any("/day=1/" in key for key in strays), "the killed attempt wrote nothing first"
    lake.configure(vacuum_floor=0)
    orphans = {
        o.key for o in lake.vacuum(enforce_retention=False, older_than=0, dry_run=True).orphans
    }
    assert strays <= orphans


def test_bad_partition_columns_fail_before_any_task(cluster: Client, lake: Lake) -> None:
    """A partition column the frame does not have is refused on the driver: nothing is
    written, nothing committed."""
    with pytest.raises(InvalidNameError):
        lakelock.dask.append(lake, "events", events(), partition_by=["month"])
    with pytest.raises(TypeError):
        lakelock.dask.append(lake, "events", events().compute(), partition_by=["day"])
    assert list(lake.store.list("datasets/")) == []
    with pytest.raises(DatasetNotFoundError):
        lake.read("events")


def test_worker_errors_arrive_typed(cluster: Client, s3: S3Endpoint, lake: Lake) -> None:
    """A storage error on a worker reaches the driver as the same typed error (lakelock's
    errors pickle with their fields), and nothing is committed."""
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{lake.bucket}/lake/datasets/*",
            }
        ],
    }
    s3.client(access_key="admin").put_bucket_policy(
        Bucket=lake.bucket, Policy=orjson.dumps(policy).decode()
    )
    with pytest.raises(AccessDeniedError) as denied:
        lakelock.dask.append(lake, "events", events(partitions=2), partition_by=["day"])
    assert denied.value.bucket == lake.bucket
    assert denied.value.key is not None
    assert "events" not in lake.registry.read().datasets


def test_errors_pickle_with_their_fields() -> None:
    """lakelock errors survive pickling (how they cross worker processes) as themselves."""
    for error in (
        StorageError("m", bucket="b", key="k", status=500),
        InvalidNameError("v", "r"),
        CommitConflictError("c", dataset="d", attempts=3),
        MissingExtraError("dask", package="dask"),
    ):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error)
        assert (str(back), back.__dict__) == (str(error), error.__dict__)


def test_missing_dask_names_its_extra(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Dask installed, lakelock.dask says which extra to install."""
    frame = events(partitions=1)
    monkeypatch.setitem(sys.modules, "dask", None)
    with pytest.raises(MissingExtraError) as missing:
        lakelock.dask.append(lake, "events", frame)
    assert missing.value.extra == "dask"
