"""The simulator's checker is a model (lakelock/_sim/_model.py): each promise it holds a run
to, shown on small hand-made registries — the violation it reports when the promise is
broken, and none when it is kept. (That the default seeds catch the core's rules switched
off: tests/test_simulator.py and tests/test_sim_vacuum.py.)"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Generator
from typing import Any

import pyarrow as pa
import pytest

from lakelock import CommitResult
from lakelock._datafile import DataFile
from lakelock._digest import comparable
from lakelock._fence import Fence
from lakelock._readable import unholdable
from lakelock._registry._builder import refused_rerun
from lakelock._registry._changes import Change, takeover
from lakelock._registry._core import _decide
from lakelock._sim import _ops
from lakelock._sim._model import same_change
from lakelock.errors import NotFoundError, SchemaMismatchError
from lakelock.testing.simulate import (
    DatasetVersion,
    Faults,
    Invocation,
    Mix,
    SimConfig,
    View,
    check,
    simulate,
)


def data(key: str, part: str = "part=0") -> DataFile:
    return DataFile("ds", f"datasets/ds/{part}/{key}", part, 1, 1, "sha256:0", '"e"', "w")


def change(commit_id: str, digest: str | None = "sha256:a", **fields: Any) -> Change:
    return Change(dataset="ds", commit_id=commit_id, digest=digest, **fields)


def call(
    commit_id: str,
    *changes: Change,
    outcome: str = "ok",
    version: int | None = None,
    already: bool = False,
    error_type: str | None = None,
    error: str | None = None,
    op: str = "append",
    start: float = 0.0,
) -> Invocation:
    return Invocation(
        commit_id,
        0,
        op,
        changes,
        False,
        start,
        start + 1.0,
        outcome,
        version=version,
        already=already,
        error_type=error_type,
        error=error,
    )


def version(n: int, *commits: Change, files: dict[str, str], **fields: Any) -> DatasetVersion:
    return DatasetVersion(
        "ds",
        n,
        tuple(c.commit_id for c in commits),
        files,
        commits=tuple((c.commit_id, c.operation, c.digest) for c in commits),
        **fields,
    )


def view(*versions: DatasetVersion) -> View:
    return View([v.version for v in versions], {"ds": list(versions)})


def judged(calls: list[Invocation], *versions: DatasetVersion) -> list[str]:
    return check(calls, view(*versions))


A, B = data("a"), data("b")
OTHER = DataFile("other", "datasets/other/part=0/o", "part=0", 1, 1, "sha256:0", '"e"', "w")
FILES_A = {A.key: "part=0"}
FILES_AB = {A.key: "part=0", B.key: "part=0"}


def test_the_same_change_is_one_dataset_operation_and_digest() -> None:
    """README: a re-run of the same change (same dataset, operation and rows) is a retry;
    another dataset, operation or other rows is another change. A registry.commit's
    digest (``commit:``) is not compared with a table operation's; an unknown one matches."""
    one = change("j", operation="append")
    assert same_change(one, change("j", operation="append"))
    assert not same_change(one, change("j", digest="sha256:b", operation="append"))
    assert not same_change(one, change("j", operation="overwrite"))
    assert same_change(one, change("j", operation="commit", digest="commit:sha256:x"))
    assert same_change(one, change("j", digest=None, operation="append"))


def test_a_kept_promise_is_no_violation() -> None:
    first = change("c1", add=(A,))
    second = change("c2", digest="sha256:b", add=(B,))
    calls = [call("c1", first, version=1), call("c2", second, version=2, start=1.5)]
    assert judged(calls, version(1, first, files=FILES_A), version(2, second, files=FILES_AB)) == []


def test_a_rerun_told_it_committed_whose_other_rows_are_missing_is_reported() -> None:
    """Two calls under one id with other rows: the second told it committed (not already)
    at the first one's version — its rows are nowhere (what a user would lose)."""
    first = change("job", add=(A,))
    other = change("job", digest="sha256:b", add=(B,))
    calls = [call("job", first, version=1), call("job", other, version=1, start=0.5)]
    problems = judged(calls, version(1, first, files=FILES_A))
    assert any("acknowledged commit recorded [0] times" in p for p in problems), problems


def test_already_committed_of_another_change_is_reported() -> None:
    first = change("job", add=(A,))
    other = change("job", digest="sha256:b", add=(B,))
    calls = [call("job", first, version=1), call("job", other, version=1, already=True)]
    problems = judged(calls, version(1, first, files=FILES_A))
    assert any(p.startswith("already committed commit recorded [0] times") for p in problems)
    # The very same change (a retry) reported already committed is what README promises.
    retry = change("job", add=(data("a2"),))
    calls = [call("job", first, version=1), call("job", retry, version=1, already=True)]
    assert judged(calls, version(1, first, files=FILES_A)) == []


