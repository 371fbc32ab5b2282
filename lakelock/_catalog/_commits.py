"""An engine's Iceberg commit, read as the lakelock commit it stands for (pure of HTTP).

An engine commits to an Iceberg REST catalog by sending *requirements* (what it assumed of
the table) and *updates*; for data, an ``add-snapshot`` whose manifest list it wrote itself,
and ``set-snapshot-ref`` moving ``main`` to it. :func:`plan_commit` turns one table's request
into what a lakelock commit needs: the files the snapshots added (ADDED entries of the
snapshot, read with pyiceberg's manifest readers), the files they removed (DELETED entries),
the columns added (``add-schema``), the properties set. Several snapshots in one request
(pyiceberg's overwrite: a delete, then an append) make one commit; a file one of them adds
and a later one deletes is neither.

What a lakelock dataset cannot hold is refused (:class:`~._protocol.CatalogError` 400, naming
it) before anything is written: delete files (merge-on-read), data files of another format or
outside the dataset's folder, non-identity partition transforms or other partition columns,
renamed, retyped, dropped or reordered columns, sort orders, branches, tags, rollbacks and
snapshot expiry (lakelock keeps versions by its retention). A manifest list that does not
exist, lies outside the lake or is over ``MAX_MANIFEST`` (it is read whole) is a 400 as
well: nothing is half-applied, because nothing but the placed files (below) is written
until the one commit.

Each added file is read once, streamed a chunk at a time through its SHA-256 (the checksum
lakelock verifies on every read), so the memory a file holds is one chunk whatever its size
(Iceberg's default target is 512 MB); its size is checked against the manifest, and its row
count, read from its parquet footer alone (a ranged GET of its tail; a footer over
``MAX_FOOTER`` is refused, not read), too, and its columns' types against the table's.
Its partition values and column statistics are the manifest's; a partition column the file
stores must hold only that value, by the footer's statistics (lakelock reads the partition's
value, Iceberg readers the stored one). An engine spells partition
folders its own way (pyiceberg and Java's URLEncoder write ``kind=a+b`` for ``"a b"``,
pyiceberg ``kind=null`` for a null), so the folder is never read: a file anywhere under the
dataset's folder whose key is not where lakelock keeps a file of its partition is copied
there server-side (create-only, and only the version that was hashed), the one write before
the commit.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from lakelock._catalog._protocol import CatalogError
from lakelock._datafile import DataFile
from lakelock._layout import data_file_key, files_prefix
from lakelock._mirror._iceberg import column_ids
from lakelock._names import (
    clashing_names,
    partition_path,
    require_named_columns,
    written_partition_path,
)
from lakelock._readable import unholdable
from lakelock._s3 import ObjectHead, ObjectStore
from lakelock._stats import ColumnStats, FileStats, truncate_lower, truncate_upper
from lakelock._stored_partitions import (
    MAX_FOOTER,
    FooterTooLong,
    NotParquet,
    contradiction,
    parquet_footer,
)
from lakelock.errors import (
    AlreadyExistsError,
    InvalidNameError,
    NotFoundError,
    PreconditionFailedError,
    StorageError,
)

__all__ = [
    "STEERED",
    "PlannedCommit",
    "arrow_schema",
    "check_column_names",
    "check_properties",
    "commit_id_of",
    "partition_columns_of",
    "plan_commit",
]

#: The table properties the catalog sets on every table (lakelock._mirror._iceberg.
#: engine_properties): a request may set them to these values, never to others.
STEERED = (
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.enabled",
    "write.format.default",
    "write.delete.mode",
    "write.update.mode",
    "write.merge.mode",
)

#: Added data files read at once (each streamed through its checksum, a chunk at a time).
READERS = 8

#: The largest manifest or manifest list the catalog reads. pyiceberg's Avro reader takes a
#: file whole, so each is held in memory; Iceberg's writers roll manifests at 8 MB
#: (``commit.manifest.target-size-bytes``), and a location may name any object of the lake (a
#: data file of gigabytes) or a file an engine's bug made huge.
MAX_MANIFEST = 64 * 1024 * 1024

#: The updates a commit may carry (the rest are refused by name).
_HANDLED = {
    "assign-uuid",
    "upgrade-format-version",
    "add-schema",
    "set-current-schema",
    "add-spec",
    "set-default-spec",
    "add-sort-order",
    "set-default-sort-order",
    "add-snapshot",
    "set-snapshot-ref",
    "set-location",
    "set-properties",
    "remove-properties",
}


@dataclass(frozen=True)
class PlannedCommit:
    """What one table's request commits: the operation's name in lakelock's log, the files
    it adds and removes, the dataset's schema with the added columns (None: unchanged), the
    properties it sets (None removes one), and the request the commit id is bound to (with
    the added files' contents: :meth:`~lakelock._registry._builder.CommitBuilder.bind`)."""

    operation: str
    add: tuple[DataFile, ...] = ()
    remove: tuple[str, ...] = ()
    schema: pa.Schema | None = None
    properties: dict[str, str | None] = field(default_factory=dict)
    request: dict[str, Any] = field(default_factory=dict)


def commit_id_of(parts: Iterable[object]) -> str:
    """The commit id of a request, from what names it uniquely (a snapshot: its id and
    manifest list; otherwise the request as sent and the version it was made against): the
    same snapshot sent again is recognised as committed, never applied twice. A change
    without one sent again against a later version has another id (docs/FORMAT.md, "Commit
    ids")."""
    digest = hashlib.sha256(orjson.dumps(list(parts), option=orjson.OPT_SORT_KEYS, default=str))
    return f"iceberg-{digest.hexdigest()[:40]}"


def check_properties(properties: Mapping[str, str], steered: Mapping[str, str]) -> None:
    """Refuse a property that would steer engines away from what lakelock can hold."""
    for name, value in properties.items():
        if name in steered and value != steered[name]:
            raise CatalogError.bad_request(
                f"table property {name}={value!r} is not supported: this catalog's tables "
                f"have {name}={steered[name]!r} (lakelock holds whole data files under the "
                "dataset's folder; no delete files)"
            )


def arrow_schema(schema: Any) -> pa.Schema:
    """An Iceberg schema as the dataset's Arrow schema: every column nullable (a lakelock
    column can be missing from older files), strings and binaries in their plain types."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow  # noqa: PLC0415 - extra

    converted = schema_to_pyarrow(schema, include_field_ids=False)
    return pa.schema([_plain(f).with_nullable(True) for f in converted])


def check_column_names(names: Sequence[str]) -> None:
    """The table's columns as a dataset takes them (400 otherwise, as the request's own
    fault: a 409 would tell the engine to refresh and retry, and a create's 409 reads as
    "Table already exists"): every column named, no two names one ignoring case."""
    try:
        require_named_columns(names, of="table's schema")
    except InvalidNameError as error:
        raise CatalogError.bad_request(str(error)) from error
    clash = clashing_names(names)
    if clash is not None:
        raise CatalogError.bad_request(
            f"columns {clash[0]!r} and {clash[1]!r} are one name ignoring case (engines read "
            "names so): a dataset's column names are unique ignoring case"
        )


def _plain(f: pa.Field) -> pa.Field:
    type_ = f.type
    if pa.types.is_large_string(type_) or str(type_) == "string_view":
        return f.with_type(pa.string())
    if pa.types.is_large_binary(type_) or str(type_) == "binary_view":
        return f.with_type(pa.binary())
    if pa.types.is_large_list(type_):
        return f.with_type(pa.list_(_plain(type_.value_field)))
    if pa.types.is_struct(type_):
        return f.with_type(pa.struct([_plain(c) for c in type_]))
    return f


def partition_columns_of(spec: Any, schema: Any) -> tuple[str, ...]:
    """The partition columns of an Iceberg spec: only identity transforms of top-level
    columns, which is what a lakelock partition is."""
    columns = []
    top = {f.field_id: f.name for f in schema.fields}
    for pf in spec.fields:
        if str(pf.transform) != "identity":
            raise CatalogError.bad_request(
                f"partition field {pf.name!r} uses the transform {pf.transform}: lakelock "
                "partitions by column values only (identity transforms)"
            )
        if pf.source_id not in top:
            raise CatalogError.bad_request(
                f"partition field {pf.name!r} is not a top-level column: lakelock partitions "
                "by top-level columns only"
            )
        columns.append(top[pf.source_id])
    return tuple(columns)


class _LakeIO:
    """Just enough of a pyiceberg FileIO to read an engine's manifests through the lake's
    store, refusing any location outside the lake."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.root = f"s3://{store.bucket}/{store.prefix}"

    def key(self, location: str, what: str) -> str:
        if not location.startswith(self.root) or len(location) == len(self.root):
            raise CatalogError.bad_request(f"{what} {location} is not in this lake ({self.root})")
        return location[len(self.root) :]

    def new_input(self, location: str) -> Any:
        """The manifest (or manifest list) at ``location``, read whole, which is what
        pyiceberg's Avro reader takes: so its size is bounded first (``MAX_MANIFEST``), and
        no more than the size seen is read (an object replaced meanwhile does not parse)."""
        key = self.key(location, "manifest")
        try:
            size = self.store.head(key).size
            if size > MAX_MANIFEST:
                raise CatalogError.bad_request(
                    f"manifest {location} is {size} bytes: the catalog reads none over "
                    f"{MAX_MANIFEST} (an engine splits a commit's files over several manifests)"
                )
            body = self.store.get(key, byte_range=(0, size)).body if size else b""
        except NotFoundError:
            raise CatalogError.bad_request(f"manifest {location} does not exist") from None
        return _Input(location, body)


