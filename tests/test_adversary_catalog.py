"""Adversarial tests of the Iceberg REST catalog taking commits (README, "Iceberg and Delta
views; the Iceberg REST catalog"; docs/ARCHITECTURE.md, "The Iceberg REST catalog"): what an
engine hears when S3 fails around a commit that landed, and while the catalog reads what the
engine wrote (its manifest list and manifests) to plan the commit. pyiceberg's
``RestCatalog`` talks HTTP to a catalog started in-process over the embedded endpoint; its
files are written with S3 keys of its own, which the test bucket's policy does not bind."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitStateUnknownException, ServerError, ServiceUnavailableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.catalog import engine

EVENTS = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
)


#: Where pyiceberg writes its manifest lists and manifests for the table "events" (the view's
#: write.metadata.path): only the catalog reads them back.
ENGINE_METADATA = "views/events/iceberg/engine/"


@pytest.fixture
def server(lake: Lake, s3: S3Endpoint) -> Iterator[CatalogServer]:
    """A catalog over the test lake whose S3 client does not retry (lakelock's own retries
    without waiting): a store that keeps failing fails the request at once."""
    impatient = s3.client(retries={"mode": "standard", "total_max_attempts": 1})
    served = Lake(lake.bucket, prefix=lake.prefix, s3=impatient, retry=FAST_RETRY)
    running = CatalogServer(LakeCatalog(served), port=0).start()
    yield running
    running.close()


def test_a_commit_that_landed_while_its_view_could_not_be_written_is_not_a_retry_me(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """pyiceberg appends a row through the catalog; the lakelock commit lands, then S3
    throttles every write of the Iceberg view the answer is made from. The engine must hear
    that the commit's state is unknown (500, ``CommitStateUnknownException``: check, do not
    resend), not 503 ``ServiceUnavailableException``, which the REST spec defines as "not
    ready, wait and retry". What a user loses otherwise: the job, told the service was
    unavailable, runs its append again, and every row is committed twice. (Before, the
    answer was 503.)"""
    table = engine(server, s3).create_table("lake.events", EVENTS)
    rows = pa.table({"kind": pa.array(["a"]), "n": pa.array([1], pa.int64())})
    s3.inject("slowdown", operation="PutObject", prefix="views/")
    with pytest.raises(CommitStateUnknownException, match="do not commit it again"):
        table.append(rows)
    s3.clear_faults()
    assert [h.operation for h in lake.history("events")] == ["append", "create"]
    reloaded = engine(server, s3).load_table("lake.events")  # the next load mirrors it
    assert reloaded.scan().to_arrow().to_pylist() == [{"kind": "a", "n": 1}]


def test_a_create_that_landed_while_its_view_could_not_be_written_is_not_a_retry_me(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """pyiceberg creates a table through the catalog; the lakelock commit creating the
    dataset lands, then S3 throttles every write of the Iceberg view the answer is made
    from. The engine must not hear 503 ``ServiceUnavailableException`` (the REST spec's
    "not ready, wait and retry", which Iceberg's Java client retries by itself): the create
    is not idempotent (two engines creating one table must not both succeed), so a create
    sent again hears 409 "table already exists" and the job fails on the table it made. It
    hears a server error saying the table was created (``ServerError``, 500): load it, do
    not create it again; the next load mirrors it. (Before, the answer was 503.)"""
    s3.inject("slowdown", operation="PutObject", prefix="views/")
    with pytest.raises(ServerError, match="do not create it again"):
        engine(server, s3).create_table("lake.events", EVENTS)
    s3.clear_faults()
    assert [h.operation for h in lake.history("events")] == ["create"]
    table = engine(server, s3).load_table("lake.events")  # the next load mirrors it
    assert table.scan().to_arrow().num_rows == 0
    table.append(pa.table({"kind": pa.array(["a"]), "n": pa.array([1], pa.int64())}))
    assert lake.read("events").to_pylist() == [{"kind": "a", "n": 1}]


@pytest.mark.parametrize("what", [("snap-",), ()], ids=["manifest-list", "manifests"])
def test_a_store_failing_while_the_engines_manifests_are_read_is_not_a_bad_request(
    server: CatalogServer, lake: Lake, s3: S3Endpoint, what: tuple[str, ...]
) -> None:
    """pyiceberg appends a row; S3 throttles every read of what the engine wrote (its
    manifest list, or its manifests) while the catalog plans the commit. Nothing is
    committed, and the engine must hear that the service is unavailable for now (503, which
    Iceberg's Java client retries by itself, and pyiceberg's ``ServiceUnavailableError``),
    not 400 ``BadRequestException``, which says its request is malformed and will never be
    taken. What a user loses otherwise: a Spark or pyiceberg job fails on a passing S3
    blip, told its commit is invalid; the append sent again once S3 recovers commits it.
    (Before, the answer was 400 "manifest list ... cannot be read".)"""
    table = engine(server, s3).create_table("lake.events", EVENTS)
    rows = pa.table({"kind": pa.array(["a"]), "n": pa.array([1], pa.int64())})
    # A manifest list's name starts with snap-, a manifest's with its UUID's first hex digit.
    for start in what or "0123456789abcdef":
        s3.inject("slowdown", operation="GetObject", prefix=ENGINE_METADATA + start)
    with pytest.raises(ServiceUnavailableError):
        table.append(rows)
    s3.clear_faults()
    assert [h.operation for h in lake.history("events")] == ["create"]
    table = engine(server, s3).load_table("lake.events")
    table.append(rows)
    assert lake.read("events").to_pylist() == [{"kind": "a", "n": 1}]
