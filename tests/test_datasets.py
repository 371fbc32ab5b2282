"""Write-once datasets against the embedded S3 endpoint: layout, races, lost acknowledgements,
multipart, invalid names, progress, read-back and a round-trip property."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import itertools
import random
import re
import unicodedata
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lakelock._datafile import DataFile
from lakelock._datasets import (
    CHECKSUM_METADATA,
    PARQUET_CONTENT_TYPE,
    RECORDS_METADATA,
    read_files,
    table_schema,
    write_table,
    written_before,
)
from lakelock._names import NULL_PARTITION
from lakelock._s3 import ObjectStore
from lakelock.errors import (
    AlreadyExistsError,
    InvalidNameError,
    OutcomeUnknownError,
    StorageError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, StallAndRace, wait_until

MIB = 1024 * 1024
GENERATED = re.compile(r"part-[0-9a-f]{32}\.parquet")


def sales(writer: int = 0, rows: int = 6) -> pa.Table:
    """A small table: ``writer`` marks whose rows they are."""
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "writer": pa.array([writer] * rows, pa.int32()),
            "region": pa.array(["eu", "us"] * (rows // 2) + ["eu"] * (rows % 2)),
            "amount": pa.array([Decimal(n) / 4 for n in range(rows)], pa.decimal128(10, 2)),
        }
    )


def objects(store: ObjectStore, prefix: str = "") -> list[str]:
    return [o.key for o in store.list(prefix)]


def comparable(table: pa.Table) -> pa.Table:
    """``table`` sorted by id with dictionaries decoded and views made plain, so that equal
    values compare equal however they are encoded (pyarrow cannot sort string views)."""
    fields = []
    for field in table.schema:
        type_ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        fields.append(field.with_type(pa.large_string() if type_ == pa.string_view() else type_))
    return table.cast(pa.schema(fields)).sort_by("id").combine_chunks()


def incompressible(rows: int, size: int, seed: int = 0) -> pa.Table:
    """``rows`` rows of random bytes, about ``size`` bytes of parquet in all."""
    rng = random.Random(seed)
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "blob": pa.array([rng.randbytes(size // rows) for _ in range(rows)], pa.binary()),
        }
    )


# -- layout and records -----------------------------------------------------------------------


def test_unpartitioned_write_records_what_the_registry_needs(store: ObjectStore) -> None:
    """One part-<uuid>.parquet; its DataFile matches the object: size, ETag, write id, sha256."""
    table = sales()
    [written] = write_table(store, "sales", table)
    assert written.dataset == "sales"
    assert written.partition_path == ""
    assert written.key.startswith("datasets/sales/")
    assert GENERATED.fullmatch(written.name)
    obj = store.get(written.key)
    assert (written.size, written.etag, written.write_id) == (obj.size, obj.etag, obj.write_id)
    assert written.checksum == f"sha256:{hashlib.sha256(obj.body).hexdigest()}"
    assert written.record_count == table.num_rows
    assert obj.metadata[RECORDS_METADATA] == str(table.num_rows)
    assert obj.metadata[CHECKSUM_METADATA] == written.checksum
    head = store.client.head_object(Bucket=store.bucket, Key=written.key)
    assert head["ContentType"] == PARQUET_CONTENT_TYPE
    # A plain parquet file any reader opens; it also records the whole table's schema.
    raw = pq.read_table(io.BytesIO(obj.body))
    assert raw.cast(table.schema).equals(table)
    assert b"lakelock.schema" in raw.schema.metadata


def test_generated_names_never_collide(store: ObjectStore) -> None:
    """Writing the same table twice without a file name makes two distinct files."""
    first = write_table(store, "sales", sales())
    second = write_table(store, "sales", sales())
    assert first[0].key != second[0].key
    assert sorted(objects(store)) == sorted([first[0].key, second[0].key])


def test_partitioned_layout_and_round_trip(store: ObjectStore) -> None:
    """Hive col=value files in path order, partition columns only in the path, exact read-back."""
    table = pa.table(
        {
            "id": pa.array(range(5), pa.int64()),
            "year": pa.array([2024, 2023, 2024, 2024, None], pa.int16()),
            "city": pa.array(["a/b", "x", "a/b", "São Paulo", "x"]),
            "v": pa.array([1.5, 2.5, 3.5, 4.5, 5.5]),
        }
    )
    files = write_table(store, "sales", table, partition_by=["year", "city"], file_name="b.parquet")
    assert [f.key for f in files] == [
        "datasets/sales/year=2023/city=x/b.parquet",
        "datasets/sales/year=2024/city=São Paulo/b.parquet",
        "datasets/sales/year=2024/city=a%2Fb/b.parquet",
        f"datasets/sales/year={NULL_PARTITION}/city=x/b.parquet",
    ]
    assert [f.record_count for f in files] == [1, 1, 2, 1]
    assert sorted(objects(store)) == sorted(f.key for f in files)
    raw = pq.read_table(io.BytesIO(store.get(files[2].key).body))
    assert raw.column_names == ["id", "v"]
    assert raw.column("id").to_pylist() == [0, 2]
    back = read_files(store, files)
    assert back.schema.equals(table.schema, check_metadata=True)
    assert back.sort_by("id").equals(table)


def test_partition_by_a_string_is_one_column(store: ObjectStore) -> None:
    """partition_by="region" means the one column, not its letters."""
    files = write_table(store, "sales", sales(), partition_by="region")
    assert [f.partition_path for f in files] == ["region=eu", "region=us"]


def test_every_partition_type_round_trips(store: ObjectStore) -> None:
    """Every supported partition type, nulls included, reads back typed, with or without schema."""
    dictionary = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, None, 0], pa.int8()), pa.array(["x", "y"])
    )
    table = pa.table(
        {
            "id": pa.array(range(4), pa.int64()),
            "flag": pa.array([True, False, None, True]),
            "u64": pa.array([2**64 - 1, 0, None, 2**64 - 1], pa.uint64()),
            "ls": pa.array(["a", "b", None, "a"], pa.large_string()),
            "sv": pa.array(["a", "b", None, "a"], pa.string_view()),
            "d32": pa.array([date(2024, 1, 1), date(1, 1, 1), None, date(2024, 1, 1)]),
            "d64": pa.array([86_400_000, 0, None, 86_400_000], pa.date64()),
            "ts_s": pa.array([1, 2, None, 1], pa.timestamp("s")),
            "ts_ns": pa.array([1, -1, None, 1], pa.timestamp("ns", "Europe/Paris")),
            "dec": pa.array(
                [Decimal("1.10"), Decimal("-2"), None, Decimal("1.1")], pa.decimal256(40, 2)
            ),
            "cat": dictionary,
            "nothing": pa.nulls(4),
        }
    )
    columns = [c for c in table.column_names if c != "id"]
    files = write_table(store, "types", table, partition_by=columns)
    assert len(files) == 3  # rows 0 and 3 share every value
    for schema in (None, table.schema):
        back = read_files(store, files, schema=schema, partition_by=columns)
        assert back.schema.equals(table.schema, check_metadata=True)
        assert comparable(back).equals(comparable(table))


def test_dictionary_with_repeated_values_is_one_partition(store: ObjectStore) -> None:
    """Two dictionary indices holding the same value are one partition, rows in order."""
    cat = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, 1], pa.int8()), pa.array(["x", "x"]))
    table = pa.table({"id": pa.array([3, 1, 2, 0]), "cat": cat})
    [written] = write_table(store, "cats", table, partition_by=["cat"], file_name="f.parquet")
    assert written.partition_path == "cat=x"
    assert read_files(store, [written]).column("id").to_pylist() == [3, 1, 2, 0]


def test_read_with_a_wider_schema(store: ObjectStore) -> None:
    """A schema given to read_files decides the columns: types widened, missing ones null."""
    files = write_table(store, "sales", sales(), partition_by=["region"])
    schema = pa.schema(
        [
            ("region", pa.large_string()),
            ("id", pa.int64()),
            ("writer", pa.int64()),
            ("note", pa.string()),
        ]
    )
    back = read_files(store, files, schema=schema).sort_by("id")
    assert back.schema == schema
    assert back.column("writer").to_pylist() == [0] * 6
    assert back.column("note").null_count == 6
    assert back.column("region").to_pylist() == ["eu", "us"] * 3


def test_read_checks_partition_columns(store: ObjectStore) -> None:
    """partition_by given to read_files must be the files' partition columns."""
    files = write_table(store, "sales", sales(), partition_by=["region"])
    with pytest.raises(InvalidNameError):
        read_files(store, files, partition_by=["writer"])
    with pytest.raises(InvalidNameError):
        read_files(store, files, schema=pa.schema([("id", pa.int64())]))


