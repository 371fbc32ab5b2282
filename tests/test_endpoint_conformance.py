"""Pins every S3 behaviour lakelock relies on ("S3 facts lakelock relies on" in
docs/ARCHITECTURE.md) against the embedded endpoint,
and -- opt-in, ``python -m pytest -m localstack`` -- against LocalStack's S3, an independent
implementation (``scripts/localstack.sh``).

These talk raw boto3, not lakelock's adapter: if moto (or the gateway in front of it) drifts from
what AWS S3 does, a test here fails before any protocol test misbehaves.

Where LocalStack (2026.3) answers otherwise, the test pins LocalStack's answer too, so a change
on either side shows:

- ``DeleteObject`` with ``If-Match``: 501 NotImplemented (S3 honours it on general purpose
  buckets since September 2025).
- ``DeleteObjects`` per-key ``ETag``: ignored, the entry is deleted anyway. Together with the
  501 above, lakelock's ``delete_if_unchanged`` finds no safe way to delete and vacuum refuses
  to delete on LocalStack (``lakelock doctor`` says so).
- Completing a multipart upload a second time: 404 NoSuchUpload (S3 and the embedded endpoint
  answer the first completion's result again, which lakelock relies on when an SDK retry
  follows a lost answer; on LocalStack lakelock resolves it by reading the object back).
- ``CompleteMultipartUpload`` with ``If-Match`` of the current ETag, the object having been
  overwritten since the upload began: 409 ConditionalRequestConflict where the embedded
  endpoint answers 200. S3 documents a 409 for a conflicting operation during the upload (then
  restart the upload, which lakelock does), so both answers are S3's.
- A bug: ``CopyObject`` with ``If-None-Match: *`` onto an existing key answers 412, but the
  destination's bytes are gone: its metadata stays, a GET breaks off mid-body. lakelock never
  copies with ``CopyObject`` (``UploadPartCopy`` + a conditional completion instead).
- The same bug where a ``PutObject`` over an existing key is refused for its digest (400
  BadDigest): the old object's bytes are gone.
- ``CompleteMultipartUpload`` with a document that lists no part: 400 InvalidRequest (the
  embedded endpoint, as S3 once did for a completion with no body at all: MalformedXML).
- ``DeleteObjects`` of more than 1,000 keys: deletes them all (S3 and the embedded endpoint
  answer 400 MalformedXML).
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
from typing import Any

import pytest
from botocore.exceptions import ClientError, ResponseStreamingError

from lakelock.testing import S3Endpoint
from tests._localstack import Target
from tests._support import wait_until

FIVE_MIB = 5 * 1024 * 1024

# Raw S3 behaviour, unconditional writes included: no bucket policy here.
pytestmark = pytest.mark.unguarded


def status_code(error: ClientError) -> tuple[int, str]:
    return error.response["ResponseMetadata"]["HTTPStatusCode"], error.response["Error"]["Code"]


def fails(call: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    return status_code(info.value)


def multipart(client: Any, bucket: str, key: str, body: bytes, **condition: str) -> dict[str, Any]:
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    part = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=body)
    return dict(
        Bucket=bucket,
        Key=key,
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
        **condition,
    )


def test_create_only_put_on_missing_key_succeeds(target: Target) -> None:
    """If-None-Match: * on a new key writes it."""
    client, bucket = target.client, target.bucket
    response = client.put_object(Bucket=bucket, Key="a", Body=b"1", IfNoneMatch="*")
    assert response["ETag"] == f'"{hashlib.md5(b"1").hexdigest()}"'


def test_create_only_put_on_existing_key_is_412(target: Target) -> None:
    """If-None-Match: * on an existing key answers 412 PreconditionFailed, object unchanged."""
    client, bucket = target.client, target.bucket
    client.put_object(Bucket=bucket, Key="a", Body=b"1")
    assert fails(client.put_object, Bucket=bucket, Key="a", Body=b"2", IfNoneMatch="*") == (
        412,
        "PreconditionFailed",
    )
    assert client.get_object(Bucket=bucket, Key="a")["Body"].read() == b"1"


def test_if_match_put_with_current_etag_replaces(target: Target) -> None:
    """If-Match with the current ETag replaces the object and returns a new ETag."""
    client, bucket = target.client, target.bucket
    etag = client.put_object(Bucket=bucket, Key="a", Body=b"1")["ETag"]
    new = client.put_object(Bucket=bucket, Key="a", Body=b"2", IfMatch=etag)["ETag"]
    assert new != etag
    assert client.get_object(Bucket=bucket, Key="a")["Body"].read() == b"2"


def test_if_match_put_with_stale_etag_is_412(target: Target) -> None:
    """If-Match with an old ETag answers 412 and leaves the object alone."""
    client, bucket = target.client, target.bucket
    etag = client.put_object(Bucket=bucket, Key="a", Body=b"1")["ETag"]
    client.put_object(Bucket=bucket, Key="a", Body=b"2", IfMatch=etag)
    assert fails(client.put_object, Bucket=bucket, Key="a", Body=b"3", IfMatch=etag) == (
        412,
        "PreconditionFailed",
    )
    assert client.get_object(Bucket=bucket, Key="a")["Body"].read() == b"2"


#: Stands for the ETag of the object a case writes first.
CURRENT = "current ETag"


@pytest.mark.parametrize(
    ("existing", "conditions", "answer"),
    [
        pytest.param(
            False, {"IfMatch": '"abc"'}, (404, "NoSuchKey"), id="if-match-on-missing-key-is-404"
        ),
        pytest.param(
            True,
            {"IfMatch": CURRENT, "IfNoneMatch": "*"},
            (501, "NotImplemented"),
            id="both-conditions-together-are-501",
        ),
        pytest.param(
            False,
            {"IfNoneMatch": '"abc"'},
            (501, "NotImplemented"),
            id="if-none-match-other-than-star-is-501",
        ),
    ],
)
def test_put_conditions_refused(
    target: Target, existing: bool, conditions: dict[str, str], answer: tuple[int, str]
) -> None:
    """PUTs refused for their conditions: If-Match on a key that does not exist answers 404
    NoSuchKey, not 412; If-Match and If-None-Match on one PUT, or If-None-Match other than
    '*', answer 501 NotImplemented."""
    client, bucket = target.client, target.bucket
    if existing:
        etag: str = client.put_object(Bucket=bucket, Key="a", Body=b"1")["ETag"]
        conditions = {name: etag if v == CURRENT else v for name, v in conditions.items()}
    assert fails(client.put_object, Bucket=bucket, Key="a", Body=b"2", **conditions) == answer


def test_complete_multipart_create_only_on_existing_is_412(target: Target) -> None:
    """CompleteMultipartUpload with If-None-Match: * loses to an object written meanwhile."""
    client, bucket = target.client, target.bucket
    request = multipart(client, bucket, "big", b"x" * FIVE_MIB, IfNoneMatch="*")
    client.put_object(Bucket=bucket, Key="big", Body=b"winner")
    assert fails(client.complete_multipart_upload, **request) == (412, "PreconditionFailed")
    assert client.get_object(Bucket=bucket, Key="big")["Body"].read() == b"winner"


def test_complete_multipart_if_match_stale_is_412(target: Target) -> None:
    """CompleteMultipartUpload honours If-Match (moto alone ignores it)."""
    client, bucket = target.client, target.bucket
    etag = client.put_object(Bucket=bucket, Key="root", Body=b"v1")["ETag"]
    request = multipart(client, bucket, "root", b"x" * FIVE_MIB, IfMatch=etag)
    client.put_object(Bucket=bucket, Key="root", Body=b"v2", IfMatch=etag)
    assert fails(client.complete_multipart_upload, **request) == (412, "PreconditionFailed")
    assert client.get_object(Bucket=bucket, Key="root")["Body"].read() == b"v2"


def test_complete_multipart_if_match_current_succeeds(target: Target) -> None:
    """CompleteMultipartUpload with the current ETag replaces the object."""
    client, bucket = target.client, target.bucket
    etag = client.put_object(Bucket=bucket, Key="root", Body=b"v1")["ETag"]
    request = multipart(client, bucket, "root", b"y" * FIVE_MIB, IfMatch=etag)
    client.complete_multipart_upload(**request)
    assert client.head_object(Bucket=bucket, Key="root")["ContentLength"] == FIVE_MIB


def test_complete_multipart_if_match_missing_is_404(target: Target) -> None:
    """CompleteMultipartUpload with If-Match on a missing key answers 404."""
    client, bucket = target.client, target.bucket
    request = multipart(client, bucket, "root", b"x" * FIVE_MIB, IfMatch='"abc"')
    assert fails(client.complete_multipart_upload, **request)[0] == 404


def test_complete_multipart_twice_is_idempotent(target: Target) -> None:
    """Completing an upload that already completed succeeds again (the SDK-retry case).
    LocalStack: 404 NoSuchUpload."""
    client, bucket = target.client, target.bucket
    request = multipart(client, bucket, "big", b"z" * FIVE_MIB, IfNoneMatch="*")
    first = client.complete_multipart_upload(**request)
    if target.localstack:
        assert fails(client.complete_multipart_upload, **request) == (404, "NoSuchUpload")
        return
    second = client.complete_multipart_upload(**request)
    assert first["ETag"] == second["ETag"]


def test_complete_multipart_if_match_after_an_overwrite(target: Target) -> None:
    """The object overwritten while an upload is in flight; completing with If-Match of the
    current ETag replaces it (the embedded endpoint). LocalStack: 409
    ConditionalRequestConflict, which S3 documents for a conflicting operation during the upload
    (restart the upload), and the object stays as overwritten."""
    client, bucket = target.client, target.bucket
    first = client.put_object(Bucket=bucket, Key="root", Body=b"v1")["ETag"]
    upload = client.create_multipart_upload(Bucket=bucket, Key="root")["UploadId"]
    part = client.upload_part(Bucket=bucket, Key="root", UploadId=upload, PartNumber=1, Body=b"v3")
    current = client.put_object(Bucket=bucket, Key="root", Body=b"v2", IfMatch=first)["ETag"]
    request = dict(
        Bucket=bucket,
        Key="root",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
        IfMatch=current,
    )
    if target.localstack:
        assert fails(client.complete_multipart_upload, **request) == (
            409,
            "ConditionalRequestConflict",
        )
        assert client.get_object(Bucket=bucket, Key="root")["Body"].read() == b"v2"
        client.abort_multipart_upload(Bucket=bucket, Key="root", UploadId=upload)
        return
    client.complete_multipart_upload(**request)
    assert client.get_object(Bucket=bucket, Key="root")["Body"].read() == b"v3"


def test_copy_object_destination_if_none_match(target: Target) -> None:
    """CopyObject honours If-None-Match on the destination (moto alone ignores it).
    LocalStack's bug: it answers 412 but the destination's bytes are gone (its metadata
    stays, a GET breaks off)."""
    client, bucket = target.client, target.bucket
    client.put_object(Bucket=bucket, Key="src", Body=b"source")
    client.put_object(Bucket=bucket, Key="dst", Body=b"taken")
    source = {"Bucket": bucket, "Key": "src"}
    assert fails(
        client.copy_object, Bucket=bucket, Key="dst", CopySource=source, IfNoneMatch="*"
    ) == (412, "PreconditionFailed")
    if target.localstack:
        with pytest.raises(ResponseStreamingError):
            client.get_object(Bucket=bucket, Key="dst")["Body"].read()
    else:
        assert client.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"taken"
    client.copy_object(Bucket=bucket, Key="new", CopySource=source, IfNoneMatch="*")
    assert client.get_object(Bucket=bucket, Key="new")["Body"].read() == b"source"


def test_copy_object_destination_if_match(target: Target) -> None:
    """CopyObject honours If-Match on the destination: stale 412, missing 404."""
    client, bucket = target.client, target.bucket
    client.put_object(Bucket=bucket, Key="src", Body=b"source")
    client.put_object(Bucket=bucket, Key="dst", Body=b"old")
    source = {"Bucket": bucket, "Key": "src"}
    assert fails(
        client.copy_object, Bucket=bucket, Key="dst", CopySource=source, IfMatch='"stale"'
    ) == (412, "PreconditionFailed")
    assert (
        fails(client.copy_object, Bucket=bucket, Key="gone", CopySource=source, IfMatch='"x"')[0]
        == 404
    )


def test_delete_if_match(target: Target) -> None:
    """DeleteObject with If-Match: stale ETag 412 (object kept), missing key 404, match deletes.
    LocalStack: 501 NotImplemented, object kept."""
    client, bucket = target.client, target.bucket
    etag = client.put_object(Bucket=bucket, Key="a", Body=b"1")["ETag"]
    if target.localstack:
        for condition in ('"stale"', etag):
            assert fails(client.delete_object, Bucket=bucket, Key="a", IfMatch=condition) == (
                501,
                "NotImplemented",
            )
        assert client.get_object(Bucket=bucket, Key="a")["Body"].read() == b"1"
        return
    assert fails(client.delete_object, Bucket=bucket, Key="a", IfMatch='"stale"') == (
        412,
        "PreconditionFailed",
    )
    client.delete_object(Bucket=bucket, Key="a", IfMatch=etag)
    assert fails(client.head_object, Bucket=bucket, Key="a")[0] == 404
    assert fails(client.delete_object, Bucket=bucket, Key="a", IfMatch=etag)[0] == 404


def test_delete_objects_per_key_etag(target: Target) -> None:
    """DeleteObjects honours each key's ETag: mismatches are errors and stay (moto ignores).
    LocalStack ignores them too: the mismatching entry is deleted."""
    client, bucket = target.client, target.bucket
    good = client.put_object(Bucket=bucket, Key="good", Body=b"1")["ETag"]
    client.put_object(Bucket=bucket, Key="bad", Body=b"2")
    client.put_object(Bucket=bucket, Key="plain", Body=b"3")
    response = client.delete_objects(
        Bucket=bucket,
        Delete={
            "Objects": [
                {"Key": "good", "ETag": good},
                {"Key": "bad", "ETag": '"0000"'},
                {"Key": "plain"},
            ]
        },
    )
    if target.localstack:
        assert sorted(d["Key"] for d in response["Deleted"]) == ["bad", "good", "plain"]
        assert client.list_objects_v2(Bucket=bucket).get("Contents", []) == []
        return
    assert sorted(d["Key"] for d in response["Deleted"]) == ["good", "plain"]
    assert [(e["Key"], e["Code"]) for e in response["Errors"]] == [("bad", "PreconditionFailed")]
    remaining = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert remaining == ["bad"]


def test_concurrent_conditional_write_gets_409(s3: S3Endpoint, client: Any, bucket: str) -> None:
    """With concurrent_conflicts on, a conditional write meeting one in flight gets 409."""
    s3.configure(concurrent_conflicts=True)
    s3.inject("hold", operation="PutObject", bucket=bucket, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(client.put_object, Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")
        wait_until(lambda: s3.stalled() == 1)
        assert fails(client.put_object, Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*") == (
            409,
            "ConditionalRequestConflict",
        )
        s3.release_stalls()
        first.result(timeout=30)
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"1"


def test_racing_creates_have_one_winner_at_the_server(target: Target) -> None:
    """16 racing If-None-Match creates of one key: exactly one 200, fifteen 412s."""
    client, bucket = target.client, target.bucket

    def create(n: int) -> str:
        try:
            client.put_object(Bucket=bucket, Key="k", Body=str(n).encode(), IfNoneMatch="*")
        except ClientError as error:
            return error.response["Error"]["Code"]
        return "ok"

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(create, range(16)))
    assert outcomes.count("ok") == 1
    assert outcomes.count("PreconditionFailed") == 15


# -- what S3 refuses, and stores nothing of -----------------------------------------------------


def stored(client: Any, bucket: str, key: str) -> bytes | None:
    """The bytes stored under ``key``, or ``None``."""
    try:
        data: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        if status_code(error) != (404, "NoSuchKey"):
            raise
        return None
    return data


#: A digest of the right size that matches no body these tests send.
WRONG = {
    "ContentMD5": base64.b64encode(b"\0" * 16).decode(),
    "ChecksumCRC32": base64.b64encode(b"\0" * 4).decode(),
    "ChecksumSHA256": base64.b64encode(b"\0" * 32).decode(),
}


@pytest.mark.parametrize("digest", ["ContentMD5", "ChecksumCRC32", "ChecksumSHA256"])
def test_a_body_that_does_not_match_its_digest_is_refused(target: Target, digest: str) -> None:
    """A PutObject or UploadPart whose body does not match its Content-MD5 or its
    x-amz-checksum-crc32/sha256 answers 400 BadDigest and stores nothing: a body spoilt on the
    way in is caught when it is written, not when (and if) it is read back. moto alone stores
    it and answers 200. LocalStack's bug: a refused overwrite leaves the old object's
    metadata without its bytes (a GET breaks off)."""
    client, bucket = target.client, target.bucket
    assert fails(
        client.put_object, Bucket=bucket, Key="k", Body=b"data", **{digest: WRONG[digest]}
    ) == (400, "BadDigest")
    assert stored(client, bucket, "k") is None
    client.put_object(Bucket=bucket, Key="k", Body=b"old")
    assert fails(
        client.put_object, Bucket=bucket, Key="k", Body=b"new", **{digest: WRONG[digest]}
    ) == (400, "BadDigest")
    if target.localstack:
        with pytest.raises(ResponseStreamingError):
            stored(client, bucket, "k")
    else:
        assert stored(client, bucket, "k") == b"old"
    upload = client.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    part = {digest: WRONG[digest]}
    assert fails(
        client.upload_part,
        Bucket=bucket,
        Key="big",
        UploadId=upload,
        PartNumber=1,
        Body=b"p",
        **part,
    ) == (400, "BadDigest")
    assert client.list_parts(Bucket=bucket, Key="big", UploadId=upload).get("Parts", []) == []
    client.abort_multipart_upload(Bucket=bucket, Key="big", UploadId=upload)


@pytest.mark.parametrize(
    ("digest", "answer"),
    [
        pytest.param("ContentMD5", (400, "InvalidDigest"), id="content-md5"),
        pytest.param("ChecksumSHA256", (400, "InvalidRequest"), id="checksum-sha256"),
    ],
)
def test_a_digest_that_is_not_one_is_refused(
    target: Target, digest: str, answer: tuple[int, str]
) -> None:
    """A Content-MD5 or x-amz-checksum-sha256 that is not the base64 of a digest of its size
    answers 400 (InvalidDigest, InvalidRequest) and stores nothing."""
    client, bucket = target.client, target.bucket
    bad = base64.b64encode(b"\0" * 5).decode()
    assert fails(client.put_object, Bucket=bucket, Key="k", Body=b"x", **{digest: bad}) == answer
    assert stored(client, bucket, "k") is None


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz"],
)
def test_a_body_is_stored_whatever_its_content_type(target: Target, content_type: str) -> None:
    """A PutObject (and an UploadPart) whose Content-Type is a form's stores its body, under
    that Content-Type: moto alone parses the body as a form and stores an empty object, a
    user's data silently lost."""
    client, bucket = target.client, target.bucket
    body = b"a=1&b=2\r\n--xyz\r\nnot a form"
    client.put_object(Bucket=bucket, Key="k", Body=body, ContentType=content_type)
    got = client.get_object(Bucket=bucket, Key="k")
    assert (got["Body"].read(), got["ContentType"]) == (body, content_type)
    upload = client.create_multipart_upload(Bucket=bucket, Key="big", ContentType=content_type)
    parts = [
        client.upload_part(
            Bucket=bucket, Key="big", UploadId=upload["UploadId"], PartNumber=number, Body=data
        )["ETag"]
        for number, data in enumerate([b"=" * FIVE_MIB, body], start=1)
    ]
    client.complete_multipart_upload(
        Bucket=bucket,
        Key="big",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(parts, 1)]},
    )
    assert stored(client, bucket, "big") == b"=" * FIVE_MIB + body


