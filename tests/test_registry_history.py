"""Several processes x threads commit to one registry through seeded faults; a checker over
the recorded invocations and outcomes verifies the registry's history (Jepsen-style)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from lakelock._registry import Registry
from lakelock._s3 import ObjectStore
from lakelock.testing import FaultRule, S3Endpoint
from tests._registry_workers import WINDOW

ROOT_DIR = Path(__file__).resolve().parent.parent


def check_history(invocations: list[dict[str, Any]], registry: Registry) -> list[str]:
    """Every violation of the registry's guarantees in this history (empty: none)."""
    snapshot = registry.read()
    problems = []
    records = list(snapshot.commits)
    if len(records) >= WINDOW:
        problems.append("history longer than the commit window: cannot check it")
    counts: dict[str, int] = {}
    versions: dict[str, int] = {}
    for r in records:
        counts[r.id] = counts.get(r.id, 0) + 1
        versions[r.id] = r.version
    for inv in invocations:
        seen = counts.get(inv["id"], 0)
        if inv["outcome"] == "ok" and seen != 1:
            problems.append(f"acknowledged commit {inv['id']} recorded {seen} times")
        if inv["outcome"] == "ok" and versions.get(inv["id"]) != inv["version"]:
            problems.append(f"{inv['id']} acknowledged as v{inv['version']}, recorded otherwise")
        if inv["outcome"] == "fail" and seen != 0:
            problems.append(f"failed commit {inv['id']} is in the registry")
        if inv["outcome"] == "unknown" and seen > 1:
            problems.append(f"unknown commit {inv['id']} recorded {seen} times")
    distinct = sorted({r.version for r in records})
    if distinct != list(range(distinct[0], snapshot.version + 1)):
        problems.append(f"versions are not contiguous: {distinct[:5]}...{distinct[-5:]}")
    acknowledged = sorted((i for i in invocations if i["outcome"] == "ok"), key=lambda i: i["end"])
    for earlier in acknowledged:
        for later in acknowledged:
            if later["start"] > earlier["end"] and later["version"] <= earlier["version"]:
                problems.append(f"{later['id']} began after {earlier['id']} ended but is not newer")
    files = {f.key for f in registry.files("hist")} if "hist" in snapshot.datasets else set()
    for inv in invocations:
        if inv["outcome"] == "ok" and inv["key"] not in files:
            problems.append(f"file of acknowledged commit {inv['id']} is not registered")
        if inv["outcome"] == "fail" and inv["key"] in files:
            problems.append(f"file of failed commit {inv['id']} is registered")
    return problems


def run_history(
    s3: S3Endpoint, bucket: str, tmp_path: Path, *, processes: int, threads: int, commits: int
) -> list[dict[str, Any]]:
    """Run the worker processes against the endpoint and collect their invocations."""
    env = {**os.environ, "PYTHONPATH": str(ROOT_DIR)}
    outs = [tmp_path / f"worker-{p}.jsonl" for p in range(processes)]
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests._registry_workers",
                s3.url,
                bucket,
                f"p{p}",
                str(threads),
                str(commits),
                str(out),
            ],
            cwd=ROOT_DIR,
            env=env,
        )
        for p, out in enumerate(outs)
    ]
    for child in children:
        assert child.wait(timeout=240) == 0
    return [orjson.loads(line) for out in outs for line in out.read_bytes().splitlines() if line]


CHAOS = [
    FaultRule(
        "conflict", operation="PutObject", prefix="metastore/dataset_registry", probability=0.05
    ),
    FaultRule("slowdown", operation="*", probability=0.02),
    FaultRule("error", operation="PutObject", probability=0.02),
    FaultRule("reset", operation="GetObject", probability=0.02),
    FaultRule(
        "lost_ack", operation="PutObject", prefix="metastore/dataset_registry", probability=0.06
    ),
    FaultRule(
        "lost_ack_5xx", operation="PutObject", prefix="metastore/manifests", probability=0.03
    ),
    FaultRule("latency", operation="*", delay=0.001, jitter=0.004),
    # Batches fold many commits into one root swap, so few root PUTs are made: the first two
    # that no other fault strikes lose their acknowledgement whatever the seed.
    FaultRule("lost_ack", operation="PutObject", prefix="metastore/dataset_registry", count=2),
]


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_history_is_linearizable_under_faults(
    s3: S3Endpoint, bucket: str, tmp_path: Path, seed: int
) -> None:
    """3 processes x 4 threads x 8 commits with seeded faults: acknowledged commits are in the
    registry exactly once at their version, failed ones absent, unknown ones at most once,
    versions contiguous, real-time order kept."""
    s3.set_faults([FaultRule(**{**r.to_json(), "bucket": bucket}) for r in CHAOS], seed=seed)
    invocations = run_history(s3, bucket, tmp_path, processes=3, threads=4, commits=8)
    injected = s3.faults()["injected"]
    s3.clear_faults()
    registry = Registry(ObjectStore(s3.client(), bucket), commit_window=WINDOW)
    assert len(invocations) == 96
    assert check_history(invocations, registry) == []
    assert injected.get("lost_ack", 0) > 0, injected  # the run really exercised lost acks
    assert sum(i["outcome"] == "ok" for i in invocations) > 80


def test_checker_sees_a_double_commit(
    s3: S3Endpoint, bucket: str, tmp_path: Path, admin: Any
) -> None:
    """Mutation check: a history where an acknowledged commit was applied twice, or a failed
    one landed, is caught by the checker (it can see the bugs it guards against)."""
    invocations = run_history(s3, bucket, tmp_path, processes=1, threads=2, commits=3)
    registry = Registry(ObjectStore(s3.client(), bucket), commit_window=WINDOW)
    assert check_history(invocations, registry) == []
    ok = next(i for i in invocations if i["outcome"] == "ok")
    # Commit the same change again under the same id, bypassing the idempotency check.
    from lakelock._datafile import DataFile

    key = ok["key"].replace(".parquet", "-again.parquet")
    duplicate = DataFile("hist", key, "", 1, 1, "sha256:00", '"0"', "w", None, time.time())
    registry.commit("hist", add=[duplicate], commit_id="fresh")
    doc_ids = [c.id for c in registry.read().commits]
    store = registry.store
    body = orjson.loads(store.get("metastore/dataset_registry.json").body)
    body["commits"].append({**body["commits"][-1], "id": ok["id"]})
    admin.put_object(
        Bucket=store.bucket, Key="metastore/dataset_registry.json", Body=orjson.dumps(body)
    )
    assert doc_ids.count(ok["id"]) == 1
    problems = check_history(invocations, registry)
    assert any("recorded 2 times" in p for p in problems)
    failed = {**ok, "outcome": "fail", "id": "fresh", "key": duplicate.key}
    assert any("failed commit fresh" in p for p in check_history([*invocations, failed], registry))
