"""Each mistake a user makes gets one clear line, in the user's terms: no internal column
names, no 1,000-character values, no ``'*'`` for a dataset."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakelock import Lake
from lakelock._durations import duration_seconds
from lakelock.cli import main
from lakelock.errors import (
    CommitConflictError,
    CommitError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidNameError,
    PartitionByMismatchError,
    SchemaMismatchError,
    VersionNotFoundError,
)


def rows(year: object = 2024) -> pa.Table:
    return pa.table({"id": [1], "year": [year]})


def one_line(error: BaseException, limit: int = 200) -> str:
    text = str(error)
    assert "\n" not in text
    assert len(text) <= limit, text
    return text


def test_another_partition_by_names_both(lake: Lake) -> None:
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(PartitionByMismatchError) as info:
        lake.append("events", rows(), partition_by=["id"])
    text = one_line(info.value)
    assert "partitioned by ['year']" in text
    assert "partition_by=['id']" in text


def test_delete_where_on_a_missing_column(lake: Lake) -> None:
    """A ``where=`` naming a column that is not a partition column says so, as an invalid
    ``where``, not an invalid name."""
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(InvalidArgumentError) as info:
        lake.delete("events", where=pc.field("nope") < 3)
    text = one_line(info.value)
    assert not isinstance(info.value, InvalidNameError)
    assert text.startswith("invalid where")
    assert "__lakelock" not in text
    assert "'nope' is not one of them" in text
    assert "['year']" in text


def test_a_version_that_does_not_exist_names_the_dataset(lake: Lake) -> None:
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(VersionNotFoundError) as info:
        lake.read("events", version=999)
    text = one_line(info.value)
    assert "'*'" not in text
    assert "dataset 'events'" in text
    assert "version 999" in text
    assert "at version 1" in text
    with pytest.raises(VersionNotFoundError, match="registry version 999 does not exist"):
        lake.registry.read(version=999)


def test_a_long_partition_value_is_quoted_short(lake: Lake) -> None:
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(InvalidNameError) as info:
        lake.append("other", rows("x" * 1200), partition_by=["year"])
    assert "characters)" in one_line(info.value)
    with pytest.raises(DatasetNotFoundError) as missing:
        lake.read("events", partitions=["year=" + "x" * 1200])
    assert "(1,207 characters) of dataset 'events'" in one_line(missing.value)


def test_a_filter_on_a_missing_column_says_the_column_is_missing(lake: Lake) -> None:
    """A filter naming a column the dataset lacks is an InvalidArgumentError that says so,
    with the dataset's columns, not an "invalid name"."""
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(InvalidArgumentError) as info:
        lake.read("events", filter=pc.field("nope") == 1)
    text = one_line(info.value)
    assert not isinstance(info.value, InvalidNameError)
    assert "invalid filter" in text
    assert "has no column 'nope'" in text
    assert "['id', 'year']" in text


def test_partitions_of_an_unpartitioned_dataset_say_it_has_none(lake: Lake) -> None:
    """``partitions=`` on a dataset without partition columns says the dataset is not
    partitioned (it used to call the mapping an invalid name)."""
    lake.append("flat", pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError) as info:
        lake.read("flat", partitions=[{"id": 1}])
    text = one_line(info.value)
    assert not isinstance(info.value, InvalidNameError)
    assert "dataset 'flat' is not partitioned" in text


def test_a_vacuum_age_beyond_the_retention_is_not_called_a_name(lake: Lake) -> None:
    """An ``older_than`` beyond the retention is an invalid argument named as such, through
    the API and the command line (whose help says it must equal the retention)."""
    with pytest.raises(InvalidArgumentError) as info:
        lake.vacuum(older_than=8 * 86400)
    assert not isinstance(info.value, InvalidNameError)
    text = one_line(info.value, limit=300)
    assert text.startswith("invalid older_than '8d'")
    assert "exceeds the lake's retention (7d)" in text
    with pytest.raises(InvalidArgumentError) as parsed:
        duration_seconds("8 days", what="retention")
    assert str(parsed.value).startswith("invalid retention '8 days'")


def test_vacuum_help_says_older_than_must_equal_the_retention(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``vacuum --help`` says ``--older-than`` must equal ``--retention`` (less only with
    ``--no-enforce-retention``), not that the retention is merely its upper bound."""
    assert main(["vacuum", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "it must equal --retention" in text
    assert "at most" not in text


def test_a_schema_mismatch_is_not_a_conflict_to_retry(lake: Lake) -> None:
    """SchemaMismatchError is outside the conflict branch: a loop that retries on
    CommitConflictError does not retry a schema error forever (it is still a CommitError
    and a ValueError)."""
    assert not issubclass(SchemaMismatchError, CommitConflictError)
    assert issubclass(SchemaMismatchError, CommitError)
    assert issubclass(SchemaMismatchError, ValueError)
    lake.append("events", rows(), partition_by=["year"])
    attempts: list[BaseException] = []

    def append_retrying_conflicts() -> None:
        while len(attempts) < 3:
            try:
                lake.append("events", rows("not a year"), partition_by=["year"])
            except CommitConflictError as conflict:
                attempts.append(conflict)
            else:
                return

    with pytest.raises(SchemaMismatchError):
        append_retrying_conflicts()
    assert attempts == []


@pytest.mark.parametrize(
    ("commit_id", "reason"),
    [
        ("", "must not be empty"),
        ("x" * 257, "at most 256 bytes, not 257"),
        ("é" * 129, "at most 256 bytes, not 258"),
        ("run\n7", "printable"),
        (7, "a str, not int"),
    ],
)
def test_a_bad_commit_id_is_refused_before_anything_is_written(
    lake: Lake, commit_id: object, reason: str
) -> None:
    """A commit id is non-empty printable text of at most 256 bytes: ``""`` was stored as an
    id (and the next ``""`` elsewhere was CommitIdReusedError), and a 1 MB id made every
    root 1 MB for the next 100 commits. Refused before any file or registry write."""
    with pytest.raises(InvalidArgumentError, match=reason):
        lake.append("events", rows(), commit_id=commit_id)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=reason):
        lake.registry.commit("events", commit_id=commit_id)  # type: ignore[arg-type]
    assert list(lake.store.list("")) == []
    assert lake.append("events", rows(), commit_id="é" * 128).version == 1


def test_a_bool_is_not_a_version(lake: Lake) -> None:
    """``read(version=True)`` is refused, not read as version 1 (and ``as_of=True`` as
    second 1 of the epoch)."""
    lake.append("events", rows(), partition_by=["year"])
    with pytest.raises(InvalidArgumentError, match="a version is an int, not bool"):
        lake.read("events", version=True)
    with pytest.raises(InvalidArgumentError, match="as_of is server time"):
        lake.read("events", as_of=True)
    with pytest.raises(InvalidArgumentError):
        lake.restore("events", version=True)
