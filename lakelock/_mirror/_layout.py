"""Where the views live, and how to find the newest object of a series without listing it all.

Keys, relative to the lake's prefix (docs/FORMAT.md, "Iceberg and Delta views")::

    datasets/<dataset>/_delta_log/<delta version, 20 digits>.json
    datasets/<dataset>/_delta_log/<delta version, 20 digits>.checkpoint.parquet
    views/<dataset>/iceberg/metadata/<lakelock version, 20 digits>.metadata.json
    views/<dataset>/iceberg/manifests/snap-<lakelock version, 20 digits>.avro
    views/<dataset>/iceberg/manifests/<lakelock version, 20 digits>-<n>.avro

The Delta table is the dataset's own directory: Delta readers resolve a file's ``add.path``
against the table root, and relative paths (``day=3/part-....parquet``) are the ones every
Delta reader handles (deltalake's Python reader mangles absolute ``s3://`` paths). Parquet
readers listing the directory skip ``_delta_log`` (a name starting with ``_``). Iceberg
metadata names absolute paths and lives under ``views/``.

Every one is created with ``If-None-Match: *`` and never rewritten. Names in a series sort in
version order, so :func:`newest` finds the last one with a handful of one-key ``LIST`` requests
(``start_after`` probes: exponential, then binary search), however long the series is.
"""

from __future__ import annotations

from collections.abc import Callable

from lakelock._s3 import ObjectStore

__all__ = [
    "VIEWS_PREFIX",
    "delta_checkpoint_key",
    "delta_log_key",
    "delta_log_prefix",
    "delta_root",
    "iceberg_list_key",
    "iceberg_manifest_key",
    "iceberg_metadata_key",
    "iceberg_metadata_prefix",
    "newest",
    "view_prefix",
]

VIEWS_PREFIX = "views/"
_DIGITS = 20


def view_prefix(dataset: str) -> str:
    return f"{VIEWS_PREFIX}{dataset}/"


def delta_root(dataset: str) -> str:
    return f"datasets/{dataset}"


def delta_log_prefix(dataset: str) -> str:
    return f"{delta_root(dataset)}/_delta_log/"


def delta_log_key(dataset: str, version: int) -> str:
    return f"{delta_log_prefix(dataset)}{version:0{_DIGITS}d}.json"


def delta_checkpoint_key(dataset: str, version: int) -> str:
    return f"{delta_log_prefix(dataset)}{version:0{_DIGITS}d}.checkpoint.parquet"


def iceberg_metadata_prefix(dataset: str) -> str:
    return f"{view_prefix(dataset)}iceberg/metadata/"


def iceberg_metadata_key(dataset: str, version: int) -> str:
    return f"{iceberg_metadata_prefix(dataset)}{version:0{_DIGITS}d}.metadata.json"


def iceberg_list_key(dataset: str, version: int) -> str:
    return f"{view_prefix(dataset)}iceberg/manifests/snap-{version:0{_DIGITS}d}.avro"


def iceberg_manifest_key(dataset: str, version: int, n: int) -> str:
    return f"{view_prefix(dataset)}iceberg/manifests/{version:0{_DIGITS}d}-{n}.avro"


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
