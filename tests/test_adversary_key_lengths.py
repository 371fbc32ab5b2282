"""Adversarial tests of keys near S3's limit of 1,024 bytes (and a file name's of 255): an
operation refused for the length of a key it would write is refused before it writes anything
(``lakelock/_partitions.py``: "a move refused for what it is copies nothing"), and the keys
the layout bounds fit behind the longest prefix a lake may have. Also: vacuum reads the
Iceberg view's kept manifest lists together, not one after another."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import (
    _LONGEST_BOUNDED,
    MAX_KEY_BYTES,
    iceberg_list_key,
    iceberg_manifest_key,
    iceberg_metadata_key,
)
from lakelock._mirror._vacuum import LIST_READERS
from lakelock.errors import InvalidNameError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until
from tests._support.simtime import HOUR

#: A lakelock-named file's name (``part-<uuid hex>.parquet``-like), in bytes, is far below
#: these; the long names are given with ``file_name``.
LONG_NAME = "z" * 196 + ".parquet"  # 204 bytes
#: The destination key of LONG_NAME in partition ``tag=<value>`` of ``archive``, less the value.
AROUND = len("datasets/archive/tag=/") + len(LONG_NAME)


def two_files(lake: Lake, long_name: str) -> None:
    """Partition ``tag=a`` of ``events``: a file lakelock names, and one named ``long_name``."""
    lake.append("events", pa.table({"id": [1], "tag": ["a"]}), partition_by=["tag"])
    lake.append(
        "events", pa.table({"id": [2], "tag": ["a"]}), partition_by=["tag"], file_name=long_name
    )


@pytest.mark.parametrize(
    ("long_name", "value"),
    [
        # The key fits with 4 bytes to spare; the fresh name's 13 more pass 1,024.
        (LONG_NAME, "v" * (MAX_KEY_BYTES - 4 - AROUND)),
        # The name is 250 bytes; the fresh one, 263, is no file name (255 at most).
        ("y" * 242 + ".parquet", "b"),
    ],
    ids=["key", "file-name"],
)
def test_a_copy_whose_taken_name_would_be_too_long_copies_none_of_its_files(
    lake: Lake, admin: Any, bucket: str, long_name: str, value: str
) -> None:
    """The destination's key for the longer-named file fits, but that name is taken there
    (another writer's object): a copy never overwrites, so it copies under a fresh name, 13
    bytes longer, which passes S3's key limit (or a file name's). The copy is
    ``InvalidNameError`` before anything is copied, naming the 13 bytes. It was refused
    only at that file, once it had copied the other, whose copy it left behind."""
    two_files(lake, long_name)
    taken = f"datasets/archive/tag={value}/{long_name}"
    admin.put_object(Bucket=bucket, Key=taken, Body=b"another writer's")
    with pytest.raises(InvalidNameError, match="13 bytes more") as refused:
        lake.copy_partition(
            "events", {"tag": "a"}, to_dataset="archive", to_partition={"tag": value}
        )
    assert "S3 allows 1024" in str(refused.value) or "at most 255" in str(refused.value)
    listed = admin.list_objects_v2(Bucket=bucket, Prefix="datasets/archive/")
    assert [o["Key"] for o in listed.get("Contents", [])] == [taken]
    assert "archive" not in lake.registry.read().datasets


def test_a_copy_with_room_for_the_fresh_name_copies_around_a_taken_one(
    lake: Lake, admin: Any, bucket: str
) -> None:
    """The same copy 13 bytes shallower: the taken name gets a fresh one, 1,024 bytes long,
    and both files are copied, the other writer's object left as it was."""
    two_files(lake, LONG_NAME)
    value = "v" * (MAX_KEY_BYTES - 13 - AROUND)
    taken = f"datasets/archive/tag={value}/{LONG_NAME}"
    admin.put_object(Bucket=bucket, Key=taken, Body=b"another writer's")
    lake.copy_partition("events", {"tag": "a"}, to_dataset="archive", to_partition={"tag": value})
    keys = [f.key for f in lake.registry.files("archive")]
    assert len(keys) == 2
    assert taken not in keys
    assert max(len(k.encode()) for k in keys) == MAX_KEY_BYTES
    assert sorted(lake.read("archive")["id"].to_pylist()) == [1, 2]
    assert admin.get_object(Bucket=bucket, Key=taken)["Body"].read() == b"another writer's"


def test_the_iceberg_views_keys_fit_behind_the_longest_prefix_of_the_longest_dataset(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """The view's keys are bounded by the layout (``views/<dataset>/iceberg/...`` with a
    name of at most 255 bytes and 20-digit versions), below the registry's digest-named
    keys a lake prefix must leave room for: a lake at the longest prefix allowed, of a
    dataset of the longest name, mirrors with every key within 1,024 bytes. A mirror cannot
    be refused by S3 for a key's length halfway, so it needs no check of its own."""
    pytest.importorskip("pyiceberg")
    name = "d" * 255
    widest = iceberg_manifest_key(name, 2**63 - 1, 10**6)
    for key in (widest, iceberg_list_key(name, 2**63 - 1), iceberg_metadata_key(name, 2**63)):
        assert len(key.encode()) <= _LONGEST_BOUNDED
    prefix = "p" * (MAX_KEY_BYTES - _LONGEST_BOUNDED - 1) + "/"
    with Lake(bucket, prefix=prefix, s3=client, retry=FAST_RETRY) as lake:
        lake.append(name, pa.table({"id": [1], "day": [1]}), partition_by=["day"])
        lake.mirror(name, "iceberg")
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}views/")["Contents"]
    assert len(listed) == 3
    assert all(len(o["Key"].encode()) <= MAX_KEY_BYTES for o in listed)


def test_vacuum_reads_the_kept_manifest_lists_together(lake: Lake, s3: S3Endpoint) -> None:
    """A view of more versions than lists are read at once, every one kept: the endpoint
    holds the manifest-list reads it receives, and 16 are held at once. Vacuum read them one
    after another, one held at a time: a dataset keeping 10,000 mirrored versions took
    10,000 round trips to S3 before vacuum deleted anything."""
    pytest.importorskip("pyiceberg")
    versions = LIST_READERS + 4
    for i in range(versions):
        lake.append("events", pa.table({"id": [i]}))
    lake.mirror("events", "iceberg")
    s3.inject(
        "stall",
        operation="GetObject",
        prefix="views/events/iceberg/manifests/snap-",
        count=LIST_READERS,
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        vacuuming = pool.submit(lake.vacuum, older_than=HOUR, enforce_retention=False)
        try:
            wait_until(lambda: s3.stalled() == LIST_READERS)
        finally:
            s3.release_stalls()
        report = vacuuming.result(timeout=60)
    assert not report.failed
    assert not [k for k in report.orphans if k.startswith("views/")]
