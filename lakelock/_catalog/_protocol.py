"""The Iceberg REST catalog protocol, the part of it lakelock serves, as pure functions.

Which request is which operation (:func:`route`), the ``GET /v1/config`` body
(:func:`config_body`), the error body every non-2xx answer carries (:class:`CatalogError`),
and the OAuth2 token exchange (:func:`token_grant`): no I/O, no lake, so every branch is
tested directly. Paths are those of the Iceberg REST OpenAPI spec
(``open-api/rest-catalog-open-api.yaml``) with no ``{prefix}``: the config names none, so
clients send ``/v1/namespaces/...``.

Served (and listed in the config's ``endpoints``, so clients call nothing else)::

    GET  /v1/config                                  catalog configuration
    GET  /v1/namespaces                              the lake's one namespace
    GET  /v1/namespaces/{namespace}                  its (empty) properties
    HEAD /v1/namespaces/{namespace}                  204 if it exists
    GET  /v1/namespaces/{namespace}/tables           one table per dataset
    GET  /v1/namespaces/{namespace}/tables/{table}   the dataset's Iceberg view (metadata)
    HEAD /v1/namespaces/{namespace}/tables/{table}   204 if the dataset exists
    POST /v1/oauth/tokens                            client credentials -> the bearer token

and, unless the catalog is read-only (:data:`WRITE_ENDPOINTS`)::

    POST /v1/namespaces                              create: the one namespace exists (409)
    POST /v1/namespaces/{namespace}/tables           create a table (a dataset)
    POST /v1/namespaces/{namespace}/tables/{table}   commit to a table (a lakelock commit)
    POST /v1/transactions/commit                     commit to several (one lakelock commit)

Every other request under ``/v1/`` is an operation this catalog does not offer (no views,
functions, renames, drops or server-side scan planning; no writes when read-only): 406
``UnsupportedOperationException``, as the spec answers unsupported operations.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from unicodedata import normalize
from urllib.parse import unquote, unquote_plus

__all__ = [
    "ENDPOINTS",
    "NAMESPACE_SEPARATOR",
    "WRITES",
    "WRITE_ENDPOINTS",
    "CatalogError",
    "Operation",
    "Route",
    "basic_secret",
    "bearer_token",
    "config_body",
    "error_body",
    "page",
    "page_token",
    "route",
    "token_grant",
]

#: What ``GET /v1/config`` lists as served, in the spec's "<verb> <path template>" form.
ENDPOINTS: tuple[str, ...] = (
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
)

#: What ``GET /v1/config`` lists besides :data:`ENDPOINTS` when the catalog takes commits.
WRITE_ENDPOINTS: tuple[str, ...] = (
    "POST /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/transactions/commit",
)

#: Separates the parts of a multipart namespace in a path (the spec's default, ``%1F``).
NAMESPACE_SEPARATOR = "\x1f"

Operation = Literal[
    "config",
    "token",
    "list_namespaces",
    "load_namespace",
    "namespace_exists",
    "list_tables",
    "load_table",
    "table_exists",
    "create_namespace",
    "create_table",
    "update_table",
    "commit_transaction",
]

#: The operations that change the lake (refused by a read-only catalog).
WRITES: frozenset[str] = frozenset(
    ("create_namespace", "create_table", "update_table", "commit_transaction")
)


@dataclass(frozen=True)
class Route:
    """A request this catalog serves: the operation, and the path's namespace parts and table
    name (decoded) where it has them."""

    operation: Operation
    namespace: tuple[str, ...] = ()
    table: str | None = None


class CatalogError(Exception):
    """A non-2xx answer: the HTTP status and the spec's ``ErrorModel`` fields (``type`` is the
    exception name a Java or Python client maps it to, e.g. ``NoSuchTableException``)."""

    def __init__(self, status: int, type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message

    @classmethod
    def unsupported(cls, method: str, path: str) -> CatalogError:
        return cls(
            406,
            "UnsupportedOperationException",
            f"{method} {path} is not supported: this catalog serves only the endpoints "
            "GET /v1/config lists",
        )

    @classmethod
    def commit_failed(cls, message: str) -> CatalogError:
        """A requirement the commit named no longer holds (or a concurrent commit removed
        what it removes): the client refreshes the table and retries."""
        return cls(409, "CommitFailedException", message)

    @classmethod
    def already_exists(cls, message: str) -> CatalogError:
        return cls(409, "AlreadyExistsException", message)

    @classmethod
    def forbidden(cls, message: str) -> CatalogError:
        return cls(403, "ForbiddenException", message)

    @classmethod
    def not_authorized(cls, message: str) -> CatalogError:
        return cls(401, "NotAuthorizedException", message)

    @classmethod
    def bad_request(cls, message: str) -> CatalogError:
        return cls(400, "BadRequestException", message)

    @classmethod
    def no_such_namespace(cls, namespace: Sequence[str]) -> CatalogError:
        message = f"Namespace does not exist: {_dotted(namespace)}"
        return cls(404, "NoSuchNamespaceException", message)

    @classmethod
    def no_such_table(cls, namespace: Sequence[str], table: str) -> CatalogError:
        name = _dotted([*namespace, table])
        return cls(404, "NoSuchTableException", f"Table does not exist: {name}")


def error_body(error: CatalogError) -> dict[str, Any]:
    """The spec's ``IcebergErrorResponse``: ``{"error": {"message", "type", "code"}}``."""
    return {"error": {"message": error.message, "type": error.type, "code": error.status}}


