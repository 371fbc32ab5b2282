"""The README's quick start is exactly two commands, CI runs the test one verbatim, and every
code example -- the README's and the docstrings' -- runs as written against the embedded
endpoint."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pyarrow as pa
import pytest

import lakelock
from lakelock import Lake
from lakelock.cli import build_parser, main
from lakelock.testing import S3Endpoint
from tests._support.processes import InProcess

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def readme_commands() -> list[str]:
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", quick_start, re.S)]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_quick_start_is_two_commands() -> None:
    """One installs and runs the demo, one installs and runs the tests."""
    demo, tests = readme_commands()
    assert demo.endswith("lakelock demo")
    assert "pip install" in demo
    assert tests.endswith("python -m pytest")
    assert "pip install" in tests


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    """.ci/run contains, as one line, the README's install-and-test command."""
    tests = readme_commands()[1]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci_lines


def run_example(code: str, source: str, namespace: dict[str, Any] | None = None) -> None:
    exec(compile(code, source, "exec"), {"__name__": "__example__", **(namespace or {})})


def library_blocks() -> tuple[list[str], list[str]]:
    """The python blocks of the README's library section: the story its task sections tell
    (one namespace, in order), and the testing section's, which stands alone."""
    library = README.split("## The library, by task", 1)[1].split("\n## ", 1)[0]
    story, testing = library.split("### Testing your pipelines", 1)
    return code_blocks(story, "python"), code_blocks(testing, "python")


def test_readme_python_examples_run(aws_env: None, s3: S3Endpoint, bucket: str) -> None:
    """Each python block of the README runs as written (the bucket named "my-bucket" is this
    test's bucket), and does what it says. The library's task sections continue one story, so
    they share one namespace; the testing section stands alone. The views block loads DuckDB's
    extensions from the installed packages and reads both views as lakelock reads the
    dataset."""
    story_blocks, testing_blocks = library_blocks()
    assert len(story_blocks) >= 6
    assert len(testing_blocks) == 1
    assert len(code_blocks(README, "python")) == len(story_blocks) + len(testing_blocks)
    story: dict[str, Any] = {"__name__": "__example__"}
    checked: set[str] = set()
    for number, block in enumerate(story_blocks, start=1):
        code = block.replace('"my-bucket"', f'"{bucket}"')
        exec(compile(code, f"README.md python block {number}", "exec"), story)
        if "views" in story and "views" not in checked:  # DuckDB reads both views
            checked.add("views")
            rows = story["lake"].read("sales").num_rows
            for scan, uri in (("iceberg", story["views"].iceberg), ("delta", story["views"].delta)):
                counted = story["con"].sql(f"SELECT count(*) FROM {scan}_scan('{uri}')").fetchall()
                assert counted == [(rows,)]
    run_example(testing_blocks[0], "README.md, testing your pipelines")
    assert sorted(story["old_rows"]["id"].to_pylist()) == [1, 2]  # the first version
    assert story["owner"] == "etl"
    assert story["rerun"].already_committed
    lake = Lake(bucket, s3=s3.client())
    snapshot = lake.registry.read()
    assert set(snapshot.datasets) == {"sales", "archive", "events"}
    assert lake.read("events").num_rows == 9
    sales = snapshot.datasets["sales"].partitions
    assert sorted(sales) == ["year=2024/month=1", "year=2024/month=2"]  # 2023 deleted
    archive = snapshot.datasets["archive"].partitions
    assert sorted(archive) == ["year=2023/month=12", "year=2024/month=2"]  # renamed, copied
    assert snapshot.fences  # the lease's token was recorded by its takeover
    # Each write lock (the moves' and the README's own) is taken and released by a commit.
    assert [c.operation for c in snapshot.commits].count("lock") == 3
    assert [c.operation for c in snapshot.commits if c.operation not in ("lock", "unlock")] == [
        "append",
        "overwrite",
        "append",
        "append",
        "delete",
        "properties",
        "takeover",  # the lease taken: recorded before its holder compacts
        "compact",
        "commit",
        "rename",
        "copy",
        "restore",
        "append",
        "commit",
    ]


#: The protocol's words: a user meets them only as links to docs/ARCHITECTURE.md's glossary.
PROTOCOL_WORDS = re.compile(
    r"\b(intents?|fold(?:s|ed|ing)?|rounds?|watermarks?|fates?|hand-overs?|linger(?:s|ed|ing)?)\b",
    re.I,
)
GLOSSARY_LINK = re.compile(r"\[[^\]]*\]\(docs/ARCHITECTURE\.md#glossary\)")


