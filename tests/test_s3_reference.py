"""An independent conformance set: the conditional requests lakelock makes, each checked against
what the AWS S3 API reference and user guide state, written from those statements rather than
from lakelock's design notes (tests/test_endpoint_conformance.py is the other set).

Every case is one request on one key, after a setup: the answer (status and error code) and
the key's content afterwards must be what the reference says. What a store does not support
must answer 501 NotImplemented and change nothing. The cases run against the embedded endpoint
in the default suite, and against LocalStack's S3 with ``-m localstack``, where a case pins
LocalStack's own answer when it departs (see the conformance set's docstring for those).

Sources (AWS, 2024-2026): PutObject, CompleteMultipartUpload, UploadPartCopy, DeleteObject,
DeleteObjects and HeadObject API references; User Guide "How to prevent object overwrites with
conditional writes" and "How to perform conditional deletes".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests._localstack import Target

pytestmark = pytest.mark.unguarded  # raw S3: unconditional writes set up each case

KEY = "k"
#: An ETag no object here has.
STALE = '"00000000000000000000000000000000"'

Answer = tuple[int, str]
OK: Answer = (200, "")
DELETED: Answer = (204, "")
PRECONDITION_FAILED: Answer = (412, "PreconditionFailed")
NO_SUCH_KEY: Answer = (404, "NoSuchKey")
NOT_IMPLEMENTED: Answer = (501, "NotImplemented")


@dataclass(frozen=True)
class Case:
    """``request(client, bucket, etag)`` is made after ``setup`` (the key's bodies, written in
    order; ``etag`` is the first one's ETag, or None); ``expected`` is the answer and
    ``after`` the key's content afterwards (None: absent)."""

    reference: str
    setup: tuple[bytes, ...]
    request: Callable[[Any, str, str | None], Any]
    expected: Answer
    after: bytes | None
    localstack: tuple[Answer, bytes | None] | None = None


def put(**conditions: Any) -> Callable[[Any, str, str | None], Any]:
    def request(client: Any, bucket: str, etag: str | None) -> Any:
        resolved = {k: (etag if v is ETAG else v) for k, v in conditions.items()}
        return client.put_object(Bucket=bucket, Key=KEY, Body=b"new", **resolved)

    return request


def complete(**conditions: Any) -> Callable[[Any, str, str | None], Any]:
    """A multipart upload of ``new`` (one part), completed under ``conditions``."""

    def request(client: Any, bucket: str, etag: str | None) -> Any:
        resolved = {k: (etag if v is ETAG else v) for k, v in conditions.items()}
        upload = client.create_multipart_upload(Bucket=bucket, Key=KEY)["UploadId"]
        part = client.upload_part(
            Bucket=bucket, Key=KEY, UploadId=upload, PartNumber=1, Body=b"new"
        )
        try:
            return client.complete_multipart_upload(
                Bucket=bucket,
                Key=KEY,
                UploadId=upload,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
                **resolved,
            )
        except ClientError:
            client.abort_multipart_upload(Bucket=bucket, Key=KEY, UploadId=upload)
            raise

    return request


def part_copy_over(source_etag: Any) -> Callable[[Any, str, str | None], Any]:
    """The key replaced by a copy of ``src`` (body ``new``): UploadPartCopy with
    x-amz-copy-source-if-match ``source_etag`` (``ETAG``: the ETag ``src`` had before it was
    replaced), then an unconditional completion."""

    def request(client: Any, bucket: str, etag: str | None) -> Any:
        first = client.put_object(Bucket=bucket, Key="src", Body=b"old source")["ETag"]
        current = client.put_object(Bucket=bucket, Key="src", Body=b"new")["ETag"]
        condition = first if source_etag is ETAG else current
        upload = client.create_multipart_upload(Bucket=bucket, Key=KEY)["UploadId"]
        try:
            part = client.upload_part_copy(
                Bucket=bucket,
                Key=KEY,
                UploadId=upload,
                PartNumber=1,
                CopySource={"Bucket": bucket, "Key": "src"},
                CopySourceIfMatch=condition,
            )
        except ClientError:
            client.abort_multipart_upload(Bucket=bucket, Key=KEY, UploadId=upload)
            raise
        return client.complete_multipart_upload(
            Bucket=bucket,
            Key=KEY,
            UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]},
        )

    return request


