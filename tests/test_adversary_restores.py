"""Adversarial tests of restore's promises (README, "Time travel"): a restore is one new
commit making an old version current again, told truly to its caller, never undoing an
append acknowledged after it, and never restoring twice when its answer is lost."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pyarrow as pa

from lakelock import Lake
from lakelock._layout import REGISTRY_KEY
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until


def ids(table: pa.Table) -> list[int]:
    return sorted(table["id"].to_pylist())


def test_a_restore_whose_swap_answer_is_lost_restores_once(lake: Lake, s3: S3Endpoint) -> None:
    """The root's swap of a restore is applied and its answer lost: the retry must find the
    restore landed and say so, not commit a second restore."""
    first = lake.append("sales", pa.table({"id": [1]})).version
    lake.append("sales", pa.table({"id": [2]}))
    s3.inject("lost_ack", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    result = lake.restore("sales", version=first)
    assert s3.faults()["injected"].get("lost_ack") == 1
    assert ids(lake.read("sales")) == [1]
    restores = [h for h in lake.history("sales") if h.operation == "restore"]
    assert [h.version for h in restores] == [result.version]
    assert lake.registry.read().version == result.version


def _lake_like(lake: Lake, client: Any) -> Lake:
    return Lake(lake.config.bucket, prefix=lake.config.prefix, s3=client, retry=FAST_RETRY)


def test_an_append_folded_before_a_restore_shares_its_version_in_the_logs_order(
    lake: Lake, s3: S3Endpoint, stall_and_race: Any
) -> None:
    """An append's intent is written and its root swap held; meanwhile another process
    restores ``sales`` to its first version, folding the pending append into its own swap.
    Both are told that one version, which is what they make together in the log's order
    (FORMAT, "Group commit across processes"): the append, then the restore replacing it,
    so the version reads the restored rows and the log lists the append first."""
    first = lake.append("sales", pa.table({"id": [1]})).version
    restorer = _lake_like(lake, s3.client())
    try:
        told, restored = stall_and_race(
            lambda: lake.append("sales", pa.table({"id": [2]})),
            lambda: restorer.restore("sales", version=first),
        )
    finally:
        restorer.close()
    assert not told.already_committed
    assert not restored.already_committed
    assert (told.version, restored.version) == (2, 2)
    assert [(e.version, e.operation) for e in reversed(lake.registry.log())] == [
        (1, "append"),
        (2, "append"),
        (2, "restore"),
    ]
    assert ids(lake.read("sales", version=2)) == ids(lake.read("sales")) == [1]


def test_a_restore_retried_after_an_append_landed_undoes_nothing_twice(
    lake: Lake, s3: S3Endpoint
) -> None:
    """A restore's root swap is applied and answered 500; the restorer's next request to
    the registry is held while another process appends, then let go. The restore is told
    the version it landed at, once, and the append made after it stays current."""
    first = lake.append("sales", pa.table({"id": [1]})).version
    lake.append("sales", pa.table({"id": [2]}))
    appender = _lake_like(lake, s3.client())
    s3.inject("stall", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    s3.inject("lost_ack_5xx", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            restoring = pool.submit(lake.restore, "sales", version=first)
            wait_until(lambda: s3.stalled() == 1)
            s3.inject("stall", prefix="metastore/", count=1)
            s3.release_stalls()
            wait_until(lambda: s3.stalled() == 1)
            s3.clear_faults()
            appended = appender.append("sales", pa.table({"id": [3]}))
            s3.release_stalls()
            restored = restoring.result(timeout=60)
    finally:
        appender.close()
    assert (restored.version, appended.version) == (3, 4)
    assert not restored.already_committed
    assert [(e.version, e.operation) for e in reversed(lake.registry.log())] == [
        (1, "append"),
        (2, "append"),
        (3, "restore"),
        (4, "append"),
    ]
    assert ids(lake.read("sales")) == [1, 3]


def test_a_restore_run_again_under_its_commit_id_keeps_what_landed_since(lake: Lake) -> None:
    """A pipeline restores under a commit id, another appends, then the pipeline (unsure
    whether its restore landed) runs it again under the same id: it is told the restore's
    version, already committed, and the append made since stays."""
    first = lake.append("sales", pa.table({"id": [1]})).version
    lake.append("sales", pa.table({"id": [2]}))
    restored = lake.restore("sales", version=first, commit_id="undo-2")
    lake.append("sales", pa.table({"id": [3]}))
    again = lake.restore("sales", version=first, commit_id="undo-2")
    assert (again.version, again.already_committed) == (restored.version, True)
    assert ids(lake.read("sales")) == [1, 3]
