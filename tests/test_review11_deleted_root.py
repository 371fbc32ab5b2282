"""A commit told it failed because the registry's root was deleted under it
(``RegistryCorruptError``, "lakelock will not re-create it") had already written its intent,
and nothing recorded that intent's fate: the next commit of any process on the lake reads no
root, takes the lake for a new one, lists every intent from the start and applies it. Its
caller heard a definite failure; the commit landed."""

from __future__ import annotations

import concurrent.futures

import pytest

from lakelock._layout import REGISTRY_KEY
from lakelock._s3 import ObjectStore
from lakelock.errors import CommitStateUnknownError, RegistryCorruptError
from lakelock.testing import S3Endpoint
from tests._support import registry, wait_until
from tests._support.files import datafile


@pytest.mark.xfail(
    raises=AssertionError,
    strict=True,
    reason="a RegistryCorruptError after the batch's intents were sent is raised as a "
    "definite failure, the intents neither cancelled nor reported unknown "
    "(Committer.run), and a process that then reads no root folds every intent",
)
def test_a_commit_told_its_root_was_deleted_never_lands(s3: S3Endpoint, store: ObjectStore) -> None:
    """``c`` has one version. A pipeline appends ``ours``: its intent is written, and its
    swap of the root is held at the endpoint while the root is deleted by hand (an ``aws s3
    rm``, a lifecycle rule: tests/test_adversary_lost_root.py's case). Let go, the swap
    finds no root and the caller hears ``RegistryCorruptError`` — a definite failure, not
    ``CommitStateUnknownError``. Another process then commits to ``d``: it must not apply
    ``ours``."""
    registry(store).commit("c", add=[datafile("c", "", "before")])
    ours = registry(store)
    s3.inject("stall", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(ours.commit, "c", add=[datafile("c", "", "ours")])
        wait_until(lambda: s3.stalled() == 1)
        admin = s3.client(access_key="engine")  # a key the bucket's policy does not bind
        admin.delete_object(Bucket=store.bucket, Key=store.full_key(REGISTRY_KEY))
        s3.release_stalls()
        heard = waiting.exception(timeout=60)
    assert isinstance(heard, RegistryCorruptError | CommitStateUnknownError), heard
    other = registry(store)
    other.commit("d", add=[datafile("d", "", "theirs")])
    after = registry(store)
    landed = [f.name for f in after.files("c")] if "c" in after.read().datasets else []
    if not isinstance(heard, CommitStateUnknownError):
        assert "ours" not in landed, f"told {heard!r}, the commit landed: {landed}"
