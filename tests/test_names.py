"""Names, partition value spellings and Hive partition paths: pure functions, every rule."""

from __future__ import annotations

import unicodedata
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakelock._layout import MAX_KEY_BYTES, data_file_key, dataset_prefix, validate_key_length
from lakelock._names import (
    NULL_PARTITION,
    format_partition_value,
    parse_partition_path,
    parse_partition_value,
    partition_path,
    validate_column_name,
    validate_dataset_name,
    validate_file_name,
    validate_partition_path,
    validate_partition_type,
)
from lakelock.errors import InvalidNameError

PROPERTY = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

# -- dataset and file names -------------------------------------------------------------------

SEGMENT_NAMES_OK = [
    "customer_profiles",
    "Sales-2024.v2",
    "0day",
    "données",
    "データ",
    "हिन्दी",  # combining marks after the first letter
    "x" * 255,
]
SEGMENT_NAMES_BAD = {
    "empty": "",
    "dot": ".",
    "dotdot": "..",
    "slash": "a/b",
    "leading-slash": "/a",
    "nul": "a\x00b",
    "newline": "a\nb",
    "del": "a\x7f",
    "c1-control": "a\x85b",
    "hidden-underscore": "_SUCCESS",
    "hidden-dot": ".crc",
    "leading-dash": "-rf",
    "leading-mark": "\u0301a",
    "space": "a b",
    "colon": "a:b",
    "percent": "a%b",
    "equals": "a=b",
    "surrogate": "a\ud800",
    "too-long-ascii": "x" * 256,
    "too-long-utf8": "é" * 128,
    "not-a-str": 5,
    "none": None,
}


@pytest.mark.parametrize("name", SEGMENT_NAMES_OK)
def test_valid_dataset_and_file_names(name: str) -> None:
    """Letters (any script), digits, marks, '_', '-', '.' up to 255 bytes are accepted as is."""
    assert validate_dataset_name(name) == name
    assert validate_file_name(name) == name


@pytest.mark.parametrize("name", SEGMENT_NAMES_BAD.values(), ids=SEGMENT_NAMES_BAD.keys())
def test_invalid_dataset_and_file_names(name: Any) -> None:
    """Each broken rule is an InvalidNameError (a ValueError) carrying the input."""
    for validate in (validate_dataset_name, validate_file_name):
        with pytest.raises(InvalidNameError) as info:
            validate(name)
        assert isinstance(info.value, ValueError)
        assert info.value.value == name
        assert info.value.reason


def test_names_are_nfc_normalised() -> None:
    """A decomposed name is the same dataset as its composed form."""
    decomposed = unicodedata.normalize("NFD", "café")
    assert decomposed != "café"
    assert validate_dataset_name(decomposed) == "café"
    assert validate_file_name(decomposed + ".parquet") == "café.parquet"


# -- column names -----------------------------------------------------------------------------

COLUMNS_BAD = {
    "empty": "",
    "dot": ".",
    "dotdot": "..",
    "underscore": "_date",
    "hidden": ".x",
    "slash": "a/b",
    "equals": "a=b",
    "percent": "a%b",
    "colon": "a:b",
    "hash": "a#b",
    "backslash": "a\\b",
    "control": "a\x01b",
    "c1-control": "a\x9fb",
    "surrogate": "\udc80",
    "not-a-str": 3,
}


@pytest.mark.parametrize("name", ["year", "order date", "Année", "a-b", "a.b", "a+b"])
def test_valid_column_names(name: str) -> None:
    """Column names outside Hive's escape set are used verbatim, never normalised."""
    assert validate_column_name(name) == name


@pytest.mark.parametrize("name", COLUMNS_BAD.values(), ids=COLUMNS_BAD.keys())
def test_invalid_column_names(name: Any) -> None:
    """Column names that would need escaping, look hidden or hold controls are refused."""
    with pytest.raises(InvalidNameError) as info:
        validate_column_name(name)
    assert info.value.value == name


# -- partition types --------------------------------------------------------------------------

