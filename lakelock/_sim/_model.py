"""The checker's model: a plain reference implementation of what README.md and
docs/FORMAT.md promise of commits, replayed over a run's calls in the order the root
recorded them, and every call's outcome held to it (docs/SIMULATOR.md, "The checker").

What the model holds, per dataset: its files (key -> partition path), properties and
columns (name -> type); per lease name the highest token applied, per path-lock table the
grants applied; per commit id the change it names. A *change* is what README.md calls "the
same change": the same commit id, datasets, operations (``"commit"``, a ``registry.commit``
that named none, matches any) and digests (where both are known and comparable). A call is
an :class:`~._workload.Invocation`; several calls may be the same change (a re-run with the
same rows), and several changes may share an id (two pipelines colliding on one).

Each commit the registry recorded is matched to the call that made it (its commit id,
dataset, operation and digest; among the calls of one change, the one whose files the
version holds), then replayed in version order. Judged, for each call (one line each):

- acknowledged (not ``already_committed``): its change applied exactly once in each of its
  datasets, all at the version returned;
- acknowledged ``already_committed``: the very same change (not another under its id)
  recorded at the version returned, judged on the call each record there was matched to
  (:func:`_told_already_problems`);
- acknowledged, not ``already_committed``, after its process was killed and restarted: the
  version returned made by this run, not by applying an intent its killed run sent (a
  re-run whose change was applied already is told so);
- a definite failure (``CommitConflictError``, ``RetryBudgetExhaustedError``): never
  applied (a call whose process was killed and restarted: at most once);
- refused because its files no longer fit the dataset (``SchemaMismatchError``) under a
  caller's id whose very change was recorded, and acknowledged, before the call began: it
  must be told ``already_committed`` (:func:`_refused_rerun_problems`; the change recorded
  is the one compared, not a call told ``already_committed`` by a digest of another kind);
- unknown, killed, running: applied at most once, and in all of its datasets or none;
- a lease takeover (a commit naming no dataset, read from the root's records,
  ``View.takeovers``) acknowledged: its token recorded by the version returned
  (:func:`_takeover_outcome`); failed, unknown or killed: as any commit above, except that
  one refused as stale, or given up once a later acquisition's token was recorded, may
  have been recorded before that acquisition superseded it;
  and, as any change, never recorded twice (a retry of one whose id left the root's window
  is settled by its token, FORMAT.md "Lease takeovers");
- a change applied more than once in a dataset; two changes under one commit id applied in
  one dataset, or in two datasets within the idempotency window (half of it: near its edge
  a commit may see the older record or not);
- a commit applied with a lease token below one applied before it, or with a path-lock
  grant below a conflicting one applied before it (FORMAT.md's fencing), or under the
  fence of a grant that holds a path it writes only for reading (FORMAT.md, "A read
  grant's fence fences no write");
- a commit applied with a lease token below one whose takeover the root recorded before it
  (in the order the root applied commits), or a takeover recorded below a token applied
  before it (FORMAT.md, "Lease takeovers": a holder paused past a takeover is refused, even
  before the new holder commits);
- a commit applied whose column has another type than the dataset's, or that adds a column
  without ``schema_mode="merge"``;
- a worker's file (a ``typed`` commit's: ``DataFile.schema``) live in a version whose
  columns lack one it holds (a later merge in a type that cannot hold it would make every
  read fail) or cannot hold its type (every read fails): :func:`_typed_problems`, at the
  version it joins and at every version that changes the columns;
- a commit id recorded that is not in NFC (a re-run spelling its id decomposed must be
  refused before anything is written: FORMAT.md, "Commit ids"), said "landed twice" when
  its NFC spelling is recorded in the dataset too;
- a version whose files, properties or columns are not the model's after its commits (a
  restore goes back to the files, properties and columns of the version it restores), or
  whose manifests list a file twice (its rows read twice);
- a refusal whose reason is a stale fence, a schema that does not fit or a commit id that
  names another change but whose error is not the documented type (``StaleFenceError``,
  ``SchemaMismatchError``, ``CommitIdReusedError``), whichever process decided it; a
  ``StaleFenceError`` when no newer fence was ever applied;
- a commit in the registry that no call made;
- a commit of nothing (the workload's ``empty``: an empty append, ``registry.commit`` of no
  files) recorded: FORMAT.md, "Commit ids" (the id is left for the run with the rows);
- a call refused ``AlreadyExistsError`` for its caller-given file name whose key holds only
  its own upload (:func:`_upload_problems`: its earlier run's, which it must take).

Fences are judged by their names in NFC (:func:`fence_name`), as the lease's and the path
lock's own protocols key them: two spellings of one name are one lease.

Not judged here: what a refusal of another reason says (its type is a
``CommitConflictError``); whether a commit refused would have fitted (a refusal is allowed
for any reason the core gives, except as above); the lease's and the path lock's own
protocols (their tokens are handed out by the workload, :mod:`._workload`; each takeover
is its own commit there, as ``Lake.lease`` makes it).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from lakelock._digest import comparable
from lakelock._pathlock._core import LockRequest, requests_conflict
from lakelock._readable import held_columns, unholdable
from lakelock._registry._changes import Change, is_takeover, written_paths
from lakelock._registry._fencing import unfenced_writes
from lakelock._sim._workload import Invocation

if TYPE_CHECKING:
    from lakelock._sim._check import DatasetVersion, View

__all__ = ["model_problems", "same_change"]

#: Refusals whose message names this reason must be of this type (FORMAT.md, README).
TYPED_REASONS = (
    (("stale", "superseded"), "StaleFenceError"),
    (("schema does not fit",), "SchemaMismatchError"),
    (("names another change",), "CommitIdReusedError"),
)


def same_change(a: Change, b: Change) -> bool:
    """README's "the same change": one dataset, operations equal (or one ``"commit"``),
    digests equal where both are known and made the same way."""
    if a.dataset != b.dataset:
        return False
    if a.operation != b.operation and "commit" not in (a.operation, b.operation):
        return False
    if a.digest is None or b.digest is None or not comparable(a.digest, b.digest):
        return True
    return a.digest == b.digest


@dataclass
class _Applied:
    """Where each call's own change, and each change, was applied."""

    #: call index -> dataset -> versions
    own: dict[int, dict[str, list[int]]] = field(default_factory=dict)
    #: (dataset, version, position in the version) -> call index
    at: dict[tuple[str, int, int], int] = field(default_factory=dict)


