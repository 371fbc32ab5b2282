"""Engines writing through ``lakelock catalog``: pyiceberg's ``RestCatalog`` and DuckDB's
``ATTACH ... (TYPE iceberg)`` create tables and commit appends, overwrites, deletes and added
columns, each one lakelock commit, over HTTP to a catalog started in-process on port 0 over the
embedded S3 endpoint. The engines write their files with S3 keys of their own ("engine"),
which the test bucket's lakelock policy does not bind (an engine's PUTs are plain ones)."""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import unicodedata
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, TableAlreadyExistsError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from lakelock import Lake
from lakelock._catalog import CatalogServer, LakeCatalog
from lakelock._catalog._protocol import WRITE_ENDPOINTS
from lakelock._connection import Connection
from lakelock._engines import s3_secret_sql, sql_string
from lakelock.testing import S3Endpoint
from tests._support import CLI_ENV, REPO, wait_until
from tests._support.catalog import (
    ENGINE,
    ENGINE_KEY,
    TOKEN,
    bearer,
    duckdb_with_iceberg,
    engine,
    events,
    reads_as_lakelock,
)
from tests._support.files import datafile, registered_unchecked

#: The S3 keys engines write with: not the principal the test bucket's policy binds.
ServeFn = Callable[..., CatalogServer]


@pytest.fixture
def serve(lake: Lake) -> Iterator[ServeFn]:
    """Start catalogs over the test lake on port 0; each is closed after the test."""
    servers: list[CatalogServer] = []

    def start(
        *,
        token: str | None = None,
        on: Lake | None = None,
        log: Callable[[str], None] | None = None,
    ) -> CatalogServer:
        server = CatalogServer(LakeCatalog(on or lake), port=0, token=token, log=log).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


EVENTS = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
)
BY_KIND = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "kind"))


def post(server: CatalogServer, path: str, body: Any, **headers: str) -> tuple[int, Any]:
    """POST ``body`` (JSON, or bytes as they are) to the catalog: the status and the answer
    (parsed; None when empty)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        connection.request("POST", path, body=data, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        return response.status, orjson.loads(payload) if payload else None
    finally:
        connection.close()


def operations(lake: Lake, name: str) -> list[str]:
    return [entry.operation for entry in reversed(lake.history(name))]


def in_the_background(call: Callable[[], object]) -> Future[object]:
    """``call`` run on a thread: its future holds what it returned or the error it raised."""
    outcome: Future[object] = Future()

    def run() -> None:
        try:
            call()
            outcome.set_result(None)
        except Exception as error:  # what the caller heard is what the test checks
            outcome.set_result(error)

    threading.Thread(target=run, daemon=True).start()
    return outcome


def wait_for_stall(s3: S3Endpoint) -> None:
    """Until one request is held by the endpoint's ``stall`` fault."""
    wait_until(lambda: s3.stalled() == 1)


# -- pyiceberg ---------------------------------------------------------------------------------


def test_pyiceberg_writes_through_the_catalog_and_every_version_reads_alike(
    serve: ServeFn, lake: Lake
) -> None:
    """pyiceberg creates a partitioned table and commits two appends, an overwrite with a
    filter, a delete with a filter, an added column and an append using it: each is exactly
    one lakelock commit, the engine's files are the dataset's files (in their partition's
    folder, with the manifests' statistics), and after every step and at every snapshot id
    pyiceberg reads exactly what lakelock reads at that version."""
    table = engine(serve()).create_table("lake.events", EVENTS, partition_spec=BY_KIND)
    assert table.properties["write.delete.mode"] == "copy-on-write"

    def step(action: Callable[[], object], operation: str) -> None:
        before = len(lake.history("events"))
        action()
        assert len(lake.history("events")) == before + 1, operation
        assert operations(lake, "events")[-1] == operation
        reads_as_lakelock(table.scan().to_arrow(), lake, "events")

    step(lambda: table.append(events(["a", "b", "a"], [1, 2, 3])), "append")
    step(lambda: table.append(events(["c"], [4])), "append")
    step(
        lambda: table.overwrite(events(["a"], [10]), overwrite_filter="kind == 'a'"),
        "overwrite",
    )
    step(lambda: table.delete("n >= 4"), "delete")

    def add_column() -> None:
        with table.update_schema() as update:
            update.add_column("score", LongType())

    step(add_column, "add-columns")
    with_score = events(["z"], [7]).append_column("score", pa.array([5], pa.int64()))
    step(lambda: table.append(with_score), "append")
    assert lake.read("events").sort_by("n").to_pylist() == [
        {"kind": "b", "n": 2, "score": None},
        {"kind": "z", "n": 7, "score": 5},
    ]
    for snapshot in table.metadata.snapshots:
        version = int(snapshot.summary["lakelock.version"])
        then = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        reads_as_lakelock(then, lake, "events", version)
    for f in lake.registry.files("events"):
        assert f.key.startswith(f"datasets/events/{f.partition_path}/")
        assert f.stats is not None
        n = f.stats.column("n")
        assert n is not None
        assert (n.min is not None, n.nulls) == (True, 0)


