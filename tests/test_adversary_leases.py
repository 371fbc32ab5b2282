"""Adversarial tests of leases with fencing (README, "Locks, leases and the bucket policy":
a lease's fencing token, carried by a commit, "makes the registry refuse a holder paused past
its expiry"). Each ``Lease`` stands for one process; time is simulated (the server's ``Date``
and the machines' monotonic clocks, tests/_support/simtime.py): nothing sleeps."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import lease_key
from lakelock._s3 import ObjectStore
from lakelock.errors import InvalidArgumentError, LockTimeout, StaleFenceError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.processes import InProcess
from tests._support.simtime import SimTime


def test_a_holder_paused_past_a_takeover_is_refused_before_the_new_holder_commits(
    store: ObjectStore,
) -> None:
    """A nightly job holds lease ``rebuild`` (token 1), reads ``sales`` and is paused (a
    stopped VM) past its TTL with its overwrite still to send. Another machine takes the
    lease over (token 2), reads ``sales`` and starts rebuilding it. The paused job wakes and
    sends its overwrite under token 1: the registry must refuse it, as the README promises
    for a holder paused past its expiry. Landing, it replaces the partition under the new
    leader, who read the lake before it and then overwrites it in turn: two leaders' writes
    interleaved, the very thing the lease was taken to prevent."""
    sim = SimTime()
    sim.attach(store.client)
    lake = Lake(store.bucket, s3=store.client, retry=FAST_RETRY)
    lake.append("sales", pa.table({"id": [1]}))
    paused = lake.lease("rebuild", ttl=5, clock=sim.machine(), sleep=sim.sleep, heartbeat=False)
    assert paused.try_acquire()
    stale = paused.fence  # taken before the pause, as a job takes it before its work
    sim.advance(60)
    other = Lake(store.bucket, s3=store.client, retry=FAST_RETRY)  # another machine
    taker = other.lease(
        "rebuild", ttl=5, clock=sim.machine(base=7.0), sleep=sim.sleep, heartbeat=False
    )
    assert taker.try_acquire()
    assert taker.fence.token > stale.token
    with pytest.raises(StaleFenceError):
        lake.overwrite("sales", pa.table({"id": [9]}), fence=stale)
    assert lake.read("sales").to_pylist() == [{"id": 1}]


def test_a_lease_or_lock_asked_to_hold_forever_is_refused_before_it_is_written(
    client: Any, bucket: str
) -> None:
    """A job takes lease ``nightly`` with ``ttl=float("inf")`` ("until I release it"). JSON
    has no infinity: the lease object was written with ``"ttl": null``, and every later
    acquire of ``nightly``, by any process, failed for good on a document it cannot parse
    (the object is never deleted: its token lives there); a lock table held so was unreadable
    to every other process while held (for good, had its holder crashed), and the
    heartbeat's thread died on the infinite wait. An infinite (or NaN) ``ttl``,
    ``margin`` or ``poll_interval`` must be InvalidArgumentError before any request, and the
    lease stays usable."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    refused = 0
    for ttl in (float("inf"), float("nan")):
        with contextlib.suppress(InvalidArgumentError):
            forever = lake.lease("nightly", ttl=ttl, heartbeat=False).acquire()
            forever.release()
            refused -= 1
        refused += 1
    other = lake.lease("nightly", ttl=30, heartbeat=False)
    assert other.try_acquire()
    other.release()
    assert refused == 2
    with pytest.raises(InvalidArgumentError):
        lake.lock(write=["/sales"], ttl=float("inf"))
    with pytest.raises(InvalidArgumentError):
        lake.lease("nightly", poll_interval=float("inf"))
    with pytest.raises(InvalidArgumentError):
        lake.lease("nightly", margin=float("nan"))


@pytest.mark.parametrize("seconds", [1e12, 10**15])
def test_a_lease_or_lock_asked_to_hold_for_ages_is_refused_before_it_is_written(
    client: Any, bucket: str, seconds: float
) -> None:
    """Refused ``ttl=float("inf")``, a job asks for ``ttl=1e12`` ("until I release it"). The
    lease was written expiring in the year 33,000: every other process's ``try_acquire`` or
    ``acquire`` then died on a ``ValueError`` (its expiry is no date Python can show) instead
    of waiting or hearing ``LockTimeout``, ``lakelock locks`` could list no lease or lock of
    the lake, and the holder's heartbeat thread died on a wait the platform cannot make
    (``OverflowError``). A ``ttl``, ``margin`` or ``poll_interval`` beyond a century must be
    InvalidArgumentError before any request, and the lease stays usable."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    with pytest.raises(InvalidArgumentError, match="at most"):
        lake.lease("nightly", ttl=seconds)
    with pytest.raises(InvalidArgumentError, match="at most"):
        lake.lease("nightly", poll_interval=seconds)
    with pytest.raises(InvalidArgumentError, match="at most"):
        lake.lock(write=["/sales"], ttl=seconds)
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="metastore/")
    other = Lake(bucket, s3=client, retry=FAST_RETRY).lease("nightly", ttl=30, heartbeat=False)
    assert other.try_acquire()
    other.release()


def test_a_lease_written_to_expire_in_ages_leaves_the_others_waiting_not_crashing(
    s3: S3Endpoint, client: Any, admin: Any, bucket: str, in_process: InProcess
) -> None:
    """A lease written before lakelock bounded ``ttl`` (or by hand) expires in the year
    33,000. The others must wait for it as for any held lease (``try_acquire`` is false,
    ``acquire`` is ``LockTimeout``) and ``lakelock locks`` must list it: they died on a
    ``ValueError`` while saying until when they would wait, and the listing with them."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    holder = lake.lease("nightly", ttl=30, heartbeat=False)
    assert holder.try_acquire()
    key = lease_key("nightly")
    document = orjson.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    document.update(ttl=1e12, expires_at=document["expires_at"] + 1e12)
    admin.put_object(Bucket=bucket, Key=key, Body=orjson.dumps(document))
    other = Lake(bucket, s3=client, retry=FAST_RETRY).lease("nightly", ttl=30, heartbeat=False)
    assert not other.try_acquire()
    with pytest.raises(LockTimeout):
        other.acquire(timeout=0)
    listed = in_process("locks", f"s3://{bucket}", "--endpoint-url", s3.url)
    assert listed.returncode == 0, listed.stderr
    assert "nightly" in listed.stdout


@pytest.mark.parametrize(
    "option",
    [{"ttl": "30"}, {"margin": "1"}, {"poll_interval": "1"}, {"timeout": "5"}, {"timeout": True}],
)
def test_a_lease_or_lock_given_seconds_as_text_is_refused_with_a_typed_error(
    client: Any, bucket: str, option: dict[str, Any]
) -> None:
    """A job reads its lease's ``ttl`` or ``timeout`` from a config file or an environment
    variable, as text (``"30"``), or a flag as a bool. The answer was Python's own
    ``TypeError`` ("must be real number, not str", "'>=' not supported between instances
    of 'str' and 'int'"), from deep in the lease, not the typed error of ``lakelock.errors``
    naming the option that every other bad value gets; ``timeout=True`` waited one second.
    Each is ``InvalidArgumentError`` when the lease or lock is made, before any request,
    and on ``acquire`` too."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    with pytest.raises(InvalidArgumentError):
        lake.lease("nightly", **option)
    with pytest.raises(InvalidArgumentError):
        lake.lock(write=["/sales"], **option)
    if "timeout" in option:
        with pytest.raises(InvalidArgumentError):
            lake.lease("nightly", heartbeat=False).acquire(timeout=option["timeout"])
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="metastore/leases/")