TYPES_OK = [
    pa.bool_(),
    pa.int8(),
    pa.uint64(),
    pa.string(),
    pa.large_string(),
    pa.string_view(),
    pa.date32(),
    pa.date64(),
    pa.timestamp("s"),
    pa.timestamp("ns", "UTC"),
    pa.decimal128(10, 2),
    pa.decimal256(40, 5),
    pa.null(),
    pa.dictionary(pa.int8(), pa.string()),
]
TYPES_BAD = [
    pa.float16(),
    pa.float32(),
    pa.float64(),
    pa.dictionary(pa.int8(), pa.float64()),
    pa.binary(),
    pa.large_binary(),
    pa.time32("s"),
    pa.duration("ms"),
    pa.list_(pa.int8()),
    pa.struct([("a", pa.int8())]),
    pa.map_(pa.string(), pa.int8()),
]


@pytest.mark.parametrize("type_", TYPES_OK, ids=str)
def test_partition_types_accepted(type_: Any) -> None:
    """Types with one stable text spelling can partition."""
    validate_partition_type("c", type_)


@pytest.mark.parametrize("type_", TYPES_BAD, ids=str)
def test_partition_types_refused(type_: Any) -> None:
    """Floats, binary, time, duration and nested types cannot partition; the column is named."""
    with pytest.raises(InvalidNameError) as info:
        validate_partition_type("c", type_)
    assert info.value.value == "c"


def test_float_refusal_says_why() -> None:
    """The float refusal is distinguishable (reason), so a caller can suggest another column."""
    with pytest.raises(InvalidNameError) as info:
        validate_partition_type("price", pa.float64())
    assert "floating-point" in info.value.reason


# -- value spellings --------------------------------------------------------------------------

AWARE = timezone(timedelta(hours=2))
SPELLINGS: list[tuple[object, str | None]] = [
    (None, None),
    (pa.scalar(None, pa.int64()), None),
    (pa.scalar(None, pa.null()), None),
    (True, "true"),
    (pa.scalar(False), "false"),
    (7, "7"),
    (-12, "-12"),
    (pa.scalar(-5, pa.int8()), "-5"),
    (pa.scalar(2**64 - 1, pa.uint64()), "18446744073709551615"),
    ("a/b %x", "a/b %x"),
    (pa.scalar("São Paulo", pa.large_string()), "São Paulo"),
    (pa.scalar(".."), ".."),
    (pa.array(["x"]).dictionary_encode()[0], "x"),
    (date(2024, 1, 31), "2024-01-31"),
    (pa.scalar(19723, pa.date32()), "2024-01-01"),
    (pa.scalar(-1, pa.date32()), "1969-12-31"),
    (pa.scalar(19723 * 86_400_000, pa.date64()), "2024-01-01"),
    (pa.scalar(1, pa.timestamp("s")), "1970-01-01T00:00:01"),
    (pa.scalar(1_000, pa.timestamp("ms")), "1970-01-01T00:00:01"),
    (pa.scalar(1_000_000_000, pa.timestamp("ns")), "1970-01-01T00:00:01"),
    (pa.scalar(1_500, pa.timestamp("ms")), "1970-01-01T00:00:01.5"),
    (pa.scalar(1, pa.timestamp("ns")), "1970-01-01T00:00:00.000000001"),
    (pa.scalar(-1, pa.timestamp("ns")), "1969-12-31T23:59:59.999999999"),
    (pa.scalar(0, pa.timestamp("us", "Europe/Paris")), "1970-01-01T00:00:00Z"),
    (datetime(2024, 5, 6, 12, 30, 0, 250_000), "2024-05-06T12:30:00.25"),
    (datetime(2024, 5, 6, 12, 30, tzinfo=AWARE), "2024-05-06T10:30:00Z"),
    (datetime(2024, 5, 6, 12, 30, tzinfo=UTC), "2024-05-06T12:30:00Z"),
    (Decimal("1.50"), "1.50"),
    (Decimal("1E+2"), "100"),
    (pa.scalar(Decimal("1.1"), pa.decimal128(5, 2)), "1.10"),
    (pa.scalar(Decimal("0"), pa.decimal128(20, 10)), "0.0000000000"),
    (pa.scalar(Decimal("-3.5"), pa.decimal256(40, 1)), "-3.5"),
]


@pytest.mark.parametrize(("value", "spelling"), SPELLINGS, ids=[str(s) for _, s in SPELLINGS])
def test_value_spellings(value: object, spelling: str | None) -> None:
    """Each supported value has exactly the documented spelling (unescaped)."""
    assert format_partition_value(value) == spelling


