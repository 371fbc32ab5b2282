"""Every error lakelock raises, in one tree.

```
LakelockError
├── InvalidArgumentError (ValueError)      a bad argument: a duration, a filter, a size...
│   └── InvalidNameError                      bad dataset/column/partition/file name or path
├── SettingsMismatchError (ValueError)     a Lake setting given disagrees with the lake's
├── DatasetNotFoundError (KeyError)        no such dataset (or partition) in the registry
│   └── VersionNotFoundError                  no such version (yet, or any more): .version
│       └── SnapshotExpiredError                 older than the retention: vacuum may have run
├── StorageError                           one S3 request ended badly: .bucket .key .operation
│   ├── AlreadyExistsError (FileExistsError)   412 on a create-only write: key taken
│   ├── PreconditionFailedError               412 on If-Match: .expected_etag stale
│   ├── NotFoundError (FileNotFoundError)     404, including If-Match on a missing key
│   ├── ConflictError                         409 ConditionalRequestConflict: retry
│   ├── ThrottledError                        503 SlowDown: back off
│   ├── AccessDeniedError (PermissionError)   403, e.g. refused by the bucket policy
│   ├── UnsupportedError                      501: the store lacks a feature lakelock needs
│   ├── EndpointUnreachableError (ConnectionError)  no connection could be made: not sent
│   ├── NotS3Error                            the endpoint answered, but not as S3 does
│   ├── CredentialsError (PermissionError)    no usable AWS credentials: nothing was sent
│   ├── ReadTimeoutError (TimeoutError)       a read got no answer within read_timeout
│   └── OutcomeUnknownError                   a write's timeout, reset, 5xx: it may have applied
├── CommitError                            a registry commit did not happen: .dataset .commit_id
│   ├── SchemaMismatchError (ValueError)      the schema does not fit: never retry as it is
│   │   └── PartitionByMismatchError             another partition_by than the dataset's
│   ├── CommitConflictError                   the change no longer applies: nothing committed
│   │   ├── LockedError                          another process holds a write lock on a path
│   │   ├── CommitIdReusedError (ValueError)     the commit id is recorded for another change
│   │   ├── ObjectTooOldError                    it adds an object vacuum may have deleted
│   │   ├── FileAlreadyRegisteredError           an added file is live in the dataset: .keys
│   │   └── StaleFenceError                      fencing token lower than one already seen
│   ├── RetryBudgetExhaustedError             attempts or seconds ran out: .attempts .seconds
│   └── CommitStateUnknownError               may or may not have committed: never clean up
├── RegistryCorruptError                   the registry cannot be trusted: never overwritten
├── LeaseError                             .name .token
│   └── LeaseLostError                        the lease expired or was taken over
├── LockTimeout (TimeoutError)             a lock or lease was not acquired in time
└── MissingExtraError (ImportError)        an optional engine is not installed: .extra
```

Every error carries the fields a caller needs to act on it; nobody should have to parse
``str(error)``. Errors raised because of another are chained with ``raise ... from``.

A loop that retries on :class:`CommitConflictError` re-plans and tries again: it may land once
the other commit is past (or the lock released). :class:`SchemaMismatchError` is not a conflict
(lakelock 0.1.0 made it one: code that caught it as a conflict should name it): the same
table is refused every time, so retrying it cannot help.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

__all__ = [
    "AccessDeniedError",
    "AlreadyExistsError",
    "CommitConflictError",
    "CommitError",
    "CommitIdReusedError",
    "CommitStateUnknownError",
    "ConflictError",
    "CredentialsError",
    "DatasetNotFoundError",
    "EndpointUnreachableError",
    "FileAlreadyRegisteredError",
    "InvalidArgumentError",
    "InvalidNameError",
    "LakelockError",
    "LeaseError",
    "LeaseLostError",
    "LockTimeout",
    "LockedError",
    "MissingExtraError",
    "NotFoundError",
    "NotS3Error",
    "ObjectTooOldError",
    "OutcomeUnknownError",
    "PartitionByMismatchError",
    "PreconditionFailedError",
    "ReadTimeoutError",
    "RegistryCorruptError",
    "RetryBudgetExhaustedError",
    "SchemaMismatchError",
    "SettingsMismatchError",
    "SnapshotExpiredError",
    "StaleFenceError",
    "StorageError",
    "ThrottledError",
    "UnsupportedError",
    "VersionNotFoundError",
]


class LakelockError(Exception):
    """Root of every error lakelock raises.

    Every error pickles with its fields, so it crosses process boundaries (multiprocessing,
    Dask and Spark workers) as itself."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[LakelockError], args: tuple[Any, ...], fields: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(fields)
    return error


