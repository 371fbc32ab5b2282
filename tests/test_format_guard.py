"""The registry's format guard (docs/FORMAT.md rule 17), against the embedded endpoint.

A lakelock that reads only root formats 1 and 2 applies the intents of a commit spanning
datasets one at a time and a restore's as a commit that changes nothing. This lakelock writes
format 3, which those refuse, and writes a group's or a restore's intents only into a lake
whose root it read at format 3. The older lakelock here is the real one: the last release
before group and restore intents (``OLDER``), taken from the repository's history and run
in a process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry import REGISTRY_KEY, Registry
from lakelock._registry._changes import Change
from lakelock._registry._document import FORMAT_VERSION, parse_registry
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.files import datafile

ROOT_DIR = Path(__file__).resolve().parent.parent

#: The last lakelock without group and restore intents: it reads root formats 1 and 2.
OLDER = "87f9fba6013090c20985311e7bb6bfd21023716c"

#: Run in the older lakelock's process: ``argv``: endpoint URL, bucket, then appends as
#: ``dataset=id``, one after the other. Prints what each did: the version, or the error.
OLDER_APPEND = """
import sys
import boto3, orjson, pyarrow as pa
import lakelock
from lakelock import Lake
from lakelock._retry import RetryPolicy
from lakelock.testing import client_kwargs

url, bucket, *appends = sys.argv[1:]
client = boto3.client("s3", **client_kwargs(url))
retry = RetryPolicy(max_attempts=20, initial_backoff=0.001, max_backoff=0.01)
lake = Lake(bucket, s3=client, retry=retry)
for append in appends:
    dataset, value = append.split("=")
    try:
        result = lake.append(dataset, pa.table({"id": [int(value)]}))
        outcome = {"version": result.version}
    except Exception as error:
        outcome = {"error": type(error).__name__, "message": str(error)}
    print(orjson.dumps({**outcome, "module": lakelock.__file__}).decode())
"""


#: The last lakelock whose commit records name no intent: it reads and writes format 3.
UNNAMED = "d8f06b98824c31078f1cd9bee27874e2aa28e673"


def unpacked(factory: pytest.TempPathFactory, commit: str) -> Path:
    """The package of the lakelock at ``commit``, unpacked from the repository's history."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT_DIR), "archive", "--format=tar", commit, "lakelock"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"needs the repository's history (commit {commit[:7]})")
    home = factory.mktemp(f"lakelock-{commit[:7]}")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(home, filter="data")
    return home


