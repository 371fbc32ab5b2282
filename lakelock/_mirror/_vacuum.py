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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from lakelock._layout import ViewKey, parse_view_key
from lakelock._mirror import _delta
from lakelock._registry import Registry
from lakelock._s3 import ListedObject
from lakelock.errors import NotFoundError, RegistryCorruptError

__all__ = ["view_keep"]


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
    try:
        from pyiceberg.manifest import read_manifest_list  # noqa: PLC0415 - extra
    except ImportError:  # cannot read the lists: keep every manifest
        return set(candidates)
    from lakelock._mirror._iceberg import _StoreIO  # noqa: PLC0415

    io = _StoreIO(registry.store)
    named: set[str] = set()
    for key in lists:
        for manifest in read_manifest_list(cast(Any, io.new_input(io.uri(key)))):
            named.add(io.key(manifest.manifest_path))
    return named
