"""Concurrent appends, lakelock side by side with its peers, printed as a table.

    python benchmarks/bench_appends.py              # the full grid
    python benchmarks/bench_appends.py --quick      # shorter cells, one repeat of fewer cells
    python benchmarks/bench_appends.py --modes processes --writers 2,4,16 --latency 20 \\
        --load burst --appends 5                    # bursts, every system, one process a writer

The systems, each on the same embedded S3 endpoint and each committing its own way:

- ``lakelock``: appends are intents that any process folds into its compare-and-swap of the
  root (``If-Match``), so group commit spans threads and processes.
- ``delta-rs`` (``deltalake``): writes ``_delta_log/<version>.json`` with ``If-None-Match: *``
  (its default for S3 since 0.23; ``conditional_put=etag`` is passed anyway) and retries a lost
  race on the next version itself (``max_commit_retries``, 15).
- ``lance`` (``pylance``): writes the next manifest with ``If-None-Match: *`` (its
  ``ConditionalPutCommitHandler``, chosen for ``s3://``) and rebases an append that lost its
  race on the appends that won, with its default retries.
- ``icechunk``: commits by replacing its ``repo`` object with ``If-Match`` and rebases with a
  ``ConflictDetector``, up to 1,000 times. Zarr arrays, not a table: each writer appends the
  same columns to arrays of its own group (``writer=<w>``), one chunk a column an append.
  Icechunk needs Python >= 3.12: under an older interpreter its writers run in a venv of their
  own (``--icechunk-venv``, made on first use from a Python >= 3.12 found on PATH or in pyenv,
  with the versions of ``ICECHUNK_REQUIREMENTS``; or give ``--icechunk-python``).
- ``pyiceberg-sqlite``: pyiceberg on a SQL catalog in a local SQLite file. **Not S3-only**: its
  commit is a SQL ``UPDATE`` of the table's metadata pointer in that database (which every
  writer shares through the local file system), and its retries are pyiceberg's (4). Its
  requests to the catalog are not counted.

None of them is given a lock or a coordinator beside S3 (but pyiceberg's catalog); all run
with their own default retry budgets. The peers need ``pip install 'lakelock[peers]'``;
``--systems`` picks which run.

W writers each append a small table (100 rows, one partition: its own ``writer=<w>``) to one
table. Writers are threads of one process (lakelock: one ``Lake`` shared; delta-rs: one
``DeltaTable`` per thread; peers: not run) or processes (every system: each with its own
client and table handle, kept for the whole benchmark so interpreter start-up is paid once).
Each run's clock starts once every writer has imported what its system's appends use and
opened its table, which reads the table's current state for every system (delta-rs its log,
Lance its manifest, pyiceberg its metadata, lakelock the root and the dataset's version).
``--nice N`` runs every system's writer processes N below the endpoint's priority: the
embedded endpoint is one Python process sharing the writers' cores, which a real store is not
(off by default; the table's first line says when it is on).

Two loads: ``steady`` appends again and again for ``--seconds`` and counts commits/s once
every writer has committed once (warm-up excluded: each writer's first append pays for its
start); ``burst`` makes each writer append ``--appends`` times, first commits included, and
counts commits/s from the start to the last commit (a batch job's shape: N processes starting
at once, K appends each).

Every cell runs on a fresh bucket whose table was created before the clock starts; the systems
take turns going first. Per cell: commits/s (an append that raised is no commit; ``whole run``:
from the start to the last writer done, first commits included, whatever the load), p50/p99
commit latency, the mean of each writer's first append, S3 requests and KiB per commit
(counted at the endpoint, every operation), failures (appends that raised, after the system's
own retries), and
lakelock's commits/s divided by that system's in the same repeat. Every figure is the median
over repeats; failures are summed. After each run the committed appends are counted (lakelock's
registry, delta-rs's log, Lance's fragments, Icechunk's rows, pyiceberg's data files) and
compared with the appends that succeeded: a lost or phantom commit shows in ``check``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import importlib
import importlib.util
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pyarrow as pa

DATASET = "events"
PARTITION_BY = ["writer"]
SYSTEMS = ("lakelock", "delta-rs", "lance", "icechunk", "pyiceberg-sqlite")
# Systems whose writers only run as processes (Icechunk's may need another interpreter).
PROCESS_ONLY = frozenset({"lance", "icechunk", "pyiceberg-sqlite"})
LOADS = ("steady", "burst")
ACCESS_KEY = "lakelock"
SECRET_KEY = "lakelock-secret"
REGION = "us-east-1"
# What an Icechunk venv gets (measured with icechunk 2.3.0, zarr 3.4.2; pyarrow builds the
# same batches as the other systems get, orjson speaks to the benchmark).
ICECHUNK_REQUIREMENTS = ("icechunk>=2.3,<3", "zarr>=3.1,<4", "pyarrow>=17", "orjson>=3.9")
ICECHUNK_VENV = Path.home() / ".cache" / "lakelock" / "bench-icechunk-venv"


# --- what one writer does ----------------------------------------------------------------------


def batch(writer: int, n: int, rows: int) -> pa.Table:
    """One append: ``rows`` rows of one partition (``writer``), the same for every system."""
    return pa.table(
        {
            "writer": pa.array([writer] * rows, pa.int64()),
            "batch": pa.array([n] * rows, pa.int64()),
            "row": pa.array(range(rows), pa.int64()),
            "value": pa.array([float(i) * 0.5 for i in range(rows)], pa.float64()),
            "label": pa.array([f"w{writer}-b{n}-r{i}" for i in range(rows)], pa.string()),
        }
    )


@dataclass(frozen=True)
class Target:
    """Where one run writes: the endpoint, a fresh bucket, and a scratch directory on the
    local file system (pyiceberg's SQLite catalog lives there)."""

    url: str
    bucket: str
    scratch: str
    rows: int
    writers: int


def delta_options(url: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "conditional_put": "etag",
    }


def lance_options(url: str) -> dict[str, str]:
    """object_store's S3 options, path-style: Lance picks its conditional-put commit for
    ``s3://`` by itself (no ``s3+ddb://``, no commit lock)."""
    return {
        "aws_endpoint": url,
        "allow_http": "true",
        "aws_region": REGION,
        "aws_access_key_id": ACCESS_KEY,
        "aws_secret_access_key": SECRET_KEY,
        "aws_virtual_hosted_style_request": "false",
    }


def table_uri(bucket: str) -> str:
    return f"s3://{bucket}/{DATASET}"


def open_lake(url: str, bucket: str) -> Any:
    import boto3

    from lakelock import Lake
    from lakelock.testing import client_kwargs

    return Lake(bucket, s3=boto3.client("s3", **client_kwargs(url)))


def icechunk_repo(target: Target, *, create: bool = False) -> Any:
    import icechunk

    storage = icechunk.s3_storage(
        bucket=target.bucket,
        prefix=DATASET,
        endpoint_url=target.url,
        allow_http=True,
        force_path_style=True,
        region=REGION,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
    )
    return (icechunk.Repository.create if create else icechunk.Repository.open)(storage)


def iceberg_catalog(target: Target) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        "bench",
        uri=f"sqlite:///{target.scratch}/{target.bucket}.sqlite",
        warehouse=f"s3://{target.bucket}/warehouse",
        **{
            "s3.endpoint": target.url,
            "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": SECRET_KEY,
            "s3.region": REGION,
            "s3.force-virtual-addressing": "false",
        },
    )


