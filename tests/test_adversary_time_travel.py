"""Adversarial tests of time travel's promise (README, "Time travel"; FORMAT.md, "Retention
and vacuum"): a version the retention no longer keeps is SnapshotExpiredError, naming what
remains readable, whichever way it is asked for."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry import Registry
from lakelock._s3 import ObjectStore
from lakelock.errors import SnapshotExpiredError, VersionNotFoundError
from tests._support import FAST_RETRY

HOUR = 3600.0


def test_the_files_of_an_expired_version_are_snapshot_expired_not_no_such_dataset(
    store: ObjectStore, lake: Lake
) -> None:
    """A lake keeping replaced versions for an hour; ``sales`` has two versions, and a
    reader two hours later asks for the files of the first through the registry
    (``registry.files(name, snapshot=registry.read(version=...))``). It must hear
    SnapshotExpiredError saying which versions remain, as ``lake.read`` does. Before, it
    heard DatasetNotFoundError ("not in the registry"): a dataset that existed then, told
    as never having existed."""
    lake.configure(retention="1h", create=True)
    lake.append("sales", pa.table({"id": [1]}))
    first = lake.history("sales")[0].version
    lake.append("sales", pa.table({"id": [2]}))
    later = Registry(store, retry=FAST_RETRY, clock=lambda: time.time() + 2 * HOUR)
    with pytest.raises(SnapshotExpiredError, match="remain readable"):
        later.files("sales", snapshot=later.read(version=first))


@pytest.mark.parametrize("version", [0, -1])
def test_a_version_below_one_says_versions_start_at_one(lake: Lake, version: int) -> None:
    """A pipeline counting versions from 0 asks for ``version=0``: it heard "version 0 ...
    is not in the registry: the registry is at version 1", as if the lake had not reached
    it yet. Read, scan, the registry and restore all say VersionNotFoundError that versions
    start at 1 (the first commit), naming the version asked for; version 1 still reads."""
    lake.append("sales", pa.table({"id": [1]}))
    asks = (
        lambda: lake.read("sales", version=version),
        lambda: lake.scan("sales", version=version),
        lambda: lake.registry.read(version=version),
        lambda: lake.restore("sales", version=version),
    )
    for ask in asks:
        with pytest.raises(VersionNotFoundError, match="versions start at 1") as caught:
            ask()
        assert caught.value.version == version
    assert lake.read("sales", version=1)["id"].to_pylist() == [1]
