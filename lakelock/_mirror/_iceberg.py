"""The Iceberg (format v2) view of a dataset: one snapshot per lakelock version.

Each lakelock version ``v`` becomes snapshot id ``v`` (sequence number: its place among the
versions mirrored), committed by ``metadata/<v>.metadata.json``; the summary carries
``"lakelock.version"``. Its manifest list names the previous snapshot's manifests unchanged,
plus one new manifest of the files ``v`` added, plus a rewrite of each manifest that held a
file ``v`` removed (its other files EXISTING, the removed DELETED) — the least Iceberg allows.
Manifests whose partition ranges cannot hold a removed file's partition are not read. Manifests
and lists are written by pyiceberg's own Avro writers into memory, then created with
``If-None-Match: *`` through the lake's store; nothing is written through pyiceberg's FileIO.

**Schema and field ids.** A column's field id is fixed by its name for the view's whole
life: the id the view's schemas gave that name before, else one past the highest top-level id
any of them holds (so ``last-column-id`` only grows, and an engine adding a column through
``lakelock catalog`` assigns the id lakelock does). A column dropped by a restore and added
again is the same column (its old files read by name), so it gets its old id back; a new
name never takes a dropped column's id. Each id follows from the previous metadata.json and
the version's schema alone, so racing mirrors agree. In a dataset never restored, column ``i``
(0-based, partition columns in their places) has id ``i + 1``. The fields nested in a column
of id ``k`` get ids from ``k << 16`` on. Data files carry no ``PARQUET:field_id``: a writer does
not know the dataset's schema (a table's columns may come in any order), and a wrong id would
read another column; so the table property ``schema.name-mapping.default`` maps every name
ever seen to its id, for every file, as the Iceberg spec provides for files written without
ids. A column a file lacks reads as null. A view mirrored before ids were kept by name, whose
schemas gave one id to two names, is renumbered by its next metadata: the first schema to
hold an id keeps it, the later name gets a new one.

**Expiry.** A version lakelock no longer lets anyone read (replaced before the registry's
retention, or before the horizon of the last vacuum its root records) is dropped from the
next metadata.json with its log entries, as Iceberg's
``expire_snapshots`` would, so the metadata holds the versions within the retention; the
metadata log names the last 100 metadata files.

**Partitions** are identity transforms of the partition columns (spec 0, field ids from
1000). **Statistics**: record count, size, null and NaN counts, and bounds (Iceberg's binary
single-value form) from lakelock's (:mod:`lakelock._stats`). **Types**: an unsigned integer is
declared as the signed type one size up (:func:`~lakelock._mirror._versions.signed_holding`).
"""

from __future__ import annotations

import io
import itertools
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._datasets import Progress
from lakelock._engines import require
from lakelock._layout import (
    files_prefix,
    iceberg_engine_prefix,
    iceberg_list_key,
    iceberg_location,
    iceberg_manifest_key,
    iceberg_metadata_key,
    iceberg_metadata_prefix,
)
from lakelock._mirror._series import newest, numbered
from lakelock._mirror._versions import (
    SchemaOf,
    VersionChange,
    changes,
    check_view_schema,
    pending,
    signed_holding,
)
from lakelock._names import parse_partition_path, parse_partition_value
from lakelock._registry import Registry
from lakelock._registry._snapshot import DatasetEntry
from lakelock._s3 import ObjectStore
from lakelock.errors import AlreadyExistsError, InvalidNameError, SchemaMismatchError

__all__ = [
    "column_ids",
    "engine_properties",
    "iceberg_pass",
    "iceberg_schema",
    "staged_metadata",
    "with_field_ids",
]

_NAMESPACE = uuid.UUID("0c5c1e3a-2f6e-4d8e-9c1d-3b9e2f4a7d11")
_PARTITION_FIELD_BASE = 1000
_NESTED_SHIFT = 16
_FIELD_ID = b"PARQUET:field_id"
#: The field metadata an Arrow field keeps its Iceberg ``doc`` in (pyiceberg's own key, both
#: ways): the comment an engine gave a column through the catalog, which the views carry.
_DOC = b"doc"
#: Earlier metadata files a metadata.json names (Iceberg's write.metadata.previous-versions-max).
METADATA_LOG = 100


