"""The embedded S3 endpoint alone: how fast it serves N client processes, printed as a table.

    python benchmarks/bench_endpoint.py                       # 16 and 64 clients, A B A B
    python benchmarks/bench_endpoint.py --clients 16,64 --rounds 2 --latency 20 --requests 4800

The endpoint is the one ``S3Endpoint(mode="process")`` (and so ``bench_appends.py``) starts:
``python -m lakelock.testing``, one Python process, a thread a connection, with ``--latency``
ms (and a tenth of it as jitter) injected on every request as the appends benchmark injects
it. Its bucket holds a root of ``--root-kib`` KiB at the registry's key and ``--listed``
small intents.

Each client is a process of its own with one lakelock ``ObjectStore`` (boto3 underneath, one
connection), sending one request at a time as fast as it is answered: a lakelock writer's mix
(by default per ten requests: four GETs of the root, two GETs of a small intent, two PUTs of a
small object with ``If-None-Match: *``, one LIST answering ``--listed`` keys, one PUT of a data
file's size), each client in its own seeded order. Every cell serves the same total of
``--requests``, split evenly between its clients; the clock starts once every client has made
its connection and is waiting for the go, and stops when the last client is done.

Per cell: requests a second served; the endpoint process's CPU (``/proc/<pid>/stat``,
user + system) a request and the cores it kept busy; its context switches a request
(``/proc/<pid>/status``); the clients' CPU a request (each client's ``time.process_time``);
each request's time as its client saw it (mean, p50, p99); the machine's load average when
the cell started. Cells alternate (16, 64, 16, 64 for ``--rounds 2``) since the machine may
be shared; the clients are started once, before the first cell.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

BUCKET = "endpoint-bench"
ROOT = "metastore/dataset_registry.json"
LISTED_PREFIX = "metastore/intents/"
#: Written objects sort after the listed ones, so every LIST answers the same keys.
WRITTEN_PREFIX = "metastore/intents/f-"
READY = "lakelock-endpoint-ready "
#: The request kinds a client sends and how many of each in ten (``--mix`` overrides).
MIX = {"root": 4, "intent": 2, "put": 2, "list": 1, "data": 1}
INTENT_BYTES = 900
DATA_BYTES = 4 * 1024


# --- a client process ------------------------------------------------------------------------


def client_main() -> int:
    """A client process: one store, then cells as the parent asks (JSON lines on stdin)."""
    from lakelock._client import s3_client
    from lakelock._s3 import ObjectStore
    from lakelock.testing._endpoint import client_kwargs

    store: Any = None
    answer("up", {})
    for line in sys.stdin:
        task = orjson.loads(line)
        if task["task"] == "stop":
            return 0
        if store is None:
            store = ObjectStore(s3_client(**client_kwargs(task["url"])), BUCKET)
        plan = request_plan(task["mix"], task["requests"], task["seed"])
        for kind in ("root", "list"):  # the connection made and warm before the clock
            send(store, kind, task, 0)
        answer("ready", {})
        orjson.loads(sys.stdin.readline())  # the go
        cpu = time.process_time()
        started = time.monotonic()
        times = []
        for n, kind in enumerate(plan):
            sent = time.monotonic()
            send(store, kind, task, n)
            times.append(time.monotonic() - sent)
        answer(
            "done",
            {
                "cpu": time.process_time() - cpu,
                "started": started,
                "ended": time.monotonic(),
                "times": times,
            },
        )
    return 0


def answer(tag: str, payload: object) -> None:
    sys.stdout.buffer.write(orjson.dumps([tag, payload]) + b"\n")
    sys.stdout.flush()


def request_plan(mix: dict[str, int], requests: int, seed: int) -> list[str]:
    """``requests`` kinds in the mix's proportions, in an order of the client's seed."""
    cycle = [kind for kind, count in mix.items() for _ in range(count)]
    plan = [cycle[n % len(cycle)] for n in range(requests)]
    random.Random(seed).shuffle(plan)
    return plan


def send(store: Any, kind: str, task: dict[str, Any], n: int) -> None:
    if kind == "root":
        store.get(ROOT)
    elif kind == "intent":
        store.get(listed_key(n % task["listed"]))
    elif kind == "list":
        store.list_page(LISTED_PREFIX, max_keys=task["listed"])
    else:
        size = INTENT_BYTES if kind == "put" else DATA_BYTES
        key = f"{WRITTEN_PREFIX}{task['cell']}-{task['client']}-{n}-{kind}"
        store.put(key, os.urandom(size), mode="create")


def listed_key(n: int) -> str:
    return f"{LISTED_PREFIX}{n:013x}{n:08x}-intent.json"


# --- the parent -------------------------------------------------------------------------------


class Clients:
    """Client processes: this script, run with ``--client-process``."""

    def __init__(self, size: int) -> None:
        command = [sys.executable, os.path.abspath(__file__), "--client-process"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.processes = [
            subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            for _ in range(size)
        ]
        for c in range(size):
            self.receive(c, "up")

    def send(self, c: int, task: dict[str, Any]) -> None:
        stdin = self.processes[c].stdin
        assert stdin is not None
        stdin.write(orjson.dumps(task) + b"\n")
        stdin.flush()

    def receive(self, c: int, kind: str) -> Any:
        stdout = self.processes[c].stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"client process {c} exited")
        tag, payload = orjson.loads(line)
        if tag != kind:
            raise RuntimeError(f"client process {c} answered {tag!r}, not {kind!r}")
        return payload

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


@contextlib.contextmanager
def endpoint(latency_ms: int) -> Iterator[tuple[str, int]]:
    """The embedded endpoint's process (``python -m lakelock.testing``, as
    ``S3Endpoint(mode="process")`` starts it): its URL and pid."""
    command = [sys.executable, "-m", "lakelock.testing"]
    if latency_ms:
        command += ["--fault", f"latency={latency_ms / 1000}+{latency_ms / 10000}"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith(READY):
            raise RuntimeError(f"the endpoint did not start: {line!r}")
        yield line[len(READY) :].strip(), process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def fill_bucket(url: str, root_kib: int, listed: int) -> None:
    from lakelock._client import s3_client
    from lakelock._s3 import ObjectStore
    from lakelock.testing._endpoint import client_kwargs

    client = s3_client(**client_kwargs(url))
    client.create_bucket(Bucket=BUCKET)
    store = ObjectStore(client, BUCKET)
    store.put(ROOT, os.urandom(root_kib * 1024), mode="overwrite")
    for n in range(listed):
        store.put(listed_key(n), os.urandom(INTENT_BYTES), mode="create")


@dataclass(frozen=True)
class ProcessTimes:
    """What ``/proc`` says of a process: CPU seconds (user + system, exited threads
    included), context switches by thread (those alive now), its threads."""

    cpu: float
    switches: dict[str, int]
    threads: int

    def switches_since(self, before: ProcessTimes) -> int:
        """Context switches since ``before`` of the threads alive now (an idle connection's
        thread that ended meanwhile switched little; its count left with it)."""
        return sum(n - before.switches.get(tid, 0) for tid, n in self.switches.items())

    @staticmethod
    def of(pid: int) -> ProcessTimes:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        # After the command's closing parenthesis, field 3 (state) is index 0: utime is 14,
        # stime 15, num_threads 20.
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        switches = {}
        for tid in os.listdir(f"/proc/{pid}/task"):  # a thread a connection
            status = f"/proc/{pid}/task/{tid}/status"
            with contextlib.suppress(FileNotFoundError), open(status) as f:
                switches[tid] = sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        return ProcessTimes(cpu, switches, int(fields[17]))


@dataclass(frozen=True)
class Sample:
    clients: int
    load: float
    requests: int
    seconds: float
    endpoint_cpu: float
    endpoint_switches: int
    endpoint_threads: int
    clients_cpu: float
    times: list[float]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def row(self) -> str:
        ordered = sorted(self.times)
        p50 = ordered[len(ordered) // 2]
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return (
            f"| {self.clients} | {self.load:.1f} | {self.requests} | {self.seconds:.2f} "
            f"| {self.rate:.0f} | {1000 * self.endpoint_cpu / self.requests:.2f} "
            f"| {self.endpoint_cpu / self.seconds:.2f} "
            f"| {self.endpoint_switches / self.requests:.1f} | {self.endpoint_threads} "
            f"| {1000 * self.clients_cpu / self.requests:.2f} "
            f"| {1000 * statistics.fmean(self.times):.1f} | {1000 * p50:.1f} "
            f"| {1000 * p99:.1f} |"
        )


HEADER = (
    "| clients | load | requests | seconds | requests/s | endpoint CPU ms a request "
    "| endpoint cores busy | endpoint switches a request | endpoint threads "
    "| clients' CPU ms a request | request ms: mean | p50 | p99 |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def run_cell(
    clients: Clients, url: str, pid: int, *, n: int, cell: int, args: argparse.Namespace
) -> Sample:
    each = args.requests // n
    for c in range(n):
        task = {
            "task": "run",
            "url": url,
            "cell": cell,
            "client": c,
            "requests": each,
            "seed": 1000 * cell + c,
            "mix": args.mix,
            "listed": args.listed,
        }
        clients.send(c, task)
    for c in range(n):
        clients.receive(c, "ready")
    load = os.getloadavg()[0]
    before = ProcessTimes.of(pid)
    started = time.monotonic()
    for c in range(n):
        clients.send(c, {"task": "go"})
    done = [clients.receive(c, "done") for c in range(n)]
    ended = max(d["ended"] for d in done)
    after = ProcessTimes.of(pid)
    return Sample(
        clients=n,
        load=load,
        requests=each * n,
        seconds=ended - started,
        endpoint_cpu=after.cpu - before.cpu,
        endpoint_switches=after.switches_since(before),
        endpoint_threads=after.threads,
        clients_cpu=sum(d["cpu"] for d in done),
        times=[t for d in done for t in d["times"]],
    )


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_mix(text: str) -> dict[str, int]:
    mix = {}
    for part in text.split(","):
        kind, _, count = part.partition("=")
        if kind not in MIX:
            raise argparse.ArgumentTypeError(f"unknown request kind {kind!r}: {sorted(MIX)}")
        mix[kind] = int(count)
    return mix


def order(cells: Sequence[int], rounds: int) -> list[int]:
    """The cells alternating, ``rounds`` times over: A B A B."""
    return [n for _ in range(rounds) for n in cells]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=parse_ints, default=[16, 64])
    parser.add_argument("--rounds", type=int, default=2, help="times each cell runs, alternating")
    parser.add_argument("--requests", type=int, default=4800, help="requests a cell, in all")
    parser.add_argument("--latency", type=int, default=20, help="ms injected a request")
    parser.add_argument("--root-kib", type=int, default=32)
    parser.add_argument("--listed", type=int, default=16, help="keys a LIST answers")
    parser.add_argument(
        "--mix",
        type=parse_mix,
        default=MIX,
        help="requests of each kind in a cycle: root=4,intent=2,put=2,list=1,data=1",
    )
    args = parser.parse_args(argv)
    if args.client_process:
        return client_main()
    print(
        f"endpoint: latency {args.latency} ms, root {args.root_kib} KiB, LIST of "
        f"{args.listed} keys, mix {args.mix}, {args.requests} requests a cell"
    )
    with endpoint(args.latency) as (url, pid):
        fill_bucket(url, args.root_kib, args.listed)
        clients = Clients(max(args.clients))
        try:
            print(HEADER, flush=True)
            for cell, n in enumerate(order(args.clients, args.rounds)):
                print(run_cell(clients, url, pid, n=n, cell=cell, args=args).row(), flush=True)
        finally:
            clients.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