def _dotted(parts: Sequence[str]) -> str:
    return ".".join(parts)


def _namespace(segment: str) -> tuple[str, ...]:
    """A ``{namespace}`` path segment: URL-decoded, split at the separator, each part in
    Unicode NFC, as a table's name is read (a client's decomposed é is the same name)."""
    return tuple(normalize("NFC", part) for part in unquote(segment).split(NAMESPACE_SEPARATOR))


def route(method: str, path: str) -> Route:
    """The served operation ``method path`` asks for (``path`` without its query), or
    :class:`CatalogError`: 406 for any other request under ``/v1/`` (the spec's answer to an
    unsupported operation), 404 outside it. The path's segments are split before they are
    decoded, so a ``%2F`` inside a table name stays part of the name."""
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "" or parts[1] != "v1":
        message = f"{path} is not an Iceberg REST path (/v1/...)"
        raise CatalogError(404, "NotFoundException", message)
    rest = parts[2:]
    read = method in ("GET", "HEAD")
    match rest:
        case ["config"] if method == "GET":
            return Route("config")
        case ["oauth", "tokens"] if method == "POST":
            return Route("token")
        case ["namespaces"] if method == "GET":
            return Route("list_namespaces")
        case ["namespaces"] if method == "POST":
            return Route("create_namespace")
        case ["transactions", "commit"] if method == "POST":
            return Route("commit_transaction")
        case ["namespaces", namespace, "tables"] if method == "POST" and namespace:
            return Route("create_table", _namespace(namespace))
        case ["namespaces", namespace, "tables", table] if method == "POST" and namespace and table:
            return Route("update_table", _namespace(namespace), normalize("NFC", unquote(table)))
        case ["namespaces", namespace] if read and namespace:
            operation: Operation = "load_namespace" if method == "GET" else "namespace_exists"
            return Route(operation, _namespace(namespace))
        case ["namespaces", namespace, "tables"] if method == "GET" and namespace:
            return Route("list_tables", _namespace(namespace))
        case ["namespaces", namespace, "tables", table] if read and namespace and table:
            operation = "load_table" if method == "GET" else "table_exists"
            # lakelock stores names NFC-normalised: a client's decomposed é is the same name.
            return Route(operation, _namespace(namespace), normalize("NFC", unquote(table)))
    raise CatalogError.unsupported(method, path)


def config_body(defaults: Mapping[str, str], *, writes: bool = False) -> dict[str, Any]:
    """``GET /v1/config``: the client ``defaults`` (S3 endpoint, region, addressing: never
    credentials), no overrides, and the endpoints served (:data:`ENDPOINTS`, and with
    ``writes`` :data:`WRITE_ENDPOINTS`), so a client checks them instead of assuming the
    spec's default set (which includes renames and drops)."""
    endpoints = [*ENDPOINTS, *(WRITE_ENDPOINTS if writes else ())]
    return {"defaults": dict(defaults), "overrides": {}, "endpoints": endpoints}


