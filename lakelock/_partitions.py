"""Partition copy and rename: server-side create-only copies, then one registry commit.

Under the path lock (copy: read the source, write the destination; rename: write both):

1. read one registry snapshot; the source partition must be there, the destination must not,
   and the source's partition columns and schema must fit the destination dataset
   (:func:`~lakelock._registry._changes.check_fits`, as for an append: a column the
   destination lacks only with ``schema_mode="merge"``), and the destination partition must
   name the source's partition columns, in order, with values their types hold, spelt as
   they spell them (:class:`~lakelock.errors.InvalidNameError`), so a move refused for what
   it is copies nothing; the commit checks again, against whatever committed meanwhile;
2. copy every file server-side into the destination partition, create-only
   (``UploadPartCopy`` + ``If-None-Match: *`` on completion), :data:`COPIERS` at a time. A
   destination name that is taken (a leftover of an interrupted attempt, another writer's
   file) gets the copy under a fresh name: existing objects are never adopted (``vacuum`` may
   be deleting them), and never overwritten;
3. commit once: a copy adds the new files; a rename adds them and removes the source's files in
   the same commit (one CAS, across two datasets if need be), so a reader of the registry
   sees the partition at its old place or at its new place, never half of it.

A copy's read lock keeps out other locks' writers of its source, not commits made without a
lock: an overwrite of the source may land while it copies. The copy is then of the version it
read, whole, in objects of its own (vacuum deleting what the overwrite replaced leaves them);
a file of that version vacuum deleted before it was copied refuses the copy
(:class:`~lakelock.errors.CommitConflictError`), and nothing is committed.

The commit carries the lock grant's fence, so a holder whose grant expired and was superseded
by a conflicting one, or whose write lock was cleared, cannot commit
(:class:`~lakelock.errors.StaleFenceError`). The source's
objects are left in place for ``vacuum`` (readers of older snapshots may still read them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING

from lakelock._datafile import DataFile
from lakelock._datasets import (
    CHECKSUM_METADATA,
    DEFAULT_READ_WORKERS,
    PARQUET_CONTENT_TYPE,
    RECORDS_METADATA,
    Progress,
    written_at,
)
from lakelock._datasets import _verify_checksum as verify_checksum
from lakelock._fence import Fence
from lakelock._layout import data_file_key
from lakelock._names import (
    format_partition_value,
    parse_partition_path,
    parse_partition_value,
    validate_dataset_name,
    validate_partition_path,
    written_partition_value,
)
from lakelock._registry import CommitResult
from lakelock._registry._builder import CommitBuilder
from lakelock._registry._changes import SchemaMode, checked_schema_mode
from lakelock._s3 import ObjectStore, PutResult, new_write_id
from lakelock._stored_partitions import moved_stored_columns, with_partition_values
from lakelock.errors import (
    AlreadyExistsError,
    CommitConflictError,
    DatasetNotFoundError,
    InvalidNameError,
    NotFoundError,
)

if TYPE_CHECKING:
    from lakelock._registry import DatasetState, Registry

__all__ = ["PartitionMove", "lock_paths", "move_partition"]

_COPY_NAME_ATTEMPTS = 5
#: Copies of a partition's files under way at once (as many as a read fetches files).
COPIERS = DEFAULT_READ_WORKERS
#: Of those, files written again (read whole into memory first) at once.
REWRITERS = 2


class PartitionMove:
    """A validated copy or rename request. ``schema_mode``: what to do with source columns
    the destination dataset lacks (:data:`~lakelock._registry._changes.SchemaMode`)."""

    def __init__(
        self,
        dataset: str,
        partition: str,
        *,
        to_dataset: str | None,
        to_partition: str | None,
        rename: bool,
        schema_mode: SchemaMode = None,
    ) -> None:
        self.dataset = validate_dataset_name(dataset)
        self.partition = _partition(partition)
        self.to_dataset = validate_dataset_name(to_dataset or dataset)
        self.to_partition = _partition(to_partition or partition)
        self.rename = rename
        self.schema_mode = checked_schema_mode(schema_mode)
        if (self.dataset, self.partition) == (self.to_dataset, self.to_partition):
            raise InvalidNameError(
                partition, "source and destination are the same partition of the same dataset"
            )
        if len(parse_partition_path(self.partition)) != len(
            parse_partition_path(self.to_partition)
        ):
            raise InvalidNameError(
                to_partition, "the destination must name as many partition columns as the source"
            )
        if to_partition is not None:  # a new partition's values, as rows written have them
            for column, value in parse_partition_path(self.to_partition):
                written_partition_value(column, value)

    @property
    def source_path(self) -> str:
        return f"/{self.dataset}/{self.partition}"

    @property
    def destination_path(self) -> str:
        return f"/{self.to_dataset}/{self.to_partition}"


def _partition(path: str) -> str:
    normal = validate_partition_path(path)
    if not normal:
        raise InvalidNameError(path, "name a partition (col=value/...), not the whole dataset")
    return normal


def lock_paths(move: PartitionMove) -> tuple[list[str], list[str]]:
    """(read, write) paths the operation must hold."""
    if move.rename:
        return [], [move.source_path, move.destination_path]
    return [move.source_path], [move.destination_path]


def move_partition(
    registry: Registry,
    store: ObjectStore,
    move: PartitionMove,
    *,
    fences: Mapping[str, Fence],
    commit_id: str | None = None,
    progress: Progress | None = None,
) -> CommitResult:
    """Copy (or rename) the partition; the caller holds the lock (module docstring).
    ``fences`` maps each dataset touched to the fence its commit carries."""
    operation = "rename" if move.rename else "copy"
    commit = CommitBuilder(
        registry,
        move.to_dataset,
        operation,
        commit_id=commit_id,
        fence=fences.get(move.to_dataset),
    )
    commit.bind(
        {
            "operation": operation,
            "dataset": move.dataset,
            "partition": move.partition,
            "to_dataset": move.to_dataset,
            "to_partition": move.to_partition,
        }
    )
    # A retry of this very move reports it (its source may be gone by now); the id recorded
    # for another change is refused — both before the first copy.
    # A move to another dataset commits its source's change too (``also``, below: its
    # removals, or the fence of the source's grant, which the lock always holds).
    spans = (move.dataset,) if move.to_dataset != move.dataset else ()
    snapshot = commit.check(plan=True, spans=spans)
    if isinstance(snapshot, CommitResult):
        return snapshot
    source = snapshot.datasets.get(move.dataset)
    if source is None:
        raise DatasetNotFoundError(move.dataset)
    if move.partition not in source.partitions:
        raise DatasetNotFoundError(move.dataset, partition=move.partition)
    target = snapshot.datasets.get(move.to_dataset)
    if target is not None and move.to_partition in target.partitions:
        raise CommitConflictError(
            f"partition {move.to_partition!r} of {move.to_dataset!r} exists already",
            dataset=move.to_dataset,
        )
    commit.declare(
        schema=source.schema, partition_by=source.partition_by, schema_mode=move.schema_mode
    )
    # What does not fit is refused whatever commits first: refused before the first copy, so
    # it leaves no files behind (checked on the snapshot just read: no request more).
    commit.fits(target)
    _check_destination(move, source)
    files = registry.files(move.dataset, snapshot=snapshot, partitions=[move.partition])
    _check_room(store, move, files)
    # A file storing a partition column the move changes (an engine's) would keep its old
    # value for Iceberg readers: it is written again with the new one (a footer read a file
    # tells which, before the first copy).
    rewritten = moved_stored_columns(store, files, move.to_partition)
    commit.add(_placed_all(store, files, move, rewritten, progress))
    removed = tuple(f.key for f in files) if move.rename else ()
    if move.to_dataset == move.dataset:
        commit.remove(removed)
    elif removed or fences.get(move.dataset) is not None:
        # The source dataset's change removes its files (rename) or, for a copy, carries only
        # its fence: a copy whose read grant was superseded must not commit what it read.
        commit.also(move.dataset, remove=removed, fence=fences.get(move.dataset))
    return commit.commit()


def _check_destination(move: PartitionMove, source: DatasetState) -> None:
    """The destination must name the source's partition columns, in order, each with a
    value its type can hold, spelt as the column spells it: the registry files a partition
    under its path and readers parse the values back from it, so a path naming other
    columns would be refused only after every file was copied, a value the column cannot
    hold would commit a partition that fails every read of the dataset, and a value spelt
    otherwise (``price=1`` of a ``decimal(5, 2)``, which is ``price=1.00``) would commit a
    second partition of a value that has one, which an overwrite of it leaves."""
    named = parse_partition_path(move.to_partition)
    if [column for column, _ in named] != list(source.partition_by):
        raise InvalidNameError(
            move.to_partition,
            f"a partition of {move.dataset!r} names the columns {list(source.partition_by)}, "
            "in that order",
        )
    if source.schema is None:
        return
    for column, value in named:
        type_ = source.schema.field(column).type
        try:
            spelt = format_partition_value(parse_partition_value(value, type_))
        except InvalidNameError as error:
            raise InvalidNameError(
                move.to_partition,
                f"{column}={value}: {error.reason} (column {column!r} is {type_})",
            ) from error
        if spelt != value:
            raise InvalidNameError(
                move.to_partition,
                f"{column}={value}: column {column!r} ({type_}) spells that value {spelt!r}; "
                "spelt otherwise it would be a second partition of the same value",
            )


def _check_room(store: ObjectStore, move: PartitionMove, files: Sequence[DataFile]) -> None:
    """Every file's key in the destination partition fits S3's key limit with the lake's
    prefix, under its own name and under the fresh name a taken one gets
    (:func:`_fresh_name`, :data:`_FRESH_SUFFIX_BYTES` bytes longer), and that name is a valid
    file name (:class:`InvalidNameError` otherwise): checked for the longest name before the
    first copy, so a destination too deep for one of the files copies none of them, whether
    or not a name there turns out to be taken partway through the copy."""
    if files:
        longest = max((f.name for f in files), key=lambda name: len(name.encode()))
        data_file_key(move.to_dataset, move.to_partition, longest, prefix=store.prefix)
        try:
            data_file_key(
                move.to_dataset, move.to_partition, _fresh_name(longest), prefix=store.prefix
            )
        except InvalidNameError as error:
            raise InvalidNameError(
                error.value,
                f"{error.reason} (the name {longest!r} gets {_FRESH_SUFFIX_BYTES} bytes more "
                "if it is taken in the destination: a copy never overwrites)",
            ) from error


def _fresh_name(name: str) -> str:
    """``name`` with ``-`` and 12 random hex digits before its extension: the name a copy
    gets when ``name`` is taken in the destination (:data:`_FRESH_SUFFIX_BYTES` longer)."""
    stem, dot, extension = name.partition(".")
    return f"{stem}-{uuid.uuid4().hex[:12]}{dot}{extension}"


#: How much longer :func:`_fresh_name` makes a name, in bytes.
_FRESH_SUFFIX_BYTES = len("-") + 12


def _placed_all(
    store: ObjectStore,
    files: Sequence[DataFile],
    move: PartitionMove,
    rewritten: Mapping[str, Mapping[str, str | None]],
    progress: Progress | None,
) -> list[DataFile]:
    """Every file of ``files`` in the destination partition, in their order: copied, or
    written again with its stored partition columns' values in ``rewritten``. Up to
    :data:`COPIERS` copies are under way at once (a partition of thousands of files is
    copied at S3's pace, not one request after another), at most :data:`REWRITERS` of them
    files written again (each is held in memory whole). ``progress(done, total)`` is told
    as each lands. The first failure is raised once the copies under way are done; those
    not started are not sent (the copies made are unreferenced objects for vacuum)."""
    rewriting = threading.BoundedSemaphore(REWRITERS)

    def place(f: DataFile) -> DataFile:
        values = rewritten.get(f.key)
        if values is None:
            return _copy(store, f, move)
        with rewriting:
            return _rewrite(store, f, move, values)

    pool = ThreadPoolExecutor(min(COPIERS, max(1, len(files))), thread_name_prefix="lakelock-copy")
    try:
        futures = [pool.submit(place, f) for f in files]
        for done, future in enumerate(as_completed(futures), start=1):
            future.result()
            if progress is not None:
                progress(done, len(files))
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _copy(store: ObjectStore, f: DataFile, move: PartitionMove) -> DataFile:
    """A server-side, create-only copy of ``f`` into the destination partition
    (:func:`_placed`)."""
    metadata = {CHECKSUM_METADATA: f.checksum, RECORDS_METADATA: str(f.record_count)}
    return _placed(store, f, move, lambda key: store.copy(f.key, key, metadata=metadata))


def _rewrite(
    store: ObjectStore, f: DataFile, move: PartitionMove, values: Mapping[str, str | None]
) -> DataFile:
    """``f`` written again, create-only, into the destination partition with its stored
    partition columns holding their new ``values`` (:func:`_placed`): read whole, checked
    against its checksum, its other columns and schema kept."""
    try:
        body = store.get(f.key).body
    except NotFoundError as error:
        raise _gone(f, move) from error
    verify_checksum(store, f, body)
    data, stats = with_partition_values(body, values)
    checksum = f"sha256:{hashlib.sha256(data).hexdigest()}"
    metadata = {CHECKSUM_METADATA: checksum, RECORDS_METADATA: str(f.record_count)}
    write_id = new_write_id()  # every attempt's: a lost answer is read back as ours
    placed = _placed(
        store,
        f,
        move,
        lambda key: store.put(
            key,
            data,
            mode="create",
            metadata=metadata,
            write_id=write_id,
            content_type=PARQUET_CONTENT_TYPE,
        ),
    )
    return dataclasses.replace(placed, size=len(data), checksum=checksum, stats=stats)


def _gone(f: DataFile, move: PartitionMove) -> CommitConflictError:
    # The version read was replaced (its read lock keeps out no unlocked commit) and vacuum
    # deleted its file since: copying the rest would be a partition of no version, so
    # nothing is committed.
    return CommitConflictError(
        f"{f.key!r}, a file of the partition {move.source_path!r} as read, is gone: "
        "the partition was replaced and vacuum deleted it while it was being copied; "
        "nothing was committed (copy it again)",
        dataset=move.dataset,
    )


def _placed(
    store: ObjectStore, f: DataFile, move: PartitionMove, send: Callable[[str], PutResult]
) -> DataFile:
    """``f`` as ``send`` writes it, create-only, into the destination partition. If its
    name is taken there (a leftover of an interrupted attempt, or another writer's file),
    it gets a fresh name instead: an existing object is never adopted, because a ``vacuum``
    may have judged it an orphan and be deleting it."""
    name = f.name
    for _ in range(_COPY_NAME_ATTEMPTS):
        key = data_file_key(move.to_dataset, move.to_partition, name, prefix=store.prefix)
        sent = time.monotonic()
        try:
            result = send(key)
        except NotFoundError as error:
            raise _gone(f, move) from error
        except AlreadyExistsError:
            name = _fresh_name(f.name)
            continue
        return dataclasses.replace(
            f,
            dataset=move.to_dataset,
            key=key,
            partition_path=move.to_partition,
            etag=result.etag,
            write_id=result.write_id,
            # A new object: held to the vacuum floor by when it was written (FORMAT.md rule
            # 10), as a file of an append is, not by its source's time.
            written_at=written_at(result, time.monotonic() - sent),
        )
    raise CommitConflictError(
        f"no free name for a copy of {f.key!r} in {move.destination_path!r}",
        dataset=move.to_dataset,
    )
