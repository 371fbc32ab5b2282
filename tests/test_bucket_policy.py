"""Bucket policies: the generator (lakelock._policy), the evaluator the embedded endpoint uses
(lakelock.testing._policy_eval, with the requests of lakelock.testing._policy_context), and the
request matrix tying them to lakelock's own protocol.

The evaluator's semantics are AWS's (IAM "Condition operators", S3 "Enforce conditional
writes"/"Enforce conditional deletes"); tests/data/s3_condition_keys.json vendors the part of
AWS's service-authorization data the policies rely on.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import pytest

from lakelock._policy import DELETE_SIDS, generate_bucket_policy
from lakelock.errors import InvalidNameError
from lakelock.testing._policy_context import (
    copy_source_request,
    delete_objects_requests,
    request_context,
)
from lakelock.testing._policy_eval import PolicyRequest, evaluate, is_allowed, validate_policy

ROOT = Path(__file__).resolve().parent.parent
AUTH_DATA = json.loads((ROOT / "tests" / "data" / "s3_condition_keys.json").read_text("utf-8"))

BUCKET = "example-data-lake"
WRITER_ROLE = "arn:aws:iam::111111111111:role/etl-writer"
WRITER = "arn:aws:sts::111111111111:assumed-role/etl-writer/nightly-run"
OTHER_ROLE_SAME_ACCOUNT = "arn:aws:sts::111111111111:assumed-role/analyst/adhoc"
PARTNER = "arn:aws:sts::222222222222:assumed-role/partner-etl/batch-7"

DATA = "datasets/sales/year=2024/month=01/part-00000.parquet"
OTHER_DATA = "datasets/sales/year=2023/month=12/part-00000.parquet"
REGISTRY = "metastore/dataset_registry.json"
LEASE = "metastore/leases/compaction.json"
LOCK = "metastore/locks/sales.json"
MANIFEST = "metastore/manifests/sales/3f2a9c.json"
INTENT = "metastore/intents/01767225600000a1b2-3f2a9c.json"
SNAPSHOT = "metastore/snapshots/sales/3f2a9c-8e1d.json"
NODE = "metastore/nodes/sales/7b4e01-8e1d.json"
BACKUP = "metastore/backups/dataset_registry-41-9c0e2b.json"
PROBE = "metastore/probes/conditional-delete-5350ed63"
VIEW = "views/sales/iceberg/metadata/00000000000000000007.metadata.json"
DELTA_LOG = "datasets/sales/_delta_log/00000000000000000003.json"
OUTSIDE = "scratch/tmp.bin"

ETAG = '"9b2cf535f27731c974343645a3985328"'
INM = {"If-None-Match": "*"}
IM = {"If-Match": ETAG}
COPY = {"x-amz-copy-source": f"/{BUCKET}/{OTHER_DATA}"}

ALLOW, DENY = True, False

ALL_OPTIONS = [
    {"create_only_manifests": manifests, "deny_unconditional_delete": deletes}
    for manifests, deletes in itertools.product((True, False), repeat=2)
]

# The AWS blog's scenario-1 policy, verbatim but for JSON layout.
BLOG_POLICY: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "blog_policy.json").read_text()
)


def policy(**options: Any) -> dict[str, Any]:
    return generate_bucket_policy(BUCKET, principals=[WRITER_ROLE], **options)


def decide(
    document: Mapping[str, Any],
    operation: str,
    key: str | None,
    headers: Mapping[str, str] | None = None,
    *,
    query: Mapping[str, str] | None = None,
    principal: str | None = WRITER,
    bucket: str = BUCKET,
) -> bool:
    request = request_context(
        operation=operation,
        bucket=bucket,
        key=key,
        headers=headers or {},
        principal=principal,
        query=query,
    )
    return is_allowed(document, request)


# ============================================================================================
# The request matrix: operation x prefix x headers -> allowed? under the default policy and
# under deny_unconditional_delete=True. Every request lakelock itself makes must pass; every
# write that could overwrite or bypass a CAS must not.


class Row(NamedTuple):
    """One matrix entry: a request and whether it passes the default and the guarded policy."""

    label: str
    operation: str
    key: str | None
    headers: dict[str, str]
    query: dict[str, str] | None
    default: bool  # allowed under the default policy?
    guarded: bool  # allowed under deny_unconditional_delete=True?


#: Long operation names, short in the matrix.
COMPLETE, CREATE = "CompleteMultipartUpload", "CreateMultipartUpload"
_ROWS = [
    # label, operation, key, headers, query, default policy, with delete guard
    # --- lakelock's own requests -------------------------------------------------------------
    ("data file create-only PUT", "PutObject", DATA, INM, None, ALLOW, ALLOW),
    ("data multipart start", CREATE, DATA, {}, None, ALLOW, ALLOW),
    ("data multipart part", "UploadPart", DATA, {}, None, ALLOW, ALLOW),
    ("data multipart create-only completion", COMPLETE, DATA, INM, None, ALLOW, ALLOW),
    ("data multipart abort", "AbortMultipartUpload", DATA, {}, None, ALLOW, ALLOW),
    ("data multipart list parts", "ListParts", DATA, {}, None, ALLOW, ALLOW),
    ("partition copy start", CREATE, DATA, {}, None, ALLOW, ALLOW),
    ("partition copy part", "UploadPartCopy", DATA, COPY, None, ALLOW, ALLOW),
    ("partition copy create-only completion", COMPLETE, DATA, INM, None, ALLOW, ALLOW),
    (
        "create-only CopyObject (AWS since 2025)",
        "CopyObject",
        DATA,
        {**COPY, **INM},
        None,
        ALLOW,
        ALLOW,
    ),
    ("registry first commit (create-only)", "PutObject", REGISTRY, INM, None, ALLOW, ALLOW),
    ("registry commit (CAS)", "PutObject", REGISTRY, IM, None, ALLOW, ALLOW),
    ("large registry multipart start", CREATE, REGISTRY, {}, None, ALLOW, ALLOW),
    ("large registry multipart part", "UploadPart", REGISTRY, {}, None, ALLOW, ALLOW),
    ("large registry CAS completion", COMPLETE, REGISTRY, IM, None, ALLOW, ALLOW),
    ("lease create", "PutObject", LEASE, INM, None, ALLOW, ALLOW),
    ("lease renew/take over/release (CAS)", "PutObject", LEASE, IM, None, ALLOW, ALLOW),
    ("lock table create", "PutObject", LOCK, INM, None, ALLOW, ALLOW),
    ("lock table acquire/release (CAS)", "PutObject", LOCK, IM, None, ALLOW, ALLOW),
    ("manifest create-only PUT", "PutObject", MANIFEST, INM, None, ALLOW, ALLOW),
    ("snapshot create-only PUT", "PutObject", SNAPSHOT, INM, None, ALLOW, ALLOW),
    ("index node create-only PUT", "PutObject", NODE, INM, None, ALLOW, ALLOW),
    ("intent create-only PUT", "PutObject", INTENT, INM, None, ALLOW, ALLOW),
    ("format-1 root backup create-only PUT", "PutObject", BACKUP, INM, None, ALLOW, ALLOW),
    ("large snapshot create-only completion", COMPLETE, SNAPSHOT, INM, None, ALLOW, ALLOW),
    ("vacuum deletes a data file (If-Match)", "DeleteObject", DATA, IM, None, ALLOW, ALLOW),
    ("vacuum deletes a manifest (If-Match)", "DeleteObject", MANIFEST, IM, None, ALLOW, ALLOW),
    ("mirror creates a view object", "PutObject", VIEW, INM, None, ALLOW, ALLOW),
    ("mirror creates a Delta log entry", "PutObject", DELTA_LOG, INM, None, ALLOW, ALLOW),
    ("vacuum deletes a view object (If-Match)", "DeleteObject", VIEW, IM, None, ALLOW, ALLOW),
    ("read a view object", "GetObject", VIEW, {}, None, ALLOW, ALLOW),
    ("read a data file", "GetObject", DATA, {}, None, ALLOW, ALLOW),
    ("read the registry with its ETag", "HeadObject", REGISTRY, {}, None, ALLOW, ALLOW),
    (
        "conditional registry read",
        "GetObject",
        REGISTRY,
        {"If-None-Match": ETAG},
        None,
        ALLOW,
        ALLOW,
    ),
    ("list a dataset", "ListObjectsV2", None, {}, {"prefix": "datasets/sales/"}, ALLOW, ALLOW),
    ("list stale multipart uploads", "ListMultipartUploads", None, {}, None, ALLOW, ALLOW),
    ("mirror creates a view object", "PutObject", VIEW, INM, None, ALLOW, ALLOW),
    ("mirror creates a Delta log entry", "PutObject", DELTA_LOG, INM, None, ALLOW, ALLOW),
    ("vacuum deletes a view object (If-Match)", "DeleteObject", VIEW, IM, None, ALLOW, ALLOW),
    ("read a view object", "GetObject", VIEW, {}, None, ALLOW, ALLOW),
    # --- writes the policy must refuse -------------------------------------------------------
    ("unconditional data PUT", "PutObject", DATA, {}, None, DENY, DENY),
    ("data overwrite with If-Match", "PutObject", DATA, IM, None, DENY, DENY),
    ("unconditional data completion", COMPLETE, DATA, {}, None, DENY, DENY),
    ("data completion with If-Match", COMPLETE, DATA, IM, None, DENY, DENY),
    ("unconditional CopyObject into datasets", "CopyObject", DATA, COPY, None, DENY, DENY),
    (
        "CopyObject onto a data file with If-Match",
        "CopyObject",
        DATA,
        {**COPY, **IM},
        None,
        DENY,
        DENY,
    ),
    (
        "CopyObject with only a *source* precondition",
        "CopyObject",
        DATA,
        {**COPY, "x-amz-copy-source-if-none-match": ETAG},
        None,
        DENY,
        DENY,
    ),
    ("browser-form POST into datasets", "PostObject", DATA, {}, None, DENY, DENY),
    ("unconditional registry PUT", "PutObject", REGISTRY, {}, None, DENY, DENY),
    ("unconditional registry completion", COMPLETE, REGISTRY, {}, None, DENY, DENY),
    ("unconditional CopyObject onto the registry", "CopyObject", REGISTRY, COPY, None, DENY, DENY),
    ("unconditional lease PUT", "PutObject", LEASE, {}, None, DENY, DENY),
    ("unconditional lock table PUT", "PutObject", LOCK, {}, None, DENY, DENY),
    ("unconditional manifest PUT", "PutObject", MANIFEST, {}, None, DENY, DENY),
    ("manifest overwrite with If-Match", "PutObject", MANIFEST, IM, None, DENY, DENY),
    ("manifest overwrite by CAS completion", COMPLETE, MANIFEST, IM, None, DENY, DENY),
    ("snapshot overwrite with If-Match", "PutObject", SNAPSHOT, IM, None, DENY, DENY),
    ("snapshot overwrite by CAS completion", COMPLETE, SNAPSHOT, IM, None, DENY, DENY),
    ("index node overwrite with If-Match", "PutObject", NODE, IM, None, DENY, DENY),
    ("intent overwrite with If-Match", "PutObject", INTENT, IM, None, DENY, DENY),
    ("format-1 root backup overwrite with If-Match", "PutObject", BACKUP, IM, None, DENY, DENY),
    (
        "CopyObject onto an intent with If-Match",
        "CopyObject",
        INTENT,
        {**COPY, **IM},
        None,
        DENY,
        DENY,
    ),
    ("unconditional view PUT", "PutObject", VIEW, {}, None, DENY, DENY),
    ("view overwrite with If-Match", "PutObject", VIEW, IM, None, DENY, DENY),
    ("Delta log overwrite with If-Match", "PutObject", DELTA_LOG, IM, None, DENY, DENY),
    ("unconditional Delta log PUT", "PutObject", DELTA_LOG, {}, None, DENY, DENY),
    ("Delta log overwrite by CAS completion", COMPLETE, DELTA_LOG, IM, None, DENY, DENY),
    ("view overwrite by CAS completion", COMPLETE, VIEW, IM, None, DENY, DENY),
    ("CopyObject onto a view", "CopyObject", VIEW, COPY, None, DENY, DENY),
    # --- deletes: refused only behind deny_unconditional_delete ------------------------------
    ("unconditional data delete", "DeleteObject", DATA, {}, None, ALLOW, DENY),
    (
        "data version delete",
        "DeleteObject",
        DATA,
        {},
        {"versionId": "3HL4kqtJlcpXroDTDmJ"},
        ALLOW,
        DENY,
    ),
    (
        "data version delete with If-Match",
        "DeleteObject",
        DATA,
        IM,
        {"versionId": "3HL4kq"},
        ALLOW,
        DENY,
    ),
    ("unconditional view delete", "DeleteObject", VIEW, {}, None, ALLOW, DENY),
    (
        "view version delete",
        "DeleteObject",
        VIEW,
        {},
        {"versionId": "3HL4kqtJlcpXroDTDmJ"},
        ALLOW,
        DENY,
    ),
    ("unconditional Delta log delete", "DeleteObject", DELTA_LOG, {}, None, ALLOW, DENY),
    (
        "Delta log version delete",
        "DeleteObject",
        DELTA_LOG,
        {},
        {"versionId": "3HL4kqtJlcpXroDTDmJ"},
        ALLOW,
        DENY,
    ),
    (
        "vacuum deletes a Delta log entry (If-Match)",
        "DeleteObject",
        DELTA_LOG,
        IM,
        None,
        ALLOW,
        ALLOW,
    ),
    ("unconditional root delete", "DeleteObject", REGISTRY, {}, None, ALLOW, DENY),
    ("root delete with If-Match", "DeleteObject", REGISTRY, IM, None, ALLOW, DENY),
    ("root version delete", "DeleteObject", REGISTRY, {}, {"versionId": "3HL4kq"}, ALLOW, DENY),
    ("unconditional lease delete", "DeleteObject", LEASE, {}, None, ALLOW, DENY),
    ("lease delete with If-Match", "DeleteObject", LEASE, IM, None, ALLOW, DENY),
    ("lock table delete with If-Match", "DeleteObject", LOCK, IM, None, ALLOW, DENY),
    ("unconditional manifest delete", "DeleteObject", MANIFEST, {}, None, ALLOW, DENY),
    ("unconditional intent delete", "DeleteObject", INTENT, {}, None, ALLOW, DENY),
    ("vacuum deletes an intent (If-Match)", "DeleteObject", INTENT, IM, None, ALLOW, ALLOW),
    ("the delete probe's clean-up", "DeleteObject", PROBE, {}, None, ALLOW, ALLOW),
    (
        "lease version delete",
        "DeleteObject",
        LEASE,
        IM,
        {"versionId": "3HL4kq"},
        ALLOW,
        DENY,
    ),
    # --- outside the lake's prefixes nothing is restricted -----------------------------------
    ("unconditional PUT outside the lake", "PutObject", OUTSIDE, {}, None, ALLOW, ALLOW),
    ("unconditional delete outside the lake", "DeleteObject", OUTSIDE, {}, None, ALLOW, ALLOW),
]
MATRIX: list[Row] = [Row(*row) for row in _ROWS]
MATRIX_IDS = [row.label for row in MATRIX]


def decide_row(
    document: Mapping[str, Any],
    row: Row,
    *,
    principal: str | None = WRITER,
    prefix: str = "",
    bucket: str = BUCKET,
) -> bool:
    """Ask ``document`` about ``row``'s request, its key (and listing prefix) under ``prefix``."""
    query = row.query
    if prefix and query is not None and "prefix" in query:
        query = {**query, "prefix": prefix + query["prefix"]}
    key = None if row.key is None else prefix + row.key
    return decide(
        document, row.operation, key, row.headers, query=query, principal=principal, bucket=bucket
    )


