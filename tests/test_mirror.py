"""lake.mirror: the Iceberg v2 and Delta views of every dataset version, read by pyiceberg,
delta-rs and DuckDB against the embedded endpoint, compared with what lakelock reads."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import importlib.util
import io
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakelock import DataFile, Lake
from lakelock._layout import delta_log_prefix, iceberg_metadata_key
from lakelock._mirror._series import RESTARTS, newest, numbered, restarting
from lakelock._vacuum import vacuum
from lakelock.errors import AlreadyExistsError, InvalidNameError, SchemaMismatchError
from lakelock.testing import DEFAULT_ACCESS_KEY, S3Endpoint
from tests._support import FAST_RETRY
from tests._support.processes import lakelock
from tests._support.views import SECRET, delta_options, events, history, iceberg_properties, rows

deltalake = pytest.importorskip("deltalake")
pyiceberg_table = pytest.importorskip("pyiceberg.table")
duckdb = pytest.importorskip("duckdb")


@pytest.fixture
def lake_prefix() -> str:
    """The ``lake`` fixture lives under a prefix of the test bucket."""
    return "lake"


def duckdb_connection(s3: S3Endpoint) -> Any:
    con = duckdb.connect()
    for name in ("httpfs", "avro", "iceberg", "delta"):
        spec = importlib.util.find_spec(f"duckdb_extension_{name}")
        if spec is None or spec.origin is None:
            pytest.skip(f"duckdb-extension-{name} is not installed")
        binary = (
            Path(spec.origin).parent
            / "extensions"
            / f"v{duckdb.__version__}"
            / f"{name}.duckdb_extension"
        )
        if not binary.exists():
            pytest.skip(f"duckdb-extension-{name} has no build for duckdb {duckdb.__version__}")
        con.execute(f"LOAD '{binary}'")
    host = s3.url.removeprefix("http://")
    con.execute(
        f"CREATE SECRET (TYPE s3, KEY_ID '{DEFAULT_ACCESS_KEY}', SECRET '{SECRET}', "
        f"ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')"
    )
    return con


def duckdb_arrow(con: Any, sql: str) -> pa.Table:
    """``sql``'s result as an Arrow table (DuckDB answers a table or a record batch reader,
    depending on its version)."""
    got = con.sql(sql).arrow()
    return got.read_all() if hasattr(got, "read_all") else got


def test_every_engine_reads_every_version(lake: Lake, s3: S3Endpoint) -> None:
    """After appends, an added column, an overwrite, a partition delete, a compaction and a
    restore, pyiceberg (StaticTable, by snapshot id), delta-rs (by version) and DuckDB
    (``iceberg_scan`` by snapshot id, ``delta_scan`` by version) read exactly lakelock's rows
    at each version, partition column typed, the added column null in older files."""
    versions = history(lake)
    result = lake.mirror("events")
    assert result.version == versions[-1]
    assert result.iceberg is not None
    assert result.delta == f"s3://{lake.bucket}/lake/datasets/events"
    table = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(s3.url)
    )
    assert [s.snapshot_id for s in table.snapshots()] == versions
    assert [s.summary["lakelock.version"] for s in table.snapshots()] == [str(v) for v in versions]
    con = duckdb_connection(s3)
    for number, version in enumerate(versions):
        expected_table = lake.read("events", version=version)
        schema = expected_table.schema
        expected = rows(expected_table, schema)
        delta = deltalake.DeltaTable(
            result.delta, version=number, storage_options=delta_options(s3.url)
        )
        log = lake.store.get(f"{delta_log_prefix('events')}{number:020d}.json").body
        assert orjson.loads(log.splitlines()[0])["commitInfo"]["lakelock.version"] == str(version)
        reads = {
            "pyiceberg": table.scan(snapshot_id=version).to_arrow(),
            "delta-rs": delta.to_pyarrow_table(),
            "iceberg_scan": duckdb_arrow(
                con, f"SELECT * FROM iceberg_scan('{result.iceberg}', snapshot_from_id={version})"
            ),
            "delta_scan": duckdb_arrow(
                con, f"SELECT * FROM delta_scan('{result.delta}', version => {number})"
            ),
        }
        for engine, got in reads.items():
            # Typed as lakelock has it (rows() casts, so a string day would pass it).
            assert got.schema.field("day").type == pa.date32(), (engine, version)
            assert rows(got, schema) == expected, (engine, version)
    # With no version, DuckDB's delta_scan reads the newest.
    current = lake.read("events")
    got = duckdb_arrow(con, f"SELECT * FROM delta_scan('{result.delta}')")
    assert rows(got, current.schema) == rows(current, current.schema)
    # The added column: null in the files written before it, in every engine alike.
    added = lake.read("events", version=versions[2])
    assert added.filter(pc.field("id") < 10).column("score").null_count == 10
    # Typed partition column everywhere.
    newest_delta = deltalake.DeltaTable(result.delta, storage_options=delta_options(s3.url))
    assert newest_delta.metadata().partition_columns == ["day"]
    day = next(f for f in newest_delta.schema().fields if f.name == "day")
    assert day.type == deltalake.schema.PrimitiveType("date")
    assert str(table.schema().find_field("day").field_type) == "date"


@pytest.mark.timeout(180)  # a child process's endpoint, on a loaded machine
def test_delta_history_through_an_endpoint_in_a_child_process() -> None:
    """delta-rs's ``DeltaTable.history()`` blocks in Rust holding the GIL: against an endpoint
    served by a thread of the same process it waits out its timeouts (60-180 s); against
    ``S3Endpoint(mode="process")`` it lists every version of the Delta view at once, and the
    endpoint's faults and counts work across the process boundary (a 503 injected into
    delta-rs's read of the log is retried). That endpoint checks signatures: delta-rs, pyiceberg and
    lakelock sign as S3 expects."""
    credentials = {DEFAULT_ACCESS_KEY: SECRET}
    with S3Endpoint(mode="process", credentials=credentials) as s3:
        s3.create_bucket("child-views")
        lake = Lake("child-views", prefix="lake", s3=s3.client(), retry=FAST_RETRY)
        versions = history(lake)
        result = lake.mirror("events")
        s3.reset_stats()
        log = f"lake/{delta_log_prefix('events')}"
        s3.inject("slowdown", operation="GetObject", prefix=log, count=1)
        delta = deltalake.DeltaTable(result.delta, storage_options=delta_options(s3.url))
        entries = delta.history()
        assert sorted(int(e["lakelock.version"]) for e in entries) == versions
        assert s3.faults()["injected"] == {"slowdown": 1}
        assert s3.stats()["ListObjectsV2"] >= 2
        table = pyiceberg_table.StaticTable.from_metadata(
            result.iceberg, properties=iceberg_properties(s3.url)
        )
        assert [s.snapshot_id for s in table.snapshots()] == versions
        current = lake.read("events")
        assert rows(delta.to_pyarrow_table(), current.schema) == rows(current, current.schema)


@pytest.mark.timeout(180)  # a child process's endpoint, on a loaded machine
def test_delta_history_lists_every_version_past_a_checkpoint_and_a_restore() -> None:
    """``DeltaTable.history()`` of a view mirrored a few versions at a time (as the catalog
    mirrors), past a checkpoint (every ``CHECKPOINT_INTERVAL`` versions) and a restore,
    returns, listing each version once, newest first: its hang against the embedded endpoint
    is delta-rs holding the GIL (its ``history`` does its I/O without releasing it) while the
    endpoint's thread waits to answer, not the view; served from a child process, it lists
    at once."""
    credentials = {DEFAULT_ACCESS_KEY: SECRET}
    with S3Endpoint(mode="process", credentials=credentials) as s3:
        s3.create_bucket("checkpointed-views")
        lake = Lake("checkpointed-views", s3=s3.client(), retry=FAST_RETRY)
        try:
            for day in range(1, 13):
                lake.append("events", events(range(day, day + 1), day), partition_by=["day"])
                if day % 4 == 0:
                    lake.mirror("events")
            lake.restore("events", version=3)
            result = lake.mirror("events")
            delta = deltalake.DeltaTable(result.delta, storage_options=delta_options(s3.url))
            entries = delta.history()
            versions = [h.version for h in lake.history("events")]
            assert [int(e["lakelock.version"]) for e in entries] == versions
            assert len(versions) == 13
            current = lake.read("events")
            assert rows(delta.to_pyarrow_table(), current.schema) == rows(current, current.schema)
        finally:
            lake.close()


def test_mirror_twice_writes_nothing_and_continues_from_the_newest(
    lake: Lake, s3: S3Endpoint
) -> None:
    """A second mirror finds both views current, writes no object and says so
    (``already_current``); after one more commit it writes just that version's objects."""
    lake.append("events", events(range(5), 1), partition_by=["day"])
    first = lake.mirror("events")
    assert (first.written, first.already_current) == (2, False)  # one version, two views
    s3.reset_stats()
    again = lake.mirror("events")
    assert again == dataclasses.replace(first, written=0)
    assert again.already_current
    assert "PutObject" not in s3.stats()
    lake.append("events", events(range(5, 8), 2), partition_by=["day"])
    s3.reset_stats()
    third = lake.mirror("events")
    # Delta: one log entry; Iceberg: a manifest, a manifest list, a metadata.json.
    assert s3.stats()["PutObject"] == 4
    assert third.version == first.version + 1


