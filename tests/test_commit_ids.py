"""A commit id is bound to the change it committed: a retry of the same change (same
dataset, operation and rows, in any order) reports the recorded commit; the same id for
another change is CommitIdReusedError, before any data is written, and in the commit loop
itself when the check before it is bypassed (a race)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import dask.dataframe as dd
import pyarrow as pa
import pytest

import lakelock.dask
from lakelock import Lake
from lakelock._digest import change_digest
from lakelock._registry._builder import refused_rerun
from lakelock._registry._changes import reused_commit_id
from lakelock._registry._document import (
    CommitRecord,
    RegistryDoc,
    parse_registry,
    serialize_registry,
)
from lakelock._registry._intents import intent_document, parse_intent
from lakelock.advanced import Change
from lakelock.errors import CommitIdReusedError, PartitionByMismatchError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until
from tests._support.files import datafile

ROOT = "metastore/dataset_registry.json"


def table(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "day": [i % 2 for i in ids]})


def data_keys(lake: Lake, dataset: str) -> list[str]:
    return [o.key for o in lake.store.list(f"datasets/{dataset}/")]


def test_the_same_id_for_another_dataset_is_refused_before_any_write(lake: Lake) -> None:
    lake.append("c", table([1, 2]), commit_id="c1")
    with pytest.raises(CommitIdReusedError) as info:
        lake.append("c_other", table([3]), commit_id="c1")
    error = info.value
    assert (error.version, error.recorded_dataset, error.recorded_operation) == (1, "c", "append")
    assert "version 1" in str(error)
    assert "'c'" in str(error)
    assert "c_other" not in lake.registry.read().datasets
    assert data_keys(lake, "c_other") == []  # refused before its first data PUT


@pytest.mark.parametrize("operation", ["overwrite", "delete", "compact"])
def test_the_same_id_for_another_operation_is_refused(lake: Lake, operation: str) -> None:
    lake.append("c", table([1, 2]), partition_by=["day"], commit_id="c1")
    files_before = data_keys(lake, "c")
    calls: dict[str, Callable[[], object]] = {
        "overwrite": lambda: lake.overwrite(
            "c", table([1, 2]), partition_by=["day"], commit_id="c1"
        ),
        "delete": lambda: lake.delete("c", partitions="all", commit_id="c1"),
        "compact": lambda: lake.compact("c", commit_id="c1"),
    }
    with pytest.raises(CommitIdReusedError) as info:
        calls[operation]()
    assert info.value.recorded_operation == "append"
    assert data_keys(lake, "c") == files_before
    assert lake.registry.read().version == 1


def test_a_retry_with_the_same_rows_in_another_order_reports_the_commit(lake: Lake) -> None:
    first = lake.append("c", table([1, 2, 3]), commit_id="c1")
    shuffled = table([3, 1, 2]).select(["day", "id"])  # other row and column order
    again = lake.append("c", shuffled, commit_id="c1")
    assert (again.version, again.already_committed) == (first.version, True)
    assert lake.read("c").num_rows == 3


def test_the_same_id_for_other_rows_is_refused(lake: Lake) -> None:
    lake.append("c", table([1, 2, 3]), commit_id="c1")
    with pytest.raises(CommitIdReusedError, match="other content"):
        lake.append("c", table([1, 2, 4]), commit_id="c1")
    assert sorted(lake.read("c")["id"].to_pylist()) == [1, 2, 3]


def test_overwrite_and_delete_retries_are_recognised(lake: Lake) -> None:
    lake.append("c", table([1, 2]), partition_by=["day"])
    first = lake.overwrite("c", table([5]), partition_by=["day"], commit_id="o1")
    assert lake.overwrite("c", table([5]), partition_by=["day"], commit_id="o1").already_committed
    with pytest.raises(CommitIdReusedError):
        lake.overwrite("c", table([7]), partition_by=["day"], commit_id="o1")
    deleted = lake.delete("c", partitions=["day=1"], commit_id="d1")
    assert lake.delete("c", partitions=["day=1"], commit_id="d1").version == deleted.version
    with pytest.raises(CommitIdReusedError):
        lake.delete("c", partitions=["day=0"], commit_id="d1")
    assert first.version < deleted.version


def test_a_delete_or_compact_retry_is_judged_by_the_partitions_its_spec_names(
    lake: Lake,
) -> None:
    """A delete's or a compaction's id is bound to the partitions it names, not to the
    Python types spelling them: a retry after an unknown outcome naming ``day=1`` as
    ``{"day": 1}``, ``{"day": "1"}`` or ``"day=1"`` (in any order) is that retry, where it
    was CommitIdReusedError; and a spec whose text names another partition than the value
    it was made from (an aware datetime, and its ISO text in its own offset) is another
    change, where it was judged a retry and reported committed."""
    for _ in range(2):
        lake.append("c", table([1, 3]), partition_by=["day"])
    deleted = lake.delete("c", partitions=[{"day": 1}], commit_id="d1")
    for spelt in ([{"day": "1"}], ["day=1"], [{"day": 1}, "day=1"]):
        again = lake.delete("c", partitions=spelt, commit_id="d1")
        assert (again.version, again.already_committed) == (deleted.version, True)
    for _ in range(2):
        lake.append("c", table([2, 4]), partition_by=["day"])
    compacted = lake.compact("c", partitions=[{"day": 0}], commit_id="k1")
    assert not compacted.empty
    again = lake.compact("c", partitions=["day=0"], commit_id="k1")
    assert (again.version, again.already_committed) == (compacted.version, True)

    plus_one = timezone(timedelta(hours=1))
    when = datetime(2024, 1, 1, 1, 0, tzinfo=plus_one)  # day=2024-01-01T00:00:00Z
    events = pa.table({"id": [1], "ts": pa.array([when], pa.timestamp("us", tz="UTC"))})
    lake.append("ev", events, partition_by=["ts"])
    gone = lake.delete("ev", partitions=[{"ts": when}], commit_id="d2")
    assert lake.read("ev").num_rows == 0
    with pytest.raises(CommitIdReusedError, match="other content"):
        # The text of the same instant in its own offset: the digest spelt both alike.
        lake.delete("ev", partitions=[{"ts": when.isoformat()}], commit_id="d2")
    assert lake.delete("ev", partitions=["ts=2024-01-01T00:00:00Z"], commit_id="d2").version == (
        gone.version
    )


def test_an_overwrite_retry_is_judged_by_the_set_of_partitions_it_replaces(lake: Lake) -> None:
    """An overwrite's id is bound to the partitions it replaces, as a delete's is: a retry
    after an unknown outcome that names them in another order, or one of them twice (a list
    rebuilt from a set, a mapping beside its path), replaces the same partitions with the
    same rows and is that retry, where it was CommitIdReusedError; replacing another set of
    partitions under the id is still refused."""
    lake.append("c", table([1, 2]), partition_by=["day"])
    first = lake.overwrite(
        "c", table([4, 5]), partition_by=["day"], partitions=["day=0", "day=1"], commit_id="o2"
    )
    for spelt in (["day=1", "day=0"], [{"day": 1}, "day=0", "day=1"]):
        again = lake.overwrite(
            "c", table([4, 5]), partition_by=["day"], partitions=spelt, commit_id="o2"
        )
        assert (again.version, again.already_committed) == (first.version, True)
    with pytest.raises(CommitIdReusedError, match="other content"):
        lake.overwrite("c", table([4]), partition_by=["day"], partitions=["day=0"], commit_id="o2")
    assert sorted(lake.read("c")["id"].to_pylist()) == [4, 5]


def test_a_registry_commit_id_is_bound_to_what_it_adds_and_removes(lake: Lake) -> None:
    """``registry.commit(add=files, commit_id=k)``: a re-run that writes the same rows again
    (new files, other names, the rows in another order and split otherwise) and commits them
    under ``k`` is a retry; other rows, or another removal, under ``k`` is
    ``CommitIdReusedError`` (it was taken for a retry, and its files silently never
    committed). An ``append``'s id reused by a ``registry.commit`` of the same rows stays a
    retry (the two kinds of digest are not compared)."""
    write = lake.write
    first = lake.registry.commit(
        "c", add=write("c", table([1, 2, 3, 4]), partition_by=["day"]), commit_id="k"
    )
    # The same rows, in other files: another order, another split.
    rerun = [
        *write("c", table([4, 3]).select(["day", "id"]), partition_by=["day"]),
        *write("c", table([2, 1]), partition_by=["day"]),
    ]
    again = lake.registry.commit("c", add=rerun, commit_id="k")
    assert (again.version, again.already_committed) == (first.version, True)
    with pytest.raises(CommitIdReusedError, match="other content") as info:
        lake.registry.commit(
            "c", add=write("c", table([1, 2, 3, 5]), partition_by=["day"]), commit_id="k"
        )
    assert (info.value.version, info.value.recorded_operation) == (first.version, "commit")
    assert sorted(lake.read("c")["id"].to_pylist()) == [1, 2, 3, 4]

    a, b = sorted(lake.registry.files("c"), key=lambda f: f.partition_path)
    dropped = lake.registry.commit("c", remove=[a], commit_id="drop")
    assert lake.registry.commit("c", remove=[a.key], commit_id="drop").version == dropped.version
    with pytest.raises(CommitIdReusedError, match="other content"):
        lake.registry.commit("c", remove=[b], commit_id="drop")
    assert lake.registry.files("c") == [b]

    appended = lake.append("d", table([5, 6]), partition_by=["day"], commit_id="load")
    direct = lake.registry.commit(
        "d", add=write("d", table([5, 6]), partition_by=["day"]), commit_id="load"
    )
    assert (direct.version, direct.already_committed) == (appended.version, True)


def test_past_the_root_window_the_dataset_index_binds_the_id(client: Any, bucket: str) -> None:
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, commit_window=2)
    lake.append("c", table([1]), commit_id="c1")
    for n in range(3):
        lake.append("c", table([10 + n]))
    assert lake.registry.read().commits[0].id != "c1"  # left the root's window
    assert lake.append("c", table([1]), commit_id="c1").already_committed
    with pytest.raises(CommitIdReusedError) as info:
        lake.append("c", table([2]), commit_id="c1")
    assert (info.value.version, info.value.recorded_dataset) == (1, "c")


def change(dataset: str, digest: str | None, operation: str = "append") -> Change:
    return Change(dataset=dataset, commit_id="c1", operation=operation, digest=digest)


def test_the_commit_loop_refuses_a_reused_id_found_in_the_root(lake: Lake) -> None:
    """The check before writing can be raced: the commit loop's own settling checks too."""
    lake.append("c", table([1]), commit_id="c1")
    with pytest.raises(CommitIdReusedError):
        lake.registry.commit_changes([change("c", "sha256:other")])
    with pytest.raises(CommitIdReusedError):
        lake.registry.commit_changes([change("c_other", None)])
    assert lake.registry.read().version == 1


