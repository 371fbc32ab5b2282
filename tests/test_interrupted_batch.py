"""One thread runs a batch for every commit of its process queued behind it
(``GroupCommit``). When that thread is interrupted (Ctrl-C: ``KeyboardInterrupt`` lands on
the main thread wherever it is, here just after the batch's swap was answered), the
interruption goes on up that thread, and every other caller of the batch hears
``CommitStateUnknownError`` (its commit may have landed: here it did), never the bare
``GeneratorExit`` the interrupted steps were closed with (``Committer.run``)."""

from __future__ import annotations

import concurrent.futures

from lakelock._layout import REGISTRY_KEY
from lakelock._s3 import ObjectStore
from lakelock.errors import CommitStateUnknownError
from lakelock.testing import S3Endpoint
from tests._support import Interrupting, registry, wait_until
from tests._support.files import datafile


def stalls(s3: S3Endpoint) -> int:
    return int(s3.faults()["injected"].get("stall", 0))


def test_callers_of_an_interrupted_batch_hear_its_outcome_or_that_it_is_unknown(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """Two threads commit ``x`` and ``y`` while a first commit holds the process's turn
    (its swap held at the endpoint): both queue, and whichever thread takes the turn next
    runs one batch for both. Its swap is held too; once it is let go the swap lands, and
    the batch's thread is interrupted at its next step. Both commits landed: the caller on
    the other thread must hear so, or at worst that the outcome is unknown."""
    clock = Interrupting()
    reg = registry(store, clock=clock)
    reg.commit("sales", add=[datafile("sales", "", "a")])
    s3.inject("stall", operation="PutObject", prefix=REGISTRY_KEY, count=1)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        first = pool.submit(reg.commit, "sales", add=[datafile("sales", "", "first")])
        wait_until(lambda: stalls(s3) == 1)
        x = pool.submit(reg.commit, "sales", add=[datafile("sales", "", "x")])
        y = pool.submit(reg.commit, "sales", add=[datafile("sales", "", "y")])
        wait_until(lambda: len(reg._commits.queue) == 2)
        s3.inject("stall", operation="PutObject", prefix=REGISTRY_KEY, count=1)
        s3.release_stalls()
        first.result(timeout=60)
        wait_until(lambda: stalls(s3) == 2)  # the batch of x and y: its swap held
        clock.armed = True
        s3.release_stalls()
        concurrent.futures.wait([x, y], timeout=60)
    heard = [f.exception() for f in (x, y)]
    assert sorted(f.name for f in registry(store).files("sales")) == ["a", "first", "x", "y"]
    interrupted = [e for e in heard if isinstance(e, KeyboardInterrupt)]
    assert len(interrupted) == 1  # the batch's thread: told its commit may have landed
    assert any("may still apply it" in note for note in getattr(interrupted[0], "__notes__", []))
    other = next(e for e in heard if not isinstance(e, KeyboardInterrupt))
    assert other is None or isinstance(other, CommitStateUnknownError), (
        f"the caller of a commit that landed heard {other!r}"
    )
