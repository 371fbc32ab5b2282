"""``Lake``: one bucket (and prefix) as a data lake — the front door to everything else.

A Lake holds one boto3 client, one :class:`~lakelock._s3.ObjectStore` through which every
request goes, and one :class:`~lakelock._registry.Registry` (so concurrent commits of one
process share group commit). It is safe to use from many threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Self, TypedDict, Unpack

import pyarrow as pa
import pyarrow.compute as pc

from lakelock._client import DEFAULT_READ_TIMEOUT, s3_client
from lakelock._connection import Connection
from lakelock._datasets import Progress
from lakelock._durations import MAX_DURATION, duration_seconds
from lakelock._fence import Fence
from lakelock._holding import DEFAULT, Default
from lakelock._lease import Lease, LeaseOptions
from lakelock._mirror import MirrorResult, check_formats, mirror
from lakelock._mirror._auto import AutoMirror, MirroringRegistry
from lakelock._names import (
    named_partition,
    parse_lake_url,
    validate_bucket_name,
    validate_commit_id,
    validate_dataset_name,
    validate_lake_prefix,
)
from lakelock._operations import TableOperations
from lakelock._partitions import PartitionMove, lock_paths, move_partition
from lakelock._pathlock import DistributedPathLock, LockOptions, PathLockHandle
from lakelock._pathlock._core import PathLike
from lakelock._registry import CommitResult, Registry, RegistrySnapshot
from lakelock._registry._builder import CommitBuilder
from lakelock._registry._changes import SchemaMode
from lakelock._registry._core import FoldPolicy
from lakelock._registry._objects import HistoryEntry
from lakelock._registry._settings import DEFAULTS, LakeSettings
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock._scan import Scan, plan_scan
from lakelock._vacuum import VacuumReport, vacuum
from lakelock.errors import DatasetNotFoundError, InvalidArgumentError, VersionNotFoundError

__all__ = ["Lake", "LakeConfig", "MoveOptions", "ScanOptions"]

#: How long a replaced version stays readable by default (see ``Lake(retention=)``).
DEFAULT_RETENTION = DEFAULTS.retention


class MoveOptions(TypedDict, total=False):
    """Options of :meth:`Lake.copy_partition` and :meth:`Lake.rename_partition`. There is
    no ``fence``: a move's commit carries its own path-lock grant's fence, and a change
    carries one, so a lease holder paused past its expiry is not refused a move."""

    #: Where to: another dataset (default: the same) and/or partition (default: the same).
    to_dataset: str | None
    to_partition: str | Mapping[str, object] | None
    #: Makes the move idempotent: a re-run with the same id commits nothing twice.
    commit_id: str | None
    #: What to do with source columns the destination dataset lacks (as for ``append``:
    #: ``None`` refuses them with SchemaMismatchError, ``"merge"`` adds them to its schema).
    schema_mode: SchemaMode
    #: The path lock's TTL (default 30 s; renewed by heartbeat while the copy runs, so a
    #: crashed mover blocks others for about that long) and how long to wait for it
    #: (default: the Lake's ``lock_timeout``, as a commit waits for a write lock; ``None``:
    #: as long as it takes), else :class:`~lakelock.errors.LockTimeout`, nothing copied.
    ttl: float
    timeout: float | None
    progress: Progress | None


class ScanOptions(TypedDict, total=False):
    """Options of :meth:`Lake.scan` and :meth:`Lake.read`: which rows, as of when."""

    #: Only these partitions: paths (``"year=2024/month=01"``), mappings, or leading parts.
    partitions: Iterable[str | Mapping[str, object]] | None
    #: Only these columns, in this order.
    columns: Sequence[str] | None
    #: Only the rows this ``pyarrow.compute.Expression`` admits (it prunes partitions too).
    filter: pc.Expression | None
    #: The snapshot to read (default: the current one), or the registry as it was at
    #: ``version`` or server time ``as_of`` (time travel).
    snapshot: RegistrySnapshot | None
    version: int | None
    as_of: float | datetime | None


@dataclass(frozen=True)
class LakeConfig:
    """What it takes to open a :class:`Lake` elsewhere — on a Dask, Spark or Ray worker —
    as plain picklable data (the credentials are the client's current ones; see
    :mod:`lakelock._connection`). ``Lake.config`` makes one; :meth:`open` is the Lake."""

    bucket: str
    prefix: str
    connection: Connection
    multipart_threshold: int = 64 * 1024 * 1024
    #: Given explicitly to the Lake this was made from (``None``: the lake's).
    commit_window: int | None = None
    #: The Lake's ``fold_policy`` (``None``: the defaults).
    fold_policy: FoldPolicy | None = None

    def open(self) -> Lake:
        """A new Lake (its own client) on the same bucket, prefix, endpoint and identity."""
        return Lake(
            self.bucket,
            prefix=self.prefix,
            s3=self.connection.client(),
            multipart_threshold=self.multipart_threshold,
            commit_window=self.commit_window,
            fold_policy=self.fold_policy,
        )


class Lake(TableOperations):
    """A data lake in ``bucket`` under ``prefix``.

    ``s3`` is a boto3 S3 client (default: boto3's default credentials and endpoint).
    ``retry`` bounds every retry loop (commits, conflicts, throttling); ``group_commit``
    merges concurrent commits of this Lake into one compare-and-swap. The lake's settings
    live in the lake (its registry, :meth:`configure`), the same for every writer:
    ``commit_window`` (how many recent commit ids the registry keeps: the idempotency
    window), ``retention`` (how long a replaced version stays readable: a duration, seconds,
    a timedelta or ``"7d"``), ``intent_ttl`` (how long an undecided commit may still be
    applied) and ``vacuum_floor`` (the shortest window :meth:`vacuum` ever uses). Left out,
    this Lake uses the lake's; given, they are what a new lake is created with, and a value
    that disagrees with the lake's is refused
    (:class:`~lakelock.errors.SettingsMismatchError`, naming both).
    ``mirror`` (``("iceberg", "delta")`` or either) keeps those views of every dataset this
    Lake commits to current, in a background thread after each commit (never delaying or
    failing it: errors are logged; ``lake.auto_mirror.wait()`` waits for it).
    ``read_timeout`` (a duration, default 30 s) bounds every read (GET, HEAD, LIST), its tries
    included: past it, :class:`~lakelock.errors.ReadTimeoutError` (a client of your own keeps
    its own per-try ``read_timeout``: :mod:`lakelock._s3._classify`). ``lock_timeout`` (a
    duration, default 0) is how long a commit waits for a write lock that another process
    holds over what it writes (:meth:`lock`) before
    :class:`~lakelock.errors.LockedError`, and a partition copy or rename for its path lock
    before :class:`~lakelock.errors.LockTimeout`. ``fold_policy`` (a
    :class:`~lakelock.advanced.FoldPolicy`) is the one way to tune how this Lake's commits
    share the registry with other processes' (``FoldPolicy(linger=0)``: no requests after a
    commit returned); the defaults need no tuning (docs/decisions/).

    Writing (``write``, ``append``, ``overwrite``, ``delete``, ``compact``) is inherited from
    :class:`~lakelock._operations.TableOperations`.
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
        commit_window: int | None = None,
        retention: float | timedelta | str | None = None,
        mirror: Iterable[str] | None = None,
        read_timeout: float | timedelta | str = DEFAULT_READ_TIMEOUT,
        lock_timeout: float | timedelta | str = 0.0,
        intent_ttl: float | timedelta | str | None = None,
        vacuum_floor: float | timedelta | str | None = None,
        fold_policy: FoldPolicy | None = None,
    ) -> None:
        bucket = validate_bucket_name(bucket)
        prefix = validate_lake_prefix(prefix)
        read_seconds = _read_seconds(read_timeout)
        self.bucket = bucket
        self.prefix = prefix
        self.client = s3 if s3 is not None else s3_client(read_timeout=read_seconds)
        self.retry = retry or RetryPolicy()
        self.store = ObjectStore(
            self.client,
            bucket,
            prefix=prefix,
            retry=self.retry,
            multipart_threshold=multipart_threshold,
            read_timeout=read_seconds,
        )
        options: dict[str, Any] = {
            "retry": self.retry,
            "group_commit": group_commit,
            "commit_window": commit_window,
            "retention": _seconds(retention, "retention"),
            "intent_ttl": _seconds(intent_ttl, "intent_ttl"),
            "vacuum_floor": _seconds(vacuum_floor, "vacuum_floor"),
            "policy": _fold_policy(fold_policy),
        }
        self.auto_mirror: AutoMirror | None = None
        if mirror is None:
            self.registry = Registry(self.store, **options)
        else:
            registry = MirroringRegistry(self.store, mirror=check_formats(mirror), **options)
            self.registry = registry
            self.auto_mirror = registry.auto_mirror
        self.registry.lock_timeout = _lock_seconds(lock_timeout)
        self._fold_policy = fold_policy
        self.locks = DistributedPathLock(self.store, write_locks=self.registry.internals)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        retry: RetryPolicy | None = None,
        group_commit: bool = True,
        multipart_threshold: int = 64 * 1024 * 1024,
        commit_window: int | None = None,
        retention: float | timedelta | str | None = None,
        mirror: Iterable[str] | None = None,
        read_timeout: float | timedelta | str = DEFAULT_READ_TIMEOUT,
        lock_timeout: float | timedelta | str = 0.0,
        intent_ttl: float | timedelta | str | None = None,
        vacuum_floor: float | timedelta | str | None = None,
        fold_policy: FoldPolicy | None = None,
        **client_kwargs: Any,
    ) -> Lake:
        """``Lake.from_url("s3://bucket/prefix", endpoint_url=..., region_name=...)``: the
        Lake options by name (as for the constructor), every other keyword goes to
        ``boto3.client("s3", ...)``. The URL and bucket name are checked first
        (:class:`~lakelock.errors.InvalidNameError`)."""
        bucket, prefix = parse_lake_url(url)
        read_seconds = _read_seconds(read_timeout)
        return cls(
            bucket,
            prefix=prefix,
            s3=s3_client(read_timeout=read_seconds, **client_kwargs),
            retry=retry,
            group_commit=group_commit,
            multipart_threshold=multipart_threshold,
            commit_window=commit_window,
            retention=retention,
            mirror=mirror,
            read_timeout=read_seconds,
            lock_timeout=lock_timeout,
            intent_ttl=intent_ttl,
            vacuum_floor=vacuum_floor,
            fold_policy=fold_policy,
        )

    def close(self) -> None:
        """End what this lake does in the background, for a pipeline that is done with it:
        the views its commits scheduled (``mirror``) are brought up to date (a view write
        the store does not answer is given up after the client's timeouts, and logged as
        any failed mirror: the next mirror catches up), it stops
        folding other processes' commits (``FoldPolicy.linger``), and the requests it sent
        and no longer waits for (a hedged request's slower copy, reads made ahead) are
        answered. Afterwards it sends no request unless called again; it stays usable
        (the next call starts what it needs). ``with Lake(...) as lake:`` closes it at the
        end of the block. A lease or lock still held through it goes on being renewed
        until released."""
        self.registry.close()  # a mirroring lake's registry brings its views up to date first

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
            commit_window=self.registry.internals.explicit.get("commit_window"),  # type: ignore[arg-type]
            fold_policy=self._fold_policy,
        )

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    # -- reading (writing: lakelock._operations) ----------------------------------------------

    def scan(
        self,
        dataset: str,
        *,
        partitions: Iterable[str | Mapping[str, object]] | None = None,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        snapshot: RegistrySnapshot | None = None,
        version: int | None = None,
        as_of: float | datetime | None = None,
    ) -> Scan:
        """A read of ``dataset`` in one registry snapshot (default: the current one; or as it
        was at registry ``version`` or server time ``as_of``: time travel), for pyarrow,
        DuckDB, Polars or pandas: ``lake.scan("sales").to_duckdb("sales")``. ``partitions``
        as for :meth:`read`; ``columns`` keeps those columns, in that order; ``filter`` is a
        ``pyarrow.compute.Expression`` (``pc.field("day") >= 15``); both prune partitions
        before any data is read. See :mod:`lakelock._scan`."""
        try:
            snapshot = snapshot or self.registry.read(version=version, as_of=as_of)
        except VersionNotFoundError as error:
            if error.dataset != "*":
                raise
            raise VersionNotFoundError(  # name the dataset asked for, not the registry
                validate_dataset_name(dataset),
                version=error.version,
                as_of=error.as_of,
                reason=error.reason,
            ) from error
        if snapshot.historical:  # a version without this dataset is a typed error, not empty
            self.registry.dataset(dataset, version=version, as_of=as_of, snapshot=snapshot)
        return plan_scan(
            self.store,
            self.registry,
            snapshot,
            dataset,
            partitions=partitions,
            columns=columns,
            filter=filter,
        )

    def read(self, dataset: str, **options: Unpack[ScanOptions]) -> pa.Table:
        """The committed rows of ``dataset`` in one registry snapshot (default: the current
        one; or the dataset as it was at registry ``version`` or server time ``as_of``),
        optionally only of some partitions, given as paths (``"year=2024/month=01"``) or as
        ``{"year": 2024, "month": 1}`` mappings, only some ``columns``, and only the rows a
        ``filter`` admits: ``scan(...).to_arrow()``, with :meth:`scan`'s ``options``
        (:class:`ScanOptions`). A filter that pins every partition column
        (``(pc.field("year") == 2024) & (pc.field("month") == 1)``, or ``isin`` a few) looks
        those partitions up as ``partitions=`` does."""
        return self.scan(dataset, **options).to_arrow()

    # -- history -----------------------------------------------------------------------------

    def history(self, dataset: str, *, limit: int | None = None) -> list[HistoryEntry]:
        """The commits of ``dataset``, newest first: registry version, server commit time,
        commit id, operation and file counts (as far back as vacuum has kept its versions)."""
        return self.registry.history(dataset, limit=limit)

    def restore(
        self,
        dataset: str,
        *,
        version: int | None = None,
        as_of: float | datetime | None = None,
        commit_id: str | None = None,
        fence: Fence | tuple[str, int] | None = None,
    ) -> CommitResult:
        """Make ``dataset`` as it was at registry ``version`` (or server time ``as_of``)
        current again, in one new commit (fenced and idempotent like any other; the versions
        in between stay in the history). A version that leaves the retention within the
        restore's lead (half the retention, at most an hour) is refused with
        :class:`~lakelock.errors.SnapshotExpiredError`: vacuum may delete its files as the
        restore commits; so is one the lake's last vacuum left out, however long the
        retention is now (docs/FORMAT.md, rule 9)."""
        if (version is None) == (as_of is None):
            raise InvalidArgumentError(
                (version, as_of), "restore takes version or as_of", what="restore point"
            )
        old, until, since = self.registry.internals.restore_point(
            dataset, version=version, as_of=as_of
        )
        commit = CommitBuilder(self.registry, old.name, "restore", commit_id=commit_id, fence=fence)
        commit.bind({"restore": old.updated_version})
        commit.restore(old, until=until, since=since)
        return commit.commit()

    # -- partitions, locks, leases ------------------------------------------------------------

    def copy_partition(
        self, dataset: str, partition: str | Mapping[str, object], **options: Unpack[MoveOptions]
    ) -> CommitResult:
        """Copy a partition (server-side, create-only) to another partition and/or dataset,
        under the path lock (read the source, write the destination), in one commit.
        ``options``: :class:`MoveOptions`. Partitions are paths
        (``"year=2024/month=1"``) or mappings as :meth:`read` takes."""
        return self._move(dataset, partition, rename=False, **options)

    def rename_partition(
        self, dataset: str, partition: str | Mapping[str, object], **options: Unpack[MoveOptions]
    ) -> CommitResult:
        """Move a partition under the path lock (write both places): copy its files, then
        add the copies and remove the originals in one commit. Readers see it at the old
        place or the new one, never half. ``options``: :class:`MoveOptions`."""
        return self._move(dataset, partition, rename=True, **options)

    def _move(
        self,
        dataset: str,
        partition: str | Mapping[str, object],
        *,
        rename: bool,
        to_dataset: str | None = None,
        to_partition: str | Mapping[str, object] | None = None,
        commit_id: str | None = None,
        schema_mode: SchemaMode = None,
        ttl: float = 30.0,
        timeout: float | Default | None = DEFAULT,
        progress: Progress | None = None,
    ) -> CommitResult:
        if not isinstance(partition, str) or not (
            to_partition is None or isinstance(to_partition, str)
        ):
            # Mappings name columns: the datasets' partition columns say in which order.
            snapshot = self.registry.read()
            source = snapshot.datasets.get(validate_dataset_name(dataset))
            if source is None:
                raise DatasetNotFoundError(dataset)
            partition = named_partition(source.partition_by, partition)
            if to_partition is not None:
                target = snapshot.datasets.get(validate_dataset_name(to_dataset or dataset))
                columns = (target or source).partition_by
                to_partition = named_partition(columns, to_partition)
        move = PartitionMove(
            dataset,
            partition,
            to_dataset=to_dataset,
            to_partition=to_partition,
            rename=rename,
            schema_mode=schema_mode,
        )
        if commit_id is not None:
            validate_commit_id(commit_id)  # before the first copy
        read, write = lock_paths(move)
        if timeout is DEFAULT:
            timeout = self.registry.lock_timeout  # the wait a commit gives a write lock
        held = self.lock(read=read, write=write, ttl=ttl, timeout=timeout).acquire()
        try:
            fences = {name: held.fence_for(name) for name in held.datasets}
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
        Paths are ``/<dataset>/<partition path>``. A commit carries the fence of the dataset
        it changes: ``held.fence_for("sales")`` (``held.fence`` when the request names one
        dataset only).
        ``options`` (:class:`~lakelock._pathlock.LockOptions`: ``ttl``, ``timeout``,
        ``poll_interval``, ``margin``, ``heartbeat``, ``on_lost``) not given are those of
        :attr:`locks`, a :class:`~lakelock._pathlock.DistributedPathLock` with its defaults
        (``ttl`` 30 s, no ``timeout``, ``heartbeat`` on, ``margin`` 1 s).

        What each mode excludes: a ``write`` path keeps out every other lock request in its
        lineage (ancestors, itself, descendants) and every commit of anyone else that writes
        there -- a plain ``append`` included: it is refused with
        :class:`~lakelock.errors.LockedError` naming the holder, or waits up to the Lake's
        ``lock_timeout`` -- until released (FORMAT.md, "Write locks in force"). A ``read``
        path keeps out only other lock requests that write in its lineage: commits made
        without a lock still land there."""
        return self.locks.lock(read=read, write=write, **options)

    def lease(self, name: str, **options: Unpack[LeaseOptions]) -> Lease:
        """A named lease with a fencing token, for leader election: ``with lake.lease("x"):``
        or ``try_acquire()``; commit with ``fence=lease.fence``. Each acquisition is recorded
        in this lake's registry before it returns (one commit, naming no dataset: on a new
        lake, it creates the registry), so that the token of the holder it took over from is
        refused at once. ``options``: those of :class:`~lakelock._lease.Lease`
        (:class:`~lakelock._lease.LeaseOptions`)."""
        return Lease(self.store, name, takeovers=self.registry.internals, **options)

    # -- views ---------------------------------------------------------------------------------

    def mirror(
        self,
        dataset: str,
        formats: Iterable[str] | str = ("iceberg", "delta"),
        *,
        progress: Progress | None = None,
    ) -> MirrorResult:
        """Bring the Iceberg and/or Delta views of ``dataset`` up to its current version: every
        version not yet mirrored becomes an Iceberg snapshot and a Delta version, written
        create-only under ``views/<dataset>/`` (extras ``iceberg``, ``delta``). Idempotent
        and safe to run from several processes at once. ``result.iceberg`` is the ``s3://``
        URI of the newest metadata.json, ``result.delta`` that of the Delta table. See
        :mod:`lakelock._mirror`. ``progress(done, total)`` counts versions written, one
        format after the other."""
        return mirror(self.registry, dataset, formats, progress=progress)

    # -- housekeeping -------------------------------------------------------------------------

    def configure(
        self,
        *,
        retention: float | timedelta | str | None = None,
        commit_window: int | None = None,
        intent_ttl: float | timedelta | str | None = None,
        vacuum_floor: float | timedelta | str | None = None,
        create: bool = False,
    ) -> LakeSettings:
        """Change the lake's settings for every writer, by one commit
        (``lake.configure(retention="30d")``; durations as for the constructor); returns
        them (see :class:`~lakelock.LakeSettings`). Those not given stay as they are, but
        for a vacuum floor not given: it never exceeds the retention, and while it is the
        default's (an hour, or the retention if shorter) it follows the retention both ways.
        A prefix where nothing was ever committed is :class:`~lakelock.errors.NotFoundError`
        naming it, nothing written, unless ``create=True`` starts a lake there with these
        settings (as ``lakelock registry configure --create``): a mistyped prefix gets no
        lake. Every writer reads them from the root it commits on; ``lakelock registry
        show`` shows them."""
        return self.registry.configure(
            retention=_seconds(retention, "retention"),
            commit_window=commit_window,
            intent_ttl=_seconds(intent_ttl, "intent_ttl"),
            vacuum_floor=_seconds(vacuum_floor, "vacuum_floor"),
            create=create,
        )

    def vacuum(
        self,
        *,
        older_than: float | timedelta | str | None = None,
        dry_run: bool = True,
        progress: Progress | None = None,
        listing: Callable[[int], None] | None = None,
        enforce_retention: bool = True,
    ) -> VacuumReport:
        """Find objects no snapshot younger than ``older_than`` can read, and delete them
        (conditionally) unless ``dry_run``. ``older_than`` is a duration: seconds, a
        timedelta, or text such as ``"90s"``, ``"15m"``, ``"24h"``, ``"7d"``, at most a
        century (:class:`~lakelock.errors.InvalidArgumentError` otherwise, before anything
        is read), by default the lake's
        ``retention``: never more, and less only with ``enforce_retention=False`` (the
        versions time travel promises to keep would go), and never below the lake's
        ``vacuum_floor`` (writers in flight may still commit what is younger).
        ``listing(n)`` reports objects listed so far, ``progress(done, total)`` deletions.
        See :mod:`lakelock._vacuum`."""
        return vacuum(
            self.registry,
            older_than=_seconds(older_than, "older_than"),
            dry_run=dry_run,
            progress=progress,
            listing=listing,
            enforce_retention=enforce_retention,
        )


def _seconds(value: float | timedelta | str | None, what: str) -> float | None:
    return None if value is None else duration_seconds(value, what=what)


def _fold_policy(policy: FoldPolicy | None) -> FoldPolicy | None:
    """A ``fold_policy`` is a FoldPolicy (its knobs are checked when it is made)."""
    if policy is not None and not isinstance(policy, FoldPolicy):
        raise InvalidArgumentError(
            policy,
            f"a lakelock.advanced.FoldPolicy, not {type(policy).__name__}",
            what="fold_policy",
        )
    return policy


def _read_seconds(read_timeout: float | timedelta | str) -> float:
    """The read budget in seconds: a positive duration, at most a century (a socket waits no
    longer: every request would fail, its outcome "unknown")."""
    seconds = duration_seconds(read_timeout, what="read_timeout")
    if not 0 < seconds <= MAX_DURATION:
        raise InvalidArgumentError(
            read_timeout, "a positive duration, at most a century", what="read_timeout"
        )
    return seconds


def _lock_seconds(lock_timeout: float | timedelta | str) -> float:
    """How long a commit waits for a write lock in force: a duration (0: not at all)."""
    return duration_seconds(lock_timeout, what="lock_timeout")
