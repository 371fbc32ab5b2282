"""Acting as a store that lacks a feature (``S3Endpoint.configure(lacking=)``): the request's
conditions of that feature (or ListObjectsV2's ``StartAfter``) are dropped ("ignore") or
answered 501 NotImplemented ("refuse"), so clients can be tested against such stores."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any, Literal, get_args
from urllib.parse import parse_qsl, quote, urlencode

from lakelock.testing._classify import S3Request
from lakelock.testing._conditions import (
    COPY_SOURCE_IF_MATCH,
    COPY_SOURCE_IF_MODIFIED_SINCE,
    COPY_SOURCE_IF_NONE_MATCH,
    COPY_SOURCE_IF_UNMODIFIED_SINCE,
    IF_MATCH_LAST_MODIFIED_TIME,
    IF_MATCH_SIZE,
)
from lakelock.testing._wsgi import Response, local_name, not_implemented, read_body, replace_body

__all__ = ["LACKABLE", "Lackable", "act_lacking"]

#: Features the endpoint can be told to lack.
Lackable = Literal[
    "delete-objects-etag", "delete-if-match", "copy-source-conditions", "list-start-after"
]
LACKABLE: frozenset[str] = frozenset(get_args(Lackable))
#: Which lackable feature each operation's conditions belong to.
_FEATURES: dict[str, str] = {
    "DeleteObject": "delete-if-match",
    "DeleteObjects": "delete-objects-etag",
    "CopyObject": "copy-source-conditions",
    "UploadPartCopy": "copy-source-conditions",
    "ListObjectsV2": "list-start-after",
}
_CONDITION_HEADERS: dict[str, tuple[str, ...]] = {
    "delete-if-match": ("if-match", IF_MATCH_SIZE, IF_MATCH_LAST_MODIFIED_TIME),
    "copy-source-conditions": (
        COPY_SOURCE_IF_MATCH,
        COPY_SOURCE_IF_NONE_MATCH,
        COPY_SOURCE_IF_MODIFIED_SINCE,
        COPY_SOURCE_IF_UNMODIFIED_SINCE,
    ),
}


def act_lacking(
    lacking: Mapping[str, str],
    environ: dict[str, Any],
    request: S3Request,
    headers: Mapping[str, str],
) -> Response | Mapping[str, str]:
    """Act as a store without the features in ``lacking`` (feature -> mode): the request's
    conditions of a lacked feature are dropped ("ignore") or answered 501 ("refuse"). Returns
    the headers the rest of the gateway should see (``environ`` is changed to match)."""
    feature = _FEATURES.get(request.operation)
    mode = lacking.get(feature) if feature is not None else None
    if feature is None or mode is None:
        return headers
    if feature == "list-start-after":
        if "start-after" not in request.query:
            return headers
        if mode == "refuse":
            return not_implemented("StartAfter: not implemented")
        query = parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        kept = [(name, value) for name, value in query if name != "start-after"]
        environ["QUERY_STRING"] = urlencode(kept, quote_via=quote)
        return headers
    if feature == "delete-objects-etag":
        try:
            root = ET.fromstring(read_body(environ))
        except ET.ParseError:
            return headers  # answered as malformed further on
        conditions = [
            (obj, child)
            for obj in root
            if local_name(obj.tag) == "Object"
            for child in obj
            if local_name(child.tag) in {"ETag", "Size", "LastModifiedTime"}
        ]
        if conditions and mode == "refuse":
            return not_implemented("conditions on DeleteObjects entries are not implemented")
        for obj, child in conditions:
            obj.remove(child)
        if conditions:
            replace_body(environ, ET.tostring(root))
        return headers
    present = [name for name in _CONDITION_HEADERS[feature] if name in headers]
    if present and mode == "refuse":
        return not_implemented(f"{', '.join(present)}: not implemented")
    for name in present:
        environ.pop("HTTP_" + name.upper().replace("-", "_"), None)
    return {k: v for k, v in headers.items() if k not in present}
