"""``lakelock catalog`` and ``lakelock serve --catalog`` as processes: the banner, the token
from the environment, the request and mirroring log, Ctrl-C; and the option checks that guard
the lake's credentials (in this process: they refuse before anything is served)."""

from __future__ import annotations

import http.client
import re
from urllib.parse import urlsplit

import orjson
import pytest

from lakelock import Lake
from lakelock._catalog import DEFAULT_NAMESPACE, LakeCatalog
from lakelock._cli import _catalog as cli_catalog
from lakelock.cli import build_parser
from lakelock.errors import InvalidNameError
from lakelock.testing import S3Endpoint
from tests._support.catalog import TOKEN, bearer, two_datasets
from tests._support.processes import InProcess, interrupt, read_until, start_cli

#: A test that starts ``lakelock`` as a process: its safety nets (start-up up to
#: ``read_until``'s 90 s on a loaded machine, a request's 30 s, the exit's 60 s) fit in it, so
#: a slow start fails, if ever, on the net that names it, not on the suite's 120 s.
PROCESS_TIMEOUT = pytest.mark.timeout(300)


def catalog_url(banner: list[str]) -> str:
    line = next(line for line in banner if line.startswith("lakelock Iceberg REST catalog: "))
    return line.split()[4]


def http_get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    split = urlsplit(url)
    connection = http.client.HTTPConnection(split.hostname or "", split.port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@PROCESS_TIMEOUT
def test_cli_catalog_serves_with_the_token_from_the_environment(
    s3: S3Endpoint, bucket: str, lake: Lake
) -> None:
    """``lakelock catalog`` serves the lake until Ctrl-C: the token comes from
    $LAKELOCK_CATALOG_TOKEN, the banner says where and how to attach, each request is logged
    on stderr."""
    two_datasets(lake)
    process = start_cli(
        "catalog",
        f"s3://{bucket}",
        "--endpoint-url",
        s3.url,
        "--port",
        "0",
        "--namespace",
        "shop",
        env={"LAKELOCK_CATALOG_TOKEN": TOKEN},
    )
    try:
        banner = read_until(process, "Ctrl-C to stop.")
        url = catalog_url(banner)
        assert "namespace 'shop'; bearer token required; vends no credentials" in banner[0]
        assert any(f"ATTACH 'lake' AS lake (TYPE iceberg, ENDPOINT '{url}'" in b for b in banner)
        assert http_get(url, "/v1/namespaces/shop/tables")[0] == 401
        status, body = http_get(url, "/v1/namespaces/shop/tables", bearer())
        assert status == 200
        assert [i["name"] for i in orjson.loads(body)["identifiers"]] == ["events", "sales"]
        status, body = http_get(url, "/v1/namespaces/shop/tables/sales", bearer())
        assert status == 200
        assert orjson.loads(body)["metadata"]["format-version"] == 2
    finally:
        out, err = interrupt(process)
    assert "stopped" in out
    assert '"GET /v1/namespaces/shop/tables HTTP/1.1" 401' in err
    assert '"GET /v1/namespaces/shop/tables HTTP/1.1" 200' in err
    assert "catalog: mirroring sales ...\n" in err
    assert re.search(r"catalog: mirrored sales to lakelock version \d+ \(\d+\.\d\d s\)", err)


def test_cli_catalog_refuses_to_vend_credentials_to_an_open_network(
    s3: S3Endpoint, bucket: str, in_process: InProcess
) -> None:
    """``--vend-credentials`` on a non-loopback address without a token is one error line,
    exit 1: the lake's keys would go to anyone who reaches the port."""
    result = in_process(
        *("catalog", f"s3://{bucket}", "--endpoint-url", s3.url),
        *("--host", "0.0.0.0", "--port", "0", "--vend-credentials"),
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("lakelock: error: --vend-credentials on 0.0.0.0 without a token")


def test_cli_catalog_takes_no_commits_from_an_open_network_without_a_token(
    s3: S3Endpoint, bucket: str, lake: Lake, in_process: InProcess
) -> None:
    """A catalog that takes commits, on a non-loopback address, without a token is one error
    line, exit 1: anyone who reaches the port could change the lake. ``--read-only`` there
    is allowed (it changes nothing but the views) and says so in its banner. (The server the
    command's options make is served here, in this process: that the command serves it until
    Ctrl-C is the other tests'.)"""
    result = in_process(
        *("catalog", f"s3://{bucket}", "--endpoint-url", s3.url),
        *("--host", "0.0.0.0", "--port", "0"),
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "lakelock: error: a catalog that takes commits on 0.0.0.0 without a token"
    )
    args = build_parser().parse_args(
        [
            *("catalog", f"s3://{bucket}", "--endpoint-url", s3.url),
            *("--host", "0.0.0.0", "--port", "0", "--read-only"),
        ]
    )
    with cli_catalog.catalog_server(lake, args, prefix="", port=0, quiet=True) as server:
        banner = cli_catalog.catalog_banner(server)
        assert banner[0].endswith("no token; vends no credentials; read-only)")
        status, body = http_get(catalog_url(banner), "/v1/config")
        assert status == 200
        assert not any(e.startswith("POST") for e in orjson.loads(body)["endpoints"])


@PROCESS_TIMEOUT
def test_cli_serve_brings_up_the_catalog_beside_the_endpoint() -> None:
    """``lakelock serve --bucket B --catalog`` serves the embedded S3 endpoint and a catalog
    over ``s3://B``; both go down on Ctrl-C."""
    process = start_cli(
        "serve", "--port", "0", "--bucket", "served", "--catalog", "--catalog-port", "0"
    )
    try:
        banner = read_until(process, "Ctrl-C to stop.")
        endpoint = next(b.split()[-1] for b in banner if b.startswith("lakelock S3 endpoint"))
        url = catalog_url(banner)
        assert banner[banner.index("Ctrl-C to stop.") - 5].endswith(
            "(s3://served/, namespace 'lake'; no token; vends no credentials; "
            "commits from this machine only)"
        )
        status, body = http_get(url, "/v1/config")
        assert status == 200
        assert orjson.loads(body)["defaults"]["s3.endpoint"] == endpoint
        assert orjson.loads(http_get(url, "/v1/namespaces/lake/tables")[1]) == {"identifiers": []}
    finally:
        interrupt(process)


def test_the_command_line_default_namespace_is_the_catalogs() -> None:
    """The CLI keeps its own copy of the default (so every command does not import the
    server): it must be the catalog's."""
    assert cli_catalog.DEFAULT_NAMESPACE == DEFAULT_NAMESPACE


@pytest.mark.parametrize(
    "argv",
    [
        ("catalog", "--namespace", "a.b"),
        ("serve", "--port", "0", "--catalog", "--catalog-namespace", "a.b"),
    ],
)
def test_a_namespace_clients_read_as_two_levels_is_a_usage_error(
    s3: S3Endpoint, bucket: str, in_process: InProcess, argv: tuple[str, ...]
) -> None:
    """``--namespace a.b`` was served, but every REST client reads ``a.b.sales`` as table
    ``sales`` of the two-level namespace ``("a", "b")``, which the catalog never serves: no
    engine could name a table. It is a usage error (exit 2) naming the option, before
    anything is served; ``LakeCatalog`` refuses it too (InvalidNameError)."""
    url = () if argv[0] == "serve" else (f"s3://{bucket}", "--endpoint-url", s3.url)
    result = in_process(argv[0], *url, *argv[1:])
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1].endswith(
        "namespace: invalid namespace 'a.b': a namespace is one level, with no '.': clients "
        "read 'a.b' as the two levels 'a' and 'b'"
    )
    with pytest.raises(InvalidNameError, match="one level"):
        LakeCatalog(Lake(bucket, s3=s3.client()), namespace="a.b")
