"""The limits a dataset's properties keep to, one rule for every writer: ``set_properties``,
``append``/``overwrite``'s ``properties=``, ``registry.commit`` and the Iceberg REST catalog
(which answers a refusal 400, naming the limit).

A dataset's properties are written with every version of it (its snapshot, and the Iceberg
view's metadata), so their size is paid by every later commit. Names and values
are bounded as AWS Glue bounds a table's parameters (a name of 1 to 255 bytes, a value of at
most 512,000 bytes: what Glue holds, lakelock holds); the dataset's properties together are
at most :data:`MAX_PROPERTIES` and :data:`MAX_PROPERTIES_BYTES` (names and values, UTF-8),
so a commit's snapshot stays small whatever was set before. A change is judged against the
dataset's properties as read before it commits (two writers adding properties at once may
together pass the totals by what each added; neither passes the per-property limits).
"""

from __future__ import annotations

from collections.abc import Mapping

from lakelock.errors import InvalidArgumentError

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_PROPERTIES",
    "MAX_PROPERTIES_BYTES",
    "MAX_VALUE_BYTES",
    "check_property_count",
    "check_property_limits",
]

#: The longest property name, in UTF-8 bytes (AWS Glue's, and Hive's ``PARAM_KEY``).
MAX_NAME_BYTES = 255
#: The longest property value, in UTF-8 bytes (AWS Glue's).
MAX_VALUE_BYTES = 512_000
#: The most properties a dataset has (and a commit sets or removes).
MAX_PROPERTIES = 1_000
#: The most bytes a dataset's properties hold together (names and values, UTF-8).
MAX_PROPERTIES_BYTES = 1024 * 1024


def check_property_limits(
    changes: Mapping[str, str | None], held: Mapping[str, str] | None = None
) -> None:
    """Refuse (:class:`~lakelock.errors.InvalidArgumentError`, naming the limit) a change of
    properties (``None`` removes one) that breaks a limit, by itself or applied to ``held``
    (the dataset's properties now; ``None``: a dataset without any). A dataset past a total
    already (properties set before there were limits) takes changes that do not add to it."""
    check_property_count(len(changes))
    for name, value in changes.items():
        _check_one(name, value)
    before = dict(held or {})
    after = dict(before)
    for name, value in changes.items():
        if value is None:
            after.pop(name, None)
        else:
            after[name] = value
    # A dataset over a limit already (written by a lakelock without limits) may still shrink.
    if len(after) > max(MAX_PROPERTIES, len(before)):
        raise InvalidArgumentError(
            f"{len(after):,} properties",
            f"a dataset has at most {MAX_PROPERTIES:,} properties (remove some first)",
            what="properties",
        )
    total = _total(after)
    if total > max(MAX_PROPERTIES_BYTES, _total(before)):
        raise InvalidArgumentError(
            f"{total:,} bytes of properties",
            f"a dataset's properties hold at most {MAX_PROPERTIES_BYTES:,} bytes together "
            "(names and values, UTF-8; remove some first)",
            what="properties",
        )


def check_property_count(count: int) -> None:
    """Refuse a change naming ``count`` properties, more than a commit takes (checked first,
    and by the catalog before it parses a request: 300,000 properties take seconds)."""
    if count > MAX_PROPERTIES:
        raise InvalidArgumentError(
            f"{count:,} properties",
            f"a commit sets or removes at most {MAX_PROPERTIES:,} properties",
            what="properties",
        )


def _check_one(name: str, value: str | None) -> None:
    if not 0 < _size(name) <= MAX_NAME_BYTES:
        raise InvalidArgumentError(
            name,
            f"a property's name is 1 to {MAX_NAME_BYTES} bytes (UTF-8); this one is "
            f"{_size(name):,}",
            what="property name",
        )
    if value is not None and _size(value) > MAX_VALUE_BYTES:
        raise InvalidArgumentError(
            name,
            f"a property's value is at most {MAX_VALUE_BYTES:,} bytes (UTF-8); this one's "
            f"is {_size(value):,}",
            what="property",
        )


def _total(properties: Mapping[str, str]) -> int:
    return sum(_size(name) + _size(value) for name, value in properties.items())


def _size(text: str) -> int:
    # A lone surrogate is refused elsewhere (a commit records UTF-8 JSON); it is measured here.
    return len(text.encode("utf-8", "surrogatepass"))
