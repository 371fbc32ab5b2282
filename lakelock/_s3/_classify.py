"""What an S3 answer means: every failed request becomes one typed lakelock error.

Every response is classified on its S3 error code first and its HTTP status second
(CompleteMultipartUpload and UploadPartCopy can fail inside a 200, which botocore turns into an
error with the real code): 412 → :class:`AlreadyExistsError` (a create) or
:class:`PreconditionFailedError`, 404 → :class:`NotFoundError`, 409 ConditionalRequestConflict
→ :class:`ConflictError`, 503 SlowDown → :class:`ThrottledError`, 403 →
:class:`AccessDeniedError`, 501 → :class:`UnsupportedError`, a 4xx with no S3 error code on
anything but a HEAD → :class:`NotS3Error` (not an S3 endpoint at all), timeouts, resets and 5xx that
outlived the SDK's retries → :class:`OutcomeUnknownError`.

**A dead endpoint fails fast.** A connection that cannot be made (refused, unresolvable host,
TLS spoken to a plain-HTTP port, connect timeout) is tried :data:`CONNECT_ATTEMPTS` times with
short pauses (a hook on the client's ``needs-retry`` event, in place of the SDK's backoff of up
to 20 s), then reported as :class:`EndpointUnreachableError`: no attempt reached a server, so
nothing was applied and callers do not retry it. If an earlier attempt of the same request did
reach the server (a read timeout, a reset) the request stays :class:`OutcomeUnknownError`.
Missing credentials are :class:`CredentialsError`, raised before anything is sent.

**A read gives up within its budget.** A read (``Get*``, ``Head*``, ``List*``: nothing it does
changes the bucket) that times out is tried again only while one more try still fits in the
store's ``read_timeout`` (tries times the client's per-try ``read_timeout``; a hook on the
client's ``needs-retry`` event, :func:`bound_reads`), then raised as
:class:`ReadTimeoutError`: an endpoint that accepts connections and never answers fails a read
in ``read_timeout`` seconds, not after the SDK's five tries of 60 s. Clients lakelock makes
try a read for a third of the budget (:func:`~lakelock._client.s3_client`), so three tries
fit; a client of your own keeps its ``read_timeout`` per try (botocore's default: 60 s), and
lakelock does not retry a read past the budget. The unknown-outcome error is for writes: a
read that timed out changed nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ProxyConnectionError,
    SSLError,
)
from botocore.exceptions import ReadTimeoutError as SdkReadTimeout

from lakelock._s3._types import IfMatch, PutMode
from lakelock.errors import (
    AccessDeniedError,
    AlreadyExistsError,
    ConflictError,
    CredentialsError,
    EndpointUnreachableError,
    NotFoundError,
    NotS3Error,
    OutcomeUnknownError,
    PreconditionFailedError,
    ReadTimeoutError,
    StorageError,
    ThrottledError,
    UnsupportedError,
)

__all__ = [
    "CONNECT_ATTEMPTS",
    "CONNECT_BACKOFF",
    "Call",
    "bound_reads",
    "classify",
    "fail_fast_on_dead_endpoints",
    "is_read",
    "read_budget",
    "retry_attempts",
]

#: Attempts at a connection that cannot be made before :class:`EndpointUnreachableError`,
#: and the pause before the second one (doubling after).
CONNECT_ATTEMPTS = 3
CONNECT_BACKOFF = 0.1
#: SDK failures raised before a connection existed: the request never left this machine.
_UNCONNECTED = (EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError, SSLError)
#: Set on such a failure when no earlier attempt of the same request reached a server.
_UNREACHED = "_lakelock_unreached"
_REACHED = "lakelock_reached"


def fail_fast_on_dead_endpoints(client: Any) -> None:
    """Hook ``client`` so that a connection that cannot be made is retried only
    :data:`CONNECT_ATTEMPTS` times, quickly, and marked as never sent (module docstring).
    Idempotent; every other failure is left to the SDK's own retry policy."""
    retries = dict(client.meta.config.retries or {})
    if "total_max_attempts" in retries:
        configured = int(retries["total_max_attempts"])
    elif "max_attempts" in retries:
        configured = int(retries["max_attempts"]) + 1
    else:
        configured = 5 if retries.get("mode") == "legacy" else 3
    limit = max(1, min(CONNECT_ATTEMPTS, configured))

    def needs_retry(
        attempts: int,
        caught_exception: BaseException | None = None,
        request_dict: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> float | bool | None:
        context = request_dict.get("context") if request_dict is not None else None
        if not isinstance(caught_exception, _UNCONNECTED):
            if isinstance(context, dict):
                context[_REACHED] = True  # a response, or a failure after connecting
            return None  # the SDK's policy decides
        if not (isinstance(context, dict) and context.get(_REACHED)):
            setattr(caught_exception, _UNREACHED, True)
        if attempts >= limit:
            return False  # the first non-None answer wins: no further attempt
        return CONNECT_BACKOFF * float(2 ** (attempts - 1))

    client.meta.events.register_first(
        "needs-retry.s3", needs_retry, unique_id="lakelock-fail-fast-on-dead-endpoints"
    )


#: The read budget of each client :func:`bound_reads` hooked, in seconds.
_READ_BUDGETS: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def is_read(operation: str) -> bool:
    """Whether an S3 operation only reads (it changes nothing in the bucket)."""
    return operation.startswith(("Get", "Head", "List"))


def read_budget(client: Any) -> float | None:
    """The seconds a read through ``client`` may take (:func:`bound_reads`), if bounded."""
    return _READ_BUDGETS.get(client)


def bound_reads(client: Any, seconds: float) -> None:
    """Hook ``client`` so that a read that timed out is tried again only while one more try
    (of the client's ``read_timeout``) still fits in ``seconds`` (module docstring). The
    latest budget given for a client is the one it keeps."""
    if not seconds > 0:
        raise ValueError(f"read_timeout must be > 0 seconds, got {seconds!r}")
    _READ_BUDGETS[client] = seconds
    per_try = float(client.meta.config.read_timeout or 60)

    def needs_retry(
        attempts: int,
        caught_exception: BaseException | None = None,
        operation: Any = None,
        **_: Any,
    ) -> bool | None:
        if not isinstance(caught_exception, SdkReadTimeout) or operation is None:
            return None
        if not is_read(operation.name):
            return None  # a write's timeout is an unknown outcome: the SDK's policy decides
        budget = _READ_BUDGETS.get(client, seconds)
        return False if (attempts + 1) * per_try > budget + 1e-9 else None

    client.meta.events.register_first(
        "needs-retry.s3", needs_retry, unique_id="lakelock-bound-reads"
    )


@dataclass
class Call:
    """What a failed request was, for classification."""

    operation: str
    key: str | None
    mode: PutMode | None = None


def classify(
    error: ClientError | BotoCoreError,
    *,
    bucket: str,
    call: Call,
    prefix: str = "",
    read_timeout: float | None = None,
) -> StorageError:
    """The typed lakelock error for one failed S3 request (module docstring has the table)."""
    key = call.key
    where = f"{call.operation} s3://{bucket}/{prefix}{key or ''}"
    if isinstance(error, _UNCONNECTED) and getattr(error, _UNREACHED, False):
        url = urlsplit(str(error.kwargs.get("endpoint_url") or ""))
        endpoint = f"{url.scheme}://{url.netloc}" if url.netloc else None
        return EndpointUnreachableError(
            f"{where}: cannot connect to {endpoint or 'the S3 endpoint'} "
            f"({type(error).__name__}): is it running, and is the URL right?",
            endpoint=endpoint,
            bucket=bucket,
            key=key,
            operation=call.operation,
        )
    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return CredentialsError(
            f"{where}: {error}: configure AWS credentials (a profile, or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
            bucket=bucket,
            key=key,
            operation=call.operation,
        )
    if isinstance(error, SdkReadTimeout) and is_read(call.operation):
        return ReadTimeoutError(
            f"{where}: no answer within the read timeout ({error}); a read changes nothing: "
            "try again later, or check the endpoint",
            seconds=read_timeout,
            bucket=bucket,
            key=key,
            operation=call.operation,
        )
    if isinstance(error, BotoCoreError):
        return OutcomeUnknownError(
            f"{where}: {type(error).__name__}: {error}",
            bucket=bucket,
            key=key,
            operation=call.operation,
        )
    info = error.response.get("Error", {})
    code = str(info.get("Code", ""))
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    message = f"{where}: {status} {code} {info.get('Message', '')}".strip()
    fields: dict[str, Any] = {
        "bucket": bucket,
        "key": key,
        "operation": call.operation,
        "status": status,
        "code": code,
    }
    if isinstance(call.mode, IfMatch):
        fields["expected_etag"] = call.mode.etag
    if code == "PreconditionFailed" or status == 412:
        if call.mode == "create":
            return AlreadyExistsError(message, **fields)
        return PreconditionFailedError(message, **fields)
    if _not_s3(call.operation, code, status):
        headers = error.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        server = headers.get("server")
        return NotS3Error(
            f"{where}: {status} with no S3 error in the answer"
            f"{f' (server {server!r})' if server else ''}: the endpoint does not speak S3; "
            "is the endpoint URL that of an S3 API?",
            server=server,
            **fields,
        )
    if code in {"NoSuchKey", "NoSuchBucket", "NoSuchUpload", "NotFound", "404"} or status == 404:
        return NotFoundError(message, **fields)
    if code == "ConditionalRequestConflict" or status == 409:
        return ConflictError(message, **fields)
    if (
        code in {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded"}
        or status == 503
    ):
        return ThrottledError(message, **fields)
    if code == "AccessDenied" or status == 403:
        return AccessDeniedError(message, **fields)
    if code == "NotImplemented" or status == 501:
        return UnsupportedError(message, **fields)
    if status >= 500 or code in {"InternalError", "RequestTimeout", "ServiceUnavailable"}:
        return OutcomeUnknownError(message, **fields)
    return StorageError(message, **fields)


def _not_s3(operation: str, code: str, status: int) -> bool:
    """An S3 error answer carries an error code in its body; botocore falls back to the bare
    HTTP status when there is none. Only a HEAD (no body, ever) may lack one: any other 4xx
    without a code came from something that is not S3 (``python -m http.server``)."""
    return 400 <= status < 500 and code in {"", str(status)} and not operation.startswith("Head")


def retry_attempts(error: ClientError) -> int:
    """How many times the SDK resent the request that failed with ``error``."""
    return int(error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0))
