"""Runs the sans-I/O commit core against S3: each request the core yields is performed with
an :class:`~lakelock._s3.ObjectStore` and its answer (or exception) handed back.

The root's requests (``retried=False``) go through a store that does not retry: the core
counts and decides every retry of the compare-and-swap. Everything else goes through the
lake's store, which retries transient failures of write-once objects itself and resolves a
create's lost answer by its write id. A :class:`~._requests.Parallel` batch runs on up to 64
threads (the S3 client's connection pool)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lakelock._registry._core._requests import (
    Delete,
    Get,
    List,
    Listing,
    Now,
    Parallel,
    Put,
    Request,
    Sleep,
    Steps,
)
from lakelock._s3 import IfMatch, ObjectStore, PutMode

__all__ = ["Driver"]

#: Most requests of one :class:`Parallel` batch in flight at once: the S3 client's connection
#: pool (``max_pool_connections``). A fold at hundreds of writers reads a hundred or more
#: intents in one batch; the simulator runs batches under the same limit, and at 256 writers
#: on S3 Standard 16 gave 279 commits/s and 7.6 requests a commit, 64 gave 349 and 6.5, no
#: limit 334 and 7.1 (BENCHMARKS.md §14).
THREADS = 64


class Driver:
    """Performs the core's requests: ``store`` for write-once objects, ``root`` for the
    root (no retries of its own), ``sleep`` and ``clock`` for time."""

    def __init__(
        self,
        store: ObjectStore,
        root: ObjectStore,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.root = root
        self.sleep = sleep
        self.clock = clock

    def run(self, steps: Steps) -> Any:
        """Drive ``steps`` to its end; its return value."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                request = steps.throw(error) if error is not None else steps.send(answer)
            except StopIteration as stop:
                return stop.value
            answer, error = None, None
            try:
                answer = self.perform(request)
            except Exception as failure:
                error = failure

    def perform(self, request: Request) -> Any:
        match request:
            case Get(key, retried):
                return (self.store if retried else self.root).get(key)
            case Put(key, body, create, if_match, retried):
                mode: PutMode = (
                    "create" if create else IfMatch(if_match) if if_match else "overwrite"
                )
                store = self.store if retried else self.root
                return store.put(key, body, mode=mode, content_type="application/json")
            case List(prefix, start_after, max_keys):
                objects, truncated = self.store.list_page(
                    prefix, start_after=start_after, max_keys=max_keys
                )
                return Listing(tuple(objects), truncated)
            case Delete(key, if_match):
                return self.store.delete(key, if_match=if_match)
            case Parallel(requests):
                return self._parallel(requests)
            case Sleep(seconds):
                self.sleep(seconds)
                return None
            case Now():
                return self.clock()
        raise TypeError(f"not a request: {request!r}")

    def _parallel(self, requests: tuple[Request, ...]) -> tuple[Any, ...]:
        def one(request: Request) -> Any:
            try:
                return self.perform(request)
            except Exception as failure:
                return failure

        if len(requests) <= 1:
            return tuple(one(r) for r in requests)
        with ThreadPoolExecutor(min(THREADS, len(requests))) as pool:
            return tuple(pool.map(one, requests))
