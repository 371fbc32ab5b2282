"""Format 2: a small root over write-once dataset snapshots (docs/FORMAT.md has the whole
layout, the invariants and why a commit's cost does not grow with the lake).

Its keys (the root, snapshots, nodes, manifests, backups) are named and built in
:mod:`lakelock._layout`.

The root holds, per dataset, the key of its current snapshot and a summary; a snapshot holds
the dataset's schema and properties, its parent snapshot, the commits that made it, and the
tops of two trees (:mod:`._tree`): partitions and commit ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson
import pyarrow as pa

from lakelock import _layout
from lakelock._jsonfields import boolean_free_int, number, obj, seq, text
from lakelock._layout import BACKUP_PREFIX, SNAPSHOT_PREFIX
from lakelock._registry._tree import (
    Node,
    key_digest,
    node_from_json,
    node_json,
    require_digest,
    require_filed,
    tree_get,
    tree_items,
)
from lakelock.errors import RegistryCorruptError

__all__ = [
    "BACKUP_PREFIX",
    "SNAPSHOT_PREFIX",
    "DatasetEntry",
    "LazyPartitions",
    "Overlay",
    "Snapshot",
    "SnapshotCommit",
    "Totals",
    "backup_key",
    "parse_snapshot",
    "serialize_snapshot",
    "snapshot_key",
    "verify_snapshot",
]


@dataclass(frozen=True)
class Totals:
    """A dataset's totals, kept up to date commit by commit (never by walking the index)."""

    partitions: int = 0
    files: int = 0
    records: int = 0
    size: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "partitions": self.partitions,
            "files": self.files,
            "records": self.records,
            "size": self.size,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Totals:
        return cls(
            partitions=boolean_free_int(raw["partitions"], "partitions", minimum=0),
            files=boolean_free_int(raw["files"], "files", minimum=0),
            records=boolean_free_int(raw["records"], "records", minimum=0),
            size=boolean_free_int(raw["size"], "size", minimum=0),
        )


@dataclass(frozen=True)
class SnapshotCommit:
    """One commit recorded in a snapshot: the commits that made this version of a dataset."""

    id: str
    operation: str
    added: int
    removed: int
    #: What was committed (see :class:`~lakelock._registry._document.CommitRecord`).
    digest: str | None = None
    #: The key of the intent that made it (see :class:`~lakelock._registry._document.CommitRecord`).
    intent: str | None = None


@dataclass(frozen=True)
class DatasetEntry:
    """The root's line for one dataset: where its current snapshot is, and a summary."""

    snapshot: str
    version: int
    created_version: int
    partition_by: tuple[str, ...]
    totals: Totals
    updated_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot,
            "version": self.version,
            "created_version": self.created_version,
            "partition_by": list(self.partition_by),
            "totals": self.totals.to_json(),
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> DatasetEntry:
        return cls(
            snapshot=text(raw["snapshot"], "snapshot key"),
            version=boolean_free_int(raw["version"], "dataset version", minimum=1),
            created_version=boolean_free_int(raw["created_version"], "created_version", minimum=1),
            partition_by=tuple(
                text(c, "partition column") for c in seq(raw["partition_by"], "partition_by")
            ),
            totals=Totals.from_json(obj(raw["totals"], "totals")),
            updated_at=text(raw["updated_at"], "updated_at"),
        )


@dataclass(frozen=True)
class Snapshot:
    """One version of one dataset, as stored (write-once) under ``metastore/snapshots/``."""

    dataset: str
    version: int
    parent: str | None
    at: float
    created_at: str
    updated_at: str
    created_version: int
    commits: tuple[SnapshotCommit, ...]
    schema: pa.Schema | None
    schema_version: int
    partition_by: tuple[str, ...]
    properties: Mapping[str, str]
    totals: Totals
    partitions: Node
    commit_ids: Node
    # Commit ids of the latest versions, not yet in the ``commit_ids`` tree (entries as the
    # tree's): they go into it together, RECENT_IDS at a time, so a busy dataset does not
    # rewrite a tree leaf per commit.
    recent_ids: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def serialize_snapshot(snapshot: Snapshot, encode_schema: Callable[[pa.Schema], str]) -> bytes:
    return orjson.dumps(
        {
            "format_version": 2,
            "kind": "snapshot",
            "dataset": snapshot.dataset,
            "version": snapshot.version,
            "parent": snapshot.parent,
            "at": snapshot.at,
            "created_at": snapshot.created_at,
            "updated_at": snapshot.updated_at,
            "created_version": snapshot.created_version,
            "commits": [
                {
                    "id": c.id,
                    "operation": c.operation,
                    "added": c.added,
                    "removed": c.removed,
                    **({"digest": c.digest} if c.digest is not None else {}),
                    **({"intent": c.intent} if c.intent is not None else {}),
                }
                for c in snapshot.commits
            ],
            "schema": encode_schema(snapshot.schema) if snapshot.schema is not None else None,
            "schema_version": snapshot.schema_version,
            "partition_by": list(snapshot.partition_by),
            "properties": dict(snapshot.properties),
            "totals": snapshot.totals.to_json(),
            "partitions": node_json(snapshot.partitions),
            "commit_ids": node_json(snapshot.commit_ids),
            "recent_ids": dict(snapshot.recent_ids),
        },
        option=orjson.OPT_SORT_KEYS,
    )


