"""Adversarial tests of a cluster job's commit of its workers' files (README, "Engines": the
workers write with ``config.open().write`` and the driver commits once with
``registry.commit``): a worker whose rows carry a column in another type than the
dataset's, as a job reading a CSV without its schema would."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry import _builder
from lakelock.errors import SchemaMismatchError
from tests._support import FAST_RETRY


@pytest.mark.parametrize("id_type", [pa.string(), pa.float64()], ids=["string", "double"])
def test_a_workers_file_in_a_type_the_dataset_cannot_hold_is_refused(
    lake: Lake, id_type: pa.DataType
) -> None:
    """``events`` holds ``id`` as int64. A job's workers write their shares, one of them
    with ``id`` as a string (or a double), and the driver commits them all. The commit must
    be refused (``SchemaMismatchError`` naming the file, the column and both types),
    nothing committed: lakelock reads every file cast to the dataset's schema, so what a
    user would have lost is the dataset, every later read of it failing with pyarrow's
    untyped ``ArrowInvalid`` until an earlier version is restored by hand. (Before, the
    commit landed.)"""
    lake.append("events", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    config = lake.config
    good = config.open().write("events", pa.table({"id": [2], "day": [2]}), partition_by=["day"])
    shares = pa.table({"id": pa.array(["3"]).cast(id_type), "day": [3]})
    bad = config.open().write("events", shares, partition_by=["day"])
    with pytest.raises(SchemaMismatchError, match=f"column 'id' as {id_type}") as refused:
        lake.registry.commit("events", add=good + bad, commit_id="load-3")
    assert refused.value.dataset == "events"
    assert lake.read("events")["id"].to_pylist() == [1]
    assert [h.operation for h in lake.history("events")] == ["append"]


def test_a_workers_file_in_a_type_the_dataset_holds_is_committed(lake: Lake) -> None:
    """A worker's ``id`` as int32 where the dataset's is int64 (every value fits: the
    reader widens it) is committed, and reads as the dataset's type."""
    lake.append("events", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    narrow = pa.table({"id": pa.array([2], pa.int32()), "day": [2]})
    files = lake.config.open().write("events", narrow, partition_by=["day"])
    lake.registry.commit("events", add=files, commit_id="load-2")
    assert sorted(lake.read("events")["id"].to_pylist()) == [1, 2]


def test_a_workers_timestamps_finer_than_the_datasets_are_refused(lake: Lake) -> None:
    """``events`` holds ``at`` in microseconds; a worker's pandas frame carries it in
    nanoseconds (one nanosecond past the epoch). The commit must be refused: the reader's
    safe cast to microseconds fails on that value, so every later read of the dataset would
    have failed (``ArrowInvalid: ... would lose data``). A coarser unit (milliseconds) is
    held and committed."""
    lake.append("events", pa.table({"at": pa.array([0], pa.timestamp("us"))}))
    fine = pa.table({"at": pa.array([1], pa.timestamp("ns"))})
    with pytest.raises(SchemaMismatchError, match="timestamp"):
        lake.registry.commit("events", add=lake.config.open().write("events", fine))
    coarse = pa.table({"at": pa.array([2], pa.timestamp("ms"))})
    lake.registry.commit("events", add=lake.config.open().write("events", coarse))
    assert lake.read("events").num_rows == 2


def test_a_workers_partition_column_in_another_type_is_committed(lake: Lake) -> None:
    """A partition column's values are read from the file's path, never from the file: a
    worker whose ``day`` is int64 where the dataset's partition column ``day`` is int32
    commits, and reads back as the dataset's type (refusing it would refuse a commit every
    read of which works)."""
    lake.append(
        "events", pa.table({"id": [1], "day": pa.array([1], pa.int32())}), partition_by=["day"]
    )
    files = lake.config.open().write(
        "events", pa.table({"id": [2], "day": pa.array([2], pa.int64())}), partition_by=["day"]
    )
    lake.registry.commit("events", add=files, commit_id="load-2")
    assert sorted(lake.read("events")["day"].to_pylist()) == [1, 2]


def test_a_workers_file_committed_with_the_datasets_schema_declared_is_checked(
    lake: Lake,
) -> None:
    """A driver that declares the dataset's own schema with the workers' files (as a job
    that keeps the schema beside its code does) gets the same check: a file storing ``id``
    as a string is refused, nothing committed. (Before, a declared schema skipped the check
    and the commit landed, every later read failing.)"""
    lake.append("events", pa.table({"id": [1]}))
    schema = lake.read("events").schema
    bad = lake.config.open().write("events", pa.table({"id": ["2"]}))
    with pytest.raises(SchemaMismatchError, match="column 'id'"):
        lake.registry.commit("events", add=bad, schema=schema)
    assert lake.read("events")["id"].to_pylist() == [1]


def test_a_workers_column_another_process_added_meanwhile_is_judged_by_its_type(
    lake: Lake, client: Any, bucket: str
) -> None:
    """The driver read ``events`` (``id`` only); since then another pipeline merged a column
    ``score`` (int64). A worker of this job writes ``score`` as a string and the driver
    commits its files. The commit must be refused (``SchemaMismatchError``), nothing
    committed: the driver judged the file against the dataset as it last read it, which
    lacks ``score``, so the file landed and every later read of ``events`` failed on it
    (``ArrowInvalid``) — the dataset lost to every reader, the other pipeline's included."""
    lake.append("events", pa.table({"id": [1]}))
    with Lake(bucket, s3=client, retry=FAST_RETRY) as other:
        other.append("events", pa.table({"id": [2], "score": [7]}), schema_mode="merge")
    worker = pa.table({"id": [3], "score": ["high"]})
    files = lake.config.open().write("events", worker)
    with pytest.raises(SchemaMismatchError, match="column 'score' as string"):
        lake.registry.commit("events", add=files, commit_id="load-3")
    assert sorted(lake.read("events")["id"].to_pylist()) == [1, 2]


def test_a_workers_column_the_dataset_lacks_is_refused_before_it_can_break_reads(
    lake: Lake, client: Any, bucket: str
) -> None:
    """``events`` holds ``id``; a worker's file also holds ``score`` as a string, which
    the dataset lacks. The driver's commit without ``schema_mode="merge"`` must be refused
    (``SchemaMismatchError`` naming the column), nothing committed, as ``lake.append`` of
    such rows is. Before, it landed with the column ignored: when another pipeline later
    merged ``score`` as int64, every read of ``events`` failed on that file
    (``ArrowInvalid``), the other pipeline's included."""
    lake.append("events", pa.table({"id": [1]}))
    files = lake.config.open().write("events", pa.table({"id": [2], "score": ["high"]}))
    with pytest.raises(SchemaMismatchError, match="'score'") as refused:
        lake.registry.commit("events", add=files, commit_id="load-2")
    assert refused.value.dataset == "events"
    assert [h.operation for h in lake.history("events")] == ["append"]
    with Lake(bucket, s3=client, retry=FAST_RETRY) as other:
        other.append("events", pa.table({"id": [3], "score": [7]}), schema_mode="merge")
    assert sorted(lake.read("events")["id"].to_pylist()) == [1, 3]


def test_a_workers_column_the_dataset_lacks_is_merged_with_schema_mode_merge(
    lake: Lake, client: Any, bucket: str
) -> None:
    """With ``schema_mode="merge"`` the same commit merges ``score`` in the file's type, as
    ``lake.append`` would, and its rows read back; another pipeline's later merge of
    ``score`` as int64 is then refused (types never change) instead of breaking reads."""
    lake.append("events", pa.table({"id": [1]}))
    files = lake.config.open().write("events", pa.table({"id": [2], "score": ["high"]}))
    lake.registry.commit("events", add=files, commit_id="load-2", schema_mode="merge")
    rows = lake.read("events").sort_by("id")
    assert rows.schema.field("score").type == pa.string()
    assert rows["score"].to_pylist() == [None, "high"]
    with Lake(bucket, s3=client, retry=FAST_RETRY) as other, pytest.raises(SchemaMismatchError):
        other.append("events", pa.table({"id": [3], "score": [7]}), schema_mode="merge")
    assert lake.read("events").num_rows == 2


def test_a_workers_pandas_index_is_not_a_column_the_dataset_lacks(lake: Lake) -> None:
    """A worker's share built from a filtered pandas frame carries its index as
    ``__index_level_0__`` (named so in the file's pandas metadata): that is not data, and
    its commit is accepted without ``schema_mode="merge"``, the index not merged, as
    before. Refusing it would refuse every such job."""
    pd = pytest.importorskip("pandas")
    lake.append("events", pa.table({"id": [1]}))
    frame = pd.DataFrame({"id": [2, 3, 4, 5]})
    share = pa.Table.from_pandas(frame[frame["id"] != 3])
    assert "__index_level_0__" in share.schema.names
    lake.registry.commit("events", add=lake.config.open().write("events", share))
    lake.registry.commit(
        "events",
        add=lake.config.open().write("events", pa.Table.from_pandas(frame[frame["id"] != 4])),
        schema_mode="merge",
    )
    rows = lake.read("events")
    assert rows.schema.names == ["id"]
    assert sorted(rows["id"].to_pylist()) == [1, 2, 2, 3, 4, 5, 5]


def test_a_declared_schema_leaving_out_a_column_a_file_holds_still_checks_it(
    lake: Lake,
) -> None:
    """``events`` holds ``id`` and ``score`` (int64). A driver declares ``id`` only (a
    column the declaration leaves out stays in the dataset) and commits a worker's file
    holding ``score`` as a string. The commit must be refused (``SchemaMismatchError``
    naming ``score``), nothing committed: the reader casts the file's ``score`` to the
    dataset's int64, so before, the commit landed and every later read failed."""
    lake.append("events", pa.table({"id": [1], "score": [5]}))
    bad = lake.config.open().write("events", pa.table({"id": [2], "score": ["high"]}))
    declared = pa.schema([pa.field("id", pa.int64())])
    with pytest.raises(SchemaMismatchError, match="column 'score' as string"):
        lake.registry.commit("events", add=bad, schema=declared)
    assert lake.read("events")["id"].to_pylist() == [1]


def test_a_dataset_made_of_workers_files_takes_their_schema(lake: Lake) -> None:
    """A job's driver makes ``events`` by committing its workers' files (``id`` int64,
    partitioned by ``day``): the dataset takes their schema, as an append's table gives
    it, so a later append bringing ``id`` as a string is refused (``SchemaMismatchError``)
    and the dataset stays readable. Before, it got no schema, the append declared ``id`` a
    string, and every read failed on the workers' files."""
    files = lake.config.open().write(
        "events", pa.table({"id": [1], "day": [1]}), partition_by=["day"]
    )
    lake.registry.commit("events", add=files, commit_id="load-1")
    schema = lake.registry.read().datasets["events"].schema
    assert schema is not None
    assert schema.names == ["id", "day"]
    with pytest.raises(SchemaMismatchError, match="'id'"):
        lake.append("events", pa.table({"id": ["x"], "day": [2]}), partition_by=["day"])
    assert lake.read("events")["id"].to_pylist() == [1]


def test_a_declared_schema_leaving_out_a_required_column_is_still_refused(lake: Lake) -> None:
    """``events`` has a required (not nullable) ``id``; a driver declares ``score`` only
    and commits a worker's file holding ``score`` alone. The commit must be refused
    (``SchemaMismatchError``: the required column is missing), nothing committed, as it
    is without typed files: judging the files must not declare the dataset's columns
    they do not hold for them."""
    required = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("score", pa.int64())]
    )
    lake.append("events", pa.table({"id": [1], "score": [5]}, schema=required))
    files = lake.config.open().write("events", pa.table({"score": [6]}))
    declared = pa.schema([pa.field("score", pa.int64())])
    with pytest.raises(SchemaMismatchError, match="required column 'id'"):
        lake.registry.commit("events", add=files, schema=declared)
    assert lake.read("events")["score"].to_pylist() == [5]


