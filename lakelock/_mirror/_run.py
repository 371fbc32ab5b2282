"""``mirror``: bring a dataset's Iceberg and Delta views up to its current version.

For each format: find the newest version the view has (a few one-key LISTs, see
:func:`~lakelock._mirror._series.newest`), walk the dataset's snapshot chain back to it (one
snapshot per new version), and write each new version's objects, oldest first, each created
with ``If-None-Match: *``. A view object is written last for its version (Delta: the log
entry; Iceberg: the metadata.json, after its manifests and manifest list), so a crash leaves a
view that is behind, never one that is wrong; the next run continues where it stopped.

Several processes may mirror at once: what they write for a version is determined by that
version (and the view before it), so a writer that loses a create reads what won, checks it
mirrors the same lakelock version, and continues; if it does not (its picture of the view was
stale), it starts over from the view as it now is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import orjson
import pyarrow as pa

from lakelock._datasets import Progress
from lakelock._layout import (
    delta_checkpoint_key,
    delta_log_key,
    delta_log_prefix,
    delta_root,
    iceberg_metadata_key,
)
from lakelock._mirror import _delta
from lakelock._mirror._iceberg import iceberg_pass
from lakelock._mirror._series import newest, numbered, restarting
from lakelock._mirror._versions import SchemaOf, changes, live_files, pending
from lakelock._names import validate_dataset_name
from lakelock._registry import Registry
from lakelock._registry._snapshot import DatasetEntry, Snapshot
from lakelock._s3 import ObjectStore
from lakelock.errors import (
    AlreadyExistsError,
    DatasetNotFoundError,
    InvalidNameError,
    SchemaMismatchError,
    VersionNotFoundError,
)

__all__ = ["FORMATS", "MirrorResult", "mirror"]

FORMATS = ("iceberg", "delta")


@dataclass(frozen=True)
class MirrorResult:
    """Where the views of a dataset are, and the lakelock version they mirror up to.
    ``iceberg``: the ``s3://`` URI of ``version``'s metadata.json (the newest, unless
    another mirror wrote newer ones meanwhile); ``delta``: the ``s3://`` URI
    of the Delta table (its root); ``None`` for a format not asked for. ``written``: how
    many versions this call brought into the views (each format counted), 0 when they
    were already current."""

    iceberg: str | None
    delta: str | None
    version: int
    written: int = 0

    @property
    def already_current(self) -> bool:
        """Whether the views were current already: this call wrote nothing."""
        return self.written == 0


def check_formats(formats: Iterable[str] | str) -> tuple[str, ...]:
    chosen = (formats,) if isinstance(formats, str) else tuple(formats)
    if not chosen:
        raise InvalidNameError(chosen, f"name at least one view format of {list(FORMATS)}")
    for name in chosen:
        if name not in FORMATS:
            raise InvalidNameError(name, f"unknown view format; expected one of {list(FORMATS)}")
    return tuple(dict.fromkeys(chosen))


def mirror(
    registry: Registry,
    dataset: str,
    formats: Iterable[str] | str = FORMATS,
    *,
    progress: Progress | None = None,
    iceberg_since: int | None = None,
) -> MirrorResult:
    """Mirror every version of ``dataset`` not yet in its views (module docstring).
    ``progress(done, total)`` counts the versions written, format after format;
    ``iceberg_since``: a version the caller saw in the Iceberg view (fewer LISTs to find its
    newest metadata; ``lakelock catalog`` passes the one it last answered). A schema a view
    cannot take (column names that clash ignoring case, a type the format lacks, a column
    whose values it cannot carry exactly: timestamps in nanoseconds, ``uint64``) is
    :class:`~lakelock.errors.SchemaMismatchError` naming the dataset (and the column),
    before that view's first object is written."""
    dataset = validate_dataset_name(dataset)
    chosen = check_formats(formats)
    doc, _ = registry._current()
    if doc.format_version == 1:
        # Views mirror versions, and format 1 keeps none; mirroring never writes the registry.
        raise VersionNotFoundError(
            dataset,
            version=doc.version,
            reason=": this registry is still in format 1, which keeps no versions to mirror "
            "(the next commit, or `lakelock registry migrate`, upgrades it)",
        )
    entry = doc.entries.get(dataset)
    if entry is None:
        raise DatasetNotFoundError(dataset)
    store = registry.store
    counted = _Counted(progress)
    args = (registry, store, dataset, entry, counted)
    iceberg = delta = None
    try:
        if "delta" in chosen:
            restarting(lambda: _delta_pass(*args), store, f"Delta view of {dataset!r}")
            delta = f"s3://{store.bucket}/{store.full_key(delta_root(dataset))}"
        if "iceberg" in chosen:
            key = restarting(
                lambda: iceberg_pass(*args, since=iceberg_since),
                store,
                f"Iceberg view of {dataset!r}",
            )
            key = _metadata_of(store, dataset, key, entry.version)
            iceberg = f"s3://{store.bucket}/{store.full_key(key)}"
    except SchemaMismatchError as error:
        raise SchemaMismatchError(
            f"dataset {dataset!r} cannot be mirrored: {error}", dataset=dataset
        ) from error
    return MirrorResult(
        iceberg=iceberg, delta=delta, version=entry.version, written=counted.written
    )