def test_racing_mirrors_make_one_view(lake: Lake, s3: S3Endpoint, client: Any) -> None:
    """Four threads mirroring at once (each with its own Lake) leave one consistent view:
    every Delta version once, the same newest metadata for all."""
    for day in range(1, 4):
        lake.append("events", events(range(day * 10, day * 10 + 3), day), partition_by=["day"])
    lakes = [Lake(lake.bucket, prefix="lake", s3=client, retry=FAST_RETRY) for _ in range(4)]
    results: list[Any] = []
    barrier = threading.Barrier(len(lakes))

    def run(other: Lake) -> None:
        barrier.wait()
        results.append(other.mirror("events"))

    threads = [threading.Thread(target=run, args=(other,)) for other in lakes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    assert len({r.iceberg for r in results}) == 1
    top = newest(lake.store, delta_log_prefix("events"), numbered(".json"))
    assert top is not None
    assert top[0] == 2
    expected = rows(lake.read("events"), lake.read("events").schema)
    table = pyiceberg_table.StaticTable.from_metadata(
        results[0].iceberg, properties=iceberg_properties(s3.url)
    )
    assert rows(table.scan().to_arrow(), lake.read("events").schema) == expected
    delta = deltalake.DeltaTable(results[0].delta, storage_options=delta_options(s3.url))
    assert rows(delta.to_pyarrow_table(), lake.read("events").schema) == expected


def test_checkpoints_every_ten_versions(lake: Lake, s3: S3Endpoint, admin: Any) -> None:
    """Twelve versions: a parquet checkpoint at Delta version 10 that delta-rs reads from
    (the log before it may go), with the same rows."""
    for i in range(12):
        lake.append("events", events(range(i * 2, i * 2 + 2), 1 + i % 3), partition_by=["day"])
    result = lake.mirror("events")
    keys = [o.key for o in lake.store.list(delta_log_prefix("events"))]
    assert f"{delta_log_prefix('events')}{10:020d}.checkpoint.parquet" in keys
    for n in range(10):  # a reader must start from the checkpoint alone
        key = lake.store.full_key(f"{delta_log_prefix('events')}{n:020d}.json")
        admin.delete_object(Bucket=lake.bucket, Key=key)
    delta = deltalake.DeltaTable(result.delta, storage_options=delta_options(s3.url))
    assert delta.version() == 11
    assert rows(delta.to_pyarrow_table(), lake.read("events").schema) == rows(
        lake.read("events"), lake.read("events").schema
    )


def test_newest_finds_the_last_of_a_long_series_in_few_lists(lake: Lake, s3: S3Endpoint) -> None:
    """The newest of 300 numbered keys is found with one-key LISTs, about 2 log2(n); from a
    number the caller saw, about 2 log2 of the distance."""
    prefix = "views/x/"
    for n in range(0, 300):
        lake.store.put(f"{prefix}{n:020d}.json", b"{}", mode="create")
    s3.reset_stats()
    found = newest(lake.store, prefix, numbered(".json"))
    assert found == (299, f"{prefix}{299:020d}.json")
    assert s3.stats()["ListObjectsV2"] <= 20
    assert newest(lake.store, "views/none/", numbered(".json")) is None
    # A number the caller saw (a catalog: the view it last answered) searches from there: a
    # handful of LISTs for the one version above it; a hint above the series costs the
    # search from the start, never a wrong answer.
    s3.reset_stats()
    assert newest(lake.store, prefix, numbered(".json"), since=298) == found
    assert s3.stats()["ListObjectsV2"] <= 4
    assert newest(lake.store, prefix, numbered(".json"), since=500) == found


def test_a_mirror_starts_over_while_others_change_the_view_then_gives_up(lake: Lake) -> None:
    """A pass that found another mirror's different view is tried again, from the view as it
    now is; one whose view kept changing for RESTARTS passes is AlreadyExistsError."""
    answers = iter([None, None, "done"])
    passes = []

    def attempt() -> str | None:
        passes.append(1)
        return next(answers)

    assert restarting(attempt, lake.store, "Delta view") == "done"
    assert len(passes) == 3
    passes.clear()
    with pytest.raises(AlreadyExistsError, match="Delta view kept changing"):
        restarting(lambda: passes.append(1), lake.store, "Delta view")
    assert len(passes) == RESTARTS


def test_bad_formats_and_datasets(lake: Lake) -> None:
    """Unknown formats are InvalidNameError; an unknown dataset DatasetNotFoundError."""
    from lakelock.errors import DatasetNotFoundError

    with pytest.raises(InvalidNameError):
        lake.mirror("events", formats=("hudi",))
    with pytest.raises(InvalidNameError):
        lake.mirror("events", formats=())
    with pytest.raises(DatasetNotFoundError):
        lake.mirror("events")


def test_auto_mirror_follows_commits_and_never_fails_them(
    client: Any, bucket: str, s3: S3Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """Lake(mirror=...) mirrors after each commit in the background. A mirror that fails
    (every view write refused) is logged, the commit still succeeds, and the next commit's
    mirror catches up with both versions."""
    lake = Lake(bucket, prefix="lake", s3=client, retry=FAST_RETRY, mirror=("delta", "iceberg"))
    assert lake.auto_mirror is not None
    lake.append("events", events(range(3), 1), partition_by=["day"])
    assert lake.auto_mirror.wait(timeout=60)
    top = newest(lake.store, delta_log_prefix("events"), numbered(".json"))
    assert top is not None
    assert top[0] == 0
    s3.inject("error", operation="PutObject", prefix="lake/datasets/events/_delta_log/")
    second = lake.append("events", events(range(3, 5), 2), partition_by=["day"])
    assert lake.auto_mirror.wait(timeout=60)
    assert lake.auto_mirror.errors == 1
    assert "mirroring dataset 'events' failed" in caplog.text
    s3.clear_faults()
    third = lake.append("events", events(range(5, 7), 3), partition_by=["day"])
    assert lake.auto_mirror.wait(timeout=60)
    delta = deltalake.DeltaTable(
        f"s3://{bucket}/lake/datasets/events", storage_options=delta_options(s3.url)
    )
    assert delta.version() == 2
    iceberg = pyiceberg_table.StaticTable.from_metadata(
        lake.mirror("events").iceberg, properties=iceberg_properties(s3.url)
    )
    assert [s.snapshot_id for s in iceberg.snapshots()][-2:] == [second.version, third.version]
    lake.auto_mirror.close()


def test_a_view_behind_a_vacuumed_version_is_refused(lake: Lake) -> None:
    """A view whose next versions vacuum removed before they were mirrored cannot be
    continued (SnapshotExpiredError, nothing written); a foreign Delta log in the dataset's
    directory is never written over (AlreadyExistsError)."""
    from lakelock.errors import AlreadyExistsError, SnapshotExpiredError

    lake.append("events", events(range(2), 1), partition_by=["day"])
    lake.mirror("events", formats=("delta",))
    lake.append("events", events(range(2, 4), 2), partition_by=["day"])
    lake.append("events", events(range(4, 6), 3), partition_by=["day"])
    # Before vacuum: a commit just after a vacuum with no window is refused files written
    # in the second of its newest orphan (FORMAT.md rule 10, the recorded cutoff).
    lake.append("other", events(range(1), 1), partition_by=["day"])
    later = time.time() + 7200  # everything written so far is older than the window
    lake.configure(vacuum_floor=0)
    assert not vacuum(
        lake.registry, older_than=0, dry_run=False, clock=lambda: later, enforce_retention=False
    ).failed
    keys = {o.key for o in lake.store.list("datasets/events/_delta_log/")}
    fresh = Lake(lake.bucket, prefix="lake", s3=lake.client, retry=FAST_RETRY)  # no cache
    with pytest.raises(SnapshotExpiredError, match="vacuumed before they were mirrored"):
        fresh.mirror("events", formats=("delta",))
    assert {o.key for o in lake.store.list("datasets/events/_delta_log/")} == keys
    lake.store.put(
        f"{delta_log_prefix('other')}{0:020d}.json",
        b'{"commitInfo": {"operation": "WRITE"}}\n',
        mode="create",
    )
    with pytest.raises(AlreadyExistsError, match="did not write"):
        lake.mirror("other", formats=("delta",))


def test_a_format1_registry_is_refused_without_writing(lake: Lake, s3: S3Endpoint) -> None:
    """Format 1 keeps no versions: mirroring it is VersionNotFoundError and writes nothing
    (it never upgrades the registry itself); after the upgrade the views start there."""
    from lakelock.errors import VersionNotFoundError
    from tests._support.format1 import plant_format1

    plant_format1(lake, [("sales", "old-sales", [1], 1)], versions=False)
    s3.reset_stats()
    with pytest.raises(VersionNotFoundError, match="format 1"):
        lake.mirror("sales")
    assert "PutObject" not in s3.stats()
    lake.registry.migrate()
    result = lake.mirror("sales")
    delta = deltalake.DeltaTable(result.delta, storage_options=delta_options(s3.url))
    assert rows(delta.to_pyarrow_table(), lake.read("sales").schema) == rows(
        lake.read("sales"), lake.read("sales").schema
    )


def test_a_delete_reads_only_the_iceberg_manifests_that_can_hold_its_files(
    lake: Lake, s3: S3Endpoint
) -> None:
    """Five appends, one partition each (five manifests); deleting one partition reads the
    metadata, the manifest list and the one manifest whose partition range holds it (counted
    at the endpoint), rewrites that one, and the view reads as lakelock does."""
    for day in range(1, 6):
        lake.append("events", events(range(day * 10, day * 10 + 2), day), partition_by=["day"])
    lake.mirror("events", formats=("iceberg",))
    lake.delete("events", partitions=[{"day": dt.date(2026, 1, 3)}])
    fresh = Lake(lake.bucket, prefix="lake", s3=lake.client, retry=FAST_RETRY)
    s3.reset_stats()
    result = fresh.mirror("events", formats=("iceberg",))
    views = s3.areas()
    assert views["GetObject other"] == 3  # metadata.json, manifest list, one manifest
    assert views["PutObject other"] == 3  # the rewritten manifest, a list, a metadata.json
    table = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(s3.url)
    )
    schema = lake.read("events").schema
    assert rows(table.scan().to_arrow(), schema) == rows(lake.read("events"), schema)


def test_a_crash_leaves_the_view_behind_and_the_next_mirror_continues(
    lake: Lake, s3: S3Endpoint
) -> None:
    """A mirror that dies before its metadata.json (every metadata write refused) leaves the
    previous metadata the newest, its manifests and list unreferenced; the next mirror
    reuses them (their creates lose to the crashed run's, the manifest's own length is read
    back) and the view reads exactly as lakelock does."""
    from lakelock.errors import StorageError

    lake.append("events", events(range(3), 1), partition_by=["day"])
    first = lake.mirror("events", formats=("iceberg",))
    lake.append("events", events(range(3, 6), 2), partition_by=["day"])
    s3.inject("error", operation="PutObject", prefix="lake/views/events/iceberg/metadata/")
    with pytest.raises(StorageError):
        lake.mirror("events", formats=("iceberg",))
    top = newest(lake.store, "views/events/iceberg/metadata/", numbered(".metadata.json"))
    assert top is not None
    assert f"s3://{lake.bucket}/lake/{top[1]}" == first.iceberg
    s3.clear_faults()
    fresh = Lake(lake.bucket, prefix="lake", s3=lake.client, retry=FAST_RETRY)
    s3.reset_stats()
    second = fresh.mirror("events", formats=("iceberg",))
    assert second.iceberg != first.iceberg
    assert s3.stats().get("HeadObject") == 1  # the crashed run's manifest, measured
    table = pyiceberg_table.StaticTable.from_metadata(
        second.iceberg, properties=iceberg_properties(s3.url)
    )
    schema = lake.read("events").schema
    assert rows(table.scan().to_arrow(), schema) == rows(lake.read("events"), schema)


def test_awkward_partitions_and_types_read_alike(lake: Lake, s3: S3Endpoint) -> None:
    """Two partition columns, a string value with a slash, a space and a percent sign, a
    null partition value, a timestamp with zone, NaN and strings past 16 characters: both
    views read exactly lakelock's rows."""
    table = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "when": pa.array([1, 2, 3, 4_000_000], pa.timestamp("us", "UTC")),
            "score": pa.array([1.5, float("nan"), None, -2.0]),
            "note": pa.array(["x" * 40, "short", None, "y" * 17]),
            "region": pa.array(["a/b c%", "a/b c%", None, "eu"]),
            "flag": pa.array([True, True, False, False]),
        }
    )
    lake.append("odd", table, partition_by=["region", "flag"])
    lake.append("odd", table.slice(0, 1), partition_by=["region", "flag"])
    result = lake.mirror("odd")
    expected = lake.read("odd")
    schema = expected.schema

    def comparable(t: pa.Table) -> list[str]:
        return sorted(str(r) for r in t.select(schema.names).cast(schema).to_pylist())

    iceberg = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(s3.url)
    )
    assert comparable(iceberg.scan().to_arrow()) == comparable(expected)
    delta = deltalake.DeltaTable(result.delta, storage_options=delta_options(s3.url))
    assert comparable(delta.to_pyarrow_table()) == comparable(expected)


