"""Adversarial tests of the registry log's promise (README, "Time travel":
``lake.registry.log()`` lists recent commits, refused ones with why; ``lakelock registry
log``): an auditor reads the log to learn what changed the lake, version by version."""

from __future__ import annotations

import pyarrow as pa

from lakelock import Lake
from tests._support.processes import InProcess


def test_the_log_says_which_versions_it_leaves_out(lake: Lake, in_process: InProcess) -> None:
    """Between two appends the retention is cut to a day (``lake.configure``). That version
    records no commit, so the log lists versions 3 and 1 and nothing at 2: the reader of
    ``lakelock registry log --help`` (and of ``Registry.log``) must be told that a settings
    change, an upgrade and vacuum's move of the root are versions it does not list, and
    where to see them (``registry show``). What an auditor would have lost: a gap in the
    versions with no word of what it was, the retention change that shortened every time
    travel among them."""
    lake.append("sales", pa.table({"id": [1]}))
    lake.configure(retention="1d")
    lake.append("sales", pa.table({"id": [2]}))
    assert [e.version for e in lake.registry.log()] == [3, 1]
    described = " ".join(in_process("registry", "log", "--help").stdout.split())
    for words in ("registry configure", "vacuum", "registry show"):
        assert words in described
