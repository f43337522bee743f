"""A multi-node (leader + workers) OMENative InferenceService end to end: worker and bridge as
processes (the fixture of tests/test_omenative_service_e2e.py), kwok playing the kubelets.

The engine's `leader` / `worker` project onto the replica `<isvc>-engine` as runners `leader` (1) and
`worker` (worker.size): each Instance is one gang, named and labelled by the replica engine, the
workers told their leader's address. Only leaders carry the revision label, so a revision's Service
has one endpoint per gang; an Instance counts as ready once its whole gang is. A lost worker
recreates its gang; a canary moves whole gangs through the replica's pacing
(rendering/multinode.py, omenative.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from devstack.process import ManagedProcess
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome import instance_keys as keys
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.support.native_stack import native_endpoints, native_replica, native_stack
from tests.support.rollout_stack import route_weights

pytestmark = pytest.mark.e2e

GROUP, VERSION = "ome.io", "v1beta1"
WORKERS = 2
__all__ = ["native_stack"]  # the module-scoped stack fixture, shared by import


def _engine(worker_image: str) -> dict[str, Any]:
    return {"minReplicas": 2,
            "leader": {"runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                  "ports": [{"containerPort": 8000}]}},
            "worker": {"size": WORKERS, "runner": {"name": "engine", "image": worker_image}}}


def _spec(worker_image: str) -> dict[str, Any]:
    return {"deploymentMode": "OMENative", "engine": _engine(worker_image),
            "rollout": {"groups": [{"components": ["engine"], "canary": {
                "steps": [{"capacity": "50%", "traffic": 50, "pause": {}}, {"capacity": "100%", "traffic": 100}],
                "scaleDownDelaySeconds": 1}}]}}


def _pods(api: client.ApiClient, ns: str, name: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"{keys.REPLICA_LABEL}={name}-engine").items
    return sorted((p for p in pods if p.metadata.deletion_timestamp is None), key=lambda p: p.metadata.name)


def _gangs(api: client.ApiClient, ns: str, name: str) -> dict[str, list[tuple[str, str, str]]]:
    """Per Instance index: (runner, incarnation, image) of each live pod, leader first."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for pod in _pods(api, ns, name):
        labels = pod.metadata.labels
        out.setdefault(labels[keys.INSTANCE_LABEL], []).append(
            (labels[keys.RUNNER_LABEL], labels[keys.INCARNATION_LABEL], pod.spec.containers[0].image))
    return out


def _whole(gangs: dict[str, list[tuple[str, str, str]]], worker_images: list[str]) -> bool:
    """Every Instance a leader and WORKERS workers of one incarnation; worker images as listed
    (one per Instance, sorted)."""
    if sorted(gangs) != ["0", "1"]:
        return False
    for pods in gangs.values():
        if [runner for runner, _, _ in pods] != ["leader"] + ["worker"] * WORKERS or len({i for _, i, _ in pods}) != 1:
            return False
    return sorted(pods[1][2] for pods in gangs.values()) == worker_images


def _service(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", name)
    return obj


def _ready(api: client.ApiClient, ns: str, name: str) -> bool:
    status = _service(api, ns, name).get("status") or {}
    return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])