def model_problems(
    invocations: Sequence[Invocation], view: View, *, commit_window: int = 100
) -> list[str]:
    """Every broken promise of the module docstring; empty: none."""
    problems: list[str] = []
    by_id: dict[str, list[int]] = {}
    for n, inv in enumerate(invocations):
        by_id.setdefault(inv.id, []).append(n)
    applied = _match(invocations, view, by_id, problems)
    classes = _classes(invocations, by_id)
    problems += _call_problems(invocations, applied, classes)
    problems += _rerun_problems(invocations, view)
    problems += _refused_rerun_problems(invocations, applied)
    problems += _told_already_problems(invocations, applied)
    problems += _id_problems(
        invocations, view, applied, classes, by_id, commit_window=commit_window
    )
    fences = _Fences()
    problems += _replay(invocations, view, applied, fences)
    problems += _takeover_problems(invocations, view, applied, fences)
    problems += _error_problems(invocations, fences)
    problems += _upload_problems(invocations, view)
    problems += _spelling_problems(view)
    return problems


def _spelling_problems(view: View) -> list[str]:
    """A commit id recorded that is not in NFC: ids are compared as given, so a re-run
    spelling its id otherwise (decomposed) that is not refused lands its rows again."""
    recorded = {
        (name, commit_id)
        for name, versions in view.datasets.items()
        for v in versions
        for commit_id in v.commit_ids
    }
    problems = []
    for name, commit_id in sorted(recorded):
        nfc = unicodedata.normalize("NFC", commit_id)
        if commit_id != nfc:
            twice = (name, nfc) in recorded
            problems.append(
                f"{name}: commit id {commit_id!a} recorded, not in NFC"
                + (
                    "; its NFC spelling is recorded too: the same rows landed twice"
                    if twice
                    else ""
                )
            )
    return problems


def _upload_problems(invocations: Sequence[Invocation], view: View) -> list[str]:
    """A call refused ``AlreadyExistsError`` for its caller-given file name whose key holds
    no bytes but its own (every call that uploads there uploads the same: an earlier run of
    the same job, refused or killed before its commit, left them; vacuum never deleted
    the key): the upload is its own, and its commit decides (FORMAT.md rule 14). Refused,
    every re-run is refused the same way, for ever."""
    bodies: dict[str, set[bytes]] = {}
    for inv in invocations:
        for key, body in inv.uploads:
            bodies.setdefault(key, set()).add(body)
    problems = []
    for inv in invocations:
        error = inv.error or ""
        if inv.outcome != "fail" or not inv.uploads:
            continue
        if not error.startswith("data PUT: AlreadyExistsError"):
            continue
        if all(bodies[key] == {body} and key not in view.deleted for key, body in inv.uploads):
            problems.append(
                f"{inv.op} {inv.id} (writer {inv.writer}) refused for its caller-given file "
                f"name, whose key holds its own upload (an earlier run's): {error}"
            )
    return problems


def fence_name(change: Change) -> str:
    """The lease or lock table ``change``'s fence names, as its own protocol names it: NFC,
    however the fence spelt it (FORMAT.md, "Names": one lease however it is spelt)."""
    assert change.fence is not None
    return unicodedata.normalize("NFC", change.fence.name)


def commits_nothing(inv: Invocation) -> bool:
    """A call that changes nothing (FORMAT.md, "Commit ids": it records nothing): the
    workload's ``empty``, an empty append or a ``registry.commit`` of no files without
    partition columns, under a caller's commit id."""
    return inv.op == "empty"


