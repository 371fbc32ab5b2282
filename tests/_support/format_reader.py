"""A reader of a lakelock lake written from docs/FORMAT.md alone, as another implementation
would write one: it imports nothing of lakelock (boto3's client, orjson and pyarrow only), so
what it reads is what the format promises, not what lakelock's code happens to do.
``tests/test_format_reader.py`` compares it with lakelock's own reads.

Each rule it follows names the section of FORMAT.md it comes from."""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "Dataset",
    "File",
    "FormatError",
    "FormatReader",
    "NotReadable",
]

#: "Key layout": the root's key, relative to the lake's prefix.
ROOT_KEY = "metastore/dataset_registry.json"
#: "Group commit across processes: intents": where intents are.
INTENTS = "metastore/intents/"
#: Invariant 6: the formats a reader knows; any other is refused, never guessed at.
ROOT_FORMATS = frozenset({1, 2, 3})
SNAPSHOT_FORMATS = frozenset({2})
NODE_FORMATS = frozenset({2})
MANIFEST_FORMATS = frozenset({1})
#: "The lake's settings": the defaults of a root that stores none.
DEFAULT_RETENTION = 7 * 86400.0
#: Rule 9: a vacuum that recorded its cutoff alone is judged by the cutoff less a second.
LAST_MODIFIED_RESOLUTION = 1.0
#: Where a file lakelock wrote records the schema of the table written.
FILE_SCHEMA = b"lakelock.schema"
#: How a null partition value is spelt in a partition path.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: "The indexes": five bits of a key's SHA-256 per level of the partition index.
SLOT_BITS = 5


class FormatError(Exception):
    """The lake breaks a rule of FORMAT.md (a digest that does not match, a count that does
    not add up, a format this reader does not know)."""


class NotReadable(Exception):
    """A version the format says cannot be read: ``reason`` is ``"expired"`` (out of the
    retention, or replaced before the last vacuum's horizon), ``"before-upgrade"`` (older
    than a format-1 lake's upgrade) or ``"missing"`` (no such version, or no such dataset
    then)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True)
class File:
    """A data file of a dataset version, as its manifest lists it."""

    key: str
    partition: str
    size: int
    records: int
    checksum: str
    values: Mapping[str, str | None]


@dataclass(frozen=True)
class Dataset:
    """A dataset at one version: its snapshot's fields and its files (in key order)."""

    name: str
    version: int
    at: float
    schema: pa.Schema | None
    partition_by: tuple[str, ...]
    properties: Mapping[str, str]
    totals: Mapping[str, int]
    commits: tuple[str, ...]
    files: tuple[File, ...] = field(repr=False)
    snapshot_key: str = ""


