"""The pure core of the hierarchical path lock: paths, the lineage rule, modes, plans, grants.

Nothing here blocks, sleeps, or knows about threads or asyncio. ``_sync`` and ``_async`` wrap
it in a mutex and a wait; the distributed S3 lock reuses :func:`normalize_path`,
:class:`LockRequest`, :func:`requests_conflict`, :func:`lock_plan` and :func:`compatible`.

The specification
-----------------
A request reads a set of paths R and writes a set of paths W. Two requests conflict iff a path
of one lies in the *lineage* (an ancestor, itself, or a descendant) of a path of the other and
at least one of the two writes its path. :func:`requests_conflict` states exactly that, pair by
pair; it is the oracle everything else is checked against. Paths are normalised to ``/a/b``:
a leading ``/`` (added if missing), no trailing ``/``, and ``.``, ``..`` or empty segments are
rejected. ``/`` is the root and lies in every path's lineage.

Paths are compared by what they name, not by their text (:func:`path_key`): each segment in
Unicode NFC, and a ``col=value`` segment by its value decoded from Hive's escapes. So
``p=a%2fb`` and ``p=a%2Fb``, or ``p=café`` spelt composed and decomposed, are one path to every
decision here (conflicts, lineage, plans), as they are one partition to an engine that decodes
Hive paths and to a reader who sees them printed. Requests keep their text as given.

Intents and modes
-----------------
At each path x, a request has a set of *intents* (the post's names in brackets):

- IS, read-ancestor (R_A): it reads some path strictly below x;
- IX, write-ancestor (W_A): it writes some path strictly below x;
- S, read (R): it reads x itself, and so everything below x;
- X, write (W): it writes x itself.

Two intents clash at x iff one of them is about x itself (S or X) and one of them writes (IX or
X). Two "below" intents never clash at x: their paths may be siblings, and if they are in each
other's lineage a deeper path on the way down shows it. The base table is therefore Gray's::

          IS  IX  S   X
    IS    ok  ok  ok  --
    IX    ok  ok  --  --
    S     ok  --  ok  --
    X     --  --  --  --

A request's *mode* at x is its whole intent set, reduced without changing what it clashes
with: S implies IS's clashes and so does IX, X implies everything. Five modes remain, the
IS, IX, S, X of the post plus **SIX** = S + IX (Gray's "share and intention exclusive"):
reading x while writing something below it. Two modes are compatible iff no intent of one
clashes with an intent of the other::

          IS  IX  S   SIX X
    IS    ok  ok  ok  ok  --
    IX    ok  ok  --  --  --
    S     ok  --  ok  --  --
    SIX   ok  --  --  --  --
    X     --  --  --  --  --

*Why the post's four modes are not enough.* Its rules give a path one mode, with W and W_A
taking precedence over R: a request that reads ``/a`` and writes ``/a/b`` gets
``/:W_A, /a:W_A, /a/b:W``, which loses the read of ``/a``. A second request writing ``/a/c``
gets ``/:W_A, /a:W_A, /a/c:W`` and the two run together, although ``/a/c`` lies below the read
``/a``: a torn read. With SIX at ``/a`` they clash there. (The post's earlier per-path
algorithm, one R or W lock per path of the request, instead takes R(/a) and W_A(/a) for the
same request and blocks on itself.)

Exactness (the lock blocks exactly the conflicting pairs). If a and b conflict, say through
p of a and q of b with p an ancestor-or-self of q: at x = p, a has S or X, b has S or X
(q = p) or IS or IX (q below p), and whichever of them writes contributes X or IX, so their
modes clash at p. Conversely, a clash at x is a clash of two intents, one about x itself (that
side has path x) and one that writes (x itself, or a path below x); the other side's path is
x or below it, so in x's lineage, and the requests conflict. ``tests/test_pathlock_core.py``
checks this for every pair of requests over a tree of 15 paths.

Reduction. Before planning, a request drops each read path at or below another of its paths,
and each written path strictly below another of its written paths. No conflict changes: a path
q of another request in the lineage of a dropped path d is also in the lineage of the path c
that covers d (either q is below d and so below c, or q and c are both ancestors-or-self of d,
so one of them is an ancestor-or-self of the other), and the write that made d conflict is
still there: it is q's, or d was written and then so is c. No lock is taken twice over.

Plans, order and deadlock
-------------------------
A request's *plan* is one (path, mode) step for every path on the way to its paths, in the
total order ancestors first (by depth), then lexicographically by segments. A holder takes its
steps in that order, waiting for at most one at a time. The post's proof assumes a task waits
only for holders; here it may also wait behind an earlier waiter, which changes nothing:

- Invariant: every queued waiter clashes with a holder of its node or an earlier waiter there
  (otherwise it would have been granted). Following "an earlier waiter" strictly decreases
  arrival numbers, so every waiter at x waits, directly or through earlier waiters at x, for
  some holder H of x.
- H holds x, so whatever H waits for comes later than x in the total order. In a deadlock
  every task waits, so this would give an endless strictly increasing sequence of nodes, of
  which there are finitely many.

Work per step is constant: it does not grow with the number of holders, waiters or
descendants.

Grants and fairness
-------------------
Each path has a :class:`Node` with its holders and its FIFO of waiters. A request for mode m
is granted at once iff m is compatible with every holder and with every waiter already queued
there; otherwise it queues. When the node changes, waiters are granted in arrival order while
compatible with the holders and with every waiter still queued ahead of them. So a request
waits only for holders and waiters whose modes clash with its own, which by exactness are
requests it conflicts with; and a later arrival overtakes a waiter only if compatible with it,
so it never delays it: a writer is delayed only by what held or was queued at its node when it
arrived, and a steady stream of readers cannot starve it. Both rules cost O(1) per request and
per grant: the node keeps a mask of held modes and one FIFO per mode, and once a mode's first
waiter must stay, every later waiter of that mode must too, so the scan drops that FIFO.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import unicodedata
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Final, Protocol, TypeAlias

from lakelock._names import escape_partition_value, unescape_partition_value
from lakelock.errors import InvalidNameError

__all__ = [
    "Claim",
    "ExactIndex",
    "LockRequest",
    "Mode",
    "Node",
    "PathKey",
    "PathLike",
    "Waiter",
    "compatible",
    "in_lineage",
    "lock_plan",
    "normalize_path",
    "path_key",
    "requests_conflict",
]

PathLike: TypeAlias = str | PurePosixPath
#: A normalised path as its segments: ``/a/b`` is ``("a", "b")``, the root is ``()``.
PathKey: TypeAlias = tuple[str, ...]


# --- paths -------------------------------------------------------------------------------------


def _split(path: PathLike) -> PathKey:
    if isinstance(path, PurePosixPath):
        text = path.as_posix()
    elif isinstance(path, str):
        text = path
    else:
        raise TypeError(f"a path is a str or PurePosixPath, not {type(path).__name__}")
    if text == "/":
        return ()
    if not text:
        raise InvalidNameError(path, "empty path")
    body = text[1:] if text[0] == "/" else text
    if body.endswith("/"):
        body = body[:-1]
    segments = tuple(body.split("/"))
    for segment in segments:
        if segment in ("", ".", ".."):
            what = "an empty segment" if not segment else f"a {segment!r} segment"
            raise InvalidNameError(path, f"paths may not contain {what}")
    return segments


def _join(key: PathKey) -> str:
    return "/" + "/".join(key)


@functools.lru_cache(maxsize=65536)
def _segment_key(segment: str) -> str:
    """What ``segment`` names, spelt once: in NFC, a ``col=value`` segment's value decoded
    from Hive's escapes and escaped again as the registry files it (``%2f`` and ``%2F`` are
    one ``%2F``). A value that does not decode (a bad ``%`` escape, invalid UTF-8) is kept
    as it is, in NFC. Keys are only compared, never stored, so two spellings meeting in one
    key only ever add a conflict."""
    column, equals, value = segment.partition("=")
    if not equals:
        return unicodedata.normalize("NFC", segment)
    with contextlib.suppress(InvalidNameError):
        decoded = unicodedata.normalize("NFC", unescape_partition_value(value))
        value = escape_partition_value(decoded)
    return unicodedata.normalize("NFC", f"{column}={value}")


def path_key(path: PathLike) -> PathKey:
    """What ``path`` names, as the segments the lock compares (module docstring): two
    spellings of one partition have one key."""
    return tuple(_segment_key(segment) for segment in _split(path))


def normalize_path(path: PathLike) -> str:
    """The canonical form of ``path``: ``a/b/`` and ``/a/b`` are both ``/a/b``.

    Raises :class:`~lakelock.errors.InvalidNameError` for an empty path or a path with an
    empty, ``.`` or ``..`` segment, and :class:`TypeError` for anything but a ``str`` or a
    :class:`~pathlib.PurePosixPath`.
    """
    return _join(_split(path))


def _is_ancestor_or_self(p: PathKey, q: PathKey) -> bool:
    return len(p) <= len(q) and q[: len(p)] == p


def in_lineage(p: PathLike, q: PathLike) -> bool:
    """Whether ``q`` is an ancestor of ``p``, ``p`` itself, or a descendant of ``p`` (by
    what they name: :func:`path_key`)."""
    a, b = path_key(p), path_key(q)
    return _is_ancestor_or_self(a, b) or _is_ancestor_or_self(b, a)


def covers(p: PathLike, q: PathLike) -> bool:
    """Whether ``p`` is ``q`` or an ancestor of it: a lock on ``p`` holds ``q`` too."""
    return _is_ancestor_or_self(path_key(p), path_key(q))


def _paths(values: Iterable[PathLike], name: str) -> frozenset[PathKey]:
    # A bare path here would be iterated character by character: refuse it loudly.
    if isinstance(values, str | PurePosixPath):
        raise TypeError(f"{name}= takes a collection of paths, not a single path {values!r}")
    return frozenset(_split(v) for v in values)


def _keys(paths: frozenset[PathKey]) -> frozenset[PathKey]:
    return frozenset(tuple(_segment_key(segment) for segment in key) for key in paths)


@dataclass(frozen=True, slots=True, init=False)
class LockRequest:
    """What one operation locks: the paths it reads and the paths it writes.

    Paths are normalised on construction (see :func:`normalize_path`) and compared by what
    they name (:func:`path_key`). Write/delete is
    ``LockRequest(write=[p])``, rename ``write=[src, dst]``, copy ``read=[src], write=[dst]``,
    an atomic read ``read=[p]``. A path both read and written is written.
    """

    read: frozenset[str]
    write: frozenset[str]
    _read_keys: frozenset[PathKey] = field(repr=False, compare=False)
    _write_keys: frozenset[PathKey] = field(repr=False, compare=False)

    def __init__(self, read: Iterable[PathLike] = (), write: Iterable[PathLike] = ()) -> None:
        read_keys = _paths(read, "read")
        write_keys = _paths(write, "write")
        object.__setattr__(self, "read", frozenset(_join(k) for k in read_keys))
        object.__setattr__(self, "write", frozenset(_join(k) for k in write_keys))
        object.__setattr__(self, "_read_keys", _keys(read_keys))
        object.__setattr__(self, "_write_keys", _keys(write_keys))

    def __str__(self) -> str:
        return f"read={sorted(self.read)} write={sorted(self.write)}"

    @property
    def paths(self) -> frozenset[str]:
        """Every path the request reads or writes."""
        return self.read | self.write

    def reduced(self) -> LockRequest:
        """The smallest request that conflicts with exactly the same requests as this one.

        Drops read paths at or below another path of the request, and written paths strictly
        below another written path (see the module docstring).
        """
        reads, writes = _reduce(self._read_keys, self._write_keys)
        return LockRequest(map(_join, reads), map(_join, writes))


def requests_conflict(a: LockRequest, b: LockRequest) -> bool:
    """The specification: a path of one request lies in the lineage of a path of the other,
    and at least one of the two writes its path."""
    for p in a._read_keys | a._write_keys:
        p_writes = p in a._write_keys
        for q in b._read_keys | b._write_keys:
            related = _is_ancestor_or_self(p, q) or _is_ancestor_or_self(q, p)
            if related and (p_writes or q in b._write_keys):
                return True
    return False


# --- intents and modes -------------------------------------------------------------------------

_IS: Final = 1  # reads a path strictly below this one
_IX: Final = 2  # writes a path strictly below this one
_S: Final = 4  # reads this path
_X: Final = 8  # writes this path
_SELF: Final = _S | _X
_WRITES: Final = _IX | _X
_INTENTS: Final = (_IS, _IX, _S, _X)


def _intents_clash(i: int, j: int) -> bool:
    # One of them is about this very path (so the two paths are in lineage) and one writes.
    return bool((i | j) & _SELF) and bool((i | j) & _WRITES)


class Mode(enum.IntEnum):
    """A request's lock mode at one path: the set of its intents there, up to equivalence.

    IS, IX, S and X are the post's read-ancestor, write-ancestor, read and write; SIX (read
    this path and write below it) is the mode the post lacks.
    """

    IS = 0
    IX = 1
    S = 2
    SIX = 3
    X = 4

    @property
    def intents(self) -> int:
        """The intent bits this mode stands for (the largest set it is equivalent to)."""
        return _MODE_INTENTS[self]


_MODE_INTENTS: Final = (_IS, _IS | _IX, _IS | _S, _IS | _IX | _S, _IS | _IX | _S | _X)


def _mode_of(intents: int) -> Mode:
    if intents & _X:
        return Mode.X
    if intents & _S:
        return Mode.SIX if intents & _IX else Mode.S
    if intents & _IX:
        return Mode.IX
    if intents & _IS:
        return Mode.IS
    raise ValueError("a mode needs at least one intent")


def _sets_clash(a: int, b: int) -> bool:
    return any(_intents_clash(i, j) for i in _INTENTS if a & i for j in _INTENTS if b & j)


#: For each mode, the bit mask (1 << mode) of the modes it is incompatible with.
_INCOMPATIBLE: Final = tuple(
    sum(1 << n for n in Mode if _sets_clash(m.intents, n.intents)) for m in Mode
)


def compatible(a: Mode, b: Mode) -> bool:
    """Whether two requests may hold modes ``a`` and ``b`` on the same path together."""
    return not _INCOMPATIBLE[a] & (1 << b)


# --- plans -------------------------------------------------------------------------------------


def _reduce(
    reads: frozenset[PathKey], writes: frozenset[PathKey]
) -> tuple[list[PathKey], list[PathKey]]:
    kept_writes = [w for w in writes if not any(w[:i] in writes for i in range(len(w)))]
    kept_reads = [
        r
        for r in reads
        if not any(r[:i] in writes for i in range(len(r) + 1))
        and not any(r[:i] in reads for i in range(len(r)))
    ]
    return kept_reads, kept_writes


def _order(key: PathKey) -> tuple[int, PathKey]:
    return len(key), key


@functools.lru_cache(maxsize=4096)
def _key_plan(request: LockRequest) -> tuple[tuple[PathKey, Mode], ...]:
    # Cached: ETL code locks the same few request shapes over and over, and the cache is
    # bounded, so a stream of distinct paths costs nothing but misses.
    reads, writes = _reduce(request._read_keys, request._write_keys)
    intents: dict[PathKey, int] = {}
    for keys, own, below in ((writes, _X, _IX), (reads, _S, _IS)):
        for key in keys:
            intents[key] = intents.get(key, 0) | own
            for i in range(len(key)):
                ancestor = key[:i]
                intents[ancestor] = intents.get(ancestor, 0) | below
    return tuple((key, _mode_of(intents[key])) for key in sorted(intents, key=_order))


def lock_plan(request: LockRequest) -> tuple[tuple[str, Mode], ...]:
    """The (path, mode) steps that lock ``request``, in acquisition order.

    Ancestors come first, then paths of equal depth in lexicographic order of their segments.
    Two requests conflict iff at some path their modes are not :func:`compatible`.
    """
    return tuple((_join(key), mode) for key, mode in _key_plan(request))


# --- grants ------------------------------------------------------------------------------------


class Waiter:
    """One queued step: ``owner`` wants ``mode`` on ``node``; ``granted`` once it has it."""

    __slots__ = ("granted", "mode", "node", "owner", "seq")

    def __init__(self, node: Node, mode: Mode, owner: Claim, seq: int) -> None:
        self.node = node
        self.mode = mode
        self.owner = owner
        self.seq = seq
        self.granted = False


class Node:
    """The lock state of one path (or one stripe): its holders and its queue of waiters.

    ``_held`` counts holders per mode and ``_held_mask`` has bit ``1 << m`` set iff some
    holder has mode m; ``_queues[m]`` is the FIFO of waiters for mode m (created on first
    use, since most nodes never see a waiter) and ``_queued_mask`` has a bit per non-empty
    FIFO. Waiters carry a node-wide arrival number, so the FIFOs merge into one arrival order.
    """

    __slots__ = (
        "__weakref__",
        "_held",
        "_held_mask",
        "_holders",
        "_queued_mask",
        "_queues",
        "_seq",
        "key",
    )

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self._holders: dict[Claim, Mode] = {}
        self._held = [0, 0, 0, 0, 0]
        self._held_mask = 0
        self._queues: list[OrderedDict[Waiter, None]] | None = None
        self._queued_mask = 0
        self._seq = 0

    def request(self, mode: Mode, owner: Claim) -> Waiter | None:
        """Grant ``mode`` to ``owner`` now (``None``) or queue it (the :class:`Waiter`)."""
        if not (self._held_mask | self._queued_mask) & _INCOMPATIBLE[mode]:
            self._hold(mode, owner)
            return None
        if self._queues is None:
            self._queues = [OrderedDict() for _ in Mode]
        self._seq += 1
        waiter = Waiter(self, mode, owner, self._seq)
        self._queues[mode][waiter] = None
        self._queued_mask |= 1 << mode
        return waiter

    def release(self, owner: Claim) -> list[Waiter]:
        """``owner`` lets go of its mode here; returns the waiters this grants."""
        mode = self._holders.pop(owner)
        self._held[mode] -= 1
        if not self._held[mode]:
            self._held_mask &= ~(1 << mode)
        return self._promote() if self._queued_mask else []

    def withdraw(self, waiter: Waiter) -> list[Waiter]:
        """Give up ``waiter`` (timeout, cancellation), releasing it if it was granted
        meanwhile; returns the waiters this grants."""
        if waiter.granted:
            return self.release(waiter.owner)
        assert self._queues is not None
        queue = self._queues[waiter.mode]
        del queue[waiter]
        if not queue:
            self._queued_mask &= ~(1 << waiter.mode)
        return self._promote()

    def blockers(self, waiter: Waiter) -> list[Claim]:
        """The holders and earlier waiters whose modes clash with ``waiter``'s (O(n): for
        checkers and diagnostics, never on the locking path)."""
        incompatible = _INCOMPATIBLE[waiter.mode]
        found = [o for o, m in self._holders.items() if incompatible & (1 << m)]
        for queue in self._queues or ():
            found += [w.owner for w in queue if w.seq < waiter.seq and incompatible & (1 << w.mode)]
        return found

    @property
    def idle(self) -> bool:
        """No holder and no waiter."""
        return not self._holders and not self._queued_mask

    def _hold(self, mode: Mode, owner: Claim) -> None:
        self._holders[owner] = mode
        self._held[mode] += 1
        self._held_mask |= 1 << mode

    def _promote(self) -> list[Waiter]:
        # Visit waiters in arrival order (merging the per-mode FIFOs by seq). A waiter is
        # granted iff compatible with the holders and with every waiter staying ahead of it;
        # once a mode's first waiter stays, every later waiter of that mode stays too (the
        # same holder or earlier waiter is in its way), so the whole FIFO drops out.
        assert self._queues is not None
        queues = self._queues
        granted: list[Waiter] = []
        staying = 0
        live = [m for m in Mode if self._queued_mask & (1 << m)]
        while live:
            mode = min(live, key=lambda m: next(iter(queues[m])).seq)
            if (self._held_mask | staying) & _INCOMPATIBLE[mode]:
                staying |= 1 << mode
                live.remove(mode)
                continue
            waiter, _ = queues[mode].popitem(last=False)
            waiter.granted = True
            self._hold(mode, waiter.owner)
            granted.append(waiter)
            if not queues[mode]:
                self._queued_mask &= ~(1 << mode)
                live.remove(mode)
        return granted


class NodeIndex(Protocol):
    """Where a lock finds its nodes, and how it turns a request into steps on them."""

    def plan(self, request: LockRequest) -> Sequence[tuple[Hashable, Mode]]:
        """The (node key, mode) steps for ``request``, in a fixed total order of keys."""
        ...

    def node(self, key: Hashable) -> Node:
        """The node for ``key``, created if need be."""
        ...


class ExactIndex:
    """One node per path, kept only while someone holds it or waits for it.

    The table holds weak references: a node lives as long as a :class:`Claim` that holds it
    or a :class:`Waiter` queued on it refers to it, and disappears with the last one.
    """

    __slots__ = ("_nodes",)

    def __init__(self) -> None:
        self._nodes: weakref.WeakValueDictionary[Hashable, Node] = weakref.WeakValueDictionary()

    def plan(self, request: LockRequest) -> Sequence[tuple[Hashable, Mode]]:
        """One step per path on the way to the request's paths, ancestors first."""
        return _key_plan(request)

    def node(self, key: Hashable) -> Node:
        """The live node for ``key``, or a new one."""
        node = self._nodes.get(key)
        if node is None:
            node = self._nodes[key] = Node(key)
        return node

    def __len__(self) -> int:
        return len(self._nodes)


