"""Striped nodes: bounded memory under millions of distinct paths (the Ozone note's option).

A lock built with ``stripes=n`` keeps exactly n nodes, allocated up front. Path p uses node
``crc32(p) % n``; a request's steps on paths sharing a stripe merge into one step whose mode
is the union of their intents, and steps are taken in increasing stripe index (a total order,
so the post's deadlock proof still applies).

Safe, not exact: if two requests conflict, their modes clash at some path, and both map that
path to the same stripe, where each mode contains the clashing intents, so they clash there
too. Paths that merely share a stripe can make unrelated requests wait for each other; more
stripes make that rarer. CRC-32 rather than ``hash()`` so the mapping is the same in every
process and run.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Hashable, Sequence

from lakelock._pathlock._core import LockRequest, Mode, Node, _key_plan, _mode_of

__all__ = ["StripedIndex"]


def stripe_of(path: str, stripes: int) -> int:
    """The stripe that normalised ``path`` maps to."""
    return zlib.crc32(path.encode("utf-8", "surrogatepass")) % stripes


@functools.lru_cache(maxsize=4096)
def _striped_plan(request: LockRequest, stripes: int) -> tuple[tuple[int, Mode], ...]:
    intents: dict[int, int] = {}
    for key, mode in _key_plan(request):
        stripe = stripe_of("/" + "/".join(key), stripes)
        intents[stripe] = intents.get(stripe, 0) | mode.intents
    return tuple((stripe, _mode_of(intents[stripe])) for stripe in sorted(intents))


class StripedIndex:
    """A fixed array of ``stripes`` nodes shared by all paths."""

    __slots__ = ("_nodes", "stripes")

    def __init__(self, stripes: int) -> None:
        if stripes < 1:
            raise ValueError(f"stripes must be at least 1, not {stripes}")
        self.stripes = stripes
        self._nodes = [Node(i) for i in range(stripes)]

    def plan(self, request: LockRequest) -> Sequence[tuple[Hashable, Mode]]:
        """One step per stripe the request touches, in stripe order."""
        return _striped_plan(request, self.stripes)

    def node(self, key: Hashable) -> Node:
        """The stripe's node (``key`` is a stripe index)."""
        assert isinstance(key, int)
        return self._nodes[key]

    def __len__(self) -> int:
        return self.stripes
