"""A ScaledObject really scales: KEDA's operator and metrics adapter (devstack/keda.py, built from KEDA's Go
module) scale a Deployment of answering pods on a Prometheus trigger over the pods' own vLLM request metric.

The chain, all real: load through Traefik (the stack's Gateway) -> pods answered by the stack's pod runtime,
each exporting `vllm:request_success_total` -> the session's Prometheus scrapes them every second -> KEDA's
operator runs the trigger's query -> its adapter serves the value on external.metrics.k8s.io -> kube-
controller-manager's HPA controller (sync every 2 s) scales the Deployment through KEDA's HPA -> the
scheduler, kwok and the pod runtime start the pods and say when they are Ready.

The query is the request rate the Deployment's pods answer (per second, over 10 s); the target is
THRESHOLD per replica (the trigger's AverageValue), so RATE requests per second ask for RATE / THRESHOLD
replicas. Scale-down: with minReplicaCount 1 the HPA brings the Deployment back to 1 once the rate has
fallen, after its behavior's scale-down stabilization window (KEDA's cooldownPeriod governs only the step
from 1 to 0, which minReplicaCount 1 never takes; it is set short anyway).

The seconds measured are printed (run with -s to see them); the bounds asserted are generous upper limits
for a loaded 2-core machine, not targets.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from devstack.kube import apply_objects
from devstack.traefik import GATEWAY_API, GATEWAY_NAME, GATEWAY_NAMESPACE
from testkit.load import BackgroundLoad, LoadSpec
from testkit.waiting import wait_until
from tests.fixtures.keda import KedaStack

pytestmark = pytest.mark.integration

POD_PORT = 8080
RATE = 24.0
"""Requests per second sent during the load: RATE / THRESHOLD = 4 replicas wanted (maxReplicaCount)."""
THRESHOLD = 6
MAX_REPLICAS = 4
LOAD_SECONDS = 240.0
"""The load's own bound; the test stops it once the scale-up is measured."""
SCALE_TIMEOUT = 180.0
POLL = 0.2


def _objects(namespace: str, name: str, host: str, prometheus_url: str) -> list[dict[str, Any]]:
    labels = {"app": name, "ome.io/inferenceservice": name}
    group, version = GATEWAY_API
    query = f'sum(rate(vllm:request_success_total{{namespace="{namespace}",inferenceservice="{name}"}}[10s]))'
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                      "args": ["--served-model-name", name],
                                      "ports": [{"containerPort": POD_PORT}]}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
         "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": POD_PORT}]}},
        {"apiVersion": f"{group}/{version}", "kind": "HTTPRoute", "metadata": {"name": name, "namespace": namespace},
         "spec": {"parentRefs": [{"group": group, "kind": "Gateway", "namespace": GATEWAY_NAMESPACE,
                                  "name": GATEWAY_NAME}],
                  "hostnames": [host], "rules": [{"backendRefs": [{"name": name, "port": 80}]}]}},
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": name, "namespace": namespace},
         "spec": {
             "scaleTargetRef": {"name": name},
             "pollingInterval": 1,
             "cooldownPeriod": 5,
             "minReplicaCount": 1,
             "maxReplicaCount": MAX_REPLICAS,
             "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                 "scaleUp": {"stabilizationWindowSeconds": 0,
                             "policies": [{"type": "Pods", "value": MAX_REPLICAS, "periodSeconds": 1}]},
                 "scaleDown": {"stabilizationWindowSeconds": 5,
                               "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}]}}}},
             "triggers": [{"type": "prometheus", "metadata": {
                 "serverAddress": prometheus_url, "query": query, "threshold": str(THRESHOLD)}}]}},
    ]  # fmt: skip


@dataclass(frozen=True)
class _Sample:
    at: float
    """Seconds since the watch started (the load's start)."""
    replicas: int
    """The Deployment's spec.replicas: what the HPA decided."""
    ready: int
    live: int
    """Pods of the Deployment not being deleted."""


class _Watch:
    """The Deployment and its pods sampled every POLL s in a thread of its own, so each moment is timed by
    the first sample that shows it, whatever the test waits for meanwhile."""

    def __init__(self, stack: KedaStack, namespace: str, name: str) -> None:
        self.api = stack.cluster.api_client()
        self.namespace, self.name = namespace, name
        self.samples: list[_Sample] = []
        self.origin = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="keda-watch", daemon=True)

    def start(self) -> _Watch:
        self.origin = time.monotonic()
        self._thread.start()
        return self

    def now(self) -> float:
        return time.monotonic() - self.origin

    def _run(self) -> None:
        apps, core = client.AppsV1Api(self.api), client.CoreV1Api(self.api)
        while not self._stop.is_set():
            deployment = apps.read_namespaced_deployment(self.name, self.namespace)
            pods = core.list_namespaced_pod(self.namespace, label_selector=f"app={self.name}").items
            self.samples.append(_Sample(
                self.now(), deployment.spec.replicas or 0,
                (deployment.status.ready_replicas or 0) if deployment.status else 0,
                sum(1 for p in pods if p.metadata is not None and p.metadata.deletion_timestamp is None)))
            self._stop.wait(POLL)

    @property
    def latest(self) -> _Sample | None:
        return self.samples[-1] if self.samples else None

    def first(self, predicate: Callable[[_Sample], bool], after: float = 0.0) -> float:
        return next(sample.at for sample in self.samples if sample.at >= after and predicate(sample))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.api.close()  # type: ignore[no-untyped-call]


