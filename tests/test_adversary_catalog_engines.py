"""Adversarial tests of engines writing through the Iceberg REST catalog beside lakelock's own
writers (README, "Iceberg and Delta views; the Iceberg REST catalog"; docs/FORMAT.md rule 15
and "Commit ids"): requests captured from pyiceberg and sent by hand (twice, as a client whose
answer was lost; from two threads at once; racing a lakelock append or schema merge), and
hostile requests, each over HTTP to a catalog started in-process on port 0 over the embedded
S3 endpoint. The engine writes its files with S3 keys of its own, which the test bucket's
policy does not bind."""

from __future__ import annotations

import http.client
import json
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableRequest, StaticTable
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog
from lakelock._vacuum import vacuum
from lakelock.errors import SchemaMismatchError, SnapshotExpiredError
from lakelock.testing import S3Endpoint
from tests._support import wait_until
from tests._support.catalog import reads_as_lakelock
from tests._support.files import foreign, parquet
from tests._support.views import iceberg_properties

ENGINE = {"s3.access-key-id": "engine", "s3.secret-access-key": "x"}
EVENTS = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
)
PATH = "/v1/namespaces/lake/tables/events"


@pytest.fixture
def server(lake: Lake) -> Iterator[CatalogServer]:
    running = CatalogServer(LakeCatalog(lake), port=0).start()
    yield running
    running.close()


def events(kinds: list[str], ns: list[int]) -> pa.Table:
    return pa.table({"kind": pa.array(kinds, pa.string()), "n": pa.array(ns, pa.int64())})


class Captured(Exception):
    """Raised instead of sending a commit: the request it would have sent is ``body``."""

    def __init__(self, body: bytes) -> None:
        super().__init__("captured")
        self.body = body


class Capturing(RestCatalog):
    """pyiceberg writing its files and manifests as ever, but handing the commit request it
    would send to the test instead of sending it."""

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        name = table.name()
        request = CommitTableRequest(
            identifier={"namespace": list(name[:-1]), "name": name[-1]},
            requirements=requirements,
            updates=updates,
        )
        raise Captured(request.model_dump_json().encode())


def captured(server: CatalogServer, action: Callable[[Any], object]) -> bytes:
    """The commit request pyiceberg makes for ``action`` on the table ``events`` as loaded
    now (its files written, nothing committed)."""
    table = Capturing("c", uri=server.url, **ENGINE).load_table("lake.events")
    with pytest.raises(Captured) as held:
        action(table)
    return held.value.body


