"""Subprocess entry point of the chaos run (``tests/test_chaos.py``).

    python -m tests._chaos_workers '<json args>'

One process, one :class:`~lakelock.Lake` shared by ``threads`` writer threads and one reader
thread. Each writer draws ``ops`` operations from its own seeded generator:

- ``append``: rows tagged with the commit id into ``events`` (file names and the commit id are
  chosen in advance, so an unknown outcome can be looked up afterwards);
- ``ledger``: a plain registry commit (a property, no files) to ``ledger``;
- ``rename``: moves the one partition of ``moves`` between its three places (``slot=a`` and
  ``slot=b`` of ``moves``, ``slot=a`` of ``archive``: renames within and across datasets);
- ``lease``: takes lease ``chaos``, makes a fenced ``ledger`` commit, checks (and sometimes
  renews) the lease for a moment, then releases it (or, now and then, abandons it as a
  crashed holder would).

The reader thread takes snapshots until the writers are done and records where the moving
partition is, how many files and records each place has, and (every other time) the rows
read back; every tenth time, how many rows of each append ``events`` holds.

Every invocation is written as one JSON line with wall-clock ``start`` and ``end`` and its
outcome, as Jepsen records it: ``ok`` (with the registry version), ``fail`` (the library
says nothing was committed) or ``unknown``. Lease holdings record when the holder believed
it held the lease, in wall-clock time and in the lease's own server-time bounds.

With ``LAKELOCK_CHAOS_MUTATION=no-idempotency`` in the environment, the registry's commit-id
lookup is disabled in this process (``RegistryDoc.commit`` always answers "not recorded"):
the mutation the checker must catch. Test code only; the library is untouched.
"""

from __future__ import annotations

import functools
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import boto3
import orjson
import pyarrow as pa

from lakelock import Lake
from lakelock._fence import Fence
from lakelock._lease import Lease
from lakelock._pathlock import DistributedPathLock
from lakelock._registry import Registry
from lakelock._retry import RetryPolicy
from lakelock.errors import (
    CommitStateUnknownError,
    LakelockError,
    LeaseLostError,
    LockTimeout,
    NotFoundError,
    RegistryCorruptError,
)
from lakelock.testing import client_kwargs

#: Large enough that no run outgrows the idempotency window (the checker needs every id).
WINDOW = 5000
MUTATION_ENV = "LAKELOCK_CHAOS_MUTATION"
#: The places the moving partition goes between: ``<dataset>/<partition>``.
PLACES = ("moves/slot=a", "moves/slot=b", "archive/slot=a")
LEASE_NAME = "chaos"
#: Operation mix of the writer threads (weights).
DEFAULT_MIX = {"append": 4, "ledger": 2, "rename": 2, "lease": 2}


def apply_mutation() -> str | None:
    """Disable the commit-id lookup if the environment asks for it (the mutation check)."""
    mutation = os.environ.get(MUTATION_ENV)
    if mutation == "no-idempotency":
        from lakelock._registry._document import RegistryDoc

        def never_recorded(self: RegistryDoc, commit_id: str) -> None:
            return None

        RegistryDoc.commit = never_recorded  # type: ignore[method-assign]
        # Format 2 has two more ways to know a commit landed: its intent's fate in the root
        # and the dataset's commit-id index. The mutation takes them away too.
        from lakelock._registry._objects import Objects

        def no_fate(self: RegistryDoc, key: str) -> None:
            return None

        def not_indexed(self: Objects, state: Any, commit_id: str) -> None:
            return None

        RegistryDoc.fate = no_fate  # type: ignore[method-assign]
        Objects.commit_version = not_indexed  # type: ignore[method-assign]
    elif mutation:
        raise SystemExit(f"unknown mutation {mutation!r}")
    return mutation


def split_place(place: str) -> tuple[str, str]:
    dataset, partition = place.split("/", 1)
    return dataset, partition


def places_of(snapshot: Any) -> dict[str, list[int]]:
    """Where the moving partition is in ``snapshot``: place -> [files, records]."""
    found = {}
    for place in PLACES:
        dataset, partition = split_place(place)
        state = snapshot.datasets.get(dataset)
        if state is not None and partition in state.partitions:
            found[place] = [
                state.partitions[partition].file_count,
                state.partitions[partition].record_count,
            ]
    return found


def move(lake: Lake, src: str, dst: str, commit_id: str) -> Any:
    """Move the partition from place ``src`` to place ``dst``."""
    (dataset, partition), (to_dataset, to_partition) = split_place(src), split_place(dst)
    return lake.rename_partition(
        dataset,
        partition,
        to_dataset=to_dataset,
        to_partition=to_partition,
        commit_id=commit_id,
        timeout=30,
    )


