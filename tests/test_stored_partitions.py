"""Files written elsewhere that store their own partition columns (as Spark and pyiceberg
write them; lakelock's own files do not): ``registry.commit`` judges them by their parquet
footer, and a partition move writes them again with the new value
(``lakelock/_stored_partitions.py``; docs/FORMAT.md, "File statistics"). Each test talks HTTP
to the embedded S3 endpoint; the footer's read sizes are lowered by ``monkeypatch`` to force
the second read and the refusal of a long footer without writing megabytes."""

from __future__ import annotations

import io
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakelock import Lake
from lakelock import _stored_partitions as stored_partitions
from lakelock._datafile import DataFile
from lakelock._stats import footer_stats as stats_of
from lakelock.errors import (
    CommitConflictError,
    InvalidNameError,
    SchemaMismatchError,
    StorageError,
)
from lakelock.testing import S3Endpoint
from tests._support import wait_until
from tests._support.files import foreign, parquet

INT64 = pa.int64()


def years(values: list[int], ns: list[int], type_: pa.DataType = INT64) -> pa.Table:
    return pa.table({"year": pa.array(values, type_), "n": pa.array(ns, pa.int64())})


@pytest.fixture
def events(lake: Lake) -> Lake:
    lake.append("events", years([2024], [0]), partition_by=["year"])
    return lake


