"""The Lake facade: append = write + one commit, read = exactly the committed files."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pyarrow as pa
import pytest

from lakelock import Lake, RegistrySnapshot
from lakelock._registry import REGISTRY_KEY
from lakelock._registry._builder import CommitBuilder
from lakelock._registry._settings import DEFAULTS, LakeSettings
from lakelock.errors import (
    AlreadyExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidNameError,
    LeaseLostError,
    NotFoundError,
    SchemaMismatchError,
    SettingsMismatchError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY


def table(ids: list[int], year: int = 2024) -> pa.Table:
    return pa.table({"id": ids, "year": [year] * len(ids), "name": [f"n{i}" for i in ids]})


def test_append_then_read(lake: Lake) -> None:
    """Appended rows come back; uncommitted files are never read."""
    lake.append("sales", table([1, 2]), partition_by=["year"])
    lake.append("sales", table([3], year=2025), partition_by=["year"])
    lake.write("sales", table([99]), partition_by=["year"])  # written, never committed
    assert sorted(lake.read("sales")["id"].to_pylist()) == [1, 2, 3]
    assert lake.read("sales", partitions=["year=2025"])["id"].to_pylist() == [3]
    assert lake.read("sales", partitions=[{"year": 2024}])["id"].to_pylist() == [1, 2]


def test_uncontended_append_costs_four_requests(s3: S3Endpoint, lake: Lake) -> None:
    """A single-partition append: data PUT, then manifest and dataset snapshot PUTs (in one
    parallel round), then the registry PUT; plus the registry and snapshot GETs unless this
    Lake's last write already told it both (and one LIST of other processes' intents)."""
    lake.append("sales", table([1]), partition_by=["year"])
    s3.reset_stats()
    lake.append("sales", table([2]), partition_by=["year"])
    assert s3.stats() == {"PutObject": 4}
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    s3.reset_stats()
    fresh.append("sales", table([3]), partition_by=["year"])
    assert s3.stats() == {"PutObject": 4, "GetObject": 2, "ListObjectsV2": 1}


def preamble_requests(s3: S3Endpoint, lake: Lake) -> dict[str, int]:
    """The requests the preamble of an append to ``sales`` (generated id) makes: its checks
    against the registry ``lake`` knows, before any data is written."""
    plain = CommitBuilder(
        lake.registry, "sales", "append", schema=table([0]).schema, partition_by=["year"]
    )
    s3.reset_stats()
    assert isinstance(plain.check(), RegistrySnapshot)
    return s3.stats()


def test_an_append_checks_its_schema_against_an_earlier_version_it_holds(
    s3: S3Endpoint, lake: Lake
) -> None:
    """Before its data PUT, an append checks its partition columns and schema against the
    registry its process knows: where that names a version of the dataset this process
    never loaded (another process made it), an earlier version it holds will do, at no
    request (a waiter whose intents other processes apply would otherwise GET every new
    snapshot). A change that fits it but not the current one is still refused, by the commit
    loop; one it refuses is confirmed on a fresh read."""
    other = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    lake.append("sales", table([1]), partition_by=["year"])
    wider = table([2]).append_column("extra", pa.array([1.5]))
    other.append("sales", wider, partition_by=["year"], schema_mode="merge")
    lake.registry.read()  # the root of the other's version: its snapshot is not held here
    assert preamble_requests(s3, lake) == {}
    # A column the other process added as a double, brought as a string: it fits the earlier
    # version checked here, so its data is written, and the commit refuses it.
    clash = table([4]).append_column("extra", pa.array(["x"]))
    s3.reset_stats()
    with pytest.raises(SchemaMismatchError, match="'extra' is double, not string"):
        lake.append("sales", clash, partition_by=["year"], schema_mode="merge")
    assert s3.stats()["PutObject"] >= 1
    # A column the version held here lacks, without schema_mode="merge": refused there, then
    # confirmed on a fresh read, where the other process had added it: it fits and commits.
    more = wider.append_column("more", pa.array([7]))
    other.append("sales", more, partition_by=["year"], schema_mode="merge")
    lake.registry.read()
    lake.append("sales", table([5]).append_column("more", pa.array([8])), partition_by=["year"])
    assert sorted(lake.read("sales")["id"].to_pylist()) == [1, 2, 2, 5]


@pytest.mark.unguarded  # the lake is wiped, which the bucket policy forbids
def test_an_append_checks_against_no_version_of_an_earlier_life_of_the_dataset(
    s3: S3Endpoint, lake: Lake
) -> None:
    """A dataset made anew (the lake wiped and started over under a long-running process)
    is another dataset: the version of the old one this process holds is no stand-in for
    it, and the preamble reads the new one's snapshot."""
    lake.append("sales", table([1]), partition_by=["year"])
    listed = lake.client.list_objects_v2(Bucket=lake.bucket)
    for item in listed["Contents"]:
        lake.client.delete_object(Bucket=lake.bucket, Key=item["Key"])
    other = Lake(lake.bucket, prefix=lake.prefix, s3=lake.client, retry=FAST_RETRY)
    other.append("clicks", table([2]), partition_by=["year"])  # sales made at version 2
    other.append("sales", table([3]), partition_by=["year"])
    lake.registry.read()
    assert preamble_requests(s3, lake) == {"GetObject": 1}