def post(server: CatalogServer, path: str, body: bytes) -> tuple[int, Any]:
    """POST ``body`` as it is: the status and the answer (parsed; None when empty)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        connection.request("POST", path, body=body)
        response = connection.getresponse()
        payload = response.read()
        return response.status, orjson.loads(payload) if payload else None
    finally:
        connection.close()


def engine(server: CatalogServer) -> RestCatalog:
    return RestCatalog("e", uri=server.url, **ENGINE)


def error_type(answer: Any) -> str:
    return str(answer["error"]["type"])


# -- a request sent again after its answer was lost ----------------------------------------------


def test_properties_sent_again_without_requirements_apply_again_after_a_change_of_their_keys(
    server: CatalogServer, lake: Lake
) -> None:
    """pyiceberg's ``set_properties`` sends no requirements, and nothing in its request tells
    it from the same change asked anew (docs/FORMAT.md, "Commit ids"). Sent again after its
    answer was lost, it commits nothing while the table still shows it (200, no version);
    once another writer set the key to another value, it applies again, as a new request of
    the same bytes would: owner is 'etl' again, in a new version."""
    engine(server).create_table("lake.events", EVENTS)
    body = captured(
        server, lambda t: t.transaction().set_properties({"owner": "etl"}).commit_transaction()
    )
    assert post(server, PATH, body)[0] == 200
    versions = len(lake.history("events"))
    assert post(server, PATH, body)[0] == 200
    lake.set_properties("events", {"tier": "gold"})  # another key: the table still shows it
    assert post(server, PATH, body)[0] == 200
    assert len(lake.history("events")) == versions + 1
    lake.set_properties("events", {"owner": "ops"})
    assert post(server, PATH, body)[0] == 200
    assert lake.registry.read().datasets["events"].properties["owner"] == "etl"
    assert len(lake.history("events")) == versions + 3


def test_a_schema_change_sent_again_after_another_schema_change_is_a_409(
    server: CatalogServer, lake: Lake
) -> None:
    """pyiceberg's ``update_schema`` asserts the schema it was made on. Sent again after its
    answer was lost it is answered as committed while the table still shows it; once another
    column was added after it, the table no longer does, and it is a 409 (its requirement
    fails), never applied again: the schema keeps both columns."""
    engine(server).create_table("lake.events", EVENTS)
    body = captured(server, lambda t: t.update_schema().add_column("score", LongType()).commit())
    assert post(server, PATH, body)[0] == 200
    versions = len(lake.history("events"))
    assert post(server, PATH, body)[0] == 200
    assert len(lake.history("events")) == versions
    later = engine(server).load_table("lake.events")
    with later.update_schema() as update:
        update.add_column("rank", LongType())
    status, answer = post(server, PATH, body)
    assert (status, error_type(answer)) == (409, "CommitFailedException")
    assert lake.registry.read().datasets["events"].schema.names == ["kind", "n", "score", "rank"]


def test_an_append_sent_again_after_a_lakelock_append_landed_is_answered_as_committed(
    server: CatalogServer, lake: Lake
) -> None:
    """An engine's append (requirement: main at the snapshot it read) lands, its answer is
    lost, a lakelock append lands, and the client sends its request again: its requirement
    no longer holds, yet it is answered 200 as committed (found by its commit id), and each
    row is there once."""
    engine(server).create_table("lake.events", EVENTS)
    body = captured(server, lambda t: t.append(events(["a"], [1])))
    assert b"assert-ref-snapshot-id" in body
    assert post(server, PATH, body)[0] == 200
    lake.append("events", events(["b"], [2]))
    status, answer = post(server, PATH, body)
    assert status == 200, answer
    assert sorted(lake.read("events")["n"].to_pylist()) == [1, 2]
    assert [h.operation for h in reversed(lake.history("events"))] == [
        "create",
        "append",
        "append",
    ]


# -- stale engine commits beside lakelock's writers ----------------------------------------------


def test_an_engines_column_added_in_another_case_after_lakelocks_merge_is_refused(
    server: CatalogServer, lake: Lake
) -> None:
    """An engine adds column ``Score`` while a lakelock append merges ``score``: the engine's
    request, with its requirements or without them (a raw client), must not land a second
    column of one name ignoring case (README: names are unique ignoring case)."""
    engine(server).create_table("lake.events", EVENTS)

    def add(table: Any) -> None:
        with table.update_schema() as update:
            update.add_column("Score", StringType())

    body = captured(server, add)
    lake.append(
        "events",
        events(["a"], [1]).append_column("score", pa.array([5], pa.int64())),
        schema_mode="merge",
    )
    request = orjson.loads(body)
    for sent in (request, {**request, "requirements": []}):
        status, answer = post(server, PATH, orjson.dumps(sent))
        assert status in (400, 409), answer
        assert lake.read("events").column_names == ["kind", "n", "score"]


def test_an_engines_stale_append_beside_a_lakelock_merge_is_refused_then_commits_on_refresh(
    server: CatalogServer, lake: Lake
) -> None:
    """An engine's append planned before a lakelock append merged a column is a 409 (its
    snapshot's parent is no longer main), nothing applied; the engine's append on the
    refreshed table commits, its rows null in the merged column."""
    table = engine(server).create_table("lake.events", EVENTS)
    body = captured(server, lambda t: t.append(events(["a"], [1])))
    merged = events(["b"], [2]).append_column("score", pa.array([5], pa.int64()))
    lake.append("events", merged, schema_mode="merge")
    status, answer = post(server, PATH, body)
    assert (status, error_type(answer)) == (409, "CommitFailedException")
    assert lake.read("events").num_rows == 1
    table.refresh().append(events(["a"], [1]).append_column("score", pa.array([None], pa.int64())))
    assert sorted(lake.read("events").to_pylist(), key=lambda r: r["n"]) == [
        {"kind": "a", "n": 1, "score": None},
        {"kind": "b", "n": 2, "score": 5},
    ]


# -- two commits at once -------------------------------------------------------------------------


def at_once(calls: list[Callable[[], tuple[int, Any]]]) -> list[tuple[int, Any]]:
    """Run ``calls`` on threads released together; their answers, in order."""
    barrier = threading.Barrier(len(calls))
    answers: list[tuple[int, Any]] = [(0, None)] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        answers[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def test_two_appends_planned_on_one_snapshot_sent_at_once_one_lands(
    server: CatalogServer, lake: Lake
) -> None:
    """Two engines' appends, each planned on the same snapshot (requirement: main there),
    sent at once on two threads to one catalog: exactly one is 200, the other 409
    CommitFailedException, and only the first's rows are there."""
    engine(server).create_table("lake.events", EVENTS)
    first = captured(server, lambda t: t.append(events(["a"], [1])))
    second = captured(server, lambda t: t.append(events(["b"], [2])))
    answers = at_once([lambda: post(server, PATH, first), lambda: post(server, PATH, second)])
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200, 409], answers
    landed = 1 if answers[0][0] == 200 else 2
    assert lake.read("events")["n"].to_pylist() == [landed]
    assert len(lake.history("events")) == 2


