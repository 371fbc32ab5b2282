"""An endpoint given credentials checks every request's SigV4 signature as S3 does (what
``lakelock serve`` does with the key and secret it prints): the forms clients use pass, a
request its credentials do not sign is refused with S3's answer. Raw boto3 and raw HTTP."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from lakelock.testing import DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, S3Endpoint, client_kwargs

BUCKET = "signed"


@pytest.fixture(scope="module")
def signed() -> Iterator[S3Endpoint]:
    """An endpoint that knows two access keys, both with the default secret."""
    credentials = {DEFAULT_ACCESS_KEY: DEFAULT_SECRET_KEY, "etl": DEFAULT_SECRET_KEY}
    with S3Endpoint(credentials=credentials) as s3:
        s3.create_bucket(BUCKET)
        yield s3


def refusal(call: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    response = info.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def raw(url: str, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> int:
    """The status of a request sent as written."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_what_clients_sign_is_accepted(signed: S3Endpoint) -> None:
    """Keys and query values with spaces, pluses, '=', '~', '!' and non-ASCII, for each known
    access key, in the Authorization header and in a presigned (SigV4) URL."""
    key = "day=2026-01-01/a b+c~d!é.parquet"
    for access_key in (DEFAULT_ACCESS_KEY, "etl"):
        client = signed.client(access_key=access_key)
        client.put_object(Bucket=BUCKET, Key=key, Body=b"rows")
        listing = client.list_objects_v2(
            Bucket=BUCKET, Prefix="day=2026-01-01/a b+", StartAfter="a+b c"
        )
        assert [o["Key"] for o in listing["Contents"]] == [key]
    presigning = signed.client(signature_version="s3v4")
    url = presigning.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key})
    target = urlsplit(url)
    assert raw(signed.url, "GET", f"{target.path}?{target.query}", {}) == 200
    stretched = target.query.replace("X-Amz-Expires=3600", "X-Amz-Expires=9999")
    assert stretched != target.query
    assert raw(signed.url, "GET", f"{target.path}?{stretched}", {}) == 403


def test_what_the_credentials_do_not_sign_is_refused(signed: S3Endpoint) -> None:
    """Another secret: 403 SignatureDoesNotMatch; an unknown access key: 403
    InvalidAccessKeyId; no signature: 403 AccessDenied; Signature Version 2: 400
    InvalidRequest. Nothing is written."""
    once = {"retries": {"total_max_attempts": 1}}
    wrong = boto3.client(
        "s3", **{**client_kwargs(signed.url), "aws_secret_access_key": "not-the-secret"}
    )
    assert refusal(wrong.put_object, Bucket=BUCKET, Key="w", Body=b"x") == (
        403,
        "SignatureDoesNotMatch",
    )
    stranger = signed.client(access_key="stranger", **once)
    assert refusal(stranger.put_object, Bucket=BUCKET, Key="w", Body=b"x") == (
        403,
        "InvalidAccessKeyId",
    )
    assert raw(signed.url, "PUT", f"/{BUCKET}/w", {}, b"x") == 403
    version2 = signed.client(signature_version="s3", **once)
    assert refusal(version2.put_object, Bucket=BUCKET, Key="w", Body=b"x") == (
        400,
        "InvalidRequest",
    )
    assert refusal(signed.client().head_object, Bucket=BUCKET, Key="w")[0] == 404


def test_a_body_other_than_the_signed_one_is_refused(signed: S3Endpoint) -> None:
    """A request whose body is not the one its x-amz-content-sha256 (signed) names: 400
    XAmzContentSHA256Mismatch, nothing written."""
    request = AWSRequest("PUT", f"{signed.url}/{BUCKET}/swapped", data=b"signed body")
    S3SigV4Auth(Credentials(DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY), "s3", "us-east-1").add_auth(
        request
    )
    headers = dict(request.headers.items())
    assert raw(signed.url, "PUT", f"/{BUCKET}/swapped", headers, b"signed body") == 200
    assert raw(signed.url, "PUT", f"/{BUCKET}/swapped", headers, b"other body!") == 400
    got = signed.client().get_object(Bucket=BUCKET, Key="swapped")["Body"].read()
    assert got == b"signed body"