VALUES_BAD = {
    "float": 1.5,
    "nan": float("nan"),
    "float-scalar": pa.scalar(1.0),
    "decimal-nan": Decimal("NaN"),
    "decimal-inf": Decimal("Infinity"),
    "bytes": b"x",
    "binary-scalar": pa.scalar(b"x"),
    "empty": "",
    "nul": "\x00",
    "newline": "a\nb",
    "c1": "\x85",
    "null-marker": NULL_PARTITION,
    "surrogate": "\ud800",
    "date64-not-midnight": pa.scalar(1, pa.date64()),
    "date-past-9999": pa.scalar(3_000_000, pa.date32()),
    "date-before-0001": pa.scalar(-800_000, pa.date32()),
    "timestamp-past-9999": pa.scalar(2**62, pa.timestamp("ms")),
    "object": object(),
}


@pytest.mark.parametrize("value", VALUES_BAD.values(), ids=VALUES_BAD.keys())
def test_unrepresentable_values_are_refused(value: object) -> None:
    """Values with no stable, round-trippable spelling raise InvalidNameError."""
    with pytest.raises(InvalidNameError):
        format_partition_value(value)


ROUND_TRIP = [
    pa.scalar(True),
    pa.scalar(-128, pa.int8()),
    pa.scalar(2**63 - 1, pa.int64()),
    pa.scalar(2**64 - 1, pa.uint64()),
    pa.scalar("a/b=c%d", pa.string()),
    pa.scalar("x", pa.large_string()),
    pa.scalar("x", pa.string_view()),
    pa.scalar(-719162, pa.date32()),  # 0001-01-01
    pa.scalar(2932896, pa.date32()),  # 9999-12-31
    pa.scalar(-86_400_000, pa.date64()),
    pa.scalar(-1, pa.timestamp("ns", "UTC")),
    pa.scalar(123_456_789, pa.timestamp("us")),
    pa.scalar(253402300799, pa.timestamp("s", "Asia/Tokyo")),
    pa.scalar(Decimal("-0.01"), pa.decimal128(3, 2)),
    pa.scalar(Decimal("100"), pa.decimal128(5, -2)),
    pa.scalar(None, pa.string()),
    pa.scalar(None, pa.null()),
]


@pytest.mark.parametrize("scalar", ROUND_TRIP, ids=lambda s: str(s.type))
def test_parse_inverts_format(scalar: Any) -> None:
    """parse_partition_value(format_partition_value(v), type) == v for each type."""
    parsed = parse_partition_value(format_partition_value(scalar), scalar.type)
    assert parsed.type == scalar.type
    assert parsed.equals(scalar)


def test_parse_dictionary_gives_value_type() -> None:
    """A dictionary column's value parses to a scalar of its value type."""
    parsed = parse_partition_value("x", pa.dictionary(pa.int8(), pa.string()))
    assert parsed.equals(pa.scalar("x"))


PARSE_BAD: list[tuple[str, Any]] = [
    ("007", pa.int64()),
    ("-0", pa.int64()),
    ("+5", pa.int64()),
    ("1e3", pa.int64()),
    ("٣", pa.int64()),
    ("300", pa.int8()),
    ("-1", pa.uint8()),
    ("yes", pa.bool_()),
    ("True", pa.bool_()),
    ("2024-02-30", pa.date32()),
    ("2024-1-1", pa.date32()),
    ("2024-01-01T00:00:00", pa.timestamp("us", "UTC")),
    ("2024-01-01T00:00:00Z", pa.timestamp("us")),
    ("2024-01-01 00:00:00", pa.timestamp("us")),
    ("2024-01-01T24:00:00", pa.timestamp("us")),
    ("2024-01-01T00:00:00.5", pa.timestamp("s")),
    ("2024-01-01T00:00:00.0000001", pa.timestamp("us")),
    ("2300-01-01T00:00:00", pa.timestamp("ns")),
    ("1.234", pa.decimal128(5, 2)),
    ("1e2", pa.decimal128(5, 2)),
    ("x", pa.null()),
    ("", pa.string()),
    (NULL_PARTITION, pa.string()),
    ("1.5", pa.float64()),
]


@pytest.mark.parametrize(("text", "type_"), PARSE_BAD, ids=repr)
def test_parse_refuses_what_format_cannot_produce(text: str, type_: Any) -> None:
    """Spellings that are not canonical or do not fit the type raise InvalidNameError."""
    with pytest.raises(InvalidNameError):
        parse_partition_value(text, type_)


UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@PROPERTY
@given(
    unit=st.sampled_from(sorted(UNITS)),
    tz=st.sampled_from([None, "UTC", "America/New_York"]),
    value=st.integers(-(2**63), 2**63 - 1),
)
def test_timestamps_round_trip_or_are_out_of_range(unit: str, tz: str | None, value: int) -> None:
    """Timestamps spell as Python's ISO form and parse back, unless outside years 0001-9999."""
    type_ = pa.timestamp(unit, tz)
    scalar = pa.scalar(value, type_)
    seconds, fraction = divmod(value, UNITS[unit])
    try:
        moment = datetime(1970, 1, 1) + timedelta(seconds=seconds)
    except OverflowError:
        with pytest.raises(InvalidNameError):
            format_partition_value(scalar)
        return
    text = format_partition_value(scalar)
    assert text is not None
    whole, _, frac = text.rstrip("Z").partition(".")
    assert whole == moment.isoformat(timespec="seconds")
    assert int((frac + "000000000")[:9]) * UNITS[unit] // 10**9 == fraction
    assert text.endswith("Z") == (tz is not None)
    assert parse_partition_value(text, type_).equals(scalar)


@PROPERTY
@given(day=st.dates())
def test_dates_round_trip(day: date) -> None:
    """Every date in years 0001-9999 spells as its ISO form, in date32 and date64 alike."""
    days = day.toordinal() - date(1970, 1, 1).toordinal()
    for type_, raw in ((pa.date32(), days), (pa.date64(), days * 86_400_000)):
        scalar = pa.scalar(raw, type_)
        assert format_partition_value(scalar) == day.isoformat()
        assert parse_partition_value(day.isoformat(), type_).equals(scalar)


@PROPERTY
@given(
    type_=st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64()]),
    value=st.integers(-(2**64), 2**64),
)
def test_integers_round_trip(type_: Any, value: int) -> None:
    """Integers spell in decimal and parse back; values that overflow the type are refused."""
    text = format_partition_value(value)
    assert text == str(value)
    try:
        scalar = pa.scalar(value, type_)
    except (OverflowError, pa.ArrowInvalid):
        with pytest.raises(InvalidNameError):
            parse_partition_value(text, type_)
        return
    assert format_partition_value(scalar) == text
    assert parse_partition_value(text, type_).equals(scalar)


@PROPERTY
@given(value=st.decimals(allow_nan=False, allow_infinity=False, places=3, max_value=10**30))
def test_decimals_round_trip(value: Decimal) -> None:
    """A decimal at its type's scale spells fixed-point and parses back."""
    type_ = pa.decimal128(38, 3)
    scalar = pa.scalar(value, type_)
    text = format_partition_value(scalar)
    assert text is not None
    assert Decimal(text) == value
    assert text.count(".") == 1
    assert len(text.partition(".")[2]) == 3
    assert parse_partition_value(text, type_).equals(scalar)


# -- partition paths --------------------------------------------------------------------------


def test_hive_escape_set_exactly() -> None:
    """Exactly Hive's characters are %XX-escaped; '+', spaces and non-ASCII stay as they are."""
    escaped = "\"#%'*/:=?\\{[]^"
    kept = " +~!$&()@,;<>|}`é€😀\u200b"
    assert partition_path([("c", escaped)]) == "c=%22%23%25%27%2A%2F%3A%3D%3F%5C%7B%5B%5D%5E"
    assert partition_path([("c", kept)]) == f"c={kept}"


def test_partition_path_layout() -> None:
    """Columns in order, typed values spelled, nulls as the Hive default partition."""
    path = partition_path(
        [("year", 2024), ("day", date(2024, 1, 2)), ("city", None), ("ts", "12:00")]
    )
    assert path == f"year=2024/day=2024-01-02/city={NULL_PARTITION}/ts=12%3A00"
    assert parse_partition_path(path) == (
        ("year", "2024"),
        ("day", "2024-01-02"),
        ("city", None),
        ("ts", "12:00"),
    )
    assert partition_path([]) == ""
    assert parse_partition_path("") == ()


