"""The real HPA controller scales an OMENative InferenceService's projected replica on a metric the test
feeds: exporter -> the session's Prometheus -> prometheus-adapter (external.metrics.k8s.io through
the aggregation layer) -> kube-controller-manager's HPA controller -> the replica's /scale -> the
replica engine creates (and, highest index first, deletes) Instances. Worker and bridge run as
processes under the chart's identities; kwok makes the pods Ready.

The HPA is the service's (serving.ensure_autoscaler); the service's projection leaves spec.replicas
to it (activities/serving/omenative.py) and mirrors its state into status.components.engine.autoscaler.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from devstack.metrics_adapter import MetricsAdapter
from devstack.process import ManagedProcess
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.instance_keys import INSTANCE_LABEL, REPLICA_LABEL
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.metrics_exporter import Exporter
from tests.support.native_stack import native_stack
from tests.support.replica_stack import Replica

__all__ = ["native_stack"]  # the fixture, reused
pytestmark = pytest.mark.e2e

GROUP, VERSION = "ome.io", "v1beta1"
METRIC = "servingops_test_queue_depth"
SCALE_TIMEOUT = 240.0
"""Upper bound only (never asserted as a timing): adapter relist 2 s, Prometheus scrape 1 s, HPA sync 2 s,
kwok and the engine on a loaded 2-core machine."""


def _feed(exporter: Exporter, ns: str, name: str, value: float) -> None:
    exporter.set({f'{METRIC}{{namespace="{ns}",queue="{name}"}}': value})


def _spec(name: str) -> dict[str, Any]:
    return {"deploymentMode": "OMENative", "engine": {
        "minReplicas": 1, "maxReplicas": 4,
        "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}]},
        "autoscaler": {"class": "HPA", "hpa": {
            # One Instance per unit of queue depth: desired = ceil(value / 1).
            "metrics": [{"type": "External", "external": {
                "metric": {"name": METRIC, "selector": {"matchLabels": {"queue": name}}},
                "target": {"type": "AverageValue", "averageValue": "1"}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}}}}


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


def _ready_instances(api: client.ApiClient, ns: str, replica: str) -> list[str]:
    """Instance indexes whose pod is Ready (live pods only)."""
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"{REPLICA_LABEL}={replica}").items
    ready = []
    for pod in pods:
        if pod.metadata.deletion_timestamp is not None:
            continue
        conditions = {c.type: c.status for c in (pod.status.conditions or [])} if pod.status else {}
        if conditions.get("Ready") == "True":
            ready.append(pod.metadata.labels[INSTANCE_LABEL])
    return sorted(ready, key=int)


def _live_instances(api: client.ApiClient, ns: str, replica: str) -> list[str]:
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"{REPLICA_LABEL}={replica}").items
    return sorted({p.metadata.labels[INSTANCE_LABEL] for p in pods if p.metadata.deletion_timestamp is None}, key=int)


def test_the_real_hpa_scales_the_projected_replica_up_and_down(
        kube_api: client.ApiClient, native_stack: tuple[str, ManagedProcess],
        metrics_adapter: MetricsAdapter, exporter: Exporter) -> None:
    ns, worker = native_stack
    name = f"scaled-{uuid.uuid4().hex[:5]}"
    replica = f"{name}-engine"
    _feed(exporter, ns, name, 1)
    create(kube_api, InferenceService, manifest(InferenceService, _spec(name), name=name), ns)

    hpa = wait_until("the service's HPA", lambda: _get(kube_api, ns, "horizontalpodautoscalers", replica,
                                                  "autoscaling", "v2"), worker)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                             "name": replica}
    assert hpa["metadata"]["ownerReferences"][0]["name"] == name
    wait_until("one Ready Instance", lambda: _ready_instances(kube_api, ns, replica) == ["0"], worker, SCALE_TIMEOUT)
    wait_until("the HPA reads the fed metric", lambda: any(
        c.get("type") == "ScalingActive" and c.get("status") == "True"
        for c in (_get(kube_api, ns, "horizontalpodautoscalers", replica, "autoscaling", "v2").get("status") or {})
        .get("conditions") or []), worker, SCALE_TIMEOUT)

    _feed(exporter, ns, name, 3)
    wait_until("the HPA scales the replica to 3", lambda: (
        _get(kube_api, ns, "inferencereplicas", replica).get("spec") or {}).get("replicas") == 3, worker,
        SCALE_TIMEOUT)
    wait_until("three Ready Instances", lambda: _ready_instances(kube_api, ns, replica) == ["0", "1", "2"], worker,
          SCALE_TIMEOUT)
    # The service's passes (every replica status change wakes it) must not write its minReplicas back.
    assert (_get(kube_api, ns, "inferencereplicas", replica).get("spec") or {}).get("replicas") == 3
    engine = wait_until("status.components.engine.autoscaler mirrors the HPA", lambda: (
        (e := ((_get(kube_api, ns, "inferenceservices", name).get("status") or {}).get("components") or {})
         .get("engine") or {}).get("autoscaler", {}).get("desiredReplicas") == 3 and e), worker, SCALE_TIMEOUT)
    assert (engine["autoscaler"]["class"], engine["autoscaler"]["managedBy"]) == ("HPA", "ome")
    assert {c["type"] for c in engine["autoscaler"]["conditions"]} >= {"AbleToScale", "ScalingActive"}

    _feed(exporter, ns, name, 1)
    wait_until("the HPA scales the replica back to 1", lambda: (
        _get(kube_api, ns, "inferencereplicas", replica).get("spec") or {}).get("replicas") == 1, worker,
        SCALE_TIMEOUT)
    wait_until("the highest indexes went first", lambda: _live_instances(kube_api, ns, replica) == ["0"], worker,
          SCALE_TIMEOUT)
    assert _ready_instances(kube_api, ns, replica) == ["0"]

    # Class KEDA: the worker's ScaledObject passes KEDA's own CRD schema and replaces the HPA (the
    # KEDA operator is not run here, so nothing scales on it).
    keda = {"class": "KEDA", "keda": {"triggers": [{"type": "prometheus", "metadata": {
        "serverAddress": "http://prometheus.monitoring:9090", "query": f'max({METRIC}{{queue="{name}"}})',
        "threshold": "1"}}], "pollingInterval": 5}}
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", name, {"spec": {"engine": {"autoscaler": {**keda, "hpa": None}}}})
    scaled = wait_until("the ScaledObject", lambda: _get(kube_api, ns, "scaledobjects", f"scaledobject-{replica}",
                                                    "keda.sh", "v1alpha1"), worker, SCALE_TIMEOUT)
    assert scaled["spec"]["scaleTargetRef"]["name"] == replica
    assert scaled["spec"]["triggers"] == keda["keda"]["triggers"]
    wait_until("the HPA gone", lambda: not _get(kube_api, ns, "horizontalpodautoscalers", replica, "autoscaling", "v2"),
          worker, SCALE_TIMEOUT)
    wait_until("status says KEDA", lambda: (((_get(kube_api, ns, "inferenceservices", name).get("status") or {})
                                        .get("components") or {}).get("engine") or {}).get("autoscaler", {})
          .get("class") == "KEDA", worker, SCALE_TIMEOUT)
    assert (_get(kube_api, ns, "inferencereplicas", replica).get("spec") or {}).get("autoscaler") == keda


def test_a_users_hpa_scales_a_standalone_replica(
        kube_api: client.ApiClient, native_stack: tuple[str, ManagedProcess],
        metrics_adapter: MetricsAdapter, exporter: Exporter) -> None:
    """Class External on a standalone replica: nothing is rendered (seed: only the InferenceService
    controller creates a scaler); the user's own HPA drives /scale (spec.replicas, status.labelSelector)."""
    ns, worker = native_stack
    name = f"solo-{uuid.uuid4().hex[:5]}"
    _feed(exporter, ns, name, 2)
    replica = Replica(kube_api, ns, worker, name)
    replica.create(replicas=1, autoscaler={"class": "External"})
    wait_until("one Ready Instance", lambda: _ready_instances(kube_api, ns, name) == ["0"], worker, SCALE_TIMEOUT)
    wait_until("the /scale selector published", lambda: replica.status.get("labelSelector"), worker)
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
           "spec": {"scaleTargetRef": {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "name": name},
                    "minReplicas": 1, "maxReplicas": 3,
                    "metrics": [{"type": "External", "external": {
                        "metric": {"name": METRIC, "selector": {"matchLabels": {"queue": name}}},
                        "target": {"type": "AverageValue", "averageValue": "1"}}}],
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}}
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        "autoscaling", "v2", ns, "horizontalpodautoscalers", hpa)
    wait_until("the user's HPA scales the replica to 2", lambda: _ready_instances(kube_api, ns, name) == ["0", "1"],
          worker, SCALE_TIMEOUT)
    assert replica.get()["spec"]["replicas"] == 2
    _feed(exporter, ns, name, 1)
    wait_until("and back to 1, Instance 1 removed", lambda: _live_instances(kube_api, ns, name) == ["0"], worker,
          SCALE_TIMEOUT)
    live = _get(kube_api, ns, "horizontalpodautoscalers", name, "autoscaling", "v2")
    assert not live["metadata"].get("ownerReferences"), "the user's HPA, never adopted"
