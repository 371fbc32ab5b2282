"""``lakelock doctor``: can lakelock run safely on this store? (MinIO, R2, Ceph, AWS...)

Prints what :func:`lakelock._s3._doctor.run_doctor` found (the probes of
:mod:`lakelock._s3._features`, run in a scratch prefix that is removed afterwards): a
pass/fail table, then the verdict: safe only if every *required* probe passed (else exit
status 1), how vacuum will delete on this store, and a warning for a failed *recommended*
probe (the bucket policy).
"""

from __future__ import annotations

import argparse
from typing import Any

from lakelock._cli._common import (
    LakeTarget,
    add_command,
    check_bucket,
    client_for,
    print_json,
    print_lines,
    render_table,
    to_jsonable,
)
from lakelock._s3._doctor import run_doctor, verdict

__all__ = ["add_parser"]


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "doctor",
        run,
        help="probe a store for the S3 features lakelock needs",
        description="Probe the store behind URL for every S3 feature lakelock relies on "
        "(create-only and compare-and-swap writes, conditional multipart completion, copies "
        "and deletes, listings in key order, no lifecycle rule expiring the lake, bucket "
        "policy enforcement), in a scratch prefix that is removed afterwards. NEEDED says "
        "what for: required (lakelock's writes), vacuum (how vacuum deletes), recommended "
        "(the bucket policy), optional (not used by lakelock). A bucket policy of lakelock's "
        "that lacks a statement `lakelock policy` makes now (one applied before it was added) "
        "is a warning naming it. Exit status 1 unless every required probe passed.",
        on_lake=True,
        json=True,
    )


def run(args: argparse.Namespace) -> int:
    target: LakeTarget = args.url
    # One attempt per request: the doctor reports what the store answered, not what an SDK
    # retry made of it (a retried create can meet its own first attempt).
    client = client_for(args, max_attempts=1)
    check_bucket(client, target.bucket)
    results, done, prefix = run_doctor(client, target.bucket, target.prefix)
    found = verdict(results)
    endpoint = client.meta.endpoint_url
    if args.json:
        print_json(
            {
                "url": target.url,
                "endpoint": endpoint,
                "ok": found.ok,
                "vacuum": found.vacuum,
                "probes": [{**to_jsonable(r), "required": r.required} for r in results],
                "cleanup": done,
            }
        )
        return 0 if found.ok else 1
    lines = [
        f"lakelock doctor: {target.url} at {endpoint}",
        f"scratch prefix: s3://{target.bucket}/{prefix}",
        "",
    ]
    lines += render_table(
        ("PROBE", "NEEDED", "RESULT", "DETAIL"),
        [(r.name, r.needed, r.status.upper(), r.detail) for r in results],
    )
    lines.append("")
    lines.append(
        f"cleanup: {done.removed} objects deleted, {done.aborted} uploads aborted"
        + (f", {len(done.left)} LEFT: {', '.join(done.left)}" if done.left else "")
    )
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skip")}
    lines.append(
        f"{len(results)} probes: {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['skip']} skipped."
    )
    lines.append(f"vacuum: {found.vacuum}")
    lines += [f"warning: {r.name}: {r.detail}" for r in found.warnings]
    if found.unsafe:
        lines.append(
            f"NOT SAFE: lakelock needs {len(found.unsafe)} feature(s) this store lacks or "
            f"that could not be checked ({'; '.join(r.name for r in found.unsafe)})."
        )
    else:
        lines.append("lakelock can run safely on this store.")
    print_lines(lines)
    return 0 if found.ok else 1
