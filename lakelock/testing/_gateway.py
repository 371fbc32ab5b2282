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
- **Conditions moto gets wrong or cannot check** (``If-Match: *``, ETag lists, delete
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
- **Faults** from a seeded :class:`~lakelock.testing._faults.FaultPlan`, and per-operation
  request counts.

A control API under ``/_lakelock/`` (JSON over HTTP) reads and changes faults, settings and
counts, so an endpoint in another process is driven the same way as one in this process.
Settings include ``lacking``: the endpoint then acts as a store without some conditional
features (ignoring or refusing them), to test clients against such stores.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from io import BytesIO
from typing import Any, Literal, get_args
from urllib.parse import parse_qs, quote, unquote, urlsplit

import orjson

from lakelock.testing._classify import S3Request, classify
from lakelock.testing._conditions import (
    COPY_SOURCE_IF_MATCH,
    COPY_SOURCE_IF_MODIFIED_SINCE,
    COPY_SOURCE_IF_NONE_MATCH,
    COPY_SOURCE_IF_UNMODIFIED_SINCE,
    IF_MATCH_LAST_MODIFIED_TIME,
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
from lakelock.testing._faults import Decision, FaultPlan, FaultRule
from lakelock.testing._keylocks import KeyLocks
from lakelock.testing._policy_gate import BucketPolicies

__all__ = ["LACKABLE", "Gateway", "Lackable", "S3Request", "classify"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
# Rewritten request bodies must keep S3's namespace as the default one: moto's parser reads
# element names literally and would not recognise ``ns0:Delete``.
ET.register_namespace("", _S3_NS)
CONTROL_PREFIX = "/_lakelock/"

#: Conditional features the endpoint can be told to lack (``S3Endpoint.configure(lacking=)``).
Lackable = Literal["delete-objects-etag", "delete-if-match", "copy-source-conditions"]
LACKABLE: frozenset[str] = frozenset(get_args(Lackable))


@dataclass
class _Response:
    status: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def code(self) -> int:
        return int(self.status.split(" ", 1)[0])


def _error(status: str, code: str, message: str, *, key: str | None = None) -> _Response:
    key_xml = f"<Key>{_xml_escape(key)}</Key>" if key is not None else ""
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{_xml_escape(message)}</Message>{key_xml}"
        f"<RequestId>lakelock-gateway</RequestId></Error>"
    ).encode()
    return _Response(status, [("Content-Type", "application/xml")], body)


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Reset(Exception):
    """Drop the client's connection without a response."""


class Gateway:
    """The WSGI application: moto behind, S3's missing behaviours and faults in front."""

    def __init__(
        self,
        backend: WSGIApp,
        *,
        faults: FaultPlan | None = None,
        policies: BucketPolicies | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._backend = backend
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
        # Bytes received (request bodies) and sent (response bodies), for benchmarks.
        self._bytes: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        # uploadId -> ETag of the object its completion created: a retried completion of an
        # upload that already completed is idempotent on S3, not a precondition failure.
        self._completed: dict[str, str] = {}
        self._stall_lock = threading.Lock()
        self._stalled = 0
        self._release = threading.Event()

    # -- WSGI ---------------------------------------------------------------------------------

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        raw_path = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ["PATH_INFO"]
        if raw_path.startswith(CONTROL_PREFIX):
            response = self._control(environ, raw_path[len(CONTROL_PREFIX) :])
            start_response(response.status, response.headers)
            return [response.body]
        headers = _headers(environ)
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        request = classify(environ["REQUEST_METHOD"], raw_path, query, headers)
        with self._counts_lock:
            self._counts[request.operation] += 1
            self._bytes["in"] += int(environ.get("CONTENT_LENGTH") or 0)
        try:
            response = self._handle(environ, request, headers)
        except _Reset:
            _reset_connection(environ)
            start_response("500 Internal Server Error", [("Content-Length", "0")])
            return []
        with self._counts_lock:
            self._bytes["out"] += len(response.body)
        start_response(response.status, response.headers)
        return [response.body]

    def _handle(
        self, environ: dict[str, Any], request: S3Request, headers: Mapping[str, str]
    ) -> _Response:
        # The whole body is in before any key is locked: a slow upload holds up nobody (S3
        # serves the previous object to readers until the new one is complete).
        _receive_body(environ)
        decision = self.faults.decide(request.operation, request.bucket or "", request.key)
        self._stall(decision.stall)
        if not request.mutating or decision.before is not None:
            self._wait(decision)
        if decision.before is not None:
            return self._strike_before(decision.before, request)
        denied = self._check_policy(request, headers)
        if denied is not None:
            return denied
        if request.operation in {"PutBucketPolicy", "GetBucketPolicy", "DeleteBucketPolicy"}:
            return self._bucket_policy(environ, request)
        lacked = self._act_lacking(environ, request, headers)
        if isinstance(lacked, _Response):
            return lacked
        headers = lacked
        if request.operation == "UploadPartCopy":
            return self._upload_part_copy(environ, request, headers)
        if not request.mutating:
            if request.bucket is None or request.key is None:
                return self._forward(environ)
            with self._applying.hold([(request.bucket, request.key)], wait=True):
                return self._forward(environ)
        return self._write(environ, request, headers, decision)

    def _write(
        self,
        environ: dict[str, Any],
        request: S3Request,
        headers: Mapping[str, str],
        decision: Decision,
    ) -> _Response:
        assert request.bucket is not None
        invalid = _unsupported_conditions(request, headers)
        if invalid is not None:
            return invalid
        body = b""
        source: CopySource | None = None
        if request.operation == "DeleteObjects":
            body = _read_body(environ)
            try:
                entries = delete_entries(body)
            except ET.ParseError:
                return _error(
                    "400 Bad Request", "MalformedXML", "The XML you provided was not well-formed"
                )
            unsupported = delete_unsupported(headers, None, entries)
            if unsupported is not None:
                return _not_implemented(unsupported)
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
                return _error(
                    "409 Conflict",
                    "ConditionalRequestConflict",
                    "A conflicting conditional operation is currently in progress against this "
                    "resource. Please try again.",
                    key=request.key,
                )
            self._wait(decision)
            if request.operation == "DeleteObjects":
                with self._applying.hold(keys, wait=True):
                    response = self._delete_objects(environ, request, headers, body)
            else:
                try:
                    failed = self._check_conditions(request, headers, source)
                except BadCondition as error:
                    failed = _error("400 Bad Request", "InvalidArgument", str(error))
                if failed is not None:
                    response = failed
                else:
                    with self._applying.hold(keys, wait=True):
                        response = self._forward(_without_checked_conditions(environ, request))
                if request.operation == "CompleteMultipartUpload" and response.code == 200:
                    self._remember_completion(request)
        if decision.after is not None and response.code < 300:
            return self._strike_after(decision.after)
        return response

    def _upload_part_copy(
        self, environ: dict[str, Any], request: S3Request, headers: Mapping[str, str]
    ) -> _Response:
        """UploadPartCopy with its copy-source conditions (moto ignores them), checked and
        copied while the source's key is locked against writers."""
        source = parse_copy_source(headers.get("x-amz-copy-source", ""))
        if source is None:
            return self._forward(environ)
        with self._locks.hold([(source.bucket, source.key)], wait=True):
            try:
                failed = self._check_copy_source(source, headers)
            except BadCondition as error:
                failed = _error("400 Bad Request", "InvalidArgument", str(error))
            if failed is not None:
                return failed
            return self._forward(environ)

    def _act_lacking(
        self, environ: dict[str, Any], request: S3Request, headers: Mapping[str, str]
    ) -> _Response | Mapping[str, str]:
        """Act as a store without the features in :attr:`lacking`: the request's conditions of
        a lacked feature are dropped ("ignore") or answered 501 ("refuse"). Returns the headers
        the rest of the gateway should see (``environ`` is changed to match)."""
        feature = _FEATURES.get(request.operation)
        mode = self.lacking.get(feature) if feature is not None else None
        if feature is None or mode is None:
            return headers
        if feature == "delete-objects-etag":
            try:
                root = ET.fromstring(_read_body(environ))
            except ET.ParseError:
                return headers  # answered as malformed further on
            conditions = [
                (obj, child)
                for obj in root
                if _local(obj.tag) == "Object"
                for child in obj
                if _local(child.tag) in {"ETag", "Size", "LastModifiedTime"}
            ]
            if conditions and mode == "refuse":
                return _not_implemented("conditions on DeleteObjects entries are not implemented")
            for obj, child in conditions:
                obj.remove(child)
            if conditions:
                _replace_body(environ, ET.tostring(root))
            return headers
        present = [name for name in _CONDITION_HEADERS[feature] if name in headers]
        if present and mode == "refuse":
            return _not_implemented(f"{', '.join(present)}: not implemented")
        for name in present:
            environ.pop("HTTP_" + name.upper().replace("-", "_"), None)
        return {k: v for k, v in headers.items() if k not in present}

    # -- what moto lacks ------------------------------------------------------------------------

    def _check_conditions(
        self, request: S3Request, headers: Mapping[str, str], source: CopySource | None
    ) -> _Response | None:
        """The preconditions moto ignores or gets wrong, checked under the key lock."""
        assert request.bucket is not None
        assert request.key is not None
        if_match = headers.get("if-match")
        if_none_match = headers.get("if-none-match")
        if request.operation == "CompleteMultipartUpload":
            upload_id = request.query.get("uploadId", [""])[0]
            current = self._current_etag(request.bucket, request.key)
            if upload_id in self._completed and current == self._completed[upload_id]:
                return None  # a retried completion of this very upload: idempotent
            if if_match is not None:
                return _compare(if_match, current, request.key)
            if if_none_match is not None and current is not None:
                return _precondition_failed("If-None-Match", request.key)
        elif request.operation == "CopyObject":
            current = self._current_etag(request.bucket, request.key)
            if if_match is not None:
                failed = _compare(if_match, current, request.key)
                if failed is not None:
                    return failed
            if if_none_match is not None and current is not None:
                return _precondition_failed("If-None-Match", request.key)
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
                return _precondition_failed(IF_MATCH_SIZE, request.key)
        return None

    def _check_copy_source(
        self, source: CopySource, headers: Mapping[str, str]
    ) -> _Response | None:
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
        return _precondition_failed(failed, source.key)

    def _remember_completion(self, request: S3Request) -> None:
        assert request.bucket is not None
        assert request.key is not None
        etag = self._current_etag(request.bucket, request.key)
        if etag is not None:
            self._completed[request.query.get("uploadId", [""])[0]] = etag

    def _current_etag(self, bucket: str, key: str) -> str | None:
        state = self._head(bucket, key)
        return state.etag if state is not None else None

    def _head(self, bucket: str, key: str, *, version_id: str | None = None) -> ObjectState | None:
        query = f"versionId={quote(version_id, safe='')}" if version_id is not None else ""
        response = self._subrequest("HEAD", bucket, key, query=query)
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
    ) -> _Response:
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
                return _error("400 Bad Request", "InvalidArgument", str(bad))
            if failure is not None:
                failures.append((entry.key, *failure))
                root.remove(obj)
            else:
                for child in list(obj):
                    if _local(child.tag) in {"ETag", "Size"}:
                        obj.remove(child)
        remaining = [o for o in root if _local(o.tag) == "Object"]
        if remaining:
            environ = dict(environ)
            _replace_body(environ, ET.tostring(root))
            response = self._forward(environ)
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
        return _Response(
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

    def _check_policy(self, request: S3Request, headers: Mapping[str, str]) -> _Response | None:
        if request.bucket is None:
            return None
        allowed = self.policies.allows(
            operation=request.operation,
            bucket=request.bucket,
            key=request.key,
            headers=headers,
            query={k: v[0] for k, v in request.query.items() if v},
            access_key=request.access_key,
        )
        if allowed:
            return None
        return _error("403 Forbidden", "AccessDenied", "Access Denied", key=request.key)

    def _bucket_policy(self, environ: dict[str, Any], request: S3Request) -> _Response:
        """Bucket policies live here, never in moto (see :mod:`._policy_gate`)."""
        assert request.bucket is not None
        exists = self._subrequest("HEAD", request.bucket, None)
        if exists.code != 200:
            return _error("404 Not Found", "NoSuchBucket", "The specified bucket does not exist")
        if request.operation == "DeleteBucketPolicy":
            self.policies.delete(request.bucket)
            return _Response("204 No Content", [], b"")
        if request.operation == "GetBucketPolicy":
            policy = self.policies.get(request.bucket)
            if policy is None:
                return _error(
                    "404 Not Found", "NoSuchBucketPolicy", "The bucket policy does not exist"
                )
            return _json(policy)
        try:
            self.policies.put(request.bucket, orjson.loads(_read_body(environ)))
        except ValueError as error:
            return _error("400 Bad Request", "MalformedPolicy", str(error))
        return _Response("204 No Content", [], b"")

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

    def _strike_before(self, rule: FaultRule, request: S3Request) -> _Response:
        if rule.kind == "slowdown":
            return _error("503 Slow Down", "SlowDown", "Please reduce your request rate.")
        if rule.kind == "error":
            return _error("500 Internal Server Error", "InternalError", "Injected fault.")
        if rule.kind == "conflict":
            return _error(
                "409 Conflict",
                "ConditionalRequestConflict",
                "A conflicting conditional operation is currently in progress against this "
                "resource. Please try again.",
                key=request.key,
            )
        if rule.kind == "timeout":
            self._sleep(rule.delay)
        raise _Reset

    def _strike_after(self, rule: FaultRule) -> _Response:
        if rule.kind == "lost_ack_5xx":
            return _error("500 Internal Server Error", "InternalError", "Injected lost ack.")
        raise _Reset

    # -- plumbing -----------------------------------------------------------------------------

    def _forward(self, environ: dict[str, Any]) -> _Response:
        captured: list[Any] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> None:
            captured[:] = [status, headers]

        chunks = self._backend(environ, start_response)
        try:
            body = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        return _Response(captured[0], list(captured[1]), body)

    def _subrequest(
        self, method: str, bucket: str, key: str | None, *, query: str = ""
    ) -> _Response:
        path = f"/{quote(bucket)}" + (f"/{quote(key, safe='/')}" if key is not None else "")
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": unquote(path),
            "RAW_URI": path,
            "REQUEST_URI": path,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "80",
            "HTTP_HOST": "127.0.0.1",
            # moto answers unsigned requests as an anonymous caller (403 on private objects);
            # it does not verify signatures, so a well-formed credential scope is enough.
            "HTTP_AUTHORIZATION": (
                "AWS4-HMAC-SHA256 Credential=lakelock-gateway/20250101/us-east-1/s3/aws4_request, "
                "SignedHeaders=host, Signature=0"
            ),
            "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": BytesIO(b""),
            "wsgi.errors": BytesIO(),
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            "CONTENT_LENGTH": "0",
        }
        return self._forward(environ)

    def stats(self) -> dict[str, int]:
        with self._counts_lock:
            return dict(self._counts)

    def traffic(self) -> dict[str, int]:
        """Request and response body bytes since start or the last reset."""
        with self._counts_lock:
            return {"in": self._bytes["in"], "out": self._bytes["out"]}

    def reset_stats(self) -> None:
        with self._counts_lock:
            self._counts.clear()
            self._bytes.clear()

    def _control(self, environ: dict[str, Any], command: str) -> _Response:
        """``GET stats``, ``DELETE stats``, ``GET|PUT|DELETE faults``, ``POST faults`` (one
        rule), ``PUT settings``, ``GET stalls``, ``DELETE stalls`` (release them)."""
        method = environ["REQUEST_METHOD"]
        command = urlsplit(command).path.strip("/")
        try:
            if command == "stats" and method == "GET":
                return _json(self.stats())
            if command == "traffic" and method == "GET":
                return _json(self.traffic())
            if command == "stats" and method == "DELETE":
                self.reset_stats()
                return _json({})
            if command == "faults" and method == "GET":
                return _json(self.faults.to_json())
            if command == "faults" and method == "PUT":
                plan = FaultPlan.from_json(orjson.loads(_read_body(environ)))
                self.faults.clear()
                self.faults.reseed(plan.seed)
                for rule in plan.rules():
                    self.faults.add(rule)
                return _json(self.faults.to_json())
            if command == "faults" and method == "POST":
                self.faults.add(FaultRule(**orjson.loads(_read_body(environ))))
                return _json(self.faults.to_json())
            if command == "faults" and method == "DELETE":
                self.faults.clear()
                return _json(self.faults.to_json())
            if command == "settings" and method == "PUT":
                settings = orjson.loads(_read_body(environ))
                lacking = dict(settings.get("lacking") or {})
                unknown = {f for f in lacking if f not in LACKABLE} | {
                    m for m in lacking.values() if m not in {"ignore", "refuse"}
                }
                if unknown:
                    raise ValueError(
                        f"unknown lacking features or modes {sorted(unknown)}: features are "
                        f"{sorted(LACKABLE)}, modes 'ignore' and 'refuse'"
                    )
                self.concurrent_conflicts = bool(settings.get("concurrent_conflicts", False))
                self.lacking = lacking
                return _json(
                    {"concurrent_conflicts": self.concurrent_conflicts, "lacking": self.lacking}
                )
            if command == "stalls" and method == "GET":
                return _json({"stalled": self.stalled()})
            if command == "stalls" and method == "DELETE":
                self.release_stalls()
                return _json({"stalled": self.stalled()})
        except (ValueError, TypeError) as error:
            return _error("400 Bad Request", "InvalidArgument", str(error))
        return _error("404 Not Found", "NoSuchControl", f"no control {method} {command!r}")


def _headers(environ: Mapping[str, Any]) -> dict[str, str]:
    headers = {
        name[5:].replace("_", "-").lower(): str(value)
        for name, value in environ.items()
        if name.startswith("HTTP_")
    }
    if "CONTENT_TYPE" in environ:
        headers["content-type"] = environ["CONTENT_TYPE"]
    return headers


def _read_body(environ: dict[str, Any]) -> bytes:
    """Read the whole request body and put it back for whoever reads next."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    stream = environ["wsgi.input"]
    body: bytes = stream.read(length) if length else stream.read()
    environ["wsgi.input"] = BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return body


def _receive_body(environ: dict[str, Any]) -> None:
    """Take in a request's whole body, if it has one (a length, or chunked encoding)."""
    if int(environ.get("CONTENT_LENGTH") or 0) > 0 or environ.get("wsgi.input_terminated"):
        _read_body(environ)


def _replace_body(environ: dict[str, Any], body: bytes) -> None:
    """Give the request a rewritten body, with the checksums that go with it."""
    environ["wsgi.input"] = BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    environ["HTTP_CONTENT_MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
    for name in [n for n in environ if n.startswith("HTTP_X_AMZ_CHECKSUM")]:
        del environ[name]
    environ.pop("HTTP_X_AMZ_SDK_CHECKSUM_ALGORITHM", None)


#: Which lackable feature each operation's conditions belong to.
_FEATURES: dict[str, str] = {
    "DeleteObject": "delete-if-match",
    "DeleteObjects": "delete-objects-etag",
    "CopyObject": "copy-source-conditions",
    "UploadPartCopy": "copy-source-conditions",
}
_CONDITION_HEADERS: dict[str, tuple[str, ...]] = {
    "delete-if-match": ("if-match", IF_MATCH_SIZE, IF_MATCH_LAST_MODIFIED_TIME),
    "copy-source-conditions": (
        COPY_SOURCE_IF_MATCH,
        COPY_SOURCE_IF_NONE_MATCH,
        COPY_SOURCE_IF_MODIFIED_SINCE,
        COPY_SOURCE_IF_UNMODIFIED_SINCE,
    ),
}


def _not_implemented(message: str) -> _Response:
    return _error("501 Not Implemented", "NotImplemented", message)


def _unsupported_conditions(request: S3Request, headers: Mapping[str, str]) -> _Response | None:
    if request.operation == "DeleteObject":
        unsupported = delete_unsupported(headers, request.query.get("versionId", [None])[0])
        return _not_implemented(unsupported) if unsupported is not None else None
    if_match = headers.get("if-match")
    if_none_match = headers.get("if-none-match")
    if request.operation not in {"PutObject", "CompleteMultipartUpload", "CopyObject"}:
        return None
    if if_match is not None and if_none_match is not None:
        return _not_implemented(
            "A header you provided implies functionality that is not implemented"
        )
    if if_none_match is not None and if_none_match.strip() != "*":
        return _not_implemented("If-None-Match only supports the value *")
    return None


def _checked_here(if_match: str) -> bool:
    """If-Match values moto would compare as one literal ETag (``*``, lists): the gateway
    evaluates those itself."""
    return "*" in if_match or "," in if_match


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


def _compare(if_match: str, current: str | None, key: str) -> _Response | None:
    if current is None:
        return _error("404 Not Found", "NoSuchKey", "The specified key does not exist.", key=key)
    if not etag_matches(if_match, current):
        return _precondition_failed("If-Match", key)
    return None


def _precondition_failed(condition: str, key: str) -> _Response:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PreconditionFailed</Code>'
        "<Message>At least one of the pre-conditions you specified did not hold</Message>"
        f"<Condition>{_xml_escape(condition)}</Condition><Key>{_xml_escape(key)}</Key>"
        "<RequestId>lakelock-gateway</RequestId></Error>"
    ).encode()
    return _Response("412 Precondition Failed", [("Content-Type", "application/xml")], body)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _json(data: object) -> _Response:
    return _Response("200 OK", [("Content-Type", "application/json")], orjson.dumps(data))


def _reset_connection(environ: Mapping[str, Any]) -> None:
    """Abort the TCP connection (RST), as a crashed front end or a network fault would."""
    sock = environ.get("werkzeug.socket")
    if not isinstance(sock, socket.socket):
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
