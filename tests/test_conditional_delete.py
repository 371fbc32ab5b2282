"""Deleting only what is unchanged, on every store: ``ObjectStore.delete_if_unchanged`` probes
once per store whether ``DeleteObjects`` honours per-key ETags, falls back to ``DeleteObject``
with ``If-Match``, and refuses (``UnsupportedError``) where neither is honoured. vacuum deletes
this way, so on a store that ignores per-key ETags (LocalStack does) an object replaced between
vacuum's listing and its delete is kept. The endpoint is told to act as such a store
(``configure(lacking=...)``); everything goes over HTTP."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import PROBE_PREFIX
from lakelock._s3 import ObjectStore
from lakelock._vacuum import vacuum
from lakelock.errors import NotFoundError, PreconditionFailedError, UnsupportedError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until
from tests._support.simtime import HOUR
from tests._support.vacuuming import vacuum_refused


def fresh_store(store: ObjectStore) -> ObjectStore:
    """Another store on the same bucket: its own, not yet made, probe."""
    return ObjectStore(store.client, store.bucket, prefix=store.prefix, retry=FAST_RETRY)


def scenario(store: ObjectStore, admin: Any) -> list[tuple[str, str]]:
    """Items to delete: ``a`` unchanged, ``b`` replaced since (by a writer the policy does not
    bind), ``c`` deleted since."""
    etags = {k: store.put(f"datasets/d/{k}", k.encode()).etag for k in ("a", "b", "c")}
    admin.put_object(Bucket=store.bucket, Key="datasets/d/b", Body=b"replaced")
    admin.delete_object(Bucket=store.bucket, Key="datasets/d/c")
    return [(f"datasets/d/{k}", etags[k]) for k in ("a", "b", "c")]


def assert_outcome(store: ObjectStore, results: dict[str, Any]) -> None:
    assert results["datasets/d/a"] is None
    assert isinstance(results["datasets/d/b"], PreconditionFailedError)
    assert isinstance(results["datasets/d/c"], NotFoundError)
    assert [o.key for o in store.list("datasets/")] == ["datasets/d/b"]
    assert store.get("datasets/d/b").body == b"replaced"
    assert list(store.list(PROBE_PREFIX)) == []  # the probe cleaned up after itself


def test_batch_deletes_where_per_key_etags_are_honoured(
    s3: S3Endpoint, store: ObjectStore, admin: Any
) -> None:
    """The embedded endpoint honours per-key ETags: one DeleteObjects does the deletes, the
    replaced object is kept, the gone one reported; the probe ran once for two calls."""
    items = scenario(store, admin)
    assert store.conditional_delete_method() == "batch"
    s3.reset_stats()
    assert_outcome(store, store.delete_if_unchanged(items))
    assert store.delete_if_unchanged([]) == {}
    assert s3.stats().get("DeleteObjects") == 1
    assert "DeleteObject" not in s3.stats()


@pytest.mark.parametrize("mode", ["ignore", "refuse"])
def test_single_deletes_where_per_key_etags_are_not_honoured(
    s3: S3Endpoint, store: ObjectStore, admin: Any, mode: str
) -> None:
    """A store that deletes a DeleteObjects entry whatever its ETag (or refuses ETags there)
    but honours If-Match on DeleteObject: one conditional DeleteObject per key, and the object
    replaced since is kept."""
    s3.configure(lacking={"delete-objects-etag": mode})  # type: ignore[dict-item]
    items = scenario(store, admin)
    assert store.conditional_delete_method() == "single"
    s3.reset_stats()
    done: list[int] = []
    assert_outcome(store, store.delete_if_unchanged(items, progress=done.append))
    assert done == [1, 1, 1]
    assert s3.stats().get("DeleteObject") == 3
    assert "DeleteObjects" not in s3.stats()


@pytest.mark.parametrize(
    "lacking",
    [
        {"delete-objects-etag": "ignore", "delete-if-match": "ignore"},
        {"delete-objects-etag": "ignore", "delete-if-match": "refuse"},  # LocalStack 2026.3
        {"delete-objects-etag": "refuse", "delete-if-match": "refuse"},
    ],
)
def test_refused_where_no_conditional_delete_is_honoured(
    s3: S3Endpoint, store: ObjectStore, admin: Any, lacking: dict[str, str]
) -> None:
    """Neither way is honoured: UnsupportedError before anything is deleted, every time
    (the verdict is kept: probed once), and the probe object is gone."""
    s3.configure(lacking=lacking)  # type: ignore[arg-type]
    items = scenario(store, admin)
    for _ in range(2):
        with pytest.raises(UnsupportedError, match="refuses to delete"):
            store.delete_if_unchanged(items)
    s3.reset_stats()
    with pytest.raises(UnsupportedError):
        store.conditional_delete_method()
    assert s3.stats() == {}
    assert [o.key for o in store.list("datasets/")] == ["datasets/d/a", "datasets/d/b"]
    assert list(store.list(PROBE_PREFIX)) == []


def test_each_store_probes_once(s3: S3Endpoint, store: ObjectStore) -> None:
    """The probe costs a handful of requests once per store, none after; the verdict is the
    store's own (a new store on another bucket probes again)."""
    s3.reset_stats()
    store.conditional_delete_method()
    first = sum(s3.stats().values())
    assert 0 < first <= 8
    store.conditional_delete_method()
    assert sum(s3.stats().values()) == first
    fresh_store(store).conditional_delete_method()
    assert sum(s3.stats().values()) == 2 * first


