"""From an S3 API request to the authorisation question a bucket policy answers
(:class:`~lakelock.testing._policy_eval.PolicyRequest`).

:func:`request_context` maps an S3 API operation and its HTTP headers to the IAM action,
resource and S3 condition keys AWS would evaluate (S3 User Guide, "Enforce conditional writes",
"Enforce conditional deletes"; Service Authorization Reference for Amazon S3):

- ``PutObject``, ``CopyObject``, ``CompleteMultipartUpload``, ``PostObject``: ``s3:PutObject``
  with ``s3:ObjectCreationOperation = true``, plus ``s3:if-match``/``s3:if-none-match`` from
  the ``If-Match``/``If-None-Match`` headers when sent (``PostObject`` carries form fields, not
  these headers). ``CreateMultipartUpload``, ``UploadPart``, ``UploadPartCopy``:
  ``s3:PutObject`` with ``s3:ObjectCreationOperation = false`` and never the conditional keys
  (these APIs do not accept conditional headers). Copies also get ``s3:x-amz-copy-source``;
  ``x-amz-copy-source-if-*`` headers are preconditions on the *source* and set no key. The
  source side of a copy is a separate ``s3:GetObject`` request: :func:`copy_source_request`.
- ``DeleteObject``: ``s3:DeleteObject`` with ``s3:if-match`` from ``If-Match``; with a
  ``versionId`` query parameter, ``s3:DeleteObjectVersion`` with ``s3:versionid``.
  ``DeleteObjects`` is authorised per key, each entry's ``<ETag>`` acting as its ``If-Match``:
  call :func:`request_context` once per entry (``key`` = the entry's key, an ``If-Match``
  header = its ETag) or use :func:`delete_objects_requests`.
- ``GetObject``/``HeadObject``: ``s3:GetObject`` with ``s3:if-match``/``s3:if-none-match``
  when sent; with ``versionId``, ``s3:GetObjectVersion`` with ``s3:versionid`` and no
  conditional keys (the ``*Version`` actions take none). ``ListObjects``, ``ListObjectsV2``,
  ``ListObjectVersions``: ``s3:ListBucket``/``s3:ListBucketVersions`` with ``s3:prefix``,
  ``s3:delimiter``, ``s3:max-keys`` from the query. Every operation gets
  ``s3:x-amz-content-sha256`` when that header is present; ``PutObject``, ``CopyObject`` and
  ``CreateMultipartUpload`` also get ``s3:x-amz-acl``, ``s3:x-amz-server-side-encryption``,
  ``s3:x-amz-server-side-encryption-aws-kms-key-id``, ``s3:x-amz-storage-class`` and
  (``CopyObject``) ``s3:x-amz-metadata-directive`` when sent.
- A bucket's lifecycle rules and tags: ``s3:GetLifecycleConfiguration``/
  ``s3:PutLifecycleConfiguration``, ``s3:GetBucketTagging``/``s3:PutBucketTagging`` (their
  deletes are authorised by the ``Put`` action, as on S3).

Global keys (``aws:SecureTransport``, ``aws:SourceIp``...) are not produced; add them to a
:class:`PolicyRequest`'s context yourself if a policy under test needs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal
from urllib.parse import unquote

from lakelock.testing._policy_eval import PARTITIONS, PolicyRequest

__all__ = [
    "UnjudgedOperation",
    "copy_source_request",
    "delete_objects_requests",
    "request_context",
]


class UnjudgedOperation(ValueError):
    """An S3 operation this model of bucket policies does not judge (its action and
    condition keys are not in the table)."""


@dataclass(frozen=True)
class _Operation:
    action: str
    object_level: bool
    creates: Literal["true", "false", ""] = ""  # s3:ObjectCreationOperation, "" = not set
    conditional: tuple[str, ...] = ()  # headers that become same-named s3: condition keys
    copy: bool = False
    version_action: str = ""  # the action when a versionId query parameter is present
    listing: bool = False  # s3:prefix / s3:delimiter / s3:max-keys from the query


_BOTH = ("if-match", "if-none-match")
_IF_MATCH = ("if-match",)  # deletes: If-None-Match is not a delete precondition

_OPERATIONS: Mapping[str, _Operation] = MappingProxyType(
    {
        "PutObject": _Operation("s3:PutObject", True, "true", conditional=_BOTH),
        "CopyObject": _Operation("s3:PutObject", True, "true", conditional=_BOTH, copy=True),
        "CompleteMultipartUpload": _Operation("s3:PutObject", True, "true", conditional=_BOTH),
        "PostObject": _Operation("s3:PutObject", True, "true"),
        "CreateMultipartUpload": _Operation("s3:PutObject", True, "false"),
        "UploadPart": _Operation("s3:PutObject", True, "false"),
        "UploadPartCopy": _Operation("s3:PutObject", True, "false", copy=True),
        "AbortMultipartUpload": _Operation("s3:AbortMultipartUpload", True),
        "ListParts": _Operation("s3:ListMultipartUploadParts", True),
        "GetObject": _Operation(
            "s3:GetObject", True, conditional=_BOTH, version_action="s3:GetObjectVersion"
        ),
        "HeadObject": _Operation(
            "s3:GetObject", True, conditional=_BOTH, version_action="s3:GetObjectVersion"
        ),
        "DeleteObject": _Operation(
            "s3:DeleteObject", True, conditional=_IF_MATCH, version_action="s3:DeleteObjectVersion"
        ),
        "DeleteObjects": _Operation(
            "s3:DeleteObject", True, conditional=_IF_MATCH, version_action="s3:DeleteObjectVersion"
        ),
        "GetObjectTagging": _Operation(
            "s3:GetObjectTagging", True, version_action="s3:GetObjectVersionTagging"
        ),
        "PutObjectTagging": _Operation(
            "s3:PutObjectTagging", True, version_action="s3:PutObjectVersionTagging"
        ),
        "DeleteObjectTagging": _Operation(
            "s3:DeleteObjectTagging", True, version_action="s3:DeleteObjectVersionTagging"
        ),
        "GetObjectAcl": _Operation(
            "s3:GetObjectAcl", True, version_action="s3:GetObjectVersionAcl"
        ),
        "PutObjectAcl": _Operation(
            "s3:PutObjectAcl", True, version_action="s3:PutObjectVersionAcl"
        ),
        "ListObjects": _Operation("s3:ListBucket", False, listing=True),
        "ListObjectsV2": _Operation("s3:ListBucket", False, listing=True),
        "ListObjectVersions": _Operation("s3:ListBucketVersions", False, listing=True),
        "ListMultipartUploads": _Operation("s3:ListBucketMultipartUploads", False),
        "HeadBucket": _Operation("s3:ListBucket", False),
        "CreateBucket": _Operation("s3:CreateBucket", False),
        "DeleteBucket": _Operation("s3:DeleteBucket", False),
        "GetBucketLocation": _Operation("s3:GetBucketLocation", False),
        "GetBucketPolicy": _Operation("s3:GetBucketPolicy", False),
        "PutBucketPolicy": _Operation("s3:PutBucketPolicy", False),
        "DeleteBucketPolicy": _Operation("s3:DeleteBucketPolicy", False),
        "GetBucketVersioning": _Operation("s3:GetBucketVersioning", False),
        "PutBucketVersioning": _Operation("s3:PutBucketVersioning", False),
        "GetBucketAcl": _Operation("s3:GetBucketAcl", False),
        "PutBucketAcl": _Operation("s3:PutBucketAcl", False),
        "GetBucketCors": _Operation("s3:GetBucketCORS", False),
        "PutBucketCors": _Operation("s3:PutBucketCORS", False),
        "DeleteBucketCors": _Operation("s3:PutBucketCORS", False),
        "GetBucketLifecycleConfiguration": _Operation("s3:GetLifecycleConfiguration", False),
        "PutBucketLifecycleConfiguration": _Operation("s3:PutLifecycleConfiguration", False),
        "DeleteBucketLifecycle": _Operation("s3:PutLifecycleConfiguration", False),
        "GetBucketTagging": _Operation("s3:GetBucketTagging", False),
        "PutBucketTagging": _Operation("s3:PutBucketTagging", False),
        "DeleteBucketTagging": _Operation("s3:PutBucketTagging", False),
    }
)

# Request headers that set a same-named s3: condition key on object creations.
_CREATION_HEADER_KEYS = (
    "x-amz-acl",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-storage-class",
)


def request_context(
    *,
    operation: str,
    bucket: str,
    key: str | None,
    headers: Mapping[str, str],
    principal: str | None,
    query: Mapping[str, str] | None = None,
    partition: str = "aws",
) -> PolicyRequest:
    """Map one S3 API request to the :class:`PolicyRequest` S3 would authorise.

    ``operation`` is the S3 API name (``PutObject``, ``CompleteMultipartUpload``, ``ListObjectsV2``
    ...; see the module docstring for what each sets), ``headers`` the HTTP request headers
    (names case-insensitive), ``query`` the query parameters that matter (``versionId``,
    ``prefix``, ``delimiter``, ``max-keys``). Object operations need ``key``; bucket operations
    must not get one. ``DeleteObjects`` is one request per entry: pass the entry's key and its
    ``ETag`` as an ``If-Match`` header. An operation not in the table raises
    :class:`UnjudgedOperation` (a ``ValueError``).
    """
    spec = _OPERATIONS.get(operation)
    if spec is None:
        raise UnjudgedOperation(
            f"unknown or unsupported S3 operation {operation!r}: the endpoint's bucket "
            "policies judge only the operations lakelock and its tests send"
        )
    if partition not in PARTITIONS:
        raise ValueError(f"unknown AWS partition {partition!r}")
    if not bucket or "/" in bucket:
        raise ValueError(f"bad bucket name {bucket!r}")
    lowered = {name.lower(): value.strip() for name, value in headers.items()}
    params = dict(query or {})
    version_id = params.get("versionId")
    context: dict[str, str] = {}

    if spec.object_level:
        if not key and operation == "DeleteObjects":
            raise ValueError(
                "DeleteObjects is authorised per key: call request_context once per entry "
                "(with its ETag as If-Match) or use delete_objects_requests()"
            )
        if not key:
            raise ValueError(f"{operation} needs an object key")
        resource = f"arn:{partition}:s3:::{bucket}/{key}"
    else:
        if key is not None:
            raise ValueError(f"{operation} is a bucket operation; it takes no key (got {key!r})")
        resource = f"arn:{partition}:s3:::{bucket}"

    action = spec.action
    if version_id is not None and spec.version_action:
        action = spec.version_action
        context["s3:versionid"] = version_id
    if spec.creates:
        context["s3:objectcreationoperation"] = spec.creates
    # The *Version actions take no conditional keys: conditional deletes (and reads) apply to
    # the current version only.
    if action == spec.action:
        for header in spec.conditional:
            if header in lowered:
                context[f"s3:{header}"] = lowered[header]
    if spec.copy:
        if "x-amz-copy-source" not in lowered:
            raise ValueError(f"{operation} needs an x-amz-copy-source header")
        context["s3:x-amz-copy-source"] = _copy_source(lowered["x-amz-copy-source"])[0]
        if operation == "CopyObject" and "x-amz-metadata-directive" in lowered:
            context["s3:x-amz-metadata-directive"] = lowered["x-amz-metadata-directive"]
    if spec.creates and operation in ("PutObject", "CopyObject", "CreateMultipartUpload"):
        for header in _CREATION_HEADER_KEYS:
            if header in lowered:
                context[f"s3:{header}"] = lowered[header]
    if spec.listing:
        for param in ("prefix", "delimiter", "max-keys"):
            if param in params:
                context[f"s3:{param}"] = params[param]
    if "x-amz-content-sha256" in lowered:
        context["s3:x-amz-content-sha256"] = lowered["x-amz-content-sha256"]
    return PolicyRequest(action=action, resource=resource, principal=principal, context=context)


def copy_source_request(
    *, copy_source: str, principal: str | None, partition: str = "aws"
) -> PolicyRequest:
    """The read side of ``CopyObject``/``UploadPartCopy``: ``s3:GetObject`` (or
    ``s3:GetObjectVersion`` for ``?versionId=``) on the object the ``x-amz-copy-source`` header
    names. S3 requires both this and the destination's ``s3:PutObject``."""
    source, version_id = _copy_source(copy_source)
    if "/" not in source:
        raise ValueError(f"x-amz-copy-source {copy_source!r} does not name <bucket>/<key>")
    if version_id is None:
        return PolicyRequest("s3:GetObject", f"arn:{partition}:s3:::{source}", principal, {})
    return PolicyRequest(
        "s3:GetObjectVersion",
        f"arn:{partition}:s3:::{source}",
        principal,
        {"s3:versionid": version_id},
    )


