"""Names and paths in the lake: pure validation and formatting, no I/O.

Names become parts of keys (the layout is in :mod:`lakelock._layout`)::

    datasets/<dataset>/<col>=<value>/<col>=<value>/.../<file name>
    datasets/<dataset>/<file name>                      (unpartitioned)
    metastore/leases/<lease name>.json

Every name is checked before anything is written; a bad one raises
:class:`~lakelock.errors.InvalidNameError` (a ``ValueError``) naming the rule it broke.

=================  ========================================================================
name               rule
=================  ========================================================================
dataset name,      one path segment: Unicode letters and digits, combining marks, ``_``,
file name          ``-`` and ``.``; starts with a letter or digit (so never ``.``/``..``,
                   never hidden: Hive, Spark and pyarrow skip ``_``/``.``-prefixed names
                   such as ``_SUCCESS``); at most 255 UTF-8 bytes (a file-system segment).
                   Normalised to Unicode NFC, so names that look the same are the same;
                   callers must use the returned name. Case-sensitive.
partition column   non-empty, no control characters, none of the characters Hive escapes
                   (``" # % ' * / : = ? \\ { [ ] ^``), not starting with ``.`` or ``_``
                   (pyarrow's discovery skips such directories). Column names are never
                   escaped, so they appear verbatim in keys.
partition value    any Unicode text except: empty (Hive folds ``""`` into the null
                   partition, so it cannot round-trip), control characters (category Cc:
                   C0, DEL, C1), text that is not UTF-8 encodable (lone surrogates), and
                   the literal null marker. ``.``, ``..`` and ``/`` are fine: a value is
                   always behind ``col=`` and ``/`` is escaped. Rows written are in
                   Unicode NFC, never normalised (their spelling is data): another
                   spelling would be another partition; it is refused.
column names      non-empty in the tables lakelock writes and the schemas a commit declares
of a dataset       (DuckDB and Polars cannot read a column named ``""``:
                   :class:`~lakelock.errors.InvalidNameError`);
                   unique within a dataset ignoring case (``casefold``), partition columns
                   included: DuckDB, Spark, Delta and Iceberg readers resolve column names
                   ignoring case, so ``Day`` beside ``day`` would read wrong. A clash is a
                   :class:`~lakelock.errors.SchemaMismatchError` (:func:`clashing_names`).
lease name         non-empty, no ``/``, no control characters (category Cc: C0, DEL, C1),
                   valid UTF-8. Normalised to NFC as dataset names are: one lease however
                   it is spelt.
commit id          non-empty printable text (``str.isprintable``), at most 256 UTF-8 bytes:
                   the root keeps its last 100 ids, so one id's size is each root's cost.
                   Unicode NFC, never normalised: ids are stored as given, so another
                   spelling would be another commit of the same rows; it is refused.
                   Not a name: :class:`~lakelock.errors.InvalidArgumentError`.
whole key          at most 1024 UTF-8 bytes including the lake prefix (S3's limit;
                   checked where the key is built, :mod:`lakelock._layout`).
bucket             S3's naming rules: 3-63 characters of ``a-z``, ``0-9``, ``.`` and ``-``,
                   starting and ending with a letter or digit, no ``..``, not an IPv4
                   address. (Checked before any request, so a typo is an error at once.)
lake URL           ``s3://<bucket>[/<prefix>]``; the prefix is relative (``a/b``, no empty
                   segment) and always used with a trailing ``/``.
=================  ========================================================================

Relaxing a rule later is compatible with every lake written before; tightening one is not,
hence the conservative choices.

**Escaping.** A partition value is percent-escaped exactly as Hive (and Spark) escape path
names: each character of ``" # % ' * / : = ? \\ { [ ] ^``, DEL and U+0001-U+001F becomes
``%XX`` (uppercase hex); everything else, spaces and non-ASCII included, stays as is. Hive,
Spark and pyarrow (``partitioning(flavor="hive")``, which URI-decodes) all read these paths
back to the same value; in particular ``+`` is never decoded as a space. Reading accepts any
``%XX`` (upper or lower case, UTF-8 sequences such as ``%C3%A9`` as pyarrow writes them) but
rejects a ``%`` not followed by two hex digits; :func:`validate_partition_path` returns the
canonical (Hive-escaped) form, which is what the registry files partitions under.

**Nulls.** A null partition value is written as ``__HIVE_DEFAULT_PARTITION__``
(:data:`NULL_PARTITION`), as Hive, Spark and pyarrow do; the string itself is therefore not
a valid value.

**Value formats** (stable: one value of one type has exactly one spelling):

=================  ========================================================================
Arrow type         spelling
=================  ========================================================================
bool               ``true`` / ``false``
int8 ... uint64    decimal, ``-`` for negatives, no leading zeros
string, large_     as is
string, string_view
date32, date64     ISO ``YYYY-MM-DD`` (years 0001-9999); a date64 must fall on midnight
timestamp          ISO-8601 ``YYYY-MM-DDTHH:MM:SS[.f]``: the fraction has trailing zeros
                   dropped (so one instant has one spelling in every unit, up to ns); a
                   time zone-aware type is written in UTC with a ``Z`` suffix, a naive one
                   without suffix. ``:`` is escaped in the key (``%3A``), as Hive does.
decimal            fixed-point at the type's scale (``1.10`` for ``decimal128(5, 2)``)
null               always the null marker
dictionary         as its value type
=================  ========================================================================

Floating-point columns cannot be partition columns: equal-looking values are not equal
(``0.1 + 0.2``, ``-0.0``, NaN), and engines spell the same double differently (Hive
``1.0E10``, pyarrow ``1e+10``), so one value could land in two directories. Partition by an
integer, decimal or string column instead. Binary, time, duration, interval, nested and
extension types are refused too.
"""

