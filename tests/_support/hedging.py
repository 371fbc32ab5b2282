"""What the tests of hedged requests share: a store with a slow tail, and hedging that has
timed enough requests to hedge."""

from __future__ import annotations

from lakelock._registry._core import Hedging
from lakelock._sim._latency import Latency, Profile

__all__ = ["tailed", "warmed"]


def tailed() -> Profile:
    """10 ms requests, 15 % of them 30 times slower."""
    each = Latency(0.010, tail=0.15, tail_factor=(30.0, 30.0))
    return Profile(name="tailed", get=each, put=each, cas=each, list=each, delete=each)


def warmed(
    factor: float, *, reads: float = 0.01, writes: float = 0.01, alone: bool = True
) -> Hedging:
    """Hedging that has timed enough requests: hedges after ``factor`` x those times."""
    hedging = Hedging(factor, alone=alone)
    for _ in range(hedging.least):
        hedging.observe(False, reads)
        hedging.observe(True, writes)
    return hedging