#: How much of an offending value a message quotes: enough to recognise it, never a page.
SHOWN_CHARACTERS = 80


def shown(value: object) -> str:
    """``value`` as a message quotes it: its ``repr``, cut if long (saying how long it was),
    so an error stays one readable line."""
    text = repr(value)
    if len(text) <= SHOWN_CHARACTERS:
        return text
    return f"{text[:SHOWN_CHARACTERS]}... ({len(text):,} characters)"


class InvalidArgumentError(LakelockError, ValueError):
    """An argument was rejected before anything was sent or written: a duration, a filter,
    a size, a commit id, a version, partitions a dataset cannot have...

    ``value`` is the offending input, ``reason`` says which rule it broke; ``what`` names the
    argument in the message (``"invalid filter ..."``).
    """

    #: How the message names what was refused, unless the raiser says.
    kind = "argument"

    def __init__(self, value: object, reason: str, *, what: str | None = None) -> None:
        super().__init__(f"invalid {what or self.kind} {shown(value)}: {reason}")
        self.value = value
        self.reason = reason


class InvalidNameError(InvalidArgumentError):
    """A name or path was rejected before anything was written (a dataset, column,
    partition, file, bucket or lease name, a partition path or value, a lake URL)."""

    kind = "name"


class SettingsMismatchError(LakelockError, ValueError):
    """A ``Lake`` was given a setting (``setting``: ``retention``, ``commit_window``,
    ``intent_ttl`` or ``vacuum_floor``) whose value (``given``) is not the lake's
    (``stored``): every writer of a lake uses the lake's settings, changed only by
    ``lake.configure(...)``. Nothing was written."""

    def __init__(
        self, message: str, *, setting: str, given: float | int, stored: float | int
    ) -> None:
        super().__init__(message)
        self.setting = setting
        self.given = given
        self.stored = stored