def test_a_stale_requirement_is_a_409_and_the_engines_own_retry_commits_once(
    serve: ServeFn, lake: Lake
) -> None:
    """A commit made against a version another writer has replaced (a lakelock append
    landed in between) is refused with 409 CommitFailedException, changing nothing;
    pyiceberg's own retry refreshes the table and commits again: each row once, one version
    per commit."""
    requests: list[str] = []
    table = engine(serve(log=requests.append)).create_table(
        "lake.events", EVENTS, partition_spec=BY_KIND
    )
    lake.append("events", events(["a"], [1]), partition_by=["kind"])
    table.append(events(["b"], [2]))
    commits = [line for line in requests if '"POST /v1/namespaces/lake/tables/events ' in line]
    assert [line.split()[-2] for line in commits] == ["409", "200"]
    assert operations(lake, "events") == ["create", "append", "append"]
    assert sorted(lake.read("events")["n"].to_pylist()) == [1, 2]
    reads_as_lakelock(table.scan().to_arrow(), lake, "events")


class Resending(RestCatalog):
    """pyiceberg sending every commit twice, as a client does whose first answer was lost."""

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        super().commit_table(table, requirements, updates)
        return super().commit_table(table, requirements, updates)


def test_a_commit_sent_twice_is_applied_once(serve: ServeFn, lake: Lake) -> None:
    """The same commit request sent again (its answer lost) is answered as committed, not
    applied twice and not refused: its commit id comes from the snapshot it adds."""
    server = serve()
    Resending("r", uri=server.url, **ENGINE).create_table("lake.events", EVENTS)
    table = Resending("r", uri=server.url, **ENGINE).load_table("lake.events")
    table.append(events(["a", "b"], [1, 2]))
    table.overwrite(events(["c"], [3]))
    assert operations(lake, "events") == ["create", "append", "overwrite"]
    assert lake.read("events").to_pylist() == [{"kind": "c", "n": 3}]


def test_an_added_column_sent_twice_is_answered_as_committed(serve: ServeFn, lake: Lake) -> None:
    """An add-column request sent again after its answer was lost is answered as committed."""
    server = serve()
    engine(server).create_table("lake.events", EVENTS)
    table = Resending("r", uri=server.url, **ENGINE).load_table("lake.events")
    with table.update_schema() as update:
        update.add_column("score", LongType())
    assert operations(lake, "events") == ["create", "add-columns"]
    assert lake.read("events").column_names == ["kind", "n", "score"]


def test_set_properties_sent_twice_commits_once(serve: ServeFn, lake: Lake) -> None:
    """A set-properties request sent again after its answer was lost makes no second version."""
    server = serve()
    engine(server).create_table("lake.events", EVENTS)
    table = Resending("r", uri=server.url, **ENGINE).load_table("lake.events")
    with table.transaction() as transaction:
        transaction.set_properties({"owner": "etl"})
    assert len(lake.history("events")) == 2
    assert lake.registry.read().datasets["events"].properties["owner"] == "etl"


def test_the_properties_a_table_records_are_the_ones_an_engine_loads(
    serve: ServeFn, lake: Lake
) -> None:
    """Properties given at the create, set by an engine's commit or by lakelock's
    ``set_properties`` are the table's properties every engine loads, and an engine removes
    one it sees. What a user loses otherwise: the catalog records them but the table answers
    without them, so a pipeline reading its own ``owner`` back finds nothing, and pyiceberg's
    ``remove_properties`` of one fails in the client (``KeyError``) before it is sent."""
    catalog = engine(serve())
    table = catalog.create_table("lake.events", EVENTS, properties={"owner": "etl"})
    assert table.properties["owner"] == "etl"
    with table.transaction() as transaction:
        transaction.set_properties({"team": "data"})
    lake.set_properties("events", {"tier": "gold"})
    loaded = catalog.load_table("lake.events")
    assert {k: loaded.properties.get(k) for k in ("owner", "team", "tier")} == {
        "owner": "etl",
        "team": "data",
        "tier": "gold",
    }
    assert loaded.properties["write.format.default"] == "parquet"  # the steering stays
    with loaded.transaction() as transaction:
        transaction.remove_properties("owner")
    assert "owner" not in catalog.load_table("lake.events").properties
    assert "owner" not in lake.registry.read().datasets["events"].properties