def test_already_committed_for_another_set_of_datasets_is_reported() -> None:
    """A commit under an id recorded for another set of datasets is another change, however
    its changes compare one by one (no digest here: the datasets alone tell them apart). A
    re-run spanning ``ds`` and ``other`` told ``already_committed`` at the version recording
    the id for ``ds`` alone (``other``'s rows never landed), or a re-run of ``ds`` alone told
    so at the version recording it for both, is reported; the same datasets are a retry."""
    first = change("job", digest=None, add=(A,))
    spanning = (
        change("job", digest=None, add=(data("a2"),)),
        Change(dataset="other", commit_id="job", add=(OTHER,)),
    )
    calls = [call("job", first, version=1), call("job", *spanning, version=1, already=True)]
    problems = judged(calls, version(1, first, files=FILES_A))
    assert any("records another change under its id" in p for p in problems), problems
    both = View(
        [1],
        {
            "ds": [version(1, first, files=FILES_A)],
            "other": [
                DatasetVersion(
                    "other", 1, ("job",), {OTHER.key: "part=0"}, commits=(("job", "commit", None),)
                )
            ],
        },
    )
    recorded = call("job", first, spanning[1], version=1)
    fewer = call("job", change("job", digest=None, add=(data("a3"),)), version=1, already=True)
    problems = check([recorded, fewer], both)
    assert any("records another change under its id" in p for p in problems), problems
    retry = call("job", *spanning, version=1, already=True)
    assert check([recorded, retry], both) == []


def test_two_changes_applied_under_one_id_are_reported() -> None:
    first = change("job", add=(A,))
    other = change("job", digest="sha256:b", add=(B,))
    calls = [
        call("job", first, version=1),
        call("job", other, outcome="unknown", start=0.5),
    ]
    problems = judged(calls, version(1, first, files=FILES_A), version(2, other, files=FILES_AB))
    assert any("commit id 'job' applied for two changes" in p for p in problems), problems


def test_a_definite_failure_that_lands_is_reported_and_an_unknown_one_may() -> None:
    """A commit told RetryBudgetExhaustedError (or a conflict) must never be applied; one
    whose outcome is unknown may be, once."""
    landed = change("c1", add=(A,))
    gave_up = call("c1", landed, outcome="gaveup", error="RetryBudgetExhaustedError: gave up")
    problems = judged([gave_up], version(1, landed, files=FILES_A))
    assert any(p.startswith("refused commit is in the registry") for p in problems)
    unknown = call("c1", landed, outcome="unknown")
    assert judged([unknown], version(1, landed, files=FILES_A)) == []


def test_a_commit_with_a_stale_lease_token_applied_is_reported() -> None:
    """FORMAT.md's fencing: a token below one applied before it is refused."""
    new = change("c1", add=(A,), fence=Fence("leader", 2))
    old = change("c2", digest="sha256:b", add=(B,), fence=Fence("leader", 1))
    calls = [call("c1", new, version=1), call("c2", old, version=2, start=1.5)]
    problems = judged(calls, version(1, new, files=FILES_A), version(2, old, files=FILES_AB))
    assert any(
        "applied with a stale fence: lease 'leader' token 1 after token 2" in p for p in problems
    )


def test_a_lock_grant_superseded_by_a_conflicting_one_applied_is_reported() -> None:
    """A path-lock grant below a recorded conflicting grant is refused, whatever time
    passed (what a paused holder's overwrite over the newer holder's data would break); a
    grant on another path is not."""
    newer = change("c1", add=(A,), fence=Fence("lock:ds", 2, write=("/ds/part=0",)))
    zombie = change(
        "c2", digest="sha256:b", add=(B,), fence=Fence("lock:ds", 1, write=("/ds/part=0",))
    )
    calls = [call("c1", newer, version=1), call("c2", zombie, version=2, start=1.5)]
    problems = judged(calls, version(1, newer, files=FILES_A), version(2, zombie, files=FILES_AB))
    assert any("grant 1 of 'lock:ds' after conflicting grant 2" in p for p in problems)
    apart = change(
        "c2", digest="sha256:b", add=(B,), fence=Fence("lock:ds", 1, write=("/ds/part=9",))
    )
    calls = [call("c1", newer, version=1), call("c2", apart, version=2, start=1.5)]
    assert judged(calls, version(1, newer, files=FILES_A), version(2, apart, files=FILES_AB)) == []


def test_a_refusal_whose_reason_is_typed_must_be_of_that_type() -> None:
    """A stale fence is StaleFenceError and a schema that does not fit SchemaMismatchError,
    whichever process decided it: a leader that catches StaleFenceError to step down must
    get it. And StaleFenceError only when a commit carried a newer fence (applied or not:
    its holder superseded this one)."""
    newer = change("c1", add=(A,), fence=Fence("leader", 2))
    stale = change("c2", digest="sha256:b", add=(B,), fence=Fence("leader", 1))
    reason = "the commit's intent was rejected: fencing token 1 for 'leader' is stale"
    generic = call(
        "c2", stale, outcome="fail", error_type="CommitConflictError", error=reason, op="lease"
    )
    problems = judged([call("c1", newer, version=1), generic], version(1, newer, files=FILES_A))
    assert any("refused with CommitConflictError, not StaleFenceError" in p for p in problems)
    typed = call("c2", stale, outcome="fail", error_type="StaleFenceError", error=reason)
    assert judged([call("c1", newer, version=1), typed], version(1, newer, files=FILES_A)) == []
    assert any("no commit carried a newer fence" in p for p in judged([typed]))
    # A newer holder's commit refused (its batch's swap did not land) supersedes it too.
    unlanded = call("c1", newer, outcome="gaveup", error="gave up")
    assert judged([unlanded, typed]) == []
    schema = "the commit's intent was rejected: schema does not fit dataset 'ds'"
    untyped = call("c2", stale, outcome="fail", error_type="CommitConflictError", error=schema)
    assert any("not SchemaMismatchError" in p for p in judged([untyped]))


