"""The index trees (lakelock._registry._tree): the ordered tree of commit ids against a plain
dict, what one write into it costs, the hash trie it replaces for commit ids (still read and
written where a lake has one), and the JSON of an ordered branch refused when malformed."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelock._registry import new_commit_id
from lakelock._registry._objects import RECENT_IDS
from lakelock._registry._snapshot import LazyPartitions, Overlay
from lakelock._registry._tree import (
    EMPTY,
    FANOUT,
    LEAF_MAX,
    Node,
    index_get,
    index_update,
    node_body,
    ordered_get,
    ordered_update,
    parse_node,
    tree_items,
    tree_update,
)
from lakelock.errors import RegistryCorruptError

ENTRY = {"version": 7, "at": 1_764_000_000.5, "operation": "append"}


class Nodes:
    """A node store in memory that keeps what ``store`` wrote through JSON, as a reader
    would load it, and counts the writes."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.written: list[int] = []

    def load(self, key: str) -> Node:
        return self.nodes[key]

    def store(self, node: Node) -> str:
        body = node_body(node)
        key = f"n{len(self.nodes)}"
        self.nodes[key] = parse_node(body)
        self.written.append(len(body))
        return key


def leaf_depths(top: Node, nodes: Nodes, depth: int = 0) -> set[int]:
    if not top.is_branch:
        return {depth}
    found: set[int] = set()
    for ref in top.children.values():
        found |= leaf_depths(nodes.load(ref.key), nodes, depth + 1)
    return found


def sizes_bounded(top: Node, nodes: Nodes) -> bool:
    stack = [top]
    while stack:
        node = stack.pop()
        if len(node.entries) > LEAF_MAX or len(node.children) > FANOUT:
            return False
        stack.extend(nodes.load(ref.key) for ref in node.children.values())
    return True


