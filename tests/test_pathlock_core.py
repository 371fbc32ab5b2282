"""The pure core of the path lock: paths, the lineage rule, modes, plans, and exactness.

The centre is an exhaustive check: over a binary tree of depth 3 (15 paths), every request
with up to two read and up to two written paths (14,641 requests) against every other, the
plans' modes clash at some path iff :func:`requests_conflict` says the requests conflict. The
2.1e8 pairs are checked as bit sets over requests, one row at a time.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import PurePosixPath

import pytest

from lakelock._pathlock import (
    LockRequest,
    Mode,
    PathLock,
    compatible,
    in_lineage,
    lock_plan,
    normalize_path,
    requests_conflict,
)
from lakelock._pathlock._core import Claim, ExactIndex, Node, _key_plan, _mode_of, _sets_clash
from lakelock._pathlock._striped import _striped_plan
from lakelock.errors import InvalidNameError, LockTimeout
from tests._support.pathlocks import post_plan

PathKey = tuple[str, ...]
Plan = Sequence[tuple[PathKey, Mode]]


def tree(depth: int, branching: int) -> list[PathKey]:
    """Every path of a full tree, root first."""
    names = [chr(ord("a") + i) for i in range(branching)]
    return [k for d in range(depth + 1) for k in itertools.product(names, repeat=d)]


def small_sets(paths: Sequence[PathKey], most: int) -> list[tuple[PathKey, ...]]:
    """Every subset of ``paths`` with at most ``most`` elements."""
    return [c for n in range(most + 1) for c in itertools.combinations(paths, n)]


def as_path(key: PathKey) -> str:
    """``("a", "b")`` as ``/a/b``."""
    return "/" + "/".join(key)


def all_requests(depth: int, branching: int, most: int) -> list[LockRequest]:
    """Every request reading at most ``most`` paths and writing at most ``most`` paths."""
    sets = small_sets(tree(depth, branching), most)
    return [
        LockRequest(map(as_path, reads), map(as_path, writes)) for reads in sets for writes in sets
    ]


def bitset(indices: Iterable[int], size: int) -> int:
    """The integer with exactly the bits ``indices`` set."""
    raw = bytearray((size + 7) // 8)
    for i in indices:
        raw[i >> 3] |= 1 << (i & 7)
    return int.from_bytes(raw, "little")


def first_bit(value: int) -> int:
    """Index of the lowest set bit."""
    return (value & -value).bit_length() - 1


class Comparison:
    """How a planner's clashes compare with the lineage rule over a universe of requests."""

    def __init__(self) -> None:
        self.missed = 0  # ordered pairs that conflict but whose plans do not clash
        self.spurious = 0  # ordered pairs whose plans clash but that do not conflict
        self.examples: list[tuple[LockRequest, LockRequest, bool]] = []  # (a, b, conflict?)


def compare(
    requests: Sequence[LockRequest],
    paths: Sequence[PathKey],
    planner: Callable[[LockRequest], Plan],
    *,
    examples: int = 5,
) -> Comparison:
    """Check ``planner`` against the lineage rule for every ordered pair of ``requests``.

    Spec side: a and b conflict iff some path of b lies in the lineage of a path a writes, or
    some path of a lies in the lineage of a path b writes. Plan side: a's step (p, m) clashes
    with every request that has at p a mode incompatible with m. Each side is one bit set
    over all requests per request.
    """
    size = len(requests)
    index = {k: i for i, k in enumerate(paths)}
    lineage = [{index[q] for q in paths if in_lineage(as_path(p), as_path(q))} for p in paths]
    touched: list[list[int]] = [[] for _ in paths]  # per path: requests reading or writing it
    write_lineage: list[list[int]] = [[] for _ in paths]  # per path: requests writing its lineage
    has_mode: list[list[list[int]]] = [[[] for _ in Mode] for _ in paths]
    plans: list[Plan] = []
    for r, request in enumerate(requests):
        writes = {index[k] for k in request._write_keys}
        for p in writes | {index[k] for k in request._read_keys}:
            touched[p].append(r)
        for p in set().union(*(lineage[w] for w in writes)):
            write_lineage[p].append(r)
        plan = planner(request)
        plans.append(plan)
        for key, mode in plan:
            has_mode[index[key]][mode].append(r)
    touched_bits = [bitset(t, size) for t in touched]
    write_lineage_bits = [bitset(w, size) for w in write_lineage]
    mode_bits = [[bitset(h, size) for h in modes] for modes in has_mode]
    clashing = [
        [sum_bits([bits[n] for n in Mode if not compatible(m, n)]) for m in Mode]
        for bits in mode_bits
    ]
    result = Comparison()
    for r, request in enumerate(requests):
        mine = {index[k] for k in request._read_keys | request._write_keys}
        my_write_lineage = set().union(*(lineage[index[k]] for k in request._write_keys))
        spec = sum_bits(touched_bits[p] for p in my_write_lineage) | sum_bits(
            write_lineage_bits[p] for p in mine
        )
        locked = sum_bits(clashing[index[key]][mode] for key, mode in plans[r])
        result.missed += (spec & ~locked).bit_count()
        result.spurious += (locked & ~spec).bit_count()
        diff = spec ^ locked
        while diff and len(result.examples) < examples:
            other = first_bit(diff)
            result.examples.append((request, requests[other], bool(spec >> other & 1)))
            diff &= diff - 1
    return result


