"""Adversarial tests of a long job's commit and the lake's vacuum floor (README, "Engines":
on a cluster the workers write and the driver commits once; FORMAT.md, "The lake's settings"
and rule 10: a commit refers to what it adds only while it is younger than half the floor).
The workers' files are written as the README's Spark and Ray steps write them
(``config.open().write``), and the server's clock is injected (every answer's ``Date``):
nothing sleeps."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._datafile import DataFile
from lakelock._registry._settings import DEFAULT_FLOOR
from lakelock.errors import ObjectTooOldError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.simtime import SimTime

MINUTE = 60.0


def job_written(lake: Lake, sim: SimTime, minutes: float) -> list[DataFile]:
    """The files of a cluster job whose tasks ran ``minutes`` by the server's clock: the
    first task's file written at its start, the last at its end (each task opens the lake
    from its picklable config, as a worker does)."""
    files = []
    for day in (1, 2):
        worker = lake.config.open()
        sim.attach(worker.client)
        files += worker.write("events", pa.table({"id": [day], "day": [day]}), partition_by=["day"])
        if day == 1:
            sim.advance(minutes * MINUTE)
    return files


@pytest.fixture
def sim(lake: Lake) -> SimTime:
    clock = SimTime(start=time.time())
    clock.attach(lake.client)
    return clock


def test_a_retention_shrunk_for_a_while_and_set_back_brings_its_floor_back(
    s3: S3Endpoint, lake: Lake, sim: SimTime
) -> None:
    """An operator shrinks the lake's retention to 10 minutes for a clean-up (which lowers
    the vacuum floor with it: the floor is at most the retention), then sets the week back.
    A cluster job whose tasks ran 20 minutes then commits what they wrote. With the floor
    back at its default (an hour), the job commits. What a user would have lost: the floor
    stayed at 10 minutes for good, and every job longer than 5 minutes was refused
    (``ObjectTooOldError``) after all its work, by a setting nobody chose."""
    lake.append("events", pa.table({"id": [0], "day": [0]}), partition_by=["day"])
    lake.configure(retention="10m")
    assert lake.registry.settings().vacuum_floor == 10 * MINUTE
    lake.configure(retention="7d")
    files = job_written(lake, sim, 20)
    lake.registry.commit("events", add=files, commit_id="job-1")
    assert sorted(lake.read("events")["id"].to_pylist()) == [0, 1, 2]


def test_a_floor_chosen_below_the_default_stays_when_the_retention_changes(lake: Lake) -> None:
    """A floor the operator chose (20 minutes: their writers are quick, their vacuums
    frequent) is theirs: growing the retention keeps it, and shrinking the retention below
    it takes it down with the retention, as ever."""
    lake.append("events", pa.table({"id": [0], "day": [0]}), partition_by=["day"])
    lake.configure(vacuum_floor="20m")
    lake.configure(retention="30d")
    assert lake.registry.settings().vacuum_floor == 20 * MINUTE
    lake.configure(retention="10m")
    assert lake.registry.settings().vacuum_floor == 10 * MINUTE


def test_a_job_longer_than_half_the_floor_is_refused_and_commits_once_the_floor_is_raised(
    s3: S3Endpoint, lake: Lake, sim: SimTime
) -> None:
    """README: a cluster job commits what its workers wrote only while its oldest file is
    younger than half the lake's vacuum floor (an hour by default), since vacuum may take an
    unreferenced file older than the floor. A 45-minute job is refused
    (``ObjectTooOldError`` naming its oldest file and the floor), nothing committed; with
    the floor raised to twice the job's length (``lake.configure(vacuum_floor=...)``, at
    most the retention) the same job, run again, commits."""
    lake.append("events", pa.table({"id": [0], "day": [0]}), partition_by=["day"])
    files = job_written(lake, sim, 45)
    with pytest.raises(ObjectTooOldError) as refused:
        lake.registry.commit("events", add=files, commit_id="job-1")
    assert refused.value.floor == DEFAULT_FLOOR
    assert refused.value.key == files[0].key
    lake.configure(vacuum_floor="2h")
    again = Lake(lake.bucket, s3=lake.client, retry=FAST_RETRY)
    files = job_written(again, sim, 45)
    again.registry.commit("events", add=files, commit_id="job-1")
    assert sorted(again.read("events")["id"].to_pylist()) == [0, 1, 2]