def test_an_engine_cannot_register_a_live_file_a_second_time(serve: ServeFn, lake: Lake) -> None:
    """add_files of a file live in the dataset already is a 400 naming it, nothing committed."""
    table = engine(serve()).create_table("lake.events", EVENTS, partition_spec=BY_KIND)
    table.append(events(["a"], [1]))
    (live,) = lake.registry.files("events")
    version = lake.registry.read().version
    with pytest.raises(BadRequestError, match="registered"):
        table.add_files([f"s3://{lake.bucket}/{live.key}"], check_duplicate_files=False)
    assert [f.key for f in lake.registry.files("events")] == [live.key]
    assert lake.read("events").num_rows == 1
    assert lake.registry.read().version == version


class Unconditional(RestCatalog):
    """pyiceberg sending its commits without requirements, as a raw client may."""

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        return super().commit_table(table, (), updates)


def test_two_engines_registering_one_file_at_once_one_is_refused(
    serve: ServeFn, lake: Lake, s3: S3Endpoint, client: Any
) -> None:
    """Two engines adding one file at once: exactly one hears a 400, and the file is live
    once. Which one depends on where the first is held: at its swap, the other's fold may
    apply the first's intent before its own commit, which then finds the file live."""
    server, other = serve(), serve(on=Lake(lake.bucket, prefix=lake.prefix, s3=client))
    engine(server).create_table("lake.events", EVENTS)
    (written,) = lake.write("events", events(["a"], [1]))
    path = f"s3://{lake.bucket}/{written.key}"
    first = Unconditional("r", uri=server.url, **ENGINE).load_table("lake.events")
    second = Unconditional("r", uri=other.url, **ENGINE).load_table("lake.events")
    # The first engine's commit waits at its first registry write, after the catalog's checks.
    s3.inject("stall", operation="PutObject", prefix="metastore/", count=1)
    outcome = in_the_background(lambda: first.add_files([path], check_duplicate_files=False))
    try:
        wait_for_stall(s3)
        try:
            theirs: object = second.add_files([path], check_duplicate_files=False)
        except BadRequestError as refused:
            theirs = refused
    finally:
        s3.release_stalls()
    heard = [isinstance(result, BadRequestError) for result in (outcome.result(60), theirs)]
    assert sorted(heard) == [False, True], (outcome.result(0), theirs)
    assert [f.key for f in lake.registry.files("events")] == [written.key]
    assert lake.read("events")["n"].to_pylist() == [1]


def test_a_delete_whose_table_moved_before_it_landed_is_a_409(
    serve: ServeFn, lake: Lake, s3: S3Endpoint
) -> None:
    """A delete planned before a lakelock append landed is a 409, never a 200 beside the append."""
    requests: list[str] = []
    table = engine(serve(log=requests.append)).create_table(
        "lake.events", EVENTS, partition_spec=BY_KIND
    )
    table.append(events(["a"], [1]))
    # The catalog's read of the engine's manifest list waits (after its requirement check).
    s3.inject("stall", operation="GetObject", prefix="views/events/iceberg/engine/", count=1)
    outcome = in_the_background(lambda: table.delete("n >= 1"))
    try:
        wait_for_stall(s3)
        lake.append("events", events(["a"], [5]), partition_by=["kind"])
    finally:
        s3.release_stalls()
    # pyiceberg's own retry then finds the append's rows match its filter, and gives up.
    assert isinstance(outcome.result(60), Exception), outcome.result(0)
    commits = [line for line in requests if '"POST /v1/namespaces/lake/tables/events ' in line]
    assert [line.split()[-2] for line in commits] == ["200", "409"]
    assert sorted(lake.read("events")["n"].to_pylist()) == [1, 5]


def test_two_engines_creating_one_table_at_once_one_hears_it_exists(
    serve: ServeFn, lake: Lake, s3: S3Endpoint, client: Any
) -> None:
    """Two engines creating one table at once through two catalogs: exactly one hears 409
    AlreadyExists, and the dataset is created once. Which one depends on where the first is
    held: at its intent, the other's create lands first; at its swap, the other's fold may
    apply the first's intent before its own create, which then finds the table."""
    first, other = serve(), serve(on=Lake(lake.bucket, prefix=lake.prefix, s3=client))
    # The first catalog's commit waits at its first registry write.
    s3.inject("stall", operation="PutObject", prefix="metastore/", count=1)
    outcome = in_the_background(lambda: engine(first).create_table("lake.events", EVENTS))
    try:
        wait_for_stall(s3)
        try:
            theirs: object = engine(other).create_table("lake.events", EVENTS)
        except TableAlreadyExistsError as refused:
            theirs = refused
    finally:
        s3.release_stalls()
    heard = [isinstance(result, TableAlreadyExistsError) for result in (outcome.result(60), theirs)]
    assert sorted(heard) == [False, True], (outcome.result(0), theirs)
    assert operations(lake, "events") == ["create"]


