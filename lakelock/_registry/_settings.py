"""A lake's settings: stored in its root, the same for every writer.

The promises a lake makes depend on four numbers, which therefore belong to the lake and not
to whichever process happens to write it:

- ``retention`` (seconds): a replaced version stays readable while its successor is younger
  than this (time travel); vacuum's window is never longer (it could not see further back),
  and shorter only when asked;
- ``commit_window``: how many recent commit ids the root keeps (the idempotency window across
  datasets);
- ``intent_ttl`` (seconds): how long an undecided intent may still be applied (rule 4), and
  how long vacuum keeps one a fold passed over (rule 8);
- ``vacuum_floor`` (seconds): the shortest window vacuum ever uses, even below the retention
  (``enforce_retention=False``): no object younger than this is deleted, so a writer commits
  what it wrote only while it is younger than half of it (FORMAT.md, "Retention and
  vacuum"). ``0``: no floor (vacuum may delete any unreferenced object at once; only for a
  lake no writer is writing while vacuum runs).

The root carries them as ``"settings": {...}`` (format 2). They are set by the commit that
creates the lake (from the creating ``Lake``'s arguments, else :data:`DEFAULTS`), changed only
by an explicit commit (``lake.configure(...)``, ``lakelock registry configure``), and read by
every writer from the root it commits on. A root without them (a lake made before they
existed) is read as :data:`DEFAULTS` (today's defaults), and the next commit writes them
there. A value a ``Lake`` was given explicitly that disagrees with the lake's is refused
(:class:`~lakelock.errors.SettingsMismatchError`, naming both).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from lakelock._durations import at_most_a_century
from lakelock._jsonfields import boolean_free_int, number, obj
from lakelock.errors import InvalidArgumentError, SettingsMismatchError

__all__ = [
    "DEFAULTS",
    "DEFAULT_FLOOR",
    "MAX_COMMIT_WINDOW",
    "MAX_INTENT_TTL",
    "LakeSettings",
    "configured",
    "explicit_settings",
    "lake_settings",
    "parse_settings",
]

#: The default vacuum floor (seconds), at most the retention: an hour is far longer than any
#: commit takes, and short enough for a lake to be cleaned up the same day.
DEFAULT_FLOOR = 3600.0

#: The most commit ids the root's window may keep. Every commit rewrites the root whole, and
#: it keeps the window's entries (about 350 bytes each) and as many intents' fates (about 175
#: bytes each; as many again of those not applied, which are rare): 10,000 makes a root of
#: about 5 MB (7 MB at worst), under the 8 MiB from which the root is written by multipart,
#: where a larger window would make every commit's PUT grow with it (FORMAT.md, "The lake's
#: settings").
MAX_COMMIT_WINDOW = 10_000

#: The longest ``intent_ttl`` (seconds). Vacuum keeps every intent younger than it whose fate
#: the root no longer records (rule 8: its writer may still apply it): one object a commit,
#: listed by every vacuum, so at 99,999 days ``metastore/intents/`` only ever grows. An hour
#: is six times the default, and far longer than any writer waits to apply its own intent
#: (at most half the TTL).
MAX_INTENT_TTL = 3600.0


@dataclass(frozen=True)
class LakeSettings:
    """A lake's settings (module docstring)."""

    retention: float = 7 * 24 * 3600.0
    commit_window: int = 100
    intent_ttl: float = 600.0
    vacuum_floor: float = DEFAULT_FLOOR

    def to_json(self) -> dict[str, Any]:
        return {
            "retention": self.retention,
            "commit_window": self.commit_window,
            "intent_ttl": self.intent_ttl,
            "vacuum_floor": self.vacuum_floor,
        }


#: What a lake has that never had settings stored, and what a new lake gets by default.
DEFAULTS = LakeSettings()

_NAMES = tuple(f.name for f in fields(LakeSettings))


def parse_settings(raw: Any) -> LakeSettings:
    """The root's ``settings``, checked as :func:`checked` checks a caller's (not against the
    bounds a caller's are: a root stored above them by an older lakelock stays readable)."""
    data = obj(raw, "settings")
    return checked(
        retention=number(data["retention"], "settings retention"),
        commit_window=boolean_free_int(data["commit_window"], "settings commit_window"),
        intent_ttl=number(data["intent_ttl"], "settings intent_ttl"),
        vacuum_floor=number(data["vacuum_floor"], "settings vacuum_floor"),
    )