class _Input:
    def __init__(self, location: str, body: bytes) -> None:
        self.location = location
        self._body = body

    def __len__(self) -> int:
        return len(self._body)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> Any:
        return io.BytesIO(self._body)


def plan_commit(
    store: ObjectStore,
    dataset: str,
    *,
    base: Any,
    arrow: pa.Schema,
    partition_by: Sequence[str],
    updates: Sequence[Any],
    steered: Mapping[str, str],
    partitions: Collection[str] = frozenset(),
) -> PlannedCommit:
    """What ``updates`` (pyiceberg's parsed ``TableUpdate`` models) commit to ``dataset``,
    whose current view is ``base`` (pyiceberg ``TableMetadata``), schema ``arrow``,
    partition columns ``partition_by`` and partitions ``partitions`` (their paths). Raises
    :class:`CatalogError` (400) for anything lakelock cannot represent (a file added to a
    partition new to the dataset whose values are not Unicode NFC among them, as rows
    written are refused); copies nothing of a file it refuses and commits nothing."""
    from pyiceberg.table.update import (  # noqa: PLC0415 - extra
        AddSchemaUpdate,
        AddSnapshotUpdate,
        SetCurrentSchemaUpdate,
        SetSnapshotRefUpdate,
    )

    for update in updates:
        if update.action not in _HANDLED:
            raise CatalogError.bad_request(
                f"update {update.action!r} is not supported: lakelock keeps its versions by "
                "its own retention, on one branch (main), and never edits statistics files"
            )
    added_schemas = [u.schema_ for u in updates if isinstance(u, AddSchemaUpdate)]
    schema = base.schema()
    for update in updates:
        if isinstance(update, SetCurrentSchemaUpdate):
            schema = _schema_named(update.schema_id, added_schemas, base)
    new_arrow = _evolved(base.schema(), schema, arrow) if schema is not base.schema() else None
    _check_layout(updates, base, schema, partition_by, steered)
    properties = _properties(updates, steered)

    snapshots = [u.snapshot for u in updates if isinstance(u, AddSnapshotUpdate)]
    refs = [u for u in updates if isinstance(u, SetSnapshotRefUpdate)]
    for ref in refs:
        if ref.ref_name != "main" or str(ref.type) != "branch":
            raise CatalogError.bad_request(
                f"set-snapshot-ref {ref.ref_name!r} ({ref.type}): lakelock has one branch, "
                "main (no other branches or tags)"
            )
    parent = base.current_snapshot_id
    for snapshot in snapshots:
        if snapshot.parent_snapshot_id != parent:
            raise CatalogError(
                409,
                "CommitFailedException",
                f"snapshot {snapshot.snapshot_id}'s parent is {snapshot.parent_snapshot_id}, "
                f"main is at {parent}: refresh the table and retry",
            )
        parent = snapshot.snapshot_id
    if refs and refs[-1].snapshot_id != parent:
        raise CatalogError.bad_request(
            f"set-snapshot-ref main to {refs[-1].snapshot_id}: main may only move to the "
            "snapshot this commit adds (a rollback is lakelock's restore)"
        )
    if snapshots and not refs:
        raise CatalogError.bad_request("add-snapshot without set-snapshot-ref main")

    written = schema if new_arrow is not None else base.schema()
    field_ids = _check_field_ids(
        written, column_ids(base, new_arrow if new_arrow is not None else arrow), files=snapshots
    )
    io_ = _LakeIO(store)
    added: dict[str, Any] = {}
    removed: dict[str, None] = {}
    for snapshot in snapshots:
        adds, deletes = _entries(io_, snapshot)
        for path in deletes:
            if path in added:
                del added[path]  # added earlier in this very request
            else:
                removed[path] = None
        added.update(adds)
    keys_removed = tuple(_data_key(io_, dataset, path) for path in removed)
    files = _data_files(
        io_,
        dataset,
        list(added.values()),
        schema=written,
        arrow=new_arrow or arrow,
        partition_by=partition_by,
        field_ids=field_ids,
        partitions=partitions,
    )
    operation = _operation(files, keys_removed, schema_changed=new_arrow is not None)
    # As lakelock.dask's: the request, and the files by their partitions and checksums.
    request = {
        "remove": sorted(keys_removed),
        "schema": None if new_arrow is None else str(new_arrow),
        "properties": properties,
    }
    return PlannedCommit(
        operation=operation,
        add=tuple(files),
        remove=keys_removed,
        schema=new_arrow,
        properties=properties,
        request=request,
    )