def test_the_commit_loop_refuses_a_reused_id_found_in_the_index(client: Any, bucket: str) -> None:
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, commit_window=1)
    lake.append("c", table([1]), commit_id="c1")
    lake.append("c", table([2]))
    with pytest.raises(CommitIdReusedError):
        lake.registry.commit_changes([change("c", "sha256:other")])
    same = change("c", change_digest({"partition_by": ()}, table=table([1])))
    assert lake.registry.commit_changes([same]).already_committed


def test_records_without_a_digest_bind_dataset_and_operation_only() -> None:
    """Commits recorded before digests (old documents) match any content."""
    old = CommitRecord("c1", 3, "c", "2026-01-01T00:00:00Z", 1, 0, "append")
    assert reused_commit_id(old, change("c", "sha256:x")) is None
    assert reused_commit_id(old, change("c", None, operation="delete")) is not None
    assert reused_commit_id({"version": 3, "operation": "append"}, change("c", "x")) is None
    entry = {"version": 3, "operation": "append", "digest": "sha256:y"}
    assert reused_commit_id(entry, change("c", "sha256:x")) is not None


def test_a_refused_rerun_under_an_id_recorded_for_other_datasets_is_not_that_commit() -> None:
    """A ``registry.commit`` whose files no longer fit its dataset, under an id the root's
    window records: the earlier commit answers it only if that commit is this very change,
    of this one dataset; recorded for a commit spanning ``c`` and another dataset, the
    refusal stands (``refused_rerun``), as the commit loop would refuse the commit."""
    alone = CommitRecord("c1", 3, "c", "2026-01-01T00:00:00Z", 1, 0, "commit")
    spanning = CommitRecord("c1", 3, "c,d", "2026-01-01T00:00:00Z", 2, 0, "commit")
    rerun = change("c", None, operation="commit")
    found = refused_rerun(rerun, alone)
    assert found is not None
    assert found.already_committed
    assert refused_rerun(rerun, spanning) is None


