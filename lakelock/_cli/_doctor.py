"""``lakelock doctor``: can lakelock run safely on this store? (MinIO, R2, Ceph, AWS...)

Runs the probes of :mod:`._probes` in a scratch prefix (``<lake prefix>.lakelock-doctor/<run>/``),
removes everything it wrote (conditional deletes first, as a lakelock bucket policy may demand),
and prints a pass/fail table, then a verdict: safe only if every *required* probe passed (one
that failed, or was skipped, could not be shown to hold: not safe, exit status 1); how vacuum
will delete on this store; and a warning for a failed *recommended* probe (the bucket policy).
"""

from __future__ import annotations

import argparse
import uuid
from dataclasses import dataclass
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
from lakelock._cli._probes import PROBES, VACUUM_PROBE, Need, Probe, Scratch, Status, run_probe
from lakelock._layout import doctor_scratch

__all__ = ["ProbeResult", "Verdict", "add_parser", "cleanup", "run_doctor", "verdict"]


@dataclass(frozen=True)
class ProbeResult:
    name: str
    needed: Need
    status: Status
    detail: str

    @property
    def required(self) -> bool:
        return self.needed == "required"


@dataclass(frozen=True)
class Cleanup:
    """What the doctor removed afterwards, and what it could not (keys)."""

    removed: int
    aborted: int
    left: tuple[str, ...]


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "doctor",
        run,
        help="probe a store for the conditional requests lakelock needs",
        description="Probe the store behind URL for every conditional request lakelock relies "
        "on (create-only and compare-and-swap writes, conditional multipart completion, "
        "copies and deletes, bucket policy enforcement), in a scratch prefix that is removed "
        "afterwards. NEEDED says what for: required (lakelock's writes), vacuum (how vacuum "
        "deletes), recommended (the bucket policy), optional (not used by lakelock). Exit "
        "status 1 unless every required probe passed.",
        on_lake=True,
        json=True,
    )


def run_doctor(
    client: Any, target: LakeTarget, *, probes: tuple[Probe, ...] = PROBES
) -> tuple[list[ProbeResult], Cleanup, str]:
    """Run ``probes`` against ``target`` and clean up; returns the results, the cleanup and
    the scratch prefix used."""
    run = doctor_scratch(uuid.uuid4().hex[:12], prefix=target.prefix)
    scratch = Scratch(client, target.bucket, f"{target.prefix}{run}", target.prefix)
    results = []
    try:
        for probe in probes:
            status, detail = run_probe(probe, scratch)
            results.append(ProbeResult(probe.name, probe.needed, status, detail))
    finally:
        done = cleanup(scratch)
    return results, done, scratch.prefix


def cleanup(scratch: Scratch) -> Cleanup:
    """Abort the probes' unfinished uploads and delete every object they wrote: by
    ``DeleteObject`` with ``If-Match`` on the ETag just read, falling back to a plain delete
    (inside the scratch prefix only) where the store refuses conditional deletes."""
    aborted = 0
    for key, upload_id in scratch.uploads:
        if scratch.ask("abort_multipart_upload", Key=key, UploadId=upload_id).ok:
            aborted += 1
    keys = set(scratch.touched) | _listed(scratch)
    removed = 0
    left = []
    for key in sorted(keys):
        head = scratch.ask("head_object", Key=key)
        if head.status == 404:
            continue
        deleted = head.ok and scratch.ask("delete_object", Key=key, IfMatch=head.etag).ok
        if not deleted and key.startswith(scratch.prefix):
            deleted = scratch.ask("delete_object", Key=key).ok
        if deleted and scratch.ask("head_object", Key=key).status == 404:
            removed += 1
        else:
            left.append(key)
    return Cleanup(removed, aborted, tuple(left))


def _listed(scratch: Scratch) -> set[str]:
    answer = scratch.ask("list_objects_v2", Prefix=scratch.prefix)
    return {item["Key"] for item in answer.response.get("Contents", [])} if answer.ok else set()


@dataclass(frozen=True)
class Verdict:
    """What the results mean: ``unsafe`` are the required probes that did not pass (failed,
    or skipped: not shown to hold); ``vacuum`` says how vacuum deletes here; ``warnings`` are
    the recommended probes that failed."""

    unsafe: tuple[ProbeResult, ...]
    vacuum: str
    warnings: tuple[ProbeResult, ...]

    @property
    def ok(self) -> bool:
        return not self.unsafe


def verdict(results: list[ProbeResult]) -> Verdict:
    unsafe = tuple(r for r in results if r.required and r.status != "pass")
    vacuum = next((r.detail for r in results if r.name == VACUUM_PROBE), "not probed")
    warnings = tuple(r for r in results if r.needed == "recommended" and r.status == "fail")
    return Verdict(unsafe, vacuum, warnings)


def run(args: argparse.Namespace) -> int:
    target: LakeTarget = args.url
    # One attempt per request: the doctor reports what the store answered, not what an SDK
    # retry made of it (a retried create can meet its own first attempt).
    client = client_for(args, max_attempts=1)
    check_bucket(client, target.bucket)
    results, done, prefix = run_doctor(client, target)
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
