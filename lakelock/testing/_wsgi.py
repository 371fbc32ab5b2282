"""The gateway's HTTP plumbing: responses as S3 words them, request bodies, and passing a
request on to the WSGI application behind (moto)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import socket
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any
from urllib.parse import quote, unquote_to_bytes

import orjson

__all__ = [
    "IncompleteBody",
    "Reset",
    "Response",
    "WSGIApp",
    "conflict",
    "corrupted",
    "cut_short",
    "forward",
    "headers_of",
    "json_response",
    "local_name",
    "malformed_xml",
    "not_implemented",
    "precondition_failed",
    "read_body",
    "receive_body",
    "replace_body",
    "reset_connection",
    "s3_error",
    "sent_then_closed",
    "subrequest",
]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass
class Response:
    status: str
    headers: list[tuple[str, str]]
    body: bytes
    #: Close the connection once ``body`` is sent (a body cut short of its Content-Length).
    then_close: bool = False
    #: An injected ``after`` fault spoilt this answer (the gateway spares one that did not).
    struck: bool = False

    @property
    def code(self) -> int:
        return int(self.status.split(" ", 1)[0])


class Reset(Exception):
    """Drop the client's connection without a response."""


def s3_error(
    status: str, code: str, message: str, *, key: str | None = None, header: str | None = None
) -> Response:
    """An S3 error document."""
    key_xml = f"<Key>{_xml_escape(key)}</Key>" if key is not None else ""
    if header is not None:
        key_xml += f"<Header>{_xml_escape(header)}</Header>"
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{_xml_escape(message)}</Message>{key_xml}"
        f"<RequestId>lakelock-gateway</RequestId></Error>"
    ).encode()
    return Response(status, [("Content-Type", "application/xml")], body)


def conflict(key: str | None) -> Response:
    """409 ConditionalRequestConflict, as S3 answers a conditional write racing another."""
    return s3_error(
        "409 Conflict",
        "ConditionalRequestConflict",
        "A conflicting conditional operation is currently in progress against this "
        "resource. Please try again.",
        key=key,
    )


def not_implemented(message: str, *, header: str | None = None) -> Response:
    """501 NotImplemented; ``header``: the request header(s) S3 names as the cause."""
    return s3_error("501 Not Implemented", "NotImplemented", message, header=header)


def malformed_xml() -> Response:
    """400 MalformedXML, as S3 words it (also its answer to a request over its limits)."""
    return s3_error(
        "400 Bad Request",
        "MalformedXML",
        "The XML you provided was not well-formed or did not validate against our published schema",
    )


def precondition_failed(condition: str, key: str) -> Response:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PreconditionFailed</Code>'
        "<Message>At least one of the pre-conditions you specified did not hold</Message>"
        f"<Condition>{_xml_escape(condition)}</Condition><Key>{_xml_escape(key)}</Key>"
        "<RequestId>lakelock-gateway</RequestId></Error>"
    ).encode()
    return Response("412 Precondition Failed", [("Content-Type", "application/xml")], body)


def json_response(data: object) -> Response:
    return Response("200 OK", [("Content-Type", "application/json")], orjson.dumps(data))


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def local_name(tag: str) -> str:
    """An XML element's name without its namespace."""
    return tag.rsplit("}", 1)[-1]


def headers_of(environ: Mapping[str, Any]) -> dict[str, str]:
    """A WSGI request's HTTP headers, by lower-case name."""
    headers = {
        name[5:].replace("_", "-").lower(): str(value)
        for name, value in environ.items()
        if name.startswith("HTTP_")
    }
    if "CONTENT_TYPE" in environ:
        headers["content-type"] = environ["CONTENT_TYPE"]
    return headers


class IncompleteBody(Exception):
    """The client went away before its body was all in: fewer bytes than its Content-Length.
    S3 applies nothing of such a request (400 IncompleteBody), and neither may the endpoint:
    stored, the short body would stand under the checksum the client sent for the whole."""