def test_a_workers_named_pandas_index_is_a_column_of_the_dataset_it_makes(lake: Lake) -> None:
    """A worker's share built with pandas and indexed by ``user`` (``set_index``) stores
    ``user`` as a column every engine reads; the dataset the driver's commit makes must
    have it. Only pandas' own unnamed index (``__index_level_0__``) is not data. Before,
    ``user`` was taken for an index and left out of the dataset's schema, so every read of
    ``events`` lost the column its files hold."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"user": ["a", "b"], "n": [1, 2]}).set_index("user")
    files = lake.config.open().write("events", pa.Table.from_pandas(frame))
    lake.registry.commit("events", add=files)
    rows = lake.read("events").sort_by("n")
    assert rows["user"].to_pylist() == ["a", "b"]


def test_a_workers_values_in_a_column_the_dataset_has_as_all_null_are_refused(
    lake: Lake,
) -> None:
    """A job's first commit makes ``events`` of workers' files whose ``note`` was null in
    every row (stored as type null, which the dataset takes). A later worker's file holding
    ``note`` as strings must be refused (``SchemaMismatchError`` naming the column),
    nothing committed, as ``lake.append`` of such rows is: a null column holds no value.
    Before, it committed and every read of ``events`` failed (no cast from string to
    null)."""
    write = lake.config.open().write
    lake.registry.commit("events", add=write("events", pa.table({"id": [1], "note": [None]})))
    later = write("events", pa.table({"id": [2], "note": ["late"]}))
    with pytest.raises(SchemaMismatchError, match="column 'note' as string"):
        lake.registry.commit("events", add=later)
    assert lake.read("events")["id"].to_pylist() == [1]


def test_a_rerun_of_a_recorded_commit_is_reported_though_its_files_no_longer_fit(
    lake: Lake, client: Any, bucket: str
) -> None:
    """A driver commits its workers' files (``id`` and ``score``, which another pipeline
    had merged) under ``load-3``; the dataset is then restored to a version before
    ``score``. Re-run under ``load-3`` with the same files, the commit must be reported
    (``already_committed``, its version), as it is for files without a schema, and commit
    nothing. Before, the files were judged first and the re-run was refused
    (``SchemaMismatchError``), so a retried job failed on a commit that had landed."""
    lake.append("events", pa.table({"id": [1]}))
    with Lake(bucket, s3=client, retry=FAST_RETRY) as other:
        other.append("events", pa.table({"id": [2], "score": [5]}), schema_mode="merge")
    files = lake.config.open().write("events", pa.table({"id": [3], "score": [6]}))
    landed = lake.registry.commit("events", add=files, commit_id="load-3")
    lake.restore("events", version=1)
    again = lake.registry.commit("events", add=files, commit_id="load-3")
    assert again.already_committed
    assert again.version == landed.version
    assert lake.read("events")["id"].to_pylist() == [1]


def test_a_rerun_with_other_rows_stays_refused_once_its_files_no_longer_fit(
    lake: Lake, client: Any, bucket: str
) -> None:
    """As above, but the job re-run under ``load-3`` brings other rows (``id`` 4, not 3):
    another change than the one the id records (FORMAT.md, "Commit ids": the rows'
    summaries differ), so the refusal of its files stands (``SchemaMismatchError``) and
    nothing is committed: it must not be reported as the commit that landed, which holds
    other rows."""
    lake.append("events", pa.table({"id": [1]}))
    with Lake(bucket, s3=client, retry=FAST_RETRY) as other:
        other.append("events", pa.table({"id": [2], "score": [5]}), schema_mode="merge")
    write = lake.config.open().write
    lake.registry.commit(
        "events", add=write("events", pa.table({"id": [3], "score": [6]})), commit_id="load-3"
    )
    lake.restore("events", version=1)
    before = lake.registry.read().version
    others = write("events", pa.table({"id": [4], "score": [7]}))
    with pytest.raises(SchemaMismatchError, match="score"):
        lake.registry.commit("events", add=others, commit_id="load-3")
    assert lake.registry.read().version == before
    assert lake.read("events")["id"].to_pylist() == [1]


def test_a_drivers_commit_finds_the_columns_its_files_hold_once(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver's commit of its workers' files finds the columns they hold once, for both
    the question whether the dataset it knows settles their judgement and the judgement:
    it walked every file's schema twice, a cost of thousands of workers' files."""
    lake.append("events", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    config = lake.config
    files = [
        f
        for day in (2, 3, 4)
        for f in config.open().write(
            "events", pa.table({"id": [day], "day": [day]}), partition_by=["day"]
        )
    ]
    walks: list[dict[str, Any]] = []
    held_columns = _builder.held_columns

    def counted(files: Any, **options: Any) -> Any:
        walks.append(options)
        return held_columns(files, **options)

    monkeypatch.setattr(_builder, "held_columns", counted)
    lake.registry.commit("events", add=files, commit_id="load-2")
    assert walks == [{}]
    assert sorted(lake.read("events")["id"].to_pylist()) == [1, 2, 3, 4]