@pytest.mark.parametrize("row", MATRIX, ids=MATRIX_IDS)
def test_request_matrix(row: Row) -> None:
    """Each matrix request is allowed or denied exactly as listed, under both policy variants."""
    assert decide_row(policy(), row) is row.default
    assert decide_row(policy(deny_unconditional_delete=True), row) is row.guarded


@pytest.mark.parametrize("row", MATRIX, ids=MATRIX_IDS)
def test_request_matrix_under_a_lake_prefix(row: Row) -> None:
    """With ``prefix=``, the same matrix holds for keys under that prefix."""
    document = generate_bucket_policy(
        BUCKET, principals=[WRITER_ROLE], prefix="lakes/finance/", deny_unconditional_delete=True
    )
    assert decide_row(document, row, prefix="lakes/finance/") is row.guarded


def test_the_matrix_covers_every_generated_statement() -> None:
    """Every statement of the fullest policy denies at least one matrix request on its own, so
    no statement goes untested by the matrix."""
    full = policy(deny_unconditional_delete=True)
    for statement in full["Statement"]:
        alone = {"Version": full["Version"], "Statement": [statement]}
        assert [row.label for row in MATRIX if not decide_row(alone, row)], statement["Sid"]


def test_unlisted_principals_are_not_bound() -> None:
    """The statements bind only the listed principals: another role, another account and an
    anonymous caller are not denied even the forbidden writes."""
    document = policy(deny_unconditional_delete=True)
    for caller in (OTHER_ROLE_SAME_ACCOUNT, PARTNER, None):
        for row in MATRIX:
            assert decide_row(document, row, principal=caller), (row.label, caller)


def test_star_principal_binds_everyone_including_anonymous() -> None:
    """``principals=["*"]`` applies the matrix to every caller, anonymous included."""
    document = generate_bucket_policy(BUCKET, principals=["*"])
    for caller in (WRITER, PARTNER, None):
        for row in MATRIX:
            assert decide_row(document, row, principal=caller) is row.default, (row.label, caller)


