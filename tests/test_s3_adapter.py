"""The S3 adapter: every outcome branch forced against the embedded endpoint over HTTP."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import os
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError

from lakelock._retry import RetryPolicy
from lakelock._s3 import WRITE_ID_KEY, IfMatch, ObjectStore
from lakelock.errors import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    StorageError,
    ThrottledError,
    UnsupportedError,
)
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, no_sleep, wait_until

MIB = 1024 * 1024


def test_create_returns_etag_and_write_id(store: ObjectStore) -> None:
    """A create-only put returns the new ETag and records its write id in metadata."""
    result = store.put("a/b", b"hello", write_id="w-1")
    head = store.head("a/b")
    assert (result.etag, result.write_id, result.resolved) == (head.etag, "w-1", False)
    assert head.metadata[WRITE_ID_KEY] == "w-1"
    assert head.server_time is not None


def test_create_on_existing_key_is_already_exists(store: ObjectStore) -> None:
    """412 on a create is AlreadyExistsError (a FileExistsError), object untouched."""
    store.put("k", b"first")
    with pytest.raises(AlreadyExistsError) as info:
        store.put("k", b"second")
    assert isinstance(info.value, FileExistsError)
    assert (info.value.key, info.value.status, info.value.operation) == ("k", 412, "PutObject")
    assert store.get("k").body == b"first"


def test_cas_chain_returns_new_etags(store: ObjectStore) -> None:
    """Each If-Match write returns the ETag the next one must name."""
    etag = store.put("doc", b"v1").etag
    for n in range(2, 5):
        etag = store.put("doc", f"v{n}".encode(), mode=IfMatch(etag)).etag
    assert store.get("doc").body == b"v4"
    assert store.get("doc").etag == etag


def test_cas_with_stale_etag_is_precondition_failed(store: ObjectStore) -> None:
    """412 on If-Match is PreconditionFailedError carrying the ETag we expected."""
    stale = store.put("doc", b"v1").etag
    store.put("doc", b"v2", mode=IfMatch(stale))
    with pytest.raises(PreconditionFailedError) as info:
        store.put("doc", b"v3", mode=IfMatch(stale))
    assert info.value.expected_etag == stale
    assert store.get("doc").body == b"v2"


def test_cas_on_missing_key_is_not_found(store: ObjectStore) -> None:
    """If-Match on a missing key is NotFoundError (404), never a silent create."""
    with pytest.raises(NotFoundError):
        store.put("missing", b"x", mode=IfMatch('"abc"'))
    with pytest.raises(NotFoundError):
        store.head("missing")


def test_conflict_is_retried_until_it_clears(s3: S3Endpoint, store: ObjectStore) -> None:
    """409 ConditionalRequestConflict is retried with backoff; the write lands once."""
    s3.inject("conflict", operation="PutObject", count=3)
    result = store.put("k", b"x")
    assert result.attempts == 4
    assert s3.stats()["PutObject"] == 4


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("conflict", (ConflictError, "ConditionalRequestConflict")),
        ("error", (OutcomeUnknownError, "InternalError")),
    ],
)
def test_a_failure_past_the_budget_is_typed_and_writes_nothing(
    s3: S3Endpoint, client: Any, bucket: str, fault: Any, expected: tuple[type[StorageError], str]
) -> None:
    """A 409 that outlasts the retry budget surfaces as ConflictError; a 5xx past the SDK's
    retries with nothing applied as OutcomeUnknownError (it cannot know); the object absent
    either way."""
    store = ObjectStore(client, bucket, retry=RetryPolicy(max_attempts=3, sleep=no_sleep))
    s3.inject(fault, operation="PutObject")
    error, code = expected
    with pytest.raises(error) as info:
        store.put("k", b"x")
    assert (info.value.key, info.value.code) == ("k", code)
    s3.clear_faults()
    with pytest.raises(NotFoundError):
        store.head("k")


def test_slowdown_is_backed_off_then_throttled_error(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """503 SlowDown is retried by the SDK and the adapter, then raised as ThrottledError."""
    store = ObjectStore(client, bucket, retry=RetryPolicy(max_attempts=2, sleep=no_sleep))
    s3.inject("slowdown", operation="PutObject")
    with pytest.raises(ThrottledError):
        store.put("k", b"x")
    # 2 adapter attempts x 3 SDK attempts each (the endpoint's clients allow 3).
    assert s3.stats()["PutObject"] == 6


def test_connection_reset_is_unknown(s3: S3Endpoint, store: ObjectStore) -> None:
    """A connection reset on every attempt ends as OutcomeUnknownError after read-back."""
    s3.inject("reset", operation="PutObject")
    with pytest.raises(OutcomeUnknownError):
        store.put("k", b"x")


def test_timeout_is_unknown(s3: S3Endpoint, bucket: str) -> None:
    """A request that times out is OutcomeUnknownError, not an exception from botocore."""
    client = s3.client(read_timeout=0.2, retries={"mode": "standard", "total_max_attempts": 1})
    store = ObjectStore(client, bucket, retry=FAST_RETRY)
    s3.inject("timeout", operation="PutObject", delay=1.0, count=1)
    with pytest.raises(OutcomeUnknownError):
        store.put("k", b"x")


@pytest.mark.parametrize("kind", ["truncate", "corrupt"])
@pytest.mark.parametrize("byte_range", [None, (2, 9)])
def test_a_get_whose_body_is_lost_is_asked_again(
    s3: S3Endpoint, store: ObjectStore, kind: Any, byte_range: tuple[int, int] | None
) -> None:
    """A GET answered 200 whose body breaks off (``truncate``: an incomplete read) or fails
    its checksum (``corrupt``: FlexibleChecksumError) is sent again, whole or ranged, until
    the body arrives intact: a read changes nothing."""
    store.put("k", b"0123456789abcdef")
    s3.reset_stats()
    s3.inject(kind, operation="GetObject", prefix="k", count=2)
    data = store.get("k", byte_range=byte_range)
    assert data.body == (b"2345678" if byte_range else b"0123456789abcdef")
    assert s3.faults()["injected"] == {kind: 2}
    assert s3.stats()["GetObject"] == 3


@pytest.mark.parametrize("kind", ["truncate", "corrupt"])
def test_a_body_lost_on_every_try_is_unknown_once_the_budget_is_spent(
    s3: S3Endpoint, client: Any, bucket: str, kind: Any
) -> None:
    """A body lost on every try ends, once the store's retry budget is spent, as the typed
    error a lost body always was: OutcomeUnknownError for that GET, from botocore's error."""
    store = ObjectStore(client, bucket, retry=RetryPolicy(max_attempts=3, sleep=no_sleep))
    store.put("k", b"0123456789abcdef")
    s3.reset_stats()
    s3.inject(kind, operation="GetObject", prefix="k")
    with pytest.raises(OutcomeUnknownError) as info:
        store.get("k")
    assert (info.value.key, info.value.operation) == ("k", "GetObject")
    assert isinstance(info.value.__cause__, BotoCoreError)
    assert s3.stats()["GetObject"] == 3


