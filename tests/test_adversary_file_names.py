"""Adversarial tests of caller-given data file names (``Lake.append(..., file_name=...)``:
"a caller-given name makes the upload idempotent", lakelock._datasets): the re-run of a job
whose first run wrote its file under that name but did not commit it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import AlreadyExistsError, FileAlreadyRegisteredError, LockedError

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "day": pa.array([1, 1, 2], pa.int64())})


def test_a_rerun_of_a_refused_run_commits_the_file_its_first_run_left(lake: Lake) -> None:
    """A job appends under ``commit_id="load-1"`` with ``file_name="load-1.parquet"``; its
    commit is refused (another job holds a write lock on the dataset: ``LockedError``,
    nothing committed) after its files were written. Its re-run, with the same rows and
    name, must commit them: the files at those keys hold its very bytes. What a user loses
    otherwise: the re-run hears ``AlreadyExistsError`` ("written by another writer"), which
    the name's promise says means the first run got through and to stop retrying, so the
    load is never committed and no re-run can ever commit it (not until vacuum deletes the
    orphans, a retention later). (Before, the re-run was refused so.)"""
    lake.append("sales", ROWS.slice(0, 1), partition_by=["day"])
    impatient = Lake(lake.bucket, prefix=lake.prefix, s3=lake.client, lock_timeout=0)
    with lake.lock(write=["/sales"]), pytest.raises(LockedError):
        impatient.append(
            "sales", ROWS, partition_by=["day"], commit_id="load-1", file_name="load-1.parquet"
        )
    result = impatient.append(
        "sales", ROWS, partition_by=["day"], commit_id="load-1", file_name="load-1.parquet"
    )
    assert not result.already_committed
    assert sorted(r["id"] for r in lake.read("sales").to_pylist()) == [1, 1, 2, 3]
    again = impatient.append(
        "sales", ROWS, partition_by=["day"], commit_id="load-1", file_name="load-1.parquet"
    )
    assert again.already_committed


def test_a_named_file_another_run_committed_or_wrote_otherwise_is_still_refused(
    lake: Lake,
) -> None:
    """What the name still refuses: a re-run without a commit id of a run that committed
    its file (``FileAlreadyRegisteredError``: the rows are in the lake once), and other
    bytes under a name taken (``AlreadyExistsError``); nothing is committed by either."""
    lake.append("sales", ROWS, partition_by=["day"], file_name="load-1.parquet")
    with pytest.raises(FileAlreadyRegisteredError):
        lake.append("sales", ROWS, partition_by=["day"], file_name="load-1.parquet")
    with pytest.raises(AlreadyExistsError):
        lake.append("sales", ROWS.slice(1), partition_by=["day"], file_name="load-1.parquet")
    assert len(lake.history("sales")) == 1
    assert sorted(r["id"] for r in lake.read("sales").to_pylist()) == [1, 2, 3]
