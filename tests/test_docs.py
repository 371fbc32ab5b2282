"""docs/ says what the code does: every python block of docs/*.md runs as written against the
embedded endpoint (the README's are run by tests/test_readme.py), every command of a ``sh``
block (docs/*.md, the decision records, BENCHMARKS.md, the READMEs) is one the code accepts, the
figures the docs quote are the code's, and every decision record cited exists."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry._objects import CACHE_SIZE
from lakelock.cli import build_parser
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


# -- the commands the docs give ------------------------------------------------------------------

#: Where ``sh`` blocks are checked.
DECISIONS = sorted((REPO / "docs" / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))
COMMAND_DOCS = [
    *DOCS,
    *DECISIONS,
    REPO / "BENCHMARKS.md",
    REPO / "README.md",
    REPO / "tests" / "README.md",
]
#: A line that starts a command (after ``NAME=value`` assignments).
COMMAND_LINE = re.compile(r"^(?:[A-Z_]+=\S*\s+)*(?:lakelock|python|pytest|pip|export)\s", re.M)
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def commands() -> list[tuple[str, list[str]]]:
    """(where, words) of every command in a ``sh`` block: lines continued by a backslash
    joined, comments dropped, ``&&``-chained commands apart."""
    found = []
    for path in COMMAND_DOCS:
        for n, (info, body) in enumerate(blocks(path), start=1):
            if info != "sh":
                continue
            for line in body.replace("\\\n", " ").splitlines():
                words: list[str] = []
                for word in [*shlex.split(line, comments=True), "&&"]:
                    if word in {"&&", ";", "||"}:
                        if words:
                            found.append((f"{path.name} sh block {n}: {' '.join(words)}", words))
                        words = []
                    else:
                        words.append(word)
    return found


class Parsed(Exception):
    """What a benchmark's parser made of its arguments (raised so that main stops there)."""


def parse_only(
    parser: argparse.ArgumentParser, args: Any = None, namespace: Any = None
) -> NoReturn:
    raise Parsed(ORIGINAL_PARSE_ARGS(parser, args, namespace))


ORIGINAL_PARSE_ARGS = argparse.ArgumentParser.parse_args


def run_benchmark_parser(monkeypatch: pytest.MonkeyPatch, script: Path, args: list[str]) -> None:
    """Run ``script``'s main until its parser has parsed ``args``: argparse's error (exit
    status 2) if it refuses them; no benchmark runs."""
    monkeypatch.syspath_prepend(str(script.parent))
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    spec = importlib.util.spec_from_file_location(f"_doc_{script.stem}", script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    with pytest.raises(Parsed):
        module.main()


def defined_tests(paths: list[Path]) -> Iterator[str]:
    """The names of the tests defined in ``paths`` (files or folders)."""
    for path in paths:
        for file in [path] if path.is_file() else sorted(path.rglob("test_*.py")):
            yield from re.findall(r"^\s*(?:async )?def (test_\w+)", file.read_text(), re.M)


def check_pytest(args: list[str]) -> None:
    """Its paths (and ``::`` node names) exist, ``-m`` names registered markers, and every
    name in a ``-k`` expression matches a test in them."""
    markers = {m.split(":")[0] for m in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]}
    paths: list[Path] = []
    keywords: list[str] = []
    words = iter(args)
    for word in words:
        if word == "-m":
            expression = next(words)
            named = set(re.findall(r"\w+", expression)) - {"and", "or", "not"}
            assert named <= markers, f"unknown markers {named - markers}"
        elif word == "-k":
            keywords += set(re.findall(r"\w+", next(words))) - {"and", "or", "not"}
        elif word.startswith("-"):
            assert word in {"-x", "-q", "-v", "-s"} or word.startswith("--durations="), word
        else:
            path, _, node = word.partition("::")
            assert (REPO / path).exists(), f"{path} does not exist"
            paths.append(REPO / path)
            if node:
                assert node in set(defined_tests([REPO / path])), f"{word}: no such test"
    names = list(defined_tests(paths or [REPO / "tests"]))
    for keyword in keywords:
        assert any(keyword in name for name in names), f"-k {keyword}: no test matches"


