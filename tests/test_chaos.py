"""The chaos run (issue 8): processes x threads append, rename, lease and commit through the
embedded endpoint with seeded faults on every operation; a checker then verifies the whole
recorded history, Jepsen-style.

What is recorded (``tests/_chaos_workers.py``): every invocation with wall-clock start and end
and its outcome (``ok`` with a version, ``fail``, ``unknown``); every lease holding (when the
holder believed it held the lease, in wall-clock time and in its own server-time bounds);
snapshots taken by a reader thread in each process.

What the checker (:func:`check_chaos`) verifies:

- the registry parses; every acknowledged commit is recorded exactly once, at the version it
  was acknowledged with; failed ones are absent; unknown ones at most once; no commit nobody
  made; versions are contiguous; real-time order holds (a commit that began after another
  ended has a higher version; a snapshot taken after a commit ended includes it; one reader's
  snapshots never go back);
- appends are atomic and exactly-once in the data: an acknowledged append's files are all
  registered and its rows read back exactly once; a failed one's are absent; an unknown
  one's are all there or none; every registered file exists, matches its checksum and is
  valid parquet with the recorded row count;
- the renamed partition is never observed half-renamed (by readers, or at the end): it is at
  exactly one place with all its files, records and rows; the landed renames, in version
  order, form one unbroken chain of moves;
- no two lease holdings overlap (wall clock); after an abandoned holding the next holder
  starts more than two margins later, by the wall clock and by the two holders' own
  server-time bounds; tokens rise with time; fenced commits land in token order;
- no error escaped that is not a lakelock error, and no append was told that its own file
  (named uniquely for it) already existed;
- time travel: a read of the appended dataset at version V (for every version, or a spread
  sample of 40 in long runs) returns exactly the rows of the appends that landed at or
  before V, each whole, and nothing else.

A failing run names its seed; ``LAKELOCK_CHAOS_SEED=<n>`` replays it (same fault plan and the
same operations in every thread; the interleaving of threads is up to the machine). The small
runs are part of the default test run; the large ones run with
``python -m pytest -m slow tests/test_chaos.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import ObjectTooOldError
from lakelock.testing import FaultRule, S3Endpoint
from tests._chaos_workers import MUTATION_ENV
from tests._support import FAST_RETRY, REPO
from tests._support.chaos import (
    COMMITTING,
    check_chaos,
    lease_problems,
    real_time_problems,
    registered_file_problems,
    replay,
    seeds,
    setup_lake,
    travel_problems,
)

#: Faults on every operation: throttling, server errors, conflicts, resets before the request
#: is applied, lost acknowledgements after it is, latency jitter; plus read-back failures on
#: the registry key, so the adapter's write-id resolution cannot settle every lost ack and the
#: registry's own commit-id lookup is exercised too.
CHAOS = [
    FaultRule("latency", operation="*", delay=0.0005, jitter=0.003),
    FaultRule("slowdown", operation="*", probability=0.01),
    FaultRule("error", operation="*", probability=0.01),
    FaultRule("reset", operation="*", probability=0.01),
    FaultRule("conflict", operation="PutObject", prefix="metastore/", probability=0.03),
    FaultRule("conflict", operation="CompleteMultipartUpload", probability=0.03),
    FaultRule(
        "reset", operation="HeadObject", prefix="metastore/dataset_registry", probability=0.4
    ),
    FaultRule("lost_ack", operation="PutObject", probability=0.04),
    FaultRule("lost_ack_5xx", operation="PutObject", probability=0.02),
    FaultRule("lost_ack", operation="CompleteMultipartUpload", probability=0.04),
]

#: Heavier faults for the slow runs: several percent of every operation fails, a request
#: may hang before its connection is reset, deletes lose their acknowledgements too.
HEAVY = [
    FaultRule("latency", operation="*", delay=0.0005, jitter=0.004),
    FaultRule("timeout", operation="*", probability=0.005, delay=0.05),
    FaultRule("slowdown", operation="*", probability=0.03),
    FaultRule("error", operation="*", probability=0.03),
    FaultRule("reset", operation="*", probability=0.03),
    FaultRule("conflict", operation="PutObject", probability=0.05),
    FaultRule("conflict", operation="CompleteMultipartUpload", probability=0.05),
    FaultRule("reset", operation="HeadObject", probability=0.3),
    FaultRule("lost_ack", operation="PutObject", probability=0.08),
    FaultRule("lost_ack_5xx", operation="PutObject", probability=0.04),
    FaultRule("lost_ack", operation="CompleteMultipartUpload", probability=0.08),
    FaultRule("lost_ack", operation="DeleteObject*", probability=0.1),
]

# -- running ------------------------------------------------------------------------------------


def run_chaos(
    s3: S3Endpoint,
    bucket: str,
    tmp_path: Path,
    *,
    seed: int,
    processes: int,
    threads: int,
    ops: int,
    rules: list[FaultRule],
    mix: dict[str, int] | None = None,
    abandon: float = 0.05,
    mutation: str | None = None,
    timeout: float = 300,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Run the worker processes under ``rules`` seeded with ``seed``; their records, and how
    many faults of each kind were injected."""
    s3.set_faults([FaultRule(**{**r.to_json(), "bucket": bucket}) for r in rules], seed=seed)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(MUTATION_ENV, None)
    if mutation is not None:
        env[MUTATION_ENV] = mutation
    outs = [tmp_path / f"chaos-{p}.jsonl" for p in range(processes)]
    children = []
    for p, out in enumerate(outs):
        args: dict[str, Any] = {
            "url": s3.url,
            "bucket": bucket,
            "worker": f"p{p}",
            "seed": seed,
            "threads": threads,
            "ops": ops,
            "out": str(out),
            "lease_ttl": 1.5,
            "lease_margin": 0.2,
            "abandon": abandon,
        }
        if mix is not None:
            args["mix"] = mix
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests._chaos_workers", orjson.dumps(args).decode()],
                cwd=REPO,
                env=env,
                stderr=subprocess.PIPE,
            )
        )
    try:
        for child in children:
            _, err = child.communicate(timeout=timeout)
            assert child.returncode == 0, f"seed {seed}: worker failed:\n{err.decode()[-3000:]}"
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()
        injected = dict(s3.faults()["injected"])
        s3.clear_faults()
    records = [orjson.loads(line) for out in outs for line in out.read_bytes().splitlines()]
    ran = [r["mutation"] for r in records if r["op"] == "worker"]
    assert ran == [mutation] * processes, f"workers ran with mutations {ran}"
    return [r for r in records if r["op"] != "worker"], injected


