"""The upload endpoint, served by the worker process itself so the bytes land in the spool of the worker that
will prepare and publish them.

HTTP contract (all paths `/uploads/<session id>`, the session id being the model's uid):

- `PUT` without Content-Range: the whole file in the body (Content-Length, or Transfer-Encoding: chunked).
  It starts the upload over, discarding any partial one.
- `PUT` or `PATCH` with `Content-Range: bytes <start>-<end>/<total>` (and Content-Length = end-start+1):
  one chunk of a resumable upload. `start` must equal the bytes already received, else 416 with
  `Upload-Offset: <n>` and `Range: bytes=0-<n-1>` saying where to resume. The first chunk fixes the total
  and the file name. If a connection drops mid-chunk, what arrived is kept: HEAD tells the new offset.
- `HEAD`: 200 with `Upload-Offset` (and `Range`, `Upload-Length`, `Upload-Expires`) of what was received;
  `Upload-Complete: ?1` once the upload is complete.
- `DELETE`: discards a partial upload (204); the session stays open.
- The file name comes from `X-Filename` or `?filename=` (a plain name, no path); it is a hint only: the content
  is classified by its magic bytes when the last byte is in (clients/model_files/archive.py).
- `Authorization: Bearer <token>` on every request.

Answers: 200 chunk accepted (JSON with the offset) / HEAD; 201 upload complete (JSON with size, sha256, kind);
204 partial discarded; 400 malformed request; 401 missing or wrong token, or no such session (one answer for
all three, so nobody learns which sessions exist); 404 another path; 405 another method; 409 the session was
already used (single use), or another request is uploading to it right now; 410 the session expired; 411 no
length; 413 larger than the session's maximum (any partial upload is removed); 415 the content is not a
.safetensors/.gguf file or a .tar/.tar.gz/.zip archive (partial removed, session still open); 416 wrong
resume offset; 503 Kubernetes or Temporal unreachable (retry); 507 not enough space on the worker.

When the last byte is in: the file is fsynced and renamed from `<name>.part` to `<name>`, the session is marked
used (a marker in the spool: the session's URL leads to this worker only), and the model workflow gets the
`upload-complete` signal with an UploadComplete. Should that signal fail, the answer is 503 and any later
request on the session sends it again. The model workflow then closes the session (its record is deleted, so
the URL answers 401 from then on).

The server finds a session by its id alone: the signed session record is the ConfigMap `upload-session-<id>`
of the controller namespace (clients/upload_sessions.py). So its identity needs only `get` on ConfigMaps
of that namespace and on the signing-key Secret: no right on any other Secret, none in another namespace, and
no write anywhere (deploy/chart/templates/rbac-uploads.yaml). The token is never in its memory, only the
sha256 of the token a client presents, compared in constant time with the record's. Nothing here logs a header.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import http.server
import json
import logging
import os
import re
import shutil
import socket
import threading
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ValidationError
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from urllib3.exceptions import HTTPError as Urllib3Error

from servingops.api_models.contract import Signal, model_workflow_id
from servingops.api_models.contract.uploads import UploadComplete
from servingops.api_models.operator_config import DEFAULT_CONTROLLER_NAMESPACE
from servingops.clients.kube.calls import get_or_none
from servingops.clients.kube.timeouts import ENDPOINT_READ_TIMEOUT
from servingops.clients.model_files.archive import classify_upload
from servingops.clients.model_files.errors import InvalidModel
from servingops.clients.upload_sessions import (
    SESSION_ID,
    UPLOADS_PREFIX,
    SessionRecord,
    SigningKey,
    record_name,
    rfc3339,
    token_digest,
    upload_dir,
    verified_record,
)

log = logging.getLogger("servingops.uploads.server")

PIECE = 1 << 20
"""Bytes read from the socket, hashed and written per step: the body is never held whole in memory."""
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")
_DRAIN_LIMIT = 64 << 20
"""After an early refusal, up to this much of the unread body is read and dropped so the client, still
sending, gets to read the answer instead of a connection reset; beyond it the connection is just closed."""
_DRAIN_TIMEOUT = 5.0
_DISK_RESERVE = 64 << 20
_STATE = ".session.json"
_MARKER = ".completed.json"
_NOTIFY_ATTEMPTS = 3
_M = TypeVar("_M", bound=BaseModel)


class _Reply(Exception):
    def __init__(self, status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


class _ClientGone(Exception):
    """The client closed the connection or stopped sending: there is nobody to answer."""


def _unauthorized() -> _Reply:
    return _Reply(401, {"error": "missing or invalid upload token, or no such upload session"},
                  {"WWW-Authenticate": 'Bearer realm="servingops-upload"'})


class _State(BaseModel):
    """The upload in progress, next to its .part file: fixed by the first chunk."""

    filename: str | None = None
    total: int | None = None


class _Marker(BaseModel):
    """Written when the upload is complete: this worker's authoritative record that the session is used."""

    upload: UploadComplete
    notified: bool = False


