"""Adversarial tests of what a pipeline's bad input gets (the project's rule: a clear, typed
error from lakelock.errors before anything is sent or written, never another answer than
the one asked for). Here: time travel's ``as_of`` (README, "Time travel": ``as_of=<time>``,
server time: "seconds since the epoch or an aware datetime")."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import InvalidArgumentError, PartitionByMismatchError
from lakelock.testing import DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, S3Endpoint
from tests._support import FAST_RETRY

#: The endpoint's keys, for ``Lake.from_url``'s own client.
CLIENT_KEYS = {
    "aws_access_key_id": DEFAULT_ACCESS_KEY,
    "aws_secret_access_key": DEFAULT_SECRET_KEY,
    "region_name": "us-east-1",
}


def test_an_as_of_that_names_no_instant_is_refused_not_read_at_another(
    client: Any, bucket: str
) -> None:
    """A pipeline asks for ``sales`` as of ``datetime(2026, 1, 5)``, meaning midnight UTC as
    its logs and engines write times; the datetime carries no time zone, and was read as the
    machine's local time: on a machine at UTC-5 the answer was the version of five hours
    later, rows no reader at that instant saw, with nothing to say so. A NaN as_of was
    "version not found". Both must be InvalidArgumentError, whichever way time travel is
    asked (read, scan, the registry, restore); an aware datetime and seconds still read."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.append("sales", pa.table({"id": [1]}))
    at = lake.history("sales")[0].at + 1  # a second after the commit (a datetime rounds to µs)
    naive = dt.datetime.fromtimestamp(at, dt.UTC).replace(tzinfo=None)
    for as_of in (naive, float("nan")):
        with pytest.raises(InvalidArgumentError):
            lake.read("sales", as_of=as_of)
        with pytest.raises(InvalidArgumentError):
            lake.scan("sales", as_of=as_of)
        with pytest.raises(InvalidArgumentError):
            lake.registry.read(as_of=as_of)
        with pytest.raises(InvalidArgumentError):
            lake.restore("sales", as_of=as_of)
    aware = dt.datetime.fromtimestamp(at, dt.UTC)
    assert lake.read("sales", as_of=aware)["id"].to_pylist() == [1]
    assert lake.read("sales", as_of=at)["id"].to_pylist() == [1]


@pytest.mark.parametrize("limit", [-1, -5, 1.5, True])
def test_a_history_limit_that_is_no_count_is_refused(lake: Lake, limit: Any) -> None:
    """``history(limit=-1)`` answered ``[]`` (or, for a format-1 lake, every entry but the
    oldest): a pipeline that computed its limit wrongly was told the dataset had no commits.
    A limit that is not a count of entries is InvalidArgumentError naming the limit; 0 and a
    positive limit still answer."""
    lake.append("sales", pa.table({"id": [1]}))
    lake.append("sales", pa.table({"id": [2]}))
    with pytest.raises(InvalidArgumentError, match="invalid limit") as refused:
        lake.history("sales", limit=limit)
    assert refused.value.value is limit
    assert lake.history("sales", limit=0) == []
    assert [h.version for h in lake.history("sales", limit=1)] == [2]


@pytest.mark.parametrize("read_timeout", [1e12, "100000000d"])
def test_a_read_timeout_no_platform_can_wait_is_refused_when_the_lake_is_made(
    s3: S3Endpoint, client: Any, bucket: str, read_timeout: Any
) -> None:
    """A job sets ``read_timeout`` to "as long as it takes" with a huge number (``1e12``, or
    a config file's ``"100000000d"``). The Lake was made, and then every request failed
    with ``OutcomeUnknownError`` ("timestamp out of range for platform time_t"): a read
    said its outcome was unknown, and an append would have said its commit's state was
    unknown, look its id up, for what was bad input all along. It must be
    InvalidArgumentError when the Lake is made, whichever way it is made."""
    Lake(bucket, s3=client, retry=FAST_RETRY).append("sales", pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError, match="read_timeout"):
        Lake(bucket, s3=client, retry=FAST_RETRY, read_timeout=read_timeout)
    with pytest.raises(InvalidArgumentError, match="read_timeout"):
        Lake.from_url(
            f"s3://{bucket}",
            read_timeout=read_timeout,
            endpoint_url=s3.url,
            **CLIENT_KEYS,
        )
    patient = Lake.from_url(f"s3://{bucket}", read_timeout="1d", endpoint_url=s3.url, **CLIENT_KEYS)
    assert patient.read("sales").num_rows == 1


def test_partition_by_none_means_not_partitioned_and_a_non_sequence_is_refused(
    lake: Lake,
) -> None:
    """``append(..., partition_by=None)``, as a pipeline passes an optional setting it did
    not set, raised a bare ``TypeError`` ('NoneType' object is not iterable) though the
    option's documented default is none. ``None`` is "not partitioned", as the default is,
    for append, overwrite and write; a partitioned dataset still refuses it (another
    partition_by than its own); a value that is no sequence of names is
    InvalidArgumentError, and nothing is committed: a set of names too, whose order (the
    partitions' paths) differs between processes."""
    lake.append("sales", pa.table({"id": [1]}), partition_by=None)
    lake.overwrite("sales", pa.table({"id": [2]}), partition_by=None, partitions="all")
    assert lake.read("sales")["id"].to_pylist() == [2]
    assert lake.write("sales", pa.table({"id": [3]}), partition_by=None)[0].partition_path == ""
    lake.append("by_day", pa.table({"day": ["a"], "id": [1]}), partition_by=["day"])
    with pytest.raises(PartitionByMismatchError):
        lake.append("by_day", pa.table({"day": ["b"], "id": [2]}), partition_by=None)
    version = lake.registry.read().version
    for wrong in (5, {"day": "a"}):
        with pytest.raises(InvalidArgumentError, match="partition_by"):
            lake.append("by_day", pa.table({"day": ["b"], "id": [2]}), partition_by=wrong)
    assert lake.registry.read().version == version
    with pytest.raises(InvalidArgumentError, match="a set has none"):  # no order: the paths'
        lake.append("pairs", pa.table({"a": [1], "b": [2], "id": [3]}), partition_by={"a", "b"})
    assert "pairs" not in lake.registry.read().datasets
