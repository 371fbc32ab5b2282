"""Typed access to fields of parsed JSON: a document of the wrong shape is refused, never
coerced (``int("3")``, ``str(None)`` and ``tuple("abc")`` would turn garbage into values)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_INT", "boolean_free_int", "number", "obj", "seq", "text"]


def obj(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, not {type(value).__name__}")
    return value


def seq(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a JSON array, not {type(value).__name__}")
    return value


def text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, not {type(value).__name__}")
    return value


#: Counters (versions, tokens) are incremented and written back: keep them where the JSON
#: encoder and every reader can still represent the next value.
MAX_INT = 2**63 - 1


def boolean_free_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """An integer (JSON ``true``/``false`` are not integers here) between ``minimum`` and
    ``MAX_INT - 1``, so that one more is still a valid integer."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if value >= MAX_INT:
        raise ValueError(f"{name} is out of range: {value}")
    return value


def number(value: Any, name: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{name} must be a number, not {type(value).__name__}")
    return float(value)