from __future__ import annotations

import re
import unicodedata
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence, Set
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from lakelock._datafile import Partition
from lakelock.errors import InvalidArgumentError, InvalidNameError

__all__ = [
    "MAX_COMMIT_ID_BYTES",
    "MAX_SEGMENT_BYTES",
    "NULL_PARTITION",
    "PartitionSpec",
    "clashing_names",
    "escape_partition_value",
    "format_partition_value",
    "named_partition",
    "parse_lake_url",
    "parse_partition_path",
    "parse_partition_value",
    "partition_columns",
    "partition_path",
    "partition_prefix",
    "require_named_columns",
    "unescape_partition_value",
    "validate_bucket_name",
    "validate_column_name",
    "validate_commit_id",
    "validate_dataset_name",
    "validate_file_name",
    "validate_lake_prefix",
    "validate_lease_name",
    "validate_namespace",
    "validate_partition_path",
    "validate_partition_type",
    "written_partition_path",
    "written_partition_value",
]

#: How a null partition value is spelled in a key (Hive's default partition name).
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: A partition (or a leading part of one) as a path or a column -> value mapping.
PartitionSpec = str | Mapping[str, object]
#: Limit on a dataset or file name, in UTF-8 bytes (a segment on common file systems).
MAX_SEGMENT_BYTES = 255

# Hive's FileUtils.escapePathName set on Unix (Spark's ExternalCatalogUtils is the same).
_HIVE_ESCAPED = frozenset("\"#%'*/:=?\\{[]^\x7f") | frozenset(map(chr, range(0x01, 0x20)))
_NAME_PUNCTUATION = frozenset("_-.")
_ESCAPED_TEXT = re.compile(r"(?:[^%]|%[0-9A-Fa-f]{2})*")
_INTEGER = re.compile(r"0|-?[1-9][0-9]*")
_DECIMAL = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIMESTAMP = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?(Z?)"
)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IPV4 = re.compile(r"[0-9]+(?:\.[0-9]+){3}")
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_MS_PER_DAY = 86_400_000
_EPOCH = date(1970, 1, 1)
_EPOCH_ORDINAL = _EPOCH.toordinal()
_MAX_ORDINAL = date.max.toordinal()
_SUPPORTED_TYPES = (
    "bool, integers, string, large_string, string_view, date32, date64, timestamp, "
    "decimal, null, or a dictionary of one of these"
)


# -- names ------------------------------------------------------------------------------------


def validate_dataset_name(name: object) -> str:
    """The dataset name, NFC-normalised, or :class:`InvalidNameError` (module docstring)."""
    return _segment_name(name, "dataset name")


def validate_file_name(name: object) -> str:
    """A caller-given data file name, NFC-normalised; the same rules as dataset names."""
    return _segment_name(name, "file name")


