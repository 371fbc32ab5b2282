"""Manifests: write-once lists of a partition's files (format 1's documents, kept by format 2),
digest-named with a nonce: ``metastore/manifests/<dataset>/<sha256>-<nonce>.json``. An applied
intent is read as the manifest of its files too. Their frozen type, parser, serialiser and
key rules."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from lakelock import _layout
from lakelock._datafile import DataFile
from lakelock._jsonfields import MAX_INT, boolean_free_int, obj, seq, text
from lakelock._layout import MANIFEST_PREFIX, files_prefix
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
    "parse_part",
    "partition_parts",
    "serialize_manifest",
    "verify_manifest",
]

MANIFEST_FORMAT_VERSION = 1


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
    """One file of a manifest. A manifest of a busy partition lists thousands, and a commit
    loop parses every manifest it consolidates: a well-formed entry (strings, integers in
    range, no stats) is checked here in one expression; anything else goes the long way,
    which says what is wrong with it."""
    try:
        key, partition, checksum = f["key"], f["partition"], f["checksum"]
        etag, write_id, size, records = f["etag"], f["write_id"], f["size"], f["records"]
    except KeyError:
        return _checked_datafile(dataset, f)
    if (
        type(key) is str
        and type(partition) is str
        and type(checksum) is str
        and type(etag) is str
        and type(write_id) is str
        and type(size) is int
        and type(records) is int
        and 0 <= size < MAX_INT
        and 0 <= records < MAX_INT
        and f.get("stats") is None
    ):
        return DataFile(dataset, key, partition, size, records, checksum, etag, write_id)
    return _checked_datafile(dataset, f)


def _checked_datafile(dataset: str, f: Mapping[str, Any]) -> DataFile:
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
    """``{"dataset", "files", "format_version", "partition"}`` as compact JSON with sorted
    keys (``orjson.OPT_SORT_KEYS``), each file's entry made once (:func:`_file_json`): a
    consolidation writes every file of its partition again, thousands in a busy one."""
    return b"".join(
        (
            b'{"dataset":',
            orjson.dumps(manifest.dataset),
            b',"files":[',
            b",".join([_file_json(f) for f in manifest.files]),
            b'],"format_version":%d,"partition":' % MANIFEST_FORMAT_VERSION,
            orjson.dumps(manifest.partition),
            b"}",
        )
    )


#: Files whose manifest entry :func:`_file_json` made, by identity (a file and its entry:
#: the file kept alive, so its id is not reused); emptied when it holds this many.
_FILE_JSON_KEPT = 1 << 16
_file_jsons: dict[int, tuple[DataFile, bytes]] = {}


def _file_json(f: DataFile) -> bytes:
    """``f``'s manifest entry (compact JSON, sorted keys), remembered by identity: a
    consolidated manifest's files are the same objects as the manifests it replaced
    (hashing a file by value would cost most of what making its entry does)."""
    found = _file_jsons.get(id(f))
    if found is not None and found[0] is f:
        return found[1]
    entry = orjson.dumps(f.to_json(), option=orjson.OPT_SORT_KEYS)
    if len(_file_jsons) >= _FILE_JSON_KEPT:
        _file_jsons.clear()
    _file_jsons[id(f)] = (f, entry)
    return entry


#: Where one partition's files lie in a manifest (or intent) shared by several partitions:
#: the bytes ``[start, end)`` of the body, the elements of its ``files`` array that are that
#: partition's files (contiguous: the array is sorted by key), and their SHA-256. A reader of
#: one partition GETs just that range and checks it against the digest.
Part = tuple[int, int, str]


def partition_parts(body: bytes, files: tuple[DataFile, ...]) -> dict[str, Part]:
    """Each partition's :data:`Part` of ``body``, a serialised document whose ``files`` array
    is exactly ``files`` (sorted by key) in compact JSON with sorted keys, as
    :func:`serialize_manifest` and the intents write it. Empty when the body is not laid out
    so (then readers read it whole)."""
    items = [_file_json(f) for f in files]
    start = body.find(b'"files":[')
    if start < 0 or not items:
        return {}
    position = start + len(b'"files":[')
    if body[position : position + sum(map(len, items)) + len(items) - 1] != b",".join(items):
        return {}
    spans: dict[str, list[int]] = {}
    for f, item in zip(files, items, strict=True):
        span = spans.setdefault(f.partition_path, [position, position])
        if span[1] != position and span[1] + 1 != position:
            return {}  # a partition's files are not contiguous: not sorted by key
        span[1] = position + len(item)
        position += len(item) + 1
    return {
        path: (first, end, hashlib.sha256(body[first:end]).hexdigest())
        for path, (first, end) in spans.items()
    }


def parse_part(
    dataset: str, path: str, part: Part, data: bytes, *, bucket: str | None, key: str
) -> tuple[DataFile, ...]:
    """The files of partition ``path`` read from its :data:`Part` of a manifest: the bytes
    must be those the part's digest names, and every file must lie in ``path``."""
    if len(data) != part[1] - part[0] or hashlib.sha256(data).hexdigest() != part[2]:
        raise RegistryCorruptError(
            f"bytes {part[0]}-{part[1]} of {key} are not those the index names for "
            f"{dataset!r}/{path!r}",
            bucket=bucket,
            key=key,
        )
    try:
        files = tuple(
            _datafile(dataset, obj(f, "file"))
            for f in seq(orjson.loads(b"[" + data + b"]"), "files")
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise RegistryCorruptError(
            f"part of manifest for {dataset!r}/{path!r} is malformed: {error}",
            bucket=bucket,
            key=key,
        ) from error
    prefix = files_prefix(dataset, path)
    if any(f.partition_path != path or not f.key.startswith(prefix) for f in files):
        raise RegistryCorruptError(
            f"part of manifest for {dataset!r}/{path!r} lists other partitions' files",
            bucket=bucket,
            key=key,
        )
    return files


def manifest_key(dataset: str, body: bytes, nonce: str) -> str:
    """``<dataset>/<sha256 of the body>-<nonce>.json``: the digest lets a reader verify what
    it read; the nonce makes every write a new object, so no commit ever adopts an existing
    manifest (one ``vacuum`` may have judged an orphan and be deleting)."""
    return _layout.manifest_key(dataset, manifest_digest_of(body), nonce)


def manifest_digest_of(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@functools.lru_cache(maxsize=1 << 16)
def manifest_digest(key: str) -> str:
    """The content digest a manifest key names (see :func:`manifest_key`). Cached: a commit
    compares its manifest with every one of its partition's, and a batch applies many."""
    return key_digest(key).removesuffix(".json")


def verify_manifest(key: str, body: bytes, *, bucket: str | None = None) -> Manifest:
    """Parse a manifest read from ``key``, refusing one whose bytes are not the ones its key
    names or that belongs to another dataset (RegistryCorruptError)."""
    require_digest(body, manifest_digest(key), "manifest", key=key, bucket=bucket)
    manifest = parse_manifest(body, bucket=bucket, key=key)
    require_filed(key, MANIFEST_PREFIX, manifest.dataset, "manifest", bucket=bucket)
    return manifest
