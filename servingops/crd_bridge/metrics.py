"""The bridge's own metrics, served in the Prometheus text format on /metrics."""

from __future__ import annotations

import bisect
import http.server
import threading
from collections import Counter

from servingops.runtime.metrics import family, sample

# Histogram buckets for event-to-signal lag, in seconds.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class BridgeMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events_seen: Counter[tuple[str, str]] = Counter()
        self.signals_sent: Counter[tuple[str, str]] = Counter()
        self.workflows_started: Counter[str] = Counter()
        self.dispatch_errors: Counter[str] = Counter()
        self.warnings: Counter[str] = Counter()
        self.wakes_coalesced: Counter[str] = Counter()
        self.wakes_dropped: Counter[str] = Counter()
        """By lane (crd_bridge/pod_signals.py): pods, scalers."""
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

    def started(self, workflow_type: str) -> None:
        """A dispatch that the server answered by starting a run (not by signalling a running one)."""
        with self._lock:
            self.workflows_started[workflow_type] += 1

    def error(self, kind: str) -> None:
        with self._lock:
            self.dispatch_errors[kind] += 1

    def warning(self, reason: str) -> None:
        with self._lock:
            self.warnings[reason] += 1

    def wake_coalesced(self, lane: str) -> None:
        """A change that joined a wake-up signal already pending for its workflow."""
        with self._lock:
            self.wakes_coalesced[lane] += 1

    def wake_dropped(self, lane: str) -> None:
        """A wake-up signal not sent: the workflow is not running."""
        with self._lock:
            self.wakes_dropped[lane] += 1

    def render(self) -> str:
        """The text exposition format; label values are escaped (kinds and reasons are ours, but
        an error label carries whatever exception class a dispatch raised)."""
        with self._lock:
            lines = family("servingops_bridge_events_seen_total", "counter",
                           "Watch events received, by kind and event type.",
                           [sample("servingops_bridge_events_seen_total", n, {"kind": k, "type": t})
                            for (k, t), n in sorted(self.events_seen.items())])
            lines += family("servingops_bridge_signals_sent_total", "counter",
                            "Signals (and signal-with-starts) sent to workflows, by workflow type and signal.",
                            [sample("servingops_bridge_signals_sent_total", n, {"workflow_type": w, "signal": g})
                             for (w, g), n in sorted(self.signals_sent.items())])
            lines += family("servingops_bridge_workflows_started_total", "counter",
                            "Workflow runs the bridge's dispatches started, by workflow type (the rest "
                            "reached a running workflow).",
                            [sample("servingops_bridge_workflows_started_total", n, {"workflow_type": w})
                             for w, n in sorted(self.workflows_started.items())])
            lines += family("servingops_bridge_dispatch_errors_total", "counter",
                            "Dispatches that failed, by error.",
                            [sample("servingops_bridge_dispatch_errors_total", n, {"error": e})
                             for e, n in sorted(self.dispatch_errors.items())])
            lines += family("servingops_bridge_warning_events_total", "counter",
                            "Warning Events the bridge recorded on objects, by reason.",
                            [sample("servingops_bridge_warning_events_total", n, {"reason": r})
                             for r, n in sorted(self.warnings.items())])
            lines += family("servingops_bridge_pod_signals_coalesced_total", "counter",
                            "Pod changes merged into a pods-changed signal already pending for their replica "
                            "(the signals sent are in servingops_bridge_signals_sent_total).",
                            [sample("servingops_bridge_pod_signals_coalesced_total", self.wakes_coalesced["pods"])])
            lines += family("servingops_bridge_pod_signals_dropped_total", "counter",
                            "Pods-changed signals dropped because the replica has no running workflow.",
                            [sample("servingops_bridge_pod_signals_dropped_total", self.wakes_dropped["pods"])])
            lines += family("servingops_bridge_scaler_signals_coalesced_total", "counter",
                            "HPA changes merged into a replica-changed signal already pending for their service.",
                            [sample("servingops_bridge_scaler_signals_coalesced_total",
                                    self.wakes_coalesced["scalers"])])
            lines += family("servingops_bridge_scaler_signals_dropped_total", "counter",
                            "Replica-changed signals for an HPA's change dropped because the service has no "
                            "running workflow.",
                            [sample("servingops_bridge_scaler_signals_dropped_total", self.wakes_dropped["scalers"])])
            buckets = []
            cumulative = 0
            for bound, count in zip((*LAG_BUCKETS, float("inf")), self.lag_counts, strict=True):
                cumulative += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                buckets.append(sample("servingops_bridge_signal_lag_seconds_bucket", cumulative, {"le": le}))
            buckets.append(sample("servingops_bridge_signal_lag_seconds_sum", self.lag_sum))
            buckets.append(sample("servingops_bridge_signal_lag_seconds_count", cumulative))
            lines += family("servingops_bridge_signal_lag_seconds", "histogram",
                            "Seconds from a watch event to its signal.", buckets)
            lines += family("servingops_bridge_queue_depth", "gauge", "Objects waiting to be dispatched.",
                            [sample("servingops_bridge_queue_depth", self.queue_depth)])
            # The help text must not read like a sample: tests and probes look for "..._leader 1".
            lines += family("servingops_bridge_leader", "gauge",
                            "Whether this bridge holds the lease (1 when it does, else 0).",
                            [sample("servingops_bridge_leader", self.is_leader)])
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