ICEBERG_TABLE = f"lake.{DATASET}"


@dataclass
class Handle:
    """What one writer appends through, warm: a ``Lake``, a ``DeltaTable``, a
    ``LanceDataset`` (replaced by the one each append returns), an Icechunk ``Repository``
    or a pyiceberg ``Table``."""

    system: str
    writer: int
    table: Any


def open_handle(system: str, target: Target, writer: int) -> Handle:
    if system == "lakelock":
        lake = open_lake(target.url, target.bucket)
        # Open the table as the others' handles do (delta-rs reads its log, Lance its
        # manifest, pyiceberg its metadata): the root and the dataset's current version.
        lake.registry.dataset(DATASET)
        return Handle(system, writer, lake)
    if system == "delta-rs":
        from deltalake import DeltaTable

        uri = table_uri(target.bucket)
        return Handle(system, writer, DeltaTable(uri, storage_options=delta_options(target.url)))
    if system == "lance":
        import lance

        uri = table_uri(target.bucket)
        return Handle(system, writer, lance.dataset(uri, storage_options=lance_options(target.url)))
    if system == "icechunk":
        return Handle(system, writer, icechunk_repo(target))
    if system == "pyiceberg-sqlite":
        return Handle(system, writer, iceberg_catalog(target).load_table(ICEBERG_TABLE))
    raise ValueError(f"unknown system {system!r}")


def append_once(handle: Handle, table: pa.Table) -> None:
    """One append, committed."""
    if handle.system == "lakelock":
        handle.table.append(DATASET, table, partition_by=PARTITION_BY)
    elif handle.system == "delta-rs":
        from deltalake import write_deltalake

        write_deltalake(handle.table, table, mode="append", partition_by=PARTITION_BY)
    elif handle.system == "lance":
        import lance

        handle.table = lance.write_dataset(table, handle.table, mode="append")
    elif handle.system == "icechunk":
        import icechunk

        session = handle.table.writable_session("main")
        icechunk_write(session, handle.writer, table)
        session.commit(f"append {handle.writer}", rebase_with=icechunk.ConflictDetector())
    else:
        handle.table.append(table)


