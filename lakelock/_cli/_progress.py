"""A small progress bar on stderr, for terminals only (or when forced with ``--progress``)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

__all__ = ["ProgressBar", "ProgressCounter", "progress_wanted"]


def progress_wanted(flag: bool | None, stream: TextIO | None = None) -> bool:
    """``--progress`` / ``--no-progress`` decide; by default, only on a terminal."""
    if flag is not None:
        return flag
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class ProgressBar:
    """Callable as ``progress(done, total)``; redraws at most every ``interval`` seconds (and
    always on completion). Thread-safe. :meth:`close` ends the line."""

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        width: int = 30,
        interval: float = 0.1,
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.interval = interval
        self._lock = threading.Lock()
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            now = time.monotonic()
            if done < total and now - self._last < self.interval:
                return
            self._last = now
            self.stream.write("\r" + self.render(done, total))
            self.stream.flush()
            self._drawn = True

    def render(self, done: int, total: int) -> str:
        fraction = min(done / total, 1.0) if total > 0 else 1.0
        filled = round(fraction * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        return f"{self.label} [{bar}] {done}/{total} {fraction:4.0%}"

    def close(self) -> None:
        with self._lock:
            if self._drawn:
                self.stream.write("\n")
                self.stream.flush()
                self._drawn = False


class ProgressCounter:
    """Callable as ``progress(count)`` for work of unknown size (listing): ``listing 3000
    objects``, redrawn at most every ``interval`` seconds. :meth:`close` draws the final count
    and ends the line."""

    def __init__(
        self,
        label: str,
        *,
        unit: str = "objects",
        stream: TextIO | None = None,
        interval: float = 0.1,
    ) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream or sys.stderr
        self.interval = interval
        self._lock = threading.Lock()
        self._last = 0.0
        self._count: int | None = None
        self._shown: int | None = None

    def __call__(self, count: int) -> None:
        with self._lock:
            self._count = count
            now = time.monotonic()
            if self._shown is not None and now - self._last < self.interval:
                return
            self._last = now
            self._draw(count)

    def _draw(self, count: int) -> None:
        self.stream.write(f"\r{self.label} {count} {self.unit}")
        self.stream.flush()
        self._shown = count

    def close(self) -> None:
        with self._lock:
            if self._count is None:
                return
            if self._shown != self._count:
                self._draw(self._count)
            self.stream.write("\n")
            self.stream.flush()
            self._count = self._shown = None