def test_unsigned_columns_past_the_signed_range_of_their_width_read_in_every_engine(
    lake: Lake, s3: S3Endpoint
) -> None:
    """Unsigned integer columns holding values a signed integer of their width cannot (255
    in a uint8, 65535 in a uint16, 2**32 - 1 in a uint32), one of them the partition column:
    pyiceberg, delta-rs and DuckDB (``iceberg_scan``, ``delta_scan``) read both views with
    lakelock's values, and DuckDB's filter past a signed type's range finds its row. What a
    user would lose: each view declared the signed type of the same width (Iceberg an int;
    Delta a byte, a short, an integer), so with a uint32 partition value past 2**31 - 1
    ``lake.mirror`` failed with Python's own ``struct.error`` (``Lake(mirror=...)`` never
    wrote a view again, the catalog answered every load of the table with a 500), and
    without one delta-rs and DuckDB failed every read of the views with a cast error."""
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "small": pa.array([255, 1], pa.uint8()),
            "medium": pa.array([65535, 2], pa.uint16()),
            "large": pa.array([2**32 - 1, 3], pa.uint32()),
            "part": pa.array([2**32 - 1, 0], pa.uint32()),
        }
    )
    lake.append("counters", table, partition_by=["part"])
    result = lake.mirror("counters")
    expected = lake.read("counters").sort_by("id")
    names = ["id", "small", "medium", "large", "part"]

    def values(t: pa.Table) -> dict[str, list[Any]]:
        got: dict[str, list[Any]] = t.select(names).sort_by("id").to_pydict()
        return got

    con = duckdb_connection(s3)
    iceberg = f"iceberg_scan('{result.iceberg}')"
    reads = {
        "pyiceberg": pyiceberg_table.StaticTable.from_metadata(
            result.iceberg, properties=iceberg_properties(s3.url)
        )
        .scan()
        .to_arrow(),
        "delta-rs": deltalake.DeltaTable(
            result.delta, storage_options=delta_options(s3.url)
        ).to_pyarrow_table(),
        "iceberg_scan": duckdb_arrow(con, f"SELECT * FROM {iceberg}"),
        "delta_scan": duckdb_arrow(con, f"SELECT * FROM delta_scan('{result.delta}')"),
        # Past the bounds a signed 32-bit integer holds: the file is not pruned.
        "iceberg_scan, filtered": duckdb_arrow(
            con, f"SELECT * FROM {iceberg} WHERE large > 4294967294 OR small > 254"
        ),
    }
    for engine, got in reads.items():
        want = expected.filter(pc.field("id") == 1) if "filtered" in engine else expected
        assert values(got) == values(want), engine


