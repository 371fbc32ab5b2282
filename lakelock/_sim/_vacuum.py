"""Vacuum in the simulator: processes that run lakelock's own vacuum (the sans-I/O
:func:`lakelock._vacuum_plan.plan`, its pure decisions, and conditional deletes) next to the
writers, and the rules the checker judges every deletion by.

A vacuum process sleeps about ``vacuum_every`` seconds, then vacuums with
``older_than = vacuum_older_than`` as ``vacuum(..., enforce_retention=False, dry_run=False)``
does: the listing, one read of the root, the walk of the versions it keeps, then a
``DeleteObject`` with ``If-Match`` (the ETag listed) per orphan, once it has swapped the root
for one recording its cutoff (:func:`lakelock._vacuum_plan.claim`; ``R`` below is the root
it swapped in, which keeps what the root it read did). Its clock is the server's.
It goes on until ``vacuum_older_than`` plus two rounds past the writers' end, so what the run
left behind gets old enough to go.

A deletion of ``key`` at virtual time ``t`` is judged by the vacuum run that made it (the
process that sent the ``DeleteObject``, in the run it was making then: not the first run that
listed the key). That run began at ``b`` (its clock then ``now``, its window's start
``cutoff = now - older_than``) and read root version ``R``; the deletion is a violation when:

0. **not its orphan**: the run that deleted ``key`` had not found it an orphan;
1. **a retained version reaches it**: in root ``R``, a dataset's version, or any older
   version reached from it by walking back while the successor's recorded commit time
   (``Snapshot.at``: when the committing attempt began, on its writer's clock) is at least
   ``cutoff``, reaches ``key`` (its snapshot, index nodes, manifests and applied intents,
   data files): the versions current within ``older_than`` before the vacuum began. The
   walk goes on whatever it meets (FORMAT.md: vacuum keeps every version within the
   retention; a version partly deleted already still protects what is left of it);
2. **an undecided intent**: ``key`` is an intent whose fate ``R`` does not record and that is
   above ``R``'s watermark or was written after ``now - intent_ttl`` (a fold may still apply
   it, or its writer will);
3. **an intent applied after**: ``key`` is an intent that a root written after ``t`` reaches
   (it became a manifest of a version: vacuum took it away as it was applied);
3b. **a restore after**: the first version after ``R`` to reach ``key`` reaches it through
   a dataset it restored (FORMAT.md rule 9: a restore keeps a lead on the retention);
3c. **a commit after**: any other version written after ``t`` that reaches ``key``: a commit
   acknowledged referencing an object vacuum had deleted (a writer stalled past vacuum's
   window, or slowed by faults: it must check, by server time, that what it references is
   younger than the lake's vacuum floor, or refuse). These keys are also counted
   (``vacuum_late``);
4. **a recent object**: ``key`` was last modified after ``cutoff`` when the run listed it (a
   writer may be about to commit it). A conditional delete deletes whatever holds the listed
   ETag when it lands: a writer's retried PUT that re-created the same bytes after an
   earlier deletion is that object too, judged as listed (a commit of it is held to 3c).

A commit that fails on an object vacuum deleted with anything but a ``CommitError`` (a
``RegistryCorruptError`` out of a commit, an append or a vacuum) is a violation of the run's
checker (a missing object must never lock writers out of a dataset).

The rules speak of recorded commit times (``Snapshot.at``, the committing writer's clock),
as vacuum's window does: with writers' clocks skewed by more than ``older_than``, a version
current a moment ago may carry an old time and go (the sweep's vacuum runs have no skew).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import TYPE_CHECKING

import orjson

from lakelock._registry._core._requests import Get, Sleep, Steps
from lakelock._registry._document import REGISTRY_KEY, RegistryDoc, parse_registry
from lakelock._registry._intents import is_intent
from lakelock._registry._objects import partition_from_entry
from lakelock._registry._settings import DEFAULTS
from lakelock._registry._snapshot import Snapshot
from lakelock._registry._tree import Node
from lakelock._retry import RetryPolicy
from lakelock._sim._store import BUCKET, EPOCH, SimS3
from lakelock._vacuum_plan import Plan, claim, classify, delete_steps, plan
from lakelock.errors import LakelockError

if TYPE_CHECKING:
    from lakelock._sim._protocols import _Reader

__all__ = ["VacuumRun", "vacuum_problems", "vacuum_program"]


@dataclass
class VacuumRun:
    """One vacuum by one process: when it began (virtual time) and its clock then, its
    window, what it found and deleted, and how it ended."""

    process: int
    began: float
    now: float
    older_than: float
    intent_ttl: float
    #: The root version it read (0: none yet).
    read: int = -1
    ended: float | None = None
    orphans: frozenset[str] = frozenset()
    #: Each orphan's ``LastModified`` as listed (server seconds): the object it judged (a
    #: delete conditional on an ETag deletes whatever holds the same bytes by then).
    listed: Mapping[str, float] = field(default_factory=dict)
    #: The intents its listing found.
    intents: frozenset[str] = frozenset()
    deleted: tuple[str, ...] = ()
    failed: int = 0
    error: str | None = None


def vacuum_program(
    runs: list[VacuumRun],
    index: int,
    rng: Random,
    *,
    now: Callable[[], float],
    until: float,
    every: float,
    older_than: float | None,
    intent_ttl: float,
) -> Steps:
    """A vacuum process: vacuum about every ``every`` seconds until virtual time ``until``,
    with the window ``older_than`` (``None``: the retention of the root as each vacuum
    begins, which ``vacuum`` reads first, as its default)."""
    while now() < until:
        yield Sleep(rng.uniform(0.5, 1.5) * every)
        began = now()
        window = older_than
        if window is None:
            try:
                window = yield from _root_retention()
            except LakelockError:
                continue  # no settings read (faults, or no root yet): the next one goes on
        run = VacuumRun(index, began, EPOCH + began, window, intent_ttl)
        runs.append(run)
        try:
            found: Plan = yield from plan(older_than=window, intent_ttl=intent_ttl, bucket=BUCKET)
            run.now, run.read = found.now, found.doc.version
            run.intents = frozenset(o.key for o in found.listed if is_intent(o.key))
            report = classify(
                found.listed, found.protected, cutoff=found.now - window, dry_run=False
            )
            if report.orphans:
                # Rule 10: the root moves, recording the cutoff, before anything goes.
                found = yield from claim(
                    found,
                    older_than=window,
                    intent_ttl=intent_ttl,
                    retry=RetryPolicy(),
                    bucket=BUCKET,
                    rng=rng,
                )
                run.read = found.doc.version
                report = classify(
                    found.listed, found.protected, cutoff=found.now - window, dry_run=False
                )
            run.orphans = frozenset(o.key for o in report.orphans)
            run.listed = {o.key: o.last_modified.timestamp() for o in report.orphans}
            yield from delete_steps(report)
            run.deleted, run.failed = tuple(report.deleted), len(report.failed)
        except LakelockError as error:  # a failed vacuum (faults): the next one goes on
            run.error = f"{type(error).__name__}: {error}"
        run.ended = now()


def _root_retention() -> Steps:
    """The lake's retention as the root stores it (:class:`NotFoundError` without a root;
    the default without settings), read as ``vacuum`` reads its settings."""
    data = yield Get(REGISTRY_KEY)
    doc = parse_registry(data.body, bucket=BUCKET, key=REGISTRY_KEY)
    return (doc.settings or DEFAULTS).retention


class _Versions:
    """Every root the bucket held, and what each dataset version reaches (each once)."""

    def __init__(self, store: SimS3, reader: _Reader) -> None:
        self.reader = reader
        self.bodies = store.history.get(REGISTRY_KEY, [])
        self._docs: dict[int, RegistryDoc] = {}
        self.times = [at for at, _ in self.bodies]
        self._reaches: dict[str, frozenset[str]] = {}

    def doc(self, n: int) -> RegistryDoc:
        """The ``n``-th root written (parsed once)."""
        found = self._docs.get(n)
        if found is None:
            found = self._docs[n] = parse_registry(self.bodies[n][1], bucket=BUCKET)
        return found

    def snapshots(self) -> Iterable[tuple[float, str]]:
        """Each root's write time and the snapshot of each of its datasets."""
        for at, body in self.bodies:
            for entry in (orjson.loads(body).get("datasets") or {}).values():
                yield at, entry["snapshot"]

    def first_after(self, version: int, key: str) -> tuple[float, RegistryDoc]:
        """The first root after ``version`` that reaches ``key``."""
        for n in range(len(self.bodies)):
            doc = self.doc(n)
            if doc.version > version and any(
                key in self.reaches(e.snapshot) for e in doc.entries.values()
            ):
                return self.times[n], doc
        raise LookupError(key)

    def reached_by(self, key: str, version: int) -> bool:
        """Whether a root at or before ``version`` reaches ``key``."""
        return any(
            key in self.reaches(e.snapshot)
            for n in range(len(self.bodies))
            if self.doc(n).version <= version
            for e in self.doc(n).entries.values()
        )

    def version(self, version: int) -> RegistryDoc | None:
        """The root at ``version`` (versions rise by one per root written, from 1)."""
        n = version - 1
        if 0 <= n < len(self.bodies) and self.doc(n).version == version:
            return self.doc(n)
        return next(
            (self.doc(i) for i in range(len(self.bodies)) if self.doc(i).version == version), None
        )

    def reaches(self, key: str) -> frozenset[str]:
        """Snapshot ``key``, the nodes of its trees, its manifests and their files."""
        found = self._reaches.get(key)
        if found is None:
            snap = self.reader.snapshot(key)
            objects = {key}
            manifests: set[str] = set()
            for leaf in self._leaves(snap.partitions, objects):
                for path, raw in leaf.entries.items():
                    manifests.update(m.key for m in partition_from_entry(path, raw).manifests)
            for _ in self._leaves(snap.commit_ids, objects):
                pass
            objects |= manifests
            for manifest in sorted(manifests):
                objects.update(f.key for f in self.reader.manifest(manifest).files)
            found = self._reaches[key] = frozenset(objects)
        return found

    def _leaves(self, top: Node, nodes: set[str]) -> Iterable[Node]:
        stack = [top]
        while stack:
            node = stack.pop()
            if not node.is_branch:
                yield node
                continue
            for ref in node.children.values():
                nodes.add(ref.key)
                stack.append(self.reader.node(ref.key))

    def retained(self, doc: RegistryDoc, cutoff: float) -> set[str]:
        """What each dataset's version in ``doc`` and the older ones within ``cutoff`` reach
        (vacuum's walk, :func:`lakelock._vacuum_plan.reachable`, done independently). The
        walk goes on whatever it meets: every version within the retention is kept, one
        partly deleted already too (that deletion is judged on its own)."""
        keep: set[str] = set()
        for entry in doc.entries.values():
            successor_at: float | None = None
            key: str | None = entry.snapshot
            while key is not None and (successor_at is None or successor_at >= cutoff):
                snap: Snapshot = self.reader.snapshot(key)
                keep |= self.reaches(key)
                successor_at, key = snap.at, snap.parent
        return keep