def test_read_detects_changed_content(store: ObjectStore, admin: Any) -> None:
    """Bytes that do not match the recorded checksum are refused (ChecksumMismatch)."""
    [written] = write_table(store, "sales", sales())
    # A writer the create-only policy does not bind overwrites the file.
    admin.put_object(Bucket=store.bucket, Key=written.key, Body=store.get(written.key).body + b" ")
    with pytest.raises(StorageError) as info:
        read_files(store, [written])
    assert (info.value.code, info.value.key) == ("ChecksumMismatch", written.key)


def test_read_nothing(store: ObjectStore) -> None:
    """No files: an empty table of the given schema, or of no columns."""
    schema = sales().schema
    assert read_files(store, [], schema=schema).equals(schema.empty_table())
    assert read_files(store, []).num_columns == 0


def test_empty_table_writes_nothing(s3: S3Endpoint, store: ObjectStore) -> None:
    """A table without rows writes no file (after validating everything)."""
    assert write_table(store, "sales", sales(rows=0), partition_by=["region"]) == []
    assert write_table(store, "sales", sales(rows=0)) == []
    assert objects(store) == []
    with pytest.raises(InvalidNameError):
        write_table(store, "sales", sales(rows=0), partition_by=["missing"])
    assert "PutObject" not in s3.stats()