#: Iceberg's reserved table properties: they steer a create or an update, and a table's
#: metadata never holds them (the table spec, "Reserved table properties").
_RESERVED = frozenset(
    {
        "format-version",
        "uuid",
        "snapshot-count",
        "current-snapshot-id",
        "current-snapshot-summary",
        "current-snapshot-timestamp-ms",
        "current-schema",
        "default-partition-spec",
        "default-sort-order",
    }
)


def _dataset_properties(recorded: Mapping[str, str]) -> dict[str, str]:
    """The properties a dataset records (``lake.set_properties``, a catalog's create or
    set-properties) as its view's table properties: all but Iceberg's reserved ones (those
    the view derives are written over them)."""
    return {name: value for name, value in recorded.items() if name not in _RESERVED}


def engine_properties(root: str, dataset: str) -> dict[str, str]:
    """The table properties that steer an engine writing through ``lakelock catalog`` to what
    a lakelock commit can hold (``root``: ``s3://<bucket>/<lake prefix>``): data files under
    the dataset's own folder, Hive-style by partition (no object-storage hashing), parquet;
    deletes, updates and merges by rewriting files (copy-on-write: lakelock has no row-level
    delete files); the engine's manifests beside the view, never among its metadata files."""
    return {
        "write.data.path": f"{root}{files_prefix(dataset)}".rstrip("/"),
        "write.metadata.path": f"{root}{iceberg_engine_prefix(dataset)}".rstrip("/"),
        "write.object-storage.enabled": "false",
        "write.format.default": "parquet",
        "write.delete.mode": "copy-on-write",
        "write.update.mode": "copy-on-write",
        "write.merge.mode": "copy-on-write",
    }


def staged_metadata(root: str, dataset: str, schema: pa.Schema, partition_by: Sequence[str]) -> Any:
    """The metadata (pyiceberg ``TableMetadata``) of a table not yet created, as its view
    will have it once created (same uuid, location, field ids, partition spec and properties)
    but without snapshots: what ``lakelock catalog`` answers a staged create with (CREATE
    TABLE AS SELECT), so the engine writes its files as the view reads them."""
    from pyiceberg.table.metadata import TableMetadataUtil  # noqa: PLC0415 - extra
    from pyiceberg.table.name_mapping import create_mapping_from_schema  # noqa: PLC0415
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER  # noqa: PLC0415

    iceberg = iceberg_schema(schema, 0)
    spec = _spec(iceberg, partition_by)
    location = f"{root}{iceberg_location(dataset)}"
    return TableMetadataUtil.parse_obj(
        {
            "format-version": 2,
            "table-uuid": str(uuid.uuid5(_NAMESPACE, location)),
            "location": location,
            "last-sequence-number": 0,
            "last-updated-ms": 0,
            "last-column-id": _max_id(iceberg),
            "schemas": [iceberg.model_dump(by_alias=True, exclude_none=True)],
            "current-schema-id": 0,
            "partition-specs": [spec.model_dump(by_alias=True)],
            "default-spec-id": 0,
            "last-partition-id": _PARTITION_FIELD_BASE + len(partition_by) - 1,
            "properties": {
                "schema.name-mapping.default": create_mapping_from_schema(
                    iceberg
                ).model_dump_json(),
                "lakelock.dataset": dataset,
                **engine_properties(root, dataset),
            },
            "sort-orders": [UNSORTED_SORT_ORDER.model_dump(by_alias=True)],
            "default-sort-order-id": 0,
        }
    )


def with_field_ids(schema: pa.Schema, ids: Mapping[str, int] | None = None) -> pa.Schema:
    """``schema`` with lakelock's Iceberg field ids (module docstring; ``ids``: each
    column's, by name, else its position + 1) as ``PARQUET:field_id`` metadata, in the
    types Iceberg has."""
    fields = []
    for i, field in enumerate(schema):
        field_id = ids[field.name] if ids is not None else i + 1
        counter = itertools.count(field_id << _NESTED_SHIFT)
        fields.append(_with_id(field, field_id, counter))
    return pa.schema(fields)


