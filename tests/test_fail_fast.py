"""A dead endpoint, missing credentials and malformed names are reported at once, as typed
errors: refused before any request, or after a few quick connection attempts -- while a
response lost on an established connection keeps meaning "outcome unknown"."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pyarrow as pa
import pytest
from botocore.config import Config

from lakelock import Lake
from lakelock._registry import Registry
from lakelock._s3 import CONNECT_ATTEMPTS, ObjectStore
from lakelock.errors import (
    CredentialsError,
    EndpointUnreachableError,
    InvalidNameError,
    OutcomeUnknownError,
    ReadTimeoutError,
)
from lakelock.testing import S3Endpoint, client_kwargs
from tests._support import connect_pauses, free_port

#: A bound on the wall-clock time of a call that meets a dead endpoint: a safety net only
#: (measured: well under one second; how fast it fails is pinned by its attempts and the
#: pauses between them), below the registry's 60 s retry budget it must not spend.
SAFETY_NET = 30.0


def default_client(url: str) -> Any:
    """A client as Lake.from_url builds one (standard retries, 5 attempts) for ``url``."""
    kwargs = client_kwargs(url)
    kwargs.pop("config")
    lake = Lake.from_url("s3://lake", **kwargs)
    return lake.client


@pytest.fixture
def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_a_read_from_a_closed_port_fails_fast(dead_url: str, sdk_pauses: list[float]) -> None:
    """Connection refused: CONNECT_ATTEMPTS quick attempts, then EndpointUnreachableError
    naming the endpoint -- not the SDK's backoff and the registry's 60 s retry budget."""
    lake = Lake("lake", s3=default_client(dead_url))
    started = time.monotonic()
    with pytest.raises(EndpointUnreachableError) as info:
        lake.registry.read()
    assert time.monotonic() - started < SAFETY_NET
    assert sdk_pauses == connect_pauses(CONNECT_ATTEMPTS)
    assert info.value.endpoint == dead_url
    assert info.value.operation == "GetObject"
    assert isinstance(info.value, ConnectionError)
    assert lake.store.stats.snapshot() == {"GetObject": CONNECT_ATTEMPTS}


def test_every_lake_entry_point_fails_fast_on_a_closed_port(
    dead_url: str, sdk_pauses: list[float]
) -> None:
    """append, read, vacuum, lock and lease acquisition all report the dead endpoint fast:
    after CONNECT_ATTEMPTS quick attempts at their first request, never retried."""
    lake = Lake("lake", s3=default_client(dead_url))
    table = pa.table({"id": [1]})
    calls: dict[str, Callable[[], object]] = {
        "append": lambda: lake.append("sales", table),
        "append with commit id": lambda: lake.append("sales", table, commit_id="x"),
        "read": lambda: lake.read("sales"),
        "vacuum": lambda: lake.vacuum(enforce_retention=False, older_than="1h"),
        "lock": lambda: lake.lock(write=["/sales"], timeout=1).acquire(),
        "lease": lambda: lake.lease("leader").try_acquire(),
    }
    for name, call in calls.items():
        sdk_pauses.clear()
        before = lake.store.stats.snapshot()
        started = time.monotonic()
        with pytest.raises(EndpointUnreachableError):
            call()
        assert time.monotonic() - started < SAFETY_NET, name
        after = lake.store.stats.snapshot()
        sent = {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}
        assert list(sent.values()) == [CONNECT_ATTEMPTS], (name, sent)
        assert sdk_pauses == connect_pauses(CONNECT_ATTEMPTS), name


def test_a_write_to_a_closed_port_was_not_sent(dead_url: str) -> None:
    """A conditional PUT whose connection was never made is EndpointUnreachableError (nothing
    applied), not an unknown outcome that needs a read-back."""
    store = ObjectStore(default_client(dead_url), "lake")
    with pytest.raises(EndpointUnreachableError):
        store.put("metastore/x", b"{}", mode="create")
    assert store.stats.snapshot() == {"PutObject": CONNECT_ATTEMPTS}  # no HeadObject


def test_https_spoken_to_a_plain_http_port_fails_fast(
    endpoint: S3Endpoint, sdk_pauses: list[float]
) -> None:
    """TLS to an http endpoint fails its handshake: EndpointUnreachableError, at once."""
    url = endpoint.url.replace("http://", "https://")
    lake = Lake("lake", s3=default_client(url))
    started = time.monotonic()
    with pytest.raises(EndpointUnreachableError):
        lake.registry.read()
    assert time.monotonic() - started < SAFETY_NET
    assert lake.store.stats.snapshot() == {"GetObject": CONNECT_ATTEMPTS}
    assert sdk_pauses == connect_pauses(CONNECT_ATTEMPTS)


@pytest.fixture
def resets_then_dies() -> Iterator[str]:
    """An endpoint that accepts one connection, reads the request, stops listening, then
    resets that connection: the first attempt reached a server, later ones are refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        connection.recv(65536)
        listener.close()  # before the reset: every retry is refused
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    thread.join(timeout=10)
    listener.close()