def _schema_named(schema_id: int, added: Sequence[Any], base: Any) -> Any:
    if schema_id == -1:
        if not added:
            raise CatalogError.bad_request("set-current-schema -1 without add-schema")
        return added[-1]
    for s in [*added, *base.schemas]:
        if s.schema_id == schema_id:
            return s
    raise CatalogError.bad_request(f"set-current-schema {schema_id}: no such schema")


def _evolved(old: Any, new: Any, arrow: pa.Schema) -> pa.Schema | None:
    """The dataset's Arrow schema after ``old`` became ``new`` (None: the same columns), or
    :class:`CatalogError` for what lakelock does not do: only new optional top-level columns
    after the existing ones, no column made required (nor, so, an identifier field: Iceberg's
    are required), a change the dataset cannot record refused, never answered as committed
    and left out."""
    old_fields = list(old.fields)
    new_fields = list(new.fields)
    by_id = {f.field_id: f for f in new_fields}
    for f in old_fields:
        _check_kept(f, by_id.get(f.field_id))
    if [f.field_id for f in new_fields[: len(old_fields)]] != [f.field_id for f in old_fields]:
        raise CatalogError.bad_request("reordering columns is not supported")
    fresh = new_fields[len(old_fields) :]
    if not fresh:
        return None
    from pyiceberg.schema import Schema  # noqa: PLC0415 - extra

    for f in fresh:
        if f.required:
            raise CatalogError.bad_request(f"a new column must be optional: {f.name!r}")
    extra = arrow_schema(Schema(*fresh))
    check_column_names([*arrow.names, *extra.names])
    return pa.schema([*arrow, *extra])


