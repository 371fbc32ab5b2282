"""The S3 features lakelock needs of a store, each with a probe that makes the store show it.

This is the one list of them: ``lakelock doctor`` runs it (:mod:`._doctor`) and prints what
came back, and docs/ARCHITECTURE.md ("S3 facts lakelock relies on") says why each holds.
Each probe is a small function over a :class:`Scratch` (a boto3 client, a bucket and a scratch
prefix that the doctor removes afterwards). It makes the store show its behaviour with real
requests -- a precondition that must fail is made to fail -- and returns ``(status, detail)``:
``"pass"``, ``"fail"`` or ``"skip"`` with one line saying what the store answered.

Probes send raw boto3 requests rather than going through :class:`~lakelock._s3.ObjectStore`,
whose job is to *hide* these outcomes (it resolves lost acknowledgements, retries 409s and maps
answers to errors); the doctor needs to see exactly what came back. They are the only
requests of the package that do not go through it.

What each probe is *needed* for says what lakelock does with the feature:

``required``
    lakelock's writes depend on it ("S3 facts lakelock relies on" in docs/ARCHITECTURE.md),
    or the lake's objects on it (no lifecycle rule of the bucket expires or archives them):
    a store failing one -- or where one could not be checked -- is not safe for lakelock.
``vacuum``
    ``vacuum --delete`` deletes with ``DeleteObjects`` and per-key ETags where the store
    honours them, else with one ``DeleteObject`` + ``If-Match`` per object, and refuses to
    delete where neither is honoured (:meth:`lakelock._s3.ObjectStore.delete_if_unchanged`).
    The ``vacuum deletes`` probe runs lakelock's own detection and says which it will be.
``recommended``
    the bucket policy from ``lakelock policy``: it makes the store refuse writers that bypass
    lakelock's protocols; lakelock itself runs without one.
``optional``
    an alternative lakelock avoids (``CopyObject`` destination conditions), worth knowing for
    other tools on the same bucket.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from botocore.exceptions import ClientError, EndpointConnectionError

from lakelock._layout import DATASETS_PREFIX, METASTORE_PREFIX, VIEWS_PREFIX
from lakelock._policy import DELETE_SIDS, SID_OVERWRITE_MANIFESTS, generate_bucket_policy
from lakelock._s3._store import ObjectStore
from lakelock.errors import UnsupportedError

__all__ = ["PROBES", "VACUUM_PROBE", "Answer", "Need", "Probe", "Scratch", "Status", "run_probe"]

Status = Literal["pass", "fail", "skip"]
Need = Literal["required", "vacuum", "recommended", "optional"]
Outcome = tuple[Status, str]

#: Sids of the statements ``generate_bucket_policy`` emits (the write-guarding ones).
_POLICY_SIDS = {
    "DenyUnconditionalCreateInDatasets": "datasets",
    "DenyUnconditionalWriteInMetastore": "metastore",
}


@dataclass(frozen=True)
class Answer:
    """What the store answered to one request: HTTP status, S3 error code (empty on success)
    and the parsed response."""

    status: int
    code: str
    response: dict[str, Any]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.code

    @property
    def etag(self) -> str:
        return str(self.response.get("ETag", ""))

    def __str__(self) -> str:
        return f"{self.status} {self.code}".strip() if self.code else f"{self.status} OK"


@dataclass
class Scratch:
    """Where probes write: ``prefix`` (ends with ``/``) in ``bucket``. Every key a probe
    touches and every multipart upload it starts is recorded for the cleanup."""

    client: Any
    bucket: str
    prefix: str
    #: The prefix of the lake the doctor was asked about ("" for the bucket's root).
    lake: str = ""
    touched: set[str] = field(default_factory=set)
    uploads: list[tuple[str, str]] = field(default_factory=list)
    _counter: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def key(self, name: str) -> str:
        """A fresh key under the scratch prefix."""
        with self._lock:
            self._counter += 1
            key = f"{self.prefix}{self._counter:02d}-{name}"
            self.touched.add(key)
        return key

    def ask(self, method: str, **kwargs: Any) -> Answer:
        """Call ``client.<method>(Bucket=bucket, **kwargs)`` and report the answer, failure
        included. Connection errors are raised: there is nothing to probe without a store."""
        try:
            response = getattr(self.client, method)(Bucket=self.bucket, **kwargs)
        except ClientError as error:
            info = error.response.get("Error", {})
            meta = error.response.get("ResponseMetadata", {})
            code = str(info.get("Code", "")) or "Error"
            return Answer(int(meta.get("HTTPStatusCode", 0)), code, dict(error.response))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        return Answer(status, "", dict(response))

    def put(self, key: str, body: bytes, **conditions: str) -> Answer:
        self.touched.add(key)
        return self.ask("put_object", Key=key, Body=body, **conditions)

    def body(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` if it does not exist."""
        answer = self.ask("get_object", Key=key)
        if not answer.ok:
            return None
        data: bytes = answer.response["Body"].read()
        return data

    def multipart(
        self,
        key: str,
        *,
        body: bytes = b"",
        copy_from: str | None = None,
        copy_if_match: str | None = None,
        before_complete: Callable[[], None] | None = None,
        **conditions: str,
    ) -> Answer:
        """One single-part multipart upload of ``body`` (or an ``UploadPartCopy`` of
        ``copy_from``, if its ETag is still ``copy_if_match`` when given), completed under
        ``conditions``; aborted unless it completed."""
        self.touched.add(key)
        created = self.ask("create_multipart_upload", Key=key)
        if not created.ok:
            return created
        upload_id = created.response["UploadId"]
        self.uploads.append((key, upload_id))
        if copy_from is None:
            part = self.ask("upload_part", Key=key, UploadId=upload_id, PartNumber=1, Body=body)
            etag = part.etag
        else:
            source_condition = {"CopySourceIfMatch": copy_if_match} if copy_if_match else {}
            part = self.ask(
                "upload_part_copy",
                Key=key,
                UploadId=upload_id,
                PartNumber=1,
                CopySource={"Bucket": self.bucket, "Key": copy_from},
                **source_condition,
            )
            etag = str(part.response.get("CopyPartResult", {}).get("ETag", ""))
        if not part.ok:
            return part
        if before_complete is not None:
            before_complete()
        done = self.ask(
            "complete_multipart_upload",
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
            **conditions,
        )
        if done.ok:
            self.uploads.remove((key, upload_id))
        return done


