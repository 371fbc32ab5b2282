"""Worker processes: run ``tests._mp_workers`` roles and collect what they recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests._support import REPO

__all__ = ["run_workers"]


def run_workers(
    role: str, count: int, args: dict[str, Any], *, timeout: float = 60
) -> list[list[dict[str, Any]]]:
    """Run ``count`` worker processes of ``tests._mp_workers`` and collect their JSON records."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests._mp_workers", role, json.dumps({**args, "seed": n})],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=timeout)
        assert process.returncode == 0, err
        results.append([json.loads(line) for line in out.splitlines() if line.strip()])
    return results
