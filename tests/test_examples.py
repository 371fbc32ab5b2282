"""The examples run as documented."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from lakelock import Lake
from lakelock.testing import S3Endpoint
from tests._support import CLI_ENV

ROOT = Path(__file__).resolve().parent.parent


def test_daily_pipeline_runs_and_is_idempotent() -> None:
    """The daily pipeline stages, publishes once, and its re-run changes nothing."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "daily_pipeline.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines.count("visits now has 3 rows") == 2
    assert sum("published" in line for line in lines) == 1
    assert "(already done)" in lines[-2]


def pipeline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / "daily_pipeline.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=CLI_ENV,
    )


def test_daily_pipeline_takes_an_endpoint_url(s3: S3Endpoint, bucket: str) -> None:
    """Given a lake URL and ``--endpoint-url`` it runs against that endpoint."""
    done = pipeline(f"s3://{bucket}/lake", "--endpoint-url", s3.url)
    assert done.returncode == 0, done.stderr
    assert "visits now has 3 rows" in done.stdout
    assert Lake(bucket, prefix="lake", s3=s3.client()).read("visits").num_rows == 3


def test_daily_pipeline_without_an_endpoint_fails_in_seconds(s3: S3Endpoint) -> None:
    """Nothing listening at the endpoint: one line on stderr and exit 1, within seconds."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    started = time.monotonic()
    done = pipeline("s3://lake", "--endpoint-url", url)
    # A safety net, interpreter and pyarrow start-up included (slow on a loaded machine): the
    # registry's 60 s retry budget is what a failure that was retried would spend. How fast
    # a dead endpoint fails is pinned in process (tests/test_fail_fast.py).
    assert time.monotonic() - started < 45
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("daily_pipeline: error: ")
    assert len(done.stderr.splitlines()) == 1
    assert f"cannot connect to {url}" in done.stderr


def run_example(name: str, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.splitlines()


DUCKDB_OUTPUT = [
    "orders:",
    "  day 2: 3 orders, total 60.00",
    "  day 3: 4 orders, total 100.00",
    "orders_before:",
    "  day 1: 2 orders, total 30.00",
    "  day 2: 3 orders, total 60.00",
]


def test_duckdb_query_runs_on_its_own_endpoint() -> None:
    """The DuckDB example queries the current snapshot (day 1 pruned) and an older one."""
    assert run_example("duckdb_query.py") == DUCKDB_OUTPUT


def test_duckdb_query_against_a_served_endpoint(endpoint: S3Endpoint) -> None:
    """With --endpoint-url it runs against a running endpoint; a re-run appends nothing and
    prints the same: its "before" snapshot is the version day 2 landed at, so day 3 (from
    the first run) is not in ``orders_before``."""
    assert run_example("duckdb_query.py", "--endpoint-url", endpoint.url) == DUCKDB_OUTPUT
    assert run_example("duckdb_query.py", "--endpoint-url", endpoint.url) == DUCKDB_OUTPUT


def test_dask_job_commits_once(endpoint: S3Endpoint) -> None:
    """The Dask example writes from worker processes, commits once, and its re-run (same
    commit id) appends nothing: every click is in the lake exactly once."""
    lines = run_example("dask_job.py", "--endpoint-url", endpoint.url)
    assert lines[0].startswith("committed clicks-2024-01 at version ")
    assert lines[1:] == [
        "re-run of clicks-2024-01: already committed = True",
        "day 1: 3334 clicks",
        "day 2: 3333 clicks",
        "day 3: 3333 clicks",
    ]