def test_what_lakelock_cannot_hold_is_refused_naming_it_and_nothing_changes(
    serve: ServeFn, lake: Lake, s3: S3Endpoint
) -> None:
    """A partition transform that is not identity, a renamed or retyped column, a
    merge-on-read property, a file of another bucket or outside its dataset's folder, a
    manifest list that does not exist, one naming delete files, an unknown update and a body
    that is not JSON: each is a 400 naming what is refused, and the registry does not move."""
    server = serve()
    catalog = engine(server)
    table = catalog.create_table(
        "lake.events",
        Schema(*EVENTS.fields, NestedField(3, "small", IntegerType(), required=False)),
        partition_spec=BY_KIND,
    )
    version = lake.registry.read().version
    with pytest.raises(BadRequestError, match="transform bucket"):
        catalog.create_table(
            "lake.hashed",
            EVENTS,
            partition_spec=PartitionSpec(PartitionField(2, 1000, BucketTransform(4), "b")),
        )
    renaming = pytest.raises(BadRequestError, match="renaming column 'n' to 'm'")
    with renaming, table.update_schema() as update:
        update.rename_column("n", "m")
    retyping = pytest.raises(BadRequestError, match="changing the type of column 'small'")
    with retyping, table.update_schema() as update:
        update.update_column("small", LongType())
    merge_on_read = pytest.raises(BadRequestError, match=r"write\.delete\.mode")
    with merge_on_read, table.transaction() as transaction:
        transaction.set_properties({"write.delete.mode": "merge-on-read"})
    client = s3.client(access_key=ENGINE_KEY)
    s3.create_bucket("elsewhere")
    body = pa.BufferOutputStream()
    small = pa.array([1], pa.int32())
    pq.write_table(pa.table({"kind": ["a"], "n": [1], "small": small}), body)
    client.put_object(Bucket="elsewhere", Key="f.parquet", Body=body.getvalue().to_pybytes())
    with pytest.raises(BadRequestError, match="is not in this lake"):
        table.add_files(["s3://elsewhere/f.parquet"])
    misplaced = f"{lake.prefix}datasets/eventsx/f.parquet"
    client.put_object(Bucket=lake.bucket, Key=misplaced, Body=body.getvalue().to_pybytes())
    with pytest.raises(BadRequestError, match="not in the dataset's folder"):
        table.add_files([f"s3://{lake.bucket}/{misplaced}"])
    path = "/v1/namespaces/lake/tables/events"
    snapshot = {
        "snapshot-id": 99,
        "parent-snapshot-id": table.metadata.current_snapshot_id,
        "sequence-number": 9,
        "timestamp-ms": 1,
        "manifest-list": f"s3://{lake.bucket}/{lake.prefix}views/events/iceberg/engine/no.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    ref = {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 99}
    missing = {"updates": [{"action": "add-snapshot", "snapshot": snapshot}, ref]}
    deletes = {**snapshot, "manifest-list": delete_files_list(table, snapshot_id=99)}
    delete_files = {"updates": [{"action": "add-snapshot", "snapshot": deletes}, ref]}
    for request, message in [
        (missing, "does not exist"),
        (delete_files, "row-level deletes (merge-on-read) are not supported"),
        ({"updates": [{"action": "remove-snapshots", "snapshot-ids": [1]}]}, "remove-snapshots"),
        ({"updates": [{"action": "no-such-update"}]}, "malformed request"),
        (b"{not json", "not JSON"),
    ]:
        status, answer = post(server, path, request)
        assert status == 400, request
        assert answer["error"]["type"] == "BadRequestException"
        assert message in answer["error"]["message"]
    assert lake.registry.read().version == version


def delete_files_list(table: Any, *, snapshot_id: int) -> str:
    """A manifest list, written by pyiceberg's writer where the engine writes, naming one
    manifest of delete files (as a merge-on-read delete would): its location."""
    from pyiceberg.manifest import ManifestContent, ManifestFile, write_manifest_list

    location = f"{table.properties['write.metadata.path']}/snap-deletes.avro"
    manifest = ManifestFile.from_args(
        manifest_path=f"{table.properties['write.metadata.path']}/deletes.avro",
        manifest_length=100,
        partition_spec_id=0,
        content=ManifestContent.DELETES,
        sequence_number=9,
        min_sequence_number=9,
        added_snapshot_id=snapshot_id,
        added_files_count=1,
        existing_files_count=0,
        deleted_files_count=0,
        added_rows_count=1,
        existing_rows_count=0,
        deleted_rows_count=0,
    )
    output = table.io.new_output(location)
    parent = table.metadata.current_snapshot_id
    with write_manifest_list(2, output, snapshot_id, parent, 9, "deflate") as writer:
        writer.add_manifests([manifest])
    return str(location)


def test_a_view_mirrored_before_views_steered_engines_is_answered_with_the_steering(
    serve: ServeFn, lake: Lake, admin: Any
) -> None:
    """A dataset whose newest view was mirrored by an older lakelock (its metadata without
    ``write.data.path`` and the copy-on-write modes) is answered with them, so pyiceberg's
    first append lands in the dataset's folder and commits."""
    lake.append("sales", pa.table({"day": [1], "amount": [1.0]}))
    location = lake.mirror("sales", formats=("iceberg",)).iceberg
    assert location is not None
    key = location.removeprefix(f"s3://{lake.bucket}/")
    document = orjson.loads(admin.get_object(Bucket=lake.bucket, Key=key)["Body"].read())
    document["properties"] = {
        name: value
        for name, value in document["properties"].items()
        if not name.startswith("write.")
    }
    admin.put_object(Bucket=lake.bucket, Key=key, Body=orjson.dumps(document))
    table = engine(serve()).load_table("lake.sales")
    assert table.properties["write.delete.mode"] == "copy-on-write"
    table.append(pa.table({"day": pa.array([2], pa.int64()), "amount": pa.array([2.0])}))
    assert sorted(lake.read("sales")["day"].to_pylist()) == [1, 2]


def test_without_a_token_only_this_machine_commits(serve: ServeFn, lake: Lake) -> None:
    """Without a token a commit from another machine is a 403 (reads are served); with one,
    the token decides, wherever the client is."""
    open_catalog = serve()
    body = orjson.dumps({"namespace": ["lake"]})
    remote = open_catalog.answer("POST", "/v1/namespaces", {}, body, peer="192.0.2.7")
    assert remote.status == 403
    assert b"ForbiddenException" in remote.body
    assert open_catalog.answer("GET", "/v1/config", {}, b"", peer="192.0.2.7").status == 200
    assert open_catalog.answer("POST", "/v1/namespaces", {}, body, peer="::1").status == 409
    guarded = serve(token=TOKEN)
    answer = guarded.answer("POST", "/v1/namespaces", bearer(), body, peer="192.0.2.7")
    assert answer.status == 409  # the namespace exists: the request got through
    assert "events" not in lake.registry.read().datasets


def test_create_answers_what_java_clients_read_and_config_lists_the_commits(
    serve: ServeFn, lake: Lake
) -> None:
    """``GET /v1/config`` lists the commit endpoints; a create answers ``metadata-location``,
    ``metadata`` (the view of the new dataset, partition spec and properties included) and
    ``config``; a staged create (CREATE TABLE AS SELECT) answers the metadata the table will
    have and creates nothing; creating an existing table is a 409; a second create of the
    namespace is a 409 AlreadyExistsException."""
    server = serve()
    status, answer = post(server, "/v1/namespaces", {"namespace": ["lake"]})
    assert (status, answer["error"]["type"]) == (409, "AlreadyExistsException")
    create = {
        "name": "events",
        "schema": orjson.loads(EVENTS.model_dump_json()),
        "partition-spec": orjson.loads(BY_KIND.model_dump_json()),
        "stage-create": True,
    }
    status, staged = post(server, "/v1/namespaces/lake/tables", create)
    assert status == 200
    assert staged.get("metadata-location") is None
    assert staged["metadata"]["partition-specs"][0]["fields"][0]["name"] == "kind"
    assert "events" not in lake.registry.read().datasets
    status, created = post(server, "/v1/namespaces/lake/tables", {**create, "stage-create": False})
    assert status == 200
    assert set(created) == {"metadata-location", "metadata", "config"}
    assert created["metadata"]["table-uuid"] == staged["metadata"]["table-uuid"]
    assert created["metadata"]["properties"]["write.data.path"].endswith("/datasets/events")
    assert lake.registry.read().datasets["events"].partition_by == ("kind",)
    status, answer = post(server, "/v1/namespaces/lake/tables", create)
    assert (status, answer["error"]["type"]) == (409, "AlreadyExistsException")
    config = orjson.loads(server.answer("GET", "/v1/config", {}, b"").body)
    assert set(WRITE_ENDPOINTS) <= set(config["endpoints"])


def test_a_transaction_commits_every_table_in_one_version_or_none(
    serve: ServeFn, lake: Lake
) -> None:
    """``POST /v1/transactions/commit`` adding a column to two tables is one lakelock
    version for both; one with a stale requirement on either table is a 409 and changes
    neither."""
    server = serve()
    catalog = engine(server)
    for name in ("one", "two"):
        catalog.create_table(f"lake.{name}", EVENTS)

    def add_note(name: str, schema_id: int) -> dict[str, Any]:
        schema = orjson.loads(EVENTS.model_dump_json())
        schema["schema-id"] = 1
        schema["fields"].append({"id": 3, "name": "note", "type": "string", "required": False})
        return {
            "identifier": {"namespace": ["lake"], "name": name},
            "requirements": [{"type": "assert-current-schema-id", "current-schema-id": schema_id}],
            "updates": [
                {"action": "add-schema", "schema": schema},
                {"action": "set-current-schema", "schema-id": -1},
            ],
        }

    stale = {"table-changes": [add_note("one", 0), add_note("two", 7)]}
    status, answer = post(server, "/v1/transactions/commit", stale)
    assert (status, answer["error"]["type"]) == (409, "CommitFailedException")
    assert "note" not in lake.read("one").column_names
    status, _ = post(
        server,
        "/v1/transactions/commit",
        {"table-changes": [add_note(n, 0) for n in ("one", "two")]},
    )
    assert status == 204
    datasets = lake.registry.read().datasets
    assert datasets["one"].updated_version == datasets["two"].updated_version
    for name in ("one", "two"):
        assert lake.read(name).column_names == ["kind", "n", "note"]
        assert catalog.load_table(f"lake.{name}").schema().find_field("note").field_id == 3


def test_a_transaction_sent_twice_is_answered_as_committed(serve: ServeFn, lake: Lake) -> None:
    """A transaction sent again after its answer was lost is answered 204 and commits nothing."""
    server = serve()
    catalog = engine(server)
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


# -- DuckDB ------------------------------------------------------------------------------------


def test_duckdb_creates_and_inserts_through_the_catalog(
    serve: ServeFn, lake: Lake, s3: S3Endpoint
) -> None:
    """DuckDB (the version the project pins) writes to a REST catalog: ``CREATE TABLE`` (a
    staged create, committed with the table's first files) and ``INSERT INTO`` a new table
    and an existing dataset, each one lakelock commit, read back alike by DuckDB and
    lakelock. Its ``DELETE`` writes only delete files (merge-on-read), which the tables'
    copy-on-write property makes DuckDB itself refuse, changing nothing."""
    lake.append("sales", pa.table({"day": [1, 2], "amount": [1.0, 2.0]}))
    server = serve()
    con = duckdb_with_iceberg()
    engine_connection = Connection.of(s3.client(access_key=ENGINE_KEY))
    con.execute(s3_secret_sql(engine_connection, f"s3://{lake.bucket}"))
    con.execute(
        f"ATTACH 'lake' AS ice (TYPE iceberg, ENDPOINT {sql_string(server.url)}, "
        "AUTHORIZATION_TYPE 'none')"
    )
    con.execute("INSERT INTO ice.lake.sales VALUES (3, 3.0)")
    assert sorted(lake.read("sales")["day"].to_pylist()) == [1, 2, 3]
    con.execute("CREATE TABLE ice.lake.people (id BIGINT, name VARCHAR)")
    con.execute("INSERT INTO ice.lake.people VALUES (1, 'ada'), (2, 'bo')")
    con.execute("INSERT INTO ice.lake.people VALUES (3, 'cy')")
    assert operations(lake, "people") == ["create", "append", "append"]
    for name in ("sales", "people"):
        reads_as_lakelock(
            con.execute(f"SELECT * FROM ice.lake.{name}").to_arrow_table(), lake, name
        )
    version = lake.registry.read().version
    with pytest.raises(duckdb.Error, match="merge-on-read"):
        con.execute("DELETE FROM ice.lake.people WHERE id = 1")
    assert lake.registry.read().version == version


# -- many writers at once ----------------------------------------------------------------------

SHARED = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "who", StringType(), required=False),
)