def test_the_digest_travels_in_root_records_and_intents() -> None:
    record = CommitRecord("c1", 1, "c", "2026-01-01T00:00:00Z", 1, 0, "append", "sha256:d")
    body = serialize_registry(parse_registry(_root_with(record)))
    assert parse_registry(body).commits[0].digest == "sha256:d"
    key, intent, _ = intent_document(change("c", "sha256:d"), now_ms=1)
    assert parse_intent(key, intent)[0].digest == "sha256:d"
    key, intent, _ = intent_document(change("c", None), now_ms=1)
    assert b"digest" not in intent
    assert parse_intent(key, intent)[0].digest is None


def test_every_record_of_a_commit_names_the_intent_that_made_it(lake: Lake) -> None:
    """A commit's records (the root's window entry; each dataset's snapshot and commit-id
    index entry) name the intent that made it, for a commit spanning datasets its first, so
    a writer finding its id recorded knows whether its own intent made it (FORMAT.md rule
    2); a record without the field (an older lakelock's) reads as naming none."""
    both = [
        Change("a", "g1", add=(datafile("a", "", "one"),)),
        Change("b", "g1", add=(datafile("b", "", "two"),)),
    ]
    version = lake.registry.commit_changes(both).version
    doc = parse_registry(lake.store.get(ROOT).body)
    keys = sorted(f.key for f in doc.fates if f.version == version)
    assert len(keys) == 2
    assert [c.intent for c in doc.commits if c.id == "g1"] == [keys[0]]
    for name in ("a", "b"):
        state = lake.registry.dataset(name)
        assert [c.intent for c in state.commits] == [keys[0]]
        assert state.recent_ids["g1"]["intent"] == keys[0]
    old = CommitRecord("c1", 1, "c", "2026-01-01T00:00:00Z", 1, 0, "append")
    body = serialize_registry(parse_registry(_root_with(old)))
    assert b'"intent"' not in body
    assert parse_registry(body).commits[0].intent is None


