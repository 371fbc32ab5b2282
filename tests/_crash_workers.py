"""Subprocess entry point of the crash run (``tests/test_crash.py``).

    python -m tests._crash_workers '<json args>'

A worker kills itself with ``SIGKILL`` at a seeded point: just before sending its
``kill_at``-th S3 request (``"before"``: the request never leaves) or just after receiving
the answer to it (``"after"``: the request was applied, the process never learns of it).
Requests are counted on the boto3 client, so the point can fall anywhere: between a data
file's upload and its commit, between a manifest and the registry's compare-and-swap, in the
middle of a partition copy, during a lock or lease renewal...

Roles:

- ``writer``: appends to ``events``, moves the partition of ``moves`` between its places
  (under the path lock, with a short TTL) and commits to ``ledger``, in a seeded order,
  until it dies;
- ``holder``: takes lease ``crash`` and the path lock on ``/ledger`` (both with heartbeats and
  a short TTL), says so, then makes fenced ``ledger`` commits until it dies; its kill point
  is counted from the moment it holds both. A holder whose lease lapsed first (its heartbeat
  late on a loaded machine) is refused its fence, as promised: it says so, with how starved
  it was (:class:`Watch`), and dies there instead.

Each invocation is written (and flushed, so a kill loses nothing written before it) as a
``start`` line and, if the worker lives to see it, an ``end`` line with the outcome; the
last line before the kill says which request it died at.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import sys
import threading
import time
from typing import IO, Any, NoReturn

import boto3
import orjson
import pyarrow as pa

from lakelock import Lake
from lakelock._lease import Lease
from lakelock._pathlock import DistributedPathLock
from lakelock._registry import Registry
from lakelock._retry import RetryPolicy
from lakelock.errors import LeaseLostError
from lakelock.testing import client_kwargs
from tests._chaos_workers import PLACES, WINDOW, attempt, exit_now, move, places_of

LEASE_NAME = "crash"
HOLDER_LOCK = "/ledger"


class Crasher:
    """Counts the client's requests and kills the process at the chosen one."""

    def __init__(self, client: Any, log: Log, *, kill_at: int | None, phase: str) -> None:
        self.log = log
        self.kill_at = kill_at
        self.phase = phase
        self.armed = True
        self.count = 0
        self._mutex = threading.Lock()
        self._doomed: str | None = None
        client.meta.events.register("before-send.s3", self._before_send)
        client.meta.events.register("before-parse.s3", self._before_parse)

    def arm(self) -> None:
        """Start counting towards the kill point from now."""
        with self._mutex:
            self.armed, self.count = True, 0

    def _before_send(self, event_name: str, request: Any, **_: Any) -> None:
        with self._mutex:
            if not self.armed or self.kill_at is None:
                return
            self.count += 1
            if self.count != self.kill_at:
                return
            what = f"{event_name.rsplit('.', 1)[-1]} {request.url.split('?', 1)[0]}"
            if self.phase == "after":
                self._doomed = what
                return
        self.die(what, "before")

    def _before_parse(self, event_name: str, **_: Any) -> None:
        # The first answer parsed after the doomed request was sent: its own, except when a
        # heartbeat thread's answer comes first (the kill point is then a little earlier).
        with self._mutex:
            doomed = self._doomed
        if doomed is not None:
            self.die(doomed, "after")

    def die(self, what: str, phase: str) -> NoReturn:
        self.log.write({"op": "killed", "time": time.time(), "request": what, "phase": phase})
        os.kill(os.getpid(), signal.SIGKILL)
        raise SystemExit("killed")  # not reached: SIGKILL is not caught


class Watch:
    """How starved of time the process was: the longest a thread asking to wake every
    ``PERIOD`` seconds waited past it (the process got no CPU, or its threads no turn), and
    the slowest round trip of the client's requests (the endpoint got none), and how long
    the lease's acquire took (its heartbeat starts when it returns, its expiry counts from
    its write)."""

    PERIOD = 0.05

    def __init__(self, client: Any) -> None:
        self.stall = 0.0
        self.slowest = 0.0
        self.acquiring = 0.0
        self._sent = threading.local()
        client.meta.events.register("before-send.s3", self._before_send)
        client.meta.events.register("needs-retry.s3", self._answered)
        threading.Thread(target=self._tick, name="watch", daemon=True).start()

    def _tick(self) -> None:
        last = time.monotonic()
        while True:
            time.sleep(self.PERIOD)
            now = time.monotonic()
            self.stall = max(self.stall, now - last - self.PERIOD)
            last = now

    def _before_send(self, **_: Any) -> None:
        self._sent.at = time.monotonic()

    def _answered(self, **_: Any) -> None:
        sent = getattr(self._sent, "at", None)
        if sent is not None:
            self.slowest = max(self.slowest, time.monotonic() - sent)
            self._sent.at = None


class Log:
    """JSON lines, each written through to the OS at once (a SIGKILL keeps them)."""

    def __init__(self, handle: IO[bytes], worker: str) -> None:
        self.handle = handle
        self.worker = worker
        self._mutex = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        with self._mutex:
            self.handle.write(orjson.dumps({**record, "worker": self.worker}) + b"\n")
            self.handle.flush()


