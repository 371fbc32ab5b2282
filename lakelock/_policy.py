"""Bucket policies that make S3 itself refuse the writes lakelock's protocols forbid.

lakelock's safety rests on every writer using conditional requests: data files and manifests are
created with ``If-None-Match: *`` and never overwritten; the registry, leases and lock tables
change only by compare-and-swap (``If-Match: <etag>``). One careless writer that issues a plain
``PutObject`` breaks that for everybody. :func:`generate_bucket_policy` returns a bucket policy
whose **Deny** statements make S3 reject such writes from the listed principals with
``403 AccessDenied`` (:class:`lakelock.errors.AccessDeniedError`).

How S3 evaluates the condition keys used here (S3 User Guide, "Enforce conditional writes" and
"Enforce conditional deletes"; Service Authorization Reference for Amazon S3):

- ``s3:if-none-match`` / ``s3:if-match`` carry the request's ``If-None-Match`` / ``If-Match``
  header. They exist only when the header was sent, so ``Null: true`` means "sent without it".
  For ``s3:PutObject`` they are set by ``PutObject``, ``CompleteMultipartUpload`` and
  ``CopyObject`` (the *destination* headers; ``x-amz-copy-source-if-*`` are preconditions on
  the source and do not set them). For ``s3:DeleteObject`` S3 sets ``s3:if-match`` from the
  ``If-Match`` header of ``DeleteObject``; ``DeleteObjects`` is authorised per key and its
  enforcement is documented alike, each entry's ``<ETag>`` being that key's condition.
- ``s3:ObjectCreationOperation`` is ``true`` for the requests that create an object
  (``PutObject``, ``CopyObject``, ``CompleteMultipartUpload``) and ``false`` for the other
  requests that are also authorised as ``s3:PutObject`` -- ``CreateMultipartUpload``,
  ``UploadPart``, ``UploadPartCopy`` -- which cannot carry conditional headers. Scoping each
  write Deny with ``Bool: {s3:ObjectCreationOperation: true}`` keeps multipart uploads possible
  while the completion, where the condition is evaluated, must still be conditional.
- Within one statement, keys under one operator and the operators themselves are ANDed; values
  listed for one key are ORed. A missing key makes ``Bool``/``String*`` false, negated
  operators (``StringNotEquals``...) true; only ``Null`` and ``...IfExists`` test presence.

The statements, in the order emitted (``<p>`` = ``prefix``):

``DenyUnconditionalCreateInDatasets``
    ``s3:PutObject`` on ``<p>datasets/*`` when ``If-None-Match`` is absent and the request
    creates an object. Data files are write-once: a plain PUT, a CopyObject without it, an
    unconditional or ``If-Match`` multipart completion -- all overwrite-capable -- are refused;
    ``PutObject``/``CompleteMultipartUpload`` with ``If-None-Match: *`` pass, and so do
    ``CreateMultipartUpload``, ``UploadPart`` and ``UploadPartCopy`` (partition copies are
    UploadPartCopy + a conditional completion, see "Write-once objects" in
    docs/ARCHITECTURE.md). ``If-None-Match`` takes only ``*``
    on S3 (anything else is rejected with 501), so presence is the whole test. A
    ``CopyObject`` with ``If-None-Match: *`` passes the policy; whether the store honours it is
    another matter (AWS only since late 2025; older AWS docs answer 501), which is why lakelock
    copies by UploadPartCopy.
``DenyUnconditionalWriteInMetastore``
    ``s3:PutObject`` on ``<p>metastore/*`` when *both* ``If-Match`` and ``If-None-Match`` are
    absent. This is where the AWS blog's example is wrong for lakelock: it denies any metastore
    write without ``If-Match``, which also refuses the registry's very first commit (a
    create-only ``If-None-Match: *`` PUT) and the creation of every lease and lock table. Both
    keys under one ``Null`` operator are ANDed: only a write carrying neither is denied.
``DenyOverwriteInManifests`` (``create_only_manifests=True``, the default)
    ``s3:PutObject`` on ``<p>metastore/manifests/*`` without ``If-None-Match``: manifests are
    write-once and content-addressed, so an ``If-Match`` overwrite there would silently change
    what an already committed registry version points to.
``DenyOverwriteOfRegistryVersions``
    ``s3:PutObject`` on ``<p>metastore/snapshots/*``, ``nodes/*``, ``intents/*`` and
    ``backups/*`` without ``If-None-Match``: a dataset version's snapshot, its index nodes,
    the intents (commits before they apply, then the manifests of their files) and a format-1
    root kept on upgrade are written once, create-only, and named by the digest of their
    bytes, as manifests are; no lakelock writer overwrites one.
    Overwritten with ``If-Match`` (which the metastore's CAS rule lets through), the version
    no longer matches its key and every reader and writer of the lake meets
    ``RegistryCorruptError``. Unlike the manifests statement this one has no option:
    nothing of lakelock's, of any format, writes there otherwise.
``DenyUnconditionalCreateInViews``
    ``s3:PutObject`` on ``<p>views/*`` without ``If-None-Match``, as for data files: the
    Iceberg views (metadata, manifest lists, manifests: :mod:`lakelock._mirror`) are
    write-once, created ``If-None-Match: *``. (The Delta log, ``datasets/<d>/_delta_log/``, is
    covered by the datasets statements.)
``DenyUnconditionalDeleteInDatasets`` (``deny_unconditional_delete=True``)
    ``s3:DeleteObject`` on ``<p>datasets/*`` without ``If-Match``. Write-once also means no
    silent delete; ``vacuum`` deletes with ``If-Match: <etag>`` (``DeleteObject``, or the
    per-entry ETag of ``DeleteObjects``) and stays allowed. S3 additionally requires
    ``s3:GetObject`` for a delete conditioned on an ETag; this policy never denies it.
``DenyVersionDeleteInDatasets`` (``deny_unconditional_delete=True``)
    ``s3:DeleteObjectVersion`` on ``<p>datasets/*``, unconditionally. On a versioned bucket a
    ``DeleteObject`` only adds a delete marker, but deleting a *version* destroys the bytes and
    conditional deletes apply only to the current version, so ``If-Match`` cannot guard it.
    lakelock never deletes versions; expire them with a lifecycle rule (not subject to bucket
    policies).
``DenyUnconditionalDeleteInViews``, ``DenyVersionDeleteInViews`` (``deny_unconditional_delete``)
    The same two rules for ``<p>views/*``: vacuum deletes view objects with ``If-Match``.
``DenyDeleteOfTheRegistryRoot`` (``deny_unconditional_delete``) ``s3:DeleteObject`` on
    ``<p><metastore>dataset_registry.json``, conditional or not. lakelock never deletes the
    root; deleted, the lake reads as empty (every dataset gone) until the next commit, which
    starts a new registry over the old one's objects.
``DenyDeleteOfLeasesLockTablesAndBackups`` (``deny_unconditional_delete``)
    ``s3:DeleteObject`` on ``<p><metastore>leases/*``, ``locks/*`` and ``backups/*``,
    conditional or not. lakelock never deletes them: a deleted lease starts again at token 1
    and a deleted lock table gives out its tokens again, so the registry, which has seen the
    higher ones, refuses every commit of the next holder for good (``StaleFenceError``) while
    a holder paused with an old, higher token still commits; a backup is the only copy of a
    format-1 root.
``DenyUnconditionalDeleteInMetastore`` (``deny_unconditional_delete``)
    ``s3:DeleteObject`` without ``If-Match`` on ``<p><metastore>snapshots/*``, ``nodes/*``,
    ``manifests/*`` and ``intents/*``, as under ``datasets/``: the registry's write-once
    objects are deleted by ``vacuum`` only, with ``If-Match``, once no version the retention
    keeps reads them (and an intent once no fold can apply it); a tool deleting them by key
    or age would leave versions, the current one too, unreadable. (``probes/``, the
    throwaway objects of the conditional-delete probe, stays open: a store that honours no
    conditional delete is found by deleting one.)
``DenyVersionDeleteInMetastore`` (``deny_unconditional_delete``)
    ``s3:DeleteObjectVersion`` on ``<p><metastore>*``, the root included: lakelock never
    deletes a version, and ``If-Match`` cannot guard one.

Scope and limits:

- The statements bind only ``principals``. Deny is what binds principals of other accounts: a
  bucket policy cannot take away an Allow granted elsewhere, but an explicit Deny wins over
  every Allow. The policy grants nothing; same-account writers get access from their identity
  policies, and a cross-account writer additionally needs an Allow from the bucket owner.
  ``principals=["*"]`` binds everybody, including the bucket owner's administrators.
- An account id (or ``arn:aws:iam::<id>:root``) binds every identity of that account; a role
  ARN binds every session of the role; a user ARN, that user. S3 stores role and user
  principals as unique ids: re-creating a role with the same name needs the policy re-applied.
- Replication (``s3:ReplicateObject``) and lifecycle actions are not ``s3:PutObject`` requests
  and are not restricted here.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Iterable
from typing import Any

from lakelock._layout import (
    BACKUP_PREFIX,
    DATASETS_PREFIX,
    INTENT_PREFIX,
    LEASES_PREFIX,
    LOCKS_PREFIX,
    MANIFEST_PREFIX,
    METASTORE_PREFIX,
    NODE_PREFIX,
    REGISTRY_KEY,
    SNAPSHOT_PREFIX,
    VIEWS_PREFIX,
)
from lakelock.errors import InvalidNameError

__all__ = ["generate_bucket_policy"]

POLICY_VERSION = "2012-10-17"
#: Where manifests are below the metastore prefix (which a policy may move).
MANIFESTS_SUBPREFIX = MANIFEST_PREFIX.removeprefix(METASTORE_PREFIX)
#: Where leases, lock tables and format-1 backups are below the metastore prefix: never
#: deleted.
KEPT_SUBPREFIXES = tuple(
    p.removeprefix(METASTORE_PREFIX) for p in (LEASES_PREFIX, LOCKS_PREFIX, BACKUP_PREFIX)
)
#: Where the registry's write-once objects are below it: deleted by vacuum, with If-Match.
WRITTEN_ONCE_SUBPREFIXES = tuple(
    p.removeprefix(METASTORE_PREFIX)
    for p in (SNAPSHOT_PREFIX, NODE_PREFIX, MANIFEST_PREFIX, INTENT_PREFIX)
)
#: Where the objects of a registry version are that no option lets be overwritten: the
#: write-once ones but manifests (which have their own statement), and format-1 backups.
VERSION_SUBPREFIXES = (
    *(s for s in WRITTEN_ONCE_SUBPREFIXES if s != MANIFESTS_SUBPREFIX),
    BACKUP_PREFIX.removeprefix(METASTORE_PREFIX),
)

SID_CREATE_DATASETS = "DenyUnconditionalCreateInDatasets"
SID_WRITE_METASTORE = "DenyUnconditionalWriteInMetastore"
SID_OVERWRITE_MANIFESTS = "DenyOverwriteInManifests"
SID_OVERWRITE_VERSIONS = "DenyOverwriteOfRegistryVersions"
SID_DELETE_DATASETS = "DenyUnconditionalDeleteInDatasets"
SID_DELETE_VERSION_DATASETS = "DenyVersionDeleteInDatasets"
SID_CREATE_VIEWS = "DenyUnconditionalCreateInViews"
SID_DELETE_VIEWS = "DenyUnconditionalDeleteInViews"
SID_DELETE_VERSION_VIEWS = "DenyVersionDeleteInViews"
SID_DELETE_ROOT = "DenyDeleteOfTheRegistryRoot"
SID_DELETE_KEPT = "DenyDeleteOfLeasesLockTablesAndBackups"
SID_DELETE_METASTORE = "DenyUnconditionalDeleteInMetastore"
SID_DELETE_VERSION_METASTORE = "DenyVersionDeleteInMetastore"
#: The statements ``deny_unconditional_delete=True`` adds: a policy holding any of them was
#: made with it (``lakelock doctor`` tells so).
DELETE_SIDS = frozenset(
    {
        SID_DELETE_DATASETS,
        SID_DELETE_VERSION_DATASETS,
        SID_DELETE_VIEWS,
        SID_DELETE_VERSION_VIEWS,
        SID_DELETE_ROOT,
        SID_DELETE_KEPT,
        SID_DELETE_METASTORE,
        SID_DELETE_VERSION_METASTORE,
    }
)
# The root's name within the metastore area (wherever ``metastore_prefix`` puts that area).
REGISTRY_NAME = REGISTRY_KEY.removeprefix(METASTORE_PREFIX)

_PARTITIONS = frozenset({"aws", "aws-cn", "aws-us-gov"})
_ACCOUNT_ID = re.compile(r"\d{12}", re.ASCII)
# IAM names and paths: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html
_IAM_PRINCIPAL_ARN = re.compile(
    r"arn:(?P<partition>[a-z-]+):iam::(?P<account>\d{12}):"
    r"(?:root|(?:role|user)/(?:[\w+=,.@-]+/)*[\w+=,.@-]{1,64})",
    re.ASCII,
)
_BUCKET_CHARS = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", re.ASCII)
# General purpose bucket naming rules (S3 User Guide, "Bucket naming rules").
_RESERVED_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def generate_bucket_policy(
    bucket: str,
    *,
    principals: Iterable[str],
    prefix: str = "",
    datasets_prefix: str = DATASETS_PREFIX,
    metastore_prefix: str = METASTORE_PREFIX,
    views_prefix: str = VIEWS_PREFIX,
    create_only_manifests: bool = True,
    deny_unconditional_delete: bool = False,
    partition: str = "aws",
) -> dict[str, Any]:
    """Return a bucket policy (a fresh JSON-ready dict) that denies ``principals`` every write
    that bypasses lakelock's conditional-request protocols. See the module docstring for each
    statement and why it is there.

    ``principals`` are IAM role or user ARNs, 12-digit account ids (binding every identity of
    the account) or the single value ``"*"`` (everybody). ``prefix`` is the lake's prefix in the
    bucket (``""`` or ending in ``/``); ``datasets_prefix``, ``metastore_prefix`` and
    ``views_prefix`` (the Iceberg views, :mod:`lakelock._mirror`) are relative to it and must
    not overlap. Output is deterministic: principals are de-duplicated and
    sorted, statements come in a fixed order with fixed Sids.

    Raises :class:`~lakelock.errors.InvalidNameError` (a ``ValueError``) on a bad bucket name,
    principal, prefix or partition.
    """
    if partition not in _PARTITIONS:
        raise InvalidNameError(
            partition, f"unknown AWS partition; expected one of {sorted(_PARTITIONS)}"
        )
    _check_bucket(bucket)
    principal_element = _principal_element(principals, partition)
    _check_prefix(prefix, what="prefix", allow_empty=True)
    _check_prefix(datasets_prefix, what="datasets_prefix", allow_empty=False)
    _check_prefix(metastore_prefix, what="metastore_prefix", allow_empty=False)
    _check_prefix(views_prefix, what="views_prefix", allow_empty=False)
    areas = (datasets_prefix, metastore_prefix, views_prefix)
    for a, b in itertools.permutations(areas, 2):
        if a.startswith(b):
            # Overlapping areas would make the create-only rule cover the registry (every CAS
            # denied) or the CAS rule cover data files (overwrites let through).
            raise InvalidNameError(
                areas,
                "datasets_prefix, metastore_prefix and views_prefix must not contain one another",
            )

    objects = f"arn:{partition}:s3:::{bucket}/{prefix}"
    datasets = f"{objects}{datasets_prefix}*"
    metastore = f"{objects}{metastore_prefix}*"
    views = f"{objects}{views_prefix}*"
    creates = {"Bool": {"s3:ObjectCreationOperation": "true"}}

    statements: list[dict[str, Any]] = [
        _deny(
            SID_CREATE_DATASETS,
            principal_element,
            "s3:PutObject",
            datasets,
            {"Null": {"s3:if-none-match": "true"}, **creates},
        ),
        _deny(
            SID_WRITE_METASTORE,
            principal_element,
            "s3:PutObject",
            metastore,
            {"Null": {"s3:if-match": "true", "s3:if-none-match": "true"}, **creates},
        ),
    ]
    if create_only_manifests:
        statements.append(
            _deny(
                SID_OVERWRITE_MANIFESTS,
                principal_element,
                "s3:PutObject",
                f"{objects}{metastore_prefix}{MANIFESTS_SUBPREFIX}*",
                {"Null": {"s3:if-none-match": "true"}, **creates},
            )
        )
    statements.append(
        _deny(
            SID_OVERWRITE_VERSIONS,
            principal_element,
            "s3:PutObject",
            [f"{objects}{metastore_prefix}{sub}*" for sub in VERSION_SUBPREFIXES],
            {"Null": {"s3:if-none-match": "true"}, **creates},
        )
    )
    statements.append(
        _deny(
            SID_CREATE_VIEWS,
            principal_element,
            "s3:PutObject",
            views,
            {"Null": {"s3:if-none-match": "true"}, **creates},
        )
    )
    if deny_unconditional_delete:
        statements.append(
            _deny(
                SID_DELETE_DATASETS,
                principal_element,
                "s3:DeleteObject",
                datasets,
                {"Null": {"s3:if-match": "true"}},
            )
        )
        statements.append(
            _deny(
                SID_DELETE_VERSION_DATASETS,
                principal_element,
                "s3:DeleteObjectVersion",
                datasets,
                None,
            )
        )
        statements.append(
            _deny(
                SID_DELETE_VIEWS,
                principal_element,
                "s3:DeleteObject",
                views,
                {"Null": {"s3:if-match": "true"}},
            )
        )
        statements.append(
            _deny(
                SID_DELETE_VERSION_VIEWS, principal_element, "s3:DeleteObjectVersion", views, None
            )
        )
        root = f"{objects}{metastore_prefix}{REGISTRY_NAME}"
        statements.append(_deny(SID_DELETE_ROOT, principal_element, "s3:DeleteObject", root, None))
        kept = [f"{objects}{metastore_prefix}{sub}*" for sub in KEPT_SUBPREFIXES]
        statements.append(_deny(SID_DELETE_KEPT, principal_element, "s3:DeleteObject", kept, None))
        written_once = [f"{objects}{metastore_prefix}{sub}*" for sub in WRITTEN_ONCE_SUBPREFIXES]
        statements.append(
            _deny(
                SID_DELETE_METASTORE,
                principal_element,
                "s3:DeleteObject",
                written_once,
                {"Null": {"s3:if-match": "true"}},
            )
        )
        statements.append(
            _deny(
                SID_DELETE_VERSION_METASTORE,
                principal_element,
                "s3:DeleteObjectVersion",
                metastore,
                None,
            )
        )
    return {"Version": POLICY_VERSION, "Statement": statements}


def _deny(
    sid: str,
    principal: str | dict[str, list[str]],
    action: str,
    resource: str | list[str],
    condition: dict[str, dict[str, str]] | None,
) -> dict[str, Any]:
    # Copies, so that no two statements (or two calls) share a mutable principal list.
    statement: dict[str, Any] = {
        "Sid": sid,
        "Effect": "Deny",
        "Principal": principal if isinstance(principal, str) else {"AWS": list(principal["AWS"])},
        "Action": action,
        "Resource": resource if isinstance(resource, str) else list(resource),
    }
    if condition is not None:
        statement["Condition"] = {op: dict(keys) for op, keys in condition.items()}
    return statement


def _check_bucket(bucket: object) -> None:
    if not isinstance(bucket, str):
        raise InvalidNameError(bucket, "bucket name must be a string")
    if not _BUCKET_CHARS.fullmatch(bucket):
        raise InvalidNameError(
            bucket,
            "bucket names are 3-63 characters of a-z, 0-9, '.' and '-', "
            "starting and ending with a letter or digit",
        )
    if ".." in bucket:
        raise InvalidNameError(bucket, "bucket names cannot contain two adjacent periods")
    try:
        ipaddress.IPv4Address(bucket)
    except ValueError:
        pass
    else:
        raise InvalidNameError(bucket, "bucket names cannot be formatted as an IP address")
    if bucket.startswith(_RESERVED_BUCKET_PREFIXES) or bucket.endswith(_RESERVED_BUCKET_SUFFIXES):
        raise InvalidNameError(bucket, "bucket name uses a prefix or suffix reserved by S3")


def _check_prefix(value: object, *, what: str, allow_empty: bool) -> None:
    if not isinstance(value, str):
        raise InvalidNameError(value, f"{what} must be a string")
    if value == "":
        if allow_empty:
            return
        raise InvalidNameError(value, f"{what} cannot be empty")
    if not value.endswith("/"):
        raise InvalidNameError(value, f"{what} must end with '/'")
    if value.startswith("/"):
        raise InvalidNameError(
            value, f"{what} must not start with '/' (keys have no leading slash)"
        )
    # '*' and '?' are wildcards in a policy Resource and '${' starts a policy variable: any of
    # them would silently widen or change what the statement covers.
    if "*" in value or "?" in value or "${" in value:
        raise InvalidNameError(value, f"{what} cannot contain '*', '?' or '${{'")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise InvalidNameError(value, f"{what} cannot contain control characters")
    for segment in value[:-1].split("/"):
        if segment in ("", ".", ".."):
            raise InvalidNameError(value, f"{what} has an empty, '.' or '..' segment")


def _principal_element(principals: Iterable[str], partition: str) -> str | dict[str, list[str]]:
    if isinstance(principals, str | bytes):
        # A bare string would be iterated character by character.
        raise InvalidNameError(
            principals, "principals must be a list of ARNs or account ids, not a string"
        )
    given = list(principals)
    if not given:
        raise InvalidNameError(given, "at least one principal is required")
    if "*" in given:
        if len(set(given)) > 1:
            raise InvalidNameError(given, "'*' already covers every principal; list it alone")
        return "*"
    arns = sorted({_principal_arn(p, partition) for p in given})
    return {"AWS": arns}


def _principal_arn(principal: object, partition: str) -> str:
    if not isinstance(principal, str):
        raise InvalidNameError(principal, "a principal must be a string")
    if _ACCOUNT_ID.fullmatch(principal):
        return f"arn:{partition}:iam::{principal}:root"
    if principal.startswith(("arn:aws:sts:", "arn:aws-cn:sts:", "arn:aws-us-gov:sts:")):
        raise InvalidNameError(
            principal,
            "an assumed-role session ARN binds a single session; use the role's IAM ARN "
            "(arn:aws:iam::<account>:role/<name>)",
        )
    match = _IAM_PRINCIPAL_ARN.fullmatch(principal)
    if match is None:
        raise InvalidNameError(
            principal,
            "expected a 12-digit account id or an IAM ARN of the form "
            "arn:aws:iam::<account>:role/<name>, :user/<name> or :root (no wildcards)",
        )
    if match["partition"] != partition:
        raise InvalidNameError(
            principal,
            f"principal is in partition {match['partition']!r}, the bucket in {partition!r}",
        )
    return principal
