"""A process's committer knows the root it last read or wrote (``Committer.known``): a
hint its next commit may start from without a GET. Roots reach it from the commit's own
reads and swaps and from the registry's readers (``Registry.read``), whose GET may be
answered after a commit of the same process swapped a newer root in. An answer older than
what the committer knows must not replace it: a commit would then decide from a root
whose settings, datasets and ETag are out of date."""

from __future__ import annotations

import time

from lakelock._registry import Registry
from lakelock._registry._document import RegistryDoc
from lakelock._s3 import ObjectStore
from lakelock.testing import S3Endpoint
from tests._support import registry
from tests._support.files import datafile

DAY = 24 * 3600.0


Answer = tuple[RegistryDoc, str | None]


def late_answer(ours: Registry) -> Answer:
    """The answer to a GET of the root that ``ours``'s reader sends now, to reach its
    committer later (:func:`deliver`), as a slow answer does."""
    return ours._read_root()


def deliver(ours: Registry, answer: Answer) -> None:
    """``answer`` reaching ``ours``'s committer now, as ``Registry._read_root`` hands it
    over once its GET is answered (under the commit lock). (The endpoint cannot hold an
    answer it has made, only a request before it is made: the GET is answered in time,
    and handed over late here.)"""
    doc, etag = answer
    with ours._commits.lock:
        ours._committer.observe(doc, etag, time.monotonic())


def test_a_readers_late_answer_does_not_make_a_commit_fail_on_settings_changed_since(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """The lake keeps 7 days. A pipeline opened with ``retention=30d`` reads the registry
    while the lake is configured to 30 days; it commits (the lake's settings now its
    own), and then its read's answer, the root of 7 days, arrives. Its next commit must
    succeed: once, it started from that older root and failed with
    ``SettingsMismatchError`` for a setting the lake had long agreed to."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    ours = registry(store, retention=30 * DAY)
    answer = late_answer(ours)
    registry(store).configure(retention=30 * DAY)
    ours.read()  # it learns the newer root
    ours.commit("sales", add=[datafile("sales", "", "b")])
    deliver(ours, answer)
    ours.commit("sales", add=[datafile("sales", "", "c")])
    assert [f.name for f in registry(store).files("sales")] == ["a", "b", "c"]


def test_a_readers_late_answer_costs_the_next_commit_no_lost_race(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A pipeline commits twice; a read it made before the second commit is answered
    after it. Its third commit starts from the root it swapped in, not that older one:
    its swap is not sent on an ETag that can never match (a 412 and a redrive, the
    version's objects written for nothing)."""
    ours = registry(store)
    ours.commit("sales", add=[datafile("sales", "", "a")])
    answer = late_answer(ours)
    ours.commit("sales", add=[datafile("sales", "", "b")])
    deliver(ours, answer)
    s3.reset_stats()
    ours.commit("sales", add=[datafile("sales", "", "c")])
    assert s3.refused() == {}
    assert ours._committer.hints.swapped_last


def test_a_commit_from_a_known_root_older_than_the_lakes_settings_reads_the_root_again(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A pipeline opened with ``retention=30d`` reads the registry of a lake that keeps 7
    days; another process then configures 30 days. The pipeline's commit may start from the
    root it knows (no GET: nobody else seemed to commit here), but a setting of that root
    disagreeing with its own is a hint, not the lake's answer: it reads the root again and
    commits, instead of failing with ``SettingsMismatchError``."""
    registry(store).commit("sales", add=[datafile("sales", "", "a")])
    ours = registry(store, retention=30 * DAY)
    ours.read()
    registry(store).configure(retention=30 * DAY)
    ours.commit("sales", add=[datafile("sales", "", "b")])
    assert [f.name for f in registry(store).files("sales")] == ["a", "b"]
