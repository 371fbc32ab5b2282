"""A fold never outgrows the root's window of commit ids (docs/FORMAT.md, "Commit ids"),
against the embedded endpoint.

Within the root's window an id is bound across datasets; each dataset's commit-id index
binds it only within that dataset. A swap that applied more commits than the window holds
recorded some ids nowhere a commit to another dataset looks, even for a moment.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from lakelock._registry import REGISTRY_KEY, Registry, _changes
from lakelock._registry._changes import Change
from lakelock._registry._core import _decide
from lakelock._registry._document import parse_registry
from lakelock._registry._intents import intent_document
from lakelock._s3 import ObjectStore
from lakelock.errors import CommitIdReusedError
from lakelock.testing.simulate import Mix, SimConfig, simulate
from tests._support import FAST_RETRY
from tests._support.files import datafile

WINDOW = 4


def test_an_id_of_a_fold_larger_than_the_window_is_not_applied_again_elsewhere(
    store: ObjectStore,
) -> None:
    """A lake with a window of 4; six writers of ``alpha`` sent their intents and died
    before their swaps; another process's commit folds them. Before, its one swap applied
    all seven commits and kept the newest four records: ``job-0`` was at once in no window,
    and a commit of ``job-0`` to ``beta`` was applied too — one id, two changes, where
    README promises ``CommitIdReusedError``. Now the root keeps a version's records whole
    while fewer than the window's worth of later ones are kept: ``job-0`` stays bound
    across datasets for the next four commits after its swap, like any id."""
    first = Registry(store, retry=FAST_RETRY, commit_window=WINDOW)
    first.commit("alpha", add=[datafile("alpha", "", "seed")], commit_id="seed")
    now_ms = int(time.time() * 1000)
    for n in range(6):
        change = Change("alpha", f"job-{n}", add=(datafile("alpha", "", f"job-{n}"),))
        key, body, _ = intent_document(change, now_ms=now_ms + n)
        store.put(key, body, mode="create")
    folder = Registry(store, retry=FAST_RETRY)
    folder.commit("gamma", add=[datafile("gamma", "", "g")], commit_id="folder")
    root = parse_registry(store.get(REGISTRY_KEY).body)
    for n in range(WINDOW - 1):  # later versions, fewer commits than the window
        folder.commit("gamma", add=[datafile("gamma", "", f"later-{n}")], commit_id=f"later-{n}")
    reuser = Registry(store, retry=FAST_RETRY)
    with pytest.raises(CommitIdReusedError):
        reuser.commit("beta", add=[datafile("beta", "", "other")], commit_id="job-0")
    assert "beta" not in reuser.read().datasets
    applied = {c.id for c in root.commits if c.version == root.version}
    assert applied == {"folder", *(f"job-{n}" for n in range(6))}  # one swap, all kept


#: A busy lake with a window of 8: folds of dozens of commits, and pipelines colliding on
#: one caller-chosen id (each with its own dataset) every quarter of a second.
FOLDS_PAST_THE_WINDOW = SimConfig(
    writers=32,
    seconds=2.0,
    store="fixed:10",
    seed=0,
    commit_window=8,
    mix=Mix.of([("append", 3), ("collide", 1)]),
)


def test_a_window_cut_inside_a_fold_is_caught_by_the_simulators_checker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The window cut at ``commit_window`` records whatever their versions (as before): the
    simulator's model finds one id applied for two changes, in two datasets one version
    apart (seeds 0-5, 7-9 and 11 of 0-11 of this configuration catch it; with the window
    kept whole, all 12 hold). Its checker counted every commit of the first one's version
    as recorded after the id, so a fold larger than half the window hid every reuse of its
    ids."""
    assert simulate(FOLDS_PAST_THE_WINDOW).violations == []
    monkeypatch.setattr(_changes, "window_kept", lambda commits, window: tuple(commits[-window:]))
    violations = simulate(FOLDS_PAST_THE_WINDOW).violations
    assert any("applied for two changes" in v for v in violations), violations[:3]


def test_a_writer_keeps_its_refusal_until_a_swap_records_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 1 of the busy lake above: a pipeline finds its id in its dataset's commit-id
    index (a fold larger than the window moved the root's window past it), and its swap
    recording that refusal loses the race to another writer's. On the root it reads next,
    nothing shows why it was refused: the window holds no record of the id, and the index
    lookup is not due again (the window covers every version since it looked). Before, the
    writer failed at once and a later fold applied its intent ("refused commit is in the
    registry"); a writer that forgot its refusal on the redrive applied the id a second
    time in its dataset. Now it keeps its refusal until a swap records it."""
    config = replace(FOLDS_PAST_THE_WINDOW, seed=1)
    assert simulate(config).violations == []
    monkeypatch.setattr(_decide, "refused_unrecorded", lambda *_: False)
    violations = simulate(config).violations
    assert any("refused commit is in the registry" in v for v in violations), violations[:3]
