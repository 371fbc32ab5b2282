"""What the S3 adapter (:mod:`lakelock._s3`) takes and hands back: the compare-and-swap
precondition, the result of a write, descriptions of objects, request bodies read in parts
without losing their position (a retried request reads them again), and request counts.
"""

from __future__ import annotations

import io
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, Literal
from weakref import WeakKeyDictionary

__all__ = [
    "WRITE_ID_KEY",
    "IfMatch",
    "ListedObject",
    "ObjectData",
    "ObjectHead",
    "PutMode",
    "PutResult",
    "S3Stats",
    "chunks",
    "new_write_id",
    "read_all",
    "size_of",
    "stats_for",
]

#: Object metadata key carrying the write id (sent as ``x-amz-meta-lakelock-write-id``).
WRITE_ID_KEY = "lakelock-write-id"


@dataclass(frozen=True)
class IfMatch:
    """Compare-and-swap precondition: replace the object only if its ETag is still ``etag``."""

    etag: str


PutMode = Literal["create", "overwrite"] | IfMatch


def new_write_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class PutResult:
    """A write that landed. ``resolved`` is true when a lost acknowledgement was resolved by
    reading the object back; ``attempts`` counts whole-request retries (409/503) here.
    ``server_time``: the ``Date`` of the answer that settled it (the server's clock, after
    the object was written), if it carried one."""

    key: str
    etag: str
    write_id: str
    size: int
    version_id: str | None = None
    resolved: bool = False
    attempts: int = 1
    server_time: datetime | None = None


@dataclass(frozen=True)
class ObjectHead:
    key: str
    etag: str
    size: int
    metadata: Mapping[str, str]
    last_modified: datetime
    #: The server's ``Date`` header: the shared clock for lease expiry decisions.
    server_time: datetime | None = None

    @property
    def write_id(self) -> str | None:
        return self.metadata.get(WRITE_ID_KEY)


@dataclass(frozen=True)
class ObjectData(ObjectHead):
    body: bytes = b""


@dataclass(frozen=True)
class ListedObject:
    key: str
    etag: str
    size: int
    last_modified: datetime


class S3Stats:
    """HTTP requests sent, per S3 operation (SDK retries included). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def record(self, operation: str) -> None:
        with self._lock:
            self._counts[operation] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


_client_stats: WeakKeyDictionary[Any, S3Stats] = WeakKeyDictionary()
_client_stats_lock = threading.Lock()


def stats_for(client: Any) -> S3Stats:
    """The one :class:`S3Stats` counting requests of ``client`` (hooked in on first use)."""
    with _client_stats_lock:
        stats = _client_stats.get(client)
        if stats is None:
            stats = S3Stats()

            def count(event_name: str, **_: Any) -> None:
                stats.record(event_name.rsplit(".", 1)[-1])

            client.meta.events.register("before-send.s3", count)
            _client_stats[client] = stats
        return stats


def size_of(body: bytes | IO[bytes]) -> int:
    """Bytes from the current position of ``body`` to its end."""
    if isinstance(body, bytes):
        return len(body)
    position = body.tell()
    end = body.seek(0, io.SEEK_END)
    body.seek(position)
    return end - position


def read_all(body: IO[bytes]) -> bytes:
    """The rest of ``body``, leaving its position where it was (a retry reads it again)."""
    position = body.tell()
    data = body.read()
    body.seek(position)
    return data


def chunks(body: bytes | IO[bytes], part_size: int) -> Iterator[bytes]:
    """``body`` in parts of ``part_size`` bytes (at least one part, empty for no bytes)."""
    if isinstance(body, bytes):
        for start in range(0, max(len(body), 1), part_size):
            yield body[start : start + part_size]
        return
    position = body.tell()
    try:
        while chunk := body.read(part_size):
            yield chunk
    finally:
        body.seek(position)
