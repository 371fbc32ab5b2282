"""What the path lock's tests share: the tree of paths the sync and async tests lock, random
requests on it, and the four-mode plan of the post the lock's design departs from."""

from __future__ import annotations

import itertools
import random

from lakelock._pathlock import LockRequest, Mode
from lakelock._pathlock._core import PathKey

__all__ = ["TREE", "post_plan", "random_request"]

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


def post_plan(request: LockRequest) -> list[tuple[PathKey, Mode]]:
    """The post's four-mode rules, verbatim: W on P_W, W_A on their ancestors, R on P_R
    except P_W and ancestors of P_W, R_A on ancestors of P_R except all of those and P_R."""
    writes = set(request._write_keys)
    reads = set(request._read_keys)
    write_ancestors = {w[:i] for w in writes for i in range(len(w))} - writes
    plain_reads = reads - writes - write_ancestors
    read_ancestors = {r[:i] for r in reads for i in range(len(r))}
    read_ancestors -= writes | write_ancestors | reads
    steps = [(k, Mode.X) for k in writes] + [(k, Mode.IX) for k in write_ancestors]
    steps += [(k, Mode.S) for k in plain_reads] + [(k, Mode.IS) for k in read_ancestors]
    return sorted(steps, key=lambda s: (len(s[0]), s[0]))
