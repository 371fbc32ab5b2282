"""Which partitions a filter can match, found without listing the dataset's partitions.

A dataset's partitions are indexed by a hash trie keyed by partition path
(:mod:`lakelock._registry._tree`): an exact path is a point lookup (one node per level), but
no subtree holds a range of values, so a filter can avoid walking the whole index only when it
names the partitions outright. This module finds when it does: when the filter *pins* every
partition column to a few values (``pc.field("day") == d``, ``.isin([...])``, ``(c == a) |
(c == b)``, each combined with ``&`` and with conditions on other columns), the partitions it
can match are among the few paths those values spell, and the scan looks up just those.

pyarrow offers no public way to take an expression apart, so the values are gathered loosely
(every literal the expression carries, from the form pyarrow pickles it in) and the claim is
then *proved* with pyarrow's own simplifier, the one that prunes partitions in
:class:`~lakelock._scan.Scan`: for a column with candidate values ``s1 < ... < sn`` the filter
must be unsatisfiable for a null and on each open interval ``(-inf, s1)``, ``(s1, s2)``, ...,
``(sn, +inf)``. A candidate the filter rules out is dropped the same way. Anything not proved
(a column pinned by no equality, a range, a type whose spelling is not unique, an expression
pyarrow cannot simplify, a pickled form pyarrow changed) gives ``None``: the whole index is
read and the filter prunes it as before, so this can save requests but never drop a row.
"""

from __future__ import annotations

import itertools
import math
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import fs

from lakelock._names import (
    NULL_PARTITION,
    parse_partition_path,
    parse_partition_value,
    partition_path,
)
from lakelock.errors import InvalidNameError

__all__ = [
    "MAX_PINNED",
    "admitted",
    "admitted_partitions",
    "partition_expression",
    "pinned_partitions",
]

#: The most partitions a pinned filter is looked up as (one point lookup each); more (a long
#: ``isin`` on two columns) and the index is read whole, which costs about as much.
MAX_PINNED = 256
#: The most literals of a column's type a filter may carry for it to be tried at all (each is
#: a candidate value to prove or rule out: an ``isin`` of 10,000 ids on a data column of the
#: same type as a partition column is not worth it).
MAX_LITERALS = 4096


def pinned_partitions(
    filter: pc.Expression, schema: pa.Schema, partition_by: Sequence[str]
) -> list[str] | None:
    """The paths of the only partitions ``filter`` can match (some may not exist), if it pins
    every one of ``partition_by``'s columns to at most a few values; ``None`` if it does not
    (or that cannot be proved). ``schema`` is the dataset's, the filter already checked
    against it."""
    if not partition_by:
        return None
    try:
        literals = list(_literals(filter))
    except (pa.ArrowException, TypeError, ValueError, IndexError, AttributeError):
        return None  # not the pickled form this expects: no pruning
    columns: list[list[pa.Scalar]] = []
    for column in partition_by:
        pinned = _pinned(filter, schema, column, literals)
        if pinned is None:
            return None
        columns.append(pinned)
    if math.prod(len(values) for values in columns) > MAX_PINNED:
        return None
    # Each column pinned alone; together they may rule more out ((a & x) | (b & y)).
    chosen = list(itertools.product(*columns))
    if not chosen:
        return []
    matched = admitted(filter, schema, [_spelled(partition_by, one) for one in chosen])
    paths = []
    for n, one in enumerate(chosen):
        if n in matched:
            try:
                paths.append(partition_path(zip(partition_by, one, strict=True)))
            except InvalidNameError:
                continue  # a value no partition can have ("", the null spelling): none
    return paths


def admitted_partitions(
    filter: pc.Expression, schema: pa.Schema, partition_by: Sequence[str], paths: Sequence[str]
) -> list[str]:
    """The ``paths`` whose partition values ``filter`` cannot rule out: the partitions whose
    manifests a scan must read. A filter over partition columns only is evaluated over a
    table of the partitions' values (one row each: fast); any other is simplified against
    each partition's values by pyarrow, as :class:`~lakelock._scan.Scan` prunes files."""
    if not paths:
        return []
    found = _by_values(filter, schema, partition_by, paths)
    if found is not None:
        return found
    matched = admitted(filter, schema, [partition_expression(p, schema) for p in paths])
    return [path for n, path in enumerate(paths) if n in matched]


def _by_values(
    filter: pc.Expression, schema: pa.Schema, partition_by: Sequence[str], paths: Sequence[str]
) -> list[str] | None:
    """The ``paths`` whose values ``filter`` admits, evaluated as rows; ``None`` if the filter
    names other columns or a value's type is not one whose text casts exactly."""
    fields = [schema.field(column) for column in partition_by]
    if not all(_unique_spelling(f.type) for f in fields):
        return None
    values = pa.schema(fields)
    try:
        values.empty_table().filter(filter)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None  # it names a data column: the per-partition simplification decides
    texts: list[list[str | None]] = [[] for _ in fields]
    for path in paths:
        segments = path.split("/")
        if len(segments) != len(fields):
            return None
        for column, segment, found in zip(partition_by, segments, texts, strict=True):
            name, _, text = segment.partition("=")
            if name != column:
                return None
            found.append(None if text == NULL_PARTITION else urllib.parse.unquote(text))
    try:
        arrays = [pa.array(t, pa.string()).cast(f.type) for t, f in zip(texts, fields, strict=True)]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    row = "__lakelock_row"  # never a column: column names start with a letter or digit
    table = pa.Table.from_arrays([*arrays, pa.array(range(len(paths)))], [*partition_by, row])
    return [paths[n] for n in table.filter(filter).column(row).to_pylist()]


