"""The WSGI layer in front of moto's S3: what moto lacks, and the faults.

moto stores objects and answers the S3 API; this gateway, placed in front of it, supplies the
behaviours of AWS S3 that lakelock relies on and moto does not have ("S3 facts lakelock relies
on" in docs/ARCHITECTURE.md):

- **Atomic conditional writes.** moto checks a precondition and then writes, unguarded; two
  racing ``If-None-Match: *`` PUTs can both succeed. Every mutating request holds a per-key
  lock here from its precondition check to the end of moto's write.
- **If-Match on CompleteMultipartUpload** and **destination If-None-Match / If-Match on
  CopyObject**, which moto ignores, are checked here under the same key lock.
- **Copy-source conditions** (``x-amz-copy-source-if-*``) on CopyObject and UploadPartCopy,
  which moto ignores (all but one, unguarded): checked while the source key is locked against
  writers, so the bytes copied are the bytes the condition was checked on.
- **Per-key ETags (and Sizes) in DeleteObjects**, ignored by moto: keys whose condition fails
  are taken out of the request and reported as ``PreconditionFailed`` errors in the response.
- **Conditions moto gets wrong or cannot check** (``If-Match: *`` on a delete, ETag lists, delete
  conditions on size or modification time): see :mod:`._conditions`. What cannot be checked
  is answered 501, never applied unconditionally.
- **Reads never wait for a slow upload.** A request's whole body is received before any key
  lock is taken, so a GET during a PUT of the same key gets the previous object at once, as
  on S3; moto's own read or write of a key is serialised only for the moment it takes.
- **501 NotImplemented** for ``If-Match`` together with ``If-None-Match``, and for an
  ``If-None-Match`` other than ``*``, as S3 answers.
- **409 ConditionalRequestConflict**: injected as a fault, and, when ``concurrent_conflicts``
  is on, answered to a conditional write that arrives while another write to the same key is
  in flight (AWS's behaviour; off by default, so writes to one key queue instead).
- **Bucket policies** for the condition keys lakelock's generated policy uses, answered with
  403 AccessDenied as S3 does (:mod:`._policy_gate`).
- **Signatures**, when the gateway is given credentials (``lakelock serve`` does): a request
  they do not sign is answered 403 as S3 answers it (:mod:`._sigv4`). moto accepts any.
- **Bodies checked against their digests** (``Content-MD5``, ``x-amz-checksum-*``): one
  that does not match is refused and stored nowhere (:mod:`._integrity`); moto stores it.
- **Requests S3 refuses**: ``If-Match: *`` on a write (501: S3's writes take an ETag only),
  a multipart completion naming no parts or of an upload never created (moto: 500),
  DeleteObjects of more than 1,000 keys (moto deletes them).
- **Faults** from a seeded :class:`~lakelock.testing._faults.FaultPlan`, and per-operation
  request counts.

A control API under ``/_lakelock/`` (JSON over HTTP, :mod:`._control`) reads and changes
faults, settings and counts, so an endpoint in another process is driven the same way as one in
this process. Settings include ``lacking``: the endpoint then acts as a store without some
conditional features (ignoring or refusing them, :mod:`._lacking`), to test clients against
such stores. The HTTP plumbing (responses as S3 words them, bodies, passing a request on to
moto) is in :mod:`._wsgi`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qs, quote

import orjson

from lakelock.testing._classify import S3Request, classify
from lakelock.testing._conditions import (
    IF_MATCH_SIZE,
    BadCondition,
    CopySource,
    DeleteEntry,
    ObjectState,
    copy_source_failure,
    delete_entries,
    delete_unsupported,
    entry_of,
    etag_matches,
    parse_copy_source,
    size_condition,
)
from lakelock.testing._control import CONTROL_PREFIX, control
from lakelock.testing._faults import BODY_KINDS, Decision, FaultPlan, FaultRule
from lakelock.testing._integrity import digest_failure
from lakelock.testing._keylocks import KeyLocks
from lakelock.testing._lacking import LACKABLE, Lackable, act_lacking
from lakelock.testing._policy_context import UnjudgedOperation
from lakelock.testing._policy_gate import BucketPolicies
from lakelock.testing._sigv4 import signature_failure
from lakelock.testing._wsgi import (
    IncompleteBody,
    Reset,
    Response,
    WSGIApp,
    conflict,
    corrupted,
    cut_short,
    forward,
    headers_of,
    json_response,
    local_name,
    malformed_xml,
    not_implemented,
    precondition_failed,
    read_body,
    receive_body,
    replace_body,
    reset_connection,
    s3_error,
    sent_then_closed,
    subrequest,
)

__all__ = ["LACKABLE", "Gateway", "Lackable", "S3Request", "classify"]

_S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
# Rewritten request bodies must keep S3's namespace as the default one: moto's parser reads
# element names literally and would not recognise ``ns0:Delete``.
ET.register_namespace("", _S3_NS)


class Gateway:
    """The WSGI application: moto behind, S3's missing behaviours and faults in front."""

    def __init__(
        self,
        backend: WSGIApp,
        *,
        faults: FaultPlan | None = None,
        policies: BucketPolicies | None = None,
        credentials: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._backend = backend
        #: Access key id -> secret the requests' signatures are checked against (None: not
        #: checked, as moto does not).
        self.credentials = dict(credentials) if credentials is not None else None
        self.faults = faults if faults is not None else FaultPlan()
        self.policies = policies if policies is not None else BucketPolicies()
        self.concurrent_conflicts = False
        #: Conditional features this endpoint acts as lacking: feature -> "ignore" | "refuse".
        self.lacking: dict[str, str] = {}
        self._sleep = sleep
        self._locks = KeyLocks()
        # Held only while moto itself reads or writes a key: moto's GetObject can meet an
        # overwrite of the same key closing the old value's buffer (a 500 S3 never gives).
        # Writers hold it inside their key lock, for the moto call only, so reads are never
        # held up by a writer's injected latency.
        self._applying = KeyLocks()
        self._counts: Counter[str] = Counter()
        # Requests per operation and part of the lake's layout (see area_of), for benchmarks.
        self._areas: Counter[str] = Counter()
        # Answers other than 2xx per operation, part of the layout and status (a lost
        # compare-and-swap's 412, a 409, a 503), for benchmarks.
        self._refused: Counter[str] = Counter()
        # Bytes received (request bodies) and sent (response bodies), for benchmarks.
        self._bytes: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        # uploadId -> (bucket, key, ETag of the object its completion created): a retried
        # completion of an upload that already completed is idempotent on S3, not a
        # precondition failure.
        self._completed: dict[str, tuple[str, str, str]] = {}
        self._stall_lock = threading.Lock()
        self._stalled = 0
        self._release = threading.Event()

    # -- WSGI ---------------------------------------------------------------------------------

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        raw_path = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ["PATH_INFO"]
        if raw_path.startswith(CONTROL_PREFIX):
            response = control(self, environ, raw_path[len(CONTROL_PREFIX) :])
            start_response(response.status, response.headers)
            return [response.body]
        headers = headers_of(environ)
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        request = classify(environ["REQUEST_METHOD"], raw_path, query, headers)
        with self._counts_lock:
            self._counts[request.operation] += 1
            self._areas[f"{request.operation} {area_of(request)}"] += 1
            self._bytes["in"] += int(environ.get("CONTENT_LENGTH") or 0)
        try:
            response = self._handle(environ, request, headers)
        except Reset:
            reset_connection(environ)
            start_response("500 Internal Server Error", [("Content-Length", "0")])
            return []
        with self._counts_lock:
            self._bytes["out"] += len(response.body)
            if not 200 <= response.code < 300:
                self._refused[f"{request.operation} {area_of(request)} {response.code}"] += 1
        start_response(response.status, response.headers)
        if response.then_close:
            return sent_then_closed(response.body, environ)
        return [response.body]

    def _handle(
        self, environ: dict[str, Any], request: S3Request, headers: Mapping[str, str]
    ) -> Response:
        # The whole body is in before any key is locked: a slow upload holds up nobody (S3
        # serves the previous object to readers until the new one is complete). A body cut
        # short (the client died sending it) is applied nowhere, as on S3.
        try:
            receive_body(environ)
        except IncompleteBody:
            return s3_error(
                "400 Bad Request",
                "IncompleteBody",
                "You did not provide the number of bytes specified by the Content-Length "
                "HTTP header.",
            )
        if self.credentials is not None:
            refused = self._authenticate(environ, headers)
            if refused is not None:
                return refused
        key = fault_key(
            request, read_body(environ) if request.operation == "DeleteObjects" else b""
        )
        decision = self.faults.decide(request.operation, request.bucket or "", key)
        response = self._decided(environ, request, headers, decision)
        if decision.after is not None and not response.struck:
            # Refused before it applied (412, 404, 403...), or a read the kind leaves alone:
            # the fault did not happen, so it is neither reported nor spent.
            self.faults.spare(decision.after)
        return response

    def _decided(
        self,
        environ: dict[str, Any],
        request: S3Request,
        headers: Mapping[str, str],
        decision: Decision,
    ) -> Response:
        """The answer to a request whose faults are drawn: the ``before`` fault instead of
        it, else the request applied (an ``after`` fault striking its answer)."""
        self._stall(decision.stall)
        if not request.mutating or decision.before is not None:
            self._wait(decision)
        if decision.before is not None:
            return self._strike_before(decision, request)
        denied = self._check_policy(request, headers)
        if denied is not None:
            return denied
        if "content-md5" in headers or any(n.startswith("x-amz-checksum-") for n in headers):
            spoilt = digest_failure(request.operation, headers, read_body(environ))
            if spoilt is not None:
                return spoilt
        if request.operation in {"PutBucketPolicy", "GetBucketPolicy", "DeleteBucketPolicy"}:
            return self._bucket_policy(environ, request)
        lacked = act_lacking(self.lacking, environ, request, headers)
        if isinstance(lacked, Response):
            return lacked
        headers = lacked
        if request.operation == "UploadPartCopy":
            return self._upload_part_copy(environ, request, headers)
        if not request.mutating:
            if request.bucket is None or request.key is None:
                response = forward(self._backend, environ)
            else:
                with self._applying.hold([(request.bucket, request.key)], wait=True):
                    response = forward(self._backend, environ)
            spoil = decision.after
            if spoil is not None and spoil.kind in BODY_KINDS and response.code < 300:
                return self._strike_after(spoil, response, request)
            return response
        return self._write(environ, request, headers, decision)

    def _write(
        self,
        environ: dict[str, Any],
        request: S3Request,
        headers: Mapping[str, str],
        decision: Decision,
    ) -> Response:
        assert request.bucket is not None
        invalid = _unsupported_conditions(request, headers)
        if invalid is not None:
            return invalid
        body = b""
        source: CopySource | None = None
        if request.operation == "DeleteObjects":
            body = read_body(environ)
            try:
                entries = delete_entries(body)
            except ET.ParseError:
                return malformed_xml()
            if len(entries) > MAX_DELETE_KEYS:
                return malformed_xml()  # S3's answer to too many keys
            unsupported = delete_unsupported(headers, None, entries)
            if unsupported is not None:
                return not_implemented(unsupported)
            keys = [(request.bucket, e.key) for e in entries]
        else:
            assert request.key is not None
            keys = [(request.bucket, request.key)]
            if request.operation == "CopyObject":
                source = parse_copy_source(headers.get("x-amz-copy-source", ""))
        # The source of a copy is locked too: no write may replace it between its check and
        # moto's read of it.
        locked = keys + ([(source.bucket, source.key)] if source is not None else [])
        conditional = "if-match" in headers or "if-none-match" in headers
        wait = not (self.concurrent_conflicts and conditional)
        with self._locks.hold(locked, wait=wait) as held:
            if not held:
                return conflict(request.key)
            self._wait(decision)
            if request.operation == "DeleteObjects":
                with self._applying.hold(keys, wait=True):
                    response = self._delete_objects(environ, request, headers, body)
            else:
                try:
                    failed = self._check_completion(environ, request)
                    if failed is None:
                        failed = self._check_conditions(request, headers, source)
                except BadCondition as error:
                    failed = s3_error("400 Bad Request", "InvalidArgument", str(error))
                if failed is not None:
                    response = failed
                else:
                    with self._applying.hold(keys, wait=True):
                        response = forward(
                            self._backend, _without_checked_conditions(environ, request)
                        )
                if request.operation == "CompleteMultipartUpload" and response.code == 200:
                    self._remember_completion(request)
        if decision.after is not None and response.code < 300:
            return self._strike_after(decision.after, response, request)
        return response

    def _upload_part_copy(
        self, environ: dict[str, Any], request: S3Request, headers: Mapping[str, str]
    ) -> Response:
        """UploadPartCopy with its copy-source conditions (moto ignores them), checked and
        copied while the source's key is locked against writers."""
        source = parse_copy_source(headers.get("x-amz-copy-source", ""))
        if source is None:
            return forward(self._backend, environ)
        with self._locks.hold([(source.bucket, source.key)], wait=True):
            if source.version_id is None and self._head(source.bucket, source.key) is None:
                # S3 names the missing source; moto answers 404 with no error document.
                return s3_error(
                    "404 Not Found",
                    "NoSuchKey",
                    "The specified key does not exist.",
                    key=source.key,
                )
            try:
                failed = self._check_copy_source(source, headers)
            except BadCondition as error:
                failed = s3_error("400 Bad Request", "InvalidArgument", str(error))
            if failed is not None:
                return failed
            return forward(self._backend, environ)

    def _authenticate(self, environ: dict[str, Any], headers: Mapping[str, str]) -> Response | None:
        """S3's answer to a request its credentials do not sign (:mod:`._sigv4`)."""
        assert self.credentials is not None
        raw_path = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ["PATH_INFO"]
        signed = dict(headers)
        if environ.get("CONTENT_LENGTH"):
            signed["content-length"] = str(environ["CONTENT_LENGTH"])
        return signature_failure(
            method=environ["REQUEST_METHOD"],
            path=raw_path.split("?", 1)[0],
            query=environ.get("QUERY_STRING", ""),
            headers=signed,
            body=read_body(environ),
            credentials=self.credentials,
        )

    # -- what moto lacks ------------------------------------------------------------------------

    def _check_conditions(
        self, request: S3Request, headers: Mapping[str, str], source: CopySource | None
    ) -> Response | None:
        """The preconditions moto ignores or gets wrong, checked under the key lock."""
        assert request.bucket is not None
        assert request.key is not None
        if_match = headers.get("if-match")
        if_none_match = headers.get("if-none-match")
        if request.operation == "CompleteMultipartUpload":
            upload_id = request.query.get("uploadId", [""])[0]
            current = self._current_etag(request.bucket, request.key)
            completed = self._completed.get(upload_id)
            if completed is not None and current == completed[2]:
                return None  # a retried completion of this very upload: idempotent
            if if_match is not None:
                return _compare(if_match, current, request.key)
            if if_none_match is not None and current is not None:
                return precondition_failed("If-None-Match", request.key)
        elif request.operation == "CopyObject":
            current = self._current_etag(request.bucket, request.key)
            if if_match is not None:
                failed = _compare(if_match, current, request.key)
                if failed is not None:
                    return failed
            if if_none_match is not None and current is not None:
                return precondition_failed("If-None-Match", request.key)
            if source is not None:
                return self._check_copy_source(source, headers)
        elif request.operation == "PutObject" and if_match is not None and _checked_here(if_match):
            return _compare(if_match, self._current_etag(request.bucket, request.key), request.key)
        elif request.operation == "DeleteObject":
            size = size_condition(headers.get(IF_MATCH_SIZE))
            if if_match is None and size is None:
                return None
            state = self._head(request.bucket, request.key)
            if if_match is not None:
                failed = _compare(if_match, state.etag if state else None, request.key)
                if failed is not None:
                    return failed
            if size is not None and state is not None and state.size != size:
                return precondition_failed(IF_MATCH_SIZE, request.key)
        return None

    def _check_completion(self, environ: dict[str, Any], request: S3Request) -> Response | None:
        """A CompleteMultipartUpload that S3 refuses before its conditions: of an upload that
        was never created for this key (or was aborted), 404 NoSuchUpload; naming no parts,
        400 InvalidRequest (moto answers both 500). A completion of the same key this endpoint
        has answered before is left to the conditions (a retry is idempotent)."""
        if request.operation != "CompleteMultipartUpload":
            return None
        assert request.bucket is not None
        assert request.key is not None
        upload_id = request.query.get("uploadId", [""])[0]
        completed = self._completed.get(upload_id)
        if completed is not None and completed[:2] == (request.bucket, request.key):
            return None
        if completed is not None or not self._upload_exists(request.bucket, request.key, upload_id):
            return s3_error(
                "404 Not Found",
                "NoSuchUpload",
                "The specified upload does not exist. The upload ID may be invalid, or the "
                "upload may have been aborted or completed.",
            )
        if not read_body(environ).strip():
            return s3_error(
                "400 Bad Request", "InvalidRequest", "You must specify at least one part"
            )
        return None

    def _upload_exists(self, bucket: str, key: str, upload_id: str) -> bool:
        """Whether moto has an upload ``upload_id`` in progress for ``key``."""
        query = f"uploads=&prefix={quote(key, safe='')}"
        listing = subrequest(self._backend, "GET", bucket, None, query=query)
        if listing.code != 200:
            return False
        for upload in ET.fromstring(listing.body):
            if local_name(upload.tag) != "Upload":
                continue
            fields = {local_name(child.tag): child.text for child in upload}
            if fields.get("Key") == key and fields.get("UploadId") == upload_id:
                return True
        return False

    def _check_copy_source(self, source: CopySource, headers: Mapping[str, str]) -> Response | None:
        """412 if a copy-source condition fails; ``None`` to copy (a missing source is left to
        moto, which answers 404)."""
        if not any(name.startswith("x-amz-copy-source-if-") for name in headers):
            return None
        state = self._head(source.bucket, source.key, version_id=source.version_id)
        if state is None:
            return None
        failed = copy_source_failure(headers, state, now=datetime.now(UTC))
        if failed is None:
            return None
        return precondition_failed(failed, source.key)

    def _remember_completion(self, request: S3Request) -> None:
        assert request.bucket is not None
        assert request.key is not None
        etag = self._current_etag(request.bucket, request.key)
        if etag is not None:
            upload_id = request.query.get("uploadId", [""])[0]
            self._completed[upload_id] = (request.bucket, request.key, etag)

    def _current_etag(self, bucket: str, key: str) -> str | None:
        state = self._head(bucket, key)
        return state.etag if state is not None else None

    def _head(self, bucket: str, key: str, *, version_id: str | None = None) -> ObjectState | None:
        query = f"versionId={quote(version_id, safe='')}" if version_id is not None else ""
        response = subrequest(self._backend, "HEAD", bucket, key, query=query)
        if response.code == 404:
            return None
        if response.code != 200:
            raise RuntimeError(f"gateway read-back of {bucket}/{key} answered {response.status}")
        fields = {k.lower(): v for k, v in response.headers}
        return ObjectState(
            etag=fields["etag"],
            size=int(fields.get("content-length", "0")),
            last_modified=parsedate_to_datetime(fields["last-modified"]),
        )

    def _delete_objects(
        self, environ: dict[str, Any], request: S3Request, headers: Mapping[str, str], body: bytes
    ) -> Response:
        """DeleteObjects with per-key ETag and Size conditions and per-key policy decisions:
        refused keys are answered as errors, the rest go to moto without their conditions."""
        assert request.bucket is not None
        bucket = request.bucket
        denied = self.policies.denied_deletes(
            bucket=bucket,
            entries=[(e.key, e.etag) for e in delete_entries(body)],
            headers=headers,
            access_key=request.access_key,
        )
        root = ET.fromstring(body)
        failures: list[tuple[str, str, str]] = []
        for obj in list(root):
            entry = entry_of(obj)
            if entry is None:
                continue
            if entry.key in denied:
                failures.append((entry.key, "AccessDenied", "Access Denied"))
                root.remove(obj)
                continue
            try:
                failure = self._delete_entry_failure(bucket, entry)
            except BadCondition as bad:
                return s3_error("400 Bad Request", "InvalidArgument", str(bad))
            if failure is not None:
                failures.append((entry.key, *failure))
                root.remove(obj)
            else:
                for child in list(obj):
                    if local_name(child.tag) in {"ETag", "Size"}:
                        obj.remove(child)
        remaining = [o for o in root if local_name(o.tag) == "Object"]
        if remaining:
            environ = dict(environ)
            replace_body(environ, ET.tostring(root))
            response = forward(self._backend, environ)
            if response.code != 200 or not failures:
                return response
            result = ET.fromstring(response.body)
        else:
            result = ET.Element(f"{{{_S3_NS}}}DeleteResult")
        for key, code, message in failures:
            error = ET.SubElement(result, f"{{{_S3_NS}}}Error")
            ET.SubElement(error, f"{{{_S3_NS}}}Key").text = key
            ET.SubElement(error, f"{{{_S3_NS}}}Code").text = code
            ET.SubElement(error, f"{{{_S3_NS}}}Message").text = message
        return Response(
            "200 OK",
            [("Content-Type", "application/xml")],
            ET.tostring(result, xml_declaration=True),
        )

    def _delete_entry_failure(self, bucket: str, entry: DeleteEntry) -> tuple[str, str] | None:
        """``(code, message)`` if one DeleteObjects entry's conditions fail, else ``None``."""
        size = size_condition(entry.size)
        if entry.etag is None and size is None:
            return None
        state = self._head(bucket, entry.key)
        if entry.etag is not None:
            if state is None:
                return "NoSuchKey", "The specified key does not exist."
            if not etag_matches(entry.etag, state.etag):
                return "PreconditionFailed", "At least one of the preconditions failed."
        if size is not None and state is not None and state.size != size:
            return "PreconditionFailed", "At least one of the preconditions failed."
        return None

    def _check_policy(self, request: S3Request, headers: Mapping[str, str]) -> Response | None:
        if request.bucket is None:
            return None
        try:
            allowed = self.policies.allows(
                operation=request.operation,
                bucket=request.bucket,
                key=request.key,
                headers=headers,
                query={k: v[0] for k, v in request.query.items() if v},
                access_key=request.access_key,
            )
        except UnjudgedOperation as unjudged:
            # Under a policy, an operation its model cannot judge is not let through.
            return s3_error("501 Not Implemented", "NotImplemented", str(unjudged))
        if allowed:
            return None
        return s3_error("403 Forbidden", "AccessDenied", "Access Denied", key=request.key)

    def _bucket_policy(self, environ: dict[str, Any], request: S3Request) -> Response:
        """Bucket policies live here, never in moto (see :mod:`._policy_gate`)."""
        assert request.bucket is not None
        exists = subrequest(self._backend, "HEAD", request.bucket, None)
        if exists.code != 200:
            return s3_error("404 Not Found", "NoSuchBucket", "The specified bucket does not exist")
        if request.operation == "DeleteBucketPolicy":
            self.policies.delete(request.bucket)
            return Response("204 No Content", [], b"")
        if request.operation == "GetBucketPolicy":
            policy = self.policies.get(request.bucket)
            if policy is None:
                return s3_error(
                    "404 Not Found", "NoSuchBucketPolicy", "The bucket policy does not exist"
                )
            return json_response(policy)
        try:
            self.policies.put(request.bucket, orjson.loads(read_body(environ)))
        except ValueError as error:
            return s3_error("400 Bad Request", "MalformedPolicy", str(error))
        return Response("204 No Content", [], b"")

    # -- faults -------------------------------------------------------------------------------

    def _wait(self, decision: Decision) -> None:
        """Injected latency and holds. Writes wait while holding their key, so latency also
        bounds the rate of writes to one key, as on S3."""
        if decision.delay:
            self._sleep(decision.delay)
        self._stall(decision.hold)

    def _stall(self, stall: bool) -> None:
        if stall:
            with self._stall_lock:
                self._stalled += 1
                release = self._release
            release.wait()
            with self._stall_lock:
                self._stalled -= 1

    def stalled(self) -> int:
        """How many requests are held by ``stall`` faults right now."""
        with self._stall_lock:
            return self._stalled

    def release_stalls(self) -> None:
        """Let every stalled request go on; later stalls wait for the next release."""
        with self._stall_lock:
            self._release.set()
            self._release = threading.Event()

    def _strike_before(self, decision: Decision, request: S3Request) -> Response:
        rule = decision.before
        assert rule is not None
        if rule.kind == "slowdown":
            return s3_error("503 Slow Down", "SlowDown", "Please reduce your request rate.")
        if rule.kind == "error":
            return s3_error("500 Internal Server Error", "InternalError", "Injected fault.")
        if rule.kind == "conflict":
            return conflict(request.key)
        if rule.kind == "timeout":
            self._sleep(decision.hang)
        raise Reset

    def _strike_after(self, rule: FaultRule, response: Response, request: S3Request) -> Response:
        """``response`` spoilt by ``rule``; left alone (the fault spared) where the kind
        finds nothing to spoil, so that ``count=1`` is one answer really spoilt: a body
        kind's answer to a HEAD (it has no body), a ``truncate``'s of an empty body."""
        if rule.kind in BODY_KINDS and not _spoilable(rule.kind, response, request):
            return response
        if rule.kind == "truncate":
            spoilt = cut_short(response)
        elif rule.kind == "corrupt":
            spoilt = corrupted(response)
        elif rule.kind == "lost_ack_5xx":
            spoilt = s3_error("500 Internal Server Error", "InternalError", "Injected lost ack.")
        else:
            raise Reset
        return dataclasses.replace(spoilt, struck=True)

    # -- plumbing -----------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        with self._counts_lock:
            return dict(self._counts)

    def areas(self) -> dict[str, int]:
        """Requests per ``"<operation> <area>"`` (:func:`area_of`) since start or the last
        reset."""
        with self._counts_lock:
            return dict(self._areas)

    def refused(self) -> dict[str, int]:
        """Answers other than 2xx per ``"<operation> <area> <status>"`` since start or the
        last reset."""
        with self._counts_lock:
            return dict(self._refused)

    def traffic(self) -> dict[str, int]:
        """Request and response body bytes since start or the last reset."""
        with self._counts_lock:
            return {"in": self._bytes["in"], "out": self._bytes["out"]}

    def reset_stats(self) -> None:
        with self._counts_lock:
            self._counts.clear()
            self._areas.clear()
            self._refused.clear()
            self._bytes.clear()


def _spoilable(kind: str, response: Response, request: S3Request) -> bool:
    """Whether a body ``kind`` has a body to spoil in ``response``: none in a HEAD's answer,
    and none to cut short in an empty one (a ``corrupt`` answers one byte where none was)."""
    if request.operation.startswith("Head"):
        return False
    return kind != "truncate" or bool(response.body)


def fault_key(request: S3Request, body: bytes = b"") -> str | None:
    """What a fault rule's ``prefix`` is matched against: the request's key, a listing's
    prefix (a rule for ``metastore/`` strikes a listing of ``metastore/intents/``, not one of
    the whole bucket), or what the keys of a batch delete (its ``body``) share (a rule for
    ``datasets/`` strikes a batch of data files only)."""
    if request.key is None and request.operation in _LISTINGS:
        return request.query.get("prefix", [""])[0]
    if request.operation == "DeleteObjects":
        try:
            keys = [entry.key for entry in delete_entries(body)]
        except ET.ParseError:
            return None  # answered as malformed
        return _shared_prefix(keys) if keys else None
    return request.key


def _shared_prefix(keys: list[str]) -> str:
    """The longest text every key starts with (S3 prefixes are text, not path segments)."""
    first, last = min(keys), max(keys)
    same = (i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b)
    return first[: next(same, min(len(first), len(last)))]


_LISTINGS = frozenset(
    {"ListObjects", "ListObjectsV2", "ListObjectVersions", "ListMultipartUploads"}
)


def area_of(request: S3Request) -> str:
    """The part of a lake's layout a request touches, by its key (a listing: its prefix):
    ``root`` (the registry's root), ``metastore/<kind>`` (intents, snapshots, manifests, index
    nodes, locks, leases...), ``datasets`` (data files), ``_delta_log`` (a Delta table's log)
    or ``other``. A lake under a prefix counts the same."""
    key = request.key
    if key is None:
        key = request.query.get("prefix", [""])[0]
    parts = key.split("/")
    if "metastore" in parts:
        kind = parts[parts.index("metastore") + 1 :][:1]
        if not kind or not kind[0]:
            return "metastore"
        return "root" if kind[0].startswith("dataset_registry") else f"metastore/{kind[0]}"
    if "_delta_log" in parts:  # the peer the benchmarks compare with
        return "_delta_log"
    return "datasets" if "datasets" in parts else "other"


def _unsupported_conditions(request: S3Request, headers: Mapping[str, str]) -> Response | None:
    if request.operation == "DeleteObject":
        unsupported = delete_unsupported(headers, request.query.get("versionId", [None])[0])
        return not_implemented(unsupported) if unsupported is not None else None
    if_match = headers.get("if-match")
    if_none_match = headers.get("if-none-match")
    if request.operation not in {"PutObject", "CompleteMultipartUpload", "CopyObject"}:
        return None
    if if_match is not None and if_none_match is not None:
        return not_implemented(_UNIMPLEMENTED, header="If-Match,If-None-Match")
    if if_none_match is not None and if_none_match.strip() != "*":
        return not_implemented(_UNIMPLEMENTED, header="If-None-Match")
    # S3 writes take If-Match with an ETag only: "*" (any object) is refused, not evaluated.
    if if_match is not None and if_match.strip() == "*":
        return not_implemented(_UNIMPLEMENTED, header="If-Match")
    return None


_UNIMPLEMENTED = "A header you provided implies functionality that is not implemented"

#: The most keys one DeleteObjects request may name.
MAX_DELETE_KEYS = 1000


def _checked_here(if_match: str) -> bool:
    """If-Match values moto would compare as one literal ETag (lists of ETags): the gateway
    evaluates those itself."""
    return "," in if_match


def _without_checked_conditions(environ: dict[str, Any], request: S3Request) -> dict[str, Any]:
    """The request as moto should see it once the gateway has checked its If-Match."""
    if_match = environ.get("HTTP_IF_MATCH")
    if if_match is None:
        return environ
    if request.operation == "DeleteObject" or (
        request.operation == "PutObject" and _checked_here(if_match)
    ):
        return {k: v for k, v in environ.items() if k != "HTTP_IF_MATCH"}
    return environ


def _compare(if_match: str, current: str | None, key: str) -> Response | None:
    if current is None:
        return s3_error("404 Not Found", "NoSuchKey", "The specified key does not exist.", key=key)
    if not etag_matches(if_match, current):
        return precondition_failed("If-Match", key)
    return None
