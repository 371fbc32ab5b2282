"""Adversarial tests of ``lakelock.testing.S3Endpoint``, which users test their own pipelines
with (README, "Testing your pipelines": seeded faults, ``lost_ack``, ``timeout``... and request
counts). A fault a user's test injects must happen as documented or be refused when injected:
a rule that is spent without striking, or that no request can ever match, lets a test of a
pipeline's fault handling pass without the fault having happened."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError

from lakelock.testing import S3Endpoint

pytestmark = pytest.mark.unguarded  # raw writes of a test, anywhere in the bucket


def one_try(s3: S3Endpoint) -> Any:
    """A client that sends each request once: an answer lost is the client's error."""
    return s3.client(retries={"mode": "standard", "total_max_attempts": 1})


def test_a_lost_ack_drawn_for_a_refused_write_is_kept_for_the_next_write(
    s3: S3Endpoint, bucket: str
) -> None:
    """``lost_ack`` (count 1) on PutObject: the first PutObject is refused (412, a
    create-only write of a key that exists), so nothing is applied and no answer is lost;
    the fault strikes the next PutObject that applies, and only that one is reported."""
    client = one_try(s3)
    client.put_object(Bucket=bucket, Key="taken", Body=b"1")
    s3.inject("lost_ack", operation="PutObject", count=1)
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=bucket, Key="taken", Body=b"2", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    assert s3.faults()["injected"] == {}
    with pytest.raises(ConnectionClosedError):  # applied, its answer lost
        client.put_object(Bucket=bucket, Key="new", Body=b"3", IfNoneMatch="*")
    assert client.get_object(Bucket=bucket, Key="new")["Body"].read() == b"3"
    assert s3.faults()["injected"] == {"lost_ack": 1}


def test_a_lost_ack_for_every_operation_loses_a_writes_answer_not_a_reads(
    s3: S3Endpoint, bucket: str
) -> None:
    """The README's ``lost_ack`` with the operation left out (every operation): a read
    under the prefix comes first and is answered (a lost acknowledgement is a write's), and
    the fault waits for the first write there."""
    client = one_try(s3)
    client.put_object(Bucket=bucket, Key="metastore/old", Body=b"1")
    s3.inject("lost_ack", prefix="metastore/", count=1)
    assert client.get_object(Bucket=bucket, Key="metastore/old")["Body"].read() == b"1"
    assert s3.faults()["injected"] == {}
    with pytest.raises(ConnectionClosedError):
        client.put_object(Bucket=bucket, Key="metastore/new", Body=b"2")
    assert s3.faults()["injected"] == {"lost_ack": 1}
