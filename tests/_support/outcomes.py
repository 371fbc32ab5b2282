"""A commit whose outcome its caller cannot know: its swap held at the endpoint past the
client's patience, then let go to land; a commit whose id is taken while its swap is held."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

from lakelock import Lake
from lakelock._registry import Registry
from lakelock._registry._batch import CommitResult
from lakelock._retry import RetryPolicy
from lakelock.testing import S3Endpoint
from tests._support import no_sleep, wait_until
from tests._support.files import datafile

__all__ = [
    "IMPATIENT",
    "id_taken_while_its_swap_is_held",
    "impatient_lake",
    "while_its_first_swap_is_in_flight",
]

ROOT = "metastore/dataset_registry.json"


#: A client whose request times out after half a second and is sent once more by the SDK:
#: a root PUT held at the server (a write in progress) outlives its first try, and the
#: retry meets it in flight.
IMPATIENT = {"read_timeout": 0.5, "retries": {"mode": "standard", "total_max_attempts": 2}}


def impatient_lake(s3: S3Endpoint, bucket: str) -> Lake:
    """A lake whose commits give up after three attempts, on an impatient client."""
    client = s3.client(**IMPATIENT)
    return Lake(bucket, s3=client, retry=RetryPolicy(max_attempts=3, sleep=no_sleep))


def while_its_first_swap_is_in_flight(s3: S3Endpoint, commit: Any) -> Any:
    """Runs ``commit`` while its first root PUT is held at the endpoint holding the root's
    key: as on AWS, a conditional write meeting it answers 409 ConditionalRequestConflict
    (the SDK's retry of the timed-out PUT, and every later attempt's). Once ``commit`` has
    returned or raised, the held PUT goes on and lands. Returns the outcome."""
    s3.configure(concurrent_conflicts=True)
    s3.inject("hold", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(commit)
        try:
            outcome: Any = running.result(timeout=60)
        except Exception as error:
            outcome = error
    assert s3.stalled() == 1
    s3.release_stalls()
    wait_until(lambda: s3.stalled() == 0)
    s3.configure()
    return outcome


def id_taken_while_its_swap_is_held(
    s3: S3Endpoint,
    writer: Registry,
    mover: Registry,
    *,
    meanwhile: Callable[[], object] = lambda: None,
) -> tuple[BaseException | None, CommitResult]:
    """``writer`` commits ``beta`` under ``job-42``: its intent is written and its first
    swap held at the endpoint while ``mover`` commits ``alpha`` under the same id (and
    ``meanwhile()`` runs); let go, the swap is refused (the root moved) and the writer reads
    the root that records ``job-42`` for ``alpha``. Returns what the ``beta`` commit raised
    (``None``: it committed) and the ``alpha`` commit."""
    s3.inject("stall", operation="PutObject", prefix=ROOT, count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        refused = pool.submit(
            writer.commit, "beta", add=[datafile("beta", "", "b")], commit_id="job-42"
        )
        wait_until(lambda: s3.stalled() == 1)
        taken = mover.commit("alpha", add=[datafile("alpha", "", "taken")], commit_id="job-42")
        meanwhile()
        s3.release_stalls()
        return refused.exception(timeout=60), taken
