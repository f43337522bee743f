"""The HTTPS server both admission webhooks run (the model webhook's `/mutate`, the quota tree's
`/validate`): one POST path taking an AdmissionReview v1 and answering what `answer` returns, and
`GET /healthz`.

TLS 1.2 or later with the serving certificate the chart generates (or the devstack writes). The
listening socket does not handshake on accept: the handshake runs on the request's own thread,
bounded like every read, so a client that stalls holds one thread only and never the accept loop.
"""

from __future__ import annotations

import http.server
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

HEALTH_PATH = "/healthz"
MAX_REVIEW_BYTES = 8 << 20
"""An AdmissionReview carries the object twice (object and oldObject); the apiserver caps one object at 3 MiB."""
READ_SECONDS = 10

Answer = Callable[[dict[str, Any]], Mapping[str, Any]]
"""An AdmissionReview in, the AdmissionReview to answer out."""


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: ReviewServer) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.app.log.debug("connection from %s ended with an error", client_address[0], exc_info=True)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def version_string(self) -> str:
        return self.server.app.name

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(READ_SECONDS)
        self.connection.do_handshake()

    def do_GET(self) -> None:
        if self.path.split("?")[0] == HEALTH_PATH:
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        app = self.server.app
        if self.path.split("?")[0] != app.path:
            self._send(404, {"error": "not found"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_REVIEW_BYTES:
            self._send(400, {"error": "an AdmissionReview body with Content-Length is expected"})
            return
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            self._send(400, {"error": "the body is not JSON"})
            return
        if not isinstance(body, dict) or body.get("kind") != "AdmissionReview":
            self._send(400, {"error": "the body is not an AdmissionReview"})
            return
        self._send(200, app.answer(body))

    def _send(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        self.server.app.log.debug("%s %s", self.address_string(), format % args)


class ReviewServer:
    """start() and stop() from a process's main (or a test). `name` is the Server header and the
    thread's name; `path` the one POST path."""

    def __init__(self, host: str, port: int, cert_file: Path, key_file: Path, *, path: str, answer: Answer,
                 name: str, log: logging.Logger) -> None:
        self.host, self.requested_port = host, port
        self.cert_file, self.key_file = cert_file, key_file
        self.path, self.answer, self.name, self.log = path, answer, name, log
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.requested_port if self._httpd is None else int(self._httpd.server_address[1])

    def start(self) -> Self:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        httpd = _HTTPServer((self.host, self.requested_port), self)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name=f"{self.name}-https", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None


__all__ = ["HEALTH_PATH", "MAX_REVIEW_BYTES", "Answer", "ReviewServer"]