def _unexpected(what: str, answer: Answer) -> Outcome:
    return "fail", f"{what} answered {answer}"


def _refused(
    s: Scratch, key: str, answer: Answer, what: str, kept: bytes, *, applied: str | None = None
) -> Outcome | None:
    """``None`` if a conditional write that must be refused was: 412 PreconditionFailed, and
    the object at ``key`` still ``kept``; else the failed outcome (``applied`` says what a
    200 means; by default, that ``what`` overwrote the object)."""
    if answer.ok:
        return "fail", applied or f"{what} overwrote the object (200): ignored"
    if answer.status != 412 and answer.code != "PreconditionFailed":
        return _unexpected(what, answer)
    if s.body(key) != kept:
        return "fail", f"{what} answered 412 but the object changed anyway"
    return None


def _stale_etag() -> str:
    return f'"{uuid.uuid4().hex}"'


# -- the probes ---------------------------------------------------------------------------------


def probe_create_only_put(s: Scratch) -> Outcome:
    """``PutObject`` with ``If-None-Match: *``: the first create succeeds, a second is refused
    with 412 and leaves the first object as it was."""
    key = s.key("create-only")
    first = s.put(key, b"first", IfNoneMatch="*")
    if not first.ok:
        return _unexpected("a create-only PutObject of a new key", first)
    second = s.put(key, b"second", IfNoneMatch="*")
    passed = "a second create of the key answered 412 and left it unchanged"
    return _refused(s, key, second, "a second create-only PutObject", b"first") or ("pass", passed)


def probe_compare_and_swap_put(s: Scratch) -> Outcome:
    """``PutObject`` with ``If-Match``: succeeds on the current ETag, 412 on a stale one."""
    key = s.key("if-match")
    first = s.put(key, b"v1", IfNoneMatch="*")
    if not first.ok:
        return _unexpected("creating the object", first)
    second = s.put(key, b"v2", IfMatch=first.etag)
    if not second.ok:
        return _unexpected("PutObject with the current ETag as If-Match", second)
    stale = s.put(key, b"v3", IfMatch=first.etag)
    passed = "current ETag accepted; a stale one answered 412, object unchanged"
    return _refused(s, key, stale, "PutObject with a stale If-Match", b"v2") or ("pass", passed)