def test_table_schema_validates_partitioning() -> None:
    """table_schema is the whole table's schema, once the partitioning is known valid."""
    assert table_schema(sales(), ["region"]) == sales().schema
    with pytest.raises(InvalidNameError):
        table_schema(sales(), ["amount", "nope"])


def test_not_a_table(store: ObjectStore) -> None:
    """Anything but a pyarrow.Table is a TypeError."""
    with pytest.raises(TypeError):
        write_table(store, "sales", sales().to_batches()[0])


def test_layout_is_readable_by_pyarrow(store: ObjectStore, tmp_path: Path) -> None:
    """pyarrow's own Hive partitioning reads a mirror of the keys back to the same values."""
    table = pa.table(
        {
            "id": pa.array(range(4)),
            "city": pa.array(["a/b=c", "50% off", None, "São Paulo"]),
            "day": pa.array([date(2024, 1, 1)] * 2 + [None, date(2024, 1, 2)]),
        }
    )
    files = write_table(store, "cities", table, partition_by=["city", "day"])
    for f in files:
        path = tmp_path / f.key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get(f.key).body)
    partitioning = ds.partitioning(
        pa.schema([("city", pa.string()), ("day", pa.date32())]), flavor="hive"
    )
    back = ds.dataset(tmp_path / "datasets" / "cities", partitioning=partitioning).to_table()
    assert back.select(table.column_names).sort_by("id").equals(table)


# -- invalid input writes nothing -------------------------------------------------------------