@pytest.mark.parametrize("operation", ["PutObject", "CompleteMultipartUpload", "CopyObject"])
def test_if_match_star_on_a_write_is_501(target: Target, operation: str) -> None:
    """If-Match: * on PutObject, CompleteMultipartUpload and CopyObject answers 501
    NotImplemented, on an existing key as on a missing one, and writes nothing: S3's writes
    take If-Match with an ETag only (AWS answers so, LocalStack records AWS's answer). The
    embedded endpoint used to read it as "any object" (200, or 404 on a missing key)."""
    client, bucket = target.client, target.bucket
    client.put_object(Bucket=bucket, Key="src", Body=b"source")
    for key in ("taken", "missing"):
        if key == "taken":
            client.put_object(Bucket=bucket, Key=key, Body=b"old")
        if operation == "PutObject":
            call, request = client.put_object, dict(Bucket=bucket, Key=key, Body=b"new")
        elif operation == "CopyObject":
            source = {"Bucket": bucket, "Key": "src"}
            call, request = client.copy_object, dict(Bucket=bucket, Key=key, CopySource=source)
        else:
            call, request = client.complete_multipart_upload, multipart(client, bucket, key, b"n")
        assert fails(call, **request, IfMatch="*") == (501, "NotImplemented")
        assert stored(client, bucket, key) == (b"old" if key == "taken" else None)


