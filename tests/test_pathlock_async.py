"""AsyncPathLock: exactness through the real lock objects, cancellation, timeouts, fairness,
memory, and a seeded stress run with random cancellations and a checker of who holds what.

asyncio schedules deterministically, so with seeded requests every run is the same run.
Tasks are sequenced with events and the lock's observer hook; no test sleeps to make time
pass (``asyncio.sleep(0)`` only yields), and the one timeout that expires cannot be met
because the test itself holds the conflicting lock.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Coroutine, Hashable
from typing import Any

import pytest

from lakelock._pathlock import AsyncPathLock, LockRequest, requests_conflict
from lakelock._pathlock._striped import StripedIndex
from lakelock.errors import LockTimeout
from tests._support.pathlocks import TREE, random_request


def run(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run one test coroutine on a fresh event loop."""
    asyncio.run(coroutine)


async def try_lock(lock: AsyncPathLock, request: LockRequest) -> bool:
    """Whether ``request`` is granted without waiting (released again at once)."""
    try:
        async with lock(request.read, request.write, timeout=0):
            return True
    except LockTimeout:
        return False


class Blocked:
    """Observer that signals each blocked acquisition."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.count = 0

    def __call__(self, request: LockRequest, key: Hashable, blockers: list[LockRequest]) -> None:
        self.count += 1
        self.event.set()

    async def wait_for_next(self) -> None:
        """Wait until some acquisition blocks (the bound only guards against a hang)."""
        await asyncio.wait_for(self.event.wait(), 30)
        self.event.clear()


def nodes(lock: AsyncPathLock) -> int:
    """How many nodes the lock retains."""
    return len(lock._index)  # type: ignore[arg-type]


def idle(lock: AsyncPathLock) -> bool:
    """Nobody holds or waits for anything: no node left (exact), or every stripe idle.

    Stripes matter here: an exact lock's node is kept alive only by its holders, so a grant
    leaked by a bug would vanish with its node; a stripe outlives it and shows the leak.
    """
    if isinstance(lock._index, StripedIndex):
        return all(node.idle for node in lock._index._nodes)
    return nodes(lock) == 0


def test_sampled_pairs_wait_exactly_when_they_conflict() -> None:
    """3,000 seeded pairs: with A held, B is granted at once iff A and B do not conflict."""

    async def main() -> None:
        lock = AsyncPathLock()
        rng = random.Random(21)
        for _ in range(1_500):
            a, b = random_request(rng, TREE), random_request(rng, TREE)
            async with lock(a.read, a.write):
                assert await try_lock(lock, b) == (not requests_conflict(a, b)), (a, b)
        assert nodes(lock) == 0

    run(main())


def test_plain_with_is_a_type_error() -> None:
    """An async lock used with a plain ``with`` raises instead of silently not locking."""
    lock = AsyncPathLock()
    with pytest.raises(TypeError, match="async with"), lock(write=["/a"]):
        pytest.fail("entered an async lock synchronously")


def test_timeout_raises_and_releases_partial_steps() -> None:
    """A wait that cannot succeed ends in LockTimeout and gives back the steps it had."""

    async def main() -> None:
        lock = AsyncPathLock()
        async with lock(write=["/a/b"]):
            before = nodes(lock)
            with pytest.raises(LockTimeout) as info:
                async with lock(write=["/a/b", "/a/c"], timeout=0.01):
                    pytest.fail("entered a conflicting lock")
            assert info.value.timeout == 0.01
            assert info.value.target == LockRequest(write=["/a/b", "/a/c"])
            assert nodes(lock) == before
            assert await try_lock(lock, LockRequest(read=["/a/c"]))
        assert nodes(lock) == 0

    run(main())


@pytest.mark.parametrize("stripes", [None, 64])
def test_cancelled_waiter_releases_its_steps_and_unblocks_those_behind_it(
    stripes: int | None,
) -> None:
    """Cancelling a queued writer frees its steps and lets the reader queued behind it in."""

    async def main() -> None:
        lock = AsyncPathLock(stripes=stripes)
        blocked = Blocked()
        lock._observer = blocked
        reader_inside = asyncio.Event()

        async def writer() -> None:
            async with lock(write=["/a"]):
                pytest.fail("the writer cannot get in while /a/b is read")

        async def reader() -> None:
            async with lock(read=["/a"]):
                reader_inside.set()

        async with lock(read=["/a/b"]):
            writer_task = asyncio.create_task(writer())
            await blocked.wait_for_next()  # X on /a queued behind our IS
            reader_task = asyncio.create_task(reader())
            await blocked.wait_for_next()  # S on /a queued behind the writer
            assert not reader_inside.is_set()
            writer_task.cancel()
            await asyncio.wait_for(reader_inside.wait(), 30)
            with pytest.raises(asyncio.CancelledError):
                await writer_task
            await reader_task
            assert await try_lock(lock, LockRequest(read=["/a"]))
        assert idle(lock)

    run(main())


@pytest.mark.parametrize("stripes", [None, 64])
def test_cancellation_after_the_grant_releases_the_grant(stripes: int | None) -> None:
    """A waiter cancelled after its grant but before resuming gives the grant back."""

    async def main() -> None:
        lock = AsyncPathLock(stripes=stripes)
        blocked = Blocked()
        lock._observer = blocked
        entered = False

        async def writer() -> None:
            nonlocal entered
            async with lock(write=["/a"]):
                entered = True

        guard = lock(write=["/a"])
        await guard.__aenter__()
        task = asyncio.create_task(writer())
        await blocked.wait_for_next()
        await guard.__aexit__(None, None, None)  # grants the writer's step...
        task.cancel()  # ...which is cancelled before it runs again
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not entered
        assert idle(lock)
        assert await try_lock(lock, LockRequest(write=["/a"]))

    run(main())


def test_queued_writer_is_not_overtaken_by_later_readers() -> None:
    """Readers arriving after a queued writer wait behind it, so readers cannot starve it."""

    async def main() -> None:
        lock = AsyncPathLock()
        blocked = Blocked()
        lock._observer = blocked
        order: list[str] = []

        async def writer() -> None:
            async with lock(write=["/a"]):
                order.append("writer")

        async def reader() -> None:
            async with lock(read=["/a/b"]):
                order.append("late reader")

        async with lock(read=["/a/b"]):
            writer_task = asyncio.create_task(writer())
            await blocked.wait_for_next()
            assert not await try_lock(lock, LockRequest(read=["/a/b"]))
            reader_task = asyncio.create_task(reader())
            await blocked.wait_for_next()
        await asyncio.gather(writer_task, reader_task)
        assert order == ["writer", "late reader"]
        assert nodes(lock) == 0

    run(main())


def test_constructor_timeout_default_and_per_call_override() -> None:
    """AsyncPathLock(timeout=0) fails at once on a conflict; timeout=None on the call waits."""

    async def main() -> None:
        lock = AsyncPathLock(timeout=0)
        blocked = Blocked()
        lock._observer = blocked
        done = asyncio.Event()

        async def patient() -> None:
            async with lock(write=["/a"], timeout=None):
                done.set()

        async with lock(read=["/a"]):
            with pytest.raises(LockTimeout):
                async with lock(write=["/a"]):
                    pass
            blocked.event.clear()
            task = asyncio.create_task(patient())
            await blocked.wait_for_next()
        await task
        assert done.is_set()

    run(main())


def test_stress_tasks_with_random_cancellations() -> None:
    """Seeded tasks, random cancellations: no conflicting overlap, no needless wait, no leak."""

    async def main() -> None:
        lock = AsyncPathLock()
        rng = random.Random(99)
        paths = ["/" + "/".join(p) for d in range(4) for p in itertools.product("abc", repeat=d)]
        inside: dict[int, LockRequest] = {}
        violations: list[str] = []
        counts = dict.fromkeys(["waits", "cancelled", "cancelled inside", "entered", "timeouts"], 0)

        def observe(request: LockRequest, key: Hashable, blockers: list[LockRequest]) -> None:
            counts["waits"] += 1
            if not blockers or not all(requests_conflict(request, b) for b in blockers):
                violations.append(f"{request} waits at {key} for {blockers}")
            task = asyncio.current_task()
            if task is not None and rng.random() < 0.05:
                asyncio.get_running_loop().call_soon(task.cancel)

        lock._observer = observe

        async def worker(me: int) -> None:
            mine = random.Random(me)
            for _ in range(150):
                request = random_request(mine, paths)
                timeout = 0 if mine.random() < 0.1 else None
                entered = False
                try:
                    async with lock(request.read, request.write, timeout=timeout):
                        entered = True
                        for other, held in inside.items():
                            if requests_conflict(request, held):
                                violations.append(f"{me}:{request} overlaps {other}:{held}")
                        inside[me] = request
                        counts["entered"] += 1
                        try:
                            for _ in range(mine.randint(0, 3)):
                                await asyncio.sleep(0)
                        finally:
                            del inside[me]
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    assert task is not None
                    task.uncancel()
                    # A cancellation requested while waiting may land after the grant, inside
                    # the block; the block's exit then releases the lock as usual.
                    counts["cancelled inside" if entered else "cancelled"] += 1
                except LockTimeout:
                    counts["timeouts"] += 1

        # The bound turns a lost wake-up or leaked grant into a failure instead of a hang.
        await asyncio.wait_for(asyncio.gather(*(worker(me) for me in range(40))), 60)
        assert violations == []
        assert counts["waits"] > 100
        assert counts["cancelled"] > 0
        assert counts["timeouts"] > 0
        assert counts["entered"] + counts["cancelled"] + counts["timeouts"] == 40 * 150
        assert inside == {}
        assert nodes(lock) == 0

    run(main())
