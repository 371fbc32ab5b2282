"""Benchmark the in-process path lock against the simpler schemes of the path-lock post.

Prints two tables from one run:

1. Acquire+release per second of one depth-4 write (``/ds/year=2024/month=01/day=02``),
   uncontended, for threads and for asyncio: a global exclusive lock, a global read/write
   lock, lakelock's exact lock (same path every call, and a new path every call, which
   misses the plan cache and creates fresh nodes), and lakelock's striped lock.
2. Makespan of one seeded random workload with simulated I/O (``asyncio.sleep``): every
   operation is started at once, locks its paths, "does I/O" for 2-10 ms and releases. It is
   measured twice: on a virtual clock that only the simulated I/O advances (exact and
   repeatable: the quality of the schedule alone), and in real time.
   Schemes: no lock at all (the lower bound), the global exclusive lock (0/8 of the post's
   table), the global read/write lock (3/8), per-path read/write locks with read locks on
   ancestors (7/8), and lakelock (8/8).

Run: ``python benchmarks/bench_pathlock.py`` (about half a minute; ``--quick`` for a smoke
run). Figures depend on the machine; compare within one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import selectors
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import PurePosixPath

from lakelock._pathlock import AsyncPathLock, PathLock

DEPTH_4 = "/ds/year=2024/month=01/day=02"


# --- baseline locks ----------------------------------------------------------------------------


class ThreadRWLock:
    """A plain read/write lock for threads (writers wait for readers; no fairness)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """Exclusive."""
        with self._cond:
            while self._writer or self._readers:
                self._cond.wait()
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class AsyncRWLock:
    """A FIFO read/write lock for asyncio (consecutive readers share)."""

    def __init__(self) -> None:
        self._readers = 0
        self._writer = False
        self._queue: deque[tuple[bool, asyncio.Future[None]]] = deque()

    async def acquire(self, write: bool) -> None:
        """Take the lock shared (``write=False``) or exclusive."""
        if not self._queue and self._free(write):
            self._take(write)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((write, future))
        await future

    def release(self, write: bool) -> None:
        """Give it back and admit whoever is next."""
        if write:
            self._writer = False
        else:
            self._readers -= 1
        while self._queue and self._free(self._queue[0][0]):
            write_next, future = self._queue.popleft()
            self._take(write_next)
            future.set_result(None)

    def _free(self, write: bool) -> bool:
        return not self._writer and (not write or not self._readers)

    def _take(self, write: bool) -> None:
        if write:
            self._writer = True
        else:
            self._readers += 1

    @contextlib.asynccontextmanager
    async def hold(self, write: bool) -> AsyncIterator[None]:
        """Context manager form."""
        await self.acquire(write)
        try:
            yield
        finally:
            self.release(write)