def vacuum_problems(
    store: SimS3, runs: Sequence[VacuumRun], reader: _Reader
) -> tuple[list[str], set[str]]:
    """Every deletion that breaks a rule of the module docstring, judged by the vacuum run
    that made it, and the keys a version written after their deletion references (``late``:
    each one a violation too, reported)."""
    if not store.deleted:
        return [], set()
    versions = _Versions(store, reader)
    problems: list[str] = []
    current_until: dict[str, float] = {}
    for at, snapshot in versions.snapshots():
        current_until[snapshot] = at
    # For each key, the last time a root reaching it was written.
    needed_until: dict[str, float] = {}
    for snapshot, at in current_until.items():
        for key in versions.reaches(snapshot):
            needed_until[key] = max(at, needed_until.get(key, at))
    by_process: dict[str, list[VacuumRun]] = {}
    for run in runs:
        by_process.setdefault(f"vacuum {run.process}", []).append(run)
    retained: dict[tuple[int, float], set[str]] = {}
    late: set[str] = set()
    for (t, key, obj), by in zip(store.deleted, store.deleted_by, strict=True):
        before = len(problems)
        # The run that sent the request (it may land after the run ended: a timeout).
        process, sent = by if by is not None else ("", t)
        owners = [
            r
            for r in by_process.get(process, [])
            if r.began <= sent and (r.ended is None or sent <= r.ended)
        ]
        what = f"vacuum deleted {key} at {t:.3f}"
        if not owners:
            problems.append(f"{what} ({process}), which no vacuum run of that process was making")
            continue
        run = owners[-1]
        what += f" (vacuum of process {run.process} begun at {run.began:.3f}, read v{run.read})"
        if key not in run.orphans:
            problems.append(f"{what}: that run did not find it an orphan")
        ident = (run.process, run.began)
        read = versions.version(run.read)
        if ident not in retained:
            cutoff = run.now - run.older_than
            retained[ident] = versions.retained(read, cutoff) if read is not None else set()
        if key in retained[ident]:
            problems.append(f"{what}: a version retained then reaches it")
        elif is_intent(key) and read is not None and _undecided(key, obj.modified, read, run):
            problems.append(f"{what}: an intent v{run.read} had not decided")
        if run.listed.get(key, obj.modified) > run.now - run.older_than:
            problems.append(f"{what}: it was modified within the window")
        if needed_until.get(key, -1.0) > t and len(problems) == before:
            at, doc = versions.first_after(run.read, key)
            if _rewritten(store, key, t, at):
                # Its writer wrote it again (a PUT retried or hedged after a pause) before
                # the version referencing it was committed: that version reads it whole.
                continue
            restore = _restored(doc, key, versions, run.read)
            if is_intent(key):
                problems.append(f"{what}: an intent that v{doc.version} (at {at:.3f}) applies")
            elif restore:
                problems.append(f"{what}: restore v{doc.version} (at {at:.3f}) commits it again")
            else:
                late.add(key)
                problems.append(
                    f"{what}: v{doc.version} (at {at:.3f}) references it, committed after "
                    "vacuum deleted it (a commit acknowledged with an object vacuum may delete)"
                )
    return problems, late


def _rewritten(store: SimS3, key: str, deleted: float, committed: float) -> bool:
    """Whether ``key``, deleted at ``deleted``, was written again before ``committed`` and
    not deleted again in between."""
    again = [w for w in store.recreated.get(key, ()) if deleted < w <= committed]
    return bool(again) and not any(
        k == key and max(again) < d <= committed for d, k, _ in store.deleted
    )


def _restored(doc: RegistryDoc, key: str, versions: _Versions, read: int) -> bool:
    """Whether ``doc``'s version brings ``key`` back through a restore: a dataset it
    restored reaches ``key``, which a version at or before vacuum's read (``read``) had
    committed already (rule 9)."""
    restored = {
        c.dataset for c in doc.commits if c.version == doc.version and c.operation == "restore"
    }
    for name in sorted(restored):
        if name not in doc.entries:
            continue
        if key in versions.reaches(doc.entries[name].snapshot) and versions.reached_by(key, read):
            return True
    return False


def _undecided(key: str, modified: float, doc: RegistryDoc, run: VacuumRun) -> bool:
    return doc.fate(key) is None and (key > doc.watermark or modified > run.now - run.intent_ttl)
