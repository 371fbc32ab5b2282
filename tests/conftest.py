"""Shared fixtures: one embedded S3 endpoint per test session, a fresh bucket per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.testing import S3Endpoint

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


@pytest.fixture
def bucket(s3: S3Endpoint, request: pytest.FixtureRequest) -> str:
    """A new, empty bucket for this test."""
    name = f"test-{next(_bucket_numbers)}-{request.node.name[:30]}".lower()
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name).strip("-")[:63]
    s3.create_bucket(name)
    return name


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