class FormatReader:
    """The lake at ``prefix`` of ``bucket`` (``client``: a boto3 S3 client), read following
    FORMAT.md. Every object is fetched anew: nothing is cached between calls but the
    write-once objects of one call."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else f"{prefix}/"
        self._objects: dict[str, bytes] = {}

    # -- objects ------------------------------------------------------------------------------

    def get(self, key: str, byte_range: tuple[int, int] | None = None) -> bytes:
        """The bytes of ``key`` (relative to the lake's prefix), or of ``[start, end)``."""
        options = {"Range": f"bytes={byte_range[0]}-{byte_range[1] - 1}"} if byte_range else {}
        answer = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key, **options)
        body: bytes = answer["Body"].read()
        return body

    def write_once(self, key: str) -> bytes:
        """A write-once metastore object, checked against the SHA-256 its key names ("Key
        layout": before the nonce for snapshots, nodes and manifests; after the time and
        random part for intents; last for a backup)."""
        if key not in self._objects:
            body = self.get(key)
            if hashlib.sha256(body).hexdigest() != named_digest(key):
                raise FormatError(f"{key}: its bytes do not match the digest its key names")
            self._objects[key] = body
        return self._objects[key]

    def document(self, key: str, formats: frozenset[int]) -> dict[str, Any]:
        """A write-once JSON document of a known ``format_version`` (invariant 6)."""
        doc: dict[str, Any] = orjson.loads(self.write_once(key))
        if doc.get("format_version") not in formats:
            raise FormatError(f"{key}: format_version {doc.get('format_version')!r}")
        return doc

    # -- the root -----------------------------------------------------------------------------

    def root(self) -> dict[str, Any]:
        """The root ("The root"); an empty lake's is version 0 with no datasets."""
        try:
            body = self.get(ROOT_KEY)
        except self.client.exceptions.NoSuchKey:
            return {"format_version": 3, "version": 0, "datasets": {}}
        root: dict[str, Any] = orjson.loads(body)
        if root.get("format_version") not in ROOT_FORMATS:
            raise FormatError(f"root: format_version {root.get('format_version')!r}")
        return root

    def settings(self, root: Mapping[str, Any] | None = None) -> dict[str, float]:
        """The lake's settings ("The lake's settings"): the root's, else the defaults."""
        stored = (root if root is not None else self.root()).get("settings") or {}
        retention = float(stored.get("retention", DEFAULT_RETENTION))
        return {
            "retention": retention,
            "commit_window": stored.get("commit_window", 100),
            "intent_ttl": float(stored.get("intent_ttl", 600.0)),
            "vacuum_floor": float(stored.get("vacuum_floor", min(3600.0, retention))),
        }

    def pending_intents(self) -> list[str]:
        """Intents above the root's watermark with no fate in it: commits not applied (rule 1:
        the root alone decides; a reader ignores them)."""
        root = self.root()
        intents = root.get("intents") or {}
        decided = {fate["key"] for fate in intents.get("fates", ())}
        after = intents.get("watermark") or ""
        keys = []
        pages = self.client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix + INTENTS):
            keys += [o["Key"][len(self.prefix) :] for o in page.get("Contents", ())]
        return sorted(k for k in keys if k > after and k not in decided)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self, key: str) -> dict[str, Any]:
        """A dataset snapshot ("A dataset snapshot"), filed under its dataset's folder."""
        snap = self.document(key, SNAPSHOT_FORMATS)
        if snap.get("kind") != "snapshot" or not key.startswith(
            f"metastore/snapshots/{snap['dataset']}/"
        ):
            raise FormatError(f"{key}: not a snapshot of {snap.get('dataset')!r}")
        return snap

    def chain(self, name: str, root: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """``name``'s snapshots along ``parent``, newest first (its history)."""
        root = root if root is not None else self.root()
        entry = root["datasets"][name]
        key: str | None = entry["snapshot"]
        newer: dict[str, Any] | None = None
        while key is not None:
            snap = self.snapshot(key)
            if snap["dataset"] != name:
                raise FormatError(f"{key}: a snapshot of {snap['dataset']!r} in {name}'s chain")
            if newer is not None and not (
                snap["version"] < newer["version"] and snap["at"] <= newer["at"]
            ):
                raise FormatError(f"{key}: breaks invariant 3 against its successor")
            snap["_key"] = key
            yield snap
            newer, key = snap, snap["parent"]

    def snapshot_at(
        self,
        name: str,
        *,
        version: int | None = None,
        as_of: float | None = None,
        now: float | None = None,
    ) -> dict[str, Any]:
        """``name``'s snapshot current at registry ``version`` (the newest whose version is
        at most it), or at server time ``as_of`` (the newest committed at or before it), if
        the format says it is still readable ("Retention and vacuum")."""
        root = self.root()
        if name not in root["datasets"]:
            raise NotReadable("missing", f"no dataset {name!r}")
        if version is not None and not 1 <= version <= root["version"]:
            raise NotReadable("missing", f"registry version {version} does not exist")
        upgrade = upgrade_version(root)
        if version is not None and upgrade is not None and version < upgrade:
            raise NotReadable("before-upgrade", f"time travel begins at version {upgrade}")
        if version is not None and root["datasets"][name]["created_version"] > version:
            raise NotReadable("missing", f"{name} did not exist at version {version}")
        successor: dict[str, Any] | None = None
        try:
            for snap in self.chain(name, root):
                if (version is None or snap["version"] <= version) and (
                    as_of is None or snap["at"] <= as_of
                ):
                    self._check_readable(root, snap, successor, now)
                    return snap
                successor = snap
        except self.client.exceptions.NoSuchKey:
            raise NotReadable("expired", f"{name}: a snapshot of its chain is gone") from None
        first = successor
        assert first is not None
        if upgrade is not None and first["version"] == upgrade:
            raise NotReadable("before-upgrade", f"{name}: time travel begins at {upgrade}")
        raise NotReadable("missing", f"{name} did not exist then")

    def _check_readable(
        self,
        root: Mapping[str, Any],
        snap: Mapping[str, Any],
        successor: Mapping[str, Any] | None,
        now: float | None,
    ) -> None:
        """A replaced version ("Retention and vacuum") is readable while its successor was
        committed less than the retention ago and after the last vacuum's horizon."""
        if successor is None:
            return
        replaced = successor["at"]
        retention = self.settings(root)["retention"]
        if replaced < (time.time() if now is None else now) - retention:
            raise NotReadable("expired", f"version {snap['version']} left the retention")
        if replaced < vacuum_horizon(root):
            raise NotReadable("expired", f"version {snap['version']} was replaced before vacuum")

    # -- the indexes --------------------------------------------------------------------------

    def node(self, ref: Mapping[str, Any]) -> dict[str, Any]:
        """A node below the top of an index ("The indexes")."""
        return self.document(ref["key"], NODE_FORMATS)

    def entries(self, top: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
        """Every entry of an index (either kind), walking its whole tree."""
        if "entries" in top:
            yield from top["entries"].items()
            return
        children = top["children"]
        lows = top.get("lows")
        if lows is not None:
            check_lows(lows, children)
        for slot in sorted(children, key=int):
            ref = children[slot]
            below = list(self.entries(self.node(ref)))
            if len(below) != ref["count"]:
                raise FormatError(
                    f"{ref['key']}: {len(below)} entries, its parent says {ref['count']}"
                )
            yield from below

    def lookup_hashed(self, top: Mapping[str, Any], key: str) -> Any | None:
        """One key of a hash trie, following only its path: at depth ``d`` the slot is bits
        ``5d..5d+4`` of the key's SHA-256 (the most significant first)."""
        digest = int.from_bytes(hashlib.sha256(key.encode()).digest(), "big")
        node, depth = top, 0
        while "children" in node:
            shift = 256 - SLOT_BITS * (depth + 1)
            slot = str((digest >> shift) & ((1 << SLOT_BITS) - 1))
            ref = node["children"].get(slot)
            if ref is None:
                return None
            node, depth = self.node(ref), depth + 1
        return node["entries"].get(key)

    def lookup_ordered(self, top: Mapping[str, Any], key: str) -> Any | None:
        """One key of an ordered tree: the last child whose lower bound is at most it."""
        node = top
        while "children" in node:
            if "lows" not in node:
                return self.lookup_hashed(node, key)
            lows = node["lows"]
            check_lows(lows, node["children"])
            place = max(i for i, low in enumerate(lows) if low <= key)
            node = self.node(node["children"][str(place)])
        return node["entries"].get(key)

    def partitions(self, snap: Mapping[str, Any]) -> dict[str, Any]:
        """Partition path → ``{"manifests": [...], "updated_version"}``, the whole index."""
        return dict(self.entries(snap["partitions"]))

    def partition(self, snap: Mapping[str, Any], path: str) -> Any | None:
        """One partition of the index, looked up by its path's hash."""
        return self.lookup_hashed(snap["partitions"], path)

    def commit_ids(self, snap: Mapping[str, Any]) -> dict[str, Any]:
        """Every commit id the dataset recorded up to this version: ``recent_ids`` and the
        commit-id index (a commit id is found in ``recent_ids`` first)."""
        ids = dict(self.entries(snap["commit_ids"]))
        ids.update(snap.get("recent_ids") or {})
        return ids

    def find_commit(self, snap: Mapping[str, Any], commit_id: str) -> Any | None:
        """One commit id: ``recent_ids`` first, then the index, along one path."""
        recent = snap.get("recent_ids") or {}
        if commit_id in recent:
            return recent[commit_id]
        return self.lookup_ordered(snap["commit_ids"], commit_id)

    # -- manifests and files ------------------------------------------------------------------

    def partition_files(self, dataset: str, path: str, partition: Mapping[str, Any]) -> list[File]:
        """A partition's files: its manifests' (or their parts') elements of ``files`` for
        this partition, each reference's count checked ("A partition's part of a shared
        manifest")."""
        files: list[File] = []
        for ref in partition["manifests"]:
            entries = self.manifest_entries(ref)
            mine = [f for f in entries if f["partition"] == path]
            if len(mine) != ref["files"] or sum(f["records"] for f in mine) != ref["records"]:
                raise FormatError(f"{ref['key']}: not the count its reference in {path!r} says")
            if sum(f["size"] for f in mine) != ref["size"]:
                raise FormatError(f"{ref['key']}: not the size its reference in {path!r} says")
            folder = f"datasets/{dataset}/{path}/" if path else f"datasets/{dataset}/"
            if any(not f["key"].startswith(folder) for f in mine):
                raise FormatError(f"{ref['key']}: a file of {path!r} outside its folder")
            files += [file_of(f) for f in mine]
        return files

    def manifest_entries(self, ref: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The file entries a manifest reference reaches: its part, else the whole."""
        part = ref.get("part")
        if part is None:
            doc = self.document(ref["key"], MANIFEST_FORMATS)
            entries: list[dict[str, Any]] = doc["files"]
            return entries
        start, end, digest = part
        body = self.get(ref["key"], (start, end))
        if hashlib.sha256(body).hexdigest() != digest:
            raise FormatError(f"{ref['key']}: part {start}-{end} does not match its digest")
        parsed: list[dict[str, Any]] = orjson.loads(b"[" + body + b"]")
        return parsed

    def files(self, snap: Mapping[str, Any]) -> list[File]:
        """Every file of a dataset version, in key order; the totals are checked against
        the index (invariant 5)."""
        partitions = self.partitions(snap)
        files = self.files_of(snap["dataset"], partitions)
        totals = {
            "partitions": sum(1 for p in partitions.values() if p["manifests"]),
            "files": len(files),
            "records": sum(f.records for f in files),
            "size": sum(f.size for f in files),
        }
        if dict(snap["totals"]) != totals:
            raise FormatError(f"{snap['dataset']}@{snap['version']}: totals {snap['totals']}")
        return files

    def files_of(self, dataset: str, partitions: Mapping[str, Any]) -> list[File]:
        """The files of ``partitions`` (path → entry), in key order; a key live twice is
        refused (invariant 7)."""
        files = [
            f for path, p in partitions.items() for f in self.partition_files(dataset, path, p)
        ]
        files.sort(key=lambda f: f.key)
        if len({f.key for f in files}) != len(files):
            raise FormatError(f"{dataset}: a file listed twice")
        return files

    # -- datasets -----------------------------------------------------------------------------

    def dataset(
        self,
        name: str,
        *,
        version: int | None = None,
        as_of: float | None = None,
        now: float | None = None,
    ) -> Dataset:
        """``name`` at the current version, or as it was at ``version``/``as_of``."""
        root = self.root()
        if root["format_version"] == 1:
            return self.format1_dataset(root, name, version=version, as_of=as_of)
        snap = self.snapshot_at(name, version=version, as_of=as_of, now=now)
        return Dataset(
            name=name,
            version=snap["version"],
            at=snap["at"],
            schema=schema_of(snap.get("schema")),
            partition_by=tuple(snap["partition_by"]),
            properties=dict(snap.get("properties") or {}),
            totals=dict(snap["totals"]),
            commits=tuple(c["id"] for c in snap["commits"]),
            files=tuple(self.files(snap)),
            snapshot_key=snap["_key"],
        )

    def format1_dataset(
        self,
        root: Mapping[str, Any],
        name: str,
        *,
        version: int | None = None,
        as_of: float | None = None,
    ) -> Dataset:
        """A dataset of a format-1 root, which holds its partitions itself ("Upgrading from
        format 1"): the current version only, as format 1 kept no snapshots."""
        if version is not None or as_of is not None:
            raise NotReadable("before-upgrade", "format 1 keeps no versions but the current")
        if name not in root["datasets"]:
            raise NotReadable("missing", f"no dataset {name!r}")
        raw = root["datasets"][name]
        files = self.files_of(name, raw["partitions"])
        return Dataset(
            name=name,
            version=raw["updated_version"],
            at=0.0,
            schema=schema_of(raw.get("schema")),
            partition_by=tuple(raw["partition_by"]),
            properties=dict(raw.get("properties") or {}),
            totals={"files": len(files), "records": sum(f.records for f in files)},
            commits=(),
            files=tuple(files),
        )

    def datasets(
        self, *, version: int | None = None, now: float | None = None
    ) -> dict[str, Dataset]:
        """Every dataset at registry ``version`` (default: the current one)."""
        found = {}
        for name in self.root()["datasets"]:
            try:
                found[name] = self.dataset(name, version=version, now=now)
            except NotReadable as error:
                if error.reason != "missing":
                    raise
        return found

    # -- rows ---------------------------------------------------------------------------------

    def rows(self, dataset: Dataset, columns: Iterable[str] | None = None) -> pa.Table:
        """The dataset's rows ("Reading a version"): each file read with pyarrow and cast to
        the dataset's schema, its partition columns taken from its path, never from the
        file. A dataset without a schema takes its files' ("A dataset snapshot")."""
        stored = [self.file_table(f) for f in dataset.files]
        schema = dataset.schema
        if schema is None:
            schemas = [file_schema(t, f) for t, f in zip(stored, dataset.files, strict=True)]
            schema = pa.unify_schemas(schemas) if schemas else pa.schema([])
        tables = [
            fit(with_path_values(t, f, dataset.partition_by, schema), schema)
            for t, f in zip(stored, dataset.files, strict=True)
        ]
        table = pa.concat_tables(tables) if tables else pa.Table.from_batches([], schema)
        return table.select(list(columns)) if columns is not None else table

    def file_table(self, file: File) -> pa.Table:
        """One file's rows as stored, checked against its manifest entry."""
        body = self.get(file.key)
        if len(body) != file.size:
            raise FormatError(f"{file.key}: {len(body)} bytes, its manifest says {file.size}")
        if file.checksum != f"sha256:{hashlib.sha256(body).hexdigest()}":
            raise FormatError(f"{file.key}: its bytes are not its checksum's")
        table = pq.read_table(io.BytesIO(body))
        if table.num_rows != file.records:
            raise FormatError(
                f"{file.key}: {table.num_rows} rows, its manifest says {file.records}"
            )
        return table


def file_schema(table: pa.Table, file: File) -> pa.Schema:
    """The schema a file records: lakelock's (``lakelock.schema`` in the parquet key-value
    metadata, base64 Arrow IPC, the partition columns included), else its own columns and
    then its path's, as strings."""
    recorded = (table.schema.metadata or {}).get(FILE_SCHEMA)
    if recorded is not None:
        return schema_of(recorded.decode())
    schema = table.schema.remove_metadata()
    for column in file.values:
        if column not in schema.names:
            schema = schema.append(pa.field(column, pa.string()))
    return schema


def with_path_values(
    table: pa.Table, file: File, partition_by: Iterable[str], schema: pa.Schema
) -> pa.Table:
    """``table`` with its partition columns set from its path, typed by ``schema``."""
    for column in partition_by:
        if column in table.column_names:
            table = table.drop_columns([column])
        kind = schema.field(column).type
        value = pa.array([file.values.get(column)], pa.string()).cast(kind)[0]
        table = table.append_column(column, pa.array([value.as_py()] * table.num_rows, kind))
    return table


def fit(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` as ``schema``: its columns in the schema's order and types, a column it
    lacks (merged into the dataset after it was written) all null."""
    columns = []
    for field_ in schema:
        if field_.name in table.column_names:
            columns.append(table.column(field_.name).cast(field_.type))
        else:
            columns.append(pa.nulls(table.num_rows, field_.type))
    return pa.Table.from_arrays(columns, schema=schema)


def file_of(entry: Mapping[str, Any]) -> File:
    """A manifest's file entry, its partition values parsed from its partition path."""
    return File(
        key=entry["key"],
        partition=entry["partition"],
        size=entry["size"],
        records=entry["records"],
        checksum=entry["checksum"],
        values=partition_values(entry["partition"]),
    )


def partition_values(path: str) -> dict[str, str | None]:
    """``col=value/...`` (Hive's escapes decoded) as a mapping of raw values."""
    values: dict[str, str | None] = {}
    for segment in filter(None, path.split("/")):
        column, _, value = segment.partition("=")
        values[column] = None if value == NULL_PARTITION else urllib.parse.unquote(value)
    return values


def schema_of(encoded: str | None) -> pa.Schema | None:
    """The snapshot's schema: base64 of an Arrow IPC schema message; none when absent."""
    if not encoded:
        return None
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded)))


def named_digest(key: str) -> str:
    """The SHA-256 a write-once metastore key names ("Key layout")."""
    name = key.rsplit("/", 1)[1].removesuffix(".json")
    if key.startswith(INTENTS) or key.startswith("metastore/backups/"):
        return name.rsplit("-", 1)[1]
    return name.split("-", 1)[0]


def upgrade_version(root: Mapping[str, Any]) -> int | None:
    """The version a format-1 lake was upgraded at ("Upgrading from format 1"): the one
    after the format-1 root its backup keeps, whose key names its version
    (``dataset_registry-<version>-<sha256>.json``)."""
    backup = root.get("backup")
    if not backup:
        return None
    return int(backup.rsplit("/", 1)[1].split("-")[1]) + 1


def vacuum_horizon(root: Mapping[str, Any]) -> float:
    """Rule 9: where the last vacuum's window began (its horizon, else its cutoff less a
    second); minus infinity when no vacuum is recorded."""
    vacuum = root.get("vacuum") or {}
    if vacuum.get("horizon") is not None:
        return float(vacuum["horizon"])
    if vacuum.get("cutoff") is not None:
        return float(vacuum["cutoff"]) - LAST_MODIFIED_RESOLUTION
    return float("-inf")


def check_lows(lows: list[str], children: Mapping[str, Any]) -> None:
    """An ordered branch: ``lows`` ``""`` first and increasing, one per child."""
    if (
        not lows
        or lows[0] != ""
        or any(a >= b for a, b in itertools.pairwise(lows))
        or sorted(children, key=int) != [str(i) for i in range(len(lows))]
    ):
        raise FormatError(f"an ordered branch with lows {lows!r}")
