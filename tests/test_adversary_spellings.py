"""Adversarial tests of a commit id's promise (README, "Write": a ``commit_id`` makes a job
safe to re-run) when the id is built from text another system spells otherwise: file names
read on macOS come decomposed (NFD), the same names on Linux composed (NFC)."""

from __future__ import annotations

import unicodedata

import pyarrow as pa
import pytest

import lakelock.dask
from lakelock import Lake
from lakelock.errors import InvalidArgumentError, InvalidNameError
from lakelock.testing import S3Endpoint
from tests._support.files import datafile, registered_unchecked


def _keys(lake: Lake, dataset: str) -> set[str]:
    return {f.key for f in lake.scan(dataset).files()}


def test_a_commit_id_in_another_unicode_spelling_is_refused_not_committed_twice(
    lake: Lake,
) -> None:
    """A job keys its commit on the file it loads, ``café-2026-11.csv``: run on Linux the
    name is composed (NFC), re-run from a Mac it is decomposed (NFD), two strings that look
    the same. The re-run must not land the rows a second time: an id that is not NFC is
    refused (``InvalidArgumentError``, naming its NFC spelling) before any file is written.
    What a user would have lost: the month's rows counted twice, silently, by a re-run the
    commit id was there to make safe."""
    name = "café-2026-11.csv"
    table = pa.table({"id": [1, 2]})
    lake.append("sales", table, commit_id=unicodedata.normalize("NFC", name))
    files = _keys(lake, "sales")
    decomposed = unicodedata.normalize("NFD", name)
    with pytest.raises(InvalidArgumentError, match="NFC") as refused:
        lake.append("sales", table, commit_id=decomposed)
    assert unicodedata.normalize("NFC", name) in str(refused.value)
    assert lake.read("sales").num_rows == 2
    assert _keys(lake, "sales") == files


def test_the_refusal_of_a_decomposed_commit_id_shows_where_the_spellings_differ(
    lake: Lake,
) -> None:
    """The refusal of a decomposed id names both spellings escaped (``'cafe\\u0301…'``
    and ``'caf\\xe9…'``). What a user would have lost: an error quoting its id and the NFC
    spelling, two strings a terminal prints the same, nothing to tell what to change."""
    decomposed = unicodedata.normalize("NFD", "café-2026-11.csv")
    with pytest.raises(InvalidArgumentError, match="NFC") as refused:
        lake.append("sales", pa.table({"id": [1]}), commit_id=decomposed)
    message = str(refused.value)
    assert ascii(decomposed) in message
    assert ascii(unicodedata.normalize("NFC", decomposed)) in message
    assert "sales" not in lake.registry.read().datasets


def test_every_way_to_commit_refuses_a_commit_id_that_is_not_nfc(lake: Lake) -> None:
    """The same refusal whichever way the job commits: ``registry.commit`` of workers'
    files, ``lakelock.dask.append`` (checked before any task runs) and a partition copy.
    Each would otherwise have recorded the decomposed id beside the composed one."""
    dd = pytest.importorskip("dask.dataframe")
    lake.append("sales", pa.table({"id": [1], "day": [1]}), partition_by=["day"])
    decomposed = unicodedata.normalize("NFD", "é-load")
    files = lake.config.open().write(
        "sales", pa.table({"id": [2], "day": [2]}), partition_by=["day"]
    )
    with pytest.raises(InvalidArgumentError, match="NFC"):
        lake.registry.commit("sales", add=files, commit_id=decomposed)
    frame = dd.from_dict({"id": [3], "day": [3]}, npartitions=1)
    with pytest.raises(InvalidArgumentError, match="NFC"):
        lakelock.dask.append(lake, "sales", frame, partition_by=["day"], commit_id=decomposed)
    with pytest.raises(InvalidArgumentError, match="NFC"):
        lake.copy_partition("sales", {"day": 1}, to_dataset="archive", commit_id=decomposed)
    assert lake.read("sales").num_rows == 1
    assert [h.operation for h in lake.history("sales")] == ["append"]


def test_a_partition_value_in_another_unicode_spelling_is_refused_not_a_second_partition(
    lake: Lake,
) -> None:
    """A job partitions by city, read from files named on Linux (``Montréal`` composed,
    NFC) and on a Mac (decomposed, NFD): two strings that look the same and were two
    partitions, so ``overwrite`` of the city's rows replaced one spelling and left the
    other's, and a ``filter`` on the city read half of them. Rows whose partition value is
    not NFC are refused (InvalidNameError naming the column and both spellings, escaped),
    nothing written, by append, overwrite, write, and a rename or copy to such a partition;
    a value in NFC, and a non-partition column in any spelling, are written as given."""
    composed = unicodedata.normalize("NFC", "Montréal")
    decomposed = unicodedata.normalize("NFD", "Montréal")
    lake.append("sales", pa.table({"city": [composed], "note": [decomposed]}), partition_by="city")
    before = lake.registry.read().version
    rows = pa.table({"city": [decomposed], "note": ["x"]})
    attempts = (
        lambda: lake.append("sales", rows, partition_by="city"),
        lambda: lake.overwrite("sales", rows, partition_by="city"),
        lambda: lake.write("sales", rows, partition_by="city"),
        lambda: lake.rename_partition(
            "sales", {"city": composed}, to_partition={"city": decomposed}
        ),
        lambda: lake.copy_partition("sales", {"city": composed}, to_partition={"city": decomposed}),
    )
    for attempt in attempts:
        with pytest.raises(InvalidNameError, match="NFC") as refused:
            attempt()
        assert "column 'city'" in str(refused.value)
        assert ascii(decomposed) in str(refused.value)
    assert lake.registry.read().version == before
    assert [p for p in lake.store.list("datasets/sales/")] == [
        p for p in lake.store.list(f"datasets/sales/city={composed}/")
    ]
    read = lake.read("sales")
    assert read["city"].to_pylist() == [composed]
    assert read["note"].to_pylist() == [decomposed]


def test_a_file_registered_into_a_partition_value_not_nfc_is_refused_unless_it_is_there(
    s3: S3Endpoint, lake: Lake
) -> None:
    """``registry.commit`` of files another tool wrote (a Spark job's, named on a Mac) into
    ``city=Montréal`` decomposed added that spelling as a second partition beside the
    composed one, which ``append`` refuses to write: an overwrite of the city then left
    half its rows. It is refused the same way (InvalidNameError naming the column and both
    spellings), before anything is written. A partition already spelt so (registered
    before lakelock refused such values) still takes files: its rows stay reachable."""
    composed = unicodedata.normalize("NFC", "Montréal")
    decomposed = unicodedata.normalize("NFD", "Montréal")
    lake.append("sales", pa.table({"city": [composed], "id": [1]}), partition_by="city")
    before = lake.registry.read().version
    s3.reset_stats()
    with pytest.raises(InvalidNameError, match="NFC") as refused:
        lake.registry.commit("sales", add=[datafile("sales", f"city={decomposed}", "b")])
    assert "column 'city'" in str(refused.value)
    assert ascii(decomposed) in str(refused.value)
    assert not [a for a in s3.areas() if a.startswith(("PutObject", "DeleteObject"))]
    assert lake.registry.read().version == before
    registered_unchecked(
        lake.registry, datafile("sales", f"city={decomposed}", "old"), commit_id="old-tool"
    )
    lake.registry.commit("sales", add=[datafile("sales", f"city={decomposed}", "c")])
    partitions = lake.registry.read().datasets["sales"].partitions
    assert sorted(partitions) == sorted([f"city={composed}", f"city={decomposed}"])
    assert partitions[f"city={decomposed}"].file_count == 2
