"""The embedded endpoint where moto alone departs from S3: copy-source conditions, delete
conditions it can check (and 501 for those it cannot), ``If-Match: *`` on a delete, a GET
during a slow PUT of the same key, and acting as a store that lacks a feature. Raw boto3 and
raw HTTP."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError

from lakelock.testing import S3Endpoint
from tests._support import wait_until

pytestmark = pytest.mark.unguarded  # raw S3 behaviour: plain overwrites and deletes too


def fails(call: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    response = info.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def body(client: Any, bucket: str, key: str) -> bytes | None:
    try:
        data: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError:
        return None
    return data


def part_copy(client: Any, bucket: str, key: str, source: str, **conditions: Any) -> Any:
    """UploadPartCopy of ``source`` into a new upload of ``key``, under ``conditions``."""
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    try:
        return client.upload_part_copy(
            Bucket=bucket,
            Key=key,
            UploadId=upload,
            PartNumber=1,
            CopySource={"Bucket": bucket, "Key": source},
            **conditions,
        )
    finally:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)


# -- copy-source conditions ---------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["CopyObject", "UploadPartCopy"])
def test_copy_source_if_match_refuses_a_replaced_source(
    client: Any, bucket: str, operation: str
) -> None:
    """x-amz-copy-source-if-match with the ETag first read, after the source was replaced:
    412 and nothing copied; with the current ETag the copy goes."""
    first = client.put_object(Bucket=bucket, Key="src", Body=b"first")["ETag"]
    current = client.put_object(Bucket=bucket, Key="src", Body=b"second")["ETag"]
    source = {"Bucket": bucket, "Key": "src"}
    if operation == "CopyObject":
        assert fails(
            client.copy_object, Bucket=bucket, Key="dst", CopySource=source, CopySourceIfMatch=first
        ) == (412, "PreconditionFailed")
        assert body(client, bucket, "dst") is None
        client.copy_object(Bucket=bucket, Key="dst", CopySource=source, CopySourceIfMatch=current)
        assert body(client, bucket, "dst") == b"second"
    else:
        assert fails(part_copy, client=client, bucket=bucket, key="dst", source="src",
                     CopySourceIfMatch=first) == (412, "PreconditionFailed")  # fmt: skip
        copied = part_copy(client, bucket, "dst", "src", CopySourceIfMatch=current)
        assert copied["ResponseMetadata"]["HTTPStatusCode"] == 200


@pytest.mark.parametrize("operation", ["CopyObject", "UploadPartCopy"])
def test_copy_source_if_none_match(client: Any, bucket: str, operation: str) -> None:
    """x-amz-copy-source-if-none-match: the source's own ETag (or *) answers 412, another
    ETag copies."""
    etag = client.put_object(Bucket=bucket, Key="src", Body=b"data")["ETag"]
    for value in (etag, "*"):
        if operation == "CopyObject":
            refused = fails(client.copy_object, Bucket=bucket, Key="dst",
                            CopySource={"Bucket": bucket, "Key": "src"},
                            CopySourceIfNoneMatch=value)  # fmt: skip
        else:
            refused = fails(part_copy, client=client, bucket=bucket, key="dst", source="src",
                            CopySourceIfNoneMatch=value)  # fmt: skip
        assert refused == (412, "PreconditionFailed")
    other = '"0123456789abcdef0123456789abcdef"'
    if operation == "CopyObject":
        client.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"},
                           CopySourceIfNoneMatch=other)  # fmt: skip
        assert body(client, bucket, "dst") == b"data"
    else:
        part_copy(client, bucket, "dst", "src", CopySourceIfNoneMatch=other)


@pytest.mark.parametrize("operation", ["CopyObject", "UploadPartCopy"])
def test_a_copy_of_a_missing_source_is_no_such_key(
    client: Any, bucket: str, operation: str
) -> None:
    """A copy whose source does not exist is 404 NoSuchKey, as S3 answers it (moto answers
    UploadPartCopy's with no error document, which a client cannot tell from a server that
    is not S3)."""
    if operation == "CopyObject":
        refused = fails(client.copy_object, Bucket=bucket, Key="dst",
                        CopySource={"Bucket": bucket, "Key": "gone"})  # fmt: skip
    else:
        refused = fails(part_copy, client=client, bucket=bucket, key="dst", source="gone")
    assert refused == (404, "NoSuchKey")


def test_copy_source_dates(client: Any, bucket: str) -> None:
    """if-unmodified-since before the last change and if-modified-since at it answer 412;
    an if-match that holds overrides a failing if-unmodified-since; a failing if-none-match
    answers 412 whatever if-modified-since says; a modified-since date in the future is
    ignored (RFC 7232)."""
    etag = client.put_object(Bucket=bucket, Key="src", Body=b"data")["ETag"]
    changed = client.head_object(Bucket=bucket, Key="src")["LastModified"]
    before, after = changed - timedelta(hours=1), changed + timedelta(seconds=1)
    future = datetime.now(UTC) + timedelta(days=1)
    source = {"Bucket": bucket, "Key": "src"}

    def copy(**conditions: Any) -> Any:
        return client.copy_object(Bucket=bucket, Key="dst", CopySource=source, **conditions)

    assert fails(copy, CopySourceIfUnmodifiedSince=before) == (412, "PreconditionFailed")
    assert fails(copy, CopySourceIfModifiedSince=changed) == (412, "PreconditionFailed")
    assert fails(copy, CopySourceIfNoneMatch=etag, CopySourceIfModifiedSince=before) == (
        412,
        "PreconditionFailed",
    )
    copy(CopySourceIfUnmodifiedSince=after)
    copy(CopySourceIfModifiedSince=before)
    copy(CopySourceIfMatch=etag, CopySourceIfUnmodifiedSince=before)
    copy(CopySourceIfModifiedSince=future)
    assert body(client, bucket, "dst") == b"data"


def test_an_unreadable_copy_source_date_is_refused(endpoint: S3Endpoint, bucket: str) -> None:
    """A copy-source date that is not an HTTP date is a 400, not a condition ignored."""
    client = endpoint.client()
    client.put_object(Bucket=bucket, Key="src", Body=b"data")

    def bad_date(request: Any, **_: Any) -> None:
        request.headers["x-amz-copy-source-if-unmodified-since"] = "yesterday"

    client.meta.events.register("before-sign.s3.CopyObject", bad_date)
    assert fails(
        client.copy_object, Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"}
    ) == (400, "InvalidArgument")
    assert body(client, bucket, "dst") is None


# -- delete conditions --------------------------------------------------------------------------


def test_delete_if_match_size(client: Any, bucket: str) -> None:
    """x-amz-if-match-size: another size answers 412 and keeps the object, the right size
    deletes it, a missing key answers 204 (as S3 documents)."""
    client.put_object(Bucket=bucket, Key="k", Body=b"12345")
    assert fails(client.delete_object, Bucket=bucket, Key="k", IfMatchSize=4) == (
        412,
        "PreconditionFailed",
    )
    assert body(client, bucket, "k") == b"12345"
    client.delete_object(Bucket=bucket, Key="k", IfMatchSize=5)
    assert body(client, bucket, "k") is None
    gone = client.delete_object(Bucket=bucket, Key="k", IfMatchSize=9)
    assert gone["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_delete_conditions_that_cannot_be_checked_are_501(client: Any, bucket: str) -> None:
    """x-amz-if-match-last-modified-time, and conditions on a delete of one version, answer
    501 and delete nothing (never applied as if unconditional)."""
    etag = client.put_object(Bucket=bucket, Key="k", Body=b"data")["ETag"]
    changed = client.head_object(Bucket=bucket, Key="k")["LastModified"]
    assert fails(client.delete_object, Bucket=bucket, Key="k", IfMatchLastModifiedTime=changed) == (
        501,
        "NotImplemented",
    )
    assert fails(client.delete_object, Bucket=bucket, Key="k", VersionId="null", IfMatch=etag) == (
        501,
        "NotImplemented",
    )
    assert body(client, bucket, "k") == b"data"


def test_delete_objects_size_and_last_modified_time(client: Any, bucket: str) -> None:
    """DeleteObjects: a wrong per-key Size is a PreconditionFailed entry (object kept), the
    right one deletes; a LastModifiedTime entry makes the whole request 501."""
    for key in ("small", "right"):
        client.put_object(Bucket=bucket, Key=key, Body=b"12345")
    answer = client.delete_objects(
        Bucket=bucket,
        Delete={"Objects": [{"Key": "small", "Size": 1}, {"Key": "right", "Size": 5}]},
    )
    assert [d["Key"] for d in answer["Deleted"]] == ["right"]
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("small", "PreconditionFailed")]
    changed = client.head_object(Bucket=bucket, Key="small")["LastModified"]
    assert fails(
        client.delete_objects,
        Bucket=bucket,
        Delete={"Objects": [{"Key": "small", "LastModifiedTime": changed}]},
    ) == (501, "NotImplemented")
    assert body(client, bucket, "small") == b"12345"


def test_if_match_star_on_a_delete_means_the_object_exists(client: Any, bucket: str) -> None:
    """If-Match: * (RFC 7232: any current object) on DeleteObject: applied on an existing
    key, 404 on a missing one; moto alone compares '*' as an ETag. (S3's writes refuse it:
    test_endpoint_conformance.)"""
    client.put_object(Bucket=bucket, Key="k", Body=b"1")
    client.delete_object(Bucket=bucket, Key="k", IfMatch="*")
    assert body(client, bucket, "k") is None
    assert fails(client.delete_object, Bucket=bucket, Key="k", IfMatch="*") == (404, "NoSuchKey")


# -- reads during a slow write ------------------------------------------------------------------


def test_a_get_during_a_slow_put_serves_the_previous_object(s3: S3Endpoint, bucket: str) -> None:
    """A PUT whose body is still arriving (half sent, the rest held back by this test) does
    not hold up a GET of the same key: the GET answers the previous bytes at once; once the
    body is complete the new bytes are served."""
    client = s3.client(read_timeout=10, retries={"total_max_attempts": 1})
    client.put_object(Bucket=bucket, Key="k", Body=b"old" * 1000)
    s3.reset_stats()
    new = b"new" * 100_000
    url = urlsplit(s3.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        slow_put(connection, bucket, new, lambda: s3.stats().get("PutObject") == 1)
        assert body(client, bucket, "k") == b"old" * 1000
        connection.send(new[len(new) // 2 :])
        response = connection.getresponse()
        assert response.status == 200, response.read()
    finally:
        connection.close()
    assert body(client, bucket, "k") == new


def slow_put(connection: http.client.HTTPConnection, bucket: str, new: bytes, arrived: Any) -> None:
    """Start a PUT of ``new`` to ``k`` and send half its body; return once the server has
    it in hand."""
    connection.putrequest("PUT", f"/{bucket}/k")
    connection.putheader("Content-Length", str(len(new)))
    connection.putheader(
        "Authorization",
        "AWS4-HMAC-SHA256 Credential=lakelock/20250101/us-east-1/s3/aws4_request, "
        "SignedHeaders=host, Signature=0",
    )
    connection.endheaders()
    connection.send(new[: len(new) // 2])
    wait_until(arrived)


def test_a_put_whose_client_dies_mid_body_is_not_applied(s3: S3Endpoint, bucket: str) -> None:
    """A PUT whose client dies half-way through its body (a writer killed mid-upload):
    nothing of it is applied, as on S3 (400 IncompleteBody): the previous object stays.
    (Stored, the half body stood under the checksum the client sent for the whole, and every
    later GET of the key failed it: found by the crash run, a registry root left so.)"""
    client = s3.client(read_timeout=10, retries={"total_max_attempts": 1})
    client.put_object(Bucket=bucket, Key="k", Body=b"old" * 1000)
    s3.reset_stats()
    url = urlsplit(s3.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        slow_put(connection, bucket, b"new" * 100_000, lambda: s3.stats().get("PutObject") == 1)
        answered = s3.traffic()["out"]
    finally:
        connection.close()  # the client is gone, its body half sent
    # Answered (an error body), or applied (what the endpoint did before): either ends this.
    wait_until(lambda: s3.traffic()["out"] > answered or body(client, bucket, "k") != b"old" * 1000)
    assert body(client, bucket, "k") == b"old" * 1000


def test_a_get_during_a_held_put_serves_the_previous_object(s3: S3Endpoint, bucket: str) -> None:
    """A PUT held at the server while it holds its key (a write in progress): a GET of the
    key answers the previous object, the PUT lands once released."""
    client = s3.client(read_timeout=10, retries={"total_max_attempts": 1})
    client.put_object(Bucket=bucket, Key="k", Body=b"old")
    s3.inject("hold", operation="PutObject", bucket=bucket, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        put = pool.submit(client.put_object, Bucket=bucket, Key="k", Body=b"new")
        wait_until(lambda: s3.stalled() == 1)
        assert body(client, bucket, "k") == b"old"
        s3.release_stalls()
        put.result(timeout=30)
    assert body(client, bucket, "k") == b"new"


# -- acting as a store that lacks a feature -----------------------------------------------------


def test_acting_as_a_store_without_copy_source_conditions(s3: S3Endpoint, bucket: str) -> None:
    """lacking={"copy-source-conditions": ...}: "refuse" answers 501, "ignore" copies the
    replaced source as a store unaware of the header would; the default honours it again."""
    client = s3.client()
    first = client.put_object(Bucket=bucket, Key="src", Body=b"first")["ETag"]
    client.put_object(Bucket=bucket, Key="src", Body=b"second")
    source = {"Bucket": bucket, "Key": "src"}
    s3.configure(lacking={"copy-source-conditions": "refuse"})
    assert fails(
        client.copy_object, Bucket=bucket, Key="dst", CopySource=source, CopySourceIfMatch=first
    ) == (501, "NotImplemented")
    s3.configure(lacking={"copy-source-conditions": "ignore"})
    client.copy_object(Bucket=bucket, Key="dst", CopySource=source, CopySourceIfMatch=first)
    assert body(client, bucket, "dst") == b"second"
    s3.configure()
    assert fails(
        client.copy_object, Bucket=bucket, Key="dst", CopySource=source, CopySourceIfMatch=first
    ) == (412, "PreconditionFailed")


def test_unknown_lacking_features_are_refused(s3: S3Endpoint) -> None:
    """A misspelt feature or mode is an error naming the valid ones, not silently ignored."""
    with pytest.raises(ValueError, match="delete-objects-etag"):
        s3.configure(lacking={"delete-object-etag": "ignore"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="refuse"):
        s3.configure(lacking={"delete-if-match": "skip"})  # type: ignore[dict-item]


def test_connections_stay_open_between_requests(s3: S3Endpoint) -> None:
    """Like S3, the endpoint keeps a connection open for the next request: after an answer
    (even a refusal), and after a body the server never read (drained to its end, so the
    next request is read from where it starts). A chunked body, whose end is not known
    beforehand, closes the connection."""
    address = urlsplit(s3.url).netloc
    connection = http.client.HTTPConnection(address, timeout=10)
    try:
        connection.request("GET", "/_lakelock/stats")
        first = connection.getresponse()
        first.read()
        sock = connection.sock
        assert (first.status, first.will_close) == (200, False)
        # Refused (no such bucket): the body is read, and the connection kept.
        connection.request("PUT", "/some-bucket/key", body=b"x" * 70_000)
        refused = connection.getresponse()
        refused.read()
        assert (refused.status, refused.will_close) == (404, False)
        # A body nobody reads (the stats command takes none): drained, not taken for the
        # start of the next request.
        connection.request("GET", "/_lakelock/stats", body=b"GET /not-a-request HTTP/1.1\r\n")
        unread = connection.getresponse()
        unread.read()
        assert (unread.status, unread.will_close) == (200, False)
        connection.request("GET", "/_lakelock/traffic")
        last = connection.getresponse()
        assert (last.status, last.will_close) == (200, False)
        assert set(json.loads(last.read())) == {"in", "out"}
        assert connection.sock is sock  # one connection all along
        connection.request("PUT", "/some-bucket/key", body=iter([b"abc"]), encode_chunked=True)
        chunked = connection.getresponse()
        chunked.read()
        assert chunked.will_close
    finally:
        connection.close()


def test_the_endpoint_reports_the_cpu_its_process_used(s3: S3Endpoint, bucket: str) -> None:
    """``cpu_seconds`` is the serving process's CPU time, for benchmarks to tell the server's
    cost from the clients': it never goes back, and serving requests raises it."""
    client = s3.client()
    before = s3.cpu_seconds()
    for n in range(50):
        client.put_object(Bucket=bucket, Key=f"k{n}", Body=b"x" * 1000)
    after = s3.cpu_seconds()
    assert isinstance(before, float)
    assert after > before
