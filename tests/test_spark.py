"""Spark 4 over the lake (opt-in: ``python -m pytest -m spark``; see tests/_spark.py): Spark
reads the Iceberg and Delta views of every version, writes through ``lakelock catalog``, and
appends with :mod:`lakelock.spark` (executors write, the driver commits once), each checked
against what lakelock reads. One SparkSession serves every test."""

from __future__ import annotations

import http.client
import re
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import psutil
import pyarrow as pa
import pytest

import lakelock.spark
from lakelock import Lake
from lakelock._catalog import CatalogServer
from lakelock.errors import (
    AccessDeniedError,
    DatasetNotFoundError,
    InvalidNameError,
    MissingExtraError,
)
from lakelock.testing import S3Endpoint
from tests._spark import Spark, spark_test
from tests._support import FAST_RETRY, REPO, wait_until
from tests._support.catalog import TOKEN, serving
from tests._support.tables import committed_ids
from tests._support.views import events as view_events
from tests._support.views import history, rows


@pytest.fixture
def lake_prefix() -> str:
    """The ``lake`` fixture lives under a prefix of the test bucket (the views' locations
    carry it)."""
    return "lake"


@pytest.fixture
def catalog_server(lake: Lake) -> Iterator[CatalogServer]:
    """``lakelock catalog`` over ``lake`` (namespace ``lake``, a token), in this process."""
    with serving(lake, token=TOKEN) as server:
        yield server


def assert_same(got: pa.Table, expected: pa.Table, where: object) -> None:
    """``got`` has exactly lakelock's columns, and its rows (cast to lakelock's types)."""
    assert sorted(got.column_names) == sorted(expected.column_names), where
    assert rows(got, expected.schema) == rows(expected, expected.schema), where


# -- reading the views -----------------------------------------------------------------------


@spark_test
def test_spark_reads_every_version_of_the_iceberg_view(
    spark: Spark, lake: Lake, catalog_server: CatalogServer
) -> None:
    """After appends, an added column, an overwrite, a partition delete, a compaction and a
    restore, Spark reads exactly lakelock's rows at every version (by snapshot id) from the
    Iceberg view, both loaded by its metadata file's path (S3A) and through the catalog
    (S3FileIO against the endpoint, path-style): the partition column a date, the added
    column null in the files written before it."""
    versions = history(lake)
    result = lake.mirror("events", formats=("iceberg",))
    assert result.iceberg is not None
    catalog = spark.catalog(catalog_server.url, token=TOKEN)
    table = f"{catalog}.lake.events"
    snapshots = spark.session.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()
    assert sorted(row["snapshot_id"] for row in snapshots) == versions
    for version in versions:
        expected = lake.read("events", version=version)
        by_path = spark.session.read.format("iceberg").option("snapshot-id", version)
        reads = {
            "path": by_path.load(result.iceberg).toArrow(),
            "catalog": spark.session.sql(
                f"SELECT * FROM {table} VERSION AS OF {version}"
            ).toArrow(),
        }
        for how, got in reads.items():
            assert got.schema.field("day").type == pa.date32(), (how, version)
            assert_same(got, expected, (how, version))


@spark_test
def test_spark_reads_every_version_of_the_delta_view(spark: Spark, lake: Lake) -> None:
    """Spark with delta-spark reads exactly lakelock's rows at every version of the Delta
    view (``versionAsOf``, through S3A), the added column null in older files."""
    if not spark.delta:
        pytest.skip("delta-spark's jars did not resolve (scripts/spark.sh setup says why)")
    versions = history(lake)
    result = lake.mirror("events", formats=("delta",))
    assert result.delta is not None
    location = result.delta.replace("s3://", "s3a://", 1)
    for number, version in enumerate(versions):
        got = spark.session.read.format("delta").option("versionAsOf", number).load(location)
        assert_same(got.toArrow(), lake.read("events", version=version), version)