def validate_lease_name(name: str) -> str:
    """``name``, NFC-normalised, if it can name a lease: non-empty, no ``/``, no control
    characters, UTF-8 (module docstring)."""
    if not isinstance(name, str):
        raise TypeError(f"a lease name is a str, not {type(name).__name__}")
    if not name:
        raise InvalidNameError(name, "a lease name may not be empty")
    if "/" in name:
        raise InvalidNameError(name, "a lease name may not contain '/'")
    # Category Cc: C0, DEL and C1 alike (U+009B starts a terminal's control sequence, U+0085
    # breaks a line), as for partition values: the name is printed by ``lakelock locks``.
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise InvalidNameError(name, "a lease name may not contain control characters")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidNameError(name, "a lease name must be valid UTF-8") from error
    # As a dataset name: two spellings of one name are one lease, one key and one fence.
    return unicodedata.normalize("NFC", name)


def validate_column_name(name: object) -> str:
    """A column name usable for partitioning, returned unchanged (it must match the table's
    column exactly, so it is never normalised)."""
    text = _text(name, "column name")
    if text[0] in "._":
        raise InvalidNameError(
            name, "partition column names must not start with '.' or '_' (readers skip them)"
        )
    escaped = sorted({c for c in text if c in _HIVE_ESCAPED})
    if escaped:
        raise InvalidNameError(
            name, f"partition column names must not contain {''.join(escaped)!r}"
        )
    return text


#: The longest commit id, in UTF-8 bytes (module docstring).
MAX_COMMIT_ID_BYTES = 256


def validate_commit_id(commit_id: object) -> str:
    """A caller's commit id, unchanged, or :class:`InvalidArgumentError` (module
    docstring)."""
    if not isinstance(commit_id, str):
        raise InvalidArgumentError(
            commit_id, f"a commit id is a str, not {type(commit_id).__name__}"
        )
    if not commit_id:
        raise InvalidArgumentError(commit_id, "a commit id must not be empty")
    if not commit_id.isprintable():
        raise InvalidArgumentError(commit_id, "a commit id is printable text")
    try:
        size = len(commit_id.encode())
    except UnicodeEncodeError as error:
        raise InvalidArgumentError(commit_id, "a commit id must be UTF-8 encodable") from error
    if size > MAX_COMMIT_ID_BYTES:
        raise InvalidArgumentError(
            commit_id, f"a commit id is at most {MAX_COMMIT_ID_BYTES} bytes, not {size:,}"
        )
    if not unicodedata.is_normalized("NFC", commit_id):
        # Ids are stored as given, so a second spelling of one id (a file name read on macOS,
        # decomposed, and on Linux, composed) would be a second commit of the same rows.
        # The two spellings print the same: their escapes show where they differ.
        nfc = unicodedata.normalize("NFC", commit_id)
        raise InvalidArgumentError(
            commit_id,
            f"a commit id is Unicode NFC text: this one is {commit_id!a}, its NFC "
            f"spelling {nfc!r}, that is {nfc!a} (unicodedata.normalize('NFC', commit_id))",
        )
    return commit_id


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate): what JSON documents hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def require_named_columns(names: Iterable[str], *, of: str) -> None:
    """Refuse a column named ``""`` among ``names`` (the columns of a table, or of a
    schema a commit declares: ``of``) with :class:`InvalidNameError`: engines name
    columns in SQL or by expression, DuckDB and Polars cannot read one without a name, and
    a column stays in the dataset's schema for good."""
    if "" in names:
        raise InvalidNameError("", f"every column of the {of} needs a name")


def clashing_names(names: Iterable[str]) -> tuple[str, str] | None:
    """The first two of ``names`` that are the same name ignoring case (or the same name
    twice), or ``None``: a dataset's columns must be unique ignoring case (module docstring)."""
    seen: dict[str, str] = {}
    for name in names:
        folded = name.casefold()
        if folded in seen:
            return seen[folded], name
        seen[folded] = name
    return None


def validate_bucket_name(name: object) -> str:
    """An S3 bucket name, unchanged, or :class:`InvalidNameError` (module docstring)."""
    text = _text(name, "bucket name")
    if not _BUCKET.fullmatch(text):
        raise InvalidNameError(
            name,
            "a bucket name is 3-63 characters of a-z, 0-9, '.' and '-', starting and ending "
            "with a letter or digit",
        )
    if ".." in text or _IPV4.fullmatch(text):
        raise InvalidNameError(name, "a bucket name has no '..' and is not an IP address")
    return text


