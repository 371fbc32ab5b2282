"""Adversarial tests of commits sent again through the Iceberg REST catalog (README, "Iceberg
and Delta views; the Iceberg REST catalog"; docs/ARCHITECTURE.md, "The Iceberg REST
catalog"): an engine whose answer was lost sends its request again, and must hear that it
was committed, whatever requirements the request carries. pyiceberg's ``RestCatalog`` talks
HTTP to a catalog started in-process over the embedded endpoint; its files are written with
S3 keys of its own, which the test bucket's policy does not bind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError
from pyiceberg.schema import Schema
from pyiceberg.table.update import AssertTableUUID
from pyiceberg.types import LongType, NestedField, StringType

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog
from lakelock._layout import INTENT_PREFIX
from tests._support import FAST_RETRY, StallAndRace
from tests._support.catalog import ENGINE, events
from tests._support.simtime import SimTime

EVENTS = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
)


@pytest.fixture
def server(lake: Lake) -> Iterator[CatalogServer]:
    running = CatalogServer(LakeCatalog(lake), port=0).start()
    yield running
    running.close()


class ResendingWithoutRequirements(RestCatalog):
    """A client that sends its commits without requirements (the REST spec makes them
    optional) and sends each one twice, as a client does whose first answer was lost."""

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        super().commit_table(table, (), updates)
        return super().commit_table(table, (), updates)


def test_an_append_without_requirements_sent_again_is_answered_as_committed(
    server: CatalogServer, lake: Lake
) -> None:
    """An append sent without requirements lands, its answer is lost, and the client sends the
    same request again: it must be answered as committed (its commit id is recorded), as a
    request with requirements is. What a user loses otherwise: the resent request heard 409
    (its snapshot's parent is no longer main: "refresh and retry"), the engine's retry on the
    refreshed table then a 400 saying "nothing was committed" for rows that are committed, so
    the job fails and a pipeline trusting the message runs its append again, every row
    twice."""
    RestCatalog("lakelock", uri=server.url, **ENGINE).create_table("lake.events", EVENTS)
    table = ResendingWithoutRequirements("r", uri=server.url, **ENGINE).load_table("lake.events")
    table.append(events(["a", "b"], [1, 2]))
    table.overwrite(events(["c"], [3]))
    assert [h.operation for h in reversed(lake.history("events"))] == [
        "create",
        "append",
        "overwrite",
    ]
    assert lake.read("events").to_pylist() == [{"kind": "c", "n": 3}]


def test_an_engine_file_older_than_half_the_vacuum_floor_is_a_bad_request_not_a_retry(
    server: CatalogServer, lake: Lake
) -> None:
    """An engine writes its file, then commits it through the catalog 45 minutes later by the
    server's clock: older than half the vacuum floor (an hour), the file may be vacuumed
    before the commit lands, and lakelock refuses it (``ObjectTooOldError``, nothing
    committed). The engine must hear a 400 naming it: sending the same files again can never
    commit them. What a user loses otherwise: a 409 ``CommitFailedException`` ("refresh and
    retry"), which pyiceberg (and Spark) retry with the same files, the catalog reading every
    file through its checksum again each time, to end in a concurrent-update error that
    says nothing of what to do (write the data again)."""
    sim = SimTime(start=time.time())
    sim.attach(lake.client)
    RestCatalog("lakelock", uri=server.url, **ENGINE).create_table("lake.events", EVENTS)

    class Late(RestCatalog):
        def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
            sim.advance(45 * 60)  # the job's files were written 45 minutes ago
            return super().commit_table(table, requirements, updates)

    table = Late("r", uri=server.url, **ENGINE).load_table("lake.events")
    with pytest.raises(BadRequestError, match="vacuum floor"):
        table.append(events(["a"], [1]))
    assert [h.operation for h in lake.history("events")] == ["create"]


def test_an_engine_file_holding_a_column_a_restore_dropped_is_refused_not_committed_unread(
    server: CatalogServer, lake: Lake
) -> None:
    """An engine loads the table after adding column ``score``; lakelock restores the version
    before the column (dropping it); the engine then appends rows with scores. Its commit is
    stale (409), pyiceberg retries it on the refreshed table with the same file, which holds
    ``score``: the catalog must refuse it (400 naming the column), nothing committed. What a
    user loses otherwise: the append is answered as committed, and every score it wrote is
    gone from every read (lakelock's, the Iceberg and Delta views'), with no error."""
    catalog = RestCatalog("lakelock", uri=server.url, **ENGINE)
    table = catalog.create_table("lake.events", EVENTS)
    table.append(events(["a"], [1]))
    before = lake.registry.read().datasets["events"].updated_version
    with table.update_schema() as update:
        update.add_column("score", LongType())
    table = catalog.load_table("lake.events")
    lake.restore("events", version=before)
    scored = events(["c"], [3]).append_column("score", pa.array([9], pa.int64()))
    with pytest.raises(BadRequestError, match="holds column 'score', which the table lacks"):
        table.append(scored)
    assert lake.history("events")[0].operation == "restore"
    assert lake.read("events").to_pylist() == [{"kind": "a", "n": 1}]


class WithoutRequirements(RestCatalog):
    """A client that sends its commits with no requirements but the table's uuid (the REST
    spec makes them optional; pyiceberg sends only ``assert-table-uuid`` for some)."""

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        kept = tuple(r for r in requirements if isinstance(r, AssertTableUUID))
        return super().commit_table(table, kept, updates)


def test_a_restore_landing_between_the_plan_and_the_commit_cannot_slip_a_dropped_column_past(
    server: CatalogServer,
    lake: Lake,
    client: Any,
    bucket: str,
    stall_and_race: StallAndRace,
) -> None:
    """An engine appends rows with scores, without requirements, to a table that has column
    ``score``: the catalog plans the commit on the table as read (the file's columns are the
    table's), and while the commit's first write (its intent) is held, another lakelock
    client restores the version before the column (dropping it). The commit then applies on
    the restored dataset: it must be refused (a 409; pyiceberg retries on the refreshed
    table and hears the 400 naming the column), nothing committed. What a user loses
    otherwise: the append is answered as committed, and every score it wrote is gone from
    every read, with no error."""
    catalog = RestCatalog("lakelock", uri=server.url, **ENGINE)
    catalog.create_table("lake.events", EVENTS).append(events(["a"], [1]))
    before = lake.registry.read().datasets["events"].updated_version
    table = WithoutRequirements("r", uri=server.url, **ENGINE).load_table("lake.events")
    with table.update_schema() as update:
        update.add_column("score", LongType())
    scored = events(["c"], [3]).append_column("score", pa.array([9], pa.int64()))
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    try:
        with pytest.raises(BadRequestError, match="holds column 'score', which the table lacks"):
            stall_and_race(
                lambda: table.append(scored),
                lambda: other.restore("events", version=before),
                prefix=INTENT_PREFIX,
            )
    finally:
        other.close()
    assert lake.history("events")[0].operation == "restore"
    assert lake.read("events").to_pylist() == [{"kind": "a", "n": 1}]
