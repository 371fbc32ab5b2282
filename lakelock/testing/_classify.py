"""Which S3 API operation a path-style request is, from its method, path, query and headers
(what the gateway's faults, counts, policies and key locks go by).

The names and their requests are botocore's S3 service model's (each operation's method, its
URI's subresources, its required query parameters and headers): a request is the most
specific operation it fits, so ``PUT /b/k?retention`` is ``PutObjectRetention``, never
``PutObject``. Two names lie outside the model: ``PostObject`` (a browser's form upload, any
POST the model has no operation for) and :data:`UNKNOWN` (any other request no operation
fits; no fault rule can name it).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

import botocore.session

__all__ = ["OPERATIONS", "SHADOWED", "UNKNOWN", "S3Request", "classify"]


@dataclass(frozen=True)
class S3Request:
    """What the gateway needs to know about one request."""

    method: str
    operation: str
    bucket: str | None
    key: str | None
    query: Mapping[str, list[str]]
    access_key: str | None

    @property
    def mutating(self) -> bool:
        return self.operation in _KEY_WRITES


_KEY_WRITES = frozenset(
    {"PutObject", "CopyObject", "CompleteMultipartUpload", "DeleteObject", "DeleteObjects"}
)


def classify(
    method: str, raw_path: str, query: Mapping[str, list[str]], headers: Mapping[str, str]
) -> S3Request:
    """Name the S3 API operation of a path-style request (module docstring)."""
    path = raw_path.split("?", 1)[0]
    bucket_text, _, key_text = path.lstrip("/").partition("/")
    bucket = unquote(bucket_text) or None
    key = unquote(key_text) if key_text else None
    operation = _operation(method, bucket, key, query, headers)
    auth = headers.get("authorization", "")
    access_key = None
    if "Credential=" in auth:
        access_key = auth.split("Credential=", 1)[1].split("/", 1)[0]
    return S3Request(method, operation, bucket, key, query, access_key)


#: What :func:`classify` names a request no operation of S3's model fits (not a POST).
UNKNOWN = "Unknown"
#: A browser's form upload: S3's name for it, which botocore's model (an API client's) lacks.
_FORM_UPLOAD = "PostObject"


@dataclass(frozen=True)
class _Route:
    """One operation's request in the model: its method, whether its path names a bucket
    (``bucket``), an object (``object``) or neither (``service``), the subresources its URI
    carries (``{"list-type": "2"}``; ``""`` for a bare ``?tagging``), and the query
    parameters and headers it requires (its headers tell it only from a route of the same
    URI: ``CopyObject`` from ``PutObject``; ``GET ?attributes`` is ``GetObjectAttributes``
    with its header or without). ``path`` is its literal path, if its URI names no
    bucket (``/WriteGetObjectResponse``, which a path-style request reads as a bucket)."""

    name: str
    method: str
    level: str
    path: str | None
    literals: tuple[tuple[str, str], ...]
    queries: frozenset[str]
    headers: frozenset[str]
    deprecated: bool

    @property
    def specificity(self) -> tuple[int, bool, int]:
        """Which of several fitting routes names a request: the one requiring the most of
        it; then one not deprecated (``PutBucketLifecycleConfiguration`` over
        ``PutBucketLifecycle``); then the shorter name (``ListBuckets`` over
        ``ListDirectoryBuckets``)."""
        required = len(self.literals) + len(self.queries) + len(self.headers)
        return required, not self.deprecated, -len(self.name)

    def fits(
        self, bucket: str | None, query: Mapping[str, list[str]], headers: Mapping[str, str]
    ) -> bool:
        return (
            (self.path is None or self.path == bucket)
            and all(_has(query, name, value) for name, value in self.literals)
            and self.queries.issubset(query)
            and (bool(self.literals) or self.headers.issubset(headers))
        )


def _has(query: Mapping[str, list[str]], name: str, value: str) -> bool:
    return name in query and (value == "" or value in query[name])


def _level(bucket: str | None, key: str | None) -> str:
    if bucket is None:
        return "service"
    return "bucket" if key is None else "object"


def _route(name: str, model: object) -> _Route:
    http = model.http  # type: ignore[attr-defined]
    uri, _, subresources = http["requestUri"].partition("?")
    level = "object" if "{Key+}" in uri else "bucket" if "{Bucket}" in uri else "service"
    path = None
    if level == "service" and uri != "/":
        level, path = "bucket", uri.strip("/")
    literals = tuple(
        (sub, values[0]) for sub, values in parse_qs(subresources, keep_blank_values=True).items()
    )
    queries: set[str] = set()
    headers: set[str] = set()
    shape = model.input_shape  # type: ignore[attr-defined]
    for member in shape.required_members if shape is not None else ():
        location = shape.members[member].serialization
        where = {"querystring": queries, "header": headers}.get(location.get("location", ""))
        if where is not None:
            where.add(location["name"].lower() if where is headers else location["name"])
    deprecated = bool(getattr(model, "deprecated", False))
    return _Route(
        name,
        http["method"],
        level,
        path,
        literals,
        frozenset(queries),
        frozenset(headers),
        deprecated,
    )


@functools.cache
def _routes() -> dict[tuple[str, str], tuple[_Route, ...]]:
    """The model's routes by method and level, the most specific first."""
    model = botocore.session.get_session().get_service_model("s3")
    found: dict[tuple[str, str], list[_Route]] = {}
    for name in model.operation_names:
        route = _route(name, model.operation_model(name))
        found.setdefault((route.method, route.level), []).append(route)
    return {
        where: tuple(sorted(routes, key=lambda r: r.specificity, reverse=True))
        for where, routes in found.items()
    }


def _operation(
    method: str,
    bucket: str | None,
    key: str | None,
    query: Mapping[str, list[str]],
    headers: Mapping[str, str],
) -> str:
    lowered = {name.lower(): value for name, value in headers.items()}
    for route in _routes().get((method, _level(bucket, key)), ()):
        if route.fits(bucket, query, lowered):
            return route.name
    return _FORM_UPLOAD if method == "POST" else UNKNOWN


def _shadowed() -> dict[str, str]:
    """Operations whose requests are another's, the name those are given instead
    (``GetBucketLifecycle``: ``GetBucketLifecycleConfiguration``; ``ListDirectoryBuckets``:
    ``ListBuckets``): the same method, path and requirements, a less specific route."""
    given: dict[str, str] = {}
    for routes in _routes().values():
        for n, route in enumerate(routes):
            same = (route.path, route.literals, route.queries, route.headers)
            for first in routes[:n]:
                if (first.path, first.literals, first.queries, first.headers) == same:
                    given[route.name] = first.name
                    break
    return given


#: Operations of S3's model no request is named by, and the name their requests are given.
SHADOWED: Mapping[str, str] = _shadowed()
#: Every S3 operation name :func:`classify` gives a request: what a fault rule's operation
#: glob must match one of (S3's names, case included; :data:`UNKNOWN` is none).
OPERATIONS: frozenset[str] = frozenset(
    {route.name for routes in _routes().values() for route in routes} - set(SHADOWED)
    | {_FORM_UPLOAD}
)