def test_appends_to_two_tables_sent_at_once_both_land(server: CatalogServer, lake: Lake) -> None:
    """Appends to two tables sent at once on two threads to one catalog both land, each
    table with its own rows."""
    catalog = engine(server)
    catalog.create_table("lake.events", EVENTS)
    catalog.create_table("lake.other", EVENTS)
    one = captured(server, lambda t: t.append(events(["a"], [1])))
    table = Capturing("c", uri=server.url, **ENGINE).load_table("lake.other")
    with pytest.raises(Captured) as held:
        table.append(events(["b"], [2]))
    other = held.value.body
    answers = at_once(
        [
            lambda: post(server, PATH, one),
            lambda: post(server, "/v1/namespaces/lake/tables/other", other),
        ]
    )
    assert [status for status, _ in answers] == [200, 200], answers
    assert lake.read("events")["n"].to_pylist() == [1]
    assert lake.read("other")["n"].to_pylist() == [2]


# -- hostile requests ----------------------------------------------------------------------------


def nothing_changed(lake: Lake, version: int) -> None:
    assert lake.registry.read().version == version


def test_a_transaction_change_without_its_table_is_a_bad_request(
    server: CatalogServer, lake: Lake
) -> None:
    """A transaction's table change with no identifier (the spec requires one there; a
    single table's commit names its table in the path) is a 400 naming it, not a 500 a
    client would send again."""
    engine(server).create_table("lake.events", EVENTS)
    version = lake.registry.read().version
    change = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"a": "b"}}]}
    status, answer = post(
        server, "/v1/transactions/commit", orjson.dumps({"table-changes": [change]})
    )
    assert (status, error_type(answer)) == (400, "BadRequestException"), answer
    assert "identifier" in answer["error"]["message"]
    nothing_changed(lake, version)


def nested(depth: int) -> dict[str, Any]:
    """A struct type nested ``depth`` levels deep."""
    field_id = 100
    inner: dict[str, Any] = {"type": "struct", "fields": []}
    for _ in range(depth):
        field_id += 1
        inner = {
            "type": "struct",
            "fields": [{"id": field_id, "name": "f", "type": inner, "required": False}],
        }
    return inner


