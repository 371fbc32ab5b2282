"""Data files as the dataset writer records them, for tests of the registry that need no
object behind them."""

from __future__ import annotations

from lakelock._datafile import DataFile
from lakelock._layout import data_file_key

__all__ = ["datafile"]


def datafile(dataset: str, partition: str, name: str, records: int = 10) -> DataFile:
    """A DataFile as the dataset writer would record it (no object needed here)."""
    key = data_file_key(dataset, partition, name)
    return DataFile(dataset, key, partition, 100 * records, records, "sha256:00", '"e"', "w")