def run_workers(jobs: list[tuple[str, dict[str, Any]]]) -> list[int]:
    """Start every ``(role, args)`` of tests/_catalog_workers.py at once; the ids they
    committed, once each finished."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests._catalog_workers", role, orjson.dumps(args).decode()],
            cwd=REPO,
            env=CLI_ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role, args in jobs
    ]
    ids: list[int] = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        ids += orjson.loads(out.splitlines()[-1])["ids"]
    return ids


def every_reader_has_each_row_once(
    lake: Lake, servers: list[CatalogServer], s3: S3Endpoint, expected: list[int]
) -> None:
    """lakelock, pyiceberg through each catalog and DuckDB through the first read the
    dataset ``shared`` as exactly ``expected`` (each id once)."""
    assert sorted(lake.read("shared")["id"].to_pylist()) == sorted(expected)
    for server in servers:
        read = engine(server).load_table("lake.shared").scan().to_arrow()
        assert sorted(read["id"].to_pylist()) == sorted(expected)
    con = duckdb_with_iceberg()
    con.execute(s3_secret_sql(Connection.of(s3.client()), f"s3://{lake.bucket}"))
    con.execute(
        f"ATTACH 'lake' AS ice (TYPE iceberg, ENDPOINT {sql_string(servers[0].url)}, "
        "AUTHORIZATION_TYPE 'none')"
    )
    read = con.execute("SELECT id FROM ice.lake.shared").to_arrow_table()
    assert sorted(read["id"].to_pylist()) == sorted(expected)


@pytest.mark.slow  # about 45 s on two cores: every engine commit waits out its 409s
def test_engines_and_lakelock_append_at_once_and_every_row_is_there_once(
    serve: ServeFn, lake: Lake, s3: S3Endpoint
) -> None:
    """4 pyiceberg processes appending through one catalog and 4 lakelock processes
    appending directly, all at once: every commit lands once (409s retried by the engines
    on the refreshed table), one lakelock version per commit, and lakelock, pyiceberg and
    DuckDB each read every row exactly once."""
    server = serve()
    engine(server).create_table("lake.shared", SHARED)
    rounds, size = 4, 3
    common = {"table": "lake.shared", "rounds": rounds, "size": size}
    s3_args = {"url": s3.url, "bucket": lake.bucket, "prefix": lake.prefix}
    jobs = [("pyiceberg", {**common, "catalog": server.url, "worker": w}) for w in range(4)]
    jobs += [("lakelock", {**common, **s3_args, "worker": w}) for w in range(4, 8)]
    committed = run_workers(jobs)
    assert len(committed) == 8 * rounds * size
    assert len(lake.history("shared")) == 1 + 8 * rounds
    every_reader_has_each_row_once(lake, [server], s3, committed)


def test_two_catalog_instances_serve_one_lake_at_once(
    serve: ServeFn, lake: Lake, s3: S3Endpoint, client: Any
) -> None:
    """Two catalogs on two ports, each with its own lake handle (they share nothing but the
    bucket), take appends from two pyiceberg processes each at once: every row once, and
    each catalog answers the other's commits."""
    first = serve()
    second = serve(on=Lake(lake.bucket, prefix=lake.prefix, s3=client))
    assert first.port != second.port
    engine(first).create_table("lake.shared", SHARED)
    common = {"table": "lake.shared", "rounds": 2, "size": 2}
    jobs = [
        ("pyiceberg", {**common, "catalog": server.url, "worker": w})
        for w, server in enumerate([first, second, first, second])
    ]
    committed = run_workers(jobs)
    assert len(lake.history("shared")) == 1 + 4 * 2
    every_reader_has_each_row_once(lake, [first, second], s3, committed)


