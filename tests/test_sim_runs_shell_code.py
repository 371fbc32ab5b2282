"""The simulator runs the shell's own scheduling code, not a copy of it: hedging
(``_core/_hedging.Race``), reads made ahead (``_core/_early.ReadsAhead``) and group commit
with its lingering (``_registry/_group.GroupCommit``). Each test changes one decision of the
shell's code and shows the simulation follow, so a simulator that drifted back to a copy of
its own fails here."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from random import Random
from typing import Any

import pytest

from lakelock._registry._commit import CommitQueue
from lakelock._registry._core import Committer, Driver
from lakelock._registry._core._early import ReadsAhead
from lakelock._registry._core._hedging import Hedging, Race
from lakelock._registry._core._requests import Ahead, Get, Now, Parallel, Request, Steps
from lakelock._registry._document import REGISTRY_KEY
from lakelock._registry._group import GroupCommit
from lakelock._sim._faults import Faults
from lakelock._sim._loop import Endpoint, Loop, Process, StoreRetry
from lakelock._sim._run import SimConfig, simulate
from lakelock._sim._store import SimS3
from lakelock._sim._workload import Mix
from tests._support.hedging import tailed, warmed

#: Writers that pause between commits, so a folder lingers after its commit and its next
#: commit comes while that fold runs (tests/test_simulator.py's lingering runs).
LINGERING = SimConfig(writers=8, seconds=3.0, store="s3-express", seed=5, think=0.3)


def gets_sent(requests: Sequence[Request], hedging: Hedging | None = None) -> int:
    """How many GETs one simulated process sends for ``requests``, one after another."""
    loop = Loop()
    sim = SimS3(tailed(), Random(1), tracked=frozenset({REGISTRY_KEY}))
    endpoint = Endpoint(loop, sim, Random(2), Faults(), StoreRetry(), root_key=REGISTRY_KEY)
    for n in range(20):
        sim.put(f"k{n}", f"body {n}".encode(), 0.0, create=True)

    def program() -> Steps:
        answers = []  # each answer taken, as the core takes them
        for request in requests:
            answers.append((yield request))
        yield Now()
        return answers

    outcome: list[Any] = []

    def done(result: Any, error: BaseException | None) -> None:
        outcome.append(error if error is not None else result)

    Process(loop, endpoint, program(), kind="writer", hedging=hedging, done=done).start(1.0)
    loop.run(100.0)
    ((answers,),) = (outcome,)
    assert not isinstance(answers, BaseException)
    return endpoint.counts.requests["writer:GetObject"]


def test_the_simulator_hedges_when_the_drivers_race_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow read of a batch goes twice in the simulator because ``Race.hedge`` (what the
    driver's threads ask) says so: with it saying never, every read goes once."""
    reads = [Parallel(tuple(Get(f"k{n}") for n in range(20)))]
    assert gets_sent(reads, warmed(2.0)) > 20
    monkeypatch.setattr(Race, "hedge", lambda self: False)
    assert gets_sent(reads, warmed(2.0)) == 20


def test_the_simulator_answers_from_reads_ahead_as_the_driver_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read made ahead answers the next equal request in the simulator through
    ``ReadsAhead.claim`` (the driver's): with it finding none, the read is sent again."""
    requests: list[Request] = [Ahead((Get("k1"), Get("k2")), seconds=5.0), Get("k1"), Get("k2")]
    assert gets_sent(requests) == 2
    monkeypatch.setattr(ReadsAhead, "claim", lambda self, request, now: None)
    assert gets_sent(requests) == 4


def lingering_swaps(config: SimConfig) -> int:
    """Root swaps made by processes lingering after their commit, in a clean run."""
    rows: list[dict[str, Any]] = []
    result = simulate(config, trace=rows.append)
    assert result.violations == []
    return sum(
        1
        for t in rows
        if "(lingering)" in t["process"]
        and t["key"] == REGISTRY_KEY
        and t["operation"] == "PutObject"
        and t["answer"] == "ok"
    )


def test_the_simulator_lingers_when_the_shells_group_commit_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A simulated writer folds for others after its commit when ``GroupCommit`` (what
    ``CommitQueue`` runs) keeps the turn for it: with it never doing so, nobody lingers."""
    assert lingering_swaps(LINGERING) > 0
    monkeypatch.setattr(GroupCommit, "_lingers", lambda self: False)
    assert lingering_swaps(LINGERING) == 0


def test_a_simulated_commit_arriving_while_its_process_lingers_sends_its_intent_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As in a ``Registry``: a commit made while its process's lingering fold holds the turn
    creates its intent at once (others may fold it meanwhile) and waits for the fold's round;
    the simulator's own copy of group commit waited without sending it. Appends only: each
    early intent is an append's."""
    sent: list[int] = []
    send = Committer.send

    def counted(self: Committer, pending: Any) -> Steps:
        sent.append(len(pending))
        return send(self, pending)

    monkeypatch.setattr(Committer, "send", counted)
    config = dataclasses.replace(LINGERING, mix=Mix.of([("append", 1.0)]))
    assert lingering_swaps(config) > 0
    assert sent
    assert set(sent) == {1}


def test_the_shells_commit_queue_takes_turns_through_group_commit() -> None:
    """``CommitQueue`` (a ``Registry``'s threads) holds the ``GroupCommit`` the simulator's
    writers run (the tests above), which the committer asks whether a commit of its process
    is queued and which intents are its own."""
    committer = Committer(rng=Random(0))
    queue = CommitQueue(committer, Driver(None, None), group_commit=True, max_batch=4)  # type: ignore[arg-type]
    assert type(queue.group) is GroupCommit
    assert committer.queued == queue.group.has_queued
    assert committer.own == queue.group.own_intents