def test_rerun_with_commit_id_appends_once(s3: S3Endpoint, lake: Lake) -> None:
    """A pipeline re-run with the same commit id and file name writes and commits nothing."""
    first = lake.append(
        "sales", table([1]), partition_by=["year"], commit_id="run-1", file_name="run-1.parquet"
    )
    again = lake.append(
        "sales", table([1]), partition_by=["year"], commit_id="run-1", file_name="run-1.parquet"
    )
    assert (again.version, again.already_committed) == (first.version, True)
    assert lake.read("sales")["id"].to_pylist() == [1]


def test_duplicate_file_name_from_another_run_stops(lake: Lake) -> None:
    """The blog's duplicate upload: a second writer of the same file name gets
    AlreadyExistsError and nothing is overwritten or committed."""
    lake.append("sales", table([1]), partition_by=["year"], file_name="batch-7.parquet")
    with pytest.raises(AlreadyExistsError):
        lake.append("sales", table([2]), partition_by=["year"], file_name="batch-7.parquet")
    assert lake.read("sales")["id"].to_pylist() == [1]


def test_schema_evolution_and_mismatch(lake: Lake) -> None:
    """An added nullable column bumps schema_version (with schema_mode="merge"); a changed
    type is refused."""
    lake.append("sales", table([1]), partition_by=["year"])
    wider = table([2]).append_column("extra", pa.array([1.5]))
    lake.append("sales", wider, partition_by=["year"], schema_mode="merge")
    state = lake.registry.read().datasets["sales"]
    assert state.schema_version == 2
    rows = lake.read("sales").sort_by("id")
    assert rows["extra"].to_pylist() == [None, 1.5]
    narrower = pa.table({"id": pa.array([3], pa.int32()), "year": [2024], "name": ["x"]})
    with pytest.raises(SchemaMismatchError):
        lake.append("sales", narrower, partition_by=["year"])


def test_unknown_dataset_and_partition(lake: Lake) -> None:
    """Reading what the registry does not have is a typed, clear error."""
    with pytest.raises(DatasetNotFoundError):
        lake.read("nothing")
    lake.append("sales", table([1]), partition_by=["year"])
    with pytest.raises(DatasetNotFoundError) as info:
        lake.read("sales", partitions=["year=1999"])
    assert info.value.partition == "year=1999"


