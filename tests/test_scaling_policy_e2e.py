"""spec.scalingPolicy end to end: an OMENative engine+decoder InferenceService whose engine the REAL HPA
controller scales on a metric the test feeds (exporter -> the session's Prometheus -> prometheus-adapter
(external.metrics.k8s.io) -> kube-controller-manager's HPA controller -> the engine replica's /scale), and
whose decoder has no scaler of its own: the service's workflow (worker and bridge as processes, under the
chart's identities) derives the decoder's count from the engine's, ratio 0.5 rounded up. Engine 1 -> 4
makes the decoder 1 -> 2; back to 1, the decoder follows to 1.

OMENative is the mode used: the HPA's write to the engine replica's /scale reaches the service as an event
(the replica's status moves, the bridge signals replica-changed), where a RawDeployment anchor is only
seen at the service's coordination poll. The counts and seconds are printed, never asserted as targets.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kubernetes import client

from devstack.metrics_adapter import MetricsAdapter
from devstack.process import ManagedProcess
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.instance_keys import REPLICA_LABEL
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.metrics_exporter import Exporter
from tests.support.native_stack import native_stack

__all__ = ["native_stack"]  # the fixture, reused
pytestmark = pytest.mark.e2e

GROUP, VERSION = "ome.io", "v1beta1"
METRIC = "servingops_test_queue_depth"
TIMEOUT = 300.0
"""Upper bound only: adapter relist, Prometheus scrape, HPA sync, kwok and the engine on 2 busy cores."""


def _runner(name: str) -> dict[str, Any]:
    return {"name": name, "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}]}


def _spec(name: str) -> dict[str, Any]:
    return {
        "deploymentMode": "OMENative",
        "engine": {"minReplicas": 1, "maxReplicas": 4, "runner": _runner("engine"), "autoscaler": {
            "class": "HPA", "hpa": {
                # One engine per unit of queue depth: desired = ceil(value / 1).
                "metrics": [{"type": "External", "external": {
                    "metric": {"name": METRIC, "selector": {"matchLabels": {"queue": name}}},
                    "target": {"type": "AverageValue", "averageValue": "1"}}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}}},
        "decoder": {"minReplicas": 1, "maxReplicas": 4, "runner": _runner("decoder")},
        "scalingPolicy": {"mode": "Proportional", "proportional": {"anchor": "engine", "ratios": {"decoder": "0.5"}}},
    }


def _get(api: client.ApiClient, ns: str, plural: str, name: str, group: str = GROUP,
         version: str = VERSION) -> dict[str, Any]:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, ns, plural, name)
        return found
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return {}
        raise


def _ready(api: client.ApiClient, ns: str, replica: str) -> int:
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"{REPLICA_LABEL}={replica}").items
    return sum(1 for p in pods if p.metadata.deletion_timestamp is None and p.status is not None
               and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []))


def _condition(api: client.ApiClient, ns: str, name: str, kind: str) -> dict[str, Any]:
    conditions = (_get(api, ns, "inferenceservices", name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


class Counts:
    """(engine, decoder) counts as `read` gives them, with every change kept and when it was seen (printed)."""

    def __init__(self, read: Any) -> None:
        self.read = read
        self.seen: list[tuple[float, int, int]] = []
        self.start = time.monotonic()

    def __call__(self) -> tuple[int, int]:
        e, d = self.read()
        if not self.seen or self.seen[-1][1:] != (e, d):
            self.seen.append((round(time.monotonic() - self.start, 1), e, d))
        return int(e), int(d)


def _replica_counts(api: client.ApiClient, ns: str, engine: str, decoder: str) -> Counts:
    """The engine and decoder InferenceReplicas' spec.replicas."""
    return Counts(lambda: tuple((_get(api, ns, "inferencereplicas", name).get("spec") or {}).get("replicas") or 0
                                for name in (engine, decoder)))


def _feeder(exporter: Exporter, ns: str, name: str) -> Any:
    """Sets the metric the engine's HPA scales on, for this service's queue."""
    return lambda value: exporter.set({f'{METRIC}{{namespace="{ns}",queue="{name}"}}': value})