def sum_bits(values: Iterable[int]) -> int:
    """Bitwise OR of ``values``."""
    total = 0
    for v in values:
        total |= v
    return total


def exact_plan(request: LockRequest) -> Plan:
    """lakelock's plan, bypassing its cache so the check does not evict real entries."""
    return _key_plan.__wrapped__(request)


# --- the exhaustive check ----------------------------------------------------------------------


def test_plans_clash_exactly_when_requests_conflict_for_every_pair() -> None:
    """All 14,641**2 request pairs on a depth-3 binary tree: modes clash iff requests conflict."""
    paths = tree(depth=3, branching=2)
    requests = all_requests(depth=3, branching=2, most=2)
    assert len(paths) == 15
    assert len(requests) == 121**2
    result = compare(requests, paths, exact_plan)
    assert (result.missed, result.spurious, result.examples) == (0, 0, [])


def test_checker_catches_the_posts_mode_rules() -> None:
    """The checker catches the post's rules under-blocking: read /a + write /a/b vs write /a/c."""
    paths = tree(depth=3, branching=2)
    requests = all_requests(depth=3, branching=2, most=2)
    result = compare(requests, paths, post_plan)
    assert result.missed > 0
    assert result.spurious == 0
    mixed, writer = LockRequest(read=["/a"], write=["/a/b"]), LockRequest(write=["/a/c"])
    keys = [(), ("a",), ("a", "b"), ("a", "c")]
    assert (mixed, writer, True) in compare([mixed, writer], keys, post_plan).examples
    assert compare([mixed, writer], keys, exact_plan).examples == []


def rw_per_path_plan(request: LockRequest) -> Plan:
    """The post's 7/8 scheme: an exclusive lock on every path read or written, shared locks
    on their ancestors (S standing for a plain read lock, X for a plain write lock)."""
    targets = set(request._read_keys | request._write_keys)
    ancestors = {k[:i] for k in targets for i in range(len(k))} - targets
    steps = [(k, Mode.X) for k in targets] + [(k, Mode.S) for k in ancestors]
    return sorted(steps, key=lambda s: (len(s[0]), s[0]))


def test_checker_catches_over_blocking() -> None:
    """The checker catches over-blocking: the post's per-path R/W scheme serialises readers."""
    result = compare(all_requests(depth=2, branching=2, most=1), tree(2, 2), rw_per_path_plan)
    assert result.missed == 0
    assert result.spurious > 0
    readers = (LockRequest(read=["/a"]), LockRequest(read=["/a/b"]))
    # Every ordered pair, each reader with itself included.
    assert compare(readers, [(), ("a",), ("a", "b")], rw_per_path_plan).spurious == 4


