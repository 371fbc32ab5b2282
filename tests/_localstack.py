"""LocalStack's S3, an independent S3 implementation, for the opt-in ``localstack`` tests
(``python -m pytest -m localstack``).

The ``localstack`` fixture runs ``scripts/localstack.sh`` (a Python >= 3.12 virtual
environment with LocalStack under ``~/.cache/lakelock/localstack``, built on first use, and a
self-made TLS certificate), starts LocalStack's S3 on a free port of 127.0.0.1 for the test
session and stops it afterwards. ``LAKELOCK_LOCALSTACK_URL`` points the tests at a LocalStack
already running instead. Where LocalStack cannot be set up or started, every test that needs it
is skipped with the reason: never a silent pass.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import boto3
import orjson
import pytest
from botocore.config import Config

from tests._support import free_port

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "localstack.sh"
URL_ENV = "LAKELOCK_LOCALSTACK_URL"
SETUP_TIMEOUT = 1800.0  # a first setup installs LocalStack from the package index
START_TIMEOUT = 180.0
#: Marks for a test (or a parameter) that runs against LocalStack: opt-in, and a timeout that
#: leaves room for the first setup.
MARKS = (pytest.mark.localstack, pytest.mark.timeout(SETUP_TIMEOUT + START_TIMEOUT + 300))

_buckets = itertools.count()


@dataclass(frozen=True)
class LocalStack:
    """A running LocalStack S3 at ``url``."""

    url: str

    def client(self, **config: Any) -> Any:
        """A boto3 client for it (path-style, LocalStack's test credentials); ``config``
        overrides botocore ``Config`` fields."""
        base = Config(
            s3={"addressing_style": "path"},
            retries={"mode": "standard", "total_max_attempts": 3},
            connect_timeout=5,
            read_timeout=60,
            max_pool_connections=64,
        )
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=base.merge(Config(**config)) if config else base,
        )

    def new_bucket(self, hint: str) -> str:
        name = f"ls-{next(_buckets)}-{os.getpid()}-{hint[:30]}".lower()
        name = "".join(c if c.isalnum() or c == "-" else "-" for c in name).strip("-")[:63]
        self.client().create_bucket(Bucket=name)
        return name


@dataclass(frozen=True)
class Target:
    """The S3 under test (the ``target`` fixture): a client and a fresh bucket."""

    name: Literal["embedded", "localstack"]
    client: Any
    bucket: str

    @property
    def localstack(self) -> bool:
        return self.name == "localstack"


@pytest.fixture(params=["embedded", pytest.param("localstack", marks=MARKS)])
def target(request: pytest.FixtureRequest) -> Target:
    """The embedded endpoint (the test's ``client`` and ``bucket``), or LocalStack's S3, a new
    bucket, with ``-m localstack``: a test of S3's behaviour runs on both."""
    if request.param == "embedded":
        return Target(
            "embedded", request.getfixturevalue("client"), request.getfixturevalue("bucket")
        )
    localstack: LocalStack = request.getfixturevalue("localstack")
    return Target("localstack", localstack.client(), localstack.new_bucket(request.node.name))


def _s3_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_localstack/health", timeout=2) as response:
            health = orjson.loads(response.read())
    except (OSError, urllib.error.URLError, orjson.JSONDecodeError):
        return False
    return health.get("services", {}).get("s3") in {"available", "running"}


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


@pytest.fixture(scope="session")
def localstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """LocalStack's S3 for this test session (see the module docstring)."""
    given = os.environ.get(URL_ENV)
    if given:
        if not _s3_ready(given):
            pytest.skip(f"{URL_ENV}={given}: no LocalStack S3 answers there")
        yield LocalStack(given.rstrip("/"))
        return
    missing = [tool for tool in ("bash", "openssl") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"LocalStack cannot be set up here: {', '.join(missing)} not found")
    logs = tmp_path_factory.mktemp("localstack")
    setup_log = logs / "setup.log"
    with setup_log.open("w") as out:
        try:
            setup = subprocess.run(
                ["bash", str(SCRIPT), "setup"],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=SETUP_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"LocalStack setup took over {SETUP_TIMEOUT:.0f} s (log: {setup_log})")
    if setup.returncode != 0:
        pytest.skip(
            f"LocalStack could not be set up (scripts/localstack.sh setup exited "
            f"{setup.returncode}): {_tail(setup_log)}"
        )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    run_log = logs / "localstack.log"
    with run_log.open("w") as out:
        process = subprocess.Popen(
            ["bash", str(SCRIPT), "run", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped whole below
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _s3_ready(url):
            if process.poll() is not None:
                pytest.skip(
                    f"LocalStack exited ({process.returncode}) before serving S3: {_tail(run_log)}"
                )
            if time.monotonic() > deadline:
                pytest.skip(
                    f"LocalStack did not serve S3 within {START_TIMEOUT:.0f} s: {_tail(run_log)}"
                )
            time.sleep(0.25)  # waiting for a start that is under way, bounded above
        yield LocalStack(url)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
