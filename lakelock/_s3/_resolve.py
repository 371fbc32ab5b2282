"""Lost acknowledgements: the true outcome of a conditional write whose answer was lost.

boto3 retries 5xx and broken connections, so a conditional write can be applied, lose its
response, and be retried into a 412 against itself. Each write therefore carries a write id in
object metadata (``x-amz-meta-lakelock-write-id``). When a 412 follows an SDK retry, or the
outcome is unknown, the object is read back: our write id means our write landed and the call
succeeds (``PutResult.resolved``); anything else is reported as it is. For a compare-and-swap
the read-back cannot prove a negative (our write may have landed and been overwritten since),
so that case is :class:`OutcomeUnknownError` and the caller (the registry) resolves it from
its own document.

A compare-and-swap the SDK sent again and that was answered 409 ConditionalRequestConflict or
503 is not "not applied" either: AWS answers 409 to a conditional write that meets another
write of the key in flight, and that write may be this one's first attempt (timed out at the
client, still under way at the server), which lands afterwards (:func:`may_still_land`). It
is read back like any unknown outcome, and is :class:`OutcomeUnknownError` unless it is ours.
"""

from __future__ import annotations

from typing import Protocol, TypedDict

from botocore.exceptions import BotoCoreError, ClientError, SSLError

from lakelock._s3._classify import Call, classify, retry_attempts
from lakelock._s3._types import IfMatch, ObjectHead, PutResult
from lakelock.errors import (
    AlreadyExistsError,
    ConflictError,
    EndpointUnreachableError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    StorageError,
    ThrottledError,
)

__all__ = ["may_still_land", "resolve_write"]


class _ReadBack(Protocol):
    """What the read-back needs of the store (:class:`~lakelock._s3.ObjectStore`)."""

    bucket: str
    prefix: str

    def head(self, key: str) -> ObjectHead: ...


class _Where(TypedDict):
    """Where a failed write was aimed, as every error of it says."""

    bucket: str
    key: str | None
    operation: str


def may_still_land(failure: StorageError, call: Call, *, retried: bool) -> bool:
    """Whether a compare-and-swap answered 409 or 503 may still land: when the SDK sent it
    more than once (``retried``: the SDK retries no 409, so an earlier attempt timed out,
    broke off or got a 5xx), that attempt may be in flight at the server (module
    docstring). The store's own retries follow a 409 or 503 that was not: those were not
    applied. A create-only write is left to the store's retries: a later attempt meets the
    write that landed and is resolved by its write id."""
    return (
        retried
        and isinstance(call.mode, IfMatch)
        and isinstance(failure, ConflictError | ThrottledError)
    )


def resolve_write(
    store: _ReadBack,
    error: ClientError | BotoCoreError,
    call: Call,
    write_id: str,
    size: int,
    *,
    resent: bool = False,
) -> PutResult:
    """Turn a failed conditional write of ``store`` into its true outcome (module docstring).
    ``resent``: an earlier attempt of this very write was sent and may have landed."""
    failure = classify(error, bucket=store.bucket, call=call, prefix=store.prefix)
    sdk_retried = isinstance(error, ClientError) and retry_attempts(error) > 0
    retried = resent or sdk_retried
    # A connection never made sent nothing, unless an earlier attempt of this write did
    # (``resent``), or TLS failed, which can also happen once the request is under way.
    unsent = isinstance(failure, EndpointUnreachableError) and not (
        resent or isinstance(error, SSLError)
    )
    where: _Where = {"bucket": store.bucket, "key": call.key, "operation": call.operation}
    if isinstance(failure, EndpointUnreachableError) and not unsent:
        failure = OutcomeUnknownError(str(failure), **where)
    ambiguous = (
        isinstance(failure, OutcomeUnknownError)
        or (
            retried
            and isinstance(failure, AlreadyExistsError | PreconditionFailedError | NotFoundError)
        )
        or may_still_land(failure, call, retried=sdk_retried)
    )
    if not ambiguous:
        raise failure from error
    assert call.key is not None
    try:
        current = store.head(call.key)
    except NotFoundError:
        current = None
    except StorageError as read_error:
        raise OutcomeUnknownError(
            f"{call.operation} {call.key!r}: outcome unknown and the read-back failed", **where
        ) from read_error
    if current is not None and current.write_id == write_id:
        return PutResult(
            call.key, current.etag, write_id, size, resolved=True, server_time=current.server_time
        )
    if call.mode == "create" and current is not None:
        raise AlreadyExistsError(
            f"{call.key!r} already exists (written by another writer)",
            **where,
            status=412,
            code="PreconditionFailed",
            actual_etag=current.etag,
        ) from error
    if isinstance(failure, OutcomeUnknownError):
        raise failure from error
    why = (
        f"the SDK's retry was answered {failure.status} while an earlier attempt may still be "
        "in flight at the server; it may land"
        if isinstance(failure, ConflictError | ThrottledError)
        else "retried into a 412 and the object is not ours; our write may have landed and "
        "been replaced since"
    )
    raise OutcomeUnknownError(
        f"{call.operation} {call.key!r}: {why}",
        **where,
        status=failure.status,
        code=failure.code,
        expected_etag=failure.expected_etag,
        actual_etag=current.etag if current is not None else None,
    ) from error
