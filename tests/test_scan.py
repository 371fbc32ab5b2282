"""lake.scan: exactly one snapshot's files, read by pyarrow, DuckDB, Polars and pandas against
the embedded endpoint, partition columns typed, partitions pruned before any request."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pickle
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import duckdb
import orjson
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakelock import Lake, LakeConfig, Scan
from lakelock._connection import Connection
from lakelock._engines import polars_storage_options, s3_secret_sql
from lakelock.errors import (
    AccessDeniedError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidNameError,
    MissingExtraError,
    StorageError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until

UTC = dt.UTC


@pytest.fixture
def lake_prefix() -> str:
    """The ``lake`` fixture lives under a prefix of the test bucket."""
    return "lake"


def sales(days: list[int], *, first_id: int = 0, per_day: int = 3) -> pa.Table:
    ids = list(range(first_id, first_id + len(days) * per_day))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "amount": pa.array([i * 1.5 for i in ids], pa.float64()),
            "day": pa.array([d for d in days for _ in range(per_day)], pa.int16()),
        }
    )


def engines(scan: Scan) -> dict[str, pa.Table]:
    """What every reader returns for ``scan``, as Arrow tables (rows in any order)."""
    con = scan.to_duckdb("t")
    results = {
        "arrow": scan.to_arrow(),
        "pyarrow_dataset": scan.to_pyarrow_dataset().to_table(columns=scan.schema.names),
        "duckdb": con.sql("SELECT * FROM t").to_arrow_table(),
        "polars": scan.to_polars().collect().to_arrow(),
        "pandas": pa.Table.from_pandas(scan.to_pandas(), preserve_index=False),
    }
    con.close()
    return results


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda row: orjson.dumps(row, default=str))


def same_rows(expected: pa.Table, results: dict[str, pa.Table]) -> None:
    """Every engine returned ``expected``'s rows (values compared after casting to its
    schema: engines spell some types their own way, e.g. DuckDB's tz ``Etc/UTC``)."""
    want = rows(expected)
    for name, table in results.items():
        assert table.column_names == expected.column_names, name
        assert rows(table.cast(expected.schema)) == want, name


def test_scan_reads_exactly_the_snapshot(lake: Lake, admin: Any) -> None:
    """Every engine reads the snapshot's committed files only: a written but uncommitted
    file, a planted object in the partition directory and later commits are invisible."""
    lake.append("sales", sales([1, 2]), partition_by=["day"])
    snapshot = lake.registry.read()
    lake.write("sales", sales([1], first_id=100), partition_by=["day"])  # never committed
    admin.put_object(
        Bucket=lake.bucket, Key="lake/datasets/sales/day=1/planted.parquet", Body=b"not parquet"
    )
    lake.append("sales", sales([3], first_id=200), partition_by=["day"])

    old = lake.scan("sales", snapshot=snapshot)
    assert {f.key for f in old.files()} == {
        f.key for f in lake.registry.files("sales", snapshot=snapshot)
    }
    same_rows(sales([1, 2]), engines(old))
    same_rows(
        pa.concat_tables([sales([1, 2]), sales([3], first_id=200)]), engines(lake.scan("sales"))
    )
    assert lake.read("sales", snapshot=snapshot).equals(old.to_arrow())


def test_partition_columns_come_back_typed(lake: Lake) -> None:
    """Partition columns of many types (escaped strings, nulls, tz-aware timestamps,
    decimals, dates, booleans) come back with the dataset's types in every engine."""
    table = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "label": pa.array(["a/b", "x y%", None, "é=?"]),
            "n": pa.array([1, -2, None, 4], pa.int16()),
            "at": pa.array(
                [dt.datetime(2024, 1, 1, 12, 30, tzinfo=UTC)] * 3 + [None],
                pa.timestamp("us", "UTC"),
            ),
            "price": pa.array(
                [Decimal("1.10"), Decimal("2.00"), None, Decimal("-3.25")], pa.decimal128(5, 2)
            ),
            "on": pa.array([dt.date(2024, 2, 29)] * 4, pa.date32()),
            "flag": pa.array([True, False, None, True]),
            "kind": pa.array(["x", "y", "x", None]).dictionary_encode(),
        }
    )
    partition_by = ["label", "n", "at", "price", "on", "flag", "kind"]
    lake.append("typed", table, partition_by=partition_by)
    scan = lake.scan("typed")
    assert scan.schema.equals(table.schema)
    results = engines(scan)
    same_rows(table, results)
    for name in ("arrow", "pyarrow_dataset"):
        assert (
            results[name].select(partition_by).schema.equals(table.select(partition_by).schema)
        ), name
    assert results["polars"].schema.field("n").type == pa.int16()
    assert pa.types.is_decimal(results["polars"].schema.field("price").type)
    con = scan.to_duckdb("typed")
    types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE typed)").fetchall())
    assert types == {
        "id": "BIGINT",
        "label": "VARCHAR",
        "n": "SMALLINT",
        "at": "TIMESTAMP WITH TIME ZONE",
        "price": "DECIMAL(5,2)",
        "on": "DATE",
        "flag": "BOOLEAN",
        "kind": "VARCHAR",
    }