def probe_if_match_missing(s: Scratch) -> Outcome:
    """``If-Match`` on a key that does not exist must not create it (S3: 404 NoSuchKey)."""
    key = s.key("if-match-missing")
    answer = s.put(key, b"ghost", IfMatch=_stale_etag())
    if answer.ok:
        return "fail", "PutObject with If-Match created a missing key (200)"
    if s.body(key) is not None:
        return "fail", f"answered {answer} but created the key anyway"
    if answer.status == 404:
        return "pass", f"answered {answer}; nothing created"
    if answer.status == 412:
        return "pass", "answered 412 (S3 answers 404 NoSuchKey); nothing created"
    return _unexpected("PutObject with If-Match on a missing key", answer)


def probe_list_start_after(s: Scratch) -> Outcome:
    """``ListObjectsV2`` with ``StartAfter``: only the keys after it, in key order. A fold
    lists the intents after the watermark so, and vacuum pages so (a store without it, such
    as S3 Express One Zone's directory buckets, lists from the start again)."""
    folder = s.key("listed") + "/"
    keys = [f"{folder}{n}" for n in range(3)]
    for key in keys:
        made = s.put(key, b"", IfNoneMatch="*")
        if not made.ok:
            return _unexpected("creating the objects to list", made)
    answer = s.ask("list_objects_v2", Prefix=folder, StartAfter=keys[0])
    if not answer.ok:
        return _unexpected("ListObjectsV2 with StartAfter", answer)
    listed = [str(o.get("Key", "")) for o in answer.response.get("Contents", [])]
    if listed != keys[1:]:
        return "fail", f"ListObjectsV2 after the first of 3 keys listed {len(listed)} of them"
    return "pass", "only the keys after StartAfter, in key order"