def validate_namespace(name: object) -> str:
    """The catalog's Iceberg namespace, unchanged, or :class:`InvalidNameError`. The catalog
    serves one namespace of one level, and REST clients (Spark, Trino, PyIceberg) read a
    ``.`` in a table identifier as a level separator: ``a.b.sales`` is table ``sales`` of
    namespace ``("a", "b")``, which this catalog would never serve."""
    text = _text(name, "namespace")
    if "." in text:
        raise InvalidNameError(
            name,
            "a namespace is one level, with no '.': clients read 'a.b' as the two levels "
            "'a' and 'b'",
            what="namespace",
        )
    return text


def parse_lake_url(url: object, *, bare_bucket: bool = False) -> tuple[str, str]:
    """``s3://bucket[/prefix]`` as ``(bucket, prefix)``, the prefix empty or ending with
    ``/``; with ``bare_bucket`` a plain ``bucket[/prefix]`` is accepted too."""
    text = _text(url, "lake URL")
    if bare_bucket and "://" not in text and ":" not in text:
        text = f"s3://{text}"
    parts = urllib.parse.urlsplit(text)
    if (
        parts.scheme != "s3"
        or not text.startswith("s3://")
        or not parts.netloc
        or parts.query
        or parts.fragment
    ):
        raise InvalidNameError(url, "expected s3://bucket[/prefix]")
    bucket = validate_bucket_name(parts.netloc)
    return bucket, validate_lake_prefix(parts.path.removeprefix("/"))


def validate_lake_prefix(prefix: str) -> str:
    """A lake prefix, empty or ending with ``/``: relative, no empty segment."""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if prefix.startswith("/") or "//" in prefix:
        raise InvalidNameError(prefix, "a lake prefix is relative and has no empty segment")
    return prefix


def _segment_name(name: object, what: str) -> str:
    text = _text(name, what)
    text = unicodedata.normalize("NFC", text)
    if not unicodedata.category(text[0]).startswith(("L", "N")):
        raise InvalidNameError(name, f"a {what} must start with a letter or digit")
    for char in text:
        if char not in _NAME_PUNCTUATION and not unicodedata.category(char).startswith(
            ("L", "M", "N")
        ):
            raise InvalidNameError(
                name, f"a {what} may contain only letters, digits, '_', '-' and '.': {char!r}"
            )
    size = len(text.encode("utf-8"))
    if size > MAX_SEGMENT_BYTES:
        raise InvalidNameError(name, f"a {what} is at most {MAX_SEGMENT_BYTES} bytes, not {size}")
    return text


