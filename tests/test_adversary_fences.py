"""Adversarial tests of fences spelt by hand (README, "Locks, leases and the bucket policy":
a commit carries a lease's fencing token, ``fence=``; every operation takes
``fence=("lease:<name>", token)`` as well as a ``Fence``). A token read from a config file
or an environment variable arrives as text; the registry records what a commit carries in the
root that every process parses."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import REGISTRY_KEY
from lakelock.errors import InvalidArgumentError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY


@pytest.mark.parametrize("token", ["7", 7.0, True, None, float("nan"), -1, 2**64])
def test_a_fence_whose_token_is_no_whole_number_is_refused_and_the_lake_stays_readable(
    lake: Lake, client: Any, bucket: str, token: Any
) -> None:
    """A commit given ``fence=("lease:etl", token)`` whose token is text, a float, a bool,
    nothing, negative or beyond JSON's integers is refused (``InvalidArgumentError``) before
    it commits, and a new process still reads and writes the lake. What a user would lose:
    the commit recorded the token in the registry's root as it was, and from then on every
    other process, reader or writer, failed on the whole lake with ``RegistryCorruptError``
    (the commit of a text token even succeeded, so the job that did it saw nothing wrong)."""
    lake.append("sales", pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError):
        lake.append("sales", pa.table({"id": [2]}), fence=("lease:etl", token))
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    assert other.read("sales").to_pydict() == {"id": [1]}
    with other.lease("etl", ttl=30) as lease:
        other.append("sales", pa.table({"id": [3]}), fence=lease.fence)
    assert Lake(bucket, s3=client).read("sales").sort_by("id").to_pydict() == {"id": [1, 3]}


def test_a_fence_with_a_token_its_lease_never_issued_is_refused_and_the_lease_stays_electable(
    lake: Lake, client: Any, bucket: str
) -> None:
    """A job spells its lease's fence by hand, ``fence=("lease:etl", token)``, with the token
    read from the wrong field of its config: the run's date, 20261130, where the lease has
    issued 1. The registry raised the highest token it keeps for ``lease:etl`` to that
    number, so every later acquisition of the lease (tokens 2, 3, ...) was refused as
    stale when recorded (``StaleFenceError``): no holder could be elected again, for twenty
    million acquisitions. A token above the one the lease's document has issued is
    refused (``InvalidArgumentError``) before any file is written, and the lease stays
    electable."""
    lake.append("sales", pa.table({"id": [1]}))
    with lake.lease("etl", ttl=30, heartbeat=False, timeout=0) as lease:
        assert lease.token == 1
    written = [o.key for o in lake.store.list("datasets/")]
    with pytest.raises(InvalidArgumentError):
        lake.append("sales", pa.table({"id": [2]}), fence=("lease:etl", 20261130))
    assert [o.key for o in lake.store.list("datasets/")] == written  # no file written
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    with other.lease("etl", ttl=30, heartbeat=False, timeout=0) as lease:
        other.append("sales", pa.table({"id": [3]}), fence=lease.fence)
    assert Lake(bucket, s3=client).read("sales").sort_by("id").to_pydict() == {"id": [1, 3]}


@pytest.mark.parametrize("token", [1, 20261130], ids=["issued", "never-issued"])
def test_a_fenced_commit_reads_its_leases_document_at_most_once(
    s3: S3Endpoint, lake: Lake, admin: Any, client: Any, token: int
) -> None:
    """A commit whose lease token the root does not record (an acquisition recorded by no
    commit: a lease taken by a lakelock from before takeovers were recorded) checks it
    against what the lease's document has issued, before any file is written. One append
    read that document twice (the commit's check before its files, then again as it
    committed them, the root it had read meanwhile recording no token either): it reads it
    once, whether the token passes or is refused."""
    lake.append("sales", pa.table({"id": [1]}))
    with lake.lease("etl", ttl=30, heartbeat=False, timeout=0) as lease:
        assert lease.token == 1
    root = orjson.loads(admin.get_object(Bucket=lake.bucket, Key=REGISTRY_KEY)["Body"].read())
    assert root["fences"] == {"lease:etl": 1}
    root["fences"] = {}
    admin.put_object(Bucket=lake.bucket, Key=REGISTRY_KEY, Body=orjson.dumps(root))
    other = Lake(lake.bucket, s3=client, retry=FAST_RETRY)
    s3.reset_stats()
    if token == 1:
        other.append("sales", pa.table({"id": [2]}), fence=("lease:etl", token))
    else:
        with pytest.raises(InvalidArgumentError):
            other.append("sales", pa.table({"id": [2]}), fence=("lease:etl", token))
    assert s3.areas().get("GetObject metastore/leases", 0) == 1
