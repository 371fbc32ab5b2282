"""A view's series of objects: how to find the newest without listing them all, and how to
go on when another mirror writes the series too.

A view's numbered keys (:mod:`lakelock._layout`: ``<20 digits><suffix>`` below a prefix) sort
in version order, so :func:`newest` finds the last one with a handful of one-key ``LIST``
requests (``start_after`` probes: exponential, then binary search), however long the series
is. A mirror that finds another's object where it assumed none starts over from the view as it
now is (:func:`restarting`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from lakelock._layout import VIEW_DIGITS as _DIGITS
from lakelock._s3 import ObjectStore
from lakelock.errors import AlreadyExistsError

__all__ = ["newest", "numbered", "restarting"]

_T = TypeVar("_T")
#: How many times a mirror starts over after finding another writer's different view.
RESTARTS = 8


def restarting(attempt: Callable[[], _T | None], store: ObjectStore, view: str) -> _T:
    """What ``attempt`` (one pass of a mirror) returns, tried again while it returns ``None``
    (another mirror's view differed from the one it read), up to :data:`RESTARTS` times;
    then AlreadyExistsError: ``view`` kept changing under this mirror."""
    for _ in range(RESTARTS):
        if (done := attempt()) is not None:
            return done
    raise AlreadyExistsError(
        f"the {view} kept changing under this mirror", bucket=store.bucket, operation="PutObject"
    )


def newest(
    store: ObjectStore,
    prefix: str,
    parse: Callable[[str], int | None],
    *,
    since: int | None = None,
) -> tuple[int, str] | None:
    """The highest number ``parse`` reads from a key right under ``prefix`` (keys are
    ``<20 digits><suffix>``), with its key; ``None`` if there is none. About ``2 log2(n)``
    one-key LISTs for a series reaching ``n``; with ``since``, a number the caller saw in the
    series (a hint: wrong or gone only costs the search from the start), about
    ``2 log2(n - since)``."""

    def after(n: int) -> tuple[int, str] | None:
        """The first numbered key whose number is above ``n`` (every suffix of ``n`` sorts
        before ``<n>~``)."""
        start = f"{prefix}{n:0{_DIGITS}d}~" if n >= 0 else ""
        for listed in store.list(prefix, start_after=start, page_size=4):
            number = parse(listed.key[len(prefix) :])
            if number is not None:
                return number, listed.key
        return None

    first = after(since - 1) if since is not None and since > 0 else None
    if first is None:
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