def column_ids(previous: Any, schema: pa.Schema) -> dict[str, int]:
    """The field id of each column of ``schema`` in a view whose newest metadata is
    ``previous`` (pyiceberg ``TableMetadata``; None: a new view): the id its name had, else
    a new one (module docstring)."""
    known, next_id = _known_ids(previous)
    ids = {}
    for name in schema.names:
        if name not in known:
            known[name] = next_id
            next_id += 1
        ids[name] = known[name]
    return ids


def _known_ids(previous: Any) -> tuple[dict[str, int], int]:
    """Each name the view's schemas hold with its id, and the next new id. The first schema
    (by id) to hold a name gives its id; a name whose id an earlier name holds (a view
    mirrored before ids were kept by name) gets a new one."""
    if previous is None:
        return {}, 1
    schemas = sorted(previous.schemas, key=lambda s: int(s.schema_id))
    top = max([int(f.field_id) for s in schemas for f in s.fields] + [0])
    known: dict[str, int] = {}
    taken: set[int] = set()
    for s in schemas:
        for f in s.fields:
            if f.name in known:
                continue
            if f.field_id in taken:
                top += 1
                known[f.name] = top
            else:
                known[f.name] = int(f.field_id)
            taken.add(known[f.name])
    return known, top + 1


def _renumbered(schema: Any, known: Mapping[str, int]) -> Any:
    """``schema`` with each top-level column's id ``known[name]``, the fields nested in it
    moved along (a schema of a view mirrored before ids were kept by name); itself when
    nothing moves."""
    moves = {int(f.field_id): known[f.name] for f in schema.fields if known[f.name] != f.field_id}
    if not moves:
        return schema
    from pyiceberg.schema import Schema  # noqa: PLC0415 - extra

    document = schema.model_dump(by_alias=True, exclude_none=True)
    for field in document["fields"]:
        old = int(field["id"])
        new = moves.get(old)
        if new is not None:
            field["id"] = new
            field["type"] = _moved(field["type"], old << _NESTED_SHIFT, new << _NESTED_SHIFT)
    return Schema.model_validate(document)


def _moved(type_: Any, old: int, new: int) -> Any:
    """A nested type's document with its ids in ``[old, old + (1 << 16))`` moved to ``new``."""
    if not isinstance(type_, dict):
        return type_

    def move(value: int) -> int:
        return value - old + new if old <= value < old + (1 << _NESTED_SHIFT) else value

    moved = dict(type_)
    for name in ("element-id", "key-id", "value-id"):
        if name in moved:
            moved[name] = move(int(moved[name]))
    for name in ("element", "key", "value"):
        if name in moved:
            moved[name] = _moved(moved[name], old, new)
    if "fields" in moved:
        moved["fields"] = [
            {**f, "id": move(int(f["id"])), "type": _moved(f["type"], old, new)}
            for f in moved["fields"]
        ]
    return moved


def _with_id(field: Any, field_id: int, counter: Iterator[int]) -> Any:
    type_ = field.type
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    if pa.types.is_timestamp(type_):
        type_ = pa.timestamp("us", type_.tz)
    elif pa.types.is_unsigned_integer(type_):
        type_ = signed_holding(type_)
    elif pa.types.is_large_string(type_) or str(type_) == "string_view":
        type_ = pa.string()
    elif pa.types.is_large_binary(type_) or str(type_) == "binary_view":
        type_ = pa.binary()
    elif pa.types.is_struct(type_):
        type_ = pa.struct([_with_id(f, next(counter), counter) for f in type_])
    elif pa.types.is_list(type_) or pa.types.is_large_list(type_):
        type_ = pa.list_(_with_id(type_.value_field, next(counter), counter))
    elif pa.types.is_map(type_):
        key = _with_id(type_.key_field, next(counter), counter)
        item = _with_id(type_.item_field, next(counter), counter)
        type_ = pa.map_(key, item)
    metadata = {_FIELD_ID: str(field_id).encode()}
    doc = (field.metadata or {}).get(_DOC)
    if doc:
        metadata[_DOC] = doc
    return field.with_type(type_).with_metadata(metadata)