class DatasetNotFoundError(LakelockError, KeyError):
    """The registry has no dataset ``dataset`` (or, when ``partition`` is set, no such
    partition of it) in the snapshot that was read."""

    def __init__(self, dataset: str, *, partition: str | None = None) -> None:
        what = (
            f"partition {shown(partition)} of dataset {shown(dataset)}"
            if partition
            else f"dataset {shown(dataset)}"
        )
        super().__init__(f"{what} is not in the registry")
        self.dataset = dataset
        self.partition = partition

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class VersionNotFoundError(DatasetNotFoundError):
    """The registry has no ``version`` (or no version at ``as_of``) of ``dataset``: it is
    below 1 (versions start at 1, the first commit), newer than the current version, older
    than the dataset, or (see :class:`SnapshotExpiredError`) older than what retention
    keeps. Never a partial table."""

    def __init__(
        self,
        dataset: str,
        *,
        version: int | None = None,
        as_of: float | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(dataset)
        which = f"version {version}" if version is not None else f"as of {as_of}"
        if dataset == "*":  # the registry as a whole
            self.args = (f"registry {which} does not exist{reason}",)
        else:
            self.args = (f"{which} of dataset {shown(dataset)} is not in the registry{reason}",)
        self.version = version
        self.as_of = as_of
        self.reason = reason


class SnapshotExpiredError(VersionNotFoundError):
    """The version asked for is older than the registry's retention: the objects it reads
    may have been vacuumed, so lakelock refuses to read it rather than return part of it."""


class StorageError(LakelockError):
    """One S3 request failed.

    ``operation`` is the S3 API name (``PutObject``...), ``status`` the HTTP status when there
    was a response, ``code`` the S3 error code (``PreconditionFailed``...). ``expected_etag`` is
    the ETag a conditional request required, ``actual_etag`` the one found (when known).
    """

    def __init__(
        self,
        message: str,
        *,
        bucket: str,
        key: str | None = None,
        operation: str = "",
        status: int | None = None,
        code: str | None = None,
        expected_etag: str | None = None,
        actual_etag: str | None = None,
    ) -> None:
        super().__init__(message)
        self.bucket = bucket
        self.key = key
        self.operation = operation
        self.status = status
        self.code = code
        self.expected_etag = expected_etag
        self.actual_etag = actual_etag


class AlreadyExistsError(StorageError, FileExistsError):
    """A create-only write (``If-None-Match: *``) found the key taken by another writer.

    For data files this is a duplicate upload: stop retrying, nothing was overwritten.
    ``actual_etag`` is the ETag of the object that won, when it could be read.
    """


class PreconditionFailedError(StorageError):
    """A compare-and-swap (``If-Match``) lost: the object changed since ``expected_etag``."""


class NotFoundError(StorageError, FileNotFoundError):
    """The key (or bucket) does not exist; also ``If-Match`` against a missing key."""


class ConflictError(StorageError):
    """409 ConditionalRequestConflict: a concurrent request on the same key. Retryable."""


class ThrottledError(StorageError):
    """503 SlowDown after the SDK's own retries: back off before trying again."""


class AccessDeniedError(StorageError, PermissionError):
    """403: refused, typically by the bucket policy lakelock generates."""


class UnsupportedError(StorageError):
    """501 NotImplemented: the store does not support a request lakelock needs."""


class EndpointUnreachableError(StorageError, ConnectionError):
    """No connection to the S3 endpoint could be made (refused, unresolvable host, TLS
    spoken to a plain-HTTP port, connect timeout), after a few quick attempts: the request was
    never sent, so nothing was applied. ``endpoint`` is the URL that was tried."""

    def __init__(self, message: str, *, endpoint: str | None = None, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.endpoint = endpoint


class NotS3Error(StorageError):
    """The endpoint answered a request that has an S3 error body with none (a plain web
    server, a proxy's error page, a wrong URL path): it does not speak S3, and a missing
    object there says nothing about the lake. ``server`` is its ``Server`` header, if any."""

    def __init__(self, message: str, *, server: str | None = None, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.server = server


class CredentialsError(StorageError, PermissionError):
    """No usable AWS credentials (none configured, or an incomplete pair): the request was
    refused before it was sent."""


class ReadTimeoutError(StorageError, TimeoutError):
    """A read (GET, HEAD, LIST) got no answer within the store's ``read_timeout`` seconds,
    however many tries that took. A read changes nothing: try again later, or check the
    endpoint. ``seconds`` is the budget that ran out."""

    def __init__(self, message: str, *, seconds: float | None = None, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.seconds = seconds


class OutcomeUnknownError(StorageError):
    """A write may or may not have been applied (timeout, connection lost, 5xx).

    Resolve by reading back before doing anything else; never delete what it wrote.
    """


class _CommitFields(TypedDict, total=False):
    """What every commit error names, passed on by keyword from each kind to
    :class:`CommitError`, as each storage error passes its fields on to :class:`StorageError`."""

    dataset: str | None
    commit_id: str | None


class CommitError(LakelockError):
    """A registry commit did not (knowably) happen."""

    def __init__(self, message: str, *, dataset: str | None = None, commit_id: str | None = None):
        super().__init__(message)
        self.dataset = dataset
        self.commit_id = commit_id


class CommitConflictError(CommitError):
    """The commit cannot apply to the current registry (re-validated on redrive). Nothing
    was committed. ``attempts``: how many its batch made."""

    def __init__(
        self,
        message: str,
        *,
        attempts: int = 0,
        **fields: Unpack[_CommitFields],
    ) -> None:
        super().__init__(message, **fields)
        self.attempts = attempts


class SchemaMismatchError(CommitError, ValueError):
    """A schema that does not fit: files being added whose schema the dataset's cannot take,
    a table whose column names clash (engines read names ignoring case), or a dataset schema
    a view format cannot represent. Not a conflict: the same input is refused again."""


class PartitionByMismatchError(SchemaMismatchError):
    """The commit gives other partition columns than the dataset's (they never change)."""


class LockedError(CommitConflictError):
    """A write lock that another process holds covers a path this commit changes: the commit
    waited ``timeout`` seconds (0: not at all) and the lock was still held. ``holder`` names
    who holds it (host, pid, label and grant token, or just the grant when the lock table
    was not read), ``token`` is the grant's token, ``paths`` the write paths it locks."""

    def __init__(
        self,
        message: str,
        *,
        holder: str,
        paths: tuple[str, ...],
        token: int,
        timeout: float = 0.0,
        **fields: Unpack[_CommitFields],
    ) -> None:
        super().__init__(message, **fields)
        self.holder = holder
        self.paths = paths
        self.token = token
        self.timeout = timeout


class CommitIdReusedError(CommitConflictError, ValueError):
    """The ``commit_id`` is recorded already, for a different change: another dataset, another
    operation, or other content (an idempotency key is bound to what it committed; a retry of
    the same change reports the recorded commit instead). ``version`` is the registry version
    that recorded it, ``recorded_dataset`` and ``recorded_operation`` what it committed."""

    def __init__(
        self,
        message: str,
        *,
        version: int,
        recorded_dataset: str,
        recorded_operation: str,
        **fields: Unpack[_CommitFields],
    ) -> None:
        super().__init__(message, **fields)
        self.version = version
        self.recorded_dataset = recorded_dataset
        self.recorded_operation = recorded_operation


class ObjectTooOldError(CommitConflictError):
    """The commit would add ``key``, written ``age`` seconds before (by the server's clock),
    to the registry: older than half the lake's vacuum floor (``floor`` seconds), so vacuum
    may have deleted it, or may before the commit lands. Nothing was committed; write the
    data again (a new file) and commit that. (Both are whole seconds, rounded up: the root
    records them so for the writer of an intent another process refused.)"""

    def __init__(
        self, message: str, *, key: str, age: int, floor: int, **fields: Unpack[_CommitFields]
    ) -> None:
        super().__init__(message, **fields)
        self.key = key
        self.age = age
        self.floor = floor


class FileAlreadyRegisteredError(CommitConflictError):
    """A file the commit adds is live in the dataset already (a data file is registered at
    most once): typically a ``registry.commit`` retried without a commit id after its first
    attempt's outcome was unknown, which landed. Nothing was committed; ``keys`` are the
    files found registered. Give a commit a ``commit_id`` to make its retries report the
    earlier commit instead."""

    def __init__(
        self, message: str, *, keys: tuple[str, ...], **fields: Unpack[_CommitFields]
    ) -> None:
        super().__init__(message, **fields)
        self.keys = tuple(keys)


class StaleFenceError(CommitConflictError):
    """The commit's fencing token ``token`` is below ``current`` for fence ``name``: a zombie
    holder tried to commit after losing its lease or lock. ``current == token``: the path-lock
    grant's write lock in force ended (released, or expired and cleared by another process),
    and a grant that ended never holds again."""

    def __init__(
        self,
        message: str,
        *,
        name: str,
        token: int,
        current: int,
        **fields: Unpack[_CommitFields],
    ) -> None:
        super().__init__(message, **fields)
        self.name = name
        self.token = token
        self.current = current


class RetryBudgetExhaustedError(CommitError):
    """The commit's retry budget ran out — its ``attempts`` or its seconds — before it could
    land; it conflicted with nothing (that is :class:`CommitConflictError`). Its intent was
    recorded cancelled first, so this call committed nothing: it is safe to try again with
    the same ``commit_id`` (an earlier run of that id whose process crashed may still land,
    once, through its own intent)."""

    def __init__(
        self,
        message: str,
        *,
        attempts: int = 0,
        seconds: float = 0.0,
        **fields: Unpack[_CommitFields],
    ) -> None:
        super().__init__(message, **fields)
        self.attempts = attempts
        self.seconds = seconds


class CommitStateUnknownError(CommitError):
    """The commit may have been applied; the registry could not confirm either way.

    Re-run it under its ``commit_id`` (the one this error names, generated or chosen): it
    lands once, or is reported ``already_committed``. Looking the id up
    (``registry.find_commit``) and finding nothing is not final: its intent may be applied
    by another process's fold later, or its swap still be in flight at S3. Do not delete
    the files it referenced: a later read of the registry decides.
    """


class RegistryCorruptError(LakelockError):
    """The registry (or a manifest) is not a document lakelock can trust: invalid JSON, an
    unknown future ``format_version``, or a broken invariant. It is never overwritten."""

    def __init__(self, message: str, *, bucket: str | None = None, key: str | None = None):
        super().__init__(message)
        self.bucket = bucket
        self.key = key


class LeaseError(LakelockError):
    """A lease operation failed. ``name`` is the lease, ``token`` the fencing token held."""

    def __init__(self, message: str, *, name: str, token: int | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.token = token


class LeaseLostError(LeaseError):
    """The lease expired or another holder took it over: stop acting as its holder."""


class LockTimeout(LakelockError, TimeoutError):
    """A lock or lease was not acquired within ``timeout`` seconds.

    ``target`` names what was waited for (paths, a lease name).
    """

    def __init__(self, message: str, *, target: object = None, timeout: float | None = None):
        super().__init__(message)
        self.target = target
        self.timeout = timeout


class MissingExtraError(LakelockError, ImportError):
    """An optional dependency is not installed. ``extra`` names the lakelock extra that
    installs it (``pip install 'lakelock[<extra>]'``), ``package`` what was missing."""

    def __init__(self, extra: str, *, package: str, reason: str = "is not installed") -> None:
        super().__init__(
            f"{package} {reason}: install it with pip install 'lakelock[{extra}]'", name=package
        )
        self.extra = extra
        self.package = package
