"""Adversarial tests of Spark writing the lake through ``lakelock catalog`` (opt-in: ``python
-m pytest -m spark``; see tests/_spark.py), with what Spark users type beyond the README's
CREATE, INSERT, INSERT OVERWRITE and DELETE: each statement either is one lakelock version
that lakelock, Spark and pyiceberg read alike, or is refused with a 400 naming what, nothing
committed (README, "Spark"; docs/ARCHITECTURE.md, "The Iceberg REST catalog"). One Spark
session runs every statement: Spark is slow to start."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._catalog import CatalogServer
from tests._spark import Spark, spark_test
from tests._support.catalog import ENGINE, TOKEN, engine, serving


@pytest.fixture
def lake_prefix() -> str:
    """The ``lake`` fixture lives under a prefix of the test bucket."""
    return "lake"


@pytest.fixture
def catalog_server(lake: Lake) -> Iterator[CatalogServer]:
    """``lakelock catalog`` over ``lake`` (namespace ``lake``, a token), in this process."""
    with serving(lake, token=TOKEN) as server:
        yield server


def same_rows(got: pa.Table, expected: pa.Table) -> bool:
    """``got`` has ``expected``'s columns and, cast to its types, its rows (in any order)."""
    if sorted(got.column_names) != sorted(expected.column_names):
        return False
    cast = got.select(expected.column_names).cast(expected.schema)
    return sorted(map(repr, cast.to_pylist())) == sorted(map(repr, expected.to_pylist()))


