"""The embedded S3 endpoint: moto's S3 behind lakelock's gateway, on 127.0.0.1.

```python
from lakelock.testing import S3Endpoint

with S3Endpoint() as s3:                      # a thread of this process, free port
    s3.create_bucket("lake")
    client = s3.client()                      # a boto3 client for it
    s3.inject("lost_ack", operation="PutObject", prefix="metastore/", count=1)
    ...
    print(s3.stats())                         # requests per S3 operation, counted at the server
```

``S3Endpoint(mode="process")`` runs the same server in a child process (``python -m
lakelock.testing``) for tests whose clients must not share the server's interpreter: a
client that blocks in Rust or C holding the GIL (delta-rs's ``DeltaTable.history()``) stops
a server thread in its own process until it times out.
Faults, settings and counts are driven through the gateway's control API over HTTP in both
modes, so the methods below behave the same either way.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, Literal, Self

import moto.s3.models
import moto.s3.responses
import orjson
from botocore.config import Config
from moto.core.base_backend import BackendDict
from moto.moto_server.werkzeug_app import (
    BackendRequest,
    MotoRequestHandler,
    create_backend_app,
)
from moto.s3.models import S3Backend, S3BackendDict
from moto.utilities.utils import PARTITION_NAMES
from werkzeug.serving import BaseWSGIServer
from werkzeug.serving import make_server as werkzeug_server

from lakelock._client import s3_client
from lakelock.errors import InvalidArgumentError
from lakelock.testing._faults import FaultKind, FaultRule
from lakelock.testing._gateway import Gateway, Lackable
from lakelock.testing._policy_gate import BucketPolicies

__all__ = ["DEFAULT_ACCESS_KEY", "DEFAULT_SECRET_KEY", "S3Endpoint", "make_server"]

DEFAULT_ACCESS_KEY = "lakelock"
#: The secret of every access key of the endpoint's clients (``lakelock serve`` checks
#: signatures against it).
DEFAULT_SECRET_KEY = "lakelock-secret"
DEFAULT_REGION = "us-east-1"
_READY = "lakelock-endpoint-ready "
#: How long stop() waits, at most, for the connections' threads to end once their connections
#: are closed (a request in a fault's hang finishes its hang first; its thread is a daemon).
_STOP_WAIT = 10.0


def make_server(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    principals: Mapping[str, str] | None = None,
    credentials: Mapping[str, str] | None = None,
) -> tuple[BaseWSGIServer, Gateway]:
    """A ready (not yet serving) threaded WSGI server, moto's S3 behind the gateway, and the
    gateway (to set faults directly). ``principals`` maps access key ids to the principal ARN
    bucket policies see. ``credentials`` maps access key ids to their secrets: a request
    they do not sign is refused as S3 refuses it (``None``: signatures are not checked)."""
    _check_free(host, port)
    gateway = Gateway(_moto_s3(), policies=BucketPolicies(principals), credentials=credentials)
    server = werkzeug_server(host, port, gateway, threaded=True, request_handler=_QuietHandler)
    server.lakelock_connections = {}  # type: ignore[attr-defined]  # see _QuietHandler.setup
    return server, gateway


def _check_free(host: str, port: int) -> None:
    """Raise :class:`OSError` if ``host:port`` cannot be listened on: werkzeug would print
    its own message and exit the process, which a test (or the ``serve`` command) cannot
    catch as an error."""
    if port == 0:
        return
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    try:
        with socket.create_server((host, port), family=family):
            pass
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise OSError(error.errno, f"cannot listen on {host}:{port}: {reason}") from error


def _moto_s3() -> Any:
    """moto's S3 as a WSGI application with a store of its own (:class:`_OwnStore`), every
    request body reaching it whatever its Content-Type (:class:`_WholeBodyRequest`)."""
    app = create_backend_app("s3")
    app.request_class = _WholeBodyRequest
    return _OwnStore(app)


#: The store of the server whose request this thread is serving (:class:`_OwnStore`).
_SERVING = threading.local()
_INSTALL_LOCK = threading.Lock()


class _StoreServed:
    """Stands where moto keeps S3's buckets and objects (``s3_backends``: one per process)
    and hands moto the store of the server whose request the thread serves, else moto's
    own (``mock_aws`` and moto's server are left as they were)."""

    def __init__(self, default: Any) -> None:
        self._default = default

    def _store(self) -> Any:
        store = getattr(_SERVING, "store", None)
        return self._default if store is None else store

    def __getitem__(self, account_id: str) -> Any:
        return self._store()[account_id]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store(), name)

    def __iter__(self) -> Any:
        return iter(self._store())

    def __len__(self) -> int:
        return len(self._store())

    def __contains__(self, account_id: object) -> bool:
        return account_id in self._store()