def iceberg_schema(schema: pa.Schema, schema_id: int, ids: Mapping[str, int] | None = None) -> Any:
    """The Iceberg schema of a dataset schema (field ids as :func:`with_field_ids`)."""
    pyarrow_io = require("pyiceberg.io.pyarrow", extra="iceberg", package="pyiceberg")
    check_view_schema(schema, "Iceberg")
    try:
        converted = pyarrow_io.pyarrow_to_schema(with_field_ids(schema, ids))
    except (TypeError, ValueError) as error:
        raise SchemaMismatchError(
            f"the schema has a type Iceberg cannot represent: {error}"
        ) from error
    return converted.model_copy(update={"schema_id": schema_id})


class _Output:
    """A pyiceberg OutputFile that keeps the bytes in memory (they are uploaded create-only
    by the caller)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.data = b""

    def __len__(self) -> int:
        return len(self.data)

    def exists(self) -> bool:
        return False

    def create(self, overwrite: bool = False) -> Any:
        output = self

        class _Stream(io.BytesIO):
            def close(self) -> None:
                output.data = self.getvalue()
                super().close()

        return _Stream()


class _Input:
    """A pyiceberg InputFile read through the lake's store."""

    def __init__(self, store: ObjectStore, location: str, key: str) -> None:
        self.location = location
        self._store = store
        self._key = key
        self._body: bytes | None = None

    def _bytes(self) -> bytes:
        if self._body is None:
            self._body = self._store.get(self._key).body
        return self._body

    def __len__(self) -> int:
        return len(self._bytes())

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> Any:
        return io.BytesIO(self._bytes())