def _check_kept(f: Any, now: Any) -> None:
    """The column ``f`` as the new schema has it (``now``: None, dropped) is unchanged, or
    :class:`CatalogError` naming the change."""
    if now is None:
        raise CatalogError.bad_request(f"dropping column {f.name!r} is not supported")
    if now.name != f.name:
        raise CatalogError.bad_request(
            f"renaming column {f.name!r} to {now.name!r} is not supported"
        )
    if _undocumented(now.field_type) != _undocumented(f.field_type):
        raise CatalogError.bad_request(
            f"changing the type of column {f.name!r} ({f.field_type} to "
            f"{now.field_type}) is not supported (nested fields cannot change either)"
        )
    if (now.doc or None) != (f.doc or None):
        raise CatalogError.bad_request(
            f"changing the doc of column {f.name!r} is not supported (a column keeps the "
            "doc it was created or added with)"
        )
    nested = _doc_changed(f.field_type, now.field_type)
    if nested is not None:
        raise CatalogError.bad_request(
            f"changing the doc of field {f'{f.name}.{nested}'!r} of column {f.name!r} is not "
            "supported (a field keeps the doc it was created or added with)"
        )
    if now.required and not f.required:
        raise CatalogError.bad_request(
            f"making column {f.name!r} required is not supported (a dataset's columns are "
            "nullable: a column added later is null in the files written before it)"
        )


def _undocumented(type_: Any) -> Any:
    """``type_`` with the docs of the fields nested in it dropped: what a type change is
    judged on (a doc change is refused as one, naming the field)."""
    from pyiceberg.types import ListType, MapType, StructType  # noqa: PLC0415 - extra

    if isinstance(type_, StructType):
        return StructType(
            *(
                f.model_copy(update={"field_type": _undocumented(f.field_type), "doc": None})
                for f in type_.fields
            )
        )
    if isinstance(type_, ListType):
        return type_.model_copy(update={"element_type": _undocumented(type_.element_type)})
    if isinstance(type_, MapType):
        return type_.model_copy(
            update={
                "key_type": _undocumented(type_.key_type),
                "value_type": _undocumented(type_.value_type),
            }
        )
    return type_


def _doc_changed(old: Any, new: Any) -> str | None:
    """The dotted path (below the column) of the first field nested in ``old`` whose doc
    ``new`` (the same type but for docs) changes, or ``None``."""
    from pyiceberg.types import ListType, MapType, StructType  # noqa: PLC0415 - extra

    pairs: list[tuple[str, Any, Any]] = []
    if isinstance(old, StructType) and isinstance(new, StructType):
        for was, now in zip(old.fields, new.fields, strict=True):
            if (was.doc or None) != (now.doc or None):
                return was.name
            pairs.append((was.name, was.field_type, now.field_type))
    elif isinstance(old, ListType) and isinstance(new, ListType):
        pairs.append(("element", old.element_type, new.element_type))
    elif isinstance(old, MapType) and isinstance(new, MapType):
        pairs += [("key", old.key_type, new.key_type), ("value", old.value_type, new.value_type)]
    for name, was, now in pairs:
        below = _doc_changed(was, now)
        if below is not None:
            return f"{name}.{below}"
    return None