def test_a_schema_nested_past_what_the_catalog_reads_is_a_bad_request(
    server: CatalogServer, lake: Lake
) -> None:
    """A create, or a commit adding a schema, that nests a struct hundreds of levels deep
    (within what JSON parsers take) is a 400 naming it, not a 500 from a recursion limit
    (pyiceberg's client reads a 500 as a ServerError to send again); nothing changes."""
    schema = {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "deep", "type": nested(300), "required": False}],
    }
    body = json.dumps({"name": "deep", "schema": schema}).encode()  # deeper than orjson writes
    status, answer = post(server, "/v1/namespaces/lake/tables", body)
    assert (status, error_type(answer)) == (400, "BadRequestException"), answer
    assert "nested too deeply" in answer["error"]["message"]
    assert "deep" not in lake.registry.read().datasets
    engine(server).create_table("lake.events", EVENTS)
    version = lake.registry.read().version
    added = {"action": "add-schema", "schema": {**schema, "schema-id": 1}}
    status, answer = post(server, PATH, json.dumps({"updates": [added]}).encode())
    assert (status, error_type(answer)) == (400, "BadRequestException"), answer
    nothing_changed(lake, version)


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        (PATH, b'{"updates": 5}', 400),
        (
            PATH,
            b'{"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", '
            b'"snapshot-id": "x"}], "updates": []}',
            400,
        ),
        (PATH, b"[]", 400),
        (PATH, b"\xff\xfe", 400),
        (PATH, b'{"updates": [{"action": "set-properties", "updates": {"a": "b"}}]}' * 2, 400),
        (PATH, b'{"snapshot": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400),
        ("/v1/namespaces/lake/tables/..%2F..%2Fmetastore", b'{"updates": []}', 404),
        ("/v1/namespaces/lake/tables/..", b'{"updates": []}', 404),
        ("/v1/namespaces/..%2Flake/tables/events", b'{"updates": []}', 404),
        (
            "/v1/namespaces/lake%1Fx/tables",
            b'{"name": "t", "schema": {"type": "struct", "fields": []}}',
            404,
        ),
        (
            "/v1/namespaces/lake/tables",
            b'{"name": "../x", "schema": {"type": "struct", "fields": []}}',
            400,
        ),
        (
            "/v1/namespaces/lake/tables",
            b'{"name": "a/b", "schema": {"type": "struct", "fields": []}}',
            400,
        ),
        (
            "/v1/namespaces/lake/tables",
            b'{"name": "", "schema": {"type": "struct", "fields": []}}',
            400,
        ),
        (
            "/v1/namespaces/lake/tables",
            b'{"name": "x\\u0000y", "schema": {"type": "struct", "fields": []}}',
            400,
        ),
        (
            "/v1/namespaces/lake/tables",
            b'{"name": 7, "schema": {"type": "struct", "fields": []}}',
            400,
        ),
        (
            "/v1/namespaces/lake/tables/..%2Fx",
            b'{"requirements": [{"type": "assert-create"}], '
            b'"updates": [{"action": "add-schema", "schema": {"type": "struct", "schema-id": 0, '
            b'"fields": []}}]}',
            400,
        ),
        ("/v1/transactions/commit", b'{"table-changes": [5]}', 400),
        ("/v1/transactions/commit", b'{"table-changes": {}}', 400),
    ],
)
def test_a_hostile_request_is_a_clear_4xx_and_changes_nothing(
    server: CatalogServer, lake: Lake, path: str, body: bytes, status: int
) -> None:
    """Wrong types, a body that is not one JSON object (or not UTF-8, or nested past
    orjson's limit), path traversal in a table's or namespace's name, a name no dataset
    takes, a transaction's changes that are not a list of objects: each is the 4xx given,
    with a message, and the registry does not move."""
    engine(server).create_table("lake.events", EVENTS)
    version = lake.registry.read().version
    got, answer = post(server, path, body)
    assert got == status, answer
    assert answer["error"]["message"]
    nothing_changed(lake, version)
    assert sorted(lake.registry.read().datasets) == ["events"]


# -- time travel ---------------------------------------------------------------------------------


def engine_wrote_then_vacuumed(server: CatalogServer, lake: Lake) -> int:
    """A lake keeping replaced versions for an hour: an engine appends, then overwrites
    (the catalog answering both snapshots), and vacuum, two hours later, deletes what only
    the first read. The first snapshot's id, which lakelock no longer reads."""
    lake.configure(retention="1h", create=True)
    table = engine(server).create_table("lake.events", EVENTS)
    table.append(events(["a"], [1]))
    first = table.metadata.current_snapshot_id
    table.overwrite(events(["b"], [2]))
    assert first is not None
    assert first in [s.snapshot_id for s in table.metadata.snapshots]
    later = time.time() + 2 * 3600
    assert not vacuum(lake.registry, dry_run=False, clock=lambda: later).failed
    with pytest.raises(SnapshotExpiredError):
        lake.read("events", version=first)
    return first


def every_snapshot_listed_reads_as_lakelock(loaded: Any, lake: Lake, gone: int) -> None:
    listed = [s.snapshot_id for s in loaded.metadata.snapshots]
    assert gone not in listed, listed
    for snapshot_id in listed:
        read = loaded.scan(snapshot_id=snapshot_id).to_arrow()
        reads_as_lakelock(read, lake, "events", snapshot_id)


