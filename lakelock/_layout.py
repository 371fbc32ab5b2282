"""Where everything lives in the bucket: the whole key layout is named here, and every key is
built here and checked against S3's 1,024-byte limit.

Keys are relative to the lake's prefix (``Lake(prefix=...)``). :data:`LAYOUT` names every
kind of key with what it holds and how it is written; docs/FORMAT.md's key table is tested
against it, so the two cannot drift apart.

Every builder checks its key against S3's limit (:class:`~lakelock.errors.InvalidNameError`),
with the lake's prefix where the caller gives it (``prefix=``). The registry's keys are built
without it, so their length is bounded instead: a dataset name is at most 255 bytes and every
other part has a fixed size, so :func:`validate_prefix_room` (checked when a store is made)
refusing a lake prefix that leaves no room for the longest of them covers them all. The
store also checks each key it sends (:meth:`~lakelock._s3.ObjectStore.full_key`).

The views' keys (:mod:`lakelock._mirror`) are bounded the same way, and
:func:`parse_view_key` tells which of them a listed key is (vacuum keeps a view's objects by
the version they mirror).

The bucket policy (:mod:`lakelock._policy`) guards ``datasets/`` and ``metastore/`` as a whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from lakelock._names import (
    validate_dataset_name,
    validate_file_name,
    validate_lease_name,
    validate_partition_path,
)
from lakelock.errors import InvalidNameError

__all__ = [
    "BACKUP_PREFIX",
    "DATASETS_PREFIX",
    "DOCTOR_PREFIX",
    "INTENT_PREFIX",
    "LAYOUT",
    "LEASES_PREFIX",
    "LOCKS_PREFIX",
    "MANIFEST_PREFIX",
    "MAX_KEY_BYTES",
    "MAX_NONCE",
    "METASTORE_PREFIX",
    "NODE_PREFIX",
    "PROBE_PREFIX",
    "REGISTRY_KEY",
    "SNAPSHOT_PREFIX",
    "VIEWS_PREFIX",
    "VIEW_DIGITS",
    "Area",
    "ViewKey",
    "backup_key",
    "data_file_key",
    "dataset_prefix",
    "delta_checkpoint_key",
    "delta_log_key",
    "delta_log_prefix",
    "delta_root",
    "doctor_scratch",
    "files_prefix",
    "iceberg_engine_prefix",
    "iceberg_list_key",
    "iceberg_location",
    "iceberg_manifest_key",
    "iceberg_manifests_prefix",
    "iceberg_metadata_key",
    "iceberg_metadata_prefix",
    "intent_key",
    "intent_key_later",
    "intent_ms",
    "intents_from",
    "lease_key",
    "lock_table_key",
    "manifest_key",
    "node_key",
    "parse_view_key",
    "probe_key",
    "snapshot_key",
    "validate_key_length",
    "validate_prefix_room",
    "view_prefix",
]

#: S3's limit on a key, in UTF-8 bytes.
MAX_KEY_BYTES: Final = 1024
#: The longest nonce of a digest-named key (a UUID's 32 hex digits).
MAX_NONCE: Final = 32

#: Data files, one folder per dataset.
DATASETS_PREFIX: Final = "datasets/"
#: The Iceberg views of each dataset (lakelock.Lake.mirror); the Delta views' logs are in
#: the dataset's own folder, where Delta readers look for them.
VIEWS_PREFIX: Final = "views/"
#: Everything that is not data: the registry, its objects, leases, lock tables, probes.
METASTORE_PREFIX: Final = "metastore/"
#: The registry's root, replaced only by compare-and-swap.
REGISTRY_KEY: Final = f"{METASTORE_PREFIX}dataset_registry.json"
#: Dataset snapshots, one per dataset version.
SNAPSHOT_PREFIX: Final = f"{METASTORE_PREFIX}snapshots/"
#: Index nodes below a snapshot.
NODE_PREFIX: Final = f"{METASTORE_PREFIX}nodes/"
#: Manifests: lists of a partition's data files.
MANIFEST_PREFIX: Final = f"{METASTORE_PREFIX}manifests/"
#: Intents: commits written before they apply (group commit across processes).
INTENT_PREFIX: Final = f"{METASTORE_PREFIX}intents/"
#: Format-1 roots kept when a registry is upgraded.
BACKUP_PREFIX: Final = f"{METASTORE_PREFIX}backups/"
#: One document per lease.
LEASES_PREFIX: Final = f"{METASTORE_PREFIX}leases/"
#: One lock table per dataset.
LOCKS_PREFIX: Final = f"{METASTORE_PREFIX}locks/"
#: Throwaway objects of the probe that learns which conditional delete a store honours.
PROBE_PREFIX: Final = f"{METASTORE_PREFIX}probes/"
#: ``lakelock doctor``'s scratch prefix, one folder per run, removed afterwards.
DOCTOR_PREFIX: Final = ".lakelock-doctor/"
#: The folders of a lake below its prefix.
_AREAS: Final = (DATASETS_PREFIX, VIEWS_PREFIX, METASTORE_PREFIX)
#: The Delta view's log, in the dataset's folder (the Delta table's root).
_DELTA_LOG: Final = "_delta_log/"
#: The Iceberg view's table location, below ``views/<dataset>/``, and its folders.
_ICEBERG: Final = "iceberg"
_ICEBERG_METADATA: Final = f"{_ICEBERG}/metadata/"
_ICEBERG_MANIFESTS: Final = f"{_ICEBERG}/manifests/"
_ICEBERG_ENGINE: Final = f"{_ICEBERG}/engine/"
#: The digits of a view's numbered keys (a Delta version, a lakelock version): their names
#: sort in version order.
VIEW_DIGITS: Final = 20

_SHA256_HEX: Final = 64
#: An intent's name before its digest: 13 hex digits of milliseconds, 8 of randomness.
_INTENT_MS_DIGITS: Final = 13
_INTENT_RANDOM_DIGITS: Final = 8
#: The widest version a backup key names (a 64-bit integer in decimal).
_VERSION_DIGITS: Final = 20
#: A dataset name's limit (:mod:`lakelock._names`).
_NAME_BYTES: Final = 255


@dataclass(frozen=True)
class Area:
    """One kind of key: its ``pattern`` (``<...>`` the parts that vary), what it holds, and
    how it is written."""

    pattern: str
    holds: str
    written: str


_DIGEST_NAMED: Final = "<dataset>/<sha256>-<nonce>.json"
_ONCE: Final = "write-once"
_KEPT: Final = "If-Match CAS, kept"

#: The whole layout, in the order docs/FORMAT.md's key table lists it.
LAYOUT: Final = (
    Area(REGISTRY_KEY, "the registry's root", "If-Match CAS"),
    Area(SNAPSHOT_PREFIX + _DIGEST_NAMED, "one per dataset version", _ONCE),
    Area(NODE_PREFIX + _DIGEST_NAMED, "index nodes below a snapshot", _ONCE),
    Area(MANIFEST_PREFIX + _DIGEST_NAMED, "lists of data files", _ONCE),
    Area(f"{INTENT_PREFIX}<ms><random>-<sha256>.json", "commits, before they apply", _ONCE),
    Area(f"{BACKUP_PREFIX}dataset_registry-<version>-<sha256>.json", "an old format-1 root", _ONCE),
    Area(f"{LEASES_PREFIX}<name>.json", "one lease", _KEPT),
    Area(f"{LOCKS_PREFIX}<dataset>.json", "one dataset's lock table", _KEPT),
    Area(f"{PROBE_PREFIX}conditional-delete-<write id>", "a delete probe", "create-only, deleted"),
    Area(f"{DATASETS_PREFIX}<dataset>/<col>=<value>/.../<file>", "data files", _ONCE),
    Area(f"{DOCTOR_PREFIX}<run>/<probe>", "lakelock doctor's scratch", "deleted after the run"),
    Area(f"{DATASETS_PREFIX}<dataset>/{_DELTA_LOG}<20 digits>.json", "the Delta view's log", _ONCE),
    Area(
        f"{DATASETS_PREFIX}<dataset>/{_DELTA_LOG}<20 digits>.checkpoint.parquet",
        "its checkpoints",
        _ONCE,
    ),
    Area(
        f"{VIEWS_PREFIX}<dataset>/{_ICEBERG_METADATA}<version>.metadata.json",
        "the Iceberg view, a version",
        _ONCE,
    ),
    Area(
        f"{VIEWS_PREFIX}<dataset>/{_ICEBERG_MANIFESTS}snap-<version>.avro",
        "its manifest list",
        _ONCE,
    ),
    Area(f"{VIEWS_PREFIX}<dataset>/{_ICEBERG_MANIFESTS}<version>-<n>.avro", "its manifests", _ONCE),
    Area(
        f"{VIEWS_PREFIX}<dataset>/{_ICEBERG_ENGINE}<file>",
        "an engine's manifests, for the catalog",
        "by the engine",
    ),
)

#: The longest key whose length the layout bounds (a digest-named object of a dataset with
#: the longest name; a view's keys are shorter); a lake prefix must leave room for it.
_LONGEST_BOUNDED: Final = (
    max(len(p) for p in (SNAPSHOT_PREFIX, NODE_PREFIX, MANIFEST_PREFIX))
    + _NAME_BYTES
    + len("/-.json")
    + _SHA256_HEX
    + MAX_NONCE
)


def validate_key_length(key: str, *, prefix: str = "") -> str:
    """``key`` if ``prefix + key`` fits S3's 1024-byte key limit, else InvalidNameError."""
    size = len((prefix + key).encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise InvalidNameError(
            key, f"key is {size} bytes with the lake prefix; S3 allows {MAX_KEY_BYTES}"
        )
    return key


def validate_prefix_room(prefix: str) -> str:
    """``prefix`` if every key the layout bounds fits behind it and it lies in no lake's
    area, else InvalidNameError: a lake whose registry could not be written is refused
    before anything is written to it, and so is a lake inside another's ``datasets/``,
    ``views/`` or ``metastore/`` (its objects there, read by none of that lake's versions,
    would be the other lake's vacuum's orphans)."""
    if any(s in (".", "..") for s in prefix.split("/")):
        # S3 keeps such keys as written, but the engines a scan hands the files to (DuckDB,
        # Polars, pyarrow) resolve the segment away and ask for other keys, and the bucket
        # policy cannot name the prefix: the lake could be written and never read.
        raise InvalidNameError(
            prefix,
            "a lake prefix may not have a '.' or '..' segment: engines resolve it away and "
            "read other keys",
        )
    areas = {area.removesuffix("/") for area in _AREAS}
    inside = next((s for s in prefix.split("/") if s in areas), None)
    if inside is not None:
        raise InvalidNameError(
            prefix,
            f"a lake prefix may not have a {inside!r} folder: this lake's objects would lie "
            f"among the {inside}/ of a lake at the prefix before it, whose vacuum deletes "
            "what none of its versions reads",
        )
    room = MAX_KEY_BYTES - _LONGEST_BOUNDED
    if len(prefix.encode("utf-8")) > room:
        raise InvalidNameError(
            prefix, f"a lake prefix may be {room} bytes at most (S3's key limit, less the layout)"
        )
    return prefix


# -- data ---------------------------------------------------------------------------------------


def dataset_prefix(dataset: str) -> str:
    """``datasets/<dataset>/``, the key prefix of every file of ``dataset``."""
    return f"{DATASETS_PREFIX}{validate_dataset_name(dataset)}/"


def files_prefix(dataset: str, partition: str = "") -> str:
    """``datasets/<dataset>/`` or ``datasets/<dataset>/<partition>/``: where a dataset's (a
    partition's) files lie, unchecked: for testing a key the registry recorded, whose names
    were checked when its file was written."""
    folder = f"{DATASETS_PREFIX}{dataset}/"
    return f"{folder}{partition}/" if partition else folder


def data_file_key(dataset: str, partition: str, file_name: str, *, prefix: str = "") -> str:
    """The key of a data file, every part validated and the whole, with ``prefix``, within
    S3's key limit."""
    path = validate_partition_path(partition)
    key = dataset_prefix(dataset) + (f"{path}/" if path else "") + validate_file_name(file_name)
    return validate_key_length(key, prefix=prefix)


# -- the registry -------------------------------------------------------------------------------


def _digest_named(area: str, dataset: str, digest: str, nonce: str, prefix: str) -> str:
    """``<area><dataset>/<sha256>-<nonce>.json``: the digest lets a reader verify what it
    read; the nonce makes every write a new object, so no commit ever adopts an existing one
    (which ``vacuum`` may have judged an orphan and be deleting)."""
    if not (nonce.isascii() and nonce.isalnum() and len(nonce) <= MAX_NONCE):
        raise ValueError(f"a nonce is at most {MAX_NONCE} ASCII letters and digits, got {nonce!r}")
    return validate_key_length(f"{area}{dataset}/{digest}-{nonce}.json", prefix=prefix)


def snapshot_key(dataset: str, digest: str, nonce: str, *, prefix: str = "") -> str:
    """``metastore/snapshots/<dataset>/<sha256>-<nonce>.json``."""
    return _digest_named(SNAPSHOT_PREFIX, dataset, digest, nonce, prefix)


def node_key(dataset: str, digest: str, nonce: str, *, prefix: str = "") -> str:
    """``metastore/nodes/<dataset>/<sha256>-<nonce>.json``."""
    return _digest_named(NODE_PREFIX, dataset, digest, nonce, prefix)


def manifest_key(dataset: str, digest: str, nonce: str, *, prefix: str = "") -> str:
    """``metastore/manifests/<dataset>/<sha256>-<nonce>.json``."""
    return _digest_named(MANIFEST_PREFIX, dataset, digest, nonce, prefix)


def intent_key(ms: int, random: str, digest: str, *, prefix: str = "") -> str:
    """``metastore/intents/<13 hex: ms><8 hex: random>-<sha256>.json``: keys sort by when
    they were made, so a LIST returns the oldest first."""
    if len(random) != _INTENT_RANDOM_DIGITS:
        raise ValueError(f"an intent's random part is {_INTENT_RANDOM_DIGITS} hex digits")
    key = f"{INTENT_PREFIX}{ms:0{_INTENT_MS_DIGITS}x}{random}-{digest}.json"
    return validate_key_length(key, prefix=prefix)


def intent_key_later(key: str, ms: int) -> str:
    """Intent ``key`` made at ``ms`` instead, if that is later (its random part and digest
    kept: it names the same bytes); ``key`` itself otherwise."""
    if ms <= intent_ms(key):
        return key
    rest = key[len(INTENT_PREFIX) + _INTENT_MS_DIGITS :]  # <random>-<sha256>.json
    return f"{INTENT_PREFIX}{ms:0{_INTENT_MS_DIGITS}x}{rest}"


def intents_from(ms: int) -> str:
    """The key every intent made at ``ms`` or later sorts after (a LIST's ``start_after``):
    the intent prefix and the 13 hex digits of ``ms``."""
    return f"{INTENT_PREFIX}{max(0, ms):0{_INTENT_MS_DIGITS}x}"


def intent_ms(key: str) -> int:
    """When an intent was made (milliseconds since the epoch, by its writer's clock)."""
    start = len(INTENT_PREFIX)
    return int(key[start : start + _INTENT_MS_DIGITS], 16)


def backup_key(version: int, digest: str, *, prefix: str = "") -> str:
    """``metastore/backups/dataset_registry-<version>-<sha256>.json``: where a format-1 root
    is kept when the registry is upgraded."""
    if not 0 <= version < 10**_VERSION_DIGITS:
        raise ValueError(f"a registry version is 0 to {_VERSION_DIGITS} digits, got {version}")
    key = f"{BACKUP_PREFIX}dataset_registry-{version}-{digest}.json"
    return validate_key_length(key, prefix=prefix)


# -- leases, locks, probes ----------------------------------------------------------------------


def lease_key(name: str, *, prefix: str = "") -> str:
    """The key of lease ``name``, within S3's key limit with ``prefix``."""
    return validate_key_length(f"{LEASES_PREFIX}{validate_lease_name(name)}.json", prefix=prefix)


def lock_table_key(dataset: str, *, prefix: str = "") -> str:
    """The key of ``dataset``'s lock table, within S3's key limit with ``prefix``. (Lock paths
    name datasets by their first segment; :func:`~lakelock._pathlock._table.dataset_of` checks
    those.)"""
    return validate_key_length(f"{LOCKS_PREFIX}{dataset}.json", prefix=prefix)


def probe_key(write_id: str, *, prefix: str = "") -> str:
    """The throwaway object of the conditional-delete probe."""
    return validate_key_length(f"{PROBE_PREFIX}conditional-delete-{write_id}", prefix=prefix)


def doctor_scratch(run: str, *, prefix: str = "") -> str:
    """``.lakelock-doctor/<run>/``, the scratch folder of one ``lakelock doctor`` run."""
    return validate_key_length(f"{DOCTOR_PREFIX}{run}/", prefix=prefix)


# -- the views ----------------------------------------------------------------------------------
#
# Derived from the registry by lake.mirror (docs/FORMAT.md, "Iceberg and Delta views"). The
# Delta table is the dataset's own folder: Delta readers resolve a file's ``add.path`` against
# the table root, and relative paths are the ones every Delta reader handles; parquet readers
# listing the folder skip ``_delta_log`` (a name starting with ``_``). Iceberg metadata names
# absolute paths and lives under ``views/``. Every name in a series sorts in version order.
# These keys are bounded like the registry's (a dataset name of 255 bytes, the rest of fixed
# size, shorter than a digest-named key), so validate_prefix_room covers them.


def delta_root(dataset: str) -> str:
    """``datasets/<dataset>``: the Delta view's table root, the dataset's own folder."""
    return files_prefix(dataset).removesuffix("/")


def delta_log_prefix(dataset: str) -> str:
    """``datasets/<dataset>/_delta_log/``."""
    return f"{delta_root(dataset)}/{_DELTA_LOG}"


def delta_log_key(dataset: str, version: int) -> str:
    """``datasets/<dataset>/_delta_log/<Delta version, 20 digits>.json``."""
    return f"{delta_log_prefix(dataset)}{version:0{VIEW_DIGITS}d}.json"


def delta_checkpoint_key(dataset: str, version: int) -> str:
    """``datasets/<dataset>/_delta_log/<Delta version, 20 digits>.checkpoint.parquet``, beside
    the log entry of every tenth version (no ``_last_checkpoint``: readers list the log)."""
    return f"{delta_log_prefix(dataset)}{version:0{VIEW_DIGITS}d}.checkpoint.parquet"


def view_prefix(dataset: str) -> str:
    """``views/<dataset>/``: every Iceberg view object of ``dataset``."""
    return f"{VIEWS_PREFIX}{dataset}/"


def iceberg_location(dataset: str) -> str:
    """``views/<dataset>/iceberg``: the Iceberg view's table location, below the lake's URL."""
    return f"{view_prefix(dataset)}{_ICEBERG}"


def iceberg_metadata_prefix(dataset: str) -> str:
    """``views/<dataset>/iceberg/metadata/``."""
    return f"{view_prefix(dataset)}{_ICEBERG_METADATA}"


def iceberg_manifests_prefix(dataset: str) -> str:
    """``views/<dataset>/iceberg/manifests/``: manifest lists and manifests, written by
    pyiceberg's Avro writers."""
    return f"{view_prefix(dataset)}{_ICEBERG_MANIFESTS}"


def iceberg_engine_prefix(dataset: str) -> str:
    """``views/<dataset>/iceberg/engine/``: where an engine committing through ``lakelock
    catalog`` writes its manifest lists and manifests (the table's ``write.metadata.path``).
    The catalog reads them once, at the commit; lakelock's own view never names them."""
    return f"{view_prefix(dataset)}{_ICEBERG_ENGINE}"


def iceberg_metadata_key(dataset: str, version: int) -> str:
    """``views/<dataset>/iceberg/metadata/<lakelock version, 20 digits>.metadata.json``."""
    return f"{iceberg_metadata_prefix(dataset)}{version:0{VIEW_DIGITS}d}.metadata.json"


def iceberg_list_key(dataset: str, version: int) -> str:
    """``views/<dataset>/iceberg/manifests/snap-<lakelock version, 20 digits>.avro``: the
    manifest list of the Iceberg snapshot whose id is that version."""
    return f"{iceberg_manifests_prefix(dataset)}snap-{version:0{VIEW_DIGITS}d}.avro"


def iceberg_manifest_key(dataset: str, version: int, n: int) -> str:
    """``views/<dataset>/iceberg/manifests/<lakelock version, 20 digits>-<n>.avro``."""
    return f"{iceberg_manifests_prefix(dataset)}{version:0{VIEW_DIGITS}d}-{n}.avro"


@dataclass(frozen=True)
class ViewKey:
    """What a view object's ``key`` names: its ``kind``, its ``dataset`` and the number its name
    carries (``number``: the Delta version of a log entry or checkpoint, the lakelock version
    of Iceberg metadata, a manifest list or a manifest)."""

    key: str
    kind: str
    dataset: str
    number: int


def _view_pattern(area: str, folder: str, name: str) -> re.Pattern[str]:
    """``<area><dataset>/<folder><name>``, ``<n>`` in ``name`` the 20 digits of a version."""
    number = rf"(?P<n>\d{{{VIEW_DIGITS}}})"
    return re.compile(
        f"{re.escape(area)}(?P<dataset>[^/]+)/{re.escape(folder)}{name.replace('<n>', number)}"
    )


_VIEW_KEYS: Final = {
    "delta log": _view_pattern(DATASETS_PREFIX, _DELTA_LOG, r"<n>\.json"),
    "delta checkpoint": _view_pattern(DATASETS_PREFIX, _DELTA_LOG, r"<n>\.checkpoint\.parquet"),
    "iceberg metadata": _view_pattern(VIEWS_PREFIX, _ICEBERG_METADATA, r"<n>\.metadata\.json"),
    "iceberg list": _view_pattern(VIEWS_PREFIX, _ICEBERG_MANIFESTS, r"snap-<n>\.avro"),
    "iceberg manifest": _view_pattern(VIEWS_PREFIX, _ICEBERG_MANIFESTS, r"<n>-\d+\.avro"),
}


def parse_view_key(key: str) -> ViewKey | None:
    """What view object ``key`` is, or None if it is none the views write (vacuum judges any
    other key in a view's area as it judges every object)."""
    for kind, pattern in _VIEW_KEYS.items():
        if m := pattern.fullmatch(key):
            return ViewKey(key, kind, m["dataset"], int(m["n"]))
    return None