class Claim:
    """One request's progress through its plan: the steps it holds and the one it waits for.

    Not thread-safe: the caller serialises :meth:`advance` and :meth:`release` with every
    other call on the same nodes. ``wake`` is set by the caller and called by whoever grants
    the pending waiter (after the caller's mutex is released, if it has one).
    """

    __slots__ = ("_held", "_index", "_pending", "_position", "_steps", "request", "wake")

    def __init__(self, request: LockRequest, index: NodeIndex) -> None:
        self.request = request
        self._index = index
        self._steps = index.plan(request)
        self._position = 0
        self._held: list[Node] = []
        self._pending: Waiter | None = None
        self.wake: Callable[[], None] | None = None

    @property
    def pending(self) -> Waiter | None:
        """The step this claim waits for, if any."""
        return self._pending

    @property
    def complete(self) -> bool:
        """Whether every step is held."""
        return self._position == len(self._steps) and self._pending is None

    def advance(self, *, limit: int | None = None) -> Waiter | None:
        """Take steps until one must wait; returns that waiter, or ``None`` once all are held
        (or ``limit`` new steps were taken: the model check interleaves step by step)."""
        pending = self._pending
        if pending is not None:
            if not pending.granted:
                return pending
            self._held.append(pending.node)
            self._pending = None
            self._position += 1
        steps = self._steps
        end = len(steps) if limit is None else min(len(steps), self._position + limit)
        while self._position < end:
            key, mode = steps[self._position]
            node = self._index.node(key)
            waiter = node.request(mode, self)
            if waiter is not None:
                self._pending = waiter
                return waiter
            self._held.append(node)
            self._position += 1
        return None

    def release(self) -> list[Waiter]:
        """Let go of every step held and withdraw the pending one; returns the waiters of
        other claims this grants. The claim is spent afterwards."""
        granted: list[Waiter] = []
        if self._pending is not None:
            granted += self._pending.node.withdraw(self._pending)
            self._pending = None
        for node in self._held:
            granted += node.release(self)
        self._held = []
        self._position = len(self._steps)
        return granted