def delete(**conditions: Any) -> Callable[[Any, str, str | None], Any]:
    def request(client: Any, bucket: str, etag: str | None) -> Any:
        resolved = {k: (etag if v is ETAG else v) for k, v in conditions.items()}
        return client.delete_object(Bucket=bucket, Key=KEY, **resolved)

    return request


def delete_entry(**conditions: Any) -> Callable[[Any, str, str | None], Any]:
    """DeleteObjects with one entry for the key; its per-entry error is the answer."""

    def request(client: Any, bucket: str, etag: str | None) -> Any:
        entry = {"Key": KEY, **{k: (etag if v is ETAG else v) for k, v in conditions.items()}}
        response = client.delete_objects(Bucket=bucket, Delete={"Objects": [entry]})
        errors = response.get("Errors", [])
        if errors:
            return {"entry_error": errors[0]["Code"]}
        assert [d["Key"] for d in response["Deleted"]] == [KEY]
        return response

    return request


class _Etag:
    """Placeholder for the ETag of the setup's first body."""


ETAG: Any = _Etag()

CASES: dict[str, Case] = {
    "put-if-none-match-absent": Case(
        "PutObject If-None-Match: uploads the object only if the key name does not already exist",
        (),
        put(IfNoneMatch="*"),
        OK,
        b"new",
    ),
    "put-if-none-match-existing": Case(
        "PutObject If-None-Match: otherwise S3 returns 412 Precondition Failed",
        (b"old",),
        put(IfNoneMatch="*"),
        PRECONDITION_FAILED,
        b"old",
    ),
    "put-if-match-current": Case(
        "PutObject If-Match: uploads the object only if the ETag provided matches the object's",
        (b"old",),
        put(IfMatch=ETAG),
        OK,
        b"new",
    ),
    "put-if-match-stale": Case(
        "PutObject If-Match: if the ETag values do not match, 412 Precondition Failed",
        (b"old", b"newer"),
        put(IfMatch=ETAG),
        PRECONDITION_FAILED,
        b"newer",
    ),
    "put-if-match-absent": Case(
        "Conditional writes: If-Match on a key that does not exist answers 404 NoSuchKey",
        (),
        put(IfMatch=STALE),
        NO_SUCH_KEY,
        None,
    ),
    "put-if-none-match-etag": Case(
        "PutObject If-None-Match expects '*': another value is not implemented (501)",
        (b"old",),
        put(IfNoneMatch=STALE),
        NOT_IMPLEMENTED,
        b"old",
    ),
    "complete-if-none-match-absent": Case(
        "CompleteMultipartUpload If-None-Match: completes only if the key does not exist",
        (),
        complete(IfNoneMatch="*"),
        OK,
        b"new",
    ),
    "complete-if-none-match-existing": Case(
        "CompleteMultipartUpload If-None-Match: otherwise 412 Precondition Failed",
        (b"old",),
        complete(IfNoneMatch="*"),
        PRECONDITION_FAILED,
        b"old",
    ),
    "complete-if-match-current": Case(
        "CompleteMultipartUpload If-Match: completes only if the ETag matches the object's",
        (b"old",),
        complete(IfMatch=ETAG),
        OK,
        b"new",
    ),
    "complete-if-match-stale": Case(
        "CompleteMultipartUpload If-Match: if the ETags do not match, 412",
        (b"old", b"newer"),
        complete(IfMatch=ETAG),
        PRECONDITION_FAILED,
        b"newer",
    ),
    "complete-if-match-absent": Case(
        "Conditional writes: If-Match on a key that does not exist answers 404 NoSuchKey",
        (),
        complete(IfMatch=STALE),
        NO_SUCH_KEY,
        None,
    ),
    "part-copy-source-current": Case(
        "UploadPartCopy x-amz-copy-source-if-match: copies if the source's ETag matches",
        (b"old",),
        part_copy_over("current"),
        OK,
        b"new",
    ),
    "part-copy-source-replaced": Case(
        "UploadPartCopy x-amz-copy-source-if-match: otherwise 412 Precondition Failed",
        (b"old",),
        part_copy_over(ETAG),
        PRECONDITION_FAILED,
        b"old",
    ),
    "delete-if-match-current": Case(
        "Conditional deletes: a matching ETag deletes the object, 204 No Content",
        (b"old",),
        delete(IfMatch=ETAG),
        DELETED,
        None,
        localstack=(NOT_IMPLEMENTED, b"old"),
    ),
    "delete-if-match-stale": Case(
        "Conditional deletes: if the ETag does not match, 412 Precondition Failed",
        (b"old", b"newer"),
        delete(IfMatch=ETAG),
        PRECONDITION_FAILED,
        b"newer",
        localstack=(NOT_IMPLEMENTED, b"newer"),
    ),
    "delete-objects-etag-current": Case(
        "Conditional deletes: DeleteObjects deletes an entry whose ETag element matches",
        (b"old",),
        delete_entry(ETag=ETAG),
        OK,
        None,
    ),
    "delete-objects-etag-stale": Case(
        "Conditional deletes: an entry whose precondition fails is reported in an Error "
        "element and kept",
        (b"old", b"newer"),
        delete_entry(ETag=ETAG),
        (200, "entry:PreconditionFailed"),
        b"newer",
        localstack=(OK, None),
    ),
    "delete-if-match-last-modified-time": Case(
        "DeleteObject x-amz-if-match-last-modified-time (directory buckets): where it cannot "
        "be checked, 501 and nothing deleted",
        (b"old",),
        delete(IfMatchLastModifiedTime=parsedate_to_datetime("Wed, 01 Jan 2025 00:00:00 GMT")),
        NOT_IMPLEMENTED,
        b"old",
    ),
}


