"""The registry document and its manifests: frozen types, one parser, one serialiser.

On S3 (keys relative to the lake prefix)::

    metastore/dataset_registry.json                     the root: CAS only (If-Match)
    metastore/manifests/<dataset>/<sha256>.json         write-once, content-addressed

The root, ``format_version`` 1::

    {
      "format_version": 1,
      "version": 42,                           # +1 per successful compare-and-swap
      "updated_at": "2026-11-21T08:00:00.000000Z",
      "datasets": {
        "<name>": {
          "schema": "<base64 Arrow IPC schema>", "schema_version": 2,
          "partition_by": ["year", "month"], "properties": {"owner": "etl"},
          "created_at": "...", "updated_at": "...", "updated_version": 41,
          "partitions": {
            "year=2024/month=01": {
              "manifests": [{"key": "metastore/manifests/<name>/<sha>.json",
                             "files": 3, "records": 1200, "size": 81234}],
              "updated_version": 41
            }
          }
        }
      },
      "fences": {"lease:leader": 7},           # highest fencing token seen per name
      "lock_fences": {"lock:sales": [          # commits made under path locks, per table
          {"token": 41, "read": ["/sales/a"], "write": ["/sales/b"], "at": 1763712000.0}]},
      "commits": [{"id": "...", "version": 42, "dataset": "<name>", "at": "...",
                   "added": 1, "removed": 0}],  # the most recent commits, newest last
      "retired": [{"key": "metastore/manifests/...", "dataset": "<name>", "at": 1763712000.0}]
    }

``retired`` lists manifests that left the registry (replaced by a consolidated manifest) and
when, so ``vacuum`` keeps their files for readers of older snapshots until the retention
window has passed; entries older than the registry's retention are dropped by later commits.

The root stays small as the lake grows: it holds datasets, partitions and per-partition
summaries, never file lists. A partition's files live in its manifests; an append adds a
manifest holding just the new files (no read of the old ones), and a removal or a compaction
replaces a partition's manifests by one consolidated manifest. Manifests are named by the
SHA-256 of their bytes, so writing one twice is harmless and a cached one never goes stale.

A manifest::

    {"format_version": 1, "dataset": "<name>", "partition": "year=2024/month=01",
     "files": [DataFile.to_json(), ...]}

:func:`parse_registry` and :func:`parse_manifest` are the only ways in; a document that is
not JSON, has an unknown ``format_version``, or breaks an invariant raises
:class:`~lakelock.errors.RegistryCorruptError`, and the commit loop never overwrites it.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson
import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock.errors import RegistryCorruptError

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_PREFIX",
    "REGISTRY_KEY",
    "CommitRecord",
    "DatasetState",
    "LockFenceRecord",
    "Manifest",
    "ManifestRef",
    "PartitionState",
    "RegistryDoc",
    "RetiredManifest",
    "decode_schema",
    "encode_schema",
    "manifest_key",
    "parse_manifest",
    "parse_registry",
    "serialize_manifest",
    "serialize_registry",
]

FORMAT_VERSION = 1
REGISTRY_KEY = "metastore/dataset_registry.json"
MANIFEST_PREFIX = "metastore/manifests/"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class ManifestRef:
    """A pointer from the root to one manifest, with the manifest's totals."""

    key: str
    files: int
    records: int
    size: int


@dataclass(frozen=True)
class PartitionState:
    """One partition of a dataset: its manifests and their totals."""

    path: str
    manifests: tuple[ManifestRef, ...]
    updated_version: int

    @property
    def file_count(self) -> int:
        return sum(m.files for m in self.manifests)

    @property
    def record_count(self) -> int:
        return sum(m.records for m in self.manifests)

    @property
    def size(self) -> int:
        return sum(m.size for m in self.manifests)


@dataclass(frozen=True)
class DatasetState:
    """One dataset as the registry records it."""

    name: str
    schema: pa.Schema | None
    schema_version: int
    partition_by: tuple[str, ...]
    properties: Mapping[str, str]
    partitions: Mapping[str, PartitionState]
    created_at: str
    updated_at: str
    updated_version: int

    @property
    def file_count(self) -> int:
        return sum(p.file_count for p in self.partitions.values())

    @property
    def record_count(self) -> int:
        return sum(p.record_count for p in self.partitions.values())

    @property
    def size(self) -> int:
        return sum(p.size for p in self.partitions.values())


