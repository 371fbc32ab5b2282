"""benchmarks/bench_appends.py: what its figures count, and one tiny cell of every system
this interpreter can import (the peers are an optional extra: a missing one is skipped)."""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lakelock.testing import S3Endpoint
from tests._support import StallAndRace

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_appends.py"
_buckets = itertools.count()


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_appends", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = load_bench()

# The module each system needs in this interpreter.
MODULES = {
    "lakelock": "lakelock",
    "delta-rs": "deltalake",
    "lance": "lance",
    "icechunk": "icechunk",
    "pyiceberg-sqlite": "pyiceberg.catalog.sql",
}


def outcome(*ends: float) -> Any:
    return bench.Outcome(latencies=[0.1] * len(ends), ends=list(ends))


def test_a_burst_counts_first_commits_and_steady_state_does_not() -> None:
    """A burst's rate is every commit over the time from the start to the last one (a batch
    job pays for its writers' first commits); steady state counts only the commits after every
    writer has committed once, over the time from then to the last: a slow start does not
    lower it, nor does a fast one raise it."""
    writers = [outcome(1.0, 2.0, 3.0), outcome(1.5, 2.5, 5.0)]
    assert bench.counted_window(writers, 0.0, "burst") == (6, 5.0)
    assert bench.counted_window(writers, 0.0, "steady") == (4, 3.5)
    # A writer that never committed leaves no warm-up to exclude: all of the run counts.
    assert bench.counted_window([*writers, outcome()], 0.0, "steady") == (6, 5.0)


def test_the_parser_refuses_a_system_or_load_it_does_not_know() -> None:
    """A misspelt system or load stops the benchmark before it runs, instead of a table
    without that system; the peers, bursts and Icechunk's interpreter are options."""
    args = bench.parser().parse_args(
        ["--systems", "lance,icechunk,pyiceberg-sqlite", "--load", "burst", "--appends", "5"]
    )
    assert (args.systems, args.load, args.appends) == (
        ["lance", "icechunk", "pyiceberg-sqlite"],
        ["burst"],
        5,
    )
    for wrong in (["--systems", "lance,iceberg"], ["--load", "bursts"]):
        with pytest.raises(SystemExit):
            bench.parser().parse_args(wrong)


@pytest.mark.parametrize("system", bench.SYSTEMS)
def test_one_writers_burst_is_counted_and_found_in_the_table(
    s3: S3Endpoint, tmp_path: Path, system: str
) -> None:
    """One writer appends twice: both commits are counted, the endpoint saw their requests,
    and reading the table back finds both (``check`` ok), for every system installed here."""
    pytest.importorskip(MODULES[system])
    target = bench.Target(s3.url, f"bench-{next(_buckets)}", str(tmp_path), 10, 1)
    sample = bench.timed_run(
        s3,
        system=system,
        writers=1,
        mode="threads",
        load="burst",
        latency_ms=0,
        seconds=0.0,
        appends=2,
        target=target,
        pool=None,
    )
    assert (sample.all_commits, sample.failures, sample.check) == (2, 0, "ok"), sample.first_error
    assert sample.requests > 0
    assert sample.rate > 0


@pytest.mark.parametrize(
    ("system", "commit_key"),
    [("lance", "events/_versions/"), ("icechunk", "events/repo")],
)
def test_a_peer_as_the_benchmark_opens_it_commits_with_a_conditional_request(
    s3: S3Endpoint, stall_and_race: StallAndRace, tmp_path: Path, system: str, commit_key: str
) -> None:
    """Lance and Icechunk as the benchmark configures them (plain ``s3://`` on a path-style
    endpoint, no lock, no DynamoDB) commit with a conditional write: a commit held at the
    endpoint while another writer's lands loses that race and is rebased, so both appends are
    in the table. With an unconditional write the held one would replace the other's commit
    and one append would be lost: that system's row would measure an unsafe protocol."""
    pytest.importorskip(MODULES[system])
    target = bench.Target(s3.url, f"bench-{next(_buckets)}", str(tmp_path), 10, 3)
    s3.create_bucket(target.bucket)
    bench.create_table(system, target)

    def append(writer: int) -> Callable[[], None]:
        def run() -> None:
            bench.append_once(bench.open_handle(system, target, writer), bench.batch(writer, 0, 10))

        return run

    stall_and_race(append(1), append(2), prefix=commit_key)
    assert bench.committed_appends(system, target) == 3


def test_lakelock_opened_as_its_peers_are_reads_no_table_state_in_its_first_append(
    s3: S3Endpoint, tmp_path: Path
) -> None:
    """A lakelock writer is opened before the clock starts as the peers' are (delta-rs reads
    its log, Lance its manifest, pyiceberg its metadata): with the root, it has read the
    dataset's current version, so its first timed append, which commits, reads nothing (its
    first listing of intents is the protocol's, not an open's). Had the open read the root
    alone, every first commit of a burst would pay, inside the timed window, a read its
    peers paid before it."""
    target = bench.Target(s3.url, f"bench-{next(_buckets)}", str(tmp_path), 10, 1)
    s3.create_bucket(target.bucket)
    bench.create_table("lakelock", target)
    handle = bench.open_handle("lakelock", target, 1)
    s3.reset_stats()
    bench.append_once(handle, bench.batch(1, 0, 10))
    first = s3.areas()
    assert not [area for area in first if area.startswith("GetObject")], first
    assert first.get("PutObject root") == 1, first


def test_nice_lowers_every_writer_process_and_only_with_processes() -> None:
    """``--nice N`` runs the writer processes N below the benchmark (and so below the endpoint
    it started), whatever system they serve: the endpoint then stands in for a store that does
    not share the writers' cores. Without it they run at the benchmark's own priority; threads
    have no process of their own to lower, so the two together are refused."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    for nice in (0, 3):
        pool = bench.ProcessPool(2, sys.executable, nice)
        try:
            for process in pool.processes:
                assert os.getpriority(os.PRIO_PROCESS, process.pid) == min(19, own + nice)
        finally:
            pool.close()
    assert bench.parser().parse_args(["--modes", "processes", "--nice", "5"]).nice == 5
    for wrong in (["--nice", "20"], ["--nice", "-1"]):
        with pytest.raises(SystemExit):
            bench.parser().parse_args(wrong)
    with pytest.raises(SystemExit):
        bench.main(["--modes", "threads,processes", "--nice", "5"])