def test_pruning_happens_before_any_request(lake: Lake, admin: Any) -> None:
    """``partitions=`` and partition filters drop files before any GET: the objects of the
    other partitions are deleted behind the registry's back, and no engine notices."""
    lake.append("sales", sales([1, 2, 3]), partition_by=["day"])
    gone = [f for f in lake.registry.files("sales") if f.partition_path != "day=3"]
    for f in gone:
        admin.delete_object(Bucket=lake.bucket, Key=lake.store.full_key(f.key))
    with pytest.raises(StorageError):  # the deletion is real: reading everything fails
        lake.read("sales")

    expected = sales([1, 2, 3]).filter(pc.field("day") == 3)
    by_filter = lake.scan("sales", filter=pc.field("day") == 3)
    by_range = lake.scan("sales", filter=(pc.field("day") > 2) | pc.field("day").is_null())
    by_name = lake.scan("sales", partitions=[{"day": 3}])
    for scan in (by_filter, by_range, by_name):
        assert [f.partition_path for f in scan.files()] == ["day=3"]
        same_rows(expected, engines(scan))
    assert lake.read("sales", partitions=["day=3"]).equals(by_name.to_arrow())


def test_filter_on_data_columns_filters_rows(lake: Lake, admin: Any) -> None:
    """A filter over data and partition columns prunes by its partition part and filters the
    rows in every engine; projections keep the asked columns, in order."""
    lake.append("sales", sales([1, 2, 3]), partition_by=["day"])
    for f in lake.registry.files("sales", partitions=["day=1"]):
        admin.delete_object(Bucket=lake.bucket, Key=lake.store.full_key(f.key))
    condition = (pc.field("day") >= 2) & (pc.field("amount") > 7.0)
    scan = lake.scan("sales", columns=["day", "id"], filter=condition)
    assert {f.partition_path for f in scan.files()} == {"day=2", "day=3"}
    expected = sales([1, 2, 3]).filter(condition).select(["day", "id"])
    assert expected.num_rows == 4
    same_rows(expected, engines(scan))
    # A projection without a filter reads only those columns, in the order asked.
    projected = lake.scan("sales", columns=["amount", "id"], partitions=["day=2"])
    same_rows(sales([2], first_id=3).select(["amount", "id"]), engines(projected))


def test_schema_evolution_nulls_in_every_engine(lake: Lake) -> None:
    """A column added by a later commit is null for older files, also when no file of the
    scan has it (DuckDB and Polars included)."""
    lake.append("sales", sales([1]), partition_by=["day"])
    newer = sales([2], first_id=10).append_column("note", pa.array(["x", "y", "z"]))
    lake.append("sales", newer, partition_by=["day"], schema_mode="merge")
    old_part = lake.scan("sales", partitions=["day=1"])
    assert old_part.schema.names == ["id", "amount", "day", "note"]
    same_rows(sales([1]).append_column("note", pa.nulls(3, pa.string())), engines(old_part))
    both = pa.concat_tables([sales([1]).append_column("note", pa.nulls(3, pa.string())), newer])
    same_rows(both, engines(lake.scan("sales")))