@dataclass(frozen=True)
class CommitRecord:
    """One entry of the bounded list of recent commits (the idempotency window)."""

    id: str
    version: int
    dataset: str
    at: str
    added: int
    removed: int


@dataclass(frozen=True)
class LockFenceRecord:
    """A commit made under a path-lock grant: its token, paths and time (epoch seconds)."""

    token: int
    read: tuple[str, ...]
    write: tuple[str, ...]
    at: float


@dataclass(frozen=True)
class RetiredManifest:
    """A manifest no longer referenced since ``at`` (seconds since the epoch)."""

    key: str
    dataset: str
    at: float


@dataclass(frozen=True)
class RegistryDoc:
    """The whole root document, immutable."""

    version: int = 0
    updated_at: str = ""
    datasets: Mapping[str, DatasetState] = field(default_factory=lambda: _EMPTY)
    fences: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    lock_fences: Mapping[str, tuple[LockFenceRecord, ...]] = field(default_factory=lambda: _EMPTY)
    commits: tuple[CommitRecord, ...] = ()
    retired: tuple[RetiredManifest, ...] = ()

    def commit(self, commit_id: str) -> CommitRecord | None:
        """The recent commit with this id, if it is still within the window."""
        for record in reversed(self.commits):
            if record.id == commit_id:
                return record
        return None


@dataclass(frozen=True)
class Manifest:
    dataset: str
    partition: str
    files: tuple[DataFile, ...]


# -- schema ---------------------------------------------------------------------------------