LONG = "x" * 1000
INVALID: dict[str, tuple[str, pa.Table, list[str], str | None]] = {
    "dataset-empty": ("", sales(), [], None),
    "dataset-dotdot": ("..", sales(), [], None),
    "dataset-slash": ("a/b", sales(), [], None),
    "dataset-control": ("a\x01", sales(), [], None),
    "file-empty": ("sales", sales(), [], ""),
    "file-dot": ("sales", sales(), [], "."),
    "file-dotdot": ("sales", sales(), [], ".."),
    "file-slash": ("sales", sales(), [], "x/y.parquet"),
    "file-hidden": ("sales", sales(), [], "_SUCCESS"),
    "file-control": ("sales", sales(), [], "f\n.parquet"),
    "column-missing": ("sales", sales(), ["nope"], None),
    "column-twice": ("sales", sales(), ["region", "region"], None),
    # The partition column renamed (a name no partition directory can carry).
    **{
        f"column-{what}": (
            "sales",
            sales().rename_columns(["id", "writer", c, "amount"]),
            [c],
            None,
        )
        for what, c in (("hidden", "_r"), ("equals", "r=1"), ("slash", "r/1"))
    },
    "column-duplicate-in-table": (
        "sales",
        sales().rename_columns(["id", "id", "region", "amount"]),
        ["region"],
        None,
    ),
    "every-column": ("sales", sales().select(["region"]), ["region"], None),
    "type-float": ("sales", sales().append_column("f", pa.array([0.5] * 6)), ["f"], None),
    "type-binary": ("sales", sales().append_column("b", pa.array([b"x"] * 6)), ["b"], None),
    "type-struct": ("sales", sales().append_column("s", pa.array([{"a": 1}] * 6)), ["s"], None),
    "value-empty": (
        "sales",
        sales().set_column(2, "region", pa.array(["eu"] * 5 + [""])),
        ["region"],
        None,
    ),
    "value-control": (
        "sales",
        sales().set_column(2, "region", pa.array(["eu"] * 5 + ["z\x00"])),
        ["region"],
        None,
    ),
    "value-null-marker": (
        "sales",
        sales().set_column(2, "region", pa.array(["eu"] * 5 + [NULL_PARTITION])),
        ["region"],
        None,
    ),
    "value-date-out-of-range": (
        "sales",
        sales().append_column("d", pa.array([0] * 5 + [3_000_000], pa.date32())),
        ["d"],
        None,
    ),
    # Only the last partition's key is too long: still nothing is written.
    "key-too-long": (
        "sales",
        sales().set_column(2, "region", pa.array(["eu"] * 5 + [LONG])),
        ["region"],
        None,
    ),
}


@pytest.mark.parametrize("case", INVALID.values(), ids=INVALID.keys())
def test_invalid_input_writes_nothing(
    s3: S3Endpoint, store: ObjectStore, case: tuple[str, pa.Table, list[str], str | None]
) -> None:
    """Every class of bad name, type, value or key is InvalidNameError before any request."""
    dataset, table, partition_by, file_name = case
    with pytest.raises(InvalidNameError):
        write_table(store, dataset, table, partition_by=partition_by, file_name=file_name)
    assert objects(store) == []
    stats = s3.stats()
    assert "PutObject" not in stats
    assert "CreateMultipartUpload" not in stats


def test_lake_prefix_counts_in_the_key_limit(client: Any, bucket: str) -> None:
    """The lake prefix counts towards the 1024-byte key limit."""
    value = "v" * (1024 - len("datasets/d/c=/f.parquet"))
    table = pa.table({"id": [1], "c": [value]})
    write_table(
        ObjectStore(client, bucket, retry=FAST_RETRY),
        "d",
        table,
        partition_by=["c"],
        file_name="f.parquet",
    )
    prefixed = ObjectStore(client, bucket, prefix="lake/", retry=FAST_RETRY)
    with pytest.raises(InvalidNameError):
        write_table(prefixed, "d", table, partition_by=["c"], file_name="f.parquet")
    assert objects(prefixed) == []


# -- duplicates and races ---------------------------------------------------------------------


