"""A web server that is not S3 is not an empty lake: lakelock says the endpoint does not
speak S3 instead of reporting a missing dataset."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import boto3
import pytest

from lakelock import Lake
from lakelock.errors import NotS3Error


@pytest.fixture
def web_server() -> Iterator[str]:
    """``python -m http.server``, on a free port: it answers 404 pages, not S3 errors."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_plain_web_server_is_not_an_empty_lake(web_server: str) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=web_server,
        aws_access_key_id="a",
        aws_secret_access_key="b",
        region_name="us-east-1",
    )
    lake = Lake("bucket", s3=client)
    with pytest.raises(NotS3Error, match="does not speak S3") as info:
        lake.read("events")
    assert info.value.server is not None
    assert "SimpleHTTP" in info.value.server
    with pytest.raises(NotS3Error):
        lake.registry.read()