def parse_snapshot(
    body: bytes,
    decode_schema: Callable[[str], pa.Schema],
    *,
    bucket: str | None = None,
    key: str | None = None,
) -> Snapshot:
    try:
        data = orjson.loads(body)
        if not isinstance(data, dict):
            raise TypeError("a snapshot is a JSON object")
        if data.get("format_version") != 2 or data.get("kind") != "snapshot":
            raise ValueError(
                f"not a format-2 snapshot (format_version {data.get('format_version')!r})"
            )
        parent = data["parent"]
        return Snapshot(
            dataset=text(data["dataset"], "dataset"),
            version=boolean_free_int(data["version"], "version", minimum=1),
            parent=text(parent, "parent") if parent is not None else None,
            at=number(data["at"], "at"),
            created_at=text(data["created_at"], "created_at"),
            updated_at=text(data["updated_at"], "updated_at"),
            created_version=boolean_free_int(data["created_version"], "created_version", minimum=1),
            commits=tuple(
                SnapshotCommit(
                    id=text(c["id"], "commit id"),
                    operation=text(c["operation"], "operation"),
                    added=boolean_free_int(c["added"], "added", minimum=0),
                    removed=boolean_free_int(c["removed"], "removed", minimum=0),
                    digest=text(c["digest"], "digest") if "digest" in c else None,
                    intent=text(c["intent"], "intent") if "intent" in c else None,
                )
                for c in (obj(item, "commit") for item in seq(data["commits"], "commits"))
            ),
            **dataset_fields(data, decode_schema),
            totals=Totals.from_json(obj(data["totals"], "totals")),
            partitions=node_from_json(obj(data["partitions"], "partitions")),
            commit_ids=node_from_json(obj(data["commit_ids"], "commit_ids")),
            recent_ids=MappingProxyType(
                {
                    text(k, "commit id"): _id_entry(v)
                    for k, v in obj(data.get("recent_ids", {}), "recent_ids").items()
                }
            ),
        )
    except RegistryCorruptError:
        raise
    except (
        orjson.JSONDecodeError,
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
        pa.ArrowException,
    ) as error:
        raise RegistryCorruptError(
            f"dataset snapshot is malformed: {type(error).__name__}: {error}",
            bucket=bucket,
            key=key,
        ) from error


def _id_entry(raw: Any) -> dict[str, Any]:
    entry = dict(obj(raw, "commit id entry"))
    boolean_free_int(entry["version"], "version", minimum=1)
    return entry


def dataset_fields(
    raw: Mapping[str, Any], decode_schema: Callable[[str], pa.Schema]
) -> dict[str, Any]:
    """A dataset's schema, schema version, partition columns and properties, parsed from its
    JSON (a format-2 snapshot or a format-1 root's dataset: the same fields)."""
    schema_text = raw["schema"]
    return {
        "schema": (decode_schema(text(schema_text, "schema")) if schema_text is not None else None),
        "schema_version": boolean_free_int(raw["schema_version"], "schema_version", minimum=0),
        "partition_by": tuple(
            text(c, "partition column") for c in seq(raw["partition_by"], "partition_by")
        ),
        "properties": MappingProxyType(
            {
                text(k, "property name"): text(v, f"property {k!r}")
                for k, v in obj(raw["properties"], "properties").items()
            }
        ),
    }


def snapshot_key(dataset: str, body: bytes, nonce: str) -> str:
    """``metastore/snapshots/<dataset>/<sha256 of the body>-<nonce>.json``."""
    return _layout.snapshot_key(dataset, hashlib.sha256(body).hexdigest(), nonce)


