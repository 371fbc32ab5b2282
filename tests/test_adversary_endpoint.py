"""Adversarial tests of ``lakelock.testing.S3Endpoint``, which users test their own pipelines
with (README, "Testing your pipelines": seeded faults, ``lost_ack``, ``timeout``... and request
counts). A fault a user's test injects must happen as documented or be refused when injected:
a rule that is spent without striking, or that no request can ever match, lets a test of a
pipeline's fault handling pass without the fault having happened."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from typing import Any

import orjson
import pyarrow as pa
import pytest
from botocore.exceptions import ClientError, ConnectionClosedError

from lakelock import Lake
from lakelock.errors import AlreadyExistsError
from lakelock.testing import FaultPlan, FaultRule, S3Endpoint, parse_fault_spec
from lakelock.testing._classify import OPERATIONS
from lakelock.testing._policy_gate import DEFAULT_PRINCIPAL_ACCOUNT
from tests._support.s3model import classified_operations

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


@pytest.mark.parametrize("operation", ["PutObjects", "putobject", "Put_Object", "ListObjectsV3"])
def test_a_fault_for_an_operation_no_request_bears_is_refused_when_injected(
    s3: S3Endpoint, operation: str
) -> None:
    """A misspelt operation (a plural, another case) would match no request: the rule is
    refused when injected, by name or in the command-line form, not kept to never fire."""
    with pytest.raises(ValueError, match="matches no S3 operation"):
        s3.inject("lost_ack", operation=operation, count=1)
    with pytest.raises(ValueError, match="matches no S3 operation"):
        parse_fault_spec(f"error:{operation}")
    assert s3.faults()["rules"] == []


#: Names :func:`classify` gives that botocore's S3 model has no operation of: a browser's form
#: upload.
_OUTSIDE_THE_MODEL = frozenset({"PostObject"})


def test_the_operation_names_a_fault_may_use_are_those_classify_gives_s3s_requests() -> None:
    """``OPERATIONS`` (what a fault rule's glob must match) is kept by hand beside
    :func:`classify`; botocore's S3 model pins it: every modelled operation whose request
    ``classify`` names by its own name is in it, and every name in it is one ``classify``
    gives a modelled request, or one of the few it gives requests outside the model. A
    branch added to ``classify`` without its name, or a name kept after its branch went,
    fails here."""
    named = classified_operations()
    own = {name for name, given in named.items() if given == name}
    assert own <= OPERATIONS, sorted(own - OPERATIONS)
    assert OPERATIONS - own == _OUTSIDE_THE_MODEL, sorted(OPERATIONS - own)
    for operation in ("PutObject", "GetObject", "HeadObject", "DeleteObjects", "UploadPart"):
        assert named[operation] == operation  # the ones lakelock sends


@pytest.mark.parametrize("operation", ["*", "PutObject", "*Multipart*", "Put*", "GetBucketPolicy"])
def test_the_operations_and_globs_the_docs_name_are_accepted(operation: str) -> None:
    assert FaultRule("error", operation=operation).operation == operation


def test_every_request_a_lake_sends_bears_an_operation_a_fault_can_name(
    s3: S3Endpoint, bucket: str
) -> None:
    """The names a rule may use are those the endpoint gives requests: every request of a
    lake's append, lease, lock, read and vacuum (a multipart upload included) is one."""
    lake = Lake(bucket, s3=s3.client(), multipart_threshold=5 * 1024 * 1024)
    lake.append("t", pa.table({"id": [1], "blob": [os.urandom(6 * 1024 * 1024)]}))
    with lake.lease("job", ttl=30) as lease:
        lake.append("t", pa.table({"id": [2], "blob": [b""]}), fence=lease.fence)
    with lake.lock(write=["/t"]) as held:
        lake.append("t", pa.table({"id": [3], "blob": [b""]}), fence=held.fence)
    assert lake.read("t").num_rows == 3
    lake.vacuum(dry_run=True)
    assert s3.stats()["CompleteMultipartUpload"] == 1
    assert set(s3.stats()) <= OPERATIONS


@pytest.mark.parametrize(
    ("kind", "arguments"),
    [
        ("error", {"count": 1.5}),  # would fire twice
        ("error", {"count": True}),
        ("error", {"count": "1"}),
        ("latency", {"delay": float("nan")}),
        ("latency", {"delay": float("inf")}),
        ("latency", {"delay": 0.1, "jitter": -1.0}),
        ("error", {"probability": float("nan")}),
        ("error", {"probability": "0.5"}),
        ("timeout", {}),  # no delay: a reset, never a timeout
    ],
)
def test_a_fault_with_arguments_it_cannot_act_on_is_refused_when_injected(
    s3: S3Endpoint, kind: Any, arguments: dict[str, Any]
) -> None:
    """Odd arguments are a ValueError naming the argument, before the endpoint holds the rule:
    never a rule that fires another number of times than asked, sleeps forever, or is a
    reset where a timeout was asked for."""
    with pytest.raises(ValueError, match=r"count|delay|jitter|probability"):
        s3.inject(kind, **arguments)
    assert s3.faults()["rules"] == []


def test_a_timeout_in_the_command_line_form_needs_its_delay() -> None:
    with pytest.raises(ValueError, match="delay"):
        parse_fault_spec("timeout:GetObject")
    assert parse_fault_spec("timeout=5:GetObject").delay == 5.0


def test_a_timeouts_jitter_lengthens_its_hang_as_the_seed_draws() -> None:
    """``delay``/``jitter`` are seconds "for latency and timeout": a timeout hangs its delay
    plus up to its jitter, drawn from the plan's seed (the same seed, the same hangs)."""

    def hangs(seed: int) -> list[float]:
        plan = FaultPlan([FaultRule("timeout", delay=1.0, jitter=2.0)], seed=seed)
        return [plan.decide("GetObject", "lake", "k").hang for _ in range(20)]

    assert len(set(hangs(5))) > 1
    assert all(1.0 <= hang <= 3.0 for hang in hangs(5))
    assert hangs(5) == hangs(5)
    plain = FaultPlan([FaultRule("timeout", delay=1.0)], seed=5)
    assert plain.decide("GetObject", "lake", "k").hang == 1.0


@pytest.mark.parametrize("mode", ["threads", "Process", ""])
def test_a_mode_the_endpoint_has_not_is_refused_before_anything_starts(mode: Any) -> None:
    """``mode`` is ``"thread"`` or ``"process"``: a misspelt one was served from a child
    process, which a test choosing the thread (to share the server's interpreter) did not
    ask for."""
    with pytest.raises(ValueError, match="mode"):
        S3Endpoint(mode=mode)


def test_a_bucket_policy_keeping_a_principal_from_lifecycle_rules_is_enforced(
    s3: S3Endpoint, bucket: str
) -> None:
    """A policy denying ``s3:PutLifecycleConfiguration`` (a lifecycle rule can expire the
    lake: ``lakelock doctor``) refuses that principal's rule, as S3 does, and lets the owner
    read the rules; the requests are counted under S3's names (they were a CreateBucket
    and a ListObjects, and the Deny never applied)."""
    ops = f"arn:aws:iam::{DEFAULT_PRINCIPAL_ACCOUNT}:user/ops"
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "NoLifecycleRules",
                "Effect": "Deny",
                "Principal": {"AWS": ops},
                "Action": "s3:PutLifecycleConfiguration",
                "Resource": f"arn:aws:s3:::{bucket}",
            }
        ],
    }
    owner = s3.client()
    owner.put_bucket_policy(Bucket=bucket, Policy=orjson.dumps(policy).decode())
    rules = [{"ID": "expire", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1}}]
    s3.reset_stats()
    with pytest.raises(ClientError) as denied:
        s3.client(access_key="ops").put_bucket_lifecycle_configuration(
            Bucket=bucket, LifecycleConfiguration={"Rules": rules}
        )
    assert denied.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(ClientError) as none:
        owner.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert none.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"
    assert s3.stats() == {
        "PutBucketLifecycleConfiguration": 1,
        "GetBucketLifecycleConfiguration": 1,
    }