def _install_store_served() -> None:
    """Put :class:`_StoreServed` where moto's S3 looks its store up, once a process."""
    with _INSTALL_LOCK:
        if isinstance(moto.s3.models.s3_backends, _StoreServed):
            return
        served = _StoreServed(moto.s3.models.s3_backends)
        # Not the package's name: moto routes requests by what it holds (its own store).
        for module in (moto.s3.models, moto.s3.responses):
            module.s3_backends = served  # type: ignore[attr-defined]


class _EndpointStore(S3BackendDict):
    """One endpoint's buckets and objects: kept off the list moto resets at the end of a
    ``mock_aws`` (the endpoint's own, gone with it)."""

    def _create_account_specific_backend(self, account_id: str) -> None:
        super()._create_account_specific_backend(account_id)
        registered: list[Any] = BackendDict._instances  # type: ignore[misc]  # moto's own list
        with _INSTALL_LOCK:
            if self in registered:
                registered.remove(self)


class _OwnStore:
    """moto's S3 application serving a store of its own: two endpoints in one process are two
    S3s (a bucket or object of one is not in the other), and an endpoint started after
    another stopped starts empty, as one in a process of its own does."""

    def __init__(self, app: Any) -> None:
        _install_store_served()
        self._app = app
        self._store = _EndpointStore(
            S3Backend, "s3", use_boto3_regions=False, additional_regions=PARTITION_NAMES
        )

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        outer = getattr(_SERVING, "store", None)
        _SERVING.store = self._store
        try:
            chunks = self._app(environ, start_response)
            try:
                return [b"".join(chunks)]  # read while this store is the thread's
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
        finally:
            _SERVING.store = outer


class _WholeBodyRequest(BackendRequest):
    """moto's request, which parses a body sent as ``application/x-www-form-urlencoded`` or
    ``multipart/form-data`` as a form and hands the S3 operation what is left of it: nothing.
    A PutObject or UploadPart with such a Content-Type then stores an empty object where S3
    stores the body and keeps the Content-Type as the object's. Only a browser upload
    (PostObject: a POST of a form to the bucket) is a form to S3."""

    @property
    def want_form_data_parsed(self) -> bool:
        path = self.environ.get("PATH_INFO", "").strip("/")
        return self.method == "POST" and "/" not in path and super().want_form_data_parsed