def _deployment(api: client.ApiClient, namespace: str, name: str) -> tuple[int, int]:
    """(spec.replicas, status.readyReplicas)."""
    found = client.AppsV1Api(api).read_namespaced_deployment(name, namespace)
    return found.spec.replicas or 0, (found.status.ready_replicas or 0) if found.status else 0


def _scaled_object(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(  # type: ignore[assignment]
        "keda.sh", "v1alpha1", namespace, "scaledobjects", name)
    return found


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    return next((c.get("status") for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind),
                None)


def test_a_scaled_object_scales_on_the_pods_request_rate_and_back(keda_stack: KedaStack) -> None:
    stack = keda_stack
    api = stack.cluster.api_client()
    namespace, name = f"keda-{uuid.uuid4().hex[:5]}", "chat"
    host = f"{name}.{namespace}.example.com"
    try:
        apply_objects(api, _objects(namespace, name, host, stack.prometheus.url))
        wait_until("one Ready pod", lambda: _deployment(api, namespace, name) == (1, 1), stack.keda.operator,
                   SCALE_TIMEOUT)
        wait_until("the Gateway answers for the Deployment", lambda: stack.traefik.get("/v1/models", host)[0] == 200,
                   stack.keda.operator, SCALE_TIMEOUT)
        hpa_name = str(wait_until("the ScaledObject Ready, its HPA made", lambda: (
            _condition(found := _scaled_object(api, namespace, name), "Ready") == "True"
            and (found.get("status") or {}).get("hpaName")), stack.keda.operator, SCALE_TIMEOUT))
        hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(hpa_name, namespace)
        assert [metric.type for metric in hpa.spec.metrics or []] == ["External"]
        assert hpa.spec.scale_target_ref.name == name

        load = BackgroundLoad(LoadSpec(url=stack.traefik.url, host=host, rate=RATE, max_seconds=LOAD_SECONDS,
                                       max_requests=int(RATE * LOAD_SECONDS), max_tokens=4, model=name))
        watch = _Watch(stack, namespace, name)
        load.start()
        watch.start()
        try:
            try:
                wait_until(f"{MAX_REPLICAS} Ready pods", lambda: (sample := watch.latest) is not None
                           and (sample.replicas, sample.ready) == (MAX_REPLICAS, MAX_REPLICAS),
                           stack.keda.operator, SCALE_TIMEOUT, interval=POLL)
                assert _condition(_scaled_object(api, namespace, name), "Active") == "True"
            finally:
                report = load.stop()
            stopped = watch.now()
            wait_until("back to one pod", lambda: (sample := watch.latest) is not None and sample.at > stopped
                       and (sample.replicas, sample.live) == (1, 1), stack.keda.operator, SCALE_TIMEOUT, interval=POLL)
        finally:
            watch.stop()
        decided = watch.first(lambda s: s.replicas > 1)
        first_step = next(s.replicas for s in watch.samples if s.replicas > 1)
        wanted = watch.first(lambda s: s.replicas == MAX_REPLICAS)
        ready = watch.first(lambda s: s.ready == MAX_REPLICAS)
        down_begins = watch.first(lambda s: s.replicas < MAX_REPLICAS, after=stopped) - stopped
        down_decided = watch.first(lambda s: s.replicas == 1, after=stopped) - stopped
        down_done = watch.first(lambda s: s.live == 1 and s.replicas == 1, after=stopped) - stopped
        print(f"\nKEDA {RATE:.0f} req/s, threshold {THRESHOLD}/replica, sampled every {POLL} s: from the load's start, "
              f"first scale-up decided {decided:.1f} s (to {first_step}), {MAX_REPLICAS} wanted {wanted:.1f} s, "
              f"{MAX_REPLICAS} Ready {ready:.1f} s; from the load's stop ({stopped:.1f} s), scale-down begins "
              f"{down_begins:.1f} s, back to 1 decided {down_decided:.1f} s, one pod left {down_done:.1f} s; "
              f"load: {report.total} requests, {report.failed} failed, {report.achieved_rate:.1f} req/s; "
              f"answered by pod {sorted(report.by_pod.values(), reverse=True)}")
        assert report.failed <= 0.01 * report.total, report.failed
    finally:
        client.CoreV1Api(api).delete_namespace(namespace)
        api.close()  # type: ignore[no-untyped-call]
