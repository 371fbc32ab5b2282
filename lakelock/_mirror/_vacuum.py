"""What vacuum keeps of the views: the objects of every dataset version it keeps.

For each dataset, the *oldest kept version* is the oldest snapshot vacuum's walk keeps (the
current one, and each older one still current within the window). Then:

- **Iceberg**: ``metadata/<v>.metadata.json`` and ``snap-<v>.avro`` of every kept version, and
  of the newest metadata (a view not mirrored lately may be older than every kept version);
  every manifest those manifest lists name (read with pyiceberg; without it, every manifest).
- **Delta**: the log from the newest checkpoint at or before the oldest kept version (Delta
  readers need an unbroken log from a checkpoint), or the whole log if there is none.

Everything else under ``views/<dataset>/`` and ``datasets/<dataset>/_delta_log/`` is an orphan
when old enough, as vacuum judges every object; so is every view of a dataset that is gone.

Before it deletes (once it has moved the root to version ``c``, recording its cutoff), vacuum
writes ``metadata/<c>.metadata.json`` for each Iceberg view whose newest metadata is of the
dataset's current version and lists a snapshot it does not keep: the same metadata (by
pyiceberg's ``RemoveSnapshotsUpdate``, as ``expire_snapshots``) less those snapshots, the
one it replaces added to the metadata log (:func:`drop_expired_snapshots`). The newest
metadata then lists only versions lakelock still reads; version ``c`` records no commit, so
no dataset version's metadata bears that name. A view behind its dataset is left alone: the
mirror's next metadata drops them (by the horizon the root records), and a pass must not
follow metadata it did not read.
The Delta view lists no snapshots: its log reads the current version from its checkpoint,
and a version vacuum removed is gone, as after Delta's own ``VACUUM``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from lakelock._layout import ViewKey, iceberg_metadata_key, iceberg_metadata_prefix, parse_view_key
from lakelock._mirror import _delta
from lakelock._mirror._series import newest, numbered
from lakelock._registry import Registry
from lakelock._registry._document import RegistryDoc
from lakelock._registry._objects import LOADERS
from lakelock._s3 import ListedObject
from lakelock.errors import AlreadyExistsError, NotFoundError, RegistryCorruptError

__all__ = ["LIST_READERS", "drop_expired_snapshots", "view_keep"]

#: Kept Iceberg manifest lists read at once (a dataset keeping thousands of versions waits
#: a round trip to S3 per this many lists, not per list), as the registry's snapshots are.
LIST_READERS = LOADERS


def oldest_kept(registry: Registry, *, cutoff: float) -> dict[str, int]:
    """Each dataset's oldest version vacuum keeps (the same walk as ``reachable``)."""
    doc, _ = registry._current()
    if doc.format_version == 1:
        return {}
    oldest: dict[str, int] = {}
    for name, entry in doc.entries.items():
        successor_at: float | None = None
        try:
            for _, snap in registry.internals.objects.walk(entry.snapshot):
                if successor_at is not None and successor_at < cutoff:
                    break
                oldest[name] = snap.version
                successor_at = snap.at
        except RegistryCorruptError as error:
            if not isinstance(error.__cause__, NotFoundError) or name not in oldest:
                raise
    return oldest


def view_keep(
    registry: Registry,
    listed: Iterable[ListedObject],
    *,
    cutoff: float,
    oldest: Mapping[str, int] | None = None,
) -> set[str]:
    """The view objects among ``listed`` that vacuum must keep (module docstring).
    ``oldest``: each dataset's oldest version kept, as vacuum's walk found it (default: walk
    the registry as it is now)."""
    views = [v for o in listed if (v := parse_view_key(o.key))]
    if not views:
        return set()
    if oldest is None:
        oldest = oldest_kept(registry, cutoff=cutoff)
    keep: set[str] = set()
    keep |= _delta_keep(registry, views, oldest)
    keep |= _iceberg_keep(registry, views, oldest)
    return keep


def _delta_keep(registry: Registry, views: list[ViewKey], oldest: Mapping[str, int]) -> set[str]:
    logs: dict[str, list[tuple[int, str, str]]] = {}
    for v in views:
        if v.kind.startswith("delta") and v.dataset in oldest:
            logs.setdefault(v.dataset, []).append((v.number, v.kind, v.key))
    keep: set[str] = set()
    for dataset, entries in logs.items():
        checkpoints = sorted((n for n, kind, _ in entries if kind != "delta log"), reverse=True)
        start = 0
        for n in checkpoints:  # newest first: the first one at or before the oldest kept
            key = next(k for m, kind, k in entries if m == n and kind == "delta log")
            mirrored = _delta.lakelock_version_of(registry.store.get(key).body)
            if mirrored is not None and mirrored <= oldest[dataset]:
                start = n
                break
        keep.update(k for n, _, k in entries if n >= start)
    return keep


