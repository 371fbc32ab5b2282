"""Lease takeover time after the holder dies, printed as a table.

    python benchmarks/bench_lease.py                # TTLs 3 and 10 s, polls 0.1 and 1 s (~4 min)
    python benchmarks/bench_lease.py --quick        # TTL 3 s, two runs each
    python benchmarks/bench_lease.py --acquire 50   # what one uncontended acquire costs

``--acquire N``: N acquire/release rounds of one lease of a lake that has a dataset, in this
process, no other writer: the requests each acquire and each release sends, by S3 operation
and part of the layout, and their median time (an acquire records its takeover in the
registry: one commit; a release commits nothing).

One trial: a holder process acquires the lease (``ttl`` T, heartbeat on, as a leader would)
and is SIGKILLed at once, with nearly its whole TTL left (the worst case: a holder that dies
at a random point of its heartbeat period is taken over sooner, by up to one renewal period,
``(T - margin) / 3``). A waiter process, started in advance and already past interpreter
start-up, then calls ``acquire`` with poll interval P and takes the lease over.

Reported per (T, P), medians of several trials:

- **kill -> acquired**: from the SIGKILL to the waiter's ``acquire`` returning (both read the
  machine's monotonic clock);
- **after expiry**: from the dead holder's ``expires_at`` (server time, which for the embedded
  endpoint is this machine's wall clock) to the takeover. The lease protocol waits at least
  ``margin`` (1 s by default) past expiry by the waiter's *earliest* estimate of server time,
  whose uncertainty comes from S3's whole-second ``Date`` header (see
  ``lakelock/_clock.py``): the holder's own estimate, which set ``expires_at``, errs
  late by up to the same amount;
- **GETs while waiting**: requests the waiter sent between the kill and the takeover, counted
  at the endpoint (the price of a short poll interval).

The documented bound for a crashed holder is ``T + margin`` plus both processes' clock
uncertainty (each at most 1 s + a round trip) plus one poll interval.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

BUCKET = "leases"


# --- the two roles, run as child processes of this script --------------------------------------


def child(role: str, url: str, name: str, ttl: float, poll: float) -> None:
    """``holder``: acquire on "go", report, then idle until killed. ``waiter``: acquire on
    "go" (waiting for the holder's lease to lapse), report the instant, release."""
    import boto3

    from lakelock import Lake
    from lakelock.testing import client_kwargs

    lake = Lake(BUCKET, s3=boto3.client("s3", **client_kwargs(url)))
    lease = lake.lease(name, ttl=ttl, poll_interval=poll, heartbeat=role == "holder")
    print("ready", flush=True)
    sys.stdin.readline()
    if role == "holder":
        lease.acquire(timeout=30)
        print(f"held {lease.token} {lease.expires_at!r}", flush=True)
        while True:
            time.sleep(3600)
    lease.acquire(timeout=ttl * 3 + 30)
    acquired, wall = time.monotonic(), time.time()
    print(f"acquired {acquired!r} {wall!r} {lease.token}", flush=True)
    lease.release()


# --- the driver --------------------------------------------------------------------------------


@dataclass
class Trial:
    takeover: float
    after_expiry: float
    gets: int
    token_ok: bool


def spawn(role: str, url: str, name: str, ttl: float, poll: float) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--child", role, url, name, str(ttl), str(poll)]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def expect(stream: IO[str] | None, word: str) -> list[str]:
    assert stream is not None
    line = stream.readline()
    if not line.startswith(word):
        raise RuntimeError(f"expected {word!r} from a child, got {line!r}")
    return line.split()[1:]


def go(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.write("go\n")
    process.stdin.flush()


def trial(endpoint: Any, url: str, name: str, ttl: float, poll: float) -> Trial:
    holder = spawn("holder", url, name, ttl, poll)
    waiter = spawn("waiter", url, name, ttl, poll)
    try:
        expect(holder.stdout, "ready")
        expect(waiter.stdout, "ready")
        go(holder)
        token, expires_at = expect(holder.stdout, "held")
        endpoint.reset_stats()
        killed = time.monotonic()
        holder.kill()
        holder.wait()
        go(waiter)
        acquired, wall, new_token = expect(waiter.stdout, "acquired")
        gets = endpoint.stats().get("GetObject", 0)
        waiter.wait(timeout=30)
    finally:
        for p in (holder, waiter):
            if p.poll() is None:
                p.kill()
                p.wait()
            for stream in (p.stdin, p.stdout):
                if stream is not None:
                    stream.close()
    return Trial(
        takeover=float(acquired) - killed,
        after_expiry=float(wall) - float(expires_at),
        gets=gets,
        token_ok=int(new_token) == int(token) + 1,
    )


def acquire_cost(rounds: int) -> None:
    """The requests and the time of one uncontended acquire, and of one release."""
    import pyarrow as pa

    from lakelock import Lake
    from lakelock.testing import S3Endpoint

    with S3Endpoint(mode="process") as endpoint:
        endpoint.create_bucket(BUCKET)
        lake = Lake(BUCKET, s3=endpoint.client())
        lake.append("sales", pa.table({"id": [1]}))
        lease = lake.lease("bench", ttl=30, heartbeat=False)
        spans: dict[str, list[float]] = {"acquire": [], "release": []}
        areas: dict[str, dict[str, int]] = {"acquire": {}, "release": {}}
        for _ in range(rounds):
            for step, run in (("acquire", lease.acquire), ("release", lease.release)):
                endpoint.reset_stats()
                started = time.perf_counter()
                run()
                spans[step].append(time.perf_counter() - started)
                for area, count in endpoint.areas().items():
                    areas[step][area] = areas[step].get(area, 0) + count
        version = lake.registry.read().version
    print(f"# {rounds} rounds, one lease, no other writer (registry at version {version})\n")
    print("| step | median ms | requests each | by operation and area |")
    print("|---|---:|---:|:---|")
    for step, times in spans.items():
        each = {area: count / rounds for area, count in sorted(areas[step].items())}
        shown = ", ".join(f"{area} {count:g}" for area, count in each.items())
        print(
            f"| {step} | {statistics.median(times) * 1000:.1f} | {sum(each.values()):g} | {shown} |"
        )


def parse_floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        role, url, name, ttl, poll = sys.argv[2:7]
        child(role, url, name, float(ttl), float(poll))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="TTL 3 s only, two runs")
    parser.add_argument("--ttls", type=parse_floats, default=None, help="seconds, e.g. 3,10")
    parser.add_argument("--polls", type=parse_floats, default=[0.1, 1.0], help="seconds")
    parser.add_argument("--runs", type=int, default=None, help="trials per configuration")
    parser.add_argument("--acquire", type=int, metavar="N", help="N uncontended acquires")
    args = parser.parse_args()
    if args.acquire:
        acquire_cost(args.acquire)
        return
    ttls = args.ttls or ([3.0] if args.quick else [3.0, 10.0])
    runs = args.runs or (2 if args.quick else 5)

    from lakelock._clock import DEFAULT_MARGIN
    from lakelock.testing import S3Endpoint

    print(
        f"# lease takeover after the holder is SIGKILLed (margin {DEFAULT_MARGIN:g} s, "
        f"median of {runs} trials; min-max in brackets)\n"
    )
    print(
        "| TTL s | poll s | kill -> acquired s | after expiry s | bound s "
        "| GETs while waiting | tokens |"
    )
    print("|---:|---:|---:|---:|---:|---:|:---|")
    with S3Endpoint(mode="process") as endpoint:
        endpoint.create_bucket(BUCKET)
        n = 0
        for ttl in ttls:
            for poll in args.polls:
                trials = []
                for _ in range(runs):
                    n += 1
                    trials.append(trial(endpoint, endpoint.url, f"bench-{n}", ttl, poll))
                takeovers = [t.takeover for t in trials]
                lags = [t.after_expiry for t in trials]
                bound = ttl + DEFAULT_MARGIN + 2 * 1.0 + poll
                tokens = "+1 each" if all(t.token_ok for t in trials) else "NOT +1"
                print(
                    f"| {ttl:g} | {poll:g} "
                    f"| {statistics.median(takeovers):.2f} "
                    f"[{min(takeovers):.2f}-{max(takeovers):.2f}] "
                    f"| {statistics.median(lags):.2f} [{min(lags):.2f}-{max(lags):.2f}] "
                    f"| {bound:.1f} | {statistics.median(t.gets for t in trials):.0f} "
                    f"| {tokens} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
