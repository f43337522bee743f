"""The webhook's HTTPS server: `POST /validate` (an AdmissionReview v1, answered by review.review) and
`GET /healthz`. TLS 1.2 or later with the serving certificate the chart generates (or the devstack writes); the
handshake runs on the request's thread, bounded like every read, so a client that stalls holds one thread only."""

from __future__ import annotations

import http.server
import json
import logging
import socket
import ssl
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servingops.admission.review import TreeReader, review

log = logging.getLogger("servingops.admission")

VALIDATE_PATH = "/validate"
HEALTH_PATH = "/healthz"
MAX_REVIEW_BYTES = 8 << 20
"""An AdmissionReview carries the object twice (object and oldObject); the apiserver caps one object at 3 MiB."""
READ_SECONDS = 10


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: AdmissionServer) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("admission connection from %s ended with an error", client_address[0], exc_info=True)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    server_version = "servingops-admission"

    def version_string(self) -> str:
        return self.server_version

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
        if self.path.split("?")[0] != VALIDATE_PATH:
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
        app = self.server.app
        answer = review(body, app.reader, max_depth=app.max_depth)
        response = answer["response"]
        if not response["allowed"]:
            log.info("refused %s: %s", (body.get("request") or {}).get("name", ""), response["status"]["message"])
        self._send(200, answer)

    def _send(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class AdmissionServer:
    """start() and stop() from main (or a test)."""

    def __init__(self, host: str, port: int, cert_file: Path, key_file: Path, reader: TreeReader, *,
                 max_depth: int) -> None:
        self.host, self.requested_port = host, port
        self.cert_file, self.key_file = cert_file, key_file
        self.reader = reader
        self.max_depth = max_depth
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.requested_port if self._httpd is None else int(self._httpd.server_address[1])

    def start(self) -> AdmissionServer:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        httpd = _HTTPServer((self.host, self.requested_port), self)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="admission-https", daemon=True)
        self._thread.start()
        log.info("admission webhook listening on https://%s:%d%s", self.host, self.port, VALIDATE_PATH)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
