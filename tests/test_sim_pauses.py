"""The simulator's paused writers (``--pauses``, :attr:`Faults.pauses`): a process starved of
CPU, paused between steps of its own code, and what the run counts of it (intents that
landed passed over, :attr:`SimResult.passed_over`).

On 64 real processes of 2 cores, a commit's steps between being made ready and its intent's
PUT took seconds; when the key took the time of the commit's call, the intent landed below
the watermark other folds had moved meanwhile, and its writer, folding alone, gave up
(decision 0062). These runs show the simulator would have caught it.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Generator
from contextlib import redirect_stdout
from random import Random
from typing import Any

import orjson
import pytest

from lakelock._registry._core import Committer
from lakelock._registry._core._requests import Get, Now
from lakelock._registry._document import REGISTRY_KEY
from lakelock._sim._faults import Faults
from lakelock._sim._latency import profile
from lakelock._sim._loop import Endpoint, Loop, Process, StoreRetry
from lakelock._sim._run import SimConfig, simulate
from lakelock._sim._store import SimS3
from lakelock._sim._workload import Mix
from lakelock.cli import main
from lakelock.errors import NotFoundError

Steps = Generator[Any, Any, Any]

#: A burst of 64 writers appending 5 times each, as the real processes did; 64 pauses of
#: 2 to 5 s (past the watermark's lag of 1 s, well within the intent TTL) fall on writers at
#: random over its first seconds, each as the answer to the writer's next read of the root
#: arrives. With an intent's key made at its commit's call, seeds 1 and 2 land 5 and 4
#: intents passed over (decision 0062's figures).
PAUSED = SimConfig(
    writers=64,
    seconds=4.0,
    seed=1,
    commits=5,
    mix=Mix.of([("append", 1.0)]),
    faults=Faults(pauses=64),
)


def _clock_after_a_root_read(paused: float | None) -> float:
    """What a lone process's monotonic clock (virtual seconds) reads once its read of the
    root was answered, paused for ``paused`` seconds (``None``: never)."""
    loop = Loop()
    store = SimS3(profile("fixed:10"), Random(1), tracked=frozenset({REGISTRY_KEY}))
    endpoint = Endpoint(loop, store, Random(2), Faults(), StoreRetry(), root_key=REGISTRY_KEY)
    seen: list[float] = []

    def program() -> Steps:
        with contextlib.suppress(NotFoundError):  # no root yet: answered all the same
            yield Get(REGISTRY_KEY)
        seen.append((yield Now(monotonic=True)))

    process = Process(loop, endpoint, program(), kind="writer")
    if paused is not None:
        process.pause(paused)
    process.start(0.0)
    loop.run(100.0)
    return seen[0]


def test_a_paused_process_runs_on_the_root_it_read_only_after_the_pause() -> None:
    """The pause comes between the answer and the code that runs on it: what the process
    does next, the clock it reads included, is as late as the pause (a stall, by contrast,
    comes after that code, just before the send)."""
    assert _clock_after_a_root_read(3.0) == pytest.approx(_clock_after_a_root_read(None) + 3.0)
    assert _clock_after_a_root_read(0.0) == pytest.approx(_clock_after_a_root_read(None))


def test_paused_writers_land_no_intent_passed_over() -> None:
    """With an intent's key made as its PUT goes out (decision 0062), a writer paused after
    reading the root sends an intent that sorts above the watermark: every fold lists it,
    no commit gives up, nothing lands passed over."""
    result = simulate(PAUSED)
    assert result.violations == []
    assert result.metrics.gave_up == 0
    assert result.passed_over == []


def test_keys_made_at_the_commits_call_are_caught_landing_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decision 0062's rule switched off (``Committer.made_now`` keeps the key of the
    commit's call): a writer paused between making its commit ready and sending its
    intent lands it at or below the watermark others moved meanwhile (FORMAT.md rule 5),
    for it alone to fold. The run counts it."""
    monkeypatch.setattr(Committer, "made_now", lambda *_, **__: None)
    result = simulate(PAUSED)
    assert len(result.passed_over) >= 3, result.passed_over


def test_a_run_with_pauses_says_so_and_counts_what_landed_passed_over() -> None:
    faults = Faults(pauses=3, pause=(1.5, 2.5))
    assert "--pauses 3 --pause 1.5:2.5" in SimConfig(faults=faults).replay_command()
    assert "--pause " not in SimConfig(faults=Faults(pauses=3)).replay_command()
    args = ["simulate", "--writers", "4", "--seconds", "2", "--seed", "1", "--no-progress"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*args, "--pauses", "2", "--json"]) == 0
    assert orjson.loads(out.getvalue())["passed_over"] == 0
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*args, "--json"]) == 0
    assert "passed_over" not in orjson.loads(out.getvalue())  # without pauses: as before


def test_pause_lengths_without_pauses_or_backwards_are_refused() -> None:
    with pytest.raises(ValueError, match="shortest <= longest"):
        Faults(pauses=1, pause=(3.0, 1.0))
    with pytest.raises(ValueError, match="must be >= 0"):
        Faults(pauses=-1)
    assert main(["simulate", "--seconds", "1", "--pause", "1:3"]) == 1
    assert main(["simulate", "--seconds", "1", "--pauses", "1", "--pause", "3:1"]) == 2