def report(seed: int, problems: list[str], tmp_path: Path, test: str) -> str:
    head = "\n".join(problems[:40])
    return (
        f"chaos seed {seed} failed ({len(problems)} problems); replay with "
        f"{replay(seed, test)} (records in {tmp_path}):\n{head}"
    )


def summary(records: list[dict[str, Any]]) -> Counter[str]:
    return Counter(
        f"{r['op']}:{r.get('outcome') or r.get('kind') or ('error' if 'error' in r else 'ok')}"
        for r in records
    )


# -- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", seeds([7]))
def test_chaos_small(s3: S3Endpoint, bucket: str, tmp_path: Path, seed: int) -> None:
    """2 processes x 3 threads x 6 operations (append, rename, lease, commit) under seeded
    faults on every operation: the checker finds no violation, and the run really met lost
    acknowledgements, resets, conflicts and errors."""
    lake = setup_lake(s3, bucket)
    # A short run: two lost answers and a reset are certain, whatever the draws.
    rules = [
        *CHAOS,
        FaultRule("lost_ack", operation="PutObject", prefix="metastore/", count=2),
        FaultRule("reset", operation="GetObject", prefix="metastore/", count=1),
    ]
    records, injected = run_chaos(
        s3, bucket, tmp_path, seed=seed, processes=2, threads=3, ops=6, rules=rules
    )
    problems = check_chaos(records, lake, setup_ids=["setup-0", "setup-1"])
    assert problems == [], report(seed, problems, tmp_path, "test_chaos_small")
    tally = summary(records)
    assert sum(tally[f"{op}:ok"] for op in COMMITTING) >= 20, (seed, tally)
    assert tally["lease:released"] >= 1, (seed, tally)
    assert injected.get("lost_ack", 0) > 0, (seed, injected)
    assert injected.get("reset", 0) > 0, (seed, injected)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", seeds(range(100, 105)))
