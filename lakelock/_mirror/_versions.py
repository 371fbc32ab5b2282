"""The versions of a dataset a view has not mirrored yet, and what each changed.

A dataset's versions are its snapshots (one per registry version that changed it), linked
newest to oldest by ``parent``. :func:`pending` walks that chain back from the current
snapshot only as far as the newest version already mirrored, so mirroring one new version
reads one snapshot. :func:`changes` turns each step into the files it added and removed: the
two snapshots' partition tries are compared node by node, and identical subtrees (same
write-once node key) are skipped, so the cost is that of the partitions the version touched,
not of the dataset (a restore, which points back at an older trie, touches what differs).
A version's whole list of files (:func:`live_files`) is read only for a Delta checkpoint, and
a dataset committed without a schema has it read from one of its files (:class:`SchemaOf`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._datasets import recorded_schema
from lakelock._names import clashing_names
from lakelock._registry import Registry
from lakelock._registry._objects import Objects, partition_from_entry
from lakelock._registry._snapshot import DatasetEntry, Snapshot
from lakelock._registry._tree import EMPTY, Node, tree_items
from lakelock.errors import (
    NotFoundError,
    RegistryCorruptError,
    SchemaMismatchError,
    SnapshotExpiredError,
)

__all__ = [
    "SchemaOf",
    "VersionChange",
    "changes",
    "check_view_schema",
    "live_files",
    "pending",
    "signed_holding",
]


def check_view_schema(schema: pa.Schema, view: str) -> None:
    """Refuse (:class:`SchemaMismatchError`) a schema the ``view`` cannot take: its column
    names clash ignoring case (:func:`_check_view_names`), or a column's values are more than
    the view's types carry exactly (:func:`_check_view_types`)."""
    _check_view_names(schema, view)
    _check_view_types(schema, view)


def _check_view_names(schema: pa.Schema, view: str) -> None:
    """Refuse a schema whose column names clash ignoring case: a view's readers resolve
    names so (a dataset written before lakelock refused such tables may have them)."""
    clash = clashing_names(schema.names)
    if clash is not None:
        raise SchemaMismatchError(
            f"columns {clash[0]!r} and {clash[1]!r} are one name ignoring case, as {view} "
            "readers resolve names: rewrite the dataset with one of them renamed"
        )


def _check_view_types(schema: pa.Schema, view: str) -> None:
    """Refuse (:class:`SchemaMismatchError`, naming the column) a column, or a field nested
    in one, whose values the view's types cannot all carry: a timestamp in nanoseconds
    (Iceberg v2 and Delta hold microseconds: pyiceberg dropped the nanoseconds without a
    word, delta-rs failed the read) and a ``uint64`` (their widest integer is a signed
    64-bit one: a value past 2**63 - 1 failed delta-rs's read). A view is never wrong data."""
    for path, type_ in _leaves(schema):
        if pa.types.is_timestamp(type_) and type_.unit == "ns":
            raise SchemaMismatchError(
                f"column {path!r} is a timestamp in nanoseconds, and {view} holds "
                "microseconds only (a reader would drop the nanoseconds): write it as "
                "pa.timestamp('us') to mirror the dataset"
            )
        if pa.types.is_uint64(type_):
            raise SchemaMismatchError(
                f"column {path!r} is a uint64, and {view}'s widest integer is signed (a "
                "value past 2**63 - 1 would not read): write it as int64, or as "
                "decimal128(20, 0), to mirror the dataset"
            )


def _leaves(schema: pa.Schema) -> Iterator[tuple[str, Any]]:
    """Every column and nested field of ``schema`` as its dotted path and its type (a
    dictionary as its values' type)."""
    pending = [(f.name, f.type) for f in schema]
    while pending:
        path, type_ = pending.pop(0)
        if pa.types.is_dictionary(type_):
            type_ = type_.value_type
        yield path, type_
        if pa.types.is_struct(type_):
            pending += [(f"{path}.{f.name}", f.type) for f in type_]
        elif pa.types.is_list(type_) or pa.types.is_large_list(type_):
            pending.append((f"{path}.element", type_.value_type))
        elif pa.types.is_map(type_):
            pending += [(f"{path}.key", type_.key_type), (f"{path}.value", type_.item_type)]


#: Each unsigned integer type a view declares as the signed type that holds all its values:
#: the signed type of its width would read 255 in a uint8, or 2**32 - 1 in a uint32, as out
#: of range (delta-rs, DuckDB) and could not carry its bounds (Iceberg's ``int``).
_WIDER: dict[Any, Any] = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64()}


def signed_holding(type_: Any) -> Any:
    """The type a view declares for a column of Arrow type ``type_``: an unsigned integer's
    values in the next wider signed type (a ``uint64`` has none: :func:`check_view_schema`
    refuses it before), the files being read as they are (every engine widens an integer it
    reads); any other type as it is."""
    return _WIDER.get(type_, type_)


@dataclass(frozen=True)
class VersionChange:
    """One dataset version as a view needs it: what it added and removed relative to the
    version before it (``full``: the first version mirrored, everything as added), and the
    properties the dataset records at that version."""

    version: int
    at: float
    schema: pa.Schema | None
    partition_by: tuple[str, ...]
    operation: str
    added: tuple[DataFile, ...]
    removed: tuple[DataFile, ...]
    full: bool
    parent_schema: pa.Schema | None
    properties: Mapping[str, str] = field(default_factory=dict)


