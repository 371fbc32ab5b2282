"""The demo job: writer processes, a rename, a leader's compaction, and its own checks."""

from __future__ import annotations

import io

from lakelock._demo import run_demo


def test_demo_passes_its_checks() -> None:
    """A small demo run ends with every check passing and says so."""
    out = io.StringIO()
    code = run_demo(writers=2, appends=3, latency=0.0, out=out, progress=False)
    text = out.getvalue()
    assert code == 0, text
    assert "demo passed" in text
    assert "[FAILED]" not in text
    assert "was elected leader" in text
    assert text.count("[ok]") == 7