def delete_objects_requests(
    *,
    bucket: str,
    entries: Iterable[tuple[str, str | None, str | None]],
    principal: str | None,
    headers: Mapping[str, str] | None = None,
    partition: str = "aws",
) -> list[PolicyRequest]:
    """One :class:`PolicyRequest` per ``(key, etag, version_id)`` entry of a ``DeleteObjects``
    body. S3 authorises each key on its own and reports a denied key as an ``AccessDenied``
    entry in the result, not as a failed request."""
    shared = {
        k: v for k, v in (headers or {}).items() if k.lower() not in ("if-match", "if-none-match")
    }
    requests = []
    for key, etag, version_id in entries:
        entry_headers = dict(shared)
        if etag is not None:
            entry_headers["If-Match"] = etag
        requests.append(
            request_context(
                operation="DeleteObjects",
                bucket=bucket,
                key=key,
                headers=entry_headers,
                principal=principal,
                query={"versionId": version_id} if version_id is not None else None,
                partition=partition,
            )
        )
    return requests


def _copy_source(header: str) -> tuple[str, str | None]:
    """``x-amz-copy-source`` → (``<bucket>/<key>`` as the condition key sees it, versionId)."""
    path, _, query = header.partition("?")
    version_id = None
    for part in query.split("&") if query else ():
        name, _, value = part.partition("=")
        if name == "versionId":
            version_id = unquote(value)
    return unquote(path).lstrip("/"), version_id
