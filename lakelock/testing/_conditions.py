"""S3's request conditions as pure functions, for the gateway to evaluate under its key locks.

The gateway checks here what moto ignores or gets wrong, with the object's state read under
the key lock, so a check and the write it guards are one atomic step:

- **Copy-source conditions** on ``CopyObject`` and ``UploadPartCopy``
  (``x-amz-copy-source-if-match``, ``-if-none-match``, ``-if-modified-since``,
  ``-if-unmodified-since``), evaluated as S3 documents them (RFC 7232's order): an
  ``if-match`` that holds overrides a failing ``if-unmodified-since``; an ``if-none-match``
  that fails answers 412 whatever ``if-modified-since`` says; a failing condition is always
  ``412 PreconditionFailed`` (a copy has no 304). A modified-since date in the future is
  ignored (RFC 7232 §3.3: it is invalid), as S3 does. An unparsable date is refused (400):
  ignoring it would weaken the request.
- **``If-Match: *``** on a delete (the object exists) and lists of ETags, which moto
  compares as one literal ETag. (S3's writes refuse ``If-Match: *``: 501, see the gateway.)
- **Delete conditions.** ``If-Match`` and ``x-amz-if-match-size`` (``Size`` per entry of
  ``DeleteObjects``) are checked. ``x-amz-if-match-last-modified-time`` (``LastModifiedTime``
  per entry) is answered ``501 NotImplemented``: S3 compares it at a precision it does not
  document, and a comparison coarser than S3's would delete what S3 would keep. Conditions on
  a delete of one *version* are 501 too (S3 evaluates conditions against the current version
  only). A store must refuse what it cannot check, never weaken it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "BadCondition",
    "CopySource",
    "DeleteEntry",
    "ObjectState",
    "copy_source_failure",
    "delete_entries",
    "delete_unsupported",
    "entry_of",
    "etag_matches",
    "parse_copy_source",
    "size_condition",
]

#: Copy-source condition headers, in the order S3 names them in a 412.
COPY_SOURCE_IF_MATCH = "x-amz-copy-source-if-match"
COPY_SOURCE_IF_NONE_MATCH = "x-amz-copy-source-if-none-match"
COPY_SOURCE_IF_MODIFIED_SINCE = "x-amz-copy-source-if-modified-since"
COPY_SOURCE_IF_UNMODIFIED_SINCE = "x-amz-copy-source-if-unmodified-since"
IF_MATCH_SIZE = "x-amz-if-match-size"
IF_MATCH_LAST_MODIFIED_TIME = "x-amz-if-match-last-modified-time"


class BadCondition(ValueError):
    """A condition header that cannot be evaluated as written (S3: 400 InvalidArgument)."""


@dataclass(frozen=True, slots=True)
class ObjectState:
    """What the conditions are evaluated against: the object as moto has it now."""

    etag: str
    size: int
    last_modified: datetime


@dataclass(frozen=True)
class CopySource:
    bucket: str
    key: str
    version_id: str | None = None


@dataclass(frozen=True)
class DeleteEntry:
    """One ``<Object>`` of a DeleteObjects request."""

    key: str
    etag: str | None = None
    size: str | None = None
    version_id: str | None = None
    last_modified_time: str | None = None


def _strip(etag: str) -> str:
    return etag.strip().removeprefix("W/").strip('"')


def etag_matches(condition: str, etag: str | None) -> bool:
    """Whether an ``If-Match``-style value (``*``, one ETag or a comma-separated list, quoted
    or not) matches an object with ``etag`` (``None``: no object)."""
    if etag is None:
        return False
    candidates = [c.strip() for c in condition.split(",")]
    return "*" in candidates or _strip(etag) in {_strip(c) for c in candidates}


def parse_copy_source(header: str) -> CopySource | None:
    """``x-amz-copy-source`` (``[/]bucket/key[?versionId=...]``, URL-encoded) as moto reads
    it; ``None`` for a form the gateway does not interpret (moto answers those)."""
    parts = urlsplit(header)
    bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
    if not bucket or not key or bucket.startswith("arn:"):
        return None
    version = parse_qs(parts.query).get("versionId", [None])[0]
    return CopySource(bucket, key, version)


def _http_date(headers: Mapping[str, str], name: str) -> datetime | None:
    value = headers.get(name)
    if value is None:
        return None
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        moment = None
    if moment is None or moment.tzinfo is None:
        raise BadCondition(f"{name}: {value!r} is not an HTTP date")
    return moment


def copy_source_failure(
    headers: Mapping[str, str], source: ObjectState, *, now: datetime
) -> str | None:
    """The copy-source condition that fails for ``source`` (its header name), or ``None`` if
    the copy may proceed. Raises :class:`BadCondition` for an unparsable date."""
    if_match = headers.get(COPY_SOURCE_IF_MATCH)
    if_none_match = headers.get(COPY_SOURCE_IF_NONE_MATCH)
    unmodified_since = _http_date(headers, COPY_SOURCE_IF_UNMODIFIED_SINCE)
    modified_since = _http_date(headers, COPY_SOURCE_IF_MODIFIED_SINCE)
    # HTTP dates have whole seconds; so does what a client can learn of Last-Modified.
    changed = source.last_modified.replace(microsecond=0)
    if if_match is not None:
        if not etag_matches(if_match, source.etag):
            return COPY_SOURCE_IF_MATCH
    elif unmodified_since is not None and changed > unmodified_since:
        return COPY_SOURCE_IF_UNMODIFIED_SINCE
    if if_none_match is not None:
        if etag_matches(if_none_match, source.etag):
            return COPY_SOURCE_IF_NONE_MATCH
    elif modified_since is not None and modified_since <= now and changed <= modified_since:
        return COPY_SOURCE_IF_MODIFIED_SINCE
    return None


def size_condition(value: str | None) -> int | None:
    """An ``x-amz-if-match-size`` / ``<Size>`` value; :class:`BadCondition` if not a size."""
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit():
        raise BadCondition(f"size condition {value!r} is not a non-negative integer")
    return int(text)


def delete_unsupported(
    headers: Mapping[str, str], version_id: str | None, entries: Sequence[DeleteEntry] = ()
) -> str | None:
    """Why a delete request carries a condition this endpoint cannot check (answered 501), or
    ``None``. ``entries`` are a DeleteObjects request's objects."""
    if IF_MATCH_LAST_MODIFIED_TIME in headers:
        return f"{IF_MATCH_LAST_MODIFIED_TIME} is not implemented"
    conditional = "if-match" in headers or IF_MATCH_SIZE in headers
    if version_id is not None and conditional:
        return "conditions on a delete of a specific version are not implemented"
    for entry in entries:
        if entry.last_modified_time is not None:
            return f"LastModifiedTime conditions ({entry.key!r}) are not implemented"
        if entry.version_id is not None and (entry.etag is not None or entry.size is not None):
            return (
                f"conditions on a delete of a specific version ({entry.key!r}) are not implemented"
            )
    return None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child_text(element: ET.Element, name: str) -> str | None:
    for child in element:
        if _local(child.tag) == name:
            return child.text
    return None


def entry_of(element: ET.Element) -> DeleteEntry | None:
    """One ``<Object>`` element of a DeleteObjects body; ``None`` for anything else, or an
    object without a key (moto answers the malformed request)."""
    if _local(element.tag) != "Object":
        return None
    key = _child_text(element, "Key")
    if key is None:
        return None
    return DeleteEntry(
        key,
        etag=_child_text(element, "ETag"),
        size=_child_text(element, "Size"),
        version_id=_child_text(element, "VersionId"),
        last_modified_time=_child_text(element, "LastModifiedTime"),
    )


def delete_entries(body: bytes) -> list[DeleteEntry]:
    """The objects of a DeleteObjects request body."""
    return [e for e in map(entry_of, ET.fromstring(body)) if e is not None]