def vacuum_race(s3: S3Endpoint, bucket: str, admin: Any, *, operation: str) -> Any:
    """One orphan, judged deletable by vacuum; its delete is held at the endpoint while
    another writer replaces the orphan; then the delete goes on. Returns the report."""
    lake = Lake(bucket, s3=s3.client(), retry=FAST_RETRY)
    lake.append("sales", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    (stray,) = lake.write("sales", pa.table({"id": [2], "day": [1]}), partition_by=["day"])
    lake.store.conditional_delete_method()  # probed before the hold below
    s3.inject("stall", operation=operation, bucket=bucket, count=1)
    later = time.time() + 2 * HOUR
    with ThreadPoolExecutor(1) as pool:
        sweeping = pool.submit(
            vacuum,
            lake.registry,
            older_than=HOUR,
            dry_run=False,
            clock=lambda: later,
            enforce_retention=False,
        )
        wait_until(lambda: s3.stalled() == 1)
        admin.put_object(Bucket=bucket, Key=stray.key, Body=b"replaced meanwhile")
        s3.release_stalls()
        report = sweeping.result(timeout=60)
    assert [o.key for o in report.orphans] == [stray.key]
    assert report.deleted == []
    assert isinstance(report.failed[stray.key], PreconditionFailedError)
    assert admin.get_object(Bucket=bucket, Key=stray.key)["Body"].read() == b"replaced meanwhile"
    assert lake.read("sales")["id"].to_pylist() == [1]
    return report


def test_vacuum_keeps_an_orphan_replaced_before_its_batch_delete(
    s3: S3Endpoint, bucket: str, admin: Any
) -> None:
    """Per-key ETags honoured: vacuum's DeleteObjects keeps the replaced orphan."""
    vacuum_race(s3, bucket, admin, operation="DeleteObjects")


def test_vacuum_keeps_a_replaced_orphan_where_per_key_etags_are_ignored(
    s3: S3Endpoint, bucket: str, admin: Any
) -> None:
    """On a store that ignores per-key ETags (LocalStack deleted the replaced object here),
    vacuum deletes by conditional DeleteObject and keeps the replaced orphan."""
    s3.configure(lacking={"delete-objects-etag": "ignore"})
    vacuum_race(s3, bucket, admin, operation="DeleteObject")


def test_vacuum_refuses_to_delete_where_nothing_is_honoured(s3: S3Endpoint, bucket: str) -> None:
    """A store honouring no conditional delete: vacuum's dry run still reports, a real run
    raises UnsupportedError and every orphan is still there."""
    s3.configure(lacking={"delete-objects-etag": "ignore", "delete-if-match": "refuse"})
    lake = Lake(bucket, s3=s3.client(), retry=FAST_RETRY)
    (stray,) = lake.write("sales", pa.table({"id": [2], "day": [1]}), partition_by=["day"])
    dry = vacuum_refused(lake, at=time.time() + 2 * HOUR)
    assert [o.key for o in dry.orphans] == [stray.key]
    assert [o.key for o in lake.store.list("datasets/")] == [stray.key]
