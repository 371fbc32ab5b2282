"""The checker every simulated run ends with: what the registry holds (a :class:`View`, read
from the simulated bucket without latency or faults) against what every caller was told.

Violations reported (each one string; none: the run kept every guarantee):

- an acknowledged commit not in exactly one version of each dataset it names, or in another
  version than it was acknowledged at, or in different versions of its datasets (a commit
  spanning datasets is one version);
- a commit refused with ``CommitConflictError`` or ``RetryBudgetExhaustedError`` (both:
  nothing was committed) that is in the registry (a phantom); one
  whose state is unknown (or whose process died) recorded more than once, or in only some of
  its datasets;
- a commit in the registry that nobody made; an exception other than a ``CommitError`` out of
  a commit; a commit of nothing recorded; a call refused for a caller-given file name that
  holds its own upload (:mod:`._model`);
- a commit applied with a lease token below one a lease takeover recorded before it (in the
  root's order), or a takeover recorded below a token applied before it (FORMAT.md, "Lease
  takeovers"): a holder paused past a takeover is refused even before the new holder commits;
- root versions that do not rise by exactly 1 per swap; a dataset's versions not rising, or
  one recorded (``Snapshot.at``) before its parent (FORMAT.md invariant 3);
- (read with the view, :meth:`~._protocols._Reader.index_problems`) a commit id the dataset's
  commit-id index does not find at the version that made it;
- a dataset version whose files are not exactly those of the commits applied up to it
  (replayed in version order on a model: appends add, overwrites and deletes clear their
  partitions, removals remove, restores go back to the files of their target version);
- real time: a commit that began after another was acknowledged but holds an older version;
  a reader that saw a version older than one acknowledged before its read began, or saw the
  registry go back;
- expiry by server time (rule 4 of the core): an intent a root swap at virtual time *T*
  records ``rejected`` as expired that was written (its first PUT took effect) at *W* with
  *T* - *W* <= TTL - 1 s (:func:`expiry_problems`, which derives the bound);
- (runs with vacuum, judged by :func:`lakelock._sim._vacuum.vacuum_problems`) a deletion by a
  vacuum that began at ``b`` (window start ``cutoff = its clock - older_than``) and read root
  version ``R`` of: (1) an object a retained version reaches — a dataset version of ``R``, or
  an older one whose successor's recorded commit time (``Snapshot.at``) is at least
  ``cutoff``, walking back from it (an older version with an object deleted before ``b``
  ends the walk, as it ends vacuum's); (2) an intent ``R`` records no fate for, above ``R``'s
  watermark or written after the intent TTL before ``b``; (3) an intent a later root applies
  (unless a restore brought it back: counted as late, with objects a writer held past the
  window); (4) an object modified after ``cutoff``. The versions vacuum removed are read from
  the bucket's graveyard: every version is still compared with the model.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lakelock._sim._model import model_problems
from lakelock._sim._workload import Invocation

__all__ = ["EXPIRY_SLACK", "DatasetVersion", "Expired", "Observation", "View", "check"]

#: How much younger than the TTL an intent rejected as expired may be (seconds): S3's
#: LastModified is the write's second, truncated (:func:`expiry_problems`).
EXPIRY_SLACK = 1.0


@dataclass(frozen=True)
class DatasetVersion:
    """One version of a dataset as the registry holds it: the commits that made it (in the
    order they were applied) and its files (key -> partition path)."""

    dataset: str
    version: int
    commit_ids: tuple[str, ...]
    files: Mapping[str, str]
    #: Each commit as recorded: (id, operation, digest); empty: only the ids are known.
    commits: tuple[tuple[str, str | None, str | None], ...] = ()
    #: Its recorded commit time (``Snapshot.at``), properties and columns (name -> type);
    #: ``None``: not known (the toy protocol records none).
    at: float | None = None
    properties: Mapping[str, str] | None = None
    columns: Mapping[str, str] | None = None
    #: Files its manifests list more than once.
    twice: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expired:
    """An intent a root swap rejected as expired: the swap took effect at ``at`` (virtual
    seconds) making root ``version``; the intent's first PUT took effect at ``written``
    (``None``: the bucket never held it)."""

    key: str
    version: int
    at: float
    written: float | None
    reason: str


@dataclass
class View:
    """The registry at the end of a run: the version of each root ever written (in order),
    each dataset's versions (oldest first), the intents swaps rejected as expired, and
    whatever could not be read."""

    root_versions: list[int] = field(default_factory=list)
    datasets: dict[str, list[DatasetVersion]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    expired: list[Expired] = field(default_factory=list)
    #: Per root version, the commit ids it applied, in the order its swap applied them
    #: (the root's window of commits): where a commit sits among those of other datasets.
    applied_order: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: Per root version, the intents its swap applied (not those it recorded ``applied``
    #: ``already``: settled through another commit of their id).
    applied_intents: dict[int, frozenset[str]] = field(default_factory=dict)
    #: Per root version, the lease takeovers its swap applied (their commit records name no
    #: dataset: FORMAT.md, "Lease takeovers"), by commit id, in the order it applied them.
    takeovers: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: Every key vacuum deleted during the run (a caller-given file name's earlier upload
    #: may be gone, and its key free, when a re-run writes it).
    deleted: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Observation:
    """A reader's look at the root: sent at ``start``, answered at ``end``."""

    reader: int
    start: float
    end: float
    version: int


