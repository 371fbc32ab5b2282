"""PathLock (threads): exactness through the real lock objects, timeouts, fairness, memory,
and a seeded multi-thread stress run with a checker of who holds what.

No test sleeps to make time pass: threads are sequenced with events and the lock's observer
hook (called under its mutex whenever an acquisition blocks); the only timeouts that expire
are ones that cannot be met because the test itself holds the conflicting lock.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from collections.abc import Hashable, Iterator
from pathlib import PurePosixPath

import pytest

from lakelock._pathlock import LockRequest, PathLock, requests_conflict
from lakelock.errors import InvalidNameError, LakelockError, LockTimeout
from tests._support.pathlocks import TREE, random_request


def try_lock(lock: PathLock, request: LockRequest) -> bool:
    """Whether ``request`` is granted without waiting (released again at once)."""
    try:
        with lock(request.read, request.write, timeout=0):
            return True
    except LockTimeout:
        return False


class Blocked:
    """Observer that records blocked acquisitions and signals each one."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.seen: list[tuple[LockRequest, Hashable, list[LockRequest]]] = []

    def __call__(self, request: LockRequest, key: Hashable, blockers: list[LockRequest]) -> None:
        self.seen.append((request, key, blockers))
        self.event.set()

    def wait_for_next(self) -> None:
        """Wait until some acquisition blocks (a test-failure guard, not a timing device)."""
        assert self.event.wait(30), "the acquisition never blocked"
        self.event.clear()


@pytest.fixture
def lock() -> Iterator[PathLock]:
    """A fresh exact PathLock, checked to retain no node afterwards."""
    path_lock = PathLock()
    yield path_lock
    assert len(path_lock._index) == 0  # type: ignore[arg-type]


def start(target: object, *args: object) -> threading.Thread:
    """A started daemon thread (so a bug cannot hang the test run)."""
    thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


# --- exactness through the real objects --------------------------------------------------------


def test_sampled_pairs_wait_exactly_when_they_conflict(lock: PathLock) -> None:
    """3,000 seeded pairs: with A held, B is granted at once iff A and B do not conflict."""
    rng = random.Random(1)
    for _ in range(3_000):
        a, b = random_request(rng, TREE), random_request(rng, TREE)
        with lock(a.read, a.write):
            assert try_lock(lock, b) == (not requests_conflict(a, b)), (a, b)


def test_sampled_groups_of_holders(lock: PathLock) -> None:
    """With up to three compatible holders, a probe gets in at once iff it conflicts with none."""
    rng = random.Random(2)
    for _ in range(600):
        held: list[LockRequest] = []
        for _ in range(3):
            candidate = random_request(rng, TREE)
            if not any(requests_conflict(candidate, h) for h in held):
                held.append(candidate)
        guards = [lock(h.read, h.write) for h in held]
        for guard in guards:
            guard.__enter__()
        probe = random_request(rng, TREE)
        try:
            expected = not any(requests_conflict(probe, h) for h in held)
            assert try_lock(lock, probe) == expected, (held, probe)
        finally:
            for guard in guards:
                guard.__exit__(None, None, None)


def test_read_of_folder_while_writing_inside_it_blocks_writers_of_its_other_children(
    lock: PathLock,
) -> None:
    """Reading /a while writing /a/b blocks a writer of /a/c but not a reader of it (SIX)."""
    with lock(read=["/a"], write=["/a/b"]):
        assert not try_lock(lock, LockRequest(write=["/a/c"]))
        assert not try_lock(lock, LockRequest(read=["/a/b/x"]))
        assert not try_lock(lock, LockRequest(write=["/"]))
        assert try_lock(lock, LockRequest(read=["/a/c"]))
        assert try_lock(lock, LockRequest(write=["/b"]))


def test_paths_may_be_pureposixpath_or_unnormalised(lock: PathLock) -> None:
    """PurePosixPath('/a/b'), 'a/b' and '/a/b/' name the same lock."""
    with lock(write=[PurePosixPath("/a/b")]):
        assert not try_lock(lock, LockRequest(read=["a/b/"]))
        assert not try_lock(lock, LockRequest(read=["a"]))


# --- timeouts ----------------------------------------------------------------------------------


def test_timeout_raises_lock_timeout_with_fields_and_releases_partial_steps(
    lock: PathLock,
) -> None:
    """A timed-out request raises LockTimeout with its fields and gives back its partial steps."""
    with lock(write=["/a/b"]):
        nodes_before = len(lock._index)  # type: ignore[arg-type]
        with pytest.raises(LockTimeout) as info, lock(write=["/a/c", "/a/b"], timeout=0.01):
            pytest.fail("entered a conflicting lock")
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value, LakelockError)
        assert info.value.target == LockRequest(write=["/a/b", "/a/c"])
        assert info.value.timeout == 0.01
        assert "/a/b" in str(info.value)
        assert len(lock._index) == nodes_before  # type: ignore[arg-type]
        # The steps it had were released: a reader of /a/c (IS on /a) is not blocked by them.
        assert try_lock(lock, LockRequest(read=["/a/c"]))


