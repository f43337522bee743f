"""Metrics an operator scrapes, end to end: the worker and the bridge as their own processes, the
session's real Prometheus scraping both, and every assertion made through Prometheus's HTTP API
(what a dashboard or an alert would read), after a model import that succeeds and one that fails."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess, free_port
from devstack.product import BridgeLauncher, BridgeProcess, start_worker
from devstack.services import OciRegistry, Prometheus, TemporalDevServer
from testkit.model_import import GROUP, VERSION
from tests.fixtures.hub import HubRepos

pytestmark = pytest.mark.e2e

DEADLINE = 120.0
"""Generous upper bound for Prometheus to scrape what happened (scrapes every second)."""


@dataclass
class Scraped:
    prometheus: Prometheus
    api: client.ApiClient
    worker: ManagedProcess
    bridge: BridgeProcess
    namespace: str

    def value(self, promql: str) -> float | None:
        result = self.prometheus.query(promql)
        return sum(float(series["value"][1]) for series in result) if result else None

    def eventually(self, promql: str, holds: Callable[[float | None], bool]) -> float | None:
        end = time.monotonic() + DEADLINE
        seen = self.value(promql)
        while not holds(seen):
            assert time.monotonic() < end, f"{promql} = {seen}\nworker log:\n{self.worker.log_tail(30)}"
            time.sleep(0.5)
            seen = self.value(promql)
        return seen

    def model(self, name: str, url: str) -> dict[str, Any]:
        custom = client.CustomObjectsApi(self.api)
        custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "models", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": name},
            "spec": {"source": {"url": url}}})
        end = time.monotonic() + DEADLINE
        while True:
            obj: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "models", name)
            if (obj.get("status") or {}).get("phase") in ("Ready", "Failed"):
                return obj
            assert time.monotonic() < end, f"{name}: {obj.get('status')}\n{self.worker.log_tail(30)}"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def scraped(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
            oci_registry: OciRegistry, hub_server: HubServer, prometheus: Prometheus, stack_logs: Path,
            chart_identities: Identities, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    task_queue = f"metrics-{uuid.uuid4().hex[:6]}"
    namespace = f"metrics-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(kube_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    worker_metrics = f"127.0.0.1:{free_port()}"
    worker = start_worker(kube_cluster, temporal_server, oci_registry, hub_server, task_queue,
                          tmp_path_factory.mktemp("spool"), stack_logs, host_id=f"host-{task_queue}",
                          extra_env={"SERVINGOPS_WORKER_METRICS": worker_metrics,
                                     "SERVINGOPS_METRICS_POLL_SECONDS": "1"},
                          identities=chart_identities)
    launcher = BridgeLauncher(chart_identities, temporal_server.address, stack_logs)
    bridge = launcher.start(task_queue=task_queue, kinds="Model")
    # What `./dev up` configures too: one target group per process, labelled with its component.
    prometheus.set_target_groups([([worker_metrics], {"component": "worker"}),
                                  ([f"127.0.0.1:{bridge.metrics_port}"], {"component": "bridge"})])
    try:
        yield Scraped(prometheus, kube_api, worker, bridge, namespace)
    finally:
        prometheus.set_targets([])
        launcher.stop_all()
        worker.stop()


def test_prometheus_scrapes_worker_and_bridge(scraped: Scraped, hub_repos: HubRepos) -> None:
    for component in ("worker", "bridge"):
        scraped.eventually(f'up{{component="{component}"}}', lambda v: v == 1)
    scraped.eventually('servingops_bridge_leader{component="bridge"}', lambda v: v == 1)
    # The Temporal SDK's runtime metrics, from the worker's endpoint.
    scraped.eventually('temporal_worker_task_slots_available{component="worker"}', lambda v: v is not None and v > 0)

    repo = hub_repos.safetensors(num_shards=2)
    ready = scraped.model("good", f"https://huggingface.co/{repo.repo_id}")
    assert ready["status"]["phase"] == "Ready", ready["status"]
    failed = scraped.model("missing", f"https://huggingface.co/devstack/absent-{uuid.uuid4().hex[:6]}")
    assert failed["status"]["phase"] == "Failed", failed["status"]
    reason = next(c["reason"] for c in failed["status"]["conditions"] if c["type"] == "Ready")

    weights = sum((repo.snapshot / f).stat().st_size for f in repo.files if f.endswith(".safetensors"))
    fetched = scraped.eventually('sum(servingops_worker_fetched_bytes_total{component="worker"})',
                                 lambda v: v is not None and v > 0)
    pushed = scraped.eventually('sum(servingops_worker_pushed_bytes_total{component="worker"})',
                                lambda v: v is not None and v >= weights)
    print(f"\nfetched {fetched}, pushed {pushed} bytes ({weights} weight bytes)")
    # The failed import's error type, as the Model's condition reason says it.
    scraped.eventually(f'sum(servingops_worker_activity_failures_total{{component="worker",error_type="{reason}"}})',
                       lambda v: v is not None and v >= 1)
    scraped.eventually('temporal_activity_execution_latency_seconds_count{component="worker"}',
                       lambda v: v is not None and v > 0)
    # The state gauges: both imports are finished, no rollout run is open in this installation.
    scraped.eventually('servingops_imports_in_flight{component="worker"}', lambda v: v == 0)
    scraped.eventually('sum(servingops_rollout_runs{component="worker"})', lambda v: v == 0)
    scraped.eventually('servingops_rollout_runs{component="worker",phase="Paused"}', lambda v: v == 0)
    # The bridge turned both objects into workflow starts.
    scraped.eventually('sum(servingops_bridge_signals_sent_total{component="bridge",workflow_type="ModelWorkflow"})',
                       lambda v: v is not None and v >= 2)
