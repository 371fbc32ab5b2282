"""The endpoint's control API: JSON over HTTP under ``/_lakelock/``, so an endpoint in another
process is driven the same way as one in this process (faults, settings, counts, stalls)."""

from __future__ import annotations

import time
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from lakelock.testing._faults import FaultPlan, FaultRule
from lakelock.testing._lacking import LACKABLE
from lakelock.testing._wsgi import Response, json_response, read_body, s3_error

__all__ = ["CONTROL_PREFIX", "control"]

#: Where the control API lives: requests under it never reach moto.
CONTROL_PREFIX = "/_lakelock/"


class Controlled(Protocol):
    """What the control API reads and changes (:class:`~lakelock.testing._gateway.Gateway`)."""

    faults: FaultPlan
    concurrent_conflicts: bool
    lacking: dict[str, str]

    def stats(self) -> dict[str, int]: ...
    def areas(self) -> dict[str, int]: ...
    def refused(self) -> dict[str, int]: ...
    def traffic(self) -> dict[str, int]: ...
    def reset_stats(self) -> None: ...
    def stalled(self) -> int: ...
    def release_stalls(self) -> None: ...


def control(gateway: Controlled, environ: dict[str, Any], command: str) -> Response:
    """``GET stats``, ``GET areas``, ``GET refused`` (answers other than 2xx), ``GET
    traffic``, ``GET cpu`` (the serving process's CPU seconds), ``DELETE stats``, ``GET|PUT|
    DELETE faults``, ``POST faults`` (one rule), ``PUT settings``, ``GET stalls``, ``DELETE
    stalls`` (release them)."""
    method = environ["REQUEST_METHOD"]
    command = urlsplit(command).path.strip("/")
    try:
        if command == "stats" and method == "GET":
            return json_response(gateway.stats())
        if command == "traffic" and method == "GET":
            return json_response(gateway.traffic())
        if command == "areas" and method == "GET":
            return json_response(gateway.areas())
        if command == "refused" and method == "GET":
            return json_response(gateway.refused())
        if command == "cpu" and method == "GET":
            return json_response({"seconds": time.process_time()})
        if command == "stats" and method == "DELETE":
            gateway.reset_stats()
            return json_response({})
        if command == "faults" and method == "GET":
            return json_response(gateway.faults.to_json())
        if command == "faults" and method == "PUT":
            plan = FaultPlan.from_json(orjson.loads(read_body(environ)))
            gateway.faults.clear()
            gateway.faults.reseed(plan.seed)
            for rule in plan.rules():
                gateway.faults.add(rule)
            return json_response(gateway.faults.to_json())
        if command == "faults" and method == "POST":
            gateway.faults.add(FaultRule(**orjson.loads(read_body(environ))))
            return json_response(gateway.faults.to_json())
        if command == "faults" and method == "DELETE":
            gateway.faults.clear()
            return json_response(gateway.faults.to_json())
        if command == "settings" and method == "PUT":
            settings = orjson.loads(read_body(environ))
            lacking = dict(settings.get("lacking") or {})
            unknown = {f for f in lacking if f not in LACKABLE} | {
                m for m in lacking.values() if m not in {"ignore", "refuse"}
            }
            if unknown:
                raise ValueError(
                    f"unknown lacking features or modes {sorted(unknown)}: features are "
                    f"{sorted(LACKABLE)}, modes 'ignore' and 'refuse'"
                )
            gateway.concurrent_conflicts = bool(settings.get("concurrent_conflicts", False))
            gateway.lacking = lacking
            return json_response(
                {"concurrent_conflicts": gateway.concurrent_conflicts, "lacking": gateway.lacking}
            )
        if command == "stalls" and method == "GET":
            return json_response({"stalled": gateway.stalled()})
        if command == "stalls" and method == "DELETE":
            gateway.release_stalls()
            return json_response({"stalled": gateway.stalled()})
    except (ValueError, TypeError) as error:
        return s3_error("400 Bad Request", "InvalidArgument", str(error))
    return s3_error("404 Not Found", "NoSuchControl", f"no control {method} {command!r}")