def icechunk_write(session: Any, writer: int, table: pa.Table) -> None:
    """Append ``table``'s columns to the arrays of the writer's group: each grows by one chunk
    (its length is read from the session, so a lost commit shows as missing rows)."""
    import zarr

    group = zarr.open_group(store=session.store, path=f"writer={writer}")
    for name in table.column_names:
        array = group[name]
        start = array.shape[0]
        array.resize((start + table.num_rows,))
        column = table[name].to_numpy(zero_copy_only=False)
        array[start:] = column.astype(object) if name == "label" else column


def create_table(system: str, target: Target) -> None:
    """The table exists (one committed append) before the clock starts."""
    first = batch(0, -1, target.rows)
    if system == "lakelock":
        open_lake(target.url, target.bucket).append(DATASET, first, partition_by=PARTITION_BY)
    elif system == "delta-rs":
        from deltalake import write_deltalake

        write_deltalake(
            table_uri(target.bucket),
            first,
            mode="append",
            partition_by=PARTITION_BY,
            storage_options=delta_options(target.url),
        )
    elif system == "lance":
        import lance

        lance.write_dataset(
            first, table_uri(target.bucket), storage_options=lance_options(target.url)
        )
    elif system == "icechunk":
        import zarr

        repo = icechunk_repo(target, create=True)
        session = repo.writable_session("main")
        root = zarr.group(store=session.store)
        for w in range(max(1, target.writers)):
            group = root.create_group(f"writer={w}")
            for name, column in zip(first.column_names, first.columns, strict=True):
                dtype = str if name == "label" else column.type.to_pandas_dtype()
                group.create_array(name, shape=(0,), chunks=(target.rows,), dtype=dtype)
        icechunk_write(session, 0, first)
        session.commit("create")
    elif system == "pyiceberg-sqlite":
        catalog = iceberg_catalog(target)
        catalog.create_namespace("lake")
        table = catalog.create_table(ICEBERG_TABLE, schema=first.schema)
        with table.update_spec() as spec:
            spec.add_identity("writer")
        table.append(first)
    else:
        raise ValueError(f"unknown system {system!r}")


