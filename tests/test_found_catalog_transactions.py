"""A catalog transaction resent after a lost answer: its commit id promise, broken today."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog

ENGINE = {"s3.access-key-id": "engine", "s3.secret-access-key": "x"}
EVENTS = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
)


@pytest.fixture
def server(lake: Lake) -> Iterator[CatalogServer]:
    started = CatalogServer(LakeCatalog(lake), port=0).start()
    yield started
    started.close()


def post(server: CatalogServer, path: str, body: Any) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.request("POST", path, body=orjson.dumps(body))
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_catalog_transaction_sent_twice_is_answered_as_committed(
    server: CatalogServer, lake: Lake
) -> None:
    """README: through ``lakelock catalog`` "the same request sent twice commits once"
    (answered as committed). A ``/v1/transactions/commit`` adding a column to one table
    and setting a property of another, sent again because its answer was lost, is answered
    409 CommitFailedException today ("commit id ... names another change"): the engine
    hears its transaction failed, while it landed."""
    catalog = RestCatalog("r", uri=server.url, **ENGINE)
    for name in ("one", "two"):
        catalog.create_table(f"lake.{name}", EVENTS)
    schema = orjson.loads(EVENTS.model_dump_json())
    schema["schema-id"] = 1
    schema["fields"].append({"id": 3, "name": "note", "type": "string", "required": False})
    transaction = {
        "table-changes": [
            {
                "identifier": {"namespace": ["lake"], "name": "one"},
                "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 0}],
                "updates": [
                    {"action": "add-schema", "schema": schema},
                    {"action": "set-current-schema", "schema-id": -1},
                ],
            },
            {
                "identifier": {"namespace": ["lake"], "name": "two"},
                "requirements": [],
                "updates": [{"action": "set-properties", "updates": {"owner": "etl"}}],
            },
        ]
    }
    assert post(server, "/v1/transactions/commit", transaction)[0] == 204
    version = lake.registry.read().version
    status, answer = post(server, "/v1/transactions/commit", transaction)
    assert status == 204, answer
    assert lake.registry.read().version == version
