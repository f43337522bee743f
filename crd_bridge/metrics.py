"""The bridge's own metrics, served in the Prometheus text format on /metrics."""

from __future__ import annotations

import bisect
import http.server
import threading
from collections import Counter

# Histogram buckets for event-to-signal lag, in seconds.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class BridgeMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events_seen: Counter[tuple[str, str]] = Counter()
        self.signals_sent: Counter[tuple[str, str]] = Counter()
        self.dispatch_errors: Counter[str] = Counter()
        self.warnings: Counter[str] = Counter()
        self.lag_counts = [0] * (len(LAG_BUCKETS) + 1)
        self.lag_sum = 0.0
        self.queue_depth = 0
        self.is_leader = 0

    def event(self, kind: str, event_type: str) -> None:
        with self._lock:
            self.events_seen[(kind, event_type)] += 1

    def signal(self, workflow_type: str, signal: str, lag: float) -> None:
        with self._lock:
            self.signals_sent[(workflow_type, signal)] += 1
            self.lag_counts[bisect.bisect_left(LAG_BUCKETS, lag)] += 1
            self.lag_sum += lag

    def error(self, kind: str) -> None:
        with self._lock:
            self.dispatch_errors[kind] += 1

    def warning(self, reason: str) -> None:
        with self._lock:
            self.warnings[reason] += 1

    def render(self) -> str:
        with self._lock:
            lines = ["# TYPE servingops_bridge_events_seen_total counter"]
            lines += [f'servingops_bridge_events_seen_total{{kind="{k}",type="{t}"}} {n}'
                      for (k, t), n in sorted(self.events_seen.items())]
            lines.append("# TYPE servingops_bridge_signals_sent_total counter")
            lines += [f'servingops_bridge_signals_sent_total{{workflow_type="{w}",signal="{s}"}} {n}'
                      for (w, s), n in sorted(self.signals_sent.items())]
            lines.append("# TYPE servingops_bridge_dispatch_errors_total counter")
            lines += [f'servingops_bridge_dispatch_errors_total{{error="{e}"}} {n}'
                      for e, n in sorted(self.dispatch_errors.items())]
            lines.append("# TYPE servingops_bridge_warning_events_total counter")
            lines += [f'servingops_bridge_warning_events_total{{reason="{r}"}} {n}'
                      for r, n in sorted(self.warnings.items())]
            lines.append("# TYPE servingops_bridge_signal_lag_seconds histogram")
            cumulative = 0
            for bound, count in zip((*LAG_BUCKETS, float("inf")), self.lag_counts, strict=True):
                cumulative += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f'servingops_bridge_signal_lag_seconds_bucket{{le="{le}"}} {cumulative}')
            lines.append(f"servingops_bridge_signal_lag_seconds_sum {self.lag_sum}")
            lines.append(f"servingops_bridge_signal_lag_seconds_count {cumulative}")
            lines.append("# TYPE servingops_bridge_queue_depth gauge")
            lines.append(f"servingops_bridge_queue_depth {self.queue_depth}")
            lines.append("# TYPE servingops_bridge_leader gauge")
            lines.append(f"servingops_bridge_leader {self.is_leader}")
            return "\n".join(lines) + "\n"

    def serve(self, host: str, port: int) -> http.server.ThreadingHTTPServer:
        metrics = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/healthz":
                    body = b"ok\n"
                elif self.path.split("?")[0] == "/metrics":
                    body = metrics.render().encode()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        return server