def fence_only(change: Change) -> bool:
    """A change that only carries a fence (a copy's source): it makes no version of its
    dataset; its fence is checked and recorded with the commit's other changes."""
    return change.fence is not None and not (
        change.add
        or change.remove
        or change.remove_partitions
        or change.properties
        or change.schema is not None
        or change.restore is not None
    )


def recorded_datasets(inv: Invocation) -> tuple[str, ...]:
    """The datasets a commit makes a version of (a lease takeover: ``""``, the root's)."""
    return tuple(c.dataset for c in inv.changes if is_takeover(c) or not fence_only(c))


def _change(inv: Invocation, dataset: str) -> Change | None:
    for change in inv.changes:
        if change.dataset == dataset:
            return change
    return None


def _match(
    invocations: Sequence[Invocation],
    view: View,
    by_id: Mapping[str, list[int]],
    problems: list[str],
) -> _Applied:
    """Each recorded commit's call: its id, dataset, operation and digest; among several
    (the same change run again), the one whose added files the version holds, else of
    those not yet applied in the dataset the first acknowledged at that version, else the
    first not told it failed, else the first."""
    applied = _Applied()
    for name, versions in view.datasets.items():
        used: set[int] = set()
        for v in versions:
            records = v.commits or tuple((cid, None, None) for cid in v.commit_ids)
            for position, (commit_id, operation, digest) in enumerate(records):
                candidates = []
                for n in by_id.get(commit_id, ()):
                    change = _change(invocations[n], name)
                    if change is None:
                        continue
                    if operation is not None and change.operation != operation:
                        continue
                    if digest is not None and change.digest != digest:
                        continue
                    candidates.append(n)
                if not candidates:
                    if commit_id in by_id:
                        problems.append(
                            f"{name} v{v.version}: commit {commit_id!r} ({operation}) records a "
                            "change no call under that id made"
                        )
                    else:
                        problems.append(f"commit {commit_id!r} is in {name!r} but nobody made it")
                    continue
                chosen = _chosen(invocations, candidates, name, v, used)
                used.add(chosen)
                applied.own.setdefault(chosen, {}).setdefault(name, []).append(v.version)
                applied.at[(name, v.version, position)] = chosen
    # A takeover names no dataset: its record is the root's (under the dataset "").
    for version, ids in view.takeovers.items():
        for position, commit_id in enumerate(ids):
            calls = [n for n in by_id.get(commit_id, ()) if invocations[n].op == "takeover"]
            if not calls:
                problems.append(f"takeover {commit_id!r} is in root v{version} but nobody made it")
                continue
            applied.own.setdefault(calls[0], {}).setdefault("", []).append(version)
            applied.at[("", version, position)] = calls[0]
    return applied


def _chosen(
    invocations: Sequence[Invocation],
    candidates: list[int],
    name: str,
    v: DatasetVersion,
    used: set[int],
) -> int:
    if len(candidates) == 1:
        return candidates[0]
    holding = [
        n
        for n in candidates
        if (change := _change(invocations[n], name)) is not None
        and change.add
        and all(f.key in v.files for f in change.add)
    ]
    pool = holding or candidates
    fresh = [n for n in pool if n not in used] or pool
    # Calls of one change that add no files (a delete run again under its id), or the same
    # files (a re-run with a caller-given file name takes its earlier run's upload), are
    # told apart by what each heard: the call acknowledged at this version made it, not a
    # call told it failed (which, chosen, would be reported applied).
    return min(fresh, key=lambda n: _claim(invocations[n], v.version))


def _claim(inv: Invocation, version: int) -> int:
    """How well ``inv``'s outcome accounts for a record at ``version`` (lowest best)."""
    if inv.outcome == "ok" and inv.version == version and not inv.already:
        return 0
    return 2 if inv.outcome in ("fail", "gaveup") else 1


def _classes(invocations: Sequence[Invocation], by_id: Mapping[str, list[int]]) -> list[int]:
    """Each call's change, as the index of its first call (calls of one change share it)."""
    found = list(range(len(invocations)))
    for calls in by_id.values():
        for i, n in enumerate(calls):
            for m in calls[:i]:
                if found[m] == m and _same(invocations[m], invocations[n]):
                    found[n] = m
                    break
    return found


def _same(a: Invocation, b: Invocation) -> bool:
    if a.id != b.id or sorted(a.datasets) != sorted(b.datasets):
        return False
    return all(
        other is not None and same_change(change, other)
        for change in a.changes
        for other in (_change(b, change.dataset),)
    )