def without_code(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M)


def prose(text: str) -> str:
    """``text`` without its code blocks, headings and tables."""
    lines = without_code(text).splitlines()
    return "\n".join(line for line in lines if not line.startswith(("#", "|")))


def sentences(text: str) -> list[str]:
    """The sentences of ``text``'s prose (a list item is one; a link counts as its text)."""
    plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", prose(text)).replace("\n- ", "\n\n")
    return [
        sentence
        for paragraph in re.split(r"\n\s*\n", plain)
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`(\[*])", " ".join(paragraph.split()))
        if sentence
    ]


def test_readme_is_a_page_for_users() -> None:
    """The README is read by users, not the protocol's authors: at most 250 lines, no sentence
    over 40 words, each protocol word (intent, fold, round, watermark, fate, hand-over, linger)
    a link to the glossary, never in bare prose, and no tuning by ``dataclasses.replace`` on
    lakelock's internal objects. BENCHMARKS.md, today's record, stays at most 400 lines."""
    assert len(README.splitlines()) <= 250
    long = [s for s in sentences(README) if len(s.split()) > 40]
    assert long == [], "sentences over 40 words"
    unlinked = re.sub(r"`[^`]*`", "", GLOSSARY_LINK.sub("", prose(README)))
    assert PROTOCOL_WORDS.findall(unlinked) == [], "protocol words without the glossary's link"
    assert "dataclasses.replace" not in README
    assert "## Glossary" in (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert len((ROOT / "BENCHMARKS.md").read_text().splitlines()) <= 400


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives ``path``'s headings (lower case, punctuation dropped, spaces
    as hyphens)."""
    headings = re.findall(r"^#+ (.+)$", without_code(path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", ["README.md", "BENCHMARKS.md"])
def test_the_front_pages_links_lead_somewhere(page: str) -> None:
    """Every relative link of the pages a newcomer reads first names a file that exists and,
    when it names a section, a heading of that file: a renamed heading or a moved page would
    leave the reader at nothing."""
    path = ROOT / page
    links = re.findall(r"\]\(([^)\s]+)\)", without_code(path.read_text()))
    local = [link for link in links if "://" not in link]
    assert local, f"{page} has no links to check"
    for link in local:
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.exists(), f"{page} links to {target}, which does not exist"
        if anchor:
            assert anchor in anchors(file), f"{page} links to {link}: no such heading"


def test_readme_command_lines_parse() -> None:
    """Every ``lakelock ...`` line of the README's command-line block is a valid command."""
    section = README.split("## The command line", 1)[1].split("\n## ", 1)[0]
    lines = [
        line.split("#", 1)[0].strip()
        for block in code_blocks(section, "sh")
        for line in block.splitlines()
    ]
    commands = [shlex.split(line) for line in lines if line.startswith("lakelock ")]
    assert len(commands) >= 8
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv[1:])  # SystemExit (exit 2) on a usage error


#: The README's commands that do not end by themselves (a server) or that the demo and the
#: simulator's own tests run.
NOT_RUN = {"catalog", "simulate", "doctor"}


def test_readme_command_lines_run_against_a_lake(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """Every command of the README's command-line block that reads or changes a lake runs as
    written against one, its URL and the endpoint put in (``registry show``, ``registry
    log``, ``locks``, ``vacuum``, ``registry configure``, ``mirror``, ``policy``): exit 0,
    nothing on stderr, something said. What a user copying a line meets: a flag that moved
    or a command that needs more than the line gives fails here, where parsing passes."""
    lake.append("sales", pa.table({"id": [1, 2], "year": [2024, 2024]}), partition_by=["year"])
    section = README.split("## The command line", 1)[1].split("\n## ", 1)[0]
    lines = [
        line.split("#", 1)[0].strip()
        for block in code_blocks(section, "sh")
        for line in block.splitlines()
    ]
    ran = []
    for argv in (shlex.split(line) for line in lines if line.startswith("lakelock ")):
        if argv[1] in NOT_RUN:
            continue
        args = [lake.url if a.startswith("s3://") else a for a in argv[1:]]
        if any(a.startswith("s3://") for a in argv):
            args += ["--endpoint-url", s3.url]
        result = in_process(*args)
        assert (result.returncode, result.stderr) == (0, ""), args
        assert result.stdout.strip(), args
        ran.append(argv[1])
    assert {"registry", "locks", "vacuum", "mirror", "policy"} <= set(ran)


def docstring_examples() -> list[tuple[str, str]]:
    """(where, code) of every python block in a docstring of the lakelock package: modules,
    and the classes and functions they define."""
    modules: list[ModuleType] = [lakelock]
    for info in pkgutil.walk_packages(lakelock.__path__, "lakelock."):
        if info.name == "lakelock.__main__" or info.name.endswith(".__main__"):
            continue
        modules.append(importlib.import_module(info.name))
    found = []
    for module in modules:
        documented: list[tuple[str, Any]] = [(module.__name__, module)]
        for name, member in vars(module).items():
            if getattr(member, "__module__", None) != module.__name__:
                continue
            documented.append((f"{module.__name__}.{name}", member))
            if inspect.isclass(member):
                documented += [
                    (f"{module.__name__}.{name}.{attr}", value)
                    for attr, value in vars(member).items()
                ]
        for where, obj in documented:
            doc = obj.__doc__ if isinstance(getattr(obj, "__doc__", None), str) else None
            found += [(where, block) for block in code_blocks(doc or "", "python")]
    return sorted(set(found))


EXAMPLES = docstring_examples()


def test_docstring_examples_are_found() -> None:
    """The collector sees the package's examples (a collector finding none proves nothing)."""
    where = {w for w, _ in EXAMPLES}
    assert {"lakelock", "lakelock._lease._shell", "lakelock._pathlock._distributed"} <= where


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_docstring_example_runs(
    where: str, code: str, aws_env: None, s3: S3Endpoint, bucket: str
) -> None:
    """Each docstring example runs against the embedded endpoint. Examples may use, without
    defining them: ``lake`` (a Lake on a fresh bucket, also reachable as "my-bucket"),
    ``store`` (its ObjectStore) and ``table`` (rows with year/month/day columns), plus the
    names the module itself defines."""
    lake = Lake(bucket, s3=s3.client())
    table = pa.table({"id": [1, 2, 3], "year": [2024] * 3, "month": [1, 1, 2], "day": [30, 31, 1]})
    module = importlib.import_module(_module(where))
    namespace = {**vars(module), "lake": lake, "store": lake.store, "table": table}
    run_example(code.replace('"my-bucket"', f'"{bucket}"'), f"docstring of {where}", namespace)


def _module(where: str) -> str:
    """The module part of a dotted ``where`` (module, module.Class or module.Class.attr)."""
    parts = where.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return name
    raise AssertionError(where)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def local_section() -> str:
    return README.split("## On your machine, with your own code", 1)[1].split("\n## ", 1)[0]


def test_the_local_path_runs_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's way to run your own code locally, copied as a user would: ``lakelock
    serve`` (on a free port instead of 9000) creates the bucket, the exported environment
    points boto3 at it, and the library's first example runs unchanged against "my-bucket"."""
    serve, env = (block.strip() for block in code_blocks(local_section(), "sh"))
    port = free_port()
    argv = shlex.split(serve.replace("9000", str(port)))
    assert argv[:2] == ["lakelock", "serve"]
    process = subprocess.Popen(
        [sys.executable, "-m", "lakelock.cli", *argv[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert banner.startswith("lakelock S3 endpoint: "), process.stderr
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        # A user's fresh process reads the exported credentials; this one's default boto3
        # session may have resolved other credentials for an earlier test and kept them.
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
        exported = shlex.split(env.replace("9000", str(port)).replace("export", ""))
        for assignment in exported:
            name, value = assignment.split("=", 1)
            monkeypatch.setenv(name, value)
        run_example(code_blocks(README, "python")[0], "README.md python block 1")
        assert Lake("my-bucket").read("sales").num_rows > 0
    finally:
        process.terminate()
        process.communicate(timeout=30)  # and close its pipes


def test_the_policy_command_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    section = README.split("## The command line", 1)[1].split("\n## ", 1)[0]
    (line,) = [
        line.split("#", 1)[0].strip()
        for line in code_blocks(section, "sh")[0].splitlines()
        if line.startswith("lakelock policy")
    ]
    assert main(shlex.split(line)[1:]) == 0
    assert '"Statement"' in capsys.readouterr().out
