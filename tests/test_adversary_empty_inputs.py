"""Adversarial tests of empty inputs (README, "Write": a ``commit_id`` reused for other rows is
``CommitIdReusedError``; ``Lake.append``: an empty table is checked like any other, then
appends nothing). A pipeline's input is empty on the day its source has nothing, or on the
re-run of a job whose first run already moved its source away."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
import pytest

import lakelock.dask
from lakelock import Lake
from lakelock.errors import CommitIdReusedError, PartitionByMismatchError

ROWS = pa.table({"id": pa.array([1, 2], pa.int64()), "day": pa.array([1, 2], pa.int64())})


def test_a_rerun_whose_input_is_empty_hears_its_commit_id_names_other_rows(lake: Lake) -> None:
    """A job appends its rows under ``commit_id="load-7"``; its re-run finds its input empty
    (the first run archived the landing files) and appends an empty table under the same
    id. The id is recorded for other rows, so the re-run must hear
    ``CommitIdReusedError``, as for any other rows. What a user loses otherwise: the
    re-run is answered ``empty=True, already_committed=False`` with its commit id, i.e.
    "nothing recorded under load-7, no rows came": a job that books its loads by that
    answer records load 7 as empty while its rows are in the lake. (Before, the empty
    append returned before the commit id was looked up.)"""
    first = lake.append("sales", ROWS, partition_by=["day"], commit_id="load-7")
    with pytest.raises(CommitIdReusedError, match="load-7"):
        lake.append("sales", ROWS.slice(0, 0), partition_by=["day"], commit_id="load-7")
    assert [h.commit_id for h in lake.history("sales")] == ["load-7"]
    assert lake.registry.read().version == first.version


def test_an_empty_append_partitioned_otherwise_than_the_dataset_is_refused(lake: Lake) -> None:
    """An empty table partitioned by other columns than the dataset's is refused as the
    same table with rows is (``PartitionByMismatchError``), before anything is written;
    its column types are not held against the dataset's (a table built from no rows has
    null-typed columns). What a user loses otherwise: a pipeline partitioning by the wrong
    column is told it succeeded on every day its input is empty and fails only on the
    first day with rows, far from the change that broke it. (Before, an empty append was
    answered ``empty`` unchecked.)"""
    lake.append("sales", ROWS, partition_by=["day"])
    with pytest.raises(PartitionByMismatchError):
        lake.append("sales", ROWS.slice(0, 0), partition_by=["id"])
    assert [h.operation for h in lake.history("sales")] == ["append"]
    untyped = pa.table({"id": pa.array([], pa.null()), "day": pa.array([], pa.null())})
    empty = lake.append("sales", untyped, partition_by=["day"], commit_id="load-8")
    assert empty.empty
    assert not empty.already_committed
    assert empty.commit_id == "load-8"


def test_an_overwrite_of_no_partitions_with_no_rows_commits_nothing(lake: Lake) -> None:
    """``overwrite(empty table, partitions=[])`` replaces no partition with no rows: it
    changes nothing, so it commits nothing (``result.empty``, no registry version), as an
    empty append does; its commit id and partition columns are still checked. What a user
    loses otherwise: a job whose list of partitions to rebuild came out empty adds a
    version that changes nothing to the history every day, and its commit id is recorded
    for that, so the re-run that finds the rows hears ``CommitIdReusedError``."""
    first = lake.append("sales", ROWS, partition_by=["day"], commit_id="load-7")
    empty = lake.overwrite("sales", ROWS.slice(0, 0), partitions=[], partition_by=["day"])
    assert empty.empty
    assert empty.version == first.version
    again = lake.overwrite(
        "sales", ROWS.slice(0, 0), partitions=[], partition_by=["day"], commit_id="load-8"
    )
    assert again.empty
    assert again.commit_id == "load-8"
    assert lake.registry.read().version == first.version
    assert [h.commit_id for h in lake.history("sales")] == ["load-7"]
    with pytest.raises(CommitIdReusedError, match="load-7"):
        lake.overwrite(
            "sales", ROWS.slice(0, 0), partitions=[], partition_by=["day"], commit_id="load-7"
        )
    with pytest.raises(PartitionByMismatchError):
        lake.overwrite("sales", ROWS.slice(0, 0), partitions=[], partition_by=["id"])
    lake.overwrite("sales", ROWS.slice(1, 1), partition_by=["day"], commit_id="load-8")
    assert sorted(lake.read("sales")["id"].to_pylist()) == [1, 2]


def test_a_dask_job_that_found_no_rows_leaves_its_commit_id_to_the_run_that_finds_them(
    lake: Lake,
) -> None:
    """``lakelock.dask.append`` under ``commit_id="load-10"`` of a frame with no rows (the
    job ran before its input arrived), then the re-run under the same id once the rows are
    there: the rows must land, as they do through ``Lake.append``, whose empty table
    commits nothing and records no id. What a user loses otherwise: the empty run commits
    an empty version recording load-10, and the re-run, hearing ``already_committed``
    ("whatever its rows"), drops the day's rows without an error. (Before, they were
    never loaded.)"""
    lake.append("events", ROWS, partition_by=["day"])
    none = pd.DataFrame({"id": pd.Series([], dtype="int64"), "day": pd.Series([], dtype="int64")})
    some = pd.DataFrame({"id": [7, 8], "day": [3, 3]})
    with dask.config.set(scheduler="synchronous"):
        empty = lakelock.dask.append(
            lake,
            "events",
            dd.from_pandas(none, npartitions=1),
            partition_by=["day"],
            commit_id="load-10",
        )
        assert empty.empty
        result = lakelock.dask.append(
            lake,
            "events",
            dd.from_pandas(some, npartitions=1),
            partition_by=["day"],
            commit_id="load-10",
        )
    assert not result.already_committed
    assert sorted(r["id"] for r in lake.read("events").to_pylist()) == [1, 2, 7, 8]
    assert lake.history("events")[0].commit_id == "load-10"


def test_a_cluster_job_that_wrote_nothing_does_not_fix_a_new_datasets_partitions(
    lake: Lake,
) -> None:
    """The README's cluster pattern on a dataset not made yet: the workers write nothing
    (no rows today), and the driver commits the files they wrote, none, under its commit
    id. Nothing is committed and the id stays unrecorded: the next run, whose workers write
    files partitioned by ``day``, commits them. What a user loses otherwise: the empty
    commit creates the dataset unpartitioned (a new dataset takes the partition columns its
    files name: none), and since a dataset's partition columns never change, every
    partitioned write to it is refused from then on (``CommitConflictError``,
    ``PartitionByMismatchError``): the dataset name is lost for good."""
    config = lake.config
    shares = [ROWS.slice(0, 0)]
    files = [f for t in shares for f in config.open().write("events", t, partition_by=["day"])]
    empty = lake.registry.commit("events", add=files, commit_id="load-8")
    assert empty.empty
    assert "events" not in lake.registry.read().datasets
    files = config.open().write("events", ROWS, partition_by=["day"])
    lake.registry.commit("events", add=files, commit_id="load-8")
    lake.append("events", ROWS.slice(0, 1), partition_by=["day"])
    assert lake.registry.read().datasets["events"].partition_by == ("day",)
    assert sorted(r["id"] for r in lake.read("events").to_pylist()) == [1, 1, 2]


def test_a_cluster_job_that_found_no_rows_leaves_its_commit_id_to_the_run_that_does(
    lake: Lake,
) -> None:
    """The README's cluster pattern on a dataset that exists: load 9's workers find no rows,
    and the driver commits the files they wrote, none, under ``commit_id="load-9"``. Nothing
    is recorded, so the re-run whose workers find the rows commits them under that id. What
    a user loses otherwise: the empty run records load-9 as an empty version, and the
    re-run with the rows is refused (``CommitIdReusedError``): the rows never land under
    the load's id. A reused id for other rows is still refused, empty or not."""
    first = lake.config.open().write("events", ROWS, partition_by=["day"])
    lake.registry.commit("events", add=first, commit_id="load-8")
    before = lake.registry.read().version
    empty = lake.registry.commit("events", add=[], commit_id="load-9")
    assert empty.empty
    assert lake.registry.read().version == before
    files = lake.config.open().write("events", ROWS, partition_by=["day"])
    lake.registry.commit("events", add=files, commit_id="load-9")
    assert [h.commit_id for h in lake.history("events")][:2] == ["load-9", "load-8"]
    with pytest.raises(CommitIdReusedError, match="load-8"):
        lake.registry.commit("events", add=[], commit_id="load-8")