def test_spec_shortcut_agrees_with_requests_conflict() -> None:
    """The checker's bit-set form of the lineage rule agrees with requests_conflict pairwise."""
    small = all_requests(depth=2, branching=2, most=1)
    assert compare(small, tree(2, 2), exact_plan).examples == []
    for a, b in itertools.product(small, repeat=2):
        spec = any(
            in_lineage(p, q) and (p in a.write or q in b.write) for p in a.paths for q in b.paths
        )
        assert requests_conflict(a, b) == spec, (a, b)
    rng = random.Random(5)
    big = all_requests(depth=3, branching=2, most=2)
    for _ in range(20_000):
        a, b = rng.choice(big), rng.choice(big)
        planned = any(
            not compatible(m, n)
            for (p, m), (q, n) in itertools.product(lock_plan(a), lock_plan(b))
            if p == q
        )
        assert requests_conflict(a, b) == planned == requests_conflict(b, a), (a, b)


def test_reduction_keeps_the_conflict_relation() -> None:
    """reduced() drops only covered paths: it conflicts with exactly what the original does."""
    rng = random.Random(7)
    universe = all_requests(depth=3, branching=2, most=2)
    for _ in range(5_000):
        a, b = rng.choice(universe), rng.choice(universe)
        assert requests_conflict(a.reduced(), b) == requests_conflict(a, b), (a, b)
    assert LockRequest(read=["/a", "/a/b"], write=["/c", "/c/d"]).reduced() == LockRequest(
        read=["/a"], write=["/c"]
    )
    assert LockRequest(read=["/a/b"], write=["/a"]).reduced() == LockRequest(write=["/a"])
    assert LockRequest(read=["/a"], write=["/a/b"]).reduced() == LockRequest(
        read=["/a"], write=["/a/b"]
    )


def test_striped_plans_never_under_block() -> None:
    """Striped plans may add false conflicts but never miss a real one."""
    rng = random.Random(11)
    universe = all_requests(depth=3, branching=2, most=2)
    for stripes in (1, 2, 3, 7):
        for _ in range(3_000):
            a, b = rng.choice(universe), rng.choice(universe)
            pa, pb = dict(_striped_plan(a, stripes)), dict(_striped_plan(b, stripes))
            clash = any(not compatible(pa[s], pb[s]) for s in pa.keys() & pb.keys())
            if requests_conflict(a, b):
                assert clash, (stripes, a, b)
            assert [s for s, _ in _striped_plan(a, stripes)] == sorted(pa)


# --- modes -------------------------------------------------------------------------------------


def test_compatibility_is_grays_table() -> None:
    """The derived compatibility matrix is Gray's IS/IX/S/SIX/X table, symmetric."""
    ok = {
        Mode.IS: {Mode.IS, Mode.IX, Mode.S, Mode.SIX},
        Mode.IX: {Mode.IS, Mode.IX},
        Mode.S: {Mode.IS, Mode.S},
        Mode.SIX: {Mode.IS},
        Mode.X: set(),
    }
    for a, b in itertools.product(Mode, repeat=2):
        assert compatible(a, b) == (b in ok[a]) == compatible(b, a), (a, b)


def test_mode_reduction_loses_no_clash() -> None:
    """Collapsing a path's intent set to one of five modes keeps exactly its clashes."""
    sets = range(1, 16)
    for a, b in itertools.product(sets, repeat=2):
        assert _sets_clash(a, b) == (not compatible(_mode_of(a), _mode_of(b))), (a, b)
    with pytest.raises(ValueError, match="intent"):
        _mode_of(0)


def test_mixed_request_gets_six_on_the_read_ancestor_of_its_write() -> None:
    """Reading /a while writing /a/b locks /a in SIX, which the post's four modes lack."""
    plan = lock_plan(LockRequest(read=["/a"], write=["/a/b"]))
    assert plan == (("/", Mode.IX), ("/a", Mode.SIX), ("/a/b", Mode.X))
    assert requests_conflict(LockRequest(read=["/a"], write=["/a/b"]), LockRequest(write=["/a/c"]))
    assert not requests_conflict(LockRequest(read=["/a"], write=["/a/b"]), LockRequest(read=["/b"]))


# --- plans -------------------------------------------------------------------------------------


