"""The registry: ``metastore/dataset_registry.json`` and the write-once objects below it, the
lake's source of truth (its format: docs/FORMAT.md).

``_document`` holds the root's frozen types, parser and serialiser; ``_manifest`` the
manifests'; ``_snapshot`` the dataset snapshots; ``_tree`` the index trees (a hash trie for
partitions, an ordered tree for commit ids); ``_intents`` commits as write-once intents;
``_changes`` the pure commit transforms and checks, but for the fencing checks, which are
``_fencing``'s; ``_objects`` loading, caching and writing the write-once objects, history and
time travel; ``_log`` the log of recent, refused and pending commits; ``_shell`` the
:class:`Registry` (reading, time travel, migration); ``_group`` group commit within a process
(sans-I/O) and ``_commit`` its threads, around ``_core``: the commit protocol as a sans-I/O
core (``_decide`` its safety, ``_schedule`` its scheduling, ``_attempt`` one attempt,
``_committer`` where a batch starts and ends, ``_hedging`` and ``_early`` hedged requests and
reads made ahead, ``_driver`` running it on S3); ``_batch`` what a commit carries.
"""

from __future__ import annotations

from lakelock._registry._changes import (
    Change,
    Fence,
    apply_change,
    evolve_schema,
    new_commit_id,
    seal,
)
from lakelock._registry._document import (
    FORMAT_VERSION,
    REGISTRY_KEY,
    CommitRecord,
    DatasetState,
    IntentFate,
    ManifestRef,
    PartitionState,
    RegistryDoc,
    parse_registry,
    serialize_registry,
)
from lakelock._registry._log import LogEntry
from lakelock._registry._manifest import Manifest, parse_manifest
from lakelock._registry._objects import HistoryEntry
from lakelock._registry._shell import (
    CommitResult,
    MigrationResult,
    Registry,
    RegistrySnapshot,
    no_lake,
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
    "LogEntry",
    "Manifest",
    "ManifestRef",
    "MigrationResult",
    "PartitionState",
    "Registry",
    "RegistryDoc",
    "RegistrySnapshot",
    "apply_change",
    "evolve_schema",
    "new_commit_id",
    "no_lake",
    "parse_manifest",
    "parse_registry",
    "seal",
    "serialize_registry",
]
