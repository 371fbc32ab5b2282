"""The registry document and its manifests: frozen types, one parser, one serialiser.

On S3 (keys relative to the lake prefix)::

    metastore/dataset_registry.json                     the root: CAS only (If-Match)
    metastore/manifests/<dataset>/<sha256>-<nonce>.json write-once, digest-named

The root, ``format_version`` 1::

    {
      "format_version": 1,
      "version": 42,                           # +1 per successful compare-and-swap
      "updated_at": "2026-11-21T08:00:00.000000Z",
      "datasets": {
        "<name>": {
          "schema": "<base64 Arrow IPC schema>", "schema_version": 2,
          "partition_by": ["year", "month"], "properties": {"owner": "etl"},
          "created_at": "...", "updated_at": "...", "updated_version": 41,
          "partitions": {
            "year=2024/month=01": {
              "manifests": [{"key": "metastore/manifests/<name>/<sha>.json",
                             "files": 3, "records": 1200, "size": 81234}],
              "updated_version": 41
            }
          }
        }
      },
      "fences": {"lease:leader": 7},           # highest fencing token seen per name
      "lock_fences": {"lock:sales": [          # commits made under path locks, per table
          {"token": 41, "read": ["/sales/a"], "write": ["/sales/b"], "at": 1763712000.0},
          {"token": 42, "read": [], "write": ["/sales/c"], "at": 1763712001.0,
           "held": true},                      # a write lock in force (FORMAT.md)
          {"token": 40, "read": [], "write": ["/sales/c"], "at": 1763711990.0,
           "ended": true}]},                   # one that ended: its fence is refused
      "commits": [{"id": "...", "version": 42, "dataset": "<name>", "at": "...",
                   "added": 1, "removed": 0, "operation": "append",
                   "digest": "sha256:..."}],  # the most recent commits, newest last
      "retired": [{"key": "metastore/manifests/...", "dataset": "<name>", "at": 1763712000.0}]
    }

``retired`` lists manifests that left the registry (replaced by a consolidated manifest) and
when, so ``vacuum`` keeps their files for readers of older snapshots until the retention
window has passed; entries older than the registry's retention are dropped by later commits.

The root stays small as the lake grows: it holds datasets, partitions and per-partition
summaries, never file lists. A partition's files live in its manifests; an append adds a
manifest holding just the new files (no read of the old ones), and a removal or a compaction
replaces a partition's manifests by one consolidated manifest. A manifest's key names the
SHA-256 of its bytes (checked on every read) plus a nonce (every write is a new object, never
one adopted from an earlier attempt that ``vacuum`` may be deleting); a cached manifest never
goes stale.

A manifest::

    {"format_version": 1, "dataset": "<name>", "partition": "year=2024/month=01",
     "files": [DataFile.to_json(), ...]}

:func:`parse_registry` and :func:`parse_manifest` are the only ways in; a document that is
not JSON, has an unknown ``format_version``, or breaks an invariant raises
:class:`~lakelock.errors.RegistryCorruptError`, and the commit loop never overwrites it.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from types import MappingProxyType
from typing import Any, TypeVar

import orjson
import pyarrow as pa

from lakelock._jsonfields import boolean_free_int, number, obj, seq, text
from lakelock._layout import REGISTRY_KEY
from lakelock._registry._manifest import load_json
from lakelock._registry._settings import LakeSettings, parse_settings
from lakelock._registry._snapshot import DatasetEntry, Totals, dataset_fields
from lakelock._registry._tree import EMPTY, Node
from lakelock.errors import RegistryCorruptError

__all__ = [
    "FORMAT_VERSION",
    "GUARDED_FORMAT",
    "LAST_MODIFIED_RESOLUTION",
    "READABLE_FORMATS",
    "REGISTRY_KEY",
    "CommitRecord",
    "DatasetState",
    "IntentFate",
    "LockFenceRecord",
    "ManifestRef",
    "PartitionState",
    "RegistryDoc",
    "RegistrySnapshot",
    "RetiredManifest",
    "decode_schema",
    "encode_schema",
    "parse_partition",
    "parse_registry",
    "serialize_registry",
    "with_datasets",
]

#: The registry format this lakelock writes; it reads 1, 2 and 3 (every swap writes 3).
#: Format 3 is format 2's shape; its number keeps out the lakelocks that read only 1 and 2
#: (they refuse a format they do not know and never overwrite it), which would apply a
#: commit spanning datasets one intent at a time and a restore's intent as a commit that
#: changes nothing (docs/FORMAT.md rule 17).
FORMAT_VERSION = 3
READABLE_FORMATS = (1, 2, 3)
#: The first format whose writers all apply group and restore intents as rule 16 and 9 say:
#: such an intent is written only into a lake whose root this writer read at it (rule 17).
GUARDED_FORMAT = 3

#: The resolution of a listed ``LastModified`` (S3 lists whole seconds), and so the slack a
#: recorded vacuum cutoff keeps above the newest orphan: a writer's write time (the ``Date``
#: of its PUT's answer less the PUT's duration) may be up to this much later than that
#: listing says (``lakelock._vacuum_plan.recorded_cutoff``).
LAST_MODIFIED_RESOLUTION = 1.0

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class ManifestRef:
    """A pointer from the root to one manifest, with the manifest's totals. ``part``: where
    this partition's files lie in a manifest shared by several partitions (start, end, sha256
    of those bytes: :data:`~lakelock._registry._manifest.Part`), so reading one partition
    reads just them; ``None``: read the manifest whole."""

    key: str
    files: int
    records: int
    size: int
    part: tuple[int, int, str] | None = None


@dataclass(frozen=True)
class PartitionState:
    """One partition of a dataset: its manifests and their totals."""

    path: str
    manifests: tuple[ManifestRef, ...]
    updated_version: int

    @property
    def file_count(self) -> int:
        return sum(m.files for m in self.manifests)

    @property
    def record_count(self) -> int:
        return sum(m.records for m in self.manifests)

    @property
    def size(self) -> int:
        return sum(m.size for m in self.manifests)


@dataclass(frozen=True)
class DatasetState:
    """One dataset as the registry records it."""

    name: str
    schema: pa.Schema | None
    schema_version: int
    partition_by: tuple[str, ...]
    properties: Mapping[str, str]
    partitions: Mapping[str, PartitionState]
    created_at: str
    updated_at: str
    updated_version: int
    # Format 2: where this version is stored, its parent, totals kept commit by commit, the
    # top of the commit-id tree and the recent commit ids not in it yet, its server commit
    # time and the commits that made it.
    snapshot: str | None = None
    parent: str | None = None
    totals: Totals | None = None
    commit_ids: Node = EMPTY
    recent_ids: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    at: float = 0.0
    commits: tuple[Any, ...] = ()
    created_version: int = 0

    @property
    def partition_count(self) -> int:
        return self.totals.partitions if self.totals is not None else len(self.partitions)

    @property
    def file_count(self) -> int:
        if self.totals is not None:
            return self.totals.files
        return sum(p.file_count for p in self.partitions.values())

    @property
    def record_count(self) -> int:
        if self.totals is not None:
            return self.totals.records
        return sum(p.record_count for p in self.partitions.values())

    @property
    def size(self) -> int:
        if self.totals is not None:
            return self.totals.size
        return sum(p.size for p in self.partitions.values())


@dataclass(frozen=True)
class CommitRecord:
    """One entry of the bounded list of recent commits (the idempotency window)."""

    id: str
    version: int
    dataset: str
    at: str
    added: int
    removed: int
    operation: str = "commit"
    #: What was committed (:func:`lakelock._digest.change_digest`), ``None`` if unknown
    #: (recorded before digests were, or by a commit of files whose rows nobody hashed).
    digest: str | None = None
    #: The key of the intent that made it (a commit spanning datasets: its first), so a
    #: writer that finds its commit id recorded knows whether its own intent made the record
    #: (FORMAT.md rule 2). ``None``: made by no intent, or recorded by a lakelock from before
    #: the field.
    intent: str | None = None

    @property
    def datasets(self) -> tuple[str, ...]:
        """The datasets it names (none: a lease's takeover, FORMAT.md "Lease takeovers")."""
        return tuple(self.dataset.split(",")) if self.dataset else ()

    @cached_property
    def json(self) -> dict[str, Any]:
        """How the root writes it (made once: the window's records go from version to
        version). Not to be changed."""
        return {
            "id": self.id,
            "version": self.version,
            "dataset": self.dataset,
            "at": self.at,
            "added": self.added,
            "removed": self.removed,
            "operation": self.operation,
            **({"digest": self.digest} if self.digest is not None else {}),
            **({"intent": self.intent} if self.intent is not None else {}),
        }


@dataclass(frozen=True)
class IntentFate:
    """What the root decided about one intent: ``applied`` at ``version``, ``rejected``
    (with ``reason``) or ``cancelled``; ``at`` is the server time of the decision."""

    key: str
    state: str
    version: int
    at: float
    reason: str = ""
    #: A rejection's typed error: its ``kind`` (the class's name) and its fields, so the
    #: intent's writer in another process raises that error (FORMAT.md rule 12).
    error: Mapping[str, Any] | None = None
    #: ``applied`` through another commit with its commit id, not by applying this intent
    #: (the very same change committed already: FORMAT.md rules 3 and 11), so its writer
    #: hears ``already_committed``. Absent in roots written before it: read as ``False``.
    already: bool = False

    @cached_property
    def json(self) -> dict[str, Any]:
        """How the root writes it (made once: a root carries hundreds of fates from version
        to version, and every attempt to swap it writes them all). Not to be changed."""
        return {
            "key": self.key,
            "state": self.state,
            "version": self.version,
            "at": self.at,
            **({"reason": self.reason} if self.reason else {}),
            **({"error": dict(self.error)} if self.error is not None else {}),
            **({"already": True} if self.already else {}),
        }


@dataclass(frozen=True)
class LockFenceRecord:
    """A commit made under a path-lock grant: its token, paths and time (epoch seconds).
    ``held``: the grant registered itself as a write lock in force (its ``lock`` commit) and
    no ``unlock`` has cleared it: commits of anyone else to its write paths are refused.
    ``ended``: its write lock was cleared (an ``unlock``, or a conflicting grant of a higher
    token registering): a grant that ended never holds again, so its fence is refused."""

    token: int
    read: tuple[str, ...]
    write: tuple[str, ...]
    at: float
    held: bool = False
    ended: bool = False

    @property
    def json(self) -> dict[str, Any]:
        fields = {"token": self.token, "read": list(self.read), "write": list(self.write)}
        flags = {**({"held": True} if self.held else {}), **({"ended": True} if self.ended else {})}
        return {**fields, "at": self.at, **flags}


@dataclass(frozen=True)
class RetiredManifest:
    """A manifest no longer referenced since ``at`` (seconds since the epoch)."""

    key: str
    dataset: str
    at: float


@dataclass(frozen=True)
class RegistryDoc:
    """The whole root document, immutable."""

    version: int = 0
    updated_at: str = ""
    datasets: Mapping[str, DatasetState] = field(default_factory=lambda: _EMPTY)
    fences: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    lock_fences: Mapping[str, tuple[LockFenceRecord, ...]] = field(default_factory=lambda: _EMPTY)
    commits: tuple[CommitRecord, ...] = ()
    retired: tuple[RetiredManifest, ...] = ()
    format_version: int = FORMAT_VERSION
    # Format 2: the root's line per dataset (the datasets mapping is loaded from these).
    entries: Mapping[str, DatasetEntry] = field(default_factory=lambda: _EMPTY)
    # Format 2, intents: every intent key at or below the watermark has had its fate decided;
    # recent fates are listed (newest last).
    watermark: str = ""
    fates: tuple[IntentFate, ...] = ()
    backup: str | None = None
    # Format 2: the lake's settings (lakelock._registry._settings); None: none stored yet
    # (a new lake, or one made before they were), written by the next commit.
    settings: LakeSettings | None = None
    # Format 2: the cutoff the last vacuum deleted under (seconds since the epoch, server
    # time: no unreferenced object last modified after it was deleted), recorded by its
    # compare-and-swap before it deleted anything; None: no vacuum recorded one (FORMAT.md
    # rule 10).
    vacuum_cutoff: float | None = None
    # Format 2: where the last vacuum's window began (seconds since the epoch, its clock,
    # compared with the recorded commit times as its walk compared them): it kept no version
    # replaced before it, so such a version may have lost its objects; recorded with the
    # cutoff, never lowered; None: not recorded (FORMAT.md rule 9).
    vacuum_horizon: float | None = None

    def fate(self, key: str) -> IntentFate | None:
        return _newest(self, "_fates_by_key", self.fates, attrgetter("key"), key)

    def commit(self, commit_id: str) -> CommitRecord | None:
        """The recent commit with this id, if it is still within the window."""
        return _newest(self, "_commits_by_id", self.commits, attrgetter("id"), commit_id)

    def newest_decided(self) -> str:
        """The newest intent the last swap decided; if it decided none (one that only
        cancelled, or changed the lake's settings), the newest whose fate the root records;
        else the watermark. Worked out once per parsed root (:func:`_indexed`: a waiting
        writer asks at every look, and each scan went over the root's hundreds of fates);
        a copy with other fates, version or watermark works it out again."""
        kept = self.__dict__.get("_newest_decided")
        if (
            kept is not None
            and kept[0] is self.fates
            and kept[1:3] == (self.version, self.watermark)
        ):
            found: str = kept[3]
            return found
        found = _newest_decided(self)
        self.__dict__["_newest_decided"] = (self.fates, self.version, self.watermark, found)
        return found


def _newest_decided(doc: RegistryDoc) -> str:
    """:meth:`RegistryDoc.newest_decided`, worked out."""
    last = max((f.key for f in doc.fates if f.version == doc.version), default="")
    return last or max((f.key for f in doc.fates), default="") or doc.watermark


_Record = TypeVar("_Record", IntentFate, CommitRecord)


def _newest(
    doc: RegistryDoc,
    index: str,
    records: tuple[_Record, ...],
    name_of: Callable[[_Record], str],
    name: str,
) -> _Record | None:
    """The newest of ``records`` called ``name``: looked up in ``doc``'s ``index``
    (:func:`_indexed`) while that was made from these very records, else found by a scan."""
    indexed = doc.__dict__.get(index)
    if indexed is not None and indexed[0] is records:
        found: _Record | None = indexed[1].get(name)
        return found
    for record in reversed(records):
        if name_of(record) == name:
            return record
    return None


def _indexed(doc: RegistryDoc) -> RegistryDoc:
    """``doc`` with its fates by key and recent commits by id, for :meth:`RegistryDoc.fate`
    and :meth:`RegistryDoc.commit` (the newest of a key wins, as their scans find it), and
    its :meth:`RegistryDoc.newest_decided` (asked at every look of a waiting writer). Kept
    beside the fields, with the tuple each was made from: a copy that changes that field
    (:func:`with_datasets` copies the rest) scans again. A parsed root is shared by every
    reader of its bytes (:func:`parse_registry`), and settling a batch looks up each of its
    commits in the root's hundreds of fates."""
    doc.__dict__["_fates_by_key"] = (doc.fates, {f.key: f for f in doc.fates})
    doc.__dict__["_commits_by_id"] = (doc.commits, {c.id: c for c in doc.commits})
    decided = _newest_decided(doc)
    doc.__dict__["_newest_decided"] = (doc.fates, doc.version, doc.watermark, decided)
    return doc


def with_datasets(doc: RegistryDoc, datasets: Mapping[str, DatasetState]) -> RegistryDoc:
    """``dataclasses.replace(doc, datasets=datasets)`` without running ``__init__`` over every
    field again (a waiting writer reads the root again and again), keeping ``doc``'s indexes
    (:func:`_indexed`)."""
    copy = object.__new__(RegistryDoc)
    copy.__dict__.update(doc.__dict__)
    copy.__dict__["datasets"] = datasets
    return copy


# -- schema ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegistrySnapshot:
    """One consistent version of the registry."""

    version: int
    etag: str | None
    updated_at: str
    datasets: Mapping[str, DatasetState]
    fences: Mapping[str, int]
    commits: tuple[CommitRecord, ...]
    retired: tuple[RetiredManifest, ...] = ()
    lock_fences: Mapping[str, tuple[LockFenceRecord, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    format_version: int = FORMAT_VERSION
    #: ``True`` for a version other than the current one (time travel): every field is as
    #: it was then (``commits``: those of the current window made at or before it);
    #: ``fences`` and ``lock_fences`` are empty (fencing state keeps no history).
    historical: bool = False
    #: The lake's settings as this root stores them (``None``: none stored yet, so the
    #: defaults hold until the next commit stores them).
    settings: LakeSettings | None = None
    #: The cutoff the last vacuum deleted under, recorded in this root (seconds since the
    #: epoch, server time; FORMAT.md rule 10): a commit adding a file written at or before
    #: it is refused. ``None``: no vacuum recorded one (or a version other than the current).
    vacuum_cutoff: float | None = None
    #: Where the last vacuum's window began, recorded in this root (seconds since the epoch,
    #: by the recorded commit times; FORMAT.md rule 9): a version replaced before it is
    #: neither read nor restored, whatever the retention. ``None``: none recorded.
    vacuum_horizon: float | None = None

    @classmethod
    def of(cls, doc: RegistryDoc, etag: str | None) -> RegistrySnapshot:
        return cls(
            doc.version,
            etag,
            doc.updated_at,
            doc.datasets,
            doc.fences,
            doc.commits,
            doc.retired,
            doc.lock_fences,
            doc.format_version,
            settings=doc.settings,
            vacuum_cutoff=doc.vacuum_cutoff,
            vacuum_horizon=doc.vacuum_horizon,
        )


def encode_schema(schema: pa.Schema) -> str:
    """The exact Arrow schema (types, nullability, metadata) as base64 IPC bytes."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))


# -- parsing --------------------------------------------------------------------------------


#: Roots parsed lately, by their bytes: a waiter reads the same root again and again, and
#: parsing one with its windows of fates and commits is most of a commit's CPU.
_PARSED: OrderedDict[bytes, RegistryDoc] = OrderedDict()
_PARSED_SIZE = 8
_PARSED_LOCK = threading.Lock()


def parse_registry(
    body: bytes, *, bucket: str | None = None, key: str | None = None
) -> RegistryDoc:
    """The one way to read a registry document (format 1, 2 or 3). Raises RegistryCorruptError on
    anything that is not a registry this version of lakelock understands: fields of the wrong
    JSON type are refused, never coerced. A format-2 document's ``datasets`` is empty: its
    ``entries`` point to the snapshots the registry shell loads on demand. (A pure function
    of ``body``: the last few results are kept, and the same bytes are parsed once.)"""
    with _PARSED_LOCK:
        doc = _PARSED.get(body)
        if doc is not None:
            _PARSED.move_to_end(body)
            return doc
    doc = _indexed(_parse_registry(body, bucket=bucket, key=key))
    with _PARSED_LOCK:
        _PARSED[body] = doc
        while len(_PARSED) > _PARSED_SIZE:
            _PARSED.popitem(last=False)
    return doc


def _parse_registry(body: bytes, *, bucket: str | None, key: str | None) -> RegistryDoc:
    data = load_json(body, "registry", bucket, key)
    try:
        version = data.get("format_version")
        if version not in READABLE_FORMATS:
            raise RegistryCorruptError(
                f"registry has format_version {version!r}; this lakelock reads "
                f"{list(READABLE_FORMATS)} (upgrade lakelock to read newer documents; it never "
                "rewrites what it cannot read)",
                bucket=bucket,
                key=key,
            )
        common: dict[str, Any] = {
            "version": boolean_free_int(data["version"], "version", minimum=0),
            "updated_at": text(data["updated_at"], "updated_at"),
            "fences": MappingProxyType(
                {
                    text(name, "fence name"): boolean_free_int(token, f"fence {name!r}")
                    for name, token in obj(data["fences"], "fences").items()
                }
            ),
            "lock_fences": MappingProxyType(
                {
                    text(name, "lock fence name"): tuple(
                        _lock_fence(obj(r, "lock fence"))
                        for r in seq(records, f"lock fences {name!r}")
                    )
                    for name, records in obj(data["lock_fences"], "lock_fences").items()
                }
            ),
            "commits": tuple(
                _commit(obj(c, "commit"), legacy=version == 1)
                for c in seq(data["commits"], "commits")
            ),
        }
        if version == 1:
            doc = RegistryDoc(
                format_version=1,
                datasets=MappingProxyType(
                    {
                        text(name, "dataset name"): _parse_dataset(
                            name, obj(raw, f"dataset {name!r}")
                        )
                        for name, raw in obj(data["datasets"], "datasets").items()
                    }
                ),
                retired=tuple(
                    RetiredManifest(
                        key=text(r["key"], "retired key"),
                        dataset=text(r["dataset"], "retired dataset"),
                        at=number(r["at"], "retired at"),
                    )
                    for r in (obj(item, "retired") for item in seq(data["retired"], "retired"))
                ),
                **common,
            )
        else:
            intents = obj(data["intents"], "intents")
            backup = data["backup"]
            cutoff, horizon = _vacuum_of(
                obj(data["vacuum"], "vacuum") if "vacuum" in data else None
            )
            doc = RegistryDoc(
                format_version=version,  # 2 or 3: one shape
                entries=MappingProxyType(
                    {
                        text(name, "dataset name"): DatasetEntry.from_json(
                            obj(raw, f"dataset {name!r}")
                        )
                        for name, raw in obj(data["datasets"], "datasets").items()
                    }
                ),
                watermark=text(intents["watermark"], "watermark"),
                fates=tuple(_fate(obj(f, "fate")) for f in seq(intents["fates"], "fates")),
                backup=text(backup, "backup") if backup is not None else None,
                settings=parse_settings(data["settings"]) if "settings" in data else None,
                vacuum_cutoff=cutoff,
                vacuum_horizon=horizon,
                **common,
            )
    except RegistryCorruptError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, pa.ArrowException) as error:
        raise RegistryCorruptError(
            f"registry document is malformed: {type(error).__name__}: {error}",
            bucket=bucket,
            key=key,
        ) from error
    if any(c.version > doc.version for c in doc.commits):
        raise RegistryCorruptError(
            "registry lists a commit newer than the document", bucket=bucket, key=key
        )
    if any(e.version > doc.version for e in doc.entries.values()):
        raise RegistryCorruptError(
            "registry points to a dataset snapshot newer than the document",
            bucket=bucket,
            key=key,
        )
    return doc


def _fate(f: Mapping[str, Any]) -> IntentFate:
    state = text(f["state"], "fate state")
    if state not in ("applied", "rejected", "cancelled"):
        raise ValueError(f"unknown intent fate {state!r}")
    return IntentFate(
        key=text(f["key"], "fate key"),
        state=state,
        version=boolean_free_int(f["version"], "fate version", minimum=0),
        at=number(f["at"], "fate at"),
        reason=text(f.get("reason", ""), "fate reason"),
        error=_fate_error(f.get("error")),
        already=_flag(f.get("already", False), "fate already"),
    )


def _fate_error(raw: Any) -> Mapping[str, Any] | None:
    """A fate's typed error: its ``kind`` and fields (strings, whole numbers, lists of
    strings); what a reader does not know it reads as a plain rejection."""
    if raw is None:
        return None
    error = obj(raw, "fate error")
    text(error.get("kind"), "fate error kind")
    for name, value in error.items():
        if isinstance(value, list):
            for item in value:
                text(item, f"fate error {name}")
        elif not isinstance(value, str | int) or isinstance(value, bool):
            raise ValueError(f"fate error {name} must be a string or a whole number")
    return MappingProxyType(dict(error))


def _lock_fence(r: Mapping[str, Any]) -> LockFenceRecord:
    return LockFenceRecord(
        token=boolean_free_int(r["token"], "lock fence token"),
        read=tuple(text(p, "lock fence path") for p in seq(r["read"], "lock fence read")),
        write=tuple(text(p, "lock fence path") for p in seq(r["write"], "lock fence write")),
        at=number(r["at"], "lock fence at"),
        held=_flag(r.get("held", False), "lock fence held"),
        ended=_flag(r.get("ended", False), "lock fence ended"),
    )


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, not {value!r}")
    return value


def _commit(c: Mapping[str, Any], *, legacy: bool) -> CommitRecord:
    """One commit record; a format-1 root's may predate ``operation`` (read as "commit"),
    a format-2 root's always has it."""
    return CommitRecord(
        id=text(c["id"], "commit id"),
        version=boolean_free_int(c["version"], "commit version", minimum=1),
        dataset=text(c["dataset"], "commit dataset"),
        at=text(c["at"], "commit at"),
        added=boolean_free_int(c["added"], "commit added", minimum=0),
        removed=boolean_free_int(c["removed"], "commit removed", minimum=0),
        operation=text(
            c["operation"] if not legacy else c.get("operation", "commit"), "commit operation"
        ),
        digest=text(c["digest"], "commit digest") if "digest" in c else None,
        intent=text(c["intent"], "commit intent") if "intent" in c else None,
    )


def _parse_dataset(name: str, raw: Mapping[str, Any]) -> DatasetState:
    return DatasetState(
        name=name,
        **dataset_fields(raw, decode_schema),
        partitions=MappingProxyType(
            {
                text(path, "partition path"): parse_partition(path, obj(p, f"partition {path!r}"))
                for path, p in obj(raw["partitions"], "partitions").items()
            }
        ),
        created_at=text(raw["created_at"], "created_at"),
        updated_at=text(raw["updated_at"], "updated_at"),
        updated_version=boolean_free_int(raw["updated_version"], "updated_version", minimum=0),
    )


def parse_partition(path: str, p: Mapping[str, Any]) -> PartitionState:
    """One partition's JSON: its manifest references and when it last changed."""
    return PartitionState(
        path=path,
        manifests=tuple(
            ManifestRef(
                key=text(m["key"], "manifest key"),
                files=boolean_free_int(m["files"], "files", minimum=0),
                records=boolean_free_int(m["records"], "records", minimum=0),
                size=boolean_free_int(m["size"], "size", minimum=0),
                part=_part(m["part"]) if "part" in m else None,
            )
            for m in (obj(item, "manifest ref") for item in seq(p["manifests"], "manifests"))
        ),
        updated_version=boolean_free_int(p["updated_version"], "updated_version", minimum=0),
    )


def _part(raw: Any) -> tuple[int, int, str]:
    start, end, digest = seq(raw, "manifest part")
    first = boolean_free_int(start, "part start", minimum=0)
    last = boolean_free_int(end, "part end", minimum=first + 1)
    return first, last, text(digest, "part digest")


def _vacuum_of(vacuum: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
    """The root's record of the last vacuum (``None``: none): its cutoff and its horizon (a
    root a vacuum of an earlier lakelock claimed records the cutoff alone)."""
    if vacuum is None:
        return None, None
    cutoff = number(vacuum["cutoff"], "vacuum cutoff")
    horizon = vacuum.get("horizon")
    return cutoff, number(horizon, "vacuum horizon") if horizon is not None else None


# -- serialising ----------------------------------------------------------------------------


def _vacuum_json(doc: RegistryDoc) -> dict[str, float | None]:
    """The root's ``vacuum`` record: the cutoff (rule 10) and, when recorded, the horizon."""
    recorded = {"cutoff": doc.vacuum_cutoff}
    return recorded if doc.vacuum_horizon is None else {**recorded, "horizon": doc.vacuum_horizon}


def serialize_registry(doc: RegistryDoc) -> bytes:
    """The root as compact JSON with sorted keys: the same document, the same bytes. A
    format-2 document is written from its ``entries`` (the registry shell fills them in when
    it writes the snapshots); format 1 only for tests and tools that build old lakes."""
    if doc.format_version == 1:
        specific: dict[str, Any] = {
            "datasets": {name: _dataset_json(d) for name, d in doc.datasets.items()},
            "retired": [{"key": r.key, "dataset": r.dataset, "at": r.at} for r in doc.retired],
        }
    else:
        specific = {
            "datasets": {name: e.to_json() for name, e in doc.entries.items()},
            "intents": {
                "watermark": doc.watermark,
                "fates": [f.json for f in doc.fates],
            },
            "backup": doc.backup,
            **({"settings": doc.settings.to_json()} if doc.settings is not None else {}),
            **({"vacuum": _vacuum_json(doc)} if doc.vacuum_cutoff is not None else {}),
        }
    return orjson.dumps(
        {
            "format_version": doc.format_version,
            "version": doc.version,
            "updated_at": doc.updated_at,
            **specific,
            "fences": dict(doc.fences),
            "lock_fences": {
                name: [r.json for r in records] for name, records in doc.lock_fences.items()
            },
            "commits": [c.json for c in doc.commits],
        },
        option=orjson.OPT_SORT_KEYS,
    )


def _dataset_json(d: DatasetState) -> dict[str, Any]:
    return {
        "schema": encode_schema(d.schema) if d.schema is not None else None,
        "schema_version": d.schema_version,
        "partition_by": list(d.partition_by),
        "properties": dict(d.properties),
        "created_at": d.created_at,
        "updated_at": d.updated_at,
        "updated_version": d.updated_version,
        "partitions": {
            path: {
                "manifests": [
                    {"key": m.key, "files": m.files, "records": m.records, "size": m.size}
                    for m in p.manifests
                ],
                "updated_version": p.updated_version,
            }
            for path, p in d.partitions.items()
        },
    }