def make_lake(args: dict[str, Any], log: Log) -> tuple[Lake, Crasher]:
    client = boto3.client("s3", **client_kwargs(args["url"]))
    crasher = Crasher(client, log, kill_at=args.get("kill_at"), phase=args.get("phase", "before"))
    retry = RetryPolicy(max_attempts=30, max_elapsed=30, initial_backoff=0.005, max_backoff=0.1)
    lake = Lake(args["bucket"], s3=client, retry=retry)
    # Test-only wiring: a wide idempotency window, fast lock polls, short lock TTLs.
    lake.registry = Registry(lake.store, retry=retry, commit_window=WINDOW)
    lake.locks = DistributedPathLock(lake.store, poll_interval=0.05, margin=args["margin"])
    lake.lock = functools.partial(lake.lock, ttl=args["ttl"])  # type: ignore[method-assign]
    lake.rename_partition = functools.partial(  # type: ignore[method-assign]
        lake.rename_partition, ttl=args["ttl"], timeout=60.0
    )
    return lake, crasher


def invoke(log: Log, record: dict[str, Any], call: Any) -> None:
    """Run one invocation, logging its start before and its outcome after."""
    log.write({**record, "start": time.time()})
    log.write({"id": record["id"], **attempt(call)[1]})


def writer(args: dict[str, Any], log: Log) -> None:
    lake, _ = make_lake(args, log)
    rng = random.Random(f"{args['seed']}:{args['worker']}")
    for n in range(args.get("ops", 1000)):
        cid = f"{args['worker']}-{n}"
        op = rng.choices(["append", "rename", "ledger"], [5, 2, 2])[0]
        if op == "append":
            part = rng.randrange(3)
            rows = rng.randint(1, 4)
            table = pa.table(
                {
                    "cid": [cid] * rows,
                    "row": [f"{cid}#{i}" for i in range(rows)],
                    "part": pa.array([part] * rows, pa.int64()),
                }
            )
            record = {
                "op": "append",
                "id": cid,
                "keys": [f"datasets/events/part={part}/{cid}.parquet"],
                "rows": rows,
            }
            invoke(
                log,
                record,
                lambda table=table, cid=cid: lake.append(
                    "events",
                    table,
                    partition_by=["part"],
                    commit_id=cid,
                    file_name=f"{cid}.parquet",
                ),
            )
        elif op == "rename":
            src = next(iter(places_of(lake.registry.read())), PLACES[0])
            dst = rng.choice([p for p in PLACES if p != src])
            invoke(
                log,
                {"op": "rename", "id": cid, "src": src, "dst": dst},
                lambda src=src, dst=dst, cid=cid: move(lake, src, dst, cid),
            )
        else:
            invoke(
                log,
                {"op": "ledger", "id": cid, "fence": None},
                lambda cid=cid: lake.registry.commit(
                    "ledger", properties={"last": cid}, commit_id=cid
                ),
            )


def holder(args: dict[str, Any], log: Log) -> None:
    lake, crasher = make_lake(args, log)
    crasher.armed = False
    watch = Watch(lake.store.client)
    lease = lake.lease(
        LEASE_NAME, ttl=args["ttl"], margin=args["margin"], heartbeat=True, poll_interval=0.05
    )
    began = time.monotonic()
    lease.acquire(timeout=30)
    watch.acquiring = time.monotonic() - began
    lock = lake.lock(write=[HOLDER_LOCK], timeout=30).acquire()
    log.write(
        {
            "op": "holding",
            "time": time.time(),
            "lease_token": lease.token,
            "lock_token": lock.token,
            "pid": os.getpid(),
        }
    )
    crasher.arm()
    for n in range(args.get("ops", 1000)):
        cid = f"{args['worker']}-{n}"
        try:
            fence = lease.fence
        except LeaseLostError as error:
            lapsed(log, crasher, watch, lease, error)
        invoke(
            log,
            {"op": "ledger", "id": cid, "fence": fence.token, "fence_name": fence.name},
            lambda cid=cid, fence=fence: lake.registry.commit(
                "ledger", properties={"last": cid}, commit_id=cid, fence=fence
            ),
        )
    lock.release()
    lease.release()


def lapsed(
    log: Log, crasher: Crasher, watch: Watch, lease: Lease, error: LeaseLostError
) -> NoReturn:
    """The holder's lease lapsed before its kill point: say how starved the process was,
    then die there (its lease and lock left to expire, as a killed holder's)."""
    log.write(
        {
            "op": "lapsed",
            "time": time.time(),
            "reason": str(error),
            "ttl": lease.terms.ttl,
            "margin": lease.terms.margin,
            "beat": lease.terms.beat,
            "stall": watch.stall,
            "slowest": watch.slowest,
            "acquiring": watch.acquiring,
        }
    )
    crasher.die("its lease lapsed", "lapsed")


ROLES = {"writer": writer, "holder": holder}


def main(raw: str) -> None:
    args = orjson.loads(raw)
    with open(args["out"], "ab", buffering=0) as handle:
        log = Log(handle, args["worker"])
        log.write({"op": "started", "time": time.time(), "pid": os.getpid()})
        ROLES[args["role"]](args, log)
        log.write({"op": "finished", "time": time.time()})


if __name__ == "__main__":
    main(sys.argv[1])
    exit_now(0)