def committed_appends(system: str, target: Target) -> int:
    """Appends the table holds, as the system itself reads it back."""
    if system == "lakelock":
        return len(open_lake(target.url, target.bucket).registry.files(DATASET))
    if system == "delta-rs":
        from deltalake import DeltaTable

        uri = table_uri(target.bucket)
        return len(DeltaTable(uri, storage_options=delta_options(target.url)).file_uris())
    if system == "lance":
        import lance

        uri = table_uri(target.bucket)
        return len(lance.dataset(uri, storage_options=lance_options(target.url)).get_fragments())
    if system == "icechunk":
        import zarr

        session = icechunk_repo(target).readonly_session(branch="main")
        root = zarr.open_group(store=session.store, mode="r")
        rows = sum(root[f"writer={w}/row"].shape[0] for w in range(max(1, target.writers)))
        return int(rows // target.rows)
    if system == "pyiceberg-sqlite":
        return len(iceberg_catalog(target).load_table(ICEBERG_TABLE).inspect.files())
    raise ValueError(f"unknown system {system!r}")


@dataclass
class Outcome:
    """What one writer did in one timed run."""

    latencies: list[float] = field(default_factory=list)
    # When each commit returned (``time.monotonic``: one clock for every process of a machine).
    ends: list[float] = field(default_factory=list)
    failures: int = 0
    first_error: str | None = None
    # CPU seconds the writer's process used during the loop (processes mode: all its threads),
    # and until its first append returned (a burst's first commit pays for the cold start).
    cpu_seconds: float = 0.0
    first_cpu_seconds: float = 0.0


def append_loop(handle: Handle, rows: int, deadline: float | None, appends: int) -> Outcome:
    """Append until ``deadline`` (``time.monotonic``), or ``appends`` times without one."""
    out = Outcome()
    cpu = time.process_time()
    n = 0
    while (time.monotonic() < deadline) if deadline is not None else (n < appends):
        table = batch(handle.writer, n, rows)
        n += 1
        started = time.perf_counter()
        try:
            append_once(handle, table)
        except Exception as error:
            out.failures += 1
            if out.first_error is None:
                out.first_error = f"{type(error).__name__}: {str(error)[:200]}"
            continue
        out.latencies.append(time.perf_counter() - started)
        out.ends.append(time.monotonic())
        if len(out.latencies) == 1:
            out.first_cpu_seconds = time.process_time() - cpu
    out.cpu_seconds = time.process_time() - cpu
    return out


# --- writer processes --------------------------------------------------------------------------

# What each system's first append would import (pandas: lakelock's and delta-rs's conversions;
# rich: pyiceberg's): a writer process loads them when it prepares, so that the system whose
# turn comes first in a process does not pay for the others' imports.
PRELOAD = {
    "lakelock": ("lakelock.testing", "pyarrow.acero", "pyarrow.dataset", "pandas"),
    "delta-rs": ("deltalake", "pandas"),
    "lance": ("lance",),
    "icechunk": ("icechunk", "zarr"),
    "pyiceberg-sqlite": ("pyiceberg.catalog.sql", "pyiceberg.io.pyarrow", "pyarrow.acero", "rich"),
}


def preload(system: str) -> None:
    for module in PRELOAD[system]:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def quiet_libraries() -> None:
    """pyiceberg logs every lost race it retries; the table counts them as requests."""
    import logging

    logging.getLogger("pyiceberg").setLevel(logging.ERROR)


def worker_main(nice: int = 0) -> None:
    """A writer process: reads one task a line on stdin, answers one line on the descriptor
    that was its stdout (which now points at stderr, so that nothing a library prints can
    break the protocol). ``prepare`` opens its handle, ``go`` runs one loop, ``create`` and
    ``count`` make and read back a table (an Icechunk table can only be touched from
    Icechunk's interpreter). ``nice``: how much lower than the benchmark's own priority the
    process runs (``--nice``), lowered before it prepares any system."""
    if nice:
        os.nice(nice)
    answers: BinaryIO = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    quiet_libraries()

    def answer(tag: str, payload: Any = None) -> None:
        answers.write(orjson.dumps([tag, payload]) + b"\n")
        answers.flush()

    answer("up")
    handle: Handle | None = None
    rows = 0
    for line in sys.stdin.buffer:
        task = orjson.loads(line)
        kind = task["task"]
        try:
            if kind == "stop":
                return
            target = Target(**task["target"]) if "target" in task else None
            if kind == "prepare":
                assert target is not None
                handle = None
                preload(task["system"])
                handle = open_handle(task["system"], target, task["writer"])
                rows = target.rows
                answer("ready")
            elif kind == "go":
                assert handle is not None
                outcome = append_loop(handle, rows, task["deadline"], task["appends"])
                answer("done", dataclasses.asdict(outcome))
            elif kind == "create":
                assert target is not None
                create_table(task["system"], target)
                answer("created")
            elif kind == "count":
                assert target is not None
                answer("counted", committed_appends(task["system"], target))
        except Exception as error:
            answer("error", f"{type(error).__name__}: {str(error)[:500]}")


class ProcessPool:
    """Writer processes of one interpreter: this script, run with ``--writer-process``;
    ``nice`` lowers their priority by that much (the endpoint's stays the benchmark's)."""

    def __init__(self, size: int, python: str, nice: int = 0) -> None:
        self.python = python
        command = [python, os.path.abspath(__file__), "--writer-process", "--nice", str(nice)]
        self.processes = [
            subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            for _ in range(size)
        ]
        for w in range(size):
            self.receive(w, "up")  # start-up done: it would steal CPU from the first runs

    def send(self, w: int, task: str, **fields: Any) -> None:
        stdin = self.processes[w].stdin
        assert stdin is not None
        stdin.write(orjson.dumps({"task": task, **fields}) + b"\n")
        stdin.flush()

    def receive(self, w: int, kind: str) -> Any:
        stdout = self.processes[w].stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"writer process {w} ({self.python}) exited")
        tag, payload = orjson.loads(line)
        if tag == "error":
            raise RuntimeError(f"writer process {w}: {payload}")
        if tag != kind:
            raise RuntimeError(f"writer process {w} answered {tag!r}, not {kind!r}")
        return payload

    def call(self, task: str, kind: str, **fields: Any) -> Any:
        """Run one task in the first process and wait for its answer."""
        self.send(0, task, **fields)
        return self.receive(0, kind)

    def close(self) -> None:
        for p in self.processes:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.write(orjson.dumps({"task": "stop"}) + b"\n")
                p.stdin.close()
        for p in self.processes:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


def can_import(python: str, *modules: str) -> bool:
    probe = f"import {', '.join(modules)}"
    return subprocess.run([python, "-c", probe], check=False, capture_output=True).returncode == 0


