"""Per-key locks for the gateway: one lock per (bucket, key) in use, several taken at once in
a fixed order so that two multi-key requests cannot deadlock."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

__all__ = ["KeyLocks"]


class KeyLocks:
    """One lock per (bucket, key) in use; entries are dropped when nobody holds or waits."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locks: dict[tuple[str, str], tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, keys: Iterable[tuple[str, str]], *, wait: bool) -> Iterator[bool]:
        """Hold every key's lock (sorted, so two multi-key requests cannot deadlock). With
        ``wait=False`` yields ``False`` at once if any is taken."""
        ordered = sorted(set(keys))
        held: list[tuple[str, str]] = []
        try:
            for k in ordered:
                lock = self._ref(k)
                if not lock.acquire(blocking=wait):
                    self._unref(k)
                    yield False
                    return
                held.append(k)
            yield True
        finally:
            for k in reversed(held):
                self._locks[k][0].release()
                self._unref(k)

    def _ref(self, k: tuple[str, str]) -> threading.Lock:
        with self._mutex:
            lock, users = self._locks.get(k, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self._locks[k] = (lock, users + 1)
            return lock

    def _unref(self, k: tuple[str, str]) -> None:
        with self._mutex:
            lock, users = self._locks[k]
            if users == 1:
                del self._locks[k]
            else:
                self._locks[k] = (lock, users - 1)