def _text(value: object, what: str) -> str:
    """``value`` as a non-empty, UTF-8 encodable string without control characters."""
    if not isinstance(value, str):
        raise InvalidNameError(value, f"a {what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidNameError(value, f"a {what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidNameError(value, f"a {what} must be UTF-8 encodable") from error
    for char in value:
        if unicodedata.category(char) == "Cc":
            raise InvalidNameError(value, f"a {what} must not contain control character {char!r}")
    return value


# -- partition values -------------------------------------------------------------------------


def validate_partition_type(column: str, type_: Any) -> None:
    """Refuse (InvalidNameError naming ``column``) an Arrow type that cannot partition."""
    problem = _type_problem(type_)
    if problem is not None:
        raise InvalidNameError(column, problem)


def _type_problem(type_: Any) -> str | None:
    value_type = type_.value_type if pa.types.is_dictionary(type_) else type_
    if pa.types.is_floating(value_type):
        return (
            f"a floating-point column ({type_}) cannot be a partition column: its values make "
            "unstable keys; partition by an integer, decimal or string column instead"
        )
    if not _is_partition_value_type(value_type):
        return f"type {type_} cannot be a partition column; supported: {_SUPPORTED_TYPES}"
    return None


def _is_partition_value_type(type_: Any) -> bool:
    is_string_view = getattr(pa.types, "is_string_view", lambda _: False)
    return bool(
        pa.types.is_null(type_)
        or pa.types.is_boolean(type_)
        or pa.types.is_integer(type_)
        or pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or is_string_view(type_)
        or pa.types.is_date(type_)
        or pa.types.is_timestamp(type_)
        or pa.types.is_decimal(type_)
    )


def format_partition_value(value: object) -> str | None:
    """The spelling of one partition value (unescaped), ``None`` for null.

    Takes Arrow scalars (exact to the nanosecond) and plain Python values: ``None``,
    ``bool``, ``int``, ``str``, ``Decimal``, ``datetime`` (aware: converted to UTC),
    ``date``. Floats and other types raise :class:`InvalidNameError`.
    """
    if value is None:
        return None
    if isinstance(value, pa.Scalar):
        return _format_scalar(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _check_value(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidNameError(value, "a decimal partition value must be finite")
        return format(value, "f")
    if isinstance(value, datetime):
        if value.utcoffset() is not None:
            micros = (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
            return _format_timestamp(micros, "us", aware=True)
        micros = (value - datetime(1970, 1, 1)) // timedelta(microseconds=1)
        return _format_timestamp(micros, "us", aware=False)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float):
        raise InvalidNameError(value, "floating-point values cannot be partition values")
    raise InvalidNameError(value, f"{type(value).__name__} cannot be a partition value")


def _format_scalar(scalar: Any) -> str | None:
    type_ = scalar.type
    problem = _type_problem(type_)
    if problem is not None:
        raise InvalidNameError(scalar, problem)
    if not scalar.is_valid:
        return None
    if pa.types.is_dictionary(type_):
        return _format_scalar(scalar.value)
    if pa.types.is_boolean(type_):
        return "true" if scalar.as_py() else "false"
    if pa.types.is_integer(type_):
        return str(scalar.as_py())
    if pa.types.is_date32(type_):
        return _format_days(int(scalar.value))
    if pa.types.is_date64(type_):
        days, remainder = divmod(int(scalar.value), _MS_PER_DAY)
        if remainder:
            raise InvalidNameError(scalar, "a date64 partition value must fall on midnight")
        return _format_days(days)
    if pa.types.is_timestamp(type_):
        return _format_timestamp(int(scalar.value), type_.unit, aware=type_.tz is not None)
    if pa.types.is_decimal(type_):
        return format(scalar.as_py(), "f")
    return _check_value(scalar.as_py())  # the string types


def _check_value(text: object) -> str:
    """A string partition value that can round-trip through a key, or InvalidNameError."""
    value = _text(text, "partition value")
    if value == NULL_PARTITION:
        raise InvalidNameError(text, f"{NULL_PARTITION} is reserved for null values")
    return value


def written_partition_value(column: str, text: str | None) -> str | None:
    """A partition value of rows being written (as :func:`format_partition_value` spells
    it), if in Unicode NFC, else :class:`InvalidNameError` showing both spellings escaped.
    Keys hold a value as spelt, so "é" composed and decomposed (a name read on macOS) would
    be two partitions of one value: an overwrite of one would leave the other's rows. Paths
    given to read, overwrite or delete are not checked: a partition written so before stays
    reachable by its spelling."""
    if text is None or unicodedata.is_normalized("NFC", text):
        return text
    nfc = unicodedata.normalize("NFC", text)
    raise InvalidNameError(
        text,
        f"a partition value written is Unicode NFC text (another spelling would be another "
        f"partition): column {column!r} holds {text!a}, its NFC spelling {nfc!r}, that is "
        f"{nfc!a} (pyarrow.compute.utf8_normalize(column, 'NFC'))",
    )


def written_partition_path(path: str) -> str:
    """``path``, a partition new to a dataset, if every value it names is spelt as rows
    written are (:func:`written_partition_value`: Unicode NFC), else that
    :class:`InvalidNameError`: a file another tool wrote there would make a second partition
    of a value the dataset spells otherwise."""
    for column, value in parse_partition_path(path):
        written_partition_value(column, value)
    return path


def _format_days(days: int) -> str:
    ordinal = _EPOCH_ORDINAL + days
    if not 1 <= ordinal <= _MAX_ORDINAL:
        raise InvalidNameError(days, "dates in partition values must be in years 0001-9999")
    return date.fromordinal(ordinal).isoformat()


def _format_timestamp(value: int, unit: str, *, aware: bool) -> str:
    per_second = _PER_SECOND[unit]
    seconds, fraction = divmod(value, per_second)  # floor: the fraction is never negative
    days, second_of_day = divmod(seconds, 86_400)
    hours, rest = divmod(second_of_day, 3600)
    minutes, secs = divmod(rest, 60)
    digits = len(str(per_second)) - 1
    text = f"{_format_days(days)}T{hours:02d}:{minutes:02d}:{secs:02d}"
    if fraction:
        text += "." + f"{fraction:0{digits}d}".rstrip("0")
    return text + ("Z" if aware else "")


def parse_partition_value(text: str | None, type_: Any) -> Any:
    """The Arrow scalar of type ``type_`` that :func:`format_partition_value` spelled as
    ``text`` (its exact inverse); for a dictionary type, a scalar of its value type.
    A spelling that does not fit the type raises :class:`InvalidNameError`."""
    problem = _type_problem(type_)
    if problem is not None:
        raise InvalidNameError(text, problem)
    if pa.types.is_dictionary(type_):
        return parse_partition_value(text, type_.value_type)
    if text is None:
        return pa.scalar(None, type_)
    try:
        return pa.scalar(_parse_python(text, type_), type_)
    except (pa.ArrowInvalid, OverflowError, ValueError) as error:
        if isinstance(error, InvalidNameError):
            raise
        raise InvalidNameError(text, f"not a valid {type_} partition value: {error}") from error


def _parse_python(text: str, type_: Any) -> object:
    """The Python (or raw integer) value for ``pa.scalar(..., type_)``."""
    if pa.types.is_null(type_):
        raise InvalidNameError(text, "a null-typed partition column holds only nulls")
    if pa.types.is_boolean(type_):
        if text not in ("true", "false"):
            raise InvalidNameError(text, "a bool partition value is 'true' or 'false'")
        return text == "true"
    if pa.types.is_integer(type_):
        if not _INTEGER.fullmatch(text):
            raise InvalidNameError(text, "not a canonical integer")
        return int(text)
    if pa.types.is_decimal(type_):
        if not _DECIMAL.fullmatch(text):
            raise InvalidNameError(text, "not a fixed-point decimal")
        return Decimal(text)
    if pa.types.is_date(type_):
        days = _parse_days(text)
        return days * _MS_PER_DAY if pa.types.is_date64(type_) else days
    if pa.types.is_timestamp(type_):
        return _parse_timestamp(text, type_.unit, aware=type_.tz is not None)
    return _check_value(text)  # the string types


def _parse_days(text: str) -> int:
    match = _DATE.fullmatch(text)
    if match is None:
        raise InvalidNameError(text, "a date partition value is YYYY-MM-DD")
    year, month, day = map(int, match.groups())
    try:
        parsed = date(year, month, day)
    except ValueError as error:
        raise InvalidNameError(text, f"not a date: {error}") from error
    return parsed.toordinal() - _EPOCH_ORDINAL


def _parse_timestamp(text: str, unit: str, *, aware: bool) -> int:
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise InvalidNameError(text, "a timestamp partition value is YYYY-MM-DDTHH:MM:SS[.f]")
    day, hours, minutes, secs, fraction, zone = match.groups()
    if bool(zone) != aware:
        expected = "with" if aware else "without"
        raise InvalidNameError(text, f"a {unit} timestamp of this type is written {expected} Z")
    if int(hours) > 23 or int(minutes) > 59 or int(secs) > 59:
        raise InvalidNameError(text, "not a time of day")
    per_second = _PER_SECOND[unit]
    digits = len(str(per_second)) - 1
    fraction = fraction or ""
    if len(fraction.rstrip("0")) > digits:
        raise InvalidNameError(text, f"more fractional digits than a {unit} timestamp holds")
    seconds = _parse_days(day) * 86_400 + int(hours) * 3600 + int(minutes) * 60 + int(secs)
    return seconds * per_second + int((fraction + "0" * digits)[:digits] or "0")


# -- partition paths --------------------------------------------------------------------------


def partition_path(columns_and_values: Iterable[tuple[str, object]]) -> str:
    """The Hive-style path ``col=value/...`` (no slashes at either end; ``""`` for none).

    Values are formatted with :func:`format_partition_value` (strings are taken as already
    formatted), escaped as Hive does, ``None`` spelled :data:`NULL_PARTITION`.
    """
    segments = []
    seen: set[str] = set()
    for column, value in columns_and_values:
        name = validate_column_name(column)
        if name in seen:
            raise InvalidNameError(column, "partition column appears twice")
        seen.add(name)
        text = format_partition_value(value)
        escaped = NULL_PARTITION if text is None else escape_partition_value(text)
        segments.append(f"{name}={escaped}")
    return "/".join(segments)


def parse_partition_path(path: str) -> Partition:
    """``((column, value or None), ...)`` from ``col=value/...``: the exact inverse of
    :func:`partition_path` on formatted values. A single trailing ``/`` is allowed."""
    if not isinstance(path, str):
        raise InvalidNameError(path, f"a partition path must be a str, not {type(path).__name__}")
    text = (_text(path, "partition path") if path else "").removesuffix("/")
    if not text:
        return ()
    result: list[tuple[str, str | None]] = []
    for segment in text.split("/"):
        column, equals, escaped = segment.partition("=")
        if not equals:
            raise InvalidNameError(path, f"segment {segment!r} is not col=value")
        try:
            if escaped == NULL_PARTITION:
                value = None
            else:
                value = _check_value(unescape_partition_value(escaped))
        except InvalidNameError as error:
            raise InvalidNameError(path, f"segment {segment!r}: {error.reason}") from error
        result.append((column, value))
    # Re-checks the column names and duplicates.
    partition_path(result)
    return tuple(result)


def validate_partition_path(path: str) -> str:
    """The canonical form of a partition path (Hive escaping, no trailing slash), for copy,
    rename and the registry; raises :class:`InvalidNameError` for anything malformed."""
    return partition_path(parse_partition_path(path))


def partition_columns(partition_by: str | Sequence[str] | None) -> tuple[str, ...]:
    """The partition columns as a tuple; one name alone (a ``str``) is that one column, and
    ``None`` (as ``()``) is none: not partitioned. Anything else that is no sequence of
    names is :class:`~lakelock.errors.InvalidArgumentError`, a set among them: the columns'
    order is the partitions' paths, and a set's differs between processes."""
    if partition_by is None:
        return ()
    if isinstance(partition_by, str):
        return (partition_by,)
    unordered = isinstance(partition_by, Set)
    if unordered or isinstance(partition_by, Mapping) or not isinstance(partition_by, Iterable):
        raise InvalidArgumentError(
            partition_by,
            "partition_by is a column name, a sequence of them (in the paths' order: "
            + ("a set has none, " if unordered else "")
            + "a list or a tuple), or None (not partitioned)",
            what="partition_by",
        )
    return tuple(partition_by)


def named_partition(columns: Sequence[str], spec: PartitionSpec) -> str:
    """A whole partition of a dataset partitioned by ``columns``: a path (checked and made
    canonical) or a mapping naming every column, in that order."""
    if isinstance(spec, str):
        return validate_partition_path(spec)
    if list(spec) != list(columns):
        raise InvalidNameError(
            spec, f"a partition names the columns {list(columns)}, in that order"
        )
    return partition_path(spec.items())


def partition_prefix(columns: Sequence[str], spec: PartitionSpec) -> str:
    """A partition path, or a leading part of one, naming ``columns`` in order (as a path or
    a mapping): ``"year=2024"`` or ``{"year": 2024}`` covers every month of 2024."""
    if isinstance(spec, str):
        path = validate_partition_path(spec)
        named = [column for column, _ in parse_partition_path(path)]
    else:
        named = list(spec)
        path = partition_path(spec.items())
    if not named or named != list(columns[: len(named)]):
        raise InvalidNameError(
            spec, f"a partition names the columns {list(columns)} in that order, or the first few"
        )
    return path


def escape_partition_value(text: str) -> str:
    """``text`` escaped as Hive escapes a partition value in a path (module docstring)."""
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in text)


def unescape_partition_value(text: str) -> str:
    """``text``, a partition value as a path spells it, decoded from Hive's escapes; a bad
    ``%`` escape or escapes that are not UTF-8 are :class:`~lakelock.errors.InvalidNameError`."""
    if not _ESCAPED_TEXT.fullmatch(text):
        raise InvalidNameError(text, "'%' must be followed by two hex digits")
    try:
        return urllib.parse.unquote_to_bytes(text).decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidNameError(text, "escapes do not decode as UTF-8") from error