@dataclass
class _Progress:
    """Per session: one request at a time, and the running hash of the .part file's first `hashed` bytes."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    hasher: Any = None
    hashed: int = -1


@dataclass(frozen=True)
class _Session:
    record: SessionRecord


class _Body:
    """The request body, read in pieces, from Content-Length or chunked transfer coding."""

    def __init__(self, rfile: Any, length: int | None, chunked: bool) -> None:
        self.rfile = rfile
        self.length = None if chunked else length
        self.chunked = chunked
        self.read_bytes = 0
        self.done = not chunked and not length
        self._chunk_left = 0

    def readinto(self, view: memoryview) -> int:
        """Fill `view` with the next bytes of the body (fewer at a chunk's end); 0 at its end."""
        if self.done:
            return 0
        if self.chunked:
            if self._chunk_left == 0:
                size = self._chunk_header()
                if size == 0:
                    self._trailers()
                    self.done = True
                    return 0
                self._chunk_left = size
            n = self._raw(view[: min(len(view), self._chunk_left)])
            self._chunk_left -= n
            if self._chunk_left == 0:
                self._line()  # the CRLF after a chunk's data
        else:
            assert self.length is not None
            n = self._raw(view[: min(len(view), self.length - self.read_bytes)])
            self.done = self.read_bytes + n == self.length
        self.read_bytes += n
        return n

    def _raw(self, view: memoryview) -> int:
        try:
            n = self.rfile.readinto(view)
        except OSError as exc:  # reset, timeout
            raise _ClientGone from exc
        if not n:
            raise _ClientGone
        return int(n)

    def _line(self) -> bytes:
        try:
            line: bytes = self.rfile.readline(1024)
        except OSError as exc:
            raise _ClientGone from exc
        if not line:
            raise _ClientGone
        return line

    def _chunk_header(self) -> int:
        line = self._line()
        try:
            return int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _Reply(400, {"error": "malformed chunked transfer coding"}) from None

    def _trailers(self) -> None:
        while self._line() not in (b"\r\n", b"\n"):
            pass


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], app: UploadServer) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints these to stderr; a client that hangs up mid-answer is routine here.
        log.debug("upload connection from %s ended with an error", client_address[0], exc_info=True)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive between chunks, and Expect: 100-continue
    server: _HTTPServer
    server_version = "servingops-upload"

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.app.socket_timeout)  # a stalled client frees its thread
        self.expect_continue = False
        self.continued = False
        self.body: _Body | None = None

    # Expect: 100-continue is answered only once the request is accepted, so a client that waits for it
    # sends no byte of a body that would be refused.
    def handle_expect_100(self) -> bool:
        self.expect_continue = True
        return True

    def send_continue(self) -> None:
        if self.expect_continue and not self.continued:
            self.send_response_only(100)
            self.end_headers()
            self.continued = True

    def request_body(self) -> _Body:
        """The body's framing, from the headers; 411 when it has none."""
        if self.body is None:
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            raw_length = self.headers.get("Content-Length")
            length: int | None = None
            if raw_length is not None:
                if not raw_length.strip().isdigit():
                    raise _Reply(400, {"error": "malformed Content-Length"})
                length = int(raw_length)
            if not chunked and length is None:
                raise _Reply(411, {"error": "send Content-Length or Transfer-Encoding: chunked"})
            self.body = _Body(self.rfile, length, chunked)
        return self.body

    def do_PUT(self) -> None:
        self._dispatch(self.server.app.handle_upload)

    def do_PATCH(self) -> None:
        self._dispatch(self.server.app.handle_upload)

    def do_HEAD(self) -> None:
        self._dispatch(self.server.app.handle_head)

    def do_DELETE(self) -> None:
        self._dispatch(self.server.app.handle_delete)

    def do_GET(self) -> None:
        self._dispatch(_method_not_allowed)

    def do_POST(self) -> None:
        self._dispatch(_method_not_allowed)

    def _dispatch(self, handler: Callable[[_Handler], _Reply]) -> None:
        try:
            reply = handler(self)
        except _Reply as exc:
            reply = exc
        except _ClientGone:
            self.close_connection = True
            return
        except Exception:
            log.exception("upload request %s %s failed", self.command, self._path_only())
            reply = _Reply(500, {"error": "internal error"})
        finally:
            expect_continue, continued = self.expect_continue, self.continued
            self.expect_continue = self.continued = False
        self._send(reply, refuse_body=expect_continue and not continued)
        self.body = None

    def _send(self, reply: _Reply, *, refuse_body: bool) -> None:
        body = b"" if reply.body is None else json.dumps(reply.body).encode()
        unread = self._has_unread_body()
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if unread:
            # The rest of the body would be read as the next request: this connection ends here.
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        if unread and not refuse_body:
            self._drain()

    def _has_unread_body(self) -> bool:
        if self.command in ("HEAD", "GET") and self.body is None:
            return False
        try:
            body = self.request_body()
        except _Reply:
            return "Content-Length" in self.headers or "Transfer-Encoding" in self.headers
        return not body.done

    def _drain(self) -> None:
        body = self.body
        if body is None or body.done:
            return
        remaining = None if body.chunked or body.length is None else body.length - body.read_bytes
        if remaining is not None and remaining > _DRAIN_LIMIT:
            return
        self.connection.settimeout(_DRAIN_TIMEOUT)
        view = memoryview(bytearray(PIECE))
        drained = 0
        try:
            while drained <= _DRAIN_LIMIT:
                n = body.readinto(view)
                if n == 0:
                    return
                drained += n
        except (_ClientGone, _Reply):
            return

    def _path_only(self) -> str:
        return urllib.parse.urlsplit(self.path).path

    # http.server's own logging goes to stderr and would print the request line; ours logs no header.
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.info("%s %s -> %s", self.command, self._path_only(), code)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("upload server: " + format, *args)