def test_account_principal_binds_every_identity_of_that_account_only() -> None:
    """An account id binds every role session and user of that account, not other accounts."""
    document = generate_bucket_policy(BUCKET, principals=["111111111111"])
    for caller in (WRITER, OTHER_ROLE_SAME_ACCOUNT, "arn:aws:iam::111111111111:user/ops/alice"):
        assert not decide(document, "PutObject", DATA, principal=caller), caller
    assert decide(document, "PutObject", DATA, principal=PARTNER)


def test_cross_account_policy_binds_both_accounts_roles() -> None:
    """A cross-account policy binds the partner's role sessions and the owner's role alike."""
    document = generate_bucket_policy(
        BUCKET, principals=[WRITER_ROLE, "arn:aws:iam::222222222222:role/partner-etl"]
    )
    for caller in (WRITER, PARTNER):
        assert not decide(document, "PutObject", REGISTRY, principal=caller)
        assert decide(document, "PutObject", REGISTRY, INM, principal=caller)
    assert decide(document, "PutObject", REGISTRY, principal=OTHER_ROLE_SAME_ACCOUNT)


def test_delete_objects_is_judged_per_entry() -> None:
    """In DeleteObjects an entry with an ETag (vacuum's form) passes and one without is denied
    under the delete guard; without the guard both pass."""
    entries = [(DATA, ETAG, None), (OTHER_DATA, None, None), (OUTSIDE, None, None)]
    requests = delete_objects_requests(bucket=BUCKET, entries=entries, principal=WRITER)
    guarded = policy(deny_unconditional_delete=True)
    assert [is_allowed(guarded, r) for r in requests] == [ALLOW, DENY, ALLOW]
    assert all(is_allowed(policy(), r) for r in requests)


def test_copy_source_read_is_never_denied() -> None:
    """The source side of a partition copy (s3:GetObject on the source) is not restricted."""
    read = copy_source_request(copy_source=COPY["x-amz-copy-source"], principal=WRITER)
    assert read.action == "s3:GetObject"
    assert read.resource == f"arn:aws:s3:::{BUCKET}/{OTHER_DATA}"
    assert is_allowed(policy(deny_unconditional_delete=True), read)


# ============================================================================================
# The AWS blog's example, checked against what lakelock must do

BLOG_WRITER = "arn:aws:sts::111111111111:assumed-role/role1/run"


def test_blog_policy_denies_lakelocks_create_only_metastore_writes() -> None:
    """The blog's metastore statement requires If-Match, so it refuses the registry's first
    (create-only) commit and every lease, lock table and manifest creation; ours allows them."""
    ours = generate_bucket_policy("my-bucket", principals=["arn:aws:iam::111111111111:role/role1"])
    for key in (REGISTRY, LEASE, LOCK, MANIFEST):
        args = ("PutObject", key, INM)
        assert not decide(BLOG_POLICY, *args, principal=BLOG_WRITER, bucket="my-bucket"), key
        assert decide(ours, *args, principal=BLOG_WRITER, bucket="my-bucket"), key


def test_blog_policy_and_ours_agree_on_the_datasets_prefix() -> None:
    """For every matrix request on datasets/, the blog's statement and ours decide alike."""
    ours = generate_bucket_policy("my-bucket", principals=["arn:aws:iam::111111111111:role/role1"])
    rows = [row for row in MATRIX if row.key is not None and row.key.startswith("datasets/")]
    assert len(rows) > 10
    for row in rows:
        blog = decide_row(BLOG_POLICY, row, principal=BLOG_WRITER, bucket="my-bucket")
        assert blog is decide_row(ours, row, principal=BLOG_WRITER, bucket="my-bucket"), row.label


# ============================================================================================
# Generator: structure, determinism, validation


def test_default_statements_and_order() -> None:
    """The default policy has the documented statements, in a fixed order, all Deny."""
    document = policy()
    assert document["Version"] == "2012-10-17"
    assert [s["Sid"] for s in document["Statement"]] == [
        "DenyUnconditionalCreateInDatasets",
        "DenyUnconditionalWriteInMetastore",
        "DenyOverwriteInManifests",
        "DenyOverwriteOfRegistryVersions",
        "DenyUnconditionalCreateInViews",
    ]
    assert {s["Effect"] for s in document["Statement"]} == {"Deny"}


def test_optional_statements_follow_their_options() -> None:
    """Each option adds or removes exactly its statements, keeping the order."""
    assert [
        s["Sid"]
        for s in policy(create_only_manifests=False, deny_unconditional_delete=True)["Statement"]
    ] == [
        "DenyUnconditionalCreateInDatasets",
        "DenyUnconditionalWriteInMetastore",
        "DenyOverwriteOfRegistryVersions",
        "DenyUnconditionalCreateInViews",
        "DenyUnconditionalDeleteInDatasets",
        "DenyVersionDeleteInDatasets",
        "DenyUnconditionalDeleteInViews",
        "DenyVersionDeleteInViews",
        "DenyDeleteOfTheRegistryRoot",
        "DenyDeleteOfLeasesLockTablesAndBackups",
        "DenyUnconditionalDeleteInMetastore",
        "DenyVersionDeleteInMetastore",
    ]


def test_delete_sids_are_the_statements_the_delete_option_adds() -> None:
    """``DELETE_SIDS``, by which ``lakelock doctor`` tells a policy made with
    ``deny_unconditional_delete``, are exactly the statements that option adds, whatever
    the other options."""
    for manifests in (True, False):
        sids = [
            {s["Sid"] for s in policy(create_only_manifests=manifests, **deletes)["Statement"]}
            for deletes in ({}, {"deny_unconditional_delete": True})
        ]
        assert sids[1] - sids[0] == DELETE_SIDS
        assert not sids[0] & DELETE_SIDS


def test_statement_contents() -> None:
    """Actions, resources and conditions are exactly the ones the module docstring explains;
    the metastore statement denies only when *both* conditional headers are missing."""
    document = generate_bucket_policy(
        BUCKET, principals=[WRITER_ROLE], prefix="lake/", deny_unconditional_delete=True
    )
    by_sid = {s["Sid"]: s for s in document["Statement"]}
    creates = {"Bool": {"s3:ObjectCreationOperation": "true"}}
    objects = f"arn:aws:s3:::{BUCKET}/lake/"
    assert by_sid["DenyUnconditionalCreateInDatasets"] == {
        "Sid": "DenyUnconditionalCreateInDatasets",
        "Effect": "Deny",
        "Principal": {"AWS": [WRITER_ROLE]},
        "Action": "s3:PutObject",
        "Resource": f"{objects}datasets/*",
        "Condition": {"Null": {"s3:if-none-match": "true"}, **creates},
    }
    metastore = by_sid["DenyUnconditionalWriteInMetastore"]
    assert metastore["Resource"] == f"{objects}metastore/*"
    assert metastore["Condition"] == {
        "Null": {"s3:if-match": "true", "s3:if-none-match": "true"},
        **creates,
    }
    manifests = by_sid["DenyOverwriteInManifests"]
    assert manifests["Resource"] == f"{objects}metastore/manifests/*"
    assert manifests["Condition"] == {"Null": {"s3:if-none-match": "true"}, **creates}
    versions_once = by_sid["DenyOverwriteOfRegistryVersions"]
    assert (versions_once["Action"], versions_once["Resource"]) == (
        "s3:PutObject",
        [f"{objects}metastore/{area}/*" for area in ("snapshots", "nodes", "intents", "backups")],
    )
    assert versions_once["Condition"] == {"Null": {"s3:if-none-match": "true"}, **creates}
    delete = by_sid["DenyUnconditionalDeleteInDatasets"]
    assert (delete["Action"], delete["Resource"]) == ("s3:DeleteObject", f"{objects}datasets/*")
    assert delete["Condition"] == {"Null": {"s3:if-match": "true"}}
    versions = by_sid["DenyVersionDeleteInDatasets"]
    assert (versions["Action"], versions["Resource"]) == (
        "s3:DeleteObjectVersion",
        f"{objects}datasets/*",
    )
    assert "Condition" not in versions
    views = by_sid["DenyUnconditionalCreateInViews"]
    assert (views["Action"], views["Resource"]) == ("s3:PutObject", f"{objects}views/*")
    assert views["Condition"] == {"Null": {"s3:if-none-match": "true"}, **creates}
    view_delete = by_sid["DenyUnconditionalDeleteInViews"]
    assert (view_delete["Action"], view_delete["Resource"]) == (
        "s3:DeleteObject",
        f"{objects}views/*",
    )
    assert view_delete["Condition"] == {"Null": {"s3:if-match": "true"}}
    view_versions = by_sid["DenyVersionDeleteInViews"]
    assert (view_versions["Action"], view_versions["Resource"]) == (
        "s3:DeleteObjectVersion",
        f"{objects}views/*",
    )
    root = by_sid["DenyDeleteOfTheRegistryRoot"]
    assert (root["Action"], root["Resource"]) == (
        "s3:DeleteObject",
        f"{objects}metastore/dataset_registry.json",
    )
    assert "Condition" not in root
    kept = by_sid["DenyDeleteOfLeasesLockTablesAndBackups"]
    assert (kept["Action"], kept["Resource"]) == (
        "s3:DeleteObject",
        [f"{objects}metastore/{area}/*" for area in ("leases", "locks", "backups")],
    )
    assert "Condition" not in kept
    metastore_delete = by_sid["DenyUnconditionalDeleteInMetastore"]
    assert (metastore_delete["Action"], metastore_delete["Resource"]) == (
        "s3:DeleteObject",
        [f"{objects}metastore/{area}/*" for area in ("snapshots", "nodes", "manifests", "intents")],
    )
    assert metastore_delete["Condition"] == {"Null": {"s3:if-match": "true"}}
    metastore_versions = by_sid["DenyVersionDeleteInMetastore"]
    assert (metastore_versions["Action"], metastore_versions["Resource"]) == (
        "s3:DeleteObjectVersion",
        f"{objects}metastore/*",
    )
    assert "Condition" not in metastore_versions


