"""What the path lock's sync and async tests share: the tree of paths they lock, and random
requests on it."""

from __future__ import annotations

import itertools
import random

from lakelock._pathlock import LockRequest

__all__ = ["TREE", "random_request"]

#: A binary tree of depth 3: 15 paths.
TREE = ["/" + "/".join(p) for d in range(4) for p in itertools.product("ab", repeat=d)]


def random_request(rng: random.Random, paths: list[str]) -> LockRequest:
    """Up to two reads and two writes; a third of them an ancestor/descendant mix."""
    reads = rng.sample(paths, rng.randint(0, 2))
    writes = rng.sample(paths, rng.randint(0, 2))
    if rng.random() < 0.3 and reads:
        child = [p for p in paths if p.startswith(reads[0].rstrip("/") + "/")]
        writes = rng.sample(child, 1) if child else writes
    return LockRequest(reads, writes)