@pytest.fixture(scope="module")
def older(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The older lakelock's package (``OLDER``)."""
    return unpacked(tmp_path_factory, OLDER)


@pytest.fixture(scope="module")
def unnamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package of the last lakelock whose commit records name no intent (``UNNAMED``)."""
    return unpacked(tmp_path_factory, UNNAMED)


def older_appends(older: Path, s3: S3Endpoint, bucket: str, *appends: str) -> list[Any]:
    """Appends (``dataset=id``) by the older lakelock, one after the other, in a process of
    its own: what it reported for each."""
    done = subprocess.run(
        [sys.executable, "-c", OLDER_APPEND, s3.url, bucket, *appends],
        cwd=older,  # "-c" puts the working directory first on the path
        env={**os.environ, "PYTHONPATH": str(older)},
        capture_output=True,
        check=True,
        timeout=120,
    )
    outcomes = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert len(outcomes) == len(appends), done
    for outcome in outcomes:
        assert outcome["module"].startswith(str(older)), outcome  # the older code ran
    return outcomes


def older_append(older: Path, s3: S3Endpoint, bucket: str, dataset: str, value: int) -> Any:
    """One append by the older lakelock: what it reported."""
    return older_appends(older, s3, bucket, f"{dataset}={value}")[0]


def format2_lake(older: Path, s3: S3Endpoint, bucket: str, *appends: str) -> None:
    """A format-2 lake, as the older lakelock makes it."""
    assert all("version" in o for o in older_appends(older, s3, bucket, *appends))


def root(store: ObjectStore) -> Any:
    return parse_registry(store.get(REGISTRY_KEY).body)


def ids(lake: Lake, dataset: str) -> list[int]:
    return sorted(lake.read(dataset).column("id").to_pylist())


def spanning(commit_id: str) -> list[Change]:
    """One commit adding a file to each of ``alpha`` and ``beta``."""
    return [
        Change("alpha", commit_id, add=(datafile("alpha", "", f"{commit_id}-a"),)),
        Change("beta", commit_id, add=(datafile("beta", "", f"{commit_id}-b"),)),
    ]


def names(store: ObjectStore, dataset: str) -> list[str]:
    return sorted(f.name for f in Registry(store, retry=FAST_RETRY).files(dataset))


def test_a_lakelock_that_reads_formats_1_and_2_refuses_a_lake_this_one_wrote(
    older: Path, s3: S3Endpoint, bucket: str, lake: Lake, store: ObjectStore
) -> None:
    """A lake this lakelock committed to is format 3; the older lakelock refuses to read or
    write it (its parse knows formats 1 and 2 only) and leaves the root as it was. Before,
    this lakelock wrote format 2 and the older one appended beside it, folding whatever
    intents it found, a commit spanning datasets one intent at a time."""
    lake.append("alpha", pa.table({"id": [1]}))
    before = store.get(REGISTRY_KEY)
    assert parse_registry(before.body).format_version == FORMAT_VERSION == 3
    outcome = older_append(older, s3, bucket, "alpha", 2)
    assert outcome.get("error") == "RegistryCorruptError", outcome
    assert "format_version 3" in outcome["message"]
    assert store.get(REGISTRY_KEY).etag == before.etag
    assert ids(lake, "alpha") == [1]


def test_an_older_lakelock_never_folds_a_commit_spanning_datasets(
    older: Path, s3: S3Endpoint, bucket: str, store: ObjectStore
) -> None:
    """A format-2 lake the older lakelock made; this lakelock's commit spanning ``alpha``
    and ``beta`` sends its intents and waits, under contention, while the older lakelock
    appends to ``alpha``. Before, the older one folded the group's intents as two commits of
    one id: it applied beta's and rejected alpha's (the id "recorded for beta"), and our
    caller was told the commit landed, with half of it missing.
    Now the root is upgraded before the group's intents exist: the older lakelock refuses the
    lake, and the group is applied whole, once."""
    format2_lake(older, s3, bucket, "alpha=1", "beta=2")
    assert root(store).format_version == 2
    older_outcomes: list[Any] = []

    def meanwhile(_: float) -> None:  # our wait: the older lakelock commits now
        if not older_outcomes:
            older_outcomes.append(older_append(older, s3, bucket, "alpha", 3))

    ours = Registry(store, group_commit=False, retry=RetryPolicy(max_attempts=50, sleep=meanwhile))
    ours.read()
    ours.internals.hints.contended_until = float("inf")  # under contention, a folder at work
    ours.internals.hints.others_swapped_at = float("inf")
    result = ours.commit_changes(spanning("both"))
    if not older_outcomes:  # we never waited: the older lakelock commits after us
        meanwhile(0.0)
    # Before: beta's intent applied, alpha's rejected (its id "recorded for beta"), and our
    # caller told the commit landed.
    assert "both-a" in names(store, "alpha")
    assert "both-b" in names(store, "beta")
    assert older_outcomes[0].get("error") == "RegistryCorruptError", older_outcomes
    assert root(store).format_version == FORMAT_VERSION
    history = Registry(store, retry=FAST_RETRY).read().commits
    assert [c.version for c in history if c.id == "both"] == [result.version]


def test_a_format_2_lake_reads_as_it_is_and_its_first_commit_upgrades_it(
    older: Path, s3: S3Endpoint, bucket: str, lake: Lake, store: ObjectStore
) -> None:
    """A format-2 lake made by the older lakelock reads the same with this one (rows,
    version, history); its first commit of one dataset upgrades it in that commit's own swap
    (no extra version); from then on the older lakelock refuses it."""
    format2_lake(older, s3, bucket, "alpha=1", "alpha=2")
    made = lake.registry.read()
    assert (made.format_version, made.version) == (2, 2)
    assert ids(lake, "alpha") == [1, 2]
    assert [h.version for h in lake.registry.history("alpha")] == [2, 1]
    result = lake.append("alpha", pa.table({"id": [3]}))
    assert result.version == 3
    assert root(store).format_version == FORMAT_VERSION
    assert ids(lake, "alpha") == [1, 2, 3]
    assert older_append(older, s3, bucket, "alpha", 4).get("error") == "RegistryCorruptError"


def test_a_group_on_a_format_2_lake_upgrades_it_first_by_a_swap_of_its_own(
    older: Path, s3: S3Endpoint, bucket: str, store: ObjectStore
) -> None:
    """The first commit of this lakelock on a format-2 lake spans datasets: the root is
    upgraded by a swap that changes nothing else (one version, once), then the group's
    intents are written and applied whole in the next."""
    format2_lake(older, s3, bucket, "alpha=1", "beta=2")
    assert (root(store).format_version, root(store).version) == (2, 2)
    result = Registry(store, retry=FAST_RETRY).commit_changes(spanning("both"))
    assert result.version == 4  # 3: the upgrade
    upgraded = Registry(store, retry=FAST_RETRY).read(version=3)
    assert upgraded.commits == Registry(store, retry=FAST_RETRY).read(version=2).commits
    assert root(store).format_version == FORMAT_VERSION
    again = Registry(store, retry=FAST_RETRY).commit_changes(spanning("again"))
    assert again.version == 5  # upgraded already: no other swap


def test_migrate_upgrades_a_format_2_lake(
    older: Path, s3: S3Endpoint, bucket: str, store: ObjectStore
) -> None:
    """``Registry.migrate`` (``lakelock registry migrate``) upgrades a format-2 root to
    format 3 by one swap, keeping no backup (the shape is the same); a second does nothing."""
    format2_lake(older, s3, bucket, "alpha=1")
    result = Registry(store, retry=FAST_RETRY).migrate()
    assert result is not None
    assert (result.version, result.backup, result.upgraded_from) == (2, None, 2)
    assert root(store).format_version == FORMAT_VERSION
    assert Registry(store, retry=FAST_RETRY).migrate() is None


def test_a_new_lakes_first_commit_spanning_datasets_creates_the_root_first(
    store: ObjectStore,
) -> None:
    """A lake with no root yet: an older lakelock creating it would fold intents it lists,
    so a commit spanning datasets creates the root (format 3, version 1) before its intents
    exist, and is version 2. A one-dataset commit creates it itself (version 1)."""
    result = Registry(store, retry=FAST_RETRY).commit_changes(spanning("first"))
    assert result.version == 2
    assert (root(store).format_version, Registry(store).read(version=1).datasets) == (3, {})


def test_a_lakelock_whose_records_name_no_intent_commits_beside_this_one(
    unnamed: Path, s3: S3Endpoint, bucket: str, lake: Lake, store: ObjectStore
) -> None:
    """Commit records name the intent that made them (FORMAT.md, "Commit ids"), a field the
    last lakelock before it does not know: it reads such a root and swaps it, keeping the
    window's records without the field; this lakelock reads those as records from before it
    (rule 2's guess), and a re-run of an id committed before still hears
    ``already_committed``, at the version that committed it."""
    first = lake.append("alpha", pa.table({"id": [1]}), commit_id="job-1")
    (named,) = [c for c in root(store).commits if c.id == "job-1"]
    assert (named.intent or "").startswith("metastore/intents/")
    assert "version" in older_append(unnamed, s3, bucket, "alpha", 2)
    (kept,) = [c for c in root(store).commits if c.id == "job-1"]
    assert (kept.version, kept.intent) == (first.version, None)
    rerun = lake.append("alpha", pa.table({"id": [1]}), commit_id="job-1")
    assert (rerun.version, rerun.already_committed) == (first.version, True)
    assert ids(lake, "alpha") == [1, 2]
