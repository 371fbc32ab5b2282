"""Adversarial tests of commit ids across re-runs (README, "Write": a ``commit_id`` makes a job
safe to re-run; "A commit reported failed never lands later; when that cannot be known yet,
the error is ``CommitStateUnknownError``: re-run under its ``commit_id``"; docs/FORMAT.md, "Commit
ids" and rules 2, 3 and 11). A pipeline re-runs a commit under the id an error named, or
under its own, while or after its first run's intent is pending; each ``Lake`` stands for
one process. A first run's intent that lands late (its PUT held past the re-run, from a
machine whose clock runs ahead) is taken off the endpoint when its commit gives up and put
back, under a later time, once the re-run's record has left the root's window."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
import pytest

import lakelock.dask
from lakelock import CommitResult, Lake
from lakelock._digest import change_digest
from lakelock._layout import intent_key_later
from lakelock._registry._intents import intent_document, intent_group
from lakelock._registry._objects import RECENT_IDS
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.advanced import Change
from lakelock.errors import CommitIdReusedError, CommitStateUnknownError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, Interrupting, no_sleep, registry, wait_until
from tests._support.files import datafile
from tests._support.outcomes import impatient_lake

ROOT = "metastore/dataset_registry.json"


def table(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "day": [i % 2 for i in ids]})


def ids(lake: Lake, dataset: str) -> list[int]:
    return sorted(lake.read(dataset)["id"].to_pylist())


def process(client: Any, bucket: str, **options: Any) -> Lake:
    """A lake as one process opens it; retries without waiting."""
    return Lake(bucket, s3=client, retry=FAST_RETRY, **options)


def another_process_folds(client: Any, bucket: str) -> None:
    """Another process commits to ``d`` (its first commit, and more while any intent is
    still pending, five at most): its folds decide every pending intent."""
    other = process(client, bucket)
    for n in range(5):
        other.append("d", table([100 + n]))
        if not other.registry.pending_intents():
            return
    raise AssertionError("intents still pending after five commits of another process")


def given_up_unknown(
    s3: S3Endpoint, client: Any, bucket: str, commit: Callable[[Lake], object]
) -> tuple[str, str]:
    """``commit`` run by a process while every PUT of the root answers 500: its swaps fail,
    and so does the swap that would record its intent cancelled, so it gives up with
    ``CommitStateUnknownError`` (naming its commit id) and its intent stays pending. The
    store heals. Returns the commit id the error names and the pending intent's key."""
    first = Lake(bucket, s3=client, retry=RetryPolicy(max_attempts=3, sleep=no_sleep))
    s3.inject("error", operation="PutObject", prefix=ROOT)
    try:
        with pytest.raises(CommitStateUnknownError) as info:
            commit(first)
    finally:
        s3.clear_faults()
        first.close()
    (key,) = first.registry.pending_intents()
    assert info.value.commit_id is not None
    return info.value.commit_id, key


def held_back(admin: Any, bucket: str, key: str) -> Callable[[], str]:
    """The intent at ``key`` taken off the endpoint, as if its PUT were still in flight;
    calling the result lands it, a minute later than any other (its writer's clock ahead),
    and returns its key."""
    body = admin.get_object(Bucket=bucket, Key=key)["Body"].read()
    admin.delete_object(Bucket=bucket, Key=key)

    def land() -> str:
        late = intent_key_later(key, int(time.time() * 1000) + 60_000)
        admin.put_object(Bucket=bucket, Key=late, Body=body)
        return late

    return land


# -- after an unknown outcome: re-run under the id ------------------------------------------