def _check_layout(
    updates: Sequence[Any],
    base: Any,
    schema: Any,
    partition_by: Sequence[str],
    steered: Mapping[str, str],
) -> None:
    """The updates that must leave the table as lakelock has it: its uuid, location, format
    version, partitioning and (lack of) sort order."""
    from pyiceberg.table.update import (  # noqa: PLC0415 - extra
        AddPartitionSpecUpdate,
        AddSortOrderUpdate,
        AssignUUIDUpdate,
        SetDefaultSortOrderUpdate,
        SetDefaultSpecUpdate,
        SetLocationUpdate,
        UpgradeFormatVersionUpdate,
    )

    for update in updates:
        if isinstance(update, AssignUUIDUpdate) and update.uuid != base.table_uuid:
            raise CatalogError.bad_request(f"assign-uuid {update.uuid}: the table's is fixed")
        if isinstance(update, SetLocationUpdate) and update.location.rstrip("/") != base.location:
            raise CatalogError.bad_request(
                f"set-location {update.location}: the table's location is {base.location}"
            )
        if isinstance(update, UpgradeFormatVersionUpdate) and update.format_version != 2:
            raise CatalogError.bad_request(
                f"format version {update.format_version}: this catalog's tables are version 2"
            )
        if isinstance(update, AddPartitionSpecUpdate):
            columns = partition_columns_of(update.spec, schema)
            if tuple(columns) != tuple(partition_by):
                raise CatalogError.bad_request(
                    f"partitioning by {list(columns)}: the dataset is partitioned by "
                    f"{list(partition_by)}, and a lakelock dataset's partition columns never "
                    "change"
                )
        if isinstance(update, SetDefaultSpecUpdate) and update.spec_id not in (-1, 0):
            raise CatalogError.bad_request("the table has one partition spec (0)")
        if isinstance(update, AddSortOrderUpdate) and update.sort_order.fields:
            raise CatalogError.bad_request("sort orders are not supported (the table is unsorted)")
        if isinstance(update, SetDefaultSortOrderUpdate) and update.sort_order_id not in (-1, 0):
            raise CatalogError.bad_request("the table has one sort order (unsorted, 0)")


def _properties(updates: Sequence[Any], steered: Mapping[str, str]) -> dict[str, str | None]:
    from pyiceberg.table.update import (  # noqa: PLC0415 - extra
        RemovePropertiesUpdate,
        SetPropertiesUpdate,
    )

    properties: dict[str, str | None] = {}
    for update in updates:
        if isinstance(update, SetPropertiesUpdate):
            check_properties(update.updates, steered)
            properties.update(update.updates)
        if isinstance(update, RemovePropertiesUpdate):
            for name in update.removals:
                if _derived(name, steered):
                    raise CatalogError.bad_request(f"table property {name} cannot be removed")
                properties[name] = None
    return {name: value for name, value in properties.items() if not _derived(name, steered)}


def _derived(name: str, steered: Mapping[str, str]) -> bool:
    """A property the view derives (it is written with every version, never stored): those
    the catalog steers by, lakelock's own, and the name mapping (engines send back the one
    they loaded)."""
    return name in steered or name.startswith("lakelock.") or name == _NAME_MAPPING


_NAME_MAPPING = "schema.name-mapping.default"


def _check_field_ids(
    schema: Any, lakelock_ids: Mapping[str, int], *, files: Sequence[Any]
) -> dict[str, int]:
    """The field id of each top-level column, checked to be the view's (``lakelock_ids``)
    when the request adds snapshots: an engine's files carry the ids of the schema it wrote
    them with, and the view reads them by id. A schema change alone may number a new column
    as the engine likes (one added again after a restore dropped it gets its old id back):
    the answer carries the view's ids, which the engine writes with from then on."""
    ids = {f.name: f.field_id for f in schema.fields}
    if not files:
        return ids
    for name, expected in lakelock_ids.items():
        if ids.get(name) != expected:
            raise CatalogError.bad_request(
                f"column {name!r} has field id {ids.get(name)} where lakelock's is {expected}: "
                "commit the schema change alone, reload the table, then write"
            )
    return ids