def checked(
    *, retention: float, commit_window: int, intent_ttl: float, vacuum_floor: float
) -> LakeSettings:
    """Settings that make sense together, or :class:`~lakelock.errors.InvalidArgumentError`
    (a ``ValueError``) naming what does not."""
    for name, value in (
        ("retention", retention),
        ("intent_ttl", intent_ttl),
        ("vacuum_floor", vacuum_floor),
    ):
        if not math.isfinite(value) or value < 0:
            raise InvalidArgumentError(value, "a non-negative number of seconds", what=name)
    if intent_ttl <= 0:
        raise InvalidArgumentError(intent_ttl, "a positive number of seconds", what="intent_ttl")
    if commit_window < 1:
        raise InvalidArgumentError(commit_window, "at least 1", what="commit_window")
    if vacuum_floor > retention:
        raise InvalidArgumentError(
            vacuum_floor,
            f"vacuum_floor ({vacuum_floor:g} s) exceeds the retention ({retention:g} s): "
            "vacuum never uses a window longer than the retention",
            what="vacuum_floor",
        )
    return LakeSettings(float(retention), commit_window, float(intent_ttl), float(vacuum_floor))


def _check_bounds(**given: float | int) -> None:
    """Refuse a ``commit_window`` or ``intent_ttl`` above its bound (the constants say why),
    and a ``retention`` or ``vacuum_floor`` above a century (:data:`MAX_DURATION`, the
    bound of every other duration: an instant further off is no date Python shows, and a
    lake would read none of its versions as old)."""
    for name in ("retention", "vacuum_floor"):
        value = given.get(name)
        if value is not None:
            at_most_a_century(value, what=name)
    window = given.get("commit_window")
    if window is not None and window > MAX_COMMIT_WINDOW:
        raise InvalidArgumentError(
            window,
            f"at most {MAX_COMMIT_WINDOW}: every commit rewrites the root, which keeps this "
            'many commit ids and as many fates (docs/FORMAT.md, "The lake\'s settings")',
            what="commit_window",
        )
    ttl = given.get("intent_ttl")
    if ttl is not None and ttl > MAX_INTENT_TTL:
        raise InvalidArgumentError(
            ttl,
            f"at most {MAX_INTENT_TTL:g} seconds (1h): vacuum keeps every intent younger "
            "than it whose fate the root no longer records (docs/FORMAT.md, \"The lake's "
            'settings")',
            what="intent_ttl",
        )


def explicit_settings(**given: float | int | None) -> dict[str, float | int]:
    """The settings a caller named (``None``: the lake's), each checked on its own."""
    explicit = {name: value for name, value in given.items() if value is not None}
    unknown = set(explicit) - set(_NAMES)
    if unknown:
        raise TypeError(f"unknown lake settings: {sorted(unknown)}")
    for name, value in explicit.items():
        # Checked before the root stores it: a value of another type written there (JSON
        # true for a window) would make the root unparseable for every process.
        whole = name == "commit_window"
        if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
            wanted = "a whole number of commits (an int)" if whole else "a number of seconds"
            raise InvalidArgumentError(value, wanted, what=name)
    _check_bounds(**explicit)
    return explicit


def configured(base: LakeSettings, changes: Mapping[str, float | int]) -> LakeSettings:
    """``base`` with ``changes``; a vacuum floor not given follows a retention lowered below
    it (the floor is at most the retention), and one that is the default's for the old
    retention (an hour, or the retention if shorter) is the default's for the new one: a
    retention shrunk for a while and set back brings the floor back, instead of leaving
    every later writer only half the shrunk floor to commit what it wrote."""
    merged = replace(base, **changes)  # type: ignore[arg-type]
    if "vacuum_floor" not in changes:
        if base.vacuum_floor == min(DEFAULT_FLOOR, base.retention):
            merged = replace(merged, vacuum_floor=min(DEFAULT_FLOOR, merged.retention))
        elif merged.vacuum_floor > merged.retention:
            merged = replace(merged, vacuum_floor=merged.retention)
    _check_bounds(**changes)  # only what changes: a lake stored above a bound stays usable
    return checked(**{name: getattr(merged, name) for name in _NAMES})


def lake_settings(stored: LakeSettings | None, explicit: Mapping[str, float | int]) -> LakeSettings:
    """The settings a writer uses: the lake's (``stored``), after refusing an ``explicit``
    value that disagrees (:class:`~lakelock.errors.SettingsMismatchError`). A lake with
    none stored yet (new, or made before settings were stored) uses the explicit values
    over :data:`DEFAULTS`, and its next commit stores them."""
    if stored is None:
        return configured(DEFAULTS, explicit)
    for name, value in explicit.items():
        if getattr(stored, name) != value:
            raise SettingsMismatchError(
                f"{name}={_shown(name, value)} was given, but the lake's {name} is "
                f"{_shown(name, getattr(stored, name))}: every writer of a lake uses the "
                f"lake's settings (open it without {name} to use them, or change them for "
                f"every writer with lake.configure({name}=...) / lakelock registry configure)",
                setting=name,
                given=value,
                stored=getattr(stored, name),
            )
    return stored


def _shown(name: str, value: float | int) -> str:
    if name == "commit_window":
        return str(value)
    return f"{value:.0f} s" if float(value).is_integer() else f"{value:g} s"