def test_a_multinode_engine_is_served_by_gangs_and_a_lost_worker_recreates_its_gang(
        kube_api: client.ApiClient, native_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = native_stack
    name = f"gang-{uuid.uuid4().hex[:5]}"
    create(kube_api, InferenceService, manifest(InferenceService, _spec("vllm/vllm-openai:v0.9"), name=name), ns)
    [stable] = wait_until("the first revision serving 100%", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")) and list(w.values()) == [100] and w), worker, 180)
    replica = wait_until("the projected replica", lambda: native_replica(kube_api, ns, name), worker)
    assert [(r["name"], r["size"]) for r in replica["spec"]["runners"]] == [("leader", 1), ("worker", WORKERS)]
    assert replica["spec"]["replicas"] == 2, "one Instance per gang"
    wait_until("two whole gangs", lambda: _whole(_gangs(kube_api, ns, name), ["vllm/vllm-openai:v0.9"] * 2), worker)

    base = f"{name}-engine"
    leader = client.CoreV1Api(kube_api).read_namespaced_pod(f"{base}-1", ns)
    member = client.CoreV1Api(kube_api).read_namespaced_pod(f"{base}-1-w2", ns)
    assert leader.metadata.labels[keys.RUNNER_LABEL] == "leader"
    assert member.metadata.labels[keys.RUNNER_LABEL] == "worker" and member.metadata.labels[keys.WORKER_LABEL] == "2"
    assert member.metadata.labels["ome.io/inferenceservice"] == name
    env = {e.name: e.value for e in member.spec.containers[0].env or []}
    assert env[keys.RUNNER_ENV] == "worker" and env[keys.LEADER_ADDRESS_ENV] == f"{base}-1.{base}"
    assert {e.name: e.value for e in leader.spec.containers[0].env or []}[keys.RUNNER_ENV] == "leader"
    assert not client.AppsV1Api(kube_api).list_namespaced_deployment(ns).items, "OMENative renders no Deployment"
    wait_until("the revision Service selects the two leaders only",
               lambda: native_endpoints(kube_api, ns, stable) == 2, worker)
    wait_until("the service Ready", lambda: _ready(kube_api, ns, name), worker)
    lifecycle = wait_until("status.components.engine projects the replica", lambda: (
        (life := ((_service(kube_api, ns, name).get("status") or {}).get("components") or {})
         .get("engine", {}).get("lifecycle") or {}).get("readyReplicas") == 2 and life), worker)
    assert lifecycle["labelSelector"] == (native_replica(kube_api, ns, name) or {})["status"]["labelSelector"]

    client.CoreV1Api(kube_api).delete_namespaced_pod(f"{base}-1-w2", ns, grace_period_seconds=0)
    wait_until("the gang recreated whole", lambda: (g := _gangs(kube_api, ns, name)).get("1")
          and {i for _, i, _ in g["1"]} == {"1"} and _whole(g, ["vllm/vllm-openai:v0.9"] * 2), worker, 180)
    assert {i for _, i, _ in _gangs(kube_api, ns, name)["0"]} == {"0"}, "the other gang untouched"
    wait_until("both gangs serving again",
               lambda: native_endpoints(kube_api, ns, stable) == 2 and _ready(kube_api, ns, name),
          worker)


def test_a_worker_only_change_canaries_whole_gangs_through_pacing(
        kube_api: client.ApiClient, native_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = native_stack
    name = f"gcan-{uuid.uuid4().hex[:5]}"
    old, new = "vllm/vllm-openai:v0.9", "vllm/vllm-openai:v0.10"
    create(kube_api, InferenceService, manifest(InferenceService, _spec(old), name=name), ns)
    [stable] = wait_until("the first revision serving 100%", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")) and list(w.values()) == [100] and w), worker, 180)
    wait_until("two whole gangs", lambda: _whole(_gangs(kube_api, ns, name), [old] * 2), worker)

    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "spec": {"engine": _engine(new)}})
    weights = wait_until("the canary at 50%", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")).get(stable) == 50 and len(w) == 2 and w), worker, 180)
    [canary] = [backend for backend in weights if backend != stable]
    assert (native_replica(kube_api, ns, name) or {})["spec"]["pacing"]["partition"] == 1
    wait_until("one gang moved whole, one held", lambda: _whole(_gangs(kube_api, ns, name), [new, old]), worker, 180)
    assert _gangs(kube_api, ns, name)["0"][1][2] == old, "the partition holds the lowest index"
    wait_until("each revision Service has its gang's leader", lambda: native_endpoints(kube_api, ns, canary) == 1
          and native_endpoints(kube_api, ns, stable) == 1, worker)

    revision = _service(kube_api, ns, name)["status"]["components"]["engine"]["canary"]["canaryRevisionHash"]
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "metadata": {"annotations": {"ome.io/rollout-promote": revision}}})
    wait_until("promoted: 100% on the new revision",
               lambda: route_weights(kube_api, ns, f"{name}-engine") == {canary: 100},
          worker, 180)
    wait_until("every gang on the new workers", lambda: _whole(_gangs(kube_api, ns, name), [new] * 2), worker, 180)
    wait_until("Ready with both gangs updated", lambda: _ready(kube_api, ns, name) and (
        (_service(kube_api, ns, name).get("status") or {}).get("components", {}).get("engine", {})
        .get("lifecycle", {}).get("updatedReplicas") == 2), worker, 180)
    # The EndpointSlice controller publishes a pod's readiness a moment after the replica counts it, so the
    # revision Service's endpoints are waited for, not read once.
    wait_until("the promoted revision Service has both leaders",
               lambda: native_endpoints(kube_api, ns, canary) == 2, worker)


def test_a_gang_canary_rolls_back_through_rollback_to_revision(
        kube_api: client.ApiClient, native_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = native_stack
    name = f"gback-{uuid.uuid4().hex[:5]}"
    old, new = "vllm/vllm-openai:v0.9", "vllm/vllm-openai:v0.10"
    create(kube_api, InferenceService, manifest(InferenceService, _spec(old), name=name), ns)
    [stable] = wait_until("the first revision serving 100%", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")) and list(w.values()) == [100] and w), worker, 180)
    wait_until("two whole gangs", lambda: _whole(_gangs(kube_api, ns, name), [old] * 2), worker)
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "spec": {"engine": _engine(new)}})
    wait_until("the canary at 50% with one gang moved", lambda: (
        route_weights(kube_api, ns, f"{name}-engine").get(stable) == 50
        and _whole(_gangs(kube_api, ns, name), [new, old])), worker, 180)
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "metadata": {"annotations": {"ome.io/rollout-rollback": "true"}}})
    wait_until("traffic back on the stable revision", lambda: route_weights(kube_api, ns, f"{name}-engine")
          == {stable: 100}, worker, 180)
    wait_until("every gang back on the stable workers",
               lambda: _whole(_gangs(kube_api, ns, name), [old] * 2), worker, 180)
    replica = native_replica(kube_api, ns, name) or {}
    back = replica["spec"]["pacing"].get("rollbackToRevision")
    assert back and back != replica["status"]["updateRevision"], replica["spec"]["pacing"]
    wait_until("both gangs serving the stable revision", lambda: native_endpoints(kube_api, ns, stable) == 2, worker)