def test_a_lost_response_keeps_its_meaning_when_the_endpoint_then_dies(
    resets_then_dies: str,
) -> None:
    """A read whose first attempt reached the server (then the connection dropped) and whose
    retries were refused is OutcomeUnknownError, not "never sent"."""
    store = ObjectStore(default_client(resets_then_dies), "lake")
    with pytest.raises(OutcomeUnknownError) as info:
        store.get("metastore/dataset_registry.json")
    assert not isinstance(info.value, EndpointUnreachableError)


def test_a_write_whose_response_was_lost_stays_unknown(resets_then_dies: str) -> None:
    """A create-only PUT that reached the server before the endpoint died may have landed:
    the read-back cannot settle it, so the outcome is unknown (never "not sent")."""
    store = ObjectStore(default_client(resets_then_dies), "lake")
    with pytest.raises(OutcomeUnknownError) as info:
        store.put("datasets/sales/a.parquet", b"x", mode="create")
    assert "read-back failed" in str(info.value)


def test_resets_on_a_live_endpoint_are_still_retried(s3: S3Endpoint, bucket: str) -> None:
    """Connection resets after the request was sent are not "unreachable": the SDK retries
    them as before and the read succeeds."""
    lake = Lake(bucket, s3=s3.client())
    s3.inject("reset", operation="GetObject", count=1)
    assert lake.registry.read().version == 0


def test_missing_credentials_are_refused_before_any_request(s3: S3Endpoint) -> None:
    """No credentials anywhere: CredentialsError at once, and the endpoint saw nothing."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    script = (
        "import sys, lakelock\n"
        "from lakelock.errors import CredentialsError\n"
        f"lake = lakelock.Lake.from_url('s3://lake', endpoint_url={s3.url!r})\n"
        "try:\n"
        "    lake.registry.read()\n"
        "except CredentialsError as error:\n"
        "    print(type(error).__name__, error.operation)\n"
    )
    s3.reset_stats()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert time.monotonic() - started < 30  # interpreter start-up and imports dominate
    assert done.stdout.split() == ["CredentialsError", "GetObject"], done.stderr
    assert s3.stats() == {}
    assert issubclass(CredentialsError, PermissionError)


@pytest.mark.parametrize(
    "bucket", ["Bad_Bucket!", "b", "UPPER", "a..b", "192.168.1.1", "-lake", "lake-", ""]
)
def test_invalid_bucket_names_are_refused_before_any_request(s3: S3Endpoint, bucket: str) -> None:
    """A bucket S3 could never have: InvalidNameError from the constructor, no request."""
    client = s3.client()
    s3.reset_stats()
    with pytest.raises(InvalidNameError) as info:
        Lake(bucket, s3=client)
    assert "bucket name" in info.value.reason
    assert s3.stats() == {}


@pytest.mark.parametrize(
    "url",
    ["s3:/lake", "s3:lake", "lake", "http://lake/x", "s3://", "s3://lake?x=1", "s3://lake//a"],
)
def test_malformed_lake_urls_are_refused(url: str) -> None:
    """from_url refuses what is not s3://bucket[/prefix] before building a client."""
    with pytest.raises(InvalidNameError):
        Lake.from_url(url)


