"""A commit whose registry root is deleted under its swap (an ``aws s3 rm``, a lifecycle rule)
had already written its intent, and no root is left to record that intent's fate: the next
commit of any process on the lake reads no root, takes the lake for a new one, and applies
every intent it lists (now it refuses: tests/test_adversary_lost_root.py), or the root is
put back and the next commit folds that intent. So its caller hears
``CommitStateUnknownError`` (the ``RegistryCorruptError`` its cause), never a definite
failure (``Committer.run``)."""

from __future__ import annotations

import concurrent.futures

import pytest

from lakelock._layout import REGISTRY_KEY
from lakelock._s3 import ObjectStore
from lakelock.errors import CommitStateUnknownError, RegistryCorruptError
from lakelock.testing import S3Endpoint
from tests._support import registry, wait_until
from tests._support.files import datafile


def test_a_commit_whose_root_is_deleted_under_its_swap_is_told_its_outcome_is_unknown(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """``c`` has one version. A pipeline appends ``ours``: its intent is written, and its
    swap of the root is held at the endpoint while the root is deleted by hand (an ``aws s3
    rm``, a lifecycle rule: tests/test_adversary_lost_root.py's case). Let go, the swap
    finds no root: its caller hears ``CommitStateUnknownError``, the ``RegistryCorruptError``
    its cause. Another process's commit to ``d`` is refused (no root is made over the
    lake's versions); once the root is put back, it commits and applies ``ours``: what the
    caller was told allows it (a definite failure would not)."""
    registry(store).commit("c", add=[datafile("c", "", "before")])
    kept = store.get(REGISTRY_KEY).body  # the version the bucket keeps of it, say
    ours = registry(store)
    s3.inject("stall", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(ours.commit, "c", add=[datafile("c", "", "ours")])
        wait_until(lambda: s3.stalled() == 1)
        admin = s3.client(access_key="engine")  # a key the bucket's policy does not bind
        admin.delete_object(Bucket=store.bucket, Key=store.full_key(REGISTRY_KEY))
        s3.release_stalls()
        heard = waiting.exception(timeout=60)
    assert isinstance(heard, CommitStateUnknownError), heard
    assert isinstance(heard.__cause__, RegistryCorruptError), heard.__cause__
    theirs = registry(store)
    with pytest.raises(RegistryCorruptError, match="is missing"):
        theirs.commit("d", add=[datafile("d", "", "theirs")])
    admin.put_object(Bucket=store.bucket, Key=store.full_key(REGISTRY_KEY), Body=kept)
    theirs.commit("d", add=[datafile("d", "", "theirs")])
    assert "ours" in [f.name for f in registry(store).files("c")]
