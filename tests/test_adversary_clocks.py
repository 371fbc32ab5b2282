"""Adversarial tests of time travel against writers whose wall clocks are off (FORMAT.md
invariant 3: a dataset's snapshot chain has non-increasing ``at`` going to ``parent``;
docs/ARCHITECTURE.md, "Time, clock skew and the safety margins": no other machine's clock is
trusted). Each ``Registry`` stands for one process; a clock is injected, nothing sleeps."""

from __future__ import annotations

import time

from lakelock import Lake
from lakelock._s3 import ObjectStore
from tests._support import registry
from tests._support.files import datafile

HOUR = 3600.0


def test_a_version_replaced_by_a_writer_whose_clock_is_behind_stays_readable(
    store: ObjectStore, lake: Lake
) -> None:
    """A lake keeping replaced versions for an hour. Version A of ``sales`` is committed by a
    process with a good clock; a moment later a process whose wall clock is two hours
    behind commits version B over it. A is replaced a moment ago and must stay readable for
    the retention's hour (and the chain's commit times must not rise going back, invariant
    3). What a user loses otherwise: reading A is SnapshotExpiredError at once, and vacuum
    (which keeps versions by the same times) takes its files, though it was replaced
    seconds ago."""
    lake.configure(retention="1h", create=True)
    first = registry(store).commit("sales", add=[datafile("sales", "", "a")])
    behind = registry(store, clock=lambda: time.time() - 2 * HOUR)
    behind.commit("sales", add=[datafile("sales", "", "b")])
    reader = registry(store)
    then = reader.read(version=first.version).datasets["sales"]
    assert then.file_count == 1
    ats = [h.at for h in reader.history("sales")]
    assert ats == sorted(ats, reverse=True), ats
