"""The one place lakelock builds a boto3 S3 client.

Standard retry mode: the SDK retries 5xx answers and broken connections a bounded number of
times (each retry of a conditional write is then resolved by the adapter's write ids, see
:mod:`lakelock._s3`); 409 and 412 are never retried by the SDK: lakelock decides those. A
pool of 64 connections, so group commit and parallel uploads do not queue for a socket. A
connection not made within 10 s is given up (the SDK's default waits 60 s per attempt on an
unresponsive host).
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

__all__ = ["s3_client"]


def s3_client(*, profile_name: str | None = None, **client_kwargs: Any) -> Any:
    """A boto3 S3 client, with the credentials of ``profile_name`` if given (else boto3's
    default chain); ``client_kwargs`` go to ``client("s3", ...)``, and a ``config`` among them
    is merged over lakelock's (its settings win)."""
    config = Config(
        retries={"mode": "standard", "total_max_attempts": 5},
        max_pool_connections=64,
        connect_timeout=10,
    )
    if "config" in client_kwargs:
        config = config.merge(client_kwargs.pop("config"))
    factory = (
        boto3.client if profile_name is None else boto3.Session(profile_name=profile_name).client
    )
    return factory("s3", config=config, **client_kwargs)
