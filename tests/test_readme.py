"""The README's quick start is exactly two commands, and CI runs the test one verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", quick_start, re.S)]


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
