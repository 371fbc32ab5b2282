"""The commit core's policy: *when* to list, wait, look and fold — liveness and cost only.

Every knob of group commit across processes is a field of :class:`FoldPolicy`, with the reason
it exists and the evidence for its value. Its advice is read by the core
(:mod:`._committer`) through :func:`advise`, which turns any exception into the safe default
(fold now, do not wait): nothing here can raise into a commit, and nothing here decides who
applies an intent — :mod:`._decide` does, and every one of its rules holds whatever this
module answers (the simulator's seeds run with random policies to show it).

What the policy knows about other processes is in :class:`Hints`: how long a fold takes here
(a *round*), whether others committed lately, whether this process swapped last. All of it is
learnt from this process's own requests and clocks; a hint that is wrong costs a round trip
(a 412 and a redrive, a wait that was not needed), never a commit.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from lakelock._layout import intent_ms, intents_from

__all__ = ["BatchWaits", "FoldPolicy", "Hints", "advise"]

log = logging.getLogger("lakelock.registry")

_T = TypeVar("_T")

#: Rounds within which what this process saw of the root still describes it: a folder at
#: work swaps about once a round and a waiter looks at least every round, so four cover a
#: commit's data PUT, its intent and its wait (docs/decisions/0034-few-writers.md).
RECENT = 4


@dataclass(frozen=True)
class FoldPolicy:
    """Every tuning knob of the commit loop's scheduling (docs/FORMAT.md, "Scheduling").

    Units: seconds, or *rounds* (what one fold-and-swap takes here, learnt as it goes). Each
    knob's default, and the measurements that set it, are in docs/decisions/ (its README
    maps every knob to its record).
    """

    #: Most intents of others one fold reads and applies (oldest first). Bounds a swap's
    #: bytes and the GETs one committer pays for others; with a swap every few tenths of a
    #: second at scale it bounds commits/s too, so it is set for a thousand writers
    #: (docs/decisions/0016-max-fold.md).
    max_fold: int = 512
    #: A committer lists at least this often even when it believes it is alone, so a
    #: crashed writer's intent is applied within about a second by whoever commits next.
    fold_interval: float = 1.0
    #: How long a lost race or another process's intent makes this process assume others
    #: commit here too (then it sends its intent first and waits a round before folding)
    #: (docs/decisions/0004-the-waiting-fold.md).
    contention_memory: float = 5.0
    #: Rounds a waiter lets the root stand still before it folds the older intents itself
    #: (their writer may be dead) (docs/decisions/0010-the-last-swapper-folds.md).
    max_waits: int = 8
    #: ... or this many times ``max_waits`` rounds of waiting in all, the root moving or not.
    patience: float = 2.0
    #: A folder under contention pauses this fraction of a round for the intents being sent
    #: right then (the writers its last swap settled), and lists what came since: one swap
    #: carries them instead of the next.
    gather: float = 0.3
    #: A waiter left behind by a swap lists only once the root stood still ``stagger`` times
    #: as long as its intent was made after the last swap's newest (one to two rounds): the
    #: oldest lists first and folds the others (docs/decisions/0007-stagger.md).
    stagger: float = 2.0
    #: While it waits for the root to stand still, a waiter looks this often (rounds): a
    #: folder at work applies its intent in its next swap. Timing looks on the swaps seen
    #: instead was tried and lost commits/s (docs/decisions/0020-timed-looks.md).
    look: float = 1 / 3
    #: A committer not yet contended that lists this many intents of others does not read
    #: them: it sends its own and waits like a contended one (processes starting at once).
    crowd: int = 8
    #: A swap leaves the watermark this long (or two rounds) behind what it listed, so
    #: intents whose PUT was still landing are the next fold's, not left to their writers
    #: (docs/decisions/0011-nobody-races-the-folder.md).
    watermark_lag: float = 1.0
    #: ... but never more than this many listed keys above it (each keeps a fate in the root,
    #: which every root read carries), besides the intents the fold carries. Below the
    #: number of intents pending at once, a swap passes over intents still landing and their
    #: writers fold alone; above it, every look at the root carries more bytes
    #: (docs/decisions/0012-lagging.md).
    lagging: int = 256
    #: After a swap that carried other processes' intents, the folder goes on folding (a
    #: LIST every ``look`` of a round, a swap whenever others' intents are pending) until
    #: this many rounds pass without one, or a commit of its own is queued: the next fold
    #: starts as soon as the writers its swap settled send their next intents, instead of
    #: after their stagger, and a folder that stops committing hands over without a stall.
    #: In production a daemon thread does it after ``commit()`` returns
    #: (``CommitQueue``): the process makes S3 requests after the call returned (0: never).
    #: Only a process whose caller pauses between commits lingers (``linger_after``)
    #: (docs/decisions/0019-linger.md).
    linger: int = 2
    #: ... but only if this process's caller pauses, on average, at least this many rounds
    #: between a commit's return and its next commit (0: whatever it does). A caller
    #: committing back to back folds again itself within a round, and a lingering fold then
    #: only delays its next commit.
    linger_after: float = 1.0
    #: A read or small create (the intents a fold reads, the objects its snapshot writes, a
    #: commit's intent and data file) still unanswered after this many times the median of
    #: the process's recent ones of its kind is sent again, and the first success wins
    #: (``_driver.Hedging``); 0: never. A batch waits for its slowest request, and at
    #: hundreds of writers a fold reads a hundred intents or more
    #: (docs/decisions/0014-hedged-requests.md).
    hedge: float = 2.0
    #: Whether a lone request (a commit's intent, its data files, a read alone) is hedged
    #: too, or only those of a batch: most of a commit's tail on S3 Standard is the tail of
    #: its own data and intent PUTs.
    hedge_alone: bool = True
    #: A folder reads its next fold ahead: as soon as its swap (carrying others' intents)
    #: lands it lists the intents the new root leaves pending, and reads those it has not
    #: parsed, while its caller goes on (``Ahead``); its next fold, within a round, finds
    #: them answered instead of listing and reading then (docs/decisions/0017-read-ahead.md).
    read_ahead: bool = True
    #: The hand-over: a process whose swap is still the root after a race nobody won (S3
    #: answered 409 or 503 to every racer) still swapped last, and folds again at once. Off,
    #: any root read makes it a waiter, waiting for the oldest pending intent's writer — who,
    #: at scale, waits for a folder too: no swap for most of a second after such a race
    #: (docs/decisions/0018-hand-over-by-fact.md).
    handover: bool = True
    #: The round assumed before one is measured (seconds), and its bounds. A fold-and-swap
    #: takes ~0.15 s or more on S3 Standard, and a first fold of hundreds of intents longer:
    #: assumed too short, waiters in a start-up burst run out of patience before the first
    #: fold lands and each folds alone (docs/decisions/0015-first-round.md).
    first_round: float = 0.1
    max_round: float = 5.0
    #: Other processes' intents kept parsed per process (a redrive does not re-read them).
    intent_cache: int = 4096

    def __post_init__(self) -> None:
        for name in ("read_ahead", "handover", "hedge_alone"):  # 0 and 1 from a command line
            value = getattr(self, name)
            if value not in (0, 1):
                raise ValueError(f"{name} must be true or false, got {value!r}")
            object.__setattr__(self, name, bool(value))
        counts = ("max_fold", "max_waits", "crowd", "lagging", "linger", "intent_cache")
        for name in counts:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
        if min(self.max_fold, self.max_waits, self.lagging, self.linger) < 0 or self.crowd < 1:
            raise ValueError("max_fold, max_waits, lagging and linger must be >= 0, crowd >= 1")
        durations = (
            self.fold_interval,
            self.contention_memory,
            self.gather,
            self.stagger,
            self.linger_after,
        )
        if min(durations) < 0:
            raise ValueError("durations and fractions must be >= 0")
        if self.hedge != 0 and not self.hedge > 1:
            raise ValueError(f"hedge must be 0 (never) or > 1, got {self.hedge!r}")
        if not 0 < self.look <= 1 or self.first_round <= 0 or self.patience < 1:
            raise ValueError("look must be in (0, 1], first_round > 0, patience >= 1")


@dataclass
class Hints:
    """What one process has learnt about the others (liveness hints, never trusted for
    safety)."""

    round_seconds: float
    #: Until when (this process's clock) others are assumed to be committing here.
    contended_until: float = float("-inf")
    #: When this process last listed intents (its clock; -inf: never).
    listed_at: float = float("-inf")
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

    def learn_round(self, seconds: float, policy: FoldPolicy) -> None:
        """A fold-and-swap (or a wait another's swap ended) took ``seconds``."""
        seconds = min(max(seconds, 0.0), policy.max_round)
        self.round_seconds = 0.8 * self.round_seconds + 0.2 * seconds

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

    def contend(self, now: float, policy: FoldPolicy) -> None:
        self.contended_until = max(self.contended_until, now + policy.contention_memory)


@dataclass
class BatchWaits:
    """How long one batch has waited for other processes (liveness bookkeeping)."""

    #: Rounds the root stood still while waiting for an older intent's writer, and the root
    #: version that wait started from.
    waits: int = 0
    wait_version: int | None = None
    #: Rounds waited in all (a look counts its part of a round).
    waited: float = 0.0
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
    #: Unused slot for the policy's own notes (kept out of the safety state).
    notes: dict[str, float] = field(default_factory=dict)


def advise(what: Callable[[], _T], default: _T) -> _T:
    """The policy's answer, or ``default`` if computing it raised: a policy bug costs
    liveness (a fold sooner than needed), never a commit."""
    try:
        return what()
    except Exception:
        log.exception("commit scheduling advice failed; folding now instead")
        return default


class Liveness:
    """The policy's rules, applied to one process's hints: each answers a question the core
    asks (wait or fold? list now? how long to sleep?) and nothing else."""

    def __init__(self, policy: FoldPolicy, hints: Hints, rng: random.Random) -> None:
        self.policy = policy
        self.hints = hints
        self.rng = rng

    # -- before the first look ------------------------------------------------------------

    def wait_first(self, now: float, *, knows_format2: bool, all_intents: bool) -> bool:
        """Under contention, with a folder at work, and unless this process swapped last, a
        committer sends its intents and looks at the root about a round later: another
        process is about to fold and swap, and a commit somebody else folds costs its intent
        PUT and one GET. With no folder at work (a few writers, pausing between commits),
        nobody would fold them: it reads the root, folds what is pending and swaps itself."""
        return (
            self.policy.max_fold > 0
            and self.hints.contended(now)
            and self.folder_at_work(now)
            and not self.hints.swapped_last
            and knows_format2
            and all_intents
        )

    def folder_at_work(self, now: float) -> bool:
        """Whether another process is likely to swap soon: a swap of another process this
        process saw was made within the last :data:`RECENT` rounds. Older than that (a few
        writers pausing between commits), waiting for a fold costs rounds that no swap ends:
        the committer reads the root and swaps itself, and the waiting protocol engages
        again once its swap collides (docs/decisions/0034-few-writers.md)."""
        return now - self.hints.others_swapped_at <= RECENT * self.hints.round_seconds

    def use_known_root(self, now: float) -> bool:
        """A first attempt starts from the root this process last read or wrote (no GET) when
        it swapped last or nobody else seems to commit here; a stale one costs a 412. But a
        root swapped in more than :data:`RECENT` rounds ago, where others were seen swapping
        lately, is likely stale (a few writers taking turns, pausing between commits): its
        GET costs less than a 412 and a redrive."""
        hints = self.hints
        if hints.swapped_last:
            others = now - hints.others_swapped_at < self.policy.contention_memory
            return not (others and now - hints.root_seen_at > RECENT * hints.round_seconds)
        return not hints.contended(now)

    # -- listing ------------------------------------------------------------------------

    def should_list(self, now: float, *, attempts: int, root_moved: bool) -> bool:
        """Look for other processes' intents: after a lost race, when someone else has
        committed since our last write, when contended, and at least every
        ``fold_interval`` (so a crashed writer's intent is applied by somebody)."""
        return self.policy.max_fold > 0 and (
            attempts > 1
            or self.hints.contended(now)
            or root_moved
            or now - self.hints.listed_at >= self.policy.fold_interval
        )

    def send_before_listing(self, now: float, *, root_updated: float | None) -> bool:
        """Send our intents before we LIST (others then see them, and all but the oldest
        wait): when contended, or on a process's first fold if the root moved lately
        (processes that start together). Never when we swapped last: ours go with our
        snapshot, and our next fold takes whatever came meanwhile."""
        if self.hints.swapped_last:
            return False
        first = self.hints.listed_at == float("-inf") and self.recent(now, root_updated)
        return (self.hints.contended(now) and self.folder_at_work(now)) or first

    def recent(self, now: float, root_updated: float | None) -> bool:
        """Whether the root moved within ``contention_memory`` (by its writer's clock)."""
        return root_updated is not None and now - root_updated < self.policy.contention_memory

    def crowd(self, others: int, *, ours_unsent: bool) -> bool:
        """Not contended until now (our intents are not out) and a crowd is pending: send
        ours and wait like a contended committer, instead of reading everyone's."""
        return others >= self.policy.crowd and not self.hints.swapped_last and ours_unsent

    def wait_for_older(
        self,
        waits: BatchWaits,
        attempts: int,
        max_attempts: int,
        *,
        older: str,
        ours: str,
        first_fold: bool,
    ) -> bool:
        """An older intent is pending: its writer folds everything pending, ours too, in its
        next swap. Wait for that (one root GET a round) instead of reading every intent and
        racing it — unless we swapped last (then we fold now: we know the root and are
        committing; that writer sleeps between two looks; a race nobody won leaves us the
        last swapper, the hand-over), or our patience ran out, or this
        is our first fold and that intent was made long before ours (its writer is not
        folding, or it would have been applied)."""
        return (
            self.patient(waits, attempts, max_attempts)
            and not self.hints.swapped_last
            and not (first_fold and self.long_before(older, ours))
        )

    def gather(self, now: float, *, room: bool) -> float:
        """Seconds a folder under contention pauses for the intents being sent right now
        (the writers its last swap settled) before listing what came since; 0: none."""
        if self.hints.swapped_last or not self.hints.contended(now) or not room:
            return 0.0
        return self.hints.round_seconds * self.policy.gather

    def long_before(self, older: str, ours: str) -> bool:
        return intent_ms(older) < intent_ms(ours) - 1000 * self.lag()

    def linger(self, *, carried: bool, own_queued: bool) -> bool:
        """Go on folding after our batch is done: we swapped last and our swap carried
        others' intents (more are likely on their way), no commit of ours is queued (its
        batch folds next anyway), and our caller pauses between commits (else its next
        commit folds within a round)."""
        after = self.policy.linger_after
        paused = after <= 0 or (
            self.hints.pause is not None and self.hints.pause >= after * self.hints.round_seconds
        )
        return (
            self.policy.linger > 0
            and self.policy.max_fold > 0
            and self.hints.swapped_last
            and carried
            and not own_queued
            and paused
        )

    def linger_pause(self, swapped: float, now: float) -> float | None:
        """How long a lingering folder pauses before its next LIST (the writers our last
        swap settled are sending their next intents), or None: it lingered ``linger``
        rounds since its last swap without finding any, and hands over."""
        one = self.hints.round_seconds
        if now - swapped >= self.policy.linger * one:
            return None
        return one * self.policy.look

    def read_ahead(self, now: float, *, carried: bool) -> float | None:
        """Whether a folder reads its next fold ahead after its swap, and for how long what
        it read answers for now (a round: an older listing misses too much); None: not. A
        swap that carried others' intents reads ahead, and so does one that carried none
        under contention: the writers the last fold served send their next intents while
        this one swapped alone (a few writers: every other swap), and its next fold finds
        them read beside its data PUT."""
        if not self.policy.read_ahead or self.policy.max_fold == 0:
            return None
        if not carried and not self.hints.contended(now):
            return None
        return self.hints.round_seconds

    # -- waiting ---------------------------------------------------------------------------

    def patient(self, waits: BatchWaits, attempts: int, max_attempts: int) -> bool:
        """Whether a waiter goes on waiting for an older intent's writer to fold ours: while
        the root has not stood still for ``max_waits`` rounds, nor the waiter waited
        ``patience`` times that many rounds in all, nor used half its attempts (so it always
        folds itself before it would give up)."""
        p = self.policy
        return (
            waits.waits < p.max_waits
            and waits.waited < p.patience * p.max_waits
            and attempts < max_attempts // 2
        )

    def poll(self, waits: BatchWaits, attempts: int) -> float:
        """How long a waiting committer sleeps before it looks at the root again: what its
        stagger set; after sending its intent, about a round (looking sooner mostly finds it
        pending); waiting for an older intent's writer, up to a round. Jittered."""
        one = self.hints.round_seconds
        if waits.next_wait is not None:
            seconds, waits.next_wait = waits.next_wait, None
            waits.still += seconds
            waits.waited += seconds / one
            return seconds
        if attempts <= 1:
            return one * self.rng.uniform(0.9, 1.1)
        return one * self.rng.uniform(0.5, 1.0)

    def stagger(
        self,
        waits: BatchWaits,
        attempts: int,
        max_attempts: int,
        *,
        version: int,
        oldest: str,
        newest_decided: str,
        passed_over: bool,
    ) -> bool:
        """Whether a waiter whose intents are out and pending waits longer before it lists
        (and sets how long in ``waits.next_wait``). The oldest pending intent's writer
        should fold next: each waiter lists only once the root stood still ``stagger``
        times as long as its intent was made after the newest the last swap decided (one to
        two rounds: a folder at work swaps within a round). Meanwhile it looks every
        ``look`` of a round. One a fold passed over lists at once (no other fold will)."""
        p = self.policy
        if p.stagger <= 0 or not self.patient(waits, attempts, max_attempts):
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

    # -- the watermark ---------------------------------------------------------------------

    def lag(self) -> float:
        return max(self.policy.watermark_lag, 2 * self.hints.round_seconds)

    def watermark(
        self, current: str, listed: tuple[str, ...], now: float, *, carried: int = 0
    ) -> str:
        """The watermark to propose: the highest key listed, but none made later than the
        lag before the fold (intents still landing then are the next fold's), leaving at
        most ``lagging`` listed keys above it besides the ``carried`` intents of others the
        fold applies. :func:`._decide.bound_watermark` bounds it."""
        if not listed:
            return current
        newest = listed[-1]
        if self.policy.watermark_lag <= 0:
            return max(current, newest)
        lagged = intents_from(int((now - self.lag()) * 1000))
        keep = self.policy.lagging + carried
        if len(listed) > keep:
            lagged = max(lagged, listed[-keep - 1])
        return max(current, min(newest, lagged))