def pending(
    objects: Objects, entry: DatasetEntry, after: int | None
) -> list[tuple[str, Snapshot, Snapshot | None]]:
    """``(key, snapshot, parent snapshot)`` of every version newer than ``after`` (all of
    them when ``None``), oldest first. Versions vacuum has removed are not there: with
    ``after=None`` the oldest one left comes first (its parent then ``None``). Raises
    :class:`RegistryCorruptError` if the chain ends before reaching ``after``: a version
    between was vacuumed before it was mirrored."""
    found: list[tuple[str, Snapshot]] = []
    reached = after is None
    try:
        for key, snap in objects.walk(entry.snapshot):
            if after is not None and snap.version <= after:
                reached = True
                found.append((key, snap))
                break
            found.append((key, snap))
    except RegistryCorruptError as error:
        if not found or not isinstance(error.__cause__, NotFoundError):
            raise
    if not reached:
        oldest = found[-1][1].version
        raise SnapshotExpiredError(
            found[-1][1].dataset,
            version=oldest - 1,
            reason=f" any more: the view is at version {after} and the versions after it "
            f"up to {oldest} were vacuumed before they were mirrored; delete the view and "
            "mirror again",
        )
    found.reverse()
    result: list[tuple[str, Snapshot, Snapshot | None]] = []
    previous: Snapshot | None = None
    for key, snap in found:
        if after is not None and snap.version <= after:
            previous = snap
            continue
        result.append((key, snap, previous))
        previous = snap
    return result


def changes(
    objects: Objects, snap: Snapshot, parent: Snapshot | None, *, schema_of: Any = None
) -> VersionChange:
    """What ``snap`` changed relative to ``parent`` (every file of it when ``None``). A
    dataset committed without a schema (format 1, ``registry.commit`` without one) has the
    schema ``schema_of(files)`` reads from one of them."""
    old_top = parent.partitions if parent is not None else EMPTY
    differing = dict(_diff(old_top, snap.partitions, objects.node, 0))
    olds = {p: partition_from_entry(p, o) for p, (o, _) in differing.items() if o is not None}
    news = {p: partition_from_entry(p, n) for p, (_, n) in differing.items() if n is not None}
    # A manifest both versions reference lists the same files of the partition in both
    # (manifests are write-once, and a partition lists each file once): only the manifests
    # one side has are read. An append reads its own manifest, not the partition's older
    # ones, however large (a first commit's manifest may list every partition's files).
    only: dict[str, tuple[list[str], list[str]]] = {}
    for path in differing:
        before_keys = [m.key for m in olds[path].manifests] if path in olds else []
        after_keys = [m.key for m in news[path].manifests] if path in news else []
        only[path] = (
            [k for k in before_keys if k not in after_keys],
            [k for k in after_keys if k not in before_keys],
        )
    keys = {k for gone, new in only.values() for k in (*gone, *new)}
    manifests = objects.manifests(sorted(keys))
    added: list[DataFile] = []
    removed: list[DataFile] = []
    for path in sorted(differing):
        gone, new = only[path]
        before = {f.key: f for k in gone for f in manifests[k].files_of(path)}
        after = {f.key: f for k in new for f in manifests[k].files_of(path)}
        added.extend(f for k, f in sorted(after.items()) if k not in before)
        removed.extend(f for k, f in sorted(before.items()) if k not in after)
    operation = snap.commits[-1].operation if snap.commits else "write"
    schema = snap.schema
    if schema is None and schema_of is not None:
        schema = schema_of(snap, added)
    return VersionChange(
        version=snap.version,
        at=snap.at,
        schema=schema,
        partition_by=snap.partition_by,
        operation=operation,
        added=tuple(added),
        removed=tuple(removed),
        full=parent is None,
        parent_schema=(parent.schema if parent is not None else None) or schema,
        properties=dict(snap.properties),
    )


def _diff(
    old: Node, new: Node, load: Any, depth: int
) -> Iterator[tuple[str, tuple[Any | None, Any | None]]]:
    """``(path, (old entry, new entry))`` for every partition whose entry differs."""
    if old.is_branch and new.is_branch:
        for slot in sorted(set(old.children) | set(new.children)):
            a, b = old.children.get(slot), new.children.get(slot)
            if a is not None and b is not None and a.key == b.key:
                continue  # the same write-once subtree
            yield from _diff(
                load(a.key) if a is not None else EMPTY,
                load(b.key) if b is not None else EMPTY,
                load,
                depth + 1,
            )
        return
    before = dict(tree_items(old, load))
    after = dict(tree_items(new, load))
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a != b:
            yield path, (a, b)


def live_files(registry: Registry, snap: Snapshot) -> list[DataFile]:
    """Every file of a dataset version (reads its whole index: for checkpoints)."""
    entries = [
        partition_from_entry(p, raw)
        for p, raw in tree_items(snap.partitions, registry.internals.objects.node)
    ]
    manifests = registry.internals.objects.manifests(
        sorted({m.key for e in entries for m in e.manifests})
    )
    files = [f for e in entries for m in e.manifests for f in manifests[m.key].files_of(e.path)]
    return sorted(files, key=lambda f: f.key)


class SchemaOf:
    """The schema of a dataset committed without one: read once from one of its files (the
    schema lakelock records in every file it writes), as ``lake.scan`` does."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.found: pa.Schema | None = None

    def __call__(self, snap: Snapshot, added: Sequence[DataFile]) -> pa.Schema | None:
        if self.found is None:
            files = list(added) or live_files(self.registry, snap)
            if files:
                self.found = recorded_schema(self.registry.store, files[0])
        return self.found
