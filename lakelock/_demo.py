"""``lakelock demo``: the whole story on an embedded S3, no AWS account needed.

1. Start the embedded S3 endpoint with realistic latency and apply the bucket policy lakelock
   generates (unconditional writes to ``datasets/`` and ``metastore/`` are refused).
2. Run several writer *processes*, each appending day partitions of ``customer_profiles``
   concurrently (every append: write-once parquet + one registry compare-and-swap).
3. Meanwhile one of them stages a day in ``staging_profiles`` and publishes it into
   ``customer_profiles`` by renaming the partition under the hierarchical path lock.
4. The writers elect a leader with a lease; the leader compacts one partition (many small
   files into one), committing with its fencing token.
5. Check the result: the registry against the bucket, the rows against what was written, and
   an unconditional PUT against the policy. Print a summary.
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson
import pyarrow as pa
from botocore.exceptions import ClientError

from lakelock import Lake, generate_bucket_policy
from lakelock._client import s3_client
from lakelock._layout import DATASETS_PREFIX, files_prefix
from lakelock.testing import S3Endpoint, client_kwargs

__all__ = ["run_demo"]

BUCKET = "lakelock-demo"
PRINCIPAL = "arn:aws:iam::111111111111:role/etl-writer"
ACCESS_KEY = "etl-writer"
DATASET = "customer_profiles"
STAGING = "staging_profiles"
PARTITIONS = ("year", "month", "day")


@dataclass
class Tally:
    """What the writer processes report back."""

    commits: int = 0
    redrives: int = 0
    retries: int = 0
    rows: int = 0
    renames: int = 0
    compactions: int = 0
    leaders: int = 0
    errors: list[str] = field(default_factory=list)


def _profiles(rng: random.Random, day: int, rows: int) -> pa.Table:
    ids = [rng.randrange(1_000_000) for _ in range(rows)]
    return pa.table(
        {
            "customer_id": pa.array(ids, pa.int64()),
            "name": [f"customer-{i}" for i in ids],
            "score": pa.array([rng.random() for _ in ids], pa.float64()),
            "year": pa.array([2024] * rows, pa.int32()),
            "month": pa.array([1] * rows, pa.int32()),
            "day": pa.array([day] * rows, pa.int32()),
        }
    )


@dataclass(frozen=True, slots=True)
class Signals:
    """Events the parent sets: all writers ready; all appends in; all writers done."""

    start: Any
    compact: Any
    finished: Any


@dataclass(frozen=True, slots=True)
class Job:
    """What every writer process is told."""

    url: str
    writers: int
    appends: int
    seconds: float | None


def _writer(job: Job, worker: int, events: Any, signals: Signals) -> None:
    """One writer process: appends, maybe a rename, maybe (if elected) a compaction."""
    lake = Lake(BUCKET, s3=s3_client(**client_kwargs(job.url, access_key=ACCESS_KEY)))
    rng = random.Random(worker)
    events.put(("ready", worker, 0, 0, 0))
    signals.start.wait(timeout=120)
    # Leader election: every writer tries once, together; the winner's heartbeat keeps the
    # lease until every writer is done, so a latecomer cannot be elected a second leader.
    lease = lake.lease("compactor", ttl=10, heartbeat=True)
    leader = lease.try_acquire()
    if leader:
        events.put(("leader", worker, 0, 0, lease.token))
    deadline = time.monotonic() + job.seconds if job.seconds is not None else None
    try:
        for n in itertools.count():
            if deadline is None and n >= job.appends:
                break
            if deadline is not None and n > 0 and time.monotonic() >= deadline:
                break
            day = 1 + (worker + n) % 4  # writers overlap: partitions get several files
            table = _profiles(rng, day, rng.randrange(50, 200))
            result = lake.append(
                DATASET, table, partition_by=PARTITIONS, commit_id=f"w{worker}-append-{n}"
            )
            events.put(("commit", worker, result.redrives, result.retries, table.num_rows))
        if worker == 0:
            staged = _profiles(rng, 29, 120)
            lake.append(STAGING, staged, partition_by=PARTITIONS, commit_id="stage-day-29")
            result = lake.rename_partition(STAGING, "year=2024/month=1/day=29", to_dataset=DATASET)
            events.put(("rename", worker, result.redrives, result.retries, staged.num_rows))
        events.put(("appended", worker, 0, 0, 0))
        if leader:
            signals.compact.wait(timeout=120)  # every writer's appends are in
            _compact(lake, lease, events, worker)
    except Exception as error:  # reported to the parent, which fails the demo
        events.put(("error", worker, 0, 0, f"{type(error).__name__}: {error}"))
    events.put(("done", worker, 0, 0, 0))
    if leader:
        signals.finished.wait(timeout=120)
        lease.release()


def _compact(lake: Any, lease: Any, events: Any, worker: int) -> None:
    """The leader's job: rewrite the partition with the most files as one file."""
    snapshot = lake.registry.read()
    state = snapshot.datasets[DATASET]
    path, partition = max(state.partitions.items(), key=lambda item: item[1].file_count)
    if partition.file_count < 2:
        return
    old = lake.registry.files(DATASET, snapshot=snapshot, partitions=[path])
    table = lake.read(DATASET, partitions=[path], snapshot=snapshot)
    new = lake.write(DATASET, table, partition_by=PARTITIONS)
    result = lake.registry.commit(
        DATASET, add=new, remove=old, fence=lease.fence, commit_id=f"compact-{path}"
    )
    events.put(("compact", worker, result.redrives, result.retries, len(old)))


