"""Durations as people write them: ``"90s"``, ``"15m"``, ``"24h"``, ``"7d"``, ``"1d12h"``, a
number of seconds, or a :class:`~datetime.timedelta`. Pure; shared by the API and the CLI."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from lakelock.errors import InvalidArgumentError

__all__ = [
    "DURATION_FORMS",
    "MAX_DURATION",
    "at_most_a_century",
    "dated_instant",
    "duration_seconds",
    "format_duration",
    "format_instant",
]

#: What :func:`duration_seconds` accepts, for error messages.
DURATION_FORMS = (
    "seconds as a number, a timedelta, or text such as '90s', '15m', '24h', '7d', '1d12h'"
)

#: The longest wait or hold lakelock takes (a century, in seconds): a lease's or lock's
#: ``ttl``, a read's budget. Further off, an instant is no date Python shows (``datetime``
#: ends in 9999), and a wait none the platform makes (``threading.TIMEOUT_MAX``, a socket's
#: timeout).
MAX_DURATION = 100 * 365 * 86400.0

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)")
_UNITS = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}


def duration_seconds(value: object, *, what: str = "duration") -> float:
    """``value`` in seconds (``>= 0``, finite), or :class:`~lakelock.errors.InvalidArgumentError`
    naming what is accepted (:data:`DURATION_FORMS`)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int past every float: no finite duration
            seconds = math.inf
    elif isinstance(value, str):
        seconds = _parse(value, what)
    else:
        raise InvalidArgumentError(value, f"a {what} is {DURATION_FORMS}", what=what)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(value, f"a {what} is finite and not negative", what=what)
    return seconds


def at_most_a_century(seconds: float, *, what: str) -> float:
    """``seconds`` if at most :data:`MAX_DURATION`, else
    :class:`~lakelock.errors.InvalidArgumentError` saying so, as every bounded duration does."""
    if seconds > MAX_DURATION:
        raise InvalidArgumentError(
            seconds,
            f"{what} is at most {MAX_DURATION:.0f} seconds (a century), got {seconds!r}",
            what=what,
        )
    return seconds


def _parse(text: str, what: str) -> float:
    compact = text.strip().lower()
    if compact.startswith("-"):
        raise InvalidArgumentError(text, f"a {what} is finite and not negative", what=what)
    total = 0.0
    position = 0
    for match in _PART.finditer(compact):
        if match.start() != position or match[2] not in _UNITS:
            break
        total += float(match[1]) * _UNITS[match[2]]
        position = match.end()
    else:
        if compact and position == len(compact):
            return total
    raise InvalidArgumentError(text, f"a {what} is {DURATION_FORMS}", what=what)


def format_duration(seconds: float) -> str:
    """``90`` → ``1m30s``; ``0.4`` → ``0.4s``."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    if whole or not parts:
        parts.append(f"{whole}s")
    return "".join(parts[:2])


def dated_instant(epoch: float, pattern: str) -> str | None:
    """``epoch`` (seconds since the epoch) in UTC by the ``strftime`` ``pattern``, or None
    where no date holds it (past the year 9999 or before the year 1: a lease document
    written to expire then, a vacuum record written by a clock that far off)."""
    try:
        return datetime.fromtimestamp(epoch, UTC).strftime(pattern)
    except (OverflowError, OSError, ValueError):
        return None


def format_instant(epoch: float, pattern: str) -> str:
    """``epoch`` as :func:`dated_instant` writes it, or as seconds where no date holds it,
    which a reader shows rather than dies on."""
    dated = dated_instant(epoch, pattern)
    if dated is not None:
        return dated
    if epoch < 0:
        return f"{-epoch:.0f} s before the epoch"
    return f"{epoch:.0f} s after the epoch"
