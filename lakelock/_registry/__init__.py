"""The registry: ``metastore/dataset_registry.json`` and the write-once objects below it, the
lake's source of truth (format 2: docs/FORMAT.md).

``_document`` holds the root's and the manifests' frozen types, parser and serialiser;
``_snapshot`` the dataset snapshots; ``_tree`` the hash-trie index; ``_intents`` commits as
write-once intents; ``_changes`` the pure commit transforms and checks; ``_objects`` loading,
caching and writing the write-once objects, history and time travel; ``_registry`` the S3
shell (reading, the commit loop, group commit in and across processes).
"""

from __future__ import annotations

from lakelock._registry._changes import Change, Fence, apply_change, evolve_schema, seal
from lakelock._registry._document import (
    FORMAT_VERSION,
    REGISTRY_KEY,
    CommitRecord,
    DatasetState,
    IntentFate,
    Manifest,
    ManifestRef,
    PartitionState,
    RegistryDoc,
    parse_manifest,
    parse_registry,
    serialize_registry,
)
from lakelock._registry._objects import HistoryEntry
from lakelock._registry._registry import (
    CommitResult,
    MigrationResult,
    Registry,
    RegistrySnapshot,
)

__all__ = [
    "FORMAT_VERSION",
    "REGISTRY_KEY",
    "Change",
    "CommitRecord",
    "CommitResult",
    "DatasetState",
    "Fence",
    "HistoryEntry",
    "IntentFate",
    "Manifest",
    "ManifestRef",
    "MigrationResult",
    "PartitionState",
    "Registry",
    "RegistryDoc",
    "RegistrySnapshot",
    "apply_change",
    "evolve_schema",
    "parse_manifest",
    "parse_registry",
    "seal",
    "serialize_registry",
]