def test_after_an_unknown_outcome_a_lookup_finding_nothing_is_not_final_and_a_rerun_lands_once(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """README: after ``CommitStateUnknownError``, re-run under its ``commit_id``; a lookup
    that finds nothing is not final while the commit may still land. An append gives up so
    (its intent could not be cancelled); ``registry.find_commit`` of the id the error names
    answers ``None``; then another process's ordinary commit folds the pending intent in,
    and the commit lands under that very id. A pipeline that does as README says hears
    ``already_committed`` at that version, its rows once (one reading ``None`` as "not
    landed" and committing under a new id would have them twice)."""
    lake = process(client, bucket)
    lake.append("c", table([0]))
    named, _ = given_up_unknown(s3, client, bucket, lambda first: first.append("c", table([1, 2])))
    assert lake.registry.find_commit(named) is None  # not final: its intent is pending
    another_process_folds(client, bucket)
    landed = lake.registry.find_commit(named)
    assert landed is not None
    rerun = lake.append("c", table([1, 2]), commit_id=named)
    assert (rerun.already_committed, rerun.version) == (True, landed)
    assert ids(lake, "c") == [0, 1, 2]


def test_a_lookup_while_the_swap_is_in_flight_finds_nothing_and_a_rerun_lands_once(
    s3: S3Endpoint, bucket: str
) -> None:
    """An append's first swap of the root is held at S3 past its client's patience (a write
    in progress: the retries meet it, 409): it gives up with ``CommitStateUnknownError``.
    Looked up at once, the id is in no record (the swap has not landed: no lookup can know
    it will); then the held swap lands. The re-run README asks for hears
    ``already_committed`` at that version, its rows once."""
    lake = impatient_lake(s3, bucket)
    lake.append("c", table([0]))
    s3.configure(concurrent_conflicts=True)
    s3.inject("hold", operation="PutObject", prefix=ROOT, count=1)
    with pytest.raises(CommitStateUnknownError):
        lake.append("c", table([1, 2]), commit_id="job-7")
    assert lake.registry.find_commit("job-7") is None
    s3.release_stalls()
    wait_until(lambda: s3.stalled() == 0)
    s3.configure()
    landed = lake.registry.find_commit("job-7")
    assert landed is not None
    rerun = lake.append("c", table([1, 2]), commit_id="job-7")
    assert (rerun.already_committed, rerun.version) == (True, landed)
    assert ids(lake, "c") == [0, 1, 2]


def test_a_rerun_in_the_same_process_after_an_unknown_outcome_lands_its_rows_once(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """An append under a generated id gives up with ``CommitStateUnknownError``, its intent
    pending. The same process re-runs it under the id the error names, once the store
    heals. Whoever folds the first run's intent (the re-run's own batch, rule 11, or, as
    it goes today, another process's later fold, which finds the id in the root's window:
    rule 3), one of the two is applied and the other is recorded applied already, at one
    version: the rows once. With rule 3 off, the later fold applies the intent again (a
    version more, the rows twice)."""
    lake = Lake(bucket, s3=client, retry=RetryPolicy(max_attempts=3, sleep=no_sleep))
    lake.append("c", table([0]))
    s3.inject("error", operation="PutObject", prefix=ROOT)
    with pytest.raises(CommitStateUnknownError) as info:
        lake.append("c", table([1, 2]))
    s3.clear_faults()
    (first,) = lake.registry.pending_intents()
    named = info.value.commit_id
    assert named is not None
    again = lake.append("c", table([1, 2]), commit_id=named)
    another_process_folds(client, bucket)
    (fate,) = [f for f in lake.registry.internals.intent_fates() if f.key == first]
    assert (fate.state, fate.version) == ("applied", again.version)
    assert fate.already != again.already_committed  # one made it, the other is that commit
    assert lake.registry.find_commit(named) == again.version
    assert ids(lake, "c") == [0, 1, 2]
    assert lake.registry.pending_intents() == []
    lake.close()


# -- re-runs spanning datasets -------------------------------------------------------------


def group(lake: Lake, names: str, commit_id: str) -> list[Change]:
    """One change a dataset of ``names`` (``"ab"``: datasets ``a`` and ``b``), each adding
    a file of its own rows, under ``commit_id``: a commit spanning them all."""
    return [
        Change(name, commit_id, add=tuple(lake.write(name, table([ord(name)])))) for name in names
    ]


def refused_rerun(client: Any, bucket: str, *, window: int, recorded: str, rerun: str) -> Lake:
    """A commit of the datasets ``recorded`` (``"ab"``: ``a`` and ``b``) under ``load-7``,
    three appends after it (past a ``window`` of 1 they push its record out of the root),
    then a re-run under ``load-7`` of the datasets ``rerun``, refused with
    ``CommitIdReusedError`` naming the first commit's version. The lake."""
    lake = process(client, bucket, commit_window=window)
    first = lake.registry.commit_changes(group(lake, recorded, "load-7"))
    for n in range(3):
        lake.append("a", table([10 + n]))
    if window == 1:
        assert "load-7" not in [r.id for r in lake.registry.read().commits]
    with pytest.raises(CommitIdReusedError) as info:
        lake.registry.commit_changes(group(lake, rerun, "load-7"))
    assert info.value.version == first.version
    return lake


#: Why a commit of fewer datasets than the one recorded under its id is taken for it once
#: the record left the root's window (docs/FORMAT.md, "Commit ids").
FEWER_PAST_THE_WINDOW = (
    "past the root's window an id is found in the commit-id indexes of the commit's own "
    "datasets, whose entries name no dataset (lakelock/_registry/_core/_decide.py, "
    "indexed_commit): a commit of 'a' alone finds the entry of 'a' of a commit that spanned "
    "'a' and 'b', as a retry of that commit would, and nothing in the index tells the two "
    "apart without a format change (an entry naming its commit's datasets). A Lake "
    "operation's commit is refused all the same: the Lake operations spanning datasets are "
    "partition moves (operation 'rename' or 'copy'), whose digest names both datasets, so "
    "a move of 'a' alone has another digest and any other operation another operation; "
    "left open are a registry.commit (operation 'commit', matching any, its 'commit:' "
    "digest compared with no Lake operation's) and commit_changes of changes without a "
    "digest, as here"
)


@pytest.mark.parametrize(
    ("window", "order"),
    [
        pytest.param(100, "ab", id="in-the-window"),
        pytest.param(1, "ab", id="past-the-window"),
        pytest.param(100, "ba", id="in-the-window-new-dataset-first"),
        pytest.param(1, "ba", id="past-the-window-new-dataset-first"),
    ],
)
def test_a_rerun_spanning_datasets_whose_first_run_was_one_of_them_is_refused(
    client: Any, bucket: str, window: int, order: str
) -> None:
    """A pipeline's first run committed ``a`` alone under ``load-7``; the pipeline now
    writes ``a`` and ``b`` together, and re-runs the day under ``load-7`` as one commit
    spanning both, ``a``'s rows unchanged. That is another change under the id (it adds
    ``b``'s rows, which the recorded commit never had): ``CommitIdReusedError``, in the
    root's window (its record names ``a`` alone) and past it (the id is in the commit-id
    index of ``a`` and not of ``b``), whichever dataset the commit names first. Judged by
    its first dataset alone, it was told ``already_committed``, and ``b``'s rows silently
    never landed."""
    lake = refused_rerun(client, bucket, window=window, recorded="a", rerun=order)
    assert "b" not in lake.registry.read().datasets


@pytest.mark.parametrize(
    "window",
    [
        pytest.param(100, id="in-the-window"),
        pytest.param(
            1,
            id="past-the-window",
            marks=pytest.mark.xfail(strict=True, reason=FEWER_PAST_THE_WINDOW),
        ),
    ],
)
def test_a_rerun_of_one_dataset_of_a_commit_spanning_two_is_refused(
    client: Any, bucket: str, window: int
) -> None:
    """A commit spanning ``a`` and ``b`` landed under ``load-7``; a re-run under
    ``load-7`` commits ``a`` alone (the same rows for ``a``). It is another change (the
    recorded commit had ``b``'s rows too; README: an id "reused for other rows" is
    ``CommitIdReusedError``), as the same two commits meeting in one fold are told (the
    test below), and as the root's record, which names ``a`` and ``b``, tells it. Judged by
    its dataset alone, it was told ``already_committed``. Past the window the commit-id
    index of ``a`` is all that records the id: the one case left (FORMAT.md, "Commit
    ids")."""
    refused_rerun(client, bucket, window=window, recorded="ab", rerun="a")


def test_an_operation_under_an_id_recorded_for_a_commit_spanning_datasets_is_refused_first(
    client: Any, bucket: str
) -> None:
    """A commit spanning ``a`` and ``b`` landed under ``load-7`` (changes without a digest);
    an append to ``a`` alone under ``load-7`` is another change, and its check before the
    first data PUT (the root's record, which names ``a`` and ``b``) refuses it: nothing
    written. Judged by its dataset alone, it was told ``already_committed`` there, before
    the commit loop could refuse it. A partition copied to another dataset, re-run under
    its id, is still that commit (the check counts the source the copy commits too)."""
    lake = process(client, bucket)
    first = lake.registry.commit_changes(group(lake, "ab", "load-7"))
    before = {o.key for o in lake.store.list("datasets/a/")}
    with pytest.raises(CommitIdReusedError) as info:
        lake.append("a", table([ord("a")]), commit_id="load-7")
    assert info.value.version == first.version
    assert {o.key for o in lake.store.list("datasets/a/")} == before
    lake.append("c", table([0, 1]), partition_by=["day"])
    copied = lake.copy_partition("c", "day=1", to_dataset="e", commit_id="copy-1")
    again = lake.copy_partition("c", "day=1", to_dataset="e", commit_id="copy-1")
    assert (again.already_committed, again.version) == (True, copied.version)


def test_a_rerun_spanning_datasets_with_other_rows_in_its_second_is_refused(
    client: Any, bucket: str
) -> None:
    """A commit spanning ``a`` and ``b`` under ``load-7``, one digest for both (as one
    operation spanning datasets binds its id); a re-run under ``load-7`` brings the same
    rows for ``a`` and other rows for ``b`` (another digest). The root's record keeps the
    commit's digest (its changes agreed on it): the re-run's ``b`` is another change, and so
    is the commit. Judged by its first dataset alone, it was told ``already_committed``."""
    lake = process(client, bucket)
    same, other = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    first = lake.registry.commit_changes(
        [replace(c, digest=same) for c in group(lake, "ab", "load-7")]
    )
    with pytest.raises(CommitIdReusedError) as info:
        lake.registry.commit_changes(
            [
                replace(c, digest=same if c.dataset == "a" else other)
                for c in group(lake, "ab", "load-7")
            ]
        )
    assert info.value.version == first.version
    assert lake.registry.commit_changes(
        [replace(c, digest=same) for c in group(lake, "ab", "load-7")]
    ).already_committed


def test_a_rerun_under_an_id_each_dataset_recorded_for_a_commit_of_its_own_is_refused(
    client: Any, bucket: str
) -> None:
    """Past the root's window an id is bound within a dataset only: ``load-7`` committed to
    ``a`` alone, then (its record out of the window) to ``b`` alone, two commits. A commit
    spanning ``a`` and ``b`` under ``load-7`` finds the id in both indexes, at two versions:
    it is neither commit (each had one dataset's rows), and is refused. Judged by the first
    index that records the id, it was told ``already_committed`` at ``a``'s version."""
    lake = process(client, bucket, commit_window=1)
    lake.registry.commit_changes(group(lake, "a", "load-7"))
    lake.append("c", table([1]))
    second = lake.registry.commit_changes(group(lake, "b", "load-7"))
    assert not second.already_committed
    lake.append("c", table([2]))
    with pytest.raises(CommitIdReusedError):
        lake.registry.commit_changes(group(lake, "ab", "load-7"))


def test_a_rerun_past_the_window_of_a_commit_whose_other_dataset_only_carried_a_fence(
    client: Any, bucket: str
) -> None:
    """A commit under ``load-7`` carries a lease's fence for ``a`` alone (as a partition
    copy carries its source's) and adds rows to ``b``: only ``b`` gets a version, and only
    ``b``'s commit-id index the id. Past the root's window the id is bound within a dataset
    only, and an append to ``a`` under ``load-7`` lands. A re-run of the first commit is
    still that commit (``already_committed`` at its version): the id is in the index of
    every dataset the commit makes a version of, and ``a``'s change makes none, so the
    entry in ``a``'s index is another commit's, not asked."""
    lake = process(client, bucket, commit_window=1)
    lake.append("a", table([0]))
    lease = lake.lease("etl")
    assert lease.try_acquire()
    fence = lease.fence

    def fenced() -> list[Change]:
        (rows,) = group(lake, "b", "load-7")
        return [Change("a", "load-7", fence=fence), replace(rows, fence=fence)]

    first = lake.registry.commit_changes(fenced())
    for n in range(3):
        lake.append("c", table([n]))
    assert "load-7" not in [r.id for r in lake.registry.read().commits]
    again = lake.registry.commit_changes(fenced())
    assert (again.already_committed, again.version) == (True, first.version)
    appended = lake.append("a", table([1]), commit_id="load-7")
    assert not appended.already_committed
    lake.append("c", table([9]))
    again = lake.registry.commit_changes(fenced())
    assert (again.already_committed, again.version) == (True, first.version)
    assert ids(lake, "b") == [ord("b")]
    assert ids(lake, "a") == [0, 1]
    lease.release()


@pytest.mark.parametrize("first", ["ab", "a"], ids=["spanning-first", "one-dataset-first"])
def test_a_commit_spanning_datasets_and_one_of_one_dataset_under_an_id_in_one_fold(
    client: Any, bucket: str, first: str
) -> None:
    """Rule 11, the promise the two tests above hold the root's records to: a commit
    spanning ``a`` and ``b`` and a commit of ``a`` alone, both under ``load-7``, their
    processes killed with their intents written, are folded in one batch by a third: the
    older is applied, the other (another set of datasets under the id) is rejected."""
    lake = process(client, bucket)
    second = "a" if first == "ab" else "ab"
    now = int(time.time() * 1000)
    made = [
        intent_group(
            group(lake, names, "load-7"), now_ms=now + n, token="0badcafe", group=f"{n}" * 32
        )
        for n, names in enumerate((first, second))
    ]
    for key, body, _ in (intent for intents in made for intent in intents):
        lake.store.put(key, body, mode="create")
    another_process_folds(client, bucket)  # folds them
    fates = {f.key: f.state for f in lake.registry.internals.intent_fates()}
    assert [fates[key] for key, _, _ in made[0]] == ["applied"] * len(first)
    assert [fates[key] for key, _, _ in made[1]] == ["rejected"] * len(second)
    assert ("b" in lake.registry.read().datasets) == (first == "ab")


@pytest.mark.parametrize(
    ("recorded", "killed"), [("a", "ab"), ("ab", "a")], ids=["spanning-killed", "one-killed"]
)
def test_a_killed_rerun_under_an_id_recorded_for_other_datasets_is_rejected(
    client: Any, bucket: str, recorded: str, killed: str
) -> None:
    """A commit under ``load-7`` landed (``a`` alone, or ``a`` and ``b``); a re-run under
    ``load-7`` naming the other set of datasets is killed with its intents written.
    Another process's fold lists them: the commit is another change under a recorded id,
    to be recorded ``rejected`` (rule 3's "recorded for another change"; rule 11 refuses it
    so within one fold), so that the intents' fates tell the pipeline that it is not
    committed. Judged change by change, it was recorded ``applied`` (already), at the first
    commit's version, and ``find_commit`` found its id while the datasets it named and the
    record lacks never got its rows."""
    lake = process(client, bucket)
    first = lake.registry.commit_changes(group(lake, recorded, "load-7"))
    made = intent_group(
        group(lake, killed, "load-7"),
        now_ms=int(time.time() * 1000),
        token="0badcafe",
        group="9" * 32,
    )
    for key, body, _ in made:
        lake.store.put(key, body, mode="create")
    keys = [key for key, _, _ in made]
    another_process_folds(client, bucket)  # folds them
    fates = {f.key: f for f in lake.registry.internals.intent_fates()}
    assert [fates[k].state for k in keys] == ["rejected"] * len(killed), [
        (fates[k].state, fates[k].version) for k in keys
    ]
    assert first.version == lake.registry.find_commit("load-7")
    assert ("b" in lake.registry.read().datasets) == ("b" in recorded)


# -- the commit-id index past its snapshot's buffer ------------------------------------------


def test_a_rerun_under_a_generated_id_past_the_index_buffer_is_not_applied_again(
    client: Any, bucket: str
) -> None:
    """Sweep seed 26933's case, with the re-run pushed further: a commit under a generated
    id crashed with its intent's PUT in flight; its pipeline re-runs it under that id and
    the re-run lands; then more than ``RECENT_IDS`` (64) commits to the dataset move its
    entry out of the snapshot's buffer of recent ids into the commit-id tree. The crashed
    run's intent lands, a minute ahead: the fold finds the id in the tree and records it
    applied already, at the re-run's version; the rows are there once."""
    lake = process(client, bucket, commit_window=1)
    rows = table([1, 2])
    files = lake.write("c", rows)
    crashed = Change(
        "c",
        "019b76daac27d2744cc95aba1343cda5",
        add=tuple(files),
        operation="append",
        digest=change_digest({"partition_by": ()}, table=rows),
        generated_id=True,
    )
    rerun = lake.append("c", rows, commit_id=crashed.commit_id)
    for n in range(RECENT_IDS + 1):
        lake.registry.commit("c", add=[datafile("c", "", f"later-{n}", records=1)])
    state = lake.registry.read().datasets["c"]
    assert crashed.commit_id not in state.recent_ids  # in the tree now
    assert lake.registry.find_commit(crashed.commit_id) == rerun.version
    key, body, _ = intent_document(crashed, now_ms=int(time.time() * 1000) + 60_000)
    lake.store.put(key, body, mode="create")
    another_process_folds(client, bucket)
    (fate,) = [f for f in lake.registry.internals.intent_fates() if f.key == key]
    assert (fate.state, fate.version, fate.already) == ("applied", rerun.version, True)
    registered = {f.key for f in lake.registry.files("c")}
    assert len(registered) == 1 + RECENT_IDS + 1  # the re-run's file, and the later ones
    assert not registered & {f.key for f in files}  # the crashed run's: never


# -- re-runs of other operations under the id an unknown outcome named -------------------------


def overwrite(lake: Lake, commit_id: str | None) -> CommitResult:
    return lake.overwrite("c", table([5]), partition_by=["day"], commit_id=commit_id)


def delete(lake: Lake, commit_id: str | None) -> CommitResult:
    return lake.delete("c", partitions=["day=0"], commit_id=commit_id)


def restore(lake: Lake, commit_id: str | None) -> CommitResult:
    return lake.restore("c", version=1, commit_id=commit_id)


def dask_append(lake: Lake, commit_id: str | None) -> CommitResult:
    """A driver's ``lakelock.dask.append``; its re-run (under the id) splits the rows
    otherwise, as a re-run on a resized cluster does."""
    rows = pd.DataFrame({"id": [5, 7, 9], "day": [1, 1, 1]})
    frame = dd.from_pandas(rows, npartitions=1 if commit_id is None else 3, sort=False)
    return lakelock.dask.append(lake, "c", frame, partition_by=["day"], commit_id=commit_id)


@pytest.mark.parametrize(
    "operation", [overwrite, delete, restore, dask_append], ids=lambda f: f.__name__
)
def test_a_rerun_of_an_unknown_outcome_is_not_applied_again_when_its_first_intent_lands_late(
    s3: S3Endpoint, admin: Any, client: Any, bucket: str, operation: Any
) -> None:
    """An overwrite, a delete, a restore or a ``lakelock.dask`` append under a generated id
    gives up with
    ``CommitStateUnknownError`` while its intent is still on its way (held, from a machine
    whose clock runs ahead). Its pipeline re-runs it under the id the error names; the
    re-run lands, and later appends push its record out of the root's window. Then the
    first run's intent lands: the fold that lists it finds the id in the dataset's
    commit-id index and records it applied already, at the re-run's version. Were it
    applied again, the overwrite would drop the rows appended since, the delete would delete
    them, the restore would undo them, the append would add its rows twice."""
    lake = process(client, bucket, commit_window=1)
    lake.append("c", table([1, 2]), partition_by=["day"])
    lake.append("c", table([3, 4]), partition_by=["day"])
    named, key = given_up_unknown(s3, client, bucket, lambda first: operation(first, None))
    land = held_back(admin, bucket, key)
    rerun = operation(lake, named)
    assert not rerun.already_committed
    for n in (6, 8):
        lake.append("c", table([n]), partition_by=["day"])
    assert named not in [r.id for r in lake.registry.read().commits]
    before = ids(lake, "c")
    late = land()
    another_process_folds(client, bucket)
    (fate,) = [f for f in lake.registry.internals.intent_fates() if f.key == late]
    assert (fate.state, fate.version, fate.already) == ("applied", rerun.version, True)
    assert ids(lake, "c") == before


# -- a re-run in the process whose commit was interrupted ------------------------------------


def test_a_rerun_in_the_process_whose_commit_was_interrupted_is_that_commit(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A commit under ``job-7`` has its intent out and its swap held at the endpoint; let
    go, the swap lands and the committing thread is interrupted at its next step (Ctrl-C):
    ``KeyboardInterrupt``, with a note saying that another process may still apply it
    (look its commit id up). The same process (a notebook's kernel) re-runs it under
    ``job-7`` at once: the re-run is that commit (``already_committed``, its version), not a
    second one, and this process commits on afterwards (its turn was given back)."""
    clock = Interrupting()
    reg = registry(store, clock=clock)
    reg.commit("c", add=[datafile("c", "", "before")])
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(reg.commit, "c", add=[datafile("c", "", "job")], commit_id="job-7")
        wait_until(lambda: s3.stalled() == 1)
        clock.armed = True
        s3.release_stalls()
        interrupted = first.exception(timeout=60)
        assert isinstance(interrupted, KeyboardInterrupt), repr(interrupted)
        assert any("job-7" in note for note in getattr(interrupted, "__notes__", []))
        landed = reg.find_commit("job-7")
        assert landed is not None
        rerun = pool.submit(reg.commit, "c", add=[datafile("c", "", "job")], commit_id="job-7")
        again = rerun.result(timeout=60)  # a turn never given back would hang here
    assert (again.version, again.already_committed) == (landed, True)
    reg.commit("c", add=[datafile("c", "", "after")])
    assert sorted(f.name for f in registry(store).files("c")) == ["after", "before", "job"]
