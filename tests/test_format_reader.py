"""docs/FORMAT.md is enough to read a lake: a reader written from it alone
(``tests/_support/format_reader.py``, which imports nothing of lakelock) reads, at every
registry version, the datasets, files and rows lakelock's own reads give, on lakes made by
every kind of commit against the embedded endpoint, and refuses the versions lakelock
refuses."""

from __future__ import annotations

import concurrent.futures
import hashlib
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakelock import Lake
from lakelock._registry._changes import Change
from lakelock.errors import (
    DatasetNotFoundError,
    RegistryCorruptError,
    SnapshotExpiredError,
    VersionNotFoundError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, REPO, plant_intent
from tests._support.format1 import plant_format1
from tests._support.format_reader import Dataset, FormatError, FormatReader, NotReadable

#: How lakelock names each reason the reader gives for a version it cannot read.
REFUSALS: dict[str, tuple[type[Exception], ...]] = {
    "expired": (SnapshotExpiredError,),
    "before-upgrade": (VersionNotFoundError,),
    "missing": (VersionNotFoundError, DatasetNotFoundError),
}


def rows(ids: list[int], day: int, *, region: str = "eu") -> pa.Table:
    return pa.table({"id": ids, "day": [day] * len(ids), "region": [region] * len(ids)})


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    """A table's rows as dicts, columns by name, in one order whatever the files' order."""
    table = table.select(sorted(table.column_names))
    return sorted(table.to_pylist(), key=lambda r: [(v is None, str(v)) for v in r.values()])


def without_metadata(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.remove_metadata() for f in schema]).remove_metadata()


def lakelock_version(lake: Lake, version: int) -> dict[str, Any] | Exception:
    """Every dataset at registry ``version`` as lakelock reads it, or the error it raises."""
    try:
        snap = lake.registry.read(version=version)
        return {name: snap.datasets[name] for name in list(snap.datasets)}
    except (SnapshotExpiredError, VersionNotFoundError) as error:
        return error


def readers_version(reader: FormatReader, version: int | None) -> dict[str, Dataset] | NotReadable:
    """Every dataset at registry ``version`` as the reader reads it, or why it cannot."""
    try:
        return reader.datasets(version=version)
    except NotReadable as error:
        return error


def compare_dataset(lake: Lake, reader: FormatReader, ours: Dataset, version: int | None) -> None:
    """One dataset version: its snapshot's fields, its files and its rows."""
    state = lake.registry.dataset(ours.name, version=version)
    assert ours.version == state.updated_version
    assert ours.partition_by == state.partition_by
    assert dict(ours.properties) == dict(state.properties)
    assert ours.commits == tuple(c.id for c in state.commits)
    if state.schema is None:
        assert ours.schema is None
    else:
        assert ours.schema is not None
        assert ours.schema.equals(state.schema)
    snap = lake.registry.read(version=version) if version is not None else None
    theirs = lake.registry.files(ours.name, snapshot=snap)
    assert [(f.key, f.partition, f.size, f.records) for f in ours.files] == [
        (f.key, f.partition_path, f.size, f.record_count) for f in theirs
    ]
    table = lake.read(ours.name, version=version)
    mine = reader.rows(ours)
    assert without_metadata(mine.schema) == without_metadata(table.schema)
    assert sorted_rows(mine) == sorted_rows(table)
    if ours.files:  # one partition, as lakelock reads it alone
        path = ours.files[0].partition
        part = replace(ours, files=tuple(f for f in ours.files if f.partition == path))
        theirs_part = lake.read(ours.name, version=version, partitions=[path])
        assert sorted_rows(reader.rows(part)) == sorted_rows(theirs_part)
    if ours.at:  # time travel by server time: the newest version committed by then
        found = reader.dataset(ours.name, as_of=ours.at).version
        assert found == lake.registry.dataset(ours.name, as_of=ours.at).updated_version


def compare_indexes(lake: Lake, reader: FormatReader, name: str) -> None:
    """The current snapshot's indexes: each partition and commit id looked up along its one
    path is the entry the whole walk finds, and lakelock finds every commit id the reader
    does at the version the reader says."""
    snap = reader.snapshot_at(name)
    for path, partition in reader.partitions(snap).items():
        assert reader.partition(snap, path) == partition
    assert reader.partition(snap, "day=no-such-partition") is None
    ids = reader.commit_ids(snap)
    for commit_id, entry in ids.items():
        assert reader.find_commit(snap, commit_id) == entry
        assert lake.registry.find_commit(commit_id, datasets=[name]) == entry["version"]