def test_custom_area_prefixes() -> None:
    """datasets_prefix and metastore_prefix move the protected areas (under ``prefix``)."""
    document = generate_bucket_policy(
        BUCKET,
        principals=[WRITER_ROLE],
        prefix="p/",
        datasets_prefix="tables/",
        metastore_prefix="_meta/",
        views_prefix="_views/",
    )
    assert [s["Resource"] for s in document["Statement"]] == [
        f"arn:aws:s3:::{BUCKET}/p/tables/*",
        f"arn:aws:s3:::{BUCKET}/p/_meta/*",
        f"arn:aws:s3:::{BUCKET}/p/_meta/manifests/*",
        [
            f"arn:aws:s3:::{BUCKET}/p/_meta/{area}/*"
            for area in ("snapshots", "nodes", "intents", "backups")
        ],
        f"arn:aws:s3:::{BUCKET}/p/_views/*",
    ]


def test_output_is_deterministic() -> None:
    """Principal order and duplicates do not change the output, byte for byte."""
    partner = "arn:aws:iam::222222222222:role/partner-etl"
    one = generate_bucket_policy(BUCKET, principals=[WRITER_ROLE, partner, "333333333333"])
    two = generate_bucket_policy(BUCKET, principals=["333333333333", partner, WRITER_ROLE, partner])
    assert json.dumps(one) == json.dumps(two)
    assert one["Statement"][0]["Principal"] == {
        "AWS": [WRITER_ROLE, partner, "arn:aws:iam::333333333333:root"]
    }


def test_principal_forms() -> None:
    """Account ids become root ARNs; role and user ARNs (with paths) are kept; '*' stays '*';
    the partition follows ``partition=``."""

    def principal_of(principals: list[str], **kw: Any) -> Any:
        return generate_bucket_policy(BUCKET, principals=principals, **kw)["Statement"][0][
            "Principal"
        ]

    assert principal_of(["111111111111"]) == {"AWS": ["arn:aws:iam::111111111111:root"]}
    user = "arn:aws:iam::111111111111:user/pipelines/loader"
    role = "arn:aws:iam::111111111111:role/service-role/etl"
    assert principal_of([user, role]) == {"AWS": sorted([user, role])}
    assert principal_of(["arn:aws:iam::111111111111:root"]) == {
        "AWS": ["arn:aws:iam::111111111111:root"]
    }
    assert principal_of(["*"]) == "*"
    cn = generate_bucket_policy(BUCKET, principals=["111111111111"], partition="aws-cn")
    assert cn["Statement"][0]["Principal"] == {"AWS": ["arn:aws-cn:iam::111111111111:root"]}
    assert cn["Statement"][0]["Resource"].startswith("arn:aws-cn:s3:::")


def test_calls_return_independent_documents() -> None:
    """Mutating a returned policy affects neither another statement nor a later call."""
    first = policy()
    first["Statement"][0]["Principal"]["AWS"].append("arn:aws:iam::999999999999:root")
    first["Statement"][0]["Condition"]["Null"]["s3:if-none-match"] = "false"
    assert first["Statement"][1]["Principal"] == {"AWS": [WRITER_ROLE]}
    assert policy() == generate_bucket_policy(BUCKET, principals=[WRITER_ROLE])
    assert policy()["Statement"][0]["Condition"]["Null"] == {"s3:if-none-match": "true"}


@pytest.mark.parametrize("options", ALL_OPTIONS)
def test_generated_policies_pass_validation(options: dict[str, bool]) -> None:
    """Every option combination yields a policy the validator accepts for the bucket."""
    validate_policy(policy(**options), bucket=BUCKET)


@pytest.mark.parametrize(
    "bucket",
    [
        "ab",
        "a" * 64,
        "Example-Lake",
        "lake_underscore",
        "-lake",
        "lake-",
        "lake..data",
        "192.168.5.4",
        "xn--lake",
        "sthree-lake",
        "amzn-s3-demo-lake",
        "lake-s3alias",
        "lake--ol-s3",
        "lake.mrap",
        "lake--x-s3",
        "lake--table-s3",
        "lake/data",
        "lake*",
        "",
    ],
)
def test_bad_bucket_names_are_rejected(bucket: str) -> None:
    """Bucket names breaking S3's general-purpose naming rules raise InvalidNameError."""
    with pytest.raises(InvalidNameError) as info:
        generate_bucket_policy(bucket, principals=[WRITER_ROLE])
    assert info.value.value == bucket


def test_bucket_name_must_be_a_string() -> None:
    """A non-string bucket raises InvalidNameError (a ValueError)."""
    with pytest.raises(ValueError, match="string"):
        generate_bucket_policy(123, principals=[WRITER_ROLE])  # type: ignore[arg-type]


@pytest.mark.parametrize("bucket", ["abc", "my.data-lake.2024", "a" * 63, "0lake9"])
def test_good_bucket_names_are_accepted(bucket: str) -> None:
    """Names within the rules pass, including dots and digits at either end."""
    assert generate_bucket_policy(bucket, principals=[WRITER_ROLE])["Statement"]


@pytest.mark.parametrize(
    ("principals", "reason"),
    [
        ([], "at least one"),
        ("arn:aws:iam::111111111111:role/etl", "not a string"),
        (["11111111111"], "expected a 12-digit"),
        (["arn:aws:iam::111111111111:role/etl*"], "expected a 12-digit"),
        (["arn:aws:iam::*:root"], "expected a 12-digit"),
        (["arn:aws:iam::111111111111:group/etl"], "expected a 12-digit"),
        (["arn:aws:iam::111111111111:role/"], "expected a 12-digit"),
        (["arn:aws:s3:::example-data-lake"], "expected a 12-digit"),
        (["arn:aws:sts::111111111111:assumed-role/etl/session"], "single session"),
        (["*", WRITER_ROLE], "list it alone"),
        (["arn:aws-cn:iam::111111111111:role/etl"], "partition"),
        ([None], "must be a string"),
    ],
)
def test_bad_principals_are_rejected(principals: Any, reason: str) -> None:
    """Malformed, wildcarded, group, session, mixed-'*' and wrong-partition principals raise."""
    with pytest.raises(InvalidNameError, match=reason):
        generate_bucket_policy(BUCKET, principals=principals)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prefix", "lake"),
        ("prefix", "/lake/"),
        ("prefix", "la*ke/"),
        ("prefix", "lake?/"),
        ("prefix", "${aws:username}/"),
        ("prefix", "a//b/"),
        ("prefix", "a/../b/"),
        ("prefix", "./"),
        ("prefix", "bad\nline/"),
        ("datasets_prefix", ""),
        ("datasets_prefix", "datasets"),
        ("metastore_prefix", ""),
        ("metastore_prefix", "meta*/"),
    ],
)
def test_bad_prefixes_are_rejected(field: str, value: str) -> None:
    """Prefixes that are not clean, '/'-terminated key prefixes (or would smuggle a wildcard or
    policy variable into a Resource) raise InvalidNameError."""
    options: dict[str, Any] = {field: value}
    with pytest.raises(InvalidNameError):
        generate_bucket_policy(BUCKET, principals=[WRITER_ROLE], **options)


@pytest.mark.parametrize(
    ("datasets_prefix", "metastore_prefix"),
    [("data/", "data/meta/"), ("meta/data/", "meta/"), ("same/", "same/")],
)
def test_overlapping_areas_are_rejected(datasets_prefix: str, metastore_prefix: str) -> None:
    """The datasets and metastore areas cannot contain one another (the create-only rule would
    deny every registry CAS, or the CAS rule let data overwrites through)."""
    with pytest.raises(InvalidNameError, match="must not contain"):
        generate_bucket_policy(
            BUCKET,
            principals=[WRITER_ROLE],
            datasets_prefix=datasets_prefix,
            metastore_prefix=metastore_prefix,
        )