@pytest.mark.parametrize("kind", ["truncate", "corrupt"])
def test_a_streamed_hash_whose_body_is_lost_is_read_and_hashed_again_from_the_start(
    s3: S3Endpoint, store: ObjectStore, kind: Any
) -> None:
    """A body hashed a few bytes at a time that breaks off midway (``truncate``) or fails its
    checksum at its end (``corrupt``) is asked for again and hashed from its start: the digest
    is the object's, never one over the bytes of a broken try and then the whole."""
    body = bytes(range(256)) * 64
    put = store.put("k", body)
    s3.reset_stats()
    s3.inject(kind, operation="GetObject", prefix="k", count=1)
    head, digest = store.sha256("k", chunk_size=100)
    assert digest == hashlib.sha256(body).hexdigest()
    assert (head.etag, head.size) == (put.etag, len(body))
    assert s3.faults()["injected"] == {kind: 1}
    assert s3.stats()["GetObject"] == 2


def test_lost_ack_on_create_is_success(s3: S3Endpoint, store: ObjectStore) -> None:
    """Applied, response lost, retried into 412: the adapter reads back its own write id."""
    s3.inject("lost_ack", operation="PutObject", count=1)
    result = store.put("k", b"mine", write_id="w-mine")
    assert result.resolved
    assert store.get("k").body == b"mine"
    assert s3.faults()["injected"] == {"lost_ack": 1}