def compare_lake(
    lake: Lake, reader: FormatReader, versions: list[int | None] | None = None
) -> None:
    """Every registry version of the lake (or ``versions``; ``None``: the current one), read
    by both, agrees: the same datasets with the same files and rows, or the same refusal."""
    root = reader.root()
    for version in versions if versions is not None else [*range(1, root["version"] + 1), None]:
        theirs = lakelock_version(lake, version) if version is not None else None
        mine = readers_version(reader, version)
        if isinstance(mine, NotReadable):
            assert isinstance(theirs, REFUSALS[mine.reason]), (version, mine, theirs)
            continue
        if version is not None:
            assert not isinstance(theirs, Exception), (version, theirs)
            assert set(mine) == set(theirs), version
        for dataset in mine.values():
            compare_dataset(lake, reader, dataset, version)
    for name in root["datasets"] if root["format_version"] != 1 else ():
        compare_indexes(lake, reader, name)
    assert reader.pending_intents() == lake.registry.pending_intents()


@pytest.fixture
def reader(client: Any, bucket: str) -> FormatReader:
    return FormatReader(client, bucket)


# -- lakes made by each kind of commit --------------------------------------------------------


def test_appends_from_threads_and_processes(
    lake: Lake, reader: FormatReader, s3: S3Endpoint, bucket: str
) -> None:
    """Appends of four threads and of two other processes, folded into each other's swaps."""
    by = ["day", "region"]
    lake.append("sales", rows([0], 1), partition_by=by)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, s3.url, bucket, str(n)],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(
            pool.map(
                lambda n: lake.append("sales", rows([10 + n], n % 3), partition_by=by), range(8)
            )
        )
    for worker in workers:
        _, err = worker.communicate(timeout=90)
        assert worker.returncode == 0, err
    assert lake.read("sales").num_rows == 1 + 8 + 2 * 3
    compare_lake(lake, reader)


#: Three appends from another process (``python -c APPENDER url bucket n``).
APPENDER = """
import sys, boto3, pyarrow as pa, lakelock
from lakelock.testing import client_kwargs
url, bucket, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
lake = lakelock.Lake(bucket, s3=boto3.client("s3", **client_kwargs(url)))
for i in range(3):
    ids = [100 * (n + 1) + i]
    lake.append("sales", pa.table({"id": ids, "day": [i], "region": ["us"]}),
                partition_by=["day", "region"])
lake.close()
"""


def test_every_kind_of_commit(lake: Lake, reader: FormatReader) -> None:
    """Overwrites, deletes, removals of files and of partitions, a commit spanning datasets,
    a restore, a schema merge, partition copies and renames, properties."""
    by = ["day", "region"]
    lake.append("sales", rows([1, 2], 1), partition_by=by)
    lake.append("sales", rows([3], 2), partition_by=by, commit_id="c-2")
    lake.append("sales", rows([4], 2, region="us"), partition_by=by)
    lake.overwrite("sales", rows([5, 6], 2), partition_by=by)
    lake.delete("sales", where=pc.field("region") == "us")
    lake.set_properties("sales", {"owner": "etl"})
    first = lake.registry.files("sales")[0]
    lake.registry.commit("sales", remove=[first.key])
    merged = rows([7], 3).append_column("amount", pa.array([1.5]))
    lake.append("sales", merged, partition_by=by, schema_mode="merge")
    lake.copy_partition("sales", {"day": 3, "region": "eu"}, to_dataset="archive")
    lake.rename_partition("sales", "day=3/region=eu", to_partition="day=4/region=eu")
    a = lake.write("sales", rows([8], 5), partition_by=by)
    b = lake.write("archive", rows([9], 5), partition_by=by)
    lake.registry.commit_changes(
        [Change("sales", "both", add=tuple(a)), Change("archive", "both", add=tuple(b))]
    )
    lake.restore("sales", version=3)
    lake.registry.commit("archive", remove_partitions=["day=5"])
    lake.append("sales", rows([10], 1), partition_by=by, commit_id="last")
    lake.append("sales", rows([11], 1), partition_by=by)
    lake.compact("sales")
    compare_lake(lake, reader)


