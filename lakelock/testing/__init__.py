"""Test lakelock, and pipelines built on it, against a real S3 endpoint on localhost.

:class:`S3Endpoint` runs moto's S3 server behind a gateway that adds what moto lacks (atomic
conditional writes, If-Match on multipart completion, conditional copies -- destination and
copy-source conditions -- and batch deletes, 409 conflicts, bucket-policy enforcement, reads
that never wait for a slow upload) and seeded fault injection; it can also act as a store that
lacks a conditional feature (``S3Endpoint.configure(lacking=...)``). Requires the ``local``
extra: ``pip install 'lakelock[local]'``.
"""

from __future__ import annotations

try:
    import moto  # noqa: F401 - probed here to give a helpful error instead of a bare one
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "lakelock.testing needs the embedded S3 endpoint: pip install 'lakelock[local]'"
    ) from error

from lakelock.testing._endpoint import (
    DEFAULT_ACCESS_KEY,
    DEFAULT_SECRET_KEY,
    S3Endpoint,
    client_kwargs,
    make_server,
)
from lakelock.testing._faults import FAULT_KINDS, FaultKind, FaultPlan, FaultRule, parse_fault_spec

__all__ = [
    "DEFAULT_ACCESS_KEY",
    "DEFAULT_SECRET_KEY",
    "FAULT_KINDS",
    "FaultKind",
    "FaultPlan",
    "FaultRule",
    "S3Endpoint",
    "client_kwargs",
    "make_server",
    "parse_fault_spec",
]
