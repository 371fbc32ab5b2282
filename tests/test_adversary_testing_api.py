"""Adversarial tests of ``lakelock.testing.S3Endpoint`` as a user's own test fixture (README,
"Testing your pipelines"): two endpoints in one process, one stopped while a client still
talks to it, an argument of the wrong type, a body fault where an answer has no body. A user's
test must get two stores where it made two, silence from an endpoint it stopped, a typed
refusal for what it cannot mean, and a fault counted only where it struck."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

from lakelock.errors import InvalidArgumentError
from lakelock.testing import FaultRule, S3Endpoint
from lakelock.testing import _endpoint as endpoint_module

pytestmark = pytest.mark.unguarded  # raw writes of a test, anywhere in the bucket


def one_try(s3: S3Endpoint, **config: Any) -> Any:
    """A client that sends each request once: a failure is the client's error."""
    return s3.client(retries={"mode": "standard", "total_max_attempts": 1}, **config)


def test_two_endpoints_in_one_process_are_two_stores() -> None:
    """Two endpoints at once are two S3s: a bucket or object of one is not in the other (moto
    keeps one store a process: the second endpoint served the first one's objects)."""
    with S3Endpoint() as first, S3Endpoint() as second:
        first.create_bucket("lake")
        first.client().put_object(Bucket="lake", Key="k", Body=b"first's")
        with pytest.raises(ClientError) as missing:
            second.client().get_object(Bucket="lake", Key="k")
        assert missing.value.response["Error"]["Code"] == "NoSuchBucket"
        second.create_bucket("lake")
        second.client().put_object(Bucket="lake", Key="k", Body=b"second's")
        assert first.client().get_object(Bucket="lake", Key="k")["Body"].read() == b"first's"


def test_an_endpoint_started_after_another_stopped_starts_empty() -> None:
    """What one endpoint stored is gone with it: the next starts with no bucket, as an
    endpoint in a process of its own does (a test's leftovers were another test's data)."""
    with S3Endpoint() as before:
        before.create_bucket("leftover")
    with S3Endpoint() as after:
        assert after.client().list_buckets()["Buckets"] == []


def test_a_stopped_endpoint_answers_no_client_even_on_a_kept_connection() -> None:
    """stop() ends the service: a client that kept its connection open was still answered
    by the stopped endpoint, from a thread left running after it."""
    s3 = S3Endpoint().start()
    s3.create_bucket("lake")
    client = one_try(s3)
    client.put_object(Bucket="lake", Key="k", Body=b"x")
    server = s3._server
    assert server is not None
    # This endpoint's own threads (another endpoint of the same test process, say the
    # session's, serves on threads named alike).
    serving = set(server.lakelock_connections.values())  # type: ignore[attr-defined]
    assert serving  # the client's connection, kept open
    s3.stop()
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):  # no answer
        client.get_object(Bucket="lake", Key="k")
    assert not any(t.is_alive() for t in serving)


def test_a_stalled_request_is_let_go_when_its_endpoint_stops() -> None:
    """A request a ``stall`` holds does not keep a thread of a stopped endpoint waiting for
    a release no one can send any more."""
    s3 = S3Endpoint().start()
    s3.create_bucket("lake")
    s3.inject("stall", operation="GetObject", count=1)
    client = one_try(s3, read_timeout=60)
    failures: list[BaseException] = []

    def read() -> None:
        try:
            client.get_object(Bucket="lake", Key="none")
        except Exception as error:
            failures.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    while s3.stalled() == 0:
        threading.Event().wait(0.01)  # the request reaching the stall, not time passing
    s3.stop()
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert failures  # answered NoSuchKey once let go, or cut off by the stop


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({"kind": "slowdown", "prefix": 5}, "prefix"),
        ({"kind": "slowdown", "bucket": None}, "bucket"),
        ({"kind": "slowdown", "operation": None}, "operation"),
        ({"kind": ["slowdown"]}, "kind"),
        ({"kind": "latency"}, "delay"),  # a latency of nothing delays nothing
    ],
)
def test_a_fault_argument_of_the_wrong_type_is_refused_typed_and_nothing_added(
    s3: S3Endpoint, bucket: str, arguments: dict[str, Any], argument: str
) -> None:
    """A prefix or bucket that is no string was accepted, then broke every request the
    endpoint served (a traceback at the server, a 500 at the client); an operation or kind
    of another type was a bare TypeError."""
    with pytest.raises(InvalidArgumentError, match=argument):
        s3.inject(**arguments)
    assert s3.faults()["rules"] == []
    one_try(s3).put_object(Bucket=bucket, Key="k", Body=b"x")


