"""``Lake``: one bucket (and prefix) as a data lake — the front door to everything else.

A Lake holds one boto3 client, one :class:`~lakelock._s3.ObjectStore` through which every
request goes, and one :class:`~lakelock._registry.Registry` (so concurrent commits of one
process share group commit). It is safe to use from many threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypedDict, Unpack
from urllib.parse import urlsplit

import pyarrow as pa

from lakelock._client import s3_client
from lakelock._datafile import DataFile
from lakelock._datasets import read_files, table_schema, write_table
from lakelock._fence import Fence
from lakelock._lease import Lease, LeaseOptions
from lakelock._names import partition_path, validate_dataset_name, validate_partition_path
from lakelock._partitions import PartitionMove, lock_paths, move_partition
from lakelock._pathlock import DistributedPathLock, LockOptions, PathLockHandle
from lakelock._pathlock._core import PathLike
from lakelock._registry import CommitResult, Registry, RegistrySnapshot
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock._vacuum import VacuumReport, vacuum
from lakelock.errors import DatasetNotFoundError, InvalidNameError

__all__ = ["Lake"]

Progress = Callable[[int, int], None]


class MoveOptions(TypedDict, total=False):
    """Options of :meth:`Lake.copy_partition` and :meth:`Lake.rename_partition`."""

    #: Where to: another dataset (default: the same) and/or partition (default: the same).
    to_dataset: str | None
    to_partition: str | None
    #: Makes the move idempotent: a re-run with the same id commits nothing twice.
    commit_id: str | None
    #: The path lock's TTL (default 30 s; renewed by heartbeat while the copy runs, so a
    #: crashed mover blocks others for about that long) and how long to wait for it
    #: (default 60 s).
    ttl: float
    timeout: float | None
    progress: Progress | None


class Lake:
    """A data lake in ``bucket`` under ``prefix``.

    ``s3`` is a boto3 S3 client (default: boto3's default credentials and endpoint).
    ``retry`` bounds every retry loop (commits, conflicts, throttling); ``group_commit``
    merges concurrent commits of this Lake into one compare-and-swap; ``commit_window`` is
    how many recent commit ids the registry keeps (the idempotency window; every writer of a
    lake should use the same).
    """

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        s3: Any = None,
        retry: RetryPolicy | None = None,
        group_commit: bool = True,
        multipart_threshold: int = 64 * 1024 * 1024,
        commit_window: int = 1000,
    ) -> None:
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        if prefix.startswith("/") or "//" in prefix:
            raise InvalidNameError(prefix, "a lake prefix is relative and has no empty segment")
        self.bucket = bucket
        self.prefix = prefix
        self.client = s3 if s3 is not None else s3_client()
        self.retry = retry or RetryPolicy()
        self.store = ObjectStore(
            self.client,
            bucket,
            prefix=prefix,
            retry=self.retry,
            multipart_threshold=multipart_threshold,
        )
        self.registry = Registry(
            self.store, retry=self.retry, group_commit=group_commit, commit_window=commit_window
        )
        self.locks = DistributedPathLock(self.store)

    @classmethod
    def from_url(cls, url: str, **client_kwargs: Any) -> Lake:
        """``Lake.from_url("s3://bucket/prefix", endpoint_url=..., region_name=...)``."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise InvalidNameError(url, "expected s3://bucket[/prefix]")
        lake_options = {
            k: client_kwargs.pop(k) for k in ("retry", "group_commit") if k in client_kwargs
        }
        return cls(
            parts.netloc,
            prefix=parts.path.lstrip("/"),
            s3=s3_client(**client_kwargs),
            **lake_options,
        )

    def __repr__(self) -> str:
        return f"Lake('s3://{self.bucket}/{self.prefix}')"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    # -- datasets -----------------------------------------------------------------------------

    def write(
        self,
        dataset: str,
        table: pa.Table,
        *,
        partition_by: Sequence[str] = (),
        file_name: str | None = None,
        progress: Progress | None = None,
    ) -> list[DataFile]:
        """Write ``table`` as write-once parquet files (one per partition), not yet visible:
        commit them with ``registry.commit`` (or use :meth:`append`)."""
        return write_table(
            self.store,
            dataset,
            table,
            partition_by=partition_by,
            file_name=file_name,
            progress=progress,
        )

    def append(
        self,
        dataset: str,
        table: pa.Table,
        *,
        partition_by: Sequence[str] = (),
        commit_id: str | None = None,
        fence: Fence | tuple[str, int] | None = None,
        file_name: str | None = None,
        progress: Progress | None = None,
    ) -> CommitResult:
        """Write ``table`` and commit its files in one registry update.

        With a ``commit_id`` that is already recorded, nothing is written and the earlier
        commit is reported (``already_committed``): a re-run pipeline appends once.
        """
        dataset = validate_dataset_name(dataset)
        columns = (partition_by,) if isinstance(partition_by, str) else tuple(partition_by)
        schema = table_schema(table, columns)
        if commit_id is not None:
            record = next((c for c in self.registry.read().commits if c.id == commit_id), None)
            if record is not None:
                return CommitResult(record.version, commit_id, already_committed=True)
        files = self.write(
            dataset, table, partition_by=columns, file_name=file_name, progress=progress
        )
        return self.registry.commit(
            dataset,
            add=files,
            schema=schema,
            partition_by=columns,
            commit_id=commit_id,
            fence=fence,
        )

    def read(
        self,
        dataset: str,
        *,
        partitions: Iterable[str | Mapping[str, object]] | None = None,
        snapshot: RegistrySnapshot | None = None,
    ) -> pa.Table:
        """The committed rows of ``dataset`` in one registry snapshot (default: the current
        one), optionally only of some partitions, given as paths (``"year=2024/month=01"``)
        or as ``{"year": 2024, "month": 1}`` mappings."""
        snap = snapshot or self.registry.read()
        dataset = validate_dataset_name(dataset)
        state = snap.datasets.get(dataset)
        if state is None:
            raise DatasetNotFoundError(dataset)
        wanted = None
        if partitions is not None:
            wanted = [self._partition(state.partition_by, p) for p in partitions]
            for path in wanted:
                if path not in state.partitions:
                    raise DatasetNotFoundError(dataset, partition=path)
        files = self.registry.files(dataset, snapshot=snap, partitions=wanted)
        return read_files(self.store, files, schema=state.schema, partition_by=state.partition_by)

    @staticmethod
    def _partition(columns: Sequence[str], partition: str | Mapping[str, object]) -> str:
        if isinstance(partition, str):
            return validate_partition_path(partition)
        if list(partition) != list(columns):
            raise InvalidNameError(
                partition, f"a partition names the columns {list(columns)}, in that order"
            )
        return partition_path(partition.items())

    # -- partitions, locks, leases ------------------------------------------------------------

    def copy_partition(
        self, dataset: str, partition: str, **options: Unpack[MoveOptions]
    ) -> CommitResult:
        """Copy a partition (server-side, create-only) to another partition and/or dataset,
        under the path lock (read the source, write the destination), in one commit.
        ``options``: :class:`MoveOptions`."""
        return self._move(dataset, partition, rename=False, **options)

    def rename_partition(
        self, dataset: str, partition: str, **options: Unpack[MoveOptions]
    ) -> CommitResult:
        """Move a partition under the path lock (write both places): copy its files, then
        add the copies and remove the originals in one commit. Readers see it at the old
        place or the new one, never half. ``options``: :class:`MoveOptions`."""
        return self._move(dataset, partition, rename=True, **options)

    def _move(
        self,
        dataset: str,
        partition: str,
        *,
        rename: bool,
        to_dataset: str | None = None,
        to_partition: str | None = None,
        commit_id: str | None = None,
        ttl: float = 30.0,
        timeout: float | None = 60.0,
        progress: Progress | None = None,
    ) -> CommitResult:
        move = PartitionMove(
            dataset, partition, to_dataset=to_dataset, to_partition=to_partition, rename=rename
        )
        read, write = lock_paths(move)
        held = self.lock(read=read, write=write, ttl=ttl, timeout=timeout).acquire()
        try:
            fences = {dataset: held.fence_for(dataset) for dataset in held.datasets}
            return move_partition(
                self.registry,
                self.store,
                move,
                fences=fences,
                commit_id=commit_id,
                progress=progress,
            )
        finally:
            # Not ``with``: a lock lost *after* the fenced commit landed must not turn the
            # caller's success into an error (the registry accepted the fence, so no
            # conflicting grant had committed). A loss before it fails the commit itself.
            held.release()

    def lock(
        self,
        *,
        read: Iterable[PathLike] = (),
        write: Iterable[PathLike] = (),
        **options: Unpack[LockOptions],
    ) -> PathLockHandle:
        """The hierarchical path lock across processes and machines, as a context manager:
        ``with lake.lock(read=["/sales/year=2024"], write=["/sales/year=2025"]) as held:``.
        Paths are ``/<dataset>/<partition path>``; ``held.fence`` goes with commits.
        ``options`` (:class:`~lakelock._pathlock.LockOptions`: ``ttl``, ``timeout``,
        ``poll_interval``, ``margin``, ``heartbeat``, ``on_lost``) not given are those of
        :attr:`locks`, a :class:`~lakelock._pathlock.DistributedPathLock` with its defaults
        (``ttl`` 30 s, no ``timeout``, ``heartbeat`` on, ``margin`` 1 s)."""
        return self.locks.lock(read=read, write=write, **options)

    def lease(self, name: str, **options: Unpack[LeaseOptions]) -> Lease:
        """A named lease with a fencing token, for leader election: ``with lake.lease("x"):``
        or ``try_acquire()``; commit with ``fence=lease.fence``. ``options``: those of
        :class:`~lakelock._lease.Lease` (:class:`~lakelock._lease.LeaseOptions`)."""
        return Lease(self.store, name, **options)

    # -- housekeeping -------------------------------------------------------------------------

    def vacuum(
        self,
        *,
        older_than: float | timedelta,
        dry_run: bool = True,
        progress: Progress | None = None,
    ) -> VacuumReport:
        """Find objects no snapshot younger than ``older_than`` (seconds or a timedelta) can
        read, and delete them (conditionally) unless ``dry_run``. See :mod:`lakelock._vacuum`."""
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        return vacuum(self.registry, older_than=float(seconds), dry_run=dry_run, progress=progress)
