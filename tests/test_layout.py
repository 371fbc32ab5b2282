"""The bucket layout: every key lakelock builds is where the layout says, and one that would
pass S3's 1024-byte limit with the lake's prefix is refused before any request is sent."""

from __future__ import annotations

from typing import Any

import pytest

from lakelock._layout import (
    MAX_KEY_BYTES,
    data_file_key,
    dataset_prefix,
    lease_key,
    lock_table_key,
)
from lakelock._lease import Lease
from lakelock._pathlock import DistributedPathLock
from lakelock._s3 import ObjectStore
from lakelock.errors import InvalidNameError
from lakelock.testing import S3Endpoint


def test_keys_follow_the_layout() -> None:
    """Data files under datasets/, leases and lock tables under metastore/."""
    assert dataset_prefix("sales") == "datasets/sales/"
    assert data_file_key("sales", "year=2024", "f.parquet") == "datasets/sales/year=2024/f.parquet"
    assert lease_key("nightly") == "metastore/leases/nightly.json"
    assert lock_table_key("sales") == "metastore/locks/sales.json"


@pytest.mark.parametrize(
    "build",
    [
        lambda prefix, n: data_file_key("d", "c=" + "v" * n, "f.parquet", prefix=prefix),
        lambda prefix, n: lease_key("l" * n, prefix=prefix),
        lambda prefix, n: lock_table_key("t" * n, prefix=prefix),
    ],
    ids=["data file", "lease", "lock table"],
)
def test_every_key_builder_checks_the_limit_with_the_prefix(build: Any) -> None:
    """A key of exactly 1024 bytes with the prefix is built; one byte more is refused."""
    prefix = "lake/" + "é" * 300 + "/"  # 606 bytes
    fitting = build(prefix, 100)
    room = MAX_KEY_BYTES - len((prefix + fitting).encode())
    assert len((prefix + build(prefix, 100 + room)).encode()) == MAX_KEY_BYTES
    with pytest.raises(InvalidNameError):
        build(prefix, 101 + room)


def test_lease_and_lock_refuse_long_keys_before_sending(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """A lease name or a locked dataset whose key passes the limit with the lake's prefix is
    an InvalidNameError, and nothing reaches S3."""
    store = ObjectStore(client, bucket, prefix="p" * 990 + "/")
    locks = DistributedPathLock(store)
    s3.reset_stats()
    with pytest.raises(InvalidNameError):
        Lease(store, "x" * 20)
    with pytest.raises(InvalidNameError):
        locks.lock(write=["/" + "d" * 20])
    assert s3.stats() == {}
    assert locks.lock(write=["/d"]).request.write == frozenset({"/d"})
