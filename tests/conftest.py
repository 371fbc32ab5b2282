"""Shared fixtures: one embedded S3 endpoint per test session, a fresh bucket per test."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from lakelock._policy import generate_bucket_policy
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.testing import DEFAULT_ACCESS_KEY, S3Endpoint
from lakelock.testing._policy_gate import DEFAULT_PRINCIPAL_ACCOUNT

# LocalStack's S3 for the opt-in `localstack` tests (the `localstack` fixture).
pytest_plugins = ("tests._localstack",)

_bucket_numbers = itertools.count()


@pytest.fixture(scope="session")
def endpoint() -> Iterator[S3Endpoint]:
    """The embedded S3 endpoint, reached over HTTP on 127.0.0.1."""
    with S3Endpoint() as s3:
        yield s3


@pytest.fixture
def s3(endpoint: S3Endpoint) -> Iterator[S3Endpoint]:
    """The endpoint with no faults, no conflicts mode and zeroed counts, before and after."""
    endpoint.clear_faults()
    endpoint.configure(concurrent_conflicts=False)
    endpoint.reset_stats()
    yield endpoint
    endpoint.release_stalls()
    endpoint.clear_faults()
    endpoint.configure(concurrent_conflicts=False)


#: Who the endpoint's default client is, as bucket policies see it.
WRITER = f"arn:aws:iam::{DEFAULT_PRINCIPAL_ACCOUNT}:user/{DEFAULT_ACCESS_KEY}"


@pytest.fixture
def bucket(s3: S3Endpoint, request: pytest.FixtureRequest) -> str:
    """A new, empty bucket for this test, guarded by the policy lakelock generates (every
    unconditional write to datasets/ and metastore/ refused, deletes only with If-Match), so
    every protocol test also proves the policy lets lakelock's own requests through. Tests
    marked ``unguarded`` (raw S3 behaviour, other policies) get a bare bucket."""
    name = f"test-{next(_bucket_numbers)}-{request.node.name[:30]}".lower()
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name).strip("-")[:63]
    s3.create_bucket(name)
    if request.node.get_closest_marker("unguarded") is None:
        policy = generate_bucket_policy(name, principals=[WRITER], deny_unconditional_delete=True)
        s3.client().put_bucket_policy(Bucket=name, Policy=orjson.dumps(policy).decode())
    return name


@pytest.fixture
def admin(s3: S3Endpoint) -> Any:
    """A client the bucket policy does not bind: another writer that ignores the rules, to
    plant objects the way a misbehaving tool would."""
    return s3.client(access_key="admin")


@pytest.fixture
def client(s3: S3Endpoint) -> Any:
    """A boto3 client for the endpoint."""
    return s3.client()


def no_sleep(seconds: float) -> None:
    """Retry backoff that does not wait: tests force outcomes, they do not wait them out."""


FAST_RETRY = RetryPolicy(max_attempts=10, sleep=no_sleep)


@pytest.fixture
def store(client: Any, bucket: str) -> ObjectStore:
    """An ObjectStore on the test bucket; small multipart threshold; retries without waiting."""
    return ObjectStore(client, bucket, multipart_threshold=6 * 1024 * 1024, retry=FAST_RETRY)


def wait_until(condition: Callable[[], bool], *, attempts: int = 4000) -> None:
    """Poll a server-side condition (a stalled request arriving), bounded: this waits for an
    event that is certain to happen, it does not let time pass to make something happen."""
    for _ in range(attempts):
        if condition():
            return
        time.sleep(0.005)
    raise AssertionError("condition never held")