def test_catalog_answers_no_such_table_in_an_unknown_namespace(
    lake: Lake, catalog_server: CatalogServer
) -> None:
    """Loading a table of a namespace that does not exist answers 404
    ``NoSuchTableException``: Spark resolves ``catalog.lake.events.snapshots`` (the
    snapshots of a table, by id) by loading ``events.snapshots`` first and goes on to the
    metadata table only on that answer (``NoSuchNamespaceException`` failed the query).
    Runs without Spark."""
    lake.append("events", pa.table({"id": [1]}))
    host, port = catalog_server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        connection.request("GET", "/v1/namespaces/lake%1Fevents/tables/snapshots", headers=headers)
        answer = connection.getresponse()
        error = orjson.loads(answer.read())["error"]
    finally:
        connection.close()
    assert (answer.status, error["type"]) == (404, "NoSuchTableException")


# -- writing through the catalog -------------------------------------------------------------


@spark_test
def test_spark_writes_through_the_catalog(
    spark: Spark, lake: Lake, catalog_server: CatalogServer
) -> None:
    """Spark's CREATE TABLE, INSERT INTO, INSERT OVERWRITE (of the partitions it writes) and
    DELETE FROM (copy-on-write) through ``lakelock catalog`` each become a lakelock
    version; then lakelock reads the rows those statements leave, and Spark reads every
    snapshot (by id) exactly as lakelock reads the version it names."""
    catalog = spark.catalog(catalog_server.url, token=TOKEN)
    table = f"{catalog}.lake.events"
    sql = spark.session.sql
    sql(
        f"CREATE TABLE {table} (id BIGINT, name STRING, day DATE) USING iceberg "
        "PARTITIONED BY (day) TBLPROPERTIES ('write.delete.mode'='copy-on-write', "
        "'write.update.mode'='copy-on-write', 'write.merge.mode'='copy-on-write')"
    )
    values = ", ".join(f"({i}, 'n{i}', DATE'2026-01-0{1 + i // 5}')" for i in range(10))
    sql(f"INSERT INTO {table} VALUES {values}")
    sql(f"INSERT INTO {table} VALUES (10, 'n10', DATE'2026-01-02'), (11, 'n11', DATE'2026-01-02')")
    with_dynamic = "spark.sql.sources.partitionOverwriteMode"
    spark.session.conf.set(with_dynamic, "dynamic")
    try:
        sql(
            f"INSERT OVERWRITE {table} VALUES (20, 'n20', DATE'2026-01-01'), "
            "(21, 'n21', DATE'2026-01-01')"
        )
    finally:
        spark.session.conf.unset(with_dynamic)
    sql(f"DELETE FROM {table} WHERE id = 5")

    expected_ids = [6, 7, 8, 9, 10, 11, 20, 21]
    assert sorted(lake.read("events").column("id").to_pylist()) == expected_ids
    assert sorted(r["id"] for r in sql(f"SELECT id FROM {table}").collect()) == expected_ids
    history_rows = lake.history("events")
    assert len(history_rows) >= 4  # every statement that changed rows is a version
    snapshots = sql(f"SELECT snapshot_id, summary FROM {table}.snapshots").collect()
    assert len(snapshots) == len(history_rows)
    for snapshot in snapshots:
        version = int(snapshot["summary"].get("lakelock.version", snapshot["snapshot_id"]))
        got = sql(f"SELECT * FROM {table} VERSION AS OF {snapshot['snapshot_id']}").toArrow()
        assert_same(got, lake.read("events", version=version), version)


