"""A /metrics endpoint whose values the test sets, for the real Prometheus to scrape."""

from __future__ import annotations

import http.server
import threading


class Exporter:
    """Serves whatever series the test puts in it, in the Prometheus text format."""

    def __init__(self) -> None:
        self.lines: dict[str, str] = {}
        self.lock = threading.Lock()
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with exporter.lock:
                    body = "".join(f"{k} {v}\n" for k, v in exporter.lines.items()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def set(self, series: dict[str, float]) -> None:
        with self.lock:
            self.lines.update({k: repr(v) for k, v in series.items()})

    def stop(self) -> None:
        self.server.shutdown()