def test_a_file_listed_twice_and_properties_and_columns_are_held_to_the_model() -> None:
    """A file (key) is in a version once; properties and columns are what the commits set
    (a registry.commit of a file already there adds nothing)."""
    first = change("c1", add=(A,), properties={"owner": "x"})
    again = change("c2", digest="commit:sha256:b", add=(A,), operation="commit")
    calls = [call("c1", first, version=1), call("c2", again, version=2, op="register", start=1.5)]
    kept = [
        version(1, first, files=FILES_A, properties={"owner": "x"}, columns={}),
        version(2, again, files=FILES_A, properties={"owner": "x"}, columns={}),
    ]
    assert judged(calls, *kept) == []
    twice = [kept[0], version(2, again, files=FILES_A, properties={"owner": "x"}, twice=(A.key,))]
    assert any("lists 1 files twice" in p for p in judged(calls, *twice))
    lost = [version(1, first, files=FILES_A, properties={})]
    assert any(
        "properties {}, its commits make {'owner': 'x'}" in p for p in judged(calls[:1], *lost)
    )
    merged = change(
        "c3",
        add=(B,),
        schema=pa.schema([pa.field("extra", pa.int64())]),
        schema_mode="merge",
    )
    other = change(
        "c4",
        digest="sha256:d",
        add=(data("c"),),
        schema=pa.schema([pa.field("extra", pa.string())]),
        schema_mode="merge",
    )
    calls = [call("c3", merged, version=1), call("c4", other, version=2, start=1.5)]
    files = {B.key: "part=0", data("c").key: "part=0"}
    problems = judged(
        calls,
        version(1, merged, files={B.key: "part=0"}, columns={"extra": "int64"}),
        version(2, other, files=files, columns={"extra": "int64"}),
    )
    assert any("column 'extra' applied as string, the dataset's is int64" in p for p in problems)


def test_a_change_without_files_run_again_is_the_call_that_heard_it_committed() -> None:
    """Found by the slow sweep (seed 20349): a delete gives up (its intent recorded
    cancelled) and the pipeline runs it again under its id, the same change, acknowledged
    at version 2. Nothing in the version tells the two calls apart (no files): the record is
    the acknowledged call's, not the one told it failed — which the checker chose before,
    reporting a refused commit in the registry. Both applied would still be reported."""
    first = change("c1", add=(A,), operation="append")
    delete = change("job-1", remove_partitions=("part=0",), operation="delete")
    gave_up = call("job-1", delete, outcome="gaveup", error="gave up", op="delete")
    again = call("job-1", delete, version=2, op="delete", start=2.0)
    versions = (version(1, first, files=FILES_A), version(2, delete, files={}))
    assert judged([call("c1", first, version=1), gave_up, again], *versions) == []
    twice = version(3, delete, files={})
    problems = judged([call("c1", first, version=1), gave_up, again], *versions, twice)
    assert any("refused commit is in the registry" in p for p in problems)


LEADER = "lease:leader"


def leased(commit_id: str, token: int, *, at: int) -> tuple[Invocation, Change, View]:
    """A lease's takeover to token 2 recorded at root v2, and a commit under ``token``
    recorded at root ``at`` (the dataset's version 1)."""
    took = takeover(Fence(LEADER, 2), "t2")
    fenced = change(commit_id, add=(A,), fence=Fence(LEADER, token))
    order: dict[int, tuple[str, ...]] = {2: ("t2",), at: (commit_id,)}
    registry = View(
        [1, 2, 3],
        {"ds": [version(at, fenced, files=FILES_A)]},
        applied_order=order,
        takeovers={2: ("t2",)},
    )
    return call("t2", took, version=2, op="takeover"), fenced, registry


def test_a_commit_under_a_token_below_a_recorded_takeover_is_reported() -> None:
    """FORMAT.md, "Lease takeovers": once a takeover to token 2 is recorded (a commit naming
    no dataset, read from the root's records), a holder of token 1 paused past it is refused
    even before the new holder commits. A registry that applied token 1's commit after the
    takeover's record is reported; one that applied it before, or token 2's after, is not."""
    took, late, registry = leased("c1", 1, at=3)
    problems = check([took, call("c1", late, version=3, op="lease", start=0.5)], registry)
    assert any(
        "under lease token 1 of 'lease:leader' after the takeover to token 2 (root v2)" in p
        for p in problems
    ), problems
    took, early, registry = leased("c1", 1, at=1)
    assert check([took, call("c1", early, version=1, op="lease")], registry) == []
    took, holder, registry = leased("c2", 2, at=3)
    assert check([took, call("c2", holder, version=3, op="lease", start=1.5)], registry) == []


