"""The Iceberg REST catalog's reads (``lakelock catalog``), started in-process on port 0 over
the embedded S3 endpoint and spoken to over HTTP: by raw requests (status codes and bodies as
the spec has them), by pyiceberg's ``RestCatalog`` and by DuckDB's ``ATTACH ... (TYPE
iceberg)``. pyiceberg and DuckDB's iceberg and avro extensions come with the test extra: a
missing one fails here, it is not skipped."""

from __future__ import annotations

import base64
import http.client
import socket
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

import boto3
import orjson
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import OAuthError, UnauthorizedError

from lakelock import Lake
from lakelock._catalog import ENDPOINTS, CatalogServer, LakeCatalog, MirroredView
from lakelock._catalog._protocol import CatalogError, page, page_token, route
from lakelock._catalog._server import MAX_BODY
from lakelock._connection import Connection
from lakelock._engines import s3_secret_sql, sql_string
from lakelock.testing import DEFAULT_ACCESS_KEY, S3Endpoint
from tests._support import FAST_RETRY
from tests._support.catalog import (
    TOKEN,
    bearer,
    duckdb_with_iceberg,
    reads_as_lakelock,
    two_datasets,
)
from tests._support.views import history

Response = tuple[int, dict[str, str], bytes]


def call(
    server: CatalogServer,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> Response:
    """One HTTP request to the catalog: status, headers (lower-case names), body."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return (
            response.status,
            {name.lower(): value for name, value in response.getheaders()},
            response.read(),
        )
    finally:
        connection.close()


def error_of(body: bytes) -> dict[str, Any]:
    """The spec's IcebergErrorResponse, checked for shape: {"error": {message, type, code}}."""
    document = orjson.loads(body)
    assert set(document) == {"error"}
    error: dict[str, Any] = document["error"]
    assert set(error) == {"message", "type", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


def failure(server: CatalogServer, method: str, path: str) -> tuple[int, str, str]:
    """What ``method path`` answers with an error: its status, and the error's type and
    message (the body checked by :func:`error_of`, its code the status)."""
    status, _, body = call(server, method, path)
    error = error_of(body)
    assert error["code"] == status
    return status, error["type"], error["message"]


class CountingMirror:
    """``lake.mirror`` for the catalog, counting the calls (the real mirror, not a stand-in)."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, name: str) -> MirroredView:
        with self._lock:
            self.calls.append(name)
        result: MirroredView = self.lake.mirror(name, formats=("iceberg",))
        return result


class RefusingMirror:
    """For requests that must never mirror: fails the test if called."""

    def __call__(self, name: str) -> MirroredView:
        raise AssertionError(f"mirrored {name} where nothing should be")


ServeFn = Callable[..., CatalogServer]


@pytest.fixture
def serve(lake: Lake) -> Iterator[ServeFn]:
    """Start catalogs over the test lake on port 0 (``serve(token=..., vend_credentials=...,
    mirror=...)``); each is closed after the test."""
    servers: list[CatalogServer] = []

    def start(
        *,
        token: str | None = None,
        vend_credentials: bool = False,
        read_only: bool = False,
        namespace: str = "lake",
        mirror: Callable[[str], MirroredView] | None = None,
        on: Lake | None = None,
        timeout: float | None = None,
    ) -> CatalogServer:
        catalog = LakeCatalog(
            on or lake,
            namespace=namespace,
            vend_credentials=vend_credentials,
            read_only=read_only,
            mirror=mirror,
        )
        timed = {} if timeout is None else {"timeout": timeout}
        server = CatalogServer(catalog, port=0, token=token, **timed).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


# -- the protocol, pure -------------------------------------------------------------------------


def test_route_decodes_namespace_and_table_after_splitting_the_path() -> None:
    """A ``%2F`` in a table name stays inside the name; ``%1F`` splits namespace parts."""
    found = route("GET", "/v1/namespaces/lake/tables/a%2Fb")
    assert (found.operation, found.namespace, found.table) == ("load_table", ("lake",), "a/b")
    assert route("HEAD", "/v1/namespaces/a%1Fb").namespace == ("a", "b")
    assert route("HEAD", "/v1/namespaces/lake/tables/t").operation == "table_exists"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/", 404),
        ("GET", "/v2/config", 404),
        ("POST", "/v1/config", 406),
        ("GET", "/v1/namespaces/lake/tables/t/snapshots", 406),
        ("PUT", "/v1/namespaces/lake", 406),
        ("GET", "/v1/namespaces//tables", 406),
    ],
)
def test_route_refuses_what_it_does_not_serve(method: str, path: str, status: int) -> None:
    """Outside /v1 is not found; inside it, anything not served is unsupported (406)."""
    with pytest.raises(CatalogError) as caught:
        route(method, path)
    assert caught.value.status == status


def test_page_follows_the_spec_pagination_rules() -> None:
    """No pageToken: everything, no token (a pageSize alone too, as the spec says). An empty
    token: the first page; the token given: pageSize names after it, null at the end; a bad
    pageSize is a 400."""
    names = ["a", "b", "c"]
    assert page(names, {}) == (names, None, False)
    assert page(names, {"pageToken": [""], "pageSize": ["2"]}) == (
        ["a", "b"],
        page_token("b"),
        True,
    )
    assert page(names, {"pageSize": ["2"]}) == (names, None, False)
    assert page(names, {"pageToken": [page_token("b")], "pageSize": ["2"]}) == (["c"], None, True)
    assert page(names, {"pageToken": [""]}) == (names, None, True)
    for bad in ("0", "x"):
        with pytest.raises(CatalogError) as caught:
            page(names, {"pageToken": [""], "pageSize": [bad]})
        assert caught.value.status == 400


@pytest.mark.parametrize(
    "token",
    ["zzz", "b", "not base64!", page_token("b")[:-2], "x" * 200],
    ids=["junk", "a-bare-name", "not-base64", "cut-short", "long"],
)
def test_a_page_token_the_catalog_never_gave_is_a_bad_request_naming_it(token: str) -> None:
    """A token the catalog did not give (mistyped, cut short, a name sent bare, another
    server's) is a 400 naming it. What a user loses otherwise: an empty page with no next
    token, which a client reads as the end of the list, so tables go missing unseen."""
    with pytest.raises(CatalogError) as caught:
        page(["a", "b", "c"], {"pageToken": [token], "pageSize": ["2"]})
    assert caught.value.status == 400
    shown = token if len(token) <= 80 else token[:80] + "..."
    assert f"pageToken {shown!r} is not a token this catalog gave" in caught.value.message


# -- configuration and namespaces --------------------------------------------------------------


def test_config_lists_only_the_endpoints_served_and_each_one_answers(
    serve: ServeFn, lake: Lake, s3: S3Endpoint
) -> None:
    """``GET /v1/config`` of a read-only catalog lists exactly the served endpoints (so
    clients never assume the spec's default set, writes included), and every listed one is
    answered (not 406)."""
    two_datasets(lake)
    server = serve(mirror=RefusingMirror(), read_only=True)
    status, _, body = call(server, "GET", "/v1/config?warehouse=anything")
    assert status == 200
    config = orjson.loads(body)
    assert set(config["endpoints"]) == set(ENDPOINTS)
    assert len(config["endpoints"]) == len(set(config["endpoints"]))
    assert config["overrides"] == {}
    assert config["defaults"]["s3.endpoint"] == s3.url
    assert config["defaults"]["s3.path-style-access"] == "true"
    for endpoint in config["endpoints"]:
        if endpoint.endswith("{table}") and endpoint.startswith("GET"):
            continue  # loading a table mirrors: covered where a mirror runs
        method, template = endpoint.split(" ")
        path = template.replace("/{prefix}", "").format(namespace="lake", table="sales")
        status, _, _ = call(server, method, path)
        assert status in (200, 204), endpoint


def test_config_never_carries_credentials(serve: ServeFn) -> None:
    """The client defaults name the endpoint and region only: no keys, not even when the
    catalog vends credentials (those go with a loaded table only)."""
    for vend in (False, True):
        server = serve(vend_credentials=vend)
        _, _, body = call(server, "GET", "/v1/config")
        config = orjson.loads(body)
        for key in [*config["defaults"], *config["overrides"]]:
            assert not {"key", "secret", "token"} & set(key.replace(".", "-").split("-")), key


def test_config_defaults_for_aws_name_the_region_only(lake: Lake) -> None:
    """On AWS itself (no custom endpoint) the defaults are the region: no endpoint, no
    path-style addressing, no keys, although the client has keys."""
    aws = boto3.client(
        "s3", region_name="eu-west-1", aws_access_key_id="AK", aws_secret_access_key="SK"
    )
    catalog = LakeCatalog(Lake(lake.bucket, s3=aws))
    assert catalog.client_defaults() == {"s3.region": "eu-west-1", "client.region": "eu-west-1"}


def test_namespaces_get_and_head(serve: ServeFn) -> None:
    """One namespace; load and HEAD answer it and 404 any other (HEAD with no body)."""
    server = serve(namespace="analytics")
    assert orjson.loads(call(server, "GET", "/v1/namespaces")[2]) == {"namespaces": [["analytics"]]}
    status, _, body = call(server, "GET", "/v1/namespaces/analytics")
    assert (status, orjson.loads(body)) == (200, {"namespace": ["analytics"], "properties": {}})
    assert call(server, "HEAD", "/v1/namespaces/analytics")[::2] == (204, b"")
    assert call(server, "HEAD", "/v1/namespaces/lake")[::2] == (404, b"")
    assert failure(server, "GET", "/v1/namespaces/analytics%1Fx") == (
        404,
        "NoSuchNamespaceException",
        "Namespace does not exist: analytics.x",
    )
    # The one namespace has no children; an unknown parent does not exist.
    status, _, body = call(server, "GET", "/v1/namespaces?parent=analytics")
    assert (status, orjson.loads(body)) == (200, {"namespaces": []})
    assert call(server, "GET", "/v1/namespaces?parent=other")[0] == 404
    # Paged as tables are; a token this catalog never gave is a 400 naming it.
    status, _, body = call(server, "GET", "/v1/namespaces?pageToken=&pageSize=1")
    assert orjson.loads(body) == {"namespaces": [["analytics"]], "next-page-token": None}
    junk = failure(server, "GET", "/v1/namespaces?pageToken=zzz")
    assert junk[:2] == (400, "BadRequestException")
    assert "'zzz'" in junk[2]


def test_list_tables_is_every_dataset_and_pages(serve: ServeFn, lake: Lake) -> None:
    """A table per dataset, sorted; pageToken/pageSize page through them; HEAD says which
    exist without mirroring anything."""
    server = serve(mirror=RefusingMirror())
    status, _, body = call(server, "GET", "/v1/namespaces/lake/tables")
    assert (status, orjson.loads(body)) == (200, {"identifiers": []})
    two_datasets(lake)
    status, _, body = call(server, "GET", "/v1/namespaces/lake/tables")
    assert orjson.loads(body)["identifiers"] == [
        {"namespace": ["lake"], "name": "events"},
        {"namespace": ["lake"], "name": "sales"},
    ]
    first = orjson.loads(call(server, "GET", "/v1/namespaces/lake/tables?pageToken=&pageSize=1")[2])
    assert [i["name"] for i in first["identifiers"]] == ["events"]
    query = urlencode({"pageToken": first["next-page-token"], "pageSize": 1})
    second = orjson.loads(call(server, "GET", f"/v1/namespaces/lake/tables?{query}")[2])
    assert [i["name"] for i in second["identifiers"]] == ["sales"]
    assert second["next-page-token"] is None
    junk = failure(server, "GET", "/v1/namespaces/lake/tables?pageToken=zzz&pageSize=1")
    assert junk[:2] == (400, "BadRequestException")
    assert "'zzz'" in junk[2]
    assert call(server, "GET", "/v1/namespaces/other/tables")[0] == 404
    assert call(server, "HEAD", "/v1/namespaces/lake/tables/sales")[::2] == (204, b"")
    assert call(server, "HEAD", "/v1/namespaces/lake/tables/nope")[::2] == (404, b"")
    assert failure(server, "GET", "/v1/namespaces/lake/tables/nope")[:2] == (
        404,
        "NoSuchTableException",
    )


#: Operations of the spec this catalog does not serve, one of each kind.
UNSUPPORTED = [
    ("POST", "/v1/namespaces", b'{"namespace": ["x"]}'),
    ("DELETE", "/v1/namespaces/lake", None),
    ("POST", "/v1/namespaces/lake/properties", b'{"updates": {"a": "b"}}'),
    ("POST", "/v1/namespaces/lake/tables", b'{"name": "t", "schema": {}}'),
    ("POST", "/v1/namespaces/lake/register", b'{"name": "t", "metadata-location": "s3://x"}'),
    ("POST", "/v1/namespaces/lake/tables/sales", b'{"requirements": [], "updates": []}'),
    ("DELETE", "/v1/namespaces/lake/tables/sales?purgeRequested=true", None),
    ("POST", "/v1/namespaces/lake/tables/sales/metrics", b"{}"),
    ("POST", "/v1/namespaces/lake/tables/sales/plan", b"{}"),
    ("POST", "/v1/namespaces/lake/tables/sales/tasks", b"{}"),
    ("GET", "/v1/namespaces/lake/tables/sales/credentials", None),
    ("POST", "/v1/tables/rename", b"{}"),
    ("POST", "/v1/transactions/commit", b'{"table-changes": []}'),
    ("GET", "/v1/namespaces/lake/views", None),
    ("GET", "/v1/namespaces/lake/views/v", None),
    ("HEAD", "/v1/namespaces/lake/views/v", None),
    ("GET", "/v1/namespaces/lake/functions", None),
]


def test_unsupported_operations_answer_the_spec_error(serve: ServeFn, lake: Lake) -> None:
    """Every write (of a read-only catalog), view, function and planning request is a 406
    UnsupportedOperationException in the spec's error body, on a kept-alive connection,
    and changes nothing in the lake."""
    two_datasets(lake)
    before = lake.registry.read().version
    server = serve(mirror=RefusingMirror(), read_only=True)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        for method, path, body in UNSUPPORTED:
            headers = {"Content-Type": "application/json"} if body else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            payload = response.read()
            assert response.status == 406, (method, path)
            if method == "HEAD":
                assert payload == b""
                continue
            error = error_of(payload)
            assert (error["type"], error["code"]) == ("UnsupportedOperationException", 406)
            assert path.split("?")[0] in error["message"]
    finally:
        connection.close()
    assert lake.registry.read().version == before


def test_pyiceberg_never_calls_what_the_config_does_not_list(serve: ServeFn, lake: Lake) -> None:
    """pyiceberg's RestCatalog reads the endpoints list and refuses writes to a read-only
    catalog on its own side."""
    two_datasets(lake)
    server = serve(mirror=RefusingMirror(), read_only=True)
    catalog = RestCatalog("lakelock", uri=server.url)
    assert catalog.list_namespaces() == [("lake",)]
    assert catalog.list_tables("lake") == [("lake", "events"), ("lake", "sales")]
    assert catalog.namespace_exists("lake")
    assert not catalog.namespace_exists("other")
    assert catalog.table_exists("lake.sales")
    assert not catalog.table_exists("lake.nope")
    assert catalog.load_namespace_properties("lake") == {}
    with pytest.raises(NotImplementedError):
        catalog.create_namespace("x")
    with pytest.raises(NotImplementedError):
        catalog.drop_table("lake.sales")
    assert lake.registry.read().datasets.keys() == {"events", "sales"}


def test_oversized_or_chunked_bodies_are_refused_and_the_connection_closed(
    serve: ServeFn,
) -> None:
    """A body the catalog will not read gets a 413 (over ``MAX_BODY``) or a 400 (chunked, no
    Content-Length) and the connection is closed (its bytes cannot be skipped to find the
    next request)."""
    server = serve()
    too_big = b"x" * (MAX_BODY + 1)
    status, headers, body = call(server, "POST", "/v1/namespaces", body=too_big)
    assert status == 413
    assert headers["connection"] == "close"
    assert error_of(body)["type"] == "BadRequestException"
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", "/v1/namespaces", body=iter([b"{}"]), encode_chunked=True)
        response = connection.getresponse()
        assert (response.status, response.getheader("Connection")) == (400, "close")
    finally:
        connection.close()


def test_a_body_shorter_than_its_content_length_is_given_up_after_the_timeout(
    serve: ServeFn,
) -> None:
    """A client that declares a longer body than it sends holds its connection's thread only
    until the server's timeout (here 0.5 s): then the server closes the connection,
    unanswered, and goes on serving others."""
    server = serve(timeout=0.5)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
        started = time.monotonic()
        client.sendall(
            b"POST /v1/namespaces HTTP/1.1\r\nHost: lake\r\nContent-Length: 100\r\n\r\n{}"
        )
        assert client.recv(65536) == b""  # closed by the server, nothing answered
        assert time.monotonic() - started < 10
    assert call(server, "GET", "/v1/config")[0] == 200


def test_a_catalog_timeout_is_a_positive_number_of_seconds(lake: Lake) -> None:
    with pytest.raises(ValueError, match="timeout"):
        CatalogServer(LakeCatalog(lake), port=0, timeout=0)


def impatient(lake: Lake, s3: S3Endpoint) -> Lake:
    """The lake through a client whose SDK does not retry, and lakelock's retries without
    waiting: a store that keeps failing fails the request at once."""
    client = s3.client(retries={"mode": "standard", "total_max_attempts": 1})
    return Lake(lake.bucket, prefix=lake.prefix, s3=client, retry=FAST_RETRY)


def test_a_failing_store_is_a_503_not_a_traceback(
    serve: ServeFn, lake: Lake, s3: S3Endpoint
) -> None:
    """S3 throttling the registry read (after lakelock's retries) answers 503
    ServiceUnavailableException with the error described; the catalog keeps serving."""
    two_datasets(lake)
    server = serve(mirror=RefusingMirror(), on=impatient(lake, s3))
    s3.inject("slowdown", operation="GetObject", prefix="metastore/")
    status, kind, message = failure(server, "GET", "/v1/namespaces/lake/tables")
    assert (status, kind) == (503, "ServiceUnavailableException")
    assert "Throttled" in message
    s3.clear_faults()
    assert call(server, "GET", "/v1/namespaces/lake/tables")[0] == 200


# -- authentication -----------------------------------------------------------------------------


def test_a_configured_token_is_required_on_every_route(serve: ServeFn, lake: Lake) -> None:
    """With a token: no header, a wrong token or another scheme is a 401
    NotAuthorizedException (HEAD: no body), before anything is routed (an unsupported
    operation and every commit too); the right bearer token is served (scheme
    case-insensitive)."""
    two_datasets(lake)
    server = serve(token=TOKEN, mirror=RefusingMirror())
    refused = [
        {},
        bearer("wrong"),
        bearer(TOKEN + "x"),
        {"Authorization": TOKEN},
        {"Authorization": "Basic " + base64.b64encode(f"u:{TOKEN}".encode()).decode()},
    ]
    for method, path in [
        ("GET", "/v1/config"),
        ("GET", "/v1/namespaces"),
        ("GET", "/v1/namespaces/lake/tables"),
        ("GET", "/v1/namespaces/lake/tables/sales"),
        ("POST", "/v1/namespaces"),
        ("POST", "/v1/namespaces/lake/tables"),
        ("POST", "/v1/namespaces/lake/tables/sales"),
        ("POST", "/v1/transactions/commit"),
        ("GET", "/elsewhere"),
    ]:
        for headers in refused:
            status, answered, body = call(server, method, path, headers=headers)
            assert status == 401, (method, path, headers)
            assert error_of(body)["type"] == "NotAuthorizedException"
            assert answered["www-authenticate"] == 'Bearer realm="lakelock"'

    for path in ("/v1/namespaces/lake", "/v1/namespaces/lake/tables/sales"):
        assert call(server, "HEAD", path)[::2] == (401, b"")
        assert call(server, "HEAD", path, headers=bearer())[::2] == (204, b"")
    assert call(server, "GET", "/v1/config", headers=bearer())[0] == 200
    assert call(server, "GET", "/v1/config", headers={"Authorization": f"bearer {TOKEN}"})[0] == 200


def test_oauth2_token_endpoint_hands_out_the_token_for_the_right_secret(serve: ServeFn) -> None:
    """``POST /v1/oauth/tokens`` (no bearer needed): client credentials whose secret is the
    token (in the form or by HTTP Basic) and a token exchange of the token itself answer
    the token; a wrong secret is 401 invalid_client, another grant 400; without a
    configured token it says the catalog takes none."""

    def grant(server: CatalogServer, form: dict[str, str], **headers: str) -> Response:
        return call(
            server,
            "POST",
            "/v1/oauth/tokens",
            body=urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
        )

    server = serve(token=TOKEN)
    credentials = {"grant_type": "client_credentials", "client_id": "me", "scope": "catalog"}
    status, headers, body = grant(server, {**credentials, "client_secret": TOKEN})
    assert status == 200
    assert (headers["cache-control"], headers["pragma"]) == ("no-store", "no-cache")
    assert orjson.loads(body) == {
        "access_token": TOKEN,
        "token_type": "bearer",
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
    }
    basic = base64.b64encode(f"me:{quote(TOKEN)}".encode()).decode()
    status, _, body = grant(server, credentials, Authorization=f"Basic {basic}")
    assert (status, orjson.loads(body)["access_token"]) == (200, TOKEN)
    exchange = {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": TOKEN,
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
    }
    assert grant(server, exchange)[0] == 200
    status, _, body = grant(server, {**credentials, "client_secret": "guess"})
    assert (status, orjson.loads(body)["error"]) == (401, "invalid_client")
    status, _, body = grant(server, {"grant_type": "password", "password": TOKEN})
    assert (status, orjson.loads(body)["error"]) == (400, "unsupported_grant_type")
    status, _, body = grant(serve(), {**credentials, "client_secret": TOKEN})
    assert (status, orjson.loads(body)["error"]) == (400, "invalid_request")


def test_pyiceberg_authenticates_with_the_token_or_oauth2_credentials(
    serve: ServeFn, lake: Lake
) -> None:
    """pyiceberg's RestCatalog with ``token=`` or with ``credential="id:token"`` (its OAuth2
    client credentials flow) lists the tables; without either it is refused."""
    two_datasets(lake)
    server = serve(token=TOKEN, mirror=RefusingMirror())
    with_token = RestCatalog("lakelock", uri=server.url, token=TOKEN)
    assert with_token.list_tables("lake") == [("lake", "events"), ("lake", "sales")]
    with_credential = RestCatalog(
        "lakelock",
        uri=server.url,
        credential=f"me:{TOKEN}",
        **{"oauth2-server-uri": f"{server.url}/v1/oauth/tokens"},
    )
    assert with_credential.list_namespaces() == [("lake",)]
    with pytest.raises(UnauthorizedError):
        RestCatalog("lakelock", uri=server.url)
    with pytest.raises(OAuthError):
        RestCatalog(
            "lakelock",
            uri=server.url,
            credential="me:wrong",
            **{"oauth2-server-uri": f"{server.url}/v1/oauth/tokens"},
        )


def test_the_catalog_listens_where_told(lake: Lake) -> None:
    """127.0.0.1 by default; an IPv6 address such as ::1 works too (its URL bracketed)."""
    with CatalogServer(LakeCatalog(lake), port=0) as default:
        assert default.url == f"http://127.0.0.1:{default.port}"
    with CatalogServer(LakeCatalog(lake), host="::1", port=0) as server:
        assert server.url == f"http://[::1]:{server.port}"
        connection = http.client.HTTPConnection("::1", server.port, timeout=30)
        try:
            connection.request("GET", "/v1/namespaces")
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, b'{"namespaces":[["lake"]]}')
        finally:
            connection.close()


def test_an_empty_token_or_a_multipart_namespace_is_refused(lake: Lake) -> None:
    """An empty token would let 'Bearer ' through, and a namespace with the separator could
    never be named: ValueError at construction."""
    with pytest.raises(ValueError, match="empty"):
        CatalogServer(LakeCatalog(lake), port=0, token=" ")
    with pytest.raises(ValueError, match="namespace"):
        LakeCatalog(lake, namespace="a\x1fb")


# -- loading tables (the dataset's Iceberg view, mirrored when behind) ---------------------------


def rows(table: pa.Table) -> list[dict[str, Any]]:
    """A table's rows, as dicts in a fixed order (engines differ in row and string types)."""
    return sorted(table.to_pylist(), key=lambda row: sorted(row.items()))


def rest_catalog(server: CatalogServer, **properties: str) -> Any:
    """pyiceberg's RestCatalog on ``server``, with S3 keys of its own unless given others."""
    keys = {"s3.access-key-id": DEFAULT_ACCESS_KEY, "s3.secret-access-key": "x"}
    return RestCatalog("lakelock", uri=server.url, **{**keys, **properties})


def sales_history(lake: Lake) -> int:
    """``sales`` (unpartitioned): appends, an overwrite and a restore; the version restored."""
    lake.append("sales", pa.table({"day": [1, 2, 3], "amount": [10.0, 20.0, 30.0]}))
    restore_to = lake.append("sales", pa.table({"day": [5], "amount": [50.0]})).version
    lake.overwrite("sales", pa.table({"day": [9], "amount": [90.0]}))
    lake.restore("sales", version=restore_to)
    return restore_to


def test_pyiceberg_loads_each_dataset_and_reads_what_lakelock_reads(
    serve: ServeFn, lake: Lake
) -> None:
    """pyiceberg's RestCatalog lists the namespace and tables, loads each table (its S3
    endpoint from the catalog's defaults) and reads exactly lakelock's rows and columns,
    partition columns typed as lakelock has them, after appends, an added column, an
    overwrite, a partition delete, a compaction and a restore (test_mirror's history); and
    every snapshot, by id, one per lakelock version in order, reads as lakelock reads that
    version (the added column null in older files, absent before it was added)."""
    events_versions = history(lake)
    sales_history(lake)
    catalog = rest_catalog(serve())
    assert catalog.list_namespaces() == [("lake",)]
    assert catalog.list_tables("lake") == [("lake", "events"), ("lake", "sales")]
    for name in ("events", "sales"):
        table = catalog.load_table(f"lake.{name}")
        reads_as_lakelock(table.scan().to_arrow(), lake, name)
        versions = [entry.version for entry in reversed(lake.history(name))]
        snapshots = table.metadata.snapshots
        assert [int(s.summary["lakelock.version"]) for s in snapshots] == versions
        for snapshot in snapshots:
            version = int(snapshot.summary["lakelock.version"])
            then = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
            reads_as_lakelock(then, lake, name, version)
    assert len(events_versions) == 8
    assert "score" in lake.read("events", version=events_versions[2]).column_names
    assert "score" not in lake.read("events").column_names  # restored to before it


def test_loading_mirrors_only_when_the_registry_is_ahead(serve: ServeFn, lake: Lake) -> None:
    """The first load mirrors; a second with no commit in between mirrors nothing and answers
    the same metadata; after a commit the load mirrors again and the new metadata's current
    snapshot is that lakelock version, with the new rows."""
    lake.append("sales", pa.table({"day": [1], "amount": [1.0]}))
    mirror = CountingMirror(lake)
    server = serve(mirror=mirror)
    path = "/v1/namespaces/lake/tables/sales"
    status, _, body = call(server, "GET", path)
    assert status == 200
    first = orjson.loads(body)
    assert mirror.calls == ["sales"]
    location = first["metadata-location"]
    assert location.startswith(f"s3://{lake.bucket}/{lake.prefix}")
    stored = lake.client.get_object(Bucket=lake.bucket, Key=location.split("/", 3)[3])
    assert first["metadata"] == orjson.loads(stored["Body"].read())  # as stored, not rebuilt
    assert first["metadata"]["format-version"] == 2
    assert orjson.loads(call(server, "GET", path)[2]) == first
    assert mirror.calls == ["sales"]
    version = lake.append("sales", pa.table({"day": [2], "amount": [2.0]})).version
    second = orjson.loads(call(server, "GET", path)[2])
    assert mirror.calls == ["sales", "sales"]
    assert second["metadata-location"] != first["metadata-location"]
    metadata = second["metadata"]
    current = next(
        s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"]
    )
    assert current["summary"]["lakelock.version"] == str(version)
    table = rest_catalog(server).load_table("lake.sales")
    assert rows(table.scan().to_arrow()) == rows(lake.read("sales"))
    # Another dataset's commit leaves this view current: no mirroring.
    lake.append("other", pa.table({"x": [1]}))
    call(server, "GET", path)
    assert mirror.calls == ["sales", "sales"]


def test_concurrent_loads_of_a_table_behind_mirror_it_once(serve: ServeFn, lake: Lake) -> None:
    """Eight clients loading a table that is behind wait for one mirroring and all get the
    same metadata."""
    lake.append("sales", pa.table({"day": [1], "amount": [1.0]}))
    mirror = CountingMirror(lake)
    server = serve(mirror=mirror)
    bodies: list[bytes] = []

    def load() -> None:
        bodies.append(call(server, "GET", "/v1/namespaces/lake/tables/sales")[2])

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(bodies) == 8
    assert len(set(bodies)) == 1
    assert mirror.calls == ["sales"]


def test_load_table_answers_304_for_its_etag(serve: ServeFn, lake: Lake) -> None:
    """A load answers an ETag; If-None-Match with it is 304 until the table changes."""
    lake.append("sales", pa.table({"day": [1], "amount": [1.0]}))
    server = serve()
    path = "/v1/namespaces/lake/tables/sales"
    status, headers, _ = call(server, "GET", path)
    etag = headers["etag"]
    assert status == 200
    assert call(server, "GET", path, headers={"If-None-Match": etag})[::2] == (304, b"")
    assert call(server, "GET", path, headers={"If-None-Match": '"other", ' + etag})[0] == 304
    lake.append("sales", pa.table({"day": [2], "amount": [2.0]}))
    status, headers, _ = call(server, "GET", path, headers={"If-None-Match": etag})
    assert status == 200
    assert headers["etag"] != etag


def test_load_table_hands_out_no_credentials_unless_the_operator_asks(
    serve: ServeFn, lake: Lake, s3: S3Endpoint
) -> None:
    """Even when the client asks for vended credentials, a catalog started without
    ``vend_credentials`` answers no keys; one started with it answers the lake's own keys (and
    the endpoint they are for) as ``config`` and ``storage-credentials``, and pyiceberg and
    DuckDB read with them alone."""
    lake.append("sales", pa.table({"day": [1], "amount": [1.0]}))
    path = "/v1/namespaces/lake/tables/sales"
    asking = {"X-Iceberg-Access-Delegation": "vended-credentials"}
    plain = orjson.loads(call(serve(), "GET", path, headers=asking)[2])
    assert plain["config"] == {}
    assert "storage-credentials" not in plain
    assert b"secret" not in orjson.dumps(plain["config"])

    vending = serve(vend_credentials=True)
    vended = orjson.loads(call(vending, "GET", path)[2])
    config = {
        "s3.access-key-id": DEFAULT_ACCESS_KEY,
        "s3.secret-access-key": "lakelock-secret",
        "s3.endpoint": s3.url,
        "s3.region": "us-east-1",
        "client.region": "us-east-1",
        "s3.path-style-access": "true",
    }
    assert vended["config"] == config
    assert vended["storage-credentials"] == [
        {"prefix": f"{lake.url}datasets/", "config": config},
        {"prefix": f"{lake.url}views/", "config": config},
    ]
    catalog = RestCatalog("lakelock", uri=vending.url)  # no keys of its own
    table = catalog.load_table("lake.sales")
    assert rows(table.scan().to_arrow()) == rows(lake.read("sales"))
    # DuckDB with no S3 secret of its own reads with the vended credentials: one per area,
    # as it scopes a lone credential to the table's location, which holds no data files.
    con = duckdb_with_iceberg()
    con.execute(
        f"ATTACH 'lake' AS ice (TYPE iceberg, ENDPOINT {sql_string(vending.url)}, "
        "AUTHORIZATION_TYPE 'none')"
    )
    read = con.execute("SELECT * FROM ice.lake.sales").to_arrow_table()
    assert rows(read) == rows(lake.read("sales"))


def test_a_prefixed_lake_serves_its_own_datasets(
    serve: ServeFn, client: Any, bucket: str, lake: Lake
) -> None:
    """A lake under a prefix: its datasets only, its views inside the prefix."""
    lake.append("outside", pa.table({"x": [0]}))
    inner = Lake(bucket, prefix="team/a/", s3=client)
    inner.append("sales", pa.table({"day": [1], "amount": [1.0]}))
    server = serve(on=inner)
    names = orjson.loads(call(server, "GET", "/v1/namespaces/lake/tables")[2])["identifiers"]
    assert [i["name"] for i in names] == ["sales"]
    loaded = orjson.loads(call(server, "GET", "/v1/namespaces/lake/tables/sales")[2])
    assert loaded["metadata-location"].startswith(f"s3://{bucket}/team/a/")
    table = rest_catalog(server).load_table("lake.sales")
    assert rows(table.scan().to_arrow()) == rows(inner.read("sales"))


def test_an_unexpected_error_is_a_500_and_the_catalog_keeps_serving(
    lake: Lake,
) -> None:
    """A bug below the catalog (here: a mirror raising RuntimeError) answers 500
    InternalServerError with a one-line description, logs the traceback, and the next
    request is served."""
    lake.append("sales", pa.table({"day": [1], "amount": [1.0]}))
    logged: list[str] = []

    def broken(name: str) -> MirroredView:
        raise RuntimeError(f"mirror of {name} broke")

    catalog = LakeCatalog(lake, mirror=broken)
    with CatalogServer(catalog, port=0, log=logged.append) as server:
        assert failure(server, "GET", "/v1/namespaces/lake/tables/sales") == (
            500,
            "InternalServerError",
            "RuntimeError: mirror of sales broke",
        )
        assert call(server, "GET", "/v1/namespaces/lake/tables")[0] == 200
    assert any("Traceback" in line and "mirror of sales broke" in line for line in logged)


def test_dataset_names_that_need_quoting_load(serve: ServeFn, lake: Lake) -> None:
    """Names with dots and non-ASCII letters travel URL-encoded and load (as tuples: a dotted
    string would split at the dot); a decomposed accent names the same (NFC) dataset."""
    names = ["ventes-été", "sales.v2", "日次"]
    for name in names:
        lake.append(name, pa.table({"x": [len(name)]}))
    server = serve()
    catalog = rest_catalog(server)
    assert sorted(catalog.list_tables("lake")) == sorted(("lake", n) for n in names)
    decomposed = quote(unicodedata.normalize("NFD", "ventes-été"))
    assert decomposed != quote("ventes-été")
    assert call(server, "HEAD", f"/v1/namespaces/lake/tables/{decomposed}")[0] == 204
    for name in names:
        assert catalog.table_exists(("lake", name))
        table = catalog.load_table(("lake", name))
        assert table.scan().to_arrow().to_pylist() == [{"x": len(name)}]


def test_a_dataset_no_iceberg_view_can_hold_is_a_400_naming_the_column(
    serve: ServeFn, lake: Lake
) -> None:
    """A timestamp in nanoseconds has no Iceberg v2 type: the view is refused, and loading
    the table is a 400 naming the column (a refusal that will not change: a client must not
    send it again as it would a 500), while the other tables load."""
    lake.append("ticks", pa.table({"at": pa.array([1_000_000_001], pa.timestamp("ns"))}))
    lake.append("sales", pa.table({"day": [1]}))
    server = serve()
    status, kind, message = failure(server, "GET", "/v1/namespaces/lake/tables/ticks")
    assert (status, kind) == (400, "BadRequestException")
    assert "'at' is a timestamp in nanoseconds" in message
    assert call(server, "GET", "/v1/namespaces/lake/tables/sales")[0] == 200


def test_a_mirror_that_fails_is_a_503_and_the_next_load_mirrors(
    serve: ServeFn, lake: Lake, s3: S3Endpoint
) -> None:
    """S3 refusing the view's writes makes the load a 503 (nothing cached); once S3 is back
    the next load mirrors and answers the view."""
    lake.append("sales", pa.table({"day": [1], "amount": [1.0]}))
    served = impatient(lake, s3)
    mirror = CountingMirror(served)
    server = serve(mirror=mirror, on=served)
    s3.inject("slowdown", operation="PutObject", prefix="views/")
    assert failure(server, "GET", "/v1/namespaces/lake/tables/sales")[:2] == (
        503,
        "ServiceUnavailableException",
    )
    s3.clear_faults()
    status, _, body = call(server, "GET", "/v1/namespaces/lake/tables/sales")
    assert status == 200
    assert mirror.calls == ["sales", "sales"]
    assert orjson.loads(body)["metadata-location"].endswith(".metadata.json")


def test_duckdb_attaches_the_catalog_and_reads_what_lakelock_reads(
    serve: ServeFn, lake: Lake, s3: S3Endpoint
) -> None:
    """DuckDB's ``ATTACH ... (TYPE iceberg)`` with the bearer token sees the tables and reads
    lakelock's rows and column types (its S3 secret for the data, as the catalog vends none),
    after test_mirror's history (appends, an added column, an overwrite, a partition delete,
    a compaction and a restore); every snapshot, ``AT (VERSION => id)``, reads as lakelock
    reads the version it names; with OAuth2 client credentials (the token as the secret) it
    attaches too."""
    versions = history(lake)
    sales_history(lake)
    server = serve(token=TOKEN)
    con = duckdb_with_iceberg()
    con.execute(s3_secret_sql(Connection.of(lake.client), f"s3://{lake.bucket}"))
    con.execute(
        f"ATTACH 'lake' AS ice (TYPE iceberg, ENDPOINT {sql_string(server.url)}, "
        f"TOKEN {sql_string(TOKEN)})"
    )
    tables = con.execute("SELECT schema, name FROM (SHOW ALL TABLES) WHERE database = 'ice'")
    assert sorted(tables.fetchall()) == [("lake", "events"), ("lake", "sales")]
    for name in ("events", "sales"):
        read = con.execute(f"SELECT * FROM ice.lake.{name}").to_arrow_table()
        reads_as_lakelock(read, lake, name)
    # Time travel: each snapshot of the view, by id, is the lakelock version it names.
    loaded = orjson.loads(
        call(server, "GET", "/v1/namespaces/lake/tables/events", headers=bearer())[2]
    )
    snapshots = loaded["metadata"]["snapshots"]
    assert [int(s["summary"]["lakelock.version"]) for s in snapshots] == versions
    for snapshot in snapshots:
        then = con.execute(
            f"SELECT * FROM ice.lake.events AT (VERSION => {snapshot['snapshot-id']})"
        ).to_arrow_table()
        reads_as_lakelock(then, lake, "events", int(snapshot["summary"]["lakelock.version"]))
    con.execute(
        f"ATTACH 'lake' AS oauth (TYPE iceberg, ENDPOINT {sql_string(server.url)}, "
        f"CLIENT_ID 'duckdb', CLIENT_SECRET {sql_string(TOKEN)}, "
        f"OAUTH2_SERVER_URI {sql_string(server.url + '/v1/oauth/tokens')})"
    )
    assert con.execute("SELECT count(*) FROM oauth.lake.sales").fetchone() == (4,)  # restored
    with pytest.raises(Exception, match="401"):
        con.execute(
            f"ATTACH 'lake' AS refused (TYPE iceberg, ENDPOINT {sql_string(server.url)}, "
            "AUTHORIZATION_TYPE 'none')"
        )


def test_the_first_load_of_a_current_view_says_it_was_current(lake: Lake) -> None:
    """A catalog's first load of a table whose Iceberg view is already current (mirrored
    earlier) logs "already current", not "mirrored" as if it had written one; a load after a
    new commit logs that it mirrored."""
    version = lake.append("sales", pa.table({"day": [1], "amount": [1.0]})).version
    lake.mirror("sales", formats=("iceberg",))
    lines: list[str] = []
    catalog = LakeCatalog(lake, log=lines.append)
    assert catalog.load_table(("lake",), "sales").version == version
    assert lines[0] == "mirroring sales ..."
    assert lines[1].startswith(f"view of sales already current at lakelock version {version} (")
    newer = lake.append("sales", pa.table({"day": [2], "amount": [2.0]})).version
    catalog.load_table(("lake",), "sales")
    assert lines[3].startswith(f"mirrored sales to lakelock version {newer} (")
