"""Vacuum on a store that refuses every conditional delete, as the tests of such stores (the
embedded endpoint told to, LocalStack) check it; an append paused beside vacuum (FORMAT.md
rule 10); a restore paused while the retention shrinks and vacuum runs (rule 9)."""

from __future__ import annotations

import concurrent.futures
import time

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import DATASETS_PREFIX
from lakelock._registry import Registry
from lakelock._s3 import ObjectStore
from lakelock._vacuum import VacuumReport, vacuum
from lakelock.advanced import FoldPolicy
from lakelock.errors import UnsupportedError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until
from tests._support.simtime import HOUR, SimTime

__all__ = ["append_paused_beside_vacuum", "restore_held_through_vacuum", "vacuum_refused"]


def vacuum_refused(lake: Lake, *, at: float, match: str | None = None) -> VacuumReport:
    """Vacuum of ``lake`` as at ``at`` (objects older than an hour, no retention check): its
    dry run's report; a real run is UnsupportedError (``match``: its message) and deletes
    nothing."""
    report = vacuum(lake.registry, enforce_retention=False, older_than=HOUR, clock=lambda: at)
    listed = {o.key for o in lake.store.list(DATASETS_PREFIX)}
    with pytest.raises(UnsupportedError, match=match):
        vacuum(
            lake.registry, enforce_retention=False, older_than=HOUR, dry_run=False, clock=lambda: at
        )
    assert {o.key for o in lake.store.list(DATASETS_PREFIX)} == listed
    return report


def append_paused_beside_vacuum(
    s3: S3Endpoint, lake: Lake, rows: pa.Table, *, partition_by: list[str]
) -> tuple[BaseException | None, str]:
    """An append of ``rows`` to ``sales`` passes its last-moment checks and sends its root
    swap, which the endpoint holds (a process paused just before its PUT went out) while two
    hours pass by the server's clock; vacuum (window an hour, no retention check) runs
    meanwhile and no other writer commits: it deletes the append's data file and the
    snapshot it wrote. The swap is let go: what the append raised (``None``: acknowledged),
    and the data file vacuum deleted."""
    sim = SimTime(start=time.time())
    sim.attach(lake.client)  # the writer's server clock: every answer's Date
    s3.inject("stall", operation="PutObject", prefix="metastore/dataset_registry", count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        late = pool.submit(lake.append, "sales", rows, partition_by=partition_by)
        wait_until(lambda: s3.stalled() == 1)
        sim.advance(2 * HOUR)
        report = vacuum(
            lake.registry,
            enforce_retention=False,
            older_than=HOUR,
            clock=lambda: time.time() + 2 * HOUR,
            dry_run=False,
        )
        (taken,) = [k for k in report.deleted if k.startswith("datasets/")]
        assert any(k.startswith("metastore/snapshots/") for k in report.deleted)
        s3.release_stalls()
        return late.exception(timeout=60), taken


def restore_held_through_vacuum(
    s3: S3Endpoint, store: ObjectStore, lake: Lake, *, grown_back: bool
) -> BaseException | None:
    """``sales`` holds version 1 and version 2, an overwrite of its one ``day`` partition.
    A restore of version 1 is planned under the default week and its swap held at the
    endpoint (its process paused) while another process shrinks the retention to an hour
    and vacuum, three hours on, deletes version 1's objects (and, ``grown_back``, the
    retention is set back to a week). The restoring process's clock jumps the three hours
    when it is let go (it was paused through them). What the restore raised (``None``:
    acknowledged)."""
    lake.append("sales", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    lake.overwrite("sales", pa.table({"id": [2], "day": [1]}), partition_by=["day"])
    admin = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY, fold_policy=FoldPolicy(max_fold=0))
    paused = [0.0]  # hours the restoring process's clock has jumped
    restorer = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    restorer.registry = Registry(
        store, retry=FAST_RETRY, clock=lambda: time.time() + paused[0] * HOUR
    )
    s3.inject("stall", operation="PutObject", prefix="metastore/dataset_registry", count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        late = pool.submit(restorer.restore, "sales", version=1)
        wait_until(lambda: s3.stalled() == 1)
        admin.configure(retention="1h")
        report = vacuum(admin.registry, clock=lambda: time.time() + 3 * HOUR, dry_run=False)
        assert [k for k in report.deleted if k.startswith("datasets/")], report
        if grown_back:
            admin.configure(retention="7d")
        paused[0] = 3
        s3.release_stalls()
        return late.exception(timeout=60)
