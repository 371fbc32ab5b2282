"""``Registry.log`` and ``Registry.pending_intents``: a library user asks which commits the
registry applied, refused or cancelled (each of which used up a version) and which are still
pending, without the command line (``lakelock registry log|show`` prints the same)."""

from __future__ import annotations

import concurrent.futures

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._registry import REGISTRY_KEY
from lakelock._s3 import ObjectStore
from lakelock.errors import InvalidArgumentError, StaleFenceError
from lakelock.testing import S3Endpoint
from tests._support import registry, wait_until
from tests._support.files import datafile


def test_the_log_names_a_refused_commit_and_the_version_it_used_up(lake: Lake) -> None:
    """A commit refused for a stale fence is in the log at the version that recorded why,
    newest first, with the reason and its intent's key; the applied commit before it keeps
    its id, operation and dataset."""
    lake.append("sales", pa.table({"id": [1]}), fence=("lease:x", 2), commit_id="first")
    with pytest.raises(StaleFenceError):
        lake.append("sales", pa.table({"id": [2]}), fence=("lease:x", 1))
    refused, applied = lake.registry.log()
    assert (refused.version, refused.fate, refused.commit_id, refused.operation) == (
        2,
        "rejected",
        None,
        None,
    )
    assert "fenc" in refused.reason
    assert str(refused.intent).startswith("metastore/intents/")
    assert (applied.version, applied.fate, applied.commit_id) == (1, "applied", "first")
    assert (applied.operation, applied.datasets, applied.added) == ("append", ("sales",), 1)
    assert [e.version for e in lake.registry.log(limit=1)] == [2]


def test_the_log_is_one_read_of_the_root(s3: S3Endpoint, lake: Lake) -> None:
    """The commits and the refusals come from one read of the root, so they are of one
    version of it (no commit decided between two reads is half shown)."""
    lake.append("sales", pa.table({"id": [1]}), fence=("lease:x", 2))
    with pytest.raises(StaleFenceError):
        lake.append("sales", pa.table({"id": [2]}), fence=("lease:x", 1))
    s3.reset_stats()
    assert len(lake.registry.log()) == 2
    assert s3.stats() == {"GetObject": 1}


def test_a_negative_limit_is_refused_before_any_request(s3: S3Endpoint, lake: Lake) -> None:
    """``log(limit=-1)`` would drop the oldest entry silently: refused, as ``history``'s."""
    s3.reset_stats()
    with pytest.raises(InvalidArgumentError, match="limit"):
        lake.registry.log(limit=-1)
    assert s3.stats() == {}


def test_a_commit_written_and_not_applied_is_pending_until_a_swap_decides_it(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """While a commit's intent is out and its swap held, another process's registry names
    it pending; once the swap lands it is pending no more, and the log's applied commit
    names that intent."""
    writer, other = registry(store), registry(store)
    writer.commit("sales", add=[datafile("sales", "", "a")])
    assert other.pending_intents() == []
    s3.inject("stall", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(writer.commit, "sales", add=[datafile("sales", "", "b")])
        wait_until(lambda: s3.stalled() == 1)
        second = pool.submit(writer.commit, "sales", add=[datafile("sales", "", "c")])
        wait_until(lambda: len(other.pending_intents()) == 2)  # b's and c's intents
        pending = other.pending_intents()
        s3.release_stalls()
        assert (first.result().version, second.result().version) == (2, 3)
    assert other.pending_intents() == []
    assert {e.intent for e in other.log()[:2]} == set(pending)


def test_the_old_pending_intents_still_works_and_says_where_it_went(lake: Lake) -> None:
    """``registry.internals.pending_intents()`` still answers for one release, warning that
    ``registry.pending_intents()`` replaces it."""
    lake.append("sales", pa.table({"id": [1]}))
    with pytest.warns(DeprecationWarning, match=r"registry\.pending_intents\(\)"):
        assert lake.registry.internals.pending_intents() == lake.registry.pending_intents()
