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
    elif _OBJECT_SUBRESOURCES.intersection(query) and method in {"GET", "PUT", "DELETE"}:
        operation = _object_subresource_operation(method, query)
    elif method == "PUT":
        if "partNumber" in query and "uploadId" in query:
            operation = "UploadPartCopy" if copy_source else "UploadPart"
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


_BUCKET_SUBRESOURCES = (
    "policy",
    "versioning",
    "uploads",
    "versions",
    "location",
    "acl",
    "cors",
    "lifecycle",
    "tagging",
)
#: Bucket subresources whose operations S3 names otherwise than ``<Verb>Bucket<Sub>``.
_BUCKET_NAMES = {
    ("GET", "lifecycle"): "GetBucketLifecycleConfiguration",
    ("PUT", "lifecycle"): "PutBucketLifecycleConfiguration",
}
#: An object's subresources: their requests read or change the subresource, not the object.
_OBJECT_SUBRESOURCES = frozenset({"tagging", "acl"})


def _object_subresource_operation(method: str, query: Mapping[str, list[str]]) -> str:
    """``GetObjectTagging``, ``PutObjectAcl``, ``DeleteObjectTagging``...: a request on an
    object's subresource is not a read, write or delete of the object (a policy judges it by
    its own action; a fault for ``DeleteObject`` does not strike it)."""
    sub = "Tagging" if "tagging" in query else "Acl"
    return f"{method.capitalize()}Object{sub}"


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
        return _BUCKET_NAMES.get((method, sub), f"{verb}Bucket{sub.capitalize()}")
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
        "GetObjectTagging",
        "PutObjectTagging",
        "DeleteObjectTagging",
        "GetObjectAcl",
        "PutObjectAcl",
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
        _bucket_operation(method, {sub: [""]})
        for method in ("GET", "PUT", "DELETE", "HEAD")
        for sub in _BUCKET_SUBRESOURCES
    }
)
