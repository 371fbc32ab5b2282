"""Adversarial tests of what the Iceberg REST catalog reads of an engine's files (README, "the
Iceberg REST catalog": its memory does not grow with the files' size; an engine's append is
one lakelock commit): a data file whose parquet footer declares more bytes than any footer
holds, a manifest list that names a huge object, and a data file whose column is stored in a
type the table's cannot hold. pyiceberg's ``RestCatalog`` talks HTTP to a catalog started
in-process over the embedded endpoint, and commits files the test wrote as a hostile or
damaged engine would."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import BadRequestError
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog
from lakelock._catalog._commits import MAX_MANIFEST
from lakelock._stored_partitions import MAX_FOOTER
from lakelock.testing import S3Endpoint
from tests._support.catalog import engine

EVENTS = Schema(NestedField(1, "n", LongType(), required=False))


@pytest.fixture
def server(lake: Lake) -> Iterator[CatalogServer]:
    running = CatalogServer(LakeCatalog(lake), port=0).start()
    yield running
    running.close()


def test_a_file_declaring_a_footer_longer_than_any_is_refused_unread(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """An engine appends a file whose last 8 bytes declare a parquet footer just past the
    catalog's bound (a hostile file, or one damaged in its tail: the same bytes on a 4 GB
    file declare a 4 GB footer). The catalog must refuse it (400, naming the footer's size)
    without reading the footer: it reads a footer into memory whole, so what a user would
    have lost is the catalog itself, every engine's commits with it, to one file whose tail
    makes it allocate gigabytes (README: its memory does not grow with the files' size).
    So the endpoint sends the file's bytes once (the checksum's stream) and its tail, not
    the declared footer again; nothing is committed. (Before, the catalog fetched and held
    the whole declared footer, then answered that the file is not parquet.)"""
    table = engine(server, s3).create_table("lake.events", EVENTS)
    size = MAX_FOOTER + 64
    footer = MAX_FOOTER + 1  # fits the file (size - 12): only the bound refuses it
    body = b"PAR1" + bytes(size - 12) + footer.to_bytes(4, "little") + b"PAR1"
    folder = table.metadata.properties["write.data.path"]
    path = f"{folder}/hostile.parquet"
    key = path.split("/", 3)[3]
    s3.client(access_key="engine").put_object(Bucket=lake.bucket, Key=key, Body=body)
    hostile = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=size,
    )
    transaction = table.transaction()
    with transaction.update_snapshot().fast_append() as append:
        append.append_data_file(hostile)
    s3.reset_stats()
    with pytest.raises(BadRequestError, match=f"footer of {footer} bytes"):
        transaction.commit_transaction()
    assert s3.traffic()["out"] < size * 1.5
    assert [h.operation for h in lake.history("events")] == ["create"]


def test_a_manifest_list_larger_than_any_is_refused_unread(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """An engine's append names a manifest list that is just over the catalog's bound (an
    engine's bug, or a hostile one naming any object of the lake: a data file of
    gigabytes). pyiceberg's Avro reader takes a manifest whole, so the catalog must refuse
    it (400, naming its size) without reading it. What a user would have lost: the catalog,
    and every engine's commits with it, to one request that makes it hold gigabytes. So the
    endpoint sends none of its bytes; nothing is committed. (Before, the catalog read it
    whole, then answered that it cannot be read.)"""
    table = engine(server, s3).create_table("lake.events", EVENTS)
    transaction = table.transaction()
    with transaction.update_snapshot().fast_append() as append:
        append.append_data_file(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=f"{table.metadata.properties['write.data.path']}/none.parquet",
                file_format=FileFormat.PARQUET,
                partition=Record(),
                record_count=1,
                file_size_in_bytes=1,
            )
        )
    (listing,) = [
        u.snapshot.manifest_list for u in transaction._updates if u.action == "add-snapshot"
    ]
    size = MAX_MANIFEST + 1
    key = listing.split("/", 3)[3]
    s3.client(access_key="engine").put_object(Bucket=lake.bucket, Key=key, Body=bytes(size))
    s3.reset_stats()
    with pytest.raises(BadRequestError, match=f"is {size} bytes"):
        transaction.commit_transaction()
    assert s3.traffic()["out"] < 1024 * 1024  # the table's metadata, not the list
    assert [h.operation for h in lake.history("events")] == ["create"]


def append_file(table: Any, path: str, *, rows: int, size: int) -> Any:
    """A transaction of ``table`` appending the file at ``path`` (not sent yet)."""
    transaction = table.transaction()
    with transaction.update_snapshot().fast_append() as append:
        append.append_data_file(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=path,
                file_format=FileFormat.PARQUET,
                partition=Record(),
                record_count=rows,
                file_size_in_bytes=size,
            )
        )
    return transaction


@pytest.mark.parametrize(
    ("stored", "refused"),
    [
        (pa.array(["seven"]), True),
        (pa.array([7.5]), True),
        (pa.array([7], pa.int32()), False),  # Iceberg's int to long: every value fits
    ],
    ids=["string", "double", "int"],
)
def test_a_file_storing_a_column_in_a_type_the_table_cannot_hold_is_refused(
    server: CatalogServer, lake: Lake, s3: S3Endpoint, stored: pa.Array, refused: bool
) -> None:
    """An engine (a bug in it, or a file written by hand and added) appends a parquet file
    whose column ``n`` is stored as a string, or a double, where the table's ``n`` is a
    long. The catalog must refuse the commit (400, naming the column and both types):
    lakelock reads every file cast to the dataset's schema, so what a user would have lost
    is the dataset itself, every later read of it failing (pyarrow's untyped
    ``ArrowInvalid``) until someone restores an earlier version by hand. A type the table's
    holds every value of (an int for a long) is taken. (Before, the catalog checked the
    file's size and row count only, and committed it.)"""
    table = engine(server, s3).create_table("lake.events", EVENTS)
    out = io.BytesIO()
    pq.write_table(pa.table({"n": stored}), out)
    body = out.getvalue()
    path = f"{table.metadata.properties['write.data.path']}/written-elsewhere.parquet"
    key = path.split("/", 3)[3]
    s3.client(access_key="engine").put_object(Bucket=lake.bucket, Key=key, Body=body)
    transaction = append_file(table, path, rows=1, size=len(body))
    if refused:
        with pytest.raises(BadRequestError, match=f"column 'n' as {stored.type}"):
            transaction.commit_transaction()
        assert [h.operation for h in lake.history("events")] == ["create"]
    else:
        transaction.commit_transaction()
        assert lake.read("events").to_pylist() == [{"n": 7}]