def test_a_long_footer_is_read_with_a_second_get_and_still_judged(
    events: Lake, s3: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A footer longer than the first read of the file's tail is read with a second ranged
    GET, and a stored ``year=2025`` under ``year=2024`` is refused all the same."""
    monkeypatch.setattr(stored_partitions, "FOOTER_READ", 16)
    file = foreign(events, "year=2024", parquet(years([2025], [1])), 1, "f.parquet")
    version = events.registry.read().version
    s3.reset_stats()
    with pytest.raises(SchemaMismatchError, match=r"f\.parquet.*'year'"):
        events.registry.commit("events", add=[file])
    assert s3.areas()["GetObject datasets"] == 2
    assert events.registry.read().version == version


def test_a_footer_over_the_limit_is_refused_not_read(
    events: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file declaring a footer over ``MAX_FOOTER`` is refused, naming it, unread."""
    monkeypatch.setattr(stored_partitions, "MAX_FOOTER", 64)
    file = foreign(events, "year=2024", parquet(years([2024], [1])), 1, "f.parquet")
    version = events.registry.read().version
    with pytest.raises(SchemaMismatchError, match=r"f\.parquet declares a parquet footer"):
        events.registry.commit("events", add=[file])
    assert events.registry.read().version == version


def test_a_file_that_is_not_parquet_is_left_to_the_commit_as_before(events: Lake) -> None:
    """Bytes that are not parquet are not judged here: the commit takes them as it did."""
    file = foreign(events, "year=2024", b"not parquet at all", 1, "f.parquet")
    result = events.registry.commit("events", add=[file])
    assert not result.empty


def test_lakelocks_own_files_are_committed_without_a_footer_read(
    events: Lake, s3: S3Endpoint
) -> None:
    """The files ``write`` returned store no partition column: no footer is read for them."""
    files = events.write("events", years([2024, 2025], [1, 2]), partition_by=["year"])
    s3.reset_stats()
    events.registry.commit("events", add=files)
    assert "GetObject datasets" not in s3.areas()


def test_a_stored_column_that_cannot_hold_the_new_value_refuses_the_move(
    events: Lake, s3: S3Endpoint
) -> None:
    """A foreign file storing ``year`` as int32 in the int64 partition ``year=2024``: a
    rename to a year an int32 cannot hold is ``InvalidNameError``, nothing copied."""
    rows = years([2024], [1], pa.int32())
    file = foreign(events, "year=2024", parquet(rows), 1, "f.parquet")
    events.registry.commit("events", add=[file])
    version = events.registry.read().datasets["events"].updated_version
    with pytest.raises(InvalidNameError):
        events.rename_partition("events", "year=2024", to_partition="year=5000000000")
    assert events.registry.read().datasets["events"].updated_version == version
    listed = s3.client().list_objects_v2(Bucket=events.bucket, Prefix=events.prefix)
    assert not [o["Key"] for o in listed["Contents"] if "year=5000000000" in o["Key"]]


def test_a_foreign_file_renamed_holds_the_new_value_in_its_own_type(events: Lake) -> None:
    """The int32 column is written again as int32 holding the new year; the rows read."""
    file = foreign(events, "year=2024", parquet(years([2024], [1], pa.int32())), 1, "f.parquet")
    events.registry.commit("events", add=[file])
    events.rename_partition("events", "year=2024", to_partition="year=2023")
    (moved,) = [
        f
        for f in events.registry.files("events", partitions=["year=2023"])
        if f.stats is not None and f.stats.column("year") is not None
    ]
    stored = pq.read_table(io.BytesIO(events.store.get(moved.key).body))
    assert stored.schema.field("year").type == pa.int32()
    assert stored["year"].to_pylist() == [2023]
    assert sorted(events.read("events")["year"].to_pylist()) == [2023, 2023]


def test_a_foreign_file_written_again_keeps_its_codec_row_groups_and_rows(events: Lake) -> None:
    """A file of three row groups (4, 4 and 2 rows), zstd, a dictionary on ``n`` only, is
    written again a row group at a time as it was: zstd, the same row groups, the
    dictionary where it was, every row with the new year, and the statistics a whole
    table's write would give. It was written with pyarrow's defaults (snappy, one row
    group, a dictionary on every column)."""
    rows = years([2024] * 10, list(range(10)))
    rows = rows.append_column("x", pa.array([1.5, float("nan")] * 5))
    source = io.BytesIO()
    pq.write_table(rows, source, compression="zstd", row_group_size=4, use_dictionary=["n"])
    file = foreign(events, "year=2024", source.getvalue(), 10, "f.parquet")
    events.registry.commit("events", add=[file])
    events.rename_partition("events", "year=2024", to_partition="year=2023")
    (moved,) = [
        f for f in events.registry.files("events", partitions=["year=2023"]) if f.record_count == 10
    ]
    body = events.store.get(moved.key).body
    footer = pq.read_metadata(pa.BufferReader(body))
    assert [footer.row_group(g).num_rows for g in range(footer.num_row_groups)] == [4, 4, 2]
    chunks = [footer.row_group(g).column(j) for g in range(3) for j in range(3)]
    assert {c.compression for c in chunks} == {"ZSTD"}
    dictionary = {c.path_in_schema for c in chunks if "RLE_DICTIONARY" in c.encodings}
    assert dictionary == {"n"}
    stored = pq.read_table(pa.BufferReader(body))
    assert stored["year"].to_pylist() == [2023] * 10
    assert stored["n"].to_pylist() == list(range(10))
    assert moved.stats is not None
    whole = stats_of(footer, stored)
    assert sorted(moved.stats.columns, key=str) == sorted(whole.columns, key=str)
    x = moved.stats.column("x")
    assert x is not None
    assert x.nans == 5


def committed_foreign(lake: Lake) -> DataFile:
    """A foreign file storing ``year=2024``, committed in ``year=2024``."""
    file = foreign(lake, "year=2024", parquet(years([2024], [1])), 1, "f.parquet")
    lake.registry.commit("events", add=[file])
    return file


def test_a_file_gone_before_it_is_written_again_refuses_the_move(
    events: Lake, s3: S3Endpoint
) -> None:
    """The version read was replaced and its file deleted between the move's footer read
    and its read of the whole file: ``CommitConflictError``, nothing committed."""
    file = committed_foreign(events)
    version = events.registry.read().datasets["events"].updated_version
    key = f"{events.prefix}{file.key}"
    s3.inject("stall", operation="GetObject", prefix=key, count=2)
    errors: list[BaseException] = []

    def rename() -> None:
        try:
            events.rename_partition("events", "year=2024", to_partition="year=2023")
        except CommitConflictError as error:
            errors.append(error)

    moving = threading.Thread(target=rename)
    moving.start()
    try:
        wait_until(lambda: s3.stalled() == 1)  # the footer's read
        s3.release_stalls()
        wait_until(lambda: s3.stalled() == 1)  # the whole file's
        s3.client(access_key="engine").delete_object(Bucket=events.bucket, Key=key)
    finally:
        s3.release_stalls()
        moving.join(120)
    assert len(errors) == 1
    assert "is gone" in str(errors[0])
    assert events.registry.read().datasets["events"].updated_version == version


def test_a_file_whose_bytes_changed_is_not_written_again(events: Lake, s3: S3Endpoint) -> None:
    """A file whose bytes no longer match its checksum is refused, not written again with
    the new value: ``StorageError`` ``ChecksumMismatch``, nothing committed."""
    file = committed_foreign(events)
    version = events.registry.read().datasets["events"].updated_version
    s3.client(access_key="engine").put_object(
        Bucket=events.bucket, Key=f"{events.prefix}{file.key}", Body=parquet(years([2024], [9]))
    )
    with pytest.raises(StorageError) as refused:
        events.rename_partition("events", "year=2024", to_partition="year=2023")
    assert refused.value.code == "ChecksumMismatch"
    assert events.registry.read().datasets["events"].updated_version == version
