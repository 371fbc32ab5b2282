"""The embedded endpoint enforces bucket policies like S3: the generated policy refuses
unconditional writes into the protected prefixes with 403 and lets lakelock's own requests in."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest
from botocore.exceptions import ClientError

from lakelock import Lake
from lakelock._policy import generate_bucket_policy
from lakelock._s3 import IfMatch, ObjectStore
from lakelock.errors import AccessDeniedError
from lakelock.testing import S3Endpoint
from lakelock.testing._policy_gate import DEFAULT_PRINCIPAL_ACCOUNT
from tests._support import FAST_RETRY

WRITER = f"arn:aws:iam::{DEFAULT_PRINCIPAL_ACCOUNT}:user/lakelock"
FIVE_MIB = 5 * 1024 * 1024


@pytest.fixture
def guarded(client: Any, bucket: str) -> str:
    """The test bucket with lakelock's generated policy (deletes guarded too) applied."""
    policy = generate_bucket_policy(bucket, principals=[WRITER], deny_unconditional_delete=True)
    client.put_bucket_policy(Bucket=bucket, Policy=orjson.dumps(policy).decode())
    return bucket


def denied(call: Any, **kwargs: Any) -> bool:
    try:
        call(**kwargs)
    except ClientError as error:
        code = error.response["Error"]["Code"]
        assert code == "AccessDenied", code
        return True
    return False


def test_policy_round_trips_and_rejects_malformed(client: Any, guarded: str) -> None:
    """Get returns what Put stored; a malformed policy is MalformedPolicy, not stored."""
    stored = orjson.loads(client.get_bucket_policy(Bucket=guarded)["Policy"])
    assert stored == generate_bucket_policy(
        guarded, principals=[WRITER], deny_unconditional_delete=True
    )
    with pytest.raises(ClientError) as info:
        client.put_bucket_policy(Bucket=guarded, Policy='{"Statement": "nope"}')
    assert info.value.response["Error"]["Code"] == "MalformedPolicy"


def test_unconditional_writes_to_protected_prefixes_are_denied(client: Any, guarded: str) -> None:
    """Plain PUT, plain copy and plain multipart completion into datasets/ and metastore/
    are refused with 403; outside those prefixes they pass."""
    client.put_object(Bucket=guarded, Key="scratch/src", Body=b"x")
    for key in ("datasets/d/part.parquet", "metastore/dataset_registry.json"):
        assert denied(client.put_object, Bucket=guarded, Key=key, Body=b"x")
        source = {"Bucket": guarded, "Key": "scratch/src"}
        assert denied(client.copy_object, Bucket=guarded, Key=key, CopySource=source)
        upload = client.create_multipart_upload(Bucket=guarded, Key=key)["UploadId"]
        part = client.upload_part(
            Bucket=guarded, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * FIVE_MIB
        )
        assert denied(
            client.complete_multipart_upload,
            Bucket=guarded,
            Key=key,
            UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
        )
        client.abort_multipart_upload(Bucket=guarded, Key=key, UploadId=upload)
    assert client.list_objects_v2(Bucket=guarded)["KeyCount"] == 1


def test_lakelock_requests_pass_the_policy(client: Any, guarded: str) -> None:
    """Every kind of write the adapter makes is allowed: create-only puts (single and
    multipart), the registry's first create and its CAS, create-only copies, If-Match deletes."""
    store = ObjectStore(client, guarded, multipart_threshold=FIVE_MIB, retry=FAST_RETRY)
    store.put("datasets/d/a.parquet", b"a")
    store.put("datasets/d/big.parquet", b"b" * (6 * 1024 * 1024))
    first = store.put("metastore/dataset_registry.json", b"{}")
    store.put("metastore/dataset_registry.json", b'{"v":2}', mode=IfMatch(first.etag))
    copied = store.copy("datasets/d/a.parquet", "datasets/e/a.parquet")
    store.delete("datasets/e/a.parquet", if_match=copied.etag)
    with pytest.raises(AccessDeniedError):
        store.put("datasets/d/c.parquet", b"c", mode="overwrite")
    with pytest.raises(AccessDeniedError):
        store.delete("datasets/d/a.parquet")


def test_the_registry_root_cannot_be_deleted(client: Any, guarded: str) -> None:
    """A writer bound by the guarded policy cannot delete the registry's root, not even with
    its current ETag: deleted, the lake would read as empty (every dataset gone) until the
    next commit started a new registry over the old one's objects. The lake goes on."""
    lake = Lake(guarded, s3=client, retry=FAST_RETRY)
    lake.append("sales", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    store = ObjectStore(client, guarded, retry=FAST_RETRY)
    etag = store.head("metastore/dataset_registry.json").etag
    with pytest.raises(AccessDeniedError):
        store.delete("metastore/dataset_registry.json")
    with pytest.raises(AccessDeniedError):
        store.delete("metastore/dataset_registry.json", if_match=etag)
    assert Lake(guarded, s3=client, retry=FAST_RETRY).read("sales")["id"].to_pylist() == [1]


def test_delete_objects_is_decided_per_key(client: Any, guarded: str) -> None:
    """DeleteObjects: keys with an ETag are deleted, keys without one are AccessDenied."""
    store = ObjectStore(client, guarded, retry=FAST_RETRY)
    etag = store.put("datasets/d/a.parquet", b"a").etag
    store.put("datasets/d/b.parquet", b"b")
    results = store.delete_many([("datasets/d/a.parquet", etag), ("datasets/d/b.parquet", None)])
    assert results["datasets/d/a.parquet"] is None
    assert isinstance(results["datasets/d/b.parquet"], AccessDeniedError)
    assert [o.key for o in store.list("datasets/")] == ["datasets/d/b.parquet"]


def test_other_principals_are_not_bound(s3: S3Endpoint, guarded: str) -> None:
    """The Deny statements bind the listed principals only (an identity the policy does not
    name is governed by its own IAM policies, which the endpoint does not model)."""
    other = s3.client(access_key="someone-else")
    other.put_object(Bucket=guarded, Key="datasets/d/x.parquet", Body=b"x")


def test_the_views_lakelock_writes_cannot_be_overwritten_or_deleted_by_another_tool(
    client: Any, guarded: str
) -> None:
    """README: with the bucket policy, S3 refuses any unconditional write. That holds for the
    Iceberg and Delta views as for the data: every object ``mirror`` writes (the Iceberg
    view's metadata, manifest lists and manifests under ``views/``; the Delta log under the
    dataset's folder) is refused to a plain PUT, an ``If-Match`` overwrite and a delete
    without ``If-Match`` from a principal the policy binds."""
    lake = Lake(guarded, s3=client, retry=FAST_RETRY)
    lake.append("sales", pa.table({"id": [1, 2]}))
    lake.mirror("sales")
    written = [
        o.key
        for prefix in ("views/sales/", "datasets/sales/_delta_log/")
        for o in lake.store.list(prefix)
    ]
    assert any(key.startswith("views/") for key in written)
    assert any("/_delta_log/" in key for key in written)
    for key in written:
        etag = client.head_object(Bucket=guarded, Key=key)["ETag"]
        assert denied(client.put_object, Bucket=guarded, Key=key, Body=b"x"), key
        assert denied(client.put_object, Bucket=guarded, Key=key, Body=b"x", IfMatch=etag), key
        assert denied(client.delete_object, Bucket=guarded, Key=key), key