def run_demo(
    *,
    writers: int = 4,
    appends: int = 6,
    seconds: float | None = None,
    latency: float = 0.01,
    out: TextIO = sys.stdout,
    progress: bool = True,
    progress_out: TextIO | None = None,
) -> int:
    """Run the demo; print to ``out`` and, with ``progress``, a live status line to
    ``progress_out`` (default stderr, so it shows while ``out`` is piped); return 0 if every
    check passed, 1 otherwise.

    Each of ``writers`` processes appends ``appends`` times, or for ``seconds`` if given;
    ``latency`` (seconds) is added to every S3 request at the endpoint."""
    started = time.monotonic()
    say = _Printer(out, progress_out or sys.stderr)
    with S3Endpoint(principals={ACCESS_KEY: PRINCIPAL}) as s3:
        admin = s3.client()
        admin.create_bucket(Bucket=BUCKET)
        policy = generate_bucket_policy(
            BUCKET, principals=[PRINCIPAL], deny_unconditional_delete=True
        )
        admin.put_bucket_policy(Bucket=BUCKET, Policy=orjson.dumps(policy).decode())
        if latency:
            s3.inject("latency", delay=latency, jitter=latency / 2)
        say(f"embedded S3 at {s3.url}, {latency * 1000:.0f} ms latency, bucket policy applied")
        work = f"{appends} appends" if seconds is None else f"{seconds:g} s of appends"
        say(
            f"{writers} writer processes x {work} to {DATASET!r}, "
            "one partition published by rename, one compaction by the elected leader"
        )

        tally = _run_writers(Job(s3.url, writers, appends, seconds), say, progress)
        requests = sum(s3.stats().values())
        s3.clear_faults()

        writer = s3_client(**s3.client_kwargs(access_key=ACCESS_KEY))
        lake = Lake(BUCKET, s3=writer)
        checks = _checks(lake, tally)
        try:
            writer.put_object(Bucket=BUCKET, Key=files_prefix(DATASET) + "rogue.parquet", Body=b"x")
            refused = False
        except ClientError as error:
            refused = error.response["Error"]["Code"] == "AccessDenied"
        checks.append(("an unconditional PUT into datasets/ is refused by the policy", refused))

        snapshot = lake.registry.read()
        commits = tally.commits + tally.renames + tally.compactions
        say("")
        say("summary")
        rows = [
            (
                "commits",
                f"{commits} ({tally.commits} appends, {tally.renames} rename, "
                f"{tally.compactions} compaction)",
            ),
            ("redrives / retries", f"{tally.redrives} / {tally.retries}"),
            (
                "S3 requests/commit",
                f"{requests / max(1, commits):.1f} (every request of every writer: "
                "data, manifests, registry, locks, leases)",
            ),
            ("registry version", str(snapshot.version)),
            (f"rows in {DATASET}", str(lake.read(DATASET).num_rows)),
            ("elapsed", f"{time.monotonic() - started:.1f} s"),
        ]
        width = max(len(name) for name, _ in rows)
        for name, value in rows:
            say(f"  {name:<{width}}  {value}")
            if name == "registry version":
                for line in _why_versions(lake, snapshot, commits):
                    say(f"  {'':<{width}}  {line}")
        for message in tally.errors:
            say(f"  error: {message}")
        say("checks")
        for description, ok in checks:
            say(f"  [{'ok' if ok else 'FAILED'}] {description}")
        ok = all(passed for _, passed in checks) and not tally.errors
        say("demo passed" if ok else "demo FAILED")
        return 0 if ok else 1


