"""``lakelock doctor``'s probes, in process: every probe passes on the embedded endpoint (which
has every feature), and each fails on a store lacking what it probes -- plain moto (no If-Match
on multipart completion, no copy-source or CopyObject destination conditions, no per-key ETags
in DeleteObjects), the endpoint acting as a store without some feature, a store that ignores
conditional headers, one that answers 501 to them, and injected faults. The verdict is safe
only when every required probe passed; the vacuum line says what vacuum will do. Cleanup leaves
nothing behind in every case."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import orjson
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError
from moto.server import ThreadedMotoServer

from lakelock import generate_bucket_policy
from lakelock._s3._doctor import ProbeResult, run_doctor, verdict
from lakelock._s3._features import (
    PROBES,
    Probe,
    Scratch,
    probe_lifecycle,
    probe_list_start_after,
    run_probe,
)
from lakelock.cli import main
from lakelock.testing import S3Endpoint
from tests._support import REPO

#: The required probes of a conditional request (all but the listing's and the lifecycle's).
REQUIRED_CONDITIONAL = {
    p.name for p in PROBES if p.required and p.run not in (probe_list_start_after, probe_lifecycle)
}
CONDITIONS = ("IfMatch", "IfNoneMatch", "CopySourceIfMatch")
OWN_ARN = "arn:aws:iam::123456789012:user/lakelock"  # how the endpoint sees access key "lakelock"

# The doctor probes stores and policies of its own making: buckets start without a policy.
pytestmark = pytest.mark.unguarded


def one_shot_client(url: str) -> Any:
    """A client that sends each request once, as the doctor's does."""
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="lakelock",
        aws_secret_access_key="x",
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
    )


@pytest.fixture(scope="module")
def plain_moto() -> Iterator[str]:
    """moto's own server, no gateway, in this process: a store of its own (the embedded
    endpoint's buckets are not in it), without the gateway's fixes."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def results(client: Any, bucket: str, prefix: str = "") -> dict[str, ProbeResult]:
    found, cleanup, _ = run_doctor(client, bucket, prefix)
    assert cleanup.left == ()
    return {r.name: r for r in found}


def assert_bucket_empty(client: Any, bucket: str) -> None:
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert [o["Key"] for o in listed] == []
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


class ConditionBlind:
    """A client for a store that ignores conditional headers: it drops them from every call."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not callable(method):
            return method

        @functools.wraps(method)
        def call(**kwargs: Any) -> Any:
            for condition in CONDITIONS:
                kwargs.pop(condition, None)
            return method(**kwargs)

        return call


class ConditionRefusing(ConditionBlind):
    """A client for a store that answers 501 NotImplemented to any conditional request (as
    Backblaze B2 does), deletes included."""

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(**kwargs: Any) -> Any:
            if any(condition in kwargs for condition in CONDITIONS):
                raise ClientError(
                    {
                        "Error": {"Code": "NotImplemented", "Message": "no conditions here"},
                        "ResponseMetadata": {"HTTPStatusCode": 501},
                    },
                    name,
                )
            return method(**kwargs)

        return call


def test_every_probe_passes_on_the_embedded_endpoint(s3: S3Endpoint, bucket: str) -> None:
    """The gateway supplies every feature: all probes pass (the policy one skips: no policy),
    and the scratch prefix is gone afterwards."""
    client = one_shot_client(s3.url)
    found = results(client, bucket, "lake/")
    assert {n: r.status for n, r in found.items()} == {
        **{p.name: "pass" for p in PROBES},
        "bucket policy enforcement": "skip",
    }
    assert_bucket_empty(client, bucket)


def test_plain_moto_fails_exactly_what_it_lacks(plain_moto: str, bucket: str) -> None:
    """moto alone ignores If-Match on CompleteMultipartUpload, CopyObject destination
    conditions and per-key ETags: those probes fail, the rest pass, nothing is left."""
    client = one_shot_client(plain_moto)
    client.create_bucket(Bucket=bucket)
    found = results(client, bucket)
    failed = {n for n, r in found.items() if r.status == "fail"}
    # moto's check-then-write is unguarded: a race may or may not show it in one run.
    failed.discard("concurrent create-only PUTs: one winner")
    assert failed == {
        "If-Match on CompleteMultipartUpload",
        "copy-source-if-match (UploadPartCopy)",
        "conditional CopyObject (destination)",
        "DeleteObjects with per-key ETag",
    }
    assert "ignores If-Match on CompleteMultipartUpload" in (
        found["If-Match on CompleteMultipartUpload"].detail
    )
    # moto honours If-Match on DeleteObject: vacuum would delete one object per request.
    assert found["vacuum deletes"].status == "pass"
    assert "one object per request" in found["vacuum deletes"].detail
    assert_bucket_empty(client, bucket)