def test_retry_with_the_same_file_name_is_already_exists(store: ObjectStore) -> None:
    """A retry with the same file name is AlreadyExistsError; the first run's file stays."""
    [first] = write_table(store, "sales", sales(writer=1), file_name="batch-7.parquet")
    with pytest.raises(AlreadyExistsError) as info:
        write_table(store, "sales", sales(writer=2), file_name="batch-7.parquet")
    assert info.value.key == first.key
    assert isinstance(info.value, FileExistsError)
    assert written_before(info.value) == ()
    assert store.head(first.key).etag == first.etag
    assert read_files(store, [first]).column("writer").to_pylist() == [1] * 6


@pytest.mark.parametrize("partition_by", [[], ["region"]], ids=["unpartitioned", "partitioned"])
def test_threads_racing_on_one_file_name(
    s3: S3Endpoint, store: ObjectStore, partition_by: list[str]
) -> None:
    """N racing writers of one file name: one wins, N-1 AlreadyExistsError, winner's parquet."""
    writers = 8
    s3.inject("stall", operation="PutObject", count=writers)

    def write(n: int) -> list[DataFile] | AlreadyExistsError:
        try:
            return write_table(
                store,
                "sales",
                sales(writer=n),
                partition_by=partition_by,
                file_name="daily.parquet",
            )
        except AlreadyExistsError as error:
            return error

    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        futures = [pool.submit(write, n) for n in range(writers)]
        wait_until(lambda: s3.stalled() == writers)
        s3.release_stalls()
        outcomes = [f.result(timeout=60) for f in futures]
    winners = [(n, o) for n, o in enumerate(outcomes) if not isinstance(o, AlreadyExistsError)]
    losers = [o for o in outcomes if isinstance(o, AlreadyExistsError)]
    assert len(winners) == 1
    assert len(losers) == writers - 1
    assert all(written_before(e) == () for e in losers)
    n, files = winners[0]
    assert sorted(objects(store)) == sorted(f.key for f in files)
    for f in files:
        assert store.head(f.key).write_id == f.write_id
    assert read_files(store, files).sort_by("id").equals(sales(writer=n))


def test_partial_write_reports_what_it_wrote(store: ObjectStore) -> None:
    """Partition 2 of 3 taken (another writer's rows): error raised, partition 1 reported
    and kept, 3 not attempted."""
    table = pa.table({"id": [1, 2, 3], "p": ["a", "b", "c"]})
    other = pa.table({"id": [20], "p": ["b"]})
    [theirs] = write_table(store, "d", other, partition_by=["p"], file_name="f.parquet")
    with pytest.raises(AlreadyExistsError) as info:
        write_table(store, "d", table, partition_by=["p"], file_name="f.parquet")
    [ours] = written_before(info.value)
    assert (ours.key, info.value.key) == ("datasets/d/p=a/f.parquet", theirs.key)
    assert any(ours.key in note for note in info.value.__notes__)
    assert sorted(objects(store)) == [ours.key, theirs.key]
    assert store.head(theirs.key).etag == theirs.etag


def test_unknown_outcome_mid_write_deletes_nothing(s3: S3Endpoint, store: ObjectStore) -> None:
    """An unknown outcome mid-write is raised; earlier files are reported, nothing deleted."""
    table = pa.table({"id": [1, 2], "p": ["a", "b"]})
    s3.inject("error", operation="PutObject", prefix="datasets/d/p=b/")
    with pytest.raises(OutcomeUnknownError) as info:
        write_table(store, "d", table, partition_by=["p"])
    [ours] = written_before(info.value)
    s3.clear_faults()
    assert objects(store) == [ours.key]
    assert "DeleteObject" not in s3.stats()
    assert "DeleteObjects" not in s3.stats()


# -- lost acknowledgements --------------------------------------------------------------------


def test_lost_ack_on_single_put_is_our_success(s3: S3Endpoint, store: ObjectStore) -> None:
    """PUT applied, response lost, SDK retry meets a 412: read back, our write id, success."""
    s3.inject("lost_ack", operation="PutObject", count=1)
    [written] = write_table(store, "sales", sales(), file_name="f.parquet")
    assert s3.faults()["injected"] == {"lost_ack": 1}
    assert s3.stats()["PutObject"] == 2
    obj = store.get(written.key)
    assert (obj.write_id, obj.etag) == (written.write_id, written.etag)
    assert read_files(store, [written]).equals(sales())