def test_unknown_partition_is_rejected() -> None:
    """Only the three AWS partitions are accepted."""
    with pytest.raises(InvalidNameError, match="partition"):
        generate_bucket_policy(BUCKET, principals=[WRITER_ROLE], partition="aws-mars")


# ============================================================================================
# Generated policies against AWS's published authorization data (vendored)


def _condition_pairs(document: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (statement["Action"], operator, key)
        for statement in document["Statement"]
        for operator, block in statement.get("Condition", {}).items()
        for key in block
    ]


@pytest.mark.parametrize("options", ALL_OPTIONS)
def test_generated_policies_use_documented_actions_and_keys(options: dict[str, bool]) -> None:
    """Every action is one AWS documents, every condition key is documented for its action, and
    each operator fits the key's type (Null fits any; Bool needs a Bool key)."""
    documented = {action: set(keys) for action, keys in AUTH_DATA["actions"].items()}
    types = AUTH_DATA["condition_keys"]
    document = policy(**options)
    for statement in document["Statement"]:
        assert statement["Action"] in documented
    pairs = _condition_pairs(document)
    assert pairs
    for action, operator, key in pairs:
        assert key in documented[action], (action, key)
        if operator == "Bool":
            assert types[key] == "Bool", key
        else:
            assert operator == "Null", operator


def test_request_context_agrees_with_documented_operations() -> None:
    """request_context maps each documented S3 operation to the documented IAM action and
    s3:ObjectCreationOperation value."""
    for operation, expected in AUTH_DATA["operations"].items():
        copying = operation in ("CopyObject", "UploadPartCopy")
        request = request_context(
            operation=operation,
            bucket=BUCKET,
            key=None if operation == "ListObjectsV2" else DATA,
            headers=COPY if copying else {},
            principal=WRITER,
        )
        assert request.action == expected["action"], operation
        assert request.context.get("s3:objectcreationoperation") == expected.get(
            "s3:ObjectCreationOperation"
        ), operation


def test_request_context_sets_only_documented_keys() -> None:
    """With every header it understands present, request_context sets only condition keys AWS
    documents for the resulting action."""
    headers = {
        **COPY,
        **IM,
        "If-None-Match": "*",
        "x-amz-acl": "private",
        "x-amz-server-side-encryption": "aws:kms",
        "x-amz-server-side-encryption-aws-kms-key-id": "arn:aws:kms:us-east-1:111111111111:key/k",
        "x-amz-storage-class": "STANDARD_IA",
        "x-amz-metadata-directive": "COPY",
        "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
    }
    documented = {a.lower(): {k.lower() for k in keys} for a, keys in AUTH_DATA["actions"].items()}
    cases: list[tuple[str, str | None, dict[str, str] | None]] = [
        (op, DATA, None) for op in AUTH_DATA["operations"] if op != "ListObjectsV2"
    ]
    cases += [
        ("ListObjectsV2", None, {"prefix": "datasets/", "delimiter": "/", "max-keys": "100"}),
        ("GetObject", DATA, {"versionId": "v1"}),
        ("DeleteObject", DATA, {"versionId": "v1"}),
    ]
    for operation, key, query in cases:
        request = request_context(
            operation=operation,
            bucket=BUCKET,
            key=key,
            headers=headers,
            principal=WRITER,
            query=query,
        )
        assert request.context, operation
        assert set(request.context) <= documented[request.action.lower()], (
            operation,
            request.context,
        )


# ============================================================================================
# Evaluator: condition operators (IAM semantics, including missing keys)

CONDITION_CASES: list[tuple[str, str, Any, dict[str, str], bool]] = [
    # operator, key, policy value, request context, condition holds?
    ("StringEquals", "s3:if-none-match", "*", {}, False),
    ("StringEquals", "s3:if-none-match", "*", {"s3:if-none-match": "*"}, True),
    ("StringEquals", "s3:if-none-match", "*", {"s3:if-none-match": ETAG}, False),
    (
        "StringEquals",
        "s3:x-amz-acl",
        ["private", "bucket-owner-full-control"],
        {"s3:x-amz-acl": "private"},
        True,
    ),
    ("StringEquals", "s3:x-amz-acl", "Private", {"s3:x-amz-acl": "private"}, False),
    ("StringNotEquals", "s3:if-none-match", "*", {}, True),
    ("StringNotEquals", "s3:if-none-match", "*", {"s3:if-none-match": "*"}, False),
    ("StringNotEquals", "s3:x-amz-acl", ["a", "b"], {"s3:x-amz-acl": "b"}, False),
    ("StringNotEquals", "s3:x-amz-acl", ["a", "b"], {"s3:x-amz-acl": "c"}, True),
    ("StringEqualsIgnoreCase", "s3:x-amz-acl", "PRIVATE", {"s3:x-amz-acl": "private"}, True),
    ("StringNotEqualsIgnoreCase", "s3:x-amz-acl", "PRIVATE", {"s3:x-amz-acl": "private"}, False),
    ("StringNotEqualsIgnoreCase", "s3:x-amz-acl", "PRIVATE", {}, True),
    ("StringLike", "s3:prefix", "datasets/*", {"s3:prefix": "datasets/sales/"}, True),
    ("StringLike", "s3:prefix", "datasets/?", {"s3:prefix": "datasets/ab"}, False),
    ("StringLike", "s3:prefix", "datasets/??", {"s3:prefix": "datasets/ab"}, True),
    ("StringLike", "s3:prefix", "datasets/*", {}, False),
    ("StringLike", "s3:prefix", "a.c", {"s3:prefix": "abc"}, False),
    ("StringNotLike", "s3:prefix", "datasets/*", {}, True),
    ("StringNotLike", "s3:prefix", "datasets/*", {"s3:prefix": "metastore/"}, True),
    ("StringNotLike", "s3:prefix", "datasets/*", {"s3:prefix": "datasets/x"}, False),
    ("StringEqualsIfExists", "s3:x-amz-acl", "private", {}, True),
    ("StringEqualsIfExists", "s3:x-amz-acl", "private", {"s3:x-amz-acl": "public-read"}, False),
    ("StringNotEqualsIfExists", "s3:x-amz-acl", "private", {}, True),
    ("StringNotEqualsIfExists", "s3:x-amz-acl", "private", {"s3:x-amz-acl": "private"}, False),
    ("Bool", "s3:ObjectCreationOperation", "true", {}, False),
    ("Bool", "s3:ObjectCreationOperation", "true", {"s3:ObjectCreationOperation": "true"}, True),
    ("Bool", "s3:ObjectCreationOperation", "true", {"s3:ObjectCreationOperation": "false"}, False),
    ("Bool", "s3:ObjectCreationOperation", True, {"s3:ObjectCreationOperation": "TRUE"}, True),
    ("Bool", "s3:ObjectCreationOperation", "false", {"s3:ObjectCreationOperation": "false"}, True),
    ("BoolIfExists", "s3:ObjectCreationOperation", "true", {}, True),
    (
        "BoolIfExists",
        "s3:ObjectCreationOperation",
        "true",
        {"s3:ObjectCreationOperation": "false"},
        False,
    ),
    ("Null", "s3:if-match", "true", {}, True),
    ("Null", "s3:if-match", "true", {"s3:if-match": ETAG}, False),
    ("Null", "s3:if-match", "false", {}, False),
    ("Null", "s3:if-match", "false", {"s3:if-match": ETAG}, True),
    ("Null", "s3:if-match", True, {}, True),
    ("ForAnyValue:StringEquals", "s3:x-amz-acl", ["private"], {}, False),
    ("ForAnyValue:StringEquals", "s3:x-amz-acl", ["private"], {"s3:x-amz-acl": "private"}, True),
    ("ForAllValues:StringEquals", "s3:x-amz-acl", ["private"], {}, True),
    (
        "ForAllValues:StringEquals",
        "s3:x-amz-acl",
        ["private"],
        {"s3:x-amz-acl": "public-read"},
        False,
    ),
    ("ForAnyValue:StringNotLike", "s3:prefix", ["datasets/*"], {"s3:prefix": "metastore/"}, True),
    ("ForAllValues:StringLikeIfExists", "s3:prefix", ["datasets/*"], {}, True),
]


def _deny_when(condition: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": {
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": "*",
            "Condition": condition,
        },
    }


def _put(context: Mapping[str, str], principal: str | None = WRITER) -> PolicyRequest:
    return PolicyRequest("s3:PutObject", f"arn:aws:s3:::{BUCKET}/{DATA}", principal, context)


@pytest.mark.parametrize(("operator", "key", "value", "context", "holds"), CONDITION_CASES)
def test_condition_operator_semantics(
    operator: str, key: str, value: Any, context: dict[str, str], holds: bool
) -> None:
    """Each operator, with a key present or missing, holds exactly when IAM says it does."""
    decision = evaluate(_deny_when({operator: {key: value}}), _put(context))
    assert decision == ("deny" if holds else "implicit")