def readme_spark_blocks() -> list[str]:
    """The code blocks of the README's Spark section (```python spark: the default run,
    which needs no Java, does not run them; this module does)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n### Spark\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return re.findall(r"```python spark\n(.*?)```", section, re.S)


@spark_test
def test_readme_spark_configuration_runs(
    spark: Spark, s3: S3Endpoint, lake: Lake, catalog_server: CatalogServer
) -> None:
    """The README's Spark session configuration runs as written (the catalog's and the S3
    endpoint's addresses and the token are this test's): its INSERT commits a lakelock
    version, its read of snapshot 1 works."""
    lake.append("events", view_events(range(5), 1), partition_by=["day"])
    (block,) = readme_spark_blocks()
    code = (
        block.replace("http://127.0.0.1:8181", catalog_server.url)
        .replace("http://127.0.0.1:9000", s3.url)
        .replace('"T"', f'"{TOKEN}"')
    )
    exec(compile(code, "README.md Spark block", "exec"), {"jars": spark.jars})
    assert committed_ids(lake) == [0, 1, 2, 3, 4, 7]
    assert [h.version for h in lake.history("events")] == [2, 1]


# -- lakelock.spark ---------------------------------------------------------------------------


def events(spark: Spark, rows: int = 60, partitions: int = 4, per_day: int = 5) -> Any:
    """``rows`` events in ``partitions`` Spark partitions of consecutive ids, each partition
    with rows of every one of 3 days (``per_day`` consecutive ids a day)."""
    return spark.session.range(0, rows, numPartitions=partitions).selectExpr(
        "id",
        f"CAST(1 + (id DIV {per_day}) % 3 AS INT) AS day",
        "concat('event-', CAST(id AS STRING)) AS name",
    )


@spark_test
def test_append_writes_on_executors_and_commits_once(spark: Spark, lake: Lake) -> None:
    """Every row once, one registry version for the whole frame, one file per (Spark
    partition, day), the Spark types kept; the same commit id again commits nothing."""
    before = lake.registry.read().version
    result = lakelock.spark.append(
        lake, "events", events(spark), partition_by=["day"], commit_id="c1"
    )
    assert result.version == before + 1
    assert committed_ids(lake) == list(range(60))
    assert len(lake.registry.files("events")) == 4 * 3
    table = lake.read("events")
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("day").type == pa.int32()
    assert lake.read("events", partitions=[{"day": 2}]).num_rows == 20
    again = lakelock.spark.append(
        lake, "events", events(spark), partition_by=["day"], commit_id="c1"
    )
    assert again.already_committed
    assert len(lake.registry.files("events")) == 12


@spark_test
def test_a_rerun_split_otherwise_beside_its_first_run_in_flight_is_a_retry(
    spark: Spark, s3: S3Endpoint, lake: Lake
) -> None:
    """A job's ``lakelock.spark.append`` under ``load-7`` has its files written and its
    intent out, its swap of the root held at the endpoint; the job is re-run under
    ``load-7`` with the same rows in another number of Spark partitions. The re-run is a
    retry (its files' rows and statistics, sent back from the executors as JSON, summarise
    as the first run's do) and every row lands once. What a user loses: the re-run refused
    as other rows, and with a new id every row committed twice."""
    seed = {"id": [100], "day": pa.array([1], pa.int32()), "name": ["event-100"]}
    lake.append("events", pa.table(seed), partition_by=["day"])
    s3.inject(
        "stall", operation="PutObject", prefix="lake/metastore/dataset_registry.json", count=1
    )
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(
            lakelock.spark.append,
            lake,
            "events",
            events(spark),
            partition_by=["day"],
            commit_id="load-7",
        )
        wait_until(lambda: s3.stalled() == 1)
        try:
            rerun = lakelock.spark.append(
                Lake(lake.bucket, prefix="lake", s3=lake.client, retry=FAST_RETRY),
                "events",
                events(spark, partitions=3),
                partition_by=["day"],
                commit_id="load-7",
            )
        finally:
            s3.release_stalls()
        landed = first.result(timeout=100)
    assert committed_ids(lake) == [*range(60), 100]
    assert rerun.version >= landed.version or rerun.already_committed


def python_workers() -> list[psutil.Process]:
    """The Python workers Spark's daemon has forked for the tasks running now (not reused:
    see tests/_spark.py)."""
    daemons = [
        process
        for process in psutil.Process().children(recursive=True)
        if "pyspark.daemon" in command_line(process)
        and "pyspark.daemon" not in command_line(process.parent())
    ]
    return [
        worker
        for daemon in daemons
        for worker in daemon.children()
        if worker.status() != psutil.STATUS_ZOMBIE
    ]


def command_line(process: psutil.Process | None) -> str:
    """``process``'s command line; empty for one gone or exited (a worker of an earlier
    task, not yet reaped)."""
    try:
        return " ".join(process.cmdline()) if process is not None else ""
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return ""


@spark_test
def test_retried_task_adds_no_row_twice(spark: Spark, s3: S3Endpoint, lake: Lake) -> None:
    """The one task's first attempt writes its day=1 file and dies (its Python worker
    killed) while uploading day=2; Spark runs it again, and the one commit names only the
    second attempt's files: each row once. The dead attempt's files, including the upload
    that lands after the commit, are orphans for vacuum."""
    s3.inject("stall", operation="PutObject", prefix="lake/datasets/events/day=2/", count=1)
    frame = events(spark, rows=15, partitions=1)
    with ThreadPoolExecutor(1) as pool:
        job = pool.submit(
            lakelock.spark.append, lake, "events", frame, partition_by=["day"], commit_id="c2"
        )
        wait_until(lambda: s3.stalled() == 1)
        # The one task's worker; a worker of an earlier job may still be on its way out.
        wait_until(lambda: len(python_workers()) == 1)
        (worker,) = python_workers()
        worker.kill()
        result = job.result(timeout=100)
    s3.release_stalls()  # the dead attempt's upload now completes, after the commit
    assert not result.already_committed
    assert committed_ids(lake) == list(range(15))
    committed = {f.key for f in lake.registry.files("events")}
    assert len(committed) == 3
    listed = lake.client.list_objects_v2(Bucket=lake.bucket, Prefix="lake/datasets/")
    stored = {o["Key"].removeprefix("lake/") for o in listed["Contents"]}
    strays = stored - committed
    assert any("/day=1/" in key for key in strays), "the killed attempt wrote nothing first"
    lake.configure(vacuum_floor=0)  # no writer left: vacuum may look at objects of any age
    orphans = {
        o.key for o in lake.vacuum(enforce_retention=False, older_than=0, dry_run=True).orphans
    }
    assert strays <= orphans


@spark_test
def test_task_errors_arrive_typed_and_bad_input_fails_first(
    spark: Spark, s3: S3Endpoint, lake: Lake
) -> None:
    """A partition column the frame lacks, or something other than a Spark DataFrame, is
    refused on the driver before any task runs; a storage error in a task reaches the
    driver as the same typed error, with its fields; nothing is committed either way."""
    with pytest.raises(InvalidNameError):
        lakelock.spark.append(lake, "events", events(spark), partition_by=["month"])
    with pytest.raises(TypeError):
        lakelock.spark.append(lake, "events", [{"id": 1, "day": 1}], partition_by=["day"])
    assert list(lake.store.list("datasets/")) == []
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{lake.bucket}/lake/datasets/*",
            }
        ],
    }
    s3.client(access_key="admin").put_bucket_policy(
        Bucket=lake.bucket, Policy=orjson.dumps(policy).decode()
    )
    with pytest.raises(AccessDeniedError) as denied:
        lakelock.spark.append(lake, "events", events(spark, partitions=2), partition_by=["day"])
    assert denied.value.bucket == lake.bucket
    assert denied.value.key is not None
    with pytest.raises(DatasetNotFoundError):
        lake.read("events")


def test_missing_pyspark_names_its_extra(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pyspark installed, lakelock.spark says which extra to install (no Java, no
    Spark needed: this test runs by default)."""
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(MissingExtraError) as missing:
        lakelock.spark.append(lake, "events", object(), partition_by=["day"])
    assert missing.value.extra == "spark"
    assert "events" not in lake.registry.read().datasets
