"""Adversarial tests of a lease's owner label (README, "Locks, leases and the bucket policy":
a lease elects one holder among many machines). The label is for humans, but it is written
into the lease's document, which every process that wants the lease parses."""

from __future__ import annotations

from typing import Any

import pytest

from lakelock import Lake
from lakelock.errors import InvalidArgumentError
from tests._support import FAST_RETRY


@pytest.mark.parametrize("label", [42, {"team": "etl"}, b"etl", "\ud800"])
def test_a_lease_labelled_with_anything_but_text_is_refused_and_stays_electable(
    client: Any, bucket: str, label: Any
) -> None:
    """``lake.lease(name, owner_label=...)`` given a number, a mapping, bytes or text that is
    not UTF-8 is refused (``InvalidArgumentError``) before it writes, and another process
    then acquires the lease. What a user would lose: the label was written into the lease's
    document as given, which no process could parse again, so the lease could never be
    acquired by anyone (a ``LeaseError`` on every attempt: the nightly job never ran again),
    or the acquire died on an untyped error from the JSON encoder."""
    first = Lake(bucket, s3=client, retry=FAST_RETRY)
    with pytest.raises(InvalidArgumentError), first.lease("nightly", ttl=30, owner_label=label):
        pass
    second = Lake(bucket, s3=client, retry=FAST_RETRY)
    with second.lease("nightly", ttl=30, owner_label="compactor") as lease:
        assert lease.fence.token >= 1