def test_from_url_and_bad_urls(s3: S3Endpoint, bucket: str) -> None:
    """from_url takes s3://bucket/prefix plus client arguments; other URLs are refused."""
    lake = Lake.from_url(f"s3://{bucket}/some/prefix", **s3.client_kwargs())
    assert (lake.bucket, lake.prefix) == (bucket, "some/prefix/")
    lake.append("sales", table([1]), partition_by=["year"])
    keys = [o["Key"] for o in lake.client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert all(k.startswith("some/prefix/") for k in keys)
    for url in ("http://x/y", "s3://", "bucket/prefix"):
        with pytest.raises(InvalidNameError):
            Lake.from_url(url)


def test_files_of_an_unknown_dataset_is_typed(lake: Lake) -> None:
    """registry.files of a dataset the registry does not have: DatasetNotFoundError."""
    with pytest.raises(DatasetNotFoundError):
        lake.registry.files("nothing")


@pytest.mark.parametrize(
    "older_than", ["90s", "15m", "24h", "7d", "1d12h", timedelta(hours=2), 3600, 0.5, "0"]
)
def test_vacuum_accepts_durations(lake: Lake, older_than: object) -> None:
    """older_than takes text durations, timedeltas and numbers of seconds."""
    lake.configure(vacuum_floor=0, create=True)
    report = lake.vacuum(older_than=older_than, enforce_retention=False)  # type: ignore[arg-type]
    assert report.dry_run


@pytest.mark.parametrize("older_than", ["soon", "24 hours", "-1h", -5, float("nan"), True])
def test_vacuum_says_which_durations_it_accepts(lake: Lake, older_than: object) -> None:
    """Anything else is an InvalidArgumentError naming the accepted forms, before any request."""
    with pytest.raises(InvalidArgumentError) as info:
        lake.vacuum(older_than=older_than)  # type: ignore[arg-type]
    assert "not negative" in info.value.reason or "'24h'" in info.value.reason


def test_vacuum_beyond_the_retention_is_refused_and_retention_is_a_lake_option(
    client: Any, bucket: str
) -> None:
    """older_than may not exceed the lake's retention; Lake(retention=) raises it."""
    with pytest.raises(InvalidArgumentError, match="retention"):
        Lake(bucket, s3=client).vacuum(older_than="8d")
    assert Lake(bucket, s3=client, retention="30d").vacuum(older_than="30d").dry_run


def test_copy_and_rename_take_partitions_as_mappings(lake: Lake) -> None:
    """The mapping form read() accepts works for copy_partition and rename_partition, both
    for the source and the destination; a mapping naming other columns is refused."""
    lake.append("sales", table([1, 2]), partition_by=["year"])
    lake.copy_partition("sales", {"year": 2024}, to_dataset="archive")
    assert lake.read("archive", partitions=[{"year": 2024}])["id"].to_pylist() == [1, 2]
    lake.rename_partition("sales", {"year": 2024}, to_partition={"year": 2023})
    assert list(lake.registry.read().datasets["sales"].partitions) == ["year=2023"]
    with pytest.raises(InvalidNameError):
        lake.copy_partition("sales", {"month": 1}, to_dataset="archive")
    with pytest.raises(DatasetNotFoundError):
        lake.copy_partition("nothing", {"year": 2024}, to_dataset="archive")


def test_appending_an_empty_table_commits_nothing(s3: S3Endpoint, lake: Lake) -> None:
    """Zero rows: checked like any table, then no file, no registry version; the result
    says so (empty, version = the current one)."""
    lake.append("sales", table([1]), partition_by=["year"])
    before = lake.registry.read()
    s3.reset_stats()
    result = lake.append("sales", table([]), partition_by=["year"], commit_id="nothing")
    assert (result.empty, result.version, result.attempts) == (True, before.version, 0)
    assert "PutObject" not in s3.stats()
    after = lake.registry.read()
    assert (after.version, after.etag) == (before.version, before.etag)
    assert lake.append("new", table([])).empty
    assert "new" not in lake.registry.read().datasets
    with pytest.raises(InvalidNameError):
        lake.append("sales", table([]), partition_by=["no_such_column"])


def test_lock_and_lease_options_reach_the_handle(lake: Lake) -> None:
    """``Lake.lock`` takes the distributed lock's per-request options (``on_lost``,
    ``heartbeat``, ``margin``...) and defaults to that lock's own (no timeout); ``Lake.lease``
    takes the lease's."""
    told: list[LeaseLostError] = []
    handle = lake.lock(write=["/sales"], heartbeat=False, margin=0.5, on_lost=told.append)
    assert (handle.terms.heartbeat, handle.terms.margin) == (False, 0.5)
    assert handle.terms.on_lost == told.append
    assert lake.lock(write=["/sales"]).terms == lake.locks.terms
    assert lake.locks.terms.timeout is None
    lease = lake.lease("job", ttl=10, heartbeat=True, owner_label="nightly")
    assert (lease.terms.ttl, lease.terms.heartbeat, lease.owner.label) == (10, True, "nightly")
    with pytest.raises(ValueError, match="must exceed twice the margin"):
        lake.lock(write=["/sales"], margin=20)


# -- the lake's settings live in the lake --------------------------------------------------------


def test_a_lake_opened_without_settings_uses_the_lakes(client: Any, bucket: str) -> None:
    """A lake created with retention=0 (its vacuum floor follows it down) and opened with
    ``Lake(bucket)``: that Lake's retention is 0, and vacuum at it takes a stray file at
    once. Before, the second Lake assumed a 7-day retention the lake never had: it refused
    a window below it and kept every stray for a week."""
    Lake(bucket, s3=client, retry=FAST_RETRY, retention=0).append(
        "sales", table([1]), partition_by=["year"]
    )
    opened = Lake(bucket, s3=client, retry=FAST_RETRY)
    (stray,) = opened.write("sales", table([9]), partition_by=["year"])
    assert opened.registry.settings() == LakeSettings(retention=0.0, vacuum_floor=0.0)
    assert stray.key in {o.key for o in opened.vacuum().orphans}
    assert opened.vacuum(older_than=0).dry_run


def test_a_setting_given_that_disagrees_with_the_lakes_is_refused(client: Any, bucket: str) -> None:
    """A writer given another retention (or commit window) than the lake's is refused
    before it writes anything, by an error naming both values; so is its read (a version
    is readable by the lake's retention, not by what one process believes). Before, each
    writer kept its own retention and window, and the lake's promises were whatever its
    least careful writer passed."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, retention="1d")
    lake.append("sales", table([1]), partition_by=["year"])
    lake.append("sales", table([2]), partition_by=["year"])
    version = lake.registry.read().version
    stray = Lake(bucket, s3=client, retry=FAST_RETRY, retention="30d")
    with pytest.raises(SettingsMismatchError) as info:
        stray.append("sales", table([3]), partition_by=["year"])
    assert (info.value.setting, info.value.given, info.value.stored) == (
        "retention",
        30 * 86400.0,
        86400.0,
    )
    assert "retention=2592000 s was given, but the lake's retention is 86400 s" in str(info.value)
    with pytest.raises(SettingsMismatchError):
        stray.read("sales", version=version - 1)
    with pytest.raises(SettingsMismatchError):
        Lake(bucket, s3=client, retry=FAST_RETRY, commit_window=5).registry.commit(
            "sales", properties={"a": "b"}
        )
    assert lake.registry.read().version == version
    assert sorted(lake.read("sales")["id"].to_pylist()) == [1, 2]
    # What it was given is what configure changes the lake to; then the other is refused.
    stray.configure(retention="30d")
    stray.append("sales", table([3]), partition_by=["year"])
    with pytest.raises(SettingsMismatchError):
        lake.append("sales", table([4]), partition_by=["year"])


def test_configure_changes_the_settings_of_every_writer(client: Any, bucket: str) -> None:
    """``lake.configure(commit_window=2)`` by one process: another, opened without settings,
    keeps two commit ids in the root when it commits. Before, each writer kept its own
    window (100 by default), whatever the lake's was meant to be."""
    first = Lake(bucket, s3=client, retry=FAST_RETRY)
    first.append("sales", table([1]), partition_by=["year"])
    assert first.configure(commit_window=2, retention="30d") == LakeSettings(
        retention=30 * 86400.0, commit_window=2
    )
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    for n in range(3):
        other.registry.commit("sales", commit_id=f"c{n}", properties={"n": str(n)})
    assert [c.id for c in other.registry.read().commits] == ["c1", "c2"]
    assert other.registry.settings().retention == 30 * 86400.0
    assert first.registry.settings().commit_window == 2  # configured: it uses the lake's now
    with pytest.raises(InvalidArgumentError, match="vacuum_floor"):
        first.configure(vacuum_floor="31d")
    assert other.registry.settings().vacuum_floor == DEFAULTS.vacuum_floor


@pytest.mark.parametrize(
    ("setting", "value"),
    [("commit_window", 100_000_000), ("commit_window", 10_001), ("intent_ttl", "99999d")],
)
def test_a_setting_that_would_grow_the_lake_without_bound_is_refused(
    client: Any, bucket: str, admin: Any, setting: str, value: object
) -> None:
    """A commit window of 100,000,000 ids or an intent TTL of 99,999 days was stored: every
    commit rewrites the root, which keeps that many commit records and fates, so each
    commit's PUT grew without limit; vacuum keeps every intent younger than the TTL, so
    ``metastore/intents/`` was never cleaned up. Above its bound (10,000 ids, an hour) it is
    InvalidArgumentError naming the setting, from ``configure`` (nothing written) and from a
    ``Lake`` given it; the bound itself is accepted, and a root an older lakelock stored
    above it stays readable and writable."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    lake.append("sales", table([1]), partition_by=["year"])
    version = lake.registry.read().version
    with pytest.raises(InvalidArgumentError, match=f"invalid {setting} .*: at most"):
        lake.configure(**{setting: value})
    with pytest.raises(InvalidArgumentError, match=f"invalid {setting} .*: at most"):
        Lake(bucket, s3=client, **{setting: value})
    assert lake.registry.read().version == version
    assert lake.configure(commit_window=10_000, intent_ttl="1h") == LakeSettings(
        commit_window=10_000, intent_ttl=3600.0
    )
    key = lake.store.full_key(REGISTRY_KEY)
    body = orjson.loads(admin.get_object(Bucket=bucket, Key=key)["Body"].read())
    body["settings"]["commit_window"] = 100_000
    admin.put_object(Bucket=bucket, Key=key, Body=orjson.dumps(body))
    fresh = Lake(bucket, s3=client, retry=FAST_RETRY)
    assert fresh.registry.settings().commit_window == 100_000
    fresh.configure(retention="30d")
    fresh.append("sales", table([2]), partition_by=["year"])
    assert sorted(fresh.read("sales")["id"].to_pylist()) == [1, 2]


def test_a_lake_without_stored_settings_keeps_the_defaults_until_its_first_commit(
    lake: Lake, admin: Any
) -> None:
    """A lake written before settings were stored (its root has none) reads as the
    defaults, and its next commit stores them, without changing anything else."""
    lake.append("sales", table([1]), partition_by=["year"])
    key = lake.store.full_key(REGISTRY_KEY)
    body = orjson.loads(admin.get_object(Bucket=lake.bucket, Key=key)["Body"].read())
    del body["settings"]
    admin.put_object(Bucket=lake.bucket, Key=key, Body=orjson.dumps(body))
    fresh = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    assert fresh.registry.read().settings is None
    assert fresh.registry.settings() == DEFAULTS
    fresh.append("sales", table([2]), partition_by=["year"])
    assert fresh.registry.read().settings == DEFAULTS
    assert sorted(fresh.read("sales")["id"].to_pylist()) == [1, 2]


def test_configure_where_no_lake_is_refuses_unless_asked_to_create(
    client: Any, bucket: str
) -> None:
    """``lake.configure(...)`` at a prefix where nothing was ever committed (a mistyped
    ``Lake.from_url``) is refused, naming the prefix, nothing written: the real lake would
    keep its settings while writers of the typo got a new lake. ``create=True`` starts one
    there, as ``lakelock registry configure --create`` does. Before, any prefix got a lake."""
    typo = Lake(bucket, prefix="warehuose", s3=client, retry=FAST_RETRY)
    with pytest.raises(NotFoundError, match=f"no lake at s3://{bucket}/warehuose"):
        typo.configure(retention="30d")
    assert "Contents" not in client.list_objects_v2(Bucket=bucket)
    assert typo.configure(retention="30d", create=True).retention == 30 * 86400.0
    assert typo.registry.read().version == 1