def test_validate_partition_path_canonicalises() -> None:
    """Lower-case hex, UTF-8 escapes and a trailing slash normalise to the Hive form."""
    assert validate_partition_path("city=S%C3%A3o%20Paulo/") == "city=São Paulo"
    assert validate_partition_path("a=x%2fy/b=1") == "a=x%2Fy/b=1"
    assert validate_partition_path("a=x%2Fy/b=1") == "a=x%2Fy/b=1"
    assert validate_partition_path("") == ""


PATHS_BAD = {
    "no-equals": "a",
    "empty-segment": "a=1//b=2",
    "leading-slash": "/a=1",
    "dotdot-segment": "a=1/../b=2",
    "empty-value": "a=",
    "empty-column": "=1",
    "duplicate-column": "a=1/a=2",
    "bare-percent": "a=50%",
    "bad-hex": "a=%zz",
    "not-utf8": "a=%E9",
    "escaped-control": "a=%00",
    "raw-control": "a=x\ty",
    "escaped-null-marker": "a=%5F%5FHIVE_DEFAULT_PARTITION%5F%5F",
    "hidden-column": "_a=1",
    "escaped-column": "a%3Ab=1",
    "not-a-str": None,
}


@pytest.mark.parametrize("path", PATHS_BAD.values(), ids=PATHS_BAD.keys())
def test_malformed_partition_paths(path: Any) -> None:
    """Malformed or non-invertible partition paths raise InvalidNameError."""
    with pytest.raises(InvalidNameError):
        validate_partition_path(path)


def test_partition_path_refuses_bad_columns_and_values() -> None:
    """partition_path checks names, duplicates and values before building anything."""
    for pairs in ([("_c", "x")], [("c", "")], [("c", "x"), ("c", "y")], [("c", 1.5)]):
        with pytest.raises(InvalidNameError):
            partition_path(pairs)


HIVE = ds.partitioning(pa.schema([("a", pa.string()), ("b", pa.string())]), flavor="hive")


@PROPERTY
@given(a=st.text(max_size=12) | st.none(), b=st.text(max_size=12) | st.none())
def test_any_text_round_trips_or_is_refused(a: str | None, b: str | None) -> None:
    """Any string values round-trip through a path (pyarrow agrees) or are InvalidNameError."""
    try:
        path = partition_path([("a", a), ("b", b)])
    except InvalidNameError:
        refusable = [v for v in (a, b) if v is not None]
        assert any(
            v in ("", NULL_PARTITION) or any(unicodedata.category(c) in ("Cc", "Cs") for c in v)
            for v in refusable
        )
        return
    assert path.count("/") == 1
    assert parse_partition_path(path) == (("a", a), ("b", b))
    assert validate_partition_path(path) == path
    # pyarrow's private helper is the only way to read back what a partitioning parsed.
    assert ds._get_partition_keys(HIVE.parse(path + "/")) == {"a": a, "b": b}


# -- keys -------------------------------------------------------------------------------------


def test_data_file_key_layout() -> None:
    """datasets/<dataset>/<partition>/<name>, partition canonicalised, none when empty."""
    assert dataset_prefix("sales") == "datasets/sales/"
    assert (
        data_file_key("sales", "year=2024/city=a%2fb", "f.parquet")
        == "datasets/sales/year=2024/city=a%2Fb/f.parquet"
    )
    assert data_file_key("sales", "", "f.parquet") == "datasets/sales/f.parquet"
    with pytest.raises(InvalidNameError):
        data_file_key("sales", "", "_SUCCESS")
    with pytest.raises(InvalidNameError):
        data_file_key("../x", "", "f.parquet")


def test_key_limit_counts_utf8_bytes_and_prefix() -> None:
    """A key of exactly 1024 UTF-8 bytes with the prefix passes; one byte more does not."""
    prefix = "lake/"
    head = "datasets/d/c="
    tail = "/f.parquet"
    room = MAX_KEY_BYTES - len(prefix) - len(head) - len(tail)
    value = "é" * (room // 2) + "x" * (room % 2)
    key = data_file_key("d", partition_path([("c", value)]), "f.parquet", prefix=prefix)
    assert len((prefix + key).encode()) == MAX_KEY_BYTES
    with pytest.raises(InvalidNameError) as info:
        data_file_key("d", partition_path([("c", value)]), "f.parquet", prefix=prefix + "x")
    assert info.value.value == key
    with pytest.raises(InvalidNameError):
        validate_key_length("é" * 513)
    assert validate_key_length("x" * 1024) == "x" * 1024
