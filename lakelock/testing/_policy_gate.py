"""Bucket policies on the embedded endpoint: stored by the gateway, enforced per request.

moto would store a bucket policy and apply its Deny statements while ignoring their conditions
(denying every request a conditional Deny names), so policies never reach moto: the gateway
answers Put/Get/DeleteBucketPolicy itself and asks :class:`BucketPolicies` about every request.
Copies are authorised on both sides (``s3:GetObject`` on the source too); ``DeleteObjects`` is
authorised key by key, denied keys reported as ``AccessDenied`` entries, as S3 does.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from lakelock.testing._policy_context import (
    copy_source_request,
    delete_objects_requests,
    request_context,
)
from lakelock.testing._policy_eval import is_allowed, validate_policy

__all__ = ["DEFAULT_PRINCIPAL_ACCOUNT", "BucketPolicies"]

# The account moto's server pretends every caller belongs to.
DEFAULT_PRINCIPAL_ACCOUNT = "123456789012"


class BucketPolicies:
    """Policies by bucket, and who each access key is.

    ``principals`` maps access key ids to principal ARNs; an unmapped key acts as
    ``arn:aws:iam::123456789012:user/<access key>``.
    """

    def __init__(self, principals: Mapping[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._policies: dict[str, dict[str, Any]] = {}
        self.principals = dict(principals or {})

    def put(self, bucket: str, policy: Any) -> None:
        """Store ``policy`` for ``bucket``; ``ValueError`` if it is malformed."""
        if not isinstance(policy, dict):
            raise ValueError("a bucket policy is a JSON object")
        validate_policy(policy, bucket=bucket)
        with self._lock:
            self._policies[bucket] = policy

    def get(self, bucket: str) -> dict[str, Any] | None:
        with self._lock:
            return self._policies.get(bucket)

    def delete(self, bucket: str) -> None:
        with self._lock:
            self._policies.pop(bucket, None)

    def principal(self, access_key: str | None) -> str | None:
        if access_key is None:
            return None
        return self.principals.get(
            access_key, f"arn:aws:iam::{DEFAULT_PRINCIPAL_ACCOUNT}:user/{access_key}"
        )

    def allows(
        self,
        *,
        operation: str,
        bucket: str,
        key: str | None,
        headers: Mapping[str, str],
        query: Mapping[str, str],
        access_key: str | None,
    ) -> bool:
        """Whether the bucket's policy lets this request through (no policy: yes)."""
        policy = self.get(bucket)
        if policy is None or operation == "DeleteObjects":
            return True  # DeleteObjects is decided per key: see allows_delete
        who = self.principal(access_key)
        request = request_context(
            operation=operation, bucket=bucket, key=key, headers=headers, principal=who, query=query
        )
        if not is_allowed(policy, request):
            return False
        source = headers.get("x-amz-copy-source")
        if source is None:
            return True
        source_bucket = source.lstrip("/").split("/", 1)[0]
        source_policy = self.get(source_bucket)
        return source_policy is None or is_allowed(
            source_policy, copy_source_request(copy_source=source, principal=who)
        )

    def denied_deletes(
        self,
        *,
        bucket: str,
        entries: list[tuple[str, str | None]],
        headers: Mapping[str, str],
        access_key: str | None,
    ) -> set[str]:
        """The keys of a DeleteObjects request (``(key, etag)`` entries) the policy refuses."""
        policy = self.get(bucket)
        if policy is None:
            return set()
        requests = delete_objects_requests(
            bucket=bucket,
            entries=[(key, etag, None) for key, etag in entries],
            principal=self.principal(access_key),
            headers=headers,
        )
        return {
            key
            for (key, _), request in zip(entries, requests, strict=True)
            if not is_allowed(policy, request)
        }