@spark_test
def test_what_spark_users_type_is_one_version_read_alike_or_refused_unwritten(
    spark: Spark, lake: Lake, catalog_server: CatalogServer
) -> None:
    """Identity partitions on two columns with nulls in both, decimals, timestamps with and
    without zone, nested columns; UPDATE, MERGE INTO (with NOT MATCHED BY SOURCE), a DELETE
    touching part of a file (copy-on-write), ADD COLUMN, SET and UNSET TBLPROPERTIES and
    ``rewrite_data_files`` each commit one version every reader reads alike. Partition
    transforms, a renamed, dropped or retyped column, a sort order, a partition field added,
    ``rollback_to_snapshot`` and ``expire_snapshots`` are each a 400 naming what, and the
    registry does not move. A column whose name Avro cannot hold (``my col``), which Iceberg's
    Java writer stores as ``my_x20col``, is refused saying so; it was refused as a column "the
    table lacks", telling the user to add the column the table has."""
    catalog = spark.catalog(catalog_server.url, token=TOKEN)
    table = f"{catalog}.lake.e"
    sql = spark.session.sql
    pyiceberg = engine(catalog_server, token=TOKEN, **{"s3.endpoint": spark.s3_url, **ENGINE})

    def read_alike(statement: str) -> None:
        expected = lake.read("e")
        assert same_rows(sql(f"SELECT * FROM {table}").toArrow(), expected), statement
        assert same_rows(pyiceberg.load_table("lake.e").scan().to_arrow(), expected), statement

    sql(
        f"CREATE TABLE {table} (id BIGINT, a STRING, b INT, n INT, amount DECIMAL(10,2), "
        "ts TIMESTAMP, ntz TIMESTAMP_NTZ, st STRUCT<x: INT, y: STRING>, li ARRAY<INT>, "
        "mp MAP<STRING, INT>) USING iceberg PARTITIONED BY (a, b)"
    )
    committing = [
        f"INSERT INTO {table} VALUES (1, 'x', 1, 10, 1.25, TIMESTAMP'2024-01-01 10:00:00', "
        "TIMESTAMP_NTZ'2024-01-01 10:00:00', named_struct('x', 1, 'y', 'a'), array(1, 2), "
        "map('k', 1)), (2, 'x', 1, 20, 2.50, NULL, NULL, NULL, NULL, NULL), "
        "(3, NULL, NULL, 30, NULL, NULL, NULL, NULL, NULL, NULL), "
        "(4, 'y', 2, 40, 4.00, NULL, NULL, NULL, NULL, NULL), "
        "(5, 'y', 2, 50, 5.00, NULL, NULL, NULL, NULL, NULL)",
        f"UPDATE {table} SET n = n + 1 WHERE id = 1",
        f"MERGE INTO {table} AS t USING (SELECT 2 AS id, 99 AS n UNION ALL SELECT 6, 60) AS s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.n = s.n WHEN NOT MATCHED THEN "
        "INSERT (id, a, b, n) VALUES (s.id, 'z', 3, s.n)",
        f"MERGE INTO {table} AS t USING (SELECT 1 AS id) AS s ON t.id = s.id WHEN MATCHED "
        "THEN UPDATE SET t.n = 7 WHEN NOT MATCHED BY SOURCE AND t.id = 4 THEN DELETE",
        f"DELETE FROM {table} WHERE id = 5",
        f"DELETE FROM {table} WHERE a IS NULL",
        f"ALTER TABLE {table} ADD COLUMN extra STRING",
        f"INSERT INTO {table} VALUES (7, 'y', 2, 70, NULL, NULL, NULL, NULL, NULL, NULL, 'e')",
        f"ALTER TABLE {table} SET TBLPROPERTIES ('team'='etl')",
    ]
    for statement in committing:
        version = lake.registry.read().version
        sql(statement).collect()
        assert lake.registry.read().version == version + 1, statement
        read_alike(statement)
    assert sorted(lake.read("e").column("id").to_pylist()) == [1, 2, 6, 7]
    assert lake.registry.read().datasets["e"].properties["team"] == "etl"
    sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ('team')").collect()
    assert "team" not in lake.registry.read().datasets["e"].properties
    version = lake.registry.read().version
    rewrite = f"CALL {catalog}.system.rewrite_data_files(table => 'lake.e', "
    (done,) = sql(rewrite + "options => map('rewrite-all', 'true'))").collect()
    assert done["rewritten_data_files_count"] > 0
    assert lake.registry.read().version == version + 1
    read_alike("rewrite_data_files")

    first = sql(f"SELECT min(snapshot_id) AS id FROM {table}.snapshots").collect()[0]["id"]
    refused = {
        f"CREATE TABLE {catalog}.lake.d (id BIGINT, ts TIMESTAMP) USING iceberg "
        "PARTITIONED BY (days(ts))": "transform day",
        f"CREATE TABLE {catalog}.lake.h (id BIGINT) USING iceberg "
        "PARTITIONED BY (bucket(4, id))": r"transform bucket\[4\]",
        f"CREATE TABLE {catalog}.lake.u (id BIGINT, s STRING) USING iceberg "
        "PARTITIONED BY (truncate(2, s))": r"transform truncate\[2\]",
        f"ALTER TABLE {table} RENAME COLUMN n TO m": "renaming column 'n' to 'm'",
        f"ALTER TABLE {table} DROP COLUMN extra": "dropping column 'extra'",
        f"ALTER TABLE {table} ALTER COLUMN n TYPE BIGINT": "changing the type of column 'n'",
        f"ALTER TABLE {table} WRITE ORDERED BY id": "sort orders are not supported",
        f"ALTER TABLE {table} ADD PARTITION FIELD n": "partition columns never change",
        f"CALL {catalog}.system.rollback_to_snapshot('lake.e', {first})": "a rollback is lakelock",
        f"CALL {catalog}.system.expire_snapshots(table => 'lake.e', older_than => "
        "TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)": "remove-snapshots",
    }
    version = lake.registry.read().version
    for statement, message in refused.items():
        assert re.search(f"BadRequestException.*{message}", failure(sql, statement)), statement
        assert lake.registry.read().version == version, statement
    read_alike("refused")

    sql(f"CREATE TABLE {catalog}.lake.sp (id BIGINT, `my col` INT) USING iceberg").collect()
    version = lake.registry.read().version
    spaced = failure(sql, f"INSERT INTO {catalog}.lake.sp VALUES (1, 5)")
    assert "stores 'my col' as 'my_x20col'" in spaced
    assert lake.registry.read().version == version
    assert lake.read("sp").num_rows == 0


def failure(sql: Any, statement: str) -> str:
    """The message of the error Spark raises running ``statement`` (it must raise)."""
    with pytest.raises(Exception) as raised:  # noqa: PT011 - py4j's error carries Java's
        sql(statement).collect()
    return str(raised.value)