def answer_of(call: Callable[[], Any]) -> Answer:
    try:
        response = call()
    except ClientError as error:
        meta = error.response["ResponseMetadata"]
        return int(meta["HTTPStatusCode"]), str(error.response["Error"]["Code"])
    if "entry_error" in response:
        return 200, f"entry:{response['entry_error']}"
    return int(response["ResponseMetadata"]["HTTPStatusCode"]), ""


def content(client: Any, bucket: str) -> bytes | None:
    try:
        data: bytes = client.get_object(Bucket=bucket, Key=KEY)["Body"].read()
    except ClientError as error:
        if error.response["Error"]["Code"] == "NoSuchKey":
            return None
        raise
    return data


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference(target: Target, name: str) -> None:
    """One case of :data:`CASES`: the answer and the key's content afterwards."""
    case = CASES[name]
    client, bucket = target.client, target.bucket
    etags = [client.put_object(Bucket=bucket, Key=KEY, Body=body)["ETag"] for body in case.setup]
    answer = answer_of(lambda: case.request(client, bucket, etags[0] if etags else None))
    expected, after = case.expected, case.after
    if target.localstack and case.localstack is not None:
        expected, after = case.localstack
    assert answer == expected, case.reference
    assert content(client, bucket) == after, case.reference


def test_etags_agree_across_put_head_and_list(target: Target) -> None:
    """The ETag a write returns is the one HEAD and ListObjectsV2 report (vacuum deletes by
    the listed ETag, compare-and-swap writes by the read one), and every response carries a
    ``Date`` (leases take the server's clock from it)."""
    client, bucket = target.client, target.bucket
    written = client.put_object(Bucket=bucket, Key=KEY, Body=b"data")["ETag"]
    head = client.head_object(Bucket=bucket, Key=KEY)
    (listed,) = client.list_objects_v2(Bucket=bucket)["Contents"]
    assert head["ETag"] == listed["ETag"] == written
    date = head["ResponseMetadata"]["HTTPHeaders"]["date"]
    assert parsedate_to_datetime(date).tzinfo is not None


def test_part_copy_of_a_range(target: Target) -> None:
    """UploadPartCopy x-amz-copy-source-range copies exactly the bytes asked (lakelock copies
    large files in ranges): two ranged parts completed give the source back."""
    client, bucket = target.client, target.bucket
    source = bytes(range(256)) * 40_000  # 10 MB: the first part must be at least 5 MiB
    client.put_object(Bucket=bucket, Key="src", Body=source)
    upload = client.create_multipart_upload(Bucket=bucket, Key=KEY)["UploadId"]
    split = 6 * 1024 * 1024
    parts = []
    for number, (first, last) in enumerate([(0, split - 1), (split, len(source) - 1)], start=1):
        copied = client.upload_part_copy(
            Bucket=bucket,
            Key=KEY,
            UploadId=upload,
            PartNumber=number,
            CopySource={"Bucket": bucket, "Key": "src"},
            CopySourceRange=f"bytes={first}-{last}",
        )
        parts.append({"PartNumber": number, "ETag": copied["CopyPartResult"]["ETag"]})
    client.complete_multipart_upload(
        Bucket=bucket, Key=KEY, UploadId=upload, MultipartUpload={"Parts": parts}
    )
    assert content(client, bucket) == source
