"""When the commit core waits, looks, lists, folds, lingers and reads ahead: liveness only.

One :class:`Scheduler` per process holds every piece of liveness state the core keeps — what
the process learnt about the others (:class:`Hints`), how long the batch in flight has waited
(:class:`Waits`), whether its last swap carried others' intents, whether a commit of its own is
queued — and answers the attempt path's questions, each a method with a typed answer:

==============================  ===========================================================
question                        answer
==============================  ===========================================================
:meth:`~Scheduler.wait_first`   send our intents and look a round later, before any read?
:meth:`~Scheduler.known_root`   start from the root last seen (no GET)?
:meth:`~Scheduler.wait_on`      the root stood still since we waited: wait on?
:meth:`~Scheduler.stagger`      wait longer before listing (the oldest waiter lists first)?
:meth:`~Scheduler.list_now`     list other processes' intents now?
:meth:`~Scheduler.send_first`   send our intents before listing?
:meth:`~Scheduler.crowd`        a crowd is pending: send ours and wait instead?
:meth:`~Scheduler.wait_for`     an older intent is pending: wait for its writer's fold?
:meth:`~Scheduler.gather`       seconds to pause for intents being sent right now
:meth:`~Scheduler.watermark`    the watermark to propose
:meth:`~Scheduler.poll`         seconds until the next look
:meth:`~Scheduler.read_ahead`   read the next fold ahead, and for how long it answers?
:meth:`~Scheduler.linger`       go on folding for others after the batch?
:meth:`~Scheduler.linger_pause` seconds until a lingering fold's next LIST, or stop
==============================  ===========================================================

Every answer goes through :func:`._policy.advise`, so a bug here costs a round trip (a fold
sooner than needed), never a commit; nothing here decides who applies an intent
(:mod:`._decide` does, whatever this module answers: the simulator's seeds run with random
policies to show it). The knobs the rules read are :class:`._policy.FoldPolicy`'s; what is
worth keeping but not tuning is a constant here, each with its reason (:data:`FIXED` names
them: the simulator still varies them, docs/decisions/0035-fewer-knobs.md). The rest of the
scheduler is what the attempt path tells it (``observed``, ``lost_race``, ``listed``,
``swapped``...): all of it learnt from this process's own requests and clocks, so a hint that
is wrong costs a 412 and a redrive, or a wait that was not needed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lakelock._layout import intent_ms, intents_from
from lakelock._registry._core._policy import FoldPolicy, advise

__all__ = [
    "CONTENTION_MEMORY",
    "CROWD",
    "FASTER",
    "FIRST_ROUND",
    "FIXED",
    "GATHER",
    "HANDOVER",
    "HEDGE_ALONE",
    "INTENT_CACHE",
    "LAGGING",
    "LINGER_AFTER",
    "MAX_ROUND",
    "MAX_WAITS",
    "RECENT",
    "TAKE_OVER",
    "Hints",
    "Scheduler",
    "Waits",
]

#: How long (seconds) a lost race or another process's intent makes this process assume
#: others commit here too: then it sends its intent first and waits a round before folding
#: (docs/decisions/0004-the-waiting-fold.md, 0035-fewer-knobs.md).
CONTENTION_MEMORY = 5.0
#: Rounds a waiter lets the root stand still before it folds the older intents itself
#: (their writer may be dead) (docs/decisions/0010-the-last-swapper-folds.md, 0035).
MAX_WAITS = 8
#: Looks of a still root each pending intent older than a waiter's (but the oldest, whose
#: writer folds) adds to its patience: when a folder stops, its waiters take over one by one,
#: the oldest intent's first, and the next sees the root move instead of each listing and
#: reading every intent at once (docs/decisions/0039-one-folder-takes-over.md).
TAKE_OVER = 2
#: A committer not yet contended that lists this many intents of others does not read them:
#: it sends its own and waits like a contended one (processes starting at once)
#: (docs/decisions/0010-the-last-swapper-folds.md, 0035).
CROWD = 8
#: The round assumed before one is measured (seconds): a fold-and-swap takes ~0.15 s or more
#: on S3 Standard, and one assumed too short sends a start-up burst's waiters folding alone
#: (docs/decisions/0015-first-round.md, 0035).
FIRST_ROUND = 0.1
#: The longest round learnt (seconds): one slow fold does not space a process's looks and
#: folds for long (docs/decisions/0015-first-round.md, 0035).
MAX_ROUND = 5.0
#: A folder under contention pauses this fraction of a round for the intents being sent
#: right then (the writers its last swap settled), and lists what came since: one swap
#: carries them instead of the next (docs/decisions/0004-the-waiting-fold.md, 0035).
GATHER = 0.3
#: A swap leaves at most this many listed keys above the watermark (each keeps a fate in the
#: root, which every root read carries), besides the intents it carries
#: (docs/decisions/0012-lagging.md, 0035).
LAGGING = 256
#: A folder lingers only if its caller pauses, on average, at least this many rounds between
#: a commit's return and its next: one committing back to back folds again itself within a
#: round, and a lingering fold then only delays it (docs/decisions/0019-linger.md, 0035).
LINGER_AFTER = 1.0
#: The hand-over: a process whose swap is still the root after a race nobody won still
#: swapped last, and folds again at once (docs/decisions/0018-hand-over-by-fact.md, 0035).
HANDOVER = True
#: A lone request (a commit's intent, its data files, a read alone) is hedged too, not only
#: those of a batch: most of a commit's tail on S3 Standard is its own PUTs' tail
#: (docs/decisions/0014-hedged-requests.md, 0035). The driver's :class:`~._driver.Hedging`.
HEDGE_ALONE = True
#: Other processes' intents a process keeps parsed: a redrive does not read them again
#: (docs/decisions/0004-the-waiting-fold.md, 0035).
INTENT_CACHE = 4096

#: The values above by name: none is a knob (nobody is asked to tune them), but the
#: simulator's ``--policy`` and its seed sweep may still vary them, to measure what each
#: buys and to show that no value of them breaks a guarantee.
FIXED: dict[str, float] = {
    "contention_memory": CONTENTION_MEMORY,
    "max_waits": MAX_WAITS,
    "crowd": CROWD,
    "first_round": FIRST_ROUND,
    "max_round": MAX_ROUND,
    "intent_cache": INTENT_CACHE,
    "gather": GATHER,
    "lagging": LAGGING,
    "linger_after": LINGER_AFTER,
    "handover": HANDOVER,
    "hedge_alone": HEDGE_ALONE,
}

#: A slow spell of the store (a brownout) is this many times its usual time for this
#: process's root reads, and its end a read this many times faster than the spell's: then
#: the round learnt in it comes back to the usual one (:meth:`Hints.learn_read`). Four
#: times: a few slow answers of S3's tail in a row do not make a spell, nor one fast answer
#: its end; a slowdown of four or less is left to :meth:`Hints.learn_swaps`
#: (docs/decisions/0041-forget-the-slow-store.md).
FASTER = 4.0
#: The weights of each root read in what this process's reads take lately (a few reads)
#: and usually (a hundred: a store slow for minutes is just slow), means of their
#: logarithms (one slow answer of the store's tail weighs as much as one fast answer); and
#: of each round learnt in the round it usually learns.
LATELY = 0.3
USUALLY = 0.02

#: Rounds within which what this process saw of the root still describes it: a folder at
#: work swaps about once a round and a waiter looks at least every round, so four cover a
#: commit's data PUT, its intent and its wait (docs/decisions/0034-few-writers.md).
RECENT = 4


@dataclass
class Hints:
    """What one process has learnt about the others (liveness hints, never trusted for
    safety)."""

    round_seconds: float
    #: Until when (this process's clock) others are assumed to be committing here.
    contended_until: float = float("-inf")
    #: When this process last listed intents (its clock; -inf: never).
    listed_at: float = float("-inf")
    #: Whether this process's first fold found the lake quiet (a root not moved within
    #: ``CONTENTION_MEMORY``), whether it has swapped a root in yet, and whether it has
    #: listed since its first swap (:meth:`Scheduler.relist`).
    started_quiet: bool = False
    swapped_once: bool = False
    listed_since_swap: bool = False
    #: Whether the root this process knows is one it swapped in itself (and, with the
    #: hand-over, every root read since returned that root: nobody else has swapped).
    swapped_last: bool = False
    #: When (this process's clock) it last read or swapped the root, and the earliest
    #: another process's swap it has seen since can have been made: its look before the
    #: one that found the root moved (-inf: never seen).
    root_seen_at: float = float("-inf")
    others_swapped_at: float = float("-inf")
    #: How long this process's caller pauses between a commit's return and the next
    #: commit (seconds, averaged; None: not seen yet), and when the last batch ended.
    pause: float | None = None
    finished_at: float | None = None
    #: The root version this process last read, and when (its clock): how fast swaps come.
    seen: tuple[int, float] | None = None
    #: How long this process's root reads take lately and usually: means of their
    #: logarithms, as :data:`LATELY` and :data:`USUALLY` weigh them (None: none timed yet).
    reads: float | None = None
    usual_reads: float | None = None
    #: The round this process usually learns, as :data:`USUALLY` weighs each (None: none
    #: learnt yet): what a slow spell's end brings the round back to.
    usual_round: float | None = None
    #: When (this process's clock) it last found its rounds too long and cut them: a round
    #: measured from before then measured the store as it was, and is not learnt.
    cut_at: float = float("-inf")

    def saw_root(self, now: float, *, moved: bool) -> None:
        """This process read (or swapped) the root at ``now``; ``moved``: another process
        had swapped since its last look, so no earlier than that look (a long pause between
        two looks says nothing about when)."""
        if moved:
            self.others_swapped_at = max(self.others_swapped_at, self.root_seen_at)
        self.root_seen_at = now

    def learn_pause(self, seconds: float) -> None:
        """The caller made its next commit ``seconds`` after the last one returned."""
        seconds = max(seconds, 0.0)
        self.pause = seconds if self.pause is None else 0.7 * self.pause + 0.3 * seconds

    def learn_round(
        self, seconds: float, most: float = MAX_ROUND, *, started: float = float("inf")
    ) -> None:
        """A fold-and-swap (or a wait another's swap ended) that started at ``started``
        took ``seconds`` (at most ``most`` counts). One that started before the rounds were
        last cut (:attr:`cut_at`) is not learnt: it measured the slow spell the cut ended,
        and learning it would bring back the round the cut forgot."""
        if started < self.cut_at:
            return
        seconds = min(max(seconds, 0.0), most)
        self.round_seconds = 0.8 * self.round_seconds + 0.2 * seconds
        usual = self.usual_round
        self.usual_round = (
            self.round_seconds if usual is None else usual + USUALLY * (self.round_seconds - usual)
        )

    def learn_read(self, seconds: float, now: float) -> None:
        """A root read that ended at ``now`` took ``seconds``. When this process's reads
        lately took more than :data:`FASTER` times what they usually take (the store in a
        slow spell: a brownout), a read more than :data:`FASTER` times faster than them says
        the spell is over: at that first fast read the round comes back to the one the
        process usually learns (:attr:`usual_round`; not lower: hundreds of waiters with
        rounds too short run out of patience and fold at once), and the rounds measured
        from before are not learnt (:meth:`learn_round`). Otherwise the waits and folds the
        spell stretched, which end after it, keep every process's round long, long rounds
        space its looks and folds, and the swaps that would show the store fast again do
        not come (:meth:`learn_swaps` alone took 4 to 6 s to undo a brownout of 64
        writers)."""
        logged = math.log(max(seconds, 1e-6))
        lately, usually = self.reads, self.usual_reads
        if lately is None or usually is None:
            self.reads = self.usual_reads = logged
            return
        self.usual_reads = usually + USUALLY * (logged - usually)
        spell = lately - usually > math.log(FASTER)
        if spell and logged < lately - math.log(FASTER):
            usual = FIRST_ROUND if self.usual_round is None else self.usual_round
            self.round_seconds = min(self.round_seconds, max(usual, FIRST_ROUND))
            self.reads = logged  # the store as it is now
            self.cut_at = now
            return
        # One read moves "lately" at most as one FASTER**2 times slower would: a lone stall
        # (a paused process, a GET the SDK retried) is not a spell, which takes two such
        # reads in a row, or three of a store ten times slower.
        self.reads = lately + LATELY * min(logged - lately, 2 * math.log(FASTER))

    def learn_swaps(self, version: int, now: float, policy: FoldPolicy) -> None:
        """The root was at ``version`` at ``now``. Swaps that came more than twice as fast
        as the round learnt, over ``fold_interval`` or more, say the rounds are short again:
        the round becomes twice their period. A round learnt in an overload (waits
        stretched by slow swaps, which stretch looks and folds in turn) thus ends with the
        first fold interval of fast swaps, instead of keeping the process slow for seconds
        after the store came back (moving halfway, a brownout's rounds took three or four
        such intervals to decay). (Over a shorter span, two looks either side of one swap
        would make any swap look fast.) (docs/decisions/0033-load-control.md)"""
        seen = self.seen
        if seen is None or version < seen[0] or now < seen[1]:
            self.seen = (version, now)
            return
        if now - seen[1] < max(policy.fold_interval, 1e-3):
            return
        self.seen = (version, now)
        if version == seen[0]:
            return
        period = (now - seen[1]) / (version - seen[0])
        self.round_seconds = min(self.round_seconds, 2 * period)

    def contended(self, now: float) -> bool:
        return now < self.contended_until

    def contend(self, now: float, memory: float = CONTENTION_MEMORY) -> None:
        self.contended_until = max(self.contended_until, now + memory)


@dataclass
class Waits:
    """How long the batch in flight has waited for other processes."""

    #: Rounds the root stood still while waiting for an older intent's writer, and the root
    #: version that wait started from.
    waits: int = 0
    wait_version: int | None = None
    #: Other processes' pending intents older than ours, when we last listed: our place
    #: in the line of waiters that take over from a folder that stopped.
    ahead: int = 0
    #: When (this process's clock) it started waiting for others, and last looked.
    started: float | None = None
    looked_at: float | None = None
    #: The version a staggering waiter last saw move, how long the root has stood still
    #: since, and how long it must stand still before the waiter lists.
    watched_version: int | None = None
    still: float = 0.0
    still_needed: float = 0.0
    #: The length of the next wait, when the stagger set one.
    next_wait: float | None = None


def fixed_values(fixed: Mapping[str, float]) -> dict[str, float]:
    """``fixed`` checked: names of :data:`FIXED`, with values they can take."""
    unknown = sorted(fixed.keys() - FIXED.keys())
    if unknown:
        raise ValueError(f"not a fixed value of the scheduler: {', '.join(unknown)}")
    values = dict(fixed)
    for name in ("handover", "hedge_alone"):  # 0 and 1 from a command line
        if name in values and values[name] not in (0, 1):
            raise ValueError(f"{name} must be true or false, got {values[name]!r}")
    for name in ("max_waits", "crowd", "intent_cache", "lagging"):
        value = values.get(name, 0)
        if isinstance(value, bool) or not float(value).is_integer() or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    if values.get("crowd", 1) < 1:
        raise ValueError("crowd must be >= 1")
    if values.get("first_round", 1) <= 0:
        raise ValueError("first_round must be > 0")
    durations = ("contention_memory", "gather", "linger_after", "max_round")
    if min((values.get(name, 0) for name in durations), default=0) < 0:
        raise ValueError("durations and fractions must be >= 0")
    return values


class Scheduler:
    """One process's liveness state, and the rules that read it (module docstring).

    ``queued`` says whether a commit of this process waits for its turn (a lingering fold
    then stops); the process's commit queue sets it."""

    def __init__(
        self, policy: FoldPolicy, rng: random.Random, *, fixed: Mapping[str, float] | None = None
    ) -> None:
        self.policy = policy
        self.rng = rng
        values = {**FIXED, **fixed_values(fixed or {})}
        self.contention_memory = values["contention_memory"]
        self.max_waits = int(values["max_waits"])
        self.crowd_at = int(values["crowd"])
        self.max_round = values["max_round"]
        self.intent_cache = int(values["intent_cache"])
        self.gather_for = values["gather"]
        self.lagging = int(values["lagging"])
        self.linger_after = values["linger_after"]
        self.handover = bool(values["handover"])
        self.hedge_alone = bool(values["hedge_alone"])
        self.hints = Hints(values["first_round"])
        #: The batch in flight's waits (:meth:`begin` starts them anew).
        self.waits = Waits()
        #: Whether our last swap carried other processes' intents (we are their folder).
        self.carried = False
        self.queued: Callable[[], bool] = bool
        #: When the round in flight started (this process's clock), and how long it paused
        #: to gather intents: what it took, less that pause, is a round.
        self._round_started = 0.0
        self._gathered = 0.0

    # -- what the attempt path tells it ---------------------------------------------------

    def begin(self) -> None:
        """A batch starts: it has waited for nobody yet."""
        self.waits = Waits()

    def caller_back(self, now: float) -> None:
        """The caller makes its next commit at ``now``: how long it paused since the last."""
        if self.hints.finished_at is not None:
            self.hints.learn_pause(now - self.hints.finished_at)
            self.hints.finished_at = None

    def finished(self, now: float) -> None:
        """The batch ended at ``now``: the caller has its results."""
        self.hints.finished_at = now

    def round_starts(self, now: float) -> None:
        """A fold-and-swap starts at ``now`` (an attempt, or a lingering fold)."""
        self._round_started, self._gathered = now, 0.0

    def observed(self, now: float | None, *, moved: bool, ours: bool) -> None:
        """A root was read at ``now`` (``None``: time unknown); ``moved``: another process
        swapped since the root we knew; ``ours``: it is the root this process swapped in
        (then, with the hand-over, it still swapped last)."""
        if now is not None:
            self.hints.saw_root(now, moved=moved)
        self.hints.swapped_last = self.handover and self.hints.swapped_last and ours

    def read_root(self, version: int, now: float, *, took: float | None = None) -> None:
        """This process read the root at ``version`` at ``now`` (how fast swaps come), in
        ``took`` seconds (how fast the store answers; None: not timed)."""
        if took is not None:
            self.hints.learn_read(took, now)
        self.hints.learn_swaps(version, now, self.policy)

    def looked(self, now: float, *, settled: bool) -> None:
        """A waiter looked at the root at ``now``; ``settled``: another's swap settled some
        of its commits since its last look, so the middle of that span, not this look,
        tells how long a round is here."""
        waits = self.waits
        if waits.started is not None and waits.looked_at is not None:
            if settled:
                self.hints.learn_round(
                    (waits.looked_at + now) / 2 - waits.started,
                    self.max_round,
                    started=waits.started,
                )
                self.hints.contend(now, self.contention_memory)
            waits.looked_at = now

    def waiting(self, now: float) -> None:
        """Our intents are out and we wait for another process's fold, from ``now``."""
        self.waits.started = self.waits.looked_at = now

    def listed(self, now: float) -> bool:
        """This process lists intents at ``now``; whether it is its first listing."""
        first = self.hints.listed_at == float("-inf")
        self.hints.listed_at = now
        self.hints.listed_since_swap = self.hints.swapped_once
        return first

    def lost_race(self, now: float) -> None:
        """Another process's intent was listed, or our swap lost a race (412): others
        commit here too."""
        self.hints.contend(now, self.contention_memory)

    def swapped(self, now: float, *, carried: bool) -> None:
        """Our swap landed at ``now``; ``carried``: it applied other processes' intents."""
        self.hints.swapped_last = True
        self.hints.swapped_once = True
        self.carried = carried
        self.hints.saw_root(now, moved=False)
        self.hints.learn_round(
            now - self._round_started - self._gathered,
            self.max_round,
            started=self._round_started,
        )

    def stopped_folding(self) -> None:
        """A lingering fold stopped on a failure: whoever swaps next is not us."""
        self.hints.swapped_last = False
        self.carried = False

    # -- questions: before the first look -------------------------------------------------

    def wait_first(self, now: float, *, knows_format2: bool, all_intents: bool) -> bool:
        """Under contention, with a folder at work, and unless this process swapped last, a
        committer sends its intents and looks at the root about a round later: another
        process is about to fold and swap, and a commit somebody else folds costs its intent
        PUT and one GET. With no folder at work (a few writers, pausing between commits),
        nobody would fold them: it reads the root, folds what is pending and swaps itself."""
        return advise(
            lambda: (
                self.policy.max_fold > 0
                and self.hints.contended(now)
                and self.folder_at_work(now)
                and not self.hints.swapped_last
                and knows_format2
                and all_intents
            ),
            False,
        )

    def folder_at_work(self, now: float) -> bool:
        """Whether another process is likely to swap soon: a swap of another process this
        process saw was made within the last :data:`RECENT` rounds. Older than that (a few
        writers pausing between commits), waiting for a fold costs rounds that no swap ends:
        the committer reads the root and swaps itself, and the waiting protocol engages
        again once its swap collides (docs/decisions/0034-few-writers.md)."""
        return now - self.hints.others_swapped_at <= RECENT * self.hints.round_seconds

    def known_root(self, now: float) -> bool:
        """A first attempt starts from the root this process last read or wrote (no GET) when
        it swapped last or nobody else seems to commit here; a stale one costs a 412. But a
        root swapped in more than :data:`RECENT` rounds ago, where others were seen swapping
        lately, is likely stale (a few writers taking turns, pausing between commits): its
        GET costs less than a 412 and a redrive."""

        def rule() -> bool:
            hints = self.hints
            if hints.swapped_last:
                others = now - hints.others_swapped_at < self.contention_memory
                return not (others and now - hints.root_seen_at > RECENT * hints.round_seconds)
            return not hints.contended(now)

        return advise(rule, False)

    # -- questions: waiting ---------------------------------------------------------------

    def patient(self, attempts: int, max_attempts: int) -> bool:
        """Whether a waiter goes on waiting for an older intent's writer to fold ours: while
        the root has not stood still for :data:`MAX_WAITS` rounds, nor the waiter spent half
        its attempts (``attempts``, :attr:`~._state.Batch.spent`: a look that found the root
        moved is one, so it folds itself before it would give up; a look at a root that
        stood still is not, or one stall of the root would spend every waiter's budget
        alike and all of them would fold at once when it ends:
        docs/decisions/0044-a-stall-spends-no-attempts.md). Each pending intent older than
        ours but the oldest adds :data:`TAKE_OVER` looks to the first: the waiters behind a
        folder that stopped take over one at a time, in the order of their intents, and the
        next one sees the root move (its commit applied) instead of listing and reading
        every intent too. A waiter far down a long line at a root that stands still is
        bounded by its seconds (``max_seconds``), not by its attempts. (A bound on the
        rounds waited in all, twice ``MAX_WAITS``, never bound before the attempts did:
        docs/decisions/0035-fewer-knobs.md.)"""
        waits = self.waits
        later = TAKE_OVER * max(waits.ahead - 1, 0)
        return waits.waits < self.max_waits + later and attempts < max_attempts // 2

    def wait_on(self, version: int, attempts: int, max_attempts: int) -> bool:
        """We waited for an older intent's writer at some root version, and looked again: if
        the root still stands at it, wait on (another round), while :meth:`patient`;
        else the wait ends (a root that moved says somebody is folding)."""
        waits = self.waits
        if waits.wait_version is None:
            return False
        if version == waits.wait_version and advise(
            lambda: self.patient(attempts, max_attempts), False
        ):
            waits.waits += 1
            return True
        if version != waits.wait_version:
            waits.waits = 0  # the root moved: somebody is folding
        waits.wait_version = None
        return False

    def stagger(
        self,
        attempts: int,
        max_attempts: int,
        *,
        version: int,
        oldest: str,
        newest_decided: str,
        passed_over: bool,
    ) -> bool:
        """Whether a waiter whose intents are out and pending (``oldest`` the oldest) waits
        longer before it lists, and how long (for :meth:`poll`). The oldest pending intent's
        writer should fold next: each waiter lists only once the root stood still
        ``stagger`` times as long as its intent was made after the newest the last swap
        decided (one to two rounds: a folder at work swaps within a round). Meanwhile it
        looks every ``look`` of a round. One a fold passed over lists at once (no other
        fold will)."""
        if self.waits.started is None:
            return False

        def rule() -> bool:
            p, waits = self.policy, self.waits
            if p.stagger <= 0 or not self.patient(attempts, max_attempts):
                return False
            one = self.hints.round_seconds
            if waits.watched_version != version:
                waits.watched_version, waits.still, waits.still_needed = version, 0.0, 0.0
                if passed_over:
                    return False
                behind = (
                    max(0.0, (intent_ms(oldest) - intent_ms(newest_decided)) / 1000)
                    if newest_decided
                    else 0.0
                )
                waits.still_needed = min(max(p.stagger * behind, one), 2 * one)
            left = waits.still_needed - waits.still
            if left < 1e-6:
                return False
            waits.next_wait = min(one * p.look, left)
            return True

        return advise(rule, False)

    def poll(self, attempts: int) -> float:
        """How long a waiting committer sleeps before it looks at the root again: what its
        stagger set; after sending its intent, about a round (looking sooner mostly finds it
        pending); waiting for an older intent's writer, up to a round. Jittered."""

        def rule() -> float:
            one, waits = self.hints.round_seconds, self.waits
            if waits.next_wait is not None:
                seconds, waits.next_wait = waits.next_wait, None
                waits.still += seconds
                return seconds
            if attempts <= 1:
                return one * self.rng.uniform(0.9, 1.1)
            return one * self.rng.uniform(0.5, 1.0)

        return advise(rule, 0.05)

    # -- questions: listing and folding ---------------------------------------------------

    def list_now(self, now: float, *, attempts: int, root_moved: bool) -> bool:
        """Look for other processes' intents: after a lost race, when someone else has
        committed since our last write, when contended, and at least every
        ``fold_interval`` (so a crashed writer's intent is applied by somebody).
        ``root_moved``: the root is not the one we swapped in last."""
        return advise(
            lambda: (
                self.policy.max_fold > 0
                and (
                    attempts > 1
                    or self.hints.contended(now)
                    or root_moved
                    or not self.hints.swapped_last
                    or now - self.hints.listed_at >= self.policy.fold_interval
                    or self.relist()
                )
            ),
            True,
        )

    def relist(self) -> bool:
        """Whether this process lists again because it started on a quiet lake and has not
        listed since its first swap. Processes that start together on a quiet lake each
        list before they send their intents (:meth:`send_first`), so the first of them to
        swap listed before the others' intents landed; committing alone and fast, it would
        pass them over for ``fold_interval``, each of its swaps beating their folder's
        (docs/decisions/0050-list-again-after-the-first-swap.md)."""
        hints = self.hints
        return hints.started_quiet and hints.swapped_once and not hints.listed_since_swap

    def send_first(self, now: float, *, root_updated: float | None) -> bool:
        """Send our intents before we LIST (others then see them, and all but the oldest
        wait): when contended, or on a process's first fold if the root moved lately
        (processes that start together). Never when we swapped last: ours go with our
        snapshot, and our next fold takes whatever came meanwhile. A first fold on a quiet
        lake is remembered (:meth:`relist`)."""
        if self.hints.listed_at == float("-inf"):
            # A lake with no root yet is being made: whoever loses its creation is told.
            self.hints.started_quiet = root_updated is not None and not self.recent(
                now, root_updated
            )

        def rule() -> bool:
            if self.hints.swapped_last:
                return False
            first = self.hints.listed_at == float("-inf") and self.recent(now, root_updated)
            return (self.hints.contended(now) and self.folder_at_work(now)) or first

        return advise(rule, False)

    def recent(self, now: float, root_updated: float | None) -> bool:
        """Whether the root moved within :data:`CONTENTION_MEMORY` (by its writer's clock)."""
        return root_updated is not None and now - root_updated < self.contention_memory

    def crowd(self, others: int, *, ours_unsent: bool) -> bool:
        """Not contended until now (our intents are not out) and a crowd is pending: send
        ours and wait like a contended committer, instead of reading everyone's."""
        return advise(
            lambda: others >= self.crowd_at and not self.hints.swapped_last and ours_unsent,
            False,
        )

    def wait_for(
        self,
        now: float,
        attempts: int,
        max_attempts: int,
        *,
        version: int,
        older: str,
        ours: str,
        first_fold: bool,
        ahead: int = 1,
    ) -> bool:
        """An older intent is pending (listed from the root at ``version``): its writer folds
        everything pending, ours too, in its next swap. Wait for that (one root GET a round)
        instead of reading every intent and racing it — unless we swapped last (then we fold
        now: we know the root and are committing; that writer sleeps between two looks; a
        race nobody won leaves us the last swapper, the hand-over), or our patience ran out,
        or this is our first fold and that intent was made long before ours (its writer is
        not folding, or it would have been applied) with fewer than :data:`CROWD` older
        ones pending: a crowd of old intents is a burst's earlier processes behind a
        folder a loaded machine slows, and each newcomer reading them all to race it slowed
        that folder further (docs/decisions/0048-a-first-fold-behind-a-crowd-waits.md); a
        folder that stopped is taken over one waiter at a time (:meth:`patient`).
        ``ahead``: the pending intents older than ours (our place in the line). Waiting
        starts here."""
        self.waits.ahead = ahead
        if not advise(
            lambda: (
                self.patient(attempts, max_attempts)
                and not self.hints.swapped_last
                and not (first_fold and ahead < self.crowd_at and self.long_before(older, ours))
            ),
            False,
        ):
            return False
        waits = self.waits
        waits.waits += 1
        waits.wait_version = version
        if waits.started is None:
            waits.started = waits.looked_at = now
        return True

    def long_before(self, older: str, ours: str) -> bool:
        return intent_ms(older) < intent_ms(ours) - 1000 * self.lag()

    def gather(self, now: float, *, room: bool) -> float:
        """Seconds a folder under contention pauses for the intents being sent right now
        (the writers its last swap settled) before listing what came since; 0: none."""

        def rule() -> float:
            if self.hints.swapped_last or not self.hints.contended(now) or not room:
                return 0.0
            return self.hints.round_seconds * self.gather_for

        self._gathered = advise(rule, 0.0)
        return self._gathered

    # -- questions: the watermark ---------------------------------------------------------

    def lag(self) -> float:
        return max(self.policy.watermark_lag, 2 * self.hints.round_seconds)

    def watermark(
        self, current: str, listed: tuple[str, ...], now: float, *, carried: int = 0
    ) -> str:
        """The watermark to propose: the highest key listed, but none made later than the
        lag before the fold (intents still landing then are the next fold's), leaving at
        most :data:`LAGGING` listed keys above it besides the ``carried`` intents of others the
        fold applies. :func:`._decide.bound_watermark` bounds it."""

        def rule() -> str:
            if not listed:
                return current
            newest = listed[-1]
            if self.policy.watermark_lag <= 0:
                return max(current, newest)
            lagged = intents_from(int((now - self.lag()) * 1000))
            keep = self.lagging + carried
            if len(listed) > keep:
                lagged = max(lagged, listed[-keep - 1])
            return max(current, min(newest, lagged))

        return advise(rule, listed[-1] if listed else current)

    # -- questions: after a swap ----------------------------------------------------------

    def read_ahead(self, now: float) -> float | None:
        """Whether a folder reads its next fold ahead after its swap, and for how long what
        it read answers for now (a round: an older listing misses too much); None: not. A
        swap that carried others' intents reads ahead, and so does one that carried none
        under contention: the writers the last fold served send their next intents while
        this one swapped alone (a few writers: every other swap), and its next fold finds
        them read beside its data PUT. A process that does not linger (``linger=0``) reads
        nothing ahead: it promises no request once a commit returned, and a read ahead goes
        on after the return."""

        def rule() -> float | None:
            policy = self.policy
            if not policy.read_ahead or policy.max_fold == 0 or policy.linger == 0:
                return None
            if not self.carried and not self.hints.contended(now):
                return None
            return self.hints.round_seconds

        return advise(rule, None)

    def linger(self, *, away: bool = False) -> bool:
        """Go on folding after our batch is done: we swapped last and our swap carried
        others' intents (more are likely on their way), no commit of ours is queued (its
        batch folds next anyway), and our caller pauses between commits (else its next
        commit folds within a round) or, ``away``, has not come back when it usually
        would have (its burst is over: nobody else folds what our swap left)."""

        def rule() -> bool:
            after = self.linger_after
            hints = self.hints
            paused = (
                away
                or after <= 0
                or (hints.pause is not None and hints.pause >= after * hints.round_seconds)
            )
            return (
                self.policy.linger > 0
                and self.policy.max_fold > 0
                and hints.swapped_last
                and self.carried
                and not self.queued()
                and paused
            )

        return advise(rule, False)

    def linger_pause(self, swapped: float, now: float) -> float | None:
        """How long a lingering folder pauses before its next LIST (the writers our last
        swap settled are sending their next intents), or None: it lingered ``linger``
        rounds since its last swap without finding any, and hands over."""

        def rule() -> float | None:
            one = self.hints.round_seconds
            if now - swapped >= self.policy.linger * one:
                return None
            return one * self.policy.look

        return advise(rule, None)

    def still_folding(self) -> bool:
        """Whether a lingering folder folds another round: it still swapped last (nobody
        else swapped since) and no commit of this process is queued."""
        return self.hints.swapped_last and not self.queued()
