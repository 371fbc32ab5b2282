"""Promises of ``lakelock catalog`` that engines writing through it can break today."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, CommitFailedException, TableAlreadyExistsError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog

ENGINE = {"s3.access-key-id": "engine", "s3.secret-access-key": "x"}
EVENTS = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
)
BY_KIND = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "kind"))


@pytest.fixture
def server(lake: Lake) -> Iterator[CatalogServer]:
    started = CatalogServer(LakeCatalog(lake), port=0).start()
    yield started
    started.close()


class Resending(RestCatalog):
    """pyiceberg sending every commit twice, as a client does whose first answer was lost."""

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        super().commit_table(table, requirements, updates)
        return super().commit_table(table, requirements, updates)


def test_an_added_column_sent_twice_is_answered_as_committed(
    server: CatalogServer, lake: Lake
) -> None:
    """README: "the same request sent twice commits once" and is answered as committed.
    An add-column request whose answer was lost and is sent again is refused 409 today
    (its commit id is derived with the version the request is checked against, which the
    first send moved): the engine hears its schema change failed while it landed."""
    RestCatalog("r", uri=server.url, **ENGINE).create_table("lake.events", EVENTS)
    table = Resending("r", uri=server.url, **ENGINE).load_table("lake.events")
    with table.update_schema() as update:
        update.add_column("score", LongType())
    assert [e.operation for e in reversed(lake.history("events"))] == ["create", "add-columns"]


def test_set_properties_sent_twice_commits_once(server: CatalogServer, lake: Lake) -> None:
    """README: "the same request sent twice commits once". A set-properties request sent
    again (its answer lost) makes a second lakelock version today."""
    RestCatalog("r", uri=server.url, **ENGINE).create_table("lake.events", EVENTS)
    table = Resending("r", uri=server.url, **ENGINE).load_table("lake.events")
    with table.transaction() as transaction:
        transaction.set_properties({"owner": "etl"})
    assert len(lake.history("events")) == 2


def test_an_engine_cannot_register_a_live_file_a_second_time(
    server: CatalogServer, lake: Lake
) -> None:
    """FORMAT invariant 7 / rule 14: "A data file (its key) is live in a dataset at most
    once". pyiceberg's add_files of a file the engine appended through the catalog, already
    live (add_files without its own duplicate check; or two engines adding one file, each
    checking a stale table), is committed today: the key is live twice in the dataset and
    every reader gets its rows twice. Promised: refused (FileAlreadyRegisteredError, as a
    409/400), nothing committed."""
    table = RestCatalog("r", uri=server.url, **ENGINE).create_table(
        "lake.events", EVENTS, partition_spec=BY_KIND
    )
    table.append(pa.table({"kind": pa.array(["a"]), "n": pa.array([1], pa.int64())}))
    (live,) = lake.registry.files("events")
    version = lake.registry.read().version
    with pytest.raises((BadRequestError, CommitFailedException), match="registered"):
        table.add_files([f"s3://{lake.bucket}/{live.key}"], check_duplicate_files=False)
    assert [f.key for f in lake.registry.files("events")] == [live.key]
    assert lake.read("events").num_rows == 1
    assert lake.registry.read().version == version


def test_a_delete_whose_table_moved_before_it_landed_is_a_409_not_a_partial_delete(
    server: CatalogServer, lake: Lake, s3: Any
) -> None:
    """README: "A stale commit is a 409 the engine retries on its own" (and a copy-on-write
    delete is one ordinary lakelock commit). The catalog checks an engine's requirements
    (assert-ref-snapshot-id) against the view, then reads the engine's manifests, then
    commits: a lakelock append landing in between is not a stale commit today. pyiceberg's
    ``delete("n >= 1")`` is answered 200 at a version after the append, and the appended
    row with n = 5 is still there: the engine believes no row n >= 1 is left."""
    table = RestCatalog("r", uri=server.url, **ENGINE).create_table(
        "lake.events", EVENTS, partition_spec=BY_KIND
    )
    table.append(pa.table({"kind": pa.array(["a"]), "n": pa.array([1], pa.int64())}))
    # The catalog's read of the engine's manifest list waits (after its requirement check).
    s3.inject("stall", operation="GetObject", prefix="views/events/iceberg/engine/", count=1)
    outcome: list[object] = []

    def delete() -> None:
        try:
            table.delete("n >= 1")
            outcome.append("committed")
        except Exception as error:
            outcome.append(error)

    worker = threading.Thread(target=delete)
    worker.start()
    try:
        for _ in range(600):
            if s3.stalled():
                break
            worker.join(0.05)
        assert s3.stalled() == 1
        lake.append("events", pa.table({"kind": ["a"], "n": [5]}), partition_by=["kind"])
    finally:
        s3.release_stalls()
        worker.join(60)
    assert outcome, "the delete did not return"
    if outcome[0] == "committed":
        assert lake.read("events").filter(pc.field("n") >= 1).num_rows == 0


def test_two_engines_creating_one_table_at_once_one_hears_it_exists(
    server: CatalogServer, lake: Lake, s3: Any, client: Any
) -> None:
    """Iceberg REST (and the catalog's own check): creating a table that exists is 409
    AlreadyExistsException. Two engines creating ``lake.events`` at once through two
    catalogs on one lake both hear "created" today: the catalog checks that the name is
    free, then commits a "create" that the registry applies to the dataset the other engine
    made meanwhile. Each pipeline believes it owns a new, empty table (the history shows
    two creates)."""
    other = CatalogServer(LakeCatalog(Lake(lake.bucket, s3=client)), port=0).start()
    try:
        # The first catalog's commit waits at its first registry write.
        s3.inject("stall", operation="PutObject", prefix="metastore/", count=1)
        outcome: list[object] = []

        def create() -> None:
            try:
                RestCatalog("r", uri=server.url, **ENGINE).create_table("lake.events", EVENTS)
                outcome.append("created")
            except Exception as error:
                outcome.append(error)

        worker = threading.Thread(target=create)
        worker.start()
        try:
            for _ in range(600):
                if s3.stalled():
                    break
                worker.join(0.05)
            assert s3.stalled() == 1
            RestCatalog("r", uri=other.url, **ENGINE).create_table("lake.events", EVENTS)
        finally:
            s3.release_stalls()
            worker.join(60)
    finally:
        other.close()
    assert outcome, "the first create did not return"
    assert isinstance(outcome[0], TableAlreadyExistsError), outcome
    assert [e.operation for e in lake.history("events")] == ["create"]
