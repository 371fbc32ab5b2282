"""Bucket-policy enforcement for the gateway: who is asking, and does the policy let them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lakelock.testing._gateway import S3Request

__all__ = ["DEFAULT_PRINCIPAL_ACCOUNT", "bucket_policy_check"]

# The account moto's server pretends every caller belongs to.
DEFAULT_PRINCIPAL_ACCOUNT = "123456789012"


def bucket_policy_check(
    policies: Mapping[str, Mapping[str, Any]], principals: Mapping[str, str]
) -> Callable[[S3Request, Mapping[str, str]], bool]:
    """A gateway ``policy_check`` enforcing ``policies`` (bucket name → policy document, kept
    up to date by the gateway on PutBucketPolicy). ``principals`` maps access key ids to
    principal ARNs; an unmapped key acts as ``arn:aws:iam::<account>:user/<access key>``."""

    def check(request: S3Request, headers: Mapping[str, str]) -> bool:
        if request.bucket is None:
            return True
        policy = policies.get(request.bucket)
        if policy is None:
            return True
        from lakelock.testing._policy_eval import is_allowed, request_context

        principal = None
        if request.access_key is not None:
            principal = principals.get(
                request.access_key,
                f"arn:aws:iam::{DEFAULT_PRINCIPAL_ACCOUNT}:user/{request.access_key}",
            )
        context = request_context(
            operation=request.operation,
            bucket=request.bucket,
            key=request.key,
            headers=headers,
            principal=principal,
        )
        return is_allowed(policy, context)

    return check
