"""``lakelock registry`` on history: ``show --version N`` shows that version, ``log`` counts
a restore's files as ``--dataset`` and ``lake.history`` do, and output piped into a reader
that goes away (``| head -1``) ends quietly (a process of its own: its stdout is the pipe).
The others run in this process (the ``in_process`` fixture)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import REGISTRY_KEY
from lakelock.errors import StaleFenceError
from lakelock.testing import S3Endpoint
from tests._support import CLI_ENV as ENV
from tests._support.processes import InProcess


def history_lake(lake: Lake) -> None:
    """Version 1: two files; version 2: three; version 3: restore of version 1."""
    lake.append("sales", pa.table({"id": [1, 2], "day": [1, 2]}), partition_by=["day"])
    lake.append("sales", pa.table({"id": [3], "day": [3]}), partition_by=["day"])
    lake.restore("sales", version=1, commit_id="back")


def test_show_at_a_version_shows_that_version(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    history_lake(lake)
    for version in (1, 2):
        result = in_process(
            "registry", "show", lake.url, "--version", str(version), "--endpoint-url", s3.url
        )
        assert result.returncode == 0, result.stderr
        assert "no registry yet" not in result.stdout
        assert f"registry version {version}" in result.stdout
    old = in_process("registry", "show", lake.url, "--version", "1", "--endpoint-url", s3.url)
    row = next(line.split() for line in old.stdout.splitlines() if line.startswith("sales"))
    assert row[1:4] == ["day", "2", "2"]  # two partitions, two files: version 1's


def test_log_counts_a_restore_as_history_does(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    history_lake(lake)
    (restore, *_) = lake.history("sales")
    assert (restore.operation, restore.added, restore.removed) == ("restore", 2, 3)
    result = in_process("registry", "log", lake.url, "--json", "--endpoint-url", s3.url)
    entry = orjson.loads(result.stdout)[0]
    assert (entry["operation"], entry["added"], entry["removed"]) == ("restore", 2, 3)


def test_log_json_gives_each_applied_commits_digest(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``log --json`` gives an applied commit's ``digest`` (what it committed: a re-run under
    its id is the same change when its digest is this one), as the root records it; a
    script comparing a re-run's change with the one recorded reads it there."""
    lake.append("sales", pa.table({"id": [1]}), commit_id="load-1")
    result = in_process("registry", "log", lake.url, "--json", "--endpoint-url", s3.url)
    entry = orjson.loads(result.stdout)[0]
    (record,) = [c for c in lake.registry.read().commits if c.id == "load-1"]
    assert record.digest is not None
    assert (entry["id"], entry["digest"]) == ("load-1", record.digest)


def test_log_shows_a_lease_takeover_naming_no_dataset(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """A lease taken records its takeover by a commit of its own: ``log`` lists it as
    ``takeover``, with no dataset (``-``; ``[]`` in JSON), not as a commit to a dataset
    named ``""``."""
    lake.append("sales", pa.table({"id": [1]}))
    with lake.lease("leader", ttl=30, heartbeat=False):
        pass
    result = in_process("registry", "log", lake.url, "--json", "--endpoint-url", s3.url)
    entry = orjson.loads(result.stdout)[0]
    assert (entry["operation"], entry["datasets"], entry["added"]) == ("takeover", [], 0)
    text = in_process("registry", "log", lake.url, "--endpoint-url", s3.url).stdout
    row = next(line.split() for line in text.splitlines() if "takeover" in line)
    assert row[2:5] == ["takeover", "-", "0"]


def test_a_reader_that_goes_away_ends_the_output_quietly(s3: S3Endpoint, lake: Lake) -> None:
    """stdout is a pipe whose reading end is closed before anything is written: every write
    fails (EPIPE), as it does once ``head`` has its line."""
    history_lake(lake)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "lakelock.cli",
                "registry",
                "show",
                lake.url,
                "--dataset",
                "sales",
                "--files",
                "--endpoint-url",
                s3.url,
            ],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 141