def _call_problems(
    invocations: Sequence[Invocation], applied: _Applied, classes: list[int]
) -> list[str]:
    problems = []
    # Where each change was applied, by any of its calls.
    change_at: dict[int, dict[str, list[int]]] = {}
    for n, where in applied.own.items():
        for name, versions in where.items():
            change_at.setdefault(classes[n], {}).setdefault(name, []).extend(versions)
    for c, where in change_at.items():
        for name, versions in where.items():
            if len(versions) > 1:
                inv = invocations[c]
                problems.append(
                    f"the change {inv.op} {inv.id} (writer {inv.writer}) is applied "
                    f"{len(versions)} times in {name}: versions {sorted(versions)}"
                )
    # Each lease's highest token a recorded takeover carries.
    recorded_tokens: dict[str, int] = {}
    for n, inv in enumerate(invocations):
        if inv.op == "takeover" and applied.own.get(n, {}).get(""):
            for taken in inv.changes:
                if taken.fence is not None:
                    name, token = fence_name(taken), taken.fence.token
                    recorded_tokens[name] = max(recorded_tokens.get(name, token), token)
    for n, inv in enumerate(invocations):
        what = f"{inv.outcome} {inv.op} {inv.id} (writer {inv.writer})"
        if inv.outcome == "crash":
            problems.append(f"{what}: an exception other than a CommitError: {inv.error}")
        if inv.op == "takeover" and inv.outcome == "ok":
            problems += _takeover_outcome(inv, applied.own.get(n, {}).get("", []))
            continue
        datasets = recorded_datasets(inv)
        own = {name: applied.own.get(n, {}).get(name, []) for name in datasets}
        if commits_nothing(inv):
            recorded = {name: versions for name, versions in own.items() if versions}
            if recorded:
                problems.append(
                    f"a commit of nothing is recorded {recorded}: {what}: its id is taken "
                    "from the run that has the rows (FORMAT.md, 'Commit ids')"
                )
            continue
        change = {name: change_at.get(classes[n], {}).get(name, []) for name in datasets}
        if inv.outcome == "ok":
            counts = sorted(len(v) for v in change.values())
            if counts != [1] * len(counts):
                told = "already committed" if inv.already else "acknowledged"
                problems.append(f"{told} commit recorded {counts} times in {list(change)}: {what}")
            elif {v[0] for v in change.values()} != {inv.version}:
                at = sorted({v[0] for v in change.values()})
                problems.append(
                    f"{what} acknowledged as v{inv.version}"
                    f"{' (already committed)' if inv.already else ''}, recorded at "
                    + ", ".join(f"v{v}" for v in at)
                )
        elif inv.outcome in ("fail", "gaveup"):
            counts_own = {len(v) for v in own.values()}
            # A takeover refused as stale, or given up on once a later acquisition's token
            # was recorded, may have been recorded before that acquisition superseded it: its
            # record fences nothing any more, and the lease is not its holder's either way
            # (whether a newer token was applied: _error_problems). Once its id has left the
            # root's window nothing tells its writer whether its own record landed.
            superseded = inv.op == "takeover" and (
                inv.error_type == "StaleFenceError"
                or any(
                    c.fence is not None
                    and recorded_tokens.get(fence_name(c), c.fence.token) > c.fence.token
                    for c in inv.changes
                )
            )
            if not inv.restarts and not superseded and any(own.values()):
                problems.append(f"refused commit is in the registry {own}: {what}: {inv.error}")
            elif counts_own - {0, 1}:
                problems.append(f"commit recorded more than once {own}: {what}")
        else:
            counts_own = {len(v) for v in own.values()}
            placed = {tuple(v) for v in own.values()}
            if counts_own - {0, 1}:
                problems.append(f"commit recorded more than once {own}: {what}")
            elif len(counts_own) > 1 or len(placed) > 1:
                problems.append(f"commit applied to only some of its datasets {own}: {what}")
    return problems


def _takeover_outcome(inv: Invocation, versions: list[int]) -> list[str]:
    """What FORMAT.md ("Lease takeovers") promises of a takeover acknowledged: its token
    recorded by the version returned, not necessarily made by it (a retry whose id left the
    root's window is settled by the token the root records, at the version it read; what
    the takeover fences is :func:`_takeover_problems`')."""
    if not versions or min(versions) > (inv.version or 0):
        at = ", ".join(f"v{v}" for v in sorted(versions)) or "nowhere"
        return [
            f"ok takeover {inv.id} (writer {inv.writer}) acknowledged as v{inv.version}, "
            f"recorded at {at}"
        ]
    return []


def _rerun_problems(invocations: Sequence[Invocation], view: View) -> list[str]:
    """A restarted call acknowledged as the one that committed its change (not
    ``already_committed``) at a version whose swap applied an intent its killed run sent:
    the change was committed already, by the killed run, and the re-run must hear so."""
    problems = []
    for inv in invocations:
        if inv.outcome != "ok" or inv.already or not inv.killed_intents or inv.op == "takeover":
            continue  # (a takeover: promised no more than its token recorded, above)
        killed = set(inv.killed_intents) & view.applied_intents.get(inv.version or 0, set())
        if killed:
            problems.append(
                f"ok {inv.op} {inv.id} (writer {inv.writer}) acknowledged as committing v"
                f"{inv.version}, which applied its killed run's intent {min(killed)}: "
                "already_committed expected"
            )
    return problems