def _entries(io_: _LakeIO, snapshot: Any) -> tuple[dict[str, Any], list[str]]:
    """The data files ``snapshot`` adds (by path) and the paths it deletes, from the
    manifests it wrote (entries of other snapshots are carried, not changed)."""
    from pyiceberg.manifest import (  # noqa: PLC0415 - extra
        ManifestContent,
        ManifestEntryStatus,
        read_manifest_list,
    )

    sid = snapshot.snapshot_id
    location = snapshot.manifest_list
    if not location:
        raise CatalogError.bad_request(f"snapshot {sid} has no manifest list")
    try:
        manifests = list(read_manifest_list(cast(Any, io_.new_input(location))))
    except (CatalogError, StorageError):
        # The store failing to hand it over says nothing of the request: not a 400, which
        # tells the engine its commit will never be taken (the server's answer: a 503).
        raise
    except Exception as error:  # the Avro reader's own errors: the file is not a list
        raise CatalogError.bad_request(
            f"manifest list {location} cannot be read: {error}"
        ) from error
    adds: dict[str, Any] = {}
    deletes: list[str] = []
    for manifest in manifests:
        if manifest.content != ManifestContent.DATA:
            raise CatalogError.bad_request(
                f"manifest {manifest.manifest_path} holds delete files: row-level deletes "
                "(merge-on-read) are not supported; the table's write.*.mode is copy-on-write"
            )
        if manifest.added_snapshot_id != sid:
            continue
        try:
            entries = manifest.fetch_manifest_entry(cast(Any, io_), discard_deleted=False)
        except (CatalogError, StorageError):
            raise
        except Exception as error:
            raise CatalogError.bad_request(
                f"manifest {manifest.manifest_path} cannot be read: {error}"
            ) from error
        for entry in entries:
            if entry.snapshot_id != sid:
                continue
            path = entry.data_file.file_path
            if entry.status == ManifestEntryStatus.ADDED:
                adds[path] = entry.data_file
            elif entry.status == ManifestEntryStatus.DELETED:
                deletes.append(path)
    return adds, deletes


def _data_key(io_: _LakeIO, dataset: str, path: str) -> str:
    key = io_.key(path, "data file")
    if not key.startswith(files_prefix(dataset)):
        raise CatalogError.bad_request(
            f"data file {path} is not in the dataset's folder {io_.root}{files_prefix(dataset)}"
        )
    return key


def _data_files(
    io_: _LakeIO,
    dataset: str,
    files: Sequence[Any],
    *,
    schema: Any,
    arrow: pa.Schema,
    partition_by: Sequence[str],
    field_ids: Mapping[str, int],
    partitions: Collection[str],
) -> list[DataFile]:
    """The lakelock records of the engine's added files, each streamed once through its
    checksum (size, then the parquet footer's row count). A file's partition is the
    manifest's partition values; one the engine wrote elsewhere under the dataset's folder
    (its own spelling of the values) is copied where lakelock keeps a file of that
    partition, which the commit names. A partition not among ``partitions`` (the dataset's)
    has values in Unicode NFC (:func:`~lakelock._names.written_partition_path`), as
    ``Registry.commit`` holds files another tool wrote: else a 400, before any copy."""
    from pyiceberg.manifest import DataFileContent, FileFormat  # noqa: PLC0415 - extra

    planned = []
    for f in files:
        if f.content != DataFileContent.DATA:
            raise CatalogError.bad_request(f"{f.file_path} is a delete file: not supported")
        if f.file_format != FileFormat.PARQUET:
            raise CatalogError.bad_request(
                f"{f.file_path} is {f.file_format}: lakelock datasets are parquet"
            )
        source = _data_key(io_, dataset, f.file_path)
        # The values, never the folder's spelling: pyiceberg and Java's URLEncoder write
        # kind=a+b for "a b", pyiceberg kind=null for a null; lakelock's folders differ.
        path = _partition_path(f, arrow, partition_by)
        try:
            if path not in partitions:
                written_partition_path(path)
            key = data_file_key(dataset, path, source.rsplit("/", 1)[-1], prefix=io_.store.prefix)
        except (InvalidNameError, ValueError) as error:
            raise CatalogError.bad_request(f"data file {f.file_path}: {error}") from error
        planned.append(_Planned(f, source, key, path))

    def record(item: _Planned) -> DataFile:
        return _record(
            io_.store,
            dataset,
            item,
            schema=schema,
            arrow=arrow,
            ids=field_ids,
            partition_by=partition_by,
        )

    if len(planned) <= 1:
        return [record(item) for item in planned]
    with ThreadPoolExecutor(min(READERS, len(planned))) as pool:
        return list(pool.map(record, planned))


@dataclass(frozen=True)
class _Planned:
    """An engine's added file (its manifest entry), where the engine wrote it (``source``),
    where lakelock keeps it (``key``) and its partition path."""

    entry: Any
    source: str
    key: str
    path: str