def page(
    names: Sequence[str], query: Mapping[str, Sequence[str]]
) -> tuple[list[str], str | None, bool]:
    """One page of ``names`` (sorted) for a list request's ``pageToken``/``pageSize``: the
    names, the next page's token, and whether the request asked for pages at all. As the spec
    says: without ``pageToken`` every name in one answer (whatever ``pageSize``); with an
    empty one, the first page; with a token this catalog gave (:func:`page_token`), the page
    after it; at most ``pageSize`` names a page, and a null token on the last. A token it
    never gave (mistyped, from another server, cut short) is a 400 naming it, not a page of
    nothing that reads as the end of the list."""
    if "pageToken" not in query:
        return list(names), None, False
    token = query["pageToken"][-1]
    after = _after(token) if token else None
    size_text = query.get("pageSize", [""])[-1]
    size = len(names) or 1
    if size_text:
        try:
            size = int(size_text)
        except ValueError:
            message = f"pageSize {size_text!r} is not a whole number"
            raise CatalogError.bad_request(message) from None
        if size < 1:
            raise CatalogError.bad_request(f"pageSize must be at least 1, got {size}")
    rest = [name for name in names if name > after] if after is not None else list(names)
    chosen = rest[:size]
    return chosen, page_token(chosen[-1]) if len(rest) > size else None, True


#: What every page token this catalog gives starts with (before its base64 encoding).
_PAGE_MARK = b"lakelock-page:"


def page_token(last: str) -> str:
    """The opaque token of the page after the name ``last`` (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(_PAGE_MARK + last.encode()).decode().rstrip("=")


def _after(token: str) -> str:
    """The name a token of :func:`page_token` pages after; 400 naming any other token."""
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        name = raw[len(_PAGE_MARK) :].decode()
    except (binascii.Error, UnicodeDecodeError):
        name = None
    if name is not None and raw.startswith(_PAGE_MARK) and page_token(name) == token:
        return name
    shown = token if len(token) <= 80 else token[:80] + "..."
    raise CatalogError.bad_request(
        f"pageToken {shown!r} is not a token this catalog gave: send the previous page's "
        "next-page-token, or an empty pageToken for the first page"
    )


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive, as
    HTTP says), or None."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def basic_secret(header: str | None) -> str | None:
    """The password of an ``Authorization: Basic`` header (RFC 6749 lets an OAuth2 client
    send its id and secret so; DuckDB does), or None."""
    if header is None:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, sep, secret = decoded.partition(":")
    return unquote_plus(secret) if sep else None


def token_grant(
    form: Mapping[str, Sequence[str]], token: str | None, *, basic: str | None = None
) -> dict[str, Any]:
    """``POST /v1/oauth/tokens`` (the spec's deprecated OAuth2 endpoint, which Spark's,
    Trino's and pyiceberg's REST clients use when given a ``credential``): the client
    credentials grant with the configured ``token`` as the client secret (any client id; in
    the form, or as the password of HTTP Basic authentication: ``basic``), or
    the token exchange grant with the token as the subject (a refresh), answers the token
    itself. There are no other tokens to issue: this catalog knows exactly one.

    Raises :class:`CatalogError` whose ``type`` is the OAuth2 error code (the HTTP layer
    sends the spec's ``OAuthError`` body for this endpoint)."""

    def field(name: str) -> str:
        values = form.get(name)
        return values[-1] if values else ""

    if token is None:
        raise CatalogError(
            400,
            "invalid_request",
            "this catalog takes no credentials (it was started without --token): configure "
            "the client without a credential or token",
        )
    grant = field("grant_type")
    if grant == "client_credentials":
        offered = field("client_secret") or basic or ""
    elif grant == "urn:ietf:params:oauth:grant-type:token-exchange":
        offered = field("subject_token")
    else:
        raise CatalogError(
            400,
            "unsupported_grant_type",
            f"grant_type {grant!r}: this catalog accepts client_credentials (client secret: "
            "the catalog's token) and token-exchange (subject token: the catalog's token)",
        )
    if not hmac.compare_digest(offered.encode(), token.encode()):
        raise CatalogError(401, "invalid_client", "the client secret is not this catalog's token")
    return {
        "access_token": token,
        "token_type": "bearer",
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
    }