class _StoreIO:
    """Just enough of a pyiceberg FileIO to read manifests through the store."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._root = f"s3://{store.bucket}/{store.prefix}"

    def key(self, location: str) -> str:
        if not location.startswith(self._root):
            raise InvalidNameError(location, "not a location of this lake")
        return location[len(self._root) :]

    def uri(self, key: str) -> str:
        return f"{self._root}{key}"

    def new_input(self, location: str) -> _Input:
        return _Input(self._store, location, self.key(location))


def iceberg_pass(
    registry: Registry,
    store: ObjectStore,
    dataset: str,
    entry: DatasetEntry,
    progress: Progress | None,
    *,
    since: int | None = None,
) -> str | None:
    """One pass of the Iceberg mirror: the new versions of ``dataset`` written, the key of
    the newest metadata.json; ``None`` when another mirror's view differs from the one this
    pass read (:func:`~._series.restarting` starts over). ``since``: a version the caller
    saw mirrored (a hint for finding the newest)."""
    metadata_module = require("pyiceberg.table.metadata", extra="iceberg", package="pyiceberg")
    prefix = iceberg_metadata_prefix(dataset)
    top = newest(store, prefix, numbered(".metadata.json"), since=since)
    previous = None
    key: str | None = None
    if top is not None:
        key = top[1]
        previous = metadata_module.TableMetadataUtil.parse_raw(store.get(key).body.decode())
    root, _ = registry._current()
    writer = _Writer(store, dataset, registry._settings_of(root).retention, root.vacuum_horizon)
    steps = pending(registry.internals.objects, entry, top[0] if top else None)
    schema_of = SchemaOf(registry)
    for done, (_, snap, parent) in enumerate(steps):
        change = changes(registry.internals.objects, snap, parent, schema_of=schema_of)
        result = writer.version(change, previous, key)
        if result is None:
            return None
        previous, key = result
        if progress is not None:
            progress(done + 1, len(steps))
    assert key is not None, "a dataset has at least one version"
    return key


def _expire(snapshots: list[Any], log: list[Any], *, horizon: int) -> tuple[list[Any], list[Any]]:
    """The snapshots (and log entries) a reader may still ask for: the newest, and each one
    whose successor came at or after ``horizon`` (ms). lakelock refuses to read a version
    replaced before its retention (vacuum may have deleted its files), so the view drops it
    too; the horizon is the new version's time less the retention, the same for every
    writer, so racing mirrors still write the same metadata."""
    kept = [
        s
        for s, successor in zip(snapshots, [*snapshots[1:], None], strict=True)
        if successor is None or successor.timestamp_ms >= horizon
    ]
    ids = {s.snapshot_id for s in kept}
    return kept, [e for e in log if e.snapshot_id in ids]


class _Writer:
    def __init__(
        self,
        store: ObjectStore,
        dataset: str,
        retention: float,
        vacuum_horizon: float | None = None,
    ) -> None:
        self.store = store
        self.dataset = dataset
        self.retention = retention
        self.vacuum_horizon = vacuum_horizon
        self.io = _StoreIO(store)
        self.root = f"s3://{store.bucket}/{store.prefix}"
        self.location = f"{self.root}{iceberg_location(dataset)}"

    def uri(self, key: str) -> str:
        return f"{self.root}{key}"

    def _horizon(self, ms: int) -> int:
        """Before when (ms) a snapshot's successor came makes it one no reader may ask for:
        the version's time less the retention, or the horizon of the last vacuum the root
        records if later (a vacuum with a shorter window removed those: FORMAT.md rule 9)."""
        horizon = ms - round(1000 * self.retention)
        if self.vacuum_horizon is not None:
            horizon = max(horizon, round(1000 * self.vacuum_horizon))
        return horizon

    def version(
        self, change: VersionChange, previous: Any, previous_key: str | None
    ) -> tuple[Any, str] | None:
        """Write the objects of one version; the new metadata and its key, or None if another
        writer's metadata for it differs (start over)."""
        from pyiceberg.manifest import write_manifest_list  # noqa: PLC0415 - extra
        from pyiceberg.table.metadata import TableMetadataUtil  # noqa: PLC0415
        from pyiceberg.table.name_mapping import create_mapping_from_schema  # noqa: PLC0415
        from pyiceberg.table.refs import SnapshotRef, SnapshotRefType  # noqa: PLC0415
        from pyiceberg.table.snapshots import (  # noqa: PLC0415
            MetadataLogEntry,
            Operation,
            Snapshot,
            SnapshotLogEntry,
            Summary,
        )
        from pyiceberg.table.sorting import UNSORTED_SORT_ORDER  # noqa: PLC0415

        arrow = change.schema if change.schema is not None else pa.schema([])
        known, _ = _known_ids(previous)
        ids = column_ids(previous, arrow)
        known.update(ids)
        schemas = [_renumbered(s, known) for s in previous.schemas] if previous else []
        schema = iceberg_schema(arrow, 0, ids)
        schema_id = next(
            (int(s.schema_id) for s in schemas if s.as_struct() == schema.as_struct()),
            max([int(s.schema_id) for s in schemas], default=-1) + 1,
        )
        schema = schema.model_copy(update={"schema_id": schema_id})
        spec = _spec(schema, change.partition_by)
        sid = change.version
        sequence = (previous.last_sequence_number if previous is not None else 0) + 1
        parent_sid = previous.current_snapshot_id if previous is not None else None
        live = self._live_manifests(change, previous, spec, schema, arrow)
        list_key = iceberg_list_key(self.dataset, change.version)
        output = _Output(self.uri(list_key))
        with write_manifest_list(2, cast(Any, output), sid, parent_sid, sequence, "deflate") as lw:
            lw.add_manifests(live)
        self._create(list_key, output.data)
        ms = round(change.at * 1000)
        added_records = sum(f.record_count for f in change.added)
        removed_records = sum(f.record_count for f in change.removed)
        operation = (
            Operation.APPEND
            if not change.removed
            else Operation.DELETE
            if not change.added
            else Operation.OVERWRITE
        )
        summary = Summary(
            operation=operation,
            **{
                "lakelock.version": str(change.version),
                "lakelock.operation": change.operation,
                "added-data-files": str(len(change.added)),
                "deleted-data-files": str(len(change.removed)),
                "added-records": str(added_records),
                "deleted-records": str(removed_records),
            },
        )
        snapshot = Snapshot.model_validate(
            {
                "snapshot-id": sid,
                "parent-snapshot-id": parent_sid,
                "sequence-number": sequence,
                "timestamp-ms": ms,
                "manifest-list": self.uri(list_key),
                "summary": summary,
                "schema-id": schema_id,
            }
        )
        if all(s.schema_id != schema_id for s in schemas):
            schemas.append(schema)
        snapshots = [*(previous.snapshots if previous is not None else []), snapshot]
        log = [*(previous.snapshot_log if previous is not None else [])]
        log.append(SnapshotLogEntry(**{"snapshot-id": sid, "timestamp-ms": ms}))
        metadata_log = [*(previous.metadata_log if previous is not None else [])]
        if previous is not None and previous_key is not None:
            metadata_log.append(
                MetadataLogEntry(
                    **{
                        "metadata-file": self.uri(previous_key),
                        "timestamp-ms": previous.last_updated_ms,
                    }
                )
            )
        snapshots, log = _expire(snapshots, log, horizon=self._horizon(ms))
        metadata_log = metadata_log[-METADATA_LOG:]
        table_uuid = uuid.uuid5(_NAMESPACE, self.location)
        metadata = TableMetadataUtil.parse_obj(
            {
                "format-version": 2,
                "table-uuid": str(table_uuid),
                "location": self.location,
                "last-sequence-number": sequence,
                "last-updated-ms": ms,
                "last-column-id": max(
                    [_max_id(s) for s in schemas]
                    + [previous.last_column_id if previous is not None else 0],
                ),
                "schemas": [s.model_dump(by_alias=True, exclude_none=True) for s in schemas],
                "current-schema-id": schema_id,
                "partition-specs": [spec.model_dump(by_alias=True)],
                "default-spec-id": 0,
                "last-partition-id": _PARTITION_FIELD_BASE + len(change.partition_by) - 1,
                "properties": {
                    # The dataset's own (lake.set_properties, a catalog's set-properties),
                    # under those the view derives.
                    **_dataset_properties(change.properties),
                    # Every column ever known: a restore may go back to fewer columns
                    # while files of other snapshots have more.
                    "schema.name-mapping.default": create_mapping_from_schema(
                        _every_column(schemas)
                    ).model_dump_json(),
                    "lakelock.dataset": self.dataset,
                    **engine_properties(self.root, self.dataset),
                },
                "current-snapshot-id": sid,
                "snapshots": [s.model_dump(by_alias=True, exclude_none=True) for s in snapshots],
                "snapshot-log": [e.model_dump(by_alias=True) for e in log],
                "metadata-log": [e.model_dump(by_alias=True) for e in metadata_log],
                "sort-orders": [UNSORTED_SORT_ORDER.model_dump(by_alias=True)],
                "default-sort-order-id": 0,
                "refs": {
                    "main": SnapshotRef.model_validate(
                        {"snapshot-id": sid, "type": SnapshotRefType.BRANCH}
                    ).model_dump(by_alias=True, exclude_none=True)
                },
            }
        )
        key = iceberg_metadata_key(self.dataset, change.version)
        if not self._create(key, metadata.model_dump_json().encode()):
            return TableMetadataUtil.parse_raw(self.store.get(key).body.decode()), key
        return metadata, key

    def _live_manifests(
        self, change: VersionChange, previous: Any, spec: Any, schema: Any, arrow: pa.Schema
    ) -> list[Any]:
        """The manifests of the new snapshot: the previous ones, those holding a removed file
        rewritten, and one of the added files (each new one created)."""
        from pyiceberg.manifest import (  # noqa: PLC0415 - extra
            ManifestEntryStatus,
            read_manifest_list,
            write_manifest,
        )

        sid = change.version
        carried: list[Any] = []
        if previous is not None and previous.current_snapshot_id is not None:
            current = previous.snapshot_by_id(previous.current_snapshot_id)
            carried = list(read_manifest_list(cast(Any, self.io.new_input(current.manifest_list))))
        removed = {self._file_path(f) for f in change.removed}
        live: list[Any] = []
        counter = itertools.count()
        for manifest in carried:
            if not removed or not _may_hold(manifest, spec, schema, change.removed, arrow):
                live.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(self.io, discard_deleted=True)
            if not any(e.data_file.file_path in removed for e in entries):
                live.append(manifest)
                continue
            key = iceberg_manifest_key(self.dataset, change.version, next(counter))
            output = _Output(self.uri(key))
            with write_manifest(2, spec, schema, cast(Any, output), sid, "deflate") as w:
                for e in entries:
                    if e.data_file.file_path in removed:
                        w.delete(e)
                    else:
                        w.existing(e)
            rewritten = w.to_manifest_file()
            if rewritten.existing_files_count or rewritten.deleted_files_count:
                live.append(self._put_manifest(key, output, rewritten))
        if change.added:
            key = iceberg_manifest_key(self.dataset, change.version, next(counter))
            output = _Output(self.uri(key))
            with write_manifest(2, spec, schema, cast(Any, output), sid, "deflate") as w:
                for f in change.added:
                    w.add(_entry(self._data_file(f, schema, spec, arrow), sid, ManifestEntryStatus))
            live.append(self._put_manifest(key, output, w.to_manifest_file()))
        # Deleted entries are kept only in the snapshot that deletes them.
        live = [m for m in live if m.added_snapshot_id == sid or _has_live(m)]
        return live

    def _file_path(self, f: DataFile) -> str:
        return f"s3://{self.store.bucket}/{self.store.full_key(f.key)}"

    def _data_file(self, f: DataFile, schema: Any, spec: Any, arrow: pa.Schema) -> Any:
        from pyiceberg.conversions import to_bytes  # noqa: PLC0415
        from pyiceberg.manifest import DataFile as IcebergFile  # noqa: PLC0415
        from pyiceberg.manifest import DataFileContent, FileFormat  # noqa: PLC0415
        from pyiceberg.typedef import Record  # noqa: PLC0415

        values = _partition_record(f, spec, schema, arrow)
        nulls: dict[int, int] = {}
        nans: dict[int, int] = {}
        lows: dict[int, bytes] = {}
        highs: dict[int, bytes] = {}
        for column in f.stats.columns if f.stats is not None else ():
            if arrow.get_field_index(column.name) < 0:
                continue
            field = schema.find_field(column.name)
            field_id = field.field_id
            type_ = field.field_type
            if column.nulls is not None:
                nulls[field_id] = column.nulls
            if column.nans is not None:
                nans[field_id] = column.nans
            if column.min is not None and column.max is not None:
                try:
                    lows[field_id] = to_bytes(type_, column.min)
                    highs[field_id] = to_bytes(type_, column.max)
                except (TypeError, ValueError, OverflowError, Exception):
                    lows.pop(field_id, None)
        return IcebergFile.from_args(
            content=DataFileContent.DATA,
            file_path=self._file_path(f),
            file_format=FileFormat.PARQUET,
            partition=Record(*values),
            record_count=f.record_count,
            file_size_in_bytes=f.size,
            column_sizes=None,
            value_counts=None,
            null_value_counts=nulls or None,
            nan_value_counts=nans or None,
            lower_bounds=lows or None,
            upper_bounds={k: v for k, v in highs.items() if k in lows} or None,
            key_metadata=None,
            split_offsets=None,
            equality_ids=None,
            sort_order_id=None,
            spec_id=0,
        )

    def _put_manifest(self, key: str, output: _Output, manifest: Any) -> Any:
        if self._create(key, output.data):
            return manifest
        # Another mirror's manifest for the same version and files: its length is its own.
        size = self.store.head(key).size
        return manifest.__class__.from_args(
            **{name: getattr(manifest, name) for name in _MANIFEST_FIELDS}, manifest_length=size
        )

    def _create(self, key: str, body: bytes) -> bool:
        try:
            self.store.put(key, body, mode="create", content_type="application/octet-stream")
        except AlreadyExistsError:
            return False
        return True