def test_chaos_large(s3: S3Endpoint, bucket: str, tmp_path: Path, seed: int) -> None:
    """4 processes x 4 threads x 40 operations per seed, faults on every operation: no
    violation."""
    lake = setup_lake(s3, bucket)
    records, injected = run_chaos(
        s3, bucket, tmp_path, seed=seed, processes=4, threads=4, ops=40, rules=CHAOS, timeout=1500
    )
    problems = check_chaos(records, lake, setup_ids=["setup-0", "setup-1"])
    assert problems == [], report(seed, problems, tmp_path, "test_chaos_large")
    assert injected.get("lost_ack", 0) > 10, (seed, injected)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("conflicts", [False, True], ids=["queued", "409-on-contention"])
@pytest.mark.parametrize("seed", seeds(range(300, 303)))
def test_chaos_heavy(
    s3: S3Endpoint, bucket: str, tmp_path: Path, seed: int, conflicts: bool
) -> None:
    """3 processes x 3 threads x 20 operations under heavy faults (several percent of every
    operation, hangs, lost acks on deletes too), with writes to one key queued or, as on AWS,
    answered 409 when they meet: no violation."""
    s3.configure(concurrent_conflicts=conflicts)
    lake = setup_lake(s3, bucket)
    records, _ = run_chaos(
        s3, bucket, tmp_path, seed=seed, processes=3, threads=3, ops=20, rules=HEAVY, timeout=1500
    )
    problems = check_chaos(records, lake, setup_ids=["setup-0", "setup-1"])
    assert problems == [], report(seed, problems, tmp_path, "test_chaos_heavy")


#: The mutation run: lost acknowledgements on the registry whose read-back fails, so only
#: the registry's commit-id lookup can tell that an attempt landed.
LOST_ACKS = [
    FaultRule(
        "lost_ack", operation="PutObject", prefix="metastore/dataset_registry", probability=0.3
    ),
    # Batches make few root PUTs: the first two lose their answer whatever the draws.
    FaultRule("lost_ack", operation="PutObject", prefix="metastore/dataset_registry", count=2),
    FaultRule("reset", operation="HeadObject", prefix="metastore/dataset_registry"),
]
MUTATION_MIX = {"append": 1, "ledger": 3}


# The clean control run is slow only: test_chaos_small is a clean run with lost acks forced.
@pytest.mark.parametrize("mutation", [pytest.param(None, marks=pytest.mark.slow), "no-idempotency"])
def test_checker_catches_disabled_idempotency(
    s3: S3Endpoint, bucket: str, tmp_path: Path, mutation: str | None
) -> None:
    """Mutation check: with the commit-id lookup disabled in the workers and lost acks forced,
    the checker reports commits applied twice; the same run with the lookup in place is
    clean. Proof the checker sees the bug it guards against."""
    seed = 3
    lake = setup_lake(s3, bucket)
    records, injected = run_chaos(
        s3,
        bucket,
        tmp_path,
        seed=seed,
        processes=1,
        threads=3,
        ops=5,
        rules=LOST_ACKS,
        mix=MUTATION_MIX,
        mutation=mutation,
    )
    assert injected.get("lost_ack", 0) > 0, injected
    problems = check_chaos(records, lake, setup_ids=["setup-0", "setup-1"])
    if mutation is None:
        assert problems == [], report(
            seed, problems, tmp_path, "test_checker_catches_disabled_idempotency"
        )
    else:
        doubled = [p for p in problems if re.search(r"recorded ([2-9]|\d\d+) times", p)]
        assert doubled, (seed, summary(records), problems)


