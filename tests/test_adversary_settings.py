"""Adversarial tests of the lake's settings given in the wrong type (README, "Time travel":
``lake.configure(...)``, "the lake's settings: every writer's"; FORMAT.md, "The lake's
settings": a value that does not fit is refused, nothing written). A window read from a
flag or a config file arrives as a bool, a float or text; the root stores the settings and
every process parses it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import InvalidArgumentError
from tests._support import FAST_RETRY


@pytest.mark.parametrize("window", [True, 50.0, 1.5, "50"])
def test_a_commit_window_that_is_no_whole_number_is_refused_and_the_lake_stays_readable(
    lake: Lake, client: Any, bucket: str, window: object
) -> None:
    """``lake.configure(commit_window=...)`` given a bool, a float or text is refused
    (``InvalidArgumentError``) and a new process still reads and writes the lake. What a
    user would lose: the root stored the value as given (``true``, ``50.0``) and from then on
    every process failed on the whole lake with ``RegistryCorruptError``: nothing read,
    nothing written, until someone edited the root by hand."""
    lake.append("sales", pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError):
        lake.configure(commit_window=window)  # type: ignore[arg-type]
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    other.append("sales", pa.table({"id": [2]}))
    assert other.read("sales").sort_by("id").to_pydict() == {"id": [1, 2]}
    settings = other.registry.read().settings
    assert settings is not None
    assert settings.commit_window == 100


def test_a_new_lakes_first_writer_given_a_window_that_is_no_whole_number_writes_nothing(
    client: Any, bucket: str
) -> None:
    """The first writer of a new lake stores its settings with its first commit: one opened
    with ``commit_window=True`` is refused before it writes anything. What a user would lose:
    the lake's very first commit stored the bool, and no process could open the lake again."""
    with pytest.raises(InvalidArgumentError):
        Lake(bucket, s3=client, retry=FAST_RETRY, commit_window=True).append(
            "sales", pa.table({"id": [1]})
        )
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    other = Lake(bucket, s3=client, retry=FAST_RETRY)
    other.append("sales", pa.table({"id": [2]}))
    assert other.read("sales").to_pydict() == {"id": [2]}


@pytest.mark.parametrize(
    ("setting", "value"), [("retention", 1e300), ("retention", "36501d"), ("vacuum_floor", 4e9)]
)
def test_a_setting_beyond_a_century_is_refused_and_nothing_is_written(
    lake: Lake, client: Any, bucket: str, setting: str, value: object
) -> None:
    """``lake.configure(retention=1e300)`` (a unit mistaken, "forever" spelt as a huge
    number) is refused as every other duration beyond a century is (``InvalidArgumentError``
    naming the setting), and so is a writer opened with it; the lake keeps its settings.
    Before, the root stored it: no version of the lake would ever be old enough for vacuum,
    and an instant that far off is no date anything shows."""
    lake.append("sales", pa.table({"id": [1]}))
    version = lake.registry.read().version
    with pytest.raises(InvalidArgumentError, match=f"{setting} is at most"):
        lake.configure(**{setting: value})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=f"{setting} is at most"):
        Lake(bucket, s3=client, retry=FAST_RETRY, **{setting: value})  # type: ignore[arg-type]
    assert lake.registry.read().version == version
    assert Lake(bucket, s3=client).registry.settings().retention == 7 * 86400.0


@pytest.mark.parametrize("create", ["false", "no", "0", 1, None])
def test_a_create_flag_that_is_no_bool_is_refused_and_no_lake_is_started(
    client: Any, bucket: str, create: object
) -> None:
    """``lake.configure(retention="30d", create=...)`` with the flag read from a config file
    or an environment variable (``"false"``, ``"no"``, ``"0"``) at a mistyped prefix: text
    is truthy, so the call started a new lake at the typo with those settings (exit 0 for
    the job) while the real lake kept its retention, the mistake ``create`` exists to catch.
    A flag that is no bool is refused (``InvalidArgumentError``), nothing written there."""
    typo = Lake(bucket, prefix="warehous", s3=client, retry=FAST_RETRY)
    with pytest.raises(InvalidArgumentError):
        typo.configure(retention="30d", create=create)  # type: ignore[arg-type]
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="warehous/")