def probe_concurrent_creates(s: Scratch, *, rounds: int = 3, writers: int = 8) -> Outcome:
    """Racing create-only PUTs of one key: exactly one may succeed (the check and the write
    must be atomic; an unguarded check-then-write lets two writers both "create")."""
    for round_ in range(rounds):
        key = s.key(f"race-{round_}")
        barrier = threading.Barrier(writers)
        answers: list[Answer | BaseException] = [Answer(0, "", {})] * writers

        def create(
            i: int,
            key: str = key,
            barrier: threading.Barrier = barrier,
            answers: list[Answer | BaseException] = answers,
        ) -> None:
            try:
                barrier.wait(timeout=30)
                answers[i] = s.put(key, f"writer {i}".encode(), IfNoneMatch="*")
            except BaseException as error:
                answers[i] = error

        threads = [threading.Thread(target=create, args=(i,)) for i in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        won = [a for a in answers if isinstance(a, Answer) and a.ok]
        odd = [
            a for a in answers if isinstance(a, Answer) and not a.ok and a.status not in {409, 412}
        ]
        if len(won) > 1:
            return "fail", (
                f"{len(won)} of {writers} concurrent create-only PUTs of one key succeeded: "
                "the precondition check is not atomic with the write"
            )
        if odd:
            return _unexpected("a concurrent create-only PutObject", odd[0])
        if not won:
            return "fail", f"none of {writers} concurrent create-only PUTs succeeded"
    return "pass", f"{rounds} races of {writers} writers: exactly one create won each"


def probe_create_only_multipart(s: Scratch) -> Outcome:
    """``CompleteMultipartUpload`` with ``If-None-Match: *``: completes on a new key, 412 on
    an existing one (large data files are written this way)."""
    fresh = s.key("mpu-create")
    done = s.multipart(fresh, body=b"multipart", IfNoneMatch="*")
    if not done.ok:
        return _unexpected("a create-only multipart completion on a new key", done)
    taken = s.key("mpu-create-taken")
    existing = s.put(taken, b"original", IfNoneMatch="*")
    if not existing.ok:
        return _unexpected("creating the object", existing)
    clash = s.multipart(taken, body=b"overwrite", IfNoneMatch="*")
    return _refused(
        s,
        taken,
        clash,
        "a create-only multipart completion on an existing key",
        b"original",
        applied="a create-only multipart completion overwrote an existing object (200): "
        "If-None-Match on CompleteMultipartUpload is ignored",
    ) or ("pass", "completed on a new key; on an existing key answered 412, object unchanged")


def probe_compare_and_swap_multipart(s: Scratch) -> Outcome:
    """``CompleteMultipartUpload`` with ``If-Match`` (a large registry root is written this
    way): the object is overwritten while the upload is in flight, so completing with the
    ETag read before must answer 412; completing with the current ETag must succeed."""
    key = s.key("mpu-if-match")
    first = s.put(key, b"v1", IfNoneMatch="*")
    if not first.ok:
        return _unexpected("creating the object", first)
    overwritten: list[Answer] = []

    def overwrite() -> None:
        overwritten.append(s.put(key, b"v2", IfMatch=first.etag))

    stale = s.multipart(key, body=b"v3", before_complete=overwrite, IfMatch=first.etag)
    if overwritten and not overwritten[0].ok:
        return _unexpected("overwriting the object during the upload", overwritten[0])
    refused = _refused(
        s,
        key,
        stale,
        "completion with a stale If-Match",
        b"v2",
        applied="completion with a stale If-Match was applied (200): the store ignores "
        "If-Match on CompleteMultipartUpload",
    )
    if refused is not None:
        return refused
    current = s.multipart(key, body=b"v4", IfMatch=overwritten[0].etag)
    if not current.ok:
        return _unexpected("completion with the current ETag as If-Match", current)
    return "pass", "a stale If-Match answered 412; the current ETag completed"


def probe_create_only_copy(s: Scratch) -> Outcome:
    """A server-side copy as lakelock makes it (partition copy/rename): ``UploadPartCopy`` and
    a completion with ``If-None-Match: *`` -- lands on a new key, 412 on an existing one."""
    source = s.key("copy-source")
    if not (made := s.put(source, b"source", IfNoneMatch="*")).ok:
        return _unexpected("creating the copy source", made)
    fresh = s.key("copy-target")
    done = s.multipart(fresh, copy_from=source, IfNoneMatch="*")
    if not done.ok:
        return _unexpected("UploadPartCopy + create-only completion on a new key", done)
    if s.body(fresh) != b"source":
        return "fail", "the copy completed but its bytes differ from the source"
    taken = s.key("copy-taken")
    if not (made := s.put(taken, b"original", IfNoneMatch="*")).ok:
        return _unexpected("creating the copy target", made)
    clash = s.multipart(taken, copy_from=source, IfNoneMatch="*")
    if clash.ok:
        return "fail", "a create-only copy overwrote an existing object (200)"
    if clash.status != 412 and clash.code != "PreconditionFailed":
        return _unexpected("a create-only copy onto an existing key", clash)
    if s.body(taken) != b"original":
        return "fail", "the copy answered 412 but the target changed anyway"
    return "pass", "copied to a new key; onto an existing key answered 412"


def probe_copy_source_if_match(s: Scratch) -> Outcome:
    """``UploadPartCopy`` with ``x-amz-copy-source-if-match``: lakelock copies a source as it
    first read it (its ETag), so a source replaced since must answer 412, not copy the new
    bytes; the current ETag copies."""
    source = s.key("copy-source-if-match")
    first = s.put(source, b"first")
    if not first.ok:
        return _unexpected("creating the copy source", first)
    second = s.put(source, b"second")
    if not second.ok:
        return _unexpected("replacing the copy source", second)
    stale = s.multipart(s.key("copy-stale"), copy_from=source, copy_if_match=first.etag)
    if stale.ok:
        return "fail", (
            "UploadPartCopy with a stale x-amz-copy-source-if-match copied the replaced source "
            "(200): the condition is ignored"
        )
    if stale.status != 412:
        return _unexpected("UploadPartCopy with a stale x-amz-copy-source-if-match", stale)
    current = s.multipart(s.key("copy-current"), copy_from=source, copy_if_match=second.etag)
    if not current.ok:
        return _unexpected("UploadPartCopy with the current ETag as the condition", current)
    return "pass", "a replaced source answered 412; the current ETag copied"


def probe_conditional_copy_object(s: Scratch) -> Outcome:
    """``CopyObject`` with destination ``If-None-Match: *`` / ``If-Match`` (AWS since late
    2025). lakelock copies by UploadPartCopy instead, so this one is optional."""
    source = s.key("copyobject-source")
    target = s.key("copyobject-target")
    for key, body in ((source, b"source"), (target, b"target")):
        if not (made := s.put(key, body, IfNoneMatch="*")).ok:
            return _unexpected("creating the objects", made)
    copy_source = {"Bucket": s.bucket, "Key": source}
    create = s.ask("copy_object", Key=target, CopySource=copy_source, IfNoneMatch="*")
    if create.ok:
        return "fail", "CopyObject with If-None-Match: * overwrote an existing object (200)"
    if create.status not in {412, 501}:
        return _unexpected("CopyObject with If-None-Match: * onto an existing key", create)
    cas = s.ask("copy_object", Key=target, CopySource=copy_source, IfMatch=_stale_etag())
    if cas.ok:
        return "fail", "CopyObject with a stale If-Match overwrote the object (200)"
    if s.body(target) != b"target":
        return "fail", "CopyObject answered an error but the target changed anyway"
    if create.status == 501 or cas.status == 501:
        return "fail", "CopyObject destination conditions are not implemented here (501)"
    if cas.status != 412:
        return _unexpected("CopyObject with a stale If-Match", cas)
    return "pass", "If-None-Match and a stale If-Match on the destination answered 412"


def probe_conditional_delete(s: Scratch) -> Outcome:
    """``DeleteObject`` with ``If-Match``: 412 on a stale ETag and the object stays; deleted
    on the current one. vacuum deletes this way, one object per request, where
    ``DeleteObjects`` ignores per-key ETags."""
    key = s.key("delete-if-match")
    made = s.put(key, b"doomed", IfNoneMatch="*")
    if not made.ok:
        return _unexpected("creating the object", made)
    stale = s.ask("delete_object", Key=key, IfMatch=_stale_etag())
    if s.body(key) is None:
        return "fail", f"DeleteObject with a stale If-Match deleted the object ({stale})"
    if stale.status != 412:
        return _unexpected("DeleteObject with a stale If-Match", stale)
    current = s.ask("delete_object", Key=key, IfMatch=made.etag)
    if not current.ok:
        return _unexpected("DeleteObject with the current ETag as If-Match", current)
    if s.body(key) is not None:
        return "fail", "DeleteObject with the current ETag answered success but kept the object"
    return "pass", "a stale If-Match answered 412 and kept the object; the current ETag deleted"


def probe_conditional_delete_objects(s: Scratch) -> Outcome:
    """``DeleteObjects`` with a per-key ``ETag``: a stale entry is refused, the rest deleted.
    vacuum deletes this way, 1000 objects per request, where the store honours it."""
    keep, drop = s.key("batch-keep"), s.key("batch-drop")
    etags = {}
    for key in (keep, drop):
        made = s.put(key, b"batch", IfNoneMatch="*")
        if not made.ok:
            return _unexpected("creating the objects", made)
        etags[key] = made.etag
    answer = s.ask(
        "delete_objects",
        Delete={
            "Objects": [{"Key": keep, "ETag": _stale_etag()}, {"Key": drop, "ETag": etags[drop]}],
            "Quiet": False,
        },
    )
    if not answer.ok:
        return _unexpected("DeleteObjects with per-key ETags", answer)
    errors = {e.get("Key"): e.get("Code") for e in answer.response.get("Errors", [])}
    if s.body(keep) is None:
        return "fail", "DeleteObjects deleted an entry whose ETag was stale: per-key ETags ignored"
    if errors.get(keep) != "PreconditionFailed":
        return "fail", f"a stale entry was kept but reported as {errors.get(keep)!r}"
    if s.body(drop) is not None:
        return "fail", "DeleteObjects kept an entry whose ETag matched"
    return "pass", "the stale entry was refused (PreconditionFailed), the matching one deleted"


def probe_vacuum_deletes(s: Scratch) -> Outcome:
    """What ``vacuum --delete`` will do on this store, found by lakelock's own detection
    (:meth:`~lakelock._s3.ObjectStore.conditional_delete_method`, here inside the scratch
    prefix): delete in batches, one object at a time, or refuse."""
    store = ObjectStore(s.client, s.bucket, prefix=f"{s.prefix}vacuum-")
    try:
        method = store.conditional_delete_method()
    except UnsupportedError as error:
        if error.code is None:  # lakelock's own verdict, not a store's answer
            return "fail", (
                "refuses to delete here: the store honours neither per-key ETags in "
                "DeleteObjects nor If-Match on DeleteObject (orphans are still reported)"
            )
        raise
    if method == "batch":
        return "pass", "deletes with DeleteObjects and per-key ETags (1000 per request)"
    return "pass", (
        "deletes one object per request (DeleteObject + If-Match): DeleteObjects "
        "does not honour per-key ETags here"
    )


def probe_policy_enforcement(s: Scratch) -> Outcome:
    """The bucket policy from ``lakelock policy``, if the bucket has one: unconditional writes
    into ``datasets/`` and ``metastore/`` must answer 403, lakelock's own conditional writes
    must still pass, and every statement lakelock's generator makes now, with the options the
    policy shows were chosen, must be there (:func:`_missing_statements`)."""
    answer = s.ask("get_bucket_policy")
    if answer.code in {"NoSuchBucketPolicy", "NoSuchPolicy"} or answer.status == 404:
        return "skip", "the bucket has no policy (`lakelock policy` makes S3 refuse stray writes)"
    if not answer.ok:
        return "skip", f"cannot read the bucket policy ({answer})"
    try:
        policy = orjson.loads(answer.response.get("Policy", "{}"))
        statements = policy.get("Statement", [])
        statements = [statements] if isinstance(statements, dict) else list(statements)
    except (orjson.JSONDecodeError, AttributeError):
        return "fail", "the bucket policy is not valid JSON"
    areas: dict[str, str] = {}
    for statement in statements:
        area = _POLICY_SIDS.get(statement.get("Sid", "")) if isinstance(statement, dict) else None
        resource = statement.get("Resource") if area else None
        if area and isinstance(resource, str) and resource.endswith("*"):
            areas[area] = resource.split(":::", 1)[-1].split("/", 1)[-1][:-1]
    if not areas:
        return "skip", "the bucket policy has no lakelock statements (see `lakelock policy`)"
    checked = []
    for area, prefix in sorted(areas.items()):
        key = f"{prefix}.lakelock-doctor-{s.prefix.rstrip('/').rsplit('/', 1)[-1]}"
        s.touched.add(key)
        allowed = s.put(key, b"conditional", IfNoneMatch="*")
        if not allowed.ok:
            return "fail", (
                f"the policy refuses lakelock's own create-only PutObject in {prefix} ({allowed})"
            )
        refused = s.put(key, b"unconditional")
        if refused.ok:
            return "fail", (
                f"an unconditional PutObject in {prefix} was accepted: the store does not "
                "enforce the policy, or the policy does not bind this caller"
            )
        if refused.status != 403:
            return _unexpected(f"an unconditional PutObject in {prefix}", refused)
        if area == "metastore":
            swapped = s.put(key, b"swapped", IfMatch=allowed.etag)
            if not swapped.ok:
                return "fail", f"the policy refuses a compare-and-swap in {prefix} ({swapped})"
        checked.append(prefix or "/")
    missing = _missing_statements(statements)
    if missing:
        return "fail", (
            f"the bucket policy is lakelock's but lacks {', '.join(missing)}, which `lakelock "
            "policy` makes now: generate it again (the same principals and options) and put "
            "it on the bucket (aws s3api put-bucket-policy)"
        )
    return (
        "pass",
        f"unconditional writes refused (403), conditional ones allowed in {', '.join(checked)}",
    )


def _missing_statements(statements: list[Any]) -> list[str]:
    """The Sids that lakelock's generator makes today, with the options ``statements`` show
    were chosen (create-only manifests, the deletes denied), and that ``statements`` lack: a
    policy applied before a statement was added (``DenyOverwriteOfRegistryVersions``)."""
    found = {str(x.get("Sid")) for x in statements if isinstance(x, dict)}
    wanted = generate_bucket_policy(
        "lakelock-doctor",
        principals=["*"],
        create_only_manifests=SID_OVERWRITE_MANIFESTS in found,
        deny_unconditional_delete=not found.isdisjoint(DELETE_SIDS),
    )
    return [sid for sid in (str(x["Sid"]) for x in wanted["Statement"]) if sid not in found]


# -- the list -----------------------------------------------------------------------------------


#: The storage classes whose objects cannot be read until restored.
_ARCHIVED = frozenset({"GLACIER", "DEEP_ARCHIVE"})


def probe_lifecycle(s: Scratch) -> Outcome:
    """No lifecycle rule of the bucket expires or archives the lake's objects. S3 applies
    lifecycle rules by itself, whatever the bucket policy says; the registry's root, the
    snapshot of a dataset's current version, its files, leases and lock tables all grow
    old while still read, so a rule expiring (or archiving to a class that must be restored
    before a read) any of them empties the lake on its date. Rules on other prefixes, on
    tags (lakelock sets none), on noncurrent versions or unfinished uploads are harmless."""
    answer = s.ask("get_bucket_lifecycle_configuration")
    if answer.code == "NoSuchLifecycleConfiguration":
        return "pass", "the bucket has no lifecycle rules"
    if not answer.ok:
        return "skip", f"cannot read the bucket's lifecycle rules ({answer})"
    rules = answer.response.get("Rules", [])
    harmful = [_rule_name(rule) for rule in rules if _takes_lake_objects(rule, s.lake)]
    if harmful:
        return "fail", (
            f"lifecycle rule(s) {', '.join(harmful)} expire or archive the lake's objects "
            "(its registry, versions and files): S3 will empty the lake; exclude its prefix"
        )
    return "pass", f"{len(rules)} lifecycle rule(s), none expires or archives the lake's objects"


def _rule_name(rule: dict[str, Any]) -> str:
    return repr(str(rule.get("ID") or "(unnamed)"))


def _takes_lake_objects(rule: dict[str, Any], lake: str) -> bool:
    """Whether an enabled ``rule`` expires or archives current objects of the lake at
    ``lake`` (its ``datasets/``, ``metastore/`` and ``views/``)."""
    if rule.get("Status") != "Enabled":
        return False
    expires = {"Days", "Date"} & set(rule.get("Expiration", {}))
    archives = any(t.get("StorageClass") in _ARCHIVED for t in rule.get("Transitions", []))
    if not (expires or archives):
        return False
    scope = rule.get("Filter", {})
    both = scope.get("And", {})
    if scope.get("Tag") or both.get("Tags"):
        return False  # lakelock tags no object
    prefix = str(scope.get("Prefix", both.get("Prefix", rule.get("Prefix", ""))))
    areas = (f"{lake}{area}" for area in (DATASETS_PREFIX, METASTORE_PREFIX, VIEWS_PREFIX))
    return any(prefix.startswith(area) or area.startswith(prefix) for area in areas)


@dataclass(frozen=True)
class Probe:
    name: str
    needed: Need
    run: Callable[[Scratch], Outcome]

    @property
    def required(self) -> bool:
        return self.needed == "required"


#: The row of :data:`PROBES` whose detail says how vacuum deletes on the store.
VACUUM_PROBE = "vacuum deletes"

PROBES: tuple[Probe, ...] = (
    Probe("create-only PutObject (If-None-Match: *)", "required", probe_create_only_put),
    Probe("compare-and-swap PutObject (If-Match)", "required", probe_compare_and_swap_put),
    Probe("If-Match on a missing key", "required", probe_if_match_missing),
    Probe("concurrent create-only PUTs: one winner", "required", probe_concurrent_creates),
    Probe("ListObjectsV2 after StartAfter, in key order", "required", probe_list_start_after),
    Probe("If-None-Match on CompleteMultipartUpload", "required", probe_create_only_multipart),
    Probe("If-Match on CompleteMultipartUpload", "required", probe_compare_and_swap_multipart),
    Probe("create-only copy (UploadPartCopy)", "required", probe_create_only_copy),
    Probe("copy-source-if-match (UploadPartCopy)", "required", probe_copy_source_if_match),
    Probe("no lifecycle rule expires the lake", "required", probe_lifecycle),
    Probe("DeleteObjects with per-key ETag", "vacuum", probe_conditional_delete_objects),
    Probe("conditional DeleteObject (If-Match)", "vacuum", probe_conditional_delete),
    Probe(VACUUM_PROBE, "vacuum", probe_vacuum_deletes),
    Probe("bucket policy enforcement", "recommended", probe_policy_enforcement),
    Probe("conditional CopyObject (destination)", "optional", probe_conditional_copy_object),
)


def run_probe(probe: Probe, scratch: Scratch) -> Outcome:
    """Run one probe; an unexpected exception is that probe's failure, except a lost
    connection, which ends the whole run."""
    try:
        return probe.run(scratch)
    except EndpointConnectionError:
        raise
    except Exception as error:
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return "fail", f"{type(error).__name__}: {text}".rstrip(": ")
