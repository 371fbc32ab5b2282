"""``Expect: 100-continue`` only where it can pay: bodies of 2 MiB and more.

botocore asks S3 for permission before sending the body of every ``PutObject`` and
``UploadPart`` (``Expect: 100-continue``): the client sends the headers, waits for the server's
``100 Continue``, and only then sends the body. For a large body this lets S3 refuse (a failed
precondition, a denied write) before the body crosses the network. For a small one it costs a
round trip between client and server on every write and saves nothing: the body would have
been sent in the time the permission took. lakelock's registry writes are all small (intents,
manifests, snapshots, index nodes, the root), and a commit's latency is a chain of them.

The AWS SDKs for Go (v2) and Kotlin send the header only from a body of 2 MiB
(``ContinueHeaderThresholdBytes``, ``continueHeaderThresholdBytes``);
:func:`continue_only_for_large_bodies` makes a boto3 client do the same. Measured on the
embedded endpoint, in-process group commit was about a tenth faster with it
(docs/decisions/0009-expect-100-continue-from-2-mib.md): under load, each of those extra
exchanges waited its turn in both processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.utils import determine_content_length

__all__ = ["CONTINUE_THRESHOLD", "continue_only_for_large_bodies"]

#: Bodies at least this large keep ``Expect: 100-continue`` (the Go and Kotlin SDKs' default).
CONTINUE_THRESHOLD = 2 * 1024 * 1024


def _drop_expect_for_small_bodies(params: Mapping[str, Any], **_: Any) -> None:
    headers = params.get("headers")
    if not isinstance(headers, dict) or "Expect" not in headers:
        return
    try:
        size = determine_content_length(params.get("body"))
    except (OSError, ValueError):  # a body that cannot tell its length (a pipe): keep asking
        return
    if size is not None and size < CONTINUE_THRESHOLD:
        del headers["Expect"]


def continue_only_for_large_bodies(client: Any) -> None:
    """Hook ``client`` so that a write whose body is known to be under
    :data:`CONTINUE_THRESHOLD` bytes goes out without ``Expect: 100-continue``. Idempotent.
    Registered after botocore's own handler for the same event, which adds the header."""
    client.meta.events.register(
        "before-call.s3",
        _drop_expect_for_small_bodies,
        unique_id="lakelock-continue-only-for-large-bodies",
    )
