"""Group commit across processes: folding other processes' intents into this process's
swap, and waiting for theirs to carry ours (docs/FORMAT.md, "Intents").

Under contention a committer sends its intent and looks at the root about one round later
(:meth:`Folding._may_wait_first`); only if nobody applied it does it LIST the intents after the
watermark. The process that made the last swap folds every pending intent at once; otherwise
the writer of the oldest pending intent does (after giving those being sent a moment). The
others wait, reading only the root, and fold themselves only once their patience runs out
(:meth:`Folding._patient`: the root stood still for ``max_waits`` rounds; its writer may be
dead). When a swap leaves intents pending, their writers look at the root every third of a
round and list only once it has stood still for one to two rounds, by how late their intents
were made (:meth:`Folding._stagger`), so the oldest lists first and they seldom race a folder
at work. A swap leaves the watermark a little behind what it listed
(:meth:`Folding._watermark`), so intents still landing then are the next fold's, not left to
their writers. A committer that was not contended and finds a crowd pending sends its intent
and waits too, and so does a process's first fold on a lake that moved lately (processes
starting together)."""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from lakelock._registry._batch import BatchState, Fold, Pending, Wait, seconds_of
from lakelock._registry._changes import Change, reused_commit_id
from lakelock._registry._document import IntentFate, RegistryDoc
from lakelock._registry._intents import INTENT_PREFIX, intent_ms, parse_intent
from lakelock._registry._manifest import Manifest
from lakelock._registry._objects import Objects
from lakelock._retry import RetryPolicy
from lakelock._s3 import ListedObject, ObjectStore
from lakelock.errors import CommitIdReusedError, NotFoundError, RegistryCorruptError

__all__ = ["Folding"]

# Other processes' intents kept parsed, so a committer that loses a race does not read them
# again in its next round.
INTENT_CACHE = 4096

#: A committer not under contention that finds this many intents of other processes pending
#: does not read them all: it sends its own and waits like a contended one (a crowd of
#: processes starting at once would otherwise each read everyone's intents).
CROWD = 8

#: The most listed intents a swap leaves above the watermark (see Folding._watermark).
LAGGING = 128

#: A waiter whose intent is pending looks at the root this often (in rounds) while it waits
#: for the root to stand still before it lists: a folder at work applies it in its next swap.
LOOK = 1 / 3

#: A waiter folds the pending intents itself after ``max_waits`` rounds in which the root did
#: not move, or after this many times ``max_waits`` rounds of waiting in all, the root moving
#: or not (see Folding._patient).
PATIENCE = 2