def test_a_fault_for_deletes_leaves_a_tagging_delete_alone(s3: S3Endpoint, bucket: str) -> None:
    """DeleteObjectTagging removes an object's tags, not the object: a fault injected for
    ``DeleteObject`` does not strike it, and it is counted under its own name."""
    client = one_try(s3)
    client.put_object(Bucket=bucket, Key="k", Body=b"1", Tagging="team=etl")
    s3.inject("error", operation="DeleteObject")
    s3.reset_stats()
    client.delete_object_tagging(Bucket=bucket, Key="k")
    assert client.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == []
    assert s3.stats() == {"DeleteObjectTagging": 1, "GetObjectTagging": 1}
    assert s3.faults()["injected"] == {}


@pytest.mark.parametrize("operation", ["ListObjectsV2", "ListObjects"])
def test_a_fault_for_a_prefix_strikes_the_listings_under_it(
    s3: S3Endpoint, bucket: str, operation: str
) -> None:
    """A listing has no key: a rule for ``metastore/`` strikes a listing of
    ``metastore/intents/`` by its prefix (it never struck one), and leaves a listing of
    another prefix, or of the whole bucket, alone."""
    client = one_try(s3)
    client.put_object(Bucket=bucket, Key="metastore/intents/a", Body=b"1")
    s3.inject("slowdown", operation=operation, prefix="metastore/")
    lister = client.list_objects_v2 if operation == "ListObjectsV2" else client.list_objects
    assert [o["Key"] for o in lister(Bucket=bucket)["Contents"]] == ["metastore/intents/a"]
    assert "Contents" not in lister(Bucket=bucket, Prefix="datasets/")
    with pytest.raises(ClientError) as slowed:
        lister(Bucket=bucket, Prefix="metastore/intents/")
    assert slowed.value.response["Error"]["Code"] == "SlowDown"
    assert s3.faults()["injected"] == {"slowdown": 1}


