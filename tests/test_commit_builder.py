"""Every commit of a lake is built one way (``lakelock._registry._builder.CommitBuilder``):
whatever the operation, its commit id comes from the registry's one generator or the
caller, its intent says which (``generated_id``), and it is bound to the digest lakelock
has always recorded for that change, so a re-run is recognised — in a lake written before,
and after an outcome its caller could not know."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import dask.dataframe as dd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelock.dask
from lakelock import Lake
from lakelock._layout import INTENT_PREFIX
from lakelock._pathlock._distributed import DistributedPathLock
from lakelock._registry import Change, CommitResult, Registry
from lakelock._registry._intents import parse_intent
from lakelock.errors import CommitStateUnknownError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.outcomes import impatient_lake, while_its_first_swap_is_in_flight


def table(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "day": [f"d{i % 2}" for i in ids]})


def intents(lake: Lake) -> dict[str, Change]:
    """The intents in the bucket, by commit id (read from the endpoint, as a folding process
    of another lakelock would read them)."""
    found = {}
    for listed in lake.store.list(INTENT_PREFIX):
        change, _ = parse_intent(listed.key, lake.store.get(listed.key).body)
        found[change.commit_id] = change
    return found


def recorded(lake: Lake, result: CommitResult) -> tuple[str, str | None]:
    """The operation and digest the root records for ``result``'s commit."""
    record = next(c for c in lake.registry.read().commits if c.id == result.commit_id)
    return record.operation, record.digest


def every_operation(lake: Lake, ids: Callable[[str], str | None]) -> dict[str, CommitResult]:
    """Each way to commit, in a lake of its own, under the commit id ``ids(name)`` gives."""
    done: dict[str, CommitResult] = {}
    done["append"] = lake.append("c", table([1, 2, 3, 4]), partition_by=["day"], commit_id=ids("a"))
    done["append_props"] = lake.append(
        "c", table([5, 6]), partition_by=["day"], properties={"owner": "etl"}, commit_id=ids("a2")
    )
    done["overwrite"] = lake.overwrite("c", table([7, 8]), partition_by=["day"], commit_id=ids("o"))
    done["overwrite_all"] = lake.overwrite(
        "c", table([9]), partitions="all", partition_by=["day"], commit_id=ids("o2")
    )
    lake.append("c", table([10, 11, 12, 13]), partition_by=["day"])
    lake.append("c", table([14, 15]), partition_by=["day"])
    done["compact"] = lake.compact(
        "c", partitions=["day=d0"], target_file_size=10**6, commit_id=ids("k")
    )
    done["set_properties"] = lake.set_properties(
        "c", {"owner": "ops", "x": None}, commit_id=ids("p")
    )
    done["delete"] = lake.delete("c", where=pc.field("day") == "d1", commit_id=ids("d"))
    done["restore"] = lake.restore("c", version=2, commit_id=ids("r"))
    done["copy"] = lake.copy_partition("c", "day=d0", to_dataset="e", commit_id=ids("cp"))
    done["rename"] = lake.rename_partition(
        "c", "day=d0", to_partition="day=d9", commit_id=ids("rn")
    )
    files = lake.write("f", table([1, 2, 3]), partition_by=["day"], file_name="part.parquet")
    done["registry_commit"] = lake.registry.commit(
        "f", add=files, partition_by=["day"], properties={"a": "b"}, commit_id=ids("rc")
    )
    done["registry_remove"] = lake.registry.commit(
        "f", remove=[files[0]], remove_partitions=["day=d1"], commit_id=ids("rc2")
    )
    done["copy_within"] = lake.copy_partition(
        "c", "day=d9", to_partition="day=d7", commit_id=ids("cw")
    )
    frame = dd.from_dict({"id": [20, 21], "day": ["d0", "d1"]}, npartitions=1)
    done["dask"] = lakelock.dask.append(lake, "g", frame, partition_by=["day"], commit_id=ids("dk"))
    return done