def test_a_takeover_acknowledged_is_held_to_its_record_in_the_root() -> None:
    """A takeover acknowledged must be in the root's records by the version returned (else
    a holder paused past it is not refused), and, as any change, recorded once: one
    recorded again later (a retry of it past the root's window, which a takeover has no
    dataset index beyond, taken as absent) is reported; acknowledged at a later version
    than its record (settled by its token) is not."""
    took, early, registry = leased("c1", 1, at=1)
    registry.takeovers = {}
    problems = check([took, call("c1", early, version=1, op="lease")], registry)
    assert any(
        "ok takeover t2 (writer 0) acknowledged as v2, recorded at nowhere" in p for p in problems
    )
    registry.takeovers = {2: ("t2",), 3: ("t2",)}
    problems = check([took, call("c1", early, version=1, op="lease")], registry)
    assert any("the change takeover t2 (writer 0) is applied 2 times" in p for p in problems)
    registry.takeovers = {2: ("t2",)}
    later = call("t2", took.changes[0], version=3, op="takeover")
    assert check([later, call("c1", early, version=1, op="lease")], registry) == []


def test_a_takeover_refused_though_recorded_is_reported_unless_superseded() -> None:
    """A takeover that gave up (or was refused for any reason but a stale token) though the
    root recorded it is reported, as any definite failure that landed is: its caller was
    told the lease is not acquired while the registry fences for it. Refused as stale, or
    given up once a later acquisition's token was recorded (large-sweep seed 15789), it may
    have been recorded before that acquisition superseded it: the lease is not its holder's
    either way, and the stale-fence check holds that a newer token was applied."""
    took, early, registry = leased("c1", 1, at=1)
    registry.takeovers = {2: ("t2",)}
    gave_up = call("t2", *took.changes, outcome="gaveup", error="gave up", op="takeover")
    problems = check([gave_up, call("c1", early, version=1, op="lease")], registry)
    assert any("refused commit is in the registry" in p and "t2" in p for p in problems)
    newer = takeover(Fence(LEADER, 3), "t3")
    registry.takeovers = {2: ("t2",), 3: ("t3",)}
    registry.applied_order[3] = ("t3",)
    superseding = call("t3", newer, version=3, op="takeover", start=2.0)
    assert check([gave_up, superseding, call("c1", early, version=1, op="lease")], registry) == []
    stale = call(
        "t2",
        *took.changes,
        outcome="fail",
        error_type="StaleFenceError",
        error="stale",
        op="takeover",
    )
    assert check([stale, superseding, call("c1", early, version=1, op="lease")], registry) == []


def test_a_commit_of_nothing_recorded_is_reported() -> None:
    """FORMAT.md, "Commit ids": a commit of nothing under a caller's id (an empty append,
    ``registry.commit`` of no files) records nothing, so the re-run with the rows commits
    them under that id. A registry recording it is reported; the re-run that then landed
    its rows under the id is not what is wrong."""
    nothing = change("job-1", operation="commit", digest="commit:sha256:0")
    rows = change("job-1", digest="commit:sha256:1", add=(A,), operation="commit")
    empty = call("job-1", nothing, version=0, op="empty")
    empty.empty = True
    rerun = call("job-1", rows, version=1, op="rerun", start=2.0)
    assert judged([empty, rerun], version(1, rows, files=FILES_A)) == []
    recorded = call("job-1", nothing, version=1, op="empty")
    problems = judged([recorded], version(1, nothing, files={}))
    assert any("a commit of nothing is recorded {'ds': [1]}" in p for p in problems), problems


def test_a_rerun_refused_by_its_own_upload_is_reported() -> None:
    """README (``file_name``): a re-run whose caller-given file name holds the very bytes it
    uploads (its earlier run's) takes that upload, and is not refused ``AlreadyExistsError``
    for it. Reported when every call uploading to the key uploads the same bytes; not when
    another call uploaded other bytes there (other rows under the same file name: refused
    rightly), nor when vacuum deleted the key meanwhile."""
    key, mine = A.key, b"rows"
    first = call("job-1", change("job-1", add=(A,)), outcome="gaveup", error="gave up", op="named")
    refused = call(
        "job-1",
        change("job-1", add=(A,)),
        outcome="fail",
        error="data PUT: AlreadyExistsError: PutObject exists",
        op="rerun",
        start=2.0,
    )
    first.uploads = refused.uploads = ((key, mine),)
    problems = check([first, refused], View())
    assert any("whose key holds its own upload" in p for p in problems), problems
    first.uploads = ((key, b"other rows"),)
    assert check([first, refused], View()) == []
    first.uploads = ((key, mine),)
    assert check([first, refused], View(deleted=frozenset({key}))) == []


