"""How long a simulated S3 request takes: per-operation latency distributions with tails, and
the per-key rate of conditional writes, as presets taken from published measurements.

A request's time is lognormal around its median (object stores' latencies are roughly
lognormal with a long tail [spiral]), times a tail factor for a small share of requests, plus
its bytes at the per-request bandwidth. ``fixed:<ms>`` makes every request take exactly that
(what the embedded endpoint's ``latency`` setting does), to compare with real runs.

Sources of the presets (docs/SIMULATOR.md has the table):

- [aws-express] AWS, "Optimizing S3 Express One Zone performance": "consistent single-digit
  millisecond first-byte read and write request latencies — up to 10x faster than S3
  Standard". https://docs.aws.amazon.com/AmazonS3/latest/userguide/s3-express-performance.html
- [aws-perf] AWS S3 performance guidelines: first-byte latencies of 100-200 ms for larger
  objects, 3,500 writes and 5,500 reads per second per prefix.
- [douglas] C. Douglas, "Conditional Operations in Object Stores" (2026-01): compare-and-set on
  one key sustains 14.7-15.3 op/s at 58-68 ms on S3 Standard, 68.6-75.3 op/s at 14-26 ms on
  S3 Express One Zone. https://cdouglas.github.io/posts/2026/01/conditional
- [turbopuffer] turbopuffer, "Tradeoffs": S3 metadata requests p50 = 10 ms, p90 = 17 ms.
  https://turbopuffer.com/docs/tradeoffs
- [slatedb] SlateDB, "Tuning": expected write latency 50-100 ms on S3 Standard, 5-10 ms on
  S3 Express One Zone. https://slatedb.io/docs/operations/tuning
- [warpstream] WarpStream, "The Art of Being Lazy(log)": p99 produce latency 400 ms on S3
  Standard (PUT-bound), 170 ms with S3 Express One Zone.
- [spiral] SpiralDB, "So you want to use Object Storage" (2025): latencies are roughly
  lognormal with a very long tail. https://spiraldb.com/post/so-you-want-to-use-object-storage
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["OPERATIONS", "PROFILES", "Latency", "Profile", "profile"]

#: The operations a profile times: a plain or create-only PUT, an If-Match PUT (``cas``).
OPERATIONS = ("get", "put", "cas", "list", "delete")


@dataclass(frozen=True)
class Latency:
    """One operation's time: ``median`` seconds, lognormal spread ``sigma``; a share
    ``tail`` of requests is slower by a factor drawn in ``tail_factor``."""

    median: float
    sigma: float = 0.0
    tail: float = 0.0
    tail_factor: tuple[float, float] = (1.0, 1.0)

    def sample(self, rng: random.Random) -> float:
        seconds = self.median
        if self.sigma:
            seconds *= math.exp(self.sigma * rng.gauss(0.0, 1.0))
        if self.tail and rng.random() < self.tail:
            seconds *= rng.uniform(*self.tail_factor)
        return seconds


@dataclass(frozen=True)
class Profile:
    """A simulated store's timing. ``cas_rate``: conditional writes per second one key
    sustains (beyond it, and its ``cas_burst``, S3 answers 503 SlowDown); ``None``: no limit.
    ``bandwidth``: bytes per second of one request's body."""

    name: str
    get: Latency
    put: Latency
    cas: Latency
    list: Latency
    delete: Latency
    cas_rate: float | None = None
    cas_burst: float = 1.0
    bandwidth: float = math.inf

    def latency(self, operation: str) -> Latency:
        value: Latency = getattr(self, operation)
        return value

    def floor(self) -> float:
        """Median seconds of the shortest commit a waiter can make: its intent PUT, then the
        root GET that finds it applied."""
        return self.put.median + self.get.median

    def key_cas_rate(self) -> float:
        """Compare-and-swaps per second one key can take: the store's limit, or (none) one
        root GET and one If-Match PUT after another."""
        if self.cas_rate is not None:
            return self.cas_rate
        return 1.0 / (self.get.median + self.cas.median)


_TAIL = (3.0, 12.0)

PROFILES: dict[str, Profile] = {
    # GET p50 15 ms / p90 ~27 ms (metadata-sized objects, [turbopuffer]); PUT p50 45 ms
    # ([slatedb] 50-100 ms); If-Match PUT 60 ms and 15/s on one key ([douglas]); 1 % of
    # requests 3-12x slower (p99 of a few hundred ms, [warpstream], [aws-perf]).
    "s3-standard": Profile(
        name="s3-standard",
        get=Latency(0.015, 0.45, 0.01, _TAIL),
        put=Latency(0.045, 0.40, 0.01, _TAIL),
        cas=Latency(0.060, 0.30, 0.01, _TAIL),
        list=Latency(0.030, 0.45, 0.01, _TAIL),
        delete=Latency(0.025, 0.40, 0.01, _TAIL),
        cas_rate=15.0,
        cas_burst=2.0,
        bandwidth=90e6,
    ),
    # Single-digit milliseconds ([aws-express], [slatedb] 5-10 ms for writes); If-Match PUT
    # 14 ms and 70/s on one key ([douglas]); a shorter tail ([warpstream]: p99 170 ms for a
    # produce of several requests).
    "s3-express": Profile(
        name="s3-express",
        get=Latency(0.004, 0.35, 0.005, _TAIL),
        put=Latency(0.006, 0.35, 0.005, _TAIL),
        cas=Latency(0.014, 0.30, 0.005, _TAIL),
        list=Latency(0.006, 0.35, 0.005, _TAIL),
        delete=Latency(0.005, 0.35, 0.005, _TAIL),
        cas_rate=70.0,
        cas_burst=5.0,
        bandwidth=200e6,
    ),
}


def profile(name: str) -> Profile:
    """The preset ``name``: ``s3-standard``, ``s3-express``, or ``fixed:<ms>`` (every request
    takes exactly that many milliseconds, above 0, no per-key limit). Raises ``ValueError``."""
    if name in PROFILES:
        return PROFILES[name]
    if name.startswith("fixed:"):
        try:
            ms = float(name.removeprefix("fixed:"))
        except ValueError:
            ms = -1.0
        if not (ms > 0 and math.isfinite(ms)):
            # A store answering in no time: virtual time would never pass, and the run
            # would never end.
            raise ValueError(f"fixed:<ms> needs milliseconds > 0, got {name!r}")
        each = Latency(ms / 1000)
        return Profile(name=name, get=each, put=each, cas=each, list=each, delete=each)
    known = ", ".join([*PROFILES, "fixed:<ms>"])
    raise ValueError(f"unknown store profile {name!r}: one of {known}")
