"""Helpers shared by test modules (fixtures live in ``tests/conftest.py``). Test modules
import from here, never from each other."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lakelock._registry import Registry
from lakelock._registry._changes import Change
from lakelock._registry._document import LockFenceRecord
from lakelock._registry._intents import intent_document
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock._s3._classify import CONNECT_BACKOFF

__all__ = [
    "CLI_ENV",
    "FAST_RETRY",
    "REPO",
    "Refused",
    "StallAndRace",
    "connect_pauses",
    "forgotten_by_age",
    "free_port",
    "no_sleep",
    "plant_intent",
    "registry",
    "wait_until",
]

#: The repository's root: the working directory of worker processes.
REPO = Path(__file__).resolve().parents[2]


#: The environment of a command run as a user runs it against the embedded endpoint: its
#: credentials, and none of this machine's AWS or lakelock configuration (nor a setting not
#: to write bytecode: see conftest.py).
CLI_ENV = {
    **{
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "LAKELOCK_")) and k != "PYTHONDONTWRITEBYTECODE"
    },
    "AWS_ACCESS_KEY_ID": "lakelock",
    "AWS_SECRET_ACCESS_KEY": "x",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    "PYTHONUNBUFFERED": "1",
}


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def connect_pauses(attempts: int) -> list[float]:
    """The pauses lakelock's clients take between ``attempts`` attempts at a connection that
    cannot be made (:data:`~lakelock._s3._classify.CONNECT_BACKOFF`, doubling)."""
    return [CONNECT_BACKOFF * 2**n for n in range(attempts - 1)]


def no_sleep(seconds: float) -> None:
    """Retry backoff that does not wait: tests force outcomes, they do not wait them out."""


FAST_RETRY = RetryPolicy(max_attempts=10, sleep=no_sleep)


def registry(store: ObjectStore, **kw: Any) -> Registry:
    """A registry of ``store`` whose retries do not wait (``kw``: the registry's options)."""
    kw.setdefault("retry", FAST_RETRY)
    return Registry(store, **kw)


#: The ``stall_and_race`` fixture (tests/conftest.py): ``race(ours, theirs)`` runs ``theirs``
#: while ``ours``'s swap of the registry's root is held, and returns both results.
StallAndRace = Callable[..., tuple[Any, Any]]


def plant_intent(store: ObjectStore, change: Change, *, ms: int | None = None) -> str:
    """An intent written by a process that then died before its swap (made ``ms``
    milliseconds after the epoch, by default now); its key."""
    key, body, _ = intent_document(change, now_ms=ms if ms is not None else int(time.time() * 1000))
    store.put(key, body, mode="create")
    return key


def wait_until(condition: Callable[[], bool], *, attempts: int = 4000) -> None:
    """Poll a server-side condition (a stalled request arriving), bounded: this waits for an
    event that is certain to happen, it does not let time pass to make something happen."""
    for _ in range(attempts):
        if condition():
            return
        time.sleep(0.005)
    raise AssertionError("condition never held")


class Refused(Exception):
    """What a parser was told to raise (its ``fail=``)."""


def forgotten_by_age(
    lock_fences: Mapping[str, tuple[LockFenceRecord, ...]], *, before: float
) -> Mapping[str, tuple[LockFenceRecord, ...]]:
    """How the root kept path-lock grant records before: those older than the retention
    were dropped (to put in place of ``lakelock._registry._fencing.lock_fences_kept``)."""
    return {
        name: kept
        for name, records in lock_fences.items()
        if (kept := tuple(r for r in records if r.at >= before))
    }


class Interrupting:
    """The registry's wall clock; armed, its next reading raises ``KeyboardInterrupt`` (the
    signal arriving while the thread runs lakelock's code)."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self) -> float:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return time.time()