def test_lost_ack_5xx_on_create_is_success(s3: S3Endpoint, store: ObjectStore) -> None:
    """Applied, then answered 500: the SDK retry's 412 is resolved as our success."""
    s3.inject("lost_ack_5xx", operation="PutObject", count=1)
    assert store.put("k", b"mine").resolved


def test_retry_into_someone_elses_object_is_already_exists(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """A retried create that meets another writer's object is AlreadyExistsError, not ours."""
    store.put("k", b"theirs", write_id="w-theirs")
    s3.inject("error", operation="PutObject", count=1)
    with pytest.raises(AlreadyExistsError) as info:
        store.put("k", b"mine", write_id="w-mine")
    assert info.value.actual_etag == store.head("k").etag
    assert store.get("k").body == b"theirs"


def test_lost_ack_on_cas_is_success(s3: S3Endpoint, store: ObjectStore) -> None:
    """A compare-and-swap whose ack is lost resolves as success by its write id."""
    etag = store.put("doc", b"v1").etag
    s3.inject("lost_ack", operation="PutObject", count=1)
    result = store.put("doc", b"v2", mode=IfMatch(etag))
    assert result.resolved
    assert result.etag == store.head("doc").etag
    assert store.get("doc").body == b"v2"


def test_cas_retried_into_foreign_write_is_unknown(s3: S3Endpoint, store: ObjectStore) -> None:
    """A CAS retried into a 412 where the object is not ours cannot be decided: unknown."""
    etag = store.put("doc", b"v1").etag
    other = ObjectStore(store.client, store.bucket)
    # First attempt is refused (nothing applied) while another writer moves the object on.
    s3.inject("stall", operation="PutObject", prefix="doc", count=1)
    s3.inject("error", operation="PutObject", prefix="doc", count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        mine = pool.submit(store.put, "doc", b"mine", mode=IfMatch(etag))
        wait_until(lambda: s3.stalled() == 1)
        s3.clear_faults()
        other.put("doc", b"theirs", mode=IfMatch(etag))
        s3.release_stalls()
        with pytest.raises(OutcomeUnknownError) as info:
            mine.result(timeout=30)
    assert info.value.expected_etag == etag
    assert info.value.actual_etag == other.head("doc").etag
    assert other.get("doc").body == b"theirs"


def test_multipart_create_and_lost_ack_on_completion(s3: S3Endpoint, store: ObjectStore) -> None:
    """A multipart write whose completion ack is lost still reports success, once."""
    body = bytes(range(256)) * (7 * MIB // 256)
    s3.inject("lost_ack", operation="CompleteMultipartUpload", count=1)
    result = store.put("big", body)
    assert store.get("big").body == body
    assert store.head("big").write_id == result.write_id
    assert s3.stats()["CreateMultipartUpload"] == 1


def test_multipart_create_loses_to_racing_writer(s3: S3Endpoint, store: ObjectStore) -> None:
    """A writer that completes first wins; our multipart completion gets AlreadyExistsError
    and our upload is aborted."""
    body = b"m" * (7 * MIB)
    s3.inject("stall", operation="CompleteMultipartUpload", count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ours = pool.submit(store.put, "big", body)
        wait_until(lambda: s3.stalled() == 1)
        ObjectStore(store.client, store.bucket).put("big", b"winner")
        s3.release_stalls()
        with pytest.raises(AlreadyExistsError):
            ours.result(timeout=30)
    assert store.get("big").body == b"winner"
    assert s3.stats().get("AbortMultipartUpload") == 1
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
    assert uploads == []


def test_multipart_cas_with_racing_writer(s3: S3Endpoint, store: ObjectStore) -> None:
    """A multipart If-Match completion loses to a CAS that landed first: 412, theirs kept."""
    etag = store.put("root", b"v1").etag
    s3.inject("stall", operation="CompleteMultipartUpload", count=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ours = pool.submit(store.put, "root", b"r" * (7 * MIB), mode=IfMatch(etag))
        wait_until(lambda: s3.stalled() == 1)
        store.put("root", b"v2", mode=IfMatch(etag))
        s3.release_stalls()
        with pytest.raises(PreconditionFailedError):
            ours.result(timeout=30)
    assert store.get("root").body == b"v2"


def test_multipart_conflict_restarts_whole_upload(s3: S3Endpoint, store: ObjectStore) -> None:
    """409 on completion aborts and restarts the upload from CreateMultipartUpload."""
    s3.inject("conflict", operation="CompleteMultipartUpload", count=1)
    body = io.BytesIO(b"q" * (7 * MIB))
    result = store.put("big", body)
    assert result.attempts == 2
    stats = s3.stats()
    assert (stats["CreateMultipartUpload"], stats["AbortMultipartUpload"]) == (2, 1)
    assert store.get("big").body == body.getvalue()


def test_multipart_part_failure_aborts(s3: S3Endpoint, store: ObjectStore) -> None:
    """A part that cannot be uploaded aborts the upload: no parts are left billed."""
    s3.inject("error", operation="UploadPart")
    with pytest.raises(OutcomeUnknownError):
        store.put("big", b"p" * (7 * MIB))
    s3.clear_faults()
    assert store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []
    with pytest.raises(NotFoundError):
        store.head("big")


def test_copy_is_create_only(store: ObjectStore) -> None:
    """Server-side copy lands a new object with its own write id; onto an existing key it is
    AlreadyExistsError and the destination is untouched."""
    store.put("src", b"data" * 1000, metadata={"origin": "src"})
    result = store.copy("src", "dst", metadata={"copied": "yes"})
    head = store.head("dst")
    assert store.get("dst").body == b"data" * 1000
    assert (head.write_id, head.metadata["copied"]) == (result.write_id, "yes")
    store.put("taken", b"keep")
    with pytest.raises(AlreadyExistsError):
        store.copy("src", "taken")
    assert store.get("taken").body == b"keep"


def test_copy_of_multipart_sized_object(store: ObjectStore) -> None:
    """Copies of objects larger than a part go in several UploadPartCopy ranges."""
    body = bytes(range(256)) * (11 * MIB // 256)
    store.put("src", body)
    small_parts = ObjectStore(store.client, store.bucket, part_size=5 * MIB)
    small_parts.copy("src", "dst")
    assert store.get("dst").body == body
    assert small_parts.stats.snapshot()["UploadPartCopy"] == 3


def test_copy_of_empty_object(store: ObjectStore) -> None:
    """An empty object copies too (one part without a byte range)."""
    store.put("empty", b"")
    store.copy("empty", "copy")
    assert store.get("copy").body == b""


def test_copy_of_a_version_that_was_replaced_copies_nothing(store: ObjectStore) -> None:
    """A copy asked for the version of the source with a given ETag, after the source was
    replaced, is PreconditionFailedError and nothing is at the destination: a copy is never
    of bytes other than the ones its caller read (and hashed)."""
    read = store.put("src", b"first").etag
    replaced = store.put("src", b"second", mode="overwrite").etag
    with pytest.raises(PreconditionFailedError) as info:
        store.copy("src", "dst", source_etag=read)
    assert (info.value.key, info.value.expected_etag) == ("src", read)
    with pytest.raises(NotFoundError):
        store.head("dst")
    store.copy("src", "dst", source_etag=replaced)
    assert store.get("dst").body == b"second"


def test_conditional_delete(store: ObjectStore) -> None:
    """Delete with If-Match: stale ETag PreconditionFailedError, missing NotFoundError."""
    etag = store.put("k", b"1").etag
    with pytest.raises(PreconditionFailedError):
        store.delete("k", if_match='"stale"')
    store.delete("k", if_match=etag)
    with pytest.raises(NotFoundError):
        store.delete("k", if_match=etag)


def test_delete_many_reports_per_key(store: ObjectStore) -> None:
    """DeleteObjects with per-key ETags: matching deleted, stale and missing reported."""
    good = store.put("good", b"1").etag
    store.put("stale", b"2")
    results = store.delete_many([("good", good), ("stale", '"0"'), ("missing", '"0"')])
    assert results["good"] is None
    assert isinstance(results["stale"], PreconditionFailedError)
    assert isinstance(results["missing"], NotFoundError)
    assert [o.key for o in store.list()] == ["stale"]


def test_list_pages_through_prefix(s3: S3Endpoint, client: Any, bucket: str) -> None:
    """list() follows continuation tokens, page by page, and strips the store's prefix."""
    store = ObjectStore(client, bucket, prefix="lake/")
    for key in [f"lake/d/{n:02d}" for n in range(25)] + ["elsewhere"]:
        client.put_object(Bucket=bucket, Key=key, Body=b"")
    s3.reset_stats()
    keys = [o.key for o in store.list("d/", page_size=10)]
    assert keys == [f"d/{n:02d}" for n in range(25)]
    assert s3.stats() == {"ListObjectsV2": 3}


@pytest.mark.slow
def test_list_pages_through_prefix_at_s3s_page_size(client: Any, bucket: str) -> None:
    """The same, where S3 cuts the pages itself (1,000 keys)."""
    store = ObjectStore(client, bucket, prefix="lake/")
    with concurrent.futures.ThreadPoolExecutor(16) as pool:  # one more than a page of 1000
        keys = [f"lake/d/{n:05d}" for n in range(1005)] + ["elsewhere"]
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=b""), keys))
    keys = [o.key for o in store.list("d/")]
    assert keys == [f"d/{n:05d}" for n in range(1005)]


def test_unsupported_condition_is_typed(store: ObjectStore) -> None:
    """501 NotImplemented from the store is classified as UnsupportedError."""
    from botocore.exceptions import ClientError

    from lakelock._s3 import Call, classify

    with pytest.raises(ClientError) as info:
        store.client.put_object(Bucket=store.bucket, Key="k", Body=b"", IfNoneMatch='"x"')
    error = classify(info.value, bucket=store.bucket, call=Call("PutObject", "k", "create"))
    assert isinstance(error, UnsupportedError)
    assert (error.status, error.code) == (501, "NotImplemented")


def test_stats_count_every_request(s3: S3Endpoint, store: ObjectStore) -> None:
    """The client-side counts match what the endpoint received, retries included."""
    store.stats.reset()
    s3.reset_stats()
    s3.inject("error", operation="PutObject", count=2)
    store.put("k", b"x")
    store.head("k")
    assert store.stats.snapshot() == {"PutObject": 3, "HeadObject": 1}
    assert s3.stats() == {"PutObject": 3, "HeadObject": 1}


def test_the_endpoint_counts_requests_by_area(
    s3: S3Endpoint, store: ObjectStore, admin: Any
) -> None:
    """Requests are also counted by the part of the lake's layout they touch (its key, or
    a listing's prefix), wherever the lake's prefix puts it: what a benchmark reads to see
    where a protocol's requests go."""
    s3.reset_stats()
    client, bucket = admin, store.bucket  # plain PUTs: a client the bucket policy does not bind
    for key in (
        "lake/metastore/dataset_registry.json",
        "lake/metastore/intents/0001.json",
        "metastore/snapshots/sales/a.json",
        "lake/datasets/sales/part-0.parquet",
        "table/_delta_log/00000000000000000000.json",
        "notes.txt",
    ):
        client.put_object(Bucket=bucket, Key=key, Body=b"x")
    client.get_object(Bucket=bucket, Key="lake/metastore/dataset_registry.json")
    client.list_objects_v2(Bucket=bucket, Prefix="lake/metastore/intents/")
    client.list_objects_v2(Bucket=bucket, Prefix="lake/metastore/")
    assert s3.areas() == {
        "PutObject root": 1,
        "PutObject metastore/intents": 1,
        "PutObject metastore/snapshots": 1,
        "PutObject datasets": 1,
        "PutObject _delta_log": 1,
        "PutObject other": 1,
        "GetObject root": 1,
        "ListObjectsV2 metastore/intents": 1,
        "ListObjectsV2 metastore": 1,
    }
    s3.reset_stats()
    assert s3.areas() == {}


def test_sixteen_threads_create_one_key(store: ObjectStore) -> None:
    """16 threads creating the same key: one winner, fifteen AlreadyExistsError."""

    def create(n: int) -> str:
        try:
            store.put("same", f"writer-{n}".encode())
        except AlreadyExistsError:
            return "exists"
        return f"writer-{n}"

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(create, range(16)))
    winners = [o for o in outcomes if o != "exists"]
    assert len(winners) == 1
    assert store.get("same").body == winners[0].encode()


def test_cas_race_loses_no_update(s3: S3Endpoint, store: ObjectStore) -> None:
    """Eight read-modify-write increments of one counter, all from the same version, are held
    at the endpoint until all eight have arrived and then released at once, five rounds over:
    in each round exactly one If-Match PUT wins and seven get 412, so no update is lost and
    the counter ends at 5."""
    writers, rounds = 8, 5
    store.put("counter", b"0")
    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        for _ in range(rounds):
            current = store.get("counter")
            value = str(int(current.body) + 1).encode()

            def increment(_: int, value: bytes = value, etag: str = current.etag) -> bool:
                try:
                    store.put("counter", value, mode=IfMatch(etag))
                except PreconditionFailedError:
                    return False
                return True

            s3.inject("stall", operation="PutObject", prefix="counter", count=writers)
            racing = pool.map(increment, range(writers))
            wait_until(lambda: s3.stalled() == writers)
            s3.release_stalls()
            assert sorted(racing) == [False] * (writers - 1) + [True]
    assert store.get("counter").body == str(rounds).encode()


def test_errors_are_storage_errors_with_fields(store: ObjectStore) -> None:
    """Every adapter error is a StorageError naming bucket, key and operation."""
    with pytest.raises(StorageError) as info:
        store.get("nope")
    assert (info.value.bucket, info.value.key, info.value.operation) == (
        store.bucket,
        "nope",
        "GetObject",
    )


def test_only_large_bodies_wait_for_100_continue(client: Any, store: ObjectStore) -> None:
    """A small write goes out without ``Expect: 100-continue`` (no round trip spent asking
    to send its body), bytes or file; from 2 MiB on, single PUTs and multipart parts keep it;
    every body lands whole either way. Observed on the wire (the request as sent)."""
    sent: list[tuple[str, str | None]] = []

    def record(request: Any, event_name: str, **_: Any) -> None:
        expect = request.headers.get("Expect")
        sent.append((event_name.rsplit(".", 1)[-1], expect.decode() if expect else None))

    client.meta.events.register("before-send.s3", record)
    try:
        store.put("small-bytes", b"x" * 1000)
        store.put("small-file", io.BytesIO(b"y" * (2 * MIB - 1)))
        store.put("large-single", b"z" * (2 * MIB))
        store.put("multipart", b"w" * (6 * MIB + 1))  # one part (16 MiB parts)
    finally:
        client.meta.events.unregister("before-send.s3", record)
    puts = [s for s in sent if s[0] in {"PutObject", "UploadPart"}]
    assert puts == [
        ("PutObject", None),
        ("PutObject", None),
        ("PutObject", "100-continue"),
        ("UploadPart", "100-continue"),
    ]
    assert store.get("small-file").body == b"y" * (2 * MIB - 1)
    assert store.get("large-single").body == b"z" * (2 * MIB)
    assert store.get("multipart").body == b"w" * (6 * MIB + 1)


def test_a_body_that_cannot_tell_its_length_keeps_100_continue() -> None:
    """The hook leaves ``Expect: 100-continue`` on a write whose body cannot say how long it
    is (a pipe: seeking fails), as botocore set it; it never raises."""
    from lakelock._s3._continue import _drop_expect_for_small_bodies

    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as body, os.fdopen(write_end, "wb"):
        params: dict[str, Any] = {"headers": {"Expect": "100-continue"}, "body": body}
        _drop_expect_for_small_bodies(params)
    assert params["headers"] == {"Expect": "100-continue"}


def test_the_endpoint_counts_every_answer_other_than_2xx(
    s3: S3Endpoint, store: ObjectStore
) -> None:
    """What a benchmark reads to tell a protocol's lost compare-and-swaps (412) from its
    conflicts (409) and throttles (503): each answer other than 2xx, by operation, part of
    the layout and status; answers that succeeded are not there, and a reset clears them."""
    stale = store.put("doc", b"v1").etag
    store.put("doc", b"v2", mode=IfMatch(stale))
    s3.reset_stats()
    with pytest.raises(PreconditionFailedError):
        store.put("doc", b"v3", mode=IfMatch(stale))
    with pytest.raises(NotFoundError):
        store.get("missing")
    assert store.get("doc").body == b"v2"
    assert s3.refused() == {"PutObject other 412": 1, "GetObject other 404": 1}
    s3.reset_stats()
    assert s3.refused() == {}
