"""Imports go one way (docs/ARCHITECTURE.md, "The rooms"): no two modules of the package
import each other, directly or around a loop, typing-only imports included, so a module can
be read, and moved, without the ones that use it. The loops still known are listed with
where they are; a new one fails here."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests._support import REPO

#: Loops known today, each inside one room: a loop found must lie within one of these.
KNOWN = (
    # The commit core's attempt path and the Committer it runs on name each other.
    "lakelock._registry._core.",
    # The simulator's checker and the reference model it replays share their types.
    "lakelock._sim._",
)


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted((REPO / "lakelock").rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"))
    return found


def _imports(tree: ast.Module, modules: dict[str, ast.Module]) -> Iterator[str]:
    """The package's modules ``tree`` imports: ``from P import name`` is the module
    ``P.name`` where there is one, else ``P`` itself."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                yield name if name in modules else node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            if component:
                loops.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return loops


def test_no_two_modules_import_each_other() -> None:
    """No loop of imports between the package's modules but the known ones, each within
    one room (a registry module and the builder it commits with, say, must not name each
    other even for typing: the one below takes a protocol)."""
    modules = _modules()
    graph = {
        name: {m for m in _imports(tree, modules) if m in modules and m != name}
        for name, tree in modules.items()
    }
    assert graph["lakelock._registry._shell"]  # the graph is read: the shell imports much
    new = [
        loop
        for loop in _loops(graph)
        if not any(all(m.startswith(room) for m in loop) for room in KNOWN)
    ]
    assert new == []