def test_retry_into_another_writers_file_is_already_exists(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A PUT retried into another writer's file reads back as theirs: AlreadyExistsError."""
    key = "datasets/sales/f.parquet"
    s3.inject("stall", operation="PutObject", prefix=key, count=1)
    s3.inject("error", operation="PutObject", prefix=key, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ours = pool.submit(write_table, store, "sales", sales(writer=1), file_name="f.parquet")
        wait_until(lambda: s3.stalled() == 1)
        s3.clear_faults()
        [theirs] = write_table(store, "sales", sales(writer=2), file_name="f.parquet")
        s3.release_stalls()
        with pytest.raises(AlreadyExistsError) as info:
            ours.result(timeout=60)
    assert info.value.actual_etag == theirs.etag
    assert s3.stats()["PutObject"] == 3
    assert read_files(store, [theirs]).column("writer").to_pylist() == [2] * 6


# -- multipart --------------------------------------------------------------------------------


@pytest.fixture
def multipart_store(client: Any, bucket: str) -> ObjectStore:
    """A store that sends every non-empty body by multipart upload."""
    return ObjectStore(client, bucket, multipart_threshold=1, retry=FAST_RETRY)


def test_multipart_write(s3: S3Endpoint, multipart_store: ObjectStore) -> None:
    """Above the threshold a file goes by multipart (conditional completion) and reads back."""
    files = write_table(multipart_store, "sales", sales(), partition_by=["region"])
    stats = s3.stats()
    assert (stats["CreateMultipartUpload"], stats["CompleteMultipartUpload"]) == (2, 2)
    assert "PutObject" not in stats
    for f in files:
        assert multipart_store.head(f.key).size == f.size
    assert read_files(multipart_store, files).sort_by("id").equals(sales())


def test_multipart_spooled_file_with_several_parts(s3: S3Endpoint, store: ObjectStore) -> None:
    """A large partition spools to disk and uploads in several parts, checksum intact."""
    table = incompressible(rows=12, size=13 * MIB)
    small_parts = ObjectStore(
        store.client, store.bucket, multipart_threshold=6 * MIB, part_size=5 * MIB, retry=FAST_RETRY
    )
    [written] = write_table(small_parts, "big", table, spool_threshold=1 * MIB)
    assert written.size > 13 * MIB
    assert s3.stats()["UploadPart"] == 3
    assert read_files(store, [written]).equals(table)


def race_for_one_file(
    stall_and_race: StallAndRace, ours: ObjectStore, theirs: ObjectStore
) -> tuple[AlreadyExistsError, DataFile]:
    """Writer 1's multipart completion of ``f.parquet`` (through ``ours``) is held while
    writer 2 writes the file (through ``theirs``): the error writer 1 gets, and writer 2's
    file."""
    written: list[DataFile] = []
    with pytest.raises(AlreadyExistsError) as info:
        stall_and_race(
            lambda: write_table(ours, "sales", sales(writer=1), file_name="f.parquet"),
            lambda: written.extend(
                write_table(theirs, "sales", sales(writer=2), file_name="f.parquet")
            ),
            operation="CompleteMultipartUpload",
            prefix="",
        )
    return info.value, written[0]


def test_multipart_completion_loses_race(
    s3: S3Endpoint,
    store: ObjectStore,
    multipart_store: ObjectStore,
    stall_and_race: StallAndRace,
) -> None:
    """A completion that loses the race is AlreadyExistsError; upload aborted, theirs kept."""
    _, theirs = race_for_one_file(stall_and_race, multipart_store, store)
    assert s3.stats()["AbortMultipartUpload"] == 1
    assert store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []
    assert read_files(store, [theirs]).column("writer").to_pylist() == [2] * 6


def test_lost_ack_on_multipart_completion_is_our_success(
    s3: S3Endpoint, multipart_store: ObjectStore
) -> None:
    """Completion applied, response lost: resolved by our write id, one object, ours."""
    s3.inject("lost_ack", operation="CompleteMultipartUpload", count=1)
    [written] = write_table(multipart_store, "sales", sales(), file_name="f.parquet")
    assert s3.faults()["injected"] == {"lost_ack": 1}
    assert multipart_store.head(written.key).write_id == written.write_id
    assert objects(multipart_store) == [written.key]
    assert read_files(multipart_store, [written]).equals(sales())


def test_multipart_retry_into_another_writers_file(
    s3: S3Endpoint,
    store: ObjectStore,
    multipart_store: ObjectStore,
    stall_and_race: StallAndRace,
) -> None:
    """A completion retried into another writer's file: AlreadyExistsError, upload aborted."""
    s3.inject("error", operation="CompleteMultipartUpload", count=1)
    error, theirs = race_for_one_file(stall_and_race, multipart_store, store)
    assert error.actual_etag == theirs.etag
    assert s3.stats()["AbortMultipartUpload"] == 1
    assert read_files(store, [theirs]).column("writer").to_pylist() == [2] * 6


# -- progress ---------------------------------------------------------------------------------


def recorder() -> tuple[list[tuple[int, int]], Callable[[int, int], None]]:
    calls: list[tuple[int, int]] = []
    return calls, lambda done, total: calls.append((done, total))


def assert_progress(calls: list[tuple[int, int]], files: list[DataFile]) -> None:
    total = sum(f.size for f in files)
    assert calls
    assert {t for _, t in calls} == {total}
    done = [d for d, _ in calls]
    assert done == sorted(set(done))
    assert done[-1] == total


def test_progress_over_all_files(store: ObjectStore) -> None:
    """progress(done, total) rises strictly to the total bytes of every file written."""
    calls, progress = recorder()
    files = write_table(store, "sales", sales(), partition_by=["region"], progress=progress)
    assert_progress(calls, files)
    assert len(calls) == 2


def test_progress_by_part(s3: S3Endpoint, store: ObjectStore) -> None:
    """A multipart file reports each part as it goes."""
    calls, progress = recorder()
    small_parts = ObjectStore(
        store.client, store.bucket, multipart_threshold=6 * MIB, part_size=5 * MIB, retry=FAST_RETRY
    )
    files = write_table(
        small_parts, "big", incompressible(rows=3, size=11 * MIB), progress=progress
    )
    assert_progress(calls, files)
    assert [d for d, _ in calls][:2] == [5 * MIB, 10 * MIB]


@pytest.mark.parametrize(
    ("fault", "operation"),
    [
        ("lost_ack", "PutObject"),
        ("lost_ack", "CompleteMultipartUpload"),
        ("conflict", "CompleteMultipartUpload"),
    ],
)
def test_progress_survives_resolution_and_restarts(
    s3: S3Endpoint, client: Any, bucket: str, fault: Any, operation: str
) -> None:
    """Lost acks and restarted uploads still end progress exactly at the total, never past."""
    threshold = 1 if operation == "CompleteMultipartUpload" else 64 * MIB
    store = ObjectStore(client, bucket, multipart_threshold=threshold, retry=FAST_RETRY)
    s3.inject(fault, operation=operation, count=1)
    calls, progress = recorder()
    files = write_table(store, "sales", sales(), progress=progress)
    assert s3.faults()["injected"] == {fault: 1}
    assert_progress(calls, files)


# -- property ---------------------------------------------------------------------------------

_examples = itertools.count()
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8) | st.sampled_from(
    ["", NULL_PARTITION, "a/b", "%", "..", " ", "=", "+"]
)
# (type, strategy of Python values, whether the type can partition)
KINDS: dict[str, tuple[Any, st.SearchStrategy[Any], bool]] = {
    "int8": (pa.int8(), st.integers(-128, 127), True),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1), True),
    "bool": (pa.bool_(), st.booleans(), True),
    "string": (pa.string(), TEXT, True),
    "large_string": (pa.large_string(), TEXT, True),
    "date32": (pa.date32(), st.dates(), True),
    "ts_ns": (pa.timestamp("ns"), st.integers(-(2**63), 2**63 - 1), True),
    "ts_us_utc": (pa.timestamp("us", "UTC"), st.integers(-(2**63), 2**63 - 1), True),
    "decimal": (
        pa.decimal128(9, 2),
        st.decimals(places=2, min_value=-(10**6), max_value=10**6),
        True,
    ),
    "dictionary": (pa.dictionary(pa.int8(), pa.string()), TEXT, True),
    "float64": (pa.float64(), st.floats(allow_nan=False), False),
    "binary": (pa.binary(), st.binary(max_size=3), False),
}
# Repeats weight the draw towards what must be accepted, so most examples reach S3.
COLUMN_NAMES = st.sampled_from(["p", "q", "année", "order date"] * 3 + ["_p", "p:q", "p/q"])
MIN_US, MAX_US = -62135596800 * 10**6, 253402300800 * 10**6 - 1  # years 0001-9999