def test_a_store_ignoring_conditions_fails_every_conditional_probe(
    s3: S3Endpoint, bucket: str
) -> None:
    """Negative control: with conditional headers dropped, every required probe of a
    condition fails (none of them passes by accident)."""
    client = ConditionBlind(one_shot_client(s3.url))
    found = results(client, bucket)
    assert {n for n, r in found.items() if r.status == "fail"} >= REQUIRED_CONDITIONAL
    assert "not atomic" in found["concurrent create-only PUTs: one winner"].detail
    assert_bucket_empty(s3.client(), bucket)


def test_a_store_refusing_conditions_with_501_fails_and_is_still_cleaned(
    s3: S3Endpoint, bucket: str
) -> None:
    """A store answering 501 to conditional requests fails every required probe with the
    answer in the detail; cleanup falls back to plain deletes inside the scratch prefix."""
    client = ConditionRefusing(one_shot_client(s3.url))
    found = results(client, bucket)
    for name in REQUIRED_CONDITIONAL:
        assert found[name].status == "fail", name
    assert "501 NotImplemented" in found["create-only PutObject (If-None-Match: *)"].detail
    assert_bucket_empty(s3.client(), bucket)


def test_injected_completion_errors_fail_the_multipart_probes(s3: S3Endpoint, bucket: str) -> None:
    """A store whose multipart completions fail (500) fails the three multipart-based probes,
    with the answer in the detail, and leaves no upload behind."""
    s3.inject("error", operation="CompleteMultipartUpload")
    client = one_shot_client(s3.url)
    found = results(client, bucket)
    failed = {n for n, r in found.items() if r.status == "fail"}
    assert failed == {
        "If-None-Match on CompleteMultipartUpload",
        "If-Match on CompleteMultipartUpload",
        "create-only copy (UploadPartCopy)",
        "copy-source-if-match (UploadPartCopy)",
    }
    assert "500 InternalError" in found["If-Match on CompleteMultipartUpload"].detail
    s3.clear_faults()
    assert_bucket_empty(client, bucket)


def put_policy(client: Any, bucket: str, policy: dict[str, Any]) -> None:
    client.put_bucket_policy(Bucket=bucket, Policy=orjson.dumps(policy).decode())


def policy_probe(client: Any, bucket: str) -> ProbeResult:
    found, cleanup, _ = run_doctor(
        client, bucket, probes=tuple(p for p in PROBES if "policy" in p.name)
    )
    assert cleanup.left == ()
    return found[0]


def test_policy_probe_passes_when_the_policy_binds_the_caller(s3: S3Endpoint, bucket: str) -> None:
    """lakelock's policy naming this caller: stray writes refused, lakelock's own writes
    (create-only, compare-and-swap) allowed, probe objects in datasets/ and metastore/ removed
    with conditional deletes even under deny-unconditional-delete."""
    client = one_shot_client(s3.url)
    policy = generate_bucket_policy(bucket, principals=[OWN_ARN], deny_unconditional_delete=True)
    put_policy(client, bucket, policy)
    result = policy_probe(client, bucket)
    assert (result.status, result.needed) == ("pass", "recommended")
    assert "datasets/, metastore/" in result.detail
    assert_bucket_empty(client, bucket)


@pytest.mark.parametrize("deletes", [False, True])
def test_policy_probe_names_a_statement_an_older_policy_lacks(
    s3: S3Endpoint, bucket: str, deletes: bool
) -> None:
    """A bucket policy applied before ``DenyOverwriteOfRegistryVersions`` existed enforces
    everything it has: stray writes refused, lakelock's own allowed. But a compare-and-swap
    over a registry version's object is let through, and the lake is then unreadable. The
    probe must say the policy lacks that statement and how to apply the new one; before, it
    passed. The statements the options chose not to have (manifests overwritable, deletes
    not denied) are not asked for."""
    client = one_shot_client(s3.url)
    policy = generate_bucket_policy(bucket, principals=[OWN_ARN], deny_unconditional_delete=deletes)
    policy["Statement"] = [
        x for x in policy["Statement"] if x["Sid"] != "DenyOverwriteOfRegistryVersions"
    ]
    put_policy(client, bucket, policy)
    result = policy_probe(client, bucket)
    assert result.status == "fail"
    assert "lacks DenyOverwriteOfRegistryVersions" in result.detail
    assert "lakelock policy" in result.detail
    assert "put-bucket-policy" in result.detail
    assert_bucket_empty(client, bucket)
    current = generate_bucket_policy(
        bucket, principals=[OWN_ARN], create_only_manifests=False, deny_unconditional_delete=deletes
    )
    put_policy(client, bucket, current)
    assert policy_probe(client, bucket).status == "pass"