def test_the_decoder_follows_the_engine_the_real_hpa_scales(
        kube_api: client.ApiClient, native_stack: tuple[str, ManagedProcess],
        metrics_adapter: MetricsAdapter, exporter: Exporter) -> None:
    ns, worker = native_stack
    name = f"pd-{uuid.uuid4().hex[:5]}"
    engine, decoder = f"{name}-engine", f"{name}-decoder"
    counts = _replica_counts(kube_api, ns, engine, decoder)
    seen = counts.seen
    feed = _feeder(exporter, ns, name)

    feed(1)
    create(kube_api, InferenceService, manifest(InferenceService, _spec(name), name=name), ns)
    wait_until("the engine's HPA", lambda: _get(kube_api, ns, "horizontalpodautoscalers", engine, "autoscaling", "v2"),
               worker)
    wait_until("one Ready engine and one Ready decoder", lambda: (
        _ready(kube_api, ns, engine), _ready(kube_api, ns, decoder)) == (1, 1), worker, TIMEOUT)
    wait_until("the HPA reads the fed metric", lambda: any(
        c.get("type") == "ScalingActive" and c.get("status") == "True"
        for c in (_get(kube_api, ns, "horizontalpodautoscalers", engine, "autoscaling", "v2").get("status") or {})
        .get("conditions") or []), worker, TIMEOUT)
    assert counts() == (1, 1)
    assert not _get(kube_api, ns, "horizontalpodautoscalers", decoder, "autoscaling", "v2"), \
        "a follower gets no scaler of its own"

    fed = time.monotonic()
    feed(4)
    wait_until("the HPA scales the engine to 4", lambda: counts()[0] == 4, worker, TIMEOUT)
    engine_up = time.monotonic() - fed
    wait_until("the decoder follows to 2 = ceil(4 x 0.5)", lambda: counts() == (4, 2), worker, TIMEOUT)
    decoder_up = time.monotonic() - fed
    wait_until("4 Ready engines and 2 Ready decoders", lambda: (
        _ready(kube_api, ns, engine), _ready(kube_api, ns, decoder)) == (4, 2), worker, TIMEOUT)
    ready_up = time.monotonic() - fed
    coordinated = wait_until("ScalingCoordinated says so", lambda: (
        c := _condition(kube_api, ns, name, "ScalingCoordinated")).get("message", "").startswith("engine 4") and c,
        worker, TIMEOUT)
    assert (coordinated["status"], coordinated["reason"]) == ("True", "Proportional")
    assert coordinated["message"] == "engine 4 (anchor); decoder 2 (x 1/2)"

    fed = time.monotonic()
    feed(1)
    wait_until("the HPA scales the engine back to 1", lambda: counts()[0] == 1, worker, TIMEOUT)
    engine_down = time.monotonic() - fed
    wait_until("the decoder follows back to 1", lambda: counts() == (1, 1), worker, TIMEOUT)
    decoder_down = time.monotonic() - fed
    wait_until("1 Ready engine and 1 Ready decoder, the others gone", lambda: (
        _ready(kube_api, ns, engine), _ready(kube_api, ns, decoder)) == (1, 1), worker, TIMEOUT)

    events = client.CoreV1Api(kube_api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name},reason=FollowerScaled").items
    messages = sorted({e.message or "" for e in events})
    assert any(m.startswith("decoder 1 -> 2 replicas") for m in messages), messages
    assert any(m.startswith("decoder 2 -> 1 replicas") for m in messages), messages
    assert not _get(kube_api, ns, "horizontalpodautoscalers", decoder, "autoscaling", "v2")
    status = _get(kube_api, ns, "inferenceservices", name).get("status") or {}
    assert ((status.get("components") or {}).get("decoder") or {}).get("autoscaler", {}).get("managedBy") == "none"
    print(f"\nscalingPolicy e2e (engine, decoder) spec.replicas over time [s]: {seen}")
    print(f"up:   engine 1->4 {engine_up:.1f} s after the feed, decoder 1->2 {decoder_up:.1f} s, "
          f"all Ready {ready_up:.1f} s")
    print(f"down: engine 4->1 {engine_down:.1f} s after the feed, decoder 2->1 {decoder_down:.1f} s")
    print(f"FollowerScaled Events: {messages}")


def _deployment_replicas(api: client.ApiClient, ns: str, prefix: str) -> int:
    """spec.replicas summed over the component's revision Deployments (`<isvc>-<component>-rev-<hash>`)."""
    items = client.AppsV1Api(api).list_namespaced_deployment(ns).items
    return sum(d.spec.replicas or 0 for d in items if d.metadata.name.startswith(prefix)
               and d.metadata.deletion_timestamp is None)


