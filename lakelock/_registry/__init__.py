"""The registry: ``metastore/dataset_registry.json``, the lake's source of truth.

``_document`` holds the frozen document types, the parser and serialiser; ``_changes`` the
pure commit transforms and checks; ``_registry`` the S3 shell (snapshots, the commit loop,
group commit).
"""

from __future__ import annotations

from lakelock._registry._changes import Change, Fence, apply_change, evolve_schema, seal
from lakelock._registry._document import (
    FORMAT_VERSION,
    REGISTRY_KEY,
    CommitRecord,
    DatasetState,
    Manifest,
    ManifestRef,
    PartitionState,
    RegistryDoc,
    parse_manifest,
    parse_registry,
    serialize_registry,
)
from lakelock._registry._registry import CommitResult, Registry, RegistrySnapshot

__all__ = [
    "FORMAT_VERSION",
    "REGISTRY_KEY",
    "Change",
    "CommitRecord",
    "CommitResult",
    "DatasetState",
    "Fence",
    "Manifest",
    "ManifestRef",
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
