"""Requests' AWS Signature Version 4 checked against known credentials, as S3 checks them
(``lakelock serve`` checks them against the key and secret it prints).

moto accepts any credentials, so a wrong secret or an access key from another environment
goes unnoticed until the code meets real S3. S3 answers (as AWS words them):

- an access key it does not know: ``403 InvalidAccessKeyId``;
- a signature other than the one computed with the key's secret: ``403
  SignatureDoesNotMatch``;
- no signature: ``403 AccessDenied`` (an anonymous caller); another scheme than
  ``AWS4-HMAC-SHA256`` (Signature Version 2): ``400 InvalidRequest``; a credential or header
  that cannot be read: ``400 AuthorizationHeaderMalformed``;
- a signed payload hash (``x-amz-content-sha256``) that is not the body's: ``400
  XAmzContentSHA256Mismatch``.

Both forms of SigV4 are checked: the ``Authorization`` header, and the query string of a
presigned URL. The canonical request is built from the request as it arrived, following
AWS's specification for S3 (the path is not normalised, each path segment and query
parameter is URI-encoded once). The request's time is not checked against the clock (S3
refuses one more than 15 minutes off), nor its region against the endpoint's: a local
endpoint has no region of its own.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from urllib.parse import quote, unquote, unquote_plus

from lakelock.testing._wsgi import Response, s3_error

__all__ = ["signature_failure"]

ALGORITHM = "AWS4-HMAC-SHA256"
_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


def signature_failure(
    *,
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    credentials: Mapping[str, str],
) -> Response | None:
    """What S3 answers a request that ``credentials`` (access key id -> secret) do not
    sign, or ``None`` if they do. ``path`` and ``query`` are as the request line has them
    (still percent-encoded); ``headers`` by lower-case name."""
    params = _query_pairs(query)
    given = dict(params)
    authorization = headers.get("authorization")
    if authorization is not None:
        if not authorization.startswith(ALGORITHM + " "):
            return s3_error(
                "400 Bad Request",
                "InvalidRequest",
                "The authorization mechanism you have provided is not supported. Please use "
                f"{ALGORITHM}.",
            )
        fields = dict(
            part.strip().split("=", 1)
            for part in authorization[len(ALGORITHM) :].split(",")
            if "=" in part
        )
        credential = fields.get("Credential", "")
        signed = fields.get("SignedHeaders", "")
        signature = fields.get("Signature", "")
        when = headers.get("x-amz-date") or headers.get("date", "")
        payload = headers.get("x-amz-content-sha256", "")
    elif given.get("X-Amz-Algorithm") == ALGORITHM:
        credential = given.get("X-Amz-Credential", "")
        signed = given.get("X-Amz-SignedHeaders", "")
        signature = given.get("X-Amz-Signature", "")
        when = given.get("X-Amz-Date", "")
        payload = "UNSIGNED-PAYLOAD"
        params = [(k, v) for k, v in params if k != "X-Amz-Signature"]
    else:
        return s3_error("403 Forbidden", "AccessDenied", "Access Denied")
    access_key, _, scope = credential.partition("/")
    if scope.count("/") != 3 or not scope.endswith("/aws4_request") or not signed or not when:
        return s3_error(
            "400 Bad Request",
            "AuthorizationHeaderMalformed",
            "The authorization header is malformed; the Credential, SignedHeaders, Signature "
            "or date is missing or not of the form AWS expects.",
        )
    secret = credentials.get(access_key)
    if secret is None:
        return s3_error(
            "403 Forbidden",
            "InvalidAccessKeyId",
            "The AWS Access Key Id you provided does not exist in our records.",
        )
    canonical = "\n".join(
        [
            method,
            quote(unquote(path), safe="/~") or "/",
            _canonical_query(params),
            *(f"{name}:{_header_value(headers, name)}" for name in signed.split(";")),
            "",
            signed,
            payload,
        ]
    )
    to_sign = "\n".join([ALGORITHM, when, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature.strip()):
        return s3_error(
            "403 Forbidden",
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your key and signing method.",
        )
    if _HEX_SHA256.fullmatch(payload) and hashlib.sha256(body).hexdigest() != payload:
        return s3_error(
            "400 Bad Request",
            "XAmzContentSHA256Mismatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )
    return None


def _query_pairs(query: str) -> list[tuple[str, str]]:
    """The query string's parameters, decoded once, ``+`` as a space as S3 reads it (some
    clients send a space so and sign it as ``%20``; a plus is sent as ``%2B``)."""
    pairs = []
    for part in query.split("&"):
        if part:
            name, _, value = part.partition("=")
            pairs.append((unquote_plus(name), unquote_plus(value)))
    return pairs


def _canonical_query(pairs: list[tuple[str, str]]) -> str:
    encoded = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in encoded)


def _header_value(headers: Mapping[str, str], name: str) -> str:
    """A signed header's value as it is signed: trimmed, runs of spaces as one."""
    return " ".join(headers.get(name, "").split())