def _refused_rerun_problems(invocations: Sequence[Invocation], applied: _Applied) -> list[str]:
    """A call under a caller's id refused because its files no longer fit the dataset
    (``SchemaMismatchError``) though its very change was recorded under the id, and
    acknowledged, before the call began: its first run landed (before a restore or a merge
    changed the dataset), and the re-run must hear ``already_committed``, not fail a
    retried job on a commit that landed (README, "Engines"; FORMAT.md, "Commit ids").

    The call is held to the change the registry recorded (the call whose change the
    acknowledged version records under the id: :func:`_match`), not to every call
    acknowledged under the id: one told ``already_committed`` because its digest is of
    another kind than the recorded one (:func:`~lakelock._digest.comparable`) says nothing
    of a third whose digest the recorded one's can be compared with, and differs from.
    That re-run is another change, refused whatever the reason the shell gives first."""
    acknowledged: dict[str, list[Invocation]] = {}
    for inv in invocations:
        if inv.outcome == "ok" and inv.end is not None and inv.version is not None:
            acknowledged.setdefault(inv.id, []).append(inv)
    recorded = _recorded_under(invocations, applied)
    problems = []
    for inv in invocations:
        if not inv.explicit or inv.outcome != "fail" or inv.error_type != "SchemaMismatchError":
            continue
        landed = [
            a.version
            for a in acknowledged.get(inv.id, ())
            if a.version is not None
            and a.end is not None
            and a.end < inv.start
            and any(_same(inv, invocations[m]) for m in recorded.get((inv.id, a.version), ()))
        ]
        if landed:
            problems.append(
                f"fail {inv.op} {inv.id} (writer {inv.writer}) refused with "
                f"SchemaMismatchError, but its change was acknowledged at v{min(landed)} "
                "before it began: already_committed expected"
            )
    return problems


def _told_already_problems(invocations: Sequence[Invocation], applied: _Applied) -> list[str]:
    """A call told ``already_committed`` at a version whose records under its id are all of
    another change (:func:`same_change` with the call each record was matched to): its rows
    were never committed, and its caller was told they were. Judged on the records
    themselves, not on the call's change as :func:`_classes` groups it: "the same change" is
    not transitive where digests of two kinds are not compared, so a call of other rows can
    share a change with the first call under its id and still be another change than the
    one recorded (FORMAT.md, "Commit ids")."""
    recorded = _recorded_under(invocations, applied)
    problems = []
    for inv in invocations:
        if inv.outcome != "ok" or not inv.already or inv.version is None:
            continue
        makers = recorded.get((inv.id, inv.version), [])
        if makers and not any(_same(inv, invocations[m]) for m in makers):
            maker = invocations[makers[0]]
            problems.append(
                f"ok {inv.op} {inv.id} (writer {inv.writer}) told already_committed at "
                f"v{inv.version}, which records another change under its id "
                f"({maker.op}, writer {maker.writer})"
            )
    return problems


def _recorded_under(
    invocations: Sequence[Invocation], applied: _Applied
) -> dict[tuple[str, int], list[int]]:
    """(commit id, version) -> the calls whose change that version records under the id."""
    recorded: dict[tuple[str, int], list[int]] = {}
    for (_, version, _), n in applied.at.items():
        recorded.setdefault((invocations[n].id, version), []).append(n)
    return recorded


def _id_problems(
    invocations: Sequence[Invocation],
    view: View,
    applied: _Applied,
    classes: list[int],
    by_id: Mapping[str, list[int]],
    *,
    commit_window: int,
) -> list[str]:
    """Two changes under one commit id, both applied: in one dataset (its commit-id index
    finds the id whatever its age), or in two well within the window. The root keeps a
    version's records whole while fewer than the window's worth of later versions' are kept
    (FORMAT.md, "Commit ids"), so an id is bound across datasets until that many commits of
    later versions were recorded, however many commits its own swap applied."""
    # The order of the commits the root recorded: (version, id) once per commit.
    order: dict[tuple[int, str], int] = {}
    for chain in view.datasets.values():
        for v in chain:
            for commit_id in v.commit_ids:
                order.setdefault((v.version, commit_id), 0)
    rank = {key: n for n, key in enumerate(sorted(order))}
    # Where each version's commits begin and end in that order: the commits recorded
    # between two versions are those of the versions strictly between them.
    begins: dict[int, int] = {}
    ends: dict[int, int] = {}
    for (version, _), n in rank.items():
        begins[version] = min(n, begins.get(version, n))
        ends[version] = max(n + 1, ends.get(version, n + 1))
    problems = []
    for commit_id, calls in by_id.items():
        changes: dict[int, list[tuple[str, int]]] = {}
        for n in calls:
            for name, versions in applied.own.get(n, {}).items():
                changes.setdefault(classes[n], []).extend((name, v) for v in versions)
        if len(changes) < 2:
            continue
        places = sorted(changes.items(), key=lambda item: min(v for _, v in item[1]))
        (first, where), rest = places[0], places[1:]
        for other, there in rest:
            for name, version in there:
                for first_name, first_version in where:
                    between = begins[version] - ends[first_version]
                    if name == first_name or between < commit_window // 2:
                        a, b = invocations[first], invocations[other]
                        problems.append(
                            f"commit id {commit_id!r} applied for two changes: {a.op} of "
                            f"{first_name} v{first_version} (writer {a.writer}) and {b.op} of "
                            f"{name} v{version} (writer {b.writer}, {b.outcome})"
                        )
                        break
                else:
                    continue
                break
    return problems


