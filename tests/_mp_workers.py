"""Subprocess entry points for the multi-process lease and lock tests.

Run as ``python -m tests._mp_workers <role> '<json args>'`` from the repository root. Each
worker connects to the test session's embedded S3 endpoint by URL, does its part, and prints
one JSON record per line on stdout for the test to check. Workers use real time
(:func:`time.monotonic`, shared by every process of the machine), so intervals recorded by
different processes are directly comparable.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any


def _store(args: dict[str, Any]) -> Any:
    import boto3

    from lakelock._retry import RetryPolicy
    from lakelock._s3 import ObjectStore
    from lakelock.testing import client_kwargs

    client = boto3.client("s3", **client_kwargs(args["url"]))
    retry = RetryPolicy(max_attempts=50, initial_backoff=0.005, max_backoff=0.05)
    return ObjectStore(client, args["bucket"], retry=retry)


def _emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def _believed(check: Any, until: float) -> tuple[tuple[float, float] | None, tuple[float, float]]:
    """Call ``check`` until ``until`` (or until it raises LeaseLostError: a starved process may
    see its lease lapse). Returns (monotonic, wall) times of the first and of the last check
    that vouched for the lease, each read *before* its check, so the holder was valid then
    (``None`` first: it never vouched). Wall time on this machine is the embedded endpoint's
    own clock, which stamps the ``Date`` headers: the true server time."""
    from lakelock.errors import LeaseLostError

    first: tuple[float, float] | None = None
    last = (0.0, 0.0)
    while True:
        now = (time.monotonic(), time.time())
        try:
            check()
        except LeaseLostError:
            return first, last
        first = now if first is None else first
        last = now
        if now[0] >= until:
            return first, last
        time.sleep(0.002)


def _warm_up(store: Any, holding: Any) -> None:
    """Sample the server's clock across more than one tick of its ``Date``, so the shared
    server-time bounds are a round trip wide, not a second: then a holder's margin is what
    decides when it stops, and the test sees any error in it."""
    from lakelock._layout import lease_key

    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        sent = time.monotonic()
        data = store.get(lease_key(holding.name))
        holding.server_clock.observe(data.server_time, sent, time.monotonic())
        time.sleep(0.05)


def lease(args: dict[str, Any]) -> None:
    """Take lease "mp" ``holdings`` times. Worker 0 abandons its third holding (stops renewing
    and keeps believing until its own clock says the lease lapsed, like a paused holder);
    every other holding is held briefly, sometimes renewed, and released. Records the interval
    during which the worker vouched for the lease (first to last successful check), in
    monotonic and wall time, with the lease's expiry (server time) then."""
    from lakelock._lease import Lease
    from lakelock.errors import LeaseLostError

    rng = random.Random(args["seed"])
    store = _store(args)
    abandoning = 2 if args["seed"] == 0 else -1
    for index in range(args["holdings"]):
        holding = Lease(
            store,
            "mp",
            ttl=args["ttl"],
            margin=args["margin"],
            poll_interval=0.05,
            heartbeat=False,
        )
        if index == abandoning:
            _warm_up(store, holding)
        holding.acquire(timeout=30)
        acquired_wall = time.time()
        expires_at = holding.expires_at
        abandon = index == abandoning
        if abandon:
            first, last = _believed(holding.check, float("inf"))
        else:
            first, last = _believed(holding.check, time.monotonic() + rng.uniform(0.0, 0.05))
            if first is not None and rng.random() < 0.5:
                try:
                    holding.renew()
                except LeaseLostError:
                    pass
                else:
                    expires_at = holding.expires_at
                    more = _believed(holding.check, time.monotonic() + rng.uniform(0.0, 0.05))
                    last = more[1] if more[0] is not None else last
            holding.release()
        if first is not None:
            _emit(
                {
                    "pid": args["seed"],
                    "token": holding.token,
                    "start": first[0],
                    "end": last[0],
                    "acquired_wall": acquired_wall,
                    "end_wall": last[1],
                    "expires_at": expires_at,
                    "kind": "abandon" if abandon else "release",
                }
            )


DATASETS = ("sales", "archive")
PARTITIONS = (
    "",
    "/year=2024",
    "/year=2024/month=01",
    "/year=2024/month=02",
    "/year=2025",
    "/year=2025/month=01",
)
#: Deep partitions are likelier, so that many requests are compatible and run together.
WEIGHTS = (1, 2, 4, 4, 2, 4)


def _path(rng: random.Random) -> str:
    dataset = rng.choice(DATASETS)
    return "/" + dataset + rng.choices(PARTITIONS, WEIGHTS)[0]


def locks(args: dict[str, Any]) -> None:
    """``threads`` threads sharing one DistributedPathLock each take ``ops`` random requests
    (copy: read src + write dst; rename: write both; write; atomic read), hold each briefly,
    and record when they held it (from acquire's return to their last successful check), the
    request and the tokens."""
    import threading

    from lakelock._pathlock import DistributedPathLock

    store = _store(args)
    lock = DistributedPathLock(store, ttl=5.0, margin=0.2, poll_interval=0.05)
    out = threading.Lock()
    failures: list[BaseException] = []

    def run(thread: int) -> None:
        rng = random.Random(args["seed"] * 100 + thread)
        for _ in range(args["ops"]):
            op = rng.choice(("copy", "rename", "write", "read"))
            a, b = _path(rng), _path(rng)
            read, write = {
                "copy": ([a], [b]),
                "rename": ([], [a, b]),
                "write": ([], [a]),
                "read": ([a], []),
            }[op]
            held = lock.lock(read=read, write=write, timeout=60).acquire()
            first, last = _believed(held.check, time.monotonic() + rng.uniform(0.0, 0.03))
            held.release()
            if first is None:
                continue  # starved past its TTL before it could vouch for the lock
            record = {
                "pid": args["seed"],
                "thread": thread,
                "op": op,
                "read": sorted(held.request.read),
                "write": sorted(held.request.write),
                "tokens": held.tokens,
                "start": first[0],
                "end": last[0],
            }
            with out:
                _emit(record)

    def guarded(thread: int) -> None:
        try:
            run(thread)
        except BaseException as error:
            failures.append(error)
            raise

    workers = [threading.Thread(target=guarded, args=(n,)) for n in range(args["threads"])]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise SystemExit(f"worker thread failed: {failures[0]!r}")


def hold(args: dict[str, Any]) -> None:
    """Take ``/sales`` for writing with a heartbeat, report the token, and wait to be
    killed."""
    from lakelock._pathlock import DistributedPathLock

    lock = DistributedPathLock(_store(args), ttl=args["ttl"], margin=args["margin"])
    held = lock.lock(write=["/sales"], timeout=30).acquire()
    _emit({"token": held.token})
    time.sleep(120)


ROLES = {"lease": lease, "locks": locks, "hold": hold}


def main() -> None:
    role, raw = sys.argv[1], sys.argv[2]
    ROLES[role](json.loads(raw))


if __name__ == "__main__":
    main()