def _root_with(record: CommitRecord) -> bytes:
    return serialize_registry(RegistryDoc(version=1, commits=(record,)))


def test_dask_append_shares_the_check_before_any_task_runs(lake: Lake) -> None:
    """``lakelock.dask.append`` takes the same preamble as ``Lake.append``: a recorded id is
    reported (retry) or refused (another dataset), and another ``partition_by`` than the
    dataset's is refused, all before a worker writes a file."""
    lake.append("c", table([1, 2]), partition_by=["day"], commit_id="c1")
    frame = dd.from_dict({"id": [1, 2], "day": [1, 0]}, npartitions=1)
    retry = lakelock.dask.append(lake, "c", frame, partition_by=["day"], commit_id="c1")
    assert (retry.version, retry.already_committed) == (1, True)
    with pytest.raises(CommitIdReusedError):
        lakelock.dask.append(lake, "c_other", frame, partition_by=["day"], commit_id="c1")
    with pytest.raises(PartitionByMismatchError):
        lakelock.dask.append(lake, "c", frame, partition_by=[], commit_id="c2")
    assert data_keys(lake, "c_other") == []
    assert len(data_keys(lake, "c")) == 2


def test_a_fold_rejects_another_process_intent_that_reuses_an_id(lake: Lake) -> None:
    """An intent of another process whose commit id is recorded for another change (it
    skipped the check before writing, or raced it) is rejected by the fold that lists it,
    with the reason; its writer then fails instead of succeeding with nothing committed."""
    lake.append("c", table([1]), commit_id="c1")
    files = lake.write("c_other", table([2]))
    reuse = Change(
        dataset="c_other", commit_id="c1", add=tuple(files), operation="append", digest="x"
    )
    key, body, _ = intent_document(reuse, now_ms=int(time.time() * 1000))
    lake.store.put(key, body, mode="create")
    folder = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    folder.append("d", table([3]))
    fate = next(f for f in folder.registry.internals.intent_fates() if f.key == key)
    assert fate.state == "rejected"
    assert "commit id 'c1' was recorded at version 1" in fate.reason
    assert "c_other" not in folder.registry.read().datasets


