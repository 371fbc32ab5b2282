"""Which conditional delete a store honours, found once by deleting a throwaway object.

Not every store honours the ETag of a ``DeleteObjects`` entry (some delete anyway), nor
``If-Match`` on ``DeleteObject`` (some answer 501). :func:`probe_conditional_delete` writes a
probe object under ``metastore/probes/`` (:func:`~lakelock._layout.probe_key`) and tries
each: a wrong ETag must be refused and the object kept, the right one must delete it.
``ObjectStore.delete_if_unchanged`` uses what it finds, and refuses with
:class:`UnsupportedError` where neither holds: deleting what changed since it was judged
deletable is never an option.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Literal, Protocol

from lakelock._layout import probe_key
from lakelock._s3._types import ObjectHead, PutResult, new_write_id
from lakelock.errors import (
    AccessDeniedError,
    NotFoundError,
    PreconditionFailedError,
    StorageError,
    UnsupportedError,
)

__all__ = ["ConditionalDelete", "probe_conditional_delete"]

#: An ETag no object has (an MD5 is never all zeros in practice).
_WRONG_ETAG = '"00000000000000000000000000000000"'

#: How a store deletes only what is unchanged: ``DeleteObjects`` with per-key ETags
#: (``"batch"``) or one ``DeleteObject`` with ``If-Match`` per key (``"single"``).
ConditionalDelete = Literal["batch", "single"]


class _Probed(Protocol):
    """What the probe needs of the store (:class:`~lakelock._s3.ObjectStore`)."""

    def put(self, key: str, body: bytes, *, mode: Literal["create"]) -> PutResult: ...
    def head(self, key: str) -> ObjectHead: ...
    def delete(self, key: str, *, if_match: str | None = None) -> None: ...
    def delete_many(
        self, items: Sequence[tuple[str, str | None]]
    ) -> dict[str, StorageError | None]: ...


def probe_conditional_delete(store: _Probed) -> ConditionalDelete | Literal["none"]:
    """Which conditional delete ``store`` honours (module docstring): ``"none"`` if neither."""
    key = probe_key(new_write_id())
    try:
        etag = store.put(key, b"", mode="create").etag
        if _honours_batch_etag(store, key, etag):
            return "batch"
        etag = _recreate(store, key)
        if _honours_delete_if_match(store, key, etag):
            return "single"
        return "none"
    finally:
        _remove_probe(store, key)


def _honours_batch_etag(store: _Probed, key: str, etag: str) -> bool:
    try:
        refused = store.delete_many([(key, _WRONG_ETAG)]).get(key)
    except UnsupportedError:
        return False
    if isinstance(refused, AccessDeniedError):
        raise refused
    if not _exists(store, key) or not isinstance(refused, PreconditionFailedError):
        return False  # deleted anyway, or kept without saying why: not to be relied on
    store.delete_many([(key, etag)])
    return not _exists(store, key)


def _honours_delete_if_match(store: _Probed, key: str, etag: str) -> bool:
    try:
        store.delete(key, if_match=_WRONG_ETAG)
    except PreconditionFailedError:
        pass
    except UnsupportedError:
        return False
    if not _exists(store, key):
        return False
    with contextlib.suppress(NotFoundError):  # a lost answer, retried: deleted already
        store.delete(key, if_match=etag)
    return not _exists(store, key)


def _recreate(store: _Probed, key: str) -> str:
    try:
        return store.head(key).etag
    except NotFoundError:
        return store.put(key, b"", mode="create").etag


def _remove_probe(store: _Probed, key: str) -> None:
    """Best effort, and only ever this probe's own key."""
    with contextlib.suppress(StorageError):
        if _exists(store, key):
            store.delete(key)


def _exists(store: _Probed, key: str) -> bool:
    try:
        store.head(key)
    except NotFoundError:
        return False
    return True


# -- reads --------------------------------------------------------------------------------
