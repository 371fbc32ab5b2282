"""botocore's model of S3, as the embedded endpoint's tests read it: each operation, and
the name :func:`~lakelock.testing._classify.classify` gives the request botocore's own
serializer makes of it."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import botocore.session
from botocore.serialize import create_serializer

from lakelock.testing._classify import classify

__all__ = ["classified_operations"]


def _filled(shape: Any) -> Any:
    """A value for each required member (a list of one item: a header built from an empty
    list is left out, which no real request of that operation does)."""
    if shape.type_name == "structure":
        return {name: _filled(shape.members[name]) for name in shape.required_members}
    if shape.type_name == "list":
        return [_filled(shape.member)]
    return {"integer": 1, "long": 1, "boolean": True, "blob": b"x"}.get(shape.type_name, "x")


def classified_operations() -> dict[str, str]:
    """Each operation of botocore's S3 model: the operation :func:`classify` names the
    request botocore's own serializer makes of it (its required members filled in)."""
    model = botocore.session.get_session().get_service_model("s3")
    serializer = create_serializer("rest-xml", include_validation=False)
    named = {}
    for name in model.operation_names:
        operation = model.operation_model(name)
        params = _filled(operation.input_shape) if operation.input_shape else {}
        request = serializer.serialize_to_request(params, operation)
        path, _, subresources = request["url_path"].partition("?")
        query = parse_qs(subresources, keep_blank_values=True)
        query.update({k: [str(v)] for k, v in request["query_string"].items()})
        headers = {k.lower(): v for k, v in request["headers"].items()}
        named[name] = classify(request["method"], path, query, headers).operation
    return named