def test_versions_past_the_retention_leave_the_iceberg_metadata(
    client: Any, bucket: str, s3: S3Endpoint
) -> None:
    """With a retention of 0, each new metadata.json keeps only the versions a reader may
    still ask for (the newest and the one it just replaced), and reads as lakelock does."""
    lake = Lake(bucket, prefix="lake", s3=client, retry=FAST_RETRY, retention=0)
    for day in range(1, 5):
        lake.append("events", events(range(day * 10, day * 10 + 2), day), partition_by=["day"])
        result = lake.mirror("events", formats=("iceberg",))
    versions = [h.version for h in reversed(lake.history("events"))]
    assert result.iceberg is not None
    table = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(s3.url)
    )
    assert [s.snapshot_id for s in table.snapshots()] == versions[-2:]
    assert [e.snapshot_id for e in table.metadata.snapshot_log] == versions[-2:]
    schema = lake.read("events").schema
    assert rows(table.scan().to_arrow(), schema) == rows(lake.read("events"), schema)


def test_views_carry_column_bounds_and_engines_read_only_the_file_they_admit(
    lake: Lake, s3: S3Endpoint
) -> None:
    """Four appends of disjoint ``id`` ranges, unpartitioned (four files that only their
    statistics tell apart): the Iceberg manifest entries and the Delta add actions carry
    each file's ``id`` bounds from lakelock's statistics, and a filter ``id == 250`` makes
    pyiceberg (``row_filter``), delta-rs, DuckDB's ``iceberg_scan`` and ``delta_scan`` each
    read one file of four, with the rows lakelock reads: any request for the other three
    fails (none is made), and the requests to data files, counted at the endpoint, are
    fewer than a full read's (several per file: footer, then columns)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.expressions import EqualTo
    from pyiceberg.types import LongType

    for batch in range(4):
        lake.append("events", events(range(batch * 100, batch * 100 + 100), 1))
    bounds = {(b * 100, b * 100 + 99) for b in range(4)}
    result = lake.mirror("events")
    assert result.iceberg is not None
    table = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(s3.url)
    )
    field_id = table.schema().find_field("id").field_id
    snapshot = table.current_snapshot()
    assert snapshot is not None
    entries = [
        entry.data_file
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io)
    ]
    assert len(entries) == 4
    assert {
        (
            from_bytes(LongType(), f.lower_bounds[field_id]),
            from_bytes(LongType(), f.upper_bounds[field_id]),
        )
        for f in entries
    } == bounds
    delta = deltalake.DeltaTable(result.delta, storage_options=delta_options(s3.url))
    actions = pa.table(delta.get_add_actions(flatten=True))
    found = zip(actions["min.id"].to_pylist(), actions["max.id"].to_pylist(), strict=True)
    assert set(found) == bounds

    wanted = lake.read("events").filter(pc.field("id") == 250)
    assert wanted.num_rows == 1
    everything = lake.read("events")

    con = duckdb_connection(s3)
    con.execute("SET enable_external_file_cache = false")  # each read fetches what it reads

    def duckdb_read(sql: str) -> Callable[[], pa.Table]:
        return lambda: duckdb_arrow(con, sql)

    iceberg_sql = f"SELECT * FROM iceberg_scan('{result.iceberg}')"
    delta_sql = f"SELECT * FROM delta_scan('{result.delta}')"
    readers: dict[str, tuple[Callable[[], pa.Table], Callable[[], pa.Table]]] = {
        "pyiceberg": (
            lambda: table.scan(row_filter=EqualTo("id", 250)).to_arrow(),
            lambda: table.scan().to_arrow(),
        ),
        "delta-rs": (
            lambda: delta.to_pyarrow_table(filters=[("id", "=", 250)]),
            delta.to_pyarrow_table,
        ),
        "iceberg_scan": (duckdb_read(f"{iceberg_sql} WHERE id = 250"), duckdb_read(iceberg_sql)),
        "delta_scan": (duckdb_read(f"{delta_sql} WHERE id = 250"), duckdb_read(delta_sql)),
    }

    def data_requests(read: Callable[[], pa.Table], expected: pa.Table) -> int:
        """Requests ``read`` sends to data files (GETs and HEADs; an engine may send several
        per file: footer, then columns), with its rows checked."""
        s3.reset_stats()
        got = read()
        areas = s3.areas()
        assert rows(got, expected.schema) == rows(expected, expected.schema)
        return areas.get("GetObject datasets", 0) + areas.get("HeadObject datasets", 0)

    def holds_250(file: Any) -> bool:
        return file.stats is not None and file.stats.column("id").min == 200

    others = [f for f in lake.registry.files("events") if not holds_250(f)]
    assert len(others) == 3
    for engine, (filtered, full) in readers.items():
        every = data_requests(full, everything)
        # Any request for the three files id == 250 rules out fails (500); none is made.
        for other in others:
            s3.inject("error", bucket=lake.bucket, prefix=lake.store.full_key(other.key))
        one = data_requests(filtered, wanted)
        assert s3.faults()["injected"] == {}, engine
        s3.clear_faults()
        assert 1 <= one < every, (engine, one, every)


def test_a_dataset_whose_column_names_clash_is_refused_by_name(lake: Lake, s3: S3Endpoint) -> None:
    """A dataset whose columns clash ignoring case (``Day`` in the files, ``day`` in the
    path: registered from another tool, or written before lakelock refused such tables) is
    not mirrored: SchemaMismatchError naming the dataset and both columns, from the API and
    as one line from ``lakelock mirror``, with no view object written (it used to crash with
    delta-rs's raw "Duplicate field name", an internal error for the command line)."""
    body = io.BytesIO()
    pq.write_table(pa.table({"Day": list(range(11))}), body)
    data = body.getvalue()
    key = "datasets/lk/day=1/part-0.parquet"
    put = lake.store.put(key, data, mode="create")
    checksum = f"sha256:{hashlib.sha256(data).hexdigest()}"
    file = DataFile("lk", key, "day=1", len(data), 11, checksum, put.etag, put.write_id)
    lake.registry.commit("lk", add=[file])
    for formats in (("delta",), ("iceberg",)):
        with pytest.raises(SchemaMismatchError) as info:
            lake.mirror("lk", formats=formats)
        assert info.value.dataset == "lk"
        assert "dataset 'lk' cannot be mirrored" in str(info.value)
        assert "'Day' and 'day'" in str(info.value)
    assert [o.key for o in lake.store.list("views/")] == []
    assert [o.key for o in lake.store.list("datasets/lk/")] == [key]
    done = lakelock("mirror", lake.url, "--dataset", "lk", "--endpoint-url", s3.url)
    assert done.returncode == 1
    assert done.stderr.startswith("lakelock: error: dataset 'lk' cannot be mirrored")
    assert "internal error" not in done.stderr
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("column", "named"),
    [
        (pa.array([1_000_000_001, 5], pa.timestamp("ns")), "'at' is a timestamp in nanoseconds"),
        (pa.array([2**64 - 1, 1], pa.uint64()), "'at' is a uint64"),
        (
            pa.array([{"when": 1}, {"when": 2}], pa.struct([("when", pa.timestamp("ns", "UTC"))])),
            "'at.when' is a timestamp in nanoseconds",
        ),
        (pa.array([[2**63], []], pa.list_(pa.uint64())), "'at.element' is a uint64"),
    ],
)
def test_a_column_no_view_type_carries_exactly_is_refused_by_name(
    lake: Lake, column: pa.Array, named: str
) -> None:
    """A timestamp in nanoseconds and a ``uint64`` (at the top or nested): the views
    declared them as Iceberg's and Delta's microsecond timestamp and signed ``long``, so
    pyiceberg read 1,000,000,001 ns as one second (the nanosecond dropped without a word)
    and delta-rs failed every read (a cast that would lose data; 2**64 - 1 "not in range").
    Each view is refused, SchemaMismatchError naming the dataset and the column, with no
    view object written; the same rows in microseconds and int64 mirror."""
    lake.append("ticks", pa.table({"id": [1, 2], "at": column}))
    for formats in (("delta",), ("iceberg",)):
        with pytest.raises(SchemaMismatchError) as info:
            lake.mirror("ticks", formats=formats)
        assert info.value.dataset == "ticks"
        assert "dataset 'ticks' cannot be mirrored" in str(info.value)
        assert named in str(info.value)
    assert [o.key for o in lake.store.list("views/")] == []
    exact = pa.table({"id": [1], "at": pa.array([1_000_001], pa.timestamp("us"))})
    lake.append("exact", exact)
    assert lake.mirror("exact").written == 2  # one version, in each view