def _method_not_allowed(handler: _Handler) -> _Reply:
    return _Reply(405, {"error": "use PUT, PATCH, HEAD or DELETE"}, {"Allow": "PUT, PATCH, HEAD, DELETE"})


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _header_text(value: str) -> str:
    # http.server decodes header bytes as Latin-1; a client sending a UTF-8 name gets it back as UTF-8.
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def _filename(header: str | None, query: dict[str, list[str]]) -> str | None:
    """A plain file name, or None when the client gave none; 400 for anything that could name a path."""
    if header is not None:
        raw: str | None = _header_text(header)
    else:
        values = query.get("filename")
        raw = values[0] if values else None
    if raw is None or not raw.strip():
        return None
    name = raw.strip()
    if ("/" in name or "\\" in name or name.startswith(".") or any(ord(c) < 32 or ord(c) == 127 for c in name)
            or len(name.encode()) > 200):
        raise _Reply(400, {"error": "the file name must be a plain name (no path, not starting with a dot, "
                                    "at most 200 bytes)"})
    return name


def _offset_headers(offset: int, total: int | None) -> dict[str, str]:
    headers = {"Upload-Offset": str(offset)}
    if offset > 0:
        headers["Range"] = f"bytes=0-{offset - 1}"
    if total is not None:
        headers["Upload-Length"] = str(total)
    return headers


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json(path: Path, model: BaseModel) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(model.model_dump_json())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_json(path: Path, model: type[_M]) -> _M | None:
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