@dataclass
class _Fences:
    """The fences applied so far: each lease's highest token, each lock table's grants."""

    leases: dict[str, int] = field(default_factory=dict)
    grants: dict[str, dict[int, LockRequest]] = field(default_factory=dict)

    def stale(self, change: Change) -> str | None:
        fence = change.fence
        if fence is None:
            return None
        name = fence_name(change)
        if not fence.hierarchical:
            highest = self.leases.get(name, fence.token)
            self.leases[name] = max(highest, fence.token)
            if fence.token < highest:
                return f"lease {name!r} token {fence.token} after token {highest}"
            return None
        ours = LockRequest(read=fence.read, write=fence.write)
        grants = self.grants.setdefault(name, {})
        newer = [
            token
            for token, theirs in grants.items()
            if token > fence.token and requests_conflict(theirs, ours)
        ]
        grants[fence.token] = ours
        if newer:
            return f"grant {fence.token} of {fence.name!r} after conflicting grant {max(newer)}"
        return None

    def newer_than(self, change: Change) -> bool:
        """Whether a fence newer than ``change``'s was applied (its refusal as stale)."""
        fence = change.fence
        if fence is None:
            return False
        name = fence_name(change)
        if not fence.hierarchical:
            return self.leases.get(name, fence.token) > fence.token
        ours = LockRequest(read=fence.read, write=fence.write)
        return any(
            token > fence.token and requests_conflict(theirs, ours)
            for token, theirs in self.grants.get(name, {}).items()
        )


@dataclass
class _State:
    files: dict[str, str] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)


def _replay(
    invocations: Sequence[Invocation], view: View, applied: _Applied, fences: _Fences
) -> list[str]:
    """Each dataset's recorded commits replayed in version order on the model; each version
    compared with it."""
    problems = []
    extra = _fence_only_parts(invocations, view, applied)
    typed, types = _typed_files(invocations)
    for name, versions in view.datasets.items():
        state = _State()
        history: list[tuple[int, _State]] = []
        pending = list(extra.get(name, ()))
        listed_twice: set[str] = set()
        judged_columns: dict[str, str] | None = None
        for v in versions:
            joined: list[str] = []
            while pending and pending[0][0] < v.version:
                fences.stale(pending.pop(0)[2])
            records = v.commits or tuple((cid, None, None) for cid in v.commit_ids)
            for position, (commit_id, _, _) in enumerate(records):
                place = _applied_place(view, v.version, commit_id)
                while pending and pending[0][:2] < (v.version, place):
                    fences.stale(pending.pop(0)[2])
                n = applied.at.get((name, v.version, position))
                if n is None:
                    continue  # reported: nobody made it
                inv = invocations[n]
                change = _change(inv, name)
                if change is None:
                    continue
                stale = fences.stale(change)
                if stale is not None:
                    problems.append(
                        f"{name} v{v.version}: {inv.op} {commit_id} applied with a stale fence: "
                        f"{stale}"
                    )
                read_only = _read_fenced(change)
                if read_only is not None:
                    problems.append(f"{name} v{v.version}: {inv.op} {commit_id} {read_only}")
                state, problem = _replayed(state, change, inv, history)
                if problem:
                    problems.append(f"{name} v{v.version}: {commit_id}: {problem}")
                joined += [f.key for f in change.add if f.key in typed]
            problems += _compared(name, v, state)
            if v.twice and set(v.twice) != listed_twice:
                problems.append(
                    f"{name} v{v.version}: lists {len(v.twice)} files twice (their rows read "
                    f"twice), e.g. {v.twice[0]!r}"
                )
            listed_twice = set(v.twice)  # reported once, where it begins
            if typed:
                judged = state.files if state.columns != judged_columns else joined
                problems += [
                    f"{name} v{v.version}: {found}"
                    for found in _typed_problems(judged, state, typed, types)
                ]
                judged_columns = dict(state.columns)
            while pending and pending[0][0] == v.version:
                fences.stale(pending.pop(0)[2])
            history.append((v.version, state))
            state = _State(dict(state.files), dict(state.properties), dict(state.columns))
        for _, _, change in pending:
            fences.stale(change)
    for name, changes in extra.items():
        if name not in view.datasets:
            for _, _, change in changes:
                fences.stale(change)
    return problems


