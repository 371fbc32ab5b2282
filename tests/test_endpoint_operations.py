"""The embedded endpoint's names for S3 operations: botocore's S3 model's, each request the
operation it is (``PutObjectRetention`` is not ``PutObject``), and only those names
accepted by a fault rule."""

from __future__ import annotations

import contextlib

import orjson
import pytest
from botocore.exceptions import ClientError

from lakelock.errors import InvalidArgumentError
from lakelock.testing import S3Endpoint
from lakelock.testing._classify import OPERATIONS, SHADOWED
from tests._support.s3model import classified_operations


def test_every_modelled_operation_is_named_as_itself() -> None:
    """Every operation of botocore's S3 model is named by its own name, but for the few
    whose requests are another's (deprecated twins); the names a rule may use are exactly
    those, and the browser's form upload."""
    named = classified_operations()
    wrong = {name: given for name, given in named.items() if given != SHADOWED.get(name, name)}
    assert wrong == {}
    assert set(SHADOWED) == {
        "GetBucketLifecycle",
        "PutBucketLifecycle",
        "GetBucketNotification",
        "PutBucketNotification",
        "ListDirectoryBuckets",
    }
    assert (set(named) - set(SHADOWED)) | {"PostObject"} == OPERATIONS


def test_a_fault_on_put_object_spares_an_objects_retention(s3: S3Endpoint, bucket: str) -> None:
    """A fault for ``PutObject`` strikes a PutObject, not a request on the object's
    retention, which is counted as itself."""
    client = s3.client(retries={"mode": "standard", "total_max_attempts": 1})
    client.put_object(Bucket=bucket, Key="k", Body=b"1")
    s3.reset_stats()
    s3.inject("error", operation="PutObject", count=1)
    retention = {"Mode": "GOVERNANCE", "RetainUntilDate": "2030-01-01T00:00:00Z"}
    with contextlib.suppress(ClientError):  # the bucket has no object lock: moto's answer
        client.put_object_retention(Bucket=bucket, Key="k", Retention=retention)
    assert s3.faults()["injected"] == {}
    assert s3.stats() == {"PutObjectRetention": 1}
    with pytest.raises(ClientError):
        client.put_object(Bucket=bucket, Key="k", Body=b"2")
    assert s3.faults()["injected"] == {"error": 1}


@pytest.mark.parametrize("operation", ["HeadBucketAcl", "DeleteBucketVersioning", "Unknown"])
def test_a_name_that_is_no_s3_operation_is_refused(s3: S3Endpoint, operation: str) -> None:
    """A name no S3 operation bears is refused, with the names known."""
    with pytest.raises(InvalidArgumentError, match="matches no S3 operation") as refused:
        s3.inject("error", operation=operation, count=1)
    assert "PutObjectRetention" in str(refused.value)
    assert s3.faults()["rules"] == []


def test_a_deprecated_twin_is_refused_with_the_name_its_requests_bear(s3: S3Endpoint) -> None:
    with pytest.raises(InvalidArgumentError, match="GetBucketLifecycleConfiguration"):
        s3.inject("error", operation="GetBucketLifecycle", count=1)


def test_under_a_policy_an_operation_it_cannot_judge_is_not_let_through(
    s3: S3Endpoint, bucket: str
) -> None:
    """A bucket policy judges the operations its model knows; any other request is refused
    (501), not judged as another operation."""
    client = s3.client(retries={"mode": "standard", "total_max_attempts": 1})
    client.put_object(Bucket=bucket, Key="k", Body=b"1")
    allow = {"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "*"}
    policy = {"Version": "2012-10-17", "Statement": [allow]}
    client.put_bucket_policy(Bucket=bucket, Policy=orjson.dumps(policy).decode())
    with pytest.raises(ClientError) as refused:
        client.get_object_retention(Bucket=bucket, Key="k")
    assert refused.value.response["Error"]["Code"] == "NotImplemented"