def test_completing_an_upload_that_names_no_parts_is_400(target: Target) -> None:
    """CompleteMultipartUpload naming no parts stores nothing: with no body at all, 400
    InvalidRequest (AWS's answer as LocalStack records it; an older S3 answered
    MalformedXML); with a document that lists no part, 400 MalformedXML. moto alone answers
    the first 500. LocalStack answers the second InvalidRequest too."""
    client, bucket = target.client, target.bucket
    upload = client.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    client.upload_part(Bucket=bucket, Key="big", UploadId=upload, PartNumber=1, Body=b"p")
    request = dict(Bucket=bucket, Key="big", UploadId=upload)
    assert fails(client.complete_multipart_upload, **request) == (400, "InvalidRequest")
    empty = fails(client.complete_multipart_upload, **request, MultipartUpload={"Parts": []})
    assert empty == ((400, "InvalidRequest") if target.localstack else (400, "MalformedXML"))
    assert stored(client, bucket, "big") is None
    assert len(client.list_parts(**request)["Parts"]) == 1  # the upload goes on


def test_completing_an_upload_never_created_is_404(target: Target) -> None:
    """CompleteMultipartUpload of an upload id that was never created for the key (or was
    aborted, or completed another key) answers 404 NoSuchUpload and stores nothing; moto alone
    answers 500."""
    client, bucket = target.client, target.bucket
    request = multipart(client, bucket, "big", b"p")
    assert fails(client.complete_multipart_upload, **{**request, "UploadId": "never-created"}) == (
        404,
        "NoSuchUpload",
    )
    done = multipart(client, bucket, "done", b"d")
    client.complete_multipart_upload(**done)
    assert fails(client.complete_multipart_upload, **{**done, "Key": "big"}) == (
        404,
        "NoSuchUpload",
    )
    client.abort_multipart_upload(Bucket=bucket, Key="big", UploadId=request["UploadId"])
    assert fails(client.complete_multipart_upload, **request) == (404, "NoSuchUpload")
    assert stored(client, bucket, "big") is None


def test_delete_objects_of_more_than_1000_keys_is_400(target: Target) -> None:
    """DeleteObjects naming more than 1,000 keys answers 400 MalformedXML (S3's answer to
    the request over its limit) and deletes nothing; 1,000 are deleted. moto alone deletes
    them all. LocalStack does too: it does not enforce the limit."""
    client, bucket = target.client, target.bucket
    client.put_object(Bucket=bucket, Key="0", Body=b"x")
    too_many = {"Objects": [{"Key": str(n)} for n in range(1001)]}
    if target.localstack:
        client.delete_objects(Bucket=bucket, Delete=too_many)
        assert stored(client, bucket, "0") is None
        return
    assert fails(client.delete_objects, Bucket=bucket, Delete=too_many) == (400, "MalformedXML")
    assert stored(client, bucket, "0") == b"x"
    client.delete_objects(Bucket=bucket, Delete={"Objects": too_many["Objects"][:1000]})
    assert stored(client, bucket, "0") is None