def test_a_seed_or_rule_set_faults_cannot_use_is_refused_typed(s3: S3Endpoint) -> None:
    with pytest.raises(InvalidArgumentError, match="seed"):
        s3.set_faults([FaultRule("error", count=1)], seed="7")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="rule"):
        s3.set_faults([{"kind": "error"}])  # type: ignore[list-item]
    assert s3.faults()["rules"] == []


@pytest.mark.parametrize(
    ("kind", "operation"),
    [("truncate", "PutObject"), ("truncate", "HeadObject"), ("corrupt", "HeadObject")],
)
def test_a_body_fault_with_no_body_to_spoil_is_kept_for_one_it_can(
    s3: S3Endpoint, bucket: str, kind: Any, operation: str
) -> None:
    """``count=1`` of a body fault is one answer spoilt: one with no body (a HEAD's, a PUT's
    to cut short) was counted as injected and spent, the request answered as if nothing
    struck, so a test of a pipeline's handling of it passed without it."""
    client = one_try(s3)
    client.put_object(Bucket=bucket, Key="k", Body=b"payload")
    s3.inject(kind, operation=operation, prefix="k", count=1)
    if operation == "PutObject":
        client.put_object(Bucket=bucket, Key="k", Body=b"payload")
    else:
        client.head_object(Bucket=bucket, Key="k")
    assert s3.faults()["injected"] == {}
    assert s3.faults()["rules"][0]["kind"] == kind  # kept, unspent


@pytest.mark.parametrize("port", [-1, 70_000, "9000", 1.5, True])
def test_a_port_that_is_no_port_is_refused_typed_in_either_mode(port: Any) -> None:
    """A port out of range or of another type was a different untyped error in each mode (a
    gaierror, an OverflowError, a TypeError; "9000" served in a child process but not in a
    thread; True listened on port 1), or a child process that died unexplained."""
    for mode in ("thread", "process"):
        with pytest.raises(InvalidArgumentError, match="port"):
            S3Endpoint(port=port, mode=mode)  # type: ignore[arg-type]


def test_a_busy_port_is_an_os_error_in_a_child_process_as_in_a_thread() -> None:
    """The docstring's promise, for ``mode="process"`` too: it was a RuntimeError saying the
    process "did not start: ''", the child's traceback on the test's stderr."""
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        for mode in ("thread", "process"):
            endpoint = S3Endpoint(port=port, mode=mode)  # type: ignore[arg-type]
            with pytest.raises(OSError, match="cannot listen"):
                endpoint.start()
            assert endpoint.url == ""


def test_a_stop_under_hanging_requests_waits_for_them_once_not_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """stop() waits a bounded time for the threads of requests still in a ``timeout``
    fault's hang: one deadline for all of them (each waited the whole bound in turn)."""
    monkeypatch.setattr(endpoint_module, "_STOP_WAIT", 1.0)
    s3 = S3Endpoint().start()
    s3.create_bucket("lake")
    hanging = 4
    s3.inject("timeout", operation="GetObject", delay=8.0, count=hanging)
    readers = [
        threading.Thread(target=_read_quietly, args=(one_try(s3, read_timeout=30),), daemon=True)
        for _ in range(hanging)
    ]
    for reader in readers:
        reader.start()
    while s3.faults()["injected"].get("timeout", 0) < hanging:
        threading.Event().wait(0.01)  # every request reaching its hang, not time passing
    started = time.monotonic()
    s3.stop()
    assert time.monotonic() - started < hanging * 1.0 - 1.0  # one bound, not one each


def _read_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.get_object(Bucket="lake", Key="k")