def test_from_url_separates_lake_options_from_client_arguments(s3: S3Endpoint, bucket: str) -> None:
    """Lake options (commit_window, retention, group_commit...) go to the Lake, the rest to
    boto3: commit_window=2 keeps two commit ids."""
    lake = Lake.from_url(
        f"s3://{bucket}", commit_window=2, retention="1d", group_commit=False, **s3.client_kwargs()
    )
    settings = lake.registry.settings()
    assert (settings.commit_window, settings.retention) == (2, 86400.0)
    assert lake.registry.internals.group_commit is False
    for n in range(3):
        lake.registry.commit("sales", commit_id=f"c{n}", properties={"n": str(n)})
    assert [c.id for c in lake.registry.read().commits] == ["c1", "c2"]
    with pytest.raises(TypeError):
        Lake.from_url(f"s3://{bucket}", no_such_option=1, **s3.client_kwargs())


def test_the_client_hook_respects_a_single_attempt(dead_url: str) -> None:
    """With the SDK told to make one attempt, a dead endpoint gets exactly one."""
    kwargs = client_kwargs(dead_url)
    kwargs["config"] = kwargs["config"].merge(Config(retries={"total_max_attempts": 1}))
    store = ObjectStore(boto3.client("s3", **kwargs), "lake")
    with pytest.raises(EndpointUnreachableError):
        store.get("x")
    assert store.stats.snapshot() == {"GetObject": 1}


def test_every_way_to_open_a_lake_keeps_the_same_commit_window(
    s3: S3Endpoint, bucket: str, client: Any
) -> None:
    """Lake(...), Lake.from_url(...) and a LakeConfig opened on a worker keep the same number
    of recent commit ids in the root by default (the registry's own default)."""
    direct = Lake(bucket, s3=client)
    by_url = Lake.from_url(f"s3://{bucket}", **s3.client_kwargs())
    reopened = by_url.config.open()
    windows = {lake.registry.settings().commit_window for lake in (direct, by_url, reopened)}
    assert windows == {Registry(direct.store).settings().commit_window}


@pytest.fixture
def never_answers() -> Iterator[str]:
    """An endpoint that accepts every connection, reads the request and never answers (a
    hung proxy, a stopped process whose socket is still open)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.05)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(connection)  # kept open, never written to

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    stop.set()
    thread.join(timeout=10)
    for connection in held:
        connection.close()
    listener.close()


def test_a_read_from_an_endpoint_that_never_answers_times_out_within_its_budget(
    never_answers: str,
) -> None:
    """A read from an endpoint that accepts connections and never answers fails within the
    lake's ``read_timeout`` (default 30 s; 0.6 s here) with ReadTimeoutError, a
    TimeoutError and not an unknown outcome: it used to block 300 s (5 tries of 60 s) and
    then raise OutcomeUnknownError, which means nothing for a read. Three tries of a third
    of the budget each."""
    kwargs = client_kwargs(never_answers)
    kwargs.pop("config")
    lake = Lake.from_url("s3://lake", read_timeout=0.6, **kwargs)
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError) as info:
        lake.read("sales")
    elapsed = time.monotonic() - started
    assert isinstance(info.value, TimeoutError)
    assert not isinstance(info.value, OutcomeUnknownError)
    assert (info.value.operation, info.value.seconds) == ("GetObject", 0.6)
    assert lake.store.stats.snapshot() == {"GetObject": 3}
    assert elapsed < 0.6 + SAFETY_NET / 10
    assert Lake("lake").store.read_timeout == 30.0  # the default budget