def restored_then_merged(lake: Lake) -> list[int]:
    """``events``: ``score`` merged in, a restore dropping it, ``y`` merged in, then ``score``
    merged in again; its versions."""
    first = lake.append("events", pa.table({"kind": ["a"], "n": [1]})).version
    lake.append("events", pa.table({"kind": ["b"], "n": [2], "score": [7]}), schema_mode="merge")
    lake.restore("events", version=first)
    lake.append("events", pa.table({"kind": ["d"], "n": [4], "y": [1.5]}), schema_mode="merge")
    lake.append("events", pa.table({"kind": ["e"], "n": [5], "score": [9]}), schema_mode="merge")
    return [entry.version for entry in reversed(lake.history("events"))]


def iceberg_metadata(lake: Lake, version: int) -> dict[str, Any]:
    key = lake.store.full_key(iceberg_metadata_key("events", version))
    body: bytes = lake.store.client.get_object(Bucket=lake.bucket, Key=key)["Body"].read()
    document: dict[str, Any] = orjson.loads(body)
    return document


def test_columns_added_after_a_restore_dropped_one_read_in_the_iceberg_view(
    lake: Lake, s3: S3Endpoint
) -> None:
    """Columns merged after a restore keep one field id per name, and every version reads."""
    versions = restored_then_merged(lake)
    result = lake.mirror("events", formats=("iceberg",))
    assert result.iceberg is not None
    table = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(s3.url)
    )
    for version in versions:
        expected = lake.read("events", version=version)
        got = table.scan(snapshot_id=version).to_arrow()
        assert rows(got, expected.schema) == rows(expected, expected.schema), version
    ids = {f.name: f.field_id for s in table.metadata.schemas for f in s.fields}
    assert ids == {"kind": 1, "n": 2, "score": 3, "y": 4}
    assert all(
        {f.name: f.field_id for f in s.fields}.items() <= ids.items()
        for s in table.metadata.schemas
    )
    last = [iceberg_metadata(lake, v)["last-column-id"] for v in versions]
    assert last == sorted(last)
    assert last[-1] == 4