def test_a_partition_moves_commit_id_is_bound_to_that_move(lake: Lake) -> None:
    """A rename retried with its commit id reports the rename (its source is gone by then);
    the same id for another rename is refused before anything is copied, and a copy
    under it too (another operation)."""
    lake.append("c", table([1, 2, 3, 4]), partition_by=["day"])
    first = lake.rename_partition("c", "day=0", to_partition="day=10", commit_id="r1")
    again = lake.rename_partition("c", "day=0", to_partition="day=10", commit_id="r1")
    assert (again.version, again.already_committed) == (first.version, True)
    before = data_keys(lake, "c")
    with pytest.raises(CommitIdReusedError, match="other content"):
        lake.rename_partition("c", "day=1", to_partition="day=20", commit_id="r1")
    with pytest.raises(CommitIdReusedError, match="operation 'rename', not 'copy'"):
        lake.copy_partition("c", "day=1", to_partition="day=30", commit_id="r1")
    assert data_keys(lake, "c") == before  # nothing copied
    assert sorted(lake.registry.read().datasets["c"].partitions) == ["day=1", "day=10"]


def test_a_rerun_whose_crashed_runs_change_another_process_applied_hears_already_committed(
    s3: S3Endpoint, lake: Lake
) -> None:
    """A pipeline re-runs a crashed append under its commit id with the same rows, while
    the crashed run's intent is still pending. The re-run writes its intent and its swap is
    held; meanwhile another process folds both intents: the crashed run's is applied, and
    the re-run's, the very same change under the id, is settled with it. The re-run then
    hears what any re-run of a committed change hears: ``already_committed``, at the
    crashed run's version, its rows once. Before, its intent's fate said only "applied",
    and the re-run was told it had made the commit itself."""
    rows = table([1, 2])
    digest = change_digest({"partition_by": ()}, table=rows)
    files = lake.write("c", rows)
    crashed = Change("c", "job-7", add=tuple(files), operation="append", digest=digest)
    key, body, _ = intent_document(crashed, now_ms=int(time.time() * 1000) - 1000)
    lake.store.put(key, body, mode="create")
    rerun = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(rerun.append, "c", rows, commit_id="job-7")
        wait_until(lambda: s3.stalled() == 1 and len(intents(lake)) == 2)
        folder = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
        folder.append("d", table([3]))  # folds both intents
        s3.release_stalls()
        result = waiting.result(timeout=60)
    (its_fate,) = [f for f in folder.registry.internals.intent_fates() if f.already]
    assert its_fate.key != key
    assert (its_fate.state, its_fate.version) == ("applied", folder.registry.find_commit("job-7"))
    assert (result.already_committed, result.version) == (True, its_fate.version)
    assert sorted(lake.read("c")["id"].to_pylist()) == [1, 2]