class Interrupt(BaseException):
    """Stands for KeyboardInterrupt arriving while a thread waits."""


# Stripes outlive their holders, so a leaked step shows there even where an exact node, kept
# alive only by its holders, would vanish with the bug.
@pytest.mark.parametrize("stripes", [None, 64])
def test_interrupt_while_waiting_releases_the_steps_taken(stripes: int | None) -> None:
    """An exception while blocked gives back the steps already taken and propagates."""
    lock = PathLock(stripes=stripes)

    def interrupt(request: LockRequest, key: Hashable, blockers: list[LockRequest]) -> None:
        raise Interrupt  # raised where a KeyboardInterrupt would surface: while blocked

    with lock(write=["/a/b"]):
        lock._observer = interrupt
        with pytest.raises(Interrupt), lock(write=["/a/b", "/a/c"]):
            pytest.fail("entered a conflicting lock")
    lock._observer = None
    assert try_lock(lock, LockRequest(read=["/a"]))  # no IX left behind on /a
    assert try_lock(lock, LockRequest(write=["/"]))


def test_constructor_timeout_is_the_default_and_calls_override_it() -> None:
    """PathLock(timeout=0) fails at once; a call with timeout=None waits until released."""
    lock = PathLock(timeout=0)
    blocked = Blocked()
    lock._observer = blocked
    entered = threading.Event()

    def writer() -> None:
        with lock(write=["/a"], timeout=None):
            entered.set()

    with lock(read=["/a"]):
        with pytest.raises(LockTimeout), lock(write=["/a"]):
            pass
        blocked.event.clear()
        thread = start(writer)
        blocked.wait_for_next()
        assert not entered.is_set()
    thread.join(30)
    assert entered.is_set()