def test_a_fence_is_judged_by_its_name_in_nfc() -> None:
    """FORMAT.md, "Names": one lease however its name is spelt. A token below one applied
    under the other spelling of the same name is stale (the model keys fences by their NFC
    names, whatever a fence object holds)."""
    composed, decomposed = "lease:\u00e9lu", "lease:e\u0301lu"
    newer = change("c1", add=(A,), fence=Fence(composed, 2))
    older = change("c2", digest="sha256:b", add=(B,), fence=Fence(composed, 1))
    object.__setattr__(older.fence, "name", decomposed)  # a fence that kept its spelling
    calls = [call("c1", newer, version=1), call("c2", older, version=2, start=1.5)]
    problems = judged(calls, version(1, newer, files=FILES_A), version(2, older, files=FILES_AB))
    assert any("applied with a stale fence: lease 'lease:\u00e9lu' token 1" in p for p in problems)


# -- the whole API: what the simulator's workload would have missed ----------------------------
#
# Each promise below was broken by a bug found outside the simulator. The workload now makes
# the input that breaks it (kinds off in the default mix, on in the sweep's seeds from
# MODEL_SEEDS: tests/test_simulator.py), and the checker holds the promise: with the fix
# switched back off in the simulated code path, a seed of a run made for it is reported.

#: Commits of nothing under a caller's id, and their re-runs that have the rows.
EMPTY = SimConfig(
    writers=4, seconds=2.0, seed=0, mix=Mix.of([("append", 1), ("empty", 1), ("rerun", 1)])
)


def test_a_commit_of_nothing_under_a_callers_id_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FORMAT.md, "Commit ids": an empty append, or ``registry.commit`` of no files, under a
    caller's commit id records nothing, so the re-run that has the rows commits them under
    that id. What a user lost when the commit of nothing went through the registry (before
    5dda8a6, and Dask's and Spark's empty appends before 33279a1): the id recorded for no
    rows, the re-run with the rows refused (``CommitIdReusedError``) or told
    ``already_committed``, its rows never loaded — and a new dataset made without its
    partition columns. The simulator's writers make such commits (kind ``empty``), and the
    checker reports one recorded."""
    kept = simulate(EMPTY)
    assert kept.violations == []
    empty = [i for i in kept.invocations if i.op == "empty" and i.outcome == "ok"]
    assert empty
    assert all(i.empty for i in empty)
    landed = {i.id for i in kept.invocations if i.op == "rerun" and i.outcome == "ok"}
    assert landed & {i.id for i in empty}  # a re-run with the rows committed them
    monkeypatch.setattr(_ops, "commits_nothing", lambda _changes: False)
    broken = simulate(EMPTY)
    assert any("a commit of nothing is recorded" in v for v in broken.violations), broken.violations


#: Appends with caller-given file names, under a small budget (some give up after their
#: upload) and faults, and their re-runs.
NAMED = SimConfig(
    writers=8,
    seconds=2.0,
    seed=1,
    max_attempts=2,
    max_seconds=0.5,
    faults=Faults(rate=0.06),
    mix=Mix.of([("append", 1), ("named", 1), ("rerun", 1)]),
)


def test_a_rerun_with_a_caller_given_file_name_takes_its_earlier_upload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """README (``file_name``): a re-run of a job with the same rows and the same file name
    finds its earlier run's upload at the key (the same bytes) and takes it as its own; its
    commit decides (already committed, or committed now). What a user lost before ed0632e:
    the re-run of a run refused after its upload heard ``AlreadyExistsError`` — and so did
    every re-run after it, for ever. The simulator's writers make such appends (kind
    ``named``) and re-run them with the same bytes; the checker reports a re-run refused
    for a key that holds nothing but its own upload."""
    assert simulate(NAMED).violations == []

    def never(_key: str, _body: bytes) -> Generator[Any, Any, bool]:
        return False
        yield  # a generator, as the simulated lookup is

    monkeypatch.setattr(_ops, "earlier_upload", never)
    broken = simulate(NAMED)
    assert any(
        "refused for its caller-given file name, whose key holds its own upload" in v
        for v in broken.violations
    ), broken.violations


#: Leases whose name has an accent, spelt composed or decomposed by each commit (seed 1:
#: seed 0's run applies no superseded token with fences as spelt since a writer that reads
#: no root lists the snapshots).
SPELT = SimConfig(writers=4, seconds=2.0, seed=1, mix=Mix.of([("append", 1), ("spelt", 2)]))


def test_a_lease_spelt_two_ways_is_one_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    """FORMAT.md, "Names": a lease's name is NFC, so a fence spelt decomposed is the same
    lease's. What a user lost before 03de53d: two spellings of one name were two leases,
    both held at once, and the registry fenced each apart — a leader superseded under one
    spelling still committed under the other. The simulator's writers spell the ``spelt``
    lease both ways (its tokens handed out under its NFC name, as the lease's own protocol
    does), and the checker judges fences by their NFC names: with fences keeping the
    spelling they were given, a superseded token is applied."""
    assert simulate(SPELT).violations == []
    monkeypatch.setattr(Fence, "__post_init__", lambda _self: None)
    broken = simulate(SPELT)
    assert any("applied with a stale fence: lease 'lease:" in v for v in broken.violations), (
        broken.violations
    )


#: Copies and renames of partitions that overwrites replace, beside vacuum (a one-second
#: window), with writers paused for longer than it: a copy paused between reading its
#: partition and copying it finds a file vacuum took once an overwrite replaced it (seed 26,
#: the first of 16-26 whose copy meets it since a writer that reads no root lists the
#: snapshots; 16 before).
COPIED = SimConfig(
    writers=6,
    seconds=4.0,
    seed=26,
    think=0.3,
    partitions=2,
    vacuums=1,
    faults=Faults(stalls=4, stall=2.5),
    mix=Mix.of([("append", 1), ("overwrite", 3), ("copy", 3), ("rename", 1)]),
)


def test_a_copy_whose_source_vacuum_took_is_refused_with_nothing_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Lake.copy_partition``: a file of the version read that vacuum deleted before it
    was copied (an overwrite replaced the partition meanwhile: a copy's read lock keeps out
    no unlocked commit) refuses the copy, ``CommitConflictError``, nothing committed. What
    a user lost before 1857fda: the copy died with the store's own error, not a
    ``CommitError`` (a pipeline that retries refused commits crashed instead). The
    simulator's copies now copy the files they read (one gone refuses the copy), and the
    checker reports any other exception out of a commit."""
    kept = simulate(COPIED)
    assert kept.violations == []
    assert any(
        i.op == "copy" and i.error_type == "CommitConflictError" and "is gone" in (i.error or "")
        for i in kept.invocations
    )

    def store_error(source: str, _dataset: str) -> Exception:
        return NotFoundError(f"CopyObject {source!r}: NoSuchKey", bucket="lake", key=source)

    monkeypatch.setattr(_ops, "copy_refused", store_error)
    broken = simulate(COPIED)
    assert any(
        "an exception other than a CommitError: NotFoundError" in v for v in broken.violations
    ), broken.violations