def test_policy_probe_fails_when_stray_writes_get_through(s3: S3Endpoint, bucket: str) -> None:
    """A lakelock policy that does not bind this caller lets an unconditional PUT through:
    the probe fails and says so."""
    client = one_shot_client(s3.url)
    policy = generate_bucket_policy(bucket, principals=["arn:aws:iam::123456789012:role/other"])
    put_policy(client, bucket, policy)
    result = policy_probe(client, bucket)
    assert result.status == "fail"
    assert "unconditional PutObject in datasets/ was accepted" in result.detail
    assert_bucket_empty(client, bucket)


def test_policy_probe_fails_when_the_policy_blocks_lakelock_itself(
    s3: S3Endpoint, bucket: str
) -> None:
    """A policy denying every PUT to metastore/ (the AWS blog's mistake, taken further) blocks
    lakelock's own conditional writes: the probe fails naming the refused write."""
    client = one_shot_client(s3.url)
    policy = generate_bucket_policy(bucket, principals=[OWN_ARN])
    policy["Statement"].append(
        {
            "Sid": "DenyAllMetastoreWrites",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:PutObject",
            "Resource": f"arn:aws:s3:::{bucket}/metastore/*",
        }
    )
    put_policy(client, bucket, policy)
    result = policy_probe(client, bucket)
    assert result.status == "fail"
    assert "refuses lakelock's own create-only PutObject in metastore/" in result.detail


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (None, "no policy"),
        (
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "Other",
                        "Effect": "Deny",
                        "Principal": "*",
                        "Action": "s3:DeleteBucket",
                        "Resource": "arn:aws:s3:::BUCKET",
                    }
                ],
            },
            "no lakelock statements",
        ),
    ],
)
def test_policy_probe_skips_without_a_lakelock_policy(
    s3: S3Endpoint, bucket: str, policy: dict[str, Any] | None, reason: str
) -> None:
    """No bucket policy, or one without lakelock's statements: nothing to check, skipped with
    the reason (and not counted as a failure)."""
    client = one_shot_client(s3.url)
    if policy is not None:
        text = orjson.dumps(policy).decode().replace("BUCKET", bucket)
        client.put_bucket_policy(Bucket=bucket, Policy=text)
    result = policy_probe(client, bucket)
    assert result.status == "skip"
    assert reason in result.detail


def test_a_crashing_probe_is_that_probes_failure(s3: S3Endpoint, bucket: str) -> None:
    """An unexpected exception inside a probe fails that probe with its message; a lost
    connection ends the run instead (there is nothing left to probe)."""

    def crash(scratch: Scratch) -> Any:
        raise RuntimeError("probe bug\nsecond line")

    def unreachable(scratch: Scratch) -> Any:
        raise EndpointConnectionError(endpoint_url="http://nowhere")

    scratch = Scratch(one_shot_client(s3.url), bucket, "scratch/")
    assert run_probe(Probe("crash", "required", crash), scratch) == (
        "fail",
        "RuntimeError: probe bug",
    )
    with pytest.raises(EndpointConnectionError):
        run_probe(Probe("gone", "required", unreachable), scratch)