#: What lakelock recorded for each operation of :func:`every_operation` before every commit was
#: built by one builder (the commit ids given, the same rows): a lake written then is re-run
#: against these.
RECORDED_BEFORE = {
    "append": ("append", "sha256:5cc4a0dac5198a1178794d1f9584f1bd732af6f104046d4458122348fb6f3659"),
    "append_props": (
        "append",
        "sha256:b484bd3dff8d4dd5e30bb4ce68f50ba925419e45e26eb81b6c490da4580914fe",
    ),
    "overwrite": (
        "overwrite",
        "sha256:2f2dad44787b01a7be04f1c0a8b3a43428e0112ffae60fc9089b970ff1bc7778",
    ),
    "overwrite_all": (
        "overwrite",
        "sha256:8452f27a432d22a3803698237b01757fbeed8afdc4a4bc83f635d3597442a50e",
    ),
    "compact": (
        "compact",
        "sha256:345137730e145d7e8ea9aed4a4e159975588cac47a5d65630255ab82c26d2c25",
    ),
    "set_properties": (
        "properties",
        "sha256:f474bfab44d4bef89474a285c66adb307572a00e6eaee00b633f8bde913a215b",
    ),
    "delete": ("delete", "sha256:e1cd38209a44ab474067c166e895b1383ffa9ea36d074c163584f3d1afcd9d83"),
    "restore": (
        "restore",
        "sha256:30bf24ebb3141310dbd25deb5b7aee3ba9fa579ee0980a86d0fff70c37104082",
    ),
    "copy": ("copy", "sha256:5a912794d3de9565905a78ddcc35cef436d8d329e525ac1e9c9c1322fe58cc79"),
    "rename": ("rename", "sha256:c8b46b0941e53527e51c1b6eba88202fc05dd6f93599c4b8fde22d962f930e48"),
    "registry_commit": (
        "commit",
        "commit:sha256:3a7a4c563462bfb884bff7193beb527cccac7f0382322de7a8f9f1560f7164b3",
    ),
    "registry_remove": (
        "commit",
        "commit:sha256:9ac3daf5f5641fa58b60ed7f1a6ecdd3b9eaf2ec4e3bd07bdcc0ff35454032e7",
    ),
}


def test_every_operation_records_the_digest_recorded_before_and_its_intent_carries_it(
    lake: Lake,
) -> None:
    """With commit ids given, each operation records the very digest lakelock recorded for
    it before (so a re-run of a commit in a lake written then is still a re-run, not
    ``CommitIdReusedError``), and its intent, read from the bucket, carries that digest and
    says the caller chose the id."""
    done = every_operation(lake, lambda name: f"job-{name}")
    by_id = intents(lake)
    for name, result in done.items():
        operation, digest = recorded(lake, result)
        if name in RECORDED_BEFORE:
            assert (operation, digest) == RECORDED_BEFORE[name], name
        intent = by_id.get(result.commit_id)
        if intent is not None:  # a one-dataset commit (a restore's has none)
            assert (intent.digest, intent.operation) == (digest, operation), name
            assert not intent.generated_id, name
    assert {"append", "compact", "copy_within", "registry_commit", "dask"} <= {
        name for name, result in done.items() if result.commit_id in by_id
    }


