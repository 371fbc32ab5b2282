"""Adversarial tests of a lake past the sizes one tries first: partitions of many files, lakes
of many datasets, keys near S3's limit. An operation over many objects sends its requests
together, as reads do, not one round trip after another; one refused for what it is writes
nothing (``lakelock/_partitions.py``: "a move refused for what it is copies nothing")."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._partitions import COPIERS
from lakelock._registry._objects import LOADERS
from lakelock.errors import InvalidNameError
from lakelock.testing import S3Endpoint
from tests._support import wait_until

#: Files in the partition copied: more than copies go at once.
FILES = COPIERS + 4
#: Datasets of the lake shown: more than are read at once.
DATASETS = LOADERS + 4


def day_files(lake: Lake, dataset: str, count: int) -> None:
    """``count`` appends of one row each (id ``i`` by the ``i``-th) to partition ``day=1``
    of ``dataset``: that many files in one partition."""
    for i in range(count):
        lake.append(dataset, pa.table({"id": [i], "day": [1]}), partition_by=["day"])


def test_a_partition_copy_sends_its_copies_together_not_one_after_another(
    lake: Lake, s3: S3Endpoint
) -> None:
    """The endpoint holds the copies it receives: 16 of them are held at once (the copies of
    16 files under way together). A copy of a partition of n files made n copies one after
    another, four requests each (10,000 files at S3's 20-50 ms a request: 15-30 min), so one
    was held, and the next sent only once its client gave up on it. Let go, the copy commits
    every file once (no copy sent twice), in the destination only."""
    day_files(lake, "events", FILES)
    s3.reset_stats()
    s3.inject("stall", operation="UploadPartCopy", count=COPIERS)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        copying = pool.submit(lake.copy_partition, "events", {"day": 1}, to_dataset="archive")
        try:
            wait_until(lambda: s3.stalled() == COPIERS)
        finally:
            s3.release_stalls()
        result = copying.result(timeout=60)
    assert result.version is not None
    copied = lake.read("archive")
    assert sorted(copied["id"].to_pylist()) == list(range(FILES))
    assert s3.stats()["UploadPartCopy"] == FILES
    assert len(lake.registry.files("archive")) == FILES
    assert all(f.key.startswith("datasets/archive/day=1/") for f in lake.registry.files("archive"))


def test_a_copy_too_deep_for_its_longest_file_name_copies_none_of_its_files(
    lake: Lake, client: Any, bucket: str
) -> None:
    """A partition of two files, one named by lakelock (45 bytes), one given a 204-byte name,
    copied to a value of 900 bytes: the first file's key there fits S3's 1,024 bytes, the
    second's does not. The copy is ``InvalidNameError`` before anything is copied: it copied
    the first file, then was refused at the second, the first's copy left behind."""
    lake.append("events", pa.table({"id": [1], "tag": ["a"]}), partition_by=["tag"])
    long_name = "z" * 196 + ".parquet"
    lake.append(
        "events", pa.table({"id": [2], "tag": ["a"]}), partition_by=["tag"], file_name=long_name
    )
    deep = "v" * 900
    with pytest.raises(InvalidNameError, match="1024"):
        lake.copy_partition(
            "events", {"tag": "a"}, to_dataset="archive", to_partition={"tag": deep}
        )
    listed = client.list_objects_v2(Bucket=bucket, Prefix="datasets/archive/")
    assert listed.get("Contents", []) == []
    assert "archive" not in lake.registry.read().datasets


def test_registry_show_reads_the_datasets_snapshots_together(
    lake: Lake, s3: S3Endpoint, in_process: Any
) -> None:
    """``lakelock registry show`` of a lake of many datasets: the endpoint holds the
    snapshot reads it receives, and 16 are held at once (read together). It read them one
    after another, so one was held at a time: a lake of 5,000 datasets took 5,000 round
    trips to S3 to show."""
    for n in range(DATASETS):
        lake.append(f"d{n:02d}", pa.table({"id": [n]}))
    s3.reset_stats()
    s3.inject("stall", operation="GetObject", prefix="metastore/snapshots/", count=LOADERS)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        showing = pool.submit(in_process, "registry", "show", lake.url, "--endpoint-url", s3.url)
        try:
            wait_until(lambda: s3.stalled() == LOADERS)
        finally:
            s3.release_stalls()
        shown = showing.result(timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"{DATASETS} datasets" in shown.stdout
    assert all(f"d{n:02d}" in shown.stdout for n in range(DATASETS))
