"""Metrics an operator scrapes: the worker's on the Temporal SDK's Prometheus endpoint, and the
text exposition helpers the bridge's own endpoint uses.

Why the SDK's endpoint for the worker: a Runtime whose telemetry is `PrometheusConfig(bind_address)`
makes the SDK's core serve `/metrics` with its own runtime metrics (`temporal_*`: task slots,
poll and schedule-to-start latencies, activity and workflow task counts, sticky cache), and every
instrument created on `runtime.metric_meter` appears on that same endpoint. So the worker's own
metrics are instruments of that meter: one port, one exposition (label escaping, HELP/TYPE, the
`_total` suffix done by the SDK), and no second HTTP server or extra package (prometheus_client
is not a dependency). Instruments are process-wide; activities reach them through `worker_metrics()`,
which answers no-op instruments until the worker process installs the real ones, so activities
run unchanged in tests and tools.

Names (docs/metrics.md lists them with their labels):

- servingops_worker_fetched_bytes_total, servingops_worker_pushed_bytes_total: bytes this
  worker moved from model sources and to the registry.
- servingops_worker_transfers_in_flight{activity}: fetch and push activities running here now.
- servingops_worker_activity_failures_total{activity,error_type}: failed activity attempts, by the
  ErrorType they raised (or the exception class of a bug or outage).
- servingops_rollout_parks_total{reason}, servingops_rollout_runs_closed_total{outcome}: counted as
  the status write that records them lands.
- servingops_rollout_runs{phase}, servingops_imports_in_flight: the installation's open rollout runs
  by phase and unfinished model imports, read from Temporal visibility (every worker reports the
  same view: aggregate with max).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable, Mapping

from temporalio.common import MetricCounter, MetricGauge, MetricMeter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

PREFIX = "servingops_"


def resolve_listen(address: str) -> tuple[str, int]:
    """host:port; port 0 picks a free port now (the SDK's server does not say which it bound)."""
    host, port = address.rsplit(":", 1)
    if int(port) == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return host, int(sock.getsockname()[1])
    return host, int(port)


def prometheus_runtime(address: str) -> tuple[Runtime, str]:
    """A Temporal Runtime serving Prometheus `/metrics` on host:port; returns it and the bound address."""
    host, port = resolve_listen(address)
    bound = f"{host}:{port}"
    telemetry = TelemetryConfig(
        # Prometheus conventions: counters end in _total, durations are seconds named _seconds.
        metrics=PrometheusConfig(bind_address=bound, counters_total_suffix=True, durations_as_seconds=True,
                                 unit_suffix=True),
        # Prometheus adds job and instance; "temporal-core-sdk" on every series would say nothing.
        attach_service_name=False,
    )
    return Runtime(telemetry=telemetry), bound


class InFlight:
    """An up/down count behind a gauge (the SDK's gauges are set, not incremented)."""

    def __init__(self, gauge: MetricGauge) -> None:
        self._gauge = gauge
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, label: str, delta: int) -> None:
        with self._lock:
            value = self._counts.get(label, 0) + delta
            self._counts[label] = value
            self._gauge.set(value, {"activity": label})


class WorkerMetrics:
    """The worker's own instruments, created on one meter."""

    def __init__(self, meter: MetricMeter) -> None:
        self.meter = meter
        self.bytes_fetched: MetricCounter = meter.create_counter(
            f"{PREFIX}worker_fetched_bytes", "Bytes this worker fetched from model sources.", "bytes")
        self.bytes_pushed: MetricCounter = meter.create_counter(
            f"{PREFIX}worker_pushed_bytes", "Bytes this worker sent to the OCI registry.", "bytes")
        self.transfers = InFlight(meter.create_gauge(
            f"{PREFIX}worker_transfers_in_flight", "Fetch and push activities running on this worker now."))
        self.activity_failures: MetricCounter = meter.create_counter(
            f"{PREFIX}worker_activity_failures",
            "Failed activity attempts on this worker, by activity and ErrorType (else exception class).")
        self.parks: MetricCounter = meter.create_counter(
            f"{PREFIX}rollout_parks", "Rollout groups parked, by reason, counted when the status write lands.")
        self.runs_closed: MetricCounter = meter.create_counter(
            f"{PREFIX}rollout_runs_closed", "Rollout runs closed, by outcome, counted when the status write lands.")
        self.runs_by_phase: MetricGauge = meter.create_gauge(
            f"{PREFIX}rollout_runs", "Open rollout runs of this installation by phase (Temporal visibility).")
        self.imports_in_flight: MetricGauge = meter.create_gauge(
            f"{PREFIX}imports_in_flight", "Model imports of this installation not yet finished (Temporal visibility).")

    def failure(self, activity: str, error_type: str) -> None:
        self.activity_failures.add(1, {"activity": activity, "error_type": error_type})


_current = WorkerMetrics(MetricMeter.noop)


def worker_metrics() -> WorkerMetrics:
    """The process's worker instruments (no-op until `install_worker_metrics`)."""
    return _current


def install_worker_metrics(meter: MetricMeter) -> WorkerMetrics:
    global _current
    _current = WorkerMetrics(meter)
    return _current


# -- text exposition, for endpoints of our own (the bridge) ----------------------------------------


def escape_label(value: str) -> str:
    """A label value as the text format wants it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample(name: str, value: float | int, labels: Mapping[str, str] | None = None) -> str:
    if not labels:
        return f"{name} {value}"
    inner = ",".join(f'{key}="{escape_label(str(val))}"' for key, val in labels.items())
    return f"{name}{{{inner}}} {value}"


def family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> list[str]:
    """HELP and TYPE lines followed by the family's samples."""
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