def _metadata_of(store: ObjectStore, dataset: str, newest_key: str, version: int) -> str:
    """The key of ``version``'s Iceberg metadata.json: the newest (``newest_key``), unless a
    mirror that read the registry later wrote newer ones meanwhile. Then ``version``'s own,
    which it or this pass wrote, so that the metadata named holds the version reported (a
    reader told version 1 and handed version 2's metadata would read rows of another). A
    newer one whose current snapshot is ``version`` is vacuum's, written again without the
    snapshots it removed (:func:`~lakelock._mirror._vacuum.drop_expired_snapshots`): named."""
    number = numbered(".metadata.json")(newest_key.rsplit("/", 1)[-1])
    if number is None or number <= version:
        return newest_key
    held = orjson.loads(store.get(newest_key).body).get("current-snapshot-id")
    return newest_key if held == version else iceberg_metadata_key(dataset, version)


class _Counted:
    """The caller's ``progress(done, total)``, counting the versions written: a pass calls
    it once per version, after writing it."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self.written = 0

    def __call__(self, done: int, total: int) -> None:
        self.written += 1
        if self._progress is not None:
            self._progress(done, total)


def created_ms(snap: Snapshot) -> int:
    """The dataset's creation time, in ms: the same in every version, so every writer
    writes the same metadata."""
    moment = dt.datetime.fromisoformat(snap.created_at.replace("Z", "+00:00"))
    return round(moment.timestamp() * 1000)


def _delta_pass(
    registry: Registry,
    store: ObjectStore,
    dataset: str,
    entry: DatasetEntry,
    progress: Progress | None,
) -> Literal[True] | None:
    """One attempt; ``None`` when another writer's view differs from what this one assumed."""
    top = newest(store, delta_log_prefix(dataset), numbered(".json"))
    after: int | None = None
    number = 0
    if top is not None:
        after = _delta.lakelock_version_of(store.get(top[1]).body)
        if after is None:  # another tool's Delta table in the dataset's directory
            raise AlreadyExistsError(
                f"{top[1]!r} is a Delta log entry lakelock did not write; the Delta view of "
                f"{dataset!r} would overwrite another table's history",
                bucket=store.bucket,
                key=store.full_key(top[1]),
                operation="PutObject",
            )
        number = top[0] + 1
    root = store.full_key(delta_root(dataset))
    table = _delta.table_id(store.bucket, root)
    steps = pending(registry.internals.objects, entry, after)
    schema_of = SchemaOf(registry)
    for done, (_, snap, parent) in enumerate(steps):
        change = changes(registry.internals.objects, snap, parent, schema_of=schema_of)
        body = _delta.commit_body(
            change,
            bucket=store.bucket,
            prefix=store.prefix,
            table=table,
            created_ms=created_ms(snap),
        )
        key = delta_log_key(dataset, number)
        if (
            not _create(store, key, body, "application/json")
            and _delta.lakelock_version_of(store.get(key).body) != change.version
        ):
            return None  # another mirror's view differs from the one this pass read
        if number > 0 and number % _delta.CHECKPOINT_INTERVAL == 0:
            checkpoint = _delta.checkpoint_body(
                live_files(registry, snap),
                schema=change.schema if change.schema is not None else pa.schema([]),
                partition_by=snap.partition_by,
                at=snap.at,
                bucket=store.bucket,
                prefix=store.prefix,
                table=table,
                created_ms=created_ms(snap),
            )
            _create(
                store,
                delta_checkpoint_key(dataset, number),
                checkpoint,
                "application/vnd.apache.parquet",
            )
        number += 1
        if progress is not None:
            progress(done + 1, len(steps))
    return True


def _create(store: ObjectStore, key: str, body: bytes, content_type: str) -> bool:
    """Create ``key``; ``False`` if it exists already (another mirror's, or ours whose answer
    was lost: the store resolves that case to success)."""
    try:
        store.put(key, body, mode="create", content_type=content_type)
    except AlreadyExistsError:
        return False
    return True