def test_a_snapshot_the_catalog_lists_after_vacuum_reads_as_lakelock(
    server: CatalogServer, lake: Lake
) -> None:
    """After vacuum, every snapshot the catalog lists reads, through the catalog, what
    lakelock reads at that version; one vacuum may have emptied (lakelock's read of it is
    SnapshotExpiredError) is not offered (README: engines "read every version as lakelock
    does")."""
    gone = engine_wrote_then_vacuumed(server, lake)
    every_snapshot_listed_reads_as_lakelock(engine(server).load_table("lake.events"), lake, gone)


def test_a_snapshot_the_iceberg_view_lists_after_vacuum_reads_as_lakelock(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """After vacuum, every snapshot the Iceberg view's newest metadata lists reads what
    lakelock reads at that version (FORMAT.md: it lists "every snapshot mirrored that a
    reader may still ask for"). It listed [2, 3, 4], 2 and 3 replaced before the vacuum's
    horizon, until the dataset's next version: vacuum writes it again without them."""
    gone = engine_wrote_then_vacuumed(server, lake)
    location = lake.mirror("events").iceberg
    assert location is not None
    view = StaticTable.from_metadata(location, properties=iceberg_properties(s3.url))
    every_snapshot_listed_reads_as_lakelock(view, lake, gone)


# -- creates -------------------------------------------------------------------------------------


def staged(server: CatalogServer, name: str, rows: pa.Table) -> bytes:
    """The commit of a staged create (CREATE TABLE AS SELECT: ``assert-create``, the schema
    and a first snapshot) pyiceberg makes for table ``name`` with ``rows``, not sent."""
    transaction = Capturing("c", uri=server.url, **ENGINE).create_table_transaction(
        f"lake.{name}", EVENTS
    )
    transaction.append(rows)
    with pytest.raises(Captured) as held:
        transaction.commit_transaction()
    assert b"assert-create" in held.value.body
    return held.value.body


def test_a_create_as_select_sent_again_after_a_lakelock_append_is_answered_as_committed(
    server: CatalogServer, lake: Lake
) -> None:
    """A staged create's commit (the table and its first rows) lands, its answer is lost, a
    lakelock append lands, and the client sends it again: 200 as committed (not 409 "Table
    already exists", which pyiceberg raises as a failure of a create that landed), each row
    once."""
    body = staged(server, "events", events(["a"], [1]))
    assert post(server, PATH, body)[0] == 200
    lake.append("events", events(["b"], [2]))
    status, answer = post(server, PATH, body)
    assert status == 200, answer
    assert sorted(lake.read("events")["n"].to_pylist()) == [1, 2]
    assert [h.operation for h in reversed(lake.history("events"))] == ["create", "append"]


def test_two_creates_as_select_of_one_table_at_once_one_lands_whole(
    server: CatalogServer, lake: Lake
) -> None:
    """Two engines' staged creates of one table, committed at once on two threads: one is
    200, the other 409, and the table holds the first's rows only (never both, never one
    create's table with the other's rows)."""
    first = staged(server, "events", events(["a"], [1]))
    second = staged(server, "events", events(["b"], [2]))
    answers = at_once([lambda: post(server, PATH, first), lambda: post(server, PATH, second)])
    assert sorted(status for status, _ in answers) == [200, 409], answers
    landed = 1 if answers[0][0] == 200 else 2
    assert lake.read("events")["n"].to_pylist() == [landed]
    assert [h.operation for h in lake.history("events")] == ["create"]


# -- namespaces ----------------------------------------------------------------------------------


def test_a_namespace_spelt_in_another_unicode_form_is_the_same_namespace(lake: Lake) -> None:
    """A catalog started with namespace ``café`` (typed composed) and a client naming it
    decomposed (a Mac's file name, a copied identifier): the one namespace, as a table's
    name in either form is the one table (the catalog reads names as lakelock stores them,
    NFC)."""
    composed = unicodedata.normalize("NFC", "café")
    decomposed = unicodedata.normalize("NFD", "café")
    for served, sent in ((composed, decomposed), (decomposed, composed)):
        with CatalogServer(LakeCatalog(lake, namespace=served), port=0) as running:
            catalog = engine(running)
            assert catalog.load_namespace_properties(sent) == {}
            table = catalog.create_table((sent, f"t{len(served)}"), EVENTS)
            table.append(events(["a"], [1]))
            assert catalog.list_tables(served) == catalog.list_tables(sent)
    assert sorted(lake.registry.read().datasets) == ["t4", "t5"]


# -- schema changes beside lakelock's appends ----------------------------------------------------


def test_an_engines_added_column_beside_a_lakelock_append_of_the_old_schema_both_land(
    server: CatalogServer, lake: Lake
) -> None:
    """An engine adds a column while a lakelock append of the old schema lands first: the
    column's commit lands on top (the append changed no schema), the append's rows read
    null in it, and a second lakelock append of the old schema lands after it too."""
    engine(server).create_table("lake.events", EVENTS)

    def add(table: Any) -> None:
        with table.update_schema() as update:
            update.add_column("score", LongType())

    body = captured(server, add)
    lake.append("events", events(["a"], [1]))
    status, answer = post(server, PATH, body)
    assert status == 200, answer
    lake.append("events", events(["b"], [2]))
    assert sorted(lake.read("events").to_pylist(), key=lambda r: r["n"]) == [
        {"kind": "a", "n": 1, "score": None},
        {"kind": "b", "n": 2, "score": None},
    ]


# -- a request sent again while its first send is still in flight --------------------------------


def test_an_append_sent_again_while_its_first_send_is_held_lands_once(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """A client whose commit timed out (its first send held at the registry's first write)
    sends it again at once: both sends must end 200 (the second answered as committed, or
    the first's outcome), and the rows are there once, in one version."""
    engine(server).create_table("lake.events", EVENTS)
    body = captured(server, lambda t: t.append(events(["a"], [1])))
    s3.inject("stall", operation="PutObject", prefix="metastore/", count=1)
    first: list[tuple[int, Any]] = []
    sending = threading.Thread(target=lambda: first.append(post(server, PATH, body)))
    sending.start()
    try:
        wait_until(lambda: s3.stalled() == 1)
        again = post(server, PATH, body)
    finally:
        s3.release_stalls()
        sending.join(120)
    assert [status for status, _ in [*first, again]] == [200, 200], (first, again)
    assert lake.read("events")["n"].to_pylist() == [1]
    assert len(lake.history("events")) == 2


# -- stale engine commits without requirements ---------------------------------------------------


def test_an_overwrite_without_requirements_planned_before_a_lakelock_append_is_refused(
    server: CatalogServer, lake: Lake
) -> None:
    """A raw client's overwrite of the rows it saw (no requirements), planned before a
    lakelock append landed: a 409 (its snapshot's parent is no longer main), never a
    replacement of the append's rows, nor of what it saw beside them."""
    table = engine(server).create_table("lake.events", EVENTS)
    table.append(events(["a"], [1]))
    body = orjson.loads(captured(server, lambda t: t.overwrite(events(["a"], [10]))))
    lake.append("events", events(["a"], [2]))
    status, answer = post(server, PATH, orjson.dumps({**body, "requirements": []}))
    assert (status, error_type(answer)) == (409, "CommitFailedException"), answer
    assert sorted(lake.read("events")["n"].to_pylist()) == [1, 2]


def test_a_delete_without_requirements_of_rows_lakelock_replaced_is_refused(
    server: CatalogServer, lake: Lake
) -> None:
    """A raw client's delete (no requirements) of a file a lakelock overwrite replaced
    meanwhile is a 409, and the overwrite's rows stay."""
    table = engine(server).create_table("lake.events", EVENTS)
    table.append(events(["a"], [1]))
    body = orjson.loads(captured(server, lambda t: t.delete("n = 1")))
    lake.overwrite("events", events(["b"], [2]))
    status, answer = post(server, PATH, orjson.dumps({**body, "requirements": []}))
    assert (status, error_type(answer)) == (409, "CommitFailedException"), answer
    assert lake.read("events")["n"].to_pylist() == [2]


# -- transactions --------------------------------------------------------------------------------


def two_table_append(server: CatalogServer) -> bytes:
    """A transaction appending ``a`` to ``events`` and ``b`` to ``other`` (both created
    here), each change as pyiceberg planned it (its requirement on main), unsent."""
    catalog = engine(server)
    catalog.create_table("lake.events", EVENTS)
    catalog.create_table("lake.other", EVENTS)
    one = orjson.loads(captured(server, lambda t: t.append(events(["a"], [1]))))
    table = Capturing("c", uri=server.url, **ENGINE).load_table("lake.other")
    with pytest.raises(Captured) as held:
        table.append(events(["b"], [2]))
    return orjson.dumps({"table-changes": [one, orjson.loads(held.value.body)]})


def test_a_transaction_whose_table_lakelock_appended_to_while_it_was_read_applies_nowhere(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """A transaction appending to two tables (each change with pyiceberg's requirement on
    main) while a lakelock append lands on one of them between the catalog's check and its
    commit: a 409, neither table changed (a commit spanning datasets applies whole), the
    lakelock append's rows there."""
    transaction = two_table_append(server)
    before = lake.registry.read().datasets["other"].updated_version
    # The catalog's read of the engine's first manifest list waits (after the requirements).
    s3.inject("stall", operation="GetObject", prefix="views/events/iceberg/engine/", count=1)
    answers: list[tuple[int, Any]] = []
    sending = threading.Thread(
        target=lambda: answers.append(post(server, "/v1/transactions/commit", transaction))
    )
    sending.start()
    try:
        wait_until(lambda: s3.stalled() == 1)
        lake.append("events", events(["c"], [3]))
    finally:
        s3.release_stalls()
        sending.join(120)
    ((status, answer),) = answers
    assert (status, error_type(answer)) == (409, "CommitFailedException"), answer
    assert lake.read("events")["n"].to_pylist() == [3]
    assert lake.read("other").num_rows == 0
    assert lake.registry.read().datasets["other"].updated_version == before


# -- moves and drops -----------------------------------------------------------------------------

BY_KIND = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "kind"))


def engines_partition(server: CatalogServer, lake: Lake) -> int:
    """An engine's two rows appended to partition ``kind=a`` of ``events`` (its files hold
    the column ``kind``, as Iceberg writers' do): the version made."""
    table = engine(server).create_table("lake.events", EVENTS, partition_spec=BY_KIND)
    table.append(events(["a", "a"], [1, 2]))
    return lake.registry.read().datasets["events"].updated_version


@pytest.mark.parametrize("move", ["rename", "copy"])
def test_an_engines_partition_moved_by_lakelock_reads_alike_now_and_before(
    server: CatalogServer, lake: Lake, move: str
) -> None:
    """An engine appends to partition ``kind=a`` (its files hold the column ``kind``, as
    Iceberg writers' do) beside a lakelock append there (its files hold no partition
    column); lakelock renames (or copies) the partition to ``kind=z``. The engine's file is
    written again holding ``z`` (copied unchanged, Iceberg readers would read ``a``),
    lakelock's is copied byte for byte, and lakelock and pyiceberg through the catalog read
    the same rows at the current snapshot and at the one before the move."""
    engines_partition(server, lake)
    lake.append("events", events(["a"], [3]), partition_by=["kind"])
    before = lake.registry.read().datasets["events"].updated_version
    source = {f.checksum: f for f in lake.registry.files("events")}
    moving = lake.rename_partition if move == "rename" else lake.copy_partition
    moving("events", "kind=a", to_partition="kind=z")
    moved = lake.registry.files("events", partitions=["kind=z"])
    assert sum(f.checksum in source for f in moved) == 1  # lakelock's own, unchanged
    (written,) = [f for f in moved if f.checksum not in source]
    kind = written.stats.column("kind") if written.stats is not None else None
    assert kind is not None
    assert (kind.min, kind.max) == ("z", "z")
    expected = ["z"] * 3 if move == "rename" else ["a"] * 3 + ["z"] * 3
    assert sorted(lake.read("events")["kind"].to_pylist()) == expected
    loaded = engine(server).load_table("lake.events")
    reads_as_lakelock(loaded.scan().to_arrow(), lake, "events")
    reads_as_lakelock(loaded.scan(snapshot_id=before).to_arrow(), lake, "events", before)


def test_an_engines_partition_copied_to_another_dataset_unchanged_reads_alike(
    server: CatalogServer, lake: Lake
) -> None:
    """Copied to the same partition of another dataset, an engine's file keeps its stored
    value right: the copy is made as before, and reads alike through the catalog."""
    engines_partition(server, lake)
    lake.copy_partition("events", "kind=a", to_dataset="copied")
    assert sorted(lake.read("copied")["n"].to_pylist()) == [1, 2]
    loaded = engine(server).load_table("lake.copied")
    reads_as_lakelock(loaded.scan().to_arrow(), lake, "copied")


def test_a_file_whose_stored_partition_column_contradicts_its_manifest_is_a_bad_request(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """An engine's manifest puts a file in partition ``kind=a`` while the file stores
    ``kind='b'`` (a buggy or hostile writer: here, the bytes of its other file put where
    the first was): lakelock reads a file's partition columns from its partition, Iceberg
    readers take a stored column, so committed the two would read different rows. A 400
    naming the column, nothing committed."""
    table = engine(server).create_table("lake.events", EVENTS, partition_spec=BY_KIND)
    body = captured(server, lambda t: t.append(events(["a"], [1])))
    captured(server, lambda t: t.append(events(["b"], [1])))
    client = s3.client(access_key="engine")
    listed = client.list_objects_v2(Bucket=lake.bucket, Prefix=f"{lake.prefix}datasets/events/")
    keys = {o["Key"].split("/")[-2]: o for o in listed["Contents"]}
    assert keys["kind=a"]["Size"] == keys["kind=b"]["Size"]  # the manifest's size still holds
    other = client.get_object(Bucket=lake.bucket, Key=keys["kind=b"]["Key"])["Body"].read()
    client.put_object(Bucket=lake.bucket, Key=keys["kind=a"]["Key"], Body=other)
    version = lake.registry.read().version
    status, answer = post(server, PATH, body)
    assert (status, error_type(answer)) == (400, "BadRequestException"), answer
    assert "'kind'" in answer["error"]["message"]
    nothing_changed(lake, version)
    assert table.refresh().scan().to_arrow().num_rows == 0


def test_a_transaction_sent_again_while_its_first_send_is_held_lands_once(
    server: CatalogServer, lake: Lake, s3: S3Endpoint
) -> None:
    """A transaction appending to two tables, sent again while its first send is held at
    the registry's first write: both sends end 204, each table has its rows once, in one
    version for both."""
    transaction = two_table_append(server)
    s3.inject("stall", operation="PutObject", prefix="metastore/", count=1)
    first: list[tuple[int, Any]] = []
    sending = threading.Thread(
        target=lambda: first.append(post(server, "/v1/transactions/commit", transaction))
    )
    sending.start()
    try:
        wait_until(lambda: s3.stalled() == 1)
        again = post(server, "/v1/transactions/commit", transaction)
    finally:
        s3.release_stalls()
        sending.join(120)
    assert [status for status, _ in [*first, again]] == [204, 204], (first, again)
    assert lake.read("events")["n"].to_pylist() == [1]
    assert lake.read("other")["n"].to_pylist() == [2]
    datasets = lake.registry.read().datasets
    assert datasets["events"].updated_version == datasets["other"].updated_version


def test_a_foreign_file_storing_another_value_of_its_partition_column_is_refused(
    server: CatalogServer, lake: Lake
) -> None:
    """A file another tool wrote storing ``kind='b'``, registered by ``registry.commit`` in
    partition ``kind=a``: lakelock would read ``a`` (a partition column is read from the
    path) and Iceberg readers ``b``. It is refused, naming the file and the column, nothing
    committed; what is committed reads alike through the catalog."""
    lake.append("events", events(["a"], [0]), partition_by=["kind"])
    rows = events(["b"], [1])
    file = foreign(lake, "kind=a", parquet(rows), rows.num_rows, "foreign.parquet")
    version = lake.registry.read().version
    with pytest.raises(SchemaMismatchError, match=r"foreign\.parquet.*'kind'"):
        lake.registry.commit("events", add=[file], commit_id="foreign-1")
    nothing_changed(lake, version)
    reads_as_lakelock(engine(server).load_table("lake.events").scan().to_arrow(), lake, "events")


def test_a_foreign_file_storing_its_own_partition_value_commits_and_reads_alike(
    server: CatalogServer, lake: Lake
) -> None:
    """A foreign file storing ``kind='a'`` in partition ``kind=a`` (as Spark writes one)
    commits, and pyiceberg through the catalog reads what lakelock reads."""
    lake.append("events", events(["a"], [0]), partition_by=["kind"])
    rows = events(["a"], [1])
    file = foreign(lake, "kind=a", parquet(rows), rows.num_rows, "foreign.parquet")
    lake.registry.commit("events", add=[file], commit_id="foreign-1")
    assert sorted(lake.read("events")["n"].to_pylist()) == [0, 1]
    reads_as_lakelock(engine(server).load_table("lake.events").scan().to_arrow(), lake, "events")