class Folding:
    """The cross-process half of the commit loop, mixed into :class:`Registry` (which sets
    these attributes): when to look for other processes' intents, reading and validating
    them, and waiting for an older intent's writer to fold ours."""

    store: ObjectStore
    retry: RetryPolicy
    objects: Objects
    max_fold: int
    fold_interval: float
    intent_ttl: float
    contention_memory: float
    max_waits: int
    gather: float
    stagger: float
    watermark_lag: float
    _clock: Callable[[], float]
    _queue: list[Pending]
    _queue_lock: threading.Lock
    _sending: set[str | None]
    _known: tuple[RegistryDoc, str] | None
    _swapped_last: bool
    _listed_at: float
    _contended_until: float
    _round_seconds: float
    _intents: OrderedDict[str, Change]

    def _remember(self, key: str, manifest: Manifest) -> None:
        self.objects.remember(key, manifest)

    def _may_wait_first(self, state: BatchState) -> bool:
        known = self._known
        return (
            self.max_fold > 0
            and not self._swapped_last
            and known is not None
            and known[0].format_version > 1
            and all(p.intent is not None for p in state.pending)
        )

    def _learn_round(self, seconds: float) -> None:
        self._round_seconds = 0.8 * self._round_seconds + 0.2 * min(max(seconds, 0.0), 5.0)

    def _poll(self, state: BatchState) -> float:
        """How long a waiting committer sleeps before it looks at the root again: as long as
        its stagger says (see :meth:`_stagger`); after sending its intent, about one round
        (what it takes, here, until a swap applies an intent: looking earlier mostly finds it
        pending); waiting for an older intent's writer, a round at most. Jittered, so that
        waiters do not look all at once."""
        if state.stagger is not None:
            seconds, state.stagger = state.stagger, None
            state.still += seconds
            state.waited += seconds / self._round_seconds
            return seconds
        if state.attempts <= 1:
            return self._round_seconds * random.uniform(0.9, 1.1)
        return self._round_seconds * random.uniform(0.5, 1.0)

    def _patient(self, state: BatchState) -> bool:
        """Whether a waiter goes on waiting for an older intent's writer to fold ours: while
        the root has not stood still for ``max_waits`` rounds, nor the waiter waited
        ``PATIENCE`` times that many rounds in all, nor used half its retry budget (so it
        always folds itself before it would give up)."""
        return (
            state.waits < self.max_waits
            and state.waited < PATIENCE * self.max_waits
            and state.attempts < self.retry.max_attempts // 2
        )

    def _stagger(self, doc: RegistryDoc, state: BatchState) -> bool:
        """Whether a committer whose intents are out and still pending waits a while longer
        before it lists (and sets how long). The writer of the oldest pending intent should
        fold next, if nobody is folding: each waiter can tell how long after the newest intent
        the last swap decided its own was made, and it lists only once the root has stood
        still ``stagger`` times that long (at least one round: a folder at work swaps within
        a round, and a waiter does not race it; at most two). So the oldest lists first and
        folds the others, who find their commits applied when they look instead of each
        listing. Meanwhile it looks at the root every ``LOOK`` (a third) of a round: a folder
        at work applies ours in its next swap. Each time the root moves without our intents, the
        stillness is counted again from that look. One that a fold passed over (its intent is
        at or below the watermark: its PUT landed more than ``watermark_lag`` after it was
        made, and after that fold's LIST) lists at once, since no other fold will."""
        if (
            self.stagger <= 0
            or state.wait_started is None  # not waiting for another process: commit now
            or not doc.fates
            or not state.pending
            or not all(p.intent is not None and p.intent_sent for p in state.pending)
            or not self._patient(state)
        ):
            return False
        one = self._round_seconds
        if state.watched_version != doc.version:
            state.watched_version, state.still, state.still_needed = doc.version, 0.0, 0.0
            oldest = min(p.intent for p in state.pending if p.intent is not None)
            if oldest <= doc.watermark:
                return False  # passed over: no other fold will list it
            newest = _newest_decided(doc)
            behind = max(0.0, (intent_ms(oldest) - intent_ms(newest)) / 1000) if newest else 0.0
            state.still_needed = min(max(self.stagger * behind, one), 2 * one)
        left = state.still_needed - state.still
        if left < 1e-6:
            return False  # nobody swapped for that long: list (and fold)
        state.stagger = min(one * LOOK, left)
        return True

    def _watermark(self, doc: RegistryDoc, fold: Fold, seconds: float) -> str:
        """The watermark a swap sets: the highest key its fold listed, but no key made later
        than ``watermark_lag`` seconds before the fold (``seconds``). An intent made before the
        LIST whose PUT landed after it sorts below the listed keys; left above the watermark,
        it is listed by the next fold, instead of passed over (left to its own writer to fold
        alone, racing the others). On a slow store (long rounds) the lag is two rounds; and
        it never leaves more than ``LAGGING`` of the keys listed above the watermark (commits
        coming fast, or this clock behind the writers'). The intents it keeps above the
        watermark are decided, and their fates stay in the root (see prune_fates), so the
        next fold skips them unread. ``watermark_lag = 0``: no lag, the highest key listed."""
        if not fold.listed:
            return doc.watermark
        newest = fold.listed[-1]
        if self.watermark_lag <= 0:
            return max(doc.watermark, newest)
        lag = max(self.watermark_lag, 2 * self._round_seconds)
        lagged = f"{INTENT_PREFIX}{max(0, int((seconds - lag) * 1000)):013x}"
        if len(fold.listed) > LAGGING:
            # However the clocks disagree or fast commits come: no more than LAGGING keys
            # stay above the watermark (each keeps its fate in the root, and is listed again).
            lagged = max(lagged, fold.listed[-LAGGING - 1])
        return max(doc.watermark, min(newest, lagged))

    def _should_list(self, doc: RegistryDoc, state: BatchState, seconds: float) -> bool:
        """Whether this attempt looks for other processes' intents: after a lost race,
        when someone else has committed since our last write, and at least every
        ``fold_interval`` seconds (so a crashed writer's intent is applied by somebody)."""
        known = self._known
        return self.max_fold > 0 and (
            state.attempts > 1
            or self._contended(seconds)
            or known is None
            or known[0].version != doc.version
            or seconds - self._listed_at >= self.fold_interval
        )

    def _send_intents(
        self, pending: Sequence[Pending], also: Sequence[tuple[str, bytes]] = ()
    ) -> None:
        """Create the intents (and delta manifests) of ``pending`` not created yet, and
        ``also`` in the same parallel round. They count as sent before the PUTs go out: an
        intent whose answer is lost may exist, and others may fold it."""
        writes = [w for p in pending for w in p.unwritten]
        for p in pending:
            p.intent_sent = p.intent_sent or bool(p.unwritten)
        self.objects.create_all([*writes, *also])
        for p in pending:
            p.unwritten = []

    def _recent(self, doc: RegistryDoc, seconds: float) -> bool:
        """Whether the root moved within ``contention_memory`` seconds (by the time its last
        writer put in it: a hint, as clocks may disagree)."""
        try:
            return seconds - seconds_of(doc.updated_at) < self.contention_memory
        except ValueError:  # no commit yet
            return False

    def _contended(self, seconds: float) -> bool:
        """Whether other processes have been committing here lately (a lost race, or their
        intents found): then a first attempt reads the root afresh and folds in what is
        pending, so one swap carries everyone's commits instead of each losing in turn."""
        return seconds < self._contended_until

    def _foreign_intents(self, doc: RegistryDoc, state: BatchState, seconds: float) -> Fold:
        """The pending intents of other processes, oldest first (at most ``max_fold``), read
        and ready to apply; those that cannot be applied get their fate at once."""
        decided = {f.key for f in doc.fates}
        first = self._listed_at == float("-inf")
        self._listed_at = seconds
        listed = self._list_intents(doc.watermark, self.max_fold, decided)
        own = self._own_intents(state)
        todo = [o for o in listed if o.key not in own and o.key not in decided]
        if todo:
            self._contended_until = seconds + self.contention_memory
        if (
            len(todo) >= CROWD
            and not self._swapped_last
            and state.pending
            and all(p.intent is not None and not p.intent_sent for p in state.pending)
        ):
            # Not contended until now (our intents are not out), and a crowd is pending: the
            # processes committing here fold them, ours too once it is out, so we wait for
            # them like any contended committer instead of each reading everyone's intents.
            self._send_intents(state.pending)
        mine = sorted(p.intent for p in state.pending if p.intent is not None and p.intent_sent)
        paused = 0.0
        if (
            mine
            and todo[:1]
            and todo[0].key < mine[0]
            and self._patient(state)
            and not self._swapped_last
            and not (first and self._long_before(todo[0].key, mine[0]))
        ):
            # An older intent is pending: its writer folds everything pending (ours too)
            # in its next swap. Waiting for that, instead of reading every intent and racing
            # it, keeps a crowd of writers from each reading everyone's intents (N^2 GETs).
            # After max_waits rounds in which the root did not move, we fold anyway (its
            # writer may have died). Unless we made the last swap: then we fold now. Our
            # root is current as far as we know (no GET), we are committing right now, and
            # the older intent's writer is asleep between two looks; so the process that
            # swapped last keeps folding for everybody while it commits. (A process's first
            # fold waits only for intents made about when its own was, by processes starting
            # with it: an older one's writer is not folding, or it would be applied.)
            state.waits += 1
            state.waited += 1
            state.wait_version = doc.version
            if state.wait_started is None:
                state.wait_started = state.looked_at = seconds
            raise Wait
        if (
            mine
            and not self._swapped_last  # it folds again soon: what comes meanwhile waits
            and self._contended(seconds)
            and self.gather > 0
            and len(todo) < self.max_fold
        ):
            # We fold for everybody this round. The writers whose commits the last swap
            # settled are sending their next intents about now: give them a moment, then
            # list what came since (a LIST from where this one ended), so this swap carries
            # them too instead of leaving them to the next round.
            paused = self._round_seconds * self.gather
            self.retry.sleep(paused)
            after = listed[-1].key if listed else doc.watermark
            more = self._list_intents(after, self.max_fold - len(todo), decided)
            own = self._own_intents(state)
            listed += more
            todo += [o for o in more if o.key not in own and o.key not in decided]
        fold = Fold(listed=tuple(o.key for o in listed), paused=paused)

        loaded = self._read_intents(todo, seconds) if todo else []
        for key, found in loaded:
            if isinstance(found, str):
                fold.fates.append(IntentFate(key, "rejected", doc.version + 1, seconds, found))
                continue
            self._intents[key] = found
            while len(self._intents) > INTENT_CACHE:
                self._intents.popitem(last=False)
            version = self._recorded_version(doc, found)
            if isinstance(version, CommitIdReusedError):  # its id names another change
                fold.fates.append(
                    IntentFate(key, "rejected", doc.version + 1, seconds, str(version))
                )
                continue
            if version is not None:  # applied already, by another intent of its commit id
                fold.fates.append(IntentFate(key, "applied", version, seconds))
                continue
            fold.pending.append(Pending((found,), intent=key, foreign=True))
        return fold

    def _read_intents(
        self, todo: list[ListedObject], seconds: float
    ) -> list[tuple[str, Change | str]]:
        """Each listed intent read (in parallel, or from the cache) as the change it asks
        for, or the reason it cannot be applied: expired, gone, unreadable."""

        def load(listed_object: ListedObject) -> tuple[str, Change | str]:
            key = listed_object.key
            if listed_object.last_modified.timestamp() < seconds - self.intent_ttl:
                return key, f"expired: pending for more than {self.intent_ttl:.0f} s"
            cached = self._intents.get(key)
            if cached is not None:
                return key, cached
            try:
                body = self.store.get(key).body
                change, manifest = parse_intent(key, body, bucket=self.store.bucket)
            except NotFoundError:
                return key, "gone: the intent object was deleted before it was applied"
            except RegistryCorruptError as error:
                return key, f"unreadable: {error}"
            self._remember(key, manifest)
            return key, change

        with ThreadPoolExecutor(min(16, len(todo))) as pool:
            return list(pool.map(load, todo))

    def _own_intents(self, state: BatchState) -> set[str | None]:
        """This process's intents: the batch's, and those of commits waiting for the next
        batch (they go with it: reading them as others' would cost a GET each for nothing).
        Taken after a LIST: an intent of ours that the LIST shows was registered as being
        sent before its PUT, so it is in one of these sets by then."""
        with self._queue_lock:
            queued = {p.intent for p in self._queue} | self._sending
        return {p.intent for p in state.pending} | queued

    def _list_intents(self, after: str, limit: int, decided: set[str]) -> list[ListedObject]:
        """The intents after ``after``, oldest first, up to the ``limit``-th one not in
        ``decided``: those a recent swap decided (kept above the watermark, see
        :meth:`_watermark`) are listed too, but do not use up a fold's share."""
        found: list[ListedObject] = []
        undecided = 0
        page = min(1000, limit + len(decided))
        for listed_object in self.store.list(INTENT_PREFIX, start_after=after, page_size=page):
            if undecided >= limit:
                break
            found.append(listed_object)
            undecided += listed_object.key not in decided
        return found

    def _long_before(self, older: str, ours: str) -> bool:
        """Whether intent ``older`` was made longer before ``ours`` than the watermark's
        lag: not by a process that started with ours."""
        lag_ms = 1000 * max(self.watermark_lag, 2 * self._round_seconds)
        return intent_ms(older) < intent_ms(ours) - lag_ms

    def _recorded_version(
        self, doc: RegistryDoc, change: Change
    ) -> int | CommitIdReusedError | None:
        """The version that applied ``change``'s commit id, if one did. A listed intent is
        above the watermark, so its own fate would be in the root; a caller-chosen commit id
        may also have been applied by another intent (a re-run), which the commit-id index
        records. A generated id belongs to this intent alone: no lookup needed."""
        record = doc.commit(change.commit_id)
        if record is not None:
            return reused_commit_id(record, change) or record.version
        if change.generated_id:
            return None
        dataset = doc.datasets.get(change.dataset) if doc.format_version > 1 else None
        entry = self.objects.commit_entry(dataset, change.commit_id) if dataset else None
        return None if entry is None else reused_commit_id(entry, change) or int(entry["version"])


def _newest_decided(doc: RegistryDoc) -> str:
    """The newest intent the last swap decided; if it decided none (a commit spanning
    datasets, a rename), the newest whose fate the root records; else the watermark ("":
    neither yet). A waiter measures how late its own intent was made from it."""
    last = max((f.key for f in doc.fates if f.version == doc.version), default="")
    return last or max((f.key for f in doc.fates), default="") or doc.watermark
