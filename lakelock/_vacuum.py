"""``vacuum``: find, and on request delete, objects nothing can read any more.

An object under ``datasets/``, ``metastore/manifests/``, ``metastore/nodes/``,
``metastore/snapshots/`` or ``metastore/intents/`` is an *orphan* when all of these hold:

1. no dataset version a reader may still use reaches it. In a format-2 registry those are,
   per dataset, the current snapshot and every older one that was still current less than
   ``older_than`` ago (its successor committed within the window): their snapshot objects,
   index nodes, manifests and data files are kept. (A format-1 registry: the current
   manifests and files, plus those of manifests it lists as retired within the window; a
   retired manifest already deleted is skipped, its files are orphans like any other.)
2. it was last modified more than ``older_than`` ago, so writers still between writing a file
   and committing it (or preparing a manifest, node or snapshot) are left alone;
3. it is not an intent that may still be applied: one with no fate recorded in the root,
   above the root's watermark (a fold may apply it) or written within the intent TTL (a fold
   passed it over and its writer applies it). Applied intents are kept while an index refers
   to them (they are the manifests of their files); rejected and cancelled ones are orphans.

The Iceberg and Delta views (``views/``, ``datasets/<dataset>/_delta_log/``) keep the objects
of every dataset version kept, as :mod:`lakelock._mirror._vacuum` details; the rest of them
are orphans like any other object.

Reading a version older than the registry's retention is refused
(:class:`~lakelock.errors.SnapshotExpiredError`), so ``older_than`` may not exceed it: vacuum
never deletes what a permitted read could need. ``metastore/backups/`` (a format-1 root kept
on upgrade) is never deleted. Deletes are conditional on the ETag seen when listing (an
object replaced since is kept): ``DeleteObjects`` with per-key ETags where the store honours
them, else one ``DeleteObject`` with ``If-Match`` per object, and nothing at all on a store
that honours neither (:meth:`lakelock._s3.ObjectStore.delete_if_unchanged`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from lakelock._datasets import Progress
from lakelock._layout import DATASETS_PREFIX
from lakelock._mirror._layout import VIEWS_PREFIX
from lakelock._mirror._vacuum import view_keep
from lakelock._objects import ListedObject
from lakelock._registry import Registry
from lakelock._registry._intents import INTENT_PREFIX
from lakelock._registry._manifest import MANIFEST_PREFIX
from lakelock._registry._snapshot import SNAPSHOT_PREFIX
from lakelock._registry._tree import NODE_PREFIX
from lakelock.errors import InvalidNameError, StorageError

__all__ = ["VacuumReport", "vacuum"]

SCANNED_PREFIXES = (
    DATASETS_PREFIX,
    MANIFEST_PREFIX,
    NODE_PREFIX,
    SNAPSHOT_PREFIX,
    INTENT_PREFIX,
    VIEWS_PREFIX,
)


@dataclass
class VacuumReport:
    """What vacuum found and did. ``orphans`` are the deletable objects (deleted unless
    ``dry_run``); ``deleted`` and ``failed`` say what happened to them."""

    dry_run: bool
    scanned: int = 0
    referenced: int = 0
    recent: int = 0
    orphans: list[ListedObject] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: dict[str, StorageError] = field(default_factory=dict)

    @property
    def orphan_bytes(self) -> int:
        return sum(o.size for o in self.orphans)


def vacuum(
    registry: Registry,
    *,
    older_than: float,
    dry_run: bool = True,
    progress: Progress | None = None,
    listing: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> VacuumReport:
    """Report (and unless ``dry_run`` delete) the orphans of the lake (module docstring).
    ``listing`` is told how many objects have been listed so far (every page, 1000 keys);
    ``progress(done, total)`` how many orphans have been deleted."""
    if older_than < 0:
        raise InvalidNameError(older_than, "older_than is a non-negative number of seconds")
    if older_than > registry.retention:
        raise InvalidNameError(
            older_than,
            f"older_than exceeds the registry's retention ({registry.retention:.0f} s): "
            "versions older than that may not be read, so vacuum keeps nothing for them; "
            "raise the retention first (Lake(retention=...), vacuum --retention)",
        )
    store = registry.store
    now = clock()
    # Listing first, then the registry: a file committed after our read of the registry was
    # listed with a recent LastModified (written after the listing began) or is referenced.
    listed: list[ListedObject] = []
    for prefix in SCANNED_PREFIXES:
        for obj in store.list(prefix):
            listed.append(obj)
            if listing is not None and len(listed) % 1000 == 0:
                listing(len(listed))
    if listing is not None:
        listing(len(listed))
    # An intent no swap has decided yet may still be applied (by a folder, or by its writer
    # within the intent TTL): kept, however old vacuum's window says it is. Read before the
    # versions: one applied between the two reads is undecided in the first or referenced in
    # the second (the other way round, it could be neither, and be deleted as it became a
    # manifest of the current version).
    protected = registry.undecided_intents(since=now - registry.intent_ttl)
    protected |= registry.reachable(cutoff=now - older_than)
    # The Iceberg and Delta views: the objects of every version kept (lakelock._mirror).
    protected |= view_keep(registry, listed, cutoff=now - older_than)

    report = VacuumReport(dry_run=dry_run, scanned=len(listed))
    cutoff = now - older_than
    for obj in listed:
        if obj.key in protected:
            report.referenced += 1
        elif _timestamp(obj.last_modified) > cutoff:
            report.recent += 1
        else:
            report.orphans.append(obj)
    if dry_run or not report.orphans:
        return report
    total = len(report.orphans)
    done = 0
    for start in range(0, total, 1000):
        batch = report.orphans[start : start + 1000]
        results = store.delete_if_unchanged([(o.key, o.etag) for o in batch])
        for obj in batch:
            error = results.get(obj.key)
            if error is None and obj.key in results:
                report.deleted.append(obj.key)
            elif error is not None:
                report.failed[obj.key] = error
        done += len(batch)
        if progress is not None:
            progress(done, total)
    return report


def _timestamp(moment: datetime) -> float:
    return moment.timestamp()