def test_checker_flags_each_kind_of_violation() -> None:
    """The pure parts of the checker flag doctored histories: overlapping lease holdings, a
    takeover within two margins, fenced commits out of order, a commit out of real-time order,
    a snapshot missing an earlier commit, a reader going back in time, and a version read
    with rows of a later commit or missing some of an earlier one."""
    lease = {"op": "lease", "margin": 0.2, "kind": "released"}
    a = {**lease, "token": 1, "start": 0.0, "end": 1.0, "start_earliest": 0.0, "end_latest": 1.0}
    b = {**lease, "token": 2, "start": 0.9, "end": 2.0, "start_earliest": 0.9, "end_latest": 2.0}
    fences = SimpleNamespace(fences={"lease:chaos": 9})
    assert any("overlap" in p for p in lease_problems([a, b], [], fences))
    abandoned = {**a, "kind": "abandoned"}
    soon = {**b, "start": 1.1, "start_earliest": 1.1}
    assert len(lease_problems([abandoned, soon], [], fences)) == 2
    assert (
        lease_problems([abandoned, {**soon, "start": 1.5, "start_earliest": 1.5}], [], fences) == []
    )
    out_of_order = [
        {"op": "ledger", "id": "x", "fence": 5, "fence_name": "lease:chaos", "version": 3},
        {"op": "ledger", "id": "y", "fence": 4, "fence_name": "lease:chaos", "version": 4},
    ]
    assert any("token order" in p for p in lease_problems([], out_of_order, fences))
    first = {"id": "x", "start": 0.0, "end": 1.0, "version": 5}
    second = {"id": "y", "start": 2.0, "end": 3.0, "version": 4}
    assert any("not newer" in p for p in real_time_problems([first, second], []))
    stale = {"op": "observe", "worker": "p0", "time": 1.5, "version": 4}
    newer = {**stale, "time": 1.6, "version": 5}
    assert any("misses" in p for p in real_time_problems([first], [stale]))
    assert any("back in time" in p for p in real_time_problems([], [newer, {**stale, "time": 1.7}]))
    appends = [{"id": "a", "rows": 2, "version": 3}, {"id": "b", "rows": 1, "version": 5}]
    assert travel_problems(4, Counter({"a": 2}), appends) == []
    assert any("landed later" in p for p in travel_problems(4, Counter({"a": 2, "b": 1}), appends))
    assert any(
        "1 of the 2 rows" in p for p in travel_problems(5, Counter({"a": 1, "b": 1}), appends)
    )


# -- what the chaos run found, as minimal seeded replays ----------------------------------------


def lost_ack_then_conflict(bucket: str, prefix: str) -> list[FaultRule]:
    """A write applied with its answer lost, then (seed permitting) a 409 for the SDK's retry
    of it: the adapter retries the 409 itself, and that retry meets the first write."""
    return [
        FaultRule(
            "lost_ack",
            operation="PutObject",
            prefix=prefix,
            bucket=bucket,
            probability=0.5,
            count=1,
        ),
        FaultRule(
            "conflict",
            operation="PutObject",
            prefix=prefix,
            bucket=bucket,
            probability=0.5,
            count=1,
        ),
    ]


def test_own_create_is_not_reported_as_already_existing(s3: S3Endpoint, bucket: str) -> None:
    """A create-only write whose acknowledgement was lost, whose SDK retry got a 409 and whose
    adapter-level retry then got a 412 from the write's own object, succeeds (it is ours, by
    its write id): it is not reported as AlreadyExistsError (seed 3)."""
    from lakelock._s3 import ObjectStore

    store = ObjectStore(s3.client(), bucket, retry=FAST_RETRY)
    s3.set_faults(lost_ack_then_conflict(bucket, "k"), seed=3)
    result = store.put("k", b"mine", mode="create")
    assert s3.faults()["injected"] == {"lost_ack": 1, "conflict": 1}
    assert store.head("k").write_id == result.write_id


