"""overwrite, delete and compact: one commit each, idempotent, fenced, atomic for readers,
and right beside concurrent writers (a competing commit is forced between an operation's plan
and its compare-and-swap by stalling the operation's registry PUT at the endpoint)."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakelock import Lake
from lakelock._registry._document import parse_registry, serialize_registry
from lakelock.advanced import FoldPolicy
from lakelock.errors import (
    CommitConflictError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidNameError,
    RegistryCorruptError,
    StaleFenceError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, StallAndRace

REGISTRY = "metastore/dataset_registry.json"


@pytest.fixture
def other(client: Any, bucket: str) -> Lake:
    """A second writer of the same lake (its own registry state, as another process)."""
    # Another process that does not fold pending intents into its commits: otherwise it
    # would apply the stalled operation's intent first, in the same swap, and the race these
    # tests force (the other commit lands first) would not happen.
    return Lake(bucket, s3=client, retry=FAST_RETRY, fold_policy=FoldPolicy(max_fold=0))


def rows(ids: list[int], day: int, month: int = 1) -> pa.Table:
    n = len(ids)
    return pa.table({"id": ids, "year": [2024] * n, "month": [month] * n, "day": [day] * n})


COLUMNS = ["year", "month", "day"]


def ids(lake: Lake, dataset: str = "sales", **filters: Any) -> list[int]:
    table = lake.read(dataset)
    for column, value in filters.items():
        table = table.filter(pc.field(column) == value)
    return sorted(table["id"].to_pylist())


def operations(lake: Lake) -> list[tuple[str, str, int, int]]:
    """(id, operation, added, removed) of every recorded commit, oldest first."""
    return [(c.id, c.operation, c.added, c.removed) for c in lake.registry.read().commits]


# -- overwrite ----------------------------------------------------------------------------------


def test_overwrite_replaces_the_partitions_the_table_has_rows_for(lake: Lake) -> None:
    """Default: the table's partitions are replaced, in one commit; others are untouched."""
    lake.append("sales", rows([1, 2], day=1), partition_by=COLUMNS)
    lake.append("sales", rows([3], day=1), partition_by=COLUMNS)
    lake.append("sales", rows([4], day=2), partition_by=COLUMNS)
    before = lake.registry.read().version
    result = lake.overwrite("sales", rows([10, 11], day=1), partition_by=COLUMNS, commit_id="o")
    assert result.version == before + 1
    assert ids(lake, day=1) == [10, 11]
    assert ids(lake, day=2) == [4]
    assert operations(lake)[-1] == ("o", "overwrite", 1, 2)


def test_overwrite_with_a_commit_id_is_idempotent(s3: S3Endpoint, lake: Lake) -> None:
    """Re-running yesterday's job with the same commit id writes and commits nothing."""
    lake.append("sales", rows([1], day=1), partition_by=COLUMNS)
    first = lake.overwrite("sales", rows([2], day=1), partition_by=COLUMNS, commit_id="day-1")
    s3.reset_stats()
    again = lake.overwrite("sales", rows([2], day=1), partition_by=COLUMNS, commit_id="day-1")
    assert (again.version, again.already_committed) == (first.version, True)
    assert "PutObject" not in s3.stats()
    assert ids(lake) == [2]


def test_overwrite_given_partitions_and_leading_parts(lake: Lake) -> None:
    """Named partitions are emptied even if the table has no rows for them; a leading part
    (a month) covers its days; rows outside the named set are refused before any write."""
    for day in (1, 2, 3):
        lake.append("sales", rows([day], day=day), partition_by=COLUMNS)
    lake.append("sales", rows([40], day=1, month=2), partition_by=COLUMNS)
    lake.overwrite(
        "sales",
        rows([20], day=2),
        partitions=["year=2024/month=1/day=2", {"year": 2024, "month": 1, "day": 3}],
        partition_by=COLUMNS,
    )
    assert ids(lake) == [1, 20, 40]
    lake.overwrite(
        "sales", rows([5], day=9), partitions=[{"year": 2024, "month": 1}], partition_by=COLUMNS
    )
    assert ids(lake) == [5, 40]
    version = lake.registry.read().version
    files = len(list(lake.store.list("datasets/")))
    with pytest.raises(InvalidNameError, match="outside"):
        lake.overwrite(
            "sales",
            rows([6], day=1, month=3),
            partitions=["year=2024/month=1"],
            partition_by=COLUMNS,
        )
    assert lake.registry.read().version == version
    assert len(list(lake.store.list("datasets/"))) == files  # nothing written
    with pytest.raises(InvalidNameError):
        lake.overwrite("sales", rows([6], day=1), partitions=[{"day": 1}], partition_by=COLUMNS)