def verify_snapshot(
    key: str,
    body: bytes,
    decode_schema: Callable[[str], pa.Schema],
    *,
    bucket: str | None = None,
) -> Snapshot:
    """Parse a snapshot read from ``key``: its bytes must be those the key names, and it must
    belong to the dataset it is filed under."""
    require_digest(body, key_digest(key), "snapshot", key=key, bucket=bucket)
    snapshot = parse_snapshot(body, decode_schema, bucket=bucket, key=key)
    require_filed(key, SNAPSHOT_PREFIX, snapshot.dataset, "snapshot", bucket=bucket)
    return snapshot


def backup_key(version: int, body: bytes) -> str:
    """Where a format-1 root is kept when the registry is upgraded (write-once)."""
    return _layout.backup_key(version, hashlib.sha256(body).hexdigest())


# -- partitions as a mapping over the tree ----------------------------------------------------

Load = Callable[[str], Node]


#: Most nodes a walk of a whole index loads ahead, in parallel (half the objects an
#: ``Objects`` cache keeps: what is loaded ahead must still be cached when the walk reads it).
PREFETCH_AT_MOST = 8192


class LazyPartitions(Mapping[str, Any]):
    """A dataset's partitions, read from its index tree on demand: looking one up loads the
    nodes on its path; iterating loads them all. ``parse`` turns a stored entry into the
    caller's partition type."""

    def __init__(
        self,
        top: Node,
        load: Load,
        parse: Callable[[str, Any], Any],
        *,
        prefetch: Callable[[list[str]], object] | None = None,
    ) -> None:
        self.top = top
        self._load = load
        self._parse = parse
        # Loads many nodes at once (in parallel) before a walk of the whole tree reads them
        # one by one: a level at a time, not a node at a time.
        self._prefetch = prefetch
        # Each partition looked up, parsed (the tree is write-once): a batch applying
        # hundreds of commits to a dataset looks its partitions up for every one.
        self._parsed: dict[str, Any] = {}

    def __getitem__(self, path: str) -> Any:
        found = self._parsed.get(path)
        if found is not None:
            return found
        raw = tree_get(self.top, path, self._load)
        if raw is None:
            raise KeyError(path)
        found = self._parsed[path] = self._parse(path, raw)
        return found

    def __iter__(self) -> Iterator[str]:
        self._prefetch_all()
        return iter(sorted(key for key, _ in tree_items(self.top, self._load)))

    def __len__(self) -> int:
        return self.top.count

    def items_loaded(self) -> Iterator[tuple[str, Any]]:
        """Every partition, parsed, in one walk of the tree."""
        self._prefetch_all()
        for key, raw in sorted(tree_items(self.top, self._load)):
            yield key, self._parse(key, raw)

    def _prefetch_all(self) -> None:
        if self._prefetch is None:
            return
        level, fetched = [self.top], 0
        while level:
            keys = [ref.key for node in level for ref in node.children.values()]
            fetched += len(keys)
            if not keys or fetched > PREFETCH_AT_MOST:
                return  # the rest one by one, as the walk reaches them
            self._prefetch(keys)
            level = [self._load(key) for key in keys]


class Overlay(Mapping[str, Any]):
    """``base`` with some entries changed (``None``: removed) by commits not yet written: the
    partitions of a dataset, or the datasets of a registry, in a batch being applied. Looking
    up an unchanged entry asks ``base`` (which may load it); nothing is copied."""

    def __init__(self, base: Mapping[str, Any], changes: Mapping[str, Any | None]) -> None:
        self.base = base
        self.changes = dict(changes)

    @classmethod
    def owning(cls, base: Mapping[str, Any], changes: dict[str, Any | None]) -> Overlay:
        """An overlay keeping ``changes`` itself, not a copy: for a caller that made the dict
        and changes it no more (a batch makes one overlay per commit it applies)."""
        overlay = cls.__new__(cls)
        overlay.base = base
        overlay.changes = changes
        return overlay

    def __getitem__(self, path: str) -> Any:
        if path in self.changes:
            value = self.changes[path]
            if value is None:
                raise KeyError(path)
            return value
        return self.base[path]

    # ``get`` and ``in`` without Mapping's detour through ``__getitem__`` and a KeyError:
    # the commit loop asks them of every commit it applies.
    def get(self, path: str, default: Any = None) -> Any:
        changes = self.changes
        if path in changes:
            value = changes[path]
            return default if value is None else value
        return self.base.get(path, default)

    def __contains__(self, path: object) -> bool:
        changes = self.changes
        if path in changes:
            return changes[path] is not None
        return path in self.base

    def __iter__(self) -> Iterator[str]:
        keys = set(self.base) | {k for k, v in self.changes.items() if v is not None}
        return iter(sorted(k for k in keys if self.changes.get(k, True) is not None))

    def __len__(self) -> int:
        return sum(1 for _ in self)