def test_a_rerun_that_takes_its_earlier_upload_is_the_call_that_committed_it() -> None:
    """Found by the sweep of the whole model (seed 30373): an append with a caller-given
    file name gave up, and its re-run with the same rows took the same file and was
    acknowledged at version 1. Both calls add the same key: the record is the acknowledged
    call's, not the one told it gave up (which the checker chose before, reporting a
    refused commit in the registry)."""
    named = change("job-1", add=(A,), operation="append")
    gave_up = call("job-1", named, outcome="gaveup", error="gave up", op="named")
    again = call("job-1", named, version=1, op="rerun", start=2.0)
    assert judged([gave_up, again], version(1, named, files=FILES_A)) == []
    problems = judged(
        [gave_up, call("job-1", named, outcome="fail", error="x", start=2.0)],
        version(1, named, files=FILES_A),
    )
    assert any("refused commit is in the registry" in p for p in problems), problems


def test_a_workers_file_live_with_a_column_the_dataset_lacks_is_reported() -> None:
    """FORMAT.md, "File statistics" and after: a worker's file (``DataFile.schema``) is
    live only where the dataset's columns hold every column it stores. A file holding
    ``score`` in a dataset without it, or ``id`` as a string where the dataset's is int64,
    is reported; the same file once ``score`` was merged in its type is not."""
    schema = pa.schema([("id", pa.int64()), ("score", pa.string())])
    typed = dataclasses.replace(data("w"), schema=schema)
    declared = pa.schema([("id", pa.int64())])
    lacking = change("c1", add=(typed,), schema=declared, operation="commit")
    problems = judged(
        [call("c1", lacking, version=1, op="typed")],
        version(1, lacking, files={typed.key: "part=0"}, columns={"id": "int64"}),
    )
    assert any("holds column 'score', which the dataset lacks" in p for p in problems), problems
    merged = change("c1", add=(typed,), schema=schema, schema_mode="merge", operation="commit")
    columns = {"id": "int64", "score": "string"}
    fits = [version(1, merged, files={typed.key: "part=0"}, columns=columns)]
    assert judged([call("c1", merged, version=1, op="typed")], *fits) == []
    strings = dataclasses.replace(data("s"), schema=pa.schema([("id", pa.string())]))
    wrong = change("c2", add=(strings,), schema=declared, operation="commit")
    problems = judged(
        [call("c2", wrong, version=1, op="typed")],
        version(1, wrong, files={strings.key: "part=0"}, columns={"id": "int64"}),
    )
    assert any("'id' as string, which the dataset's int64 cannot hold" in p for p in problems)


def test_a_commit_id_recorded_in_another_spelling_than_nfc_is_reported() -> None:
    """FORMAT.md, "Commit ids": ids are NFC, compared as given. A re-run spelling its id
    decomposed that lands beside the NFC one landed its rows twice, and is reported so."""
    nfc = unicodedata.normalize("NFC", "tâche-1")
    nfd = unicodedata.normalize("NFD", nfc)
    first, again = change(nfc, add=(A,)), change(nfd, add=(B,))
    calls = [call(nfc, first, version=1), call(nfd, again, version=2, op="rerun", start=2.0)]
    problems = judged(calls, version(1, first, files=FILES_A), version(2, again, files=FILES_AB))
    assert any("not in NFC" in p and "landed twice" in p for p in problems), problems


