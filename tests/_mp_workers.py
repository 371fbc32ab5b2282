"""Subprocess entry points for the multi-process lease and lock tests.

Run as ``python -m tests._mp_workers <role> '<json args>'`` from the repository root. Each
worker connects to the test session's embedded S3 endpoint by URL, does its part, and prints
one JSON record per line on stdout for the test to check. Workers use real time
(:func:`time.monotonic`, shared by every process of the machine), so intervals recorded by
different processes are directly comparable.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any


def _store(args: dict[str, Any]) -> Any:
    import boto3

    from lakelock._retry import RetryPolicy
    from lakelock._s3 import ObjectStore
    from lakelock.testing import client_kwargs

    client = boto3.client("s3", **client_kwargs(args["url"]))
    retry = RetryPolicy(max_attempts=50, initial_backoff=0.005, max_backoff=0.05)
    return ObjectStore(client, args["bucket"], retry=retry)


def _emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def lease(args: dict[str, Any]) -> None:
    """Take lease "mp" ``holdings`` times. Worker 0 abandons its first holding (stops renewing
    and keeps believing until its own clock says the lease lapsed, like a paused holder);
    every other holding is held briefly, sometimes renewed, and released. Records the interval
    during which the worker believed it held the lease: from acquire's return to its last
    successful check."""
    from lakelock._lease import Lease
    from lakelock.errors import LeaseLostError

    rng = random.Random(args["seed"])
    store = _store(args)
    for index in range(args["holdings"]):
        holding = Lease(store, "mp", ttl=args["ttl"], margin=args["margin"], poll_interval=0.05)
        holding.acquire(timeout=30)
        start = last = time.monotonic()
        abandon = args["seed"] == 0 and index == 0
        if abandon:
            while True:
                now = time.monotonic()
                try:
                    holding.check()
                except LeaseLostError:
                    break
                last = now
                time.sleep(0.002)
        else:
            until = start + rng.uniform(0.0, 0.1)
            renewed = False
            while True:
                now = time.monotonic()
                holding.check()
                last = now
                if now >= until:
                    break
                if not renewed and rng.random() < 0.5:
                    holding.renew()
                    renewed = True
                time.sleep(0.005)
            holding.release()
        _emit(
            {
                "pid": args["seed"],
                "token": holding.token,
                "start": start,
                "end": last,
                "kind": "abandon" if abandon else "release",
            }
        )


ROLES = {"lease": lease}


def main() -> None:
    role, raw = sys.argv[1], sys.argv[2]
    ROLES[role](json.loads(raw))


if __name__ == "__main__":
    main()
