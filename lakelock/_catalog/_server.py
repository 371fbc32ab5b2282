"""The HTTP side of the catalog: a stdlib ``ThreadingHTTPServer`` in front of a
:class:`~lakelock._catalog._service.LakeCatalog`.

Each request: route it (:func:`~lakelock._catalog._protocol.route`), check the bearer token
(every route but the OAuth2 token endpoint, when a token is configured), answer JSON. A
commit (any operation of :data:`~lakelock._catalog._protocol.WRITES`) is refused with 406 by
a read-only catalog, and, when no token is configured, with 403 to any client not on a
loopback address: without a token, only this machine may change the lake. Errors
are the spec's ``IcebergErrorResponse`` (the token endpoint's, its ``OAuthError``); a failure
inside lakelock is a 5xx with the error's one-line description (S3 unavailable: 503), never a
traceback (an unexpected one goes to the log). HTTP/1.1
keep-alive, every answer with a ``Content-Length``. A connection is closed once it has been
idle (no request, or a request's bytes stopped coming) for ``timeout`` seconds: a client that
declares a longer body than it sends holds a thread that long, never longer. It listens on
127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
import threading
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import orjson

from lakelock._catalog._protocol import (
    NAMESPACE_SEPARATOR,
    WRITES,
    CatalogError,
    Route,
    basic_secret,
    bearer_token,
    config_body,
    error_body,
    page,
    route,
    token_grant,
)
from lakelock._catalog._service import LakeCatalog
from lakelock.errors import (
    EndpointUnreachableError,
    LakelockError,
    OutcomeUnknownError,
    ThrottledError,
)

__all__ = ["CatalogServer"]

#: The largest request body read (a commit's JSON: schemas and snapshots, never data); a
#: longer one is a 413, unread.
MAX_BODY = 16 * 1024 * 1024

#: How long a connection may wait for a client's next bytes (a request line, headers, a
#: body) before it is closed; as long as nginx's ``client_body_timeout`` and Apache's
#: ``Timeout`` (60 s), longer than an engine keeps an idle connection in its pool.
TIMEOUT_SECONDS = 60.0

#: After refusing a body: how long and how much of it to read before closing.
LINGER_SECONDS = 2.0
LINGER_BYTES = 16 * 1024 * 1024


class CatalogServer:
    """Serve ``catalog`` over HTTP on ``host:port`` (port 0: any free port; :attr:`url`
    says which). ``token``: the bearer token every request must carry (None: none needed).
    ``log`` receives one line per request. ``timeout``: the seconds a connection may wait for
    the client's next bytes before it is closed (a request sent slower than that is not
    answered). Use as a context manager, or :meth:`start` and :meth:`close`;
    :meth:`serve_forever` blocks instead."""

    def __init__(
        self,
        catalog: LakeCatalog,
        *,
        host: str = "127.0.0.1",
        port: int = 8181,
        token: str | None = None,
        log: Callable[[str], None] | None = None,
        timeout: float = TIMEOUT_SECONDS,
    ) -> None:
        if token is not None and not token.strip():
            raise ValueError("the catalog token may not be empty")
        if not timeout > 0:
            raise ValueError(f"the catalog's timeout is a positive number of seconds: {timeout}")
        self.catalog = catalog
        self.token = token
        self.log = log
        # StreamRequestHandler.setup() gives each accepted socket this timeout; a read that
        # times out ends the connection (BaseHTTPRequestHandler.handle_one_request).
        handler = type("Handler", (_Handler,), {"server_state": self, "timeout": timeout})
        server_class = _IPv6Server if ":" in host else ThreadingHTTPServer
        self._server = server_class((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> Self:
        """Serve on a background thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="lakelock-catalog", daemon=True
            )
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one request ----------------------------------------------------------------------------

    def authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        offered = bearer_token(header)
        return offered is not None and hmac.compare_digest(offered.encode(), self.token.encode())

    def answer(
        self, method: str, target: str, headers: Any, body: bytes, *, peer: str = "127.0.0.1"
    ) -> _Answer:
        """The answer to one request from the client at address ``peer`` (never raises)."""
        split = urlsplit(target)
        query = parse_qs(split.query, keep_blank_values=True)
        head = method == "HEAD"
        if method == "POST" and split.path == "/v1/oauth/tokens":
            # The one route without a bearer token: it is where clients get one.
            try:
                form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
                basic = basic_secret(headers.get("Authorization"))
                granted = orjson.dumps(token_grant(form, self.token, basic=basic))
                return _Answer(200, granted, dict(_NO_STORE))
            except CatalogError as error:
                described = {"error": error.type, "error_description": error.message}
                return _Answer(error.status, orjson.dumps(described), dict(_NO_STORE))
        if not self.authorized(headers.get("Authorization")):
            missing = headers.get("Authorization") is None
            refused = _error(
                CatalogError.not_authorized(
                    "this catalog needs 'Authorization: Bearer <token>'"
                    if missing
                    else "the bearer token is not this catalog's"
                ),
                head=head,
            )
            refused.headers["WWW-Authenticate"] = 'Bearer realm="lakelock"'  # RFC 6750
            return refused
        try:
            found = route(method, split.path)
            if found.operation in WRITES:
                self._check_write(method, split.path, peer)
        except CatalogError as error:
            return _error(error, head=head)
        try:
            return self._serve(found, query, headers, body)
        except CatalogError as error:
            return _error(error, head=head)
        except (ThrottledError, EndpointUnreachableError, OutcomeUnknownError) as error:
            failure = CatalogError(503, "ServiceUnavailableException", _describe(error))
            return _error(failure, head=head)
        except LakelockError as error:
            failure = CatalogError(500, "InternalServerError", _describe(error))
            return _error(failure, head=head)
        except Exception as error:  # a bug: answer it and keep serving, the trace to the log
            if self.log is not None:
                self.log("internal error:\n" + "".join(traceback.format_exception(error)))
            failure = CatalogError(500, "InternalServerError", _describe(error))
            return _error(failure, head=head)

    def _check_write(self, method: str, path: str, peer: str) -> None:
        if self.catalog.read_only:
            raise CatalogError.unsupported(method, path)
        if self.token is None and not _loopback(peer):
            raise CatalogError.forbidden(
                f"{method} {path}: this catalog has no token, so it takes commits from this "
                "machine only; start it with --token to take them from the network"
            )

    def _serve(
        self, found: Route, query: dict[str, list[str]], headers: Any, body: bytes
    ) -> _Answer:
        catalog = self.catalog
        match found.operation:
            case "config":
                return _json(config_body(catalog.client_defaults(), writes=not catalog.read_only))
            case "create_namespace":
                catalog.create_namespace(body)
                return _Answer(204, b"")  # pragma: no cover - create_namespace always raises
            case "create_table":
                return _Answer(200, catalog.create_table(found.namespace, body))
            case "update_table":
                assert found.table is not None
                loaded = catalog.update_table(found.namespace, found.table, body)
                return _Answer(200, loaded.commit_body())
            case "commit_transaction":
                catalog.commit_transaction(body)
                return _Answer(204, b"")
            case "list_namespaces":
                parent = query.get("parent", [""])[-1]
                if parent:
                    # The one namespace has no children; any other parent does not exist.
                    catalog.check_namespace(tuple(parent.split(NAMESPACE_SEPARATOR)))
                names, token, paged = page([catalog.namespace] if not parent else [], query)
                listed: dict[str, Any] = {"namespaces": [[name] for name in names]}
                if paged:
                    listed["next-page-token"] = token
                return _json(listed)
            case "load_namespace":
                catalog.check_namespace(found.namespace)
                return _json({"namespace": list(found.namespace), "properties": {}})
            case "namespace_exists":
                catalog.check_namespace(found.namespace)
                return _Answer(204, b"")
            case "list_tables":
                names, token, paged = page(catalog.tables(found.namespace), query)
                result: dict[str, Any] = {
                    "identifiers": [
                        {"namespace": list(found.namespace), "name": name} for name in names
                    ]
                }
                if paged:
                    result["next-page-token"] = token
                return _json(result)
            case "table_exists":
                assert found.table is not None
                if not catalog.table_exists(found.namespace, found.table):
                    raise CatalogError.no_such_table(found.namespace, found.table)
                return _Answer(204, b"")
            case "load_table":
                assert found.table is not None
                body = catalog.load_table(found.namespace, found.table).body()
                etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
                if etag in _etags(headers.get("If-None-Match")):
                    return _Answer(304, b"", {"ETag": etag})
                return _Answer(200, body, {"ETag": etag})
        raise CatalogError.unsupported(found.operation, "")  # pragma: no cover - route() is total