def test_every_generated_commit_id_comes_from_the_registrys_one_generator(
    client: Any, bucket: str
) -> None:
    """Without commit ids, every operation's id is the registry's: its time part is the
    registry's clock (injected here, an hour behind), and its intent says the id was
    generated, so no process looks for it in the commit-id indexes. Before, the table
    operations took the process's own clock and partition moves marked their generated ids
    as chosen."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    hour_ago = time.time() - 3600
    lake.registry = Registry(lake.store, retry=FAST_RETRY, clock=lambda: hour_ago)
    done = every_operation(lake, lambda name: None)
    expected = f"{int(hour_ago * 1000) & 0xFFFFFFFFFFFF:012x}"
    by_id = intents(lake)
    for name, result in done.items():
        assert result.commit_id.startswith(expected), (name, result.commit_id)
        intent = by_id.get(result.commit_id)
        if intent is not None:
            assert intent.generated_id, name


def test_commit_ids_generated_in_forked_processes_differ(s3: S3Endpoint, bucket: str) -> None:
    """A process forked from one that holds a lake (a pool of ETL workers) generates commit
    ids of its own: at the same millisecond, the child's and the parent's differ. Before,
    both drew them from the same copied generator: the parent's commit got the id the
    child's had taken, and was refused as ``CommitIdReusedError``."""
    lake = Lake(bucket, s3=s3.client(), retry=FAST_RETRY)
    now = time.time()
    lake.registry = Registry(lake.store, retry=FAST_RETRY, clock=lambda: now)
    read, write = os.pipe()
    child = os.fork()  # its client sent nothing yet: no connection is shared with the child
    if child == 0:  # pragma: no cover - the child's report is the pipe
        try:
            result = lake.registry.commit("child", properties={"by": "child"})
            os.write(write, result.commit_id.encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    theirs = os.read(read, 100).decode()
    os.close(read)
    assert status == 0
    assert len(theirs) == 32
    ours = lake.registry.commit("parent", properties={"by": "parent"}).commit_id
    assert ours != theirs
    assert ours[:12] == theirs[:12]  # the same millisecond


def frame(ids: list[int]) -> dd.DataFrame:
    return dd.from_pandas(table(ids).to_pandas(), npartitions=1)


#: Each operation, set up in a fresh lake, then run under the commit id ``"job"``.
RERUNS: dict[str, tuple[Callable[[Lake], object], Callable[[Lake], CommitResult]]] = {
    "append": (
        lambda lake: lake.append("c", table([0])),
        lambda lake: lake.append("c", table([1, 2]), commit_id="job"),
    ),
    "overwrite": (
        lambda lake: lake.append("c", table([0, 1]), partition_by=["day"]),
        lambda lake: lake.overwrite("c", table([2]), partition_by=["day"], commit_id="job"),
    ),
    "delete": (
        lambda lake: lake.append("c", table([0, 1]), partition_by=["day"]),
        lambda lake: lake.delete("c", partitions=["day=d1"], commit_id="job"),
    ),
    "compact": (
        lambda lake: [lake.append("c", table([n])) for n in range(2)],
        lambda lake: lake.compact("c", commit_id="job"),
    ),
    "set_properties": (
        lambda lake: lake.append("c", table([0])),
        lambda lake: lake.set_properties("c", {"owner": "etl"}, commit_id="job"),
    ),
    "restore": (
        lambda lake: [lake.append("c", table([n])) for n in range(2)],
        lambda lake: lake.restore("c", version=1, commit_id="job"),
    ),
    "copy": (
        lambda lake: lake.append("c", table([0, 1]), partition_by=["day"]),
        lambda lake: lake.copy_partition("c", "day=d1", to_partition="day=d3", commit_id="job"),
    ),
    "rename": (
        lambda lake: lake.append("c", table([0, 1]), partition_by=["day"]),
        lambda lake: lake.rename_partition("c", "day=d1", to_dataset="e", commit_id="job"),
    ),
    "registry_commit": (
        lambda lake: lake.append("c", table([0])),
        lambda lake: lake.registry.commit("c", add=lake.write("c", table([1])), commit_id="job"),
    ),
    "dask": (
        lambda lake: lakelock.dask.append(lake, "c", frame([0])),
        lambda lake: lakelock.dask.append(lake, "c", frame([1]), commit_id="job"),
    ),
}


#: One operation of each way to be recognised runs by default (checked before the first
#: data PUT, on a fresh read or the registry known, or settled by the commit loop; one
#: dataset or two); the others with ``-m slow``.
DEFAULT_RERUNS = ("append", "delete", "restore", "rename")


@pytest.mark.parametrize(
    "name",
    [n if n in DEFAULT_RERUNS else pytest.param(n, marks=pytest.mark.slow) for n in RERUNS],
)
def test_a_rerun_after_an_unknown_outcome_is_recognised(
    s3: S3Endpoint, bucket: str, name: str
) -> None:
    """An operation whose swap is held at the server past its client's patience hears that
    its outcome is unknown, and then lands; the pipeline re-runs it with its commit id (a
    process of its own): the re-run reports the commit that landed, and commits nothing
    twice."""
    setup, run = RERUNS[name]
    lake = impatient_lake(s3, bucket)
    # Its path lock registers no write locks in the registry (their swap would be the one
    # held): the move's own commit is.
    lake.locks = DistributedPathLock(lake.store)
    setup(lake)
    outcome = while_its_first_swap_is_in_flight(s3, lambda: run(lake))
    assert isinstance(outcome, CommitStateUnknownError), repr(outcome)
    landed = lake.registry.find_commit("job")
    assert landed is not None
    before = versions(lake)
    again = run(Lake(bucket, s3=lake.client, retry=FAST_RETRY))
    assert (again.version, again.already_committed) == (landed, True)
    assert versions(lake) == before


def versions(lake: Lake) -> dict[str, int]:
    """The version each dataset was last changed at."""
    snapshot = lake.registry.read()
    return {name: snapshot.datasets[name].updated_version for name in snapshot.datasets}
