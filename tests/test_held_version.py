"""A version whose own create is held in flight at S3 (a write in progress there whose answer
never came) is written again under new names instead of waited for: its objects are
write-once and referenced by nothing until the swap, so the next attempt names them afresh,
and the held copy, when it lands, is an orphan vacuum deletes past its floor (docs/FORMAT.md,
"Scheduling" 10)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import SNAPSHOT_PREFIX
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until


@pytest.fixture
def impatient(s3: S3Endpoint, bucket: str) -> Iterator[Lake]:
    """A lake whose client gives a request up after half a second (the SDK then sends it
    again), retrying without waiting."""
    lake = Lake(bucket, s3=s3.client(read_timeout=0.5), retry=FAST_RETRY)
    yield lake
    s3.clear_faults()
    s3.release_stalls()
    lake.close()


def test_a_version_whose_snapshot_create_is_held_lands_under_new_names(
    s3: S3Endpoint, impatient: Lake
) -> None:
    """The commit's snapshot PUT is held at S3 (holding its key, unanswered) until the
    client times out; the SDK's resend meets that write in flight and is answered 409. The
    commit lands while the held copy is still out, its version sealed again under new
    names: before, the 409 was retried into the held key for as long as the store's retry
    policy lasts (seconds, with every other writer waiting on this swap). The held copy
    lands afterwards, referenced by nothing."""
    lake = impatient
    table = pa.table({"amount": [1, 2]})
    lake.append("sales", table)
    before = {o.key for o in lake.store.list(SNAPSHOT_PREFIX)}
    s3.configure(concurrent_conflicts=True)
    s3.reset_stats()
    s3.inject("hold", operation="PutObject", prefix=SNAPSHOT_PREFIX, count=1)
    with ThreadPoolExecutor(1) as pool:
        commit = pool.submit(lake.append, "sales", table)
        try:
            wait_until(commit.done)
            assert s3.stalled() == 1  # the first copy is still held at S3
            # The held copy, the SDK's resend (409) and the version under new names (and,
            # on a slow machine, that one's resend): the 409 is not retried.
            assert s3.areas()["PutObject metastore/snapshots"] <= 4
        finally:
            s3.release_stalls()
        commit.result()
    # The held copy lands once let go: a second new snapshot, referenced by nothing.
    wait_until(lambda: len({o.key for o in lake.store.list(SNAPSHOT_PREFIX)} - before) == 2)
    assert sorted(lake.scan("sales").to_arrow()["amount"].to_pylist()) == [1, 1, 2, 2]