def find_python312() -> str | None:
    """A Python >= 3.12 on PATH or among pyenv's versions."""
    candidates = [shutil.which(f"python3.{minor}") for minor in (13, 12)]
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates += sorted(glob.glob(f"{pyenv}/versions/3.1[2-9]*/bin/python"), reverse=True)
    for python in candidates:
        if python and os.access(python, os.X_OK):
            version = subprocess.run(
                [python, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                check=False,
                capture_output=True,
                text=True,
            )
            if version.stdout.strip() == "True":
                return python
    return None


def icechunk_python(given: str | None, venv: Path) -> str:
    """The interpreter Icechunk's writers run under: ``given``; this one if it can import
    icechunk; else ``venv``'s, made (once) from a Python >= 3.12 with ICECHUNK_REQUIREMENTS."""
    modules = ("icechunk", "zarr", "pyarrow", "orjson")
    if given:
        if not can_import(given, *modules):
            raise SystemExit(f"--icechunk-python {given} cannot import {', '.join(modules)}")
        return given
    if sys.version_info >= (3, 12) and importlib.util.find_spec("icechunk") is not None:
        return sys.executable
    python = str(venv / "bin" / "python")
    if os.path.exists(python) and can_import(python, *modules):
        return python
    base = find_python312()
    if base is None:
        raise SystemExit(
            "icechunk needs Python >= 3.12: none found on PATH or in pyenv; "
            "pass --icechunk-python, or leave icechunk out of --systems"
        )
    print(f"# making {venv} from {base} for icechunk's writers", file=sys.stderr)
    # Without PYTHONPATH: pip would take a checkout on it for installed and check its needs.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([base, "-m", "venv", str(venv)], check=True, env=env)
    install = [python, "-m", "pip", "install", "--quiet", *ICECHUNK_REQUIREMENTS]
    subprocess.run(install, check=True, env=env)
    return python


# --- one timed run -----------------------------------------------------------------------------


@dataclass
class Sample:
    system: str
    # The commits the rate counts and the seconds it is taken over (see counted_window).
    commits: int
    seconds: float
    # Every commit of the run: requests, bytes and CPU are per one of these.
    all_commits: int
    requests: int
    failures: int
    p50_ms: float
    p99_ms: float
    # Each writer's first append pays for its start (a cold process, every writer starting at
    # once): the p99 of the others, and the mean of those.
    p99_later_ms: float
    first_mean_ms: float
    batch: float
    check: str
    first_error: str | None
    # Commits/s over the whole run, first commits included (steady: beside the warm rate),
    # and the run's seconds from the start to the last writer done.
    whole_rate: float = 0.0
    elapsed: float = 0.0
    ops: dict[str, int] = field(default_factory=dict)
    # Answers other than 2xx per operation, area and status (lost swaps' 412s, 409s, 503s).
    refused: dict[str, int] = field(default_factory=dict)
    traffic: dict[str, int] = field(default_factory=dict)
    # CPU seconds used during the run by the writers (their processes, or this one in threads
    # mode) and by the endpoint's process.
    writers_cpu: float = 0.0
    endpoint_cpu: float = 0.0
    # Of the writers' CPU (processes mode only), what their first appends used.
    first_cpu: float = float("nan")
    # Writers that committed at least once: the first commits.
    first_commits: int = 0

    @property
    def rate(self) -> float:
        """NaN where no steady state was reached: fewer than two commits after warm-up."""
        return self.commits / self.seconds if self.commits >= 2 else float("nan")

    @property
    def per_commit(self) -> float:
        return self.requests / max(1, self.all_commits)


def percentile(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def counted_window(outcomes: Sequence[Outcome], started: float, load: str) -> tuple[int, float]:
    """Commits and seconds the rate is taken over. A burst: every commit, from the start to
    the last one. Steady: the commits that returned after every writer's first one, over the
    time from then to the last (all of the run if some writer never committed)."""
    ends = sorted(t for o in outcomes for t in o.ends)
    if not ends:
        return 0, 0.0
    if load == "burst":
        return len(ends), ends[-1] - started
    firsts = [o.ends[0] for o in outcomes if o.ends]
    warm = max(firsts) if len(firsts) == len(outcomes) else started
    later = [t for t in ends if t > warm]
    return len(later), ends[-1] - warm


def timed_run(
    endpoint: Any,
    *,
    system: str,
    writers: int,
    mode: str,
    load: str,
    latency_ms: int,
    seconds: float,
    appends: int,
    target: Target,
    pool: ProcessPool | None,
) -> Sample:
    endpoint.clear_faults()
    endpoint.create_bucket(target.bucket)
    fields = {"target": dataclasses.asdict(target), "system": system}
    if pool is not None:
        pool.call("create", "created", **fields)
    else:
        create_table(system, target)
    if latency_ms:
        endpoint.inject("latency", delay=latency_ms / 1000, jitter=latency_ms / 10000)
    deadline_in = seconds if load == "steady" else None

    outcomes: list[Outcome]
    if mode == "threads":
        preload(system)
        if system == "lakelock":
            shared = open_handle(system, target, 0)
            # One Lake: group commit across the threads.
            handles = [Handle(system, w, shared.table) for w in range(writers)]
        else:
            handles = [open_handle(system, target, w) for w in range(writers)]
        endpoint.reset_stats()
        endpoint_cpu = endpoint.cpu_seconds()
        own_cpu = time.process_time()
        started = time.monotonic()
        deadline = started + deadline_in if deadline_in is not None else None
        results: list[Outcome] = [Outcome()] * writers

        def run(w: int) -> None:
            results[w] = append_loop(handles[w], target.rows, deadline, appends)

        threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        outcomes = results
        writers_cpu = time.process_time() - own_cpu
        first_cpu = float("nan")  # the threads share one process's CPU
    else:
        assert pool is not None
        for w in range(writers):
            pool.send(w, "prepare", writer=w, **fields)
        for w in range(writers):
            pool.receive(w, "ready")
        endpoint.reset_stats()
        endpoint_cpu = endpoint.cpu_seconds()
        started = time.monotonic()
        deadline = started + deadline_in if deadline_in is not None else None
        for w in range(writers):
            pool.send(w, "go", deadline=deadline, appends=appends)
        outcomes = [Outcome(**pool.receive(w, "done")) for w in range(writers)]
        elapsed = time.monotonic() - started
        writers_cpu = sum(o.cpu_seconds for o in outcomes)
        first_cpu = sum(o.first_cpu_seconds for o in outcomes)

    endpoint_cpu = endpoint.cpu_seconds() - endpoint_cpu
    ops = endpoint.areas()  # per operation and part of the layout (root, intents, data...)
    traffic = endpoint.traffic()
    refused = endpoint.refused()
    requests = sum(ops.values())
    endpoint.clear_faults()
    latencies = sorted(x for o in outcomes for x in o.latencies)
    later = sorted(x for o in outcomes for x in o.latencies[1:])
    firsts = [o.latencies[0] for o in outcomes if o.latencies]
    failures = sum(o.failures for o in outcomes)
    expected = 1 + len(latencies)
    if pool is not None:
        found = pool.call("count", "counted", **fields)
    else:
        found = committed_appends(system, target)
    check = "ok" if found == expected else f"{found - expected:+d} appends"
    counted, window = counted_window(outcomes, started, load)
    return Sample(
        system=system,
        commits=counted,
        seconds=window,
        all_commits=len(latencies),
        requests=requests,
        failures=failures,
        p50_ms=1000 * percentile(latencies, 0.5),
        p99_ms=1000 * percentile(latencies, 0.99),
        p99_later_ms=1000 * percentile(later, 0.99),
        first_mean_ms=1000 * statistics.fmean(firsts) if firsts else float("nan"),
        # Commits per compare-and-swap of the root at the endpoint (lost ones too): what
        # group commit shares, in one process (its batches) and across them (folded intents).
        batch=len(latencies) / ops["PutObject root"] if ops.get("PutObject root") else 1.0,
        check=check,
        first_error=next((o.first_error for o in outcomes if o.first_error), None),
        whole_rate=len(latencies) / elapsed if elapsed > 0 else float("nan"),
        elapsed=elapsed,
        ops=ops,
        refused=refused,
        traffic=traffic,
        writers_cpu=writers_cpu,
        endpoint_cpu=endpoint_cpu,
        first_cpu=first_cpu,
        first_commits=len(firsts),
    )


# --- the grid ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    writers: int
    mode: str
    latency_ms: int
    load: str


def median(values: Sequence[float]) -> float:
    """The median of the values that are numbers (a run that reached no steady state is not)."""
    numbers = [v for v in values if not math.isnan(v)]
    return statistics.median(numbers) if numbers else float("nan")


def number(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def cell_systems(cell: Cell, systems: Sequence[str]) -> list[str]:
    return [s for s in systems if cell.mode == "processes" or s not in PROCESS_ONLY]


def versus(runs: list[dict[str, Sample]], system: str) -> str:
    """lakelock's commits/s divided by ``system``'s (on lakelock's row: by the best other
    system's), each repeat apart, then the median."""
    ratios = []
    for run in runs:
        if "lakelock" not in run or system not in run:
            continue
        others = [s.rate for name, s in run.items() if name != "lakelock"]
        theirs = max(others, default=0.0, key=lambda r: -1.0 if math.isnan(r) else r)
        if system != "lakelock":
            theirs = run[system].rate
        if theirs > 0 and not math.isnan(run["lakelock"].rate):
            ratios.append(run["lakelock"].rate / theirs)
    if not ratios:
        return ""
    text = f"{median(ratios):.1f}x"
    return f"**{text}** best other" if system == "lakelock" else text


def summarize(cell: Cell, runs: list[dict[str, Sample]], systems: Sequence[str]) -> list[str]:
    lines = []
    for system in systems:
        samples = [r[system] for r in runs]
        checks = sorted({s.check for s in samples})
        mode = cell.mode
        if cell.mode == "processes" and system == "lakelock":
            mode = "processes (intents)"
        batch = f"{median([s.batch for s in samples]):.1f}" if system == "lakelock" else "1"
        kib = median([sum(s.traffic.values()) / max(1, s.all_commits) / 1024 for s in samples])
        lines.append(
            f"| {system} | {cell.writers} | {mode} | {cell.load} | {cell.latency_ms} ms "
            f"| {number(median([s.rate for s in samples]))} "
            f"| {number(median([s.whole_rate for s in samples]))} "
            f"| {number(median([s.p50_ms for s in samples]), 0)} "
            f"| {number(median([s.p99_ms for s in samples]), 0)} "
            f"| {number(median([s.first_mean_ms for s in samples]), 0)} "
            f"| {median([s.per_commit for s in samples]):.1f} | {kib:.1f} | {batch} "
            f"| {sum(s.failures for s in samples)} | {', '.join(checks)} "
            f"| {versus(runs, system)} |"
        )
    return lines


def breakdown(cell: Cell, runs: list[dict[str, Sample]], systems: Sequence[str]) -> list[str]:
    """Requests per commit by S3 operation and the part of the lake's layout it touched
    (root, intents, snapshots, data files...; the peers' files are "other"), body bytes per
    commit, and CPU per commit, the writers' and the endpoint's, with how many of the machine's
    cores that kept busy; and latency apart from each writer's first append, which pays for
    its start (the last repeat)."""
    lines = []
    for system in systems:
        sample = runs[-1][system]
        commits = max(1, sample.all_commits)
        ops = ", ".join(
            f"{op} {count / commits:.2f}"
            for op, count in sorted(sample.ops.items(), key=lambda kv: -kv[1])
        )
        answers = ", ".join(
            f"{answer} {count / commits:.2f}"
            for answer, count in sorted(sample.refused.items(), key=lambda kv: -kv[1])
        )
        moved = sum(sample.traffic.values()) / commits / 1024
        busy = (sample.writers_cpu + sample.endpoint_cpu) / sample.elapsed
        lines.append(
            f"- {system}, {cell.writers} {cell.mode}, {cell.load}, {cell.latency_ms} ms: "
            f"per commit {ops}; answered other than 2xx {answers or 'none'}; "
            f"{moved:.1f} KiB moved; CPU "
            f"{1000 * sample.writers_cpu / commits:.1f} ms in the writers + "
            f"{1000 * sample.endpoint_cpu / commits:.1f} ms in the endpoint "
            f"{first_and_later(sample)}"
            f"({busy:.2f} of {os.cpu_count()} cores busy); each writer's first append "
            f"{sample.first_mean_ms:.0f} ms on average, p99 of the others "
            f"{sample.p99_later_ms:.0f} ms; {sample.whole_rate:.1f} commits/s over the whole "
            f"run"
        )
    return lines


def first_and_later(sample: Sample) -> str:
    """The writers' CPU a first commit and a later one (processes mode: each writer's first
    append pays for its cold start), or nothing."""
    later = sample.all_commits - sample.first_commits
    if math.isnan(sample.first_cpu) or not sample.first_commits or not later:
        return ""
    first = 1000 * sample.first_cpu / sample.first_commits
    rest = 1000 * (sample.writers_cpu - sample.first_cpu) / later
    return f"(the writers' {first:.1f} ms a first commit, {rest:.1f} ms a later one) "


def grid(args: argparse.Namespace) -> list[Cell]:
    cells = []
    for load in args.load:
        for latency in args.latency:
            for mode in args.modes:
                for writers in args.writers:
                    if mode == "processes" and writers == 1:
                        continue  # the same as one thread
                    cells.append(Cell(writers, mode, latency, load))
    return cells


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_choices(choices: Sequence[str]) -> Any:
    def parse(text: str) -> list[str]:
        picked = [x for x in text.split(",") if x]
        unknown = sorted(set(picked) - set(choices))
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {list(choices)}")
        return picked

    return parse


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short cells, one repeat")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds (steady)")
    parser.add_argument("--appends", type=int, default=5, help="appends a writer (burst)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per cell (median)")
    parser.add_argument("--writers", type=parse_ints, default=[1, 4, 16])
    parser.add_argument("--latency", type=parse_ints, default=[0, 20], help="ms per request")
    parser.add_argument(
        "--modes", type=parse_choices(("threads", "processes")), default=["threads", "processes"]
    )
    parser.add_argument("--load", type=parse_choices(LOADS), default=list(LOADS))
    parser.add_argument("--rows", type=int, default=100, help="rows per append")
    parser.add_argument(
        "--systems",
        type=parse_choices(SYSTEMS),
        default=list(SYSTEMS),
        help=",".join(SYSTEMS),
    )
    parser.add_argument(
        "--icechunk-python",
        default=None,
        help="an interpreter (Python >= 3.12) that imports icechunk, zarr, pyarrow, orjson",
    )
    parser.add_argument(
        "--icechunk-venv",
        type=Path,
        default=ICECHUNK_VENV,
        help="where to make (once) a venv for icechunk's writers when this interpreter "
        "cannot import icechunk",
    )
    parser.add_argument(
        "--ops",
        action="store_true",
        help="also print requests per commit by S3 operation and part of the layout",
    )
    parser.add_argument(
        "--aws-conflicts",
        action="store_true",
        help="answer 409 to a conditional write that meets another write to its key in flight "
        "(as AWS does) instead of queueing it behind that write (the endpoint's default)",
    )
    parser.add_argument(
        "--nice",
        type=parse_nice,
        default=0,
        help="run every system's writer processes this much below the endpoint's priority "
        "(1-19; 0, the default: the same), so that the embedded endpoint stands in for a store "
        "that does not share the writers' cores; processes mode only",
    )
    parser.add_argument("--writer-process", action="store_true", help=argparse.SUPPRESS)
    return parser


def parse_nice(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 19:
        raise argparse.ArgumentTypeError(f"{value} is not a niceness from 0 to 19")
    return value


def version_of(python: str, module: str) -> str:
    probe = f"import importlib.metadata as m; print(m.version({module!r}))"
    done = subprocess.run([python, "-c", probe], check=False, capture_output=True, text=True)
    return done.stdout.strip() or "?"


SYSTEM_PACKAGES = {
    "delta-rs": "deltalake",
    "lance": "pylance",
    "icechunk": "icechunk",
    "pyiceberg-sqlite": "pyiceberg",
}


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.writer_process:
        worker_main(args.nice)
        return
    if args.nice and "threads" in args.modes:
        parser().error("--nice lowers writer processes: give it with --modes processes")
    seconds = args.seconds or (2.0 if args.quick else 4.0)
    repeats = args.repeats or (1 if args.quick else 3)

    from lakelock.testing import S3Endpoint

    cells = grid(args)
    # One pool of writer processes an interpreter (Icechunk's may be another).
    pythons = {s: sys.executable for s in args.systems}
    if "icechunk" in args.systems and any(c.mode == "processes" for c in cells):
        pythons["icechunk"] = icechunk_python(args.icechunk_python, args.icechunk_venv)
    pool_size = max((c.writers for c in cells if c.mode == "processes"), default=0)
    versions = ", ".join(
        f"{s} {version_of(pythons[s], SYSTEM_PACKAGES[s])}"
        for s in args.systems
        if s in SYSTEM_PACKAGES
    )
    loads = []
    if "steady" in args.load:
        loads.append(f"steady: {seconds:.1f} s a run, warm-up excluded (- if none was left)")
    if "burst" in args.load:
        loads.append(f"burst: {args.appends} appends a writer, first commits included")
    print(
        f"# concurrent appends: lakelock vs {versions or 'nothing'}; {'; '.join(loads)}; "
        f"median of {repeats} run(s), {args.rows} rows per append"
        f"{', 409 on concurrent conditional writes' if args.aws_conflicts else ''}"
        f"{f', writer processes at nice +{args.nice} (the endpoint at +0)' if args.nice else ''}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start\n"
    )
    if "pyiceberg-sqlite" in args.systems:
        print(
            "pyiceberg-sqlite is not S3-only: its catalog is a local SQLite database (its "
            "requests there are not counted).\n"
        )
    print(
        "| system | writers | mode | load | latency | commits/s | whole run | p50 ms | p99 ms "
        "| first ms | S3 req/commit | KiB/commit | commits/CAS | failures | check "
        "| lakelock ÷ this |"
    )
    print("|:---|---:|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|---:|")
    errors: dict[str, tuple[int, str]] = {}
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-appends-"))
        endpoint = stack.enter_context(S3Endpoint(mode="process"))
        endpoint.configure(concurrent_conflicts=args.aws_conflicts)
        pools: dict[str, ProcessPool] = {}
        if pool_size:
            for python in sorted(set(pythons.values())):
                pools[python] = ProcessPool(pool_size, python, args.nice)
                stack.callback(pools[python].close)
        n = 0
        for cell in cells:
            systems = cell_systems(cell, args.systems)
            runs: list[dict[str, Sample]] = []
            for r in range(repeats):
                order = systems if r % 2 == 0 else systems[::-1]
                run: dict[str, Sample] = {}
                for system in order:
                    n += 1
                    target = Target(endpoint.url, f"appends-{n}", scratch, args.rows, cell.writers)
                    sample = timed_run(
                        endpoint,
                        system=system,
                        writers=cell.writers,
                        mode=cell.mode,
                        load=cell.load,
                        latency_ms=cell.latency_ms,
                        seconds=seconds,
                        appends=args.appends,
                        target=target,
                        pool=pools[pythons[system]] if cell.mode == "processes" else None,
                    )
                    if sample.first_error:
                        where = (
                            f"{system}, {cell.writers} writers, {cell.mode}, {cell.load}, "
                            f"{cell.latency_ms} ms"
                        )
                        count, first = errors.get(where, (0, sample.first_error))
                        errors[where] = (count + sample.failures, first)
                    run[system] = sample
                runs.append(run)
            for line in summarize(cell, runs, systems):
                print(line, flush=True)
            if args.ops:
                for line in breakdown(cell, runs, systems):
                    print(line, flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end")
    if errors:
        print("\nfailures (all runs of a cell) and the first error seen:")
        for where, (count, first) in errors.items():
            print(f"- {where}: {count} x, first: {first}")


if __name__ == "__main__":
    main()
