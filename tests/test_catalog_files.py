"""How the Iceberg REST catalog reads the data files an engine commits (README, "Iceberg and
Delta views; the Iceberg REST catalog"; docs/ARCHITECTURE.md, "The Iceberg REST catalog"):
each is streamed through its checksum a chunk at a time, its row count read from its parquet
footer alone, and a file the engine wrote outside its partition's lakelock folder is copied
there server-side. pyiceberg's ``RestCatalog`` talks HTTP to a catalog started in-process over
the embedded endpoint, with S3 keys the test bucket's policy does not bind."""

from __future__ import annotations

import hashlib
import io
import random
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import BadRequestError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import BinaryType, LongType, NestedField, StringType

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog
from lakelock._layout import data_file_key, files_prefix
from lakelock._names import partition_path
from lakelock._stored_partitions import FOOTER_READ
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.catalog import engine

MIB = 1024 * 1024

BLOBS = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "blob", BinaryType(), required=False),
)
EVENTS = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
)
#: Partitioned by ``kind``, whose value "a b" pyiceberg's folders spell ``kind=a+b``: not
#: where lakelock keeps that partition's files, so the catalog places each file it commits.
BY_KIND = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "kind"))


@pytest.fixture
def server(lake: Lake) -> Iterator[CatalogServer]:
    running = CatalogServer(LakeCatalog(lake), port=0).start()
    yield running
    running.close()


@pytest.fixture(scope="module")
def apart() -> Iterator[S3Endpoint]:
    """The endpoint served by a child process: the memory this process traces is then the
    catalog's (and pyiceberg's), not the endpoint's own copies of the objects it serves."""
    with S3Endpoint(mode="process") as endpoint:
        yield endpoint


def blobs(count: int, size: int) -> pa.Table:
    """``count`` rows of partition "a b", each ``size`` bytes that do not compress."""
    seeded = random.Random(7)
    return pa.table(
        {
            "kind": pa.array(["a b"] * count, pa.string()),
            "blob": pa.array([seeded.randbytes(size) for _ in range(count)], pa.binary()),
        }
    )


def engine_files(client: Any, lake: Lake, dataset: str, placed: set[str]) -> list[str]:
    """The parquet files under ``dataset``'s folder that lakelock did not place (the keys
    relative to the lake's prefix): the ones the engine wrote."""
    listed = client.list_objects_v2(Bucket=lake.bucket, Prefix=lake.prefix + files_prefix(dataset))
    keys = [item["Key"][len(lake.prefix) :] for item in listed.get("Contents", [])]
    return [key for key in keys if key.endswith(".parquet") and key not in placed]


def body(client: Any, lake: Lake, key: str) -> bytes:
    answer = client.get_object(Bucket=lake.bucket, Key=lake.prefix + key)
    return bytes(answer["Body"].read())


def test_a_commit_of_a_large_data_file_holds_a_chunk_of_it_never_all_of_it(
    apart: S3Endpoint,
) -> None:
    """A commit of a 24 MB data file, placed in its partition's folder: the catalog's peak
    Python memory while it takes the commit stays under a quarter of the file (it streams the
    file through its checksum, reads only its footer, copies it server-side), and the placed
    file is the engine's, byte for byte, recorded with its own ETag and the SHA-256 of those
    bytes. What a user would have lost: the catalog read every added file whole, eight at
    once, so one Spark commit of 512 MB files held gigabytes and the catalog was killed."""
    apart.create_bucket("large-files")
    client = apart.client()
    lake = Lake("large-files", s3=client, retry=FAST_RETRY)
    with CatalogServer(LakeCatalog(lake), port=0).start() as server:
        table = engine(server).create_table("lake.blobs", BLOBS, partition_spec=BY_KIND)
        transaction = table.transaction()
        transaction.append(blobs(24, MIB))  # the engine writes its file here; commits below
        tracemalloc.start()
        try:
            transaction.commit_transaction()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    (placed,) = lake.registry.files("blobs")
    assert placed.size > 24 * MIB
    assert peak < placed.size // 4, f"peak {peak} bytes for a {placed.size}-byte file"
    (written,) = engine_files(client, lake, "blobs", {placed.key})
    assert written != placed.key
    copied = body(client, lake, placed.key)
    assert copied == body(client, lake, written)
    assert placed.checksum == f"sha256:{hashlib.sha256(copied).hexdigest()}"
    head = client.head_object(Bucket=lake.bucket, Key=lake.prefix + placed.key)
    assert placed.etag == head["ETag"]
    assert lake.read("blobs").num_rows == 24


