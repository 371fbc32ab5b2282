"""Adversarial tests of a lease's name (README, "Locks, leases and the bucket policy": a
lease elects one holder among many machines; lakelock._names: a lease name has "no control
characters"). A pipeline names its lease after its job, and a job's name read from a file
in a Windows code page but decoded as Latin-1 brings C1 control characters along (cp1252's
"…" is byte 0x85, which Latin-1 reads as U+0085, NEXT LINE)."""

from __future__ import annotations

from typing import Any

import pytest

from lakelock import Lake
from lakelock.errors import InvalidNameError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY
from tests._support.processes import InProcess


@pytest.mark.parametrize("name", ["nightly\x85", "nightly\x9b2K", "nightly\x80"])
def test_a_lease_name_with_a_c1_control_character_is_refused_before_it_is_written(
    s3: S3Endpoint, client: Any, bucket: str, in_process: InProcess, name: str
) -> None:
    """``lake.lease(name)`` given a name holding a C1 control character (U+0080-U+009F) is
    refused (``InvalidNameError``), as one holding a C0 one is, before anything is written;
    ``lakelock locks`` then lists no lease. What an operator lost: the name was written into
    the lease's key and document as given, and ``lakelock locks`` printed it raw to the
    terminal, where U+009B starts a control sequence (``\\x9b2K`` erases the line the live
    lease was listed on) and U+0085 breaks the line: the table an operator reads to learn
    who holds what was not the lake's."""
    lake = Lake(bucket, s3=client, retry=FAST_RETRY)
    with pytest.raises(InvalidNameError, match="control character"), lake.lease(name, ttl=30):
        pass
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="metastore/leases/")
    listed = in_process("locks", f"s3://{bucket}", "--endpoint-url", s3.url)
    assert name not in listed.stdout
