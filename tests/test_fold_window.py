"""A fold never outgrows the root's window of commit ids (docs/FORMAT.md, "Commit ids"),
against the embedded endpoint.

Within the root's window an id is bound across datasets; each dataset's commit-id index
binds it only within that dataset. A swap that applied more commits than the window holds
recorded some ids nowhere a commit to another dataset looks, even for a moment.
"""

from __future__ import annotations

import time

import pytest

from lakelock._registry import REGISTRY_KEY, Registry
from lakelock._registry._changes import Change
from lakelock._registry._document import parse_registry
from lakelock._registry._intents import intent_document
from lakelock._s3 import ObjectStore
from lakelock.errors import CommitIdReusedError
from tests._support import FAST_RETRY
from tests._support.files import datafile

WINDOW = 4


def test_an_id_of_a_fold_larger_than_the_window_is_not_applied_again_elsewhere(
    store: ObjectStore,
) -> None:
    """A lake with a window of 4; six writers of ``alpha`` sent their intents and died
    before their swaps; another process's commit folds them. Before, its one swap applied
    all seven commits and kept the newest four records: ``job-0`` was at once in no window,
    and a commit of ``job-0`` to ``beta`` was applied too — one id, two changes, where
    README promises ``CommitIdReusedError``. Now the root keeps a version's records whole
    while fewer than the window's worth of later ones are kept: ``job-0`` stays bound
    across datasets for the next four commits after its swap, like any id."""
    first = Registry(store, retry=FAST_RETRY, commit_window=WINDOW)
    first.commit("alpha", add=[datafile("alpha", "", "seed")], commit_id="seed")
    now_ms = int(time.time() * 1000)
    for n in range(6):
        change = Change("alpha", f"job-{n}", add=(datafile("alpha", "", f"job-{n}"),))
        key, body, _ = intent_document(change, now_ms=now_ms + n)
        store.put(key, body, mode="create")
    folder = Registry(store, retry=FAST_RETRY)
    folder.commit("gamma", add=[datafile("gamma", "", "g")], commit_id="folder")
    root = parse_registry(store.get(REGISTRY_KEY).body)
    for n in range(WINDOW - 1):  # later versions, fewer commits than the window
        folder.commit("gamma", add=[datafile("gamma", "", f"later-{n}")], commit_id=f"later-{n}")
    reuser = Registry(store, retry=FAST_RETRY)
    with pytest.raises(CommitIdReusedError):
        reuser.commit("beta", add=[datafile("beta", "", "other")], commit_id="job-0")
    assert "beta" not in reuser.read().datasets
    applied = {c.id for c in root.commits if c.version == root.version}
    assert applied == {"folder", *(f"job-{n}" for n in range(6))}  # one swap, all kept