_MANIFEST_FIELDS = (
    "manifest_path",
    "partition_spec_id",
    "content",
    "sequence_number",
    "min_sequence_number",
    "added_snapshot_id",
    "added_files_count",
    "existing_files_count",
    "deleted_files_count",
    "added_rows_count",
    "existing_rows_count",
    "deleted_rows_count",
    "partitions",
    "key_metadata",
)


def _entry(data_file: Any, sid: int, status: Any) -> Any:
    from pyiceberg.manifest import ManifestEntry  # noqa: PLC0415

    return ManifestEntry.from_args(
        status=status.ADDED, snapshot_id=sid, sequence_number=None, data_file=data_file
    )


def _has_live(manifest: Any) -> bool:
    return bool((manifest.added_files_count or 0) + (manifest.existing_files_count or 0))


def _every_column(schemas: Sequence[Any]) -> Any:
    """One schema of every column the view's schemas hold (by id; a newer schema's field
    replaces an older one's): what the name mapping maps."""
    from pyiceberg.schema import Schema  # noqa: PLC0415 - extra

    fields: dict[int, Any] = {}
    for s in sorted(schemas, key=lambda s: int(s.schema_id)):
        for f in s.fields:
            fields[int(f.field_id)] = f
    return Schema(*(fields[i] for i in sorted(fields)))