def test_a_view_whose_ids_clash_is_renumbered_by_its_next_version(
    lake: Lake, s3: S3Endpoint
) -> None:
    """A view whose ids clash (mirrored while ids were positions) reads after its next version."""
    first = lake.append("events", pa.table({"kind": ["a"], "n": [1]})).version
    lake.append("events", pa.table({"kind": ["b"], "n": [2], "score": [7]}), schema_mode="merge")
    lake.restore("events", version=first)
    clash = lake.append(
        "events", pa.table({"kind": ["d"], "n": [4], "y": [1.5]}), schema_mode="merge"
    ).version
    lake.mirror("events", formats=("iceberg",))
    # As lakelock mirrored it while ids were positions: y took score's id 3, the name
    # mapping named score (the widest schema's first), last-column-id 3.
    document = iceberg_metadata(lake, clash)
    current = document["current-schema-id"]
    for schema in document["schemas"]:
        for field in schema["fields"]:
            if field["name"] == "y":
                field["id"] = 3
    mapping = orjson.loads(document["properties"]["schema.name-mapping.default"])
    document["properties"]["schema.name-mapping.default"] = orjson.dumps(
        [m for m in mapping if m["names"] != ["y"]]
    ).decode()
    document["last-column-id"] = 3
    key = lake.store.full_key(iceberg_metadata_key("events", clash))
    lake.store.client.put_object(Bucket=lake.bucket, Key=key, Body=orjson.dumps(document))
    assert current != 0
    lake.append("events", pa.table({"kind": ["e"], "n": [5], "y": [2.5]}))
    result = lake.mirror("events", formats=("iceberg",))
    assert result.iceberg is not None
    table = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(s3.url)
    )
    for version in [entry.version for entry in lake.history("events")]:
        expected = lake.read("events", version=version)
        got = table.scan(snapshot_id=version).to_arrow()
        assert rows(got, expected.schema) == rows(expected, expected.schema), version
    assert table.metadata.last_column_id >= 4


