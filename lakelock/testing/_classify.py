"""Which S3 API operation a path-style request is, from its method, path, query and headers
(what the gateway's faults, counts, policies and key locks go by)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

__all__ = ["OPERATIONS", "S3Request", "classify"]


@dataclass(frozen=True)
class S3Request:
    """What the gateway needs to know about one request."""

    method: str
    operation: str
    bucket: str | None
    key: str | None
    query: Mapping[str, list[str]]
    access_key: str | None

    @property
    def mutating(self) -> bool:
        return self.operation in _KEY_WRITES


_KEY_WRITES = frozenset(
    {"PutObject", "CopyObject", "CompleteMultipartUpload", "DeleteObject", "DeleteObjects"}
)


def classify(
    method: str, raw_path: str, query: Mapping[str, list[str]], headers: Mapping[str, str]
) -> S3Request:
    """Name the S3 API operation of a path-style request."""
    path = raw_path.split("?", 1)[0]
    bucket_text, _, key_text = path.lstrip("/").partition("/")
    bucket = unquote(bucket_text) or None
    key = unquote(key_text) if key_text else None
    copy_source = "x-amz-copy-source" in headers
    if bucket is None:
        operation = "ListBuckets"
    elif key is None:
        operation = _bucket_operation(method, query)
    elif method == "PUT":
        if "partNumber" in query and "uploadId" in query:
            operation = "UploadPartCopy" if copy_source else "UploadPart"
        elif "tagging" in query:
            operation = "PutObjectTagging"
        else:
            operation = "CopyObject" if copy_source else "PutObject"
    elif method == "POST":
        if "uploads" in query:
            operation = "CreateMultipartUpload"
        elif "uploadId" in query:
            operation = "CompleteMultipartUpload"
        else:
            operation = "PostObject"
    elif method == "DELETE":
        operation = "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    elif method == "HEAD":
        operation = "HeadObject"
    else:
        operation = "ListParts" if "uploadId" in query else "GetObject"
    auth = headers.get("authorization", "")
    access_key = None
    if "Credential=" in auth:
        access_key = auth.split("Credential=", 1)[1].split("/", 1)[0]
    return S3Request(method, operation, bucket, key, query, access_key)


_BUCKET_SUBRESOURCES = ("policy", "versioning", "uploads", "versions", "location", "acl", "cors")


def _bucket_operation(method: str, query: Mapping[str, list[str]]) -> str:
    if method == "POST" and "delete" in query:
        return "DeleteObjects"
    sub = next((s for s in _BUCKET_SUBRESOURCES if s in query), None)
    if sub == "uploads":
        return "ListMultipartUploads"
    if sub == "versions":
        return "ListObjectVersions"
    verb = {"GET": "Get", "PUT": "Put", "DELETE": "Delete", "HEAD": "Head"}.get(method, method)
    if sub is not None:
        return f"{verb}Bucket{sub.capitalize()}"
    if method == "GET":
        return "ListObjectsV2" if query.get("list-type") == ["2"] else "ListObjects"
    return {"PUT": "CreateBucket", "DELETE": "DeleteBucket", "HEAD": "HeadBucket"}.get(
        method, method
    )


#: Every S3 operation name :func:`classify` gives a request: what a fault rule's operation
#: glob must match one of (the names are S3's, case included).
OPERATIONS: frozenset[str] = frozenset(
    {
        "ListBuckets",
        "DeleteObjects",
        "ListMultipartUploads",
        "ListObjectVersions",
        "ListObjects",
        "ListObjectsV2",
        "CreateBucket",
        "DeleteBucket",
        "HeadBucket",
        "UploadPart",
        "UploadPartCopy",
        "PutObjectTagging",
        "CopyObject",
        "PutObject",
        "CreateMultipartUpload",
        "CompleteMultipartUpload",
        "PostObject",
        "AbortMultipartUpload",
        "DeleteObject",
        "HeadObject",
        "ListParts",
        "GetObject",
    }
    | {
        f"{verb}Bucket{sub.capitalize()}"
        for verb in ("Get", "Put", "Delete", "Head")
        for sub in _BUCKET_SUBRESOURCES
        if sub not in {"uploads", "versions"}
    }
)
