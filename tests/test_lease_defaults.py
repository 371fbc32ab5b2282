"""What a lease user sees without reading the docs: a heartbeat by default, a waiting
acquirer that says whom it waits for and until when, and a ttl error that explains the
margin."""

from __future__ import annotations

import logging

import pytest

from lakelock import Lake
from lakelock.errors import LockTimeout


def test_a_lease_has_a_heartbeat_by_default(lake: Lake) -> None:
    lease = lake.lease("job", ttl=30)
    assert lease.terms.heartbeat is True
    assert lake.lease("job", ttl=30, heartbeat=False).terms.heartbeat is False


def test_a_waiting_acquirer_says_whom_it_waits_for_and_who_waits(
    lake: Lake, caplog: pytest.LogCaptureFixture
) -> None:
    holder = lake.lease("job", ttl=30, owner_label="nightly", heartbeat=False)
    holder.acquire(timeout=0)
    try:
        waiter = lake.lease("job", ttl=30, owner_label="hourly", heartbeat=False)
        with caplog.at_level(logging.WARNING, logger="lakelock.lease"), pytest.raises(LockTimeout):
            waiter.acquire(timeout=0)
    finally:
        holder.release()
    (record,) = [r for r in caplog.records if r.name == "lakelock.lease"]
    message = record.getMessage()
    assert "lease 'job' is held by" in message
    assert "nightly" in message
    assert "(token 1) until " in message
    assert "UTC: " in message
    assert "hourly" in message.split("UTC: ", 1)[1]  # who waits: two waiters' lines differ
    assert "is waiting up to" in message


def test_the_ttl_error_says_which_margin(lake: Lake) -> None:
    with pytest.raises(ValueError, match="clock safety margin") as info:
        lake.lease("job", ttl=2)
    assert "ttl (2) must exceed twice the margin (1.0)" in str(info.value)