def outcome_of(error: BaseException) -> dict[str, Any]:
    """How an invocation that raised is recorded: ``unknown`` only when the library says the
    commit may have happened; every other lakelock error claims nothing was committed."""
    name = type(error).__name__
    if isinstance(error, CommitStateUnknownError):
        return {"outcome": "unknown", "error": f"{name}: {error}"}
    if isinstance(error, LeaseLostError):
        # Raised on leaving the lock's block, possibly after the commit inside it landed.
        return {"outcome": "unknown", "error": f"{name}: {error}"}
    if isinstance(error, LakelockError):
        return {"outcome": "fail", "error": f"{name}: {error}"}
    return {"outcome": "unknown", "error": f"{name}: {error}", "untyped": True}


def attempt(call: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """Run one invocation: its result (``None`` if it raised), and how it is recorded (its
    outcome, and the time it ended)."""
    result = None
    try:
        result = call()
        recorded = {"outcome": "ok", "version": result.version}
    except Exception as error:
        recorded = outcome_of(error)
    recorded["end"] = time.time()
    return result, recorded


class Worker:
    """One process of the chaos run: its lake, writer operations, reader and records."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.name = args["worker"]
        client = boto3.client("s3", **client_kwargs(args["url"]))
        retry = RetryPolicy(max_attempts=60, max_elapsed=60, initial_backoff=0.005, max_backoff=0.2)
        lake = Lake(args["bucket"], s3=client, retry=retry)
        # Test-only wiring: a wide idempotency window, fast lock polls, shorter lock TTLs.
        lake.registry = Registry(lake.store, retry=retry, commit_window=WINDOW)
        lake.locks = DistributedPathLock(lake.store, poll_interval=0.02, margin=0.2)
        lake.lock = functools.partial(lake.lock, ttl=10.0)  # type: ignore[method-assign]
        lake.rename_partition = functools.partial(  # type: ignore[method-assign]
            lake.rename_partition, ttl=10.0
        )
        self.lake = lake
        self.ttl = float(args["lease_ttl"])
        self.margin = float(args["lease_margin"])
        self.records: list[dict[str, Any]] = []
        self._out = threading.Lock()
        self.done = threading.Event()

    def emit(self, record: dict[str, Any]) -> None:
        with self._out:
            self.records.append(record)

    # -- writers ------------------------------------------------------------------------------

    def run_writer(self, thread: int) -> None:
        rng = random.Random(f"{self.args['seed']}:{self.name}:{thread}")
        mix = self.args.get("mix", DEFAULT_MIX)
        kinds, weights = list(mix), list(mix.values())
        for n in range(self.args["ops"]):
            op = rng.choices(kinds, weights)[0]
            cid = f"{self.name}-{thread}-{n}"
            getattr(self, op)(rng, cid, thread)

    def _invoke(self, record: dict[str, Any], call: Any) -> Any:
        record.update(worker=self.name, start=time.time())
        result, recorded = attempt(call)
        record.update(recorded)
        self.emit(record)
        return result

    def append(self, rng: random.Random, cid: str, thread: int) -> None:
        parts = sorted(rng.sample(range(3), rng.randint(1, 2)))
        per_part = rng.randint(1, 4)
        ids = [f"{cid}#{i}" for i in range(per_part * len(parts))]
        table = pa.table(
            {
                "cid": pa.array([cid] * len(ids), pa.string()),
                "row": pa.array(ids, pa.string()),
                "part": pa.array([p for p in parts for _ in range(per_part)], pa.int64()),
            }
        )
        keys = [f"datasets/events/part={p}/{cid}.parquet" for p in parts]
        record = {"op": "append", "id": cid, "keys": keys, "rows": len(ids), "thread": thread}
        self._invoke(
            record,
            lambda: self.lake.append(
                "events", table, partition_by=["part"], commit_id=cid, file_name=f"{cid}.parquet"
            ),
        )

    def ledger(self, rng: random.Random, cid: str, thread: int, fence: Fence | None = None) -> None:
        record = {
            "op": "ledger",
            "id": cid,
            "thread": thread,
            "fence": fence.token if fence is not None else None,
            "fence_name": fence.name if fence is not None else None,
        }
        self._invoke(
            record,
            lambda: self.lake.registry.commit(
                "ledger", properties={"last": cid}, commit_id=cid, fence=fence
            ),
        )

    def rename(self, rng: random.Random, cid: str, thread: int) -> None:
        try:
            found = places_of(self.lake.registry.read())
        except LakelockError as error:
            self.emit({"op": "rename-skipped", "error": repr(error)})
            return
        src = next(iter(found), PLACES[0])
        dst = rng.choice([p for p in PLACES if p != src])
        record = {"op": "rename", "id": cid, "src": src, "dst": dst, "thread": thread}
        self._invoke(record, lambda: move(self.lake, src, dst, cid))

    def lease(self, rng: random.Random, cid: str, thread: int) -> None:
        lease = Lease(
            self.lake.store,
            LEASE_NAME,
            ttl=self.ttl,
            margin=self.margin,
            poll_interval=0.02,
            owner_label=f"{self.name}-{thread}",
            heartbeat=False,
        )
        asked = time.time()
        try:
            lease.acquire(timeout=20)
        except Exception as error:
            self.emit({"op": "lease-acquire", "asked": asked, "worker": self.name, **_err(error)})
            return
        start = time.time()
        start_earliest = lease.server_clock.now().earliest
        token = lease.token
        last = {"end": start, "end_latest": lease.server_clock.now().latest}
        believed = lease.expires_at

        def still_held() -> bool:
            nonlocal believed
            before, latest = time.time(), lease.server_clock.now().latest
            try:
                lease.check()
            except LeaseLostError:
                return False
            last.update(end=before, end_latest=latest)
            believed = lease.expires_at
            return True

        kind = "released"
        if still_held():
            try:
                fence = lease.fence
            except LeaseLostError:
                fence = None
            if fence is not None:
                self.ledger(rng, f"{cid}-fenced", thread, fence=fence)
            if rng.random() < 0.3:
                try:
                    lease.renew()
                except LeaseLostError:
                    kind = "lost"
                except LakelockError:
                    pass  # not renewed: held as before, until its expiry
            until = time.time() + rng.uniform(0.0, 0.03)
            while kind == "released" and time.time() < until:
                if not still_held():
                    kind = "lost"
                    break
                time.sleep(0.003)
            else:
                still_held()
        else:
            kind = "lost"
        if kind == "released" and rng.random() < self.args.get("abandon", 0.0):
            kind = "abandoned"  # stop here, as a crashed holder would: never released
        else:
            try:
                lease.release()
            except Exception as error:
                kind = f"release-failed: {type(error).__name__}"
        self.emit(
            {
                "op": "lease",
                "worker": self.name,
                "thread": thread,
                "token": token,
                "asked": asked,
                "start": start,
                "start_earliest": start_earliest,
                "expires_at": believed,
                "kind": kind,
                "margin": self.margin,
                **last,
            }
        )

    # -- reader -------------------------------------------------------------------------------

    def run_reader(self) -> None:
        reads = 0
        while not self.done.wait(0.01):
            reads += 1
            record: dict[str, Any] = {"op": "observe", "worker": self.name, "time": time.time()}
            try:
                snap = self.lake.registry.read()
                record["version"] = snap.version
                record["places"] = found = places_of(snap)
                if reads % 2 == 0 and len(found) == 1:
                    dataset, partition = split_place(next(iter(found)))
                    table = self.lake.read(dataset, partitions=[partition], snapshot=snap)
                    record["ids"] = sorted(table.column("id").to_pylist())
                    record["slots"] = sorted(set(table.column("slot").to_pylist()))
                if reads % 10 == 0 and "events" in snap.datasets:
                    cids = self.lake.read("events", snapshot=snap).column("cid").to_pylist()
                    record["events"] = dict(Counter(cids))
            except (NotFoundError, RegistryCorruptError, KeyError) as error:
                record["violation"] = f"{type(error).__name__}: {error}"
            except LakelockError as error:
                if getattr(error, "code", None) == "ChecksumMismatch":
                    record["violation"] = f"{type(error).__name__}: {error}"
                else:
                    record["error"] = f"{type(error).__name__}: {error}"
            except Exception as error:
                record["violation"] = f"untyped {type(error).__name__}: {error}"
            self.emit(record)


def _err(error: BaseException) -> dict[str, Any]:
    return {
        "error": f"{type(error).__name__}: {error}",
        "untyped": not isinstance(error, LakelockError | LockTimeout),
    }


def main(raw: str) -> int:
    """Run one worker process; its exit status."""
    args = orjson.loads(raw)
    mutation = apply_mutation()
    worker = Worker(args)
    failures: list[BaseException] = []

    def guarded(target: Any, *params: Any) -> None:
        try:
            target(*params)
        except BaseException as error:
            failures.append(error)
            raise

    writers = [
        threading.Thread(target=guarded, args=(worker.run_writer, t))
        for t in range(args["threads"])
    ]
    reader = threading.Thread(target=guarded, args=(worker.run_reader,))
    reader.start()
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    worker.done.set()
    reader.join()
    header = {"op": "worker", "worker": worker.name, "mutation": mutation}
    lines = [orjson.dumps(r) for r in [header, *worker.records]]
    with open(args["out"], "wb") as handle:
        handle.write(b"\n".join(lines) + b"\n")
    if failures:
        print(f"worker thread failed: {failures[0]!r}", file=sys.stderr)
        return 1
    return 0


def exit_now(status: int) -> None:
    """Leave without the interpreter's teardown: the records are written, and pyarrow's
    native thread pool sometimes aborts that teardown ("terminate called without an active
    exception", SIGABRT; apache/arrow#34314), which would read as a failed worker."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main(sys.argv[1]))