def test_vacuum_after_every_kind_of_commit(lake: Lake, reader: FormatReader) -> None:
    """A vacuum with no window left (floor 0): every replaced version is out of both reads,
    the current ones read the same."""
    by = ["day"]
    lake.configure(vacuum_floor=0, create=True)
    for n in range(3):
        lake.append("sales", pa.table({"id": [n], "day": [n % 2]}), partition_by=by)
    lake.overwrite("sales", pa.table({"id": [9], "day": [0]}), partition_by=by)
    lake.restore("sales", version=3)
    lake.delete("sales", partitions=[{"day": 1}])
    lake.vacuum(older_than=0, enforce_retention=False, dry_run=False)
    # (No commit after it: a file written within a second of its cutoff is refused, rule 10.)
    with pytest.raises(NotReadable, match="expired"):
        reader.dataset("sales", version=2)  # its first (version 1: the settings)
    compare_lake(lake, reader)


def test_a_format1_lake_upgraded(lake: Lake, reader: FormatReader) -> None:
    """Versions before the upgrade are refused by both, as "Upgrading from format 1" says."""
    plant_format1(lake, [("events", "c1", [1, 2], 1), ("events", "c2", [3], 2)], versions=True)
    compare_lake(lake, reader)  # still in format 1: its current version only
    lake.append("events", pa.table({"id": [4], "day": [3]}), partition_by=["day"])
    lake.append("events", pa.table({"id": [5], "day": [3]}), partition_by=["day"])
    compare_lake(lake, reader)


