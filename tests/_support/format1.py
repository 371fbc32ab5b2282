"""A lake as an older lakelock left it: a format-1 registry (no snapshots, manifests named by
the root), written by hand with the registry's own pure transforms."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from lakelock import Lake
from lakelock._registry import REGISTRY_KEY, RegistryDoc, apply_change, seal
from lakelock._registry._changes import Change, delta_manifests
from lakelock._registry._document import serialize_registry
from tests._support.tables import day_rows

__all__ = ["plant_format1"]


def plant_format1(
    lake: Lake,
    commits: Sequence[tuple[str, str, list[int], int]],
    *,
    versions: bool,
    operation: str = "append",
) -> bytes:
    """A format-1 root holding ``commits`` (dataset, commit id, ids, day: each adds its rows,
    partitioned by day, recorded as ``operation``), written create-only; its body.
    ``versions``: one registry version per commit (sealed one by one, on consecutive days),
    else all in one."""
    doc = RegistryDoc(format_version=1)
    applied = []
    for n, (name, commit_id, ids, day) in enumerate(commits, start=1):
        files = lake.write(name, day_rows(ids, day), partition_by=["day"])
        refs = {}
        for path, (ref, body) in delta_manifests(name, files, nonce=uuid.uuid4().hex).items():
            lake.store.put(ref.key, body, mode="create")
            refs[path] = ref
        change = Change(
            name, commit_id, add=tuple(files), added_manifests=refs, operation=operation
        )
        manifests: dict[str, Any] = {}
        now = f"2026-01-0{n if versions else 1}T00:00:00.000000Z"
        result = apply_change(
            doc, change, manifests=manifests, now=now, next_version=doc.version + 1
        )
        if versions:
            doc = seal(result.doc, [(change, result)], now=now, window=100)
        else:
            applied.append((change, result))
            doc = result.doc
    if not versions:
        doc = seal(doc, applied, now="2026-01-01T00:00:00.000000Z", window=100)
    body = serialize_registry(doc)
    assert orjson.loads(body)["format_version"] == 1
    lake.store.put(REGISTRY_KEY, body, mode="create")
    return body