def test_keys_under_one_operator_are_anded_and_values_ored() -> None:
    """Two keys under one Null must both be missing; listed values for one key are alternatives."""
    both_missing = _deny_when({"Null": {"s3:if-match": "true", "s3:if-none-match": "true"}})
    assert not is_allowed(both_missing, _put({}))
    assert is_allowed(both_missing, _put({"s3:if-match": ETAG}))
    assert is_allowed(both_missing, _put({"s3:if-none-match": "*"}))
    either_acl = _deny_when(
        {"StringEquals": {"s3:x-amz-acl": ["public-read", "public-read-write"]}}
    )
    assert not is_allowed(either_acl, _put({"s3:x-amz-acl": "public-read-write"}))
    assert is_allowed(either_acl, _put({"s3:x-amz-acl": "private"}))


def test_operators_are_anded() -> None:
    """A statement with two operators applies only when both hold."""
    document = _deny_when(
        {"Null": {"s3:if-none-match": "true"}, "Bool": {"s3:ObjectCreationOperation": "true"}}
    )
    assert not is_allowed(document, _put({"s3:objectcreationoperation": "true"}))
    assert is_allowed(document, _put({"s3:objectcreationoperation": "false"}))
    assert is_allowed(
        document, _put({"s3:objectcreationoperation": "true", "s3:if-none-match": "*"})
    )


def test_condition_key_names_are_case_insensitive_values_are_not() -> None:
    """Key names match regardless of case, on both sides; StringEquals values are case-sensitive."""
    document = _deny_when({"StringEquals": {"S3:X-Amz-Acl": "private"}})
    assert not is_allowed(document, _put({"s3:x-amz-acl": "private"}))
    assert not is_allowed(document, _put({"S3:x-AMZ-acl": "private"}))
    assert is_allowed(document, _put({"s3:x-amz-acl": "PRIVATE"}))


# ============================================================================================
# Evaluator: Principal, Action, Resource


def _statement(**overrides: Any) -> dict[str, Any]:
    statement: dict[str, Any] = {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:PutObject",
        "Resource": f"arn:aws:s3:::{BUCKET}/*",
    }
    statement.update(overrides)
    return {"Version": "2012-10-17", "Statement": [statement]}


@pytest.mark.parametrize(
    ("principal", "caller", "matches"),
    [
        ("*", None, True),
        ({"AWS": "*"}, None, True),
        ({"AWS": "*"}, PARTNER, True),
        ({"AWS": "111111111111"}, WRITER, True),
        ({"AWS": "111111111111"}, "arn:aws:iam::111111111111:user/alice", True),
        ({"AWS": "111111111111"}, PARTNER, False),
        ({"AWS": "111111111111"}, None, False),
        ({"AWS": "arn:aws:iam::111111111111:root"}, OTHER_ROLE_SAME_ACCOUNT, True),
        ({"AWS": "arn:aws-cn:iam::111111111111:root"}, WRITER, False),
        ({"AWS": WRITER_ROLE}, WRITER, True),
        ({"AWS": WRITER_ROLE}, WRITER_ROLE, True),
        ({"AWS": "arn:aws:iam::111111111111:role/pipelines/etl-writer"}, WRITER, True),
        ({"AWS": WRITER_ROLE}, OTHER_ROLE_SAME_ACCOUNT, False),
        ({"AWS": WRITER_ROLE}, "arn:aws:sts::222222222222:assumed-role/etl-writer/xy", False),
        ({"AWS": WRITER_ROLE}, "arn:aws:iam::111111111111:user/etl-writer", False),
        (
            {"AWS": "arn:aws:iam::111111111111:user/alice"},
            "arn:aws:iam::111111111111:user/alice",
            True,
        ),
        (
            {"AWS": "arn:aws:iam::111111111111:user/alice"},
            "arn:aws:iam::111111111111:user/bob",
            False,
        ),
        ({"AWS": WRITER}, WRITER, True),
        ({"AWS": WRITER}, "arn:aws:sts::111111111111:assumed-role/etl-writer/other", False),
        ({"AWS": [PARTNER, "111111111111"]}, WRITER, True),
    ],
)
def test_principal_matching(principal: Any, caller: str | None, matches: bool) -> None:
    """Principal '*', account ids and root ARNs (whole account), role ARNs (the role and its
    sessions) and user/session ARNs (exactly) match as AWS resolves them."""
    assert evaluate(_statement(Principal=principal), _put({}, caller)) == (
        "deny" if matches else "implicit"
    )


@pytest.mark.parametrize(
    ("element", "pattern", "action", "resource", "matches"),
    [
        ("Action", "s3:PutObject", "s3:putobject", f"arn:aws:s3:::{BUCKET}/x", True),
        ("Action", "S3:Put*", "s3:PutObject", f"arn:aws:s3:::{BUCKET}/x", True),
        ("Action", "s3:*Object", "s3:DeleteObjectVersion", f"arn:aws:s3:::{BUCKET}/x", False),
        ("Action", "s3:Get?bject", "s3:GetObject", f"arn:aws:s3:::{BUCKET}/x", True),
        ("Action", "*", "s3:ListBucket", f"arn:aws:s3:::{BUCKET}/x", True),
        ("NotAction", "s3:Get*", "s3:PutObject", f"arn:aws:s3:::{BUCKET}/x", True),
        ("NotAction", ["s3:Get*", "s3:Put*"], "s3:PutObject", f"arn:aws:s3:::{BUCKET}/x", False),
        (
            "Resource",
            f"arn:aws:s3:::{BUCKET}/datasets/*",
            "s3:PutObject",
            f"arn:aws:s3:::{BUCKET}/datasets/a/b",
            True,
        ),
        (
            "Resource",
            f"arn:aws:s3:::{BUCKET}/datasets/*",
            "s3:PutObject",
            f"arn:aws:s3:::{BUCKET}/Datasets/a",
            False,
        ),
        (
            "Resource",
            f"arn:aws:s3:::{BUCKET}/datasets/*",
            "s3:PutObject",
            f"arn:aws:s3:::{BUCKET}/datasets",
            False,
        ),
        (
            "Resource",
            f"arn:aws:s3:::{BUCKET}/a?c",
            "s3:PutObject",
            f"arn:aws:s3:::{BUCKET}/abc",
            True,
        ),
        (
            "Resource",
            f"arn:aws:s3:::{BUCKET}/a.c",
            "s3:PutObject",
            f"arn:aws:s3:::{BUCKET}/abc",
            False,
        ),
        (
            "Resource",
            f"arn:aws:s3:::{BUCKET}/*",
            "s3:PutObject",
            f"arn:aws:s3:::{BUCKET}/a\nb",
            True,
        ),
        ("Resource", "*", "s3:PutObject", "arn:aws:s3:::other/x", True),
        (
            "NotResource",
            f"arn:aws:s3:::{BUCKET}/scratch/*",
            "s3:PutObject",
            f"arn:aws:s3:::{BUCKET}/d/x",
            True,
        ),
        (
            "NotResource",
            f"arn:aws:s3:::{BUCKET}/scratch/*",
            "s3:PutObject",
            f"arn:aws:s3:::{BUCKET}/scratch/x",
            False,
        ),
    ],
)
def test_action_and_resource_matching(
    element: str, pattern: Any, action: str, resource: str, matches: bool
) -> None:
    """Actions match case-insensitively, resources case-sensitively, both with '*' and '?' only;
    NotAction/NotResource invert the match."""
    statement = _statement()
    body = statement["Statement"][0]
    if element.endswith("Action"):
        del body["Action"]
    else:
        del body["Resource"]
    body[element] = pattern
    request = PolicyRequest(action, resource, WRITER, {})
    assert evaluate(statement, request) == ("deny" if matches else "implicit")


def test_deny_wins_over_allow_and_allow_is_reported() -> None:
    """An applicable Deny decides whatever Allows apply; an Allow alone reports 'allow', nothing
    applicable 'implicit' (and the embedded endpoint lets both through)."""
    allow = {"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "*"}
    deny = {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "*"}
    put, get = _put({}), PolicyRequest("s3:GetObject", f"arn:aws:s3:::{BUCKET}/x", WRITER, {})
    assert evaluate({"Statement": [allow, deny]}, put) == "deny"
    assert evaluate({"Statement": [allow, deny]}, get) == "allow"
    assert evaluate({"Statement": [deny]}, get) == "implicit"
    assert is_allowed({"Statement": [deny]}, get)


def test_policy_request_copies_and_normalises_its_context() -> None:
    """A PolicyRequest keeps a lower-cased, read-only copy: the caller's dict is not tracked."""
    context = {"S3:If-None-Match": "*"}
    request = PolicyRequest("s3:PutObject", f"arn:aws:s3:::{BUCKET}/x", None, context)
    context["s3:if-match"] = ETAG
    assert dict(request.context) == {"s3:if-none-match": "*"}
    with pytest.raises(TypeError):
        request.context["s3:if-match"] = ETAG  # type: ignore[index]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("s3:PutObject", "arn:aws:s3:::b/k", "alice", {}), "principal"),
        (("s3:PutObject", "arn:aws:s3:::b/k", "arn:aws:iam::1111:user/a", {}), "principal"),
        (("", "arn:aws:s3:::b/k", None, {}), "action"),
        (("s3:PutObject", "", None, {}), "resource"),
        (("s3:PutObject", "arn:aws:s3:::b/k", None, {"s3:x": 1}), "string"),
    ],
)
def test_policy_request_rejects_malformed_fields(arguments: tuple[Any, ...], message: str) -> None:
    """An unrecognisable caller, empty action/resource or non-string context raises."""
    with pytest.raises(ValueError, match=message):
        PolicyRequest(*arguments)


