"""One simulated run: writers, readers and faults against the simulated bucket, then the
checker and the metrics. :func:`simulate` is a pure function of its :class:`SimConfig`."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import hashlib
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from random import Random
from typing import Any

from lakelock._datafile import DataFile
from lakelock._registry._batch import CommitResult
from lakelock._registry._changes import _replaced
from lakelock._registry._core import Committer
from lakelock._registry._core._driver import Hedging
from lakelock._registry._core._io import read_root
from lakelock._registry._core._requests import Get, Now, Parallel, Put, Sleep, Steps
from lakelock._registry._core._written import with_write_times
from lakelock._registry._document import REGISTRY_KEY
from lakelock._registry._group import GroupCommit, TurnSteps
from lakelock._registry._settings import DEFAULT_FLOOR
from lakelock._retry import Load
from lakelock._s3._types import PutResult
from lakelock._sim import _ops
from lakelock._sim._check import Observation, check
from lakelock._sim._faults import Brownout, Faults
from lakelock._sim._latency import Profile, profile
from lakelock._sim._loop import Endpoint, Loop, Process, StoreRetry, Turns
from lakelock._sim._protocols import SimProtocol, _Reader, passed_over, protocol_named
from lakelock._sim._store import BUCKET, SimS3
from lakelock._sim._vacuum import VacuumRun, vacuum_problems, vacuum_program
from lakelock._sim._workload import Invocation, Mix, Shared, Workload
from lakelock.errors import (
    AlreadyExistsError,
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
    InvalidArgumentError,
    LakelockError,
    NotFoundError,
    RetryBudgetExhaustedError,
    SchemaMismatchError,
    StorageError,
)

__all__ = ["Metrics", "SimConfig", "SimResult", "simulate"]

#: The kinds of commit whose killed run a restart may run again with other rows.
RERUN_OTHER_ROWS = frozenset({"append", "overwrite", "multi", "collide"})
#: The most commits one batch of a writer process carries: the ``Registry``'s default
#: (a simulated writer commits one at a time, so its batches are of one commit, or none).
MAX_BATCH = 256
#: The garbage collector's thresholds while a run goes on (``gc.set_threshold``): a run
#: allocates millions of short-lived objects (an exception per lost race and retry, a copy
#: of the root per commit applied) next to hundreds of thousands of long-lived ones (every
#: process's cache of parsed objects), and Python's default (a young collection every 700
#: allocations, each older one scanning that whole long-lived heap) spent a third of a
#: 256-writer run's CPU collecting. Nothing in a run depends on when garbage is collected:
#: no finalizer feeds back into it (a process's generator runs to its end or is closed when
#: it is killed, at a moment of the run's own).
GC_THRESHOLDS = (50_000, 20, 20)
#: A run's warm-up lasts until this share of its writers (rounded up: all of them below ten)
#: have ended their first commit. Every writer starts its first commit in the run's first
#: tenth of a second, cold (no root read yet, nothing learnt about rounds), so those commits
#: race in a burst no later second has; once nine writers in ten have been through one, the
#: burst is over. Not all of them: the last first commit may be one the protocol makes slow
#: whenever it comes (a commit spanning datasets waited 22 s at 64 writers in the default
#: mix while the other 63 had ended theirs by 0.7 s) — a steady state has those too, and
#: waiting for it would leave seconds of the steady state out.
WARMUP_WRITERS = 0.9
#: The longest warm-up a run leaves out of its figures: this share of its seconds, in whole
#: seconds (a run shorter than four seconds is all start-up, and is measured whole).
WARMUP_SHARE = 0.25
#: A run is back from a brownout when one whole second's commits reach this share of its
#: mean before the brownout: one second, since a steady run's seconds spread by about a
#: tenth around their mean already (a rule of several seconds in a row would wait out
#: noise, not the brownout).
RECOVERED = 0.9
#: The writer index of the process that made the lake before a quiet start
#: (:attr:`SimConfig.quiet_before`): none of the run's writers.
MAKER = -1


@dataclass(frozen=True)
class SimConfig:
    """Everything a run depends on. ``seconds``: how long writers start commits (commits
    under way then finish, up to ``drain`` more seconds); ``faults``: what goes wrong
    (:class:`~._faults.Faults`); ``protocol``: ``core`` (the commit core) or ``toy``."""

    writers: int = 4
    seconds: float = 10.0
    store: str = "s3-standard"
    seed: int = 0
    faults: Faults = field(default_factory=Faults)
    readers: int = 0
    datasets: int = 2
    partitions: int = 4
    files: int = 1
    file_bytes: int = 256
    mix: Mix = field(default_factory=Mix)
    think: float = 0.0
    intent_ttl: float = 600.0
    commit_window: int = 100
    max_attempts: int = 50
    max_seconds: float = 300.0
    store_retry: StoreRetry = field(default_factory=StoreRetry)
    restart_delay: float = 0.5
    drain: float = 900.0
    #: Each writer makes this many commits and stops (0: as many as ``seconds`` allows);
    #: figures are then per the time until the last one was acknowledged.
    commits: int = 0
    #: Writers start their first commit at random over this many seconds (a burst of
    #: processes that a loaded machine starts one after another: a longer span).
    start_over: float = 0.1
    #: Each writer reads the root this many seconds before its first commit, as a process
    #: that opened its lake and waits for the go (0: it starts cold, no root read).
    opened: float = 0.0
    #: The lake was made, and last committed to, this many seconds before the writers start
    #: (:meth:`_Run.make_lake`): they start on a lake quiet that long, as pipelines started
    #: on a lake made earlier do. 0: no lake yet, the writers' first commits make it.
    quiet_before: float = 0.0
    #: CPU seconds per request on a machine of ``cores`` cores all processes share (the
    #: endpoint included): to compare with a run on one machine. 0: CPU is free (S3).
    cpu: float = 0.0
    cores: int = 0
    #: CPU seconds each writer process spends on its first commit beyond its requests' (a
    #: cold process: its first parquet write, its caches filled), on one of those ``cores``
    #: before its first request: what a burst of processes starting on one machine pays.
    first_cpu: float = 0.0
    #: Of ``cpu``, the seconds the endpoint spends on each request, in a process of its own
    #: on the same ``cores`` that serves one request at a time (0: every request's CPU on
    #: any free core, the endpoint's with it). The embedded endpoint is one Python process,
    #: a thread a connection, one interpreter lock: 64 client processes were served 4-17 %
    #: fewer requests/s than 16 in each of six pairs on a shared 2-core machine
    #: (``benchmarks/bench_endpoint.py``, decision 0064), its CPU a request 4.1-5.8 ms at 16
    #: clients and 4.8-6.6 ms at 64.
    endpoint_cpu: float = 0.0
    #: How much the endpoint's CPU a request grows for each request waiting at it when it
    #: arrives (its threads contending for the interpreter): ``endpoint_cpu`` times ``1 +
    #: endpoint_crowding * waiting``. The measured 13-33 % more CPU a request with ~61
    #: requests waiting (64 clients) than with ~13 (16) is 0.003 to 0.008, 0.004 on average.
    endpoint_crowding: float = 0.0
    protocol: str = "core"
    #: Fields of the core's ``FoldPolicy`` to change (liveness only: no value of them may
    #: break a guarantee, which the sweep checks with random ones).
    policy: tuple[tuple[str, float], ...] = ()
    #: Vacuum processes (lakelock's vacuum, :mod:`._vacuum`): each vacuums about every
    #: ``vacuum_every`` seconds with ``older_than=vacuum_older_than`` (no retention check,
    #: as ``enforce_retention=False``) and deletes, until ``vacuum_older_than`` past the end.
    #: The store ignores ListObjectsV2's ``StartAfter``: every LIST starts at its prefix (a
    #: store without it, such as S3 Express One Zone's directory buckets; ``lakelock doctor``
    #: refuses one). The core must fold only above the watermark whatever it is shown.
    ignores_start_after: bool = False
    vacuums: int = 0
    vacuum_every: float = 0.5
    vacuum_older_than: float = 1.0
    #: The registry's retention (seconds) the writers' core is given; ``None``: vacuum's
    #: window when vacuum runs (vacuum's default ``older_than`` is the retention: restores
    #: then keep to it, FORMAT.md rule 9), else seven days.
    retention: float | None = None
    #: The lake's retention shrinks mid-run (``None``: it stays): an administrator process
    #: stores this retention (seconds) by ``configure`` as the run starts and, a third of the
    #: way through, shrinks it to ``vacuum_older_than`` by another. Writers are given no
    #: retention (they use the lake's, as restores judge theirs), and each vacuum takes the
    #: root's retention as its window (vacuum's default): restores planned under the longer
    #: retention meet vacuum at the shorter (FORMAT.md rule 9).
    shrink_retention_from: float | None = None
    #: With ``shrink_retention_from``: this many seconds after the shrink, the administrator
    #: stores the longer retention again (``None``: it stays short). Vacuum then keeps
    #: versions that long again, but what it deleted under the short one stays deleted: a
    #: restore applied under the grown retention must be judged by the vacuum the root
    #: records (FORMAT.md rule 9, ``_decide.vacuum_horizon``).
    grow_retention_after: float | None = None
    #: Count the start-up in the figures too (by default they are the steady state past it:
    #: :meth:`_Run.warmup`). A run of ``commits`` per writer is measured whole anyway.
    include_warmup: bool = False

    @property
    def writers_retention(self) -> float:
        if self.retention is not None:
            return self.retention
        if self.shrink_retention_from is not None:
            return self.shrink_retention_from
        return self.vacuum_older_than if self.vacuums else 7 * 24 * 3600.0

    @property
    def given_retention(self) -> float | None:
        """The retention the writers' core is given (``None``: the lake's)."""
        return None if self.shrink_retention_from is not None else self.writers_retention

    def __post_init__(self) -> None:
        if self.writers < 1:
            raise ValueError(f"need at least one writer, got {self.writers}")
        if not (self.seconds > 0 and math.isfinite(self.seconds)):
            raise ValueError(f"seconds must be > 0, got {self.seconds}")
        if self.start_over < 0 or self.opened < 0:
            raise ValueError("start_over and opened must be >= 0")
        if not 0 <= self.first_cpu < math.inf:
            raise ValueError(f"first_cpu must be >= 0 seconds, got {self.first_cpu}")
        if not 0 <= self.endpoint_cpu <= self.cpu:
            raise ValueError(
                f"endpoint_cpu must be within cpu (0 to {self.cpu} seconds), "
                f"got {self.endpoint_cpu}"
            )
        if not 0 <= self.endpoint_crowding < math.inf:
            raise ValueError(f"endpoint_crowding must be >= 0, got {self.endpoint_crowding}")
        if self.endpoint_crowding and not self.endpoint_cpu:
            raise ValueError("endpoint_crowding needs endpoint_cpu (the CPU it grows)")
        if not 0 <= self.quiet_before < math.inf:
            raise ValueError(f"quiet_before must be >= 0 seconds, got {self.quiet_before}")
        if self.readers < 0 or self.think < 0 or self.intent_ttl <= 0:
            raise ValueError("readers and think must be >= 0, intent_ttl > 0")
        if self.vacuums < 0 or self.vacuum_every <= 0 or self.vacuum_older_than < 0:
            raise ValueError("vacuums and vacuum_older_than must be >= 0, vacuum_every > 0")
        if self.vacuums and self.protocol != "core":
            raise ValueError("vacuum runs with the core protocol only")
        if self.shrink_retention_from is not None and not (
            self.vacuums
            and self.retention is None
            and self.shrink_retention_from > self.vacuum_older_than
        ):
            raise ValueError(
                "shrink_retention_from needs vacuum, no retention given, and a retention "
                "longer than vacuum_older_than"
            )
        if self.grow_retention_after is not None and not (
            self.shrink_retention_from is not None and self.grow_retention_after >= 0
        ):
            raise ValueError("grow_retention_after needs shrink_retention_from, and >= 0")
        profile(self.store)  # a clear error for an unknown store, up front
        protocol_named(self.protocol, dict(self.policy))  # and for an unknown policy field

    def replay_command(self) -> str:
        """The ``lakelock simulate`` command that runs this configuration again (the options
        the command has; the rest at their defaults)."""
        parts = [
            "lakelock simulate",
            f"--writers {self.writers}",
            f"--seconds {self.seconds:g}",
            f"--store {self.store}",
            f"--seed {self.seed}",
        ]
        if self.faults.rate:
            parts.append(f"--faults {self.faults.rate:g}")
            if mix := self.faults.mix_options():
                parts.append(mix)
        processes = (
            ("kills", self.faults.kills),
            ("stalls", self.faults.stalls),
            ("swap-stalls", self.faults.swap_stalls),
            ("rerun-stalls", self.faults.rerun_stalls),
        )
        parts += [f"--{name} {count}" for name, count in processes if count]
        if pauses := self.faults.pause_options():
            parts.append(pauses)
        if self.faults.skew:
            parts.append(f"--skew {self.faults.skew:g}")
        if self.faults.steps:
            parts.append(f"--clock-steps {self.faults.steps}")
        if self.faults.brownout is not None:
            parts.append(self.faults.brownout.option())
        if self.readers:
            parts.append(f"--readers {self.readers}")
        if self.commits:
            parts.append(f"--commits {self.commits}")
        starts = (
            ("think", self.think, 0.0),
            ("start-over", self.start_over, 0.1),
            ("opened", self.opened, 0.0),
            ("quiet-before", self.quiet_before, 0.0),
        )
        parts += [f"--{name} {value:g}" for name, value, default in starts if value != default]
        if self.cpu and self.cores:
            parts.append(f"--cpu-ms {self.cpu * 1000:g} --cores {self.cores}")
            if self.endpoint_cpu:
                parts.append(f"--endpoint-cpu-ms {self.endpoint_cpu * 1000:g}")
            if self.endpoint_crowding:
                parts.append(f"--endpoint-crowding {self.endpoint_crowding:g}")
        if self.first_cpu and self.cores:
            parts.append(f"--first-cpu-ms {self.first_cpu * 1000:g}")
            if not self.cpu:
                parts.append(f"--cores {self.cores}")
        if self.max_attempts != 50 or self.max_seconds != 300.0:
            parts.append(f"--max-attempts {self.max_attempts} --max-seconds {self.max_seconds:g}")
        if self.intent_ttl != 600.0:
            parts.append(f"--intent-ttl {self.intent_ttl:g}")
        if self.commit_window != 100:
            parts.append(f"--commit-window {self.commit_window}")
        if self.protocol != "core":
            parts.append(f"--protocol {self.protocol}")
        parts += [f"--policy {name}={value:g}" for name, value in self.policy]
        if self.mix != Mix():
            parts.append(self.mix.options())
        if self.ignores_start_after:
            parts.append("--ignores-start-after")
        if self.include_warmup:
            parts.append("--include-warmup")
        if self.vacuums:
            parts.append(
                f"--vacuums {self.vacuums} --vacuum-every {self.vacuum_every:g} "
                f"--vacuum-older-than {self.vacuum_older_than:g}"
            )
        return " ".join(parts)


@dataclass(frozen=True)
class Metrics:
    """A run's figures, in virtual time (docs/SIMULATOR.md, "Reading the output")."""

    writers: int
    seconds: float
    store: str
    seed: int
    commits: int
    commits_per_second: float
    #: Virtual seconds the figures are per: ``seconds``, or until the last commit ended.
    makespan: float
    p50_ms: float
    p99_ms: float
    requests_per_commit: float
    bytes_per_commit: float
    commits_per_cas: float
    root_swaps: int
    largest_fold: int
    throttled: int
    faults_injected: int
    failed: int
    gave_up: int
    unknown: int
    killed: int
    violations: int
    bound_commits_per_second: float
    bound_cas: float
    bound_latency: float
    requests: dict[str, int]
    #: Writers' requests per commit, per operation and part of the lake.
    areas: dict[str, float]
    trace: str
    #: Vacuum runs made, objects they deleted, and objects writers committed later than the
    #: vacuum window after writing them (a window too short for the run: docs/SIMULATOR.md).
    vacuum_runs: int = 0
    vacuum_deleted: int = 0
    vacuum_late: int = 0
    #: Virtual seconds at the start the figures above leave out (the start-up: 0 when it is
    #: counted), and the commits acknowledged in them.
    warmup: float = 0.0
    warmup_commits: int = 0
    #: Per whole virtual second of the run, warm-up included: commits acknowledged in it,
    #: their p99 latency, and writers' requests sent in it.
    commits_by_second: list[int] = field(default_factory=list)
    p99_ms_by_second: list[float] = field(default_factory=list)
    requests_by_second: list[int] = field(default_factory=list)
    #: Commits not acknowledged, by outcome (``failed``, ``gave_up``, ``unknown``) and the
    #: error each raised (``data PUT <error>``: its data never reached the store).
    unacknowledged: dict[str, dict[str, int]] = field(default_factory=dict)
    #: With a brownout: the mean commits per second in the steady seconds before it, and how
    #: many seconds after its end the first whole second reached :data:`RECOVERED` of that
    #: mean (``None``: none did before the run's end).
    brownout_before: float = 0.0
    brownout_recovered_s: float | None = None
    #: Writers' retries (their store layer's and their commit loops'), each drawn on their
    #: process's retry budget, and the pace decreases 503s made (:class:`lakelock._retry.Load`).
    retries: int = 0
    slowdowns: int = 0
    #: The root's compare-and-swaps answered 409, by why (:class:`._loop.Counts`).
    root_conflicts: dict[str, int] = field(default_factory=dict)
    #: Writers' requests a fault was injected in, by the fault they were answered with and
    #: part of the lake (as ``areas``; counts, not per commit).
    faults: dict[str, dict[str, int]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SimResult:
    config: SimConfig
    metrics: Metrics
    violations: list[str]
    invocations: list[Invocation]
    observations: list[Observation]
    store: SimS3
    events: int
    #: Every vacuum the vacuum processes made (``vacuums``).
    vacuum_runs: list[VacuumRun] = field(default_factory=list)
    #: Every step of a writer's clock: (virtual time, the process, its new offset).
    clock_steps: list[tuple[float, str, float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def passed_over(self) -> list[str]:
        """The intents that landed passed over, at or below the watermark of the root in
        place when their first PUT took effect, with no fate in it
        (:func:`._protocols.passed_over`)."""
        return passed_over(self.store)


class _Writer:
    """One simulated writer process (restarted as a new one after a kill)."""

    def __init__(self, run: _Run, index: int) -> None:
        self.run = run
        self.index = index
        self.rng = Random(run.master.getrandbits(64))
        faults = run.config.faults
        self.skew = self.rng.uniform(-faults.skew, faults.skew) if faults.skew else 0.0
        self.workload = Workload(
            index,
            self.rng,
            datasets=run.config.datasets,
            partitions=run.config.partitions,
            files=run.config.files,
            file_bytes=run.config.file_bytes,
            mix=run.config.mix,
            restores=run.protocol.restores,
            full_api=run.protocol.full_api,
            shared=run.shared,
        )
        self.current: Invocation | None = None
        self.process: Process | None = None
        #: The process's threads folding for others after its commits (``Committer.linger``;
        #: one that waits for its caller to be away may outlive the next commit).
        self.lingerers: list[Process] = []
        #: How long its next restart stalls after looking its commit id up (``rerun_stalls``).
        self.rerun_stall: float | None = None

    def start(
        self, at: float, redo: Invocation | None = None, *, dead: Process | None = None
    ) -> None:
        committer = self.run.protocol.committer(Random(self.rng.getrandbits(64)), self.run.config)
        loop = self.run.loop
        #: The process's group commit, the shell's own (``CommitQueue``'s): its turns (a
        #: commit waits for the lingering fold's round), whose intents go early, when it
        #: lingers. The toy protocol commits on its own.
        self.turns = Turns(loop)
        self.group: GroupCommit | None = None
        if isinstance(committer, Committer):
            self.group = GroupCommit(committer, max_batch=MAX_BATCH)
            self.group.released = self.turns.released
        #: The process's retry budget and pace (its store layer's and its core's, as a
        #: Registry shares its store's), on the virtual clock, anew on a restart.
        self.load = Load(clock=lambda: loop.now)
        if self.index != MAKER:  # the making is not the run's
            self.run.loads.append(self.load)
        if hasattr(committer, "load"):
            committer.load = self.load
        self.lingerers = []
        policy = getattr(committer, "policy", None)
        schedule = getattr(committer, "schedule", None)
        factor, alone = getattr(policy, "hedge", 0.0), getattr(schedule, "hedge_alone", True)
        #: The process's hedged reads (its lingering thread's too), learnt anew on a restart.
        self.hedging = Hedging(factor, alone=alone) if factor else None
        self.current = redo  # killed again before it begins, it is still to be redone
        stall, self.rerun_stall = self.rerun_stall, None
        if dead is None or dead.in_flight is None:
            stall = None  # killed otherwise (``kills``) before it sent an intent
        if stall is not None:
            # Its clock ahead by more than the stall (the re-run on another host): no fold
            # passes its intent over while it waits, so only its second look at the id
            # (rule 2's past_the_window) finds the killed run's intent applied.
            self.skew += 2 * stall
        self.process = Process(
            self.run.loop,
            self.run.endpoint,
            self._make(committer) if self.index == MAKER else self._program(committer, redo),
            kind="writer",
            name="lake maker"
            if self.index == MAKER
            else f"writer {self.index}" + (f" (restart {redo.restarts})" if redo else ""),
            skew=self.skew,
            done=self._done,
            killed=self._killed,
            hedging=self.hedging,
            load=self.load,
            turns=self.turns,
        )
        if stall is not None:
            self.process.stall_before_intents(stall, landing=dead)
        self.process.start(at)

    def _program(self, committer: Any, redo: Invocation | None) -> TurnSteps[None]:
        run = self.run
        if run.config.first_cpu:
            yield Sleep(run.endpoint.work(run.config.first_cpu) - run.loop.now)
        if redo is not None:
            yield from self._commit(committer, redo, redo=True)
        elif run.config.opened and isinstance(committer, Committer):
            with contextlib.suppress(LakelockError):
                yield from read_root(committer)
            yield Sleep(run.config.opened)
        made = 0
        limit = run.config.commits
        while (made < limit) if limit else (run.loop.now < run.end):
            made += 1
            kind = self.workload.choose()
            now: float = yield Now()
            if kind == "restore":
                invocation = yield from self._restore(now)
            else:
                invocation = self.workload.build(kind, now, run.loop.now)
            while invocation is not None:  # a takeover, then the commit it was made for
                run.invocations.append(invocation)
                if self._id_taken(committer, invocation):
                    yield from self._commit(committer, invocation)
                invocation = self.workload.then(invocation)
            if run.config.think:
                yield Sleep(self.rng.expovariate(1.0 / run.config.think))

    def _make(self, committer: Any) -> TurnSteps[None]:
        """The program of the process that makes the lake (:meth:`_Run.make_lake`)."""
        now: float = yield Now()
        made = self.workload.made(now, self.run.loop.now)
        self.run.made.append(made)
        yield from self._commit(committer, made)

    def _restore(self, now: float) -> Steps:
        """A restore of one dataset to a version it had (read without cost: the caller found
        it in ``lake.history``)."""
        run = self.run
        dataset = self.rng.choice(self.workload.names)
        found = run.protocol.older_state(
            run.store, dataset, self.rng, now=now, retention=run.config.writers_retention
        )
        if found is None:
            return self.workload.build("append", now, run.loop.now)
        state, version, until, since = found
        # A reader of the history reads the root and the dataset's snapshot.
        yield Get(REGISTRY_KEY)
        return self.workload.restore(
            now, run.loop.now, dataset, state, version, until=until, since=since
        )

    def _commit(
        self, committer: Any, invocation: Invocation, *, redo: bool = False
    ) -> TurnSteps[None]:
        run = self.run
        self.current = invocation
        if self.process is not None:
            self.process.intents_sent = []  # this commit's own, should its process die
        if invocation.data:
            # The PUT's duration by the monotonic clock, as a Lake's write measures it.
            sent: float = yield Now(monotonic=True)
            answers = yield Parallel(
                tuple(Put(key, body, create=True) for key, body in invocation.data)
            )
            took = (yield Now(monotonic=True)) - sent
            taken = yield from _taken(invocation, answers, redo=redo)
            failed = [
                a
                for (k, _), a in zip(invocation.data, answers, strict=True)
                if isinstance(a, BaseException)
                and not (k in taken and isinstance(a, AlreadyExistsError))
            ]
            if failed:
                invocation.end = run.loop.now
                invocation.outcome = "fail"
                invocation.error = f"data PUT: {type(failed[0]).__name__}: {failed[0]}"
                self.current = None
                return
            gone = [key for key in invocation.sources if key not in run.store.objects]
            if gone:
                # A copy of a file vacuum took once the version read was replaced: the
                # store answers the copy NoSuchKey, and the copy is refused whole.
                source = invocation.changes[-1].dataset
                self._settle(invocation, None, _ops.copy_refused(gone[0], source))
                return
            # A restarted run whose killed run's PUT landed finds its file there: it
            # registers that file, written before, as registry.commit does.
            found = {
                k
                for (k, _), a in zip(invocation.data, answers, strict=True)
                if isinstance(a, AlreadyExistsError)
            }
            invocation.data = ()
            invocation.changes = _existing(_written(invocation.changes, answers, took), found)
        if not (yield from self._files_fit(committer, invocation)):
            return
        try:
            # What registry.commit does before it prepares a commit of files written
            # earlier: their write times looked up (FORMAT.md rule 10).
            looked: list[Any] = yield from with_write_times(invocation.changes, bucket=BUCKET)
        except StorageError as error:
            invocation.end = run.loop.now
            invocation.outcome = "fail"
            invocation.error = f"write times: {_describe(error)}"
            invocation.error_type = type(error).__name__
            self.current = None
            return
        now: float = yield Now()
        monotonic: float = yield Now(monotonic=True)
        if isinstance(committer, Committer) and _ops.commits_nothing(invocation.changes):
            yield from self._nothing(committer, invocation)
            return
        try:
            changes = looked
            if redo:
                # A restarted run passes the id its killed run made up: the caller chose it
                # now, and the killed run's intent may carry it too.
                changes = [dataclasses.replace(c, generated_id=False) for c in changes]
            pending = committer.prepare(changes, now=now, monotonic=monotonic)
            if self.group is None:
                yield from committer.run([pending])
                lingers = False
            else:
                lingers = yield from self.group.commit(pending)
        except Exception as error:
            self._settle(invocation, None, error)
            return
        self._settle(invocation, getattr(pending, "result", None), getattr(pending, "error", None))
        if lingers:
            self._linger()

    def _id_taken(self, committer: Any, invocation: Invocation) -> bool:
        """Whether the commit id the caller chose is taken, as a ``CommitBuilder`` validates
        it before anything is written (one in another spelling than NFC refused: the call
        is settled), and its fences with it (a read grant's on a write refused:
        :func:`._ops.fenced_writes`)."""
        if not isinstance(committer, Committer):
            return True
        try:
            if invocation.explicit:
                _ops.checked_id(invocation.id)
            _ops.fenced_writes(invocation.changes)
        except InvalidArgumentError as error:
            self._settle(invocation, None, error)
            return False
        return True

    def _files_fit(self, committer: Any, invocation: Invocation) -> Steps:
        """Whether the commit goes on once its typed files (a worker's, written with their
        schema) are judged against the dataset, as ``CommitBuilder.commit`` judges them:
        its changes then declare the schema they were judged by; refused, nothing is
        committed (the call is settled), or, a re-run whose first run landed, the earlier
        commit is reported (settled ``already_committed``)."""
        if not isinstance(committer, Committer):
            return True
        try:
            fitted = yield from _ops.files_fit(committer, invocation.changes)
        except Exception as error:
            self._settle(invocation, None, error)
            return False
        if isinstance(fitted, CommitResult):  # a re-run whose first run landed: reported
            self._settle(invocation, fitted, None)
            return False
        invocation.changes = tuple(fitted)
        return True

    def _nothing(self, committer: Committer, invocation: Invocation) -> Steps:
        """A commit of nothing (an empty append, ``registry.commit`` of no files): checked
        like any other commit of its id, then nothing recorded (:mod:`._ops`)."""
        try:
            result = yield from _ops.nothing_committed(committer, invocation.changes)
        except Exception as error:
            self._settle(invocation, None, error)
        else:
            self._settle(invocation, result, None)

    def _linger(self) -> None:
        """Fold for other processes alongside this writer's next data PUT, as
        ``CommitQueue``'s daemon thread does (same process: same clock, killed with it)."""
        run = self.run
        assert self.group is not None
        lingerer = Process(
            run.loop,
            run.endpoint,
            self.group.linger(),
            kind="writer",
            name=f"writer {self.index} (lingering)",
            skew=self.skew,
            done=self._lingered,
            hedging=self.hedging,
            load=self.load,
            turns=self.turns,
        )
        self.lingerers = [p for p in self.lingerers if not p.finished] + [lingerer]
        lingerer.start(run.loop.now)

    def _lingered(self, result: Any, error: BaseException | None) -> None:
        if error is not None:
            self.run.crashes.append(f"writer {self.index} lingering: {_describe(error)}")

    def _settle(self, invocation: Invocation, result: Any, error: BaseException | None) -> None:
        run = self.run
        invocation.end = run.loop.now
        self.current = None
        if error is not None:
            invocation.error_type = type(error).__name__
            self.workload.refused(invocation, invocation.error_type)
        if result is not None and error is None:
            invocation.outcome = "ok"
            invocation.version = result.version
            invocation.already = bool(getattr(result, "already_committed", False))
            invocation.batch = int(getattr(result, "batch_size", 1))
            invocation.empty = bool(getattr(result, "empty", False))
            self.workload.acknowledged(invocation)
        elif isinstance(error, RetryBudgetExhaustedError):
            invocation.outcome, invocation.error = "gaveup", _describe(error)
        elif isinstance(error, CommitStateUnknownError):
            invocation.outcome, invocation.error = "unknown", _describe(error)
        elif isinstance(error, CommitConflictError | SchemaMismatchError | InvalidArgumentError):
            # Refused, nothing committed: a schema that does not fit, or a commit id that is
            # no id (refused before anything is written), is no conflict (retrying it cannot
            # help), but just as definite.
            invocation.outcome, invocation.error = "fail", _describe(error)
        elif isinstance(error, CommitError):
            invocation.outcome, invocation.error = "unknown", _describe(error)
        else:
            invocation.outcome = "crash"
            invocation.error = _describe(error) if error else "no result and no error"

    def _done(self, result: Any, error: BaseException | None) -> None:
        if error is not None:
            self.run.crashes.append(f"writer {self.index}: {_describe(error)}")
            if self.current is not None:
                self._settle(self.current, None, error)

    def _killed(self) -> None:
        run = self.run
        for lingerer in self.lingerers:
            lingerer.kill()
        redo = self.current
        self.current = None
        dead = self.process
        if redo is not None:
            redo.restarts += 1
            redo.outcome = "killed"
            if dead is not None:
                redo.killed_intents += tuple(dead.intents_sent)
            if run.protocol.full_api and redo.op in RERUN_OTHER_ROWS and self.rng.random() < 1 / 3:
                # The pipeline re-runs with the same commit id but other rows (its input
                # changed meanwhile): another change under the killed run's id.
                redo = self.workload.again(redo, run.loop.now + run.config.restart_delay)
                run.invocations.append(redo)
        self.start(run.loop.now + run.config.restart_delay, redo, dead=dead)


class _Run:
    def __init__(
        self,
        config: SimConfig,
        protocol: SimProtocol,
        progress: Callable[[int, int], None] | None = None,
        trace: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config
        self.progress = progress
        self.trace = trace
        self.protocol = protocol
        self.master = Random(config.seed)
        self.profile: Profile = profile(config.store)
        self.loop = Loop()
        self.store = SimS3(
            self.profile,
            Random(self.master.getrandbits(64)),
            tracked=frozenset({REGISTRY_KEY}),
            ignores_start_after=config.ignores_start_after,
            resolution=server_resolution(config),
        )
        self.endpoint = Endpoint(
            self.loop,
            self.store,
            Random(self.master.getrandbits(64)),
            in_flight_bounded(config),
            config.store_retry,
            root_key=REGISTRY_KEY,
            cpu=config.cpu,
            cores=config.cores,
            serving=config.endpoint_cpu if config.cores else 0.0,
            crowding=config.endpoint_crowding,
        )
        self.endpoint.trace = trace
        self.end = config.seconds
        self.invocations: list[Invocation] = []
        #: The commit that made the lake before a quiet start (:meth:`make_lake`): judged
        #: with the run's, left out of its figures.
        self.made: list[Invocation] = []
        self.observations: list[Observation] = []
        self.crashes: list[str] = []
        self.vacuum_runs: list[VacuumRun] = []
        self.vacuum_late = 0
        #: Every writer process's load control (restarts included), for the figures.
        self.loads: list[Load] = []
        self.writers: list[_Writer] = []
        self.clock_steps: list[tuple[float, str, float]] = []
        self.shared = Shared(
            files_of=self._files_of, exists=lambda name: self._files_of(name, None) is not None
        )

    def reader(self, index: int, rng: Random) -> Steps:
        while self.loop.now < self.end:
            start = self.loop.now
            try:
                data = yield Get(REGISTRY_KEY)
            except NotFoundError:
                version = 0
            except Exception:
                version = -1
            else:
                version = self.protocol.root_version(data.body)
                follow = self.protocol.follow(data.body, rng)
                if follow is not None:
                    with contextlib.suppress(Exception):
                        yield Get(follow)
            if version >= 0:
                self.observations.append(Observation(index, start, self.loop.now, version))
            yield Sleep(rng.uniform(0.05, 0.15))

    def _shrink_retention(self, admin: Any) -> Steps:
        """The administrator of :attr:`SimConfig.shrink_retention_from`: the lake's retention
        stored at the start, shrunk to vacuum's window a third of the way through, and grown
        back :attr:`SimConfig.grow_retention_after` later if given (a ``configure`` that
        fails, under faults, is left failed)."""
        config = self.config
        longer = config.shrink_retention_from
        assert longer is not None
        shrink = config.seconds / 3
        steps = [(0.0, longer), (shrink, config.vacuum_older_than)]
        if config.grow_retention_after is not None:
            steps.append((shrink + config.grow_retention_after, longer))
        for at, retention in steps:
            yield Sleep(max(0.0, at - self.loop.now))
            with contextlib.suppress(LakelockError):
                yield from admin.configure({"retention": retention})

    def make_lake(self) -> None:
        """Make the lake :attr:`SimConfig.quiet_before` seconds before the writers start
        (virtual time 0): a process of its own commits a file into every dataset, in one
        commit sent then; nothing commits after it until the writers do. The making draws no
        faults and is left out of the figures (its requests, its swap); the checker judges
        its commit with the others. The writers' first folds thus read a root their
        clocks say has not moved for that long (less the making's own round trips)."""
        config = self.config
        endpoint = self.endpoint
        self.loop.now = -config.quiet_before
        # The machine's cores (``cpu``) are free from then on, not from virtual time 0.
        endpoint.cores = [self.loop.now] * len(endpoint.cores)
        faults, endpoint.faults, endpoint.counting = endpoint.faults, Faults(), False
        maker = _Writer(self, MAKER)
        maker.start(self.loop.now)
        self.loop.run(0.0)
        endpoint.faults, endpoint.counting = faults, True
        made = maker.process is not None and maker.process.finished
        if not made or [i.outcome for i in self.made] != ["ok"]:
            raise InvalidArgumentError(
                f"{config.quiet_before:g}",
                "the commit making the lake had not been acknowledged when the writers "
                "start: give it more seconds",
                what="quiet_before",
            )

    def start_writers(self) -> list[_Writer]:
        """The run's writers, each started at random over :attr:`SimConfig.start_over`
        seconds from virtual time 0, on a lake made :attr:`SimConfig.quiet_before` seconds
        earlier if given (:meth:`make_lake`)."""
        config = self.config
        if config.quiet_before:
            self.make_lake()
        writers = self.writers = [_Writer(self, n) for n in range(config.writers)]
        for writer in writers:
            writer.start(writer.rng.uniform(0.0, config.start_over))
        return writers

    def go(self) -> SimResult:
        config = self.config
        writers = self.start_writers()
        for n in range(config.readers):
            rng = Random(self.master.getrandbits(64))
            Process(
                self.loop, self.endpoint, self.reader(n, rng), kind="reader", name=f"reader {n}"
            ).start(rng.uniform(0.0, 0.1))
        # Vacuum goes on past a writer stalled beside it (below) until it could have returned.
        vacuum_stall = config.vacuum_older_than + 3 * config.vacuum_every
        linger = vacuum_stall if config.faults.stalls or config.faults.swap_stalls else 0.0
        for n in range(config.vacuums):
            rng = Random(self.master.getrandbits(64))
            program = vacuum_program(
                self.vacuum_runs,
                n,
                rng,
                now=lambda: self.loop.now,
                until=self.end + config.vacuum_older_than + 2 * config.vacuum_every + linger,
                every=config.vacuum_every,
                older_than=None if config.shrink_retention_from else config.vacuum_older_than,
                intent_ttl=config.intent_ttl,
            )
            Process(
                self.loop,
                self.endpoint,
                program,
                kind="vacuum",
                name=f"vacuum {n}",
                done=self._vacuum_done,
            ).start(0.0)
        if config.shrink_retention_from is not None:
            admin = self.protocol.committer(Random(self.master.getrandbits(64)), config)
            Process(self.loop, self.endpoint, self._shrink_retention(admin), kind="admin").start(
                0.0
            )
        chaos = Random(self.master.getrandbits(64))
        faults = config.faults
        stall = faults.stall if faults.stall is not None else config.intent_ttl + 5.0

        def stalled(process: Process) -> None:
            process.stall(stall)

        # Past vacuum's window while vacuum still runs: a late writer beside vacuum.
        def stalled_past_vacuum(process: Process) -> None:
            process.stall(vacuum_stall)

        for _ in range(faults.kills):
            self._at_random_writer(chaos, writers, Process.kill)
        for n in range(faults.stalls):
            late = config.vacuums and faults.stall is None and n % 2 == 1
            self._at_random_writer(chaos, writers, stalled_past_vacuum if late else stalled)
        for _ in range(faults.steps):
            offset = chaos.uniform(-faults.skew, faults.skew)
            self._at_random_writer(chaos, writers, functools.partial(self._stepped, offset=offset))

        # Between the last check and the swap, past vacuum's window (FORMAT.md rule 10).
        def stalled_before_swap(process: Process) -> None:
            process.stall_before_swap(vacuum_stall)

        for _ in range(faults.swap_stalls):
            self._at_random_writer(chaos, writers, stalled_before_swap)

        # A re-run's second look at its commit id (FORMAT.md rule 2): killed with its intent
        # pending, restarted to wait past the window while that intent is applied.
        def killed_sending_intents(process: Process) -> None:
            for writer in writers:
                if writer.process is process:
                    writer.rerun_stall = stall
            process.kill_before_intents()

        for _ in range(faults.rerun_stalls):
            self._at_random_writer(chaos, writers, killed_sending_intents)
        self._pauses(chaos, writers)
        step = max(1.0, math.ceil(self.end / 100))
        until = 0.0
        while until < self.end:
            until = min(self.end, until + step)
            self.loop.run(until)
            if self.progress is not None:
                self.progress(int(until), math.ceil(self.end))
        self.loop.run(math.inf if config.commits else self.end + config.drain)
        if config.vacuums:
            vacuumed = self._vacuumed()
        view = self.protocol.view(self.store)
        view.deleted = frozenset(key for _, key, _ in self.store.deleted)
        violations = check(
            self.made + self.invocations,
            view,
            self.observations,
            intent_ttl=config.intent_ttl,
            commit_window=config.commit_window,
        )
        violations += [f"process crashed: {c}" for c in self.crashes]
        if config.vacuums:
            violations += vacuumed
        metrics = self._metrics(view, violations)
        return SimResult(
            config,
            metrics,
            violations,
            self.invocations,
            self.observations,
            self.store,
            self.loop.events,
            self.vacuum_runs,
            self.clock_steps,
        )

    def _vacuumed(self) -> list[str]:
        """Vacuum's violations (:mod:`._vacuum`), judged by the run that made each deletion;
        the keys a commit referenced after vacuum deleted them counted as ``late``."""
        problems, late = vacuum_problems(self.store, self.vacuum_runs, _Reader(self.store))
        self.vacuum_late = len(late)
        return problems

    def _files_of(self, dataset: str, partition: str | None) -> Sequence[DataFile] | None:
        """The files of ``partition`` in ``dataset``'s current version (read at no cost);
        ``None``: the dataset does not exist (a partition ``None``: ``()`` if it does)."""
        return self.protocol.files_of(self.store, dataset, partition)

    def _stepped(self, process: Process, *, offset: float) -> None:
        """The clock of ``process``'s writer steps to ``offset`` (its lingering thread's and
        its restarts' too: one machine's clock)."""
        self.clock_steps.append((self.loop.now, process.name, offset))
        for writer in self.writers:
            if writer.process is process:
                writer.skew = process.skew = offset
                for lingerer in writer.lingerers:
                    lingerer.skew = offset

    def _vacuum_done(self, result: Any, error: BaseException | None) -> None:
        if error is not None:
            self.crashes.append(f"vacuum: {_describe(error)}")

    def _pauses(self, chaos: Random, writers: list[_Writer]) -> None:
        """``Faults.pauses`` writers, at random moments, each paused for a length drawn from
        ``Faults.pause`` as the answer to its next read of the root arrives
        (:meth:`Process.pause`). Drawn after every other fault, from a generator of their
        own: a run without pauses draws exactly as before."""
        if not self.config.faults.pauses:
            return
        rng = Random(chaos.getrandbits(64))
        shortest, longest = self.config.faults.pause
        for _ in range(self.config.faults.pauses):
            seconds = rng.uniform(shortest, longest)
            self._at_random_writer(rng, writers, functools.partial(Process.pause, seconds=seconds))

    def _at_random_writer(
        self, rng: Random, writers: list[_Writer], act: Callable[[Process], None]
    ) -> None:
        when = rng.uniform(0.1, 0.9) * self.config.seconds
        index = rng.randrange(len(writers))

        def fire(_: Any) -> None:
            process = writers[index].process
            if process is not None and not process.finished:
                act(process)

        self.loop.at(when, fire)

    def warmup(self, window: float) -> float:
        """The virtual seconds at the start a run's figures leave out: until the first
        commits of :data:`WARMUP_WRITERS` of the writers ended (acknowledged or not), rounded
        up to a whole second, at most :data:`WARMUP_SHARE` of the window; 0 when asked to
        count them, or for a run of ``commits`` per writer (a burst, measured whole)."""
        if self.config.include_warmup or self.config.commits:
            return 0.0
        first: dict[int, float] = {}
        for i in self.invocations:
            if i.end is not None and i.end < first.get(i.writer, math.inf):
                first[i.writer] = i.end
        ends = sorted(first.values()) + [math.inf] * (self.config.writers - len(first))
        ended = ends[math.ceil(WARMUP_WRITERS * len(ends)) - 1]
        cap = math.floor(window * WARMUP_SHARE)
        return float(min(math.ceil(ended), cap) if math.isfinite(ended) else cap)

    def _metrics(self, view: Any, violations: list[str]) -> Metrics:
        config = self.config
        done = [i for i in self.invocations if i.outcome == "ok"]
        window = self.end
        if config.commits:
            window = max((i.end or 0.0 for i in self.invocations), default=0.0) or self.end
        warmup = self.warmup(window)
        seconds = max(1, math.ceil(window))
        per_second: list[list[float]] = [[] for _ in range(seconds)]
        for i in done:
            if i.end is not None and i.end <= window:
                per_second[min(int(i.end), seconds - 1)].append(i.end - i.start)
        # ``warmup`` is whole seconds: the figures are exactly the seconds from it on.
        skip = int(warmup)
        inside = sorted(t for second in per_second[skip:] for t in second)
        counts = self.endpoint.counts
        requests_by_second = [counts.writer_seconds.get(k, 0) for k in range(seconds)]
        writer_requests = sum(v for k, v in counts.requests.items() if k.startswith("writer:"))
        commits = len(done)
        if skip:
            # Past the start-up: the requests sent in those seconds for their commits.
            requests_per_commit = sum(requests_by_second[skip:]) / len(inside) if inside else 0.0
        else:
            # The whole run: every request writers sent, every commit acknowledged.
            requests_per_commit = writer_requests / commits if commits else 0.0
        folds: dict[int, set[str]] = {}
        for versions in view.datasets.values():
            for v in versions:
                folds.setdefault(v.version, set()).update(v.commit_ids)
        largest = max((len(ids) for ids in folds.values()), default=0)
        fold_limit = max(1, min(config.writers, self.protocol.max_fold))
        bound_cas = self.profile.key_cas_rate() * fold_limit
        bound_latency = config.writers / self.profile.floor() if self.profile.floor() else math.inf
        digest = hashlib.sha256()
        for i in self.invocations:
            digest.update(f"{i.id}|{i.outcome}|{i.version}|{i.start!r}|{i.end!r}\n".encode())
        digest.update(repr(sorted(counts.requests.items())).encode())
        digest.update(repr(self.loop.events).encode())
        commits_by_second = [len(second) for second in per_second]
        before, recovered = _recovery(config.faults.brownout, commits_by_second, skip)
        return Metrics(
            writers=config.writers,
            seconds=config.seconds,
            store=config.store,
            seed=config.seed,
            commits=len(inside),
            commits_per_second=_round(len(inside) / (window - warmup)),
            makespan=_round(window),
            p50_ms=_round(_percentile(inside, 0.50) * 1000),
            p99_ms=_round(_percentile(inside, 0.99) * 1000),
            requests_per_commit=_round(requests_per_commit),
            bytes_per_commit=_round(counts.bytes["writer"] / commits) if commits else 0.0,
            commits_per_cas=_round(commits / counts.root_swaps) if counts.root_swaps else 0.0,
            root_swaps=counts.root_swaps,
            largest_fold=largest,
            throttled=counts.throttled + counts.faults["throttle"],
            faults_injected=sum(counts.faults.values()),
            failed=sum(1 for i in self.invocations if i.outcome == "fail"),
            gave_up=sum(1 for i in self.invocations if i.outcome == "gaveup"),
            unknown=sum(1 for i in self.invocations if i.outcome in ("unknown", "crash")),
            killed=sum(i.restarts for i in self.invocations),
            violations=len(violations),
            bound_commits_per_second=_round(min(bound_cas, bound_latency)),
            bound_cas=_round(bound_cas),
            bound_latency=_round(bound_latency),
            requests=dict(sorted(counts.requests.items())),
            areas={k: _round(v / commits) for k, v in sorted(counts.areas.items())}
            if commits
            else {},
            trace=digest.hexdigest()[:16],
            vacuum_runs=len(self.vacuum_runs),
            vacuum_deleted=len(self.store.deleted),
            vacuum_late=self.vacuum_late,
            warmup=warmup,
            warmup_commits=sum(commits_by_second[:skip]),
            commits_by_second=commits_by_second,
            p99_ms_by_second=[
                _round(_percentile(sorted(second), 0.99) * 1000) for second in per_second
            ],
            requests_by_second=requests_by_second,
            unacknowledged=_unacknowledged(self.invocations),
            brownout_before=_round(before),
            brownout_recovered_s=recovered,
            retries=sum(load.retries for load in self.loads),
            slowdowns=sum(load.decreases for load in self.loads),
            root_conflicts=dict(sorted(counts.root_conflicts.items())),
            faults=_by_kind(counts.writer_faults),
        )


#: How much of the vacuum floor a request may spend in flight at most, in a run with vacuum.
#: In production a request lands within SigV4's fifteen minutes of being signed (S3 refuses
#: it after), a quarter of the default floor (an hour); rule 10 leaves half the floor for
#: the swap to land. The window is compressed to a second here, the client's timeout is not:
#: a late write landing seconds after it was sent is the equivalent of one landing days late,
#: which no real request does.
IN_FLIGHT_SHARE = 0.25


def in_flight_bounded(config: SimConfig) -> Faults:
    """``config``'s faults, with a request's time in flight (its timeout, and a late write's
    landing, up to twice that after it was sent) within :data:`IN_FLIGHT_SHARE` of vacuum's
    window when vacuum runs."""
    if not config.vacuums:
        return config.faults
    bound = config.vacuum_older_than * IN_FLIGHT_SHARE / 2
    return dataclasses.replace(config.faults, timeout=min(config.faults.timeout, bound))


def server_resolution(config: SimConfig) -> float:
    """The server clock's resolution: S3's second, scaled as vacuum's window is when vacuum
    runs (a second is a 3,600th of the default floor). Unscaled, the ``Date`` a writer
    judges an object's age by and the ``LastModified`` vacuum does would each be off by
    up to the whole window, where in production they are off by a 3,600th of it."""
    if not config.vacuums:
        return 1.0
    return config.vacuum_older_than / DEFAULT_FLOOR


def simulate(
    config: SimConfig,
    *,
    protocol: SimProtocol | None = None,
    progress: Callable[[int, int], None] | None = None,
    trace: Callable[[dict[str, Any]], None] | None = None,
) -> SimResult:
    """Run ``config`` and check it. ``protocol`` overrides ``config.protocol`` (tests pass a
    broken one to see the checker catch it); ``progress(done, total)`` hears of the virtual
    seconds simulated; ``trace`` is called with every answered request (a dict: when it was
    sent and answered, by which process, operation, key, attempt, the fault it drew, when it
    took effect, its answer)."""
    chosen = protocol or protocol_named(config.protocol, dict(config.policy))
    with _collecting_rarely():
        return _Run(config, chosen, progress, trace).go()


@contextlib.contextmanager
def _collecting_rarely() -> Iterator[None]:
    """Collect garbage less often for the run (:data:`GC_THRESHOLDS`; never more often than
    the process's own settings), then as before."""
    before = gc.get_threshold()
    if before[0] > 0:  # 0: automatic collection is off already
        pairs = zip(GC_THRESHOLDS, before, strict=True)
        gc.set_threshold(*(max(mine, theirs) for mine, theirs in pairs))
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _taken(invocation: Invocation, answers: tuple[Any, ...], *, redo: bool) -> Steps:
    """The keys of ``invocation``'s data whose create-only PUT answered
    ``AlreadyExistsError`` holds its own file: a restart finds its killed run's files there;
    a caller-given file name whose key holds this very upload (an earlier run's, refused or
    killed before its commit) is taken as written, as a ``Lake`` takes it
    (:func:`._ops.earlier_upload`)."""
    taken = {k for k, _ in invocation.data} if redo else set()
    uploads = dict(invocation.uploads)
    for (key, _), answer in zip(invocation.data, answers, strict=True):
        if not isinstance(answer, AlreadyExistsError) or key not in uploads or key in taken:
            continue
        if (yield from _ops.earlier_upload(key, uploads[key])):
            taken.add(key)
    return taken


def _written(changes: tuple[Any, ...], answers: tuple[Any, ...], took: float) -> tuple[Any, ...]:
    """``changes`` with their new files' write times, as a ``Lake``'s write records them
    (``DataFile.written_at``: the ``Date`` of the PUT's answer less the PUT's duration)."""
    at = {
        a.key: a.server_time.timestamp() - took
        for a in answers
        if isinstance(a, PutResult) and a.server_time is not None
    }
    if not at:
        return changes
    return tuple(
        _replaced(
            c, add=tuple(_replaced(f, written_at=at[f.key]) if f.key in at else f for f in c.add)
        )
        for c in changes
    )


def _existing(changes: tuple[Any, ...], found: set[str]) -> tuple[Any, ...]:
    """``changes`` with those adding a file of ``found`` (written before: a killed run's)
    marked as registering files written earlier (``Change.existing_files``)."""
    if not found:
        return changes
    return tuple(
        dataclasses.replace(c, existing_files=True) if any(f.key in found for f in c.add) else c
        for c in changes
    )


#: How :class:`Metrics` names the outcomes of commits not acknowledged.
_UNACKNOWLEDGED = {"fail": "failed", "gaveup": "gave_up", "unknown": "unknown", "crash": "unknown"}


def _unacknowledged(invocations: Sequence[Invocation]) -> dict[str, dict[str, int]]:
    """The commits not acknowledged, by outcome and the error each raised."""
    found: dict[str, dict[str, int]] = {}
    for i in invocations:
        outcome = _UNACKNOWLEDGED.get(i.outcome)
        if outcome is None:
            continue
        described = i.error or "no result and no error"
        if i.error_type is not None:
            error = i.error_type
        elif i.outcome == "fail":  # its data PUT failed: "data PUT: <error>: <message>"
            error = f"data PUT {described.split(':')[1].strip()}"
        else:
            error = described.split(":")[0]
        errors = found.setdefault(outcome, {})
        errors[error] = errors.get(error, 0) + 1
    return {k: dict(sorted(v.items())) for k, v in sorted(found.items())}


def _by_kind(faults: Counter[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """Writers' faults by kind, then by part of the lake, both sorted."""
    found: dict[str, dict[str, int]] = {}
    for (kind, area), count in sorted(faults.items()):
        found.setdefault(kind, {})[area] = count
    return found


def _recovery(
    brownout: Brownout | None, commits_by_second: list[int], warmup: int
) -> tuple[float, float | None]:
    """The mean commits per second before ``brownout`` (its steady seconds: from ``warmup``
    to the last whole second before it starts), and the seconds from its end to the end of
    the first whole second after it whose commits reach :data:`RECOVERED` of that mean
    (``None``: none did, or there is no brownout or no second before it to compare with)."""
    if brownout is None:
        return 0.0, None
    before = commits_by_second[warmup : math.floor(brownout.start)]
    if not before:
        return 0.0, None
    mean = sum(before) / len(before)
    for second in range(math.ceil(brownout.end), len(commits_by_second)):
        if commits_by_second[second] >= RECOVERED * mean:
            return mean, _round(second + 1 - brownout.end)
    return mean, None


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]


def _round(value: float) -> float:
    return round(value, 3) if math.isfinite(value) else value


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