def test_a_fault_for_a_prefix_strikes_a_batch_delete_of_keys_under_it(
    s3: S3Endpoint, bucket: str
) -> None:
    """A batch delete (vacuum's) has no key of its own: a rule for ``datasets/`` strikes one
    whose keys all lie there (it never struck one), and leaves one reaching elsewhere alone."""
    client = one_try(s3)
    for key in ("datasets/a", "datasets/b", "views/c"):
        client.put_object(Bucket=bucket, Key=key, Body=b"1")
    s3.inject("error", operation="DeleteObjects", prefix="datasets/", count=1)
    mixed = client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "views/c"}]})
    assert [d["Key"] for d in mixed["Deleted"]] == ["views/c"]
    batch = {"Objects": [{"Key": "datasets/a"}, {"Key": "datasets/b"}]}
    with pytest.raises(ClientError) as failed:
        client.delete_objects(Bucket=bucket, Delete=batch)
    assert failed.value.response["Error"]["Code"] == "InternalError"
    assert len(client.list_objects_v2(Bucket=bucket, Prefix="datasets/")["Contents"]) == 2
    assert s3.faults()["injected"] == {"error": 1}


def test_a_batch_delete_that_is_no_xml_is_malformed_whatever_faults_wait(
    s3: S3Endpoint, bucket: str
) -> None:
    """A body that names no keys is S3's MalformedXML, also with a rule for a prefix
    waiting: the rule has nothing to match and is not spent."""
    s3.inject("error", operation="DeleteObjects", prefix="datasets/", count=1)
    request = urllib.request.Request(f"{s3.url}/{bucket}?delete", data=b"<Delete", method="POST")
    with pytest.raises(urllib.error.HTTPError) as malformed:
        urllib.request.urlopen(request, timeout=30)
    assert b"MalformedXML" in malformed.value.read()
    assert s3.faults()["injected"] == {}


def test_an_endpoint_not_started_says_so_to_whoever_asks_it_for_a_client() -> None:
    """A test that forgot ``with S3Endpoint() as s3`` (or ``start()``) hears that the endpoint
    is not running from ``client()`` and ``create_bucket()`` as from the counts, not
    botocore's "Invalid endpoint: "."""
    idle = S3Endpoint()
    for ask in (idle.client, lambda: idle.create_bucket("lake"), idle.client_kwargs):
        with pytest.raises(RuntimeError, match="not running"):
            ask()


@pytest.mark.parametrize("value", ["東京", "Łódź"], ids=["cjk", "polish"])
def test_a_copy_of_a_key_beyond_latin_1_is_served_as_any_other(
    s3: S3Endpoint, bucket: str, value: str
) -> None:
    """A partition copy is a server-side copy, which the endpoint checks by reading the keys
    back itself. A key holding a character beyond latin-1 (a city in Japanese or Polish)
    was a 500 at every such read-back, so a pipeline's test of
    ``copy_partition`` failed where S3 copies (OutcomeUnknownError); a create-only copy onto
    a key that exists is refused, that key untouched."""
    lake = Lake(bucket, s3=s3.client())
    lake.append("sales", pa.table({"city": [value], "id": [1]}), partition_by="city")
    lake.copy_partition("sales", {"city": value}, to_dataset="archive")
    assert lake.read("archive").to_pydict() == {"id": [1], "city": [value]}
    source = next(iter(lake.store.list(f"datasets/sales/city={value}/"))).key
    taken = f"datasets/archive/city={value}/taken.parquet"
    lake.store.put(taken, b"taken", mode="create")
    with pytest.raises(AlreadyExistsError):
        lake.store.copy(source, taken, source_etag=lake.store.head(source).etag)
    assert lake.store.get(taken).body == b"taken"
