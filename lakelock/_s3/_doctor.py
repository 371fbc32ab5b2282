"""One ``lakelock doctor`` run: can lakelock run safely on this store? (MinIO, R2, Ceph, AWS...)

:func:`run_doctor` runs the probes of :mod:`._features` in a scratch prefix
(``<lake prefix>.lakelock-doctor/<run>/``) and removes everything they wrote (conditional
deletes first, as a lakelock bucket policy may demand); :func:`verdict` says what the results
mean: safe only if every *required* probe passed (one that failed, or was skipped, could not
be shown to hold), how vacuum will delete on this store, and a warning for each failed
*recommended* probe (the bucket policy). The command line only prints them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from lakelock._layout import doctor_scratch
from lakelock._s3._features import PROBES, VACUUM_PROBE, Need, Probe, Scratch, Status, run_probe

__all__ = ["Cleanup", "ProbeResult", "Verdict", "cleanup", "run_doctor", "verdict"]


@dataclass(frozen=True)
class ProbeResult:
    """What one probe found: ``status`` and a line of ``detail`` saying what the store
    answered; ``needed`` says what lakelock needs the feature for (:data:`Need`)."""

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


def run_doctor(
    client: Any, bucket: str, prefix: str = "", *, probes: tuple[Probe, ...] = PROBES
) -> tuple[list[ProbeResult], Cleanup, str]:
    """Run ``probes`` against the lake at ``prefix`` of ``bucket`` (empty or ending with
    ``/``) through ``client`` (a boto3 S3 client: one that sends each request once reports
    what the store answered, not what a retry made of it) and clean up; returns the
    results, the cleanup and the scratch prefix used."""
    run = doctor_scratch(uuid.uuid4().hex[:12], prefix=prefix)
    scratch = Scratch(client, bucket, f"{prefix}{run}", prefix)
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