#: Workers' typed files committed beside merges of the column some of them hold.
TYPED = SimConfig(
    writers=4, seconds=2.0, seed=0, mix=Mix.of([("append", 1), ("typed", 2), ("schema", 1)])
)


def test_a_workers_files_are_judged_as_the_shell_judges_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FORMAT.md, "File statistics" and after: ``registry.commit`` of a worker's files
    holding a column the dataset lacks is refused unless it merges the column, and one in
    a type the dataset's cannot hold is refused. What a user lost before: the first was
    committed, the column ignored, and once another pipeline merged it in another type
    every read of the dataset failed. The simulator's writers commit such files (kind
    ``typed``) beside merges (``schema``) and the checker holds every live file to the
    dataset's columns: with the check as it was, the run is reported."""
    kept = simulate(TYPED)
    assert kept.violations == []
    outcomes = {(i.outcome, i.error_type) for i in kept.invocations if i.op == "typed"}
    assert {("ok", None), ("fail", "SchemaMismatchError")} <= outcomes

    def as_before(change: Change, dataset: Any) -> pa.Schema | None:
        target = change.schema if change.schema is not None else getattr(dataset, "schema", None)
        # The check as it was: a file's types judged, a column the dataset lacks ignored,
        # a dataset without a schema not judged, nothing declared.
        for f in change.add:
            held = target is None or f.schema is None
            if not held and unholdable(f.schema, target, f.partition_path) is not None:
                raise SchemaMismatchError("cannot hold", dataset=change.dataset)
        return change.schema

    monkeypatch.setattr(_ops, "fitted_schema", as_before)
    broken = simulate(TYPED)
    assert any("which the dataset lacks" in v for v in broken.violations), broken.violations


#: Workers' typed files and their re-runs, beside merges of the column some of them hold
#: and restores to versions before it (one dataset: the re-runs meet the restores). Seed 4
#: since a writer that reads no root lists the snapshots (3 before). Seed 3's run since
#: shows a re-run refused with ``SchemaMismatchError`` after a retry told
#: ``already_committed``, the case seed 130 showed before: the checker holds it to the
#: change recorded (below).
RESTORED = SimConfig(
    writers=4,
    seconds=4.0,
    seed=4,
    datasets=1,
    mix=Mix.of([("typed", 3), ("rerun", 3), ("restore", 2), ("schema", 1)]),
)


def test_a_rerun_whose_files_no_longer_fit_is_answered_as_the_shell_answers_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """README, "Engines": a job re-run under its commit id hears ``already_committed`` once
    recorded, whatever its rows. A re-run of a worker's files that landed before a restore
    took away the column they hold is judged by the shell's own ``refused_rerun``: its
    earlier commit, reported. With the simulator's writers refusing it as before
    (``SchemaMismatchError``), the checker reports each retried job failed on a commit
    that had landed."""
    answers: list[Any] = []

    def seen(change: Change, found: Any) -> Any:
        answers.append(refused_rerun(change, found))
        return answers[-1]

    monkeypatch.setattr(_ops, "refused_rerun", seen)
    kept = simulate(RESTORED)
    assert kept.violations == []
    assert any(answer is not None and answer.already_committed for answer in answers)
    monkeypatch.setattr(_ops, "refused_rerun", lambda change, found: None)
    broken = simulate(RESTORED)
    assert any(
        "refused with SchemaMismatchError, but its change was acknowledged" in v
        for v in broken.violations
    ), broken.violations


