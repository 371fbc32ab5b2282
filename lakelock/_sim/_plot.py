"""A run's load over time as a PNG (``lakelock simulate --plot``): commits per second, their
p99 latency and requests per commit, second by second, the warm-up and any brownout shaded.

matplotlib is an optional extra (``lakelock[plot]``): :func:`require_matplotlib` says so
before a run is made for nothing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lakelock._engines import require
from lakelock._sim._faults import Brownout
from lakelock._sim._run import Metrics

__all__ = ["plot", "require_matplotlib"]

#: The extra that installs matplotlib.
EXTRA = "plot"


def require_matplotlib() -> Any:
    """matplotlib, or :class:`~lakelock.errors.MissingExtraError` naming :data:`EXTRA`."""
    return require("matplotlib", extra=EXTRA)


def plot(metrics: Metrics, path: str | Path, *, brownout: Brownout | None = None) -> None:
    """Draw ``metrics``' per-second figures into the PNG ``path`` (made with matplotlib's
    object API and its Agg canvas: no global backend or figure state is touched)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - optional
    from matplotlib.figure import Figure  # noqa: PLC0415 - optional extra

    commits = metrics.commits_by_second
    seconds = [k + 0.5 for k in range(len(commits))]  # each second's figure at its middle
    per_commit = [
        requests / made if made else math.nan
        for requests, made in zip(metrics.requests_by_second, commits, strict=True)
    ]
    p99 = [
        ms if made else math.nan for ms, made in zip(metrics.p99_ms_by_second, commits, strict=True)
    ]
    figure = Figure(figsize=(9, 7), layout="constrained")
    FigureCanvasAgg(figure)
    top, middle, bottom = figure.subplots(3, 1, sharex=True)
    top.stairs(commits, range(len(commits) + 1), color="tab:blue")  # each whole second's
    top.set_ylabel("commits/s")
    middle.plot(seconds, p99, marker=".", color="tab:orange")
    middle.set_ylabel("p99 latency (ms)")
    bottom.plot(seconds, per_commit, marker=".", color="tab:green")
    bottom.set_ylabel("requests/commit")
    bottom.set_xlabel("virtual seconds")
    for axes in (top, middle, bottom):
        axes.set_xlim(0, len(commits))
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        if metrics.warmup:
            axes.axvspan(0, metrics.warmup, color="grey", alpha=0.15, label="warm-up (left out)")
        if brownout is not None:
            axes.axvspan(
                brownout.start, brownout.end, color="tab:red", alpha=0.12, label="brownout"
            )
    if metrics.warmup:
        top.axhline(
            metrics.commits_per_second, color="tab:blue", linestyle=":", label="steady-state mean"
        )
    if metrics.warmup or brownout is not None:
        top.legend(loc="lower right", fontsize="small")
    title = (
        f"{metrics.writers} writers, {metrics.store}, seed {metrics.seed}: "
        f"{metrics.commits_per_second:.1f} commits/s, p99 {metrics.p99_ms:.0f} ms, "
        f"{metrics.requests_per_commit:.1f} requests/commit"
    )
    if brownout is not None:
        title += f"\nbrownout {brownout.start:g}-{brownout.end:g} s: latency x{brownout.factor:g}"
        title += f", {brownout.throttle:.0%} answered 503" if brownout.throttle else ""
    figure.suptitle(title, fontsize="medium")
    figure.savefig(path, format="png", dpi=100)