def _compared(name: str, v: DatasetVersion, state: _State) -> list[str]:
    """What version ``v`` of dataset ``name`` holds that its commits do not make
    (``state``, the model's); the model then takes what ``v`` holds, so the next versions
    are judged on their own commits."""
    problems = []
    files = v.files if type(v.files) is dict else dict(v.files)
    if files != state.files:
        problems.append(f"{name} v{v.version}: {_difference(v.files, state.files)}")
        state.files = dict(files)
    if v.properties is not None and dict(v.properties) != state.properties:
        problems.append(
            f"{name} v{v.version}: properties {dict(v.properties)}, its commits make "
            f"{state.properties}"
        )
        state.properties = dict(v.properties)
    if v.columns is not None and dict(v.columns) != state.columns:
        problems.append(
            f"{name} v{v.version}: columns {dict(v.columns)}, its commits make {state.columns}"
        )
        state.columns = dict(v.columns)
    return problems


def _typed_files(
    invocations: Sequence[Invocation],
) -> tuple[dict[str, pa.Schema], dict[str, pa.DataType]]:
    """The schema of each file a call adds that carries one (a worker's, ``typed``), by
    key; and every type named in the calls' schemas, by its name (the model's columns)."""
    typed: dict[str, pa.Schema] = {}
    types: dict[str, pa.DataType] = {}
    for inv in invocations:
        for change in inv.changes:
            schemas = [] if change.schema is None else [change.schema]
            for f in change.add:
                if f.schema is not None:
                    typed[f.key] = f.schema
                    schemas.append(f.schema)
            for schema in schemas:
                types.update((str(column.type), column.type) for column in schema)
    return typed, types


def _typed_problems(
    keys: Iterable[str],
    state: _State,
    typed: Mapping[str, pa.Schema],
    types: Mapping[str, pa.DataType],
) -> list[str]:
    """What is wrong with the typed files of ``keys`` live in ``state`` (FORMAT.md,
    "File statistics" and after): a column one holds that the dataset lacks, or holds in
    a type the dataset's cannot hold."""
    columns = pa.schema(
        [(column, types[kind]) for column, kind in state.columns.items() if kind in types]
    )
    problems = []
    for key in keys:
        schema, path = typed.get(key), state.files.get(key)
        if schema is None or path is None:
            continue
        lacking = [c for c in held_columns([(schema, path)]) if c not in state.columns]
        if lacking:
            problems.append(
                f"{key} holds column {lacking[0]!r}, which the dataset lacks (merged later "
                "in a type that cannot hold the file's, every read fails)"
            )
        found = unholdable(schema, columns, path)
        if found is not None:
            column, wanted = found
            problems.append(
                f"{key} holds column {column!r} as {schema.field(column).type}, which the "
                f"dataset's {wanted} cannot hold: every read fails, or drops a struct "
                "field the dataset's lacks"
            )
    return problems


def _takeover_problems(
    invocations: Sequence[Invocation], view: View, applied: _Applied, fences: _Fences
) -> list[str]:
    """Every lease-fenced commit the root applied, takeovers and the datasets' commits, in
    the root's order (version, then where its swap applied it): a commit under a token
    below one a takeover recorded before it, and a takeover below any token applied before
    it, should have been refused. (A commit below a token another dataset commit carried
    is :func:`_replay`'s.) The takeovers' fences are then ``fences``' too: a refusal as stale
    by a takeover alone is justified."""
    events: list[tuple[int, int, int, Invocation, Change]] = []
    for (name, version, position), n in applied.at.items():
        inv = invocations[n]
        change = _change(inv, name)
        if change is None or change.fence is None or change.fence.hierarchical:
            continue
        events.append((version, _applied_place(view, version, inv.id), position, inv, change))
    events.sort(key=lambda e: e[:3])
    problems = []
    taken: dict[str, tuple[int, int]] = {}  # lease name -> highest token taken over, root v
    highest: dict[str, int] = {}
    for version, _, _, inv, change in events:
        fence = change.fence
        assert fence is not None
        name = fence_name(change)
        before = highest.get(name, fence.token)
        if is_takeover(change):
            if fence.token < before:
                problems.append(
                    f"root v{version}: takeover {inv.id} (writer {inv.writer}) of {name!r} "
                    f"recorded token {fence.token} after token {before} was applied"
                )
            if fence.token > taken.get(name, (fence.token - 1, 0))[0]:
                taken[name] = (fence.token, version)
            fences.stale(change)
        else:
            token, at = taken.get(name, (fence.token, 0))
            if fence.token < token:
                problems.append(
                    f"{change.dataset} v{version}: {inv.op} {inv.id} (writer {inv.writer}) "
                    f"applied under lease token {fence.token} of {name!r} after the "
                    f"takeover to token {token} (root v{at}): a holder paused past a takeover"
                )
        highest[name] = max(before, fence.token)
    return problems