def test_a_data_file_whose_body_breaks_off_midway_is_read_again_from_its_start(
    server: CatalogServer, lake: Lake, client: Any, s3: S3Endpoint
) -> None:
    """The first read of the engine's data file breaks off halfway: the catalog reads it again
    from its start, and the commit records the SHA-256 of the whole file (not of a half
    hashed twice), so lakelock's reads of the file verify."""
    table = engine(server).create_table("lake.blobs", BLOBS, partition_spec=BY_KIND)
    transaction = table.transaction()
    transaction.append(blobs(4, 3 * MIB))
    (written,) = engine_files(client, lake, "blobs", set())
    s3.inject("truncate", operation="GetObject", prefix=lake.prefix + written, count=1)
    transaction.commit_transaction()
    assert s3.faults()["injected"] == {"truncate": 1}
    (placed,) = lake.registry.files("blobs")
    assert placed.checksum == f"sha256:{hashlib.sha256(body(client, lake, written)).hexdigest()}"
    assert lake.read("blobs").num_rows == 4


def placed_key(written: str) -> str:
    """Where lakelock keeps the engine's file ``written`` of partition "a b" of "blobs"."""
    return data_file_key("blobs", partition_path([("kind", "a b")]), written.rsplit("/", 1)[-1])


def test_a_file_found_where_the_engines_file_belongs_is_taken_only_if_it_is_the_same(
    server: CatalogServer, lake: Lake, client: Any, admin: Any
) -> None:
    """Where lakelock keeps the engine's file, another file is already: the commit is a 400
    naming the place, and nothing is committed. The engine's own bytes there (a request sent
    again after its copy landed) commit, recorded with that object's ETag. What a user would
    lose: a commit naming a file whose bytes are not the ones its checksum is of."""
    table = engine(server).create_table("lake.blobs", BLOBS, partition_spec=BY_KIND)
    transaction = table.transaction()
    transaction.append(blobs(2, 1000))
    (written,) = engine_files(client, lake, "blobs", set())
    key = lake.prefix + placed_key(written)
    admin.put_object(Bucket=lake.bucket, Key=key, Body=body(client, lake, written)[:-1] + b"!")
    version = lake.registry.read().version
    with pytest.raises(BadRequestError, match="another file is"):
        transaction.commit_transaction()
    assert lake.registry.read().version == version
    again = table.transaction()
    again.append(blobs(2, 1000))
    (written,) = engine_files(client, lake, "blobs", {written, placed_key(written)})
    key = lake.prefix + placed_key(written)
    admin.put_object(Bucket=lake.bucket, Key=key, Body=body(client, lake, written))
    planted = client.head_object(Bucket=lake.bucket, Key=key)["ETag"]
    again.commit_transaction()
    (placed,) = lake.registry.files("blobs")
    assert (placed.key, placed.etag) == (placed_key(written), planted)
    assert lake.read("blobs").num_rows == 2


def test_a_footer_longer_than_the_first_read_of_the_tail_gives_the_row_count(
    server: CatalogServer, lake: Lake, admin: Any
) -> None:
    """A data file of 3000 row groups (a parquet footer of hundreds of KB, longer than the
    catalog's first read of a file's tail), added by an engine, commits with its row count:
    the footer is read whole by a second ranged read."""
    table = engine(server).create_table("lake.events", EVENTS)
    rows = pa.table(
        {
            "kind": pa.array([f"k{i}" for i in range(3000)], pa.string()),
            "n": pa.array(range(3000), pa.int64()),
        }
    )
    written = io.BytesIO()
    pq.write_table(rows, written, row_group_size=1)
    assert int.from_bytes(written.getvalue()[-8:-4], "little") > FOOTER_READ
    key = f"{lake.prefix}{files_prefix('events')}wide.parquet"
    admin.put_object(Bucket=lake.bucket, Key=key, Body=written.getvalue())
    table.add_files([f"s3://{lake.bucket}/{key}"])
    (placed,) = lake.registry.files("events")
    assert placed.record_count == 3000
    assert lake.read("events").num_rows == 3000