def partition_expression(path: str, schema: pa.Schema) -> pc.Expression:
    """What a partition's path guarantees of its rows: ``col == value`` (or ``is_null``) for
    each of its columns, typed by ``schema``."""
    expression = pc.scalar(True)
    for column, text in parse_partition_path(path):
        field = pc.field(column)
        if text is None:
            expression = expression & field.is_null()
        else:
            expression = expression & (
                field == parse_partition_value(text, schema.field(column).type)
            )
    return expression


def _pinned(
    filter: pc.Expression, schema: pa.Schema, column: str, literals: Sequence[object]
) -> list[pa.Scalar] | None:
    """The values (null included) ``column`` can take where ``filter`` holds, if provably
    among ``literals``; ``None`` otherwise."""
    type_ = schema.field(column).type
    if not _unique_spelling(type_):
        return None
    values = sorted({v for v in (_typed(x, type_) for x in literals) if v is not None})
    if not values or len(values) > MAX_LITERALS:
        return None  # nothing to pin to, or too many literals to try
    field = pc.field(column)
    scalars = [pa.scalar(v, type_) for v in values]
    # The candidates the filter admits (a literal of another column of this type is not).
    matched = admitted(filter, schema, [field == s for s in scalars])
    pinned = [s for n, s in enumerate(scalars) if n in matched]
    if len(pinned) > MAX_PINNED:
        return None  # too many to look up (a long isin)
    # What the filter admits besides the candidates: a null, and every open interval
    # between them (between all of them: the finer the intervals, the more pyarrow proves).
    gaps = [field.is_null(), field < scalars[0], field > scalars[-1]]
    gaps += [(field > a) & (field < b) for a, b in itertools.pairwise(scalars)]
    open_gaps = admitted(filter, schema, gaps)
    if open_gaps - {0}:
        return None  # values outside the candidates can match: not pinned
    if 0 in open_gaps:
        pinned.append(pa.scalar(None, type_))
    return pinned


def admitted(
    filter: pc.Expression, schema: pa.Schema, guarantees: Sequence[pc.Expression]
) -> set[int]:
    """The positions of the ``guarantees`` under which pyarrow cannot rule ``filter`` out:
    each is simplified against it as a fragment's partition expression, of fragments that
    are never opened (the paths name no file)."""
    import pyarrow.dataset as ds  # noqa: PLC0415 - it imports pandas: loaded only when used

    candidates = ds.FileSystemDataset.from_paths(
        [f"lakelock-prune/{n}" for n in range(len(guarantees))],
        schema=schema,
        format=ds.ParquetFileFormat(),
        filesystem=fs.LocalFileSystem(),
        partitions=list(guarantees),
    )
    return {
        int(fragment.path.rsplit("/", 1)[1]) for fragment in candidates.get_fragments(filter=filter)
    }


def _spelled(columns: Sequence[str], values: Sequence[pa.Scalar]) -> pc.Expression:
    """What a partition with these values guarantees of its rows."""
    expression = pc.scalar(True)
    for column, value in zip(columns, values, strict=True):
        field = pc.field(column)
        expression = expression & (field == value if value.is_valid else field.is_null())
    return expression


def _unique_spelling(type_: pa.DataType) -> bool:
    """Types whose every value has exactly one spelling in a partition path (a decimal or
    timestamp may be spelled with more or fewer trailing zeros): a path looked up by value
    finds the partition however it was written."""
    return bool(
        pa.types.is_boolean(type_)
        or pa.types.is_integer(type_)
        or pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_date(type_)
    )


def _typed(value: object, type_: pa.DataType) -> Any:
    """``value`` as a Python value of ``type_`` when it is one exactly, else ``None``."""
    if value is None or isinstance(value, bool) != pa.types.is_boolean(type_):
        return None
    try:
        scalar = pa.scalar(value, type_)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    python = scalar.as_py()
    return python if python == value else None


def _literals(filter: pc.Expression) -> Iterator[object]:
    """Every literal ``filter`` carries, loosely: the scalars and the options' values (an
    ``isin``'s value set among them) of the Arrow IPC file pyarrow pickles an expression as.
    Extra values are harmless (:func:`_pinned` proves what it keeps)."""
    _, (buffer,) = filter.__reduce__()
    table = pa.ipc.open_file(pa.py_buffer(buffer)).read_all()
    for column in table.columns:
        for value in column.to_pylist():
            yield from _leaves(value)


def _leaves(value: object) -> Iterator[object]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key != "_type_name":
                yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value
