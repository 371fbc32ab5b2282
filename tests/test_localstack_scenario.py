"""lakelock end to end on LocalStack's S3, an S3 implementation independent of the embedded
endpoint (opt-in: ``python -m pytest -m localstack``): concurrent appends from processes,
a lease with its fencing token, a partition renamed and one copied under the path lock, vacuum,
and ``lakelock doctor``'s verdict.

LocalStack 2026.3 honours neither per-key ETags in DeleteObjects nor If-Match on DeleteObject
(see tests/test_endpoint_conformance.py), so vacuum reports orphans but refuses to delete them:
deleting an object replaced since vacuum judged it is never an option.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._retry import RetryPolicy
from lakelock.cli import main
from lakelock.errors import StaleFenceError
from tests._localstack import MARKS, LocalStack
from tests._support.simtime import HOUR
from tests._support.vacuuming import vacuum_refused

pytestmark = list(MARKS)

ROOT = Path(__file__).resolve().parent.parent
WORKERS, APPENDS, ROWS = 4, 5, 3


def run_workers(role: str, argsets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Start one ``tests._localstack_workers`` process per argument set, all at once; their
    JSON records, after every one exited 0."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests._localstack_workers", role, json.dumps(args)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in argsets
    ]
    records = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        records += [json.loads(line) for line in out.splitlines()]
    return records


@pytest.fixture
def lake(localstack: LocalStack, request: pytest.FixtureRequest) -> Lake:
    bucket = localstack.new_bucket(request.node.name)
    retry = RetryPolicy(max_attempts=100, initial_backoff=0.005, max_backoff=0.1)
    return Lake(bucket, s3=localstack.client(), retry=retry)


def test_end_to_end_on_localstack(localstack: LocalStack, lake: Lake) -> None:
    """Every invariant holds on an independent S3: no append lost or doubled, each process's
    commits in versions that grow (group commit may put several processes' commits in one
    version); the lease excludes a second holder and its fence outlives nobody; a rename and a
    copy under the path lock leave the data where they say; vacuum finds the orphans and
    refuses to delete them here."""
    # Concurrent appends from processes.
    base = {"url": localstack.url, "bucket": lake.bucket, "appends": APPENDS, "rows": ROWS}
    records = run_workers("append", [{**base, "worker": w} for w in range(WORKERS)])
    assert len(records) == WORKERS * APPENDS
    versions = sorted(r["version"] for r in records)
    for worker in range(WORKERS):
        own = [r["version"] for r in sorted(records, key=lambda r: r["n"]) if r["worker"] == worker]
        assert own == sorted(set(own)), f"worker {worker}'s commits did not land in order"
    ids = sorted(lake.read("events").column("id").to_pylist())
    assert ids == list(range(WORKERS * APPENDS * ROWS))
    assert lake.registry.read().version >= versions[-1]

    # A lease: a second process cannot take it while held; the next holder's token is higher,
    # and a commit fenced by the old token is refused.
    lease_args = {"url": localstack.url, "bucket": lake.bucket, "name": "nightly"}
    with lake.lease("nightly", ttl=30) as held:
        fence = held.fence
        assert run_workers("contend", [lease_args]) == [{"won": False, "token": None}]
    (taken,) = run_workers("contend", [lease_args])
    assert taken["won"] is True
    assert taken["token"] > fence.token
    with lake.lease("nightly", ttl=30) as newer:
        lake.append("events", pa.table({"id": [-1], "day": [0]}), partition_by=["day"],
                    fence=newer.fence)  # fmt: skip
    with pytest.raises(StaleFenceError):
        lake.append("events", pa.table({"id": [-2], "day": [0]}), partition_by=["day"],
                    fence=fence)  # fmt: skip

    # Partition moves under the path lock.
    day1 = sorted(lake.read("events", partitions=["day=1"]).column("id").to_pylist())
    day2 = sorted(lake.read("events", partitions=["day=2"]).column("id").to_pylist())
    lake.rename_partition("events", "day=1", to_partition="day=7")
    lake.copy_partition("events", "day=2", to_dataset="archive")
    partitions = set(lake.registry.read().datasets["events"].partitions)
    assert "day=1" not in partitions
    assert "day=7" in partitions
    assert sorted(lake.read("events", partitions=["day=7"]).column("id").to_pylist()) == day1
    assert sorted(lake.read("archive").column("id").to_pylist()) == day2
    assert sorted(lake.read("events", partitions=["day=2"]).column("id").to_pylist()) == day2

    # vacuum: a stray uncommitted file and the files the rename left behind are orphans past
    # the window; deleting them is refused on this store, and nothing is deleted.
    (stray,) = lake.write("events", pa.table({"id": [99], "day": [0]}), partition_by=["day"])
    report = vacuum_refused(lake, at=time.time() + 2 * HOUR, match="refuses to delete")
    orphans = {o.key for o in report.orphans}
    assert stray.key in orphans
    assert any(key.startswith("datasets/events/day=1/") for key in orphans)
    assert sorted(lake.read("events").column("id").to_pylist()) == sorted([*ids, -1])


def test_doctor_on_localstack(
    localstack: LocalStack,
    lake: Lake,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``lakelock doctor`` against LocalStack: every required probe passes (safe), the delete
    probes fail and the vacuum line says vacuum refuses to delete there; exit 0."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    status = main(["doctor", f"s3://{lake.bucket}/lake", "--endpoint-url", localstack.url])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0, "\n".join(lines)
    assert any(line.startswith("vacuum: refuses to delete here") for line in lines), lines
    for name in ("DeleteObjects with per-key ETag", "conditional DeleteObject (If-Match)"):
        row = next(line for line in lines if line.startswith(name))
        assert " FAIL " in row, row
    assert lines[-1] == "lakelock can run safely on this store."
    assert localstack.client().list_objects_v2(Bucket=lake.bucket).get("KeyCount") == 0