def check(
    invocations: Sequence[Invocation],
    view: View,
    observations: Sequence[Observation] = (),
    *,
    intent_ttl: float | None = None,
    commit_window: int = 100,
) -> list[str]:
    """Every violation in this run (module docstring); empty: none. ``intent_ttl``: the
    run's, to hold expiries to (``None``: not checked); ``commit_window``: its idempotency
    window (:mod:`._model`)."""
    problems = list(view.problems)
    problems += _root_problems(view.root_versions)
    for name, versions in view.datasets.items():
        previous, previous_at = 0, None
        for v in versions:
            if v.version <= previous:
                problems.append(f"{name}: version {v.version} follows version {previous}")
            if v.at is not None and previous_at is not None and v.at < previous_at:
                problems.append(
                    f"{name}: version {v.version} is recorded at {v.at:.3f}, before its "
                    f"parent version {previous} ({previous_at:.3f})"
                )
            previous, previous_at = v.version, v.at
    problems += model_problems(invocations, view, commit_window=commit_window)
    problems += _real_time_problems(invocations, observations)
    if intent_ttl is not None:
        problems += expiry_problems(view.expired, intent_ttl)
    return problems


def expiry_problems(expired: Iterable[Expired], ttl: float) -> list[str]:
    """Rule 4: an intent is rejected as expired only when the server's clock says it is
    older than ``ttl``, never a writer's own (skewed) clock.

    The bound. A folder rejects an intent listed with ``LastModified`` *M* when *M* <
    *now* - TTL, *now* being its estimate of the server's clock: the ``Date`` of the root
    read that began its attempt (plus how far its own clock moved since, which skew does
    not change), or the newest ``LastModified`` its LIST returned if later (written before
    the LIST: before the swap too, which keeps the bound). Let the intent's first PUT take
    effect at *W*, the root read at *R*, the swap recording the rejection at *T* (*R* < *T*:
    the swap follows the read). S3 truncates both stamps to the second: *M* = ⌊*W*⌋ >
    *W* - 1, ``Date`` = ⌊*R*⌋ <= *R*. So *W* - 1 < *M* < ⌊*R*⌋ - TTL <= *R* - TTL <
    *T* - TTL, that is *T* - *W* > TTL - 1 s (:data:`EXPIRY_SLACK`): the intent's second
    was truncated, the ``Date`` only errs towards later expiry. A folder judging by its own
    clock, up to ``--skew`` ahead, rejects intents younger than that. (An attempt that
    reuses the root an earlier commit read — the core may start from the root it knows —
    estimates from that read: its clock was read before the read took effect, so the
    estimate runs ahead by that gap, half a GET's latency; the checker allows none of it,
    and the seeds show none.)"""
    problems = []
    for e in expired:
        if e.written is None:
            problems.append(f"root v{e.version} rejects intent {e.key} as expired: never written")
        elif e.at - e.written <= ttl - EXPIRY_SLACK:
            problems.append(
                f"root v{e.version} (at {e.at:.3f} s) rejects intent {e.key} as expired, "
                f"written at {e.written:.3f} s: {e.at - e.written:.3f} s old, TTL {ttl:g} s "
                f"({e.reason})"
            )
    return problems


def _root_problems(versions: Sequence[int]) -> list[str]:
    problems = []
    for before, after in itertools.pairwise(versions):
        if after != before + 1:
            problems.append(f"the root went from version {before} to {after} in one swap")
    return problems


def _real_time_problems(
    invocations: Sequence[Invocation], observations: Iterable[Observation]
) -> list[str]:
    """Only a commit acknowledged before another began is known to be older: one whose state
    is unknown may be applied later (by another process folding its intent)."""
    done = sorted(
        (i for i in invocations if i.outcome == "ok" and i.end is not None and i.version),
        key=lambda i: i.end or 0.0,
    )
    ends = [i.end or 0.0 for i in done]
    newest: list[tuple[int, str]] = []
    for inv in done:
        top = (inv.version or 0, inv.id)
        newest.append(max(newest[-1], top) if newest else top)
    problems = []
    # A commit id several calls share (a re-run, a collision) may be acknowledged at the
    # version its same change was applied by another call: not this call's own version.
    shared = Counter(i.id for i in invocations)
    for inv in invocations:
        if inv.outcome != "ok" or inv.restarts or inv.already or inv.empty or inv.version is None:
            continue  # (a commit of nothing makes no version: it holds the one it read)
        if shared[inv.id] > 1:
            continue
        before = bisect.bisect_left(ends, inv.start)
        if before and newest[before - 1][0] >= inv.version:
            version, other = newest[before - 1]
            problems.append(
                f"{inv.id} (v{inv.version}) began after {other} (v{version}) was "
                "acknowledged but is not newer"
            )
    last: Counter[int] = Counter()
    for obs in sorted(observations, key=lambda o: (o.reader, o.start)):
        before = bisect.bisect_left(ends, obs.start)
        if before and newest[before - 1][0] > obs.version:
            version, other = newest[before - 1]
            problems.append(
                f"reader {obs.reader} read v{obs.version} at {obs.start:.3f}, after {other} "
                f"was acknowledged at v{version}"
            )
        if obs.version < last[obs.reader]:
            problems.append(f"reader {obs.reader} saw v{obs.version} after v{last[obs.reader]}")
        last[obs.reader] = max(last[obs.reader], obs.version)
    return problems