def _partition_path(f: Any, arrow: pa.Schema, partition_by: Sequence[str]) -> str:
    """lakelock's partition path for the manifest's partition values of ``f``."""
    record = f.partition
    values = [record[i] for i in range(len(partition_by))] if partition_by else []
    try:
        scalars = [
            pa.scalar(value, arrow.field(column).type)
            for column, value in zip(partition_by, values, strict=True)
        ]
        return partition_path(zip(partition_by, scalars, strict=True))
    except (InvalidNameError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as error:
        raise CatalogError.bad_request(
            f"data file {f.file_path}: partition values {values} cannot be a lakelock "
            f"partition: {error}"
        ) from error


def _record(
    store: ObjectStore,
    dataset: str,
    planned: _Planned,
    *,
    schema: Any,
    arrow: pa.Schema,
    ids: Mapping[str, int],
    partition_by: Sequence[str],
) -> DataFile:
    f = planned.entry
    try:
        head, digest = store.sha256(planned.source)
    except NotFoundError:
        raise CatalogError.bad_request(f"data file {f.file_path} does not exist") from None
    if head.size != f.file_size_in_bytes:
        raise CatalogError.bad_request(
            f"data file {f.file_path} is {head.size} bytes; the manifest says "
            f"{f.file_size_in_bytes}"
        )
    footer = _footer(store, planned.source, head.size, f.file_path)
    rows = footer.num_rows
    stored = footer.schema.to_arrow_schema()
    _check_types(stored, arrow, planned.path, f.file_path)
    _check_stored_partition(footer, f, arrow, partition_by)
    if rows != f.record_count:
        raise CatalogError.bad_request(
            f"data file {f.file_path} holds {rows} rows; the manifest says {f.record_count}"
        )
    checksum = f"sha256:{digest}"
    etag = head.etag if planned.key == planned.source else _placed(store, planned, head, digest)
    return DataFile(
        dataset=dataset,
        key=planned.key,
        partition_path=planned.path,
        size=head.size,
        record_count=rows,
        checksum=checksum,
        etag=etag,
        write_id=f"iceberg:{f.file_path.rsplit('/', 1)[-1]}",
        stats=_stats(f, schema, arrow, ids),
        schema=stored,
    )


def _footer(store: ObjectStore, key: str, size: int, path: str) -> pq.FileMetaData:
    """The parquet footer of the ``size``-byte file at ``key`` (:func:`parquet_footer`); a
    file that is not parquet, or declares a footer over ``MAX_FOOTER``, is a 400."""
    try:
        return parquet_footer(store, key, size)
    except NotParquet as error:
        raise CatalogError.bad_request(f"data file {path} is not parquet: {error}") from None
    except FooterTooLong as error:
        raise CatalogError.bad_request(
            f"data file {path} {error}: the catalog reads none over {MAX_FOOTER} (write "
            "fewer columns or row groups a file)"
        ) from None


def _check_types(stored: pa.Schema, dataset: pa.Schema, partition: str, path: str) -> None:
    """Refuse a file (in the partition at ``partition``) holding a column the dataset lacks
    (no read would return its values: an engine that wrote it before a restore dropped the
    column, or without adding it, would lose them unseen), or a column of which is stored in
    a type the dataset's cannot hold (:mod:`lakelock._readable`): every read of the dataset
    would fail on it once committed."""
    lacking = [name for name in stored.names if dataset.get_field_index(name) < 0]
    if lacking:
        renamed = _avro_spelling(lacking, dataset.names)
        if renamed is not None:
            raise CatalogError.bad_request(f"data file {path} {_RENAMED.format(*renamed)}")
        raise CatalogError.bad_request(
            f"data file {path} holds column {lacking[0]!r}, which the table lacks: add the "
            "column first (a schema change of its own), reload the table, then write"
        )
    found = unholdable(stored, dataset, partition)
    if found is not None:
        name, wanted = found
        stored_type = stored.field(name).type
        renamed = _avro_spelling(_field_names(stored_type), _field_names(wanted))
        if renamed is not None:
            raise CatalogError.bad_request(
                f"data file {path} (column {name!r}) {_RENAMED.format(*renamed)}"
            )
        raise CatalogError.bad_request(
            f"data file {path} stores column {name!r} as {stored_type}: the table's is "
            f"{wanted}, which cannot hold it"
        )


#: Why a file an engine stored a column or field of under its Avro spelling is refused.
_RENAMED = (
    "stores {0!r} as {1!r} (Iceberg writers so spell a name Avro cannot hold; readers "
    "match it by field id), but lakelock reads a file's columns and fields by name, so it "
    "would read none of its values: engines that rename it cannot write this table (a name "
    "of letters, digits and underscores, not starting with a digit, they write as it is)"
)


def _field_names(type_: pa.DataType) -> list[str]:
    """The names of the struct fields within ``type_``, however deep."""
    if pa.types.is_struct(type_):
        fields = [type_.field(i) for i in range(type_.num_fields)]
        return [name for f in fields for name in (f.name, *_field_names(f.type))]
    if pa.types.is_map(type_):
        return [*_field_names(type_.key_type), *_field_names(type_.item_type)]
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return _field_names(type_.value_type)
    return []


def _avro_spelling(stored: Iterable[str], table: Iterable[str]) -> tuple[str, str] | None:
    """A name of ``table``'s that the file stores (``stored``) only as Iceberg writers spell
    it for Avro (pyiceberg's ``make_compatible_name``: ``a b`` as ``a_x20b``), with that
    spelling; None if there is none."""
    from pyiceberg.schema import make_compatible_name  # noqa: PLC0415 - extra

    found = set(stored)
    for name in table:
        spelt = make_compatible_name(name)
        if spelt != name and spelt in found and name not in found:
            return name, spelt
    return None


def _check_stored_partition(
    footer: pq.FileMetaData, f: Any, arrow: pa.Schema, partition_by: Sequence[str]
) -> None:
    """Refuse a file that stores a partition column holding other values than the
    manifest's partition value (:func:`~lakelock._stored_partitions.contradiction`, the
    check ``registry.commit`` makes too). A value the column's type cannot hold is not
    judged."""
    values: dict[str, Any] = {}
    for i, column in enumerate(partition_by):
        try:
            values[column] = pa.scalar(f.partition[i], arrow.field(column).type).as_py()
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            continue
    found = contradiction(footer, values)
    if found is not None:
        column, value = found
        raise CatalogError.bad_request(
            f"data file {f.file_path} stores partition column {column!r} holding "
            f"{value!r} in a file of the partition {column}={values[column]!r}: lakelock "
            "reads a partition column from the partition, Iceberg readers from the "
            "file; write each partition's rows to its own files"
        )


def _placed(store: ObjectStore, planned: _Planned, source: ObjectHead, digest: str) -> str:
    """The ETag of the engine's file copied, server-side, to ``planned.key`` (create-only: a
    request sent again finds its own copy there, the same bytes; another file there is a
    400, the engine's file untouched). The copy is of the file as it was hashed
    (``source.etag``)."""
    try:
        return store.copy(planned.source, planned.key, source_etag=source.etag).etag
    except AlreadyExistsError:
        there, there_digest = store.sha256(planned.key)
        if (there.size, there_digest) != (source.size, digest):
            raise CatalogError.bad_request(
                f"data file {planned.entry.file_path} belongs at {planned.key}, where another "
                "file is: write it under another name"
            ) from None
        return there.etag
    except PreconditionFailedError:
        raise CatalogError.bad_request(
            f"data file {planned.entry.file_path} changed while the catalog read it"
        ) from None


def _stats(f: Any, schema: Any, arrow: pa.Schema, field_ids: Mapping[str, int]) -> FileStats:
    """The manifest's column statistics of ``f`` in lakelock's canonical form
    (:mod:`lakelock._stats`): null and NaN counts, and bounds of the types lakelock keeps."""
    from pyiceberg.conversions import from_bytes  # noqa: PLC0415 - extra

    nulls = f.null_value_counts or {}
    nans = f.nan_value_counts or {}
    lows = f.lower_bounds or {}
    highs = f.upper_bounds or {}
    columns = []
    for column in arrow:
        fid = field_ids.get(column.name)
        if fid is None:
            continue
        low = high = None
        if fid in lows and fid in highs:
            type_ = schema.find_field(fid).field_type
            try:
                low = _bound(column.type, from_bytes(type_, lows[fid]), upper=False)
                high = _bound(column.type, from_bytes(type_, highs[fid]), upper=True)
            except (TypeError, ValueError, OverflowError):
                low = high = None
            if low is None or high is None:
                low = high = None
        columns.append(
            ColumnStats(
                name=column.name,
                nulls=nulls.get(fid),
                nans=nans.get(fid) if pa.types.is_floating(column.type) else None,
                min=low,
                max=high,
            )
        )
    return FileStats(tuple(columns))


def _bound(type_: pa.DataType, value: Any, *, upper: bool) -> bool | int | float | str | None:
    """A bound as lakelock keeps it for ``type_`` (None: lakelock keeps none)."""
    if pa.types.is_boolean(type_):
        return bool(value)
    if pa.types.is_integer(type_) or pa.types.is_date(type_):
        return int(value)  # dates: days since the epoch, as Iceberg has them
    if pa.types.is_timestamp(type_) and type_.unit == "us":
        return int(value)  # microseconds, as Iceberg has them
    if pa.types.is_floating(type_):
        number = float(value)
        return number if math.isfinite(number) else None
    if pa.types.is_string(type_):
        text = str(value)
        return truncate_upper(text) if upper else truncate_lower(text)
    return None


def _operation(files: Sequence[DataFile], removed: Sequence[str], *, schema_changed: bool) -> str:
    """The commit's name in lakelock's log: what the engine's snapshots did together."""
    if files and removed:
        return "overwrite"
    if removed:
        return "delete"
    if files:
        return "append"
    return "add-columns" if schema_changed else "set-properties"
