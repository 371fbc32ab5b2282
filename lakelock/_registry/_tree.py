"""Persistent trees of write-once node objects: the indexes of one dataset.

A format-2 dataset snapshot holds two trees. Both map string keys to JSON values.

- **Partitions** (partition path → the partition's manifests and totals) are a *hash trie*:
  each key's SHA-256 picks its place, a node at depth ``d`` sending a key to child number
  ``bits[5d : 5d + 5]`` of that digest (32 children at most). A commit touches the few
  partitions it changes, wherever they are, and the trie keeps every path short.
- **Commit ids** (commit id → version, time, operation) are an *ordered tree* (a B+ tree,
  :func:`ordered_update`): a branch holds up to 32 children, each for the keys from its
  ``low`` bound up to the next child's. Commit ids lakelock generates start with the time they
  were made, so the ids a snapshot writes into the tree together (64 at a time) land in the
  one or two rightmost leaves: a write costs about one node per level, where a hash trie
  would rewrite one leaf per id once it has more leaves than that (docs/FORMAT.md).

Both are made of the same nodes:

- A **leaf** holds up to :data:`LEAF_MAX` entries inline.
- A **branch** holds references ``{"key", "count"}`` to child nodes, each its own write-once
  object ``metastore/nodes/<dataset>/<sha256>-<nonce>.json`` (digest-named like manifests, and
  verified on every read); an ordered branch also holds each child's ``low`` bound. Branches
  never merge back; a child left empty is dropped.
- The top node is stored inline in the snapshot object, so a small dataset is one object.

A hash-trie leaf that grows past :data:`LEAF_MAX` becomes a branch over new leaves (its entries
spread by the next five bits). An ordered leaf that grows past it splits into even siblings,
a branch past 32 children likewise, and a top that splits grows the tree a level, so every
leaf is at the same depth. An ordered branch's first ``low`` is ``""`` (the bound it inherits
from its parent). A commit-id tree whose top is a hash-trie branch (lakes made before the
ordered tree) keeps being read and written as a hash trie: :func:`index_get` and
:func:`index_update` tell the two apart.

In both, changing ``k`` keys rewrites only the nodes on their paths: at most ``k * depth``
nodes, each at most :data:`LEAF_MAX` entries or 32 references. The depth grows with the
logarithm (base ~32) of the number of keys, which is why the bytes a commit writes do not
depend on how many partitions a dataset has, nor on how many commits it has had (see
docs/FORMAT.md). Everything here is pure: nodes are loaded through a ``load(key) -> Node``
callable the caller provides (and caches).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

import orjson

from lakelock import _layout
from lakelock._jsonfields import boolean_free_int, obj, seq, text
from lakelock._layout import NODE_PREFIX
from lakelock.errors import RegistryCorruptError

__all__ = [
    "BITS",
    "LEAF_MAX",
    "NODE_PREFIX",
    "Node",
    "NodeRef",
    "index_get",
    "index_update",
    "node_body",
    "node_from_json",
    "node_json",
    "node_key",
    "ordered_get",
    "ordered_update",
    "parse_node",
    "tree_get",
    "tree_items",
    "tree_update",
    "verify_node",
]

BITS = 5
FANOUT = 1 << BITS
LEAF_MAX = 96
_MAX_DEPTH = 256 // BITS

_T = TypeVar("_T")
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class NodeRef:
    """A branch's pointer to a child node, with the number of keys under it."""

    key: str
    count: int


_NO_CHILDREN: Mapping[int, NodeRef] = MappingProxyType({})


@dataclass(frozen=True)
class Node:
    """A leaf (``entries``) or a branch (``children``, by child number). An ordered tree's
    branch numbers its children 0, 1, ... in key order and holds the ``low`` bound of each
    (the first is ``""``); a hash trie's numbers them by digest bits and has no ``lows``."""

    entries: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    children: Mapping[int, NodeRef] = field(default_factory=lambda: _NO_CHILDREN)
    is_branch: bool = False
    lows: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        if self.is_branch:
            return sum(ref.count for ref in self.children.values())
        return len(self.entries)


EMPTY = Node()
Load = Callable[[str], Node]
#: Stores a new node (writes it, or queues the write) and returns its key.
Store = Callable[[Node], str]


def _slot(key: str, depth: int) -> int:
    digest = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest(), "big")
    return (digest >> (256 - BITS * (depth + 1))) & (FANOUT - 1)


def tree_get(top: Node, key: str, load: Load) -> Any | None:
    """The value under ``key``, or ``None``: one node loaded per level below the top."""
    node, depth = top, 0
    while node.is_branch:
        ref = node.children.get(_slot(key, depth))
        if ref is None:
            return None
        node, depth = load(ref.key), depth + 1
    return node.entries.get(key)