def test_pending_intents_are_not_read(lake: Lake, reader: FormatReader) -> None:
    """An intent no swap applied yet is part of no version (rule 1): both reads leave it
    out, and once the next commit folds it both read it."""
    lake.append("events", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    files = lake.write("events", pa.table({"id": [2], "day": [2]}), partition_by=["day"])
    key = plant_intent(lake.store, Change("events", "dead-writer", add=tuple(files)))
    assert reader.pending_intents() == [key]
    compare_lake(lake, reader)
    assert reader.rows(reader.dataset("events")).column("id").to_pylist() == [1]
    # A process's first commit lists the intents pending and folds them into its swap.
    with Lake(lake.bucket, s3=lake.store.client, retry=FAST_RETRY) as other:
        other.append("events", pa.table({"id": [3], "day": [3]}), partition_by=["day"])
    assert reader.pending_intents() == []
    assert sorted(reader.rows(reader.dataset("events")).column("id").to_pylist()) == [1, 2, 3]
    compare_lake(lake, reader)


def test_indexes_past_one_node(lake: Lake, reader: FormatReader) -> None:
    """100 partitions in one commit (a hash trie of node objects, each partition a part of
    one shared manifest) and 180 commit ids (an ordered tree of node objects: the ids go
    into it 64 at a time, and a leaf holds 96)."""
    days = list(range(100))
    lake.append("wide", pa.table({"id": days, "day": days}), partition_by=["day"])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        commit = lambda n: lake.set_properties("wide", {"n": str(n)}, commit_id=f"p-{n:03d}")  # noqa: E731
        list(pool.map(commit, range(179)))
    snap = reader.snapshot_at("wide")
    assert "children" in snap["partitions"]
    assert "lows" in snap["commit_ids"]
    assert len(reader.commit_ids(snap)) == 180
    compare_lake(lake, reader, versions=[None])


# -- seeded random workloads ------------------------------------------------------------------

Step = Callable[[Lake, random.Random, int], None]


def step_append(lake: Lake, rng: random.Random, n: int) -> None:
    name = rng.choice(["a", "b"])
    table = rows([n, n + 1000][: rng.randint(1, 2)], rng.randint(0, 3), region=rng.choice("xy"))
    lake.append(name, table, partition_by=["day", "region"], commit_id=f"s{n}")


def step_overwrite(lake: Lake, rng: random.Random, n: int) -> None:
    lake.overwrite("a", rows([n], rng.randint(0, 3)), partition_by=["day", "region"])


def step_delete(lake: Lake, rng: random.Random, n: int) -> None:
    if "a" in lake.registry.read().datasets:
        lake.delete("a", where=pc.field("day") == rng.randint(0, 3))


def step_remove_file(lake: Lake, rng: random.Random, n: int) -> None:
    files = lake.registry.files("a") if "a" in lake.registry.read().datasets else []
    if files:
        lake.registry.commit("a", remove=[rng.choice(files).key])


def step_restore(lake: Lake, rng: random.Random, n: int) -> None:
    versions = (
        [h.version for h in lake.history("a")] if "a" in lake.registry.read().datasets else []
    )
    if len(versions) > 1:
        lake.restore("a", version=rng.choice(versions[1:]))


def step_spanning(lake: Lake, rng: random.Random, n: int) -> None:
    by = ["day", "region"]
    a = lake.write("a", rows([n], rng.randint(0, 3)), partition_by=by)
    b = lake.write("b", rows([n], rng.randint(0, 3)), partition_by=by)
    lake.registry.commit_changes(
        [Change("a", f"g{n}", add=tuple(a)), Change("b", f"g{n}", add=tuple(b))]
    )


def step_move(lake: Lake, rng: random.Random, n: int) -> None:
    datasets = lake.registry.read().datasets
    paths = sorted(datasets["a"].partitions) if "a" in datasets else []
    if not paths:
        return
    path = rng.choice(paths)
    copied = datasets["c"].partitions if "c" in datasets else {}
    if rng.random() < 0.5 and path not in copied:  # a copy's destination must be new
        lake.copy_partition("a", path, to_dataset="c")
    else:
        lake.rename_partition("a", path, to_partition=f"day={4 + n}/region=z")


STEPS: tuple[Step, ...] = (
    step_append,
    step_append,
    step_append,
    step_overwrite,
    step_delete,
    step_remove_file,
    step_restore,
    step_spanning,
    step_move,
)


def run_workload(lake: Lake, seed: int, steps: int) -> None:
    rng = random.Random(seed)
    for n in range(steps):
        rng.choice(STEPS)(lake, rng, n)


@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_workloads(lake: Lake, reader: FormatReader, seed: int) -> None:
    run_workload(lake, seed, 10)
    compare_lake(lake, reader)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # every version compared: minutes
@pytest.mark.parametrize("seed", range(3, 6))
def test_seeded_workloads_long(lake: Lake, reader: FormatReader, seed: int) -> None:
    """Longer workloads (100 commits: commit ids past the first flush into the index), then
    a vacuum with no window left, and the lake compared again."""
    lake.configure(vacuum_floor=0, create=True)
    run_workload(lake, seed, 100)
    compare_lake(lake, reader)
    lake.vacuum(older_than=0, enforce_retention=False, dry_run=False)
    compare_lake(lake, reader)


def test_a_reader_that_breaks_the_format_is_caught(
    lake: Lake, reader: FormatReader, admin: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison can fail: a reader taking the hash trie's bits from the other end
    finds no partition by its path, and an object replaced behind the registry's back is
    refused by both readers."""
    days = list(range(100))  # past one leaf: a branch whose slots the bits pick
    lake.append("wide", pa.table({"id": days, "day": days}), partition_by=["day"])
    compare_indexes(lake, reader, "wide")
    monkeypatch.setattr(FormatReader, "lookup_hashed", slots_from_the_end)
    with pytest.raises(AssertionError):
        compare_indexes(lake, reader, "wide")
    monkeypatch.undo()
    snap = reader.snapshot_at("wide")
    ref = next(iter(reader.partitions(snap).values()))["manifests"][0]
    body = admin.get_object(Bucket=bucket, Key=ref["key"])["Body"].read()
    admin.put_object(
        Bucket=bucket, Key=ref["key"], Body=body.replace(b'"records":1', b'"records":2')
    )
    with pytest.raises(FormatError):
        FormatReader(lake.store.client, bucket).dataset("wide")
    with (
        Lake(bucket, s3=lake.store.client, retry=FAST_RETRY) as fresh,
        pytest.raises(RegistryCorruptError),
    ):
        fresh.read("wide")


def slots_from_the_end(self: FormatReader, top: Any, key: str) -> Any:
    """``lookup_hashed`` reading the digest's bits from its least significant end."""
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest(), "big")
    node, depth = top, 0
    while "children" in node:
        ref = node["children"].get(str((digest >> (5 * depth)) & 31))
        if ref is None:
            return None
        node, depth = self.node(ref), depth + 1
    return node["entries"].get(key)


def test_reader_imports_nothing_of_lakelock() -> None:
    """The reader is an outsider's: it reads the format, not lakelock's code."""
    source = (REPO / "tests" / "_support" / "format_reader.py").read_text()
    assert "lakelock" not in "".join(
        line for line in source.splitlines() if line.startswith(("import ", "from "))
    )


def test_a_lake_under_a_prefix(s3: S3Endpoint, client: Any, bucket: str) -> None:
    """Keys in documents are relative to the lake's prefix."""
    lake = Lake(bucket, prefix="lakes/one", s3=client, retry=FAST_RETRY)
    try:
        lake.append("events", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
        lake.append("events", pa.table({"id": [2], "day": [2]}), partition_by=["day"])
        compare_lake(lake, FormatReader(client, bucket, "lakes/one"))
    finally:
        lake.close()