class UploadServer:
    """The HTTP upload endpoint of one worker; start() and stop() from the worker's main."""

    def __init__(
        self,
        spool_root: str | Path,
        host: str,
        port: int,
        public_base_url: str,
        api_client: client.ApiClient,
        temporal_client_factory: Callable[[], Awaitable[Client]],
        *,
        controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE,
        max_upload_bytes: int | None = None,
        worker_task_queue: str | None = None,
        notify_timeout: float = 30.0,
        socket_timeout: float = 120.0,
    ) -> None:
        """`temporal_client_factory` is awaited once, on the server's own event loop thread, to get the
        client that sends `upload-complete` (e.g. `lambda: runtime.temporal.connect(settings)`).
        `max_upload_bytes` caps every session whatever its record says; `worker_task_queue` is copied into
        every UploadComplete (see its doc)."""
        self.spool_root = Path(spool_root)
        self.host = host
        self.requested_port = port
        self.public_base_url = public_base_url.rstrip("/")
        self.core = client.CoreV1Api(api_client)
        self.temporal_client_factory = temporal_client_factory
        self.controller_namespace = controller_namespace
        self.max_upload_bytes = max_upload_bytes
        self.worker_task_queue = worker_task_queue
        self.notify_timeout = notify_timeout
        self.socket_timeout = socket_timeout
        self.signing_key = SigningKey(self.core, controller_namespace)
        self._progress: dict[str, _Progress] = {}
        self._progress_lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Client | None = None
        self._client_lock: asyncio.Lock | None = None

    # -- lifecycle

    @property
    def port(self) -> int:
        if self._httpd is None:
            return self.requested_port
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Where this server listens (not the public base URL, which may be a Service or an Ingress)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> UploadServer:
        self.spool_root.mkdir(parents=True, exist_ok=True)
        # Signals go out from an event loop of our own: HTTP requests are served on threads, and the
        # Temporal client is created and used on this one loop.
        loop = asyncio.new_event_loop()
        self._loop = loop
        loop_thread = threading.Thread(target=loop.run_forever, name="upload-notify", daemon=True)
        loop_thread.start()
        self._httpd = _HTTPServer((self.host, self.requested_port), self)
        http_thread = threading.Thread(target=self._httpd.serve_forever, name="upload-http", daemon=True)
        http_thread.start()
        self._threads = [loop_thread, http_thread]
        log.info("upload server listening on %s (public %s)", self.url, self.public_base_url)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        for thread in self._threads:
            thread.join(timeout=10)
        if self._loop is not None and not self._loop.is_running():
            self._loop.close()
        self._loop = None
        self._threads = []

    # -- sessions

    def _session_id(self, handler: _Handler) -> tuple[str, dict[str, list[str]]]:
        parts = urllib.parse.urlsplit(handler.path)
        if not parts.path.startswith(UPLOADS_PREFIX):
            raise _Reply(404, {"error": "not found"})
        session_id = parts.path[len(UPLOADS_PREFIX):]
        if not SESSION_ID.match(session_id):
            raise _unauthorized()  # the same answer as for an unknown session
        return session_id, urllib.parse.parse_qs(parts.query)

    def _read_record(self, session_id: str) -> client.V1ConfigMap | None:
        """The session's record, by name in the controller namespace; None when there is none."""
        try:
            found: client.V1ConfigMap | None = get_or_none(
                self.core.read_namespaced_config_map, record_name(session_id), self.controller_namespace,
                timeout=ENDPOINT_READ_TIMEOUT)
        except ApiException as exc:  # anything but absent (that is None)
            log.warning("cannot read upload session records: %s %s", exc.status, exc.reason)
            raise _Reply(503, {"error": "Kubernetes API unavailable; retry"}, {"Retry-After": "5"}) from None
        except (Urllib3Error, OSError) as exc:
            log.warning("cannot read upload session records: %s", type(exc).__name__)
            raise _Reply(503, {"error": "Kubernetes API unavailable; retry"}, {"Retry-After": "5"}) from None
        return found

    def _authorize(self, handler: _Handler) -> tuple[_Session, dict[str, list[str]]]:
        session_id, query = self._session_id(handler)
        token = _bearer(handler.headers.get("Authorization"))
        if token is None:
            raise _unauthorized()
        presented = token_digest(token)
        found = self._read_record(session_id)
        if found is None:
            raise _unauthorized()
        for attempt in range(2):
            try:
                key = self.signing_key.get()
            except (ApiException, Urllib3Error, OSError):
                raise _Reply(503, {"error": "Kubernetes API unavailable; retry"}, {"Retry-After": "5"}) from None
            if key is None:
                break
            record = verified_record(found, key, self.controller_namespace)
            if record is not None and record.session_id == session_id:
                if hmac.compare_digest(record.token_sha256, presented):
                    return _Session(record), query
                break  # a valid record, the wrong token
            # The key may have been rotated since we cached it: read it again, at most every 30 s.
            if attempt == 0 and not self.signing_key.refresh():
                break
        raise _unauthorized()

    def _progress_of(self, session_id: str) -> _Progress:
        with self._progress_lock:
            return self._progress.setdefault(session_id, _Progress())

    def _forget(self, session_id: str) -> None:
        with self._progress_lock:
            self._progress.pop(session_id, None)

    def _max_bytes(self, session: _Session) -> int:
        limit = session.record.max_bytes
        return min(limit, self.max_upload_bytes) if self.max_upload_bytes else limit

    def _used(self, session: _Session) -> UploadComplete | None:
        """The completed upload of a used session (notifying the workflow again if that had failed)."""
        udir = upload_dir(self.spool_root, session.record.session_id)
        marker = _read_json(udir / _MARKER, _Marker)
        if marker is None:
            return None
        if not marker.notified:
            self._notify(session, marker.upload)
        return marker.upload

    def _discard(self, session_id: str) -> None:
        # The session's _Progress stays: its lock is held by the caller, and its hash is reset whenever an
        # upload starts at byte 0 (the only way to start after a discard).
        shutil.rmtree(upload_dir(self.spool_root, session_id), ignore_errors=True)
        try:
            (self.spool_root / session_id).rmdir()  # only if nothing else (a model dir) is there
        except OSError:
            pass

    # -- requests

    def handle_head(self, handler: _Handler) -> _Reply:
        session, _ = self._authorize(handler)
        done = self._used(session)
        if done is not None:
            return _Reply(200, None, {**_offset_headers(done.size, done.size), "Upload-Complete": "?1"})
        if session.record.expires_at <= dt.datetime.now(dt.UTC):
            raise _Reply(410, {"error": "the upload session expired"})
        udir = upload_dir(self.spool_root, session.record.session_id)
        state = _read_json(udir / _STATE, _State)
        offset = 0
        if state is not None:
            try:
                offset = (udir / f"{state.filename or 'upload'}.part").stat().st_size
            except FileNotFoundError:
                offset = 0
        headers = _offset_headers(offset, state.total if state else None)
        headers["Upload-Expires"] = rfc3339(session.record.expires_at)
        headers["Upload-Complete"] = "?0"
        return _Reply(200, None, headers)

    def handle_delete(self, handler: _Handler) -> _Reply:
        session, _ = self._authorize(handler)
        if self._used(session) is not None:
            raise _Reply(409, {"error": "the upload session was already used"})
        progress = self._progress_of(session.record.session_id)
        if not progress.lock.acquire(blocking=False):
            raise _Reply(409, {"error": "another request is uploading to this session"})
        try:
            self._discard(session.record.session_id)
        finally:
            progress.lock.release()
        return _Reply(204)

    def handle_upload(self, handler: _Handler) -> _Reply:
        session, query = self._authorize(handler)
        session_id = session.record.session_id
        if (done := self._used(session)) is not None:
            raise _Reply(409, {"error": "the upload session was already used", "sha256": done.sha256})
        # Checked when a request starts: a chunk that began before the expiry is received whole.
        if session.record.expires_at <= dt.datetime.now(dt.UTC):
            raise _Reply(410, {"error": "the upload session expired"})
        progress = self._progress_of(session_id)
        if not progress.lock.acquire(blocking=False):
            raise _Reply(409, {"error": "another request is uploading to this session; retry when it ends"})
        try:
            if (upload_dir(self.spool_root, session_id) / _MARKER).exists():  # completed while we waited
                raise _Reply(409, {"error": "the upload session was already used"})
            return self._receive(handler, session, progress, query)
        finally:
            progress.lock.release()

    def _receive(self, handler: _Handler, session: _Session, progress: _Progress,
                 query: dict[str, list[str]]) -> _Reply:
        session_id = session.record.session_id
        udir = upload_dir(self.spool_root, session_id)
        filename = _filename(handler.headers.get("X-Filename"), query)
        limit = self._max_bytes(session)
        body = handler.request_body()
        content_range = handler.headers.get("Content-Range")
        too_large = _Reply(413, {"error": f"the upload is larger than the {limit} bytes this session accepts"})
        state = _read_json(udir / _STATE, _State)
        total: int | None

        if content_range is not None:
            match = _CONTENT_RANGE.match(content_range.strip())
            if match is None:
                raise _Reply(400, {"error": "Content-Range must be 'bytes <start>-<end>/<total>'"})
            start, end, total = (int(g) for g in match.groups())
            if end < start or end >= total:
                raise _Reply(400, {"error": "Content-Range: need start <= end < total"})
            if body.chunked or body.length != end - start + 1:
                raise _Reply(400, {"error": "a chunk needs Content-Length equal to end - start + 1"})
            if total > limit:
                self._discard(session_id)
                raise too_large
            received = self._received(udir, state)
            if state is not None and state.total is not None and state.total != total:
                raise _Reply(400, {"error": f"the upload in progress has {state.total} bytes in total, not "
                                            f"{total}; DELETE it or PUT the whole file to start over"})
            if state is not None and filename is not None and state.filename != filename:
                raise _Reply(400, {"error": "the file name differs from the upload in progress; DELETE it or "
                                            "PUT the whole file to start over"})
            if start != received:
                raise _Reply(416, {"error": f"resume at byte {received}", "offset": received},
                             {**_offset_headers(received, total), "Content-Range": f"bytes */{total}"})
            if state is None:
                state = _State(filename=filename, total=total)
        else:
            if handler.command == "PATCH":
                raise _Reply(400, {"error": "PATCH sends one chunk: it needs Content-Range"})
            total = body.length
            if total is not None and total > limit:
                self._discard(session_id)
                raise too_large
            if total == 0:
                raise _Reply(400, {"error": "the body is empty"})
            start = 0
            # A whole-file PUT starts over: whatever partial upload there was is dropped.
            self._discard(session_id)
            state = _State(filename=filename, total=total)

        udir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # An unknown total (chunked whole-file PUT) is checked as it is written: ENOSPC answers 507.
        needed = total - start if total is not None else 0
        if shutil.disk_usage(udir).free < needed + _DISK_RESERVE:
            raise _Reply(507, {"error": "not enough space on the worker for this upload"})
        if start == 0:
            _write_json(udir / _STATE, state)
        handler.send_continue()
        received = self._stream(body, udir / f"{state.filename or 'upload'}.part", start, limit, progress,
                                session_id, too_large)

        if total is None:  # a whole-file PUT with chunked coding: the end of the body is the end of the file
            total = received
            state = _State(filename=state.filename, total=total)
            _write_json(udir / _STATE, state)
        if received < total:
            return _Reply(200, {"offset": received, "total": total, "complete": False},
                          _offset_headers(received, total))
        done = self._complete(session, udir, state, received, progress)
        return _Reply(201, {"filename": done.filename, "size": done.size, "sha256": done.sha256, "kind": done.kind,
                            "complete": True},
                      {**_offset_headers(done.size, done.size), "Upload-Complete": "?1",
                       "Location": f"{self.public_base_url}{UPLOADS_PREFIX}{session_id}"})

    @staticmethod
    def _received(udir: Path, state: _State | None) -> int:
        if state is None:
            return 0
        try:
            return (udir / f"{state.filename or 'upload'}.part").stat().st_size
        except FileNotFoundError:
            return 0

    def _stream(self, body: _Body, part: Path, start: int, limit: int, progress: _Progress, session_id: str,
                too_large: _Reply) -> int:
        """Append the body to `part` at `start`, hashing as it goes; returns the bytes now in the file.

        The hash of the first `hashed` bytes is kept between requests, so chunk after chunk costs no re-read;
        after a restart (or a failed write) the partial file is hashed again from disk first.
        """
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            if start == 0:
                os.ftruncate(fd, 0)
                progress.hasher, progress.hashed = hashlib.sha256(), 0
            elif progress.hashed != start or progress.hasher is None:
                progress.hasher, progress.hashed = _hash_prefix(part, start), start
            os.lseek(fd, start, os.SEEK_SET)
            view = memoryview(bytearray(PIECE))
            written = start
            try:
                while True:
                    n = body.readinto(view)
                    if n == 0:
                        break
                    if written + n > limit:
                        os.close(fd)
                        fd = -1
                        self._discard(session_id)
                        raise too_large
                    _write_all(fd, view[:n])
                    progress.hasher.update(view[:n])
                    written += n
                    progress.hashed = written
            except _ClientGone:
                # Keep what arrived: the client asks HEAD where to resume.
                log.info("upload %s: the client went away at byte %d", session_id, written)
                raise
            except OSError as exc:
                progress.hashed = -1  # the file may hold part of a piece the hash has not seen
                raise _Reply(507 if exc.errno == 28 else 500, {"error": "cannot write the upload on the worker"}) \
                    from None
            os.fsync(fd)  # the offset HEAD reports must survive a crash of the worker
            return written
        finally:
            if fd >= 0:
                os.close(fd)

    def _complete(self, session: _Session, udir: Path, state: _State, size: int, progress: _Progress) -> UploadComplete:
        session_id = session.record.session_id
        part = udir / f"{state.filename or 'upload'}.part"
        try:
            kind = classify_upload(part, state.filename)
        except InvalidModel as exc:
            self._discard(session_id)
            raise _Reply(415, {"error": exc.message, "reason": exc.reason}) from None
        final = udir / (state.filename or f"model.{kind.value}")
        os.replace(part, final)
        _fsync_dir(udir)
        done = UploadComplete(filename=final.name, size=size, sha256=progress.hasher.hexdigest(),
                              path=str(final.resolve()), kind=kind.value, worker_task_queue=self.worker_task_queue)
        _write_json(udir / _MARKER, _Marker(upload=done))
        (udir / _STATE).unlink(missing_ok=True)
        self._forget(session_id)
        log.info("upload %s complete: %s, %d bytes, %s, sha256 %s", session_id, done.filename, size, done.kind,
                 done.sha256)
        self._notify(session, done)
        return done

    def _notify(self, session: _Session, done: UploadComplete) -> None:
        """Signal upload-complete to the model workflow; 503 (and a later retry) when that fails."""
        ref = session.record.model
        assert ref.uid is not None and self._loop is not None
        workflow_id = model_workflow_id(ref.namespace, ref.name, ref.uid)
        future = asyncio.run_coroutine_threadsafe(self._signal(workflow_id, done), self._loop)
        try:
            future.result(timeout=self.notify_timeout)
        except Exception as exc:
            future.cancel()
            log.warning("upload %s: cannot signal %s to workflow %s: %s", session.record.session_id,
                        Signal.UPLOAD_COMPLETE.value, workflow_id, exc)
            raise _Reply(503, {"error": "the upload is stored, but the controller could not be told yet; "
                                        "retry this request (or HEAD) to tell it again"},
                         {"Retry-After": "5"}) from None
        udir = upload_dir(self.spool_root, session.record.session_id)
        if (udir / _MARKER).exists():
            _write_json(udir / _MARKER, _Marker(upload=done, notified=True))

    async def _signal(self, workflow_id: str, done: UploadComplete) -> None:
        if self._client_lock is None:
            self._client_lock = asyncio.Lock()
        async with self._client_lock:
            if self._client is None:
                self._client = await self.temporal_client_factory()
        handle = self._client.get_workflow_handle(workflow_id)
        for attempt in range(_NOTIFY_ATTEMPTS):
            try:
                await handle.signal(Signal.UPLOAD_COMPLETE.value, done, rpc_timeout=dt.timedelta(seconds=10))
                return
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND or attempt == _NOTIFY_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0.5 * 2**attempt)


def _hash_prefix(path: Path, length: int) -> Any:
    hasher = hashlib.sha256()
    view = memoryview(bytearray(PIECE))
    left = length
    with open(path, "rb", buffering=0) as fh:
        while left:
            n = fh.readinto(view[: min(PIECE, left)])
            if not n:
                raise OSError(f"{path.name} is shorter than {length} bytes")
            hasher.update(view[:n])
            left -= n
    return hasher