def test_overwrite_all_replaces_the_whole_dataset(lake: Lake) -> None:
    """``partitions="all"``: every partition is replaced; an empty table truncates."""
    lake.append("sales", rows([1], day=1), partition_by=COLUMNS)
    lake.append("sales", rows([2], day=1, month=2), partition_by=COLUMNS)
    lake.overwrite("sales", rows([3], day=5), partitions="all", partition_by=COLUMNS)
    assert ids(lake) == [3]
    assert list(lake.registry.read().datasets["sales"].partitions) == ["year=2024/month=1/day=5"]
    lake.overwrite("sales", rows([1], day=5).slice(0, 0), partitions="all", partition_by=COLUMNS)
    assert lake.registry.read().datasets["sales"].partitions == {}
    assert lake.read("sales").num_rows == 0


def test_overwrite_of_an_unpartitioned_dataset(lake: Lake) -> None:
    """Without partition columns the dataset is one partition: overwrite replaces it."""
    lake.append("facts", pa.table({"id": [1, 2]}))
    lake.overwrite("facts", pa.table({"id": [3]}))
    assert lake.read("facts")["id"].to_pylist() == [3]
    assert lake.overwrite("facts", pa.table({"id": pa.array([], pa.int64())})).empty


def test_overwrite_also_replaces_an_append_that_landed_first(
    lake: Lake, other: Lake, stall_and_race: StallAndRace
) -> None:
    """The replaced partitions lose what they hold when the commit applies: an append to
    them committed between the overwrite's plan and its CAS is replaced too; an append to
    another partition is kept."""
    lake.append("sales", rows([1], day=1), partition_by=COLUMNS)

    def competitor() -> None:
        other.append("sales", rows([2], day=1), partition_by=COLUMNS)
        other.append("sales", rows([3], day=2), partition_by=COLUMNS)

    result = stall_and_race(
        lambda: lake.overwrite("sales", rows([9], day=1), partition_by=COLUMNS), competitor
    )[0]
    assert result.redrives >= 1
    assert ids(lake) == [3, 9]
    assert operations(lake)[-1][1:] == ("overwrite", 1, 2)


def test_overwrite_is_atomic_for_readers(lake: Lake) -> None:
    """A snapshot taken before the overwrite still reads the old rows; after, only new."""
    lake.append("sales", rows([1, 2], day=1), partition_by=COLUMNS)
    before = lake.registry.read()
    lake.overwrite("sales", rows([3], day=1), partition_by=COLUMNS)
    assert sorted(lake.read("sales", snapshot=before)["id"].to_pylist()) == [1, 2]
    assert ids(lake) == [3]


def test_overwrite_is_fenced(lake: Lake) -> None:
    """A stale fencing token is refused and nothing changes."""
    lake.append("sales", rows([1], day=1), partition_by=COLUMNS, fence=("lease:etl", 5))
    with pytest.raises(StaleFenceError):
        lake.overwrite("sales", rows([2], day=1), partition_by=COLUMNS, fence=("lease:etl", 4))
    assert ids(lake) == [1]


# -- delete -------------------------------------------------------------------------------------


def test_delete_partitions_by_path_mapping_and_leading_part(lake: Lake) -> None:
    """Named partitions go in one commit; a leading part covers everything under it."""
    for month in (1, 2):
        for day in (1, 2):
            lake.append(
                "sales", rows([month * 10 + day], day=day, month=month), partition_by=COLUMNS
            )
    lake.delete("sales", partitions=["year=2024/month=1/day=1"], commit_id="d1")
    assert ids(lake) == [12, 21, 22]
    lake.delete("sales", partitions=[{"year": 2024, "month": 2}])
    assert ids(lake) == [12]
    assert operations(lake)[-2] == ("d1", "delete", 0, 1)