def tree_items(top: Node, load: Load) -> Iterator[tuple[str, Any]]:
    """Every entry of the tree (loads every node); an ordered tree's in key order."""
    stack = [top]
    while stack:
        node = stack.pop()
        if node.is_branch:
            stack.extend(
                load(node.children[slot].key) for slot in sorted(node.children, reverse=True)
            )
        else:
            yield from node.entries.items()


def tree_update(top: Node, changes: Mapping[str, Any | None], *, load: Load, store: Store) -> Node:
    """The tree with ``changes`` applied (a value of ``None`` deletes the key). New nodes below
    the top are handed to ``store``; the new top is returned for the caller to inline."""
    return _update(top, 0, dict(changes), load, store)


def _update(
    node: Node, depth: int, changes: dict[str, Any | None], load: Load, store: Store
) -> Node:
    if not node.is_branch:
        entries = dict(node.entries)
        for key, value in changes.items():
            if value is None:
                entries.pop(key, None)
            else:
                entries[key] = value
        if len(entries) <= LEAF_MAX or depth >= _MAX_DEPTH - 1:
            return Node(entries=MappingProxyType(entries))
        # Split: the same entries, one level down, spread by the next bits.
        return _update(Node(is_branch=True), depth, entries, load, store)
    groups: dict[int, dict[str, Any | None]] = {}
    for key, value in changes.items():
        groups.setdefault(_slot(key, depth), {})[key] = value
    children = dict(node.children)
    for slot, group in groups.items():
        ref = children.get(slot)
        child = load(ref.key) if ref is not None else EMPTY
        new_child = _update(child, depth + 1, group, load, store)
        if new_child.count == 0:
            children.pop(slot, None)
        else:
            children[slot] = NodeRef(store(new_child), new_child.count)
    if not children:
        return EMPTY
    return Node(children=MappingProxyType(children), is_branch=True)


# -- the ordered tree ----------------------------------------------------------------------


def ordered_get(top: Node, key: str, load: Load) -> Any | None:
    """The value under ``key`` in an ordered tree, or ``None``: one node per level."""
    node = top
    while node.is_branch:
        node = load(node.children[bisect.bisect_right(node.lows, key) - 1].key)
    return node.entries.get(key)


def ordered_update(
    top: Node, changes: Mapping[str, Any | None], *, load: Load, store: Store
) -> Node:
    """The ordered tree with ``changes`` applied (``None`` deletes). New nodes below the top
    are handed to ``store``; the new top is returned for the caller to inline."""
    parts = _ordered(top, sorted(changes.items()), load, store)
    while len(parts) > 1:  # the top split: one more level
        parts = _branches([(low, _ref(node, store)) for low, node in parts])
    return parts[0][1] if parts else EMPTY


def _ordered(
    node: Node, items: list[tuple[str, Any | None]], load: Load, store: Store
) -> list[tuple[str, Node]]:
    """``node`` with the (sorted) ``items`` applied: the nodes that replace it, each with its
    low bound (the first's is ``""``, the bound ``node`` had); none if it is left empty."""
    if not node.is_branch:
        entries = dict(node.entries)
        for key, value in items:
            if value is None:
                entries.pop(key, None)
            else:
                entries[key] = value
        return [
            ("" if n == 0 else run[0], Node(entries=MappingProxyType({k: entries[k] for k in run})))
            for n, run in enumerate(_even(sorted(entries), LEAF_MAX))
        ]
    refs = [node.children[slot] for slot in range(len(node.children))]
    lows = node.lows
    children: list[tuple[str, NodeRef]] = []
    start = 0
    for n, (low, ref) in enumerate(zip(lows, refs, strict=True)):
        end = bisect.bisect_left(items, (lows[n + 1],)) if n + 1 < len(lows) else len(items)
        group, start = items[start:end], end
        if not group:
            children.append((low, ref))
            continue
        for m, (part_low, part) in enumerate(_ordered(load(ref.key), group, load, store)):
            children.append((low if m == 0 else part_low, _ref(part, store)))
    if not children:
        return []
    children[0] = ("", children[0][1])  # a first child left empty: the next one takes its range
    return _branches(children)


def _branches(children: list[tuple[str, NodeRef]]) -> list[tuple[str, Node]]:
    """``children`` (in key order) under as few branches as hold them, evenly filled."""
    branches = []
    for group in _even(children, FANOUT):
        branches.append(
            (
                group[0][0],
                Node(
                    children=MappingProxyType({n: ref for n, (_, ref) in enumerate(group)}),
                    is_branch=True,
                    lows=("", *(low for low, _ in group[1:])),
                ),
            )
        )
    return branches