class PerPathRWLock:
    """The post's 7/8 scheme: a write lock on every path read or written, read locks on their
    ancestors, ancestors first then lexicographic, unused locks dropped (weak references)."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[PurePosixPath, AsyncRWLock] = (
            weakref.WeakValueDictionary()
        )

    @contextlib.asynccontextmanager
    async def __call__(self, read: Sequence[str], write: Sequence[str]) -> AsyncIterator[None]:
        """Hold the request."""
        targets = {PurePosixPath(p) for p in (*read, *write)}
        ancestors = {a for p in targets for a in p.parents} - targets
        steps = sorted(
            [(p, True) for p in targets] + [(p, False) for p in ancestors],
            key=lambda s: (len(s[0].parts), s[0].parts),
        )
        held: list[tuple[AsyncRWLock, bool]] = []
        try:
            for path, exclusive in steps:
                lock = self._locks.get(path)
                if lock is None:
                    lock = self._locks[path] = AsyncRWLock()
                await lock.acquire(exclusive)
                held.append((lock, exclusive))
            yield
        finally:
            for lock, exclusive in reversed(held):
                lock.release(exclusive)


# --- 1. throughput -----------------------------------------------------------------------------


def rate(loop: Callable[[int], None], seconds: float) -> float:
    """Calls per second of ``loop(n)``: n grows until one run lasts ``seconds``, then the
    best of three runs of that size (the others absorb warm-up and collector pauses)."""
    n = 1_000
    while True:
        start = time.perf_counter()
        loop(n)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
        n *= 2
    best = elapsed
    for _ in range(2):
        start = time.perf_counter()
        loop(n)
        best = min(best, time.perf_counter() - start)
    return n / best


def thread_rates(seconds: float) -> dict[str, float]:
    """Acquire+release per second of a depth-4 write, one thread."""
    mutex = threading.Lock()
    rw = ThreadRWLock()
    exact = PathLock()
    striped = PathLock(stripes=1024)
    paths = [f"/ds/year=2024/month=01/day={i}" for i in range(1_000_000)]

    def global_lock(n: int) -> None:
        for _ in range(n):
            with mutex:
                pass

    def global_rw(n: int) -> None:
        for _ in range(n):
            with rw.write():
                pass

    def lakelock_same(n: int) -> None:
        write = [DEPTH_4]
        for _ in range(n):
            with exact(write=write):
                pass

    def lakelock_new(n: int) -> None:
        for i in range(n):
            with exact(write=[paths[i % len(paths)]]):
                pass

    def lakelock_striped(n: int) -> None:
        write = [DEPTH_4]
        for _ in range(n):
            with striped(write=write):
                pass

    return {
        "global exclusive lock": rate(global_lock, seconds),
        "global read/write lock": rate(global_rw, seconds),
        "lakelock, same path": rate(lakelock_same, seconds),
        "lakelock, new path each call": rate(lakelock_new, seconds),
        "lakelock, 1024 stripes": rate(lakelock_striped, seconds),
    }


def async_rates(seconds: float) -> dict[str, float]:
    """Acquire+release per second of a depth-4 write, one task."""

    async def measure() -> dict[str, float]:
        mutex = asyncio.Lock()
        rw = AsyncRWLock()
        exact = AsyncPathLock()
        striped = AsyncPathLock(stripes=1024)
        paths = [f"/ds/year=2024/month=01/day={i}" for i in range(1_000_000)]

        async def timed(body: Callable[[int], Awaitable[None]]) -> float:
            # Same procedure as rate(), on the running loop.
            n = 1_000
            while True:
                start = time.perf_counter()
                await body(n)
                elapsed = time.perf_counter() - start
                if elapsed >= seconds:
                    break
                n *= 2
            best = elapsed
            for _ in range(2):
                start = time.perf_counter()
                await body(n)
                best = min(best, time.perf_counter() - start)
            return n / best

        async def global_lock(n: int) -> None:
            for _ in range(n):
                async with mutex:
                    pass

        async def global_rw(n: int) -> None:
            for _ in range(n):
                async with rw.hold(True):
                    pass

        async def lakelock_same(n: int) -> None:
            write = [DEPTH_4]
            for _ in range(n):
                async with exact(write=write):
                    pass

        async def lakelock_new(n: int) -> None:
            for i in range(n):
                async with exact(write=[paths[i % len(paths)]]):
                    pass

        async def lakelock_striped(n: int) -> None:
            write = [DEPTH_4]
            for _ in range(n):
                async with striped(write=write):
                    pass

        return {
            "global exclusive lock": await timed(global_lock),
            "global read/write lock": await timed(global_rw),
            "lakelock, same path": await timed(lakelock_same),
            "lakelock, new path each call": await timed(lakelock_new),
            "lakelock, 1024 stripes": await timed(lakelock_striped),
        }

    return asyncio.run(measure())


# --- 2. makespan -------------------------------------------------------------------------------

Operation = tuple[str, list[str], list[str], float]  # kind, read, write, I/O seconds


def workload(seed: int, count: int) -> list[Operation]:
    """Seeded operations on a small lake: /ds<d>/year=<y>/month=<m>/day=<n>."""
    rng = random.Random(seed)

    def path() -> str:
        parts = [f"ds{rng.randrange(4)}", f"year={rng.choice([2023, 2024])}"]
        parts += [f"month={rng.randint(1, 3):02}", f"day={rng.randint(1, 4):02}"]
        depth = rng.choices([1, 2, 3, 4], weights=[1, 2, 4, 8])[0]
        return "/" + "/".join(parts[:depth])

    ops: list[Operation] = []
    for _ in range(count):
        io = rng.uniform(0.002, 0.010)
        kind = rng.choices(
            ["read", "write", "copy", "rename", "compact"], weights=[50, 25, 10, 10, 5]
        )[0]
        a, b = path(), path()
        if kind == "read":
            ops.append((kind, [a], [], io))
        elif kind == "write":
            ops.append((kind, [], [a], io))
        elif kind == "copy":
            ops.append((kind, [a], [b], io))
        elif kind == "rename":
            ops.append((kind, [], [a, b], io))
        else:  # read a folder, write a compacted copy inside it (SIX on the folder)
            ops.append((kind, [a], [a + "/_compacted"], io))
    return ops


Hold = Callable[[list[str], list[str]], contextlib.AbstractAsyncContextManager[object]]
Scheme = Callable[[], Hold]


def schemes() -> dict[str, Scheme]:
    """Fresh lock factories for each scheme."""

    def none() -> Hold:
        return lambda read, write: contextlib.nullcontext()

    def exclusive() -> Hold:
        lock = asyncio.Lock()
        return lambda read, write: lock

    def global_rw() -> Hold:
        lock = AsyncRWLock()
        return lambda read, write: lock.hold(bool(write))

    def per_path() -> Hold:
        return PerPathRWLock()

    def lakelock() -> Hold:
        return AsyncPathLock()

    return {
        "no lock (lower bound, unsafe)": none,
        "global exclusive lock (0/8)": exclusive,
        "global read/write lock (3/8)": global_rw,
        "per-path read/write locks (7/8)": per_path,
        "lakelock (8/8)": lakelock,
    }


class _SkipAheadSelector(selectors.SelectSelector):
    """Never blocks: a wait for the next timer moves the virtual clock there instead."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout:
            self._clock[0] += timeout
        return super().select(0)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock advances only when every task waits for a timer, so a
    makespan measures the schedule alone: exact, repeatable, and free of CPU noise."""

    def __init__(self) -> None:
        self._virtual = [0.0]
        super().__init__(_SkipAheadSelector(self._virtual))

    def time(self) -> float:
        return self._virtual[0]


async def makespan(ops: list[Operation], scheme: Scheme) -> float:
    """Seconds (of the running loop's clock) from starting every operation at once to the
    last one finishing."""
    lock = scheme()
    loop = asyncio.get_running_loop()

    async def run(read: list[str], write: list[str], io: float) -> None:
        async with lock(read, write):
            await asyncio.sleep(io)

    start = loop.time()
    await asyncio.gather(*(run(r, w, io) for _, r, w, io in ops))
    return loop.time() - start


def virtual_makespan(ops: list[Operation], scheme: Scheme) -> float:
    """:func:`makespan` on a :class:`VirtualClockLoop`."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(makespan(ops, scheme))
    finally:
        loop.close()


def main() -> None:
    """Run both benchmarks and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, for a smoke test")
    args = parser.parse_args()
    seconds = 0.05 if args.quick else 0.5
    count = 60 if args.quick else 400

    threads, tasks = thread_rates(seconds), async_rates(seconds)
    print(f"Acquire+release per second, one depth-4 write ({DEPTH_4}), uncontended")
    print(f"{'lock':<32} {'threads':>12} {'asyncio':>12}")
    for name in threads:
        print(f"{name:<32} {threads[name]:>12,.0f} {tasks[name]:>12,.0f}")

    ops = workload(seed=7, count=count)
    kinds = {k: sum(1 for op in ops if op[0] == k) for k in dict.fromkeys(op[0] for op in ops)}
    total_io = sum(op[3] for op in ops)
    print()
    mix = ", ".join(f"{n} {k}" for k, n in kinds.items())
    print(f"Makespan of {count} operations started at once ({mix}),")
    print(f"each holding its locks for 2-10 ms of simulated I/O (sum of I/O: {total_io:.2f} s)")
    print(f"{'scheme':<34} {'virtual clock':>14} {'wall clock':>11} {'vs lakelock':>12}")
    virtual = {name: virtual_makespan(ops, scheme) for name, scheme in schemes().items()}
    wall = {name: asyncio.run(makespan(ops, scheme)) for name, scheme in schemes().items()}
    ours = virtual["lakelock (8/8)"]
    for name, exact in virtual.items():
        print(f"{name:<34} {exact:>13.3f}s {wall[name]:>10.3f}s {exact / ours:>11.2f}x")
    print("(virtual clock: time passes only in the simulated I/O, so the schedule alone counts;")
    print(" wall clock: the same run in real time, including the locks' CPU cost and noise)")


if __name__ == "__main__":
    main()