def test_delete_where_a_predicate_on_partition_columns_holds(lake: Lake) -> None:
    """``where`` is evaluated on the typed partition values (day 10 > day 9, not as text)."""
    for day in (2, 9, 10, 30):
        lake.append("sales", rows([day], day=day), partition_by=COLUMNS)
    lake.delete("sales", where=(pc.field("day") >= 9) & (pc.field("day") < 30))
    assert ids(lake) == [2, 30]
    with pytest.raises(InvalidArgumentError, match="invalid where"):
        lake.delete("sales", where=pc.field("id") > 1)  # not a partition column


def test_delete_of_nothing_commits_nothing(lake: Lake) -> None:
    """No partition matches: no registry version, ``empty``; unknown datasets are typed."""
    lake.append("sales", rows([1], day=1), partition_by=COLUMNS)
    version = lake.registry.read().version
    result = lake.delete("sales", where=pc.field("day") > 100)
    assert (result.empty, result.version) == (True, version)
    assert lake.delete("sales", partitions=["year=2023"]).empty
    assert lake.registry.read().version == version
    with pytest.raises(DatasetNotFoundError):
        lake.delete("nothing", partitions="all")
    with pytest.raises(InvalidArgumentError):
        lake.delete("sales")  # says which partitions


def test_delete_also_removes_an_append_that_landed_first(
    lake: Lake, other: Lake, stall_and_race: StallAndRace
) -> None:
    """As overwrite: files appended to a deleted partition just before the delete's CAS go
    too; the whole dataset (``"all"``) includes partitions created meanwhile."""
    lake.append("sales", rows([1], day=1), partition_by=COLUMNS)
    stall_and_race(
        lambda: lake.delete("sales", partitions=["year=2024/month=1/day=1"]),
        lambda: other.append("sales", rows([2], day=1), partition_by=COLUMNS),
    )
    assert lake.read("sales").num_rows == 0
    lake.append("sales", rows([3], day=3), partition_by=COLUMNS)
    stall_and_race(
        lambda: lake.delete("sales", partitions="all"),
        lambda: other.append("sales", rows([4], day=4), partition_by=COLUMNS),
    )
    assert lake.registry.read().datasets["sales"].partitions == {}


# -- compact ------------------------------------------------------------------------------------


def test_compact_merges_small_files_into_one_commit(lake: Lake) -> None:
    """Small files of each partition become one file; rows and schema are unchanged; the
    commit removes exactly the files it read."""
    for n in range(4):
        lake.append("sales", rows([n], day=1), partition_by=COLUMNS)
    lake.append("sales", rows([9], day=2), partition_by=COLUMNS)  # alone: nothing to merge
    before = lake.read("sales")
    result = lake.compact("sales", commit_id="c")
    assert not result.empty
    state = lake.registry.read().datasets["sales"]
    assert state.partitions["year=2024/month=1/day=1"].file_count == 1
    assert state.partitions["year=2024/month=1/day=2"].file_count == 1
    after = lake.read("sales")
    assert after.schema == before.schema
    assert sorted(after["id"].to_pylist()) == [0, 1, 2, 3, 9]
    assert operations(lake)[-1] == ("c", "compact", 1, 4)
    assert lake.compact("sales").empty  # nothing left to merge: no new version


def test_compact_respects_the_target_size_and_partitions(lake: Lake) -> None:
    """Files are merged in runs up to the target size; files at or above it stay; only the
    named partitions are touched."""
    for n in range(6):
        lake.append("sales", rows([n], day=1), partition_by=COLUMNS)
        lake.append("sales", rows([n], day=2), partition_by=COLUMNS)
    size = lake.registry.files("sales")[0].size
    lake.compact(
        "sales", partitions=[{"year": 2024, "month": 1, "day": 1}], target_file_size=size * 2 + 1
    )
    state = lake.registry.read().datasets["sales"]
    assert state.partitions["year=2024/month=1/day=1"].file_count == 3
    assert state.partitions["year=2024/month=1/day=2"].file_count == 6
    assert ids(lake, day=1) == list(range(6))
    with pytest.raises(InvalidArgumentError):
        lake.compact("sales", target_file_size=0)


