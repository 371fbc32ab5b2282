"""Manifests: write-once lists of a partition's files (format 1's documents, kept by format 2),
digest-named with a nonce: ``metastore/manifests/<dataset>/<sha256>-<nonce>.json``. An applied
intent is read as the manifest of its files too. Their frozen type, parser, serialiser and
key rules."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from lakelock._datafile import DataFile
from lakelock._jsonfields import boolean_free_int, obj, seq, text
from lakelock._registry._tree import key_digest, require_digest, require_filed
from lakelock._stats import stats_from_json
from lakelock.errors import RegistryCorruptError

__all__ = [
    "MANIFEST_FORMAT_VERSION",
    "MANIFEST_PREFIX",
    "Manifest",
    "load_json",
    "manifest_digest",
    "manifest_digest_of",
    "manifest_key",
    "parse_manifest",
    "serialize_manifest",
    "verify_manifest",
]

MANIFEST_FORMAT_VERSION = 1
MANIFEST_PREFIX = "metastore/manifests/"


@dataclass(frozen=True)
class Manifest:
    """A write-once list of files. ``partition`` is the one partition they all lie in, or
    ``None`` for the delta manifest of a commit spanning several (each file names its own;
    each partition's reference counts just its files)."""

    dataset: str
    partition: str | None
    files: tuple[DataFile, ...]

    def files_of(self, path: str) -> tuple[DataFile, ...]:
        """The files of partition ``path`` in this manifest."""
        if self.partition is not None:
            return self.files if self.partition == path else ()
        return self._by_partition.get(path, ())

    @cached_property
    def _by_partition(self) -> dict[str, tuple[DataFile, ...]]:
        grouped: dict[str, list[DataFile]] = {}
        for f in self.files:
            grouped.setdefault(f.partition_path, []).append(f)
        return {path: tuple(files) for path, files in grouped.items()}


def parse_manifest(body: bytes, *, bucket: str | None = None, key: str | None = None) -> Manifest:
    """The one way to read a manifest; wrong types are refused like the registry's."""
    data = load_json(body, "manifest", bucket, key)
    try:
        _check_format(data, "manifest", bucket, key)
        dataset = text(data["dataset"], "dataset")
        return Manifest(
            dataset=dataset,
            partition=(
                text(data["partition"], "partition") if data["partition"] is not None else None
            ),
            files=tuple(_datafile(dataset, obj(f, "file")) for f in seq(data["files"], "files")),
        )
    except RegistryCorruptError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise RegistryCorruptError(
            f"manifest is malformed: {type(error).__name__}: {error}", bucket=bucket, key=key
        ) from error


def _datafile(dataset: str, f: Mapping[str, Any]) -> DataFile:
    return DataFile(
        dataset=dataset,
        key=text(f["key"], "file key"),
        partition_path=text(f["partition"], "file partition"),
        size=boolean_free_int(f["size"], "file size", minimum=0),
        record_count=boolean_free_int(f["records"], "file records", minimum=0),
        checksum=text(f["checksum"], "file checksum"),
        etag=text(f["etag"], "file etag"),
        write_id=text(f["write_id"], "file write_id"),
        stats=stats_from_json(f["stats"]) if f.get("stats") is not None else None,
    )


def load_json(body: bytes, what: str, bucket: str | None, key: str | None) -> Mapping[str, Any]:
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
    if version != MANIFEST_FORMAT_VERSION:
        raise RegistryCorruptError(
            f"{what} has format_version {version!r}; this lakelock reads "
            f"{MANIFEST_FORMAT_VERSION} "
            "(upgrade lakelock to read newer documents; it never rewrites what it cannot read)",
            bucket=bucket,
            key=key,
        )


def serialize_manifest(manifest: Manifest) -> bytes:
    return orjson.dumps(
        {
            "format_version": MANIFEST_FORMAT_VERSION,
            "dataset": manifest.dataset,
            "partition": manifest.partition,
            "files": [f.to_json() for f in manifest.files],
        },
        option=orjson.OPT_SORT_KEYS,
    )


def manifest_key(dataset: str, body: bytes, nonce: str) -> str:
    """``<dataset>/<sha256 of the body>-<nonce>.json``: the digest lets a reader verify what
    it read; the nonce makes every write a new object, so no commit ever adopts an existing
    manifest (one ``vacuum`` may have judged an orphan and be deleting)."""
    if not nonce.isalnum():
        raise ValueError(f"a manifest nonce is alphanumeric, got {nonce!r}")
    return f"{MANIFEST_PREFIX}{dataset}/{manifest_digest_of(body)}-{nonce}.json"


def manifest_digest_of(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def manifest_digest(key: str) -> str:
    """The content digest a manifest key names (see :func:`manifest_key`)."""
    return key_digest(key).removesuffix(".json")


def verify_manifest(key: str, body: bytes, *, bucket: str | None = None) -> Manifest:
    """Parse a manifest read from ``key``, refusing one whose bytes are not the ones its key
    names or that belongs to another dataset (RegistryCorruptError)."""
    require_digest(body, manifest_digest(key), "manifest", key=key, bucket=bucket)
    manifest = parse_manifest(body, bucket=bucket, key=key)
    require_filed(key, MANIFEST_PREFIX, manifest.dataset, "manifest", bucket=bucket)
    return manifest
