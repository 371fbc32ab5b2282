"""``lakelock policy``: the bucket policy of :func:`lakelock.generate_bucket_policy` as JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from lakelock._cli._common import add_command
from lakelock._layout import DATASETS_PREFIX, METASTORE_PREFIX
from lakelock._policy import generate_bucket_policy

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "policy",
        run,
        help="print a bucket policy that makes S3 refuse unconditional writes",
        description="Print (to stdout) a bucket policy whose Deny statements make S3 refuse "
        "every write that bypasses lakelock's conditional requests. Apply it with e.g. "
        "`aws s3api put-bucket-policy --bucket B --policy file://policy.json`.",
        arguments=_arguments,
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bucket", required=True, help="the bucket the policy is for")
    parser.add_argument(
        "--principal",
        action="append",
        required=True,
        metavar="ARN",
        help="who the policy binds (their unconditional writes are denied): an IAM role/user "
        "ARN, a 12-digit account id, or '*' for everybody (repeat for several)",
    )
    parser.add_argument(
        "--prefix", default="", help="the lake's prefix in the bucket (default: the whole bucket)"
    )
    parser.add_argument(
        "--datasets-prefix",
        default=DATASETS_PREFIX,
        metavar="P",
        help="where data files live, under --prefix: writes there must be create-only "
        f"(default: {DATASETS_PREFIX}, lakelock's layout)",
    )
    parser.add_argument(
        "--metastore-prefix",
        default=METASTORE_PREFIX,
        metavar="P",
        help="where the registry, manifests, leases and locks live, under --prefix: writes "
        f"there must be create-only or compare-and-swap (default: {METASTORE_PREFIX}, "
        "lakelock's layout)",
    )
    parser.add_argument(
        "--deny-unconditional-delete",
        action="store_true",
        help="also deny deletes without If-Match in datasets/, views/ and the registry's "
        "write-once objects, deleting object versions there, and any delete of the registry's "
        "root, leases and lock tables",
    )
    parser.add_argument(
        "--allow-manifest-overwrite",
        action="store_true",
        help="omit the statement keeping metastore/manifests/ create-only",
    )
    parser.add_argument(
        "--partition",
        default="aws",
        choices=("aws", "aws-cn", "aws-us-gov"),
        help="the AWS partition of the bucket's ARNs (default: aws)",
    )
    parser.add_argument(
        "--compact", action="store_true", help="print the JSON on one line (default: indented)"
    )


def run(args: argparse.Namespace) -> int:
    prefix = args.prefix
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    policy = generate_bucket_policy(
        args.bucket,
        principals=args.principal,
        prefix=prefix,
        datasets_prefix=args.datasets_prefix,
        metastore_prefix=args.metastore_prefix,
        create_only_manifests=not args.allow_manifest_overwrite,
        deny_unconditional_delete=args.deny_unconditional_delete,
        partition=args.partition,
    )
    option = 0 if args.compact else orjson.OPT_INDENT_2
    sys.stdout.write(orjson.dumps(policy, option=option).decode() + "\n")
    return 0