# ============================================================================================
# Evaluator: validation of policy documents


def _with(**statement_changes: Any) -> dict[str, Any]:
    document = _statement()
    body = document["Statement"][0]
    for name, value in statement_changes.items():
        if value is None:
            body.pop(name, None)
        else:
            body[name] = value
    return document


INVALID_POLICIES: list[tuple[str, Any, str]] = [
    ("not an object", ["Statement"], "JSON object"),
    (
        "unknown top-level element",
        {"Statement": _statement()["Statement"], "Extra": 1},
        "unknown policy",
    ),
    ("bad version", {"Version": "2020-01-01", "Statement": _statement()["Statement"]}, "Version"),
    ("no statement", {"Version": "2012-10-17"}, "needs a Statement"),
    ("empty statement list", {"Statement": []}, "non-empty"),
    ("statement not an object", {"Statement": ["Deny"]}, "must be an object"),
    ("unknown statement element", _with(Principals="*"), "unknown element"),
    ("lower-case effect", _with(Effect="deny"), "Effect"),
    ("NotPrincipal", _with(Principal=None, NotPrincipal={"AWS": WRITER_ROLE}), "NotPrincipal"),
    ("no principal", _with(Principal=None), "needs a Principal"),
    (
        "service principal",
        _with(Principal={"Service": "logging.s3.amazonaws.com"}),
        "not supported",
    ),
    ("canonical user", _with(Principal={"CanonicalUser": "79a59df9"}), "not supported"),
    ("wildcard inside a principal", _with(Principal={"AWS": "arn:aws:iam::*:role/x"}), "wildcards"),
    ("empty principal list", _with(Principal={"AWS": []}), "non-empty"),
    ("both Action and NotAction", _with(NotAction="s3:GetObject"), "exactly one of Action"),
    ("neither Action nor NotAction", _with(Action=None), "exactly one of Action"),
    ("non-S3 action", _with(Action="iam:PassRole"), "not an S3 action"),
    ("action with a space", _with(Action="s3:Put Object"), "not an S3 action"),
    ("neither Resource nor NotResource", _with(Resource=None), "exactly one of Resource"),
    ("resource not an S3 ARN", _with(Resource="arn:aws:iam::111111111111:role/x"), "not an S3 ARN"),
    (
        "policy variable in resource",
        _with(Resource=f"arn:aws:s3:::{BUCKET}/${{aws:username}}/*"),
        "variables",
    ),
    ("condition not an object", _with(Condition=["Null"]), "Condition must be an object"),
]
#: Statements whose one Condition is malformed or unsupported: (label, Condition, message).
BAD_CONDITIONS: list[tuple[str, Any, str]] = [
    ("Bool value not a boolean", {"Bool": {"s3:ObjectCreationOperation": "yes"}}, "'true' or"),
    ("Null value not a boolean", {"Null": {"s3:if-match": "maybe"}}, "'true' or"),
    ("numeric condition value", {"StringEquals": {"s3:max-keys": 10}}, "strings or booleans"),
    ("policy variable in value", {"StringLike": {"s3:prefix": "${aws:username}/*"}}, "variables"),
    ("empty value list", {"StringEquals": {"s3:x-amz-acl": []}}, "no values"),
    ("condition key without service", {"StringEquals": {"acl": "private"}}, "condition key"),
    ("empty operator block", {"StringEquals": {}}, "map condition keys"),
]
#: Condition operators the evaluator does not support (one is misspelt), each with a key and
#: value it would otherwise take.
UNSUPPORTED = {
    "NumericLessThan": ("s3:max-keys", "10"),
    "DateGreaterThan": ("aws:CurrentTime", "2024-01-01"),
    "ArnLike": ("aws:SourceArn", "arn:aws:s3:::x"),
    "NullIfExists": ("s3:if-match", "true"),
    "ForAnyValue:Null": ("s3:if-match", "true"),
    "ForAnyValue:Bool": ("aws:SecureTransport", "true"),
    "StringEqual": ("s3:x-amz-acl", "private"),
}
BAD_CONDITIONS += [
    (f"operator {op}", {op: {key: value}}, "not supported")
    for op, (key, value) in UNSUPPORTED.items()
]
INVALID_POLICIES += [(label, _with(Condition=c), message) for label, c, message in BAD_CONDITIONS]


@pytest.mark.parametrize(
    ("label", "document", "message"), INVALID_POLICIES, ids=[c[0] for c in INVALID_POLICIES]
)
def test_malformed_or_unsupported_policies_are_rejected(
    label: str, document: Any, message: str
) -> None:
    """validate_policy (and evaluate) raise ValueError with a message naming the problem."""
    with pytest.raises(ValueError, match=message):
        validate_policy(document)
    if isinstance(document, Mapping):
        with pytest.raises(ValueError, match=message):
            evaluate(document, _put({}))