@pytest.fixture
def doctor_cli(
    s3: S3Endpoint, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], tuple[int, list[str]]]:
    """``lakelock doctor`` in process, against the endpoint: exit status and output lines."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "lakelock")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")

    def run(bucket: str) -> tuple[int, list[str]]:
        status = main(["doctor", f"s3://{bucket}/lake", "--endpoint-url", s3.url])
        return status, capsys.readouterr().out.splitlines()

    return run


@pytest.mark.parametrize("mode", ["ignore", "refuse"])
def test_a_store_without_start_after_is_not_safe(
    s3: S3Endpoint,
    bucket: str,
    mode: str,
    doctor_cli: Callable[[str], tuple[int, list[str]]],
) -> None:
    """The endpoint acting as a store that ignores ListObjectsV2's StartAfter (lists from the
    start, as an S3 Express One Zone directory bucket does) or refuses it: that required
    probe fails, the verdict is NOT SAFE naming it, exit 1, and the scratch is cleaned."""
    s3.configure(lacking={"list-start-after": mode})  # type: ignore[dict-item]
    status, lines = doctor_cli(bucket)
    assert status == 1
    name = "ListObjectsV2 after StartAfter, in key order"
    row = next(line for line in lines if line.startswith(name))
    assert " required " in row
    assert " FAIL " in row
    assert ("listed 3 of them" if mode == "ignore" else "501") in row
    assert name in lines[-1]
    assert_bucket_empty(s3.client(), bucket)


def test_a_store_copying_replaced_sources_is_not_safe(
    s3: S3Endpoint, bucket: str, doctor_cli: Callable[[str], tuple[int, list[str]]]
) -> None:
    """The endpoint acting as a store that ignores copy-source conditions: that required
    probe fails, the verdict is NOT SAFE naming it, exit 1."""
    s3.configure(lacking={"copy-source-conditions": "ignore"})
    status, lines = doctor_cli(bucket)
    assert status == 1
    row = next(line for line in lines if line.startswith("copy-source-if-match (UploadPartCopy)"))
    assert " required " in row
    assert " FAIL " in row
    assert lines[-1].startswith("NOT SAFE")
    assert "copy-source-if-match (UploadPartCopy)" in lines[-1]


@pytest.mark.parametrize(
    ("lacking", "vacuum"),
    [
        ({}, "vacuum: deletes with DeleteObjects and per-key ETags"),
        ({"delete-objects-etag": "ignore"}, "vacuum: deletes one object per request"),
        (
            {"delete-objects-etag": "ignore", "delete-if-match": "refuse"},
            "vacuum: refuses to delete here",
        ),
    ],
)
def test_the_vacuum_line_says_how_vacuum_deletes(
    s3: S3Endpoint,
    bucket: str,
    doctor_cli: Callable[[str], tuple[int, list[str]]],
    lacking: dict[str, str],
    vacuum: str,
) -> None:
    """The delete probes are labelled ``vacuum`` and the summary says what vacuum does on this
    store: batches, one object per request, or refuses (LocalStack 2026.3's case). None of it
    makes lakelock unsafe: exit 0."""
    s3.configure(lacking=lacking)  # type: ignore[arg-type]
    status, lines = doctor_cli(bucket)
    assert status == 0, lines
    assert any(line.startswith(vacuum) for line in lines), lines
    for name in ("DeleteObjects with per-key ETag", "conditional DeleteObject (If-Match)"):
        row = next(line for line in lines if line.startswith(name))
        assert " vacuum " in row
    assert lines[-1] == "lakelock can run safely on this store."
    assert_bucket_empty(s3.client(), bucket)


def result(name: str, needed: Any, status: Any) -> ProbeResult:
    return ProbeResult(name, needed, status, "detail")


def test_a_required_probe_that_did_not_pass_is_not_safe() -> None:
    """Safe means every required probe passed: a required probe skipped (not shown to hold)
    is as unsafe as a failed one; skipped or failed probes of other needs are not."""
    passing = [result("a", "required", "pass"), result("b", "optional", "fail")]
    assert verdict(passing).ok
    assert verdict([*passing, result("policy", "recommended", "skip")]).ok
    skipped = verdict([*passing, result("c", "required", "skip")])
    assert not skipped.ok
    assert [r.name for r in skipped.unsafe] == ["c"]
    warned = verdict([*passing, result("policy", "recommended", "fail")])
    assert warned.ok
    assert [r.name for r in warned.warnings] == ["policy"]


def test_the_docs_list_every_probe_and_what_it_is_needed_for() -> None:
    """docs/ARCHITECTURE.md's table of what the doctor probes is :data:`PROBES`, row by row
    (name, what it is needed for), so the S3 features the docs say lakelock needs are the
    ones the doctor checks."""
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("| probe | needed |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    rows = [[cell.strip() for cell in row.strip("|").split("|")] for row in table.splitlines()]
    assert rows == [[p.name, p.needed] for p in PROBES]
