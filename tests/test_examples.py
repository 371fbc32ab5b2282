"""The examples run as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_daily_pipeline_runs_and_is_idempotent() -> None:
    """The daily pipeline stages, publishes once, and its re-run changes nothing."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "daily_pipeline.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines.count("visits now has 3 rows") == 2
    assert sum("published" in line for line in lines) == 1
    assert "(already done)" in lines[-2]
