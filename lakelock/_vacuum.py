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
never deletes what a permitted read could need. Nor may it be shorter, unless the caller says
so (``enforce_retention=False``, as delta-rs's ``enforce_retention_duration``): every version
within the retention stays readable, as time travel promises; a version vacuum removed is
:class:`~lakelock.errors.SnapshotExpiredError`, naming the versions that remain.
``metastore/backups/`` (a format-1 root kept on upgrade) is never deleted. Deletes are
conditional on the ETag seen when listing (an object replaced since is kept):
``DeleteObjects`` with per-key ETags where the store honours them, else one ``DeleteObject``
with ``If-Match`` per object, and nothing at all on a store that honours neither
(:meth:`lakelock._s3.ObjectStore.delete_if_unchanged`).

The reads and the decisions are :mod:`lakelock._vacuum_plan`, a sans-I/O generator of the
commit core's requests run here through the core's driver (and in virtual time by the
simulator, next to many writers: docs/SIMULATOR.md). Its order is what makes vacuum safe:
the listing first, then the root, once — the intents it has not decided (3.) and the
versions it keeps (1.) both from that one document: an intent applied after the listing is
undecided in it, or referenced by the version that applied it (current, or replaced within
the window), never neither — then the snapshots, nodes and manifests those versions reach.
Before deleting, it swaps the root for one recording the cutoff it deletes under
(:func:`lakelock._vacuum_plan.claim`, FORMAT.md rule 10): a writer's swap based on an
earlier root then fails and is judged again, so none lands referencing what it deletes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lakelock._datasets import Progress
from lakelock._durations import at_most_a_century, format_duration
from lakelock._mirror._vacuum import drop_expired_snapshots, view_keep
from lakelock._registry import Registry
from lakelock._registry._core import Driver
from lakelock._registry._document import REGISTRY_KEY
from lakelock._registry._settings import LakeSettings
from lakelock._vacuum_plan import (
    DELETE_BATCH,
    SCANNED_PREFIXES,
    Plan,
    VacuumReport,
    claim,
    classify,
    plan,
    record_deletions,
)
from lakelock.errors import InvalidArgumentError

__all__ = ["SCANNED_PREFIXES", "VacuumReport", "check_window", "vacuum"]


def vacuum(
    registry: Registry,
    *,
    older_than: float | None = None,
    dry_run: bool = True,
    progress: Progress | None = None,
    listing: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.time,
    enforce_retention: bool = True,
) -> VacuumReport:
    """Report (and unless ``dry_run`` delete) the orphans of the lake (module docstring).
    ``listing`` is told how many objects have been listed so far (every page, 1000 keys);
    ``progress(done, total)`` how many orphans have been deleted. ``older_than`` (default:
    the lake's retention) below the lake's retention is refused unless
    ``enforce_retention=False``, below its vacuum floor always (:func:`check_window`), and
    above a century before anything is read, as every duration is
    (:data:`~lakelock._durations.MAX_DURATION`)."""
    if older_than is not None:
        at_most_a_century(older_than, what="older_than")
    settings = registry.settings()
    if older_than is None:
        older_than = settings.retention
    check_window(older_than, settings, enforce_retention=enforce_retention)
    store = registry.store
    # The reads and the decisions are lakelock._vacuum_plan's (what the simulator runs too).
    driver = Driver(store, store, sleep=registry.retry.sleep, clock=clock)
    found: Plan = driver.run(
        plan(
            older_than=older_than,
            intent_ttl=settings.intent_ttl,
            bucket=store.bucket,
            cache=registry.internals.objects,
            root_name=store.full_key(REGISTRY_KEY),
            listing=listing,
        )
    )
    report = _classified(registry, found, older_than=older_than, dry_run=dry_run)
    if dry_run or not report.orphans:
        return report
    # Rule 10: the root moves (recording the cutoff) before anything is deleted, so no swap
    # based on a root read before can land; decided again if a commit landed meanwhile.
    found = driver.run(
        claim(
            found,
            older_than=older_than,
            intent_ttl=settings.intent_ttl,
            retry=registry.retry,
            bucket=store.bucket,
            root_name=store.full_key(REGISTRY_KEY),
        )
    )
    report = _classified(registry, found, older_than=older_than, dry_run=dry_run)
    # The Iceberg views' newest metadata, written again without the snapshots about to go.
    drop_expired_snapshots(registry, found.doc, found.oldest, found.listed, now=found.now)
    total = len(report.orphans)
    done = 0
    for start in range(0, total, DELETE_BATCH):
        batch = report.orphans[start : start + DELETE_BATCH]
        results = store.delete_if_unchanged([(o.key, o.etag) for o in batch])
        record_deletions(report, batch, results)
        done += len(batch)
        if progress is not None:
            progress(done, total)
    return report


def _classified(
    registry: Registry, found: Plan, *, older_than: float, dry_run: bool
) -> VacuumReport:
    """What ``found`` makes of each object listed, the views' objects kept too."""
    cutoff = found.now - older_than
    # The Iceberg and Delta views: the objects of every version kept (lakelock._mirror).
    protected = found.protected | view_keep(
        registry, found.listed, cutoff=cutoff, oldest=found.oldest
    )
    report = classify(found.listed, protected, cutoff=cutoff, dry_run=dry_run)
    report.unproven = dict(found.unproven)
    return report


def check_window(older_than: float, settings: LakeSettings, *, enforce_retention: bool) -> None:
    """Refuse a window vacuum must not use (:class:`~lakelock.errors.InvalidArgumentError`):
    negative; longer than the lake's retention (versions older than that may not be read,
    so vacuum keeps nothing for them); shorter than the retention unless
    ``enforce_retention=False`` (the versions time travel promises to keep would go); and
    shorter than the lake's vacuum floor whatever the caller says (FORMAT.md, "Retention
    and vacuum": writers commit what they wrote only while it is younger than half the
    floor, so a shorter window could delete what a writer is committing)."""
    retention, floor = settings.retention, settings.vacuum_floor
    window, lake_retention, lake_floor = (
        format_duration(older_than),
        format_duration(retention),
        format_duration(floor),
    )
    if older_than < 0:
        raise InvalidArgumentError(
            older_than, "a non-negative number of seconds", what="older_than"
        )
    if older_than < floor:
        raise InvalidArgumentError(
            window,
            f"older_than ({window}) is below the lake's vacuum floor ({lake_floor}): a writer "
            "may still be committing objects that young; lower the floor first "
            "(lake.configure(vacuum_floor=...), lakelock registry configure --vacuum-floor)",
            what="older_than",
        )
    if enforce_retention and older_than < retention:
        raise InvalidArgumentError(
            window,
            f"older_than ({window}) is below the lake's retention ({lake_retention}): vacuum "
            "would delete versions that time travel promises to keep readable; pass "
            "enforce_retention=False (lakelock vacuum --no-enforce-retention) to delete them "
            "anyway",
            what="older_than",
        )
    if older_than > retention:
        raise InvalidArgumentError(
            window,
            f"older_than ({window}) exceeds the lake's retention ({lake_retention}): versions "
            "older than that may not be read, so vacuum keeps nothing for them; raise the "
            "retention first (lake.configure(retention=...), lakelock registry configure "
            "--retention)",
            what="older_than",
        )