def test_plans_go_ancestors_first_then_lexicographically() -> None:
    """Steps come in (depth, segments) order, and each step's ancestors come before it."""
    rng = random.Random(3)
    paths = [as_path(k) for k in tree(depth=3, branching=3)]
    for _ in range(2_000):
        request = LockRequest(rng.sample(paths, 2), rng.sample(paths, 2))
        keys = [k for k, _ in _key_plan(request)]
        assert keys == sorted(keys, key=lambda k: (len(k), k))
        seen: set[PathKey] = set()
        for k in keys:
            assert all(k[:i] in seen for i in range(len(k))), request
            seen.add(k)
    rename = LockRequest(write=["/b/y", "/a/x"])
    assert [p for p, _ in lock_plan(rename)] == ["/", "/a", "/b", "/a/x", "/b/y"]


def test_empty_request_has_no_steps_and_conflicts_with_nothing() -> None:
    """A request with no paths takes no lock and conflicts with nothing, even a root write."""
    assert lock_plan(LockRequest()) == ()
    assert not requests_conflict(LockRequest(), LockRequest(write=["/"]))


def test_root_write_conflicts_with_everything_that_has_a_path() -> None:
    """Writing / is in every path's lineage."""
    assert requests_conflict(LockRequest(write=["/"]), LockRequest(read=["/x/y/z"]))
    assert lock_plan(LockRequest(write=["/"], read=["/x"])) == (("/", Mode.X),)


# --- paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/a/b", "/a/b"),
        ("a/b", "/a/b"),
        ("/a/b/", "/a/b"),
        ("/", "/"),
        (PurePosixPath("/a/b"), "/a/b"),
        (PurePosixPath("a/b"), "/a/b"),
        ("/year=2024/month=01", "/year=2024/month=01"),
        ("/é/ü", "/é/ü"),
    ],
)
def test_normalize_path_canonical_form(raw: str | PurePosixPath, expected: str) -> None:
    """Paths get one leading slash and no trailing slash; str and PurePosixPath agree."""
    assert normalize_path(raw) == expected


@pytest.mark.parametrize("raw", ["", "//", "/a//b", "a/./b", "/a/../b", "..", ".", "/a/b//"])
def test_normalize_path_rejects_empty_dot_and_dotdot_segments(raw: str) -> None:
    """Empty, '.' and '..' segments are refused with InvalidNameError naming the input."""
    with pytest.raises(InvalidNameError) as info:
        normalize_path(raw)
    assert info.value.value == raw
    assert isinstance(info.value, ValueError)


def test_normalize_path_rejects_dotdot_in_pureposixpath() -> None:
    """PurePosixPath keeps '..', so it is refused too."""
    with pytest.raises(InvalidNameError):
        normalize_path(PurePosixPath("/a/../b"))


@pytest.mark.parametrize("raw", [b"/a", 3, None])
def test_normalize_path_rejects_other_types(raw: object) -> None:
    """Only str and PurePosixPath are paths."""
    with pytest.raises(TypeError):
        normalize_path(raw)  # type: ignore[arg-type]


def test_request_refuses_a_bare_path_for_a_collection() -> None:
    """read="/a/b" would lock '/', 'a', 'b' one character each: it is a TypeError instead."""
    with pytest.raises(TypeError, match="collection"):
        LockRequest(read="/a/b")
    with pytest.raises(TypeError, match="collection"):
        LockRequest(write=PurePosixPath("/a"))  # type: ignore[arg-type]


def test_request_normalises_and_compares_by_normalised_paths() -> None:
    """Requests are equal (and hash equal) when their normalised path sets are."""
    a = LockRequest(read=["a/b/"], write=[PurePosixPath("/c")])
    b = LockRequest(read=["/a/b"], write=["c"])
    assert a == b
    assert hash(a) == hash(b)
    assert a.read == frozenset({"/a/b"})
    assert a.paths == frozenset({"/a/b", "/c"})
    with pytest.raises(AttributeError):
        a.read = frozenset()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("/sales/p=a%2fb", "/sales/p=a%2Fb"),  # one '/' in a Hive-escaped value
        ("/sales/ts=06%3A30", "/sales/ts=06:30"),  # escaped as the registry files it, or not
        ("/sales/p=caf\u00e9", "/sales/p=cafe\u0301"),  # NFC and NFD of one value
        ("/caf\u00e9/p=1", "/cafe\u0301/p=1"),  # of one dataset name
    ],
)
def test_two_spellings_of_one_partition_are_one_path(one: str, other: str) -> None:
    """What a path names decides, not its text: an engine decoding Hive paths reads these
    as one partition, so two writers of them must not both hold the lock."""
    assert requests_conflict(LockRequest(write=[one]), LockRequest(write=[other]))
    assert requests_conflict(LockRequest(read=[one]), LockRequest(write=[other + "/q=2"]))
    assert in_lineage(one, other)
    assert lock_plan(LockRequest(write=[one])) == lock_plan(LockRequest(write=[other]))
    held = PathLock(timeout=0)
    with held(write=[one]), pytest.raises(LockTimeout), held(read=[other]):
        pass
    assert LockRequest(write=[one]).write == {normalize_path(one)}  # stored as given