def test_validation_with_a_bucket_checks_every_resource() -> None:
    """With ``bucket=``, a Resource naming another bucket is rejected; the bucket itself, its
    objects and '*' are accepted."""
    validate_policy(
        _with(Resource=[f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*", "*"]), bucket=BUCKET
    )
    with pytest.raises(ValueError, match="is not bucket"):
        validate_policy(_with(Resource=f"arn:aws:s3:::{BUCKET}-other/*"), bucket=BUCKET)
    with pytest.raises(ValueError, match="is not bucket"):
        validate_policy(_with(Resource="arn:aws:s3:::*"), bucket=BUCKET)
    validate_policy(_with(Resource=f"arn:aws:s3:::{BUCKET}-other/*"))  # no bucket: not checked


def test_valid_policy_forms_are_accepted() -> None:
    """Single-statement objects, list-valued elements, Sids, Id and the 2008 version validate."""
    validate_policy(
        {
            "Version": "2008-10-17",
            "Id": "lake",
            "Statement": {
                "Sid": "ReadOnlyPartner",
                "Effect": "Deny",
                "Principal": {"AWS": ["222222222222", "arn:aws:iam::222222222222:user/x"]},
                "NotAction": ["s3:Get*", "s3:List*"],
                "NotResource": [f"arn:aws:s3:::{BUCKET}/public/*"],
                "Condition": {"BoolIfExists": {"aws:SecureTransport": False}},
            },
        }
    )


def test_validating_and_evaluating_do_not_mutate_the_policy() -> None:
    """The policy document is read, never modified."""
    document = policy(deny_unconditional_delete=True)
    before = copy.deepcopy(document)
    validate_policy(document, bucket=BUCKET)
    evaluate(document, _put({}))
    assert document == before


# ============================================================================================
# request_context: S3 request -> IAM action, resource and condition keys


@pytest.mark.parametrize(
    ("operation", "key", "action", "creates"),
    [
        ("PutObject", DATA, "s3:PutObject", "true"),
        ("CopyObject", DATA, "s3:PutObject", "true"),
        ("CompleteMultipartUpload", DATA, "s3:PutObject", "true"),
        ("PostObject", DATA, "s3:PutObject", "true"),
        ("CreateMultipartUpload", DATA, "s3:PutObject", "false"),
        ("UploadPart", DATA, "s3:PutObject", "false"),
        ("UploadPartCopy", DATA, "s3:PutObject", "false"),
        ("AbortMultipartUpload", DATA, "s3:AbortMultipartUpload", None),
        ("ListParts", DATA, "s3:ListMultipartUploadParts", None),
        ("GetObject", DATA, "s3:GetObject", None),
        ("HeadObject", DATA, "s3:GetObject", None),
        ("DeleteObject", DATA, "s3:DeleteObject", None),
        ("PutObjectTagging", DATA, "s3:PutObjectTagging", None),
        ("ListObjects", None, "s3:ListBucket", None),
        ("ListObjectsV2", None, "s3:ListBucket", None),
        ("ListObjectVersions", None, "s3:ListBucketVersions", None),
        ("ListMultipartUploads", None, "s3:ListBucketMultipartUploads", None),
        ("HeadBucket", None, "s3:ListBucket", None),
        ("PutBucketPolicy", None, "s3:PutBucketPolicy", None),
        ("DeleteBucketCors", None, "s3:PutBucketCORS", None),
    ],
)
def test_request_context_actions(
    operation: str, key: str | None, action: str, creates: str | None
) -> None:
    """Each operation maps to its IAM action and resource, and (only for s3:PutObject requests)
    to its s3:ObjectCreationOperation value."""
    headers = COPY if operation in ("CopyObject", "UploadPartCopy") else {}
    request = request_context(
        operation=operation, bucket=BUCKET, key=key, headers=headers, principal=None
    )
    assert request.action == action
    assert request.resource == (f"arn:aws:s3:::{BUCKET}/{key}" if key else f"arn:aws:s3:::{BUCKET}")
    assert request.context.get("s3:objectcreationoperation") == creates


def test_conditional_headers_become_keys_case_insensitively() -> None:
    """If-Match/If-None-Match headers, in any case, set s3:if-match/s3:if-none-match verbatim."""
    request = request_context(
        operation="PutObject",
        bucket=BUCKET,
        key=REGISTRY,
        headers={"IF-MATCH": f" {ETAG} ", "if-none-match": "*"},
        principal=WRITER,
    )
    assert request.context == {
        "s3:objectcreationoperation": "true",
        "s3:if-match": ETAG,
        "s3:if-none-match": "*",
    }


@pytest.mark.parametrize(
    "operation", ["CreateMultipartUpload", "UploadPart", "UploadPartCopy", "PostObject"]
)
def test_operations_without_conditional_headers_never_set_the_keys(operation: str) -> None:
    """Operations that cannot carry conditional headers never set s3:if-*, even if sent."""
    request = request_context(
        operation=operation,
        bucket=BUCKET,
        key=DATA,
        headers={**COPY, **INM, **IM},
        principal=WRITER,
    )
    assert "s3:if-none-match" not in request.context
    assert "s3:if-match" not in request.context


def test_copy_source_preconditions_set_no_destination_keys() -> None:
    """x-amz-copy-source-if-* headers are about the source: they set no s3:if-* key."""
    request = request_context(
        operation="CopyObject",
        bucket=BUCKET,
        key=DATA,
        headers={
            **COPY,
            "x-amz-copy-source-if-match": ETAG,
            "x-amz-copy-source-if-none-match": ETAG,
        },
        principal=WRITER,
    )
    assert request.context == {
        "s3:objectcreationoperation": "true",
        "s3:x-amz-copy-source": f"{BUCKET}/{OTHER_DATA}",
    }


@pytest.mark.parametrize(
    ("header", "source", "version_id"),
    [
        (f"/{BUCKET}/{OTHER_DATA}", f"{BUCKET}/{OTHER_DATA}", None),
        (f"{BUCKET}/{OTHER_DATA}", f"{BUCKET}/{OTHER_DATA}", None),
        (f"{BUCKET}/datasets/a%20b/c%3D1.parquet", f"{BUCKET}/datasets/a b/c=1.parquet", None),
        (f"{BUCKET}/{OTHER_DATA}?versionId=v%2B1", f"{BUCKET}/{OTHER_DATA}", "v+1"),
    ],
)
def test_copy_source_parsing(header: str, source: str, version_id: str | None) -> None:
    """x-amz-copy-source is URL-decoded, loses its leading '/', and its versionId selects
    s3:GetObjectVersion for the source read."""
    destination = request_context(
        operation="UploadPartCopy",
        bucket=BUCKET,
        key=DATA,
        headers={"X-Amz-Copy-Source": header},
        principal=WRITER,
    )
    assert destination.context["s3:x-amz-copy-source"] == source
    read = copy_source_request(copy_source=header, principal=WRITER)
    assert read.resource == f"arn:aws:s3:::{source}"
    if version_id is None:
        assert (read.action, dict(read.context)) == ("s3:GetObject", {})
    else:
        assert (read.action, dict(read.context)) == (
            "s3:GetObjectVersion",
            {"s3:versionid": version_id},
        )


def test_version_operations_use_version_actions() -> None:
    """A versionId query parameter selects the *Version action and sets s3:versionid; a
    version delete gets no s3:if-match (conditional deletes apply to the current version)."""
    delete = request_context(
        operation="DeleteObject",
        bucket=BUCKET,
        key=DATA,
        headers=IM,
        principal=WRITER,
        query={"versionId": "v7"},
    )
    assert (delete.action, dict(delete.context)) == (
        "s3:DeleteObjectVersion",
        {"s3:versionid": "v7"},
    )
    get = request_context(
        operation="GetObject",
        bucket=BUCKET,
        key=DATA,
        headers={},
        principal=WRITER,
        query={"versionId": "v7"},
    )
    assert (get.action, dict(get.context)) == ("s3:GetObjectVersion", {"s3:versionid": "v7"})


def test_listing_query_parameters_become_keys() -> None:
    """prefix, delimiter and max-keys of a listing set s3:prefix, s3:delimiter, s3:max-keys."""
    request = request_context(
        operation="ListObjectsV2",
        bucket=BUCKET,
        key=None,
        headers={},
        principal=WRITER,
        query={"prefix": "datasets/", "delimiter": "/", "max-keys": "10", "list-type": "2"},
    )
    assert dict(request.context) == {
        "s3:prefix": "datasets/",
        "s3:delimiter": "/",
        "s3:max-keys": "10",
    }


def test_creation_headers_become_keys() -> None:
    """ACL, encryption and storage-class headers of a creation set their s3: keys; the copy's
    metadata directive too; other operations ignore them."""
    headers = {
        **COPY,
        "x-amz-acl": "bucket-owner-full-control",
        "x-amz-server-side-encryption": "AES256",
        "x-amz-storage-class": "STANDARD_IA",
        "x-amz-metadata-directive": "REPLACE",
    }
    copied = request_context(
        operation="CopyObject", bucket=BUCKET, key=DATA, headers=headers, principal=None
    )
    assert copied.context["s3:x-amz-acl"] == "bucket-owner-full-control"
    assert copied.context["s3:x-amz-server-side-encryption"] == "AES256"
    assert copied.context["s3:x-amz-storage-class"] == "STANDARD_IA"
    assert copied.context["s3:x-amz-metadata-directive"] == "REPLACE"
    part = request_context(
        operation="UploadPartCopy", bucket=BUCKET, key=DATA, headers=headers, principal=None
    )
    assert set(part.context) == {"s3:objectcreationoperation", "s3:x-amz-copy-source"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"operation": "SelectObjectContent", "key": DATA}, "unsupported S3 operation"),
        ({"operation": "PutObject", "key": None}, "needs an object key"),
        ({"operation": "PutObject", "key": ""}, "needs an object key"),
        ({"operation": "DeleteObjects", "key": None}, "per key"),
        ({"operation": "ListObjectsV2", "key": DATA}, "takes no key"),
        ({"operation": "CopyObject", "key": DATA}, "x-amz-copy-source"),
        ({"operation": "PutObject", "key": DATA, "bucket": ""}, "bucket"),
        ({"operation": "PutObject", "key": DATA, "bucket": "a/b"}, "bucket"),
        ({"operation": "PutObject", "key": DATA, "partition": "aws-mars"}, "partition"),
        ({"operation": "PutObject", "key": DATA, "principal": "root"}, "principal"),
    ],
)
def test_request_context_rejects_what_it_cannot_map(
    arguments: dict[str, Any], message: str
) -> None:
    """Unknown operations, missing or superfluous keys, a copy without a source, bad buckets,
    partitions and principals raise ValueError instead of producing a wrong question."""
    call: dict[str, Any] = {"bucket": BUCKET, "headers": {}, "principal": WRITER, **arguments}
    with pytest.raises(ValueError, match=message):
        request_context(**call)


# ============================================================================================
# Example policies in policies/


def _generate_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "lakelock_policies_generate", ROOT / "policies" / "generate.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE_FILES = {
    "single-account.json": [WRITER_ROLE],
    "cross-account.json": [WRITER_ROLE, "arn:aws:iam::222222222222:role/partner-etl"],
}


@pytest.mark.parametrize(("name", "principals"), EXAMPLE_FILES.items())
def test_example_policy_files_are_current(name: str, principals: list[str]) -> None:
    """policies/<name> is byte-for-byte the generator's output today: pretty, key-sorted JSON
    with a trailing newline (regenerate with ``python policies/generate.py``)."""
    expected = (
        json.dumps(generate_bucket_policy(BUCKET, principals=principals), indent=2, sort_keys=True)
        + "\n"
    )
    assert (ROOT / "policies" / name).read_text("utf-8") == expected


def test_generate_script_writes_exactly_the_checked_in_files(tmp_path: Path) -> None:
    """policies/generate.py regenerates every checked-in example and nothing else."""
    _generate_script().main(tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(EXAMPLE_FILES)
    for name in written:
        assert (tmp_path / name).read_bytes() == (ROOT / "policies" / name).read_bytes()


@pytest.mark.parametrize("name", sorted(EXAMPLE_FILES))
def test_example_policies_allow_lakelocks_requests(name: str) -> None:
    """The checked-in examples, as an operator would apply them, pass the request matrix for the
    writer role."""
    document = json.loads((ROOT / "policies" / name).read_text("utf-8"))
    validate_policy(document, bucket=BUCKET)
    for row in MATRIX:
        assert decide_row(document, row) is row.default, row.label