def test_a_rerun_of_other_rows_is_held_to_the_change_recorded_not_to_a_retry_told_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FORMAT.md, "Commit ids": a ``commit:`` digest is compared only with another of its
    kind, so "the same change" is not transitive. In this run a worker's files under
    ``job-1-3`` are refused; a re-run with other rows (a ``sha256:`` digest) lands; a
    re-run with the first rows (``commit:``) is told ``already_committed``, the digests not
    comparable; a third re-run, with rows whose ``sha256:`` digest differs from the one
    recorded, finds the dataset changed and is refused (``SchemaMismatchError``). It is
    another change than the one recorded (the shell's ``reused_commit_id``), and the
    checker holds it to that change, not to the retry told ``already_committed``: the
    refusal stands, no violation (the checker reported one before). With the shell telling
    every re-run of a recorded id ``already_committed`` (its rows not compared), the
    checker reports the third told so of a commit that holds other rows (it did not).
    (Seed 3, the first of 0-3 that shows it since a writer that reads no root lists the
    snapshots; 130 before.)"""
    run = simulate(dataclasses.replace(RESTORED, seed=3))
    assert run.violations == []
    refused = [
        i
        for i in run.invocations
        if i.op == "rerun" and i.outcome == "fail" and i.error_type == "SchemaMismatchError"
    ]
    told = [i for i in run.invocations if i.op == "rerun" and i.already and i.end is not None]
    assert any(
        a.id == r.id
        and a.end is not None
        and a.end < r.start
        and not comparable(str(a.changes[0].digest), str(r.changes[0].digest))
        for r in refused
        for a in told
    )

    def any_rows(change: Change, found: Any) -> CommitResult | None:
        if change.generated_id or found is None:
            return None
        return CommitResult(found.version, change.commit_id, already_committed=True)

    monkeypatch.setattr(_ops, "refused_rerun", any_rows)
    broken = simulate(dataclasses.replace(RESTORED, seed=3))
    assert any(
        "told already_committed at v4, which records another change" in v for v in broken.violations
    ), broken.violations


#: Appends under ids with an accent, and their re-runs, half of them spelling the id
#: decomposed.
ACCENTED = SimConfig(
    writers=4, seconds=2.0, seed=0, mix=Mix.of([("append", 1), ("accented", 1), ("rerun", 1)])
)


def test_a_rerun_spelling_its_commit_id_decomposed_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FORMAT.md, "Commit ids": a caller's id not in NFC is refused before anything is
    written (``InvalidArgumentError``). What a user lost without it: a job re-run with its
    id read back decomposed (a file name on macOS) committed the same rows a second time,
    under an id that prints the same. The simulator's writers re-run ``accented`` commits
    under either spelling; with the shell's check of the id switched off, the checker
    reports the decomposed id recorded beside the composed one."""
    kept = simulate(ACCENTED)
    assert kept.violations == []
    assert any(
        i.op == "rerun" and i.outcome == "fail" and i.error_type == "InvalidArgumentError"
        for i in kept.invocations
    )
    monkeypatch.setattr(_ops, "checked_id", lambda commit_id: commit_id)
    broken = simulate(ACCENTED)
    assert any("landed twice" in v for v in broken.violations), broken.violations


#: Appends under a write grant's fence and under a read grant's, over the same partitions.
READ_GRANTS = SimConfig(
    writers=4, seconds=2.0, seed=0, mix=Mix.of([("append", 1), ("lock", 1), ("readlock", 1)])
)


def test_a_write_under_a_read_grants_fence_is_refused_as_the_shell_refuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FORMAT.md, "A read grant's fence fences no write": readers of one path hold it at
    once, so a commit carrying a read grant's fence would land as if the path were held
    alone. The simulator's writers refuse it before anything is written, as the shell does
    (``_ops.fenced_writes``: ``check_fence_writes``); with that check switched off, the
    checker reports each such write applied."""
    kept = simulate(READ_GRANTS)
    assert kept.violations == []
    refused = [i for i in kept.invocations if i.op == "readlock"]
    assert refused
    assert all(i.outcome == "fail" and i.error_type == "InvalidArgumentError" for i in refused)
    monkeypatch.setattr(_ops, "fenced_writes", lambda changes: None)
    broken = simulate(READ_GRANTS)
    assert any("which only reads" in v for v in broken.violations), broken.violations


#: ``registry.commit_changes`` of changes without a digest under caller-chosen ids, into one
#: dataset or two, and re-runs of them under their ids spanning a dataset more or fewer,
#: with faults and killed processes (re-runs of killed commits, their intents folded by
#: others). The window holds every commit of the run: past it a re-run of fewer datasets
#: is not told from its commit's retry (FORMAT.md, "Commit ids"). Seed 1: both directions
#: refused, and killed re-runs settled.
REGROUPED = SimConfig(
    writers=6,
    seconds=3.0,
    seed=1,
    store="fixed:10",
    commit_window=10_000,
    faults=Faults(rate=0.06, kills=2),
    mix=Mix.of([("append", 1), ("regroup", 2)]),
)


def test_a_rerun_spanning_a_dataset_more_or_fewer_is_another_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """README: an id "reused for other rows" is ``CommitIdReusedError``. A commit spanning
    datasets is judged whole against the record of its id (FORMAT.md rules 2 and 3,
    ``_decide.reused_by_commit``): a re-run under the id of a commit of ``a`` alone that
    spans ``a`` and ``b``, or the other way round, is another change. What a user lost
    before: judged by its first change alone, the re-run was told ``already_committed``
    and ``b``'s rows never landed (or a commit never made was reported made), and a killed
    re-run's intents were folded as applied already. The simulator's writers make such
    re-runs (kind ``regroup``); with the judgement by the first change put back, the
    checker reports re-runs told ``already_committed`` for another change."""
    kept = simulate(REGROUPED)
    assert kept.violations == []
    regrouped = [i for i in kept.invocations if i.op == "regroup"]
    refused = [i for i in regrouped if i.error_type == "CommitIdReusedError"]
    assert {len(i.datasets) for i in refused} == {1, 2}  # fewer datasets, and more
    assert any(i.restarts for i in regrouped)
    by_first = _decide.reused_commit_id
    monkeypatch.setattr(
        _decide, "reused_by_commit", lambda record, changes: by_first(record, changes[0])
    )
    broken = simulate(REGROUPED)
    assert any("records another change under its id" in v for v in broken.violations), (
        broken.violations[:3]
    )