def test_empty_scans_are_typed(lake: Lake) -> None:
    """A filter no partition matches gives an empty result of the scan's schema everywhere."""
    lake.append("sales", sales([1]), partition_by=["day"])
    scan = lake.scan("sales", columns=["day", "amount"], filter=pc.field("day") == 9)
    assert scan.files() == []
    for name, table in engines(scan).items():
        assert table.num_rows == 0, name
        assert table.column_names == ["day", "amount"], name
    assert scan.to_arrow().schema.equals(pa.schema([("day", pa.int16()), ("amount", pa.float64())]))


def test_unpartitioned_dataset(lake: Lake) -> None:
    """A dataset without partition columns reads the same in every engine."""
    lake.append("plain", sales([1, 2]))
    lake.append("plain", sales([3], first_id=50))
    expected = pa.concat_tables([sales([1, 2]), sales([3], first_id=50)])
    same_rows(expected, engines(lake.scan("plain")))


def test_bad_requests_are_typed_errors(lake: Lake) -> None:
    """Unknown datasets and partitions, unknown columns and bad filters fail before any read."""
    lake.append("sales", sales([1]), partition_by=["day"])
    with pytest.raises(DatasetNotFoundError) as missing:
        lake.scan("nope")
    assert missing.value.dataset == "nope"
    with pytest.raises(DatasetNotFoundError) as no_partition:
        lake.read("sales", partitions=["day=7"])
    assert no_partition.value.partition == "day=7"
    with pytest.raises(InvalidNameError):
        lake.scan("sales", partitions=[{"month": 1}])
    with pytest.raises(InvalidNameError) as column:
        lake.scan("sales", columns=["id", "price"])
    assert column.value.value == "price"
    with pytest.raises(InvalidNameError):
        lake.scan("sales", columns=["id", "id"])
    with pytest.raises(InvalidArgumentError):
        lake.scan("sales", filter=pc.field("price") > 1)
    with pytest.raises(TypeError):
        lake.scan("sales", filter="day = 1")


