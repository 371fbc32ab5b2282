"""A data file: what a write produces and what the registry records about it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakelock._stats import FileStats, stats_from_json

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DataFile", "Partition"]

#: A partition as ``((column, value), ...)`` in ``partition_by`` order; the values are the
#: formatted strings that appear in the key (``None`` for a null value).
Partition = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class DataFile:
    """One write-once parquet file of a dataset.

    ``key`` is relative to the lake's prefix (``datasets/<dataset>/<col>=<val>/.../<name>``);
    ``partition_path`` is the ``<col>=<val>/...`` part (empty for an unpartitioned dataset), the
    name the registry files it under. ``checksum`` is ``"sha256:<hex>"`` of the bytes; ``etag``
    the object's ETag when written; ``write_id`` the id in the object's metadata that proves
    which writer created it. ``stats`` are the file's column statistics
    (:mod:`lakelock._stats`): lakelock records them for the files it writes; a file
    registered from elsewhere has those its caller gives, or none. ``written_at``: when it
    was written by the server's clock, or a little before (seconds since the epoch: the
    ``Date`` of its PUT's answer less the PUT's duration), for the commit's check against the lake's
    vacuum floor (FORMAT.md, "Retention and vacuum"); not recorded in manifests, and
    ``None`` for a file whose writer did not say (it is then not checked). ``schema``: the
    schema of the rows written, for a commit's check that the dataset's types hold them
    (:mod:`lakelock._readable`); in memory only, like ``written_at``. ``stores_partition``:
    whether the file stores its partition columns (``False`` for the files lakelock's
    ``write`` returns; ``None``: not known, so a commit reads its footer to judge them:
    :mod:`lakelock._stored_partitions`); in memory only.
    """

    dataset: str
    key: str
    partition_path: str
    size: int
    record_count: int
    checksum: str
    etag: str
    write_id: str
    stats: FileStats | None = None
    written_at: float | None = field(default=None, compare=False)
    schema: pa.Schema | None = field(default=None, compare=False, repr=False)
    stores_partition: bool | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "key": self.key,
            "partition": self.partition_path,
            "size": self.size,
            "records": self.record_count,
            "checksum": self.checksum,
            "etag": self.etag,
            "write_id": self.write_id,
        }
        if self.stats is not None:  # absent, not null: older readers see the same entry
            data["stats"] = self.stats.to_json()
        return data

    @classmethod
    def from_json(cls, dataset: str, data: Mapping[str, Any]) -> DataFile:
        return cls(
            dataset=dataset,
            key=str(data["key"]),
            partition_path=str(data["partition"]),
            size=int(data["size"]),
            record_count=int(data["records"]),
            checksum=str(data["checksum"]),
            etag=str(data["etag"]),
            write_id=str(data["write_id"]),
            stats=stats_from_json(data["stats"]) if data.get("stats") is not None else None,
        )