def test_an_engine_adds_a_column_after_a_restore_dropped_one(serve: ServeFn, lake: Lake) -> None:
    """After a restore dropped a column, an engine adds another and writes rows with it."""
    catalog = engine(serve())
    table = catalog.create_table("lake.events", EVENTS)
    table.append(events(["a"], [1]))
    before = lake.registry.read().datasets["events"].updated_version
    with table.update_schema() as update:
        update.add_column("score", LongType())
    lake.restore("events", version=before)
    table = catalog.load_table("lake.events")
    with table.update_schema() as update:
        update.add_column("x", StringType())
    assert lake.read("events").column_names == ["kind", "n", "x"]
    table.append(pa.table({**events(["b"], [2]).to_pydict(), "x": pa.array(["z"])}))
    assert sorted(lake.read("events").to_pylist(), key=str) == [
        {"kind": "a", "n": 1, "x": None},
        {"kind": "b", "n": 2, "x": "z"},
    ]
    reads_as_lakelock(catalog.load_table("lake.events").scan().to_arrow(), lake, "events")


def test_an_engine_adds_back_a_column_a_restore_dropped(serve: ServeFn, lake: Lake) -> None:
    """A column a restore dropped, added again by an engine, keeps its field id and takes rows."""
    catalog = engine(serve())
    table = catalog.create_table("lake.events", EVENTS)
    table.append(events(["a"], [1]))
    before = lake.registry.read().datasets["events"].updated_version
    with table.update_schema() as update:
        update.add_column("score", LongType())
    lake.restore("events", version=before)
    table = catalog.load_table("lake.events")
    with table.update_schema() as update:
        update.add_column("score", LongType())
    assert table.schema().find_field("score").field_id == 3
    table.append(pa.table({**events(["b"], [2]).to_pydict(), "score": pa.array([7])}))
    assert sorted(lake.read("events").to_pylist(), key=str) == [
        {"kind": "a", "n": 1, "score": None},
        {"kind": "b", "n": 2, "score": 7},
    ]