def test_engines_use_the_lakes_own_identity(s3: S3Endpoint, bucket: str, client: Any) -> None:
    """The engines sign with the Lake's client credentials: a principal the bucket policy
    denies reads to is refused in every engine, the Lake's own principal is not."""
    writer = Lake(bucket, s3=client, retry=FAST_RETRY)
    writer.append("sales", sales([1]), partition_by=["day"])
    denied = "arn:aws:iam::123456789012:user/reader"
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": {"AWS": [denied]},
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/datasets/*",
            }
        ],
    }
    s3.client(access_key="admin").put_bucket_policy(
        Bucket=bucket, Policy=orjson.dumps(policy).decode()
    )
    reader = Lake(bucket, s3=s3.client(access_key="reader"), retry=FAST_RETRY)
    scan = reader.scan("sales")
    assert Connection.of(reader.client).access_key == "reader"
    with pytest.raises(AccessDeniedError):
        scan.to_arrow()
    with pytest.raises(OSError, match=r"ACCESS_DENIED|AccessDenied|403"):
        scan.to_pyarrow_dataset().to_table()
    with pytest.raises(duckdb.Error, match="403"):
        scan.to_duckdb("t").sql("SELECT * FROM t").fetchall()
    with pytest.raises(Exception, match=r"403|[Ff]orbidden|AccessDenied"):
        scan.to_polars().collect()
    same_rows(sales([1]), engines(writer.scan("sales")))


@pytest.mark.unguarded
def test_engine_settings_follow_the_client(s3: S3Endpoint) -> None:
    """Endpoint, scheme, region, addressing style and keys are read off the boto3 client."""
    connection = Connection.of(s3.client())
    host = s3.url.removeprefix("http://")
    assert (connection.host, connection.scheme, connection.region) == (host, "http", "us-east-1")
    assert connection.path_style
    assert "lakelock-secret" not in repr(connection)
    sql = s3_secret_sql(connection, "s3://b/p/")
    for part in (f"ENDPOINT '{host}'", "USE_SSL false", "URL_STYLE 'path'", "KEY_ID 'lakelock'"):
        assert part in sql
    options = polars_storage_options(connection)
    assert options["aws_endpoint_url"] == s3.url
    assert options["aws_allow_http"] == "true"
    assert options["aws_virtual_hosted_style_request"] == "false"
    aws = Connection.of(
        Lake(
            "bucket-b",
            s3=__import__("boto3").client(
                "s3", region_name="eu-west-1", aws_access_key_id="k", aws_secret_access_key="s"
            ),
        ).client
    )
    assert (aws.endpoint_url, aws.region, aws.scheme) == (None, "eu-west-1", "https")
    assert "ENDPOINT" not in s3_secret_sql(aws, "s3://bucket-b/")


def test_lake_config_reopens_the_same_lake(lake: Lake) -> None:
    """Lake.config pickles and opens a Lake on the same bucket, prefix and identity."""
    lake.append("sales", sales([1]), partition_by=["day"])
    config = pickle.loads(pickle.dumps(lake.config))
    assert isinstance(config, LakeConfig)
    again = config.open()
    assert (again.bucket, again.prefix) == (lake.bucket, lake.prefix)
    assert again.read("sales").equals(lake.read("sales"))


def test_read_fetches_files_in_parallel(s3: S3Endpoint, lake: Lake) -> None:
    """read() has several data GETs in flight at once (two are held by the endpoint until
    both have arrived), and returns the rows in file order."""
    lake.append("sales", sales([1, 2, 3]), partition_by=["day"])
    s3.inject("stall", operation="GetObject", prefix="lake/datasets/sales/", count=2)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(lake.read, "sales")
        wait_until(lambda: s3.stalled() == 2)
        s3.release_stalls()
        assert reading.result(timeout=60).equals(sales([1, 2, 3]))


def test_to_arrow_reports_progress(lake: Lake) -> None:
    """to_arrow(progress=) reaches the total bytes of the files read."""
    lake.append("sales", sales([1, 2]), partition_by=["day"])
    seen: list[tuple[int, int]] = []
    lake.scan("sales").to_arrow(progress=lambda done, total: seen.append((done, total)))
    total = sum(f.size for f in lake.registry.files("sales"))
    assert seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


@pytest.mark.parametrize(
    ("module", "extra", "call"),
    [
        ("duckdb", "duckdb", lambda scan: scan.to_duckdb("t")),
        ("polars", "polars", lambda scan: scan.to_polars()),
        ("pandas", "pandas", lambda scan: scan.to_pandas()),
    ],
)
def test_missing_engine_names_its_extra(
    lake: Lake,
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    extra: str,
    call: Callable[[Scan], Any],
) -> None:
    """An engine that cannot be imported is a MissingExtraError (an ImportError) naming the
    extra that installs it."""
    lake.append("sales", sales([1]), partition_by=["day"])
    scan = lake.scan("sales")
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError) as missing:
        call(scan)
    assert isinstance(missing.value, ImportError)
    assert (missing.value.extra, missing.value.package) == (extra, module)


def test_to_duckdb_uses_a_given_connection(lake: Lake) -> None:
    """to_duckdb adds its view to the caller's connection (its settings untouched) and
    returns it; a connection it opens itself gets threads for remote reads."""
    lake.append("sales", sales([1, 2]), partition_by=["day"])
    con = duckdb.connect()
    con.execute("SET threads = 1")
    assert lake.scan("sales").to_duckdb("sales", connection=con) is con
    assert con.execute("SELECT current_setting('threads')").fetchone() == (1,)
    own = lake.scan("sales").to_duckdb("sales")
    assert own.execute("SELECT current_setting('threads')").fetchone()[0] >= 8
    assert con.sql("SELECT day, count(*) FROM sales GROUP BY day ORDER BY day").fetchall() == [
        (1, 3),
        (2, 3),
    ]
    frame = lake.scan("sales").to_polars().group_by("day").agg(pl.len()).sort("day").collect()
    assert frame.rows() == [(1, 3), (2, 3)]
    assert isinstance(lake.scan("sales").to_pandas(), pd.DataFrame)


def test_dataset_committed_without_a_schema(lake: Lake) -> None:
    """Files committed with no declared schema, and none known (registered from elsewhere:
    a ``DataFile`` without ``schema``), read back with the schema they record, in every
    engine."""
    written = [dataclasses.replace(f, schema=None) for f in lake.write("raw", sales([1, 2]))]
    lake.registry.commit("raw", add=written)
    assert lake.registry.read().datasets["raw"].schema is None
    scan = lake.scan("raw")
    assert scan.schema.equals(sales([1]).schema)
    same_rows(sales([1, 2]), engines(scan))
    same_rows(sales([1, 2]).select(["id"]), engines(lake.scan("raw", columns=["id"])))