def check_install(args: list[str]) -> None:
    """``pip install -e '.[extra,...]'``: every extra is one pyproject.toml declares."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    for word in args:
        if match := re.fullmatch(r"\.\[(.*)\]", word):
            assert set(match[1].split(",")) <= set(extras), word


@pytest.mark.parametrize(("where", "words"), commands(), ids=[w for w, _ in commands()])
def test_docs_commands_are_the_codes(
    monkeypatch: pytest.MonkeyPatch, where: str, words: list[str]
) -> None:
    """Each command of a ``sh`` block is one the code takes, parsed and not run: ``lakelock``
    (or ``python -m lakelock.cli``) by the CLI's parser, ``python benchmarks/<x>.py`` by that
    script's own parser, ``python -m pytest`` naming tests, markers and files that exist,
    ``pip install`` naming declared extras; an environment variable it sets is one the code
    reads."""
    while re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name = words.pop(0).split("=", 1)[0]
        if name != "PYTHONPATH":
            sources = [
                f for d in ("lakelock", "tests", "benchmarks") for f in (REPO / d).rglob("*.py")
            ]
            assert any(name in f.read_text() for f in sources), f"{name} is read nowhere"
    head, args = words[0], words[1:]
    if head == "export":
        return
    if head == "python" and args[:2] == ["-m", "lakelock.cli"]:
        head, args = "lakelock", args[2:]
    if head == "python" and args[:2] == ["-m", "pip"]:
        head, args = "pip", args[2:]
    if head == "python" and args[:2] == ["-m", "pytest"]:
        check_pytest(args[2:])
    elif head == "pip":
        assert args[0] == "install", where
        check_install(args[1:])
    elif head == "lakelock":
        build_parser().parse_args(args)
    elif head == "python" and args and args[0].startswith("benchmarks/"):
        script = REPO / args[0]
        assert script.is_file(), f"{args[0]} does not exist"
        run_benchmark_parser(monkeypatch, script, args[1:])
    else:
        pytest.fail(f"{where}: a command this test does not know")


def test_every_command_block_is_tagged_sh() -> None:
    """A block that gives commands is tagged ``sh`` (so the test above checks it)."""
    assert commands(), "no sh blocks found"
    for path in COMMAND_DOCS:
        for info, body in blocks(path):
            if info != "sh":
                assert not COMMAND_LINE.search(body), f"{path.name}: untagged commands:\n{body}"


@pytest.mark.parametrize(
    "words",
    [
        ["lakelock", "simulate", "--writerz", "8"],
        ["lakelock", "no-such-command"],
        ["python", "benchmarks/bench_tuning.py", "--writers", "many"],
        ["python", "benchmarks/bench_tuning.py", "--no-such-flag"],
        ["python", "benchmarks/bench_none.py"],
        ["python", "-m", "pytest", "tests/test_none.py"],
        ["python", "-m", "pytest", "tests/test_docs.py::test_none"],
        ["python", "-m", "pytest", "tests/test_simulator.py", "-k", "test_none_sweep"],
        ["python", "-m", "pytest", "-m", "slowish"],
        ["LAKELOCK_" + "NONE=1", "python", "-m", "pytest"],
        ["python", "-m", "pip", "install", "-e", ".[none]"],
        ["make", "docs"],
    ],
    ids=" ".join,
)
def test_a_wrong_command_is_found(monkeypatch: pytest.MonkeyPatch, words: list[str]) -> None:
    """The check above refuses a command the code does not take: an unknown subcommand,
    option, script, test file, test, marker, environment variable or extra."""
    with pytest.raises((SystemExit, AssertionError, pytest.fail.Exception)):
        test_docs_commands_are_the_codes(monkeypatch, "a wrong command", words)


# -- the decision records ------------------------------------------------------------------------

#: A reference to a decision record: ``docs/decisions/NNNN-title.md``, or ``NNNN-title.md``
#: from a page beside it.
DECISION_REF = re.compile(r"(?:docs/)?decisions/(\d{4}-[\w-]+\.md)|\((\d{4}-[\w-]+\.md)\)")
#: Where the code and the docs cite decisions.
CITING = [
    *sorted((REPO / "lakelock").rglob("*.py")),
    *sorted((REPO / "benchmarks").glob("*.py")),
    *sorted((REPO / "tests").glob("*.py")),
    *DOCS,
    *DECISIONS,
    REPO / "docs" / "decisions" / "README.md",
    REPO / "BENCHMARKS.md",
    REPO / "README.md",
]


def test_every_decision_cited_exists_and_every_record_is_indexed() -> None:
    """A comment or a page that cites a decision record names one that exists (a renamed or
    renumbered record would leave the reader at nothing), the index lists every record, and
    nothing cites the benchmark diary's old numbered sections, which no longer exist."""
    names = {path.name for path in DECISIONS}
    diary_section = "BENCHMARKS.md " + "\N{SECTION SIGN}"
    assert names, "docs/decisions/ has no records"
    cited: set[str] = set()
    for path in CITING:
        text = path.read_text()
        assert diary_section not in text, f"{path.name} cites a section BENCHMARKS.md lost"
        for match in DECISION_REF.finditer(text):
            name = match[1] or match[2]
            assert name in names, f"{path.relative_to(REPO)} cites {name}, which does not exist"
            cited.add(name)
    index = (REPO / "docs" / "decisions" / "README.md").read_text()
    assert {m[2] for m in DECISION_REF.finditer(index) if m[2]} == names, "the index is not whole"
    assert "docs/decisions/README.md" in (REPO / "BENCHMARKS.md").read_text()


# -- the map ---------------------------------------------------------------------------------

#: A line of the rooms drawing that names a module or a package: its tree glyph, then the name.
MAP_ENTRY = re.compile(r"^(?P<indent>(?:[│ ] {3})*)[├└]── (?P<name>[\w.]+/?)")


def mapped_modules() -> set[str]:
    """The modules docs/ARCHITECTURE.md's drawing of the rooms names, as paths under lakelock/
    (a package, ``name/``, stands for its ``__init__.py``)."""
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    drawing = text.split("## The rooms", 1)[1].split("```", 2)[1]
    mapped: set[str] = set()
    folders: list[str] = []
    for line in drawing.splitlines():
        if not (entry := MAP_ENTRY.match(line)):
            continue
        depth = len(entry["indent"]) // 4
        del folders[depth:]
        name = entry["name"]
        if name.endswith("/"):
            folders.append(name)
            mapped.add("".join(folders) + "__init__.py")
        else:
            mapped.add("".join(folders) + name)
    return mapped


def test_the_map_names_every_module() -> None:
    """docs/ARCHITECTURE.md's rooms name every module of lakelock/ in its package, and no module
    that is gone: a newcomer who reads the map finds every file where it lies."""
    package = REPO / "lakelock"
    modules = {path.relative_to(package).as_posix() for path in package.rglob("*.py")}
    mapped = mapped_modules()
    assert sorted(modules - mapped) == [], "modules missing from the map"
    assert sorted(mapped - modules) == [], "the map names modules that do not exist"
