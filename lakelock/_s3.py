"""The S3 adapter: every request lakelock makes goes through :class:`ObjectStore`.

Writes state their precondition explicitly (obstore's ``PutMode``) and return the new ETag:

============  =======================  ==============================================
mode          header                   outcome when the precondition does not hold
============  =======================  ==============================================
``"create"``  ``If-None-Match: *``     :class:`AlreadyExistsError` (412)
``IfMatch``   ``If-Match: <etag>``     :class:`PreconditionFailedError` (412),
                                       :class:`NotFoundError` (404: key missing)
``"overwrite"``  none                  (unconditional; lakelock itself never uses it on
                                       protected prefixes)
============  =======================  ==============================================

Every response is classified on its S3 error code first and its HTTP status second
(CompleteMultipartUpload and UploadPartCopy can fail inside a 200, which botocore turns into an
error with the real code): 409 ConditionalRequestConflict → :class:`ConflictError`, 503 SlowDown
→ :class:`ThrottledError`, timeouts, resets and 5xx that outlived the SDK's retries →
:class:`OutcomeUnknownError`. Conflicts and throttling are retried here (nothing was applied);
every other outcome goes to the caller.

**A dead endpoint fails fast.** A connection that cannot be made (refused, unresolvable host,
TLS spoken to a plain-HTTP port, connect timeout) is tried :data:`CONNECT_ATTEMPTS` times with
short pauses (a hook on the client's ``needs-retry`` event, in place of the SDK's backoff of up
to 20 s), then reported as :class:`EndpointUnreachableError`: no attempt reached a server, so
nothing was applied and callers do not retry it. If an earlier attempt of the same request did
reach the server (a read timeout, a reset) the request stays :class:`OutcomeUnknownError`.
Missing credentials are :class:`CredentialsError`, raised before anything is sent.

**Lost acknowledgements.** boto3 retries 5xx and broken connections, so a conditional write can
be applied, lose its response, and be retried into a 412 against itself. Each write therefore
carries a write id in object metadata (``x-amz-meta-lakelock-write-id``). When a 412 follows
an SDK retry, or the outcome is unknown, the adapter reads the object back: our write id means
our write landed and the call succeeds (``PutResult.resolved``); anything else is reported as
it is. For a compare-and-swap the read-back cannot prove a negative (our write may have landed
and been overwritten since), so that case is :class:`OutcomeUnknownError` and the caller
(the registry) resolves it from its own document.

Large bodies go by multipart upload with the precondition on CompleteMultipartUpload; the
upload is aborted on every failure path (parts are billed until then). A 409 on completion
restarts the whole upload. Server-side copies are ``UploadPartCopy`` + conditional completion,
which is create-only on every S3 (``CopyObject`` honours ``If-None-Match`` only on AWS since
late 2025).

**Conditional deletes.** Not every store honours the ETag of a ``DeleteObjects`` entry (some
delete anyway), nor ``If-Match`` on ``DeleteObject`` (some answer 501).
:meth:`ObjectStore.delete_if_unchanged` finds out once per store which of the two the store
honours, by deleting a throwaway probe object with a wrong ETag first, and refuses with
:class:`UnsupportedError` where neither holds: deleting what changed since it was judged
deletable is never an option.

Requests are counted per operation in :class:`S3Stats` (retries included: it counts what was
sent over the wire).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import IO, Any, Literal, TypeVar
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

from lakelock._objects import (
    WRITE_ID_KEY,
    IfMatch,
    ListedObject,
    ObjectData,
    ObjectHead,
    PutMode,
    PutResult,
    S3Stats,
    chunks,
    new_write_id,
    read_all,
    size_of,
    stats_for,
)
from lakelock._retry import RetryPolicy
from lakelock.errors import (
    AccessDeniedError,
    AlreadyExistsError,
    ConflictError,
    CredentialsError,
    EndpointUnreachableError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    StorageError,
    ThrottledError,
    UnsupportedError,
)

__all__ = [
    "DELETE_PROBE_PREFIX",
    "WRITE_ID_KEY",
    "ConditionalDelete",
    "IfMatch",
    "ListedObject",
    "ObjectData",
    "ObjectHead",
    "ObjectStore",
    "PutMode",
    "PutResult",
    "S3Stats",
    "classify",
    "fail_fast_on_dead_endpoints",
    "new_write_id",
]

_T = TypeVar("_T")

MIB = 1024 * 1024
#: S3's smallest multipart part (except the last).
MIN_PART_SIZE = 5 * MIB
#: Attempts at a connection that cannot be made before :class:`EndpointUnreachableError`,
#: and the pause before the second one (doubling after).
CONNECT_ATTEMPTS = 3
CONNECT_BACKOFF = 0.1
#: SDK failures raised before a connection existed: the request never left this machine.
_UNCONNECTED = (EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError, SSLError)
#: Set on such a failure when no earlier attempt of the same request reached a server.
_UNREACHED = "_lakelock_unreached"
_REACHED = "lakelock_reached"

#: Where :meth:`ObjectStore.conditional_delete_method` writes its throwaway probe object.
DELETE_PROBE_PREFIX = "metastore/probes/"
#: An ETag no object has (an MD5 is never all zeros in practice).
_WRONG_ETAG = '"00000000000000000000000000000000"'

#: How a store deletes only what is unchanged (see :meth:`ObjectStore.delete_if_unchanged`).
ConditionalDelete = Literal["batch", "single"]


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


@dataclass
class _Call:
    """What a failed request was, for classification."""

    operation: str
    key: str | None
    mode: PutMode | None = None


@dataclass(frozen=True)
class _Write:
    """One put, as the single-request and multipart paths both need it."""

    key: str
    body: bytes | IO[bytes]
    size: int
    mode: PutMode
    metadata: dict[str, str]
    write_id: str
    content_type: str
    progress: Callable[[int], None] | None


class ObjectStore:
    """One bucket (and key prefix) through one boto3 client.

    Keys given to methods are relative to ``prefix``. ``multipart_threshold`` is the body size
    from which writes go by multipart upload, in parts of ``part_size`` bytes.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        prefix: str = "",
        multipart_threshold: int = 64 * MIB,
        part_size: int = 16 * MIB,
        retry: RetryPolicy | None = None,
    ) -> None:
        if part_size < 1:
            raise ValueError("part_size must be positive")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.retry = retry or RetryPolicy()
        self.stats = stats_for(client)
        fail_fast_on_dead_endpoints(client)
        self._delete_probe_lock = threading.Lock()
        self._delete_method: ConditionalDelete | Literal["none"] | None = None

    def full_key(self, key: str) -> str:
        return self.prefix + key

    # -- writes -------------------------------------------------------------------------------

    def put(
        self,
        key: str,
        body: bytes | IO[bytes],
        *,
        mode: PutMode = "create",
        metadata: Mapping[str, str] | None = None,
        write_id: str | None = None,
        content_type: str = "application/octet-stream",
        progress: Callable[[int], None] | None = None,
    ) -> PutResult:
        """Write ``body`` at ``key`` under the precondition ``mode``.

        Raises :class:`AlreadyExistsError` (create: another writer's object is there),
        :class:`PreconditionFailedError` / :class:`NotFoundError` (If-Match),
        :class:`OutcomeUnknownError` (not resolvable by reading back), and the rest of the
        :class:`StorageError` family. ``progress`` is called with byte counts as parts go.
        """
        write_id = write_id or new_write_id()
        write = _Write(
            key,
            body,
            size_of(body),
            mode,
            {**(metadata or {}), WRITE_ID_KEY: write_id},
            write_id,
            content_type,
            progress,
        )
        attempts = 0

        def once() -> PutResult:
            nonlocal attempts
            attempts += 1
            # From the second attempt on, an earlier one may have landed (its answer lost, then
            # a 409/503 on the SDK's retry): a 412 may then be our own write.
            resent = attempts > 1
            if write.size >= self.multipart_threshold and write.size > 0:
                return self._put_multipart(write, resent=resent)
            return self._put_single(write, resent=resent)

        result = self._retry_transient(once)
        return _with_attempts(result, attempts)

    def _put_single(self, write: _Write, *, resent: bool) -> PutResult:
        body = write.body if isinstance(write.body, bytes) else read_all(write.body)
        try:
            response = self.client.put_object(
                Bucket=self.bucket,
                Key=self.full_key(write.key),
                Body=body,
                Metadata=write.metadata,
                ContentType=write.content_type,
                **_condition(write.mode),
            )
        except (ClientError, BotoCoreError) as error:
            call = _Call("PutObject", write.key, write.mode)
            return self._resolve(error, call, write.write_id, write.size, resent=resent)
        if write.progress is not None:
            write.progress(write.size)
        return PutResult(
            write.key, response["ETag"], write.write_id, write.size, response.get("VersionId")
        )

    def _put_multipart(self, write: _Write, *, resent: bool) -> PutResult:
        full_key = self.full_key(write.key)
        part_size = max(self.part_size, MIN_PART_SIZE, -(-write.size // 10_000))

        def upload_parts(upload_id: str) -> list[dict[str, Any]]:
            done: list[dict[str, Any]] = []
            for number, chunk in enumerate(chunks(write.body, part_size), start=1):
                response = self._call(
                    "UploadPart",
                    write.key,
                    self.client.upload_part,
                    Bucket=self.bucket,
                    Key=full_key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=chunk,
                )
                done.append({"PartNumber": number, "ETag": response["ETag"]})
                if write.progress is not None:
                    write.progress(len(chunk))
            return done

        return self._multipart(write, upload_parts, resent=resent)

    def copy(
        self,
        source_key: str,
        key: str,
        *,
        mode: PutMode = "create",
        metadata: Mapping[str, str] | None = None,
        write_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> PutResult:
        """Server-side copy of ``source_key`` to ``key``, create-only by default:
        ``UploadPartCopy`` in ranges plus a conditional completion, which every S3 honours.
        The copy gets ``metadata`` and its own write id, not the source's metadata; it copies
        the source as it was when first read (``x-amz-copy-source-if-match``)."""
        write_id = write_id or new_write_id()
        source = self.head(source_key)
        write = _Write(
            key,
            b"",
            source.size,
            mode,
            {**(metadata or {}), WRITE_ID_KEY: write_id},
            write_id,
            "application/octet-stream",
            progress,
        )
        part_size = max(self.part_size, MIN_PART_SIZE, -(-source.size // 10_000))
        ranges = [
            (start, min(start + part_size, source.size) - 1)
            for start in range(0, source.size, part_size)
        ]

        def copy_parts(upload_id: str) -> list[dict[str, Any]]:
            done: list[dict[str, Any]] = []
            for number, (first, last) in enumerate(ranges or [(0, -1)], start=1):
                byte_range: dict[str, Any] = (
                    {"CopySourceRange": f"bytes={first}-{last}"} if ranges else {}
                )
                response = self._call(
                    "UploadPartCopy",
                    key,
                    self.client.upload_part_copy,
                    Bucket=self.bucket,
                    Key=self.full_key(key),
                    UploadId=upload_id,
                    PartNumber=number,
                    CopySource={"Bucket": self.bucket, "Key": self.full_key(source_key)},
                    CopySourceIfMatch=source.etag,
                    **byte_range,
                )
                done.append({"PartNumber": number, "ETag": response["CopyPartResult"]["ETag"]})
                if progress is not None:
                    progress(last - first + 1)
            return done

        attempts = 0

        def once() -> PutResult:
            nonlocal attempts
            attempts += 1
            return self._multipart(write, copy_parts, resent=attempts > 1)

        return _with_attempts(self._retry_transient(once), attempts)

    def _multipart(
        self,
        write: _Write,
        upload_parts: Callable[[str], list[dict[str, Any]]],
        *,
        resent: bool,
    ) -> PutResult:
        """Create an upload, fill its parts, complete it under the write's precondition;
        abort on every failure path (parts are billed until aborted)."""
        upload_id = self._call(
            "CreateMultipartUpload",
            write.key,
            self.client.create_multipart_upload,
            Bucket=self.bucket,
            Key=self.full_key(write.key),
            Metadata=write.metadata,
            ContentType=write.content_type,
        )["UploadId"]
        try:
            parts = upload_parts(upload_id)
            response = self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=self.full_key(write.key),
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                **_condition(write.mode),
            )
        except (ClientError, BotoCoreError) as error:
            self._abort(write.key, upload_id)
            call = _Call("CompleteMultipartUpload", write.key, write.mode)
            return self._resolve(error, call, write.write_id, write.size, resent=resent)
        except BaseException:
            self._abort(write.key, upload_id)
            raise
        return PutResult(
            write.key, response["ETag"], write.write_id, write.size, response.get("VersionId")
        )

    def _abort(self, key: str, upload_id: str) -> None:
        """Best effort: a failed abort leaves parts for the bucket's lifecycle rule."""
        with contextlib.suppress(ClientError, BotoCoreError):
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=self.full_key(key), UploadId=upload_id
            )

    def _resolve(
        self,
        error: ClientError | BotoCoreError,
        call: _Call,
        write_id: str,
        size: int,
        *,
        resent: bool = False,
    ) -> PutResult:
        """Turn a failed conditional write into its true outcome (see the module docstring).
        ``resent``: an earlier attempt of this very write was sent and may have landed."""
        failure = classify(error, bucket=self.bucket, call=call, prefix=self.prefix)
        retried = resent or (isinstance(error, ClientError) and _retry_attempts(error) > 0)
        # A connection never made sent nothing, unless an earlier attempt of this write did
        # (``resent``), or TLS failed, which can also happen once the request is under way.
        unsent = isinstance(failure, EndpointUnreachableError) and not (
            resent or isinstance(error, SSLError)
        )
        if isinstance(failure, EndpointUnreachableError) and not unsent:
            failure = OutcomeUnknownError(
                str(failure), bucket=self.bucket, key=call.key, operation=call.operation
            )
        ambiguous = isinstance(failure, OutcomeUnknownError) or (
            retried
            and isinstance(failure, AlreadyExistsError | PreconditionFailedError | NotFoundError)
        )
        if not ambiguous:
            raise failure from error
        assert call.key is not None
        try:
            current = self.head(call.key)
        except NotFoundError:
            current = None
        except StorageError as read_error:
            raise OutcomeUnknownError(
                f"{call.operation} {call.key!r}: outcome unknown and the read-back failed",
                bucket=self.bucket,
                key=call.key,
                operation=call.operation,
            ) from read_error
        if current is not None and current.write_id == write_id:
            return PutResult(call.key, current.etag, write_id, size, resolved=True)
        if call.mode == "create" and current is not None:
            raise AlreadyExistsError(
                f"{call.key!r} already exists (written by another writer)",
                bucket=self.bucket,
                key=call.key,
                operation=call.operation,
                status=412,
                code="PreconditionFailed",
                actual_etag=current.etag,
            ) from error
        if isinstance(failure, OutcomeUnknownError):
            raise failure from error
        raise OutcomeUnknownError(
            f"{call.operation} {call.key!r}: retried into a 412 and the object is not ours; "
            "our write may have landed and been replaced since",
            bucket=self.bucket,
            key=call.key,
            operation=call.operation,
            status=failure.status,
            code=failure.code,
            expected_etag=failure.expected_etag,
            actual_etag=current.etag if current is not None else None,
        ) from error

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        """Delete ``key``; with ``if_match`` only if its ETag is still that (412 otherwise).
        Deleting a missing key is not an error unconditionally (S3 answers 204), but is a
        :class:`NotFoundError` with ``if_match``."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self.full_key(key)}
        if if_match is not None:
            kwargs["IfMatch"] = if_match
        mode: PutMode = IfMatch(if_match) if if_match is not None else "overwrite"
        self._request("DeleteObject", key, self.client.delete_object, mode=mode, **kwargs)

    def delete_many(
        self, items: Sequence[tuple[str, str | None]]
    ) -> dict[str, StorageError | None]:
        """``DeleteObjects`` in batches of 1000; each item is ``(key, etag or None)``. Returns
        per key ``None`` (deleted) or the error S3 reported for that key.

        Some stores ignore the per-key ETag and delete anyway: to delete only what is
        unchanged, use :meth:`delete_if_unchanged`."""
        results: dict[str, StorageError | None] = {}
        for start in range(0, len(items), 1000):
            batch = items[start : start + 1000]
            objects = []
            for key, etag in batch:
                entry: dict[str, str] = {"Key": self.full_key(key)}
                if etag is not None:
                    entry["ETag"] = etag
                objects.append(entry)
            response = self._request(
                "DeleteObjects",
                None,
                self.client.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": objects, "Quiet": False},
            )
            for deleted in response.get("Deleted", []):
                results[self._relative(deleted["Key"])] = None
            for failed in response.get("Errors", []):
                key = self._relative(failed["Key"])
                code = failed.get("Code", "")
                error_type = {
                    "PreconditionFailed": PreconditionFailedError,
                    "NoSuchKey": NotFoundError,
                    "AccessDenied": AccessDeniedError,
                }.get(code, StorageError)
                results[key] = error_type(
                    f"DeleteObjects {key!r}: {code} {failed.get('Message', '')}".strip(),
                    bucket=self.bucket,
                    key=key,
                    operation="DeleteObjects",
                    code=code,
                )
        return results

    def delete_if_unchanged(
        self,
        items: Sequence[tuple[str, str]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, StorageError | None]:
        """Delete each ``(key, etag)`` only if the object's ETag is still ``etag``. Returns per
        key ``None`` (deleted) or why not (:class:`PreconditionFailedError`: replaced since,
        :class:`NotFoundError`: already gone, :class:`AccessDeniedError`).

        Uses ``DeleteObjects`` with per-key ETags where the store honours them, else one
        ``DeleteObject`` with ``If-Match`` per key (:meth:`conditional_delete_method` finds
        out once per store); raises :class:`UnsupportedError` where the store honours
        neither, before deleting anything. ``progress`` is called with counts of keys done."""
        method = self.conditional_delete_method()
        if method == "batch":
            results: dict[str, StorageError | None] = {}
            for start in range(0, len(items), 1000):
                batch = items[start : start + 1000]
                results.update(self.delete_many(batch))
                if progress is not None:
                    progress(len(batch))
            return results
        results = {}
        for key, etag in items:
            try:
                self.delete(key, if_match=etag)
                results[key] = None
            except (PreconditionFailedError, NotFoundError, AccessDeniedError) as error:
                results[key] = error
            if progress is not None:
                progress(1)
        return results

    def conditional_delete_method(self) -> ConditionalDelete:
        """How this store deletes an object only if unchanged: ``"batch"`` (``DeleteObjects``
        honours per-key ETags) or ``"single"`` (only ``DeleteObject`` honours ``If-Match``).
        Found once per store by probing a throwaway key under ``metastore/probes/``: a
        wrong ETag must be refused and the object kept, the right one must delete it.
        Raises :class:`UnsupportedError` if the store honours neither."""
        with self._delete_probe_lock:
            if self._delete_method is None:
                self._delete_method = self._probe_conditional_delete()
            method = self._delete_method
        if method == "none":
            raise UnsupportedError(
                f"s3://{self.bucket}/{self.prefix}: this store deletes objects whose ETag does "
                "not match (both DeleteObjects with per-key ETags and DeleteObject with "
                "If-Match were ignored or refused), so lakelock cannot delete only what is "
                "unchanged and refuses to delete at all",
                bucket=self.bucket,
                operation="DeleteObject",
            )
        return method

    def _probe_conditional_delete(self) -> ConditionalDelete | Literal["none"]:
        key = f"{DELETE_PROBE_PREFIX}conditional-delete-{new_write_id()}"
        try:
            etag = self.put(key, b"", mode="create").etag
            if self._honours_batch_etag(key, etag):
                return "batch"
            etag = self._recreate(key)
            if self._honours_delete_if_match(key, etag):
                return "single"
            return "none"
        finally:
            self._remove_probe(key)

    def _honours_batch_etag(self, key: str, etag: str) -> bool:
        try:
            refused = self.delete_many([(key, _WRONG_ETAG)]).get(key)
        except UnsupportedError:
            return False
        if isinstance(refused, AccessDeniedError):
            raise refused
        if not self._exists(key) or not isinstance(refused, PreconditionFailedError):
            return False  # deleted anyway, or kept without saying why: not to be relied on
        self.delete_many([(key, etag)])
        return not self._exists(key)

    def _honours_delete_if_match(self, key: str, etag: str) -> bool:
        try:
            self.delete(key, if_match=_WRONG_ETAG)
        except PreconditionFailedError:
            pass
        except UnsupportedError:
            return False
        if not self._exists(key):
            return False
        with contextlib.suppress(NotFoundError):  # a lost answer, retried: deleted already
            self.delete(key, if_match=etag)
        return not self._exists(key)

    def _recreate(self, key: str) -> str:
        try:
            return self.head(key).etag
        except NotFoundError:
            return self.put(key, b"", mode="create").etag

    def _remove_probe(self, key: str) -> None:
        """Best effort, and only ever this probe's own key."""
        with contextlib.suppress(StorageError):
            if self._exists(key):
                self.delete(key)

    def _exists(self, key: str) -> bool:
        try:
            self.head(key)
        except NotFoundError:
            return False
        return True

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: str) -> ObjectData:
        response = self._request(
            "GetObject", key, self.client.get_object, Bucket=self.bucket, Key=self.full_key(key)
        )
        try:
            body = response["Body"].read()
        except BotoCoreError as error:
            raise classify(
                error, bucket=self.bucket, call=_Call("GetObject", key), prefix=self.prefix
            ) from error
        return ObjectData(**_head_fields(key, response), body=body)

    def head(self, key: str) -> ObjectHead:
        response = self._request(
            "HeadObject", key, self.client.head_object, Bucket=self.bucket, Key=self.full_key(key)
        )
        return ObjectHead(**_head_fields(key, response))

    def list(
        self, prefix: str = "", *, start_after: str = "", page_size: int | None = None
    ) -> Iterator[ListedObject]:
        """Every object under ``prefix`` (relative to the store's prefix), in key order; with
        ``start_after`` (a relative key), only those after it."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.full_key(prefix)}
            if start_after:
                kwargs["StartAfter"] = self.full_key(start_after)
            if page_size is not None:
                kwargs["MaxKeys"] = page_size
            if token:
                kwargs["ContinuationToken"] = token
            page = self._request("ListObjectsV2", prefix, self.client.list_objects_v2, **kwargs)
            for item in page.get("Contents", []):
                yield ListedObject(
                    self._relative(item["Key"]), item["ETag"], item["Size"], item["LastModified"]
                )
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]

    # -- plumbing -----------------------------------------------------------------------------

    def _relative(self, full_key: str) -> str:
        return full_key[len(self.prefix) :] if full_key.startswith(self.prefix) else full_key

    def _call(
        self,
        operation: str,
        key: str | None,
        method: Callable[..., Any],
        *,
        mode: PutMode | None = None,
        **kwargs: Any,
    ) -> Any:
        """``method(**kwargs)``, its failure classified into the lakelock error family."""
        try:
            return method(**kwargs)
        except (ClientError, BotoCoreError) as error:
            raise classify(
                error, bucket=self.bucket, call=_Call(operation, key, mode), prefix=self.prefix
            ) from error

    def _request(
        self, operation: str, key: str | None, method: Callable[..., Any], **kwargs: Any
    ) -> Any:
        """One classified request (:meth:`_call`; ``mode`` among ``kwargs``), retried on
        conflicts and throttling."""
        return self._retry_transient(
            functools.partial(self._call, operation, key, method, **kwargs)
        )

    def _retry_transient(self, attempt: Callable[[], _T]) -> _T:
        """Retry 409 ConditionalRequestConflict and 503 SlowDown (never applied) with jittered
        exponential backoff, within the store's retry budget."""
        for try_ in self.retry.retrying((ConflictError, ThrottledError)):
            with try_:
                return attempt()
        raise AssertionError("unreachable: tenacity re-raises the last error")


def classify(
    error: ClientError | BotoCoreError, *, bucket: str, call: _Call, prefix: str = ""
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


def _condition(mode: PutMode) -> dict[str, str]:
    if mode == "create":
        return {"IfNoneMatch": "*"}
    if isinstance(mode, IfMatch):
        return {"IfMatch": mode.etag}
    return {}


def _retry_attempts(error: ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0))


def _with_attempts(result: PutResult, attempts: int) -> PutResult:
    if attempts == result.attempts:
        return result
    return PutResult(
        result.key,
        result.etag,
        result.write_id,
        result.size,
        result.version_id,
        result.resolved,
        attempts,
    )


def _head_fields(key: str, response: Mapping[str, Any]) -> dict[str, Any]:
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    return {
        "key": key,
        "etag": response["ETag"],
        "size": int(response.get("ContentLength", 0)),
        "metadata": dict(response.get("Metadata", {})),
        "last_modified": response["LastModified"],
        "server_time": parsedate_to_datetime(date) if date else None,
    }
