"""``vacuum``: find, and on request delete, objects nothing can read any more.

An object under ``datasets/`` or ``metastore/manifests/`` is an *orphan* when all of these hold:

1. the current registry does not reference it (neither a manifest of a partition nor a file
   listed in one);
2. no manifest retired within the retention window references it, so no reader of a snapshot
   younger than ``older_than`` can still be reading it (the registry lists retired manifests
   with their retirement time, see :mod:`lakelock._registry._document`);
3. it was last modified more than ``older_than`` ago, so writers still between writing a file
   and committing it (or preparing a manifest) are left alone.

``older_than`` may not exceed the registry's own retention (it forgets retired manifests after
that, and could no longer prove rule 2). Deletes are conditional (``If-Match`` with the ETag
seen when listing, in ``DeleteObjects`` batches): an object replaced since is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from lakelock._registry import Registry
from lakelock._registry._document import MANIFEST_PREFIX
from lakelock._s3 import ListedObject
from lakelock.errors import InvalidNameError, StorageError

__all__ = ["VacuumReport", "vacuum"]

Progress = Callable[[int, int], None]
SCANNED_PREFIXES = ("datasets/", MANIFEST_PREFIX)


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
    clock: Callable[[], float] = time.time,
) -> VacuumReport:
    """Report (and unless ``dry_run`` delete) the orphans of the lake (module docstring)."""
    if older_than < 0:
        raise InvalidNameError(older_than, "older_than is a non-negative number of seconds")
    if older_than > registry.retention:
        raise InvalidNameError(
            older_than,
            f"older_than exceeds the registry's retention ({registry.retention:.0f} s): "
            "retired manifests older than that are forgotten, so vacuum could not prove "
            "their files unread; raise Registry(retention=...) first",
        )
    store = registry.store
    now = clock()
    # Listing first, then the registry: a file committed after our read of the registry was
    # listed with a recent LastModified (written after the listing began) or is referenced.
    listed = [o for prefix in SCANNED_PREFIXES for o in store.list(prefix)]
    snapshot = registry.read()
    live_manifests = {
        ref.key
        for dataset in snapshot.datasets.values()
        for partition in dataset.partitions.values()
        for ref in partition.manifests
    }
    protected = set(live_manifests)
    protected |= {r.key for r in snapshot.retired if r.at >= now - older_than}
    for manifest in registry.load_manifests(sorted(protected)).values():
        protected.update(f.key for f in manifest.files)

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
