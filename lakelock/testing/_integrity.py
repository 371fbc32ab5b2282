"""A request body checked against the digests its client sent, as S3 checks it.

moto stores a body whatever its ``Content-MD5`` or ``x-amz-checksum-*`` say, so a body spoilt
on the way in is stored and found out only when it is read back (if the reader checks). S3
refuses it, and stores nothing (answers as AWS words them):

- ``Content-MD5`` that is not the base64 of 16 bytes: ``400 InvalidDigest``; that does not
  match the body: ``400 BadDigest``. Checked on every request with a body.
- ``x-amz-checksum-crc32``, ``-crc32c``, ``-crc64nvme``, ``-sha1``, ``-sha256`` that is not
  the base64 of a digest of its algorithm's size: ``400 InvalidRequest``; more than one of
  them: ``400 InvalidRequest``; one that does not match the body: ``400 BadDigest``. Checked
  on every request with a body but ``CompleteMultipartUpload``, where these headers give the
  whole object's checksum, not the body's.

CRC32C and CRC64NVME need ``awscrt`` (botocore's ``crt`` extra); where it is not installed,
a body under one of them is stored unchecked (refusing it would refuse every upload of a
client that uses them). A body sent in ``aws-chunked`` encoding carries its checksum in a
trailer, which moto reads; it is left to moto.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from collections.abc import Callable, Mapping

from lakelock.testing._wsgi import Response, s3_error

__all__ = ["digest_failure"]

_CHECKSUM_PREFIX = "x-amz-checksum-"


def _crt(name: str) -> Callable[[bytes], bytes] | None:
    """``awscrt``'s CRC ``name`` as a function of the body to its big-endian bytes, or
    ``None`` where ``awscrt`` is not installed."""
    try:
        from awscrt import checksums  # noqa: PLC0415 - optional: botocore's `crt` extra
    except ImportError:
        return None
    crc = getattr(checksums, name)
    size = 8 if name == "crc64nvme" else 4
    return lambda body: int(crc(body)).to_bytes(size, "big")


#: Each checksum algorithm: its digest's size in bytes, and how to compute it here (``None``:
#: it cannot be computed on this machine).
_ALGORITHMS: dict[str, tuple[int, Callable[[bytes], bytes] | None]] = {
    "crc32": (4, lambda body: zlib.crc32(body).to_bytes(4, "big")),
    "crc32c": (4, _crt("crc32c")),
    "crc64nvme": (8, _crt("crc64nvme")),
    "sha1": (20, lambda body: hashlib.sha1(body, usedforsecurity=False).digest()),
    "sha256": (32, lambda body: hashlib.sha256(body).digest()),
}


def _decoded(value: str, size: int) -> bytes | None:
    """``value`` as the base64 of ``size`` bytes, or ``None`` if it is not."""
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == size else None


def digest_failure(operation: str, headers: Mapping[str, str], body: bytes) -> Response | None:
    """The 400 S3 answers to ``body`` under these ``headers`` (lower-case names), or ``None``
    if its digests hold (or there are none to check)."""
    if "aws-chunked" in headers.get("content-encoding", "") or headers.get(
        "x-amz-content-sha256", ""
    ).startswith("STREAMING-"):
        return None
    md5 = headers.get("content-md5")
    if md5 is not None:
        expected = _decoded(md5, 16)
        if expected is None:
            return s3_error(
                "400 Bad Request", "InvalidDigest", "The Content-MD5 you specified was invalid."
            )
        if hashlib.md5(body, usedforsecurity=False).digest() != expected:
            return s3_error(
                "400 Bad Request",
                "BadDigest",
                "The Content-MD5 you specified did not match what we received.",
            )
    if operation == "CompleteMultipartUpload":
        return None
    given = [
        (name.removeprefix(_CHECKSUM_PREFIX), value)
        for name, value in headers.items()
        if name.startswith(_CHECKSUM_PREFIX) and name.removeprefix(_CHECKSUM_PREFIX) in _ALGORITHMS
    ]
    if len(given) > 1:
        return s3_error(
            "400 Bad Request",
            "InvalidRequest",
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
        )
    for algorithm, value in given:
        size, compute = _ALGORITHMS[algorithm]
        expected = _decoded(value, size)
        if expected is None:
            return s3_error(
                "400 Bad Request",
                "InvalidRequest",
                f"Value for {_CHECKSUM_PREFIX}{algorithm} header is invalid.",
            )
        if compute is not None and compute(body) != expected:
            return s3_error(
                "400 Bad Request",
                "BadDigest",
                f"The {algorithm.upper()} you specified did not match the calculated checksum.",
            )
    return None