def test_vacuum_below_the_retention_names_the_flag(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    history_lake(lake)
    lake.configure(vacuum_floor=0)
    refused = in_process(
        "vacuum", lake.url, "--older-than", "0s", "--delete", "--endpoint-url", s3.url
    )
    assert refused.returncode == 1
    assert "--no-enforce-retention" in refused.stderr
    assert lake.read("sales", version=2).num_rows == 3


def test_log_shows_refused_commits_and_the_version_they_used(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    lake.append("sales", pa.table({"id": [1], "day": [1]}), fence=("lease:x", 2))
    with pytest.raises(StaleFenceError):
        lake.append("sales", pa.table({"id": [2], "day": [1]}), fence=("lease:x", 1))
    assert lake.registry.read().version == 2  # the refusal used up version 2
    result = in_process("registry", "log", lake.url, "--json", "--endpoint-url", s3.url)
    newest, first = orjson.loads(result.stdout)
    assert (newest["version"], newest["operation"], newest["id"]) == (2, "rejected", None)
    assert "fencing token" in newest["reason"] or "fence" in newest["reason"]
    assert (first["version"], first["operation"]) == (1, "append")
    text = in_process("registry", "log", lake.url, "--endpoint-url", s3.url)
    assert text.stdout.splitlines()[1].split()[:3][0] == "2"
    assert "rejected" in text.stdout.splitlines()[1]


def test_configure_changes_the_lakes_settings_and_show_shows_them(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``registry configure --retention 30d --vacuum-floor 2h`` changes them for every
    writer (a Lake opened afterwards uses them); ``registry show`` shows them, and
    ``configure`` without a setting shows them too. A floor above the retention is refused
    before anything is written."""
    history_lake(lake)
    shown = in_process("registry", "show", lake.url, "--endpoint-url", s3.url)
    assert "settings: retention 7d, commit window 100, intent TTL 10m, vacuum floor 1h" in (
        shown.stdout
    )
    done = in_process(
        "registry",
        "configure",
        lake.url,
        "--retention",
        "30d",
        "--vacuum-floor",
        "2h",
        "--endpoint-url",
        s3.url,
    )
    assert done.returncode == 0, done.stderr
    assert "retention 30d, commit window 100, intent TTL 10m, vacuum floor 2h" in done.stdout
    assert Lake(lake.bucket, s3=lake.client).registry.settings().retention == 30 * 86400.0
    as_json = in_process("registry", "show", lake.url, "--json", "--endpoint-url", s3.url)
    assert orjson.loads(as_json.stdout)["settings"]["vacuum_floor"] == 7200.0
    version = lake.registry.read().version
    refused = in_process(
        "registry", "configure", lake.url, "--vacuum-floor", "31d", "--endpoint-url", s3.url
    )
    assert refused.returncode == 1
    assert "exceeds the retention" in refused.stderr
    assert lake.registry.read().version == version
    plain = in_process("registry", "configure", lake.url, "--endpoint-url", s3.url)
    assert "settings" in plain.stdout
    assert "vacuum floor 2h" in plain.stdout


def test_configure_where_no_lake_is_says_so(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """At a prefix with no lake (a typo), ``registry configure`` without settings is an
    error naming the prefix, exit 1, not the defaults shown as if they were a lake's; with
    ``--create`` and no settings it says it created nothing (and creates nothing), and with
    settings it says it created the lake. Before, the first printed the defaults, exit 0,
    and the second printed them too: neither said that no lake was there."""

    def configure(*given: str) -> subprocess.CompletedProcess[str]:
        return in_process("registry", "configure", lake.url, *given, "--endpoint-url", s3.url)

    shown = configure()
    assert shown.returncode == 1
    assert f"no lake at {lake.url}" in shown.stderr
    assert "--create with settings" in shown.stderr
    nothing = configure("--create")
    assert nothing.returncode == 0, nothing.stderr
    assert "nothing created" in nothing.stdout
    assert orjson.loads(configure("--create", "--json").stdout)["lake"] is False
    assert lake.registry.read().version == 0
    created = configure("--create", "--retention", "30d")
    assert created.returncode == 0, created.stderr
    assert "created" in created.stdout.splitlines()[0]
    assert lake.registry.settings().retention == 30 * 86400.0
    assert configure().stdout.splitlines()[0].endswith(": settings")


@pytest.mark.parametrize(
    "record",
    [
        (1e15, -1e15, "1000000000000000 s after the epoch", "1000000000000000 s before the epoch"),
        (-1e12, 4e11, "1000000000000 s before the epoch", "400000000000 s after the epoch"),
    ],
)
def test_show_of_a_vacuum_record_no_date_holds_shows_seconds_not_an_error(
    s3: S3Endpoint, lake: Lake, admin: Any, in_process: InProcess, record: tuple[Any, ...]
) -> None:
    """A vacuum whose clock was far off (a machine set to the year 33,658, or to before the
    year 1) records a cutoff and horizon no calendar date holds; ``registry show``, the
    command a user runs to see why commits are refused, ended in "lakelock: error: year
    31690708 is out of range" (exit 1) and showed nothing. It shows the lake, and those
    instants as seconds from the epoch; ``--json`` gives them as recorded."""
    cutoff, horizon, shown_cutoff, shown_horizon = record
    history_lake(lake)
    root = orjson.loads(admin.get_object(Bucket=lake.bucket, Key=REGISTRY_KEY)["Body"].read())
    root["vacuum"] = {"cutoff": cutoff, "horizon": horizon}
    admin.put_object(Bucket=lake.bucket, Key=REGISTRY_KEY, Body=orjson.dumps(root))
    text = in_process("registry", "show", lake.url, "--endpoint-url", s3.url)
    assert text.returncode == 0, text.stderr
    assert f"vacuum cutoff {shown_cutoff} (server time)" in text.stdout
    assert f"vacuum horizon {shown_horizon}:" in text.stdout
    as_json = in_process("registry", "show", lake.url, "--json", "--endpoint-url", s3.url)
    assert as_json.returncode == 0, as_json.stderr
    recorded = orjson.loads(as_json.stdout)
    assert (recorded["vacuum_cutoff"], recorded["vacuum_horizon"]) == (cutoff, horizon)


#: An instant no calendar date holds (the year 33,658), and how the commands show it.
_UNDATED = 1e15
_UNDATED_SHOWN = "1000000000000000 s after the epoch"


def plant_undated_commit(lake: Lake, admin: Any) -> None:
    """Make the root's refused commit and ``sales``' newest snapshot carry a time no date
    holds, as a writer whose clock was that far off would have recorded them: a fate of the
    root, and a snapshot written again under the key its new bytes name."""
    root = orjson.loads(admin.get_object(Bucket=lake.bucket, Key=REGISTRY_KEY)["Body"].read())
    entry = root["datasets"]["sales"]
    snapshot = orjson.loads(
        admin.get_object(Bucket=lake.bucket, Key=entry["snapshot"])["Body"].read()
    )
    snapshot["at"] = _UNDATED
    body = orjson.dumps(snapshot)
    folder = entry["snapshot"].rsplit("/", 1)[0]
    entry["snapshot"] = f"{folder}/{hashlib.sha256(body).hexdigest()}-undated.json"
    admin.put_object(Bucket=lake.bucket, Key=entry["snapshot"], Body=body)
    root["intents"]["fates"].append(
        {
            "key": "metastore/intents/9999999999999zzzz-undated.json",
            "state": "rejected",
            "version": root["version"],
            "at": _UNDATED,
            "reason": "refused by a writer whose clock was far off",
        }
    )
    admin.put_object(Bucket=lake.bucket, Key=REGISTRY_KEY, Body=orjson.dumps(root))


@pytest.mark.parametrize("dataset", [[], ["--dataset", "sales"]], ids=["log", "history"])
def test_log_of_a_commit_time_no_date_holds_shows_seconds_not_an_error(
    s3: S3Endpoint, lake: Lake, admin: Any, in_process: InProcess, dataset: list[str]
) -> None:
    """A commit time no calendar date holds (a refusal recorded, or a version written, by a
    writer whose clock was far off) ended ``registry log`` (and ``log --dataset``, a
    dataset's history) in "lakelock: error: year 31690708 is out of range", exit 1, nothing
    shown. The table shows it as seconds from the epoch, as ``registry show`` shows such a
    vacuum cutoff. ``--json`` gave that prose as its ``at``, which a program parsing the
    times as dates trips on: it gives ``at`` null and ``at_seconds``, the number recorded,
    and every dated commit's ``at`` as before, with its ``at_seconds``."""
    history_lake(lake)
    plant_undated_commit(lake, admin)
    text = in_process("registry", "log", lake.url, *dataset, "--endpoint-url", s3.url)
    assert text.returncode == 0, text.stderr
    assert _UNDATED_SHOWN in text.stdout
    as_json = in_process("registry", "log", lake.url, *dataset, "--json", "--endpoint-url", s3.url)
    assert as_json.returncode == 0, as_json.stderr
    entries = orjson.loads(as_json.stdout)
    (undated,) = [e for e in entries if e["at_seconds"] == _UNDATED]
    assert undated["at"] is None
    dated = [e for e in entries if e is not undated]
    assert dated
    for entry in dated:
        when = datetime.fromtimestamp(entry["at_seconds"], UTC)
        assert entry["at"] == when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_show_shows_the_cutoff_and_horizon_vacuum_recorded(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """Once vacuum has deleted something it has recorded its cutoff in the root (FORMAT.md
    rule 10: a commit adding a file written at or before it is refused); ``registry show``
    shows it, as text and in ``--json``, so a user whose commit was refused as too old can
    see why. Before, neither showed it; a lake no vacuum touched shows none."""
    history_lake(lake)
    before = in_process("registry", "show", lake.url, "--json", "--endpoint-url", s3.url)
    assert orjson.loads(before.stdout)["vacuum_cutoff"] is None
    assert (
        "vacuum cutoff"
        not in in_process("registry", "show", lake.url, "--endpoint-url", s3.url).stdout
    )
    lake.configure(vacuum_floor=0)
    done = in_process(
        "vacuum",
        lake.url,
        "--older-than",
        "0s",
        "--no-enforce-retention",
        "--delete",
        "--endpoint-url",
        s3.url,
    )
    assert done.returncode == 0, done.stderr
    cutoff = lake.registry.read().vacuum_cutoff
    assert cutoff is not None
    as_json = in_process("registry", "show", lake.url, "--json", "--endpoint-url", s3.url)
    assert orjson.loads(as_json.stdout)["vacuum_cutoff"] == cutoff
    text = in_process("registry", "show", lake.url, "--endpoint-url", s3.url).stdout
    shown = datetime.fromtimestamp(cutoff, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert f"vacuum cutoff {shown}" in text
    # Where vacuum's window began (FORMAT.md rule 9: a version replaced before it is neither
    # read nor restored, whatever the retention is set to afterwards): a user whose restore
    # of a version inside the retention was refused can see why.
    horizon = lake.registry.read().vacuum_horizon
    assert horizon is not None
    assert orjson.loads(as_json.stdout)["vacuum_horizon"] == horizon
    shown = datetime.fromtimestamp(horizon, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert f"vacuum horizon {shown}" in text


def test_log_reads_the_root_once(s3: S3Endpoint, lake: Lake, in_process: InProcess) -> None:
    """``registry log`` shows commits and refusals from one read of the root (one version
    of it, and one request): what ``Registry.log`` returns, printed."""
    lake.append("sales", pa.table({"id": [1], "day": [1]}), fence=("lease:x", 2))
    with pytest.raises(StaleFenceError):
        lake.append("sales", pa.table({"id": [2], "day": [1]}), fence=("lease:x", 1))
    s3.reset_stats()
    result = in_process("registry", "log", lake.url, "--json", "--endpoint-url", s3.url)
    assert [e["operation"] for e in orjson.loads(result.stdout)] == ["rejected", "append"]
    assert s3.stats().get("GetObject") == 1