def read_body(environ: dict[str, Any]) -> bytes:
    """Read the whole request body and put it back for whoever reads next
    (:class:`IncompleteBody` if the connection ended before it was all in)."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    stream = environ["wsgi.input"]
    body: bytes = stream.read(length) if length else stream.read()
    if len(body) < length:
        raise IncompleteBody(f"{len(body)} of {length} bytes")
    environ["wsgi.input"] = BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return body


def receive_body(environ: dict[str, Any]) -> None:
    """Take in a request's whole body, if it has one (a length, or chunked encoding)."""
    if int(environ.get("CONTENT_LENGTH") or 0) > 0 or environ.get("wsgi.input_terminated"):
        read_body(environ)


def replace_body(environ: dict[str, Any], body: bytes) -> None:
    """Give the request a rewritten body, with the checksums that go with it."""
    environ["wsgi.input"] = BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    environ["HTTP_CONTENT_MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
    for name in [n for n in environ if n.startswith("HTTP_X_AMZ_CHECKSUM")]:
        del environ[name]
    environ.pop("HTTP_X_AMZ_SDK_CHECKSUM_ALGORITHM", None)


def forward(backend: WSGIApp, environ: dict[str, Any]) -> Response:
    """``environ`` answered by ``backend``, its body read whole."""
    captured: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        captured[:] = [status, headers]

    chunks = backend(environ, start_response)
    try:
        body = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return Response(captured[0], list(captured[1]), body)


def subrequest(
    backend: WSGIApp, method: str, bucket: str, key: str | None, *, query: str = ""
) -> Response:
    """A request of the gateway's own (a read-back) to ``backend``."""
    path = f"/{quote(bucket)}" + (f"/{quote(key, safe='/')}" if key is not None else "")
    environ = {
        "REQUEST_METHOD": method,
        # WSGI's strings are bytes as latin-1 (PEP 3333): a key's UTF-8 bytes so, as a
        # server hands them on, not the decoded text (a character beyond latin-1, CJK or a
        # combining accent, failed the backend's decoding: every read-back of it was a 500).
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "RAW_URI": path,
        "REQUEST_URI": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "HTTP_HOST": "127.0.0.1",
        # moto answers unsigned requests as an anonymous caller (403 on private objects);
        # it does not verify signatures, so a well-formed credential scope is enough.
        "HTTP_AUTHORIZATION": (
            "AWS4-HMAC-SHA256 Credential=lakelock-gateway/20250101/us-east-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=0"
        ),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": BytesIO(b""),
        "wsgi.errors": BytesIO(),
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "CONTENT_LENGTH": "0",
    }
    return forward(backend, environ)


def reset_connection(environ: Mapping[str, Any]) -> None:
    """Abort the TCP connection (RST), as a crashed front end or a network fault would."""
    sock = environ.get("werkzeug.socket")
    if not isinstance(sock, socket.socket):
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def cut_short(response: Response) -> Response:
    """``response`` with the first half of its body only, under the whole body's
    Content-Length, the connection to be closed after it: the client's read of the body
    breaks off (an incomplete read)."""
    return Response(
        response.status,
        _with_header(response.headers, "Content-Length", str(len(response.body))),
        response.body[: len(response.body) // 2],
        then_close=True,
    )


def corrupted(response: Response) -> Response:
    """``response`` with every byte of its body inverted (an empty body: one byte), under the
    checksum of the real body (its CRC32 if the answer carried no checksum): the client's
    checksum check of the body fails."""
    body = bytes(byte ^ 0xFF for byte in response.body) or b"\x00"
    headers = _with_header(response.headers, "Content-Length", str(len(body)))
    if not any(name.lower().startswith("x-amz-checksum-") for name, _ in headers):
        crc32 = zlib.crc32(response.body).to_bytes(4, "big")
        headers.append(("x-amz-checksum-crc32", base64.b64encode(crc32).decode()))
    return Response(response.status, headers, body)


def sent_then_closed(body: bytes, environ: Mapping[str, Any]) -> Iterator[bytes]:
    """``body``, then the connection closed for writing (the client reads to its end, then
    finds no more): what a server that fails mid-answer leaves its client."""
    yield body
    sock = environ.get("werkzeug.socket")
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)


def _with_header(headers: list[tuple[str, str]], name: str, value: str) -> list[tuple[str, str]]:
    """``headers`` with ``name`` (any case) set to ``value`` alone."""
    return [(n, v) for n, v in headers if n.lower() != name.lower()] + [(name, value)]
