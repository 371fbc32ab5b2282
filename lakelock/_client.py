"""The one place lakelock builds a boto3 S3 client.

Standard retry mode: the SDK retries 5xx answers and broken connections a bounded number of
times (each retry of a conditional write is then resolved by the adapter's write ids, see
:mod:`lakelock._s3`); 409 and 412 are never retried by the SDK: lakelock decides those. A
pool of 64 connections, so group commit and parallel uploads do not queue for a socket. A
connection not made within 10 s is given up (the SDK's default waits 60 s per attempt on an
unresponsive host). An answer not coming within a third of the read budget (``read_timeout``,
:data:`DEFAULT_READ_TIMEOUT` seconds) ends the try, so a read's three tries fit in the budget
(:mod:`lakelock._s3._classify`); a write that timed out is an unknown outcome, resolved as
ever.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

__all__ = ["DEFAULT_READ_TIMEOUT", "READ_TRIES", "s3_client"]

#: Seconds a read (GET, HEAD, LIST) may take, all its tries included, before
#: :class:`~lakelock.errors.ReadTimeoutError`.
DEFAULT_READ_TIMEOUT = 30.0
#: The tries of a read that times out that fit in the budget: each waits a third of it.
READ_TRIES = 3


def s3_client(
    *,
    profile_name: str | None = None,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    **client_kwargs: Any,
) -> Any:
    """A boto3 S3 client, with the credentials of ``profile_name`` if given (else boto3's
    default chain); each try waits ``read_timeout / READ_TRIES`` seconds for an answer;
    ``client_kwargs`` go to ``client("s3", ...)``, and a ``config`` among them is merged over
    lakelock's (its settings win)."""
    config = Config(
        retries={"mode": "standard", "total_max_attempts": 5},
        max_pool_connections=64,
        connect_timeout=10,
        read_timeout=read_timeout / READ_TRIES,
    )
    if "config" in client_kwargs:
        config = config.merge(client_kwargs.pop("config"))
    factory = (
        boto3.client if profile_name is None else boto3.Session(profile_name=profile_name).client
    )
    return factory("s3", config=config, **client_kwargs)