def test_the_delta_view_carries_column_comments(lake: Lake, s3: S3Endpoint) -> None:
    """A column's comment (the ``doc`` an engine gave through the catalog, kept in the
    dataset's schema as the Arrow field's ``doc`` metadata; a nested field's too) reads back
    through the Iceberg view as the field's ``doc``, but the Delta view wrote it under the
    key ``doc``, which no Delta reader takes for a comment (Spark's ``DESCRIBE`` showed
    none). delta-rs reads each as the field metadata key ``comment``; a column without one
    has none."""
    point = pa.struct([pa.field("x", pa.int64(), metadata={b"doc": b"east"})])
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), metadata={b"doc": b"what happened"}),
            pa.field("point", point),
            pa.field("day", pa.int64()),
        ]
    )
    table = pa.table({"id": [1], "point": [{"x": 2}], "day": [3]}, schema=schema)
    lake.append("events", table, partition_by=["day"])
    result = lake.mirror("events")
    delta = deltalake.DeltaTable(result.delta, storage_options=delta_options(s3.url))
    fields = {f.name: f for f in delta.schema().fields}
    assert fields["id"].metadata == {"comment": "what happened"}
    assert [f.metadata for f in fields["point"].type.fields] == [{"comment": "east"}]
    assert (fields["point"].metadata, fields["day"].metadata) == ({}, {})
    assert delta.to_pyarrow_table().to_pylist() == table.to_pylist()