def test_a_rerun_whose_swap_lost_to_its_crashed_runs_change_hears_already_committed(
    s3: S3Endpoint, lake: Lake
) -> None:
    """A pipeline re-runs a crashed append under its commit id with the same rows; its
    intent's PUT is held while another process folds the crashed run's intent in, so the
    re-run's swap, sent beside it, loses the race, and its intent is still undecided. Read
    again, the root records the id at the crashed run's version, which neither a swap nor
    the intent of the re-run made: the re-run hears ``already_committed`` at that version,
    its rows once. Before, a commit recorded after the re-run's first swap was sent counted
    as its own, and it was told it had made the commit itself."""
    rows = table([1, 2])
    digest = change_digest({"partition_by": ()}, table=rows)
    rerun = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    s3.inject("stall", operation="PutObject", prefix="metastore/intents/", count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(rerun.append, "c", rows, commit_id="job-7")
        wait_until(lambda: s3.stalled() == 1)
        files = lake.write("c", rows)
        crashed = Change("c", "job-7", add=tuple(files), operation="append", digest=digest)
        key, body, _ = intent_document(crashed, now_ms=int(time.time() * 1000))
        lake.store.put(key, body, mode="create")
        folder = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
        folder.append("d", table([3]))  # folds the crashed run's intent
        s3.release_stalls()
        result = waiting.result(timeout=60)
    decided = {f.key for f in folder.registry.internals.intent_fates()}
    assert key in decided
    assert len(intents(lake)) == len(decided) + 1  # the re-run's intent: undecided
    applied = folder.registry.find_commit("job-7")
    assert (result.already_committed, result.version) == (True, applied)
    assert sorted(lake.read("c")["id"].to_pylist()) == [1, 2]


def intents(lake: Lake) -> list[str]:
    return [o.key for o in lake.store.list("metastore/intents/")]


@pytest.mark.parametrize("same_rows", [True, False], ids=["same-rows", "other-rows"])
def test_a_rerun_under_a_generated_id_is_not_applied_again_by_its_crashed_runs_intent(
    client: Any, bucket: str, same_rows: bool
) -> None:
    """A commit whose id lakelock generated crashed with its intent's PUT in flight, and
    its pipeline re-runs it under that id (every error names it, and a caller who heard
    the outcome was unknown retries with it). The re-run lands; later commits push its
    record out of the root's window; then the crashed run's intent lands, above every
    other (its machine's clock a minute ahead). The fold that lists it finds the id in the
    dataset's commit-id index: the same rows are applied already (``already``), other rows
    under the id are refused, and the crashed run's rows are never added. Before, a
    generated id was taken to belong to its intent alone, and the fold applied it again
    (found by the simulator's sweep, seed 26933)."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY, commit_window=1)
    rows = table([1, 2])
    digest = change_digest({"partition_by": ()}, table=rows)
    files = lake.write("c", rows)
    crashed = Change(
        "c",
        "019b76daac27d2744cc95aba1343cda5",  # as lakelock generates ids: the time, then random
        add=tuple(files),
        operation="append",
        digest=digest,
        generated_id=True,
    )
    rerun = lake.append("c", rows if same_rows else table([7]), commit_id=crashed.commit_id)
    for n in (5, 6):
        lake.append("c", table([n]))
    assert [r.id for r in lake.registry.read().commits] != [crashed.commit_id]
    key, body, _ = intent_document(crashed, now_ms=int(time.time() * 1000) + 60_000)
    lake.store.put(key, body, mode="create")
    folder = Lake(bucket, s3=client, retry=FAST_RETRY)
    folder.append("d", table([3]))
    (fate,) = [f for f in folder.registry.internals.intent_fates() if f.key == key]
    if same_rows:
        assert (fate.state, fate.version, fate.already) == ("applied", rerun.version, True)
    else:
        assert fate.state == "rejected"
        assert f"commit id {crashed.commit_id!r} was recorded at version" in fate.reason
    expected = [1, 2, 5, 6] if same_rows else [5, 6, 7]
    assert sorted(lake.read("c")["id"].to_pylist()) == expected