def _even(items: list[_T], most: int) -> list[list[_T]]:
    """``items`` cut into the fewest runs of at most ``most``, as even as can be."""
    if not items:
        return []
    count = -(-len(items) // most)
    size, extra = divmod(len(items), count)
    runs, start = [], 0
    for n in range(count):
        end = start + size + (1 if n < extra else 0)
        runs.append(items[start:end])
        start = end
    return runs


def _ref(node: Node, store: Store) -> NodeRef:
    return NodeRef(store(node), node.count)


def index_get(top: Node, key: str, load: Load) -> Any | None:
    """A lookup in a commit-id tree: ordered, or a hash trie (see :func:`_hash_trie`)."""
    if _hash_trie(top):
        return tree_get(top, key, load)
    return ordered_get(top, key, load)


def index_update(top: Node, changes: Mapping[str, Any | None], *, load: Load, store: Store) -> Node:
    """An update of a commit-id tree: ordered, or a hash trie (see :func:`_hash_trie`)."""
    if _hash_trie(top):
        return tree_update(top, changes, load=load, store=store)
    return ordered_update(top, changes, load=load, store=store)


def _hash_trie(top: Node) -> bool:
    """Whether a commit-id tree is a hash trie (written before the ordered tree): its top is a
    branch without low bounds. A leaf top is either; it is written as an ordered tree."""
    return top.is_branch and not top.lows


# -- JSON ------------------------------------------------------------------------------------


def node_json(node: Node) -> dict[str, Any]:
    """A node as the JSON object inlined in a snapshot or stored as a node object."""
    if node.is_branch:
        children = {
            str(slot): {"key": ref.key, "count": ref.count}
            for slot, ref in sorted(node.children.items())
        }
        return (
            {"children": children, "lows": list(node.lows)} if node.lows else {"children": children}
        )
    return {"entries": dict(node.entries)}


def node_body(node: Node) -> bytes:
    return orjson.dumps({"format_version": 2, **node_json(node)}, option=orjson.OPT_SORT_KEYS)


def node_from_json(data: Mapping[str, Any]) -> Node:
    """Parse a node's JSON (refusing wrong types: ``RegistryCorruptError`` via the caller)."""
    if "children" in data:
        children = {}
        for slot_text, raw in obj(data["children"], "children").items():
            slot = int(text(slot_text, "child slot"))
            if not 0 <= slot < FANOUT:
                raise ValueError(f"child slot {slot} out of range")
            ref = obj(raw, "child")
            children[slot] = NodeRef(
                key=text(ref["key"], "child key"),
                count=boolean_free_int(ref["count"], "child count", minimum=1),
            )
        if not children:
            raise ValueError("a branch node has no children")
        if "lows" not in data:
            return Node(children=MappingProxyType(children), is_branch=True)
        lows = tuple(text(low, "low bound") for low in seq(data["lows"], "lows"))
        if sorted(children) != list(range(len(lows))):
            raise ValueError("an ordered branch numbers its children 0, 1, ... one per low bound")
        if lows[0] != "" or any(a >= b for a, b in itertools.pairwise(lows)):
            raise ValueError("an ordered branch's low bounds start at '' and increase")
        return Node(children=MappingProxyType(children), is_branch=True, lows=lows)
    return Node(entries=MappingProxyType(dict(obj(data["entries"], "entries"))))


def node_key(dataset: str, body: bytes, nonce: str) -> str:
    """``metastore/nodes/<dataset>/<sha256 of the body>-<nonce>.json``."""
    return _layout.node_key(dataset, hashlib.sha256(body).hexdigest(), nonce)


def parse_node(body: bytes, *, bucket: str | None = None, key: str | None = None) -> Node:
    try:
        data = orjson.loads(body)
        if not isinstance(data, dict) or data.get("format_version") != 2:
            raise ValueError("not a format-2 node")
        return node_from_json(data)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise RegistryCorruptError(
            f"index node is malformed: {type(error).__name__}: {error}", bucket=bucket, key=key
        ) from error


def key_digest(key: str) -> str:
    """The content digest a write-once key names: ``.../<sha256>-<nonce>.json``."""
    return key.rsplit("/", 1)[-1].split("-", 1)[0]


def require_digest(body: bytes, digest: str, what: str, *, key: str, bucket: str | None) -> None:
    """RegistryCorruptError unless ``body`` hashes (SHA-256) to the ``digest`` its key names:
    a write-once object replaced or damaged is never trusted."""
    if hashlib.sha256(body).hexdigest() != digest:
        raise RegistryCorruptError(
            f"{what} bytes do not match the digest in its key (replaced or damaged)",
            bucket=bucket,
            key=key,
        )


def require_filed(key: str, prefix: str, dataset: str, what: str, *, bucket: str | None) -> None:
    """RegistryCorruptError unless ``key`` is filed under the dataset the object names."""
    if not key.startswith(f"{prefix}{dataset}/"):
        raise RegistryCorruptError(
            f"{what} of dataset {dataset!r} stored under another dataset",
            bucket=bucket,
            key=key,
        )


def verify_node(key: str, body: bytes, *, bucket: str | None = None) -> Node:
    """Parse a node read from ``key``, refusing bytes other than those its key names."""
    require_digest(body, key_digest(key), "index node", key=key, bucket=bucket)
    return parse_node(body, bucket=bucket, key=key)