def value_is_representable(kind: str, value: Any) -> bool:
    """An independent statement of the value rules, for the property's oracle."""
    if value is None:
        return True
    if kind in ("string", "large_string", "dictionary"):
        return value not in ("", NULL_PARTITION) and not any(
            unicodedata.category(c) == "Cc" for c in value
        )
    if kind == "ts_us_utc":
        return MIN_US <= value <= MAX_US
    return True  # ns timestamps always fall in 1677-2262


@st.composite
def partitioned_tables(draw: st.DrawFn) -> tuple[pa.Table, list[str], bool]:
    """A table with 1-2 partition columns of any kind, values with nulls, and whether it
    must be accepted."""
    rows = draw(st.integers(0, 6))
    names = draw(st.lists(COLUMN_NAMES, min_size=1, max_size=2, unique=True))
    kinds = [
        draw(st.sampled_from([k for k in sorted(KINDS) for _ in range(1 + 3 * KINDS[k][2])]))
        for _ in names
    ]
    columns: dict[str, pa.Array] = {"id": pa.array(range(rows), pa.int64())}
    valid = True
    for name, kind in zip(names, kinds, strict=True):
        type_, values, partitionable = KINDS[kind]
        pool = draw(st.lists(values | st.none(), min_size=1, max_size=3))
        column = [draw(st.sampled_from(pool)) for _ in range(rows)]
        if kind == "dictionary":
            columns[name] = pa.array(column, pa.string()).dictionary_encode().cast(type_)
        else:
            columns[name] = pa.array(column, type_)
        valid &= partitionable and name[0] != "_" and not set(name) & set(":/")
        valid &= all(value_is_representable(kind, v) for v in column)
    return pa.table(columns), names, valid


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=partitioned_tables())
def test_any_table_round_trips_or_is_refused(
    store: ObjectStore, case: tuple[pa.Table, list[str], bool]
) -> None:
    """Any partitioned table reads back exactly, or is InvalidNameError when an oracle says so."""
    table, partition_by, valid = case
    dataset = f"prop{next(_examples)}"
    try:
        files = write_table(store, dataset, table, partition_by=partition_by)
    except InvalidNameError:
        event("refused")
        assert not valid
        assert objects(store, f"datasets/{dataset}/") == []
        return
    event(f"accepted, {'no' if not files else 'some'} files")
    assert valid
    assert sorted(objects(store, f"datasets/{dataset}/")) == sorted(f.key for f in files)
    distinct = comparable(table).group_by(partition_by).aggregate([]).num_rows
    assert len(files) == distinct
    assert sum(f.record_count for f in files) == table.num_rows
    for schema in (table.schema, None) if files else (table.schema,):
        back = read_files(store, files, schema=schema, partition_by=partition_by)
        assert back.schema.equals(table.schema, check_metadata=True)
        assert comparable(back).equals(comparable(table))
