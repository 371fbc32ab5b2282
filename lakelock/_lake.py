"""``Lake``: one bucket (and prefix) as a data lake — the front door to everything else.

A Lake holds one boto3 client, one :class:`~lakelock._s3.ObjectStore` through which every
request goes, and one :class:`~lakelock._registry.Registry` (so concurrent commits of one
process share group commit). It is safe to use from many threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import boto3
import pyarrow as pa
import pyarrow.compute as pc
from botocore.config import Config

from lakelock._connection import Connection
from lakelock._datafile import DataFile
from lakelock._datasets import table_schema, write_table
from lakelock._dlock import DistributedPathLock, PathLockHandle
from lakelock._lease import Lease
from lakelock._names import validate_dataset_name
from lakelock._partitions import PartitionMove, lock_paths, move_partition
from lakelock._pathlock._core import PathLike
from lakelock._registry import CommitResult, Fence, Registry, RegistrySnapshot
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock._scan import Scan, plan_scan
from lakelock._vacuum import VacuumReport, vacuum
from lakelock.errors import InvalidNameError

__all__ = ["Lake", "LakeConfig"]

Progress = Callable[[int, int], None]


def default_client(**client_kwargs: Any) -> Any:
    """A boto3 S3 client with the standard retry mode (5xx and resets retried by the SDK;
    409 and 412 never are: lakelock decides those)."""
    config = Config(retries={"mode": "standard", "total_max_attempts": 5}, max_pool_connections=64)
    if "config" in client_kwargs:
        config = config.merge(client_kwargs.pop("config"))
    return boto3.client("s3", config=config, **client_kwargs)


@dataclass(frozen=True)
class LakeConfig:
    """What it takes to open a :class:`Lake` elsewhere — on a Dask, Spark or Ray worker —
    as plain picklable data (the credentials are the client's current ones; see
    :mod:`lakelock._connection`). ``Lake.config`` makes one; :meth:`open` is the Lake."""

    bucket: str
    prefix: str
    connection: Connection
    multipart_threshold: int = 64 * 1024 * 1024
    commit_window: int = 1000

    def open(self) -> Lake:
        """A new Lake (its own client) on the same bucket, prefix, endpoint and identity."""
        return Lake(
            self.bucket,
            prefix=self.prefix,
            s3=self.connection.client(),
            multipart_threshold=self.multipart_threshold,
            commit_window=self.commit_window,
        )


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
        self.client = s3 if s3 is not None else default_client()
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
            s3=default_client(**client_kwargs),
            **lake_options,
        )

    def __repr__(self) -> str:
        return f"Lake('s3://{self.bucket}/{self.prefix}')"

    @property
    def config(self) -> LakeConfig:
        """This Lake as picklable data (bucket, prefix, endpoint, region, credentials), to
        open the same lake on another process or machine: ``config.open()``."""
        return LakeConfig(
            self.bucket,
            self.prefix,
            Connection.of(self.client),
            multipart_threshold=self.store.multipart_threshold,
            commit_window=self.registry.commit_window,
        )

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

    def scan(
        self,
        dataset: str,
        *,
        partitions: Iterable[str | Mapping[str, object]] | None = None,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        snapshot: RegistrySnapshot | None = None,
    ) -> Scan:
        """A read of ``dataset`` in one registry snapshot (default: the current one), for
        pyarrow, DuckDB, Polars or pandas: ``lake.scan("sales").to_duckdb("sales")``.
        ``partitions`` as for :meth:`read`; ``columns`` keeps those columns, in that order;
        ``filter`` is a ``pyarrow.compute.Expression`` (``pc.field("day") >= 15``); both
        prune partitions before any data is read. See :mod:`lakelock._scan`."""
        snapshot = snapshot or self.registry.read()
        return plan_scan(
            self.store,
            self.registry,
            snapshot,
            dataset,
            partitions=partitions,
            columns=columns,
            filter=filter,
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
        or as ``{"year": 2024, "month": 1}`` mappings: ``scan(...).to_arrow()``."""
        return self.scan(dataset, partitions=partitions, snapshot=snapshot).to_arrow()

    # -- partitions, locks, leases ------------------------------------------------------------

    def copy_partition(
        self,
        dataset: str,
        partition: str,
        *,
        to_dataset: str | None = None,
        to_partition: str | None = None,
        commit_id: str | None = None,
        ttl: float = 30.0,
        timeout: float | None = 60.0,
        progress: Progress | None = None,
    ) -> CommitResult:
        """Copy a partition (server-side, create-only) to another partition and/or dataset,
        under the path lock (read the source, write the destination), in one commit."""
        move = PartitionMove(
            dataset, partition, to_dataset=to_dataset, to_partition=to_partition, rename=False
        )
        return self._move(move, commit_id=commit_id, ttl=ttl, timeout=timeout, progress=progress)

    def rename_partition(
        self,
        dataset: str,
        partition: str,
        *,
        to_dataset: str | None = None,
        to_partition: str | None = None,
        commit_id: str | None = None,
        ttl: float = 30.0,
        timeout: float | None = 60.0,
        progress: Progress | None = None,
    ) -> CommitResult:
        """Move a partition under the path lock (write both places): copy its files, then
        add the copies and remove the originals in one commit. Readers see it at the old
        place or the new one, never half. ``ttl`` is the lock's (renewed by heartbeat while
        the copy runs; a crashed mover blocks others for about that long)."""
        move = PartitionMove(
            dataset, partition, to_dataset=to_dataset, to_partition=to_partition, rename=True
        )
        return self._move(move, commit_id=commit_id, ttl=ttl, timeout=timeout, progress=progress)

    def _move(
        self,
        move: PartitionMove,
        *,
        commit_id: str | None,
        ttl: float,
        timeout: float | None,
        progress: Progress | None,
    ) -> CommitResult:
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
        ttl: float = 30.0,
        timeout: float | None = 60.0,
    ) -> PathLockHandle:
        """The hierarchical path lock across processes and machines, as a context manager:
        ``with lake.lock(read=["/sales/year=2024"], write=["/sales/year=2025"]) as held:``.
        Paths are ``/<dataset>/<partition path>``; ``held.fence`` goes with commits."""
        return self.locks.lock(read=read, write=write, ttl=ttl, timeout=timeout)

    def lease(self, name: str, *, ttl: float = 30.0, **options: Any) -> Lease:
        """A named lease with a fencing token, for leader election: ``with lake.lease("x"):``
        or ``try_acquire()``; commit with ``fence=lease.fence``. ``options`` go to
        :class:`~lakelock._lease.Lease` (``timeout``, ``poll_interval``, ``heartbeat``...)."""
        return Lease(self.store, name, ttl=ttl, **options)

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