@pytest.mark.parametrize("timeout", [-1, float("nan")])
def test_negative_or_nan_timeout_is_refused(timeout: float) -> None:
    """Only None or a number >= 0 is a timeout."""
    with pytest.raises(ValueError, match="timeout"):
        PathLock(timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        PathLock()(write=["/a"], timeout=timeout)


# --- fairness ----------------------------------------------------------------------------------


def test_queued_writer_is_not_overtaken_by_later_readers(lock: PathLock) -> None:
    """Readers arriving after a queued writer wait behind it, so readers cannot starve it."""
    blocked = Blocked()
    lock._observer = blocked
    inside = threading.Event()
    leave = threading.Event()

    def writer() -> None:
        with lock(write=["/a"]):
            inside.set()
            assert leave.wait(30)

    with lock(read=["/a/b"]):
        thread = start(writer)
        blocked.wait_for_next()
        assert not try_lock(lock, LockRequest(read=["/a/b"]))  # compatible with the holder
        assert not try_lock(lock, LockRequest(read=["/a/c"]))
        assert try_lock(lock, LockRequest(read=["/b"]))  # outside the writer's lineage
    assert inside.wait(30)
    assert not try_lock(lock, LockRequest(read=["/a/b"]))
    leave.set()
    thread.join(30)
    assert try_lock(lock, LockRequest(read=["/a/b"]))


def test_compatible_arrivals_overtake_a_queued_request(lock: PathLock) -> None:
    """Arrivals overtake a queued request only if compatible with it and with the holders."""
    blocked = Blocked()
    lock._observer = blocked
    done = threading.Event()

    def reader() -> None:
        with lock(read=["/a"]):
            done.set()

    with lock(write=["/a/b"]):  # IX on /a
        thread = start(reader)  # S on /a: queued
        blocked.wait_for_next()
        assert try_lock(lock, LockRequest(read=["/a/c"]))  # IS on /a: goes first
        assert not try_lock(lock, LockRequest(write=["/a/d"]))  # IX: would delay the reader
        assert not done.is_set()
    thread.join(30)
    assert done.is_set()


def test_blocked_acquisitions_name_only_conflicting_blockers(lock: PathLock) -> None:
    """The observer sees, for a blocked request, exactly the conflicting holder."""
    blocked = Blocked()
    lock._observer = blocked
    a = LockRequest(read=["/a"], write=["/a/b"])
    b = LockRequest(write=["/a/c"])

    def writer() -> None:
        with lock(b.read, b.write):
            pass

    with lock(a.read, a.write), lock(read=["/a/d"]):
        thread = start(writer)
        blocked.wait_for_next()
    thread.join(30)
    request, key, blockers = blocked.seen[0]
    assert (request, key, blockers) == (b, ("a",), [a])


# --- guards, validation, memory ----------------------------------------------------------------


def test_bad_paths_fail_at_call_time_before_locking(lock: PathLock) -> None:
    """Invalid paths raise InvalidNameError (a ValueError) from the call, not on entry."""
    with pytest.raises(InvalidNameError):
        lock(write=["/a/../b"])
    with pytest.raises(TypeError):
        lock(write="/a")


def test_a_guard_is_single_use(lock: PathLock) -> None:
    """Re-entering the same guard is an error; calling the lock again is the way."""
    guard = lock(write=["/a"])
    with guard:
        pass
    with pytest.raises(RuntimeError, match="once"), guard:
        pass


def test_error_in_body_releases(lock: PathLock) -> None:
    """An exception inside the block releases every step and propagates."""
    with pytest.raises(KeyError), lock(write=["/a/b/c/d"]):
        raise KeyError("boom")
    assert try_lock(lock, LockRequest(write=["/"]))


def test_nodes_live_only_while_held(lock: PathLock) -> None:
    """One node per step while held (weak references); none once released, without a GC."""
    with lock(read=["/a/b"], write=["/c/d/e"]):
        assert len(lock._index) == 6  # type: ignore[arg-type]
        with lock(read=["/a/b/x"]):
            assert len(lock._index) == 7  # type: ignore[arg-type]
        assert len(lock._index) == 6  # type: ignore[arg-type]
    assert len(lock._index) == 0  # type: ignore[arg-type]


def test_striped_lock_keeps_a_fixed_number_of_nodes_and_stays_safe() -> None:
    """stripes=n keeps n nodes, stays safe, and pays with false conflicts (one stripe: all)."""
    rng = random.Random(4)
    lock = PathLock(stripes=8)
    for _ in range(1_000):
        a, b = random_request(rng, TREE), random_request(rng, TREE)
        with lock(a.read, a.write):
            if requests_conflict(a, b):
                assert not try_lock(lock, b), (a, b)
        assert len(lock._index) == 8  # type: ignore[arg-type]
    single = PathLock(stripes=1)
    with single(write=["/a"]):
        assert not try_lock(single, LockRequest(write=["/b"]))
        assert not try_lock(single, LockRequest(read=["/b"]))
    with single(read=["/a"]):
        assert try_lock(single, LockRequest(read=["/b"]))
    with pytest.raises(ValueError, match="stripes"):
        PathLock(stripes=0)


# --- stress ------------------------------------------------------------------------------------


class Checker:
    """Records who is inside which request, and why anybody waited."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.inside: dict[int, LockRequest] = {}
        self.violations: list[str] = []
        self.waits = 0
        self.entries = 0

    def enter(self, me: int, request: LockRequest) -> None:
        """``me`` got ``request``: nobody inside may conflict with it."""
        with self.mutex:
            for other, held in self.inside.items():
                if requests_conflict(request, held):
                    self.violations.append(f"{me}:{request} overlaps {other}:{held}")
            self.inside[me] = request
            self.entries += 1

    def leave(self, me: int) -> None:
        """``me`` is about to release."""
        with self.mutex:
            del self.inside[me]

    def observe(self, request: LockRequest, key: Hashable, blockers: list[LockRequest]) -> None:
        """Observer hook: a blocked request must be blocked by conflicting requests only."""
        with self.mutex:
            self.waits += 1
            if not blockers:
                self.violations.append(f"{request} waits at {key} for nobody")
            for other in blockers:
                if not requests_conflict(request, other):
                    self.violations.append(f"{request} waits at {key} for {other}")


@pytest.mark.parametrize("stripes", [None, 5])
def test_stress_threads_never_overlap_conflicting_requests(stripes: int | None) -> None:
    """Seeded threads, fast GIL switching: no conflicting overlap, no needless wait, no leak."""
    lock = PathLock(stripes=stripes)
    checker = Checker()
    if stripes is None:
        lock._observer = checker.observe
    paths = ["/" + "/".join(p) for d in range(4) for p in itertools.product("abc", repeat=d)]
    barrier = threading.Barrier(8)

    def worker(me: int) -> None:
        rng = random.Random(1000 + me)
        barrier.wait()
        for _ in range(250):
            request = random_request(rng, paths)
            timeout = 0 if rng.random() < 0.1 else None
            try:
                with lock(request.read, request.write, timeout=timeout):
                    checker.enter(me, request)
                    for _ in range(rng.randint(0, 2)):
                        time.sleep(0)  # yield the GIL inside, so others run meanwhile
                    checker.leave(me)
            except LockTimeout:
                if timeout != 0:
                    checker.violations.append(f"{request} timed out with timeout=None")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [start(worker, me) for me in range(8)]
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "deadlock or starvation"
    assert checker.violations == []
    assert checker.entries > 8 * 250 * 0.8
    if stripes is None:
        assert checker.waits > 0  # there was contention to check
        assert len(lock._index) == 0  # type: ignore[arg-type]
