"""The README's quick-start commands are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", quick_start, re.S)]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    """.ci/run contains, as one line, the README's install-and-test command."""
    commands = [c for c in readme_commands() if "pytest" in c]
    assert len(commands) == 1
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[0] in ci_lines
