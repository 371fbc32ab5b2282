"""Adversarial tests of what a commit's caller hears (README: "A commit reported failed never
lands later"; FORMAT.md rules 7 and 13) when the swaps that would record its fate keep
failing. Each ``Registry`` stands for one process."""

from __future__ import annotations

import pytest

from lakelock._s3 import ObjectStore
from lakelock.errors import CommitIdReusedError, CommitStateUnknownError, LakelockError
from lakelock.testing import S3Endpoint
from tests._support import registry
from tests._support.files import datafile
from tests._support.outcomes import id_taken_while_its_swap_is_held

ROOT = "metastore/dataset_registry.json"


def test_a_refusal_whose_recording_swap_keeps_failing_is_unknown_or_never_lands(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A writer commits ``beta`` under ``job-42`` from the root its last swap wrote, while
    another process has meanwhile committed ``alpha`` under that id. Every PUT of the root
    answers 500 (nothing applied, as far as the client can tell): the writer's swap cannot
    land, it reads the root that records ``job-42`` for ``alpha`` and refuses its own commit,
    but the swap that would record its intent ``rejected`` fails too, until its budget runs
    out. What it tells its caller must hold: a definite failure (``CommitIdReusedError``)
    only if the intent can never be applied; else ``CommitStateUnknownError``. Once the
    store heals and the record leaves the window, a third process folds: ``beta`` must not
    gain the rows its caller was told were never committed."""
    writer = registry(store, commit_window=3)
    writer.commit("gamma", add=[datafile("gamma", "", "g")])
    mover = registry(store, commit_window=3, max_fold=0)
    mover.commit("alpha", add=[datafile("alpha", "", "taken")], commit_id="job-42")
    s3.inject("error", operation="PutObject", prefix=ROOT)
    try:
        writer.commit("beta", add=[datafile("beta", "", "b")], commit_id="job-42")
        outcome: BaseException | None = None
    except LakelockError as error:
        outcome = error
    s3.clear_faults()
    for n in range(4):
        mover.commit("alpha", add=[datafile("alpha", "", f"after-{n}")])
    registry(store, commit_window=3).commit("gamma", add=[datafile("gamma", "", "g2")])
    landed = "beta" in registry(store).read().datasets
    assert outcome is not None
    if not isinstance(outcome, CommitStateUnknownError):
        assert isinstance(outcome, CommitIdReusedError), repr(outcome)
        assert not landed
    else:  # and it says why it gave up, not a colon with nothing after it
        assert not str(outcome).split(" (dataset=")[0].rstrip().endswith(":"), str(outcome)


@pytest.mark.parametrize("fault", ["lost_ack", "lost_ack_5xx"])
def test_a_refusal_whose_recording_swap_lost_its_answer_is_definite_and_never_lands(
    s3: S3Endpoint, store: ObjectStore, fault: str
) -> None:
    """A writer's commit of ``beta`` under ``job-42`` has its intent written and its swap held
    at the endpoint while another process commits ``alpha`` under that id; let go, the swap
    fails, the writer reads the root that records ``job-42`` for ``alpha`` and refuses its
    own commit. The swap recording its intent ``rejected`` lands, but its answer is lost (the
    connection reset, or a 500). The writer must find its own swap landed and tell its caller
    ``CommitIdReusedError``, and once the record left the window no fold may apply the
    intent: ``beta`` never gains the rows its caller was told were refused."""
    mover = registry(store, commit_window=3, max_fold=0)
    mover.commit("alpha", add=[datafile("alpha", "", "first")])
    writer = registry(store, commit_window=3)
    error, _ = id_taken_while_its_swap_is_held(
        s3,
        writer,
        mover,  # and the swap recording the refusal loses its answer
        meanwhile=lambda: s3.inject(fault, operation="PutObject", prefix=ROOT, count=1),
    )
    assert s3.faults()["injected"].get(fault) == 1
    assert isinstance(error, CommitIdReusedError), repr(error)
    for n in range(4):
        mover.commit("alpha", add=[datafile("alpha", "", f"after-{n}")])
    registry(store, commit_window=3).commit("gamma", add=[datafile("gamma", "", "g")])
    assert "beta" not in registry(store).read().datasets