def _why_versions(lake: Lake, snapshot: Any, commits: int) -> list[str]:
    """Why the registry's version is not the number of commits, from what the root records:
    a version is one compare-and-swap of the root, and group commit applies several commits
    (of one process or of several) in one; a refused commit takes a version to record why."""
    first = "(one version = one compare-and-swap of the registry's root;"
    records = snapshot.commits
    if len(records) >= lake.registry.settings().commit_window:  # older commits have left the window
        return [first, " group commit applies several commits in one)"]
    applied = {r.version for r in records}
    refused = [e for e in lake.registry.log() if e.fate != "applied"]
    refusing = {f.version for f in refused} - applied
    others = snapshot.version - len(applied) - len(refusing)
    locking = sum(r.operation in ("lock", "unlock") for r in records)  # the rename's lock
    leasing = sum(r.operation == "takeover" for r in records)  # the leader's lease taken
    staged = len(records) - commits - locking - leasing
    notes = [
        f" group commit applied these {commits} commits"
        + (f" and {staged} to {STAGING}" if staged else "")
        + (f", {locking} taking and releasing write locks" if locking else "")
        + (f", {leasing} recording the leader's lease" if leasing else "")
        + f" in {_count(len(applied), 'version')}, {len(records) / max(1, len(applied)):.1f} each"
    ]
    if refused:
        notes.append(
            f" {_count(len(refused), 'refused commit')} took {len(refusing)} more to record why"
            " (`lakelock registry log` lists them)"
        )
    if others > 0:
        notes.append(f" {_count(others, 'other version')} applied no commit")
    return [first, *notes[:-1], notes[-1] + ")"]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _run_writers(job: Job, say: _Printer, progress: bool) -> Tally:
    context = multiprocessing.get_context("spawn")
    events = context.Queue()
    signals = Signals(context.Event(), context.Event(), context.Event())
    processes = [
        context.Process(target=_writer, args=(job, w, events, signals), daemon=True)
        for w in range(job.writers)
    ]
    for p in processes:
        p.start()
    tally = Tally()
    done = ready = appended = 0
    expected = f"{job.writers * job.appends}" if job.seconds is None else "?"
    while done < job.writers:
        try:
            kind, worker, redrives, retries, value = events.get(timeout=120)
        except queue.Empty:
            tally.errors.append("a writer process stopped reporting")
            break
        tally.redrives += redrives
        tally.retries += retries
        if kind == "ready":
            ready += 1
            if ready == job.writers:
                signals.start.set()
        elif kind == "appended":
            appended += 1
            if appended == job.writers:
                signals.compact.set()
        elif kind == "commit":
            tally.commits += 1
            tally.rows += value
        elif kind == "rename":
            tally.renames += 1
            tally.rows += value
        elif kind == "leader":
            tally.leaders += 1
            say.line(f"writer {worker} was elected leader (lease token {value})")
        elif kind == "compact":
            tally.compactions += 1
            say.line(f"leader (writer {worker}) compacted {value} files into one")
        elif kind == "error":
            tally.errors.append(f"writer {worker}: {value}")
            signals.compact.set()  # nobody waits for a writer that failed
        elif kind == "done":
            done += 1
        if progress:
            say.progress(
                f"appends {tally.commits}/{expected}  renames {tally.renames}  "
                f"redrives {tally.redrives}  retries {tally.retries}"
            )
    signals.finished.set()
    for p in processes:
        p.join(timeout=30)
    say.progress_end()
    return tally


def _checks(lake: Any, tally: Tally) -> list[tuple[str, bool]]:
    snapshot = lake.registry.read()
    files = [f for name in snapshot.datasets for f in lake.registry.files(name, snapshot=snapshot)]
    present = {o.key: o for o in lake.store.list(DATASETS_PREFIX)}
    table = lake.read(DATASET, snapshot=snapshot)
    staging = snapshot.datasets.get(STAGING)
    published = "year=2024/month=1/day=29" in snapshot.datasets[DATASET].partitions
    return [
        (
            "every registered file exists, with its recorded size",
            all(f.key in present and present[f.key].size == f.size for f in files),
        ),
        ("rows read back = rows committed", table.num_rows == tally.rows),
        (
            "record counts in the registry = rows read back",
            snapshot.datasets[DATASET].record_count == table.num_rows,
        ),
        (
            "the renamed partition moved whole: present in the target, gone from staging",
            published and (staging is None or not staging.partitions),
        ),
        (
            "every append was committed exactly once",
            sum(1 for c in snapshot.commits if "-append-" in c.id) == tally.commits,
        ),
        (
            "exactly one leader was elected, and it compacted",
            tally.leaders == 1 and tally.compactions == 1,
        ),
    ]


class _Printer:
    """Lines go to ``out``; the live status line (rewritten in place) to ``status``."""

    def __init__(self, out: TextIO, status: TextIO) -> None:
        self._out = out
        self._status = status
        self._open = False

    def __call__(self, message: str) -> None:
        self.progress_end()
        print(message, file=self._out, flush=True)

    def line(self, message: str) -> None:
        self(message)

    def progress(self, message: str) -> None:
        print(f"\r  {message}", end="", file=self._status, flush=True)
        self._open = True

    def progress_end(self) -> None:
        if self._open:
            print(file=self._status, flush=True)
            self._open = False