def test_in_lineage() -> None:
    """Ancestors, self and descendants are in lineage; siblings, cousins and /ab of /a are not."""
    assert in_lineage("/a", "/a/b/c")
    assert in_lineage("/a/b/c", "/a")
    assert in_lineage("/a", "a/")
    assert in_lineage("/", "/x")
    assert not in_lineage("/a/b", "/a/c")
    assert not in_lineage("/a", "/ab")


# --- the grant rule of one node ----------------------------------------------------------------


def owners(count: int) -> list[Claim]:
    """Distinct claims to act as holders and waiters of a bare node."""
    index = ExactIndex()
    return [Claim(LockRequest(), index) for _ in range(count)]


def test_node_grants_in_arrival_order_and_stops_at_the_first_clash() -> None:
    """On release, waiters are granted in arrival order up to the first one that must stay."""
    node = Node(("a",))
    a, b, c, d, e = owners(5)
    assert node.request(Mode.X, a) is None
    s1, s2, x3, s4 = (
        node.request(m, o) for m, o in [(Mode.S, b), (Mode.S, c), (Mode.X, d), (Mode.S, e)]
    )
    assert node.release(a) == [s1, s2]
    assert not x3.granted
    assert not s4.granted
    assert node.release(b) == []
    assert node.release(c) == [x3]
    assert node.release(d) == [s4]
    assert node.release(e) == []
    assert node.idle


def test_node_lets_arrivals_overtake_only_waiters_they_are_compatible_with() -> None:
    """An arrival overtakes queued waiters only when compatible with them (IS past S, not IX)."""
    node = Node(("a",))
    holder, reader, light, writer = owners(4)
    assert node.request(Mode.IX, holder) is None
    queued = node.request(Mode.S, reader)
    assert queued is not None
    assert node.request(Mode.IS, light) is None
    behind = node.request(Mode.IX, writer)
    assert behind is not None
    assert node.blockers(behind) == [reader]
    assert node.blockers(queued) == [holder]
    assert node.release(holder) == [queued]
    assert node.release(light) == []
    assert node.release(reader) == [behind]


def test_node_withdrawal_grants_those_queued_behind() -> None:
    """Withdrawing a waiter grants those behind it; withdrawing a granted one releases it."""
    node = Node(("a",))
    holder, writer, reader, late = owners(4)
    assert node.request(Mode.S, holder) is None
    w = node.request(Mode.X, writer)
    r = node.request(Mode.S, reader)
    assert w is not None
    assert r is not None
    assert node.withdraw(w) == [r]
    x = node.request(Mode.X, late)
    assert x is not None
    node.release(holder)
    assert node.release(reader) == [x]
    assert x.granted
    assert node.withdraw(x) == []
    assert node.idle


def test_package_exports() -> None:
    """lakelock._pathlock exports the in-process locks and their guards, the distributed lock,
    its handle, options and table reader, and the pure helpers, nothing else."""
    import lakelock._pathlock as package

    assert sorted(package.__all__) == [
        "AsyncPathLock",
        "AsyncPathLockGuard",
        "DistributedPathLock",
        "LockOptions",
        "LockRequest",
        "Mode",
        "PathLock",
        "PathLockGuard",
        "PathLockHandle",
        "compatible",
        "in_lineage",
        "lock_plan",
        "normalize_path",
        "read_lock_tables",
        "requests_conflict",
    ]
    assert all(hasattr(package, name) for name in package.__all__)
