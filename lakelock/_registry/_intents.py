"""Intents: a commit written as a write-once object that any committer can fold into its
compare-and-swap (group commit across processes; docs/FORMAT.md has the protocol).

An intent is the commit's delta manifest with an ``intent`` section::

    metastore/intents/<13 hex: ms since the epoch><8 hex: random>-<sha256 of the body>.json

    {"format_version": 1, "dataset": "sales", "partition": null, "files": [...],
     "intent": {"commit_id": "...", "generated_id": true|false, "digest": "sha256:..."?,
                "operation": "append", "remove": [...],
                "remove_partitions": [...], "schema": "<base64>"|null,
                "partition_by": [...]|null, "schema_mode": "merge"|null,
                "written_ms": 1795455928430?,  # its oldest file's write (server time, ms)
                "properties": {...}|null,
                "fence": {"name", "token", "read", "write"}|null,
                "restore": {"snapshot": "metastore/snapshots/...", "until": 1.7e9|null,
                            "since": 1.7e9?}?,
                "group": {"id": "<32 hex>", "datasets": ["sales", "stock"]}?}}

Keys sort by the time they were made, so a LIST returns the oldest first. The index refers to
an applied intent as a manifest of its files, so applying one costs no extra object. A commit
spanning datasets is one intent per dataset (:func:`intent_group`), made at one moment with
one random token, so their keys differ only in their digests and a LIST returns them side by
side; each names the group, and a fold applies them all or none (FORMAT.md rule 16). A
restore names the snapshot of the version it makes current.

Everything here is pure: building an intent from a :class:`Change`, reading one back, and the
watermark rule.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from lakelock._jsonfields import boolean_free_int, obj, seq, text
from lakelock._layout import INTENT_PREFIX, SNAPSHOT_PREFIX, intent_key, intent_ms
from lakelock._registry._changes import Change, Fence, Group, oldest_write
from lakelock._registry._document import IntentFate, ManifestRef, decode_schema, encode_schema
from lakelock._registry._manifest import Manifest, parse_manifest, partition_parts
from lakelock._registry._tree import require_digest
from lakelock.errors import RegistryCorruptError

__all__ = [
    "INTENT_PREFIX",
    "intent_digest",
    "intent_document",
    "intent_group",
    "intent_ms",
    "is_intent",
    "parse_intent",
    "prune_fates",
    "writable",
]


def is_intent(key: str) -> bool:
    return key.startswith(INTENT_PREFIX)


def writable(change: Change) -> bool:
    """Whether ``change`` can be written as an intent: anything but a restore whose version
    is stored in no snapshot (a format-1 lake's, committed by its own process)."""
    return change.restore is None or change.restore.snapshot is not None


def intent_group(
    changes: Sequence[Change], *, now_ms: int, token: str, group: str
) -> list[tuple[str, bytes, dict[str, ManifestRef]]]:
    """The intents of one commit: one for a one-dataset commit, else one per dataset, each
    naming the group (``group``: its random id) and the commit's datasets, all made with
    the same ``now_ms`` and ``token`` (their keys sort together)."""
    if len(changes) == 1:
        return [intent_document(changes[0], now_ms=now_ms, token=token)]
    named = Group(group, tuple(c.dataset for c in changes))
    return [intent_document(replace(c, group=named), now_ms=now_ms, token=token) for c in changes]


def intent_document(
    change: Change, *, now_ms: int, token: str | None = None
) -> tuple[str, bytes, dict[str, ManifestRef]]:
    """The intent of ``change``: its key, bytes and the manifest references of the files it
    adds (per partition, pointing at the intent itself). ``token``: the key's 8 hex digits
    of randomness (drawn here if not given)."""
    if not writable(change):
        raise ValueError("a restore of a version stored in no snapshot writes no intent")
    files = tuple(sorted(change.add, key=lambda f: f.key))
    paths = {f.partition_path for f in files}
    fence = change.fence
    written = oldest_write(change)
    body = orjson.dumps(
        {
            "format_version": 1,
            "dataset": change.dataset,
            "partition": next(iter(paths)) if len(paths) == 1 else None,
            "files": [f.to_json() for f in files],
            "intent": {
                "commit_id": change.commit_id,
                "generated_id": change.generated_id,
                **({"digest": change.digest} if change.digest is not None else {}),
                "operation": change.operation,
                "remove": list(change.remove),
                "remove_partitions": list(change.remove_partitions),
                "schema": encode_schema(change.schema) if change.schema is not None else None,
                "partition_by": (
                    list(change.partition_by) if change.partition_by is not None else None
                ),
                "schema_mode": change.schema_mode,
                # Whole milliseconds, rounded down (earlier: the rule errs towards older).
                **({"written_ms": math.floor(written * 1000)} if written is not None else {}),
                **({"existing_files": True} if change.existing_files else {}),
                **({"on_version": change.on_version} if change.on_version is not None else {}),
                "properties": dict(change.properties) if change.properties is not None else None,
                "fence": (
                    {
                        "name": fence.name,
                        "token": fence.token,
                        "read": list(fence.read),
                        "write": list(fence.write),
                    }
                    if fence is not None
                    else None
                ),
                **_restore_section(change),
                **(
                    {"group": {"id": change.group.id, "datasets": list(change.group.datasets)}}
                    if change.group is not None
                    else {}
                ),
            },
        },
        option=orjson.OPT_SORT_KEYS,
    )
    digest = hashlib.sha256(body).hexdigest()
    key = intent_key(now_ms, token or secrets.token_hex(4), digest)
    parts = partition_parts(body, files) if len(paths) > 1 else {}
    refs: dict[str, ManifestRef] = {}
    for path in sorted(paths):
        group = [f for f in files if f.partition_path == path]
        refs[path] = ManifestRef(
            key=key,
            files=len(group),
            records=sum(f.record_count for f in group),
            size=sum(f.size for f in group),
            part=parts.get(path),
        )
    return key, body, refs


def _restore_section(change: Change) -> dict[str, Any]:
    """A restore's part of its intent: the snapshot of the version it makes current, when
    that version leaves the retention (``None``: it is the current one) and when it was
    replaced, from which a folder measures the retention of the root it applies on (rule 9)."""
    snapshot = change.restore.snapshot if change.restore is not None else change.restore_from
    if snapshot is None:
        return {}
    restore: dict[str, Any] = {"snapshot": snapshot, "until": change.restore_until}
    if change.restore_since is not None:
        restore["since"] = change.restore_since
    return {"restore": restore}


def intent_digest(key: str) -> str:
    """The content digest an intent key names (after its time and random parts)."""
    return key.rsplit("-", 1)[-1].removesuffix(".json")


def parse_intent(key: str, body: bytes, *, bucket: str | None = None) -> tuple[Change, Manifest]:
    """The commit an intent asks for (its ``added_manifests`` pointing at the intent), and
    the intent read as a manifest. Anything malformed is RegistryCorruptError."""
    require_digest(body, intent_digest(key), "intent", key=key, bucket=bucket)
    manifest = parse_manifest(body, bucket=bucket, key=key)
    try:
        section = obj(orjson.loads(body)["intent"], "intent")
        schema = section["schema"]
        partition_by = section["partition_by"]
        properties = section["properties"]
        raw_fence = section["fence"]
        fence = None
        if raw_fence is not None:
            f = obj(raw_fence, "fence")
            fence = Fence(
                name=text(f["name"], "fence name"),
                token=boolean_free_int(f["token"], "fence token"),
                read=tuple(text(p, "fence path") for p in seq(f["read"], "fence read")),
                write=tuple(text(p, "fence path") for p in seq(f["write"], "fence write")),
            )
        refs: dict[str, ManifestRef] = {}
        for file in manifest.files:
            ref = refs.get(file.partition_path)
            refs[file.partition_path] = ManifestRef(
                key=key,
                files=(ref.files if ref else 0) + 1,
                records=(ref.records if ref else 0) + file.record_count,
                size=(ref.size if ref else 0) + file.size,
            )
        if len(refs) > 1:  # the parts its writer recorded: the same bytes, the same parts
            parts = partition_parts(body, manifest.files)
            refs = {path: replace(ref, part=parts.get(path)) for path, ref in refs.items()}
        change = Change(
            dataset=manifest.dataset,
            commit_id=text(section["commit_id"], "commit_id"),
            add=manifest.files,
            added_manifests=refs,
            remove=tuple(text(k, "removed key") for k in seq(section["remove"], "remove")),
            remove_partitions=tuple(
                text(p, "partition") for p in seq(section["remove_partitions"], "partitions")
            ),
            schema=decode_schema(text(schema, "schema")) if schema is not None else None,
            partition_by=(
                tuple(text(c, "column") for c in seq(partition_by, "partition_by"))
                if partition_by is not None
                else None
            ),
            properties=(
                {
                    text(k, "property"): (text(v, "value") if v is not None else None)
                    for k, v in obj(properties, "properties").items()
                }
                if properties is not None
                else None
            ),
            fence=fence,
            operation=text(section["operation"], "operation"),
            generated_id=section.get("generated_id") is True,
            schema_mode=_schema_mode(section),
            digest=(text(section["digest"], "digest") if "digest" in section else None),
            written=(
                boolean_free_int(section["written_ms"], "written_ms") / 1000
                if "written_ms" in section
                else None
            ),
            existing_files=section.get("existing_files") is True,
            on_version=_on_version(section),
            **_restore_of(section),
            group=_group(section, manifest.dataset),
        )
    except RegistryCorruptError:
        raise
    except Exception as error:  # any malformed field: the intent cannot be trusted
        raise RegistryCorruptError(
            f"intent is malformed: {type(error).__name__}: {error}", bucket=bucket, key=key
        ) from error
    return change, manifest


def _schema_mode(section: Mapping[str, Any]) -> str | None:
    """An intent's ``schema_mode``; one written before there was one merged new columns."""
    if "schema_mode" not in section:
        return "merge"
    mode = section["schema_mode"]
    return None if mode is None else text(mode, "schema_mode")


def prune_fates(
    fates: Iterable[IntentFate], *, watermark: str, keep: int
) -> tuple[IntentFate, ...]:
    """The fates a root keeps: every fate of an intent above the ``watermark`` (a folder may
    still LIST it, and must see it decided), the ``keep`` most recent, and the ``keep`` most
    recent of those not ``applied``. An applied intent's commit id stays in its dataset's
    commit-id index, where a writer still waiting for it finds it once its fate is gone; a
    rejection or cancellation is recorded nowhere else, and is rare, so it is kept longer."""
    ordered = list(fates)
    recent = {id(f) for f in ordered[-keep:]}
    recent |= {id(f) for f in [f for f in ordered if f.state != "applied"][-keep:]}
    return tuple(f for f in ordered if f.key > watermark or id(f) in recent)


def _restore_of(section: Mapping[str, Any]) -> dict[str, Any]:
    """A restore intent's snapshot, retention end and replacement time (``restore_from``,
    ``restore_until``, ``restore_since``: absent from an older writer's intent)."""
    if "restore" not in section:
        return {}
    restore = obj(section["restore"], "restore")
    snapshot = text(restore["snapshot"], "restore snapshot")
    if not snapshot.startswith(SNAPSHOT_PREFIX):
        raise ValueError(f"restore snapshot {snapshot!r} is not a snapshot key")
    until = restore["until"]
    if until is not None and (isinstance(until, bool) or not isinstance(until, int | float)):
        raise ValueError(f"restore until {until!r} is not a time")
    since = restore.get("since")
    if since is not None and (isinstance(since, bool) or not isinstance(since, int | float)):
        raise ValueError(f"restore since {since!r} is not a time")
    return {
        "restore_from": snapshot,
        "restore_until": float(until) if until is not None else None,
        "restore_since": float(since) if since is not None else None,
    }


def _group(section: Mapping[str, Any], dataset: str) -> Group | None:
    """The group an intent is one part of (``None``: a one-dataset commit)."""
    if "group" not in section:
        return None
    raw = obj(section["group"], "group")
    datasets = tuple(text(d, "group dataset") for d in seq(raw["datasets"], "group datasets"))
    if dataset not in datasets or len(set(datasets)) != len(datasets) or len(datasets) < 2:
        raise ValueError(f"group {list(datasets)} does not name {dataset!r} once among others")
    return Group(text(raw["id"], "group id"), datasets)


def _on_version(section: Mapping[str, Any]) -> int | None:
    """The intent's ``on_version`` (rule 15), absent for an unconditional commit."""
    value = section.get("on_version")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"on_version {value!r} is not a version")
    return value
