"""Where everything lives in the bucket: every key of the lake's layout is built here.

Keys are relative to the lake's prefix (``Lake(prefix=...)``)::

    datasets/<dataset>/<partition path>/<file>   data files, write-once (If-None-Match: *)
    datasets/<dataset>/<file>                    (unpartitioned)
    metastore/dataset_registry.json              the registry: compare-and-swap only
    metastore/manifests/<dataset>/...            registry manifests, write-once
    metastore/leases/<name>.json                 one lease, compare-and-swap, never deleted
    metastore/locks/<dataset>.json               one dataset's lock table, likewise

The registry's own two keys are defined with the registry document
(:mod:`lakelock._registry._document`); the bucket policy (:mod:`lakelock._policy`) guards
``datasets/`` and ``metastore/`` as a whole. Every key built here, with the lake's prefix,
is checked against S3's 1024-byte limit before anything is sent.
"""

from __future__ import annotations

from typing import Final

from lakelock._names import (
    validate_dataset_name,
    validate_file_name,
    validate_lease_name,
    validate_partition_path,
)
from lakelock.errors import InvalidNameError

__all__ = [
    "DATASETS_PREFIX",
    "LEASES_PREFIX",
    "LOCKS_PREFIX",
    "MAX_KEY_BYTES",
    "METASTORE_PREFIX",
    "data_file_key",
    "dataset_prefix",
    "lease_key",
    "lock_table_key",
    "validate_key_length",
]

#: Data files, one folder per dataset.
DATASETS_PREFIX: Final = "datasets/"
#: Everything that is not data: the registry, its manifests, leases and lock tables.
METASTORE_PREFIX: Final = "metastore/"
#: One document per lease.
LEASES_PREFIX: Final = f"{METASTORE_PREFIX}leases/"
#: One lock table per dataset.
LOCKS_PREFIX: Final = f"{METASTORE_PREFIX}locks/"
#: S3's limit on a key, in UTF-8 bytes.
MAX_KEY_BYTES: Final = 1024


def validate_key_length(key: str, *, prefix: str = "") -> str:
    """``key`` if ``prefix + key`` fits S3's 1024-byte key limit, else InvalidNameError."""
    size = len((prefix + key).encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise InvalidNameError(
            key, f"key is {size} bytes with the lake prefix; S3 allows {MAX_KEY_BYTES}"
        )
    return key


def dataset_prefix(dataset: str) -> str:
    """``datasets/<dataset>/``, the key prefix of every file of ``dataset``."""
    return f"{DATASETS_PREFIX}{validate_dataset_name(dataset)}/"


def data_file_key(dataset: str, partition: str, file_name: str, *, prefix: str = "") -> str:
    """The key of a data file, every part validated and the whole, with ``prefix``, within
    S3's key limit."""
    path = validate_partition_path(partition)
    key = dataset_prefix(dataset) + (f"{path}/" if path else "") + validate_file_name(file_name)
    return validate_key_length(key, prefix=prefix)


def lease_key(name: str, *, prefix: str = "") -> str:
    """The key of lease ``name``, within S3's key limit with ``prefix``."""
    return validate_key_length(f"{LEASES_PREFIX}{validate_lease_name(name)}.json", prefix=prefix)


def lock_table_key(dataset: str, *, prefix: str = "") -> str:
    """The key of ``dataset``'s lock table, within S3's key limit with ``prefix``. (Lock paths
    name datasets by their first segment; :func:`~lakelock._pathlock._table.dataset_of` checks
    those.)"""
    return validate_key_length(f"{LOCKS_PREFIX}{dataset}.json", prefix=prefix)