@pytest.mark.parametrize("kind", ["a b", "a+b", "é", None])
def test_an_engine_writes_and_deletes_rows_whose_partition_value_lakelock_holds(
    serve: ServeFn, lake: Lake, kind: str | None
) -> None:
    """An engine appends to and deletes from partitions whose values its folders spell otherwise."""
    catalog = engine(serve())
    table = catalog.create_table("lake.events", EVENTS, partition_spec=BY_KIND)
    rows = {"kind": pa.array([kind], pa.string()), "n": pa.array([0], pa.int64())}
    lake.append("events", pa.table(rows), partition_by=["kind"])
    table = catalog.load_table("lake.events")
    table.append(pa.table({**rows, "n": pa.array([1], pa.int64())}))
    assert sorted(lake.read("events")["n"].to_pylist()) == [0, 1]
    assert len({f.partition_path for f in lake.registry.files("events")}) == 1
    table.delete("n = 0")
    assert lake.read("events").to_pylist() == [{"kind": kind, "n": 1}]
    reads_as_lakelock(catalog.load_table("lake.events").scan().to_arrow(), lake, "events")


def test_an_engines_rows_in_another_unicode_spelling_are_refused_not_a_second_partition(
    serve: ServeFn, lake: Lake
) -> None:
    """An engine appends rows of ``Montréal`` decomposed (read from a file named on a Mac)
    to a table partitioned by ``kind`` that holds ``Montréal`` composed: the catalog made it
    a second partition of the one value, which ``Lake.append`` and ``registry.commit``
    refuse (an overwrite of the city would leave half its rows). The commit is 400 naming
    the column and both spellings, nothing copied into the dataset's folder; a partition
    already spelt so (registered before such values were refused) still takes the
    engine's files, as ``registry.commit`` lets them through."""
    composed = unicodedata.normalize("NFC", "Montréal")
    decomposed = unicodedata.normalize("NFD", "Montréal")
    table = engine(serve()).create_table("lake.events", EVENTS, partition_spec=BY_KIND)
    lake.append("events", events([composed], [1]), partition_by=["kind"])
    version = lake.registry.read().version
    with pytest.raises(BadRequestError, match=r"column 'kind'.*NFC spelling"):
        table.refresh().append(events([decomposed], [2]))
    assert lake.registry.read().version == version
    assert list(lake.store.list(f"datasets/events/kind={decomposed}/")) == []
    registered_unchecked(
        lake.registry, datafile("events", f"kind={decomposed}", "old"), commit_id="old-tool"
    )
    table.refresh().append(events([decomposed], [3]))
    partitions = lake.registry.read().datasets["events"].partitions
    assert sorted(partitions) == sorted([f"kind={composed}", f"kind={decomposed}"])
    assert partitions[f"kind={decomposed}"].file_count == 2


def test_properties_past_a_limit_are_a_bad_request_naming_it(serve: ServeFn, lake: Lake) -> None:
    """A 15 MiB property, 300,000 properties in one request, a name over 255 bytes, set by an
    engine or given to a create, is a 400 naming the limit (the Python API's, one rule:
    ``lakelock._properties``), and nothing is committed: later commits stay small."""
    server = serve()
    catalog = engine(server)
    table = catalog.create_table("lake.events", EVENTS)
    version = lake.registry.read().version
    too_long = pytest.raises(BadRequestError, match="at most 512,000 bytes")
    with too_long, table.transaction() as transaction:
        transaction.set_properties({"big": "x" * (15 * 1024 * 1024)})
    too_many = pytest.raises(BadRequestError, match="at most 1,000 properties")
    with too_many, table.transaction() as transaction:
        transaction.set_properties({f"p{i}": "x" for i in range(300_000)})
    with pytest.raises(BadRequestError, match="1 to 255 bytes"):
        catalog.create_table("lake.other", EVENTS, properties={"n" * 256: "x"})
    assert lake.registry.read().version == version
    assert sorted(lake.registry.read().datasets) == ["events"]
    assert "big" not in catalog.load_table("lake.events").properties