#: A token answer is never cached (RFC 6749, section 5.1).
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def _loopback(address: str) -> bool:
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(parsed, "ipv4_mapped", None)
    return bool(parsed.is_loopback or (mapped is not None and mapped.is_loopback))


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class _Answer:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers or {}


def _json(value: Any) -> _Answer:
    return _Answer(200, orjson.dumps(value))


def _error(error: CatalogError, *, head: bool) -> _Answer:
    # A HEAD answer has no body; its status says it all.
    return _Answer(error.status, b"" if head else orjson.dumps(error_body(error)))


def _etags(header: str | None) -> set[str]:
    if not header:
        return set()
    return {tag.strip() for tag in header.split(",")}


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "lakelock-catalog"
    server_state: CatalogServer
    # An answer leaves in one write (headers and body buffered, flushed after each request),
    # with Nagle off: otherwise a kept-alive client's delayed ACK holds every small answer
    # for 40 ms (measured: benchmarks/bench_catalog.py).
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True

    def _handle(self) -> None:
        length_text = self.headers.get("Content-Length") or "0"
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        if length < 0 or length > MAX_BODY or chunked:
            # A body we will not read: answer, then close (the rest cannot be skipped).
            self.close_connection = True
            error = CatalogError(
                413 if length > MAX_BODY else 400,
                "BadRequestException",
                f"request bodies are at most {MAX_BODY:,} bytes, with a Content-Length",
            )
            self._send(_error(error, head=self.command == "HEAD"))
            self._linger()
            return
        body = self.rfile.read(length) if length else b""
        peer = str(self.client_address[0])
        self._send(self.server_state.answer(self.command, self.path, self.headers, body, peer=peer))

    def _linger(self) -> None:
        """Close gently after refusing a body: stop writing, then read what the client still
        sends (bounded), so closing with unread bytes does not reset the connection before
        the client has read the answer."""
        self.wfile.flush()
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_SECONDS)
            drained = 0
            while drained < LINGER_BYTES:
                chunk = self.connection.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass  # the client went first: nothing left to protect

    def _send(self, answer: _Answer) -> None:
        self.send_response(answer.status)
        if answer.body or answer.status not in (204, 304):
            self.send_header("Content-Type", "application/json")
        for name, value in answer.headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        if answer.status not in (204, 304):
            # HEAD answers the length a GET would have had: we do not know it, so say 0.
            self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if answer.body and self.command != "HEAD":
            self.wfile.write(answer.body)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    def log_message(self, format: str, *args: Any) -> None:
        log = self.server_state.log
        if log is not None:
            log(f"{self.address_string()} {format % args}")
