"""docs/ says what the code does: every python block of docs/*.md runs as written against the
embedded endpoint (the README's are run by tests/test_readme.py), and the figures the docs
quote are the code's."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry._objects import CACHE_SIZE
from tests._support import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))
#: A fenced block: its info string (language, then words such as ``illustrative``) and body.
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```$", re.S | re.M)


def blocks(path: Path) -> list[tuple[str, str]]:
    return [(info.strip(), body) for info, body in FENCE.findall(path.read_text())]


def python_blocks() -> list[tuple[str, str]]:
    """(where, code) of every block tagged ``python`` in docs/*.md."""
    return [
        (f"{path.name} python block {n}", body)
        for path in DOCS
        for n, (info, body) in enumerate(blocks(path), start=1)
        if info == "python"
    ]


def test_docs_have_python_blocks_and_no_untagged_code() -> None:
    """docs/ has runnable examples, and a block that is python is tagged so: ``python`` (run
    below) or ``python illustrative`` (compiled, not run); no untagged block parses as python
    code that imports something."""
    assert python_blocks(), "docs/*.md lost their runnable examples"
    for path in DOCS:
        for info, body in blocks(path):
            if info.startswith("python"):
                assert info in {"python", "python illustrative"}, (path.name, info)
                compile(body, f"{path.name} ({info})", "exec")
            elif not info:
                try:
                    tree = ast.parse(body)
                except SyntaxError:
                    continue
                imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
                assert not imports, f"{path.name}: an untagged block is python:\n{body}"


@pytest.mark.parametrize(("where", "code"), python_blocks(), ids=[w for w, _ in python_blocks()])
def test_docs_python_examples_run(
    aws_env: None, s3: Any, bucket: str, where: str, code: str
) -> None:
    """Each python block runs as written (its bucket "my-bucket" is this test's bucket) over a
    lake whose dataset ``sales`` has had three commits, and what it ends with is true of that
    lake: a snapshot's history is the dataset's."""
    lake = Lake(bucket, s3=s3.client())
    for day in (1, 2, 3):
        lake.append("sales", pa.table({"day": [day], "n": [day * 10]}), partition_by=["day"])
    namespace: dict[str, Any] = {"__name__": "__example__"}
    exec(compile(code.replace('"my-bucket"', f'"{bucket}"'), where, "exec"), namespace)
    if "versions" in namespace:
        assert namespace["versions"] == [e.version for e in lake.history("sales")]


def test_the_cache_size_the_docs_quote_is_the_codes() -> None:
    """FORMAT.md and the README quote the size of a Lake's object cache: the code's."""
    quoted = f"{CACHE_SIZE:,}"
    for path in (REPO / "docs" / "FORMAT.md", REPO / "README.md"):
        assert f"{quoted} most recently used" in path.read_text(), path.name