def test_a_raw_deployment_decoder_follows_the_engine_the_real_hpa_scales(
        kube_api: client.ApiClient, native_stack: tuple[str, ManagedProcess],
        metrics_adapter: MetricsAdapter, exporter: Exporter) -> None:
    """The RawDeployment path: the HPA scales the engine's revision Deployment (no event of the service), the
    service's coordination poll (10 s) finds it and writes the decoder's Deployment."""
    ns, worker = native_stack
    name = f"pdr-{uuid.uuid4().hex[:5]}"
    spec = {**_spec(name), "deploymentMode": "RawDeployment"}
    engine, decoder = f"{name}-engine-rev-", f"{name}-decoder-rev-"
    counts = Counts(lambda: (_deployment_replicas(kube_api, ns, engine), _deployment_replicas(kube_api, ns, decoder)))
    seen = counts.seen
    feed = _feeder(exporter, ns, name)

    feed(1)
    create(kube_api, InferenceService, manifest(InferenceService, spec, name=name), ns)
    hpa = f"{name}-engine"
    wait_until("the engine's HPA on its revision Deployment", lambda: (
        (_get(kube_api, ns, "horizontalpodautoscalers", hpa, "autoscaling", "v2").get("spec") or {})
        .get("scaleTargetRef", {}).get("kind") == "Deployment"), worker, TIMEOUT)
    wait_until("the HPA reads the fed metric", lambda: any(
        c.get("type") == "ScalingActive" and c.get("status") == "True"
        for c in (_get(kube_api, ns, "horizontalpodautoscalers", hpa, "autoscaling", "v2").get("status") or {})
        .get("conditions") or []), worker, TIMEOUT)
    wait_until("engine 1, decoder 1", lambda: counts() == (1, 1), worker, TIMEOUT)

    fed = time.monotonic()
    feed(4)
    wait_until("the HPA scales the engine's Deployment to 4", lambda: counts()[0] == 4, worker, TIMEOUT)
    engine_up = time.monotonic() - fed
    wait_until("the decoder's Deployment follows to 2", lambda: counts() == (4, 2), worker, TIMEOUT)
    decoder_up = time.monotonic() - fed
    fed = time.monotonic()
    feed(1)
    wait_until("the HPA scales the engine back to 1", lambda: counts()[0] == 1, worker, TIMEOUT)
    engine_down = time.monotonic() - fed
    wait_until("the decoder follows back to 1", lambda: counts() == (1, 1), worker, TIMEOUT)
    decoder_down = time.monotonic() - fed
    coordinated = _condition(kube_api, ns, name, "ScalingCoordinated")
    assert (coordinated.get("status"), coordinated.get("reason")) == ("True", "Proportional")
    assert not _get(kube_api, ns, "horizontalpodautoscalers", f"{name}-decoder", "autoscaling", "v2")
    print(f"\nRawDeployment scalingPolicy e2e (engine, decoder) Deployment replicas over time [s]: {seen}")
    print(f"up: engine {engine_up:.1f} s, decoder {decoder_up:.1f} s; "
          f"down: engine {engine_down:.1f} s, decoder {decoder_down:.1f} s")


def test_pinned_holds_the_decoder_at_the_engines_count_the_real_hpa_scales(
        kube_api: client.ApiClient, native_stack: tuple[str, ManagedProcess],
        metrics_adapter: MetricsAdapter, exporter: Exporter) -> None:
    """Pinned: the decoder runs exactly the engine's count (no ratio, no rounding); engine 1 -> 3 -> 1 under the
    real HPA, the decoder 1 -> 3 -> 1 with it."""
    ns, worker = native_stack
    name = f"pp-{uuid.uuid4().hex[:5]}"
    spec = {**_spec(name), "scalingPolicy": {"mode": "Pinned"}}
    engine, decoder = f"{name}-engine", f"{name}-decoder"
    counts = _replica_counts(kube_api, ns, engine, decoder)
    seen = counts.seen
    feed = _feeder(exporter, ns, name)

    feed(1)
    create(kube_api, InferenceService, manifest(InferenceService, spec, name=name), ns)
    wait_until("the HPA reads the fed metric", lambda: any(
        c.get("type") == "ScalingActive" and c.get("status") == "True"
        for c in (_get(kube_api, ns, "horizontalpodautoscalers", engine, "autoscaling", "v2").get("status") or {})
        .get("conditions") or []), worker, TIMEOUT)
    wait_until("engine 1, decoder 1", lambda: counts() == (1, 1), worker, TIMEOUT)

    feed(3)
    wait_until("the decoder pinned to the engine's 3", lambda: counts() == (3, 3), worker, TIMEOUT)
    wait_until("3 Ready engines and 3 Ready decoders", lambda: (
        _ready(kube_api, ns, engine), _ready(kube_api, ns, decoder)) == (3, 3), worker, TIMEOUT)
    coordinated = wait_until("ScalingCoordinated says so", lambda: (
        c := _condition(kube_api, ns, name, "ScalingCoordinated")).get("message", "").startswith("engine 3") and c,
        worker, TIMEOUT)
    assert (coordinated["status"], coordinated["reason"]) == ("True", "Pinned")
    feed(1)
    wait_until("both back to 1", lambda: counts() == (1, 1), worker, TIMEOUT)
    assert not _get(kube_api, ns, "horizontalpodautoscalers", decoder, "autoscaling", "v2")
    print(f"\nPinned e2e (engine, decoder) spec.replicas over time [s]: {seen}; condition: {coordinated['message']}")