def encode_schema(schema: pa.Schema) -> str:
    """The exact Arrow schema (types, nullability, metadata) as base64 IPC bytes."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))


# -- parsing --------------------------------------------------------------------------------


def parse_registry(
    body: bytes, *, bucket: str | None = None, key: str | None = None
) -> RegistryDoc:
    """The one way to read a registry document. Raises RegistryCorruptError on anything that
    is not a registry this version of lakelock understands."""
    data = _load(body, "registry", bucket, key)
    try:
        _check_format(data, "registry", bucket, key)
        datasets = {name: _parse_dataset(name, raw) for name, raw in dict(data["datasets"]).items()}
        doc = RegistryDoc(
            version=_non_negative(data["version"], "version"),
            updated_at=str(data["updated_at"]),
            datasets=MappingProxyType(datasets),
            fences=MappingProxyType({str(k): int(v) for k, v in dict(data["fences"]).items()}),
            lock_fences=MappingProxyType(
                {
                    str(name): tuple(
                        LockFenceRecord(
                            token=int(r["token"]),
                            read=tuple(str(p) for p in r["read"]),
                            write=tuple(str(p) for p in r["write"]),
                            at=float(r["at"]),
                        )
                        for r in records
                    )
                    for name, records in dict(data["lock_fences"]).items()
                }
            ),
            commits=tuple(
                CommitRecord(
                    id=str(c["id"]),
                    version=int(c["version"]),
                    dataset=str(c["dataset"]),
                    at=str(c["at"]),
                    added=int(c["added"]),
                    removed=int(c["removed"]),
                )
                for c in data["commits"]
            ),
            retired=tuple(
                RetiredManifest(key=str(r["key"]), dataset=str(r["dataset"]), at=float(r["at"]))
                for r in data["retired"]
            ),
        )
    except RegistryCorruptError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, pa.ArrowException) as error:
        raise RegistryCorruptError(
            f"registry document is malformed: {type(error).__name__}: {error}",
            bucket=bucket,
            key=key,
        ) from error
    if any(c.version > doc.version for c in doc.commits):
        raise RegistryCorruptError(
            "registry lists a commit newer than the document", bucket=bucket, key=key
        )
    return doc


def _parse_dataset(name: str, raw: Mapping[str, Any]) -> DatasetState:
    schema_text = raw.get("schema")
    return DatasetState(
        name=name,
        schema=decode_schema(schema_text) if schema_text else None,
        schema_version=_non_negative(raw["schema_version"], "schema_version"),
        partition_by=tuple(str(c) for c in raw["partition_by"]),
        properties=MappingProxyType({str(k): str(v) for k, v in dict(raw["properties"]).items()}),
        partitions=MappingProxyType(
            {
                path: PartitionState(
                    path=path,
                    manifests=tuple(
                        ManifestRef(
                            key=str(m["key"]),
                            files=_non_negative(m["files"], "files"),
                            records=_non_negative(m["records"], "records"),
                            size=_non_negative(m["size"], "size"),
                        )
                        for m in p["manifests"]
                    ),
                    updated_version=int(p["updated_version"]),
                )
                for path, p in dict(raw["partitions"]).items()
            }
        ),
        created_at=str(raw["created_at"]),
        updated_at=str(raw["updated_at"]),
        updated_version=int(raw["updated_version"]),
    )


def parse_manifest(body: bytes, *, bucket: str | None = None, key: str | None = None) -> Manifest:
    data = _load(body, "manifest", bucket, key)
    try:
        _check_format(data, "manifest", bucket, key)
        dataset = str(data["dataset"])
        return Manifest(
            dataset=dataset,
            partition=str(data["partition"]),
            files=tuple(DataFile.from_json(dataset, f) for f in data["files"]),
        )
    except RegistryCorruptError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise RegistryCorruptError(
            f"manifest is malformed: {type(error).__name__}: {error}", bucket=bucket, key=key
        ) from error


def _load(body: bytes, what: str, bucket: str | None, key: str | None) -> Mapping[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise RegistryCorruptError(
            f"{what} is not valid JSON: {error}", bucket=bucket, key=key
        ) from error
    if not isinstance(data, dict):
        raise RegistryCorruptError(f"{what} is not a JSON object", bucket=bucket, key=key)
    return data


def _check_format(data: Mapping[str, Any], what: str, bucket: str | None, key: str | None) -> None:
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise RegistryCorruptError(
            f"{what} has format_version {version!r}; this lakelock reads {FORMAT_VERSION} "
            "(upgrade lakelock to read newer documents; it never rewrites what it cannot read)",
            bucket=bucket,
            key=key,
        )


def _non_negative(value: Any, name: str) -> int:
    number = int(value)
    if number < 0 or isinstance(value, bool):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return number


# -- serialising ----------------------------------------------------------------------------


def serialize_registry(doc: RegistryDoc) -> bytes:
    """The root as compact JSON with sorted keys: the same document, the same bytes."""
    return orjson.dumps(
        {
            "format_version": FORMAT_VERSION,
            "version": doc.version,
            "updated_at": doc.updated_at,
            "datasets": {name: _dataset_json(d) for name, d in doc.datasets.items()},
            "fences": dict(doc.fences),
            "lock_fences": {
                name: [
                    {"token": r.token, "read": list(r.read), "write": list(r.write), "at": r.at}
                    for r in records
                ]
                for name, records in doc.lock_fences.items()
            },
            "commits": [
                {
                    "id": c.id,
                    "version": c.version,
                    "dataset": c.dataset,
                    "at": c.at,
                    "added": c.added,
                    "removed": c.removed,
                }
                for c in doc.commits
            ],
            "retired": [{"key": r.key, "dataset": r.dataset, "at": r.at} for r in doc.retired],
        },
        option=orjson.OPT_SORT_KEYS,
    )


def _dataset_json(d: DatasetState) -> dict[str, Any]:
    return {
        "schema": encode_schema(d.schema) if d.schema is not None else None,
        "schema_version": d.schema_version,
        "partition_by": list(d.partition_by),
        "properties": dict(d.properties),
        "created_at": d.created_at,
        "updated_at": d.updated_at,
        "updated_version": d.updated_version,
        "partitions": {
            path: {
                "manifests": [
                    {"key": m.key, "files": m.files, "records": m.records, "size": m.size}
                    for m in p.manifests
                ],
                "updated_version": p.updated_version,
            }
            for path, p in d.partitions.items()
        },
    }


def serialize_manifest(manifest: Manifest) -> bytes:
    return orjson.dumps(
        {
            "format_version": FORMAT_VERSION,
            "dataset": manifest.dataset,
            "partition": manifest.partition,
            "files": [f.to_json() for f in manifest.files],
        },
        option=orjson.OPT_SORT_KEYS,
    )


def manifest_key(dataset: str, body: bytes) -> str:
    """Content address: the same manifest always lands at the same key."""
    return f"{MANIFEST_PREFIX}{dataset}/{hashlib.sha256(body).hexdigest()}.json"
