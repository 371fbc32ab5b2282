"""Spark 4 for the opt-in ``spark`` tests (``python -m pytest -m spark``).

The ``spark`` fixture runs ``scripts/spark.sh`` (pyspark installed where it is missing, a Java
17 or 21 found, the jars fetched with Maven into ``~/.cache/lakelock/spark``) and starts one
local SparkSession for the test session (the JVM's start is the slow part), aimed at the
embedded S3 endpoint: Iceberg catalogs are added to it per test (:meth:`Spark.catalog`),
``s3://`` and ``s3a://`` paths go through hadoop-aws's S3A to the endpoint (Delta tables,
Iceberg tables loaded by path). Where Spark cannot be set up, every test that needs it is
skipped with the reason: never a silent pass.

The session runs tasks on two threads and gives each task two attempts
(``local[2,2]``), as a cluster retries a failed task; its Python workers are not reused, so
the workers alive while a task is held are that task's own.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lakelock.testing import DEFAULT_ACCESS_KEY, S3Endpoint
from tests._support.views import SECRET

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "spark.sh"
SETUP_TIMEOUT = 1800.0  # a first setup installs pyspark and fetches the jars
#: Marks for a test that needs Spark: opt-in, a timeout that leaves room for the setup, and
#: py4j's sockets to the JVM left for the garbage collector to close, as py4j does.
MARKS = (
    pytest.mark.spark,
    pytest.mark.timeout(SETUP_TIMEOUT + 300),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
)

_catalogs = itertools.count()


def spark_test(function: Any) -> Any:
    """Mark a test as one that needs Spark (:data:`MARKS`)."""
    for mark in MARKS:
        function = mark(function)
    return function


@dataclass(frozen=True)
class Spark:
    """The test session's SparkSession, and whether Delta's jars are on it."""

    session: Any
    delta: bool
    s3_url: str
    #: The jars the session was started with (comma-separated, for ``spark.jars``).
    jars: str

    def catalog(self, uri: str, *, token: str | None = None) -> str:
        """A new Iceberg REST catalog of the session, at ``uri``, reading and writing through
        S3FileIO to the embedded endpoint (path-style; the test credentials); its name."""
        name = f"lakelock_{next(_catalogs)}"
        options = {
            "": "org.apache.iceberg.spark.SparkCatalog",
            ".type": "rest",
            ".uri": uri,
            ".io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            ".s3.endpoint": self.s3_url,
            ".s3.path-style-access": "true",
            ".s3.access-key-id": DEFAULT_ACCESS_KEY,
            ".s3.secret-access-key": SECRET,
            ".client.region": "us-east-1",
            ".cache-enabled": "false",
        }
        if token is not None:
            options[".token"] = token
        for key, value in options.items():
            self.session.conf.set(f"spark.sql.catalog.{name}{key}", value)
        return name


def _script(command: str, log: Path) -> str:
    """``scripts/spark.sh command``'s output; skips the test, with the log's end, if it
    fails."""
    with log.open("a") as err:
        try:
            done = subprocess.run(
                ["bash", str(SCRIPT), command],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                timeout=SETUP_TIMEOUT,
                env={**os.environ, "PYTHON": sys.executable},
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"Spark setup took over {SETUP_TIMEOUT:.0f} s (log: {log})")
    if done.returncode != 0:
        tail = " | ".join(log.read_text().strip().splitlines()[-5:])
        pytest.skip(f"Spark cannot be set up here (scripts/spark.sh {command}): {tail}")
    return done.stdout.strip()


@pytest.fixture(scope="session")
def spark(endpoint: S3Endpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spark]:
    """The one SparkSession of the test session (see the module docstring)."""
    missing = [tool for tool in ("bash",) if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"Spark cannot be set up here: {', '.join(missing)} not found")
    log = tmp_path_factory.mktemp("spark") / "setup.log"
    jars = _script("jars", log).split(",")
    java_home = _script("java-home", log)
    from pyspark.sql import SparkSession

    delta = any(Path(jar).name.startswith("delta-spark") for jar in jars)
    extensions = ["org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"]
    if delta:
        extensions.append("io.delta.sql.DeltaSparkSessionExtension")
    s3a = {
        "endpoint": endpoint.url,
        "endpoint.region": "us-east-1",
        "path.style.access": "true",
        "connection.ssl.enabled": "false",
        "access.key": DEFAULT_ACCESS_KEY,
        "secret.key": SECRET,
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    config = {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": ",".join(extensions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        # Two cores, small tables: one shuffle partition, not Spark's 200 (Delta's 50).
        "spark.sql.shuffle.partitions": "1",
        "spark.databricks.delta.snapshotPartitions": "1",
        "spark.python.worker.reuse": "false",
        "spark.pyspark.python": sys.executable,
        # s3:// (the views' own locations) through S3A, as s3a:// is.
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        **{f"spark.hadoop.fs.s3a.{key}": value for key, value in s3a.items()},
    }
    if delta:
        config["spark.sql.catalog.spark_catalog"] = (
            "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
    builder = SparkSession.builder.master("local[2,2]").appName("lakelock-tests")
    for key, value in config.items():
        builder = builder.config(key, value)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAVA_HOME", java_home)  # the JVM starts here, with that Java
        patch.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # and serves on loopback only
        # The environment `lakelock serve` tells its users to export: S3FileIO's default
        # credentials, as a user's session finds them (the README's configuration names none).
        patch.setenv("AWS_ACCESS_KEY_ID", DEFAULT_ACCESS_KEY)
        patch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        patch.setenv("AWS_REGION", "us-east-1")
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield Spark(session, delta, endpoint.url, ",".join(jars))
    finally:
        session.stop()