def test_lock_grant_whose_answer_was_lost_is_held(s3: S3Endpoint, bucket: str) -> None:
    """The same sequence on a lock table's grant (seed 24): the lock is granted (the grant in
    the table is ours), not a ValueError ("holder id ... is already in the table") with our
    grant left behind in the table until its TTL."""
    lake = Lake(bucket, s3=s3.client(), retry=FAST_RETRY)
    s3.set_faults(lost_ack_then_conflict(bucket, "metastore/locks/"), seed=24)
    # Nobody else holds it: the timeout only bounds the SDK's real-time backoff after the
    # lost answer (up to a second), so it is generous, not a race against a loaded machine.
    with lake.lock(write=["/sales"], ttl=5, timeout=60) as held:
        assert held.held
    assert s3.faults()["injected"] == {"lost_ack": 1, "conflict": 1}
    s3.clear_faults()
    with lake.lock(write=["/sales"], ttl=5, timeout=0):
        pass


def test_vacuum_racing_a_rename_back_keeps_what_the_rename_reuses(
    s3: S3Endpoint, bucket: str
) -> None:
    """A partition renamed a -> b, and (past the retention window: the clock is injected) back
    b -> a while a vacuum's deletes are in flight, the vacuum having just judged the old
    objects at ``a`` orphans. The rename back must not adopt them (an existing destination
    file with the same checksum, a manifest with the same bytes: it once did, and the vacuum
    then deleted what the registry referenced). After both, every object the registry
    references exists and the partition reads: the rename applied, or refused by the cutoff
    the vacuum recorded (its copies share a second with what the vacuum deletes)."""
    from concurrent.futures import ThreadPoolExecutor

    from lakelock._vacuum import vacuum

    lake = Lake(bucket, s3=s3.client(), retry=FAST_RETRY)
    lake.append("moves", pa.table({"id": [1, 2], "slot": ["a", "a"]}), partition_by=["slot"])
    lake.rename_partition("moves", "slot=a", to_partition="slot=b")
    later = time.time() + 2 * 3600
    lake.store.conditional_delete_method()  # probed now, so the stall below holds the vacuum's
    s3.inject("stall", operation="DeleteObjects", bucket=bucket, count=1)
    with ThreadPoolExecutor(1) as pool:
        sweeping = pool.submit(
            vacuum,
            lake.registry,
            older_than=3600,
            dry_run=False,
            clock=lambda: later,
            enforce_retention=False,
        )
        for _ in range(2000):  # orphans decided, their deletes held at the endpoint
            if s3.stalled() == 1:
                break
            time.sleep(0.005)
        try:
            lake.rename_partition("moves", "slot=b", to_partition="slot=a")
            refused = None
        except ObjectTooOldError as error:
            refused = error
        s3.release_stalls()
        swept = sweeping.result(timeout=30)
    assert swept.deleted, "the vacuum deleted nothing: the race did not happen"
    if refused is not None:
        # The vacuum recorded its cutoff in the root before deleting (FORMAT.md rule 10):
        # the copies the rename wrote in the same second as the newest object it deletes
        # cannot be told from those by the store's whole-second times, so the rename is
        # refused, nothing committed (the partition is still at b) -- never acknowledged
        # over deleted objects.
        partitions = lake.registry.read().datasets["moves"].partitions
        assert set(partitions) == {"slot=b"}, refused
    snapshot = lake.registry.read()
    referenced = {f.key for f in lake.registry.files("moves", snapshot=snapshot)}
    referenced |= {
        m.key for p in snapshot.datasets["moves"].partitions.values() for m in p.manifests
    }
    assert not referenced & set(swept.deleted), "vacuum deleted what the registry references"
    assert registered_file_problems(lake, snapshot) == []
    assert sorted(Lake(bucket, s3=s3.client()).read("moves").column("id").to_pylist()) == [1, 2]