keys = st.text(alphabet="abcdefgh0123", min_size=0, max_size=6)
batches = st.lists(
    st.dictionaries(keys, st.one_of(st.none(), st.integers(0, 9)), max_size=150),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(batches)
def test_ordered_tree_holds_what_a_dict_holds(changes: list[dict[str, int | None]]) -> None:
    """Upserts and deletes in batches: after each, every key is found with its value, none
    that was deleted is, the entries come out in key order, every leaf is at one depth, and
    no node is over its bound."""
    nodes, top = Nodes(), EMPTY
    model: dict[str, int] = {}
    for batch in changes:
        top = ordered_update(top, batch, load=nodes.load, store=nodes.store)
        for key, value in batch.items():
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
        assert list(tree_items(top, nodes.load)) == sorted(model.items())
        assert top.count == len(model)
        for key in batch:
            assert ordered_get(top, key, nodes.load) == model.get(key)
        assert len(leaf_depths(top, nodes)) == 1
        assert sizes_bounded(top, nodes)


def test_a_thousand_leaves_of_keys_stay_sorted_and_found() -> None:
    """Enough keys for three levels, written in random order, then half deleted."""
    nodes = Nodes()
    ids = [f"{(n * 7919) % 100_000:05d}" for n in range(100_000)]
    top = EMPTY
    for start in range(0, len(ids), 5_000):
        top = ordered_update(
            top, dict.fromkeys(ids[start : start + 5_000], 1), load=nodes.load, store=nodes.store
        )
    assert leaf_depths(top, nodes) == {3}
    top = ordered_update(top, dict.fromkeys(ids[::2]), load=nodes.load, store=nodes.store)
    assert top.count == 50_000
    assert [k for k, _ in tree_items(top, nodes.load)] == sorted(ids[1::2])
    assert ordered_get(top, ids[1], nodes.load) == 1
    assert ordered_get(top, ids[0], nodes.load) is None
    emptied = ordered_update(top, dict.fromkeys(ids[1::2]), load=nodes.load, store=nodes.store)
    assert emptied == EMPTY


#: The random part of a generated id (the time part sorts them).
TOKEN = "5" * 20


def grown(update: Any, count: int, nodes: Nodes) -> Node:
    """A commit-id tree of ``count`` generated ids, written RECENT_IDS at a time as the
    snapshots write them (the clock moving 10 ms per commit)."""
    top, now = EMPTY, 1_764_000_000.0
    for _ in range(count // RECENT_IDS):
        batch = {}
        for _ in range(RECENT_IDS):
            now += 0.01
            batch[new_commit_id(now, token=TOKEN)] = ENTRY
        top = update(top, batch, load=nodes.load, store=nodes.store)
    return top


def test_writing_generated_ids_costs_a_path_not_a_leaf_per_id() -> None:
    """At 20,000 commit ids, writing the next RECENT_IDS into the ordered tree creates a few
    nodes (the rightmost leaves and the path above them); the hash trie rewrites a leaf for
    nearly every id (what the commit-id index cost before it was ordered)."""
    cost = {}
    for name, update in (("ordered", ordered_update), ("hash", tree_update)):
        nodes = Nodes()
        top = grown(update, 20_032, nodes)
        nodes.written.clear()
        now = 1_764_000_300.0
        batch = {new_commit_id(now + n / 100, token=TOKEN): ENTRY for n in range(RECENT_IDS)}
        update(top, batch, load=nodes.load, store=nodes.store)
        cost[name] = (len(nodes.written), sum(nodes.written))
    assert cost["ordered"][0] <= 4, cost
    assert cost["hash"][0] >= 60, cost
    assert cost["ordered"][1] * 4 < cost["hash"][1], cost


def test_a_hash_trie_of_commit_ids_is_read_and_written_as_one() -> None:
    """A commit-id tree whose top is a hash-trie branch (a lake made before the ordered
    tree): its ids are found, and an update keeps it a hash trie with old and new ids."""
    nodes = Nodes()
    old = {f"run-{n}": {**ENTRY, "version": n + 1} for n in range(300)}
    top = tree_update(EMPTY, old, load=nodes.load, store=nodes.store)
    assert top.is_branch
    assert not top.lows
    assert index_get(top, "run-123", nodes.load) == old["run-123"]
    top = index_update(top, {"run-new": ENTRY}, load=nodes.load, store=nodes.store)
    assert top.is_branch
    assert not top.lows
    assert index_get(top, "run-new", nodes.load) == ENTRY
    assert index_get(top, "run-7", nodes.load) == old["run-7"]
    assert index_get(top, "run-none", nodes.load) is None
    # A leaf top is written as an ordered tree once it splits.
    fresh = index_update(EMPTY, old, load=nodes.load, store=nodes.store)
    assert fresh.lows[0] == ""
    assert len(fresh.lows) == len(fresh.children) > 1
    assert index_get(fresh, "run-123", nodes.load) == old["run-123"]


def test_generated_commit_ids_sort_by_time() -> None:
    earlier = new_commit_id(1_764_000_000.001, token="f" * 20)
    later = new_commit_id(1_764_000_000.002, token="0" * 20)
    assert re.fullmatch("[0-9a-f]{32}", earlier)
    assert earlier < later
    assert earlier[:12] == f"{1_764_000_000_001:012x}"


def branch(lows: list[Any], slots: list[str]) -> bytes:
    children = {slot: {"key": f"k{slot}", "count": 1} for slot in slots}
    return orjson.dumps({"format_version": 2, "children": children, "lows": lows})


@pytest.mark.parametrize(
    ("lows", "slots"),
    [
        (["a", "b"], ["0", "1"]),  # the first bound is not ""
        (["", "b", "b"], ["0", "1", "2"]),  # not increasing
        (["", "c", "b"], ["0", "1", "2"]),
        (["", "b"], ["0", "2"]),  # children not numbered 0, 1, ...
        (["", "b"], ["0"]),  # a bound without its child
        (["", 3], ["0", "1"]),  # a bound that is not a string
        ("", ["0"]),
    ],
)
def test_a_malformed_ordered_branch_is_corrupt(lows: list[Any], slots: list[str]) -> None:
    """An ordered branch whose bounds could send a lookup to the wrong child is refused
    (RegistryCorruptError), never searched."""
    with pytest.raises(RegistryCorruptError):
        parse_node(branch(lows, slots))


def test_an_ordered_branch_round_trips() -> None:
    node = parse_node(branch(["", "b", "c"], ["0", "1", "2"]))
    assert node.lows == ("", "b", "c")
    assert parse_node(node_body(node)) == node


def test_an_overlay_answers_get_and_in_as_a_mapping_of_its_changes_over_its_base() -> None:
    base = {"a": 1, "b": 2}
    overlay = Overlay(base, {"b": None, "c": 3})
    for key, expected in (("a", 1), ("b", None), ("c", 3), ("d", None)):
        assert overlay.get(key) == expected
        assert overlay.get(key, "none") == (expected if expected is not None else "none")
        assert (key in overlay) is (expected is not None)
    assert dict(overlay) == {"a": 1, "c": 3}
    changes: dict[str, Any] = {"a": None}
    owning = Overlay.owning(base, changes)
    assert owning.changes is changes  # kept, not copied
    assert "a" not in owning
    assert owning.get("b") == 2


def test_lazy_partitions_parse_each_partition_once_and_miss_like_a_mapping() -> None:
    nodes: dict[str, Node] = {}

    def store(node: Node) -> str:
        key = f"n{len(nodes)}"
        nodes[key] = node
        return key

    top = tree_update(
        EMPTY, {f"p={n}": {"n": n} for n in range(300)}, load=nodes.__getitem__, store=store
    )
    parsed: list[str] = []

    def parse(path: str, raw: Any) -> Any:
        parsed.append(path)
        return ("parsed", raw["n"])

    partitions = LazyPartitions(top, nodes.__getitem__, parse)
    assert partitions["p=7"] == partitions.get("p=7") == ("parsed", 7)
    assert "p=7" in partitions
    assert "p=300" not in partitions
    assert partitions.get("p=300") is None
    assert parsed == ["p=7"]