def _fence_only_parts(
    invocations: Sequence[Invocation], view: View, applied: _Applied
) -> dict[str, list[tuple[int, int, Change]]]:
    """Fence-only changes (a copy's source), by dataset, at the version their commit made
    elsewhere and, within it, where the root's swap applied that commit among the others: a
    batch may apply a commit of the source dataset before it (a folded commit spanning
    datasets)."""
    extra: dict[str, list[tuple[int, int, Change]]] = {}
    for call, where in applied.own.items():
        versions_of = [v for vs in where.values() for v in vs]
        for part in invocations[call].changes:
            if part.fence is not None and fence_only(part) and versions_of and part.dataset:
                version = min(versions_of)
                place = _applied_place(view, version, invocations[call].id)
                extra.setdefault(part.dataset, []).append((version, place, part))
    for found in extra.values():
        found.sort(key=lambda item: item[:2])
    return extra


def _applied_place(view: View, version: int, commit_id: str) -> int:
    """Where the swap that made ``version`` applied ``commit_id`` among its commits (0: not
    known, as first)."""
    order = view.applied_order.get(version, ())
    return order.index(commit_id) if commit_id in order else 0


def _read_fenced(change: Change) -> str | None:
    """What is wrong with ``change``, applied, if its path-lock fence holds a path it writes
    only for reading: compatible readers hold that path at once, so the write landed as if
    it were held alone."""
    unfenced = unfenced_writes(written_paths(change), change.fence)
    if not unfenced or change.fence is None:
        return None
    return (
        f"applied under the fence of grant {change.fence.token} of {change.fence.name!r}, "
        f"which only reads {list(unfenced)} it writes"
    )


def _replayed(
    state: _State, change: Change, inv: Invocation, history: list[tuple[int, _State]]
) -> tuple[_State, str | None]:
    """``state`` (changed in place: the caller's own copy) after ``change``, and what is
    wrong with it. A restore starts again from a copy of the version it restores."""
    if change.restore is not None:
        target = inv.restore_version
        older = [s for version, s in history if target is not None and version <= target]
        if not older:
            return state, f"a restore to v{target}, which the dataset's history does not hold"
        was = older[-1]
        return _State(dict(was.files), dict(was.properties), dict(was.columns)), None
    problem = None
    model = state.files
    for key in change.remove:
        if key not in model:
            problem = f"removes {key!r}, which was not registered"
        model.pop(key, None)
    for path in change.remove_partitions:
        for key, partition in list(model.items()):
            if not path or partition == path or partition.startswith(path + "/"):
                del model[key]
    for f in change.add:
        # A file registered again (registry.commit of the same file) is in the version once
        # (a version listing it twice is reported with the version).
        if f.key in model and inv.op != "register":
            problem = f"adds {f.key!r}, which was registered already"
        model[f.key] = f.partition_path
    for key, value in (change.properties or {}).items():
        if value is None:
            state.properties.pop(key, None)
        else:
            state.properties[key] = value
    if change.schema is not None:
        # A dataset without columns takes every column declared (its first schema).
        typed = bool(state.columns)
        for column in change.schema:
            kind = str(column.type)
            had = state.columns.get(column.name)
            if had is not None and had != kind:
                problem = f"column {column.name!r} applied as {kind}, the dataset's is {had}"
            elif had is None and change.schema_mode != "merge" and typed:
                problem = f"column {column.name!r} added without schema_mode='merge'"
            state.columns.setdefault(column.name, kind)
    return state, problem


def _difference(files: Mapping[str, str], model: Mapping[str, str]) -> str:
    extra = sorted(set(files) - set(model))
    missing = sorted(set(model) - set(files))
    return (
        f"reads {len(files)} files, its commits make {len(model)}: "
        f"{len(extra)} not committed (e.g. {extra[:2]}), {len(missing)} missing "
        f"(e.g. {missing[:2]})"
    )


def _error_problems(invocations: Sequence[Invocation], fences: _Fences) -> list[str]:
    """The documented typed error, whichever process decided the refusal. A
    ``StaleFenceError`` needs a newer fence: applied, or carried by a commit of the run that
    was not (a newer holder's commit a batch applied before this one, whose swap then did
    not land: the holder is superseded all the same, and the registry saw its fence)."""
    carried = _Fences()
    for inv in invocations:
        for c in inv.changes:
            carried.stale(c)
    problems = []
    for inv in invocations:
        if inv.error_type is None or inv.outcome != "fail":
            continue
        what = f"{inv.op} {inv.id} (writer {inv.writer})"
        message = (inv.error or "").lower()
        for words, typed in TYPED_REASONS:
            if any(w in message for w in words) and inv.error_type != typed:
                problems.append(f"{what} refused with {inv.error_type}, not {typed}: {inv.error}")
        if inv.error_type == "StaleFenceError" and not any(
            fences.newer_than(c) or carried.newer_than(c) for c in inv.changes
        ):
            problems.append(
                f"{what} refused as stale, but no commit carried a newer fence: {inv.error}"
            )
    return problems