def _iceberg_keep(registry: Registry, views: list[ViewKey], oldest: Mapping[str, int]) -> set[str]:
    metadata: dict[str, list[tuple[int, str]]] = {}
    lists: dict[str, dict[int, str]] = {}
    manifests: dict[str, list[str]] = {}
    for v in views:
        if v.kind == "iceberg metadata":
            metadata.setdefault(v.dataset, []).append((v.number, v.key))
        elif v.kind == "iceberg list":
            lists.setdefault(v.dataset, {})[v.number] = v.key
        elif v.kind == "iceberg manifest":
            manifests.setdefault(v.dataset, []).append(v.key)
    keep: set[str] = set()
    for dataset, found in metadata.items():
        if dataset not in oldest:
            continue
        newest = max(found)[0]
        versions = {v for v, _ in found if v >= oldest[dataset] or v == newest}
        keep.update(k for v, k in found if v in versions)
        kept_lists = [k for v, k in lists.get(dataset, {}).items() if v in versions]
        keep.update(kept_lists)
        keep |= _named_manifests(registry, kept_lists, manifests.get(dataset, []))
    return keep


def _named_manifests(registry: Registry, lists: list[str], candidates: list[str]) -> set[str]:
    """Every manifest the manifest lists ``lists`` name, read :data:`LIST_READERS` at once
    (without pyiceberg, which reads them: every one of ``candidates``)."""
    try:
        from pyiceberg.manifest import read_manifest_list  # noqa: PLC0415 - extra
    except ImportError:  # cannot read the lists: keep every manifest
        return set(candidates)
    from lakelock._mirror._iceberg import _StoreIO  # noqa: PLC0415

    io = _StoreIO(registry.store)

    def named_by(key: str) -> list[str]:
        listed = read_manifest_list(cast(Any, io.new_input(io.uri(key))))
        return [io.key(manifest.manifest_path) for manifest in listed]

    if not lists:
        return set()
    with ThreadPoolExecutor(min(LIST_READERS, len(lists))) as pool:
        return {key for named in pool.map(named_by, lists) for key in named}


def drop_expired_snapshots(
    registry: Registry,
    doc: RegistryDoc,
    oldest: Mapping[str, int],
    listed: Iterable[ListedObject],
    *,
    now: float,
) -> list[str]:
    """After vacuum's claim (``doc``: the root it swapped in) and before it deletes: for each
    Iceberg view (of those with a metadata.json in vacuum's listing, ``listed``) whose newest
    metadata is of its dataset's current version and lists a snapshot older than the oldest
    version kept (``oldest``), a metadata.json named for the root's version without those
    snapshots (module docstring). The keys written; none without pyiceberg (the extra),
    which no view's metadata is rewritten without."""
    try:
        from pyiceberg.table.metadata import TableMetadataUtil  # noqa: PLC0415 - extra
        from pyiceberg.table.update import (  # noqa: PLC0415
            RemoveSnapshotsUpdate,
            update_table_metadata,
        )
    except ImportError:
        return []
    from lakelock._mirror._iceberg import _StoreIO  # noqa: PLC0415

    store = registry.store
    io = _StoreIO(store)
    seen: dict[str, int] = {}
    for v in filter(None, map(parse_view_key, (o.key for o in listed))):
        if v.kind == "iceberg metadata":
            seen[v.dataset] = max(seen.get(v.dataset, 0), v.number)
    written = []
    for dataset, since in seen.items():
        entry, kept_from = doc.entries.get(dataset), oldest.get(dataset)
        if entry is None or kept_from is None:
            continue
        prefix = iceberg_metadata_prefix(dataset)
        top = newest(store, prefix, numbered(".metadata.json"), since=since)
        if top is None or top[0] >= doc.version:
            continue
        metadata = TableMetadataUtil.parse_raw(store.get(top[1]).body.decode())
        if metadata.current_snapshot_id != entry.version:
            continue  # behind its dataset: the mirror's next metadata drops them
        expired = [s.snapshot_id for s in metadata.snapshots if s.snapshot_id < kept_from]
        if not expired:
            continue
        trimmed = update_table_metadata(
            metadata,
            (RemoveSnapshotsUpdate.model_validate({"snapshot-ids": expired}),),
            metadata_location=io.uri(top[1]),
        )
        moment = max(metadata.last_updated_ms, round(now * 1000))
        trimmed = trimmed.model_copy(update={"last_updated_ms": moment})
        key = iceberg_metadata_key(dataset, doc.version)
        with contextlib.suppress(AlreadyExistsError):  # this claim's, written before
            store.put(
                key,
                trimmed.model_dump_json().encode(),
                mode="create",
                content_type="application/octet-stream",
            )
        written.append(key)
    return written