def _max_id(schema: Any) -> int:
    return int(schema.highest_field_id)


def _spec(schema: Any, partition_by: Sequence[str]) -> Any:
    from pyiceberg.partitioning import PartitionField, PartitionSpec  # noqa: PLC0415
    from pyiceberg.transforms import IdentityTransform  # noqa: PLC0415

    fields = [
        PartitionField(
            source_id=schema.find_field(column).field_id,
            field_id=_PARTITION_FIELD_BASE + i,
            transform=IdentityTransform(),
            name=column,
        )
        for i, column in enumerate(partition_by)
    ]
    return PartitionSpec(*fields, spec_id=0)


def _partition_record(f: DataFile, spec: Any, schema: Any, arrow: pa.Schema) -> list[Any]:
    from pyiceberg.partitioning import partition_record_value  # noqa: PLC0415

    texts = dict(parse_partition_path(f.partition_path))
    values: list[Any] = []
    for field in spec.fields:
        column = field.name
        text = texts.get(column)
        if text is None:
            values.append(None)
            continue
        value = parse_partition_value(text, arrow.field(column).type).as_py()
        values.append(partition_record_value(field, value, schema))
    return values


def _may_hold(
    manifest: Any, spec: Any, schema: Any, removed: Sequence[DataFile], arrow: pa.Schema
) -> bool:
    """Whether ``manifest``'s partition ranges may hold a file of ``removed`` (always, for an
    unpartitioned dataset or a manifest without ranges)."""
    from pyiceberg.conversions import from_bytes  # noqa: PLC0415

    summaries = manifest.partitions or []
    if not spec.fields or len(summaries) != len(spec.fields):
        return True
    types = [schema.find_field(field.source_id).field_type for field in spec.fields]
    for f in removed:
        values = _partition_record(f, spec, schema, arrow)
        inside = True
        for value, summary, type_ in zip(values, summaries, types, strict=True):
            if value is None:
                inside = inside and bool(summary.contains_null)
                continue
            if summary.lower_bound is None or summary.upper_bound is None:
                continue
            low = from_bytes(type_, summary.lower_bound)
            high = from_bytes(type_, summary.upper_bound)
            inside = inside and low <= value <= high
        if inside:
            return True
    return False
