"""Adversarial tests of vacuum on a lake whose registry root is gone (README, "Time travel":
vacuum deletes only what no version within the retention reads). A root deleted by hand (an
``aws s3 rm``, a sync from a copy that missed it, a lifecycle rule) leaves every version's
snapshot, manifests and data files in place; the library's vacuum, unlike the command line,
runs on a prefix with no root (a lake's first commit paused past vacuum relies on that:
tests/test_adversary_vacuum.py). Time is injected: nothing sleeps."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import DATASETS_PREFIX, REGISTRY_KEY
from lakelock._vacuum import vacuum
from lakelock.errors import RegistryCorruptError
from lakelock.testing import S3Endpoint

WEEK = 7 * 24 * 3600.0


def test_vacuum_of_a_lake_whose_root_was_deleted_refuses_and_deletes_nothing(
    s3: S3Endpoint, lake: Lake
) -> None:
    """``sales`` has two versions; then its registry root is deleted by hand, and a week and
    a day later vacuum runs (its dry run, then for real). With no root it once judged every
    object of the lake unreferenced: it deleted every snapshot and data file, and created an
    empty root over them. What the user would have lost: the whole lake, which
    the snapshots left behind still describe (a root can be restored from a bucket version
    or rebuilt from them). A snapshot of a version after the first was written by a commit
    that read a root, so a root existed: vacuum must refuse (``RegistryCorruptError`` naming
    the root), deleting nothing and writing no root."""
    lake.append("sales", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    lake.append("sales", pa.table({"id": [2], "day": [2]}), partition_by=["day"])
    admin = s3.client(access_key="engine")  # a key the bucket's policy does not bind
    admin.delete_object(Bucket=lake.bucket, Key=lake.store.full_key(REGISTRY_KEY))
    before = sorted(o.key for o in lake.store.list(""))
    at = time.time() + WEEK + 24 * 3600.0
    for dry_run in (True, False):
        with pytest.raises(RegistryCorruptError, match="root") as refused:
            vacuum(lake.registry, dry_run=dry_run, clock=lambda: at)
        assert refused.value.key == lake.store.full_key(REGISTRY_KEY)
    assert sorted(o.key for o in lake.store.list("")) == before
    assert any(k.startswith(DATASETS_PREFIX) for k in before)