class _QuietHandler(MotoRequestHandler):
    """moto's handler (it keeps underscores in metadata header names), without request logs
    (they would drown test output; the gateway counts requests instead), and with keep-alive
    connections as S3 has them.

    werkzeug's server answers every request with ``Connection: close`` (each request a new
    TCP connection and a new server thread), and after each response reads whatever is left
    on the connection (with keep-alive: the next request). Here the application reads the
    body from a stream that ends where the body does (:class:`_Body`, drained after the
    response), the handler's own stream is out of werkzeug's reach while it answers, and the
    connection stays open unless the body was chunked or could not be read to its end. A
    connection idle for :attr:`timeout` seconds is closed."""

    timeout = 20
    _body: _Body | None = None
    _stream: Any = None

    def log(self, type: str, message: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Known to the server while open, for S3Endpoint.stop to close (a kept-alive
        # connection would otherwise still be answered after the endpoint stopped).
        self.server.lakelock_connections[self.connection] = threading.current_thread()  # type: ignore[attr-defined]
        # A response's head and body go out as two writes: without this, the second waits
        # for the client's delayed acknowledgement of the first (~40 ms) on a kept connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def make_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().make_environ()
        self._stream, self.rfile = self.rfile, _NO_STREAM
        if not environ.get("wsgi.input_terminated"):
            self._body = _Body(self._stream, int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = self._body
        return environ

    def run_wsgi(self) -> None:
        self._body = None
        try:
            super().run_wsgi()
        finally:
            if self._stream is not None:
                self.rfile, self._stream = self._stream, None
        if self._body is None or not self._body.drain():
            self.close_connection = True

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "connection" and self._body is not None:
            return  # keep the connection (HTTP/1.1's default)
        super().send_header(keyword, value)

    def finish(self) -> None:
        self.server.lakelock_connections.pop(self.connection, None)  # type: ignore[attr-defined]
        super().finish()


class _Body(io.RawIOBase):
    """A request body of known length, read from the connection's stream: never past its
    end (the next request's bytes), and drained to it after the response."""

    def __init__(self, stream: Any, length: int) -> None:
        super().__init__()
        self._stream = stream
        self._left = length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buffer).cast("B")[: self._left]
        data = self._stream.read(len(view))
        view[: len(data)] = data
        self._left -= len(data)
        if not data:
            self._left = -1  # the client went away mid-body
        return len(data)

    def drain(self) -> bool:
        """Read what the application left of the body; False if the connection cannot be
        reused (the body ended early)."""
        try:
            while self._left > 0 and self.read(min(self._left, 1 << 16)):
                pass
        except OSError:
            return False
        return self._left == 0


#: What werkzeug's after-response read finds on the handler: nothing.
_NO_STREAM = io.BytesIO(b"")


class S3Endpoint:
    """An S3 endpoint on localhost, for lakelock's tests and for yours. Each is a store of
    its own, empty when started (two in one process share no bucket), and :meth:`stop`
    ends it: no answer after, not even on a connection a client kept open.

    ``mode="process"`` serves it from a child process: use it where a client blocks in Rust
    or C while holding the GIL (delta-rs's ``DeltaTable.history()``, for one), which would
    stop a server thread of the same process, and the request with it, until the client's
    timeout (another ``mode`` is a ValueError). ``principals`` maps access key ids to the
    principal ARN bucket policies see; ``credentials`` maps access key ids to secrets, and
    then a request they do not sign is refused as S3 refuses it (by default signatures are
    not checked). A ``port`` something else listens on raises :class:`OSError` at
    :meth:`start`, in either mode; one that is no port (a whole number from 0, any free
    one, to 65535) is :class:`~lakelock.errors.InvalidArgumentError`."""

    def __init__(
        self,
        *,
        mode: Literal["thread", "process"] = "thread",
        port: int = 0,
        principals: Mapping[str, str] | None = None,
        credentials: Mapping[str, str] | None = None,
    ) -> None:
        if mode not in ("thread", "process"):
            raise ValueError(f"mode must be 'thread' or 'process', got {mode!r}")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise InvalidArgumentError(
                port, "a port is a whole number from 0 to 65535", what="port"
            )
        self._mode = mode
        self._port = port
        self._principals = dict(principals or {})
        self._credentials = dict(credentials) if credentials is not None else None
        self._server: BaseWSGIServer | None = None
        self._gateway: Gateway | None = None
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen[str] | None = None
        self.url = ""

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Self:
        if self.url:
            return self
        if self._mode == "thread":
            self._server, self._gateway = make_server(
                port=self._port, principals=self._principals, credentials=self._credentials
            )
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="lakelock-s3-endpoint", daemon=True
            )
            self._thread.start()
            self.url = f"http://127.0.0.1:{self._server.server_port}"
        else:
            self._start_process()
        return self

    def _start_process(self) -> None:
        _check_free("127.0.0.1", self._port)  # an OSError here, as in a thread
        command = [sys.executable, "-m", "lakelock.testing", "--port", str(self._port)]
        for access_key, arn in self._principals.items():
            command += ["--principal", f"{access_key}={arn}"]
        for access_key, secret in (self._credentials or {}).items():
            command += ["--credential", f"{access_key}={secret}"]
        self._process = subprocess.Popen(
            command, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.startswith(_READY):
            self._process.kill()
            self._process.wait()
            self._process.stdout.close()
            self._process = None
            raise RuntimeError(f"the S3 endpoint process did not start: {line!r}")
        self.url = line[len(_READY) :].strip()

    def stop(self) -> None:
        """Stop serving: nothing more is answered, not even on a connection a client keeps
        open (it is closed), and no thread of the endpoint's is left running once its
        request ends (stalled requests are let go)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._close_connections(self._server)
            self._server = None
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._process = None
        self.url = ""

    def _close_connections(self, server: BaseWSGIServer) -> None:
        """Close the connections clients keep open and wait for their threads to end."""
        if self._gateway is not None:
            self._gateway.release_stalls()
            self._gateway = None
        connections: dict[socket.socket, threading.Thread] = server.lakelock_connections  # type: ignore[attr-defined]
        open_now = list(connections.items())
        for connection, _ in open_now:
            with contextlib.suppress(OSError):  # closed by its client meanwhile
                connection.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + _STOP_WAIT
        for _, thread in open_now:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- clients ------------------------------------------------------------------------------

    def client_kwargs(self, *, access_key: str = DEFAULT_ACCESS_KEY) -> dict[str, Any]:
        """Keyword arguments for ``boto3.client("s3", ...)`` aimed at this endpoint (one
        not started is a RuntimeError saying so, not a client of no endpoint)."""
        self._check_running()
        return client_kwargs(self.url, access_key=access_key)

    def client(self, *, access_key: str = DEFAULT_ACCESS_KEY, **config: Any) -> Any:
        """A boto3 S3 client for this endpoint. ``config`` overrides botocore ``Config``
        fields (e.g. ``retries={"total_max_attempts": 1}``, ``read_timeout=2``)."""
        kwargs = self.client_kwargs(access_key=access_key)
        kwargs["config"] = kwargs["config"].merge(Config(**config)) if config else kwargs["config"]
        return s3_client(**kwargs)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    # -- control ------------------------------------------------------------------------------

    def inject(
        self,
        kind: FaultKind,
        *,
        operation: str = "*",
        prefix: str = "",
        bucket: str = "*",
        probability: float = 1.0,
        count: int | None = None,
        delay: float = 0.0,
        jitter: float = 0.0,
    ) -> None:
        """Add one fault rule (see :mod:`lakelock.testing._faults` for the kinds). A rule
        that could never fire (``count=0``, ``probability=0``, an operation no request
        bears) or an argument out of bounds is :class:`~lakelock.errors.InvalidArgumentError`,
        nothing added."""
        rule = FaultRule(kind, operation, prefix, bucket, probability, count, delay, jitter)
        self._control("POST", "faults", rule.to_json())

    def set_faults(self, rules: list[FaultRule], *, seed: int = 0) -> None:
        """Replace every fault rule and reseed the fault generator (a ``seed`` that is no
        whole number, or a rule that is no :class:`FaultRule`, is
        :class:`~lakelock.errors.InvalidArgumentError`, nothing replaced)."""
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise InvalidArgumentError(seed, "a seed is a whole number", what="fault seed")
        for rule in rules:
            if not isinstance(rule, FaultRule):
                raise InvalidArgumentError(rule, "not a FaultRule", what="fault rule")
        self._control("PUT", "faults", {"seed": seed, "rules": [r.to_json() for r in rules]})

    def clear_faults(self) -> None:
        self._control("DELETE", "faults")

    def faults(self) -> dict[str, Any]:
        """The rules, the seed and how many faults of each kind were injected so far."""
        result: dict[str, Any] = self._control("GET", "faults")
        return result

    def configure(
        self,
        *,
        concurrent_conflicts: bool = False,
        lacking: Mapping[Lackable, Literal["ignore", "refuse"]] | None = None,
    ) -> None:
        """Replace the endpoint's settings (each call sets all of them; the defaults are S3's
        behaviour).

        ``concurrent_conflicts``: answer 409 to a conditional write that meets another write
        to the same key in flight, as AWS does, instead of queueing it.

        ``lacking``: act as a store without these conditional features, to test what a client
        does on such a store: ``"ignore"`` applies the request as if the condition were not
        there (what a store that does not know the header does), ``"refuse"`` answers 501
        NotImplemented. Features: ``"delete-objects-etag"`` (per-key ETag and Size of
        DeleteObjects), ``"delete-if-match"`` (If-Match and x-amz-if-match-size on
        DeleteObject), ``"copy-source-conditions"`` (x-amz-copy-source-if-* of CopyObject and
        UploadPartCopy), ``"list-start-after"`` (StartAfter of ListObjectsV2: ignored, every
        listing starts at its prefix, as on a store without it)."""
        self._control(
            "PUT",
            "settings",
            {"concurrent_conflicts": concurrent_conflicts, "lacking": dict(lacking or {})},
        )

    def stalled(self) -> int:
        """How many requests ``stall`` faults are holding right now. A request let go by
        :meth:`release_stalls` still counts until its thread has woken, so just after a
        release this may be the request let go: tell stalls apart by how many have struck
        (``faults()["injected"]["stall"]``)."""
        return int(self._control("GET", "stalls")["stalled"])

    def release_stalls(self) -> None:
        """Let every stalled request go on."""
        self._control("DELETE", "stalls")

    def stats(self) -> dict[str, int]:
        """Requests received per S3 operation since start or the last :meth:`reset_stats`."""
        result: dict[str, int] = self._control("GET", "stats")
        return result

    def areas(self) -> dict[str, int]:
        """Requests received per S3 operation and part of the lake's layout, as
        ``{"GetObject root": 3, "PutObject metastore/intents": 2, "PutObject datasets": 2,
        "ListObjectsV2 metastore/intents": 1, ...}``, since start or the last
        :meth:`reset_stats`: where a protocol's requests go."""
        result: dict[str, int] = self._control("GET", "areas")
        return result

    def refused(self) -> dict[str, int]:
        """Answers other than 2xx per S3 operation, part of the lake's layout and status, as
        ``{"PutObject root 412": 15, "PutObject root 503": 2, ...}``, since start or the last
        :meth:`reset_stats`: the compare-and-swaps a protocol lost, its conflicts and
        throttles."""
        result: dict[str, int] = self._control("GET", "refused")
        return result

    def traffic(self) -> dict[str, int]:
        """Body bytes the endpoint received (``in``) and sent (``out``) since start or the
        last :meth:`reset_stats`: what requests moved, as the server counts it."""
        result: dict[str, int] = self._control("GET", "traffic")
        return result

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the process serving this endpoint has used so far: the
        endpoint's own with ``mode="process"``, the whole process's otherwise. Benchmarks
        take the difference over a run, to tell what the server cost from what the clients
        did."""
        result: dict[str, float] = self._control("GET", "cpu")
        return result["seconds"]

    def reset_stats(self) -> None:
        self._control("DELETE", "stats")

    def _check_running(self) -> None:
        if not self.url:
            raise RuntimeError("the endpoint is not running; call start() or use `with`")

    def _control(self, method: str, command: str, payload: object = None) -> Any:
        self._check_running()
        data = orjson.dumps(payload) if payload is not None else None
        request = urllib.request.Request(
            f"{self.url}/_lakelock/{command}", data=data, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return orjson.loads(response.read())
        except urllib.error.HTTPError as error:
            raise ValueError(f"endpoint control {method} {command}: {error.read()!r}") from error


def client_kwargs(url: str, *, access_key: str = DEFAULT_ACCESS_KEY) -> dict[str, Any]:
    """boto3 client arguments for an embedded endpoint at ``url`` (path-style, fixed region,
    ``access_key`` with :data:`DEFAULT_SECRET_KEY`: what ``lakelock serve`` checks
    signatures against; an :class:`S3Endpoint` does not check them)."""
    return {
        "endpoint_url": url,
        "region_name": DEFAULT_REGION,
        "aws_access_key_id": access_key,
        "aws_secret_access_key": DEFAULT_SECRET_KEY,
        "config": Config(
            s3={"addressing_style": "path"},
            retries={"mode": "standard", "total_max_attempts": 3},
            connect_timeout=5,
            read_timeout=30,
            max_pool_connections=64,
        ),
    }
