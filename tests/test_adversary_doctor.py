"""Adversarial tests of ``lakelock doctor`` (README, "The command line": ``lakelock doctor
s3://bucket`` answers "is this store safe for lakelock?"): a bucket whose own settings will
destroy the lake on a date must not be called safe. The embedded endpoint stores lifecycle
rules as S3 does (it never runs them: what they would do is S3's documented behaviour)."""

from __future__ import annotations

from typing import Any

import pytest

from tests._support.processes import InProcess

pytestmark = pytest.mark.unguarded  # the doctor probes the bucket as its owner set it up

EXPIRE_ALL = {"ID": "tidy-up", "Status": "Enabled", "Filter": {"Prefix": ""}}


@pytest.mark.parametrize(
    "rule",
    [
        {**EXPIRE_ALL, "Expiration": {"Days": 90}},
        {**EXPIRE_ALL, "Filter": {"Prefix": "lake/metastore/"}, "Expiration": {"Days": 30}},
        {**EXPIRE_ALL, "Transitions": [{"Days": 30, "StorageClass": "DEEP_ARCHIVE"}]},
    ],
    ids=["expire-everything", "expire-the-metastore", "archive-everything"],
)
def test_a_lifecycle_rule_that_takes_the_lakes_objects_is_not_safe(
    client: Any, bucket: str, in_process: InProcess, s3: Any, rule: dict[str, Any]
) -> None:
    """A bucket's owner set "expire objects after 90 days" (or archive them to Deep Archive)
    for the whole bucket, as data buckets often are. S3 runs lifecycle rules by itself,
    whatever the bucket policy says: the registry's root of a lake nobody committed to for
    90 days, the snapshot of every dataset unchanged that long (its current version), its
    data files, its leases and lock tables are deleted (or made unreadable until restored):
    the lake reads as empty. The doctor, asked whether the store is safe for the lake at
    ``lake/``, must say not (exit status 1) and name the rule."""
    client.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": [rule]}
    )
    done = in_process("doctor", f"s3://{bucket}/lake", "--endpoint-url", s3.url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "tidy-up" in done.stdout


def test_lifecycle_rules_that_leave_the_lake_alone_are_safe(
    client: Any, bucket: str, in_process: InProcess, s3: Any
) -> None:
    """Rules that never touch a lake object keep the store safe: expiring another prefix
    (beside the lake's folders too),
    a tag lakelock never sets, noncurrent versions, unfinished uploads (lakelock aborts its
    own), or archiving to a class read at once (Glacier Instant Retrieval)."""
    rules = [
        {
            "ID": "logs",
            "Status": "Enabled",
            "Filter": {"Prefix": "logs/"},
            "Expiration": {"Days": 7},
        },
        {
            "ID": "tagged",
            "Status": "Enabled",
            "Filter": {"Tag": {"Key": "scratch", "Value": "yes"}},
            "Expiration": {"Days": 1},
        },
        {
            "ID": "old-versions",
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
        },
        {
            "ID": "instant",
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "Transitions": [{"Days": 30, "StorageClass": "GLACIER_IR"}],
        },
        {**EXPIRE_ALL, "Status": "Disabled", "Expiration": {"Days": 1}},
    ]
    client.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": rules}
    )
    done = in_process("doctor", f"s3://{bucket}/lake", "--endpoint-url", s3.url)
    assert done.returncode == 0, done.stdout + done.stderr
