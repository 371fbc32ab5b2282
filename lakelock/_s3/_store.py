"""``ObjectStore``: one bucket (and key prefix) through one boto3 client; every request
lakelock makes goes through it (the package docstring has the modes of a write).

Writes go by ``PutObject``, or by multipart upload with the precondition on
CompleteMultipartUpload from ``multipart_threshold`` on; the upload is aborted on every failure
path (parts are billed until then), and a 409 on completion restarts the whole upload.
Server-side copies are ``UploadPartCopy`` + conditional completion, which is create-only on
every S3 (``CopyObject`` honours ``If-None-Match`` only on AWS since late 2025). A failed write
is resolved by :func:`~lakelock._s3._resolve.resolve_write` (lost acknowledgements); every
other failure is classified by :func:`~lakelock._s3._classify.classify`. Conflicts and
throttling are retried here (nothing was applied); every other outcome goes to the caller.
Every request is told to the store's :class:`~lakelock._retry.Load` (shared by the stores and
the commit loop of one process): each first try pays into its retry budget, each retry draws
on it and keeps its pace, and each 503 SlowDown slows that pace.

Requests are counted per operation in :class:`S3Stats` (retries included: it counts what was
sent over the wire).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import IO, Any, Literal, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from lakelock._client import DEFAULT_READ_TIMEOUT
from lakelock._layout import validate_key_length, validate_prefix_room
from lakelock._retry import Load, RetryPolicy
from lakelock._s3._classify import Call, bound_reads, classify, fail_fast_on_dead_endpoints
from lakelock._s3._continue import continue_only_for_large_bodies
from lakelock._s3._probe import ConditionalDelete, probe_conditional_delete
from lakelock._s3._resolve import resolve_write
from lakelock._s3._types import (
    WRITE_ID_KEY,
    IfMatch,
    ListedObject,
    ObjectData,
    ObjectHead,
    PutMode,
    PutResult,
    chunks,
    new_write_id,
    read_all,
    size_of,
    stats_for,
)
from lakelock.errors import (
    AccessDeniedError,
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
    ReadTimeoutError,
    StorageError,
    ThrottledError,
    UnsupportedError,
)

__all__ = ["MIB", "MIN_PART_SIZE", "ObjectStore"]

_T = TypeVar("_T")

MIB = 1024 * 1024
#: S3's smallest multipart part (except the last).
MIN_PART_SIZE = 5 * MIB


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
    from which writes go by multipart upload, in parts of ``part_size`` bytes. A read that
    gets no answer within ``read_timeout`` seconds, its tries included, is
    :class:`~lakelock.errors.ReadTimeoutError` (:mod:`lakelock._s3._classify`). ``load``:
    the process's retry budget and pace (default: one of this store's own, on the retry
    policy's clock); stores of one process share one.
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
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        load: Load | None = None,
    ) -> None:
        if part_size < 1:
            raise ValueError("part_size must be positive")
        self.read_timeout = read_timeout
        self.client = client
        self.bucket = bucket
        self.prefix = validate_prefix_room(prefix)
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.retry = retry or RetryPolicy()
        self.load = load if load is not None else Load(clock=self.retry.clock)
        self.stats = stats_for(client)
        fail_fast_on_dead_endpoints(client)
        bound_reads(client, read_timeout)
        continue_only_for_large_bodies(client)
        self._delete_probe_lock = threading.Lock()
        self._delete_method: ConditionalDelete | Literal["none"] | None = None

    def full_key(self, key: str) -> str:
        """``key`` with the store's prefix, within S3's key limit (InvalidNameError: nothing
        is sent)."""
        return self.prefix + validate_key_length(key, prefix=self.prefix)

    def _address(self, key: str) -> dict[str, Any]:
        """Where ``key`` is, as boto3 names an object (``Bucket``, ``Key`` with the prefix):
        the keywords of every request on one object, and a copy's ``CopySource``."""
        return {"Bucket": self.bucket, "Key": self.full_key(key)}

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
        resent: bool = False,
    ) -> PutResult:
        """Write ``body`` at ``key`` under the precondition ``mode``.

        Raises :class:`AlreadyExistsError` (create: another writer's object is there),
        :class:`PreconditionFailedError` / :class:`NotFoundError` (If-Match),
        :class:`OutcomeUnknownError` (not resolvable by reading back), and the rest of the
        :class:`StorageError` family. ``progress`` is called with byte counts as parts go.
        ``resent``: another copy of this very write (the same ``write_id``) was sent and may
        have landed — a hedge's — so a 412 is read back from the first attempt on.
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
            # a 409/503 on the SDK's retry): a 412 may then be our own write. So may it be
            # from the first on when another copy of the write was sent.
            again = resent or attempts > 1
            if write.size >= self.multipart_threshold and write.size > 0:
                return self._put_multipart(write, resent=again)
            return self._put_single(write, resent=again)

        result = self._retry_transient(once)
        return _with_attempts(result, attempts)

    def _put_single(self, write: _Write, *, resent: bool) -> PutResult:
        body = write.body if isinstance(write.body, bytes) else read_all(write.body)
        try:
            response = self.client.put_object(
                **self._address(write.key),
                Body=body,
                Metadata=write.metadata,
                ContentType=write.content_type,
                **_condition(write.mode),
            )
        except (ClientError, BotoCoreError) as error:
            call = Call("PutObject", write.key, write.mode)
            return resolve_write(self, error, call, write.write_id, write.size, resent=resent)
        if write.progress is not None:
            write.progress(write.size)
        return PutResult(
            write.key,
            response["ETag"],
            write.write_id,
            write.size,
            response.get("VersionId"),
            server_time=_date(response),
        )

    def _put_multipart(self, write: _Write, *, resent: bool) -> PutResult:
        address = self._address(write.key)
        part_size = max(self.part_size, MIN_PART_SIZE, -(-write.size // 10_000))

        def upload_parts(upload_id: str) -> list[dict[str, Any]]:
            done: list[dict[str, Any]] = []
            for number, chunk in enumerate(chunks(write.body, part_size), start=1):
                response = self._call(
                    "UploadPart",
                    write.key,
                    self.client.upload_part,
                    **address,
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
        source_etag: str | None = None,
    ) -> PutResult:
        """Server-side copy of ``source_key`` to ``key``, create-only by default:
        ``UploadPartCopy`` in ranges plus a conditional completion, which every S3 honours.
        The copy gets ``metadata`` and its own write id, not the source's metadata; it copies
        the source as it was when first read (``x-amz-copy-source-if-match``), or with
        ``source_etag`` as it was then (:class:`PreconditionFailedError` if it is no longer:
        nothing is copied)."""
        write_id = write_id or new_write_id()
        source = self.head(source_key)
        if source_etag is not None and source.etag != source_etag:
            raise PreconditionFailedError(
                f"CopyObject {source_key!r}: its ETag is {source.etag}, not {source_etag}",
                bucket=self.bucket,
                key=source_key,
                operation="HeadObject",
                expected_etag=source_etag,
            )
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
                    **self._address(key),
                    UploadId=upload_id,
                    PartNumber=number,
                    CopySource=self._address(source_key),
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
            **self._address(write.key),
            Metadata=write.metadata,
            ContentType=write.content_type,
        )["UploadId"]
        try:
            parts = upload_parts(upload_id)
            response = self.client.complete_multipart_upload(
                **self._address(write.key),
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                **_condition(write.mode),
            )
        except (ClientError, BotoCoreError) as error:
            self._abort(write.key, upload_id)
            call = Call("CompleteMultipartUpload", write.key, write.mode)
            return resolve_write(self, error, call, write.write_id, write.size, resent=resent)
        except BaseException:
            self._abort(write.key, upload_id)
            raise
        return PutResult(
            write.key,
            response["ETag"],
            write.write_id,
            write.size,
            response.get("VersionId"),
            server_time=_date(response),
        )

    def _abort(self, key: str, upload_id: str) -> None:
        """Best effort: a failed abort leaves parts for the bucket's lifecycle rule."""
        with contextlib.suppress(ClientError, BotoCoreError):
            self.client.abort_multipart_upload(**self._address(key), UploadId=upload_id)

    # -- deletes ------------------------------------------------------------------------------

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        """Delete ``key``; with ``if_match`` only if its ETag is still that (412 otherwise).
        Deleting a missing key is not an error unconditionally (S3 answers 204), but is a
        :class:`NotFoundError` with ``if_match``."""
        kwargs = self._address(key)
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
        Found once per store by probing a throwaway key (:mod:`lakelock._s3._probe`).
        Raises :class:`UnsupportedError` if the store honours neither."""
        with self._delete_probe_lock:
            if self._delete_method is None:
                self._delete_method = probe_conditional_delete(self)
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

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> ObjectData:
        """The object (its body, or with ``byte_range`` the bytes ``[start, end)`` of it).

        The request and the read of its body are one attempt: a body that breaks off or fails
        its checksum is asked for again (a GET changes nothing), within the store's retry
        budget as 409s and 503s are; past it, the last failure is raised
        (:class:`OutcomeUnknownError`)."""
        extra: dict[str, Any] = (
            {"Range": f"bytes={byte_range[0]}-{byte_range[1] - 1}"} if byte_range else {}
        )

        def once() -> ObjectData:
            response = self._call(
                "GetObject",
                key,
                self.client.get_object,
                **self._address(key),
                **extra,
            )
            with self._body_of(key):
                body = response["Body"].read()
            return ObjectData(**_head_fields(key, response), body=body)

        return self._retry_transient(once)

    def sha256(self, key: str, *, chunk_size: int = MIB) -> tuple[ObjectHead, str]:
        """The object's head and the hex SHA-256 of its body, read in chunks of
        ``chunk_size`` bytes: the memory it holds is one chunk, whatever the object's size.

        A body that breaks off or fails its checksum midway is asked for again from its start
        and hashed anew, as :meth:`get` asks again (within the store's retry budget)."""

        def once() -> tuple[ObjectHead, str]:
            response = self._call("GetObject", key, self.client.get_object, **self._address(key))
            digest = hashlib.sha256()
            with self._body_of(key):
                for chunk in response["Body"].iter_chunks(chunk_size):
                    digest.update(chunk)
            return ObjectHead(**_head_fields(key, response)), digest.hexdigest()

        return self._retry_transient(once)

    @contextlib.contextmanager
    def _body_of(self, key: str) -> Iterator[None]:
        """Around the read of a GET's body: botocore's failure classified, and one that lost
        the body (not a stalled try: another could take as long) raised to be asked again."""
        try:
            yield
        except BotoCoreError as error:
            lost = classify(
                error,
                bucket=self.bucket,
                call=Call("GetObject", key),
                prefix=self.prefix,
                read_timeout=self.read_timeout,
            )
            if isinstance(lost, ReadTimeoutError):
                raise lost from error
            raise _BodyLost(lost) from error

    def head(self, key: str) -> ObjectHead:
        response = self._request("HeadObject", key, self.client.head_object, **self._address(key))
        return ObjectHead(**_head_fields(key, response))

    def list(
        self, prefix: str = "", *, start_after: str = "", page_size: int | None = None
    ) -> Iterator[ListedObject]:
        """Every object under ``prefix`` (relative to the store's prefix), in key order; with
        ``start_after`` (a relative key), only those after it."""
        token: str | None = None
        while True:
            objects, token = self._list_page(prefix, start_after, page_size, token)
            yield from objects
            if token is None:
                return

    def list_page(
        self, prefix: str = "", *, start_after: str = "", max_keys: int = 1000
    ) -> tuple[builtins.list[ListedObject], bool]:
        """One page: at most ``max_keys`` objects under ``prefix`` after ``start_after``, in
        key order, and whether more follow."""
        objects, token = self._list_page(prefix, start_after, max_keys, None)
        return objects, token is not None

    def _list_page(
        self, prefix: str, start_after: str, page_size: int | None, token: str | None
    ) -> tuple[builtins.list[ListedObject], str | None]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.full_key(prefix)}
        if start_after:
            kwargs["StartAfter"] = self.full_key(start_after)
        if page_size is not None:
            kwargs["MaxKeys"] = page_size
        if token:
            kwargs["ContinuationToken"] = token
        page = self._request("ListObjectsV2", prefix, self.client.list_objects_v2, **kwargs)
        objects = [
            ListedObject(
                self._relative(item["Key"]), item["ETag"], item["Size"], item["LastModified"]
            )
            for item in page.get("Contents", [])
        ]
        return objects, page["NextContinuationToken"] if page.get("IsTruncated") else None

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
                error,
                bucket=self.bucket,
                call=Call(operation, key, mode),
                prefix=self.prefix,
                read_timeout=self.read_timeout,
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
        """Retry 409 ConditionalRequestConflict and 503 SlowDown (never applied), and a read's
        lost body, with jittered exponential backoff, within the store's retry policy and the
        process's retry budget and pace (:class:`~lakelock._retry.Load`); a 503 slows the
        pace."""
        load = self.load
        load.sent()

        def once() -> _T:
            sent = load.clock()
            try:
                return attempt()
            except ThrottledError:
                load.slowed(sent)
                raise

        try:
            for try_ in self.retry.retrying((ConflictError, ThrottledError, _BodyLost), load=load):
                with try_:
                    return once()
        except _BodyLost as lost:
            raise lost.error from lost.__cause__
        raise AssertionError("unreachable: tenacity re-raises the last error")


class _BodyLost(Exception):
    """A read's body broke off or failed its checksum: ``error`` is what it is classified as
    (retried by :meth:`ObjectStore._retry_transient`, raised once the budget is spent)."""

    def __init__(self, error: StorageError) -> None:
        super().__init__(str(error))
        self.error = error


def _condition(mode: PutMode) -> dict[str, str]:
    if mode == "create":
        return {"IfNoneMatch": "*"}
    if isinstance(mode, IfMatch):
        return {"IfMatch": mode.etag}
    return {}


def _with_attempts(result: PutResult, attempts: int) -> PutResult:
    if attempts == result.attempts:
        return result
    return dataclasses.replace(result, attempts=attempts)


def _date(response: Mapping[str, Any]) -> datetime | None:
    """The answer's ``Date`` header: the server's clock when it answered."""
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    return parsedate_to_datetime(date) if date else None


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
