"""How to find the newest object of a view's series without listing it all.

A view's numbered keys (:mod:`lakelock._layout`: ``<20 digits><suffix>`` below a prefix) sort
in version order, so :func:`newest` finds the last one with a handful of one-key ``LIST``
requests (``start_after`` probes: exponential, then binary search), however long the series
is.
"""

from __future__ import annotations

from collections.abc import Callable

from lakelock._layout import VIEW_DIGITS as _DIGITS
from lakelock._s3 import ObjectStore

__all__ = ["newest", "numbered"]


def newest(
    store: ObjectStore, prefix: str, parse: Callable[[str], int | None]
) -> tuple[int, str] | None:
    """The highest number ``parse`` reads from a key right under ``prefix`` (keys are
    ``<20 digits><suffix>``), with its key; ``None`` if there is none. About ``2 log2(n)``
    one-key LISTs for a series reaching ``n``."""

    def after(n: int) -> tuple[int, str] | None:
        """The first numbered key whose number is above ``n`` (every suffix of ``n`` sorts
        before ``<n>~``)."""
        start = f"{prefix}{n:0{_DIGITS}d}~" if n >= 0 else ""
        for listed in store.list(prefix, start_after=start, page_size=4):
            number = parse(listed.key[len(prefix) :])
            if number is not None:
                return number, listed.key
        return None

    first = after(-1)
    if first is None:
        return None
    found = first
    step = 1
    # Gallop: probe above found by growing steps until a probe finds nothing...
    while (probe := after(found[0] + step - 1)) is not None:
        found = probe
        step *= 2
    # ... then nothing is above found[0] + step - 1: halve the gap.
    low, high = found[0], found[0] + step - 1
    while low < high:
        middle = (low + high + 1) // 2
        probe = after(middle - 1)
        if probe is None:
            high = middle - 1
        else:
            found = probe
            low = probe[0]
    return found


def numbered(suffix: str) -> Callable[[str], int | None]:
    """A parser of ``<20 digits><suffix>`` names (``None`` for any other name)."""

    def parse(name: str) -> int | None:
        digits = name[:_DIGITS]
        if len(name) == _DIGITS + len(suffix) and name.endswith(suffix) and digits.isdigit():
            return int(digits)
        return None

    return parse