def test_compact_keeps_appends_that_land_meanwhile(
    lake: Lake, other: Lake, stall_and_race: StallAndRace
) -> None:
    """Appends committed between the compaction's plan and its CAS -- to the compacted
    partition and to another -- survive: compaction removes only what it read."""
    for n in range(3):
        lake.append("sales", rows([n], day=1), partition_by=COLUMNS)

    def competitor() -> None:
        other.append("sales", rows([7], day=1), partition_by=COLUMNS)
        other.append("sales", rows([8], day=2), partition_by=COLUMNS)

    result = stall_and_race(lambda: lake.compact("sales"), competitor)[0]
    assert result.redrives >= 1
    assert ids(lake) == [0, 1, 2, 7, 8]
    assert (
        lake.registry.read().datasets["sales"].partitions["year=2024/month=1/day=1"].file_count == 2
    )


def test_compact_conflicts_when_its_files_were_removed_first(
    lake: Lake, other: Lake, stall_and_race: StallAndRace
) -> None:
    """If another commit removed a file the compaction read (an overwrite), the compaction
    is a conflict and changes nothing: the overwrite's rows stand."""
    for n in range(3):
        lake.append("sales", rows([n], day=1), partition_by=COLUMNS)
    with pytest.raises(CommitConflictError):
        stall_and_race(
            lambda: lake.compact("sales"),
            lambda: other.overwrite("sales", rows([5], day=1), partition_by=COLUMNS),
        )
    assert ids(lake) == [5]


def test_commit_log_records_every_operation(lake: Lake) -> None:
    """append, overwrite, delete, compact, rename and copy each name themselves in the log;
    plain registry commits are "commit"; a move's write lock is "lock" and "unlock"."""
    lake.append("sales", rows([1], day=1), partition_by=COLUMNS, commit_id="a")
    lake.append("sales", rows([2], day=1), partition_by=COLUMNS, commit_id="a2")
    lake.compact("sales", commit_id="c")
    lake.overwrite("sales", rows([3], day=2), partition_by=COLUMNS, commit_id="o")
    lake.copy_partition("sales", "year=2024/month=1/day=2", to_dataset="copy", commit_id="cp")
    lake.rename_partition(
        "sales",
        {"year": 2024, "month": 1, "day": 2},
        to_partition={"year": 2024, "month": 1, "day": 3},
        commit_id="r",
    )
    lake.delete("sales", partitions=["year=2024/month=1/day=1"], commit_id="d")
    lake.registry.commit("sales", properties={"owner": "etl"}, commit_id="p")
    logged = [(c[0], c[1]) for c in operations(lake)]
    # The moves' write locks are taken and released by commits of their own around them.
    assert [op for _, op in logged[4:10]] == ["lock", "copy", "unlock", "lock", "rename", "unlock"]
    assert [(c, op) for c, op in logged if op not in ("lock", "unlock")] == [
        ("a", "append"),
        ("a2", "append"),
        ("c", "compact"),
        ("o", "overwrite"),
        ("cp", "copy"),
        ("r", "rename"),
        ("d", "delete"),
        ("p", "commit"),
    ]


def test_commit_records_without_an_operation_read_as_commit() -> None:
    """Registry documents written before commits named their operation still parse (as
    "commit"), and the operation survives a round trip."""
    record = {"id": "x", "version": 1, "dataset": "sales", "at": "t", "added": 1, "removed": 0}
    body = orjson.dumps(
        {
            "format_version": 1,
            "version": 1,
            "updated_at": "t",
            "datasets": {},
            "fences": {},
            "lock_fences": {},
            "commits": [record, {**record, "id": "y", "operation": "overwrite"}],
            "retired": [],
        }
    )
    doc = parse_registry(body)
    assert [c.operation for c in doc.commits] == ["commit", "overwrite"]
    assert parse_registry(serialize_registry(doc)) == doc
    with pytest.raises(RegistryCorruptError):
        parse_registry(body.replace(b'"overwrite"', b"7"))
