"""Test lakelock, and pipelines built on it, against a real S3 endpoint on localhost.

:class:`S3Endpoint` runs moto's S3 server behind a gateway that adds what moto lacks (atomic
conditional writes, If-Match on multipart completion, conditional copies -- destination and
copy-source conditions -- and batch deletes, 409 conflicts, bucket-policy enforcement, reads
that never wait for a slow upload) and seeded fault injection; it can also act as a store that
lacks a conditional feature (``S3Endpoint.configure(lacking=...)``). The endpoint requires the
``local`` extra: ``pip install 'lakelock[local]'``; :mod:`lakelock.testing.simulate`, the
simulator, does not (the endpoint's names are loaded when first used).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakelock.testing._endpoint import (
        DEFAULT_ACCESS_KEY,
        DEFAULT_SECRET_KEY,
        S3Endpoint,
        client_kwargs,
        make_server,
    )
    from lakelock.testing._faults import (
        FAULT_KINDS,
        FaultKind,
        FaultPlan,
        FaultRule,
        parse_fault_spec,
    )

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

#: The module each name comes from: loaded on first use, so that importing the simulator
#: (``lakelock.testing.simulate``) needs no moto.
_HOMES = {
    **dict.fromkeys(
        ["DEFAULT_ACCESS_KEY", "DEFAULT_SECRET_KEY", "S3Endpoint", "client_kwargs", "make_server"],
        "lakelock.testing._endpoint",
    ),
    **dict.fromkeys(
        ["FAULT_KINDS", "FaultKind", "FaultPlan", "FaultRule", "parse_fault_spec"],
        "lakelock.testing._faults",
    ),
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'lakelock.testing' has no attribute {name!r}")
    try:
        import moto  # noqa: F401, PLC0415 - probed to give a helpful error, not a bare one
    except ImportError as error:
        raise ImportError(
            "lakelock.testing needs the embedded S3 endpoint: pip install 'lakelock[local]'"
        ) from error
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
