"""Adversarial tests of the bucket policy lakelock generates (README, "Locks, leases and the
bucket policy": "With the bucket policy, S3 refuses any unconditional write, from any tool";
docs/ARCHITECTURE.md: leases and lock tables are never deleted, since deleting one resets
its tokens). The ``bucket`` fixture's bucket carries the generated policy with deletes
guarded; ``client`` is a principal it binds, acting as a tool that does not use lakelock
(``aws s3 rm``, a clean-up script)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from botocore.exceptions import ClientError

from lakelock import Lake
from lakelock._layout import lease_key, lock_table_key
from lakelock.errors import StaleFenceError
from tests._support import FAST_RETRY


def plain_delete_is_refused(client: Any, bucket: str, key: str) -> None:
    with pytest.raises(ClientError) as info:
        client.delete_object(Bucket=bucket, Key=key)
    assert info.value.response["Error"]["Code"] == "AccessDenied"


def test_a_lease_cannot_be_deleted_so_its_fencing_tokens_never_restart(
    client: Any, bucket: str
) -> None:
    """A leader commits under its lease's fence (token 1), then is paused; a tool clears the
    lease object "to unstick it". Deleted, the lease would start again at token 1: every
    commit of the next leader would be StaleFenceError for good (the registry has seen 1
    already), and a leader paused with a higher token would go on committing. The policy
    must refuse the delete, conditional or not; the next leader gets token 2 and commits."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    with lake.lease("nightly", ttl=30) as lease:
        lake.append("sales", pa.table({"id": [1]}), fence=lease.fence)
    key = lease_key("nightly")
    plain_delete_is_refused(client, bucket, key)
    etag = client.head_object(Bucket=bucket, Key=key)["ETag"]
    with pytest.raises(ClientError):
        client.delete_object(Bucket=bucket, Key=key, IfMatch=etag)
    with lake.lease("nightly", ttl=30) as lease:
        assert lease.fence.token == 2
        lake.append("sales", pa.table({"id": [2]}), fence=lease.fence)
    with pytest.raises(StaleFenceError):
        lake.append("sales", pa.table({"id": [3]}), fence=("lease:nightly", 1))


def test_a_lock_table_cannot_be_deleted_so_its_grants_never_reuse_a_token(
    client: Any, bucket: str
) -> None:
    """A write lock on ``/sales`` is taken and released (its grant's record ends in the
    registry). Deleted, the lock table would give its next grant the same token again, and
    the registry refuses every commit of a grant whose token ended: the next holder could
    never commit under its lock. The policy must refuse the delete."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.append("sales", pa.table({"id": [1]}))
    with lake.lock(write=["/sales"]) as held:
        lake.append("sales", pa.table({"id": [2]}), fence=held.fence)
    plain_delete_is_refused(client, bucket, lock_table_key("sales"))
    with lake.lock(write=["/sales"]) as held:
        lake.append("sales", pa.table({"id": [3]}), fence=held.fence)
    assert sorted(lake.read("sales")["id"].to_pylist()) == [1, 2, 3]


def test_a_version_of_the_registry_cannot_be_deleted_without_its_etag(
    client: Any, bucket: str
) -> None:
    """The registry's write-once objects (a dataset version's snapshot, its index nodes,
    manifests, intents) are deleted by ``vacuum`` only, with ``If-Match`` once nothing the
    retention keeps reads them. Deleted by a tool that judged them by their key or age, a
    version time travel promises would be unreadable, and so would the current one. The
    policy must refuse a delete there without ``If-Match``, as under ``datasets/``."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.append("sales", pa.table({"id": [1]}))
    listed = client.list_objects_v2(Bucket=bucket, Prefix="metastore/")["Contents"]
    written_once = [
        o["Key"]
        for o in listed
        if o["Key"].startswith(("metastore/snapshots/", "metastore/nodes/", "metastore/manifests/"))
    ]
    assert written_once
    for key in written_once:
        plain_delete_is_refused(client, bucket, key)
    assert Lake(bucket, s3=client, retry=FAST_RETRY).read("sales")["id"].to_pylist() == [1]


@pytest.mark.parametrize("area", ["snapshots", "nodes", "intents"])
def test_a_version_of_the_registry_cannot_be_overwritten_with_its_etag(
    client: Any, bucket: str, area: str
) -> None:
    """A dataset version's snapshot, its index nodes and the intents (the commits not applied
    yet, and the manifests of applied ones) are written once, create-only, and named by the
    digest of their bytes: no lakelock writer ever overwrites one. A tool that does, with
    ``If-Match`` on the ETag it just read (a sync that "refreshes" objects, a script fixing a
    document by hand), passed the policy's CAS rule for the metastore, and every reader and
    writer of the lake then met a snapshot whose bytes no longer match its key
    (``RegistryCorruptError``): the current version, and every commit after it, unreadable
    for everybody. As for manifests, the policy must refuse the overwrite, and the lake
    reads on."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    # More partitions than an index leaf holds (96): the version has index nodes too.
    lake.append("sales", pa.table({"id": range(100), "day": range(100)}), partition_by=["day"])
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"metastore/{area}/")["Contents"]
    assert listed
    for key in (o["Key"] for o in listed):
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        etag = client.head_object(Bucket=bucket, Key=key)["ETag"]
        with pytest.raises(ClientError) as info:
            client.put_object(Bucket=bucket, Key=key, Body=body + b" ", IfMatch=etag)
        assert info.value.response["Error"]["Code"] == "AccessDenied", key
    assert Lake(bucket, s3=client, retry=FAST_RETRY).read("sales").num_rows == 100
