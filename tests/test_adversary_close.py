"""Adversarial tests of ``Lake.close()`` (README, "Sizing a lake": once done with a lake,
``lake.close()``, views written) when the store stops answering the views' writes."""

from __future__ import annotations

import threading

import pyarrow as pa

from lakelock import Lake
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY


def test_close_gives_up_on_views_the_store_never_answers(s3: S3Endpoint, bucket: str) -> None:
    """A mirroring lake's last commit landed, but the store holds every write to ``views/``
    unanswered. ``close()`` must return once those writes time out (the client's read
    timeout, its tries), the failure counted and logged, the commit intact, and the next
    mirror must catch the views up once the store answers. What a pipeline would have lost:
    its last step never ending, waiting for a view no reader of the data needs."""
    client = s3.client(read_timeout=0.5)
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, mirror=("iceberg",))
    lake.append("sales", pa.table({"id": [1]}))
    assert lake.auto_mirror is not None
    assert lake.auto_mirror.wait(60)
    s3.inject("stall", operation="PutObject", prefix="views/")
    lake.append("sales", pa.table({"id": [2]}))
    closed = threading.Event()

    def close() -> None:
        lake.close()
        closed.set()

    threading.Thread(target=close, daemon=True).start()
    try:
        assert closed.wait(60), "close() still waiting for a view the store never answers"
    finally:
        s3.clear_faults()
        s3.release_stalls()
    assert lake.auto_mirror.errors == 1
    assert sorted(lake.read("sales")["id"].to_pylist()) == [1, 2]
    caught_up = lake.mirror("sales", "iceberg")
    assert (caught_up.version, caught_up.written) == (2, 1)
